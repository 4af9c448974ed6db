//! `vramtrace report`: what a trace holds live at its end, as tables or one JSON document.
//!
//! [`Report`] gathers every number once; the tables ([`text`]) and the JSON document (the
//! serialized `Report`, schema in `docs/report-json.md`) are two renderings of it, so they never
//! disagree.

mod allocator;
mod attribution;
mod many;
mod stacks;
mod text;

use std::io::Write;

use anyhow::{Context, Result};
use serde::{Serialize, Serializer};
use vramtrace_collector::format::{Ending, Lookup, Unread};
use vramtrace_collector::live::{
    Anomaly, AnomalyKind, ApiCount, CallSite, Communicator, Failure, LiveObject, Summary, Teardown,
};
use vramtrace_collector::symbols::{
    frames_label, Attribution, CallRef, Granularity, StackFrame, Symbolizer,
};
use vramtrace_collector::torch::TorchView;

use vramtrace_collector::analysis::Analysis;

use crate::load::{load_with_steps, LoadedTrace};
use crate::options::ReportArgs;

pub use attribution::{Attributed, Grouping, SymbolFacts};

/// Each finding's native call site (once, in the diagnosis' order, at most `top`): the
/// finding's number, the site's label and its stack.
fn finding_stacks(
    analysis: &Analysis,
    naming: &mut Attribution<'_>,
    top: usize,
) -> Vec<(usize, String, Vec<StackFrame>)> {
    let mut seen = std::collections::BTreeSet::new();
    let sites = (analysis.diagnosis.iter().enumerate())
        .filter_map(|(i, f)| Some((i + 1, f.site.as_ref()?)))
        .filter(|(_, s)| s.stack != 0 || s.caller != 0)
        .filter(|(_, s)| seen.insert((s.stack, s.caller, s.py_stack)));
    sites
        .take(top)
        .map(|(number, s)| {
            let call = CallRef {
                caller: s.caller,
                stack: s.stack,
                py_stack: s.py_stack,
            };
            (
                number,
                crate::render::findings::site_label(s),
                naming.stack(call),
            )
        })
        .collect()
}

/// Version of the JSON document's shape; bumped on any incompatible change.
pub const SCHEMA: &str = "vramtrace-report/1";

fn hex<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

/// Runs `vramtrace report`: of one trace, or of several (see [`many`]); returns the exit code
/// (1 when a trace exceeds a `--fail-on` limit). `--html` is the HTML page's (`crate::html::run`).
pub fn run(args: &ReportArgs) -> Result<u8> {
    let found = crate::load::inputs::expand_readable(&args.traces)?;
    if let ([one], []) = (&found.traces[..], &found.unreadable[..]) {
        return report_one(args, one);
    }
    many::run(args, &found)
}

/// With `--fail-on`: measures the limits on each report and prints them on stderr, after the
/// report; returns the exit code: 1 when a trace exceeds a limit, an error (exit 2) when a trace
/// could not be checked in full (cut short, damaged, events lost), as `check` does.
pub(crate) fn fail_on(
    args: &ReportArgs,
    reports: &[&Report<'_>],
    mut unchecked: Vec<String>,
) -> Result<u8> {
    if args.fail_on.is_empty() {
        return Ok(0);
    }
    let mut err = crate::output::reader_gone::stderr();
    let mut failed = 0;
    for r in reports {
        writeln!(err, "vramtrace report: limits of {}", r.trace.path)
            .context("writing the limits")?;
        let mut gaps = r.gaps();
        let measured = crate::limits::measure(&r.analysis, &args.fail_on, &mut gaps);
        crate::limits::render(&mut err, &measured, &gaps).context("writing the limits")?;
        unchecked.extend(gaps.into_iter().map(|g| format!("{} {g}", r.trace.path)));
        failed += usize::from(measured.iter().any(|m| m.exceeded));
    }
    if !unchecked.is_empty() {
        return Err(crate::limits::could_not_check(&unchecked, failed));
    }
    Ok(u8::from(failed > 0))
}

impl Report<'_> {
    /// What keeps this trace from being checked in full, in words (`is cut short: …`); empty
    /// when the trace is whole.
    pub fn gaps(&self) -> Vec<String> {
        self.gaps.clone()
    }

    /// Measures `--fail-on`'s limits for the JSON document (none asked: none given).
    pub(crate) fn with_limits(&mut self, limits: &[crate::limits::Limit]) {
        if !limits.is_empty() {
            self.limits = Some(crate::limits::Checked::of(
                &self.analysis,
                limits,
                self.gaps(),
            ));
        }
    }
}

fn report_one(args: &ReportArgs, path: &std::path::Path) -> Result<u8> {
    let trace = load_with_steps(path, args.window.read_from(), args.analysis.config())?;
    let mut symbols = Symbolizer::from_env();
    let mut report = Report::new(&trace, args.top, args.by.granularity(), &mut symbols);
    report.with_limits(&args.fail_on);
    let mut out = crate::output::reader_gone::stdout();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::from)
            .context("writing the report")?;
        writeln!(out).context("writing the report")?;
    } else {
        text::render(&mut out, &report, args.by, args.full_stacks).context("writing the report")?;
    }
    out.flush().context("writing the report")?;
    fail_on(args, &[&report], Vec::new())
}

/// Everything a report says.
#[derive(Serialize)]
pub struct Report<'a> {
    pub schema: &'static str,
    pub trace: TraceFacts<'a>,
    /// What keeps the trace from being judged in full ([`LoadedTrace::gaps`]); the document
    /// says it in `reading` and `anomalies`.
    #[serde(skip)]
    gaps: Vec<String>,
    /// PyTorch's allocator: its configuration and its own per-tensor view; `null` for a trace
    /// without PyTorch's hooks.
    pub allocator: Option<allocator::AllocatorFacts>,
    pub reading: Reading,
    pub tracer: TracerCounters,
    pub events: EventCounts,
    pub live: Summary,
    /// The largest call sites (at most `--top`), each with its stack.
    pub call_sites: Vec<Attributed<CallSite>>,
    /// The stack of each finding's call site, in the diagnosis' order (at most `--top`): what
    /// the text's stacks open with, so a leak freed at exit, in no table of what is live, has
    /// its stack too. The document names the sites in `analysis.diagnosis`.
    #[serde(skip)]
    pub finding_stacks: Vec<(usize, String, Vec<StackFrame>)>,
    /// Call sites in all.
    pub call_sites_total: usize,
    /// Live memory grouped as `--by` asks (at most `--top` groups), each with a stack.
    pub groups: Grouping,
    /// The largest orphans (at most `--top`).
    pub orphans: Vec<LiveObject<'a>>,
    pub orphans_total: usize,
    pub communicators: Vec<&'a Communicator>,
    pub failures: FailureList<'a>,
    pub anomalies: AnomalyList<'a>,
    pub calls: Vec<ApiCount>,
    pub teardown: Teardown,
    /// Per device, the driver's used memory against what the trace explains (from the tracer's
    /// `cuMemGetInfo` samples).
    pub device_accounting: Vec<DeviceAccounting>,
    pub lookups: Notes<'a, Lookup>,
    pub warnings: Notes<'a, String>,
    pub modules: Vec<ModuleFacts<'a>>,
    /// The answers: orphans, growth, leaks, peaks, out-of-memory forensics, fragmentation,
    /// anomalies (docs/report-json.md, "Analysis").
    pub analysis: Analysis,
    /// Where the symbols of each module shown in a stack came from.
    pub symbols: Vec<SymbolFacts>,
    /// With `--fail-on`: the limits measured, and the verdict the exit code gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::limits::Checked>,
    #[serde(skip)]
    pub top: usize,
    /// The orphans' and failures' places in words, by sequence number (as every other place is
    /// named: [`vramtrace_collector::symbols::frames_label`]).
    #[serde(skip)]
    pub places: std::collections::HashMap<u64, String>,
    #[serde(skip)]
    pub state: &'a vramtrace_collector::live::LiveState,
}

/// One device's accounting at the tracer's last sample.
#[derive(Serialize)]
pub struct DeviceAccounting {
    pub device: i32,
    /// Device memory, bytes.
    pub total: u64,
    pub samples: u64,
    /// Bytes in use by the driver's count (all processes).
    pub driver_used: u64,
    /// Bytes in use at the first sample that the trace did not hold: the context, the driver's
    /// own reservations, other processes.
    pub context_baseline: u64,
    /// Device bytes the trace held live at the last sample.
    pub traced_live: u64,
    /// driver_used − context_baseline − traced_live (negative: the trace holds more than the
    /// driver reports beyond the baseline).
    pub unexplained: i64,
    /// Sequence number of the last sample.
    pub at_seq: u64,
}

#[derive(Serialize)]
pub struct TraceFacts<'a> {
    pub path: String,
    pub pid: u32,
    pub ppid: u32,
    pub forked_from: Option<u32>,
    pub host: &'a str,
    pub rank: Option<i32>,
    pub local_rank: Option<i32>,
    pub world_size: Option<i32>,
    pub command_line: &'a [String],
    pub tool_version: &'a str,
    pub start_unix_ns: u64,
    pub pointer_size: u8,
    pub settings: Vec<Setting<'a>>,
}

#[derive(Serialize)]
pub struct Setting<'a> {
    pub name: &'a str,
    pub value: &'a str,
}

#[derive(Serialize)]
pub struct Reading {
    pub complete: bool,
    pub ending: EndingFacts,
    /// Why the traced process stopped (`exit`, `signal 11`), from the end record.
    pub end_reason: Option<String>,
    pub records: u64,
    pub chunks: u64,
    pub skipped_records: u64,
    pub bytes_read: u64,
    /// Passes over the records: 1, or 2 when the steps of a trace without marks could not be
    /// told from its first part.
    pub passes: u32,
    /// What of the file could not be read.
    pub unread: UnreadFacts,
    /// For a trace cut into segments: which were read, from where, and what rotation removed
    /// (`null` for a trace of one file).
    pub segments: Option<crate::load::SegmentFacts>,
}

/// The parts of a trace that could not be read (damage, or a chunk the file ends inside).
#[derive(Serialize)]
pub struct UnreadFacts {
    pub bytes: u64,
    /// Events in them, where the chunks around say how many (format 5).
    pub events: u64,
    /// Whether `events` counts every range's (false: some ranges' events are not known).
    pub events_known: bool,
    /// The ranges, in file order: at most [`MAX_UNREAD_RANGES`].
    pub ranges: Vec<Unread>,
    pub ranges_total: usize,
}

/// Unread ranges listed in detail.
pub const MAX_UNREAD_RANGES: usize = 100;

impl UnreadFacts {
    fn new(unread: &[Unread]) -> Self {
        UnreadFacts {
            bytes: unread.iter().map(|u| u.bytes).sum(),
            events: unread.iter().filter_map(|u| u.events).sum(),
            events_known: unread.iter().all(|u| u.events.is_some()),
            ranges: unread.iter().take(MAX_UNREAD_RANGES).cloned().collect(),
            ranges_total: unread.len(),
        }
    }
}

#[derive(Serialize)]
pub struct EndingFacts {
    /// `complete`, `no-end-record`, `truncated` or `corrupt`.
    pub kind: &'static str,
    pub description: String,
    /// Byte offset where reading stopped (null when complete).
    pub offset: Option<u64>,
}

impl EndingFacts {
    fn new(ending: &Ending) -> Self {
        let offset = match *ending {
            Ending::Complete => None,
            Ending::NoEndRecord { offset }
            | Ending::Truncated { offset, .. }
            | Ending::Corrupt { offset, .. } => Some(offset),
        };
        EndingFacts {
            kind: ending.kind(),
            description: ending.describe(),
            offset,
        }
    }
}

#[derive(Serialize)]
pub struct TracerCounters {
    /// Whether the trace holds the tracer's counters at all (a trace cut off early may not).
    pub recorded: bool,
    pub dropped: u64,
    pub late: u64,
    pub hook_panics: u64,
    pub missing_real: u64,
    pub events_written: u64,
}

#[derive(Serialize)]
pub struct EventCounts {
    pub applied: u64,
    pub last_seq: u64,
    pub steps: u64,
    pub pool_trims: u64,
    pub primary_context_releases: u64,
}

#[derive(Serialize)]
pub struct FailureList<'a> {
    pub total: u64,
    /// Failures not kept in detail.
    pub omitted: u64,
    /// Out-of-memory failures among those kept.
    pub out_of_memory: usize,
    pub by_api: Vec<ApiTally>,
    /// Kept failures, out-of-memory ones first, each group in trace order.
    pub list: Vec<&'a Failure>,
    /// Calls refused because the driver or the runtime was shutting down (the process exiting:
    /// `CUDA_ERROR_DEINITIALIZED`, `cudaErrorCudartUnloading`), per entry point: not failures,
    /// and not counted above.
    pub at_shutdown: Vec<ApiTally>,
}

#[derive(Serialize)]
pub struct ApiTally {
    pub api: &'static str,
    pub count: u64,
}

#[derive(Serialize)]
pub struct AnomalyList<'a> {
    pub total: u64,
    pub omitted: u64,
    pub by_kind: Vec<KindTally>,
    pub list: &'a [Anomaly],
    /// Anomalies not counted above because an event the tracer lost could explain each.
    pub uncertain: u64,
}

#[derive(Serialize)]
pub struct KindTally {
    pub kind: AnomalyKind,
    pub count: u64,
}

#[derive(Serialize)]
pub struct Notes<'a, T: Serialize> {
    pub total: u64,
    pub list: &'a [T],
}

#[derive(Serialize)]
pub struct ModuleFacts<'a> {
    pub id: u32,
    pub path: &'a str,
    #[serde(serialize_with = "hex")]
    pub base: u64,
    /// GNU build id as lowercase hex, empty when absent.
    pub build_id: String,
}

impl<'a> Report<'a> {
    /// The place of an orphan's or a failure's call, in words.
    pub fn place_of(&self, origin: &vramtrace_collector::live::Origin) -> String {
        self.places
            .get(&origin.seq)
            .cloned()
            .unwrap_or_else(|| self.state.locate(origin.caller).to_string())
    }

    /// Gathers the report of a loaded trace; lists are cut to `top` entries, and the `top`
    /// call sites and groups (grouped `by`) get their stacks from `symbols`.
    pub fn new(
        trace: &'a LoadedTrace,
        top: usize,
        by: Granularity,
        symbols: &mut Symbolizer,
    ) -> Self {
        let torch = trace.torch();
        let analysis = trace.analyze(&torch, symbols);
        Self::with_analysis(trace, &torch, analysis, top, by, symbols)
    }

    /// [`Report::new`], with the trace's PyTorch view and analysis already made.
    pub fn with_analysis(
        trace: &'a LoadedTrace,
        torch: &TorchView,
        analysis: Analysis,
        top: usize,
        by: Granularity,
        symbols: &mut Symbolizer,
    ) -> Self {
        let state = &trace.state;
        let header = &trace.header;
        let stats = state.stats();
        let mut call_sites = state.by_call_site();
        let call_sites_total = call_sites.len();
        call_sites.truncate(top);
        let mut naming = Attribution::of_state(state, symbols);
        let call_sites = attribution::site_stacks(&mut naming, call_sites);
        let groups = attribution::grouping(&mut naming, state, by, top);
        let finding_stacks = finding_stacks(&analysis, &mut naming, top);
        // An orphan an event lost after it may have freed is not one (docs/report-json.md).
        let mut orphans: Vec<LiveObject<'a>> = state
            .orphans()
            .filter(|o| !state.lost_after(o.origin.seq))
            .collect();
        let orphans_total = orphans.len();
        orphans.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.origin.seq.cmp(&b.origin.seq)));
        orphans.truncate(top);
        let mut failures: Vec<&Failure> = state.failures().iter().collect();
        failures.sort_by_key(|f| !f.out_of_memory);
        let origins = orphans
            .iter()
            .map(|o| &*o.origin)
            .chain(failures.iter().take(top).map(|f| &f.origin));
        let places = origins
            .map(|o| {
                let frames = naming.stack(CallRef::from(o));
                let place =
                    frames_label(&frames).unwrap_or_else(|| state.locate(o.caller).to_string());
                (o.seq, place)
            })
            .collect();
        let symbols = attribution::symbol_facts(naming.symbolizer());
        let anomalies = state.anomalies();
        Report {
            schema: SCHEMA,
            gaps: trace.gaps(),
            trace: TraceFacts {
                path: trace.path.display().to_string(),
                pid: header.pid,
                ppid: header.ppid,
                forked_from: header.forked_from,
                host: &header.host,
                rank: header.rank,
                local_rank: header.local_rank,
                world_size: header.world_size,
                command_line: &header.command_line,
                tool_version: &header.tool_version,
                start_unix_ns: header.start_unix_ns,
                pointer_size: header.pointer_size,
                settings: header
                    .settings
                    .iter()
                    .map(|(name, value)| Setting { name, value })
                    .collect(),
            },
            allocator: allocator::AllocatorFacts::of(torch, top),
            reading: Reading {
                complete: trace.ending.is_complete(),
                ending: EndingFacts::new(&trace.ending),
                end_reason: state.end().map(|e| e.reason.clone()),
                records: trace.records,
                chunks: trace.chunks,
                skipped_records: trace.skipped,
                bytes_read: trace.bytes_read,
                passes: trace.passes,
                unread: UnreadFacts::new(&trace.unread),
                segments: trace.segments.clone(),
            },
            tracer: TracerCounters {
                recorded: stats.is_some(),
                dropped: stats.map_or(0, |s| s.dropped),
                late: stats.map_or(0, |s| s.late),
                hook_panics: stats.map_or(0, |s| s.hook_panics),
                missing_real: stats.map_or(0, |s| s.missing_real),
                events_written: stats.map_or(0, |s| s.events),
            },
            events: EventCounts {
                applied: state.events(),
                last_seq: state.last_seq(),
                steps: state.steps(),
                pool_trims: state.pool_trims(),
                primary_context_releases: state.primary_context_releases(),
            },
            live: state.summary(),
            call_sites,
            finding_stacks,
            call_sites_total,
            groups,
            orphans,
            orphans_total,
            communicators: state.communicators().collect(),
            failures: FailureList {
                total: state.failures().total(),
                omitted: state.failures().omitted(),
                out_of_memory: failures.iter().filter(|f| f.out_of_memory).count(),
                by_api: state
                    .failures()
                    .by_api()
                    .map(|(api, count)| ApiTally {
                        api: api.name(),
                        count,
                    })
                    .collect(),
                list: failures,
                at_shutdown: state
                    .failures()
                    .shutting_down_by_api()
                    .map(|(api, count)| ApiTally {
                        api: api.name(),
                        count,
                    })
                    .collect(),
            },
            anomalies: AnomalyList {
                total: anomalies.total(),
                omitted: anomalies.omitted(),
                by_kind: anomalies
                    .counts()
                    .map(|(kind, count)| KindTally { kind, count })
                    .collect(),
                list: anomalies.details(),
                uncertain: anomalies.doubtful(),
            },
            calls: state.calls(),
            teardown: state.teardown(),
            device_accounting: state
                .device_accounts()
                .map(|a| DeviceAccounting {
                    device: a.device,
                    total: a.total,
                    samples: a.samples,
                    driver_used: a.last_used,
                    context_baseline: a.baseline(),
                    traced_live: a.last_traced,
                    unexplained: a.unexplained(),
                    at_seq: a.last_seq,
                })
                .collect(),
            lookups: Notes {
                total: state.lookups_total(),
                list: state.lookups(),
            },
            warnings: Notes {
                total: state.warnings_total(),
                list: state.warnings(),
            },
            modules: state
                .modules()
                .modules()
                .iter()
                .map(|m| ModuleFacts {
                    id: m.id,
                    path: &m.path,
                    base: m.base,
                    build_id: m.build_id.iter().map(|b| format!("{b:02x}")).collect(),
                })
                .collect(),
            symbols,
            limits: None,
            analysis,
            top,
            places,
            state,
        }
    }
}
