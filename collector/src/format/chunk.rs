//! Reading one chunk: its fixed header, the compressed bytes, the checksum, and the zstd frame
//! decompressed into a buffer the caller keeps (and reuses).

use std::io::Read;

use super::reader::Ending;

/// Largest chunk a reader accepts; anything bigger is damage, not data.
const MAX_CHUNK_BYTES: u32 = 256 * 1024 * 1024;

/// What reading at a chunk boundary gave.
#[derive(Debug)]
pub(super) enum Loaded {
    /// A whole chunk, decompressed; `len` bytes of the file were consumed.
    Chunk { len: u64 },
    /// The file ends cleanly here (whether the trace is complete depends on its records).
    Eof,
    /// Reading stopped: the file is cut off or damaged here.
    Stop(Ending),
}

/// Reads until `buf` is full or the source ends; returns how many bytes were read.
pub(super) fn read_full(src: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
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

/// What reading chunks reuses from one to the next: the compressed bytes' buffer and the zstd
/// context.
#[derive(Default)]
pub(super) struct Scratch {
    packed: Vec<u8>,
    /// Made on first use (a context is some 100 KiB).
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

/// Reads the chunk at file offset `start` from `src` and decompresses it into `raw` (resized to
/// the chunk's raw length).
pub(super) fn load(
    src: &mut impl Read,
    start: u64,
    scratch: &mut Scratch,
    raw: &mut Vec<u8>,
) -> Loaded {
    let packed = &mut scratch.packed;
    let corrupt = |reason: String| {
        Loaded::Stop(Ending::Corrupt {
            offset: start,
            reason,
        })
    };
    let mut head = [0u8; 16];
    let got = match read_full(src, &mut head) {
        Ok(n) => n,
        Err(e) => return corrupt(format!("read error: {e}")),
    };
    if got == 0 {
        return Loaded::Eof;
    }
    if got < 16 {
        return Loaded::Stop(Ending::Truncated {
            offset: start,
            have: got as u64,
            need: 16,
        });
    }
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let (packed_len, raw_len, _count, crc) = (word(0), word(4), word(8), word(12));
    if packed_len > MAX_CHUNK_BYTES || raw_len > MAX_CHUNK_BYTES {
        return corrupt(format!("implausible chunk size {packed_len}/{raw_len}"));
    }
    packed.resize(packed_len as usize, 0);
    let got = match read_full(src, packed) {
        Ok(n) => n,
        Err(e) => return corrupt(format!("read error: {e}")),
    };
    if got < packed_len as usize {
        return Loaded::Stop(Ending::Truncated {
            offset: start,
            have: 16 + got as u64,
            need: 16 + u64::from(packed_len),
        });
    }
    if crc32fast::hash(packed) != crc {
        return corrupt("checksum mismatch".into());
    }
    // A reused buffer is nearly the right size already: little to zero.
    raw.resize(raw_len as usize, 0);
    let zstd = match &mut scratch.zstd {
        Some(z) => z,
        None => match zstd::bulk::Decompressor::new() {
            Ok(z) => scratch.zstd.insert(z),
            Err(e) => return corrupt(format!("decompression failed: {e}")),
        },
    };
    match zstd.decompress_to_buffer(packed, &mut raw[..]) {
        Ok(n) if n == raw_len as usize => Loaded::Chunk {
            len: 16 + u64::from(packed_len),
        },
        Ok(n) => corrupt(format!("chunk holds {n} bytes, header says {raw_len}")),
        Err(e) => corrupt(format!("decompression failed: {e}")),
    }
}
