//! Writes a trace: the header block twice, then records gathered into compressed chunks.

use std::io::Write;

use super::chunk::{self, COLUMNS, DEFINE, PLAIN, TABLE_BYTES};
use super::error::TraceError;
use super::events::{self, Delta};
use super::frame::{self, HEAD};
use super::header::{self, Header};
use super::packing::{Packer, Packing};
use super::record::{Record, TAG_EVENT};
use super::shapes::{Item, ShapeIndex};
use super::varint;
use crate::event::Event;

/// Raw bytes gathered before a chunk is compressed and written.
const DEFAULT_CHUNK_BYTES: usize = 256 * 1024;

/// Streams records into a trace. Records go into an in-memory chunk that is compressed and
/// written when it is full or when [`TraceWriter::flush_chunk`] is called; a chunk on disk is
/// always complete, so a crash loses at most the chunk being gathered.
pub struct TraceWriter<W: Write> {
    out: W,
    /// The items of the chunk being gathered, and its columns.
    items: Vec<u8>,
    columns: [Vec<u8>; COLUMNS],
    /// The chunk's raw bytes as compressed (table, items and columns put together).
    raw: Vec<u8>,
    chunk_items: u32,
    chunk_events: u32,
    /// Events in the chunks written.
    events_written: u64,
    scratch: Vec<u8>,
    chunk_limit: usize,
    packer: Packer,
    packed: Vec<u8>,
    bytes_written: u64,
    /// What the next event of the chunk is written against.
    delta: Delta,
    /// The chunk's record shapes so far.
    shapes: ShapeIndex,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header blocks and returns a writer for the records.
    pub fn new(mut out: W, header: &Header) -> Result<Self, TraceError> {
        let start = header::start_of_file(header)?;
        out.write_all(&start).map_err(TraceError::Write)?;
        out.flush().map_err(TraceError::Write)?;
        Ok(TraceWriter {
            out,
            // Made up front: a tracer that writes its last chunk on a fatal signal should not
            // have to grow them then.
            items: Vec::with_capacity(DEFAULT_CHUNK_BYTES + 4096),
            columns: std::array::from_fn(|_| Vec::with_capacity(DEFAULT_CHUNK_BYTES / 4)),
            raw: Vec::with_capacity(TABLE_BYTES + DEFAULT_CHUNK_BYTES + 4096),
            chunk_items: 0,
            chunk_events: 0,
            events_written: 0,
            scratch: Vec::with_capacity(256),
            chunk_limit: DEFAULT_CHUNK_BYTES,
            packer: Packer::new().map_err(TraceError::Write)?,
            packed: Vec::new(),
            bytes_written: start.len() as u64,
            delta: Delta::default(),
            shapes: ShapeIndex::default(),
        })
    }

    /// Sets the raw size at which a chunk is written out (smaller: less lost on a crash).
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_limit = bytes.max(64);
        self
    }

    /// Changes how the chunks from the next one on are compressed: a writer that falls behind
    /// its input can trade file size and replay speed for its own time.
    pub fn set_packing(&mut self, packing: Packing) -> Result<(), TraceError> {
        self.packer.set(packing).map_err(TraceError::Write)
    }

    /// How the next chunk will be compressed.
    pub fn packing(&self) -> Packing {
        self.packer.packing()
    }

    /// Appends one record, writing a chunk out when enough has gathered.
    pub fn write(&mut self, record: &Record) -> Result<(), TraceError> {
        if let Record::Event(e) = record {
            return self.write_event(e);
        }
        self.items.push(PLAIN);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        varint::put(&mut scratch, record.tag());
        let scratch = record.encode_payload(scratch)?;
        varint::put(&mut self.items, scratch.len() as u64);
        self.items.extend_from_slice(&scratch);
        self.scratch = scratch;
        self.record_done()
    }

    /// Appends one event record (the hot path of the tracer's collector): its record written
    /// once per chunk and named afterwards, its varying values in the columns.
    pub fn write_event(&mut self, event: &Event) -> Result<(), TraceError> {
        // The item byte first, `PLAIN` until the record is known to be a shape; then the
        // length: one byte kept for it (nearly every event is under 128 bytes), widened
        // afterwards when not.
        let item = self.items.len();
        self.items.extend_from_slice(&[PLAIN, 0, TAG_EVENT as u8]);
        let at = item + 1;
        events::write(event, &mut self.delta, &mut self.items, &mut self.columns);
        let len = self.items.len() - at - 1;
        if len < 0x80 {
            self.items[at] = len as u8;
            match self.shapes.item(&mut self.items, at) {
                Item::Again(k) => {
                    self.items.truncate(item);
                    self.items.push(k);
                }
                Item::Define => self.items[item] = DEFINE,
                Item::Plain => {}
            }
        } else {
            let mut wide = Vec::with_capacity(10);
            varint::put(&mut wide, len as u64);
            self.items.splice(at..at + 1, wide);
        }
        self.chunk_events += 1;
        self.record_done()
    }

    fn record_done(&mut self) -> Result<(), TraceError> {
        self.chunk_items += 1;
        if self.items.len() + self.columns.iter().map(Vec::len).sum::<usize>() >= self.chunk_limit {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Compresses and writes what has gathered, then flushes the output.
    pub fn flush_chunk(&mut self) -> Result<(), TraceError> {
        if self.items.is_empty() {
            return self.out.flush().map_err(TraceError::Write);
        }
        self.raw.clear();
        chunk::assemble(&self.items, &self.columns, &mut self.raw);
        // The fixed part goes in front of the compressed bytes so the whole chunk is one write:
        // a torn chunk at the end of the file stays rare (the reader handles it anyway).
        let bound = zstd::zstd_safe::compress_bound(self.raw.len());
        let mut whole = std::mem::take(&mut self.packed);
        whole.clear();
        whole.resize(HEAD + bound, 0);
        let n = self
            .packer
            .compress(&self.raw, &mut whole[HEAD..])
            .map_err(TraceError::Write)?;
        whole.truncate(HEAD + n);
        let head = frame::head(
            &whole[HEAD..],
            self.raw.len(),
            self.chunk_items,
            self.chunk_events,
            self.events_written,
        );
        whole[..HEAD].copy_from_slice(&head);
        self.out.write_all(&whole).map_err(TraceError::Write)?;
        self.out.flush().map_err(TraceError::Write)?;
        self.bytes_written += whole.len() as u64;
        self.events_written += u64::from(self.chunk_events);
        self.packed = whole;
        self.items.clear();
        self.columns.iter_mut().for_each(Vec::clear);
        (self.chunk_items, self.chunk_events) = (0, 0);
        // Every chunk decodes on its own.
        self.delta = Delta::default();
        self.shapes.clear();
        Ok(())
    }

    /// Bytes written to the output so far (chunks not yet flushed excluded).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Records gathered but not yet written.
    pub fn pending_records(&self) -> u32 {
        self.chunk_items
    }

    /// Writes what is left and returns the output.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.flush_chunk()?;
        Ok(self.out)
    }

    /// The output, for callers that need to sync it.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }
}
