//! Small value types shared by commands, state, replies and events.

use rkyv::{Archive, Deserialize, Serialize};

use crate::limits::{CLIENT_ORDER_ID_LEN_MAX, PRICE_CENTS_MAX, PRICE_CENTS_MIN};

/// A sequence number stamped by the sequencer input.
pub type Seq = u64;
/// Epoch milliseconds, UTC.
pub type TsMs = u64;
/// Money in whole cents. Signed so that a bug shows as a negative, not a wrap.
pub type Cents = i64;
/// Index of an account (1-based on the wire).
pub type AccountId = u32;
/// Index of a key in the registry.
pub type KeyIdx = u32;
/// Index of a market.
pub type MarketId = u32;
/// A market id no window is ever given (ids count up from 0): the
/// gateway's stand-in for a ticker that was never listed, so that an order
/// naming one meets every check in the order of precedence (permission,
/// idempotency, pause, ...) and is refused as not on the order book only
/// where any unopened market would be.
pub const UNLISTED_MARKET: MarketId = MarketId::MAX;
/// Index of a series.
pub type SeriesId = u32;
/// Order number, assigned in sequence from 1.
pub type OrderId = u64;
/// Fill number, assigned in sequence from 1.
pub type FillId = u64;

macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[rkyv(compare(PartialEq), derive(Debug))]
        pub enum $name { $($variant),+ }
        impl $name {
            /// The value as written on the wire.
            pub const fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }
            /// Parses the wire spelling.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some(Self::$variant),)+ _ => None }
            }
        }
    };
}

wire_enum!(
    /// One of a market's two outcomes; also names the two bid sides of its book.
    Outcome { Up = "up", Down = "down" }
);
wire_enum!(
    /// Buy opens or adds to a position; sell sells contracts held.
    Action { Buy = "buy", Sell = "sell" }
);
wire_enum!(
    /// How long an order may rest.
    TimeInForce { GoodTillCanceled = "good_till_canceled", ImmediateOrCancel = "immediate_or_cancel" }
);
wire_enum!(
    /// Order status on the wire.
    OrderStatus { Resting = "resting", Executed = "executed", Canceled = "canceled" }
);
wire_enum!(
    /// Market status; `scheduled -> open -> closed -> settled`.
    MarketStatus { Scheduled = "scheduled", Open = "open", Closed = "closed", Settled = "settled" }
);
wire_enum!(
    /// The environment a server runs, and the one a key belongs to.
    Environment { Live = "live", Test = "test" }
);

impl Outcome {
    /// The other outcome.
    pub const fn other(self) -> Self {
        match self {
            Self::Up => Self::Down,
            Self::Down => Self::Up,
        }
    }
    /// Index 0 for up, 1 for down.
    pub const fn index(self) -> usize {
        match self {
            Self::Up => 0,
            Self::Down => 1,
        }
    }
}

impl Action {
    /// The book side an order of this outcome and action rests on (DESIGN §2):
    /// a buy rests on its own outcome, a sell is a bid on the other outcome.
    pub const fn book_side(self, outcome: Outcome) -> Outcome {
        match self {
            Self::Buy => outcome,
            Self::Sell => outcome.other(),
        }
    }
}

/// A price in whole cents, 1 to 99, on some outcome's scale.
pub type PriceCents = u8;

/// Converts a price between the two outcomes' scales: `1 - p`.
pub const fn flip(price: PriceCents) -> PriceCents {
    100 - price
}

/// True when `price` is on the 1-cent grid from 0.01 to 0.99.
pub const fn price_in_range(price: PriceCents) -> bool {
    price >= PRICE_CENTS_MIN && price <= PRICE_CENTS_MAX
}

/// A client_order_id stored inline (no allocation per order). Always holds a
/// value that matched `^[A-Za-z0-9._:-]{1,64}$` when it was made through `new`.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[rkyv(derive(Debug, PartialEq, Eq, PartialOrd, Ord))]
pub struct ClientOrderId {
    len: u8,
    bytes: [u8; CLIENT_ORDER_ID_LEN_MAX],
}

impl ClientOrderId {
    /// Checks the spec's pattern and stores the id; `None` if it does not match.
    pub fn new(text: &str) -> Option<Self> {
        let raw = text.as_bytes();
        if !Self::pattern_holds(raw) {
            return None;
        }
        let mut bytes = [0u8; CLIENT_ORDER_ID_LEN_MAX];
        bytes[..raw.len()].copy_from_slice(raw);
        Some(Self {
            len: raw.len() as u8,
            bytes,
        })
    }

    /// The spec's pattern, `^[A-Za-z0-9._:-]{1,64}$`, on raw bytes.
    fn pattern_holds(raw: &[u8]) -> bool {
        (1..=CLIENT_ORDER_ID_LEN_MAX).contains(&raw.len())
            && raw
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        let len = usize::from(self.len).min(CLIENT_ORDER_ID_LEN_MAX);
        // Only ASCII enters through `new`; a journal record that was tampered
        // with could hold other bytes, which show as an empty id, never a panic.
        std::str::from_utf8(&self.bytes[..len]).unwrap_or("")
    }

    /// True when the id still satisfies the pattern (it may come from a journal).
    /// Checked in place on every order, so no copy: the bytes in use match
    /// the pattern and every byte past them is zero, as `new` leaves them.
    pub fn is_valid(&self) -> bool {
        let len = usize::from(self.len);
        len <= CLIENT_ORDER_ID_LEN_MAX
            && Self::pattern_holds(&self.bytes[..len])
            && self.bytes[len..].iter().fold(0, |any, &b| any | b) == 0
    }
}

impl std::hash::Hash for ClientOrderId {
    /// Hashes the bytes in use only: the rest is always zero, and the
    /// running event hash sees one of these in every order event.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let len = usize::from(self.len).min(CLIENT_ORDER_ID_LEN_MAX);
        state.write(&self.bytes[..len]);
    }
}

impl ClientOrderId {
    /// A fixed, seedless 64-bit hash of the id and the account using it: the
    /// idempotency index's key.
    pub fn index_hash(&self, account: u32) -> u64 {
        let len = usize::from(self.len).min(CLIENT_ORDER_ID_LEN_MAX);
        let mut h =
            0x9e37_79b9_7f4a_7c15u64 ^ u64::from(account).wrapping_mul(0xff51_afd7_ed55_8ccd);
        // Whole words: the bytes past `len` are zero in every id made by
        // `new`, and any bytes at all still hash the same on every machine.
        for word in self.bytes.chunks_exact(8).take(len.div_ceil(8)) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            h = (h ^ word)
                .wrapping_mul(0xc4ce_b9fe_1a85_ec53)
                .rotate_left(31);
        }
        h ^= len as u64;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

impl std::fmt::Debug for ClientOrderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// What a key may do.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[rkyv(derive(Debug))]
pub struct Scopes {
    /// `read`: read the account.
    pub read: bool,
    /// `trade`: place and cancel orders.
    pub trade: bool,
}

impl Scopes {
    /// The spec's strings, in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        let mut names = Vec::with_capacity(2);
        if self.read {
            names.push("read");
        }
        if self.trade {
            names.push("trade");
        }
        names
    }
    /// Parses a comma-separated list such as `read,trade`.
    pub fn parse_list(text: &str) -> Option<Self> {
        let mut scopes = Self::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "read" => scopes.read = true,
                "trade" => scopes.trade = true,
                _ => return None,
            }
        }
        (scopes.read || scopes.trade).then_some(scopes)
    }
}

/// The optional limits of one key, in cents and counts.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[rkyv(derive(Debug))]
pub struct KeyLimits {
    /// Largest single order (count times limit price).
    pub max_order_cents: Option<u64>,
    /// Notional the key may commit per UTC day.
    pub max_daily_cents: Option<u64>,
    /// Orders of this key that may rest at once in one market (SPEC: "max
    /// resting orders per market").
    pub max_open_orders: Option<u32>,
    /// Series the key may trade; `None` means all.
    pub series: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client_order_id that did not come through `new` (a journal record
    /// someone edited) is refused by `is_valid` whatever is wrong with it.
    #[test]
    fn client_order_id_validity_is_the_pattern_in_place() {
        let good = ClientOrderId::new("Ab9._:-").expect("matches the pattern");
        assert!(good.is_valid());
        assert!(ClientOrderId::new(&"x".repeat(64)).unwrap().is_valid());
        assert!(ClientOrderId::new(&"x".repeat(65)).is_none());
        assert!(ClientOrderId::new("").is_none());
        assert!(ClientOrderId::new("a b").is_none());
        let tampered = |f: &dyn Fn(&mut ClientOrderId)| {
            let mut id = good;
            f(&mut id);
            id.is_valid()
        };
        assert!(!tampered(&|id| id.len = 0));
        assert!(!tampered(&|id| id.len = 65));
        assert!(!tampered(&|id| id.len = u8::MAX));
        assert!(!tampered(&|id| id.bytes[2] = b' '));
        assert!(!tampered(&|id| id.bytes[1] = 0xc3));
        // A byte past the length: the id would compare and hash differently
        // from the one `new` makes of the same text.
        assert!(!tampered(&|id| id.bytes[40] = b'a'));
        // Shortened in place: the bytes it drops are not zero.
        assert!(!tampered(&|id| id.len = 3));
        assert!(tampered(&|id| {
            id.len = 3;
            id.bytes[3..].fill(0);
        }));
    }
}
