//! The sequencer's output besides replies: everything that changed, in the
//! order it changed. The publisher fans these out; replay compares them.

use std::hash::{Hash, Hasher};

use crate::book::NIL;
use crate::hash::StableHasher;
use crate::state::{Fill, Key, Order, State, Trade};
use crate::types::{AccountId, Cents, MarketId, OrderId, OrderStatus, Outcome, PriceCents, TsMs};

/// An order after a change: the fields that change over its life, and
/// what routes it. The rest of the order (outcome, action, price, count,
/// time in force, client_order_id, times) is fixed when it is placed, so
/// the event does not carry it: `OrderUpdate::order` rebuilds the whole
/// record as it stood from the state. (The whole 152-byte `Order` in every
/// order event was a fifth of the sequencer's time in copies.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderUpdate {
    pub id: OrderId,
    pub account: AccountId,
    pub market: MarketId,
    pub status: OrderStatus,
    pub filled: u32,
    /// Sum of fill count times fill price on the outcome's scale.
    pub fill_cost: Cents,
    pub fees: Cents,
    /// Cash the order holds now (buys only).
    pub hold: Cents,
    pub updated_ts_ms: TsMs,
}

impl OrderUpdate {
    /// The changing part of an order as it stands.
    pub fn of(order: &Order) -> Self {
        Self {
            id: order.id,
            account: order.account,
            market: order.market,
            status: order.status,
            filled: order.filled,
            fill_cost: order.fill_cost,
            fees: order.fees,
            hold: order.hold,
            updated_ts_ms: order.updated_ts_ms,
        }
    }

    /// The whole order as it stood at this event: its fixed fields from
    /// `now` (the same order at any later time), its changing ones from the
    /// event. `node` is the order's node while it rests, else `NIL`.
    pub fn onto(&self, now: &Order) -> Order {
        debug_assert_eq!(now.id, self.id);
        Order {
            status: self.status,
            filled: self.filled,
            fill_cost: self.fill_cost,
            fees: self.fees,
            hold: self.hold,
            updated_ts_ms: self.updated_ts_ms,
            node: if self.status == OrderStatus::Resting {
                now.node
            } else {
                NIL
            },
            ..*now
        }
    }

    /// The whole order as it stood at this event, from a state at or after it.
    pub fn order(&self, state: &State) -> Option<Order> {
        state.order(self.id).map(|now| self.onto(now))
    }

    /// As `order`, for a sink that sees a batch's events with the state
    /// after the batch: an order evicted later in the same batch is
    /// rebuilt from its evicted record.
    pub fn order_in(&self, state: &State, batch: &[Event]) -> Option<Order> {
        self.order(state).or_else(|| {
            batch.iter().find_map(|e| match e {
                Event::Evicted(ev) => match &**ev {
                    crate::retention::Evicted::Order(o) if o.id == self.id => Some(self.onto(o)),
                    _ => None,
                },
                _ => None,
            })
        })
    }
}

/// Top of book on the Up scale and the last trade price.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Top {
    pub up_bid: Option<PriceCents>,
    pub up_bid_size: u64,
    pub up_ask: Option<PriceCents>,
    pub up_ask_size: u64,
    pub last_price: Option<PriceCents>,
}

/// A window's lifecycle step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Open {
        price_to_beat_e8: Option<i64>,
    },
    Closed,
    Settled {
        result: Option<Outcome>,
        settlement_price_e8: Option<i64>,
    },
}

/// One change.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// An order was created or changed; what changed (see `OrderUpdate`).
    Order(OrderUpdate),
    /// An account traded.
    Fill(Fill),
    /// The contracts at `price` on `outcome`'s bid side changed by `delta`;
    /// `checksum` is the book's after the change.
    BookDelta {
        market: MarketId,
        outcome: Outcome,
        price: PriceCents,
        delta: i64,
        checksum: u32,
    },
    /// Top of book or last price changed.
    Ticker { market: MarketId, top: Top },
    /// A public trade.
    Trade(Trade),
    /// A new window was listed (status scheduled).
    MarketListed {
        market: MarketId,
        ticker: String,
        series: String,
    },
    /// A window opened, closed or settled.
    Lifecycle {
        market: MarketId,
        phase: Phase,
        ts_ms: TsMs,
    },
    /// An underlying print.
    Price {
        symbol: String,
        price_e8: i64,
        t_ms: TsMs,
    },
    /// A position changed; count 0 means it is gone.
    Position {
        account: AccountId,
        market: MarketId,
        outcome: Outcome,
        count: u64,
        cost: Cents,
    },
    /// An account's cash or holds changed.
    Balance {
        account: AccountId,
        cash: Cents,
        held: Cents,
    },
    /// A key was issued or changed (the gateway's authentication cache).
    Key(Box<Key>),
    /// An account's flags changed.
    Account {
        account: AccountId,
        terms_accepted: bool,
        trading_allowed: bool,
        suspended: bool,
    },
    /// Trading was paused or resumed.
    Trading {
        paused: bool,
        until_ts_ms: Option<TsMs>,
    },
    /// Records left the live state for the history store (never published;
    /// the history writer stores them).
    Evicted(Box<crate::retention::Evicted>),
}

impl Event {
    /// Feeds one event to the running event hash. The frequent kinds pack
    /// their fields into as few words as hold them (a kind tag first, small
    /// fields side by side), fold those in registers and feed the hash one
    /// word; the rare kinds hash every field through `Hash`. Replay
    /// compares this hash with the live run's.
    ///
    /// Inlined into the caller's loop: the frequent kinds' word is a few
    /// instructions, and a call per event (its prologue, epilogue and the
    /// hasher passed through memory) cost as much again.
    #[inline(always)]
    pub fn digest(&self, h: &mut StableHasher) {
        match self.word() {
            Some(word) => h.write_u64(word),
            None => self.digest_rare(h),
        }
    }

    /// The rare kinds: a marker, then every field through `Hash`.
    #[cold]
    #[inline(never)]
    fn digest_rare(&self, h: &mut StableHasher) {
        h.write_u64(0xff);
        self.hash(h);
    }

    /// The one word a frequent kind folds into; `None` for the rare kinds.
    #[inline(always)]
    fn word(&self) -> Option<u64> {
        let opt = |p: Option<PriceCents>| p.map_or(0, |p| u64::from(p) + 1);
        let pair = |a: u32, b: u32| u64::from(a) | (u64::from(b) << 32);
        Some(match self {
            Self::Order(o) => fold(&[
                1 | (o.status as u64) << 8 | u64::from(o.filled) << 32,
                o.id,
                pair(o.account, o.market),
                o.fill_cost as u64,
                o.fees as u64,
                o.hold as u64,
                o.updated_ts_ms,
            ]),
            Self::Fill(f) => fold(&[
                2 | (f.outcome as u64) << 8
                    | (f.action as u64) << 16
                    | u64::from(f.price) << 24
                    | u64::from(f.is_taker) << 32,
                f.id,
                f.order,
                pair(f.account, f.market),
                u64::from(f.count),
                f.cost as u64,
                f.fee as u64,
                f.trade_id,
                f.ts_ms,
            ]),
            Self::BookDelta {
                market,
                outcome,
                price,
                delta,
                checksum,
            } => fold(&[
                3 | (*outcome as u64) << 8 | u64::from(*price) << 16 | u64::from(*checksum) << 32,
                u64::from(*market),
                *delta as u64,
            ]),
            Self::Ticker { market, top } => fold(&[
                4 | opt(top.up_bid) << 8
                    | opt(top.up_ask) << 16
                    | opt(top.last_price) << 24
                    | u64::from(*market) << 32,
                top.up_bid_size,
                top.up_ask_size,
            ]),
            Self::Trade(t) => fold(&[
                5 | (t.taker_outcome as u64) << 8
                    | (t.taker_action as u64) << 16
                    | u64::from(t.up_price) << 24
                    | u64::from(t.market) << 32,
                t.trade_id,
                u64::from(t.count),
                t.ts_ms,
            ]),
            Self::Position {
                account,
                market,
                outcome,
                count,
                cost,
            } => fold(&[
                6 | (*outcome as u64) << 8 | u64::from(*account) << 32,
                u64::from(*market),
                *count,
                *cost as u64,
            ]),
            Self::Balance {
                account,
                cash,
                held,
            } => fold(&[7 | u64::from(*account) << 32, *cash as u64, *held as u64]),
            _ => return None,
        })
    }

    /// The market an event concerns, if any.
    pub fn market(&self) -> Option<MarketId> {
        match self {
            Self::Order(o) => Some(o.market),
            Self::Fill(f) => Some(f.market),
            Self::BookDelta { market, .. }
            | Self::Ticker { market, .. }
            | Self::MarketListed { market, .. }
            | Self::Lifecycle { market, .. }
            | Self::Position { market, .. } => Some(*market),
            Self::Trade(t) => Some(t.market),
            _ => None,
        }
    }
    /// The account an event is private to, if any.
    pub fn account(&self) -> Option<AccountId> {
        match self {
            Self::Order(o) => Some(o.account),
            Self::Fill(f) => Some(f.account),
            Self::Position { account, .. }
            | Self::Balance { account, .. }
            | Self::Account { account, .. } => Some(*account),
            Self::Key(k) => Some(k.account),
            _ => None,
        }
    }
}

/// Folds an event's words into one: multiply-rotate, in registers.
#[inline(always)]
fn fold(words: &[u64]) -> u64 {
    let mut acc = 0x243f_6a88_85a3_08d3u64;
    for &w in words {
        acc = (acc ^ w)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(31);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Action;

    /// One event of every kind the running hash packs, and two it hashes
    /// through `Hash` (one holding a string).
    fn sample() -> Vec<Event> {
        vec![
            Event::Order(OrderUpdate {
                id: 7,
                account: 3,
                market: 2,
                status: OrderStatus::Resting,
                filled: 4,
                fill_cost: 180,
                fees: 2,
                hold: 95,
                updated_ts_ms: 1_700_000_000_123,
            }),
            Event::Fill(Fill {
                id: 11,
                order: 7,
                account: 3,
                market: 2,
                outcome: Outcome::Down,
                action: Action::Sell,
                price: 45,
                count: 4,
                cost: 180,
                fee: 2,
                is_taker: true,
                trade_id: 5,
                ts_ms: 1_700_000_000_123,
            }),
            Event::BookDelta {
                market: 2,
                outcome: Outcome::Up,
                price: 55,
                delta: -4,
                checksum: 0xdead_beef,
            },
            Event::Ticker {
                market: 2,
                top: Top {
                    up_bid: Some(54),
                    up_bid_size: 10,
                    up_ask: None,
                    up_ask_size: 0,
                    last_price: Some(55),
                },
            },
            Event::Trade(Trade {
                trade_id: 5,
                market: 2,
                up_price: 55,
                count: 4,
                taker_outcome: Outcome::Down,
                taker_action: Action::Sell,
                ts_ms: 1_700_000_000_123,
            }),
            Event::Position {
                account: 3,
                market: 2,
                outcome: Outcome::Down,
                count: 0,
                cost: 0,
            },
            Event::Balance {
                account: 3,
                cash: 10_000,
                held: 95,
            },
            Event::Trading {
                paused: true,
                until_ts_ms: Some(1_700_000_060_000),
            },
            Event::Price {
                symbol: "X:BTCUSD".to_string(),
                price_e8: 9_512_345_000_000,
                t_ms: 1_700_000_000_000,
            },
        ]
    }

    /// The running event hash is what an auditor compares between a live
    /// run and a replay, possibly of different builds: a change of its
    /// value must be deliberate (and said in the release notes), never a
    /// side effect of making it faster.
    #[test]
    fn the_event_hash_of_a_fixed_list_is_fixed() {
        let mut h = StableHasher::resume(0x0123_4567_89ab_cdef);
        for event in sample() {
            event.digest(&mut h);
        }
        assert_eq!(h.finish(), 0xc50f_8269_646d_91e4, "{:#x}", h.finish());
    }

    #[test]
    fn every_event_changes_the_hash() {
        let events = sample();
        let all = |skip: Option<usize>| {
            let mut h = StableHasher::resume(1);
            for (i, e) in events.iter().enumerate() {
                if Some(i) != skip {
                    e.digest(&mut h);
                }
            }
            h.finish()
        };
        let whole = all(None);
        for i in 0..events.len() {
            assert_ne!(all(Some(i)), whole, "event {i} left no trace");
        }
    }
}
