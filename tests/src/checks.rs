//! Checks that the simulations run after every command.
//!
//! `State::check_invariants` (sequencer/src/invariants.rs) looks at the state
//! from the inside. The `EventChecker` here looks at it from the outside, the
//! way a websocket client would: it keeps its own copy of every market's book
//! built only from `Event::BookDelta`, recomputes the SPEC checksum from that
//! copy with its own string building (not sequencer's `book.rs`), and
//! compares the copy with the book the state reports. A client that follows
//! the deltas must always hold the real book, and every checksum it receives
//! must match what it holds; otherwise clients would resync forever.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sequencer::event::{OrderUpdate, Phase, Top};
use sequencer::state::{position_parts, Fill, Order};
use sequencer::types::{
    AccountId, Action, Cents, KeyIdx, MarketId, MarketStatus, OrderStatus, Outcome, PriceCents,
    TimeInForce,
};
use sequencer::{Command, ErrorCode, Event, Reply, State};

/// Levels per side that enter the checksum (SPEC "Checksum", step 1).
const CHECKSUM_LEVELS: usize = 10;

/// The SPEC checksum string of a book given as levels best first:
/// `up:0.55:12,0.54:5|down:0.40:3`. Written from the SPEC's four steps.
pub fn checksum_text(up: &[(PriceCents, u64)], down: &[(PriceCents, u64)]) -> String {
    let mut text = String::with_capacity(256);
    for (label, levels) in [("up:", up), ("down:", down)] {
        if label == "down:" {
            text.push('|');
        }
        text.push_str(label);
        for (i, (price, count)) in levels.iter().take(CHECKSUM_LEVELS).enumerate() {
            if i > 0 {
                text.push(',');
            }
            // A price on the wire is a dollar string on a one-cent grid.
            write!(text, "0.{price:02}:{count}").expect("writing to a String never fails");
        }
    }
    text
}

/// CRC-32 (zlib/PNG) of the checksum string.
pub fn spec_checksum(up: &[(PriceCents, u64)], down: &[(PriceCents, u64)]) -> u32 {
    crc32fast::hash(checksum_text(up, down).as_bytes())
}

/// One market's book as a client rebuilds it from deltas: contracts per
/// price level on each bid side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorBook {
    sides: [BTreeMap<PriceCents, u64>; 2],
}

impl MirrorBook {
    /// Levels of one side, best (highest price) first.
    pub fn levels(&self, outcome: Outcome) -> Vec<(PriceCents, u64)> {
        self.sides[outcome.index()]
            .iter()
            .rev()
            .map(|(&p, &c)| (p, c))
            .collect()
    }

    /// True when no level holds contracts.
    pub fn is_empty(&self) -> bool {
        self.sides.iter().all(BTreeMap::is_empty)
    }

    /// Applies one delta the way SPEC says a client must: change the level,
    /// remove it at zero. A level that would go negative is an error.
    pub fn apply(&mut self, outcome: Outcome, price: PriceCents, delta: i64) -> Result<(), String> {
        if delta == 0 {
            return Err(format!("a delta of 0 at {} {price}", outcome.as_str()));
        }
        if !(1..=99).contains(&price) {
            return Err(format!("a delta at price {price}, off the 1..99 grid"));
        }
        let side = &mut self.sides[outcome.index()];
        let before = side.get(&price).copied().unwrap_or(0);
        let after = i128::from(before) + i128::from(delta);
        if after < 0 {
            return Err(format!(
                "delta {delta} at {} {price} takes the level from {before} below zero",
                outcome.as_str()
            ));
        }
        if after == 0 {
            side.remove(&price);
        } else {
            side.insert(price, after as u64);
        }
        Ok(())
    }

    /// The SPEC checksum of the mirror.
    pub fn checksum(&self) -> u32 {
        spec_checksum(&self.levels(Outcome::Up), &self.levels(Outcome::Down))
    }
}

/// Follows the event stream and checks it against itself and the state.
#[derive(Clone, Debug, Default)]
pub struct EventChecker {
    books: BTreeMap<MarketId, MirrorBook>,
    /// The trade id the next public trade must carry (ids rise by one).
    next_trade_id: u64,
    /// Deltas applied so far, for reports.
    pub deltas: u64,
    /// Cash and held of each account as its `Balance` events said last.
    balances: BTreeMap<AccountId, (Cents, Cents)>,
    /// Count and cost of each position as its `Position` events said last.
    positions: BTreeMap<(AccountId, MarketId, Outcome), (u64, Cents)>,
    /// Top of book as each market's `Ticker` events said last.
    tops: BTreeMap<MarketId, Top>,
    /// Every underlying print seen, per symbol, in arrival order.
    prints: BTreeMap<String, Vec<(u64, i64)>>,
    /// Also compare the ticker of closed markets with their (empty) book.
    pub tickers_after_close: bool,
}

impl EventChecker {
    /// A checker that has seen no event yet.
    pub fn new() -> Self {
        Self {
            books: BTreeMap::new(),
            next_trade_id: 1,
            deltas: 0,
            balances: BTreeMap::new(),
            positions: BTreeMap::new(),
            tops: BTreeMap::new(),
            prints: BTreeMap::new(),
            tickers_after_close: true,
        }
    }

    /// The mirror of one market, if any delta touched it.
    pub fn book(&self, market: MarketId) -> Option<&MirrorBook> {
        self.books.get(&market)
    }

    /// Follows the events of one command: applies book deltas and checks
    /// their checksums, and checks that every public trade is made of exactly
    /// one maker fill and one taker fill of its size.
    pub fn observe(&mut self, state: &State, events: &[Event]) -> Result<(), String> {
        // Fills wait here until the trade that they belong to shows up.
        let mut pending: Vec<Fill> = Vec::new();
        for (i, event) in events.iter().enumerate() {
            match event {
                Event::Price {
                    symbol,
                    price_e8,
                    t_ms,
                } => {
                    let prints = self.prints.entry(symbol.clone()).or_default();
                    if prints.last().is_some_and(|&(t, _)| *t_ms < t) {
                        return Err(format!("event {i}: a print of {symbol} went back in time"));
                    }
                    prints.push((*t_ms, *price_e8));
                }
                Event::Lifecycle { market, phase, .. } => {
                    self.check_lifecycle(state, *market, phase)
                        .map_err(|e| format!("event {i}: market {market}: {e}"))?;
                }
                Event::BookDelta {
                    market,
                    outcome,
                    price,
                    delta,
                    checksum,
                } => {
                    let book = self.books.entry(*market).or_default();
                    book.apply(*outcome, *price, *delta)
                        .map_err(|e| format!("event {i}: market {market}: {e}"))?;
                    self.deltas += 1;
                    let expected = book.checksum();
                    if *checksum != expected {
                        let up = book.levels(Outcome::Up);
                        let down = book.levels(Outcome::Down);
                        return Err(format!(
                            "event {i}: market {market}: delta checksum {checksum} but the mirror book {:?} has {expected}",
                            checksum_text(&up, &down)
                        ));
                    }
                }
                Event::Fill(fill) => {
                    check_fill(state, fill).map_err(|e| format!("event {i}: {e}"))?;
                    pending.push(*fill);
                }
                Event::Balance {
                    account,
                    cash,
                    held,
                } => {
                    self.balances.insert(*account, (*cash, *held));
                }
                Event::Position {
                    account,
                    market,
                    outcome,
                    count,
                    cost,
                } => {
                    if *count == 0 {
                        self.positions.remove(&(*account, *market, *outcome));
                    } else {
                        self.positions
                            .insert((*account, *market, *outcome), (*count, *cost));
                    }
                }
                Event::Ticker { market, top } => {
                    // A ticker says a change: never the top it said last.
                    let last = self.tops.insert(*market, *top);
                    if last == Some(*top) {
                        return Err(format!(
                            "event {i}: a ticker of market {market} that repeats the last one: {top:?}"
                        ));
                    }
                }
                Event::Trade(trade) => {
                    if trade.trade_id != self.next_trade_id {
                        return Err(format!(
                            "event {i}: trade id {} but {} was next",
                            trade.trade_id, self.next_trade_id
                        ));
                    }
                    self.next_trade_id += 1;
                    let (mine, rest): (Vec<Fill>, Vec<Fill>) = pending
                        .drain(..)
                        .partition(|f| f.trade_id == trade.trade_id);
                    pending = rest;
                    let makers: Vec<&Fill> = mine.iter().filter(|f| !f.is_taker).collect();
                    let takers: Vec<&Fill> = mine.iter().filter(|f| f.is_taker).collect();
                    if makers.len() != 1 || takers.len() != 1 {
                        return Err(format!(
                            "event {i}: trade {} has {} maker and {} taker fills",
                            trade.trade_id,
                            makers.len(),
                            takers.len()
                        ));
                    }
                    for fill in mine.iter() {
                        if fill.count != trade.count || fill.market != trade.market {
                            return Err(format!(
                                "event {i}: fill {fill:?} does not match trade {trade:?}"
                            ));
                        }
                        // A fill's price is on its own outcome's scale.
                        let up_price = match fill.outcome {
                            Outcome::Up => fill.price,
                            Outcome::Down => 100 - fill.price,
                        };
                        if up_price != trade.up_price {
                            return Err(format!(
                                "event {i}: fill {fill:?} is not at the trade's price {trade:?}"
                            ));
                        }
                    }
                    let (maker, taker) = (makers[0], takers[0]);
                    if maker.account == taker.account {
                        return Err(format!(
                            "event {i}: trade {} is a self-trade of account {}",
                            trade.trade_id, maker.account
                        ));
                    }
                    if taker.outcome != trade.taker_outcome || taker.action != trade.taker_action {
                        return Err(format!(
                            "event {i}: taker fill {taker:?} disagrees with trade {trade:?}"
                        ));
                    }
                    // The maker sits on the book side opposite the taker's.
                    let taker_side = taker.action.book_side(taker.outcome);
                    let maker_side = maker.action.book_side(maker.outcome);
                    if taker_side == maker_side {
                        return Err(format!(
                            "event {i}: maker {maker:?} and taker {taker:?} are on one side"
                        ));
                    }
                }
                _ => {}
            }
        }
        if !pending.is_empty() {
            return Err(format!("fills without a trade: {pending:?}"));
        }
        Ok(())
    }

    /// Compares every mirror with the state's book, and checks that every
    /// market the state holds orders in has a mirror. Mirrors of settled,
    /// empty markets are dropped so the map stays small.
    pub fn compare_books(&mut self, state: &State) -> Result<(), String> {
        for &id in &state.active_markets {
            self.compare_one(state, id)?;
        }
        let stale: Vec<MarketId> = self
            .books
            .keys()
            .copied()
            .filter(|id| !state.active_markets.contains(id))
            .collect();
        for id in stale {
            self.compare_one(state, id)?;
            let status = state.market(id).map(|m| m.status);
            if status == Some(MarketStatus::Settled) {
                self.books.remove(&id);
            }
        }
        Ok(())
    }

    /// DESIGN §2: the price to beat is the last print at or before the open
    /// (the first print after it when there was none: a late open); the
    /// settlement price is the first print at or after the close; the result
    /// is up when settlement >= price to beat, and there is none for a window
    /// that never opened. Checked against the prints seen so far: a window
    /// must not open before a print after its open has arrived, since until
    /// then a later print could still be the last at or before the open.
    fn check_lifecycle(&self, state: &State, id: MarketId, phase: &Phase) -> Result<(), String> {
        let market = state.market(id).ok_or("unknown market")?;
        let symbol = &state.series_of(market).config.symbol;
        let empty = Vec::new();
        let prints = self.prints.get(symbol).unwrap_or(&empty);
        match *phase {
            Phase::Open { price_to_beat_e8 } => {
                let at_or_before = prints.iter().rev().find(|&&(t, _)| t <= market.open_ts_ms);
                let after = prints.iter().find(|&&(t, _)| t > market.open_ts_ms);
                if after.is_none() {
                    return Err(format!(
                        "opened on {price_to_beat_e8:?} before any print after its open"
                    ));
                }
                let expected = at_or_before.or(after).map(|&(_, p)| p);
                if price_to_beat_e8 != expected || expected.is_none() {
                    return Err(format!(
                        "opened on {price_to_beat_e8:?}, the prints say {expected:?}"
                    ));
                }
            }
            Phase::Settled {
                result,
                settlement_price_e8,
            } => {
                let expected = prints
                    .iter()
                    .find(|&&(t, _)| t >= market.close_ts_ms)
                    .map(|&(_, p)| p);
                if settlement_price_e8 != expected || expected.is_none() {
                    return Err(format!(
                        "settled on {settlement_price_e8:?}, the prints say {expected:?}"
                    ));
                }
                let want = match (market.price_to_beat_e8, settlement_price_e8) {
                    (Some(beat), Some(settle)) if settle >= beat => Some(Outcome::Up),
                    (Some(_), Some(_)) => Some(Outcome::Down),
                    _ => None,
                };
                if result != want {
                    return Err(format!(
                        "result {result:?} but price to beat {:?} and settlement {settlement_price_e8:?}",
                        market.price_to_beat_e8
                    ));
                }
            }
            Phase::Closed => {}
        }
        Ok(())
    }

    /// Compares what the private and ticker events told a subscriber with
    /// the state after a command: every account's cash and held, every
    /// position, the top of every open market, and every order that an
    /// event of this command showed (its last event is how it stands).
    pub fn compare_private(&mut self, state: &State, events: &[Event]) -> Result<(), String> {
        for a in &state.accounts {
            let told = self.balances.get(&a.id).copied().unwrap_or((0, 0));
            if told != (a.cash, a.held) {
                return Err(format!(
                    "account {}: balance events say cash {} held {}, the state has {} and {}",
                    a.id, told.0, told.1, a.cash, a.held
                ));
            }
        }
        let mut held = BTreeMap::new();
        for a in &state.accounts {
            for (&key, p) in &a.positions {
                let (market, outcome) = position_parts(key);
                held.insert((a.id, market, outcome), (p.count, p.cost));
            }
        }
        if held != self.positions {
            let differ: Vec<_> = held
                .iter()
                .filter(|(k, v)| self.positions.get(k) != Some(v))
                .chain(
                    self.positions
                        .iter()
                        .filter(|(k, v)| held.get(k) != Some(v)),
                )
                .take(4)
                .collect();
            return Err(format!(
                "position events and the state disagree on (account, market, outcome) -> (count, cost): {differ:?}"
            ));
        }
        for &id in &state.active_markets {
            let status = state.markets[id as usize].status;
            let compared = status == MarketStatus::Open
                || (self.tickers_after_close && status == MarketStatus::Closed);
            if !compared {
                continue;
            }
            let told = self.tops.get(&id).copied().unwrap_or_default();
            let top = state.top(id);
            if told != top {
                return Err(format!(
                    "market {id}: ticker events say {told:?}, the state's top is {top:?}"
                ));
            }
        }
        let mut last: BTreeMap<u64, &OrderUpdate> = BTreeMap::new();
        for event in events {
            if let Event::Order(o) = event {
                last.insert(o.id, o);
            }
        }
        for (id, told) in last {
            if state.order(id).map(OrderUpdate::of).as_ref() != Some(told) {
                return Err(format!(
                    "order {id}: its last event {told:?} is not the order as it stands {:?}",
                    state.order(id)
                ));
            }
        }
        Ok(())
    }

    fn compare_one(&self, state: &State, id: MarketId) -> Result<(), String> {
        let market = state
            .market(id)
            .ok_or_else(|| format!("delta for unknown market {id}"))?;
        let view = state
            .query_orderbook(&market.ticker, None)
            .map_err(|r| r.to_string())?;
        let empty = MirrorBook::default();
        let mirror = self.books.get(&id).unwrap_or(&empty);
        let (up, down) = (mirror.levels(Outcome::Up), mirror.levels(Outcome::Down));
        if up != view.up || down != view.down {
            return Err(format!(
                "market {}: the book from deltas {:?} differs from the state's {:?}",
                market.ticker,
                checksum_text(&up, &down),
                checksum_text(&view.up, &view.down)
            ));
        }
        if view.checksum != mirror.checksum() {
            return Err(format!(
                "market {}: REST checksum {} differs from the SPEC checksum",
                market.ticker, view.checksum
            ));
        }
        if market.status != MarketStatus::Open && !mirror.is_empty() {
            return Err(format!(
                "market {} is {:?} but its book holds orders",
                market.ticker, market.status
            ));
        }
        Ok(())
    }
}

/// DESIGN §2's fee, written out here again: per fill,
/// `ceil_to_cent(rate * count * P * (1 - P))` with P in dollars, the taker
/// rate for the taker and the maker rate for the maker.
pub fn design_fee(rate_bps: u32, count: u32, up_price: PriceCents) -> Cents {
    let p = u128::from(up_price);
    // bps / 10^4 * count * (p / 100) * ((100 - p) / 100) dollars, in cents:
    // rate * count * p * (100 - p) / 10^6 cents, rounded up.
    let numerator = u128::from(rate_bps) * u128::from(count) * p * (100 - p);
    numerator.div_ceil(1_000_000) as Cents
}

/// The largest fee a one-contract fill of a buy at `price` can cost: the
/// fee at the worst price it can fill at (its limit or better), at the larger
/// of the two rates. Found by trying every price, not by formula.
pub fn design_max_fee_per_contract(price: PriceCents, taker_bps: u32, maker_bps: u32) -> Cents {
    (1..=price.min(99))
        .map(|q| design_fee(taker_bps.max(maker_bps), 1, q))
        .max()
        .unwrap_or(0)
}

/// A fill's cost and fee follow DESIGN §2 and its price is within the
/// order's limit.
fn check_fill(state: &State, fill: &Fill) -> Result<(), String> {
    let market = state
        .market(fill.market)
        .ok_or("a fill in an unknown market")?;
    let config = &state.series_of(market).config;
    let rate = if fill.is_taker {
        config.taker_fee_bps
    } else {
        config.maker_fee_bps
    };
    let own = Cents::from(fill.price);
    if fill.cost != Cents::from(fill.count) * own {
        return Err(format!(
            "fill {fill:?} costs {} not count x price",
            fill.cost
        ));
    }
    let expected = design_fee(rate, fill.count, fill.price);
    if fill.fee != expected {
        return Err(format!(
            "fill {fill:?} charged fee {} but DESIGN §2 says {expected}",
            fill.fee
        ));
    }
    let order = state
        .order(fill.order)
        .ok_or("a fill of an unknown order")?;
    let within = match order.action {
        Action::Buy => fill.price <= order.price,
        Action::Sell => fill.price >= order.price,
    };
    if !within || order.outcome != fill.outcome || order.action != fill.action {
        return Err(format!("fill {fill:?} does not fit its order {order:?}"));
    }
    Ok(())
}

/// After an order was accepted, every limit of SPEC's three layers holds.
/// Each was checked before the order with the order's full notional or
/// hold, and fills only lower what counts, so if the venue let the order
/// through, the limits hold afterwards too (even if an operator lowered one
/// earlier: then the order must have been refused).
fn check_limits_after(state: &State, key: KeyIdx, order: &Order) -> Result<(), String> {
    let key = state.key(key).ok_or("an accepted order with no key")?;
    let market = &state.markets[order.market as usize];
    let series = &state.series_of(market).config;
    // Rules 2: a sell counts what it filled at entry at the resting
    // buyers' prices, and the rest at its limit.
    let notional = match order.action {
        Action::Sell if state.rules >= 2 => {
            order.fill_cost as u64 + u64::from(order.count - order.filled) * u64::from(order.price)
        }
        _ => u64::from(order.count) * u64::from(order.price),
    };
    let limits = &key.limits;
    if limits.max_order_cents.is_some_and(|max| notional > max) {
        return Err(format!(
            "order {} of {notional} cents passed max order {limits:?}",
            order.id
        ));
    }
    if limits
        .max_daily_cents
        .is_some_and(|max| key.day_used_cents > max)
    {
        return Err(format!(
            "key {} used {} cents today, over {limits:?}",
            key.key_id, key.day_used_cents
        ));
    }
    // SPEC's key layer: "max resting orders per market".
    let resting_here = key.resting_in(order.market);
    if order.is_resting() && limits.max_open_orders.is_some_and(|max| resting_here > max) {
        return Err(format!(
            "key {} rests {resting_here} orders in market {}, over {limits:?}",
            key.key_id, market.ticker
        ));
    }
    if limits
        .series
        .as_ref()
        .is_some_and(|allowed| !allowed.contains(&series.ticker))
    {
        return Err(format!(
            "key {} traded series {} outside {limits:?}",
            key.key_id, series.ticker
        ));
    }
    if order.action == Action::Buy {
        let account = state
            .account(order.account)
            .ok_or("an order of no account")?;
        let cap = account
            .risk_cap
            .unwrap_or(state.config.account_risk_cap_cents);
        if account.at_risk() > cap {
            return Err(format!(
                "account {} has {} cents at risk, over its cap {cap}",
                account.id,
                account.at_risk()
            ));
        }
        let exposure = market.collateral() + market.resting_buy_notional;
        if exposure > series.market_cap_cents {
            return Err(format!(
                "market {} holds {exposure} cents, over its cap {}",
                market.ticker, series.market_cap_cents
            ));
        }
    }
    Ok(())
}

/// A cheap summary of everything a command can change, to check that a
/// refused command changed nothing (engine.rs promises that checks run
/// before any change). Only the clock and the last seq may move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    counts: [usize; 8],
    totals: [i64; 4],
    ledger: (i64, i64, i64, i64),
    event_counters: (u64, u64),
    paused: bool,
}

impl Digest {
    /// Summarises a state in O(accounts + keys).
    pub fn of(state: &State) -> Self {
        let positions: usize = state.accounts.iter().map(|a| a.positions.len()).sum();
        let resting: u32 = state.accounts.iter().map(|a| a.resting_orders()).sum();
        let flags = state
            .accounts
            .iter()
            .map(|a| {
                i64::from(a.terms_accepted)
                    + 2 * i64::from(a.trading_allowed)
                    + 4 * i64::from(a.suspended)
            })
            .sum();
        let revoked = state
            .keys
            .iter()
            .filter(|k| k.revoked_ts_ms.is_some())
            .count();
        Self {
            counts: [
                state.accounts.len(),
                state.keys.len(),
                state.markets.len(),
                state.orders.len(),
                state.fills.len(),
                state.client_orders.len() as usize,
                positions,
                revoked,
            ],
            totals: [
                state.accounts.iter().map(|a| a.cash).sum(),
                state.accounts.iter().map(|a| a.held).sum(),
                i64::from(resting),
                flags,
            ],
            ledger: (
                state.ledger.deposits,
                state.ledger.withdrawals,
                state.ledger.fees,
                state.ledger.payouts,
            ),
            event_counters: (state.trades_total, state.events_total),
            paused: state.pause.is_some(),
        }
    }
}

/// Checks one reply against its command and the state it left: each
/// command answers only with the refusal codes SPEC lists for it, a refused
/// order trades nothing, and an accepted order is the one that was asked for.
pub fn check_reply(
    state: &State,
    command: &Command,
    reply: &Reply,
    events: &[Event],
) -> Result<(), String> {
    use ErrorCode::*;
    let traded = events
        .iter()
        .any(|e| matches!(e, Event::Fill(_) | Event::Trade(_)));
    let account_of = |key: KeyIdx| state.key(key).map(|k| k.account);
    match (command, reply) {
        (Command::PlaceOrder { key, order: new }, Reply::Order { order, created }) => {
            let same = order.client_order_id == new.client_order_id
                && order.market == new.market
                && order.outcome == new.outcome
                && order.action == new.action
                && order.price == new.price
                && order.count == new.count
                && order.time_in_force == new.time_in_force
                && order.post_only == new.post_only;
            if !same {
                return Err(format!(
                    "the reply {order:?} is not the order asked for {new:?}"
                ));
            }
            if account_of(*key) != Some(order.account) {
                return Err(format!("order {} is not on the key's account", order.id));
            }
            if !*created {
                // An idempotent retry places nothing and so trades nothing.
                return if traded {
                    Err("an idempotent retry traded".into())
                } else {
                    Ok(())
                };
            }
            let config = &state
                .series_of(&state.markets[order.market as usize])
                .config;
            let max_fee = match order.action {
                Action::Buy => design_max_fee_per_contract(
                    order.price,
                    config.taker_fee_bps,
                    config.maker_fee_bps,
                ),
                Action::Sell => 0,
            };
            if order.max_fee_per_contract != max_fee {
                return Err(format!(
                    "order {} holds a max fee of {} a contract, DESIGN §2 says {max_fee}",
                    order.id, order.max_fee_per_contract
                ));
            }
            if state.order(order.id) != Some(order) {
                return Err(format!(
                    "the reply {order:?} is not the order as the state holds it"
                ));
            }
            check_limits_after(state, *key, order)?;
            if order.status == OrderStatus::Resting
                && order.time_in_force == TimeInForce::ImmediateOrCancel
            {
                return Err(format!("immediate_or_cancel order {} rests", order.id));
            }
            let post_only_gtc =
                order.post_only && order.time_in_force == TimeInForce::GoodTillCanceled;
            if post_only_gtc && order.filled > 0 {
                return Err(format!("post_only order {} traded at once", order.id));
            }
            let last = events.iter().rev().find_map(|e| match e {
                Event::Order(o) if o.id == order.id => Some(o),
                _ => None,
            });
            if last != Some(&OrderUpdate::of(order)) {
                return Err(format!(
                    "the last order event of {} is {last:?}, not the reply",
                    order.id
                ));
            }
            Ok(())
        }
        (Command::PlaceOrder { .. }, Reply::Rejected(reject)) => {
            let allowed = [
                BadRequest,
                InsufficientBalance,
                LimitExceeded,
                MarketNotOpen,
                PostOnlyCross,
                SelfTrade,
                Unauthorized,
                Forbidden,
                IdempotencyConflict,
                TradingPaused,
            ];
            if !allowed.contains(&reject.code) {
                return Err(format!("an order refused with {reject}"));
            }
            if traded {
                return Err(format!("a refused order ({reject}) traded"));
            }
            Ok(())
        }
        (Command::CancelOrder { key, order_id }, Reply::Order { order, .. }) => {
            if order.id != *order_id
                || account_of(*key) != Some(order.account)
                || order.is_resting()
            {
                return Err(format!("cancel of {order_id} answered {order:?}"));
            }
            Ok(())
        }
        (
            Command::CancelOrder { key, order_id },
            Reply::OrderInHistory {
                order_id: id,
                account,
            },
        ) => {
            if id != order_id
                || account_of(*key) != Some(*account)
                || !state.orders.evicted(*order_id)
            {
                return Err(format!(
                    "cancel of {order_id} answered from the history as {id} of account {account}"
                ));
            }
            Ok(())
        }
        (Command::CancelOrder { .. }, Reply::Rejected(reject)) => {
            if ![Unauthorized, Forbidden, OrderNotFound].contains(&reject.code) {
                return Err(format!("a cancel refused with {reject}"));
            }
            Ok(())
        }
        (Command::CancelAll { key, .. }, Reply::Canceled { order_ids }) => {
            if !order_ids.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!(
                    "cancel-all ids are not oldest first: {order_ids:?}"
                ));
            }
            for id in order_ids {
                let order = state
                    .order(*id)
                    .ok_or_else(|| format!("cancel-all named unknown order {id}"))?;
                if order.status != OrderStatus::Canceled || Some(order.account) != account_of(*key)
                {
                    return Err(format!("cancel-all named {order:?}"));
                }
            }
            Ok(())
        }
        (Command::CancelAll { .. }, Reply::Rejected(reject)) => {
            if ![Unauthorized, Forbidden, BadRequest].contains(&reject.code) {
                return Err(format!("a cancel-all refused with {reject}"));
            }
            Ok(())
        }
        (
            Command::PlaceOrder { .. } | Command::CancelOrder { .. } | Command::CancelAll { .. },
            other,
        ) => Err(format!("unexpected reply {other:?}")),
        (Command::Tick, Reply::Ok) => Ok(()),
        (Command::Tick, other) => Err(format!("a tick answered {other:?}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_text_follows_the_spec() {
        assert_eq!(checksum_text(&[], &[]), "up:|down:");
        assert_eq!(
            checksum_text(&[(55, 12), (54, 5)], &[(40, 3)]),
            "up:0.55:12,0.54:5|down:0.40:3"
        );
        assert_eq!(checksum_text(&[(5, 1)], &[]), "up:0.05:1|down:");
        let many: Vec<(PriceCents, u64)> = (1..=12).rev().map(|p| (p, 1)).collect();
        assert_eq!(
            checksum_text(&[], &many),
            "up:|down:0.12:1,0.11:1,0.10:1,0.09:1,0.08:1,0.07:1,0.06:1,0.05:1,0.04:1,0.03:1"
        );
        // The zlib/PNG CRC-32 of the empty book's string, computed elsewhere.
        assert_eq!(spec_checksum(&[], &[]), crc32fast::hash(b"up:|down:"));
        assert_eq!(crc32fast::hash(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn the_mirror_removes_empty_levels_and_refuses_negative_ones() {
        let mut book = MirrorBook::default();
        book.apply(Outcome::Up, 40, 5).unwrap();
        book.apply(Outcome::Up, 41, 2).unwrap();
        assert_eq!(book.levels(Outcome::Up), vec![(41, 2), (40, 5)]);
        book.apply(Outcome::Up, 40, -5).unwrap();
        assert_eq!(book.levels(Outcome::Up), vec![(41, 2)]);
        assert!(book.apply(Outcome::Up, 41, -3).is_err());
        assert!(book.apply(Outcome::Down, 41, 0).is_err());
        assert!(book.apply(Outcome::Down, 100, 1).is_err());
    }
}
