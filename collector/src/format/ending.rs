//! How reading a trace ended ([`Ending`]: whole, cut between chunks, cut inside one, damaged)
//! and the bytes it could not read ([`Unread`]): what the reader, the chunk framing and the
//! header's copies all report, so they are a module of their own below them.

use serde::Serialize;

/// How the records of a trace ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The tracer wrote its end record: the trace is whole.
    Complete,
    /// The file ends cleanly between chunks but without the end record: the process was killed,
    /// or it is still running.
    NoEndRecord { offset: u64 },
    /// The file is cut off inside a chunk; the records of that chunk are lost.
    Truncated { offset: u64, have: u64, need: u64 },
    /// The file ends in damage (format 4: reading stopped at the first damaged chunk).
    Corrupt { offset: u64, reason: String },
}

impl Ending {
    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            Ending::Complete => "complete".to_string(),
            Ending::NoEndRecord { offset } => format!(
                "no end record: the trace stops at byte {offset} (process killed or still running)"
            ),
            Ending::Truncated { offset, have, need } => format!(
                "truncated: cut off inside the chunk at byte {offset} ({have} of {need} bytes present)"
            ),
            Ending::Corrupt { offset, reason } => {
                format!("damaged chunk at byte {offset}: {reason}")
            }
        }
    }

    /// `complete`, `no-end-record`, `truncated` or `corrupt`.
    pub fn kind(&self) -> &'static str {
        match self {
            Ending::Complete => "complete",
            Ending::NoEndRecord { .. } => "no-end-record",
            Ending::Truncated { .. } => "truncated",
            Ending::Corrupt { .. } => "corrupt",
        }
    }

    /// Whether the trace is whole.
    pub fn is_complete(&self) -> bool {
        matches!(self, Ending::Complete)
    }
}

/// Bytes of a trace that could not be read: a damaged chunk, damage up to the next intact
/// chunk, a damaged header block (read from its copy), or a chunk the file ends inside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unread {
    /// File offset of the first byte.
    pub offset: u64,
    pub bytes: u64,
    /// Events in them, when the chunks around say (format 5).
    pub events: Option<u64>,
    pub reason: String,
    /// The trace's last file ends inside them: the trace was cut here (killed, or still being
    /// written), not damaged.
    pub torn: bool,
}
