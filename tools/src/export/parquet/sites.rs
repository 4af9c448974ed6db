//! The `sites` table: one row per call site the replay met (allocations, frees and failed calls
//! alike), with its label, the program's Python line that made it, its owner module and its
//! whole stack as a list of frames. Other tables name a site by its id, which is this trace's
//! own (`site` joins within a trace); `identity` names it as every trace of the same program
//! does (the comparisons' `SiteIdentity`: its Python line and its native frames outside the CUDA
//! libraries by function, file and line), to group and join across ranks and runs.

use anyhow::Result;
use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
};
use arrow_schema::{DataType, Field, Fields};
use vramtrace_collector::analysis::base_name;
use vramtrace_collector::analysis::site_name;
use vramtrace_collector::compare::native_identity;
use vramtrace_collector::live::{LiveState, SiteId};
use vramtrace_collector::symbols::{Attribution, CallRef, FrameKind, StackFrame};

use super::allocations::bits;
use super::names::Names;
use super::table::{table, TableFile};

/// The fields of one frame of `frames`.
fn frame_fields() -> Fields {
    Fields::from(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("function", DataType::Utf8, true),
        Field::new("file", DataType::Utf8, true),
        Field::new("line", DataType::Int64, true),
        Field::new("module", DataType::Utf8, true),
        Field::new("offset", DataType::Int64, true),
        Field::new("inlined", DataType::Boolean, false),
    ])
}

fn frames_builder() -> ListBuilder<StructBuilder> {
    ListBuilder::new(StructBuilder::from_fields(frame_fields(), 0))
}

table! {
    /// The columns of `sites` (docs/data.md).
    Sites {
        pid: Int64Builder = Int64Builder::new(), false;
        site: Int64Builder = Int64Builder::new(), false;
        label: StringBuilder = StringBuilder::new(), false;
        identity: StringBuilder = StringBuilder::new(), false;
        location: StringBuilder = StringBuilder::new(), false;
        module: StringBuilder = StringBuilder::new(), true;
        python_file: StringBuilder = StringBuilder::new(), true;
        python_line: Int64Builder = Int64Builder::new(), true;
        python_function: StringBuilder = StringBuilder::new(), true;
        python_stacks_vary: BooleanBuilder = BooleanBuilder::new(), false;
        frames: ListBuilder<StructBuilder> = frames_builder(), false;
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
        rows.pid.append_value(pid);
        rows.site.append_value(i64::from(id));
        rows.label.append_value(label);
        rows.location.append_value(&name.site);
        rows.module.append_option(name.module_name.as_deref());
        let line = state
            .site(id)
            .map(|(key, _)| key.line)
            .filter(|l| l.is_some());
        let code = line.and_then(|l| state.python_stacks().code(l.code));
        rows.python_file
            .append_option(code.map(|c| c.file.as_str()));
        rows.python_line
            .append_option(line.map(|l| i64::from(l.line)));
        rows.python_function
            .append_option(code.map(|c| c.function.as_str()));
        rows.python_stacks_vary.append_value(name.py_stacks_vary);
        let call = CallRef {
            caller: name.caller,
            stack: name.stack,
            py_stack: name.py_stack,
        };
        let frames = Attribution::of_state(state, names.symbols()).stack(call);
        let python = code
            .zip(line)
            .map(|(c, l)| format!("{}:{} in {}", base_name(&c.file), l.line, c.function));
        let native = native_identity(&frames).into_iter().map(|f| f.to_string());
        let identity: Vec<String> = python.into_iter().chain(native).collect();
        rows.identity.append_value(identity.join(" < "));
        append_frames(&mut rows.frames, &frames);
        t.row_done()?;
    }
    Ok(())
}

fn append_frames(list: &mut ListBuilder<StructBuilder>, frames: &[StackFrame]) {
    let s = list.values();
    for f in frames {
        let kind = match f.kind {
            FrameKind::Python => "python",
            FrameKind::Native => "native",
        };
        field::<StringBuilder>(s, 0).append_value(kind);
        field::<StringBuilder>(s, 1).append_option(f.function.as_deref());
        field::<StringBuilder>(s, 2).append_option(f.file.as_deref());
        field::<Int64Builder>(s, 3).append_option(f.line.map(i64::from));
        field::<StringBuilder>(s, 4).append_option(f.module.as_deref());
        field::<Int64Builder>(s, 5).append_option(f.offset.map(bits));
        field::<BooleanBuilder>(s, 6).append_value(f.inlined);
        s.append(true);
    }
    list.append(true);
}

/// Field `i` of the frame struct, as built by [`frames_builder`].
fn field<T: ArrayBuilder>(s: &mut StructBuilder, i: usize) -> &mut T {
    s.field_builder::<T>(i)
        .expect("the frame struct's fields are as frame_fields declares")
}
