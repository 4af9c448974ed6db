//! Where a process writes its trace: the `VRAMTRACE_OUTPUT` pattern expanded, and the names to
//! try when that one is taken.
//!
//! A name is never taken over: the file is created only where nothing exists (see
//! [`super::trace_file`]), so an existing file — a checkpoint, another process's trace, the
//! parent's trace in a forked or exec'd child, a device node — is never removed, truncated or
//! written. A taken name gives way to a fresh one beside it: `NAME.PID.EXT` when the pattern
//! has no `%p` (so 1000 forked children find a free name at the first try), then
//! `NAME.N.EXT` (`NAME.PID.N.EXT`) for N = 1, 2, ...
//!
//! Patterns are bytes, not text: a path that is not UTF-8 is a path like any other.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Facts a pattern can name.
pub struct Naming<'a> {
    pub pid: u32,
    pub rank: Option<i32>,
    pub host: &'a str,
    pub start_unix_s: u64,
}

/// How many fresh names are tried after the first before giving up.
const MAX_ALTERNATIVES: u32 = 1000;

/// Expands `%p` (pid), `%r` (rank, `x` when unknown), `%h` (host), `%t` (start, Unix seconds)
/// and `%%`.
pub fn expand(pattern: &OsStr, n: &Naming) -> OsString {
    let pattern = pattern.as_bytes();
    let mut out = Vec::with_capacity(pattern.len() + 16);
    let mut bytes = pattern.iter().copied();
    while let Some(c) = bytes.next() {
        if c != b'%' {
            out.push(c);
            continue;
        }
        match bytes.next() {
            Some(b'p') => out.extend_from_slice(n.pid.to_string().as_bytes()),
            Some(b'r') => match n.rank {
                Some(r) => out.extend_from_slice(r.to_string().as_bytes()),
                None => out.push(b'x'),
            },
            Some(b'h') => out.extend_from_slice(n.host.as_bytes()),
            Some(b't') => out.extend_from_slice(n.start_unix_s.to_string().as_bytes()),
            Some(b'%') => out.push(b'%'),
            Some(other) => {
                out.push(b'%');
                out.push(other);
            }
            None => out.push(b'%'),
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
        return PathBuf::from(OsString::from_vec(dir)).join(format!("vramtrace-{}.vtrace", n.pid));
    }
    PathBuf::from(path)
}

/// `run.vtrace` + `x` → `run.x.vtrace`; `run` + `x` → `run.x`.
pub fn with_tag(path: &Path, tag: &str) -> PathBuf {
    let name = path.file_name().map(OsStr::as_bytes).unwrap_or_default();
    // The extension is what follows the last dot, unless the name starts with it (`.trace`).
    let cut = name
        .iter()
        .rposition(|&b| b == b'.')
        .filter(|&i| i > 0)
        .unwrap_or(name.len());
    let mut out = name[..cut].to_vec();
    out.push(b'.');
    out.extend_from_slice(tag.as_bytes());
    out.extend_from_slice(&name[cut..]);
    path.with_file_name(OsString::from_vec(out))
}

/// The names to try, in order: `first`, then fresh ones beside it (see the module doc). `pattern`
/// tells whether the first name already holds the pid.
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
