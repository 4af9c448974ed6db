//! Events the tracer lost, and what they could explain.
//!
//! Every event the tracer loses (its buffer was full, or its call had not returned when the
//! process ended) still took a sequence number, so a lost event is a gap in the numbers of the
//! events read: the reader knows *where* each one was lost. Events are numbered in causal order
//! (an allocation after its call returned, a release before its call is made), so:
//!
//! - an object live at the end, or an orphan, may have been freed by a lost event only if a number
//!   after the one that made it is missing ([`LiveState::lost_after`]);
//! - an anomaly (a free of an unknown pointer, an address reused while live, a double free, ...)
//!   can be explained by a lost event only if a number is missing between the last event the
//!   tracer saw of that object (or the start) and the anomaly ([`Losses::between`]).
//!
//! The tracer's counters also say how many were lost in all; losses the gaps do not show lie
//! after the last event read (nothing later was written), and are treated as such.
//!
//! Analyses leave out (and count apart) what losses could explain: a lost event never becomes a
//! finding.

use super::LiveState;

/// The gaps in the sequence numbers read so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    /// Missing numbers as inclusive ranges, in order, never touching each other.
    gaps: Vec<(u64, u64)>,
    /// Numbers in all the gaps.
    missing: u64,
}

impl Losses {
    /// Numbers `first..=last` were not read (before a later one was).
    pub(crate) fn gap(&mut self, first: u64, last: u64) {
        debug_assert!(first <= last);
        match self.gaps.last_mut() {
            Some(g) if g.1 + 1 >= first => {
                let end = last.max(g.1);
                self.missing += end - g.1;
                g.1 = end;
            }
            _ => {
                self.gaps.push((first, last));
                self.missing += last - first + 1;
            }
        }
    }

    /// A number inside a gap turned up after all (an event written out of order).
    pub(crate) fn fill(&mut self, seq: u64) {
        let i = self.gaps.partition_point(|g| g.1 < seq);
        let Some(&(a, b)) = self.gaps.get(i) else {
            return;
        };
        if seq < a {
            return;
        }
        self.missing -= 1;
        match (seq == a, seq == b) {
            (true, true) => {
                self.gaps.remove(i);
            }
            (true, false) => self.gaps[i].0 = seq + 1,
            (false, true) => self.gaps[i].1 = seq - 1,
            (false, false) => {
                self.gaps[i].1 = seq - 1;
                self.gaps.insert(i + 1, (seq + 1, b));
            }
        }
    }

    /// The gaps, as inclusive ranges in order.
    pub(crate) fn gaps(&self) -> &[(u64, u64)] {
        &self.gaps
    }

    /// Numbers missing between events read.
    pub fn missing(&self) -> u64 {
        self.missing
    }

    /// Whether a number strictly between `after` and `before` is missing.
    pub fn between(&self, after: u64, before: u64) -> bool {
        if before <= after + 1 {
            return false;
        }
        // The first gap that ends after `after`.
        let i = self.gaps.partition_point(|g| g.1 <= after);
        self.gaps
            .get(i)
            .is_some_and(|&(a, _)| a.max(after + 1) < before)
    }

    /// Whether a number after `seq` is missing.
    pub fn after(&self, seq: u64) -> bool {
        self.gaps.last().is_some_and(|&(_, b)| b > seq)
    }
}

impl LiveState {
    /// Where the lost events were, as far as the events read show.
    pub fn losses(&self) -> &Losses {
        &self.losses
    }

    /// Events the tracer says it lost (dropped, or late: both left a gap) that no gap accounts
    /// for: lost after the last event read.
    pub fn lost_at_the_end(&self) -> u64 {
        let counted = self.notes.stats.as_ref().map_or(0, |s| s.dropped + s.late);
        counted.saturating_sub(self.losses.missing)
    }

    /// Events lost in all: the gaps, and what the counters say beyond them.
    pub fn lost_events(&self) -> u64 {
        self.losses.missing + self.lost_at_the_end()
    }

    /// Whether an event numbered after `seq` was lost: one that could have freed an object made
    /// at `seq`.
    pub fn lost_after(&self, seq: u64) -> bool {
        self.losses.after(seq) || self.lost_at_the_end() > 0
    }

    /// Notes an event whose number does not follow the last one's (the cold side of
    /// [`LiveState::apply_event`]).
    #[cold]
    pub(super) fn sequence_break(&mut self, seq: u64) {
        if seq > self.last_seq + 1 {
            self.losses.gap(self.last_seq + 1, seq - 1);
        } else {
            self.losses.fill(seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_merge_fill_and_answer() {
        let mut l = Losses::default();
        l.gap(5, 7);
        l.gap(8, 8);
        l.gap(20, 21);
        assert_eq!(l.gaps, [(5, 8), (20, 21)]);
        assert_eq!(l.missing(), 6);
        assert!(l.between(4, 6));
        assert!(!l.between(4, 5));
        assert!(!l.between(8, 20));
        assert!(l.between(8, 22));
        assert!(l.between(0, 100));
        assert!(l.after(20) && !l.after(21));
        l.fill(6);
        assert_eq!(l.gaps, [(5, 5), (7, 8), (20, 21)]);
        l.fill(5);
        l.fill(21);
        l.fill(3);
        assert_eq!(l.gaps, [(7, 8), (20, 20)]);
        assert_eq!(l.missing(), 3);
        assert!(!l.between(8, 20) && l.between(19, 21));
    }
}
