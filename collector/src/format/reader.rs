//! Reads a trace back, record by record, in constant memory, and says how it ends.
//!
//! Events, nearly all of a trace, can be read without a copy: [`TraceReader::next_event_or_record`]
//! decodes each into one event the reader keeps and lends it out. A reader made by
//! [`TraceReader::open`] decompresses the next chunks on a second thread meanwhile.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::chunk::{self, read_full, Loaded, Scratch};
use super::compact::Delta;
use super::decode::compact::Decoded;
use super::decode::Common;
use super::decode::{self, Columns};
use super::error::TraceError;
use super::header::{Header, FORMAT_VERSION, MAGIC, OLDEST_VERSION};
use super::layout;
use super::prefetch::Prefetcher;
use super::record::{Record, TAG_EVENT};
use super::shapes::{self, Shape, Shapes};
use super::varint;
use crate::event::Event;

/// How the records of a trace ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The tracer wrote its end record: the trace is whole.
    Complete,
    /// The file ends cleanly between chunks but without the end record: the process was killed,
    /// or it is still running.
    NoEndRecord { offset: u64 },
    /// The file is cut off inside a chunk; the records of that chunk are lost.
    Truncated { offset: u64, have: u64, need: u64 },
    /// A chunk is damaged (checksum, compression or framing); reading stopped there.
    Corrupt { offset: u64, reason: String },
}

impl Ending {
    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            Ending::Complete => "complete".to_string(),
            Ending::NoEndRecord { offset } => format!(
                "no end record: the trace stops at byte {offset} (process killed or still running)"
            ),
            Ending::Truncated { offset, have, need } => format!(
                "truncated: cut off inside the chunk at byte {offset} ({have} of {need} bytes present)"
            ),
            Ending::Corrupt { offset, reason } => {
                format!("damaged chunk at byte {offset}: {reason}")
            }
        }
    }

    /// Whether the trace is whole.
    pub fn is_complete(&self) -> bool {
        matches!(self, Ending::Complete)
    }
}

/// A record as [`TraceReader::next_event_or_record`] returns it: an event lent by the reader
/// (valid until the next call), or any other record.
#[derive(Debug)]
pub enum RecordRef<'a> {
    Event(&'a Event),
    Other(Record),
}

/// Where chunks come from.
enum Source<R> {
    /// Read and decompressed on the calling thread.
    Direct { src: R, scratch: Scratch },
    /// Read and decompressed ahead on a second thread.
    Prefetch(Prefetcher),
}

/// A streaming trace reader. Iterate it for records; afterwards [`TraceReader::ending`] says
/// whether the file was whole and where it stopped.
pub struct TraceReader<R: Read> {
    source: Source<R>,
    header: Header,
    offset: u64,
    /// The current chunk, decompressed: its records (and, from version 3, its columns).
    chunk: Vec<u8>,
    pos: usize,
    /// Where the chunk's records end.
    records_end: usize,
    /// The event [`TraceReader::next_event_or_record`] decodes into and lends out.
    event: Event,
    /// The format version: 1 (events in postcard's layout), 2 (events against `delta`) or 3
    /// (events against `delta`, their values in the chunk's columns).
    version: u32,
    /// What the next event of the chunk is written against (versions 2 and 3).
    delta: Delta,
    /// Where the next value of each column of the chunk is (from version 3).
    columns: Columns,
    /// Whether an event of this chunk was damaged, so that where its values ended in the columns
    /// is not known: the chunk's later events are skipped (from version 3).
    columns_lost: bool,
    /// Where in `chunk` the one-pass reader of common events may start a record (it reads a
    /// whole window after the start): 0 in version 1, and once reading has ended.
    common_end: usize,
    /// Whether `event`'s seldom-changing fields are `delta`'s, as the one-pass reader of common
    /// events leaves them (see `decode::read_common_event`): cleared whenever anything else
    /// moves `delta` or writes `event`.
    synced: bool,
    /// The chunk's record shapes so far (version 4).
    shapes: Shapes,
    ending: Option<Ending>,
    chunks: u64,
    records: u64,
    skipped: u64,
    saw_end: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file and reads its header. The chunks are then read and decompressed ahead
    /// on a second thread.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(TraceReader::new(BufReader::with_capacity(1 << 20, file))?.prefetching())
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the header from `src`; records follow on iteration, read on the calling thread.
    pub fn new(mut src: R) -> Result<Self, TraceError> {
        let io = |source| TraceError::Io {
            path: "trace".into(),
            source,
        };
        let mut fixed = [0u8; 16];
        let got = read_full(&mut src, &mut fixed).map_err(io)?;
        if got < 8 {
            if got > 0 && fixed[..got] == MAGIC[..got] {
                return Err(TraceError::TruncatedHeader {
                    have: got as u64,
                    need: 16,
                });
            }
            if got == 0 {
                return Err(TraceError::TruncatedHeader { have: 0, need: 16 });
            }
            return Err(TraceError::NotATrace);
        }
        if fixed[..8] != MAGIC {
            return Err(TraceError::NotATrace);
        }
        if got < 16 {
            return Err(TraceError::TruncatedHeader {
                have: got as u64,
                need: 16,
            });
        }
        let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(TraceError::UnsupportedVersion {
                found: version,
                oldest: OLDEST_VERSION,
                supported: FORMAT_VERSION,
            });
        }
        let len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes"));
        if len > 16 * 1024 * 1024 {
            return Err(TraceError::CorruptHeader(format!(
                "header length {len} is implausible"
            )));
        }
        let mut head = vec![0u8; len as usize + 4];
        let got = read_full(&mut src, &mut head).map_err(io)?;
        if got < head.len() {
            return Err(TraceError::TruncatedHeader {
                have: 16 + got as u64,
                need: 16 + head.len() as u64,
            });
        }
        let (body, crc) = head.split_at(len as usize);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return Err(TraceError::CorruptHeader("checksum mismatch".into()));
        }
        let (header, _) = postcard::take_from_bytes::<Header>(body)
            .map_err(|e| TraceError::CorruptHeader(e.to_string()))?;
        Ok(TraceReader {
            source: Source::Direct {
                src,
                scratch: Scratch::default(),
            },
            header,
            offset: 16 + head.len() as u64,
            chunk: Vec::new(),
            pos: 0,
            records_end: 0,
            event: decode::blank(),
            version,
            delta: Delta::default(),
            columns: Columns::default(),
            columns_lost: false,
            common_end: 0,
            synced: false,
            shapes: Shapes::default(),
            ending: None,
            chunks: 0,
            records: 0,
            skipped: 0,
            saw_end: false,
        })
    }

    /// This reader, reading and decompressing the chunks after the current one on a second
    /// thread (unchanged when no thread can be started). Records come in the same order.
    pub fn prefetching(self) -> Self
    where
        R: Send + 'static,
    {
        let TraceReader {
            source,
            header,
            offset,
            chunk,
            pos,
            records_end,
            event,
            version,
            delta,
            columns,
            columns_lost,
            common_end,
            synced,
            shapes,
            ending,
            chunks,
            records,
            skipped,
            saw_end,
        } = self;
        let source = match source {
            Source::Direct { src, scratch } => match Prefetcher::spawn(src, offset) {
                Ok(p) => Source::Prefetch(p),
                Err(src) => Source::Direct { src, scratch },
            },
            prefetch => prefetch,
        };
        TraceReader {
            source,
            header,
            offset,
            chunk,
            pos,
            records_end,
            event,
            version,
            delta,
            columns,
            columns_lost,
            common_end,
            synced,
            shapes,
            ending,
            chunks,
            records,
            skipped,
            saw_end,
        }
    }

    /// The trace header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The trace's format version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// How the trace ended; `None` until the records are exhausted.
    pub fn ending(&self) -> Option<&Ending> {
        self.ending.as_ref()
    }

    /// Bytes of the file consumed so far (for progress).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Complete chunks read so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// Records returned so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records skipped because this reader does not know their kind (written by a newer version).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Loads the next chunk; `false` when the records are over (and `ending` is set).
    fn load_chunk(&mut self) -> bool {
        let start = self.offset;
        let loaded = match &mut self.source {
            Source::Direct { src, scratch } => chunk::load(src, start, scratch, &mut self.chunk),
            Source::Prefetch(p) => p.next(start, &mut self.chunk),
        };
        match loaded {
            Loaded::Chunk { len } => {
                (self.pos, self.records_end) = (0, self.chunk.len());
                if self.version >= 3 {
                    match layout::parse(&self.chunk) {
                        Ok(parts) => {
                            (self.pos, self.records_end) = (parts.records.start, parts.records.end);
                            self.columns = Columns::new(&parts.columns);
                            // Values are read eight bytes at a time, up to the last byte.
                            self.chunk.extend_from_slice(&[0; decode::PADDING]);
                        }
                        Err(reason) => {
                            self.ending = Some(Ending::Corrupt {
                                offset: start,
                                reason,
                            });
                            return false;
                        }
                    }
                }
                self.offset += len;
                // The one-pass reader reads a window after a record's start: only where the
                // window lies inside the records. Version 4's reads one byte where a record's
                // item starts, and a window after the shape's record (checked there).
                self.common_end = match self.version {
                    1 => 0,
                    2 | 3 => (self.records_end + 1).saturating_sub(2 + decode::WINDOW),
                    _ => self.records_end,
                };
                self.shapes.clear();
                // Every chunk decodes on its own.
                self.delta = Delta::default();
                self.columns_lost = false;
                self.synced = false;
                self.chunks += 1;
                true
            }
            Loaded::Eof => {
                self.ending = Some(if self.saw_end {
                    Ending::Complete
                } else {
                    Ending::NoEndRecord { offset: start }
                });
                false
            }
            Loaded::Stop(ending) => {
                self.ending = Some(ending);
                false
            }
        }
    }

    /// The tag and the payload's range in `chunk` of the next record, or `None` at the end of
    /// the readable part.
    #[inline]
    fn next_payload(&mut self) -> Option<(u64, usize, usize)> {
        if self.ending.is_some() {
            return None;
        }
        loop {
            while self.pos >= self.records_end {
                if !self.load_chunk() {
                    return None;
                }
            }
            // Where the record is, and what its item byte says (version 4).
            let (at, item) = if self.version >= 4 {
                let item = self.chunk[self.pos];
                match item {
                    shapes::PLAIN | shapes::DEFINE => (self.pos + 1, item),
                    k => match self.shapes.get(k) {
                        Some(shape) => (shape.at, item),
                        None => {
                            return self.corrupt("record names a shape its chunk has not defined")
                        }
                    },
                }
            } else {
                (self.pos, shapes::PLAIN)
            };
            let rest = &self.chunk[at..self.records_end];
            let framed = varint::get(rest).and_then(|(len, used)| {
                let end = used.checked_add(usize::try_from(len).ok()?)?;
                (end <= rest.len()).then_some((used, end))
            });
            let Some((used, end)) = framed else {
                let reason = match varint::get(rest) {
                    None => "bad record length",
                    Some(_) => "record runs past its chunk",
                };
                return self.corrupt(reason);
            };
            let (body_start, body_end) = (at + used, at + end);
            match item {
                shapes::PLAIN => self.pos = body_end,
                shapes::DEFINE => {
                    self.pos = body_end;
                    let hot = self.hot_shape(at, body_end);
                    self.shapes.define(Shape { at, hot });
                }
                _ => self.pos += 1,
            }
            match varint::get(&self.chunk[body_start..body_end]) {
                Some((tag, tag_len)) => return Some((tag, body_start + tag_len, body_end)),
                None => self.skipped += 1,
            }
        }
    }

    /// Reading stops at damaged framing: `None`, for [`TraceReader::next_payload`].
    #[cold]
    fn corrupt(&mut self, reason: &str) -> Option<(u64, usize, usize)> {
        self.common_end = 0;
        self.ending = Some(Ending::Corrupt {
            offset: self.offset,
            reason: reason.into(),
        });
        None
    }

    /// What the one-pass reader takes from a shape's record (at `at`, ending at `end`) once and
    /// for all: `None` unless it is a common event's without the seldom-changing fields, with a
    /// one-byte length and tag.
    fn hot_shape(&self, at: usize, end: usize) -> Option<shapes::HotShape> {
        let (len, tag) = (*self.chunk.get(at)?, *self.chunk.get(at + 1)?);
        if len >= 0x80 || u64::from(tag) != TAG_EVENT {
            return None;
        }
        let start = at + 2;
        // A record near the end of the chunk has less than a window after it: copied.
        let mut window = [0u8; decode::WINDOW];
        let rest = self.chunk.get(start..)?;
        let n = rest.len().min(decode::WINDOW);
        window[..n].copy_from_slice(&rest[..n]);
        decode::common_shape(&window, end.checked_sub(start)?)
    }

    /// Decodes a record other than an event; `None` (counted as skipped) when this reader does
    /// not know it.
    fn other(&mut self, tag: u64, start: usize, end: usize) -> Option<Record> {
        let record = Record::decode(tag, &self.chunk[start..end]);
        match &record {
            Some(r) => {
                self.saw_end |= matches!(r, Record::End(_));
                self.records += 1;
            }
            None => self.skipped += 1,
        }
        record
    }

    /// Decodes the event payload `chunk[start..end]` into the event the reader keeps; `false`
    /// (counted as skipped) when this reader does not know it.
    #[inline(always)]
    fn event(&mut self, start: usize, end: usize) -> bool {
        self.decode_event(
            start,
            end,
            decode::compact::event_into,
            decode::compact::split_event_into,
        )
    }

    /// [`TraceReader::event`] with varints packed by `pext` or not (`PEXT` only inside
    /// functions compiled for BMI2).
    #[inline(always)]
    fn event_with<const PEXT: bool>(&mut self, start: usize, end: usize) -> bool {
        self.decode_event(
            start,
            end,
            decode::compact::event_into_with::<PEXT>,
            decode::compact::split_event_into_with::<PEXT>,
        )
    }

    /// Decodes the event payload `chunk[start..end]`, a version 2 one with `v2`, a version 3
    /// one with `v3`, and counts it.
    #[inline(always)]
    fn decode_event(
        &mut self,
        start: usize,
        end: usize,
        v2: impl FnOnce(&[u8], usize, &mut Delta, &mut Event) -> bool,
        v3: impl FnOnce(&[u8], usize, &[u8], &mut Columns, &mut Delta, &mut Event) -> Decoded,
    ) -> bool {
        let bytes = &self.chunk[start..];
        let len = end - start;
        self.synced = false;
        let decoded = match self.version {
            1 => decode::event_into(bytes, len, &mut self.event),
            2 => v2(bytes, len, &mut self.delta, &mut self.event),
            _ if self.columns_lost => false,
            _ => {
                let (d, e) = (&mut self.delta, &mut self.event);
                match v3(bytes, len, &self.chunk, &mut self.columns, d, e) {
                    Decoded::Event => true,
                    Decoded::Unknown => false,
                    Decoded::Damaged => {
                        self.lose_columns();
                        false
                    }
                }
            }
        };
        if decoded {
            self.records += 1;
        } else {
            self.skipped += 1;
        }
        decoded
    }

    /// A version 3 event was damaged: where its values ended in the columns is not known, so the
    /// chunk's later events are skipped (by the general path: the one-pass reader is off).
    fn lose_columns(&mut self) {
        self.columns_lost = true;
        self.common_end = 0;
    }

    /// Reads the next record if it is the common one (a version 2 event of a short payload
    /// that `decode::read_common_event` takes: a one-byte length and tag, and a window of the
    /// chunk after it); `false`, with nothing read, otherwise.
    #[inline(always)]
    fn common_event<const PEXT: bool>(&mut self) -> bool {
        let pos = self.pos;
        if pos >= self.common_end {
            return false;
        }
        if self.version >= 4 {
            return self.shaped_event::<PEXT>(pos);
        }
        let Some(framed) = self.chunk.get(pos..pos + 2 + decode::WINDOW) else {
            return false;
        };
        let (len, tag) = (usize::from(framed[0]), u64::from(framed[1]));
        // `len` covers the tag and the payload. A record must end inside its chunk, and one this
        // short does: inside the window, which is.
        const { assert!(decode::MAX_PAYLOAD < decode::WINDOW) };
        if len.wrapping_sub(1) > decode::MAX_PAYLOAD || tag != TAG_EVENT {
            return false;
        }
        let window: &[u8; decode::WINDOW] = framed[2..].try_into().expect("a window");
        let (d, e, synced) = (&mut self.delta, &mut self.event, &mut self.synced);
        if self.version >= 3 {
            let (chunk, cols) = (&self.chunk, &mut self.columns);
            match decode::read_common_split_event::<PEXT>(
                window,
                len - 1,
                chunk,
                cols,
                d,
                e,
                synced,
            ) {
                Common::Read => {}
                Common::Other => return false,
                Common::Damaged => {
                    // Read past, counted, and the rest of the chunk's events lost with its
                    // columns.
                    self.pos = pos + 1 + len;
                    self.skipped += 1;
                    self.synced = false;
                    self.lose_columns();
                    return false;
                }
            }
        } else if !decode::read_common_event::<PEXT>(window, len - 1, d, e, synced) {
            return false;
        }
        self.pos = pos + 1 + len;
        self.records += 1;
        true
    }

    /// [`TraceReader::common_event`] in version 4: the item at `pos` (inside the records) names
    /// a shape whose record the one-pass reader takes, whole (a [`shapes::HotShape`]: only the
    /// columns are read) or from its record.
    #[inline(always)]
    fn shaped_event<const PEXT: bool>(&mut self, pos: usize) -> bool {
        let item = self.chunk[pos];
        let (d, e, synced) = (&mut self.delta, &mut self.event, &mut self.synced);
        let (chunk, cols) = (&self.chunk, &mut self.columns);
        // Where the record is, and whether it is written here (after the item byte) rather than
        // named (the item is then one byte).
        let (at, plain) = match self.shapes.get(item) {
            Some(&Shape { hot: Some(hot), .. }) => {
                let read = decode::read_hot_shape::<PEXT>(hot, chunk, cols, d, e, synced);
                return self.common_read(read, pos + 1);
            }
            // A common event that changes the seldom-changing fields, or another event.
            Some(shape) => (shape.at, false),
            // A record too long to be a shape may still be a common event's.
            None if item == shapes::PLAIN => (pos + 1, true),
            // A new shape (defined by the general reader) or damage.
            None => return false,
        };
        let Some(framed) = chunk.get(at..at + 2 + decode::WINDOW) else {
            return false;
        };
        let (len, tag) = (usize::from(framed[0]), u64::from(framed[1]));
        // A shape's record was framed when defined; a plain one must end inside the records
        // (else the general reader says the framing is damaged).
        if len.wrapping_sub(1) > decode::MAX_PAYLOAD
            || tag != TAG_EVENT
            || (plain && at + 1 + len > self.records_end)
        {
            return false;
        }
        let window: &[u8; decode::WINDOW] = framed[2..].try_into().expect("a window");
        let read =
            decode::read_common_split_event::<PEXT>(window, len - 1, chunk, cols, d, e, synced);
        self.common_read(read, if plain { at + 1 + len } else { pos + 1 })
    }

    /// What [`TraceReader::shaped_event`] does with what the one-pass reader made of the event
    /// whose item ends at `next`.
    #[inline(always)]
    fn common_read(&mut self, read: Common, next: usize) -> bool {
        match read {
            Common::Read => {}
            Common::Other => return false,
            Common::Damaged => {
                self.pos = next;
                self.skipped += 1;
                self.synced = false;
                self.lose_columns();
                return false;
            }
        }
        self.pos = next;
        self.records += 1;
        true
    }

    /// The next record, or `None` at the end of the readable part.
    pub fn next_record(&mut self) -> Option<Record> {
        loop {
            let (tag, start, end) = self.next_payload()?;
            if tag == TAG_EVENT {
                if self.event(start, end) {
                    return Some(Record::Event(self.event.clone()));
                }
            } else if let Some(record) = self.other(tag, start, end) {
                return Some(record);
            }
        }
    }

    /// The next record, or `None` at the end of the readable part, with events lent rather than
    /// returned: the fast way through a trace (no copy, no allocation per event).
    #[inline]
    pub fn next_event_or_record(&mut self) -> Option<RecordRef<'_>> {
        loop {
            let (tag, start, end) = self.next_payload()?;
            if tag == TAG_EVENT {
                if self.event(start, end) {
                    return Some(RecordRef::Event(&self.event));
                }
            } else if let Some(record) = self.other(tag, start, end) {
                return Some(RecordRef::Other(record));
            }
        }
    }

    /// [`TraceReader::next_event_or_record`] for a loop that reads a whole trace, inlined into
    /// it; with `PEXT`, varints pack with BMI2's `pext`, so only inside a function compiled for
    /// BMI2, entered once `format::packs_with_pext` said yes (see `LiveState::replay`).
    #[inline(always)]
    pub(crate) fn next_event_or_record_with<const PEXT: bool>(&mut self) -> Option<RecordRef<'_>> {
        if self.common_event::<PEXT>() {
            return Some(RecordRef::Event(&self.event));
        }
        loop {
            let (tag, start, end) = self.next_payload()?;
            if tag == TAG_EVENT {
                if self.event_with::<PEXT>(start, end) {
                    return Some(RecordRef::Event(&self.event));
                }
            } else if let Some(record) = self.other(tag, start, end) {
                return Some(RecordRef::Other(record));
            }
        }
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        self.next_record()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Api, MemKind, Op};
    use crate::format::TraceWriter;

    /// A version 4 reader keeps what a common event's record says once per shape: the events
    /// that name it read only their columns. (Every reader reads the same events whether or not
    /// it does, so only this says that it does.)
    #[test]
    fn common_records_become_hot_shapes() {
        let mut w = TraceWriter::new(Vec::new(), &Header::default()).unwrap();
        let mut e = decode::blank();
        for seq in 1..=4u64 {
            e.seq = seq;
            e.time_ns = 100 * seq;
            e.caller = 0x1000;
            (e.api, e.op) = if seq % 2 == 1 {
                let op = Op::Alloc {
                    kind: MemKind::Device,
                    ptr: 0x7000 + seq,
                    size: 512,
                    stream: 0,
                    pool: 0,
                    flags: 0,
                    pitch: 0,
                };
                (Api::CudaMalloc, op)
            } else {
                let op = Op::Free {
                    ptr: 0x7000 + seq - 1,
                    stream: 0,
                };
                (Api::CudaFree, op)
            };
            w.write_event(&e).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(r.by_ref().count(), 4);
        let hot = |k: u8| r.shapes.get(k).and_then(|s| s.hot);
        // The first allocation's record (its caller changed from the chunk's zero), the first
        // free's, and the second allocation's (caller unchanged); the second free names the
        // first's shape.
        let alloc = hot(0).expect("a hot shape");
        assert_eq!((alloc.api, alloc.index), (Api::CudaMalloc, 0));
        let free = hot(1).expect("a hot shape");
        assert_eq!((free.api, free.index), (Api::CudaFree, 1));
        assert_eq!(hot(2).map(|s| s.api), Some(Api::CudaMalloc));
        assert!(r.shapes.get(3).is_none());
    }
}
