//! Out-of-memory snapshots: at each failed allocation that ran out of memory, what was live on
//! that device by call site, what the pools there held unused, physical memory nothing mapped,
//! and the recent course of live bytes.
//!
//! A snapshot costs a pass over the call sites, so only the first [`MAX_FIRST_OOMS`] and the last
//! [`MAX_RECENT_OOMS`] are kept (a run that fails the same way ten thousand times in a retry loop
//! is explained by its first and its last failure); all are counted.

use std::collections::VecDeque;

use serde::Serialize;

use super::failure::Failure;
use super::ledger::{Holder, PoolUse};
use super::sites::SiteId;
use super::summary::Totals;

/// Out-of-memory snapshots kept from the start of the trace.
pub const MAX_FIRST_OOMS: usize = 8;
/// Out-of-memory snapshots kept from the end of the trace.
pub const MAX_RECENT_OOMS: usize = 8;
/// Call sites listed in a snapshot; the rest are summed.
pub const OOM_SITES: usize = 32;
/// Call sites whose recent series a snapshot keeps.
pub const OOM_SERIES_SITES: usize = 8;
/// Recent sample points a snapshot keeps per series.
pub const OOM_SERIES_POINTS: usize = 32;

/// What one call site held at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SiteHolding {
    pub site: SiteId,
    pub count: u64,
    pub bytes: u64,
}

/// Recent samples of live bytes: `(x, bytes)` with x a step number or nanoseconds since the
/// first event, the last point being the moment of the snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecentSeries {
    /// `steps` or `time`.
    pub axis: &'static str,
    pub points: Vec<(u64, u64)>,
}

/// The live set at one out-of-memory failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OomSnapshot {
    pub failure: Failure,
    pub holder: Holder,
    /// Live device memory on the failing device.
    pub live: Totals,
    /// The largest call sites there (at most `OOM_SITES`, 32).
    pub by_site: Vec<SiteHolding>,
    /// The rest.
    pub other_sites: Totals,
    /// Pools on the device.
    pub pools: Vec<PoolUse>,
    /// Bytes of physical handles on the device that no mapping covers.
    pub unmapped_physical_bytes: u64,
    /// Live bytes on the device over the recent samples.
    pub recent: RecentSeries,
    /// The same for the largest sites (at most `OOM_SERIES_SITES`, 8).
    pub recent_by_site: Vec<(SiteId, RecentSeries)>,
}

/// The snapshots of a trace.
#[derive(Clone, Debug, Default)]
pub struct OomLog {
    first: Vec<OomSnapshot>,
    recent: VecDeque<OomSnapshot>,
    total: u64,
}

impl OomLog {
    /// Whether the next failure gets a snapshot worth taking (always: the last ones are kept).
    pub(crate) fn record(&mut self, snapshot: OomSnapshot) {
        self.total += 1;
        if self.first.len() < MAX_FIRST_OOMS {
            self.first.push(snapshot);
        } else {
            if self.recent.len() == MAX_RECENT_OOMS {
                self.recent.pop_front();
            }
            self.recent.push_back(snapshot);
        }
    }

    /// The snapshots kept, in trace order.
    pub fn iter(&self) -> impl Iterator<Item = &OomSnapshot> {
        self.first.iter().chain(self.recent.iter())
    }

    /// Out-of-memory failures in all.
    pub fn total(&self) -> u64 {
        self.total
    }
}
