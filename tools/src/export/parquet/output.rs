//! The output directory of a dataset: claimed before any work (an existing output that is not
//! an empty directory is refused unless `--force`), written under a temporary name beside it,
//! and given its name only once complete, so a failed export leaves nothing behind and a
//! reader never sees half a dataset.
//!
//! `--force` replaces an earlier dataset (a directory of the tables' partitions of Parquet files
//! this export wrote, and nothing else) or a file, never a directory that holds anything else,
//! the working directory or one above it, a symbolic link, or a trace being read: what is not
//! ours is not removed.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use crate::load::lower_first;
use crate::output::interrupt::Temporary;

/// The directories at the top of a dataset, one per table (docs/data.md).
pub const TABLES: [&str; 9] = [
    "allocations",
    "sites",
    "steps",
    "samples",
    "communicators",
    "failures",
    "tensors",
    "findings",
    "traces",
];

/// What is at the output path now, and what becomes of it.
enum Existing {
    Nothing,
    EmptyDirectory,
    /// Replaced (`--force`): an earlier dataset.
    Directory,
    /// Replaced (`--force`): a file or link.
    Other,
}

/// A dataset being written.
pub struct Staged {
    dir: tempfile::TempDir,
    /// Removes `dir` if the command is interrupted.
    _interrupted: Temporary,
    target: PathBuf,
    existing: Existing,
}

fn io_error(path: &Path, e: std::io::Error) -> anyhow::Error {
    anyhow!("{}: {}", path.display(), lower_first(e.to_string()))
}

/// Refuses to replace `dir` unless it holds a dataset and nothing else: the tables'
/// directories at its top, in each only `run=…/rank=…/` directories, and in those only
/// `.parquet` files. A trace, a note or anything else anywhere in it keeps it.
fn not_a_dataset(dir: &Path) -> Result<()> {
    /// What a level of the dataset holds, from the top: which names, and whether directories.
    fn fits(depth: usize, name: &str, is_dir: bool) -> bool {
        match depth {
            0 => is_dir && TABLES.contains(&name),
            1 => is_dir && name.starts_with("run="),
            2 => is_dir && name.starts_with("rank="),
            3 => !is_dir && name.ends_with(".parquet"),
            _ => false,
        }
    }
    fn walk(top: &Path, dir: &Path, depth: usize) -> Result<()> {
        let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_error(dir, e))?;
            // A link is not followed, and is never part of a dataset.
            let kind = entry.file_type().map_err(|e| io_error(&entry.path(), e))?;
            let name = entry.file_name();
            let fitting = name.to_str().is_some_and(|n| {
                !kind.is_symlink()
                    && (kind.is_dir() || kind.is_file())
                    && fits(depth, n, kind.is_dir())
            });
            // A Parquet file is ours only where its footer says vramtrace wrote it: the same
            // `run=…/rank=…` layout is a likely one for a team's own data.
            let fitting = fitting && (kind.is_dir() || written_by_vramtrace(&entry.path()));
            if !fitting {
                return Err(anyhow!(
                    "{}: holds {}, which is not part of a vramtrace dataset; --force replaces \
                     only an earlier dataset (its tables' files and nothing else): give a new \
                     directory",
                    top.display(),
                    entry.path().display()
                ));
            }
            if kind.is_dir() {
                walk(top, &entry.path(), depth + 1)?;
            }
        }
        Ok(())
    }
    walk(dir, dir, 0)
}

/// Whether the Parquet file at `path` was written by this export: its footer's key-value
/// metadata names the dataset's schema (`vramtrace.schema`, docs/data.md).
fn written_by_vramtrace(path: &Path) -> bool {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(reader) = SerializedFileReader::new(file) else {
        return false;
    };
    let schema = super::traces::SCHEMA;
    let family = &schema[..=schema.find('/').unwrap_or(0)];
    (reader.metadata().file_metadata().key_value_metadata()).is_some_and(|kv| {
        kv.iter().any(|e| {
            e.key == "vramtrace.schema" && e.value.as_deref().is_some_and(|v| v.starts_with(family))
        })
    })
}

impl Staged {
    /// Claims `target` for a dataset: refuses an existing file or non-empty directory unless
    /// `force`, and always when it is, or holds, one of `inputs` (the trace files read); creates
    /// a missing parent directory, and makes the temporary directory beside it.
    pub fn claim(target: &Path, force: bool, inputs: &[PathBuf]) -> Result<Staged> {
        // `link/` names what the link points to, `link` the link: the name without its
        // trailing slashes is what is checked, replaced and made (`link/` would otherwise pass
        // the link's refusal and have its target emptied).
        let target = &target.components().collect::<PathBuf>();
        if target.as_os_str() == "-" {
            return Err(anyhow!(
                "-o -: a Parquet dataset is a directory of files and cannot go to standard \
                 output; give a directory"
            ));
        }
        if let Ok(replaced) = std::fs::canonicalize(target) {
            let cwd = std::env::current_dir().and_then(std::fs::canonicalize);
            if cwd.is_ok_and(|cwd| cwd.starts_with(&replaced)) {
                return Err(anyhow!(
                    "{}: the working directory, or one above it; give a new directory for the \
                     dataset",
                    target.display()
                ));
            }
            let held = (inputs.iter()).find_map(|i| {
                let real = std::fs::canonicalize(i).ok()?;
                real.starts_with(&replaced).then_some((i, real))
            });
            if let Some((input, real)) = held {
                // Worded as every other output's refusal of the trace it reads.
                let what = if real == replaced {
                    format!(" is the trace being read ({})", input.display())
                } else {
                    format!(": holds {}, a trace being read", input.display())
                };
                return Err(anyhow!(
                    "{}{what}; it is never replaced, not even with --force",
                    target.display(),
                ));
            }
        }
        let existing = match std::fs::symlink_metadata(target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Existing::Nothing,
            Err(e) => return Err(io_error(target, e)),
            // Replacing the link would leave what it points to as it was; writing through it,
            // a dataset where the name does not say: neither, with or without --force.
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(target).unwrap_or_default();
                return Err(anyhow!(
                    "{} is a symbolic link (to {}); name the directory itself",
                    target.display(),
                    to.display()
                ));
            }
            Ok(m) if m.is_dir() => {
                let mut entries = std::fs::read_dir(target).map_err(|e| io_error(target, e))?;
                if entries.next().is_none() {
                    Existing::EmptyDirectory
                } else {
                    Existing::Directory
                }
            }
            Ok(m) if m.is_file() => Existing::Other,
            // A device, FIFO or socket is not a file the export could have written: replacing
            // it by a directory would remove what is not ours.
            Ok(_) => {
                return Err(anyhow!(
                    "{}: exists and is not a file or directory (a device, FIFO or socket); it is \
                     never replaced, not even with --force: give a new name",
                    target.display()
                ))
            }
        };
        if force {
            if let Existing::Directory = existing {
                not_a_dataset(target)?;
            }
        } else {
            match existing {
                Existing::Directory => {
                    // --force replaces an earlier dataset only: offered where it would act.
                    let what = match not_a_dataset(target) {
                        Ok(()) => "give a new one, or --force to replace it",
                        Err(_) => {
                            "give a new one (it holds more than an earlier dataset, which is all \
                             --force replaces)"
                        }
                    };
                    return Err(anyhow!(
                        "{}: the directory exists and is not empty; {what}",
                        target.display()
                    ));
                }
                Existing::Other => {
                    return Err(anyhow!(
                        "{}: exists and is not a directory; give a new one, or --force to \
                         replace it",
                        target.display()
                    ))
                }
                Existing::Nothing | Existing::EmptyDirectory => {}
            }
        }
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(crate::output::no_directory(target, parent));
        }
        let (dir, interrupted) = Temporary::make(
            || {
                tempfile::Builder::new()
                    .prefix(".vramtrace-export-")
                    .tempdir_in(parent)
            },
            |dir| dir.path().to_path_buf(),
        )
        .map_err(|e| crate::output::not_created(target, e))?;
        Ok(Staged {
            _interrupted: interrupted,
            dir,
            target: target.to_path_buf(),
            existing,
        })
    }

    /// Where the dataset is written until [`Staged::commit`].
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Gives the dataset its name, replacing what was there.
    pub fn commit(self) -> Result<()> {
        let Staged {
            dir,
            _interrupted: interrupted,
            target,
            existing,
        } = self;
        let t = &target;
        // Whole or not at all for an interrupt too: it waits until the dataset has its name.
        interrupted.settle(|| {
            match existing {
                Existing::Nothing => Ok(()),
                Existing::EmptyDirectory => std::fs::remove_dir(t),
                Existing::Directory => std::fs::remove_dir_all(t),
                Existing::Other => std::fs::remove_file(t),
            }
            .map_err(|e| io_error(t, e))?;
            // Made with the modes any new directory gets (tempfile asks for 0777, less the
            // umask).
            let dir = dir.keep();
            std::fs::rename(&dir, t).map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                io_error(t, e)
            })
        })
    }
}
