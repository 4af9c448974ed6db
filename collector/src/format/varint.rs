//! LEB128 unsigned varints for record framing.

/// Appends `v` as an unsigned LEB128 varint.
///
/// The tracer's collector writes several per event: one check of the room left for all the
/// bytes, rather than one per byte as `push` makes.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
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

/// Reads a varint from the front of `buf`: the value and the bytes it took, or `None` when the
/// buffer ends inside it or it is longer than ten bytes.
#[inline]
pub fn get(buf: &[u8]) -> Option<(u64, usize)> {
    // Record lengths and tags are nearly always one byte.
    if let Some(&b) = buf.first() {
        if b < 0x80 {
            return Some((u64::from(b), 1));
        }
    }
    let mut v = 0u64;

    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(get(&b), Some((v, b.len())));
            assert_eq!(get(&b[..b.len() - 1]), None);
        }
    }
}
