//! Command-line options that more than one command reads: the report's flags (`report` and its
//! HTML page), how it ranks live memory, how a program runs under the tracer (`run`, `check`),
//! and the options of the analyses (`report`, `replay`, `export`, `check`). Kept apart from the
//! commands so that none of them depends on another's internals.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use vramtrace_collector::analysis::GrowthConfig;
use vramtrace_collector::symbols::Granularity;

use vramtrace_collector::units::count::FRAMES;
use vramtrace_collector::units::{parse_duration, parse_size};

use crate::load::ReadFrom;

/// The report's help examples.
pub const REPORT_EXAMPLES: &str = "\
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
    time, the findings and every table (nothing is loaded from the network); a page that
    exists is replaced only with --force:
        vramtrace report --html report.html vramtrace-4242.vtrace
        vramtrace report --html report.html --force vramtrace-4242.vtrace

    Every rank of a torchrun job: the rank table, the reports of the ranks that differ from the
    others in full, one line for each other rank (--all: every report in full):
        vramtrace report traces/";

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
    /// process), give the rank table and then the report of each trace. Of several, those that
    /// cannot be read are named first (INCOMPLETE) and the others reported.
    #[arg(value_name = "TRACE", required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// Print one JSON document instead of tables (schema: docs/report-json.md).
    #[arg(long)]
    pub json: bool,
    /// Write the report as one self-contained HTML page (chart, findings, tables) to PATH
    /// instead of printing it. A file that exists is left alone unless --force is given.
    #[arg(long, value_name = "PATH", conflicts_with = "json")]
    pub html: Option<PathBuf>,
    /// Replace the --html page if it exists (never a trace being read).
    #[arg(long, requires = "html")]
    pub force: bool,
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
    /// How many call sites, modules, orphans and findings to list (every ALERT is listed,
    /// whatever N is).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = parse_top,
          allow_hyphen_values = true)]
    pub top: usize,
    /// With several traces: print every trace's report in full. By default only the traces the
    /// rank table marks as differing from the others are printed in full, and every other one
    /// in one line.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
    #[command(flatten)]
    pub window: WindowArgs,
    /// Exit 1 when a trace exceeds a limit (after the report): growth (the ALERT verdict),
    /// growth=SIZE/step, leak[=SIZE] (device memory live at the end), orphans[=N], oom[=N]
    /// (out-of-memory failures); several separated by commas. The limits of `vramtrace check`; as there, a trace cut short,
    /// damaged or that lost events is not checked in full: exit 2.
    #[arg(long, value_name = "LIMIT", value_delimiter = ',', value_parser = crate::limits::parse_fail_on)]
    pub fail_on: Vec<crate::limits::Limit>,
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
    /// Native stack frames to capture per call, 0 to 256 (VRAMTRACE_STACK_DEPTH; 0 turns them
    /// off).
    #[arg(long, value_name = "N", value_parser = parse_frames)]
    pub stack_depth: Option<u32>,
    /// Python frames to capture per allocation, 0 to 256 (VRAMTRACE_PYTHON_DEPTH; 0 turns them
    /// off).
    #[arg(long, value_name = "N", value_parser = parse_frames)]
    pub python_depth: Option<u32>,
    /// The NVTX range whose push starts a training step, e.g. "step" for
    /// torch.cuda.nvtx.range_push("step") (VRAMTRACE_STEP_RANGE).
    #[arg(long, value_name = "NAME", value_parser = parse_range_name)]
    pub step_range: Option<String>,
    /// Keep each process's trace within SIZE on disk (VRAMTRACE_MAX_BYTES; default 4GiB, 0 for
    /// no bound): the trace is cut into segments and the oldest are deleted; a report still
    /// has the live set at the end, and says what rotation removed.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_or_zero, allow_hyphen_values = true)]
    pub max_bytes: Option<u64>,
    /// Cut the trace into segments of at most SIZE (VRAMTRACE_SEGMENT_BYTES; default 32MiB, 0
    /// for one file).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_or_zero, allow_hyphen_values = true)]
    pub segment_bytes: Option<u64>,
    /// Also cut a segment after this long (VRAMTRACE_SEGMENT_SECONDS: 30m, 1h; default never).
    #[arg(long = "segment-seconds", value_name = "TIME", value_parser = parse_nanos,
          allow_hyphen_values = true)]
    pub segment_time: Option<u64>,
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

/// Which part of a long trace to read. A trace cut into segments (VRAMTRACE_SEGMENT_BYTES) is
/// read from the start of the segment that holds the moment asked for, whose snapshot of the
/// live state it begins with: the live set at the end is the whole trace's, the history
/// (growth, failures, peaks) covers what was read. A trace of one file is read whole.
#[derive(Clone, Debug, Default, Args)]
pub struct WindowArgs {
    /// Read the last TIME of the trace (90s, 30m, 1h; 0 for its last segment).
    #[arg(long, value_name = "TIME", value_parser = parse_nanos, conflicts_with = "since",
          allow_hyphen_values = true)]
    pub last: Option<u64>,
    /// Read from this moment on: 'step N', or a time after the trace's first event (90m, 2h).
    #[arg(long, value_name = "WHEN", value_parser = parse_since, allow_hyphen_values = true)]
    pub since: Option<ReadFrom>,
}

impl WindowArgs {
    /// Where reading starts.
    pub fn read_from(&self) -> ReadFrom {
        match (self.last, self.since) {
            (Some(ns), _) => ReadFrom::Last(ns),
            (None, Some(from)) => from,
            (None, None) => ReadFrom::First,
        }
    }
}

/// Parses `--since`: `step N`, or a time after the trace's first event.
fn parse_since(text: &str) -> Result<ReadFrom, String> {
    let t = text.trim().to_ascii_lowercase();
    if let Some(n) = t
        .strip_prefix("step")
        .map(|r| r.trim_start_matches([' ', ':', '=']))
    {
        return n
            .trim()
            .parse()
            .map(ReadFrom::Step)
            .map_err(|_| format!("'{text}': a step needs a whole number, like 'step 12'"));
    }
    parse_nanos(&t)
        .map(ReadFrom::Time)
        .map_err(|e| format!("{e}; or a step, like 'step 12'"))
}

/// Options of the analyses.
#[derive(Debug, Args)]
pub struct AnalysisArgs {
    /// Memory of each device (80GiB, 1073741824, ...): steady growth alerts above
    /// --alert-percent of it per step. Default: the driver's total, as the tracer sampled it
    /// (cuMemGetInfo); without samples, the device's highest live point (a lower bound).
    #[arg(long, value_name = "SIZE", value_parser = parse_device_memory,
          allow_hyphen_values = true)]
    pub device_memory: Option<u64>,
    /// Growth per step, in percent of device memory, above which steady growth alerts.
    #[arg(long, default_value_t = 0.1, value_name = "PERCENT", value_parser = parse_percent,
          allow_hyphen_values = true)]
    pub alert_percent: f64,
    /// Steady growth also alerts when at its rate the device is full within this many steps...
    #[arg(
        long,
        default_value_t = 10_000,
        value_name = "STEPS",
        allow_hyphen_values = true
    )]
    pub horizon_steps: u64,
    /// ...or within this time (90s, 30m, 24h, 2d).
    #[arg(long, default_value = "24h", value_name = "TIME", value_parser = parse_nanos,
          allow_hyphen_values = true)]
    pub horizon: u64,
}

impl AnalysisArgs {
    /// Whether any setting differs from its default (one given where nothing judges growth
    /// would be ignored unsaid).
    pub fn given(&self) -> bool {
        self.device_memory.is_some()
            || self.alert_percent != 0.1
            || self.horizon_steps != 10_000
            || self.horizon != 24 * 3600 * 1_000_000_000
    }
}

/// `--device-memory`: a size above 0.
fn parse_device_memory(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err("not a size above 0".into()),
        n => Ok(n),
    }
}

/// `--horizon`, `--last`, `--segment-seconds`: a duration, in nanoseconds.
fn parse_nanos(text: &str) -> Result<u64, String> {
    parse_duration(text).map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
}

/// `--top`: how many rows a list shows (`-1` is said to be no whole number, not taken for a
/// flag).
pub fn parse_top(text: &str) -> Result<usize, String> {
    vramtrace_collector::units::parse_count(text).map(|n| n.min(usize::MAX as u64) as usize)
}

/// `--stack-depth`, `--python-depth`: frames per stack, in the range the tracer takes.
fn parse_frames(text: &str) -> Result<u32, String> {
    FRAMES.parse(text).map(|n| n as u32)
}

/// `--step-range`: a range name.
fn parse_range_name(text: &str) -> Result<String, String> {
    match text.trim() {
        "" => Err("not an NVTX range name (it is empty)".into()),
        name => Ok(name.to_string()),
    }
}

/// A size, or `0` (none).
fn parse_size_or_zero(text: &str) -> Result<u64, String> {
    match text.trim() {
        "0" => Ok(0),
        t => parse_size(t),
    }
}

/// `--alert-percent`: as `VRAMTRACE_ALERT_THRESHOLD` takes a share: 0 (any steady growth
/// alerts), or 0.0001 to 100.
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if p == 0.0 || (0.0001..=100.0).contains(&p) => Ok(p),
        _ => Err("not a percentage: 0, or 0.0001 to 100".into()),
    }
}

impl AnalysisArgs {
    /// The growth settings these options ask for.
    pub fn config(&self) -> GrowthConfig {
        GrowthConfig {
            device_memory: self.device_memory,
            alert_fraction: self.alert_percent / 100.0,
            horizon_steps: self.horizon_steps,
            horizon_ns: self.horizon,
            ..GrowthConfig::default()
        }
    }
}
