//! The event stream both servers carry, as a pure function of the event's
//! global index `g`: which order the venue's driver places or cancels, and
//! so which book change (price, signed contracts) every subscriber must
//! see for it. The bare server sends the same change in the same bytes.
//!
//! Orders are passive buys of Up at 1 to 45 cents on a book with nothing
//! on the other side, so none can trade: each command moves exactly one
//! level and the venue publishes exactly one `orderbook_delta` for it.
//! Before the clients subscribe, [`SEED_ORDERS`] orders are placed (orders
//! 0 to 127, in the snapshot); then even events place order `128 + g/2`
//! and odd events cancel order `(g-1)/2`, oldest first, so about 129
//! orders rest at any time and each order is canceled 257 events after it
//! was placed.

use bytes::Bytes;
use serde_json::json;

/// Orders resting before any client subscribes.
pub const SEED_ORDERS: u64 = 128;
/// The channel, and the envelope's `type`, of every data frame.
pub const KIND: &str = "orderbook_delta";

/// What event `g` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Places order `k`.
    Place(u64),
    /// Cancels order `k`.
    Cancel(u64),
}

pub fn step(g: u64) -> Step {
    if g.is_multiple_of(2) {
        Step::Place(SEED_ORDERS + g / 2)
    } else {
        Step::Cancel((g - 1) / 2)
    }
}

/// Limit price of order `k`, in cents (1 to 45).
pub fn price_of(k: u64) -> u8 {
    1 + (k % 45) as u8
}

/// Contracts of order `k` (1 to 97).
pub fn count_of(k: u64) -> u32 {
    1 + ((k * 37) % 97) as u32
}

/// The book change of event `g`: the level's price in cents and the signed
/// change in contracts.
pub fn expected(g: u64) -> (u8, i64) {
    match step(g) {
        Step::Place(k) => (price_of(k), i64::from(count_of(k))),
        Step::Cancel(k) => (price_of(k), -i64::from(count_of(k))),
    }
}

/// The `msg` of event `g` exactly as the venue's publisher writes it (the
/// same `json!` object, so the same key order), with a stand-in checksum
/// of the venue's width: the bare server keeps no book.
pub fn bare_msg(ticker: &str, g: u64) -> Bytes {
    let (price, delta) = expected(g);
    let checksum = (g as u32).wrapping_mul(2_654_435_761) | 0x8000_0000;
    let value = json!({
        "market_ticker": ticker,
        "outcome": "up",
        "price": sequencer::wire::price(price),
        "delta": delta.to_string(),
        "checksum": checksum,
    });
    Bytes::from(serde_json::to_vec(&value).expect("a JSON value serializes"))
}

/// What a client needs of a data frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub seq: u64,
    pub price: u8,
    pub delta: i64,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + needle.len())
}

fn digits(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value: u64 = 0;
    let mut n = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        n += 1;
    }
    (n > 0).then_some((value, n))
}

/// Reads an `orderbook_delta` envelope without a JSON parser (the client
/// must not be the bottleneck): `"seq":N`, `"price":"0.PP"` and
/// `"delta":"[-]N"`. `None` for any other frame.
pub fn parse(frame: &[u8]) -> Option<Parsed> {
    let head = br#"{"type":"orderbook_delta","#;
    if !frame.starts_with(head) {
        return None;
    }
    let at = find(frame, br#""seq":"#)?;
    let (seq, _) = digits(&frame[at..])?;
    let at = find(frame, br#""price":"0."#)?;
    let (price, n) = digits(&frame[at..])?;
    if n != 2 {
        return None;
    }
    let at = find(frame, br#""delta":""#)?;
    let negative = frame.get(at) == Some(&b'-');
    let (delta, _) = digits(&frame[at + usize::from(negative)..])?;
    let delta = i64::try_from(delta).ok()?;
    Some(Parsed {
        seq,
        price: price as u8,
        delta: if negative { -delta } else { delta },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_is_placed_once_then_canceled_once() {
        let mut resting: std::collections::BTreeSet<u64> = (0..SEED_ORDERS).collect();
        for g in 0..10_000 {
            match step(g) {
                Step::Place(k) => assert!(resting.insert(k)),
                Step::Cancel(k) => assert!(resting.remove(&k)),
            }
            assert!(resting.len() as u64 <= SEED_ORDERS + 1);
        }
    }

    #[test]
    fn a_frame_in_the_venues_envelope_parses() {
        let mut frame = Vec::new();
        let msg = bare_msg("ws-a-261121-0000-2400", 7);
        gateway::ws::protocol::envelope(&mut frame, KIND, 1, 9, 1_700_000_000_000, &msg);
        let parsed = parse(&frame).expect("parses");
        let (price, delta) = expected(7);
        assert_eq!(
            parsed,
            Parsed {
                seq: 9,
                price,
                delta
            }
        );
        assert!(delta < 0);
        assert_eq!(parse(br#"{"type":"orderbook_snapshot","sid":1}"#), None);
    }
}
