//! `vramtrace export`: a trace in the formats of the viewers users already know — a Perfetto /
//! Chrome trace-event JSON, a flame graph SVG, a PyTorch memory snapshot pickle for
//! `torch.cuda._memory_viz`, CSV tables for notebooks — and a Parquet dataset of one trace or
//! a job's for DuckDB, Spark and pandas.
//!
//! Each format has its module; they share the reading (with its progress bar) through
//! [`crate::load`] and [`crate::timeline`], and the naming of call sites through the
//! collector's `Attribution`.

mod csv;
mod flamegraph;
mod frames;
mod parquet;
mod perfetto;
mod pickle;
mod pytorch;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};

use crate::load::LoadedTrace;
use crate::options::{AnalysisArgs, WindowArgs};
use crate::output::OutputFile;

pub const EXAMPLES: &str = "\
EXAMPLES:
    Open in Perfetto (ui.perfetto.dev) or chrome://tracing: live bytes per device and per
    holder as counter tracks, steps and NVTX ranges as slices, failed allocations as instants:
        vramtrace export --format perfetto -o run.json run.vtrace

    A flame graph of what was live at the end, at the highest point, or of what grows per step:
        vramtrace export --format flamegraph -o live.svg run.vtrace
        vramtrace export --format flamegraph --at peak -o peak.svg run.vtrace
        vramtrace export --format flamegraph --at growth -o growth.svg run.vtrace

    Every pointer allocation (PyTorch's, NCCL's, cuBLAS's, extensions') in PyTorch's own viewer
    (virtual-memory mappings and arrays are not in it; it says how much they hold):
        vramtrace export --format pytorch -o snapshot.pickle run.vtrace
        python -m torch.cuda._memory_viz trace_plot snapshot.pickle -o snapshot.html

    Tables for a notebook (pandas.read_csv): the live set at the end, or every event:
        vramtrace export --format csv-live -o live.csv run.vtrace
        vramtrace export --format csv-events -o events.csv run.vtrace

    A file that exists is never replaced unless asked; to standard output instead:
        vramtrace export --format csv-live --force -o live.csv run.vtrace
        vramtrace export --format csv-live -o - run.vtrace | head

    Every rank of a job as a Parquet dataset for DuckDB, Spark or pandas (docs/data.md), then
    the Python lines still holding memory at the end, per rank:
        vramtrace export --format parquet -o job-data/ traces/
        duckdb -c \"SELECT rank, label, sum(bytes) FROM 'job-data/allocations/**/*.parquet'
                    WHERE free_seq IS NULL AND accounting = 'device' GROUP BY ALL ORDER BY 3 DESC\"
    In Python, the same tables straight from the traces: vramtrace.load(\"traces/\") (the wheel;
    docs/python.md). pyarrow's pq.read_table of a dataset whose traces carry no rank needs the
    partitioning typed (docs/data.md, \"Layout\")";

/// What `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Chrome trace-event JSON, as Perfetto and chrome://tracing read it.
    Perfetto,
    /// A flame graph SVG of live bytes by stack (see --at).
    Flamegraph,
    /// A PyTorch memory snapshot pickle (`segments`, `device_traces`) for
    /// torch.cuda._memory_viz.
    Pytorch,
    /// CSV, one row per object live at the end.
    CsvLive,
    /// CSV, one row per event of the trace.
    CsvEvents,
    /// A Parquet dataset (a directory) of a trace or a directory of traces: every object,
    /// call site, step, driver sample, communicator and failed call, PyTorch's tensors, the
    /// report's findings and each trace's own row (docs/data.md).
    Parquet,
}

/// Which bytes the flame graph weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Moment {
    /// Live at the end of the trace.
    End,
    /// Live on each device at its highest point.
    Peak,
    /// Grown per step (per time window without steps) by the call sites growing steadily.
    Growth,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The trace file to read; for parquet, several, or directories of traces (one per rank or
    /// process).
    #[arg(value_name = "TRACE", required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// What to write.
    #[arg(
        short,
        long,
        value_enum,
        value_name = "perfetto|flamegraph|pytorch|csv-live|csv-events|parquet"
    )]
    pub format: Format,
    /// Where to write it; `-` for standard output; for parquet, a new (or empty) directory. A
    /// file that exists is left alone unless --force is given; the trace read is never replaced.
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// Parquet: the run's name, its partition in the dataset (`run=NAME/`); default: the name
    /// of the trace or directory given.
    #[arg(long, value_name = "NAME")]
    pub run: Option<String>,
    /// Parquet: also print what was written as JSON on standard output — each trace's rows per
    /// table, its rank and process, and its warnings (docs/data.md).
    #[arg(long)]
    pub json: bool,
    /// Replace the output if it exists: a file (for parquet too), or for parquet an earlier
    /// dataset (a directory of the tables' directories and nothing else, every Parquet file in
    /// them written by vramtrace); never the trace being read, and for parquet never a directory
    /// holding anything else, a symbolic link, nor the working directory.
    #[arg(long)]
    pub force: bool,
    /// Flame graph: the bytes it weighs [default: end].
    #[arg(long, value_enum, value_name = "end|peak|growth")]
    pub at: Option<Moment>,
    /// PyTorch snapshot: entries of the latest allocations and frees kept in its trace, as
    /// PyTorch's recorder keeps a ring of them (each allocation is two entries, each free
    /// three) [default: 100000].
    #[arg(long, value_name = "N")]
    pub max_entries: Option<usize>,
    /// Perfetto: at most this many stretches of events on the counter tracks (each drawn with
    /// its highest value at its start and its last value at its end, so no peak is lost;
    /// stretches are a power of two of events long, so there may be up to half as many; at
    /// least 2) [default: 20000].
    #[arg(long, value_name = "N", value_parser = parse_samples)]
    pub samples: Option<usize>,
    #[command(
        flatten,
        next_help_heading = "Growth analysis (flamegraph --at growth, parquet's findings)"
    )]
    pub analysis: AnalysisArgs,
    #[command(
        flatten,
        next_help_heading = "Part of the trace (every format but parquet)"
    )]
    pub window: WindowArgs,
}

impl ExportArgs {
    /// The trace of a format that reads one (every format but parquet).
    pub fn trace(&self) -> &PathBuf {
        &self.traces[0]
    }
}

/// Runs `vramtrace export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    // An option of another format would be ignored unsaid.
    for (given, flag, format, name) in [
        (args.at.is_some(), "--at", Format::Flamegraph, "flamegraph"),
        (
            args.max_entries.is_some(),
            "--max-entries",
            Format::Pytorch,
            "pytorch",
        ),
        (
            args.samples.is_some(),
            "--samples",
            Format::Perfetto,
            "perfetto",
        ),
    ] {
        if given && args.format != format {
            return Err(anyhow::anyhow!(
                "{flag} is an option of --format {name} only (see --help)"
            ));
        }
    }
    let judges_growth = args.format == Format::Parquet || args.at == Some(Moment::Growth);
    if args.analysis.given() && !judges_growth {
        return Err(anyhow::anyhow!(
            "--device-memory, --alert-percent, --horizon-steps and --horizon set the growth \
             analysis of --format flamegraph --at growth and --format parquet's findings only"
        ));
    }
    if args.format == Format::Parquet {
        if args.window.last.is_some() || args.window.since.is_some() {
            return Err(anyhow::anyhow!(
                "--since and --last are not options of --format parquet: its tables hold the \
                 whole trace (filter them by alloc_time_ns or alloc_step)"
            ));
        }
        return parquet::run(&parquet::Job {
            inputs: &args.traces,
            output: &args.output,
            run: args.run.as_deref(),
            force: args.force,
            growth: args.analysis.config(),
            json: args.json,
        });
    }
    if args.json {
        return Err(anyhow::anyhow!("--json is an option of --format parquet"));
    }
    if args.run.is_some() {
        return Err(anyhow::anyhow!("--run is an option of --format parquet"));
    }
    if let [_, more @ ..] = args.traces.as_slice() {
        if !more.is_empty() || args.trace().is_dir() {
            return Err(anyhow::anyhow!(
                "--format {} reads one trace file (--format parquet takes several, or a \
                 directory)",
                format_name(args.format)
            ));
        }
    }
    let started = std::time::Instant::now();
    let inputs = crate::load::inputs::files_of(&args.traces);
    let output = OutputFile::prepare(&args.output, args.force, &inputs)?;
    let (written, size) = output.write(|out| write(args, out))?;
    let Written { what, gaps, begins } = written;
    if let Some(segments) = begins {
        say!(
            "note: {}: segments {segments}; the export holds what is on disk",
            args.trace().display()
        );
    }
    if !gaps.is_empty() {
        say!(
            "warning: {} {}: the export holds what could be read",
            args.trace().display(),
            gaps.join(", and ")
        );
    }
    if !output.is_stdout() {
        say!(
            "wrote {} ({}, {}) in {:.2} s",
            output.path().display(),
            what,
            crate::render::units::bytes(size),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// What a format wrote, in words, and what kept it from holding the whole trace (a cut or
/// damaged trace, lost events: [`LoadedTrace::gaps`]), which the export warns of as the report
/// heads its findings with it.
pub struct Written {
    pub what: String,
    pub gaps: Vec<String>,
    /// Where reading began, for a trace read from a segment's snapshot (rotation deleted the
    /// segments before it, `--last`, `--since`): not lost, but not in the export either.
    pub begins: Option<String>,
}

impl Written {
    /// `what` was written from `trace`.
    pub fn of(trace: &LoadedTrace, what: String) -> Self {
        Written {
            what,
            gaps: trace.gaps(),
            // Said only where the export lacks a part of the run: segments rotation removed or
            // missing, or the first ones on disk left unread (`--last`, `--since`).
            // Or `--last`/`--since` asked of a trace of one file, read whole.
            begins: (trace.segments.as_ref()).and_then(|s| {
                let cut =
                    s.removed.is_some() || !s.missing.is_empty() || s.first_read > s.first_there;
                match cut {
                    true => Some(s.describe()),
                    false => s.read_whole(),
                }
            }),
        }
    }
}

/// Writes the format asked for to `out`; returns what was written.
fn write(args: &ExportArgs, out: &mut dyn Write) -> Result<Written> {
    match args.format {
        Format::Perfetto => perfetto::write(args, out),
        Format::Flamegraph => flamegraph::write(args, out),
        Format::Pytorch => pytorch::write(args, out),
        Format::CsvLive => csv::write_live(args, out),
        Format::CsvEvents => csv::write_events(args, out),
        Format::Parquet => unreachable!("a dataset is a directory, written by parquet::run"),
    }
}

/// The format as `--format` spells it.
fn format_name(format: Format) -> String {
    format
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// `--samples`: a whole number, 2 or more (a counter track is drawn from its first and last
/// sample at least).
fn parse_samples(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 2 => Ok(n),
        Ok(n) => Err(format!("{n} samples draw no counter track: give 2 or more")),
        Err(_) => Err(format!("'{text}' is not a whole number")),
    }
}
