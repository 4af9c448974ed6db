//! A first diagnosis: every finding of the other analyses classed (steady growth, one-off peak,
//! fragmentation, orphan, teardown-only), with its likely cause and the usual fix in one line
//! each, and always the evidence it rests on.
//!
//! The cause is read from who allocated: NCCL's library (communicators), cuBLAS (workspaces), a
//! framework's allocator (tensors the program keeps), or any other module (an extension calling
//! the CUDA allocator itself). It is a likely cause, not a proof; the evidence says how sure.

use serde::Serialize;

use super::fragmentation::Fragmentation;
use super::growth::{Growth, SiteGrowth, DRIVER};
use super::leaks::Leaks;
use super::oom::OomReport;
use super::orphans::{OrphanKind, Orphans};
use super::site::SiteName;
use crate::live::{Holder, SampleAxis};

/// What kind of finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingClass {
    /// Memory that grows every step (or every few) and goes on growing: a leak.
    SteadyGrowth,
    /// Live, but its owner is gone.
    Orphan,
    /// Memory allocated but unusable.
    Fragmentation,
    /// A one-off rise that fell back: a large temporary.
    Peak,
    /// Held until the end and flat during training: released by the process's exit.
    TeardownOnly,
}

impl FindingClass {
    /// Short name used in reports (the same as its JSON spelling).
    pub const fn name(self) -> &'static str {
        match self {
            FindingClass::SteadyGrowth => "steady growth",
            FindingClass::Orphan => "orphan",
            FindingClass::Fragmentation => "fragmentation",
            FindingClass::Peak => "peak",
            FindingClass::TeardownOnly => "teardown-only",
        }
    }
}

/// How much a finding asks for attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Steady growth that alerts (above the threshold, or full within the horizon).
    Alert,
    /// Worth fixing.
    Warning,
    /// Worth knowing.
    Note,
}

/// What a finding rests on: the numbers of the analysis that made it (fields that do not apply
/// are `null`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// The bytes the finding is about: held at the end of the steady state (steady growth),
    /// the highest point (peak), unusable (fragmentation), orphaned, or held until exit.
    pub bytes: u64,
    /// Bytes per step (or per time window) of steady growth, and the fit of its line.
    pub rate: Option<f64>,
    pub r2: Option<f64>,
    /// Rises of the growth, and the sample (step, or window) it began after.
    pub rises: Option<usize>,
    pub growth_from: Option<u64>,
    /// `steps` or `time`: what `rate` and `growth_from` count.
    pub axis: Option<SampleAxis>,
    /// Objects involved.
    pub objects: Option<u64>,
    /// Bytes the place still held at the end of the trace, and bytes freed after the steady
    /// state (at exit: a teardown that frees them does not make the growth less of a leak).
    pub live_at_end: Option<u64>,
    pub freed_at_teardown: Option<u64>,
    /// At the holder's sustained rate: steps and seconds until the device is full.
    pub steps_to_full: Option<f64>,
    pub seconds_to_full: Option<f64>,
    /// Share of allocated device memory that is unusable (fragmentation).
    pub share: Option<f64>,
    /// The view of memory it comes from: `driver`, or another source's name.
    pub view: Option<&'static str>,
}

/// One finding with its advice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub class: FindingClass,
    pub severity: Severity,
    pub holder: Option<Holder>,
    /// Where: the place (its largest call site, labelled by the program's Python line when a
    /// reader with symbols fills it in); `null` for findings about a whole device.
    pub site: Option<SiteName>,
    /// The likely cause, and the usual fix.
    pub cause: String,
    pub fix: String,
    pub evidence: Evidence,
}

/// A one-off peak smaller than this share of its device's highest point is not worth a note.
const PEAK_SHARE: f64 = 0.05;
/// Unmapped physical memory is a finding from this many bytes.
const FRAGMENTATION_BYTES: u64 = 64 << 20;

/// Who made a place's memory, as far as causes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Nccl,
    Cublas,
    Framework,
    /// No module known: the allocation came straight from Python (ctypes) or an unknown place.
    Unknown,
    Extension,
}

fn owner(site: &SiteName) -> Owner {
    let Some(module) = site.module_name.as_deref() else {
        return Owner::Unknown;
    };
    let starts = |p: &str| module.starts_with(p);
    if starts("libnccl") {
        Owner::Nccl
    } else if starts("libcublas") {
        Owner::Cublas
    } else if ["libtorch", "libc10", "libxla", "libtensorflow", "_C."]
        .iter()
        .any(|p| starts(p))
    {
        Owner::Framework
    } else if starts("libffi") || starts("_ctypes") || starts("libpython") {
        Owner::Unknown
    } else {
        Owner::Extension
    }
}

/// Cause and fix of tensors that stay live step after step.
fn tensors_advice() -> (String, String) {
    (
        "tensors kept across steps (appended to a list, or stored with their autograd graph)"
            .to_string(),
        "store .detach() / .item() or move to CPU (.cpu()) before keeping; clear what is kept"
            .to_string(),
    )
}

/// Cause and fix of a steady growth at `site`.
fn growth_advice(site: &SiteName) -> (String, String) {
    let module = site.module_name.as_deref().unwrap_or("(unknown module)");
    let (cause, fix) = match owner(site) {
        Owner::Nccl => (
            "NCCL communicators created and never destroyed: each new process group (new_group, \
             split) allocates its buffers"
                .to_string(),
            "create the group once and reuse it, or destroy each with \
             dist.destroy_process_group(group) when done"
                .to_string(),
        ),
        Owner::Cublas => (
            "a cuBLAS workspace per new handle or stream".to_string(),
            "reuse streams and handles across steps".to_string(),
        ),
        Owner::Framework => tensors_advice(),
        Owner::Extension => (
            format!("raw device allocations in {module} never freed"),
            "free them (cudaFree) when done, or allocate through the framework's allocator"
                .to_string(),
        ),
        Owner::Unknown => (
            "device memory allocated here is kept across steps".to_string(),
            "free it when done, or keep it once instead of every step".to_string(),
        ),
    };
    (cause, fix)
}

/// Cause and fix of orphans of `kind`.
fn orphan_advice(kind: OrphanKind) -> (&'static str, &'static str) {
    use OrphanKind::*;
    match kind {
        CommunicatorDestroyed | CommunicatorAborted => (
            "NCCL buffers outlived their communicator",
            "free NCCL buffers (ncclMemFree, deregister windows) before destroying the communicator",
        ),
        ContextGone => (
            "objects of a destroyed context still held",
            "release handles and mappings before destroying the context",
        ),
        PoolDestroyed => (
            "allocations of a destroyed memory pool",
            "free pool allocations before destroying the pool",
        ),
        UnmappedHandle => (
            "physical memory no mapping reaches (cuMemCreate without cuMemRelease)",
            "cuMemRelease each handle once unmapped",
        ),
        MappingWithoutReservation => (
            "a mapping into an address range already freed",
            "cuMemUnmap before cuMemAddressFree",
        ),
        RegistrationBufferGone => (
            "an NCCL registration whose buffer was freed",
            "ncclCommDeregister before freeing the buffer",
        ),
        RegistrationCommunicatorGone => (
            "an NCCL registration whose communicator is gone",
            "deregister buffers before destroying the communicator",
        ),
    }
}

/// A steady growth's finding; `tensors_seen` when another view (a framework allocator's records)
/// shows the tensors themselves growing, so that a framework's segments in the driver's view are
/// the allocator reserving for them.
fn steady_finding(g: &Growth, s: &SiteGrowth, tensors_seen: bool) -> Finding {
    let c = &s.course;
    let (cause, fix) = if s.view != DRIVER {
        tensors_advice()
    } else if tensors_seen && owner(&s.site) == Owner::Framework {
        (
            "the caching allocator reserving more segments for tensors that stay live: the \
             allocator's view names the line that keeps them"
                .to_string(),
            "fix the line the allocator's view names".to_string(),
        )
    } else {
        growth_advice(&s.site)
    };
    let holder = g.holders.iter().find(|h| h.holder == s.holder);
    let projection = holder.and_then(|h| h.projection);
    let freed = c.last_bytes.saturating_sub(s.now_bytes);
    Finding {
        class: FindingClass::SteadyGrowth,
        severity: if s.alert || holder.is_some_and(|h| h.alert) {
            Severity::Alert
        } else {
            Severity::Warning
        },
        holder: Some(s.holder),
        site: Some(s.site.clone()),
        cause,
        fix,
        evidence: Evidence {
            bytes: c.last_bytes,
            rate: Some(c.rate),
            r2: c.fit.map(|f| f.r2),
            rises: Some(c.rises),
            growth_from: c.phases.growth_from,
            axis: Some(g.axis),
            live_at_end: Some(s.now_bytes),
            freed_at_teardown: (freed > 0).then_some(freed),
            steps_to_full: projection.and_then(|p| p.steps_to_full),
            seconds_to_full: projection.and_then(|p| p.seconds_to_full),
            view: Some(s.view),
            ..Evidence::default()
        },
    }
}

/// The diagnosis of the analyses' results, most urgent first; `at_end` when the state is of the
/// trace's end (not of where a replay stopped).
pub fn diagnose(
    growth: &Growth,
    leaks: &Leaks,
    orphans: &Orphans,
    fragmentation: &Fragmentation,
    ooms: &OomReport,
    device_peak: Option<u64>,
    at_end: bool,
) -> Vec<Finding> {
    // Rows of another view name the lines whose tensors stay live: they come first.
    let tensors_seen = growth.steady.iter().any(|s| s.view != DRIVER);
    let mut steady: Vec<&SiteGrowth> = growth.steady.iter().collect();
    steady.sort_by_key(|s| s.view == DRIVER);
    let mut out: Vec<Finding> = steady
        .into_iter()
        .map(|s| steady_finding(growth, s, tensors_seen))
        .collect();
    for k in &orphans.by_kind {
        let (cause, fix) = orphan_advice(k.kind);
        let example = orphans.objects.iter().find(|o| o.kind == k.kind);
        out.push(Finding {
            class: FindingClass::Orphan,
            severity: Severity::Warning,
            holder: example.map(|o| Holder::Device { device: o.device }),
            site: example.map(|o| o.site.clone()),
            cause: format!("{} ({})", cause, k.kind.name()),
            fix: fix.to_string(),
            evidence: Evidence {
                bytes: k.bytes,
                objects: Some(k.count),
                ..Evidence::default()
            },
        });
    }
    // Fragmentation is a finding when it cost something: an out-of-memory failure that the
    // memory held but unusable could have served, or physical memory no mapping reaches. A
    // pool's reserve alone is a cache for reuse, not waste.
    let f = fragmentation;
    let failed = ooms.failures.iter().find(|o| o.request_fits_in_unusable);
    if failed.is_some() || f.physical.unmapped_bytes >= FRAGMENTATION_BYTES {
        out.push(Finding {
            class: FindingClass::Fragmentation,
            severity: Severity::Warning,
            holder: failed.map(|o| Holder::Device {
                device: o.failure.device,
            }),
            site: failed.map(|o| o.requester.clone()),
            cause: match failed {
                Some(_) => "an allocation failed that the memory held but unusable (pools' \
                            reserve, unmapped physical memory) could have served"
                    .to_string(),
                None => "physical memory that no mapping reaches".to_string(),
            },
            fix: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for PyTorch; trim pools \
                  (cudaMemPoolTrimTo) or release unmapped handles otherwise"
                .to_string(),
            evidence: Evidence {
                bytes: failed.map_or(f.physical.unmapped_bytes, |o| o.free_but_unusable_bytes),
                share: f.unusable_share,
                objects: failed.map(|_| 1),
                ..Evidence::default()
            },
        });
    }
    // The largest one-off: a peak that fell back, or a rise that stayed.
    let fell = growth.peaks.iter().map(|s| (s, s.course.max_bytes, false));
    let stayed = growth
        .one_off_rises
        .iter()
        .filter_map(|s| s.course.phases.late_rise.map(|(_, b)| (s, b, true)));
    let top = fell.chain(stayed).max_by_key(|&(_, bytes, _)| bytes);
    if let (Some(p), Some((top, bytes, kept))) = (device_peak, top) {
        if bytes as f64 >= p as f64 * PEAK_SHARE {
            let (cause, at) = if kept {
                let at = top.course.phases.late_rise.map(|r| r.0);
                (
                    "a one-off rise that stayed: a large batch or evaluation once, whose memory \
                     the allocator keeps for reuse (not a leak)",
                    at,
                )
            } else {
                (
                    "a large temporary that rose and fell back: not a leak",
                    None,
                )
            };
            out.push(Finding {
                class: FindingClass::Peak,
                severity: Severity::Note,
                holder: Some(top.holder),
                site: Some(top.site.clone()),
                cause: cause.to_string(),
                fix: "if this is what runs out of memory: make it smaller (batch, sequence) or \
                      recompute instead of keeping (checkpointing); torch.cuda.empty_cache() \
                      after a one-off pass returns what the allocator kept"
                    .to_string(),
                evidence: Evidence {
                    bytes,
                    growth_from: at,
                    axis: Some(growth.axis),
                    live_at_end: Some(top.now_bytes),
                    view: Some(top.view),
                    ..Evidence::default()
                },
            });
        }
    }
    // What stays live to the end without growing: released by the exit, not a leak (said only
    // of the live set at the end of a trace, not where a replay stopped).
    let growing = |s: &SiteName| growth.steady.iter().any(|g| g.site.place == s.place);
    let held: Vec<_> = leaks
        .sites
        .iter()
        .filter(|s| s.bytes > 0 && s.orphans == 0 && !growing(&s.site))
        .collect();
    if let Some(top) = held.first().filter(|_| at_end) {
        let places = if held.len() == 1 { "place" } else { "places" };
        out.push(Finding {
            class: FindingClass::TeardownOnly,
            severity: Severity::Note,
            holder: None,
            site: Some(top.site.clone()),
            cause: format!(
                "held until exit at {} {places} without growing during training (largest here)",
                held.len()
            ),
            fix: "none needed: the process's exit releases it; free it first only if the \
                  process lives on"
                .to_string(),
            evidence: Evidence {
                bytes: held.iter().map(|s| s.bytes).sum(),
                objects: Some(held.iter().map(|s| s.count).sum()),
                ..Evidence::default()
            },
        });
    }
    out.sort_by_key(|f| (f.severity, f.class));
    out
}
