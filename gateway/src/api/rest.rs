//! Routes and handlers of the public REST API. Handlers parse and check the
//! request, then hand one closure to the sequencer thread; nothing here
//! decides a business rule.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, MethodRouter};
use axum::{Json, Router};
use replay::history::History;
use sequencer::limits::{FILLS_LIMIT_MAX, FILLS_LIMIT_MIN, LIST_LIMIT_MAX};
use sequencer::query::{OrderFilter, OrderLookup};
use sequencer::types::{Environment, KeyIdx, UNLISTED_MARKET};
use sequencer::{Command, ErrorCode, NewOrder, Reply};
use serde_json::{json, Value};

use crate::api::json;
use crate::api::parse::{order_body, Params};
use crate::auth::{self, Lockout};
use crate::engine::{Answer, AnswerBody, Finished, Submitter, WriteKind};
use crate::error::ApiError;

/// The route's one path segment as text; `None` when it cannot be read
/// (not UTF-8 once decoded). Each extractor below says what that means.
pub(crate) async fn path_text<S: Send + Sync>(
    parts: &mut axum::http::request::Parts,
    state: &S,
) -> Option<String> {
    <Path<String> as axum::extract::FromRequestParts<S>>::from_request_parts(parts, state)
        .await
        .ok()
        .map(|Path(text)| text)
}

/// An `{order_id}` path segment; one that cannot be read is no order.
pub struct OrderIdParam(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for OrderIdParam {
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        path_text(parts, state).await.map(Self).ok_or_else(|| {
            ApiError::new(ErrorCode::OrderNotFound, "No such order on this account.")
        })
    }
}

/// A `{ticker}` path segment; one that cannot be read is a bad request.
pub struct TickerParam(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for TickerParam {
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        path_text(parts, state)
            .await
            .map(Self)
            .ok_or_else(|| ApiError::bad_request("The ticker in the path is not valid UTF-8."))
    }
}

/// Refuses any query parameter on endpoints that take none.
fn no_params(uri: &Uri) -> Result<(), ApiError> {
    Params::parse(uri.query(), &[]).map(|_| ())
}

/// Largest request body, in bytes.
pub const BODY_BYTES_MAX: usize = 16 * 1024;

/// What every handler shares.
pub struct App {
    pub submitter: Submitter,
    pub environment: Environment,
    pub lockout: Arc<Lockout>,
    pub openapi: &'static str,
    /// The websocket's publisher and connection limits (`/v1/ws`).
    pub ws: Arc<crate::ws::Hub>,
    /// Where reads past the history tail go (docs/history-store.md).
    pub history: Option<Arc<History>>,
}

/// A read's outcome on the sequencer thread: the answer, or the part of it
/// that goes on in the history store, finished on a blocking thread.
enum ReadOut {
    Done(Answer),
    History(HistoryRead),
}

/// The rest of a read, with the history store.
type HistoryRead = Box<dyn FnOnce(&History) -> Result<Value, ApiError> + Send>;

/// How long a read past the tail waits for the history writer.
const HISTORY_WAIT: Duration = Duration::from_secs(5);

fn history_failed(e: std::io::Error) -> ApiError {
    tracing::error!(error = %e, "history store read failed");
    ApiError::unavailable("The history store could not be read; try again later.")
}

/// A record the history store should hold and does not: the store lost
/// it, and is marked damaged (written anew at the next start).
fn history_missing(history: &History, what: String) -> ApiError {
    history_failed(history.missing(&what))
}

/// A market's ticker from the history store, remembered for the page.
fn ticker_of(
    history: &History,
    tickers: &mut std::collections::BTreeMap<u32, String>,
    market: u32,
) -> Result<String, ApiError> {
    if let Some(t) = tickers.get(&market) {
        return Ok(t.clone());
    }
    let ticker = history
        .ticker(market)
        .map_err(history_failed)?
        .ok_or_else(|| history_missing(history, format!("the ticker of market {market}")))?;
    tickers.insert(market, ticker.clone());
    Ok(ticker)
}

type Shared = State<Arc<App>>;
type Peer = ConnectInfo<SocketAddr>;

/// Every (method, path under `/v1`) the public router serves, in axum's
/// path syntax, which is also OpenAPI's. The router is built from this list,
/// and `gateway/tests/openapi.rs` checks that `openapi.json` documents
/// exactly these. axum answers `HEAD` wherever `GET` is served.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/portfolio/orders"),
    ("POST", "/portfolio/orders"),
    ("DELETE", "/portfolio/orders"),
    ("GET", "/portfolio/orders/{order_id}"),
    ("DELETE", "/portfolio/orders/{order_id}"),
    ("GET", "/portfolio/positions"),
    ("GET", "/portfolio/fills"),
    ("GET", "/portfolio/balance"),
    ("GET", "/account"),
    ("GET", "/markets"),
    ("GET", "/markets/{ticker}"),
    ("GET", "/markets/{ticker}/orderbook"),
    ("GET", "/markets/{ticker}/trades"),
    ("GET", "/openapi.json"),
    ("GET", "/asyncapi.json"),
];

/// The handler of one entry of [`ROUTES`].
fn handler(method: &str, path: &str) -> MethodRouter<Arc<App>> {
    match (method, path) {
        ("GET", "/portfolio/orders") => get(list_orders),
        ("POST", "/portfolio/orders") => post(place_order),
        ("DELETE", "/portfolio/orders") => delete(cancel_all),
        ("GET", "/portfolio/orders/{order_id}") => get(get_order),
        ("DELETE", "/portfolio/orders/{order_id}") => delete(cancel_order),
        ("GET", "/portfolio/positions") => get(positions),
        ("GET", "/portfolio/fills") => get(fills),
        ("GET", "/portfolio/balance") => get(balance),
        ("GET", "/account") => get(account),
        ("GET", "/markets") => get(markets),
        ("GET", "/markets/{ticker}") => get(market),
        ("GET", "/markets/{ticker}/orderbook") => get(orderbook),
        ("GET", "/markets/{ticker}/trades") => get(trades),
        ("GET", "/openapi.json") => get(openapi),
        ("GET", "/asyncapi.json") => get(asyncapi),
        _ => panic!("ROUTES lists {method} {path}, which has no handler"),
    }
}

/// The public router: `/v1/...` (exactly [`ROUTES`]), `/metrics`, and the
/// spec's error shape for every unknown path or method.
pub fn router(app: Arc<App>) -> Router {
    // axum merges the method routers of one path added one by one. The
    // routes are registered with their `/v1` prefix rather than nested:
    // a nested router costs every request a prefix strip and another
    // boxed service.
    let router = ROUTES
        .iter()
        .fold(Router::new(), |router, &(method, path)| {
            router.route(&format!("/v1{path}"), handler(method, path))
        });
    // The websocket, documented in asyncapi.json rather than openapi.json.
    router
        .route("/v1/ws", get(crate::ws::handler))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), measure))
        .with_state(app)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("No such path: {}.", uri.path()),
    )
}

async fn method_not_allowed(uri: Uri) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("This method is not allowed on {}.", uri.path()),
    )
}

/// Counts and times every request by its route.
async fn measure(State(app): Shared, request: Request, next: Next) -> Response {
    // A shared `Arc<str>` of the router's, not a copy.
    let route = request.extensions().get::<MatchedPath>().cloned();
    // Standard methods by name; any other counts as one label (a client
    // must not grow the metrics with made-up methods).
    let method: &'static str = match request.method().as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "OTHER",
    };
    let started = Instant::now();
    let response = next.run(read_unread_body(request).await).await;
    app.submitter.metrics.record_request(
        method,
        route.as_ref().map_or("unmatched", MatchedPath::as_str),
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

fn ok(status: StatusCode, body: Value) -> Answer {
    Ok((status, body))
}

/// A write's answer as an HTTP response.
fn respond_write(answer: Finished) -> Response {
    match answer {
        Ok((status, AnswerBody::Ready(body))) => (status, Json(body)).into_response(),
        Ok((status, AnswerBody::Order { ticker, order })) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            json::order_answer(&ticker, &order),
        )
            .into_response(),
        // Only a cancel answers so, and it reads the store first.
        Ok((_, AnswerBody::OrderInHistory { order_id, .. })) => {
            tracing::error!(order_id, "an answer from the history store was not read");
            ApiError::new(ErrorCode::InternalError, "Internal error.").into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// An answer as an HTTP response (the admin API uses it too).
pub(crate) fn respond(answer: Answer) -> Response {
    match answer {
        Ok((status, body)) => (status, Json(body)).into_response(),
        Err(e) => e.into_response(),
    }
}

impl App {
    /// The caller of a keyed request, after the lockout and format checks.
    pub(crate) fn caller(
        &self,
        headers: &HeaderMap,
        ip: IpAddr,
        rate_limited: bool,
    ) -> Result<crate::engine::Caller, ApiError> {
        self.lockout.check(ip)?;
        auth::caller(headers, ip, self.environment, rate_limited).inspect_err(|e| {
            if e.code == ErrorCode::Unauthorized
                && e.message == sequencer::auth::KeyRefusal::Invalid.message()
            {
                self.lockout.fail(ip);
            }
        })
    }

    /// A read that needs a key.
    async fn keyed_read(
        &self,
        headers: &HeaderMap,
        ip: IpAddr,
        read: impl FnOnce(&sequencer::State, KeyIdx) -> Answer + Send + 'static,
    ) -> Response {
        self.keyed_read_history(headers, ip, move |state, key| {
            Ok(ReadOut::Done(read(state, key)))
        })
        .await
    }

    /// A keyed read whose answer may go on in the history store.
    async fn keyed_read_history(
        &self,
        headers: &HeaderMap,
        ip: IpAddr,
        read: impl FnOnce(&sequencer::State, KeyIdx) -> Result<ReadOut, ApiError> + Send + 'static,
    ) -> Response {
        let caller = match self.caller(headers, ip, false) {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        };
        self.read_history(Some(caller), move |state, key| {
            read(state, key.expect("authenticated"))
        })
        .await
    }

    /// A public read whose answer may go on in the history store.
    async fn public_read_history(
        &self,
        read: impl FnOnce(&sequencer::State) -> Result<ReadOut, ApiError> + Send + 'static,
    ) -> Response {
        self.read_history(None, move |state, _| read(state)).await
    }

    /// Runs `read` on the sequencer thread; when it reaches past the live
    /// state, finishes it from the history store once the store holds
    /// everything evicted before the read (read-your-writes holds there
    /// too), on a blocking thread.
    async fn read_history(
        &self,
        caller: Option<crate::engine::Caller>,
        read: impl FnOnce(&sequencer::State, Option<KeyIdx>) -> Result<ReadOut, ApiError>
            + Send
            + 'static,
    ) -> Response {
        let history = self.history.clone();
        let answer = self
            .submitter
            .read(caller, move |state, key| {
                let out = read(state, key)?;
                // What the history writer had been sent when the read ran:
                // the store must hold that much before it is read.
                let sent = match out {
                    ReadOut::History(_) => history.as_ref().map_or(0, |h| h.sent()),
                    ReadOut::Done(_) => 0,
                };
                Ok((out, sent))
            })
            .await;
        let (rest, sent) = match answer {
            Err(e) => return e.into_response(),
            Ok((ReadOut::Done(answer), _)) => return respond(answer),
            Ok((ReadOut::History(rest), sent)) => (rest, sent),
        };
        self.finish_from_history(sent, rest).await
    }

    /// Finishes an answer from the history store once it holds everything
    /// its writer had been sent (`sent`) when the sequencer answered, so
    /// read-your-writes holds there too; on a blocking thread.
    async fn finish_from_history(&self, sent: u64, rest: HistoryRead) -> Response {
        let Some(history) = self.history.clone() else {
            return ApiError::unavailable("This server keeps no history store.").into_response();
        };
        let finished = tokio::task::spawn_blocking(move || {
            if !history.wait_written(sent, HISTORY_WAIT) {
                return Err(ApiError::unavailable(if history.failed() {
                    "The history store could not be written; it is rebuilt at the next start."
                } else {
                    "The history store is catching up; try again shortly."
                }));
            }
            rest(&history)
        })
        .await;
        match finished {
            Ok(Ok(body)) => (StatusCode::OK, Json(body)).into_response(),
            Ok(Err(e)) => e.into_response(),
            Err(_) => ApiError::unavailable("The history read did not finish.").into_response(),
        }
    }

    /// A public read.
    async fn public_read(
        &self,
        read: impl FnOnce(&sequencer::State) -> Answer + Send + 'static,
    ) -> Response {
        self.public_read_history(move |state| Ok(ReadOut::Done(read(state))))
            .await
    }
}

// ----- order entry ------------------------------------------------------------------

/// Reads, before routing, the body of a request that carries one to a
/// handler that would not read it (an unknown path, a method not allowed, a
/// GET or DELETE sent with a body), so that answering it does not close
/// the connection (see [`refuse_after_body`]). Order entry reads its own
/// body after its key checks; requests without a body pass untouched.
async fn read_unread_body(request: Request) -> Request {
    let headers = request.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    let order_entry =
        request.method() == axum::http::Method::POST && request.uri().path() == ORDER_ENTRY_PATH;
    if !has_body || order_entry {
        return request;
    }
    let (parts, body) = request.into_parts();
    // A body over the limit, or one too slow: the request goes on without
    // it (no handler here reads one, so the answer is what it would have
    // been), and the server closes the connection after answering.
    let body = drain(body).await.map_or_else(Body::empty, Body::from);
    Request::from_parts(parts, body)
}

/// Reads a whole body, up to [`BODY_BYTES_MAX`] and for at most a second;
/// `None` past either.
async fn drain(body: Body) -> Option<axum::body::Bytes> {
    tokio::time::timeout(Duration::from_secs(1), to_bytes(body, BODY_BYTES_MAX))
        .await
        .ok()?
        .ok()
}

/// The refusal of a body over [`BODY_BYTES_MAX`].
fn body_too_large() -> ApiError {
    ApiError::bad_request(format!("The body is larger than {BODY_BYTES_MAX} bytes."))
}

/// The path of order entry, whose handler reads its own body.
const ORDER_ENTRY_PATH: &str = "/v1/portfolio/orders";

/// Refuses a request whose body has not been read yet, after reading it (up
/// to the body limit, for at most a second). A body left unread makes the
/// HTTP server close the connection, and a client that reuses its pooled
/// connection for its next request then sees it drop instead of an answer.
/// Refused callers keep their connection like everyone else.
async fn refuse_after_body(body: Body, e: ApiError) -> Response {
    drain(body).await;
    e.into_response()
}

async fn place_order(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    body: Body,
) -> Response {
    if let Err(e) = no_params(&uri) {
        return refuse_after_body(body, e).await;
    }
    let caller = match app.caller(&headers, peer.ip(), true) {
        Ok(c) => c,
        Err(e) => return refuse_after_body(body, e).await,
    };
    let bytes = match to_bytes(body, BODY_BYTES_MAX).await {
        Ok(b) => b,
        Err(_) => return body_too_large().into_response(),
    };
    let mut order = match order_body(&bytes) {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    // Shared by the two closures and, for an order placed, handed on to
    // the answer written on this thread, which frees it: the sequencer
    // thread then drops only a count (glibc's free of a gateway thread's
    // block there was a tenth of that thread's time).
    let ticker: Arc<str> = Arc::from(std::mem::take(&mut order.market_ticker));
    let market_ticker = ticker.clone();
    let answer = app
        .submitter
        .write(
            WriteKind::Place,
            Some(caller),
            move |state: &sequencer::State, key: Option<KeyIdx>| {
                let market = state
                    .market_ids
                    .get(&*market_ticker)
                    .copied()
                    .unwrap_or(UNLISTED_MARKET);
                let key = key.expect("authenticated");
                Ok(Command::PlaceOrder {
                    key,
                    order: NewOrder {
                        market,
                        outcome: order.outcome,
                        action: order.action,
                        price: order.price,
                        count: order.count,
                        time_in_force: order.time_in_force,
                        post_only: order.post_only,
                        client_order_id: order.client_order_id,
                    },
                })
            },
            place_answer(ticker),
        )
        .await;
    respond_write(answer)
}

/// The answer of an order entry: the order (written on the gateway thread
/// with the ticker it was placed by, the market's own), or the refusal,
/// which names the ticker when the market was never listed (the sequencer
/// knows it by `UNLISTED_MARKET` only).
fn place_answer(ticker: Arc<str>) -> impl FnOnce(&sequencer::State, Reply) -> Finished + Send {
    move |state, reply| match reply {
        Reply::Rejected(r)
            if r.code == ErrorCode::MarketNotOpen && !state.market_ids.contains_key(&*ticker) =>
        {
            Err(ApiError::new(
                ErrorCode::MarketNotOpen,
                format!("Market {ticker} is not on the order book."),
            ))
        }
        // A pause with an end: the seconds to it as `Retry-After` too, for
        // clients that read the header rather than the message.
        Reply::Rejected(r) if r.code == ErrorCode::TradingPaused => {
            let mut error = ApiError::from(r);
            error.retry_after_secs = state
                .pause
                .and_then(|p| p.until_ts_ms)
                .map(|until| until.saturating_sub(state.now_ms).div_ceil(1000).max(1));
            Err(error)
        }
        other => order_reply(StatusCode::CREATED, other, |_| ticker),
    }
}

/// The answer of a write whose reply is one order: `{"order": Order}`,
/// written on the gateway thread from the order and its market's ticker.
fn order_answer(status: StatusCode) -> impl FnOnce(&sequencer::State, Reply) -> Finished + Send {
    move |state, reply| {
        order_reply(status, reply, |order| {
            Arc::from(json::ticker(state, order.market))
        })
    }
}

/// `{"order": Order}` with the ticker `ticker` gives for the order, written
/// later on the gateway thread; a refusal as its error.
fn order_reply(
    status: StatusCode,
    reply: Reply,
    ticker: impl FnOnce(&sequencer::state::Order) -> Arc<str>,
) -> Finished {
    match reply {
        Reply::Order { order, .. } => Ok((
            status,
            AnswerBody::Order {
                ticker: ticker(&order),
                order,
            },
        )),
        Reply::Rejected(r) => Err(r.into()),
        other => Err(internal(&other)),
    }
}

fn internal(reply: &Reply) -> ApiError {
    tracing::error!(?reply, "unexpected reply");
    ApiError::new(ErrorCode::InternalError, "Internal error.")
}

async fn cancel_order(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    OrderIdParam(id): OrderIdParam,
    uri: Uri,
) -> Response {
    if let Err(e) = no_params(&uri) {
        return e.into_response();
    }
    let caller = match app.caller(&headers, peer.ip(), false) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let history = app.history.clone();
    let answer = app
        .submitter
        .write(
            WriteKind::Cancel,
            Some(caller),
            move |_: &sequencer::State, key: Option<KeyIdx>| {
                let order_id = parse_order_id(&id)?;
                Ok(Command::CancelOrder {
                    key: key.expect("authenticated"),
                    order_id,
                })
            },
            move |state: &sequencer::State, reply: Reply| match reply {
                Reply::OrderInHistory { order_id, account } => Ok((
                    StatusCode::OK,
                    AnswerBody::OrderInHistory {
                        order_id,
                        account,
                        sent: history.as_ref().map_or(0, |h| h.sent()),
                    },
                )),
                other => order_answer(StatusCode::OK)(state, other),
            },
        )
        .await;
    match answer {
        Ok((
            _,
            AnswerBody::OrderInHistory {
                order_id,
                account,
                sent,
            },
        )) => {
            app.finish_from_history(
                sent,
                Box::new(move |history| order_from_history(history, order_id, account)),
            )
            .await
        }
        answer => respond_write(answer),
    }
}

/// `{"order": Order}` of an order the history store holds, if it is
/// `account`'s; `ORDER_NOT_FOUND` for another account's, as for an id
/// never used. The sequencer sends only ids it evicted, so an empty slot
/// is a store that lost the order: 503, never "no such order" (a client
/// told so might place it again; it answered 404 when `orders.dat` was
/// deleted or cut short).
fn order_from_history(
    history: &History,
    order_id: u64,
    account: sequencer::types::AccountId,
) -> Result<Value, ApiError> {
    let order = history
        .order(order_id)
        .map_err(history_failed)?
        .ok_or_else(|| history_missing(history, format!("order {order_id}")))?;
    if order.account != account {
        return Err(ApiError::from(sequencer::query::order_not_found(order_id)));
    }
    let ticker = ticker_of(history, &mut Default::default(), order.market)?;
    Ok(json!({ "order": json::order_in(&ticker, &order) }))
}

fn parse_order_id(id: &str) -> Result<u64, ApiError> {
    id.parse::<u64>()
        .ok()
        // The id exactly as issued: digits only, no leading zero (`01`
        // is not order 1's id).
        .filter(|n| *n > 0 && !id.starts_with('0') && id.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::OrderNotFound,
                format!("No order {id} on this account."),
            )
        })
}

async fn cancel_all(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let caller = match app.caller(&headers, peer.ip(), false) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let filters = Params::parse(uri.query(), &["market_ticker", "series_ticker"]).and_then(|p| {
        Ok((
            p.market_ticker("market_ticker")?,
            p.series_ticker("series_ticker")?,
        ))
    });
    let (market, series) = match filters {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let answer = app
        .submitter
        .write(
            WriteKind::Cancel,
            Some(caller),
            move |_: &sequencer::State, key: Option<KeyIdx>| Ok(Command::CancelAll { key: key.expect("authenticated"), market, series }),
            |_: &sequencer::State, reply| match reply {
                Reply::Canceled { order_ids } => Ok((
                    StatusCode::OK,
                    AnswerBody::Ready(
                        json!({ "canceled_order_ids": order_ids.iter().map(u64::to_string).collect::<Vec<_>>() }),
                    ),
                )),
                Reply::Rejected(r) => Err(r.into()),
                other => Err(internal(&other)),
            },
        )
        .await;
    respond_write(answer)
}

// ----- account reads ---------------------------------------------------------------------

async fn get_order(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    OrderIdParam(id): OrderIdParam,
    uri: Uri,
) -> Response {
    if let Err(e) = no_params(&uri) {
        return e.into_response();
    }
    app.keyed_read_history(&headers, peer.ip(), move |state, key| {
        let order_id = parse_order_id(&id)?;
        match state.query_order(key, order_id)? {
            OrderLookup::Live(order) => Ok(ReadOut::Done(ok(
                StatusCode::OK,
                json!({ "order": json::order(state, &order) }),
            ))),
            OrderLookup::InHistory { account } => Ok(ReadOut::History(Box::new(move |history| {
                order_from_history(history, order_id, account)
            }))),
        }
    })
    .await
}

async fn list_orders(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let filter = Params::parse(
        uri.query(),
        &[
            "market_ticker",
            "client_order_id",
            "status",
            "limit",
            "cursor",
        ],
    )
    .and_then(|p| {
        Ok(OrderFilter {
            market_ticker: p.market_ticker("market_ticker")?,
            client_order_id: p.client_order_id()?,
            status: p.order_status()?,
            limit: p.bounded("limit", 1, LIST_LIMIT_MAX)?,
            cursor: p.cursor()?,
        })
    });
    let filter = match filter {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    app.keyed_read(&headers, peer.ip(), move |state, key| {
        let page = state.query_orders(key, &filter)?;
        let orders: Vec<Value> = page.items.iter().map(|o| json::order(state, o)).collect();
        ok(
            StatusCode::OK,
            json!({ "orders": orders, "cursor": cursor(page.cursor) }),
        )
    })
    .await
}

fn cursor(next: Option<u64>) -> String {
    next.map_or_else(String::new, |c| c.to_string())
}

async fn positions(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Err(e) = Params::parse(uri.query(), &[]) {
        return e.into_response();
    }
    app.keyed_read(&headers, peer.ip(), |state, key| {
        let positions: Vec<Value> = state
            .query_positions(key)?
            .iter()
            .map(json::position)
            .collect();
        ok(StatusCode::OK, json!({ "positions": positions }))
    })
    .await
}

async fn fills(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let params = Params::parse(uri.query(), &["market_ticker", "limit", "cursor"]).and_then(|p| {
        Ok((
            p.market_ticker("market_ticker")?,
            p.bounded("limit", FILLS_LIMIT_MIN, FILLS_LIMIT_MAX)?,
            p.cursor()?,
        ))
    });
    let (market, limit, cursor_in) = match params {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    app.keyed_read_history(&headers, peer.ip(), move |state, key| {
        let page = state.query_fills(key, market.as_deref(), limit, cursor_in)?;
        let mut fills: Vec<Value> = page.items.iter().map(|f| json::fill(state, f)).collect();
        let Some(rest) = page.rest else {
            return Ok(ReadOut::Done(ok(
                StatusCode::OK,
                json!({ "fills": fills, "cursor": cursor(page.cursor) }),
            )));
        };
        // The live tail ran out: the page goes on from the account's
        // newest evicted fill, below the cursor and the live fills.
        let below = page.items.last().map(|f| f.id).or(cursor_in);
        Ok(ReadOut::History(Box::new(move |history| {
            let (older, next) = history.fills_page(&rest, below).map_err(history_failed)?;
            let mut tickers = std::collections::BTreeMap::new();
            for f in &older {
                let ticker = ticker_of(history, &mut tickers, f.market)?;
                fills.push(json::fill_in(&ticker, f));
            }
            Ok(json!({ "fills": fills, "cursor": cursor(next) }))
        })))
    })
    .await
}

async fn balance(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Err(e) = Params::parse(uri.query(), &[]) {
        return e.into_response();
    }
    app.keyed_read(&headers, peer.ip(), |state, key| {
        ok(
            StatusCode::OK,
            json!({ "balance": json::balance(&state.query_balance(key)?) }),
        )
    })
    .await
}

async fn account(
    State(app): Shared,
    ConnectInfo(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Err(e) = no_params(&uri) {
        return e.into_response();
    }
    app.keyed_read(&headers, peer.ip(), |state, key| {
        let key = state.query_account(key)?;
        ok(
            StatusCode::OK,
            json!({ "account": json::account(key, crate::engine::now_ms()) }),
        )
    })
    .await
}

// ----- market data ------------------------------------------------------------------------

async fn markets(State(app): Shared, uri: Uri) -> Response {
    let params = Params::parse(uri.query(), &["series_ticker", "status", "limit", "cursor"])
        .and_then(|p| {
            Ok((
                p.series_ticker("series_ticker")?,
                p.market_status()?,
                p.bounded("limit", 1, LIST_LIMIT_MAX)?,
                p.cursor()?,
            ))
        });
    let (series, status, limit, cursor_in) = match params {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    app.public_read(move |state| {
        let page = state.query_markets(series.as_deref(), status, limit, cursor_in)?;
        let markets: Vec<Value> = page.items.iter().map(|m| json::market(state, m)).collect();
        ok(
            StatusCode::OK,
            json!({ "markets": markets, "cursor": cursor(page.cursor) }),
        )
    })
    .await
}

fn checked_ticker(ticker: &str) -> Result<(), ApiError> {
    if sequencer::validate::is_market_ticker(ticker) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "The ticker does not match the market ticker pattern.",
        ))
    }
}

async fn market(State(app): Shared, TickerParam(ticker): TickerParam, uri: Uri) -> Response {
    if let Err(e) =
        checked_ticker(&ticker).and_then(|_| Params::parse(uri.query(), &[]).map(|_| ()))
    {
        return e.into_response();
    }
    app.public_read(move |state| {
        ok(
            StatusCode::OK,
            json!({ "market": json::market(state, state.query_market(&ticker)?) }),
        )
    })
    .await
}

async fn orderbook(State(app): Shared, TickerParam(ticker): TickerParam, uri: Uri) -> Response {
    let depth = checked_ticker(&ticker)
        .and_then(|_| Params::parse(uri.query(), &["depth"]))
        .and_then(|p| p.bounded("depth", 1, 99));
    let depth = match depth {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    app.public_read(move |state| {
        let book = state.query_orderbook(&ticker, depth)?;
        ok(
            StatusCode::OK,
            json!({ "orderbook": json::orderbook(&book) }),
        )
    })
    .await
}

async fn trades(State(app): Shared, TickerParam(ticker): TickerParam, uri: Uri) -> Response {
    let params = checked_ticker(&ticker)
        .and_then(|_| Params::parse(uri.query(), &["limit", "cursor"]))
        .and_then(|p| Ok((p.bounded("limit", 1, LIST_LIMIT_MAX)?, p.cursor()?)));
    let (limit, cursor_in) = match params {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    app.public_read_history(move |state| {
        let page = state.query_trades(&ticker, limit, cursor_in)?;
        let Some(rest) = page.rest else {
            let trades: Vec<Value> = page.items.iter().map(|t| json::trade(state, t)).collect();
            return Ok(ReadOut::Done(ok(
                StatusCode::OK,
                json!({ "trades": trades, "cursor": cursor(page.cursor) }),
            )));
        };
        // A settled market whose trades moved to the history store.
        Ok(ReadOut::History(Box::new(move |history| {
            let market = rest.from as u32;
            let all = history
                .trades(market)
                .map_err(history_failed)?
                .ok_or_else(|| {
                    history_missing(history, format!("the trades of market {market}"))
                })?;
            let page = sequencer::query::trades_page(&all, rest.wanted, cursor_in);
            let trades: Vec<Value> = page
                .items
                .iter()
                .map(|t| json::trade_in(&ticker, t))
                .collect();
            Ok(json!({ "trades": trades, "cursor": cursor(page.cursor) }))
        })))
    })
    .await
}

async fn openapi(State(app): Shared) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        app.openapi,
    )
        .into_response()
}

/// The websocket's AsyncAPI document, for client generators and readers.
async fn asyncapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        crate::server::ASYNCAPI,
    )
        .into_response()
}

async fn metrics(State(app): Shared) -> Response {
    app.submitter.metrics.queue_depth.store(
        app.submitter.queue_depth() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let mut text = app.submitter.metrics.render();
    crate::metrics::render_ws(&mut text, &app.ws);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_one_handler_and_appears_once() {
        let mut seen = std::collections::BTreeSet::new();
        for &(method, path) in ROUTES {
            assert!(
                seen.insert((method, path)),
                "{method} {path} is listed twice"
            );
            assert!(
                path.starts_with('/') && !path.starts_with("/v1"),
                "{path} is a path under /v1"
            );
            assert!(["GET", "POST", "DELETE"].contains(&method), "{method}");
            let _ = handler(method, path);
        }
    }
}
