//! One trace into the tables: read once, as `report` reads it, its rows written as each event
//! is applied — the objects it ended, its failure, its driver reading, the step it began —
//! and at the end the objects still live, the call sites, the communicators, PyTorch's tensors
//! and the trace's own row.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use parquet::file::metadata::KeyValue;
use serde::Serialize;
use vramtrace_collector::analysis::{Analysis, GrowthConfig};
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::format::Header;
use vramtrace_collector::live::LiveState;
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
use crate::load::{load_with_steps_observing, LoadedTrace, Observer, Progress, ReadFrom};

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
    /// Where it stands in its job (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`), for the ranks no trace
    /// has.
    #[serde(skip)]
    pub job: crate::ranks::JobPlace,
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

/// The tables filled while the trace is read, a row as an event makes it: an observer of the
/// reading whose state is kept. The first file that cannot be written stops the rows, and is
/// the export's error.
struct Streaming {
    tables: Option<Tables>,
    error: Option<anyhow::Error>,
}

/// The tables that grow event by event.
struct Tables {
    pid: i64,
    allocations: TableFile<Allocations>,
    steps: TableFile<Steps>,
    samples: TableFile<Samples>,
    failures: TableFile<Failures>,
    names: Names,
    /// Steps begun before the event being looked at (`None` before the first: then those the
    /// reading began with, from a segment's snapshot or none).
    steps_before: Option<u64>,
}

impl Streaming {
    /// The files of the trace whose first file read has `header`, at `place`: created anew for
    /// each reading (a reading from the first part again, with the steps found there, forgets
    /// the rows of the one before).
    fn create(place: &Place, header: &Header) -> Self {
        let metadata = traces::metadata(header, &place.run);
        let path = |table: &str| place.path(table, header.rank);
        let m = || metadata.clone();
        let tables = (|| -> Result<Tables> {
            Ok(Tables {
                pid: i64::from(header.pid),
                allocations: TableFile::create(path("allocations"), m())?,
                steps: TableFile::create(path("steps"), m())?,
                samples: TableFile::create(path("samples"), m())?,
                failures: TableFile::create(path("failures"), m())?,
                names: Names::new(),
                steps_before: None,
            })
        })();
        match tables {
            Ok(tables) => Streaming {
                tables: Some(tables),
                error: None,
            },
            Err(error) => Streaming {
                tables: None,
                error: Some(error),
            },
        }
    }
}

impl Observer for Streaming {
    const ENDINGS: bool = true;

    #[inline]
    fn applied(&mut self, state: &LiveState, e: &Event) {
        let Some(tables) = &mut self.tables else {
            return;
        };
        if let Err(error) = tables.event(state, e) {
            (self.tables, self.error) = (None, Some(error));
        }
    }
}

impl Tables {
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
        // A step begun before a segment's snapshot, where rotation deleted what came before,
        // has no beginning read: no row (its first event read is not where it began).
        let before =
            *(self.steps_before).get_or_insert_with(|| state.restored().map_or(0, |r| r.steps));
        if state.steps() != before {
            self.steps_before = Some(state.steps());
            steps::step(&mut self.steps, state, self.pid, e)?;
        }
        Ok(())
    }
}

/// Exports the trace at `path` to `place`; returns the rows of each table. Its steps are the
/// report's, found as `report` finds them ([`load_with_steps_observing`]).
pub fn export(
    path: &Path,
    place: &Place,
    growth: GrowthConfig,
    progress: &Progress,
) -> Result<Rows> {
    let (trace, streaming) =
        load_with_steps_observing(path, ReadFrom::First, growth, progress, |header| {
            Streaming::create(place, header)
        })?;
    let tables = match streaming {
        Streaming {
            tables: Some(tables),
            ..
        } => tables,
        Streaming { error, .. } => {
            return Err(error.unwrap_or_else(|| anyhow!("{}: not exported", path.display())))
        }
    };
    let metadata = traces::metadata(&trace.header, &place.run);
    let path = |table: &str| place.path(table, trace.header.rank);
    let rows = finish(tables, &trace, &path, &metadata)?;
    Ok(Rows {
        file: place.file.clone(),
        ..rows
    })
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
            crate::render::units::duration(removed.span_ns),
            facts.first_read,
        ));
    }
    out
}

/// Writes the tables that need the whole trace, and closes every file.
fn finish(
    mut t: Tables,
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
        // As `traces.trace` names it: a trace cut into segments by its first segment's name.
        trace: vramtrace_collector::format::trace_name(&trace.path, &trace.header)
            .display()
            .to_string(),
        file: String::new(),
        rank: trace.header.rank,
        job: (
            trace.header.rank,
            trace.header.local_rank,
            trace.header.world_size,
        ),
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
    trace.analyze(torch, names.symbols())
}
