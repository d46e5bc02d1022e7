//! Patterns and ranges of SPEC.md, each in one place. The gateway parses
//! wire strings with these; the sequencer checks typed commands with them
//! again, since a journal may come from anywhere.

use crate::limits::{
    MARKET_TICKER_LEN_MAX, ORDER_COUNT_MAX, ORDER_COUNT_MIN, SERIES_TICKER_LEN_MAX, SYMBOL_LEN_MAX,
};
use crate::types::PriceCents;

/// The refusal of an order's price, the same from the gateway's parse and
/// the sequencer's check of a typed command.
pub const PRICE_REFUSAL: &str =
    "Field price must be 0.01 to 0.99 in whole cents, such as \"0.55\".";
/// The refusal of an order's client_order_id.
pub const CLIENT_ORDER_ID_REFUSAL: &str =
    "Field client_order_id must match ^[A-Za-z0-9._:-]{1,64}$.";

/// The refusal of an order's count outside its range.
pub fn count_refusal() -> String {
    format!("Field count must be {ORDER_COUNT_MIN} to {ORDER_COUNT_MAX}.")
}

/// The refusal of an integer query parameter (a page size, a depth)
/// outside `min..=max`.
pub fn range_refusal(name: &str, min: u32, max: u32) -> String {
    format!("Parameter {name} must be an integer from {min} to {max}.")
}

/// Series ticker: `^[a-z0-9][a-z0-9-]{0,63}$`.
pub fn is_series_ticker(text: &str) -> bool {
    let b = text.as_bytes();
    !b.is_empty()
        && b.len() <= SERIES_TICKER_LEN_MAX
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Market ticker: `^[a-z0-9][a-z0-9-]{0,63}-\d{6}-\d{4}-\d{4}(d\d{1,2})?$`.
pub fn is_market_ticker(text: &str) -> bool {
    if text.len() > MARKET_TICKER_LEN_MAX {
        return false;
    }
    let mut rest = text;
    // Optional `d\d{1,2}` suffix: try with and without it, since the series
    // part may itself end in something like `d1`.
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let core_ok = |core: &str| -> bool {
        let parts: Vec<&str> = core.rsplitn(4, '-').collect();
        parts.len() == 4
            && parts[0].len() == 4
            && digits(parts[0])
            && parts[1].len() == 4
            && digits(parts[1])
            && parts[2].len() == 6
            && digits(parts[2])
            && is_series_ticker(parts[3])
    };
    if core_ok(rest) {
        return true;
    }
    if let Some(pos) = rest.rfind('d') {
        let suffix = &rest[pos + 1..];
        if (1..=2).contains(&suffix.len()) && digits(suffix) {
            rest = &rest[..pos];
            return core_ok(rest);
        }
    }
    false
}

/// Underlying symbol: upper case letters, digits, `.`, `:` and `-`, such as
/// `AAPL`, `BRK.B` or `X:BTCUSD`.
pub fn is_symbol(text: &str) -> bool {
    let b = text.as_bytes();
    !b.is_empty()
        && b.len() <= SYMBOL_LEN_MAX
        && b[0].is_ascii_uppercase()
        && b.iter().all(|&c| {
            c.is_ascii_uppercase() || c.is_ascii_digit() || matches!(c, b'.' | b':' | b'-')
        })
}

/// Key id: `^[a-z0-9]{1,32}$`; it sits between underscores in the key.
pub fn is_key_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= crate::limits::KEY_ID_LEN_MAX
        && text
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// Parses an order price `^0\.(0[1-9]|[1-9]\d)$` into cents.
pub fn parse_price(text: &str) -> Option<PriceCents> {
    let b = text.as_bytes();
    if b.len() != 4
        || b[0] != b'0'
        || b[1] != b'.'
        || !b[2].is_ascii_digit()
        || !b[3].is_ascii_digit()
    {
        return None;
    }
    let cents = (b[2] - b'0') * 10 + (b[3] - b'0');
    (cents >= 1).then_some(cents)
}

/// Parses a count `^(0|[1-9]\d*)$` (any size, saturating) for range checks.
pub fn parse_count(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.is_empty() || (b[0] == b'0' && b.len() > 1) || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |n, &c| {
        n.saturating_mul(10).saturating_add(u64::from(c - b'0'))
    }))
}

/// True when an order count is in the allowed range.
pub fn count_in_range(count: u64) -> bool {
    (u64::from(ORDER_COUNT_MIN)..=u64::from(ORDER_COUNT_MAX)).contains(&count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickers() {
        assert!(is_series_ticker("btc-15m"));
        assert!(is_series_ticker("0"));
        assert!(!is_series_ticker("-btc"));
        assert!(!is_series_ticker("BTC"));
        assert!(!is_series_ticker(""));
        assert!(!is_series_ticker(&"a".repeat(65)));
        assert!(is_market_ticker("btc-15m-261121-2100-2115"));
        assert!(is_market_ticker("btc-1d-261121-2100-2100d1"));
        assert!(is_market_ticker("btc-1d-261121-2100-2100d12"));
        assert!(!is_market_ticker("btc-1d-261121-2100-2100d123"));
        assert!(!is_market_ticker("btc-261121-2100"));
        assert!(!is_market_ticker("btc-26112-2100-2115"));
        assert!(!is_market_ticker("Btc-261121-2100-2115"));
    }

    #[test]
    fn prices_and_counts() {
        assert_eq!(parse_price("0.01"), Some(1));
        assert_eq!(parse_price("0.99"), Some(99));
        assert_eq!(parse_price("0.50"), Some(50));
        for bad in [
            "0.00", "1.00", "0.5", ".50", "0.500", "00.5", "0,50", "", "0.-1",
        ] {
            assert_eq!(parse_price(bad), None, "{bad}");
        }
        assert_eq!(parse_count("0"), Some(0));
        assert_eq!(parse_count("10000"), Some(10_000));
        assert_eq!(parse_count("99999999999999999999999"), Some(u64::MAX));
        for bad in ["", "01", "-1", "1.0", " 1", "1e3"] {
            assert_eq!(parse_count(bad), None, "{bad}");
        }
        assert!(count_in_range(1) && count_in_range(10_000));
        assert!(!count_in_range(0) && !count_in_range(10_001));
    }

    #[test]
    fn symbols_and_key_ids() {
        assert!(is_symbol("X:BTCUSD") && is_symbol("AAPL") && is_symbol("BRK.B"));
        assert!(!is_symbol("btc") && !is_symbol("") && !is_symbol(":X"));
        assert!(is_key_id("abc123") && !is_key_id("ab_c") && !is_key_id(""));
    }
}
