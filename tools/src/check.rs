//! `vramtrace check`: runs a program under the tracer as `run` does, then measures each trace it
//! wrote against the limits ([`crate::limits`]) and exits so that a CI job can gate on it.
//!
//! The exit code, in order: the program's own when it failed (non-zero, or 128 + the signal that
//! killed it), since a failing test run must stay a failure and must not be mistaken for a
//! leak; 2 when vramtrace could not check (a bad flag, no tracer loaded, an unreadable trace); 1
//! when a trace passes a limit; 0 otherwise.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Args;
use vramtrace_collector::symbols::{Granularity, Symbolizer};
use vramtrace_collector::units::{parse_count, parse_rate, parse_size};

use crate::limits::{measure, render, Limit, Measured};
use crate::load::load_analyzed;
use crate::options::AnalysisArgs;
use crate::options::TracerArgs;
use crate::report::Report;

pub const EXAMPLES: &str = "\
EXITS WITH:
    the program's own exit code when it failed (128 + N when signal N killed it); else 2 when
    vramtrace could not check (a bad flag, no tracer loaded, an unreadable trace); else 1 when a
    trace passes a limit; else 0. Without --max-growth, growth fails when the growth verdict
    says ALERT (as `vramtrace report` does).

EXAMPLES:
    A CI gate on a test suite: fail when memory grows steadily step after step:
        vramtrace check -- python -m pytest tests/

    Code that frees all it allocates (a CUDA library's tests): fail on any byte live at exit, or
    any orphan (a PyTorch program ends with its weights and cached segments live: gate it on
    growth):
        vramtrace check --max-leak 0 --max-orphans 0 -- ./build/test_kernels

    Fail on any steady growth above 1 MiB per step, whatever the device's size:
        vramtrace check --max-growth 1MiB/step -- python train.py --steps 200

    The same limits on traces already taken:
        vramtrace report --fail-on growth,orphans=0 traces/";

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Fail when more than SIZE of device memory is live at the end of a trace (0: any).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_leak: Option<u64>,
    /// Fail when a device grows steadily by more than SIZE per step (per time window when the
    /// steps cannot be told). Default: fail when the growth verdict alerts (growth above
    /// --alert-percent of device memory per step, or the device full within the horizon).
    #[arg(long, value_name = "SIZE/step", value_parser = parse_rate)]
    pub max_growth: Option<u64>,
    /// Fail on more than N orphans (memory whose owner is gone).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub max_orphans: Option<u64>,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
    #[command(flatten)]
    pub tracer: TracerArgs,
    /// The program to run and its arguments.
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

impl CheckArgs {
    /// The limits asked for, growth first.
    pub fn limits(&self) -> Vec<Limit> {
        let growth = self.max_growth.map_or(Limit::GrowthAlert, Limit::Growth);
        let leak = self.max_leak.map(Limit::Leak);
        let orphans = self.max_orphans.map(Limit::Orphans);
        [Some(growth), leak, orphans]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Runs `vramtrace check`; returns the exit code to leave with.
pub fn run(args: &CheckArgs) -> Result<u8> {
    let ran = crate::run::launch(&args.tracer, &args.command)?;
    let limits = args.limits();
    let mut err = std::io::stderr().lock();
    let checked = check_traces(&mut err, &ran.traces, &limits, &args.analysis);
    if ran.exit_code != 0 {
        if let Err(e) = &checked {
            writeln!(err, "vramtrace check: {e:#}").ok();
        }
        writeln!(
            err,
            "vramtrace check: the program failed (exit code {}); exiting with its code",
            ran.exit_code
        )
        .ok();
        return Ok(ran.exit_code);
    }
    let failed = checked?;
    if ran.traces.is_empty() {
        let why = crate::run::why_no_trace(ran.loaded);
        if ran.loaded.is_some_and(|l| l.tracing > 0) {
            writeln!(err, "vramtrace check: ok: {why}").context("writing the verdict")?;
            return Ok(0);
        }
        bail!("nothing to check: {why}");
    }
    let traces = plural(ran.traces.len(), "trace");
    let verdict = if failed.traces == 0 {
        format!("ok: {traces} within the limits")
    } else {
        format!(
            "FAILED: {} passed in {} of {traces} (details: vramtrace report TRACE)",
            failed.limits.join(", "),
            failed.traces
        )
    };
    writeln!(err, "vramtrace check: {verdict}").context("writing the verdict")?;
    Ok(u8::from(failed.traces > 0))
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// What failed in a run's traces.
#[derive(Debug, Default)]
struct Failed {
    /// The limits passed, each once, in the order asked.
    limits: Vec<&'static str>,
    /// Traces that passed any.
    traces: usize,
}

/// Measures and prints each trace.
fn check_traces(
    out: &mut impl Write,
    traces: &[std::path::PathBuf],
    limits: &[Limit],
    analysis: &AnalysisArgs,
) -> Result<Failed> {
    let mut failed = Failed::default();
    for path in traces {
        let measured = measure_trace(out, path, limits, analysis)?;
        for m in measured.iter().filter(|m| m.passed) {
            if !failed.limits.contains(&m.limit.name()) {
                failed.limits.push(m.limit.name());
            }
        }
        failed.traces += usize::from(measured.iter().any(|m| m.passed));
        render(out, &measured).context("writing the verdict")?;
    }
    Ok(failed)
}

/// Reads the trace at `path` and measures `limits` on it, printing its heading.
fn measure_trace(
    out: &mut impl Write,
    path: &Path,
    limits: &[Limit],
    analysis: &AnalysisArgs,
) -> Result<Vec<Measured>> {
    let trace = load_analyzed(path, analysis.config())?;
    let mut symbols = Symbolizer::from_env();
    let report = Report::new(&trace, 1, Granularity::Site, &mut symbols);
    writeln!(
        out,
        "vramtrace check: {} (pid {}, {})",
        path.display(),
        trace.header.pid,
        trace.ending.describe()
    )
    .context("writing the verdict")?;
    Ok(measure(&report.analysis, limits))
}
