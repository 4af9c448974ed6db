//! The course of a run over time, gathered while a trace is read: live device bytes (lowest,
//! highest and last value in each stretch of events, so no peak is lost to downsampling), what
//! each call site held at the end of each stretch, when steps began, NVTX ranges and marks.
//!
//! This is what the pictures draw (the HTML report's chart, the Perfetto counters); the tables
//! keep the exact numbers of the analyses. Memory is bounded whatever the length of the trace:
//! at most `cap` stretches are kept; when full, neighbours merge and each stretch then covers
//! twice as many events (the grid of `live::series`, applied here to events), and ranges and
//! marks past their own caps are counted, not kept.

use std::collections::HashMap;

use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::live::{Holder, LiveState, SiteId};

use crate::load::Observer;

pub mod bands;

pub use bands::bands;

/// Call sites kept per device in each stretch; the rest add up into [`OTHER_SITES`].
const SITES_PER_STRETCH: usize = 64;
/// The site id that stands for every site past the largest [`SITES_PER_STRETCH`].
pub const OTHER_SITES: SiteId = SiteId::MAX;

/// One device's live bytes over a stretch of events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Level {
    pub device: i32,
    pub min: u64,
    pub max: u64,
    /// At the end of the stretch.
    pub last: u64,
}

/// A stretch of consecutive events.
#[derive(Clone, Debug, Default)]
pub struct Stretch {
    /// Time of its first and last event.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Per device seen so far.
    pub levels: Vec<Level>,
    /// What each call site held on each device at its end: `(device, site, bytes)`.
    pub sites: Vec<(i32, SiteId, u64)>,
}

impl Stretch {
    /// The stretch covering `self` then `next`.
    fn merge(mut self, next: Stretch) -> Stretch {
        for l in &next.levels {
            match self.levels.iter_mut().find(|m| m.device == l.device) {
                Some(m) => {
                    m.min = m.min.min(l.min);
                    m.max = m.max.max(l.max);
                    m.last = l.last;
                }
                None => self.levels.push(*l),
            }
        }
        Stretch {
            start_ns: self.start_ns,
            end_ns: next.end_ns,
            levels: self.levels,
            sites: next.sites,
        }
    }
}

/// An NVTX range that was pushed and popped (or still open at the end).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub thread: u32,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Ranges open around it on its thread.
    pub depth: u32,
}

/// An NVTX mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub thread: u32,
    pub name: String,
    pub time_ns: u64,
}

/// The course of a run; see the module doc.
#[derive(Debug)]
pub struct Timeline {
    cap: usize,
    max_ranges: usize,
    /// Events per stretch.
    stride: u64,
    events_in_open: u64,
    open: Option<Stretch>,
    pub stretches: Vec<Stretch>,
    devices: Vec<i32>,
    /// Time of the first and last event.
    pub first_ns: Option<u64>,
    pub last_ns: u64,
    /// Start time of each step begun in what was read, in order: step `first_step + 1` first
    /// ([`Timeline::step_start`] finds a step by its number).
    pub step_starts: Vec<u64>,
    /// Steps begun before the first event read: 0 for a trace read from its start; read from a
    /// segment's snapshot (rotation deleted the segments before it, `--last`, `--since`), the
    /// steps the snapshot counted, whose numbers the steps read go on from.
    pub first_step: u64,
    steps_seen: u64,
    prev_ns: u64,
    pub ranges: Vec<Range>,
    pub marks: Vec<Mark>,
    /// Ranges and marks past `max_ranges`, counted only.
    pub ranges_omitted: u64,
    open_ranges: HashMap<u32, Vec<(String, u64)>>,
}

impl Timeline {
    /// A timeline of at most `cap` stretches and `max_ranges` ranges and marks each.
    pub fn new(cap: usize, max_ranges: usize) -> Self {
        Timeline {
            cap: cap.max(2),
            max_ranges,
            stride: 1,
            events_in_open: 0,
            open: None,
            stretches: Vec::new(),
            devices: Vec::new(),
            first_ns: None,
            last_ns: 0,
            step_starts: Vec::new(),
            first_step: 0,
            steps_seen: 0,
            prev_ns: 0,
            ranges: Vec::new(),
            marks: Vec::new(),
            ranges_omitted: 0,
            open_ranges: HashMap::new(),
        }
    }

    /// When step `step` began (numbered as every output numbers steps: the first mark begins
    /// step 1); `None` for a step that began before the first event read, or never began.
    pub fn step_start(&self, step: u64) -> Option<u64> {
        let i = step.checked_sub(self.first_step + 1)?;
        self.step_starts.get(usize::try_from(i).ok()?).copied()
    }

    /// Events each stretch covers (the last may cover fewer).
    pub fn stride(&self) -> u64 {
        self.stride
    }

    /// Devices that held memory, in ordinal order.
    pub fn devices(&self) -> &[i32] {
        &self.devices
    }

    /// Nanoseconds from the first event to `t`.
    pub fn since_start(&self, t: u64) -> u64 {
        t.saturating_sub(self.first_ns.unwrap_or(t))
    }

    /// Takes the live bytes of every device as they are now into the open stretch.
    fn take_levels(&mut self, state: &LiveState) {
        let open = self.open.get_or_insert_with(|| Stretch {
            start_ns: self.prev_ns,
            end_ns: self.prev_ns,
            ..Stretch::default()
        });
        open.end_ns = self.prev_ns;
        for &device in &self.devices {
            let bytes = state.device_bytes(device);
            match open.levels.iter_mut().find(|l| l.device == device) {
                Some(l) => {
                    l.min = l.min.min(bytes);
                    l.max = l.max.max(bytes);
                    l.last = bytes;
                }
                None => open.levels.push(Level {
                    device,
                    min: bytes,
                    max: bytes,
                    last: bytes,
                }),
            }
        }
    }

    /// Closes the open stretch with what each site holds now.
    fn close(&mut self, state: &LiveState) {
        let Some(mut stretch) = self.open.take() else {
            return;
        };
        for &device in &self.devices {
            let holdings = state.site_holdings(Holder::Device { device });
            let mut other = 0;
            for (i, h) in holdings.iter().enumerate() {
                if i < SITES_PER_STRETCH {
                    stretch.sites.push((device, h.site, h.bytes));
                } else {
                    other += h.bytes;
                }
            }
            if other > 0 {
                stretch.sites.push((device, OTHER_SITES, other));
            }
        }
        self.stretches.push(stretch);
        self.events_in_open = 0;
        if self.stretches.len() == self.cap {
            let old = std::mem::take(&mut self.stretches);
            let mut pairs = old.into_iter();
            while let Some(a) = pairs.next() {
                self.stretches.push(match pairs.next() {
                    Some(b) => a.merge(b),
                    None => a,
                });
            }
            self.stride *= 2;
        }
    }

    fn note_range(&mut self, e: &Event) {
        match &e.op {
            Op::RangePush { name } => {
                self.open_ranges
                    .entry(e.thread)
                    .or_default()
                    .push((name.clone(), e.time_ns));
            }
            Op::RangePop => {
                let stack = self.open_ranges.entry(e.thread).or_default();
                if let Some((name, start_ns)) = stack.pop() {
                    let depth = stack.len() as u32;
                    self.keep_range(Range {
                        thread: e.thread,
                        name,
                        start_ns,
                        end_ns: e.time_ns,
                        depth,
                    });
                }
            }
            Op::Mark { name } => {
                if self.marks.len() < self.max_ranges {
                    self.marks.push(Mark {
                        thread: e.thread,
                        name: name.clone(),
                        time_ns: e.time_ns,
                    });
                } else {
                    self.ranges_omitted += 1;
                }
            }
            _ => {}
        }
    }

    fn keep_range(&mut self, r: Range) {
        if self.ranges.len() < self.max_ranges {
            self.ranges.push(r);
        } else {
            self.ranges_omitted += 1;
        }
    }
}

impl Observer for Timeline {
    fn event(&mut self, state: &LiveState, e: &Event) {
        if self.first_ns.is_none() {
            self.first_ns = Some(e.time_ns);
            // Read from a snapshot, the state has counted the steps before it.
            self.first_step = state.steps();
            self.steps_seen = state.steps();
            self.prev_ns = e.time_ns;
        }
        if state.events() > 0 {
            // The state is as the previous event left it.
            if state.steps() > self.steps_seen {
                self.steps_seen = state.steps();
                self.step_starts.push(self.prev_ns);
            }
            self.take_levels(state);
            self.events_in_open += 1;
            if self.events_in_open >= self.stride {
                self.close(state);
            }
        } else {
            self.prev_ns = e.time_ns;
        }
        let device = match e.op {
            Op::Create { device, .. } => device,
            _ => e.device,
        };
        if !self.devices.contains(&device) {
            self.devices.push(device);
        }
        if matches!(e.op, Op::RangePush { .. } | Op::RangePop | Op::Mark { .. }) {
            self.note_range(e);
        }
        // Events are in sequence order; their times can step back by a little across threads.
        self.prev_ns = self.prev_ns.max(e.time_ns);
        self.last_ns = self.prev_ns;
    }

    fn finish(&mut self, state: &LiveState) {
        if state.events() == 0 {
            return;
        }
        if state.steps() > self.steps_seen {
            self.steps_seen = state.steps();
            self.step_starts.push(self.prev_ns);
        }
        self.take_levels(state);
        self.close(state);
        // Devices named by events that never held memory (-1 for calls with no device current,
        // say) have nothing to draw.
        let held = |d: i32, stretches: &[Stretch]| {
            stretches
                .iter()
                .any(|s| s.levels.iter().any(|l| l.device == d && l.max > 0))
        };
        let devices = std::mem::take(&mut self.devices);
        self.devices = devices
            .into_iter()
            .filter(|&d| held(d, &self.stretches))
            .collect();
        self.devices.sort_unstable();
        for s in &mut self.stretches {
            s.levels.retain(|l| self.devices.contains(&l.device));
            s.levels.sort_by_key(|l| l.device);
        }
        let end = self.last_ns;
        let mut open: Vec<(u32, Vec<(String, u64)>)> = self.open_ranges.drain().collect();
        open.sort_by_key(|(thread, _)| *thread);
        for (thread, stack) in open {
            for (depth, (name, start_ns)) in stack.into_iter().enumerate() {
                self.keep_range(Range {
                    thread,
                    name,
                    start_ns,
                    end_ns: end,
                    depth: depth as u32,
                });
            }
        }
    }
}

/// Reads the trace at `path` for analysis (as [`crate::load::load_with_steps`]) and gathers its
/// timeline of at most `cap` stretches on the way.
pub fn load_with_timeline(
    path: &std::path::Path,
    from: crate::load::ReadFrom,
    growth: vramtrace_collector::analysis::GrowthConfig,
    cap: usize,
    max_ranges: usize,
) -> anyhow::Result<(crate::load::LoadedTrace, Timeline)> {
    let progress = crate::load::Progress::new(path, "reading");
    crate::load::load_with_steps_observing(path, from, growth, &progress, |_| {
        Timeline::new(cap, max_ranges)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stretch(start_ns: u64, end_ns: u64, levels: &[(i32, u64, u64, u64)]) -> Stretch {
        Stretch {
            start_ns,
            end_ns,
            levels: levels
                .iter()
                .map(|&(device, min, max, last)| Level {
                    device,
                    min,
                    max,
                    last,
                })
                .collect(),
            sites: vec![(0, 7, end_ns)],
        }
    }

    #[test]
    fn merged_stretches_keep_the_lowest_highest_and_last_values() {
        let a = stretch(0, 10, &[(0, 5, 90, 20)]);
        let b = stretch(11, 20, &[(0, 1, 40, 30), (1, 3, 3, 3)]);
        let m = a.merge(b);
        assert_eq!((m.start_ns, m.end_ns), (0, 20));
        assert_eq!(
            m.levels,
            [
                Level {
                    device: 0,
                    min: 1,
                    max: 90,
                    last: 30
                },
                Level {
                    device: 1,
                    min: 3,
                    max: 3,
                    last: 3
                }
            ]
        );
        // What sites held is taken at the end of the later stretch.
        assert_eq!(m.sites, [(0, 7, 20)]);
    }
}
