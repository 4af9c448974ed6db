//! Version 3's chunk layout: the records, then the values of their events that vary from one
//! event to the next, each kind in a column of its own.
//!
//! ```text
//! raw chunk := u32 records length | u32 length of each column, in order | records | columns
//! ```
//!
//! zstd's decoding time follows the number of matches it must copy, and an event of version 2
//! breaks every match at each field that varies (its time, its caller, its pointer, its size):
//! with those values gathered in columns, the records repeat whole and the columns compress on
//! their own. An event's record keeps everything else (flags, API, the seldom-changing fields,
//! the operation's index and mask, strings and lists), and its length, so a reader still skips an
//! event it does not know by its length. Every column is read in record order: the events of a
//! chunk take their values one after the other, so no event says where its values are.

use std::ops::Range;

/// How many columns a chunk has.
pub(crate) const COLUMNS: usize = 6;

/// Bytes of the table at the start of a chunk: the length of the records and of each column.
pub(crate) const TABLE_BYTES: usize = 4 * (1 + COLUMNS);

/// The columns, in the order they follow the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// Every event's time: the zigzagged difference from the previous event's.
    Time = 0,
    /// The sequence number's difference from the previous one plus one, where the flags say so.
    Seq = 1,
    /// The thread, where it changed.
    Thread = 2,
    /// The caller's zigzagged difference from the previous one, where it changed.
    Caller = 3,
    /// Pointer fields: the zigzagged difference from the chunk's previous pointer.
    Ptr = 4,
    /// The other integer fields of an operation (sizes, streams, handles, flags, devices).
    Value = 5,
}

/// Operations with a variant index below this write their integer fields to the columns; those
/// appended later write them in their record, so that a reader that does not know them can skip
/// them by their length without losing its place in the columns. Fixed with version 3: it must
/// not grow when operations are appended.
pub(crate) const COLUMNAR_OPS: u32 = 40;

/// Where the parts of a decompressed chunk lie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub records: Range<usize>,
    pub columns: [Range<usize>; COLUMNS],
}

/// Finds the parts of the decompressed chunk `raw`; the reason when its table does not describe
/// it.
pub(crate) fn parse(raw: &[u8]) -> Result<Layout, String> {
    let Some(table) = raw.get(..TABLE_BYTES) else {
        return Err(format!(
            "chunk of {} bytes is shorter than its column table",
            raw.len()
        ));
    };
    let len = |i: usize| {
        let word = table[4 * i..4 * i + 4].try_into().expect("4 bytes");
        u32::from_le_bytes(word) as usize
    };
    let mut at = TABLE_BYTES + len(0);
    let records = TABLE_BYTES..at;
    let columns = std::array::from_fn(|c| {
        let start = at;
        at = at.saturating_add(len(1 + c));
        start..at
    });
    if at != raw.len() {
        return Err(format!(
            "column table adds up to {at} bytes, the chunk holds {}",
            raw.len()
        ));
    }
    Ok(Layout { records, columns })
}

/// Appends the raw chunk of `records` and `columns` to `out`.
pub(crate) fn assemble(records: &[u8], columns: &[Vec<u8>; COLUMNS], out: &mut Vec<u8>) {
    out.reserve(TABLE_BYTES + records.len() + columns.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for c in columns {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(records);
    for c in columns {
        out.extend_from_slice(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(lens: [usize; COLUMNS]) -> [Vec<u8>; COLUMNS] {
        std::array::from_fn(|c| vec![c as u8 + 1; lens[c]])
    }

    #[test]
    fn an_assembled_chunk_parses_into_its_parts() {
        let cols = columns([3, 0, 1, 0, 7, 2]);
        let mut raw = Vec::new();
        assemble(b"records", &cols, &mut raw);
        let layout = parse(&raw).unwrap();
        assert_eq!(&raw[layout.records.clone()], b"records");
        for (c, range) in layout.columns.iter().enumerate() {
            assert_eq!(&raw[range.clone()], &cols[c][..], "column {c}");
        }
        assert_eq!(layout.columns[5].end, raw.len());
    }

    #[test]
    fn a_table_that_does_not_add_up_is_refused() {
        let mut raw = Vec::new();
        assemble(b"abc", &columns([1, 2, 3, 4, 5, 6]), &mut raw);
        assert!(parse(&raw[..raw.len() - 1]).is_err());
        raw.push(0);
        assert!(parse(&raw).is_err());
        assert!(parse(&raw[..TABLE_BYTES - 1]).is_err());
        // Lengths near 2^32 must not wrap around to the right total.
        let mut huge = vec![0xff; TABLE_BYTES];
        huge.extend_from_slice(b"x");
        assert!(parse(&huge).is_err());
    }
}
