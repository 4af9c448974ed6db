//! Writes a trace: header first, then records gathered into compressed chunks.

use std::io::Write;

use super::compact::{self, Delta, InRecord, Split};
use super::error::TraceError;
use super::header::{Header, FORMAT_VERSION, MAGIC, OLDEST_VERSION};
use super::layout::{self, COLUMNS};
use super::packing::{Packer, Packing};
use super::record::{Record, TAG_EVENT};
use super::shapes::{self, Item, ShapeIndex};
use super::varint;
use crate::event::Event;

/// Raw bytes gathered before a chunk is compressed and written.
const DEFAULT_CHUNK_BYTES: usize = 256 * 1024;

/// Streams records into a trace. Records go into an in-memory chunk that is compressed and
/// written when it is full or when [`TraceWriter::flush_chunk`] is called; a chunk on disk is
/// always complete, so a crash loses at most the chunk being gathered.
pub struct TraceWriter<W: Write> {
    out: W,
    /// The records of the chunk being gathered.
    chunk: Vec<u8>,
    /// Its columns (version 3).
    columns: [Vec<u8>; COLUMNS],
    /// The chunk's raw bytes as compressed (version 3: records and columns put together).
    raw: Vec<u8>,
    chunk_records: u32,
    scratch: Vec<u8>,
    chunk_limit: usize,
    packer: Packer,
    packed: Vec<u8>,
    bytes_written: u64,
    /// The format version written: [`FORMAT_VERSION`], or an older one for readers of old traces
    /// (tests).
    version: u32,
    /// What the next event of the chunk is written against (versions 2 to 4).
    delta: Delta,
    /// The chunk's record shapes so far (version 4).
    shapes: ShapeIndex,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header and returns a writer for the records.
    pub fn new(out: W, header: &Header) -> Result<Self, TraceError> {
        Self::with_format_version(out, header, FORMAT_VERSION)
    }

    /// [`TraceWriter::new`] writing an older format version (from [`OLDEST_VERSION`]): to test
    /// readers on old traces.
    pub fn with_format_version(
        mut out: W,
        header: &Header,
        version: u32,
    ) -> Result<Self, TraceError> {
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(TraceError::UnsupportedVersion {
                found: version,
                oldest: OLDEST_VERSION,
                supported: FORMAT_VERSION,
            });
        }
        let head = postcard::to_stdvec(header)?;
        let mut prefix = Vec::with_capacity(head.len() + 20);
        prefix.extend_from_slice(&MAGIC);
        prefix.extend_from_slice(&version.to_le_bytes());
        prefix.extend_from_slice(&(head.len() as u32).to_le_bytes());
        prefix.extend_from_slice(&head);
        prefix.extend_from_slice(&crc32fast::hash(&head).to_le_bytes());
        out.write_all(&prefix).map_err(TraceError::Write)?;
        out.flush().map_err(TraceError::Write)?;
        Ok(TraceWriter {
            out,
            chunk: Vec::with_capacity(DEFAULT_CHUNK_BYTES + 4096),
            // Made up front, as the records' buffer is: a tracer that writes its last chunk on a
            // fatal signal should not have to grow them then.
            columns: if version >= 3 {
                std::array::from_fn(|_| Vec::with_capacity(DEFAULT_CHUNK_BYTES / 4))
            } else {
                Default::default()
            },
            raw: if version >= 3 {
                Vec::with_capacity(layout::TABLE_BYTES + DEFAULT_CHUNK_BYTES + 4096)
            } else {
                Vec::new()
            },
            chunk_records: 0,
            scratch: Vec::with_capacity(256),
            chunk_limit: DEFAULT_CHUNK_BYTES,
            packer: Packer::new().map_err(TraceError::Write)?,
            packed: Vec::new(),
            bytes_written: prefix.len() as u64,
            version,
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
        match record {
            Record::Event(e) => self.write_event(e),
            other => self.write_other(other),
        }
    }

    fn write_other(&mut self, record: &Record) -> Result<(), TraceError> {
        if self.version >= 4 {
            self.chunk.push(shapes::PLAIN);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        varint::put(&mut scratch, record.tag());
        let scratch = record.encode_payload(scratch)?;
        varint::put(&mut self.chunk, scratch.len() as u64);
        self.chunk.extend_from_slice(&scratch);
        self.scratch = scratch;
        self.record_done()
    }

    /// Appends one event record (the hot path of the tracer's collector): encoded in place
    /// against the previous event of the chunk.
    pub fn write_event(&mut self, event: &Event) -> Result<(), TraceError> {
        if self.version == 1 {
            return self.write_event_v1(event);
        }
        // Version 4: the item byte first, `PLAIN` until the record is known to be a shape.
        let item = self.chunk.len();
        if self.version >= 4 {
            self.chunk.push(shapes::PLAIN);
        }
        // The length goes first: one byte kept for it (nearly every event is under 128 bytes),
        // widened afterwards when not. It covers the record, not the event's column values.
        let at = self.chunk.len();
        self.chunk.push(0);
        self.chunk.push(TAG_EVENT as u8);
        if self.version == 2 {
            compact::encode(event, &mut self.delta, &mut InRecord(&mut self.chunk));
        } else {
            let lanes = &mut Split {
                record: &mut self.chunk,
                columns: &mut self.columns,
            };
            compact::encode(event, &mut self.delta, lanes);
        }
        let len = self.chunk.len() - at - 1;
        if len < 0x80 {
            self.chunk[at] = len as u8;
            if self.version >= 4 {
                // The record's values went to the columns: a record seen before is named.
                match self.shapes.item(&mut self.chunk, at) {
                    Item::Again(k) => {
                        self.chunk.truncate(item);
                        self.chunk.push(k);
                    }
                    Item::Define => self.chunk[item] = shapes::DEFINE,
                    Item::Plain => {}
                }
            }
        } else {
            let mut wide = Vec::with_capacity(10);
            varint::put(&mut wide, len as u64);
            self.chunk.splice(at..at + 1, wide);
        }
        self.record_done()
    }

    /// [`TraceWriter::write_event`] in version 1: postcard's layout, encoded into a stack
    /// buffer in one pass, then copied once.
    fn write_event_v1(&mut self, event: &Event) -> Result<(), TraceError> {
        let mut buf = [0u8; 256];
        buf[0] = TAG_EVENT as u8;
        match postcard::to_slice(event, &mut buf[1..]) {
            Ok(body) => {
                let len = body.len() + 1;
                varint::put(&mut self.chunk, len as u64);
                self.chunk.extend_from_slice(&buf[..len]);
            }
            // An event with long lists (ncclCommInitAll of many devices): the general path.
            Err(postcard::Error::SerializeBufferFull) => {
                return self.write_other(&Record::Event(event.clone()));
            }
            Err(e) => return Err(e.into()),
        }
        self.record_done()
    }

    fn record_done(&mut self) -> Result<(), TraceError> {
        self.chunk_records += 1;
        if self.chunk.len() + self.columns.iter().map(Vec::len).sum::<usize>() >= self.chunk_limit {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Compresses and writes what has gathered, then flushes the output.
    pub fn flush_chunk(&mut self) -> Result<(), TraceError> {
        if self.chunk.is_empty() {
            return self.out.flush().map_err(TraceError::Write);
        }
        let raw = if self.version >= 3 {
            self.raw.clear();
            layout::assemble(&self.chunk, &self.columns, &mut self.raw);
            &self.raw
        } else {
            &self.chunk
        };
        // The chunk header goes in front of the compressed bytes so the whole chunk is one
        // write: a torn chunk at the end of the file stays rare (the reader handles it anyway).
        let bound = zstd::zstd_safe::compress_bound(raw.len());
        let mut whole = std::mem::take(&mut self.packed);
        whole.clear();
        whole.resize(16 + bound, 0);
        let n = self
            .packer
            .compress(raw, &mut whole[16..])
            .map_err(TraceError::Write)?;
        whole.truncate(16 + n);
        whole[0..4].copy_from_slice(&(n as u32).to_le_bytes());
        whole[4..8].copy_from_slice(&(raw.len() as u32).to_le_bytes());
        whole[8..12].copy_from_slice(&self.chunk_records.to_le_bytes());
        let crc = crc32fast::hash(&whole[16..]);
        whole[12..16].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&whole).map_err(TraceError::Write)?;
        self.out.flush().map_err(TraceError::Write)?;
        self.bytes_written += whole.len() as u64;
        self.packed = whole;
        self.chunk.clear();
        self.columns.iter_mut().for_each(Vec::clear);
        self.chunk_records = 0;
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
        self.chunk_records
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
