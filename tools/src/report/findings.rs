//! The analyses as terminal tables, in the order of what matters: orphans and steady growth
//! first, then out-of-memory failures, leaks, peaks, fragmentation and anomalies. Also the
//! options that tune them, shared by `report` and `replay`.

use std::io::{self, Write};

use clap::Args;
use vramtrace_collector::analysis::growth::{HolderGrowth, SiteGrowth};
use vramtrace_collector::analysis::orphans::Orphan;
use vramtrace_collector::analysis::{Analysis, GrowthConfig, OrphanKind, Orphans, Shape, SiteName};
use vramtrace_collector::live::{AnomalyKind, Category, SampleAxis};

use super::text::{emit, or_unknown, table};
use crate::units::{bytes, parse_size, signed_bytes};

/// Options of the analyses.
#[derive(Debug, Args)]
pub struct AnalysisArgs {
    /// Memory of each device (80GiB, 1073741824, ...): steady growth alerts above
    /// --alert-percent of it per step. Default: the device's highest live point (a lower bound).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub device_memory: Option<u64>,
    /// Growth per step, in percent of device memory, above which steady growth alerts.
    #[arg(long, default_value_t = 0.1, value_name = "PERCENT", value_parser = parse_percent)]
    pub alert_percent: f64,
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if p.is_finite() && p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!("'{text}' is not a percentage between 0 and 100")),
    }
}

impl AnalysisArgs {
    /// The growth settings these options ask for.
    pub fn config(&self) -> GrowthConfig {
        GrowthConfig {
            device_memory: self.device_memory,
            alert_fraction: self.alert_percent / 100.0,
            ..GrowthConfig::default()
        }
    }
}

/// A table in the report's style, for `replay`.
pub(crate) fn new_table(headers: &[&str], right: &[usize]) -> comfy_table::Table {
    table(headers, right)
}

/// The site's label (its Python line or native function, when symbols named it) or its
/// `module+offset`, with its owner module.
fn site_label(s: &SiteName) -> String {
    let place = s.label.as_deref().unwrap_or(&s.site);
    format!("{place} ({})", or_unknown(s.module_name.as_deref()))
}

/// `per step` or `per 64 ms window`.
fn unit(a: &Analysis) -> String {
    match (a.growth.axis, a.growth.window_ns) {
        (SampleAxis::Time, Some(w)) => format!("per {} window", duration(w)),
        _ => "per step".to_string(),
    }
}

fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.1} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{} ms", n / 1_000_000),
        n => format!("{} µs", n / 1000),
    }
}

/// Writes the findings; `when` says which moment the live set is of (`at the end`, `at step
/// 12`, `at the peak (event 109)`).
pub fn render(out: &mut impl Write, a: &Analysis, top: usize, when: &str) -> io::Result<()> {
    summary(out, a, when)?;
    orphan_kinds(out, a)?;
    growth(out, a, top)?;
    ooms(out, a, top)?;
    leaks(out, a, top, when)?;
    peaks(out, a, top)?;
    fragmentation(out, a, top)
}

fn holder_line(h: &HolderGrowth, unit: &str) -> String {
    let c = &h.course;
    let fit = c.fit.map_or(String::new(), |f| {
        format!(
            "; its line {} {unit}, R² {:.3}",
            signed_bytes(f.slope),
            f.r2
        )
    });
    let threshold = h.threshold.map_or(String::new(), |t| {
        format!(" (alert above {})", signed_bytes(t))
    });
    format!(
        "{}: {} {unit} sustained{threshold}; live {} -> {} over {} samples{fit}",
        h.holder.name(),
        signed_bytes(h.steady_growth),
        bytes(c.first_bytes),
        bytes(c.last_bytes),
        c.samples,
    )
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
fn orphans_line(o: &Orphans) -> String {
    if o.objects.is_empty() {
        return "none".to_string();
    }
    let kinds: Vec<String> = o
        .by_kind
        .iter()
        .map(|k| {
            let members: Vec<&Orphan> = o.objects.iter().filter(|x| x.kind == k.kind).collect();
            let (noun, why) = orphan_words(k.kind, &members);
            let size = if k.bytes > 0 {
                bytes(k.bytes)
            } else {
                let viewed: u64 = members.iter().map(|x| x.bytes).sum();
                let what = match members.first().map(|x| x.category) {
                    Some(Category::Mapping) => "mapped",
                    Some(Category::Registration | Category::Window) => "registered",
                    _ => "",
                };
                format!("{} {what}", bytes(viewed)).trim_end().to_string()
            };
            format!("{} {why} ({size})", counted(k.count, noun))
        })
        .collect();
    format!(
        "{}, holding {} of device memory: {}",
        counted(o.objects.len() as u64, "orphan"),
        bytes(o.total.bytes),
        kinds.join("; ")
    )
}

/// `1 buffer`, `2 buffers`.
fn counted(count: u64, noun: &str) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} {noun}{s}")
}

/// The FINDINGS block: one line per question, the answer first.
pub(crate) fn summary(out: &mut impl Write, a: &Analysis, when: &str) -> io::Result<()> {
    writeln!(out, "\nFINDINGS")?;
    writeln!(out, "  orphans        {}", orphans_line(&a.orphans))?;
    let unit = unit(a);
    let alerts: Vec<&HolderGrowth> = a.growth.holders.iter().filter(|h| h.alert).collect();
    let growth = match (alerts.first(), a.growth.steady.first()) {
        (Some(h), _) => format!("STEADY GROWTH on {}", holder_line(h, &unit)),
        (None, Some(s)) => format!(
            "steady growth below the alert threshold: {} {unit} at {}",
            signed_bytes(s.course.slope()),
            site_label(&s.site)
        ),
        (None, None) => "no steady growth".to_string(),
    };
    writeln!(out, "  growth         {growth}")?;
    let s = &a.steps;
    let steps = match s.source {
        "marks" => format!("{} steps from step marks", s.steps),
        "pattern" => format!(
            "{} steps from a repeating allocation ({} at site {:#x}/{})",
            s.steps,
            bytes(s.pattern.map_or(0, |p| p.bytes)),
            s.pattern.map_or(0, |p| p.site.caller),
            s.pattern.map_or(0, |p| p.site.stack)
        ),
        _ => {
            "no steps (no step marks, no repeating allocation): sampled per time window".to_string()
        }
    };
    writeln!(out, "  steps          {steps}")?;
    let oom = match a.ooms.failures.first() {
        None => "none".to_string(),
        Some(f) => format!(
            "{} failure(s); first: {} of {} on device {} with {} live",
            a.ooms.total,
            f.failure.api.name(),
            bytes(f.failure.request_bytes),
            f.failure.device,
            bytes(f.live.bytes)
        ),
    };
    writeln!(out, "  out of memory  {oom}")?;
    let l = &a.leaks;
    writeln!(
        out,
        "  live           {when}: {} device in {} objects, {} host in {}, {} other objects, at {} call sites",
        bytes(l.device.bytes),
        l.device.count,
        bytes(l.host.bytes),
        l.host.count,
        l.views,
        l.sites.len()
    )?;
    for p in &a.peaks.holders {
        writeln!(
            out,
            "  peak           {}: {} in {} objects at event {} (seq {}, step {}); {} now",
            p.holder.name(),
            bytes(p.peak.bytes),
            p.peak.count,
            p.peak.event,
            p.peak.seq,
            p.peak.step,
            bytes(p.now_bytes)
        )?;
    }
    let f = &a.fragmentation;
    let share = f
        .unusable_share
        .map_or("-".to_string(), |s| format!("{:.1}%", s * 100.0));
    writeln!(
        out,
        "  fragmentation  {} allocated but unusable ({share} of device memory held); {} reserved VA, {} mapped",
        bytes(f.unusable_bytes),
        bytes(f.address_space.reserved_bytes),
        bytes(f.address_space.mapped_bytes)
    )?;
    let an = &a.anomalies;
    let dropped = an
        .dropped_events
        .map_or("unknown".to_string(), |d| d.to_string());
    writeln!(
        out,
        "  anomalies      {} ({} double frees, {} unknown frees, {} unmaps of unmapped ranges); {dropped} events dropped",
        an.total,
        an.count(AnomalyKind::DoubleFree),
        an.count(AnomalyKind::UnknownFree),
        an.count(AnomalyKind::UnmapUnmapped)
    )?;
    lost_events(out, a)
}

/// What the events the tracer lost could explain, and was therefore left out above.
fn lost_events(out: &mut impl Write, a: &Analysis) -> io::Result<()> {
    let lost = a.anomalies.lost_events;
    if lost == 0 {
        return Ok(());
    }
    let u = &a.leaks.uncertain;
    writeln!(
        out,
        "  lost events    {lost} events were lost; left out above because they could explain them: \
         {} anomalies, {} live objects ({} device, {} host), {} orphans",
        a.anomalies.uncertain,
        u.count(),
        bytes(u.device.bytes),
        bytes(u.host.bytes),
        a.orphans.uncertain.count
    )
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
        "#", "slope", "R²", "first", "last", "max", "samples", "holder", "site", "alert",
    ];
    let mut t = table(&headers, &[0, 1, 2, 3, 4, 5, 6]);
    for (i, s) in list.iter().take(top).enumerate() {
        let c = &s.course;
        t.add_row(vec![
            (i + 1).to_string(),
            format!("{} {unit}", signed_bytes(c.slope())),
            c.fit.map_or("-".to_string(), |f| format!("{:.3}", f.r2)),
            bytes(c.first_bytes),
            bytes(c.last_bytes),
            bytes(c.max_bytes),
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
            "\nGrowth ({} samples kept)",
            g.ticks.div_ceil(g.stride)
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
            writeln!(out, "  {mark}{}{shape}", holder_line(h, &unit))?;
        }
    }
    if !g.steady.is_empty() {
        let title = format!("Steady growth by call site ({} sites)", g.steady.len());
        emit(out, &title, &site_rows(&g.steady, top, &unit))?;
    }
    if !g.peaks.is_empty() {
        let title = format!(
            "One-off peaks by call site (rose and fell back; {} sites)",
            g.peaks.len()
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
            x.device,
            x.seq,
            x.origin.step,
            site_label(&f.requester)
        )?;
        writeln!(
            out,
            "  live then {} in {} objects; free but unusable {} (pools {} unused, {} physical unmapped){}",
            bytes(f.live.bytes),
            f.live.count,
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
                "  before it: {} per {per} over {} samples (R² {:.3}){}",
                signed_bytes(slope),
                fit.samples,
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
        let title = format!(
            "Peak of {}: {} at event {} (step {}), by call site",
            p.holder.name(),
            bytes(p.peak.bytes),
            p.peak.event,
            p.peak.step
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
            "\nVirtual memory: {} reserved in {} reservations, {} mapped; {} physical in {} handles, {} of it unmapped",
            bytes(v.reserved_bytes),
            v.reservations,
            bytes(v.mapped_bytes),
            bytes(f.physical.bytes),
            f.physical.handles,
            bytes(f.physical.unmapped_bytes)
        )?;
    }
    Ok(())
}
