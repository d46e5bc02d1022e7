//! The websocket against a real venue with a real websocket client
//! (tungstenite): books rebuilt from snapshot + deltas match the REST book
//! and every checksum (computed here from SPEC "Checksum"), seq is
//! contiguous on every subscription, a forced gap is recovered with
//! get_snapshot, a series subscription follows a new window through open,
//! closed and settled, private channels deliver only the account's own
//! events, and every limit and close code.

#[path = "support/mod.rs"]
mod support;
#[path = "support/ws_client.rs"]
mod ws_client;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gateway::Server;
use sequencer::command::SeriesConfig;
use sequencer::Command;
use serde_json::{json, Value};
use support::*;
use tungstenite::{Message, WebSocket};

const WAIT: Duration = Duration::from_secs(10);

// ----- a websocket client -----------------------------------------------------------------

struct Client {
    ws: WebSocket<TcpStream>,
    /// Data messages read while waiting for a reply.
    pending: VecDeque<Value>,
    /// Last seq seen per sid.
    seqs: HashMap<u64, u64>,
    /// (sid, expected, got) of every jump in seq.
    gaps: Vec<(u64, u64, u64)>,
    /// Panic on a gap (the default).
    strict: bool,
}

/// Upgrades with extra headers; the HTTP status and body when refused.
fn try_connect(addr: SocketAddr, headers: &[(&str, &str)]) -> Result<Client, (u16, Value)> {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let ws = ws_client::upgrade(stream, &addr.to_string(), headers)?;
    Ok(Client {
        ws,
        pending: VecDeque::new(),
        seqs: HashMap::new(),
        gaps: Vec::new(),
        strict: true,
    })
}

fn connect(addr: SocketAddr) -> Client {
    try_connect(addr, &[]).unwrap_or_else(|e| panic!("refused: {e:?}"))
}

fn connect_with_key(addr: SocketAddr, key: &str) -> Client {
    let bearer = format!("Bearer {key}");
    try_connect(addr, &[("Authorization", bearer.as_str())])
        .unwrap_or_else(|e| panic!("refused: {e:?}"))
}

impl Client {
    fn send(&mut self, value: &Value) {
        self.send_text(&value.to_string());
    }

    fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text.to_string())).expect("send");
    }

    /// The next frame, or None at the deadline.
    fn frame(&mut self, deadline: Instant) -> Option<Message> {
        ws_client::read_frame(&mut self.ws, deadline)
    }

    /// The next JSON message before the deadline; data messages have their
    /// seq checked.
    fn next_json(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            match self.frame(deadline)? {
                Message::Text(text) => {
                    let value: Value = serde_json::from_str(text.as_str()).expect("JSON");
                    if value.get("sid").is_some() && value.get("id").is_none() {
                        self.check_seq(&value);
                    }
                    return Some(value);
                }
                Message::Close(frame) => panic!("closed by the server: {frame:?}"),
                _ => {}
            }
        }
    }

    fn check_seq(&mut self, value: &Value) {
        let keys = keys(value);
        assert_eq!(
            keys,
            set(&["type", "sid", "seq", "ts_ms", "msg"]),
            "envelope {value}"
        );
        let sid = value["sid"].as_u64().expect("sid");
        let seq = value["seq"].as_u64().expect("seq");
        // ts_ms is the server's send time: before now, and not long ago.
        let ts_ms = value["ts_ms"].as_u64().expect("ts_ms");
        let now = now_ms();
        assert!(
            ts_ms <= now && now - ts_ms < 600_000,
            "ts_ms {ts_ms} is not a send time (now {now}): {value}"
        );
        let last = self.seqs.insert(sid, seq).unwrap_or(0);
        if seq != last + 1 {
            assert!(!self.strict, "seq of sid {sid} jumped from {last} to {seq}");
            self.gaps.push((sid, last + 1, seq));
        }
    }

    /// The replies to command `id` (`count` of them), keeping data for later.
    fn replies(&mut self, id: u64, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let mut out = Vec::new();
        while out.len() < count {
            let value = self
                .next_json(deadline)
                .unwrap_or_else(|| panic!("no reply to {id}"));
            if value.get("id").is_some() {
                assert_eq!(keys(&value), set(&["id", "type", "msg"]), "{value}");
                assert_eq!(value["id"], json!(id), "reply to another id: {value}");
                out.push(value);
            } else {
                self.pending.push_back(value);
            }
        }
        out
    }

    fn cmd(&mut self, id: u64, cmd: &str, params: Value) -> Value {
        self.send(&json!({ "id": id, "cmd": cmd, "params": params }));
        self.replies(id, 1).remove(0)
    }

    /// Asserts error `code` as the reply to a command.
    #[track_caller]
    fn cmd_err(&mut self, id: u64, cmd: &str, params: Value, code: u64) -> String {
        let reply = self.cmd(id, cmd, params);
        assert_eq!(reply["type"], "error", "{reply}");
        assert_eq!(keys(&reply["msg"]), set(&["code", "msg"]), "{reply}");
        assert_eq!(reply["msg"]["code"], json!(code), "{reply}");
        reply["msg"]["msg"].as_str().expect("msg").to_string()
    }

    /// Subscribes; returns the sids, one per channel, in order.
    fn subscribe(&mut self, id: u64, channels: &[&str], params: Value) -> Vec<u64> {
        let mut params = params;
        params["channels"] = json!(channels);
        self.send(&json!({ "id": id, "cmd": "subscribe", "params": params }));
        let replies = self.replies(id, channels.len());
        replies
            .iter()
            .zip(channels)
            .map(|(r, channel)| {
                assert_eq!(r["type"], "subscribed", "{r}");
                assert_eq!(r["msg"]["channel"], *channel, "{r}");
                assert_eq!(keys(&r["msg"]), set(&["channel", "sid"]), "{r}");
                r["msg"]["sid"].as_u64().expect("sid")
            })
            .collect()
    }

    /// The next data message, or None at the deadline.
    fn data_until(&mut self, deadline: Instant) -> Option<Value> {
        if let Some(v) = self.pending.pop_front() {
            return Some(v);
        }
        let v = self.next_json(deadline)?;
        assert!(v.get("id").is_none(), "an unexpected reply: {v}");
        Some(v)
    }

    #[track_caller]
    fn data(&mut self) -> Value {
        self.data_until(Instant::now() + WAIT)
            .expect("a data message in time")
    }

    /// Data messages, each handed to `keep_going`, until it says stop;
    /// panics when the wait ends first.
    fn data_while(&mut self, wait: Duration, mut keep_going: impl FnMut(&Value) -> bool) {
        let deadline = Instant::now() + wait;
        while let Some(v) = self.data_until(deadline) {
            if !keep_going(&v) {
                return;
            }
        }
        panic!("condition not reached in {wait:?}");
    }

    /// Reads until the server's close frame; returns its code.
    fn close_code(&mut self, wait: Duration) -> u16 {
        let deadline = Instant::now() + wait;
        loop {
            match self.ws.read() {
                Ok(Message::Close(Some(frame))) => return u16::from(frame.code),
                Ok(Message::Close(None)) => panic!("a close frame without a code"),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    assert!(Instant::now() < deadline, "no close frame in {wait:?}");
                }
                Err(e) => panic!("read before the close frame: {e}"),
            }
        }
    }
}

// ----- books from snapshot + deltas ---------------------------------------------------

/// A dollar amount as the API writes it ("12.34", "-0.50"), in cents.
fn dollars_to_cents(text: &str) -> i64 {
    let (whole, frac) = text.split_once('.').expect("two decimals");
    assert_eq!(frac.len(), 2, "{text}");
    let sign = if whole.starts_with('-') { -1 } else { 1 };
    sign * (whole.trim_start_matches('-').parse::<i64>().unwrap() * 100
        + frac.parse::<i64>().unwrap())
}

fn cents(price: &str) -> u8 {
    assert!(is_price(price), "{price}");
    price[2..].parse().expect("cents")
}

#[derive(Default, Clone, Debug, PartialEq)]
struct Book {
    /// price in cents -> count, per side.
    sides: [BTreeMap<u8, u64>; 2],
}

fn side_index(outcome: &str) -> usize {
    match outcome {
        "up" => 0,
        "down" => 1,
        other => panic!("outcome {other}"),
    }
}

impl Book {
    fn from_snapshot(msg: &Value) -> Book {
        assert_eq!(
            keys(msg),
            set(&["market_ticker", "up", "down", "checksum"]),
            "{msg}"
        );
        let mut book = Book::default();
        for (i, name) in ["up", "down"].iter().enumerate() {
            let mut last = 100u8;
            for level in msg[*name].as_array().expect("levels") {
                let p = cents(level[0].as_str().expect("price"));
                let c = level[1].as_str().expect("count");
                assert!(is_count(c) && c != "0", "{msg}");
                assert!(p < last, "levels best first: {msg}");
                last = p;
                book.sides[i].insert(p, c.parse().expect("count"));
            }
        }
        assert_eq!(
            msg["checksum"].as_u64(),
            Some(u64::from(book.checksum())),
            "snapshot checksum {msg}"
        );
        book
    }

    fn apply(&mut self, msg: &Value) {
        assert_eq!(
            keys(msg),
            set(&["market_ticker", "outcome", "price", "delta", "checksum"]),
            "{msg}"
        );
        let side = &mut self.sides[side_index(msg["outcome"].as_str().expect("outcome"))];
        let p = cents(msg["price"].as_str().expect("price"));
        let delta: i64 = msg["delta"]
            .as_str()
            .expect("delta")
            .parse()
            .expect("signed");
        assert_ne!(delta, 0, "{msg}");
        let now = side.get(&p).copied().unwrap_or(0) as i64 + delta;
        assert!(now >= 0, "level below zero: {msg}");
        if now == 0 {
            side.remove(&p);
        } else {
            side.insert(p, now as u64);
        }
        assert_eq!(
            msg["checksum"].as_u64(),
            Some(u64::from(self.checksum())),
            "delta checksum {msg}"
        );
    }

    /// The levels as the wire writes them, best first.
    fn levels(&self, i: usize) -> Value {
        Value::Array(
            self.sides[i]
                .iter()
                .rev()
                .map(|(p, c)| json!([format!("0.{p:02}"), c.to_string()]))
                .collect(),
        )
    }

    /// SPEC "Checksum", with the harness's own CRC-32.
    fn checksum(&self) -> u32 {
        crc32(checksum_text(&self.levels(0), &self.levels(1)).as_bytes())
    }
}

/// Books per market ticker, fed with orderbook_delta messages.
#[derive(Default)]
struct Books {
    books: BTreeMap<String, Book>,
    snapshots: usize,
    deltas: usize,
}

impl Books {
    /// Applies a data message; returns its market ticker if it was a book one.
    fn feed(&mut self, v: &Value) -> Option<String> {
        let msg = &v["msg"];
        let ticker = msg["market_ticker"].as_str()?.to_string();
        match v["type"].as_str()? {
            "orderbook_snapshot" => {
                self.snapshots += 1;
                self.books.insert(ticker.clone(), Book::from_snapshot(msg));
            }
            "orderbook_delta" => {
                self.deltas += 1;
                self.books
                    .get_mut(&ticker)
                    .unwrap_or_else(|| panic!("a delta before the snapshot: {v}"))
                    .apply(msg);
            }
            _ => return None,
        }
        Some(ticker)
    }

    fn matches_rest(&self, venue: &Venue, ticker: &str) -> bool {
        let rest = venue.read(&format!("/markets/{ticker}/orderbook"), None);
        let rest = &rest["orderbook"];
        self.books.get(ticker).is_some_and(|b| {
            b.levels(0) == rest["up"]
                && b.levels(1) == rest["down"]
                && rest["checksum"].as_u64() == Some(u64::from(b.checksum()))
        })
    }
}

/// A small deterministic generator (the tests must be repeatable).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fast_orders(config: &mut gateway::ServerConfig) {
    config.orders_per_second = 100_000;
    config.orders_burst = 100_000;
    // Clients that only read between long REST phases answer no ping
    // meanwhile; a slow run must not see them closed as silent.
    config.ws_ping_interval_ms = 600_000;
    config.http_idle_timeout_secs = 3_600;
}

// ----- public channels -----------------------------------------------------------------------

#[test]
fn books_rebuilt_from_snapshot_and_deltas_match_rest_under_random_trading() {
    let venue = Venue::start_with(fast_orders);
    let addr = venue.addr();
    let market = venue.open_market(SERIES_A);
    let traders: Vec<Trader> = (0..3).map(|_| venue.trader("100000")).collect();

    let mut by_market = connect(addr);
    let sids = by_market.subscribe(
        1,
        &["orderbook_delta", "ticker", "trade"],
        json!({ "market_tickers": [market] }),
    );
    let (book_sid, ticker_sid, trade_sid) = (sids[0], sids[1], sids[2]);
    let mut by_series = connect(addr);
    let series_sid = by_series.subscribe(
        1,
        &["orderbook_delta"],
        json!({ "series_tickers": [SERIES_A] }),
    )[0];

    // The snapshot comes first, for the one market.
    let first = by_market.data();
    assert_eq!(first["type"], "orderbook_snapshot", "{first}");
    assert_eq!(first["sid"], json!(book_sid));
    assert_eq!(first["seq"], json!(1));

    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut resting: Vec<(usize, String)> = Vec::new();
    for i in 0..200 {
        let t = rng.below(traders.len() as u64) as usize;
        let key = traders[t].key();
        if rng.below(100) < 15 && !resting.is_empty() {
            let (owner, id) = resting.swap_remove(rng.below(resting.len() as u64) as usize);
            let resp = venue.delete(&format!("/portfolio/orders/{id}"), traders[owner].key());
            assert_eq!(resp.status, 200, "{}", resp.text);
            continue;
        }
        let outcome = if rng.below(2) == 0 { "up" } else { "down" };
        let action = if rng.below(100) < 80 { "buy" } else { "sell" };
        let price = format!("0.{:02}", 30 + rng.below(41));
        let count = (1 + rng.below(20)).to_string();
        let mut body = order(
            &market,
            outcome,
            action,
            &price,
            &count,
            &coid(&format!("r{i}")),
        );
        if rng.below(10) == 0 {
            body["time_in_force"] = json!("immediate_or_cancel");
        }
        let resp = venue.place(key, &body);
        if resp.status == 201 && resp.body["order"]["status"] == "resting" {
            let id = resp.body["order"]["order_id"]
                .as_str()
                .expect("id")
                .to_string();
            resting.push((t, id));
        }
    }

    // Both clients converge on the REST book, every checksum checked.
    let mut books = Books::default();
    books.feed(&first);
    let mut trades: Vec<Value> = Vec::new();
    let mut last_ticker = Value::Null;
    by_market.data_while(WAIT, |v| {
        let sid = v["sid"].as_u64().expect("sid");
        if sid == book_sid {
            books.feed(v);
        } else if sid == ticker_sid {
            assert_eq!(v["type"], "ticker", "{v}");
            last_ticker = v["msg"].clone();
        } else if sid == trade_sid {
            assert_eq!(v["type"], "trade", "{v}");
            trades.push(v["msg"].clone());
        }
        !books.matches_rest(&venue, &market)
    });
    assert!(books.deltas > 50, "only {} deltas", books.deltas);
    let mut series_books = Books::default();
    by_series.data_while(WAIT, |v| {
        assert_eq!(v["sid"], json!(series_sid));
        series_books.feed(v);
        !series_books.matches_rest(&venue, &market)
    });
    assert!(
        series_books.books.len() >= 2,
        "the series' open and scheduled windows: {:?}",
        series_books.books.keys()
    );

    // Every public trade, in the REST shape, and the ticker as REST shows it.
    let rest_trades = venue.read(&format!("/markets/{market}/trades?limit=1000"), None);
    let rest_trades = rest_trades["trades"].as_array().expect("trades").clone();
    assert!(!rest_trades.is_empty(), "random trading traded");
    if trades.len() < rest_trades.len() {
        by_market.data_while(WAIT, |v| {
            if v["sid"] == json!(trade_sid) {
                trades.push(v["msg"].clone());
            } else if v["sid"] == json!(ticker_sid) {
                last_ticker = v["msg"].clone();
            }
            trades.len() < rest_trades.len()
        });
    }
    // Any ticker still on its way.
    while let Some(v) = by_market.data_until(Instant::now() + Duration::from_millis(300)) {
        assert_eq!(v["sid"], json!(ticker_sid), "{v}");
        last_ticker = v["msg"].clone();
    }
    let by_id = |list: &[Value]| -> BTreeMap<String, Value> {
        list.iter()
            .map(|t| (t["trade_id"].as_str().expect("id").to_string(), t.clone()))
            .collect()
    };
    assert_eq!(by_id(&trades), by_id(&rest_trades));
    let rest_market = venue.read(&format!("/markets/{market}"), None)["market"].clone();
    let mut expected = serde_json::Map::new();
    expected.insert("market_ticker".into(), json!(market));
    for f in [
        "up_bid",
        "up_bid_size",
        "up_ask",
        "up_ask_size",
        "last_price",
    ] {
        if let Some(v) = rest_market.get(f) {
            expected.insert(f.into(), v.clone());
        }
    }
    assert_eq!(last_ticker, Value::Object(expected));
}

#[test]
fn a_gap_from_a_full_queue_is_recovered_with_get_snapshot() {
    let venue = Venue::start_with(|c| {
        fast_orders(c);
        c.ws_queue_capacity = 1;
    });
    let addr = venue.addr();
    let market = venue.open_market(SERIES_A);
    let trader = venue.trader("100000");
    let mut client = connect(addr);
    client.strict = false;
    // Three subscriptions of one book on one connection: each delta is
    // three messages pushed back to back into a queue of one.
    for id in 1..=3 {
        client.subscribe(
            id,
            &["orderbook_delta"],
            json!({ "market_tickers": [market] }),
        );
    }
    // 60 levels, then one cancel-all: 60 deltas in one batch.
    for p in 1..=30 {
        for outcome in ["up", "down"] {
            venue.place_ok(
                trader.key(),
                &buy(&market, outcome, &format!("0.{p:02}"), "1"),
            );
        }
    }
    let resp = venue.delete("/portfolio/orders", trader.key());
    assert_eq!(resp.status, 200, "{}", resp.text);
    // The burst drops messages, but the client sees a gap only when a
    // message of the same subscription arrives after the dropped ones: if
    // the burst's last messages were the dropped ones, one more delta (into
    // a queue drained by now) shows the hole.
    let deadline = Instant::now() + WAIT;
    let mut extra = 0;
    while client.gaps.is_empty() {
        assert!(Instant::now() < deadline, "a gap in time");
        if client
            .data_until(Instant::now() + Duration::from_millis(200))
            .is_none()
        {
            extra += 1;
            venue.place_ok(
                trader.key(),
                &buy(&market, "up", &format!("0.{:02}", 40 + extra), "1"),
            );
        }
    }
    // Recovery on the subscription with the gap: drop its book, ask for a
    // snapshot, rebuild, and follow the deltas after it.
    let sid = client.gaps[0].0;
    while client
        .data_until(Instant::now() + Duration::from_millis(300))
        .is_some()
    {}
    let others: Vec<u64> = (1..=3).filter(|s| *s != sid).collect();
    client.send(&json!({ "id": 9, "cmd": "unsubscribe", "params": { "sids": others } }));
    client.replies(9, 2);
    let mut books = Books::default();
    let before = client.seqs[&sid];
    let reply = client.cmd(
        2,
        "update_subscription",
        json!({ "sid": sid, "action": "get_snapshot" }),
    );
    assert_eq!(reply["type"], "ok", "{reply}");
    assert_eq!(reply["msg"]["sid"], json!(sid));
    // Messages sent before the snapshot (late, on a loaded machine) are
    // passed over: the snapshot holds what they said.
    let snapshot = loop {
        let v = client.data();
        if v["type"] == "orderbook_snapshot" {
            break v;
        }
    };
    assert_eq!(snapshot["sid"], json!(sid));
    // Messages dropped after the last one read also took seqs: the
    // snapshot may follow a further jump, and a client takes it as is.
    assert!(snapshot["seq"].as_u64().unwrap() > before, "{snapshot}");
    books.feed(&snapshot);
    let gaps = client.gaps.len();
    assert!(books.matches_rest(&venue, &market));
    // And the deltas after it apply cleanly (the other sids are ignored).
    venue.place_ok(trader.key(), &buy(&market, "up", "0.42", "7"));
    client.data_while(WAIT, |v| {
        assert_eq!(v["sid"], json!(sid), "{v}");
        books.feed(v);
        !books.matches_rest(&venue, &market)
    });
    assert_eq!(client.gaps.len(), gaps, "no gap after the recovery");
}

/// The `updown_ws_*` lines of `/metrics`, by name.
fn ws_metrics(venue: &Venue) -> BTreeMap<String, u64> {
    let resp = venue.call_root("GET", "/metrics");
    assert_eq!(resp.status, 200, "{}", resp.text);
    let mut out = BTreeMap::new();
    for line in resp.text.lines() {
        if let Some(kind) = line.strip_prefix("# TYPE updown_ws_") {
            assert!(
                kind.ends_with(" counter") || kind.ends_with(" gauge"),
                "{line}"
            );
            continue;
        }
        if let Some((name, value)) = line.split_once(' ') {
            if name.starts_with("updown_ws_") {
                out.insert(name.to_string(), value.parse().expect("an integer"));
            }
        }
    }
    out
}

#[test]
fn the_publishers_counters_are_on_metrics_and_move() {
    let venue = Venue::start_with(|c| {
        fast_orders(c);
        c.ws_queue_capacity = 1;
    });
    let names = [
        "updown_ws_connections",
        "updown_ws_lost_batches_total",
        "updown_ws_messages_dropped_total",
        "updown_ws_messages_sent_total",
    ];
    let before = ws_metrics(&venue);
    assert_eq!(before.keys().map(String::as_str).collect::<Vec<_>>(), names);
    assert_eq!(before["updown_ws_connections"], 0, "{before:?}");
    let addr = venue.addr();
    let market = venue.open_market(SERIES_A);
    let trader = venue.trader("100000");
    let mut client = connect(addr);
    client.strict = false;
    let idle = connect(addr);
    assert_eq!(ws_metrics(&venue)["updown_ws_connections"], 2);
    // As in the gap test: three subscriptions of one book on a queue of
    // one, and a burst of deltas, so some messages go and some are dropped.
    for id in 1..=3 {
        client.subscribe(
            id,
            &["orderbook_delta"],
            json!({ "market_tickers": [market] }),
        );
    }
    for p in 1..=30 {
        venue.place_ok(trader.key(), &buy(&market, "up", &format!("0.{p:02}"), "1"));
    }
    let resp = venue.delete("/portfolio/orders", trader.key());
    assert_eq!(resp.status, 200, "{}", resp.text);
    // The cancel-all's thirty deltas reach three subscriptions in one go:
    // a queue of one must drop some. (Whether the client sees a gap
    // depends on which ones: the last messages of a subscription may be
    // the dropped ones, and nothing after them shows the hole.)
    let dropped_before = before["updown_ws_messages_dropped_total"];
    let deadline = Instant::now() + WAIT;
    while ws_metrics(&venue)["updown_ws_messages_dropped_total"] == dropped_before {
        assert!(
            Instant::now() < deadline,
            "messages dropped on a queue of one"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    while client
        .data_until(Instant::now() + Duration::from_millis(300))
        .is_some()
    {}
    let after = ws_metrics(&venue);
    let moved = |name: &str| after[name] - before[name];
    assert!(moved("updown_ws_messages_sent_total") > 0, "{after:?}");
    assert!(moved("updown_ws_messages_dropped_total") > 0, "{after:?}");
    // Nothing was lost between the sequencer and the publisher.
    assert_eq!(moved("updown_ws_lost_batches_total"), 0, "{after:?}");
    // Every message handed out or dropped took a seq of one of the three
    // subscriptions: their last seqs add up to sent + dropped.
    let seqs: u64 = client.seqs.values().sum();
    assert!(
        moved("updown_ws_messages_sent_total") + moved("updown_ws_messages_dropped_total") >= seqs,
        "{after:?} {:?}",
        client.seqs
    );
    drop(client);
    drop(idle);
    let deadline = Instant::now() + WAIT;
    while ws_metrics(&venue)["updown_ws_connections"] > 0 {
        assert!(Instant::now() < deadline, "the connections are gone");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn subscriptions_are_listed_updated_and_removed_and_prices_stream() {
    let venue = Venue::start();
    let addr = venue.addr();
    let market_a = venue.open_market(SERIES_A);
    let market_b = venue.open_market(SERIES_B);
    let mut c = connect(addr);

    // prices: the current price at once, then every print.
    let prices = c.subscribe(1, &["prices"], json!({ "symbols": [SYMBOL] }))[0];
    let now = c.data();
    assert_eq!(now["type"], "price");
    assert_eq!(now["sid"], json!(prices));
    assert_eq!(keys(&now["msg"]), set(&["symbol", "price", "t_ms"]));
    assert_eq!(now["msg"]["symbol"], SYMBOL);
    assert_eq!(now["msg"]["price"], "97000.50");
    let printed_ms = now_ms();
    venue.admin(
        "/admin/prices",
        json!({ "symbol": SYMBOL, "price": "97001.25", "t_ms": printed_ms }),
    );
    let print = c.data();
    assert_eq!(print["msg"]["price"], "97001.25");
    // t_ms is when the price printed at its source, not when it was sent.
    assert_eq!(print["msg"]["t_ms"], json!(printed_ms), "{print}");
    assert_eq!(print["seq"], json!(2));

    // ticker: the current top at once for each market.
    let ticker = c.subscribe(2, &["ticker"], json!({ "market_tickers": [market_a] }))[0];
    let top = c.data();
    assert_eq!(top["type"], "ticker");
    assert_eq!(top["msg"], json!({ "market_ticker": market_a }));
    let reply = c.cmd(
        3,
        "update_subscription",
        json!({ "sid": ticker, "action": "add_markets", "market_tickers": [market_b] }),
    );
    assert_eq!(reply["type"], "ok");
    assert_eq!(reply["msg"]["market_tickers"], json!([market_a, market_b]));
    let top_b = c.data();
    assert_eq!(top_b["msg"]["market_ticker"], json!(market_b));
    assert_eq!(top_b["seq"], json!(2));

    let list = c.cmd(4, "list_subscriptions", json!({}));
    assert_eq!(list["type"], "ok");
    assert_eq!(
        list["msg"],
        json!({ "subscriptions": [
            { "sid": prices, "channel": "prices", "symbols": [SYMBOL] },
            { "sid": ticker, "channel": "ticker", "market_tickers": [market_a, market_b], "series_tickers": [] },
        ]})
    );
    let reply = c.cmd(
        5,
        "update_subscription",
        json!({ "sid": ticker, "action": "delete_markets", "market_tickers": [market_a] }),
    );
    assert_eq!(reply["msg"]["market_tickers"], json!([market_b]));

    // unsubscribe: one reply per sid; then the sids are gone.
    c.send(&json!({ "id": 6, "cmd": "unsubscribe", "params": { "sids": [prices, ticker] } }));
    let replies = c.replies(6, 2);
    for (r, sid) in replies.iter().zip([prices, ticker]) {
        assert_eq!(r["type"], "unsubscribed", "{r}");
        assert_eq!(r["msg"]["sid"], json!(sid));
    }
    c.cmd_err(7, "unsubscribe", json!({ "sids": [prices] }), 4);
    c.cmd_err(
        8,
        "update_subscription",
        json!({ "sid": 99, "action": "get_snapshot" }),
        4,
    );
    assert_eq!(
        c.cmd(9, "list_subscriptions", json!({}))["msg"],
        json!({ "subscriptions": [] })
    );
    // No data of a removed subscription arrives.
    venue.push_price("97002");
    assert!(c
        .data_until(Instant::now() + Duration::from_millis(300))
        .is_none());

    // The numbered errors of bad commands.
    c.cmd_err(10, "dance", json!({}), 1);
    c.cmd_err(11, "subscribe", json!({ "channels": ["ticker"] }), 2);
    c.cmd_err(
        12,
        "subscribe",
        json!({ "channels": ["weather"], "market_tickers": [market_a] }),
        3,
    );
    c.cmd_err(
        13,
        "subscribe",
        json!({ "channels": ["ticker"], "market_tickers": ["NOT A TICKER"] }),
        7,
    );
    c.cmd_err(
        14,
        "subscribe",
        json!({ "channels": ["ticker"], "market_tickers": ["nope-200101-0000-0100"] }),
        7,
    );
    c.send_text("not json");
    let reply = c.replies_null();
    assert_eq!(reply["msg"]["code"], json!(2));
}

impl Client {
    /// The reply to a frame that had no id to echo.
    fn replies_null(&mut self) -> Value {
        let v = self.next_json(Instant::now() + WAIT).expect("a reply");
        assert_eq!(v["id"], Value::Null, "{v}");
        assert_eq!(v["type"], "error", "{v}");
        v
    }
}

/// A subscription by market tickers gets nothing of other markets; a
/// get_snapshot naming a market snapshots that market only, each side best
/// first; a market removed by delete_markets sends no more deltas; market
/// and series tickers together follow both.
#[test]
fn market_channels_carry_only_their_markets_and_get_snapshot_only_the_named_ones() {
    let venue = Venue::start();
    let market_a = venue.open_market(SERIES_A);
    let market_b = venue.open_market(SERIES_B);
    let (x, y) = (venue.trader("1000"), venue.trader("1000"));
    let trade_in = |market: &str| {
        venue.place_ok(x.key(), &buy(market, "up", "0.50", "1"));
        venue.place_ok(y.key(), &buy(market, "down", "0.50", "1"));
    };
    let mut c = connect(venue.addr());
    let sids = c.subscribe(
        1,
        &["trade", "orderbook_delta"],
        json!({ "market_tickers": [market_b] }),
    );
    let (trade, book) = (sids[0], sids[1]);
    let snapshot = c.data();
    assert_eq!(snapshot["type"], "orderbook_snapshot", "{snapshot}");
    assert_eq!(snapshot["msg"]["market_ticker"], json!(market_b));

    // Another connection follows market a, so a's messages are written.
    let mut other = connect(venue.addr());
    other.subscribe(
        1,
        &["trade", "orderbook_delta"],
        json!({ "market_tickers": [market_a] }),
    );

    // A trade in market a, then one in b: only b's messages arrive.
    trade_in(&market_a);
    trade_in(&market_b);
    let only_b = |v: &Value| {
        assert_eq!(
            v["msg"]["market_ticker"],
            json!(market_b),
            "another market's message: {v}"
        );
    };
    c.data_while(WAIT, |v| {
        only_b(v);
        v["sid"] != json!(trade)
    });
    while let Some(v) = c.data_until(Instant::now() + Duration::from_millis(300)) {
        only_b(&v);
    }
    // Three levels in b (two on Up) for the snapshots below.
    venue.place_ok(x.key(), &buy(&market_b, "up", "0.30", "2"));
    venue.place_ok(x.key(), &buy(&market_b, "up", "0.20", "3"));
    venue.place_ok(y.key(), &buy(&market_b, "down", "0.30", "4"));
    let mut deltas = 0;
    c.data_while(WAIT, |v| {
        only_b(v);
        assert_eq!(v["type"], "orderbook_delta", "{v}");
        deltas += 1;
        deltas < 3
    });

    // With market a added, get_snapshot naming b snapshots b alone.
    let reply = c.cmd(
        2,
        "update_subscription",
        json!({ "sid": book, "action": "add_markets", "market_tickers": [market_a] }),
    );
    assert_eq!(reply["type"], "ok", "{reply}");
    let added = c.data();
    assert_eq!(added["type"], "orderbook_snapshot", "{added}");
    assert_eq!(added["msg"]["market_ticker"], json!(market_a));
    let reply = c.cmd(
        3,
        "update_subscription",
        json!({ "sid": book, "action": "get_snapshot", "market_tickers": [market_b] }),
    );
    assert_eq!(reply["type"], "ok", "{reply}");
    let again = c.data();
    assert_eq!(again["type"], "orderbook_snapshot", "{again}");
    assert_eq!(again["msg"]["market_ticker"], json!(market_b), "{again}");
    // The whole book, each side best first, as REST shows it.
    let rest = venue.read(&format!("/markets/{market_b}/orderbook"), None)["orderbook"].clone();
    assert_eq!(
        again["msg"]["up"],
        json!([["0.30", "2"], ["0.20", "3"]]),
        "{again}"
    );
    assert_eq!(again["msg"]["up"], rest["up"], "{again}");
    assert_eq!(again["msg"]["down"], rest["down"], "{again}");
    assert!(
        c.data_until(Instant::now() + Duration::from_millis(300))
            .is_none(),
        "a snapshot of a market get_snapshot did not name"
    );

    // delete_markets: a's changes stop, b's go on.
    let reply = c.cmd(
        4,
        "update_subscription",
        json!({ "sid": book, "action": "delete_markets", "market_tickers": [market_a] }),
    );
    assert_eq!(reply["msg"]["market_tickers"], json!([market_b]), "{reply}");
    venue.place_ok(x.key(), &buy(&market_a, "up", "0.40", "1"));
    venue.place_ok(x.key(), &buy(&market_b, "up", "0.40", "1"));
    let delta = c.data();
    assert_eq!(delta["type"], "orderbook_delta", "{delta}");
    assert_eq!(
        delta["msg"]["market_ticker"],
        json!(market_b),
        "a delta of a deleted market: {delta}"
    );

    // Market and series tickers together: the named market and the
    // series' windows, each with its top at once.
    let both = c.subscribe(
        5,
        &["ticker"],
        json!({ "market_tickers": [market_a], "series_tickers": [SERIES_B] }),
    )[0];
    let mut tops = Vec::new();
    while let Some(v) = c.data_until(Instant::now() + Duration::from_millis(300)) {
        if v["sid"] == json!(both) {
            tops.push(v["msg"]["market_ticker"].clone());
        }
    }
    assert!(tops.contains(&json!(market_a)), "{tops:?}");
    assert!(tops.contains(&json!(market_b)), "{tops:?}");
}

/// A series subscription takes up a window listed after it on the ticker
/// and trade channels too: the window's top at once, then its trades.
/// (The window is a day long, so it is open for the whole test.)
#[test]
fn a_series_subscription_carries_a_new_windows_ticker_and_trades() {
    let venue = Venue::start();
    let mut c = connect(venue.addr());
    let sids = c.subscribe(
        1,
        &["ticker", "trade"],
        json!({ "series_tickers": ["ws-1d"] }),
    );
    let (ticker, trade) = (sids[0], sids[1]);
    venue.internal(Command::CreateSeries(SeriesConfig {
        ticker: "ws-1d".into(),
        symbol: SYMBOL.into(),
        window_ms: 24 * 60 * 60 * 1000,
        list_ahead: 0,
        taker_fee_bps: 0,
        maker_fee_bps: 0,
        market_cap_cents: 1_000_000,
    }));
    venue.push_price("97001");
    let top = c.data();
    assert_eq!(top["sid"], json!(ticker), "{top}");
    let window = top["msg"]["market_ticker"]
        .as_str()
        .expect("ticker")
        .to_string();
    assert!(window.starts_with("ws-1d-"), "{top}");
    assert_eq!(top["msg"], json!({ "market_ticker": window }));
    let deadline = Instant::now() + WAIT;
    while venue.read(&format!("/markets/{window}"), None)["market"]["status"] != "open" {
        assert!(Instant::now() < deadline, "the window did not open");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (x, y) = (venue.trader("1000"), venue.trader("1000"));
    venue.place_ok(x.key(), &buy(&window, "up", "0.50", "1"));
    venue.place_ok(y.key(), &buy(&window, "down", "0.50", "1"));
    let mut traded = false;
    c.data_while(WAIT, |v| {
        assert_eq!(v["msg"]["market_ticker"], json!(window), "{v}");
        if v["sid"] == json!(trade) {
            assert_eq!(v["msg"]["up_price"], "0.50", "{v}");
            traded = true;
        }
        !traded
    });
}

// ----- series follow windows (about a minute) ---------------------------------------------------

/// SLOW (up to about 65 s): waits for a real minute boundary, because
/// windows are at least a minute long and the venue's clock is the wall
/// clock. The series is created after the subscription, so its window is
/// new to the subscription: its snapshot, `open`, `closed` and `settled`
/// all arrive on the series subscription.
#[test]
fn a_series_subscription_follows_a_new_window_through_open_closed_and_settled() {
    let dir = tempfile::tempdir().expect("dir");
    let mut config = config(dir.path());
    config.series.clear();
    let server = Server::start(config).expect("start");
    let addr = server.addr;
    let price = |p: i64| {
        let reply = server
            .runtime()
            .block_on(server.submitter.internal(Command::Price {
                symbol: SYMBOL.into(),
                price_e8: p * 100_000_000,
                t_ms: now_ms(),
            }));
        assert!(matches!(reply, Ok(sequencer::Reply::Ok)), "{reply:?}");
    };
    price(100);
    let mut c = connect(addr);
    let sids = c.subscribe(
        1,
        &["window_lifecycle", "orderbook_delta"],
        json!({ "series_tickers": ["ws-1m"] }),
    );
    let (life, book) = (sids[0], sids[1]);
    let reply =
        server.runtime().block_on(
            server
                .submitter
                .internal(Command::CreateSeries(SeriesConfig {
                    ticker: "ws-1m".into(),
                    symbol: SYMBOL.into(),
                    window_ms: 60_000,
                    list_ahead: 0,
                    taker_fee_bps: 0,
                    maker_fee_bps: 0,
                    market_cap_cents: 1_000_000,
                })),
        );
    assert!(matches!(reply, Ok(sequencer::Reply::Ok)), "{reply:?}");

    let snapshot = c.data();
    assert_eq!(snapshot["type"], "orderbook_snapshot", "{snapshot}");
    assert_eq!(snapshot["sid"], json!(book));
    let window = snapshot["msg"]["market_ticker"]
        .as_str()
        .expect("ticker")
        .to_string();
    assert!(window.starts_with("ws-1m-"), "{window}");
    let open = c.data();
    assert_eq!(open["sid"], json!(life), "{open}");
    assert_eq!(open["type"], "window_lifecycle");
    assert_eq!(
        keys(&open["msg"]),
        set(&["market_ticker", "event", "price_to_beat", "ts_ms"])
    );
    assert_eq!(open["msg"]["event"], "open");
    assert_eq!(open["msg"]["market_ticker"], json!(window));
    assert_eq!(open["msg"]["price_to_beat"], "100.00");

    // Prints keep coming; the window closes at the minute and settles on
    // the first print at or after its close; the next window opens on the
    // first print after its open (a print at the very millisecond of the
    // close settles one and opens nothing).
    let mut events: Vec<Value> = Vec::new();
    let mut snapshots: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(75);
    let mut p = 100;
    let seen = |events: &[Value], event: &str, ticker: Option<&String>| {
        events.iter().any(|e| {
            e["msg"]["event"] == event
                && ticker.is_some_and(|t| e["msg"]["market_ticker"] == json!(t))
        })
    };
    while !(seen(&events, "settled", Some(&window)) && seen(&events, "open", snapshots.first())) {
        assert!(Instant::now() < deadline, "no settlement: {events:?}");
        p += 1;
        price(p);
        while let Some(v) = c.data_until(Instant::now() + Duration::from_millis(500)) {
            if v["sid"] == json!(life) {
                events.push(v);
            } else {
                assert_eq!(v["type"], "orderbook_snapshot", "{v}");
                snapshots.push(v["msg"]["market_ticker"].as_str().unwrap().to_string());
            }
        }
    }
    let mine: Vec<&Value> = events
        .iter()
        .filter(|e| e["msg"]["market_ticker"] == json!(window))
        .collect();
    assert_eq!(mine.len(), 2, "{events:?}");
    assert_eq!(mine[0]["msg"]["event"], "closed");
    assert_eq!(
        keys(&mine[0]["msg"]),
        set(&["market_ticker", "event", "ts_ms"])
    );
    assert_eq!(mine[1]["msg"]["event"], "settled");
    assert_eq!(
        keys(&mine[1]["msg"]),
        set(&[
            "market_ticker",
            "event",
            "result",
            "settlement_price",
            "ts_ms"
        ])
    );
    assert_eq!(mine[1]["msg"]["result"], "up");
    // The settlement price is the one REST shows for the settled window.
    let mut rest = ureq::get(&format!("http://{addr}/v1/markets/{window}"))
        .call()
        .expect("GET the market");
    let rest: Value =
        serde_json::from_str(&rest.body_mut().read_to_string().expect("body")).expect("JSON");
    assert!(rest["market"]["settlement_price"].is_string(), "{rest}");
    assert_eq!(
        mine[1]["msg"]["settlement_price"], rest["market"]["settlement_price"],
        "{rest}"
    );
    // The next window was listed and opened on the same subscriptions.
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
    assert_ne!(snapshots[0], window);
    drop(c);
    server.stop();
}

// ----- private channels ------------------------------------------------------------------------

#[test]
fn private_channels_need_a_key_and_carry_only_the_accounts_own_events() {
    let venue = Venue::start();
    let addr = venue.addr();
    let market = venue.open_market(SERIES_A);
    let alice = venue.trader("1000");
    let bob = venue.trader("1000");
    let private = ["fill", "user_orders", "market_positions", "balance"];

    // Without a key: 8 AUTH_REQUIRED, for each private channel.
    let mut anonymous = connect(addr);
    for (i, channel) in private.iter().enumerate() {
        anonymous.cmd_err(
            i as u64 + 1,
            "subscribe",
            json!({ "channels": [channel] }),
            8,
        );
    }
    // A private channel beside a public one: the whole command is refused,
    // and nothing is subscribed.
    anonymous.cmd_err(
        5,
        "subscribe",
        json!({ "channels": ["ticker", "fill"], "market_tickers": [market] }),
        8,
    );
    let listed = anonymous.cmd(6, "list_subscriptions", json!({}));
    assert_eq!(listed["msg"]["subscriptions"], json!([]), "{listed}");
    // A refused key: 401 on the upgrade, error 9 on login.
    let (status, body) =
        match try_connect(addr, &[("Authorization", "Bearer tk_test_nokey_secret")]) {
            Ok(_) => panic!("an unknown key was accepted"),
            Err(e) => e,
        };
    assert_eq!(status, 401);
    assert_eq!(body["code"], "UNAUTHORIZED");
    let bad = format!("{}x", alice.key.as_str());
    let msg = anonymous.cmd_err(10, "login", json!({ "api_key": bad }), 9);
    assert_eq!(msg, "Invalid API key.");

    // Alice by bearer header, Bob by login.
    let mut a = connect_with_key(addr, alice.key.as_str());
    let a_sids = a.subscribe(1, &private, json!({}));
    let mut b = connect(addr);
    let login = b.cmd(1, "login", json!({ "api_key": bob.key.as_str() }));
    assert_eq!(login["type"], "ok", "{login}");
    b.cmd_err(2, "login", json!({ "api_key": bob.key.as_str() }), 10);
    let b_sids = b.subscribe(3, &private, json!({}));

    // Alice rests a buy of Up; Bob's buy of Down crosses it.
    let a_order = venue.place_ok(alice.key(), &buy(&market, "up", "0.40", "10"));
    let b_order = venue.place_ok(bob.key(), &buy(&market, "down", "0.60", "10"));

    for (client, sids, own, other, trader) in [
        (&mut a, &a_sids, &a_order, &b_order, &alice),
        (&mut b, &b_sids, &b_order, &a_order, &bob),
    ] {
        let mut orders = Vec::new();
        let mut fills = Vec::new();
        let mut positions = Vec::new();
        let mut balances = Vec::new();
        client.data_while(WAIT, |v| {
            let msg = v["msg"].clone();
            match v["type"].as_str().unwrap() {
                "user_order" => {
                    assert_eq!(v["sid"], json!(sids[1]));
                    assert_order_shape(&msg);
                    assert_ne!(
                        msg["order_id"], other["order_id"],
                        "another account's order"
                    );
                    orders.push(msg);
                }
                "fill" => {
                    assert_eq!(v["sid"], json!(sids[0]));
                    assert_fill_shape(&msg);
                    fills.push(msg);
                }
                "market_position" => {
                    assert_eq!(v["sid"], json!(sids[2]));
                    assert_position_shape(&msg);
                    positions.push(msg);
                }
                "balance" => {
                    assert_eq!(v["sid"], json!(sids[3]));
                    assert_eq!(keys(&msg), set(&["cash", "held", "buying_power"]));
                    let cents = |field: &str| dollars_to_cents(msg[field].as_str().unwrap());
                    assert_eq!(
                        cents("buying_power"),
                        cents("cash") - cents("held"),
                        "buying power is cash less held: {msg}"
                    );
                    balances.push(msg);
                }
                other => panic!("{other}: {v}"),
            }
            // The maker's position and balance follow its order's update.
            !(orders.iter().any(|o| o["status"] == "executed")
                && !fills.is_empty()
                && positions.last().is_some_and(|p| p["count"] == "10")
                && balances.last().is_some_and(|b| b["held"] == "0.00"))
        });
        assert!(
            orders.iter().all(|o| o["order_id"] == own["order_id"]),
            "{orders:?}"
        );
        if std::ptr::eq(trader, &alice) {
            // Alice's buy rested before it traded: her cash was held
            // (its price and the most fee it could pay).
            assert!(balances.iter().any(|b| b["held"] != "0.00"), "{balances:?}");
        }
        // The last of each equals what REST says now.
        let rest_fills = venue.read("/portfolio/fills", trader.key());
        assert_eq!(fills, rest_fills["fills"].as_array().unwrap().clone());
        let rest_positions = venue.read("/portfolio/positions", trader.key());
        assert_eq!(positions.last().unwrap(), &rest_positions["positions"][0]);
        let rest_balance = venue.read("/portfolio/balance", trader.key());
        assert_eq!(balances.last().unwrap(), &rest_balance["balance"]);
        let rest_order = venue.read(
            &format!("/portfolio/orders/{}", own["order_id"].as_str().unwrap()),
            trader.key(),
        );
        assert_eq!(orders.last().unwrap(), &rest_order["order"]);
        // Nothing else (nothing of the other account) follows.
        assert!(client
            .data_until(Instant::now() + Duration::from_millis(300))
            .is_none());
    }
}

#[test]
fn a_revoked_key_closes_its_connection_within_a_ping() {
    // Long enough that the revocation's own time never reaches two
    // intervals of silence (closed 1001, not 1008); WAIT is five of them.
    let venue = Venue::start_with(|c| c.ws_ping_interval_ms = 2_000);
    let addr = venue.addr();
    let trader = venue.trader("100");
    let mut c = connect_with_key(addr, trader.key.as_str());
    c.subscribe(1, &["balance"], json!({}));
    venue.revoke(&trader.key);
    assert_eq!(c.close_code(WAIT), 1008);
}

/// The lockout stops keys being tested from an address; it does not cut
/// the open websocket of a trader who proved its key before, from the same
/// address (one host, several bots), while revocation still does.
#[test]
fn wrong_keys_from_an_address_do_not_close_its_proven_connections() {
    let venue = Venue::start_with(|c| {
        // Two seconds of silence close a connection: the HTTP calls below,
        // made without reading, must fit in it on a loaded machine.
        c.ws_ping_interval_ms = 1_000;
        c.lockout_failures = 3;
        c.lockout_secs = 60;
    });
    let addr = venue.addr();
    let trader = venue.trader("100");
    let mut c = connect_with_key(addr, trader.key.as_str());
    c.subscribe(1, &["balance"], json!({}));
    for _ in 0..3 {
        venue
            .get("/account", Some("tk_test_nosuchkey_s3cr3t"))
            .err(401, "UNAUTHORIZED");
    }
    venue.get("/account", trader.key()).err(429, "RATE_LIMITED");
    // Several pings later (each re-checks the key; reading answers them)
    // it is still open and answers.
    let deadline = Instant::now() + Duration::from_millis(3_500);
    while c.data_until(deadline).is_some() {}
    c.send_text(r#"{"id":2,"cmd":"list_subscriptions"}"#);
    assert_eq!(c.replies(2, 1)[0]["type"], "ok");
    venue.revoke(&trader.key);
    assert_eq!(c.close_code(WAIT), 1008);
}

// ----- limits and close codes -------------------------------------------------------------------

#[test]
fn flooding_commands_closes_with_1008() {
    let venue = Venue::start();
    // Text commands, and binary frames (each answered with an error, so
    // each costs the server as much as a command).
    for binary in [false, true] {
        let mut c = connect(venue.addr());
        // Far over the burst of 20, so that the bucket cannot refill in time
        // however slowly the server reads them; sends after the close may fail.
        for id in 0..100 {
            let text = json!({ "id": id, "cmd": "list_subscriptions" }).to_string();
            let frame = if binary {
                Message::binary(text.into_bytes())
            } else {
                Message::text(text)
            };
            if c.ws.send(frame).is_err() {
                break;
            }
        }
        assert_eq!(c.close_code(WAIT), 1008, "binary frames: {binary}");
    }
}

/// Pings and pongs have a bucket of their own, of the commands' size: a
/// flood of them closes with 1008 (it cost a core, unbounded), and a
/// burst of commands does not use up the room of the pongs.
#[test]
fn flooding_pings_or_pongs_closes_with_1008() {
    for pong in [false, true] {
        let venue = Venue::start();
        let mut c = connect(venue.addr());
        for id in 0..20 {
            c.send(&json!({ "id": id, "cmd": "list_subscriptions" }));
        }
        for id in 0..20 {
            assert_eq!(c.replies(id, 1)[0]["type"], "ok");
        }
        for _ in 0..100 {
            let frame = if pong {
                Message::Pong(Vec::new().into())
            } else {
                Message::Ping(Vec::new().into())
            };
            if c.ws.send(frame).is_err() {
                break;
            }
        }
        assert_eq!(c.close_code(WAIT), 1008, "pong {pong}");
    }
}

#[test]
fn a_message_over_64_kb_closes_with_1009_and_one_of_64_kb_is_taken() {
    let venue = Venue::start();
    let addr = venue.addr();
    let mut c = connect(addr);
    let command = r#"{"id":1,"cmd":"list_subscriptions","params":{}}"#;
    let exact = format!("{command}{}", " ".repeat(64 * 1024 - command.len()));
    assert_eq!(exact.len(), 65_536);
    c.send_text(&exact);
    assert_eq!(c.replies(1, 1)[0]["type"], "ok");
    let over = format!("{command}{}", " ".repeat(64 * 1024 + 1 - command.len()));
    c.send_text(&over);
    assert_eq!(c.close_code(WAIT), 1009);
}

/// One frame as a client writes it to the socket: `first` is FIN, the
/// reserved bits and the opcode; the payload is masked with `mask` when
/// given (a client must mask: `None` tests the refusal). A 7-bit length up
/// to 125 bytes, a 16-bit one above.
fn raw_frame(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let masked = if mask.is_some() { 0x80 } else { 0 };
    let mut out = vec![first];
    match u8::try_from(payload.len()) {
        Ok(len) if len < 126 => out.push(masked | len),
        _ => {
            let len = u16::try_from(payload.len()).expect("a 16-bit length");
            out.push(masked | 126);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// The 64 KB bound is on the message, not the frame: a message of exactly
/// 64 KB sent in two fragments is taken, one byte more closes with 1009.
#[test]
fn a_fragmented_message_of_64_kb_is_taken_and_one_byte_more_closes_with_1009() {
    use std::io::Write;
    let venue = Venue::start();
    // Masked frames with 16-bit lengths (every payload here is 126 to
    // 65,535 bytes).
    let frame = |first: u8, payload: &[u8]| raw_frame(first, payload, Some([3, 141, 59, 26]));
    let message = |id: u64, len: usize| {
        let command = format!(r#"{{"id":{id},"cmd":"list_subscriptions","params":{{}}}}"#);
        format!("{command}{}", " ".repeat(len - command.len())).into_bytes()
    };
    // Text without FIN, then a continuation with FIN.
    let send = |c: &mut Client, bytes: &[u8], split: usize| {
        let mut raw = frame(0x01, &bytes[..split]);
        raw.extend(frame(0x80, &bytes[split..]));
        c.ws.get_mut().write_all(&raw).expect("raw frames");
    };
    // Halves, a short first fragment and a long one: the bound is on the
    // sum of the fragments, whichever is the longer.
    for split in [32 * 1024, 16 * 1024, 48 * 1024] {
        let mut c = connect(venue.addr());
        let exact = message(1, 64 * 1024);
        send(&mut c, &exact, split);
        assert_eq!(c.replies(1, 1)[0]["type"], "ok", "split at {split}");
        let over = message(2, 64 * 1024 + 1);
        send(&mut c, &over, split);
        assert_eq!(c.close_code(WAIT), 1009, "split at {split}");
    }
}

/// RFC 6455 §5.4: a text or binary frame may not start inside a message
/// still being fragmented; the server closes with 1002 (it does not answer
/// the second message).
#[test]
fn a_new_message_inside_a_fragmented_one_closes_with_1002() {
    use std::io::Write;
    let venue = Venue::start();
    let mut c = connect(venue.addr());
    let frame = |first: u8, payload: &[u8]| raw_frame(first, payload, Some([9, 77, 130, 5]));
    // Text without FIN (the start of a message), then a whole text frame.
    let mut raw = frame(0x01, br#"{"id":1,"cmd":"#);
    raw.extend(frame(
        0x81,
        br#"{"id":2,"cmd":"list_subscriptions","params":{}}"#,
    ));
    c.ws.get_mut().write_all(&raw).expect("raw frames");
    assert_eq!(c.close_code(WAIT), 1002);
}

/// RFC 6455 §5.1: a frame from the client without a mask closes the
/// connection with 1002 (it was answered like a masked one), after the
/// masked frames before it were taken, even when both arrive in one
/// write.
#[test]
fn an_unmasked_frame_from_the_client_closes_with_1002() {
    use std::io::Write;
    let venue = Venue::start();
    let mut c = connect(venue.addr());
    let frame = |id: u64, mask: Option<[u8; 4]>| {
        let text = format!(r#"{{"id":{id},"cmd":"list_subscriptions","params":{{}}}}"#);
        raw_frame(0x81, text.as_bytes(), mask)
    };
    let mut both = frame(1, Some([7, 1, 200, 42]));
    both.extend(frame(2, None));
    c.ws.get_mut().write_all(&both).expect("raw frames");
    assert_eq!(c.replies(1, 1)[0]["type"], "ok");
    assert_eq!(c.close_code(WAIT), 1002);
    // An unmasked frame of two bytes (an empty ping), the last the client
    // sends, closes too: it is not answered with a pong.
    let mut c = connect(venue.addr());
    c.ws.get_mut().write_all(&[0x89, 0x00]).expect("raw frame");
    assert_eq!(c.close_code(WAIT), 1002);
}

/// A ticker subscriber's first message is the market's top as it is now,
/// the same as REST's, whatever traded and rested before it subscribed.
#[test]
fn a_ticker_subscribed_after_trading_starts_from_the_current_top() {
    let venue = Venue::start();
    let market = venue.open_market(SERIES_A);
    let (a, b) = (venue.trader("1000"), venue.trader("1000"));
    venue.place_ok(a.key(), &buy(&market, "up", "0.50", "3"));
    venue.place_ok(b.key(), &buy(&market, "down", "0.50", "1"));
    venue.place_ok(b.key(), &buy(&market, "down", "0.45", "2"));
    venue.place_ok(a.key(), &buy(&market, "up", "0.40", "5"));
    let rest = venue.read(&format!("/markets/{market}"), None)["market"].clone();
    let fields = [
        "up_bid",
        "up_bid_size",
        "up_ask",
        "up_ask_size",
        "last_price",
    ];
    let expected: BTreeMap<&str, &str> = [
        ("up_bid", "0.50"),
        ("up_bid_size", "2"),
        ("up_ask", "0.55"),
        ("up_ask_size", "2"),
        ("last_price", "0.50"),
    ]
    .into();
    for field in fields {
        assert_eq!(rest[field].as_str(), Some(expected[field]), "{rest}");
    }
    let mut c = connect(venue.addr());
    c.subscribe(1, &["ticker"], json!({ "market_tickers": [market] }));
    let top = c.data();
    assert_eq!(top["type"], "ticker", "{top}");
    assert_eq!(top["msg"]["market_ticker"], json!(market));
    for field in fields {
        assert_eq!(top["msg"][field], rest[field], "{field}: {top}");
    }
}

#[test]
fn tickers_subscriptions_and_connections_are_bounded() {
    let venue = Venue::start();
    let addr = venue.addr();
    let market = venue.open_market(SERIES_A);
    let mut c = connect(addr);
    // 100 tickers pass, 101 do not; 64 symbols pass, 65 do not.
    let series: Vec<String> = (0..101).map(|i| format!("s{i}")).collect();
    c.cmd_err(
        1,
        "subscribe",
        json!({ "channels": ["trade"], "series_tickers": series }),
        5,
    );
    let sids = c.subscribe(2, &["trade"], json!({ "series_tickers": series[..100] }));
    let symbols: Vec<String> = (0..65).map(|i| format!("S{i}")).collect();
    c.cmd_err(
        3,
        "subscribe",
        json!({ "channels": ["prices"], "symbols": symbols }),
        5,
    );
    c.subscribe(4, &["prices"], json!({ "symbols": symbols[..64] }));
    c.cmd(5, "unsubscribe", json!({ "sids": sids }));
    // 100 subscriptions per connection (commands paced under the rate).
    let channels = [
        "orderbook_delta",
        "ticker",
        "trade",
        "window_lifecycle",
        "prices",
    ];
    let mut count = 1; // the prices subscription above
    let mut id = 10;
    while count + channels.len() <= 100 {
        c.subscribe(
            id,
            &channels,
            json!({ "market_tickers": [market], "symbols": [SYMBOL] }),
        );
        count += channels.len();
        id += 1;
        std::thread::sleep(Duration::from_millis(110));
    }
    let fill = 100 - count;
    c.subscribe(
        id,
        &channels[..fill],
        json!({ "market_tickers": [market], "symbols": [SYMBOL] }),
    );
    c.cmd_err(
        id + 1,
        "subscribe",
        json!({ "channels": ["trade"], "market_tickers": [market] }),
        6,
    );
    let list = c.cmd(id + 2, "list_subscriptions", json!({}));
    assert_eq!(list["msg"]["subscriptions"].as_array().unwrap().len(), 100);

    // 20 connections per address; the 21st upgrade is refused with 429.
    drop(c);
    // (The dropped connection's slot is released when the server sees it go.)
    let connect_retry = || {
        let deadline = Instant::now() + WAIT;
        loop {
            match try_connect(addr, &[]) {
                Ok(client) => return client,
                Err((429, _)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    };
    let mut open: Vec<Client> = (0..20).map(|_| connect_retry()).collect();
    let (status, body) = match try_connect(addr, &[]) {
        Ok(_) => panic!("a 21st connection was accepted"),
        Err(e) => e,
    };
    assert_eq!(status, 429);
    assert_eq!(body["code"], "RATE_LIMITED");
    // One closes; a new one is accepted.
    open.pop();
    open.push(connect_retry());
}

#[test]
fn a_silent_connection_is_closed_and_a_live_one_is_pinged() {
    // Pings every second; a connection silent for two intervals is closed,
    // so a stall of the test process shorter than two seconds changes
    // nothing.
    let venue = Venue::start_with(|c| c.ws_ping_interval_ms = 1_000);
    let addr = venue.addr();
    let mut silent = connect(addr);
    let mut live = connect(addr);
    // The live client reads (and so answers pings) for a while.
    let mut pings = 0;
    let deadline = Instant::now() + Duration::from_millis(4_600);
    while let Some(m) = live.frame(deadline) {
        if let Message::Ping(_) = m {
            pings += 1;
        }
    }
    assert!(pings >= 3, "{pings} pings");
    assert_eq!(live.cmd(1, "list_subscriptions", json!({}))["type"], "ok");
    // The silent one answered nothing and was closed.
    assert_eq!(silent.close_code(WAIT), 1001);
}

/// A server shutting down closes every websocket with 1001 (going away),
/// idle or not, before its listeners stop.
#[test]
fn shutdown_closes_every_connection_with_1001() {
    let mut venue = Venue::start();
    let addr = venue.addr();
    let mut idle = connect(addr);
    let mut talking = connect(addr);
    assert_eq!(
        talking.cmd(1, "list_subscriptions", json!({}))["type"],
        "ok"
    );
    let stopping = std::thread::spawn(move || venue.stop());
    assert_eq!(idle.close_code(WAIT), 1001);
    assert_eq!(talking.close_code(WAIT), 1001);
    stopping.join().expect("the venue stops");
}

/// An HTTP/1.1 request that carries a websocket handshake's key and version
/// but is not an upgrade to a websocket (no `Connection: Upgrade`, or an
/// upgrade to something else) is refused with 400, not switched.
#[test]
fn a_request_that_is_not_a_websocket_upgrade_is_refused_with_400() {
    let venue = Venue::start();
    for (connection, upgrade) in [("keep-alive", "websocket"), ("Upgrade", "h2c")] {
        let headers = [("Connection", connection), ("Upgrade", upgrade)];
        match try_connect(venue.addr(), &headers) {
            Err((status, body)) => {
                assert_eq!(status, 400, "{headers:?}: {body}");
                assert_eq!(body["code"], "BAD_REQUEST", "{headers:?}: {body}");
            }
            Ok(_) => panic!("{headers:?}: switched to a websocket"),
        }
    }
}

/// A binary frame is no command: it is answered with error 2 in the
/// spec's error shape (id null: a binary frame has no id to echo), and the
/// connection stays open.
#[test]
fn a_binary_frame_is_answered_with_error_2() {
    let venue = Venue::start();
    let mut c = connect(venue.addr());
    c.ws.send(Message::binary(
        b"{\"id\":1,\"cmd\":\"list_subscriptions\"}".to_vec(),
    ))
    .expect("send");
    let reply = c
        .next_json(Instant::now() + WAIT)
        .expect("an answer to a binary frame");
    assert_eq!(
        reply,
        json!({
            "id": null,
            "type": "error",
            "msg": { "code": 2, "msg": "Commands are JSON text frames." }
        })
    );
    assert_eq!(c.cmd(2, "list_subscriptions", json!({}))["type"], "ok");
}

/// An empty key is a key that does not exist: error 9 "Invalid API key."
/// (as any other wrong key, and counted the same), not the words for a
/// request that sent no key at all.
#[test]
fn a_login_with_an_empty_key_is_an_invalid_key() {
    let venue = Venue::start();
    let mut c = connect(venue.addr());
    let msg = c.cmd_err(1, "login", json!({ "api_key": "" }), 9);
    assert_eq!(msg, "Invalid API key.");
}

/// A login the exchange cannot check in time is error 11 (retry), not 9:
/// the key is not refused.
#[test]
fn a_login_the_exchange_cannot_check_is_error_11_not_an_invalid_key() {
    let mut venue = Venue::start();
    let trader = venue.trader("100");
    // Every read to the sequencer gives up at once.
    venue.restart_with(|c| c.request_timeout_ms = 0);
    let mut c = connect(venue.addr());
    c.cmd_err(1, "login", json!({ "api_key": trader.key.as_str() }), 11);
    // Still anonymous: a second login is not "already authenticated".
    c.cmd_err(2, "login", json!({ "api_key": trader.key.as_str() }), 11);
}

/// A client that stops reading for a moment while a lot is published
/// fills the socket: the server's writes then go out in part and wait for
/// room (under the write timeout). When the client reads again it gets
/// whole frames (some data dropped, a gap, is allowed) and the connection
/// still answers commands.
#[test]
fn a_client_that_pauses_reading_gets_whole_frames_and_stays_connected() {
    let venue = Venue::start_with(fast_orders);
    let market = venue.open_market(SERIES_A);
    let trader = venue.trader("1000000");
    let mut c = connect(venue.addr());
    c.strict = false;
    // 19 subscriptions of one book and its ticker: each order placed at a
    // new best price is 38 data messages.
    for id in 1..=19 {
        c.subscribe(
            id,
            &["orderbook_delta", "ticker"],
            json!({ "market_tickers": [market] }),
        );
    }
    // Megabytes of data while the client does not read (far more than
    // the socket's buffers hold).
    for round in 0..20 {
        for p in 1..=30 {
            venue.place_ok(trader.key(), &buy(&market, "up", &format!("0.{p:02}"), "1"));
        }
        let resp = venue.delete("/portfolio/orders", trader.key());
        assert_eq!(resp.status, 200, "round {round}: {}", resp.text);
    }
    let mut messages = 0;
    while c
        .data_until(Instant::now() + Duration::from_millis(1_000))
        .is_some()
    {
        messages += 1;
    }
    assert!(messages > 1_000, "{messages} data messages");
    assert_eq!(c.cmd(100, "list_subscriptions", json!({}))["type"], "ok");
}

#[test]
fn any_origin_is_accepted_and_a_plain_get_is_refused() {
    let venue = Venue::start();
    let addr = venue.addr();
    let mut c = try_connect(addr, &[("Origin", "https://elsewhere.example")]).expect("any Origin");
    assert_eq!(c.cmd(1, "list_subscriptions", json!({}))["type"], "ok");
    let resp = venue.get("/ws", None);
    resp.err(400, "BAD_REQUEST");
    // RFC 6455 §4.4: a refused handshake names the version served.
    assert_eq!(resp.header("sec-websocket-version"), Some("13"));
}
