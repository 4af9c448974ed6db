//! Passing SIGINT, SIGTERM and SIGHUP on to the traced program, so it can flush its trace and exit
//! the way it would without vramtrace in front of it (a SIGHUP vramtrace did not take would end it
//! at once, leaving the program running without it and no summary).
//!
//! A signal typed at the terminal (Ctrl-C) already reaches the whole foreground process group,
//! child included; forwarding it again would deliver it twice. Only signals sent to vramtrace
//! alone (`kill`, a job scheduler) are forwarded.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The child's pid, 0 before it is started.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child existed, to deliver once it does.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// Whether one of the signals arrived at all (forwarded or typed at the terminal): the run was
/// asked to stop, and nothing it left is waited for.
static RECEIVED: AtomicBool = AtomicBool::new(false);

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to a handler installed with SA_SIGINFO.
    let code = unsafe { (*info).si_code };
    RECEIVED.store(true, Ordering::SeqCst);
    if code == libc::SI_KERNEL {
        // From the terminal driver: the child's process group received it too.
        return;
    }
    match CHILD.load(Ordering::SeqCst) {
        0 => PENDING.store(sig, Ordering::SeqCst),
        pid => {
            // SAFETY: kill is async-signal-safe; pid is the child this process started.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Sets the handler of every forwarded signal to `handler`.
fn install(handler: libc::sighandler_t, flags: libc::c_int) {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction is a valid starting point; the mask is initialised by
        // sigemptyset before use, and the handler is either SIG_DFL or `forward`, whose
        // signature matches SA_SIGINFO.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            action.sa_flags = flags;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Starts catching the forwarded signals (call before starting the child).
pub fn catch() {
    let handler = forward as extern "C" fn(_, _, _) as libc::sighandler_t;
    install(handler, libc::SA_SIGINFO | libc::SA_RESTART);
}

/// Names the child signals go to, and delivers one that arrived before it existed.
pub fn forward_to(pid: u32) {
    let pid = i32::try_from(pid).unwrap_or(0);
    CHILD.store(pid, Ordering::SeqCst);
    let pending = PENDING.swap(0, Ordering::SeqCst);
    if pending != 0 && pid > 0 {
        // SAFETY: plain syscall on the child this process started.
        unsafe { libc::kill(pid, pending) };
    }
}

/// Whether SIGINT, SIGTERM or SIGHUP reached vramtrace while it ran the program.
pub fn received() -> bool {
    RECEIVED.load(Ordering::SeqCst)
}

/// Stops forwarding: once the child is gone, Ctrl-C should stop vramtrace itself again.
pub fn release() {
    CHILD.store(0, Ordering::SeqCst);
    install(libc::SIG_DFL, 0);
}
