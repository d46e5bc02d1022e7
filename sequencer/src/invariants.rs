//! Checks of the state's invariants, for tests, simulations and replay
//! audits. Each returns the first violation as a sentence.

use std::collections::BTreeMap;

use crate::book::NIL;
use crate::state::{position_key, State};
use crate::types::{Action, Cents, MarketId, MarketStatus, Outcome};

impl State {
    /// Every invariant at once; `Err` names the first one broken.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_money()?;
        self.check_contracts()?;
        self.check_orders_and_books()?;
        Ok(())
    }

    /// Cash (holds included) + collateral of unsettled markets + fees
    /// collected == deposits - withdrawals.
    pub fn check_money(&self) -> Result<(), String> {
        let cash: Cents = self.accounts.iter().map(|a| a.cash).sum();
        let collateral: Cents = self.markets.iter().map(|m| m.collateral()).sum();
        let inside = cash + collateral + self.ledger.fees;
        let outside = self.ledger.deposits - self.ledger.withdrawals;
        if inside != outside {
            return Err(format!(
                "money not conserved: cash {cash} + collateral {collateral} + fees {} != deposits - withdrawals {outside}",
                self.ledger.fees
            ));
        }
        for a in &self.accounts {
            if a.cash < 0 || a.held < 0 || a.held > a.cash || a.position_cost < 0 {
                return Err(format!(
                    "account {} has cash {} held {} cost {}",
                    a.id, a.cash, a.held, a.position_cost
                ));
            }
            // Rules 2: nobody can cancel a suspended account's orders, so
            // it has none resting (suspension and the move to rules 2
            // cancel them).
            if self.rules >= 2 && a.suspended && !a.resting.is_empty() {
                return Err(format!(
                    "suspended account {} has {} resting orders",
                    a.id,
                    a.resting.len()
                ));
            }
        }
        Ok(())
    }

    /// Up contracts == Down contracts == pairs in every market; positions
    /// and their costs add up.
    pub fn check_contracts(&self) -> Result<(), String> {
        let mut held: BTreeMap<MarketId, [u64; 2]> = BTreeMap::new();
        for a in &self.accounts {
            let mut cost = 0;
            for (&key, p) in &a.positions {
                let (market, outcome) = crate::state::position_parts(key);
                if p.committed > p.count || p.cost < 0 || (p.count == 0 && p.committed == 0) {
                    return Err(format!("account {} position {key} is {p:?}", a.id));
                }
                if self
                    .market(market)
                    .is_none_or(|m| m.status == MarketStatus::Settled)
                {
                    return Err(format!(
                        "account {} holds a position in settled market {market}",
                        a.id
                    ));
                }
                held.entry(market).or_default()[outcome.index()] += p.count;
                cost += p.cost;
            }
            if cost != a.position_cost {
                return Err(format!(
                    "account {} position cost {} != sum {cost}",
                    a.id, a.position_cost
                ));
            }
        }
        for m in self.markets.iter() {
            let counts = held.get(&m.id).unwrap_or(&[0; 2]);
            if counts[0] != counts[1] || counts[0] != m.pairs || m.open_interest != *counts {
                return Err(format!(
                    "market {}: up {} down {} pairs {} open interest {:?}",
                    m.ticker, counts[0], counts[1], m.pairs, m.open_interest
                ));
            }
        }
        Ok(())
    }

    /// Holds equal their formula; commitments, counters and book levels
    /// agree with the resting orders; no book is crossed at rest.
    ///
    /// It walks the books of the markets not yet settled (where every
    /// resting order is) rather than every order ever placed, so a check
    /// after every command stays cheap in long simulations. An order that
    /// left the book with a hold still set shows as an account whose `held`
    /// differs from the sum over its resting orders.
    pub fn check_orders_and_books(&self) -> Result<(), String> {
        let mut held: BTreeMap<u32, Cents> = BTreeMap::new();
        let mut committed: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        let mut per_key = vec![0u32; self.keys.len()];
        let mut per_key_market: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        let mut per_account = vec![0u32; self.accounts.len()];
        let mut resting_total = 0u64;
        for &market in &self.active_markets {
            let m = &self.markets[market as usize];
            let mut buy_notional: Cents = 0;
            for (i, outcome) in [Outcome::Up, Outcome::Down].into_iter().enumerate() {
                for (price, total) in m.book.side(outcome).top(usize::MAX) {
                    let mut node = m.book.head(outcome, price);
                    if node == NIL {
                        return Err(format!(
                            "market {} level {i}/{price} is marked but empty",
                            m.ticker
                        ));
                    }
                    let mut sum = 0u64;
                    while node != NIL {
                        let n = m.book.node(node);
                        let o = self
                            .order(n.order)
                            .ok_or_else(|| format!("book node for unknown order {}", n.order))?;
                        if !o.is_resting()
                            || o.node != node
                            || o.market != market
                            || n.remaining != o.remaining()
                        {
                            return Err(format!("order {} and its book node disagree", o.id));
                        }
                        if o.book_place() != (outcome, price) {
                            return Err(format!("order {} rests at the wrong place", o.id));
                        }
                        if o.hold != o.hold_formula() {
                            return Err(format!(
                                "order {} holds {} but its formula says {}",
                                o.id,
                                o.hold,
                                o.hold_formula()
                            ));
                        }
                        if m.status != MarketStatus::Open {
                            return Err(format!(
                                "order {} rests in market {} which is {:?}",
                                o.id, m.ticker, m.status
                            ));
                        }
                        sum += u64::from(n.remaining);
                        *held.entry(o.account).or_default() += o.hold;
                        per_key[o.key as usize] += 1;
                        *per_key_market.entry((o.key, o.market)).or_default() += 1;
                        per_account[o.account as usize - 1] += 1;
                        resting_total += 1;
                        let listed = self.accounts[o.account as usize - 1]
                            .resting
                            .get(o.account_slot as usize);
                        if listed != Some(&o.id) {
                            return Err(format!(
                                "order {} rests but its account's resting list has {listed:?} at its place",
                                o.id
                            ));
                        }
                        match o.action {
                            Action::Buy => {
                                buy_notional += Cents::from(o.remaining()) * Cents::from(o.price)
                            }
                            Action::Sell => {
                                *committed
                                    .entry((o.account, position_key(o.market, o.outcome)))
                                    .or_default() += u64::from(o.remaining())
                            }
                        }
                        node = m.book.next(node);
                    }
                    if sum != total {
                        return Err(format!(
                            "market {} level {i}/{price} total {total} != orders {sum}",
                            m.ticker
                        ));
                    }
                }
            }
            if m.resting_buy_notional != buy_notional {
                return Err(format!("market {} resting buy notional is off", m.ticker));
            }
            let (up, down) = (m.book.side(Outcome::Up), m.book.side(Outcome::Down));
            if let (Some(u), Some(d)) = (up.best(), down.best()) {
                if u16::from(u) + u16::from(d) >= 100 {
                    return Err(format!(
                        "market {} is crossed at rest: up {u} down {d}",
                        m.ticker
                    ));
                }
            }
        }
        let resting_accounts: u64 = self
            .accounts
            .iter()
            .map(|a| u64::from(a.resting_orders()))
            .sum();
        if resting_accounts != resting_total {
            return Err(format!(
                "{resting_accounts} orders counted as resting, {resting_total} on the books"
            ));
        }
        for a in &self.accounts {
            if a.held != held.get(&a.id).copied().unwrap_or(0) {
                return Err(format!(
                    "account {} held {} != sum of order holds",
                    a.id, a.held
                ));
            }
            if a.resting_orders() != per_account[a.id as usize - 1] {
                return Err(format!("account {} resting count is off", a.id));
            }
            for (&key, p) in &a.positions {
                if p.committed != committed.get(&(a.id, key)).copied().unwrap_or(0) {
                    return Err(format!(
                        "account {} position {key} commits {} to sells",
                        a.id, p.committed
                    ));
                }
            }
        }
        for k in &self.keys {
            if k.resting_orders != per_key[k.idx as usize] {
                return Err(format!("key {} resting count is off", k.key_id));
            }
            let expected: BTreeMap<u32, u32> = per_key_market
                .iter()
                .filter(|((key, _), _)| *key == k.idx)
                .map(|((_, m), n)| (*m, *n))
                .collect();
            if k.resting_by_market != expected {
                return Err(format!(
                    "key {} resting counts per market are off",
                    k.key_id
                ));
            }
        }
        Ok(())
    }

    /// Checks every order in the live state (slow; for audits and final checks):
    /// finished orders hold nothing and have no book node; statuses agree
    /// with fill counts.
    pub fn check_all_orders(&self) -> Result<(), String> {
        for o in self.orders.iter() {
            if o.hold != o.hold_formula() || !o.node_consistent() || o.filled > o.count {
                return Err(format!("order {} is inconsistent: {o:?}", o.id));
            }
            if (o.filled == o.count) != (o.status == crate::types::OrderStatus::Executed) {
                return Err(format!(
                    "order {} status {:?} with {} of {} filled",
                    o.id, o.status, o.filled, o.count
                ));
            }
        }
        Ok(())
    }

    /// The canonical hash of the whole state.
    pub fn state_hash(&self) -> u64 {
        crate::hash::stable_hash(self)
    }
}
