//! Per-thread state of the hooks: the re-entrancy guard, the runtime call in progress (so the
//! driver call beneath it merges into one event), the NCCL call in progress, and the thread id.
//!
//! It lives in initial-exec TLS defined in `tls.c` (one `%fs`-relative load per access, instead of
//! a `__tls_get_addr` call): eight zero-initialised words, given their meaning here, so it is valid
//! from the first instruction of every thread and has no destructor (usable while a thread is torn
//! down).

use std::cell::Cell;

use vramtrace_collector::event::Api;

/// A runtime call in progress on this thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeScope {
    pub api: Api,
    /// The driver call beneath it that was merged into it, once seen.
    pub merged: Option<Api>,
}

impl RuntimeScope {
    /// Packed as `(api + 1) | (merged + 1) << 16`; 0 is "none".
    #[inline]
    fn pack(s: Option<RuntimeScope>) -> u32 {
        match s {
            None => 0,
            Some(s) => (s.api as u32 + 1) | (s.merged.map_or(0, |m| m as u32 + 1) << 16),
        }
    }

    #[inline]
    fn unpack(v: u32) -> Option<RuntimeScope> {
        let api = Api::ALL
            .get((v & 0xffff).checked_sub(1)? as usize)
            .copied()?;
        let merged = ((v & !MERGED_FAILED) >> 16)
            .checked_sub(1)
            .and_then(|m| Api::ALL.get(m as usize).copied());
        Some(RuntimeScope { api, merged })
    }
}

/// In a runtime word ([`ThreadState::runtime_word`]): its merged driver call failed, and made
/// nothing.
pub const MERGED_FAILED: u32 = 1 << 31;

/// The state, laid over the eight TLS words of `tls.c`.
#[repr(C)]
pub struct ThreadState {
    /// This thread belongs to the tracer: its calls are never traced.
    tracer: Cell<u8>,
    /// Tracer code is running on this thread (building or sending an event).
    busy: Cell<u8>,
    _pad: [u8; 2],
    tid: Cell<u32>,
    runtime: Cell<u32>,
    /// This thread's row in the self-profile (`crate::self_profile`), 1-based; 0: none yet.
    profile_row: Cell<u32>,
    /// The NCCL call in progress on this thread (0 when none).
    nccl_scope: Cell<u64>,
    /// The last context this thread asked about (see `context`), its device + 1 (0: none), and
    /// the context generation then.
    last_ctx: Cell<u64>,
    last_dev: Cell<u64>,
    last_gen: Cell<u64>,
    /// This thread's unwinding state (`stack::thread`): a pointer or one of its sentinels.
    unwind: Cell<usize>,
    _spare: u64,
}

const _: () = assert!(std::mem::size_of::<ThreadState>() == 64);

unsafe extern "C" {
    /// Address of the calling thread's TLS words (`tls.c`).
    fn vramtrace_thread_words() -> *mut [u64; 8];
}

/// Where the words lie relative to the thread pointer, once known (0: not yet). Initial-exec TLS
/// sits at the same offset from every thread's thread pointer (the offset is what the C
/// compiler itself loads from the GOT), so it is found once and the lookup becomes two loads,
/// with no call into the C part.
#[cfg(target_arch = "x86_64")]
static TP_OFFSET: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// The calling thread's thread pointer (x86-64: `%fs:0` holds the thread control block's own
/// address, as the ABI requires).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn thread_pointer() -> *mut u8 {
    let tp: *mut u8;
    // SAFETY: reads the word at `%fs:0`, which every thread of a process using TLS has (glibc
    // and musl both set it up before a thread runs any code of ours); writes nothing.
    unsafe {
        core::arch::asm!(
            "mov {}, qword ptr fs:[0]",
            out(reg) tp,
            options(nostack, readonly, preserves_flags, pure)
        )
    };
    tp
}

/// The address of the calling thread's words.
#[inline(always)]
fn words() -> *mut [u64; 8] {
    #[cfg(target_arch = "x86_64")]
    {
        let off = TP_OFFSET.load(std::sync::atomic::Ordering::Relaxed);
        if off != 0 {
            return thread_pointer().wrapping_offset(off).cast();
        }
        words_slow()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: a plain C function with no preconditions.
        unsafe { vramtrace_thread_words() }
    }
}

/// The first lookup: asks the C part and notes the offset for later ones.
#[cfg(target_arch = "x86_64")]
#[cold]
fn words_slow() -> *mut [u64; 8] {
    // SAFETY: a plain C function with no preconditions.
    let p = unsafe { vramtrace_thread_words() };
    let off = (p as isize).wrapping_sub(thread_pointer() as isize);
    TP_OFFSET.store(off, std::sync::atomic::Ordering::Relaxed);
    p
}

/// The calling thread's state.
#[inline]
pub fn current() -> &'static ThreadState {
    // SAFETY: the words are this thread's initial-exec TLS, zero-initialised, 16-byte aligned and
    // 64 bytes long, which is ThreadState's size; every field is valid when zero (`words` gives
    // the same address as the C part: the thread pointer plus the fixed initial-exec offset). The
    // reference must not leave the thread: callers only keep it within the hook call that took
    // it (`Call` is !Send), and the memory lives as long as the thread.
    unsafe { &*(words() as *const ThreadState) }
}

impl ThreadState {
    /// The kernel thread id of this thread.
    #[inline]
    pub fn tid(&self) -> u32 {
        let v = self.tid.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        self.tid.set(v);
        v
    }

    #[inline]
    pub fn is_tracer(&self) -> bool {
        self.tracer.get() != 0
    }

    #[inline]
    pub fn is_busy(&self) -> bool {
        self.busy.get() != 0
    }

    #[inline]
    pub fn set_busy(&self, busy: bool) {
        self.busy.set(busy as u8);
    }

    #[inline]
    pub fn runtime(&self) -> Option<RuntimeScope> {
        RuntimeScope::unpack(self.runtime.get())
    }

    /// The runtime call in progress as one word: `(api + 1) | (merged + 1) << 16`, 0 when none
    /// (what [`RuntimeScope`] packs), for the hooks' path; with [`MERGED_FAILED`] set when the
    /// merged driver call failed, so that the one the runtime makes again merges too.
    #[inline]
    pub fn runtime_word(&self) -> u32 {
        self.runtime.get()
    }

    #[inline]
    pub fn set_runtime_word(&self, word: u32) {
        self.runtime.set(word);
    }

    /// Sets the runtime call in progress as a word, returning the previous one.
    #[inline]
    pub fn replace_runtime_word(&self, word: u32) -> u32 {
        self.runtime.replace(word)
    }

    /// Sets the runtime call in progress, returning the previous one.
    #[inline]
    pub fn replace_runtime(&self, s: Option<RuntimeScope>) -> Option<RuntimeScope> {
        RuntimeScope::unpack(self.runtime.replace(RuntimeScope::pack(s)))
    }

    #[inline]
    pub fn nccl_scope(&self) -> u64 {
        self.nccl_scope.get()
    }

    /// The cached `(context, device)` if it was cached in generation `generation`.
    pub fn cached_context(&self, ctx: u64, generation: u64) -> Option<i32> {
        (self.last_ctx.get() == ctx
            && self.last_gen.get() == generation
            && self.last_dev.get() != 0)
            .then(|| self.last_dev.get() as i32 - 1)
    }

    pub fn cache_context(&self, ctx: u64, device: i32, generation: u64) {
        self.last_ctx.set(ctx);
        self.last_dev.set(device as u64 + 1);
        self.last_gen.set(generation);
    }

    /// The word holding this thread's unwinding state (`stack::thread` gives it meaning).
    #[inline]
    pub fn unwind(&self) -> &Cell<usize> {
        &self.unwind
    }

    /// This thread's row in the self-profile.
    #[inline]
    pub fn profile_row(&self) -> &Cell<u32> {
        &self.profile_row
    }

    /// Sets the NCCL call in progress, returning the previous one.
    #[inline]
    pub fn replace_nccl_scope(&self, scope: u64) -> u64 {
        self.nccl_scope.replace(scope)
    }
}

/// The kernel thread id of the calling thread.
#[inline]
pub fn tid() -> u32 {
    current().tid()
}

/// Marks the calling thread as the tracer's own.
pub fn mark_tracer_thread() {
    current().tracer.set(1);
}

/// In a forked child, the one thread that survives has a new id and no call in progress that the
/// child's trace could see the start of.
pub fn reset_after_fork() {
    let t = current();
    t.tid.set(0);
    t.busy.set(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inline_lookup_finds_the_c_words_on_every_thread() {
        let check = || {
            let a = current() as *const ThreadState as usize;
            let b = current() as *const ThreadState as usize;
            // SAFETY: a plain C function with no preconditions.
            let c = unsafe { vramtrace_thread_words() } as usize;
            assert_eq!((a, b), (c, c));
            c
        };
        let here = check();
        let there = std::thread::spawn(check).join().unwrap();
        assert_ne!(here, there);
    }

    #[test]
    fn runtime_scope_packs_and_unpacks() {
        let t = current();
        assert_eq!(t.runtime(), None);
        let s = RuntimeScope {
            api: Api::CudaMalloc,
            merged: Some(Api::CuMemAlloc),
        };
        assert_eq!(t.replace_runtime(Some(s)), None);
        assert_eq!(t.runtime(), Some(s));
        // A merged call that failed keeps its name.
        t.set_runtime_word(t.runtime_word() | MERGED_FAILED);
        assert_eq!(t.runtime(), Some(s));
        assert_eq!(t.replace_runtime(None), Some(s));
        let other = std::thread::spawn(|| current().runtime()).join().unwrap();
        assert_eq!(other, None, "each thread has its own state");
    }
}
