//! The publisher thread: a mirror of the public state built from the event
//! stream, the subscriptions of every connection with indexes by market,
//! series, symbol and account, and the fan-out of each event, serialized
//! once, to the connections' bounded queues.
//!
//! Everything here runs on one thread, so a subscription change sees the
//! mirror exactly as of the events already fanned out: a snapshot is always
//! followed by precisely the deltas after it, and its checksum equals the
//! checksum of the last delta before it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_channel::Receiver;

use crate::bell::{look, Doorbell};
use sequencer::event::{Phase, Top};
use sequencer::limits::CHECKSUM_LEVELS;
use sequencer::query::{BalanceView, PositionView};
use sequencer::state::{Order, Trade};
use sequencer::types::{flip, AccountId, MarketId, Outcome, PriceCents};
use sequencer::wire::{price, price_e8};
use sequencer::{Event, State};
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::protocol::{self, Action, Channel, Command, ErrorCode, Keyed, Keys, WsError};
use super::{Stats, SUBSCRIPTIONS_MAX};
use crate::api::json;

/// A connection's id, unique for the life of the server.
pub type ConnId = u64;
/// A subscription's id, unique on its connection, from 1.
pub type Sid = u32;
type SubKey = (ConnId, Sid);

/// Market and series tickers one subscription may hold (the venue's own
/// bound; the spec bounds each command at 100).
pub const SUB_TICKERS_MAX: usize = 1_000;
/// Symbols one subscription may hold.
pub const SUB_SYMBOLS_MAX: usize = 640;

const LEVELS: usize = sequencer::limits::PRICE_CENTS_MAX as usize + 1;
type Sides = [[u64; LEVELS]; 2];

/// One data message for one subscription: the envelope's parts, with the
/// `msg` bytes shared by every subscriber.
#[derive(Clone, Debug)]
pub struct Out {
    pub kind: &'static str,
    pub sid: Sid,
    pub seq: u64,
    pub msg: Bytes,
}

/// What the sequencer thread sends.
pub enum Input {
    /// The public state as it stands after a batch (the first time, and
    /// after a batch was lost).
    Picture(Box<Picture>),
    /// One committed batch's events, and the whole record of each order
    /// event's order as it stood then, in the same order (an order event
    /// carries only what changed).
    Events(Vec<Event>, Vec<Option<Order>>),
}

/// What connections send.
pub enum Control {
    Open {
        conn: ConnId,
        tx: mpsc::Sender<Out>,
        account: Option<AccountId>,
    },
    Authenticated {
        conn: ConnId,
        account: AccountId,
    },
    Close {
        conn: ConnId,
    },
    Command {
        conn: ConnId,
        id: Value,
        command: Command,
        reply: oneshot::Sender<CtlReply>,
    },
}

/// The answer to a command: the reply frames, and the sids it added and
/// removed (the connection writes only data of its live sids).
#[derive(Debug, Default)]
pub struct CtlReply {
    pub frames: Vec<String>,
    pub added: Vec<Sid>,
    pub removed: Vec<Sid>,
}

/// One unsettled market as the publisher knows it.
#[derive(Clone, Debug)]
pub struct MarketMirror {
    pub ticker: String,
    pub series: String,
    /// Contracts per price on each side (`Outcome::index`).
    pub book: Box<Sides>,
    pub top: Top,
}

/// The public state at one point: unsettled markets and last prices.
pub struct Picture {
    pub markets: Vec<(MarketId, MarketMirror)>,
    pub prices: Vec<(String, i64, u64)>,
}

impl Picture {
    /// Taken on the sequencer thread: O(unsettled markets x levels).
    pub fn of(state: &State) -> Box<Picture> {
        let markets = state
            .active_markets
            .iter()
            .filter_map(|&id| state.market(id))
            .map(|m| {
                let mut book = Box::new([[0u64; LEVELS]; 2]);
                for outcome in [Outcome::Up, Outcome::Down] {
                    for (p, total) in m.book.side(outcome).top(usize::MAX) {
                        book[outcome.index()][usize::from(p)] = total;
                    }
                }
                let mirror = MarketMirror {
                    ticker: m.ticker.clone(),
                    series: state.series_of(m).config.ticker.clone(),
                    book,
                    top: state.top(m.id),
                };
                (m.id, mirror)
            })
            .collect();
        let prices = state
            .prices
            .iter()
            .filter_map(|(symbol, p)| p.latest().map(|(t, v)| (symbol.clone(), v, t)))
            .collect();
        Box::new(Picture { markets, prices })
    }
}

/// The spec's checksum of a mirrored book (SPEC "Checksum").
pub fn checksum(book: &Sides) -> u32 {
    let mut text = String::with_capacity(256);
    for (i, side) in book.iter().enumerate() {
        text.push_str(if i == 0 { "up:" } else { "|down:" });
        for (n, (p, c)) in levels(side).take(CHECKSUM_LEVELS).enumerate() {
            if n > 0 {
                text.push(',');
            }
            let _ = write!(text, "{}:{c}", price(p));
        }
    }
    crc32fast::hash(text.as_bytes())
}

/// A side's levels, best (highest price) first.
fn levels(side: &[u64; LEVELS]) -> impl Iterator<Item = (u8, u64)> + '_ {
    (1..LEVELS)
        .rev()
        .filter(|&p| side[p] > 0)
        .map(|p| (p as u8, side[p]))
}

struct Sub {
    channel: Channel,
    market_tickers: BTreeSet<String>,
    series_tickers: BTreeSet<String>,
    symbols: BTreeSet<String>,
    /// Markets it receives now: its market tickers and the unsettled
    /// windows of its series.
    markets: BTreeSet<MarketId>,
    account: Option<AccountId>,
    /// Last seq handed out (or skipped).
    seq: u64,
}

struct Conn {
    tx: mpsc::Sender<Out>,
    account: Option<AccountId>,
    subs: BTreeMap<Sid, Sub>,
    next_sid: Sid,
}

/// Something to send a subscription once it exists.
enum Initial {
    Markets(Vec<MarketId>),
    Symbols(Vec<String>),
}

struct Publisher {
    markets: BTreeMap<MarketId, MarketMirror>,
    tickers: HashMap<String, MarketId>,
    prices: BTreeMap<String, (i64, u64)>,
    conns: HashMap<ConnId, Conn>,
    by_market: HashMap<(Channel, MarketId), BTreeSet<SubKey>>,
    by_series: HashMap<(Channel, String), BTreeSet<SubKey>>,
    by_symbol: HashMap<String, BTreeSet<SubKey>>,
    by_account: HashMap<(Channel, AccountId), BTreeSet<SubKey>>,
    stats: Arc<Stats>,
}

/// What the publisher waits for.
enum Next {
    Input(Input),
    Control(Control),
    /// The sequencer thread is gone.
    InputGone,
    /// No handler will send commands any more.
    ControlGone,
}

/// The publisher thread's loop; returns when the sequencer thread is gone.
/// It waits on its two queues with one doorbell (`crate::bell`: parked,
/// not spinning), looking at the control queue first every other time so
/// that neither queue starves the other.
pub fn run(bell: Doorbell, input: Receiver<Input>, control: Receiver<Control>, stats: Arc<Stats>) {
    let mut publisher = Publisher::new(stats);
    // The first input is the picture taken when the sequencer thread
    // started, before any connection can exist.
    match bell.wait(None, || look(&input)) {
        Some(Ok(first)) => publisher.input(first, false),
        _ => return,
    }
    let mut control_open = true;
    let mut control_first = false;
    loop {
        control_first = !control_first;
        let poll_control = |open: bool| -> Option<Next> {
            let found = open.then(|| look(&control)).flatten()?;
            Some(found.map_or(Next::ControlGone, Next::Control))
        };
        let next = bell.wait(None, || {
            if control_first {
                if let Some(next) = poll_control(control_open) {
                    return Some(next);
                }
            }
            match look(&input) {
                Some(found) => Some(found.map_or(Next::InputGone, Next::Input)),
                None => poll_control(control_open && !control_first),
            }
        });
        match next {
            Some(Next::Input(msg)) => publisher.input(msg, true),
            Some(Next::Control(msg)) => publisher.control(msg),
            Some(Next::ControlGone) => control_open = false,
            Some(Next::InputGone) | None => return,
        }
    }
}

fn bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("a JSON value serializes"))
}

/// Hands one message to one subscription: its seq advances whether or not
/// the connection's queue had room (a full queue is a gap the client sees).
fn deliver(
    conns: &mut HashMap<ConnId, Conn>,
    stats: &Stats,
    key: SubKey,
    kind: &'static str,
    msg: &Bytes,
) {
    let Some(conn) = conns.get_mut(&key.0) else {
        return;
    };
    let Some(sub) = conn.subs.get_mut(&key.1) else {
        return;
    };
    sub.seq += 1;
    let out = Out {
        kind,
        sid: key.1,
        seq: sub.seq,
        msg: msg.clone(),
    };
    match conn.tx.try_send(out) {
        Ok(()) => stats.sent.fetch_add(1, Ordering::Relaxed),
        Err(_) => stats.dropped.fetch_add(1, Ordering::Relaxed),
    };
}

fn remove_key<K: std::hash::Hash + Eq>(map: &mut HashMap<K, BTreeSet<SubKey>>, k: K, key: SubKey) {
    if let Some(set) = map.get_mut(&k) {
        set.remove(&key);
        if set.is_empty() {
            map.remove(&k);
        }
    }
}

// ----- messages ---------------------------------------------------------------------

/// A JSON object written straight into its bytes, for the messages sent on
/// every book change: no `Value` map, no `String` per field. Keys must be
/// given in sorted order: the bytes are then those `serde_json` writes for
/// the `json!` map of the same fields (its map is a `BTreeMap`), which the
/// tests below check message by message.
struct Obj {
    out: Vec<u8>,
    digits: itoa::Buffer,
}

impl Obj {
    fn new(capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        out.push(b'{');
        Self {
            out,
            digits: itoa::Buffer::new(),
        }
    }

    fn key(&mut self, key: &str) {
        if self.out.len() > 1 {
            self.out.push(b',');
        }
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A string, escaped as `serde_json` escapes it.
    fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        serde_json::to_writer(&mut self.out, value).expect("a string serializes into a Vec");
    }

    fn int<I: itoa::Integer>(&mut self, key: &str, value: I) {
        self.key(key);
        self.out
            .extend_from_slice(self.digits.format(value).as_bytes());
    }

    /// An integer as a decimal string (counts, deltas, ids).
    fn int_str<I: itoa::Integer>(&mut self, key: &str, value: I) {
        self.key(key);
        self.out.push(b'"');
        self.out
            .extend_from_slice(self.digits.format(value).as_bytes());
        self.out.push(b'"');
    }

    /// A price in dollars, as [`price`] writes it (`0.{cents:02}`).
    fn price(&mut self, key: &str, cents: PriceCents) {
        self.key(key);
        self.out.extend_from_slice(b"\"0.");
        if cents < 10 {
            self.out.push(b'0');
        }
        self.out
            .extend_from_slice(self.digits.format(cents).as_bytes());
        self.out.push(b'"');
    }

    fn done(mut self) -> Bytes {
        self.out.push(b'}');
        Bytes::from(self.out)
    }
}

/// `orderbook_delta`: `{ checksum, delta, market_ticker, outcome, price }`.
fn delta_msg(ticker: &str, outcome: Outcome, p: PriceCents, delta: i64, checksum: u32) -> Bytes {
    let mut o = Obj::new(96 + ticker.len());
    o.int("checksum", checksum);
    o.int_str("delta", delta);
    o.str("market_ticker", ticker);
    o.str("outcome", outcome.as_str());
    o.price("price", p);
    o.done()
}

/// `ticker`: the market and its top, the fields of [`json::insert_top`].
fn ticker_msg(ticker: &str, top: &Top) -> Bytes {
    let mut o = Obj::new(160 + ticker.len());
    if let Some(last) = top.last_price {
        o.price("last_price", last);
    }
    o.str("market_ticker", ticker);
    if let Some(ask) = top.up_ask {
        o.price("up_ask", ask);
        o.int_str("up_ask_size", top.up_ask_size);
    }
    if let Some(bid) = top.up_bid {
        o.price("up_bid", bid);
        o.int_str("up_bid_size", top.up_bid_size);
    }
    o.done()
}

/// `trade`: the fields of [`json::trade_in`].
fn trade_msg(ticker: &str, t: &Trade) -> Bytes {
    let mut o = Obj::new(224 + ticker.len());
    o.int_str("count", t.count);
    o.price("down_price", flip(t.up_price));
    o.str("market_ticker", ticker);
    o.str("taker_action", t.taker_action.as_str());
    o.str("taker_outcome", t.taker_outcome.as_str());
    o.int_str("trade_id", t.trade_id);
    o.int("ts_ms", t.ts_ms);
    o.price("up_price", t.up_price);
    o.done()
}

/// `price`: `{ price, symbol, t_ms }`.
fn price_msg(symbol: &str, price_e8_value: i64, t_ms: u64) -> Bytes {
    let mut o = Obj::new(64 + symbol.len());
    o.str("price", &price_e8(price_e8_value));
    o.str("symbol", symbol);
    o.int("t_ms", t_ms);
    o.done()
}

fn snapshot_msg(m: &MarketMirror) -> Value {
    let side = |o: Outcome| json::levels(&levels(&m.book[o.index()]).collect::<Vec<_>>());
    json!({
        "market_ticker": m.ticker,
        "up": side(Outcome::Up),
        "down": side(Outcome::Down),
        "checksum": checksum(&m.book),
    })
}

fn lifecycle_msg(ticker: &str, phase: &Phase, ts_ms: u64) -> Value {
    let mut map = Map::new();
    map.insert("market_ticker".into(), ticker.into());
    match phase {
        Phase::Open { price_to_beat_e8 } => {
            map.insert("event".into(), "open".into());
            if let Some(p) = price_to_beat_e8 {
                map.insert("price_to_beat".into(), price_e8(*p).into());
            }
        }
        Phase::Closed => {
            map.insert("event".into(), "closed".into());
        }
        Phase::Settled {
            result,
            settlement_price_e8,
        } => {
            map.insert("event".into(), "settled".into());
            if let Some(r) = result {
                map.insert("result".into(), r.as_str().into());
            }
            if let Some(p) = settlement_price_e8 {
                map.insert("settlement_price".into(), price_e8(*p).into());
            }
        }
    }
    map.insert("ts_ms".into(), ts_ms.into());
    Value::Object(map)
}

/// A subscription as `list_subscriptions` and `update_subscription` show it.
fn describe(sid: Sid, sub: &Sub) -> Value {
    let mut map = Map::new();
    map.insert("sid".into(), sid.into());
    map.insert("channel".into(), sub.channel.as_str().into());
    match sub.channel.keyed() {
        Keyed::Markets => {
            map.insert("market_tickers".into(), json!(sub.market_tickers));
            map.insert("series_tickers".into(), json!(sub.series_tickers));
        }
        Keyed::Symbols => {
            map.insert("symbols".into(), json!(sub.symbols));
        }
        Keyed::Account => {}
    }
    Value::Object(map)
}

impl Publisher {
    fn new(stats: Arc<Stats>) -> Self {
        Publisher {
            markets: BTreeMap::new(),
            tickers: HashMap::new(),
            prices: BTreeMap::new(),
            conns: HashMap::new(),
            by_market: HashMap::new(),
            by_series: HashMap::new(),
            by_symbol: HashMap::new(),
            by_account: HashMap::new(),
            stats,
        }
    }

    // ----- input from the sequencer ----------------------------------------------

    fn input(&mut self, input: Input, resync: bool) {
        match input {
            Input::Picture(picture) => self.picture(*picture, resync),
            Input::Events(events, orders) => {
                let mut orders = orders.iter();
                for event in &events {
                    let order = match event {
                        Event::Order(_) => orders.next().and_then(Option::as_ref),
                        _ => None,
                    };
                    self.event(event, order);
                }
            }
        }
        self.stats.batches_taken.fetch_add(1, Ordering::Relaxed);
    }

    fn picture(&mut self, picture: Picture, resync: bool) {
        self.markets = picture.markets.into_iter().collect();
        self.tickers = self
            .markets
            .iter()
            .map(|(&id, m)| (m.ticker.clone(), id))
            .collect();
        self.prices = picture
            .prices
            .into_iter()
            .map(|(s, p, t)| (s, (p, t)))
            .collect();
        if !resync {
            return;
        }
        // Events were lost: every subscription skips a seq so its client
        // sees the gap, then gets fresh snapshots of what it follows.
        tracing::warn!("websocket publisher fell behind; resynchronizing every subscription");
        self.by_market.clear();
        let mut initial = Vec::new();
        let keys: Vec<SubKey> = self
            .conns
            .iter()
            .flat_map(|(&c, conn)| conn.subs.keys().map(move |&s| (c, s)))
            .collect();
        for key in keys {
            let derived = {
                let sub = &self.conns[&key.0].subs[&key.1];
                self.derived(&sub.market_tickers, &sub.series_tickers)
            };
            let sub = self
                .conns
                .get_mut(&key.0)
                .and_then(|c| c.subs.get_mut(&key.1))
                .expect("listed");
            sub.seq += 1;
            sub.market_tickers
                .retain(|t| self.tickers.contains_key(t.as_str()));
            if sub.channel.keyed() == Keyed::Markets {
                for &m in &derived {
                    self.by_market
                        .entry((sub.channel, m))
                        .or_default()
                        .insert(key);
                }
                sub.markets = derived.clone();
                initial.push((key, Initial::Markets(derived.into_iter().collect())));
            } else if sub.channel == Channel::Prices {
                initial.push((key, Initial::Symbols(sub.symbols.iter().cloned().collect())));
            }
        }
        for (key, what) in initial {
            self.initial(key, what);
        }
    }

    /// The markets a subscription with these tickers follows now.
    fn derived(
        &self,
        market_tickers: &BTreeSet<String>,
        series_tickers: &BTreeSet<String>,
    ) -> BTreeSet<MarketId> {
        let mut out: BTreeSet<MarketId> = market_tickers
            .iter()
            .filter_map(|t| self.tickers.get(t.as_str()).copied())
            .collect();
        if !series_tickers.is_empty() {
            out.extend(
                self.markets
                    .iter()
                    .filter(|(_, m)| series_tickers.contains(&m.series))
                    .map(|(&id, _)| id),
            );
        }
        out
    }

    fn has_market_subs(&self, channel: Channel, market: MarketId) -> bool {
        self.by_market.contains_key(&(channel, market))
    }

    fn fan_market(&mut self, channel: Channel, market: MarketId, kind: &'static str, msg: Bytes) {
        if let Some(keys) = self.by_market.get(&(channel, market)) {
            for &key in keys {
                deliver(&mut self.conns, &self.stats, key, kind, &msg);
            }
        }
    }

    fn fan_account(
        &mut self,
        channel: Channel,
        account: AccountId,
        kind: &'static str,
        msg: impl FnOnce(&Self) -> Value,
    ) {
        if !self.by_account.contains_key(&(channel, account)) {
            return;
        }
        let msg = bytes(&msg(self));
        if let Some(keys) = self.by_account.get(&(channel, account)) {
            for &key in keys {
                deliver(&mut self.conns, &self.stats, key, kind, &msg);
            }
        }
    }

    fn ticker_of(&self, market: MarketId) -> &str {
        self.markets.get(&market).map_or("", |m| m.ticker.as_str())
    }

    fn event(&mut self, event: &Event, order: Option<&Order>) {
        match event {
            Event::BookDelta {
                market,
                outcome,
                price: p,
                delta,
                checksum: sum,
            } => {
                let Some(m) = self.markets.get_mut(market) else {
                    return;
                };
                let level = &mut m.book[outcome.index()][usize::from(*p)];
                *level = level.checked_add_signed(*delta).unwrap_or_else(|| {
                    tracing::error!(market, "a book delta took a mirrored level below zero");
                    0
                });
                debug_assert_eq!(checksum(&m.book), *sum, "mirror of {}", m.ticker);
                if !self
                    .by_market
                    .contains_key(&(Channel::OrderbookDelta, *market))
                {
                    return;
                }
                let msg = delta_msg(&m.ticker, *outcome, *p, *delta, *sum);
                self.fan_market(Channel::OrderbookDelta, *market, "orderbook_delta", msg);
            }
            Event::Ticker { market, top } => {
                let Some(m) = self.markets.get_mut(market) else {
                    return;
                };
                m.top = *top;
                if !self.by_market.contains_key(&(Channel::Ticker, *market)) {
                    return;
                }
                let msg = ticker_msg(&m.ticker, top);
                self.fan_market(Channel::Ticker, *market, "ticker", msg);
            }
            Event::Trade(t) => {
                if !self.has_market_subs(Channel::Trade, t.market) {
                    return;
                }
                let msg = trade_msg(self.ticker_of(t.market), t);
                self.fan_market(Channel::Trade, t.market, "trade", msg);
            }
            Event::MarketListed {
                market,
                ticker,
                series,
            } => self.listed(*market, ticker, series),
            Event::Lifecycle {
                market,
                phase,
                ts_ms,
            } => {
                if self.has_market_subs(Channel::WindowLifecycle, *market) {
                    let msg = bytes(&lifecycle_msg(self.ticker_of(*market), phase, *ts_ms));
                    self.fan_market(Channel::WindowLifecycle, *market, "window_lifecycle", msg);
                }
                if matches!(phase, Phase::Settled { .. }) {
                    self.settled(*market);
                }
            }
            Event::Price {
                symbol,
                price_e8: p,
                t_ms,
            } => {
                self.prices.insert(symbol.clone(), (*p, *t_ms));
                if let Some(keys) = self.by_symbol.get(symbol) {
                    let msg = price_msg(symbol, *p, *t_ms);
                    for &key in keys {
                        deliver(&mut self.conns, &self.stats, key, "price", &msg);
                    }
                }
            }
            Event::Order(_) => {
                if let Some(o) = order {
                    self.fan_account(Channel::UserOrders, o.account, "user_order", |p| {
                        json::order_in(p.ticker_of(o.market), o)
                    })
                }
            }
            Event::Fill(f) => self.fan_account(Channel::Fill, f.account, "fill", |p| {
                json::fill_in(p.ticker_of(f.market), f)
            }),
            Event::Position {
                account,
                market,
                outcome,
                count,
                cost,
            } => self.fan_account(Channel::MarketPositions, *account, "market_position", |p| {
                json::position(&PositionView {
                    market_ticker: p.ticker_of(*market).to_string(),
                    outcome: *outcome,
                    count: *count,
                    cost: *cost,
                })
            }),
            Event::Balance {
                account,
                cash,
                held,
            } => self.fan_account(Channel::Balance, *account, "balance", |_| {
                json::balance(&BalanceView {
                    cash: *cash,
                    held: *held,
                    buying_power: cash - held,
                })
            }),
            Event::Key(_) | Event::Account { .. } | Event::Trading { .. } | Event::Evicted(_) => {}
        }
    }

    /// A new window: series subscriptions start following it, with a
    /// snapshot (and a ticker) on the subscriptions that send them.
    fn listed(&mut self, market: MarketId, ticker: &str, series: &str) {
        self.markets.insert(
            market,
            MarketMirror {
                ticker: ticker.to_string(),
                series: series.to_string(),
                book: Box::new([[0; LEVELS]; 2]),
                top: Top::default(),
            },
        );
        self.tickers.insert(ticker.to_string(), market);
        for channel in Channel::MARKET {
            let keys: Vec<SubKey> = self
                .by_series
                .get(&(channel, series.to_string()))
                .map(|s| s.iter().copied().collect())
                .unwrap_or_default();
            for key in keys {
                if let Some(sub) = self
                    .conns
                    .get_mut(&key.0)
                    .and_then(|c| c.subs.get_mut(&key.1))
                {
                    if sub.markets.insert(market) {
                        self.by_market
                            .entry((channel, market))
                            .or_default()
                            .insert(key);
                        self.initial(key, Initial::Markets(vec![market]));
                    }
                }
            }
        }
    }

    /// A settled window leaves the mirror and every subscription.
    fn settled(&mut self, market: MarketId) {
        let Some(m) = self.markets.remove(&market) else {
            return;
        };
        self.tickers.remove(&m.ticker);
        for channel in Channel::MARKET {
            let Some(keys) = self.by_market.remove(&(channel, market)) else {
                continue;
            };
            for key in keys {
                if let Some(sub) = self
                    .conns
                    .get_mut(&key.0)
                    .and_then(|c| c.subs.get_mut(&key.1))
                {
                    sub.markets.remove(&market);
                    sub.market_tickers.remove(&m.ticker);
                }
            }
        }
    }

    /// What a subscription gets at once: snapshots, tickers, prices.
    fn initial(&mut self, key: SubKey, what: Initial) {
        let Some(channel) = self
            .conns
            .get(&key.0)
            .and_then(|c| c.subs.get(&key.1))
            .map(|s| s.channel)
        else {
            return;
        };
        match (channel, what) {
            (Channel::OrderbookDelta, Initial::Markets(markets)) => {
                for market in markets {
                    if let Some(m) = self.markets.get(&market) {
                        let msg = bytes(&snapshot_msg(m));
                        deliver(
                            &mut self.conns,
                            &self.stats,
                            key,
                            "orderbook_snapshot",
                            &msg,
                        );
                    }
                }
            }
            (Channel::Ticker, Initial::Markets(markets)) => {
                for market in markets {
                    if let Some(m) = self.markets.get(&market) {
                        let msg = ticker_msg(&m.ticker, &m.top);
                        deliver(&mut self.conns, &self.stats, key, "ticker", &msg);
                    }
                }
            }
            (Channel::Prices, Initial::Symbols(symbols)) => {
                for symbol in symbols {
                    if let Some(&(p, t)) = self.prices.get(&symbol) {
                        let msg = price_msg(&symbol, p, t);
                        deliver(&mut self.conns, &self.stats, key, "price", &msg);
                    }
                }
            }
            _ => {}
        }
    }

    // ----- input from connections ---------------------------------------------------

    fn control(&mut self, control: Control) {
        match control {
            Control::Open { conn, tx, account } => {
                self.conns.insert(
                    conn,
                    Conn {
                        tx,
                        account,
                        subs: BTreeMap::new(),
                        next_sid: 1,
                    },
                );
            }
            Control::Authenticated { conn, account } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.account = Some(account);
                }
            }
            Control::Close { conn } => {
                if let Some(c) = self.conns.remove(&conn) {
                    for (sid, sub) in &c.subs {
                        self.unindex((conn, *sid), sub);
                    }
                }
            }
            Control::Command {
                conn,
                id,
                command,
                reply,
            } => {
                // The connection answered "unavailable" and stopped waiting
                // (`COMMAND_TIMEOUT`): a refused command changes nothing.
                if reply.is_closed() {
                    return;
                }
                let mut initial = Vec::new();
                let answer = match self.command(conn, &id, command, &mut initial) {
                    Ok(answer) => answer,
                    Err(e) => CtlReply {
                        frames: vec![protocol::error(&id, &e)],
                        ..CtlReply::default()
                    },
                };
                let added = answer.added.clone();
                // The reply leaves first, so `subscribed` precedes the data.
                if reply.send(answer).is_err() {
                    // It gave up while the command ran: the subscriptions it
                    // was never told of would only hold places of its 100.
                    self.drop_subscriptions(conn, &added);
                }
                // The initial pictures of what it now follows (none for a
                // subscription just dropped): markets an update added to a
                // kept subscription get their snapshot even when the reply
                // found nobody waiting, so that their deltas never come
                // without one (a retried add finds them already added).
                for (key, what) in initial {
                    self.initial(key, what);
                }
            }
        }
    }

    fn command(
        &mut self,
        conn: ConnId,
        id: &Value,
        command: Command,
        initial: &mut Vec<(SubKey, Initial)>,
    ) -> Result<CtlReply, WsError> {
        if !self.conns.contains_key(&conn) {
            return Ok(CtlReply::default());
        }
        match command {
            Command::Subscribe { channels, keys } => {
                self.subscribe(conn, id, channels, keys, initial)
            }
            Command::Unsubscribe { sids } => self.unsubscribe(conn, id, &sids),
            Command::Update { sid, action, keys } => {
                self.update(conn, id, sid, action, keys, initial)
            }
            Command::List => {
                let c = &self.conns[&conn];
                let subs: Vec<Value> = c.subs.iter().map(|(&sid, s)| describe(sid, s)).collect();
                Ok(CtlReply {
                    frames: vec![protocol::reply(id, "ok", json!({ "subscriptions": subs }))],
                    ..CtlReply::default()
                })
            }
            // Logins are the connection's business; never sent here.
            Command::Login { .. } => Ok(CtlReply::default()),
        }
    }

    fn market_ids(&self, tickers: &BTreeSet<String>) -> Result<Vec<MarketId>, WsError> {
        tickers
            .iter()
            .map(|t| {
                self.tickers.get(t.as_str()).copied().ok_or_else(|| {
                    WsError::new(
                        ErrorCode::UnknownTicker,
                        format!("Market {t} is not on the order book (unknown or settled)."),
                    )
                })
            })
            .collect()
    }

    fn subscribe(
        &mut self,
        conn: ConnId,
        id: &Value,
        channels: Vec<Channel>,
        keys: Keys,
        initial: &mut Vec<(SubKey, Initial)>,
    ) -> Result<CtlReply, WsError> {
        let account = self.conns[&conn].account;
        if channels.iter().any(|c| c.is_private()) && account.is_none() {
            return Err(auth_required());
        }
        if self.conns[&conn].subs.len() + channels.len() > SUBSCRIPTIONS_MAX {
            return Err(WsError::new(
                ErrorCode::TooManySubscriptions,
                format!("At most {SUBSCRIPTIONS_MAX} subscriptions per connection."),
            ));
        }
        if channels.iter().any(|c| c.keyed() == Keyed::Markets) {
            self.market_ids(&keys.market_tickers)?;
        }
        let mut reply = CtlReply::default();
        for channel in channels {
            let c = self.conns.get_mut(&conn).expect("checked");
            let sid = c.next_sid;
            c.next_sid += 1;
            let mut sub = Sub {
                channel,
                market_tickers: BTreeSet::new(),
                series_tickers: BTreeSet::new(),
                symbols: BTreeSet::new(),
                markets: BTreeSet::new(),
                account: None,
                seq: 0,
            };
            match channel.keyed() {
                Keyed::Markets => {
                    sub.market_tickers = keys.market_tickers.clone();
                    sub.series_tickers = keys.series_tickers.clone();
                    sub.markets = self.derived(&sub.market_tickers, &sub.series_tickers);
                    initial.push((
                        (conn, sid),
                        Initial::Markets(sub.markets.iter().copied().collect()),
                    ));
                }
                Keyed::Symbols => {
                    sub.symbols = keys.symbols.clone();
                    initial.push((
                        (conn, sid),
                        Initial::Symbols(sub.symbols.iter().cloned().collect()),
                    ));
                }
                Keyed::Account => sub.account = account,
            }
            self.index((conn, sid), &sub);
            self.conns
                .get_mut(&conn)
                .expect("checked")
                .subs
                .insert(sid, sub);
            reply.frames.push(protocol::reply(
                id,
                "subscribed",
                json!({ "channel": channel.as_str(), "sid": sid }),
            ));
            reply.added.push(sid);
        }
        Ok(reply)
    }

    /// Removes subscriptions of a connection, without a reply.
    fn drop_subscriptions(&mut self, conn: ConnId, sids: &[Sid]) {
        for &sid in sids {
            self.remove_subscription(conn, sid);
        }
    }

    /// Takes one subscription off its connection and out of the indexes.
    fn remove_subscription(&mut self, conn: ConnId, sid: Sid) -> Option<Sub> {
        let sub = self.conns.get_mut(&conn)?.subs.remove(&sid)?;
        self.unindex((conn, sid), &sub);
        Some(sub)
    }

    fn unsubscribe(&mut self, conn: ConnId, id: &Value, sids: &[Sid]) -> Result<CtlReply, WsError> {
        let c = &self.conns[&conn];
        if let Some(sid) = sids.iter().find(|s| !c.subs.contains_key(s)) {
            return Err(unknown_sid(*sid));
        }
        let mut reply = CtlReply::default();
        for &sid in sids {
            let sub = self.remove_subscription(conn, sid).expect("checked");
            reply.frames.push(protocol::reply(
                id,
                "unsubscribed",
                json!({ "channel": sub.channel.as_str(), "sid": sid }),
            ));
            reply.removed.push(sid);
        }
        Ok(reply)
    }

    fn update(
        &mut self,
        conn: ConnId,
        id: &Value,
        sid: Sid,
        action: Action,
        keys: Keys,
        initial: &mut Vec<(SubKey, Initial)>,
    ) -> Result<CtlReply, WsError> {
        let key = (conn, sid);
        let channel = self.conns[&conn]
            .subs
            .get(&sid)
            .map(|s| s.channel)
            .ok_or_else(|| unknown_sid(sid))?;
        match (action, channel.keyed()) {
            (Action::GetSnapshot, _) => {
                let sub = &self.conns[&conn].subs[&sid];
                let what = match channel.keyed() {
                    Keyed::Markets => {
                        let named = self.derived(&keys.market_tickers, &keys.series_tickers);
                        let everything =
                            keys.market_tickers.is_empty() && keys.series_tickers.is_empty();
                        Initial::Markets(
                            sub.markets
                                .iter()
                                .copied()
                                .filter(|m| everything || named.contains(m))
                                .collect(),
                        )
                    }
                    Keyed::Symbols => Initial::Symbols(
                        sub.symbols
                            .iter()
                            .filter(|s| keys.symbols.is_empty() || keys.symbols.contains(*s))
                            .cloned()
                            .collect(),
                    ),
                    Keyed::Account => Initial::Markets(Vec::new()),
                };
                initial.push((key, what));
            }
            (_, Keyed::Account) => {
                return Err(WsError::new(
                    ErrorCode::BadParams,
                    "Private channels are not keyed by markets or symbols.",
                ))
            }
            (Action::AddMarkets | Action::DeleteMarkets, Keyed::Markets) => {
                if keys.market_tickers.is_empty() && keys.series_tickers.is_empty() {
                    return Err(WsError::new(
                        ErrorCode::BadParams,
                        "This action needs market_tickers and/or series_tickers.",
                    ));
                }
                let add = action == Action::AddMarkets;
                if add {
                    self.market_ids(&keys.market_tickers)?;
                }
                let sub = &self.conns[&conn].subs[&sid];
                let mut market_tickers = sub.market_tickers.clone();
                let mut series_tickers = sub.series_tickers.clone();
                if add {
                    market_tickers.extend(keys.market_tickers);
                    series_tickers.extend(keys.series_tickers);
                    if market_tickers.len() + series_tickers.len() > SUB_TICKERS_MAX {
                        return Err(WsError::new(
                            ErrorCode::TooManyTickers,
                            format!("At most {SUB_TICKERS_MAX} tickers per subscription."),
                        ));
                    }
                } else {
                    market_tickers.retain(|t| !keys.market_tickers.contains(t));
                    series_tickers.retain(|t| !keys.series_tickers.contains(t));
                }
                let derived = self.derived(&market_tickers, &series_tickers);
                self.unindex(key, &self.conns[&conn].subs[&sid].clone_keys());
                let sub = self
                    .conns
                    .get_mut(&conn)
                    .and_then(|c| c.subs.get_mut(&sid))
                    .expect("checked");
                let new: Vec<MarketId> = derived.difference(&sub.markets).copied().collect();
                sub.market_tickers = market_tickers;
                sub.series_tickers = series_tickers;
                sub.markets = derived;
                let snapshot = sub.clone_keys();
                self.index(key, &snapshot);
                initial.push((key, Initial::Markets(new)));
            }
            (Action::AddMarkets | Action::DeleteMarkets, Keyed::Symbols) => {
                if keys.symbols.is_empty() {
                    return Err(WsError::new(
                        ErrorCode::BadParams,
                        "This action needs symbols.",
                    ));
                }
                let sub = &self.conns[&conn].subs[&sid];
                let mut symbols = sub.symbols.clone();
                if action == Action::AddMarkets {
                    symbols.extend(keys.symbols);
                    if symbols.len() > SUB_SYMBOLS_MAX {
                        return Err(WsError::new(
                            ErrorCode::TooManyTickers,
                            format!("At most {SUB_SYMBOLS_MAX} symbols per subscription."),
                        ));
                    }
                } else {
                    symbols.retain(|s| !keys.symbols.contains(s));
                }
                self.unindex(key, &self.conns[&conn].subs[&sid].clone_keys());
                let sub = self
                    .conns
                    .get_mut(&conn)
                    .and_then(|c| c.subs.get_mut(&sid))
                    .expect("checked");
                let new: Vec<String> = symbols.difference(&sub.symbols).cloned().collect();
                sub.symbols = symbols;
                let snapshot = sub.clone_keys();
                self.index(key, &snapshot);
                initial.push((key, Initial::Symbols(new)));
            }
        }
        let sub = &self.conns[&conn].subs[&sid];
        Ok(CtlReply {
            frames: vec![protocol::reply(id, "ok", describe(sid, sub))],
            ..CtlReply::default()
        })
    }

    fn index(&mut self, key: SubKey, sub: &Sub) {
        let channel = sub.channel;
        match channel.keyed() {
            Keyed::Markets => {
                for &m in &sub.markets {
                    self.by_market.entry((channel, m)).or_default().insert(key);
                }
                for s in &sub.series_tickers {
                    self.by_series
                        .entry((channel, s.clone()))
                        .or_default()
                        .insert(key);
                }
            }
            Keyed::Symbols => {
                for s in &sub.symbols {
                    self.by_symbol.entry(s.clone()).or_default().insert(key);
                }
            }
            Keyed::Account => {
                if let Some(account) = sub.account {
                    self.by_account
                        .entry((channel, account))
                        .or_default()
                        .insert(key);
                }
            }
        }
    }

    fn unindex(&mut self, key: SubKey, sub: &Sub) {
        let channel = sub.channel;
        for &m in &sub.markets {
            remove_key(&mut self.by_market, (channel, m), key);
        }
        for s in &sub.series_tickers {
            remove_key(&mut self.by_series, (channel, s.clone()), key);
        }
        for s in &sub.symbols {
            remove_key(&mut self.by_symbol, s.clone(), key);
        }
        if let Some(account) = sub.account {
            remove_key(&mut self.by_account, (channel, account), key);
        }
    }
}

impl Sub {
    /// A copy of what the indexes hold of it.
    fn clone_keys(&self) -> Sub {
        Sub {
            channel: self.channel,
            market_tickers: BTreeSet::new(),
            series_tickers: self.series_tickers.clone(),
            symbols: self.symbols.clone(),
            markets: self.markets.clone(),
            account: self.account,
            seq: self.seq,
        }
    }
}

fn auth_required() -> WsError {
    WsError::new(
        ErrorCode::AuthRequired,
        "Private channels need an authenticated connection: send the key as \
         Authorization: Bearer tk_... on the upgrade request, or a login command first.",
    )
}

fn unknown_sid(sid: Sid) -> WsError {
    WsError::new(
        ErrorCode::UnknownSid,
        format!("No subscription {sid} on this connection."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sequencer::types::Action as Side;

    fn value(bytes: &Bytes) -> String {
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    /// Tickers as the venue makes them, and strings `serde_json` escapes.
    const TICKERS: [&str; 4] = [
        "btc-1m-261121-2100-2101",
        "",
        "q\"uote\\back\nslash\u{1}",
        "unicodé-€",
    ];

    /// A command the connection stopped waiting for (it answered
    /// "unavailable" at `COMMAND_TIMEOUT`) changes nothing.
    #[test]
    fn a_command_nobody_waits_for_changes_nothing() {
        let mut publisher = Publisher::new(Arc::default());
        let (tx, _out) = mpsc::channel(16);
        publisher.control(Control::Open {
            conn: 1,
            tx,
            account: None,
        });
        let subscribe = || {
            let text = r#"{"id":7,"cmd":"subscribe","params":{"channels":["prices"],"symbols":["X:BTCUSD"]}}"#;
            let (id, command) = protocol::parse(text);
            let (reply, rx) = oneshot::channel();
            let control = Control::Command {
                conn: 1,
                id,
                command: command.unwrap(),
                reply,
            };
            (control, rx)
        };
        let (control, rx) = subscribe();
        drop(rx);
        publisher.control(control);
        assert!(publisher.conns[&1].subs.is_empty());
        assert!(publisher.by_symbol.values().all(BTreeSet::is_empty));

        let (control, mut rx) = subscribe();
        publisher.control(control);
        let answer = rx.try_recv().unwrap();
        assert_eq!(answer.added.len(), 1);
        assert_eq!(publisher.conns[&1].subs.len(), 1);
        assert!(publisher.by_symbol.values().any(|subs| !subs.is_empty()));
        // What the publisher does when that reply finds nobody waiting:
        // the subscription goes, from the connection and the index.
        publisher.drop_subscriptions(1, &answer.added);
        assert!(publisher.conns[&1].subs.is_empty());
        assert!(publisher.by_symbol.values().all(BTreeSet::is_empty));
        assert!(
            answer.frames[0].contains("subscribed"),
            "{:?}",
            answer.frames
        );
    }

    /// When the publisher lost a batch, every subscription skips a seq, so
    /// that its client sees the gap (SPEC: "A jump in seq means messages
    /// were missed"), then gets a fresh picture of what it follows.
    #[test]
    fn a_lost_batch_shows_as_a_gap_in_every_subscriptions_seq() {
        let mut publisher = Publisher::new(Arc::default());
        let picture = || Picture {
            markets: Vec::new(),
            prices: vec![("X:BTCUSD".to_string(), 97_000_00000000, 1_000)],
        };
        publisher.input(Input::Picture(Box::new(picture())), false);
        let (tx, mut out) = mpsc::channel(16);
        publisher.control(Control::Open {
            conn: 1,
            tx,
            account: None,
        });
        let text =
            r#"{"id":7,"cmd":"subscribe","params":{"channels":["prices"],"symbols":["X:BTCUSD"]}}"#;
        let (id, command) = protocol::parse(text);
        let (reply, mut rx) = oneshot::channel();
        publisher.control(Control::Command {
            conn: 1,
            id,
            command: command.unwrap(),
            reply,
        });
        let sid = rx.try_recv().unwrap().added[0];
        let mut seqs = Vec::new();
        while let Ok(o) = out.try_recv() {
            assert_eq!((o.sid, o.kind), (sid, "price"));
            seqs.push(o.seq);
        }
        assert_eq!(seqs, [1], "the current price at once");
        publisher.input(Input::Picture(Box::new(picture())), true);
        let o = out.try_recv().expect("the price again after the resync");
        assert_eq!((o.sid, o.kind, o.seq), (sid, "price", 3), "seq 2 skipped");
    }

    /// The direct writers write the bytes of the `json!` maps they replaced.
    #[test]
    fn hot_messages_are_byte_identical_to_their_json_maps() {
        for ticker in TICKERS {
            for outcome in [Outcome::Up, Outcome::Down] {
                for p in [1u8, 9, 10, 55, 99] {
                    for delta in [i64::MIN, -1_000_000, -1, 0, 1, 42, i64::MAX] {
                        for sum in [0u32, 7, u32::MAX] {
                            let old = json!({
                                "market_ticker": ticker,
                                "outcome": outcome.as_str(),
                                "price": price(p),
                                "delta": delta.to_string(),
                                "checksum": sum,
                            });
                            assert_eq!(
                                value(&delta_msg(ticker, outcome, p, delta, sum)),
                                serde_json::to_string(&old).unwrap()
                            );
                        }
                    }
                }
            }
            let sides = [None, Some(1u8), Some(9), Some(50), Some(99)];
            for (i, up_bid) in sides.into_iter().enumerate() {
                for up_ask in sides {
                    let top = Top {
                        up_bid,
                        up_bid_size: [0, 1, 12_345, u64::MAX][i % 4],
                        up_ask,
                        up_ask_size: [u64::MAX, 3, 0, 77][i % 4],
                        last_price: sides[(i + 2) % sides.len()],
                    };
                    let mut map = Map::new();
                    map.insert("market_ticker".into(), ticker.into());
                    json::insert_top(&mut map, &top);
                    assert_eq!(
                        value(&ticker_msg(ticker, &top)),
                        serde_json::to_string(&Value::Object(map)).unwrap()
                    );
                }
            }
            for (n, up_price) in [1u8, 5, 50, 99].into_iter().enumerate() {
                let t = Trade {
                    trade_id: [1, 99, 1 << 40, u64::MAX][n],
                    market: 3,
                    up_price,
                    count: [1, 10, 1_000_000, u32::MAX][n],
                    taker_outcome: [Outcome::Up, Outcome::Down][n % 2],
                    taker_action: [Side::Buy, Side::Sell][n / 2],
                    ts_ms: [0, 1_763_769_600_000, 5, u64::MAX][n],
                };
                assert_eq!(
                    value(&trade_msg(ticker, &t)),
                    json::trade_in(ticker, &t).to_string()
                );
            }
            for (p, t) in [
                (0i64, 0u64),
                (-1, 1),
                (6_512_345_678_901, 1_763_769_600_000),
                (i64::MAX, u64::MAX),
                (i64::MIN, 3),
            ] {
                let old = json!({ "symbol": ticker, "price": price_e8(p), "t_ms": t });
                assert_eq!(
                    value(&price_msg(ticker, p, t)),
                    serde_json::to_string(&old).unwrap()
                );
            }
        }
    }

    #[test]
    fn the_mirror_checksum_is_the_spec_one() {
        let mut book = Box::new([[0u64; LEVELS]; 2]);
        assert_eq!(checksum(&book), crc32fast::hash(b"up:|down:"));
        book[0][55] = 12;
        book[0][54] = 5;
        assert_eq!(checksum(&book), crc32fast::hash(b"up:0.55:12,0.54:5|down:"));
        for p in 1..=20 {
            book[1][p] = p as u64;
        }
        let down: Vec<String> = (11..=20).rev().map(|p| format!("0.{p:02}:{p}")).collect();
        let text = format!("up:0.55:12,0.54:5|down:{}", down.join(","));
        assert_eq!(checksum(&book), crc32fast::hash(text.as_bytes()));
    }

    // ----- one connection, driven as its tasks drive it ------------------------------

    /// A publisher with connection 1 open, and the queue it writes to.
    struct Harness {
        publisher: Publisher,
        out: mpsc::Receiver<Out>,
        id: u64,
        /// Last seq seen per sid.
        seqs: BTreeMap<Sid, u64>,
    }

    impl Harness {
        fn new(prices: &[(&str, i64, u64)]) -> Self {
            let mut publisher = Publisher::new(Arc::default());
            let picture = Picture {
                markets: Vec::new(),
                prices: prices
                    .iter()
                    .map(|&(s, p, t)| (s.to_string(), p, t))
                    .collect(),
            };
            publisher.input(Input::Picture(Box::new(picture)), false);
            let (tx, out) = mpsc::channel(4096);
            publisher.control(Control::Open {
                conn: 1,
                tx,
                account: None,
            });
            Harness {
                publisher,
                out,
                id: 0,
                seqs: BTreeMap::new(),
            }
        }

        fn events(&mut self, events: Vec<Event>) {
            self.publisher
                .input(Input::Events(events, Vec::new()), true);
        }

        /// A new window `market` of `series`, as the sequencer lists it.
        fn list(&mut self, market: MarketId, ticker: &str, series: &str) {
            self.events(vec![Event::MarketListed {
                market,
                ticker: ticker.to_string(),
                series: series.to_string(),
            }]);
        }

        fn print(&mut self, symbol: &str, price_e8: i64, t_ms: u64) {
            self.events(vec![Event::Price {
                symbol: symbol.to_string(),
                price_e8,
                t_ms,
            }]);
        }

        /// Sends one command as connection 1; its reply frames, parsed.
        fn cmd(&mut self, cmd: &str, params: Value) -> Vec<Value> {
            self.id += 1;
            let text = json!({ "id": self.id, "cmd": cmd, "params": params }).to_string();
            let (id, command) = protocol::parse(&text);
            let (reply, mut rx) = oneshot::channel();
            self.publisher.control(Control::Command {
                conn: 1,
                id,
                command: command.expect("a well-formed command"),
                reply,
            });
            let answer = rx.try_recv().expect("answered at once");
            answer
                .frames
                .iter()
                .map(|f| serde_json::from_str(f).expect("JSON"))
                .collect()
        }

        /// The one reply of a command that is taken or refused whole.
        #[track_caller]
        fn cmd1(&mut self, cmd: &str, params: Value) -> Value {
            let mut frames = self.cmd(cmd, params);
            assert_eq!(frames.len(), 1, "{frames:?}");
            frames.remove(0)
        }

        #[track_caller]
        fn subscribe(&mut self, channel: &str, mut params: Value) -> Sid {
            params["channels"] = json!([channel]);
            let reply = self.cmd1("subscribe", params);
            assert_eq!(reply["type"], "subscribed", "{reply}");
            Sid::try_from(reply["msg"]["sid"].as_u64().expect("sid")).expect("a sid")
        }

        /// `update_subscription` of `sid`; its one reply.
        #[track_caller]
        fn update(&mut self, sid: Sid, action: &str, mut keys: Value) -> Value {
            keys["sid"] = json!(sid);
            keys["action"] = json!(action);
            self.cmd1("update_subscription", keys)
        }

        /// What the connection was handed since last asked: (sid, type, msg),
        /// with every subscription's seq checked to be contiguous.
        fn data(&mut self) -> Vec<(Sid, &'static str, Value)> {
            let mut seen = Vec::new();
            while let Ok(o) = self.out.try_recv() {
                let last = self.seqs.insert(o.sid, o.seq).unwrap_or(0);
                assert_eq!(o.seq, last + 1, "seq of sid {} jumped", o.sid);
                seen.push((o.sid, o.kind, serde_json::from_slice(&o.msg).expect("JSON")));
            }
            seen
        }

        /// The field `name` of each message handed over since last asked.
        fn data_field(&mut self, name: &str) -> Vec<Value> {
            self.data().into_iter().map(|d| d.2[name].clone()).collect()
        }
    }

    const SYMBOL_A: &str = "X:BTCUSD";
    const SYMBOL_B: &str = "X:ETHUSD";

    fn error_code(reply: &Value) -> u64 {
        assert_eq!(reply["type"], "error", "{reply}");
        reply["msg"]["code"].as_u64().expect("code")
    }

    /// add_markets and delete_markets on a prices subscription: an added
    /// symbol's current price at once, then its prints; a deleted one's
    /// prints no more; the reply and the list show the symbols it holds.
    #[test]
    fn a_prices_subscription_adds_and_deletes_symbols() {
        let mut h = Harness::new(&[(SYMBOL_A, 100_00000000, 1), (SYMBOL_B, 5_00000000, 2)]);
        let sid = h.subscribe("prices", json!({ "symbols": [SYMBOL_A] }));
        let first = h.data();
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(first[0].2["symbol"], SYMBOL_A);

        let reply = h.update(sid, "add_markets", json!({ "symbols": [SYMBOL_B] }));
        assert_eq!(reply["type"], "ok", "{reply}");
        assert_eq!(reply["msg"]["symbols"], json!([SYMBOL_A, SYMBOL_B]));
        assert_eq!(
            h.data(),
            [(
                sid,
                "price",
                json!({ "symbol": SYMBOL_B, "price": "5.00", "t_ms": 2 })
            )],
            "the added symbol's price at once, and only that"
        );
        h.print(SYMBOL_B, 6_00000000, 3);
        assert_eq!(h.data().len(), 1);

        let reply = h.update(sid, "delete_markets", json!({ "symbols": [SYMBOL_A] }));
        assert_eq!(reply["msg"]["symbols"], json!([SYMBOL_B]), "{reply}");
        assert!(h.data().is_empty(), "a delete sends nothing");
        h.print(SYMBOL_A, 101_00000000, 4);
        assert!(h.data().is_empty(), "a print of a deleted symbol was sent");
        h.print(SYMBOL_B, 7_00000000, 5);
        let kept = h.data();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].2["symbol"], SYMBOL_B);
        let list = h.cmd1("list_subscriptions", json!({}));
        assert_eq!(
            list["msg"]["subscriptions"],
            json!([{ "sid": sid, "channel": "prices", "symbols": [SYMBOL_B] }])
        );
    }

    /// get_snapshot on a prices subscription: the named symbols' prices
    /// only, or every symbol's when none is named.
    #[test]
    fn get_snapshot_on_prices_sends_the_named_symbols_or_all() {
        let mut h = Harness::new(&[(SYMBOL_A, 100_00000000, 1), (SYMBOL_B, 5_00000000, 2)]);
        let sid = h.subscribe("prices", json!({ "symbols": [SYMBOL_A, SYMBOL_B] }));
        assert_eq!(h.data().len(), 2);
        let reply = h.update(sid, "get_snapshot", json!({ "symbols": [SYMBOL_B] }));
        assert_eq!(reply["type"], "ok", "{reply}");
        let named = h.data_field("symbol");
        assert_eq!(named, [json!(SYMBOL_B)]);
        h.update(sid, "get_snapshot", json!({}));
        let all = h.data_field("symbol");
        assert_eq!(all, [json!(SYMBOL_A), json!(SYMBOL_B)]);
    }

    /// A subscription holds at most SUB_TICKERS_MAX tickers and
    /// SUB_SYMBOLS_MAX symbols, reached a command at a time: the last that
    /// fits is taken, one more is refused with 5 and changes nothing.
    #[test]
    fn a_subscription_holds_up_to_its_bounds_of_tickers_and_symbols() {
        let mut h = Harness::new(&[]);
        let bounds = [
            ("trade", "series_tickers", "s", SUB_TICKERS_MAX, 100),
            ("prices", "symbols", "S", SUB_SYMBOLS_MAX, 64),
        ];
        for (index, (channel, key, prefix, max, chunk)) in bounds.into_iter().enumerate() {
            let names = |from: usize, n: usize| -> Vec<String> {
                (from..from + n).map(|i| format!("{prefix}{i}")).collect()
            };
            let sid = h.subscribe(channel, json!({ key: names(0, chunk) }));
            for from in (chunk..max).step_by(chunk) {
                let reply = h.update(sid, "add_markets", json!({ key: names(from, chunk) }));
                assert_eq!(reply["type"], "ok", "{reply}");
            }
            let reply = h.update(sid, "add_markets", json!({ key: names(max, 1) }));
            assert_eq!(error_code(&reply), 5, "{reply}");
            let list = h.cmd1("list_subscriptions", json!({}));
            let held = &list["msg"]["subscriptions"][index][key];
            assert_eq!(held.as_array().map(Vec::len), Some(max), "{channel}");
        }
    }

    /// delete_markets naming a series: that series' new windows are not
    /// taken up any more, the other series' still are.
    #[test]
    fn a_deleted_series_takes_up_no_new_window() {
        let mut h = Harness::new(&[]);
        let sid = h.subscribe("ticker", json!({ "series_tickers": ["s-a", "s-b"] }));
        let reply = h.update(sid, "delete_markets", json!({ "series_tickers": ["s-a"] }));
        assert_eq!(reply["msg"]["series_tickers"], json!(["s-b"]), "{reply}");
        h.list(1, "s-a-261124-0500-0501", "s-a");
        assert!(h.data().is_empty(), "a window of a deleted series");
        h.list(2, "s-b-261124-0500-0501", "s-b");
        assert_eq!(
            h.data(),
            [(
                sid,
                "ticker",
                json!({ "market_ticker": "s-b-261124-0500-0501" })
            )]
        );
    }

    /// window_lifecycle carries open (with the price to beat), closed and
    /// settled (with the result and settlement price) of its markets.
    #[test]
    fn window_lifecycle_carries_open_closed_and_settled() {
        let mut h = Harness::new(&[]);
        let ticker = "s-a-261124-0500-0501";
        h.list(1, ticker, "s-a");
        h.list(2, "s-a-261124-0501-0502", "s-a");
        let sid = h.subscribe("window_lifecycle", json!({ "market_tickers": [ticker] }));
        assert!(
            h.data().is_empty(),
            "window_lifecycle sends nothing at once"
        );
        let phases = [
            Phase::Open {
                price_to_beat_e8: Some(97_000_50000000),
            },
            Phase::Closed,
            Phase::Settled {
                result: Some(Outcome::Down),
                settlement_price_e8: Some(96_999_00000000),
            },
        ];
        for (market, phase) in [1, 2].into_iter().flat_map(|m| phases.map(|p| (m, p))) {
            h.events(vec![Event::Lifecycle {
                market,
                phase,
                ts_ms: 60_000 * u64::from(market),
            }]);
        }
        let seen = h.data();
        let msgs: Vec<&Value> = seen
            .iter()
            .map(|(s, kind, msg)| {
                assert_eq!((*s, *kind), (sid, "window_lifecycle"));
                msg
            })
            .collect();
        assert_eq!(
            msgs,
            [
                &json!({ "market_ticker": ticker, "event": "open", "price_to_beat": "97000.50", "ts_ms": 60_000 }),
                &json!({ "market_ticker": ticker, "event": "closed", "ts_ms": 60_000 }),
                &json!({ "market_ticker": ticker, "event": "settled", "result": "down", "settlement_price": "96999.00", "ts_ms": 60_000 }),
            ]
        );
    }

    /// A settled window leaves the subscriptions that named it: the list
    /// no longer shows it, get_snapshot sends nothing of it, and it cannot
    /// be subscribed to any more (7).
    #[test]
    fn a_settled_window_leaves_its_subscriptions() {
        let mut h = Harness::new(&[]);
        let (gone, kept) = ("s-a-261124-0500-0501", "s-a-261124-0501-0502");
        h.list(1, gone, "s-a");
        h.list(2, kept, "s-a");
        let sid = h.subscribe("orderbook_delta", json!({ "market_tickers": [gone, kept] }));
        assert_eq!(h.data().len(), 2, "a snapshot of each");
        h.events(vec![Event::Lifecycle {
            market: 1,
            phase: Phase::Settled {
                result: Some(Outcome::Up),
                settlement_price_e8: None,
            },
            ts_ms: 60_000,
        }]);
        let list = h.cmd1("list_subscriptions", json!({}));
        assert_eq!(
            list["msg"]["subscriptions"][0]["market_tickers"],
            json!([kept]),
            "{list}"
        );
        h.update(sid, "get_snapshot", json!({}));
        let again = h.data_field("market_ticker");
        assert_eq!(again, [json!(kept)]);
        let reply = h.cmd1(
            "subscribe",
            json!({ "channels": ["ticker"], "market_tickers": [gone] }),
        );
        assert_eq!(error_code(&reply), 7, "{reply}");
    }

    /// The top prices (0.98 and 0.99) are levels of the mirror like any
    /// other: their deltas go out and the snapshot shows them, best first.
    #[test]
    fn the_top_price_levels_are_mirrored() {
        let mut h = Harness::new(&[]);
        let ticker = "s-a-261124-0500-0501";
        h.list(1, ticker, "s-a");
        let sid = h.subscribe("orderbook_delta", json!({ "market_tickers": [ticker] }));
        h.data();
        // One side only: a Down bid beside an Up bid at 0.98 or more
        // would cross.
        let steps = [
            (Outcome::Up, 99, 5, "up:0.99:5|down:"),
            (Outcome::Up, 98, 3, "up:0.99:5,0.98:3|down:"),
            (Outcome::Up, 1, 2, "up:0.99:5,0.98:3,0.01:2|down:"),
        ];
        for (outcome, p, delta, text) in steps {
            h.events(vec![Event::BookDelta {
                market: 1,
                outcome,
                price: p,
                delta,
                checksum: crc32fast::hash(text.as_bytes()),
            }]);
        }
        let deltas = h.data_field("price");
        assert_eq!(deltas, [json!("0.99"), json!("0.98"), json!("0.01")]);
        h.update(sid, "get_snapshot", json!({}));
        let snapshot = h.data();
        assert_eq!(
            snapshot,
            [(
                sid,
                "orderbook_snapshot",
                json!({
                    "market_ticker": ticker,
                    "up": [["0.99", "5"], ["0.98", "3"], ["0.01", "2"]],
                    "down": [],
                    "checksum": crc32fast::hash(b"up:0.99:5,0.98:3,0.01:2|down:"),
                })
            )]
        );
    }
}
