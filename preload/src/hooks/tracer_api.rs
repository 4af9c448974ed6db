//! The tracer's own C API, for programs that want to help it.

use std::sync::atomic::{AtomicU64, Ordering};

use vramtrace_collector::event::{Api, Op};

use crate::capture::{Call, Order};

static STEP: AtomicU64 = AtomicU64::new(0);

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
