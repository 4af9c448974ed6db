//! The diagnosis in words: one block per finding, most urgent first, each with where it is, the
//! evidence it rests on, the other views of the same cause, the likely cause and the usual fix.
//! [`words`] says it once; the text report writes it as lines, the HTML page as a section.

use std::io::{self, Write};

use serde::Serialize;

use vramtrace_collector::analysis::DRIVER;
use vramtrace_collector::analysis::{
    Analysis, Finding, FindingClass, LineMeaning, OwnerKind, Related, Role, Severity,
};
use vramtrace_collector::live::SampleAxis;
use vramtrace_collector::torch::VIEW;

use super::{at_sample, site_label};
use crate::render::units::{bytes, signed_bytes, unit, when_full};

/// Findings listed in full at most, besides the alerts (`--top` lowers it); the rest are
/// counted.
const SHOWN: usize = 10;

/// The diagnosis in words, as the text report and the HTML page say it.
#[derive(Debug, Serialize)]
pub struct Diagnosis {
    /// `2 findings, most urgent first`.
    pub heading: String,
    /// The findings listed in full, most urgent first.
    pub shown: Vec<FindingWords>,
    /// Findings past those, counted only (`--json` lists them).
    pub more: usize,
}

/// One finding in words: the headline (severity, class and place), then the evidence, the
/// other views of the same cause, the cause and the fix.
#[derive(Debug, Serialize)]
pub struct FindingWords {
    pub number: usize,
    /// `ALERT`, `warning` or `note`.
    pub severity: &'static str,
    pub class: &'static str,
    /// `at SITE on HOLDER`, `at SITE`, `on HOLDER`, or empty.
    pub place: String,
    pub evidence: String,
    pub also: Vec<String>,
    pub cause: String,
    pub fix: String,
}

/// The diagnosis of `a` (`None` when there are no findings); `when` says which moment the live
/// set is of (`at the end`, `at step 12`).
pub fn words(a: &Analysis, top: usize, when: &str) -> Option<Diagnosis> {
    let list = &a.diagnosis;
    if list.is_empty() {
        return None;
    }
    let s = if list.len() == 1 { "" } else { "s" };
    let n = list.len();
    // Every alert is listed, whatever `--top` asks: a shorter report must not hide a leak.
    let alerts = (list.iter())
        .filter(|f| f.severity == Severity::Alert)
        .count();
    let shown = top.clamp(1, SHOWN).max(alerts);
    Some(Diagnosis {
        heading: format!("{n} finding{s}, most urgent first"),
        shown: list
            .iter()
            .take(shown)
            .enumerate()
            .map(|(i, f)| finding_words(a, i + 1, f, when))
            .collect(),
        more: list.len().saturating_sub(shown),
    })
}

/// The report's answer in one line, for its head: whether the trace was read whole, the
/// out-of-memory failures, the most urgent finding (with its rate, for growth), how many others
/// the DIAGNOSIS lists. A user reads this line first. `in_report`: the report's FINDINGS and
/// DIAGNOSIS follow it; else (the summary after a run) the line points at `vramtrace report`
/// for them.
pub fn verdict(a: &Analysis, gaps: &[String], in_report: bool) -> String {
    let incomplete = match (gaps.is_empty(), in_report) {
        (true, _) => "",
        (false, true) => "INCOMPLETE trace (FINDINGS says why); in what could be read: ",
        (false, false) => "INCOMPLETE trace (the report says why); in what could be read: ",
    };
    let rest_in = match in_report {
        true => "DIAGNOSIS below",
        false => "in vramtrace report",
    };
    // Out-of-memory failures are news whatever the findings, unless the first finding is the
    // growth that ran its device out (its rate says so below): a peak that did it is a note.
    let grew_out =
        (a.diagnosis.first()).is_some_and(|f| f.evidence.out_of_memory_at_step.is_some());
    let head = match super::oom_headline(a) {
        Some(oom) if !grew_out => format!("{incomplete}{oom}; "),
        _ => incomplete.to_string(),
    };
    let Some(first) = a.diagnosis.first() else {
        return format!("{head}no finding");
    };
    let words = finding_words(a, 1, first, "");
    let place = match words.place.is_empty() {
        true => String::new(),
        false => format!(" {}", words.place),
    };
    if first.severity == Severity::Note {
        // Notes only (most urgent first): a run with nothing to fix says so first.
        let n = a.diagnosis.len();
        let (s, which) = if n == 1 {
            ("", "")
        } else {
            ("s", ", the first")
        };
        return format!(
            "{head}no ALERT or warning; {n} note{s}{which}: {}{place}",
            words.class
        );
    }
    let unit = super::rate_unit(a, first);
    // Growth that ran its device out of memory: the failure is the news, said with the rate.
    let rate = match (first.class, first.evidence.rate) {
        (FindingClass::SteadyGrowth, Some(rate)) => {
            let oom = (first.evidence.out_of_memory_at_step).map_or(String::new(), |step| {
                format!(", out of memory at step {step}")
            });
            format!(", {} {unit}{oom}", signed_bytes(rate))
        }
        _ => String::new(),
    };
    // The other alerts apart from the rest: three lines leaking are three causes to fix.
    let rest = &a.diagnosis[1..];
    let alerts = rest
        .iter()
        .filter(|f| f.severity == Severity::Alert)
        .count();
    let others = rest.len() - alerts;
    let s = |n: usize| if n == 1 { "" } else { "s" };
    let mut more = Vec::new();
    if alerts > 0 {
        more.push(format!("{alerts} more ALERT{}", s(alerts)));
    }
    if others > 0 {
        let word = if alerts > 0 { "other" } else { "more" };
        more.push(format!("{others} {word} finding{}", s(others)));
    }
    let more = match more.is_empty() {
        true => String::new(),
        false => format!("; {} ({rest_in})", more.join(", ")),
    };
    // A line in the driver's view of a caching allocator made it grow: what keeps the memory
    // may be another line (PyTorch's recorder names it). Said here, where the user reads first.
    let asked = match (first.class, first.evidence.line_means) {
        (FindingClass::SteadyGrowth, Some(LineMeaning::Asked)) => {
            " (that line is where the allocator asked the driver for memory: what keeps it may \
             be another)"
        }
        _ => "",
    };
    format!(
        "{head}{}: {}{place}{rate}{asked}{more}",
        words.severity, words.class
    )
}

/// Finding number `number` in words.
fn finding_words(a: &Analysis, number: usize, f: &Finding, when: &str) -> FindingWords {
    let severity = match f.severity {
        Severity::Alert => "ALERT",
        Severity::Warning => "warning",
        Severity::Note => "note",
    };
    let place = match (&f.site, f.holder) {
        (Some(s), Some(h)) => format!("at {} on {}", site_label(s), h.name()),
        (Some(s), None) => format!("at {}", site_label(s)),
        (None, Some(h)) => format!("on {}", h.name()),
        (None, None) => String::new(),
    };
    FindingWords {
        number,
        severity,
        class: f.class.name(),
        place,
        evidence: evidence(a, f, when),
        also: f.related.iter().map(|r| related(a, r)).collect(),
        cause: f.cause.clone(),
        fix: f.fix.clone(),
    }
}

/// Writes the diagnosis (nothing when there are no findings); `when` says which moment the
/// live set is of (`at the end`, `at step 12`).
pub fn render(out: &mut impl Write, a: &Analysis, top: usize, when: &str) -> io::Result<()> {
    let Some(d) = words(a, top, when) else {
        return Ok(());
    };
    writeln!(out, "\nDIAGNOSIS ({})", d.heading)?;
    for f in &d.shown {
        let place = if f.place.is_empty() {
            String::new()
        } else {
            format!(" {}", f.place)
        };
        writeln!(out, "  {}. {}: {}{place}", f.number, f.severity, f.class)?;
        writeln!(out, "     evidence  {}", f.evidence)?;
        for also in &f.also {
            writeln!(out, "     also      {also}")?;
        }
        writeln!(out, "     cause     {}", f.cause)?;
        writeln!(out, "     fix       {}", f.fix)?;
    }
    if d.more > 0 {
        writeln!(out, "  ({} more in --json)", d.more)?;
    }
    Ok(())
}

/// Who a view is, in words.
fn view_name(view: &str) -> &str {
    match view {
        VIEW => "PyTorch's recorder",
        other => other,
    }
}

/// What a view sees one of.
fn view_unit(view: &str) -> &str {
    match view {
        VIEW => "tensor",
        _ => "allocation",
    }
}

/// Another view of a finding's cause, in words.
fn related(a: &Analysis, r: &Related) -> String {
    let rate = format!("{} {}", signed_bytes(r.rate), unit(a));
    let place = site_label(&r.site);
    match r.role {
        Role::Segments => format!(
            "{} reserved {rate} for them: segments asked for at {place}",
            allocator_of(r.site.owner)
        ),
        Role::Host => format!("host memory grows beside it: {rate} at {place}"),
        // Counted in the finding's rate and bytes, which are the communicators' together.
        Role::Communicators => {
            format!("of it, the same communicators' buffers at another place: {rate} at {place}")
        }
        Role::SameLine | Role::Cause if r.view == DRIVER => {
            format!("the driver sees the same line: {rate} at {place}")
        }
        Role::SameLine | Role::Cause => format!("{} sees the same line: {rate}", view_name(r.view)),
    }
}

/// The allocator a framework's driver calls come from.
fn allocator_of(owner: OwnerKind) -> &'static str {
    match owner {
        OwnerKind::Torch => "PyTorch's caching allocator",
        OwnerKind::Jax => "XLA's allocator",
        OwnerKind::Cupy => "CuPy's memory pool",
        OwnerKind::TensorFlow => "TensorFlow's allocator",
        _ => "the allocator",
    }
}

/// The evidence of a finding in words.
fn evidence(a: &Analysis, f: &Finding, when: &str) -> String {
    let e = &f.evidence;
    match f.class {
        FindingClass::SteadyGrowth if e.alerted_at_step.is_some() => {
            // The growth the tracer saw before where reading began: its alert is the evidence.
            match super::alert_of(a, f) {
                Some(r) => format!(
                    "the tracer's alert {}; the steps read, from step {}, show no steady growth \
                     on the device",
                    super::alert_line(r, a.growth.step_ns),
                    a.steps.from_step.unwrap_or(0)
                ),
                None => format!("{} {}", signed_bytes(e.rate.unwrap_or(0.0)), unit(a)),
            }
        }
        FindingClass::SteadyGrowth => {
            let mut parts = vec![format!(
                "{} {}",
                signed_bytes(e.rate.unwrap_or(0.0)),
                unit(a)
            )];
            if let Some(x) = e.growth_from {
                // After that sample: the growth's objects are made in the steps that follow it,
                // as the live table numbers them.
                parts[0] += &format!(" after {}", at_sample(a, x));
                if let Some(read) = e.kept_from {
                    // Judged on what is still live, made across the steps rotation deleted.
                    parts[0] += &format!(
                        ", judged on the objects it still holds at the end, by the step each \
                         was made in (the samples before step {read}, where reading began at a \
                         segment's snapshot, are not read)"
                    );
                } else if e.history_from == Some(x) {
                    // The view's first whole sample: what came before it is not seen.
                    parts[0] += ", where the recorder's history begins whole (it keeps only its \
                                 latest actions: the growth may have begun earlier)";
                } else if a.steps.from_step.is_some_and(|from| x <= from) {
                    parts[0] += ", where reading began (what came before is not read: the \
                                 growth may have begun earlier)";
                }
            }
            let r2 = e.r2.map_or(String::new(), |r| format!(", R² {r:.3}"));
            parts.push(format!("{} rises{r2}", e.rises.unwrap_or(0)));
            parts.push(format!("{} at the last sample", bytes(e.bytes)));
            if let Some(freed) = e.freed_at_teardown {
                parts.push(format!(
                    "{} of it freed only after the steady state (teardown hides it)",
                    bytes(freed)
                ));
            } else if let Some(end) = e.live_at_end {
                parts.push(format!("{} still live {when}", bytes(end)));
            }
            let full = match e.out_of_memory_at_step {
                Some(step) => Some(format!("device out of memory at step {step}")),
                None => when_full(a, e.steps_to_full, e.seconds_to_full).map(|when| {
                    // The time to full is the device's, every cause on it together: said where
                    // that is not this finding's rate (three leaks name one time).
                    let device = (a.growth.holders.iter()).find(|h| Some(h.holder) == f.holder);
                    match (device.map(|h| h.steady_growth), e.rate) {
                        (Some(all), Some(rate)) if (all - rate).abs() > 0.01 * all.abs() => {
                            format!(
                                "device full in {when} at its whole growth ({} {})",
                                signed_bytes(all),
                                unit(a)
                            )
                        }
                        _ => format!("device full in {when}"),
                    }
                }),
            };
            parts.extend(full);
            match (e.view, e.line_means) {
                (Some(view), _) if view != DRIVER => parts.push(format!(
                    "each {} seen by {}",
                    view_unit(view),
                    view_name(view)
                )),
                (_, Some(LineMeaning::Asked)) => parts.push(
                    "the line is where the allocator asked the driver for memory".to_string(),
                ),
                _ => {}
            }
            parts.join("; ")
        }
        FindingClass::Orphan | FindingClass::TeardownOnly => {
            let n = e.objects.unwrap_or(0);
            let s = if n == 1 { "" } else { "s" };
            // Orphans that hold no memory of their own (a registration of a freed buffer) say
            // what they register or map, as the FINDINGS line does.
            let members: Vec<&vramtrace_collector::analysis::Orphan> = (a.orphans.objects.iter())
                .filter(|o| f.class == FindingClass::Orphan && Some(&o.site) == f.site.as_ref())
                .collect();
            let size = match members.is_empty() {
                true => bytes(e.bytes),
                false => super::orphan_size(e.bytes, &members),
            };
            format!("{size} in {n} object{s}")
        }
        FindingClass::Fragmentation => match e.objects {
            Some(_) => format!(
                "an out-of-memory failure with {} held but unusable, enough for the request",
                bytes(e.bytes)
            ),
            None => format!("{} of physical memory unmapped", bytes(e.bytes)),
        },
        FindingClass::Peak => match (e.growth_from, e.live_at_end.unwrap_or(0)) {
            // What the place holds at the end is all its memory, the rise a part of it; or
            // nothing, where the teardown freed it.
            (Some(x), 0) => format!(
                "rose by {} at {} and stayed until the teardown freed it",
                bytes(e.bytes),
                at_sample(a, x)
            ),
            (Some(x), held) => format!(
                "rose by {} at {} and stayed (the place holds {} {when})",
                bytes(e.bytes),
                at_sample(a, x),
                bytes(held)
            ),
            // The highest sample, not the highest moment: the peak tables, taken event by
            // event, can hold more at the same place.
            (None, _) => format!(
                "rose to {} and fell back ({})",
                bytes(e.bytes),
                match a.growth.axis {
                    SampleAxis::Steps => {
                        "its highest at a step boundary; within a step it can hold more"
                    }
                    SampleAxis::Time => {
                        "its highest at a time window's end; within a window it can hold more"
                    }
                }
            ),
        },
    }
}
