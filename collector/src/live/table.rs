//! A table of live pointer allocations that tolerates events written out of order.
//!
//! Sequence numbers are causal (a free takes its number before the real call, an allocation
//! after), but the writer may put an event in the file late. So an allocation can arrive while an
//! older allocation still occupies its address (the older one's free is late), and a free can
//! arrive before the allocation it frees. The table keeps a bounded memory of both cases to match
//! them up when the late event comes, and of recent frees to tell a double free from an invalid
//! one.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::objects::Allocation;
use super::pointers::PointerMap;
use super::recent::{RecentSet, Removal, Window};

/// Recently freed pointers remembered to recognise double frees.
const MAX_FREED: usize = 65536;
/// Frees of unknown pointers remembered in case their allocation arrives late.
const MAX_EARLY_FREES: usize = 4096;
/// Allocations displaced by a newer one at the same address, waiting for their late free.
const MAX_REPLACED: usize = 4096;

/// What became of an inserted allocation.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// It is live. `displaced` is the older occupant of the address, set aside to wait for its
    /// late free.
    Live { displaced: Option<Allocation> },
    /// It is older than the live occupant of its address: set aside as that occupant's
    /// predecessor, waiting for its free.
    SetAside { live_seq: u64 },
    /// Its free arrived first.
    AlreadyFreed { free_seq: u64 },
}

/// What a free found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Freed {
    /// The live allocation at the address.
    Live(Allocation),
    /// An allocation that had been set aside: the free was late.
    SetAside(Allocation),
    /// The allocation was already removed by a context teardown that came after this free.
    TornDown,
    /// Nothing known at the address.
    Unknown,
}

/// Live pointer allocations of one kind family (device-side, or pinned host).
#[derive(Debug)]
pub(crate) struct PointerTable {
    pub(crate) live: PointerMap,
    set_aside: FxHashMap<u64, Vec<Allocation>>,
    set_aside_order: VecDeque<(u64, u64)>,
    freed: RecentSet,
    early_frees: RecentSet,
}

impl Default for PointerTable {
    fn default() -> Self {
        PointerTable {
            live: PointerMap::default(),
            set_aside: FxHashMap::default(),
            set_aside_order: VecDeque::new(),
            freed: RecentSet::new(MAX_FREED),
            early_frees: RecentSet::new(MAX_EARLY_FREES),
        }
    }
}

impl PointerTable {
    /// Adds a successful allocation.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, alloc: Allocation) -> Inserted {
        self.insert_with(alloc.ptr, alloc.seq, || alloc)
    }

    /// Adds the successful allocation `make` builds, at `ptr`, made by event `seq`: built where
    /// it goes (see [`PointerMap::get_or_insert`]).
    #[inline(always)]
    pub(crate) fn insert_with(
        &mut self,
        ptr: u64,
        seq: u64,
        make: impl Fn() -> Allocation,
    ) -> Inserted {
        if let Some((free_seq, Removal::Free)) = self.early_frees.get(ptr) {
            if free_seq > seq {
                self.early_frees.remove(ptr);
                return Inserted::AlreadyFreed { free_seq };
            }
        }
        match self.live.get_or_insert(ptr, &make) {
            None => Inserted::Live { displaced: None },

            Some(current) if current.seq < seq => {
                let alloc = make();
                let old = std::mem::replace(current, alloc);
                self.set_aside(old);
                Inserted::Live {
                    displaced: Some(old),
                }
            }
            Some(current) => {
                let live_seq = current.seq;
                self.set_aside(make());
                Inserted::SetAside { live_seq }
            }
        }
    }

    fn set_aside(&mut self, alloc: Allocation) {
        self.set_aside_order.push_back((alloc.ptr, alloc.seq));
        self.set_aside.entry(alloc.ptr).or_default().push(alloc);
        if self.set_aside_order.len() > MAX_REPLACED {
            if let Some((ptr, seq)) = self.set_aside_order.pop_front() {
                self.take_set_aside(ptr, |s| s == seq);
            }
        }
    }

    /// Removes the set-aside allocation at `ptr` with the highest seq accepted by `accept`.
    fn take_set_aside(&mut self, ptr: u64, accept: impl Fn(u64) -> bool) -> Option<Allocation> {
        let list = self.set_aside.get_mut(&ptr)?;
        let (i, _) = list
            .iter()
            .enumerate()
            .filter(|(_, a)| accept(a.seq))
            .max_by_key(|(_, a)| a.seq)?;
        let alloc = list.swap_remove(i);
        if list.is_empty() {
            self.set_aside.remove(&ptr);
        }
        Some(alloc)
    }

    /// Applies a successful free with sequence number `seq`.
    #[inline]
    pub(crate) fn free(&mut self, ptr: u64, seq: u64) -> Freed {
        if let Some(a) = self.live.remove_if(ptr, |a| a.seq < seq) {
            self.freed.insert(ptr, seq, Removal::Free);
            return Freed::Live(a);
        }
        // The free is older than the live occupant (or there is none): it frees an earlier one.
        if let Some(alloc) = self.take_set_aside(ptr, |s| s < seq) {
            // Forget the order entry lazily: eviction skips entries no longer present.
            return Freed::SetAside(alloc);
        }
        if let Some((removed, Removal::Teardown)) = self.freed.get(ptr) {
            if seq < removed {
                return Freed::TornDown;
            }
        }
        self.early_frees.insert(ptr, seq, Removal::Free);
        Freed::Unknown
    }

    /// For a failed free: the sequence number of an earlier free of `ptr`, if remembered.
    pub(crate) fn freed_at(&mut self, ptr: u64) -> Option<u64> {
        match self.freed.get(ptr) {
            Some((seq, Removal::Free)) => Some(seq),
            _ => None,
        }
    }

    /// Removes every live allocation `doomed` selects (a context teardown at `seq`).
    pub(crate) fn tear_down(
        &mut self,
        seq: u64,
        doomed: impl Fn(&Allocation) -> bool,
    ) -> Vec<Allocation> {
        let mut ptrs: Vec<u64> = self
            .live
            .values()
            .filter(|a| doomed(a))
            .map(|a| a.ptr)
            .collect();
        // In address order, so the recent frees forget them in the same order on every replay.
        ptrs.sort_unstable();

        let mut gone = Vec::with_capacity(ptrs.len());
        for ptr in ptrs {
            if let Some(a) = self.live.remove(ptr) {
                self.freed.insert(ptr, seq, Removal::Teardown);
                gone.push(a);
            }
        }
        self.set_aside.retain(|_, list| {
            list.retain(|a| !doomed(a));
            !list.is_empty()
        });
        gone
    }

    /// Allocations set aside, oldest first.
    pub(crate) fn waiting_for_free(&self) -> impl Iterator<Item = &Allocation> + '_ {
        self.set_aside_order
            .iter()
            .filter_map(|&(ptr, seq)| self.set_aside.get(&ptr)?.iter().find(|a| a.seq == seq))
    }

    /// The recent frees' and the early frees' windows (see [`RecentSet::window`]).
    pub(crate) fn removals(&self) -> (Window, Window) {
        (self.freed.window(), self.early_frees.window())
    }

    /// Puts back an allocation set aside (in the order they were).
    pub(crate) fn restore_set_aside(&mut self, alloc: Allocation) {
        self.set_aside(alloc);
    }

    /// Puts back a place of the recent frees' window (`early`: of the early frees').
    pub(crate) fn restore_removal(&mut self, early: bool, removal: Option<(u64, u64, Removal)>) {
        let set = if early {
            &mut self.early_frees
        } else {
            &mut self.freed
        };
        match removal {
            Some((ptr, seq, how)) => set.insert(ptr, seq, how),
            None => set.insert_hidden(),
        }
    }

    /// How many pointers each bounded memory holds: recent frees, early frees, set aside.
    #[cfg(test)]
    pub(crate) fn remembered(&mut self) -> (usize, usize, usize) {
        (
            self.freed.len(),
            self.early_frees.len(),
            self.set_aside_count(),
        )
    }

    /// Allocations set aside and still waiting for their free.
    #[cfg(test)]
    pub(crate) fn set_aside_count(&self) -> usize {
        self.set_aside.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::MemKind;
    use crate::live::objects::Flags;

    fn alloc(ptr: u64, seq: u64) -> Allocation {
        Allocation {
            ptr,
            size: 100,
            seq,
            time_ns: 0,
            step: 0,
            call: 0,
            flags: Flags::default(),
            kind: MemKind::Device,
        }
    }

    #[test]
    fn a_late_free_finds_the_displaced_allocation() {
        let mut t = PointerTable::default();
        assert_eq!(t.insert(alloc(0x10, 1)), Inserted::Live { displaced: None });
        // The reuse at seq 6 arrives before the free at seq 5.
        assert!(matches!(
            t.insert(alloc(0x10, 6)),
            Inserted::Live { displaced: Some(a) } if a.seq == 1
        ));
        assert!(matches!(t.free(0x10, 5), Freed::SetAside(a) if a.seq == 1));
        assert_eq!(t.set_aside_count(), 0);
        assert_eq!(t.live.get(0x10).unwrap().seq, 6);
    }

    #[test]
    fn a_late_allocation_is_set_aside_for_its_free() {
        let mut t = PointerTable::default();
        t.insert(alloc(0x10, 6));
        assert_eq!(t.insert(alloc(0x10, 1)), Inserted::SetAside { live_seq: 6 });
        assert!(matches!(t.free(0x10, 5), Freed::SetAside(a) if a.seq == 1));
        assert!(matches!(t.free(0x10, 9), Freed::Live(a) if a.seq == 6));
    }

    #[test]
    fn a_free_before_its_allocation_cancels_it() {
        let mut t = PointerTable::default();
        assert_eq!(t.free(0x10, 5), Freed::Unknown);
        assert_eq!(
            t.insert(alloc(0x10, 1)),
            Inserted::AlreadyFreed { free_seq: 5 }
        );
        assert_eq!(t.live.len(), 0);
        // A later allocation at the address is not cancelled by the same free.
        assert_eq!(t.insert(alloc(0x10, 8)), Inserted::Live { displaced: None });
    }

    #[test]
    fn set_aside_allocations_are_bounded() {
        let mut t = PointerTable::default();
        for i in 0..(MAX_REPLACED as u64 + 10) {
            t.insert(alloc(0x10, i + 1));
        }
        assert_eq!(t.set_aside_count(), MAX_REPLACED);
    }
}
