//! `vramtrace replay`: the live set at one moment of a trace (a step, an event, a time, the
//! peak, an out-of-memory failure), with the same analyses as the report; `--until` steps through
//! to a later moment, one snapshot per step.
//!
//! Reading starts at the snapshot nearest before the point in a trace cut into segments. The
//! peak and whether the trace marks its steps come from the index at its end
//! (`crate::load::indexed`); a trace without one (an older tracer's, a process killed) is read
//! once to find the moment (or the repeating allocation that marks steps), then again up to it.

mod point;
mod render;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use serde::Serialize;
use vramtrace_collector::analysis::{peaks, Analysis};
use vramtrace_collector::event::Event;
use vramtrace_collector::format::Series;
use vramtrace_collector::live::{Holder, LiveState, StepSource, Summary};
use vramtrace_collector::symbols::Symbolizer;

pub use point::Point;

use crate::load::{
    indexed, open_series, read, removed_point, Flow, LoadedTrace, Progress, ReadFrom,
};
use crate::options::AnalysisArgs;

/// Version of the JSON document's shape.
pub const SCHEMA: &str = "vramtrace-replay/1";

pub const EXAMPLES: &str = "\
EXAMPLES:
    What was live when the busiest device peaked, by call site:
        vramtrace replay --at peak run.vtrace

    What was live at the first out-of-memory failure, and what led there:
        vramtrace replay --at oom run.vtrace

    The live set at the start of step 100, then one line per step up to step 120:
        vramtrace replay --at 'step 100' --until 'step 120' run.vtrace

    After the 5000th event, or 12.5 seconds into the run, as JSON:
        vramtrace replay --at 'event 5000' --json run.vtrace
        vramtrace replay --at 12.5s --json run.vtrace";

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace file to read.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Where to stop: 'step N' (as it begins: what step N allocates is live at 'step N+1'),
    /// 'event N', a time since the first event ('12.5s', '300ms'),
    /// 'peak', 'oom' (the first out-of-memory failure), 'oom N' or 'end' (after the last event,
    /// the live set `report` shows). A point past the end of the
    /// trace — a step, event, time or failure it does not reach — is an error that says how far
    /// the trace goes.
    #[arg(long, value_name = "POINT", value_parser = Point::parse, allow_hyphen_values = true)]
    pub at: Point,
    /// Step through from --at to this point: one snapshot at every step boundary between.
    #[arg(long, value_name = "POINT", value_parser = Point::parse, allow_hyphen_values = true)]
    pub until: Option<Point>,
    /// Print one JSON document instead of tables (schema: docs/report-json.md, "Replay").
    #[arg(long)]
    pub json: bool,
    /// How many call sites, orphans and findings to list (every ALERT is listed, whatever N is).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// Where a replay stopped.
#[derive(Clone, Debug, Serialize)]
pub struct Moment {
    /// The point asked for, in words.
    pub point: String,
    /// Events applied (the ordinal of the last one).
    pub event: u64,
    /// Sequence number and time (the tracer's clock) of the last event applied.
    pub seq: u64,
    pub time_ns: u64,
    /// That time, counted from the first event of the trace.
    pub since_first_ns: u64,
    /// Steps begun.
    pub step: u64,
}

/// Live memory at one step of `--until`.
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    #[serde(flatten)]
    pub moment: Moment,
    /// Per device and host: live objects and bytes.
    pub holders: Vec<HolderNow>,
}

/// One holder at a snapshot.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct HolderNow {
    #[serde(flatten)]
    pub holder: Holder,
    pub count: u64,
    pub bytes: u64,
}

/// What `replay` prints.
#[derive(Serialize)]
pub struct ReplayReport {
    pub schema: &'static str,
    pub trace: String,
    /// The process the trace is of: of several whose segments share a name, the one read.
    pub pid: u32,
    /// For a trace cut into segments: those on disk, where reading began, and what rotation
    /// removed, in words as `report` says them (`null` for a trace of one file).
    pub segments: Option<String>,
    /// Where the replay stopped (the `--until` point when stepping).
    pub at: Moment,
    /// Passes over the file (2 when the moment or the steps had to be found first).
    pub passes: u32,
    /// With `--until`: a snapshot at `--at`, at each step boundary after it, and at `--until`.
    pub snapshots: Vec<Snapshot>,
    pub live: Summary,
    /// What keeps the trace from holding the whole run up to the point, as `report` says it: a
    /// segment missing, damage, lost events; and when the replay read to the trace's end, its
    /// cut (a cut trace ends where it was cut, not where the program did).
    pub gaps: Vec<String>,
    pub analysis: Analysis,
    /// The moment in words for the tables' titles (`at step 12`); not in the JSON document,
    /// whose `at` says the same.
    #[serde(skip)]
    pub when: String,
}

/// Runs `vramtrace replay`.
pub fn run(args: &ReplayArgs) -> Result<()> {
    let path = &args.trace;
    let progress = Progress::new(path, "reading");
    let points = [Some(args.at), args.until];
    let asks = |f: fn(&Point) -> bool| points.iter().flatten().any(f);
    // The index at the end of the trace says where its peak is and whether it marks its steps:
    // then one pass, from the snapshot nearest the point, is enough.
    let series = open_series(path)?;
    let index = indexed(&series);
    let peak_known = index.and_then(|i| i.peak_event);
    let marks_known = index.is_some_and(|i| i.steps > 0);
    let needs_first_pass = (asks(|p| matches!(p, Point::Peak)) && peak_known.is_none())
        || (asks(|p| matches!(p, Point::Step(_))) && !marks_known);
    let (mut source, mut peak_event, mut passes) = (StepSource::Marks, peak_known, 1);
    if needs_first_pass {
        let whole = read_whole(path, &progress)?;
        // The steps the whole trace shows (its pattern, or its step marks alone).
        if let Some(steps) = whole.state.unapplied_steps() {
            source = steps;
        }
        peak_event = peaks(&whole.state).highest_device().map(|p| p.peak.event);
        progress.restart("pass 2 (replaying to the point)");
        passes = 2;
    }
    let resolve = |p: Point| -> Result<Target> {
        Ok(match p {
            Point::Peak => Target::Event(
                peak_event.ok_or_else(|| anyhow!("the trace holds no device memory: no peak"))?,
            ),
            Point::Event(n) => Target::Event(n),
            Point::Step(n) => Target::Step(n),
            Point::Time(t) => Target::Time(t),
            Point::Oom(n) => Target::Oom(n),
            Point::End => Target::End,
        })
    };
    let at = resolve(args.at)?;
    let until = args.until.map(resolve).transpose()?;
    for target in std::iter::once(at).chain(until) {
        if let Some(gone) = rotated_away(&series, target) {
            return Err(anyhow!("{gone}"));
        }
    }
    let end = until.unwrap_or(at);
    let (trace, mut snapshots, at_reached) = loop {
        // Steps found in the allocation pattern are the whole trace's: read from its start.
        let from = match source {
            StepSource::Marks => at.read_from(),
            _ => ReadFrom::First,
        };
        let mut snapshots = Vec::new();
        let mut last_step = None;
        let mut at_reached = false;
        let trace = read(path, from, source.clone(), &progress, |state, next| {
            if until.is_some() {
                if !at_reached && at.reached(state, next) {
                    at_reached = true;
                    snapshots.push(snapshot(state, &args.at.to_string()));
                    last_step = Some(state.steps());
                } else if at_reached && last_step != Some(state.steps()) {
                    last_step = Some(state.steps());
                    snapshots.push(snapshot(state, &format!("step {}", state.steps())));
                }
            }
            if end.reached(state, next) {
                Flow::Stop
            } else {
                Flow::Apply
            }
        })?;
        // Steps are the report's (`unapplied_steps`, the one rule): where a loop's iterations
        // began steps before the optimizer's step marks came, the marks alone; in a trace read
        // whole without marks, its repeating allocation. A pass in one go from the index that
        // counted otherwise is read again with them.
        let whole = trace.stopped.is_none()
            && (trace.segments.as_ref()).is_none_or(|f| f.snapshot_events.is_none());
        let again = match trace.state.unapplied_steps() {
            Some(StepSource::StepMarks) => Some(StepSource::StepMarks),
            Some(pattern @ StepSource::Pattern(_)) if whole => Some(pattern),
            _ => None,
        };
        if let Some(steps) = again.filter(|_| source == StepSource::Marks) {
            source = steps;
            passes += 1;
            progress.restart("pass 2 (the trace's steps)");
            continue;
        }
        // Stopped where only a loop's iterations had begun steps: whether the optimizer's step
        // marks come later (then they alone are the steps) only the whole trace says. (Every
        // branch that reads again changes `source`: the loop ends.)
        let iterations_only = trace.state.marks() == 0 && trace.state.iteration_steps() > 0;
        if source == StepSource::Marks && !whole && iterations_only {
            progress.restart("pass 2 (the trace's steps)");
            let all = read_whole(path, &progress)?;
            passes += 1;
            if all.state.unapplied_steps() == Some(StepSource::StepMarks) {
                source = StepSource::StepMarks;
                passes += 1;
                progress.restart("pass 3 (steps from the step marks)");
                continue;
            }
        }
        break (trace, snapshots, at_reached);
    };
    drop(progress);
    for target in std::iter::once(at).chain(until) {
        if let Some(gap) = jumped_over(&trace, target) {
            return Err(anyhow!("{}: {gap}", path.display()));
        }
    }
    let point = args.until.unwrap_or(args.at);
    if trace.stopped.is_none() && !end.reached_at_end(&trace.state) {
        if let (Point::Oom(_), 0, Some(from)) = (
            point,
            trace.state.ooms().total(),
            trace.state.restored().map(|r| r.steps),
        ) {
            // The segments rotation deleted are not read: their failures are not known.
            return Err(anyhow!(
                "{}: no out-of-memory failure since step {from}, where the segments on disk \
                 begin (a segment's snapshot: rotation deleted the segments before it, and any \
                 failure there is not known)",
                path.display()
            ));
        }
        if let (Point::Oom(_), 0) = (point, trace.state.ooms().total()) {
            return Err(anyhow!(
                "{}: the trace has no out-of-memory failure ({})",
                path.display(),
                ends(&trace.state, point)
            ));
        }
        if let (Point::Step(_), 0) = (point, trace.state.steps()) {
            return Err(anyhow!(
                "{}: the trace has no steps (no step marks, no repeating allocation pattern): \
                 give a time since its start (--at 3s) or an event (--at 'event N'); it has {} \
                 events over {}",
                path.display(),
                trace.state.events(),
                crate::render::units::duration(
                    (trace.state.last_time_ns()).saturating_sub(trace.state.trace_start_ns())
                )
            ));
        }
        return Err(anyhow!(
            "{}: the trace ends before {point} ({})",
            path.display(),
            ends(&trace.state, point)
        ));
    }
    if until.is_some() {
        if !at_reached {
            // The same point twice is no stretch to step through.
            let order = match args.at.to_string() == point.to_string() {
                true => "is the same point as",
                false => "comes after",
            };
            return Err(anyhow!(
                "{}: --at {} {order} --until {point}: --until names a later point",
                path.display(),
                args.at
            ));
        }
        // The last step boundary may be the --until point itself.
        if snapshots.last().map(|s: &Snapshot| s.moment.event) != Some(trace.state.events()) {
            snapshots.push(snapshot(&trace.state, &point.to_string()));
        }
    }
    // The report's analysis, PyTorch's view of its tensors beside the driver's (up to the
    // point: the recorder's marks after it are left out).
    let trace = LoadedTrace {
        growth: args.analysis.config(),
        ..trace
    };
    let mut symbols = Symbolizer::from_env();
    let analysis = trace.analyze(&trace.torch_to_point()?, &mut symbols);
    // The peak of a trace whose first segments rotation deleted is the highest point on disk.
    let deleted = (series.first().info())
        .filter(|i| i.index > 1)
        .map(|_| series.first().events_before());
    let said = match (point, deleted) {
        (Point::Peak, Some(n)) => format!(
            "peak (the highest on disk: rotation deleted the first {} events, where a higher \
             one is not known)",
            vramtrace_collector::units::grouped(n)
        ),
        // Failure N itself, which the out-of-memory sections (one per place, its first
        // failure) may not show.
        (Point::Oom(n), _) if n > 1 => {
            let last =
                (analysis.ooms.failures.iter()).rfind(|f| f.failure.seq <= trace.state.last_seq());
            match last {
                Some(f) => format!(
                    "{point} ({} of {} on device {} at {}, in step {})",
                    f.failure.api.name(),
                    crate::render::units::bytes(f.failure.request_bytes),
                    f.failure.device,
                    crate::render::findings::site_label(&f.requester),
                    f.failure.origin.step
                ),
                None => point.to_string(),
            }
        }
        _ => point.to_string(),
    };
    let at = moment(&trace.state, &said);
    let report = ReplayReport {
        schema: SCHEMA,
        trace: path.display().to_string(),
        pid: trace.header.pid,
        segments: (trace.segments.as_ref())
            .filter(|s| s.is_cut())
            .map(|s| s.describe()),
        when: when(point, &at),
        at,
        passes: passes.max(trace.passes),
        snapshots,
        live: trace.state.summary(),
        gaps: match trace.stopped {
            None => trace.gaps(),
            Some(_) => trace.gaps_before_stop(),
        },
        analysis,
    };
    print(&report, &trace, args)
}

fn print(report: &ReplayReport, trace: &LoadedTrace, args: &ReplayArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, report)
            .map_err(std::io::Error::from)
            .context("writing the replay")?;
        writeln!(out).context("writing the replay")?;
    } else {
        render::render(&mut out, report, trace, args.top).context("writing the replay")?;
    }
    Ok(())
}

/// The whole trace at `path`, read to learn what only all of it says (its steps, its peak).
fn read_whole(path: &std::path::Path, progress: &Progress) -> Result<LoadedTrace> {
    read(
        path,
        ReadFrom::First,
        StepSource::Marks,
        progress,
        |_, _| Flow::Apply,
    )
}

/// The moment replayed to, as the tables' titles say it: `at step 12`, `at the peak (event
/// 109)`, `after event 5000`.
fn when(point: Point, at: &Moment) -> String {
    match point {
        Point::Peak => format!("at the peak (event {})", at.event),
        Point::Event(_) => format!("after {point}"),
        Point::Time(_) => point.to_string(),
        Point::Step(_) | Point::Oom(_) => format!("at {point}"),
        Point::End => "at the end".to_string(),
    }
}

/// How far a trace goes, for the error when a point is past its end.
fn ends(state: &LiveState, point: Point) -> String {
    let span = match point {
        Point::Time(_) => {
            // From a second on, to the millisecond, as a time is asked: a span rounded up to
            // the time asked would read as reaching it.
            let span = state.last_time_ns().saturating_sub(state.trace_start_ns());
            let said = match span >= 1_000_000_000 {
                true => point::as_asked(span - span % 1_000_000),
                false => crate::render::units::duration(span),
            };
            format!(" over {said}")
        }
        _ => String::new(),
    };
    // Steps guessed from the allocation pattern may each span several of the program's: a step
    // the program reached may be past the last of them.
    let guessed = match state.step_source() {
        StepSource::Pattern(_) => {
            "; its steps are guessed from the allocation pattern, and one \
                                   may span several of the program's: mark steps for its own"
        }
        _ => "",
    };
    let count = crate::render::units::count;
    format!(
        "it has {}{span}, {} and {}{guessed}",
        count(state.events(), "event"),
        count(state.steps(), "step"),
        count(state.ooms().total(), "out-of-memory failure")
    )
}

fn moment(state: &LiveState, point: &str) -> Moment {
    Moment {
        point: point.to_string(),
        event: state.events(),
        seq: state.last_seq(),
        time_ns: state.last_time_ns(),
        since_first_ns: state.last_time_ns().saturating_sub(state.trace_start_ns()),
        step: state.steps(),
    }
}

fn snapshot(state: &LiveState, point: &str) -> Snapshot {
    Snapshot {
        moment: moment(state, point),
        holders: state
            .holders()
            .into_iter()
            .map(|h| HolderNow {
                holder: h.holder,
                count: h.count,
                bytes: h.bytes,
            })
            .collect(),
    }
}

/// Why `target` cannot be replayed when the segments that held it were deleted to keep the
/// trace's disk budget: the state there is gone, and the oldest snapshot is later.
fn rotated_away(series: &Series, target: Target) -> Option<String> {
    if matches!(target, Target::Oom(_) | Target::End) || !removed_point(series, target.read_from())
    {
        return None;
    }
    let first = series.first();
    let info = first.info()?;
    // To the millisecond, rounded up: the time said is the first a replay can be asked for.
    let since_start = info.time_ns.saturating_sub(series.origin_ns());
    let since_start = since_start.div_ceil(1_000_000) * 1_000_000;
    let what = match target {
        Target::Step(n) => format!("step {n}"),
        Target::Event(n) => format!("event {n}"),
        Target::Time(t) => format!("{} after the first event", point::as_asked(t)),
        Target::Oom(_) | Target::End => return None,
    };
    Some(format!(
        "{what} was removed by rotation (VRAMTRACE_MAX_BYTES): the trace there begins with \
         segment {}, after step {} and {} events ({} after the first event)",
        info.index,
        info.steps,
        info.events_before,
        point::as_asked(since_start)
    ))
}

/// Why `target` cannot be replayed when it lies in a segment missing from the middle of the
/// trace: the reading jumped over it to the next segment's snapshot, and the state there is
/// not known (what the replay would show is a later moment's).
fn jumped_over(trace: &LoadedTrace, target: Target) -> Option<String> {
    let gap = (trace.unread.iter()).find(|u| u.bytes == 0 && !u.torn && u.events.is_some())?;
    let r = trace.state.restored()?;
    let what = match target {
        Target::Step(n) if n <= r.steps => format!("step {n}"),
        Target::Event(n) if n <= r.events => format!("event {n}"),
        Target::Time(t) if trace.state.trace_start_ns().saturating_add(t) < r.time_ns => {
            format!(
                "{} after the first event",
                crate::render::units::duration(t)
            )
        }
        _ => return None,
    };
    Some(format!(
        "{what} lies in what the trace is missing ({}): the state there is not known; the \
         trace goes on after event {}, in step {}",
        gap.reason, r.events, r.steps
    ))
}

/// A point resolved against the trace.
#[derive(Clone, Copy, Debug)]
enum Target {
    Event(u64),
    Step(u64),
    Time(u64),
    Oom(u64),
    End,
}

impl Target {
    /// Where reading may start for this point: the segment that holds it, or an earlier one.
    fn read_from(self) -> ReadFrom {
        match self {
            Target::Event(n) => ReadFrom::Event(n),
            Target::Step(n) => ReadFrom::Step(n),
            Target::Time(t) => ReadFrom::Time(t),
            Target::Oom(_) => ReadFrom::First,
            // The live set at the end: the last segment holds it.
            Target::End => ReadFrom::Last(0),
        }
    }

    /// Whether the state, before applying `next`, is at the point.
    fn reached(self, state: &LiveState, next: &Event) -> bool {
        match self {
            Target::Event(n) => state.events() >= n,
            Target::Step(n) => state.steps() >= n,
            Target::Time(t) => {
                state.events() > 0 && next.time_ns.saturating_sub(state.trace_start_ns()) > t
            }
            Target::Oom(n) => state.ooms().total() >= n,
            Target::End => false,
        }
    }

    /// Whether a trace read to its end reached the point.
    fn reached_at_end(self, state: &LiveState) -> bool {
        match self {
            Target::Event(n) => state.events() >= n,
            Target::Step(n) => state.steps() >= n,
            // The same rule as a step or an event: the trace must reach the time.
            Target::Time(t) => {
                state.events() > 0
                    && state.last_time_ns().saturating_sub(state.trace_start_ns()) >= t
            }
            Target::Oom(n) => state.ooms().total() >= n,
            Target::End => true,
        }
    }
}
