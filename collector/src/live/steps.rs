//! Where steps come from: the program's step marks, or, in a trace without marks, the repeating
//! allocation pattern of its loop.
//!
//! A training loop makes the same allocations every step: the same call site asks for the same
//! size once per step, at regular intervals. The detector watches device allocations by
//! (call site, size) and, at the end, names the one that recurs most regularly across most of the
//! run; a second replay then uses each of its occurrences as a step boundary. Memory is bounded:
//! at most [`MAX_TOKENS`] distinct (site, size) pairs are followed, the first ones seen (a loop
//! that starts after that many distinct allocations is not detected).

use serde::Serialize;

use super::sites::{SiteId, SiteKey, SiteTable};
use crate::fasthash::FxHashMap;

/// Distinct (site, size) pairs followed.
pub const MAX_TOKENS: usize = 65536;
/// Occurrences needed to call a pattern repeating.
const MIN_OCCURRENCES: u64 = 3;
/// Largest coefficient of variation of the gaps between occurrences of a regular pattern.
const MAX_GAP_VARIATION: f64 = 0.25;
/// Smallest share of the run's allocations that a step pattern must span.
const MIN_SPAN: f64 = 0.5;

/// What marks a step boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum StepSource {
    /// `vramtrace_mark_step` events (the default).
    #[default]
    Marks,
    /// Each successful device allocation of `bytes` at `site`, applied as if a mark came just
    /// before it (from [`StepPattern`], for traces without marks).
    Allocation { site: SiteKey, bytes: u64 },
}

/// A repeating allocation found in a trace without step marks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StepPattern {
    /// The call site whose allocation begins each step.
    pub site: SiteKey,
    /// Its size.
    pub bytes: u64,
    /// Steps found (occurrences of the allocation).
    pub steps: u64,
    /// Sequence number of the first occurrence.
    pub first_seq: u64,
    /// Device allocations between occurrences, on average.
    pub mean_gap: f64,
    /// Standard deviation of the gap over its mean (0: perfectly regular).
    pub gap_variation: f64,
}

impl StepPattern {
    /// The step source that replays with this pattern.
    pub fn source(&self) -> StepSource {
        StepSource::Allocation {
            site: self.site,
            bytes: self.bytes,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Token {
    count: u64,
    first: u64,
    last: u64,
    first_seq: u64,
    gap_sum: u64,
    gap_squares: f64,
}

/// Follows device allocations by (site, size) while the trace has shown no step mark.
#[derive(Debug, Default)]
pub(crate) struct StepDetector {
    tokens: FxHashMap<(SiteId, u64), Token>,
    allocations: u64,
    /// Set when a mark arrives: the program marks its steps, nothing to detect.
    marked: bool,
}

impl StepDetector {
    /// Notes a successful device allocation.
    #[inline]
    pub(crate) fn observe(&mut self, site: SiteId, bytes: u64, seq: u64) {
        if self.marked {
            return;
        }
        let n = self.allocations;
        self.allocations += 1;
        let full = self.tokens.len() >= MAX_TOKENS;
        match self.tokens.get_mut(&(site, bytes)) {
            Some(t) => {
                let gap = n - t.last;
                t.count += 1;
                t.last = n;
                t.gap_sum += gap;
                t.gap_squares += (gap as f64) * (gap as f64);
            }
            None if !full => {
                self.tokens.insert(
                    (site, bytes),
                    Token {
                        count: 1,
                        first: n,
                        last: n,
                        first_seq: seq,
                        gap_sum: 0,
                        gap_squares: 0.0,
                    },
                );
            }
            None => {}
        }
    }

    /// A step mark arrived: detection is not needed.
    pub(crate) fn marked(&mut self) {
        self.marked = true;
        self.tokens = FxHashMap::default();
    }

    /// The allocation that begins each step, if the trace has no marks and one repeats.
    pub(crate) fn detect(&self, sites: &SiteTable) -> Option<StepPattern> {
        if self.marked || self.allocations == 0 {
            return None;
        }
        let span_needed = (self.allocations as f64 * MIN_SPAN).max(1.0);
        let regular: Vec<(&(SiteId, u64), &Token, f64, f64)> = self
            .tokens
            .iter()
            .filter(|(_, t)| t.count >= MIN_OCCURRENCES)
            .filter(|(_, t)| (t.last - t.first) as f64 >= span_needed)
            .filter_map(|(k, t)| {
                let gaps = (t.count - 1) as f64;
                let mean = t.gap_sum as f64 / gaps;
                let variance = (t.gap_squares / gaps - mean * mean).max(0.0);
                let variation = variance.sqrt() / mean;
                (variation <= MAX_GAP_VARIATION).then_some((k, t, mean, variation))
            })
            .collect();
        // Most allocations of a loop happen once per step: the step count is the count most
        // regular patterns share; ties go to more steps.
        let mut by_count: FxHashMap<u64, usize> = FxHashMap::default();
        for (_, t, _, _) in &regular {
            *by_count.entry(t.count).or_default() += 1;
        }
        let (&steps, _) = by_count
            .iter()
            .max_by_key(|&(&count, &tokens)| (tokens, count))?;
        let (&(site, bytes), t, mean_gap, gap_variation) = regular
            .into_iter()
            .filter(|(_, t, _, _)| t.count == steps)
            .min_by_key(|(_, t, _, _)| t.first)?;
        Some(StepPattern {
            site: sites.get(site)?.0,
            bytes,
            steps,
            first_seq: t.first_seq,
            mean_gap,
            gap_variation,
        })
    }
}
