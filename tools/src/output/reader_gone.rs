//! Standard output and error for commands whose exit code is a verdict (`report --fail-on`,
//! `diff`, `check`): a reader that stops early (`| head` in a CI log) must not change the
//! verdict. Once a write finds the pipe closed, the rest is dropped and the command goes on to
//! its exit code; a gate that passed a leak because its log was trimmed would keep no promise.
//! Other write errors (a full disk) stay errors.

use std::io::{ErrorKind, Result, Write};

/// A stream whose reader may leave: writes after a broken pipe are dropped, as if written.
pub struct ReaderMayLeave<W: Write> {
    inner: W,
    gone: bool,
}

impl<W: Write> ReaderMayLeave<W> {
    pub fn new(inner: W) -> Self {
        ReaderMayLeave { inner, gone: false }
    }

    fn gone_is_fine<T>(&mut self, result: Result<T>, written: T) -> Result<T> {
        match result {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.gone = true;
                Ok(written)
            }
            other => other,
        }
    }
}

impl<W: Write> Write for ReaderMayLeave<W> {
    fn write(&mut self, buf: &[u8]) -> Result<usize> {
        if self.gone {
            return Ok(buf.len());
        }
        let result = self.inner.write(buf);
        self.gone_is_fine(result, buf.len())
    }

    fn flush(&mut self) -> Result<()> {
        if self.gone {
            return Ok(());
        }
        let result = self.inner.flush();
        self.gone_is_fine(result, ())
    }
}

/// Standard output, locked, for a command whose exit code is a verdict.
pub fn stdout() -> ReaderMayLeave<std::io::StdoutLock<'static>> {
    ReaderMayLeave::new(std::io::stdout().lock())
}

/// Standard error, locked, for a command whose exit code is a verdict.
pub fn stderr() -> ReaderMayLeave<std::io::StderrLock<'static>> {
    ReaderMayLeave::new(std::io::stderr().lock())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose reader left after `room` bytes.
    struct Closed {
        room: usize,
    }

    impl Write for Closed {
        fn write(&mut self, buf: &[u8]) -> Result<usize> {
            if self.room == 0 {
                return Err(ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn after_the_reader_left_writes_are_dropped_not_errors() {
        let mut out = ReaderMayLeave::new(Closed { room: 4 });
        out.write_all(b"verdict: FAIL\n").unwrap();
        out.write_all(b"more\n").unwrap();
        out.flush().unwrap();
        assert!(out.gone);
    }

    #[test]
    fn other_errors_stay_errors() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> Result<usize> {
                Err(std::io::Error::from_raw_os_error(28)) // ENOSPC
            }
            fn flush(&mut self) -> Result<()> {
                Ok(())
            }
        }
        let mut out = ReaderMayLeave::new(Full);
        assert!(out.write_all(b"x").is_err());
    }
}
