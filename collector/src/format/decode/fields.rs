//! The fastest reader: a short payload of integers, with where every varint ends found up front.
//!
//! A byte without its high bit ends a varint (and is the whole of a `bool` or an `Option` tag,
//! when those are valid), so one pass over the payload, eight bytes at a time, marks the end of
//! every field in a 64-bit mask. Each field then starts one past the previous end: the fields do
//! not wait on one another as they do when each varint's length is found only after the previous
//! one is read, and a field is a few instructions without a branch on its length.

use super::wire::{pack_with, within, Wire};

/// Bytes a window holds: a payload of up to [`MAX_PAYLOAD`] bytes, and room to load eight bytes
/// at its last byte.
pub(crate) const WINDOW: usize = 72;
/// The longest payload this reader takes (one bit of the mask per byte).
pub(crate) const MAX_PAYLOAD: usize = 64;

/// Reads the integer fields of `window[..len]`; with `PEXT`, packs varints with BMI2's `pext`
/// (only inside functions compiled for BMI2, see `wire::packs_with_pext`).
pub(super) struct Fields<'a, const PEXT: bool = false> {
    window: &'a [u8; WINDOW],
    /// Bit i: byte i ends a field. Bits of fields already read are cleared.
    ends: u64,
    /// Where the next field starts.
    pos: usize,
}

impl<'a, const PEXT: bool> Fields<'a, PEXT> {
    /// A reader of `window[..len]`, `len` at most [`MAX_PAYLOAD`].
    #[inline(always)]
    pub(super) fn new(window: &'a [u8; WINDOW], len: usize) -> Self {
        let mut ends = 0u64;
        // Only the words the payload reaches (version 2 events are two or three).
        let words = len.div_ceil(8).min(MAX_PAYLOAD / 8);
        for (i, word) in window.chunks_exact(8).take(words).enumerate() {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            // One bit per byte without its high bit, gathered from bits 7, 15, ... to 0..8.
            let stops = (!word & 0x8080_8080_8080_8080) >> 7;
            ends |= (stops.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * i);
        }
        if len < MAX_PAYLOAD {
            ends &= (1u64 << len) - 1;
        }
        Fields {
            window,
            ends,
            pos: 0,
        }
    }

    /// The next field: where it starts and its length.
    #[inline(always)]
    fn field(&mut self) -> Option<(usize, u32)> {
        if self.ends == 0 {
            return None;
        }
        let last = self.ends.trailing_zeros() as usize;
        self.ends &= self.ends - 1;
        let start = self.pos;
        self.pos = last + 1;
        // A field starts at most at byte 63 (it ends by byte 63): `& 63` only tells the
        // compiler, so the loads need no bounds check.
        Some((start & (MAX_PAYLOAD - 1), (last + 1 - start) as u32))
    }

    /// The eight bytes from `start` (at most 63).
    #[inline(always)]
    fn word(&self, start: usize) -> u64 {
        let bytes: [u8; 8] = self.window[start..start + 8].try_into().expect("8 bytes");
        u64::from_le_bytes(bytes)
    }
}

impl<const PEXT: bool> Wire for Fields<'_, PEXT> {
    #[inline(always)]
    fn varint(&mut self, max_bytes: u32, last_max: u8) -> Option<u64> {
        let (start, len) = self.field()?;
        // Most fields are one byte (small ids, zero, a variant index): no packing, and a branch
        // each field site predicts well.
        if len == 1 {
            return Some(u64::from(self.window[start]));
        }
        let word = self.word(start);
        // Nine and ten byte varints (values of 2^56 and more) are left to the general reader.
        if len > 8 || !within(len, (word >> (8 * (len - 1))) as u8, max_bytes, last_max) {
            return None;
        }
        Some(pack_with::<PEXT>(word, len))
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        let (start, len) = self.field()?;
        (len == 1).then_some(self.window[start])
    }
}
