//! A trace's out-of-memory failures in words, the one wording of the report's verdict and
//! FINDINGS, `check` and `--fail-on oom`: how many, and the first — what it asked, on which
//! device, at which step, with how much live.

use vramtrace_collector::analysis::Analysis;

use crate::render::units::{bytes, count, device};

/// `3 out-of-memory failures (the first: cudaMalloc of 1.0 MiB on device 0 at step 2 with 11.2
/// MiB live)`, `1 out-of-memory failure (cudaMalloc of …)`, or `0 out-of-memory failures`.
pub(crate) fn oom_found(analysis: &Analysis) -> String {
    let n = count(analysis.ooms.total, "out-of-memory failure");
    match first_oom(analysis) {
        None => n,
        Some(first) => format!("{n} ({first})"),
    }
}

/// The verdict's words for them, where they are news: `OUT OF MEMORY (3 failures; the first:
/// …)`; `None` without any.
pub(crate) fn oom_headline(analysis: &Analysis) -> Option<String> {
    let first = first_oom(analysis)?;
    let n = count(analysis.ooms.total, "failure");
    // Read from a segment's snapshot, which does not carry the failures before it: the count
    // and the first are of the steps read.
    let n = match analysis.steps.from_step {
        Some(from) => format!("{n} since step {from}, where reading began"),
        None => n,
    };
    let sep = if analysis.ooms.total > 1 { "; " } else { ": " };
    Some(format!("OUT OF MEMORY ({n}{sep}{first})"))
}

/// `the first: cudaMalloc of 1.0 MiB on device 0 at step 2 with 11.2 MiB live` (without `the
/// first: ` when it is the only one).
fn first_oom(analysis: &Analysis) -> Option<String> {
    let f = analysis.ooms.failures.first()?;
    let first = if analysis.ooms.total > 1 {
        "the first: "
    } else {
        ""
    };
    // A request larger than all the device had free is a one-off, whatever grew before it:
    // said where the device's size is known (given, or sampled from the driver).
    let g = &analysis.growth;
    let known = matches!(g.device_memory_source, "given" | "sampled");
    let free = g
        .device_memory
        .filter(|_| known)
        .map(|m| m.saturating_sub(f.live.bytes));
    let larger = match free {
        Some(free) if f.failure.request_bytes > free => {
            format!(", more than all that was free ({})", bytes(free))
        }
        _ => String::new(),
    };
    // A trace without steps names no step.
    let step = match analysis.steps.source {
        "none" => String::new(),
        _ => format!(" at step {}", f.failure.origin.step),
    };
    Some(format!(
        "{first}{} of {} at {} on device {}{step} with {} live{larger}",
        f.failure.api.name(),
        bytes(f.failure.request_bytes),
        super::site_label(&f.requester),
        device(f.failure.device),
        bytes(f.live.bytes)
    ))
}
