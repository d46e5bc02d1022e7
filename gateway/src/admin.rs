//! The operator's interface: a small JSON API on its own listener (loopback
//! by default), guarded by a token kept in the data directory. Every change
//! it makes is a journaled command, like any other.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use sequencer::command::{AccountFlag, NewKey};
use sequencer::types::{Environment, KeyLimits, MarketStatus, Scopes};
use sequencer::wire::{dollars, parse_dollars, parse_e8};
use sequencer::{Command, ErrorCode, Reply};
use serde_json::{json, Map, Value};
use subtle::ConstantTimeEq;

use crate::api::parse::Params;
use crate::auth::{fingerprint, random_token};
use crate::engine::Submitter;
use crate::error::ApiError;

/// What the admin handlers share.
pub struct Admin {
    pub submitter: Submitter,
    pub token: String,
    pub environment: Environment,
}

type Shared = State<Arc<Admin>>;

/// The admin router; every route needs `Authorization: Bearer <token>`.
pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/admin/accounts", post(create_account))
        .route("/admin/accounts/{id}", get(show_account))
        .route("/admin/accounts/{id}/deposit", post(deposit))
        .route("/admin/accounts/{id}/withdraw", post(withdraw))
        .route("/admin/accounts/{id}/flags", post(flags))
        .route("/admin/accounts/{id}/risk-cap", post(risk_cap))
        .route("/admin/keys", post(issue_key).get(list_keys))
        .route("/admin/keys/{key_id}/revoke", post(revoke_key))
        .route("/admin/keys/{key_id}/limits", post(key_limits))
        .route("/admin/trading/pause", post(pause))
        .route("/admin/trading/resume", post(resume))
        .route("/admin/series", get(series))
        .route("/admin/markets", get(markets))
        .route("/admin/prices", post(price))
        .route("/admin/state", get(state_hashes))
        .fallback(|uri: Uri| async move {
            ApiError::new(
                ErrorCode::NotFound,
                format!("No such path: {}.", uri.path()),
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "This method is not allowed here.",
            )
        })
        .layer(middleware::from_fn_with_state(admin.clone(), guard))
        .with_state(admin)
}

/// Refuses requests without the token (constant-time compare), and those
/// that send two `Authorization` headers, as the public API does: which of
/// them would count is for no proxy in between to decide.
async fn guard(State(admin): Shared, request: Request, next: Next) -> Response {
    let mut sent = request
        .headers()
        .get_all(axum::http::header::AUTHORIZATION)
        .iter();
    let given = match (sent.next(), sent.next()) {
        (Some(value), None) => value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or(""),
        _ => "",
    };
    if given.len() != admin.token.len()
        || !bool::from(given.as_bytes().ct_eq(admin.token.as_bytes()))
    {
        return ApiError::new(
            ErrorCode::Unauthorized,
            "The admin token is missing or wrong.",
        )
        .into_response();
    }
    next.run(request).await
}

async fn body(raw: Body) -> Result<Map<String, Value>, ApiError> {
    let bytes = to_bytes(raw, 64 * 1024)
        .await
        .map_err(|_| ApiError::bad_request("The body is too large."))?;
    if bytes.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::bad_request("The body must be a JSON object.")),
    }
}

/// A path segment (an account or key id). One that cannot be read (not
/// UTF-8 once decoded) is refused in the API's error shape, not axum's
/// plain-text rejection.
struct Segment(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Segment {
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        crate::api::rest::path_text(parts, state)
            .await
            .map(Self)
            .ok_or_else(|| ApiError::bad_request("The id in the path is not valid UTF-8."))
    }
}

fn only(map: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(crate::api::parse::unknown_name("field", k, allowed)),
        None => Ok(()),
    }
}

fn money(map: &Map<String, Value>, field: &str) -> Result<Option<i64>, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "Field {field} must be a dollar amount such as \"100.00\"."
        ))
    };
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_dollars(s).map(Some).ok_or_else(|| {
            // Well formed but more digits than any amount the venue holds.
            let digits = s.split_once('.').map_or(s.as_str(), |(whole, _)| whole);
            if digits.len() > 12 && s.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
                ApiError::bad_request(format!(
                    "Field {field} must be at most $10,000,000,000 (ten billion dollars)."
                ))
            } else {
                bad()
            }
        }),
        // A JSON number is taken only when it is a whole number of cents
        // (10.005 is refused, as "10.005" is), never rounded.
        Some(Value::Number(n)) => n
            .as_f64()
            .map(|f| f * 100.0)
            .filter(|c| c.is_finite() && *c >= 0.0 && *c < 1e14 && (c - c.round()).abs() < 1e-6)
            .map(|c| Some(c.round() as i64))
            .ok_or_else(bad),
        Some(_) => Err(bad()),
    }
}

fn account_id(text: &str) -> Result<u32, ApiError> {
    text.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::NotFound,
            format!("account {text} does not exist"),
        )
    })
}

fn reply_ok(reply: Result<Reply, ApiError>, ok: impl FnOnce(Reply) -> Value) -> Response {
    match reply {
        Ok(Reply::Rejected(r)) => ApiError::from(r).into_response(),
        Ok(reply) => (StatusCode::OK, Json(ok(reply))).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn create_account(State(admin): Shared, raw: Body) -> Response {
    let map = match body(raw).await.and_then(|m| only(&m, &["cash"]).map(|_| m)) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let cash = match money(&map, "cash") {
        Ok(c) => c.unwrap_or(0),
        Err(e) => return e.into_response(),
    };
    // Checked before the account exists: a refused deposit must not leave
    // an account behind (a retry would make another).
    if cash > 0 {
        if let Err(r) = sequencer::engine::check_amount(cash) {
            return ApiError::from(r).into_response();
        }
    }
    let account = match admin.submitter.internal(Command::CreateAccount).await {
        Ok(Reply::AccountCreated { account }) => account,
        Ok(other) => return reply_ok(Ok(other), |_| Value::Null),
        Err(e) => return e.into_response(),
    };
    if cash > 0 {
        let deposit = admin
            .submitter
            .internal(Command::Deposit {
                account,
                cents: cash,
            })
            .await;
        match deposit {
            Ok(Reply::Rejected(r)) => return ApiError::from(r).into_response(),
            // The account exists but its cash is not confirmed: say so
            // rather than answer as if it were deposited.
            Err(e) => {
                return ApiError::unavailable(format!(
                    "Account {account} was created, but its deposit was not confirmed: {} \
                     Check it with `updown admin account show {account}`.",
                    e.message
                ))
                .into_response()
            }
            Ok(_) => {}
        }
    }
    (
        StatusCode::OK,
        Json(json!({ "account_id": account, "cash": dollars(cash) })),
    )
        .into_response()
}

async fn move_money(admin: &Admin, id: &str, raw: Body, deposit: bool) -> Response {
    let result = async {
        let account = account_id(id)?;
        let map = body(raw).await?;
        only(&map, &["amount"])?;
        let cents =
            money(&map, "amount")?.ok_or_else(|| ApiError::bad_request("Missing field amount."))?;
        Ok::<_, ApiError>(if deposit {
            Command::Deposit { account, cents }
        } else {
            Command::Withdraw { account, cents }
        })
    }
    .await;
    match result {
        Ok(command) => reply_ok(
            admin.submitter.internal(command).await,
            |_| json!({ "ok": true }),
        ),
        Err(e) => e.into_response(),
    }
}

async fn deposit(State(admin): Shared, Segment(id): Segment, raw: Body) -> Response {
    move_money(&admin, &id, raw, true).await
}

async fn withdraw(State(admin): Shared, Segment(id): Segment, raw: Body) -> Response {
    move_money(&admin, &id, raw, false).await
}

async fn flags(State(admin): Shared, Segment(id): Segment, raw: Body) -> Response {
    let fields = [
        ("terms_accepted", AccountFlag::TermsAccepted),
        ("trading_allowed", AccountFlag::TradingAllowed),
        ("suspended", AccountFlag::Suspended),
    ];
    let parsed = async {
        let account = account_id(&id)?;
        let map = body(raw).await?;
        only(&map, &["terms_accepted", "trading_allowed", "suspended"])?;
        let mut commands = Vec::new();
        for (name, flag) in fields {
            match map.get(name) {
                None => {}
                Some(Value::Bool(value)) => commands.push(Command::SetAccountFlag {
                    account,
                    flag,
                    value: *value,
                }),
                Some(_) => {
                    return Err(ApiError::bad_request(format!(
                        "Field {name} must be a boolean."
                    )))
                }
            }
        }
        Ok(commands)
    }
    .await;
    let commands = match parsed {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    for command in commands {
        match admin.submitter.internal(command).await {
            Ok(Reply::Rejected(r)) => return ApiError::from(r).into_response(),
            Err(e) => return e.into_response(),
            Ok(_) => {}
        }
    }
    show(&admin, &id).await
}

async fn risk_cap(State(admin): Shared, Segment(id): Segment, raw: Body) -> Response {
    let parsed = async {
        let account = account_id(&id)?;
        let map = body(raw).await?;
        only(&map, &["usd"])?;
        Ok::<_, ApiError>(Command::SetAccountRiskCap {
            account,
            cents: money(&map, "usd")?,
        })
    }
    .await;
    match parsed {
        Ok(command) => reply_ok(
            admin.submitter.internal(command).await,
            |_| json!({ "ok": true }),
        ),
        Err(e) => e.into_response(),
    }
}

async fn show_account(State(admin): Shared, Segment(id): Segment) -> Response {
    show(&admin, &id).await
}

async fn show(admin: &Admin, id: &str) -> Response {
    let account = match account_id(id) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let answer = admin
        .submitter
        .read(None, move |state, _| {
            let a = state.account(account).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::NotFound,
                    format!("account {account} does not exist"),
                )
            })?;
            Ok((
                StatusCode::OK,
                json!({
                    "account_id": a.id,
                    "cash": dollars(a.cash),
                    "held": dollars(a.held),
                    "buying_power": dollars(a.buying_power()),
                    "terms_accepted": a.terms_accepted,
                    "trading_allowed": a.trading_allowed,
                    "suspended": a.suspended,
                    "resting_orders": a.resting_orders(),
                    "at_risk": dollars(a.at_risk()),
                    "risk_cap": dollars(state.risk_cap(a)),
                    "risk_cap_is_default": a.risk_cap.is_none(),
                    "active_keys": state.active_keys(a.id),
                }),
            ))
        })
        .await;
    crate::api::rest::respond(answer)
}

fn limits_from(map: &Map<String, Value>) -> Result<KeyLimits, ApiError> {
    let cents = |field: &str| -> Result<Option<u64>, ApiError> {
        Ok(money(map, field)?.map(|c| c.max(0) as u64))
    };
    let max_open_orders = match map.get("max_open_orders") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    ApiError::bad_request("Field max_open_orders must be a whole number.")
                })?,
        ),
    };
    let series = match map.get("series") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ApiError::bad_request("Field series must be a list of series tickers.")
                })?,
        ),
        Some(_) => {
            return Err(ApiError::bad_request(
                "Field series must be a list of series tickers.",
            ))
        }
    };
    Ok(KeyLimits {
        max_order_cents: cents("max_order_usd")?,
        max_daily_cents: cents("max_daily_usd")?,
        max_open_orders,
        series,
    })
}

async fn issue_key(State(admin): Shared, raw: Body) -> Response {
    let parsed = async {
        let map = body(raw).await?;
        only(
            &map,
            &[
                "account",
                "scopes",
                "env",
                "name",
                "max_order_usd",
                "max_daily_usd",
                "max_open_orders",
                "series",
                "ips",
                "expires_days",
            ],
        )?;
        let account = map
            .get("account")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| ApiError::bad_request("Field account must be an account id."))?;
        let scopes = match map.get("scopes") {
            Some(Value::String(s)) => Scopes::parse_list(s),
            Some(Value::Array(items)) => {
                let joined: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                if joined.len() == items.len() {
                    Scopes::parse_list(&joined.join(","))
                } else {
                    None
                }
            }
            _ => None,
        }
        .ok_or_else(|| ApiError::bad_request("Field scopes must list read and/or trade."))?;
        let environment = match map.get("env") {
            None => admin.environment,
            Some(Value::String(s)) => Environment::parse(s)
                .ok_or_else(|| ApiError::bad_request("Field env must be live or test."))?,
            Some(_) => return Err(ApiError::bad_request("Field env must be live or test.")),
        };
        let name = match map.get("name") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ApiError::bad_request("Field name must be a string.")),
        };
        let ip_allowlist = match map.get("ips") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::bad_request("Field ips must be a list of addresses."))?,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "Field ips must be a list of addresses.",
                ))
            }
        };
        let expires_days =
            match map.get("expires_days") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || ApiError::bad_request("Field expires_days must be 1 to 365."),
                )?),
            };
        Ok::<_, ApiError>((
            account,
            scopes,
            environment,
            name,
            limits_from(&map)?,
            ip_allowlist,
            expires_days,
        ))
    }
    .await;
    let (account, scopes, environment, name, limits, ip_allowlist, expires_days) = match parsed {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = series_exist(&admin, &limits).await {
        return e.into_response();
    }
    let key_id = random_token(16);
    let secret = random_token(32);
    let command = Command::IssueKey(NewKey {
        account,
        key_id: key_id.clone(),
        fingerprint: fingerprint(&secret),
        name,
        environment,
        scopes,
        limits,
        ip_allowlist,
        expires_days,
    });
    let key = format!("tk_{}_{key_id}_{secret}", environment.as_str());
    reply_ok(
        admin.submitter.internal(command).await,
        move |_| json!({ "key": key, "key_id": key_id, "account": account, "environment": environment.as_str(), "scopes": scopes.names() }),
    )
}

async fn list_keys(State(admin): Shared, uri: Uri) -> Response {
    let account = Params::parse(uri.query(), &["account"]).and_then(|p| match p.get("account") {
        Some(a) => account_id(a).map(Some),
        None => Ok(None),
    });
    let account = match account {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    let answer = admin
        .submitter
        .read(None, move |state, _| {
            if let Some(a) = account {
                state.account(a).ok_or_else(|| {
                    ApiError::new(ErrorCode::NotFound, format!("account {a} does not exist"))
                })?;
            }
            let now = crate::engine::now_ms();
            let keys: Vec<Value> = state
                .keys
                .iter()
                .filter(|k| account.is_none_or(|a| k.account == a))
                .map(|k| {
                    let mut v = crate::api::json::account(k, now);
                    v["account"] = k.account.into();
                    v["active"] = k.is_active(now).into();
                    v["created_ts_ms"] = k.created_ts_ms.into();
                    v["expires_ts_ms"] = k.expires_ts_ms.into();
                    v["revoked_ts_ms"] = k.revoked_ts_ms.into();
                    v["ips"] = k.ip_allowlist.clone().into();
                    v
                })
                .collect();
            Ok((StatusCode::OK, json!({ "keys": keys })))
        })
        .await;
    crate::api::rest::respond(answer)
}

async fn revoke_key(State(admin): Shared, Segment(key_id): Segment) -> Response {
    reply_ok(
        admin
            .submitter
            .internal(Command::RevokeKey { key_id })
            .await,
        |_| json!({ "ok": true }),
    )
}

/// A key limited to series that do not exist could never trade: refused,
/// naming the first (series are never removed, so the check holds), when
/// a key is issued and when its limits are set.
async fn series_exist(admin: &Admin, limits: &KeyLimits) -> Result<(), ApiError> {
    let Some(series) = limits.series.clone() else {
        return Ok(());
    };
    let unknown = admin
        .submitter
        .read(None, move |state, _| {
            Ok(series
                .into_iter()
                .find(|t| state.series_by_ticker(t).is_none()))
        })
        .await?;
    match unknown {
        None => Ok(()),
        Some(ticker) => Err(ApiError::new(
            ErrorCode::SeriesNotFound,
            format!("No series {ticker}."),
        )),
    }
}

async fn key_limits(State(admin): Shared, Segment(key_id): Segment, raw: Body) -> Response {
    let limits = async {
        let map = body(raw).await?;
        only(
            &map,
            &[
                "max_order_usd",
                "max_daily_usd",
                "max_open_orders",
                "series",
            ],
        )?;
        let limits = limits_from(&map)?;
        series_exist(&admin, &limits).await?;
        Ok::<_, ApiError>(limits)
    }
    .await;
    match limits {
        Ok(limits) => reply_ok(
            admin
                .submitter
                .internal(Command::SetKeyLimits { key_id, limits })
                .await,
            |_| json!({ "ok": true }),
        ),
        Err(e) => e.into_response(),
    }
}

async fn pause(State(admin): Shared, raw: Body) -> Response {
    let until = async {
        let map = body(raw).await?;
        only(&map, &["until_ts_ms"])?;
        match map.get("until_ts_ms") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| ApiError::bad_request("Field until_ts_ms must be epoch ms.")),
        }
    }
    .await;
    match until {
        Ok(until_ts_ms) => reply_ok(
            admin
                .submitter
                .internal(Command::PauseTrading { until_ts_ms })
                .await,
            |_| json!({ "ok": true }),
        ),
        Err(e) => e.into_response(),
    }
}

async fn resume(State(admin): Shared) -> Response {
    reply_ok(
        admin.submitter.internal(Command::ResumeTrading).await,
        |_| json!({ "ok": true }),
    )
}

/// The state as the sequencer has it now: its last seq, the canonical state
/// hash (computed here, in time proportional to the live state) and the
/// running event hash. `updown replay --until-seq` of the same journal
/// gives the same three; an auditor compares them.
async fn state_hashes(State(admin): Shared) -> Response {
    let answer = admin
        .submitter
        .read(None, |state, _| {
            Ok((
                StatusCode::OK,
                json!({
                    "seq": state.last_seq,
                    "state_hash": format!("{:016x}", state.state_hash()),
                    "event_hash": format!("{:016x}", state.event_hash),
                }),
            ))
        })
        .await;
    crate::api::rest::respond(answer)
}

async fn series(State(admin): Shared) -> Response {
    let answer = admin
        .submitter
        .read(None, |state, _| {
            let series: Vec<Value> = state
                .series
                .iter()
                .map(|s| {
                    json!({
                        "ticker": s.config.ticker,
                        "symbol": s.config.symbol,
                        "window_minutes": s.config.window_ms / 60_000,
                        "list_ahead": s.config.list_ahead,
                        "taker_fee": s.config.taker_fee_bps as f64 / 10_000.0,
                        "maker_fee": s.config.maker_fee_bps as f64 / 10_000.0,
                        "market_cap_usd": s.config.market_cap_cents / 100,
                        "markets": s.markets.len(),
                    })
                })
                .collect();
            Ok((StatusCode::OK, json!({ "series": series })))
        })
        .await;
    crate::api::rest::respond(answer)
}

async fn markets(State(admin): Shared, uri: Uri) -> Response {
    let params = Params::parse(uri.query(), &["series_ticker", "status"])
        .and_then(|p| Ok((p.series_ticker("series_ticker")?, p.market_status()?)));
    let (series, status): (Option<String>, Option<MarketStatus>) = match params {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let answer = admin
        .submitter
        .read(None, move |state, _| {
            let page = state.query_markets(
                series.as_deref(),
                status,
                Some(sequencer::limits::LIST_LIMIT_MAX),
                None,
            )?;
            let markets: Vec<Value> = page
                .items
                .iter()
                .map(|m| crate::api::json::market(state, m))
                .collect();
            Ok((StatusCode::OK, json!({ "markets": markets })))
        })
        .await;
    crate::api::rest::respond(answer)
}

/// The operator ingest path for a real feed: one print.
async fn price(
    State(admin): Shared,
    ConnectInfo(_peer): ConnectInfo<SocketAddr>,
    _headers: HeaderMap,
    raw: Body,
) -> Response {
    let command = async {
        let map = body(raw).await?;
        only(&map, &["symbol", "price", "t_ms"])?;
        let symbol = map
            .get("symbol")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad_request("Missing field symbol."))?;
        let price_e8 = map
            .get("price")
            .and_then(Value::as_str)
            .and_then(parse_e8)
            .ok_or_else(|| {
                ApiError::bad_request("Field price must be a decimal string with at most 8 decimals, such as \"97123.45\".")
            })?;
        let t_ms = match map.get("t_ms") {
            None => crate::engine::now_ms(),
            Some(v) => v
                .as_u64()
                .ok_or_else(|| ApiError::bad_request("Field t_ms must be epoch ms."))?,
        };
        Ok::<_, ApiError>(Command::Price {
            symbol: symbol.to_string(),
            price_e8,
            t_ms,
        })
    }
    .await;
    match command {
        Ok(command) => reply_ok(
            admin.submitter.internal(command).await,
            |_| json!({ "ok": true }),
        ),
        Err(e) => e.into_response(),
    }
}
