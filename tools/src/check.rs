//! `vramtrace check`: runs a program under the tracer as `run` does, then measures each trace it
//! wrote against the limits ([`crate::limits`]) and exits so that a CI job can gate on it.
//!
//! The exit code, in order: the program's own when it failed (non-zero, or 128 + the signal that
//! killed it), since a failing test run must stay a failure and must not be mistaken for a
//! leak; 2 when vramtrace could not check everything (a bad flag; the tracer not loaded, or
//! disabled; a program exec'd without it; a process whose trace could not be written; a process
//! the command left running; a trace that cannot be read, is cut short or lost events); 1 when a trace exceeds a limit; 0 otherwise. What was not seen is
//! never "ok": the run's processes say what became of them (`crate::run`'s status directory).
//!
//! The same flag means the same thing in every command: `--max-growth` is a size per step as in
//! `diff`, `--max-orphans` a number of orphans as in `diff`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use vramtrace_collector::symbols::{Granularity, Symbolizer};
use vramtrace_collector::units::{parse_count, parse_rate, parse_size};

use crate::limits::{could_not_check, measure, render, Limit, Measured};
use crate::load::{load_with_steps, ReadFrom};
use crate::options::AnalysisArgs;
use crate::options::TracerArgs;
use crate::output::OutputFile;
use crate::render::units::count;
use crate::report::Report;

pub const EXAMPLES: &str = "\
EXIT STATUS:
    the program's own exit code when it failed (128 + N when signal N killed it; 127 when it is
    not found and 126 when it cannot be run, as a shell says it); else 2 when
    vramtrace could not check everything: a bad flag, the tracer library not loaded or disabled
    (VRAMTRACE_DISABLE), a program exec'd with an environment that no longer preloads it (env -i,
    sudo), a process whose trace could not be written (a read-only directory) or given a
    narrower VRAMTRACE_CAPTURE in the command, a process still running 5 s after the command
    exited (its trace is not whole), a trace that cannot be read, is cut short or lost events;
    else 1 when a trace exceeds a limit; else 0 (also for a program that made no GPU memory
    call). Without --max-growth, growth fails when the growth verdict says ALERT (as `vramtrace
    report` does); in a trace whose first segments rotation deleted, also when the tracer
    alerted while the program ran. Only the run's own processes' traces are judged.

EXAMPLES:
    A CI gate on a test suite: fail when memory grows steadily step after step:
        vramtrace check -- python -m pytest tests/

    Code that frees all it allocates (a CUDA library's tests): fail on any byte live at exit, or
    any orphan (a PyTorch program ends with its weights and cached segments live: gate it on
    growth):
        vramtrace check --max-leak 0 --max-orphans 0 -- ./build/test_kernels

    Fail on any steady growth above 1 MiB per step, whatever the device's size:
        vramtrace check --max-growth 1MiB/step -- python train.py --steps 200

    Fail when the device ran out of memory, even where the program caught it and went on:
        vramtrace check --max-ooms 0 -- python train.py --steps 200

    The verdict as JSON for the CI job (what each limit found, what could not be checked):
        vramtrace check --json check.json -- python train.py --steps 200

    The same limits on traces already taken:
        vramtrace report --fail-on growth,orphans=0 traces/";

/// The `schema` of `check --json`.
const SCHEMA: &str = "vramtrace-check/1";

/// `VRAMTRACE_CAPTURE` in the header of a trace of every layer.
const ALL_LAYERS: &str = "runtime,driver,nccl,host";

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Fail when more than SIZE of device memory is live at the end of a trace (0: any).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, allow_hyphen_values = true)]
    pub max_leak: Option<u64>,
    /// Fail when a device grows steadily by more than SIZE per step; a trace without steps (none
    /// marked, no repeating allocation pattern), or one that grows per step guessed from the
    /// pattern, cannot be compared with it: exit 2. Default: fail when the growth verdict alerts (growth above
    /// --alert-percent of device memory per step, or the device full within the horizon).
    #[arg(long, value_name = "SIZE/step", value_parser = parse_rate, allow_hyphen_values = true)]
    pub max_growth: Option<u64>,
    /// Fail on more than N orphans (memory whose owner is gone).
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub max_orphans: Option<u64>,
    /// Fail on more than N out-of-memory failures (a program that catches them, to retry with
    /// a smaller batch, goes on and exits 0).
    #[arg(long, value_name = "N", value_parser = parse_count, allow_hyphen_values = true)]
    pub max_ooms: Option<u64>,
    /// Also write the verdict as one JSON document to PATH, for a CI job to read (schema:
    /// docs/report-json.md, "check --json"); `-` prints it on standard output after the
    /// program's own output. A file that exists is left alone, before the program runs, unless
    /// --force is given.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Replace the --json file if it exists.
    #[arg(long, requires = "json")]
    pub force: bool,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
    #[command(flatten)]
    pub tracer: TracerArgs,
    /// The program to run and its arguments.
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

impl CheckArgs {
    /// The limits asked for, growth first.
    pub fn limits(&self) -> Vec<Limit> {
        let growth = self.max_growth.map_or(Limit::GrowthAlert, Limit::Growth);
        let leak = self.max_leak.map(Limit::Leak);
        let orphans = self.max_orphans.map(Limit::Orphans);
        let ooms = self.max_ooms.map(Limit::Oom);
        [Some(growth), leak, orphans, ooms]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Runs `vramtrace check`; returns the exit code to leave with.
pub fn run(args: &CheckArgs) -> Result<u8> {
    // A limit written after the command is the program's argument, and checks nothing: said
    // before the program runs, so that a gate that passes is not read as having checked it.
    let limits = [
        "--max-leak",
        "--max-growth",
        "--max-orphans",
        "--max-ooms",
        "--json",
    ];
    let misplaced: Vec<String> = (args.command.iter().skip(1))
        .filter_map(|a| a.to_str())
        .filter(|a| {
            limits
                .iter()
                .any(|l| a == l || a.starts_with(&format!("{l}=")))
        })
        .map(str::to_string)
        .collect();
    if !misplaced.is_empty() {
        eprintln!(
            "vramtrace check: note: {} after the command {} the program's, not check's (check's \
             flags come before the command): not checked",
            misplaced.join(", "),
            if misplaced.len() == 1 { "is" } else { "are" }
        );
    }
    // Decided before the program runs: a file that exists is left alone unless asked.
    let json = (args.json.as_deref())
        .map(|path| OutputFile::prepare(path, args.force, &[]))
        .transpose()?;
    let mut document = Document::default();
    let exit = judge(args, &mut document);
    let Some(file) = json else { return exit };
    document.exit_code = match &exit {
        Ok(code) => *code,
        Err(_) => crate::output::ERROR_EXIT,
    };
    if let Err(e) = &exit {
        document.error.get_or_insert_with(|| format!("{e:#}"));
    }
    if document.verdict.is_empty() {
        document.verdict = "not-checked";
    }
    let written = file.write(|out| {
        serde_json::to_writer_pretty(&mut *out, &document)?;
        writeln!(out)?;
        Ok(())
    });
    // The verdict is the exit code; a JSON file that could not be written is said, and makes
    // an ok no ok.
    match (written, exit) {
        (Ok(_), exit) => exit,
        (Err(e), Ok(0)) => Err(e),
        (Err(e), exit) => {
            say!("error: {e:#}");
            exit
        }
    }
}

/// The verdict of `vramtrace check --json` (docs/report-json.md, "check --json").
#[derive(Debug, Default, Serialize)]
struct Document {
    schema: &'static str,
    /// `ok` (exit 0), `failed` (1), `not-checked` (2), or `program-failed` (the program's own
    /// exit code).
    verdict: &'static str,
    exit_code: u8,
    /// The program's exit code (128 + N when signal N ended it).
    program_exit_code: Option<u8>,
    /// Each trace the run's processes wrote, as its lines on standard error say it.
    traces: Vec<TraceChecked>,
    /// Everything that keeps the run from being checked in full: each trace's gaps, naming
    /// it, and what no trace shows (a process run untraced, a trace that is gone).
    not_checked: Vec<String>,
    /// Why vramtrace itself could not go on, where it could not (the error line).
    error: Option<String>,
}

/// One trace's verdict.
#[derive(Debug, Serialize)]
struct TraceChecked {
    trace: PathBuf,
    /// `null` for a trace that could not be read.
    pid: Option<u32>,
    /// `ok`, `failed`, or `not-checked` (read in part or not at all, whatever it exceeded).
    verdict: &'static str,
    limits: Vec<Measured>,
    not_checked: Vec<String>,
    /// What it found that no limit asked about.
    notes: Vec<String>,
}

/// Runs the program and judges its traces, telling `document` what it found; returns the
/// exit code, or the error that is exit 2.
fn judge(args: &CheckArgs, document: &mut Document) -> Result<u8> {
    document.schema = SCHEMA;
    let ran = match crate::run::launch(&args.tracer, &args.command, crate::run::Layers::All) {
        Ok(ran) => ran,
        // As `run` and a shell say it: 127 for a program not found, 126 for one that cannot
        // run; a failing program's code, not vramtrace's 2.
        Err(e) => match e.downcast_ref::<crate::run::NotStarted>() {
            Some(n) => {
                say!("error: {n}");
                document.verdict = "program-failed";
                document.program_exit_code = Some(n.exit_code());
                document.error = Some(n.to_string());
                return Ok(n.exit_code());
            }
            None => return Err(e),
        },
    };
    document.program_exit_code = Some(ran.exit_code);
    let limits = args.limits();
    let mut err = crate::output::reader_gone::stderr();
    crate::run::say_others(&mut err, &ran).context("writing the verdict")?;
    let mut checked = check_traces(&mut err, &ran.traces, &limits, &args.analysis)?;
    document.traces = std::mem::take(&mut checked.traces);
    // What no trace shows: processes that ran untraced, traces that are gone.
    let mut unseen = crate::run::unseen(&ran);
    // The check gives its command every layer; a process that traced fewer was given a
    // VRAMTRACE_CAPTURE inside it, and what it left out (device memory, a leak) was not seen.
    // A trace says so under its limits; a process whose trace the tracer removed (nothing in
    // the layers it traced) says so here.
    for p in ran.reported.iter().flat_map(|r| &r.processes) {
        if let Some(layers) = p.capture.as_ref().filter(|_| p.traces.is_empty()) {
            unseen.push(format!(
                "pid {} traced only {layers}: VRAMTRACE_CAPTURE was set in the command, and its \
                 other GPU memory calls were not seen",
                p.pid
            ));
        }
    }
    if ran.reported.is_none() {
        unseen.push(
            "whether every process was traced: no status directory could be made in the \
             temporary directory"
                .into(),
        );
    }
    let no_trace = ran.traces.is_empty() && checked.unchecked.is_empty() && unseen.is_empty();
    let made_no_call = ran.reported.as_ref().is_some_and(|r| r.tracing() > 0);
    if no_trace && !made_no_call {
        unseen.push(crate::run::why_no_trace(&ran));
    }
    // One thing alone is said once, by the error line below (unless the program's failure
    // takes the exit).
    let listed_above = checked.unchecked.len() + unseen.len() > 1 || ran.exit_code != 0;
    if listed_above {
        for u in &unseen {
            writeln!(err, "vramtrace check: not checked: {u}").context("writing the verdict")?;
        }
    }
    checked.unchecked.extend(unseen);
    document.not_checked.clone_from(&checked.unchecked);
    document.verdict = match (ran.exit_code, checked.unchecked.is_empty(), checked.failed) {
        (1.., _, _) => "program-failed",
        (0, false, _) => "not-checked",
        (0, true, 1..) => "failed",
        (0, true, 0) => "ok",
    };
    let traces = count(ran.traces.len() as u64, "trace");
    if checked.failed > 0 {
        // Exceeded in what could be read; what could not be read is the error below, which
        // sets the exit code.
        // Where what was not checked is said: the lines above, or the error line below.
        let partly = match (checked.unchecked.is_empty(), listed_above) {
            (true, _) => "",
            (false, true) => "; and not everything could be checked (above)",
            (false, false) => "; and not everything could be checked (below)",
        };
        // Several traces in one directory (a job's ranks): the directory, whose report opens
        // with the rank table and the trace that differs most, not the first that failed.
        let mut dirs: Vec<&std::path::Path> =
            (ran.traces.iter()).filter_map(|t| t.parent()).collect();
        dirs.dedup();
        let details = match (&checked.first_failed, dirs.as_slice()) {
            (Some(trace), _) if checked.failed == 1 => trace.display().to_string(),
            (Some(_), [dir]) if dir.as_os_str().is_empty() => ".".to_string(),
            (Some(_), [dir]) => dir.display().to_string(),
            (Some(trace), _) => format!("{}, and the others", trace.display()),
            (None, _) => "TRACE".to_string(),
        };
        writeln!(
            err,
            "vramtrace check: FAILED: limits exceeded in {} of {traces}: {} (details: vramtrace \
             report {details}){partly}",
            checked.failed,
            checked.limits.join(", "),
        )
        .context("writing the verdict")?;
    }
    if ran.exit_code != 0 {
        writeln!(
            err,
            "vramtrace check: the program failed (exit code {}); exiting with its code",
            ran.exit_code
        )
        .context("writing the verdict")?;
        return Ok(ran.exit_code);
    }
    if !checked.unchecked.is_empty() {
        return Err(could_not_check(&checked.unchecked, checked.failed));
    }
    if checked.failed > 0 {
        return Ok(1);
    }
    let verdict = if no_trace {
        crate::run::why_no_trace(&ran)
    } else {
        format!("{traces} within the limits")
    };
    writeln!(err, "vramtrace check: ok: {verdict}").context("writing the verdict")?;
    Ok(0)
}

/// What the checks of a run's traces found.
#[derive(Debug, Default)]
struct Checked {
    /// The limits exceeded, each once, in the order asked.
    limits: Vec<&'static str>,
    /// Traces that exceeded any.
    failed: usize,
    /// The first of them, for the command that shows why.
    first_failed: Option<PathBuf>,
    /// What could not be checked in full, each naming its trace or process.
    unchecked: Vec<String>,
    /// Each trace's verdict, for `--json`.
    traces: Vec<TraceChecked>,
}

/// Measures and prints each trace; a trace that cannot be read, or only in part, is named in
/// [`Checked::unchecked`] and the others are checked all the same.
fn check_traces(
    out: &mut impl Write,
    traces: &[PathBuf],
    limits: &[Limit],
    analysis: &AnalysisArgs,
) -> Result<Checked> {
    let mut checked = Checked::default();
    for path in traces {
        // Named as every command reads it: a trace cut into segments by its first segment's
        // name, which rotation may have deleted (`run.vtrace`, not `run.seg6.vtrace`).
        let named = vramtrace_collector::format::trace_of(path);
        let t = match measure_trace(out, path, &named, limits, analysis) {
            Ok(t) => t,
            Err(e) => {
                checked.unchecked.push(format!("{e:#}"));
                checked.traces.push(TraceChecked {
                    trace: named,
                    pid: None,
                    verdict: "not-checked",
                    limits: Vec::new(),
                    not_checked: vec![format!("{e:#}")],
                    notes: Vec::new(),
                });
                continue;
            }
        };
        for m in t.limits.iter().filter(|m| m.exceeded) {
            if !checked.limits.contains(&m.limit.name()) {
                checked.limits.push(m.limit.name());
            }
        }
        if t.limits.iter().any(|m| m.exceeded) {
            checked.failed += 1;
            checked.first_failed.get_or_insert_with(|| named.clone());
        }
        render(out, &t.limits, &t.not_checked).context("writing the verdict")?;
        for n in &t.notes {
            writeln!(out, "  note: {n}").context("writing the verdict")?;
        }
        let shown = named.display();
        checked
            .unchecked
            .extend(t.not_checked.iter().map(|g| format!("{shown} {g}")));
        checked.traces.push(t);
    }
    Ok(checked)
}

/// Reads the trace at `path` and measures `limits` on it, printing its heading (naming it
/// `named`); returns its verdict, with what keeps it from being checked in full, and what it
/// found that no limit asked about.
fn measure_trace(
    out: &mut impl Write,
    path: &Path,
    named: &Path,
    limits: &[Limit],
    analysis: &AnalysisArgs,
) -> Result<TraceChecked> {
    let trace = load_with_steps(path, ReadFrom::First, analysis.config())?;
    let mut symbols = Symbolizer::from_env();
    let report = Report::new(&trace, 1, Granularity::Site, &mut symbols);
    // A trace cut into segments is judged on the segments on disk: the heading says which,
    // and what rotation removed.
    let segments = (trace.segments.as_ref())
        .filter(|s| s.is_cut())
        .map_or(String::new(), |s| format!("; segments {}", s.describe()));
    writeln!(
        out,
        "vramtrace check: {} (pid {}, {}{segments})",
        named.display(),
        trace.header.pid,
        trace.ending.describe()
    )
    .context("writing the verdict")?;
    // Orphans are a finding of every report: when no limit asks about them, the gate says it
    // passed them by, rather than nothing.
    let mut notes = Vec::new();
    // A process a signal ended (a crash, a kill the program's own shell hid): what it held then
    // is what the limits measured; said, since its exit code may not say it.
    if let Some(end) = trace.state.end().filter(|e| e.reason.starts_with("signal")) {
        // A call the signal cut off is an event lost: what was made before it may have been
        // freed by it, and is said beside, as the report says it.
        let leaks = &report.analysis.leaks;
        let doubtful = match leaks.uncertain.device.bytes {
            0 => String::new(),
            n => format!(
                "; besides, {} a lost event may have freed",
                crate::render::units::bytes(n)
            ),
        };
        notes.push(format!(
            "the process ended by {} (device memory live then: {}{doubtful})",
            end.reason,
            crate::render::units::bytes(leaks.device.bytes)
        ));
    }
    let orphans = &report.analysis.orphans;
    if !orphans.objects.is_empty() && !limits.iter().any(|l| matches!(l, Limit::Orphans(_))) {
        notes.push(format!(
            "{}; not a limit of this check (--max-orphans 0 makes it one)",
            crate::render::findings::orphans_line(orphans)
        ));
    }
    if report.analysis.ooms.total > 0 && !limits.iter().any(|l| matches!(l, Limit::Oom(_))) {
        notes.push(format!(
            "{}; not a limit of this check (--max-ooms 0 makes it one)",
            crate::render::findings::oom_found(&report.analysis)
        ));
    }
    let mut gaps = report.gaps();
    // The check gives its command every layer: fewer in a trace means a VRAMTRACE_CAPTURE set
    // inside the command, and what the trace left out (device memory, a leak) was not seen.
    let capture = (trace.header.settings.iter()).find(|(k, _)| k == "VRAMTRACE_CAPTURE");
    if let Some((_, layers)) = capture.filter(|(_, v)| v != ALL_LAYERS) {
        gaps.push(format!(
            "captured only {layers}: VRAMTRACE_CAPTURE was set in the command, and the other GPU \
             memory calls were not seen"
        ));
    }
    let measured = measure(&report.analysis, limits, &mut gaps);
    Ok(TraceChecked {
        trace: named.to_path_buf(),
        pid: Some(trace.header.pid),
        verdict: crate::limits::verdict(&measured, &gaps),
        limits: measured,
        not_checked: gaps,
        notes,
    })
}
