//! Starting a thread of the tracer's own (the writer, the metrics server): with asynchronous
//! signals blocked, and marked so that hooks it reaches pass through untraced. A module of its own,
//! outside `writer/` and `monitor/`, so that every part that starts one — the writer thread, the
//! live analysis's metrics server — starts it the same way without depending on another.

use std::thread::JoinHandle;

/// Starts `f` on a thread of the tracer's own named `name`.
pub fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    with_async_signals_blocked(|| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Hooks reached from this thread (none should be) pass through untraced.
                crate::capture::thread::mark_tracer_thread();
                f()
            })
    })
}

/// Runs `f` (which starts a thread) with every asynchronous signal blocked, so the new thread
/// inherits that mask. A process-directed signal (`kill(pid, SIGTERM)`) then never lands on a
/// tracer thread: on the writer, its handler would wait for the writer to write the trace, the
/// writer being the thread stuck in the handler, and the process would die with nothing written.
/// Faults (SIGSEGV, SIGBUS, …) stay unblocked: they are the thread's own, and blocking them only
/// turns a crash into a silent kill.
fn with_async_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data, filled by sigfillset/sigdelset before use; pthread_sigmask
    // only changes this thread's mask, and the old mask is restored before returning.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut block);
        for sig in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut block, sig);
        }
        let blocked = libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) == 0;
        let out = f();
        if blocked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        out
    }
}
