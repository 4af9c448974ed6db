//! The median of several profiles (the ranks of a job other than the one under suspicion): per
//! call site and per total, the median of each number, so that one rank can be compared with
//! what the others typically did. A site belongs to the median when more than half of the
//! profiles have it; a profile without it counts as zeros.

use std::collections::{BTreeMap, BTreeSet};

use super::identity::SiteIdentity;
use super::metrics::{median_u64, SiteMetrics};
use super::profile::{ExecutedLines, GrowthUnit, Profile, RunTotals, SiteProfile, StepFacts};

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
        let totals = RunTotals::median(&profiles.iter().map(|p| &p.totals).collect::<Vec<_>>());
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
                    metrics: SiteMetrics::median(&all),
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
            // A median is no run: no device fills at its rates, and no finding names a line.
            fill: None,
            kept_at: Vec::new(),
        }
    }
}
