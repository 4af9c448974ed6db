//! Reading a trace file into the live-allocation state, with the facts about how reading went.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use vramtrace_collector::format::{Ending, Header, TraceError, TraceReader};
use vramtrace_collector::live::LiveState;

/// A trace read to its end (or as far as it could be read).
pub struct LoadedTrace {
    pub path: PathBuf,
    pub header: Header,
    pub ending: Ending,
    /// Records read.
    pub records: u64,
    /// Complete chunks read.
    pub chunks: u64,
    /// Records skipped because this version does not know their kind.
    pub skipped: u64,
    /// Bytes of the file that were read.
    pub bytes_read: u64,
    pub state: LiveState,
}

/// Lowercases the first letter of an OS message ("No such file" → "no such file") so every
/// error line reads alike.
pub fn lower_first(message: String) -> String {
    let mut chars = message.chars();
    match (chars.next(), chars.next()) {
        (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_lowercase() => {
            a.to_ascii_lowercase().to_string() + &message[1..]
        }
        _ => message,
    }
}

/// The one-line error for a trace that cannot be opened.
fn open_error(path: &Path, err: TraceError) -> anyhow::Error {
    match err {
        // The reader names its source generically; name the file the user gave.
        TraceError::Io { source, .. } => {
            anyhow!("{}: {}", path.display(), lower_first(source.to_string()))
        }
        other => anyhow!("{}: {other}", path.display()),
    }
}

/// Reads every record of the trace at `path` into a fresh [`LiveState`].
pub fn load(path: &Path) -> Result<LoadedTrace> {
    if path.is_dir() {
        return Err(anyhow!("{}: is a directory, not a trace", path.display()));
    }
    let mut reader = TraceReader::open(path).map_err(|e| open_error(path, e))?;
    let mut state = LiveState::new();
    for record in reader.by_ref() {
        state.apply(&record);
    }
    let ending = reader.ending().cloned().unwrap_or(Ending::NoEndRecord {
        offset: reader.offset(),
    });
    Ok(LoadedTrace {
        path: path.to_path_buf(),
        header: reader.header().clone(),
        ending,
        records: reader.records(),
        chunks: reader.chunks(),
        skipped: reader.skipped(),
        bytes_read: reader.offset(),
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_messages_are_lowercased_but_names_are_not() {
        assert_eq!(
            lower_first("No such file or directory (os error 2)".into()),
            "no such file or directory (os error 2)"
        );
        assert_eq!(lower_first("GPU".into()), "GPU");
        assert_eq!(lower_first("".into()), "");
    }
}
