//! The analyses as terminal tables, in the order of what matters: orphans and steady growth
//! first, then out-of-memory failures, leaks, peaks, fragmentation and anomalies. `report` and
//! `replay` print them, the HTML page takes its summary from here.

mod alerts;
pub(crate) mod diagnosis;
mod ooms;
mod orphans;
mod summary;

pub(crate) use alerts::{alert_against_diagnosis, alert_line, alert_unit, signal_name};
pub(crate) use ooms::oom_found;
use ooms::oom_headline;
use orphans::orphan_kinds;
pub(crate) use orphans::{orphan_size, orphans_line};
pub(crate) use summary::summary_lines;
pub use summary::SummaryLine;
use summary::{full_in, summary};

use std::io::{self, Write};

use vramtrace_collector::analysis::{Analysis, Finding, Role, Shape, SiteName};
use vramtrace_collector::analysis::{HolderGrowth, SiteGrowth};
use vramtrace_collector::live::SampleAxis;

use crate::render::tables::{emit, or_unknown, table};
use crate::render::units::{bytes, count, duration, signed_bytes, unit};

/// The site's label (its Python line or native function, when symbols named it) or its
/// `module+offset`, with its owner module.
pub(crate) fn site_label(s: &SiteName) -> String {
    let place = s.label.as_deref().unwrap_or(&s.site);
    format!("{place} ({})", or_unknown(s.module_name.as_deref()))
}

/// The tracer's alert a finding rests on, when it rests on one (growth the tracer saw before
/// where reading began).
pub(crate) fn alert_of<'a>(
    a: &'a Analysis,
    f: &Finding,
) -> Option<&'a vramtrace_collector::analysis::RaisedAlert> {
    let step = f.evidence.alerted_at_step?;
    (a.alerts.iter()).rfind(|r| {
        r.alert.step == step
            && f.holder
                == Some(vramtrace_collector::live::Holder::Device {
                    device: r.alert.device,
                })
    })
}

/// What a finding's rate is per: the analysis's step or window, or its alert's.
pub(crate) fn rate_unit(a: &Analysis, f: &Finding) -> String {
    match alert_of(a, f) {
        Some(r) => alert_unit(&r.alert),
        None => unit(a),
    }
}

/// `step 12`, or `window 12 (1.5 s)`: a time window with the time it begins, counted from the
/// first event as `replay --at` counts it, so that the moment can be replayed.
pub(crate) fn at_sample(a: &Analysis, x: u64) -> String {
    match (a.growth.axis, a.growth.window_ns) {
        (SampleAxis::Time, Some(w)) => format!("window {x} ({})", duration(x * w)),
        (SampleAxis::Time, None) => format!("window {x}"),
        (SampleAxis::Steps, _) => format!("step {x}"),
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
    growth(out, a, top, when)?;
    ooms(out, a, top)?;
    leaks(out, a, top, when)?;
    peaks(out, a, top)?;
    fragmentation(out, a, top)
}

fn holder_line(a: &Analysis, h: &HolderGrowth, unit: &str, fraction: f64) -> String {
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
    let full = full_in(a, h).map_or(String::new(), |f| format!("; {f}"));
    format!(
        "{}: {} {unit} sustained{threshold}{full}; live {} -> {} over {}{fit}",
        h.holder.name(),
        signed_bytes(h.steady_growth),
        bytes(c.first_bytes),
        bytes(c.last_bytes),
        count(c.samples as u64, "sample"),
    )
}

/// How many of `list`'s places [`site_rows`] lists: the first `top`, and every ALERT.
fn places_listed(list: &[SiteGrowth], top: usize) -> String {
    let listed = (list.iter().enumerate())
        .filter(|(i, s)| *i < top || s.alert)
        .count();
    match listed < list.len() {
        true => format!("{listed} of {}", count(list.len() as u64, "place")),
        false => count(list.len() as u64, "place"),
    }
}

/// The places of `list`, numbered in its order: the first `top`, and every ALERT after them.
fn site_rows(list: &[SiteGrowth], top: usize, unit: &str) -> comfy_table::Table {
    let headers = [
        "#", "finding", "rate", "R²", "after", "first", "last", "max", "at end", "samples",
        "holder", "site", "alert",
    ];
    let mut t = table(&headers, &[0, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (i, s) in list.iter().enumerate().filter(|(i, s)| *i < top || s.alert) {
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

fn growth(out: &mut impl Write, a: &Analysis, top: usize, when: &str) -> io::Result<()> {
    let g = &a.growth;
    let unit = unit(a);
    // A line through fewer than two samples says nothing.
    if g.holders.iter().any(|h| h.course.samples >= 2) {
        // The quiet after a pattern that stopped recurring is in every series: said, or the
        // series' own count reads as another number.
        let quiet = match g.quiet {
            0 => String::new(),
            n => format!(
                "; and {n} at its last value for the quiet after the allocation pattern's last \
                 step"
            ),
        };
        writeln!(
            out,
            "\nGrowth ({} kept{quiet})",
            count(g.ticks.div_ceil(g.stride), "sample")
        )?;
        for h in g.holders.iter().filter(|h| h.course.samples >= 2) {
            let mark = if h.alert { "ALERT " } else { "" };
            // The shape is of the holder's own line; an alert comes from its sites' steady
            // growth, which a line bent by one-off allocations can hide ("flat" beside an alert
            // would contradict it).
            let shape = match h.course.shape {
                // The total rose steadily, but no place did: each rise is another place's, once
                // (the sustained growth is 0, the places that rose are one-offs).
                Shape::Steady if h.steady_growth == 0.0 => {
                    " [steady in total, though no place grows steadily: each rise is another \
                     place's]"
                        .to_string()
                }
                Shape::Steady => " [steady]".to_string(),
                _ if h.alert => String::new(),
                other => format!(" [{}]", other.name()),
            };
            writeln!(
                out,
                "  {mark}{}{shape}",
                holder_line(a, h, &unit, a.growth.alert_fraction)
            )?;
        }
    }
    if !g.steady.is_empty() {
        let title = format!(
            "Steady growth by place (Python line, else call site; {})",
            places_listed(&g.steady, top)
        );
        emit(out, &title, &site_rows(&g.steady, top, &unit))?;
    }
    if !g.peaks.is_empty() {
        let title = format!(
            "One-off peaks by place (rose and fell back; {})",
            places_listed(&g.peaks, top)
        );
        emit(out, &title, &site_rows(&g.peaks, top, &unit))?;
    }
    if !g.steady.is_empty() || !g.peaks.is_empty() {
        // A place can hold more at the end than at any sample: the samples are taken as steps
        // begin, the end after the last one.
        let taken = match g.axis {
            SampleAxis::Time => "",
            _ => " (as steps begin)",
        };
        writeln!(
            out,
            "  after: the sample the growth began after (its objects are made in the steps that \
             follow); first, last, max: live at the place at the samples{taken}; at end: live \
             {when}"
        )?;
    }
    Ok(())
}

fn ooms(out: &mut impl Write, a: &Analysis, top: usize) -> io::Result<()> {
    // A failure like one shown (the same call from the same place) is counted under it, not
    // shown again: a program that goes on after a refusal fails the same way step after step.
    let key = |f: &vramtrace_collector::analysis::OomFailure| {
        (f.failure.api, f.failure.device, site_label(&f.requester))
    };
    let mut shown: Vec<(usize, u64, u64, u64)> = Vec::new();
    for (i, f) in a.ooms.failures.iter().enumerate() {
        if let Some(first) = (a.ooms.failures[..i].iter()).position(|g| key(g) == key(f)) {
            let step = f.failure.origin.step;
            match shown.iter_mut().find(|s| s.0 == first) {
                Some(s) => (s.1, s.3) = (s.1 + 1, step),
                None => shown.push((first, 1, step, step)),
            }
        }
    }
    for (i, f) in a.ooms.failures.iter().enumerate() {
        let first = (a.ooms.failures[..i].iter()).position(|g| key(g) == key(f));
        if first.is_some() {
            continue;
        }
        let x = &f.failure;
        // A trace without steps names no step.
        let step = match a.steps.source {
            "none" => String::new(),
            _ => format!(", step {}", x.origin.step),
        };
        writeln!(
            out,
            "\nOut of memory: {} asked for {} on device {} (seq {}{step}) from {}",
            x.api.name(),
            bytes(x.request_bytes),
            crate::render::units::device(x.device),
            x.seq,
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
        // What the device had free, where its size is known: a request that fit in it failed
        // for want of a piece that large (fragmentation), or memory the trace does not see.
        let g = &a.growth;
        let known = matches!(g.device_memory_source, "given" | "sampled");
        if let Some(memory) = g.device_memory.filter(|_| known) {
            let free = memory.saturating_sub(f.live.bytes);
            // PyTorch's recorder, where it ran, kept what the driver said was free at its first
            // failure: the difference is memory the trace does not see (the CUDA context, …).
            let first_here = (a.ooms.failures.iter()).position(|g| g.failure.device == x.device);
            let driver_free = (a.fragmentation.oom_relief)
                .filter(|r| r.device == i64::from(x.device) && first_here == Some(i))
                .map(|r| r.device_free.min(free));
            let why = match driver_free {
                _ if x.request_bytes > free => "the request was more than that".to_string(),
                Some(d) if x.request_bytes > d => "the request was more than the driver had: \
                     memory the trace does not see held the rest"
                    .to_string(),
                Some(_) => format!(
                    "the request fit in it: the driver had no free piece of {} (fragmented)",
                    bytes(x.request_bytes)
                ),
                None => format!(
                    "the request fit in it: the driver had no free piece of {} (fragmented), \
                     or memory the trace does not see held the rest",
                    bytes(x.request_bytes)
                ),
            };
            let counted = match driver_free {
                Some(d) => format!(
                    "as the trace counts it, {} as the driver told PyTorch ({} held by what the \
                     trace does not see: the CUDA context, other processes)",
                    bytes(d),
                    bytes(free - d)
                ),
                None => "(as the trace counts it)".to_string(),
            };
            writeln!(
                out,
                "  free then {} of the device's {} {counted}; {why}",
                bytes(free),
                bytes(memory)
            )?;
        }
        // A line through two samples is any line: no rate is said on fewer than three.
        if let Some(fit) = f.growth.fit.filter(|fit| fit.samples >= 3) {
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
        if let Some(&(_, n, from, to)) = shown.iter().find(|s| s.0 == i) {
            let steps = match from == to {
                true => format!("step {from}"),
                false => format!("steps {from}-{to}"),
            };
            writeln!(
                out,
                "  and {} like it, from the same place, in {steps} (each in `--json`'s \
                 ooms.failures)",
                count(n, "more failure")
            )?;
        }
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
