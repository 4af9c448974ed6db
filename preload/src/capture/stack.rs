//! Native stacks: return addresses only, captured in the hook and symbolized later.
//!
//! The unwinder is framehop's, run in-process on the hook's own stack:
//!
//! - It starts from the registers of [`capture`] itself (rip, rsp, rbp read with inline asm),
//!   walks out through the tracer's own frames, and keeps frames from the intercepted call's
//!   return address (`caller`) outward. If `caller` is never reached the stack is `[caller]`
//!   alone, the one frame that is certain.
//! - Unwind rules come from each loaded object's `.eh_frame_hdr` / `.eh_frame` in memory
//!   ([`modules`]), so code built without frame pointers (libcuda, libcudart, libnccl, PyTorch)
//!   unwinds through its CFI; for code without CFI framehop follows the frame pointer.
//! - The rule found for an address is kept in a per-thread cache ([`thread`]), so a hot call site
//!   costs a cache lookup and a stack read or two per frame instead of a walk through DWARF CFI
//!   (what libgcc's `_Unwind_Backtrace` does for every frame of every event).
//! - Memory is only read between the capture's own stack pointer and the top of the calling
//!   thread's stack; any other address ends the walk, so a wrong rule can cut a stack short but
//!   never fault.
//!
//! libgcc's unwinder (through the `backtrace` crate) remains as the fallback for the one case
//! where framehop cannot take its first step: no unwind information for [`capture`] itself, a
//! stack pointer outside the thread's known stack (a coroutine or signal stack), or no
//! per-thread state (the thread is exiting, or a capture is already running on it).

mod modules;
mod thread;

#[cfg(test)]
mod tests;

use std::mem::MaybeUninit;

use framehop::x86_64::UnwindRegsX86_64;
use framehop::{FrameAddress, Unwinder};

use self::modules::ModuleList;
use self::thread::ThreadUnwind;

/// Most frames kept (`VRAMTRACE_STACK_DEPTH`'s upper bound).
const MAX_DEPTH: usize = 256;

/// Most frames walked before `caller` is found: the tracer's own frames between the hook and
/// [`capture`] are about eight.
const MAX_OWN_FRAMES: usize = 64;

/// Captures up to `depth` return addresses, starting at the frame that called the hook
/// (`caller`); the tracer's own frames are cut off.
#[inline(never)]
pub fn capture(depth: usize, caller: u64) -> Option<Box<[u64]>> {
    if depth == 0 {
        return None;
    }
    let depth = depth.min(MAX_DEPTH);
    let start = Registers::here();
    let mut frames = [MaybeUninit::<u64>::uninit(); MAX_DEPTH];
    let walked = thread::with(|t| {
        let list = modules::current()?;
        match walk(list, t, start, caller, &mut frames[..depth]) {
            Walk::NotReached => {
                // An object loaded or unloaded while walking can only matter for a walk that
                // went wrong: look again, once.
                let again = modules::current()?;
                if std::ptr::eq(again, list) {
                    Some(Walk::NotReached)
                } else {
                    Some(walk(again, t, start, caller, &mut frames[..depth]))
                }
            }
            other => Some(other),
        }
    });
    Some(match walked.flatten() {
        Some(Walk::Reached(n)) => {
            // SAFETY: `walk` initialised the first `n` elements.
            let kept = unsafe { std::slice::from_raw_parts(frames.as_ptr() as *const u64, n) };
            Box::from(kept)
        }
        Some(Walk::NotReached) => Box::new([caller]),
        Some(Walk::NoFirstStep) | None => capture_with_libgcc(depth, caller),
    })
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

enum Walk {
    /// `caller` was found; this many frames were written.
    Reached(usize),
    /// The walk ended before reaching `caller`.
    NotReached,
    /// Not even the capturing function's own frame could be unwound.
    NoFirstStep,
}

/// Walks from `start` and writes the return addresses from `caller` outward into `out`.
fn walk(
    list: &ModuleList,
    t: &mut ThreadUnwind,
    start: Registers,
    caller: u64,
    out: &mut [MaybeUninit<u64>],
) -> Walk {
    let (stack_lo, stack_hi) = t.stack;
    if start.sp < stack_lo || start.sp >= stack_hi {
        return Walk::NoFirstStep;
    }
    // Everything the walk needs lies between this frame and the top of the stack: what is
    // below is dead, what is outside is not this thread's stack (and may not be mapped).
    let lo = start.sp;
    let mut read = |addr: u64| -> Result<u64, ()> {
        if addr >= lo && addr <= stack_hi - 8 && addr % 8 == 0 {
            // SAFETY: an aligned word inside this thread's live stack, which is mapped; volatile
            // because the words belong to other frames' locals, which this code does not own.
            Ok(unsafe { std::ptr::read_volatile(addr as *const u64) })
        } else {
            Err(())
        }
    };
    let mut regs = UnwindRegsX86_64::new(start.ip, start.sp, start.bp);
    let mut address = FrameAddress::from_instruction_pointer(start.ip);
    let mut own = 0;
    let mut n = 0;
    loop {
        let step = list
            .unwinder
            .unwind_frame(address, &mut regs, &mut t.cache, &mut read);
        let ra = match step {
            Ok(Some(ra)) if ra != 0 => ra,
            // The end of the stack, an unreadable word or a rule that cannot be applied: the
            // stack ends here.
            _ if own == 0 && n == 0 => return Walk::NoFirstStep,
            _ => break,
        };
        if n == 0 && ra != caller {
            own += 1;
            if own > MAX_OWN_FRAMES {
                break;
            }
        } else {
            out[n].write(ra);
            n += 1;
            if n == out.len() {
                break;
            }
        }
        address = match FrameAddress::from_return_address(ra) {
            Some(a) => a,
            None => break,
        };
    }
    if n == 0 {
        Walk::NotReached
    } else {
        Walk::Reached(n)
    }
}

/// The stack as libgcc's `_Unwind_Backtrace` walks it: DWARF CFI read afresh for every frame.
fn capture_with_libgcc(depth: usize, caller: u64) -> Box<[u64]> {
    let mut frames: Vec<u64> = Vec::with_capacity(depth);
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
            frames.push(ip);
            frames.len() < depth
        });
    }
    if !started {
        // The unwinder did not reach the caller (no unwind info): the caller alone is certain.
        frames.clear();
        frames.push(caller);
    }
    frames.truncate(depth);
    frames.into_boxed_slice()
}
