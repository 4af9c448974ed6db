//! A chunk's contents once decompressed: its items (the records), then the values of its events
//! that vary from one event to the next, each kind in a column of its own.
//!
//! ```text
//! raw chunk := u32 items length | u32 length of each of the 6 columns | item* | column*
//! item      := 0xff record        a record, read as it stands
//!            | 0xfe record        a record that is also the chunk's next shape
//!            | k (0x00..=0xfd)    the record of shape k again
//! record    := varint length | varint tag | payload     (length covers tag and payload)
//! ```
//!
//! With its varying values in the columns, a training loop's event records repeat byte for byte,
//! so each is written once per chunk and named afterwards by one byte (`shapes.rs`); zstd then
//! finds long matches in the items, and each column compresses on its own terms. Every column is
//! read in record order: the events of a chunk take their values one after the other.

use std::ops::Range;

/// How many columns a chunk has.
pub(crate) const COLUMNS: usize = 6;

/// Bytes of the table at the start of a chunk: the length of the items and of each column.
pub(crate) const TABLE_BYTES: usize = 4 * (1 + COLUMNS);

/// Bytes a reader keeps after a chunk's last column, so that eight bytes load from where any
/// value starts.
pub(crate) const PADDING: usize = 8;

/// The columns, in the order they follow the items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Column {
    /// Every event's time: the zigzagged difference from the previous event's.
    Time = 0,
    /// The sequence number's zigzagged difference from the previous one plus one, where the
    /// event's flags say so.
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

/// Operations with a wire index below this write their integer fields to the columns; those
/// appended later write them in their record, so that a reader that does not know them can skip
/// them by their length without losing its place in the columns. It must not grow when
/// operations are appended.
pub(crate) const COLUMNAR_OPS: u32 = 40;

/// The item byte of a record that is not a shape.
pub(crate) const PLAIN: u8 = 0xff;
/// The item byte of a record that becomes the chunk's next shape.
pub(crate) const DEFINE: u8 = 0xfe;
/// Shape numbers per chunk: `0..MAX_SHAPES`, below the two item bytes above.
pub(crate) const MAX_SHAPES: usize = 0xfe;

/// Where the items and the columns of a decompressed chunk lie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub items: Range<usize>,
    pub columns: [Range<usize>; COLUMNS],
}

/// Finds the parts of the decompressed chunk `raw`; the reason when its table does not describe
/// it.
pub(crate) fn parse(raw: &[u8]) -> Result<Layout, String> {
    let Some(table) = raw.get(..TABLE_BYTES) else {
        return Err(format!("chunk of {} bytes has no column table", raw.len()));
    };
    let len = |i: usize| {
        let word = table[4 * i..4 * i + 4].try_into().expect("4 bytes");
        u32::from_le_bytes(word) as usize
    };
    let mut at = TABLE_BYTES.saturating_add(len(0));
    let items = TABLE_BYTES..at;
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
    Ok(Layout { items, columns })
}

/// Appends the raw chunk of `items` and `columns` to `out`.
pub(crate) fn assemble(items: &[u8], columns: &[Vec<u8>; COLUMNS], out: &mut Vec<u8>) {
    out.reserve(TABLE_BYTES + items.len() + columns.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for c in columns {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(items);
    for c in columns {
        out.extend_from_slice(c);
    }
}

/// Where the next value of each column of a chunk is, and where each column ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    at: [usize; COLUMNS],
    end: [usize; COLUMNS],
}

impl Columns {
    /// The columns of a chunk, read from their starts.
    pub(crate) fn new(layout: &Layout) -> Self {
        Columns {
            at: layout.columns.clone().map(|r| r.start),
            end: layout.columns.clone().map(|r| r.end),
        }
    }

    /// The next value of column `c` of `chunk`; `None` when the column is spent or damaged.
    #[inline(always)]
    pub(crate) fn next(&mut self, chunk: &[u8], c: Column) -> Option<u64> {
        let c = c as usize;
        super::varint::read(chunk, &mut self.at[c], self.end[c])
    }
}
