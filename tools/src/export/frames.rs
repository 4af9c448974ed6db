//! A call's stack as the foreign viewers show one: the program's Python frames, then the native
//! frames below them that are neither the interpreter's nor the CUDA libraries' (whose frames
//! every allocation shares and which would bury the frames that differ), outermost first.

use std::collections::HashMap;

use vramtrace_collector::symbols::{Attribution, CallRef, FrameKind, StackFrame};
use vramtrace_collector::units::{base_name, module_offset};

use vramtrace_collector::analysis::short_function;

/// One frame, named the way flame graphs and PyTorch snapshots name them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedFrame {
    /// Function (`forward`, `DeviceCachingAllocator::malloc`), else `module+0xOFFSET`.
    pub name: String,
    /// Source file, else the module's file name, else empty.
    pub filename: String,
    /// 0 when unknown.
    pub line: u32,
}

impl NamedFrame {
    /// `name (file:line)` with what is known.
    pub fn label(&self) -> String {
        match (self.filename.as_str(), self.line) {
            ("", _) => self.name.clone(),
            (f, 0) => format!("{} ({})", self.name, base_name(f)),
            (f, l) => format!("{} ({}:{l})", self.name, base_name(f)),
        }
    }
}

/// Whether a native frame is the Python interpreter's own (its frames repeat what the Python
/// frames say).
fn in_interpreter(f: &StackFrame) -> bool {
    f.module.as_deref().is_some_and(|m| {
        let m = base_name(m);
        m.starts_with("python") || m.starts_with("libpython")
    })
}

fn frame(f: &StackFrame) -> NamedFrame {
    let name = match (&f.function, f.kind) {
        (Some(func), FrameKind::Python) => func.clone(),
        (Some(func), FrameKind::Native) => short_function(func),
        (None, _) => module_offset(f.module.as_deref(), f.offset.unwrap_or(0)),
    };
    NamedFrame {
        name,
        filename: f
            .file
            .clone()
            .or_else(|| f.module.clone())
            .unwrap_or_default(),
        line: f.line.unwrap_or(0),
    }
}

/// A call's frames, each part outermost first.
#[derive(Clone, Debug, Default)]
pub struct CallFrames {
    pub python: Vec<NamedFrame>,
    /// Native frames outside the interpreter and the CUDA libraries (the innermost native frame
    /// alone when every frame is filtered out and there are no Python frames).
    pub native: Vec<NamedFrame>,
}

impl CallFrames {
    /// Every frame, outermost first: the Python frames, then the native frames under them.
    pub fn outermost_first(&self) -> impl DoubleEndedIterator<Item = &NamedFrame> {
        self.python.iter().chain(&self.native)
    }
}

/// Stacks of calls, looked up once per call.
pub struct Stacks<'n, 'a> {
    naming: &'n mut Attribution<'a>,
    cache: HashMap<CallRef, CallFrames>,
}

impl<'n, 'a> Stacks<'n, 'a> {
    pub fn new(naming: &'n mut Attribution<'a>) -> Self {
        Stacks {
            naming,
            cache: HashMap::new(),
        }
    }

    /// The frames of `call` (see the module doc).
    pub fn of(&mut self, call: CallRef) -> &CallFrames {
        let naming = &mut *self.naming;
        self.cache.entry(call).or_insert_with(|| {
            let all = naming.stack(call);
            let python: Vec<&StackFrame> =
                all.iter().filter(|f| f.kind == FrameKind::Python).collect();
            let mut native: Vec<NamedFrame> = all
                .iter()
                .filter(|f| f.kind == FrameKind::Native && !f.in_cuda_library())
                .filter(|f| python.is_empty() || !in_interpreter(f))
                .rev()
                .map(frame)
                .collect();
            if native.is_empty() && python.is_empty() {
                native.extend(all.first().map(frame));
            }
            CallFrames {
                python: python.iter().rev().map(|f| frame(f)).collect(),
                native,
            }
        })
    }
}
