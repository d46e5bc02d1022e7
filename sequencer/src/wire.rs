//! Text forms of money and prices, shared by the gateway, the tools and the
//! sequencer's messages so that every place writes them the same way.

use crate::types::{Cents, PriceCents};

/// Cents as dollars with two decimals: `1234` -> `12.34`, `-5` -> `-0.05`.
pub fn dollars(cents: Cents) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// A price in cents as the spec writes it: `55` -> `0.55`.
pub fn price(cents: PriceCents) -> String {
    format!("0.{cents:02}")
}

/// An average price of `cost` cents over `count` contracts, in dollars with
/// up to four decimals (rounded half up), trailing zeros after the second
/// decimal dropped: `0.55`, `0.5533`.
pub fn average_price(cost: Cents, count: u64) -> String {
    if count == 0 {
        return "0.00".to_string();
    }
    // Hundredths of a cent, rounded half up.
    let scaled = (cost.unsigned_abs() as u128 * 100 + u128::from(count) / 2) / u128::from(count);
    let whole = scaled / 10_000;
    let frac = scaled % 10_000;
    let mut text = format!("{whole}.{frac:04}");
    while text.ends_with('0') && text.len() > text.find('.').unwrap_or(0) + 3 {
        text.pop();
    }
    text
}

/// An underlying price held as value x 10^8, with at least two decimals.
pub fn price_e8(value: i64) -> String {
    let sign = if value < 0 { "-" } else { "" };
    let abs = value.unsigned_abs();
    let mut text = format!("{sign}{}.{:08}", abs / 100_000_000, abs % 100_000_000);
    while text.ends_with('0') && text.len() > text.find('.').unwrap_or(0) + 3 {
        text.pop();
    }
    text
}

/// Parses a positive decimal such as `97123.45` into value x 10^8.
pub fn parse_e8(text: &str) -> Option<i64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || whole.len() > 10 || frac.len() > 8 {
        return None;
    }
    if !whole.bytes().all(|c| c.is_ascii_digit()) || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let frac_value: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10i64.pow(8 - frac.len() as u32)
    };
    Some(whole * 100_000_000 + frac_value)
}

/// Parses a dollar amount with at most two decimals into cents.
pub fn parse_dollars(text: &str) -> Option<Cents> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || whole.len() > 12 || frac.len() > 2 {
        return None;
    }
    if !whole.bytes().all(|c| c.is_ascii_digit()) || !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let frac: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * if frac.len() == 1 { 10 } else { 1 }
    };
    Some(whole * 100 + frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(dollars(1234), "12.34");
        assert_eq!(dollars(-5), "-0.05");
        assert_eq!(price(5), "0.05");
        assert_eq!(average_price(110, 2), "0.55");
        assert_eq!(average_price(166, 3), "0.5533");
        assert_eq!(average_price(100, 1), "1.00");
        assert_eq!(price_e8(9_712_345_000_000), "97123.45");
        assert_eq!(price_e8(150_000_000), "1.50");
        assert_eq!(parse_e8("97123.45"), Some(9_712_345_000_000));
        assert_eq!(parse_e8("1"), Some(100_000_000));
        assert_eq!(parse_e8("1.123456789"), None);
        assert_eq!(parse_e8("-1"), None);
        assert_eq!(parse_dollars("20"), Some(2000));
        assert_eq!(parse_dollars("0.5"), Some(50));
        assert_eq!(parse_dollars("1.234"), None);
    }
}
