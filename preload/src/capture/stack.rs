//! Native stacks: return addresses only, captured in the hook and symbolized later.

/// Captures up to `depth` return addresses, starting at the frame that called the hook
/// (`caller`); the tracer's own frames are cut off.
pub fn capture(depth: usize, caller: u64) -> Option<Box<[u64]>> {
    if depth == 0 {
        return None;
    }
    let mut frames: Vec<u64> = Vec::with_capacity(depth + 8);
    let mut started = false;
    // SAFETY: trace_unsynchronized only requires that no other unwinder runs concurrently on this
    // thread, which holds: the hook is not re-entered while it captures.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as u64;
            if ip == 0 {
                return false;
            }
            if !started {
                if ip == caller {
                    started = true;
                } else {
                    // A frame of the tracer's own (or of the unwinder); keep it only in case the
                    // caller is never found.
                    frames.push(ip);
                    return frames.len() < depth + 8;
                }
                frames.clear();
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
    Some(frames.into_boxed_slice())
}
