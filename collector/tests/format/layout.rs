//! The file layout of `docs/trace-format.md`, written out here independently of the library: to
//! find and rewrite chunks, and to build chunks by hand.

use std::ops::Range;

pub const SYNC: [u8; 8] = *b"\x89VTCHNK\n";
pub const HEAD: usize = 40;

fn word(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

/// Where the first and second header blocks of a version 5 file lie.
pub fn header_blocks(bytes: &[u8]) -> (Range<usize>, Range<usize>) {
    let n = 20 + word(bytes, 12);
    (0..n, n..2 * n)
}

/// Where each chunk of a version 5 file lies.
pub fn chunk_spans(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut at = header_blocks(bytes).1.end;
    let mut spans = Vec::new();
    while at < bytes.len() {
        assert_eq!(bytes[at..at + 8], SYNC);
        let end = at + HEAD + word(bytes, at + 8);
        spans.push(at..end);
        at = end;
    }
    spans
}

/// A version 5 chunk's bytes around the raw chunk `raw` holding `items` items and `events`
/// events, after `before` events.
pub fn chunk(raw: &[u8], items: u32, events: u32, before: u64) -> Vec<u8> {
    let packed = zstd::bulk::compress(raw, 1).unwrap();
    let mut c = SYNC.to_vec();
    c.extend_from_slice(&(packed.len() as u32).to_le_bytes());
    c.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    c.extend_from_slice(&items.to_le_bytes());
    c.extend_from_slice(&events.to_le_bytes());
    c.extend_from_slice(&before.to_le_bytes());
    let crc = crc32fast::hash(&c[8..32]);
    c.extend_from_slice(&crc.to_le_bytes());
    c.extend_from_slice(&crc32fast::hash(&packed).to_le_bytes());
    c.extend_from_slice(&packed);
    c
}

/// A raw chunk: the table, the items, the six columns.
pub fn raw_chunk(items: &[u8], columns: &[Vec<u8>; 6]) -> Vec<u8> {
    let mut raw = (items.len() as u32).to_le_bytes().to_vec();
    for c in columns {
        raw.extend_from_slice(&(c.len() as u32).to_le_bytes());
    }
    raw.extend_from_slice(items);
    columns.iter().for_each(|c| raw.extend_from_slice(c));
    raw
}

/// `bytes` (a version 5 trace) with the raw chunk of chunk `k` changed by `edit`, compressed
/// again with a right fixed part (its checksums hold).
pub fn edit_chunk(bytes: &[u8], k: usize, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let span = chunk_spans(bytes)[k].clone();
    let c = &bytes[span.clone()];
    let mut raw = zstd::bulk::decompress(&c[HEAD..], 1 << 24).unwrap();
    edit(&mut raw);
    let before = u64::from_le_bytes(c[24..32].try_into().unwrap());
    let rebuilt = chunk(&raw, word(c, 16) as u32, word(c, 20) as u32, before);
    [&bytes[..span.start], &rebuilt[..], &bytes[span.end..]].concat()
}

/// Where the items of raw chunk `raw` lie.
pub fn items_of(raw: &[u8]) -> Range<usize> {
    28..28 + word(raw, 0)
}

/// A varint.
pub fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A zigzag value.
pub fn zig(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}
