//! The limits a trace can fail on, shared by `vramtrace check` (a program run as a CI gate) and
//! `vramtrace report --fail-on` (traces already taken): steady growth (the growth verdict's
//! ALERT, or more than so many bytes per step), device memory live at the end, orphans, and
//! out-of-memory failures (a program that caught them and went on exits 0).
//!
//! A limit is exceeded when the trace's number is above it; a trace exceeding any limit fails.
//! The numbers are the report's own ([`Analysis`]), so a failure reads the same in the report.

use std::io::{self, Write};

use vramtrace_collector::analysis::{Analysis, FindingClass};
use vramtrace_collector::live::{Holder, SampleAxis};

use vramtrace_collector::units::{parse_count, parse_rate, parse_size};

use crate::render::units::{bytes, count, signed_bytes, unit};

/// One limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// A device whose growth verdict alerts: steady growth above the alert threshold
    /// (`--alert-percent` of device memory per step), or full within the horizon.
    GrowthAlert,
    /// A device growing steadily by more than these bytes per step (a trace without steps is
    /// not compared: its growth is per time window).
    Growth(u64),
    /// More than these bytes of device memory live at the end.
    Leak(u64),
    /// More than this many orphans.
    Orphans(u64),
    /// More than this many out-of-memory failures.
    Oom(u64),
}

impl Limit {
    /// The limit's name, as `--fail-on` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Limit::GrowthAlert | Limit::Growth(_) => "growth",
            Limit::Leak(_) => "leak",
            Limit::Orphans(_) => "orphans",
            Limit::Oom(_) => "oom",
        }
    }
}

/// One item of `--fail-on`: `growth`, `growth=SIZE/step`, `leak[=SIZE]`, `orphans[=N]`,
/// `oom[=N]` (a bare `leak`, `orphans` or `oom` allows none).
pub fn parse_fail_on(text: &str) -> Result<Limit, String> {
    let (name, value) = match text.split_once('=') {
        Some((n, v)) => (n.trim(), Some(v)),
        None => (text.trim(), None),
    };
    match (name, value) {
        ("growth", None) => Ok(Limit::GrowthAlert),
        ("growth", Some(v)) => parse_rate(v).map(Limit::Growth),
        ("leak", None) => Ok(Limit::Leak(0)),
        ("leak", Some(v)) => parse_size(v).map(Limit::Leak),
        ("orphans", None) => Ok(Limit::Orphans(0)),
        ("orphans", Some(v)) => parse_count(v).map(Limit::Orphans),
        ("oom", None) => Ok(Limit::Oom(0)),
        ("oom", Some(v)) => parse_count(v).map(Limit::Oom),
        _ => {
            Err("not a limit (growth, growth=SIZE/step, leak[=SIZE], orphans[=N], oom[=N])".into())
        }
    }
}

/// A limit measured on one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub limit: Limit,
    /// Whether the trace exceeds it.
    pub exceeded: bool,
    /// What was measured, in words, with exact bytes.
    pub found: String,
    /// What the number rests on, where it is weaker than it reads: steps guessed from the
    /// allocation pattern, or no steps at all (growth judged per time window).
    pub note: Option<String>,
    /// Whether the trace's number could be compared with the limit at all.
    pub compared: bool,
    /// Whether the trace was read in full (no gap): a limit not exceeded in part of a trace
    /// is not checked (`--` in the text), not `ok`.
    pub whole: bool,
}

impl serde::Serialize for Measured {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let max = match self.limit {
            Limit::GrowthAlert => None,
            Limit::Growth(n) | Limit::Leak(n) | Limit::Orphans(n) | Limit::Oom(n) => Some(n),
        };
        let mut m = s.serialize_struct("Measured", 6)?;
        m.serialize_field("limit", self.limit.name())?;
        m.serialize_field("max", &max)?;
        m.serialize_field("exceeded", &self.exceeded)?;
        let verdict = match (self.exceeded, self.whole) {
            (true, _) => "failed",
            (false, true) => "ok",
            (false, false) => "not-checked",
        };
        m.serialize_field("verdict", verdict)?;
        m.serialize_field("found", &self.found)?;
        m.serialize_field("note", &self.note)?;
        m.end()
    }
}

/// The limits of `--fail-on` measured on one trace, as `report --json` gives them: the verdict
/// the exit code gives (`not-checked`, exit 2, where the trace could not be read in full, even
/// if a limit was exceeded in what could; `failed`, 1; `ok`, 0), each limit, and what keeps the
/// trace from being checked in full.
#[derive(serde::Serialize)]
pub struct Checked {
    pub verdict: &'static str,
    pub limits: Vec<Measured>,
    pub not_checked: Vec<String>,
}

impl Checked {
    /// `limits` measured on `analysis`, of a trace with `gaps`.
    pub fn of(analysis: &Analysis, limits: &[Limit], mut gaps: Vec<String>) -> Checked {
        let limits = measure(analysis, limits, &mut gaps);
        Checked {
            verdict: verdict(&limits, &gaps),
            limits,
            not_checked: gaps,
        }
    }
}

/// A trace's verdict: `not-checked` where it could not be read in full (`gaps`), whatever was
/// exceeded in what could; `failed` where a limit was exceeded; `ok`.
pub fn verdict(measured: &[Measured], gaps: &[String]) -> &'static str {
    match (gaps.is_empty(), measured.iter().any(|m| m.exceeded)) {
        (false, _) => "not-checked",
        (true, true) => "failed",
        (true, false) => "ok",
    }
}

/// Measures each limit on `analysis`; a limit the trace cannot be measured against (a size per
/// step, in a trace without steps) is added to `gaps`, what keeps the trace from being checked.
pub fn measure(analysis: &Analysis, limits: &[Limit], gaps: &mut Vec<String>) -> Vec<Measured> {
    let per_window = analysis.growth.axis == SampleAxis::Time;
    // A guessed step may be several of the program's, or a part of one: its rate is no size
    // per step, except where nothing grows (none is none in any unit).
    let guessed = analysis.steps.source == "pattern" && grows(analysis);
    let any_device =
        (analysis.growth.holders.iter()).any(|h| matches!(h.holder, Holder::Device { .. }));
    let measured = limits
        .iter()
        .map(|&limit| {
            let compared = !((per_window || guessed) && matches!(limit, Limit::Growth(_)));
            let (exceeded, found) = match limit {
                Limit::GrowthAlert => growth_found(analysis, |h| h.alert, |_| true),
                // A size per step against a growth per time window (of a length the analysis
                // chose) would pass or fail by the window's length: not compared.
                Limit::Growth(max) if per_window => {
                    let (_, found) = growth_found(analysis, |_| false, |_| false);
                    gaps.push(format!(
                        "has no steps (none marked, no repeating allocation pattern): a growth \
                         limit per step cannot be compared with its growth {} (mark steps with \
                         vramtrace_mark_step(), or name an NVTX range with VRAMTRACE_STEP_RANGE; \
                         or gate on the growth alert)",
                        unit(analysis)
                    ));
                    (
                        false,
                        format!("{found}, not comparable with the limit {}", per_step(max)),
                    )
                }
                Limit::Growth(max) if guessed => {
                    let (_, found) = growth_found(analysis, |_| false, |_| false);
                    let every = (analysis.steps.step_ns).map_or(String::new(), |ns| {
                        format!(", one every {}", crate::render::units::duration(ns))
                    });
                    gaps.push(format!(
                        "has steps guessed from the allocation pattern{every}, not marked: one may \
                         span several of the program's steps or part of one, so a growth limit \
                         per step cannot be compared with its growth per guessed step (mark \
                         steps with vramtrace_mark_step(), as `vramtrace run` does at PyTorch's \
                         optimizer steps, or name an NVTX range with VRAMTRACE_STEP_RANGE; or \
                         gate on the growth alert)"
                    ));
                    (
                        false,
                        format!("{found}, not comparable with the limit {}", per_step(max)),
                    )
                }
                Limit::Growth(max) => {
                    let (exceeded, found) =
                        growth_found(analysis, |h| h.steady_growth > max as f64, |a| a.rate > max);
                    (exceeded, format!("{found}, limit {}", per_step(max)))
                }
                Limit::Leak(max) => {
                    let live = analysis.leaks.device;
                    let found = format!(
                        "{} live at the end ({} B in {}), limit {}",
                        bytes(live.bytes),
                        live.bytes,
                        count(live.count, "object"),
                        exact(max)
                    );
                    (live.bytes > max, found)
                }
                Limit::Orphans(max) => {
                    let o = analysis.orphans.total;
                    let found = format!(
                        "{} holding {} B of device memory, limit {max}",
                        count(o.count, "orphan"),
                        o.bytes
                    );
                    (o.count > max, found)
                }
                Limit::Oom(max) => {
                    let ooms = &analysis.ooms;
                    // A segment's snapshot carries the live set, not the failures before it: no
                    // failure read is no proof that none came before.
                    if let (false, Some(from)) = (ooms.total > max, analysis.steps.from_step) {
                        gaps.push(format!(
                            "is read from a segment's snapshot in step {from} (rotation deleted \
                             what came before, or --last/--since left it out): out-of-memory \
                             failures before it are not in the snapshot"
                        ));
                    }
                    (
                        ooms.total > max,
                        format!(
                            "{}, limit {max}",
                            crate::render::findings::oom_found(analysis)
                        ),
                    )
                }
            };
            let mut notes: Vec<String> = Vec::new();
            if matches!(limit, Limit::GrowthAlert | Limit::Growth(_)) && compared && any_device {
                notes.extend(steps_caveat(analysis));
            }
            // The tracer's live alert printed above in the same log: a size limit that passes
            // says it replaced that verdict, or the log contradicts itself.
            if let (Limit::Growth(_), false, Some(raised)) =
                (limit, exceeded, analysis.alerts.first())
            {
                let a = &raised.alert;
                notes.push(format!(
                    "the tracer alerted while the program ran (+{} {}: {}); a size limit \
                     replaces that verdict",
                    bytes(a.rate),
                    crate::render::findings::alert_unit(a),
                    vramtrace_collector::analysis::Reason::words(a)
                ));
            }
            // The alert printed above while the gate passes: the whole run's reading of it, or
            // the log says ALERT and ok without a word between them.
            if let (Limit::GrowthAlert, false, Some(raised)) =
                (limit, exceeded, analysis.alerts.first())
            {
                let why = crate::render::findings::alert_against_diagnosis(analysis, raised);
                let why = match why.is_empty() {
                    true => "; the whole run does not show steady growth above the threshold"
                        .to_string(),
                    false => why,
                };
                notes.push(format!(
                    "the tracer alerted while the program ran ({}){why}",
                    crate::render::findings::alert_line(raised, analysis.growth.step_ns)
                ));
            }
            let note = (!notes.is_empty()).then(|| notes.join("; "));
            Measured {
                limit,
                exceeded,
                found,
                note,
                compared,
                whole: true,
            }
        })
        .collect::<Vec<_>>();
    // Gaps found measuring one limit (a trace without steps) leave every other unchecked too.
    let whole = gaps.is_empty();
    measured
        .into_iter()
        .map(|m| Measured { whole, ..m })
        .collect()
}

/// Whether any device grows steadily.
fn grows(analysis: &Analysis) -> bool {
    (analysis.growth.holders.iter())
        .any(|h| matches!(h.holder, Holder::Device { .. }) && h.steady_growth > 0.0)
}

/// A size per step, as the flag gives it.
fn per_step(max: u64) -> String {
    match max {
        0..1024 => format!("{max} B/step"),
        _ => format!("{}/step ({max} B)", bytes(max)),
    }
}

/// What a growth measured per step rests on, where it is weaker than it reads: steps guessed
/// from the allocation pattern (one may span several of the program's, its rate with it), or
/// no steps (growth per time window, where a leak of a few large rises looks like a one-off).
fn steps_caveat(analysis: &Analysis) -> Option<String> {
    let every = (analysis.steps.step_ns).map_or(String::new(), |ns| {
        format!(", one every {}", crate::render::units::duration(ns))
    });
    match analysis.steps.source {
        "pattern" => Some(format!(
            "steps guessed from the allocation pattern{every}, not marked: one may span several \
             of the program's steps, and its rate with it (mark steps for exact rates)"
        )),
        "none" => Some(format!(
            "no steps: growth judged {}, where a leak that grew in a few large rises is not told \
             from a one-off rise (mark steps)",
            unit(analysis)
        )),
        _ => None,
    }
}

fn exact(n: u64) -> String {
    if n < 1024 {
        format!("{n} B")
    } else {
        format!("{} ({n} B)", bytes(n))
    }
}

/// The growth limit on `analysis`: its devices' growth (`fails`), and, in a trace whose first
/// segments rotation removed, the alerts the tracer raised (`alert_fails`): it judged the whole
/// run, where the steps left on disk may be too few to show a slow leak, or none of its
/// beginning. What was not seen never passes.
fn growth_found(
    analysis: &Analysis,
    fails: impl Fn(&vramtrace_collector::analysis::HolderGrowth) -> bool,
    alert_fails: impl Fn(&vramtrace_collector::format::Alert) -> bool,
) -> (bool, String) {
    let (exceeded, found) = devices_growth(analysis, fails);
    let rotated = analysis.steps.from_step;
    // Not an alert whose growth the live set at the end shows stopped long ago.
    let alert = (analysis.alerts.iter())
        .find(|r| rotated.is_some() && !r.growth_stopped && alert_fails(&r.alert));
    match (exceeded, alert, rotated) {
        (false, Some(raised), Some(from)) => (
            true,
            format!(
                "the tracer alerted {} (reading begins at step {from}, at a segment's snapshot: \
                 rotation removed the steps before it, or --last/--since left them out; the \
                 steps read show {found})",
                crate::render::findings::alert_line(raised, analysis.growth.step_ns)
            ),
        ),
        _ => (exceeded, found),
    }
}

/// The fastest-growing device (among those `fails`, else among all), its rate and the place
/// that grows fastest there.
fn devices_growth(
    analysis: &Analysis,
    fails: impl Fn(&vramtrace_collector::analysis::HolderGrowth) -> bool,
) -> (bool, String) {
    let g = &analysis.growth;
    let devices = g
        .holders
        .iter()
        .filter(|h| matches!(h.holder, Holder::Device { .. }));
    let failing = devices.clone().filter(|h| fails(h));
    let exceeded = failing.clone().count() > 0;
    // Among those failing, else among all; among equals (none grows), the one holding the most
    // at the end, then the first: the device whose memory the run is about.
    let pool: Vec<_> = if exceeded {
        failing.collect()
    } else {
        devices.collect()
    };
    let worst = pool.into_iter().max_by(|a, b| {
        (a.steady_growth.total_cmp(&b.steady_growth))
            .then(a.course.last_bytes.cmp(&b.course.last_bytes))
            .then(std::cmp::Ordering::Greater)
    });
    let Some(h) = worst else {
        return (false, "no device memory".to_string());
    };
    let Holder::Device { device } = h.holder else {
        unreachable!("filtered to devices")
    };
    let per = unit(analysis);
    let mut found = format!(
        "device {device}: {} {per} ({} B)",
        signed_bytes(h.steady_growth),
        h.steady_growth.round() as u64
    );
    // The device's first cause, as the report's diagnosis names it: the line that keeps the
    // memory, with its own rate when that is not the device's.
    // A finding resting on the tracer's alert is not what the steps read show: the alert is
    // said on its own (`growth_found`).
    let mut causes = analysis.diagnosis.iter().filter(|f| {
        f.class == FindingClass::SteadyGrowth
            && f.holder == Some(h.holder)
            && f.site.is_some()
            && f.evidence.alerted_at_step.is_none()
    });
    let place = |site: &vramtrace_collector::analysis::SiteName| {
        let module = site.module_name.as_deref().unwrap_or("unknown");
        format!("{} ({module})", site.label.as_deref().unwrap_or(&site.site))
    };
    if let Some((f, site)) = causes.next().and_then(|f| Some((f, f.site.as_ref()?))) {
        let rate = f.evidence.rate.unwrap_or(0.0);
        let own = if (rate - h.steady_growth).abs() > 0.1 * h.steady_growth {
            format!(", {} {per} of it", signed_bytes(rate))
        } else {
            String::new()
        };
        found.push_str(&format!("{own} at {}", place(site)));
        // The device's other causes: fixing the first alone fails the gate again.
        let more: Vec<_> = causes.filter_map(|f| Some((f, f.site.as_ref()?))).collect();
        if let Some((next, site)) = more.first() {
            let rate = signed_bytes(next.evidence.rate.unwrap_or(0.0));
            found.push_str(&match more.len() {
                1 => format!("; and 1 more cause: {rate} {per} at {}", place(site)),
                n => format!(
                    "; and {n} more causes, the next {rate} {per} at {} (vramtrace report \
                     lists each)",
                    place(site)
                ),
            });
        }
    }
    let out_of_memory = h.projection.and_then(|p| p.out_of_memory_at_step);
    if let Some(step) = out_of_memory.filter(|_| exceeded && h.alert) {
        found.push_str(&format!(", out of memory at step {step}"));
    } else if exceeded && h.alert && h.threshold.is_some_and(|t| h.steady_growth <= t) {
        found.push_str(", full within the horizon");
        let when = h.projection.and_then(|p| {
            crate::render::units::when_full(analysis, p.steps_to_full, p.seconds_to_full)
        });
        if let Some(when) = when {
            found.push_str(&format!(", in {when}"));
        }
    }
    (exceeded, found)
}

/// The error (exit 2) of a check that could not look everywhere: the first thing it could not
/// check, and how many more (each also named above it); and, since exit 2 wins over 1, how
/// many traces exceeded a limit in what could be read, so the last line of a log says both.
pub fn could_not_check(unchecked: &[String], failed: usize) -> anyhow::Error {
    let exceeded = match failed {
        0 => String::new(),
        n => format!(
            "; limits exceeded in what was read ({}, above)",
            count(n as u64, "trace")
        ),
    };
    match unchecked {
        [] | [_] => anyhow::anyhow!("could not check: {}{exceeded}", unchecked.join("")),
        [first, rest @ ..] => anyhow::anyhow!(
            "could not check: {first}; and {} more (named above){exceeded}",
            rest.len()
        ),
    }
}

/// Writes the measured limits of one trace, one line each: `FAIL` or `ok`, the limit, what was
/// found; then what keeps the trace from being checked in full ([`crate::report::Report::gaps`]),
/// one line each. A limit not exceeded in a trace with gaps is not `ok` but `--`, in what could
/// be read: the rest of the trace may exceed it.
pub fn render(out: &mut impl Write, measured: &[Measured], gaps: &[String]) -> io::Result<()> {
    for m in measured {
        let (verdict, partly) = match (m.exceeded, gaps.is_empty()) {
            (true, _) => ("FAIL", ""),
            _ if !m.compared => ("--  ", ""),
            (false, true) => ("ok  ", ""),
            (false, false) => ("--  ", ", in what could be read"),
        };
        let name = match m.limit {
            Limit::GrowthAlert => "growth (alert)".to_string(),
            other => other.name().to_string(),
        };
        writeln!(out, "  {verdict}  {name:<16} {}{partly}", m.found)?;
        if let Some(note) = &m.note {
            writeln!(out, "        note: {note}")?;
        }
    }
    for g in gaps {
        writeln!(out, "  not checked: the trace {g}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_as_documented() {
        assert_eq!(parse_fail_on("growth"), Ok(Limit::GrowthAlert));
        assert_eq!(
            parse_fail_on("growth=1MiB/step"),
            Ok(Limit::Growth(1 << 20))
        );
        assert_eq!(parse_fail_on("growth=0"), Ok(Limit::Growth(0)));
        assert_eq!(parse_fail_on("leak"), Ok(Limit::Leak(0)));
        assert_eq!(parse_fail_on("leak=64MiB"), Ok(Limit::Leak(64 << 20)));
        assert_eq!(parse_fail_on("orphans=3"), Ok(Limit::Orphans(3)));
        assert_eq!(parse_fail_on("oom"), Ok(Limit::Oom(0)));
        assert_eq!(parse_fail_on("oom=2"), Ok(Limit::Oom(2)));
        assert!(parse_fail_on("oom=1MiB").is_err());
        assert!(parse_fail_on("orphans=x").is_err());
        assert!(parse_fail_on("growth=1MiB/s").is_err());
        assert!(parse_fail_on("peak").is_err());
    }
}
