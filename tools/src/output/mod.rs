//! The files commands write (`export -o`, `report --html`), with the tracer's promise: a name
//! that exists is never replaced, unless the user asks (`--force`), and the trace being read
//! never, not even then; a file is written whole or not at all.
//!
//! Whether a file may be written is decided before any work ([`OutputFile::prepare`]), so a
//! long export is not thrown away at its end. The output goes into a temporary file beside its
//! name, which takes the name only once complete: a failed or interrupted command leaves
//! nothing behind, and a refusal leaves the existing file as it was, byte for byte. The rename
//! itself refuses to replace a file that appeared meanwhile (`renameat2(RENAME_NOREPLACE)`,
//! through `tempfile`'s `persist_noclobber`). `-` is standard output; a FIFO or a device
//! (`/dev/null`) is written through, since nothing there is replaced.

pub mod interrupt;
pub mod reader_gone;

/// The exit code of an error of vramtrace's own, the one line `error: …` on stderr (clap uses it
/// for bad flags too; the gates for what they could not check).
pub const ERROR_EXIT: u8 = 2;

use std::fs::Metadata;
use std::io::{BufWriter, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use crate::load::lower_first;
use crate::output::interrupt::Temporary;

/// Where an output goes.
#[derive(Debug)]
enum Target {
    /// `-`.
    Stdout,
    /// A FIFO, a character device: written through as it is.
    Stream,
    /// A regular file: a temporary file renamed to `name`; `replace` when a file there may be
    /// replaced (one was there, and `--force` was given); `forced` when `--force` was given.
    File {
        name: PathBuf,
        replace: bool,
        forced: bool,
    },
}

/// A file a command was asked to write.
#[derive(Debug)]
pub struct OutputFile {
    /// The path as the user gave it, for messages.
    path: PathBuf,
    target: Target,
}

/// The same file, whatever names lead to it.
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Whether `a` and `b` name the same place: the same name in the same directory, whether or
/// not a file is there.
fn same_name(a: &Path, b: &Path) -> bool {
    let place = |p: &Path| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some((std::fs::canonicalize(dir).ok()?, p.file_name()?.to_owned()))
    };
    place(a).is_some_and(|a| Some(a) == place(b))
}

impl OutputFile {
    /// Decides whether `path` may be written, before any work: never when it is one of `inputs`
    /// (the same file by device and inode, whatever the name, links and symlinks included);
    /// when it exists, only with `force`.
    pub fn prepare(path: &Path, force: bool, inputs: &[PathBuf]) -> Result<OutputFile> {
        let shown = path.display();
        if path == Path::new("-") {
            return Ok(OutputFile {
                path: path.to_path_buf(),
                target: Target::Stdout,
            });
        }
        if path.as_os_str().is_empty() {
            bail!("the output path is empty");
        }
        let existing = match std::fs::metadata(path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => bail!("{shown}: {}", lower_first(e.to_string())),
        };
        let target = match existing {
            // A symbolic link to nothing: the name is taken, and no file is there to replace.
            None if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
                let to = std::fs::read_link(path).unwrap_or_default();
                bail!(
                    "{shown} is a symbolic link to {}, which does not exist; name a file",
                    to.display()
                );
            }
            // `out/`: a directory that does not exist, not a file to make.
            None if path.as_os_str().as_encoded_bytes().ends_with(b"/") => {
                bail!("{shown} names a directory, and no directory is there; name a file")
            }
            None => {
                let dir = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                if !dir.is_dir() {
                    return Err(no_directory(path, dir));
                }
                // A name of the trace being read that no file holds now (a segment rotation
                // removed) still names that trace.
                if let Some(input) = inputs.iter().find(|i| same_name(i, path)) {
                    bail!(
                        "{shown} names the trace being read ({}); it is never written, not even \
                         with --force",
                        input.display()
                    );
                }
                Target::File {
                    name: path.to_path_buf(),
                    replace: false,
                    forced: force,
                }
            }
            Some(meta) => {
                for input in inputs {
                    if std::fs::metadata(input).is_ok_and(|m| same_file(&m, &meta)) {
                        bail!(
                            "{shown} is the trace being read ({}); it is never replaced, not \
                             even with --force",
                            input.display()
                        );
                    }
                }
                if meta.is_dir() {
                    bail!("{shown} is a directory; name a file");
                }
                if !meta.is_file() {
                    Target::Stream
                } else if force {
                    // The file the name leads to is replaced; a symlink on the way stays.
                    let name = std::fs::canonicalize(path)
                        .map_err(|e| anyhow!("{shown}: {}", lower_first(e.to_string())))?;
                    Target::File {
                        name,
                        replace: true,
                        forced: true,
                    }
                } else {
                    bail!("{shown} already exists and is left alone; --force replaces it");
                }
            }
        };
        Ok(OutputFile {
            path: path.to_path_buf(),
            target,
        })
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the output goes to standard output.
    pub fn is_stdout(&self) -> bool {
        matches!(self.target, Target::Stdout)
    }

    /// Writes the output with `write`, whole or not at all; returns what `write` returned and
    /// the bytes written.
    pub fn write<T>(&self, write: impl FnOnce(&mut dyn Write) -> Result<T>) -> Result<(T, u64)> {
        let shown = self.path.display();
        match &self.target {
            Target::Stdout => {
                let mut out = Counted::new(BufWriter::new(std::io::stdout().lock()));
                let value = write(&mut out)?;
                out.flush().context("writing to standard output")?;
                Ok((value, out.bytes))
            }
            Target::Stream => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&self.path)
                    .map_err(|e| anyhow!("{shown}: {}", lower_first(e.to_string())))?;
                let mut out = Counted::new(BufWriter::new(file));
                let value = write(&mut out).with_context(|| format!("writing {shown}"))?;
                out.flush().with_context(|| format!("writing {shown}"))?;
                Ok((value, out.bytes))
            }
            Target::File {
                name,
                replace,
                forced,
            } => {
                let (temp, interrupted) = Temporary::make(
                    || temporary_beside(name, &self.path),
                    |t| t.path().to_path_buf(),
                )?;
                let mut out = Counted::new(BufWriter::new(temp.as_file()));
                let value = write(&mut out)?;
                out.flush().with_context(|| format!("writing {shown}"))?;
                let bytes = out.bytes;
                drop(out);
                let persisted = interrupted.settle(|| {
                    if *replace {
                        temp.persist(name).map(drop)
                    } else {
                        temp.persist_noclobber(name).map(drop)
                    }
                });
                // A file that was not there when the command began is another's (a trace the
                // program wrote, say): left alone, even with --force, which replaces only what
                // was there to be seen.
                let advice = match forced {
                    true => "; choose another name",
                    false => "; --force replaces it",
                };
                persisted.map_err(|e| match e.error.kind() {
                    std::io::ErrorKind::AlreadyExists => anyhow!(
                        "{shown} appeared while it was being written, and is left alone{advice}"
                    ),
                    _ => anyhow!("writing {shown}: {}", lower_first(e.error.to_string())),
                })?;
                Ok((value, bytes))
            }
        }
    }
}

/// A temporary file in the directory of `name`, with the modes any new file gets (0666 less
/// the umask), not a temporary file's 0600.
fn temporary_beside(name: &Path, shown: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = match name.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".vramtrace-")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| not_created(shown, e))
}

/// `target` goes in `dir`, which does not exist: an error, as for every output (a mistyped
/// path is not made into a new tree).
pub fn no_directory(target: &Path, dir: &Path) -> anyhow::Error {
    anyhow!(
        "creating {}: no directory {} (a mistyped path is not made into a new tree: create it \
         first, mkdir -p {})",
        target.display(),
        dir.display(),
        dir.display()
    )
}

/// An output that could not be made beside its name, in the OS's own words, without the
/// temporary name tempfile adds to them.
pub fn not_created(shown: &Path, e: std::io::Error) -> anyhow::Error {
    let message = e.to_string();
    let reason = message.split(" at path ").next().unwrap_or(&message);
    anyhow!(
        "creating {}: {}",
        shown.display(),
        lower_first(reason.to_string())
    )
}

/// A writer that counts the bytes through it.
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W> Counted<W> {
    fn new(inner: W) -> Self {
        Counted { inner, bytes: 0 }
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_text(out: &OutputFile, text: &str) -> Result<()> {
        out.write(|w| Ok(w.write_all(text.as_bytes())?)).map(drop)
    }

    #[test]
    fn a_name_that_exists_is_replaced_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        write_text(&OutputFile::prepare(&path, false, &[]).unwrap(), "one").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
        let refused = OutputFile::prepare(&path, false, &[]).unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!(
                "{} already exists and is left alone; --force replaces it",
                path.display()
            )
        );
        write_text(&OutputFile::prepare(&path, true, &[]).unwrap(), "two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn the_input_is_never_replaced_under_any_name() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("run.vtrace");
        std::fs::write(&input, b"trace").unwrap();
        let link = dir.path().join("link.vtrace");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = dir.path().join("hard.vtrace");
        std::fs::hard_link(&input, &hard).unwrap();
        for name in [&input, &link, &hard] {
            let e = OutputFile::prepare(name, true, std::slice::from_ref(&input)).unwrap_err();
            assert!(e.to_string().contains("is the trace being read"), "{e}");
        }
        assert_eq!(std::fs::read(&input).unwrap(), b"trace");
    }

    #[test]
    fn a_link_to_nothing_is_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("out.csv");
        let to = dir.path().join("gone/x.csv");
        std::os::unix::fs::symlink(&to, &link).unwrap();
        for force in [false, true] {
            let e = OutputFile::prepare(&link, force, &[]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{} is a symbolic link to {}, which does not exist; name a file",
                    link.display(),
                    to.display()
                )
            );
        }
    }

    #[test]
    fn a_failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        let out = OutputFile::prepare(&path, false, &[]).unwrap();
        let failed = out.write(|w| -> Result<()> {
            w.write_all(b"half")?;
            bail!("the trace is damaged")
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_device_is_written_through() {
        let out = OutputFile::prepare(Path::new("/dev/null"), false, &[]).unwrap();
        assert_eq!(out.write(|w| Ok(w.write_all(b"x")?)).unwrap().1, 1);
        assert!(Path::new("/dev/null").exists());
    }
}
