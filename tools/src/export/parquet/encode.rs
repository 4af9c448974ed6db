//! Parquet's value encodings, as the format specifies them: the RLE / bit-packing hybrid (for
//! repetition and definition levels and dictionary indices) and `DELTA_BINARY_PACKED` (for
//! numbers that grow). [`super::column`] builds pages with them.
//!
//! Written here rather than taken from `parquet`, whose encoders are public only under its
//! `experimental` feature (which builds the Variant crates too) and work one value at a time
//! behind a trait; these take a page's values as one slice.

/// Bits needed to write every value up to `max`.
pub fn bit_width(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// `v` as an unsigned LEB128 varint.
pub fn uvarint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `v` zigzag-encoded as a varint.
fn zigzag(v: i64, out: &mut Vec<u8>) {
    uvarint(((v << 1) ^ (v >> 63)) as u64, out);
}

/// Appends `values`, `width` bits each (at most 32), least significant bit first; a last
/// byte only partly filled is padded with zeros.
pub fn bit_pack32(values: &[u32], width: u32, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    let mut acc: u64 = 0;
    let mut bits = 0;
    for &v in values {
        acc |= u64::from(v) << bits;
        bits += width;
        if bits >= 32 {
            out.extend_from_slice(&(acc as u32).to_le_bytes());
            acc >>= 32;
            bits -= 32;
        }
    }
    out.extend_from_slice(&acc.to_le_bytes()[..bits.div_ceil(8) as usize]);
}

/// Appends `values`, `width` bits each (up to 64), least significant bit first; a last byte
/// only partly filled is padded with zeros.
fn bit_pack64(values: &[u64], width: u32, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    let mut acc: u128 = 0;
    let mut bits = 0;
    for &v in values {
        acc |= u128::from(v) << bits;
        bits += width;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    out.extend_from_slice(&acc.to_le_bytes()[..bits.div_ceil(8) as usize]);
}

/// Bit-packed groups of 8 values in one run, at most: what one header byte counts.
const MAX_GROUPS: usize = 63;

/// How many values from `values[i]` on equal it.
fn run_at(values: &[u32], i: usize) -> usize {
    let v = values[i];
    values[i..].iter().take_while(|&&x| x == v).count()
}

/// `values` (each under 2^`width`) in the RLE / bit-packing hybrid: runs of 8 or more equal
/// values as one repeated value, the rest bit-packed in groups of 8 (the last group padded).
pub fn rle_hybrid(values: &[u32], width: u32, out: &mut Vec<u8>) {
    let n = values.len();
    let value_bytes = width.div_ceil(8) as usize;
    let mut i = 0;
    while i < n {
        let run = run_at(values, i);
        // With width 0 every value is 0: one repeated run, however short.
        if run >= 8 || width == 0 {
            uvarint((run as u64) << 1, out);
            out.extend_from_slice(&values[i].to_le_bytes()[..value_bytes]);
            i += run;
            continue;
        }
        let start = i;
        let mut groups = 0;
        loop {
            groups += 1;
            i += 8;
            if i >= n || groups == MAX_GROUPS || run_at(values, i) >= 8 {
                break;
            }
        }
        uvarint(((groups as u64) << 1) | 1, out);
        if i <= n {
            bit_pack32(&values[start..i], width, out);
        } else {
            let mut last = values[start..].to_vec();
            last.resize(i - start, 0);
            bit_pack32(&last, width, out);
        }
    }
}

/// Values per block and per miniblock of [`delta_binary_packed`].
const BLOCK: usize = 128;
const MINIBLOCK: usize = 32;

/// `values` in `DELTA_BINARY_PACKED`: the first value, then blocks of 128 differences, each
/// as its smallest difference and four miniblocks of 32 bit-packed offsets from it.
pub fn delta_binary_packed(values: &[i64], out: &mut Vec<u8>) {
    uvarint(BLOCK as u64, out);
    uvarint((BLOCK / MINIBLOCK) as u64, out);
    uvarint(values.len() as u64, out);
    zigzag(values.first().copied().unwrap_or(0), out);
    let mut offsets = [0u64; BLOCK];
    let count = values.len().saturating_sub(1);
    for start in (0..count).step_by(BLOCK) {
        let block = &values[start..(start + BLOCK + 1).min(values.len())];
        let mut deltas = [0i64; BLOCK];
        for (d, w) in deltas.iter_mut().zip(block.windows(2)) {
            *d = w[1].wrapping_sub(w[0]);
        }
        let deltas = &deltas[..block.len() - 1];
        let min = deltas.iter().copied().min().unwrap_or(0);
        zigzag(min, out);
        for (o, d) in offsets.iter_mut().zip(deltas) {
            *o = d.wrapping_sub(min) as u64;
        }
        // The last miniblock's padding is zeros.
        offsets[deltas.len()..].fill(0);
        let mut widths = [0u8; BLOCK / MINIBLOCK];
        let used = deltas.len().div_ceil(MINIBLOCK);
        for (w, mini) in widths.iter_mut().zip(offsets.chunks(MINIBLOCK)).take(used) {
            *w = bit_width(mini.iter().fold(0, |a, &o| a | o)) as u8;
        }
        out.extend_from_slice(&widths);
        for (w, mini) in widths.iter().zip(offsets.chunks(MINIBLOCK)).take(used) {
            bit_pack64(mini, u32::from(*w), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_eight_repeat_and_the_rest_is_packed_in_groups_of_eight() {
        let mut out = Vec::new();
        rle_hybrid(&[5; 10], 3, &mut out);
        // Header 10 << 1, then the value in one byte.
        assert_eq!(out, [20, 5]);
        out.clear();
        rle_hybrid(&[0, 1, 2, 3, 4, 5, 6, 7, 1, 1], 3, &mut out);
        // Two groups (header (2 << 1) | 1), 3 bits each, the second group padded with zeros.
        assert_eq!(out, [5, 0b10001000, 0b11000110, 0b11111010, 0b1001, 0, 0]);
        out.clear();
        rle_hybrid(&[0, 0, 0], 0, &mut out);
        assert_eq!(out, [6]);
    }

    #[test]
    fn deltas_are_packed_by_miniblock_from_the_smallest() {
        let mut out = Vec::new();
        delta_binary_packed(&[7, 8, 10, 9], &mut out);
        // 128, 4, 4 values, first 7 (zigzag 14); min delta -1 (zigzag 1); widths [2, 0, 0, 0];
        // offsets 2, 3, 0 and 29 zeros of padding in 8 bytes.
        let mut want = vec![128, 1, 4, 4, 14, 1, 2, 0, 0, 0, 0b00_1110];
        want.extend([0; 7]);
        assert_eq!(out, want);
        out.clear();
        delta_binary_packed(&[], &mut out);
        assert_eq!(out, [128, 1, 4, 0, 0]);
    }
}
