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
    pub fn add_code(&mut self, code: &PyCode) {
        self.codes.insert(code.id, code.clone());
    }

    /// Records an interned Python stack.
    pub fn add_stack(&mut self, stack: &PyStackDef) {
        self.stacks
            .insert(stack.id, stack.frames.clone().into_boxed_slice());
    }

    /// The code object with a given id.
    pub fn code(&self, id: u32) -> Option<&PyCode> {
        self.codes.get(&id)
    }

    /// The raw frames of stack `id`, innermost first; `None` for 0 or an undefined id.
    pub fn raw_frames(&self, id: StackId) -> Option<&[PyFrame]> {
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
}
