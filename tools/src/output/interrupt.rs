//! What an interrupted command leaves behind: nothing. Outputs are written under temporary
//! names beside their own ([`crate::output`], the Parquet dataset's staging directory) and
//! take their names only once complete; a SIGINT, SIGTERM or SIGHUP would end the process
//! without running the destructors that remove them. So a command that writes outputs takes
//! those signals on a thread of its own ([`guard`]), which removes the temporaries registered
//! ([`Temporary`]) and then ends the process by the same signal, as it would have ended without
//! the guard.
//!
//! Why signal-hook's iterator and not a handler of our own: removing a directory tree allocates
//! and walks directories, which no signal handler may do; its thread may.

use std::path::PathBuf;
use std::sync::Mutex;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Temporaries to remove if the command is interrupted.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Takes SIGINT, SIGTERM and SIGHUP on a thread of their own from now on: they remove what is
/// registered, then end the process as their default action does. Not for commands that run a
/// program, which pass the signals on to it.
pub fn guard() {
    // Registered on the thread that takes them (without it, no registration: the signals keep
    // their default action), before the command goes on to make any temporary.
    let (ready, registered) = std::sync::mpsc::channel();
    let taker = std::thread::Builder::new()
        .name("interrupt".into())
        .spawn(move || {
            let signals = Signals::new([SIGINT, SIGTERM, SIGHUP]);
            let _ = ready.send(());
            let Ok(mut signals) = signals else {
                return;
            };
            if let Some(sig) = signals.forever().next() {
                STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
                remove_pending();
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        });
    if taker.is_ok() {
        let _ = registered.recv();
    }
}

/// Set once an interrupt is removing the temporaries: the command's other threads make no more
/// directories ([`stopping`]), which would bring back a staging directory being removed.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether an interrupt is removing the temporaries: make no directory now.
pub fn stopping() -> bool {
    STOPPING.load(std::sync::atomic::Ordering::SeqCst)
}

/// Removes every temporary still registered. The command goes on meanwhile and may be making
/// files in a directory being removed: it is removed again until it is gone.
fn remove_pending() {
    let pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    for path in pending.iter() {
        let mut tries = 0;
        let removed = loop {
            let removed = match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
                Ok(_) => std::fs::remove_file(path),
                Err(_) => break Ok(()),
            };
            tries += 1;
            if removed.is_err() && tries == 100 {
                break removed;
            }
        };
        if let Err(e) = removed {
            say!("vramtrace: could not remove {}: {e}", path.display());
        }
    }
}

/// A temporary file or directory removed if the command is interrupted while it exists; no
/// longer once dropped (renamed to its name, or removed by its owner).
pub struct Temporary(PathBuf);

impl Temporary {
    /// Makes a temporary with `make` and registers it at `path_of` it, both before an interrupt
    /// can look: one that comes meanwhile waits for them, and then removes it. (Made first and
    /// registered after, a signal between the two left it behind.)
    pub fn make<T, E>(
        make: impl FnOnce() -> Result<T, E>,
        path_of: impl FnOnce(&T) -> PathBuf,
    ) -> Result<(T, Temporary), E> {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let made = make()?;
        let path = path_of(&made);
        pending.push(path.clone());
        Ok((made, Temporary(path)))
    }

    /// Runs `settle` (which gives the temporary its name, replacing what was there) whole
    /// before an interrupt removes anything: an interrupt waits for it, and then finds the
    /// temporary no longer registered. Without this, an interrupt between removing the output
    /// replaced and the rename would remove the new one too, leaving neither.
    pub fn settle<T>(self, settle: impl FnOnce() -> T) -> T {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let settled = settle();
        if let Some(i) = pending.iter().position(|p| *p == self.0) {
            pending.swap_remove(i);
        }
        settled
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = pending.iter().position(|p| *p == self.0) {
            pending.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // An interrupt that comes while a dataset takes its name waits for it: the dataset stays
    // whole, and the interrupt finds nothing left to remove.
    #[test]
    fn an_interrupt_waits_for_the_output_to_take_its_name_and_for_a_temporary_being_made() {
        let dir = tempfile::tempdir().unwrap();
        let staged = dir.path().join(".vramtrace-export-x");
        std::fs::create_dir(&staged).unwrap();
        std::fs::write(staged.join("table.parquet"), "rows").unwrap();
        let target = dir.path().join("data");
        let ((), temporary) = Temporary::make(|| Ok::<_, ()>(()), |_| staged.clone()).unwrap();
        let interrupt = std::cell::Cell::new(None);
        temporary.settle(|| {
            interrupt.set(Some(std::thread::spawn(remove_pending)));
            // The interrupt's thread is running by now, and waits.
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::fs::rename(&staged, &target).unwrap();
        });
        interrupt.take().unwrap().join().unwrap();
        assert_eq!(
            std::fs::read_to_string(target.join("table.parquet")).unwrap(),
            "rows"
        );
        assert!(!staged.exists());

        // One that comes while a temporary is being made waits for it to be registered, and
        // removes it. (In one test: the list of temporaries is the process's.)
        let made = dir.path().join(".vramtrace-y");
        let interrupt = std::cell::Cell::new(None);
        let ((), temporary) = Temporary::make(
            || {
                interrupt.set(Some(std::thread::spawn(remove_pending)));
                std::thread::sleep(std::time::Duration::from_millis(50));
                std::fs::create_dir(&made)
            },
            |_| made.clone(),
        )
        .unwrap();
        interrupt.take().unwrap().join().unwrap();
        assert!(!made.exists());
        drop(temporary);
    }
}
