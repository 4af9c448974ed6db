//! The version 2 fast reader: a short payload read straight through, a varint at a time.
//!
//! A version 2 event is a dozen bytes, most fields one byte: reading on from where the last field
//! ended, with a one-byte path first, costs less per event than finding every field's end up
//! front (`fields`), whose set-up is paid whatever the payload. Every load stays inside the
//! window, so a field may run past the payload while reading; [`Straight::within_payload`] then
//! says so, and the caller leaves the payload to the general reader.

use super::fields::{MAX_PAYLOAD, WINDOW};
use super::wire::{pack_with, within, Wire};

/// Reads the integer fields of `window[..len]`, `len` at most [`MAX_PAYLOAD`]; with `PEXT`,
/// packs varints with BMI2's `pext` (only inside functions compiled for BMI2).
pub(super) struct Straight<'a, const PEXT: bool> {
    window: &'a [u8; WINDOW],
    /// Where the next field starts; past `len` once a field ran past the payload.
    pos: usize,
    len: usize,
}

impl<'a, const PEXT: bool> Straight<'a, PEXT> {
    #[inline(always)]
    pub(super) fn new(window: &'a [u8; WINDOW], len: usize) -> Self {
        Straight {
            window,
            pos: 0,
            len,
        }
    }

    /// Where the next field starts, kept below [`MAX_PAYLOAD`] so that eight bytes load from it
    /// inside the window: wrapped (one instruction, where clamping took two), as what is read
    /// from past the payload does not matter, being caught by `within_payload` (`pos` only
    /// grows).
    #[inline(always)]
    fn at(&self) -> usize {
        const { assert!(MAX_PAYLOAD.is_power_of_two() && MAX_PAYLOAD + 8 <= WINDOW) };
        self.pos & (MAX_PAYLOAD - 1)
    }
}

impl<const PEXT: bool> Wire for Straight<'_, PEXT> {
    /// Whether every field read so far lies inside the payload.
    #[inline(always)]
    fn within_payload(&self) -> bool {
        self.pos <= self.len
    }

    #[inline(always)]
    fn varint(&mut self, max_bytes: u32, last_max: u8) -> Option<u64> {
        let at = self.at();
        let first = self.window[at];
        if first < 0x80 {
            self.pos += 1;
            return Some(u64::from(first));
        }
        let bytes: [u8; 8] = self.window[at..at + 8].try_into().expect("8 bytes");
        let word = u64::from_le_bytes(bytes);
        let stops = !word & 0x8080_8080_8080_8080;
        // Nine and ten byte varints (values of 2^56 and more) are left to the general reader.
        if stops == 0 {
            return None;
        }
        let len = stops.trailing_zeros() / 8 + 1;
        if !within(len, (word >> (8 * (len - 1))) as u8, max_bytes, last_max) {
            return None;
        }
        self.pos += len as usize;
        Some(pack_with::<PEXT>(word, len))
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        let b = self.window[self.at()];
        self.pos += 1;
        Some(b)
    }
}
