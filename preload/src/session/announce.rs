//! Telling `vramtrace run` that the tracer was loaded into a process.
//!
//! A process that makes no GPU memory call writes no trace (the session starts at the first
//! event), and neither does a process the loader never gave the library to (a setuid program, a
//! static binary, a library file it could not load). `run` must tell the two apart, so it names
//! a private directory of its own in `VRAMTRACE_RUN_STATUS` and the library constructor of every
//! traced process leaves one file there, named by its pid, holding `tracing` or `disabled`.
//!
//! The directory and the files are `run`'s, created fresh for the run and removed after it; the
//! program's own files and descriptors are never touched (the file is opened close-on-exec and
//! closed before the constructor returns), and `errno` is left as the program would see it.
//! Without the variable (the library preloaded by hand) nothing is written.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

/// The variable `vramtrace run` sets: a directory for one marker file per traced process.
pub const RUN_STATUS: &str = "VRAMTRACE_RUN_STATUS";

/// Leaves this process's marker in the run's status directory, if there is one.
pub fn loaded(disabled: bool) {
    let Some(dir) = std::env::var_os(RUN_STATUS).filter(|d| !d.is_empty()) else {
        return;
    };
    let mut path = dir.as_bytes().to_vec();
    path.extend_from_slice(format!("/{}", std::process::id()).as_bytes());
    let Ok(path) = CString::new(path) else {
        return;
    };
    let state: &[u8] = if disabled {
        b"disabled\n"
    } else {
        b"tracing\n"
    };
    // SAFETY: errno is this thread's; it is read here and restored below.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: a NUL-terminated path; O_CREAT with a mode; the descriptor is ours alone and
    // closed below. O_EXCL and O_NOFOLLOW: only a fresh file in the directory run made.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd >= 0 {
        // SAFETY: writes our own buffer to our own descriptor, then closes it. A short write
        // still leaves the file, which is what `run` looks for.
        unsafe {
            libc::write(fd, state.as_ptr().cast(), state.len());
            libc::close(fd);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}
