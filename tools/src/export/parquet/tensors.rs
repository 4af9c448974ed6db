//! The `tensors` table, for a trace that carries PyTorch's memory history (the recorder
//! snapshot `vramtrace run` puts in it, `docs/pytorch.md`): one row per tensor block the
//! snapshot's history rebuilds (`collector::torch::TensorHistory`), with the program's Python
//! line that allocated it. Empty for other traces.

use anyhow::Result;
use arrow_array::builder::{BooleanBuilder, Int32Builder, Int64Builder, StringBuilder};
use vramtrace_collector::format::Header;
use vramtrace_collector::live::LiveState;
use vramtrace_collector::symbols::{FrameKind, StackFrame};
use vramtrace_collector::torch::{ClockAnchor, TensorHistory, TorchView};

use super::allocations::bits;
use super::table::{table, TableFile};
use vramtrace_collector::symbols::frames_label;

table! {
    /// The columns of `tensors` (docs/data.md).
    Tensors {
        pid: Int64Builder = Int64Builder::new(), false;
        device: Int32Builder = Int32Builder::new(), false;
        address: Int64Builder = Int64Builder::new(), false;
        bytes: Int64Builder = Int64Builder::new(), false;
        allocated_ns: Int64Builder = Int64Builder::new(), true;
        freed_ns: Int64Builder = Int64Builder::new(), true;
        label: StringBuilder = StringBuilder::new(), true;
        python_file: StringBuilder = StringBuilder::new(), true;
        python_line: Int64Builder = Int64Builder::new(), true;
        python_function: StringBuilder = StringBuilder::new(), true;
        inferred: BooleanBuilder = BooleanBuilder::new(), false;
        snapshot: StringBuilder = StringBuilder::new(), false;
    }
}

/// A row per tensor of the last recorder snapshot of `state`, if there is one.
pub fn write(
    t: &mut TableFile<Tensors>,
    state: &LiveState,
    header: &Header,
    pid: i64,
) -> Result<()> {
    // Allocator times go on the trace's clock; a snapshot without its own anchor is placed by
    // the header's start times, as the report does.
    let fallback = ClockAnchor {
        unix_ns: header.start_unix_ns,
        monotonic_ns: header.start_mono_ns,
    };
    let view = TorchView::read(state.attachments(), Some(fallback));
    let Some(snapshot) = &view.snapshot else {
        return Ok(());
    };
    let mut history = TensorHistory::new(snapshot);
    let clock = snapshot.clock;
    let on_trace_clock = |us: Option<i64>| Some(bits(clock?.trace_ns(us?)));
    let tensors = history.tensors().to_vec();
    for x in tensors {
        let frame = history
            .line(x.stack)
            .and_then(|f| snapshot.frames.get(f as usize));
        let rows = &mut t.rows;
        rows.pid.append_value(pid);
        rows.device.append_value(x.device);
        rows.address.append_value(bits(x.addr));
        rows.bytes.append_value(bits(x.size));
        rows.allocated_ns
            .append_option(on_trace_clock(x.allocated_us));
        rows.freed_ns.append_option(on_trace_clock(x.freed_us));
        let label = frame.and_then(|f| {
            frames_label(&[StackFrame {
                kind: FrameKind::Python,
                function: Some(f.function.clone()),
                file: Some(f.file.clone()),
                line: Some(f.line),
                module: None,
                offset: None,
                inlined: false,
            }])
        });
        rows.label.append_option(label);
        rows.python_file.append_option(frame.map(|f| &f.file));
        rows.python_line
            .append_option(frame.map(|f| i64::from(f.line)));
        rows.python_function
            .append_option(frame.map(|f| &f.function));
        rows.inferred.append_value(x.inferred);
        rows.snapshot.append_value(&snapshot.reason);
        t.row_done()?;
    }
    Ok(())
}
