//! Source files of the workloads and stand-ins, and the line a given text is written on: tests
//! name the exact line a report must point at by searching the C source for what that line says,
//! so no marker has to be added to the sources and an edit above the line cannot break the test.

use std::path::{Path, PathBuf};

/// Path of `tests/workloads/<file>`, as the build passed it to the compiler (and so as DWARF
/// names it).
pub fn workload_source(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workloads")
        .join(file)
}

/// Path of `tests/standins/<relative>` (for example `framework/fw_alloc.c`).
pub fn standin_source(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("standins")
        .join(relative)
}

/// The 1-based number of the one line of `path` that contains `text`; panics when no line or
/// more than one does, so a test never silently points at the wrong line.
pub fn line_of(path: &Path, text: &str) -> u32 {
    let source = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let found: Vec<u32> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(text))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    match found[..] {
        [line] => line,
        _ => panic!(
            "{}: {:?} is on lines {found:?}, want exactly one",
            path.display(),
            text
        ),
    }
}
