//! Peaks: each holder's highest live point, when it was reached, and what each call site held
//! then. Kept exactly while replaying (see `live::ledger`), so no second pass is needed.

use serde::Serialize;

use super::site::{amounts, SiteAmount};
use crate::live::{Holder, LiveState, PeakPoint};

/// One holder's peak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HolderPeak {
    #[serde(flatten)]
    pub holder: Holder,
    /// The peak: bytes, objects, and the event after which it was reached.
    pub peak: PeakPoint,
    /// Live bytes now, for comparison.
    pub now_bytes: u64,
    /// What each call site held at the peak, largest first.
    pub by_site: Vec<SiteAmount>,
}

/// Every holder's peak.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Peaks {
    /// Devices first, then host memory.
    pub holders: Vec<HolderPeak>,
    /// When the replay started from a segment's snapshot (rotation deleted the segments before
    /// it, or `--last`/`--since` read from there): the events before it. The peaks are the
    /// highest points from there on; one before is not known.
    pub from_event: Option<u64>,
}

impl Peaks {
    /// The peak of the device holding the most memory at its peak.
    pub fn highest_device(&self) -> Option<&HolderPeak> {
        self.holders
            .iter()
            .filter(|h| matches!(h.holder, Holder::Device { .. }))
            .max_by_key(|h| (h.peak.bytes, std::cmp::Reverse(h.peak.event)))
    }
}

/// The peaks of `state`.
pub fn peaks(state: &LiveState) -> Peaks {
    Peaks {
        holders: state
            .holders()
            .into_iter()
            .filter(|h| h.peak.event > 0)
            .map(|h| HolderPeak {
                holder: h.holder,
                peak: h.peak,
                now_bytes: h.bytes,
                by_site: amounts(state, state.peak_holdings(h.holder)),
            })
            .collect(),
        from_event: state.restored().map(|r| r.events),
    }
}
