//! The trace header: which process, when, with what settings.

use serde::{Deserialize, Serialize};

/// The first eight bytes of every trace.
pub const MAGIC: [u8; 8] = *b"VRAMTRC\0";

/// The format version this code writes; it reads this one and every one since
/// [`OLDEST_VERSION`].
pub const FORMAT_VERSION: u32 = 4;

/// The oldest format version this code reads (version 1: events in postcard's layout).
pub const OLDEST_VERSION: u32 = 1;

/// Facts about the traced process, written once at the start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Version of the tracer that wrote the file.
    pub tool_version: String,
    pub pid: u32,
    pub ppid: u32,
    /// Set in a trace started by a forked child: the pid of the process it was forked from.
    pub forked_from: Option<u32>,
    pub host: String,
    /// `RANK`, `LOCAL_RANK` and `WORLD_SIZE` from the environment when set.
    pub rank: Option<i32>,
    pub local_rank: Option<i32>,
    pub world_size: Option<i32>,
    pub command_line: Vec<String>,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// `CLOCK_MONOTONIC` at the same instant, to turn event times into wall-clock times.
    pub start_mono_ns: u64,
    pub pointer_size: u8,
    /// The `VRAMTRACE_*` settings in effect, as `(name, value)`.
    pub settings: Vec<(String, String)>,
}
