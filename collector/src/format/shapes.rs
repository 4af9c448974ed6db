//! Version 4's record shapes: a chunk's event records that repeat byte for byte, written once
//! and then named by one byte.
//!
//! ```text
//! records := item*
//! item    := 0xff record       a record, read as it stands
//!          | 0xfe record       a record that is also the chunk's next shape
//!          | k (0x00..=0xfd)   the record of shape k again
//! ```
//!
//! Version 3 moved every value that varies from one event to the next into the columns, so a
//! training loop's event records repeat whole: a few kinds of record, in an order as random as
//! the mix of allocations and frees. zstd decodes such a run as many short matches, about 3.2 ns
//! per event for the records alone in the replay benchmark's trace; the same run as one byte per
//! event takes it 0.8–1.2 ns. And a reader that has checked a shape once need not read its record
//! again: it keeps what the record says ([`HotShape`]) and goes straight to the columns.
//!
//! Shapes are numbered in the order they are defined, from 0; the 255th definition of a chunk
//! takes number 0 again, the next 1, and so on (round robin), so a chunk with more kinds of
//! record than numbers keeps naming its recent ones. Each chunk starts with no shapes.

use crate::event::Api;

/// The item byte of a record that is not a shape.
pub(crate) const PLAIN: u8 = 0xff;
/// The item byte of a record that becomes the chunk's next shape.
pub(crate) const DEFINE: u8 = 0xfe;
/// Shape numbers per chunk: `0..MAX_SHAPES`, below the two item bytes above.
pub(crate) const MAX_SHAPES: usize = 0xfe;
/// The longest record (length, tag and payload) the writer makes a shape of: the common events
/// of a training loop are 6 to 12 bytes, and a longer record names values that seldom repeat.
pub(crate) const MAX_SHAPE_BYTES: usize = 16;

/// The round-robin numbering both sides keep: the number the next definition takes.
#[derive(Clone, Copy, Debug, Default)]
struct Numbering {
    next: u8,
}

impl Numbering {
    /// The number of the next definition, moving on.
    fn take(&mut self) -> u8 {
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
    /// It becomes the next shape: write [`DEFINE`] and the record.
    Define,
    /// Not a shape (too long): write [`PLAIN`] and the record.
    Plain,
}

/// Slots of the writer's index: four times the shape numbers, so probes stay short.
const INDEX_SLOTS: usize = 1024;

/// The writer's side: which shape, if any, a record's bytes are.
#[derive(Clone, Debug)]
pub(crate) struct ShapeIndex {
    /// The record bytes of each shape number (zero-padded; 0 when unused: a record's first byte,
    /// its length, is never 0).
    keys: [u128; MAX_SHAPES],
    /// Open addressing from a record's bytes to `number + 1` (0: empty), compared through
    /// `keys`: an entry whose number another record has taken since is passed over (and names
    /// that record rightly if it is the one looked for). The index is cleared after
    /// [`INDEX_SLOTS`]` / 2` definitions, so probes always find an empty slot.
    slots: [u8; INDEX_SLOTS],
    /// Definitions since the index was cleared.
    filled: usize,
    numbering: Numbering,
}

impl Default for ShapeIndex {
    fn default() -> Self {
        ShapeIndex {
            keys: [0; MAX_SHAPES],
            slots: [0; INDEX_SLOTS],
            filled: 0,
            numbering: Numbering::default(),
        }
    }
}

impl ShapeIndex {
    /// Forgets every shape: a new chunk begins.
    pub(crate) fn clear(&mut self) {
        if self.filled > 0 || self.numbering.next > 0 {
            self.keys.fill(0);
            self.slots.fill(0);
            self.filled = 0;
            self.numbering = Numbering::default();
        }
    }

    /// What to write for the event record at the end of `records` from `at` (its length, tag
    /// and payload), defining a shape when it is new.
    #[inline]
    pub(crate) fn item(&mut self, records: &mut Vec<u8>, at: usize) -> Item {
        match key_at(records, at) {
            Some(key) => self.item_of(key),
            None => Item::Plain,
        }
    }

    fn item_of(&mut self, key: u128) -> Item {
        let mut i = slot_of(key);
        loop {
            let n = self.slots[i];
            if n == 0 {
                break;
            }
            if self.keys[usize::from(n - 1)] == key {
                return Item::Again(n - 1);
            }
            i = (i + 1) % INDEX_SLOTS;
        }
        if self.filled == INDEX_SLOTS / 2 {
            self.slots.fill(0);
            self.filled = 0;
            i = slot_of(key);
        }
        let number = self.numbering.take();
        self.keys[usize::from(number)] = key;
        self.slots[i] = number + 1;
        self.filled += 1;
        Item::Define
    }
}

/// The record at the end of `records` from `at`, if of up to [`MAX_SHAPE_BYTES`], as one number.
/// Read as a whole word past zeros appended for the purpose (and taken off again): copying a
/// record of any length out cost a call to `memcpy` per event.
#[inline]
fn key_at(records: &mut Vec<u8>, at: usize) -> Option<u128> {
    let len = records.len().checked_sub(at)?;
    if len == 0 || len > MAX_SHAPE_BYTES || records[at] == 0 {
        return None;
    }
    let end = records.len();
    records.extend_from_slice(&[0; MAX_SHAPE_BYTES]);
    let word: [u8; MAX_SHAPE_BYTES] = records[at..at + MAX_SHAPE_BYTES].try_into().ok()?;
    records.truncate(end);
    Some(u128::from_le_bytes(word))
}

/// Where a key's probe starts.
fn slot_of(key: u128) -> usize {
    let folded = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % INDEX_SLOTS
}

/// What a reader keeps of a common event's record once checked: everything in it, for a record
/// without the seldom-changing fields (those depend on the state it is read against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HotShape {
    pub(crate) flags: u8,
    pub(crate) api: Api,
    /// The inner and outer API of a nested call.
    pub(crate) nest: (Option<Api>, Option<Api>),
    /// The operation's variant index and field mask.
    pub(crate) index: u8,
    pub(crate) mask: u8,
}

/// A shape as the reader keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Where its record (length first) lies in the chunk.
    pub(crate) at: usize,
    /// What the record says, when it is a common event's that the one-pass reader takes whole.
    pub(crate) hot: Option<HotShape>,
}

/// The reader's side: the shapes a chunk has defined so far.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shapes {
    shapes: Vec<Shape>,
    numbering: Numbering,
}

impl Shapes {
    /// Forgets every shape: a new chunk begins.
    pub(crate) fn clear(&mut self) {
        self.shapes.clear();
        self.numbering = Numbering::default();
    }

    /// Shape `k`, if the chunk defined it.
    #[inline(always)]
    pub(crate) fn get(&self, k: u8) -> Option<&Shape> {
        self.shapes.get(usize::from(k))
    }

    /// Defines the chunk's next shape.
    pub(crate) fn define(&mut self, shape: Shape) {
        let k = usize::from(self.numbering.take());
        if k == self.shapes.len() {
            self.shapes.push(shape);
        } else {
            self.shapes[k] = shape;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ShapeIndex {
        /// [`ShapeIndex::item`] for `record` at the end of other records.
        fn item_for(&mut self, record: &[u8]) -> Item {
            let mut records = vec![0xff, 3, 1, 0, 0];
            let at = records.len();
            records.extend_from_slice(record);
            let item = self.item(&mut records, at);
            assert_eq!(&records[at..], record, "the records are left as they were");
            item
        }
    }

    #[test]
    fn a_record_is_defined_once_then_named() {
        let mut w = ShapeIndex::default();
        let a = [6, 1, 0, 3, 0, 6];
        let b = [6, 1, 0, 4, 1, 1];
        assert_eq!(w.item_for(&a), Item::Define);
        assert_eq!(w.item_for(&b), Item::Define);
        assert_eq!(w.item_for(&a), Item::Again(0));
        assert_eq!(w.item_for(&b), Item::Again(1));
        // Longer than a shape, or empty: plain.
        assert_eq!(w.item_for(&[17; 17]), Item::Plain);
        assert_eq!(w.item_for(&[]), Item::Plain);
        // A record and its prefix are different shapes.
        assert_eq!(w.item_for(&a[..5]), Item::Define);
        assert_eq!(w.item_for(&a[..5]), Item::Again(2));
        w.clear();
        assert_eq!(w.item_for(&b), Item::Define);
        assert_eq!(w.item_for(&b), Item::Again(0));
    }

    #[test]
    fn reader_and_writer_agree_when_a_chunk_has_more_records_than_numbers() {
        // 400 kinds of record (more than there are numbers), in a fixed pseudo-random order long
        // enough to go round the numbers many times and past the index's clearing.
        let record = |i: u64| [8, 1, (i & 0xff) as u8, (i >> 8) as u8, 0, 0, 0, 0, 1];
        let (mut w, mut r) = (ShapeIndex::default(), Shapes::default());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let (mut again, mut defined) = (0, 0);
        let mut seen = Vec::new();
        for at in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            // Mostly 40 common records, sometimes any of the 400.
            let i = if state >> 61 == 0 {
                (state >> 32) % 400
            } else {
                (state >> 32) % 40
            };
            match w.item_for(&record(i)) {
                Item::Define => {
                    r.define(Shape { at, hot: None });
                    defined += 1;
                }
                Item::Again(k) => {
                    let shape = r.get(k).expect("a shape the reader knows");
                    // The shape's record is this one: the writer defined it at `shape.at`.
                    assert_eq!(seen[shape.at], i, "item {at}");
                    again += 1;
                }
                Item::Plain => panic!("a short record is a shape"),
            }
            seen.push(i);
        }
        assert!(
            defined > INDEX_SLOTS / 2 + MAX_SHAPES,
            "{defined} definitions"
        );
        assert!(again > 15_000, "{again} named");
        assert_eq!(r.get(MAX_SHAPES as u8), None);
    }
}
