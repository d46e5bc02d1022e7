//! The websocket protocol as data: channels, the client's commands and their
//! checks, the numbered errors, and the reply and data frames. Pure
//! functions only; no socket, no state.

use std::collections::BTreeSet;

use sequencer::limits::{WS_SYMBOLS_PER_COMMAND, WS_TICKERS_PER_COMMAND};
use sequencer::validate::{is_market_ticker, is_series_ticker, is_symbol};
use serde_json::{json, Map, Value};

/// A channel a client can subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Channel {
    OrderbookDelta,
    Ticker,
    Trade,
    WindowLifecycle,
    Prices,
    Fill,
    UserOrders,
    MarketPositions,
    Balance,
}

/// What a channel's subscriptions are keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keyed {
    /// Market and/or series tickers.
    Markets,
    /// Underlying symbols.
    Symbols,
    /// The connection's own account (private channels).
    Account,
}

impl Channel {
    pub const ALL: [Channel; 9] = [
        Channel::OrderbookDelta,
        Channel::Ticker,
        Channel::Trade,
        Channel::WindowLifecycle,
        Channel::Prices,
        Channel::Fill,
        Channel::UserOrders,
        Channel::MarketPositions,
        Channel::Balance,
    ];
    /// The channels keyed by markets.
    pub const MARKET: [Channel; 4] = [
        Channel::OrderbookDelta,
        Channel::Ticker,
        Channel::Trade,
        Channel::WindowLifecycle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::OrderbookDelta => "orderbook_delta",
            Channel::Ticker => "ticker",
            Channel::Trade => "trade",
            Channel::WindowLifecycle => "window_lifecycle",
            Channel::Prices => "prices",
            Channel::Fill => "fill",
            Channel::UserOrders => "user_orders",
            Channel::MarketPositions => "market_positions",
            Channel::Balance => "balance",
        }
    }

    pub fn parse(text: &str) -> Option<Channel> {
        Channel::ALL.into_iter().find(|c| c.as_str() == text)
    }

    pub fn keyed(self) -> Keyed {
        match self {
            Channel::OrderbookDelta
            | Channel::Ticker
            | Channel::Trade
            | Channel::WindowLifecycle => Keyed::Markets,
            Channel::Prices => Keyed::Symbols,
            Channel::Fill | Channel::UserOrders | Channel::MarketPositions | Channel::Balance => {
                Keyed::Account
            }
        }
    }

    pub fn is_private(self) -> bool {
        self.keyed() == Keyed::Account
    }
}

/// The numbered errors of `{ id, type: "error", msg: { code, msg } }`
/// (DESIGN §5; 8 is the spec's AUTH_REQUIRED). The list is closed and
/// documented in `gateway/asyncapi.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// `cmd` is not one of the commands.
    UnknownCommand = 1,
    /// The frame is not a command object, or a parameter is missing, of the
    /// wrong type, or not allowed.
    BadParams = 2,
    /// A channel name is not one of the channels.
    UnknownChannel = 3,
    /// A sid is not a subscription of this connection.
    UnknownSid = 4,
    /// Over 100 tickers or 64 symbols in one command (or over the bound of
    /// one subscription).
    TooManyTickers = 5,
    /// Over 100 subscriptions on the connection.
    TooManySubscriptions = 6,
    /// A ticker or symbol does not match its pattern, or a market ticker is
    /// not on the order book (unknown or settled).
    UnknownTicker = 7,
    /// A private channel on a connection without a key.
    AuthRequired = 8,
    /// `login` refused: the message says why, as the REST 401/429 would.
    InvalidKey = 9,
    /// `login` on a connection that already has a key.
    AlreadyAuthenticated = 10,
    /// The exchange could not answer in time; retry.
    Unavailable = 11,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::UnknownCommand,
        ErrorCode::BadParams,
        ErrorCode::UnknownChannel,
        ErrorCode::UnknownSid,
        ErrorCode::TooManyTickers,
        ErrorCode::TooManySubscriptions,
        ErrorCode::UnknownTicker,
        ErrorCode::AuthRequired,
        ErrorCode::InvalidKey,
        ErrorCode::AlreadyAuthenticated,
        ErrorCode::Unavailable,
    ];
}

/// A refused command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsError {
    pub code: ErrorCode,
    pub msg: String,
}

impl WsError {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
        }
    }
    fn bad(msg: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadParams, msg)
    }
}

/// What `update_subscription` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    AddMarkets,
    DeleteMarkets,
    GetSnapshot,
}

/// The keys of a subscription: tickers or symbols, deduplicated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    pub market_tickers: BTreeSet<String>,
    pub series_tickers: BTreeSet<String>,
    pub symbols: BTreeSet<String>,
}

/// One client command, checked for shape and per-command limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Subscribe {
        channels: Vec<Channel>,
        keys: Keys,
    },
    Unsubscribe {
        sids: Vec<u32>,
    },
    Update {
        sid: u32,
        action: Action,
        keys: Keys,
    },
    List,
    Login {
        api_key: String,
    },
}

/// Parses one text frame: the id to echo (null when there is none to
/// echo) and the command or the error to answer.
pub fn parse(text: &str) -> (Value, Result<Command, WsError>) {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => {
            return (
                Value::Null,
                Err(WsError::bad(
                    "A command is a JSON object { id, cmd, params }.",
                )),
            )
        }
    };
    let Some(object) = value.as_object() else {
        return (
            Value::Null,
            Err(WsError::bad(
                "A command is a JSON object { id, cmd, params }.",
            )),
        );
    };
    let id = match object.get("id") {
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Value::Number(n.clone()),
        _ => {
            return (
                Value::Null,
                Err(WsError::bad("Field id must be an integer.")),
            )
        }
    };
    (id, command(object))
}

fn command(object: &Map<String, Value>) -> Result<Command, WsError> {
    for name in object.keys() {
        if !["id", "cmd", "params"].contains(&name.as_str()) {
            return Err(WsError::bad(format!("Unknown field {name}.")));
        }
    }
    let cmd = object
        .get("cmd")
        .and_then(Value::as_str)
        .ok_or_else(|| WsError::bad("Field cmd must be a string."))?;
    let empty = Map::new();
    let params = match object.get("params") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(WsError::bad("Field params must be an object.")),
    };
    let allow = |names: &[&str]| -> Result<(), WsError> {
        for name in params.keys() {
            if !names.contains(&name.as_str()) {
                return Err(WsError::bad(format!("Unknown parameter {name} of {cmd}.")));
            }
        }
        Ok(())
    };
    match cmd {
        "subscribe" => {
            allow(&["channels", "market_tickers", "series_tickers", "symbols"])?;
            let channels = channels(params)?;
            let keys = keys(params)?;
            for channel in &channels {
                match channel.keyed() {
                    Keyed::Markets
                        if keys.market_tickers.is_empty() && keys.series_tickers.is_empty() =>
                    {
                        return Err(WsError::bad(format!(
                            "Channel {} needs market_tickers and/or series_tickers.",
                            channel.as_str()
                        )))
                    }
                    Keyed::Symbols if keys.symbols.is_empty() => {
                        return Err(WsError::bad("Channel prices needs symbols."))
                    }
                    _ => {}
                }
            }
            Ok(Command::Subscribe { channels, keys })
        }
        "unsubscribe" => {
            allow(&["sids"])?;
            let sids = params
                .get("sids")
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
                .ok_or_else(|| WsError::bad("Parameter sids must be a non-empty array of sids."))?;
            if sids.len() > crate::ws::SUBSCRIPTIONS_MAX {
                return Err(WsError::bad("Too many sids."));
            }
            let mut out = Vec::with_capacity(sids.len());
            for sid in sids {
                let sid = as_sid(sid)?;
                if !out.contains(&sid) {
                    out.push(sid);
                }
            }
            Ok(Command::Unsubscribe { sids: out })
        }
        "update_subscription" => {
            allow(&[
                "sid",
                "action",
                "market_tickers",
                "series_tickers",
                "symbols",
            ])?;
            let sid = as_sid(
                params
                    .get("sid")
                    .ok_or_else(|| WsError::bad("Parameter sid is required."))?,
            )?;
            let action = match params.get("action").and_then(Value::as_str) {
                Some("add_markets") => Action::AddMarkets,
                Some("delete_markets") => Action::DeleteMarkets,
                Some("get_snapshot") => Action::GetSnapshot,
                _ => {
                    return Err(WsError::bad(
                        "Parameter action must be add_markets, delete_markets or get_snapshot.",
                    ))
                }
            };
            let keys = keys(params)?;
            Ok(Command::Update { sid, action, keys })
        }
        "list_subscriptions" => {
            allow(&[])?;
            Ok(Command::List)
        }
        "login" => {
            allow(&["api_key"])?;
            let api_key = params
                .get("api_key")
                .and_then(Value::as_str)
                .ok_or_else(|| WsError::bad("Parameter api_key must be a string."))?;
            Ok(Command::Login {
                api_key: api_key.to_string(),
            })
        }
        other => Err(WsError::new(
            ErrorCode::UnknownCommand,
            format!(
                "Unknown command {other}; the commands are subscribe, unsubscribe, \
                 update_subscription, list_subscriptions and login."
            ),
        )),
    }
}

fn as_sid(value: &Value) -> Result<u32, WsError> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| WsError::bad("A sid is a positive integer."))
}

fn channels(params: &Map<String, Value>) -> Result<Vec<Channel>, WsError> {
    let list = params
        .get("channels")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| WsError::bad("Parameter channels must be a non-empty array."))?;
    let mut out = Vec::with_capacity(list.len());
    for item in list {
        let name = item
            .as_str()
            .ok_or_else(|| WsError::bad("Each channel is a string."))?;
        let channel = Channel::parse(name).ok_or_else(|| {
            WsError::new(
                ErrorCode::UnknownChannel,
                format!("Unknown channel {name}."),
            )
        })?;
        if !out.contains(&channel) {
            out.push(channel);
        }
    }
    Ok(out)
}

fn strings(
    params: &Map<String, Value>,
    name: &str,
    valid: fn(&str) -> bool,
    what: &str,
) -> Result<BTreeSet<String>, WsError> {
    let Some(value) = params.get(name) else {
        return Ok(BTreeSet::new());
    };
    let list = value
        .as_array()
        .ok_or_else(|| WsError::bad(format!("Parameter {name} must be an array of strings.")))?;
    let mut out = BTreeSet::new();
    for item in list {
        let text = item.as_str().ok_or_else(|| {
            WsError::bad(format!("Parameter {name} must be an array of strings."))
        })?;
        if !valid(text) {
            return Err(WsError::new(
                ErrorCode::UnknownTicker,
                format!("{text:?} is not a valid {what}."),
            ));
        }
        out.insert(text.to_string());
    }
    Ok(out)
}

fn too_many() -> WsError {
    WsError::new(
        ErrorCode::TooManyTickers,
        format!(
            "At most {WS_TICKERS_PER_COMMAND} tickers and {WS_SYMBOLS_PER_COMMAND} symbols per command."
        ),
    )
}

fn keys(params: &Map<String, Value>) -> Result<Keys, WsError> {
    // The limits count what the command sends, repeats included, and are
    // checked before anything is copied.
    let sent = |name: &str| {
        params
            .get(name)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    if sent("market_tickers") + sent("series_tickers") > WS_TICKERS_PER_COMMAND
        || sent("symbols") > WS_SYMBOLS_PER_COMMAND
    {
        return Err(too_many());
    }
    Ok(Keys {
        market_tickers: strings(params, "market_tickers", is_market_ticker, "market ticker")?,
        series_tickers: strings(params, "series_tickers", is_series_ticker, "series ticker")?,
        symbols: strings(params, "symbols", is_symbol, "symbol")?,
    })
}

// ----- frames ---------------------------------------------------------------------------------

/// A reply `{ id, type, msg }`.
pub fn reply(id: &Value, kind: &str, msg: Value) -> String {
    json!({ "id": id, "type": kind, "msg": msg }).to_string()
}

/// An error reply `{ id, type: "error", msg: { code, msg } }`.
pub fn error(id: &Value, e: &WsError) -> String {
    reply(id, "error", json!({ "code": e.code as u16, "msg": e.msg }))
}

/// Writes a data frame `{ type, sid, seq, ts_ms, msg }` around a `msg`
/// serialized once for every subscriber.
pub fn envelope(out: &mut Vec<u8>, kind: &str, sid: u32, seq: u64, ts_ms: u64, msg: &[u8]) {
    out.clear();
    envelope_head(out, kind, sid, seq, ts_ms);
    out.extend_from_slice(msg);
    out.push(b'}');
}

/// Appends the envelope's head, `{"type":"KIND","sid":N,"seq":N,"ts_ms":N,"msg":`,
/// with the digits written straight into `out` (no `fmt`, no allocation
/// once `out` has grown). `kind` is one of the protocol's fixed names: it
/// is written as is, unescaped.
pub fn envelope_head(out: &mut Vec<u8>, kind: &str, sid: u32, seq: u64, ts_ms: u64) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"sid\":");
    out.extend_from_slice(digits.format(sid).as_bytes());
    out.extend_from_slice(b",\"seq\":");
    out.extend_from_slice(digits.format(seq).as_bytes());
    out.extend_from_slice(b",\"ts_ms\":");
    out.extend_from_slice(digits.format(ts_ms).as_bytes());
    out.extend_from_slice(b",\"msg\":");
}

/// Appends the head of one unfragmented, unmasked server frame (RFC 6455
/// 5.2) of `len` payload bytes: the bytes fastwebsockets writes before a
/// server's payload.
pub fn frame_head(out: &mut Vec<u8>, opcode: fastwebsockets::OpCode, len: usize) {
    out.push(0x80 | opcode as u8);
    if len < 126 {
        out.push(len as u8);
    } else if let Ok(len) = u16::try_from(len) {
        out.push(126);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
}

/// Appends one server frame carrying `payload`.
pub fn frame(out: &mut Vec<u8>, opcode: fastwebsockets::OpCode, payload: &[u8]) {
    frame_head(out, opcode, payload.len());
    out.extend_from_slice(payload);
}

/// Appends a whole data frame, websocket head included, for `msg`: the
/// frame [`envelope`] builds, with `head` a scratch buffer for the
/// envelope's head (reused across calls).
pub fn data_frame(
    out: &mut Vec<u8>,
    head: &mut Vec<u8>,
    kind: &str,
    sid: u32,
    seq: u64,
    ts_ms: u64,
    msg: &[u8],
) {
    head.clear();
    envelope_head(head, kind, sid, seq, ts_ms);
    frame_head(
        out,
        fastwebsockets::OpCode::Text,
        head.len() + msg.len() + 1,
    );
    out.extend_from_slice(head);
    out.extend_from_slice(msg);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (Value, u16) {
        let (id, r) = parse(text);
        (id, r.unwrap_err().code as u16)
    }

    #[test]
    fn commands_parse_and_refuse_with_numbered_errors() {
        let (id, cmd) = parse(
            r#"{"id":7,"cmd":"subscribe","params":{"channels":["ticker","orderbook_delta"],"market_tickers":["a-261121-2100-2115"]}}"#,
        );
        assert_eq!(id, json!(7));
        match cmd.unwrap() {
            Command::Subscribe { channels, keys } => {
                assert_eq!(channels, vec![Channel::Ticker, Channel::OrderbookDelta]);
                assert_eq!(keys.market_tickers.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(err("nope"), (Value::Null, 2));
        assert_eq!(err(r#"{"cmd":"list_subscriptions"}"#), (Value::Null, 2));
        assert_eq!(err(r#"{"id":1,"cmd":"dance"}"#), (json!(1), 1));
        assert_eq!(
            err(r#"{"id":1,"cmd":"subscribe","params":{"channels":["nope"]}}"#),
            (json!(1), 3)
        );
        assert_eq!(
            err(r#"{"id":1,"cmd":"subscribe","params":{"channels":["ticker"]}}"#),
            (json!(1), 2)
        );
        assert_eq!(
            err(
                r#"{"id":1,"cmd":"subscribe","params":{"channels":["ticker"],"market_tickers":["BAD"]}}"#
            ),
            (json!(1), 7)
        );
        let many: Vec<String> = (0..101).map(|i| format!("s{i}")).collect();
        let text = json!({"id":2,"cmd":"subscribe","params":{"channels":["ticker"],"series_tickers":many}})
            .to_string();
        assert_eq!(err(&text), (json!(2), 5));
        let symbols: Vec<String> = (0..65).map(|i| format!("S{i}")).collect();
        let text =
            json!({"id":2,"cmd":"subscribe","params":{"channels":["prices"],"symbols":symbols}})
                .to_string();
        assert_eq!(err(&text), (json!(2), 5));
        // The limits count what is sent, repeats included.
        let repeated = vec!["X:BTCUSD"; 65];
        let text =
            json!({"id":2,"cmd":"subscribe","params":{"channels":["prices"],"symbols":repeated}})
                .to_string();
        assert_eq!(err(&text), (json!(2), 5));
        let (markets, series) = (vec!["btc-1m-261121-2100-2101"; 60], vec!["btc-1m"; 41]);
        let text = json!({"id":2,"cmd":"subscribe","params":{"channels":["ticker"],
            "market_tickers":markets,"series_tickers":series}})
        .to_string();
        assert_eq!(err(&text), (json!(2), 5));
        let text = json!({"id":2,"cmd":"subscribe","params":{"channels":["prices"],
            "symbols":vec!["X:BTCUSD"; 64]}})
        .to_string();
        assert!(parse(&text).1.is_ok(), "64 symbols are allowed");
        assert_eq!(
            err(r#"{"id":3,"cmd":"unsubscribe","params":{"sids":[0]}}"#),
            (json!(3), 2)
        );
        assert_eq!(
            err(r#"{"id":3,"cmd":"update_subscription","params":{"sid":1,"action":"x"}}"#),
            (json!(3), 2)
        );
        assert_eq!(
            err(r#"{"id":3,"cmd":"list_subscriptions","params":{"x":1}}"#),
            (json!(3), 2)
        );
    }

    /// An id is any integer (asyncapi `Id`), negative or past i64::MAX,
    /// echoed as sent; a fraction, a float written as a whole number, a
    /// string or null is no id: 2, with a null id.
    #[test]
    fn an_id_is_any_integer_and_only_an_integer() {
        for id in [
            "0",
            "7",
            "-1",
            "-9223372036854775808",
            "18446744073709551615",
        ] {
            let (echoed, cmd) = parse(&format!(r#"{{"id":{id},"cmd":"list_subscriptions"}}"#));
            assert_eq!(echoed.to_string(), id);
            assert_eq!(cmd, Ok(Command::List), "{id}");
        }
        for id in ["1.5", "1.0", "1e3", r#""1""#, "null", "true"] {
            let (echoed, cmd) = parse(&format!(r#"{{"id":{id},"cmd":"list_subscriptions"}}"#));
            assert_eq!(echoed, Value::Null, "{id}");
            assert_eq!(
                cmd.unwrap_err(),
                WsError::bad("Field id must be an integer."),
                "{id}"
            );
        }
    }

    /// prices needs symbols: without them it is refused (2), whatever
    /// tickers come along, alone or beside a market channel that has them.
    #[test]
    fn prices_without_symbols_is_refused() {
        let ticker = "btc-1m-261121-2100-2101";
        for params in [
            json!({ "channels": ["prices"] }),
            json!({ "channels": ["prices"], "symbols": [] }),
            json!({ "channels": ["prices"], "market_tickers": [ticker] }),
            json!({ "channels": ["ticker", "prices"], "market_tickers": [ticker] }),
        ] {
            let text = json!({ "id": 4, "cmd": "subscribe", "params": params }).to_string();
            let (id, cmd) = parse(&text);
            assert_eq!(id, json!(4));
            assert_eq!(
                cmd.unwrap_err(),
                WsError::bad("Channel prices needs symbols."),
                "{params}"
            );
        }
    }

    /// unsubscribe takes as many sids as a connection can hold (100) in
    /// one command, repeats counted and then dropped; one more is refused
    /// (2) before any is looked at.
    #[test]
    fn unsubscribe_takes_up_to_a_connections_worth_of_sids() {
        let unsubscribe = |sids: Vec<u32>| {
            parse(&json!({ "id": 5, "cmd": "unsubscribe", "params": { "sids": sids } }).to_string())
                .1
        };
        let max = crate::ws::SUBSCRIPTIONS_MAX as u32;
        assert_eq!(
            unsubscribe((1..=max).collect()),
            Ok(Command::Unsubscribe {
                sids: (1..=max).collect()
            })
        );
        assert_eq!(
            unsubscribe([1, 2, 1, 3, 2].to_vec()),
            Ok(Command::Unsubscribe {
                sids: vec![1, 2, 3]
            })
        );
        let refused = Err(WsError::bad("Too many sids."));
        assert_eq!(unsubscribe((1..=max + 1).collect()), refused);
        assert_eq!(unsubscribe(vec![1; max as usize + 1]), refused);
    }

    /// `gateway/asyncapi.json` against the code: every channel, every
    /// numbered error and every limit.
    #[test]
    fn the_asyncapi_document_matches_the_protocol() {
        let doc: Value = serde_json::from_str(include_str!("../../asyncapi.json")).unwrap();
        assert_eq!(doc["asyncapi"], "3.0.0");
        assert_eq!(doc["info"]["version"], "1.0.0");
        let names: Vec<&str> = Channel::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            doc["components"]["schemas"]["Channel"]["enum"],
            json!(names)
        );
        for name in &names {
            assert!(
                doc["operations"][format!("channel_{name}")].is_object(),
                "{name} has no operation"
            );
        }
        for cmd in [
            "subscribe",
            "unsubscribe",
            "update_subscription",
            "list_subscriptions",
            "login",
        ] {
            assert!(doc["operations"][cmd].is_object(), "{cmd}");
        }
        let codes: Vec<u16> = ErrorCode::ALL.iter().map(|c| *c as u16).collect();
        let documented: Vec<u16> = doc["x-error-codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["code"].as_u64().unwrap() as u16)
            .collect();
        assert_eq!(documented, codes);
        assert_eq!(
            doc["components"]["messages"]["error"]["payload"]["properties"]["msg"]["properties"]
                ["code"]["enum"],
            json!(codes)
        );
        assert_eq!(doc["x-error-codes"][7]["name"], "AUTH_REQUIRED");
        use sequencer::limits::*;
        let limits = &doc["x-limits"];
        assert_eq!(limits["connections_per_ip"], json!(WS_CONNECTIONS_PER_IP));
        assert_eq!(
            limits["subscriptions_per_connection"],
            json!(WS_SUBSCRIPTIONS_PER_CONNECTION)
        );
        assert_eq!(limits["commands_per_second"], json!(WS_COMMANDS_PER_SECOND));
        assert_eq!(limits["commands_burst"], json!(WS_COMMANDS_BURST));
        assert_eq!(limits["message_bytes_max"], json!(WS_MESSAGE_BYTES_MAX));
        assert_eq!(limits["ping_interval_ms"], json!(WS_PING_INTERVAL_MS));
        assert_eq!(limits["tickers_per_command"], json!(WS_TICKERS_PER_COMMAND));
        assert_eq!(limits["symbols_per_command"], json!(WS_SYMBOLS_PER_COMMAND));
        // Every $ref resolves.
        fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r);
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            assert!(doc.pointer(r.trim_start_matches('#')).is_some(), "{r}");
        }
    }

    /// The frames written by hand are the ones fastwebsockets writes, for
    /// every length class of the head.
    #[test]
    fn frames_are_the_bytes_fastwebsockets_writes() {
        use fastwebsockets::{Frame, OpCode, Payload};
        for len in [0usize, 1, 125, 126, 127, 65_535, 65_536, 70_000] {
            let payload = vec![b'x'; len];
            for opcode in [OpCode::Text, OpCode::Ping, OpCode::Pong, OpCode::Close] {
                let mut theirs = Vec::new();
                let theirs = Frame::new(true, opcode, None, Payload::Borrowed(&payload))
                    .write(&mut theirs)
                    .to_vec();
                let mut ours = vec![1, 2, 3];
                frame(&mut ours, opcode, &payload);
                assert_eq!(&ours[..3], &[1, 2, 3]);
                assert_eq!(ours[3..], theirs[..], "{opcode:?} of {len}");
            }
        }
        // A data frame is a text frame around the envelope.
        let mut env = Vec::new();
        let (mut out, mut head) = (Vec::new(), Vec::new());
        for msg in [&br#"{"a":1}"#[..], &[b'7'; 200][..]] {
            envelope(
                &mut env,
                "orderbook_delta",
                4_000_000_000,
                u64::MAX,
                1_763_769_600_000,
                msg,
            );
            out.clear();
            data_frame(
                &mut out,
                &mut head,
                "orderbook_delta",
                4_000_000_000,
                u64::MAX,
                1_763_769_600_000,
                msg,
            );
            let mut theirs = Vec::new();
            let theirs = Frame::text(Payload::Borrowed(&env))
                .write(&mut theirs)
                .to_vec();
            assert_eq!(out, theirs);
        }
    }

    #[test]
    fn the_envelope_splices_a_shared_msg() {
        let mut out = Vec::new();
        envelope(&mut out, "ticker", 3, 17, 99, br#"{"a":1}"#);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            json!({"type":"ticker","sid":3,"seq":17,"ts_ms":99,"msg":{"a":1}})
        );
        // Byte for byte what the `format!` it replaced wrote.
        for (sid, seq, ts) in [
            (1, 0, 0),
            (100, 9_999, 1_763_769_600_123),
            (u32::MAX, u64::MAX, u64::MAX),
        ] {
            envelope(&mut out, "trade", sid, seq, ts, b"[]");
            let text = format!(
                "{{\"type\":\"trade\",\"sid\":{sid},\"seq\":{seq},\"ts_ms\":{ts},\"msg\":[]}}"
            );
            assert_eq!(out, text.as_bytes());
        }
    }
}
