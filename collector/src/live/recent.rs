//! A bounded memory of pointers recently removed from a pointer table (freed, or torn down with
//! their context), and when: enough to tell a double free from an invalid one, and a late free
//! from an unknown one.
//!
//! Every free writes to it and almost nothing reads it, so a write only goes into a ring of the
//! last `cap` writes; the ring is indexed by pointer when something asks, which costs each write
//! one hash-map update at most, and none in a trace nothing asks about.

use rustc_hash::FxHashMap;

/// Why a pointer left the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    /// The program freed it.
    Free,
    /// Its context was destroyed or reset.
    Teardown,
}

/// A bounded map from pointer to the sequence number of the event that removed it, forgetting
/// the oldest entries first: an entry is remembered until `cap` more have been inserted. For a
/// pointer inserted twice with the same sequence number (which a trace with unique sequence
/// numbers never does), the later insert is the one remembered.
#[derive(Debug)]
pub(crate) struct RecentSet {
    /// The last `cap` inserts: insert `i` (from 0) is at `i % cap`.
    ring: Vec<(u64, u64, Removal)>,
    /// Where the next insert goes (`inserted % cap`, kept without a division).
    next: usize,
    /// Inserts so far.
    inserted: u64,
    /// Inserts already in `index`.
    indexed: u64,
    /// The latest indexed insert of each pointer, until it is too old (then ignored, and swept).
    index: FxHashMap<u64, Remembered>,
    cap: u64,
}

/// The places of a [`RecentSet`]'s window (see [`RecentSet::window`]).
pub(crate) type Window = Vec<Option<(u64, u64, Removal)>>;

#[derive(Clone, Copy, Debug)]
struct Remembered {
    seq: u64,
    how: Removal,
    /// Which insert it was (1 = the first).
    stamp: u64,
}

impl RecentSet {
    pub(crate) fn new(cap: usize) -> Self {
        RecentSet {
            ring: Vec::new(),
            next: 0,
            inserted: 0,
            indexed: 0,
            index: FxHashMap::default(),
            cap: cap.max(1) as u64,
        }
    }

    #[inline]
    pub(crate) fn insert(&mut self, ptr: u64, seq: u64, how: Removal) {
        if self.next < self.ring.len() {
            self.ring[self.next] = (ptr, seq, how);
        } else {
            self.ring.push((ptr, seq, how));
        }
        self.next += 1;
        if self.next as u64 == self.cap {
            self.next = 0;
        }
        self.inserted += 1;
    }

    /// Indexes the inserts made since the last lookup (those still remembered).
    fn catch_up(&mut self) {
        if self.indexed == self.inserted {
            return;
        }
        let from = self.indexed.max(self.inserted.saturating_sub(self.cap));
        for i in from..self.inserted {
            let (ptr, seq, how) = self.ring[(i % self.cap) as usize];
            self.index.insert(
                ptr,
                Remembered {
                    seq,
                    how,
                    stamp: i + 1,
                },
            );
        }
        self.indexed = self.inserted;
        if self.index.len() as u64 > 2 * self.cap {
            let (cap, inserted) = (self.cap, self.inserted);
            self.index.retain(|_, r| r.stamp + cap > inserted);
        }
    }

    /// When and how `ptr` was last removed, if that is among the last `cap` inserts.
    #[inline]
    pub(crate) fn get(&mut self, ptr: u64) -> Option<(u64, Removal)> {
        // Most lookups are in a set nothing was ever inserted in (early frees), or whose
        // entries were all taken out again: no hashing then.
        if self.inserted == 0 {
            return None;
        }
        self.catch_up();
        if self.index.is_empty() {
            return None;
        }
        let r = self.index.get(&ptr)?;
        (r.stamp + self.cap > self.inserted).then_some((r.seq, r.how))
    }

    /// Forgets `ptr`.
    pub(crate) fn remove(&mut self, ptr: u64) {
        self.catch_up();
        self.index.remove(&ptr);
    }

    /// Pointers remembered.
    /// The inserts still in the window, oldest first, each as `Some` when [`RecentSet::get`]
    /// would answer with it and `None` when a later insert or a removal hides it: inserted
    /// again in this order into an empty set (`None` as [`RecentSet::insert_hidden`]), they
    /// give a set that answers and forgets exactly as this one.
    pub(crate) fn window(&self) -> Window {
        let from = self.inserted.saturating_sub(self.cap);
        let mut latest: FxHashMap<u64, u64> = FxHashMap::default();
        for i in from..self.inserted {
            latest.insert(self.ring[(i % self.cap) as usize].0, i + 1);
        }
        (from..self.inserted)
            .map(|i| {
                let (ptr, seq, how) = self.ring[(i % self.cap) as usize];
                let stamp = i + 1;
                // Indexed inserts may have been removed since; later ones cannot have been (a
                // removal indexes everything first).
                let shown = latest.get(&ptr) == Some(&stamp)
                    && (stamp > self.indexed
                        || self.index.get(&ptr).is_some_and(|r| r.stamp == stamp));
                shown.then_some((ptr, seq, how))
            })
            .collect()
    }

    /// Takes a place in the window that no lookup finds (see [`RecentSet::window`]).
    pub(crate) fn insert_hidden(&mut self) {
        // Pointer 0 is never looked up: freeing and allocating it make nothing.
        self.insert(0, 0, Removal::Free);
    }

    #[cfg(test)]
    pub(crate) fn len(&mut self) -> usize {
        self.catch_up();
        let inserted = self.inserted;
        let cap = self.cap;
        self.index
            .values()
            .filter(|r| r.stamp + cap > inserted)
            .count()
    }

    /// Entries held in the index, forgotten ones not yet swept included (at most three times
    /// the capacity).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_frees_are_remembered_and_bounded() {
        let mut s = RecentSet::new(2);
        s.insert(1, 10, Removal::Free);
        s.insert(2, 11, Removal::Free);
        s.insert(1, 12, Removal::Free);
        // The first entry for 1 is evicted, but 1 was inserted again and stays.
        assert_eq!(s.get(1), Some((12, Removal::Free)));
        s.insert(3, 13, Removal::Free);
        assert_eq!(s.get(2), None);
        assert_eq!(s.get(3), Some((13, Removal::Free)));
        for i in 0..100 {
            s.insert(100 + i, 100 + i, Removal::Free);
            assert!(s.held() <= 6, "{} held", s.held());
            if i % 3 == 0 {
                assert_eq!(s.get(100 + i), Some((100 + i, Removal::Free)));
            }
        }
        assert_eq!(s.len(), 2);
    }

    /// Lookups between inserts, or none for a long time, find the same as a map that forgets
    /// the oldest insert at each new one.
    #[test]
    fn lazy_indexing_finds_what_eager_forgetting_finds() {
        use std::collections::{HashMap, VecDeque};
        let cap = 64;
        let mut s = RecentSet::new(cap);
        let mut order: VecDeque<(u64, u64)> = VecDeque::new();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for seq in 1..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ptr = x % 150;
            match x >> 60 {
                0..=9 => {
                    s.insert(ptr, seq, Removal::Free);
                    model.insert(ptr, seq);
                    order.push_back((ptr, seq));
                    if order.len() > cap {
                        let (old, old_seq) = order.pop_front().unwrap();
                        if model.get(&old) == Some(&old_seq) {
                            model.remove(&old);
                        }
                    }
                }
                10 => {
                    s.remove(ptr);
                    model.remove(&ptr);
                }
                // Long stretches without lookups, then a burst of them.
                _ if seq % 1000 < 900 => {}
                _ => assert_eq!(
                    s.get(ptr).map(|(q, _)| q),
                    model.get(&ptr).copied(),
                    "{seq}"
                ),
            }
        }
    }
}
