//! The channel between hooks and the writer: a bounded lock-free ring indexed by the events'
//! own sequence numbers.
//!
//! An event's sequence number (taken with one atomic increment, at the point that keeps causal
//! order, see `hooks::call`) is also its slot: `seq % capacity`. A hook claims its slot, writes
//! the event in place and marks it ready; the writer reads slots strictly in sequence order, so
//! the trace comes out causally ordered without any sorting, and one atomic increment per event is
//! the only shared write on the hook's path besides its own slot.
//!
//! Each slot's stamp holds `seq << 2 | state` for the sequence number the slot currently serves:
//!
//! ```text
//!   EMPTY(s) --hook claims--> WRITING(s) --hook writes--> READY(s) --writer takes--> EMPTY(s+cap)
//!   EMPTY(s) --writer gives up on s (dropped or never claimed)--> EMPTY(s+cap)
//! ```
//!
//! A hook whose slot still serves an older lap (the ring is full) waits (how long is the
//! session's decision, see `Session::claim`), then drops its event and says so; a hook that finds
//! its slot already past its number (the writer gave up on it) drops its event as late.
//! Nothing blocks forever and nothing is lost silently.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const EMPTY: u64 = 0;
const WRITING: u64 = 1;
const READY: u64 = 2;
const STATE: u64 = 3;

/// Cache-line aligned: an event (120 bytes) and its stamp fill two lines exactly, so a hook
/// writing its slot and the writer reading it move two lines between cores, not three.
#[repr(align(64))]
struct Slot<T> {
    stamp: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// What the writer finds at a sequence number.
pub enum Take<T> {
    /// The event.
    Ready(T),
    /// A hook claimed the number and is still writing (or still inside the real call).
    Writing,
    /// Nobody claimed the number yet.
    Unclaimed,
    /// The slot still holds an older lap: the writer is ahead of itself (a logic error, never
    /// expected).
    Behind,
}

/// Why a hook could not publish its event.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The ring stayed full for the whole wait.
    Full,
    /// The writer had already given up on this number.
    Late,
}

/// A bounded multi-producer, single-consumer ring of events keyed by sequence number.
pub struct Ring<T> {
    slots: Box<[Slot<T>]>,
    mask: u64,
}

// SAFETY: a slot's value is written only by the hook that claimed it (WRITING) and read only by
// the writer after seeing READY with Acquire ordering; the stamp protocol hands ownership over.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T> Ring<T> {
    /// A ring of at least `capacity` slots (rounded up to a power of two), ready for sequence
    /// numbers starting at 1.
    pub fn new(capacity: usize) -> Ring<T> {
        let cap = capacity.max(2).next_power_of_two() as u64;
        let slots = (0..cap)
            .map(|i| {
                // Slot i first serves the smallest s >= 1 with s % cap == i.
                let first = if i == 0 { cap } else { i };
                Slot {
                    stamp: AtomicU64::new(first << 2 | EMPTY),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                }
            })
            .collect();
        Ring {
            slots,
            mask: cap - 1,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }

    #[inline]
    fn slot(&self, seq: u64) -> &Slot<T> {
        &self.slots[(seq & self.mask) as usize]
    }

    /// Claims the slot of `seq` for writing if it is free now: `Full` when it still serves an
    /// older lap, `Late` when the writer already gave up on `seq`.
    #[inline]
    pub fn try_claim(&self, seq: u64) -> Result<(), Refused> {
        let want = seq << 2 | EMPTY;
        let stamp = &self.slot(seq).stamp;
        loop {
            match stamp.compare_exchange_weak(
                want,
                seq << 2 | WRITING,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(cur) if cur >> 2 > seq => return Err(Refused::Late),
                // A spurious failure of the weak exchange.
                Err(cur) if cur == want => continue,
                Err(_) => return Err(Refused::Full),
            }
        }
    }

    /// Claims the slot of `seq` for writing, waiting up to `wait` while the ring is full.
    pub fn claim(&self, seq: u64, wait: Duration) -> Result<(), Refused> {
        let start = Instant::now();
        loop {
            match self.try_claim(seq) {
                Err(Refused::Full) if start.elapsed() < wait => std::thread::yield_now(),
                other => return other,
            }
        }
    }

    /// Writes the event of a claimed `seq` and hands it to the writer.
    #[inline]
    pub fn fill(&self, seq: u64, value: T) {
        self.fill_with(seq, || value);
    }

    /// Builds the event of a claimed `seq` straight into its slot and hands it to the writer.
    #[inline]
    pub fn fill_with(&self, seq: u64, build: impl FnOnce() -> T) {
        let slot = self.slot(seq);
        debug_assert_eq!(slot.stamp.load(Ordering::Relaxed), seq << 2 | WRITING);
        // SAFETY: this thread claimed the slot (WRITING); nobody else touches the value until the
        // READY store below publishes it.
        unsafe { (*slot.value.get()).write(build()) };
        slot.stamp.store(seq << 2 | READY, Ordering::Release);
    }

    /// Gives a claimed slot back without an event (the event could not be built): the writer
    /// will skip `seq`.
    pub fn abandon(&self, seq: u64) {
        let slot = self.slot(seq);
        // Back to EMPTY(seq): the writer then treats it as a number nobody filled.
        slot.stamp.store(seq << 2 | EMPTY, Ordering::Release);
    }

    /// Claims and fills in one step.
    pub fn publish(&self, seq: u64, value: T, wait: Duration) -> Result<(), (Refused, T)> {
        match self.claim(seq, wait) {
            Ok(()) => {
                self.fill(seq, value);
                Ok(())
            }
            Err(r) => Err((r, value)),
        }
    }

    /// Writer: what is at `seq` (the next number it has not consumed).
    pub fn take(&self, seq: u64) -> Take<T> {
        let slot = self.slot(seq);
        let stamp = slot.stamp.load(Ordering::Acquire);
        if stamp >> 2 != seq {
            return Take::Behind;
        }
        match stamp & STATE {
            READY => {
                // SAFETY: READY (read with Acquire) means the hook finished writing the value;
                // we move it out and mark the slot free for the next lap.
                let value = unsafe { (*slot.value.get()).assume_init_read() };
                slot.stamp
                    .store((seq + self.capacity()) << 2 | EMPTY, Ordering::Release);
                Take::Ready(value)
            }
            WRITING => Take::Writing,
            _ => Take::Unclaimed,
        }
    }

    /// Writer: gives up on an unclaimed `seq` so the slot serves the next lap. `false` when a
    /// hook claimed it in the meantime.
    pub fn skip(&self, seq: u64) -> bool {
        self.slot(seq)
            .stamp
            .compare_exchange(
                seq << 2 | EMPTY,
                (seq + self.capacity()) << 2 | EMPTY,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        for s in self.slots.iter_mut() {
            if *s.stamp.get_mut() & STATE == READY {
                // SAFETY: READY slots hold an initialised value nobody took.
                unsafe { s.value.get_mut().assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn in_order_round_trip_across_laps() {
        let r: Ring<u64> = Ring::new(4);
        for seq in 1..=20u64 {
            r.publish(seq, seq * 10, Duration::ZERO).unwrap();
            match r.take(seq) {
                Take::Ready(v) => assert_eq!(v, seq * 10),
                _ => panic!("seq {seq} not ready"),
            }
        }
    }

    #[test]
    fn a_full_ring_refuses_after_the_wait_and_a_skipped_number_is_late() {
        let r: Ring<u64> = Ring::new(2);
        r.publish(1, 1, Duration::ZERO).unwrap();
        r.publish(2, 2, Duration::ZERO).unwrap();
        assert_eq!(
            r.publish(3, 3, Duration::from_millis(5)).unwrap_err().0,
            Refused::Full
        );
        assert!(matches!(r.take(1), Take::Ready(1)));
        // Seq 3 was dropped by its hook: the writer skips it.
        assert!(matches!(r.take(2), Take::Ready(2)));
        assert!(matches!(r.take(3), Take::Unclaimed));
        assert!(r.skip(3));
        // A hook arriving for 3 now is late.
        assert_eq!(
            r.publish(3, 3, Duration::ZERO).unwrap_err().0,
            Refused::Late
        );
        r.publish(4, 4, Duration::ZERO).unwrap();
        assert!(matches!(r.take(4), Take::Ready(4)));
    }

    #[test]
    fn a_claimed_slot_is_writing_until_filled_and_cannot_be_skipped() {
        let r: Ring<String> = Ring::new(8);
        r.claim(1, Duration::ZERO).unwrap();
        assert!(matches!(r.take(1), Take::Writing));
        assert!(!r.skip(1));
        r.fill(1, "x".into());
        assert!(matches!(r.take(1), Take::Ready(ref s) if s == "x"));
        r.claim(2, Duration::ZERO).unwrap();
        r.abandon(2);
        assert!(matches!(r.take(2), Take::Unclaimed));
        assert!(r.skip(2));
    }

    #[test]
    fn many_producers_one_consumer_lose_nothing() {
        let r: Arc<Ring<u64>> = Arc::new(Ring::new(64));
        let seq = Arc::new(AtomicU64::new(0));
        let per = 20_000u64;
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (r, seq) = (r.clone(), seq.clone());
                std::thread::spawn(move || {
                    for _ in 0..per {
                        let s = seq.fetch_add(1, Ordering::Relaxed) + 1;
                        r.publish(s, s, Duration::from_secs(10)).unwrap();
                    }
                })
            })
            .collect();
        let total = 8 * per;
        let mut next = 1;
        while next <= total {
            match r.take(next) {
                Take::Ready(v) => {
                    assert_eq!(v, next);
                    next += 1;
                }
                _ => std::thread::yield_now(),
            }
        }
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn unread_values_are_dropped_with_the_ring() {
        let counter = Arc::new(());
        let r: Ring<Arc<()>> = Ring::new(4);
        r.publish(1, counter.clone(), Duration::ZERO).unwrap();
        assert_eq!(Arc::strong_count(&counter), 2);
        drop(r);
        assert_eq!(Arc::strong_count(&counter), 1);
    }
}
