//! What changed from run A to run B: totals, the live bytes of aligned steps, every call site
//! that changed ranked by how much, the source lines that changed, and whether B regressed
//! beyond the thresholds.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde::Serialize;

use super::identity::PythonLine;
use super::matching::{FilePair, MatchHow, Matching};
use super::profile::{GrowthUnit, Profile, RunTotals, SiteMetrics, SiteProfile};
use super::sources::{LineChangeKind, SourceSearch};
use super::tensors::{view_name, TensorDiff, TensorLineDiff, TensorProfile};
use crate::symbols::StackFrame;
use crate::torch::View;

/// How much B may exceed A before the difference is a regression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Thresholds {
    /// Device bytes live at the end.
    pub live_bytes: u64,
    /// The devices' peaks.
    pub peak_bytes: u64,
    /// Sustained growth, bytes per step (compared only when both runs have steps).
    pub growth_per_step: u64,
    /// Orphans (memory whose owner is gone), counted.
    pub orphans: u64,
    /// Device bytes held by orphans.
    pub orphan_bytes: u64,
    /// Failed calls.
    pub failures: u64,
}

impl Default for Thresholds {
    /// Above the noise of a caching allocator between two runs of one program (a segment or
    /// two), below any leak that matters.
    fn default() -> Self {
        Thresholds {
            live_bytes: 64 << 20,
            peak_bytes: 256 << 20,
            growth_per_step: 1 << 20,
            orphans: 0,
            orphan_bytes: 0,
            failures: 0,
        }
    }
}

/// A count in A and in B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Count {
    pub a: u64,
    pub b: u64,
    pub change: i64,
}

impl Count {
    pub(crate) fn of(a: u64, b: u64) -> Self {
        Count {
            a,
            b,
            change: signed(b) - signed(a),
        }
    }
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A rate in A and in B.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Rate {
    pub a: f64,
    pub b: f64,
    pub change: f64,
}

/// The totals of both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TotalsDiff {
    pub live_bytes: Count,
    pub live_count: Count,
    pub host_bytes: Count,
    pub peak_bytes: Count,
    /// Bytes per unit (`unit`); `null` when one run has steps and the other not.
    pub growth: Option<Rate>,
    pub growth_unit: Option<GrowthUnit>,
    pub allocations: Count,
    pub allocated_bytes: Count,
    pub orphans: Count,
    pub orphan_bytes: Count,
    pub failures: Count,
    pub out_of_memory: Count,
    pub communicators: Count,
    pub communicator_bytes: Count,
}

impl TotalsDiff {
    fn of(a: &Profile, b: &Profile) -> Self {
        let (x, y): (&RunTotals, &RunTotals) = (&a.totals, &b.totals);
        let same_unit = a.steps.unit == b.steps.unit;
        TotalsDiff {
            live_bytes: Count::of(x.live_bytes, y.live_bytes),
            live_count: Count::of(x.live_count, y.live_count),
            host_bytes: Count::of(x.host_bytes, y.host_bytes),
            peak_bytes: Count::of(x.peak_bytes, y.peak_bytes),
            growth: same_unit.then_some(Rate {
                a: x.growth,
                b: y.growth,
                change: y.growth - x.growth,
            }),
            growth_unit: same_unit.then_some(a.steps.unit),
            allocations: Count::of(x.allocations, y.allocations),
            allocated_bytes: Count::of(x.allocated_bytes, y.allocated_bytes),
            orphans: Count::of(x.orphans, y.orphans),
            orphan_bytes: Count::of(x.orphan_bytes, y.orphan_bytes),
            failures: Count::of(x.failures, y.failures),
            out_of_memory: Count::of(x.out_of_memory, y.out_of_memory),
            communicators: Count::of(x.communicators, y.communicators),
            communicator_bytes: Count::of(x.communicator_bytes, y.communicator_bytes),
        }
    }
}

/// One threshold checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// `live_bytes`, `peak_bytes`, `growth_per_step`, `orphans`, `orphan_bytes` or `failures`
    /// (the driver's view); `tensor_live_bytes` or `tensor_growth_per_step` (PyTorch's
    /// recorder).
    pub metric: &'static str,
    /// B's value minus A's.
    pub change: f64,
    pub threshold: f64,
    /// Whether the change is above the threshold.
    pub exceeded: bool,
}

impl Check {
    pub(crate) fn of(metric: &'static str, change: f64, threshold: u64) -> Self {
        Check {
            metric,
            change,
            threshold: threshold as f64,
            exceeded: change > threshold as f64,
        }
    }
}

/// Whether B regressed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub regression: bool,
    /// Every threshold that could be checked.
    pub checks: Vec<Check>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
}

/// Device bytes live at one step boundary in both runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StepRow {
    pub step: u64,
    pub a: u64,
    pub b: u64,
    pub change: i64,
}

/// Step N of A against step N of B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepAlignment {
    /// Whether both runs have steps (else `rows` is empty).
    pub aligned: bool,
    pub a_steps: u64,
    pub b_steps: u64,
    /// The first sampled step whose live bytes differ.
    pub first_difference: Option<u64>,
    /// Every step both runs sampled (up to 256 each; long runs keep every n-th step).
    pub rows: Vec<StepRow>,
}

impl StepAlignment {
    fn of(a: &Profile, b: &Profile) -> Self {
        let aligned = a.steps.unit == GrowthUnit::Step && b.steps.unit == GrowthUnit::Step;
        let rows: Vec<StepRow> = if aligned {
            let of_b: BTreeMap<u64, u64> = b.step_series.iter().copied().collect();
            (a.step_series.iter())
                .filter_map(|&(step, x)| {
                    of_b.get(&step).map(|&y| StepRow {
                        step,
                        a: x,
                        b: y,
                        change: signed(y) - signed(x),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        StepAlignment {
            aligned,
            a_steps: a.steps.steps,
            b_steps: b.steps.steps,
            first_difference: rows.iter().find(|r| r.change != 0).map(|r| r.step),
            rows,
        }
    }
}

/// What happened to a site's live memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SiteStatus {
    /// A held nothing live there at the end, B does.
    New,
    /// A held memory live there at the end, B holds nothing.
    Gone,
    Grew,
    Shrank,
    /// The same live memory; other numbers changed.
    Changed,
}

/// B's numbers minus A's (a site missing from a run counts as zeros there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MetricsChange {
    pub live_count: i64,
    pub live_bytes: i64,
    pub host_bytes: i64,
    pub peak_bytes: i64,
    pub growth: f64,
    pub allocations: i64,
    pub allocated_bytes: i64,
    pub orphans: i64,
    pub orphan_bytes: i64,
    pub failures: i64,
    pub out_of_memory: i64,
}

impl MetricsChange {
    fn of(a: &SiteMetrics, b: &SiteMetrics) -> Self {
        let d = |x: u64, y: u64| signed(y) - signed(x);
        MetricsChange {
            live_count: d(a.live_count, b.live_count),
            live_bytes: d(a.live_bytes, b.live_bytes),
            host_bytes: d(a.host_bytes, b.host_bytes),
            peak_bytes: d(a.peak_bytes, b.peak_bytes),
            growth: b.growth - a.growth,
            allocations: d(a.allocations, b.allocations),
            allocated_bytes: d(a.allocated_bytes, b.allocated_bytes),
            orphans: d(a.orphans, b.orphans),
            orphan_bytes: d(a.orphan_bytes, b.orphan_bytes),
            failures: d(a.failures, b.failures),
            out_of_memory: d(a.out_of_memory, b.out_of_memory),
        }
    }

    /// How much changed, for ranking: live memory first, then the peak, growth, allocations,
    /// orphans and failures.
    fn magnitude(&self) -> (u64, u64, u64, u64, u64, u64, u64) {
        (
            (self.live_bytes + self.host_bytes).unsigned_abs(),
            self.peak_bytes.unsigned_abs(),
            self.growth.abs().round() as u64,
            self.allocated_bytes.unsigned_abs(),
            self.allocations.unsigned_abs(),
            self.orphan_bytes.unsigned_abs(),
            self.failures.unsigned_abs(),
        )
    }
}

/// One call site that changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteDiff {
    /// The site in words, as B names it (as A names it when B lacks it).
    pub label: String,
    /// A's name for it when it differs (a moved Python line).
    pub a_label: Option<String>,
    pub status: SiteStatus,
    /// How A's and B's sites were paired, and whether that was a guess.
    #[serde(rename = "match")]
    pub how: MatchHow,
    pub guessed: bool,
    pub module: Option<String>,
    /// The Python lines of its calls in A and in B.
    pub a_python: Vec<PythonLine>,
    pub b_python: Vec<PythonLine>,
    /// Whether some of those lines were inferred (a thread without Python).
    pub python_inferred: bool,
    pub a: Option<SiteMetrics>,
    pub b: Option<SiteMetrics>,
    pub change: MetricsChange,
    /// The stack of its largest call (B's, else A's).
    pub frames: Vec<StackFrame>,
}

/// A code line that differs between A's and B's version of a Python file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceChange {
    /// The file as the run that has the line recorded it.
    pub file: String,
    pub kind: LineChangeKind,
    pub line: u32,
    pub text: String,
    /// Whether the line lies in a `for` or `while` loop (it would run every step).
    pub in_loop: bool,
    /// Whether the line lies in a function the run executed, before the last line of it seen
    /// running.
    pub executed: bool,
}

/// The comparison of two runs.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub verdict: Verdict,
    pub totals: TotalsDiff,
    pub steps: StepAlignment,
    /// Sites paired (exactly or by a guess), sites only in A, only in B, and paired sites that
    /// did not change.
    pub matched: usize,
    pub guessed: usize,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub unchanged: usize,
    /// Every site that changed, most changed first.
    pub sites: Vec<SiteDiff>,
    /// The Python files of both runs taken for versions of one file.
    pub files: Vec<FilePair>,
    /// Code lines added in B or removed from A, in the paired files whose sources were read.
    pub source_changes: Vec<SourceChange>,
    /// When B regressed: the lines B added in code it ran, most likely first (see
    /// [`suspects`]). A guess from the sources.
    pub suspects: Vec<SourceChange>,
    /// The per-tensor view, when both runs carry PyTorch's recorder history
    /// ([`Diff::with_tensors`]).
    pub tensors: Option<TensorDiff>,
    /// The difference ranked first over both views.
    pub top: Option<TopDifference>,
}

/// The difference ranked first, and the view it was seen in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopDifference {
    /// `driver` or `allocator-tensors`, and in words `view_name`.
    pub view: View,
    pub view_name: &'static str,
    /// The call site (driver) or Python line (tensors) as B names it.
    pub label: String,
    pub status: SiteStatus,
    /// B's live bytes there minus A's (device and host bytes for a driver site).
    pub live_bytes: i64,
    /// B's growth there minus A's, in the view's unit (bytes per step for tensors).
    pub growth: f64,
    /// Whether its pairing across the runs was a guess.
    pub guessed: bool,
}

impl TopDifference {
    fn of_site(s: &SiteDiff) -> Self {
        TopDifference {
            view: View::Driver,
            view_name: view_name(View::Driver),
            label: s.label.clone(),
            status: s.status,
            live_bytes: s.change.live_bytes + s.change.host_bytes,
            growth: s.change.growth,
            guessed: s.guessed,
        }
    }

    fn of_line(l: &TensorLineDiff) -> Self {
        TopDifference {
            view: View::AllocatorTensors,
            view_name: view_name(View::AllocatorTensors),
            label: l.label.clone(),
            status: l.status,
            live_bytes: l.change.live_bytes,
            growth: l.change.growth,
            guessed: l.guessed,
        }
    }
}

impl Diff {
    /// Compares profile `a` with profile `b`, whose sites `matching` paired.
    pub fn of(a: &Profile, b: &Profile, matching: Matching, thresholds: &Thresholds) -> Self {
        let totals = TotalsDiff::of(a, b);
        let steps = StepAlignment::of(a, b);
        let verdict = verdict(a, b, &totals, thresholds);
        let mut sites = Vec::new();
        let (mut matched, mut guessed, mut only_in_a, mut only_in_b, mut unchanged) =
            (0, 0, 0, 0, 0);
        for pair in &matching.pairs {
            let sa = pair.a.map(|i| &a.sites[i]);
            let sb = pair.b.map(|j| &b.sites[j]);
            match (sa, sb) {
                (Some(_), Some(_)) => {
                    matched += 1;
                    guessed += usize::from(pair.guessed);
                }
                (Some(_), None) => only_in_a += 1,
                _ => only_in_b += 1,
            }
            let (ma, mb) = (
                sa.map(|s| s.metrics).unwrap_or_default(),
                sb.map(|s| s.metrics).unwrap_or_default(),
            );
            if sa.is_some() && sb.is_some() && ma == mb {
                unchanged += 1;
                continue;
            }
            sites.push(site_diff(sa, sb, pair.how, pair.guessed));
        }
        sites.sort_by(|x, y| {
            Reverse(x.change.magnitude())
                .cmp(&Reverse(y.change.magnitude()))
                .then_with(|| x.label.cmp(&y.label))
        });
        let source_changes = source_changes(a, b, &matching.files);
        let suspects = if verdict.regression {
            suspects(b, &sites, &[], &source_changes)
        } else {
            Vec::new()
        };
        let top = sites.first().map(TopDifference::of_site);
        Diff {
            verdict,
            totals,
            steps,
            matched,
            guessed,
            only_in_a,
            only_in_b,
            unchanged,
            sites,
            files: matching.files,
            source_changes,
            suspects,
            tensors: None,
            top,
        }
    }

    /// Adds the per-tensor view of PyTorch's recorder (`a` and `b`, each when its trace carries
    /// the history; `pa` and `pb` the runs' profiles): compared when both have it, its
    /// thresholds joined to the verdict, its lines ranked first when they explain the change.
    pub fn with_tensors(
        mut self,
        (a, pa): (Option<&TensorProfile>, &Profile),
        (b, pb): (Option<&TensorProfile>, &Profile),
        sources: &SourceSearch,
        thresholds: &Thresholds,
    ) -> Self {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (None, None) => return self,
            (x, _) => {
                let lacking = if x.is_none() { "A" } else { "B" };
                self.verdict.notes.push(format!(
                    "tensors (PyTorch recorder) not compared: run {lacking} has no recorder \
                     history (run it with `vramtrace run` and PyTorch's caching allocator)"
                ));
                return self;
            }
        };
        let tensors = TensorDiff::of((a, pa), (b, pb), sources, thresholds);
        self.verdict.checks.extend(tensors.checks.iter().cloned());
        self.verdict.regression |= tensors.checks.iter().any(|c| c.exceeded);
        if tensors.explains || self.top.is_none() {
            if let Some(first) = tensors.lines.first() {
                self.top = Some(TopDifference::of_line(first));
            }
        }
        if self.verdict.regression {
            let lines: Vec<PythonLine> = (tensors.lines.iter())
                .filter_map(|l| l.b.as_ref().and_then(|t| t.line.clone()))
                .collect();
            self.suspects = suspects(pb, &self.sites, &lines, &self.source_changes);
        }
        self.tensors = Some(tensors);
        self
    }
}

fn site_diff(
    a: Option<&SiteProfile>,
    b: Option<&SiteProfile>,
    how: MatchHow,
    guessed: bool,
) -> SiteDiff {
    let (ma, mb) = (a.map(|s| s.metrics), b.map(|s| s.metrics));
    let change = MetricsChange::of(&ma.unwrap_or_default(), &mb.unwrap_or_default());
    let held = |m: Option<SiteMetrics>| m.map_or(0, |m| m.live_bytes + m.host_bytes);
    let (ha, hb) = (held(ma), held(mb));
    let status = match (ha, hb) {
        (0, 0) => SiteStatus::Changed,
        (0, _) => SiteStatus::New,
        (_, 0) => SiteStatus::Gone,
        (x, y) if y > x => SiteStatus::Grew,
        (x, y) if y < x => SiteStatus::Shrank,
        _ => SiteStatus::Changed,
    };
    let named = b.or(a).expect("a pair has a site on one side");
    SiteDiff {
        label: named.label.clone(),
        a_label: a
            .filter(|s| s.label != named.label)
            .map(|s| s.label.clone()),
        status,
        how,
        guessed,
        module: named.module.clone(),
        a_python: a.map(|s| s.python_lines.clone()).unwrap_or_default(),
        b_python: b.map(|s| s.python_lines.clone()).unwrap_or_default(),
        python_inferred: a.is_some_and(|s| s.python_inferred)
            || b.is_some_and(|s| s.python_inferred),
        a: ma,
        b: mb,
        change,
        frames: named.frames.clone(),
    }
}

fn verdict(a: &Profile, b: &Profile, t: &TotalsDiff, th: &Thresholds) -> Verdict {
    let check = Check::of;
    let mut checks = vec![
        check("live_bytes", t.live_bytes.change as f64, th.live_bytes),
        check("peak_bytes", t.peak_bytes.change as f64, th.peak_bytes),
    ];
    let mut notes = Vec::new();
    match (a.steps.unit, b.steps.unit, t.growth) {
        (GrowthUnit::Step, GrowthUnit::Step, Some(g)) => {
            checks.push(check("growth_per_step", g.change, th.growth_per_step));
        }
        (GrowthUnit::Step, GrowthUnit::Step, None) => {}
        (x, y, _) => notes.push(format!(
            "growth per step not compared: {} (mark steps with vramtrace_mark_step(), or name \
             an NVTX range with VRAMTRACE_STEP_RANGE)",
            match (x, y) {
                (GrowthUnit::Second, GrowthUnit::Second) => "neither run has steps",
                (GrowthUnit::Second, _) => "run A has no steps",
                _ => "run B has no steps",
            }
        )),
    }
    checks.push(check("orphans", t.orphans.change as f64, th.orphans));
    checks.push(check(
        "orphan_bytes",
        t.orphan_bytes.change as f64,
        th.orphan_bytes,
    ));
    checks.push(check("failures", t.failures.change as f64, th.failures));
    Verdict {
        regression: checks.iter().any(|c| c.exceeded),
        checks,
        notes,
    }
}

/// The lines B added in code it ran, most likely cause of a regression first: a line a changed
/// site of B allocated at, or whose tensors changed (`tensor_lines`: the trace saw it); then lines in loops (they run every step); then
/// lines in the functions where changed sites allocated (a caching allocator hands a leaked
/// tensor memory it already holds and asks the driver for more later, on another line of the
/// same code, or on another thread); then the rest, in file order.
fn suspects(
    b: &Profile,
    sites: &[SiteDiff],
    tensor_lines: &[PythonLine],
    changes: &[SourceChange],
) -> Vec<SourceChange> {
    let lines: Vec<&PythonLine> = (sites.iter())
        .flat_map(|s| s.b_python.iter())
        .chain(tensor_lines)
        .collect();
    let rank = |c: &SourceChange| {
        let at = |l: &&PythonLine| l.file == c.file && l.line == c.line;
        if lines.iter().any(at) {
            return 0;
        }
        if c.in_loop {
            return 1;
        }
        let function = (b.codes.iter())
            .filter(|k| k.file == c.file && k.first_line <= c.line)
            .max_by_key(|k| k.first_line)
            .map(|k| k.function.as_str());
        let near = |l: &&PythonLine| l.file == c.file && Some(l.function.as_str()) == function;
        if lines.iter().any(near) {
            2
        } else {
            3
        }
    };
    let mut s: Vec<SourceChange> = (changes.iter())
        .filter(|c| c.kind == LineChangeKind::Added && c.executed)
        .cloned()
        .collect();
    s.sort_by_key(|c| (rank(c), c.file.clone(), c.line));
    s
}

/// The code lines that differ in the file pairs whose sources were read.
fn source_changes(a: &Profile, b: &Profile, files: &[FilePair]) -> Vec<SourceChange> {
    let mut out = Vec::new();
    for pair in files {
        let (Some(map), Some((sa, sb))) = (&pair.map, &pair.sources) else {
            continue;
        };
        for c in &map.changes {
            let (run, file, source) = match c.kind {
                LineChangeKind::Added => (b, &pair.b, sb),
                LineChangeKind::Removed => (a, &pair.a, sa),
            };
            if !source.is_code(c.line) {
                continue;
            }
            out.push(SourceChange {
                file: file.clone(),
                kind: c.kind,
                line: c.line,
                text: c.text.trim().to_string(),
                in_loop: source.in_loop(c.line),
                executed: executed(run, file, c.line),
            });
        }
    }
    out
}

/// Whether `line` of `file` lies in a function `run` executed: after the start of a code
/// object of the file that ran, and not after the last line of it seen running.
fn executed(run: &Profile, file: &str, line: u32) -> bool {
    (run.codes.iter())
        .filter(|c| c.file == file && c.first_line <= line)
        .any(|c| {
            run.executed
                .get(&(c.file.clone(), c.function.clone()))
                .and_then(|lines| lines.last())
                .is_some_and(|&last| line <= last)
        })
}
