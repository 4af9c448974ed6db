//! Call sites as nodes of the graph: every object points at the site that allocated it, and at
//! the interned [`Call`] that holds what all objects of alike calls share.
//!
//! A site is the interned native stack of the call when one was captured, else the call's return
//! address alone, together with the program's own Python line that made the call (see
//! [`ProgramLine`]): one native path reached from two lines of a script is two sites, so the
//! analyses can name the line whose allocations stay live. Sites get small dense ids in the order
//! they are first seen, so replaying the same trace twice gives the same ids.
//!
//! A call is a site plus the rest of an object's origin that does not change from one object to
//! the next: entry point, thread, device, context, Python stack, owner module, communicator, and
//! the pool an allocation came from. A training loop makes millions of objects from a few hundred
//! such calls, so an object keeps a call id and only what is its own (sequence number, time, step,
//! size); its [`Origin`] is put back together when asked for.

use std::hash::{Hash, Hasher};

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::objects::Origin;
use super::origin::OwnerResolver;
use crate::event::{Api, Event, StackId};
use crate::ids::SiteId;
use crate::module_map::ModuleMap;
use crate::python::PythonStacks;

pub(crate) use crate::ids::CallId;

/// The program's own Python line behind a call: the code object and line of the innermost
/// Python frame outside installed packages and the standard library
/// ([`PythonStacks::program_frame`]), and the program's path to it. A tensor made inside
/// `torch/nn/functional.py` is the line of the script that called it; a tensor made by the
/// script's own helper is the helper's line, on the path of the line that called the helper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ProgramLine {
    /// Code object id in the trace; 0 for a call without Python frames.
    pub code: u32,
    pub line: u32,
    /// The program's frames that called the line ([`PythonStacks::program_callers`]), as a
    /// hash: one helper's line called from two lines of the script is two sites, so that the
    /// helper's temporaries and what one caller keeps have series of their own (and `diff` two
    /// sites of its own, `compare/profile.rs`).
    #[serde(skip)]
    pub callers: u32,
}

impl ProgramLine {
    /// The line of a call without Python frames.
    pub const NONE: ProgramLine = ProgramLine {
        code: 0,
        line: 0,
        callers: 0,
    };

    /// Whether the call had Python frames.
    pub fn is_some(self) -> bool {
        self != Self::NONE
    }

    /// The program line of Python stack `py_stack`, if it has one.
    pub(crate) fn of(python: &PythonStacks, py_stack: StackId) -> ProgramLine {
        let Some(f) = python.program_frame(py_stack) else {
            return ProgramLine::NONE;
        };
        let mut h = rustc_hash::FxHasher::default();
        for c in python.program_callers(py_stack) {
            (c.code, c.line).hash(&mut h);
        }
        ProgramLine {
            code: f.code,
            line: f.line,
            callers: h.finish() as u32,
        }
    }
}

/// What identifies a call site in a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SiteKey {
    /// Interned stack, 0 when the site is its caller address alone.
    pub stack: StackId,
    /// Return address of the call when no stack was captured, else 0.
    #[serde(serialize_with = "super::objects::hex")]
    pub caller: u64,
    /// The program's Python line that made the call.
    #[serde(flatten)]
    pub line: ProgramLine,
}

impl SiteKey {
    /// The site of a call from `caller` with `stack`, made by Python line `line`.
    pub fn of(caller: u64, stack: StackId, line: ProgramLine) -> Self {
        if stack != 0 {
            SiteKey {
                stack,
                caller: 0,
                line,
            }
        } else {
            SiteKey {
                stack: 0,
                caller,
                line,
            }
        }
    }
}

/// What the objects made by alike calls share: all of their [`Origin`] but its sequence number,
/// time and step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Call {
    pub(crate) caller: u64,
    pub(crate) context: u64,
    /// The pool an allocation came from (0 for the default pool, and for other objects).
    pub(crate) pool: u64,
    pub(crate) communicator: Option<u64>,
    pub(crate) module: Option<u32>,
    pub(crate) stack: StackId,
    pub(crate) py_stack: StackId,
    pub(crate) thread: u32,
    pub(crate) device: i32,
    pub(crate) site: SiteId,
    pub(crate) api: Api,
}

impl Call {
    /// The origin of an object this call made at `seq`, `time_ns`, in step `step`.
    pub(crate) fn origin(&self, seq: u64, time_ns: u64, step: u64) -> Origin {
        Origin {
            seq,
            time_ns,
            api: self.api,
            thread: self.thread,
            caller: self.caller,
            stack: self.stack,
            py_stack: self.py_stack,
            device: self.device,
            context: self.context,
            module: self.module,
            communicator: self.communicator,
            step,
            site: self.site,
            pool: self.pool,
        }
    }
}

/// The fields of an event that decide its call (the owner module also depends on the modules and
/// stacks known when it is applied), packed in words: caller, context, the two stacks, thread
/// and device, entry point. Words compare and hash faster than the fields one by one.
#[derive(Clone, Copy, Debug)]
struct EventKey([u64; 5]);

impl PartialEq for EventKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        // Without a branch per word (and without the `bcmp` call an array comparison becomes).
        let (a, b) = (&self.0, &other.0);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }
}

impl Eq for EventKey {}

impl EventKey {
    #[inline]
    fn of(e: &Event) -> Self {
        EventKey([
            e.caller,
            e.context,
            u64::from(e.stack) | u64::from(e.py_stack) << 32,
            u64::from(e.thread) | u64::from(e.device as u32) << 32,
            e.api as u64,
        ])
    }

    /// Where the key goes in the cache in front of the map.
    #[inline]
    fn slot(&self) -> usize {
        let w = &self.0;
        let mixed = w[0]
            ^ w[1].rotate_left(17)
            ^ w[2].rotate_left(43)
            ^ w[3].rotate_left(29)
            ^ w[4].rotate_left(53);
        let h = mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - RECENT_BITS)) as usize
    }
}

/// Log2 of the entries of the cache of recent event keys.
const RECENT_BITS: u32 = 11;

/// Log2 of the entries of the cache of recent frees' sites (24 bytes each: it stays in the
/// first-level cache).
const FREE_BITS: u32 = 8;

impl std::hash::Hash for EventKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for w in self.0 {
            state.write_u64(w);
        }
    }
}

/// An event's call, valid while the owner resolver stays at `generation`.
#[derive(Clone, Copy, Debug)]
struct Resolved {
    call: CallId,
    generation: u64,
    /// Whether the owner module is NCCL's (its objects then need attributing to a communicator).
    nccl: bool,
}

/// The call of an event, as [`SiteTable::call_of`] finds it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EventCall {
    pub(crate) id: CallId,
    /// Whether NCCL's library owns what the call made.
    pub(crate) nccl: bool,
}

/// Sites seen so far, with the first call seen at each (which names it in reports), and the
/// interned calls.
#[derive(Debug, Default)]
pub(crate) struct SiteTable {
    ids: FxHashMap<SiteKey, SiteId>,
    /// Per site: its key and the return address of the first call seen there.
    sites: Vec<(SiteKey, u64)>,
    /// Per site: the Python stack of its first call that had one (0: none yet), and whether
    /// calls there came from more than one Python stack. Sites key on the native stack, so a
    /// report names them by this Python line.
    python: Vec<(StackId, bool)>,
    calls: Vec<Call>,
    call_ids: FxHashMap<Call, CallId>,
    /// The device of each context seen with one, for calls made where the tracer could not
    /// tell the device (no context current on the thread) but did see the context.
    devices: FxHashMap<u64, i32>,
    /// The program line of each Python stack seen (see [`ProgramLine`]).
    lines: FxHashMap<StackId, ProgramLine>,
    /// The sites of each program line (code object and line), whatever the path to it: where
    /// one line has several, each is named with its path ([`crate::analysis::SiteName::via`]).
    at_line: FxHashMap<(u32, u32), Vec<SiteId>>,
    /// Recent (caller, stack, Python stack) of frees whose site is interned and whose Python
    /// stack is noted: a direct-mapped cache (see [`SiteTable::note_free`]).
    frees: DirectMapped<[u64; 3], { 1 << FREE_BITS }>,
    /// The key of the last free noted (in `frees` too), or zeros (no key).
    last_free: [u64; 3],
    by_event: FxHashMap<EventKey, Resolved>,
    /// A direct-mapped cache in front of `by_event`: most events find their call here with one
    /// multiplication and a comparison, without hashing and probing the map.
    recent: DirectMapped<Option<(EventKey, Resolved)>, { 1 << RECENT_BITS }>,
}

/// The entries of a direct-mapped cache: a fixed number, so that indexing by a slot made from
/// a hash's top bits needs no bounds check.
#[derive(Debug)]
struct DirectMapped<T, const N: usize>(Box<[T; N]>);

impl<T: Clone + Default, const N: usize> Default for DirectMapped<T, N> {
    fn default() -> Self {
        // Built on the heap: the array would not fit on a small stack.
        let entries = vec![T::default(); N].into_boxed_slice();
        match entries.try_into() {
            Ok(entries) => DirectMapped(entries),
            Err(_) => unreachable!("a vector of N entries is an array of N"),
        }
    }
}

impl SiteTable {
    /// The program line of Python stack `py_stack` (looked up once per stack).
    fn program_line(&mut self, python: &PythonStacks, py_stack: StackId) -> ProgramLine {
        if py_stack == 0 {
            return ProgramLine::NONE;
        }
        *self
            .lines
            .entry(py_stack)
            .or_insert_with(|| ProgramLine::of(python, py_stack))
    }

    /// The id of the site of a call from `caller` with `stack` and Python stack `py_stack`.
    pub(crate) fn intern(
        &mut self,
        python: &PythonStacks,
        caller: u64,
        stack: StackId,
        py_stack: StackId,
    ) -> SiteId {
        let line = self.program_line(python, py_stack);
        self.insert(SiteKey::of(caller, stack, line), caller, (0, false))
    }

    /// The id of the site `key`, added with its first caller and Python stack if new.
    fn insert(&mut self, key: SiteKey, first: u64, python: (StackId, bool)) -> SiteId {
        let next = self.sites.len() as SiteId;
        let id = *self.ids.entry(key).or_insert(next);
        if id == next {
            self.sites.push((key, first));
            self.python.push(python);
            if key.line.is_some() {
                let at = (key.line.code, key.line.line);
                self.at_line.entry(at).or_default().push(id);
            }
        }
        id
    }

    /// The sites of program line `line`, on every path to it, in the order first seen.
    pub(crate) fn at_line(&self, line: ProgramLine) -> &[SiteId] {
        self.at_line
            .get(&(line.code, line.line))
            .map_or(&[], Vec::as_slice)
    }

    /// Notes that a call at `site` came with Python stack `py_stack`.
    fn note_python(&mut self, site: SiteId, py_stack: StackId) {
        if py_stack == 0 {
            return;
        }
        if let Some(p) = self.python.get_mut(site as usize) {
            match p.0 {
                0 => p.0 = py_stack,
                first if first != py_stack => p.1 = true,
                _ => {}
            }
        }
    }

    /// The Python stack of the first call at `site` that had one, and whether the site's calls
    /// came from several Python stacks.
    pub(crate) fn python(&self, site: SiteId) -> Option<(StackId, bool)> {
        self.python.get(site as usize).copied().filter(|p| p.0 != 0)
    }

    /// The id of the site a call from `caller` with `stack` and Python stack `py_stack` has, if
    /// a call reached it.
    pub(crate) fn site_of(
        &self,
        python: &PythonStacks,
        caller: u64,
        stack: StackId,
        py_stack: StackId,
    ) -> Option<SiteId> {
        let line = match self.lines.get(&py_stack) {
            Some(&line) => line,
            None if py_stack == 0 => ProgramLine::NONE,
            None => ProgramLine::of(python, py_stack),
        };
        self.ids.get(&SiteKey::of(caller, stack, line)).copied()
    }

    /// The key of site `id`, and the return address of the first call there.
    pub(crate) fn get(&self, id: SiteId) -> Option<(SiteKey, u64)> {
        self.sites.get(id as usize).copied()
    }

    /// Sites seen.
    pub(crate) fn len(&self) -> usize {
        self.sites.len()
    }

    /// The entry point of the first call made at `site` (a scan of every call: for naming a
    /// site, not for the replay's path).
    pub(crate) fn first_api(&self, site: SiteId) -> Option<Api> {
        self.calls.iter().find(|c| c.site == site).map(|c| c.api)
    }

    /// Notes a free that succeeded: it makes nothing, so it needs no call, but its site is
    /// interned (site ids keep the order calls first reached them) and its Python stack noted,
    /// as for any call. Both are idempotent, so a free like a recent one (nearly every free: a
    /// program frees from a handful of places) is one lookup in a small cache.
    #[inline]
    pub(crate) fn note_free(
        &mut self,
        python: &PythonStacks,
        caller: u64,
        stack: StackId,
        py_stack: StackId,
    ) {
        // Bit 32 of word 1 (above the stack id) is set, so a zeroed entry matches nothing.
        let key = [caller, u64::from(stack) | 1 << 32, u64::from(py_stack)];
        // Most frees come from where the last one did (a caching allocator frees from one
        // place): compared first, without hashing, and the rest out of line, so that the key
        // is not kept in memory for it.
        let k = &self.last_free;
        if (k[0] ^ key[0]) | (k[1] ^ key[1]) | (k[2] ^ key[2]) == 0 {
            return;
        }
        self.note_other_free(python, caller, stack, py_stack);
    }

    /// [`SiteTable::note_free`] of a free from elsewhere than the last one.
    #[inline(never)]
    fn note_other_free(
        &mut self,
        python: &PythonStacks,
        caller: u64,
        stack: StackId,
        py_stack: StackId,
    ) {
        let key = [caller, u64::from(stack) | 1 << 32, u64::from(py_stack)];
        self.last_free = key;
        let h = (key[0] ^ key[1].rotate_left(23) ^ key[2].rotate_left(47))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (h >> (64 - FREE_BITS)) as usize;
        let k = &self.frees.0[slot];
        // Word by word: `key` was just stored a word at a time, and the array comparison loads
        // it back sixteen bytes at once, which waits for those stores to retire.
        if (k[0] ^ key[0]) | (k[1] ^ key[1]) | (k[2] ^ key[2]) == 0 {
            return;
        }
        self.note_new_free(python, slot, key, caller, stack, py_stack);
    }

    /// [`SiteTable::note_free`] for a free not in the cache: out of line, so that the way
    /// nearly every free takes keeps few registers to save.
    #[cold]
    #[inline(never)]
    fn note_new_free(
        &mut self,
        python: &PythonStacks,
        slot: usize,
        key: [u64; 3],
        caller: u64,
        stack: StackId,
        py_stack: StackId,
    ) {
        let site = self.intern(python, caller, stack, py_stack);
        self.note_python(site, py_stack);
        self.frees.0[slot] = key;
    }

    /// The call of event `e`, its site interned on the way. An event like one seen before, with
    /// no module or stack recorded since, finds it in a cache or with one hash lookup.
    #[inline]
    pub(crate) fn call_of(
        &mut self,
        e: &Event,
        owners: &mut OwnerResolver,
        python: &PythonStacks,
    ) -> EventCall {
        let key = EventKey::of(e);
        let generation = owners.generation();
        let slot = key.slot();
        if let Some((k, r)) = &self.recent.0[slot] {
            if *k == key && r.generation == generation {
                return EventCall {
                    id: r.call,
                    nccl: r.nccl,
                };
            }
        }
        self.call_not_cached(e, owners, python, slot, generation)
    }

    /// [`SiteTable::call_of`] for an event whose key the cache does not hold: out of line, so
    /// that the way nearly every event takes keeps few registers to save. It makes the key
    /// again: passed in, the key would be kept in memory on the way every event takes.
    #[cold]
    #[inline(never)]
    fn call_not_cached(
        &mut self,
        e: &Event,
        owners: &mut OwnerResolver,
        python: &PythonStacks,
        slot: usize,
        generation: u64,
    ) -> EventCall {
        let key = EventKey::of(e);
        if let Some(&r) = self.by_event.get(&key) {
            if r.generation == generation {
                self.remember(slot, key, r);
                return EventCall {
                    id: r.call,
                    nccl: r.nccl,
                };
            }
        }
        // A first event at the site interns it here, so site ids keep first-seen order.
        let site = self.intern(python, e.caller, e.stack, e.py_stack);
        self.note_python(site, e.py_stack);
        let module = owners.owner(e.caller, e.stack).module;
        let device = match e.device {
            d if d >= 0 => {
                if e.context != 0 {
                    self.devices.insert(e.context, d);
                }
                d
            }
            d => self.devices.get(&e.context).copied().unwrap_or(d),
        };
        let call = self.intern_call(Call {
            caller: e.caller,
            context: e.context,
            pool: 0,
            communicator: None,
            module,
            stack: e.stack,
            py_stack: e.py_stack,
            thread: e.thread,
            device,
            site,
            api: e.api,
        });
        let nccl = is_nccl(owners.modules(), module);
        let resolved = Resolved {
            call,
            generation,
            nccl,
        };
        self.by_event.insert(key, resolved);
        self.remember(slot, key, resolved);
        EventCall { id: call, nccl }
    }

    fn remember(&mut self, slot: usize, key: EventKey, r: Resolved) {
        self.recent.0[slot] = Some((key, r));
    }

    fn intern_call(&mut self, call: Call) -> CallId {
        let next = self.calls.len() as CallId;
        let id = *self.call_ids.entry(call).or_insert(next);
        if id == next {
            self.calls.push(call);
        }
        id
    }

    /// Call `id`.
    #[inline]
    pub(crate) fn call(&self, id: CallId) -> &Call {
        &self.calls[id as usize]
    }

    /// Call `id` with its objects coming from `pool`.
    #[inline]
    pub(crate) fn with_pool(&mut self, id: CallId, pool: u64) -> CallId {
        let call = self.calls[id as usize];
        if call.pool == pool {
            return id;
        }
        self.intern_call(Call { pool, ..call })
    }

    /// Call `id` with its objects attributed to communicator `comm`.
    pub(crate) fn with_communicator(&mut self, id: CallId, comm: u64) -> CallId {
        let call = self.calls[id as usize];
        self.intern_call(Call {
            communicator: Some(comm),
            ..call
        })
    }
}

/// Whether module `id` is NCCL's library.
fn is_nccl(modules: &ModuleMap, id: Option<u32>) -> bool {
    id.and_then(|id| modules.by_id(id))
        .is_some_and(|m| m.file_name().starts_with("libnccl"))
}

/// A site as a snapshot carries it: its key, the return address of its first call, and the
/// Python stack of its first call with one and whether there were several.
pub(crate) type SiteRow = (SiteKey, u64, (StackId, bool));

impl SiteTable {
    /// Every site in id order, for a snapshot.
    pub(crate) fn rows(&self) -> impl Iterator<Item = SiteRow> + '_ {
        self.sites
            .iter()
            .zip(&self.python)
            .map(|(&(key, first), &python)| (key, first, python))
    }

    /// The device of each context seen with one.
    pub(crate) fn context_devices(&self) -> impl Iterator<Item = (u64, i32)> + '_ {
        self.devices.iter().map(|(&c, &d)| (c, d))
    }

    /// Puts back a site from a snapshot; its id is the next one.
    pub(crate) fn restore_site(&mut self, (key, first, python): SiteRow) -> SiteId {
        self.insert(key, first, python)
    }

    /// Puts back a call from a snapshot.
    pub(crate) fn restore_call(&mut self, call: Call) -> CallId {
        self.intern_call(call)
    }

    /// Puts back the device a context was seen with.
    pub(crate) fn restore_context_device(&mut self, context: u64, device: i32) {
        self.devices.insert(context, device);
    }
}
