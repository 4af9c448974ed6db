//! The `sites` table: one row per call site the replay met (allocations, frees and failed calls
//! alike), with its label, the program's Python line that made it, its owner module and its
//! whole stack as a list of frames. Other tables name a site by its id, which is this trace's
//! own (`site` joins within a trace); `identity` names it as every trace of the same program
//! does (the comparisons' `SiteIdentity`: its Python line and its native frames outside the CUDA
//! libraries by function, file and line), to group and join across ranks and runs.

use anyhow::Result;
use parquet::schema::types::SchemaDescriptor;
use vramtrace_collector::analysis::site_name;
use vramtrace_collector::compare::native_identity;
use vramtrace_collector::live::{LiveState, SiteId};
use vramtrace_collector::symbols::{Attribution, CallRef, FrameKind, StackFrame};
use vramtrace_collector::units::line_label;

use super::allocations::bits;
use super::column::{At, Column, Encode};
use super::names::Names;
use super::table::{Table, TableFile};

/// The columns of `sites` (docs/data.md); `frames` is a list of frames, a column per field of
/// a frame.
pub struct Sites {
    pid: Column,
    site: Column,
    label: Column,
    identity: Column,
    location: Column,
    module: Column,
    python_file: Column,
    python_line: Column,
    python_function: Column,
    python_stacks_vary: Column,
    frames: Frames,
}

/// The fields of the frames of `sites`' `frames`.
struct Frames {
    kind: Column,
    function: Column,
    file: Column,
    line: Column,
    module: Column,
    offset: Column,
    inlined: Column,
}

impl Table for Sites {
    const SCHEMA: &'static str = "message Sites {
        required int64 pid;
        required int64 site;
        required binary label (STRING);
        required binary identity (STRING);
        required binary location (STRING);
        optional binary module (STRING);
        optional binary python_file (STRING);
        optional int64 python_line;
        optional binary python_function (STRING);
        required boolean python_stacks_vary;
        required group frames (LIST) {
            repeated group list {
                optional group element {
                    required binary kind (STRING);
                    optional binary function (STRING);
                    optional binary file (STRING);
                    optional int64 line;
                    optional binary module (STRING);
                    optional int64 offset;
                    required boolean inlined;
                }
            }
        }
    }";

    fn new(schema: &SchemaDescriptor) -> Self {
        use Encode::{Dictionary, Plain};
        let mut leaf = 0;
        let mut next = |encode| {
            leaf += 1;
            Column::new(schema.column(leaf - 1), encode)
        };
        Sites {
            pid: next(Dictionary),
            site: next(Dictionary),
            label: next(Dictionary),
            identity: next(Dictionary),
            location: next(Dictionary),
            module: next(Dictionary),
            python_file: next(Dictionary),
            python_line: next(Dictionary),
            python_function: next(Dictionary),
            python_stacks_vary: next(Plain),
            frames: Frames {
                kind: next(Dictionary),
                function: next(Dictionary),
                file: next(Dictionary),
                line: next(Dictionary),
                module: next(Dictionary),
                offset: next(Plain),
                inlined: next(Plain),
            },
        }
    }

    fn each(&mut self, f: &mut dyn FnMut(&mut Column) -> Result<()>) -> Result<()> {
        let fr = &mut self.frames;
        for c in [
            &mut self.pid,
            &mut self.site,
            &mut self.label,
            &mut self.identity,
            &mut self.location,
            &mut self.module,
            &mut self.python_file,
            &mut self.python_line,
            &mut self.python_function,
            &mut self.python_stacks_vary,
            &mut fr.kind,
            &mut fr.function,
            &mut fr.file,
            &mut fr.line,
            &mut fr.module,
            &mut fr.offset,
            &mut fr.inlined,
        ] {
            f(c)?;
        }
        Ok(())
    }
}

/// Writes a row per site of `state`.
pub fn write(
    t: &mut TableFile<Sites>,
    state: &LiveState,
    names: &mut Names,
    pid: i64,
) -> Result<()> {
    for id in 0..state.site_count() as SiteId {
        let name = site_name(state, id);
        let label = names.site(state, id).to_string();
        let rows = &mut t.rows;
        rows.pid.int(pid);
        rows.site.int(i64::from(id));
        rows.label.text(label);
        rows.location.text(&name.site);
        rows.module.opt_text(name.module_name.as_deref());
        let line = state
            .site(id)
            .map(|(key, _)| key.line)
            .filter(|l| l.is_some());
        let code = line.and_then(|l| state.python_stacks().code(l.code));
        rows.python_file.opt_text(code.map(|c| c.file.as_str()));
        rows.python_line.opt_int(line.map(|l| i64::from(l.line)));
        rows.python_function
            .opt_text(code.map(|c| c.function.as_str()));
        rows.python_stacks_vary.boolean(name.py_stacks_vary);
        let call = CallRef {
            caller: name.caller,
            stack: name.stack,
            py_stack: name.py_stack,
        };
        let frames = Attribution::of_state(state, names.symbols()).stack(call);
        let python = code
            .zip(line)
            .map(|(c, l)| line_label(&c.file, l.line, &c.function));
        let native = native_identity(&frames).into_iter().map(|f| f.to_string());
        let identity: Vec<String> = python.into_iter().chain(native).collect();
        rows.identity.text(identity.join(" < "));
        append_frames(&mut rows.frames, &frames);
        t.row_done()?;
    }
    Ok(())
}

fn append_frames(list: &mut Frames, frames: &[StackFrame]) {
    if frames.is_empty() {
        let l = list;
        for c in [
            &mut l.kind,
            &mut l.function,
            &mut l.file,
            &mut l.line,
            &mut l.module,
            &mut l.offset,
            &mut l.inlined,
        ] {
            c.null();
        }
        return;
    }
    for (i, f) in frames.iter().enumerate() {
        let at = At::element(i == 0);
        let kind = match f.kind {
            FrameKind::Python => "python",
            FrameKind::Native => "native",
        };
        list.kind.text_at(at, Some(kind));
        list.function.text_at(at, f.function.as_deref());
        list.file.text_at(at, f.file.as_deref());
        list.line.int_at(at, f.line.map(i64::from));
        list.module.text_at(at, f.module.as_deref());
        list.offset.int_at(at, f.offset.map(bits));
        list.inlined.bool_at(at, Some(f.inlined));
    }
}
