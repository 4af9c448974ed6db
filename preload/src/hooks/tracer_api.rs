//! The tracer's own C API, for programs that want to help it: step marks, iteration marks (the
//! step of a loop without an optimizer), payloads of the program's own view of its memory
//! (PyTorch's allocator history, handed over by the Python bootstrap that `vramtrace run`
//! installs; `docs/pytorch.md`), and whether an alert waits for that view.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vramtrace_collector::event::{Api, Op};

use super::{Call, Order};
use crate::capture::clock;
use crate::session::{Attached, Session, HOOK_PANICS};

static STEP: AtomicU64 = AtomicU64::new(0);
static ITERATION: AtomicU64 = AtomicU64::new(0);

/// Marks the start of a training step; returns the step number (1 for the first call).
///
/// Callable from Python: `ctypes.CDLL(None).vramtrace_mark_step()`.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_mark_step() -> u64 {
    let step = STEP.fetch_add(1, Ordering::Relaxed) + 1;
    let call = Call::begin(Api::TracerMarkStep, 0, Order::Create);
    call.end(0, || Op::MarkStep { step });
    step
}

/// Marks one iteration of the program's outermost loop as a framework sees it (one call of its
/// model) in a program that marks no steps: its steps until a step mark comes. Returns the
/// iteration number (1 for the first call).
///
/// Callable from Python: the bootstrap of `vramtrace run` calls it for each outermost
/// `nn.Module` call of a PyTorch program that made no optimizer.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_mark_iteration() -> u64 {
    let n = ITERATION.fetch_add(1, Ordering::Relaxed) + 1;
    let call = Call::begin(Api::TracerMarkIteration, 0, Order::Create);
    call.end(0, || Op::MarkIteration { n });
    n
}

/// 1 while an alert waits for the program's own view of its memory (hand over a snapshot of
/// PyTorch's recorder with `vramtrace_attach`, reason `alert`, to name the line that keeps it),
/// else 0. Cheap: one load, for polling at every step.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_alert_pending() -> c_int {
    c_int::from(crate::monitor::ALERT_VIEW_WANTED.load(Ordering::Relaxed))
}

/// `vramtrace_attach` took the payload.
pub const ATTACH_OK: c_int = 0;
/// Tracing is off in this process (`VRAMTRACE_DISABLE`, or the trace has ended).
pub const ATTACH_OFF: c_int = -1;
/// A null or over-long kind, or a null payload with a nonzero length.
pub const ATTACH_BAD_ARGUMENT: c_int = -2;
/// The payload is larger than [`MAX_ATTACH_BYTES`].
pub const ATTACH_TOO_LARGE: c_int = -3;
/// The tracer failed inside (counted as a hook panic); the program is unaffected.
pub const ATTACH_FAILED: c_int = -4;

/// The longest kind name, in bytes.
pub const MAX_KIND_BYTES: usize = 128;
/// The largest payload taken (a PyTorch history of a million entries is a few hundred MiB).
pub const MAX_ATTACH_BYTES: usize = 1 << 30;

/// Hands the tracer a payload to write into the trace as it is, under `kind` (a NUL-terminated
/// name such as `torch.memory_snapshot`). The writer thread writes the bytes with the time
/// they arrived and the last sequence number handed out then, so a reader can place them among
/// the events; the call returns once they are on disk (or after 10 s). Returns [`ATTACH_OK`] or
/// a negative code.
///
/// Callable from Python: `ctypes.CDLL(None).vramtrace_attach(b"kind", data, len(data))`.
///
/// # Safety
/// `kind` must be null or point to a NUL-terminated string; `data` must be null (with `len` 0)
/// or point to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_attach(
    kind: *const c_char,
    data: *const u8,
    len: usize,
) -> c_int {
    if kind.is_null() || (data.is_null() && len != 0) {
        return ATTACH_BAD_ARGUMENT;
    }
    if len > MAX_ATTACH_BYTES {
        return ATTACH_TOO_LARGE;
    }
    // SAFETY: the caller passes a NUL-terminated string (checked non-null above).
    let kind = unsafe { CStr::from_ptr(kind) };
    if kind.to_bytes().is_empty() || kind.to_bytes().len() > MAX_KIND_BYTES {
        return ATTACH_BAD_ARGUMENT;
    }
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller passes `len` readable bytes at `data` (non-null when len > 0).
        unsafe { std::slice::from_raw_parts(data, len) }
    };
    std::panic::catch_unwind(|| attach(kind, bytes)).unwrap_or_else(|_| {
        HOOK_PANICS.fetch_add(1, Ordering::Relaxed);
        ATTACH_FAILED
    })
}

fn attach(kind: &CStr, bytes: &[u8]) -> c_int {
    let Some(session) = super::session() else {
        return ATTACH_OFF;
    };
    let payload = Attached {
        kind: kind.to_string_lossy().into_owned(),
        data: bytes.to_vec(),
        time_ns: clock::monotonic_ns(),
        after_seq: session.last_seq(),
    };
    let number = {
        let Ok(mut queue) = session.attachments.lock() else {
            return ATTACH_FAILED;
        };
        queue.waiting.push(payload);
        queue.queued += 1;
        queue.queued
    };
    if let Some(t) = session.control.writer.get() {
        t.unpark();
    }
    wait_until_written(session, number);
    ATTACH_OK
}

/// How long `vramtrace_attach` waits for its payload to reach the file.
const ATTACH_WAIT: Duration = Duration::from_secs(10);

/// Waits (at most [`ATTACH_WAIT`]) until payload `number` is written and flushed, so a process
/// that dies right after handing it over (the usual end of an out-of-memory error) still leaves
/// it in the trace. The writer never needs the caller (nor Python's lock) to get there.
fn wait_until_written(session: &Session, number: u64) {
    let start = Instant::now();
    while session.attachments_written.load(Ordering::Acquire) < number
        && session.control.finished.load(Ordering::Acquire) == 0
        && session.control.writer_tid.load(Ordering::Acquire) != crate::capture::thread::tid()
        && start.elapsed() < ATTACH_WAIT
    {
        std::thread::sleep(Duration::from_micros(500));
    }
}
