//! The `traces` table, one row per trace exported (the process: host, pid, command, tracer
//! version, how reading went, events and steps), and the same facts about the run in every
//! file's key-value metadata, so a file read alone still says where it came from.

use anyhow::Result;
use parquet::file::metadata::KeyValue;
use vramtrace_collector::analysis::step_info;
use vramtrace_collector::format::{trace_name, Header};

use super::allocations::bits;
use super::table::{table, TableFile};
use crate::load::LoadedTrace;

/// The schema's name and version, in every file's metadata (`vramtrace.schema`).
pub const SCHEMA: &str = "vramtrace-data/1";

table! {
    /// The columns of `traces` (docs/data.md).
    Traces {
        pid: "required int64" => Dictionary;
        ppid: "required int64" => Dictionary;
        forked_from: "optional int64" => Dictionary;
        host: "required binary" " (STRING);" => Dictionary;
        local_rank: "optional int32" => Dictionary;
        world_size: "optional int32" => Dictionary;
        command_line: "required group" " (LIST) { repeated group list { optional binary element (STRING); } }" => Dictionary;
        tracer_version: "required binary" " (STRING);" => Dictionary;
        start_unix_ns: "required int64" => Dictionary;
        start_mono_ns: "required int64" => Dictionary;
        trace: "required binary" " (STRING);" => Dictionary;
        ending: "required binary" " (STRING);" => Dictionary;
        end_reason: "optional binary" " (STRING);" => Dictionary;
        events: "required int64" => Dictionary;
        dropped: "optional int64" => Dictionary;
        steps: "required int64" => Dictionary;
        step_source: "required binary" " (STRING);" => Dictionary;
        removed_segments: "required int32" => Dictionary;
        removed_events: "required int64" => Dictionary;
    }
}

/// The row of `trace`.
pub fn write(t: &mut TableFile<Traces>, trace: &LoadedTrace) -> Result<()> {
    let h = &trace.header;
    let state = &trace.state;
    let rows = &mut t.rows;
    rows.pid.int(i64::from(h.pid));
    rows.ppid.int(i64::from(h.ppid));
    rows.forked_from.opt_int(h.forked_from.map(i64::from));
    rows.host.text(&h.host);
    rows.local_rank.opt_int(h.local_rank);
    rows.world_size.opt_int(h.world_size);
    rows.command_line
        .texts(h.command_line.iter().map(String::as_str));
    rows.tracer_version.text(&h.tool_version);
    rows.start_unix_ns.int(bits(h.start_unix_ns));
    rows.start_mono_ns.int(bits(h.start_mono_ns));
    rows.trace
        .text(trace_name(&trace.path, h).display().to_string());
    rows.ending.text(trace.ending.kind());
    rows.end_reason
        .opt_text(state.end().map(|e| e.reason.as_str()));
    rows.events.int(bits(state.events()));
    // Not known (null) when the trace holds no tracer counters: it stops before the first.
    rows.dropped.opt_int(state.stats().map(|s| bits(s.dropped)));
    rows.steps.int(bits(state.steps()));
    rows.step_source.text(step_info(state).source);
    let removed = (trace.segments.as_ref()).and_then(|f| f.removed.as_ref());
    rows.removed_segments
        .int(removed.map_or(0, |r| r.segments as i32));
    rows.removed_events
        .int(bits(removed.map_or(0, |r| r.events)));
    t.row_done()
}

/// The key-value metadata of every file of a trace with `header`, exported as part of `run`.
pub fn metadata(header: &Header, run: &str) -> Vec<KeyValue> {
    let kv = |k: &str, v: String| KeyValue::new(format!("vramtrace.{k}"), v);
    let opt = |v: Option<i32>| v.map_or(String::new(), |v| v.to_string());
    vec![
        kv("schema", SCHEMA.to_string()),
        kv("run", run.to_string()),
        kv("host", header.host.clone()),
        kv("pid", header.pid.to_string()),
        kv("rank", opt(header.rank)),
        kv("local_rank", opt(header.local_rank)),
        kv("world_size", opt(header.world_size)),
        kv(
            "command_line",
            serde_json::to_string(&header.command_line).unwrap_or_default(),
        ),
        kv("tracer_version", header.tool_version.clone()),
        kv("exporter_version", env!("CARGO_PKG_VERSION").to_string()),
        kv("start_unix_ns", header.start_unix_ns.to_string()),
        kv("start_mono_ns", header.start_mono_ns.to_string()),
    ]
}
