//! What each call did over a whole trace, counted while reading it: allocations made and
//! failures, which the live state does not keep per call once objects are freed, and whether the
//! call's Python stack was its own or inferred from another thread.
use rustc_hash::FxHashMap;

use crate::event::{Event, Op};
use crate::live::{means_out_of_memory, means_shutting_down};
use crate::symbols::CallRef;

/// Counts of one call (caller, native stack, Python stack).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Successful calls that made memory (device, pinned host, arrays, physical handles, host
    /// registrations), and the bytes they asked for.
    pub allocations: u64,
    pub allocated_bytes: u64,
    /// Calls that failed, and those among them that ran out of memory.
    pub failures: u64,
    pub out_of_memory: u64,
    /// Calls whose Python stack was captured on their own thread, and calls whose Python stack
    /// was inferred (the last one seen on any thread: PyTorch's autograd threads run no Python).
    pub own_python: u64,
    pub inferred_python: u64,
}

/// [`CallCounts`] per call of one trace.
#[derive(Clone, Debug, Default)]
pub struct CallTally {
    calls: FxHashMap<CallRef, CallCounts>,
}

impl CallTally {
    /// An empty tally.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one event of the trace (every event may be given; those that make nothing and
    /// fail nothing are passed over).
    pub fn note(&mut self, e: &Event) {
        let made = match e.op {
            Op::Alloc { size, .. } | Op::HostRegister { size, .. } | Op::Create { size, .. } => {
                Some(size)
            }
            Op::ArrayCreate { bytes, .. } => Some(bytes),
            // Frees, the program's marks and the tracer's own samples name no call site worth
            // comparing; other objects (reservations, mappings, NCCL objects) are counted only
            // for their Python stacks and failures.
            Op::Free { .. }
            | Op::FreeHost { .. }
            | Op::MarkStep { .. }
            | Op::MarkIteration { .. }
            | Op::RangePush { .. }
            | Op::RangePop
            | Op::Mark { .. }
            | Op::DeviceMemory { .. }
                if e.ok() =>
            {
                return
            }
            _ => None,
        };
        let c = self.calls.entry(CallRef::from(e)).or_default();
        if e.ok() {
            if let Some(size) = made {
                c.allocations += 1;
                c.allocated_bytes += size;
            }
        } else if !means_shutting_down(e) {
            c.failures += 1;
            c.out_of_memory += u64::from(means_out_of_memory(e));
        }
        if e.py_stack != 0 {
            if e.py_inferred {
                c.inferred_python += 1;
            } else {
                c.own_python += 1;
            }
        }
    }

    /// Every call counted, with its counts.
    pub fn iter(&self) -> impl Iterator<Item = (&CallRef, &CallCounts)> {
        self.calls.iter()
    }

    /// The counts of all calls together.
    pub fn total(&self) -> CallCounts {
        let mut t = CallCounts::default();
        for c in self.calls.values() {
            t.allocations += c.allocations;
            t.allocated_bytes += c.allocated_bytes;
            t.failures += c.failures;
            t.out_of_memory += c.out_of_memory;
            t.own_python += c.own_python;
            t.inferred_python += c.inferred_python;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Api, MemKind};

    fn event(op: Op, result: i32, py_stack: u32, py_inferred: bool) -> Event {
        Event {
            time_ns: 1,
            thread: 1,
            result,
            caller: 0x1000,
            stack: 3,
            py_stack,
            py_inferred,
            ..Event::new(1, Api::CudaMalloc, op)
        }
    }

    fn alloc(size: u64) -> Op {
        Op::Alloc {
            kind: MemKind::Device,
            ptr: 0x10,
            size,
            stream: 0,
            pool: 0,
            flags: 0,
            pitch: 0,
        }
    }

    #[test]
    fn allocations_failures_and_python_are_counted_per_call() {
        let mut t = CallTally::new();
        t.note(&event(alloc(100), 0, 7, false));
        t.note(&event(alloc(50), 0, 7, false));
        t.note(&event(alloc(1 << 40), 2, 7, false));
        t.note(&event(alloc(8), 0, 9, true));
        t.note(&event(
            Op::Free {
                ptr: 0x10,
                stream: 0,
            },
            0,
            7,
            false,
        ));
        let of = |py_stack| {
            let call = CallRef {
                caller: 0x1000,
                stack: 3,
                py_stack,
            };
            t.iter()
                .find(|(c, _)| **c == call)
                .map(|(_, c)| *c)
                .unwrap()
        };
        assert_eq!(
            of(7),
            CallCounts {
                allocations: 2,
                allocated_bytes: 150,
                failures: 1,
                out_of_memory: 1,
                own_python: 3,
                inferred_python: 0,
            }
        );
        assert_eq!((of(9).allocations, of(9).inferred_python), (1, 1));
        assert_eq!(t.total().allocated_bytes, 158);
    }
}
