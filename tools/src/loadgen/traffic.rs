//! The order flow: what request number `i` is. Request `i` belongs to
//! account `i mod N`, so each key sees at most `rate / N` requests a second
//! (the per-key limit applies to new orders only). The mix: orders resting
//! a few cents behind the touch, cancels of the account's own resting
//! orders, and immediate-or-cancel orders that cross the touch.
//!
//! No order ever trades against its own account (the venue refuses that
//! with SELF_TRADE): on each market an account only ever buys one outcome,
//! chosen from the account and the ticker, and it never sells. Up bids and
//! Down bids of one account can then never meet.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A small seeded generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The kinds of request, each with its own latency histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A good-till-canceled buy a few cents behind the touch.
    Rest,
    /// An immediate-or-cancel buy through the touch.
    Cross,
    /// A cancel of one of the account's resting orders.
    Cancel,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Rest, Kind::Cross, Kind::Cancel];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Rest => "order_resting",
            Kind::Cross => "order_crossing",
            Kind::Cancel => "cancel",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// One request, ready to send.
#[derive(Clone, Debug)]
pub struct Request {
    pub kind: Kind,
    pub account: usize,
    pub key: Arc<str>,
    pub method: &'static str,
    pub path: String,
    pub body: Vec<u8>,
    /// The market of a new order, to remember it if it rests.
    pub market: Option<Arc<str>>,
}

/// How long before its close a market stops getting orders: an order
/// still in flight at the close would be refused. Requests take
/// milliseconds; the margin covers them and a venue on another host whose
/// clock is a little ahead.
pub const CLOSE_MARGIN_MS: u64 = 500;

/// Whether a market closing at `close_ts_ms` gets orders at `now_ms`.
pub fn takes_orders(close_ts_ms: u64, now_ms: u64) -> bool {
    close_ts_ms > now_ms.saturating_add(CLOSE_MARGIN_MS)
}

/// A market the flow trades, with its simulated fair price of Up.
#[derive(Clone, Debug)]
struct Market {
    ticker: Arc<str>,
    /// Its close: it gets no orders within [`CLOSE_MARGIN_MS`] of it.
    close_ts_ms: u64,
    /// Fair price of Up in cents (30..=70); Down's is 100 minus it.
    fair: u8,
    /// Stable per ticker: which accounts buy Up here.
    salt: u64,
}

/// One account as the flow sees it.
#[derive(Clone, Debug)]
struct Account {
    key: Arc<str>,
    /// Orders believed resting: (market, order id).
    resting: Vec<(Arc<str>, u64)>,
}

/// Settings of the mix.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Share of requests that cancel (when the account has a resting order).
    pub cancel: f64,
    /// Share of requests that cross the touch (immediate-or-cancel).
    pub cross: f64,
    /// Largest order, in contracts (orders are 1 to this).
    pub max_count: u32,
    /// Prefix of client order ids, unique per run.
    pub tag: String,
}

/// The shared state of the flow.
pub struct Traffic {
    rng: Rng,
    mix: Mix,
    markets: Vec<Market>,
    accounts: Vec<Account>,
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn price(cents: i32) -> String {
    format!("0.{:02}", cents.clamp(1, 99))
}

impl Traffic {
    pub fn new(seed: u64, mix: Mix, keys: Vec<String>) -> Self {
        Self {
            rng: Rng::new(seed),
            mix,
            markets: Vec::new(),
            accounts: keys
                .into_iter()
                .map(|key| Account {
                    key: key.into(),
                    resting: Vec::new(),
                })
                .collect(),
        }
    }

    /// Markets currently tradable.
    pub fn market_count(&self) -> usize {
        self.markets.len()
    }

    /// Replaces the set of markets to trade (ticker, close), keeping the
    /// fair prices of the ones still there and forgetting resting orders in
    /// markets that are no longer open (the venue cancels those at the
    /// close).
    pub fn set_markets(&mut self, markets: &[(String, u64)], still_open: &[String]) {
        let old: BTreeMap<Arc<str>, u8> = self
            .markets
            .iter()
            .map(|m| (m.ticker.clone(), m.fair))
            .collect();
        self.markets = markets
            .iter()
            .map(|(t, close_ts_ms)| {
                let fair = match old.get(t.as_str()) {
                    Some(fair) => *fair,
                    None => 40 + self.rng.below(21) as u8,
                };
                Market {
                    ticker: t.as_str().into(),
                    close_ts_ms: *close_ts_ms,
                    fair,
                    salt: fnv(t),
                }
            })
            .collect();
        for account in &mut self.accounts {
            account
                .resting
                .retain(|(m, _)| still_open.iter().any(|t| t.as_str() == &**m));
        }
    }

    /// Remembers an order that rests.
    pub fn rested(&mut self, account: usize, market: Arc<str>, order_id: u64) {
        let resting = &mut self.accounts[account].resting;
        resting.push((market, order_id));
        // Bounded memory: forget the oldest beyond a few thousand.
        if resting.len() > 4096 {
            resting.drain(..1024);
        }
    }

    /// Resting orders currently remembered, over all accounts.
    pub fn resting_total(&self) -> usize {
        self.accounts.iter().map(|a| a.resting.len()).sum()
    }

    /// The request numbered `i`, due at `now_ms`; `None` when it would be
    /// an order and no market takes orders then.
    pub fn next(&mut self, i: u64, now_ms: u64) -> Option<Request> {
        let n = self.accounts.len();
        let account = (i % n as u64) as usize;
        let roll = self.rng.unit();
        let key = self.accounts[account].key.clone();
        if roll < self.mix.cancel && !self.accounts[account].resting.is_empty() {
            let resting = &mut self.accounts[account].resting;
            let pick = self.rng.below(resting.len() as u64) as usize;
            let (_, order_id) = resting.swap_remove(pick);
            return Some(Request {
                kind: Kind::Cancel,
                account,
                key,
                method: "DELETE",
                path: format!("/v1/portfolio/orders/{order_id}"),
                body: Vec::new(),
                market: None,
            });
        }
        // One of the markets taking orders, uniformly, without collecting
        // them: this runs once per request.
        let open = |m: &Market| takes_orders(m.close_ts_ms, now_ms);
        let taking = self.markets.iter().filter(|m| open(m)).count();
        if taking == 0 {
            return None;
        }
        let cross = roll >= 1.0 - self.mix.cross;
        let pick = self.rng.below(taking as u64) as usize;
        let m = (0..self.markets.len())
            .filter(|&m| open(&self.markets[m]))
            .nth(pick)
            .expect("counted above");
        // The fair price wanders a cent now and then.
        if self.rng.below(20) == 0 {
            let step: i32 = if self.rng.below(2) == 0 { -1 } else { 1 };
            let fair = &mut self.markets[m].fair;
            *fair = (i32::from(*fair) + step).clamp(30, 70) as u8;
        }
        let market = &self.markets[m];
        let up = market.salt.wrapping_add(account as u64).is_multiple_of(2);
        let fair = if up {
            i32::from(market.fair)
        } else {
            100 - i32::from(market.fair)
        };
        let (limit, tif) = if cross {
            (fair + 1 + self.rng.below(3) as i32, "immediate_or_cancel")
        } else {
            (fair - 1 - self.rng.below(4) as i32, "good_till_canceled")
        };
        let count = 1 + self.rng.below(u64::from(self.mix.max_count.max(1))) as u32;
        let body = format!(
            r#"{{"market_ticker":"{}","outcome":"{}","action":"buy","price":"{}","count":"{count}","time_in_force":"{tif}","client_order_id":"{}-{i}"}}"#,
            market.ticker,
            if up { "up" } else { "down" },
            price(limit),
            self.mix.tag,
        );
        Some(Request {
            kind: if cross { Kind::Cross } else { Kind::Rest },
            account,
            key,
            method: "POST",
            path: "/v1/portfolio/orders".into(),
            body: body.into_bytes(),
            market: Some(market.ticker.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_buys_one_outcome_per_market_and_cancels_its_own() {
        let keys: Vec<String> = (0..4).map(|i| format!("k{i}")).collect();
        let mix = Mix {
            cancel: 0.4,
            cross: 0.1,
            max_count: 5,
            tag: "t".into(),
        };
        let mut t = Traffic::new(7, mix, keys);
        const NOW: u64 = 1_800_000_000_000;
        assert!(t.next(0, NOW).is_none());
        let ticker = "btc-1m-261121-2100-2101".to_string();
        t.set_markets(&[(ticker.clone(), NOW + 60_000)], &[ticker]);
        let mut outcomes: BTreeMap<usize, String> = BTreeMap::new();
        let mut kinds = BTreeMap::new();
        for i in 0..4000u64 {
            let r = t.next(i, NOW).unwrap();
            assert_eq!(r.account, (i % 4) as usize);
            assert_eq!(&*r.key, format!("k{}", i % 4));
            *kinds.entry(r.kind).or_insert(0) += 1;
            if r.kind == Kind::Cancel {
                continue;
            }
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let outcome = body["outcome"].as_str().unwrap().to_string();
            assert_eq!(
                outcomes.entry(r.account).or_insert_with(|| outcome.clone()),
                &outcome
            );
            let cents: u32 = body["price"].as_str().unwrap()[2..].parse().unwrap();
            assert!((1..=99).contains(&cents));
            if r.kind == Kind::Rest {
                t.rested(r.account, r.market.unwrap(), i);
            }
        }
        assert!(kinds[&Kind::Cancel] > 1000, "{kinds:?}");
        assert!(kinds[&Kind::Cross] > 200, "{kinds:?}");
        // Both outcomes are bought on the market, by different accounts.
        let ups = outcomes.values().filter(|o| o.as_str() == "up").count();
        assert!(ups > 0 && ups < 4);
        // Orders stop half a second before the close; cancels go on.
        let mut orders_at = |now: u64| {
            (0..200u64)
                .filter_map(|i| t.next(i, now))
                .filter(|r| r.kind != Kind::Cancel)
                .count()
        };
        assert!(orders_at(NOW + 59_499) > 0);
        assert_eq!(orders_at(NOW + 59_500), 0);
        t.set_markets(&[], &[]);
        assert_eq!(t.resting_total(), 0);
    }
}
