//! Where an event's parts are read from: version 2 has them all in its record ([`Whole`]);
//! version 3 has the values that vary in the chunk's columns ([`Split`], `format/layout.rs`).
//! The readers of `compact` and `hot` read through [`Parts`], so one reader serves both
//! versions, compiled for each.

use std::ops::Range;

use super::wire::{pack_with, within, Wire};
use crate::format::layout::{Column, COLUMNS};

/// An event's record, and its values wherever they are.
pub(super) trait Parts {
    type Record: Wire;

    fn record(&mut self) -> &mut Self::Record;

    /// A varint of column `c` (see [`Wire::varint`] for the limits).
    fn column(&mut self, c: Column, max_bytes: u32, last_max: u8) -> Option<u64>;

    #[inline(always)]
    fn column_u64(&mut self, c: Column) -> Option<u64> {
        self.column(c, 10, 0x01)
    }

    #[inline(always)]
    fn column_u32(&mut self, c: Column) -> Option<u32> {
        self.column(c, 5, 0x0f).map(|v| v as u32)
    }
}

/// Version 2: every value in the record, in its place.
pub(super) struct Whole<W>(pub W);

impl<W: Wire> Parts for Whole<W> {
    type Record = W;

    #[inline(always)]
    fn record(&mut self) -> &mut W {
        &mut self.0
    }

    #[inline(always)]
    fn column(&mut self, _: Column, max_bytes: u32, last_max: u8) -> Option<u64> {
        self.0.varint(max_bytes, last_max)
    }
}

/// Bytes a chunk's buffer must hold after its last column, so that eight bytes load from where
/// any value starts (the trace reader pads every chunk so).
pub(crate) const PADDING: usize = 8;

/// Where the next value of each column of a chunk is, and where each column ends: kept by the
/// trace reader, reset for every chunk. Every value read stays inside its column, so `at` never
/// passes `end`, nor `end` the furthest end, `limit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    at: [usize; COLUMNS],
    end: [usize; COLUMNS],
    limit: usize,
}

impl Columns {
    /// The columns of a chunk at `ranges`, read from their starts.
    pub(crate) fn new(ranges: &[Range<usize>; COLUMNS]) -> Self {
        let at = ranges.clone().map(|r| r.start);
        let end = ranges.clone().map(|r| r.end.max(r.start));
        let limit = end.iter().copied().max().unwrap_or(0);
        Columns { at, end, limit }
    }

    /// Moves on to where a [`Split`] made from these columns read them to.
    #[inline(always)]
    pub(super) fn advance(&mut self, to: ReadTo) {
        self.at = to.0;
    }

    /// Whether every value of every column was read.
    #[cfg(test)]
    pub(crate) fn read_whole(&self) -> bool {
        self.at == self.end
    }
}

/// Version 3: the record, and the columns of its chunk (`chunk`: the chunk's bytes, padded).
/// Reads move `at`, a copy of the chunk's [`Columns`] positions that the caller writes back only
/// once the event is read whole — a reader that gives up leaves the columns as they were for the
/// next one.
pub(super) struct Split<'a, W, const PEXT: bool> {
    record: W,
    chunk: &'a [u8],
    at: [usize; COLUMNS],
    end: &'a [usize; COLUMNS],
}

impl<'a, W, const PEXT: bool> Split<'a, W, PEXT> {
    /// The parts of an event whose record `record` reads and whose values are in the columns
    /// `cols` of `chunk`; `None` when `chunk` lacks the [`PADDING`] after them.
    #[inline(always)]
    pub(super) fn new(record: W, chunk: &'a [u8], cols: &'a Columns) -> Option<Self> {
        (cols.limit + PADDING <= chunk.len()).then_some(Split {
            record,
            chunk,
            at: cols.at,
            end: &cols.end,
        })
    }

    /// Where the columns were read to, for [`Columns::advance`].
    #[inline(always)]
    pub(super) fn read_to(&self) -> ReadTo {
        ReadTo(self.at)
    }
}

/// Where a [`Split`] read its columns to.
pub(super) struct ReadTo([usize; COLUMNS]);

impl<W: Wire, const PEXT: bool> Parts for Split<'_, W, PEXT> {
    type Record = W;

    #[inline(always)]
    fn record(&mut self) -> &mut W {
        &mut self.record
    }

    #[inline(always)]
    fn column(&mut self, c: Column, max_bytes: u32, last_max: u8) -> Option<u64> {
        let (at, end) = (&mut self.at[c as usize], self.end[c as usize]);
        // SAFETY: `at <= end` (as `Columns::new` made them, and `value_at` moves `at` to at most
        // `end`), `end <= limit`, and `Split::new` checked `limit + PADDING <= chunk.len()`.
        unsafe { next_value::<PEXT>(self.chunk, at, end, max_bytes, last_max) }
    }
}

/// An event's record, and the columns of its chunk read in place: each value moves the chunk's
/// [`Columns`] on at once. For a reader that has read and checked the record first, so that a
/// value that does not read can only be damage (after which the chunk's columns are lost anyway).
pub(super) struct InPlace<'a, W, const PEXT: bool> {
    record: W,
    chunk: &'a [u8],
    cols: &'a mut Columns,
}

impl<'a, W, const PEXT: bool> InPlace<'a, W, PEXT> {
    /// The record `record` and the columns `cols` of `chunk`; `None` when `chunk` lacks the
    /// [`PADDING`] after them.
    #[inline(always)]
    pub(super) fn new(record: W, chunk: &'a [u8], cols: &'a mut Columns) -> Option<Self> {
        (cols.limit + PADDING <= chunk.len()).then_some(InPlace {
            record,
            chunk,
            cols,
        })
    }
}

impl<W: Wire, const PEXT: bool> Parts for InPlace<'_, W, PEXT> {
    type Record = W;

    #[inline(always)]
    fn record(&mut self) -> &mut W {
        &mut self.record
    }

    #[inline(always)]
    fn column(&mut self, c: Column, max_bytes: u32, last_max: u8) -> Option<u64> {
        let (at, end) = (&mut self.cols.at[c as usize], self.cols.end[c as usize]);
        // SAFETY: as in `Split::column`, `InPlace::new` having checked the padding.
        unsafe { next_value::<PEXT>(self.chunk, at, end, max_bytes, last_max) }
    }
}

/// The next value of a column, at `*at` and ending by `end`; moves `*at` past it.
///
/// # Safety
/// As [`value_at`].
#[inline(always)]
unsafe fn next_value<const PEXT: bool>(
    chunk: &[u8],
    at: &mut usize,
    end: usize,
    max_bytes: u32,
    last_max: u8,
) -> Option<u64> {
    // SAFETY: the caller's promise, passed on.
    let (v, next) = unsafe { value_at::<PEXT>(chunk, *at, end, max_bytes, last_max) }?;
    *at = next;
    Some(v)
}

/// The varint at `chunk[at..]`, which must end by `end` (see [`Wire::varint`] for the limits),
/// and where the next value starts.
///
/// # Safety
/// `at <= end` and `end + PADDING <= chunk.len()`: eight bytes load from `at` unchecked.
#[inline(always)]
unsafe fn value_at<const PEXT: bool>(
    chunk: &[u8],
    at: usize,
    end: usize,
    max_bytes: u32,
    last_max: u8,
) -> Option<(u64, usize)> {
    debug_assert!(at <= end && end + PADDING <= chunk.len());
    // SAFETY: the caller's promise: `at + 8 <= chunk.len()`.
    let word = u64::from_le(unsafe { chunk.as_ptr().add(at).cast::<u64>().read_unaligned() });
    // The varint ends at the first byte without its high bit, which must lie inside the column.
    if word & 0x80 == 0 {
        return (at < end).then_some((word & 0x7f, at + 1));
    }
    let stops = !word & 0x8080_8080_8080_8080;
    if stops == 0 {
        return value_long(chunk, at, end, max_bytes, last_max);
    }
    let len = stops.trailing_zeros() / 8 + 1;
    let next = at + len as usize;
    // A `u64` of up to eight bytes is always within postcard's limits.
    if next > end
        || (max_bytes <= 8 && !within(len, (word >> (8 * (len - 1))) as u8, max_bytes, last_max))
    {
        return None;
    }
    Some((pack_with::<PEXT>(word, len), next))
}

/// [`value_at`] for a varint of nine bytes or more (values of 2^56 and more), a byte at a time.
#[cold]
fn value_long(
    chunk: &[u8],
    at: usize,
    end: usize,
    max_bytes: u32,
    last_max: u8,
) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for i in 0..max_bytes {
        let pos = at + i as usize;
        if pos >= end {
            return None;
        }
        let b = *chunk.get(pos)?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return within(i + 1, b, max_bytes, last_max).then_some((v, pos + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::cursor::Cursor;
    use super::*;

    /// The first value of column `Value` at `range` of `chunk`, and where the column is read to
    /// after it; `None` when no split reader can be made over `chunk`.
    fn first_value(chunk: &[u8], range: Range<usize>) -> Option<(Option<u64>, usize)> {
        let mut ranges: [Range<usize>; COLUMNS] = Default::default();
        ranges[Column::Value as usize] = range;
        let cols = Columns::new(&ranges);
        let mut s = Split::<_, false>::new(Cursor::new(&[], 0), chunk, &cols)?;
        let v = s.column_u64(Column::Value);
        Some((v, s.at[Column::Value as usize]))
    }

    #[test]
    fn a_column_value_stays_inside_its_column() {
        // 300 as a varint is [0xac, 0x02]: read whole at the end of the column, and refused when
        // it runs past the column's end.
        let chunk = [0, 0xac, 0x02, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(first_value(&chunk, 1..3), Some((Some(300), 3)));
        assert_eq!(first_value(&chunk, 1..2), Some((None, 1)));
        assert_eq!(first_value(&chunk, 2..3), Some((Some(2), 3)));
        assert_eq!(first_value(&chunk, 2..2), Some((None, 2)));
        // Without eight bytes after the column, nothing is read.
        assert_eq!(first_value(&chunk[..10], 1..3), None);
        // Nine and ten bytes: read a byte at a time, and refused when too long for a u64.
        let mut long = [0xff; 20];
        long[9] = 0x01;
        assert_eq!(first_value(&long, 0..10), Some((Some(u64::MAX), 10)));
        assert_eq!(first_value(&long, 0..9), Some((None, 0)));
        long[9] = 0x02;
        assert_eq!(first_value(&long, 0..10), Some((None, 0)));
    }
}
