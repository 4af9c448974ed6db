//! Stacks interned where they are captured: a hook turns the frames it walked into a small id
//! with one hash and one probe, and the event carries only the id. The writer thread reads a
//! stack's frames from here the first time an event names it, to write its definition.
//!
//! Why in the hook: handing the frames over instead costs the hook an allocation per event (and
//! the writer a cross-thread free, a hash of every frame and a lookup), for stacks that repeat
//! almost always — a training step allocates from the same few hundred places every step.
//!
//! Why hand-written rather than a concurrent map crate: the hook path must not allocate (it may
//! run inside the program's own allocator's locks, or in a forked child), must never block on
//! another thread, and must work in a signal handler's context as far as memory goes. So the
//! table is three fixed regions mapped once (`mmap`, untouched pages cost nothing) and written
//! with atomics only:
//!
//! - `words`: the frames of every stack, appended (one `fetch_add` reserves a stack's room);
//! - `defs`: per id, where its frames lie (`offset << 16 | length`);
//! - `index`: open addressing over `check << 32 | id`, probed linearly from the hash.
//!
//! Inserting writes the frames, then the definition, then publishes the id in the index with a
//! compare-and-swap (release); a reader that finds the id (acquire) therefore sees both. Two
//! threads inserting the same new stack at once may both define it; the loser's id stays
//! unpublished and unused (an id the writer never sees). A hit compares the frames themselves,
//! never only the hash, so two stacks never share an id.
//!
//! Capacity is fixed: when a table is full (more distinct stacks than it holds), events get no
//! stack (id 0) and the loss is counted; the writer says so in the trace.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// Index slots (a power of two); the table takes ids until the index is three quarters full.
const INDEX_BITS: u32 = 18;
/// Most ids: three quarters of the index.
const MAX_IDS: u32 = 3 << (INDEX_BITS - 2);
/// Room for frames, in words (a stack of 32 frames takes 32).
const WORDS: u64 = 1 << 22;
/// The longest stack (frames kept per stack never exceed 256).
const MAX_LEN: usize = 256;

const NEW: u8 = 0;
const MAPPING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// The regions of a table, mapped on first use.
#[derive(Clone, Copy)]
struct Regions {
    index: *const AtomicU64,
    defs: *const AtomicU64,
    words: *mut u64,
}

/// An append-only table of stacks (lists of 64-bit words), shared by every thread.
pub struct StackTable {
    state: AtomicU8,
    index: AtomicPtr<AtomicU64>,
    defs: AtomicPtr<AtomicU64>,
    words: AtomicPtr<u64>,
    /// Words handed out so far.
    used: AtomicU64,
    /// Ids handed out so far (ids start at 1).
    ids: AtomicU32,
    /// Captures that got no id because the table was full.
    lost: AtomicU64,
}

/// Native stacks (return addresses).
pub static NATIVE: StackTable = StackTable::new();
/// Python stacks (each frame a code id and a line, packed in one word).
pub static PYTHON: StackTable = StackTable::new();

/// The hash of a stack: FxHash's multiply-rotate over the words, and the length.
#[inline]
fn hash(frames: &[u64]) -> u64 {
    let mut h = frames.len() as u64;
    for &w in frames {
        h = (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    // The slot comes from the high bits, the check from the low: fold them together first.
    h ^ (h >> 29)
}

/// Maps `bytes` of zeroed, private memory; `None` on failure.
fn map(bytes: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint; it touches nothing of ours.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

impl StackTable {
    pub const fn new() -> StackTable {
        StackTable {
            state: AtomicU8::new(NEW),
            index: AtomicPtr::new(std::ptr::null_mut()),
            defs: AtomicPtr::new(std::ptr::null_mut()),
            words: AtomicPtr::new(std::ptr::null_mut()),
            used: AtomicU64::new(0),
            ids: AtomicU32::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// Maps the table's regions now (the session does, before any hook interns); `false` when
    /// that failed (then every capture gets id 0 and is counted as lost).
    pub fn prepare(&self) -> bool {
        self.regions().is_some()
    }

    /// The regions, mapping them on first use; `None` if that failed.
    #[inline]
    fn regions(&self) -> Option<Regions> {
        if self.state.load(Ordering::Acquire) == READY {
            return Some(self.published());
        }
        self.map_regions()
    }

    /// The regions' addresses (only meaningful once the state is READY, read with acquire).
    #[inline]
    fn published(&self) -> Regions {
        Regions {
            index: self.index.load(Ordering::Relaxed),
            defs: self.defs.load(Ordering::Relaxed),
            words: self.words.load(Ordering::Relaxed),
        }
    }

    #[cold]
    fn map_regions(&self) -> Option<Regions> {
        if self
            .state
            .compare_exchange(NEW, MAPPING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread maps them (a few microseconds): wait for it, but not forever — a
            // child forked meanwhile would wait for a thread it does not have.
            let start = Instant::now();
            loop {
                match self.state.load(Ordering::Acquire) {
                    READY => return Some(self.published()),
                    FAILED => return None,
                    _ if start.elapsed() > Duration::from_millis(10) => return None,
                    _ => std::hint::spin_loop(),
                }
            }
        }
        let index = map((1usize << INDEX_BITS) * 8);
        let defs = map(MAX_IDS as usize * 8 + 8);
        let words = map(WORDS as usize * 8);
        match (index, defs, words) {
            (Some(index), Some(defs), Some(words)) => {
                self.index.store(index.cast(), Ordering::Relaxed);
                self.defs.store(defs.cast(), Ordering::Relaxed);
                self.words.store(words.cast(), Ordering::Relaxed);
                self.state.store(READY, Ordering::Release);
                Some(self.published())
            }
            _ => {
                self.state.store(FAILED, Ordering::Release);
                None
            }
        }
    }

    /// The id of `frames`, defining it on first sight; 0 when the table is full (counted) or
    /// `frames` is empty.
    #[inline]
    pub fn intern(&self, frames: &[u64]) -> u32 {
        if frames.is_empty() || frames.len() > MAX_LEN {
            return 0;
        }
        let Some(r) = self.regions() else {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        let h = hash(frames);
        let check = (h as u32 | 1) as u64;
        let mask = (1u64 << INDEX_BITS) - 1;
        let mut slot = h >> (64 - INDEX_BITS);
        // An id defined by this call, not yet published.
        let mut mine = 0u32;
        loop {
            // SAFETY: `slot` is masked to the index's length.
            let entry = unsafe { &*r.index.add(slot as usize) };
            let e = entry.load(Ordering::Acquire);
            if e == 0 {
                if mine == 0 {
                    mine = match self.define(r, frames) {
                        Some(id) => id,
                        None => {
                            self.lost.fetch_add(1, Ordering::Relaxed);
                            return 0;
                        }
                    };
                }
                match entry.compare_exchange(
                    0,
                    check << 32 | mine as u64,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return mine,
                    // Another stack took the slot meanwhile: look at it as any other.
                    Err(other) => {
                        if other >> 32 == check && self.same(r, other as u32, frames) {
                            return other as u32;
                        }
                    }
                }
            } else if e >> 32 == check && self.same(r, e as u32, frames) {
                return e as u32;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Writes the frames and the definition of a new id; `None` when out of ids or room.
    fn define(&self, r: Regions, frames: &[u64]) -> Option<u32> {
        let len = frames.len() as u64;
        let at = self.used.fetch_add(len, Ordering::Relaxed);
        if at + len > WORDS {
            return None;
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        if id > MAX_IDS {
            return None;
        }
        // SAFETY: `at..at + len` lies inside `words` (checked) and was reserved by this thread
        // alone; nobody reads it before the id is published below.
        unsafe {
            std::ptr::copy_nonoverlapping(frames.as_ptr(), r.words.add(at as usize), frames.len())
        };
        // SAFETY: `id <= MAX_IDS` indexes `defs`.
        unsafe { &*r.defs.add(id as usize) }.store(at << 16 | len, Ordering::Release);
        Some(id)
    }

    /// Whether id `id` names exactly `frames`.
    #[inline]
    fn same(&self, r: Regions, id: u32, frames: &[u64]) -> bool {
        self.frames_in(r, id).is_some_and(|f| f == frames)
    }

    fn frames_in(&self, r: Regions, id: u32) -> Option<&'static [u64]> {
        if id == 0 || id > MAX_IDS {
            return None;
        }
        // SAFETY: `id` indexes `defs`.
        let d = unsafe { &*r.defs.add(id as usize) }.load(Ordering::Acquire);
        if d == 0 {
            return None;
        }
        let (at, len) = (d >> 16, d & 0xffff);
        // SAFETY: a published definition names words written before it (release/acquire) that
        // never change again; the regions are never unmapped.
        Some(unsafe { std::slice::from_raw_parts(r.words.add(at as usize), len as usize) })
    }

    /// The frames of id `id` (for the writer thread, which got the id from an event).
    pub fn frames(&self, id: u32) -> Option<&'static [u64]> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        self.frames_in(self.published(), id)
    }

    /// Captures that got no id because the table was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_stacks_share_an_id_and_others_do_not() {
        let t = StackTable::new();
        let a = t.intern(&[1, 2, 3]);
        let b = t.intern(&[1, 2, 4]);
        let c = t.intern(&[1, 2]);
        assert!(a != 0 && b != 0 && c != 0);
        assert_eq!(t.intern(&[1, 2, 3]), a);
        assert_eq!(t.intern(&[1, 2, 4]), b);
        assert!(a != b && b != c && a != c);
        assert_eq!(t.frames(a), Some(&[1u64, 2, 3][..]));
        assert_eq!(t.frames(c), Some(&[1u64, 2][..]));
        assert_eq!(t.intern(&[]), 0);
        assert_eq!(t.lost(), 0);
    }

    #[test]
    fn threads_racing_on_the_same_stacks_agree_on_their_ids() {
        let t: &'static StackTable = Box::leak(Box::new(StackTable::new()));
        // Mapped first, as the session does: a thread that meets an unmapped table waits only
        // milliseconds for the one mapping it (on a loaded machine that one can be slower).
        assert!(t.prepare());
        let ids: Vec<Vec<u32>> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..2000u64)
                        .map(|i| t.intern(&[i % 500, i % 7, 0xfeed]))
                        .collect::<Vec<u32>>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        for other in &ids[1..] {
            assert_eq!(other, &ids[0]);
        }
        for (i, &id) in ids[0].iter().enumerate() {
            let i = i as u64;
            assert_eq!(t.frames(id), Some(&[i % 500, i % 7, 0xfeed][..]));
        }
        // 500 × 7 combinations at most, each with one published id.
        let mut distinct = ids[0].clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 2000);
    }

    #[test]
    fn hash_collisions_keep_stacks_apart() {
        let t = StackTable::new();
        // Many stacks into a small part of the index: probing keeps every one distinct.
        let ids: Vec<u32> = (0..10_000u64).map(|i| t.intern(&[i])).collect();
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(t.intern(&[i as u64]), id);
            assert_eq!(t.frames(id), Some(&[i as u64][..]));
        }
    }
}
