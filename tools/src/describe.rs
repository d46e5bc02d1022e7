//! Journal records for people and for programs: a command as JSON (every
//! field, raw values: cents, ids), a one-line human summary of it, and what
//! it did (the reply and its events) when the state is replayed alongside.
//!
//! Command JSON uses the raw journal values so nothing is lost: prices and
//! money in cents (`price`, `cents`, `*_cents`), markets, keys and accounts by
//! their numeric ids, the key fingerprint in hex. Replies and events reuse
//! the REST records of `gateway::api::json` where the spec has one (orders,
//! fills, trades), so an export matches what the API answered.

use gateway::api::json as rest;
use sequencer::command::AccountFlag;
use sequencer::event::Phase;
use sequencer::retention::Evicted;
use sequencer::state::Key;
use sequencer::types::KeyLimits;
use sequencer::wire::{dollars, price, price_e8};
use sequencer::{Command, Event, Reply, State};
use serde_json::{json, Map, Value};

use crate::timefmt::iso;

fn flag_name(flag: AccountFlag) -> &'static str {
    match flag {
        AccountFlag::TermsAccepted => "terms_accepted",
        AccountFlag::TradingAllowed => "trading_allowed",
        AccountFlag::Suspended => "suspended",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn limits_json(l: &KeyLimits) -> Value {
    json!({
        "max_order_cents": l.max_order_cents,
        "max_daily_cents": l.max_daily_cents,
        "max_open_orders": l.max_open_orders,
        "series": l.series,
    })
}

/// The whole command as JSON: `{"type": kind name, ...its fields}`.
pub fn command_json(command: &Command) -> Value {
    let kind = Command::kind_name(command.kind());
    let mut v = match command {
        Command::Tick | Command::CreateAccount | Command::ResumeTrading => json!({}),
        Command::Price {
            symbol,
            price_e8,
            t_ms,
        } => json!({ "symbol": symbol, "price_e8": price_e8, "t_ms": t_ms }),
        Command::SetRetention { tail_ms } => json!({ "tail_ms": tail_ms }),
        Command::SetRules { version } => json!({ "version": version }),
        Command::Configure(c) => json!({
            "environment": c.environment.as_str(),
            "practice_book_open": c.practice_book_open,
            "account_risk_cap_cents": c.account_risk_cap_cents,
        }),
        Command::CreateSeries(s) => json!({
            "ticker": s.ticker,
            "symbol": s.symbol,
            "window_ms": s.window_ms,
            "list_ahead": s.list_ahead,
            "taker_fee_bps": s.taker_fee_bps,
            "maker_fee_bps": s.maker_fee_bps,
            "market_cap_cents": s.market_cap_cents,
        }),
        Command::Deposit { account, cents } | Command::Withdraw { account, cents } => {
            json!({ "account": account, "cents": cents })
        }
        Command::SetAccountFlag {
            account,
            flag,
            value,
        } => json!({ "account": account, "flag": flag_name(*flag), "value": value }),
        Command::SetAccountRiskCap { account, cents } => {
            json!({ "account": account, "cents": cents })
        }
        Command::IssueKey(k) => json!({
            "account": k.account,
            "key_id": k.key_id,
            "fingerprint": hex(&k.fingerprint),
            "name": k.name,
            "environment": k.environment.as_str(),
            "scopes": k.scopes.names(),
            "limits": limits_json(&k.limits),
            "ip_allowlist": k.ip_allowlist,
            "expires_days": k.expires_days,
        }),
        Command::RevokeKey { key_id } => json!({ "key_id": key_id }),
        Command::SetKeyLimits { key_id, limits } => {
            json!({ "key_id": key_id, "limits": limits_json(limits) })
        }
        Command::PauseTrading { until_ts_ms } => json!({ "until_ts_ms": until_ts_ms }),
        Command::PlaceOrder { key, order } => json!({
            "key": key,
            "market": order.market,
            "outcome": order.outcome.as_str(),
            "action": order.action.as_str(),
            "price": order.price,
            "count": order.count,
            "time_in_force": order.time_in_force.as_str(),
            "post_only": order.post_only,
            "client_order_id": order.client_order_id.as_str(),
        }),
        Command::CancelOrder { key, order_id } => json!({ "key": key, "order_id": order_id }),
        Command::CancelAll {
            key,
            market,
            series,
        } => json!({ "key": key, "market": market, "series": series }),
    };
    let mut object = Map::new();
    object.insert("type".into(), kind.into());
    if let Value::Object(fields) = v.take() {
        object.extend(fields);
    }
    Value::Object(object)
}

/// A market's ticker when the state knows it; `(unlisted)` for the id an
/// order naming a never-listed ticker carries; else `#id`.
pub(crate) fn market_name(state: Option<&State>, market: u32) -> String {
    if market == sequencer::types::UNLISTED_MARKET {
        return "(unlisted)".into();
    }
    state
        .and_then(|s| s.market(market))
        .map_or_else(|| format!("#{market}"), |m| m.ticker.clone())
}

fn key_name(state: Option<&State>, key: u32) -> String {
    match state.and_then(|s| s.key(key)) {
        Some(k) => format!("{key}({} account={})", k.key_id, k.account),
        None => key.to_string(),
    }
}

fn limits_text(l: &KeyLimits) -> String {
    let mut parts = Vec::new();
    if let Some(c) = l.max_order_cents {
        parts.push(format!("max_order={}", dollars(c as i64)));
    }
    if let Some(c) = l.max_daily_cents {
        parts.push(format!("max_daily={}", dollars(c as i64)));
    }
    if let Some(n) = l.max_open_orders {
        parts.push(format!("max_open_orders={n}"));
    }
    if let Some(s) = &l.series {
        parts.push(format!("series={}", s.join(",")));
    }
    if parts.is_empty() {
        // None given: a trade key then gets the venue's defaults.
        "limits=default".into()
    } else {
        parts.join(" ")
    }
}

/// One line saying what the command asked for. With the state (as it stood
/// around the command), ids are shown with their tickers and key ids.
pub fn summary(command: &Command, state: Option<&State>) -> String {
    match command {
        Command::Tick | Command::CreateAccount | Command::ResumeTrading => String::new(),
        Command::Price {
            symbol,
            price_e8: p,
            t_ms,
        } => format!("{symbol} {} at {}", price_e8(*p), iso(*t_ms)),
        Command::SetRetention { tail_ms } => format!("history tail {} s", tail_ms / 1000),
        Command::SetRules { version } => format!("business rules version {version}"),
        Command::Configure(c) => format!(
            "environment={} practice_book_open={} account_risk_cap={}",
            c.environment.as_str(),
            c.practice_book_open,
            dollars(c.account_risk_cap_cents)
        ),
        Command::CreateSeries(s) => format!(
            "{} symbol={} window={}s list_ahead={} taker_fee={}bps maker_fee={}bps market_cap={}",
            s.ticker,
            s.symbol,
            s.window_ms / 1000,
            s.list_ahead,
            s.taker_fee_bps,
            s.maker_fee_bps,
            dollars(s.market_cap_cents)
        ),
        Command::Deposit { account, cents } | Command::Withdraw { account, cents } => {
            format!("account={account} amount={}", dollars(*cents))
        }
        Command::SetAccountFlag {
            account,
            flag,
            value,
        } => format!("account={account} {}={value}", flag_name(*flag)),
        Command::SetAccountRiskCap { account, cents } => format!(
            "account={account} cap={}",
            cents.map_or_else(|| "default".into(), dollars)
        ),
        Command::IssueKey(k) => {
            let mut text = format!(
                "account={} key_id={} name={:?} env={} scopes={} {}",
                k.account,
                k.key_id,
                k.name,
                k.environment.as_str(),
                k.scopes.names().join(","),
                limits_text(&k.limits)
            );
            if !k.ip_allowlist.is_empty() {
                text.push_str(&format!(" ip={}", k.ip_allowlist.join(",")));
            }
            if let Some(d) = k.expires_days {
                text.push_str(&format!(" expires_days={d}"));
            }
            text
        }
        Command::RevokeKey { key_id } => format!("key_id={key_id}"),
        Command::SetKeyLimits { key_id, limits } => {
            format!("key_id={key_id} {}", limits_text(limits))
        }
        Command::PauseTrading { until_ts_ms } => match until_ts_ms {
            Some(t) => format!("until={}", iso(*t)),
            None => "until=resumed".into(),
        },
        Command::PlaceOrder { key, order } => {
            let tif = match order.time_in_force {
                sequencer::types::TimeInForce::GoodTillCanceled => "gtc",
                sequencer::types::TimeInForce::ImmediateOrCancel => "ioc",
            };
            format!(
                "key={} market={} {} {} {} x{} {tif}{} id={}",
                key_name(state, *key),
                market_name(state, order.market),
                order.action.as_str(),
                order.outcome.as_str(),
                price(order.price),
                order.count,
                if order.post_only { " post_only" } else { "" },
                order.client_order_id.as_str()
            )
        }
        Command::CancelOrder { key, order_id } => {
            let mut text = format!("key={} order={order_id}", key_name(state, *key));
            if let Some(o) = state.and_then(|s| s.order(*order_id)) {
                text.push_str(&format!(" market={}", market_name(state, o.market)));
            }
            text
        }
        Command::CancelAll {
            key,
            market,
            series,
        } => {
            let mut text = format!("key={}", key_name(state, *key));
            if let Some(m) = market {
                text.push_str(&format!(" market={m}"));
            }
            if let Some(s) = series {
                text.push_str(&format!(" series={s}"));
            }
            text
        }
    }
}

/// The reply as JSON; orders in the REST Order record.
pub fn reply_json(reply: &Reply, state: &State) -> Value {
    match reply {
        Reply::Ok => json!({ "status": "ok" }),
        Reply::Rejected(r) => json!({
            "status": "rejected",
            "code": r.code.as_str(),
            "http_status": r.code.http_status(),
            "message": r.message,
        }),
        Reply::AccountCreated { account } => {
            json!({ "status": "account_created", "account": account })
        }
        Reply::KeyIssued { key } => json!({ "status": "key_issued", "key": key }),
        Reply::Order { order, created } => json!({
            "status": "order",
            "created": created,
            "order": rest::order(state, order),
        }),
        Reply::Canceled { order_ids } => json!({
            "status": "canceled",
            "order_ids": order_ids.iter().map(u64::to_string).collect::<Vec<_>>(),
        }),
        Reply::OrderInHistory { order_id, account } => json!({
            "status": "order_in_history",
            "order_id": order_id.to_string(),
            "account": account,
        }),
    }
}

/// The reply and a digest of the events, for the readable line.
pub fn outcome_text(command: &Command, reply: &Reply, events: &[Event], state: &State) -> String {
    let retry = matches!(command, Command::PlaceOrder { .. });
    let mut text = match reply {
        Reply::Ok => "ok".to_string(),
        Reply::Rejected(r) => format!(
            "rejected {} {}: {}",
            r.code.http_status(),
            r.code.as_str(),
            r.message
        ),
        Reply::AccountCreated { account } => format!("account {account}"),
        Reply::KeyIssued { key } => format!("key {key}"),
        Reply::Order { order, created } => format!(
            "order {} {}{} filled {}/{}",
            order.id,
            order.status.as_str(),
            if *created || !retry {
                ""
            } else {
                " (idempotent retry: the order placed before)"
            },
            order.filled,
            order.count
        ),
        Reply::Canceled { order_ids } => format!("canceled {} orders", order_ids.len()),
        Reply::OrderInHistory { order_id, .. } => {
            format!("order {order_id} ended before the history tail: nothing to cancel")
        }
    };
    let (mut fills, mut trades, mut contracts) = (0, 0, 0u64);
    let mut lifecycle = Vec::new();
    for e in events {
        match e {
            Event::Fill(_) => fills += 1,
            Event::Trade(t) => {
                trades += 1;
                contracts += u64::from(t.count);
            }
            Event::MarketListed { ticker, .. } => lifecycle.push(format!("listed {ticker}")),
            Event::Lifecycle { market, phase, .. } => {
                let name = market_name(Some(state), *market);
                lifecycle.push(match phase {
                    Phase::Open { .. } => format!("opened {name}"),
                    Phase::Closed => format!("closed {name}"),
                    Phase::Settled { result, .. } => {
                        format!("settled {name} {}", result.map_or("void", |r| r.as_str()))
                    }
                });
            }
            _ => {}
        }
    }
    if trades > 0 {
        text.push_str(&format!(
            "; {trades} trades ({contracts} contracts), {fills} fills"
        ));
    }
    if !lifecycle.is_empty() {
        text.push_str("; ");
        text.push_str(&lifecycle.join(", "));
    }
    if !events.is_empty() {
        text.push_str(&format!(" [{} events]", events.len()));
    }
    text
}

fn key_json(k: &Key) -> Value {
    json!({
        "idx": k.idx,
        "key_id": k.key_id,
        "account": k.account,
        "name": k.name,
        "environment": k.environment.as_str(),
        "scopes": k.scopes.names(),
        "limits": limits_json(&k.limits),
        "ip_allowlist": k.ip_allowlist,
        "created_ts_ms": k.created_ts_ms,
        "expires_ts_ms": k.expires_ts_ms,
        "revoked_ts_ms": k.revoked_ts_ms,
    })
}

/// One event as JSON: `{"event": name, ...}`; orders, fills and trades in
/// their REST records, with the ids REST leaves implicit added.
pub fn event_json(event: &Event, state: &State) -> Value {
    let (name, mut v) = match event {
        Event::Order(update) => {
            // The event carries what changed; the order's fixed fields
            // come from the state, which is at or after the event.
            let Some(o) = update.order(state) else {
                return json!({ "event": "order", "order_id": update.id.to_string() });
            };
            let mut v = rest::order(state, &o);
            v["account"] = o.account.into();
            v["key"] = o.key.into();
            ("order", v)
        }
        Event::Fill(f) => {
            let mut v = rest::fill(state, f);
            v["account"] = f.account.into();
            v["order_id"] = f.order.to_string().into();
            v["fee"] = dollars(f.fee).into();
            v["is_taker"] = f.is_taker.into();
            v["trade_id"] = f.trade_id.to_string().into();
            ("fill", v)
        }
        Event::BookDelta {
            market,
            outcome,
            price: p,
            delta,
            checksum,
        } => (
            "book_delta",
            json!({ "market_ticker": market_name(Some(state), *market), "side": outcome.as_str(),
                    "price": price(*p), "delta": delta, "checksum": checksum }),
        ),
        Event::Ticker { market, top } => (
            "ticker",
            json!({ "market_ticker": market_name(Some(state), *market),
                    "up_bid": top.up_bid.map(price), "up_bid_size": top.up_bid_size,
                    "up_ask": top.up_ask.map(price), "up_ask_size": top.up_ask_size,
                    "last_price": top.last_price.map(price) }),
        ),
        Event::Trade(t) => ("trade", rest::trade(state, t)),
        Event::MarketListed { ticker, series, .. } => (
            "market_listed",
            json!({ "market_ticker": ticker, "series_ticker": series }),
        ),
        Event::Lifecycle {
            market,
            phase,
            ts_ms,
        } => {
            let mut v =
                json!({ "market_ticker": market_name(Some(state), *market), "ts_ms": ts_ms });
            match phase {
                Phase::Open { price_to_beat_e8 } => {
                    v["phase"] = "open".into();
                    v["price_to_beat"] = price_to_beat_e8.map(price_e8).into();
                }
                Phase::Closed => v["phase"] = "closed".into(),
                Phase::Settled {
                    result,
                    settlement_price_e8,
                } => {
                    v["phase"] = "settled".into();
                    v["result"] = result.map(|r| r.as_str()).into();
                    v["settlement_price"] = settlement_price_e8.map(price_e8).into();
                }
            }
            ("lifecycle", v)
        }
        Event::Price {
            symbol,
            price_e8: p,
            t_ms,
        } => (
            "price",
            json!({ "symbol": symbol, "price": price_e8(*p), "t_ms": t_ms }),
        ),
        Event::Position {
            account,
            market,
            outcome,
            count,
            cost,
        } => (
            "position",
            json!({ "account": account, "market_ticker": market_name(Some(state), *market),
                    "outcome": outcome.as_str(), "count": count.to_string(), "cost": dollars(*cost) }),
        ),
        Event::Balance {
            account,
            cash,
            held,
        } => (
            "balance",
            json!({ "account": account, "cash": dollars(*cash), "held": dollars(*held),
                    "buying_power": dollars(cash - held) }),
        ),
        Event::Key(k) => ("key", key_json(k)),
        Event::Evicted(evicted) => (
            "evicted",
            match &**evicted {
                Evicted::Order(o) => json!({ "order_id": o.id.to_string() }),
                Evicted::Fill { fill, .. } => json!({ "fill_id": fill.id.to_string() }),
                Evicted::Trades { market, trades } => json!({
                    "market_ticker": market_name(Some(state), *market),
                    "trades": trades.len(),
                }),
            },
        ),
        Event::Account {
            account,
            terms_accepted,
            trading_allowed,
            suspended,
        } => (
            "account",
            json!({ "account": account, "terms_accepted": terms_accepted,
                    "trading_allowed": trading_allowed, "suspended": suspended }),
        ),
        Event::Trading {
            paused,
            until_ts_ms,
        } => (
            "trading",
            json!({ "paused": paused, "until_ts_ms": until_ts_ms }),
        ),
    };
    let mut object = Map::new();
    object.insert("event".into(), name.into());
    if let Value::Object(fields) = v.take() {
        object.extend(fields);
    }
    Value::Object(object)
}

/// The names of every command kind, for `--kind` and its error message.
pub fn kind_names() -> Vec<&'static str> {
    (1..)
        .map(Command::kind_name)
        .take_while(|&n| n != "unknown")
        .collect()
}

/// The kind number of a name.
pub fn kind_of(name: &str) -> Option<u16> {
    (1u16..)
        .take_while(|&k| Command::kind_name(k) != "unknown")
        .find(|&k| Command::kind_name(k) == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markets_are_named_by_ticker_or_marked() {
        let state = State::default();
        assert_eq!(
            market_name(Some(&state), sequencer::types::UNLISTED_MARKET),
            "(unlisted)"
        );
        assert_eq!(market_name(Some(&state), 7), "#7");
        assert_eq!(market_name(None, 7), "#7");
    }
}
