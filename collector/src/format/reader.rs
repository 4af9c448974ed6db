//! Reads a trace back, record by record, in constant memory, and says how it ends and what of it
//! could not be read.
//!
//! Events, nearly all of a trace, are read without a copy: [`TraceReader::next_event_or_record`]
//! decodes each into one event the reader keeps and lends it out. A reader made by
//! [`TraceReader::open`] reads and decompresses the next chunks on a second thread meanwhile.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::ahead::Ahead;
use super::decoder::{ChunkDecoder, Item};
use super::ending::{Ending, Unread};
use super::error::TraceError;
use super::frame::{self, ChunkRead, Frames, Piece};
use super::header::{self, Header};
use super::record::Record;
use crate::event::Event;

/// A record as [`TraceReader::next_event_or_record`] returns it: an event lent by the reader
/// (valid until the next call), or any other record.
#[derive(Debug)]
pub enum RecordRef<'a> {
    Event(&'a Event),
    Other(Record),
}

/// Where a replay reads records from: a file ([`TraceReader`]), or the files of a trace cut
/// into segments, in a row (`SeriesReader`).
pub trait RecordSource {
    /// The next record, or `None` at the end, with events lent rather than returned.
    fn next_event_or_record(&mut self) -> Option<RecordRef<'_>>;
}

impl<R: Read> RecordSource for TraceReader<R> {
    #[inline]
    fn next_event_or_record(&mut self) -> Option<RecordRef<'_>> {
        TraceReader::next_event_or_record(self)
    }
}

/// Where decompressed chunks come from.
enum Source<R> {
    /// Read and decompressed on the calling thread.
    Direct {
        frames: Frames<R>,
        zstd: Option<zstd::bulk::Decompressor<'static>>,
    },
    /// Read and decompressed ahead on other threads.
    Ahead(Ahead),
}

/// A streaming trace reader. Iterate it for records; afterwards [`TraceReader::ending`] says
/// whether the file was whole and where it stopped, and [`TraceReader::unread`] what of it could
/// not be read.
pub struct TraceReader<R: Read> {
    source: Source<R>,
    header: Header,
    version: u32,
    offset: u64,
    decoder: ChunkDecoder,
    /// The chunk being read (its bytes are the decoder's).
    current: Option<ChunkRead>,
    unread: Vec<Unread>,
    ending: Option<Ending>,
    chunks: u64,
    records: u64,
    skipped: u64,
    saw_end: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file and reads its header; the chunks are then read and decompressed ahead
    /// on a second thread ([`TraceReader::read_ahead`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Ok(TraceReader::new(BufReader::with_capacity(1 << 20, file))?.read_ahead())
    }
}

impl<R: Read> TraceReader<R> {
    /// Reads the header from `src`; records follow on iteration, read on the calling thread.
    pub fn new(mut src: R) -> Result<Self, TraceError> {
        let start = header::read_start(&mut src)?;
        Ok(TraceReader {
            source: Source::Direct {
                frames: Frames::new(src, start.version, start.chunks_at, start.rest),
                zstd: None,
            },
            header: start.header,
            version: start.version,
            offset: start.chunks_at,
            decoder: ChunkDecoder::default(),
            current: None,
            unread: start.damaged.into_iter().collect(),
            ending: None,
            chunks: 0,
            records: 0,
            skipped: 0,
            saw_end: false,
        })
    }

    /// This reader, with the chunks after the current one read and decompressed ahead on a
    /// second thread (unchanged when no thread can be started). Records come in the same order.
    pub fn read_ahead(mut self) -> Self
    where
        R: Send + 'static,
    {
        let placeholder = Source::Ahead(Ahead::default());
        if let Source::Direct { frames, zstd } = std::mem::replace(&mut self.source, placeholder) {
            self.source = match Ahead::spawn(frames) {
                Ok(ahead) => Source::Ahead(ahead),
                Err(frames) => Source::Direct { frames, zstd },
            };
        }
        self
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

    /// What could not be read so far, in file order.
    pub fn unread(&self) -> &[Unread] {
        &self.unread
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

    /// Moves on to the next chunk; `false` when there is none (and `ending` is set).
    fn load_chunk(&mut self) -> bool {
        if self.ending.is_some() {
            return false;
        }
        let loaded = match &mut self.source {
            Source::Direct { frames, zstd } => frame::unpack(frames.next(), zstd),
            // The thread is gone without its last message: it panicked.
            Source::Ahead(ahead) => ahead.next().unwrap_or_else(|| {
                Piece::End(Ending::Corrupt {
                    offset: self.offset,
                    reason: "the reading thread failed".into(),
                })
            }),
        };
        match loaded {
            Piece::Chunk(mut f) => {
                self.offset = f.offset + f.len;
                let table = self.decoder.load(std::mem::take(&mut f.bytes));
                self.current = Some(f);
                if let Err(why) = table {
                    self.chunk_done(Some(why));
                }
            }
            Piece::Unread(u) => {
                self.offset = u.offset + u.bytes;
                self.unread.push(u);
            }
            Piece::End(ending) => {
                // A chunk the file ends inside was read (its bytes are listed unread), but reading
                // stopped where it begins.
                if let Ending::Truncated { offset, .. } = ending {
                    self.offset = offset;
                }
                self.ending = Some(match ending {
                    Ending::NoEndRecord { .. } if self.saw_end => Ending::Complete,
                    other => other,
                });
                return false;
            }
        }
        true
    }

    /// The current chunk is read, or the rest of it is damaged (why).
    fn chunk_done(&mut self, damage: Option<&str>) {
        let Some(c) = self.current.take() else {
            return;
        };
        if let Some(why) = damage {
            self.unread.push(Unread {
                offset: c.offset,
                bytes: c.len,
                events: c.events.and_then(|n| n.checked_sub(self.decoder.events())),
                reason: format!("damaged records in a chunk whose checksum holds: {why}"),
                torn: false,
            });
        } else {
            self.chunks += 1;
        }
    }

    /// The next record, or `None` at the end of the readable part, with events lent rather than
    /// returned: the fast way through a trace (no copy, no allocation per event).
    #[inline]
    pub fn next_event_or_record(&mut self) -> Option<RecordRef<'_>> {
        loop {
            if self.current.is_some() {
                match self.decoder.next() {
                    Item::Event => {
                        self.records += 1;
                        return Some(RecordRef::Event(self.decoder.event()));
                    }
                    Item::Other(record) => {
                        self.records += 1;
                        self.saw_end |= matches!(record, Record::End(_));
                        return Some(RecordRef::Other(record));
                    }
                    Item::Unknown => self.skipped += 1,
                    Item::End => self.chunk_done(None),
                    Item::Damaged(why) => self.chunk_done(Some(why)),
                }
            } else if !self.load_chunk() {
                return None;
            }
        }
    }

    /// The event the last [`RecordRef::Event`] lent.
    pub(crate) fn current_event(&self) -> &Event {
        self.decoder.event()
    }

    /// The next record, or `None` at the end of the readable part.
    pub fn next_record(&mut self) -> Option<Record> {
        Some(match self.next_event_or_record()? {
            RecordRef::Event(e) => Record::Event(e.clone()),
            RecordRef::Other(r) => r,
        })
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        self.next_record()
    }
}
