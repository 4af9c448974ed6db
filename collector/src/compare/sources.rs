//! Python source files: finding the file a trace names (on this machine, or under directories
//! the user gives, for traces from elsewhere), and how the lines of two versions of one file
//! correspond. Lines inserted above a call move its line number; a line diff of the two
//! versions (patience diff, as `git diff --patience`) says which line of the new file is which
//! line of the old, and which lines are new.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use similar::{capture_diff_slices, Algorithm, DiffOp};

/// Where source files are looked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceSearch {
    /// Directories searched first, in order, for the recorded path's trailing components.
    dirs: Vec<PathBuf>,
}

impl SourceSearch {
    /// A search of `dirs` (then the recorded paths themselves).
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        SourceSearch { dirs }
    }

    /// `dirs`, then the directories of `VRAMTRACE_SOURCE_PATH` (separated by `:`).
    pub fn with_env(mut dirs: Vec<PathBuf>) -> Self {
        if let Some(path) = std::env::var_os("VRAMTRACE_SOURCE_PATH") {
            dirs.extend(std::env::split_paths(&path).filter(|p| !p.as_os_str().is_empty()));
        }
        SourceSearch { dirs }
    }

    /// The files that may hold the source a trace recorded as `recorded`, in order: under each
    /// directory, the trailing parts of the recorded path that exist there, longest first
    /// (`/tmp/x/train.py` is looked for as `DIR/tmp/x/train.py`, `DIR/x/train.py`,
    /// `DIR/train.py`); then the recorded path itself.
    pub fn candidates(&self, recorded: &str) -> Vec<PathBuf> {
        let parts: Vec<&OsStr> = Path::new(recorded)
            .components()
            .filter_map(|c| match c {
                Component::Normal(p) => Some(p),
                _ => None,
            })
            .collect();
        let mut found = Vec::new();
        for dir in &self.dirs {
            for start in 0..parts.len() {
                let candidate = parts[start..].iter().fold(dir.clone(), |p, c| p.join(c));
                if candidate.is_file() {
                    found.push(candidate);
                }
            }
        }
        found.extend(Some(PathBuf::from(recorded)).filter(|p| p.is_file()));
        found
    }

    /// The first of the [`candidates`](Self::candidates) that can be read.
    pub fn find(&self, recorded: &str) -> Option<PathBuf> {
        self.candidates(recorded).into_iter().next()
    }

    /// The first readable candidate for `recorded` that `fits` (the version of the file a run
    /// executed: another version read in its place would misplace every line).
    pub(crate) fn read_fitting(
        &self,
        recorded: &str,
        fits: impl Fn(&Source) -> bool,
    ) -> Option<Source> {
        self.candidates(recorded).into_iter().find_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let source = Source::new(path, &text);
            fits(&source).then_some(source)
        })
    }

    /// The lines of the source recorded as `recorded`, when it can be found and read.
    pub fn read(&self, recorded: &str) -> Option<Source> {
        self.read_fitting(recorded, |_| true)
    }
}

/// A source file's lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Where it was read from.
    pub path: PathBuf,
    pub lines: Vec<String>,
    /// Per line, whether it is text of a triple-quoted string (a docstring, or a long string's
    /// continuation): no code runs there.
    prose: Vec<bool>,
}

impl Source {
    /// The source `text`, read from `path`.
    pub fn new(path: PathBuf, text: &str) -> Self {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        Source {
            path,
            prose: prose_lines(&lines),
            lines,
        }
    }

    /// The text of 1-based line `n`.
    pub fn line(&self, n: u32) -> Option<&str> {
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        self.lines.get(i).map(String::as_str)
    }

    /// Whether line `n` holds code: not blank, not only a comment, not a docstring or the
    /// inside of a long string.
    pub(crate) fn is_code(&self, n: u32) -> bool {
        let prose = (n as usize).checked_sub(1).and_then(|i| self.prose.get(i));
        self.line(n).is_some_and(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && prose == Some(&false)
        })
    }

    /// Whether this version of the file can be the one that ran a function `function` (a
    /// qualified name) whose code starts at `first_line`: that line defines it (`def`, `async
    /// def`, `class`), or starts the decorators above its definition. The module's own code,
    /// lambdas and comprehensions fit any version.
    pub fn defines(&self, function: &str, first_line: u32) -> bool {
        let name = function.rsplit('.').next().unwrap_or(function);
        if name.starts_with('<') {
            return true;
        }
        let defines = |t: &str| {
            let t = t.trim_start().trim_start_matches("async ");
            ["def ", "class "].iter().any(|k| {
                t.strip_prefix(k).is_some_and(|rest| {
                    rest.trim_start().starts_with(name)
                        && !rest.trim_start()[name.len()..]
                            .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
        };
        let Some(first) = self.line(first_line) else {
            return false;
        };
        if defines(first) {
            return true;
        }
        // A decorated function's code starts at its first decorator.
        first.trim_start().starts_with('@')
            && (first_line + 1..first_line + 16)
                .map_while(|n| self.line(n))
                .find(|l| !l.trim_start().starts_with('@'))
                .is_some_and(defines)
    }

    /// Whether line `n` lies in the body of a `for` or `while` loop of its function (read from
    /// indentation: the headers of the blocks around it, up to its `def` or `class`).
    pub fn in_loop(&self, n: u32) -> bool {
        let Some(text) = self.line(n) else {
            return false;
        };
        let mut indent = indentation(text);
        let mut i = n as usize - 1;
        while indent > 0 && i > 0 {
            i -= 1;
            let l = &self.lines[i];
            let t = l.trim_start();
            if t.is_empty() || t.starts_with('#') || indentation(l) >= indent {
                continue;
            }
            indent = indentation(l);
            let header = t.trim_start_matches("async ");
            if header.starts_with("for ") || header.starts_with("while ") {
                return true;
            }
            if header.starts_with("def ") || header.starts_with("class ") {
                return false;
            }
        }
        false
    }
}

/// Per line, whether it is a string's text rather than code: a line that starts inside a
/// triple-quoted string, or a statement that is a triple-quoted string alone (a docstring).
/// Read with Python's quoting rules as far as a line scan can: `#` comments, one-line strings
/// and backslash escapes; string prefixes (`r`, `b`, `f`, `u`) only where a docstring starts.
fn prose_lines(lines: &[String]) -> Vec<bool> {
    let mut open: Option<&str> = None;
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let starts_inside = open.is_some();
        let bare = line
            .trim_start()
            .trim_start_matches(['r', 'R', 'b', 'B', 'u', 'U', 'f', 'F']);
        out.push(starts_inside || bare.starts_with("\"\"\"") || bare.starts_with("'''"));
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let rest = &b[i..];
            if let Some(q) = open {
                if b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if rest.starts_with(q.as_bytes()) {
                    open = None;
                    i += 3;
                    continue;
                }
                i += 1;
                continue;
            }
            match b[i] {
                b'#' => break,
                b'"' | b'\'' => {
                    let triple = if b[i] == b'"' { "\"\"\"" } else { "'''" };
                    if rest.starts_with(triple.as_bytes()) {
                        open = Some(triple);
                        i += 3;
                        continue;
                    }
                    // A one-line string: to its closing quote.
                    let q = b[i];
                    i += 1;
                    while i < b.len() && b[i] != q {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                _ => i += 1,
            }
        }
    }
    out
}

fn indentation(line: &str) -> usize {
    line.chars()
        .take_while(|c| c.is_whitespace())
        .map(|c| if c == '\t' { 8 } else { 1 })
        .sum()
}

/// What happened to a line between the two versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LineChangeKind {
    /// A line of the new version (B) that the old one (A) does not have, or has otherwise.
    Added,
    /// A line of the old version that the new one does not have.
    Removed,
}

/// One added or removed line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LineChange {
    pub kind: LineChangeKind,
    /// Its number in the version that has it.
    pub line: u32,
    pub text: String,
}

/// How the lines of two versions of a file correspond.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineMap {
    /// Each unchanged line of B, to its number in A.
    b_to_a: BTreeMap<u32, u32>,
    /// Lines added in B and removed from A, in order.
    pub changes: Vec<LineChange>,
}

impl LineMap {
    /// The line diff of `a` (old) and `b` (new).
    pub fn between(a: &Source, b: &Source) -> Self {
        let mut map = LineMap::default();
        let number = |i: usize| i as u32 + 1;
        for op in capture_diff_slices(Algorithm::Patience, &a.lines, &b.lines) {
            let (old, new) = (op.old_range(), op.new_range());
            match op {
                DiffOp::Equal { .. } => {
                    for (o, n) in old.zip(new) {
                        map.b_to_a.insert(number(n), number(o));
                    }
                }
                DiffOp::Delete { .. } | DiffOp::Insert { .. } | DiffOp::Replace { .. } => {
                    for o in old {
                        map.changes.push(LineChange {
                            kind: LineChangeKind::Removed,
                            line: number(o),
                            text: a.lines[o].clone(),
                        });
                    }
                    for n in new {
                        map.changes.push(LineChange {
                            kind: LineChangeKind::Added,
                            line: number(n),
                            text: b.lines[n].clone(),
                        });
                    }
                }
            }
        }
        map
    }

    /// The number in A of line `b_line` of B; `None` for a line B added or changed.
    pub(crate) fn to_a(&self, b_line: u32) -> Option<u32> {
        self.b_to_a.get(&b_line).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        Source::new(PathBuf::from("x.py"), text)
    }

    const OLD: &str = "import torch\nmodel = make()\n# SETUP\nfor step in range(10):\n    x = batch()\n    loss = model(x)\n    # HERE\n    loss.backward()\nprint('done')\n";
    const NEW: &str = "import torch\nmodel = make()\n# one\n# two\nkept = []\nfor step in range(10):\n    x = batch()\n    loss = model(x)\n    kept.append(loss)\n    loss.backward()\nprint('done')\n";

    #[test]
    fn unchanged_lines_map_across_inserted_ones() {
        let map = LineMap::between(&source(OLD), &source(NEW));
        assert_eq!(map.to_a(1), Some(1));
        assert_eq!(map.to_a(7), Some(5), "x = batch() moved down by 2");
        assert_eq!(map.to_a(8), Some(6));
        assert_eq!(map.to_a(10), Some(8));
        assert_eq!(map.to_a(9), None, "the added line");
        assert_eq!(map.to_a(5), None);
        let added: Vec<(u32, &str)> = (map.changes.iter())
            .filter(|c| c.kind == LineChangeKind::Added)
            .map(|c| (c.line, c.text.as_str()))
            .collect();
        assert_eq!(
            added,
            [
                (3, "# one"),
                (4, "# two"),
                (5, "kept = []"),
                (9, "    kept.append(loss)")
            ]
        );
        let removed: Vec<u32> = (map.changes.iter())
            .filter(|c| c.kind == LineChangeKind::Removed)
            .map(|c| c.line)
            .collect();
        assert_eq!(removed, [3, 7]);
    }

    #[test]
    fn a_version_fits_the_functions_it_defines_where_they_start() {
        let v = source("import x\n\n@torch.no_grad()\n@other\ndef evaluate(m):\n    pass\nclass Model:\n    async def step(self):\n        pass\n    def stepper(self):\n        pass\n");
        assert!(v.defines("evaluate", 3), "at its first decorator");
        assert!(v.defines("evaluate", 5));
        assert!(v.defines("Model", 7));
        assert!(v.defines("Model.step", 8));
        assert!(v.defines("Model.stepper", 10));
        assert!(!v.defines("Model.step", 10), "stepper is not step");
        assert!(!v.defines("Model.step", 9));
        assert!(v.defines("<module>", 1) && v.defines("f.<locals>.<lambda>", 99));
        assert!(!v.defines("missing", 99));
    }

    #[test]
    fn loops_and_code_are_read_from_indentation() {
        let new = source(NEW);
        assert!(new.in_loop(9));
        assert!(!new.in_loop(5));
        assert!(!new.in_loop(11));
        assert!(new.is_code(5) && !new.is_code(3) && !new.is_code(99));
        let nested = source(
            "def f():\n    for i in x:\n        def g():\n            y = 1\n        z = 2\n",
        );
        assert!(!nested.in_loop(4), "a def inside a loop starts a new body");
        assert!(nested.in_loop(5));
    }

    #[test]
    fn docstrings_and_long_strings_are_no_code() {
        let s = source(concat!(
            "\"\"\"Leak: a program.\n",
            "Truth: line 9. # not a comment\n",
            "\"\"\"\n",
            "import torch\n",
            "def f():\n",
            "    r'''Doc.'''\n",
            "    x = '\"\"\"' + \"'''\"  # quotes in strings open nothing\n",
            "    y = f(\"\"\"a\n",
            "b\"\"\", 2)\n",
            "    z = 'é\\'' # \"\"\"\n",
        ));
        let code: Vec<u32> = (1..=10).filter(|&n| s.is_code(n)).collect();
        assert_eq!(code, [4, 5, 7, 8, 10]);
    }

    #[test]
    fn sources_are_found_under_the_given_directories_by_trailing_components() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("job")).unwrap();
        std::fs::write(dir.path().join("job/train.py"), "x = 1\n").unwrap();
        std::fs::write(dir.path().join("other.py"), "y = 2\n").unwrap();
        let search = SourceSearch::new(vec![dir.path().to_path_buf()]);
        assert_eq!(
            search.find("/tmp/run-7/job/train.py"),
            Some(dir.path().join("job/train.py"))
        );
        assert_eq!(
            search.find("/elsewhere/other.py"),
            Some(dir.path().join("other.py"))
        );
        assert_eq!(search.find("/nowhere/missing.py"), None);
        assert_eq!(search.read("/a/other.py").unwrap().lines, ["y = 2"]);
    }
}
