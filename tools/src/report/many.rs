//! `vramtrace report` of several traces (files, or directories of them: one per rank or
//! process), on one page: the rank table first, the trace that differs most from the median
//! named at its head; then the report of each trace the table marks as differing from the
//! others (odd: far from the median in some number, or with a finding fewer than half of the
//! others have), in the table's order; then one line for every other trace. Traces alike that
//! all alert (every rank leaking the same way) have the first one's report in full, standing
//! for all. `--all` prints every report in full. As JSON, one document holding the rows and
//! every report.
//!
//! Traces that cannot be read (a rank that died before its tracer wrote) are named first, as
//! what the page leaves out: the others are reported all the same, and `--fail-on` cannot pass.

use std::io::Write;

use anyhow::{Context, Result};
use rayon::prelude::*;
use serde::Serialize;
use vramtrace_collector::analysis::{FindingClass, Severity};
use vramtrace_collector::compare::{rank_rows, RankRow};

use super::{text, Report};
use crate::load::inputs::{load_all, unreadable_list, Readable, Unreadable};
use crate::options::ReportArgs;
use crate::ranks::{missing_ranks, missing_words, rank_input, render, who, JobPlace};
use crate::render::findings::site_label;
use crate::render::units::{bytes, signed_bytes};

/// Version of the document's shape.
pub const SCHEMA: &str = "vramtrace-ranks/1";

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    /// The traces, the one farthest from the median first.
    ranks: &'a [RankRow],
    /// The report of each trace, in the order of `ranks`.
    reports: Vec<&'a Report<'a>>,
    /// The traces that could not be read, in none of the above.
    unreadable: &'a [Unreadable],
    /// With `--fail-on`: the verdict of every trace together, as the exit code gives it
    /// (`not-checked`, exit 2, when a trace cannot be read or was not checked in full;
    /// `failed`, 1; `ok`, 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    limits_verdict: Option<&'static str>,
    /// The ranks of the job, below the world size its traces name, that no trace here has.
    missing_ranks: Vec<i32>,
}

/// Where each report's trace stands in its job, for [`missing_ranks`].
fn places(reports: &[&Report<'_>]) -> Vec<JobPlace> {
    (reports.iter())
        .map(|r| (r.trace.rank, r.trace.local_rank, r.trace.world_size))
        .collect()
}

/// Reports the traces at `paths`.
pub fn run(args: &ReportArgs, found: &Readable) -> Result<u8> {
    let runs = load_all(
        &found.traces,
        args.window.read_from(),
        args.analysis.config(),
        Ok,
    )?;
    let granularity = args.by.granularity();
    let reports: Vec<Report<'_>> = runs
        .par_iter()
        .map(|run| {
            let mut symbols = crate::load::thread_symbolizer();
            let analysis = run.analysis.clone();
            let (top, torch) = (args.top, &run.torch);
            let mut report =
                Report::with_analysis(&run.trace, torch, analysis, top, granularity, &mut symbols);
            crate::load::keep_symbolizer(symbols);
            report.with_limits(&args.fail_on);
            report
        })
        .collect();
    // The table reads the reports' analyses: their sites are labelled as the reports say them.
    let inputs: Vec<_> = (runs.iter().zip(&reports))
        .map(|(run, report)| rank_input(run, &report.analysis))
        .collect();
    let rows = rank_rows(&inputs);
    let in_order: Vec<&Report<'_>> = (rows.iter())
        .map(|r| {
            let found = inputs.iter().position(|i| i.path == r.path);
            &reports[found.expect("every row comes from an input")]
        })
        .collect();
    let mut out = crate::output::reader_gone::stdout();
    if args.json {
        let doc = Document {
            schema: SCHEMA,
            ranks: &rows,
            reports: in_order.clone(),
            unreadable: &found.unreadable,
            limits_verdict: limits_verdict(args, &in_order, found),
            missing_ranks: missing_ranks(&places(&in_order)),
        };
        serde_json::to_writer_pretty(&mut out, &doc)
            .map_err(std::io::Error::from)
            .context("writing the report")?;
        writeln!(out).context("writing the report")?;
    } else {
        text_reports(&mut out, args, &rows, &in_order, found).context("writing the report")?;
    }
    out.flush().context("writing the report")?;
    // A rank the job had and the directory has not was not checked: the gate cannot pass it.
    let unread = (found.unreadable.iter())
        .map(|u| format!("{} cannot be read", u.path))
        .chain(missing_words(&places(&in_order)))
        .collect();
    super::fail_on(args, &in_order, unread)
}

/// The verdict of `--fail-on` over every trace (`None` without limits).
fn limits_verdict(
    args: &ReportArgs,
    reports: &[&Report<'_>],
    found: &Readable,
) -> Option<&'static str> {
    if args.fail_on.is_empty() {
        return None;
    }
    let verdicts: Vec<&str> = (reports.iter())
        .filter_map(|r| r.limits.as_ref().map(|c| c.verdict))
        .collect();
    let unseen = !found.unreadable.is_empty() || !missing_ranks(&places(reports)).is_empty();
    Some(if unseen || verdicts.contains(&"not-checked") {
        "not-checked"
    } else if verdicts.contains(&"failed") {
        "failed"
    } else {
        "ok"
    })
}

fn text_reports(
    mut out: &mut impl Write,
    args: &ReportArgs,
    rows: &[RankRow],
    reports: &[&Report<'_>],
    found: &Readable,
) -> std::io::Result<()> {
    if found.unreadable.is_empty() {
        writeln!(out, "vramtrace report: {} traces", rows.len())?;
    } else {
        writeln!(
            out,
            "vramtrace report: {} of {} traces\nINCOMPLETE: {} cannot be read and {} not in \
             this page: {}",
            rows.len(),
            found.total(),
            found.unreadable.len(),
            if found.unreadable.len() == 1 {
                "is"
            } else {
                "are"
            },
            unreadable_list(&found.unreadable)
        )?;
    }
    let absent = missing_ranks(&places(reports));
    if let Some(missing) = missing_words(&places(reports)) {
        let its = if absent.len() == 1 { "its" } else { "their" };
        writeln!(
            out,
            "INCOMPLETE: {missing} (a rank that died before its tracer wrote, or a file not \
             copied): {its} memory is in no number of this page"
        )?;
    }
    // One trace left has no others to be compared with: its report alone.
    let alone = rows.len() == 1;
    if !alone {
        render(&mut out, rows)?;
    }
    // No trace stands out, but they alert alike (every rank of a data-parallel job leaking the
    // same way): the first that alerts is printed in full for all of them, else the page would
    // say the leak only in one-line summaries.
    let alerts =
        |r: &Report<'_>| (r.analysis.diagnosis.iter()).any(|f| f.severity == Severity::Alert);
    let stands_for_all = (!args.all && !alone && !rows.iter().any(|r| r.odd))
        .then(|| reports.iter().position(|r| alerts(r)))
        .flatten();
    // Where one trace differs from most that grow alike (a healthy rank among leaking ones),
    // the first of those that alerts is printed in full too: the leak is what the job is
    // about, not only the trace that differs.
    let majority = crate::ranks::majority_growth(rows).filter(|_| !args.all && !alone);
    // Not where each trace printed in full says that growth already (a rank with one more
    // leak).
    let says = |report: &Report<'_>, site: &str| {
        (report.analysis.diagnosis.iter()).any(|f| {
            f.class == FindingClass::SteadyGrowth
                && f.site.as_ref().is_some_and(|s| site_label(s) == site)
        })
    };
    let majority = majority.filter(|(_, site)| {
        (rows.iter().zip(reports))
            .filter(|(r, _)| r.odd)
            .any(|(_, report)| !says(report, site))
    });
    let stands_for_most = majority.as_ref().and_then(|(_, site)| {
        (rows.iter().zip(reports).enumerate())
            .find(|(_, (r, report))| {
                !r.odd && r.growth_at.as_deref() == Some(site.as_str()) && alerts(report)
            })
            .map(|(i, _)| i)
    });
    let stands_for = stands_for_all.or(stands_for_most);
    let full = |i: usize, r: &RankRow| args.all || alone || r.odd || stands_for == Some(i);
    for (i, (row, report)) in rows.iter().zip(reports).enumerate() {
        if !full(i, row) {
            continue;
        }
        let why = match (stands_for_all, stands_for_most == Some(i)) {
            (Some(_), _) => ": the traces are alike, its report stands for all of them",
            (None, true) => ": it grows as most traces do, its report stands for them",
            (None, false) => "",
        };
        writeln!(
            out,
            "\n════ {} ({}){why} ════\n",
            who(row.rank, row.pid),
            row.path
        )?;
        text::render(&mut out, report, args.by, args.full_stacks)?;
    }
    let rest: Vec<(&RankRow, &&Report<'_>)> = (rows.iter().zip(reports).enumerate())
        .filter(|(i, (r, _))| !full(*i, r))
        .map(|(_, pair)| pair)
        .collect();
    if rest.is_empty() {
        return Ok(());
    }
    let odd = rows.iter().filter(|r| r.odd).count();
    let heading = if stands_for.is_some() {
        "The other traces, like it: one line each (--all prints every report)"
    } else if odd == 0 {
        "No trace is odd (none is 50% off the median in a number, none grows steadily where the \
         others do not): one line each (--all prints every report)"
    } else {
        "The other traces, like the median: one line each (--all prints every report)"
    };
    writeln!(out, "\n{heading}")?;
    for (row, report) in rest {
        writeln!(out, "  {}", summary_line(row, report))?;
    }
    Ok(())
}

/// One trace in one line: who, what it holds and how it grows, its findings, its file.
fn summary_line(r: &RankRow, report: &Report<'_>) -> String {
    let diagnosis = &report.analysis.diagnosis;
    let count = |s: Severity| diagnosis.iter().filter(|f| f.severity == s).count();
    let findings = match diagnosis.len() {
        0 => "no findings".to_string(),
        n => {
            let kinds: Vec<String> = [
                (Severity::Alert, "alert"),
                (Severity::Warning, "warning"),
                (Severity::Note, "note"),
            ]
            .into_iter()
            .filter(|&(s, _)| count(s) > 0)
            .map(|(s, name)| format!("{} {name}{}", count(s), plural(count(s))))
            .collect();
            format!("{n} finding{} ({})", plural(n), kinds.join(", "))
        }
    };
    // The devices' growth in all, then its first cause at its own rate where that differs (as
    // the rank table's columns): the place alone beside the devices' rate read as that place's.
    let growth = format!("{}/{}", signed_bytes(r.growth), r.per());
    let at = match (r.growth_at.as_deref(), r.cause_growth) {
        (Some(""), _) | (None, _) => String::new(),
        (Some(_), Some(rate)) if signed_bytes(rate) != signed_bytes(r.growth) => {
            format!(", first cause {}", crate::ranks::first_cause(r))
        }
        (Some(site), _) => format!(" at {site}"),
    };
    let who = match r.rank {
        Some(rank) => format!("rank {rank} (pid {})", r.pid),
        None => format!("pid {}", r.pid),
    };
    format!(
        "{who}: {} live at end, peak {}, growth {growth}{at}, {} orphaned, {} failed calls; \
         {findings}; {}",
        bytes(r.live_bytes),
        bytes(r.peak_bytes),
        bytes(r.orphan_bytes),
        r.failures,
        r.path
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
