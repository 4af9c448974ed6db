//! `vramtrace report` of several traces (files, or directories of them: one per rank or
//! process): the rank table first, the trace that differs most from the median named at its
//! head, then the report of each trace in the table's order. As JSON, one document holding the
//! rows and every report.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rayon::prelude::*;
use serde::Serialize;
use vramtrace_collector::compare::{rank_rows, RankRow};
use vramtrace_collector::symbols::Symbolizer;

use super::{text, Report};
use crate::inputs::load_all;
use crate::options::ReportArgs;
use crate::ranks::{rank_input, render, who};

/// Version of the document's shape.
pub const SCHEMA: &str = "vramtrace-ranks/1";

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    /// The traces, the one farthest from the median first.
    ranks: &'a [RankRow],
    /// The report of each trace, in the order of `ranks`.
    reports: &'a [Report<'a>],
}

/// Reports the traces at `paths`.
pub fn run(args: &ReportArgs, paths: &[PathBuf]) -> Result<u8> {
    let runs = load_all(paths, args.window.read_from(), args.analysis.config(), Ok)?;
    let inputs: Vec<_> = runs.iter().map(rank_input).collect();
    let rows = rank_rows(&inputs);
    let order: Vec<usize> = (rows.iter())
        .map(|r| {
            let found = inputs.iter().position(|i| i.path == r.path);
            found.expect("every row comes from an input")
        })
        .collect();
    let granularity = args.by.granularity();
    let reports: Vec<Report<'_>> = order
        .par_iter()
        .map(|&i| {
            let mut symbols = Symbolizer::from_env();
            Report::new(&runs[i].trace, args.top, granularity, &mut symbols)
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let doc = Document {
            schema: SCHEMA,
            ranks: &rows,
            reports: &reports,
        };
        serde_json::to_writer_pretty(&mut out, &doc)
            .map_err(std::io::Error::from)
            .context("writing the report")?;
        writeln!(out).context("writing the report")?;
    } else {
        text_reports(&mut out, args, &rows, &reports)?;
    }
    out.flush().context("writing the report")?;
    super::fail_on(args, &reports.iter().collect::<Vec<_>>())
}

fn text_reports(
    mut out: &mut impl Write,
    args: &ReportArgs,
    rows: &[RankRow],
    reports: &[Report<'_>],
) -> Result<()> {
    writeln!(out, "vramtrace report: {} traces", rows.len()).context("writing the report")?;
    render(&mut out, rows).context("writing the report")?;
    for (row, report) in rows.iter().zip(reports) {
        writeln!(
            out,
            "\n════ {} ({}) ════\n",
            who(row.rank, row.pid),
            row.path
        )
        .context("writing the report")?;
        text::render(&mut out, report, args.by, args.full_stacks).context("writing the report")?;
    }
    Ok(())
}
