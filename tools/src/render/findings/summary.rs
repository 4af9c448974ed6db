//! The FINDINGS block: one line per question a user asks of a trace (is it whole, orphans,
//! growth, phases, out-of-memory, leaks, peaks, the cache, steps), the answer first, as the text
//! report and the HTML page say them.

use std::io::{self, Write};

use serde::Serialize;
use vramtrace_collector::analysis::HolderGrowth;
use vramtrace_collector::analysis::{Analysis, Finding, FindingClass, Severity, Shape};
use vramtrace_collector::analysis::{CacheUse, OomRelief, OwnerKind};
use vramtrace_collector::live::Holder;

use super::alerts::{alert_against_diagnosis, alert_line};
use super::orphans::orphans_line;
use super::{at_sample, site_label};
use crate::render::units::{bytes, count, duration, signed_bytes, unit, when_full};

/// `12.0 GiB left, full in 1,930 steps (2.1 h)` for a holder's projection, `out of memory at
/// step 52` for a device that ran out of memory growing, or nothing.
pub(super) fn full_in(a: &Analysis, h: &HolderGrowth) -> Option<String> {
    let p = h.projection?;
    if let Some(step) = p.out_of_memory_at_step {
        return Some(format!("out of memory at step {step}"));
    }
    let when = when_full(a, p.steps_to_full, p.seconds_to_full)?;
    Some(format!("{} left, full in {when}", bytes(p.headroom)))
}

/// The phases of each device with samples: `device 0: warm-up to step 3 (+1.2 GiB), steady
/// steps 3..99, growth from step 40, teardown freed 1.3 GiB`.
fn phases_lines(a: &Analysis) -> Vec<String> {
    a.growth
        .holders
        .iter()
        .filter(|h| h.course.samples >= 2 && matches!(h.holder, Holder::Device { .. }))
        .map(|h| {
            let c = &h.course;
            let p = &c.phases;
            let mut parts = Vec::new();
            parts.push(format!("steady from {}", at_sample(a, p.steady_from)));
            if let Some(g) = p.growth_from {
                if g > p.steady_from {
                    parts.push(format!("growth after {}", at_sample(a, g)));
                }
            }
            if let Some((x, rise)) = p.late_rise {
                // A flat course kept what it rose by; one that peaked gave it back.
                let kept = match c.shape {
                    Shape::Flat => "kept",
                    _ => "given back later",
                };
                // An evaluation every so many steps rises as often: not a one-off.
                parts.push(match p.late_rises {
                    0 | 1 => format!(
                        "a one-off rise at {} ({}, {kept})",
                        at_sample(a, x),
                        signed_bytes(rise as f64)
                    ),
                    n => format!(
                        "{n} rises of up to {} after the warm-up, the first at {} ({kept})",
                        signed_bytes(rise as f64),
                        at_sample(a, x)
                    ),
                });
            }
            if let Some(x) = p.full_from {
                parts.push(format!(
                    "out of memory from {} (the course after it is not judged: with its \
                     allocations refused and nothing growing, it says nothing more)",
                    at_sample(a, x)
                ));
            }
            if let Some(t) = p.teardown_from {
                parts.push(format!("teardown from {}", at_sample(a, t)));
            }
            // Net: what the last step made, and the teardown freed, are both in it.
            if h.teardown_freed > 0 {
                parts.push(format!(
                    "{} less live at the end than at the steady state's last sample",
                    bytes(h.teardown_freed)
                ));
            }
            format!("{}: {}", h.holder.name(), parts.join(", "))
        })
        .collect()
}

/// One line of the FINDINGS block: the question (`orphans`, `growth`, `phases`...) and its
/// answer.
#[derive(Debug, Serialize)]
pub struct SummaryLine {
    pub topic: &'static str,
    pub text: String,
}

fn line(topic: &'static str, text: String) -> SummaryLine {
    SummaryLine { topic, text }
}

/// The FINDINGS block: one line per question, the answer first.
pub(super) fn summary(
    out: &mut impl Write,
    a: &Analysis,
    when: &str,
    gaps: &[String],
) -> io::Result<()> {
    writeln!(out, "\nFINDINGS")?;
    for l in summary_lines(a, when, gaps) {
        writeln!(out, "  {:<14} {}", l.topic, l.text)?;
    }
    Ok(())
}

/// The lines of the FINDINGS block, as the text report and the HTML page say them; a trace
/// that could not be read in full says so first (`gaps`), since every answer after it covers
/// only what was read.
pub(crate) fn summary_lines(a: &Analysis, when: &str, gaps: &[String]) -> Vec<SummaryLine> {
    let mut lines = Vec::new();
    if !gaps.is_empty() {
        lines.push(line(
            "trace",
            format!(
                "INCOMPLETE: it {}; what follows covers only what could be read",
                gaps.join(", and ")
            ),
        ));
    }
    lines.push(line("orphans", orphans_line(&a.orphans)));
    let unit = unit(a);
    lines.push(line("growth", growth_headline(a, &unit)));
    for text in phases_lines(a) {
        lines.push(line("phases", text));
    }
    for alert in &a.alerts {
        let said = alert_line(alert, a.growth.step_ns) + &alert_against_diagnosis(a, alert);
        lines.push(line("alerted", said));
    }
    lines.push(line("steps", steps_line(a, when)));
    let oom = match (a.ooms.total, a.steps.from_step) {
        (0, None) => "none".to_string(),
        // A segment's snapshot does not carry the failures before it.
        (0, Some(from)) => {
            format!("none since step {from}, where reading began (failures before it are not read)")
        }
        _ => super::oom_found(a),
    };
    lines.push(line("out of memory", oom));
    let l = &a.leaks;
    // What a lost event may have freed is not among them, but it is live in the trace: said
    // here, so that this line and the live set's tables add up.
    let u = &l.uncertain;
    let doubtful = match u.count() {
        0 => String::new(),
        n => format!(
            "; besides, {} device and {} host in {} a lost event may have freed",
            bytes(u.device.bytes),
            bytes(u.host.bytes),
            count(n, "object")
        ),
    };
    lines.push(line(
        "live",
        format!(
            "{when}: {} device in {}, {} host in {}, {}, at {}{doubtful}",
            bytes(l.device.bytes),
            count(l.device.count, "object"),
            bytes(l.host.bytes),
            l.host.count,
            count(l.views, "other object"),
            count(l.sites.len() as u64, "call site")
        ),
    ));
    // Read from a segment's snapshot: a higher point before it is not known.
    let since = a.peaks.from_event.map_or(String::new(), |n| {
        format!(
            "; the highest since event {n}, where reading began at a segment's snapshot (what \
             came before is not read: rotation deleted it, a segment is missing, or --last, \
             --since or the replay's point started later)"
        )
    });
    for p in &a.peaks.holders {
        // A trace without steps has no step to name.
        let step = match a.steps.steps {
            0 => String::new(),
            _ => format!(", step {}", p.peak.step),
        };
        lines.push(line(
            "peak",
            format!(
                "{}: {} in {} at event {} (seq {}{step}); {} now{since}",
                p.holder.name(),
                bytes(p.peak.bytes),
                count(p.peak.count, "object"),
                p.peak.event,
                p.peak.seq,
                bytes(p.now_bytes)
            ),
        ));
    }
    let f = &a.fragmentation;
    // Physical memory no mapping reaches is lost until freed; a pool's reserve is not (the pool
    // serves its own allocations from it), and the most it held is only its upper bound.
    let unmapped = f.physical.unmapped_bytes;
    let reserve: u64 = f.pools.iter().map(|p| p.free_bytes).sum();
    let mut parts = Vec::new();
    if unmapped > 0 {
        parts.push(format!(
            "{} of physical memory mapped nowhere: unusable",
            bytes(unmapped)
        ));
    }
    if reserve > 0 {
        parts.push(format!(
            "up to {} kept by memory pools for reuse",
            bytes(reserve)
        ));
    }
    let held = match (f.unusable_share, parts.is_empty()) {
        (_, true) => "none".to_string(),
        (Some(share), false) => format!(
            "{} ({:.1}% of the allocated device memory)",
            parts.join("; "),
            share * 100.0
        ),
        (None, false) => format!("none: nothing is live; {}", parts.join("; ")),
    };
    lines.push(line(
        "fragmentation",
        format!(
            "{held}; {} reserved VA, {} mapped",
            bytes(f.address_space.reserved_bytes),
            bytes(f.address_space.mapped_bytes)
        ),
    ));
    for c in &f.allocator {
        lines.push(line("cache", cache_line(c)));
    }
    if let Some(r) = &f.oom_relief {
        lines.push(line("oom relief", relief_line(r)));
    }
    let an = &a.anomalies;
    // "Dropped" only when events were lost; a trace read before its end (a replay, a cut
    // trace) has no count from the tracer yet, only the gaps seen so far.
    let lost = match (an.lost_events, an.dropped_events) {
        // What the file lost (a cut or damaged trace) heads the findings: the tracer lost none.
        (0, Some(_)) if !gaps.is_empty() => "no event lost by the tracer".to_string(),
        (0, Some(_)) => "no event lost".to_string(),
        (0, None) => {
            "no event lost so far (the tracer's count of its losses comes last)".to_string()
        }
        (n, _) => format!("{} lost", count(n, "event")),
    };
    // Each kind seen, by the name the Anomalies table below and the JSON give it.
    let seen = match an.total {
        0 => "none".to_string(),
        n => {
            let kinds: Vec<String> = (an.by_kind.iter())
                .map(|k| format!("{} {}", k.count, k.kind.name()))
                .collect();
            format!("{n} ({})", kinds.join(", "))
        }
    };
    lines.push(line("anomalies", format!("{seen}; {lost}")));
    lines.extend(lost_events(a).map(|text| line("lost events", text)));
    lines
}

/// The headline of growth: the most urgent cause of steady growth (the diagnosis's first), at
/// the line that keeps its memory, and how many causes grow on its holder in all.
fn growth_headline(a: &Analysis, unit: &str) -> String {
    let causes: Vec<&Finding> = a
        .diagnosis
        .iter()
        .filter(|f| f.class == FindingClass::SteadyGrowth)
        .collect();
    let Some(top) = causes.first() else {
        // Reading begun at a segment's snapshot a few samples before: too few to judge.
        let samples = (a.growth.holders.iter())
            .filter(|h| matches!(h.holder, Holder::Device { .. }))
            .map(|h| h.course.samples)
            .max()
            .unwrap_or(0);
        return match a.steps.from_step {
            Some(from) if samples < a.growth.min_samples => format!(
                "not judged: {} read since step {from}, where reading began (at least {} are \
                 needed: read from earlier, `report` of every segment on disk or `--since`)",
                count(samples as u64, "sample"),
                a.growth.min_samples
            ),
            _ => "no steady growth".to_string(),
        };
    };
    let holder = top.holder.unwrap_or(Holder::Host);
    let h = a.growth.holders.iter().find(|h| h.holder == holder);
    let mut full = h
        .and_then(|h| full_in(a, h))
        .map_or(String::new(), |f| format!("; {f}"));
    // A size given on the command line below what the device holds makes every growth full at
    // once: said, not taken as the answer.
    if let (Some(m), "given", Some(0)) = (
        a.growth.device_memory,
        a.growth.device_memory_source,
        h.and_then(|h| h.projection).map(|p| p.headroom),
    ) {
        full.push_str(&format!(
            " (--device-memory {} is less than the device held: give its size)",
            bytes(m)
        ));
    }
    let on_holder = causes.iter().filter(|f| f.holder == Some(holder)).count();
    // The time to full is the holder's, at its own rate: where that is not the cause's, say it.
    let (rate, in_all) = (
        signed_bytes(top.evidence.rate.unwrap_or(0.0)),
        signed_bytes(h.map_or(0.0, |h| h.steady_growth)),
    );
    let others = match on_holder {
        1 if rate == in_all || full.is_empty() => String::new(),
        1 => format!(" ({} grows {in_all} {unit} in all)", holder.name()),
        n => format!(" ({n} causes on {}, {in_all} {unit} in all)", holder.name()),
    };
    let what = if top.severity == Severity::Alert {
        format!("STEADY GROWTH on {}", holder.name())
    } else {
        format!(
            "steady growth below the alert threshold on {}",
            holder.name()
        )
    };
    let place = top.site.as_ref().map_or("?".to_string(), site_label);
    if let Some(raised) = super::alert_of(a, top) {
        // Growth the steps read do not show: the tracer's alert, said as such.
        return format!(
            "{what}: {rate} {} at {place}, as the tracer alerted at step {} (the steps read, \
             from step {}, do not show it)",
            super::alert_unit(&raised.alert),
            raised.alert.step,
            a.steps.from_step.unwrap_or(0)
        );
    }
    format!("{what}: {rate} {unit} at {place}{others}{full}")
}

/// PyTorch's cache on one device in words: what it reserved and what its tensors use, and of
/// the rest what `empty_cache()` returns and what stays split, unusable for the requests that
/// came.
fn cache_line(c: &CacheUse) -> String {
    let unusable = match c.smallest_unserved_request {
        Some(min) => format!(
            ", {} of it in blocks smaller than any request that took a new segment (the smallest {})",
            bytes(c.unusable),
            bytes(min)
        ),
        None => String::new(),
    };
    format!(
        "device {} (PyTorch's caching allocator): {} reserved, {} in tensors' blocks (their sizes \
         rounded up to the allocator's), {} cached free: {} \
         in whole free segments (torch.cuda.empty_cache() returns them), {} split in segments in \
         use{unusable}; largest free block {}",
        c.device,
        bytes(c.reserved),
        bytes(c.allocated),
        bytes(c.cached_free),
        bytes(c.free_segments),
        bytes(c.split_free),
        bytes(c.largest_free_block)
    )
}

/// Whether PyTorch's cache could have served its out-of-memory request, in words.
fn relief_line(r: &OomRelief) -> String {
    let verdict = match (r.empty_cache_serves, r.expandable_serves) {
        (true, _) => "empty_cache() would have served it",
        (false, true) => "expandable_segments:True would have served it, empty_cache() not",
        (false, false) => "neither empty_cache() nor expandable_segments:True would have served it",
    };
    format!(
        "device {}: {} requested with {} free on the device (as the driver told PyTorch), {} in \
         whole free segments, {} cached free in all: {verdict}",
        r.device,
        bytes(r.requested),
        bytes(r.device_free),
        bytes(r.free_segments),
        bytes(r.cached_free)
    )
}

/// What the events the tracer lost could explain, and was therefore left out above.
fn lost_events(a: &Analysis) -> Option<String> {
    let lost = a.anomalies.lost_events;
    if lost == 0 {
        return None;
    }
    let u = &a.leaks.uncertain;
    // Places that grew as lost frees make a place grow: said with the first, at its rate.
    let growth = match a.growth.lost_frees.first() {
        None => String::new(),
        Some(s) => format!(
            ", steady growth at {} ({} {} at {}: it freed all but {} of the {} objects it \
             made, fewer than the lost events could have freed)",
            count(a.growth.lost_frees.len() as u64, "place"),
            signed_bytes(s.growth.course.slope()),
            unit(a),
            site_label(&s.growth.site),
            vramtrace_collector::units::grouped(s.kept),
            vramtrace_collector::units::grouped(s.made),
        ),
    };
    Some(format!(
        "{} lost; left out above because they could explain them: {}, {} ({} device, {} host), \
         {}{growth}",
        count(lost, "event"),
        count(a.anomalies.uncertain, "anomaly"),
        count(u.count(), "live object"),
        bytes(u.device.bytes),
        bytes(u.host.bytes),
        count(a.orphans.uncertain.count, "orphan")
    ))
}

/// Where the steps came from, in words; `when`, the moment the analysis is of (`at the end`,
/// or a replay's point, before which a trace that marks steps may have marked none yet).
fn steps_line(a: &Analysis, when: &str) -> String {
    let s = &a.steps;
    let every = s
        .step_ns
        .map_or(String::new(), |ns| format!(", one every {}", duration(ns)));
    match (s.source, &s.pattern) {
        ("marks", _) => format!("{} from step marks{every}", count(s.steps, "step")),
        ("iterations", _) => format!(
            "{}, one per call of the program's model (no optimizer step: each outermost model \
             call is a step){every}",
            count(s.steps, "step")
        ),
        ("pattern", Some(p)) => {
            let anchor = match (p.anchor.event, &p.anchor.range) {
                (_, Some(name)) => format!("NVTX range \"{name}\""),
                (event, None) => {
                    let place = s.anchor_site.as_ref().map_or("?".to_string(), site_label);
                    let what = if event == "free" {
                        "free of"
                    } else {
                        "allocation of"
                    };
                    format!("{what} {} at {place}", bytes(p.anchor.bytes))
                }
            };
            // One or two kinds (a leak's own allocation, a segment the allocator adds now and
            // then) may recur once every few training steps rather than every step; so may a
            // caching allocator's segments, which it takes as it runs short, whatever recurs
            // (not a stream-ordered allocator's, which asks the driver for every tensor).
            let caching = (s.anchor_site.as_ref()).is_some_and(|a| {
                matches!(a.owner, OwnerKind::Torch | OwnerKind::Cupy)
                    && !a.api.is_some_and(|api| api.contains("Async"))
            });
            let exact =
                "mark steps for exact rates (vramtrace run marks PyTorch's optimizer steps)";
            let weak = if p.kinds <= 2 {
                format!("; few kinds recur, so a step may span several of the program's: {exact}")
            } else if caching {
                format!(
                    "; it begins where a caching allocator took memory, which it does as it runs \
                     short, so a step may span several of the program's: {exact}"
                )
            } else {
                String::new()
            };
            format!(
                "{} from the allocation pattern{every}: each begins with the {anchor}; {} every step{weak}",
                count(s.steps, "step"), recurring(p.in_step, p.kinds)
            )
        }
        _ if when != "at the end" => format!(
            "no steps up to this point ({when}: no step mark, no repeating allocation pattern \
             before it): sampled per time window"
        ),
        _ => "no steps (no step marks, no repeating allocation pattern): sampled per time window"
            .to_string(),
    }
}

/// `the one kind of allocation that recurs repeats`, `3 of the 5 kinds of allocation that
/// recur repeat`.
fn recurring(repeat: u64, kinds: u64) -> String {
    match (repeat, kinds) {
        (1, 1) => "the one kind of allocation that recurs repeats".into(),
        (1, k) => format!("1 of the {k} kinds of allocation that recur repeats"),
        (r, k) if r == k => format!("all {k} kinds of allocation that recur repeat"),
        (r, k) => format!("{r} of the {k} kinds of allocation that recur repeat"),
    }
}
