//! The anomalies the replay records: things the trace says that cannot happen in a correct
//! program fully traced (a free of memory never allocated, a double free, an unmap that cuts a
//! mapping in two, ...). The report built on them is `analysis::integrity`.
//!
//! Each is either a bug in the program or an event the tracer missed; either way the user should
//! see it. Counts are exact; details are kept for the first [`MAX_ANOMALY_DETAILS`]. Anomalies
//! that an event the tracer lost could explain (see `losses`) are counted apart, as doubtful: a
//! lost event never becomes a finding.

use std::collections::BTreeMap;

use serde::Serialize;

use super::objects::{api_name, hex};
use crate::event::Api;

/// How many anomalies are kept in detail; the rest are only counted.
pub(crate) const MAX_ANOMALY_DETAILS: usize = 1000;

/// What kind of impossible thing happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyKind {
    /// A successful free of a pointer never seen allocated (its allocation was missed).
    UnknownFree,
    /// A failed free of a pointer that was freed before.
    DoubleFree,
    /// A failed free of a pointer never seen.
    InvalidFree,
    /// An allocation at an address still live: the earlier one's free was missed.
    AddressReused,
    /// A physical handle created with the value of one still live.
    HandleReused,
    /// An unmap whose range cuts a mapping; nothing was removed.
    PartialUnmap,
    /// An unmap whose range holds no mapping.
    UnmapUnmapped,
    /// A mapping outside every known reservation.
    MapOutsideReservation,
    /// A release, retain or map of a physical handle never seen.
    UnknownHandle,
    /// A release of a physical handle that holds no references.
    HandleOverRelease,
    /// A reservation freed that was never seen.
    UnknownReservation,
    /// A pool destroyed that was never seen created.
    UnknownPool,
    /// An array destroyed that was never seen.
    UnknownArray,
    /// An IPC mapping closed that was never seen opened.
    UnknownIpc,
    /// Host memory unregistered that was never seen registered.
    UnknownHostRegistration,
    /// An `ncclMemFree` of a buffer never seen.
    UnknownNcclBuffer,
    /// A registration dropped that was never seen.
    UnknownRegistration,
    /// A window dropped that was never seen.
    UnknownWindow,
    /// A communicator ended that was never seen created.
    UnknownCommunicator,
}

impl AnomalyKind {
    /// Short name used in reports (the same as its JSON spelling).
    pub const fn name(self) -> &'static str {
        match self {
            AnomalyKind::UnknownFree => "unknown-free",
            AnomalyKind::DoubleFree => "double-free",
            AnomalyKind::InvalidFree => "invalid-free",
            AnomalyKind::AddressReused => "address-reused",
            AnomalyKind::HandleReused => "handle-reused",
            AnomalyKind::PartialUnmap => "partial-unmap",
            AnomalyKind::UnmapUnmapped => "unmap-unmapped",
            AnomalyKind::MapOutsideReservation => "map-outside-reservation",
            AnomalyKind::UnknownHandle => "unknown-handle",
            AnomalyKind::HandleOverRelease => "handle-over-release",
            AnomalyKind::UnknownReservation => "unknown-reservation",
            AnomalyKind::UnknownPool => "unknown-pool",
            AnomalyKind::UnknownArray => "unknown-array",
            AnomalyKind::UnknownIpc => "unknown-ipc",
            AnomalyKind::UnknownHostRegistration => "unknown-host-registration",
            AnomalyKind::UnknownNcclBuffer => "unknown-nccl-buffer",
            AnomalyKind::UnknownRegistration => "unknown-registration",
            AnomalyKind::UnknownWindow => "unknown-window",
            AnomalyKind::UnknownCommunicator => "unknown-communicator",
        }
    }
}

/// One anomaly, located by the event that showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// Sequence number of the event.
    pub seq: u64,
    #[serde(serialize_with = "api_name")]
    pub api: Api,
    pub thread: u32,
    /// The pointer, handle or id the event named.
    #[serde(serialize_with = "hex")]
    pub address: u64,
    /// The other event involved: the earlier free of a double free, the allocation an address
    /// reuse replaced.
    pub related_seq: Option<u64>,
}

/// Counts per kind and the first details, of one class of anomalies.
#[derive(Clone, Debug, Default)]
struct Tally {
    counts: BTreeMap<AnomalyKind, u64>,
    details: Vec<Anomaly>,
}

impl Tally {
    fn record(&mut self, anomaly: Anomaly) {
        *self.counts.entry(anomaly.kind).or_default() += 1;
        if self.details.len() < MAX_ANOMALY_DETAILS {
            self.details.push(anomaly);
        }
    }

    /// Takes back one anomaly of `kind`: the detail that `matches`, if kept. `false` when there
    /// is none of that kind (or, with `must_match`, none kept that matches).
    fn retract(
        &mut self,
        kind: AnomalyKind,
        matches: &dyn Fn(&Anomaly) -> bool,
        must_match: bool,
    ) -> bool {
        let at = self
            .details
            .iter()
            .position(|a| a.kind == kind && matches(a));
        if must_match && at.is_none() {
            return false;
        }
        let Some(count) = self.counts.get_mut(&kind) else {
            return false;
        };
        *count -= 1;
        if *count == 0 {
            self.counts.remove(&kind);
        }
        if let Some(i) = at {
            self.details.remove(i);
        }
        true
    }

    fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

/// Anomaly counts per kind, and the first details; those that lost events could explain apart.
#[derive(Clone, Debug, Default)]
pub struct Anomalies {
    certain: Tally,
    doubtful: Tally,
}

impl Anomalies {
    /// Records an anomaly; `doubtful` when an event the tracer lost could explain it.
    pub(crate) fn record(&mut self, anomaly: Anomaly, doubtful: bool) {
        if doubtful {
            self.doubtful.record(anomaly);
        } else {
            self.certain.record(anomaly);
        }
    }

    /// Takes back an anomaly that a late event explained (the free that arrived after the
    /// allocation reusing its address).
    pub(crate) fn retract(&mut self, kind: AnomalyKind, matches: impl Fn(&Anomaly) -> bool) {
        // Where its detail is kept, else wherever one of its kind is counted.
        let _ = self.doubtful.retract(kind, &matches, true)
            || self.certain.retract(kind, &matches, true)
            || self.certain.retract(kind, &matches, false)
            || self.doubtful.retract(kind, &matches, false);
    }

    /// All anomalies (those lost events could explain are not among them).
    pub fn total(&self) -> u64 {
        self.certain.total()
    }

    /// Anomalies that an event the tracer lost could explain, not counted in [`Anomalies::total`].
    pub fn doubtful(&self) -> u64 {
        self.doubtful.total()
    }

    /// Doubtful anomalies per kind.
    pub fn doubtful_counts(&self) -> impl Iterator<Item = (AnomalyKind, u64)> + '_ {
        self.doubtful.counts.iter().map(|(&k, &n)| (k, n))
    }

    /// The doubtful anomalies kept in detail, in the order they were seen.
    #[cfg(test)]
    pub(crate) fn doubtful_details(&self) -> &[Anomaly] {
        &self.doubtful.details
    }

    /// Anomalies of one kind.
    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.certain.counts.get(&kind).copied().unwrap_or(0)
    }

    /// Counts per kind, for the kinds that occurred.
    pub fn counts(&self) -> impl Iterator<Item = (AnomalyKind, u64)> + '_ {
        self.certain.counts.iter().map(|(&k, &n)| (k, n))
    }

    /// The anomalies kept in detail, in the order they were seen.
    pub fn details(&self) -> &[Anomaly] {
        &self.certain.details
    }

    /// Anomalies counted but not kept in detail.
    pub fn omitted(&self) -> u64 {
        self.total()
            .saturating_sub(self.certain.details.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anomaly(kind: AnomalyKind, seq: u64) -> Anomaly {
        Anomaly {
            kind,
            seq,
            api: Api::CudaFree,
            thread: 1,
            address: 0x10,
            related_seq: None,
        }
    }

    #[test]
    fn details_are_bounded_and_counts_exact() {
        let mut a = Anomalies::default();
        for i in 0..(MAX_ANOMALY_DETAILS as u64 + 5) {
            a.record(anomaly(AnomalyKind::UnknownFree, i), false);
        }
        a.record(anomaly(AnomalyKind::DoubleFree, 9999), false);
        assert_eq!(a.count(AnomalyKind::UnknownFree), 1005);
        assert_eq!(a.total(), 1006);
        assert_eq!(a.details().len(), MAX_ANOMALY_DETAILS);
        assert_eq!(a.omitted(), 6);
    }

    #[test]
    fn retraction_removes_count_and_detail() {
        let mut a = Anomalies::default();
        a.record(anomaly(AnomalyKind::AddressReused, 1), false);
        a.record(anomaly(AnomalyKind::AddressReused, 2), false);
        a.retract(AnomalyKind::AddressReused, |x| x.seq == 1);
        assert_eq!(a.count(AnomalyKind::AddressReused), 1);
        assert_eq!(a.details()[0].seq, 2);
        a.retract(AnomalyKind::AddressReused, |x| x.seq == 2);
        assert_eq!(a.total(), 0);
        a.retract(AnomalyKind::AddressReused, |_| true);
        assert_eq!(a.total(), 0, "retracting nothing is harmless");
    }

    #[test]
    fn doubtful_anomalies_are_apart_and_retracted_where_they_are() {
        let mut a = Anomalies::default();
        a.record(anomaly(AnomalyKind::UnknownFree, 1), false);
        a.record(anomaly(AnomalyKind::UnknownFree, 2), true);
        a.record(anomaly(AnomalyKind::UnknownFree, 3), true);
        assert_eq!((a.total(), a.doubtful()), (1, 2));
        assert_eq!(a.details().len(), 1);
        assert_eq!(a.doubtful_details()[1].seq, 3);
        a.retract(AnomalyKind::UnknownFree, |x| x.seq == 2);
        assert_eq!((a.total(), a.doubtful()), (1, 1));
        a.retract(AnomalyKind::UnknownFree, |x| x.seq == 1);
        assert_eq!((a.total(), a.doubtful()), (0, 1));
        assert_eq!(
            a.doubtful_counts().collect::<Vec<_>>(),
            [(AnomalyKind::UnknownFree, 1)]
        );
    }
}
