//! How the tracer tells the user about trouble on its side: one `vramtrace: warning: …` line on
//! stderr, and the program runs on. A module of its own, outside `session`, because every part of
//! the tracer warns — the hooks, the writer, the live analysis — and none should depend on
//! another to do it.

/// One line on stderr, written with a single `write(2)` (no locks, usable anywhere).
pub fn warn(msg: &str) {
    let line = format!("vramtrace: warning: {msg}\n");
    // SAFETY: writes our own buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, line.len()) };
}

/// [`warn`] without allocating, for paths that may run in a signal handler (`_exit` may be
/// called from one): the line is put together on the stack, cut at 256 bytes.
pub(crate) fn warn_from_anywhere(msg: &str) {
    const PREFIX: &[u8] = b"vramtrace: warning: ";
    let mut line = [0u8; 256];
    let text = &msg.as_bytes()[..msg.len().min(line.len() - PREFIX.len() - 1)];
    let n = PREFIX.len() + text.len();
    line[..PREFIX.len()].copy_from_slice(PREFIX);
    line[PREFIX.len()..n].copy_from_slice(text);
    line[n] = b'\n';
    // SAFETY: writes our own stack buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr() as *const libc::c_void, n + 1) };
}
