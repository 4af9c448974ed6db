//! LEB128 varints, the integers of every record and column, and the zigzag coding that keeps
//! small signed values and differences small.

/// Appends `v` as an unsigned LEB128 varint.
///
/// The tracer's writer thread writes several per event: one check of the room left for all
/// the bytes, rather than one per byte as `push` makes.
#[inline]
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    out.reserve(10);
    let len = out.len();
    let spare = out.spare_capacity_mut();
    let mut n = 0;
    while v >= 0x80 {
        spare[n].write((v as u8) | 0x80);
        v >>= 7;
        n += 1;
    }
    spare[n].write(v as u8);
    // SAFETY: the `n + 1` bytes after `len` were written just now (at most 10: a `u64` has 64
    // bits, 7 a byte), inside the capacity reserved.
    unsafe { out.set_len(len + n + 1) };
}

/// Reads the varint at `buf[*at..end]` and moves `*at` past it; `None` (and `*at` unmoved) when
/// it runs past `end` or does not fit a `u64`.
///
/// Most values of a chunk are one or two bytes. Where eight bytes can be loaded at once (the
/// reader pads every chunk so), a longer value is read without a loop: the first byte without
/// its high bit ends it, and its 7-bit groups are packed by three shifts.
#[inline(always)]
pub(crate) fn read(buf: &[u8], at: &mut usize, end: usize) -> Option<u64> {
    let start = *at;
    let Some(word) = buf.get(start..start + 8) else {
        return read_slow(buf, at, end);
    };
    let word = u64::from_le_bytes(word.try_into().expect("eight bytes"));
    // One byte, the most common.
    if word & 0x80 == 0 {
        if start >= end {
            return None;
        }
        *at = start + 1;
        return Some(word & 0x7f);
    }
    // Two bytes: a time or caller difference, mostly.
    if word & 0x8000 == 0 {
        if start + 2 > end {
            return None;
        }
        *at = start + 2;
        return Some((word & 0x7f) | ((word >> 1) & 0x3f80));
    }
    let stops = !word & 0x8080_8080_8080_8000;
    if stops == 0 {
        return read_slow(buf, at, end);
    }
    let len = stops.trailing_zeros() / 8 + 1;
    let next = start + len as usize;
    if next > end {
        return None;
    }
    *at = next;
    Some(pack(word, len))
}

/// The value of a varint whose `len` bytes (1 to 8) start `word`: its 7-bit groups packed
/// together, pairs, then quads, then the two halves.
#[inline(always)]
fn pack(word: u64, len: u32) -> u64 {
    let x = (word & (u64::MAX >> (64 - 8 * len))) & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// [`read`] a byte at a time: near the end of an unpadded buffer, and for values of nine or ten
/// bytes (2^56 and more).
#[cold]
fn read_slow(buf: &[u8], at: &mut usize, end: usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let pos = *at + i;
        if pos >= end {
            return None;
        }
        let b = *buf.get(pos)?;
        // The tenth byte holds the 64th bit only.
        if i == 9 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *at = pos + 1;
            return Some(v);
        }
    }
    None
}

/// A difference as a zigzag value: small either way is small.
#[inline(always)]
pub(crate) fn zig(new: u64, old: u64) -> u64 {
    let d = new.wrapping_sub(old) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// The difference a zigzag value stands for, to add (wrapping) to the old value.
#[inline(always)]
pub(crate) fn unzig(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

/// A signed 32-bit value as a zigzag value (0, -1, 1, -2, ... are 0, 1, 2, 3, ...).
#[inline(always)]
pub(crate) fn zig32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

/// The signed 32-bit value of a zigzag value; `None` when it is wider than 32 bits.
#[inline(always)]
pub(crate) fn unzig32(v: u64) -> Option<i32> {
    let n = u32::try_from(v).ok()?;
    Some(((n >> 1) as i32) ^ -((n & 1) as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_padded_or_not_and_stays_in_bounds() {
        for v in [0, 1, 127, 128, 300, 1 << 49, 1 << 56, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let n = b.len();
            for padding in [0, 8] {
                b.resize(n + padding, 0x80);
                let (mut at, mut short) = (0, 0);
                assert_eq!((read(&b, &mut at, n), at), (Some(v), n));
                assert_eq!((read(&b, &mut short, n - 1), short), (None, 0));
            }
        }
        // Eleven bytes, or a tenth byte above 1: not a u64.
        let mut at = 0;
        assert_eq!(read(&[0xff; 11], &mut at, 11), None);
        let tenth = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(read(&tenth, &mut at, 10), None);
        for v in [0, 1, -1, i32::MIN, i32::MAX] {
            assert_eq!(unzig32(zig32(v)), Some(v));
        }
        assert_eq!(unzig32(1 << 32), None);
        assert_eq!(9u64.wrapping_add(unzig(zig(5, 9))), 5);
    }
}
