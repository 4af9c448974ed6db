//! The analyses as terminal tables, in the order of what matters: orphans and steady growth
//! first, then out-of-memory failures, leaks, peaks, fragmentation and anomalies. `report` and
//! `replay` print them, the HTML page takes its summary from here.

mod alerts;
pub(crate) mod diagnosis;

use alerts::alert_against_diagnosis;
pub(crate) use alerts::{alert_line, signal_name};

use std::io::{self, Write};

use serde::Serialize;
use vramtrace_collector::analysis::Orphan;
use vramtrace_collector::analysis::{
    Analysis, Finding, FindingClass, OrphanKind, Orphans, Role, Severity, Shape, SiteName,
};
use vramtrace_collector::analysis::{CacheUse, OomRelief, OwnerKind};
use vramtrace_collector::analysis::{HolderGrowth, SiteGrowth};
use vramtrace_collector::live::{AnomalyKind, Category, Holder, SampleAxis};

use crate::tables::{emit, or_unknown, table};
use crate::units::{bytes, count, duration, signed_bytes, unit};
use vramtrace_collector::units::when_full;

/// The site's label (its Python line or native function, when symbols named it) or its
/// `module+offset`, with its owner module.
pub(crate) fn site_label(s: &SiteName) -> String {
    let place = s.label.as_deref().unwrap_or(&s.site);
    format!("{place} ({})", or_unknown(s.module_name.as_deref()))
}

/// `12.0 GiB left, full in 1,930 steps (2.1 h)` for a holder's projection, `out of memory at
/// step 52` for a device that ran out of memory growing, or nothing.
fn full_in(h: &HolderGrowth) -> Option<String> {
    let p = h.projection?;
    if let Some(step) = p.out_of_memory_at_step {
        return Some(format!("out of memory at step {step}"));
    }
    let when = when_full(p.steps_to_full, p.seconds_to_full)?;
    Some(format!("{} left, full in {when}", bytes(p.headroom)))
}

/// `step 12` or `window 12`.
pub(crate) fn at_sample(a: &Analysis, x: u64) -> String {
    match a.growth.axis {
        SampleAxis::Steps => format!("step {x}"),
        SampleAxis::Time => format!("window {x}"),
    }
}

/// Writes the findings; `when` says which moment the live set is of (`at the end`, `at step
/// 12`, `at the peak (event 109)`); `gaps`, what keeps the trace from being read in full
/// ([`crate::load::LoadedTrace::gaps`]), heads them.
pub fn render(
    out: &mut impl Write,
    a: &Analysis,
    top: usize,
    when: &str,
    gaps: &[String],
) -> io::Result<()> {
    summary(out, a, when, gaps)?;
    diagnosis::render(out, a, top, when)?;
    orphan_kinds(out, a)?;
    growth(out, a, top)?;
    ooms(out, a, top)?;
    leaks(out, a, top, when)?;
    peaks(out, a, top)?;
    fragmentation(out, a, top)
}

fn holder_line(h: &HolderGrowth, unit: &str, fraction: f64) -> String {
    let c = &h.course;
    // The fit covers the steady state, which may be fewer samples than the course: said where
    // it is under half of them (a start-up that lasted, a trace read from mid-run).
    let fit = c.fit.map_or(String::new(), |f| {
        let over = match 2 * f.samples < c.samples {
            true => format!(" over {} of them", f.samples),
            false => String::new(),
        };
        format!(
            "; least-squares fit {} {unit}{over}, R² {:.3}",
            signed_bytes(f.slope),
            f.r2
        )
    });
    let threshold = h.threshold.map_or(String::new(), |t| {
        let (rate, limit) = (signed_bytes(h.steady_growth), signed_bytes(t));
        // Where the two read the same, the threshold's bytes tell them apart.
        let limit = match rate == limit {
            true => format!(
                "+{} B",
                vramtrace_collector::units::grouped(t.round() as u64)
            ),
            false => limit,
        };
        // The threshold is a share of the device's memory: said, with the memory it counts.
        let limit = match (fraction > 0.0).then(|| (t / fraction).round() as u64) {
            Some(memory) if memory > 0 => {
                format!(
                    "{limit} {unit}, {}",
                    vramtrace_collector::units::share(fraction, memory)
                )
            }
            _ => format!("{limit} {unit}"),
        };
        match h.steady_growth > t {
            true => format!(" (above the alert threshold of {limit})"),
            false if h.alert => format!(
                " (under the alert threshold of {limit}; it alerts because the device fills \
                 within the horizon)"
            ),
            false => format!(" (alert above {limit})"),
        }
    });
    let full = full_in(h).map_or(String::new(), |f| format!("; {f}"));
    format!(
        "{}: {} {unit} sustained{threshold}{full}; live {} -> {} over {}{fit}",
        h.holder.name(),
        signed_bytes(h.steady_growth),
        bytes(c.first_bytes),
        bytes(c.last_bytes),
        count(c.samples as u64, "sample"),
    )
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
                    parts.push(format!("growth from {}", at_sample(a, g)));
                }
            }
            if let Some((x, rise)) = p.late_rise {
                parts.push(format!(
                    "a one-off rise at {} ({}, kept)",
                    at_sample(a, x),
                    signed_bytes(rise as f64)
                ));
            }
            if let Some(x) = p.full_from {
                parts.push(format!(
                    "out of memory from {} (the course after it is not judged: a full device \
                     cannot grow)",
                    at_sample(a, x)
                ));
            }
            if let Some(t) = p.teardown_from {
                parts.push(format!("teardown from {}", at_sample(a, t)));
            }
            if h.teardown_freed > 0 {
                parts.push(format!(
                    "{} freed after the steady state",
                    bytes(h.teardown_freed)
                ));
            }
            format!("{}: {}", h.holder.name(), parts.join(", "))
        })
        .collect()
}

/// What one kind of orphan is, in words: (noun, why it is an orphan).
fn orphan_words(kind: OrphanKind, members: &[&Orphan]) -> (&'static str, &'static str) {
    let view = || {
        if members.iter().all(|o| o.category == Category::Window) {
            "window"
        } else if members.iter().all(|o| o.category == Category::Registration) {
            "registration"
        } else {
            "registration or window"
        }
    };
    match kind {
        OrphanKind::CommunicatorDestroyed => ("buffer", "of a destroyed communicator"),
        OrphanKind::CommunicatorAborted => ("buffer", "of an aborted communicator"),
        OrphanKind::ContextGone => ("allocation", "of a destroyed context"),
        OrphanKind::PoolDestroyed => ("allocation", "from a destroyed pool"),
        OrphanKind::UnmappedHandle => ("physical handle", "that no mapping uses"),
        OrphanKind::MappingWithoutReservation => ("mapping", "into a freed reservation"),
        OrphanKind::RegistrationBufferGone => (view(), "whose buffer is gone"),
        OrphanKind::RegistrationCommunicatorGone => (view(), "whose communicator is gone"),
    }
}

/// The orphans in one line that agrees with the tables below it: how many, the device memory
/// they hold, then each kind with its bytes. Registrations, windows and mappings hold no device
/// memory of their own (they are views of a buffer counted elsewhere), so their bytes are named
/// for what they are: registered or mapped.
pub(crate) fn orphans_line(o: &Orphans) -> String {
    if o.objects.is_empty() {
        return "none".to_string();
    }
    let kinds: Vec<String> = o
        .by_kind
        .iter()
        .map(|k| {
            let members: Vec<&Orphan> = o.objects.iter().filter(|x| x.kind == k.kind).collect();
            let (noun, why) = orphan_words(k.kind, &members);
            format!(
                "{} {why} ({})",
                counted(k.count, noun),
                orphan_size(k.bytes, &members)
            )
        })
        .collect();
    format!(
        "{}, holding {} of device memory: {}",
        counted(o.objects.len() as u64, "orphan"),
        bytes(o.total.bytes),
        kinds.join("; ")
    )
}

/// What orphans of one kind amount to: the device memory they hold, or for views of a buffer
/// counted elsewhere (registrations, windows, mappings), holding none of their own, what they
/// register or map: `4.0 MiB registered`.
pub(crate) fn orphan_size(held: u64, members: &[&Orphan]) -> String {
    if held > 0 {
        return bytes(held);
    }
    let viewed: u64 = members.iter().map(|x| x.bytes).sum();
    let what = match members.first().map(|x| x.category) {
        Some(Category::Mapping) => "mapped",
        Some(Category::Registration | Category::Window) => "registered",
        _ => "",
    };
    format!("{} {what}", bytes(viewed)).trim_end().to_string()
}

/// `1 buffer`, `2 buffers`.
fn counted(count: u64, noun: &str) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} {noun}{s}")
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
fn summary(out: &mut impl Write, a: &Analysis, when: &str, gaps: &[String]) -> io::Result<()> {
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
    lines.push(line("steps", steps_line(a)));
    let oom = match a.ooms.failures.first() {
        None => "none".to_string(),
        Some(f) => format!(
            "{} failure(s); first: {} of {} on device {} with {} live",
            a.ooms.total,
            f.failure.api.name(),
            bytes(f.failure.request_bytes),
            crate::units::device(f.failure.device),
            bytes(f.live.bytes)
        ),
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
            "; the highest since event {n}, where reading began (what came before is not read: \
             rotation deleted it, or --last/--since)"
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
    let held = match f.unusable_share {
        Some(share) => format!(
            "{} allocated but unusable ({:.1}% of the allocated device memory)",
            bytes(f.unusable_bytes),
            share * 100.0
        ),
        None if f.unusable_bytes > 0 => format!(
            "none: nothing is live; {} kept for reuse",
            bytes(f.unusable_bytes)
        ),
        None => "none".to_string(),
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
    lines.push(line(
        "anomalies",
        format!(
            "{} ({}, {}, {} of unmapped ranges); {lost}",
            an.total,
            count(an.count(AnomalyKind::DoubleFree), "double free"),
            count(an.count(AnomalyKind::UnknownFree), "unknown free"),
            count(an.count(AnomalyKind::UnmapUnmapped), "unmap")
        ),
    ));
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
        return "no steady growth".to_string();
    };
    let holder = top.holder.unwrap_or(Holder::Host);
    let h = a.growth.holders.iter().find(|h| h.holder == holder);
    let mut full = h
        .and_then(full_in)
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
        "device {} (PyTorch's caching allocator): {} reserved, {} in tensors, {} cached free: {} \
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
        "device {}: {} requested with {} free on the device, {} in whole free segments, {} cached \
         free in all: {verdict}",
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
    Some(format!(
        "{} lost; left out above because they could explain them: {}, {} ({} device, {} host), \
         {}",
        count(lost, "event"),
        count(a.anomalies.uncertain, "anomaly"),
        count(u.count(), "live object"),
        bytes(u.device.bytes),
        bytes(u.host.bytes),
        count(a.orphans.uncertain.count, "orphan")
    ))
}

/// Where the steps came from, in words.
fn steps_line(a: &Analysis) -> String {
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
                "{} from the allocation pattern{every}: each begins with the {anchor}; {} repeat every step{weak}",
                count(s.steps, "step"), recurring(p.in_step, p.kinds)
            )
        }
        _ => "no steps (no step marks, no repeating allocation pattern): sampled per time window"
            .to_string(),
    }
}

fn orphan_kinds(out: &mut impl Write, a: &Analysis) -> io::Result<()> {
    if a.orphans.by_kind.is_empty() {
        return Ok(());
    }
    let mut t = table(&["orphan kind", "objects", "device bytes"], &[1, 2]);
    for k in &a.orphans.by_kind {
        t.add_row(vec![
            k.kind.name().to_string(),
            k.count.to_string(),
            bytes(k.bytes),
        ]);
    }
    emit(out, "Orphans by kind", &t)
}

fn site_rows(list: &[SiteGrowth], top: usize, unit: &str) -> comfy_table::Table {
    let headers = [
        "#", "finding", "rate", "R²", "from", "first", "last", "max", "at end", "samples",
        "holder", "site", "alert",
    ];
    let mut t = table(&headers, &[0, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (i, s) in list.iter().take(top).enumerate() {
        let c = &s.course;
        let finding = s.finding.map_or(String::new(), |f| match f.role {
            Role::Cause => f.number.to_string(),
            role => format!("{} ({})", f.number, role.name()),
        });
        t.add_row(vec![
            (i + 1).to_string(),
            finding,
            format!("{} {unit}", signed_bytes(c.slope())),
            c.fit.map_or("-".to_string(), |f| format!("{:.3}", f.r2)),
            c.phases
                .growth_from
                .map_or("-".to_string(), |x| x.to_string()),
            bytes(c.first_bytes),
            bytes(c.last_bytes),
            bytes(c.max_bytes),
            bytes(s.now_bytes),
            c.samples.to_string(),
            s.holder.name(),
            site_label(&s.site),
            if s.alert { "ALERT" } else { "" }.to_string(),
        ]);
    }
    t
}

fn growth(out: &mut impl Write, a: &Analysis, top: usize) -> io::Result<()> {
    let g = &a.growth;
    let unit = unit(a);
    // A line through fewer than two samples says nothing.
    if g.holders.iter().any(|h| h.course.samples >= 2) {
        writeln!(
            out,
            "\nGrowth ({} kept)",
            count(g.ticks.div_ceil(g.stride), "sample")
        )?;
        for h in g.holders.iter().filter(|h| h.course.samples >= 2) {
            let mark = if h.alert { "ALERT " } else { "" };
            // The shape is of the holder's own line; an alert comes from its sites' steady
            // growth, which a line bent by one-off allocations can hide ("flat" beside an alert
            // would contradict it).
            let shape = match h.course.shape {
                Shape::Steady => " [steady]".to_string(),
                _ if h.alert => String::new(),
                other => format!(" [{}]", other.name()),
            };
            writeln!(
                out,
                "  {mark}{}{shape}",
                holder_line(h, &unit, a.growth.alert_fraction)
            )?;
        }
    }
    if !g.steady.is_empty() {
        let title = format!(
            "Steady growth by place (Python line, else call site; {})",
            count(g.steady.len() as u64, "place")
        );
        emit(out, &title, &site_rows(&g.steady, top, &unit))?;
    }
    if !g.peaks.is_empty() {
        let title = format!(
            "One-off peaks by place (rose and fell back; {})",
            count(g.peaks.len() as u64, "place")
        );
        emit(out, &title, &site_rows(&g.peaks, top, &unit))?;
    }
    Ok(())
}

fn ooms(out: &mut impl Write, a: &Analysis, top: usize) -> io::Result<()> {
    for f in &a.ooms.failures {
        let x = &f.failure;
        writeln!(
            out,
            "\nOut of memory: {} asked for {} on device {} (seq {}, step {}) from {}",
            x.api.name(),
            bytes(x.request_bytes),
            crate::units::device(x.device),
            x.seq,
            x.origin.step,
            site_label(&f.requester)
        )?;
        writeln!(
            out,
            "  live then {} in {}; free but unusable {} (pools {} unused, {} physical unmapped){}",
            bytes(f.live.bytes),
            count(f.live.count, "object"),
            bytes(f.free_but_unusable_bytes),
            bytes(f.pool_free_bytes),
            bytes(f.unmapped_physical_bytes),
            if f.request_fits_in_unusable {
                ": the request would have fit there"
            } else {
                ""
            }
        )?;
        if let Some(fit) = f.growth.fit {
            // Time samples are in nanoseconds; a rate per second reads better.
            let (slope, per) = if f.growth.series.axis == "steps" {
                (fit.slope, "step")
            } else {
                (fit.slope * 1e9, "second")
            };
            writeln!(
                out,
                "  before it: {} per {per} over {} (R² {:.3}){}",
                signed_bytes(slope),
                count(fit.samples as u64, "sample"),
                fit.r2,
                if f.growing { ", growing steadily" } else { "" }
            )?;
        }
        let mut t = table(&["#", "bytes", "objects", "site"], &[0, 1, 2]);
        for (i, s) in f.by_site.iter().take(top).enumerate() {
            t.add_row(vec![
                (i + 1).to_string(),
                bytes(s.bytes),
                s.count.to_string(),
                site_label(&s.site),
            ]);
        }
        emit(out, "  Live then, by call site", &t)?;
    }
    if a.ooms.omitted > 0 {
        writeln!(
            out,
            "  {} more out-of-memory failures were counted but not explained",
            a.ooms.omitted
        )?;
    }
    Ok(())
}

fn leaks(out: &mut impl Write, a: &Analysis, top: usize, when: &str) -> io::Result<()> {
    let l = &a.leaks;
    if l.sites.is_empty() {
        return Ok(());
    }
    let headers = [
        "#", "bytes", "host", "objects", "orphans", "steps", "seq", "site",
    ];
    let mut t = table(&headers, &[0, 1, 2, 3, 4]);
    for (i, s) in l.sites.iter().take(top).enumerate() {
        let range = |a: u64, b: u64| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}..{b}")
            }
        };
        t.add_row(vec![
            (i + 1).to_string(),
            bytes(s.bytes),
            bytes(s.host_bytes),
            s.count.to_string(),
            s.orphans.to_string(),
            range(s.first_step, s.last_step),
            range(s.first_seq, s.last_seq),
            site_label(&s.site),
        ]);
    }
    let title = format!(
        "Live {when} by call site ({} of {})",
        l.sites.len().min(top),
        l.sites.len()
    );
    emit(out, &title, &t)
}

fn peaks(out: &mut impl Write, a: &Analysis, top: usize) -> io::Result<()> {
    for p in &a.peaks.holders {
        if p.by_site.is_empty() {
            continue;
        }
        let mut t = table(&["#", "bytes", "objects", "site"], &[0, 1, 2]);
        for (i, s) in p.by_site.iter().take(top).enumerate() {
            t.add_row(vec![
                (i + 1).to_string(),
                bytes(s.bytes),
                s.count.to_string(),
                site_label(&s.site),
            ]);
        }
        // A trace without steps has no step to name (as the FINDINGS line).
        let step = match a.steps.steps {
            0 => String::new(),
            _ => format!(" (step {})", p.peak.step),
        };
        let title = format!(
            "Peak of {}: {} at event {}{step}, by call site",
            p.holder.name(),
            bytes(p.peak.bytes),
            p.peak.event,
        );
        emit(out, &title, &t)?;
    }
    Ok(())
}

fn fragmentation(out: &mut impl Write, a: &Analysis, top: usize) -> io::Result<()> {
    let f = &a.fragmentation;
    if !f.pools.is_empty() {
        let headers = [
            "pool",
            "device",
            "in use",
            "allocations",
            "held up to",
            "unused",
            "trims",
        ];
        let mut t = table(&headers, &[1, 2, 3, 4, 5, 6]);
        for p in f.pools.iter().take(top) {
            let pool = if p.pool.pool == 0 {
                "default".to_string()
            } else {
                format!("{:#x}", p.pool.pool)
            };
            t.add_row(vec![
                pool,
                p.pool.device.to_string(),
                bytes(p.pool.in_use),
                p.pool.allocations.to_string(),
                bytes(p.pool.high_water_since_trim),
                bytes(p.free_bytes),
                p.pool.trims.to_string(),
            ]);
        }
        emit(out, "Memory pools: in use against what they may hold", &t)?;
    }
    let v = &f.address_space;
    if v.reservations > 0 || f.physical.handles > 0 {
        writeln!(
            out,
            "\nVirtual memory: {} reserved in {}, {} mapped; {} physical in {}, {} of it unmapped",
            bytes(v.reserved_bytes),
            count(v.reservations, "reservation"),
            bytes(v.mapped_bytes),
            bytes(f.physical.bytes),
            count(f.physical.handles, "handle"),
            bytes(f.physical.unmapped_bytes)
        )?;
    }
    Ok(())
}

/// `the one kind of allocation that recurs`, `3 of the 5 kinds of allocation that recur`.
fn recurring(repeat: u64, kinds: u64) -> String {
    match (repeat, kinds) {
        (1, 1) => "the one kind of allocation that recurs".into(),
        (r, k) if r == k => format!("all {k} kinds of allocation that recur"),
        (r, k) => format!("{r} of the {k} kinds of allocation that recur"),
    }
}
