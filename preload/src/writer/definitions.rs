//! Which interned stacks and Python code objects the trace has numbered, and which of them the
//! segment being written has defined: a segment reads alone, so a stack an event names is
//! defined (again, with the same id) in every segment that names it.

use std::collections::HashSet;

/// What defining a table's entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Defined {
    /// First seen: a new trace id.
    New(u32),
    /// Numbered in an earlier segment: defined again under its id.
    Again(u32),
}

impl Defined {
    pub(super) fn id(self) -> u32 {
        match self {
            Defined::New(id) | Defined::Again(id) => id,
        }
    }
}

/// The trace's ids of a table's stacks, by table id, and whether the current segment has
/// defined each. The trace numbers stacks densely in the order events first name them.
#[derive(Default)]
pub(super) struct TraceIds {
    /// Per table id: its trace id (0: none yet) and the segment that last defined it.
    ids: Vec<(u32, u32)>,
    /// Per trace id, from 1: its table id.
    tables: Vec<u32>,
    segment: u32,
}

impl TraceIds {
    /// The trace id of table id `id`, if the current segment defined it.
    #[inline]
    pub(super) fn get(&self, id: u32) -> Option<u32> {
        let &(trace, segment) = self.ids.get(id as usize)?;
        (trace != 0 && segment == self.segment).then_some(trace)
    }

    /// Defines table id `id` in the current segment: under the next trace id on its first
    /// sight, else under its own.
    pub(super) fn define(&mut self, id: u32) -> Defined {
        let i = id as usize;
        if self.ids.len() <= i {
            self.ids.resize(i + 1, (0, 0));
        }
        let entry = &mut self.ids[i];
        entry.1 = self.segment;
        if entry.0 != 0 {
            return Defined::Again(entry.0);
        }
        self.tables.push(id);
        entry.0 = self.tables.len() as u32;
        Defined::New(entry.0)
    }

    /// A new segment begins: it has defined nothing yet.
    pub(super) fn next_segment(&mut self) {
        self.segment += 1;
    }

    /// Trace id `trace` was defined in the current segment (by its snapshot's records).
    pub(super) fn defined(&mut self, trace: u32) {
        let Some(&table) = self.tables.get((trace as usize).wrapping_sub(1)) else {
            return;
        };
        if let Some(entry) = self.ids.get_mut(table as usize) {
            entry.1 = self.segment;
        }
    }
}

/// The Python code objects the current segment has named, and those the trace has.
#[derive(Default)]
pub(super) struct Codes {
    in_trace: HashSet<u32>,
    in_segment: HashSet<u32>,
}

impl Codes {
    /// Notes code `id` as written in this segment; what it was before.
    pub(super) fn define(&mut self, id: u32) -> Option<Defined> {
        if !self.in_segment.insert(id) {
            return None;
        }
        Some(if self.in_trace.insert(id) {
            Defined::New(id)
        } else {
            Defined::Again(id)
        })
    }

    /// A new segment begins.
    pub(super) fn next_segment(&mut self) {
        self.in_segment.clear();
    }

    /// Code `id` was defined in the current segment (by its snapshot's records).
    pub(super) fn defined(&mut self, id: u32) {
        self.in_segment.insert(id);
        self.in_trace.insert(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_keep_their_ids_and_are_defined_again_per_segment() {
        let mut t = TraceIds::default();
        assert_eq!(t.get(5), None);
        assert_eq!(t.define(5), Defined::New(1));
        assert_eq!(t.define(9), Defined::New(2));
        assert_eq!((t.get(5), t.get(9)), (Some(1), Some(2)));
        t.next_segment();
        assert_eq!((t.get(5), t.get(9)), (None, None));
        // The snapshot defined trace id 2 (table id 9); table id 5 is defined again when named.
        t.defined(2);
        assert_eq!(t.get(9), Some(2));
        assert_eq!(t.define(5), Defined::Again(1));
        assert_eq!(t.define(7), Defined::New(3));
        let mut c = Codes::default();
        assert_eq!(c.define(4), Some(Defined::New(4)));
        assert_eq!(c.define(4), None);
        c.next_segment();
        assert_eq!(c.define(4), Some(Defined::Again(4)));
    }
}
