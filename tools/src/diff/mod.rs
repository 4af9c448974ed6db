//! `vramtrace diff`: two runs side by side, call site by call site, matched by symbols (never by
//! address), ranked by what changed most, with a verdict against thresholds that sets the exit
//! code: 0 no regression, 1 regression, 2 error (ripgrep's habit) or a trace that could not be
//! compared in full (cut short, damaged, events lost), for which no verdict is given.
//!
//! Three shapes of input: two traces (A, then B); two directories of traces of one job each,
//! compared rank by rank; and `--rank N` (or `--pid P`) with the traces of one job, which
//! compares that trace with the median of the others. The comparison itself is
//! `vramtrace_collector::compare`; this module reads the traces (in parallel), and renders.

mod args;
mod text;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use vramtrace_collector::analysis::GrowthConfig;
use vramtrace_collector::compare::{
    rank_rows, Diff, Profile, RankRow, SiteDiff, SourceSearch, TensorProfile, Thresholds,
};
use vramtrace_collector::compare::{view_name, TensorLineDiff, TensorRun, DRIVER_VIEW_NAME};
use vramtrace_collector::compare::{Check, NewGrowth, Verdict};
use vramtrace_collector::compare::{Count, Rate};
use vramtrace_collector::compare::{FilePair, PlaceDiff};
use vramtrace_collector::compare::{SourceChange, StepAlignment, TopDifference, TotalsDiff};
use vramtrace_collector::torch::View;

pub use args::{DiffArgs, EXAMPLES};

use crate::load::inputs::{expand, expand_readable, load_all, Run};
use crate::load::ReadFrom;
use crate::ranks::{headline, missing_ranks, rank_input, who};

/// Version of the document's shape (one comparison).
pub const SCHEMA: &str = "vramtrace-diff/1";
/// Version of the document of a rank-by-rank comparison of two directories.
pub const SET_SCHEMA: &str = "vramtrace-diff-set/1";

/// A run as the document names it.
#[derive(Clone, Debug, Serialize)]
pub struct RunFacts {
    /// The trace file; for a median, `median of N traces`.
    pub path: String,
    pub pid: Option<u32>,
    pub rank: Option<i32>,
    pub host: Option<String>,
    /// Where its steps came from (`marks`, `pattern`, `none`), and how many.
    pub step_source: &'static str,
    pub steps: u64,
    /// For a median: the traces it is the median of.
    pub median_of: Vec<String>,
    /// For a trace cut into segments: which were read and what rotation removed (its totals
    /// cover the segments on disk), in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<String>,
    /// What keeps the trace from being compared in full (`is cut short (…)`; for a median,
    /// each of its traces' with its path): no verdict is given on it, and `diff` exits 2.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<String>,
}

/// A run ready to compare: its facts and profile.
struct Compared {
    facts: RunFacts,
    profile: Profile,
    /// What PyTorch's recorder saw per line, when the trace carries its history.
    tensors: Option<TensorProfile>,
    /// Why it carries none, in words (`no recorder`).
    no_tensors: String,
    /// For the rank table of `--rank`.
    rank_input: vramtrace_collector::compare::RankInput,
    /// What rotation deleted from the start of the trace, in words (`its first 3 segments,
    /// 1.2 s`): its peak and its failed calls there are not known.
    rotated: Option<String>,
    /// The alerts its tracer raised: the device, and the alert as the report says it.
    alerts: Vec<(i32, String)>,
    /// The process that wrote it: host, pid and start (the same in every segment of a trace).
    process: (String, u32, u64),
    /// Where it stands in its job (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`).
    job: crate::ranks::JobPlace,
    /// The file name of the program it ran (its command's first word).
    program: Option<String>,
}

fn profile_of(run: Run) -> Result<Compared> {
    let mut symbols = crate::load::thread_symbolizer();
    let t = &run.trace;
    let profile = Profile::build(&t.state, &run.analysis, &run.tally, &mut symbols);
    crate::load::keep_symbolizer(symbols);
    let tensors = TensorProfile::of(&run.torch, &run.analysis.growth);
    let no_tensors = run.torch.why_no_tensors();
    let t = &run.trace;
    Ok(Compared {
        facts: RunFacts {
            path: t.path.display().to_string(),
            pid: Some(t.header.pid),
            rank: t.header.rank,
            host: Some(t.header.host.clone()),
            step_source: profile.steps.source,
            steps: profile.steps.steps,
            median_of: Vec::new(),
            segments: (t.segments.as_ref())
                .filter(|s| s.is_cut())
                .map(|s| s.describe()),
            gaps: t.gaps(),
        },
        rank_input: rank_input(&run, &run.analysis),
        rotated: (t.segments.as_ref())
            .and_then(|s| s.removed.as_ref())
            .map(|r| {
                format!(
                    "{} ({} events, the first {})",
                    crate::render::units::count(u64::from(r.segments), "segment"),
                    vramtrace_collector::units::grouped(r.events),
                    crate::render::units::duration(r.span_ns)
                )
            }),
        process: (t.header.host.clone(), t.header.pid, t.header.start_unix_ns),
        job: (t.header.rank, t.header.local_rank, t.header.world_size),
        program: crate::ranks::program_of(&t.header.command_line, profile.main_script.clone()),
        // Not those whose growth the live set at the end shows stopped long ago.
        alerts: (run.analysis.alerts.iter())
            .filter(|r| !r.growth_stopped)
            .map(|r| {
                let said = crate::render::findings::alert_line(r, run.analysis.growth.step_ns);
                (r.alert.device, said)
            })
            .collect(),
        profile,
        tensors,
        no_tensors,
    })
}

/// One comparison, as printed.
#[derive(Serialize)]
pub struct DiffDocument<'a> {
    pub schema: &'static str,
    pub a: &'a RunFacts,
    pub b: &'a RunFacts,
    pub verdict: VerdictDoc<'a>,
    pub thresholds: &'a Thresholds,
    pub totals: &'a TotalsDiff,
    pub steps: &'a StepAlignment,
    pub sites: SiteList<'a>,
    pub files: &'a [FilePair],
    pub source_changes: &'a [SourceChange],
    pub suspects: &'a [SourceChange],
    /// The per-tensor view (PyTorch's recorder), when both runs carry its history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensors: Option<TensorList<'a>>,
    /// The difference ranked first, over both views; `null` when nothing changed.
    pub top_difference: Option<&'a TopDifference>,
    /// With `--rank`/`--pid`: the rank table of every trace given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<&'a [RankRow]>,
}

/// The verdict as `--json` gives it: `regression` is `null` where the comparison has none (a
/// trace cut short or damaged: `diff` exits 2), so that a script reading it never takes "could
/// not compare" for "no regression".
#[derive(Serialize)]
pub struct VerdictDoc<'a> {
    pub regression: Option<bool>,
    pub checks: &'a [Check],
    pub new_growth: &'a [NewGrowth],
    pub notes: &'a [String],
}

impl<'a> VerdictDoc<'a> {
    fn of(v: &'a Verdict, decided: bool) -> Self {
        VerdictDoc {
            regression: decided.then_some(v.regression),
            checks: &v.checks,
            new_growth: &v.new_growth,
            notes: &v.notes,
        }
    }
}

/// The sites of a comparison: counts, and the most changed (at most `--top`).
#[derive(Serialize)]
pub struct SiteList<'a> {
    pub matched: usize,
    pub guessed: usize,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub unchanged: usize,
    /// Sites that changed, in all.
    pub changed: usize,
    pub list: &'a [SiteDiff],
    /// The changed sites by place (a Python line or native function, and the module that
    /// asked), the verdict's place first, then most changed (at most `--top`): what the text
    /// lists.
    pub places: &'a [PlaceDiff],
    /// `driver`: the view these sites are seen in.
    pub view: View,
    pub view_name: &'static str,
}

/// The Python lines of the per-tensor view: counts, and the most changed (at most `--top`).
#[derive(Serialize)]
pub struct TensorList<'a> {
    pub view: View,
    pub view_name: &'static str,
    pub a: &'a TensorRun,
    pub b: &'a TensorRun,
    pub live_bytes: &'a Count,
    pub live_count: &'a Count,
    /// Bytes per step; `null` when a run's recorder window holds no whole step.
    pub growth: Option<&'a Rate>,
    /// The thresholds checked in this view (also among the verdict's checks).
    pub checks: &'a [Check],
    /// The lines that grow steadily in B where they do not in A (also in the verdict).
    pub new_growth: &'a [NewGrowth],
    /// Whether this view found a change beyond the thresholds (either way): its lines then rank
    /// first.
    pub explains: bool,
    pub matched: usize,
    pub guessed: usize,
    pub only_in_a: usize,
    pub only_in_b: usize,
    pub unchanged: usize,
    /// Lines that changed, in all.
    pub changed: usize,
    pub list: &'a [TensorLineDiff],
}

/// A comparison and what it compared.
pub struct Comparison {
    pub a: RunFacts,
    pub b: RunFacts,
    pub diff: Diff,
    pub ranks: Option<Vec<RankRow>>,
    /// Of `--rank`: the ranks of the job that no trace given has, in words.
    pub incomplete: Option<String>,
}

impl Comparison {
    /// What keeps this comparison from a verdict: each gap of A or B, naming its run.
    pub fn gaps(&self) -> Vec<String> {
        let of = |name: &str, run: &RunFacts| {
            let path = if run.median_of.is_empty() {
                format!(" ({})", run.path)
            } else {
                format!(" ({}): one of its traces", run.path)
            };
            (run.gaps.iter())
                .map(|g| format!("{name}{path} {g}"))
                .collect::<Vec<_>>()
        };
        let mut gaps: Vec<String> = self.incomplete.iter().cloned().collect();
        gaps.extend(of("A", &self.a));
        gaps.extend(of("B", &self.b));
        gaps
    }

    /// The document of this comparison, its sites cut to `top`.
    pub fn document<'a>(&'a self, thresholds: &'a Thresholds, top: usize) -> DiffDocument<'a> {
        let d = &self.diff;
        DiffDocument {
            schema: SCHEMA,
            a: &self.a,
            b: &self.b,
            verdict: VerdictDoc::of(&d.verdict, self.gaps().is_empty()),
            thresholds,
            totals: &d.totals,
            steps: &d.steps,
            sites: SiteList {
                matched: d.matched,
                guessed: d.guessed,
                only_in_a: d.only_in_a,
                only_in_b: d.only_in_b,
                unchanged: d.unchanged,
                changed: d.sites.len(),
                list: &d.sites[..d.sites.len().min(top)],
                places: &d.places[..d.places.len().min(top)],
                view: View::Driver,
                view_name: DRIVER_VIEW_NAME,
            },
            tensors: d.tensors.as_ref().map(|t| TensorList {
                view: t.view,
                view_name: view_name(t.view),
                a: &t.a,
                b: &t.b,
                live_bytes: &t.live_bytes,
                live_count: &t.live_count,
                growth: t.growth.as_ref(),
                checks: &t.checks,
                new_growth: &t.new_growth,
                explains: t.explains,
                matched: t.matched,
                guessed: t.guessed,
                only_in_a: t.only_in_a,
                only_in_b: t.only_in_b,
                unchanged: t.unchanged,
                changed: t.lines.len(),
                list: &t.lines[..t.lines.len().min(top)],
            }),
            top_difference: d.top.as_ref(),
            files: &d.files,
            source_changes: &d.source_changes,
            suspects: &d.suspects,
            ranks: self.ranks.as_deref(),
        }
    }
}

/// Two runs compared in both views: the driver's, and PyTorch's recorder where they have it.
fn compare_runs(a: &Compared, b: &Compared, sources: &SourceSearch, t: &Thresholds) -> Diff {
    let (pa, pb) = (&a.profile, &b.profile);
    let mut diff = Diff::compare(pa, pb, sources, t).with_tensors(
        (a.tensors.as_ref().ok_or(&a.no_tensors), pa),
        (b.tensors.as_ref().ok_or(&b.no_tensors), pb),
        sources,
        t,
    );
    leave_out_rotated(&mut diff, &[("run A's", a), ("run B's", b)]);
    alerts_of_rotated(&mut diff, a, b);
    // Native programs have no main script to tell two programs apart by (the profiles' own
    // check): their executables do.
    if let (None, None, Some(x), Some(y)) =
        (&pa.main_script, &pb.main_script, &a.program, &b.program)
    {
        if x != y {
            diff.verdict.notes.insert(
                0,
                format!(
                    "the runs ran different programs (A {x}, B {y}): two programs, not two runs \
                     of one"
                ),
            );
        }
    }
    diff
}

/// Where rotation deleted B's first segments, the growth B's tracer judged while it ran is not
/// all on disk, and a slow leak may not show in what is: an alert B's tracer raised on a device
/// where A's raised none is a regression of its own (what was not seen never passes).
fn alerts_of_rotated(diff: &mut Diff, a: &Compared, b: &Compared) {
    let Some(removed) = &b.rotated else {
        return;
    };
    let new: Vec<&(i32, String)> = (b.alerts.iter())
        .filter(|(device, _)| !a.alerts.iter().any(|(d, _)| d == device))
        .collect();
    if let Some((_, said)) = new.first() {
        diff.verdict.alerted(
            new.len(),
            format!(
                "run B's tracer alerted {said}; rotation (VRAMTRACE_MAX_BYTES) deleted its first \
                 {removed}, where its growth was judged"
            ),
        );
    }
}

/// Where rotation deleted the first segments of a run, its peak and failed calls there are not
/// known: those checks are left out (a peak in the part deleted is no regression of the other
/// run), and the verdict says so. What is live, its growth and its orphans come from what is
/// there (the oldest segment's snapshot holds the live set). Each run comes with its name as
/// owner (`run A's`).
fn leave_out_rotated(diff: &mut Diff, runs: &[(&str, &Compared)]) {
    for (whose, run) in runs {
        if let Some(removed) = &run.rotated {
            diff.verdict.leave_out(
                &["peak_bytes", "failures"],
                format!(
                    "peak and failed calls not compared: rotation (VRAMTRACE_MAX_BYTES) deleted \
                     {whose} first {removed}"
                ),
            );
        }
    }
}

/// `--max-growth` given, where a pair cannot compare growth per step (a run without steps, or
/// the two counting steps differently): a limit asked for and not checked is a gap of the pair,
/// never a pass, as `check --max-growth` and `--fail-on growth=SIZE` have it.
fn growth_asked_for(c: &mut Comparison) {
    let why = "--max-growth cannot be compared with its growth (mark steps with \
               vramtrace_mark_step(), or name an NVTX range with VRAMTRACE_STEP_RANGE)";
    let (a, b) = (c.a.step_source, c.b.step_source);
    for run in [&mut c.a, &mut c.b] {
        if run.step_source == "none" {
            run.gaps.push(format!("has no steps: {why}"));
        }
    }
    if a != b && a != "none" && b != "none" {
        c.b.gaps.push(format!(
            "counts its steps from {b}, and run A from {a}: --max-growth cannot be compared \
             (mark steps in both runs)"
        ));
    } else if (a, b) == ("pattern", "pattern") {
        // A guessed step may be several of the program's, or part of one: no size per step.
        c.b.gaps.push(
            "has steps guessed from the allocation pattern, as run A has: --max-growth, a size \
             per step, cannot be compared with growth per guessed step (mark steps in both runs)"
                .to_string(),
        );
    }
}

/// Runs `vramtrace diff`; the exit code is 1 when a comparison found a regression.
pub fn run(args: &DiffArgs) -> Result<u8> {
    let thresholds = args.thresholds.thresholds();
    let growth = args.analysis.config();
    let sources = SourceSearch::with_env(args.source_dirs.clone());
    let (comparisons, unpaired) = if args.rank.is_some() || args.pid.is_some() {
        let one = against_median(args, growth, &sources, &thresholds)?;
        (vec![one], Vec::new())
    } else {
        two_runs(args, growth, &sources, &thresholds)?
    };
    let mut comparisons = comparisons;
    if args.thresholds.max_growth.is_some() {
        comparisons.iter_mut().for_each(growth_asked_for);
    }
    let regression = comparisons.iter().any(|c| c.diff.verdict.regression);
    let mut out = crate::output::reader_gone::stdout();
    if args.json {
        if let ([one], []) = (&comparisons[..], &unpaired[..]) {
            write_json(&mut out, &one.document(&thresholds, args.top))?;
        } else {
            #[derive(Serialize)]
            struct Set<'a> {
                schema: &'static str,
                /// `null` when a pair could not be compared in full, or a rank not at all
                /// (exit 2).
                regression: Option<bool>,
                pairs: Vec<DiffDocument<'a>>,
                /// The ranks only one run has, in words: not compared.
                #[serde(skip_serializing_if = "<[String]>::is_empty")]
                unpaired: &'a [String],
            }
            let pairs = (comparisons.iter())
                .map(|c| c.document(&thresholds, args.top))
                .collect();
            write_json(
                &mut out,
                &Set {
                    schema: SET_SCHEMA,
                    regression: (comparisons.iter().all(|c| c.gaps().is_empty())
                        && unpaired.is_empty())
                    .then_some(regression),
                    pairs,
                    unpaired: &unpaired,
                },
            )?;
        }
    } else {
        let w = || "writing the comparison";
        let in_set = comparisons.len() > 1 || !unpaired.is_empty();
        if in_set {
            text::pairs_summary(&mut out, &comparisons, &unpaired, &thresholds).with_context(w)?;
        }
        for c in &comparisons {
            text::render(&mut out, c, args, in_set).with_context(w)?;
        }
    }
    // A comparison with a trace cut short or damaged, or a rank not compared, has no verdict,
    // whatever it found.
    let gaps: Vec<String> = (unpaired.iter().cloned())
        .chain(comparisons.iter().flat_map(Comparison::gaps))
        .collect();
    if let [first, rest @ ..] = &gaps[..] {
        out.flush().context("writing the comparison")?;
        return Err(match rest.len() {
            0 => anyhow!("could not compare: {first}"),
            n => anyhow!("could not compare: {first}; and {n} more (named above)"),
        });
    }
    Ok(u8::from(regression))
}

fn write_json(out: &mut impl Write, doc: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, doc)
        .map_err(std::io::Error::from)
        .context("writing the comparison")?;
    writeln!(out).context("writing the comparison")
}

/// `diff A B`: two traces, or two directories compared rank by rank.
fn two_runs(
    args: &DiffArgs,
    growth: GrowthConfig,
    sources: &SourceSearch,
    t: &Thresholds,
) -> Result<(Vec<Comparison>, Vec<String>)> {
    let [a, b] = &args.inputs[..] else {
        return Err(anyhow!(
            "diff takes two runs, A and B (traces or directories of traces), or --rank N with \
             the traces of one job; got {}",
            crate::render::units::count(args.inputs.len() as u64, "input")
        ));
    };
    // A job where one rank died before its tracer wrote is still compared by its other ranks;
    // the trace that cannot be read is said, and the comparison has no verdict (exit 2).
    let (a_found, b_found) = (
        expand_readable(std::slice::from_ref(a))?,
        expand_readable(std::slice::from_ref(b))?,
    );
    let cannot: Vec<String> = [("A", &a_found), ("B", &b_found)]
        .iter()
        .flat_map(|(name, found)| {
            (found.unreadable.iter()).map(move |u| {
                // The reader's error names the file.
                let error = match u.error.starts_with(&u.path) {
                    true => u.error.clone(),
                    false => format!("{}: {}", u.path, u.error),
                };
                format!("a trace of run {name} cannot be read ({error}); not compared")
            })
        })
        .collect();
    let (a_paths, b_paths) = (a_found.traces, b_found.traces);
    let all: Vec<PathBuf> = a_paths.iter().chain(&b_paths).cloned().collect();
    let mut compared = load_all(&all, ReadFrom::First, growth, profile_of)?;
    let b_runs = compared.split_off(a_paths.len());
    let a_runs = compared;
    // The unreadable trace first: it is why its rank has no pair.
    let (pairs, unpaired) = pair_runs(&a_runs, &b_runs)?;
    let unpaired = cannot.into_iter().chain(unpaired).collect();
    // A trace against itself (a directory holding the file given as the other run, or two
    // segments of one trace, each read as the whole): nothing can differ, and "no regression"
    // would pass a gate that compared nothing. One process wrote both.
    let file = |p: &str| std::fs::canonicalize(p).ok();
    for &(i, j) in &pairs {
        let (x, y) = (&a_runs[i], &b_runs[j]);
        let path = &y.facts.path;
        if file(&x.facts.path).is_some_and(|f| Some(f) == file(path)) {
            return Err(anyhow!(
                "A and B are the same trace file ({path}): nothing can differ; give two runs"
            ));
        }
        if x.process == y.process {
            return Err(anyhow!(
                "A and B are the same trace ({} and {}: pid {} on {}): nothing can differ; give \
                 two runs",
                x.facts.path,
                y.facts.path,
                y.process.1,
                y.process.0
            ));
        }
    }
    let comparisons = pairs
        .into_iter()
        .map(|(i, j)| {
            let (x, y) = (&a_runs[i], &b_runs[j]);
            Comparison {
                a: x.facts.clone(),
                b: y.facts.clone(),
                diff: compare_runs(x, y, sources, t),
                ranks: None,
                incomplete: None,
            }
        })
        .collect();
    Ok((comparisons, unpaired))
}

/// The traces of two runs paired, and the ranks only one run has, in words: what could not be
/// compared (a rank that crashed before its tracer wrote, a rank left out).
type Pairs = (Vec<(usize, usize)>, Vec<String>);

/// Pairs the traces of two runs: one each; else by rank when every trace has one (a rank only
/// one run has is left unpaired, and said); else in name order when both have as many traces.
fn pair_runs(a: &[Compared], b: &[Compared]) -> Result<Pairs> {
    if a.len() == 1 && b.len() == 1 {
        return Ok((vec![(0, 0)], Vec::new()));
    }
    // A rank in two traces of one run (a restarted job, traces of two jobs): which of them to
    // compare is no guess to make, nor is pairing the rest by their order.
    for (name, runs) in [("A", a), ("B", b)] {
        let mut seen: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
        for r in runs {
            if let Some(rank) = r.facts.rank {
                seen.entry(rank).or_default().push(&r.facts.path);
            }
        }
        if let Some((rank, paths)) = seen.iter().find(|(_, p)| p.len() > 1) {
            return Err(anyhow!(
                "cannot pair the traces of the two runs: run {name} has rank {rank} in {} \
                 traces ({}): give each run one trace per rank",
                paths.len(),
                paths.join(", ")
            ));
        }
    }
    let ranks = |runs: &[Compared]| -> Option<BTreeMap<i32, usize>> {
        let map: BTreeMap<i32, usize> = (runs.iter().enumerate())
            .map(|(i, r)| r.facts.rank.map(|rank| (rank, i)))
            .collect::<Option<_>>()?;
        (map.len() == runs.len()).then_some(map)
    };
    if let (Some(ra), Some(rb)) = (ranks(a), ranks(b)) {
        let pairs: Vec<(usize, usize)> = (ra.iter())
            .filter_map(|(r, &i)| Some((i, *rb.get(r)?)))
            .collect();
        if pairs.is_empty() {
            return Err(anyhow!(
                "the two runs share no rank (A: {:?}, B: {:?})",
                ra.keys().collect::<Vec<_>>(),
                rb.keys().collect::<Vec<_>>()
            ));
        }
        let only = |name: &str,
                    mine: &BTreeMap<i32, usize>,
                    runs: &[Compared],
                    theirs: &BTreeMap<i32, usize>| {
            (mine.iter())
                .filter(|(r, _)| !theirs.contains_key(r))
                .map(|(r, &i)| {
                    format!(
                        "rank {r} is in run {name} only ({}): not compared",
                        runs[i].facts.path
                    )
                })
                .collect::<Vec<_>>()
        };
        let mut unpaired = only("A", &ra, a, &rb);
        unpaired.extend(only("B", &rb, b, &ra));
        // A rank the job had that neither run has a trace of is not compared either.
        let jobs = |runs: &[Compared]| runs.iter().map(|c| c.job).collect::<Vec<_>>();
        let (missing_a, missing_b) = (missing_ranks(&jobs(a)), missing_ranks(&jobs(b)));
        unpaired.extend(
            (missing_a.iter().filter(|r| missing_b.contains(r))).map(|r| {
                format!(
                "rank {r} has no trace in either run (a rank that died before its tracer wrote, \
                 or a file not copied): not compared"
            )
            }),
        );
        return Ok((pairs, unpaired));
    }
    if a.len() == b.len() {
        return Ok(((0..a.len()).map(|i| (i, i)).collect(), Vec::new()));
    }
    Err(anyhow!(
        "cannot pair the traces of the two runs: A has {} and B {}, and some have no rank to \
         pair them by (RANK was not set): give one trace of each run",
        crate::render::units::count(a.len() as u64, "trace"),
        b.len()
    ))
}

/// `diff --rank N TRACES…`: that trace against the median of the others.
fn against_median(
    args: &DiffArgs,
    growth: GrowthConfig,
    sources: &SourceSearch,
    t: &Thresholds,
) -> Result<Comparison> {
    let paths = expand(&args.inputs)?;
    let chosen = |c: &Compared| match (args.rank, args.pid) {
        (Some(r), _) => c.facts.rank == Some(r),
        (None, Some(p)) => c.facts.pid == Some(p),
        (None, None) => false,
    };
    let wanted = match (args.rank, args.pid) {
        (Some(r), _) => format!("rank {r}"),
        (None, pid) => format!("pid {}", pid.unwrap_or(0)),
    };
    if paths.len() < 2 {
        return Err(anyhow!(
            "--rank and --pid compare one trace with the others of its job: give at least two \
             traces (or a directory of them)"
        ));
    }
    let runs = load_all(&paths, ReadFrom::First, growth, profile_of)?;
    let (mine, others): (Vec<&Compared>, Vec<&Compared>) = runs.iter().partition(|c| chosen(c));
    let target = match mine[..] {
        [one] => one,
        [] => {
            let have: Vec<String> = (runs.iter())
                .map(|c| who(c.facts.rank, c.facts.pid.unwrap_or(0)))
                .collect();
            return Err(anyhow!(
                "no trace of {wanted} among the {} given ({})",
                runs.len(),
                have.join(", ")
            ));
        }
        _ => {
            return Err(anyhow!(
                "{} traces are {wanted}; give the traces of one job",
                mine.len()
            ))
        }
    };
    let median = Profile::median(&others.iter().map(|c| &c.profile).collect::<Vec<_>>());
    // The others' tensors, when every one of them has the recorder's history.
    let tensors: Option<Vec<&TensorProfile>> = others.iter().map(|c| c.tensors.as_ref()).collect();
    let median_tensors = tensors.map(|all| TensorProfile::median(&all));
    let places: Vec<crate::ranks::JobPlace> = runs.iter().map(|c| c.job).collect();
    let facts = RunFacts {
        path: format!(
            "median of {} trace{}",
            others.len(),
            if others.len() == 1 { "" } else { "s" }
        ),
        pid: None,
        rank: None,
        host: None,
        step_source: median.steps.source,
        steps: median.steps.steps,
        median_of: others.iter().map(|c| c.facts.path.clone()).collect(),
        segments: None,
        gaps: (others.iter())
            .flat_map(|c| c.facts.gaps.iter().map(|g| format!("{} {g}", c.facts.path)))
            .collect(),
    };
    // A rank the job had and the traces given have not (a rank that died before its tracer
    // wrote, or a file not copied): the median is not the job's, and no verdict is made, as
    // `report --fail-on` makes none of the job.
    let incomplete = crate::ranks::missing_words(&places).map(|missing| {
        format!(
            "the job is INCOMPLETE: {missing} (a rank that died before its tracer wrote, or a \
             file not copied): the median is of the {} others here",
            others.len()
        )
    });
    let inputs: Vec<_> = runs.iter().map(|c| c.rank_input.clone()).collect();
    // Of the median, the first trace without the history says why.
    let median_lacks = (others.iter().find(|c| c.tensors.is_none())).map_or(String::new(), |c| {
        format!("{} has none ({})", c.facts.path, c.no_tensors)
    });
    let mut diff = Diff::compare(&median, &target.profile, sources, t).with_tensors(
        (
            median_tensors.as_ref().ok_or(median_lacks.as_str()),
            &median,
        ),
        (
            target.tensors.as_ref().ok_or(&target.no_tensors),
            &target.profile,
        ),
        sources,
        t,
    );
    let named: Vec<String> = (others.iter().map(|c| format!("{}'s", c.facts.path)))
        .chain([format!("{wanted}'s")])
        .collect();
    let rotated: Vec<(&str, &Compared)> = (named.iter().map(String::as_str))
        .zip(others.iter().copied().chain([target]))
        .collect();
    leave_out_rotated(&mut diff, &rotated);

    if others.len() == 1 {
        diff.verdict.notes.push(format!(
            "the median of one trace is that trace: this compares {wanted} with {} alone, and \
             which of two traces differs most says nothing; give the job's other traces",
            others[0].facts.path
        ));
    }
    let rows = rank_rows(&inputs);
    // The table comes after the verdict on the trace asked for; when another one is the odd one,
    // the verdict's notes say which, and how to compare it.
    let is_target = |r: &RankRow| r.rank == target.facts.rank && Some(r.pid) == target.facts.pid;
    if let Some(odd) = rows.first().filter(|r| r.odd && !is_target(r)) {
        let how = match odd.rank {
            Some(r) => format!("--rank {r}"),
            None => format!("--pid {}", odd.pid),
        };
        diff.verdict.notes.push(format!(
            "{}; `vramtrace diff {how}` compares it with the others",
            headline(&rows)
        ));
    }
    // A leak every rank shares is no difference from their median: said, with how to see it.
    if let Some(shared) = crate::ranks::shared_growth(&rows) {
        diff.verdict.notes.push(format!(
            "{shared}: a leak they all share is no difference from their median; compare the \
             job with an earlier run of it (vramtrace diff OLD_DIR NEW_DIR), or read it in \
             vramtrace report"
        ));
    }
    Ok(Comparison {
        diff,
        a: facts,
        b: target.facts.clone(),
        ranks: Some(rows),
        incomplete,
    })
}
