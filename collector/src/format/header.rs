//! The trace header (which process, when, with what settings) and the block that holds it at
//! the start of the file, written twice so that one damaged copy costs nothing.
//!
//! ```text
//! block := magic "VRAMTRC\0" | u32 version | u32 n | header (n bytes, postcard) | u32 crc
//! ```
//!
//! From version 5 the checksum covers the version, `n` and the header, and the block is written
//! twice in a row; version 4 wrote it once, its checksum covering the header alone. A reader
//! whose first block is damaged (any byte of it, the magic included) finds the copy by its magic.
//! From version 6 the header is followed (inside `n`) by where the file stands in a trace cut
//! into segments ([`SegmentInfo`]), or by a `None` for a trace of one file.

use std::io::Read;

use serde::{Deserialize, Serialize};

use super::ending::Unread;
use super::error::TraceError;

/// The first eight bytes of every trace.
pub(crate) const MAGIC: [u8; 8] = *b"VRAMTRC\0";

/// The format version this code writes; it reads this one and every one since
/// [`OLDEST_VERSION`].
pub const FORMAT_VERSION: u32 = 6;

/// The oldest format version this code reads (version 4: the same chunks without sync markers,
/// the header once).
pub(crate) const OLDEST_VERSION: u32 = 4;

/// Largest header a reader accepts.
const MAX_HEADER_BYTES: usize = 16 * 1024 * 1024;

/// Facts about the traced process, written once at the start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Version of the tracer that wrote the file.
    pub tool_version: String,
    pub pid: u32,
    pub ppid: u32,
    /// Set in a trace started by a forked child: the pid of the process it was forked from.
    pub forked_from: Option<u32>,
    pub host: String,
    /// `RANK`, `LOCAL_RANK` and `WORLD_SIZE` from the environment when set.
    pub rank: Option<i32>,
    pub local_rank: Option<i32>,
    pub world_size: Option<i32>,
    pub command_line: Vec<String>,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// `CLOCK_MONOTONIC` at the same instant, to turn event times into wall-clock times.
    pub start_mono_ns: u64,
    pub pointer_size: u8,
    /// The `VRAMTRACE_*` settings in effect, as `(name, value)`.
    pub settings: Vec<(String, String)>,
    /// Where this file stands in a trace cut into segments (format 6); `None` for a trace of
    /// one file. Written after the header's other fields, not among them: a format 5 header
    /// has none.
    #[serde(skip)]
    pub segment: Option<SegmentInfo>,
}

/// Where one file stands in a trace cut into segments (`VRAMTRACE_SEGMENT_BYTES`): each segment
/// is a file of its own whose records start from a snapshot of the live state (`Snapshot`), so
/// that any segment reads alone and the oldest can be deleted. The counts say what came before
/// it, so a reader knows what is gone without the files that held it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentInfo {
    /// 1 for the first segment.
    pub index: u32,
    /// Events written in the segments before this one.
    pub events_before: u64,
    /// Sequence number of the last event before it (0: none).
    pub last_seq: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the segment began: the time of the last event before
    /// it (tracers before 2026-12-07 wrote the moment of the cut, up to a ring's drain later).
    pub time_ns: u64,
    /// Steps begun before it.
    pub steps: u64,
    /// Bytes of the files of the segments before it.
    pub bytes_before: u64,
}

/// The start of a file as written: the header block of [`FORMAT_VERSION`], twice.
pub(crate) fn start_of_file(header: &Header) -> Result<Vec<u8>, TraceError> {
    let body = postcard::to_stdvec(header)?;
    let body = postcard::to_extend(&header.segment, body)?;
    let mut block = Vec::with_capacity(20 + body.len());
    block.extend_from_slice(&MAGIC);
    block.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    block.extend_from_slice(&(body.len() as u32).to_le_bytes());
    block.extend_from_slice(&body);
    let crc = crc32fast::hash(&block[8..]);
    block.extend_from_slice(&crc.to_le_bytes());
    Ok([&block[..], &block[..]].concat())
}

/// What the start of a file gave.
pub(crate) struct Start {
    pub header: Header,
    pub version: u32,
    /// File offset of the first chunk.
    pub chunks_at: u64,
    /// Bytes read past `chunks_at` (the first chunk's), for the chunk reader.
    pub rest: Vec<u8>,
    /// The first block, when it was damaged and the copy read instead.
    pub damaged: Option<Unread>,
}

/// A header block parsed at `at` of `bytes`.
enum Block {
    /// Whole and of a version this reader knows: the header, the version, where the block ends.
    Good(Box<Header>, u32, usize),
    /// Whole, its checksum right, of a version this reader does not know.
    Unsupported(u32),
    /// Cut off: the bytes it needs.
    Short(usize),
    Damaged(&'static str),
}

fn word(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn block_at(bytes: &[u8], at: usize) -> Block {
    let b = &bytes[at..];
    if b.len() < 16 {
        return Block::Short(at + 16);
    }
    let (version, n) = (word(b, 8), word(b, 12) as usize);
    if n > MAX_HEADER_BYTES {
        return Block::Damaged("its length is implausible");
    }
    if b.len() < 20 + n {
        return Block::Short(at + 20 + n);
    }
    let body = &b[16..16 + n];
    let crc = word(b, 16 + n);
    let whole = match version {
        4 => crc32fast::hash(body) == crc,
        _ => crc32fast::hash(&b[8..16 + n]) == crc,
    };
    if !whole {
        return Block::Damaged("checksum mismatch");
    }
    if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version) {
        return Block::Unsupported(version);
    }
    let Ok((mut header, rest)) = postcard::take_from_bytes::<Header>(body) else {
        return Block::Damaged("the header does not decode");
    };
    if version >= 6 {
        // Trailing bytes after it are a newer writer's fields.
        match postcard::take_from_bytes::<Option<SegmentInfo>>(rest) {
            Ok((segment, _)) => header.segment = segment,
            Err(_) => return Block::Damaged("the header does not decode"),
        }
    }
    Block::Good(Box::new(header), version, at + 20 + n)
}

/// Reads from `src` until `bytes` holds `want` bytes or `src` ends.
fn fill(src: &mut impl Read, bytes: &mut Vec<u8>, want: usize) -> Result<(), TraceError> {
    if bytes.len() < want {
        let need = (want - bytes.len()) as u64;
        src.by_ref()
            .take(need)
            .read_to_end(bytes)
            .map_err(|source| TraceError::Io {
                path: "trace".into(),
                source,
            })?;
    }
    Ok(())
}

/// Whether reading `src` until `bytes` holds `want` bytes added any.
fn grew(src: &mut impl Read, bytes: &mut Vec<u8>, want: usize) -> Result<bool, TraceError> {
    let before = bytes.len();
    fill(src, bytes, want)?;
    Ok(bytes.len() > before)
}

/// Reads the header blocks at the start of `src`.
pub(crate) fn read_start(src: &mut impl Read) -> Result<Start, TraceError> {
    let mut bytes = Vec::new();
    fill(src, &mut bytes, 16)?;
    let have = bytes.len() as u64;
    let differing: u32 = bytes
        .iter()
        .zip(MAGIC)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    if bytes.len() < 8 && bytes[..] == MAGIC[..bytes.len()] {
        return Err(TraceError::TruncatedHeader { have, need: 16 });
    }
    // Up to one byte's worth of bits wrong: a damaged trace, not another kind of file.
    if bytes.len() < 8 || differing > 8 {
        return Err(TraceError::NotATrace);
    }
    loop {
        match block_at(&bytes, 0) {
            Block::Short(n) if n > bytes.len() && grew(src, &mut bytes, n)? => {}
            Block::Good(header, version, end) if differing == 0 => {
                // The copy is as long as the first block (version 4 has none).
                let chunks_at = if version >= 5 { 2 * end } else { end };
                fill(src, &mut bytes, chunks_at)?;
                let chunks_at = chunks_at.min(bytes.len());
                return Ok(Start {
                    header: *header,
                    version,
                    chunks_at: chunks_at as u64,
                    rest: bytes.split_off(chunks_at),
                    damaged: None,
                });
            }
            Block::Unsupported(found) if differing == 0 => {
                return Err(TraceError::UnsupportedVersion {
                    found,
                    oldest: OLDEST_VERSION,
                    supported: FORMAT_VERSION,
                });
            }
            // Damaged, or cut off (perhaps where a damaged length says it ends): the copy.
            first => return copy(src, bytes, first),
        }
    }
}

/// The header from the copy of a damaged first block, found by its magic among the bytes a
/// header can span.
fn copy(src: &mut impl Read, mut bytes: Vec<u8>, first: Block) -> Result<Start, TraceError> {
    fill(src, &mut bytes, 2 * (20 + MAX_HEADER_BYTES))?;
    let mut at = 8;
    while let Some(i) = bytes[at..].windows(MAGIC.len()).position(|w| w == MAGIC) {
        at += i;
        if let Block::Good(header, version @ 5.., end) = block_at(&bytes, at) {
            return Ok(Start {
                header: *header,
                version,
                chunks_at: end as u64,
                rest: bytes.split_off(end),
                damaged: Some(Unread {
                    offset: 0,
                    bytes: at as u64,
                    events: Some(0),
                    reason: "the header block is damaged; read from its copy".into(),
                    torn: false,
                }),
            });
        }
        at += 1;
    }
    Err(match first {
        Block::Short(need) => TraceError::TruncatedHeader {
            have: bytes.len() as u64,
            need: need as u64,
        },
        Block::Damaged(why) => TraceError::CorruptHeader(why.into()),
        Block::Unsupported(_) | Block::Good(..) => {
            TraceError::CorruptHeader("the signature is damaged".into())
        }
    })
}
