//! The idempotency index: (account, client_order_id) -> order id, as an
//! open-addressing table with linear probing under a fixed, seedless hash.
//! Same inserts, same table, on every machine; it is never iterated.
//! A B-tree of 72-byte keys cost a third of a command's time here.

use rkyv::{Archive, Deserialize, Serialize};

use crate::types::OrderId;

/// Table slots grow by doubling and stay at most half full.
const SLOTS_MIN: usize = 1024;

/// The index. A slot is `[hash, order id]`; order id 0 is an empty slot.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ClientOrderIndex {
    slots: Vec<[u64; 2]>,
    len: u64,
}

impl ClientOrderIndex {
    /// Entries held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The order under `hash` for which `is_it` says yes (hashes collide;
    /// the caller compares the real account and id).
    pub fn get(&self, hash: u64, mut is_it: impl FnMut(OrderId) -> bool) -> Option<OrderId> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let [h, id] = self.slots[i];
            if id == 0 {
                return None;
            }
            if h == hash && is_it(id) {
                return Some(id);
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts loading the cache line where a lookup of `hash` begins, so
    /// that the work done before the lookup hides part of a miss (the
    /// table is large and its slots are hit at random). No effect on any
    /// result.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if self.slots.is_empty() {
            return;
        }
        let slot = &self.slots[hash as usize & (self.slots.len() - 1)];
        // SAFETY: a prefetch is a hint: it reads nothing into the program and
        // cannot fault, whatever the address; SSE is in every x86-64 CPU.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                slot.as_ptr().cast(),
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Adds an entry; the caller has checked that it is not there.
    pub fn insert(&mut self, hash: u64, id: OrderId) {
        assert!(id != 0, "order ids start at 1");
        if (self.len as usize + 1) * 2 > self.slots.len() {
            self.grow();
        }
        Self::place(&mut self.slots, hash, id);
        self.len += 1;
    }

    fn place(slots: &mut [[u64; 2]], hash: u64, id: OrderId) {
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        while slots[i][1] != 0 {
            i = (i + 1) & mask;
        }
        slots[i] = [hash, id];
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(SLOTS_MIN);
        let mut slots = vec![[0u64; 2]; size];
        for &[hash, id] in self.slots.iter().filter(|s| s[1] != 0) {
            Self::place(&mut slots, hash, id);
        }
        self.slots = slots;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_through_collisions_and_growth() {
        let mut index = ClientOrderIndex::default();
        // Every key hashes to one of 7 values, so probes chain.
        for id in 1..=5_000u64 {
            index.insert(id % 7, id);
        }
        assert_eq!(index.len(), 5_000);
        for id in [1u64, 2, 777, 4_999, 5_000] {
            assert_eq!(index.get(id % 7, |candidate| candidate == id), Some(id));
        }
        assert_eq!(index.get(3, |candidate| candidate == 9_999), None);
        assert_eq!(ClientOrderIndex::default().get(3, |_| true), None);
    }
}
