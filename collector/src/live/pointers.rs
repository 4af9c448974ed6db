//! The live allocations of a pointer table, by exact pointer: a hash index over a dense array.
//!
//! Allocations and frees name exact pointers, so nothing on the replay path needs them in address
//! order (queries sort when they list). A `BTreeMap` paid for the order with a tree walk per
//! event and nodes a third empty on average; here an allocation costs its own 48 bytes in a
//! dense array plus 16 to 32 bytes of index (a power-of-two table of `u64` slots at most half
//! full, linear probing, deletion by backward shift so no tombstones pile up). Half, not 3/4: a
//! probe for an address not in the table (every allocation makes one) passes 8.5 slots on
//! average at 3/4 full, 2.5 at half, and the replay has memory to spare for it. Slots freed in the
//! array are reused, so it holds as many entries as were ever live at once.
//!
//! A slot holds the entry's index and the top 32 bits of its pointer's hash. The hash bits say
//! where the entry's probe run starts (its home) and filter the probe: a lookup passes the other
//! pointers of its run, and a deletion moves them, without loading their entries. With a million
//! live allocations those entries lie in 48 MB that the cache does not hold, while the ones a
//! training loop frees and reallocates stay hot: a probe that loaded every entry it passed cost
//! a cache miss per collision.

use super::objects::Allocation;

/// Multiplier of Fibonacci hashing: the top bits of `ptr * K` spread pointers that differ only
/// in their high bits (page-aligned allocations) evenly over the table.
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The most slots the index takes: the home of a slot comes from the 32 hash bits it keeps.
const MAX_SLOTS: usize = 1 << 32;

/// Live allocations keyed by pointer (never 0).
#[derive(Debug, Default)]
pub(crate) struct PointerMap {
    /// The allocations; a free entry has pointer 0 (and its other fields mean nothing).
    entries: Vec<Allocation>,
    /// Free entries, reused first.
    vacant: Vec<u32>,
    /// Per slot: the top 32 bits of the pointer's hash above the entry's index + 1; 0 for an
    /// empty slot. The length is 0 or a power of two, at most [`MAX_SLOTS`].
    slots: Vec<u64>,
    /// 64 minus log2 of the slot count: the hash's top bits index the table.
    shift: u32,
    len: usize,
}

/// The slot of entry `e` for a pointer whose hash is `hash`.
#[inline(always)]
fn slot(hash: u64, e: usize) -> u64 {
    (hash & !0xffff_ffff) | (e as u64 + 1)
}

/// The entry a full slot holds.
#[inline(always)]
fn entry(slot: u64) -> usize {
    (slot as u32) as usize - 1
}

/// The hash of a pointer.
#[inline(always)]
fn hash(ptr: u64) -> u64 {
    ptr.wrapping_mul(K)
}

impl PointerMap {
    /// Live allocations.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first slot of the probe run of a pointer whose hash (or slot) is `h`: the top bits,
    /// which a slot keeps.
    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        (h >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Walks the probe run of `ptr` (whose hash is `h`; the index must have slots): `Ok` with
    /// the slot holding it, or `Err` with the empty slot that ends the run.
    #[inline(always)]
    fn probe(&self, ptr: u64, h: u64) -> Result<usize, usize> {
        let tag = h >> 32;
        let mask = self.mask();
        let mut i = self.home(h);
        loop {
            // Masked, which keeps `i` inside the table and spares a bounds check.
            i &= mask;
            let s = self.slots[i];
            if s == 0 {
                return Err(i);
            }
            if s >> 32 == tag && self.entry_at(s).ptr == ptr {
                return Ok(i);
            }
            i += 1;
        }
    }

    /// The entry full slot `s` holds.
    #[inline(always)]
    fn entry_at(&self, s: u64) -> &Allocation {
        debug_assert!(s != 0 && entry(s) < self.entries.len());
        // SAFETY: a full slot holds the index + 1 of an entry (`place`), moved only between
        // slots (`remove_if`, `grow`), and entries are never removed (a freed one is marked
        // vacant and reused), so the index is inside `entries`.
        unsafe { self.entries.get_unchecked(entry(s)) }
    }

    /// The slot holding `ptr`, if live.
    #[inline]
    fn slot_of(&self, ptr: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        self.probe(ptr, hash(ptr)).ok()
    }

    /// The live allocation at `ptr`.
    pub(crate) fn get(&self, ptr: u64) -> Option<&Allocation> {
        let s = self.slot_of(ptr)?;
        Some(&self.entries[entry(self.slots[s])])
    }

    /// The live allocation at `ptr`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, ptr: u64) -> Option<&mut Allocation> {
        let s = self.slot_of(ptr)?;
        let e = entry(self.slots[s]);
        Some(&mut self.entries[e])
    }

    /// Whether an allocation is live at `ptr`.
    #[inline]
    pub(crate) fn contains(&self, ptr: u64) -> bool {
        self.slot_of(ptr).is_some()
    }

    /// The live allocation at `ptr`, to change; or, when there is none, `None` and the
    /// allocation `make` builds (at `ptr`) is added. One probe either way: an allocation's
    /// address is nearly always free. `make` builds the allocation in its entry: one built
    /// aside and copied in was a wide copy waiting on the narrow stores that built it.
    #[inline(always)]
    pub(crate) fn get_or_insert(
        &mut self,
        ptr: u64,
        make: impl FnOnce() -> Allocation,
    ) -> Option<&mut Allocation> {
        debug_assert!(ptr != 0);
        let h = hash(ptr);
        if !self.slots.is_empty() {
            let i = match self.probe(ptr, h) {
                Ok(i) => return Some(&mut self.entries[entry(self.slots[i])]),
                Err(i) => i,
            };
            if (self.len + 1) * 2 <= self.slots.len() || self.slots.len() == MAX_SLOTS {
                self.place(i, h, make);
                return None;
            }
        }
        self.grow();
        let mask = self.mask();
        let mut i = self.home(h);
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.place(i, h, make);
        None
    }

    /// Puts the allocation `make` builds (whose pointer's hash is `h`) in an entry and that
    /// entry in the empty slot `at`.
    #[inline(always)]
    fn place(&mut self, at: usize, h: u64, make: impl FnOnce() -> Allocation) {
        let e = match self.vacant.pop() {
            Some(e) => {
                self.entries[e as usize] = make();
                e as usize
            }
            None => {
                self.entries.push(make());
                self.entries.len() - 1
            }
        };
        self.slots[at] = slot(h, e);
        self.len += 1;
    }

    /// Removes and returns the allocation at `ptr`.
    #[inline]
    pub(crate) fn remove(&mut self, ptr: u64) -> Option<Allocation> {
        self.remove_if(ptr, |_| true)
    }

    /// Removes and returns the allocation at `ptr` if `accept` takes it.
    #[inline]
    pub(crate) fn remove_if(
        &mut self,
        ptr: u64,
        accept: impl FnOnce(&Allocation) -> bool,
    ) -> Option<Allocation> {
        let mut hole = self.slot_of(ptr)?;
        let e = entry(self.slots[hole]);
        if !accept(&self.entries[e]) {
            return None;
        }

        // A vacant entry is one with pointer 0; the rest of it is never read.
        let gone = self.entries[e];
        self.entries[e].ptr = 0;
        self.vacant.push(e as u32);
        self.len -= 1;
        // Backward shift: pull later entries of the probe run into the hole when their home is
        // not between the hole and where they sit, so every run stays unbroken.
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let s = self.slots[i];
            if s == 0 {
                break;
            }
            let home = self.home(s);
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                self.slots[hole] = s;
                hole = i;
            }
        }
        self.slots[hole] = 0;
        Some(gone)
    }

    /// Doubles the index (64 slots at first) and puts every live entry back in it, each where
    /// the hash bits of its slot say.
    fn grow(&mut self) {
        let slots = (self.slots.len() * 2).clamp(64, MAX_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![0; slots]);
        self.shift = 64 - slots.trailing_zeros();
        let mask = slots - 1;
        for s in old.into_iter().filter(|&s| s != 0) {
            let mut i = self.home(s);
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// The live allocations, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Allocation> {
        self.entries.iter().filter(|a| a.ptr != 0)
    }

    /// The live allocations, to change, in no particular order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Allocation> {
        self.entries.iter_mut().filter(|a| a.ptr != 0)
    }

    /// The live allocations in address order.
    pub(crate) fn in_order(&self) -> InOrder<'_> {
        // Sorting (pointer, index) pairs keeps the sort in one contiguous array; sorting
        // references would chase each into the entries at every comparison.
        let mut keys: Vec<(u64, u32)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, a)| a.ptr != 0)
            .map(|(e, a)| (a.ptr, e as u32))
            .collect();
        keys.sort_unstable();
        InOrder {
            keys,
            entries: &self.entries,
        }
    }
}

/// The live allocations of a [`PointerMap`] in address order, as of when it was made.
pub(crate) struct InOrder<'a> {
    keys: Vec<(u64, u32)>,
    entries: &'a [Allocation],
}

impl<'a> InOrder<'a> {
    /// Whether a live allocation contains `addr` (a zero-byte one counts as one byte).
    pub(crate) fn covers(&self, addr: u64) -> bool {
        let after = self.keys.partition_point(|&(ptr, _)| ptr <= addr);
        after > 0 && {
            let (ptr, e) = self.keys[after - 1];
            addr - ptr < self.entries[e as usize].size.max(1)
        }
    }
}

impl<'a> IntoIterator for InOrder<'a> {
    type Item = &'a Allocation;
    type IntoIter = InOrderIter<'a>;

    fn into_iter(self) -> InOrderIter<'a> {
        InOrderIter {
            keys: self.keys.into_iter(),
            entries: self.entries,
        }
    }
}

/// Iterates an [`InOrder`].
pub(crate) struct InOrderIter<'a> {
    keys: std::vec::IntoIter<(u64, u32)>,
    entries: &'a [Allocation],
}

impl<'a> Iterator for InOrderIter<'a> {
    type Item = &'a Allocation;

    fn next(&mut self) -> Option<&'a Allocation> {
        let (_, e) = self.keys.next()?;
        Some(&self.entries[e as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::MemKind;
    use crate::live::objects::Flags;
    use std::collections::BTreeMap;

    fn alloc(ptr: u64, size: u64) -> Allocation {
        Allocation {
            ptr,
            size,
            seq: size,
            time_ns: 0,
            step: 0,
            call: 0,
            flags: Flags::default(),
            kind: MemKind::Device,
        }
    }

    /// What a live set of a million costs per allocation starts here.
    #[test]
    fn an_allocation_is_48_bytes() {
        assert_eq!(std::mem::size_of::<Allocation>(), 48);
    }

    /// Inserts and removes against a `BTreeMap` model, over pointers that collide in the index.
    #[test]
    fn follows_a_map_through_inserts_and_removes() {
        let mut map = PointerMap::default();
        let mut model = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 3000 distinct page-aligned pointers: many share a home slot at every table size.
            let ptr = 0x7f00_0000_0000 + (x % 3000) * 0x20_0000;
            if x >> 63 == 0 || model.len() > 2500 {
                assert_eq!(
                    map.remove(ptr).map(|a| a.size),
                    model.remove(&ptr),
                    "{round}"
                );
            } else {
                match map.get_or_insert(ptr, || alloc(ptr, round)) {
                    Some(live) => assert_eq!(Some(&live.size), model.get(&ptr), "{round}"),
                    None => assert_eq!(model.insert(ptr, round), None, "{round}"),
                }
            }
            assert_eq!(map.len(), model.len());
        }
        for (&ptr, &size) in &model {
            assert_eq!(map.get(ptr).map(|a| a.size), Some(size));
        }
        let sorted: Vec<(u64, u64)> = map
            .in_order()
            .into_iter()
            .map(|a| (a.ptr, a.size))
            .collect();
        let want: Vec<(u64, u64)> = model.into_iter().collect();
        assert_eq!(sorted, want);
        assert!(!map.contains(0x1234));
    }
}
