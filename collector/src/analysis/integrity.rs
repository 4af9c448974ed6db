//! How far the trace can be trusted: the anomalies the replay recorded (`live::anomalies`: what
//! cannot happen in a correct program fully traced — double frees, frees of unknown pointers,
//! unmapping what was never mapped, ...) beside the tracer's own losses (events dropped when its
//! channel was full, entry points handed out without a wrapper). Anomalies that a lost event could
//! explain are counted apart (`uncertain`), not among the anomalies.

use serde::Serialize;

use crate::live::{Anomaly, AnomalyKind, LiveState};

/// A count per anomaly kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KindCount {
    pub kind: AnomalyKind,
    pub count: u64,
}

/// Anomalies and losses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AnomalyReport {
    /// Events the tracer dropped; `null` when the trace holds no tracer counters.
    pub dropped_events: Option<u64>,
    /// Events lost in all: the gaps in the sequence numbers read, and what the counters say was
    /// lost after the last event.
    pub lost_events: u64,
    /// Of those, lost after the last event read.
    pub lost_at_the_end: u64,
    /// Driver entry points handed out untraced.
    pub untraced_entry_points: u64,
    /// Anomalies in all.
    pub total: u64,
    /// Per kind, for the kinds seen.
    pub by_kind: Vec<KindCount>,
    /// Double frees (each with the earlier free in `related_seq`), in trace order.
    pub double_frees: Vec<Anomaly>,
    /// The first anomalies in detail, in trace order (1000 at most).
    pub details: Vec<Anomaly>,
    /// Anomalies left out of the above: an event the tracer lost could explain each.
    pub uncertain: u64,
    /// Those per kind.
    pub uncertain_by_kind: Vec<KindCount>,
}

impl AnomalyReport {
    /// Anomalies of one kind.
    pub fn count(&self, kind: AnomalyKind) -> u64 {
        self.by_kind
            .iter()
            .find(|k| k.kind == kind)
            .map_or(0, |k| k.count)
    }
}

/// The anomalies of `state`.
pub fn anomalies(state: &LiveState) -> AnomalyReport {
    let a = state.anomalies();
    AnomalyReport {
        dropped_events: state.stats().map(|s| s.dropped),
        lost_events: state.lost_events(),
        lost_at_the_end: state.lost_at_the_end(),
        untraced_entry_points: state.lookups_total(),
        total: a.total(),
        by_kind: a
            .counts()
            .map(|(kind, count)| KindCount { kind, count })
            .collect(),
        double_frees: a
            .details()
            .iter()
            .filter(|x| x.kind == AnomalyKind::DoubleFree)
            .cloned()
            .collect(),
        details: a.details().to_vec(),
        uncertain: a.doubtful(),
        uncertain_by_kind: a
            .doubtful_counts()
            .map(|(kind, count)| KindCount { kind, count })
            .collect(),
    }
}
