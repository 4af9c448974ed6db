//! One trace into the tables: read once, its events applied to the live state one by one, and
//! after each the rows it made — the objects it ended, its failure, its driver reading, the
//! step it began — streamed to the files; at the end the objects still live, the call sites,
//! the communicators, PyTorch's tensors and the trace's own row.
//!
//! Steps are the report's: a trace whose first reading applied other steps than the whole
//! trace shows (a repeating allocation where nothing marks steps; the step marks alone where a
//! loop's iterations began steps before them) is read again with those, as `report` does, and
//! the files of the first reading are written anew.

use std::path::{Path, PathBuf};

use anyhow::Result;
use parquet::file::metadata::KeyValue;
use serde::Serialize;
use vramtrace_collector::analysis::{Analysis, GrowthConfig};
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::format::RecordRef;
use vramtrace_collector::live::{LiveState, StepSource};
use vramtrace_collector::symbols::{label_sites, Attribution};
use vramtrace_collector::torch::TorchView;

use super::allocations::{self, Allocations};
use super::communicators;
use super::failures::{self, Failures};
use super::findings;
use super::names::Names;
use super::sites;
use super::steps::{self, Samples, Steps};
use super::table::TableFile;
use super::tensors;
use super::traces;
use crate::load::{open_whole, whole_loaded, LoadedTrace, Progress};

/// Where a trace's files go: `<root>/<table>/run=<run>/rank=<rank>/<file>.parquet`.
pub struct Place {
    pub root: PathBuf,
    pub run: String,
    pub file: String,
}

/// The partition value of a trace without a rank: the one Hive, Spark, DuckDB and pyarrow read
/// as null.
pub const NO_RANK: &str = "__HIVE_DEFAULT_PARTITION__";

impl Place {
    /// The file of `table` for a trace of `rank`.
    pub fn path(&self, table: &str, rank: Option<i32>) -> PathBuf {
        let rank = rank.map_or(NO_RANK.to_string(), |r| r.to_string());
        self.root
            .join(table)
            .join(format!("run={}", self.run))
            .join(format!("rank={rank}"))
            .join(format!("{}.parquet", self.file))
    }
}

/// Rows written per table of one trace, and what the user must know about them (`--json`
/// prints them: docs/data.md).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Rows {
    /// The trace as given, its file name in the partitions, its rank and process.
    pub trace: String,
    pub file: String,
    pub rank: Option<i32>,
    pub pid: u32,
    pub events: u64,
    pub allocations: u64,
    /// Of `allocations`, the objects still live at the end of the trace.
    #[serde(rename = "live_at_end")]
    pub live: u64,
    pub sites: u64,
    pub steps: u64,
    pub samples: u64,
    pub communicators: u64,
    pub failures: u64,
    pub tensors: u64,
    pub findings: u64,
    /// What keeps the tables from holding the whole run (a cut trace, lost events, segments
    /// rotation removed), one sentence each, naming the trace.
    pub warnings: Vec<String>,
}

/// The tables filled while the trace is read.
struct Streaming {
    pid: i64,
    allocations: TableFile<Allocations>,
    steps: TableFile<Steps>,
    samples: TableFile<Samples>,
    failures: TableFile<Failures>,
    names: Names,
    /// Steps begun before the event being looked at.
    steps_before: u64,
}

impl Streaming {
    fn create(path: &dyn Fn(&str) -> PathBuf, pid: i64, metadata: &[KeyValue]) -> Result<Self> {
        let m = || metadata.to_vec();
        Ok(Streaming {
            pid,
            allocations: TableFile::create(path("allocations"), m())?,
            steps: TableFile::create(path("steps"), m())?,
            samples: TableFile::create(path("samples"), m())?,
            failures: TableFile::create(path("failures"), m())?,
            names: Names::new(),
            steps_before: 0,
        })
    }

    /// The rows event `e`, just applied to `state`, made.
    #[inline]
    fn event(&mut self, state: &LiveState, e: &Event) -> Result<()> {
        for x in state.ended() {
            allocations::ended(&mut self.allocations, state, &mut self.names, self.pid, x)?;
        }
        if !e.ok() {
            // Every failed call is recorded, the last one kept last.
            if let Some(f) = state.failures().iter().last().filter(|f| f.seq == e.seq) {
                failures::write(&mut self.failures, state, &mut self.names, self.pid, f)?;
            }
        } else if let Op::DeviceMemory { free, total } = e.op {
            if e.device >= 0 {
                steps::sample(&mut self.samples, state, self.pid, e, free, total)?;
            }
        }
        if state.steps() != self.steps_before {
            self.steps_before = state.steps();
            steps::step(&mut self.steps, state, self.pid, e)?;
        }
        Ok(())
    }
}

/// Exports the trace at `path` to `place`; returns the rows of each table.
pub fn export(
    path: &Path,
    place: &Place,
    growth: GrowthConfig,
    progress: &Progress,
) -> Result<Rows> {
    let read = |source| read(path, place, source, growth, progress);
    let rows = match read(StepSource::Marks)? {
        Read::Done(rows) => rows,
        Read::Again(source) => {
            progress.restart("pass 2 (steps from the repeating allocation)");
            match read(source)? {
                Read::Done(rows) => rows,
                Read::Again(_) => unreachable!("a second pass is final"),
            }
        }
    };
    Ok(Rows {
        file: place.file.clone(),
        ..rows
    })
}

enum Read {
    Done(Rows),
    /// The trace has no step marks but a repeating allocation: read it again with these steps.
    Again(StepSource),
}

fn read(
    trace: &Path,
    place: &Place,
    source: StepSource,
    growth: GrowthConfig,
    progress: &Progress,
) -> Result<Read> {
    let (series, mut reader) = open_whole(trace, progress)?;
    let header = reader.header().clone();
    let pid = i64::from(header.pid);
    let metadata = traces::metadata(&header, &place.run);
    let path = |table: &str| place.path(table, header.rank);
    let mut tables = Streaming::create(&path, pid, &metadata)?;
    let first = source == StepSource::Marks;
    let mut state = LiveState::with_step_source(source);
    state.record_endings();
    while let Some(record) = reader.next_event_or_record() {
        match record {
            RecordRef::Event(e) => {
                state.apply_event(e);
                tables.event(&state, e)?;
            }
            RecordRef::Other(r) => state.apply(&r),
        }
        progress.follow(&reader);
    }
    progress.set(reader.offset());
    // The report's steps (`unapplied_steps`, the one rule): the step marks alone where a loop's
    // iterations began steps before them, the repeating allocation where nothing marks steps.
    if let Some(steps) = state.unapplied_steps().filter(|_| first) {
        return Ok(Read::Again(steps));
    }
    let loaded = LoadedTrace {
        growth,
        ..whole_loaded(trace, &series, reader, state)
    };
    finish(tables, &loaded, &path, &metadata).map(Read::Done)
}

/// What keeps `trace`'s tables from holding its whole run, in words.
fn warnings(trace: &LoadedTrace) -> Vec<String> {
    let path = trace.path.display();
    let mut out = Vec::new();
    let gaps = trace.gaps();
    if !gaps.is_empty() {
        out.push(format!(
            "{path} {}: its tables hold what could be read",
            gaps.join(", and ")
        ));
    }
    let segments = trace.segments.as_ref();
    if let Some((facts, removed)) = segments.and_then(|f| Some((f, f.removed.as_ref()?))) {
        let which = match removed.segments {
            1 => "segment 1".to_string(),
            n => format!("segments 1-{n}"),
        };
        out.push(format!(
            "{path}: rotation (VRAMTRACE_MAX_BYTES) deleted {which} ({} events, the first {} of \
             the run): the tables start at segment {}, from its snapshot of the live set; \
             objects that ended before are no rows",
            vramtrace_collector::units::grouped(removed.events),
            crate::units::duration(removed.span_ns),
            facts.first_read,
        ));
    }
    out
}

/// Writes the tables that need the whole trace, and closes every file.
fn finish(
    mut t: Streaming,
    trace: &LoadedTrace,
    path: &dyn Fn(&str) -> PathBuf,
    metadata: &[KeyValue],
) -> Result<Rows> {
    let state = &trace.state;
    let mut live = 0;
    for o in state.live_objects() {
        allocations::live(&mut t.allocations, state, &mut t.names, t.pid, &o)?;
        live += 1;
    }
    let m = || metadata.to_vec();
    let mut sites = TableFile::create(path("sites"), m())?;
    sites::write(&mut sites, state, &mut t.names, t.pid)?;
    let mut comms = TableFile::create(path("communicators"), m())?;
    communicators::write(&mut comms, state, &mut t.names, t.pid)?;
    let view = trace.torch();
    let mut torch = TableFile::create(path("tensors"), m())?;
    tensors::write(&mut torch, &view, t.pid)?;
    let mut found = TableFile::create(path("findings"), m())?;
    findings::write(&mut found, &analysis(trace, &view, &mut t.names), t.pid)?;
    let mut row = TableFile::create(path("traces"), m())?;
    traces::write(&mut row, trace)?;
    let done = |k: &str, v: String| vec![KeyValue::new(format!("vramtrace.{k}"), v)];
    let ending = || done("ending", trace.ending.kind().to_string());
    let rows = Rows {
        events: state.events(),
        allocations: t.allocations.finish(ending())?,
        live,
        steps: t.steps.finish(ending())?,
        samples: t.samples.finish(ending())?,
        failures: t.failures.finish(ending())?,
        sites: sites.finish(ending())?,
        communicators: comms.finish(ending())?,
        tensors: torch.finish(ending())?,
        findings: found.finish(ending())?,
        warnings: Vec::new(),
        trace: trace.path.display().to_string(),
        file: String::new(),
        rank: trace.header.rank,
        pid: trace.header.pid,
    };
    row.finish(ending())?;
    Ok(Rows {
        warnings: warnings(trace),
        ..rows
    })
}

/// The report's analysis of `trace` (PyTorch's view of its tensors beside the driver's), its
/// places labelled as the report labels them.
fn analysis(trace: &LoadedTrace, torch: &TorchView, names: &mut Names) -> Analysis {
    let mut analysis = trace.analyze(torch);
    let mut naming = Attribution::of_state(&trace.state, names.symbols());
    label_sites(&mut analysis, &mut naming);
    analysis
}
