//! The spec's records as JSON, written from the state. One function per
//! record so every endpoint and channel writes a record the same way.

use sequencer::query::{BalanceView, OrderbookView, PositionView};
use sequencer::state::{Fill, Key, Market, Order, Trade};
use sequencer::types::{flip, MarketStatus};
use sequencer::wire::{average_price, dollars, price, price_e8};
use sequencer::State;
use serde_json::{json, Map, Value};

fn ticker(state: &State, market: u32) -> &str {
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
    let mut map = Map::new();
    map.insert("order_id".into(), o.id.to_string().into());
    map.insert("client_order_id".into(), o.client_order_id.as_str().into());
    map.insert("market_ticker".into(), market_ticker.into());
    map.insert("outcome".into(), o.outcome.as_str().into());
    map.insert("action".into(), o.action.as_str().into());
    map.insert("price".into(), price(o.price).into());
    map.insert("time_in_force".into(), o.time_in_force.as_str().into());
    map.insert("post_only".into(), o.post_only.into());
    map.insert("status".into(), o.status.as_str().into());
    map.insert("count".into(), o.count.to_string().into());
    map.insert("fill_count".into(), o.filled.to_string().into());
    map.insert("remaining_count".into(), remaining(o).to_string().into());
    if o.filled > 0 {
        map.insert(
            "average_fill_price".into(),
            average_price(o.fill_cost, u64::from(o.filled)).into(),
        );
        map.insert("fees_paid".into(), dollars(o.fees).into());
    }
    map.insert("created_ts_ms".into(), o.created_ts_ms.into());
    Value::Object(map)
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
