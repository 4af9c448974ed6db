//! Walks remembered per thread, so that a stack seen before costs a few compares instead of a
//! walk.
//!
//! A walk is a function of where it starts (the capturing frame's instruction, stack and frame
//! pointers), of the rules it applies (a function of each return address, fixed while the loaded
//! objects do not change), and of the words it reads from the stack. A memo keeps, for one walk,
//! how it started, the rule cache's epoch, every word the walk's outcome depended on (where,
//! relative to the starting stack pointer, and what it held) and the interned id of the stack it
//! found. A capture that starts the same way (same caller, depth and stop, same stack pointer,
//! and the same frame pointer if the walk used it before restoring it from the stack) and finds
//! every one of those words unchanged would make exactly the same walk: it takes the memo's id.
//! Any difference falls back to the walk, which then replaces the memo.
//!
//! Which words matter: every return address read, and a saved frame pointer only if a later rule
//! computes from the frame pointer before another one is restored. (Code built without frame
//! pointers saves `rbp` as an ordinary register; the values saved there change from call to
//! call without changing the stack, and would otherwise prove nothing ever again.)
//!
//! In a training loop the same call paths recur every step at the same stack depths, so most
//! captures are memo hits: the cost of a stack becomes about one load and compare per frame.
//!
//! The table is 2-way set-associative by (caller, stack pointer), allocated zeroed on a thread's
//! first capture (pages never touched are never backed by memory).

use super::StopAt;

/// Most stack words a remembered walk may have read (a walk of 32 frames from the hook reads
/// about 40); longer walks are not remembered.
pub const MAX_READS: usize = 60;
const SET_BITS: u32 = 8;
const SETS: usize = 1 << SET_BITS;
const WAYS: usize = 2;

/// How a walk starts: everything besides the stack's contents that it depends on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Start {
    pub caller: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub depth: u32,
    pub stop: StopAt,
    /// The rule cache's epoch (see `rules::RuleCache::epoch`).
    pub epoch: u32,
}

/// One remembered walk.
#[derive(Clone, Copy)]
#[repr(C)]
struct Memo {
    /// The interned stack (0: an empty entry).
    id: u32,
    reads: u32,
    /// Whether the walk used the starting frame pointer before it was restored from the stack.
    uses_bp: bool,
    start: Start,
    at: [u32; MAX_READS],
    held: [u64; MAX_READS],
}

impl Memo {
    fn starts_like(&self, s: &Start) -> bool {
        let m = &self.start;
        self.id != 0
            && m.caller == s.caller
            && m.sp == s.sp
            && m.ip == s.ip
            && m.depth == s.depth
            && m.stop == s.stop
            && m.epoch == s.epoch
            && (!self.uses_bp || m.bp == s.bp)
    }

    /// Whether every word the walk read still holds what it held.
    ///
    /// # Safety
    /// The memo was recorded on the calling thread by a walk that started at stack pointer `sp`
    /// (its reads lie between `sp` and the top of this thread's stack, all mapped).
    #[inline]
    unsafe fn still_holds(&self, sp: u64) -> bool {
        let n = self.reads as usize;
        let mut differ = 0u64;
        for (&at, &held) in self.at[..n].iter().zip(&self.held[..n]) {
            // SAFETY: the caller's contract: an aligned word of this thread's live stack.
            let now = unsafe { std::ptr::read_volatile((sp + u64::from(at)) as *const u64) };
            differ |= now ^ held;
        }
        differ == 0
    }
}

/// One thread's remembered walks.
pub struct Memos {
    sets: Box<[[Memo; WAYS]]>,
    /// Per set, the way used last (the other one is replaced).
    last: Box<[u8]>,
}

impl Memos {
    pub fn new() -> Memos {
        // Zeroed by the allocator (calloc: fresh pages are not touched until used).
        let layout = std::alloc::Layout::array::<[Memo; WAYS]>(SETS).expect("a fixed size");
        // SAFETY: a non-zero-sized layout.
        let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut [Memo; WAYS];
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` holds SETS zeroed elements allocated with the global allocator's layout for
        // that array, which is what a boxed slice of them is; an all-zero `Memo` is valid (plain
        // integers, `false`, and id 0: empty).
        let sets = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, SETS)) };
        Memos {
            sets,
            last: vec![0; SETS].into_boxed_slice(),
        }
    }

    fn set(s: &Start) -> usize {
        let h = (s.caller ^ s.sp.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - SET_BITS)) as usize
    }

    /// The id of the stack a walk from `start` would find, if a remembered walk proves it.
    ///
    /// # Safety
    /// `start.sp` is the calling thread's current capture's stack pointer, inside this thread's
    /// stack, and every memo was recorded on this thread.
    #[inline]
    pub unsafe fn find(&mut self, start: &Start) -> Option<u32> {
        let set = Self::set(start);
        for way in 0..WAYS {
            let m = &self.sets[set][way];
            // SAFETY: recorded on this thread from the same stack pointer (`starts_like`).
            if m.starts_like(start) && unsafe { m.still_holds(start.sp) } {
                self.last[set] = way as u8;
                return Some(m.id);
            }
        }
        None
    }

    /// Remembers a walk (unless it read too much to be remembered).
    pub fn store(&mut self, start: &Start, log: &Log, id: u32) {
        if log.overflow || id == 0 {
            return;
        }
        let set = Self::set(start);
        // The way that held a walk from the same start (now stale), else the one not used last.
        let way = (0..WAYS)
            .find(|&w| {
                let m = &self.sets[set][w].start;
                m.caller == start.caller && m.sp == start.sp
            })
            .unwrap_or(1 - self.last[set] as usize % WAYS);
        let m = &mut self.sets[set][way];
        m.id = id;
        m.reads = log.reads as u32;
        m.uses_bp = log.uses_bp;
        m.start = *start;
        m.at[..log.reads].copy_from_slice(&log.at[..log.reads]);
        m.held[..log.reads].copy_from_slice(&log.held[..log.reads]);
        self.last[set] = way as u8;
    }
}

impl Default for Memos {
    fn default() -> Self {
        Memos::new()
    }
}

/// What a walk does that a memo must capture: the words it reads and its use of the starting
/// frame pointer. Implemented by [`Log`] (remembering) and [`Forget`] (nothing).
pub trait Record {
    /// A word read at `at`, holding `held`.
    fn read(&mut self, at: u64, held: u64);
    /// A saved frame pointer restored from `at` (which matters only if a later rule uses it).
    fn read_bp(&mut self, at: u64, held: u64);
    /// A step about to apply a rule: whether it computes from the frame pointer, whether it
    /// restores it; `None` for a step taken by framehop (which may do either).
    fn rule(&mut self, bp: Option<(bool, bool)>);
}

/// Records nothing.
pub struct Forget;

impl Record for Forget {
    #[inline(always)]
    fn read(&mut self, _: u64, _: u64) {}
    #[inline(always)]
    fn read_bp(&mut self, _: u64, _: u64) {}
    #[inline(always)]
    fn rule(&mut self, _: Option<(bool, bool)>) {}
}

/// The reads of one walk from stack pointer `base`.
pub struct Log {
    base: u64,
    reads: usize,
    overflow: bool,
    /// The frame pointer still holds its starting value.
    bp_initial: bool,
    uses_bp: bool,
    /// Where the frame pointer was last restored from, until a rule uses it.
    pending_bp: Option<(u64, u64)>,
    at: [u32; MAX_READS],
    held: [u64; MAX_READS],
}

impl Log {
    pub fn new(base: u64) -> Log {
        Log {
            base,
            reads: 0,
            overflow: false,
            bp_initial: true,
            uses_bp: false,
            pending_bp: None,
            at: [0; MAX_READS],
            held: [0; MAX_READS],
        }
    }
}

impl Record for Log {
    #[inline(always)]
    fn read(&mut self, at: u64, held: u64) {
        let Ok(off) = u32::try_from(at.wrapping_sub(self.base)) else {
            self.overflow = true;
            return;
        };
        if self.reads == MAX_READS {
            self.overflow = true;
            return;
        }
        self.at[self.reads] = off;
        self.held[self.reads] = held;
        self.reads += 1;
    }

    #[inline(always)]
    fn read_bp(&mut self, at: u64, held: u64) {
        self.pending_bp = Some((at, held));
        self.bp_initial = false;
    }

    #[inline(always)]
    fn rule(&mut self, bp: Option<(bool, bool)>) {
        // framehop (`None`) may use the frame pointer whatever its rule: assume it does.
        if bp.is_none_or(|(from_bp, _)| from_bp) {
            if self.bp_initial {
                self.uses_bp = true;
            }
            if let Some((at, held)) = self.pending_bp.take() {
                self.read(at, held);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(sp: u64) -> Start {
        Start {
            caller: 0x1234,
            ip: 0x99,
            sp,
            bp: 0x500,
            depth: 32,
            stop: StopAt::NEVER,
            epoch: 3,
        }
    }

    /// Writes a word the way another frame would (not through a reference the compiler tracks).
    fn poke(words: &mut [u64; 6], i: usize, v: u64) {
        // SAFETY: an element of `words`.
        unsafe { std::ptr::write_volatile(&mut words[i], v) };
    }

    #[test]
    fn a_walk_is_proven_while_the_words_it_read_hold() {
        let mut words = [10u64, 11, 12, 13, 14, 15];
        let base = words.as_ptr() as u64;
        let s = start(base);
        let mut log = Log::new(base);
        log.rule(Some((false, false)));
        log.read(base + 8, 11);
        log.rule(Some((false, true)));
        log.read(base + 24, 13);
        // A frame pointer restored and then used.
        log.read_bp(base + 32, 14);
        log.rule(Some((true, false)));
        log.read(base + 40, 15);
        // One restored and never used: it does not matter.
        log.rule(Some((false, true)));
        log.read_bp(base + 16, 12);
        let mut m = Memos::new();
        m.store(&s, &log, 42);
        // SAFETY (all finds): `base` and the reads lie in `words`, alive here.
        assert_eq!(unsafe { m.find(&s) }, Some(42));
        // The frame pointer was never used before being restored: it may differ.
        assert_eq!(unsafe { m.find(&Start { bp: 7, ..s }) }, Some(42));
        // A word it did not read may change; one it read may not.
        poke(&mut words, 0, 99);
        assert_eq!(unsafe { m.find(&s) }, Some(42));
        poke(&mut words, 2, 99);
        assert_eq!(unsafe { m.find(&s) }, Some(42));
        for i in [1, 3, 4, 5] {
            let was = words[i];
            poke(&mut words, i, 99);
            assert_eq!(unsafe { m.find(&s) }, None, "word {i}");
            poke(&mut words, i, was);
            assert_eq!(unsafe { m.find(&s) }, Some(42));
        }
        // Anything else about the start differs: not proven.
        for other in [
            Start { caller: 1, ..s },
            Start { ip: 1, ..s },
            Start { depth: 8, ..s },
            Start { epoch: 4, ..s },
            Start {
                stop: StopAt { lo: 1, hi: 2 },
                ..s
            },
        ] {
            assert_eq!(unsafe { m.find(&other) }, None, "{other:?}");
        }
    }

    #[test]
    fn a_walk_that_used_the_frame_pointer_needs_the_same_one() {
        let words = [10u64, 11, 12, 13, 14, 15];
        let base = words.as_ptr() as u64;
        let s = start(base);
        let mut log = Log::new(base);
        log.rule(Some((true, false)));
        log.read(base + 8, 11);
        let mut m = Memos::new();
        m.store(&s, &log, 5);
        // SAFETY: as above.
        assert_eq!(unsafe { m.find(&s) }, Some(5));
        assert_eq!(unsafe { m.find(&Start { bp: 7, ..s }) }, None);
    }

    #[test]
    fn a_walk_that_read_too_much_is_not_remembered() {
        let words = [0u64; 6];
        let base = words.as_ptr() as u64;
        let s = start(base);
        let mut log = Log::new(base);
        for _ in 0..=MAX_READS {
            log.read(base, 0);
        }
        let mut m = Memos::new();
        m.store(&s, &log, 5);
        // SAFETY: as above.
        assert_eq!(unsafe { m.find(&s) }, None);
    }
}
