//! Every limit of SPEC.md's Limits table, and the venue's own bounds, as named
//! constants. Nothing else in the workspace writes these numbers down.

/// Lowest limit price, in cents (`0.01`).
pub const PRICE_CENTS_MIN: u8 = 1;
/// Highest limit price, in cents (`0.99`).
pub const PRICE_CENTS_MAX: u8 = 99;
/// One contract pays this many cents when it wins.
pub const PAYOUT_CENTS: i64 = 100;
/// Smallest order, in contracts.
pub const ORDER_COUNT_MIN: u32 = 1;
/// Largest order, in contracts.
pub const ORDER_COUNT_MAX: u32 = 10_000;
/// Longest client_order_id, in bytes.
pub const CLIENT_ORDER_ID_LEN_MAX: usize = 64;
/// Longest series ticker (1 leading character plus 63).
pub const SERIES_TICKER_LEN_MAX: usize = 64;
/// Longest market ticker: series, `-YYMMDD-HHMM-HHMM`, and a `dNN` suffix.
pub const MARKET_TICKER_LEN_MAX: usize = SERIES_TICKER_LEN_MAX + 17 + 3;
/// GET /portfolio/orders lists the orders of this window.
pub const ORDER_LIST_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;
/// Fills size bound.
pub const FILLS_LIMIT_MIN: u32 = 1;
/// Fills size bound.
pub const FILLS_LIMIT_MAX: u32 = 500;
/// Default page size of the fills, orders, markets and trades lists.
pub const LIST_LIMIT_DEFAULT: u32 = 100;
/// Largest page of the markets, orders and trades lists.
pub const LIST_LIMIT_MAX: u32 = 1000;
/// Active keys per account.
pub const KEYS_ACTIVE_PER_ACCOUNT_MAX: usize = 5;
/// Addresses on one key's IP allowlist.
pub const KEY_IP_ALLOWLIST_MAX: usize = 10;
/// Shortest key expiry, in days.
pub const KEY_EXPIRY_DAYS_MIN: u32 = 1;
/// Longest key expiry, in days.
pub const KEY_EXPIRY_DAYS_MAX: u32 = 365;
/// Longest key name.
pub const KEY_NAME_LEN_MAX: usize = 64;
/// Longest key id.
pub const KEY_ID_LEN_MAX: usize = 32;
/// Default max order of a trade key without its own limit: $20.
pub const KEY_DEFAULT_MAX_ORDER_CENTS: u64 = 2_000;
/// Default max per day of a trade key without its own limit: $500.
pub const KEY_DEFAULT_MAX_DAILY_CENTS: u64 = 50_000;
/// New orders per second per key.
pub const NEW_ORDERS_PER_SECOND: u32 = 10;
/// Burst of new orders per key.
pub const NEW_ORDERS_BURST: u32 = 20;
/// Websocket connections per IP address.
pub const WS_CONNECTIONS_PER_IP: u32 = 20;
/// Websocket subscriptions per connection.
pub const WS_SUBSCRIPTIONS_PER_CONNECTION: u32 = 100;
/// Websocket commands per second per connection.
pub const WS_COMMANDS_PER_SECOND: u32 = 10;
/// Websocket command burst per connection.
pub const WS_COMMANDS_BURST: u32 = 20;
/// Largest client websocket message, in bytes (64 KB).
pub const WS_MESSAGE_BYTES_MAX: usize = 64 * 1024;
/// The server pings every this many milliseconds.
pub const WS_PING_INTERVAL_MS: u64 = 10_000;
/// Tickers per websocket command.
pub const WS_TICKERS_PER_COMMAND: usize = 100;
/// Symbols per websocket command.
pub const WS_SYMBOLS_PER_COMMAND: usize = 64;
/// Levels per side that enter the book checksum.
pub const CHECKSUM_LEVELS: usize = 10;
/// Milliseconds in a day: key daily limits reset at 00:00 UTC.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// Underlying prints kept per symbol (enough to find a window's price to beat).
pub const PRICE_HISTORY_PER_SYMBOL_MAX: usize = 4096;
/// Windows a series may list ahead.
pub const SERIES_LIST_AHEAD_MAX: u32 = 96;
/// Shortest window of a series: one minute.
pub const SERIES_WINDOW_MS_MIN: u64 = 60_000;
/// Longest window of a series: 99 days, the most the ticker's `dNN` suffix can say.
pub const SERIES_WINDOW_MS_MAX: u64 = 99 * DAY_MS;
/// Fee rates are in basis points; 10,000 is 100 %.
pub const FEE_BPS_MAX: u32 = 10_000;
/// Largest deposit, withdrawal or cap, in cents ($10 billion), so no sum overflows.
pub const MONEY_CENTS_MAX: i64 = 1_000_000_000_000;
/// Longest underlying symbol.
pub const SYMBOL_LEN_MAX: usize = 32;
/// Highest epoch millisecond value on the wire (2^53 - 1).
pub const TS_MS_MAX: u64 = 9_007_199_254_740_991;
/// Records a filtered list of the live state looks at per request (the
/// orders of the last day, the live fills): lists are read on the sequencer
/// thread, so a filter that matches little must not walk a whole day. A
/// page that reaches it answers what it found and a cursor that resumes
/// right after the last record looked at (it may be short or empty, and
/// never skips a record).
pub const LIVE_SCAN_MAX: usize = 10_000;
/// The business rules this build applies, as journaled by `SetRules`
/// (`State::rules`):
/// - 0: the rules before versions were journaled;
/// - 1 (sixth session): a window opens at the first print after its open,
///   on the last print at or before it (0: at the first command after the
///   open, on the last print at or before it known then); a print more
///   than `PRINT_AHEAD_MS_MAX` ahead of the venue's clock is refused;
/// - 2 (eleventh session): a sell counts towards the key's max order and
///   max per day at the prices it fills at on entry (the resting buyers'),
///   not at its limit alone; a buy counts towards the market cap only by
///   what it adds (pairs it mints, the part that rests), not by the part
///   that takes over contracts from resting sells; suspending an account
///   cancels its resting orders (it can no longer cancel them itself).
pub const RULES_CURRENT: u32 = 2;
/// How far a print's `t_ms` may be ahead of the venue's clock (the stamp
/// of the command that brings it): room for a feed's clock running a
/// little fast, not for a print from the future. One print far ahead would
/// open and settle windows on itself and make every later real print
/// "before the symbol's last print".
pub const PRINT_AHEAD_MS_MAX: u64 = 5_000;
