//! Python stacks: the Python frames (file, function, line) of the thread making a CUDA call,
//! found at run time — the tracer never links libpython and works without Python at all.
//!
//! Two ways in, by whether the calling thread holds the GIL:
//! - it does (a `ctypes.PyDLL` call, a C extension that keeps the GIL): through the CPython C API.
//!   A pending Python exception is saved and restored around the walk; the garbage collector is
//!   paused during it, because Python 3.11 materialises frame objects on demand and an allocation
//!   there could otherwise run arbitrary finalizers inside a CUDA call. Code objects named this way
//!   are kept alive (one reference each), so their address never names another function;
//! - it does not (PyTorch releases the GIL before its allocator runs, so does `ctypes.CDLL`):
//!   by reading the thread's own parked frame chain from memory ([`raw`], with the per-version
//!   layouts of [`layout`] and the line table decoder of [`linetable`]). The GIL is never taken
//!   and no profiler is installed: both would change the program.
//!
//! Code objects are named once (file, qualified name, first line) and referred to by id; equal
//! names share an id whichever way they were found.
//!
//! A thread without Python frames (PyTorch's autograd threads, a library's own C threads) gets
//! the last Python stack captured on any thread, flagged as inferred.
//!
//! Stacks are interned where they are captured ([`intern`], in `capture::intern::PYTHON`): an
//! event carries the id. Knowing the interpreter's evaluation loop ([`interpreter`]) also lets the
//! native walk stop where the Python frames take over.

mod layout;
mod linetable;
mod raw;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use vramtrace_collector::format::{PyCode, PyFrame};

use super::intern::PYTHON;
use super::spin::SpinLock;
use super::stack::StopAt;
use crate::resolve::dl;

type Obj = *mut c_void;

/// The CPython functions the walk uses.
struct PyApi {
    is_initialized: unsafe extern "C" fn() -> c_int,
    is_finalizing: Option<unsafe extern "C" fn() -> c_int>,
    gil_check: unsafe extern "C" fn() -> c_int,
    this_thread_state: unsafe extern "C" fn() -> Obj,
    thread_state_frame: unsafe extern "C" fn(Obj) -> Obj,
    frame_back: unsafe extern "C" fn(Obj) -> Obj,
    frame_code: unsafe extern "C" fn(Obj) -> Obj,
    frame_line: unsafe extern "C" fn(Obj) -> c_int,
    inc_ref: unsafe extern "C" fn(Obj),
    dec_ref: unsafe extern "C" fn(Obj),
    get_attr: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    utf8: unsafe extern "C" fn(Obj) -> *const c_char,
    as_long: unsafe extern "C" fn(Obj) -> c_long,
    err_fetch: unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj),
    err_restore: unsafe extern "C" fn(Obj, Obj, Obj),
    err_clear: unsafe extern "C" fn(),
    gc_disable: Option<unsafe extern "C" fn() -> c_int>,
    gc_enable: Option<unsafe extern "C" fn() -> c_int>,
}

fn sym(name: &CStr) -> Option<usize> {
    // SAFETY: RTLD_DEFAULT and a NUL-terminated name; python3 exports its C API from the
    // executable (or libpython when loaded globally).
    unsafe { dl::real_dlsym(std::ptr::null_mut(), name.as_ptr()) }
}

macro_rules! need {
    ($name:literal) => {
        // SAFETY: the CPython function of that name has this signature in every 3.9+ release.
        unsafe { std::mem::transmute::<usize, _>(sym($name)?) }
    };
}

macro_rules! maybe {
    ($name:literal) => {
        // SAFETY: as above, for functions some versions lack.
        sym($name).map(|p| unsafe { std::mem::transmute::<usize, _>(p) })
    };
}

impl PyApi {
    // Each transmute's target is the type of the field it fills, declared once in `PyApi`.
    #[allow(clippy::missing_transmute_annotations)]
    fn find() -> Option<PyApi> {
        Some(PyApi {
            is_initialized: need!(c"Py_IsInitialized"),
            is_finalizing: maybe!(c"Py_IsFinalizing").or(maybe!(c"_Py_IsFinalizing")),
            gil_check: need!(c"PyGILState_Check"),
            this_thread_state: need!(c"PyGILState_GetThisThreadState"),
            thread_state_frame: need!(c"PyThreadState_GetFrame"),
            frame_back: need!(c"PyFrame_GetBack"),
            frame_code: need!(c"PyFrame_GetCode"),
            frame_line: need!(c"PyFrame_GetLineNumber"),
            inc_ref: need!(c"Py_IncRef"),
            dec_ref: need!(c"Py_DecRef"),
            get_attr: need!(c"PyObject_GetAttrString"),
            utf8: need!(c"PyUnicode_AsUTF8"),
            as_long: need!(c"PyLong_AsLong"),
            err_fetch: need!(c"PyErr_Fetch"),
            err_restore: need!(c"PyErr_Restore"),
            err_clear: need!(c"PyErr_Clear"),
            gc_disable: maybe!(c"PyGC_Disable"),
            gc_enable: maybe!(c"PyGC_Enable"),
        })
    }
}

static API: OnceLock<Option<PyApi>> = OnceLock::new();

/// The deepest Python stack recorded (`VRAMTRACE_PYTHON_DEPTH` allows up to 256).
const MAX_DEPTH: usize = 256;

/// Code objects seen so far and each id's names.
struct Codes {
    /// Code objects named through the C API (and kept alive): pointer → id.
    ids: Option<HashMap<usize, u32>>,
    /// (file, function, first line) → id.
    by_name: Option<HashMap<(String, String, u32), u32>>,
    /// Index `id - 1`: the names of code id `id`.
    defs: Vec<PyCode>,
    /// The raw walk's fingerprints and call sites.
    raw: raw::RawNames,
}

impl Codes {
    /// The id of a function by its names, giving it one on first sight.
    fn define(&mut self, file: String, function: String, first_line: u32) -> u32 {
        let by_name = self.by_name.get_or_insert_with(HashMap::new);
        let key = (file, function, first_line);
        if let Some(&id) = by_name.get(&key) {
            return id;
        }
        let id = self.defs.len() as u32 + 1;
        self.defs.push(PyCode {
            id,
            file: key.0.clone(),
            function: key.1.clone(),
            first_line,
        });
        by_name.insert(key, id);
        id
    }
}

static CODES: SpinLock<Codes> = SpinLock::new(Codes {
    ids: None,
    by_name: None,
    defs: Vec::new(),
    raw: raw::RawNames::new(),
});

/// The id of the last stack captured on any thread, for threads that run no Python themselves
/// (0: none yet).
static LAST: AtomicU32 = AtomicU32::new(0);

/// `pthread_atfork` prepare: no thread may be inside the tables while the process forks.
pub fn before_fork() {
    CODES.acquire();
}

/// `pthread_atfork` parent and child: the tables are usable again.
pub fn after_fork() {
    CODES.release();
}

/// The name of code id `id`, for the writer thread.
pub fn code(id: u32) -> Option<PyCode> {
    CODES
        .lock()
        .defs
        .get((id as usize).checked_sub(1)?)
        .cloned()
}

/// Reads a string attribute of a code object.
///
/// # Safety
/// GIL held, `code` a live code object.
unsafe fn str_attr(api: &PyApi, code: Obj, name: &CStr) -> String {
    // SAFETY: the caller holds the GIL; getattr returns a new reference or NULL (error set).
    let v = unsafe { (api.get_attr)(code, name.as_ptr()) };
    if v.is_null() {
        // SAFETY: clears the AttributeError we caused.
        unsafe { (api.err_clear)() };
        return String::new();
    }
    // SAFETY: `v` is a live object; AsUTF8 returns a buffer owned by it, or NULL.
    let s = unsafe { (api.utf8)(v) };
    let out = if s.is_null() {
        // SAFETY: as above.
        unsafe { (api.err_clear)() };
        String::new()
    } else {
        // SAFETY: a NUL-terminated UTF-8 buffer valid while `v` lives.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    };
    // SAFETY: drops the reference getattr gave us.
    unsafe { (api.dec_ref)(v) };
    out
}

/// The id of a code object, naming it on first sight.
///
/// # Safety
/// GIL held, `code` a live code object.
unsafe fn code_id(api: &PyApi, code: Obj) -> u32 {
    let known = CODES
        .lock()
        .ids
        .as_ref()
        .and_then(|ids| ids.get(&(code as usize)).copied());
    if let Some(id) = known {
        return id;
    }
    // SAFETY: GIL held (caller); these only read attributes of the code object.
    let (file, qualname, name) = unsafe {
        (
            str_attr(api, code, c"co_filename"),
            str_attr(api, code, c"co_qualname"),
            str_attr(api, code, c"co_name"),
        )
    };
    // SAFETY: as above.
    let first_line = unsafe {
        let v = (api.get_attr)(code, c"co_firstlineno".as_ptr());
        if v.is_null() {
            (api.err_clear)();
            0
        } else {
            let n = (api.as_long)(v);
            (api.dec_ref)(v);
            n.max(0) as u32
        }
    };
    let mut c = CODES.lock();
    if let Some(&id) = c.ids.as_ref().and_then(|ids| ids.get(&(code as usize))) {
        return id;
    }
    // Keep the code object alive: its address must never name another function.
    // SAFETY: GIL held, live object.
    unsafe { (api.inc_ref)(code) };
    let function = if qualname.is_empty() { name } else { qualname };
    let id = c.define(file, function, first_line);
    c.ids
        .get_or_insert_with(HashMap::new)
        .insert(code as usize, id);
    id
}

/// Known to have no CPython in the process (so [`capture`] returns `None`): lets the hooks skip
/// the call.
#[inline]
pub fn absent() -> bool {
    matches!(API.get(), Some(None))
}

/// What [`capture`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PyStack {
    /// No Python stack (no Python in the process, or none captured yet on any thread).
    None,
    /// The calling thread's own frames: this many were written, innermost first.
    Own(usize),
    /// The thread runs no Python itself: the id of the last stack captured on any thread.
    Inferred(u32),
}

/// Writes the Python stack of the calling thread into `out`, innermost first, at most
/// `out.len()` frames; without frames of its own, the thread gets the last stack captured on any
/// thread ([`PyStack::Inferred`]).
pub fn capture(out: &mut [MaybeUninit<PyFrame>]) -> PyStack {
    if out.is_empty() {
        return PyStack::None;
    }
    // No CPython in the process: nothing to capture, and nothing to infer from.
    let Some(api) = API.get_or_init(PyApi::find).as_ref() else {
        return PyStack::None;
    };
    // SAFETY: these three may be called from any thread at any time.
    let (ready, gil) = unsafe {
        let ready = (api.is_initialized)() != 0 && api.is_finalizing.is_none_or(|f| f() == 0);
        (ready, ready && (api.gil_check)() != 0)
    };
    // Reading the frames directly is preferred whenever the interpreter's layout is known, GIL
    // or not: it is several times cheaper than the C API and has no side effect (the C API pauses
    // the garbage collector and, on 3.11, materialises frame objects).
    let depth = out.len().min(MAX_DEPTH);
    let n = if ready && !raw::available() && gil {
        // SAFETY: the thread holds the GIL (checked above).
        match unsafe { walk(api, depth) } {
            Some(frames) => {
                for (o, f) in out.iter_mut().zip(&frames) {
                    o.write(*f);
                }
                frames.len().min(depth)
            }
            None => 0,
        }
    } else if ready {
        // SAFETY: the interpreter is running (checked above) and this thread, inside a hook
        // called from C, is not running Python: its frames are parked.
        unsafe { raw::capture(&mut out[..depth]) }
    } else {
        0
    };
    if n > 0 {
        return PyStack::Own(n);
    }
    match LAST.load(Ordering::Relaxed) {
        0 => PyStack::None,
        id => PyStack::Inferred(id),
    }
}

/// The id of a stack of the calling thread's own (from [`capture`]), which also becomes the
/// stack inferred for threads without Python; 0 when the table is full.
#[inline]
pub fn intern(frames: &[PyFrame]) -> u32 {
    let mut words = [0u64; MAX_DEPTH];
    let n = frames.len().min(MAX_DEPTH);
    for (w, f) in words.iter_mut().zip(&frames[..n]) {
        *w = u64::from(f.code) | u64::from(f.line) << 32;
    }
    let id = PYTHON.intern(&words[..n]);
    if id != 0 && LAST.load(Ordering::Relaxed) != id {
        LAST.store(id, Ordering::Relaxed);
    }
    id
}

/// The frames of interned stack `id` (for the writer thread).
pub fn frames(id: u32) -> Option<Vec<PyFrame>> {
    let words = PYTHON.frames(id)?;
    Some(
        words
            .iter()
            .map(|&w| PyFrame {
                code: w as u32,
                line: (w >> 32) as u32,
            })
            .collect(),
    )
}

/// The interpreter's evaluation loop (`_PyEval_EvalFrameDefault`), once Python was found in the
/// process; [`StopAt::NEVER`] otherwise.
pub fn interpreter() -> StopAt {
    static EVAL: OnceLock<StopAt> = OnceLock::new();
    if !matches!(API.get(), Some(Some(_))) {
        return StopAt::NEVER;
    }
    *EVAL.get_or_init(|| eval_loop().unwrap_or(StopAt::NEVER))
}

/// Where `_PyEval_EvalFrameDefault` lies: its address and size from the dynamic symbol table.
fn eval_loop() -> Option<StopAt> {
    const RTLD_DL_SYMENT: libc::c_int = 1;
    let addr = sym(c"_PyEval_EvalFrameDefault")?;
    // SAFETY: Dl_info is plain data dladdr1 fills; `entry` receives a pointer to the symbol's
    // entry in the object's own (mapped, read-only) symbol table.
    let size = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut entry: *mut c_void = std::ptr::null_mut();
        if libc::dladdr1(addr as *const c_void, &mut info, &mut entry, RTLD_DL_SYMENT) == 0
            || entry.is_null()
            || info.dli_saddr as usize != addr
        {
            return None;
        }
        (*(entry as *const libc::Elf64_Sym)).st_size
    };
    (size > 0).then(|| StopAt {
        lo: addr as u64,
        hi: addr as u64 + size,
    })
}

/// # Safety
/// The calling thread holds the GIL.
unsafe fn walk(api: &PyApi, depth: usize) -> Option<Vec<PyFrame>> {
    // SAFETY: GIL held; returns this thread's state or NULL.
    let tstate = unsafe { (api.this_thread_state)() };
    if tstate.is_null() {
        return None;
    }
    let (mut t, mut v, mut tb): (Obj, Obj, Obj) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: GIL held. The pending exception (if any) is set aside and put back unchanged, and
    // the garbage collector is paused so no finalizer runs inside the CUDA call.
    let gc_was_on = unsafe {
        (api.err_fetch)(&mut t, &mut v, &mut tb);
        api.gc_disable.map(|f| f() == 1).unwrap_or(false)
    };
    let mut frames = Vec::with_capacity(depth.min(64));
    // SAFETY: GIL held; each call returns a new reference (or NULL) that we release.
    unsafe {
        let mut frame = (api.thread_state_frame)(tstate);
        while !frame.is_null() && frames.len() < depth {
            let code = (api.frame_code)(frame);
            let line = (api.frame_line)(frame);
            if !code.is_null() {
                let id = code_id(api, code);
                (api.dec_ref)(code);
                if id != 0 {
                    frames.push(PyFrame {
                        code: id,
                        line: line.max(0) as u32,
                    });
                }
            }
            let back = (api.frame_back)(frame);
            (api.dec_ref)(frame);
            frame = back;
        }
        if !frame.is_null() {
            (api.dec_ref)(frame);
        }
        if gc_was_on {
            if let Some(f) = api.gc_enable {
                f();
            }
        }
        (api.err_restore)(t, v, tb);
    }
    (!frames.is_empty()).then_some(frames)
}
