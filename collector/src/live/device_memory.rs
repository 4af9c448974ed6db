//! Device accounting: the driver's own view of used memory (sampled by the tracer with
//! `cuMemGetInfo`) set against the device memory the trace explains.
//!
//! The first sample of a device fixes its baseline: what the driver said was used minus what the
//! trace held live then — the CUDA context itself, the driver's reservations, and any other
//! process on the same device. Later samples compare again; what neither the baseline nor the
//! traced live set accounts for is the unexplained remainder.

use serde::Serialize;

use super::LiveState;
use crate::event::Event;

/// Accounting of one device from the tracer's samples.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceAccount {
    pub device: i32,
    /// Device memory in bytes, as the driver reports it.
    pub total: u64,
    /// Samples taken.
    pub samples: u64,
    /// Driver-reported used bytes (total − free) at the first sample.
    pub first_used: u64,
    /// Traced live device bytes at the first sample.
    pub first_traced: u64,
    /// Driver-reported used bytes at the last sample.
    pub last_used: u64,
    /// Traced live device bytes at the last sample.
    pub last_traced: u64,
    /// Sequence number and time of the last sample.
    pub last_seq: u64,
    pub last_time_ns: u64,
}

impl DeviceAccount {
    /// Used bytes the trace does not hold at the first sample: the context and the driver's own
    /// memory (and other processes on the device).
    pub fn baseline(&self) -> u64 {
        self.first_used.saturating_sub(self.first_traced)
    }

    /// Driver-reported used − baseline − traced live, at the last sample; negative when the trace
    /// holds more than the driver reports in use beyond the baseline.
    pub fn unexplained(&self) -> i64 {
        self.last_used as i64 - self.baseline() as i64 - self.last_traced as i64
    }

    /// Takes one sample: `used` by the driver's count, `traced` live in the trace.
    pub fn sample(&mut self, used: u64, total: u64, traced: u64, seq: u64, time_ns: u64) {
        if self.samples == 0 {
            self.first_used = used;
            self.first_traced = traced;
        }
        self.samples += 1;
        self.total = total;
        self.last_used = used;
        self.last_traced = traced;
        self.last_seq = seq;
        self.last_time_ns = time_ns;
    }
}

impl LiveState {
    /// A `cuMemGetInfo` sample: the driver's used bytes against what the trace holds live.
    pub(super) fn on_device_memory(&mut self, e: &Event, free: u64, total: u64) {
        if e.device < 0 {
            return;
        }
        let traced = self.device_bytes(e.device);
        self.devices
            .entry(e.device)
            .or_insert_with(|| DeviceAccount {
                device: e.device,
                ..DeviceAccount::default()
            })
            .sample(total.saturating_sub(free), total, traced, e.seq, e.time_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_and_remainder() {
        let mut a = DeviceAccount {
            device: 0,
            ..Default::default()
        };
        // Context of 500 MiB, then 100 MiB traced.
        a.sample(600 << 20, 8 << 30, 100 << 20, 1, 10);
        assert_eq!(a.baseline(), 500 << 20);
        assert_eq!(a.unexplained(), 0);
        // 300 MiB traced, driver says 810 MiB used: 10 MiB unexplained.
        a.sample(810 << 20, 8 << 30, 300 << 20, 9, 20);
        assert_eq!(a.unexplained(), 10 << 20);
        assert_eq!(a.samples, 2);
    }
}
