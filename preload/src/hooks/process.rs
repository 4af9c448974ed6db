//! Ways a process ends that the library destructor never sees: `_exit` and `_Exit` (how a forked
//! worker ends: Python's `os._exit`, `multiprocessing`'s fork workers) and the `exec*` family
//! (the image is replaced). Each writes out the calling process's events and ends its trace
//! (reason `_exit` or `exec`), then makes the real call with the same arguments; what the call
//! does and returns is unchanged.
//!
//! - A `vfork` child shares the parent's memory, session included, and may call `_exit` or
//!   `execve`: the session belongs to the process that started it, so a call from any other pid
//!   passes straight through.
//! - `_exit` may be called from a signal handler: the flush only touches atomics, wakes the
//!   writer thread and sleeps (as the fatal-signal handler does), and the real functions are
//!   found at load time, not in the call.
//! - An `exec` that fails returns to the program: the ended trace stays as it is, and the next
//!   traced call starts a new one (a fresh file beside it).
//! - `execl`, `execlp` and `execle` are variadic: their arguments are gathered in `exec.c`, which
//!   calls the hooks below.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int};

use crate::session::announce;
use crate::session::lifecycle::{self, Ending};

/// The real functions, found from the library constructor.
static REAL_EXIT: AtomicUsize = AtomicUsize::new(0);
static REAL_UNDER_EXIT: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECV: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVP: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVPE: AtomicUsize = AtomicUsize::new(0);
static REAL_FEXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVEAT: AtomicUsize = AtomicUsize::new(0);

static TABLE: [(&std::ffi::CStr, &AtomicUsize); 8] = [
    (c"_exit", &REAL_EXIT),
    (c"_Exit", &REAL_UNDER_EXIT),
    (c"execve", &REAL_EXECVE),
    (c"execv", &REAL_EXECV),
    (c"execvp", &REAL_EXECVP),
    (c"execvpe", &REAL_EXECVPE),
    (c"fexecve", &REAL_FEXECVE),
    (c"execveat", &REAL_EXECVEAT),
];

type ExecvFn = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;
type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

unsafe extern "C" {
    fn vramtrace_set_exec_hooks(execv: ExecvFn, execvp: ExecvFn, execve: ExecveFn);
    fn vramtrace_execl();
    fn vramtrace_execlp();
    fn vramtrace_execle();
}

/// Finds the real functions (from the library constructor, while the process has one thread).
pub fn resolve() {
    for &(name, slot) in &TABLE {
        if slot.load(Ordering::Acquire) == 0 {
            if let Some(f) = crate::resolve::loaded::find_real(name) {
                slot.store(f, Ordering::Release);
            }
        }
    }
    // SAFETY: hands exec.c the hooks below, which have exactly the pointer types it declares.
    unsafe { vramtrace_set_exec_hooks(execv, execvp, execve) };
}

fn real(slot: &AtomicUsize, name: &std::ffi::CStr) -> Option<usize> {
    match slot.load(Ordering::Acquire) {
        0 => {
            let f = crate::resolve::loaded::find_real(name)?;
            slot.store(f, Ordering::Release);
            Some(f)
        }
        f => Some(f),
    }
}

/// Ends the trace before the process goes; never unwinds.
fn before_leaving(ending: Ending) -> bool {
    std::panic::catch_unwind(|| lifecycle::end_before_leaving(ending)).unwrap_or(false)
}

/// The process did not go (a failed exec): later calls start a new trace.
fn after_failed_exec(ended: bool) {
    if ended {
        lifecycle::resume_after_failed_exec();
    }
}

/// Leaves the process as `_exit` would: the real function, else the system call itself.
fn leave(slot: &AtomicUsize, name: &std::ffi::CStr, status: c_int) -> ! {
    if let Some(f) = real(slot, name) {
        // SAFETY: the real `_exit` / `_Exit`, which take the status and do not return.
        let f: unsafe extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute(f) };
        // SAFETY: the program's own argument.
        unsafe { f(status) }
    }
    // SAFETY: exit_group ends the process; it has no other effect and never returns.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    unreachable!("exit_group returned")
}

/// Ends the process without running its exit handlers, as glibc's `_exit`.
///
/// # Safety
/// Has the real function's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    before_leaving(Ending::UnderscoreExit);
    leave(&REAL_EXIT, c"_exit", status)
}

/// The same as `_exit` (C99's name).
///
/// # Safety
/// Has the real function's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    before_leaving(Ending::UnderscoreExit);
    leave(&REAL_UNDER_EXIT, c"_Exit", status)
}

/// An exec call: the trace ended first, the real function called as asked, the trace resumed if
/// it returns (it failed). errno is the real call's. `$path` and `$env` name what it runs and
/// the environment it gets: one without the tracer is said to `vramtrace run` first.
macro_rules! exec_hook {
    ($name:ident, $slot:ident, $path:expr, $env:expr, ($($arg:ident : $ty:ty),*)) => {
        /// Replaces the process image, as the C library's function of the same name.
        ///
        /// # Safety
        /// Has the real function's contract.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            type Real = unsafe extern "C" fn($($ty),*) -> c_int;
            let cname = match std::ffi::CStr::from_bytes_with_nul(
                concat!(stringify!($name), "\0").as_bytes(),
            ) {
                Ok(c) => c,
                Err(_) => return -1,
            };
            let Some(f) = real(&$slot, cname) else {
                // SAFETY: errno is this thread's.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            };
            // SAFETY: the program's own path (or NULL) and environment, as it passes them.
            let said = unsafe { say_if_unseen($path, $env) };
            let ended = before_leaving(Ending::Exec);
            // SAFETY: the real function of this name, which has this signature.
            let f: Real = unsafe { std::mem::transmute::<usize, Real>(f) };
            // SAFETY: the program's own arguments, passed on unchanged.
            let r = unsafe { f($($arg),*) };
            if said {
                announce::exec_failed();
            }
            after_failed_exec(ended);
            r
        }
    };
}

exec_hook!(execve, REAL_EXECVE, path, envp, (path: *const c_char, argv: *const *const c_char, envp: *const *const c_char));
exec_hook!(execv, REAL_EXECV, path, environ, (path: *const c_char, argv: *const *const c_char));
exec_hook!(execvp, REAL_EXECVP, file, environ, (file: *const c_char, argv: *const *const c_char));
exec_hook!(execvpe, REAL_EXECVPE, file, envp, (file: *const c_char, argv: *const *const c_char, envp: *const *const c_char));
exec_hook!(fexecve, REAL_FEXECVE, std::ptr::null(), envp, (fd: c_int, argv: *const *const c_char, envp: *const *const c_char));
exec_hook!(execveat, REAL_EXECVEAT, path, envp, (dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int));

unsafe extern "C" {
    /// The process's environment, as `execv` and `execvp` pass it on.
    static environ: *const *const c_char;
}

/// Tells `vramtrace run` that the image an exec of `path` makes with `env` runs unseen by it
/// (`env` preloads no tracer, or names no longer the run); whether it did. Never unwinds.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `env` is NULL or a NULL-terminated array of strings.
unsafe fn say_if_unseen(path: *const c_char, env: *const *const c_char) -> bool {
    let path: &[u8] = if path.is_null() {
        b"(a file descriptor)"
    } else {
        // SAFETY: a NUL-terminated string (the caller's contract).
        unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes()
    };
    // SAFETY: `env` as the caller's contract says.
    std::panic::catch_unwind(|| unsafe { announce::exec_unseen(path, env) }).unwrap_or(false)
}

/// `execl(path, arg, ..., NULL)`: gathered in exec.c, then [`execv`].
///
/// # Safety
/// Has the real function's contract.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execl() {
    core::arch::naked_asm!("jmp {f}", f = sym vramtrace_execl)
}

/// `execlp(file, arg, ..., NULL)`: gathered in exec.c, then [`execvp`].
///
/// # Safety
/// Has the real function's contract.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execlp() {
    core::arch::naked_asm!("jmp {f}", f = sym vramtrace_execlp)
}

/// `execle(path, arg, ..., NULL, envp)`: gathered in exec.c, then [`execve`].
///
/// # Safety
/// Has the real function's contract.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execle() {
    core::arch::naked_asm!("jmp {f}", f = sym vramtrace_execle)
}
