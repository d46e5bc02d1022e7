//! Attack it: `updown serve` as a child process, probed from loopback.
//!
//! - Secrets (key secrets, right and wrong, and the admin token) never
//!   appear in the logs (readable at debug, JSON at trace), the journal's
//!   raw bytes, the snapshots, any other file of the data directory, or any
//!   answer of any endpoint (REST, admin, websocket) except the one answer
//!   that issues the key.
//! - One account can never read, cancel or follow another's orders, fills,
//!   positions or balance, over REST or the websocket's private channels.
//! - Keys of the other environment, revoked, expired (a journal written two
//!   days in the past), fenced to another address, or of a suspended account
//!   are refused with the spec's messages, on REST and on the websocket.
//! - Failed keys lock their address out (429 + Retry-After, the right key
//!   refused too) and only that address, until the lockout ends.
//! - The admin endpoint refuses a missing or wrong token on every route,
//!   listens on loopback by default, is not served on the public listener,
//!   and its token file is mode 0600.
//! - The websocket accepts any Origin (docs/decisions.md) and still needs
//!   the key itself for private channels: a cookie authorizes nothing.

mod common;
/// The websocket client's upgrade and reads, shared with the gateway's tests.
#[path = "../../gateway/tests/support/ws_client.rs"]
mod ws_client;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

const WAIT: Duration = Duration::from_secs(10);

fn ip(text: &str) -> IpAddr {
    text.parse().expect("address")
}

// ----- a websocket client ------------------------------------------------------------------

struct Ws {
    ws: WebSocket<TcpStream>,
    /// Data messages read while waiting for a reply.
    pending: VecDeque<Value>,
    /// Every text frame received, for the secret checks.
    seen: Vec<String>,
}

/// Upgrades `/v1/ws` from `source` (default 127.0.0.1) with extra headers;
/// the HTTP status and body when refused.
fn ws_connect(
    addr: &str,
    source: Option<IpAddr>,
    headers: &[(&str, &str)],
) -> Result<Ws, (u16, Value)> {
    let target: SocketAddr = addr.parse().expect("address");
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::new(source.unwrap_or(ip("127.0.0.1")), 0).into())
        .expect("bind");
    socket.connect(&target.into()).expect("connect");
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let ws = ws_client::upgrade(stream, addr, headers)?;
    Ok(Ws {
        ws,
        pending: VecDeque::new(),
        seen: Vec::new(),
    })
}

impl Ws {
    fn send(&mut self, value: Value) {
        self.ws
            .send(Message::text(value.to_string()))
            .expect("send");
    }

    fn next(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            match ws_client::read_frame(&mut self.ws, deadline)? {
                Message::Text(text) => {
                    self.seen.push(text.to_string());
                    return Some(serde_json::from_str(text.as_str()).expect("JSON"));
                }
                Message::Close(frame) => panic!("closed by the server: {frame:?}"),
                _ => {}
            }
        }
    }

    /// Sends a command; returns its first reply, keeping data for later.
    fn cmd(&mut self, id: u64, cmd: &str, params: Value) -> Value {
        self.send(json!({ "id": id, "cmd": cmd, "params": params }));
        let deadline = Instant::now() + WAIT;
        loop {
            let value = self
                .next(deadline)
                .unwrap_or_else(|| panic!("no reply to {cmd}"));
            if value.get("id") == Some(&json!(id)) {
                return value;
            }
            self.pending.push_back(value);
        }
    }

    /// Asserts error `code` as the reply; returns its message.
    #[track_caller]
    fn cmd_err(&mut self, id: u64, cmd: &str, params: Value, code: u64) -> String {
        let reply = self.cmd(id, cmd, params);
        assert_eq!(reply["type"], "error", "{reply}");
        assert_eq!(reply["msg"]["code"], json!(code), "{reply}");
        reply["msg"]["msg"].as_str().expect("msg").to_string()
    }

    /// Subscribes to the private channels (one reply per channel).
    fn subscribe_private(&mut self, id: u64) {
        let channels = ["fill", "user_orders", "market_positions", "balance"];
        self.send(json!({ "id": id, "cmd": "subscribe", "params": { "channels": channels } }));
        let deadline = Instant::now() + WAIT;
        let mut replies = 0;
        while replies < channels.len() {
            let value = self.next(deadline).expect("subscribed");
            if value.get("id") == Some(&json!(id)) {
                assert_eq!(value["type"], "subscribed", "{value}");
                replies += 1;
            } else {
                self.pending.push_back(value);
            }
        }
    }

    /// Data messages that arrive within `wait`.
    fn data_for(&mut self, wait: Duration) -> Vec<Value> {
        let deadline = Instant::now() + wait;
        let mut out: Vec<Value> = self.pending.drain(..).collect();
        while let Some(v) = self.next(deadline) {
            out.push(v);
        }
        out
    }

    /// Data messages until one of type `kind` has come (10 s at most),
    /// then whatever follows within 300 ms (the rest of its batch).
    fn data_with(&mut self, kind: &str) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let mut out: Vec<Value> = self.pending.drain(..).collect();
        while !out.iter().any(|e| e["type"] == kind) {
            match self.next(deadline) {
                Some(v) => out.push(v),
                None => break,
            }
        }
        out.extend(self.data_for(Duration::from_millis(300)));
        out
    }
}

// ----- a venue with traders -------------------------------------------------------------------

struct Venue {
    _work: tempfile::TempDir,
    serve: Serve,
    admin: Admin,
    http: Http,
    market: String,
}

fn venue_with(settings: Settings, launch: impl FnOnce(Launch) -> Launch) -> Venue {
    let work = tempfile::tempdir().expect("temporary directory");
    let config = settings.write(&work.path().join("updown.toml"));
    let serve = launch(Launch::new(&work.path().join("data"), Some(&config))).start();
    let mut admin = serve.admin();
    admin.price("97000.5");
    let mut http = serve.api();
    let market = open_market(&mut http, &settings.series);
    Venue {
        _work: work,
        serve,
        admin,
        http,
        market,
    }
}

fn venue() -> Venue {
    venue_with(Settings::default(), |l| l)
}

fn buy(market: &str, outcome: &str, cents: u64, count: u64, coid: &str) -> String {
    order_body(
        market,
        outcome,
        "buy",
        cents,
        count,
        "good_till_canceled",
        coid,
    )
}

impl Venue {
    #[track_caller]
    fn place(&mut self, key: &str, body: &str) -> Value {
        let resp = self
            .http
            .call("POST", "/portfolio/orders", Some(key), Some(body));
        resp.ok(201)["order"].clone()
    }
}

// ----- secrets ----------------------------------------------------------------------------------

/// Every endpoint, with right and wrong keys, REST, admin and websocket.
/// Returns the secrets used and every answer that must not show them.
fn exercise(v: &mut Venue) -> (Vec<String>, Vec<String>) {
    let a = v.admin.trader("1000");
    let b = v.admin.trader("1000");
    let (read_key, _) = v
        .admin
        .issue_key(a.account, json!({ "scopes": "read", "name": "reader" }));
    let (revoked, revoked_id) = v.admin.issue_key(a.account, json!({ "scopes": "read" }));
    v.admin
        .post(&format!("/admin/keys/{revoked_id}/revoke"), json!({}));
    let (live, _) = v
        .admin
        .issue_key(b.account, json!({ "scopes": "read", "env": "live" }));
    let wrong_secret = format!("tk_test_{}_wrongsecretzq81x6", a.key_id);
    let crossed = format!("tk_test_{}_{}", a.key_id, b.secret());
    let keys = [
        a.key.clone(),
        b.key.clone(),
        read_key.clone(),
        revoked.clone(),
        live.clone(),
        wrong_secret.clone(),
        crossed,
    ];
    let mut secrets: Vec<String> = keys.to_vec();
    secrets.extend(
        keys.iter()
            .map(|k| k.rsplit('_').next().expect("secret").to_string()),
    );
    secrets.push(v.serve.token());

    let mut answers = Vec::new();
    let market = v.market.clone();
    let placed = v.place(&a.key, &buy(&market, "up", 40, 5, "sec-a-1"));
    let order_id = placed["order_id"].as_str().expect("id").to_string();
    v.place(&b.key, &buy(&market, "down", 60, 2, "sec-b-1"));
    let paths = [
        ("GET", "/portfolio/orders".to_string(), None),
        ("GET", format!("/portfolio/orders/{order_id}"), None),
        ("GET", "/portfolio/positions".into(), None),
        ("GET", "/portfolio/fills".into(), None),
        ("GET", "/portfolio/balance".into(), None),
        ("GET", "/account".into(), None),
        ("GET", "/markets".into(), None),
        ("GET", format!("/markets/{market}"), None),
        ("GET", format!("/markets/{market}/orderbook"), None),
        ("GET", format!("/markets/{market}/trades"), None),
        ("GET", "/openapi.json".into(), None),
        (
            "POST",
            "/portfolio/orders".into(),
            Some(buy(&market, "up", 30, 1, "sec-a-2")),
        ),
        ("DELETE", format!("/portfolio/orders/{order_id}"), None),
        ("DELETE", "/portfolio/orders".into(), None),
        ("GET", "/nope".into(), None),
    ];
    // Failing keys from their own address, which the lockout then closes
    // (its warning is logged); good keys from 127.0.0.1.
    let mut attacker = Http::from(&v.serve.addr, ip("127.0.0.9"));
    for key in &keys {
        let invalid = *key == wrong_secret || key.ends_with(b.secret());
        for (method, path, body) in &paths {
            let http = if invalid { &mut attacker } else { &mut v.http };
            let resp = http.call(method, path, Some(key), body.as_deref());
            answers.push(format!("{:?} {}", resp.headers, resp.text));
        }
    }
    let metrics = v.http.send("GET", "/metrics", &[], None);
    answers.push(metrics.text);
    for (method, path) in [
        ("GET", "/admin/keys".to_string()),
        ("GET", format!("/admin/keys?account={}", a.account)),
        ("GET", format!("/admin/accounts/{}", a.account)),
        ("GET", "/admin/series".into()),
        ("GET", "/admin/markets".into()),
        ("GET", "/admin/state".into()),
    ] {
        let resp = v.admin.call(method, &path, None);
        assert_eq!(resp.status, 200, "{}", resp.text);
        answers.push(format!("{:?} {}", resp.headers, resp.text));
    }
    let listed = v.admin.call("GET", "/admin/keys", None);
    assert!(listed.text.contains(&a.key_id), "the list shows key ids");
    // A wrong admin token, of the right length and not.
    let token = v.serve.token();
    // The last character changed (to one it is not: a random token may end
    // in any of them).
    let last = if token.ends_with('x') { 'y' } else { 'x' };
    let wrong = format!("{}{last}", &token[..token.len() - 1]);
    for bad in [wrong.as_str(), "short"] {
        let resp = v.admin.http.send(
            "GET",
            "/admin/keys",
            &[("Authorization", &format!("Bearer {bad}"))],
            None,
        );
        assert_eq!(resp.status, 401);
        answers.push(resp.text);
    }

    // The websocket: a key on the upgrade, a login, wrong logins.
    let addr = v.serve.addr.clone();
    let bearer = format!("Bearer {}", a.key);
    let mut wa = ws_connect(&addr, None, &[("Authorization", &bearer)]).expect("upgrade");
    wa.subscribe_private(1);
    let mut wb = ws_connect(&addr, None, &[]).expect("upgrade");
    for (i, key) in [&wrong_secret, &revoked, &live].into_iter().enumerate() {
        let reply = wb.cmd(10 + i as u64, "login", json!({ "api_key": key }));
        assert_eq!(reply["type"], "error", "{reply}");
    }
    assert_eq!(
        wb.cmd(20, "login", json!({ "api_key": b.key }))["type"],
        "ok"
    );
    wb.subscribe_private(21);
    match ws_connect(
        &addr,
        None,
        &[("Authorization", &format!("Bearer {wrong_secret}"))],
    ) {
        Err((401, body)) => answers.push(body.to_string()),
        other => panic!("a wrong key upgraded: {:?}", other.map(|_| ())),
    }
    v.place(&a.key, &buy(&market, "up", 45, 3, "sec-a-3"));
    v.place(&b.key, &buy(&market, "down", 55, 3, "sec-b-3"));
    wa.data_for(Duration::from_millis(300));
    wb.data_for(Duration::from_millis(300));
    answers.extend(wa.seen);
    answers.extend(wb.seen);
    (secrets, answers)
}

/// Files under `dir`, recursively.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn check_no_secrets(mode: &str, v: &mut Venue, secrets: &[String], answers: &[String]) {
    for answer in answers {
        for secret in secrets {
            assert!(
                !answer.contains(secret.as_str()),
                "{mode}: an answer shows a secret: {answer}"
            );
        }
    }
    assert!(v.serve.sigterm().success());
    let logs = format!("{}\n{}", v.serve.stdout.text(), v.serve.stderr.text());
    for line in [
        "series created",
        "address locked out after failed authentications",
    ] {
        assert!(
            logs.contains(line),
            "{mode}: the logs were captured: {logs}"
        );
    }
    for secret in secrets {
        assert!(
            !logs.contains(secret.as_str()),
            "{mode}: the logs show a secret ({} chars)",
            secret.len()
        );
    }
    let data = v.serve.data_dir.clone();
    let all = files(&data);
    assert!(all
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "seg")));
    assert!(all
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "snap")));
    let token = v.serve.token();
    // The search finds what is there: the token is in its own file.
    let own = std::fs::read(data.join("admin.token")).expect("admin.token");
    assert!(contains(&own, token.as_bytes()) && secrets.contains(&token));
    for path in all {
        let bytes = std::fs::read(&path).expect("read");
        for secret in secrets {
            if path.ends_with("admin.token") && *secret == token {
                continue;
            }
            assert!(
                !contains(&bytes, secret.as_bytes()),
                "{mode}: {} holds a secret",
                path.display()
            );
        }
    }
}

#[test]
fn secrets_never_reach_logs_journal_snapshots_files_or_answers() {
    let settings = Settings {
        lockout_failures: 5,
        ..Settings::default()
    };
    let mut v = venue_with(settings.clone(), |l| l.log("debug"));
    let (secrets, answers) = exercise(&mut v);
    check_no_secrets("text logs at debug", &mut v, &secrets, &answers);
    assert!(
        v.serve.stderr.text().contains("WARN"),
        "{}",
        v.serve.stderr.text()
    );
    // Written to a pipe, not a terminal: no colour escape codes.
    assert!(
        !v.serve.stderr.text().contains('\u{1b}'),
        "escape codes in a file's log"
    );

    let mut v = venue_with(settings, |l| l.log("trace").arg("--log-json"));
    let (secrets, answers) = exercise(&mut v);
    check_no_secrets("JSON logs at trace", &mut v, &secrets, &answers);
    assert!(
        v.serve.stdout.text().contains("\"level\":\"WARN\""),
        "{}",
        v.serve.stdout.text()
    );
    // Standard output is JSON lines only: what `serve` says to the person
    // who started it goes to standard error then.
    for line in v.serve.stdout.text().lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON on standard output: {line}"
        );
    }
    assert!(v.serve.stderr.text().contains(" listening on http://"));
    // The shutdown is in the log stream too, not only on the console.
    let stopped = v.serve.stdout.text().lines().any(|line| {
        serde_json::from_str::<serde_json::Value>(line)
            .is_ok_and(|l| l["fields"]["message"] == "stopped")
    });
    assert!(stopped, "{}", v.serve.stdout.text());
}

// ----- one account, not another's -----------------------------------------------------------------

#[test]
fn one_account_never_reads_cancels_or_follows_anothers_orders_fills_or_balance() {
    let mut v = venue();
    let a = v.admin.trader("500");
    let b = v.admin.trader("700");
    let c = v.admin.trader("900");
    let m = v.market.clone();
    let addr = v.serve.addr.clone();

    // A follows its private channels before anything happens.
    let mut wa = ws_connect(
        &addr,
        None,
        &[("Authorization", &format!("Bearer {}", a.key))],
    )
    .expect("upgrade");
    wa.subscribe_private(1);
    // Parameters cannot point a subscription at another account.
    wa.cmd_err(
        2,
        "subscribe",
        json!({ "channels": ["fill"], "account": b.account }),
        2,
    );
    let mut wb = ws_connect(&addr, None, &[]).expect("upgrade");
    assert_eq!(
        wb.cmd(1, "login", json!({ "api_key": b.key }))["type"],
        "ok"
    );
    wb.subscribe_private(2);

    // B rests an order and trades with C.
    let resting = v.place(&b.key, &buy(&m, "up", 30, 4, "b-secret-order"));
    let b_id = resting["order_id"].as_str().expect("id").to_string();
    v.place(&b.key, &buy(&m, "up", 52, 3, "b-trade"));
    v.place(&c.key, &buy(&m, "down", 48, 3, "c-trade"));
    let b_fills = all_fills(&mut v.http, &b.key).expect("fills");
    assert!(!b_fills.is_empty(), "B traded");

    let http = &mut v.http;
    let ak = Some(a.key.as_str());
    http.get(&format!("/portfolio/orders/{b_id}"), ak)
        .err(404, "ORDER_NOT_FOUND");
    http.call("DELETE", &format!("/portfolio/orders/{b_id}"), ak, None)
        .err(404, "ORDER_NOT_FOUND");
    let all = http.call("DELETE", "/portfolio/orders", ak, None);
    assert_eq!(all.ok(200)["canceled_order_ids"], json!([]), "{}", all.text);
    let still = http.get(&format!("/portfolio/orders/{b_id}"), Some(&b.key));
    assert_eq!(still.ok(200)["order"]["status"], "resting");
    let by_coid = http.get("/portfolio/orders?client_order_id=b-secret-order", ak);
    assert_eq!(by_coid.ok(200)["orders"], json!([]));
    let listed = http.get("/portfolio/orders", ak);
    assert_eq!(listed.ok(200)["orders"], json!([]));
    assert_eq!(http.get("/portfolio/fills", ak).ok(200)["fills"], json!([]));
    assert_eq!(
        http.get("/portfolio/positions", ak).ok(200)["positions"],
        json!([])
    );
    assert_eq!(
        http.get("/portfolio/balance", ak).ok(200)["balance"]["cash"],
        "500.00"
    );
    // No parameter names another account.
    for path in [
        format!("/portfolio/balance?account={}", b.account),
        format!("/portfolio/fills?account={}", b.account),
        format!("/portfolio/orders?account_id={}", b.account),
    ] {
        http.get(&path, ak).err(400, "BAD_REQUEST");
    }
    // B's key id with A's secret is no key at all.
    let forged = format!("tk_test_{}_{}", b.key_id, a.secret());
    http.get("/portfolio/balance", Some(&forged))
        .err_msg(401, "UNAUTHORIZED", "Invalid API key.");
    // Nothing of B's or C's reached A's channels.
    let quiet = wa.data_for(Duration::from_millis(500));
    assert!(
        quiet.is_empty(),
        "A saw another account's events: {quiet:?}"
    );
    // B's client_order_id is A's own to use: a new order of A's.
    let mine = v.place(&a.key, &buy(&m, "up", 20, 1, "b-secret-order"));
    assert_ne!(mine["order_id"].as_str(), Some(b_id.as_str()));

    // A's channels carried only A's own order; B's, only B's events.
    let a_events = wa.data_with("user_order");
    assert!(
        a_events.iter().any(|e| e["type"] == "user_order"),
        "A sees its own order: {a_events:?}"
    );
    for event in &a_events {
        let text = event.to_string();
        match event["type"].as_str() {
            Some("user_order") => {
                assert_eq!(event["msg"]["order_id"], mine["order_id"], "{text}")
            }
            Some("balance") => assert_eq!(event["msg"]["cash"], "500.00", "{text}"),
            // A resting buy commits nothing yet: "count 0 means none".
            Some("market_position") => assert_eq!(event["msg"]["count"], "0", "{text}"),
            _ => panic!("A never traded, yet: {text}"),
        }
        for other in ["b-trade", "c-trade", &b.key_id, &c.key_id] {
            assert!(
                !text.contains(other),
                "A saw another account's event: {text}"
            );
        }
    }
    let b_events = wb.data_with("fill");
    assert!(
        b_events.iter().any(|e| e["type"] == "fill"),
        "B sees its fill"
    );
    assert!(
        b_events
            .iter()
            .all(|e| e["msg"]["order_id"] != mine["order_id"]),
        "B saw A's order"
    );
}

// ----- refused keys --------------------------------------------------------------------------------

/// Refused on REST (401 with `message`), on the websocket upgrade (401) and
/// on a websocket login (error 9 with the same message).
#[track_caller]
fn refused_everywhere(v: &mut Venue, source: Option<IpAddr>, key: &str, message: &str) {
    let mut http = match source {
        Some(ip) => Http::from(&v.serve.addr, ip),
        None => v.serve.api(),
    };
    for (method, path) in [
        ("GET", "/portfolio/balance"),
        ("GET", "/portfolio/orders"),
        ("DELETE", "/portfolio/orders"),
    ] {
        http.call(method, path, Some(key), None)
            .err_msg(401, "UNAUTHORIZED", message);
    }
    let body = buy(&v.market, "up", 10, 1, "refused");
    http.call("POST", "/portfolio/orders", Some(key), Some(&body))
        .err_msg(401, "UNAUTHORIZED", message);
    match ws_connect(
        &v.serve.addr,
        source,
        &[("Authorization", &format!("Bearer {key}"))],
    ) {
        Err((401, body)) => assert_eq!(body["message"], message),
        other => panic!("upgraded with a refused key: {:?}", other.map(|_| ())),
    }
    let mut ws = ws_connect(&v.serve.addr, source, &[]).expect("upgrade");
    assert_eq!(
        ws.cmd_err(1, "login", json!({ "api_key": key }), 9),
        message
    );
}

#[test]
fn wrong_environment_revoked_fenced_and_suspended_keys_are_refused_with_the_specs_messages() {
    let mut v = venue();
    let a = v.admin.trader("100");

    let (live, _) = v
        .admin
        .issue_key(a.account, json!({ "scopes": "read,trade", "env": "live" }));
    let live_message =
        "This API key is for the live environment and can't be used on the test endpoint.";
    refused_everywhere(&mut v, None, &live, live_message);
    // A test key relabelled live is refused the same way, before its secret
    // is even looked at.
    let relabelled = a.key.replacen("tk_test_", "tk_live_", 1);
    refused_everywhere(&mut v, None, &relabelled, live_message);

    let (revoked, revoked_id) = v
        .admin
        .issue_key(a.account, json!({ "scopes": "read,trade" }));
    v.http.get("/account", Some(&revoked)).ok(200);
    v.admin
        .post(&format!("/admin/keys/{revoked_id}/revoke"), json!({}));
    refused_everywhere(&mut v, None, &revoked, "This API key has been revoked.");

    // Fenced to 127.0.0.2: refused from 127.0.0.1, taken from 127.0.0.2.
    let (fenced, _) = v.admin.issue_key(
        a.account,
        json!({ "scopes": "read,trade", "ips": ["127.0.0.2"] }),
    );
    refused_everywhere(
        &mut v,
        None,
        &fenced,
        "This API key can't be used from this IP address.",
    );
    Http::from(&v.serve.addr, ip("127.0.0.2"))
        .get("/portfolio/balance", Some(&fenced))
        .ok(200);

    let b = v.admin.trader("100");
    v.admin.post(
        &format!("/admin/accounts/{}/flags", b.account),
        json!({ "suspended": true }),
    );
    refused_everywhere(&mut v, None, &b.key, "This account is suspended.");
    v.admin.post(
        &format!("/admin/accounts/{}/flags", b.account),
        json!({ "suspended": false }),
    );
    v.http.get("/portfolio/balance", Some(&b.key)).ok(200);
    // The account's other keys were never affected.
    v.http.get("/portfolio/balance", Some(&a.key)).ok(200);
}

/// Expiry is at least a day away for a key issued now (1 to 365 days), so
/// the venue starts here on a journal written two days in the past, whose
/// keys were issued for one day.
#[test]
fn an_expired_key_is_refused_with_the_specs_message() {
    let work = tempfile::tempdir().expect("temporary directory");
    let data = work.path().join("data");
    let two_days_ago = now_ms() - 2 * 86_400_000;
    let written = Offline {
        orders: 4,
        ts_ms: two_days_ago,
        expires_days: Some(1),
        ..Offline::default()
    }
    .write(&data);
    let config = Settings::default().write(&work.path().join("updown.toml"));
    let serve = Launch::new(&data, Some(&config)).start();
    let mut admin = serve.admin();
    admin.price("97000.5");
    let mut http = serve.api();
    let market = open_market(&mut http, "rel-a");
    let mut v = Venue {
        _work: work,
        serve,
        admin,
        http,
        market,
    };
    refused_everywhere(&mut v, None, &written.keys[0], "This API key has expired.");
    // A key issued now for the same account works.
    let (fresh, _) = v.admin.issue_key(1, json!({ "scopes": "read" }));
    v.http.get("/portfolio/balance", Some(&fresh)).ok(200);
}

// ----- lockout ---------------------------------------------------------------------------------------

#[test]
fn failed_keys_lock_out_their_address_and_only_it_until_the_lockout_ends() {
    let mut v = venue_with(
        Settings {
            lockout_failures: 3,
            // Long enough that everything below runs inside it on a slow
            // machine; the end is waited for by polling.
            lockout_secs: 10,
            ..Settings::default()
        },
        |l| l,
    );
    let a = v.admin.trader("100");
    let attacker = ip("127.0.0.3");
    let mut from = Http::from(&v.serve.addr, attacker);
    from.get("/portfolio/balance", Some(&a.key)).ok(200);
    let bad = [
        "tk_test_nosuchkey_s3cr3t".to_string(),
        format!("tk_test_{}_wrongsecret", a.key_id),
        "tk_test_garbage".to_string(),
    ];
    for key in &bad {
        from.get("/portfolio/balance", Some(key))
            .err_msg(401, "UNAUTHORIZED", "Invalid API key.");
    }
    // Locked: even the right key from that address, on REST and websocket.
    let locked = from.get("/portfolio/balance", Some(&a.key));
    locked.err(429, "RATE_LIMITED");
    let retry: u64 = locked
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=10).contains(&retry), "Retry-After {retry}");
    let body = buy(&v.market, "up", 10, 1, "locked");
    from.call("POST", "/portfolio/orders", Some(&a.key), Some(&body))
        .err(429, "RATE_LIMITED");
    match ws_connect(
        &v.serve.addr,
        Some(attacker),
        &[("Authorization", &format!("Bearer {}", a.key))],
    ) {
        Err((429, body)) => assert_eq!(body["code"], "RATE_LIMITED"),
        other => panic!("a locked address upgraded: {:?}", other.map(|_| ())),
    }
    let mut ws = ws_connect(&v.serve.addr, Some(attacker), &[]).expect("public upgrade");
    ws.cmd_err(1, "login", json!({ "api_key": a.key }), 9);
    // Public data is not locked; other addresses are not locked.
    from.get("/markets", None).ok(200);
    v.http.get("/portfolio/balance", Some(&a.key)).ok(200);
    Http::from(&v.serve.addr, ip("127.0.0.4"))
        .get("/portfolio/balance", Some(&a.key))
        .ok(200);

    // Failed websocket logins count too, keys of no key's form among them.
    let mut ws = ws_connect(&v.serve.addr, Some(ip("127.0.0.5")), &[]).expect("upgrade");
    let bad_logins = [
        "not-a-key",
        "tk_test_nosuchkey_s3cr3t",
        "tk test with spaces",
    ];
    for (i, key) in bad_logins.iter().enumerate() {
        ws.cmd_err(i as u64, "login", json!({ "api_key": key }), 9);
    }
    Http::from(&v.serve.addr, ip("127.0.0.5"))
        .get("/portfolio/balance", Some(&a.key))
        .err(429, "RATE_LIMITED");

    // After Retry-After, the right key works again.
    std::thread::sleep(Duration::from_secs(retry));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = from.get("/portfolio/balance", Some(&a.key));
        if resp.status == 200 {
            break;
        }
        resp.err(429, "RATE_LIMITED");
        assert!(
            Instant::now() < deadline,
            "still locked 20 s after Retry-After"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ----- the admin endpoint ------------------------------------------------------------------------------

#[test]
fn the_admin_endpoint_needs_its_token_listens_on_loopback_and_hides_its_token_file() {
    let defaults = gateway::ServerConfig::default();
    assert!(
        defaults.admin_listen.ip().is_loopback(),
        "{}",
        defaults.admin_listen
    );
    let example = gateway::ServerConfig::from_toml(include_str!("../../docs/config.example.toml"))
        .expect("the example configuration");
    assert!(example.admin_listen.ip().is_loopback());

    let mut v = venue();
    let data = v.serve.data_dir.clone();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data.join("admin.token"))
        .expect("admin.token")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "admin.token mode {:o}", mode & 0o777);
    let server: Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("server.json")).expect("server.json"),
    )
    .expect("JSON");
    assert!(server["admin_listen"]
        .as_str()
        .is_some_and(|a| a.starts_with("127.0.0.1:")));

    let token = v.serve.token();
    let wrong_same_length = format!(
        "{}{}",
        &token[..token.len() - 1],
        if token.ends_with('a') { 'b' } else { 'a' }
    );
    let refusals: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("Authorization", format!("Bearer {wrong_same_length}"))],
        vec![("Authorization", "Bearer ".to_string())],
        vec![("Authorization", format!("Bearer {token}x"))],
        vec![(
            "Authorization",
            format!("Bearer {}", &token[..token.len() - 1]),
        )],
        vec![("Authorization", format!("Basic {token}"))],
        vec![("Authorization", token.clone())],
        vec![("X-Admin-Token", token.clone())],
        vec![("Cookie", format!("token={token}"))],
        // Two Authorization headers, the right token in either or both:
        // which one counts is not for a proxy in between to decide.
        vec![
            ("Authorization", format!("Bearer {token}")),
            ("Authorization", format!("Bearer {token}")),
        ],
        vec![
            ("Authorization", format!("Bearer {token}")),
            ("Authorization", format!("Bearer {wrong_same_length}")),
        ],
        vec![
            ("Authorization", format!("Bearer {wrong_same_length}")),
            ("Authorization", format!("Bearer {token}")),
        ],
    ];
    let routes = [
        ("POST", "/admin/accounts"),
        ("GET", "/admin/accounts/1"),
        ("POST", "/admin/accounts/1/deposit"),
        ("POST", "/admin/accounts/1/withdraw"),
        ("POST", "/admin/accounts/1/flags"),
        ("POST", "/admin/accounts/1/risk-cap"),
        ("POST", "/admin/keys"),
        ("GET", "/admin/keys"),
        ("POST", "/admin/keys/x/revoke"),
        ("POST", "/admin/keys/x/limits"),
        ("POST", "/admin/trading/pause"),
        ("POST", "/admin/trading/resume"),
        ("GET", "/admin/series"),
        ("GET", "/admin/markets"),
        ("GET", "/admin/state"),
        ("POST", "/admin/prices"),
        ("GET", "/admin/nothing-here"),
    ];
    let mut admin = Http::new(&v.serve.admin_addr);
    for headers in &refusals {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        for (method, path) in routes {
            let body = (method == "POST").then_some(r#"{"cash":"1000"}"#);
            admin.send(method, path, &headers, body).err_msg(
                401,
                "UNAUTHORIZED",
                "The admin token is missing or wrong.",
            );
        }
        admin
            .send("GET", &format!("/admin/keys?token={token}"), &headers, None)
            .err(401, "UNAUTHORIZED");
    }
    // Nothing was done: the first account made with the token is account 1.
    assert_eq!(v.admin.create_account("1"), 1);
    // The public listener does not serve the admin API, token or not.
    let bearer = format!("Bearer {token}");
    for (method, path) in [("GET", "/admin/keys"), ("POST", "/admin/accounts")] {
        let resp = v
            .http
            .send(method, path, &[("Authorization", &bearer)], Some("{}"));
        assert_eq!(
            resp.status, 404,
            "{method} {path} on the public port: {}",
            resp.text
        );
    }
    // The token is no API key.
    v.http
        .get("/portfolio/balance", Some(&token))
        .err(401, "UNAUTHORIZED");
}

// ----- the websocket's Origin policy -------------------------------------------------------------------

#[test]
fn any_origin_may_connect_but_only_the_key_itself_opens_private_channels() {
    let mut v = venue();
    let a = v.admin.trader("100");
    let addr = v.serve.addr.clone();
    let cookie = format!("api_key={}; token={}", a.key, a.key);
    let mut foreign = ws_connect(
        &addr,
        None,
        &[("Origin", "https://evil.example"), ("Cookie", &cookie)],
    )
    .expect("docs/decisions.md: any Origin is accepted");
    // Public channels work; private ones need a key, and a cookie is none.
    let reply = foreign.cmd(
        1,
        "subscribe",
        json!({ "channels": ["ticker"], "market_tickers": [v.market] }),
    );
    assert_eq!(reply["type"], "subscribed", "{reply}");
    for (i, channel) in ["fill", "user_orders", "market_positions", "balance"]
        .into_iter()
        .enumerate()
    {
        foreign.cmd_err(
            10 + i as u64,
            "subscribe",
            json!({ "channels": [channel] }),
            8,
        );
    }
    // A cross-site page cannot send an Authorization header with an
    // upgrade; a client that has the key can, from any Origin.
    let mut keyed = ws_connect(
        &addr,
        None,
        &[
            ("Origin", "https://elsewhere.example"),
            ("Authorization", &format!("Bearer {}", a.key)),
        ],
    )
    .expect("a keyed upgrade from any Origin");
    keyed.subscribe_private(1);
    let mut http = v.serve.api();
    let body = buy(&v.market, "up", 15, 1, "origin-check");
    http.call("POST", "/portfolio/orders", Some(&a.key), Some(&body))
        .ok(201);
    assert!(keyed
        .data_with("user_order")
        .iter()
        .any(|e| e["type"] == "user_order"));
    assert!(
        foreign
            .data_for(Duration::from_millis(200))
            .iter()
            .all(|e| e["type"] == "ticker" || e["type"] == "orderbook_snapshot"),
        "the foreign page saw private data"
    );
}
