//! The calling thread's Python stack read straight from the interpreter's memory, for threads that
//! released the GIL before calling CUDA (PyTorch's `torch.empty`, every `ctypes.CDLL` call).
//!
//! Why this is sound without the GIL: the thread is inside our hook, called from C code that was
//! called from Python, so its own chain of `_PyInterpreterFrame`s is parked: only this thread
//! pushes or pops it. The frames keep their code objects alive, and the fields read from a code
//! object (`co_filename`, `co_qualname`, `co_name`, `co_firstlineno`, `co_linetable`, the size
//! and first traceable instruction) and the strings and bytes they point to never change after
//! creation. Nothing here calls into the interpreter except two functions that only read
//! (`PyGILState_GetThisThreadState`, `PyThreadState_GetInterpreter`); nothing is written, no
//! reference count is touched, nothing is allocated in Python's heaps.
//!
//! What keeps it from producing garbage: the layout is checked once against the running
//! interpreter ([`layout::Runtime::find`]); every pointer followed must be plausible, every code
//! object must have `PyCode_Type` as its type, every string `PyUnicode_Type`, the line table
//! `PyBytes_Type`, the instruction pointer must lie inside the code; the chain is walked at most
//! `2 * depth + 16` steps. On any mismatch the walk stops and keeps what it had.
//!
//! Naming without a reference: a code object is named once (file, qualified name, first line,
//! read from memory) and the name kept under its *fingerprint*: its address, `co_firstlineno`,
//! its size, the address and cached hash of its `co_filename` and `co_qualname` strings, and the
//! address and length of its line table. The tracer holds no reference, so a code object can die
//! and another take its address; the fingerprint, re-read on every capture (a few loads from
//! lines the interpreter just touched; cached pointers are only compared, never followed), tells
//! them apart unless the newcomer also has the same first line, size and strings (same objects,
//! same hashes: the same name) and a line table of the same length at the same address. Only then
//! could a cached *line* be stale — a function regenerated under the same name and file with
//! lines moved inside it, by code generation that frees the old one first; the name is right
//! even then. Names are deduplicated by content, so a code object renamed after a fingerprint
//! change (a string's hash computed meanwhile by another thread) keeps its id. Call sites (code
//! address, instruction) are cached with their id and line, checked against a hash of the
//! fingerprint, in a direct-mapped table: a hot call site costs one cache line per frame.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::MaybeUninit;
use std::sync::OnceLock;

use vramtrace_collector::format::PyFrame;

use super::layout::{self, plausible, rd, Layout, Runtime};
use super::{linetable, Codes, CODES};

/// Call sites remembered (a power of two): direct-mapped, 32 bytes each, so a look-up is one
/// cache line whatever the interpreter did to the caches since the last capture.
const SITES: usize = 4096;
/// Fingerprints remembered past which the table starts over (a program that keeps compiling new
/// code); names stay, deduplicated by content.
const MAX_FINGERPRINTS: usize = 1 << 16;
/// Longest string or line table read, in bytes.
const MAX_BYTES: usize = 1 << 20;

static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();

/// What must be unchanged for a cached name to still belong to the code object at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Fingerprint {
    code: usize,
    first_line: i32,
    /// Instructions, in code units.
    units: isize,
    file: usize,
    file_hash: isize,
    qualname: usize,
    qualname_hash: isize,
    /// `co_linetable` and its length.
    table: usize,
    table_len: usize,
}

/// A call site seen before: the frame it gave, under a hash of the fingerprint then.
#[derive(Clone, Copy)]
struct Site {
    code: usize,
    index: isize,
    check: u64,
    frame: PyFrame,
}

impl Site {
    const EMPTY: Site = Site {
        code: 0,
        index: 0,
        check: 0,
        frame: PyFrame { code: 0, line: 0 },
    };
}

/// FxHash (rustc's): a multiply and a rotate per word; keys here are addresses, not attacker
/// controlled, and SipHash would cost more than the rest of a frame.
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type Fx = BuildHasherDefault<FxHasher>;

/// The raw walk's caches, kept inside the code table (one lock for both).
pub(super) struct RawNames {
    /// Call sites by (code address, instruction index); code address 0 never matches. Allocated
    /// on first use (128 KiB), so processes without Python pay nothing.
    sites: Option<Box<[Site]>>,
    /// Fingerprint → code id.
    ids: Option<HashMap<Fingerprint, u32, Fx>>,
}

impl RawNames {
    pub(super) const fn new() -> RawNames {
        RawNames {
            sites: None,
            ids: None,
        }
    }
}

impl Fingerprint {
    /// A 64-bit summary for the call-site check: independent multiplies by distinct odd constants
    /// (no chain of dependent steps), so it costs little more than the loads that fed it.
    #[inline]
    fn check(&self) -> u64 {
        let f = [
            self.code as u64,
            self.first_line as u64,
            self.units as u64,
            self.file as u64,
            self.file_hash as u64,
            self.qualname as u64,
            self.qualname_hash as u64,
            self.table as u64,
            self.table_len as u64,
        ];
        const K: [u64; 9] = [
            0x9e37_79b9_7f4a_7c15,
            0xc2b2_ae3d_27d4_eb4f,
            0x1656_67b1_9e37_79f9,
            0x85eb_ca77_c2b2_ae63,
            0x27d4_eb2f_1656_67c5,
            0xff51_afd7_ed55_8ccd,
            0xc4ce_b9fe_1a85_ec53,
            0x5851_f42d_4c95_7f2d,
            0x1405_7b7e_f767_814f,
        ];
        f.iter()
            .zip(K)
            .fold(0, |h, (&v, k)| h ^ v.wrapping_mul(k).rotate_left(31))
    }
}

/// The call-site slot of instruction `index` of the code object at `code`.
#[inline]
fn slot(code: usize, index: isize) -> usize {
    let h = (code as u64 ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h >> (64 - SITES.trailing_zeros())) as usize
}

/// Whether the running interpreter is one whose frames can be read directly.
pub(super) fn available() -> bool {
    RUNTIME.get_or_init(Runtime::find).is_some()
}

/// Fills `out` with the calling thread's Python stack, innermost first; returns how many frames
/// it filled: 0 when the thread has no Python frames or the interpreter is not one whose memory
/// we can read.
///
/// # Safety
/// The interpreter is initialised and not finalizing, and the calling thread is not running
/// Python right now (it is in a hook, called from C), so its frames are not moving.
pub(super) unsafe fn capture(out: &mut [MaybeUninit<PyFrame>]) -> usize {
    let Some(rt) = RUNTIME.get_or_init(Runtime::find).as_ref() else {
        return 0;
    };
    // SAFETY: reads this thread's thread-local state; NULL when it has no Python thread state.
    let tstate = unsafe { (rt.this_thread_state)() } as usize;
    // SAFETY: a live thread state of this thread (the caller's contract).
    let Some(frame) = (unsafe { current_frame(rt, tstate) }) else {
        return 0;
    };
    let mut codes = CODES.lock();
    // SAFETY: `frame` is this thread's innermost frame; the chain is parked (caller's contract).
    unsafe { walk(rt, &mut codes, frame, out) }
}

/// The innermost frame of thread state `tstate`, after checking that the state looks like one.
///
/// # Safety
/// `tstate` is NULL or a live `PyThreadState`.
unsafe fn current_frame(rt: &Runtime, tstate: usize) -> Option<usize> {
    let l = rt.layout;
    if !plausible(tstate) {
        return None;
    }
    // SAFETY: `tstate` is a live thread state; `interp` lies inside it in every layout, and
    // `PyThreadState_GetInterpreter` only reads it.
    let same = unsafe {
        rd::<usize>(tstate + l.tstate_interp) == (rt.thread_interp)(tstate as _) as usize
    };
    if !same {
        return None;
    }
    let frame = match l.tstate_cframe {
        Some(at) => {
            // SAFETY: offsets of this version's `PyThreadState`; `cframe` points at a
            // `_PyCFrame` on this thread's C stack (or inside the thread state) while set.
            let cframe = unsafe { rd::<usize>(tstate + at) };
            if !plausible(cframe) {
                return None;
            }
            // SAFETY: as above.
            unsafe { rd::<usize>(cframe + l.current_frame) }
        }
        // SAFETY: as above.
        None => unsafe { rd::<usize>(tstate + l.current_frame) },
    };
    (frame != 0).then_some(frame)
}

/// Walks the frame chain from `frame`, filling `out` from the start; returns how many frames it
/// filled.
///
/// # Safety
/// `frame` is the innermost `_PyInterpreterFrame` of the calling thread, whose chain is parked.
unsafe fn walk(
    rt: &Runtime,
    codes: &mut Codes,
    mut frame: usize,
    out: &mut [MaybeUninit<PyFrame>],
) -> usize {
    let l = rt.layout;
    let mut n = 0;
    let mut steps = 2 * out.len() + 16;
    while frame != 0 && n < out.len() && steps > 0 {
        steps -= 1;
        if !plausible(frame) {
            break;
        }
        // SAFETY: `frame` is a frame of the parked chain (its link was read from the previous
        // one, or from the thread state); these offsets lie inside `_PyInterpreterFrame`.
        let (owner, previous, code, instr) = unsafe {
            (
                rd::<u8>(frame + l.frame_owner),
                rd::<usize>(frame + l.frame_previous),
                rd::<usize>(frame + l.frame_code),
                rd::<usize>(frame + l.frame_instr),
            )
        };
        frame = previous;
        if Some(owner) == l.owned_by_cstack {
            continue;
        }
        // SAFETY: a frame's code object is alive while the frame is; its header is readable
        // once the address is plausible, and the type is checked before any other field.
        if !plausible(code) || unsafe { rd::<usize>(code + layout::OB_TYPE) } != rt.code_type {
            break;
        }
        // SAFETY: `code` is a code object (checked): these fields lie inside it.
        let (units, first_traceable) = unsafe {
            (
                rd::<isize>(code + layout::OB_SIZE),
                rd::<i32>(code + l.code_firsttraceable) as isize,
            )
        };
        // The instruction in code units; -1 for a frame that has not started (3.11, 3.12).
        let index = (instr as isize).wrapping_sub((code + l.code_adaptive) as isize) >> 1;
        if index < -1 || index >= units {
            break;
        }
        if owner != l.owned_by_generator && index < first_traceable {
            // Incomplete: still setting up its cells (`_PyFrame_IsIncomplete`), not shown.
            continue;
        }
        // SAFETY: `code` is a live code object; `index` lies inside its instructions.
        match unsafe { site(rt, codes, code, units, index) } {
            Some(f) => {
                out[n].write(f);
                n += 1;
            }
            None => break,
        }
    }
    n
}

/// The frame for instruction `index` of `code`: from the cache when the fingerprint still
/// matches, else named and located from memory.
///
/// # Safety
/// `code` is a live code object.
unsafe fn site(
    rt: &Runtime,
    codes: &mut Codes,
    code: usize,
    units: isize,
    index: isize,
) -> Option<PyFrame> {
    // SAFETY: the caller's contract.
    let fingerprint = unsafe { fingerprint(rt, code, units) }?;
    let check = fingerprint.check();
    let slot = slot(code, index);
    let sites = codes
        .raw
        .sites
        .get_or_insert_with(|| vec![Site::EMPTY; SITES].into_boxed_slice());
    let site = &sites[slot];
    if site.code == code && site.index == index && site.check == check {
        return Some(site.frame);
    }
    let known = codes
        .raw
        .ids
        .as_ref()
        .and_then(|ids| ids.get(&fingerprint).copied());
    let id = match known {
        Some(id) => id,
        None => {
            // SAFETY: as above; the fingerprint checked the strings' types.
            let (file, function) = unsafe { names(rt, code, &fingerprint) };
            let id = codes.define(file, function, fingerprint.first_line.max(0) as u32);
            let ids = codes.raw.ids.get_or_insert_with(HashMap::default);
            if ids.len() >= MAX_FINGERPRINTS {
                ids.clear();
            }
            ids.insert(fingerprint, id);
            id
        }
    };
    // SAFETY: the fingerprint checked that `table` is a bytes object of `table_len` bytes, held
    // by the live code object; bytes objects never change.
    let table = unsafe {
        std::slice::from_raw_parts(
            (fingerprint.table + layout::BYTES_SVAL) as *const u8,
            fingerprint.table_len,
        )
    };
    let line = linetable::line_at(table, fingerprint.first_line, index).unwrap_or(0);
    let frame = PyFrame { code: id, line };
    if let Some(sites) = codes.raw.sites.as_mut() {
        sites[slot] = Site {
            code,
            index,
            check,
            frame,
        };
    }
    Some(frame)
}

/// Reads the fingerprint of a code object of `units` code units; `None` when its strings are not
/// strings or its line table not bytes.
///
/// # Safety
/// `code` is a live code object.
unsafe fn fingerprint(rt: &Runtime, code: usize, units: isize) -> Option<Fingerprint> {
    let l = rt.layout;
    // SAFETY: fields of a live code object.
    let (first_line, file, qualname, table) = unsafe {
        (
            rd::<i32>(code + l.code_firstlineno),
            rd::<usize>(code + l.code_filename),
            rd::<usize>(code + l.code_qualname),
            rd::<usize>(code + l.code_linetable),
        )
    };
    // SAFETY: the code object holds references to all three, so they are alive; each one's type
    // is checked before its own fields are read.
    let (file_hash, qualname_hash, table_len) = unsafe {
        (
            str_hash(rt, file)?,
            str_hash(rt, qualname)?,
            bytes_len(rt, table)?,
        )
    };
    Some(Fingerprint {
        code,
        first_line,
        units,
        file,
        file_hash,
        qualname,
        qualname_hash,
        table,
        table_len,
    })
}

/// The cached hash of a string (-1 until computed); `None` when `obj` is not a string.
///
/// # Safety
/// `obj` is NULL or a live object.
unsafe fn str_hash(rt: &Runtime, obj: usize) -> Option<isize> {
    // SAFETY: the caller's contract; the type is checked before the string's own field.
    unsafe {
        (plausible(obj) && rd::<usize>(obj + layout::OB_TYPE) == rt.unicode_type)
            .then(|| rd::<isize>(obj + layout::STR_HASH))
    }
}

/// File and function name (qualified name, else name) of a code object.
///
/// # Safety
/// `code` is a live code object with fingerprint `fp`.
unsafe fn names(rt: &Runtime, code: usize, fp: &Fingerprint) -> (String, String) {
    // SAFETY: both strings are alive (held by the code object) and of type str (fingerprint).
    let (file, qualname) = unsafe {
        (
            read_str(rt.layout, fp.file),
            read_str(rt.layout, fp.qualname),
        )
    };
    let function = if qualname.is_empty() {
        // SAFETY: `co_name` is a field of the live code object; typed-checked before reading.
        unsafe {
            let name = rd::<usize>(code + rt.layout.code_name);
            if str_hash(rt, name).is_some() {
                read_str(rt.layout, name)
            } else {
                String::new()
            }
        }
    } else {
        qualname
    };
    (file, function)
}

/// The text of a `str` object, read from memory: compact strings (all that code objects hold)
/// in any of the three kinds; anything else becomes `<?>`.
///
/// # Safety
/// `obj` is a live object of type `str`.
unsafe fn read_str(l: &Layout, obj: usize) -> String {
    // SAFETY: header fields of a live `PyASCIIObject`.
    let (length, state) = unsafe {
        (
            rd::<isize>(obj + layout::STR_LENGTH),
            rd::<u32>(obj + layout::STR_STATE),
        )
    };
    let Ok(length) = usize::try_from(length) else {
        return "<?>".into();
    };
    if state & layout::STATE_COMPACT == 0 || length > MAX_BYTES {
        return "<?>".into();
    }
    if state & layout::STATE_ASCII != 0 {
        // SAFETY: a compact ASCII string's `length` bytes follow its `PyASCIIObject`.
        let bytes =
            unsafe { std::slice::from_raw_parts((obj + l.ascii_data) as *const u8, length) };
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let data = obj + l.compact_data;
    // SAFETY: a compact string's `length` code points of `kind` bytes each follow its
    // `PyCompactUnicodeObject`.
    unsafe {
        match (state >> layout::STATE_KIND_SHIFT) & 7 {
            1 => decode::<u8>(data, length),
            2 => decode::<u16>(data, length),
            4 => decode::<u32>(data, length),
            _ => "<?>".into(),
        }
    }
}

/// `length` code points of type `T` at `data`.
///
/// # Safety
/// `data` is readable for `length` values of `T`, aligned.
unsafe fn decode<T: Copy + Into<u32>>(data: usize, length: usize) -> String {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(data as *const T, length) }
        .iter()
        .map(|&c| char::from_u32(c.into()).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// The length of a bytes object; `None` when `obj` is not one (or is implausibly long).
///
/// # Safety
/// `obj` is NULL or a live object.
unsafe fn bytes_len(rt: &Runtime, obj: usize) -> Option<usize> {
    // SAFETY: the caller's contract; the type is checked before the size is read.
    let len = unsafe {
        if !plausible(obj) || rd::<usize>(obj + layout::OB_TYPE) != rt.bytes_type {
            return None;
        }
        rd::<isize>(obj + layout::OB_SIZE)
    };
    usize::try_from(len).ok().filter(|&n| n <= MAX_BYTES)
}

#[cfg(test)]
#[path = "raw_tests.rs"]
mod tests;
