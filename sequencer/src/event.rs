//! The sequencer's output besides replies: everything that changed, in the
//! order it changed. The publisher fans these out; replay compares them.

use crate::state::{Fill, Key, Order, Trade};
use crate::types::{AccountId, Cents, MarketId, Outcome, PriceCents, TsMs};

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
    /// An order was created or changed; the order as it now stands.
    Order(Order),
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
}

impl Event {
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
