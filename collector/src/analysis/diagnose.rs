//! A first diagnosis: every finding of the other analyses classed (steady growth, one-off peak,
//! fragmentation, orphan, teardown-only), with its likely cause and the usual fix ([`advice`])
//! and always the evidence it rests on. Steady growth is said once per cause
//! ([`causes`](super::causes)), at the line that keeps the memory, with the other views of it as
//! evidence.

use super::advice::{self, Advice};
use super::causes::{self, Cause};
use super::finding::{Evidence, Finding, FindingClass, LineMeaning, Related, Severity};
use super::fragmentation::Fragmentation;
use super::growth::Role;
use super::growth::{Growth, SiteGrowth, DRIVER};
use super::leaks::{LeakSite, Leaks};
use super::oom::OomReport;
use super::orphans::Orphans;
use super::owner::OwnerKind;
use super::site::{Place, SiteName};
use super::{Framework, RaisedAlert};
use crate::live::{Holder, SampleAxis};

/// A one-off peak smaller than this share of its device's highest point is not worth a note.
const PEAK_SHARE: f64 = 0.05;
/// Unmapped physical memory is a finding from this many bytes.
const FRAGMENTATION_BYTES: u64 = 64 << 20;

/// What the line of a steady growth row is to its memory: a framework allocator's row in the
/// driver's view is where it asked the driver for memory for a pool or segment, unless its
/// allocations are stream-ordered (PyTorch's `cudaMallocAsync` backend: each is a tensor); every
/// other row allocated what stays live.
fn line_means(s: &SiteGrowth, framework: &Framework) -> LineMeaning {
    let async_torch = s.site.owner == OwnerKind::Torch
        && framework.torch_backend.as_deref() == Some("cudaMallocAsync");
    if s.view == DRIVER && s.site.is_framework_pool() && !async_torch {
        LineMeaning::Asked
    } else {
        LineMeaning::Keeps
    }
}

/// The finding of one cause of steady growth.
fn steady_finding(
    g: &Growth,
    rows: &[SiteGrowth],
    cause: &Cause,
    framework: &Framework,
) -> Finding {
    let s = &rows[cause.primary];
    let c = &s.course;
    let means = line_means(s, framework);
    let Advice { cause: why, fix } = if s.view != DRIVER {
        advice::kept_tensors()
    } else {
        advice::growth(
            s.site.owner,
            s.site.module_name.as_deref(),
            means == LineMeaning::Asked,
            framework.torch_backend.is_some(),
        )
    };
    let holder = g.holders.iter().find(|h| h.holder == s.holder);
    let projection = holder.and_then(|h| h.projection);
    // NCCL's buffers of the same communicators made at other places are the cause's memory
    // too: its rate and bytes are theirs together.
    let together = || {
        (cause.related.iter())
            .filter(|r| r.1 == Role::Communicators)
            .map(|r| &rows[r.0])
    };
    let rate = c.rate + together().map(|x| x.course.rate).sum::<f64>();
    let bytes = c.last_bytes + together().map(|x| x.course.last_bytes).sum::<u64>();
    let now_bytes = s.now_bytes + together().map(|x| x.now_bytes).sum::<u64>();
    let freed = bytes.saturating_sub(now_bytes);
    let alerts = cause.rows().any(|r| rows[r].alert)
        || cause.rows().any(|r| {
            g.holders
                .iter()
                .any(|h| h.holder == rows[r].holder && h.alert)
        });
    let related = cause
        .related
        .iter()
        .map(|&(r, role)| {
            let x = &rows[r];
            Related {
                role,
                view: x.view,
                holder: x.holder,
                site: x.site.clone(),
                rate: x.course.rate,
                bytes: x.course.last_bytes,
                live_at_end: x.now_bytes,
            }
        })
        .collect();
    Finding {
        class: FindingClass::SteadyGrowth,
        severity: if alerts {
            Severity::Alert
        } else {
            Severity::Warning
        },
        holder: Some(s.holder),
        site: Some(s.site.clone()),
        cause: why,
        fix,
        evidence: Evidence {
            bytes,
            rate: Some(rate),
            r2: c.fit.map(|f| f.r2),
            rises: Some(c.rises),
            growth_from: c.phases.growth_from,
            axis: Some(g.axis),
            live_at_end: Some(now_bytes),
            freed_at_teardown: (freed > 0).then_some(freed),
            steps_to_full: projection.and_then(|p| p.steps_to_full),
            seconds_to_full: projection.and_then(|p| p.seconds_to_full),
            out_of_memory_at_step: projection.and_then(|p| p.out_of_memory_at_step),
            view: Some(s.view),
            line_means: Some(means),
            history_from: s.history_from,
            kept_from: s.kept_from,
            ..Evidence::default()
        },
        related,
    }
}

/// The diagnosis of the analyses' results, most urgent first; `at_end` when the state is of the
/// trace's end (not of where a replay stopped).
#[allow(clippy::too_many_arguments)]
pub(crate) fn diagnose(
    growth: &Growth,
    leaks: &Leaks,
    orphans: &Orphans,
    fragmentation: &Fragmentation,
    ooms: &OomReport,
    device_peak: Option<u64>,
    at_end: bool,
    framework: &Framework,
    carried: (&[RaisedAlert], Option<u64>),
) -> Vec<Finding> {
    let mut steady: Vec<Finding> = causes::group(&growth.steady)
        .iter()
        .map(|c| steady_finding(growth, &growth.steady, c, framework))
        .collect();
    // Fastest first among findings of one severity.
    steady.sort_by(|a, b| {
        let rate = |f: &Finding| f.evidence.rate.unwrap_or(0.0);
        a.severity
            .cmp(&b.severity)
            .then(rate(b).total_cmp(&rate(a)))
    });
    let mut out = steady;
    out.extend(alerted_before(carried.0, carried.1, &out));
    for k in &orphans.by_kind {
        let Advice { cause, fix } = advice::orphan(k.kind);
        let example = orphans.objects.iter().find(|o| o.kind == k.kind);
        out.push(Finding {
            class: FindingClass::Orphan,
            severity: Severity::Warning,
            holder: example.map(|o| Holder::Device { device: o.device }),
            site: example.map(|o| o.site.clone()),
            cause,
            fix,
            evidence: Evidence {
                bytes: k.bytes,
                objects: Some(k.count),
                ..Evidence::default()
            },
            related: Vec::new(),
        });
    }
    // Fragmentation is a finding when it cost something: an out-of-memory failure that the
    // memory held but unusable could have served, or physical memory no mapping reaches. A
    // pool's reserve alone is a cache for reuse, not waste.
    let f = fragmentation;
    let failed = ooms.failures.iter().find(|o| o.request_fits_in_unusable);
    let relief = f
        .oom_relief
        .filter(|r| r.empty_cache_serves || r.expandable_serves);
    if let Some(r) = relief {
        let Advice { cause, fix } = advice::cache_relief(&r);
        out.push(Finding {
            class: FindingClass::Fragmentation,
            severity: Severity::Warning,
            holder: i32::try_from(r.device)
                .ok()
                .map(|device| Holder::Device { device }),
            site: None,
            cause,
            fix,
            evidence: Evidence {
                bytes: if r.empty_cache_serves {
                    r.free_segments
                } else {
                    r.cached_free
                },
                objects: Some(1),
                ..Evidence::default()
            },
            related: Vec::new(),
        });
    } else if failed.is_some() || f.physical.unmapped_bytes >= FRAGMENTATION_BYTES {
        let owner = failed.map_or(OwnerKind::Unknown, |o| o.requester.owner);
        let Advice { cause, fix } = advice::fragmentation(owner, failed.is_some());
        out.push(Finding {
            class: FindingClass::Fragmentation,
            severity: Severity::Warning,
            holder: failed.map(|o| Holder::Device {
                device: o.failure.device,
            }),
            site: failed.map(|o| o.requester.clone()),
            cause,
            fix,
            evidence: Evidence {
                bytes: failed.map_or(f.physical.unmapped_bytes, |o| o.free_but_unusable_bytes),
                share: f.unusable_share,
                objects: failed.map(|_| 1),
                ..Evidence::default()
            },
            related: Vec::new(),
        });
    }
    let named: Vec<SiteName> = out.iter().filter_map(|f| f.site.clone()).collect();
    out.extend(one_off(growth, leaks, device_peak, &named));
    let named: Vec<SiteName> = out.iter().filter_map(|f| f.site.clone()).collect();
    let alerted: Vec<SiteName> = (out.iter())
        .filter(|f| f.evidence.alerted_at_step.is_some())
        .filter_map(|f| f.site.clone())
        .collect();
    out.extend(teardown_only(growth, leaks, at_end, &named, &alerted));
    // Stable: steady growth keeps its order within a severity.
    out.sort_by_key(|f| (f.severity, f.class));
    out
}

/// The largest one-off at a place no finding in `named` names: a peak that fell back, or a rise
/// that stayed, when it is at least [`PEAK_SHARE`] of the device's highest point.
fn one_off(
    growth: &Growth,
    leaks: &Leaks,
    device_peak: Option<u64>,
    named: &[SiteName],
) -> Option<Finding> {
    let fell = growth.peaks.iter().map(|s| (s, s.course.max_bytes, false));
    let stayed = growth
        .one_off_rises
        .iter()
        .filter_map(|s| s.course.phases.late_rise.map(|(_, b)| (s, b, true)));
    // A place an earlier finding names, or one that holds orphans (nothing can free them, or
    // only an orphaned mapping reaches them), is told by that finding: its memory is not a
    // second cause.
    let orphaned = |p: &Place| (leaks.sites.iter()).any(|l| l.site.place == *p && l.orphans > 0);
    let (top, bytes, kept) = (fell.chain(stayed))
        .filter(|(s, _, _)| !named.iter().any(|n| n.place == s.site.place))
        .filter(|(s, _, _)| !orphaned(&s.site.place))
        .max_by_key(|&(_, bytes, _)| bytes)?;
    if (bytes as f64) < device_peak? as f64 * PEAK_SHARE {
        return None;
    }
    let at = kept
        .then(|| top.course.phases.late_rise.map(|r| r.0))
        .flatten();
    let Advice { mut cause, fix } = advice::one_off(top.site.owner, kept);
    // Without steps a rise that stayed is judged along time: a leak that grew in a few large
    // rises (a caching allocator's segments) looks the same, so it is not called "not a leak".
    if kept && growth.axis == SampleAxis::Time && top.site.owner != OwnerKind::Jax {
        cause = cause.replace(" (not a leak)", "")
            + "; or a leak that grew in a few large rises: with no steps to count it cannot \
               be told apart (mark steps, as vramtrace run does)";
    }
    Some(Finding {
        class: FindingClass::Peak,
        severity: Severity::Note,
        holder: Some(top.holder),
        site: Some(top.site.clone()),
        cause,
        fix,
        evidence: Evidence {
            bytes,
            growth_from: at,
            axis: Some(growth.axis),
            live_at_end: Some(top.now_bytes),
            view: Some(top.view),
            ..Evidence::default()
        },
        related: Vec::new(),
    })
}

/// The growth the tracer alerted on before where reading began (a segment's snapshot: rotation
/// deleted what came before, or `--last`/`--since` left it out), on a device whose samples read
/// show no alerting growth: the live analysis saw the steps before, which the reading does not,
/// and a slow leak needs many steps to show. One finding per device, its latest alert: an
/// alert already raised is never outranked by the few steps read after it.
fn alerted_before(alerts: &[RaisedAlert], from: Option<u64>, found: &[Finding]) -> Vec<Finding> {
    let Some(from) = from else {
        return Vec::new();
    };
    let mut out: Vec<Finding> = Vec::new();
    for raised in alerts.iter().rev() {
        let a = &raised.alert;
        let device = Holder::Device { device: a.device };
        let known = (found.iter().chain(&out))
            .any(|f| f.severity == Severity::Alert && f.holder == Some(device));
        // Growth the live set shows stopped long ago is no alert now (the teardown note says
        // it grew, and stopped).
        if known || raised.growth_stopped {
            continue;
        }
        let Advice { cause, fix } = advice::alerted_before(from, a.step);
        out.push(Finding {
            class: FindingClass::SteadyGrowth,
            severity: Severity::Alert,
            holder: Some(device),
            site: raised.site.clone(),
            cause,
            fix,
            evidence: Evidence {
                bytes: a.live_bytes,
                rate: Some(a.rate as f64),
                steps_to_full: a.steps_to_full.map(|s| s as f64),
                seconds_to_full: a.seconds_to_full.map(|s| s as f64),
                alerted_at_step: Some(a.step),
                ..Evidence::default()
            },
            related: Vec::new(),
        });
    }
    out
}

/// What stays live to the end without growing: released by the exit, not a leak (said only of
/// the live set at the end of a trace, not where a replay stopped).
fn teardown_only(
    growth: &Growth,
    leaks: &Leaks,
    at_end: bool,
    named: &[SiteName],
    alerted: &[SiteName],
) -> Option<Finding> {
    // What grows, in any view: a place of a steady row, or its Python line in the same
    // library (the recorder's row of a line and the driver's segments asked for there are one
    // cause, not a leak and a teardown; a cuBLAS workspace made at that line is another).
    let same_line = |a: &SiteName, b: &SiteName| {
        a.owner == b.owner
            && (a.source.as_ref())
                .is_some_and(|x| b.source.as_ref().is_some_and(|y| x.same_line(y)))
    };
    // A place the tracer alerted on before where reading began grew too, where not read.
    let growing = |s: &SiteName| {
        (growth.steady.iter().map(|g| &g.site).chain(alerted))
            .any(|g| g.place == s.place || same_line(g, s))
    };
    // One cause, one finding: a place another finding names (a one-off rise that stayed, an
    // orphan) is that finding's, and its bytes are not counted again here.
    let named_elsewhere = |s: &SiteName| named.iter().any(|n| n.place == s.place);
    let held: Vec<_> = leaks
        .sites
        .iter()
        .filter(|s| s.bytes > 0 && s.orphans == 0)
        .filter(|s| !growing(&s.site) && !named_elsewhere(&s.site))
        .collect();
    // A place whose objects were made over many steps grew, then stopped: named first, and
    // said so (not "without growing").
    let grew = held.iter().find(|s| s.grew_for_long());
    // Named, among the others, by the largest place not at a growing line (a cuBLAS workspace
    // made at a leaking line is counted, but a note "none needed" at that line would read as
    // the leak's).
    let on_growing_line = |s: &SiteName| {
        (growth.steady.iter()).any(|g| {
            (g.site.source.as_ref())
                .is_some_and(|x| s.source.as_ref().is_some_and(|y| x.same_line(y)))
        })
    };
    let named_by = (held.iter()).find(|s| !on_growing_line(&s.site));
    let top = grew.or(named_by).or(held.first()).filter(|_| at_end)?;
    // The evidence counts every place held; the finding names the one holding the most.
    let at = match held.len() {
        1 => String::new(),
        n => format!(" at {n} places"),
    };
    // NCCL communicators never destroyed are memory the program can release (a process group
    // made and left behind): said, with their share of the bytes.
    let comms: std::collections::BTreeSet<u64> = (held.iter())
        .flat_map(|s| s.communicators.iter().copied())
        .collect();
    let comm_bytes: u64 = held.iter().map(|s| s.communicator_bytes).sum();
    let (of_comms, comm_fix) = match comms.len() {
        0 => (String::new(), ""),
        n => (
            format!(
                "; of it, {} is the buffers of {n} NCCL communicator{} never destroyed",
                crate::units::bytes(comm_bytes),
                if n == 1 { "" } else { "s" }
            ),
            "; a communicator made for a new group (new_group, split) is released with \
             ncclCommDestroy or dist.destroy_process_group(group)",
        ),
    };
    let (cause, fix) = match grew {
        Some(g) => (
            format!(
                "held until exit{at}{of_comms}; {}: it grew over steps {}..{} and stopped \
                 (bounded growth, not judged steady)",
                match held.len() {
                    1 => "the place",
                    _ => "named by the place that grew",
                },
                g.first_step,
                g.last_step,
            ),
            "none needed if it fills once (a cache, a warm-up); if a longer run grows there for \
             longer, it is a leak",
        ),
        None => (
            format!(
                "held until exit{at}{}{of_comms}{}",
                made_when(&held),
                match (held.len(), held.first().is_some_and(|h| h.site == top.site)) {
                    (1, _) => "",
                    (_, true) => "; named by the one that holds the most",
                    (_, false) => {
                        "; named by the one that holds the most among those not at a line \
                         that grows"
                    }
                }
            ),
            "none needed: the process's exit releases it; free it first only if the process \
             lives on",
        ),
    };
    let fix = format!("{fix}{comm_fix}");
    Some(Finding {
        class: FindingClass::TeardownOnly,
        severity: Severity::Note,
        holder: None,
        site: Some(top.site.clone()),
        cause,
        fix,
        evidence: Evidence {
            bytes: held.iter().map(|s| s.bytes).sum(),
            // The objects of the memory counted: host objects at the same places are not it.
            objects: Some(held.iter().map(|s| s.device_count).sum()),
            ..Evidence::default()
        },
        related: Vec::new(),
    })
}

/// When the objects held to the end were made, in words: in the first steps (a warm-up, or a
/// program without steps), or over more of them and none since (growth too short to be judged
/// steady: not "without growing").
fn made_when(held: &[&LeakSite]) -> String {
    // The place whose objects were made in the most steps, past the first two.
    let spread = (held.iter())
        .filter(|s| s.last_step >= 2 && s.made_in.len() >= 3)
        .max_by_key(|s| (s.made_in.len(), s.bytes));
    match spread {
        None => " without growing during training".to_string(),
        Some(s) => format!(
            "; {} of it made in {} steps of {}..{} at one place (not judged steady)",
            crate::units::bytes(s.bytes),
            match s.made_in.len() as u64 {
                n if n >= super::leaks::MANY_STEPS => format!("{n} or more"),
                n => n.to_string(),
            },
            s.first_step,
            s.last_step
        ),
    }
}

/// The roles of the rows of `growth.steady` in `findings`: per row, the number (1-based) of the
/// finding it is part of and its role there.
pub(crate) fn row_findings(growth: &Growth, findings: &[Finding]) -> Vec<Option<(usize, Role)>> {
    growth
        .steady
        .iter()
        .map(|s| {
            findings.iter().enumerate().find_map(|(i, f)| {
                if f.class != FindingClass::SteadyGrowth {
                    return None;
                }
                let primary = f.site.as_ref() == Some(&s.site)
                    && f.holder == Some(s.holder)
                    && f.evidence.view == Some(s.view);
                if primary {
                    return Some((i + 1, Role::Cause));
                }
                f.related
                    .iter()
                    .find(|r| r.site == s.site && r.holder == s.holder && r.view == s.view)
                    .map(|r| (i + 1, r.role))
            })
        })
        .collect()
}
