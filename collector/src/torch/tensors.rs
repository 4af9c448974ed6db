//! Every tensor's life rebuilt from a recorder snapshot, and what it says per Python line.
//!
//! The snapshot holds two things: the blocks held by tensors at the moment it was taken (all of
//! them, with their allocation stacks, however long ago they were made), and a ring of the last
//! allocator actions. Walking the ring backwards from the blocks held at the end gives every
//! tensor's life inside the ring's window exactly: an `alloc` starts a life, the program's free
//! (`free_requested`: the tensor let go of its block) ends one. Tensors live at the end whose
//! allocation left the ring, and tensors freed inside the window whose allocation left it, are
//! known to have been live since before the window; tensors that lived and died before the window
//! are not known at all, so a sample before [`TensorHistory::window_start_ns`] undercounts.
//!
//! Bytes are what the program requested (torch's `requested_size`; the allocator rounds blocks up
//! to 512 bytes and carves them from segments the driver view sees).

use std::collections::HashMap;

use super::snapshot::{Action, AllocatorSnapshot, BlockState};

/// One tensor's block, from allocation to free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub device: i32,
    pub addr: u64,
    /// Bytes requested.
    pub size: u64,
    /// The allocation's stack ([`AllocatorSnapshot::stack`]); 0 when unknown (allocated before
    /// the window, freed inside it).
    pub stack: u32,
    /// The allocation had no stack of its own (it ran on a thread without Python frames, like
    /// the autograd engine's in the backward pass): `stack` is the last one recorded before it
    /// on its device, as the trace's own Python stacks infer them.
    pub inferred: bool,
    /// µs since the Unix epoch; `None`: before the ring's window.
    pub allocated_us: Option<i64>,
    /// µs since the Unix epoch; `None`: live when the snapshot was taken.
    pub freed_us: Option<i64>,
}

/// Tensor bytes attributed to one Python line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineBytes {
    /// The line's frame, an index into [`AllocatorSnapshot::frames`]; `None` for tensors without
    /// a stack.
    pub frame: Option<u32>,
    pub bytes: u64,
    pub count: u64,
    /// Of `bytes`, those whose line was inferred ([`Tensor::inferred`]).
    pub inferred_bytes: u64,
}

/// One line's live tensor bytes at each sample of a [`Series`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineSeries {
    pub frame: Option<u32>,
    pub bytes: Vec<u64>,
}

/// Live tensor bytes at chosen moments, in all and per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// The moments on the trace's clock (`CLOCK_MONOTONIC` ns); empty when the snapshot has no
    /// clock anchor.
    pub at_ns: Vec<u64>,
    /// The same moments on torch's clock (µs since the Unix epoch).
    pub at_us: Vec<i64>,
    pub total: Vec<u64>,
    /// Every line live at some sample, largest peak first.
    pub lines: Vec<LineSeries>,
    /// Samples before this index fall before the ring's window: they miss the tensors that lived
    /// and died before it.
    pub complete_from: usize,
}

/// How the tensors still live at the end accumulated, step by step, for one line.
#[derive(Clone, Debug, PartialEq)]
pub struct LineGrowth {
    pub frame: Option<u32>,
    /// Bytes live at the end in all.
    pub live_bytes: u64,
    /// Of those, bytes allocated before the first step boundary (or before the window).
    pub before: u64,
    /// Of those, bytes allocated in each step: step `i` runs from boundary `i` to boundary
    /// `i + 1`, the last from the last boundary to the end of the trace.
    pub per_step: Vec<u64>,
    /// The mean of `per_step` over the measured steps.
    pub bytes_per_step: f64,
    /// Steps measured: those closed by a later boundary that start inside the window.
    pub steps_measured: usize,
}

/// The tensors of one snapshot.
#[derive(Debug)]
pub struct TensorHistory<'a> {
    snapshot: &'a AllocatorSnapshot,
    tensors: Vec<Tensor>,
    window_start_us: Option<i64>,
    unmatched: u64,
    lines: HashMap<u32, Option<u32>>,
}

impl<'a> TensorHistory<'a> {
    /// Rebuilds the tensors of `snapshot`.
    pub fn new(snapshot: &'a AllocatorSnapshot) -> TensorHistory<'a> {
        // The program's free: `free_requested`, or `free_completed` in a ring without it.
        let free = if snapshot
            .traces
            .iter()
            .any(|e| e.action == Action::FreeRequested)
        {
            Action::FreeRequested
        } else {
            Action::FreeCompleted
        };
        struct Open {
            size: u64,
            stack: u32,
            freed_us: Option<i64>,
        }
        // The last stack recorded before each action on its device, for allocations without one.
        let mut last: HashMap<i32, u32> = HashMap::new();
        let before: Vec<u32> = snapshot
            .traces
            .iter()
            .map(|e| {
                let seen = last.get(&e.device).copied().unwrap_or(0);
                if e.stack != 0 {
                    last.insert(e.device, e.stack);
                }
                seen
            })
            .collect();
        let mut open: HashMap<(i32, u64), Open> = HashMap::new();
        for s in &snapshot.segments {
            for b in s
                .blocks
                .iter()
                .filter(|b| b.state == BlockState::ActiveAllocated)
            {
                let size = if b.requested_size > 0 {
                    b.requested_size
                } else {
                    b.size
                };
                open.insert(
                    (s.device, b.address),
                    Open {
                        size,
                        stack: b.stack,
                        freed_us: None,
                    },
                );
            }
        }
        let mut tensors = Vec::new();
        let mut unmatched = 0;
        for (i, e) in snapshot.traces.iter().enumerate().rev() {
            let key = (e.device, e.addr);
            if e.action == Action::Alloc {
                match open.remove(&key) {
                    Some(o) => {
                        let own = if e.stack != 0 { e.stack } else { o.stack };
                        tensors.push(Tensor {
                            device: e.device,
                            addr: e.addr,
                            size: if e.size > 0 { e.size } else { o.size },
                            stack: if own != 0 { own } else { before[i] },
                            inferred: own == 0 && before[i] != 0,
                            allocated_us: Some(e.time_us),
                            freed_us: o.freed_us,
                        })
                    }
                    // Neither freed later nor live at the end: the ring lost its free.
                    None => unmatched += 1,
                }
            } else if e.action == free {
                let freed = Open {
                    size: e.size,
                    stack: 0,
                    freed_us: Some(e.time_us),
                };
                if open.insert(key, freed).is_some() {
                    unmatched += 1;
                }
            }
        }
        tensors.extend(open.into_iter().map(|((device, addr), o)| Tensor {
            device,
            addr,
            size: o.size,
            stack: o.stack,
            inferred: false,
            allocated_us: None,
            freed_us: o.freed_us,
        }));
        tensors.sort_by_key(|t| (t.allocated_us, t.device, t.addr));
        let window_start_us = snapshot
            .ring_full()
            .then(|| {
                let mut first: HashMap<i32, i64> = HashMap::new();
                for e in &snapshot.traces {
                    first.entry(e.device).or_insert(e.time_us);
                }
                first.into_values().max()
            })
            .flatten();
        TensorHistory {
            snapshot,
            tensors,
            window_start_us,
            unmatched,
            lines: HashMap::new(),
        }
    }

    /// The snapshot the tensors come from.
    pub fn snapshot(&self) -> &'a AllocatorSnapshot {
        self.snapshot
    }

    /// Every tensor, in allocation order (those from before the window first).
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// Actions the walk could not match (an allocation whose free the ring lost, a free of a
    /// block already free): 0 in a consistent snapshot.
    pub fn unmatched(&self) -> u64 {
        self.unmatched
    }

    /// Where the ring's window starts on the trace's clock, when the ring was full (older
    /// actions were lost); `None` when it holds every action since the recorder started.
    pub fn window_start_ns(&self) -> Option<u64> {
        let clock = self.snapshot.clock?;
        self.window_start_us.map(|us| clock.trace_ns(us))
    }

    /// The line a tensor is attributed to ([`AllocatorSnapshot::program_frame`]).
    pub fn line(&mut self, stack: u32) -> Option<u32> {
        let snapshot = self.snapshot;
        *self
            .lines
            .entry(stack)
            .or_insert_with(|| snapshot.program_frame(stack))
    }

    /// Tensors live at the end, per line, largest first.
    pub fn live_at_end(&mut self) -> Vec<LineBytes> {
        let live: Vec<Tensor> = self
            .tensors
            .iter()
            .filter(|t| t.freed_us.is_none())
            .copied()
            .collect();
        self.group(live)
    }

    /// Tensors live at `at_ns` (trace clock), per line, largest first. Before the window start
    /// the answer misses tensors that lived and died before it.
    #[cfg(test)]
    pub(crate) fn live_at(&mut self, at_ns: u64) -> Vec<LineBytes> {
        let Some(clock) = self.snapshot.clock else {
            return Vec::new();
        };
        let t = clock.time_us(at_ns);
        let live: Vec<Tensor> = self
            .tensors
            .iter()
            .filter(|x| x.allocated_us.is_none_or(|a| a <= t) && x.freed_us.is_none_or(|f| f > t))
            .copied()
            .collect();
        self.group(live)
    }

    fn group(&mut self, tensors: Vec<Tensor>) -> Vec<LineBytes> {
        let mut by_line: HashMap<Option<u32>, LineBytes> = HashMap::new();
        for t in tensors {
            let frame = self.line(t.stack);
            let e = by_line.entry(frame).or_insert(LineBytes {
                frame,
                bytes: 0,
                count: 0,
                inferred_bytes: 0,
            });
            e.bytes += t.size;
            e.count += 1;
            if t.inferred {
                e.inferred_bytes += t.size;
            }
        }
        let mut out: Vec<LineBytes> = by_line.into_values().collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.frame.cmp(&b.frame)));
        out
    }

    /// Live tensor bytes at each of `at_ns` (trace clock, ascending), in all and per line.
    /// Empty without a clock anchor.
    pub fn series(&mut self, at_ns: &[u64]) -> Series {
        let at_us = match self.snapshot.clock {
            Some(clock) => at_ns.iter().map(|&t| clock.time_us(t)).collect(),
            None => Vec::new(),
        };
        self.series_us(at_us)
    }

    /// Live tensor bytes right after each step mark the bootstrap made
    /// ([`AllocatorSnapshot::step_marks`]: on torch's own clock, exact), in all and per line.
    pub fn series_at_marks(&mut self) -> Series {
        let at_us = self.snapshot.step_marks.iter().map(|m| m.time_us).collect();
        self.series_us(at_us)
    }

    fn series_us(&mut self, at_us: Vec<i64>) -> Series {
        let at_ns = match self.snapshot.clock {
            Some(clock) => at_us.iter().map(|&t| clock.trace_ns(t)).collect(),
            None => Vec::new(),
        };
        let mut lines: Vec<LineSeries> = Vec::new();
        let mut total = vec![0u64; at_us.len()];
        // Changes of live bytes in time order: (µs, line slot, +bytes or -bytes).
        let mut slot_of: HashMap<Option<u32>, usize> = HashMap::new();
        let mut changes: Vec<(i64, usize, i128)> = Vec::with_capacity(self.tensors.len() * 2);
        for i in 0..self.tensors.len() {
            let t = self.tensors[i];
            let line = self.line(t.stack);
            let next = slot_of.len();
            let slot = *slot_of.entry(line).or_insert(next);
            if slot == lines.len() {
                lines.push(LineSeries {
                    frame: line,
                    bytes: vec![0; at_us.len()],
                });
            }
            changes.push((t.allocated_us.unwrap_or(i64::MIN), slot, i128::from(t.size)));
            if let Some(f) = t.freed_us {
                changes.push((f, slot, -i128::from(t.size)));
            }
        }
        changes.sort_by_key(|c| c.0);
        let mut order: Vec<usize> = (0..at_us.len()).collect();
        order.sort_by_key(|&i| at_us[i]);
        let mut live = vec![0i128; lines.len()];
        let mut sum: i128 = 0;
        let mut next = 0;
        for i in order {
            let t = at_us[i];
            while next < changes.len() && changes[next].0 <= t {
                let (_, slot, delta) = changes[next];
                live[slot] += delta;
                sum += delta;
                next += 1;
            }
            total[i] = sum.max(0) as u64;
            for (slot, line) in lines.iter_mut().enumerate() {
                line.bytes[i] = live[slot].max(0) as u64;
            }
        }
        lines.retain(|l| l.bytes.iter().any(|&b| b > 0));
        lines.sort_by(|a, b| {
            let peak = |l: &LineSeries| l.bytes.iter().copied().max().unwrap_or(0);
            peak(b).cmp(&peak(a)).then(a.frame.cmp(&b.frame))
        });
        let complete_from = match self.window_start_us {
            None => 0,
            Some(w) => at_us.iter().filter(|&&t| t < w).count(),
        };
        Series {
            at_ns,
            at_us,
            total,
            lines,
            complete_from,
        }
    }

    /// For the tensors live at the end, per line: the bytes allocated in each step between
    /// `boundaries_ns` (the steps' starts on the trace clock, ascending) — the growth that stays.
    /// Largest live bytes first; empty without a clock anchor.
    #[cfg(test)]
    pub(crate) fn survivor_growth(&mut self, boundaries_ns: &[u64]) -> Vec<LineGrowth> {
        let Some(clock) = self.snapshot.clock else {
            return Vec::new();
        };
        let bounds: Vec<i64> = boundaries_ns.iter().map(|&b| clock.time_us(b)).collect();
        self.survivor_growth_us(&bounds)
    }

    /// `survivor_growth` between the step marks the bootstrap made (exact, on
    /// torch's clock): `per_step[i]` is the step that starts at `step_marks[i]`.
    pub fn survivor_growth_at_marks(&mut self) -> Vec<LineGrowth> {
        let bounds: Vec<i64> = self.snapshot.step_marks.iter().map(|m| m.time_us).collect();
        self.survivor_growth_us(&bounds)
    }

    fn survivor_growth_us(&mut self, bounds: &[i64]) -> Vec<LineGrowth> {
        let steps = bounds.len();
        let mut by_line: HashMap<Option<u32>, LineGrowth> = HashMap::new();
        let survivors: Vec<Tensor> = self
            .tensors
            .iter()
            .filter(|t| t.freed_us.is_none())
            .copied()
            .collect();
        for t in survivors {
            let line = self.line(t.stack);
            let g = by_line.entry(line).or_insert_with(|| LineGrowth {
                frame: line,
                live_bytes: 0,
                before: 0,
                per_step: vec![0; steps],
                bytes_per_step: 0.0,
                steps_measured: 0,
            });
            g.live_bytes += t.size;
            // The step holding the allocation: the last boundary at or before it.
            match t.allocated_us.map(|a| bounds.partition_point(|&b| b <= a)) {
                Some(n) if n > 0 => g.per_step[n - 1] += t.size,
                _ => g.before += t.size,
            }
        }
        // Steps closed by a later boundary, starting inside the window.
        let window = self.window_start_us;
        let measured: Vec<usize> = (0..steps.saturating_sub(1))
            .filter(|&i| window.is_none_or(|w| bounds[i] >= w))
            .collect();
        let mut out: Vec<LineGrowth> = by_line
            .into_values()
            .map(|mut g| {
                if !measured.is_empty() {
                    let sum: u64 = measured.iter().map(|&i| g.per_step[i]).sum();
                    g.bytes_per_step = sum as f64 / measured.len() as f64;
                }
                g.steps_measured = measured.len();
                g
            })
            .collect();
        out.sort_by(|a, b| b.live_bytes.cmp(&a.live_bytes).then(a.frame.cmp(&b.frame)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::{
        ClockAnchor, SnapshotBlock, SnapshotFrame, SnapshotSegment, StepMark, TraceEntry,
    };
    use super::*;

    const MIB: u64 = 1 << 20;

    fn entry(action: Action, addr: u64, size: u64, time_us: i64, stack: u32) -> TraceEntry {
        TraceEntry {
            device: 0,
            action,
            addr,
            size,
            stream: 0,
            time_us,
            stack,
        }
    }

    fn block(address: u64, size: u64, stack: u32) -> SnapshotBlock {
        SnapshotBlock {
            address,
            size,
            requested_size: size,
            state: BlockState::ActiveAllocated,
            stack,
        }
    }

    /// A loop of 5 steps (each 1000 µs long, starting at 1000·k): every step makes a 2 MiB
    /// activation at line 10 and frees it, and keeps a 1 MiB tensor from line 20 in a list; a
    /// 4 MiB weight from line 5 was made before the ring's window (max_entries 30 is full).
    fn planted() -> AllocatorSnapshot {
        let frames = vec![
            SnapshotFrame {
                file: "/v/site-packages/torch/nn/functional.py".into(),
                line: 2000,
                function: "linear".into(),
                via: None,
            },
            SnapshotFrame {
                file: "train.py".into(),
                line: 10,
                function: "step".into(),
                via: None,
            },
            SnapshotFrame {
                file: "train.py".into(),
                line: 20,
                function: "step".into(),
                via: None,
            },
            SnapshotFrame {
                file: "train.py".into(),
                line: 5,
                function: "<module>".into(),
                via: None,
            },
        ];
        // Stacks: 1 activation (library frame then line 10), 2 kept, 3 weight.
        let stacks = vec![vec![0, 1], vec![2], vec![3]];
        let mut traces = Vec::new();
        let mut blocks = vec![block(0x100, 4 * MIB, 3)];
        for k in 0..5i64 {
            let t = 1000 * k;
            let kept = 0x1000 + k as u64 * 0x100;
            traces.push(entry(Action::Alloc, 0x900, 2 * MIB, t + 100, 1));
            traces.push(entry(Action::Alloc, kept, MIB, t + 200, 2));
            traces.push(entry(Action::FreeRequested, 0x900, 2 * MIB, t + 300, 0));
            traces.push(entry(Action::FreeCompleted, 0x900, 2 * MIB, t + 301, 0));
            blocks.push(block(kept, MIB, 2));
        }
        // The ring is full: its window starts at its first entry.
        let max_entries = Some(traces.len() as u64);
        AllocatorSnapshot {
            reason: "exit".into(),
            clock: Some(ClockAnchor {
                unix_ns: 0,
                monotonic_ns: 1_000_000_000,
            }),
            max_entries,
            frames,
            stacks,
            program_lines: Vec::new(),
            segments: vec![SnapshotSegment {
                device: 0,
                address: 0x100,
                total_size: 64 * MIB,
                allocated_size: 9 * MIB,
                active_size: 9 * MIB,
                stream: 0,
                large: true,
                expandable: false,
                blocks,
            }],
            traces,
            ..Default::default()
        }
    }

    /// Trace-clock nanoseconds of torch time `us`.
    fn ns(us: i64) -> u64 {
        1_000_000_000 + us as u64 * 1000
    }

    fn named(s: &AllocatorSnapshot, frame: Option<u32>) -> String {
        frame.map_or("(no stack)".into(), |f| s.frames[f as usize].to_string())
    }

    #[test]
    fn the_end_is_read_per_line() {
        let s = planted();
        let mut h = TensorHistory::new(&s);
        assert_eq!(h.unmatched(), 0);
        assert_eq!(h.tensors().len(), 11);
        let end: Vec<(String, u64, u64)> = h
            .live_at_end()
            .into_iter()
            .map(|l| (named(&s, l.frame), l.bytes, l.count))
            .collect();
        assert_eq!(
            end,
            [
                ("train.py:20 in step".to_string(), 5 * MIB, 5),
                ("train.py:5 in <module>".to_string(), 4 * MIB, 1),
            ]
        );
        assert_eq!(h.window_start_ns(), Some(ns(100)));
    }

    #[test]
    fn live_bytes_over_time_follow_the_steps() {
        let s = planted();
        let mut h = TensorHistory::new(&s);
        // Mid-step 2 (after the activation, before its free), and between steps.
        let inside = h.live_at(ns(2250));
        let lines: Vec<(String, u64)> = inside
            .iter()
            .map(|l| (named(&s, l.frame), l.bytes))
            .collect();
        assert_eq!(
            lines,
            [
                ("train.py:5 in <module>".to_string(), 4 * MIB),
                ("train.py:20 in step".to_string(), 3 * MIB),
                ("train.py:10 in step".to_string(), 2 * MIB),
            ]
        );
        let series = h.series(&[ns(0), ns(50), ns(2250), ns(4999)]);
        assert_eq!(series.total, [4 * MIB, 4 * MIB, 9 * MIB, 9 * MIB]);
        assert_eq!(series.complete_from, 2, "0 and 50 µs are before the window");
        let kept = series
            .lines
            .iter()
            .find(|l| named(&s, l.frame) == "train.py:20 in step")
            .unwrap();
        assert_eq!(kept.bytes, [0, 0, 3 * MIB, 5 * MIB]);
    }

    #[test]
    fn survivors_grow_by_their_line_per_step() {
        let s = planted();
        let mut h = TensorHistory::new(&s);
        let bounds: Vec<u64> = (0..5).map(|k| ns(1000 * k)).collect();
        let growth = h.survivor_growth(&bounds);
        assert_eq!(growth.len(), 2);
        let kept = &growth[0];
        assert_eq!(named(&s, kept.frame), "train.py:20 in step");
        assert_eq!(kept.live_bytes, 5 * MIB);
        assert_eq!(kept.per_step, [MIB; 5]);
        assert_eq!(kept.before, 0);
        // The window starts at 100 µs, so step 0 (from 0 µs) is not measured; steps 1-3 are
        // closed and inside: 3 steps of 1 MiB.
        assert_eq!(kept.steps_measured, 3);
        assert_eq!(kept.bytes_per_step, MIB as f64);
        let weight = &growth[1];
        assert_eq!(named(&s, weight.frame), "train.py:5 in <module>");
        assert_eq!((weight.before, weight.bytes_per_step), (4 * MIB, 0.0));
    }

    #[test]
    fn the_bootstraps_marks_are_exact_boundaries() {
        let mut s = planted();
        // Marks at the end of each step (after its free), on torch's clock.
        s.step_marks = (0..5)
            .map(|k| StepMark {
                step: k as u64 + 1,
                time_us: 1000 * k + 400,
            })
            .collect();
        // Without a clock anchor the marks still place everything.
        s.clock = None;
        let mut h = TensorHistory::new(&s);
        let series = h.series_at_marks();
        assert!(series.at_ns.is_empty());
        assert_eq!(series.at_us, [400, 1400, 2400, 3400, 4400]);
        assert_eq!(series.total, [5 * MIB, 6 * MIB, 7 * MIB, 8 * MIB, 9 * MIB]);
        let growth = h.survivor_growth_at_marks();
        let kept = &growth[0];
        assert_eq!(kept.before, MIB);
        assert_eq!(kept.per_step, [MIB, MIB, MIB, MIB, 0]);
        // Steps 0-3 are closed and start inside the window (from 100 µs).
        assert_eq!((kept.steps_measured, kept.bytes_per_step), (4, MIB as f64));
        assert!(
            h.survivor_growth(&[1]).is_empty(),
            "trace times need an anchor"
        );
    }

    #[test]
    fn allocations_without_a_stack_take_the_last_one_before_them() {
        let mut s = planted();
        // A gradient made on the autograd engine's thread after the last step's kept tensor.
        s.traces.push(entry(Action::Alloc, 0x5000, 512, 5000, 0));
        s.segments[0].blocks.push(block(0x5000, 512, 0));
        let mut h = TensorHistory::new(&s);
        let end = h.live_at_end();
        assert_eq!(named(&s, end[0].frame), "train.py:20 in step");
        assert_eq!(
            (end[0].bytes, end[0].count, end[0].inferred_bytes),
            (5 * MIB + 512, 6, 512)
        );
        assert_eq!(h.tensors().iter().filter(|t| t.inferred).count(), 1);
    }

    #[test]
    fn a_ring_that_lost_a_free_is_counted_not_trusted() {
        let mut s = planted();
        // An allocation whose free fell outside what the snapshot says, and a double free.
        s.traces.push(entry(Action::Alloc, 0x7777, 8, 6000, 1));
        s.traces
            .push(entry(Action::FreeRequested, 0x8888, 8, 6001, 0));
        s.traces
            .push(entry(Action::FreeRequested, 0x8888, 8, 6002, 0));
        let h = TensorHistory::new(&s);
        assert_eq!(h.unmatched(), 2);
    }
}
