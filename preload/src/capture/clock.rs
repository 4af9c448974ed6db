//! The event clock. Hooks read the CPU's time-stamp counter when it is invariant (a few cycles,
//! no system call, no vDSO page) and the writer turns ticks into `CLOCK_MONOTONIC`
//! nanoseconds; elsewhere hooks read `CLOCK_MONOTONIC` directly.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const TSC: u8 = 1;
const MONOTONIC: u8 = 2;

static SOURCE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    // Leaf 0x80000007 EDX bit 8 is "invariant TSC" (constant rate, runs in every power state),
    // when the extended leaf exists.
    // SAFETY: every x86-64 processor has cpuid, and leaves above the maximum it reports are
    // not asked for. The intrinsic is an `unsafe fn` up to Rust 1.89 at least (the declared
    // rust-version is older) and safe in later ones, hence the allow.
    #[allow(unused_unsafe)]
    unsafe {
        use core::arch::x86_64::__cpuid;
        let max = __cpuid(0x8000_0000).eax;
        max >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

#[inline]
fn source() -> u8 {
    let s = SOURCE.load(Ordering::Relaxed);
    if s != UNKNOWN {
        return s;
    }
    find_source()
}

#[cold]
fn find_source() -> u8 {
    let s = if invariant_tsc() { TSC } else { MONOTONIC };
    SOURCE.store(s, Ordering::Relaxed);
    s
}

/// Whether [`now`] returns time-stamp counter ticks (else nanoseconds).
pub fn uses_tsc() -> bool {
    source() == TSC
}

/// The raw event time: ticks when [`uses_tsc`], else monotonic nanoseconds.
#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if source() == TSC {
        // SAFETY: rdtsc has no preconditions.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// Raw clock units per nanosecond × 2^32, once the writer has measured the TSC rate (0 until
/// then); 2^32 exactly when the raw clock is nanoseconds.
static RAW_PER_NS_Q32: AtomicU64 = AtomicU64::new(0);

/// `d` in raw clock units, when known.
#[inline]
pub fn raw_span(d: std::time::Duration) -> Option<u64> {
    let q = RAW_PER_NS_Q32.load(Ordering::Relaxed);
    if q == 0 {
        return None;
    }
    Some(((d.as_nanos() * q as u128) >> 32) as u64)
}

/// Turns raw event times into monotonic nanoseconds, from pairs of (ticks, ns) read together.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    tsc: bool,
    base_raw: u64,
    base_ns: u64,
    ns_per_tick: f64,
}

impl Calibration {
    /// Reads a first (ticks, ns) pair, waits `settle`, reads a second: the rate between them.
    pub fn measure(settle: std::time::Duration) -> Calibration {
        let tsc = uses_tsc();
        let (r0, n0) = (now(), monotonic_ns());
        if !tsc {
            return Calibration {
                tsc,
                base_raw: r0,
                base_ns: n0,
                ns_per_tick: 1.0,
            };
        }
        // A rate measured before (by this process, or by the parent this one was forked from)
        // holds: the counter's rate does not change.
        let q = RAW_PER_NS_Q32.load(Ordering::Relaxed);
        if q != 0 {
            return Calibration {
                tsc,
                base_raw: r0,
                base_ns: n0,
                ns_per_tick: 4_294_967_296.0 / q as f64,
            };
        }
        std::thread::sleep(settle);
        let mut c = Calibration {
            tsc,
            base_raw: r0,
            base_ns: n0,
            ns_per_tick: 1.0,
        };
        c.refine();
        c
    }

    /// Re-measures the rate over the whole time since the first pair (longer is more precise).
    pub fn refine(&mut self) {
        if !self.tsc {
            return;
        }
        let (r, n) = (now(), monotonic_ns());
        if r > self.base_raw && n > self.base_ns {
            self.ns_per_tick = (n - self.base_ns) as f64 / (r - self.base_raw) as f64;
        }
    }

    /// Publishes the measured rate for [`raw_span`].
    pub fn publish(&self) {
        let per_ns = if self.tsc {
            1.0 / self.ns_per_tick
        } else {
            1.0
        };
        if per_ns.is_finite() && per_ns > 0.0 {
            RAW_PER_NS_Q32.store((per_ns * 4_294_967_296.0) as u64, Ordering::Relaxed);
        }
    }

    /// Monotonic nanoseconds for a raw event time.
    #[inline]
    pub fn to_ns(&self, raw: u64) -> u64 {
        if !self.tsc {
            return raw;
        }
        // Differences of 64-bit values in 64-bit arithmetic (an `i128` conversion to and from
        // `f64` is a library call, on the writer's path for every event).
        let delta = raw.wrapping_sub(self.base_raw) as i64;
        let ns = (delta as f64 * self.ns_per_tick) as i64;
        self.base_ns.saturating_add_signed(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converted_ticks_track_the_monotonic_clock() {
        let cal = Calibration::measure(std::time::Duration::from_millis(20));
        let raw = now();
        let ns = monotonic_ns();
        let converted = cal.to_ns(raw);
        let diff = converted.abs_diff(ns);
        assert!(diff < 1_000_000, "converted {converted} vs {ns}");
    }
}
