//! Trace names: the output pattern (`VRAMTRACE_OUTPUT`, `vramtrace run -o`) with its
//! placeholders `%p` (pid), `%r` (rank, `x` when unknown), `%h` (host), `%t` (start, Unix
//! seconds) and `%%`; the names a process tries when its name is taken; and, for `run`, which
//! file names a pattern can have produced. The tracer expands and the tools match with the same
//! reading of a pattern, so a trace is always found where it was written.
//!
//! A name is never taken over: when it exists, the tracer writes beside it, `NAME.PID.EXT` when
//! the pattern has no `%p` (so 1000 forked children find a free name at the first try), then
//! `NAME.N.EXT` (`NAME.PID.N.EXT`) for N = 1, 2, ... The tag goes before the extension (what
//! follows the last dot, unless the name starts with it), or at the end of a name without one.
//!
//! Patterns are bytes, not text: a path that is not UTF-8 is a path like any other.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The placeholders a pattern's file name may hold.
pub const PLACEHOLDERS: [&str; 4] = ["%p", "%r", "%h", "%t"];
/// The pattern without settings.
pub const DEFAULT: &str = "vramtrace-%p.vtrace";
/// The pattern without settings in a process that knows its rank (`RANK`, `LOCAL_RANK`).
pub const DEFAULT_RANKED: &str = "vramtrace-rank%r-%p.vtrace";
/// The name a process writes inside a directory given as the pattern.
pub const IN_DIRECTORY: &str = "vramtrace-%p.vtrace";
/// How many fresh names are tried after the first before giving up.
const MAX_ALTERNATIVES: u32 = 1000;

/// Facts a pattern can name.
pub struct Naming<'a> {
    pub pid: u32,
    pub rank: Option<i32>,
    pub host: &'a str,
    pub start_unix_s: u64,
}

/// One part of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Vec<u8>),
    /// `%p`
    Pid,
    /// `%r`: a number, or `x` when the rank is unknown.
    Rank,
    /// `%h`
    Host,
    /// `%t`
    Start,
}

/// What is wrong with `pattern` (the value of `setting`), in one sentence, when a `%` sequence
/// in it is no placeholder (`%q`, a `%` at the end): kept as written, which whoever meant a
/// placeholder wants to be told.
pub fn unknown_placeholders(setting: &str, pattern: &[u8]) -> Option<String> {
    let mut unknown = Vec::new();
    let mut bytes = pattern.iter().copied();
    while let Some(c) = bytes.next() {
        if c != b'%' {
            continue;
        }
        unknown.push(match bytes.next() {
            Some(b'p' | b'r' | b'h' | b't' | b'%') => continue,
            Some(other) => String::from_utf8_lossy(&[b'%', other]).into_owned(),
            None => "%".to_string(),
        });
    }
    let (what, verb) = match unknown.len() {
        0 => return None,
        1 => (unknown[0].clone(), "is no placeholder"),
        _ => (unknown.join(", "), "are no placeholders"),
    };
    Some(format!(
        "{setting} {}: {what} {verb} (%p pid, %r rank, %h host, %t start, %% a percent sign)",
        String::from_utf8_lossy(pattern)
    ))
}

/// The pieces of `pattern`: `%%` is a percent sign; an unknown `%q`, or a `%` at the end, is
/// itself.
fn pieces(pattern: &[u8]) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut text = Vec::new();
    let mut bytes = pattern.iter().copied();
    while let Some(c) = bytes.next() {
        if c != b'%' {
            text.push(c);
            continue;
        }
        let piece = match bytes.next() {
            Some(b'p') => Piece::Pid,
            Some(b'r') => Piece::Rank,
            Some(b'h') => Piece::Host,
            Some(b't') => Piece::Start,
            Some(b'%') => {
                text.push(b'%');
                continue;
            }
            Some(other) => {
                text.extend_from_slice(&[b'%', other]);
                continue;
            }
            None => {
                text.push(b'%');
                continue;
            }
        };
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(piece);
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// Expands the placeholders of `pattern` for this process.
pub fn expand(pattern: &OsStr, n: &Naming) -> OsString {
    let mut out = Vec::with_capacity(pattern.len() + 16);
    for piece in pieces(pattern.as_bytes()) {
        match piece {
            Piece::Text(t) => out.extend_from_slice(&t),
            Piece::Pid => out.extend_from_slice(n.pid.to_string().as_bytes()),
            Piece::Rank => match n.rank {
                Some(r) => out.extend_from_slice(r.to_string().as_bytes()),
                None => out.push(b'x'),
            },
            Piece::Host => out.extend_from_slice(n.host.as_bytes()),
            Piece::Start => out.extend_from_slice(n.start_unix_s.to_string().as_bytes()),
        }
    }
    OsString::from_vec(out)
}

/// The path a pattern names for this process: the expanded pattern, or a file inside it when it
/// names a directory.
pub fn first_choice(pattern: &OsStr, n: &Naming) -> PathBuf {
    let path = expand(pattern, n);
    let is_dir = path.as_bytes().ends_with(b"/") || Path::new(&path).is_dir();
    if is_dir {
        let mut dir = path.into_vec();
        while dir.len() > 1 && dir.ends_with(b"/") {
            dir.pop();
        }
        let name = expand(OsStr::new(IN_DIRECTORY), n);
        return PathBuf::from(OsString::from_vec(dir)).join(name);
    }
    PathBuf::from(path)
}

/// Where a tag goes in `name`: before the extension, or at the end of a name without one.
fn tag_position(name: &[u8]) -> usize {
    name.iter()
        .rposition(|&b| b == b'.')
        .filter(|&i| i > 0)
        .unwrap_or(name.len())
}

/// `run.vtrace` + `x` → `run.x.vtrace`; `run` + `x` → `run.x`.
pub fn with_tag(path: &Path, tag: &str) -> PathBuf {
    let name = path.file_name().map(OsStr::as_bytes).unwrap_or_default();
    let cut = tag_position(name);
    let mut out = name[..cut].to_vec();
    out.push(b'.');
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(&name[cut..]);
    path.with_file_name(OsString::from_vec(out))
}

/// The names to try, in order: `first`, then fresh ones beside it (see the module doc).
/// `pattern` tells whether the first name already holds the pid.
pub fn candidates<'a>(
    first: &'a Path,
    pattern: &OsStr,
    pid: u32,
) -> impl Iterator<Item = PathBuf> + 'a {
    let has_pid = pattern.as_bytes().windows(2).any(|w| w == b"%p");
    let base = if has_pid {
        first.to_path_buf()
    } else {
        with_tag(first, &pid.to_string())
    };
    let by_pid = (!has_pid).then(|| base.clone());
    std::iter::once(first.to_path_buf())
        .chain(by_pid)
        .chain((1..=MAX_ALTERNATIVES).map(move |i| with_tag(&base, &i.to_string())))
}

/// `name` without the tags (`.N`) a taken name gets (before the extension, or at the end when
/// `at_end`): the name itself, then with one and two tags removed. A later segment's name
/// (`NAME.segN.EXT`, and the fresh names given way to from it) stands for the first segment's,
/// `NAME.EXT`.
fn untagged(name: &[u8], at_end: bool) -> Vec<Vec<u8>> {
    fn strip_tag(stem: &[u8]) -> Option<&[u8]> {
        let dot = stem.iter().rposition(|&b| b == b'.')?;
        let (head, tag) = (&stem[..dot], &stem[dot + 1..]);
        (!tag.is_empty() && tag.iter().all(u8::is_ascii_digit) && !head.is_empty()).then_some(head)
    }
    let (mut stem, ext) = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 && !at_end => (&name[..dot], &name[dot..]),
        _ => (name, &name[name.len()..]),
    };
    // `.segN`, followed by nothing or by a tag.
    let segment = (1..stem.len()).find(|&i| {
        let rest = &stem[i..];
        let Some(rest) = rest.strip_prefix(b".seg") else {
            return false;
        };
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        digits > 0 && (rest.len() == digits || rest[digits] == b'.')
    });
    if let Some(i) = segment {
        stem = &stem[..i];
    }
    let mut out = vec![[stem, ext].concat()];
    for _ in 0..2 {
        if let Some(s) = strip_tag(stem) {
            stem = s;
            out.push([s, ext].concat());
        }
    }
    out
}

/// Whether `name` is what `pattern` expands to for some values.
fn fits(pattern: &[Piece], name: &[u8]) -> bool {
    let Some((first, rest)) = pattern.split_first() else {
        return name.is_empty();
    };
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    match first {
        Piece::Text(t) => name
            .strip_prefix(t.as_slice())
            .is_some_and(|r| fits(rest, r)),
        Piece::Pid | Piece::Start => (1..=digits(name)).any(|n| fits(rest, &name[n..])),
        Piece::Rank => {
            if let Some(r) = name.strip_prefix(b"x") {
                return fits(rest, r);
            }
            let sign = usize::from(name.starts_with(b"-"));
            (1..=digits(&name[sign..])).any(|n| fits(rest, &name[sign + n..]))
        }
        Piece::Host => (1..=name.len()).any(|i| fits(rest, &name[i..])),
    }
}

/// The file names a pattern's file name produces, tagged or not.
#[derive(Clone, Debug)]
pub struct NamePattern {
    pieces: Vec<Piece>,
    /// The name has no extension: tags go at its end.
    tags_at_end: bool,
}

impl NamePattern {
    /// The pattern of a file name (no directory).
    pub fn new(name: &OsStr) -> Self {
        let name = name.as_bytes();
        NamePattern {
            pieces: pieces(name),
            tags_at_end: tag_position(name) == name.len(),
        }
    }

    /// Whether a file name is one this pattern produces, or the tracer wrote beside one.
    pub fn matches(&self, name: &OsStr) -> bool {
        untagged(name.as_bytes(), self.tags_at_end)
            .iter()
            .any(|n| fits(&self.pieces, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_that_are_no_placeholder_are_named() {
        let warned = |p: &str| unknown_placeholders("X", p.as_bytes());
        assert_eq!(warned("run-%p-%r-%h-%t-100%%.vtrace"), None);
        assert_eq!(
            warned("run-%d.vtrace").as_deref(),
            Some("X run-%d.vtrace: %d is no placeholder (%p pid, %r rank, %h host, %t start, %% a percent sign)")
        );
        assert_eq!(
            warned("run-%d-%p.vtrace%").as_deref(),
            Some("X run-%d-%p.vtrace%: %d, % are no placeholders (%p pid, %r rank, %h host, %t start, %% a percent sign)")
        );
    }

    fn naming() -> Naming<'static> {
        Naming {
            pid: 77,
            rank: Some(3),
            host: "node1",
            start_unix_s: 1000,
        }
    }

    fn os(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn expands_placeholders() {
        assert_eq!(
            expand(os("out/%h-r%r-%p-%t.vtrace"), &naming()),
            "out/node1-r3-77-1000.vtrace"
        );
        let n = Naming {
            rank: None,
            ..naming()
        };
        assert_eq!(expand(os("a%r%%%q%"), &n), "ax%%q%");
    }

    #[test]
    fn patterns_that_are_not_utf8_expand_byte_for_byte() {
        let pattern = OsStr::from_bytes(b"/tmp/\xffrun-%p.vtrace");
        assert_eq!(
            expand(pattern, &naming()).as_bytes(),
            b"/tmp/\xffrun-77.vtrace"
        );
        let name = NamePattern::new(OsStr::from_bytes(b"\xffrun-%p.vtrace"));
        assert!(name.matches(OsStr::from_bytes(b"\xffrun-77.vtrace")));
    }

    #[test]
    fn fresh_names_go_before_the_extension() {
        let fixed = Path::new("/x/run.vtrace");
        let names: Vec<PathBuf> = candidates(fixed, os("/x/run.vtrace"), 9).take(4).collect();
        assert_eq!(
            names,
            [
                "/x/run.vtrace",
                "/x/run.9.vtrace",
                "/x/run.9.1.vtrace",
                "/x/run.9.2.vtrace"
            ]
            .map(PathBuf::from)
        );
        let with_pid = Path::new("/x/t-9.vtrace");
        let names: Vec<PathBuf> = candidates(with_pid, os("/x/t-%p.vtrace"), 9)
            .take(3)
            .collect();
        assert_eq!(
            names,
            ["/x/t-9.vtrace", "/x/t-9.1.vtrace", "/x/t-9.2.vtrace"].map(PathBuf::from)
        );
        assert_eq!(with_tag(Path::new("run"), "1"), PathBuf::from("run.1"));
        assert_eq!(
            with_tag(Path::new(".trace"), "1"),
            PathBuf::from(".trace.1")
        );
        assert_eq!(
            candidates(fixed, os("x"), 9).count(),
            2 + MAX_ALTERNATIVES as usize
        );
    }

    #[test]
    fn a_directory_gets_a_file_inside() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = format!("{}/", dir.path().display());
        assert_eq!(
            first_choice(os(&pattern), &naming()),
            dir.path().join("vramtrace-77.vtrace")
        );
        assert_eq!(
            first_choice(dir.path().as_os_str(), &naming()),
            dir.path().join("vramtrace-77.vtrace")
        );
    }

    fn matches(pattern: &str, name: &str) -> bool {
        NamePattern::new(os(pattern)).matches(os(name))
    }

    #[test]
    fn names_match_every_placeholder() {
        let p = "%h-rank%r-%p-%t.vtrace";
        assert!(matches(p, "node-1-rank3-42-1700000000.vtrace"));
        assert!(matches(p, "n-rankx-42-1.vtrace"));
        assert!(matches(p, "n-rank-1-42-1.vtrace"));
        assert!(!matches(p, "-rank3-42-1.vtrace"));
        assert!(!matches(p, "n-rank3-42-.vtrace"));
        assert!(!matches(p, "n-ranky-42-1.vtrace"));
        assert!(matches("100%%-%p.vtrace", "100%-7.vtrace"));
        assert!(!matches("100%%-%p.vtrace", "100%%-7.vtrace"));
        let p = "vramtrace-%p.vtrace";
        assert!(matches(p, "vramtrace-42.vtrace"));
        assert!(!matches(p, "vramtrace-.vtrace"));
        assert!(!matches(p, "vramtrace-4x2.vtrace"));
        assert!(!matches(p, "other-42.vtrace"));
        assert!(matches("run.vtrace", "run.vtrace"));
        assert!(!matches("run.vtrace", "run.vtrace.1"));
    }

    #[test]
    fn names_match_the_names_written_beside_a_taken_one() {
        let p = "job-%h-r%r-%p.vtrace";
        assert!(matches(p, "job-node1-r3-42.vtrace"));
        assert!(matches(p, "job-node-a.b-rx-42.vtrace"));
        assert!(matches(p, "job-node1-r3-42.1.vtrace"), "an exec'd image's");
        assert!(!matches(p, "job--r3-42.vtrace"));
        assert!(!matches(p, "job-node1-ry-42.vtrace"));
        assert!(matches("run.vtrace", "run.4242.vtrace"), "a child's");
        assert!(matches("run.vtrace", "run.4242.3.vtrace"));
        assert!(!matches("run.vtrace", "run.x.vtrace"));
        assert!(!matches("run.vtrace", "run.4.2.1.vtrace"));
        assert!(
            matches("run.vtrace", "run.seg12.vtrace"),
            "a later segment's"
        );
        assert!(matches("run.vtrace", "run.seg12.4242.vtrace"));
        assert!(matches("run.vtrace", "run.4242.seg3.vtrace"));
        assert!(!matches("run.vtrace", "run.segx.vtrace"));
        assert!(matches("run", "run.4242") && matches("run", "run.4242.1"));
        assert!(!matches("run", "runs"));
    }

    #[test]
    fn every_candidate_matches_its_pattern() {
        for pattern in ["run.vtrace", "t-%p.vtrace", "run", "job-%h-%r.trace"] {
            let first = first_choice(os(pattern), &naming());
            let name = NamePattern::new(os(pattern));
            for c in candidates(&first, os(pattern), 77).take(5) {
                assert!(name.matches(c.file_name().unwrap()), "{pattern}: {c:?}");
            }
        }
    }
}
