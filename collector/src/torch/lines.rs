//! The recorder's tensors as rows of the growth analysis: per Python line, the tensor bytes
//! live right after each step mark, judged beside the driver's series
//! ([`growth_with`](crate::analysis::growth_with)).
//!
//! With PyTorch's native caching allocator the driver sees segments, and charges a new segment
//! to whichever line made the allocator grow, often not the line whose tensors stay live. The
//! recorder sees the tensors themselves; its rows name that line. They are rows of their own
//! view (`allocator`): they never add to a device's sustained growth, which the driver's view
//! measures.

use std::collections::HashMap;

use super::snapshot::SnapshotFrame;
use super::{TensorHistory, TorchView};
use crate::analysis::{LineSeries, OwnerKind, SiteName, SourceLine};
use crate::live::{Holder, LiveState};

/// The name of the recorder's view in growth rows and findings.
pub const VIEW: &str = "allocator";
/// How a report names what holds a growth of this view, where a native row names its library.
pub(crate) const VIEW_NAME: &str = "PyTorch tensors";

/// The tensor bytes of each Python line at each step sample of `state`: from the snapshot's own
/// step marks (the same marks as the trace's, on torch's clock), from the first sample whose
/// tensors the recorder's window holds whole, to the last mark `state` applied. Empty when the steps do not come from marks or
/// the trace holds no snapshot.
pub(crate) fn step_lines(view: &TorchView, state: &LiveState) -> Vec<LineSeries> {
    let Some(snapshot) = view.snapshot.as_ref() else {
        return Vec::new();
    };
    if !state.steps_from_marks() {
        return Vec::new();
    }
    let mut tensors = TensorHistory::new(snapshot);
    // The device each line's tensors are on (the one holding most of its bytes).
    let mut devices: HashMap<Option<u32>, HashMap<i32, u64>> = HashMap::new();
    // Each line's tensors still live when the snapshot was taken (at exit, or at an alert).
    let mut live: HashMap<Option<u32>, u64> = HashMap::new();
    for t in tensors.tensors().to_vec() {
        let line = tensors.line(t.stack);
        *devices
            .entry(line)
            .or_default()
            .entry(t.device)
            .or_default() += t.size;
        if t.freed_us.is_none() {
            *live.entry(line).or_default() += t.size;
        }
    }
    let series = tensors.series_at_marks();
    // `vramtrace_mark_step` numbers steps from 1; the trace samples the k-th mark at x = k - 1.
    let xs: Vec<u64> = snapshot
        .step_marks
        .iter()
        .map(|m| m.step.saturating_sub(1))
        .collect();
    series
        .lines
        .iter()
        .filter_map(|l| {
            let frame = &snapshot.frames[l.frame? as usize];
            let device = devices
                .get(&l.frame)
                .and_then(|d| {
                    d.iter()
                        .max_by_key(|&(&dev, &b)| (b, -dev))
                        .map(|(&d, _)| d)
                })
                .unwrap_or(0);
            // Only the marks `state` has applied: a replay to step N sees the tensors up to it.
            // The snapshot's marks are the optimizer's steps once it stepped (the iterations
            // marked before are dropped, as the trace's steps are its step marks alone), else
            // the model calls'.
            let applied = match state.marks() {
                0 => state.iterations(),
                marks => marks,
            };
            let points: Vec<(u64, u64)> = xs
                .iter()
                .zip(&l.bytes)
                .skip(series.complete_from)
                .filter(|&(&x, _)| x < applied)
                .map(|(&x, &b)| (x, b))
                .collect();
            let source = source_line(frame);
            // Read to (past) the snapshot's last mark, the lines hold at the end what they held
            // when it was taken, the last step's tensors too; read to an earlier step, its sample.
            let now_bytes = (applied >= snapshot.step_marks.len() as u64)
                .then(|| live.get(&l.frame).copied().unwrap_or(0));
            // Samples before the recorder's window miss what lived and died before it.
            let history_from = (series.complete_from > 0)
                .then(|| xs.get(series.complete_from).copied())
                .flatten();
            Some(LineSeries {
                history_from,
                // No library owns a tensor: the view that saw it is named in its place.
                site: SiteName::of_line(VIEW_NAME, OwnerKind::Torch, source)
                    .reached_via(frame.via.as_deref().map(source_line)),
                holder: Holder::Device { device },
                view: VIEW,
                points,
                now_bytes,
            })
        })
        .collect()
}

/// A recorder frame as a line of the program's source.
fn source_line(frame: &SnapshotFrame) -> SourceLine {
    SourceLine {
        file: frame.file.clone(),
        line: frame.line,
        function: frame.function.clone(),
    }
}
