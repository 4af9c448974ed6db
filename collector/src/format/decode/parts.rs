//! Where an event's parts are read from: version 2 has them all in its record ([`Whole`]);
//! version 3 has the values that vary in the chunk's columns ([`Split`], `format/layout.rs`).
//! The readers of `compact` and `hot` read through [`Parts`], so one reader serves both
//! versions, compiled for each.

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

/// Where the next value of each column of a chunk is, and where each column ends: kept by the
/// trace reader, reset for every chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    pub at: [usize; COLUMNS],
    pub end: [usize; COLUMNS],
}

/// Version 3: the record, and the columns of its chunk (`chunk`: the chunk's bytes). Reads move
/// `at`, a copy of the chunk's [`Columns::at`] the caller writes back only once the event is
/// read whole — a reader that gives up leaves the columns as they were for the next one.
pub(super) struct Split<'a, W, const PEXT: bool> {
    pub record: W,
    pub chunk: &'a [u8],
    pub at: [usize; COLUMNS],
    pub end: &'a [usize; COLUMNS],
}

impl<W: Wire, const PEXT: bool> Parts for Split<'_, W, PEXT> {
    type Record = W;

    #[inline(always)]
    fn record(&mut self) -> &mut W {
        &mut self.record
    }

    #[inline(always)]
    fn column(&mut self, c: Column, max_bytes: u32, last_max: u8) -> Option<u64> {
        let (at, end) = (&mut self.at[c as usize], self.end[c as usize]);
        // Eight bytes at once where the chunk has eight: the varint ends at the first byte
        // without its high bit, which must lie inside the column.
        if let Some(bytes) = self.chunk.get(*at..*at + 8) {
            let word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let stops = !word & 0x8080_8080_8080_8080;
            let len = stops.trailing_zeros() / 8 + 1;
            if stops != 0 && *at + len as usize <= end {
                if !within(len, (word >> (8 * (len - 1))) as u8, max_bytes, last_max) {
                    return None;
                }
                *at += len as usize;
                return Some(pack_with::<PEXT>(word, len));
            }
        }
        column_slow(self.chunk, at, end, max_bytes, last_max)
    }
}

/// [`Split::column`] a byte at a time: near the end of the chunk, or nine bytes and more.
#[cold]
fn column_slow(
    chunk: &[u8],
    at: &mut usize,
    end: usize,
    max_bytes: u32,
    last_max: u8,
) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..max_bytes {
        if *at + i as usize >= end {
            return None;
        }
        let b = *chunk.get(*at + i as usize)?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            if !within(i + 1, b, max_bytes, last_max) {
                return None;
            }
            *at += i as usize + 1;
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::cursor::Cursor;
    use super::*;

    /// A split reader over `chunk` whose column `Value` is `chunk[start..end]`.
    fn split(chunk: &[u8], start: usize, end: &'static [usize; COLUMNS]) -> u64 {
        let mut at = [0; COLUMNS];
        at[Column::Value as usize] = start;
        let mut s = Split::<_, false> {
            record: Cursor::new(&[], 0),
            chunk,
            at,
            end,
        };
        let v = s.column_u64(Column::Value).unwrap_or(u64::MAX);
        v ^ (s.at[Column::Value as usize] as u64) << 56
    }

    #[test]
    fn a_column_value_stays_inside_its_column() {
        static END: [usize; COLUMNS] = [0, 0, 0, 0, 0, 3];
        // 300 as a varint is [0xac, 0x02]: read whole at the end of the column, with or without
        // eight bytes after it, and refused when it runs past the column's end.
        let long = [0, 0xac, 0x02, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(split(&long, 1, &END), 300 ^ (3 << 56));
        assert_eq!(split(&long[..3], 1, &END), 300 ^ (3 << 56));
        let past = [0, 0, 0xac, 0x02, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(split(&past, 2, &END), u64::MAX ^ (2 << 56));
        assert_eq!(split(&past[..4], 2, &END), u64::MAX ^ (2 << 56));
        // A varint too long for a u64 is refused either way.
        static WIDE: [usize; COLUMNS] = [0, 0, 0, 0, 0, 11];
        let over = [0xff; 11];
        assert_eq!(split(&over, 0, &WIDE), u64::MAX);
    }
}
