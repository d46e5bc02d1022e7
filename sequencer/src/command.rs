//! The sequencer's input. Every change to the venue, including the passage
//! of time and every underlying print, is one of these, stamped with a seq
//! and a time and written to the journal before it is applied.

use rkyv::{Archive, Deserialize, Serialize};

use crate::types::{
    AccountId, Action, Cents, ClientOrderId, Environment, KeyIdx, KeyLimits, MarketId, OrderId,
    Outcome, PriceCents, Scopes, TimeInForce, TsMs,
};

/// A command with the stamp the sequencer input gave it.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Stamped {
    /// Global sequence number, rising by exactly one.
    pub seq: u64,
    /// Time stamped at the sequencer input; never goes backwards.
    pub ts_ms: TsMs,
    /// What to do.
    pub command: Command,
}

/// Venue-wide settings fixed by the operator (the first command of a journal).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub struct VenueConfig {
    /// The one environment this server runs.
    pub environment: Environment,
    /// Whether test keys may place orders on the practice book.
    pub practice_book_open: bool,
    /// Default cap on an account's amount at risk across open windows.
    pub account_risk_cap_cents: Cents,
}

impl Default for VenueConfig {
    fn default() -> Self {
        Self {
            environment: Environment::Test,
            practice_book_open: true,
            account_risk_cap_cents: 10_000_000,
        }
    }
}

/// One series of windows on an underlying.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub struct SeriesConfig {
    /// Series ticker, `^[a-z0-9][a-z0-9-]{0,63}$`.
    pub ticker: String,
    /// Underlying symbol, such as `X:BTCUSD` or `AAPL`.
    pub symbol: String,
    /// Window length; windows start on multiples of it since the epoch.
    pub window_ms: u64,
    /// Windows listed ahead of the current one.
    pub list_ahead: u32,
    /// Taker fee rate in basis points (700 = 0.07).
    pub taker_fee_bps: u32,
    /// Maker fee rate in basis points.
    pub maker_fee_bps: u32,
    /// Cap on all users together in one window: collateral of minted pairs
    /// plus the notional of resting buys, in cents.
    pub market_cap_cents: Cents,
}

/// An order as the client asked for it, shape already checked at the edge.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub struct NewOrder {
    /// Market, resolved from its ticker by the gateway's directory.
    pub market: MarketId,
    /// Outcome bought or sold.
    pub outcome: Outcome,
    /// Buy or sell.
    pub action: Action,
    /// Limit on the outcome's own scale, in cents.
    pub price: PriceCents,
    /// Contracts.
    pub count: u32,
    /// Good till canceled or immediate or cancel.
    pub time_in_force: TimeInForce,
    /// Refuse if any of it would trade at once.
    pub post_only: bool,
    /// The client's idempotency key.
    pub client_order_id: ClientOrderId,
}

/// A key as the operator issues it; the secret never enters the venue, only
/// its SHA-256 fingerprint.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub struct NewKey {
    /// Account the key acts as.
    pub account: AccountId,
    /// Public identifier, `[a-z0-9]{1,32}`, chosen by the issuer.
    pub key_id: String,
    /// SHA-256 of the secret.
    pub fingerprint: [u8; 32],
    /// Name given to the key.
    pub name: String,
    /// `live` or `test`.
    pub environment: Environment,
    /// Read and/or trade.
    pub scopes: Scopes,
    /// Optional limits; trade keys get the spec's defaults where unset.
    pub limits: KeyLimits,
    /// Addresses the key works from; empty means any.
    pub ip_allowlist: Vec<String>,
    /// Days until the key expires, 1 to 365; `None` never expires.
    pub expires_days: Option<u32>,
}

/// An account flag the operator sets.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub enum AccountFlag {
    /// The account accepted the current Terms of Service.
    TermsAccepted,
    /// The account allowed trading on its wallet.
    TradingAllowed,
    /// The account is suspended: its keys are refused.
    Suspended,
}

/// Everything the sequencer can be asked to do.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum Command {
    /// Time passes; windows open, close and settle on it.
    Tick,
    /// An underlying print. `price_e8` is the price times 10^8.
    Price {
        symbol: String,
        price_e8: i64,
        t_ms: TsMs,
    },
    /// Sets the venue-wide configuration.
    Configure(VenueConfig),
    /// Adds a series; its windows are listed from the current one on.
    CreateSeries(SeriesConfig),
    /// Opens an account; the reply carries its id.
    CreateAccount,
    /// Adds cash.
    Deposit { account: AccountId, cents: Cents },
    /// Takes cash out, only from buying power.
    Withdraw { account: AccountId, cents: Cents },
    /// Sets or clears an account flag.
    SetAccountFlag {
        account: AccountId,
        flag: AccountFlag,
        value: bool,
    },
    /// Sets an account's at-risk cap; `None` returns to the venue default.
    SetAccountRiskCap {
        account: AccountId,
        cents: Option<Cents>,
    },
    /// Issues a key.
    IssueKey(NewKey),
    /// Revokes a key at once.
    RevokeKey { key_id: String },
    /// Replaces a key's limits.
    SetKeyLimits { key_id: String, limits: KeyLimits },
    /// Pauses trading platform-wide; cancels still work.
    PauseTrading { until_ts_ms: Option<TsMs> },
    /// Ends a pause.
    ResumeTrading,
    /// Places a limit order through a key.
    PlaceOrder { key: KeyIdx, order: NewOrder },
    /// Cancels one order of the key's account.
    CancelOrder { key: KeyIdx, order_id: OrderId },
    /// Cancels the account's resting orders, optionally narrowed.
    CancelAll {
        key: KeyIdx,
        market: Option<String>,
        series: Option<String>,
    },
    /// Sets the history tail: how long ended orders, fills and settled
    /// markets' books and trades stay in the live state. Added after the
    /// others so that journals written before it still decode.
    SetRetention { tail_ms: u64 },
    /// Moves the venue to a newer version of its business rules
    /// (`limits::RULES_CURRENT`). A journal written before a rule changed
    /// replays under the rules it was written with: the version is part
    /// of the journal, and a node journals this command when it opens a
    /// journal of an older version. Added after the others so that older
    /// journals still decode.
    SetRules { version: u32 },
}

impl Command {
    /// A stable small number per kind, written in the journal's record header
    /// so tools can filter without decoding.
    pub const fn kind(&self) -> u16 {
        match self {
            Self::Tick => 1,
            Self::Price { .. } => 2,
            Self::Configure(_) => 3,
            Self::CreateSeries(_) => 4,
            Self::CreateAccount => 5,
            Self::Deposit { .. } => 6,
            Self::Withdraw { .. } => 7,
            Self::SetAccountFlag { .. } => 8,
            Self::SetAccountRiskCap { .. } => 9,
            Self::IssueKey(_) => 10,
            Self::RevokeKey { .. } => 11,
            Self::SetKeyLimits { .. } => 12,
            Self::PauseTrading { .. } => 13,
            Self::ResumeTrading => 14,
            Self::PlaceOrder { .. } => 15,
            Self::CancelOrder { .. } => 16,
            Self::CancelAll { .. } => 17,
            Self::SetRetention { .. } => 18,
            Self::SetRules { .. } => 19,
        }
    }

    /// The kind's name, for tools.
    pub fn kind_name(kind: u16) -> &'static str {
        match kind {
            1 => "tick",
            2 => "price",
            3 => "configure",
            4 => "create_series",
            5 => "create_account",
            6 => "deposit",
            7 => "withdraw",
            8 => "set_account_flag",
            9 => "set_account_risk_cap",
            10 => "issue_key",
            11 => "revoke_key",
            12 => "set_key_limits",
            13 => "pause_trading",
            14 => "resume_trading",
            15 => "place_order",
            16 => "cancel_order",
            17 => "cancel_all",
            18 => "set_retention",
            19 => "set_rules",
            _ => "unknown",
        }
    }
}
