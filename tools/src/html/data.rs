//! The chart's data as the page embeds it: times in microseconds since the first event, bytes as
//! plain numbers (exact in JavaScript up to 8 PiB), each device's envelope and bands, the steps,
//! ranges, marks, failures and phases, and the stack behind every holder a click can name.

use std::collections::BTreeMap;

use serde::Serialize;
use vramtrace_collector::analysis::{Analysis, SiteName};
use vramtrace_collector::live::Holder;
use vramtrace_collector::symbols::{collapse, Attribution, CallRef, Granularity, Symbolizer};

use crate::load::LoadedTrace;
use crate::report::Report;
use crate::timeline::{bands, Timeline};

/// Holders stacked per device; the rest form one band.
const BANDS: usize = 8;
/// Step ticks drawn at most; longer runs draw every n-th.
const STEP_TICKS: usize = 1000;

#[derive(Serialize)]
pub struct Chart {
    pub duration_us: u64,
    /// End of each stretch.
    pub x: Vec<u64>,
    pub devices: Vec<DeviceChart>,
    pub steps: Vec<u64>,
    pub steps_total: usize,
    pub ranges: Vec<RangeSpan>,
    pub range_depth: u32,
    pub ranges_omitted: u64,
    pub marks: Vec<MarkPoint>,
    pub failures: Vec<FailurePoint>,
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

/// A stretch of the run the analysis named (warm-up, steady state, teardown).
#[derive(Serialize)]
pub struct PhaseSpan {
    pub name: String,
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

/// Every call site the page's tables name (the first `top` of each list).
fn table_sites(a: &Analysis, top: usize) -> Vec<CallRef> {
    let g = &a.growth;
    let mut sites: Vec<&SiteName> = Vec::new();
    sites.extend(g.steady.iter().take(top).map(|s| &s.site));
    sites.extend(g.peaks.iter().take(top).map(|s| &s.site));
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

/// The phases the analysis found, as spans of time. The analysis names none yet (warm-up,
/// steady state and teardown are issue 17's); the chart shades whatever this returns.
fn phases(_analysis: &Analysis) -> Vec<PhaseSpan> {
    Vec::new()
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
    Chart {
        duration_us: us(timeline.last_ns),
        x: timeline.stretches.iter().map(|s| us(s.end_ns)).collect(),
        devices,
        steps: timeline
            .step_starts
            .iter()
            .step_by(every)
            .map(|&t| us(t))
            .collect(),
        steps_total: timeline.step_starts.len(),
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
        phases: phases(&report.analysis),
        stacks,
    }
}
