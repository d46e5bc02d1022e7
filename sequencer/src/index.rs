//! The idempotency index: (account, client_order_id) -> order id, as an
//! open-addressing table with linear probing under a fixed, seedless hash.
//! Same inserts, same table, on every machine; it is never iterated.
//! A B-tree of 72-byte keys cost a third of a command's time here.

use rkyv::{Archive, Deserialize, Serialize};

use crate::types::OrderId;

/// Table slots grow by doubling and stay at most half full.
const SLOTS_MIN: usize = 1024;
/// Slots of the old table moved to the new one at each insert while the
/// table grows. Growth starts when the table is half full (n entries in 2n
/// slots) and must end before the new table (4n slots) is half full, that
/// is within n inserts: 2n old slots at 4 a step take n / 2.
const MOVE_PER_INSERT: usize = 4;
/// An entry removed from the part of the old table not yet moved: it keeps
/// the probe chains of that table intact and is dropped when moved.
const TOMBSTONE: u64 = u64::MAX;
/// Slots of the next table zeroed at each insert between growths. With S
/// slots in use after a growth, its moving ends at 3S/8 entries and the
/// next growth starts at S/2, so the next table's 2S slots must be zeroed
/// within S/8 inserts: 16 a step. 32 leaves room (a clone starts over).
const ZERO_PER_INSERT: usize = 32;

/// The index. A slot is `[hash, order id]`; order id 0 is an empty slot,
/// `TOMBSTONE` a removed entry of the old table (see `remove`).
///
/// Growing moves the entries to a table twice the size a few at a time, on
/// the inserts that follow, instead of all at once: at two million orders
/// a one-go rehash is a few million random memory accesses, a stall of a
/// good part of a second on the sequencer thread. While it grows, the old
/// table is kept whole (so its probe chains stay intact) and looked up
/// after the new one.
///
/// The table a growth moves into is zeroed ahead, a few slots at each
/// insert before the growth (`next`): entries land in it at random, and a
/// fresh table first touched at random took a page fault on most of its
/// pages within the first inserts (with huge pages, 2-5 ms stalls on each
/// of the first few inserts of a growth at a million orders). Zeroed in
/// order, its pages are faulted one at a time, spread over the inserts.
#[derive(Archive, Serialize, Deserialize, Default)]
pub struct ClientOrderIndex {
    slots: Vec<[u64; 2]>,
    /// The table being moved into `slots`; empty when not growing.
    old: Vec<[u64; 2]>,
    /// Slots of `old` already moved.
    moved: u64,
    len: u64,
    /// The next growth's table (all zeros), being built; derived, so not
    /// part of the state: not archived, cloned, compared or hashed. A
    /// growth that finds it short finishes it at once.
    #[rkyv(with = rkyv::with::Skip)]
    next: Vec<[u64; 2]>,
}

/// Leaves out `next` (zeros, and no part of the state).
impl std::fmt::Debug for ClientOrderIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOrderIndex")
            .field("slots", &self.slots)
            .field("old", &self.old)
            .field("moved", &self.moved)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Clone for ClientOrderIndex {
    fn clone(&self) -> Self {
        Self {
            slots: self.slots.clone(),
            old: self.old.clone(),
            moved: self.moved,
            len: self.len,
            next: Vec::new(),
        }
    }
}

impl PartialEq for ClientOrderIndex {
    fn eq(&self, other: &Self) -> bool {
        (&self.slots, &self.old, self.moved, self.len)
            == (&other.slots, &other.old, other.moved, other.len)
    }
}

impl Eq for ClientOrderIndex {}

/// The fields in the order of the struct, as the derived `Hash` hashed
/// them before `next` existed: state hashes stay the same.
impl std::hash::Hash for ClientOrderIndex {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.slots.hash(h);
        self.old.hash(h);
        self.moved.hash(h);
        self.len.hash(h);
    }
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
        Self::probe(&self.slots, hash, &mut is_it)
            .or_else(|| Self::probe(&self.old, hash, &mut is_it))
    }

    fn probe(
        slots: &[[u64; 2]],
        hash: u64,
        is_it: &mut impl FnMut(OrderId) -> bool,
    ) -> Option<OrderId> {
        if slots.is_empty() {
            return None;
        }
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let [h, id] = slots[i];
            if id == 0 {
                return None;
            }
            if h == hash && id != TOMBSTONE && is_it(id) {
                return Some(id);
            }
            i = (i + 1) & mask;
        }
    }

    /// Starts loading the cache lines where a lookup of `hash` begins (in
    /// the old table too while the table grows), so that the work done
    /// before the lookup hides part of a miss (the table is large and its
    /// slots are hit at random). No effect on any result.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        for slots in [&self.slots, &self.old] {
            if !slots.is_empty() {
                crate::hint::prefetch(&slots[hash as usize & (slots.len() - 1)]);
            }
        }
    }

    /// Adds an entry; the caller has checked that it is not there.
    pub fn insert(&mut self, hash: u64, id: OrderId) {
        assert!(id != 0, "order ids start at 1");
        if self.old.is_empty() && (self.len as usize + 1) * 2 > self.slots.len() {
            let size = (self.slots.len() * 2).max(SLOTS_MIN);
            let mut table = std::mem::take(&mut self.next);
            // Short (a clone restarts it, removals delay growth the other
            // way): finished here. It only ever holds zeros.
            table.resize(size, [0u64; 2]);
            self.old = std::mem::replace(&mut self.slots, table);
            self.moved = 0;
        }
        self.move_some();
        if self.old.is_empty() {
            self.zero_ahead();
        }
        Self::place(&mut self.slots, hash, id);
        self.len += 1;
    }

    /// Zeroes the next few slots of the next growth's table, front to back.
    fn zero_ahead(&mut self) {
        let size = self.slots.len() * 2;
        let built = self.next.len();
        if built >= size {
            return;
        }
        if self.next.capacity() < size {
            // Allocated untouched; the zeroing below faults it in, in order.
            self.next = Vec::with_capacity(size);
        }
        let built = self.next.len();
        self.next
            .resize(built + ZERO_PER_INSERT.min(size - built), [0u64; 2]);
    }

    /// Moves the next few slots of the old table; drops it once all moved.
    fn move_some(&mut self) {
        if self.old.is_empty() {
            return;
        }
        let from = self.moved as usize;
        let to = (from + MOVE_PER_INSERT).min(self.old.len());
        for i in from..to {
            let [hash, id] = self.old[i];
            if id != 0 && id != TOMBSTONE {
                Self::place(&mut self.slots, hash, id);
            }
        }
        self.moved = to as u64;
        if to == self.old.len() {
            self.old = Vec::new();
            self.moved = 0;
        }
    }

    /// Removes the entry `(hash, id)` when present (its order left the live
    /// state). In the current table the entries after it shift back (no
    /// tombstones, so the table never fills with dead slots); in the part
    /// of the old table still to move it becomes a tombstone. A copy in the
    /// part already moved stays until the old table is dropped; lookups
    /// pass over it because its order is gone (`is_it` says no).
    pub fn remove(&mut self, hash: u64, id: OrderId) -> bool {
        let removed = Self::remove_shifting(&mut self.slots, hash, id) || {
            let moved = self.moved as usize;
            match Self::find(&self.old, hash, id) {
                Some(i) if i >= moved => {
                    self.old[i][1] = TOMBSTONE;
                    true
                }
                _ => false,
            }
        };
        if removed {
            self.len -= 1;
        }
        removed
    }

    fn find(slots: &[[u64; 2]], hash: u64, id: OrderId) -> Option<usize> {
        if slots.is_empty() {
            return None;
        }
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            match slots[i] {
                [_, 0] => return None,
                [h, found] if h == hash && found == id => return Some(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    fn remove_shifting(slots: &mut [[u64; 2]], hash: u64, id: OrderId) -> bool {
        let Some(mut hole) = Self::find(slots, hash, id) else {
            return false;
        };
        let mask = slots.len() - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let [h, next] = slots[j];
            if next == 0 {
                slots[hole] = [0, 0];
                return true;
            }
            // The entry at j may fill the hole unless its home lies
            // cyclically in (hole, j]: then it would be placed before home.
            let home = h as usize & mask;
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                slots[hole] = slots[j];
                hole = j;
            }
        }
    }

    fn place(slots: &mut [[u64; 2]], hash: u64, id: OrderId) {
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        while slots[i][1] != 0 {
            i = (i + 1) & mask;
        }
        slots[i] = [hash, id];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids held where lookups start (the new table and the part of
    /// the old one still to move), sorted, each as often as it is held.
    fn held(index: &ClientOrderIndex) -> Vec<u64> {
        let mut held: Vec<u64> = index.slots.iter().map(|s| s[1]).collect();
        held.extend(index.old[index.moved as usize..].iter().map(|s| s[1]));
        held.retain(|&id| id != 0 && id != TOMBSTONE);
        held.sort_unstable();
        held
    }

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

    /// Every entry is found at every moment of a growth, whatever the hash
    /// spread (clustered hashes make chains that wrap around the table),
    /// and the table ends where a one-go rehash would: every entry in a
    /// table of the same size.
    #[test]
    fn growth_moves_entries_a_few_at_a_time_and_loses_none() {
        for spread in [u64::MAX, 1 << 12, 7] {
            let mut index = ClientOrderIndex::default();
            let hash = |id: u64| id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % spread.max(1);
            let mut grew = 0;
            for id in 1..=20_000u64 {
                let was_growing = !index.old.is_empty();
                index.insert(hash(id), id);
                if !was_growing && !index.old.is_empty() {
                    grew += 1;
                }
                // Everything so far is found, mid-growth or not.
                if id % 97 == 0 || !index.old.is_empty() && id % 5 == 0 {
                    for probe in [1, id / 2 + 1, id] {
                        assert_eq!(
                            index.get(hash(probe), |c| c == probe),
                            Some(probe),
                            "spread {spread}: {probe} after {id} inserts"
                        );
                    }
                }
                assert!(index.len * 2 <= index.slots.len() as u64 || !index.old.is_empty());
            }
            assert!(grew >= 5, "grew {grew} times");
            for id in 1..=20_000u64 {
                assert_eq!(
                    index.get(hash(id), |c| c == id),
                    Some(id),
                    "spread {spread}: {id}"
                );
            }
            assert_eq!(index.get(hash(20_001), |c| c == 20_001), None);
            let live = index.slots.iter().filter(|s| s[1] != 0).count()
                + index.old[index.moved as usize..]
                    .iter()
                    .filter(|s| s[1] != 0)
                    .count();
            assert_eq!(
                live, 20_000,
                "each entry once in the new table or still to move"
            );
        }
    }

    /// Under steady inserts every growth finds its table zeroed ahead (none
    /// is zeroed at once), and the table being built is no part of the
    /// state: a clone, which starts it over, equals and hashes as the
    /// original, and finds the same entries after growths of its own.
    #[test]
    fn the_next_table_is_zeroed_ahead_and_is_not_state() {
        let hash = |id: u64| id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut index = ClientOrderIndex::default();
        let mut growths = 0;
        for id in 1..=100_000u64 {
            let growing = !index.old.is_empty();
            let ready = index.next.len();
            let slots = index.slots.len();
            index.insert(hash(id), id);
            if !growing && !index.old.is_empty() && slots > 0 {
                growths += 1;
                assert_eq!(ready, slots * 2, "growth at {id} found the table built");
            }
            assert!(index.next.iter().all(|s| *s == [0, 0]) || id % 1000 != 0);
        }
        assert!(growths >= 6, "{growths} growths");
        let mut copy = index.clone();
        assert!(copy.next.is_empty());
        assert_eq!(copy, index);
        assert_eq!(
            crate::hash::stable_hash(&copy),
            crate::hash::stable_hash(&index)
        );
        for id in 100_001..=300_000u64 {
            copy.insert(hash(id), id);
            index.insert(hash(id), id);
        }
        assert_eq!(copy, index);
        for id in [1, 99_999, 100_001, 250_000, 300_000] {
            assert_eq!(copy.get(hash(id), |c| c == id), Some(id));
        }
    }

    /// Removing entries, mid-growth or not, under clustered hashes: what
    /// was removed is gone, everything else is still found, and a removed
    /// copy left in the moved part of the old table is never reported for
    /// an order that is gone.
    #[test]
    fn removal_keeps_every_other_entry_reachable() {
        for spread in [u64::MAX, 1 << 10, 5] {
            let hash = |id: u64| id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % spread.max(1);
            let mut index = ClientOrderIndex::default();
            let mut live = std::collections::BTreeSet::new();
            let mut removed = 0;
            for id in 1..=6_000u64 {
                index.insert(hash(id), id);
                live.insert(id);
                // Remove an older entry at two inserts in three, in an
                // order unlike the insertion order (a mixed pick of the
                // ids so far; one already gone is refused).
                if id % 3 != 0 {
                    let victim = (id.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % id + 1;
                    if live.remove(&victim) {
                        assert!(index.remove(hash(victim), victim), "{victim}");
                        removed += 1;
                    }
                    assert!(!index.remove(hash(victim), victim));
                }
                if id % 101 == 0 || !index.old.is_empty() && id % 7 == 0 {
                    for probe in [1, id / 3 + 1, id / 2 + 1, id] {
                        let found = index.get(hash(probe), |c| c == probe && live.contains(&c));
                        assert_eq!(
                            found.is_some(),
                            live.contains(&probe),
                            "spread {spread}: {probe} at {id}"
                        );
                    }
                }
            }
            assert!(removed > 2_000, "spread {spread}: {removed} removed");
            assert_eq!(index.len(), live.len() as u64);
            for id in 1..=6_000u64 {
                let found = index.get(hash(id), |c| c == id && live.contains(&c));
                assert_eq!(found.is_some(), live.contains(&id), "spread {spread}: {id}");
            }
            // No removed entry lingers, none is there twice.
            assert_eq!(
                held(&index),
                live.iter().copied().collect::<Vec<_>>(),
                "spread {spread}"
            );
        }
    }

    /// Probe chains that wrap past the table's last slot to its first:
    /// entries whose homes are the last slots spill into slots 0.., where
    /// entries with homes there sit behind them. Removals and inserts in a
    /// mixed order keep every live entry reachable and no removed one
    /// held (the shift-back's cyclic "home in (hole, j]" test, both ways).
    #[test]
    fn removal_in_chains_that_wrap_around_the_table() {
        let mut index = ClientOrderIndex::default();
        // Homes in the last 24 slots and the first 8 of 1024; at most 400
        // entries, so the table never grows.
        let hash = |id: u64| (1_000 + id.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 32) % 1_024;
        let mut live = std::collections::BTreeSet::new();
        let mut pick = 0x2545_f491_4f6c_dd1du64;
        let mut next_id = 1u64;
        for step in 0..20_000u32 {
            pick ^= pick << 13;
            pick ^= pick >> 7;
            pick ^= pick << 17;
            if live.len() < 400 && (pick % 5 < 3 || live.is_empty()) {
                index.insert(hash(next_id), next_id);
                live.insert(next_id);
                next_id += 1;
            } else {
                let nth = (pick >> 8) as usize % live.len();
                let victim = *live.iter().nth(nth).expect("in range");
                live.remove(&victim);
                assert!(index.remove(hash(victim), victim), "{victim} at {step}");
            }
            assert_eq!(index.slots.len(), 1_024, "never grows");
            if step % 50 == 0 {
                for &id in &live {
                    assert_eq!(index.get(hash(id), |c| c == id), Some(id), "{id} at {step}");
                }
                assert_eq!(
                    held(&index),
                    live.iter().copied().collect::<Vec<_>>(),
                    "at {step}"
                );
            }
        }
        assert!(
            index.slots[..8].iter().all(|s| s[1] != 0),
            "the chains wrapped"
        );
    }

    /// Equality and the state hash see the entries: two indexes that differ
    /// in one entry differ (a replay that diverged here is caught), and
    /// `is_empty` follows the entries in and out.
    #[test]
    fn equality_hash_and_emptiness_follow_the_entries() {
        let mut a = ClientOrderIndex::default();
        assert!(a.is_empty());
        a.insert(11, 1);
        assert!(!a.is_empty());
        let mut b = a.clone();
        assert_eq!(a, b);
        assert_eq!(crate::hash::stable_hash(&a), crate::hash::stable_hash(&b));
        a.insert(12, 2);
        b.insert(12, 3);
        assert_ne!(a, b);
        assert_ne!(crate::hash::stable_hash(&a), crate::hash::stable_hash(&b));
        assert!(a.remove(11, 1) && a.remove(12, 2));
        assert!(a.is_empty());
    }

    /// Removals while the table grows: an entry already moved is removed
    /// once (its stale copy in the old table is not removed again), an
    /// entry still to move becomes a tombstone, and when the growth ends
    /// neither is found and no tombstone was carried into the new table.
    #[test]
    fn removal_mid_growth_in_the_moved_and_unmoved_parts() {
        let mut index = ClientOrderIndex::default();
        // hash = id: entry id sits at slot id of the 1024-slot table.
        for id in 1..=513u64 {
            index.insert(id, id);
        }
        assert!(!index.old.is_empty() && index.moved > 2, "growing");
        assert!(index.remove(2, 2));
        assert!(!index.remove(2, 2), "an entry is removed once");
        assert!(index.moved <= 500);
        assert!(index.remove(500, 500));
        assert_eq!(index.len(), 511);
        for id in 514..=1_000u64 {
            index.insert(id, id);
        }
        assert!(index.old.is_empty(), "growth over");
        assert_eq!(index.len(), 998);
        assert_eq!(index.get(2, |_| true), None);
        assert_eq!(index.get(500, |_| true), None);
        assert!(index.slots.iter().all(|s| s[1] != TOMBSTONE));
        assert_eq!(index.slots.iter().filter(|s| s[1] != 0).count(), 998);
    }
}
