//! Device accounting: at most every `VRAMTRACE_MEMINFO_MS` per device, the hook of an allocation
//! asks the driver how much of the device is in use (`cuMemGetInfo_v2`), on the calling thread and
//! in its current context — where that is known to be safe, right after the program's own call
//! succeeded there. The answer becomes a tracer event, so reports can set what the trace explains
//! against what the driver says is used.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::capture::clock;
use crate::resolve::driver;

const MAX_DEVICES: usize = 64;

/// Raw clock time from which the next sample per device is due (0: never sampled;
/// [`UNCALIBRATED`]: once the clock's rate is known). A deadline rather than the last sample's
/// time: the hook compares, and converts the interval to clock units only when it samples.
static NEXT: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// The deadline of a device sampled before the raw clock's rate was known (the first
/// milliseconds of a session): its next sample waits for the rate, instead of every allocation
/// sampling meanwhile (thousands of driver calls and events under a burst of allocations).
const UNCALIBRATED: u64 = u64::MAX;
static GET_INFO: AtomicUsize = AtomicUsize::new(0);

type GetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;

/// `(free, total)` of `device` when a sample is due at raw clock time `now` (or `force`d: step
/// marks always sample), else `None`. The first allocation seen on a device always samples (the
/// context baseline).
#[inline]
pub fn sample_due(device: i32, interval: Duration, force: bool, now: u64) -> Option<(u64, u64)> {
    if interval.is_zero() || device < 0 || device as usize >= MAX_DEVICES {
        return None;
    }
    let slot = &NEXT[device as usize];
    // The raw event clock (a TSC read) keeps this check off the vDSO.
    let now = now.max(1);
    let next = slot.load(Ordering::Relaxed);
    if !force && next != 0 && now < next {
        if next != UNCALIBRATED {
            return None;
        }
        return sample_when_calibrated(slot, now, interval);
    }
    sample(slot, next, now, interval)
}

/// A device sampled before the clock's rate was known: sampled again once it is.
#[cold]
fn sample_when_calibrated(slot: &AtomicU64, now: u64, interval: Duration) -> Option<(u64, u64)> {
    clock::raw_span(interval)?;
    sample(slot, UNCALIBRATED, now, interval)
}

/// The sample itself, once [`sample_due`] found one due.
#[cold]
fn sample(slot: &AtomicU64, next: u64, now: u64, interval: Duration) -> Option<(u64, u64)> {
    let due = match clock::raw_span(interval) {
        Some(span) => now.saturating_add(span).clamp(1, UNCALIBRATED - 1),
        None => UNCALIBRATED,
    };
    // One thread samples; the others carry on.
    if slot
        .compare_exchange(next, due, Ordering::AcqRel, Ordering::Relaxed)
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
