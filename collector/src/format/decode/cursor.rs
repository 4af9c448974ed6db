//! The general reader: any payload, a field at a time.

use super::wire::{pack, within, Wire};

/// Reads postcard values from the front of a payload: `buf[..end]`. The bytes after it (the rest
/// of the chunk) may be loaded, eight at a time, but are never used.
pub(super) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    /// A reader of `bytes[..len]`.
    pub(super) fn new(bytes: &'a [u8], len: usize) -> Self {
        Cursor {
            buf: bytes,
            pos: 0,
            end: len.min(bytes.len()),
        }
    }

    /// [`Wire::varint`] a byte at a time: near the end of the bytes, or nine bytes and more.
    #[cold]
    fn varint_slow(&mut self, max_bytes: u32, last_max: u8) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..max_bytes {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return within(i + 1, b, max_bytes, last_max).then_some(v);
            }
        }
        None
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }
}

impl Wire for Cursor<'_> {
    #[inline(always)]
    fn varint(&mut self, max_bytes: u32, last_max: u8) -> Option<u64> {
        // Eight bytes at once where there are eight: the varint ends at the first byte without
        // its high bit.
        if let Some(bytes) = self.buf.get(self.pos..self.pos + 8) {
            let word = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let stops = !word & 0x8080_8080_8080_8080;
            let len = stops.trailing_zeros() / 8 + 1;
            if stops != 0 && self.pos + len as usize <= self.end {
                let last = (word >> (8 * (len - 1))) as u8;
                if !within(len, last, max_bytes, last_max) {
                    return None;
                }
                self.pos += len as usize;
                return Some(pack(word, len));
            }
        }
        self.varint_slow(max_bytes, last_max)
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        if self.pos >= self.end {
            return None;
        }
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn string(&mut self) -> Option<String> {
        let n = self.len()?;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.end)?;
        let bytes = self.buf.get(self.pos..end)?;
        self.pos = end;
        std::str::from_utf8(bytes).ok().map(str::to_string)
    }

    fn u64s(&mut self) -> Option<Vec<u64>> {
        let n = self.len()?;
        // Every element takes at least a byte: a longer count is damage, not a reason to
        // reserve memory.
        let mut v = Vec::with_capacity(n.min(self.end - self.pos));
        for _ in 0..n {
            v.push(self.u64()?);
        }
        Some(v)
    }

    fn i32s(&mut self) -> Option<Vec<i32>> {
        let n = self.len()?;
        let mut v = Vec::with_capacity(n.min(self.end - self.pos));
        for _ in 0..n {
            v.push(self.i32()?);
        }
        Some(v)
    }
}
