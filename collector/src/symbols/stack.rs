//! Mixed stacks: a call's Python frames (where the trace has them) above its native frames, as
//! reports print them, with runs of CUDA-library frames collapsed to one line (the tracer's own
//! frames are left out of stacks before this: see `Attribution::stack`).

use std::fmt;

use serde::Serialize;

use crate::module_map::is_cuda_library;
use crate::units::module_offset;

/// Whether a frame is Python code or native code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    Python,
    Native,
}

/// One frame of a mixed stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StackFrame {
    pub kind: FrameKind,
    /// Function name (Python qualname, or the demangled native name); `null` when unknown.
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Native frames: the module's file name, `null` when no recorded module contains the
    /// address. Python frames: `null`.
    pub module: Option<String>,
    /// Native frames: the return address's offset from the module's load bias (the raw address
    /// when no module contains it). Python frames: `null`.
    pub offset: Option<u64>,
    /// Native frames: whether this frame was inlined into the next one (both share an address).
    pub inlined: bool,
}

impl StackFrame {
    /// Whether the frame is inside a CUDA library or the tracer: hidden by default.
    pub fn in_cuda_library(&self) -> bool {
        self.kind == FrameKind::Native && self.module.as_deref().is_some_and(is_cuda_library)
    }
}

impl fmt::Display for StackFrame {
    /// Python: `train.py:42 in Model.forward`. Native: `alloc_weights at model.c:17
    /// (libmodel.so)`, `alloc_weights (libmodel.so)` without line information, and
    /// `libmodel.so+0x1234` when nothing names the address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let function = self.function.as_deref();
        match self.kind {
            FrameKind::Python => {
                let file = self.file.as_deref().unwrap_or("<unknown>");
                write!(
                    f,
                    "{file}:{} in {}",
                    self.line.unwrap_or(0),
                    function.unwrap_or("?")
                )
            }
            FrameKind::Native => {
                let Some(function) = function else {
                    let offset = self.offset.unwrap_or(0);
                    return f.write_str(&module_offset(self.module.as_deref(), offset));
                };
                write!(f, "{function}")?;
                if let (Some(file), Some(line)) = (&self.file, self.line) {
                    write!(f, " at {file}:{line}")?;
                }
                if let Some(m) = &self.module {
                    write!(f, " ({m})")?;
                }
                if self.inlined {
                    write!(f, " [inlined]")?;
                }
                Ok(())
            }
        }
    }
}

/// One printed line of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackLine<'a> {
    Frame(&'a StackFrame),
    /// Consecutive frames in CUDA libraries or the tracer.
    Collapsed {
        frames: usize,
        /// Their modules, in order of first appearance.
        modules: Vec<&'a str>,
    },
}

impl fmt::Display for StackLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StackLine::Frame(frame) => frame.fmt(f),
            StackLine::Collapsed { frames, modules } => {
                let s = if *frames == 1 { "" } else { "s" };
                write!(f, "… {frames} frame{s} in {}", modules.join(", "))
            }
        }
    }
}

/// The lines to print for `frames`: every frame when `full`, else runs of CUDA-library frames
/// as one line each.
pub fn collapse(frames: &[StackFrame], full: bool) -> Vec<StackLine<'_>> {
    let mut lines: Vec<StackLine<'_>> = Vec::new();
    for frame in frames {
        let module = frame.module.as_deref().filter(|_| frame.in_cuda_library());
        match (module, lines.last_mut()) {
            (Some(m), Some(StackLine::Collapsed { frames, modules })) if !full => {
                *frames += 1;
                if !modules.contains(&m) {
                    modules.push(m);
                }
            }
            (Some(m), _) if !full => lines.push(StackLine::Collapsed {
                frames: 1,
                modules: vec![m],
            }),
            _ => lines.push(StackLine::Frame(frame)),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(function: Option<&str>, module: &str, offset: u64) -> StackFrame {
        StackFrame {
            kind: FrameKind::Native,
            function: function.map(str::to_string),
            file: None,
            line: None,
            module: Some(module.to_string()),
            offset: Some(offset),
            inlined: false,
        }
    }

    #[test]
    fn cuda_runs_collapse_into_one_line_each() {
        let frames = [
            native(None, "libvramtrace.so", 0x10),
            native(None, "libcuda.so.1", 0x20),
            native(Some("cudaMalloc"), "libcudart.so.13", 0x30),
            native(Some("alloc"), "libapp.so", 0x40),
            native(None, "libcudart.so.13", 0x50),
        ];
        let lines: Vec<String> = collapse(&frames, false)
            .iter()
            .map(|l| l.to_string())
            .collect();
        assert_eq!(
            lines,
            [
                "… 3 frames in libvramtrace.so, libcuda.so.1, libcudart.so.13",
                "alloc (libapp.so)",
                "… 1 frame in libcudart.so.13",
            ]
        );
        assert_eq!(collapse(&frames, true).len(), 5);
        assert_eq!(collapse(&frames, true)[1].to_string(), "libcuda.so.1+0x20");
    }
}
