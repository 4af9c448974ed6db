//! The chart's data as the page embeds it: times in microseconds since the first event, bytes as
//! plain numbers (exact in JavaScript up to 8 PiB), each device's envelope and bands, the steps,
//! ranges, marks, failures, the tracer's alerts and the analysis' phases, the axis and grouping
//! the page opens with, and the stack behind every holder a click can name.

use std::collections::BTreeMap;

use serde::Serialize;
use vramtrace_collector::analysis::{Analysis, SiteGrowth, SiteName};
use vramtrace_collector::live::{Holder, SampleAxis};
use vramtrace_collector::symbols::{collapse, Attribution, CallRef, Granularity, Symbolizer};

use crate::load::LoadedTrace;
use crate::render::findings;
use crate::report::Report;
use crate::timeline::{bands, Timeline};

/// Holders stacked per device; the rest form one band.
const BANDS: usize = 8;
/// Step ticks drawn at most; longer runs draw every n-th.
const STEP_TICKS: usize = 1000;

#[derive(Serialize)]
pub struct Chart {
    /// The x axis the page opens with: `steps` when the analysis samples per step (each step
    /// the same width, so a long start-up does not squeeze the run), else `time`.
    pub axis: &'static str,
    /// The grouping the bands open with: `python` for a program with Python frames, else
    /// `function`.
    pub by: &'static str,
    pub duration_us: u64,
    /// End of each stretch.
    pub x: Vec<u64>,
    pub devices: Vec<DeviceChart>,
    /// Start of every `steps_every`-th step, from step 1 (the start-up before it is step 0).
    pub steps: Vec<u64>,
    pub steps_every: usize,
    pub steps_total: usize,
    /// Steps begun before the first event read (a trace read from a snapshot): the axis counts
    /// on from them.
    pub steps_first: u64,
    pub ranges: Vec<RangeSpan>,
    pub range_depth: u32,
    pub ranges_omitted: u64,
    pub marks: Vec<MarkPoint>,
    pub failures: Vec<FailurePoint>,
    pub alerts: Vec<AlertPoint>,
    pub phases: Vec<PhaseSpan>,
    /// Stack lines by key: `stack:caller:py_stack` for call sites, `group:N` for the report's
    /// groups.
    pub stacks: BTreeMap<String, Vec<String>>,
}

#[derive(Serialize)]
pub struct DeviceChart {
    pub device: i32,
    pub min: Vec<u64>,
    pub max: Vec<u64>,
    pub last: Vec<u64>,
    pub peak_bytes: u64,
    pub peak_us: u64,
    pub end_bytes: u64,
    /// Bands by grouping: `python`, `module`, `function`.
    pub bands: BTreeMap<&'static str, Vec<BandSeries>>,
}

#[derive(Serialize)]
pub struct BandSeries {
    pub label: String,
    /// Key into `stacks`; `null` for the band of the rest.
    pub stack: Option<String>,
    pub values: Vec<u64>,
}

#[derive(Serialize)]
pub struct RangeSpan {
    pub name: String,
    pub thread: u32,
    pub depth: u32,
    pub start_us: u64,
    pub end_us: u64,
}

#[derive(Serialize)]
pub struct MarkPoint {
    pub name: String,
    pub t_us: u64,
}

#[derive(Serialize)]
pub struct FailurePoint {
    pub api: &'static str,
    pub bytes: u64,
    pub device: i32,
    pub result: i32,
    pub oom: bool,
    pub t_us: u64,
}

/// An alert the tracer raised while the program ran, on the device it is about.
#[derive(Serialize)]
pub struct AlertPoint {
    pub device: i32,
    pub step: u64,
    pub t_us: u64,
    /// The FINDINGS block's `alerted` line.
    pub text: String,
    /// The signal sent to the program (`SIGUSR1`), if any.
    pub signal: Option<&'static str>,
}

/// A phase of a device's course as the analysis found it: `warm-up`, `steady` and `teardown`
/// are stretches, `growth` is the moment the sustained growth began (`end_us` equal to
/// `start_us`).
#[derive(Serialize)]
pub struct PhaseSpan {
    pub device: i32,
    pub kind: &'static str,
    /// `growth after step 3`, in the text report's words.
    pub label: String,
    pub start_us: u64,
    pub end_us: u64,
}

/// The key of a call's stack in [`Chart::stacks`].
pub fn stack_key(call: CallRef) -> String {
    format!("{}:{:#x}:{}", call.stack, call.caller, call.py_stack)
}

fn site_call(s: &SiteName) -> CallRef {
    CallRef {
        caller: s.caller,
        stack: s.stack,
        py_stack: s.py_stack,
    }
}

/// Every call site the page's tables name (the first `top` of each list, and every ALERT).
fn table_sites<'a>(a: &'a Analysis, top: usize) -> Vec<CallRef> {
    let g = &a.growth;
    let mut sites: Vec<&SiteName> = Vec::new();
    // The growth tables list every ALERT too, whatever `top` is.
    let listed = |(i, s): (usize, &'a SiteGrowth)| (i < top || s.alert).then_some(&s.site);
    sites.extend(g.steady.iter().enumerate().filter_map(listed));
    sites.extend(g.peaks.iter().enumerate().filter_map(listed));
    sites.extend(a.leaks.sites.iter().take(top).map(|s| &s.site));
    sites.extend(a.orphans.objects.iter().take(top).map(|o| &o.site));
    for p in &a.peaks.holders {
        sites.extend(p.by_site.iter().take(top).map(|s| &s.site));
    }
    for f in &a.ooms.failures {
        sites.push(&f.requester);
        sites.extend(f.by_site.iter().take(top).map(|s| &s.site));
    }
    sites.into_iter().map(site_call).collect()
}

/// Where sample `x` of the analysis' growth series begins, in microseconds since the first
/// event: the start of step `x` (step 0 is the start-up before the first step), or of time
/// window `x`.
fn sample_us(a: &Analysis, timeline: &Timeline, x: u64) -> u64 {
    let ns = match (a.growth.axis, a.growth.window_ns) {
        (SampleAxis::Time, Some(w)) => x.saturating_mul(w),
        _ => match timeline.step_start(x) {
            Some(t) => timeline.since_start(t),
            // Under way when reading began (step 0, or the steps a snapshot counted).
            None if x <= timeline.first_step => 0,
            None => u64::MAX,
        },
    };
    (ns / 1000).min(timeline.since_start(timeline.last_ns) / 1000)
}

/// The phases the analysis found on each device (as the FINDINGS block's `phases` lines say
/// them), as spans of time.
fn phases(a: &Analysis, timeline: &Timeline) -> Vec<PhaseSpan> {
    let end = timeline.since_start(timeline.last_ns) / 1000;
    let mut out = Vec::new();
    for h in a.growth.holders.iter().filter(|h| h.course.samples >= 2) {
        let Holder::Device { device } = h.holder else {
            continue;
        };
        let p = &h.course.phases;
        let at = |x| sample_us(a, timeline, x);
        let steady = at(p.steady_from);
        let teardown = p.teardown_from.map(at);
        let mut span = |kind, label: String, start_us, end_us| {
            out.push(PhaseSpan {
                device,
                kind,
                label,
                start_us,
                end_us,
            })
        };
        if steady > 0 {
            span("warm-up", "warm-up".to_string(), 0, steady);
        }
        let label = format!("steady from {}", findings::at_sample(a, p.steady_from));
        span("steady", label, steady, teardown.unwrap_or(end));
        if let Some(g) = p.growth_from.filter(|&g| g > p.steady_from) {
            let label = format!("growth after {}", findings::at_sample(a, g));
            span("growth", label, at(g), at(g));
        }
        if let (Some(t), Some(x)) = (teardown, p.teardown_from) {
            let label = format!("teardown from {}", findings::at_sample(a, x));
            span("teardown", label, t, end);
        }
    }
    out
}

/// The tracer's alerts, each within the step it was raised at: the tracer judges at a step's
/// mark, and its clock may read a little later than the events it judged.
fn alerts(analysis: &Analysis, timeline: &Timeline) -> Vec<AlertPoint> {
    (analysis.alerts.iter())
        .map(|raised| {
            let a = &raised.alert;
            let first = timeline.first_ns.unwrap_or(0);
            let start = timeline.step_start(a.step).unwrap_or(first);
            let end = timeline.step_start(a.step + 1).unwrap_or(timeline.last_ns);
            let t = a.time_ns.clamp(start, end.max(start));
            AlertPoint {
                device: a.device,
                step: a.step,
                t_us: timeline.since_start(t) / 1000,
                // As the text report's FINDINGS says it: with what the whole run's diagnosis
                // says of it where it says otherwise (another line keeps the memory).
                text: findings::alert_line(raised, analysis.growth.step_ns)
                    + &findings::alert_against_diagnosis(analysis, raised),
                signal: findings::signal_name(a.signal),
            }
        })
        .collect()
}

/// The chart of `trace`, read with `timeline`, whose report is `report`.
pub fn chart(
    trace: &LoadedTrace,
    report: &Report<'_>,
    timeline: &Timeline,
    symbols: &mut Symbolizer,
) -> Chart {
    let state = &trace.state;
    let us = |t: u64| timeline.since_start(t) / 1000;
    let mut naming = Attribution::of_state(state, symbols);
    let mut stacks = BTreeMap::new();
    let mut stack_of = |naming: &mut Attribution<'_>, call: CallRef| {
        let key = stack_key(call);
        stacks.entry(key.clone()).or_insert_with(|| {
            let frames = naming.stack(call);
            collapse(&frames, false)
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
        });
        key
    };
    let groupings = [
        ("python", Granularity::Python),
        ("module", Granularity::Module),
        ("function", Granularity::Function),
    ];
    let mut by_device: BTreeMap<i32, BTreeMap<&'static str, Vec<BandSeries>>> = BTreeMap::new();
    for (name, by) in groupings {
        for band in bands(timeline, state, &mut naming, by, BANDS) {
            let stack = band.example.map(|c| stack_of(&mut naming, c));
            by_device
                .entry(band.device)
                .or_default()
                .entry(name)
                .or_default()
                .push(BandSeries {
                    label: band.label,
                    stack,
                    values: band.values,
                });
        }
    }
    for call in table_sites(&report.analysis, report.top) {
        stack_of(&mut naming, call);
    }
    for (i, g) in report.groups.list.iter().enumerate() {
        let lines = collapse(&g.frames, false)
            .iter()
            .map(|l| l.to_string())
            .collect();
        stacks.insert(format!("group:{i}"), lines);
    }

    let level = |s: &crate::timeline::Stretch, device: i32| {
        s.levels
            .iter()
            .find(|l| l.device == device)
            .copied()
            .unwrap_or_default()
    };
    let devices = timeline
        .devices()
        .iter()
        .map(|&device| {
            let peak = report
                .analysis
                .peaks
                .holders
                .iter()
                .find(|p| p.holder == Holder::Device { device });
            DeviceChart {
                device,
                min: timeline
                    .stretches
                    .iter()
                    .map(|s| level(s, device).min)
                    .collect(),
                max: timeline
                    .stretches
                    .iter()
                    .map(|s| level(s, device).max)
                    .collect(),
                last: timeline
                    .stretches
                    .iter()
                    .map(|s| level(s, device).last)
                    .collect(),
                peak_bytes: peak.map_or(0, |p| p.peak.bytes),
                peak_us: peak.map_or(0, |p| us(p.peak.time_ns)),
                end_bytes: state.device_bytes(device),
                bands: by_device.remove(&device).unwrap_or_default(),
            }
        })
        .collect();

    let every = timeline.step_starts.len().div_ceil(STEP_TICKS).max(1);
    let analysis = &report.analysis;
    let python = state.python_stacks().codes().next().is_some();
    Chart {
        axis: match analysis.growth.axis {
            SampleAxis::Steps if !timeline.step_starts.is_empty() => "steps",
            _ => "time",
        },
        by: if python { "python" } else { "function" },
        duration_us: us(timeline.last_ns),
        x: timeline.stretches.iter().map(|s| us(s.end_ns)).collect(),
        devices,
        steps: timeline
            .step_starts
            .iter()
            .step_by(every)
            .map(|&t| us(t))
            .collect(),
        steps_every: every,
        steps_total: timeline.step_starts.len(),
        steps_first: timeline.first_step,
        range_depth: timeline
            .ranges
            .iter()
            .map(|r| r.depth + 1)
            .max()
            .unwrap_or(0),
        ranges: timeline
            .ranges
            .iter()
            .map(|r| RangeSpan {
                name: r.name.clone(),
                thread: r.thread,
                depth: r.depth,
                start_us: us(r.start_ns),
                end_us: us(r.end_ns),
            })
            .collect(),
        ranges_omitted: timeline.ranges_omitted,
        marks: timeline
            .marks
            .iter()
            .map(|m| MarkPoint {
                name: m.name.clone(),
                t_us: us(m.time_ns),
            })
            .collect(),
        failures: state
            .failures()
            .iter()
            .map(|f| FailurePoint {
                api: f.api.name(),
                bytes: f.request_bytes,
                device: f.device,
                result: f.result,
                oom: f.out_of_memory,
                t_us: us(f.time_ns),
            })
            .collect(),
        alerts: alerts(analysis, timeline),
        phases: phases(analysis, timeline),
        stacks,
    }
}
