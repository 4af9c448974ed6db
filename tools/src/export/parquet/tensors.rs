//! The `tensors` table, for a trace that carries PyTorch's memory history (the recorder
//! snapshot `vramtrace run` puts in it, `docs/pytorch.md`): one row per tensor block the
//! snapshot's history rebuilds (`collector::torch::TensorHistory`), with the program's Python
//! line that allocated it. Empty for other traces.

use anyhow::Result;
use vramtrace_collector::symbols::{FrameKind, StackFrame};
use vramtrace_collector::torch::{TensorHistory, TorchView};

use super::allocations::bits;
use super::table::{table, TableFile};
use vramtrace_collector::symbols::frames_label;
use vramtrace_collector::units::line_label;

table! {
    /// The columns of `tensors` (docs/data.md).
    Tensors {
        pid: "required int64" => Dictionary;
        device: "required int32" => Dictionary;
        address: "required int64" => Plain;
        bytes: "required int64" => Dictionary;
        allocated_ns: "optional int64" => Delta;
        freed_ns: "optional int64" => Delta;
        label: "optional binary" " (STRING);" => Dictionary;
        python_file: "optional binary" " (STRING);" => Dictionary;
        python_line: "optional int64" => Dictionary;
        python_function: "optional binary" " (STRING);" => Dictionary;
        inferred: "required boolean" => Plain;
        snapshot: "required binary" " (STRING);" => Dictionary;
    }
}

/// A row per tensor of the last recorder snapshot in `view` (PyTorch's view of the trace, on
/// the trace's clock: `LoadedTrace::torch`), if there is one.
pub fn write(t: &mut TableFile<Tensors>, view: &TorchView, pid: i64) -> Result<()> {
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
        rows.pid.int(pid);
        rows.device.int(x.device);
        rows.address.int(bits(x.addr));
        rows.bytes.int(bits(x.size));
        rows.allocated_ns.opt_int(on_trace_clock(x.allocated_us));
        rows.freed_ns.opt_int(on_trace_clock(x.freed_us));
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
            .map(|l| match &f.via {
                // One of the paths that reach the line, as the report names it.
                Some(via) => format!("{l} via {}", line_label(&via.file, via.line, &via.function)),
                None => l,
            })
        });
        rows.label.opt_text(label);
        rows.python_file.opt_text(frame.map(|f| &f.file));
        rows.python_line.opt_int(frame.map(|f| i64::from(f.line)));
        rows.python_function.opt_text(frame.map(|f| &f.function));
        rows.inferred.boolean(x.inferred);
        rows.snapshot.text(&snapshot.reason);
        t.row_done()?;
    }
    Ok(())
}
