//! The per-tensor view of two runs: what PyTorch's recorder says each Python line holds.
//!
//! With PyTorch's caching allocator the driver sees segments, and a segment is charged to
//! whichever line made the allocator grow, so the driver-level diff can name the wrong line (or
//! a native stack that serves every line). When both traces carry the recorder's history
//! ([`crate::torch`]), the tensors themselves are compared by the line that allocated them:
//! tensor bytes live at the end, and the steady per-step growth of the tensors still live at the
//! end ([`TensorHistory::survivor_growth_at_marks`], judged as the driver's growth is: a line
//! whose survivors pile up step after step grows, the gradients of the last step do not).
//!
//! Lines are paired with the driver diff's own matching ([`Matching`]): a run's lines become
//! the sites of a [`Profile`] of their own (a Python line, no native frames) that shares the
//! driver profile's code objects and executed lines, so files pair and lines map across edits
//! exactly as they do there. One guess is added for this view: lines of one function that hold
//! the very same tensors (bytes and count) are one line moved, when nothing else paired them
//! ([`MatchHow::SameTensors`]).

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde::Serialize;

use super::diff::{Check, Count, Rate, SiteStatus, Thresholds};
use super::identity::{PythonLine, SiteIdentity};
use super::matching::{MatchHow, Matching, SitePair};
use super::profile::{Profile, SiteMetrics, SiteProfile};
use super::sources::SourceSearch;
use crate::analysis::course::{Course, Shape};
use crate::analysis::GrowthConfig;
use crate::torch::{LineGrowth, TensorHistory, TorchView, View};

/// The words for the recorder's view in tables and JSON (`view_name`).
pub const TENSOR_VIEW_NAME: &str = "tensors (PyTorch recorder)";
/// The words for the driver's view.
pub const DRIVER_VIEW_NAME: &str = "driver";

/// The name of a view in words.
pub const fn view_name(view: View) -> &'static str {
    match view {
        View::Driver => DRIVER_VIEW_NAME,
        View::AllocatorTensors => TENSOR_VIEW_NAME,
    }
}

/// One Python line's tensors in one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorLine {
    /// The line (the innermost frame of the program's own code); `null` for tensors without a
    /// stack.
    pub line: Option<PythonLine>,
    /// Tensors and bytes (requested) live at the end.
    pub live_count: u64,
    pub live_bytes: u64,
    /// Of `live_bytes`, those whose line was inferred (allocated on a thread without Python,
    /// such as the autograd engine's).
    pub inferred_bytes: u64,
    /// Bytes per step by which the tensors still live at the end piled up, over the steps the
    /// recorder's window holds whole, when they piled up steadily (else 0).
    pub growth: f64,
}

impl TensorLine {
    /// `train.py:42 in step`, or `(no stack)`.
    pub fn label(&self) -> String {
        self.line
            .as_ref()
            .map_or_else(|| "(no stack)".to_string(), |l| l.to_string())
    }
}

/// One run's tensors in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TensorRun {
    pub live_count: u64,
    pub live_bytes: u64,
    /// The lines' growth added, bytes per step.
    pub growth: f64,
    /// Step marks in the recorder's history, and the steps its window held whole.
    pub steps: u64,
    pub steps_measured: usize,
    /// Whether the recorder's ring was full (older actions lost; tensors live at the end are
    /// all known all the same).
    pub ring_full: bool,
    /// Allocator actions the tensor walk could not match (0 in a consistent snapshot).
    pub unmatched: u64,
}

/// What a run's recorder history says per Python line.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorProfile {
    pub run: TensorRun,
    /// Most live bytes first.
    pub lines: Vec<TensorLine>,
}

impl TensorProfile {
    /// The per-line tensors of a trace's last recorder snapshot; `None` without one.
    pub fn of(view: &TorchView) -> Option<TensorProfile> {
        let snapshot = view.snapshot.as_ref()?;
        let mut history = TensorHistory::new(snapshot);
        let growth = history.survivor_growth_at_marks();
        let steps_measured = growth.first().map_or(0, |g| g.steps_measured);
        let growth_of: BTreeMap<Option<u32>, f64> =
            growth.iter().map(|g| (g.frame, steady_growth(g))).collect();
        // Frames are interned, but two could still name one line: add them up by line.
        let mut by_line: BTreeMap<Option<PythonLine>, TensorLine> = BTreeMap::new();
        for l in history.live_at_end() {
            let line = l.frame.map(|f| {
                let frame = &snapshot.frames[f as usize];
                PythonLine {
                    file: frame.file.clone(),
                    function: frame.function.clone(),
                    line: frame.line,
                }
            });
            let t = by_line.entry(line.clone()).or_insert(TensorLine {
                line,
                live_count: 0,
                live_bytes: 0,
                inferred_bytes: 0,
                growth: 0.0,
            });
            t.live_count += l.count;
            t.live_bytes += l.bytes;
            t.inferred_bytes += l.inferred_bytes;
            t.growth += growth_of.get(&l.frame).copied().unwrap_or(0.0);
        }
        let mut lines: Vec<TensorLine> = by_line.into_values().collect();
        lines.sort_by(|a, b| {
            b.live_bytes
                .cmp(&a.live_bytes)
                .then_with(|| a.line.cmp(&b.line))
        });
        let run = TensorRun {
            live_count: lines.iter().map(|l| l.live_count).sum(),
            live_bytes: lines.iter().map(|l| l.live_bytes).sum(),
            growth: lines.iter().map(|l| l.growth).sum(),
            steps: snapshot.step_marks.len() as u64,
            steps_measured,
            ring_full: snapshot.ring_full(),
            unmatched: history.unmatched(),
        };
        Some(TensorProfile { run, lines })
    }

    /// The lines as sites of a profile the driver diff's matching can pair: each a Python line
    /// without native frames, with `driver`'s code objects, executed lines and main script.
    fn as_profile(&self, driver: &Profile) -> Profile {
        let sites = self
            .lines
            .iter()
            .map(|l| SiteProfile {
                identity: SiteIdentity {
                    python: l.line.clone(),
                    native: Vec::new(),
                },
                label: l.label(),
                module: None,
                python_lines: l.line.iter().cloned().collect(),
                python_inferred: l.inferred_bytes > 0,
                shared_stack: false,
                frames: Vec::new(),
                metrics: SiteMetrics {
                    live_count: l.live_count,
                    live_bytes: l.live_bytes,
                    growth: l.growth,
                    ..SiteMetrics::default()
                },
            })
            .collect();
        Profile {
            sites,
            ..driver.clone()
        }
    }
}

/// The slope of a line's survivors added up step by step over the measured steps, when they
/// pile up steadily ([`Course`]); 0 otherwise.
fn steady_growth(g: &LineGrowth) -> f64 {
    // The measured steps are the last closed ones: every step but the open last one, from the
    // first that starts inside the recorder's window.
    let end = g.per_step.len().saturating_sub(1);
    let first = end.saturating_sub(g.steps_measured);
    let mut held = 0u64;
    let points: Vec<(u64, u64)> = (first..end)
        .map(|i| {
            held += g.per_step[i];
            (i as u64, held)
        })
        .collect();
    let course = Course::of(&points, &GrowthConfig::default());
    if course.shape == Shape::Steady {
        course.slope()
    } else {
        0.0
    }
}

/// B's numbers of a line minus A's (a line missing from a run counts as zeros there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TensorChange {
    pub live_count: i64,
    pub live_bytes: i64,
    pub growth: f64,
}

/// One Python line whose tensors changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorLineDiff {
    /// The line as B names it (as A names it when B lacks it).
    pub label: String,
    /// A's name for it when it differs (a moved line).
    pub a_label: Option<String>,
    pub status: SiteStatus,
    /// How A's and B's lines were paired, and whether that was a guess.
    #[serde(rename = "match")]
    pub how: MatchHow,
    pub guessed: bool,
    pub a: Option<TensorLine>,
    pub b: Option<TensorLine>,
    pub change: TensorChange,
}

impl TensorLineDiff {
    /// How much changed, for ranking: live bytes first, then growth, then the count.
    fn magnitude(&self) -> (u64, u64, u64) {
        (
            self.change.live_bytes.unsigned_abs(),
            self.change.growth.abs().round() as u64,
            self.change.live_count.unsigned_abs(),
        )
    }
}

/// The per-tensor comparison of two runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorDiff {
    /// `allocator-tensors`, and in words `view_name`.
    pub view: View,
    pub view_name: &'static str,
    pub a: TensorRun,
    pub b: TensorRun,
    pub live_bytes: Count,
    pub live_count: Count,
    /// Bytes per step; `null` when a run's recorder window holds no whole step.
    pub growth: Option<Rate>,
    /// The thresholds checked in this view (`tensor_live_bytes`, `tensor_growth_per_step`);
    /// they are also among the verdict's checks.
    pub checks: Vec<Check>,
    /// Whether this view found a change beyond the thresholds (either way: B holding more, or
    /// less): its lines then explain the difference and rank before the driver's call sites.
    pub explains: bool,
    pub matched: usize,
    pub guessed: usize,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub unchanged: usize,
    /// Every line that changed, most changed first.
    pub lines: Vec<TensorLineDiff>,
}

impl TensorDiff {
    /// Compares the tensors of `a` and `b`, whose driver profiles are `pa` and `pb`.
    pub fn of(
        (a, pa): (&TensorProfile, &Profile),
        (b, pb): (&TensorProfile, &Profile),
        sources: &SourceSearch,
        thresholds: &Thresholds,
    ) -> TensorDiff {
        let (ka, kb) = (a.as_profile(pa), b.as_profile(pb));
        let mut matching = Matching::of(&ka, &kb, sources);
        pair_same_tensors(&mut matching, &ka, &kb);
        let (mut matched, mut guessed, mut only_in_a, mut only_in_b, mut unchanged) =
            (0, 0, 0, 0, 0);
        let mut lines = Vec::new();
        for pair in &matching.pairs {
            let la = pair.a.map(|i| &a.lines[i]);
            let lb = pair.b.map(|j| &b.lines[j]);
            match (la, lb) {
                (Some(_), Some(_)) => {
                    matched += 1;
                    guessed += usize::from(pair.guessed);
                }
                (Some(_), None) => only_in_a += 1,
                _ => only_in_b += 1,
            }
            let same = |x: &TensorLine, y: &TensorLine| {
                (x.live_count, x.live_bytes, x.growth) == (y.live_count, y.live_bytes, y.growth)
            };
            if let (Some(x), Some(y)) = (la, lb) {
                if same(x, y) {
                    unchanged += 1;
                    continue;
                }
            }
            lines.push(line_diff(la, lb, pair));
        }
        lines.sort_by(|x, y| {
            Reverse(x.magnitude())
                .cmp(&Reverse(y.magnitude()))
                .then_with(|| x.label.cmp(&y.label))
        });
        let live_bytes = Count::of(a.run.live_bytes, b.run.live_bytes);
        let growth = (a.run.steps_measured > 0 && b.run.steps_measured > 0).then_some(Rate {
            a: a.run.growth,
            b: b.run.growth,
            change: b.run.growth - a.run.growth,
        });
        let mut checks = vec![Check::of(
            "tensor_live_bytes",
            live_bytes.change as f64,
            thresholds.live_bytes,
        )];
        if let Some(g) = growth {
            checks.push(Check::of(
                "tensor_growth_per_step",
                g.change,
                thresholds.growth_per_step,
            ));
        }
        TensorDiff {
            view: View::AllocatorTensors,
            view_name: TENSOR_VIEW_NAME,
            a: a.run,
            b: b.run,
            live_bytes,
            live_count: Count::of(a.run.live_count, b.run.live_count),
            growth,
            // A change beyond a threshold either way: a leak added, or one fixed.
            explains: checks.iter().any(|c| c.change.abs() > c.threshold),
            checks,
            matched,
            guessed,
            only_in_a,
            only_in_b,
            unchanged,
            lines,
        }
    }
}

fn line_diff(a: Option<&TensorLine>, b: Option<&TensorLine>, pair: &SitePair) -> TensorLineDiff {
    let zero = TensorLine {
        line: None,
        live_count: 0,
        live_bytes: 0,
        inferred_bytes: 0,
        growth: 0.0,
    };
    let (x, y) = (a.unwrap_or(&zero), b.unwrap_or(&zero));
    let status = match (x.live_bytes, y.live_bytes) {
        (0, 0) => SiteStatus::Changed,
        (0, _) => SiteStatus::New,
        (_, 0) => SiteStatus::Gone,
        (p, q) if q > p => SiteStatus::Grew,
        (p, q) if q < p => SiteStatus::Shrank,
        _ => SiteStatus::Changed,
    };
    let named = b.or(a).expect("a pair has a line on one side");
    let label = named.label();
    TensorLineDiff {
        a_label: a.map(TensorLine::label).filter(|l| *l != label),
        label,
        status,
        how: pair.how,
        guessed: pair.guessed,
        a: a.cloned(),
        b: b.cloned(),
        change: TensorChange {
            live_count: y.live_count as i64 - x.live_count as i64,
            live_bytes: y.live_bytes as i64 - x.live_bytes as i64,
            growth: y.growth - x.growth,
        },
    }
}

/// Pairs lines still unpaired that lie in one function of one pair of files and hold the very
/// same tensors (count and bytes), when exactly one on each side does: a line that moved where
/// neither the sources nor the function's start could say where to (a script's module-level
/// loop, without its sources).
fn pair_same_tensors(matching: &mut Matching, a: &Profile, b: &Profile) {
    type Key = (String, String, u64, u64);
    let key = |s: &SiteProfile, file: Option<&str>| -> Option<Key> {
        let line = s.identity.python.as_ref()?;
        let m = &s.metrics;
        Some((
            file?.to_string(),
            line.function.clone(),
            m.live_count,
            m.live_bytes,
        ))
    };
    let mut groups: BTreeMap<Key, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for (n, pair) in matching.pairs.iter().enumerate() {
        match (pair.a, pair.b) {
            (Some(i), None) => {
                let s = &a.sites[i];
                let file = s.identity.python.as_ref().map(|l| l.file.as_str());
                if let Some(k) = key(s, file) {
                    groups.entry(k).or_default().0.push(n);
                }
            }
            (None, Some(j)) => {
                let s = &b.sites[j];
                let file = (s.identity.python.as_ref())
                    .and_then(|l| matching.file_of_b(&l.file))
                    .map(|f| f.a.as_str());
                if let Some(k) = key(s, file) {
                    groups.entry(k).or_default().1.push(n);
                }
            }
            _ => {}
        }
    }
    let mut gone = Vec::new();
    for (only_a, only_b) in groups.into_values() {
        if let ([x], [y]) = (&only_a[..], &only_b[..]) {
            let b_site = matching.pairs[*y].b;
            let p = &mut matching.pairs[*x];
            p.b = b_site;
            p.how = MatchHow::SameTensors;
            p.guessed = true;
            gone.push(*y);
        }
    }
    gone.sort_unstable();
    for n in gone.into_iter().rev() {
        matching.pairs.remove(n);
    }
}
