//! How chunks lie in the file, and finding them again after damage.
//!
//! ```text
//! chunk (version 5) := sync "\x89VTCHNK\n" | u32 packed length | u32 raw length | u32 items
//!                      | u32 events | u64 events before | u32 crc32(bytes 8..32) | u32 crc32(packed)
//!                      | packed (one zstd frame of the raw chunk, `chunk.rs`)
//! chunk (version 4) := u32 packed length | u32 raw length | u32 items | u32 crc32(packed) | packed
//! ```
//!
//! A version 5 chunk says where it starts (the sync marker), checks its own fixed part, and
//! counts the events of the chunks before it. After damage a reader scans for the next marker
//! whose fixed part checks, and knows how many events it passed over from that chunk's count.
//! A version 4 chunk has none of this: reading stops at the first damaged one.

use std::io::{self, Read};

use super::chunk;
use super::ending::{Ending, Unread};

/// The first bytes of every version 5 chunk.
pub(crate) const SYNC: [u8; 8] = *b"\x89VTCHNK\n";
/// Bytes before a version 5 chunk's packed bytes.
pub(crate) const HEAD: usize = 40;
/// Bytes before a version 4 chunk's packed bytes.
const HEAD_V4: usize = 16;
/// Largest chunk a reader accepts, packed or not; anything bigger is damage.
const MAX_CHUNK_BYTES: usize = 256 * 1024 * 1024;
/// Bytes read at a time while scanning for the next chunk.
const SCAN_BYTES: usize = 64 * 1024;

/// The fixed part of a version 5 chunk holding `packed`.
pub(crate) fn head(packed: &[u8], raw: usize, items: u32, events: u32, before: u64) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[..8].copy_from_slice(&SYNC);
    h[8..12].copy_from_slice(&(packed.len() as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(raw as u32).to_le_bytes());
    h[16..20].copy_from_slice(&items.to_le_bytes());
    h[20..24].copy_from_slice(&events.to_le_bytes());
    h[24..32].copy_from_slice(&before.to_le_bytes());
    let crc = crc32fast::hash(&h[8..32]);
    h[32..36].copy_from_slice(&crc.to_le_bytes());
    h[36..40].copy_from_slice(&crc32fast::hash(packed).to_le_bytes());
    h
}

/// A chunk's fixed part, read.
struct Head {
    packed: usize,
    raw: usize,
    /// Events in it, and in the chunks before it (version 5).
    events: Option<(u64, u64)>,
    crc: u32,
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The fixed part of a version 5 chunk at the start of `b`, if it is one and checks.
fn head_v5(b: &[u8]) -> Option<Head> {
    let b = b.get(..HEAD)?;
    if b[..8] != SYNC || crc32fast::hash(&b[8..32]) != word(b, 32) {
        return None;
    }
    let before = u64::from_le_bytes(b[24..32].try_into().expect("8 bytes"));
    let h = Head {
        packed: word(b, 8) as usize,
        raw: word(b, 12) as usize,
        events: Some((u64::from(word(b, 20)), before)),
        crc: word(b, 36),
    };
    (h.packed <= MAX_CHUNK_BYTES && h.raw <= MAX_CHUNK_BYTES).then_some(h)
}

/// Whether a version 5 chunk whose fixed part checks starts at the beginning of `b`.
pub(crate) fn starts_chunk(b: &[u8]) -> bool {
    head_v5(b).is_some()
}

/// A chunk as read from the file.
pub(crate) struct ChunkRead {
    pub offset: u64,
    pub len: u64,
    /// Its packed bytes; once unpacked ([`unpack`]), the raw chunk.
    pub bytes: Vec<u8>,
    pub raw_len: usize,
    /// Events in the chunk (version 5).
    pub events: Option<u64>,
}

/// What reading at a chunk boundary gave.
pub(crate) enum Piece {
    Chunk(ChunkRead),
    /// Bytes passed over: a damaged chunk, or damage up to the next chunk.
    Unread(Unread),
    /// No more chunks: the file ends here (`NoEndRecord` for a clean end between chunks).
    End(Ending),
}

/// Reads the chunks of a file one after the other.
pub(crate) struct Frames<R> {
    src: R,
    version: u32,
    /// Bytes read and not yet used: `buf[start..]`, the first at file offset `offset`.
    buf: Vec<u8>,
    start: usize,
    offset: u64,
    /// Events in the chunks before the next one, when known.
    events_before: Option<u64>,
    /// How reading ended, once it has.
    ended: Option<Ending>,
}

impl<R: Read> Frames<R> {
    /// Chunks of a trace of `version` from `src`; the first chunk is at file offset `offset`,
    /// and `rest` holds the bytes from there that were read already.
    pub(crate) fn new(src: R, version: u32, offset: u64, rest: Vec<u8>) -> Self {
        Frames {
            src,
            version,
            buf: rest,
            start: 0,
            offset,
            events_before: Some(0),
            ended: None,
        }
    }

    /// The bytes at hand, reading from the source until there are `n` or it ends.
    fn fill(&mut self, n: usize) -> io::Result<usize> {
        if self.buf.len() - self.start < n {
            self.buf.drain(..self.start);
            self.start = 0;
            let need = (n - self.buf.len()) as u64;
            self.src.by_ref().take(need).read_to_end(&mut self.buf)?;
        }
        Ok(self.buf.len() - self.start)
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// The next chunk, or what is in its place.
    pub(crate) fn next(&mut self) -> Piece {
        if let Some(ending) = &self.ended {
            return Piece::End(ending.clone());
        }
        let at = self.offset;
        let piece = match self.read_next(at) {
            Ok(piece) => piece,
            Err(e) => Piece::End(Ending::Corrupt {
                offset: at,
                reason: format!("read error: {e}"),
            }),
        };
        if let Piece::End(ending) = &piece {
            self.ended = Some(ending.clone());
        }
        piece
    }

    fn read_next(&mut self, at: u64) -> io::Result<Piece> {
        let v5 = self.version >= 5;
        let fixed = if v5 { HEAD } else { HEAD_V4 };
        let have = self.fill(fixed)?;
        if have == 0 {
            return Ok(Piece::End(Ending::NoEndRecord { offset: at }));
        }
        if have < fixed {
            return Ok(self.torn(at, have, fixed, None));
        }
        let b = &self.buf[self.start..];
        let head = if v5 {
            match head_v5(b) {
                Some(h) => h,
                None => return self.resync(at),
            }
        } else {
            let h = Head {
                packed: word(b, 0) as usize,
                raw: word(b, 4) as usize,
                events: None,
                crc: word(b, 12),
            };
            if h.packed > MAX_CHUNK_BYTES || h.raw > MAX_CHUNK_BYTES {
                return self.stop(at, "implausible chunk size");
            }
            h
        };
        let need = fixed + head.packed;
        let have = self.fill(need)?;
        if have < need {
            return Ok(self.torn(at, have, need, head.events.map(|(n, _)| n)));
        }
        let packed = &self.buf[self.start + fixed..self.start + need];
        let intact = crc32fast::hash(packed) == head.crc;
        if !intact && !v5 {
            return self.stop(at, "checksum mismatch");
        }
        let (len, events) = (need as u64, head.events.map(|(n, _)| n));
        let piece = if intact {
            let (bytes, raw_len) = (packed.to_vec(), head.raw);
            Piece::Chunk(ChunkRead {
                offset: at,
                len,
                bytes,
                raw_len,
                events,
            })
        } else {
            let reason = "checksum mismatch".into();
            Piece::Unread(Unread {
                offset: at,
                bytes: len,
                events,
                reason,
                torn: false,
            })
        };
        self.consume(need);
        self.events_before = head.events.map(|(n, before)| before + n);
        Ok(piece)
    }

    /// The file ends `have` bytes into the chunk at `at` (of `need` bytes): those are unread,
    /// and reading ends.
    fn torn(&mut self, at: u64, have: usize, need: usize, events: Option<u64>) -> Piece {
        self.consume(have);
        self.ended = Some(Ending::Truncated {
            offset: at,
            have: have as u64,
            need: need as u64,
        });
        Piece::Unread(Unread {
            offset: at,
            bytes: have as u64,
            events,
            reason: format!("the file ends inside a chunk ({have} of {need} bytes)"),
            torn: true,
        })
    }

    /// Version 4: the chunk at `at` is damaged, and nothing after it can be found. The rest of
    /// the file is read (to count it) and reading ends.
    fn stop(&mut self, at: u64, why: &str) -> io::Result<Piece> {
        let rest = (self.buf.len() - self.start) as u64 + io::copy(&mut self.src, &mut io::sink())?;
        self.buf.clear();
        self.start = 0;
        self.offset += rest;
        self.ended = Some(Ending::Corrupt {
            offset: at,
            reason: why.into(),
        });
        Ok(Piece::Unread(Unread {
            offset: at,
            bytes: rest,
            events: None,
            reason: format!("damaged chunk ({why}); nothing after it can be read in format 4"),
            torn: false,
        }))
    }

    /// Version 5: no chunk starts at `at`. Scans for the next one whose fixed part checks; the
    /// bytes before it are unread, and so are the events between the last chunk read and it.
    fn resync(&mut self, at: u64) -> io::Result<Piece> {
        self.consume(1);
        loop {
            let hit = self.buf[self.start..]
                .windows(SYNC.len())
                .position(|w| w == SYNC);
            let Some(i) = hit else {
                // Keep what could be the start of a marker cut by the end of the bytes at hand.
                let keep = (SYNC.len() - 1).min(self.buf.len() - self.start);
                let n = self.buf.len() - self.start - keep;
                self.consume(n);
                let before = self.buf.len() - self.start;
                if self.fill(before + SCAN_BYTES)? == before {
                    self.consume(before);
                    self.ended = Some(Ending::Corrupt {
                        offset: at,
                        reason: "damaged, and no intact chunk follows".into(),
                    });
                    return Ok(Piece::Unread(self.passed(at, None)));
                }
                continue;
            };
            self.consume(i);
            self.fill(HEAD)?;
            if let Some(h) = head_v5(&self.buf[self.start..]) {
                let unread = self.passed(at, h.events.map(|(_, before)| before));
                self.events_before = h.events.map(|(_, before)| before);
                return Ok(Piece::Unread(unread));
            }
            self.consume(1);
        }
    }

    /// The bytes from `at` to here, passed over; the events in them from the count of events
    /// before the chunk found here, when there is one.
    fn passed(&self, at: u64, before_next: Option<u64>) -> Unread {
        let events = match (self.events_before, before_next) {
            (Some(was), Some(now)) => now.checked_sub(was),
            _ => None,
        };
        Unread {
            offset: at,
            bytes: self.offset - at,
            events,
            reason: "damaged: no intact chunk header".into(),
            torn: false,
        }
    }
}

/// Decompresses the chunk of a frame (its bytes become the raw chunk) and checks its table; a
/// chunk that does not unpack (its checksum held: only a writer's bug makes one) is passed over,
/// whatever the version, since the next one is found by its checked length.
pub(crate) fn unpack(piece: Piece, zstd: &mut Option<zstd::bulk::Decompressor<'static>>) -> Piece {
    let Piece::Chunk(mut f) = piece else {
        return piece;
    };
    let mut raw = Vec::new();
    match unpack_into(&f, zstd, &mut raw) {
        Ok(()) => {
            f.bytes = raw;
            Piece::Chunk(f)
        }
        Err(reason) => Piece::Unread(Unread {
            offset: f.offset,
            bytes: f.len,
            events: f.events,
            reason,
            torn: false,
        }),
    }
}

fn unpack_into(
    frame: &ChunkRead,
    zstd: &mut Option<zstd::bulk::Decompressor<'static>>,
    raw: &mut Vec<u8>,
) -> Result<(), String> {
    let z = match zstd {
        Some(z) => z,
        None => zstd.insert(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
    };
    // Room for the padding the decoder adds, so that adding it does not move the chunk.
    raw.reserve(frame.raw_len + chunk::PADDING);
    raw.resize(frame.raw_len, 0);
    match z.decompress_to_buffer(&frame.bytes, &mut raw[..]) {
        Ok(n) if n == frame.raw_len => chunk::parse(raw).map(|_| ()),
        Ok(n) => Err(format!(
            "chunk holds {n} bytes, its header says {}",
            frame.raw_len
        )),
        Err(e) => Err(format!("decompression failed: {e}")),
    }
}
