//! Whether the tracer was loaded into the run's processes, so a run without traces can say why:
//! the program made no GPU memory call, or the loader never gave it the library.
//!
//! `run` makes a private directory (mode 0700, removed after the run) and names it in
//! `VRAMTRACE_RUN_STATUS`; the library constructor of each traced process leaves a file there
//! named by its pid, holding `tracing` or `disabled` (see the library's `session::announce`).

use std::path::Path;

use tempfile::TempDir;

/// The variable the library reads (the same name as in `session::announce`).
pub const RUN_STATUS: &str = "VRAMTRACE_RUN_STATUS";

/// The run's status directory.
pub struct StatusDir(TempDir);

/// What the traced processes reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Processes that loaded the tracer with tracing on.
    pub tracing: usize,
    /// Processes that loaded it with `VRAMTRACE_DISABLE` set.
    pub disabled: usize,
}

impl StatusDir {
    /// A fresh directory in the temporary directory; `None` when none can be made (the run then
    /// cannot tell why no trace was written, and says so).
    pub fn new() -> Option<StatusDir> {
        tempfile::Builder::new()
            .prefix("vramtrace-run-")
            .tempdir()
            .ok()
            .map(StatusDir)
    }

    /// The value of `VRAMTRACE_RUN_STATUS`.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// What the processes left so far.
    pub fn read(&self) -> Loaded {
        let mut loaded = Loaded::default();
        let Ok(entries) = std::fs::read_dir(self.path()) else {
            return loaded;
        };
        for entry in entries.filter_map(Result::ok) {
            match std::fs::read(entry.path()).as_deref() {
                Ok(b"disabled\n") => loaded.disabled += 1,
                _ => loaded.tracing += 1,
            }
        }
        loaded
    }
}
