//! The trace's files on disk: one created safely and kept the process's own ([`trace_file`]),
//! and a bounded trace cut into segments within a disk budget ([`segments`]). The writer thread
//! (`writer/`) fills them.
//!
//! A folder of its own below the session and the writer: the session reads the segment settings
//! with the rest of its settings and closes an inherited trace descriptor in a forked child,
//! neither needing the writer thread, which reads the session. Nothing here uses the rest of the
//! tracer.

pub mod segments;
pub mod trace_file;
