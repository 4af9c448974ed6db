//! PyTorch's view behind an alert raised while the program runs: whether the program's PyTorch
//! records its tensors, which snapshot of its recorder came last, and from it, per device, the
//! cause of steady growth that grows fastest, judged as the report judges it (the recorder's
//! tensors per line beside the driver's series, grouped into causes): the line whose tensors
//! stay live, where the driver sees the caching allocator's segments at the line that made it
//! grow. The live analysis keeps PyTorch's payloads (`analysis::Watch::attachments`).

use super::{step_lines, AllocatorConfig, TorchView, KIND_ALLOCATOR, KIND_SNAPSHOT};
use crate::analysis::growth::{growth_with, DRIVER};
use crate::analysis::GrowthConfig;
use crate::analysis::{causes, SiteName};
use crate::attached::Attachments;
use crate::live::{Holder, LiveState};

/// Whether the program's PyTorch records its tensors (its recorder is on): it can then name
/// the line whose tensors stay live, given a snapshot.
pub fn recorder_on(attachments: &Attachments) -> bool {
    attachments
        .of_kind(KIND_ALLOCATOR)
        .last()
        .and_then(|a| AllocatorConfig::parse(&a.data).ok())
        .is_some_and(|c| c.recorder.state == "on")
}

/// The number of the latest snapshot of PyTorch's recorder handed over (0: none yet).
pub fn latest_snapshot(attachments: &Attachments) -> u32 {
    attachments
        .of_kind(KIND_SNAPSHOT)
        .last()
        .map_or(0, |a| a.id)
}

/// Whether the latest snapshot handed over is the program's last word: taken at its exit or at
/// its first out-of-memory error, after which no step comes to hand over a newer one.
pub fn final_snapshot(attachments: &Attachments) -> bool {
    attachments
        .of_kind(KIND_SNAPSHOT)
        .last()
        .and_then(|a| super::snapshot::reason_of(&a.data))
        .is_some()
}

/// What PyTorch's view says of a device's steady growth.
#[derive(Clone, Debug, PartialEq)]
pub enum Keeping {
    /// The fastest cause is tensors kept at this place (a Python line), at this rate per
    /// sample unit.
    Line(Box<SiteName>, f64),
    /// The tensors do not grow: what grows is the caching allocator's segments alone, memory it
    /// reserved and keeps cached, not tensors the program holds.
    CacheOnly,
    /// The view cannot tell: no snapshot with steps to read, or the fastest cause is memory
    /// PyTorch does not allocate (an extension's, NCCL's).
    Unknown,
}

/// Per device of `devices`: the fastest cause of steady growth there, judged with PyTorch's
/// tensors (the latest snapshot in `attachments`) beside the driver's view of `state` under
/// `config`, as the report groups causes (`analysis::causes`): a caching-allocator segment row
/// is evidence of a tensor cause on its device when there is one, so it leads a cause of its own
/// only when no tensors there grow.
pub fn keeping_places(
    state: &LiveState,
    attachments: &Attachments,
    config: &GrowthConfig,
    devices: &[i32],
) -> Vec<(i32, Keeping)> {
    let view = TorchView::read(attachments, None);
    // The view can tell only of steps it saw marked; no tensor line then means no tensor live
    // at any step's end.
    let readable = state.steps_from_marks()
        && view
            .snapshot
            .as_ref()
            .is_some_and(|s| !s.step_marks.is_empty());
    let lines = step_lines(&view, state);
    let g = readable.then(|| growth_with(state, config, lines));
    devices
        .iter()
        .map(|&device| {
            let Some(g) = g.as_ref() else {
                return (device, Keeping::Unknown);
            };
            let holder = Holder::Device { device };
            let fastest = causes::group(&g.steady)
                .into_iter()
                .map(|c| &g.steady[c.primary])
                .filter(|s| s.holder == holder)
                .max_by(|a, b| a.course.rate.total_cmp(&b.course.rate));
            let keeping = match fastest {
                Some(row) if row.view != DRIVER => {
                    Keeping::Line(Box::new(row.site.clone()), row.course.rate)
                }
                Some(row) if row.site.is_framework_pool() => Keeping::CacheOnly,
                _ => Keeping::Unknown,
            };
            (device, keeping)
        })
        .collect()
}
