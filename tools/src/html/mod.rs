//! `vramtrace report --html`: the report as one self-contained page — the DIAGNOSIS, the chart of
//! live device memory over steps or time, the FINDINGS and the analyses' tables — that opens in
//! any browser without a network and can be mailed.
//!
//! The words come from the same [`Report`] and the same functions as the terminal report's
//! (`findings::summary_lines`, `findings::diagnosis::words`), through the template `page.html`
//! (exact bytes in each cell's title); the chart is drawn in the browser by `chart.js` from the
//! [`Timeline`] gathered while the trace was read, embedded as JSON. Stacks are looked up here,
//! once, for every holder a click can ask about.

mod data;

use std::path::Path;

use anyhow::{Context, Result};
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment};
use serde::Serialize;
use vramtrace_collector::symbols::Symbolizer;
use vramtrace_collector::units::base_name;

use crate::load::LoadedTrace;
use crate::options::ReportArgs;
use crate::output::OutputFile;
use crate::render::findings::diagnosis::{self, Diagnosis};
use crate::render::findings::SummaryLine;
use crate::render::units::{bytes, duration, signed_bytes};
use crate::report::Report;
use crate::timeline::Timeline;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("chart.js");
const STYLE: &str = include_str!("page.css");

/// Stretches the chart keeps: enough for a wide screen, few enough that the page stays small.
pub const CHART_STRETCHES: usize = 800;
/// NVTX ranges and marks the chart keeps.
pub const CHART_RANGES: usize = 2000;

/// Runs `vramtrace report --html PATH` (the report's flags pick the trace, the ranking, the
/// analysis options and the limits); returns the exit code, as `report` does.
pub fn run(args: &ReportArgs, path: &Path) -> Result<u8> {
    let paths = crate::load::inputs::expand(&args.traces)?;
    let [one] = &paths[..] else {
        let given = match &args.traces[..] {
            [dir] if dir.is_dir() => format!("{} holds {}", dir.display(), paths.len()),
            _ => format!("{} given", paths.len()),
        };
        anyhow::bail!("--html takes one trace ({given}): name one; the text report reads several");
    };
    let page = OutputFile::prepare(path, args.force, &crate::load::inputs::files_of(&paths))?;
    write_page(args, one, &page)
}

/// `vramtrace report --html PATH`: the page, and one line on stderr saying where it went.
fn write_page(args: &ReportArgs, trace: &Path, page: &OutputFile) -> Result<u8> {
    let (trace, timeline) = crate::timeline::load_with_timeline(
        trace,
        args.window.read_from(),
        args.analysis.config(),
        CHART_STRETCHES,
        CHART_RANGES,
    )?;
    let mut symbols = Symbolizer::from_env();
    let report = Report::new(&trace, args.top, args.by.granularity(), &mut symbols);
    let size = write(page, &trace, &report, &timeline, &mut symbols)?;
    if !page.is_stdout() {
        say!("wrote {} ({})", page.path().display(), bytes(size));
    }
    crate::report::fail_on(args, &[&report], Vec::new())
}

/// Everything the template reads.
#[derive(Serialize)]
struct Page<'a> {
    title: String,
    report: &'a Report<'a>,
    findings: Vec<SummaryLine>,
    /// The report's first line, as the text report says it: what a reader acts on.
    verdict: String,
    diagnosis: Option<Diagnosis>,
    top: usize,
    duration: String,
    /// For a trace cut into segments: which were read and what rotation removed, in words.
    segments: Option<String>,
    /// The x axis and the grouping the chart opens with.
    chart_axis: &'static str,
    chart_by: &'static str,
    chart_note: String,
    style: &'static str,
    script: &'static str,
    /// The chart's data as JSON, safe inside a `<script>` element.
    data: String,
}

/// JSON that cannot end the `<script>` element it sits in: every `<` is escaped (it can only
/// occur inside strings, where `\u003c` means the same).
fn script_json(value: &impl Serialize) -> Result<String> {
    let json = serde_json::to_string(value).context("encoding the chart data")?;
    Ok(json.replace('<', "\\u003c"))
}

/// Renders the page of `report` (of `trace`, read with `timeline`).
pub fn render(
    trace: &LoadedTrace,
    report: &Report<'_>,
    timeline: &Timeline,
    symbols: &mut Symbolizer,
) -> Result<String> {
    let chart = data::chart(trace, report, timeline, symbols);
    let when = "at the end";
    let span = timeline
        .last_ns
        .saturating_sub(timeline.first_ns.unwrap_or(0));
    let before = match timeline.first_step {
        0 => "step 0 is the start-up before the first".to_string(),
        f => format!(
            "the trace read begins in step {f}, whose start was not read: the steps are {}-{}",
            f + 1,
            f + timeline.step_starts.len() as u64
        ),
    };
    let steps = match timeline.step_starts.len() {
        0 => "No steps: the x axis is time.".to_string(),
        n => format!(
            "{n} step{}{}: on the steps axis each step has the same width ({before}), on the \
             time axis its duration.",
            if n == 1 { "" } else { "s" },
            if chart.steps.len() < n {
                format!(" (a tick every {} steps)", chart.steps_every)
            } else {
                String::new()
            }
        ),
    };
    let points = match timeline.stride() {
        1 => "Each point is one event, the bands what each holder held after it.".to_string(),
        n => format!(
            "Each point covers {n} consecutive events; the grey envelope spans the lowest and \
             highest live bytes within them, the bands what each holder held at their end."
        ),
    };
    let chart_note = format!(
        "{points} {steps} Shaded: the phases the analysis found; red flags: the alerts the \
         tracer raised while the program ran. The tables hold exact numbers."
    );
    let page = Page {
        title: format!("vramtrace: {}", program_name(report.trace.command_line)),
        report,
        findings: crate::render::findings::summary_lines(&report.analysis, when, &report.gaps()),
        verdict: diagnosis::verdict(&report.analysis, &report.gaps(), true),
        diagnosis: diagnosis::words(&report.analysis, report.top, when),
        top: report.top,
        duration: duration(span),
        segments: (report.reading.segments.as_ref())
            .filter(|s| s.is_cut())
            .map(|s| s.describe()),
        chart_axis: chart.axis,
        chart_by: chart.by,
        chart_note,
        style: STYLE,
        script: SCRIPT,
        data: script_json(&chart)?,
    };
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.add_filter("bytes", |n: u64| bytes(n));
    env.add_filter("signed_bytes", |n: f64| signed_bytes(n));
    env.add_filter("duration", |n: u64| duration(n));
    env.add_filter("count", |n: u64, noun: String| {
        crate::render::units::count(n, &noun)
    });
    env.add_template("page.html", PAGE)
        .context("reading the page template")?;
    let template = env.get_template("page.html")?;
    template
        .render(Serde(&page))
        .map_err(|e| anyhow::anyhow!("rendering the page: {e:#}"))
}

/// Writes the page to `to`; returns its size in bytes.
pub fn write(
    to: &OutputFile,
    trace: &LoadedTrace,
    report: &Report<'_>,
    timeline: &Timeline,
    symbols: &mut Symbolizer,
) -> Result<u64> {
    let page = render(trace, report, timeline, symbols)?;
    let ((), size) = to.write(|out| Ok(out.write_all(page.as_bytes())?))?;
    Ok(size)
}

/// The program a command line ran, for the page's title: an interpreter's script or module
/// (`python3 train.py` is `train.py`, `python3 -m pkg.run` is `pkg.run`), else the program
/// itself; `trace` without a command line.
fn program_name(command_line: &[String]) -> &str {
    let Some(first) = command_line.first() else {
        return "trace";
    };
    let program = base_name(first);
    if !(program == "python" || program.starts_with("python3")) {
        return program;
    }
    let mut args = command_line[1..].iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-c" => return program,
            "-m" => return args.next().map_or(program, |m| m.as_str()),
            a if a.starts_with('-') => {}
            script => return base_name(script),
        }
    }
    program
}

#[cfg(test)]
mod tests {
    use super::program_name;

    #[test]
    fn a_page_is_named_by_the_script_a_python_ran() {
        let name = |args: &[&str]| {
            let line: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            program_name(&line).to_string()
        };
        assert_eq!(
            name(&["/usr/bin/python3", "-u", "/w/train.py", "--lr", "1"]),
            "train.py"
        );
        assert_eq!(
            name(&["python3.12", "-m", "torch.distributed.run", "x.py"]),
            "torch.distributed.run"
        );
        assert_eq!(name(&["python", "-c", "print(1)"]), "python");
        assert_eq!(name(&["./wl_train", "--extra-leak"]), "wl_train");
        assert_eq!(name(&[]), "trace");
    }
}
