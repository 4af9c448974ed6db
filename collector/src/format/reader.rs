//! Reads a trace back, record by record, in constant memory, and says how it ends.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::error::TraceError;
use super::header::{Header, FORMAT_VERSION, MAGIC};
use super::record::Record;
use super::varint;

/// Largest chunk a reader accepts; anything bigger is damage, not data.
const MAX_CHUNK_BYTES: u32 = 256 * 1024 * 1024;

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

/// A streaming trace reader. Iterate it for records; afterwards [`TraceReader::ending`] says
/// whether the file was whole and where it stopped.
pub struct TraceReader<R: Read> {
    src: R,
    header: Header,
    offset: u64,
    chunk: Vec<u8>,
    packed: Vec<u8>,
    pos: usize,
    ending: Option<Ending>,
    chunks: u64,
    records: u64,
    skipped: u64,
    saw_end: bool,
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| TraceError::Io {
            path: path.display().to_string(),
            source,
        })?;
        TraceReader::new(BufReader::with_capacity(1 << 20, file))
    }
}

/// Reads until `buf` is full or the source ends; returns how many bytes were read.
fn read_full(src: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl<R: Read> TraceReader<R> {
    /// Reads the header from `src`; records follow on iteration.
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
        if version != FORMAT_VERSION {
            return Err(TraceError::UnsupportedVersion {
                found: version,
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
            src,
            header,
            offset: 16 + head.len() as u64,
            chunk: Vec::new(),
            packed: Vec::new(),
            pos: 0,
            ending: None,
            chunks: 0,
            records: 0,
            skipped: 0,
            saw_end: false,
        })
    }

    /// The trace header.
    pub fn header(&self) -> &Header {
        &self.header
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

    fn stop(&mut self, ending: Ending) -> Option<Record> {
        self.ending = Some(ending);
        None
    }

    /// Loads the next chunk; `false` when the records are over (and `ending` is set).
    fn load_chunk(&mut self) -> bool {
        let start = self.offset;
        let mut head = [0u8; 16];
        let got = match read_full(&mut self.src, &mut head) {
            Ok(n) => n,
            Err(e) => {
                self.stop(Ending::Corrupt {
                    offset: start,
                    reason: format!("read error: {e}"),
                });
                return false;
            }
        };
        if got == 0 {
            let ending = if self.saw_end {
                Ending::Complete
            } else {
                Ending::NoEndRecord { offset: start }
            };
            self.stop(ending);
            return false;
        }
        if got < 16 {
            self.stop(Ending::Truncated {
                offset: start,
                have: got as u64,
                need: 16,
            });
            return false;
        }
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (packed_len, raw_len, _count, crc) = (word(0), word(4), word(8), word(12));
        if packed_len > MAX_CHUNK_BYTES || raw_len > MAX_CHUNK_BYTES {
            self.stop(Ending::Corrupt {
                offset: start,
                reason: format!("implausible chunk size {packed_len}/{raw_len}"),
            });
            return false;
        }
        self.packed.resize(packed_len as usize, 0);
        let got = match read_full(&mut self.src, &mut self.packed) {
            Ok(n) => n,
            Err(e) => {
                self.stop(Ending::Corrupt {
                    offset: start,
                    reason: format!("read error: {e}"),
                });
                return false;
            }
        };
        if got < packed_len as usize {
            self.stop(Ending::Truncated {
                offset: start,
                have: 16 + got as u64,
                need: 16 + u64::from(packed_len),
            });
            return false;
        }
        if crc32fast::hash(&self.packed) != crc {
            self.stop(Ending::Corrupt {
                offset: start,
                reason: "checksum mismatch".into(),
            });
            return false;
        }
        self.chunk.resize(raw_len as usize, 0);
        match zstd::bulk::decompress_to_buffer(&self.packed, &mut self.chunk[..]) {
            Ok(n) if n == raw_len as usize => {}
            Ok(n) => {
                self.stop(Ending::Corrupt {
                    offset: start,
                    reason: format!("chunk holds {n} bytes, header says {raw_len}"),
                });
                return false;
            }
            Err(e) => {
                self.stop(Ending::Corrupt {
                    offset: start,
                    reason: format!("decompression failed: {e}"),
                });
                return false;
            }
        }
        self.offset += 16 + u64::from(packed_len);
        self.pos = 0;
        self.chunks += 1;
        true
    }

    /// The next record, or `None` at the end of the readable part.
    pub fn next_record(&mut self) -> Option<Record> {
        if self.ending.is_some() {
            return None;
        }
        loop {
            while self.pos >= self.chunk.len() {
                if !self.load_chunk() {
                    return None;
                }
            }
            let rest = &self.chunk[self.pos..];
            let Some((len, used)) = varint::get(rest) else {
                let offset = self.offset;
                return self.stop(Ending::Corrupt {
                    offset,
                    reason: "bad record length".into(),
                });
            };
            let Some(body) = rest.get(used..used + len as usize) else {
                let offset = self.offset;
                return self.stop(Ending::Corrupt {
                    offset,
                    reason: "record runs past its chunk".into(),
                });
            };
            self.pos += used + len as usize;
            let Some((tag, tag_len)) = varint::get(body) else {
                self.skipped += 1;
                continue;
            };
            match Record::decode(tag, &body[tag_len..]) {
                Some(record) => {
                    if matches!(record, Record::End(_)) {
                        self.saw_end = true;
                    }
                    self.records += 1;
                    return Some(record);
                }
                None => self.skipped += 1,
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
