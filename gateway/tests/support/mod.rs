//! Harness of the end-to-end tests: a real venue started in-process on
//! loopback ports with its own temporary data directory, a real HTTP client
//! (ureq), operator helpers that go through the admin endpoint, and checks
//! of the spec's record shapes and patterns written here from SPEC.md (never
//! borrowed from the code under test).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gateway::config::SeriesEntry;
use gateway::{Server, ServerConfig};
use serde_json::{json, Value};
use tempfile::TempDir;

/// The two series every test venue lists. Both follow `SYMBOL`.
pub const SERIES_A: &str = "e2e-a";
pub const SERIES_B: &str = "e2e-b";
/// The underlying of both series.
pub const SYMBOL: &str = "X:BTCUSD";
/// The market cap of series B, in dollars, small enough to reach in a test.
pub const SERIES_B_MARKET_CAP_USD: u64 = 1_000;
/// The first print pushed by every venue; the current windows open on it.
pub const OPENING_PRICE: &str = "97000.5";
/// Every window of a test venue has at least this long left when the venue
/// starts, so no window closes while a test runs.
const WINDOW_LEFT_MIN_MS: u64 = 30 * 60 * 1000;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// A window length, in minutes, whose current window (windows start on
/// multiples of the length since the epoch) still has a long time to run:
/// about a day, nudged by a minute at a time until the current window ends
/// far enough away.
pub fn window_minutes() -> u64 {
    let now = now_ms();
    (1440..1440 + 240)
        .find(|minutes| {
            let window = minutes * 60_000;
            window - now % window >= WINDOW_LEFT_MIN_MS
        })
        .expect("some window length leaves enough time")
}

/// The configuration of a test venue: loopback ports chosen by the OS, a
/// temporary data directory, no simulator (prices come only from the test),
/// two series of about a day, and a lockout high enough that the tests of
/// refused keys do not lock each other out (the lockout test sets its own).
pub fn config(dir: &std::path::Path) -> ServerConfig {
    let minutes = window_minutes();
    let series = |ticker: &str, cap: u64| SeriesEntry {
        ticker: ticker.into(),
        symbol: SYMBOL.into(),
        window_minutes: minutes,
        list_ahead: 2,
        taker_fee: 0.07,
        maker_fee: 0.0,
        market_cap_usd: cap,
        sim_start_price: None,
    };
    ServerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        admin_listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: dir.to_path_buf(),
        price_simulator: false,
        lockout_failures: 1_000,
        // A loaded test machine may stall a request for seconds: a 503
        // after the default 2 s would fail tests of something else.
        request_timeout_ms: 30_000,
        // Each fresh venue writes out a segment and the next one ahead:
        // 64 MiB each, over the suite's sixty venues, loads the disk.
        segment_mib: 4,
        series: vec![
            series(SERIES_A, 1_000_000),
            series(SERIES_B, SERIES_B_MARKET_CAP_USD),
        ],
        series_listed: true,
        ..ServerConfig::default()
    }
}

/// One HTTP answer.
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub text: String,
    pub body: Value,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
    pub headers: ureq::http::HeaderMap,
}

impl Resp {
    /// A header's value, if it is there and readable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status and a JSON body; returns the body.
    #[track_caller]
    pub fn ok(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "expected {status}, got {} {}",
            self.status, self.text
        );
        self.assert_json();
        &self.body
    }

    /// Asserts the spec's error body `{code, message, details?}` with this
    /// status and code; returns the message.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> String {
        assert_eq!(
            self.status, status,
            "expected {status} {code}, got {} {}",
            self.status, self.text
        );
        self.assert_json();
        let body = self
            .body
            .as_object()
            .unwrap_or_else(|| panic!("error body is not an object: {}", self.text));
        for name in body.keys() {
            assert!(
                ["code", "message", "details"].contains(&name.as_str()),
                "error body has {name}: {}",
                self.text
            );
        }
        assert_eq!(
            body.get("code").and_then(Value::as_str),
            Some(code),
            "code of {}",
            self.text
        );
        if let Some(details) = body.get("details") {
            assert!(
                details.is_string(),
                "details must be a string: {}",
                self.text
            );
        }
        let message = body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no message: {}", self.text));
        assert!(!message.is_empty(), "empty message: {}", self.text);
        message.to_string()
    }

    /// Asserts an error with this exact message.
    #[track_caller]
    pub fn err_msg(&self, status: u16, code: &str, message: &str) {
        assert_eq!(self.err(status, code), message, "{}", self.text);
    }

    /// Asserts an error whose message contains every one of `parts`.
    #[track_caller]
    pub fn err_says(&self, status: u16, code: &str, parts: &[&str]) -> String {
        let message = self.err(status, code);
        for part in parts {
            assert!(
                message.contains(part),
                "message {message:?} should mention {part:?}"
            );
        }
        message
    }

    #[track_caller]
    fn assert_json(&self) {
        let ct = self.content_type.as_deref().unwrap_or("");
        assert!(
            ct.starts_with("application/json"),
            "content type {ct:?} of {}",
            self.text
        );
        assert!(!self.body.is_null(), "body is not JSON: {:?}", self.text);
    }
}

/// A key as issued by the operator.
#[derive(Clone, Debug)]
pub struct IssuedKey {
    /// The whole key string, `tk_<env>_<key_id>_<secret>`.
    pub key: String,
    pub key_id: String,
}

impl IssuedKey {
    pub fn secret(&self) -> &str {
        self.key.rsplit('_').next().expect("secret")
    }
    pub fn as_str(&self) -> &str {
        &self.key
    }
}

/// A funded account allowed to trade, with a read+trade key.
#[derive(Clone, Debug)]
pub struct Trader {
    pub account: u64,
    pub key: IssuedKey,
}

impl Trader {
    pub fn key(&self) -> Option<&str> {
        Some(&self.key.key)
    }
}

/// A running test venue and its data directory.
pub struct Venue {
    pub dir: TempDir,
    pub config: ServerConfig,
    server: Option<Server>,
    pub base: String,
    pub admin_base: String,
    pub token: String,
    agent: ureq::Agent,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

impl Venue {
    /// A venue with the test configuration whose current windows are open.
    pub fn start() -> Venue {
        Self::start_with(|_| {})
    }

    /// A venue with the test configuration changed by `change`, whose
    /// current windows are open.
    pub fn start_with(change: impl FnOnce(&mut ServerConfig)) -> Venue {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut config = config(dir.path());
        change(&mut config);
        let server = Server::start(config.clone()).expect("the venue starts");
        let mut venue = Venue {
            dir,
            config,
            base: String::new(),
            admin_base: String::new(),
            token: String::new(),
            server: None,
            agent: agent(),
        };
        venue.attach(server);
        venue.push_price(OPENING_PRICE);
        venue
    }

    fn attach(&mut self, server: Server) {
        self.base = format!("http://{}/v1", server.addr);
        self.admin_base = format!("http://{}", server.admin_addr);
        self.token = server.admin_token.clone();
        self.agent = agent();
        self.server = Some(server);
    }

    /// Graceful stop, then a start on the same data directory.
    pub fn restart(&mut self) {
        self.restart_with(|_| {});
    }

    /// Graceful stop, then a start on the same data directory with the
    /// configuration changed by `change` (the change is kept).
    pub fn restart_with(&mut self, change: impl FnOnce(&mut ServerConfig)) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
        change(&mut self.config);
        let server = Server::start(self.config.clone()).expect("the venue restarts");
        self.attach(server);
    }

    // ----- HTTP --------------------------------------------------------------------

    fn run(&self, method: &str, url: &str, bearer: Option<&str>, body: Option<&[u8]>) -> Resp {
        let authorization = bearer.map(|b| format!("Bearer {b}"));
        self.send(method, url, authorization.as_deref(), body)
    }

    /// One request with `authorization` as the raw header value (or none).
    fn send(
        &self,
        method: &str,
        url: &str,
        authorization: Option<&str>,
        body: Option<&[u8]>,
    ) -> Resp {
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        if let Some(value) = authorization {
            request = request.header("Authorization", value);
        }
        let result = match body {
            Some(bytes) => {
                let request = request
                    .header("Content-Type", "application/json")
                    .body(bytes.to_vec())
                    .expect("request");
                self.agent.run(request)
            }
            None => self.agent.run(request.body(()).expect("request")),
        };
        let mut response = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type");
        let retry_after = header("retry-after");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|e| panic!("{method} {url}: body: {e}"));
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            status,
            text,
            body,
            content_type,
            retry_after,
            headers,
        }
    }

    /// A request to the public API with a raw `Authorization` header value
    /// (or none).
    pub fn call_raw_auth(&self, method: &str, path: &str, authorization: Option<&str>) -> Resp {
        self.send(method, &format!("{}{path}", self.base), authorization, None)
    }

    /// A request to the public API, `path` relative to `/v1`.
    pub fn call(&self, method: &str, path: &str, key: Option<&str>, body: Option<&[u8]>) -> Resp {
        self.run(method, &format!("{}{path}", self.base), key, body)
    }

    /// A request to any path of the public listener (not under `/v1`).
    pub fn call_root(&self, method: &str, path: &str) -> Resp {
        let root = self.base.trim_end_matches("/v1");
        self.run(method, &format!("{root}{path}"), None, None)
    }

    pub fn get(&self, path: &str, key: Option<&str>) -> Resp {
        self.call("GET", path, key, None)
    }

    pub fn delete(&self, path: &str, key: Option<&str>) -> Resp {
        self.call("DELETE", path, key, None)
    }

    pub fn post(&self, path: &str, key: Option<&str>, body: &Value) -> Resp {
        self.call("POST", path, key, Some(body.to_string().as_bytes()))
    }

    pub fn post_raw(&self, path: &str, key: Option<&str>, body: &[u8]) -> Resp {
        self.call("POST", path, key, Some(body))
    }

    /// POST /portfolio/orders.
    pub fn place(&self, key: Option<&str>, order: &Value) -> Resp {
        self.post("/portfolio/orders", key, order)
    }

    /// POST /portfolio/orders that must succeed with 201; returns the order.
    #[track_caller]
    pub fn place_ok(&self, key: Option<&str>, order: &Value) -> Value {
        let resp = self.place(key, order);
        let order = resp.ok(201)["order"].clone();
        assert_order_shape(&order);
        order
    }

    /// GET with a key that must answer 200; returns the body.
    #[track_caller]
    pub fn read(&self, path: &str, key: Option<&str>) -> Value {
        self.get(path, key).ok(200).clone()
    }

    /// The account's orders (GET /portfolio/orders, first page).
    #[track_caller]
    pub fn orders(&self, key: Option<&str>, query: &str) -> Vec<Value> {
        let body = self.read(&format!("/portfolio/orders{query}"), key);
        body["orders"].as_array().expect("orders").clone()
    }

    // ----- operator --------------------------------------------------------------------

    pub fn admin_call(&self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        let bytes = body.map(|b| b.to_string().into_bytes());
        self.run(
            method,
            &format!("{}{path}", self.admin_base),
            Some(&self.token),
            bytes.as_deref(),
        )
    }

    /// An admin POST that must succeed; returns the body.
    #[track_caller]
    pub fn admin(&self, path: &str, body: Value) -> Value {
        let resp = self.admin_call("POST", path, Some(&body));
        assert_eq!(resp.status, 200, "admin {path} {body}: {}", resp.text);
        resp.body
    }

    /// A sequencer command that has no HTTP route (creating a series).
    pub fn internal(&self, command: sequencer::Command) {
        let server = self.server.as_ref().expect("running");
        let reply = server
            .runtime()
            .block_on(server.submitter.internal(command));
        assert!(matches!(reply, Ok(sequencer::Reply::Ok)), "{reply:?}");
    }

    /// Prints a price of the underlying now.
    #[track_caller]
    pub fn push_price(&self, price: &str) {
        self.admin("/admin/prices", json!({ "symbol": SYMBOL, "price": price }));
    }

    /// A new account with `cash` dollars; no flags set.
    #[track_caller]
    pub fn create_account(&self, cash: &str) -> u64 {
        let body = self.admin("/admin/accounts", json!({ "cash": cash }));
        body["account_id"].as_u64().expect("account_id")
    }

    #[track_caller]
    pub fn flags(&self, account: u64, flags: Value) -> Value {
        self.admin(&format!("/admin/accounts/{account}/flags"), flags)
    }

    /// Issues a key; `spec` is the admin body without `account`.
    #[track_caller]
    pub fn issue_key(&self, account: u64, spec: Value) -> IssuedKey {
        let mut body = spec;
        body["account"] = json!(account);
        let answer = self.admin("/admin/keys", body);
        IssuedKey {
            key: answer["key"].as_str().expect("key").to_string(),
            key_id: answer["key_id"].as_str().expect("key_id").to_string(),
        }
    }

    #[track_caller]
    pub fn revoke(&self, key: &IssuedKey) {
        self.admin(&format!("/admin/keys/{}/revoke", key.key_id), json!({}));
    }

    /// A funded account that accepted the terms and allowed trading, with a
    /// read+trade key whose limits are wide enough not to get in the way.
    #[track_caller]
    pub fn trader(&self, cash: &str) -> Trader {
        let account = self.create_account(cash);
        self.flags(
            account,
            json!({ "terms_accepted": true, "trading_allowed": true }),
        );
        let key = self.issue_key(
            account,
            json!({ "scopes": "read,trade", "name": "e2e", "max_order_usd": "5000", "max_daily_usd": "1000000" }),
        );
        Trader { account, key }
    }

    /// The open (current) market of a series.
    #[track_caller]
    pub fn open_market(&self, series: &str) -> String {
        self.market_with_status(series, "open")
    }

    /// A scheduled (listed ahead, not trading yet) market of a series.
    #[track_caller]
    pub fn scheduled_market(&self, series: &str) -> String {
        self.market_with_status(series, "scheduled")
    }

    #[track_caller]
    fn market_with_status(&self, series: &str, status: &str) -> String {
        let body = self.read(
            &format!("/markets?series_ticker={series}&status={status}"),
            None,
        );
        let markets = body["markets"].as_array().expect("markets");
        assert!(
            !markets.is_empty(),
            "no {status} market in {series}: {body}"
        );
        markets[0]["ticker"].as_str().expect("ticker").to_string()
    }

    /// The server's data directory (for restarts).
    /// The public listener's address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.base
            .trim_start_matches("http://")
            .trim_end_matches("/v1")
            .parse()
            .expect("address")
    }

    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }
}

impl Drop for Venue {
    fn drop(&mut self) {
        self.stop();
    }
}

// ----- request bodies ----------------------------------------------------------------

static COUNTER: AtomicU64 = AtomicU64::new(1);

/// A client_order_id unique in this test process.
pub fn coid(tag: &str) -> String {
    format!("{tag}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// An order body with the required fields only.
pub fn order(
    market: &str,
    outcome: &str,
    action: &str,
    price: &str,
    count: &str,
    client_order_id: &str,
) -> Value {
    json!({
        "market_ticker": market,
        "outcome": outcome,
        "action": action,
        "price": price,
        "count": count,
        "client_order_id": client_order_id,
    })
}

/// A good-till-canceled buy with a fresh client_order_id.
pub fn buy(market: &str, outcome: &str, price: &str, count: &str) -> Value {
    order(market, outcome, "buy", price, count, &coid("buy"))
}

/// A sell with a fresh client_order_id.
pub fn sell(market: &str, outcome: &str, price: &str, count: &str) -> Value {
    order(market, outcome, "sell", price, count, &coid("sell"))
}

// ----- shapes and patterns (SPEC.md) ----------------------------------------------------

pub fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

pub fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `^[a-z0-9][a-z0-9-]{0,63}$`
pub fn is_series_ticker(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// `^[a-z0-9][a-z0-9-]{0,63}-\d{6}-\d{4}-\d{4}(d\d{1,2})?$`
pub fn is_market_ticker(s: &str) -> bool {
    let core_ok = |core: &str| {
        if core.len() < 18 || !core.is_char_boundary(core.len() - 17) {
            return false;
        }
        let (head, tail) = core.split_at(core.len() - 17);
        let t = tail.as_bytes();
        is_series_ticker(head)
            && t[0] == b'-'
            && t[7] == b'-'
            && t[12] == b'-'
            && digits(&tail[1..7])
            && digits(&tail[8..12])
            && digits(&tail[13..17])
    };
    if core_ok(s) {
        return true;
    }
    for n in [1, 2] {
        if s.len() > n + 1 {
            let (core, suffix) = s.split_at(s.len() - n - 1);
            if suffix.starts_with('d') && digits(&suffix[1..]) && core_ok(core) {
                return true;
            }
        }
    }
    false
}

/// `^0\.(0[1-9]|[1-9]\d)$`
pub fn is_price(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 4
        && &b[..2] == b"0."
        && b[2].is_ascii_digit()
        && b[3].is_ascii_digit()
        && &b[2..] != b"00"
}

/// `^(0|[1-9]\d*)$`
pub fn is_count(s: &str) -> bool {
    digits(s) && (s == "0" || !s.starts_with('0'))
}

/// `^[A-Za-z0-9._:-]{1,64}$`
pub fn is_client_order_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(&c))
}

/// A dollar amount as the venue writes it: digits, a point, two decimals.
pub fn is_dollars(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    match s.split_once('.') {
        Some((whole, cents)) => digits(whole) && cents.len() == 2 && digits(cents),
        None => false,
    }
}

const TS_MAX: u64 = 9_007_199_254_740_991;

fn string<'a>(record: &'a Value, field: &str) -> &'a str {
    record[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} must be a string in {record}"))
}

/// SPEC "Order": exactly its fields, each of its type and pattern; the two
/// optional ones present exactly when there are fills.
#[track_caller]
pub fn assert_order_shape(order: &Value) {
    let required = set(&[
        "order_id",
        "client_order_id",
        "market_ticker",
        "outcome",
        "action",
        "price",
        "time_in_force",
        "post_only",
        "status",
        "count",
        "fill_count",
        "remaining_count",
        "created_ts_ms",
    ]);
    let mut allowed = required.clone();
    allowed.extend(set(&["average_fill_price", "fees_paid"]));
    let have = keys(order);
    assert!(
        required.is_subset(&have),
        "order lacks {:?}: {order}",
        required.difference(&have).collect::<Vec<_>>()
    );
    assert!(
        have.is_subset(&allowed),
        "order has extra {:?}: {order}",
        have.difference(&allowed).collect::<Vec<_>>()
    );
    assert!(!string(order, "order_id").is_empty());
    assert!(
        is_client_order_id(string(order, "client_order_id")),
        "{order}"
    );
    assert!(is_market_ticker(string(order, "market_ticker")), "{order}");
    assert!(
        ["up", "down"].contains(&string(order, "outcome")),
        "{order}"
    );
    assert!(
        ["buy", "sell"].contains(&string(order, "action")),
        "{order}"
    );
    assert!(is_price(string(order, "price")), "{order}");
    assert!(
        ["good_till_canceled", "immediate_or_cancel"].contains(&string(order, "time_in_force")),
        "{order}"
    );
    assert!(order["post_only"].is_boolean(), "{order}");
    assert!(
        ["resting", "executed", "canceled"].contains(&string(order, "status")),
        "{order}"
    );
    for field in ["count", "fill_count", "remaining_count"] {
        assert!(is_count(string(order, field)), "{field} in {order}");
    }
    let ts = order["created_ts_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("created_ts_ms in {order}"));
    assert!(ts <= TS_MAX);
    let filled: u64 = string(order, "fill_count").parse().expect("fill_count");
    assert_eq!(
        have.contains("average_fill_price"),
        filled > 0,
        "average_fill_price iff fills: {order}"
    );
    assert_eq!(
        have.contains("fees_paid"),
        filled > 0,
        "fees_paid iff fills: {order}"
    );
    if filled > 0 {
        string(order, "average_fill_price");
        assert!(is_dollars(string(order, "fees_paid")), "{order}");
    }
}

/// SPEC "Fill".
#[track_caller]
pub fn assert_fill_shape(fill: &Value) {
    assert_eq!(
        keys(fill),
        set(&[
            "fill_id",
            "market_ticker",
            "outcome",
            "action",
            "price",
            "count",
            "cost",
            "ts_ms"
        ]),
        "{fill}"
    );
    assert!(is_market_ticker(string(fill, "market_ticker")));
    assert!(["up", "down"].contains(&string(fill, "outcome")));
    assert!(["buy", "sell"].contains(&string(fill, "action")));
    assert!(is_price(string(fill, "price")), "{fill}");
    assert!(is_count(string(fill, "count")), "{fill}");
    assert!(is_dollars(string(fill, "cost")), "{fill}");
    assert!(fill["ts_ms"].as_u64().is_some(), "{fill}");
    assert!(
        digits(string(fill, "fill_id")),
        "DESIGN: fill ids are decimal, the cursor is one: {fill}"
    );
}

/// SPEC "Position".
#[track_caller]
pub fn assert_position_shape(position: &Value) {
    assert_eq!(
        keys(position),
        set(&["market_ticker", "outcome", "count", "cost", "average_price"]),
        "{position}"
    );
    assert!(is_market_ticker(string(position, "market_ticker")));
    assert!(["up", "down"].contains(&string(position, "outcome")));
    assert!(is_count(string(position, "count")));
    assert!(is_dollars(string(position, "cost")));
    string(position, "average_price");
}

/// SPEC "Market" (which fields are always present is not shown: the ones
/// every market has by its nature are required here).
#[track_caller]
pub fn assert_market_shape(market: &Value) {
    let required = set(&[
        "ticker",
        "series_ticker",
        "status",
        "open_ts_ms",
        "close_ts_ms",
        "price_ranges",
        "tick_size",
    ]);
    let allowed: BTreeSet<String> = required
        .iter()
        .cloned()
        .chain(set(&[
            "price_to_beat",
            "result",
            "settlement_price",
            "settled_ts_ms",
            "up_bid",
            "up_bid_size",
            "up_ask",
            "up_ask_size",
            "last_price",
        ]))
        .collect();
    let have = keys(market);
    assert!(required.is_subset(&have), "market lacks fields: {market}");
    assert!(
        have.is_subset(&allowed),
        "market has extra fields: {market}"
    );
    assert!(is_market_ticker(string(market, "ticker")), "{market}");
    assert!(
        is_series_ticker(string(market, "series_ticker")),
        "{market}"
    );
    let open = market["open_ts_ms"].as_u64().expect("open_ts_ms");
    let close = market["close_ts_ms"].as_u64().expect("close_ts_ms");
    assert!(open < close, "{market}");
    for range in market["price_ranges"].as_array().expect("price_ranges") {
        assert_eq!(keys(range), set(&["start", "end", "step"]), "{market}");
        for f in ["start", "end", "step"] {
            string(range, f);
        }
    }
    string(market, "tick_size");
    for f in ["up_bid", "up_ask", "last_price"] {
        if let Some(p) = market.get(f) {
            assert!(
                is_price(p.as_str().expect("price string")),
                "{f} in {market}"
            );
        }
    }
    for f in ["up_bid_size", "up_ask_size"] {
        if let Some(c) = market.get(f) {
            assert!(
                is_count(c.as_str().expect("count string")),
                "{f} in {market}"
            );
        }
    }
}

// ----- SPEC "Checksum" ----------------------------------------------------------------------

/// CRC-32, the zlib/PNG variant (reflected, polynomial 0xEDB88320).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The checksum text of a book from its `up` and `down` level lists as on
/// the wire (`[[price, count], ...]`, best first): top 10 per side.
pub fn checksum_text(up: &Value, down: &Value) -> String {
    let side = |levels: &Value| {
        levels
            .as_array()
            .expect("levels")
            .iter()
            .take(10)
            .map(|l| {
                format!(
                    "{}:{}",
                    l[0].as_str().expect("price"),
                    l[1].as_str().expect("count")
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    format!("up:{}|down:{}", side(up), side(down))
}

#[test]
fn crc32_is_the_zlib_variant() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn patterns() {
    assert!(is_market_ticker("btc-15m-261121-2100-2115"));
    assert!(is_market_ticker("btc-1d-261121-2100-2100d1"));
    assert!(is_market_ticker("x-261121-2345-0000d12"));
    assert!(!is_market_ticker("BTC-261121-2100-2115"));
    assert!(!is_market_ticker("btc-261121-2100-2115d123"));
    assert!(!is_market_ticker("-261121-2100-2115"));
    assert!(
        is_price("0.01")
            && is_price("0.99")
            && !is_price("0.00")
            && !is_price("1.00")
            && !is_price("0.5")
    );
    assert!(is_count("0") && is_count("10") && !is_count("01") && !is_count(""));
}
