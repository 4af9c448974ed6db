//! The `traces` table, one row per trace exported (the process: host, pid, command, tracer
//! version, how reading went, events and steps), and the same facts about the run in every
//! file's key-value metadata, so a file read alone still says where it came from.

use anyhow::Result;
use arrow_array::builder::{Int32Builder, Int64Builder, ListBuilder, StringBuilder};
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
        pid: Int64Builder = Int64Builder::new(), false;
        ppid: Int64Builder = Int64Builder::new(), false;
        forked_from: Int64Builder = Int64Builder::new(), true;
        host: StringBuilder = StringBuilder::new(), false;
        local_rank: Int32Builder = Int32Builder::new(), true;
        world_size: Int32Builder = Int32Builder::new(), true;
        command_line: ListBuilder<StringBuilder> = ListBuilder::new(StringBuilder::new()), false;
        tracer_version: StringBuilder = StringBuilder::new(), false;
        start_unix_ns: Int64Builder = Int64Builder::new(), false;
        start_mono_ns: Int64Builder = Int64Builder::new(), false;
        trace: StringBuilder = StringBuilder::new(), false;
        ending: StringBuilder = StringBuilder::new(), false;
        end_reason: StringBuilder = StringBuilder::new(), true;
        events: Int64Builder = Int64Builder::new(), false;
        dropped: Int64Builder = Int64Builder::new(), false;
        steps: Int64Builder = Int64Builder::new(), false;
        step_source: StringBuilder = StringBuilder::new(), false;
        removed_segments: Int32Builder = Int32Builder::new(), false;
        removed_events: Int64Builder = Int64Builder::new(), false;
    }
}

/// The row of `trace`.
pub fn write(t: &mut TableFile<Traces>, trace: &LoadedTrace) -> Result<()> {
    let h = &trace.header;
    let state = &trace.state;
    let rows = &mut t.rows;
    rows.pid.append_value(i64::from(h.pid));
    rows.ppid.append_value(i64::from(h.ppid));
    rows.forked_from.append_option(h.forked_from.map(i64::from));
    rows.host.append_value(&h.host);
    rows.local_rank.append_option(h.local_rank);
    rows.world_size.append_option(h.world_size);
    rows.command_line
        .append_value(h.command_line.iter().map(Some));
    rows.tracer_version.append_value(&h.tool_version);
    rows.start_unix_ns.append_value(bits(h.start_unix_ns));
    rows.start_mono_ns.append_value(bits(h.start_mono_ns));
    rows.trace
        .append_value(trace_name(&trace.path, h).display().to_string());
    rows.ending.append_value(trace.ending.kind());
    rows.end_reason
        .append_option(state.end().map(|e| e.reason.as_str()));
    rows.events.append_value(bits(state.events()));
    rows.dropped
        .append_value(bits(state.stats().map_or(0, |s| s.dropped)));
    rows.steps.append_value(bits(state.steps()));
    rows.step_source.append_value(step_info(state).source);
    let removed = (trace.segments.as_ref()).and_then(|f| f.removed.as_ref());
    rows.removed_segments
        .append_value(removed.map_or(0, |r| r.segments as i32));
    rows.removed_events
        .append_value(bits(removed.map_or(0, |r| r.events)));
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
