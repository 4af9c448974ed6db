//! `export --format perfetto`: the trace as Chrome trace-event JSON (the JSON object format that
//! Perfetto's UI and chrome://tracing open). Live bytes per device and per top holder are counter
//! tracks (`"ph": "C"`), steps and NVTX ranges are complete slices (`"X"`), NVTX marks, failed
//! allocations and the tracer's live alerts are instants (`"i"`). Times are microseconds since the trace's first event.
//!
//! Counters follow the timeline's stretches: a trace of fewer events than `--samples` is drawn
//! exactly, event by event; in a longer one each stretch shows its highest value at its start
//! and its last value at its end, so peaks survive the downsampling.

use std::io::Write;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use vramtrace_collector::symbols::{Attribution, Granularity, Symbolizer};

use super::{ExportArgs, Written};
use crate::timeline::{bands, load_with_timeline, Timeline};

/// Holders with a counter track of their own per device; the rest share one.
const HOLDER_TRACKS: usize = 8;
/// NVTX ranges and marks kept.
const MAX_RANGES: usize = 1_000_000;
/// The thread id of the steps' track (no OS thread has it).
const STEPS_TID: u64 = 0;

/// Streams trace events into the `traceEvents` array.
struct EventWriter<'w> {
    out: &'w mut dyn Write,
    count: u64,
}

impl EventWriter<'_> {
    fn push(&mut self, event: &Value) -> Result<()> {
        if self.count > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *self.out, event)?;
        self.count += 1;
        Ok(())
    }
}

/// Microseconds since the first event, exact to the nanosecond.
fn ts(timeline: &Timeline, ns: u64) -> f64 {
    timeline.since_start(ns) as f64 / 1000.0
}

/// Writes the trace events; returns what was written.
pub fn write(args: &ExportArgs, out: &mut dyn Write) -> Result<Written> {
    let (trace, timeline) = load_with_timeline(
        args.trace(),
        args.window.read_from(),
        args.analysis.config(),
        args.samples.unwrap_or(20_000).max(2),
        MAX_RANGES,
    )?;
    let state = &trace.state;
    let pid = trace.header.pid;
    let mut symbols = Symbolizer::from_env();
    let mut naming = Attribution::of_state(state, &mut symbols);
    let holders = bands(
        &timeline,
        state,
        &mut naming,
        Granularity::Python,
        HOLDER_TRACKS,
    );

    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    let mut w = EventWriter { out, count: 0 };
    let program = trace
        .header
        .command_line
        .iter()
        .take(2)
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    w.push(&json!({"name": "process_name", "ph": "M", "pid": pid,
        "args": {"name": format!("{program} (pid {pid}, vramtrace)")}}))?;
    w.push(
        &json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": STEPS_TID,
        "args": {"name": "steps"}}),
    )?;

    // Live bytes per device, then per holder on each device.
    let mut counters = 0u64;
    for &device in timeline.devices() {
        let name = format!("device {device} live bytes");
        for s in &timeline.stretches {
            let Some(l) = s.levels.iter().find(|l| l.device == device) else {
                continue;
            };
            if l.max != l.last {
                w.push(&json!({"name": name, "ph": "C", "pid": pid,
                    "ts": ts(&timeline, s.start_ns), "args": {"bytes": l.max}}))?;
                counters += 1;
            }
            w.push(&json!({"name": name, "ph": "C", "pid": pid,
                "ts": ts(&timeline, s.end_ns), "args": {"bytes": l.last}}))?;
            counters += 1;
        }
    }
    for band in &holders {
        let name = format!("device {}: {}", band.device, band.label);
        let mut last = None;
        for (s, &bytes) in timeline.stretches.iter().zip(&band.values) {
            // A counter holds its value until the next sample: repeats say nothing.
            if last == Some(bytes) {
                continue;
            }
            last = Some(bytes);
            w.push(&json!({"name": name, "ph": "C", "pid": pid,
                "ts": ts(&timeline, s.end_ns), "args": {"bytes": bytes}}))?;
            counters += 1;
        }
    }

    // Steps: each from its start to the next one's (the last to the end of the trace), named
    // as every output counts them: the first mark begins step 1 (step 0 is what came before);
    // read from a snapshot, on from the steps it counted (the one under way then is not drawn,
    // as step 0 is not).
    let steps = &timeline.step_starts;
    for (i, &start) in steps.iter().enumerate() {
        let end = steps.get(i + 1).copied().unwrap_or(timeline.last_ns);
        let step = timeline.first_step + i as u64 + 1;
        w.push(
            &json!({"name": format!("step {step}"), "cat": "step", "ph": "X", "pid": pid,
            "tid": STEPS_TID, "ts": ts(&timeline, start),
            "dur": end.saturating_sub(start) as f64 / 1000.0, "args": {"step": step}}),
        )?;
    }
    // A range pushed without a name is still a slice a viewer must be able to name.
    let named = |name: &str| match name {
        "" => "(unnamed NVTX range)".to_string(),
        n => n.to_string(),
    };
    for r in &timeline.ranges {
        w.push(
            &json!({"name": named(&r.name), "cat": "nvtx", "ph": "X", "pid": pid, "tid": r.thread,
            "ts": ts(&timeline, r.start_ns),
            "dur": r.end_ns.saturating_sub(r.start_ns) as f64 / 1000.0}),
        )?;
    }
    for m in &timeline.marks {
        w.push(
            &json!({"name": m.name, "cat": "nvtx", "ph": "i", "s": "t", "pid": pid,
            "tid": m.thread, "ts": ts(&timeline, m.time_ns)}),
        )?;
    }
    let mut failures = 0u64;
    for f in state.failures().iter() {
        let what = if f.out_of_memory {
            "out of memory"
        } else {
            "failed"
        };
        w.push(
            &json!({"name": format!("{} {what}", f.api.name()), "cat": "failure",
            "ph": "i", "s": "p", "pid": pid, "tid": f.origin.thread,
            "ts": ts(&timeline, f.time_ns),
            "args": {"api": f.api.name(), "result": f.result, "out_of_memory": f.out_of_memory,
                "request_bytes": f.request_bytes, "device": f.device,
                "live_device_bytes": f.live_device_bytes, "seq": f.seq}}),
        )?;
        failures += 1;
    }
    // The tracer's live alerts, where the program was warned (each as its stderr line said it).
    let mut alerts = 0u64;
    for a in state.alerts() {
        w.push(
            &json!({"name": format!("vramtrace ALERT: device {}", a.device), "cat": "alert",
            "ph": "i", "s": "p", "pid": pid, "tid": STEPS_TID, "ts": ts(&timeline, a.time_ns),
            "args": {"step": a.step, "device": a.device, "reason": a.reason, "rate": a.rate,
                "unit": a.unit, "unit_ns": a.unit_ns, "place": a.place,
                "live_bytes": a.live_bytes, "signal": a.signal}}),
        )?;
        alerts += 1;
    }
    let events = w.count;
    write!(
        out,
        "\n],\"otherData\":{}}}\n",
        json!({"vramtrace": trace.header.tool_version, "trace": trace.path.display().to_string(),
            "pid": pid, "host": trace.header.host,
            "events_per_sample": timeline.stride(), "ranges_omitted": timeline.ranges_omitted})
    )
    .context("writing the trace events")?;
    let n = |n: usize, noun: &str| crate::render::units::count(n as u64, noun);
    let what = format!(
        "{}: {}, {}, {}, {}, {}, {}",
        n(events as usize, "trace event"),
        n(counters as usize, "counter sample"),
        n(steps.len(), "step"),
        n(timeline.ranges.len(), "NVTX range"),
        n(timeline.marks.len(), "mark"),
        n(failures as usize, "failure"),
        n(alerts as usize, "alert"),
    );
    Ok(Written::of(&trace, what))
}
