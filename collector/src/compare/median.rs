//! The median of several profiles (the ranks of a job other than the one under suspicion): per
//! call site and per total, the median of each number, so that one rank can be compared with
//! what the others typically did. A site belongs to the median when more than half of the
//! profiles have it; a profile without it counts as zeros.

use std::collections::{BTreeMap, BTreeSet};

use super::identity::SiteIdentity;
use super::profile::{
    ExecutedLines, GrowthUnit, Profile, RunTotals, SiteMetrics, SiteProfile, StepFacts,
};

/// The median of integers (the mean of the two middle ones, rounded down, for an even count);
/// 0 for none.
fn median_u64(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    match v.len() {
        0 => 0,
        n if n % 2 == 1 => v[n / 2],
        n => ((u128::from(v[n / 2 - 1]) + u128::from(v[n / 2])) / 2) as u64,
    }
}

/// The median of reals (the mean of the two middle ones for an even count); 0 for none.
pub fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn median_metrics(all: &[SiteMetrics]) -> SiteMetrics {
    let u = |f: fn(&SiteMetrics) -> u64| median_u64(all.iter().map(f).collect());
    SiteMetrics {
        live_count: u(|m| m.live_count),
        live_bytes: u(|m| m.live_bytes),
        host_bytes: u(|m| m.host_bytes),
        peak_bytes: u(|m| m.peak_bytes),
        growth: median_f64(all.iter().map(|m| m.growth).collect()),
        allocations: u(|m| m.allocations),
        allocated_bytes: u(|m| m.allocated_bytes),
        orphans: u(|m| m.orphans),
        orphan_bytes: u(|m| m.orphan_bytes),
        failures: u(|m| m.failures),
        out_of_memory: u(|m| m.out_of_memory),
    }
}

fn median_totals(all: &[&RunTotals]) -> RunTotals {
    let u = |f: fn(&RunTotals) -> u64| median_u64(all.iter().map(|t| f(t)).collect());
    RunTotals {
        live_count: u(|t| t.live_count),
        live_bytes: u(|t| t.live_bytes),
        host_bytes: u(|t| t.host_bytes),
        peak_bytes: u(|t| t.peak_bytes),
        growth: median_f64(all.iter().map(|t| t.growth).collect()),
        allocations: u(|t| t.allocations),
        allocated_bytes: u(|t| t.allocated_bytes),
        orphans: u(|t| t.orphans),
        orphan_bytes: u(|t| t.orphan_bytes),
        failures: u(|t| t.failures),
        out_of_memory: u(|t| t.out_of_memory),
        communicators: u(|t| t.communicators),
        communicator_bytes: u(|t| t.communicator_bytes),
    }
}

impl Profile {
    /// The median of `profiles` (at least one).
    pub fn median(profiles: &[&Profile]) -> Profile {
        let n = profiles.len();
        let unit = if profiles.iter().all(|p| p.steps.unit == GrowthUnit::Step) {
            GrowthUnit::Step
        } else {
            GrowthUnit::Second
        };
        let steps = StepFacts {
            source: profiles.first().map_or("none", |p| p.steps.source),
            steps: median_u64(profiles.iter().map(|p| p.steps.steps).collect()),
            unit,
        };
        let totals = median_totals(&profiles.iter().map(|p| &p.totals).collect::<Vec<_>>());
        let mut at_step: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        if unit == GrowthUnit::Step {
            for p in profiles {
                for &(step, bytes) in &p.step_series {
                    at_step.entry(step).or_default().push(bytes);
                }
            }
        }
        let step_series = at_step
            .into_iter()
            .map(|(step, v)| (step, median_u64(v)))
            .collect();
        // Each site with every profile's numbers (zeros where a profile lacks it).
        let mut sites: BTreeMap<&SiteIdentity, (&SiteProfile, Vec<SiteMetrics>, usize)> =
            BTreeMap::new();
        for p in profiles {
            for s in &p.sites {
                let e = sites.entry(&s.identity).or_insert((s, Vec::new(), 0));
                e.1.push(s.metrics);
                e.2 += 1;
            }
        }
        let mut median_sites: Vec<SiteProfile> = sites
            .into_values()
            .filter(|(_, _, seen)| 2 * seen > n)
            .map(|(first, mut all, _)| {
                all.resize(n, SiteMetrics::default());
                SiteProfile {
                    metrics: median_metrics(&all),
                    ..first.clone()
                }
            })
            .collect();
        median_sites.sort_by(|a, b| {
            (b.metrics.live_bytes, b.metrics.host_bytes)
                .cmp(&(a.metrics.live_bytes, a.metrics.host_bytes))
                .then_with(|| a.identity.cmp(&b.identity))
        });
        let codes: BTreeSet<_> = profiles
            .iter()
            .flat_map(|p| p.codes.iter().cloned())
            .collect();
        let mut executed = ExecutedLines::new();
        for p in profiles {
            for (k, lines) in &p.executed {
                executed.entry(k.clone()).or_default().extend(lines);
            }
        }
        let mut scripts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in profiles.iter().filter_map(|p| p.main_script.as_deref()) {
            *scripts.entry(m).or_default() += 1;
        }
        let main_script = scripts
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
            .map(|(m, _)| m.to_string());
        Profile {
            steps,
            totals,
            step_series,
            sites: median_sites,
            codes: codes.into_iter().collect(),
            executed,
            main_script,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_take_the_middle_value() {
        assert_eq!(median_u64(vec![5, 1, 3]), 3);
        assert_eq!(median_u64(vec![4, 1, 3, 2]), 2);
        assert_eq!(median_u64(vec![]), 0);
        assert_eq!(median_u64(vec![u64::MAX, u64::MAX]), u64::MAX);
        assert_eq!(median_f64(vec![1.0, 4.0, 2.0, 3.0]), 2.5);
    }
}
