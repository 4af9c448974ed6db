//! The command line: subcommands, their flags, and the help text with examples.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use vramtrace_collector::symbols::Granularity;

/// Finds GPU memory leaks: records every CUDA, driver and NCCL memory call of a program and
/// reports what is still live.
#[derive(Debug, Parser)]
#[command(name = "vramtrace", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Report what a trace holds live at its end, and what went wrong on the way.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Replay a trace to a moment (a step, an event, a time, the peak, an out-of-memory failure)
    /// and report what was live then.
    #[command(after_help = crate::replay::EXAMPLES)]
    Replay(crate::replay::ReplayArgs),
    /// Compare two runs call site by call site (or one rank of a job with the median of the
    /// others), and say whether the second regressed.
    #[command(after_help = crate::diff::EXAMPLES)]
    Diff(crate::diff::DiffArgs),
    /// Write a trace in the formats other viewers read: Perfetto / Chrome trace JSON, a flame
    /// graph SVG, a PyTorch memory snapshot pickle, CSV.
    #[command(after_help = crate::export::EXAMPLES)]
    Export(crate::export::ExportArgs),
    /// Run a program under the tracer and summarise the traces it wrote.
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Run a program under the tracer and fail when its traces pass the limits (a CI gate):
    /// growth, memory live at the end, orphans.
    #[command(after_help = crate::check::EXAMPLES)]
    Check(crate::check::CheckArgs),
}

const REPORT_EXAMPLES: &str = "\
EXAMPLES:
    Report the live set at the end of a run, largest call sites first:
        vramtrace report vramtrace-4242.vtrace

    Rank owner modules (libnccl, libcublas, your extension) instead of call sites:
        vramtrace report --by module vramtrace-4242.vtrace

    Rank the Python lines that allocated, with every frame of their stacks, symbols for a
    trace from another machine taken from a directory of the same builds:
        VRAMTRACE_SYMBOL_PATH=/srv/builds/2024-06 vramtrace report --by python --full-stacks run.vtrace

    Machine-readable output (schema in docs/report-json.md), exact bytes:
        vramtrace report --json --top 50 vramtrace-4242.vtrace > report.json

    One self-contained page to open in a browser or mail: the chart of live memory over
    time, the findings and every table (nothing is loaded from the network):
        vramtrace report --html report.html vramtrace-4242.vtrace

    Every rank of a torchrun job: the rank that differs from the others first, then each report:
        vramtrace report traces/";

const RUN_EXAMPLES: &str = "\
EXAMPLES:
    Trace a training script; one trace per process lands in the current directory:
        vramtrace run -- python train.py --epochs 1

    One trace per rank and process in a new directory, with deeper stacks:
        vramtrace run -o traces/job-rank%r-%p.vtrace --stack-depth 64 -- torchrun train.py

    Use a tracer library from elsewhere, and skip the summary:
        vramtrace run --lib ./target/release/libvramtrace.so --no-summary -- ./app

    See every PyTorch tensor as a driver allocation (the cudaMallocAsync backend):
        vramtrace run --per-tensor -- python train.py";

/// How the report ranks live memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RankBy {
    /// The program's innermost Python line (file:line function), passing over frames of
    /// installed packages and the standard library; calls without a Python stack by function.
    Python,
    /// The native function that asked: the first frame outside the CUDA libraries.
    Function,
    /// That frame's source file and line.
    Line,
    /// Owner modules: the first module outside the CUDA libraries.
    Module,
    /// Call sites: stack, else caller address.
    Site,
}

impl RankBy {
    /// The collector's name for the same grouping.
    pub fn granularity(self) -> Granularity {
        match self {
            RankBy::Python => Granularity::Python,
            RankBy::Function => Granularity::Function,
            RankBy::Line => Granularity::Line,
            RankBy::Module => Granularity::Module,
            RankBy::Site => Granularity::Site,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The trace file to read; several files, or directories of traces (one per rank or
    /// process), give the rank table and then the report of each trace.
    #[arg(value_name = "TRACE", required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// Print one JSON document instead of tables (schema: docs/report-json.md).
    #[arg(long)]
    pub json: bool,
    /// Write the report as one self-contained HTML page (chart, findings, tables) to PATH
    /// instead of printing it.
    #[arg(long, value_name = "PATH", conflicts_with = "json")]
    pub html: Option<PathBuf>,
    /// What the ranking table groups live memory by. Symbols come from the binaries the trace
    /// names (checked by build id), /usr/lib/debug, and the directories in VRAMTRACE_SYMBOL_PATH.
    #[arg(
        long,
        value_enum,
        default_value_t = RankBy::Site,
        value_name = "python|function|line|module|site"
    )]
    pub by: RankBy,
    /// Print every frame of the call-site stacks; by default runs of frames inside the CUDA
    /// libraries are collapsed into one line. The tracer's own frames are never shown.
    #[arg(long)]
    pub full_stacks: bool,
    /// How many call sites, modules and orphans to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    #[command(flatten)]
    pub analysis: crate::report::findings::AnalysisArgs,
    /// Exit 1 when a trace passes a limit (after the report): growth (the ALERT verdict),
    /// growth=SIZE/step, leak[=SIZE] (device memory live at the end), orphans[=N]; several
    /// separated by commas. The limits of `vramtrace check`.
    #[arg(long, value_name = "LIMIT", value_delimiter = ',', value_parser = crate::limits::parse_fail_on)]
    pub fail_on: Vec<crate::limits::Limit>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub tracer: TracerArgs,
    /// Do not summarise the traces after the program exits.
    #[arg(long)]
    pub no_summary: bool,
    /// The program to run and its arguments.
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// How a program runs under the tracer (`run`, `check`).
#[derive(Debug, Args)]
pub struct TracerArgs {
    /// Where traces go: a file name pattern, or a directory (DIR/) that gets one
    /// vramtrace-PID.vtrace per process. In the file name, each traced process fills in %p (its
    /// process id), %r (its rank: RANK, else LOCAL_RANK, else x), %h (the host name) and %t (its
    /// start, Unix seconds); %% is a percent sign. A missing directory is created (mode 0755).
    /// Default: VRAMTRACE_OUTPUT from the environment, else vramtrace-%p.vtrace in the current
    /// directory; -o wins over the environment. An existing file is never replaced: a process
    /// whose name is taken writes beside it (NAME.PID.EXT).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Native stack frames to capture per call (VRAMTRACE_STACK_DEPTH).
    #[arg(long, value_name = "N")]
    pub stack_depth: Option<u32>,
    /// Python frames to capture per allocation (VRAMTRACE_PYTHON_DEPTH; 0 turns them off).
    #[arg(long, value_name = "N")]
    pub python_depth: Option<u32>,
    /// The NVTX range whose push starts a training step, e.g. "step" for
    /// torch.cuda.nvtx.range_push("step") (VRAMTRACE_STEP_RANGE).
    #[arg(long, value_name = "NAME")]
    pub step_range: Option<String>,
    /// Do not make the tracer the NVTX injection library (NVTX_INJECTION64_PATH); ranges and
    /// marks then do not reach the trace.
    #[arg(long)]
    pub no_nvtx: bool,
    /// Run PyTorch with its cudaMallocAsync allocator backend (merged into PYTORCH_ALLOC_CONF
    /// and PYTORCH_CUDA_ALLOC_CONF, other settings kept): every tensor is then one driver
    /// allocation in the trace, instead of a block of the caching allocator's segments. It
    /// changes the allocator the program runs with (docs/pytorch.md).
    #[arg(long)]
    pub per_tensor: bool,
    /// Do not put vramtrace's Python hooks on PYTHONPATH (its sitecustomize: steps from
    /// PyTorch optimizer steps, PyTorch's allocator settings and memory history).
    #[arg(long)]
    pub no_python_hooks: bool,
    /// The tracer library to preload (default: VRAMTRACE_LIB, else libvramtrace.so beside this
    /// program or in ../lib/).
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_everything_after_the_command() {
        let cli = Cli::parse_from(["vramtrace", "run", "-o", "x", "--", "python", "-m", "t"]);
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.tracer.output, Some(PathBuf::from("x")));
        assert_eq!(args.command, ["python", "-m", "t"]);
    }
}
