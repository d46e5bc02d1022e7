//! One market's order book: two bid sides, `up` and `down`, each with 99
//! price levels (1..=99 cents). An ask on one outcome is a bid on the other
//! (DESIGN §2), so every resting order sits on exactly one side.
//!
//! Orders at a level form an intrusive doubly linked FIFO over a slab of
//! small nodes, so add, cancel and fill are O(1) and a resting order costs one
//! 24-byte node. A bitmap per side finds the best level with one instruction.

use rkyv::{Archive, Deserialize, Serialize};

use crate::limits::{CHECKSUM_LEVELS, PRICE_CENTS_MAX};
use crate::types::{AccountId, OrderId, Outcome, PriceCents};

/// "No node" in the intrusive lists.
pub const NIL: u32 = u32::MAX;

/// A resting order's place in the book.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    pub order: OrderId,
    pub account: AccountId,
    pub remaining: u32,
    prev: u32,
    next: u32,
}

/// One price level: FIFO of nodes and the total contracts resting there.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Level {
    head: u32,
    tail: u32,
    /// Contracts resting at this level.
    pub total: u64,
}

const EMPTY_LEVEL: Level = Level {
    head: NIL,
    tail: NIL,
    total: 0,
};
const LEVELS: usize = PRICE_CENTS_MAX as usize + 1;

/// One bid side.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Side {
    levels: [Level; LEVELS],
    /// Bit p set when level p holds orders; bits 0..64 in [0], 64..128 in [1].
    occupied: [u64; 2],
}

impl Default for Side {
    fn default() -> Self {
        Self {
            levels: [EMPTY_LEVEL; LEVELS],
            occupied: [0; 2],
        }
    }
}

impl Side {
    fn set_bit(&mut self, price: PriceCents, on: bool) {
        let (word, bit) = (usize::from(price) / 64, u64::from(price) % 64);
        if on {
            self.occupied[word] |= 1 << bit;
        } else {
            self.occupied[word] &= !(1 << bit);
        }
    }

    /// Highest price with orders.
    pub fn best(&self) -> Option<PriceCents> {
        if self.occupied[1] != 0 {
            return Some((127 - self.occupied[1].leading_zeros()) as PriceCents);
        }
        if self.occupied[0] != 0 {
            return Some((63 - self.occupied[0].leading_zeros()) as PriceCents);
        }
        None
    }

    /// Highest price with orders strictly below `price`.
    pub fn next_below(&self, price: PriceCents) -> Option<PriceCents> {
        let p = u32::from(price);
        let low = if p >= 64 {
            self.occupied[0]
        } else {
            self.occupied[0] & ((1u64 << p) - 1)
        };
        let high = if p > 64 {
            self.occupied[1] & ((1u64 << (p - 64)) - 1)
        } else {
            0
        };
        if high != 0 {
            return Some((127 - high.leading_zeros()) as PriceCents);
        }
        if low != 0 {
            return Some((63 - low.leading_zeros()) as PriceCents);
        }
        None
    }

    /// The level at `price`.
    pub fn level(&self, price: PriceCents) -> &Level {
        &self.levels[usize::from(price)]
    }

    /// Levels best first, at most `max`, as (price, total).
    pub fn top(&self, max: usize) -> impl Iterator<Item = (PriceCents, u64)> + '_ {
        let mut cursor = self.best();
        std::iter::from_fn(move || {
            let price = cursor?;
            cursor = self.next_below(price);
            Some((price, self.levels[usize::from(price)].total))
        })
        .take(max)
    }
}

/// A market's book.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Book {
    /// Up then Down; empty (no allocation) once a settled market's book is
    /// released (two sides are about 5 KB).
    sides: Box<[Side]>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    resting: u32,
    /// Each side's checksum text as last written; derived, so it is not
    /// part of the state (not archived, hashed or compared).
    #[rkyv(with = rkyv::with::Skip)]
    cache: ChecksumCache,
}

/// Longest text of one level: `0.XX:` and a count of up to 20 digits.
const PIECE_MAX: usize = 25;
/// Bytes kept per level's text (the copy into a side's text is fixed-size).
const PIECE_BYTES: usize = 31;
/// Longest text of one side: ten levels and the commas between them.
const SIDE_TEXT_MAX: usize = CHECKSUM_LEVELS * (PIECE_MAX + 1);
/// Room for a side's label before its levels and `|down:` after them.
const SIDE_TEXT_EXTRA: usize = 3 + 6;

/// One level as text, `0.XX:count`, written when the level is next needed
/// after its count changed.
#[derive(Clone, Copy, Debug)]
struct Piece {
    bytes: [u8; PIECE_BYTES],
    len: u8,
}

const EMPTY_PIECE: Piece = Piece {
    bytes: [0; PIECE_BYTES],
    len: 0,
};

impl Piece {
    fn of(price: PriceCents, total: u64) -> Self {
        let mut piece = EMPTY_PIECE;
        let mut len = write_price(&mut piece.bytes, price);
        piece.bytes[len] = b':';
        len += 1;
        len += write_u64(&mut piece.bytes[len..], total);
        piece.len = len as u8;
        piece
    }
}

/// Most digits of a count rewritten in place (a level of 10^8 contracts
/// or more is rewritten with its side).
const DIGITS_PATCHED: usize = 8;
/// `POW10[n]` is 10^n.
const POW10: [u64; DIGITS_PATCHED + 1] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The bytes a count rewritten in place changed by (old xor new).
struct Digits {
    bytes: [u8; DIGITS_PATCHED],
    len: usize,
}

/// A set of price levels 0..128 (one bit each), in two words: a bit of a
/// `u128` at a variable place costs a few more instructions.
#[derive(Clone, Copy, Debug)]
struct Bits([u64; 2]);

impl Bits {
    const NONE: Self = Self([0; 2]);
    const ALL: Self = Self([u64::MAX; 2]);
    #[inline]
    fn has(&self, p: usize) -> bool {
        self.0[(p >> 6) & 1] & (1 << (p & 63)) != 0
    }
    #[inline]
    fn set(&mut self, p: usize) {
        self.0[(p >> 6) & 1] |= 1 << (p & 63);
    }
    #[inline]
    fn clear(&mut self, p: usize) {
        self.0[(p >> 6) & 1] &= !(1 << (p & 63));
    }
}

/// One side's part of the checksum text, the lowest price it includes,
/// and the text of every level. The up side's part is `up:` + its levels +
/// `|down:`, the down side's its levels alone: the whole text is the one
/// then the other.
#[derive(Clone, Debug)]
struct SideText {
    /// The text, with room for a whole piece past its longest length.
    bytes: [u8; SIDE_TEXT_EXTRA + SIDE_TEXT_MAX + PIECE_BYTES],
    len: usize,
    /// Where the levels start (after the label).
    head: usize,
    /// Lowest price among the levels written (0 when fewer than ten), so a
    /// change below it cannot change the text.
    floor: PriceCents,
    valid: bool,
    /// Bit p set when the piece of level p is out of date.
    stale: Bits,
    pieces: [Piece; LEVELS],
    /// Bit p set when level p is in the text (valid while the text is).
    shown: Bits,
    /// Where each shown level's piece starts in the text.
    offsets: [u16; LEVELS],
    /// Length of each shown level's piece in the text.
    lens: [u8; LEVELS],
}

impl SideText {
    fn new(label: &[u8]) -> Self {
        let mut bytes = [0; SIDE_TEXT_EXTRA + SIDE_TEXT_MAX + PIECE_BYTES];
        bytes[..label.len()].copy_from_slice(label);
        Self {
            bytes,
            len: label.len(),
            head: label.len(),
            floor: 0,
            valid: false,
            stale: Bits::ALL,
            pieces: [EMPTY_PIECE; LEVELS],
            shown: Bits::NONE,
            offsets: [0; LEVELS],
            lens: [0; LEVELS],
        }
    }

    /// Rewrites the count of a level in the text in place if it is shown,
    /// not emptied and as long as before. Says where the rewritten digits
    /// end and what they changed by (old xor new), or `None` when the
    /// level cannot be patched.
    fn patch(&mut self, price: PriceCents, total: u64) -> Option<(usize, Digits)> {
        let p = usize::from(price);
        if !self.shown.has(p) || total == 0 {
            return None;
        }
        // Patched in place: the same number of digits, at most eight
        // (larger counts are rewritten with their side).
        let n = usize::from(self.lens[p]) - 5;
        if n > DIGITS_PATCHED || total < POW10[n - 1] || total >= POW10[n] {
            return None;
        }
        // The digits, last first, straight into their place.
        let at = usize::from(self.offsets[p]) + 5;
        let mut diff = Digits {
            bytes: [0; DIGITS_PATCHED],
            len: n,
        };
        let mut v = total;
        for (byte, d) in self.bytes[at..at + n]
            .iter_mut()
            .zip(&mut diff.bytes[..n])
            .rev()
        {
            let new = b'0' + (v % 10) as u8;
            *d = *byte ^ new;
            *byte = new;
            v /= 10;
        }
        Some((at + n, diff))
    }

    /// Writes the side's ten best levels, best first, as `p:c,p:c`,
    /// formatting only the levels that changed since they were last written.
    fn rewrite(&mut self, side: &Side) {
        let mut occupied = u128::from(side.occupied[0]) | (u128::from(side.occupied[1]) << 64);
        let mut len = self.head;
        let mut written = 0;
        let mut lowest = 0;
        self.shown = Bits::NONE;
        while occupied != 0 && written < CHECKSUM_LEVELS {
            let price = 127 - occupied.leading_zeros() as usize;
            occupied &= !(1u128 << price);
            if self.stale.has(price) {
                self.pieces[price] = Piece::of(price as PriceCents, side.levels[price].total);
                self.stale.clear(price);
            }
            if written > 0 {
                self.bytes[len] = b',';
                len += 1;
            }
            let piece = &self.pieces[price];
            self.bytes[len..len + PIECE_BYTES].copy_from_slice(&piece.bytes);
            self.shown.set(price);
            self.offsets[price] = len as u16;
            self.lens[price] = piece.len;
            len += usize::from(piece.len);
            written += 1;
            lowest = price as PriceCents;
        }
        self.len = len;
        self.floor = if written == CHECKSUM_LEVELS {
            lowest
        } else {
            0
        };
        self.valid = true;
    }
}

/// Both sides' texts and the checksum they give.
#[derive(Clone, Debug)]
struct Texts {
    sides: [SideText; 2],
    /// The crc of the up side's part, while that part is valid: a change
    /// on the down side alone hashes only the down side's part.
    after_up: u32,
    /// Whether `after_up` is the crc of the up side's text as it is.
    up_hashed: bool,
    /// The checksum of the texts as they stand: kept through a count
    /// rewritten in place, cleared by any other change the text shows.
    crc: Option<u32>,
}

/// Per-side checksum texts kept between book changes: most changes touch
/// one side, often below its tenth level, and writing the levels as text
/// was most of the cost of a checksum. Each level's text is kept too, so a
/// change rewrites one number, not ten. Allocated at the first checksum.
#[derive(Clone, Debug, Default)]
pub struct ChecksumCache {
    texts: Option<Box<Texts>>,
}

impl PartialEq for ChecksumCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for ChecksumCache {}
impl std::hash::Hash for ChecksumCache {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl Default for Book {
    fn default() -> Self {
        Self {
            sides: Box::new([Side::default(), Side::default()]),
            nodes: Vec::new(),
            free: Vec::new(),
            resting: 0,
            cache: ChecksumCache::default(),
        }
    }
}

/// The side of a book that has none allocated.
static EMPTY_SIDE: Side = Side {
    levels: [EMPTY_LEVEL; LEVELS],
    occupied: [0; 2],
};

impl Book {
    /// The bid side of an outcome.
    #[inline]
    pub fn side(&self, outcome: Outcome) -> &Side {
        self.sides.get(outcome.index()).unwrap_or(&EMPTY_SIDE)
    }

    /// Frees an empty book's memory for good (a settled market's): reads
    /// then see two empty sides.
    pub fn release(&mut self) {
        debug_assert_eq!(self.resting, 0, "only an empty book is released");
        if self.resting == 0 {
            self.sides = Box::new([]);
            self.nodes = Vec::new();
            self.free = Vec::new();
            self.cache.texts = None;
        }
    }

    /// Orders resting on both sides.
    pub fn resting_orders(&self) -> u32 {
        self.resting
    }

    /// The node at an index handed out by `push`.
    pub fn node(&self, index: u32) -> &Node {
        &self.nodes[index as usize]
    }

    /// First node of a level, oldest first.
    pub fn head(&self, outcome: Outcome, price: PriceCents) -> u32 {
        self.side(outcome).levels[usize::from(price)].head
    }

    /// The node after `index` at its level.
    pub fn next(&self, index: u32) -> u32 {
        self.nodes[index as usize].next
    }

    /// Appends an order at the back of its level; returns its node index.
    pub fn push(
        &mut self,
        outcome: Outcome,
        price: PriceCents,
        order: OrderId,
        account: AccountId,
        count: u32,
    ) -> u32 {
        assert!(count > 0, "a resting order holds contracts");
        assert!(crate::types::price_in_range(price));
        let node = Node {
            order,
            account,
            remaining: count,
            prev: NIL,
            next: NIL,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.nodes[index as usize] = node;
                index
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 nodes")
            }
        };
        let side = &mut self.sides[outcome.index()];
        let level = &mut side.levels[usize::from(price)];
        let tail = level.tail;
        level.tail = index;
        if tail == NIL {
            level.head = index;
        }
        level.total += u64::from(count);
        self.cache.touch(outcome, price, level.total);
        if tail != NIL {
            self.nodes[tail as usize].next = index;
            self.nodes[index as usize].prev = tail;
        }
        side.set_bit(price, true);
        self.resting += 1;
        index
    }

    /// Takes `count` contracts off a node; unlinks it when none remain.
    /// Returns the contracts left on the node.
    pub fn reduce(&mut self, outcome: Outcome, price: PriceCents, index: u32, count: u32) -> u32 {
        let node = &mut self.nodes[index as usize];
        assert!(count <= node.remaining, "cannot take more than rests");
        node.remaining -= count;
        let left = node.remaining;
        let level = &mut self.sides[outcome.index()].levels[usize::from(price)];
        level.total -= u64::from(count);
        self.cache.touch(outcome, price, level.total);
        if left == 0 {
            self.unlink(outcome, price, index);
        }
        left
    }

    /// Removes a node whatever it holds; returns the contracts it held.
    pub fn remove(&mut self, outcome: Outcome, price: PriceCents, index: u32) -> u32 {
        let remaining = self.nodes[index as usize].remaining;
        self.reduce(outcome, price, index, remaining);
        remaining
    }

    fn unlink(&mut self, outcome: Outcome, price: PriceCents, index: u32) {
        let Node { prev, next, .. } = self.nodes[index as usize];
        let side = &mut self.sides[outcome.index()];
        let level = &mut side.levels[usize::from(price)];
        if prev == NIL {
            level.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            level.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        if level.head == NIL {
            assert_eq!(level.total, 0, "an empty level holds no contracts");
            side.set_bit(price, false);
        }
        self.nodes[index as usize].remaining = 0;
        self.free.push(index);
        self.resting -= 1;
    }

    /// The checksum as `checksum` computes it, rewriting only the side
    /// texts, and in them only the levels, that a change since the last
    /// call may have altered.
    pub fn checksum_cached(&mut self) -> u32 {
        let texts = self.cache.texts.get_or_insert_with(|| {
            Box::new(Texts {
                sides: [SideText::new(b"up:"), SideText::new(b"")],
                after_up: 0,
                up_hashed: false,
                crc: None,
            })
        });
        if let Some(crc) = texts.crc {
            return crc;
        }
        let [up, down] = &mut texts.sides;
        if !up.valid {
            up.rewrite(self.sides.first().unwrap_or(&EMPTY_SIDE));
            up.bytes[up.len..up.len + 6].copy_from_slice(b"|down:");
            up.len += 6;
            texts.up_hashed = false;
        }
        if !texts.up_hashed {
            texts.up_hashed = true;
            texts.after_up = crc32fast::hash(&up.bytes[..up.len]);
        }
        if !down.valid {
            down.rewrite(self.sides.get(1).unwrap_or(&EMPTY_SIDE));
        }
        let mut hasher = crc32fast::Hasher::new_with_initial(texts.after_up);
        hasher.update(&down.bytes[..down.len]);
        let crc = hasher.finalize();
        texts.crc = Some(crc);
        crc
    }

    /// Frees the cached texts (a closed market's book changes no more).
    pub fn release_checksum_cache(&mut self) {
        self.cache.texts = None;
    }

    /// The spec's checksum of the book as it stands (SPEC "Checksum").
    pub fn checksum(&self) -> u32 {
        let mut text = [0u8; 512];
        let len = self.checksum_text(&mut text);
        crc32fast::hash(&text[..len])
    }

    /// Writes `up:p:c,...|down:p:c,...` into `out`; returns its length.
    /// Ten levels of at most `0.99:` plus a 20-digit count fit in 512 bytes.
    pub fn checksum_text(&self, out: &mut [u8; 512]) -> usize {
        let mut len = 0;
        for (i, outcome) in [Outcome::Up, Outcome::Down].into_iter().enumerate() {
            if i == 1 {
                out[len] = b'|';
                len += 1;
            }
            let label = if i == 0 { &b"up:"[..] } else { &b"down:"[..] };
            out[len..len + label.len()].copy_from_slice(label);
            len += label.len();
            for (n, (price, total)) in self.side(outcome).top(CHECKSUM_LEVELS).enumerate() {
                if n > 0 {
                    out[len] = b',';
                    len += 1;
                }
                len += write_price(&mut out[len..], price);
                out[len] = b':';
                len += 1;
                len += write_u64(&mut out[len..], total);
            }
        }
        len
    }
}

impl ChecksumCache {
    /// The level of `outcome` at `price` now holds `total`. A level in the
    /// text whose count keeps its number of digits is rewritten in place
    /// (the common case: the set of ten levels and every other piece stay
    /// where they are), and the kept checksum follows it by arithmetic
    /// (`crc`); any other change at or above the tenth level leaves the
    /// side to be rewritten and hashed.
    fn touch(&mut self, outcome: Outcome, price: PriceCents, total: u64) {
        let Some(texts) = &mut self.texts else {
            return;
        };
        let [up, down] = &mut texts.sides;
        let (text, other) = match outcome {
            Outcome::Up => (up, down),
            Outcome::Down => (down, up),
        };
        text.stale.set(usize::from(price));
        if price < text.floor {
            return;
        }
        let patched = if text.valid {
            text.patch(price, total)
        } else {
            None
        };
        if outcome == Outcome::Up {
            // Kept by arithmetic would cost a second multiply per change;
            // hashing the up side again is rarer (a down change that is
            // not a patch, after an up change).
            texts.up_hashed = false;
        }
        let Some((end, diff)) = patched else {
            text.valid = false;
            texts.crc = None;
            return;
        };
        if let Some(crc) = &mut texts.crc {
            // Bytes after the rewritten digits: the rest of this side's
            // part, and for the up side the whole down part (valid while
            // the checksum is kept).
            let after = match outcome {
                Outcome::Up => text.len - end + other.len,
                Outcome::Down => text.len - end,
            };
            *crc ^= crate::crc::window(&diff.bytes[..diff.len], after);
        }
    }
}

/// Writes `0.XX` for a price in cents; returns 4.
pub fn write_price(out: &mut [u8], price: PriceCents) -> usize {
    out[0] = b'0';
    out[1] = b'.';
    out[2] = b'0' + price / 10;
    out[3] = b'0' + price % 10;
    4
}

/// Writes a decimal integer; returns its length.
pub fn write_u64(out: &mut [u8], mut value: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (value % 10) as u8;
        n += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = digits[n - 1 - i];
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_text_matches_the_spec_example_shape() {
        let mut book = Book::default();
        book.push(Outcome::Up, 55, 1, 1, 10);
        book.push(Outcome::Up, 54, 2, 1, 5);
        book.push(Outcome::Up, 55, 3, 2, 2);
        let mut buf = [0u8; 512];
        let len = book.checksum_text(&mut buf);
        assert_eq!(
            std::str::from_utf8(&buf[..len]).unwrap(),
            "up:0.55:12,0.54:5|down:"
        );
        assert_eq!(book.checksum(), crc32fast::hash(b"up:0.55:12,0.54:5|down:"));
        let empty = Book::default();
        assert_eq!(empty.checksum(), crc32fast::hash(b"up:|down:"));
    }

    #[test]
    fn checksum_keeps_only_ten_levels_best_first() {
        let mut book = Book::default();
        for price in 1..=12u8 {
            book.push(Outcome::Down, price, u64::from(price), 1, 1);
        }
        let mut buf = [0u8; 512];
        let len = book.checksum_text(&mut buf);
        let expected =
            "up:|down:0.12:1,0.11:1,0.10:1,0.09:1,0.08:1,0.07:1,0.06:1,0.05:1,0.04:1,0.03:1";
        assert_eq!(std::str::from_utf8(&buf[..len]).unwrap(), expected);
    }

    #[test]
    fn the_cached_checksum_always_equals_a_fresh_one() {
        let mut book = Book::default();
        let mut nodes = Vec::new();
        // A fixed pseudo-random walk of adds and removes on both sides, deep
        // enough that many changes fall below the tenth level.
        let mut x = 12_345u64;
        for step in 0..5_000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let outcome = if x >> 63 == 0 {
                Outcome::Up
            } else {
                Outcome::Down
            };
            let price = 1 + ((x >> 20) % 99) as u8;
            if (x >> 40).is_multiple_of(3) && !nodes.is_empty() {
                let (o, p, n) = nodes.swap_remove(((x >> 8) as usize) % nodes.len());
                book.remove(o, p, n);
            } else {
                let n = book.push(outcome, price, step + 1, 1, 1 + ((x >> 50) % 9) as u32);
                nodes.push((outcome, price, n));
            }
            assert_eq!(book.checksum_cached(), book.checksum(), "step {step}");
        }
    }

    /// As matching and cancels do: several changes, on either side, in or
    /// out of place, between two checksums; partial fills keep counts'
    /// digits (the checksum follows them by arithmetic) or change them.
    #[test]
    fn the_cached_checksum_follows_runs_of_changes_between_asks() {
        let mut book = Book::default();
        let mut nodes: Vec<(Outcome, PriceCents, u32, u32)> = Vec::new();
        let mut x = 987_654_321u64;
        let mut next = || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 16
        };
        let mut kept = 0;
        for step in 0..20_000u64 {
            let r = next();
            let outcome = if r & 1 == 0 {
                Outcome::Up
            } else {
                Outcome::Down
            };
            // Levels near a touch, so that most changes are shown.
            let price = 40 + ((r >> 1) % 14) as u8;
            match (r >> 8) % 4 {
                0 | 1 if !nodes.is_empty() => {
                    let i = (next() as usize) % nodes.len();
                    let (o, p, n, left) = nodes[i];
                    let take = 1 + (next() as u32) % left;
                    if book.reduce(o, p, n, take) == 0 {
                        nodes.swap_remove(i);
                    } else {
                        nodes[i].3 = left - take;
                    }
                }
                _ => {
                    // Now and then a large order: counts of five to
                    // eight digits take the longer arithmetic path, of
                    // nine and more a rewrite of their side.
                    let count = if next() % 10 == 0 {
                        10_000 + (next() % 10_000_000) as u32
                    } else {
                        1 + (next() % 120) as u32
                    };
                    let n = book.push(outcome, price, step + 1, 1, count);
                    nodes.push((outcome, price, n, count));
                }
            }
            if next() % 3 == 0 {
                let before = book.cache.texts.as_ref().and_then(|t| t.crc);
                assert_eq!(book.checksum_cached(), book.checksum(), "step {step}");
                kept += usize::from(before.is_some());
            }
        }
        assert!(kept > 1_000, "the arithmetic path ran {kept} times");
    }

    #[test]
    fn fifo_and_unlink_keep_levels_consistent() {
        let mut book = Book::default();
        let a = book.push(Outcome::Up, 40, 1, 1, 3);
        let b = book.push(Outcome::Up, 40, 2, 2, 4);
        let c = book.push(Outcome::Up, 40, 3, 3, 5);
        assert_eq!(book.head(Outcome::Up, 40), a);
        book.remove(Outcome::Up, 40, b);
        assert_eq!(book.next(a), c);
        assert_eq!(book.side(Outcome::Up).level(40).total, 8);
        assert_eq!(book.reduce(Outcome::Up, 40, a, 3), 0);
        assert_eq!(book.head(Outcome::Up, 40), c);
        book.remove(Outcome::Up, 40, c);
        assert_eq!(book.side(Outcome::Up).best(), None);
        assert_eq!(book.resting_orders(), 0);
    }

    #[test]
    fn best_and_next_below_cross_the_word_boundary() {
        let mut book = Book::default();
        for price in [1u8, 63, 64, 65, 99] {
            book.push(Outcome::Up, price, u64::from(price), 1, 1);
        }
        let prices: Vec<_> = book.side(Outcome::Up).top(10).map(|(p, _)| p).collect();
        assert_eq!(prices, vec![99, 65, 64, 63, 1]);
    }

    /// The cache is no part of the state: a book whose checksum was cached
    /// equals (and hashes as) the same book never asked for one.
    #[test]
    fn a_warm_checksum_cache_does_not_change_book_equality() {
        let mut cold = Book::default();
        cold.push(Outcome::Up, 55, 1, 1, 10);
        cold.push(Outcome::Down, 40, 2, 2, 3);
        let mut warm = cold.clone();
        warm.checksum_cached();
        assert!(warm.cache.texts.is_some());
        assert_eq!(warm, cold);
        assert_eq!(
            crate::hash::stable_hash(&warm),
            crate::hash::stable_hash(&cold)
        );
    }

    /// `resting_orders` counts the orders on both sides as they come and go.
    #[test]
    fn resting_orders_counts_both_sides() {
        let mut book = Book::default();
        let a = book.push(Outcome::Up, 40, 1, 1, 3);
        book.push(Outcome::Down, 60, 2, 2, 4);
        book.push(Outcome::Down, 61, 3, 2, 4);
        assert_eq!(book.resting_orders(), 3);
        book.reduce(Outcome::Up, 40, a, 2);
        assert_eq!(
            book.resting_orders(),
            3,
            "a partly filled order still rests"
        );
        book.remove(Outcome::Up, 40, a);
        assert_eq!(book.resting_orders(), 2);
    }

    /// A settled market's empty book lets its memory go (both sides, the
    /// node slab and the checksum texts); reads then see two empty sides
    /// and the empty book's checksum.
    #[test]
    fn release_frees_an_empty_books_memory() {
        let mut book = Book::default();
        let n = book.push(Outcome::Up, 55, 1, 1, 10);
        book.checksum_cached();
        book.remove(Outcome::Up, 55, n);
        book.release();
        assert!(book.sides.is_empty());
        assert_eq!(book.nodes.capacity(), 0);
        assert_eq!(book.free.capacity(), 0);
        assert!(book.cache.texts.is_none());
        assert_eq!(book.side(Outcome::Up).best(), None);
        assert_eq!(book.side(Outcome::Down).best(), None);
        let empty = crc32fast::hash(b"up:|down:");
        assert_eq!(book.checksum(), empty);
        assert_eq!(book.checksum_cached(), empty);
    }

    /// A closed market's checksum texts are freed; a later checksum builds
    /// them again and still agrees with a fresh one.
    #[test]
    fn release_checksum_cache_frees_the_texts() {
        let mut book = Book::default();
        book.push(Outcome::Up, 55, 1, 1, 10);
        book.push(Outcome::Down, 45, 2, 2, 7);
        let before = book.checksum_cached();
        book.release_checksum_cache();
        assert!(book.cache.texts.is_none());
        assert_eq!(book.checksum_cached(), before);
        assert_eq!(before, book.checksum());
    }
}
