//! Process lifecycle: the library constructor, the exit flush, fork, exec, `_exit` and fatal
//! signals.
//!
//! However a process ends — `exit`, `_exit`, an `exec`, a fatal signal — its trace gets the
//! events the program made before that point and an end record saying how it ended. The writer
//! stops at the last event numbered when the end was asked for (threads still allocating cannot
//! keep it busy); while they go on making calls it spends at most 20 ms writing what the buffer
//! holds (what it cannot write in that time is counted as lost, see `writer::END_BUDGET`), so
//! the program's exit waits tens of milliseconds at most. [`END_WAIT`] bounds a write that hangs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use super::{config, mark_ended, reset_after_fork, resume_after_exec, running};
use crate::warn::warn_from_anywhere;

/// How a trace ended, as the end record names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `exit` (the library destructor).
    Exit,
    /// `_exit` or `_Exit`.
    UnderscoreExit,
    /// An `exec*` call replaced the image.
    Exec,
    /// A fatal signal.
    Signal(i32),
}

impl Ending {
    /// The writer's finish code (0 is "not finishing").
    pub fn code(self) -> u32 {
        match self {
            Ending::Exit => 1,
            Ending::UnderscoreExit => 2,
            Ending::Exec => 3,
            Ending::Signal(sig) => 1000 + sig as u32,
        }
    }

    /// The end record's reason for a finish code.
    pub fn reason(code: u32) -> String {
        match code {
            1 => "exit".to_string(),
            2 => "_exit".to_string(),
            3 => "exec".to_string(),
            n if n >= 1000 => format!("signal {}", n - 1000),
            n => format!("code {n}"),
        }
    }
}

/// The longest the program's end waits for its trace to be written out. The writer only has
/// what the buffer held when the end was asked for (writing a full buffer of 65536 events takes
/// milliseconds); this bound is for a write that hangs (a stalled network file system).
pub const END_WAIT: Duration = Duration::from_secs(2);

static PROCESS_START: OnceLock<SystemTime> = OnceLock::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
static SIGNALS_INSTALLED: AtomicBool = AtomicBool::new(false);

/// When this process (image) started being traced.
pub fn process_start() -> SystemTime {
    *PROCESS_START.get_or_init(SystemTime::now)
}

/// Signals whose default action ends the process; their handler flushes the trace first. The
/// first [`CHAINED`] also chain to a handler the program had; the others (a closed terminal's
/// hang-up, the alert's own `SIGUSR1` sent to a program without a handler, a timer's alarm, a
/// CPU or file-size limit) are taken only where the program left them at the default: a handler
/// of its own may take them often (a timer), and should not wait on a flush each time.
const FATAL: [libc::c_int; 15] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGPIPE,
    libc::SIGXCPU,
    libc::SIGXFSZ,
];

/// How many of [`FATAL`], from the first, chain to a program's own handler.
const CHAINED: usize = 7;

/// The handlers that were installed before ours, to chain to.
static mut PREVIOUS: [libc::sigaction; FATAL.len()] = [const {
    // SAFETY: an all-zero sigaction is SIG_DFL with no flags.
    unsafe { std::mem::zeroed() }
}; FATAL.len()];
static SIGNAL_WAIT_NS: AtomicU64 = AtomicU64::new(3_000_000_000);

/// Runs once per process image, from the library constructor.
pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    process_start();
    crate::resolve::dl::init();
    let cfg = config();
    super::announce::loaded(cfg.disabled);
    if cfg.disabled {
        return;
    }
    if let Some(layers) = cfg.capture.narrowed() {
        super::announce::capture(&layers);
    }
    // SAFETY: registers plain functions that only touch atomics and thread-locals.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        )
    };
}

/// Runs when this process's first session starts: installs the fatal-signal handlers then, not
/// at load time. A process that never touches the GPU keeps its signal dispositions exactly as
/// they were, and a program that sets up its own handlers at start (Python installs its SIGINT
/// handler only where the disposition is still the default, and reports any other as `None`, which
/// `multiprocessing`'s forkserver cannot restore) has done so before its first GPU call: the
/// tracer's handlers then chain to them. A forked child inherits them with the rest.
pub fn on_session_start() {
    if SIGNALS_INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    install_signal_handlers();
}

extern "C" fn before_fork() {
    crate::capture::python::before_fork();
}

extern "C" fn after_fork_in_parent() {
    crate::capture::python::after_fork();
}

extern "C" fn after_fork_in_child() {
    crate::capture::python::after_fork();
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    crate::capture::thread::reset_after_fork();
    crate::files::trace_file::close_inherited();
    reset_after_fork(parent);
}

fn install_signal_handlers() {
    for (i, &sig) in FATAL.iter().enumerate() {
        // SAFETY: a zeroed sigaction is valid; we fill handler, mask and flags before use.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_fatal_signal as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: sa_mask is ours to initialise.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: PREVIOUS[i] is written only here, once, and before our handler is installed,
        // so the handler never reads it half written; the program's action is read first.
        unsafe {
            let prev = std::ptr::addr_of_mut!(PREVIOUS[i]);
            if libc::sigaction(sig, std::ptr::null(), prev) != 0 {
                continue;
            }
            // Leave a program's deliberate "ignore" alone, and its own handler of a signal that
            // is not chained.
            let default = (*prev).sa_sigaction == libc::SIG_DFL;
            if (*prev).sa_sigaction == libc::SIG_IGN || (i >= CHAINED && !default) {
                continue;
            }
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

fn sleep_briefly() {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    // SAFETY: nanosleep is async-signal-safe.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// Asks the writer to write out everything and waits up to `limit` for it.
fn flush_and_wait(finish_reason: u32, limit: Duration) -> bool {
    let Some(s) = running() else { return true };
    if s.control.writer_tid.load(Ordering::Acquire) == crate::capture::thread::tid() {
        return false;
    }
    let gen = s.control.flush_request.fetch_add(1, Ordering::AcqRel) + 1;
    if finish_reason != 0 {
        s.control.finish.store(finish_reason, Ordering::Release);
    }
    // Wake the writer instead of waiting out its poll (unpark is one atomic swap and a futex
    // wake: no lock, no allocation, usable from a signal handler).
    if let Some(t) = s.control.writer.get() {
        t.unpark();
    }
    let start = Instant::now();
    while start.elapsed() < limit {
        let done = if finish_reason != 0 {
            s.control.finished.load(Ordering::Acquire) != 0
        } else {
            s.control.flushed.load(Ordering::Acquire) >= gen
        };
        if done {
            return true;
        }
        sleep_briefly();
    }
    false
}

extern "C" fn on_fatal_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    uctx: *mut libc::c_void,
) {
    let Some(i) = FATAL.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: PREVIOUS[i] is written once, before this handler was installed.
    let prev = unsafe { std::ptr::addr_of!(PREVIOUS[i]).read() };
    let handler = prev.sa_sigaction;
    let wait = Duration::from_nanos(SIGNAL_WAIT_NS.load(Ordering::Relaxed));
    if handler == libc::SIG_DFL {
        // The process is about to die: finish the trace, then let the default action happen.
        flush_and_wait(Ending::Signal(sig).code(), wait);
        mark_ended();
        // SAFETY: restores the previous (default) action and re-raises; the signal is blocked
        // while we run, so it is delivered with the default action when we return.
        unsafe {
            libc::sigaction(sig, &prev, std::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    // Someone else handles it and the process may live on: flush, then chain.
    flush_and_wait(0, wait);
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it takes three arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, uctx);
    } else {
        // SAFETY: a plain handler takes the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

/// Runs from the library destructor at exit: writes everything and the end record.
pub fn finish_at_exit() {
    end_before_leaving(Ending::Exit);
}

/// Writes this process's events and the end record before it goes (`exit`, `_exit`, `exec`);
/// returns whether a trace was ended. A call from another process that shares our memory (a
/// `vfork` child) leaves the session alone. Allocates nothing: `_exit` may come from a signal
/// handler.
pub fn end_before_leaving(ending: Ending) -> bool {
    let Some(s) = running() else { return false };
    // SAFETY: getpid has no preconditions (and is not cached: a vfork child sees its own pid).
    if s.pid != unsafe { libc::getpid() } as u32 {
        return false;
    }
    if !flush_and_wait(ending.code(), END_WAIT) {
        warn_from_anywhere(
            "the trace was not written out within 2 s of the process's end; it may lack its last \
             events",
        );
    }
    mark_ended();
    true
}

/// An `exec` that ended the trace failed: the process goes on, and its next traced call starts
/// a new trace. Touches only atomics (errno stays the failed call's).
pub fn resume_after_failed_exec() {
    resume_after_exec();
}
