//! A per-thread cache of unwind rules, in front of framehop's own.
//!
//! framehop caches the rule it finds for an address, but in a direct-mapped table of 509 slots
//! indexed by `address % 509`: two return addresses on a hot path that share a slot evict each
//! other on every capture, and each miss re-reads DWARF CFI (a few hundred nanoseconds). In the
//! capture benchmark one such pair doubled the cost of a runtime call's stack. This cache is
//! 4-way set-associative with 2048 entries, and a hit is applied here without calling framehop.
//!
//! framehop does not hand out the rules it finds, so they are read off its behaviour: on a miss,
//! after the real step, the same address is unwound twice more on made-up registers, with a
//! made-up stack whose every word holds its own address (tagged). Every rule framehop can cache
//! has the same shape — the CFA is the stack or frame pointer plus a constant, the return address
//! and the saved frame pointer (if restored) are read at constant offsets from the CFA — so two
//! runs with different distances between stack and frame pointer pin the shape down exactly,
//! and a result that fits no such shape (CFI that reads memory to find the CFA, as in signal
//! trampolines) is marked to go to framehop every time.
//!
//! A hit reads the stack only, never an object's unwind sections, so it needs no check of the
//! loaded objects: a walk whose every rule is cached never takes the loader's lock. The rules are
//! dropped whenever a walk that needs framehop finds a new module list, and each thread checks
//! every 64 captures regardless, so the rules of an unloaded object (whose addresses another
//! object may reuse) live on for at most that long — and even then they can only give a wrong
//! frame, not a fault, since every read is bounded by the thread's stack.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, Unwinder};

use super::memo::Record;
use super::unwind_modules::ModuleList;

/// How to leave a frame whose code address has a cached rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The outermost frame: the stack ends here.
    End,
    /// No rule of the simple shape: unwind through framehop every time.
    Delegate,
    /// CFA = (frame pointer if `from_bp`, else stack pointer) + `cfa_offset`; the return address
    /// is the word at CFA + 8 × `ra_words`; the caller's frame pointer is the word at
    /// CFA + 8 × `bp_words`, or the current one if `None`.
    Step {
        from_bp: bool,
        cfa_offset: i32,
        ra_words: i8,
        bp_words: Option<i8>,
    },
}

impl Rule {
    /// Applies the rule to `regs`; returns the return address, or `None` where the stack ends
    /// (or a word cannot be read).
    #[inline]
    pub fn apply(
        self,
        regs: &mut UnwindRegsX86_64,
        read: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Option<u64> {
        let Rule::Step {
            from_bp,
            cfa_offset,
            ra_words,
            bp_words,
        } = self
        else {
            return None;
        };
        let (sp, bp) = (regs.sp(), regs.bp());
        let base = if from_bp {
            // As framehop: a zero frame pointer marks the end of a frame-pointer chain.
            if bp == 0 {
                return None;
            }
            bp
        } else {
            sp
        };
        let cfa = base.checked_add_signed(i64::from(cfa_offset))?;
        // The return address lies below the CFA and at or above the stack pointer, so a real
        // frame's CFA is always above it; anything else would walk in circles.
        if cfa <= sp {
            return None;
        }
        let word = |words: i8| cfa.wrapping_add_signed(i64::from(words) * 8);
        let ra = read(word(ra_words)).ok()?;
        let new_bp = match bp_words {
            Some(w) => read(word(w)).ok()?,
            None => bp,
        };
        if ra == 0 {
            return None;
        }
        regs.set_ip(ra);
        regs.set_sp(cfa);
        regs.set_bp(new_bp);
        Some(ra)
    }
}

/// A rule as the walk applies it: one word, decoded with shifts (the enum's layout costs a
/// dozen instructions per frame to take apart).
///
/// Bits 0–31: the CFA offset; 32–39: the return address's offset from the CFA in words; 40–47:
/// the saved frame pointer's, if [`Packed::RESTORES_BP`]; 56–63: the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed(u64);

/// What one step of a walk found.
pub enum Stepped {
    /// The caller's return address, stack pointer and frame pointer.
    Next { ra: u64, sp: u64, bp: u64 },
    /// The stack ends here (the outermost frame, an unreadable word, or a rule that does not
    /// apply).
    End,
    /// No simple rule: framehop must take this step.
    Slow,
}

impl Packed {
    const FROM_SP: u64 = 0;
    const FROM_BP: u64 = 1;
    const END: u64 = 2;
    const DELEGATE: u64 = 3;
    const RESTORES_BP: u64 = 1 << 48;

    pub fn new(rule: Rule) -> Packed {
        Packed(match rule {
            Rule::End => Self::END << 56,
            Rule::Delegate => Self::DELEGATE << 56,
            Rule::Step {
                from_bp,
                cfa_offset,
                ra_words,
                bp_words,
            } => {
                let kind = if from_bp {
                    Self::FROM_BP
                } else {
                    Self::FROM_SP
                };
                kind << 56
                    | u64::from(cfa_offset as u32)
                    | u64::from(ra_words as u8) << 32
                    | bp_words.map_or(0, |w| u64::from(w as u8) << 40 | Self::RESTORES_BP)
            }
        })
    }

    /// The rule it packs.
    pub fn rule(self) -> Rule {
        match self.0 >> 56 {
            Self::END => Rule::End,
            Self::DELEGATE => Rule::Delegate,
            kind => Rule::Step {
                from_bp: kind == Self::FROM_BP,
                cfa_offset: self.0 as u32 as i32,
                ra_words: (self.0 >> 32) as u8 as i8,
                bp_words: (self.0 & Self::RESTORES_BP != 0).then_some((self.0 >> 40) as u8 as i8),
            },
        }
    }

    /// Applies the rule to a frame with stack pointer `sp` and frame pointer `bp`, reading the
    /// stack only inside `lo..=hi` (aligned words), and telling `rec` what it reads. The same
    /// steps as [`Rule::apply`].
    #[inline(always)]
    pub fn apply(self, sp: u64, bp: u64, lo: u64, hi: u64, rec: &mut impl Record) -> Stepped {
        let kind = self.0 >> 56;
        if kind > Self::FROM_BP {
            return if kind == Self::END {
                Stepped::End
            } else {
                Stepped::Slow
            };
        }
        rec.rule(Some((
            kind == Self::FROM_BP,
            self.0 & Self::RESTORES_BP != 0,
        )));
        let base = if kind == Self::FROM_BP {
            if bp == 0 {
                return Stepped::End;
            }
            bp
        } else {
            sp
        };
        let cfa = base.wrapping_add(self.0 as u32 as i32 as i64 as u64);
        if cfa <= sp {
            return Stepped::End;
        }
        // A word is readable when it lies in `lo..=hi` and is aligned: one subtraction checks
        // both bounds.
        let readable = |at: u64| at.wrapping_sub(lo) <= hi - lo && at.is_multiple_of(8);
        let ra_at = cfa.wrapping_add(((self.0 >> 32) as u8 as i8 as i64 * 8) as u64);
        if !readable(ra_at) {
            return Stepped::End;
        }
        // SAFETY: an aligned word inside the calling thread's live stack (the caller's bounds),
        // which is mapped; volatile because it belongs to other frames' locals.
        let ra = unsafe { std::ptr::read_volatile(ra_at as *const u64) };
        rec.read(ra_at, ra);
        let bp = if self.0 & Self::RESTORES_BP != 0 {
            let bp_at = cfa.wrapping_add(((self.0 >> 40) as u8 as i8 as i64 * 8) as u64);
            if !readable(bp_at) {
                return Stepped::End;
            }
            // SAFETY: as above.
            let held = unsafe { std::ptr::read_volatile(bp_at as *const u64) };
            rec.read_bp(bp_at, held);
            held
        } else {
            bp
        };
        if ra == 0 {
            return Stepped::End;
        }
        Stepped::Next { ra, sp: cfa, bp }
    }
}

#[derive(Clone, Copy)]
struct Entry {
    /// The lookup address (return address − 1); 0 marks an empty entry.
    address: u64,
    rule: Packed,
}

const _: () = assert!(
    std::mem::size_of::<Entry>() == 16,
    "four entries per cache line"
);

const EMPTY: Entry = Entry {
    address: 0,
    rule: Packed(Packed::DELEGATE << 56),
};
const WAYS: usize = 4;
const SETS: usize = 512;

/// The cache of one thread.
pub struct RuleCache {
    sets: Box<[[Entry; WAYS]; SETS]>,
    /// The module list the rules were found under (its address); rules for another are stale.
    list: usize,
    /// Bumped whenever the rules are forgotten: walks remembered under another epoch may have
    /// applied rules that no longer hold (`memo`).
    epoch: u32,
}

impl RuleCache {
    pub fn new() -> RuleCache {
        RuleCache {
            sets: Box::new([[EMPTY; WAYS]; SETS]),
            list: 0,
            epoch: 0,
        }
    }

    /// Whether the rules were found under `list`.
    pub fn follows(&self, list: &ModuleList) -> bool {
        self.list == list as *const ModuleList as usize
    }

    /// Forgets every rule unless they were found under `list`.
    pub fn follow(&mut self, list: &ModuleList) {
        if !self.follows(list) {
            self.sets.fill([EMPTY; WAYS]);
            self.list = list as *const ModuleList as usize;
            self.epoch = self.epoch.wrapping_add(1);
        }
    }

    /// Changes whenever the rules are forgotten.
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    fn set(address: u64) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the address.
        (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SETS.trailing_zeros())) as usize
    }

    /// The rule cached for `address` (never for 0).
    #[inline(always)]
    pub fn get(&self, address: u64) -> Option<Packed> {
        let set = &self.sets[Self::set(address)];
        // Unrolled: the four compares are independent, so they do not wait on one another.
        let hit = if set[0].address == address {
            0
        } else if set[1].address == address {
            1
        } else if set[2].address == address {
            2
        } else if set[3].address == address {
            3
        } else {
            return None;
        };
        (address != 0).then_some(set[hit].rule)
    }

    /// Adds a rule, evicting the oldest of its set.
    pub fn insert(&mut self, address: u64, rule: Rule) {
        if address == 0 {
            return;
        }
        let set = &mut self.sets[Self::set(address)];
        set.copy_within(0..WAYS - 1, 1);
        set[0] = Entry {
            address,
            rule: Packed::new(rule),
        };
    }
}

/// The made-up stacks: stack and frame pointers with different distances between them, far from
/// any tagged word, so every register value says where it came from.
const PROBES: [(u64, u64); 2] = [
    (0x1000_0000_0000, 0x1000_0000_8000),
    (0x2000_0000_0000, 0x2000_0001_8000),
];
/// Every word of the made-up stack holds its own address with these bits flipped.
const TAG: u64 = 0x7a7a_0000_0000_0000;

/// The rule framehop applies to leave the frame at `address` (the first frame's instruction
/// pointer, or a return address).
pub fn derive(list: &ModuleList, cache: &mut CacheX86_64, address: FrameAddress) -> Rule {
    let [a, b] = PROBES.map(|(sp, bp)| {
        let mut regs = UnwindRegsX86_64::new(address.address(), sp, bp);
        let mut read = |at: u64| Ok(at ^ TAG);
        match list
            .unwinder
            .unwind_frame(address, &mut regs, cache, &mut read)
        {
            Ok(Some(ra)) => Ok(Some((regs.sp(), regs.bp(), ra))),
            Ok(None) => Ok(None),
            Err(_) => Err(()),
        }
    });
    match (a, b) {
        (Ok(None), Ok(None)) => Rule::End,
        (Ok(Some(a)), Ok(Some(b))) => fit(a, b).unwrap_or(Rule::Delegate),
        _ => Rule::Delegate,
    }
}

/// The one rule of the simple shape that explains both probes' (sp, bp, return address).
fn fit(a: (u64, u64, u64), b: (u64, u64, u64)) -> Option<Rule> {
    let [(sp0, bp0), (sp1, bp1)] = PROBES;
    let offset = |new: u64, base: u64| i32::try_from(new.wrapping_sub(base) as i64).ok();
    let (from_bp, cfa_offset) = match (offset(a.0, sp0), offset(a.0, bp0)) {
        (Some(o), _) if offset(b.0, sp1) == Some(o) => (false, o),
        (_, Some(o)) if offset(b.0, bp1) == Some(o) => (true, o),
        _ => return None,
    };
    // Where a tagged word was read, in words from the CFA.
    let words = |value: u64, cfa: u64| -> Option<i8> {
        let off = (value ^ TAG).wrapping_sub(cfa) as i64;
        if off % 8 != 0 {
            return None;
        }
        i8::try_from(off / 8).ok()
    };
    let ra_words = words(a.2, a.0)?;
    if words(b.2, b.0) != Some(ra_words) {
        return None;
    }
    let bp_words = if a.1 == bp0 && b.1 == bp1 {
        None
    } else {
        let w = words(a.1, a.0)?;
        if words(b.1, b.0) != Some(w) {
            return None;
        }
        Some(w)
    };
    Some(Rule::Step {
        from_bp,
        cfa_offset,
        ra_words,
        bp_words,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_of_the_usual_rules_fit_them() {
        let [(sp0, bp0), (sp1, bp1)] = PROBES;
        let t = |x: u64| x ^ TAG;
        // A frame-pointer frame: CFA = bp + 16, ra at CFA − 8, bp at CFA − 16.
        let fp = |sp: u64, bp: u64| {
            let _ = sp;
            (bp + 16, t(bp), t(bp + 8))
        };
        assert_eq!(
            fit(fp(sp0, bp0), fp(sp1, bp1)),
            Some(Rule::Step {
                from_bp: true,
                cfa_offset: 16,
                ra_words: -1,
                bp_words: Some(-2),
            })
        );
        // A frame without frame pointer: CFA = sp + 40, bp untouched.
        let sp_only = |sp: u64, bp: u64| (sp + 40, bp, t(sp + 32));
        assert_eq!(
            fit(sp_only(sp0, bp0), sp_only(sp1, bp1)),
            Some(Rule::Step {
                from_bp: false,
                cfa_offset: 40,
                ra_words: -1,
                bp_words: None,
            })
        );
        // A CFA read from memory fits no shape.
        let deref = |sp: u64, bp: u64| (t(sp + 160), bp, t(t(sp + 160) - 8));
        assert_eq!(fit(deref(sp0, bp0), deref(sp1, bp1)), None);
    }

    #[test]
    fn a_step_reads_only_where_its_rule_says() {
        let stack: Vec<u64> = (0..16).map(|i| 0x1000 + i).collect();
        let base = stack.as_ptr() as u64;
        let mut read = |at: u64| {
            let i = at.wrapping_sub(base) / 8;
            stack.get(i as usize).copied().ok_or(())
        };
        let rule = Rule::Step {
            from_bp: false,
            cfa_offset: 32,
            ra_words: -1,
            bp_words: Some(-2),
        };
        let mut regs = UnwindRegsX86_64::new(0, base, 7);
        assert_eq!(rule.apply(&mut regs, &mut read), Some(0x1003));
        assert_eq!(
            (regs.sp(), regs.bp(), regs.ip()),
            (base + 32, 0x1002, 0x1003)
        );
        // A CFA past the readable stack ends the walk.
        let far = Rule::Step {
            from_bp: false,
            cfa_offset: 4096,
            ra_words: -1,
            bp_words: None,
        };
        assert_eq!(far.apply(&mut regs, &mut read), None);
        // A frame pointer of 0 ends a frame-pointer chain; a CFA at or below sp is refused.
        let fp = Rule::Step {
            from_bp: true,
            cfa_offset: 16,
            ra_words: -1,
            bp_words: Some(-2),
        };
        let mut regs = UnwindRegsX86_64::new(0, base, 0);
        assert_eq!(fp.apply(&mut regs, &mut read), None);
        let mut regs = UnwindRegsX86_64::new(0, base + 64, base);
        assert_eq!(fp.apply(&mut regs, &mut read), None);
    }

    #[test]
    fn the_cache_keeps_four_rules_per_set_and_forgets_on_a_new_list() {
        let mut c = RuleCache::new();
        // Five addresses of one set: the oldest goes.
        let set = RuleCache::set(0x1234);
        let same: Vec<u64> = (1..)
            .filter(|&a| RuleCache::set(a) == set)
            .take(5)
            .collect();
        for (i, &a) in same.iter().enumerate() {
            c.insert(
                a,
                Rule::Step {
                    from_bp: false,
                    cfa_offset: i as i32 * 8 + 8,
                    ra_words: -1,
                    bp_words: None,
                },
            );
        }
        assert_eq!(c.get(same[0]), None);
        assert_eq!(
            c.get(same[4]).map(Packed::rule),
            Some(Rule::Step {
                from_bp: false,
                cfa_offset: 40,
                ra_words: -1,
                bp_words: None,
            })
        );
        for &a in &same[1..] {
            assert!(c.get(a).is_some());
        }
        c.insert(0, Rule::End);
        assert_eq!(c.get(0), None);
        let list = super::super::unwind_modules::current().unwrap();
        c.follow(list);
        assert_eq!(c.get(same[4]), None);
    }
}
