//! A trace as files: one file, or the segments of a trace cut into segments
//! (`docs/trace-format.md`, "Segments"), found beside each other by name and told apart by
//! their headers, and read in a row from any of them as one trace.
//!
//! Whatever segment a reader starts at, it starts from that segment's snapshot; the segments
//! after it continue the state, so their first records up to their snapshot are passed over.
//! A segment that does not begin where the one before ended (one is missing, or the one before
//! was cut short) starts the replay again from its own snapshot, and what lies between is
//! listed unread.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::ending::{Ending, Unread};
use super::error::TraceError;
use super::header::{Header, SegmentInfo};
use super::reader::{RecordRef, TraceReader};
use super::record::Record;

/// Pid, host and start (wall clock, monotonic) of the process that wrote a trace.
pub type TraceKey = (u32, String, u64, u64);

/// One file of a trace, its header read.
#[derive(Clone, Debug)]
pub struct SegmentFile {
    pub path: PathBuf,
    pub header: Header,
    pub version: u32,
    /// Bytes of the file.
    pub len: u64,
}

impl SegmentFile {
    /// Reads the header of the trace file at `path`.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let io = |source| TraceError::Io {
            path: path.display().to_string(),
            source,
        };
        // A FIFO would block the open until a writer came (and a device never end): only a
        // regular file is a trace's segment.
        let kind = std::fs::metadata(path).map_err(io)?;
        if !kind.is_file() && !kind.is_dir() {
            return Err(io(std::io::Error::other(
                "not a regular file (a FIFO, device or socket); a trace is a file",
            )));
        }
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_or(0, |m| m.len());
        let reader = TraceReader::new(BufReader::with_capacity(64 << 10, file))?;
        Ok(SegmentFile {
            path: path.to_path_buf(),
            header: reader.header().clone(),
            version: reader.version(),
            len,
        })
    }

    /// Where the file stands in its trace, when it is a segment.
    pub fn info(&self) -> Option<&SegmentInfo> {
        self.header.segment.as_ref()
    }

    /// Its segment's number (1 for the first, and for a trace of one file).
    pub fn index(&self) -> u32 {
        self.info().map_or(1, |s| s.index)
    }

    /// Events before it.
    pub fn events_before(&self) -> u64 {
        self.info().map_or(0, |s| s.events_before)
    }

    /// What tells the trace it belongs to from any other: the process and its start.
    pub fn trace_key(&self) -> TraceKey {
        let h = &self.header;
        (h.pid, h.host.clone(), h.start_unix_ns, h.start_mono_ns)
    }

    /// Whether `other` is a file of the same trace.
    fn same_trace(&self, other: &SegmentFile) -> bool {
        self.trace_key() == other.trace_key()
    }
}

/// What is gone from the start of a trace: the segments before the first one there, deleted by
/// the tracer to keep its budget (or by hand).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gone {
    /// Segments, events, steps and bytes before the first segment there.
    pub segments: u32,
    pub events: u64,
    pub steps: u64,
    pub bytes: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the first segment there began.
    pub until_ns: u64,
}

/// The files of one trace, in order.
#[derive(Clone, Debug)]
pub struct Series {
    pub files: Vec<SegmentFile>,
    /// Other traces whose segments the name given also stands for (its first file deleted by
    /// rotation, and the name taken again by a later run writing beside the earlier one's
    /// segments): each one's process and the numbers of its first and last segment there. The
    /// newest trace is the one read.
    pub others: Vec<OtherTrace>,
    /// [`Series::first_event_ns`], once asked.
    first_event: std::sync::OnceLock<Option<u64>>,
}

/// A trace whose segments share a name with the one read ([`Series::others`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtherTrace {
    pub pid: u32,
    pub first: u32,
    pub last: u32,
}

/// `run.seg3.vtrace` → (`run`, `.vtrace`); `run.vtrace` → (`run`, `.vtrace`); a name without
/// an extension has none (`run.seg3` → (`run`, ``)). A fresh name the tracer gave a segment (`run.seg3.4242.vtrace`) is
/// of the same trace.
fn base_of(name: &str) -> (String, String) {
    let parts: Vec<&str> = name.split('.').collect();
    let is_segment = |p: &&str| {
        p.len() > 3 && p.starts_with("seg") && p[3..].bytes().all(|b| b.is_ascii_digit())
    };
    // A segment of a trace named without an extension ends in its tag (`run.seg3`).
    let ext_at = if parts.len() > 1 && !is_segment(&parts[parts.len() - 1]) {
        parts.len() - 1
    } else {
        parts.len()
    };
    let ext = parts
        .get(ext_at)
        .map(|e| format!(".{e}"))
        .unwrap_or_default();
    let base_end = (1..ext_at)
        .find(|&i| is_segment(&parts[i]))
        .unwrap_or(ext_at);
    (parts[..base_end.max(1)].join("."), ext)
}

/// The name of the trace the file at `path`, with `header`, is part of: its own, unless its
/// header says it is a later segment, then its first segment's (`run.vtrace` for
/// `run.seg7.vtrace`), beside it, whether or not that file is still there. A copy, or another
/// trace named like a segment, keeps its own.
pub fn trace_name(path: &Path, header: &Header) -> PathBuf {
    let name = path
        .file_name()
        .filter(|_| header.segment.as_ref().is_some_and(|s| s.index > 1));
    let Some(name) = name else {
        return path.to_path_buf();
    };
    let (base, ext) = base_of(&name.to_string_lossy());
    path.with_file_name(format!("{base}{ext}"))
}

/// [`trace_name`] of the file at `path`, its header read; `path` itself when it cannot be.
pub fn trace_of(path: &Path) -> PathBuf {
    SegmentFile::open(path).map_or(path.to_path_buf(), |f| trace_name(&f.path, &f.header))
}

/// The segment number a name gives (`run.seg7.vtrace` → 7; `run.seg7.4242.vtrace` → 7).
fn segment_number(name: &str) -> Option<u32> {
    name.split('.')
        .skip(1)
        .find_map(|p| p.strip_prefix("seg").and_then(|n| n.parse().ok()))
}

impl Series {
    /// The name the trace's first segment has, or had before rotation removed it
    /// (`run.vtrace` for `run.seg7.vtrace`), beside its files.
    pub fn first_name(&self) -> Option<PathBuf> {
        let file = self.files.first()?;
        let name = file.path.file_name()?.to_string_lossy().into_owned();
        let (base, ext) = base_of(&name);
        Some(file.path.with_file_name(format!("{base}{ext}")))
    }

    /// The trace `path` names: the file, and when it is a segment, the other segments of its
    /// trace beside it. A name that no longer exists (the first segment, deleted to keep the
    /// budget) names the segments that were written after it.
    pub fn find(path: &Path) -> Result<Series, TraceError> {
        let (named, missing) = match SegmentFile::open(path) {
            Ok(f) if f.info().is_none() => return Ok(Series::of(vec![f])),
            Ok(f) => (Some(f), None),
            Err(e @ TraceError::Io { .. }) if is_not_found(&e) => (None, Some(e)),
            Err(e) => return Err(e),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let (base, ext) = base_of(&name);
        let mut files: Vec<SegmentFile> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.ends_with(&ext)
                    && (n == format!("{base}{ext}") || n.starts_with(&format!("{base}.seg")))
            })
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| SegmentFile::open(&e.path()).ok())
            .filter(|f| f.info().is_some())
            .collect();
        let anchor = match named {
            Some(f) => f,
            // The newest trace among them.
            None => match files.iter().max_by_key(|f| f.header.start_unix_ns) {
                Some(f) => f.clone(),
                None => {
                    return Err(missing.expect("a file that is not there was not found"));
                }
            },
        };
        let mut others: Vec<OtherTrace> = Vec::new();
        for f in files.iter().filter(|f| !f.same_trace(&anchor)) {
            match others.iter_mut().find(|o| o.pid == f.header.pid) {
                Some(o) => (o.first, o.last) = (o.first.min(f.index()), o.last.max(f.index())),
                None => others.push(OtherTrace {
                    pid: f.header.pid,
                    first: f.index(),
                    last: f.index(),
                }),
            }
        }
        others.sort_by_key(|o| o.first);
        files.retain(|f| f.same_trace(&anchor));
        // A missing segment's name stands for its trace only when rotation can have removed it:
        // a number before the first there, not one the trace never reached.
        if let (Some(e), Some(asked)) = (missing, segment_number(&name)) {
            if files.first().is_none_or(|f| asked >= f.index()) {
                return Err(e);
            }
        }
        if !files.iter().any(|f| f.path == anchor.path) {
            files.push(anchor);
        }
        files.sort_by_key(|f| f.index());
        files.dedup_by_key(|f| f.index());
        Ok(Series {
            others,
            ..Series::of(files)
        })
    }

    fn of(files: Vec<SegmentFile>) -> Series {
        Series {
            files,
            others: Vec::new(),
            first_event: std::sync::OnceLock::new(),
        }
    }

    /// `CLOCK_MONOTONIC` nanoseconds of the trace's first event: where every time a user gives
    /// (`--since 3s`, `--at 700ms`) and every time the tools say is counted from, as the replay
    /// counts. The first file there says it: a later segment in its snapshot, the first in its
    /// first event (or, after a snapshot written without the live state, the segment's own).
    /// `None` for a file without events.
    pub fn first_event_ns(&self) -> Option<u64> {
        *self.first_event.get_or_init(|| {
            let file = File::open(&self.first().path).ok()?;
            let mut reader = TraceReader::new(BufReader::with_capacity(64 << 10, file)).ok()?;
            while let Some(r) = reader.next_event_or_record() {
                match r {
                    RecordRef::Event(e) => return Some(e.time_ns),
                    // A snapshot written without the live state knows no first event: the
                    // segment's own first event stands for it, as the replay takes it.
                    RecordRef::Other(Record::Snapshot(s)) if s.first_time_ns > 0 => {
                        return Some(s.first_time_ns)
                    }
                    RecordRef::Other(_) => {}
                }
            }
            None
        })
    }

    /// [`Series::first_event_ns`], else the process's start (the header's): the origin of the
    /// times said of the trace.
    pub fn origin_ns(&self) -> u64 {
        (self.first_event_ns()).unwrap_or(self.first().header.start_mono_ns)
    }

    /// The first file there.
    pub fn first(&self) -> &SegmentFile {
        &self.files[0]
    }

    /// The last file there.
    pub fn last(&self) -> &SegmentFile {
        &self.files[self.files.len() - 1]
    }

    /// What is gone from the start of the trace, when its first segment is not there.
    pub fn gone(&self) -> Option<Gone> {
        let info = self.first().info()?;
        (info.index > 1).then(|| Gone {
            segments: info.index - 1,
            events: info.events_before,
            steps: info.steps,
            bytes: info.bytes_before,
            until_ns: info.time_ns,
        })
    }

    /// Reads the trace from its `from`-th file there (0: the first) to the end, chunks read
    /// ahead on a second thread.
    pub fn read_from(&self, from: usize) -> Result<SeriesReader, TraceError> {
        let rest = self.files.get(from..).unwrap_or_default().to_vec();
        let first = rest.first().ok_or_else(|| TraceError::Io {
            path: String::new(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        let file = File::open(&first.path).map_err(|source| TraceError::Io {
            path: first.path.display().to_string(),
            source,
        })?;
        let reader = TraceReader::new(boxed(file))?.read_ahead();
        Ok(SeriesReader::new(reader, rest))
    }
}

fn is_not_found(e: &TraceError) -> bool {
    matches!(e, TraceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// A file read through a buffer, as every file of a series is.
pub(crate) type SeriesRead = Box<dyn Read + Send>;

fn boxed(file: File) -> SeriesRead {
    Box::new(BufReader::with_capacity(1 << 20, file))
}

/// Reads the files of a trace one after the other as one trace: iterate it with
/// [`SeriesReader::next_event_or_record`]; afterwards it says how reading went, over all files.
pub struct SeriesReader {
    current: TraceReader<SeriesRead>,
    /// The file being read, then the ones after it.
    files: Vec<SegmentFile>,
    at: usize,
    header: Header,
    version: u32,
    /// Bytes, records, chunks and skipped records of the files done.
    done: (u64, u64, u64, u64),
    unread: Vec<Unread>,
    /// Events given so far, counted from the start of the trace (a snapshot says from where).
    events: u64,
    /// Passing over the first records of a segment that continues the one before.
    passing: bool,
}

impl SeriesReader {
    /// Reads `files` (their first one through `first`, already opened) in a row.
    pub fn new(first: TraceReader<SeriesRead>, files: Vec<SegmentFile>) -> Self {
        let events = files.first().map_or(0, SegmentFile::events_before);
        SeriesReader {
            header: first.header().clone(),
            version: first.version(),
            current: first,
            files,
            at: 0,
            done: (0, 0, 0, 0),
            unread: Vec::new(),
            events,
            passing: false,
        }
    }

    /// The header of the first file read.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The first file's format version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Files read (or being read).
    pub fn files_read(&self) -> &[SegmentFile] {
        &self.files[..(self.at + 1).min(self.files.len())]
    }

    /// How the last file read ended; `None` until the records are exhausted.
    pub fn ending(&self) -> Option<&Ending> {
        self.current.ending()
    }

    /// Bytes consumed so far, over every file (for progress).
    pub fn offset(&self) -> u64 {
        self.done.0 + self.current.offset()
    }

    /// Records returned so far.
    pub fn records(&self) -> u64 {
        self.done.1 + self.current.records()
    }

    /// Complete chunks read so far.
    pub fn chunks(&self) -> u64 {
        self.done.2 + self.current.chunks()
    }

    /// Records skipped because this reader does not know their kind.
    pub fn skipped(&self) -> u64 {
        self.done.3 + self.current.skipped()
    }

    /// What could not be read so far, in order; with several files, offsets count from the
    /// start of the first file read and each reason names its file.
    pub fn unread(&self) -> Vec<Unread> {
        let mut all = self.unread.clone();
        all.extend(self.shifted(self.current.unread(), false));
        all
    }

    /// `unread` of the current file, its offsets counted from the first file's start; `done`:
    /// the file is one before the last, and a chunk it ends inside is damage, not the cut.
    fn shifted(&self, unread: &[Unread], done: bool) -> Vec<Unread> {
        let several = self.files.len() > 1;
        let file = self
            .files
            .get(self.at)
            .map(|f| f.path.display().to_string());
        (unread.iter())
            .map(|u| Unread {
                offset: u.offset + self.done.0,
                reason: match (&file, several) {
                    (Some(f), true) => format!("{f}: {}", u.reason),
                    _ => u.reason.clone(),
                },
                torn: u.torn && !done,
                ..u.clone()
            })
            .collect()
    }

    /// Moves on to the next file; `false` when there is none.
    fn next_file(&mut self) -> bool {
        let Some(next) = self.files.get(self.at + 1) else {
            return false;
        };
        let opened = File::open(&next.path)
            .map_err(|source| TraceError::Io {
                path: next.path.display().to_string(),
                source,
            })
            .and_then(|f| TraceReader::new(boxed(f)));
        let done_unread = self.shifted(self.current.unread(), true);
        self.unread.extend(done_unread);
        let c = &self.current;
        self.done = (
            self.done.0 + c.offset(),
            self.done.1 + c.records(),
            self.done.2 + c.chunks(),
            self.done.3 + c.skipped(),
        );
        self.at += 1;
        let before = next.events_before();
        match opened {
            Ok(reader) => {
                self.current = reader.read_ahead();
                self.passing = before == self.events;
                if before != self.events {
                    let (index, previous) = (next.index(), self.files[self.at - 1].index());
                    let why = match index.checked_sub(previous + 1) {
                        Some(0) | None => {
                            format!("segment {index} does not begin where segment {previous} ended")
                        }
                        Some(1) => format!("segment {} is not there", previous + 1),
                        Some(_) => format!("segments {}-{} are not there", previous + 1, index - 1),
                    };
                    self.unread.push(Unread {
                        offset: self.done.0,
                        bytes: 0,
                        events: before.checked_sub(self.events),
                        reason: format!(
                            "{}: {why}; reading starts again from segment {index}'s snapshot",
                            next.path.display(),
                        ),
                        torn: false,
                    });
                }
                true
            }
            Err(e) => {
                self.unread.push(Unread {
                    offset: self.done.0,
                    bytes: next.len,
                    events: None,
                    reason: format!("{}: {e}", next.path.display()),
                    torn: false,
                });
                false
            }
        }
    }

    /// The next record, or `None` at the end of the last file, with events lent.
    pub fn next_event_or_record(&mut self) -> Option<RecordRef<'_>> {
        loop {
            // The borrow checker cannot see that a record returned ends the loop: look first.
            let kind = match self.current.next_event_or_record() {
                None => None,
                Some(RecordRef::Event(_)) => Some(None),
                Some(RecordRef::Other(r)) => Some(Some(r)),
            };
            match kind {
                None => {
                    if !self.next_file() {
                        return None;
                    }
                }
                Some(None) => {
                    self.passing = false;
                    self.events += 1;
                    return Some(RecordRef::Event(self.current.current_event()));
                }
                Some(Some(r)) => {
                    if let Record::Snapshot(s) = &r {
                        self.events = s.events;
                        if std::mem::take(&mut self.passing) {
                            continue;
                        }
                    }
                    if self.passing {
                        continue;
                    }
                    return Some(RecordRef::Other(r));
                }
            }
        }
    }
}

impl super::reader::RecordSource for SeriesReader {
    #[inline]
    fn next_event_or_record(&mut self) -> Option<RecordRef<'_>> {
        SeriesReader::next_event_or_record(self)
    }
}

#[cfg(test)]
mod tests {
    use super::base_of;

    #[test]
    fn a_segments_name_gives_its_traces() {
        let cases = [
            ("run.vtrace", ("run", ".vtrace")),
            ("run.seg3.vtrace", ("run", ".vtrace")),
            ("run.seg3.4242.vtrace", ("run", ".vtrace")),
            ("run", ("run", "")),
            ("run.seg3", ("run", "")),
            ("a.b.seg12", ("a.b", "")),
            ("seg3", ("seg3", "")),
        ];
        for (name, (base, ext)) in cases {
            assert_eq!(base_of(name), (base.to_string(), ext.to_string()), "{name}");
        }
    }
}
