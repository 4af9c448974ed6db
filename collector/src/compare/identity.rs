//! What a call site is, in names that two traces of the same program share: its program's
//! Python line (file, function, line) where its calls have one line of their own, with the
//! program's lines that called it (its path), and each of its native frames outside the CUDA
//! libraries by function, source file and line, or by module and offset where nothing names
//! the frame. Never a raw address: ASLR moves those between runs.

use std::fmt;

use serde::Serialize;

use crate::symbols::{FrameKind, StackFrame};
use crate::units::{base_name, line_label, module_offset};

/// One native frame of a call site.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum FrameId {
    /// A frame symbols name: the function, and the source file's name and line where line
    /// information exists. The file is its base name only: the same source is built in different
    /// directories on different machines.
    Function {
        function: String,
        file: Option<String>,
        line: Option<u32>,
    },
    /// A frame nothing names: its module's file name and the offset from the module's load bias
    /// (stable across runs of one build, not across builds).
    Address { module: Option<String>, offset: u64 },
}

impl FrameId {
    /// The identity of a resolved frame.
    pub fn of(frame: &StackFrame) -> Self {
        match &frame.function {
            Some(function) => FrameId::Function {
                function: function.clone(),
                file: frame.file.as_deref().map(|f| base_name(f).to_string()),
                line: frame.line,
            },
            None => FrameId::Address {
                module: frame.module.clone(),
                offset: frame.offset.unwrap_or(0),
            },
        }
    }
}

impl fmt::Display for FrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameId::Function {
                function,
                file: Some(file),
                line: Some(line),
            } => write!(f, "{function} at {file}:{line}"),
            FrameId::Function { function, .. } => f.write_str(function),
            FrameId::Address { module, offset } => {
                f.write_str(&module_offset(module.as_deref(), *offset))
            }
        }
    }
}

/// A line of a Python program: the innermost frame of a call's Python stack in the program's own
/// code (packages and the standard library passed over).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PythonLine {
    /// `co_filename` as the trace recorded it.
    pub file: String,
    /// `co_qualname`.
    pub function: String,
    pub line: u32,
}

impl fmt::Display for PythonLine {
    /// `train.py:42 in Model.forward`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&line_label(&self.file, self.line, &self.function))
    }
}

/// The line of `path` (a line's callers, innermost first) that names it among `paths`, every
/// path the program reached that line on: the first where another path parts from it; `None`
/// when the line has one path.
pub(crate) fn parting_line<'a>(
    path: &'a [PythonLine],
    paths: &std::collections::BTreeSet<&[PythonLine]>,
) -> Option<&'a PythonLine> {
    let others = || paths.iter().filter(|o| **o != path);
    let depth = (0..path.len()).find(|&d| others().any(|o| o.get(d) != path.get(d)))?;
    path.get(depth)
}

/// A call site as two traces can agree on it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteIdentity {
    /// The Python line of every call at the site, when they share one; a line inferred for a
    /// thread without Python counts, as the analysis counts it, so a site is named by the line
    /// the report names it by.
    pub python: Option<PythonLine>,
    /// The program's own frames that called `python`, innermost first: a helper's line called
    /// from two lines of the program is two sites, as it is two places in the report
    /// ([`crate::live::ProgramLine`]). Empty without a Python line, and for a line that grows
    /// on every path it is reached on (the line itself keeps the memory: one place).
    pub path: Vec<PythonLine>,
    /// Native frames outside the CUDA libraries and the tracer, innermost first.
    pub native: Vec<FrameId>,
}

/// The identity of the native part of a stack: its native frames outside the CUDA libraries and
/// the tracer (which differ with the route a call took into the driver, not with who asked).
pub fn native_identity(frames: &[StackFrame]) -> Vec<FrameId> {
    frames
        .iter()
        .filter(|f| f.kind == FrameKind::Native && !f.in_cuda_library())
        .map(FrameId::of)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(function: Option<&str>, file: Option<&str>, module: &str, offset: u64) -> StackFrame {
        StackFrame {
            kind: FrameKind::Native,
            function: function.map(str::to_string),
            file: file.map(str::to_string),
            line: file.map(|_| 17),
            module: Some(module.to_string()),
            offset: Some(offset),
            inlined: false,
        }
    }

    #[test]
    fn named_frames_forget_their_offsets_and_directories() {
        let a = native(Some("leak"), Some("/build/a/model.c"), "libm.so", 0x1234);
        let b = native(Some("leak"), Some("/srv/b/model.c"), "libm.so", 0x9876);
        assert_eq!(FrameId::of(&a), FrameId::of(&b));
        assert_eq!(FrameId::of(&a).to_string(), "leak at model.c:17");
        let c = native(None, None, "libm.so", 0x40);
        assert_eq!(FrameId::of(&c).to_string(), "libm.so+0x40");
    }

    #[test]
    fn cuda_library_frames_are_left_out() {
        let frames = [
            native(Some("cudaMalloc"), None, "libcudart.so.13", 0x10),
            native(Some("leak"), Some("model.c"), "libm.so", 0x20),
            native(None, None, "libvramtrace.so", 0x30),
        ];
        let id = native_identity(&frames);
        assert_eq!(id.len(), 1);
        assert_eq!(id[0].to_string(), "leak at model.c:17");
    }
}
