//! Where reading a trace starts. A trace cut into segments (`docs/trace-format.md`,
//! "Segments") can be read from the start of any segment there, since each begins with a
//! snapshot of the live state: the answer about the end of a week-long job, or about a step of
//! its last hour, needs only its last segments. The segment is chosen from the segments'
//! headers (and the last one's end, read from its last chunks), without reading the trace.

use anyhow::{anyhow, Result};
use serde::Serialize;
use vramtrace_collector::format::{read_tail, Gone, Series};
use vramtrace_collector::live::LiveState;

/// Where to start reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// The first segment there (the start of a trace of one file).
    #[default]
    First,
    /// The segment that holds the moment this many nanoseconds before the end (`--last`).
    Last(u64),
    /// The segment in which step `N` begins, or an earlier one (`--since step N`).
    Step(u64),
    /// The segment that holds the moment this many nanoseconds after the trace began
    /// (`--since 2h`).
    Time(u64),
    /// The segment that holds event `N` (1 = the first), or an earlier one.
    Event(u64),
}

impl ReadFrom {
    /// The choice in words, for the report (`null` in JSON when reading starts at the first
    /// segment there).
    pub fn describe(self) -> Option<String> {
        let time = |ns: u64| crate::render::units::duration(ns);
        match self {
            ReadFrom::First => None,
            ReadFrom::Last(0) => Some("its last segment".into()),
            ReadFrom::Last(ns) => Some(format!("the last {}", time(ns))),
            ReadFrom::Step(n) => Some(format!("since step {n}")),
            ReadFrom::Time(ns) => Some(format!("since {} after the first event", time(ns))),
            ReadFrom::Event(n) => Some(format!("event {n}")),
        }
    }
}

/// The file of `series` to start at (an index in `series.files`).
pub fn choose(series: &Series, from: ReadFrom) -> Result<usize> {
    let files = &series.files;
    let last_with =
        |ok: &dyn Fn(usize) -> bool| (0..files.len()).rev().find(|&i| ok(i)).unwrap_or(0);
    let info = |i: usize| files[i].info();
    Ok(match from {
        ReadFrom::First => 0,
        ReadFrom::Event(n) => last_with(&|i| files[i].events_before() < n),
        ReadFrom::Step(n) => last_with(&|i| info(i).is_none_or(|s| s.steps < n)),
        ReadFrom::Time(ns) => {
            let at = series.origin_ns().saturating_add(ns);
            last_with(&|i| info(i).is_none_or(|s| s.time_ns <= at))
        }
        ReadFrom::Last(ns) => {
            let last = series.last();
            let tail =
                read_tail(&last.path).map_err(|e| anyhow!("{}: {e}", last.path.display()))?;
            match tail.and_then(|t| t.time_ns()) {
                Some(end) => {
                    let at = end.saturating_sub(ns);
                    last_with(&|i| info(i).is_none_or(|s| s.time_ns <= at))
                }
                // Nothing says where the last segment ends: it alone is read.
                None => files.len() - 1,
            }
        }
    })
}

/// Whether the point `from` names lies before the oldest segment on disk, in segments rotation
/// removed (the state there is gone; the oldest snapshot is later).
pub fn removed_point(series: &Series, from: ReadFrom) -> bool {
    let first = series.first();
    let Some(info) = first.info().filter(|i| i.index > 1) else {
        return false;
    };
    match from {
        ReadFrom::Step(n) => n <= info.steps,
        ReadFrom::Event(n) => n <= first.events_before(),
        ReadFrom::Time(ns) => series.origin_ns().saturating_add(ns) < info.time_ns,
        // The last hour of a trace whose oldest segment on disk began half an hour ago.
        ReadFrom::Last(ns) if ns > 0 => {
            let end = read_tail(&series.last().path).ok().flatten();
            end.and_then(|t| t.time_ns())
                .is_some_and(|end| end.saturating_sub(ns) < info.time_ns)
        }
        ReadFrom::First | ReadFrom::Last(_) => false,
    }
}

/// How a trace cut into segments was read (`reading.segments` in the JSON report).
#[derive(Clone, Debug, Serialize)]
pub struct SegmentFacts {
    /// The segments of the trace there (numbers of the first and last), and those read.
    pub first_there: u32,
    pub last_there: u32,
    pub first_read: u32,
    pub last_read: u32,
    /// Segments between the first and the last there whose files are not there: their events
    /// are not read (the reading starts again from the next one's snapshot).
    pub missing: Vec<u32>,
    /// Where reading was asked to start (`--last`, `--since`, a replay's point); `null`: the
    /// first segment there.
    pub from: Option<String>,
    /// That moment lies in segments rotation removed: reading starts at the oldest there.
    #[serde(skip)]
    pub from_removed: bool,
    /// The live state reading started from, when it was a segment's snapshot: the events
    /// before it, and whether it held the live set.
    pub snapshot_events: Option<u64>,
    pub snapshot_complete: bool,
    /// The segment reading went on from after the last missing one inside the segments read:
    /// the live state was restored from its snapshot, and the answers start there.
    pub resumed: Option<u32>,
    /// Where the first segment read begins: the steps begun before it and nanoseconds from the
    /// trace's first event (a window asked for is read from the start of the segment it lies
    /// in, often well before it).
    pub read_from_step: Option<u64>,
    pub read_from_ns: Option<u64>,
    /// What is gone from the start of the trace: the segments the tracer deleted to keep its
    /// budget (`VRAMTRACE_MAX_BYTES`), not events it lost.
    pub removed: Option<Removed>,
    /// Other traces the name given also stands for (its first file gone, a later run wrote
    /// under it beside an earlier one's segments): the newest is read, these are not.
    pub others: Vec<Other>,
}

/// A trace not read whose segments share the name given.
#[derive(Clone, Debug, Serialize)]
pub struct Other {
    pub pid: u32,
    pub first_segment: u32,
    pub last_segment: u32,
}

impl SegmentFacts {
    /// Whether the trace is more than its first segment: cut, or rotated. A trace that fits in
    /// one segment has nothing to say about segments.
    pub fn is_cut(&self) -> bool {
        self.last_there > 1
    }

    /// Where `--last` or `--since` was asked of a trace of one file, which is read whole, that
    /// in words (`one, read whole: since step 5 chooses …`): nothing else would say the moment
    /// asked for was not where reading began.
    pub fn read_whole(&self) -> Option<String> {
        let asked = self.from.as_ref().filter(|_| !self.is_cut())?;
        Some(format!(
            "one, read whole: {asked} chooses where to start among a trace's segments, and this \
             trace is one file"
        ))
    }

    /// The facts in words, for the report's head.
    pub fn describe(&self) -> String {
        use crate::render::units::{bytes, duration};
        let there = (self.first_there..=self.last_there).count();
        let mut text = match (there, self.missing.as_slice()) {
            (1, _) => format!("{} on disk", self.first_there),
            (_, []) => format!("{}-{} on disk", self.first_there, self.last_there),
            (_, missing) => {
                let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
                let on_disk: Vec<u32> = (self.first_there..=self.last_there)
                    .filter(|i| !missing.contains(i))
                    .collect();
                format!(
                    "{} on disk; MISSING: {} (their events are not read)",
                    list(&on_disk),
                    list(missing)
                )
            }
        };
        if self.first_read > self.first_there {
            text += &format!("; read from segment {}", self.first_read);
        }
        if let Some(from) = &self.from {
            // Reading starts at a segment's start, before the moment asked for: where, said.
            let at = match (self.read_from_step, self.read_from_ns, self.from_removed) {
                // Segment 1 is the trace's start, whatever the window asked reaches back to (an
                // hour of a trace of seconds, a step in a missing segment after it).
                (Some(_), Some(_), false) if self.first_read == 1 => {
                    ": read from the trace's start".to_string()
                }
                // The moment may lie in the missing segment after it: which one is not known.
                (Some(step), Some(ns), false) if self.resumed.is_some() => format!(
                    ": the last segment on disk to begin before it, in step {step} at {}",
                    duration(ns)
                ),
                (Some(step), Some(ns), false) => format!(
                    ": read from the start of the segment it lies in, in step {step} at {}",
                    duration(ns)
                ),
                (Some(step), Some(ns), true) => format!(", in step {step} at {}", duration(ns)),
                _ => String::new(),
            };
            text += &format!(" ({from}{at})");
        }
        // After a missing segment the live state is the next one's snapshot: the answers start
        // there, whatever was read before.
        let start = match self.resumed {
            Some(segment) => {
                format!("; the answers start after what is missing, at segment {segment}")
            }
            None => String::new(),
        };
        match self.snapshot_events {
            Some(events) if self.snapshot_complete => {
                let its = if self.resumed.is_some() {
                    "'s"
                } else {
                    ", from its"
                };
                text += &format!("{start}{its} snapshot after event {events}")
            }
            Some(events) => {
                text += &format!(
                    "{start}, from event {events}: the live set before it is NOT KNOWN (the \
                     tracer had no snapshot to write)"
                )
            }
            None => {}
        }
        if let Some(r) = &self.removed {
            let which = match r.segments {
                1 => "segment 1".to_string(),
                n => format!("segments 1-{n}"),
            };
            text += &format!(
                "; removed by rotation (VRAMTRACE_MAX_BYTES), not lost: {which}, {} events, {} \
                 steps, {}, the first {} of the run",
                r.events,
                r.steps,
                bytes(r.bytes),
                duration(r.span_ns)
            );
        }
        if !self.others.is_empty() {
            let list: Vec<String> = (self.others.iter())
                .map(|o| match o.first_segment == o.last_segment {
                    true => format!("pid {} (segment {})", o.pid, o.first_segment),
                    false => format!(
                        "pid {} (segments {}-{})",
                        o.pid, o.first_segment, o.last_segment
                    ),
                })
                .collect();
            text += &format!(
                "; NOT READ: the name also stands for the segments of {} (another run under \
                 the same name): name one of its segments to read it",
                list.join(", ")
            );
        }
        text
    }
}

/// The segments before the first one there.
#[derive(Clone, Debug, Serialize)]
pub struct Removed {
    pub segments: u32,
    pub events: u64,
    pub steps: u64,
    pub bytes: u64,
    /// Nanoseconds from the trace's first event to the first segment there (the time of the
    /// last event removed).
    pub span_ns: u64,
}

impl SegmentFacts {
    /// The facts of reading `series` from file `start` (its last read file `last`) into
    /// `state`; `None` for a trace of one file.
    pub fn new(
        series: &Series,
        start: usize,
        read: usize,
        from: ReadFrom,
        state: &LiveState,
    ) -> Option<Self> {
        // A trace written without segment facts (an older tracer) has none to give, unless a
        // window was asked of it: then that it is one file, read whole, must be said.
        let asked = !matches!(from, ReadFrom::First | ReadFrom::Event(_));
        if series.first().info().is_none() && !asked {
            return None;
        }
        let files = &series.files;
        let restored = state.restored();
        let gone = series.gone();
        let start_ns = series.origin_ns();
        let first_read = files[start].index();
        let last_read = files[(start + read).saturating_sub(1).min(files.len() - 1)].index();
        let missing: Vec<u32> = (series.first().index()..series.last().index())
            .filter(|i| !files.iter().any(|f| f.index() == *i))
            .collect();
        Some(SegmentFacts {
            first_there: series.first().index(),
            last_there: series.last().index(),
            first_read,
            last_read,
            missing: missing.clone(),
            resumed: (missing.iter())
                .filter(|&&m| first_read < m && m < last_read)
                .max()
                .and_then(|&m| files.iter().map(|f| f.index()).find(|&i| i > m)),
            from_removed: start == 0 && from.describe().is_some() && removed_point(series, from),
            from: from
                .describe()
                .map(|asked| match start == 0 && removed_point(series, from) {
                    true if matches!(from, ReadFrom::Last(_)) => format!(
                        "{asked}, reaching into what rotation removed: read from the oldest \
                         segment on disk"
                    ),
                    true => format!(
                        "{asked}, which rotation removed: read from the oldest segment on disk"
                    ),
                    false => asked,
                }),
            snapshot_events: restored.map(|r| r.events),
            snapshot_complete: restored.is_none_or(|r| r.complete),
            read_from_step: files[start].info().map(|s| s.steps),
            read_from_ns: files[start]
                .info()
                .map(|s| s.time_ns.saturating_sub(start_ns)),
            removed: gone.map(|g: Gone| Removed {
                segments: g.segments,
                events: g.events,
                steps: g.steps,
                bytes: g.bytes,
                span_ns: g.until_ns.saturating_sub(start_ns),
            }),
            others: (series.others.iter())
                .map(|o| Other {
                    pid: o.pid,
                    first_segment: o.first,
                    last_segment: o.last,
                })
                .collect(),
        })
    }
}

/// What the end of a trace says of all of it without reading it: the last segment's
/// `SegmentEnd` (the tracer writes one at the end of every segment, and of a trace of one file
/// it cut into one segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Indexed {
    /// The event at which the device holding the most memory at its peak reached it, when that
    /// event is in the files there.
    pub peak_event: Option<u64>,
    /// Steps begun by the end (the tracer counts step marks only).
    pub steps: u64,
}

/// The index at the end of `series`, when its last file has one.
pub fn indexed(series: &Series) -> Option<Indexed> {
    let end = read_tail(&series.last().path).ok()??.segment_end?;
    let peak = (end.peaks.iter())
        .max_by_key(|p| (p.bytes, std::cmp::Reverse(p.event)))
        .filter(|p| p.event > series.first().events_before());
    Some(Indexed {
        peak_event: peak.map(|p| p.event),
        steps: end.steps,
    })
}
