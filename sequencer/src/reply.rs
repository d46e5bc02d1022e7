//! The sequencer's answers: business outcomes are data (a `Reject` with one
//! of the spec's codes), never panics or `Err`s.

use crate::state::Order;
use crate::types::{AccountId, KeyIdx, OrderId};

/// The spec's error codes, each with its HTTP status (DESIGN §5 fixes the
/// ones the spec leaves open). This is the one table that maps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    BadRequest,
    NotFound,
    SeriesNotFound,
    MarketNotFound,
    MethodNotAllowed,
    RateLimited,
    Unauthorized,
    Forbidden,
    OrderNotFound,
    IdempotencyConflict,
    AccountBusy,
    MarketNotOpen,
    InsufficientBalance,
    LimitExceeded,
    PostOnlyCross,
    SelfTrade,
    TradingPaused,
    OrderRejected,
    InternalError,
    ExchangeUnavailable,
}

impl ErrorCode {
    /// Every code, in the spec's order.
    pub const ALL: [ErrorCode; 20] = [
        Self::BadRequest,
        Self::NotFound,
        Self::SeriesNotFound,
        Self::MarketNotFound,
        Self::MethodNotAllowed,
        Self::RateLimited,
        Self::Unauthorized,
        Self::Forbidden,
        Self::OrderNotFound,
        Self::IdempotencyConflict,
        Self::AccountBusy,
        Self::MarketNotOpen,
        Self::InsufficientBalance,
        Self::LimitExceeded,
        Self::PostOnlyCross,
        Self::SelfTrade,
        Self::TradingPaused,
        Self::OrderRejected,
        Self::InternalError,
        Self::ExchangeUnavailable,
    ];

    /// The code as written in the error body.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "BAD_REQUEST",
            Self::NotFound => "NOT_FOUND",
            Self::SeriesNotFound => "SERIES_NOT_FOUND",
            Self::MarketNotFound => "MARKET_NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::RateLimited => "RATE_LIMITED",
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::OrderNotFound => "ORDER_NOT_FOUND",
            Self::IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            Self::AccountBusy => "ACCOUNT_BUSY",
            Self::MarketNotOpen => "MARKET_NOT_OPEN",
            Self::InsufficientBalance => "INSUFFICIENT_BALANCE",
            Self::LimitExceeded => "LIMIT_EXCEEDED",
            Self::PostOnlyCross => "POST_ONLY_CROSS",
            Self::SelfTrade => "SELF_TRADE",
            Self::TradingPaused => "TRADING_PAUSED",
            Self::OrderRejected => "ORDER_REJECTED",
            Self::InternalError => "INTERNAL_ERROR",
            Self::ExchangeUnavailable => "EXCHANGE_UNAVAILABLE",
        }
    }

    /// The HTTP status that carries the code.
    pub const fn http_status(self) -> u16 {
        match self {
            Self::BadRequest
            | Self::MarketNotOpen
            | Self::InsufficientBalance
            | Self::LimitExceeded
            | Self::PostOnlyCross
            | Self::SelfTrade
            | Self::OrderRejected => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound | Self::SeriesNotFound | Self::MarketNotFound | Self::OrderNotFound => {
                404
            }
            Self::MethodNotAllowed => 405,
            Self::IdempotencyConflict | Self::AccountBusy => 409,
            Self::RateLimited => 429,
            Self::InternalError => 500,
            Self::TradingPaused | Self::ExchangeUnavailable => 503,
        }
    }
}

/// A refused command: a code and a message for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    pub code: ErrorCode,
    pub message: String,
}

impl Reject {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.code.http_status(),
            self.code.as_str(),
            self.message
        )
    }
}

/// What a command produced for its caller.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Done; nothing to return.
    Ok,
    /// The command was refused and changed nothing.
    Rejected(Reject),
    /// A new account's id.
    AccountCreated { account: AccountId },
    /// A key was issued at this registry index.
    KeyIssued { key: KeyIdx },
    /// The order as the book holds it after the call. `created` is false when
    /// an idempotent retry returned the order already placed.
    Order { order: Order, created: bool },
    /// The orders a cancel-all cancelled, oldest first.
    Canceled { order_ids: Vec<OrderId> },
    /// A cancel of an order that ended longer ago than the history tail
    /// and left the live state (so it rests no more, and the cancel changed
    /// nothing): the answer is the order as the history store holds it,
    /// shown only if it belongs to `account` (DESIGN §5: a retried cancel
    /// is always safe).
    OrderInHistory {
        order_id: OrderId,
        account: AccountId,
    },
}

impl Reply {
    /// Shorthand for a rejection.
    pub fn reject(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Rejected(Reject::new(code, message))
    }
    /// True when the command was refused.
    pub fn is_rejected(&self) -> bool {
        matches!(self, Self::Rejected(_))
    }
    /// The rejection, if any.
    pub fn rejection(&self) -> Option<&Reject> {
        match self {
            Self::Rejected(reject) => Some(reject),
            _ => None,
        }
    }
}

impl From<Reject> for Reply {
    fn from(reject: Reject) -> Self {
        Self::Rejected(reject)
    }
}
