//! The one rule that names a call site in words, for every output (report tables, the diagnosis,
//! `run`'s summary, `replay`, `diff`, the exports, the HTML page), from the site's mixed stack:
//!
//! 1. the program's own Python line, `train.py:42 in step` (its innermost frame outside
//!    installed packages and the standard library, else the innermost Python frame);
//! 2. else, where a library (NCCL, cuBLAS, a framework: [`is_library_module`]) allocated for a
//!    native program, the program's own function, at its source line when the program has line
//!    tables, and the library function it called, `init_comms at trainer.cc:88 →
//!    ncclCommInitRank`: the place the user can change;
//! 3. else the native function that asked (the first frame outside the CUDA libraries), with
//!    its last two scopes and without parameters ([`short_function`]), at its source line when
//!    it is the program's own and has line tables;
//! 4. else nothing: the caller's `module+offset` says as much.

use super::stack::{FrameKind, StackFrame};
use crate::analysis::owner::is_library_module;
use crate::analysis::site::short_function;
use crate::python::is_library_file;
use crate::units::{base_name, line_label};

/// The label of a call with these mixed frames (Python frames innermost first, then native
/// frames innermost first), by the rule above; `None` when nothing names it.
pub fn frames_label(frames: &[StackFrame]) -> Option<String> {
    let python = || frames.iter().filter(|f| f.kind == FrameKind::Python);
    let program = python()
        .find(|f| !f.file.as_deref().is_some_and(is_library_file))
        .or_else(|| python().next());
    if let Some(p) = program {
        return Some(line_label(
            p.file.as_deref().unwrap_or("<unknown>"),
            p.line.unwrap_or(0),
            p.function.as_deref().unwrap_or("?"),
        ));
    }
    let native: Vec<&StackFrame> = frames
        .iter()
        .filter(|f| f.kind == FrameKind::Native && !f.in_cuda_library())
        .collect();
    let owner = native.first()?;
    let library = |f: &StackFrame| f.module.as_deref().is_some_and(is_library_module);
    if library(owner) {
        // The program's first frame, and the library's function it called.
        if let Some(k) = native
            .iter()
            .position(|f| f.module.is_some() && !library(f))
        {
            if let Some(place) = function_at_line(native[k]) {
                let entry = native[..k].iter().rev().find_map(|f| f.function.as_deref());
                return Some(match entry {
                    Some(e) => format!("{place} → {}", short_function(e)),
                    None => place,
                });
            }
        }
    }
    let asked = native.iter().find(|f| f.function.is_some())?;
    Some(if library(asked) {
        short_function(asked.function.as_deref()?)
    } else {
        function_at_line(asked)?
    })
}

/// A frame of the program's own code: its function, at its source line when known.
fn function_at_line(f: &StackFrame) -> Option<String> {
    let function = short_function(f.function.as_deref()?);
    Some(match (f.file.as_deref(), f.line) {
        (Some(file), Some(line)) => format!("{function} at {}:{line}", base_name(file)),
        _ => function,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(function: &str, module: &str) -> StackFrame {
        StackFrame {
            kind: FrameKind::Native,
            function: Some(function.to_string()),
            file: None,
            line: None,
            module: Some(module.to_string()),
            offset: Some(0x10),
            inlined: false,
        }
    }

    fn python(file: &str, line: u32, function: &str) -> StackFrame {
        StackFrame {
            kind: FrameKind::Python,
            function: Some(function.to_string()),
            file: Some(file.to_string()),
            line: Some(line),
            module: None,
            offset: None,
            inlined: false,
        }
    }

    #[test]
    fn a_site_is_named_by_the_place_the_user_can_change() {
        // A Python program: its own line, past the package's frames.
        let torch = "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py";
        let frames = [
            python(torch, 125, "Linear.forward"),
            python("/work/train.py", 42, "<module>"),
            native(
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
                "libc10_cuda.so",
            ),
        ];
        assert_eq!(
            frames_label(&frames).as_deref(),
            Some("train.py:42 in <module>")
        );
        // A native program whose communicators NCCL made: its own function, and NCCL's it called.
        let frames = [
            native("cudaMalloc", "libcudart.so.13"),
            native("cumem_alloc", "libnccl.so.2"),
            native("ncclCommInitRank", "libnccl.so.2"),
            native("init_comms(int)", "trainer"),
            native("main", "trainer"),
        ];
        assert_eq!(
            frames_label(&frames).as_deref(),
            Some("init_comms → ncclCommInitRank")
        );
        // With the program's line tables, its line too.
        let mut at_line = frames.clone();
        at_line[3].file = Some("/src/trainer.cc".to_string());
        at_line[3].line = Some(88);
        assert_eq!(
            frames_label(&at_line).as_deref(),
            Some("init_comms at trainer.cc:88 → ncclCommInitRank")
        );
        // Its own allocation: the function that asked.
        let frames = [
            native("cudaMalloc", "libcudart.so.13"),
            native("alloc_weights", "trainer"),
        ];
        assert_eq!(frames_label(&frames).as_deref(), Some("alloc_weights"));
        // A library thread with no frame of the program: the library's function.
        let frames = [
            native("cudaHostAlloc", "libcudart.so.13"),
            native("proxy_main", "libnccl.so.2"),
        ];
        assert_eq!(frames_label(&frames).as_deref(), Some("proxy_main"));
        assert_eq!(
            frames_label(&[native("cudaMalloc", "libcudart.so.13")]),
            None
        );
    }
}
