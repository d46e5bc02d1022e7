//! Reads answered from the state: what REST GETs show. Pure functions of the
//! state; they never change it and are not journaled.

use crate::limits::{
    FILLS_LIMIT_MAX, FILLS_LIMIT_MIN, LIST_LIMIT_MAX, LIVE_SCAN_MAX, ORDER_LIST_WINDOW_MS,
};
use crate::reply::{ErrorCode, Reject};
use crate::state::{position_parts, Fill, Key, Market, Order, State, Trade};
use crate::types::{
    AccountId, Cents, ClientOrderId, KeyIdx, MarketId, MarketStatus, OrderId, OrderStatus, Outcome,
    PriceCents,
};

/// A position as GET /portfolio/positions shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PositionView {
    pub market_ticker: String,
    pub outcome: Outcome,
    pub count: u64,
    pub cost: Cents,
}

/// Cash, holds and buying power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BalanceView {
    pub cash: Cents,
    pub held: Cents,
    pub buying_power: Cents,
}

/// The book of one market, best first on each side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderbookView {
    pub market_ticker: String,
    pub up: Vec<(PriceCents, u64)>,
    pub down: Vec<(PriceCents, u64)>,
    pub checksum: u32,
}

/// Filters of GET /portfolio/orders.
#[derive(Clone, Debug, Default)]
pub struct OrderFilter {
    pub market_ticker: Option<String>,
    pub client_order_id: Option<ClientOrderId>,
    pub status: Option<OrderStatus>,
    /// Page size; `LIST_LIMIT_DEFAULT` when `None`.
    pub limit: Option<u32>,
    /// Only orders with a smaller id (the previous page's cursor).
    pub cursor: Option<u64>,
}

/// A page of a newest-first list and the cursor of the next one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass back to get older items; `None` when there are none in the
    /// live state (`rest` then says whether the history store has more).
    pub cursor: Option<u64>,
    /// The page goes on in the history store (docs/history-store.md).
    pub rest: Option<Rest>,
}

/// Where a page goes on past the live state: the reader (outside the
/// sequencer) continues it from the history store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rest {
    /// Fills: the newest evicted fill of the account, head of its chain.
    /// Trades: the market whose trades are all in the store.
    pub from: u64,
    /// Items still wanted on this page.
    pub wanted: usize,
    /// Only items of this market (fills with a market filter).
    pub market: Option<MarketId>,
}

/// One order by id: in the live state, or ended long enough ago to be in
/// the history store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderLookup {
    Live(Order),
    /// The caller's account; the reader shows the stored order only if it
    /// belongs to it.
    InHistory {
        account: AccountId,
    },
}

impl OrderLookup {
    /// The order when it is in the live state.
    pub fn live(self) -> Option<Order> {
        match self {
            Self::Live(order) => Some(order),
            Self::InHistory { .. } => None,
        }
    }
}

fn page<T>(items: Vec<T>, more: bool, last_id: Option<u64>) -> Page<T> {
    Page {
        items,
        cursor: if more { last_id } else { None },
        rest: None,
    }
}

fn empty<T>() -> Page<T> {
    page(Vec::new(), false, None)
}

impl State {
    /// The key behind GET /account; any valid key may read itself.
    pub fn query_account(&self, key: KeyIdx) -> Result<&Key, Reject> {
        self.authorize_any(key)
    }

    /// One order of the key's account.
    pub fn query_order(&self, key: KeyIdx, order_id: u64) -> Result<OrderLookup, Reject> {
        let account = self.authorize_read(key)?.account;
        if self.orders.evicted(order_id) {
            return Ok(OrderLookup::InHistory { account });
        }
        self.order(order_id)
            .filter(|o| o.account == account)
            .map(|o| OrderLookup::Live(*o))
            .ok_or_else(|| order_not_found(order_id))
    }

    /// The account's orders of the last 24 hours, newest first.
    pub fn query_orders(&self, key: KeyIdx, filter: &OrderFilter) -> Result<Page<Order>, Reject> {
        let account_id = self.authorize_read(key)?.account;
        let limit = list_limit(filter.limit, 1, LIST_LIMIT_MAX)?;
        let since = self.now_ms.saturating_sub(ORDER_LIST_WINDOW_MS);
        let account = self.account(account_id).expect("key's account");
        let market = match &filter.market_ticker {
            Some(t) => match self.market_ids.get(t) {
                Some(&id) => Some(id),
                None => return Ok(empty()),
            },
            None => None,
        };
        // Candidates, newest first, from the smallest list that holds every
        // match, so that a filter matching little never walks the day's
        // orders on the sequencer thread: a client_order_id is looked up in
        // the idempotency index, resting orders come from the account's
        // list of them, and the cursor cuts the day's list by binary search.
        let below = |id: &OrderId| filter.cursor.is_none_or(|c| *id < c);
        let ids: Box<dyn Iterator<Item = OrderId>> = if let Some(wanted) = &filter.client_order_id {
            Box::new(
                self.order_by_client_id(account_id, wanted)
                    .into_iter()
                    .filter(below),
            )
        } else if filter.status == Some(OrderStatus::Resting) {
            let mut resting: Vec<OrderId> = account.resting.iter().copied().filter(below).collect();
            resting.sort_unstable_by(|a, b| b.cmp(a));
            Box::new(resting.into_iter())
        } else {
            let end = filter.cursor.map_or(account.orders.len(), |c| {
                account.orders.partition_point(|&id| id < c)
            });
            Box::new(account.orders.range(..end).rev().copied())
        };
        let mut items = Vec::new();
        let mut more = false;
        let mut last_looked = None;
        for (scanned, id) in ids.enumerate() {
            let order = self.order(id).expect("account orders exist");
            if order.created_ts_ms < since {
                break;
            }
            if scanned == LIVE_SCAN_MAX {
                // Resume right after the last order looked at.
                return Ok(page(items, true, last_looked));
            }
            last_looked = Some(id);
            let wanted = market.is_none_or(|m| order.market == m)
                && filter
                    .client_order_id
                    .is_none_or(|c| order.client_order_id == c)
                && filter.status.is_none_or(|s| order.status == s);
            if !wanted {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(*order);
        }
        let last = items.last().map(|o: &Order| o.id);
        Ok(page(items, more, last))
    }

    /// Positions in windows that have not settled, by market then outcome.
    pub fn query_positions(&self, key: KeyIdx) -> Result<Vec<PositionView>, Reject> {
        let account = self.authorize_read(key)?.account;
        let account = self.account(account).expect("key's account");
        Ok(account
            .positions
            .iter()
            .filter(|(_, p)| p.count > 0)
            .map(|(&k, p)| {
                let (market, outcome) = position_parts(k);
                PositionView {
                    market_ticker: self.markets[market as usize].ticker.clone(),
                    outcome,
                    count: p.count,
                    cost: p.cost,
                }
            })
            .collect())
    }

    /// The account's fills, newest first; `cursor` is the last fill id of the
    /// previous page.
    pub fn query_fills(
        &self,
        key: KeyIdx,
        market_ticker: Option<&str>,
        limit: Option<u32>,
        cursor: Option<u64>,
    ) -> Result<Page<Fill>, Reject> {
        let account = self.authorize_read(key)?.account;
        let limit = list_limit(limit, FILLS_LIMIT_MIN, FILLS_LIMIT_MAX)?;
        let market = match market_ticker {
            Some(t) => match self.market_ids.get(t) {
                Some(&id) => Some(id),
                None => return Ok(empty()),
            },
            None => None,
        };
        let account = self.account(account).expect("key's account");
        let end = match cursor {
            Some(c) => account.fills.partition_point(|&id| id < c),
            None => account.fills.len(),
        };
        let mut items = Vec::new();
        let mut more = false;
        let mut last_looked = None;
        for (scanned, &id) in account.fills.range(..end).rev().enumerate() {
            if scanned == LIVE_SCAN_MAX {
                // Resume right after the last fill looked at.
                return Ok(page(items, true, last_looked));
            }
            last_looked = Some(id);
            let fill = self.fill(id).expect("account fills exist");
            if market.is_some_and(|m| fill.market != m) {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(*fill);
        }
        let last = items.last().map(|f: &Fill| f.id);
        // The live fills ran out: older ones are in the history store.
        let stored = !more && account.last_evicted_fill != 0;
        let mut page = page(items, more || stored, last);
        if stored && page.items.len() < limit {
            page.cursor = None;
            page.rest = Some(Rest {
                from: account.last_evicted_fill,
                wanted: limit - page.items.len(),
                market,
            });
        }
        // A page filled by live fills alone carries a cursor, and the next
        // page reads the store (it may come back empty).
        Ok(page)
    }

    /// Cash, held and buying power.
    pub fn query_balance(&self, key: KeyIdx) -> Result<BalanceView, Reject> {
        let account = self.authorize_read(key)?.account;
        let a = self.account(account).expect("key's account");
        Ok(BalanceView {
            cash: a.cash,
            held: a.held,
            buying_power: a.buying_power(),
        })
    }

    /// One market by ticker.
    pub fn query_market(&self, ticker: &str) -> Result<&Market, Reject> {
        self.market_by_ticker(ticker)
            .ok_or_else(|| Reject::new(ErrorCode::MarketNotFound, format!("No market {ticker}.")))
    }

    /// Markets, newest listing first, filtered by series and status;
    /// `cursor` is the last market id of the previous page.
    pub fn query_markets(
        &self,
        series: Option<&str>,
        status: Option<MarketStatus>,
        limit: Option<u32>,
        cursor: Option<u64>,
    ) -> Result<Page<&Market>, Reject> {
        let limit = list_limit(limit, 1, LIST_LIMIT_MAX)?;
        let series_id = match series {
            Some(t) => Some(self.series_ids.get(t).copied().ok_or_else(|| {
                Reject::new(ErrorCode::SeriesNotFound, format!("No series {t}."))
            })?),
            None => None,
        };
        let end = cursor.map_or(self.markets.len(), |c| (c as usize).min(self.markets.len()));
        // Candidates, newest first, from the smallest list that holds every
        // match: the unsettled markets for an unsettled status, the series'
        // own markets for a series; only then every market. Markets pile up
        // for ever (a few thousand a day), and this runs on the sequencer
        // thread, so a filter that matches little must not walk them all.
        // Each list is in id order: the cursor cuts it by binary search.
        let candidates: Box<dyn Iterator<Item = &Market>> = match (status, series_id) {
            (Some(s), _) if s != MarketStatus::Settled => {
                self.markets_among(&self.active_markets, end)
            }
            (_, Some(series)) => self.markets_among(&self.series[series as usize].markets, end),
            _ => Box::new(self.markets[..end].iter().rev()),
        };
        let mut items = Vec::new();
        let mut more = false;
        for market in candidates {
            if series_id.is_some_and(|s| market.series != s)
                || status.is_some_and(|s| market.status != s)
            {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(market);
        }
        let last = items.last().map(|m: &&Market| u64::from(m.id));
        Ok(page(items, more, last))
    }

    /// The markets of `ids` (in id order) below id `end`, newest first.
    fn markets_among<'a>(
        &'a self,
        ids: &'a [MarketId],
        end: usize,
    ) -> Box<dyn Iterator<Item = &'a Market> + 'a> {
        let below = ids.partition_point(|&id| (id as usize) < end);
        Box::new(
            ids[..below]
                .iter()
                .rev()
                .map(|&id| &self.markets[id as usize]),
        )
    }

    /// The book of a market, up to `depth` levels a side (all when `None`).
    pub fn query_orderbook(
        &self,
        ticker: &str,
        depth: Option<u32>,
    ) -> Result<OrderbookView, Reject> {
        let market = self.query_market(ticker)?;
        let depth = depth.map_or(usize::MAX, |d| d as usize);
        Ok(OrderbookView {
            market_ticker: market.ticker.clone(),
            up: market.book.side(Outcome::Up).top(depth).collect(),
            down: market.book.side(Outcome::Down).top(depth).collect(),
            checksum: market.book.checksum(),
        })
    }

    /// Public trades of a market, newest first; `cursor` is the last trade id
    /// of the previous page.
    pub fn query_trades(
        &self,
        ticker: &str,
        limit: Option<u32>,
        cursor: Option<u64>,
    ) -> Result<Page<Trade>, Reject> {
        let market = self.query_market(ticker)?;
        let limit = list_limit(limit, 1, LIST_LIMIT_MAX)?;
        if market.history {
            let mut page = empty();
            page.rest = Some(Rest {
                from: u64::from(market.id),
                wanted: limit,
                market: Some(market.id),
            });
            return Ok(page);
        }
        Ok(trades_page(&market.trades, limit, cursor))
    }
}

/// A page of a market's trades (`trades` oldest first): up to `limit`,
/// newest first, older than `cursor`; the live state's and the history
/// store's alike.
pub fn trades_page(trades: &[Trade], limit: usize, cursor: Option<u64>) -> Page<Trade> {
    let end = match cursor {
        Some(c) => trades.partition_point(|t| t.trade_id < c),
        None => trades.len(),
    };
    let start = end.saturating_sub(limit);
    let items: Vec<Trade> = trades[start..end].iter().rev().copied().collect();
    let last = items.last().map(|t| t.trade_id);
    page(items, start > 0, last)
}

/// The answer for an order that is not the caller's, or not at all.
pub fn order_not_found(order_id: u64) -> Reject {
    Reject::new(
        ErrorCode::OrderNotFound,
        format!("No order {order_id} on this account."),
    )
}

/// A page size: `min..=max`, the default when not given.
fn list_limit(limit: Option<u32>, min: u32, max: u32) -> Result<usize, Reject> {
    match limit {
        Some(l) if !(min..=max).contains(&l) => Err(Reject::bad_request(
            crate::validate::range_refusal("limit", min, max),
        )),
        Some(l) => Ok(l as usize),
        None => Ok(crate::limits::LIST_LIMIT_DEFAULT as usize),
    }
}
