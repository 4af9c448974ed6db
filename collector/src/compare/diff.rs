//! What changed from run A to run B: totals, the live bytes of aligned steps, every call site
//! that changed ranked by how much, the source lines that changed, and whether B regressed
//! ([`verdict`](super::verdict)).

use std::collections::BTreeMap;

use serde::Serialize;

use super::identity::PythonLine;
use super::matching::{joined_notes, FilePair, MatchHow, Matching};
use super::metrics::Measures;
use super::metrics::{signed, Count, MetricsSides, Rate, SiteMetrics};
use super::profile::{GrowthUnit, Profile, SiteProfile};
use super::row::{changed_order, most_changed_first, Row, SiteStatus};
use super::sources::{LineChangeKind, SourceSearch};
use super::tensors::{TensorDiff, TensorLineDiff, TensorProfile};
use super::verdict::view_name;
use super::verdict::{new_growth, Check, Thresholds, Verdict};
use crate::analysis::{LineMeaning, Role};
use crate::symbols::StackFrame;
use crate::torch::View;

/// The totals of both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TotalsDiff {
    /// Each count of the runs' totals, A's and B's.
    #[serde(flatten)]
    pub counts: MetricsSides,
    /// Bytes per unit (`unit`); `null` when one run has steps and the other not, or their steps
    /// are counted differently ([`growth_comparable`]).
    pub growth: Option<Rate>,
    pub growth_unit: Option<GrowthUnit>,
    pub communicators: Count,
    pub communicator_bytes: Count,
}

impl TotalsDiff {
    fn of(a: &Profile, b: &Profile) -> Self {
        let (x, y) = (&a.totals, &b.totals);
        let same_unit = growth_comparable(a, b);
        TotalsDiff {
            counts: SiteMetrics::side_by_side(&x.metrics, &y.metrics),
            growth: same_unit.then(|| Rate::of(x.metrics.growth, y.metrics.growth)),
            growth_unit: same_unit.then_some(a.steps.unit),
            communicators: Count::of(x.communicators, y.communicators),
            communicator_bytes: Count::of(x.communicator_bytes, y.communicator_bytes),
        }
    }
}

/// Whether growth per unit means the same in both runs: the same unit, and for steps, steps
/// counted the same way (a repeating allocation may recur once in several marked steps, or
/// several times in one).
fn growth_comparable(a: &Profile, b: &Profile) -> bool {
    a.steps.unit == b.steps.unit
        && (a.steps.unit != GrowthUnit::Step || a.steps.source == b.steps.source)
}

/// Device bytes live at one step boundary in both runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StepRow {
    /// The step whose start this row is (steps counted as begun, as everywhere).
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
        let aligned = a.steps.unit == GrowthUnit::Step && growth_comparable(a, b);
        let rows: Vec<StepRow> = if aligned {
            let of_b: BTreeMap<u64, u64> = b.step_series.iter().copied().collect();
            // Sample k is taken as step k + 1 begins (the live set at the end of step k): a row
            // is named by the step it is the start of, the moment `replay --at 'step N'` shows.
            (a.step_series.iter())
                .filter_map(|&(sample, x)| {
                    of_b.get(&sample).map(|&y| StepRow {
                        step: sample + 1,
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

/// What else names a call site of the driver's view, beside its label.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SitePlace {
    pub module: Option<String>,
    /// The Python lines of its calls in A and in B.
    pub a_python: Vec<PythonLine>,
    pub b_python: Vec<PythonLine>,
    /// Whether some of those lines were inferred (a thread without Python).
    pub python_inferred: bool,
    /// Whether the line allocated what stays live (`keeps`), or is where a framework's
    /// allocator asked the driver for memory (`asked`: what keeps it may be another line).
    pub line_means: LineMeaning,
    /// The stack of its largest call (B's, else A's).
    pub frames: Vec<StackFrame>,
}

impl SitePlace {
    fn of(a: Option<&SiteProfile>, b: Option<&SiteProfile>) -> Self {
        let named = b.or(a).expect("a pair has a site on one side");
        SitePlace {
            module: named.module.clone(),
            a_python: a.map(|s| s.python_lines.clone()).unwrap_or_default(),
            b_python: b.map(|s| s.python_lines.clone()).unwrap_or_default(),
            python_inferred: a.is_some_and(|s| s.python_inferred)
                || b.is_some_and(|s| s.python_inferred),
            line_means: named.line_means,
            frames: named.frames.clone(),
        }
    }
}

/// One call site that changed.
pub type SiteDiff = Row<SiteMetrics, SitePlace>;

/// The call sites of one place that changed — a Python line (or a native function) and the
/// module that asked, as the verdict and the report name it — taken together with its sites
/// that did not: one row per place, where a line reached by several native paths is several
/// sites.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlaceDiff {
    /// Its sites' numbers summed (their peaks too: an upper bound, should its paths peak at
    /// different moments), its status from the sums; paired, placed and with the stack of its
    /// most changed site.
    #[serde(flatten)]
    pub row: SiteDiff,
    /// How many sites (native paths to the place) it holds, changed or not.
    pub paths: usize,
}

/// `sites` (most changed first) grouped by place, most changed place first; `same`, the sites
/// that did not change, add their numbers to a place that did (its totals are the place's, as
/// the report's), and make none of their own.
fn places(sites: &[SiteDiff], same: &[SiteDiff]) -> Vec<PlaceDiff> {
    let mut out: Vec<PlaceDiff> = Vec::new();
    let mut index: BTreeMap<(&str, Option<&str>), usize> = BTreeMap::new();
    let sum = |x: &mut Option<SiteMetrics>, y: &Option<SiteMetrics>| match (x.as_mut(), y) {
        (Some(x), Some(y)) => x.add(y),
        (None, Some(y)) => *x = Some(*y),
        _ => {}
    };
    let unpaired = |h: MatchHow| matches!(h, MatchHow::OnlyInA | MatchHow::OnlyInB);
    for s in sites {
        let key = (s.label.as_str(), s.place.module.as_deref());
        match index.get(&key) {
            Some(&i) => {
                let p = &mut out[i];
                sum(&mut p.row.a, &s.a);
                sum(&mut p.row.b, &s.b);
                p.paths += 1;
                // A place one of whose paths is in both runs is paired as that path is, not
                // "only in B" after its most changed path.
                if unpaired(p.row.how) && !unpaired(s.how) {
                    (p.row.how, p.row.guessed) = (s.how, s.guessed);
                }
            }
            None => {
                index.insert(key, out.len());
                out.push(PlaceDiff {
                    row: s.clone(),
                    paths: 1,
                });
            }
        }
    }
    for s in same {
        if let Some(&i) = index.get(&(s.label.as_str(), s.place.module.as_deref())) {
            let p = &mut out[i];
            sum(&mut p.row.a, &s.a);
            sum(&mut p.row.b, &s.b);
            p.paths += 1;
            // In both runs (it did not change): the place is paired as it is.
            if unpaired(p.row.how) {
                (p.row.how, p.row.guessed) = (s.how, s.guessed);
            }
        }
    }
    for p in out.iter_mut().filter(|p| p.paths > 1) {
        let (a, b) = (p.row.a.as_ref(), p.row.b.as_ref());
        p.row.change = <SiteMetrics as Measures>::change(a, b);
        p.row.status = SiteStatus::of(a.map(SiteMetrics::held), b.map(SiteMetrics::held));
    }
    out.sort_by(|x, y| changed_order(&x.row, &y.row));
    out
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
    /// The same sites by place, most changed first (what the text's table lists).
    pub places: Vec<PlaceDiff>,
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
    /// The difference ranked first over both views; when a new growth makes B a regression,
    /// the first such growth's row.
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
    /// What holds it, as the report names it beside a label: the module that asked (driver),
    /// or `PyTorch tensors`.
    pub owner: Option<String>,
    /// Whether its line allocated what stays live (`keeps`: every line of the per-tensor view),
    /// or is where a framework's allocator asked the driver for memory (`asked`).
    pub line_means: LineMeaning,
    pub status: SiteStatus,
    /// B's live bytes there minus A's (device and host bytes for a driver site).
    pub live_bytes: i64,
    /// B's growth there minus A's, in the view's unit (bytes per step for tensors).
    pub growth: f64,
    /// Whether its pairing across the runs was a guess.
    pub guessed: bool,
    /// B's orphans there minus A's, and their device bytes (driver's view; 0 for a line of
    /// tensors).
    pub orphans: i64,
    pub orphan_bytes: i64,
    /// Where its line is where the allocator asked (`asked`) and only B has PyTorch's recorder:
    /// the line B's own findings found keeping the tensors, as B's report names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_at: Option<String>,
}

impl TopDifference {
    fn of<M: Measures, P>(
        r: &Row<M, P>,
        view: View,
        owner: Option<String>,
        line_means: LineMeaning,
    ) -> Self {
        TopDifference {
            view,
            view_name: view_name(view),
            label: r.label.clone(),
            owner,
            line_means,
            status: r.status,
            live_bytes: M::live_change(&r.change),
            growth: M::growth_change(&r.change),
            guessed: r.guessed,
            orphans: 0,
            orphan_bytes: 0,
            kept_at: None,
        }
    }

    fn of_site(s: &SiteDiff) -> Self {
        let owner = s.place.module.clone();
        TopDifference {
            orphans: s.change.orphans,
            orphan_bytes: s.change.orphan_bytes,
            ..TopDifference::of(s, View::Driver, owner, s.place.line_means)
        }
    }
}

impl Diff {
    /// Compares profile `a` with profile `b`: their sites paired ([`Matching::of`]) once a line
    /// one run says as one place and the other as one place per path is one place in both
    /// ([`Matching::whole_lines`]).
    pub fn compare(
        a: &Profile,
        b: &Profile,
        sources: &SourceSearch,
        thresholds: &Thresholds,
    ) -> Self {
        let (whole_a, whole_b) = Matching::whole_lines(a, b, sources);
        let notes = joined_notes("call sites", (a, &whole_a), (b, &whole_b));
        let (a, b) = (a.without_paths(&whole_a), b.without_paths(&whole_b));
        let mut diff = Diff::of(&a, &b, Matching::of(&a, &b, sources), thresholds);
        diff.verdict.notes.extend(notes);
        diff
    }

    /// Compares profile `a` with profile `b`, whose sites `matching` paired.
    pub fn of(a: &Profile, b: &Profile, matching: Matching, thresholds: &Thresholds) -> Self {
        let totals = TotalsDiff::of(a, b);
        let steps = StepAlignment::of(a, b);
        let (mut sites, mut same) = (Vec::new(), Vec::new());
        let (mut matched, mut guessed, mut only_in_a, mut only_in_b, mut unchanged) =
            (0, 0, 0, 0, 0);
        for pair in &matching.pairs {
            let sa = pair.a.map(|i| &a.sites[i]);
            let sb = pair.b.map(|j| &b.sites[j]);
            match (sa, sb) {
                (Some(x), Some(y)) => {
                    matched += 1;
                    guessed += usize::from(pair.guessed);
                    if x.metrics == y.metrics {
                        unchanged += 1;
                        // Kept for its place's sums, not listed.
                        same.push(Row::of(side(sa), side(sb), pair, SitePlace::of(sa, sb)));
                        continue;
                    }
                }
                (Some(_), None) => only_in_a += 1,
                _ => only_in_b += 1,
            }
            sites.push(Row::of(side(sa), side(sb), pair, SitePlace::of(sa, sb)));
        }
        most_changed_first(&mut sites);
        let mut verdict = verdict(a, b, &totals, &sites, thresholds);
        verdict
            .notes
            .splice(0..0, two_programs(a, b, &matching.files));
        let source_changes = source_changes(a, b, &matching.files);
        let suspects = if verdict.regression {
            suspects(b, &sites, &[], &source_changes)
        } else {
            Vec::new()
        };
        // Where growth per unit means different things in the two runs, a place whose only
        // change is its growth is no difference to open with.
        let comparable = growth_comparable(a, b);
        let top = (sites.iter())
            .find(|r| comparable || r.status != SiteStatus::Changed)
            .map(TopDifference::of_site);
        let mut diff = Diff {
            verdict,
            totals,
            steps,
            matched,
            guessed,
            only_in_a,
            only_in_b,
            unchanged,
            places: places(&sites, &same),
            sites,
            files: matching.files,
            source_changes,
            suspects,
            tensors: None,
            top,
        };
        diff.top_of_verdict();
        diff
    }

    /// When a new growth makes B a regression, the top difference is its row: the verdict's own
    /// cause, not the row that changed most in bytes (a line that went away or shrank), so the
    /// line under the verdict names what the verdict is about.
    fn top_of_verdict(&mut self) {
        let Some(g) =
            (self.verdict.new_growth.iter()).find(|g| g.regression && g.role == Role::Cause)
        else {
            self.top_of_orphans();
            return;
        };
        // The growth is the place's: its rows (a line's native paths) together.
        let (top, live_bytes) = match g.view {
            View::Driver => {
                let of_place = |r: &SiteDiff| r.label == g.label && r.place.module == g.owner;
                // The table of places opens with the verdict's (a leak freed at exit has
                // changed nothing at the end, the table's first measure).
                let Some(i) = self.places.iter().position(|p| of_place(&p.row)) else {
                    return;
                };
                self.places[..=i].rotate_right(1);
                // Its status is the place's row's, as the table says it; its live bytes those
                // of every place its rate adds up (one set of communicators at several calls).
                let place = &self.places[0].row;
                let member = |r: &SiteDiff| {
                    (g.places.iter())
                        .any(|(label, owner)| r.label == *label && r.place.module == *owner)
                };
                let live = (self.places.iter())
                    .filter(|p| member(&p.row))
                    .map(|p| p.row.change.live_bytes + p.row.change.host_bytes)
                    .sum();
                let rows = place_rows(&self.sites, of_place);
                let top = rows.0.map(|r| TopDifference {
                    status: place.status,
                    ..TopDifference::of_site(r)
                });
                (top, live)
            }
            View::AllocatorTensors => {
                let Some(t) = &self.tensors else { return };
                let (first, live) = place_rows(&t.lines, |r| r.label == g.label);
                let owner = Some(crate::torch::VIEW_NAME.to_string());
                let top = first.map(|r| TopDifference::of(r, t.view, owner, LineMeaning::Keeps));
                (top, live)
            }
        };
        if let Some(mut top) = top {
            top.growth = g.rate;
            top.live_bytes = live_bytes;
            self.top = Some(top);
        }
    }

    /// When new orphans make B a regression (and no new growth does), the top difference is the
    /// place with the most new orphans, first in the table of places too: the line under the
    /// verdict names what the verdict is about.
    fn top_of_orphans(&mut self) {
        let orphans = (self.verdict.checks.iter())
            .any(|c| c.exceeded && matches!(c.metric, "orphans" | "orphan_bytes"));
        if !orphans {
            return;
        }
        let most = (self.places.iter().enumerate())
            .filter(|(_, p)| p.row.change.orphans > 0 || p.row.change.orphan_bytes > 0)
            .max_by_key(|(i, p)| {
                let c = &p.row.change;
                (c.orphans, c.orphan_bytes, std::cmp::Reverse(*i))
            })
            .map(|(i, _)| i);
        let Some(i) = most else { return };
        self.places[..=i].rotate_right(1);
        self.top = Some(TopDifference::of_site(&self.places[0].row));
    }

    /// Adds the per-tensor view of PyTorch's recorder (`a` and `b`, each when its trace carries
    /// the history, else why not in words, [`crate::torch::why_no_tensors`]; `pa` and `pb` the
    /// runs' profiles): compared when both have it, its thresholds joined to the verdict, its
    /// lines ranked first when they explain the change.
    pub fn with_tensors(
        mut self,
        (a, pa): (Result<&TensorProfile, &str>, &Profile),
        (b, pb): (Result<&TensorProfile, &str>, &Profile),
        sources: &SourceSearch,
        thresholds: &Thresholds,
    ) -> Self {
        let (a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(_), Err(_)) => return self,
            (Err(why), _) | (_, Err(why)) => {
                let lacking = if a.is_err() { "A" } else { "B" };
                // Only a run without a recorder is helped by being run again with one.
                let again = match why {
                    "no recorder" => {
                        " (run it with `vramtrace run` and PyTorch's caching allocator)"
                    }
                    _ => "",
                };
                self.verdict.notes.push(format!(
                    "tensors (PyTorch recorder) not compared: run {lacking} has no recorder \
                     history: {why}{again}"
                ));
                // B's own findings still name the line that keeps what its allocator grew for:
                // the verdict names it, as B's report does.
                if let (true, Ok(_)) = (a.is_err(), b) {
                    self.verdict.kept_at(&pb.kept_at);
                    if let Some(top) = (self.top.as_mut()).filter(|t| t.view == View::Driver) {
                        let at = (pb.kept_at.iter())
                            .find(|k| k.segments == (top.label.clone(), top.owner.clone()));
                        top.kept_at = at.map(|k| k.line.0.clone());
                    }
                }
                return self;
            }
        };
        let tensors = TensorDiff::of((a, pa), (b, pb), sources, thresholds);
        (self.verdict).add_tensors(tensors.checks.clone(), tensors.new_growth.clone());
        self.verdict.notes.extend(tensors.notes.iter().cloned());
        // Of a regression, the top difference is a line that got worse: a leak fixed in the
        // tensors' view does not explain memory that grew in the driver's.
        let worse = |l: &&TensorLineDiff| l.change.live_bytes > 0 || l.change.growth > 0.0;
        let first = match self.verdict.regression {
            true => tensors.lines.iter().find(worse),
            false => tensors.lines.first(),
        };
        if tensors.explains && first.is_some() || self.top.is_none() {
            if let Some(first) = first.or(tensors.lines.first()) {
                let owner = Some(crate::torch::VIEW_NAME.to_string());
                let top = TopDifference::of(first, tensors.view, owner, LineMeaning::Keeps);
                self.top = Some(top);
            }
        }
        if self.verdict.regression {
            let lines: Vec<(PythonLine, bool)> = (tensors.lines.iter())
                .filter_map(|l| {
                    let more = l.change.live_bytes > 0 || l.change.growth > 0.0;
                    Some((l.b.as_ref()?.line.clone()?, more))
                })
                .collect();
            self.suspects = suspects(pb, &self.sites, &lines, &self.source_changes);
        }
        self.tensors = Some(tensors);
        self.top_of_verdict();
        self
    }
}

/// The rows of one place that grow new in B (`of_place` says which rows are the place's): the
/// fastest, and the live bytes they changed by together.
/// Two programs side by side (two jobs' directories, a wrong path) compare what they are, not
/// what changed: said, whatever the verdict, where the main scripts differ and their code did
/// not pair them as two versions of one (a renamed script that kept its code did).
fn two_programs(a: &Profile, b: &Profile, files: &[FilePair]) -> Option<String> {
    let (ma, mb) = (a.main_script.as_deref()?, b.main_script.as_deref()?);
    let paired = files.iter().any(|f| f.a == ma && f.b == mb);
    let (na, nb) = (crate::units::base_name(ma), crate::units::base_name(mb));
    (ma != mb && !paired).then(|| {
        format!(
            "the runs ran different main scripts (A {na}, B {nb}) whose code is not one \
             program's: two programs, not two runs of one"
        )
    })
}

fn place_rows<M: Measures, P>(
    rows: &[Row<M, P>],
    of_place: impl Fn(&Row<M, P>) -> bool,
) -> (Option<&Row<M, P>>, i64) {
    let growing = || (rows.iter()).filter(|r| of_place(r) && r.new_growth() > 0.0);
    let fastest = growing().max_by(|a, b| a.new_growth().total_cmp(&b.new_growth()));
    (fastest, growing().map(|r| M::live_change(&r.change)).sum())
}

/// A site's numbers and label in one run.
fn side(s: Option<&SiteProfile>) -> (Option<&SiteMetrics>, Option<String>) {
    (s.map(|s| &s.metrics), s.map(|s| s.label.clone()))
}

/// B's numbers against A's thresholds, in the driver's view, and the new growths among `sites`.
fn verdict(
    a: &Profile,
    b: &Profile,
    t: &TotalsDiff,
    sites: &[SiteDiff],
    th: &Thresholds,
) -> Verdict {
    let check = Check::of;
    let mut checks = vec![
        check(
            "live_bytes",
            t.counts.live_bytes.change as f64,
            th.live_bytes,
        ),
        check(
            "peak_bytes",
            t.counts.peak_bytes.change as f64,
            th.peak_bytes,
        ),
    ];
    let mut notes = Vec::new();
    let (sa, sb) = (a.steps.source, b.steps.source);
    if a.steps.unit == GrowthUnit::Step && b.steps.unit == GrowthUnit::Step && sa != sb {
        // A repeating allocation may recur once in several marked steps, or several times in
        // one: the rates count different things.
        let of = |s: &'static str| match s {
            "marks" => "its step marks",
            "pattern" => "a repeating allocation",
            other => other,
        };
        notes.push(format!(
            "steps counted differently: run A's are {}, run B's {} (one may span several of the \
             other's): growth per step not compared; mark steps in both runs",
            of(sa),
            of(sb)
        ));
    }
    let guessed = a.steps.unit == GrowthUnit::Step && (sa, sb) == ("pattern", "pattern");
    if guessed {
        notes.push(
            "steps guessed from the allocation pattern in both runs, not marked: a rate per step \
             is per guessed step, which may span several of the program's steps or part of one; \
             growth per step not compared with its limit (mark steps for exact rates)"
                .to_string(),
        );
    }
    if b.steps.unit == GrowthUnit::Step && sb == "pattern" && sa != "pattern" && sa != "marks" {
        notes.push(
            "run B's steps are guessed from the allocation pattern, not marked: its rates per \
             step are per guessed step, which may span several of the program's steps or part \
             of one (mark steps for exact rates)"
                .to_string(),
        );
    }
    match (a.steps.unit, b.steps.unit, t.growth) {
        // Steps counted differently count different things (a pattern's step may be two of the
        // program's): their rates are no check, either way (the note above says so).
        (GrowthUnit::Step, GrowthUnit::Step, Some(g)) if sa == sb && !guessed => {
            checks.push(check("growth_per_step", g.change, th.growth_per_step));
        }
        (GrowthUnit::Step, GrowthUnit::Step, _) => {}
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
    checks.push(check("orphans", t.counts.orphans.change as f64, th.orphans));
    checks.push(check(
        "orphan_bytes",
        t.counts.orphan_bytes.change as f64,
        th.orphan_bytes,
    ));
    checks.push(check(
        "failures",
        t.counts.failures.change as f64,
        th.failures,
    ));
    // Growth in all compares across units where A has none: no growth is none in any unit, so
    // B's new steady growth is judged whether or not A counted steps. Steps counted differently
    // are still steps: the growth in all only tells a new growth from one that moved (the
    // totals do not show it, as no number to read).
    let a_flat = a.totals.metrics.growth == 0.0;
    let (x, y) = (a.totals.metrics.growth, b.totals.metrics.growth);
    let per_step = (a.steps.unit == b.steps.unit).then(|| Rate::of(x, y));
    let total = (t.growth)
        .or(per_step)
        .or_else(|| a_flat.then(|| Rate::of(0.0, y)));
    let (new, found) = new_growth(
        (View::Driver, "new_growth"),
        (sites, |s: &SiteDiff| {
            let native = s.place.a_python.is_empty() && s.place.b_python.is_empty();
            (s.place.module.clone(), s.place.line_means, native)
        }),
        total,
        (b.steps.unit, b.fill.as_ref()),
        th,
    );
    checks.push(new);
    Verdict::of(checks, found, notes)
}

/// The lines B added in code it ran, and the lines in loops of A's code that B removed (a `del`,
/// an `if` that kept a leak to one rank), most likely cause of a regression
/// first: a line where B holds more than A or grows faster (a site's or tensors' line: the trace
/// saw it); then a line of another changed site or tensor line; then lines in loops (they run
/// every step); then lines in the functions where changed sites allocated (a caching allocator
/// hands a leaked tensor memory it already holds and asks the driver for more later, on another
/// line of the same code, or on another thread); then the rest, in file order. `tensor_lines`
/// are the changed lines of the per-tensor view, each with whether B holds more there.
fn suspects(
    b: &Profile,
    sites: &[SiteDiff],
    tensor_lines: &[(PythonLine, bool)],
    changes: &[SourceChange],
) -> Vec<SourceChange> {
    let lines: Vec<(&PythonLine, bool)> = (sites.iter())
        .flat_map(|s| {
            let more = SiteMetrics::live_change(&s.change) > 0 || s.change.growth > 0.0;
            s.place.b_python.iter().map(move |l| (l, more))
        })
        .chain(tensor_lines.iter().map(|(l, more)| (l, *more)))
        .collect();
    let rank = |c: &SourceChange| {
        // A removed line is A's: no line of B's is at it.
        if c.kind == LineChangeKind::Removed {
            return 2;
        }
        let at = |l: &PythonLine| l.file == c.file && l.line == c.line;
        if lines.iter().any(|&(l, more)| more && at(l)) {
            return 0;
        }
        if lines.iter().any(|&(l, _)| at(l)) {
            return 1;
        }
        if c.in_loop {
            return 2;
        }
        let function = (b.codes.iter())
            .filter(|k| k.file == c.file && k.first_line <= c.line)
            .max_by_key(|k| k.first_line)
            .map(|k| k.function.as_str());
        let near = |l: &PythonLine| l.file == c.file && Some(l.function.as_str()) == function;
        if lines.iter().any(|&(l, _)| near(l)) {
            3
        } else {
            4
        }
    };
    let mut s: Vec<SourceChange> = (changes.iter())
        .filter(|c| match c.kind {
            // Ran: its calls' stacks passed it, or the trace saw memory made there (a tensor the
            // caching allocator served from memory it held, with no call to the driver).
            LineChangeKind::Added => {
                c.executed
                    || lines
                        .iter()
                        .any(|(l, _)| l.file == c.file && l.line == c.line)
            }
            // What stopped a leak needs not allocate (a `del`, an `if`): a loop's line will do.
            LineChangeKind::Removed => c.in_loop,
        })
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
