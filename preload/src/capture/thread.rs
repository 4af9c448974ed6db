//! Per-thread state of the hooks: the re-entrancy guard, the runtime call in progress (so the
//! driver call beneath it merges into one event), the NCCL call in progress, and the thread id.
//!
//! Everything is const-initialised and has no destructor, so it can be used at any point of a
//! thread's life, including while the thread is being torn down.

use std::cell::Cell;

use vramtrace_collector::event::Api;

/// A runtime call in progress on this thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeScope {
    pub api: Api,
    /// The driver call beneath it that was merged into it, once seen.
    pub merged: Option<Api>,
}

pub struct ThreadState {
    /// This thread belongs to the tracer: its calls are never traced.
    pub tracer: Cell<bool>,
    /// Tracer code is running on this thread (building or sending an event).
    pub busy: Cell<bool>,
    pub runtime: Cell<Option<RuntimeScope>>,
    /// The NCCL call in progress on this thread (0 when none).
    pub nccl_scope: Cell<u64>,
    tid: Cell<u32>,
}

thread_local! {
    pub static THREAD: ThreadState = const {
        ThreadState {
            tracer: Cell::new(false),
            busy: Cell::new(false),
            runtime: Cell::new(None),
            nccl_scope: Cell::new(0),
            tid: Cell::new(0),
        }
    };
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
}

/// The kernel thread id of the calling thread.
#[inline]
pub fn tid() -> u32 {
    THREAD.with(|t| t.tid())
}

/// Marks the calling thread as the tracer's own.
pub fn mark_tracer_thread() {
    THREAD.with(|t| t.tracer.set(true));
}

/// In a forked child, the one thread that survives has a new id and no call in progress that the
/// child's trace could see the start of.
pub fn reset_after_fork() {
    THREAD.with(|t| {
        t.tid.set(0);
        t.busy.set(false);
    });
}
