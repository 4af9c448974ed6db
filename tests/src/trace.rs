//! A trace read back whole, for exact checks: its events, lookups, warnings and stacks, the
//! live state rebuilt with the collector's own [`LiveState`], and compact forms of events
//! ([`Call`]) and live objects ([`LiveRow`]) that tests compare with the planted ground truth.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use vramtrace_collector::event::{Api, Event, Op};
use vramtrace_collector::format::{Ending, Header, Lookup, Record, Stats, TraceReader};
use vramtrace_collector::live::LiveState;

/// A trace read completely: its records kept for exact checks, and the live state rebuilt with
/// the collector's own [`LiveState`].
pub struct Trace {
    pub path: PathBuf,
    pub header: Header,
    pub ending: Ending,
    /// The program's intercepted calls (and step marks), in file order.
    pub events: Vec<Event>,
    /// The tracer's own samples of the driver's device accounting (`cuMemGetInfo`): events, but
    /// no call of the program, so they are kept apart.
    pub samples: Vec<Event>,
    /// Primary-context references taken (`cuDevicePrimaryCtxRetain`, mostly by the runtime's
    /// lazy initialisation): bookkeeping the workloads do not plant, kept apart and checked on
    /// their own.
    pub retains: Vec<Event>,
    /// Sequence numbers of every event record, samples included, in file order.
    pub seqs: Vec<u64>,
    pub lookups: Vec<Lookup>,
    pub warnings: Vec<String>,
    pub stacks: HashMap<u32, Vec<u64>>,
    /// Reasons of the end records (a whole trace has exactly one).
    pub end_reasons: Vec<String>,
    pub state: LiveState,
}

impl Trace {
    pub fn load(path: &Path) -> Trace {
        let mut reader = TraceReader::open(path)
            .unwrap_or_else(|e| panic!("cannot open the trace {}: {e}", path.display()));
        let header = reader.header().clone();
        let mut t = Trace {
            path: path.to_path_buf(),
            header,
            ending: Ending::Complete,
            events: Vec::new(),
            samples: Vec::new(),
            retains: Vec::new(),
            seqs: Vec::new(),
            lookups: Vec::new(),
            warnings: Vec::new(),
            stacks: HashMap::new(),
            end_reasons: Vec::new(),
            state: LiveState::new(),
        };
        for record in reader.by_ref() {
            t.state.apply(&record);
            match record {
                Record::Event(e) => {
                    t.seqs.push(e.seq);
                    if matches!(e.op, Op::DeviceMemory { .. }) {
                        t.samples.push(e);
                    } else if matches!(e.op, Op::PrimaryCtxRetain { .. }) {
                        t.retains.push(e);
                    } else {
                        t.events.push(e);
                    }
                }
                Record::Lookup(l) => t.lookups.push(l),
                Record::Warning(w) => t.warnings.push(w),
                Record::Stack(s) => {
                    t.stacks.insert(s.id, s.frames);
                }
                Record::End(end) => t.end_reasons.push(end.reason),
                _ => {}
            }
        }
        t.ending = reader
            .ending()
            .cloned()
            .expect("the reader says how it ended");
        t
    }

    /// The live state right after the event with sequence number `seq` was applied: the file
    /// read again from the start and stopped there, as `vramtrace replay` stops.
    pub fn state_after(&self, seq: u64) -> LiveState {
        let mut reader = TraceReader::open(&self.path)
            .unwrap_or_else(|e| panic!("cannot open the trace {}: {e}", self.path.display()));
        let mut state = LiveState::new();
        for record in reader.by_ref() {
            state.apply(&record);
            if matches!(&record, Record::Event(e) if e.seq == seq) {
                return state;
            }
        }
        panic!("{}: no event with seq {seq}", self.path.display())
    }

    /// The ordinal of the event with sequence number `seq` among all event records in file
    /// order, samples included (1 = the first): what `vramtrace replay` counts as `event N`.
    pub fn ordinal(&self, seq: u64) -> u64 {
        let at = self.seqs.iter().position(|&s| s == seq);
        at.unwrap_or_else(|| panic!("{}: no event with seq {seq}", self.path.display())) as u64 + 1
    }

    /// Events per entry point.
    pub fn counts(&self) -> BTreeMap<Api, u64> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            *m.entry(e.api).or_default() += 1;
        }
        m
    }

    /// Events of one entry point, in file order.
    pub fn of(&self, api: Api) -> Vec<&Event> {
        self.events.iter().filter(|e| e.api == api).collect()
    }

    /// The owner module's file name of an event, by the collector's owner resolution (the first
    /// frame outside the CUDA libraries).
    pub fn owner(&self, e: &Event) -> Option<String> {
        let owners = self.state.owners();
        let id = owners.resolve(e.caller, e.stack).module?;
        owners.module_name(id).map(str::to_string)
    }

    /// The tracer's last counters (end record, else last stats record).
    pub fn stats(&self) -> Stats {
        self.state
            .stats()
            .cloned()
            .unwrap_or_else(|| panic!("{}: no stats record", self.path.display()))
    }

    /// Panics unless the trace is whole, ended once for `reason`, and the tracer lost nothing:
    /// no dropped or late events, no hook panics, no hook without its real function, and every
    /// event it counted is in the file.
    pub fn assert_clean(&self, reason: &str) {
        let p = self.path.display();
        assert!(self.ending.is_complete(), "{p}: {}", self.ending.describe());
        assert_eq!(self.end_reasons, [reason], "{p}: end records");
        let s = self.stats();
        assert_eq!(
            (s.dropped, s.late, s.hook_panics, s.missing_real),
            (0, 0, 0, 0),
            "{p}: tracer counters {s:?}"
        );
        assert_eq!(s.events, self.seqs.len() as u64, "{p}: events written");
    }

    /// Every event as a [`Call`], in file order.
    pub fn calls(&self) -> Vec<Call> {
        self.events.iter().map(Call::of).collect()
    }

    /// Panics unless the events are exactly `want`, in order ([`ANY`] in an expected object
    /// matches any value: a static buffer's address moves with ASLR).
    pub fn assert_calls(&self, want: &[Call]) {
        let mut got = self.calls();
        for (g, w) in got.iter_mut().zip(want) {
            if w.object == ANY {
                g.object = ANY;
            }
        }
        if got != want {
            let first = got
                .iter()
                .zip(want)
                .position(|(g, w)| g != w)
                .unwrap_or(got.len().min(want.len()));
            panic!(
                "{}: events differ from event #{} on ({} events, {} expected)\n got:  {:?}\n want: \
                 {:?}\nall events:\n{got:#?}",
                self.path.display(),
                first + 1,
                got.len(),
                want.len(),
                got.get(first),
                want.get(first),
            );
        }
    }

    /// Every live object as a [`LiveRow`], sorted.
    pub fn live(&self) -> Vec<LiveRow> {
        let owners = self.state.owners();
        let mut rows: Vec<LiveRow> = self
            .state
            .live_objects()
            .map(|o| LiveRow {
                category: o.category.name(),
                address: o.address,
                bytes: o.bytes,
                device: o.device,
                owner: o
                    .origin
                    .module
                    .and_then(|m| owners.module_name(m))
                    .map(str::to_string),
                flags: o.flags.iter().map(|f| f.name()).collect(),
            })
            .collect();
        rows.sort();
        rows
    }

    /// Every live object with the communicator it is attributed to, sorted.
    pub fn live_with_communicators(&self) -> Vec<(LiveRow, Option<Hex>)> {
        let rows = self.live();
        let mut comms: Vec<(LiveRow, Option<Hex>)> = Vec::new();
        // `live()` and `live_objects()` list the same objects; pair them up by sorting both.
        let mut objects: Vec<_> = self.state.live_objects().collect();
        objects.sort_by_key(|o| (o.category.name(), o.address, o.bytes, o.device));
        let mut by_key: Vec<_> = rows.into_iter().collect();
        by_key.sort_by_key(|r| (r.category, r.address, r.bytes, r.device));
        for (r, o) in by_key.into_iter().zip(objects) {
            comms.push((r, o.origin.communicator.map(Hex)));
        }
        comms.sort();
        comms
    }

    /// Events per (owner module, entry point).
    pub fn owner_counts(&self) -> BTreeMap<(String, Api), u64> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            let owner = self.owner(e).unwrap_or_else(|| "(unknown)".into());
            *m.entry((owner, e.api)).or_default() += 1;
        }
        m
    }

    /// Panics unless the events per entry point are exactly `want` (entry points not listed
    /// must not appear at all).
    pub fn assert_counts(&self, want: &[(Api, u64)]) {
        let want: BTreeMap<Api, u64> = want.iter().copied().filter(|&(_, n)| n > 0).collect();
        let got = self.counts();
        if got != want {
            let mut diff = String::new();
            for api in want.keys().chain(got.keys()) {
                let (w, g) = (want.get(api), got.get(api));
                if w != g && !diff.contains(&format!("{api}:")) {
                    diff += &format!(
                        "  {api}: want {}, got {}\n",
                        w.unwrap_or(&0),
                        g.unwrap_or(&0)
                    );
                }
            }
            panic!("{}: events per API differ:\n{diff}", self.path.display());
        }
    }
}

/// An event reduced to what a test plants: the entry point, the driver call merged into it,
/// the result, and the object and size the call named (see [`Call::of`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub api: Api,
    pub inner: Option<Api>,
    pub result: i32,
    pub object: u64,
    pub size: u64,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.map_or(String::new(), |i| format!("[{i}]"));
        write!(
            f,
            "{}{inner} = {} ({:#x}, {})",
            self.api, self.result, self.object, self.size
        )
    }
}

/// An expected object that matches any value.
pub const ANY: u64 = u64::MAX;

/// Shorthand for an expected [`Call`].
pub fn call(api: Api, inner: Option<Api>, result: i32, object: u64, size: u64) -> Call {
    Call {
        api,
        inner,
        result,
        object,
        size,
    }
}

impl Call {
    /// The object is the pointer, handle, array, pool, context or device the operation names;
    /// the size its byte count (allocation, registration, reservation, mapping, unmap, array),
    /// the `keep` of a pool trim, else 0.
    pub fn of(e: &Event) -> Call {
        let (object, size) = match e.op {
            Op::Alloc { ptr, size, .. }
            | Op::HostRegister { ptr, size, .. }
            | Op::Reserve { ptr, size, .. }
            | Op::ReserveFree { ptr, size }
            | Op::Map { ptr, size, .. }
            | Op::Unmap { ptr, size }
            | Op::NcclMemAlloc { ptr, size } => (ptr, size),
            Op::Create { handle, size, .. } => (handle, size),
            Op::ArrayCreate { array, bytes, .. } => (array, bytes),
            Op::PoolTrim { pool, keep } => (pool, keep),
            Op::Free { ptr, .. }
            | Op::FreeHost { ptr }
            | Op::HostUnregister { ptr }
            | Op::IpcOpen { ptr, .. }
            | Op::IpcClose { ptr }
            | Op::NcclMemFree { ptr } => (ptr, 0),
            Op::Release { handle } | Op::Retain { handle, .. } | Op::Import { handle, .. } => {
                (handle, 0)
            }
            Op::ArrayDestroy { array } => (array, 0),
            Op::PoolCreate { pool, .. } | Op::PoolDestroy { pool } => (pool, 0),
            Op::CtxCreate { ctx, .. } | Op::CtxDestroy { ctx } => (ctx, 0),
            Op::PrimaryCtxRelease { device }
            | Op::PrimaryCtxReset { device }
            | Op::DeviceReset { device } => (device as u64, 0),
            Op::Register { ptr, size, .. } | Op::WindowRegister { ptr, size, .. } => (ptr, size),
            Op::MarkStep { step } => (step, 0),
            _ => (0, 0),
        };
        Call {
            api: e.api,
            inner: e.inner,
            result: e.result,
            object,
            size,
        }
    }
}

/// A live object reduced to what the leak tables of the stand-ins' README list.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LiveRow {
    pub category: &'static str,
    pub address: u64,
    pub bytes: u64,
    pub device: i32,
    /// File name of the owner module.
    pub owner: Option<String>,
    pub flags: Vec<&'static str>,
}

impl std::fmt::Debug for LiveRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:#x} {} B dev {} owner {} {:?}",
            self.category,
            self.address,
            self.bytes,
            self.device,
            self.owner.as_deref().unwrap_or("?"),
            self.flags
        )
    }
}

/// Shorthand for an expected [`LiveRow`].
pub fn live(
    category: &'static str,
    address: u64,
    bytes: u64,
    device: i32,
    owner: &str,
    flags: &[&'static str],
) -> LiveRow {
    LiveRow {
        category,
        address,
        bytes,
        device,
        owner: Some(owner.to_string()),
        flags: flags.to_vec(),
    }
}

/// A 64-bit address or handle that prints as hex in assertion messages.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hex(pub u64);

impl std::fmt::Debug for Hex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
