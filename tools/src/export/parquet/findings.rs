//! The `findings` table: the report's diagnosis of the trace, one row per finding, most urgent
//! first — the same findings, in the same order, at the same lines, as `vramtrace report` of
//! that trace prints under DIAGNOSIS (one growth judgement for every output), so "which line
//! grows on which rank" is a `SELECT` of them rather than a second judgement in SQL.

use anyhow::Result;
use serde::Serialize;
use vramtrace_collector::analysis::{Analysis, Finding};
use vramtrace_collector::live::{Holder, SampleAxis};

use super::allocations::bits;
use super::table::{table, TableFile};

table! {
    /// The columns of `findings` (docs/data.md).
    Findings {
        pid: "required int64" => Dictionary;
        finding: "required int32" => Plain;
        class: "required binary" " (STRING);" => Dictionary;
        severity: "required binary" " (STRING);" => Dictionary;
        memory: "optional binary" " (STRING);" => Dictionary;
        device: "optional int32" => Dictionary;
        label: "optional binary" " (STRING);" => Dictionary;
        file: "optional binary" " (STRING);" => Dictionary;
        line: "optional int32" => Plain;
        function: "optional binary" " (STRING);" => Dictionary;
        module: "optional binary" " (STRING);" => Dictionary;
        view: "optional binary" " (STRING);" => Dictionary;
        line_means: "optional binary" " (STRING);" => Dictionary;
        bytes: "required int64" => Plain;
        rate: "optional double" => Plain;
        axis: "optional binary" " (STRING);" => Dictionary;
        window_ns: "optional int64" => Plain;
        growth_from: "optional int64" => Plain;
        history_from: "optional int64" => Plain;
        kept_from: "optional int64" => Plain;
        alerted_at_step: "optional int64" => Plain;
        rises: "optional int64" => Plain;
        r2: "optional double" => Plain;
        objects: "optional int64" => Plain;
        live_at_end: "optional int64" => Plain;
        freed_at_teardown: "optional int64" => Plain;
        steps_to_full: "optional double" => Plain;
        seconds_to_full: "optional double" => Plain;
        share: "optional double" => Plain;
        cause: "required binary" " (STRING);" => Dictionary;
        fix: "required binary" " (STRING);" => Dictionary;
    }
}

/// A row for each finding of `analysis` (its sites labelled as the report labels them).
pub fn write(t: &mut TableFile<Findings>, analysis: &Analysis, pid: i64) -> Result<()> {
    let window_ns = analysis.growth.window_ns;
    for (i, f) in analysis.diagnosis.iter().enumerate() {
        row(&mut t.rows, pid, i + 1, f, window_ns);
        t.row_done()?;
    }
    Ok(())
}

/// Finding `f`, number `number`; `window_ns` is the analysis's time window (what a rate
/// along time is per).
fn row(c: &mut Findings, pid: i64, number: usize, f: &Finding, window_ns: Option<u64>) {
    c.pid.int(pid);
    c.finding.int(number as i64);
    c.class.text(spelled(&f.class));
    c.severity.text(spelled(&f.severity));
    match f.holder {
        Some(Holder::Device { device }) => {
            c.memory.text("device");
            c.device.int(device);
        }
        Some(Holder::Host) => {
            c.memory.text("host");
            c.device.null();
        }
        None => {
            c.memory.null();
            c.device.null();
        }
    }
    let site = f.site.as_ref();
    c.label
        .opt_text(site.map(|s| s.label.as_deref().unwrap_or(&s.site)));
    let source = site.and_then(|s| s.source.as_ref());
    c.file.opt_text(source.map(|s| s.file.as_str()));
    c.line.opt_int(source.map(|s| s.line));
    c.function.opt_text(source.map(|s| s.function.as_str()));
    c.module
        .opt_text(site.and_then(|s| s.module_name.as_deref()));
    let e = &f.evidence;
    c.view.opt_text(e.view);
    c.line_means.opt_text(e.line_means.as_ref().map(spelled));
    c.bytes.int(bits(e.bytes));
    c.rate.opt_real(e.rate);
    c.axis.opt_text(e.axis.map(|a| a.name()));
    let per_window = e.axis == Some(SampleAxis::Time);
    c.window_ns
        .opt_int(window_ns.filter(|_| per_window).map(bits));
    c.growth_from.opt_int(e.growth_from.map(bits));
    c.history_from.opt_int(e.history_from.map(bits));
    c.kept_from.opt_int(e.kept_from.map(bits));
    c.alerted_at_step.opt_int(e.alerted_at_step.map(bits));
    c.rises.opt_int(e.rises.map(|r| r as i64));
    c.r2.opt_real(e.r2);
    c.objects.opt_int(e.objects.map(bits));
    c.live_at_end.opt_int(e.live_at_end.map(bits));
    c.freed_at_teardown.opt_int(e.freed_at_teardown.map(bits));
    c.steps_to_full.opt_real(e.steps_to_full);
    c.seconds_to_full.opt_real(e.seconds_to_full);
    c.share.opt_real(e.share);
    c.cause.text(&f.cause);
    c.fix.text(&f.fix);
}

/// `v` as the report's JSON spells it (`steady-growth`, `alert`, `keeps`): one spelling for
/// both outputs.
fn spelled(v: &impl Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => unreachable!("a unit variant serializes as a string: {other:?}"),
    }
}
