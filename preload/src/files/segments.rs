//! A trace cut into segments and kept within a disk budget (`VRAMTRACE_SEGMENT_BYTES`,
//! `VRAMTRACE_SEGMENT_SECONDS`, `VRAMTRACE_MAX_BYTES`): when the segment being written is full,
//! the writer thread starts the next one, a file of its own that begins with a snapshot of the
//! live state (`docs/trace-format.md`, "Segments"), and deletes the oldest segments while the
//! files would pass the budget. This module keeps the settings, the names and the list of
//! segment files; the writer builds their contents.
//!
//! What is deleted is only ever this process's own segment file: its device and inode are those
//! of the file it created, it reads as a trace whose header names this process, its start and
//! that segment, and its name still names that file just before it is unlinked. A file someone
//! replaced, moved or truncated is left alone (and no longer counted).

use std::collections::VecDeque;
use std::io::BufReader;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vramtrace_collector::format::{Header, TraceReader};

use vramtrace_collector::units::pattern;
use vramtrace_collector::units::{parse_duration, parse_size};

/// What a segment may hold beyond its size when it is cut: the chunk that passed the size and
/// the next one's head. Rotation begins this much before the size (a quarter of it for small
/// segments), so a file stays within it.
const CUT_MARGIN: u64 = 1 << 20;

/// The smallest segment size accepted: a segment must hold some chunks besides its snapshot.
const MIN_SEGMENT_BYTES: u64 = 1 << 20;

/// The segment and budget settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSettings {
    /// A segment is cut when its file reaches this size (`VRAMTRACE_SEGMENT_BYTES`); 0: the
    /// trace is one file, unbounded.
    pub segment_bytes: u64,
    /// …or when it has been written this long (`VRAMTRACE_SEGMENT_SECONDS`; `None`: never).
    pub segment_time: Option<Duration>,
    /// The oldest segments are deleted while the trace's files would pass this
    /// (`VRAMTRACE_MAX_BYTES`); 0: none is deleted.
    pub max_bytes: u64,
}

impl Default for SegmentSettings {
    fn default() -> Self {
        SegmentSettings {
            segment_bytes: 32 << 20,
            segment_time: None,
            max_bytes: 4 << 30,
        }
    }
}

impl SegmentSettings {
    /// Whether the trace is cut into segments.
    pub fn enabled(&self) -> bool {
        self.segment_bytes > 0
    }

    /// Reads the settings through `get`; a bad value adds a warning to `w` and keeps the
    /// default.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>, w: &mut Vec<String>) -> Self {
        let mut s = SegmentSettings::default();
        let size = |name: &str, default: u64, w: &mut Vec<String>| match get(name) {
            None => default,
            Some(v) if v.trim() == "0" => 0,
            Some(v) => match parse_size(v.trim()) {
                Ok(n) => n,
                Err(_) => {
                    w.push(format!(
                        "{name}='{v}' is not a size (examples: 64MiB, 4GiB, 0); using the default"
                    ));
                    default
                }
            },
        };
        s.segment_bytes = size("VRAMTRACE_SEGMENT_BYTES", s.segment_bytes, w);
        s.max_bytes = size("VRAMTRACE_MAX_BYTES", s.max_bytes, w);
        if let Some(v) = get("VRAMTRACE_SEGMENT_SECONDS") {
            match v.trim() {
                "" | "0" => s.segment_time = None,
                t => match parse_duration(t) {
                    Ok(d) => s.segment_time = Some(d),
                    Err(_) => w.push(format!(
                        "VRAMTRACE_SEGMENT_SECONDS='{v}' is not a duration (examples: 600, 30m, \
                         1h, 0 for none); segments are cut by size only"
                    )),
                },
            }
        }
        if s.segment_bytes > 0 && s.segment_bytes < MIN_SEGMENT_BYTES {
            w.push(format!(
                "VRAMTRACE_SEGMENT_BYTES is below the smallest segment, {} MiB; using that",
                MIN_SEGMENT_BYTES >> 20
            ));
            s.segment_bytes = MIN_SEGMENT_BYTES;
        }
        if s.segment_bytes == 0 && s.segment_time.is_some() {
            w.push(
                "VRAMTRACE_SEGMENT_SECONDS needs segments (VRAMTRACE_SEGMENT_BYTES=0 makes one \
                 file); the trace is not cut"
                    .into(),
            );
        }
        if s.segment_bytes == 0 && s.max_bytes > 0 && get("VRAMTRACE_MAX_BYTES").is_some() {
            w.push(
                "VRAMTRACE_MAX_BYTES needs segments (VRAMTRACE_SEGMENT_BYTES=0 makes one file); \
                 the trace is not bounded"
                    .into(),
            );
        }
        // The segment being written and the one before it are always kept.
        if s.segment_bytes > 0 && s.max_bytes > 0 && s.max_bytes < 2 * s.segment_bytes {
            let half = (s.max_bytes / 2).max(MIN_SEGMENT_BYTES);
            let raised = match 2 * half > s.max_bytes {
                true => format!(
                    ", and a budget of {}, the least that holds two",
                    in_words(2 * half)
                ),
                false => String::new(),
            };
            // The segment size the user did not give is said to be the default.
            let default = match get("VRAMTRACE_SEGMENT_BYTES") {
                Some(_) => "",
                None => ", the default",
            };
            w.push(format!(
                "VRAMTRACE_MAX_BYTES (--max-bytes) of {} holds fewer than two segments of {} \
                 (VRAMTRACE_SEGMENT_BYTES, --segment-bytes{default}); using segments of \
                 {}{raised}",
                in_words(s.max_bytes),
                in_words(s.segment_bytes),
                in_words(half)
            ));
            s.segment_bytes = half;
            s.max_bytes = s.max_bytes.max(2 * half);
        }
        s
    }

    /// The settings as the trace header lists them.
    pub fn describe(&self) -> Vec<(String, String)> {
        let time = self.segment_time.map_or(0, |d| d.as_secs());
        vec![
            (
                "VRAMTRACE_SEGMENT_BYTES".into(),
                self.segment_bytes.to_string(),
            ),
            ("VRAMTRACE_SEGMENT_SECONDS".into(), time.to_string()),
            ("VRAMTRACE_MAX_BYTES".into(), self.max_bytes.to_string()),
        ]
    }
}

/// `4 GiB`, `512 KiB`, `1000 B`: a size as a warning names it.
fn in_words(bytes: u64) -> String {
    vramtrace_collector::units::bytes(bytes)
}

pub use super::trace_file::FileId;

/// A segment file this process created.
#[derive(Clone, Debug)]
struct Written {
    index: u32,
    path: PathBuf,
    id: FileId,
    bytes: u64,
}

/// What deleting old segments did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub segments: u32,
    pub bytes: u64,
    /// Files that were not deleted because they were no longer this process's segment, with
    /// why (one warning each).
    pub left: Vec<String>,
}

/// The segments of this process's trace.
pub struct Segments {
    settings: SegmentSettings,
    /// The first segment's path: the others are named after it.
    first: PathBuf,
    /// Who wrote the trace, as its headers say: pid, start.
    pid: u32,
    start_unix_ns: u64,
    /// Earlier segments still on disk, oldest first.
    kept: VecDeque<Written>,
    /// The segment being written (its bytes as of the last look).
    current: Written,
    /// Bytes of every segment before the current one, deleted or not.
    bytes_before: u64,
    began: Instant,
}

impl Segments {
    /// The segments of a trace whose first segment is `first` (file `id`), written by this
    /// process (`header`).
    pub fn new(settings: SegmentSettings, first: &Path, id: FileId, header: &Header) -> Self {
        Segments {
            settings,
            first: first.to_path_buf(),
            pid: header.pid,
            start_unix_ns: header.start_unix_ns,
            kept: VecDeque::new(),
            current: Written {
                index: 1,
                path: first.to_path_buf(),
                id,
                bytes: 0,
            },
            bytes_before: 0,
            began: Instant::now(),
        }
    }

    /// The current segment's number (1 for the first).
    pub fn index(&self) -> u32 {
        self.current.index
    }

    /// Bytes of every segment before the current one.
    pub fn bytes_before(&self) -> u64 {
        self.bytes_before
    }

    /// Whether the current segment, of `bytes` so far, is to be cut now.
    pub fn due(&self, bytes: u64) -> bool {
        let margin = CUT_MARGIN.min(self.settings.segment_bytes / 4);
        bytes + margin >= self.settings.segment_bytes
            || self
                .settings
                .segment_time
                .is_some_and(|t| self.began.elapsed() >= t)
    }

    /// The names to try for the next segment: `NAME.segN.EXT` beside the first, then fresh
    /// ones beside that (`NAME.segN.PID.EXT`, …) as for the first.
    pub fn next_names(&self) -> impl Iterator<Item = PathBuf> + '_ {
        let name = pattern::with_tag(&self.first, &format!("seg{}", self.current.index + 1));
        let pattern = std::ffi::OsString::new();
        pattern::candidates(&name, &pattern, self.pid)
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// The next segment was created at `path` (file `id`): the current one, of `bytes`, is done.
    pub fn started(&mut self, path: &Path, id: FileId, bytes: u64) {
        let done = Written {
            bytes,
            ..self.current.clone()
        };
        self.bytes_before += bytes;
        self.current = Written {
            index: done.index + 1,
            path: path.to_path_buf(),
            id,
            bytes: 0,
        };
        self.kept.push_back(done);
        self.began = Instant::now();
    }

    /// Deletes the oldest segments while the files, the current one counted at its full size
    /// (`bytes` so far), would pass the budget.
    pub fn keep_within_budget(&mut self, bytes: u64) -> Removed {
        let mut removed = Removed::default();
        if self.settings.max_bytes == 0 {
            return removed;
        }
        self.current.bytes = bytes;
        let reserve = bytes.max(self.settings.segment_bytes);
        while self.kept.iter().map(|w| w.bytes).sum::<u64>() + reserve > self.settings.max_bytes {
            let Some(oldest) = self.kept.pop_front() else {
                break;
            };
            match remove_own(&oldest, self.pid, self.start_unix_ns) {
                Ok(()) => {
                    removed.segments += 1;
                    removed.bytes += oldest.bytes;
                }
                Err(why) => removed.left.push(format!(
                    "{} was not deleted: {why}; it is no longer counted in VRAMTRACE_MAX_BYTES",
                    oldest.path.display()
                )),
            }
        }
        removed
    }
}

/// Deletes segment `w` if it is still the file this process (`pid`, started at
/// `start_unix_ns`) wrote; else says why not.
fn remove_own(w: &Written, pid: u32, start_unix_ns: u64) -> Result<(), String> {
    let same = |m: &std::fs::Metadata| m.is_file() && (m.dev(), m.ino()) == w.id;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&w.path)
        .map_err(|e| format!("it cannot be opened ({e})"))?;
    if !file.metadata().is_ok_and(|m| same(&m)) {
        return Err("its name now names another file".into());
    }
    let reader = TraceReader::new(BufReader::new(file))
        .map_err(|e| format!("it no longer reads as a trace ({e})"))?;
    let h = reader.header();
    let index = h.segment.as_ref().map(|s| s.index);
    if h.pid != pid || h.start_unix_ns != start_unix_ns || index != Some(w.index) {
        return Err("it is not this process's segment any more".into());
    }
    if !std::fs::symlink_metadata(&w.path).is_ok_and(|m| same(&m)) {
        return Err("its name now names another file".into());
    }
    std::fs::remove_file(&w.path).map_err(|e| format!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_collector::format::{SegmentInfo, TraceWriter};

    fn header_of(path: &Path) -> Header {
        let file = std::fs::File::open(path).unwrap();
        TraceReader::new(BufReader::new(file))
            .unwrap()
            .header()
            .clone()
    }

    fn settings(pairs: &[(&str, &str)]) -> (SegmentSettings, Vec<String>) {
        let mut w = Vec::new();
        let s = SegmentSettings::from_lookup(
            |k| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string()),
            &mut w,
        );
        (s, w)
    }

    #[test]
    fn a_budget_under_two_segments_gets_segments_of_half_of_it() {
        let (s, w) = settings(&[
            ("VRAMTRACE_MAX_BYTES", "3MiB"),
            ("VRAMTRACE_SEGMENT_BYTES", "2MiB"),
        ]);
        assert_eq!((s.segment_bytes, s.max_bytes), (3 << 19, 3 << 20));
        assert_eq!(
            w,
            ["VRAMTRACE_MAX_BYTES (--max-bytes) of 3.0 MiB holds fewer than two segments of 2.0 \
              MiB (VRAMTRACE_SEGMENT_BYTES, --segment-bytes); using segments of 1.5 MiB"]
        );
    }

    #[test]
    fn settings_default_and_bad_values() {
        let (s, w) = settings(&[]);
        assert!(w.is_empty());
        assert_eq!(s, SegmentSettings::default());
        assert_eq!((s.segment_bytes, s.max_bytes), (32 << 20, 4 << 30));
        let (s, w) = settings(&[
            ("VRAMTRACE_SEGMENT_BYTES", "64MiB"),
            ("VRAMTRACE_MAX_BYTES", "1GiB"),
            ("VRAMTRACE_SEGMENT_SECONDS", "30m"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(s.segment_bytes, 64 << 20);
        assert_eq!(s.max_bytes, 1 << 30);
        assert_eq!(s.segment_time, Some(Duration::from_secs(1800)));
        let (s, w) = settings(&[
            ("VRAMTRACE_SEGMENT_BYTES", "lots"),
            ("VRAMTRACE_SEGMENT_SECONDS", "soon"),
        ]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(s, SegmentSettings::default());
        // A budget smaller than two segments makes the segments smaller.
        let (s, w) = settings(&[("VRAMTRACE_MAX_BYTES", "40MiB")]);
        assert_eq!(
            (s.segment_bytes, s.max_bytes, w.len()),
            (20 << 20, 40 << 20, 1)
        );
        // One below two of the smallest segments is raised to two, and says so.
        let (s, w) = settings(&[("VRAMTRACE_MAX_BYTES", "1MiB")]);
        assert_eq!((s.segment_bytes, s.max_bytes), (1 << 20, 2 << 20));
        assert!(
            w[0].ends_with(
                "segments of 1.0 MiB, and a budget of 2.0 MiB, the least that holds two"
            ),
            "{w:?}"
        );
        let (s, w) = settings(&[("VRAMTRACE_SEGMENT_BYTES", "0")]);
        assert!(w.is_empty());
        assert!(!s.enabled());
        // A time per segment without segments says it cuts nothing.
        let (s, w) = settings(&[
            ("VRAMTRACE_SEGMENT_BYTES", "0"),
            ("VRAMTRACE_SEGMENT_SECONDS", "1"),
        ]);
        assert!(!s.enabled());
        assert_eq!(
            w,
            [
                "VRAMTRACE_SEGMENT_SECONDS needs segments (VRAMTRACE_SEGMENT_BYTES=0 makes one \
              file); the trace is not cut"
            ]
        );
    }

    /// A segment file as the writer leaves it.
    fn segment(dir: &Path, name: &str, header: &Header, index: u32) -> (PathBuf, FileId) {
        let path = dir.join(name);
        let h = Header {
            segment: Some(SegmentInfo {
                index,
                ..SegmentInfo::default()
            }),
            ..header.clone()
        };
        let bytes = TraceWriter::new(Vec::new(), &h).unwrap().finish().unwrap();
        std::fs::write(&path, bytes).unwrap();
        let m = std::fs::metadata(&path).unwrap();
        (path, (m.dev(), m.ino()))
    }

    #[test]
    fn the_oldest_own_segments_go_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let header = Header {
            pid: 77,
            start_unix_ns: 5,
            ..Header::default()
        };
        let s = SegmentSettings {
            segment_bytes: 10,
            segment_time: None,
            max_bytes: 30,
        };
        let (first, id) = segment(dir.path(), "t.vtrace", &header, 1);
        let mut segs = Segments::new(s, &first, id, &header);
        let names: Vec<PathBuf> = segs.next_names().take(2).collect();
        assert_eq!(
            names,
            [
                dir.path().join("t.seg2.vtrace"),
                dir.path().join("t.seg2.77.vtrace")
            ]
        );
        let (second, id2) = segment(dir.path(), "t.seg2.vtrace", &header, 2);
        segs.started(&second, id2, 10);
        let (third, id3) = segment(dir.path(), "t.seg3.vtrace", &header, 3);
        segs.started(&third, id3, 10);
        // 10 + 10 kept, the current reserved at 10: within 30.
        assert_eq!(segs.keep_within_budget(0), Removed::default());
        // Someone replaced the oldest with a file of their own; the next oldest is ours.
        std::fs::remove_file(&first).unwrap();
        std::fs::write(&first, b"a checkpoint").unwrap();
        let (fourth, id4) = segment(dir.path(), "t.seg4.vtrace", &header, 4);
        segs.started(&fourth, id4, 10);
        let removed = segs.keep_within_budget(0);
        assert_eq!((removed.segments, removed.bytes), (0, 0));
        // (Its inode may be the old file's: the header tells them apart.)
        assert_eq!(removed.left.len(), 1, "{removed:?}");
        assert!(removed.left[0].contains("was not deleted"), "{removed:?}");
        assert_eq!(std::fs::read(&first).unwrap(), b"a checkpoint");
        // The next segment makes room by deleting the oldest of ours.
        let (fifth, id5) = segment(dir.path(), "t.seg5.vtrace", &header, 5);
        segs.started(&fifth, id5, 10);
        let removed = segs.keep_within_budget(0);
        assert_eq!(
            (removed.segments, removed.bytes, removed.left.len()),
            (1, 10, 0)
        );
        assert!(!second.exists());
        assert!(third.exists() && fourth.exists() && fifth.exists());
        assert_eq!(header_of(&third).segment.unwrap().index, 3);
        assert_eq!(segs.bytes_before(), 40);
    }
}
