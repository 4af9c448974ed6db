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

use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use crate::options::AnalysisArgs;

pub const EXAMPLES: &str = "\
EXAMPLES:
    Open in Perfetto (ui.perfetto.dev) or chrome://tracing: live bytes per device and per
    holder as counter tracks, steps and NVTX ranges as slices, failed allocations as instants:
        vramtrace export --format perfetto -o run.json run.vtrace

    A flame graph of what was live at the end, at the highest point, or of what grows per step:
        vramtrace export --format flamegraph -o live.svg run.vtrace
        vramtrace export --format flamegraph --at peak -o peak.svg run.vtrace
        vramtrace export --format flamegraph --at growth -o growth.svg run.vtrace

    The driver-level view (NCCL, cuBLAS and extensions included) in PyTorch's own viewer:
        vramtrace export --format pytorch -o snapshot.pickle run.vtrace
        python -m torch.cuda._memory_viz trace_plot snapshot.pickle -o snapshot.html

    Tables for a notebook (pandas.read_csv): the live set at the end, or every event:
        vramtrace export --format csv-live -o live.csv run.vtrace
        vramtrace export --format csv-events -o events.csv run.vtrace

    Every rank of a job as a Parquet dataset for DuckDB, Spark or pandas (docs/data.md), then
    the Python lines still holding memory at the end, per rank:
        vramtrace export --format parquet -o job-data/ traces/
        duckdb -c \"SELECT rank, label, sum(bytes) FROM 'job-data/allocations/**/*.parquet'
                    WHERE free_seq IS NULL AND accounting = 'device' GROUP BY ALL ORDER BY 3 DESC\"";

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
    /// call site, step, driver sample, communicator and failed call (docs/data.md).
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
    /// The trace file to read; for parquet, a directory of traces too (one per rank or
    /// process).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// What to write.
    #[arg(
        short,
        long,
        value_enum,
        value_name = "perfetto|flamegraph|pytorch|csv-live|csv-events|parquet"
    )]
    pub format: Format,
    /// Where to write it; `-` for standard output. For parquet, a new (or empty) directory.
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
    /// Parquet: the run's name, its partition in the dataset (`run=NAME/`); default: the name
    /// of the trace or directory given.
    #[arg(long, value_name = "NAME")]
    pub run: Option<String>,
    /// Parquet: replace an output directory that is not empty (or a file in its place).
    #[arg(long)]
    pub force: bool,
    /// Flame graph: the bytes it weighs.
    #[arg(long, value_enum, default_value_t = Moment::End, value_name = "end|peak|growth")]
    pub at: Moment,
    /// PyTorch snapshot: entries of the latest allocations and frees kept in its trace, as
    /// PyTorch's recorder keeps a ring of them (each allocation is two entries, each free three).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub max_entries: usize,
    /// Perfetto: samples of the counter tracks (each the lowest and highest value of a stretch
    /// of events).
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    pub samples: usize,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// Where the export goes: standard output for `-`, else a temporary file beside the output that
/// takes its name only once complete, so that a failed export leaves no partial file behind.
enum Destination {
    Stdout,
    File(tempfile::NamedTempFile),
}

impl Destination {
    fn open(path: &Path) -> Result<Self> {
        if path == Path::new("-") {
            return Ok(Destination::Stdout);
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // The file a user asked for gets the modes any new file gets (0666 less the umask), not
        // a temporary file's 0600.
        let file = tempfile::Builder::new()
            .prefix(".vramtrace-export-")
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)
            .map_err(|e| {
                // The OS's own message, without the temporary name tempfile adds to it.
                let message = e.to_string();
                let reason = message
                    .split(" at path ")
                    .next()
                    .unwrap_or(&message)
                    .to_string();
                anyhow::anyhow!(
                    "creating {}: {}",
                    path.display(),
                    crate::load::lower_first(reason)
                )
            })?;
        Ok(Destination::File(file))
    }
}

/// Runs `vramtrace export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    if args.format == Format::Parquet {
        return parquet::run(&parquet::Job {
            input: &args.trace,
            output: &args.output,
            run: args.run.as_deref(),
            force: args.force,
        });
    }
    if args.run.is_some() || args.force {
        return Err(anyhow::anyhow!(
            "--run and --force are options of --format parquet"
        ));
    }
    let started = std::time::Instant::now();
    match Destination::open(&args.output)? {
        Destination::Stdout => {
            let mut out = BufWriter::new(std::io::stdout().lock());
            write(args, &mut out)?;
            out.flush().context("writing to standard output")?;
        }
        Destination::File(file) => {
            let what = {
                let mut out = BufWriter::new(file.as_file());
                let what = write(args, &mut out)?;
                out.flush()
                    .with_context(|| format!("writing {}", args.output.display()))?;
                what
            };
            file.persist(&args.output)
                .map_err(|e| anyhow::anyhow!("writing {}: {}", args.output.display(), e.error))?;
            let size = std::fs::metadata(&args.output).map_or(0, |m| m.len());
            eprintln!(
                "wrote {} ({}, {}) in {:.2} s",
                args.output.display(),
                what,
                crate::units::bytes(size),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// Writes the format asked for to `out`; returns what was written, in words.
fn write(args: &ExportArgs, out: &mut dyn Write) -> Result<String> {
    match args.format {
        Format::Perfetto => perfetto::write(args, out),
        Format::Flamegraph => flamegraph::write(args, out),
        Format::Pytorch => pytorch::write(args, out),
        Format::CsvLive => csv::write_live(args, out),
        Format::CsvEvents => csv::write_events(args, out),
        Format::Parquet => unreachable!("a dataset is a directory, written by parquet::run"),
    }
}
