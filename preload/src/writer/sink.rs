//! Where the writer's records go: the trace file of the segment being written (created with its
//! header where no file exists, `files::trace_file`), or nowhere once writing failed —
//! the program runs on.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use vramtrace_collector::event::Event;
use vramtrace_collector::format::{Header, Packing, Record, SegmentInfo, TraceWriter};

use crate::capture::clock;
use crate::files::segments::FileId;
use crate::files::trace_file::{CreateError, TraceFile};
use crate::self_profile::TimedWrite;
use crate::session::{announce, Session};
use crate::warn::warn;
use vramtrace_collector::units::pattern::{self, Naming};

/// The trace writer over its file.
pub(super) type FileWriter = TraceWriter<TimedWrite<TraceFile>>;

/// Where records go: the trace file, or nowhere once writing failed (the program runs on).
pub(super) struct Sink {
    pub(super) writer: Option<FileWriter>,
    pub(super) path: String,
    /// Events written, in every segment.
    pub(super) events: u64,
    pub(super) lost: u64,
}

impl Sink {
    /// Writes an event; `true` when that wrote a chunk out.
    pub(super) fn write_event(&mut self, e: &Event) -> bool {
        match self.writer.as_mut() {
            Some(w) => {
                let pending = w.pending_records();
                if let Err(err) = w.write_event(e) {
                    self.fail(&err);
                    self.lost += 1;
                    false
                } else {
                    self.events += 1;
                    w.pending_records() <= pending
                }
            }
            None => {
                self.lost += 1;
                false
            }
        }
    }

    /// Clock ticks spent in `write(2)` since the last call (self-profile).
    pub(super) fn write_ticks(&mut self) -> u64 {
        self.writer.as_mut().map_or(0, |w| w.get_mut().take_ticks())
    }

    pub(super) fn fail(&mut self, e: &dyn std::fmt::Display) {
        announce::trace_cut(&self.path);
        warn(&format!(
            "writing {} failed ({e}); tracing stops, the program continues",
            self.path
        ));
        self.writer = None;
    }

    /// Writes a record that is not an event (modules, stacks, stats, diagnostics).
    pub(super) fn write(&mut self, r: &Record) {
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.write(r) {
                self.fail(&e);
            }
        }
    }

    /// Compresses the chunks from the next one on with `packing` (from the default, smaller and
    /// faster to replay, to the cheapest when the writer falls behind, and back).
    pub(super) fn set_packing(&mut self, packing: Packing) {
        if let Some(w) = self.writer.as_mut() {
            if w.packing() != packing {
                if let Err(e) = w.set_packing(packing) {
                    self.fail(&e);
                }
            }
        }
    }

    pub(super) fn flush(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = w.flush_chunk() {
                self.fail(&e);
            }
        }
    }

    /// Bytes of the current file written so far.
    pub(super) fn bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, TraceWriter::bytes_written)
    }

    /// Goes on in the next segment's file (`writer`, at `path`); the current one is closed.
    pub(super) fn switch(&mut self, writer: FileWriter, path: &Path) {
        self.writer = Some(writer);
        self.path = path.display().to_string();
    }
}

fn env_i32(name: &str) -> Option<i32> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The trace file as first created: its path and identity, for the segments after it.
pub(super) struct Opened {
    pub(super) sink: Sink,
    pub(super) header: Header,
    /// Set when the file was created.
    pub(super) file: Option<(PathBuf, FileId)>,
}

/// Creates the trace file with its header (the first segment's when the trace is cut into
/// segments); a sink that writes nothing (after a warning) when it cannot.
pub(super) fn open_first(session: &Session) -> Opened {
    let pid = std::process::id();
    let start_unix = SystemTime::now();
    let rank = env_i32("RANK").or_else(|| env_i32("LOCAL_RANK"));
    let host = host_name();
    let naming = Naming {
        pid,
        rank,
        host: &host,
        start_unix_s: start_unix
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let start_mono_ns = clock::monotonic_ns();
    let segment = session.config.segments.enabled().then(|| SegmentInfo {
        index: 1,
        time_ns: start_mono_ns,
        ..SegmentInfo::default()
    });
    let header = Header {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        pid,
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        forked_from: session.forked_from,
        host: host.clone(),
        rank: env_i32("RANK"),
        local_rank: env_i32("LOCAL_RANK"),
        world_size: env_i32("WORLD_SIZE"),
        command_line: if session.config.store_command_line {
            crate::session::cmdline::current()
        } else {
            Vec::new()
        },
        start_unix_ns: start_unix
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        start_mono_ns,
        pointer_size: std::mem::size_of::<usize>() as u8,
        settings: session.config.describe(),
        segment,
    };
    let quiet = session.config.quiet;
    let pattern = &session.config.output;
    let first = pattern::first_choice(pattern, &naming);
    let untraced = |header: Header, path: &Path, why: String| {
        announce::untraced(&why);
        if !quiet {
            warn(&format!("{why}; the program runs on without a trace"));
        }
        Opened {
            sink: Sink {
                writer: None,
                path: path.display().to_string(),
                events: 0,
                lost: 0,
            },
            header,
            file: None,
        }
    };
    let (writer, path, id) = match create(&header, &[], pattern::candidates(&first, pattern, pid)) {
        Ok(made) => made,
        Err(why) => return untraced(header, &first, why),
    };
    announce::trace_created(&path);
    // A forked child's trace beside its parent's is expected; anyone else is told once.
    let wanted = std::path::absolute(&first).unwrap_or(first);
    if path != wanted && session.forked_from.is_none() && !quiet {
        warn(&format!(
            "{} already exists and is left alone; this process writes its trace to {}",
            wanted.display(),
            path.display()
        ));
    }
    Opened {
        sink: Sink {
            writer: Some(writer),
            path: path.display().to_string(),
            events: 0,
            lost: 0,
        },
        header,
        file: Some((path, id)),
    }
}

/// A trace file with `header` and then `records`, created at the first free name of `names`;
/// nothing is created where a file exists. The error says why in words.
pub(super) fn create(
    header: &Header,
    records: &[Record],
    names: impl Iterator<Item = PathBuf>,
) -> Result<(FileWriter, PathBuf, FileId), String> {
    // The header and the records are written into the staged file, which appears under its
    // name with them.
    let mut writer = TraceWriter::new(TimedWrite::new(TraceFile::staged()), header)
        .map_err(|e| format!("cannot write the trace header: {e}"))?
        .with_chunk_bytes(256 * 1024);
    for r in records {
        writer
            .write(r)
            .map_err(|e| format!("cannot write the trace: {e}"))?;
    }
    writer
        .flush_chunk()
        .map_err(|e| format!("cannot write the trace: {e}"))?;
    let file = writer.get_mut().get_mut();
    let path = match file.create(names) {
        Ok(path) => path.to_path_buf(),
        Err(e @ CreateError::NotRegular(_)) => return Err(e.to_string()),
        Err(e) => return Err(format!("cannot write the trace: {e}")),
    };
    let id = file.id();
    Ok((writer, path, id))
}
