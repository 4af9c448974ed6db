//! Python stacks as a trace names them: code objects (`PyCode` records) and interned stacks of
//! (code, line) frames (`PyStack` records), kept so an event's `py_stack` id can be read back as
//! `file:line in function` frames.

use std::collections::HashMap;

use crate::event::StackId;
use crate::format::{PyCode, PyFrame, PyStackDef};

/// One Python frame with its code object's names filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PythonFrame<'a> {
    /// `co_filename`; `None` when the trace never named the code object.
    pub file: Option<&'a str>,
    /// `co_qualname` (or `co_name`).
    pub function: Option<&'a str>,
    /// The line executing in the frame.
    pub line: u32,
    /// The code object's id in the trace.
    pub code: u32,
}

/// The Python code objects and stacks of a trace.
#[derive(Debug, Default)]
pub struct PythonStacks {
    codes: HashMap<u32, PyCode>,
    stacks: HashMap<StackId, Box<[PyFrame]>>,
}

impl PythonStacks {
    /// Records a code object; a later record with the same id replaces it.
    pub(crate) fn add_code(&mut self, code: &PyCode) {
        self.codes.insert(code.id, code.clone());
    }

    /// Records an interned Python stack.
    pub(crate) fn add_stack(&mut self, stack: &PyStackDef) {
        self.stacks
            .insert(stack.id, stack.frames.clone().into_boxed_slice());
    }

    /// The code object with a given id.
    pub fn code(&self, id: u32) -> Option<&PyCode> {
        self.codes.get(&id)
    }

    /// Every code object the trace named, in no particular order.
    pub fn codes(&self) -> impl Iterator<Item = &PyCode> {
        self.codes.values()
    }

    /// The raw frames of stack `id`, innermost first; `None` for 0 or an undefined id.
    pub(crate) fn raw_frames(&self, id: StackId) -> Option<&[PyFrame]> {
        self.stacks.get(&id).map(|f| &f[..])
    }

    /// The frames of stack `id`, innermost first, with their names; empty for 0 or an
    /// undefined id.
    pub fn frames(&self, id: StackId) -> impl Iterator<Item = PythonFrame<'_>> {
        self.raw_frames(id)
            .unwrap_or(&[])
            .iter()
            .map(|f| self.frame(*f))
    }

    /// The innermost frame of stack `id`.
    pub fn innermost(&self, id: StackId) -> Option<PythonFrame<'_>> {
        self.frames(id).next()
    }

    /// The innermost frame of stack `id` in the program's own code: frames of installed
    /// packages and of the standard library are passed over (a tensor made inside
    /// `torch/nn/functional.py` is the user's line that called it), unless every frame is one.
    pub fn program_frame(&self, id: StackId) -> Option<PythonFrame<'_>> {
        self.frames(id)
            .find(|f| !f.file.is_some_and(is_library_file))
            .or_else(|| self.innermost(id))
    }

    /// The program's own frames that called its line ([`PythonStacks::program_frame`]),
    /// innermost first: the frames outward of it that are not in installed packages or the
    /// standard library. A helper's line reached from two lines of a script has two such paths.
    pub(crate) fn program_callers(&self, id: StackId) -> Vec<PythonFrame<'_>> {
        let own = |f: &PythonFrame<'_>| !f.file.is_some_and(is_library_file);
        let mut frames = self.frames(id);
        // Past the program's own frame, if the stack has one.
        if frames.by_ref().find(own).is_none() {
            return Vec::new();
        }
        frames.filter(own).collect()
    }

    fn frame(&self, f: PyFrame) -> PythonFrame<'_> {
        let code = self.codes.get(&f.code);
        PythonFrame {
            file: code.map(|c| c.file.as_str()),
            function: code.map(|c| c.function.as_str()),
            line: f.line,
            code: f.code,
        }
    }

    /// Whether no stack was recorded.
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }
}

/// Whether a Python source file belongs to an installed package or the standard library rather
/// than to the program: `…/site-packages/…`, `…/dist-packages/…`, `…/lib/python3.12/…`, and
/// `<frozen importlib._bootstrap>`-style names.
pub(crate) fn is_library_file(file: &str) -> bool {
    if file.starts_with('<') || file.contains("/site-packages/") || file.contains("/dist-packages/")
    {
        return true;
    }
    // The standard library: a path component `pythonX.Y` right under a `lib` directory.
    file.split('/').collect::<Vec<_>>().windows(2).any(|w| {
        w[0] == "lib"
            && w[1].strip_prefix("python").is_some_and(|v| {
                v.split('.')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
    })
}

impl std::fmt::Display for PythonFrame<'_> {
    /// `train.py:42 in Model.forward`, as tracebacks name frames.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.unwrap_or("<unknown>");
        match self.function {
            Some(function) => write!(f, "{file}:{} in {function}", self.line),
            None => write!(f, "{file}:{} in <code {}>", self.line, self.code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_named_from_their_code_objects() {
        let mut p = PythonStacks::default();
        p.add_code(&PyCode {
            id: 1,
            file: "train.py".into(),
            function: "Model.forward".into(),
            first_line: 10,
        });
        p.add_stack(&PyStackDef {
            id: 5,
            frames: vec![PyFrame { code: 1, line: 42 }, PyFrame { code: 9, line: 3 }],
        });
        let names: Vec<String> = p.frames(5).map(|f| f.to_string()).collect();
        assert_eq!(
            names,
            ["train.py:42 in Model.forward", "<unknown>:3 in <code 9>"]
        );
        assert_eq!(p.frames(0).count(), 0);
        assert_eq!(p.innermost(5).unwrap().line, 42);
    }

    #[test]
    fn the_program_frame_passes_over_packages_and_the_standard_library() {
        for (file, library) in [
            (
                "/usr/lib/python3/dist-packages/torch/nn/functional.py",
                true,
            ),
            (
                "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                true,
            ),
            ("/usr/lib/python3.12/threading.py", true),
            ("/opt/conda/lib/python3.11/contextlib.py", true),
            ("<frozen importlib._bootstrap>", true),
            ("/work/main/validation/gpu/scenarios/py_leak.py", false),
            ("train.py", false),
            ("/home/me/lib/python_tools/train.py", false),
        ] {
            assert_eq!(is_library_file(file), library, "{file}");
        }
        let mut p = PythonStacks::default();
        for (id, file) in [
            (1, "/x/site-packages/torch/nn/functional.py"),
            (2, "/work/train.py"),
        ] {
            p.add_code(&PyCode {
                id,
                file: file.into(),
                function: "f".into(),
                first_line: 1,
            });
        }
        p.add_stack(&PyStackDef {
            id: 7,
            frames: vec![
                PyFrame {
                    code: 1,
                    line: 1723,
                },
                PyFrame { code: 2, line: 88 },
            ],
        });
        p.add_stack(&PyStackDef {
            id: 8,
            frames: vec![PyFrame {
                code: 1,
                line: 1723,
            }],
        });
        assert_eq!(p.program_frame(7).unwrap().line, 88);
        assert_eq!(
            p.program_frame(8).unwrap().line,
            1723,
            "all library: the innermost"
        );
        assert_eq!(p.program_frame(0), None);
    }
}
