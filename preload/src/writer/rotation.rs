//! Cutting the trace into segments on the writer thread (`files::segments` keeps the
//! settings and the files): the segment being written ends with its `SegmentEnd` record, the
//! next one is created with the live analysis's snapshot of the live state at its head, and the
//! oldest segments are deleted while the files would pass the budget. The hooks never wait for
//! any of it but as they wait for the writer: a segment is cut between two events.

use vramtrace_collector::event::SegmentPeak;
use vramtrace_collector::format::{Header, Record, SegmentEnd, SegmentInfo, Snapshot, StackDef};
use vramtrace_collector::live::{Holder, LiveState};

use super::sink;
use super::Writer;
use crate::capture::clock;
use crate::warn::warn;

impl Writer {
    /// Cuts the segment when it is full or old enough (never while the trace ends).
    pub(super) fn rotate_if_due(&mut self) {
        let bytes = self.sink.bytes();
        let due = self.segments.as_ref().is_some_and(|s| s.due(bytes));
        if due && self.end_seen.is_none() && self.sink.writer.is_some() {
            self.rotate();
        }
    }

    /// The state the live analysis keeps, when it has one.
    fn live_state(&self) -> Option<&LiveState> {
        self.monitor.as_ref().and_then(|l| l.state())
    }

    /// The current segment's last record.
    pub(super) fn segment_end(&self) -> Option<SegmentEnd> {
        let index = self.segments.as_ref()?.index();
        let (last_seq, time_ns) = self.last_event;
        let state = self.live_state();
        let peaks = state.map_or_else(Vec::new, |s| {
            (s.holders().into_iter())
                .filter_map(|h| match h.holder {
                    Holder::Device { device } if h.peak.bytes > 0 => Some(SegmentPeak {
                        device,
                        bytes: h.peak.bytes,
                        event: h.peak.event,
                        seq: h.peak.seq,
                        time_ns: h.peak.time_ns,
                    }),
                    _ => None,
                })
                .collect()
        });
        Some(SegmentEnd {
            index,
            events: self.sink.events - self.segment_first_event,
            last_seq,
            time_ns,
            steps: state.map_or(0, LiveState::marked_steps),
            peaks,
        })
    }

    /// The records the next segment begins with: the live analysis's snapshot and what it
    /// names, or, without one, the modules and a snapshot that says the live set is unknown.
    fn prelude(&self) -> Vec<Record> {
        if let Some(state) = self.live_state() {
            return state.snapshot_records(state.snapshot());
        }
        let (last_seq, time_ns) = self.last_event;
        let mut records: Vec<Record> = (self.modules.all().iter())
            .map(|m| Record::Module(m.clone()))
            .collect();
        records.push(Record::Snapshot(Box::new(Snapshot {
            complete: false,
            events: self.sink.events,
            last_seq,
            time_ns,
            ..Snapshot::default()
        })));
        records
    }

    /// Ends the current segment and goes on in the next.
    fn rotate(&mut self) {
        if let Some(end) = self.segment_end() {
            self.sink.write(&Record::SegmentEnd(end));
        }
        self.sink.flush();
        let Some(segments) = self.segments.as_ref() else {
            return;
        };
        let prelude = self.prelude();
        let (last_seq, last_ns) = self.last_event;
        let bytes = self.sink.bytes();
        // The segment begins where the events before it end: at the last one's time, not the
        // moment of the cut (the events of the ring still to write, older, go in the new one).
        let begins_ns = match last_ns {
            0 => clock::monotonic_ns(),
            t => t,
        };
        let header = Header {
            segment: Some(SegmentInfo {
                index: segments.index() + 1,
                events_before: self.sink.events,
                last_seq,
                time_ns: begins_ns,
                steps: self.live_state().map_or(0, LiveState::marked_steps),
                bytes_before: segments.bytes_before() + bytes,
            }),
            ..self.header.clone()
        };
        let (writer, path, id) = match sink::create(&header, &prelude, segments.next_names()) {
            Ok(made) => made,
            Err(why) => {
                if !self.session.config.quiet {
                    warn(&format!(
                        "the next segment of {} cannot be created ({why}); the trace goes on \
                         in that file, without a bound",
                        self.sink.path
                    ));
                }
                self.segments = None;
                return;
            }
        };
        self.sink.switch(writer, &path);
        self.segment_first_event = self.sink.events;
        self.stacks.next_segment();
        self.py_stacks.next_segment();
        self.codes.next_segment();
        for r in &prelude {
            match r {
                Record::Stack(StackDef { id, .. }) => self.stacks.defined(*id),
                Record::PyStack(s) => self.py_stacks.defined(s.id),
                Record::PyCode(c) => self.codes.defined(c.id),
                _ => {}
            }
        }
        let Some(segments) = self.segments.as_mut() else {
            return;
        };
        segments.started(&path, id, bytes);
        let removed = segments.keep_within_budget(self.sink.bytes());
        if !self.session.config.quiet {
            for why in &removed.left {
                warn(why);
            }
        }
    }
}
