//! Reading the records of one decompressed chunk, in order: the one decode path of the format.
//!
//! A chunk decodes on its own (its events are written against zeros at its start, its shapes
//! numbered from 0), so chunks can be decoded on any thread. Damage inside a chunk whose
//! checksum held (which only a writer's bug makes) ends the chunk: where the damaged event's
//! values ended in the columns is not known, so nothing after it can be trusted.

use super::chunk::{self, Columns, DEFINE, PADDING, PLAIN};
use super::events::{self, Template};
use super::record::{Record, TAG_EVENT};
use super::shapes::Numbering;
use super::varint;
use crate::event::Event;

/// What a chunk's next item was.
#[derive(Debug)]
pub(crate) enum Item {
    /// An event: [`ChunkDecoder::event`].
    Event,
    /// Another record.
    Other(Record),
    /// A record of a kind, an event of an API or operation, this reader does not know (from a
    /// newer writer): skipped by its length.
    Unknown,
    /// The chunk is read.
    End,
    /// The rest of the chunk is damaged: why.
    Damaged(&'static str),
}

/// A decompressed chunk and where reading it has got to.
pub(crate) struct ChunkDecoder {
    /// The chunk's bytes, then [`PADDING`] zeros.
    raw: Vec<u8>,
    pos: usize,
    items_end: usize,
    cols: Columns,
    /// The last event read: what the next is read against (and what is lent out).
    event: Event,
    /// The chunk's last nonzero pointer.
    ptr: u64,
    /// The event records the chunk's shapes name, read once.
    shapes: Vec<Template>,
    numbering: Numbering,
    /// Event records met so far (read or not).
    events: u64,
    done: bool,
}

impl ChunkDecoder {
    /// Starts reading the decompressed chunk `raw`; the reason when its table does not describe
    /// it.
    pub(crate) fn load(&mut self, mut raw: Vec<u8>) -> Result<(), &'static str> {
        self.events = 0;
        let layout = chunk::parse(&raw).map_err(|_| "column table does not add up")?;
        raw.extend_from_slice(&[0; PADDING]);
        self.raw = raw;
        (self.pos, self.items_end) = (layout.items.start, layout.items.end);
        self.cols = Columns::new(&layout);
        events::reset(&mut self.event);
        self.ptr = 0;
        self.shapes.clear();
        self.numbering = Numbering::default();
        (self.events, self.done) = (0, false);
        Ok(())
    }

    /// The event the last [`Item::Event`] read.
    pub(crate) fn event(&self) -> &Event {
        &self.event
    }

    /// Events read so far in this chunk (or skipped as unknown).
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    /// Reads the next item.
    #[inline]
    pub(crate) fn next(&mut self) -> Item {
        if self.done || self.pos >= self.items_end {
            self.done = true;
            return Item::End;
        }
        let item = self.raw[self.pos];
        let k = if item < DEFINE {
            self.pos += 1;
            usize::from(item)
        } else {
            match self.record(self.pos + 1) {
                Ok(Ok(t)) if item == DEFINE => self.define(t),
                Ok(Ok(t)) => return self.read(&t),
                // Only event records are shapes.
                Ok(Err(_)) if item == DEFINE => return self.damaged("a shape that is no event"),
                Ok(Err(record)) => return record.map_or(Item::Unknown, Item::Other),
                Err(why) => return self.damaged(why),
            }
        };
        match self.shapes.get(k) {
            // Read in place: a template is copied out for nothing.
            Some(t) => {
                let read =
                    events::read(t, &self.raw, &mut self.cols, &mut self.ptr, &mut self.event);
                self.event_read(read)
            }
            None => self.damaged("an item names a shape its chunk has not defined"),
        }
    }

    /// Reads the event of template `t`.
    fn read(&mut self, t: &Template) -> Item {
        let read = events::read(t, &self.raw, &mut self.cols, &mut self.ptr, &mut self.event);
        self.event_read(read)
    }

    /// What reading an event gave.
    #[inline(always)]
    fn event_read(&mut self, read: Option<bool>) -> Item {
        self.events += u64::from(read.is_some());
        match read {
            Some(true) => Item::Event,
            Some(false) => Item::Unknown,
            None => self.damaged("an event's values do not read"),
        }
    }

    /// Reads the record at `at` (after a [`PLAIN`] or [`DEFINE`] item byte) and moves past it:
    /// an event's template, or another record (`None` for one of a kind this reader does not
    /// know, or a body without a readable tag).
    fn record(&mut self, at: usize) -> Result<Result<Template, Option<Record>>, &'static str> {
        let mut body = at;
        let len = varint::read(&self.raw, &mut body, self.items_end).ok_or("bad record length")?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| body.checked_add(len))
            .filter(|&end| end <= self.items_end)
            .ok_or("a record runs past its chunk")?;
        self.pos = end;
        let mut payload = body;
        let Some(tag) = varint::read(&self.raw, &mut payload, end) else {
            return Ok(Err(None));
        };
        if tag == TAG_EVENT {
            return events::template(&self.raw, payload, end)
                .map(Ok)
                .ok_or("an event record is damaged");
        }
        Ok(Err(Record::decode(tag, &self.raw[payload..end])))
    }

    /// Makes `t` the chunk's next shape; its number.
    fn define(&mut self, t: Template) -> usize {
        let k = usize::from(self.numbering.take());
        if k == self.shapes.len() {
            self.shapes.push(t);
        } else {
            self.shapes[k] = t;
        }
        k
    }

    #[cold]
    fn damaged(&mut self, why: &'static str) -> Item {
        self.done = true;
        Item::Damaged(why)
    }
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        ChunkDecoder {
            raw: Vec::new(),
            pos: 0,
            items_end: 0,
            cols: Columns::default(),
            // Zero bytes are every field's zero, in postcard as in this format.
            event: postcard::from_bytes(&[0; 32]).expect("an event of zeros"),
            ptr: 0,
            shapes: Vec::new(),
            numbering: Numbering::default(),
            events: 0,
            done: true,
        }
    }
}

// `PLAIN` is the item byte of every record that is neither a shape nor defines one; any byte
// from `DEFINE` up reads a record where it stands.
const _: () = assert!(PLAIN > DEFINE);
