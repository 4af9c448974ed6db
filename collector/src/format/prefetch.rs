//! Reading and decompressing chunks on a second thread, ahead of the records being replayed.
//!
//! Decompression is a fifth of a replay's work and needs nothing from the replay, so a thread
//! does it for the next few chunks while the caller decodes and applies the current one. Chunks
//! still arrive in file order, through a bounded channel (memory stays a few chunks whatever the
//! file's size); spent buffers go back to the thread to be filled again.

use std::io::Read;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use super::chunk::{self, Loaded, Scratch};

/// Chunks decompressed ahead of the one being read.
const AHEAD: usize = 4;

/// A chunk and what reading it gave.
type Message = (Vec<u8>, Loaded);

/// The reading thread and the channels to it.
pub(super) struct Prefetcher {
    chunks: Option<Receiver<Message>>,
    spent: Sender<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
}

impl Prefetcher {
    /// Starts reading chunks from `src`, whose next byte is at file offset `offset`; gives `src`
    /// back when no thread can be started.
    pub(super) fn spawn<R: Read + Send + 'static>(src: R, mut offset: u64) -> Result<Self, R> {
        let (tx, chunks) = mpsc::sync_channel::<Message>(AHEAD);
        let (spent, recycled) = mpsc::channel::<Vec<u8>>();
        // The source is handed over once the thread runs, so a failed start leaves it here.
        let (hand_over, handed) = mpsc::sync_channel::<R>(1);
        let started = std::thread::Builder::new()
            .name("vramtrace-read".into())
            .spawn(move || {
                let Ok(mut src) = handed.recv() else {
                    return;
                };
                let mut scratch = Scratch::default();
                loop {
                    let mut raw = recycled.try_recv().unwrap_or_default();
                    let loaded = chunk::load(&mut src, offset, &mut scratch, &mut raw);
                    let more = match loaded {
                        Loaded::Chunk { len } => {
                            offset += len;
                            true
                        }
                        Loaded::Eof | Loaded::Stop(_) => false,
                    };
                    // A closed channel means the reader was dropped: nothing more to do.
                    if tx.send((raw, loaded)).is_err() || !more {
                        return;
                    }
                }
            });
        let thread = match started {
            Ok(thread) => thread,
            Err(_) => return Err(src),
        };
        if let Err(mpsc::SendError(src)) = hand_over.send(src) {
            return Err(src);
        }
        Ok(Prefetcher {
            chunks: Some(chunks),
            spent,
            thread: Some(thread),
        })
    }

    /// The next chunk, at file offset `offset`, into `raw` (whose old contents go back to be
    /// reused).
    pub(super) fn next(&mut self, offset: u64, raw: &mut Vec<u8>) -> Loaded {
        let received = self.chunks.as_ref().map(|c| c.recv());
        match received {
            Some(Ok((mut buf, loaded))) => {
                std::mem::swap(raw, &mut buf);
                // The thread may have finished; a buffer it will not reuse is simply dropped.
                let _ = self.spent.send(buf);
                loaded
            }
            // The thread is gone without a last message: it panicked.
            _ => Loaded::Stop(super::Ending::Corrupt {
                offset,
                reason: "the reading thread failed".into(),
            }),
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        // Closing the channel first unblocks a thread waiting to hand over a chunk.
        drop(self.chunks.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
