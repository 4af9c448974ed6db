//! Reading the running totals: per holder and call site now, at each holder's peak, and over
//! the sampled steps or time windows. The analyses are built on these.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::failures::{
    OomSnapshot, RecentSeries, SiteHolding, OOM_SERIES_POINTS, OOM_SERIES_SITES, OOM_SITES,
};
use super::ledger::{Holder, PeakPoint, PoolUse};
use super::sites::{ProgramLine, SiteKey};
use super::summary::Totals;
use super::{Failure, LiveState};
use crate::event::StackId;
use crate::ids::SiteId;

/// What the growth series are sampled over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SampleAxis {
    /// One sample at the start of each step; x is the step number.
    Steps,
    /// One sample at the end of each time window; x is nanoseconds since the first event.
    Time,
}

impl SampleAxis {
    /// `steps` or `time`.
    pub const fn name(self) -> &'static str {
        match self {
            SampleAxis::Steps => "steps",
            SampleAxis::Time => "time",
        }
    }
}

/// One holder's live memory now and at its peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HolderState {
    #[serde(flatten)]
    pub holder: Holder,
    pub count: u64,
    pub bytes: u64,
    pub peak: PeakPoint,
}

fn sorted(mut sites: Vec<SiteHolding>) -> Vec<SiteHolding> {
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    sites
}

impl LiveState {
    /// Every holder that ever held memory, devices first.
    pub fn holders(&self) -> Vec<HolderState> {
        let mut v: Vec<HolderState> = self
            .ledger
            .holders
            .iter()
            .map(|h| HolderState {
                holder: h.holder,
                count: h.count,
                bytes: h.bytes,
                peak: h.peak,
            })
            .collect();
        v.sort_by_key(|h| h.holder);
        v
    }

    /// What each call site holds on `holder` now, largest first (sites holding nothing left
    /// out).
    pub fn site_holdings(&self, holder: Holder) -> Vec<SiteHolding> {
        sorted(
            self.ledger
                .entries
                .iter()
                .filter(|e| e.holder == holder && e.count > 0)
                .map(|e| SiteHolding {
                    site: e.site,
                    count: e.count,
                    bytes: e.bytes,
                })
                .collect(),
        )
    }

    /// For each call site that made objects on `holder`: how many it made (since the trace
    /// began, or since the snapshot it was restored from) and how many are live.
    pub fn site_turnover(&self, holder: Holder) -> impl Iterator<Item = (SiteId, u64, u64)> + '_ {
        (self.ledger.entries.iter())
            .filter(move |e| e.holder == holder && e.made > 0)
            .map(|e| (e.site, e.made, e.count))
    }

    /// For each (holder, call site) that had objects live when the state was restored from a
    /// segment's snapshot: how many.
    pub(crate) fn site_restored(&self) -> impl Iterator<Item = (Holder, SiteId, u64)> + '_ {
        (self.ledger.entries.iter())
            .filter(|e| e.restored > 0)
            .map(|e| (e.holder, e.site, e.restored))
    }

    /// What each call site held on `holder` at its peak, largest first.
    pub fn peak_holdings(&self, holder: Holder) -> Vec<SiteHolding> {
        sorted(
            self.ledger
                .entries
                .iter()
                .filter(|e| e.holder == holder)
                .filter_map(|e| {
                    let (bytes, count) = self.ledger.at_peak(e);
                    (count > 0).then_some(SiteHolding {
                        site: e.site,
                        count,
                        bytes,
                    })
                })
                .collect(),
        )
    }

    /// Live bytes on `holder` at each sample point since it first held memory.
    pub fn holder_series(&self, holder: Holder, axis: SampleAxis) -> Vec<(u64, u64)> {
        let grid = self.grid(axis);
        self.ledger
            .holders
            .iter()
            .find(|h| h.holder == holder)
            .map(|h| match axis {
                SampleAxis::Steps => h.steps.read_from_zero(grid, h.bytes),
                SampleAxis::Time => h.windows.read_from_zero(grid, h.bytes),
            })
            .unwrap_or_default()
    }

    /// Live bytes of every (call site, holder) at each sample point since the site first
    /// allocated there.
    pub(crate) fn site_series(
        &self,
        axis: SampleAxis,
    ) -> impl Iterator<Item = (SiteId, Holder, Vec<(u64, u64)>)> + '_ {
        let grid = self.grid(axis);
        self.ledger.entries.iter().map(move |e| {
            let points = match axis {
                SampleAxis::Steps => e.steps.read_from_zero(grid, e.bytes),
                SampleAxis::Time => e.windows.read_from_zero(grid, e.bytes),
            };
            (e.site, e.holder, points)
        })
    }

    /// Sample points taken (ticks), and ticks between kept points.
    pub(crate) fn samples(&self, axis: SampleAxis) -> (u64, u64) {
        let g = self.grid(axis);
        (g.ticks(), g.stride())
    }

    /// Nanoseconds between the kept time samples.
    pub(crate) fn sample_width_ns(&self) -> u64 {
        self.ledger.windows.stride() * super::ledger::BASE_WINDOW_NS
    }

    fn grid(&self, axis: SampleAxis) -> &super::series::Grid {
        match axis {
            SampleAxis::Steps => &self.ledger.steps,
            SampleAxis::Time => &self.ledger.windows,
        }
    }

    /// The key of call site `site`, and the return address of the first call seen there.
    pub fn site(&self, site: SiteId) -> Option<(SiteKey, u64)> {
        self.sites.get(site)
    }

    /// The sites of program line `line` on every path of the program to it.
    pub(crate) fn sites_at_line(&self, line: ProgramLine) -> &[SiteId] {
        self.sites.at_line(line)
    }

    /// The Python stack of the first call at `site` that had one, and whether calls there came
    /// from more than one Python stack (`None`: no call there had Python frames).
    pub fn site_python(&self, site: SiteId) -> Option<(StackId, bool)> {
        self.sites.python(site)
    }

    /// The site of a call from `caller` with native stack `stack` and Python stack `py_stack`,
    /// if a call reached it.
    pub(crate) fn site_of_call(
        &self,
        caller: u64,
        stack: StackId,
        py_stack: StackId,
    ) -> Option<SiteId> {
        self.sites.site_of(&self.python, caller, stack, py_stack)
    }

    /// The entry point of the first call made at `site`.
    pub(crate) fn site_api(&self, site: SiteId) -> Option<crate::event::Api> {
        self.sites.first_api(site)
    }

    /// Call sites seen.
    pub fn site_count(&self) -> usize {
        self.sites.len()
    }

    /// Memory pools that ever served an allocation: in use now, and the most they held.
    pub(crate) fn pool_usage(&self) -> Vec<PoolUse> {
        self.ledger.pools()
    }

    /// Per physical handle on `device` (all devices when `None`): its bytes, and the bytes of
    /// it that mappings cover (capped at its size).
    pub(crate) fn physical_coverage(&self, device: Option<i32>) -> Vec<(u64, u64, u64)> {
        let mut mapped: FxHashMap<u64, u64> = FxHashMap::default();
        for m in self.vmm.mappings.values() {
            *mapped.entry(m.handle).or_default() += m.size;
        }
        self.vmm
            .handles
            .values()
            .filter(|h| device.is_none_or(|d| h.device == d))
            .map(|h| {
                let covered = mapped.get(&h.handle).copied().unwrap_or(0).min(h.size);
                (h.handle, h.size, covered)
            })
            .collect()
    }

    /// The snapshot of the live set at an out-of-memory `failure`.
    pub(super) fn oom_snapshot(&self, failure: Failure) -> OomSnapshot {
        let holder = Holder::Device {
            device: failure.device,
        };
        let (bytes, count) = self.ledger.holder_totals(holder);
        let mut by_site = self.site_holdings(holder);
        let mut other_sites = Totals::default();
        for s in by_site.iter().skip(OOM_SITES) {
            other_sites.count += s.count;
            other_sites.bytes += s.bytes;
        }
        by_site.truncate(OOM_SITES);
        let pools = self
            .ledger
            .pools()
            .into_iter()
            .filter(|p| p.device == failure.device)
            .collect();
        let unmapped_physical_bytes = self
            .physical_coverage(Some(failure.device))
            .iter()
            .map(|&(_, size, covered)| size - covered)
            .sum();
        let axis = if self.ledger.steps.ticks() >= 2 {
            SampleAxis::Steps
        } else {
            SampleAxis::Time
        };
        let recent = |mut points: Vec<(u64, u64)>, now: u64| {
            let x_now = match axis {
                SampleAxis::Steps => self.steps,
                SampleAxis::Time => failure.time_ns.saturating_sub(self.first_time_ns()),
            };
            points.push((x_now, now));
            let skip = points.len().saturating_sub(OOM_SERIES_POINTS);
            RecentSeries {
                axis: axis.name(),
                points: points.split_off(skip),
            }
        };
        let recent_total = recent(self.holder_series(holder, axis), bytes);
        let grid = self.grid(axis);
        let recent_by_site = by_site
            .iter()
            .take(OOM_SERIES_SITES)
            .filter_map(|s| {
                let e = self
                    .ledger
                    .entries
                    .iter()
                    .find(|e| e.site == s.site && e.holder == holder)?;
                let points = match axis {
                    SampleAxis::Steps => e.steps.read_from_zero(grid, e.bytes),
                    SampleAxis::Time => e.windows.read_from_zero(grid, e.bytes),
                };
                Some((s.site, recent(points, e.bytes)))
            })
            .collect();
        OomSnapshot {
            failure,
            holder,
            live: Totals { count, bytes },
            by_site,
            other_sites,
            pools,
            unmapped_physical_bytes,
            recent: recent_total,
            recent_by_site,
        }
    }

    /// Time of the last event applied.
    pub fn last_time_ns(&self) -> u64 {
        self.ledger.time_ns()
    }

    /// Time of the first event applied (time windows count from it).
    pub fn first_time_ns(&self) -> u64 {
        self.ledger.window_origin().unwrap_or(0)
    }

    /// Time of the trace's first event: of the first applied, or, for a state restored from a
    /// snapshot, of the first event of the trace it was taken from.
    pub fn trace_start_ns(&self) -> u64 {
        match self.restored {
            Some(r) if r.first_time_ns > 0 => r.first_time_ns,
            // A snapshot written without the live state knows none: the first event read.
            _ => self.first_time_ns(),
        }
    }
}
