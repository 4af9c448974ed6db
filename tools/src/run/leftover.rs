//! Processes the command left running when it exited: a shell that put the training in the
//! background (`sh -c 'python train.py & exit 0'`), a launcher that did not wait for its
//! workers. Their traces are not whole when `run` and `check` look, so what they hold is not
//! known yet: `check` must not pass them.
//!
//! `run` makes itself the subreaper of what it starts (`PR_SET_CHILD_SUBREAPER`): a process
//! whose parent exits is handed to `run` rather than to init, so after the command exits every
//! process it started that is still alive is a child of `run`. They are given a short while to
//! finish (a logger's or a data loader's process lingers for a moment), then named; a run stopped
//! by SIGINT or SIGTERM names them at once.

use std::io::Write;
use std::time::{Duration, Instant};

/// How long processes left running are waited for after the command exits.
const GRACE: Duration = Duration::from_secs(5);

/// Makes this process the subreaper of the processes it starts; whether it is.
pub fn adopt_orphans() -> bool {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and no pointers.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// A process the command left running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    pub pid: u32,
    /// Its command name (as `/proc/PID/stat` gives it).
    pub name: String,
}

/// After the command exited: waits up to [`GRACE`] for the processes it left (reaping those
/// that end), saying once on stderr that it does; returns those still running then.
pub fn wait_for_leftovers() -> Vec<Leftover> {
    let start = Instant::now();
    let mut said = false;
    loop {
        reap_ended();
        let left = children();
        if left.is_empty() || start.elapsed() >= GRACE {
            return left;
        }
        if !said {
            let them = if left.len() == 1 { "it" } else { "them" };
            // One write: the processes still running write to the same stderr, and a line
            // written in pieces can be cut by theirs.
            let line = format!(
                "vramtrace: the command exited and left {} running; waiting up to {} s for {them}\n",
                processes(&left),
                GRACE.as_secs()
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
            said = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes the command left that are still running, now, without waiting (a run that was
/// asked to stop does not linger for them).
pub fn still_running() -> Vec<Leftover> {
    reap_ended();
    children()
}

/// `pid 42 (python3)`, `2 processes: pid 42 (python3), pid 43 (sh)`.
pub fn processes(left: &[Leftover]) -> String {
    let one = |l: &Leftover| format!("pid {} ({})", l.pid, l.name);
    match left {
        [l] => one(l),
        _ => format!(
            "{} processes: {}",
            left.len(),
            left.iter().map(one).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Reaps every child that has ended.
fn reap_ended() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-parameter; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// This process's children still running (from `/proc`: each process's parent).
fn children() -> Vec<Leftover> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<Leftover> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`: the name may hold spaces and parentheses.
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            let mut fields = rest.split_whitespace();
            let state = fields.next()?;
            let ppid: u32 = fields.next()?.parse().ok()?;
            (ppid == me && state != "Z").then(|| Leftover {
                pid,
                name: name.to_string(),
            })
        })
        .collect();
    out.sort_by_key(|l| l.pid);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child still running is named; one that ended is not. (Nothing is reaped here: the
    /// other tests of this process wait for their own children.)
    #[test]
    fn a_process_still_running_is_named_and_one_that_ended_is_not() {
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        let mut slow = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        quick.wait().unwrap();
        let left = children();
        assert!(!left.iter().any(|l| l.pid == quick.id()), "{left:?}");
        assert!(
            left.iter().any(|l| l.pid == slow.id() && l.name == "sleep"),
            "{left:?}"
        );
        slow.kill().unwrap();
        slow.wait().unwrap();
    }

    #[test]
    fn processes_are_named_with_their_pids() {
        let l = |pid, name: &str| Leftover {
            pid,
            name: name.into(),
        };
        assert_eq!(processes(&[l(42, "python3")]), "pid 42 (python3)");
        assert_eq!(
            processes(&[l(42, "python3"), l(43, "my prog")]),
            "2 processes: pid 42 (python3), pid 43 (my prog)"
        );
    }
}
