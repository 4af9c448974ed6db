//! Record shapes: a chunk's event records that repeat byte for byte are written once and then
//! named by one byte (the item bytes are in `chunk.rs`). This is the writer's side: which shape,
//! if any, a record is.
//!
//! Shapes are numbered in the order they are defined, from 0; the 255th definition of a chunk
//! takes number 0 again, the next 1, and so on (round robin), so a chunk with more kinds of
//! record than numbers keeps naming its recent ones. Each chunk starts with no shapes. The reader
//! numbers its definitions the same way ([`Numbering`]).
use rustc_hash::FxHashMap;

use super::chunk::MAX_SHAPES;

/// The longest record (length, tag and payload) the writer makes a shape of: the common events
/// of a training loop are 6 to 12 bytes, and a longer record names values that seldom repeat.
pub(crate) const MAX_SHAPE_BYTES: usize = 32;

/// A record of up to [`MAX_SHAPE_BYTES`], zero-padded, as words.
type Key = [u64; MAX_SHAPE_BYTES / 8];

/// The round-robin numbering both sides keep: the number the next definition takes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Numbering {
    next: u8,
}

impl Numbering {
    /// The number of the next definition, moving on.
    pub(crate) fn take(&mut self) -> u8 {
        let k = self.next;
        self.next = if usize::from(k) + 1 == MAX_SHAPES {
            0
        } else {
            k + 1
        };
        k
    }
}

/// What the writer does with an event record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item {
    /// It is shape `k`'s record: write `k` alone.
    Again(u8),
    /// It becomes the next shape: write `DEFINE` and the record.
    Define,
    /// Not a shape (too long): write `PLAIN` and the record.
    Plain,
}

/// The writer's side: which shape, if any, a record's bytes are.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShapeIndex {
    /// The record bytes of each shape number defined (zero-padded).
    keys: Vec<Key>,
    /// From a record's bytes to its shape number; kept to the numbers' current records (a number
    /// defined again drops its old record).
    numbers: FxHashMap<Key, u8>,
    numbering: Numbering,
}

impl ShapeIndex {
    /// Forgets every shape: a new chunk begins.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.numbers.clear();
        self.numbering = Numbering::default();
    }

    /// What to write for the event record at the end of `records` from `at` (its length, tag
    /// and payload), defining a shape when it is new.
    #[inline]
    pub(crate) fn item(&mut self, records: &mut Vec<u8>, at: usize) -> Item {
        let Some(key) = key_at(records, at) else {
            return Item::Plain;
        };
        if let Some(&k) = self.numbers.get(&key) {
            return Item::Again(k);
        }
        let k = self.numbering.take();
        if let Some(old) = self.keys.get_mut(usize::from(k)) {
            self.numbers.remove(old);
            *old = key;
        } else {
            self.keys.push(key);
        }
        self.numbers.insert(key, k);
        Item::Define
    }
}

/// The record at the end of `records` from `at`, if of up to [`MAX_SHAPE_BYTES`], as a key.
/// Read as whole words past zeros appended for the purpose (and taken off again): copying a
/// record of any length out cost a call to `memcpy` per event.
#[inline]
fn key_at(records: &mut Vec<u8>, at: usize) -> Option<Key> {
    let len = records.len().checked_sub(at)?;
    if len == 0 || len > MAX_SHAPE_BYTES {
        return None;
    }
    let end = records.len();
    records.extend_from_slice(&[0; MAX_SHAPE_BYTES]);
    let bytes = &records[at..at + MAX_SHAPE_BYTES];
    let key = std::array::from_fn(|i| {
        u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("eight bytes"))
    });
    records.truncate(end);
    Some(key)
}
