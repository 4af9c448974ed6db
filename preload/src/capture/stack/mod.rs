//! Native stacks: return addresses only, captured in the hook and symbolized later.
//!
//! The unwinder is framehop's, run in-process on the hook's own stack:
//!
//! - It starts from the registers of [`capture`] itself (rip, rsp, rbp read with inline asm),
//!   walks out through the tracer's own frames, and keeps frames from the intercepted call's
//!   return address (`caller`) outward. If `caller` is never reached the stack is `[caller]`
//!   alone, the one frame that is certain.
//! - Unwind rules come from each loaded object's `.eh_frame_hdr` / `.eh_frame` in memory
//!   ([`unwind_modules`]), so code built without frame pointers (libcuda, libcudart, libnccl, PyTorch)
//!   unwinds through its CFI; for code without CFI framehop follows the frame pointer.
//! - The rule found for an address is kept in per-thread caches ([`rules`] in front of
//!   framehop's own), so a hot call site costs a cache lookup and two stack reads per frame
//!   instead of a walk through DWARF CFI (what libgcc's `_Unwind_Backtrace` does for every frame
//!   of every event). A capture whose rules are all cached touches neither framehop nor the
//!   loader.
//! - Memory is only read between the capture's own stack pointer and the top of the calling
//!   thread's stack; any other address ends the walk, so a wrong rule can cut a stack short but
//!   never fault.
//!
//! libgcc's unwinder (through the `backtrace` crate) remains as the fallback for the one case
//! where framehop cannot take its first step: no unwind information for [`capture`] itself, a
//! stack pointer outside the thread's known stack (a coroutine or signal stack), or no
//! per-thread state (the thread is exiting, or a capture is already running on it).

mod memo;
mod rules;
mod thread;
mod unwind_modules;

#[cfg(test)]
mod tests;

use std::mem::MaybeUninit;

use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder};

use self::rules::{Rule, Stepped};
use self::thread::ThreadUnwind;
use self::unwind_modules::ModuleList;

/// Most frames kept (`VRAMTRACE_STACK_DEPTH`'s upper bound).
pub const MAX_DEPTH: usize = 256;

/// Most frames walked before `caller` is found: the tracer's own frames between the hook and
/// [`capture`] are about eight.
const MAX_OWN_FRAMES: usize = 64;

/// Captures per thread between two checks of the loaded objects when every rule a walk needed
/// was cached (a walk that needs framehop always checks first).
const RECHECK_EVERY: u32 = 64;

/// Where a walk may end early: the first frame whose return address lies in `lo..hi` is kept
/// and ends the stack. Used with the interpreter's evaluation loop when the event also gets a
/// Python stack: the Python frames then say where the call came from, and the native frames
/// beyond the loop are only more of the interpreter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StopAt {
    pub lo: u64,
    pub hi: u64,
}

impl StopAt {
    /// Never stops early.
    pub const NEVER: StopAt = StopAt { lo: 0, hi: 0 };

    #[inline(always)]
    fn holds(self, address: u64) -> bool {
        address.wrapping_sub(self.lo) < self.hi.wrapping_sub(self.lo)
    }
}

/// Captures up to `depth` return addresses, starting at the frame that called the hook
/// (`caller`); the tracer's own frames are cut off.
pub fn capture(depth: usize, caller: u64) -> Option<Box<[u64]>> {
    if depth == 0 {
        return None;
    }
    let mut frames = None;
    capture_id(depth, caller, StopAt::NEVER, false, |f| {
        frames = Some(Box::from(f));
        0
    });
    frames
}

/// Walks the calling thread's stack from `caller` outward (at most `depth` frames, up to the
/// first that `stop` holds) and returns what `intern` makes of the frames: the stack's id.
///
/// With `remember`, a walk this thread remembered that is proven to come out the same
/// ([`memo`]) gives its id without walking (and without `intern`), and a new walk is remembered.
#[inline(always)]
pub fn capture_id(
    depth: usize,
    caller: u64,
    stop: StopAt,
    remember: bool,
    intern: impl FnOnce(&[u64]) -> u32,
) -> u32 {
    let depth = depth.clamp(1, MAX_DEPTH);
    let start = Registers::here();
    let mut out = [MaybeUninit::<u64>::uninit(); MAX_DEPTH];
    let mut intern = Some(intern);
    let got = thread::with(|t| {
        t.captures = t.captures.wrapping_add(1);
        if t.captures.is_multiple_of(RECHECK_EVERY) {
            // Bounds how long rules of an unloaded object can outlive it (see `rules`).
            t.rules.follow(unwind_modules::current()?);
        }
        let key = memo::Start {
            caller,
            ip: start.ip,
            sp: start.sp,
            bp: start.bp,
            depth: depth as u32,
            stop,
            epoch: t.rules.epoch(),
        };
        if remember {
            // SAFETY: `key.sp` is this capture's own stack pointer, and the memos are this
            // thread's own.
            if let Some(id) = unsafe { t.memos.find(&key) } {
                return Some(id);
            }
            let mut log = memo::Log::new(start.sp);
            let walked =
                walk_again_if_stale(t, start, caller, stop, &mut out[..depth], &mut log, || {
                    memo::Log::new(start.sp)
                })?;
            let n = kept(walked, caller, &mut out)?;
            let id = intern.take()?(frames(&out, n));
            // Only a walk that reached the caller under unchanged rules is remembered.
            if matches!(walked, Walk::Reached(_)) && t.rules.epoch() == key.epoch {
                t.memos.store(&key, &log, id);
            }
            Some(id)
        } else {
            let walked = walk_again_if_stale(
                t,
                start,
                caller,
                stop,
                &mut out[..depth],
                &mut memo::Forget,
                || memo::Forget,
            )?;
            let n = kept(walked, caller, &mut out)?;
            Some(intern.take()?(frames(&out, n)))
        }
    });
    match got.flatten() {
        Some(id) => id,
        None => {
            let n = capture_with_libgcc(caller, &mut out[..depth]);
            intern.take().map_or(0, |f| f(frames(&out, n)))
        }
    }
}

/// The frames kept by a walk that ended as `walked`: its own, or `caller` alone when it did not
/// reach the caller; `None` when it could not even start (libgcc's turn).
#[inline(always)]
fn kept(walked: Walk, caller: u64, out: &mut [MaybeUninit<u64>; MAX_DEPTH]) -> Option<usize> {
    match walked {
        Walk::Reached(n) => Some(n),
        Walk::NotReached => {
            out[0].write(caller);
            Some(1)
        }
        Walk::NoFirstStep => None,
    }
}

/// The first `n` frames of `out`.
#[inline(always)]
fn frames(out: &[MaybeUninit<u64>; MAX_DEPTH], n: usize) -> &[u64] {
    // SAFETY: the walks and the libgcc fallback initialise the first `n` elements they report.
    unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u64, n) }
}

/// [`walk`], and once more with fresh rules (and a fresh record from `fresh`) if it did not reach
/// the caller while the loaded objects changed. `None` when the module list cannot be read.
#[inline(always)]
fn walk_again_if_stale<R: memo::Record>(
    t: &mut ThreadUnwind,
    start: Registers,
    caller: u64,
    stop: StopAt,
    out: &mut [MaybeUninit<u64>],
    rec: &mut R,
    fresh: impl FnOnce() -> R,
) -> Option<Walk> {
    match walk(t, start, caller, stop, out, rec) {
        Walk::NotReached => {
            // An object loaded or unloaded since the rules were found can only matter for a
            // walk that went wrong: look again, once, if it did.
            let list = unwind_modules::current()?;
            if t.rules.follows(list) {
                Some(Walk::NotReached)
            } else {
                t.rules.follow(list);
                *rec = fresh();
                Some(walk(t, start, caller, stop, out, rec))
            }
        }
        other => Some(other),
    }
}

/// The registers a walk starts from.
#[derive(Clone, Copy, Debug)]
struct Registers {
    ip: u64,
    sp: u64,
    bp: u64,
}

impl Registers {
    /// The caller's instruction pointer, stack pointer and frame pointer, all at the same
    /// instruction (so the CFI row for `ip` describes `sp` exactly).
    #[inline(always)]
    fn here() -> Registers {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers into outputs; touches no memory, no stack, no flags.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags),
            );
        }
        Registers { ip, sp, bp }
    }
}

#[derive(Clone, Copy, Debug)]
enum Walk {
    /// `caller` was found; this many frames were written.
    Reached(usize),
    /// The walk ended before reaching `caller`.
    NotReached,
    /// Not even the capturing function's own frame could be unwound.
    NoFirstStep,
}

/// Walks from `start` and writes the return addresses from `caller` outward into `out`, up to
/// the first one `stop` holds.
///
/// The common step (a rule cached for the address) is inlined here: a lookup in the rule cache
/// and one or two reads of the stack. Anything else goes through framehop, out of line.
fn walk<R: memo::Record>(
    t: &mut ThreadUnwind,
    start: Registers,
    caller: u64,
    stop: StopAt,
    out: &mut [MaybeUninit<u64>],
    rec: &mut R,
) -> Walk {
    let (stack_lo, stack_hi) = t.stack;
    if start.sp < stack_lo || start.sp >= stack_hi {
        return Walk::NoFirstStep;
    }
    // Everything the walk needs lies between this frame and the top of the stack: what is
    // below is dead, what is outside is not this thread's stack (and may not be mapped).
    let bounds = Bounds {
        lo: start.sp,
        hi: stack_hi - 8,
    };
    let mut frame = WalkFrame {
        sp: start.sp,
        bp: start.bp,
    };
    // The first step leaves this capture's own frame, from an instruction pointer rather than a
    // return address.
    let Some(mut ra) = step(t, start.ip, true, &mut frame, bounds, rec) else {
        return Walk::NoFirstStep;
    };
    // Out through the tracer's own frames to the intercepted call's.
    let mut own = 0;
    while ra != caller {
        own += 1;
        if own > MAX_OWN_FRAMES {
            return Walk::NotReached;
        }
        match step(t, ra, false, &mut frame, bounds, rec) {
            Some(next) => ra = next,
            None => return Walk::NotReached,
        }
    }
    // The end of the stack, an unreadable word or a rule that cannot be applied: the stack ends
    // there.
    let mut n = 0;
    loop {
        out[n].write(ra);
        n += 1;
        if n == out.len() || stop.holds(ra) {
            break;
        }
        match step(t, ra, false, &mut frame, bounds, rec) {
            Some(next) => ra = next,
            None => break,
        }
    }
    Walk::Reached(n)
}

/// The part of the stack a walk may read: aligned words in `lo..=hi`.
#[derive(Clone, Copy)]
struct Bounds {
    lo: u64,
    /// The highest readable word.
    hi: u64,
}

impl Bounds {
    #[inline(always)]
    fn read(self, addr: u64) -> Result<u64, ()> {
        if addr >= self.lo && addr <= self.hi && addr.is_multiple_of(8) {
            // SAFETY: an aligned word inside this thread's live stack, which is mapped; volatile
            // because the words belong to other frames' locals, which this code does not own.
            Ok(unsafe { std::ptr::read_volatile(addr as *const u64) })
        } else {
            Err(())
        }
    }
}

/// The registers a step changes.
#[derive(Clone, Copy)]
struct WalkFrame {
    sp: u64,
    bp: u64,
}

/// One step out of the frame at `address` (the first frame's instruction pointer when
/// `first`, else a return address): by its cached rule, else through framehop (out of line).
/// Returns the caller's return address.
#[inline(always)]
fn step<R: memo::Record>(
    t: &mut ThreadUnwind,
    address: u64,
    first: bool,
    frame: &mut WalkFrame,
    bounds: Bounds,
    rec: &mut R,
) -> Option<u64> {
    // Return addresses are looked up one byte back, inside the call instruction.
    let lookup = address - u64::from(!first);
    if let Some(rule) = t.rules.get(lookup) {
        match rule.apply(frame.sp, frame.bp, bounds.lo, bounds.hi, rec) {
            Stepped::Next { ra, sp, bp } => {
                *frame = WalkFrame { sp, bp };
                return Some(ra);
            }
            Stepped::End => return None,
            Stepped::Slow => {}
        }
    }
    step_slow(t, address, first, frame, bounds, rec)
}

#[cold]
#[inline(never)]
fn step_slow<R: memo::Record>(
    t: &mut ThreadUnwind,
    address: u64,
    first: bool,
    frame: &mut WalkFrame,
    bounds: Bounds,
    rec: &mut R,
) -> Option<u64> {
    rec.rule(None);
    let at = if first {
        FrameAddress::from_instruction_pointer(address)
    } else {
        FrameAddress::from_return_address(address)?
    };
    let mut regs = UnwindRegsX86_64::new(address, frame.sp, frame.bp);
    let mut w = Walker {
        t,
        list: None,
        read: |a| {
            let held = bounds.read(a)?;
            rec.read(a, held);
            Ok(held)
        },
    };
    let ra = w.step(at, &mut regs)?;
    *frame = WalkFrame {
        sp: regs.sp(),
        bp: regs.bp(),
    };
    Some(ra)
}

/// One walk's access to the unwinding state.
struct Walker<'t, F> {
    t: &'t mut ThreadUnwind,
    /// The module list, once this walk needed framehop.
    list: Option<&'static ModuleList>,
    read: F,
}

impl<F: FnMut(u64) -> Result<u64, ()>> Walker<'_, F> {
    /// One step out of the frame at `address`: by its cached rule, else through framehop (and
    /// the rule framehop used is cached). Returns the return address found.
    #[inline]
    fn step(&mut self, address: FrameAddress, regs: &mut UnwindRegsX86_64) -> Option<u64> {
        let key = address.address_for_lookup();
        match self.t.rules.get(key).map(rules::Packed::rule) {
            Some(Rule::Delegate) => self.framehop(address, regs),
            Some(rule) => rule.apply(regs, &mut self.read),
            None => {
                let next = self.framehop(address, regs);
                if let Some(list) = self.list {
                    let rule = rules::derive(list, &mut self.t.cache, address);
                    self.t.rules.insert(key, rule);
                }
                next
            }
        }
    }

    /// A step through framehop, after making sure its module list is current: framehop reads
    /// the objects' unwind sections, which must still be mapped.
    fn framehop(&mut self, address: FrameAddress, regs: &mut UnwindRegsX86_64) -> Option<u64> {
        let list = match self.list {
            Some(list) => list,
            None => {
                let list = unwind_modules::current()?;
                self.t.rules.follow(list);
                self.list = Some(list);
                list
            }
        };
        match list
            .unwinder
            .unwind_frame(address, regs, &mut self.t.cache, &mut self.read)
        {
            Ok(Some(next)) if next != 0 => Some(next),
            _ => None,
        }
    }
}

/// The stack as libgcc's `_Unwind_Backtrace` walks it: DWARF CFI read afresh for every frame.
/// Writes into `out` (as many frames as it holds); returns how many.
fn capture_with_libgcc(caller: u64, out: &mut [MaybeUninit<u64>]) -> usize {
    let mut n = 0;
    let mut started = false;
    let mut own = 0;
    // SAFETY: trace_unsynchronized only requires that no other unwinder runs concurrently on this
    // thread, which holds: the hook is not re-entered while it captures.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as u64;
            if ip == 0 {
                return false;
            }
            if !started {
                if ip != caller {
                    // A frame of the tracer's own (or of the unwinder).
                    own += 1;
                    return own <= MAX_OWN_FRAMES;
                }
                started = true;
            }
            out[n].write(ip);
            n += 1;
            n < out.len()
        });
    }
    if !started {
        // The unwinder did not reach the caller (no unwind info): the caller alone is certain.
        out[0].write(caller);
        n = 1;
    }
    n
}
