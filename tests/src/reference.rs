//! A naive reference order book, written from DESIGN §2 alone, for the
//! differential test. It is deliberately simple and slow: one `Vec` of
//! resting orders per market in arrival order, scanned linearly for the best
//! match at every step. It shares no code with sequencer's `book.rs` or
//! `engine.rs`, so the two agreeing on millions of orders means something.
//!
//! It only knows the book. Cash, limits, keys and positions are not its
//! business: the differential test feeds it only the orders that the
//! sequencer accepted, or refused for a reason of the book (SELF_TRADE or
//! POST_ONLY_CROSS).

use std::collections::BTreeMap;

use sequencer::types::{AccountId, Action, MarketId, OrderId, Outcome, PriceCents, TimeInForce};

/// One order resting in the reference book.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefOrder {
    pub id: OrderId,
    pub account: AccountId,
    /// The bid side it rests on.
    pub side: Outcome,
    /// Its price on that side's scale, in cents.
    pub price: PriceCents,
    pub remaining: u32,
}

/// One trade the reference made: which resting order, how many, and the
/// price on the Up scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefTrade {
    pub maker: OrderId,
    pub count: u32,
    pub up_price: PriceCents,
}

/// Why the reference refused an order; both are refusals of the whole order
/// before any fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefRefusal {
    /// It would have traded against the same account's resting order.
    SelfTrade,
    /// A post_only order would have traded at once.
    PostOnlyCross,
}

/// What a placed order did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefResult {
    pub trades: Vec<RefTrade>,
    /// Contracts left resting on the book (0 for IOC or a full fill).
    pub rested: u32,
}

impl RefResult {
    /// Contracts filled.
    pub fn filled(&self) -> u32 {
        self.trades.iter().map(|t| t.count).sum()
    }
}

/// An incoming order, in the terms of the client.
#[derive(Clone, Copy, Debug)]
pub struct RefNewOrder {
    pub id: OrderId,
    pub account: AccountId,
    pub outcome: Outcome,
    pub action: Action,
    /// Limit on the outcome's own scale.
    pub price: PriceCents,
    pub count: u32,
    pub time_in_force: TimeInForce,
    pub post_only: bool,
}

impl RefNewOrder {
    /// DESIGN §2's table: buy up @ p rests on up at p, sell up @ p on down at
    /// 1 - p, buy down @ q on down at q, sell down @ q on up at 1 - q.
    pub fn place(&self) -> (Outcome, PriceCents) {
        match (self.action, self.outcome) {
            (Action::Buy, Outcome::Up) => (Outcome::Up, self.price),
            (Action::Sell, Outcome::Up) => (Outcome::Down, 100 - self.price),
            (Action::Buy, Outcome::Down) => (Outcome::Down, self.price),
            (Action::Sell, Outcome::Down) => (Outcome::Up, 100 - self.price),
        }
    }
}

/// One market's book: every resting order, oldest first.
#[derive(Clone, Debug, Default)]
pub struct RefBook {
    pub orders: Vec<RefOrder>,
}

impl RefBook {
    /// The index of the order the incoming one would hit next: on the other
    /// side, crossing (`x + y >= 100`), highest price first and, within a
    /// price, the oldest. `None` when nothing crosses.
    fn best_match(&self, side: Outcome, x: PriceCents) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, o) in self.orders.iter().enumerate() {
            if o.side == side || u16::from(o.price) + u16::from(x) < 100 || o.remaining == 0 {
                continue;
            }
            // Orders are in arrival order, so only a strictly better price
            // displaces an earlier candidate.
            if best.is_none_or(|b| o.price > self.orders[b].price) {
                best = Some(i);
            }
        }
        best
    }

    /// Matches an incoming order, refusing it whole first if it would
    /// self-trade or is a post_only that would trade. The refusal checks run
    /// on a copy, so a refused order leaves the book as it was.
    pub fn place(&mut self, new: &RefNewOrder) -> Result<RefResult, RefRefusal> {
        let (side, x) = new.place();
        let mut trial = self.clone();
        let trades = trial.match_against(side, x, new.count);
        // The sequencer checks post_only before self-trade; the order of the
        // two refusals is the code's decision, mirrored here.
        if new.post_only && new.time_in_force == TimeInForce::GoodTillCanceled && !trades.is_empty()
        {
            return Err(RefRefusal::PostOnlyCross);
        }
        if trades.iter().any(|(_, account)| *account == new.account) {
            return Err(RefRefusal::SelfTrade);
        }
        *self = trial;
        let trades: Vec<RefTrade> = trades.into_iter().map(|(t, _)| t).collect();
        let filled: u32 = trades.iter().map(|t| t.count).sum();
        let left = new.count - filled;
        let rested = match new.time_in_force {
            TimeInForce::GoodTillCanceled if left > 0 => {
                self.orders.push(RefOrder {
                    id: new.id,
                    account: new.account,
                    side,
                    price: x,
                    remaining: left,
                });
                left
            }
            _ => 0,
        };
        Ok(RefResult { trades, rested })
    }

    /// Fills up to `count` against the other side; returns each trade with
    /// the maker's account.
    fn match_against(
        &mut self,
        side: Outcome,
        x: PriceCents,
        count: u32,
    ) -> Vec<(RefTrade, AccountId)> {
        let mut left = count;
        let mut trades = Vec::new();
        while left > 0 {
            let Some(i) = self.best_match(side, x) else {
                break;
            };
            let maker = &mut self.orders[i];
            let qty = left.min(maker.remaining);
            maker.remaining -= qty;
            left -= qty;
            // The trade is at the resting order's price, put on the Up scale.
            let up_price = match maker.side {
                Outcome::Up => maker.price,
                Outcome::Down => 100 - maker.price,
            };
            trades.push((
                RefTrade {
                    maker: maker.id,
                    count: qty,
                    up_price,
                },
                maker.account,
            ));
            if maker.remaining == 0 {
                self.orders.remove(i);
            }
        }
        trades
    }

    /// Removes one resting order.
    pub fn cancel(&mut self, id: OrderId) -> Option<RefOrder> {
        let i = self.orders.iter().position(|o| o.id == id)?;
        Some(self.orders.remove(i))
    }

    /// Levels of one side, best first, as (price, contracts).
    pub fn levels(&self, side: Outcome) -> Vec<(PriceCents, u64)> {
        let mut levels: BTreeMap<PriceCents, u64> = BTreeMap::new();
        for o in self.orders.iter().filter(|o| o.side == side) {
            *levels.entry(o.price).or_default() += u64::from(o.remaining);
        }
        levels.into_iter().rev().collect()
    }
}

/// Reference books of every market.
#[derive(Clone, Debug, Default)]
pub struct Reference {
    pub books: BTreeMap<MarketId, RefBook>,
}

impl Reference {
    /// The book of a market (empty if never used).
    pub fn book(&mut self, market: MarketId) -> &mut RefBook {
        self.books.entry(market).or_default()
    }

    /// Places an order in a market.
    pub fn place(&mut self, market: MarketId, new: &RefNewOrder) -> Result<RefResult, RefRefusal> {
        self.book(market).place(new)
    }

    /// Finds and removes a resting order in any market.
    pub fn cancel(&mut self, id: OrderId) -> Option<RefOrder> {
        self.books.values_mut().find_map(|b| b.cancel(id))
    }

    /// Contracts still resting of an order (`None` once it rests nowhere).
    pub fn remaining(&self, id: OrderId) -> Option<u32> {
        self.books
            .values()
            .find_map(|b| b.orders.iter().find(|o| o.id == id))
            .map(|o| o.remaining)
    }

    /// A window closed: every order resting in it is cancelled.
    pub fn close(&mut self, market: MarketId) -> Vec<RefOrder> {
        self.books
            .remove(&market)
            .map(|b| b.orders)
            .unwrap_or_default()
    }

    /// Resting orders of an account in the markets `keep` selects, oldest
    /// (smallest id) first.
    pub fn resting_of(&self, account: AccountId, keep: impl Fn(MarketId) -> bool) -> Vec<OrderId> {
        let mut ids: Vec<OrderId> = self
            .books
            .iter()
            .filter(|(&m, _)| keep(m))
            .flat_map(|(_, b)| {
                b.orders
                    .iter()
                    .filter(|o| o.account == account)
                    .map(|o| o.id)
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: OrderId, account: AccountId, text: &str) -> RefNewOrder {
        let w: Vec<&str> = text.split_whitespace().collect();
        RefNewOrder {
            id,
            account,
            action: Action::parse(w[0]).unwrap(),
            outcome: Outcome::parse(w[1]).unwrap(),
            price: w[2].parse().unwrap(),
            count: w[3].parse().unwrap(),
            time_in_force: if w.contains(&"ioc") {
                TimeInForce::ImmediateOrCancel
            } else {
                TimeInForce::GoodTillCanceled
            },
            post_only: w.contains(&"post_only"),
        }
    }

    #[test]
    fn buy_up_meets_buy_down_at_the_resting_price() {
        let mut book = RefBook::default();
        book.place(&order(1, 1, "buy down 45 10")).unwrap();
        book.place(&order(2, 1, "buy down 40 10")).unwrap();
        // Up at 60 crosses down 45 (60 + 45 >= 100) and down 40 (60 + 40).
        let r = book.place(&order(3, 2, "buy up 60 15")).unwrap();
        assert_eq!(
            r.trades,
            vec![
                RefTrade {
                    maker: 1,
                    count: 10,
                    up_price: 55
                },
                RefTrade {
                    maker: 2,
                    count: 5,
                    up_price: 60
                }
            ]
        );
        assert_eq!(book.levels(Outcome::Down), vec![(40, 5)]);
        assert_eq!(r.rested, 0);
    }

    #[test]
    fn time_priority_within_a_level_and_refusals() {
        let mut book = RefBook::default();
        book.place(&order(1, 1, "sell up 70 3")).unwrap(); // down side at 30
        book.place(&order(2, 2, "buy down 30 4")).unwrap(); // down side at 30
        assert_eq!(book.levels(Outcome::Down), vec![(30, 7)]);
        // Account 2 would hit account 1 first (3 contracts): no self-trade.
        let r = book.place(&order(3, 2, "buy up 70 2 ioc")).unwrap();
        assert_eq!(
            r.trades,
            vec![RefTrade {
                maker: 1,
                count: 2,
                up_price: 70
            }]
        );
        // Now 4 would reach account 2's own order: refused whole.
        assert_eq!(
            book.place(&order(4, 2, "buy up 70 4")),
            Err(RefRefusal::SelfTrade)
        );
        assert_eq!(
            book.place(&order(5, 3, "buy up 75 1 post_only")),
            Err(RefRefusal::PostOnlyCross)
        );
        // post_only only applies to good_till_canceled.
        assert!(book
            .place(&order(6, 3, "buy up 75 1 ioc post_only"))
            .is_ok());
        assert_eq!(book.levels(Outcome::Down), vec![(30, 4)]);
        assert_eq!(book.place(&order(7, 3, "buy up 69 1")).unwrap().rested, 1);
    }
}
