//! A fast, non-cryptographic hasher for the maps on the replay path.
//!
//! Keys there are pointers, handles and small ids chosen by the traced program and its drivers,
//! not by an attacker, and a trace is replayed by the person who recorded it; SipHash's
//! protection against chosen keys buys nothing here and costs a third of the apply time. This is
//! the multiply-rotate scheme of rustc's `FxHasher`, with a final avalanche so that
//! page-aligned pointers (low bits all zero) still spread over the table.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A `HashSet` with [`FxHasher`].
pub type FxHashSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// Multiply-rotate hasher for integer keys.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.add(i as u32 as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // hashbrown takes the top bits for its control bytes and the low bits for the bucket:
        // fold the high half down so both depend on every input bit.
        self.hash ^ (self.hash >> 29)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_aligned_pointers_spread() {
        let mut buckets = [0u32; 64];
        for i in 0..64_000u64 {
            let mut h = FxHasher::default();
            h.write_u64(0x7f00_0000_0000 + i * 0x20_0000);
            buckets[(h.finish() & 63) as usize] += 1;
        }
        assert!(buckets.iter().all(|&n| n > 500), "{buckets:?}");
    }
}
