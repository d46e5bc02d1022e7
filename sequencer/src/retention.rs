//! The history tail: what has ended leaves the live state.
//!
//! The live state keeps what the venue decides with (accounts, keys, open
//! and recent markets, resting orders, positions) and a tail of what has
//! ended: orders ended less than `tail_ms` ago, fills younger than that,
//! settled markets' books and trades for `tail_ms` after settlement. Older
//! records leave as `Event::Evicted`, which the history writer (outside the
//! sequencer) stores; reads that reach past the tail go to that store. So
//! memory and snapshots are bounded by activity within the tail, not by the
//! journal's length (docs/history-store.md).
//!
//! Eviction is a rule of the state machine like any other: it runs on
//! journaled time (at most once per 100 ms of it), so the same journal gives
//! the same state and the same events on every replay.

use crate::event::Event;
use crate::reply::{Reject, Reply};
use crate::state::{Fill, Order, State, Trade};
use crate::table::Fate;
use crate::types::{FillId, MarketId};

/// The shortest tail accepted. The order list of the last 24 hours is only
/// whole with a tail of at least 24 hours (the default); a shorter one is
/// for practice venues, soaks and tests, and is documented as such.
pub const HISTORY_TAIL_MS_MIN: u64 = 1_000;

/// Eviction runs at most once per this much journaled time, so each run
/// takes a tenth of a second's worth of records, not a burst.
const EVICT_EVERY_MS: u64 = 100;

/// A record that left the live state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Evicted {
    /// An ended order, as it ended.
    Order(Order),
    /// A fill; `prev` is the account's fill evicted before it (0: none),
    /// so the store can page an account's fills newest first.
    Fill { fill: Fill, prev: FillId },
    /// A settled market's trades, oldest first (its book is released).
    Trades {
        market: MarketId,
        trades: Vec<Trade>,
    },
}

impl State {
    /// Evicts what the tail no longer covers, when eviction is due.
    pub(crate) fn evict_if_due(&mut self, events: &mut Vec<Event>) {
        if self.now_ms < self.retention.next_run_ts_ms {
            return;
        }
        self.retention.next_run_ts_ms = self.now_ms.saturating_add(EVICT_EVERY_MS);
        let Some(cutoff) = self.now_ms.checked_sub(self.retention.tail_ms) else {
            return;
        };
        self.evict_orders(cutoff, events);
        self.evict_fills(cutoff, events);
        self.evict_markets(cutoff, events);
    }

    fn evict_orders(&mut self, cutoff: u64, events: &mut Vec<Event>) {
        let mut gone = Vec::new();
        self.orders.evict(
            |o| {
                if o.is_resting() {
                    // Old and still resting: set aside, so that it does not
                    // hold back the ended orders behind it. A young one
                    // stops the run (ids rise with creation time).
                    if o.created_ts_ms < cutoff {
                        Fate::Keep
                    } else {
                        Fate::Stop
                    }
                } else if o.updated_ts_ms < cutoff {
                    Fate::Evict
                } else {
                    Fate::Stop
                }
            },
            |_, o| gone.push(o),
        );
        for o in gone {
            if let Some(account) = self.account_mut(o.account) {
                if let Ok(at) = account.orders.binary_search(&o.id) {
                    account.orders.remove(at);
                }
            }
            self.client_orders
                .remove(o.client_order_id.index_hash(o.account), o.id);
            events.push(Event::Evicted(Box::new(Evicted::Order(o))));
        }
    }

    fn evict_fills(&mut self, cutoff: u64, events: &mut Vec<Event>) {
        let mut gone = Vec::new();
        self.fills.evict(
            |f| {
                if f.ts_ms < cutoff {
                    Fate::Evict
                } else {
                    Fate::Stop
                }
            },
            |_, f| gone.push(f),
        );
        for fill in gone {
            let Some(account) = self.account_mut(fill.account) else {
                continue;
            };
            // An account's fills are in id order, as the table's are.
            debug_assert_eq!(account.fills.front(), Some(&fill.id));
            if account.fills.front() == Some(&fill.id) {
                account.fills.pop_front();
            }
            let prev = std::mem::replace(&mut account.last_evicted_fill, fill.id);
            events.push(Event::Evicted(Box::new(Evicted::Fill { fill, prev })));
        }
    }

    fn evict_markets(&mut self, cutoff: u64, events: &mut Vec<Event>) {
        while let Some(&id) = self.retention.settled.front() {
            let Some(market) = self.markets.get_mut(id as usize) else {
                self.retention.settled.pop_front();
                continue;
            };
            if market.settled_ts_ms.is_none_or(|t| t >= cutoff) {
                break;
            }
            self.retention.settled.pop_front();
            market.book.release();
            market.history = true;
            let trades = std::mem::take(&mut market.trades);
            events.push(Event::Evicted(Box::new(Evicted::Trades {
                market: id,
                trades,
            })));
        }
    }

    /// `SetRetention`: a new history tail, effective at the next eviction.
    pub(crate) fn set_retention(&mut self, tail_ms: u64) -> Reply {
        if tail_ms < HISTORY_TAIL_MS_MIN {
            return Reject::bad_request(format!(
                "history tail must be at least {HISTORY_TAIL_MS_MIN} ms"
            ))
            .into();
        }
        self.retention.tail_ms = tail_ms;
        Reply::Ok
    }
}
