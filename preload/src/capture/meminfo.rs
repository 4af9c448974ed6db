//! Device accounting: at most every `VRAMTRACE_MEMINFO_MS` per device, the hook of an allocation
//! asks the driver how much of the device is in use (`cuMemGetInfo_v2`), on the calling thread and
//! in its current context — where that is known to be safe, right after the program's own call
//! succeeded there. The answer becomes a tracer event, so reports can set what the trace explains
//! against what the driver says is used.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::clock;
use crate::resolve::driver;

const MAX_DEVICES: usize = 64;

/// Raw clock time of the last sample per device (0: never).
static LAST: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
static GET_INFO: AtomicUsize = AtomicUsize::new(0);

type GetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;

/// `(free, total)` of `device` when a sample is due (or `force`d: step marks always sample), else
/// `None`. The first allocation seen on a device always samples (the context baseline).
pub fn sample_due(device: i32, interval: Duration, force: bool) -> Option<(u64, u64)> {
    if interval.is_zero() || device < 0 || device as usize >= MAX_DEVICES {
        return None;
    }
    let slot = &LAST[device as usize];
    // The raw event clock (a TSC read) keeps this check off the vDSO; until its rate is known
    // (the first milliseconds of a session) every allocation samples.
    let now = clock::now().max(1);
    let last = slot.load(Ordering::Relaxed);
    if !force && last != 0 {
        if let Some(span) = clock::raw_span(interval) {
            if now.saturating_sub(last) < span {
                return None;
            }
        }
    }
    // One thread samples; the others carry on.
    if slot
        .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return None;
    }
    let mut f = GET_INFO.load(Ordering::Acquire);
    if f == 0 {
        f = driver::export(c"cuMemGetInfo_v2").unwrap_or(0);
        GET_INFO.store(f, Ordering::Release);
    }
    if f == 0 {
        return None;
    }
    // SAFETY: the driver's cuMemGetInfo_v2(size_t *free, size_t *total).
    let f: GetInfo = unsafe { std::mem::transmute::<usize, GetInfo>(f) };
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: two writable size_t.
    (unsafe { f(&mut free, &mut total) } == 0).then_some((free as u64, total as u64))
}
