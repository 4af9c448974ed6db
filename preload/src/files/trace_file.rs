//! The trace file as this process owns it: created only where no file exists, appearing whole
//! (header included) or not at all, written through a descriptor the tracer checks is still its
//! own before every write.
//!
//! Why each rule:
//! - **Never someone else's file.** The trace is created with `O_EXCL` semantics (an unnamed
//!   `O_TMPFILE` linked into place with `linkat`, which fails on an existing name, or else
//!   `O_CREAT | O_EXCL | O_NOFOLLOW`); an existing name — a checkpoint, a parent's trace, a
//!   symlink — gives way to a fresh one ([`vramtrace_collector::units::pattern::candidates`]). A name that is a device,
//!   FIFO or socket means "no trace" (`VRAMTRACE_OUTPUT=/dev/null`): nothing is created.
//! - **No empty or headless files.** The header is gathered in memory and written to the unnamed
//!   file before it gets its name, so a process killed at any moment leaves a readable trace or
//!   none (the fallback without `O_TMPFILE` writes the header right after creating the file).
//! - **Mode 0600**: a trace names the program's command line, hosts and call sites.
//! - **A descriptor out of the program's way.** The descriptor is moved high (`F_DUPFD_CLOEXEC`
//!   from near `min(RLIMIT_NOFILE, 1024)` down), so the program's own `open` gets the numbers it
//!   would get untraced. Under a limit below [`MIN_LIMIT_TO_HOLD`] the tracer holds no descriptor
//!   between writes and opens the file by path for each one. A program holding every descriptor
//!   its limit allows when the trace is created delays the creation (up to [`CREATE_WAIT`]), and
//!   later writes wait in memory (up to [`MAX_PENDING`]), rather than cost the trace.
//! - **Never write to a descriptor we do not own.** Before each write the descriptor's device and
//!   inode are compared with the file created; a program that closed it (a daemon closing every
//!   descriptor) or got its number back for a file of its own keeps it: the tracer reopens its
//!   own file by path (`O_APPEND`, never `O_CREAT`) and checks that it is the same file, or stops
//!   tracing with one warning. The check and the write are two system calls: a program that
//!   closes the descriptor and opens another file in between, on another thread, can still
//!   receive one write — a window of microseconds the kernel offers no way to close.
//! - **A forked child** inherits the descriptor but not the session: it closes the inherited one
//!   (after the same check) so its own descriptors are as without the tracer.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use libc::c_int;

/// Below this descriptor limit the tracer keeps no descriptor open between writes: the program
/// needs every one it has.
pub const MIN_LIMIT_TO_HOLD: u64 = 64;
/// Descriptors are placed below this number even when the limit is higher: the kernel sizes a
/// process's descriptor table (and every fork copies it) by the highest number in use.
const HIGHEST_PLACE: u64 = 1024;
/// Bytes kept in memory while the file cannot be opened (the program uses every descriptor);
/// beyond this the trace stops with a warning.
const MAX_PENDING: usize = 64 << 20;
/// How long creating the trace waits for a descriptor while the program holds every one its
/// limit allows: a program that polls a directory, say, holds its last one for a moment. Only
/// the tracer's thread waits; the program's calls are kept in the ring meanwhile.
const CREATE_WAIT: Duration = Duration::from_secs(2);

/// The held descriptor and its file's identity, for the fork handler (which must not touch the
/// writer's state). -1: none.
static HELD_FD: AtomicI32 = AtomicI32::new(-1);
static HELD_DEV: AtomicU64 = AtomicU64::new(0);
static HELD_INO: AtomicU64 = AtomicU64::new(0);

/// (device, inode) of a file.
pub type FileId = (u64, u64);

enum State {
    /// Not created yet: what was written so far (the header), kept in memory.
    Staged(Vec<u8>),
    /// The file, through a descriptor of ours.
    Held(c_int),
    /// The file, opened by path for each write (descriptor limit too low to hold one).
    ByPath,
}

/// The trace file of this process.
pub struct TraceFile {
    state: State,
    /// Absolute path, once created.
    path: PathBuf,
    id: FileId,
    /// Bytes not yet written because the file could not be opened.
    pending: Vec<u8>,
}

/// Why the trace could not be created.
#[derive(Debug)]
pub enum CreateError {
    /// The path names a device, FIFO or socket: no trace is wanted there.
    NotRegular(PathBuf),
    /// Every candidate name is taken.
    AllTaken(PathBuf),
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::NotRegular(p) => write!(
                f,
                "{} is not a regular file (a device, FIFO or socket); no trace is written there",
                p.display()
            ),
            CreateError::AllTaken(p) => write!(
                f,
                "{} and every fresh name tried beside it already exist",
                p.display()
            ),
            CreateError::Io(p, e) => write!(f, "cannot create {}: {e}", p.display()),
        }
    }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path holds a NUL byte"))
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

fn identity(fd: c_int) -> Option<FileId> {
    // SAFETY: fstat writes into our zeroed struct; a bad descriptor is an error, not UB.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// Writes all of `buf` to `fd` (retrying short writes and interruptions).
fn write_fully(fd: c_int, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: writes from our own buffer to a descriptor we own.
        let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = last_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote nothing"));
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

/// The program holds every descriptor its limit allows (or the system every one), for now.
fn no_descriptor_now(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

fn close(fd: c_int) {
    // SAFETY: only called on descriptors this module opened and still owns.
    unsafe { libc::close(fd) };
}

/// The soft descriptor limit (`RLIM_INFINITY` as `u64::MAX`).
fn descriptor_limit() -> u64 {
    // SAFETY: getrlimit fills our struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        r.rlim_cur
    }
}

/// Moves `fd` (just opened, so the lowest free number) high: returns the new descriptor, `fd`
/// being closed, or `None` (and `fd` closed) when the limit leaves no room for one of ours.
fn place_high(fd: c_int) -> Option<c_int> {
    let limit = descriptor_limit();
    if limit < MIN_LIMIT_TO_HOLD {
        close(fd);
        return None;
    }
    let top = (limit.min(HIGHEST_PLACE) - 1) as c_int;
    // F_DUPFD takes the lowest free number at or above its argument: the top first, then lower
    // when the program already uses the top.
    for floor in [top, top - top / 4, top / 2] {
        if floor <= fd {
            break;
        }
        // SAFETY: duplicates our own descriptor.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) };
        if high >= 0 {
            close(fd);
            return Some(high);
        }
    }
    close(fd);
    None
}

/// Removes the file at `path` if it is still the one of identity `id` (not one put in its
/// place since); whether it was removed.
pub fn remove_if_same(path: &Path, id: FileId) -> bool {
    let Ok(c) = cstring(path) else {
        return false;
    };
    // SAFETY: lstat writes into our zeroed struct; unlink takes a NUL-terminated path.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::lstat(c.as_ptr(), &mut st) == 0
            && (st.st_dev, st.st_ino) == id
            && libc::unlink(c.as_ptr()) == 0
    }
}

fn publish_held(fd: Option<c_int>, id: FileId) {
    HELD_DEV.store(id.0, Ordering::Relaxed);
    HELD_INO.store(id.1, Ordering::Relaxed);
    HELD_FD.store(fd.unwrap_or(-1), Ordering::Release);
}

/// In a forked child: closes the descriptor inherited from the parent's trace, if it is still
/// that file (the parent's program may have reused the number). Async-signal-safe.
pub fn close_inherited() {
    let fd = HELD_FD.swap(-1, Ordering::AcqRel);
    if fd < 0 {
        return;
    }
    let id = (
        HELD_DEV.load(Ordering::Relaxed),
        HELD_INO.load(Ordering::Relaxed),
    );
    if identity(fd) == Some(id) {
        close(fd);
    }
}

/// What exists at `path` and stops the trace from being created there.
fn refuse_non_regular(path: &Path) -> Result<(), CreateError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            use std::os::unix::fs::FileTypeExt;
            let t = m.file_type();
            if t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket() {
                return Err(CreateError::NotRegular(path.to_path_buf()));
            }
            Ok(())
        }
        Err(_) => Ok(()),
    }
}

/// Links the unnamed file `fd` at `name`. `Ok(false)`: the name exists. `Err(None)`: linking
/// unnamed files is not possible here (no `/proc`, no privilege): use plain creation.
fn link_unnamed(fd: c_int, name: &CString) -> Result<bool, Option<io::Error>> {
    let proc_path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number");
    // SAFETY: both paths are NUL-terminated; AT_FDCWD is valid.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = last_error();
    match e.raw_os_error() {
        Some(libc::EEXIST) => return Ok(false),
        Some(libc::ENOENT) => {}
        _ => return Err(Some(e)),
    }
    // No /proc: AT_EMPTY_PATH links the descriptor itself (needs CAP_DAC_READ_SEARCH).
    // SAFETY: as above, with an empty source path.
    let rc = unsafe {
        libc::linkat(
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            name.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let e = last_error();
    match e.raw_os_error() {
        Some(libc::EEXIST) => Ok(false),
        Some(libc::ENOENT) | Some(libc::EPERM) | Some(libc::EINVAL) => Err(None),
        _ => Err(Some(e)),
    }
}

impl TraceFile {
    /// A trace file not created yet: writes are kept until [`TraceFile::create`].
    pub fn staged() -> Self {
        TraceFile {
            state: State::Staged(Vec::with_capacity(4096)),
            path: PathBuf::new(),
            id: (0, 0),
            pending: Vec::new(),
        }
    }

    /// The file's path (empty before it is created).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's device and inode (zeros before it is created).
    pub fn id(&self) -> FileId {
        self.id
    }

    /// Creates the file at the first free name of `names` (all in one directory) with what was
    /// written so far; returns its path. Nothing that exists is touched.
    pub fn create(&mut self, names: impl Iterator<Item = PathBuf>) -> Result<&Path, CreateError> {
        let State::Staged(staged) = &mut self.state else {
            return Ok(&self.path);
        };
        let staged = std::mem::take(staged);
        let names: Vec<PathBuf> = names
            .map(|n| std::path::absolute(&n).unwrap_or(n))
            .collect();
        let Some(first) = names.first().cloned() else {
            return Err(CreateError::AllTaken(PathBuf::new()));
        };
        refuse_non_regular(&first)?;
        let io_err = |e: io::Error| CreateError::Io(first.clone(), e);
        let dir = first
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let mut pause = Duration::from_millis(5);
        let mut waited = Duration::ZERO;
        let made = loop {
            let mut candidates = names.iter().cloned();
            let made = match Self::create_unnamed(&dir, &staged, &mut candidates) {
                Ok(None) => Self::create_named(&staged, &mut candidates),
                Ok(Some(made)) => Ok(made),
                Err(e) => Err(e),
            };
            match made {
                Err(e) if no_descriptor_now(&e) && waited < CREATE_WAIT => {
                    std::thread::sleep(pause);
                    waited += pause;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                made => break made,
            }
        };
        let (fd, path) = made
            .map_err(io_err)?
            .ok_or_else(|| CreateError::AllTaken(first.clone()))?;
        let id = identity(fd).ok_or_else(|| io_err(last_error()))?;
        self.id = id;
        self.path = path;
        self.state = match place_high(fd) {
            Some(high) => State::Held(high),
            None => State::ByPath,
        };
        publish_held(self.held(), id);
        Ok(&self.path)
    }

    /// The header into an unnamed file, then the file linked at the first free name.
    /// `Ok(None)`: unnamed files are not possible here.
    #[allow(clippy::type_complexity)]
    fn create_unnamed(
        dir: &Path,
        staged: &[u8],
        names: &mut impl Iterator<Item = PathBuf>,
    ) -> io::Result<Option<Option<(c_int, PathBuf)>>> {
        let cdir = cstring(dir)?;
        // SAFETY: a NUL-terminated directory path; the descriptor is ours.
        let fd = unsafe {
            libc::open(
                cdir.as_ptr(),
                libc::O_TMPFILE | libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            let e = last_error();
            return match e.raw_os_error() {
                // No O_TMPFILE in this kernel or on this file system.
                Some(libc::EISDIR) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(None),
                _ => Err(e),
            };
        }
        if let Err(e) = write_fully(fd, staged) {
            close(fd);
            return Err(e);
        }
        for name in names {
            match link_unnamed(fd, &cstring(&name)?) {
                Ok(true) => return Ok(Some(Some((fd, name)))),
                Ok(false) => continue,
                Err(None) => {
                    close(fd);
                    return Ok(None);
                }
                Err(Some(e)) => {
                    close(fd);
                    return Err(e);
                }
            }
        }
        close(fd);
        Ok(Some(None))
    }

    /// `O_CREAT | O_EXCL` at the first free name, the header written at once.
    fn create_named(
        staged: &[u8],
        names: &mut impl Iterator<Item = PathBuf>,
    ) -> io::Result<Option<(c_int, PathBuf)>> {
        for name in names {
            let c = cstring(&name)?;
            // SAFETY: a NUL-terminated path; O_EXCL never opens an existing file.
            let fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_APPEND
                        | libc::O_CLOEXEC,
                    0o600 as libc::c_uint,
                )
            };
            if fd < 0 {
                let e = last_error();
                if e.raw_os_error() == Some(libc::EEXIST) {
                    continue;
                }
                return Err(e);
            }
            if let Err(e) = write_fully(fd, staged) {
                close(fd);
                return Err(e);
            }
            return Ok(Some((fd, name)));
        }
        Ok(None)
    }

    fn held(&self) -> Option<c_int> {
        match self.state {
            State::Held(fd) => Some(fd),
            _ => None,
        }
    }

    /// Opens our file by path, never creating one, and checks it is still the file we created.
    /// `Ok(None)`: the program holds every descriptor the limit allows, for now.
    fn open_own(&self) -> io::Result<Option<c_int>> {
        let c = cstring(&self.path)?;
        // SAFETY: a NUL-terminated path; no O_CREAT, so nothing is created.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = last_error();
            if no_descriptor_now(&e) {
                return Ok(None);
            }
            return Err(io::Error::new(
                e.kind(),
                format!("cannot reopen the trace by its path: {e}"),
            ));
        }
        if identity(fd) != Some(self.id) {
            close(fd);
            return Err(io::Error::other(
                "the trace's path now names another file (moved or replaced)",
            ));
        }
        Ok(Some(fd))
    }

    /// A descriptor of ours for the file: the held one if it is still ours, else the file
    /// reopened (and held again when the limit allows). `Ok(None)`: not now (see `open_own`).
    /// The `bool` says whether the caller must close it after writing.
    fn descriptor(&mut self) -> io::Result<Option<(c_int, bool)>> {
        match self.state {
            State::Staged(_) => unreachable!("written before creation"),
            State::Held(fd) if identity(fd) == Some(self.id) => Ok(Some((fd, false))),
            State::Held(_) => {
                // Closed or reused by the program: that number is not ours any more.
                HELD_FD.store(-1, Ordering::Release);
                self.state = State::ByPath;
                let Some(fd) = self.open_own()? else {
                    return Ok(None);
                };
                match place_high(fd) {
                    Some(high) => {
                        self.state = State::Held(high);
                        publish_held(Some(high), self.id);
                        Ok(Some((high, false)))
                    }
                    None => Ok(self.open_own()?.map(|fd| (fd, true))),
                }
            }
            State::ByPath => Ok(self.open_own()?.map(|fd| (fd, true))),
        }
    }

    /// Writes what waits, then `buf`; keeps both in memory while no descriptor can be had.
    fn write_owned(&mut self, buf: &[u8]) -> io::Result<()> {
        let Some((fd, transient)) = self.descriptor()? else {
            if self.pending.len() + buf.len() > MAX_PENDING {
                return Err(io::Error::other(
                    "the program holds every descriptor the limit allows; the trace cannot be written",
                ));
            }
            self.pending.extend_from_slice(buf);
            return Ok(());
        };
        let mut result = Ok(());
        if !self.pending.is_empty() {
            result = write_fully(fd, &self.pending);
            if result.is_ok() {
                self.pending = Vec::new();
            }
        }
        if result.is_ok() {
            result = write_fully(fd, buf);
        }
        if transient {
            close(fd);
        }
        result
    }
}

impl Write for TraceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.state {
            State::Staged(v) => v.extend_from_slice(buf),
            _ => self.write_owned(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() || matches!(self.state, State::Staged(_)) {
            return Ok(());
        }
        self.write_owned(&[])
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if let State::Held(fd) = self.state {
            if identity(fd) == Some(self.id) {
                let _ = HELD_FD.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed);
                close(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Mutex;

    /// The tests place descriptors at the same high numbers and one closes and reuses its own:
    /// one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn created(dir: &Path, name: &str, header: &[u8]) -> TraceFile {
        let mut f = TraceFile::staged();
        f.write_all(header).unwrap();
        f.create(std::iter::once(dir.join(name))).unwrap();
        f
    }

    #[test]
    fn the_file_appears_with_its_header_mode_0600_and_a_high_descriptor() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let mut f = created(dir.path(), "t.vtrace", b"HEAD");
        f.write_all(b"-body").unwrap();
        let path = dir.path().join("t.vtrace");
        assert_eq!(std::fs::read(&path).unwrap(), b"HEAD-body");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        if descriptor_limit() >= MIN_LIMIT_TO_HOLD {
            let fd = f.held().expect("a descriptor is held");
            assert!(fd >= 256, "descriptor {fd} is not high");
        }
    }

    #[test]
    fn an_existing_name_is_left_alone() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let taken = dir.path().join("t.vtrace");
        std::fs::write(&taken, b"checkpoint").unwrap();
        let mut f = TraceFile::staged();
        f.write_all(b"HEAD").unwrap();
        let names = [taken.clone(), dir.path().join("t.1.vtrace")];
        let path = f.create(names.into_iter()).unwrap().to_path_buf();
        assert_eq!(path, dir.path().join("t.1.vtrace"));
        assert_eq!(std::fs::read(&taken).unwrap(), b"checkpoint");
        assert_eq!(std::fs::read(&path).unwrap(), b"HEAD");
        // Every name taken: an error, and nothing touched.
        let mut g = TraceFile::staged();
        let names = [taken.clone(), path.clone()];
        assert!(matches!(
            g.create(names.into_iter()),
            Err(CreateError::AllTaken(_))
        ));
        assert_eq!(std::fs::read(&taken).unwrap(), b"checkpoint");
    }

    #[test]
    fn a_fifo_is_not_a_place_for_a_trace() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = cstring(&fifo).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let mut f = TraceFile::staged();
        assert!(matches!(
            f.create(std::iter::once(fifo.clone())),
            Err(CreateError::NotRegular(_))
        ));
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
    }

    #[test]
    fn a_closed_and_reused_descriptor_is_not_written() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let mut f = created(dir.path(), "t.vtrace", b"HEAD");
        let Some(fd) = f.held() else { return };
        // The program closes the number and gets it back for a file of its own.
        let other = dir.path().join("data");
        std::fs::write(&other, b"").unwrap();
        close(fd);
        let data = std::fs::OpenOptions::new()
            .append(true)
            .open(&other)
            .unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto the number the trace had.
        assert_eq!(unsafe { libc::dup2(data.as_raw_fd(), fd) }, fd);
        f.write_all(b"-more").unwrap();
        assert_eq!(std::fs::read(&other).unwrap(), b"");
        assert_eq!(
            std::fs::read(dir.path().join("t.vtrace")).unwrap(),
            b"HEAD-more"
        );
        close(fd);
        // A trace replaced under its name is not written either.
        let path = dir.path().join("t.vtrace");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"someone else's").unwrap();
        let held = f.held();
        if let Some(h) = held {
            close(h);
        }
        assert!(f.write_all(b"x").is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    }
}
