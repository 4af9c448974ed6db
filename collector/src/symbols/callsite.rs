//! Call sites at the user's choice of depth: the innermost Python line, the native function or
//! source line that asked (the first frame outside the CUDA libraries), its module, or the raw
//! site (interned stack, else caller address). One definition for every report and analysis that
//! groups memory by where it was allocated.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::stack::{FrameKind, StackFrame};
use super::{frames_label, ResolvedAddress, Symbolizer};
use crate::event::{Event, StackId};
use crate::live::{Accounting, LiveState, Origin, OwnerResolver};
use crate::module_map::is_tracer;
use crate::python::PythonStacks;
use crate::units::{base_name, line_label, module_offset};

/// Where one call came from, as an event or a live object's origin records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallRef {
    /// Return address of the intercepted call.
    pub caller: u64,
    /// Interned native stack, 0 when none.
    pub stack: StackId,
    /// Interned Python stack, 0 when none.
    pub py_stack: StackId,
}

impl From<&Event> for CallRef {
    fn from(e: &Event) -> Self {
        CallRef {
            caller: e.caller,
            stack: e.stack,
            py_stack: e.py_stack,
        }
    }
}

impl From<&Origin> for CallRef {
    fn from(o: &Origin) -> Self {
        CallRef {
            caller: o.caller,
            stack: o.stack,
            py_stack: o.py_stack,
        }
    }
}

/// The origin of a [`crate::live::LiveObject`], borrowed or put back together.
impl From<Cow<'_, Origin>> for CallRef {
    fn from(o: Cow<'_, Origin>) -> Self {
        CallRef::from(&*o)
    }
}

/// How deep a call site is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// The program's innermost Python frame (`file:line in function`), passing over installed
    /// packages and the standard library ([`PythonStacks::program_frame`]); calls without a
    /// Python stack fall back to [`Granularity::Function`].
    ///
    /// [`PythonStacks::program_frame`]: crate::python::PythonStacks::program_frame
    Python,
    /// The function of the first native frame outside the CUDA libraries.
    Function,
    /// That frame's source file and line; without line information, its function.
    Line,
    /// The module of that frame.
    Module,
    /// The interned native stack, else the caller address: no symbols needed.
    Site,
}

impl Granularity {
    /// The name used on the command line and in JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Granularity::Python => "python",
            Granularity::Function => "function",
            Granularity::Line => "line",
            Granularity::Module => "module",
            Granularity::Site => "site",
        }
    }
}

/// What a call site is at one granularity. Names, never module ids or load addresses, wherever
/// symbols allow, so keys from two traces of the same program compare equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallSiteKey {
    Python {
        file: Arc<str>,
        line: u32,
        function: Arc<str>,
    },
    Function {
        function: Arc<str>,
        module: Option<Arc<str>>,
    },
    Line {
        file: Arc<str>,
        line: u32,
    },
    /// A frame nothing names: its module and offset.
    Address {
        module: Option<Arc<str>>,
        offset: u64,
    },
    Module {
        module: Option<Arc<str>>,
    },
    Site {
        stack: StackId,
        caller: u64,
    },
}

/// A group's label: files by their base name, as every other output names a place (the stacks
/// under the table give the whole path).
impl fmt::Display for CallSiteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallSiteKey::Python {
                file,
                line,
                function,
            } => f.write_str(&line_label(file, *line, function)),
            CallSiteKey::Function { function, .. } => f.write_str(function),
            CallSiteKey::Line { file, line } => write!(f, "{}:{line}", base_name(file)),
            CallSiteKey::Address { module, offset } => {
                f.write_str(&module_offset(module.as_deref(), *offset))
            }
            CallSiteKey::Module { module } => f.write_str(module.as_deref().unwrap_or("(unknown)")),
            CallSiteKey::Site { stack: 0, caller } => write!(f, "{caller:#x}"),
            CallSiteKey::Site { stack, .. } => write!(f, "stack {stack}"),
        }
    }
}

/// Objects and bytes gathered per call, before calls are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CallTotals {
    count: u64,
    bytes: u64,
    host_bytes: u64,
    first_seq: u64,
    last_seq: u64,
}

impl Default for CallTotals {
    fn default() -> Self {
        CallTotals {
            count: 0,
            bytes: 0,
            host_bytes: 0,
            first_seq: u64::MAX,
            last_seq: 0,
        }
    }
}

/// Memory counted per call, ready to be grouped at any granularity: cheap to fill over
/// millions of objects or events, since symbols are only looked up once per distinct call when
/// grouping.
#[derive(Clone, Debug, Default)]
pub struct CallSiteTally {
    calls: FxHashMap<CallRef, CallTotals>,
}

impl CallSiteTally {
    /// An empty tally.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one object made by `call` (created at `seq`) holding `bytes` of device memory and
    /// `host_bytes` of host memory.
    pub fn add(&mut self, call: CallRef, bytes: u64, host_bytes: u64, seq: u64) {
        let t = self.calls.entry(call).or_default();
        t.count += 1;
        t.bytes += bytes;
        t.host_bytes += host_bytes;
        t.first_seq = t.first_seq.min(seq);
        t.last_seq = t.last_seq.max(seq);
    }

    /// The live device and host memory of `state` (the objects `LiveState::by_call_site` counts).
    pub(crate) fn of_live(state: &LiveState) -> Self {
        let mut tally = CallSiteTally::new();
        for o in state.live_objects() {
            if matches!(
                o.category.accounting(),
                Accounting::Device | Accounting::Host
            ) {
                let call = CallRef::from(&*o.origin);
                tally.add(call, o.device_bytes(), o.host_bytes(), o.origin.seq);
            }
        }
        tally
    }

    /// Distinct calls counted.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }
}

/// Memory grouped under one call-site key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallSiteGroup {
    #[serde(skip)]
    pub key: CallSiteKey,
    /// The key as text: `train.py:42 in forward`, `alloc_weights`, `model.c:17`, `libnccl.so.2`,
    /// or `module+0xOFFSET` where nothing names the frame.
    pub label: String,
    /// The frame the key was taken from, for the group's largest call: its function, file and
    /// line (a Python frame for `python` keys, else the first native frame outside the CUDA
    /// libraries).
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// File name of the owner module of the group's largest call.
    pub module: Option<String>,
    /// Objects counted.
    pub count: u64,
    /// Device memory.
    pub bytes: u64,
    /// Host memory.
    pub host_bytes: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    /// Distinct calls (caller, native stack, Python stack) in the group.
    pub calls: u64,
    /// The call holding the most memory in the group: the one whose stack stands for it.
    #[serde(skip)]
    pub example: CallRef,
    #[serde(skip)]
    example_totals: (u64, u64, u64),
}

/// Names calls: keys at a granularity, and mixed Python + native stacks, from one trace's
/// modules and stacks. Keys are cached per call, addresses per module.
pub struct Attribution<'a> {
    owners: &'a OwnerResolver,
    python: &'a PythonStacks,
    symbols: &'a mut Symbolizer,
    keys: FxHashMap<(Granularity, CallRef), CallSiteKey>,
}

impl<'a> Attribution<'a> {
    /// Attribution over a trace's modules and native stacks (`owners`) and Python stacks.
    pub fn new(
        owners: &'a OwnerResolver,
        python: &'a PythonStacks,
        symbols: &'a mut Symbolizer,
    ) -> Self {
        Attribution {
            owners,
            python,
            symbols,
            keys: FxHashMap::default(),
        }
    }

    /// Attribution over what `state` has read.
    pub fn of_state(state: &'a LiveState, symbols: &'a mut Symbolizer) -> Self {
        Attribution::new(state.owners(), state.python_stacks(), symbols)
    }

    /// The symbolizer, for the sources it used.
    pub fn symbolizer(&self) -> &Symbolizer {
        self.symbols
    }

    /// Resolves one address of this trace.
    pub fn resolve(&mut self, address: u64) -> ResolvedAddress {
        self.symbols.resolve(self.owners.modules(), address)
    }

    /// The first native frame of `call` outside the CUDA libraries (the caller when there is
    /// none), resolved.
    pub fn owner_frame(&mut self, call: CallRef) -> ResolvedAddress {
        let owner = self.owners.resolve(call.caller, call.stack);
        self.resolve(owner.frame)
    }

    /// The key of `call` at granularity `by`.
    pub fn key(&mut self, by: Granularity, call: CallRef) -> CallSiteKey {
        if let Some(k) = self.keys.get(&(by, call)) {
            return k.clone();
        }
        let key = self.compute_key(by, call);
        self.keys.insert((by, call), key.clone());
        key
    }

    fn compute_key(&mut self, by: Granularity, call: CallRef) -> CallSiteKey {
        match by {
            Granularity::Site => CallSiteKey::Site {
                stack: call.stack,
                caller: if call.stack != 0 { 0 } else { call.caller },
            },
            Granularity::Module => {
                let owner = self.owners.resolve(call.caller, call.stack);
                let module = owner
                    .module
                    .and_then(|id| self.owners.module_name(id))
                    .map(Arc::from);
                CallSiteKey::Module { module }
            }
            Granularity::Python => match self.python.program_frame(call.py_stack) {
                Some(frame) => CallSiteKey::Python {
                    file: Arc::from(frame.file.unwrap_or("<unknown>")),
                    line: frame.line,
                    function: Arc::from(
                        frame
                            .function
                            .map_or_else(|| format!("<code {}>", frame.code), str::to_string),
                    ),
                },
                None => self.key(Granularity::Function, call),
            },
            Granularity::Line => {
                let frame = self.owner_frame(call);
                match frame.innermost() {
                    Some(s) if s.file.is_some() && s.line.is_some() => CallSiteKey::Line {
                        file: s.file.clone().unwrap_or_else(|| Arc::from("")),
                        line: s.line.unwrap_or(0),
                    },
                    _ => native_key(&frame),
                }
            }
            Granularity::Function => native_key(&self.owner_frame(call)),
        }
    }

    /// The mixed stack of `call`: its Python frames innermost first, then its native frames
    /// innermost first (inlined frames included), CUDA-library frames and all, but none of the
    /// tracer's own: a call made inside an intercepted call (NCCL allocating inside
    /// `ncclCommInitRank`) has the outer hook's frames between the library and its caller, and
    /// they say nothing about the program. A stack of nothing but tracer frames is kept whole.
    pub fn stack(&mut self, call: CallRef) -> Vec<StackFrame> {
        let mut out: Vec<StackFrame> = self
            .python
            .frames(call.py_stack)
            .map(|f| StackFrame {
                kind: FrameKind::Python,
                function: Some(
                    f.function
                        .map_or_else(|| format!("<code {}>", f.code), str::to_string),
                ),
                file: Some(f.file.unwrap_or("<unknown>").to_string()),
                line: Some(f.line),
                module: None,
                offset: None,
                inlined: false,
            })
            .collect();
        let owners = self.owners;
        let addresses = match owners.stack(call.stack) {
            Some(frames) if !frames.is_empty() => frames,
            _ => std::slice::from_ref(&call.caller),
        };
        let modules = owners.modules();
        let in_tracer = |a: &u64| modules.find(*a).is_some_and(|m| is_tracer(m.file_name()));
        let all_tracer = addresses.iter().all(in_tracer);
        for address in addresses {
            if in_tracer(address) && !all_tracer {
                continue;
            }
            let resolved = self.resolve(*address);
            out.extend(native_frames(&resolved));
        }
        out
    }

    /// Groups a tally at granularity `by`, largest first (device bytes, then host bytes, then
    /// objects).
    pub fn group(&mut self, by: Granularity, tally: &CallSiteTally) -> Vec<CallSiteGroup> {
        let mut groups: HashMap<CallSiteKey, CallSiteGroup> = HashMap::new();
        for (&call, t) in &tally.calls {
            let key = self.key(by, call);
            let g = groups.entry(key.clone()).or_insert_with(|| CallSiteGroup {
                label: key.to_string(),
                key,
                function: None,
                file: None,
                line: None,
                module: None,
                count: 0,
                bytes: 0,
                host_bytes: 0,
                first_seq: u64::MAX,
                last_seq: 0,
                calls: 0,
                example: call,
                example_totals: (0, 0, 0),
            });
            g.count += t.count;
            g.bytes += t.bytes;
            g.host_bytes += t.host_bytes;
            g.first_seq = g.first_seq.min(t.first_seq);
            g.last_seq = g.last_seq.max(t.last_seq);
            g.calls += 1;
            // The largest call stands for the group; ties go to the smaller call, so the choice
            // does not depend on hash order.
            let mine = (t.bytes, t.host_bytes, t.count);
            if g.calls == 1 || (mine, Reverse(call)) > (g.example_totals, Reverse(g.example)) {
                g.example = call;
                g.example_totals = mine;
            }
        }
        let mut groups: Vec<CallSiteGroup> = groups.into_values().collect();
        for g in &mut groups {
            self.describe(g);
        }
        if by == Granularity::Site {
            self.name_sites(&mut groups);
        }
        groups.sort_by(|a, b| {
            (b.bytes, b.host_bytes, b.count)
                .cmp(&(a.bytes, a.host_bytes, a.count))
                .then(a.first_seq.cmp(&b.first_seq))
                .then(a.key.cmp(&b.key))
        });
        groups
    }

    /// Live device and host memory of `state` grouped at granularity `by`.
    pub fn group_live(&mut self, state: &LiveState, by: Granularity) -> Vec<CallSiteGroup> {
        self.group(by, &CallSiteTally::of_live(state))
    }

    /// Names groups of one site each as every output names a site ([`frames_label`]: the
    /// program's line, else the function that asked), from the group's largest call, else by its
    /// recorded `module+offset`; sites that read the same wear their stack (`[stack 17]`), the
    /// tag the report's tables give them when nothing else tells them apart.
    fn name_sites(&mut self, groups: &mut [CallSiteGroup]) {
        for g in groups.iter_mut() {
            let frames = self.stack(g.example);
            let owner = self.owner_frame(g.example);
            g.label = frames_label(&frames)
                .unwrap_or_else(|| module_offset(owner.module_name.as_deref(), owner.offset));
        }
        let mut seen: HashMap<String, u32> = HashMap::new();
        for g in groups.iter() {
            *seen.entry(g.label.clone()).or_default() += 1;
        }
        for g in groups.iter_mut() {
            if let CallSiteKey::Site { stack, .. } = g.key {
                if seen[&g.label] > 1 {
                    g.label = format!("{} [stack {stack}]", g.label);
                }
            }
        }
    }

    /// Fills the frame and module of a group from its example call.
    fn describe(&mut self, g: &mut CallSiteGroup) {
        let owner = self.owner_frame(g.example);
        g.module = owner.module_name.as_deref().map(str::to_string);
        if matches!(g.key, CallSiteKey::Python { .. }) {
            if let Some(f) = self.python.program_frame(g.example.py_stack) {
                g.function = f.function.map(str::to_string);
                g.file = f.file.map(str::to_string);
                g.line = Some(f.line);
                return;
            }
        }
        if let Some(s) = owner.innermost() {
            g.function = s.function.as_deref().map(str::to_string);
            g.file = s.file.as_deref().map(str::to_string);
            g.line = s.line;
        }
    }
}

/// The function key of a resolved frame, else its address.
fn native_key(frame: &ResolvedAddress) -> CallSiteKey {
    match frame.innermost().and_then(|s| s.function.clone()) {
        Some(function) => CallSiteKey::Function {
            function,
            module: frame.module_name.clone(),
        },
        None => CallSiteKey::Address {
            module: frame.module_name.clone(),
            offset: frame.offset,
        },
    }
}

/// The stack frames of one resolved address: its source frames, or one bare frame.
fn native_frames(resolved: &ResolvedAddress) -> Vec<StackFrame> {
    let module = resolved.module_name.as_deref().map(str::to_string);
    if resolved.frames.is_empty() {
        return vec![StackFrame {
            kind: FrameKind::Native,
            function: None,
            file: None,
            line: None,
            module,
            offset: Some(resolved.offset),
            inlined: false,
        }];
    }
    resolved
        .frames
        .iter()
        .map(|s| StackFrame {
            kind: FrameKind::Native,
            function: s.function.as_deref().map(str::to_string),
            file: s.file.as_deref().map(str::to_string),
            line: s.line,
            module: module.clone(),
            offset: Some(resolved.offset),
            inlined: s.inlined,
        })
        .collect()
}
