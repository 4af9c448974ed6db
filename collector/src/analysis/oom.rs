//! Out-of-memory forensics: for each failed allocation that ran out of memory, the request, what
//! was live on the device at that instant by call site, the memory that was free but could not
//! serve it where that is known (unused memory held by pools, physical memory nothing maps), and
//! the growth that led there. Built on the failures and snapshots the replay records
//! (`live::failures`).

use serde::Serialize;

use super::course::GrowthConfig;
use super::fit::Fit;
use super::site::{amounts, name, SiteAmount, SiteName};
use crate::live::{Failure, LiveState, PoolUse, RecentSeries, Totals, MAX_FIRST_OOMS};

/// The recent course of a series before the failure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecentGrowth {
    #[serde(flatten)]
    pub series: RecentSeries,
    /// The line through the recent samples (per step, or per nanosecond on the time axis).
    pub fit: Option<Fit>,
}

impl RecentGrowth {
    fn of(series: &RecentSeries) -> Self {
        RecentGrowth {
            fit: Fit::of(&series.points),
            series: series.clone(),
        }
    }
}

/// One site's recent growth.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteRecentGrowth {
    #[serde(flatten)]
    pub site: SiteName,
    #[serde(flatten)]
    pub growth: RecentGrowth,
}

/// One out-of-memory failure, explained.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomFailure {
    pub failure: Failure,
    /// Who asked.
    pub requester: SiteName,
    /// Device memory live on the device then.
    pub live: Totals,
    /// By call site, largest first (the largest 32; the rest in `other_sites`).
    pub by_site: Vec<SiteAmount>,
    pub other_sites: Totals,
    /// Pools on the device.
    pub pools: Vec<PoolUse>,
    /// Memory pools held but had not in use (an upper bound: pools may have released some).
    pub pool_free_bytes: u64,
    /// Physical memory on the device that no mapping covered.
    pub unmapped_physical_bytes: u64,
    /// The two above: memory allocated on the device but not serving any live allocation.
    pub free_but_unusable_bytes: u64,
    /// Whether that memory alone could have served the request (fragmentation, or a pool that
    /// was not trimmed, rather than too much live memory).
    pub request_fits_in_unusable: bool,
    /// Live bytes on the device over the recent samples, the failure's instant last.
    pub growth: RecentGrowth,
    /// The same for the largest sites.
    pub growth_by_site: Vec<SiteRecentGrowth>,
    /// Whether the device's recent growth alone would alert (steady and above the threshold).
    pub growing: bool,
}

/// Every out-of-memory failure kept.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomReport {
    /// Out-of-memory failures in all.
    pub total: u64,
    /// Failures not explained in detail (the first 8 and the last 8 are).
    pub omitted: u64,
    pub failures: Vec<OomFailure>,
}

/// The out-of-memory failures of `state`, explained.
pub fn ooms(state: &LiveState, config: &GrowthConfig) -> OomReport {
    let log = state.ooms();
    let failures: Vec<OomFailure> = log
        .iter()
        .map(|s| {
            let pool_free_bytes = s
                .pools
                .iter()
                .map(|p| p.high_water_since_trim.saturating_sub(p.in_use))
                .sum::<u64>();
            let unusable = pool_free_bytes + s.unmapped_physical_bytes;
            let growth = RecentGrowth::of(&s.recent);
            let threshold = config
                .device_memory
                .unwrap_or(s.live.bytes + s.failure.request_bytes)
                as f64
                * config.alert_fraction;
            let growing = s.recent.axis == "steps"
                && growth.fit.is_some_and(|f| {
                    f.slope > threshold
                        && f.r2 >= config.min_r2
                        && s.recent.points.len() >= config.min_samples
                });
            OomFailure {
                requester: name(state, s.failure.origin.site),
                failure: s.failure.clone(),
                live: s.live,
                by_site: amounts(state, s.by_site.iter().copied()),
                other_sites: s.other_sites,
                pools: s.pools.clone(),
                pool_free_bytes,
                unmapped_physical_bytes: s.unmapped_physical_bytes,
                free_but_unusable_bytes: unusable,
                request_fits_in_unusable: s.failure.request_bytes > 0
                    && unusable >= s.failure.request_bytes,
                growth,
                growth_by_site: s
                    .recent_by_site
                    .iter()
                    .map(|(site, series)| SiteRecentGrowth {
                        site: name(state, *site),
                        growth: RecentGrowth::of(series),
                    })
                    .collect(),
                growing,
            }
        })
        .collect();
    let kept = failures.len() as u64;
    debug_assert!(kept <= (MAX_FIRST_OOMS * 2) as u64);
    OomReport {
        total: log.total(),
        omitted: log.total() - kept,
        failures,
    }
}
