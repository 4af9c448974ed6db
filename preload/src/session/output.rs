//! Where a process writes its trace: the `VRAMTRACE_OUTPUT` pattern expanded, without ever
//! overwriting the trace of another process of the same run.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::SystemTime;

/// Facts a pattern can name.
pub struct Naming<'a> {
    pub pid: u32,
    pub rank: Option<i32>,
    pub host: &'a str,
    pub start_unix_s: u64,
}

/// Expands `%p` (pid), `%r` (rank, `x` when unknown), `%h` (host), `%t` (start, Unix seconds)
/// and `%%`.
pub fn expand(pattern: &str, n: &Naming) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&n.pid.to_string()),
            Some('r') => match n.rank {
                Some(r) => out.push_str(&r.to_string()),
                None => out.push('x'),
            },
            Some('h') => out.push_str(n.host),
            Some('t') => out.push_str(&n.start_unix_s.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `run.vtrace` → `run.1234.vtrace`.
pub fn with_pid(path: &str, pid: u32) -> String {
    let p = PathBuf::from(path);
    match (p.file_stem(), p.extension()) {
        (Some(stem), Some(ext)) => p
            .with_file_name(format!(
                "{}.{pid}.{}",
                stem.to_string_lossy(),
                ext.to_string_lossy()
            ))
            .to_string_lossy()
            .into_owned(),
        _ => format!("{path}.{pid}"),
    }
}

fn create_new(path: &str) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Creates the trace file. A pattern with `%p` names a file of its own. A fixed name is taken
/// over only when it is stale (older than this process); if another process of this run already
/// wrote it, this process writes `NAME.PID.EXT` beside it.
pub fn create(pattern: &str, n: &Naming, process_start: SystemTime) -> io::Result<(String, File)> {
    let path = expand(pattern, n);
    let path = if path.ends_with('/') || std::path::Path::new(&path).is_dir() {
        format!("{}/vramtrace-{}.vtrace", path.trim_end_matches('/'), n.pid)
    } else {
        path
    };
    match create_new(&path) {
        Ok(f) => return Ok((path, f)),
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        Err(_) => {}
    }
    if !pattern.contains("%p") {
        let stale = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .map(|t| t < process_start)
            .unwrap_or(false);
        if stale {
            std::fs::remove_file(&path)?;
            if let Ok(f) = create_new(&path) {
                return Ok((path, f));
            }
        }
    }
    let alt = with_pid(&path, n.pid);
    let _ = std::fs::remove_file(&alt);
    create_new(&alt).map(|f| (alt, f))
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

    #[test]
    fn expands_placeholders() {
        assert_eq!(
            expand("out/%h-r%r-%p-%t.vtrace", &naming()),
            "out/node1-r3-77-1000.vtrace"
        );
        let n = Naming {
            rank: None,
            ..naming()
        };
        assert_eq!(expand("a%r%%%q%", &n), "ax%%q%");
    }

    #[test]
    fn pid_goes_before_the_extension() {
        assert_eq!(with_pid("/x/run.vtrace", 9), "/x/run.9.vtrace");
        assert_eq!(with_pid("run", 9), "run.9");
    }

    #[test]
    fn a_fresh_fixed_name_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let fixed = dir.path().join("run.vtrace").display().to_string();
        let start = SystemTime::now() - std::time::Duration::from_secs(60);
        let (p1, _) = create(&fixed, &naming(), start).unwrap();
        assert_eq!(p1, fixed);
        let (p2, _) = create(&fixed, &naming(), start).unwrap();
        assert_eq!(p2, dir.path().join("run.77.vtrace").display().to_string());
        // A file older than the process is a leftover and is replaced.
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        let (p3, _) = create(&fixed, &naming(), later).unwrap();
        assert_eq!(p3, fixed);
    }

    #[test]
    fn a_directory_gets_a_file_inside() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = format!("{}/", dir.path().display());
        let (p, _) = create(&pattern, &naming(), SystemTime::now()).unwrap();
        assert_eq!(
            p,
            dir.path().join("vramtrace-77.vtrace").display().to_string()
        );
    }
}
