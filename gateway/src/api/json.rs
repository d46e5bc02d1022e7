//! The spec's records as JSON, written from the state. One function per
//! record so every endpoint and channel writes a record the same way.

use sequencer::query::{BalanceView, OrderbookView, PositionView};
use sequencer::state::{Fill, Key, Market, Order, Trade};
use sequencer::types::{flip, MarketStatus};
use sequencer::wire::{average_price, dollars, price, price_e8};
use sequencer::State;
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};

/// The ticker of a market, empty for an unknown id.
pub fn ticker(state: &State, market: u32) -> &str {
    state.market(market).map_or("", |m| m.ticker.as_str())
}

/// An Order record: exactly the spec's fields, the optional two only when
/// there are fills.
pub fn order(state: &State, o: &Order) -> Value {
    order_in(ticker(state, o.market), o)
}

/// An Order record of a market whose ticker the caller knows (the
/// websocket publisher, which has no `State`).
pub fn order_in(market_ticker: &str, o: &Order) -> Value {
    serde_json::to_value(OrderRecord::new(market_ticker, o)).expect("an order record is JSON")
}

/// `{"order": Order}` as bytes, straight from the record (no `Value` in
/// between): the answer of order entry and cancel, the hottest write path.
pub fn order_answer(market_ticker: &str, o: &Order) -> Vec<u8> {
    #[derive(Serialize)]
    struct Answer<'a> {
        order: OrderRecord<'a>,
    }
    serde_json::to_vec(&Answer {
        order: OrderRecord::new(market_ticker, o),
    })
    .expect("an order record is JSON")
}

/// The Order record's fields. They are declared in alphabetical order so
/// that the bytes equal those of a `serde_json::Map` (a sorted map), which
/// the other records are written with.
#[derive(Serialize)]
struct OrderRecord<'a> {
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    average_fill_price: Option<String>,
    client_order_id: &'a str,
    #[serde(serialize_with = "as_string")]
    count: u32,
    created_ts_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    fees_paid: Option<String>,
    #[serde(serialize_with = "as_string")]
    fill_count: u32,
    market_ticker: &'a str,
    #[serde(serialize_with = "as_string")]
    order_id: u64,
    outcome: &'static str,
    post_only: bool,
    price: String,
    #[serde(serialize_with = "as_string")]
    remaining_count: u32,
    status: &'static str,
    time_in_force: &'static str,
}

impl<'a> OrderRecord<'a> {
    fn new(market_ticker: &'a str, o: &'a Order) -> OrderRecord<'a> {
        let filled = o.filled > 0;
        OrderRecord {
            action: o.action.as_str(),
            average_fill_price: filled.then(|| average_price(o.fill_cost, u64::from(o.filled))),
            client_order_id: o.client_order_id.as_str(),
            count: o.count,
            created_ts_ms: o.created_ts_ms,
            fees_paid: filled.then(|| dollars(o.fees)),
            fill_count: o.filled,
            market_ticker,
            order_id: o.id,
            outcome: o.outcome.as_str(),
            post_only: o.post_only,
            price: price(o.price),
            remaining_count: remaining(o),
            status: o.status.as_str(),
            time_in_force: o.time_in_force.as_str(),
        }
    }
}

/// A number written as a JSON string (the spec's counts and ids), without
/// an intermediate `String`.
fn as_string<S: Serializer>(
    value: &impl std::fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// Contracts that may still trade: what rests, or 0 once the order ended.
fn remaining(o: &Order) -> u32 {
    if o.is_resting() {
        o.remaining()
    } else {
        0
    }
}

/// A Fill record.
pub fn fill(state: &State, f: &Fill) -> Value {
    fill_in(ticker(state, f.market), f)
}

/// A Fill record of a market whose ticker the caller knows.
pub fn fill_in(market_ticker: &str, f: &Fill) -> Value {
    json!({
        "fill_id": f.id.to_string(),
        "market_ticker": market_ticker,
        "outcome": f.outcome.as_str(),
        "action": f.action.as_str(),
        "price": price(f.price),
        "count": f.count.to_string(),
        "cost": dollars(f.cost),
        "ts_ms": f.ts_ms,
    })
}

/// A Position record.
pub fn position(p: &PositionView) -> Value {
    json!({
        "market_ticker": p.market_ticker,
        "outcome": p.outcome.as_str(),
        "count": p.count.to_string(),
        "cost": dollars(p.cost),
        "average_price": average_price(p.cost, p.count),
    })
}

/// The balance record (DESIGN §5).
pub fn balance(b: &BalanceView) -> Value {
    json!({ "cash": dollars(b.cash), "held": dollars(b.held), "buying_power": dollars(b.buying_power) })
}

/// A Market record.
pub fn market(state: &State, m: &Market) -> Value {
    let series = state.series_of(m);
    let top = state.top(m.id);
    let mut map = Map::new();
    map.insert("ticker".into(), m.ticker.clone().into());
    map.insert("series_ticker".into(), series.config.ticker.clone().into());
    map.insert("status".into(), m.status.as_str().into());
    map.insert("open_ts_ms".into(), m.open_ts_ms.into());
    map.insert("close_ts_ms".into(), m.close_ts_ms.into());
    map.insert(
        "price_ranges".into(),
        json!([{ "start": "0.01", "end": "0.99", "step": "0.01" }]),
    );
    map.insert("tick_size".into(), "0.01".into());
    if let Some(beat) = m.price_to_beat_e8 {
        map.insert("price_to_beat".into(), price_e8(beat).into());
    }
    if m.status == MarketStatus::Settled {
        if let Some(result) = m.result {
            map.insert("result".into(), result.as_str().into());
        }
        if let Some(settle) = m.settlement_price_e8 {
            map.insert("settlement_price".into(), price_e8(settle).into());
        }
        if let Some(ts) = m.settled_ts_ms {
            map.insert("settled_ts_ms".into(), ts.into());
        }
    }
    insert_top(&mut map, &top);
    Value::Object(map)
}

/// Top of book on the Up scale and the last trade price, each only when
/// there is one: the market record and the websocket `ticker` share it.
pub fn insert_top(map: &mut Map<String, Value>, top: &sequencer::event::Top) {
    if let Some(bid) = top.up_bid {
        map.insert("up_bid".into(), price(bid).into());
        map.insert("up_bid_size".into(), top.up_bid_size.to_string().into());
    }
    if let Some(ask) = top.up_ask {
        map.insert("up_ask".into(), price(ask).into());
        map.insert("up_ask_size".into(), top.up_ask_size.to_string().into());
    }
    if let Some(last) = top.last_price {
        map.insert("last_price".into(), price(last).into());
    }
}

/// A public trade (the REST trades endpoint and the websocket `trade`).
pub fn trade(state: &State, t: &Trade) -> Value {
    trade_in(ticker(state, t.market), t)
}

/// A public trade of a market whose ticker the caller knows.
pub fn trade_in(market_ticker: &str, t: &Trade) -> Value {
    json!({
        "trade_id": t.trade_id.to_string(),
        "market_ticker": market_ticker,
        "up_price": price(t.up_price),
        "down_price": price(flip(t.up_price)),
        "count": t.count.to_string(),
        "taker_outcome": t.taker_outcome.as_str(),
        "taker_action": t.taker_action.as_str(),
        "ts_ms": t.ts_ms,
    })
}

/// Levels as `[price, count]` string pairs, best first.
pub fn levels(levels: &[(u8, u64)]) -> Value {
    Value::Array(
        levels
            .iter()
            .map(|&(p, c)| json!([price(p), c.to_string()]))
            .collect(),
    )
}

/// The REST order book.
pub fn orderbook(book: &OrderbookView) -> Value {
    json!({
        "market_ticker": book.market_ticker,
        "up": levels(&book.up),
        "down": levels(&book.down),
        "checksum": book.checksum,
    })
}

/// The Account record: the key as the server sees it, never its secret.
pub fn account(key: &Key, server_time_ms: u64) -> Value {
    let mut limits = Map::new();
    if let Some(c) = key.limits.max_order_cents {
        limits.insert("max_order_usd".into(), cents_number(c));
    }
    if let Some(c) = key.limits.max_daily_cents {
        limits.insert("max_daily_usd".into(), cents_number(c));
    }
    if let Some(n) = key.limits.max_open_orders {
        limits.insert("max_open_orders".into(), n.into());
    }
    if let Some(series) = &key.limits.series {
        limits.insert("markets".into(), series.clone().into());
    }
    json!({
        "key_id": key.key_id,
        "key_name": key.name,
        "environment": key.environment.as_str(),
        "scopes": key.scopes.names(),
        "limits": limits,
        "server_time_ms": server_time_ms,
    })
}

/// Cents as a JSON number of dollars (whole dollars stay integers).
fn cents_number(cents: u64) -> Value {
    if cents.is_multiple_of(100) {
        (cents / 100).into()
    } else {
        serde_json::Number::from_f64(cents as f64 / 100.0).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sequencer::types::{Action, ClientOrderId, OrderStatus, Outcome, TimeInForce};

    fn order(filled: u32, status: OrderStatus) -> Order {
        Order {
            id: 42,
            account: 1,
            key: 0,
            market: 0,
            outcome: Outcome::Down,
            action: Action::Buy,
            price: 37,
            time_in_force: TimeInForce::GoodTillCanceled,
            post_only: true,
            status,
            count: 10,
            filled,
            fill_cost: i64::from(filled) * 35,
            fees: i64::from(filled),
            created_ts_ms: 1_700_000_000_123,
            updated_ts_ms: 1_700_000_000_456,
            client_order_id: ClientOrderId::new("c-1.a:b_2").unwrap(),
            hold: 0,
            max_fee_per_contract: 2,
            node: u32::MAX,
            account_slot: 0,
        }
    }

    /// The order answer is written from a struct, every other record from a
    /// sorted map: the bytes must be the same either way, and the record
    /// must hold exactly the spec's fields.
    #[test]
    fn the_order_answer_is_byte_for_byte_the_record_in_a_sorted_map() {
        for o in [
            order(0, OrderStatus::Resting),
            order(4, OrderStatus::Resting),
            order(10, OrderStatus::Executed),
        ] {
            let bytes = order_answer("btc-1m-261121-2100-2101", &o);
            let value: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(
                bytes,
                serde_json::to_vec(&value).unwrap(),
                "fields in sorted order"
            );
            let record = &value["order"];
            assert_eq!(record, &order_in("btc-1m-261121-2100-2101", &o));
            assert_eq!(record["order_id"], "42");
            assert_eq!(record["client_order_id"], "c-1.a:b_2");
            assert_eq!(record["price"], "0.37");
            assert_eq!(record["count"], "10");
            assert_eq!(record["fill_count"], o.filled.to_string());
            assert_eq!(record["created_ts_ms"], 1_700_000_000_123u64);
            let expected_remaining = if o.is_resting() { o.remaining() } else { 0 };
            assert_eq!(record["remaining_count"], expected_remaining.to_string());
            let fields = record.as_object().unwrap().len();
            if o.filled > 0 {
                assert_eq!(fields, 15);
                assert!(record["average_fill_price"].is_string());
                assert!(record["fees_paid"].is_string());
            } else {
                assert_eq!(fields, 13, "no fill fields before a fill");
            }
        }
    }
}
