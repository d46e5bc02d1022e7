//! The venue's whole state. Plain data: every map is a `BTreeMap` or a `Vec`
//! so that iteration order never depends on a hash seed, and every field is
//! archived by rkyv for snapshots.

use std::collections::{BTreeMap, VecDeque};

use rkyv::{Archive, Deserialize, Serialize};

use crate::book::{Book, NIL};
use crate::command::{SeriesConfig, VenueConfig};
use crate::table::Table;
use crate::types::{
    AccountId, Action, Cents, ClientOrderId, Environment, FillId, KeyIdx, KeyLimits, MarketId,
    MarketStatus, OrderId, OrderStatus, Outcome, PriceCents, Scopes, SeriesId, TimeInForce, TsMs,
};

/// A holding of one outcome in one market.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Position {
    /// Contracts held.
    pub count: u64,
    /// What was paid for them (fees excluded), reduced pro rata on sells.
    pub cost: Cents,
    /// Contracts promised to resting sells.
    pub committed: u64,
}

/// Key of an account's position map: market and outcome in one integer.
pub const fn position_key(market: MarketId, outcome: Outcome) -> u64 {
    ((market as u64) << 1) | outcome.index() as u64
}

/// Splits a position key.
pub const fn position_parts(key: u64) -> (MarketId, Outcome) {
    let outcome = if key & 1 == 0 {
        Outcome::Up
    } else {
        Outcome::Down
    };
    ((key >> 1) as MarketId, outcome)
}

/// One account.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Account {
    pub id: AccountId,
    /// All cash, including what resting buys hold.
    pub cash: Cents,
    /// Cash held by resting buys; `buying_power = cash - held`.
    pub held: Cents,
    /// Sum of the cost of positions in unsettled markets.
    pub position_cost: Cents,
    pub terms_accepted: bool,
    pub trading_allowed: bool,
    pub suspended: bool,
    /// Own cap on the amount at risk; `None` uses the venue default.
    pub risk_cap: Option<Cents>,
    /// Positions by `position_key`.
    pub positions: BTreeMap<u64, Position>,
    /// The account's orders in the live state, oldest first.
    pub orders: VecDeque<OrderId>,
    /// The account's fills in the live state, oldest first.
    pub fills: VecDeque<FillId>,
    /// Newest of the account's fills that left the live state (0: none);
    /// the history store chains each evicted fill to the one before it.
    pub last_evicted_fill: FillId,
    /// The account's orders resting now, in no order (each knows its place
    /// here: `Order::account_slot`): cancel-all takes them from here, not
    /// from a walk over the account's orders of the last day (one old
    /// resting order would make that walk the whole day long).
    pub resting: Vec<OrderId>,
    pub created_ts_ms: TsMs,
}

impl Account {
    /// Orders of the account resting now.
    pub fn resting_orders(&self) -> u32 {
        self.resting.len() as u32
    }
    /// What the account can spend on new orders now.
    pub fn buying_power(&self) -> Cents {
        self.cash - self.held
    }
    /// Cost of positions in open windows plus cash held by resting buys.
    pub fn at_risk(&self) -> Cents {
        self.position_cost + self.held
    }
}

/// A key as the registry holds it. The secret is never here.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub idx: KeyIdx,
    pub key_id: String,
    pub fingerprint: [u8; 32],
    pub account: AccountId,
    pub name: String,
    pub environment: Environment,
    pub scopes: Scopes,
    /// Effective limits, with the spec's trade-key defaults filled in.
    pub limits: KeyLimits,
    pub ip_allowlist: Vec<String>,
    pub created_ts_ms: TsMs,
    pub expires_ts_ms: Option<TsMs>,
    pub revoked_ts_ms: Option<TsMs>,
    /// UTC day (`ts / DAY_MS`) that `day_used_cents` counts.
    pub day: u64,
    /// Dollars of orders placed today (`engine.rs`, `order_dollars`), less
    /// cancelled remainders at their limit price.
    pub day_used_cents: u64,
    /// Orders of this key resting now, in all markets.
    pub resting_orders: u32,
    /// Orders of this key resting now, per market (entries at zero removed).
    pub resting_by_market: BTreeMap<MarketId, u32>,
}

impl Key {
    /// Orders of this key resting in one market.
    pub fn resting_in(&self, market: MarketId) -> u32 {
        self.resting_by_market.get(&market).copied().unwrap_or(0)
    }

    /// True while neither revoked nor expired.
    pub fn is_active(&self, now: TsMs) -> bool {
        self.revoked_ts_ms.is_none() && self.expires_ts_ms.is_none_or(|t| now < t)
    }
}

/// A series and where its listing stands.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Series {
    pub id: SeriesId,
    pub config: SeriesConfig,
    /// Open time of the next window to list.
    pub next_open_ts_ms: TsMs,
    /// Its markets, oldest first.
    pub markets: Vec<MarketId>,
}

/// The history tail: how long what has ended stays in the live state.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Retention {
    /// Ended orders, fills and settled markets older than this leave the
    /// live state for the history store. At least 24 hours in production
    /// (the order list shows the last 24 hours from the live state).
    pub tail_ms: u64,
    /// Journaled time at or after which eviction next runs.
    pub next_run_ts_ms: TsMs,
    /// Settled markets whose book and trades are still live, in the order
    /// they settled.
    pub settled: VecDeque<MarketId>,
}

/// The default history tail: the spec's 24-hour order list.
pub const HISTORY_TAIL_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;

impl Default for Retention {
    fn default() -> Self {
        Self {
            tail_ms: HISTORY_TAIL_MS_DEFAULT,
            next_run_ts_ms: 0,
            settled: VecDeque::new(),
        }
    }
}

/// One public trade.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Trade {
    pub trade_id: u64,
    pub market: MarketId,
    /// Price on the Up scale.
    pub up_price: PriceCents,
    pub count: u32,
    pub taker_outcome: Outcome,
    pub taker_action: Action,
    pub ts_ms: TsMs,
}

/// One window.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Market {
    pub id: MarketId,
    pub series: SeriesId,
    pub ticker: String,
    pub open_ts_ms: TsMs,
    pub close_ts_ms: TsMs,
    pub status: MarketStatus,
    /// Underlying price times 10^8 that the window opened on.
    pub price_to_beat_e8: Option<i64>,
    pub settlement_price_e8: Option<i64>,
    pub result: Option<Outcome>,
    pub settled_ts_ms: Option<TsMs>,
    pub book: Book,
    /// Last trade price on the Up scale.
    pub last_price: Option<PriceCents>,
    /// Pairs minted and not burned: each holds 1.00 of collateral.
    pub pairs: u64,
    /// Contracts of each outcome held by accounts.
    pub open_interest: [u64; 2],
    /// Notional (count x limit) of buys resting in this market.
    pub resting_buy_notional: Cents,
    /// Public trades, oldest first, until the market's history leaves the
    /// live state (then empty, and `history` is set).
    pub trades: Vec<Trade>,
    /// Settled long enough ago that its book is released and its trades
    /// are in the history store.
    pub history: bool,
}

impl Market {
    /// Collateral the market holds: 1.00 per minted pair.
    pub fn collateral(&self) -> Cents {
        self.pairs as Cents * crate::limits::PAYOUT_CENTS
    }
}

/// One order. `Hash` leaves out `account_slot` (see the impl).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Order {
    pub id: OrderId,
    pub account: AccountId,
    pub key: KeyIdx,
    pub market: MarketId,
    pub outcome: Outcome,
    pub action: Action,
    /// Limit on the outcome's own scale.
    pub price: PriceCents,
    pub time_in_force: TimeInForce,
    pub post_only: bool,
    pub status: OrderStatus,
    pub count: u32,
    pub filled: u32,
    /// Sum of fill count times fill price on the outcome's scale.
    pub fill_cost: Cents,
    pub fees: Cents,
    pub created_ts_ms: TsMs,
    pub updated_ts_ms: TsMs,
    pub client_order_id: ClientOrderId,
    /// Cash this order holds now (buys only).
    pub hold: Cents,
    /// Largest fee a one-contract fill of this order can cost.
    pub max_fee_per_contract: Cents,
    /// Node in the book while resting, else `NIL`.
    pub node: u32,
    /// Place in its account's `resting` list while resting.
    pub account_slot: u32,
}

/// Every field but `account_slot`, in the order of the struct, so that an
/// evicted order's event (`Event::Evicted`) hashes as it did before the
/// field existed: event hashes of a journal stay the same across builds.
/// The slot is a place in `Account::resting`, which the state hash covers.
impl std::hash::Hash for Order {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let Order {
            id,
            account,
            key,
            market,
            outcome,
            action,
            price,
            time_in_force,
            post_only,
            status,
            count,
            filled,
            fill_cost,
            fees,
            created_ts_ms,
            updated_ts_ms,
            client_order_id,
            hold,
            max_fee_per_contract,
            node,
            account_slot: _,
        } = self;
        id.hash(h);
        account.hash(h);
        key.hash(h);
        market.hash(h);
        outcome.hash(h);
        action.hash(h);
        price.hash(h);
        time_in_force.hash(h);
        post_only.hash(h);
        status.hash(h);
        count.hash(h);
        filled.hash(h);
        fill_cost.hash(h);
        fees.hash(h);
        created_ts_ms.hash(h);
        updated_ts_ms.hash(h);
        client_order_id.hash(h);
        hold.hash(h);
        max_fee_per_contract.hash(h);
        node.hash(h);
    }
}

impl Order {
    /// Contracts not filled.
    pub fn remaining(&self) -> u32 {
        self.count - self.filled
    }
    /// True while on the book.
    pub fn is_resting(&self) -> bool {
        self.status == OrderStatus::Resting
    }
    /// The hold formula of DESIGN §2 for what remains of a buy.
    pub fn hold_formula(&self) -> Cents {
        match (self.action, self.status) {
            (Action::Buy, OrderStatus::Resting) => {
                Cents::from(self.remaining())
                    * (Cents::from(self.price) + self.max_fee_per_contract)
            }
            _ => 0,
        }
    }
    /// The book side it rests on and its price on that side's scale.
    pub fn book_place(&self) -> (Outcome, PriceCents) {
        let side = self.action.book_side(self.outcome);
        let price = match self.action {
            Action::Buy => self.price,
            Action::Sell => crate::types::flip(self.price),
        };
        (side, price)
    }
    /// Whether the node field is consistent with the status.
    pub fn node_consistent(&self) -> bool {
        self.is_resting() == (self.node != NIL)
    }
}

/// One of an account's trades.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fill {
    pub id: FillId,
    pub order: OrderId,
    pub account: AccountId,
    pub market: MarketId,
    pub outcome: Outcome,
    pub action: Action,
    /// Price on the outcome's own scale.
    pub price: PriceCents,
    pub count: u32,
    /// count x price, fees excluded.
    pub cost: Cents,
    pub fee: Cents,
    pub is_taker: bool,
    pub trade_id: u64,
    pub ts_ms: TsMs,
}

/// Recent prints of one underlying, in arrival order.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct SymbolPrices {
    /// (t_ms, price_e8), t_ms never decreasing; bounded.
    pub prints: Vec<(TsMs, i64)>,
}

impl SymbolPrices {
    /// Last print with `t_ms <= at`.
    pub fn last_at_or_before(&self, at: TsMs) -> Option<i64> {
        let end = self.prints.partition_point(|&(t, _)| t <= at);
        end.checked_sub(1).map(|i| self.prints[i].1)
    }
    /// First print with `t_ms >= at`.
    pub fn first_at_or_after(&self, at: TsMs) -> Option<i64> {
        let start = self.prints.partition_point(|&(t, _)| t < at);
        self.prints.get(start).map(|&(_, p)| p)
    }
    /// First print with `t_ms > at`.
    pub fn first_after(&self, at: TsMs) -> Option<i64> {
        let start = self.prints.partition_point(|&(t, _)| t <= at);
        self.prints.get(start).map(|&(_, p)| p)
    }
    /// The newest print.
    pub fn latest(&self) -> Option<(TsMs, i64)> {
        self.prints.last().copied()
    }
}

/// Platform-wide pause.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pause {
    pub since_ts_ms: TsMs,
    pub until_ts_ms: Option<TsMs>,
}

/// Money that entered and left the venue, for the conservation check.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ledger {
    pub deposits: Cents,
    pub withdrawals: Cents,
    pub fees: Cents,
    pub payouts: Cents,
}

/// Everything.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct State {
    pub config: VenueConfig,
    /// Seq of the last command applied (0 before any).
    pub last_seq: u64,
    /// Time of the last command applied; never goes backwards.
    pub now_ms: TsMs,
    pub pause: Option<Pause>,
    /// Accounts; index = id - 1.
    pub accounts: Vec<Account>,
    /// Keys; index = idx.
    pub keys: Vec<Key>,
    pub key_ids: BTreeMap<String, KeyIdx>,
    pub series: Vec<Series>,
    pub series_ids: BTreeMap<String, SeriesId>,
    /// Every market ever listed; index = id. A settled market's book and
    /// trades leave the live state after the history tail (the record
    /// itself, about 200 bytes, stays: a ticker names its window for ever).
    pub markets: Vec<Market>,
    pub market_ids: BTreeMap<String, MarketId>,
    /// Markets not settled yet, oldest first.
    pub active_markets: Vec<MarketId>,
    /// The earliest time at which a listing, opening or closing is due.
    pub next_due_ts_ms: TsMs,
    /// Orders in the live state (ids from 1); ended ones leave after the
    /// history tail.
    pub orders: Table<Order, 1>,
    /// Fills in the live state (ids from 1); they leave after the tail.
    pub fills: Table<Fill, 1>,
    /// How long ended orders, fills and settled markets stay in the live
    /// state, and when eviction next runs.
    pub retention: Retention,
    pub trades_total: u64,
    /// Idempotency: (account, client_order_id) -> order.
    pub client_orders: crate::index::ClientOrderIndex,
    pub prices: BTreeMap<String, SymbolPrices>,
    pub ledger: Ledger,
    /// Running hash over every event emitted so far.
    pub event_hash: u64,
    /// Events emitted so far.
    pub events_total: u64,
    /// The version of the business rules in force (`limits::RULES_CURRENT`,
    /// set by `Command::SetRules`); 0 for journals from before versions.
    pub rules: u32,
}

impl State {
    /// A venue with the given configuration and nothing else.
    pub fn new(config: VenueConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }
    pub fn account(&self, id: AccountId) -> Option<&Account> {
        id.checked_sub(1)
            .and_then(|i| self.accounts.get(i as usize))
    }
    /// The cap on the account's amount at risk: its own, or the venue's.
    pub fn risk_cap(&self, account: &Account) -> Cents {
        account
            .risk_cap
            .unwrap_or(self.config.account_risk_cap_cents)
    }
    pub(crate) fn account_mut(&mut self, id: AccountId) -> Option<&mut Account> {
        id.checked_sub(1)
            .and_then(|i| self.accounts.get_mut(i as usize))
    }
    pub fn order(&self, id: OrderId) -> Option<&Order> {
        self.orders.get(id)
    }
    /// The account's order in the live state with this client_order_id,
    /// through the idempotency index (its hashes collide: the account and
    /// the id are compared).
    pub fn order_by_client_id(&self, account: AccountId, id: &ClientOrderId) -> Option<OrderId> {
        self.order_by_client_hash(account, id, id.index_hash(account))
    }
    /// As `order_by_client_id`, with `id.index_hash(account)` already known.
    pub(crate) fn order_by_client_hash(
        &self,
        account: AccountId,
        id: &ClientOrderId,
        hash: u64,
    ) -> Option<OrderId> {
        self.client_orders.get(hash, |candidate| {
            self.orders
                .get(candidate)
                .is_some_and(|o| o.account == account && o.client_order_id == *id)
        })
    }
    pub fn fill(&self, id: FillId) -> Option<&Fill> {
        self.fills.get(id)
    }
    pub fn market(&self, id: MarketId) -> Option<&Market> {
        self.markets.get(id as usize)
    }
    pub fn market_by_ticker(&self, ticker: &str) -> Option<&Market> {
        self.market_ids.get(ticker).and_then(|&id| self.market(id))
    }
    pub fn key(&self, idx: KeyIdx) -> Option<&Key> {
        self.keys.get(idx as usize)
    }
    pub fn key_by_id(&self, key_id: &str) -> Option<&Key> {
        self.key_ids.get(key_id).and_then(|&idx| self.key(idx))
    }
    pub fn series_by_ticker(&self, ticker: &str) -> Option<&Series> {
        self.series_ids
            .get(ticker)
            .and_then(|&id| self.series.get(id as usize))
    }
    /// The series a market belongs to.
    pub fn series_of(&self, market: &Market) -> &Series {
        &self.series[market.series as usize]
    }
    /// Active keys of an account.
    pub fn active_keys(&self, account: AccountId) -> usize {
        self.keys
            .iter()
            .filter(|k| k.account == account && k.is_active(self.now_ms))
            .count()
    }
    /// True while trading is paused at `now_ms`.
    pub fn is_paused(&self) -> bool {
        self.pause
            .is_some_and(|p| p.until_ts_ms.is_none_or(|until| self.now_ms < until))
    }
}

#[cfg(test)]
mod order_hash_tests {
    use super::*;
    use crate::hash::stable_hash;

    /// An order's place in its account's resting list is not part of its
    /// hash (an evicted order's event hashes as in builds before the field),
    /// and every other field is.
    #[test]
    fn the_account_slot_is_left_out_of_an_orders_hash() {
        let order = Order {
            id: 9,
            account: 2,
            key: 1,
            market: 3,
            outcome: Outcome::Up,
            action: Action::Buy,
            price: 40,
            time_in_force: crate::types::TimeInForce::GoodTillCanceled,
            post_only: false,
            status: OrderStatus::Resting,
            count: 5,
            filled: 1,
            fill_cost: 40,
            fees: 1,
            created_ts_ms: 7,
            updated_ts_ms: 8,
            client_order_id: ClientOrderId::new("c-1").unwrap(),
            hold: 160,
            max_fee_per_contract: 2,
            node: 4,
            account_slot: 0,
        };
        let moved = Order {
            account_slot: 6,
            ..order
        };
        assert_eq!(stable_hash(&order), stable_hash(&moved));
        let other = Order { filled: 2, ..order };
        assert_ne!(stable_hash(&order), stable_hash(&other));
    }
}
