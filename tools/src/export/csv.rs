//! `export --format csv-live|csv-events`: tables for notebooks. `csv-live` has one row per
//! object live at the end, with its call site named; `csv-events` one row per event of the
//! trace, as recorded (streamed while reading: memory does not grow with the trace). Addresses
//! and handles are `0x…` text, which spreadsheets and pandas keep exact.

use std::io::Write;

use anyhow::{anyhow, Context, Result};
use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::live::StepSource;
use vramtrace_collector::symbols::{frames_label, Attribution, CallRef, Symbolizer};

use super::{ExportArgs, Written};
use crate::load::{load_with_steps, read, Flow, Progress};

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// Writes one row per live object; returns what was written.
pub fn write_live(args: &ExportArgs, out: &mut dyn Write) -> Result<Written> {
    let trace = load_with_steps(
        args.trace(),
        args.window.read_from(),
        args.analysis.config(),
    )?;
    let state = &trace.state;
    let mut symbols = Symbolizer::from_env();
    let mut naming = Attribution::of_state(state, &mut symbols);
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "category",
        "address",
        "bytes",
        "device_bytes",
        "host_bytes",
        "device",
        "api",
        "seq",
        "time_ns",
        "step",
        "thread",
        "communicator",
        "flags",
        "site",
        "label",
        "module",
    ])?;
    let mut rows = 0u64;
    for o in state.live_objects() {
        let origin = &*o.origin;
        let call = CallRef::from(origin);
        let owner = state.owners().resolve(origin.caller, origin.stack);
        let site = state.locate(owner.frame).to_string();
        let label = frames_label(&naming.stack(call)).unwrap_or_else(|| site.clone());
        let module = owner
            .module
            .and_then(|m| state.owners().module_name(m))
            .unwrap_or("")
            .to_string();
        let flags: Vec<&str> = o.flags.iter().map(|f| f.name()).collect();
        w.write_record([
            o.category.name().to_string(),
            hex(o.address),
            o.bytes.to_string(),
            o.device_bytes().to_string(),
            o.host_bytes().to_string(),
            o.device.to_string(),
            origin.api.name().to_string(),
            origin.seq.to_string(),
            origin.time_ns.to_string(),
            origin.step.to_string(),
            origin.thread.to_string(),
            origin.communicator.map(hex).unwrap_or_default(),
            flags.join(" "),
            site,
            label,
            module,
        ])?;
        rows += 1;
    }
    w.flush().context("writing the table")?;
    Ok(Written::of(
        &trace,
        crate::render::units::count(rows, "live object"),
    ))
}

/// The object an operation is about (pointer, handle, communicator, pool, context...), its size,
/// and a name (NVTX).
fn op_fields(op: &Op) -> (&'static str, u64, u64, &str) {
    match op {
        Op::Alloc { ptr, size, .. } => ("alloc", *ptr, *size, ""),
        Op::Free { ptr, .. } => ("free", *ptr, 0, ""),
        Op::FreeHost { ptr } => ("free-host", *ptr, 0, ""),
        Op::HostRegister { ptr, size, .. } => ("host-register", *ptr, *size, ""),
        Op::HostUnregister { ptr } => ("host-unregister", *ptr, 0, ""),
        Op::Reserve { ptr, size, .. } => ("reserve", *ptr, *size, ""),
        Op::ReserveFree { ptr, size } => ("reserve-free", *ptr, *size, ""),
        Op::Create { handle, size, .. } => ("create", *handle, *size, ""),
        Op::Release { handle } => ("release", *handle, 0, ""),
        Op::Retain { handle, .. } => ("retain", *handle, 0, ""),
        Op::Import { handle, .. } => ("import", *handle, 0, ""),
        Op::Map { ptr, size, .. } => ("map", *ptr, *size, ""),
        Op::Unmap { ptr, size } => ("unmap", *ptr, *size, ""),
        Op::PoolCreate { pool, .. } => ("pool-create", *pool, 0, ""),
        Op::PoolDestroy { pool } => ("pool-destroy", *pool, 0, ""),
        Op::PoolTrim { pool, keep } => ("pool-trim", *pool, *keep, ""),
        Op::IpcOpen { ptr, .. } => ("ipc-open", *ptr, 0, ""),
        Op::IpcClose { ptr } => ("ipc-close", *ptr, 0, ""),
        Op::ArrayCreate { array, bytes, .. } => ("array-create", *array, *bytes, ""),
        Op::ArrayDestroy { array } => ("array-destroy", *array, 0, ""),
        Op::CtxCreate { ctx, .. } => ("context-create", *ctx, 0, ""),
        Op::CtxDestroy { ctx } => ("context-destroy", *ctx, 0, ""),
        Op::PrimaryCtxRelease { .. } => ("primary-context-release", 0, 0, ""),
        Op::PrimaryCtxReset { .. } => ("primary-context-reset", 0, 0, ""),
        Op::DeviceReset { .. } => ("device-reset", 0, 0, ""),
        Op::CommInit { comm, .. } => ("comm-init", *comm, 0, ""),
        Op::CommInitAll { comms, .. } => {
            ("comm-init-all", comms.first().copied().unwrap_or(0), 0, "")
        }
        Op::CommEnd { comm, .. } => ("comm-end", *comm, 0, ""),
        Op::NcclMemAlloc { ptr, size } => ("nccl-mem-alloc", *ptr, *size, ""),
        Op::NcclMemFree { ptr } => ("nccl-mem-free", *ptr, 0, ""),
        Op::Register { ptr, size, .. } => ("register", *ptr, *size, ""),
        Op::Deregister { handle, .. } => ("deregister", *handle, 0, ""),
        Op::WindowRegister { ptr, size, .. } => ("window-register", *ptr, *size, ""),
        Op::WindowDeregister { window, .. } => ("window-deregister", *window, 0, ""),
        Op::MarkStep { step } => ("mark-step", 0, *step, ""),
        Op::MarkIteration { n } => ("mark-iteration", 0, *n, ""),
        Op::RangePush { name } => ("range-push", 0, 0, name),
        Op::RangePop => ("range-pop", 0, 0, ""),
        Op::Mark { name } => ("mark", 0, 0, name),
        Op::DeviceMemory { free, total } => ("device-memory", 0, total - free.min(total), ""),
        Op::PrimaryCtxRetain { ctx, .. } => ("primary-context-retain", *ctx, 0, ""),
    }
}

fn event_row(e: &Event, step: u64) -> [String; 16] {
    let (op, object, size, name) = op_fields(&e.op);
    [
        e.seq.to_string(),
        e.time_ns.to_string(),
        e.thread.to_string(),
        e.api.name().to_string(),
        op.to_string(),
        e.result.to_string(),
        e.device.to_string(),
        hex(e.context),
        hex(object),
        size.to_string(),
        hex(e.caller),
        e.stack.to_string(),
        e.py_stack.to_string(),
        e.nccl_scope.to_string(),
        step.to_string(),
        name.to_string(),
    ]
}

/// Writes one row per event; returns what was written.
pub fn write_events(args: &ExportArgs, out: &mut dyn Write) -> Result<Written> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "seq",
        "time_ns",
        "thread",
        "api",
        "op",
        "result",
        "device",
        "context",
        "object",
        "bytes",
        "caller",
        "stack",
        "py_stack",
        "nccl_scope",
        "step",
        "name",
    ])?;
    // The `step` column counts the report's steps (`unapplied_steps`, the one rule): which they
    // are, only the whole trace says, so a first pass (a tenth of this export's time) asks it.
    let progress = Progress::new(args.trace(), "finding the steps");
    let from = args.window.read_from();
    let first = read(args.trace(), from, StepSource::Marks, &progress, |_, _| {
        Flow::Apply
    })?;
    let source = first.state.unapplied_steps().unwrap_or(StepSource::Marks);
    drop(first);
    progress.restart("exporting");
    let mut rows = 0u64;
    let mut failed = None;
    let trace = read(args.trace(), from, source, &progress, |state, e| {
        match w.write_record(event_row(e, state.steps())) {
            Ok(()) => {
                rows += 1;
                Flow::Apply
            }
            Err(err) => {
                failed = Some(err);
                Flow::Stop
            }
        }
    })?;
    if let Some(err) = failed {
        return Err(anyhow!(err).context("writing the table"));
    }
    w.flush().context("writing the table")?;
    Ok(Written::of(
        &trace,
        crate::render::units::count(rows, "event"),
    ))
}
