//! A table of records with dense, rising ids whose oldest records leave
//! the live state (they move to the history store, outside the sequencer).
//!
//! Records live in a deque: the record with id `front_id` first. Eviction
//! takes records off the front. A record at the front that may not leave
//! yet because it is still live (an order still resting, a market not yet
//! settled) is moved aside into `kept`, so that it does not hold back the
//! records behind it; it leaves from there once it may.
//!
//! Lookups by id are O(1) in the deque and O(log k) in `kept`, which holds
//! only the few long-lived records. Iteration order is id order, never a
//! hash order.

use std::collections::{BTreeMap, VecDeque};

use rkyv::{Archive, Deserialize, Serialize};

/// Records with ids `FIRST, FIRST + 1, ...`; see the module comment.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Table<T, const FIRST: u64> {
    /// Id of `items[0]` (the next id when empty).
    front_id: u64,
    items: VecDeque<T>,
    /// Records older than `front_id` still in the live state.
    kept: BTreeMap<u64, T>,
    /// Where the next look at `kept` starts (it is looked at a slice at a
    /// time, so that a large `kept` never stalls an eviction run).
    kept_cursor: u64,
}

/// Kept records looked at per eviction run.
const KEPT_PER_RUN: usize = 1024;

impl<T, const FIRST: u64> Default for Table<T, FIRST> {
    fn default() -> Self {
        Self {
            front_id: FIRST,
            items: VecDeque::new(),
            kept: BTreeMap::new(),
            kept_cursor: 0,
        }
    }
}

/// What eviction decides for the record at the front.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It leaves the live state now.
    Evict,
    /// It is still live: set it aside and look at the next one.
    Keep,
    /// It is too recent to leave: stop here (later records are newer).
    Stop,
}

impl<T, const FIRST: u64> Table<T, FIRST> {
    /// The id the next pushed record gets.
    pub fn next_id(&self) -> u64 {
        self.front_id + self.items.len() as u64
    }

    /// Records ever pushed.
    pub fn total(&self) -> u64 {
        self.next_id() - FIRST
    }

    /// Records in the live state.
    pub fn len(&self) -> usize {
        self.items.len() + self.kept.len()
    }

    /// True when no record is in the live state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records set aside: older than the deque's front, still live.
    pub fn kept_len(&self) -> usize {
        self.kept.len()
    }

    /// Appends a record; returns its id.
    pub fn push(&mut self, item: T) -> u64 {
        let id = self.next_id();
        self.items.push_back(item);
        id
    }

    /// The record with this id, if it is in the live state.
    #[inline]
    pub fn get(&self, id: u64) -> Option<&T> {
        if id >= self.front_id {
            self.items.get(usize::try_from(id - self.front_id).ok()?)
        } else {
            self.kept.get(&id)
        }
    }

    /// The record with this id, if it is in the live state.
    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        if id >= self.front_id {
            self.items
                .get_mut(usize::try_from(id - self.front_id).ok()?)
        } else {
            self.kept.get_mut(&id)
        }
    }

    /// True when the record left the live state (it is in the history).
    pub fn evicted(&self, id: u64) -> bool {
        id >= FIRST && id < self.front_id && !self.kept.contains_key(&id)
    }

    /// The live records, in id order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.kept.values().chain(self.items.iter())
    }

    /// Takes the deque's records out, leaving the ids and the kept records
    /// (snapshots encode the records in sections of their own).
    pub fn take_items(&mut self) -> VecDeque<T> {
        std::mem::take(&mut self.items)
    }

    /// Appends records (a snapshot's decoded sections, or a new table's);
    /// `put_back_items` returns what `take_items` took.
    pub fn extend_items(&mut self, items: impl IntoIterator<Item = T>) {
        self.items.extend(items);
    }

    /// Puts the deque `take_items` took back as it is: no copy when
    /// nothing was pushed meanwhile (else appended).
    pub fn put_back_items(&mut self, items: VecDeque<T>) {
        if self.items.is_empty() {
            self.items = items;
        } else {
            self.items.extend(items);
        }
    }

    /// True when the deque holds no record (kept ones aside).
    pub fn items_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Lets go the kept records `fate` now says may leave, looking at up to
    /// `KEPT_PER_RUN` of them from where the last run stopped, then takes
    /// records off the front while `fate` says so. `fate` must say `Keep`
    /// only for records old enough to leave but still live, and `Stop` for
    /// records too recent, so that a young record is never set aside.
    /// `out` receives each evicted record with its id, in the order they
    /// left.
    pub fn evict(&mut self, mut fate: impl FnMut(&T) -> Fate, mut out: impl FnMut(u64, T)) {
        let mut leaving = Vec::new();
        let mut next_cursor = 0;
        for (looked, (&id, t)) in self.kept.range(self.kept_cursor..).enumerate() {
            if looked == KEPT_PER_RUN {
                next_cursor = id;
                break;
            }
            if fate(t) == Fate::Evict {
                leaving.push(id);
            }
        }
        self.kept_cursor = next_cursor;
        for id in leaving {
            if let Some(t) = self.kept.remove(&id) {
                out(id, t);
            }
        }
        while let Some(front) = self.items.front() {
            let verdict = fate(front);
            if verdict == Fate::Stop {
                break;
            }
            let id = self.front_id;
            let item = self.items.pop_front().expect("front exists");
            self.front_id += 1;
            match verdict {
                Fate::Evict => out(id, item),
                _ => {
                    self.kept.insert(id, item);
                }
            }
        }
    }
}

impl<T, const FIRST: u64> FromIterator<T> for Table<T, FIRST> {
    /// A table whose records get ids `FIRST, FIRST + 1, ...`.
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut table = Self::default();
        table.extend_items(iter);
        table
    }
}

impl<T, const FIRST: u64> std::ops::Index<u64> for Table<T, FIRST> {
    type Output = T;
    /// Panics when the record is not live: for ids the state itself holds
    /// (a resting order, a market on the book), never for user input.
    #[inline]
    fn index(&self, id: u64) -> &T {
        self.get(id).expect("a live record")
    }
}

impl<T, const FIRST: u64> std::ops::IndexMut<u64> for Table<T, FIRST> {
    #[inline]
    fn index_mut(&mut self, id: u64) -> &mut T {
        self.get_mut(id).expect("a live record")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_survive_eviction_and_kept_records_stay_reachable() {
        let mut t: Table<(u32, bool), 1> = Table::default();
        for i in 0..10u32 {
            // (value, still live?)
            assert_eq!(t.push((i, i == 2)), u64::from(i) + 1);
        }
        let mut out = Vec::new();
        t.evict(
            |&(v, live)| {
                if live {
                    Fate::Keep
                } else if v < 5 {
                    Fate::Evict
                } else {
                    Fate::Stop
                }
            },
            |id, (v, _)| out.push((id, v)),
        );
        assert_eq!(out, vec![(1, 0), (2, 1), (4, 3), (5, 4)]);
        assert_eq!(t.front_id, 6);
        assert_eq!(t.get(3), Some(&(2, true)));
        assert!(t.evicted(4) && !t.evicted(3) && !t.evicted(6) && !t.evicted(0));
        assert_eq!(t.get(4), None);
        assert_eq!(t[7].0, 6);
        assert_eq!(t.next_id(), 11);
        assert_eq!(t.len(), 6);
        let values: Vec<u32> = t.iter().map(|&(v, _)| v).collect();
        assert_eq!(values, vec![2, 5, 6, 7, 8, 9], "kept first, then the deque");
        // The kept record ends; it leaves on the next pass.
        t.get_mut(3).expect("kept").1 = false;
        out.clear();
        t.evict(|_| Fate::Stop, |id, (v, _)| out.push((id, v)));
        assert!(out.is_empty());
        t.evict(
            |&(v, live)| {
                if !live && v == 2 {
                    Fate::Evict
                } else {
                    Fate::Stop
                }
            },
            |id, (v, _)| out.push((id, v)),
        );
        assert_eq!(out, vec![(3, 2)]);
        assert_eq!(t.get(3), None);
    }

    /// The counts (ever pushed against live), and the deque taken out and
    /// put back as snapshots do: ids and kept records stay where they
    /// were, and records pushed meanwhile come first.
    #[test]
    fn counts_and_the_deque_taken_out_and_put_back() {
        let mut t: Table<(u32, bool), 1> = Table::default();
        assert!(t.is_empty() && t.items_empty());
        assert_eq!((t.total(), t.next_id()), (0, 1));
        for i in 0..6u32 {
            t.push((i, i == 1));
        }
        // Ids 1 and 2 leave the deque: 1 evicted, 2 kept (still live).
        t.evict(
            |&(v, live)| match (v, live) {
                (_, true) => Fate::Keep,
                (0, _) => Fate::Evict,
                _ => Fate::Stop,
            },
            |_, _| {},
        );
        assert_eq!((t.total(), t.len(), t.kept_len()), (6, 5, 1));
        assert!(!t.is_empty());

        let items = t.take_items();
        assert_eq!(items.len(), 4);
        assert!(t.items_empty() && !t.is_empty(), "the kept record stays");
        assert_eq!((t.next_id(), t.total()), (3, 2), "ids from the front");
        t.put_back_items(items);
        assert!(!t.items_empty());
        assert_eq!((t.next_id(), t.total(), t.len()), (7, 6, 5));
        assert_eq!(t.get(3), Some(&(2, false)));
        assert_eq!(t.get(2), Some(&(1, true)));

        // Put back behind records pushed meanwhile, which come first.
        let items = t.take_items();
        t.push((9, false));
        t.put_back_items(items);
        let values: Vec<u32> = t.iter().map(|&(v, _)| v).collect();
        assert_eq!(values, vec![1, 9, 2, 3, 4, 5]);

        // A snapshot's sections appended to an empty deque.
        let mut u: Table<u32, 1> = Table::default();
        u.extend_items([7, 8]);
        u.extend_items([9]);
        assert_eq!((u.next_id(), u.get(3)), (4, Some(&9)));
        let collected: Table<u32, 1> = [7, 8, 9].into_iter().collect();
        assert_eq!(collected, u);
        assert_eq!(collected.total(), 3);
    }

    /// A large set of kept records is looked at a slice per run, from where
    /// the last run stopped, wrapping around: every one is seen within a
    /// bounded number of runs, and none is seen twice in one run.
    #[test]
    fn kept_records_are_looked_at_a_slice_per_run() {
        let mut t: Table<(u64, bool), 1> = Table::default();
        let n = 3 * KEPT_PER_RUN as u64 + 10;
        for i in 0..n {
            t.push((i, true));
        }
        t.push((n, false));
        // Everything old and live: all set aside; the last one is young.
        t.evict(
            |&(_, live)| if live { Fate::Keep } else { Fate::Stop },
            |_, _| {},
        );
        assert_eq!(t.kept_len() as u64, n);
        // All of them end; each run lets at most a slice go.
        let mut gone = Vec::new();
        let mut runs = 0;
        while t.kept_len() > 0 {
            let before = gone.len();
            t.evict(|_| Fate::Evict, |id, _| gone.push(id));
            // A slice of the kept ones, and the deque's front when it may go.
            let kept_gone = gone[before..].iter().filter(|&&id| id <= n).count();
            assert!(kept_gone <= KEPT_PER_RUN);
            runs += 1;
            assert!(runs <= 4, "every kept record is seen within four runs");
        }
        // The young record at the front left too, once allowed.
        assert_eq!(gone.len() as u64, n + 1);
        let mut sorted = gone.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), gone.len(), "no record leaves twice");
    }
}
