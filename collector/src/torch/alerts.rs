//! PyTorch's view behind an alert raised while the program runs: whether the program's PyTorch
//! records its tensors, which snapshot of its recorder came last, and from it, per device, the
//! cause of steady growth that grows fastest, judged as the report judges it (the recorder's
//! tensors per line beside the driver's series, grouped into causes): the line whose tensors
//! stay live, where the driver sees the caching allocator's segments at the line that made it
//! grow. The live analysis keeps PyTorch's payloads (`analysis::Watch::attachments`).

use super::{step_lines, AllocatorConfig, TorchView, KIND_ALLOCATOR, KIND_SNAPSHOT};
use crate::analysis::growth::{growth_with, GrowthConfig, DRIVER};
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

/// Per device of `devices`: the fastest cause of steady growth there, judged with PyTorch's
/// tensors (the latest snapshot in `attachments`) beside the driver's view of `state` under
/// `config`: the place that names it and its rate per sample unit. `None` for a device with no
/// cause, or when the snapshot says no more than the driver.
pub fn keeping_places(
    state: &LiveState,
    attachments: &Attachments,
    config: &GrowthConfig,
    devices: &[i32],
) -> Vec<(i32, Option<(SiteName, f64)>)> {
    let view = TorchView::read(attachments, None);
    let lines = step_lines(&view, state);
    let g = (!lines.is_empty()).then(|| growth_with(state, config, lines));
    devices
        .iter()
        .map(|&device| {
            let place = g.as_ref().and_then(|g| {
                let holder = Holder::Device { device };
                let row = causes::group(&g.steady)
                    .into_iter()
                    .map(|c| &g.steady[c.primary])
                    .filter(|s| s.holder == holder)
                    .max_by(|a, b| a.course.rate.total_cmp(&b.course.rate))?;
                (row.view != DRIVER).then(|| (row.site.clone(), row.course.rate))
            });
            (device, place)
        })
        .collect()
}
