//! What the end of a trace file says, read from its last chunks only: where a segment ends
//! (its `SegmentEnd` record) and the last event written, so that a reader can choose where to
//! start in a long trace without reading it.
//!
//! The last chunks are found by their sync markers in the last few MiB of the file (format 5
//! and later; a format 4 file has none) and read as any chunk is.

use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use super::error::TraceError;
use super::frame::{self, SYNC};
use super::reader::{RecordRef, TraceReader};
use super::record::{End, Record, SegmentEnd};

/// Bytes at the end of a file looked at for its last chunks: more than the largest chunk the
/// tracer writes.
const TAIL_BYTES: u64 = 4 << 20;

/// What a file's last chunks say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tail {
    /// The segment's last record, when it was written.
    pub segment_end: Option<SegmentEnd>,
    /// The trace's end record, when it was written.
    pub end: Option<End>,
    /// Sequence number and time of the last event in those chunks.
    pub last_event: Option<(u64, u64)>,
}

impl Tail {
    /// The time the file's records reach: its end, its segment's end, or its last event.
    pub fn time_ns(&self) -> Option<u64> {
        (self.end.as_ref().map(|e| e.time_ns))
            .or(self.segment_end.as_ref().map(|e| e.time_ns))
            .or(self.last_event.map(|e| e.1))
    }
}

/// The records of the last chunks of the trace file at `path`; `Ok(None)` when no chunk can be
/// found there (a format 4 file, or one cut inside its only chunks).
pub fn read_tail(path: &Path) -> Result<Option<Tail>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let start = super::header::read_start(&mut file)?;
    if start.version < 5 {
        return Ok(None);
    }
    let header_len = start.chunks_at;
    let from = len.saturating_sub(TAIL_BYTES).max(header_len);
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(from)).map_err(io)?;
    file.read_to_end(&mut tail).map_err(io)?;
    let first = (0..tail.len().saturating_sub(SYNC.len()))
        .find(|&i| tail[i..i + SYNC.len()] == SYNC && frame::starts_chunk(&tail[i..]));
    let Some(first) = first else {
        return Ok(None);
    };
    // The header again, then the chunks from the first one found: a trace file of its own.
    let mut head = vec![0u8; header_len as usize];
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.read_exact(&mut head).map_err(io)?;
    head.extend_from_slice(&tail[first..]);
    let mut reader = TraceReader::new(Cursor::new(head))?;
    let mut found = Tail::default();
    while let Some(r) = reader.next_event_or_record() {
        match r {
            RecordRef::Event(e) => found.last_event = Some((e.seq, e.time_ns)),
            RecordRef::Other(Record::SegmentEnd(e)) => found.segment_end = Some(e),
            RecordRef::Other(Record::End(e)) => found.end = Some(e),
            RecordRef::Other(_) => {}
        }
    }
    Ok(Some(found))
}
