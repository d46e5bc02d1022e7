//! Fees and holds (DESIGN §2): one implementation, used by matching, by the
//! hold formula and by the invariant checkers.

use crate::types::{Cents, PriceCents};

/// `ceil_to_cent(rate * count * P * (1 - P))` with the rate in basis points
/// and `P` in cents on the Up scale (the formula is the same on either scale).
pub fn fee_cents(rate_bps: u32, count: u32, price: PriceCents) -> Cents {
    let p = u64::from(price.min(100));
    let numerator = u64::from(rate_bps) * u64::from(count) * p * (100 - p);
    // bps (1e4) x cents^2 (1e2 per cent of the dollar squared) -> cents.
    numerator.div_ceil(1_000_000) as Cents
}

/// The fee of a one-contract fill at the worst price an order at `price`
/// (own scale) can fill at: `P (1 - P)` grows up to 0.50, and a buy fills
/// at its limit or better, so the worst is `min(price, 0.50)`. The larger of
/// the two rates applies, since a part of any order may fill either way.
pub fn max_fee_per_contract(price: PriceCents, taker_bps: u32, maker_bps: u32) -> Cents {
    fee_cents(taker_bps.max(maker_bps), 1, price.min(50))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fee_rounds_up_to_the_cent() {
        // 0.07 * 100 * 0.50 * 0.50 = 1.75 dollars.
        assert_eq!(fee_cents(700, 100, 50), 175);
        // 0.07 * 1 * 0.01 * 0.99 = 0.000693 dollars -> 1 cent.
        assert_eq!(fee_cents(700, 1, 1), 1);
        assert_eq!(fee_cents(0, 10_000, 50), 0);
        // 0.07 * 3 * 0.40 * 0.60 = 0.0504 -> 6 cents.
        assert_eq!(fee_cents(700, 3, 40), 6);
    }

    #[test]
    fn a_hold_always_covers_the_fee_of_any_fill() {
        for price in 1..=99u8 {
            let max = max_fee_per_contract(price, 700, 0);
            for fill_price in 1..=price {
                for count in [1u32, 2, 7, 10_000] {
                    assert!(fee_cents(700, count, fill_price) <= Cents::from(count) * max);
                }
            }
        }
    }

    #[test]
    fn proceeds_of_a_sell_never_go_below_its_fee() {
        for price in 1..=99u8 {
            for count in [1u32, 3, 10_000] {
                assert!(fee_cents(10_000, count, price) <= Cents::from(count) * Cents::from(price));
            }
        }
    }
}
