//! Reading and decompressing chunks on a second thread, ahead of the records being replayed.
//!
//! Decompression needs nothing from the replay, so a thread reads and decompresses the next few
//! chunks while the caller decodes and applies the current one. Chunks still arrive in file
//! order, through a bounded channel: memory stays a few chunks whatever the file's size.
//!
//! More threads do not pay: decompressing is a fifth of the caller's time per chunk, so one
//! thread keeps ahead; and decoding on other threads as well (tried) gained the caller 3–10% of
//! its time but cost more than that again in moving the decoded events across (and in wall time
//! on a machine without idle cores).

use std::io::Read;
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;

use super::frame::{self, Frames, Piece};

/// Chunks decompressed ahead of the one being read.
const AHEAD: usize = 4;

/// The reading thread and the channel from it (none by default: a placeholder).
#[derive(Default)]
pub(crate) struct Ahead {
    chunks: Option<Receiver<Piece>>,
    thread: Option<JoinHandle<()>>,
}

impl Ahead {
    /// Starts reading `frames` on a thread; gives them back when no thread can be started.
    pub(crate) fn spawn<R: Read + Send + 'static>(frames: Frames<R>) -> Result<Self, Frames<R>> {
        let (tx, chunks) = mpsc::sync_channel(AHEAD);
        // The frames are handed over once the thread runs, so a failed start leaves them here.
        let (hand_over, handed) = mpsc::sync_channel::<Frames<R>>(1);
        let started = std::thread::Builder::new()
            .name("vramtrace-read".into())
            .spawn(move || {
                let Ok(mut frames) = handed.recv() else {
                    return;
                };
                let mut zstd = None;
                loop {
                    let piece = frame::unpack(frames.next(), &mut zstd);
                    let end = matches!(piece, Piece::End(_));
                    // A closed channel means the reader was dropped: nothing more to do.
                    if tx.send(piece).is_err() || end {
                        return;
                    }
                }
            });
        let thread = match started {
            Ok(thread) => thread,
            Err(_) => return Err(frames),
        };
        hand_over.send(frames).map_err(|mpsc::SendError(f)| f)?;
        Ok(Ahead {
            chunks: Some(chunks),
            thread: Some(thread),
        })
    }

    /// The next chunk, unpacked, in file order, or what is in its place; `None` when the thread
    /// is gone without saying how reading ended.
    pub(crate) fn next(&mut self) -> Option<Piece> {
        self.chunks.as_ref()?.recv().ok()
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Closing the channel first unblocks a thread waiting to hand over a chunk.
        drop(self.chunks.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
