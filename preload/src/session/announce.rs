//! Telling `vramtrace run` what became of each traced process, so that a run, and `vramtrace
//! check` above all, never mistakes "not seen" for "nothing there".
//!
//! A process that makes no GPU memory call writes no trace (the session starts at the first
//! event), and neither does a process the loader never gave the library to (a setuid program, a
//! static binary, a library file it could not load), one with `VRAMTRACE_DISABLE` set, or one
//! whose trace could not be created (a read-only directory). `run` must tell these apart, so it
//! names a private directory of its own in `VRAMTRACE_RUN_STATUS`, and each traced process
//! appends lines to a file there named by its pid:
//!
//! - `tracing` or `disabled`, from the library constructor (once per program image: an `exec`
//!   adds another);
//! - `trace PATH` when its trace file was created;
//! - `removed PATH` when the tracer removed it at the end: the process made no GPU memory call
//!   (only step marks, as a program training on the CPU under the Python hooks makes);
//! - `untraced REASON` when it could not be: the process ran on untraced;
//! - `cut PATH` when writing it failed later: the trace stops there;
//! - `exec-untraced PATH` before an exec whose environment no longer preloads the tracer (a
//!   launcher that cleans the environment: `env -i`, `sudo`, a subprocess given its own), and
//!   `exec-failed` when that exec returned: the image it made runs unseen;
//! - `exec-unannounced PATH` before an exec whose environment preloads the tracer but no
//!   longer names this run's directory (`env -i LD_PRELOAD=… prog`): the image is traced, but
//!   its trace goes where its own settings say and the run never hears of it (`exec-failed`
//!   takes it back too).
//!
//! A warning about a bad setting is the same in every process of a run, so only the first
//! process to give it does ([`first_to_warn`]): it leaves a `warned-HASH` file for the others.
//!
//! The directory and the files are `run`'s, created fresh for the run and removed after it; the
//! program's own files and descriptors are never touched (each file is opened close-on-exec and
//! closed before returning), and `errno` is left as the program would see it. Without the
//! variable (the library preloaded by hand) nothing is written.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use libc::c_char;

/// The variable `vramtrace run` sets: a directory for one status file per traced process.
pub const RUN_STATUS: &str = "VRAMTRACE_RUN_STATUS";

/// The run's status directory, if this process is part of one.
fn status_dir() -> Option<Vec<u8>> {
    std::env::var_os(RUN_STATUS)
        .filter(|d| !d.is_empty())
        .map(|d| d.as_bytes().to_vec())
}

/// Opens `name` in the status directory with `flags` (plus write-only, close-on-exec, never
/// through a symlink), runs `then` on the descriptor and closes it; `errno` is kept. `None`
/// when there is no status directory, else the open's error number when it failed.
fn with_file<T>(
    name: &str,
    flags: libc::c_int,
    then: impl FnOnce(libc::c_int) -> T,
) -> Option<Result<T, i32>> {
    let mut path = status_dir()?;
    path.push(b'/');
    path.extend_from_slice(name.as_bytes());
    let path = CString::new(path).ok()?;
    // SAFETY: errno is this thread's; it is read here and restored below.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: a NUL-terminated path; O_CREAT with a mode; the descriptor is ours alone and
    // closed below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | flags,
            0o600,
        )
    };
    let result = if fd >= 0 {
        let r = then(fd);
        // SAFETY: closes the descriptor opened above.
        unsafe { libc::close(fd) };
        Ok(r)
    } else {
        // SAFETY: as above.
        Err(unsafe { *libc::__errno_location() })
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
    Some(result)
}

/// Appends one line to this process's status file. One `write(2)` of a few hundred bytes to a
/// file opened `O_APPEND`: lines from the images of one process never mix.
fn append(line: &[u8]) {
    let mut text = Vec::with_capacity(line.len() + 1);
    // A line break inside a path or reason would start a line of its own: keep it one line.
    text.extend(line.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
    text.push(b'\n');
    with_file(&std::process::id().to_string(), libc::O_APPEND, |fd| {
        // SAFETY: writes our own buffer to our own descriptor. A short write still leaves the
        // file, which is what `run` looks for first.
        unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
    });
}

/// The library was loaded into this process image (tracing, or disabled).
pub fn loaded(disabled: bool) {
    if let Some(dir) = status_dir() {
        // Kept for the exec hooks, which must not allocate.
        let _ = EXEC_DIR.set(dir);
    }
    append(if disabled { b"disabled" } else { b"tracing" });
}

/// The status directory as the library found it when loaded: what [`exec_unseen`]
/// writes in without allocating (an exec may come from a vfork child or a signal handler).
static EXEC_DIR: OnceLock<Vec<u8>> = OnceLock::new();

/// Before an exec of `path` with the environment `env` (NULL-terminated; NULL for none): when
/// the image it makes will run unseen by the run — no vramtrace library preloaded, or one that
/// no longer names the run's directory — says so. Returns whether it said so ([`exec_failed`]
/// takes it back). Touches no heap and keeps `errno`.
///
/// # Safety
/// `env` is NULL or a NULL-terminated array of NUL-terminated strings.
pub unsafe fn exec_unseen(path: &[u8], env: *const *const c_char) -> bool {
    let Some(dir) = EXEC_DIR.get() else {
        return false;
    };
    // SAFETY: `env` is the environment the program hands to exec, NULL-terminated, or NULL.
    let head: &[u8] = match unsafe { seen_by_run(env, dir) } {
        (true, true) => return false,
        (false, _) => b"exec-untraced ",
        (true, false) => b"exec-unannounced ",
    };
    let mut line = [0u8; 1024];
    line[..head.len()].copy_from_slice(head);
    let room = line.len() - head.len() - 1;
    let path = &path[..path.len().min(room)];
    for (to, &b) in line[head.len()..].iter_mut().zip(path) {
        *to = if b == b'\n' { b' ' } else { b };
    }
    let n = head.len() + path.len();
    line[n] = b'\n';
    append_raw(dir, &line[..n + 1])
}

/// The exec that [`exec_unseen`] spoke of failed: this image goes on, seen.
pub fn exec_failed() {
    if let Some(dir) = EXEC_DIR.get() {
        append_raw(dir, b"exec-failed\n");
    }
}

/// Whether environment `env` preloads a vramtrace library (`LD_PRELOAD=…vramtrace…`), and
/// whether it names the run's status directory `dir` (`VRAMTRACE_RUN_STATUS=dir`).
///
/// # Safety
/// `env` is NULL or a NULL-terminated array of NUL-terminated strings.
unsafe fn seen_by_run(env: *const *const c_char, dir: &[u8]) -> (bool, bool) {
    let (mut preloads, mut names_run) = (false, false);
    if env.is_null() {
        return (preloads, names_run);
    }
    let mut at = env;
    loop {
        // SAFETY: `at` stays inside the array up to its NULL (the caller's contract).
        let entry = unsafe { *at };
        if entry.is_null() {
            return (preloads, names_run);
        }
        // SAFETY: a NUL-terminated string of the array.
        let text = unsafe { std::ffi::CStr::from_ptr(entry) }.to_bytes();
        if let Some(value) = text.strip_prefix(b"LD_PRELOAD=") {
            preloads |= value.windows(9).any(|w| w == b"vramtrace");
        }
        let status = (text.strip_prefix(RUN_STATUS.as_bytes())).and_then(|t| t.strip_prefix(b"="));
        names_run |= status == Some(dir);
        // SAFETY: not yet at the NULL, so the next element is inside the array.
        at = unsafe { at.add(1) };
    }
}

/// Appends `line` to this process's status file in `dir` with system calls only: the path
/// is built on the stack; `errno` is kept. Whether it was written.
fn append_raw(dir: &[u8], line: &[u8]) -> bool {
    let mut path = [0u8; 4096];
    // SAFETY: getpid has no preconditions.
    let mut pid = unsafe { libc::getpid() } as u32;
    let mut digits = [0u8; 10];
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    let digits = &digits[k..];
    let len = dir.len() + 1 + digits.len();
    if len >= path.len() {
        return false;
    }
    path[..dir.len()].copy_from_slice(dir);
    path[dir.len()] = b'/';
    path[dir.len() + 1..len].copy_from_slice(digits);
    // SAFETY: errno is this thread's; restored below.
    let saved_errno = unsafe { *libc::__errno_location() };
    // SAFETY: `path` is NUL-terminated (zeroed past `len`); O_CREAT with a mode.
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    let written = fd >= 0 && {
        // SAFETY: our own buffer to our own descriptor, closed right after.
        let n = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        n == line.len() as isize
    };
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
    written
}

/// This process traces only `layers` (`VRAMTRACE_CAPTURE`, comma-separated): what the others
/// did, a leak among it, is not in its trace.
pub fn capture(layers: &str) {
    append(format!("capture {layers}").as_bytes());
}

/// This process's trace was created at `path`.
pub fn trace_created(path: &std::path::Path) {
    append(&[b"trace ", path.as_os_str().as_bytes()].concat());
}

/// This process's trace at `path` was removed: it held no GPU memory call (only step marks).
pub fn trace_removed(path: &std::path::Path) {
    append(&[b"removed ", path.as_os_str().as_bytes()].concat());
}

/// This process's trace could not be created: it runs on untraced.
pub fn untraced(reason: &str) {
    append(format!("untraced {reason}").as_bytes());
}

/// Writing the trace at `path` failed: it stops where the last write ended.
pub fn trace_cut(path: &str) {
    append(format!("cut {path}").as_bytes());
}

/// Whether this process should print `warning` (a bad setting): outside a run always; in a
/// run, only the first process to give this warning does.
pub fn first_to_warn(warning: &str) -> bool {
    // FNV-1a: the name needs only to tell this run's few warnings apart.
    let hash = warning.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    // Only a file another process made keeps this one quiet; any other trouble warns.
    with_file(&format!("warned-{hash:016x}"), libc::O_EXCL, |_| ())
        .is_none_or(|made| made != Err(libc::EEXIST))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status directory is process-wide (an environment variable): one test does it all.
    #[test]
    fn lines_are_appended_and_warnings_given_once() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: no other test of this binary reads or writes this variable.
        unsafe { std::env::set_var(RUN_STATUS, dir.path()) };
        loaded(false);
        trace_created(std::path::Path::new("/t/a\nb.vtrace"));
        untraced("cannot write the trace: read-only");
        // An exec whose environment keeps the tracer and the run says nothing; one without
        // the tracer says so, and a failed one takes that back; one with the tracer but not
        // the run says that.
        let status = CString::new(
            [
                RUN_STATUS.as_bytes(),
                b"=",
                dir.path().as_os_str().as_bytes(),
            ]
            .concat(),
        )
        .unwrap();
        let with = [
            c"LD_PRELOAD=/opt/vt/libvramtrace.so".as_ptr(),
            status.as_ptr(),
            std::ptr::null(),
        ];
        // SAFETY: NULL-terminated arrays of NUL-terminated strings.
        assert!(!unsafe { exec_unseen(b"/bin/a", with.as_ptr()) });
        let without = [
            c"LD_PRELOAD=/lib/other.so".as_ptr(),
            status.as_ptr(),
            std::ptr::null(),
        ];
        // SAFETY: as above.
        assert!(unsafe { exec_unseen(b"/bin/b\nc", without.as_ptr()) });
        exec_failed();
        // SAFETY: NULL is no environment at all.
        assert!(unsafe { exec_unseen(b"/bin/d", std::ptr::null()) });
        let other_run = [
            c"LD_PRELOAD=/opt/vt/libvramtrace.so".as_ptr(),
            c"VRAMTRACE_RUN_STATUS=/tmp/another".as_ptr(),
            std::ptr::null(),
        ];
        // SAFETY: as above.
        assert!(unsafe { exec_unseen(b"/bin/e", other_run.as_ptr()) });
        assert!(first_to_warn("X='1' is bad"));
        assert!(!first_to_warn("X='1' is bad"));
        assert!(first_to_warn("Y='2' is bad"));
        // SAFETY: as above.
        unsafe { std::env::remove_var(RUN_STATUS) };
        assert!(first_to_warn("X='1' is bad"), "outside a run, every time");
        let mine = dir.path().join(std::process::id().to_string());
        assert_eq!(
            std::fs::read_to_string(mine).unwrap(),
            "tracing\ntrace /t/a b.vtrace\nuntraced cannot write the trace: read-only\n\
             exec-untraced /bin/b c\nexec-failed\nexec-untraced /bin/d\n\
             exec-unannounced /bin/e\n"
        );
    }
}
