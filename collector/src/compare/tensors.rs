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

use std::borrow::Cow;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::identity::{PythonLine, SiteIdentity};
use super::matching::{joined_notes, MatchHow, Matching};
use super::metrics::{median_u64, record, Count, Measures, Rate, SiteMetrics};
use super::profile::{GrowthUnit, Profile, SiteProfile};
use super::row::{most_changed_first, Row};
use super::sources::SourceSearch;
use super::verdict::{new_growth, Check, NewGrowth, Thresholds, TENSOR_VIEW_NAME};
use crate::analysis::site::one_place_per_line;
use crate::analysis::{Growth, LineMeaning, Shape};
use crate::live::Holder;
use crate::torch::{
    AllocatorSnapshot, LineGrowth, SnapshotFrame, TensorHistory, TorchView, View, VIEW_NAME,
};

record! {
    /// What one Python line's tensors are in one run.
    pub struct TensorMetrics {
        /// Tensors and bytes (requested) live at the end.
        live_count,
        live_bytes,
        /// Of `live_bytes`, those whose line was inferred (allocated on a thread without Python,
        /// such as the autograd engine's).
        inferred_bytes,
        ;
        /// Bytes per step by which the tensors still live at the end piled up, over the steps
        /// the recorder's window holds whole, when they piled up steadily (else 0).
        growth,
        /// Of `growth`, what was judged sure ([`Growth::confident`]).
        confident_growth,
    }
    /// B's numbers of a line minus A's (a line missing from a run counts as zeros there).
    pub struct TensorChange;
}

/// One Python line's tensors in one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorLine {
    /// The line (the innermost frame of the program's own code); `null` for tensors without a
    /// stack.
    pub line: Option<PythonLine>,
    /// Where the program reaches the line on several paths, the line of this one that names
    /// it ([`SiteIdentity::path`]: the first the others do not share).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<PythonLine>,
    /// The program's lines that called it, innermost first.
    #[serde(skip)]
    pub path: Vec<PythonLine>,
    #[serde(flatten)]
    pub metrics: TensorMetrics,
}

impl TensorLine {
    /// `train.py:42 in step`, `helper.py:7 in make via train.py:14 in <module>`, or `(no
    /// stack)`.
    pub fn label(&self) -> String {
        match (&self.line, &self.via) {
            (Some(line), Some(via)) => format!("{line} via {via}"),
            (Some(line), None) => line.to_string(),
            (None, _) => "(no stack)".to_string(),
        }
    }
}

impl Measures for TensorLine {
    type Change = TensorChange;

    fn change(a: Option<&Self>, b: Option<&Self>) -> TensorChange {
        let zero = TensorMetrics::default();
        let of = |l: Option<&Self>| l.map_or(zero, |l| l.metrics);
        TensorMetrics::change(&of(a), &of(b))
    }

    fn held(&self) -> u64 {
        self.metrics.live_bytes
    }

    fn growth(&self) -> f64 {
        self.metrics.growth
    }

    fn confident_growth(&self) -> f64 {
        self.metrics.confident_growth
    }

    /// Live bytes first, then growth, then the count.
    fn magnitude(c: &TensorChange) -> Vec<u64> {
        vec![
            c.live_bytes.unsigned_abs(),
            c.growth.abs().round() as u64,
            c.live_count.unsigned_abs(),
        ]
    }

    fn live_change(c: &TensorChange) -> i64 {
        c.live_bytes
    }

    fn growth_change(c: &TensorChange) -> f64 {
        c.confident_growth
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
    /// The per-line tensors of a trace's last recorder snapshot, their growth judged as the
    /// trace's `growth` judges every series ([`Growth::judge`]); `None` without a snapshot.
    pub fn of(view: &TorchView, growth: &Growth) -> Option<TensorProfile> {
        let snapshot = view.snapshot.as_ref()?;
        let mut history = TensorHistory::new(snapshot);
        let per_line = history.survivor_growth_at_marks();
        let steps_measured = per_line.first().map_or(0, |g| g.steps_measured);
        let growth_of: BTreeMap<Option<u32>, (f64, f64)> = (per_line.iter())
            .map(|g| (g.frame, steady_growth(g, snapshot, growth)))
            .collect();
        // Frames are interned, but two could still name one line and path: add them up. A
        // line's path is named as the snapshot names it, among all the paths the recorder saw
        // reach the line (those whose tensors are gone included).
        type Named = (Option<PythonLine>, TensorMetrics);
        let mut by_line: BTreeMap<(Option<PythonLine>, Vec<PythonLine>), Named> = BTreeMap::new();
        for l in history.live_at_end() {
            let (place, via) = l.frame.map_or_else(Default::default, |f| {
                let frame = &snapshot.frames[f as usize];
                let path = snapshot.program_path(f).into_iter();
                let via = frame.via.as_deref().map(python_line);
                (
                    (Some(python_line(frame)), path.map(python_line).collect()),
                    via,
                )
            });
            let (rate, sure) = growth_of.get(&l.frame).copied().unwrap_or_default();
            let named = by_line.entry(place).or_default();
            named.0 = via;
            named.1.add(&TensorMetrics {
                live_count: l.count,
                live_bytes: l.bytes,
                inferred_bytes: l.inferred_bytes,
                growth: rate,
                confident_growth: sure,
            });
        }
        let lines = (by_line.into_iter())
            .map(|((line, path), (via, metrics))| TensorLine {
                line,
                via,
                path,
                metrics,
            })
            .collect();
        let run = TensorRun {
            steps: snapshot.step_marks.len() as u64,
            steps_measured,
            ring_full: snapshot.ring_full(),
            unmatched: history.unmatched(),
            ..TensorRun::default()
        };
        Some(TensorProfile { run, lines }.sorted())
    }

    /// The lines most live bytes first, and the run's totals added up from them.
    fn sorted(mut self) -> Self {
        self.lines = one_line_where_every_path_grows(self.lines);
        self.lines.sort_by(|a, b| {
            (b.metrics.live_bytes)
                .cmp(&a.metrics.live_bytes)
                .then_with(|| (&a.line, &a.path).cmp(&(&b.line, &b.path)))
        });
        let sum = |f: fn(&TensorMetrics) -> u64| self.lines.iter().map(|l| f(&l.metrics)).sum();
        self.run.live_count = sum(|m| m.live_count);
        self.run.live_bytes = sum(|m| m.live_bytes);
        self.run.growth = self.lines.iter().map(|l| l.metrics.growth).sum();
        self
    }

    /// The median of several runs' tensors (the ranks of a job other than the one under
    /// suspicion), as [`Profile::median`] takes the median of their call sites: a line belongs
    /// to it when more than half of the runs have it, a run without it counting as zeros.
    pub fn median(runs: &[&TensorProfile]) -> TensorProfile {
        let n = runs.len();
        type Place<'a> = (&'a Option<PythonLine>, &'a [PythonLine]);
        let mut by_line: BTreeMap<Place<'_>, (&TensorLine, Vec<TensorMetrics>)> = BTreeMap::new();
        for r in runs {
            for l in &r.lines {
                let e = by_line.entry((&l.line, &l.path)).or_insert((l, Vec::new()));
                e.1.push(l.metrics);
            }
        }
        let lines = (by_line.into_values())
            .filter(|(_, all)| 2 * all.len() > n)
            .map(|(first, mut all)| {
                all.resize(n, TensorMetrics::default());
                TensorLine {
                    metrics: TensorMetrics::median(&all),
                    ..first.clone()
                }
            })
            .collect();
        let of = |f: fn(&TensorRun) -> u64| median_u64(runs.iter().map(|r| f(&r.run)).collect());
        let run = TensorRun {
            steps: of(|r| r.steps),
            steps_measured: of(|r| r.steps_measured as u64) as usize,
            ring_full: runs.iter().any(|r| r.run.ring_full),
            unmatched: of(|r| r.unmatched),
            ..TensorRun::default()
        };
        TensorProfile { run, lines }.sorted()
    }

    /// These lines with the paths of those at `whole` (indexes) dropped, each made one line
    /// with the others of its line that lost theirs (`Matching::whole_lines`); itself when
    /// there are none.
    fn without_paths(&self, whole: &BTreeSet<usize>) -> Cow<'_, TensorProfile> {
        if whole.is_empty() {
            return Cow::Borrowed(self);
        }
        let lines = without_paths(self.lines.clone(), whole);
        Cow::Owned(TensorProfile { lines, ..*self }.sorted())
    }

    /// The lines as sites of a profile the driver diff's matching can pair: each a Python line
    /// without native frames, with `driver`'s code objects, executed lines and main script.
    fn as_profile(&self, driver: &Profile) -> Profile {
        let sites = (self.lines.iter())
            .map(|l| SiteProfile {
                identity: SiteIdentity {
                    python: l.line.clone(),
                    path: l.path.clone(),
                    native: Vec::new(),
                },
                label: l.label(),
                module: None,
                python_lines: l.line.iter().cloned().collect(),
                python_inferred: l.metrics.inferred_bytes > 0,
                shared_stack: false,
                line_means: LineMeaning::Keeps,
                frames: Vec::new(),
                metrics: SiteMetrics {
                    live_count: l.metrics.live_count,
                    live_bytes: l.metrics.live_bytes,
                    growth: l.metrics.growth,
                    confident_growth: l.metrics.confident_growth,
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

/// A recorder frame as a [`PythonLine`].
fn python_line(frame: &SnapshotFrame) -> PythonLine {
    PythonLine {
        file: frame.file.clone(),
        function: frame.function.clone(),
        line: frame.line,
    }
}

/// A line whose tensors pile up on two of its paths or more keeps them itself (a helper that
/// caches what it returns): its paths are one line again, as the report makes them one place
/// ([`one_place_per_line`]).
fn one_line_where_every_path_grows(lines: Vec<TensorLine>) -> Vec<TensorLine> {
    let whole =
        one_place_per_line((lines.iter()).map(|l| (l.line.clone(), l.metrics.growth > 0.0)));
    if whole.is_empty() {
        return lines;
    }
    without_paths(lines, &whole)
}

/// `lines` with the paths of those at `whole` (indexes) dropped: each one line with the others
/// of its line that lost theirs, their numbers added.
fn without_paths(lines: Vec<TensorLine>, whole: &BTreeSet<usize>) -> Vec<TensorLine> {
    let mut merged: BTreeMap<(Option<PythonLine>, Vec<PythonLine>), TensorLine> = BTreeMap::new();
    for (i, mut l) in lines.into_iter().enumerate() {
        if whole.contains(&i) {
            (l.path, l.via) = (Vec::new(), None);
        }
        match merged.entry((l.line.clone(), l.path.clone())) {
            Entry::Occupied(mut e) => e.get_mut().metrics.add(&l.metrics),
            Entry::Vacant(e) => {
                e.insert(l);
            }
        }
    }
    merged.into_values().collect()
}

/// The rate of a line's survivors added up step by step over the measured steps when they pile
/// up steadily, and the same when that growth is sure; 0 otherwise. Judged on the trace's
/// first device, at the trace's step numbers (a step mark `k` is sample `k - 1`).
fn steady_growth(g: &LineGrowth, snapshot: &AllocatorSnapshot, growth: &Growth) -> (f64, f64) {
    // The measured steps are the last closed ones: every step but the open last one, from the
    // first that starts inside the recorder's window.
    let end = g.per_step.len().saturating_sub(1);
    let first = end.saturating_sub(g.steps_measured);
    let mut held = 0u64;
    let points: Vec<(u64, u64)> = (first..end)
        .map(|i| {
            held += g.per_step[i];
            let x = snapshot.step_marks.get(i).map_or(i as u64, |m| m.step);
            (x.saturating_sub(1), held)
        })
        .collect();
    let device = (growth.holders.iter())
        .map(|h| h.holder)
        .find(|h| matches!(h, Holder::Device { .. }))
        .unwrap_or(Holder::Device { device: 0 });
    let course = growth.judge_in_view(crate::torch::VIEW, device, points);
    match course.shape {
        Shape::Steady if growth.confident(&course) => (course.rate, course.rate),
        Shape::Steady => (course.rate, 0.0),
        _ => (0.0, 0.0),
    }
}

/// What else names a line of the per-tensor view: nothing but its label.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LinePlace {}

/// One Python line whose tensors changed.
pub type TensorLineDiff = Row<TensorLine, LinePlace>;

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
    /// The thresholds checked in this view (`tensor_live_bytes`, `tensor_growth_per_step`,
    /// `tensor_new_growth`); they are also among the verdict's checks.
    pub checks: Vec<Check>,
    /// The lines that grow steadily in B where they do not in A.
    pub new_growth: Vec<NewGrowth>,
    /// Whether this view found a change beyond the thresholds (either way: B holding more, or
    /// less), or a new growth that is a regression: its lines then explain the difference and
    /// rank before the driver's call sites.
    pub explains: bool,
    pub matched: usize,
    pub guessed: usize,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub unchanged: usize,
    /// Every line that changed, most changed first.
    pub lines: Vec<TensorLineDiff>,
    /// What the verdict's notes say of this view (lines whose paths were compared as one).
    #[serde(skip)]
    pub notes: Vec<String>,
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
        let (whole_a, whole_b) = Matching::whole_lines(&ka, &kb, sources);
        let what = "tensor lines (PyTorch recorder)";
        let notes = joined_notes(what, (&ka, &whole_a), (&kb, &whole_b));
        let (a, b) = (a.without_paths(&whole_a), b.without_paths(&whole_b));
        let (a, b): (&TensorProfile, &TensorProfile) = (&a, &b);
        let (ka, kb) = if whole_a.is_empty() && whole_b.is_empty() {
            (ka, kb)
        } else {
            (a.as_profile(pa), b.as_profile(pb))
        };
        let mut matching = Matching::of(&ka, &kb, sources);
        pair_same_tensors(&mut matching, &ka, &kb);
        let (mut matched, mut guessed, mut only_in_a, mut only_in_b, mut unchanged) =
            (0, 0, 0, 0, 0);
        let mut lines = Vec::new();
        for pair in &matching.pairs {
            let la = pair.a.map(|i| &a.lines[i]);
            let lb = pair.b.map(|j| &b.lines[j]);
            match (la, lb) {
                (Some(x), Some(y)) => {
                    matched += 1;
                    guessed += usize::from(pair.guessed);
                    if x.metrics == y.metrics {
                        unchanged += 1;
                        continue;
                    }
                }
                (Some(_), None) => only_in_a += 1,
                _ => only_in_b += 1,
            }
            let named = |l: Option<&TensorLine>| l.map(TensorLine::label);
            lines.push(Row::of(
                (la, named(la)),
                (lb, named(lb)),
                pair,
                LinePlace::default(),
            ));
        }
        most_changed_first(&mut lines);
        let live_bytes = Count::of(a.run.live_bytes, b.run.live_bytes);
        let growth = (a.run.steps_measured > 0 && b.run.steps_measured > 0)
            .then(|| Rate::of(a.run.growth, b.run.growth));
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
        let (check, new_growth) = new_growth(
            (View::AllocatorTensors, "tensor_new_growth"),
            (&lines, |_: &TensorLineDiff| {
                (Some(VIEW_NAME.to_string()), LineMeaning::Keeps, false)
            }),
            growth,
            (GrowthUnit::Step, pb.fill.as_ref()),
            thresholds,
        );
        checks.push(check);
        TensorDiff {
            view: View::AllocatorTensors,
            view_name: TENSOR_VIEW_NAME,
            a: a.run,
            b: b.run,
            live_bytes,
            live_count: Count::of(a.run.live_count, b.run.live_count),
            growth,
            // A change beyond a threshold either way (a leak added, or one fixed), or a new
            // growth.
            explains: checks
                .iter()
                .any(|c| c.change.abs() > c.threshold || c.exceeded),
            checks,
            new_growth,
            matched,
            guessed,
            only_in_a,
            only_in_b,
            unchanged,
            lines,
            notes,
        }
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
