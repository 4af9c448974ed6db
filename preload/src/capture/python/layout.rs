//! Where CPython keeps what a raw frame walk reads: the per-version offsets of the thread state,
//! the interpreter frame, the code object and the string object, and the run-time checks that
//! the running interpreter really has that layout.
//!
//! The numbers were computed with `offsetof` by compiling a C program against each version's own
//! headers (`Include/cpython/pystate.h`, `Include/internal/pycore_frame.h`,
//! `Include/cpython/code.h`, `Include/cpython/unicodeobject.h`, and for 3.13
//! `Include/internal/pycore_runtime.h`) of CPython v3.11.7, v3.12.1 and v3.13.0, x86-64, default
//! (non-debug, GIL) builds. Within a minor version these structures do not change.
//!
//! Before any walk, [`Runtime::find`] checks the interpreter against the table: the version
//! (`Py_Version`), the type objects' own headers (`PyCode_Type.tp_basicsize` is the offset of
//! `co_code_adaptive`, `PyUnicode_Type`'s that of a full string object, `PyBytes_Type`'s that of
//! `ob_sval` plus one), and on 3.13 the `_Py_DebugOffsets` CPython publishes at the start of
//! `_PyRuntime` for out-of-process debuggers. A debug, free-threaded or otherwise different build
//! fails one of these, and gets no raw walking.

use std::ffi::{c_void, CStr};

use super::sym;

/// Offsets shared by 3.11–3.13 (`Include/object.h`, `Include/cpython/object.h`,
/// `Include/cpython/bytesobject.h`, `Include/cpython/unicodeobject.h`).
pub const OB_TYPE: usize = 8;
pub const OB_SIZE: usize = 16;
pub const BYTES_SVAL: usize = 32;
const TP_NAME: usize = 24;
const TP_BASICSIZE: usize = 32;
pub const STR_LENGTH: usize = 16;
pub const STR_HASH: usize = 24;
pub const STR_STATE: usize = 32;
/// Bit positions in `PyASCIIObject.state` (after `interned:2`): `kind:3`, `compact:1`, `ascii:1`.
pub const STATE_KIND_SHIFT: u32 = 2;
pub const STATE_COMPACT: u32 = 1 << 5;
pub const STATE_ASCII: u32 = 1 << 6;

/// Where one CPython minor version keeps things. All offsets in bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub minor: u8,
    /// `PyThreadState.interp`.
    pub tstate_interp: usize,
    /// `PyThreadState.cframe` (3.11, 3.12): the frame is found through a `_PyCFrame`.
    pub tstate_cframe: Option<usize>,
    /// `_PyCFrame.current_frame` (3.11, 3.12), else `PyThreadState.current_frame` (3.13).
    pub current_frame: usize,
    /// `_PyInterpreterFrame.f_code` (3.13: `f_executable`).
    pub frame_code: usize,
    pub frame_previous: usize,
    /// `_PyInterpreterFrame.prev_instr` (3.13: `instr_ptr`).
    pub frame_instr: usize,
    pub frame_owner: usize,
    /// `FRAME_OWNED_BY_GENERATOR`.
    pub owned_by_generator: u8,
    /// `FRAME_OWNED_BY_CSTACK` (3.12+): the interpreter's own entry frames, never shown.
    pub owned_by_cstack: Option<u8>,
    pub code_firstlineno: usize,
    pub code_filename: usize,
    pub code_name: usize,
    pub code_qualname: usize,
    pub code_linetable: usize,
    pub code_firsttraceable: usize,
    /// `co_code_adaptive`, the instructions; also `PyCode_Type.tp_basicsize`.
    pub code_adaptive: usize,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub ascii_data: usize,
    /// `sizeof(PyCompactUnicodeObject)`: where a compact non-ASCII string's characters start.
    pub compact_data: usize,
    /// `sizeof(PyUnicodeObject)`, `PyUnicode_Type.tp_basicsize`.
    pub unicode_size: usize,
}

/// CPython v3.11.7. `PyASCIIObject` still has `wstr`; `_PyCFrame` starts with `use_tracing`;
/// entry frames are ordinary frames (`is_entry`), there is no C-stack owner.
pub const V3_11: Layout = Layout {
    minor: 11,
    tstate_interp: 16,
    tstate_cframe: Some(56),
    current_frame: 8,
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_owner: 69,
    owned_by_generator: 1,
    owned_by_cstack: None,
    code_firstlineno: 72,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_firsttraceable: 168,
    code_adaptive: 184,
    ascii_data: 48,
    compact_data: 72,
    unicode_size: 80,
};

/// CPython v3.12.1.
pub const V3_12: Layout = Layout {
    minor: 12,
    tstate_interp: 16,
    tstate_cframe: Some(56),
    current_frame: 0,
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    owned_by_generator: 1,
    owned_by_cstack: Some(3),
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_firsttraceable: 176,
    code_adaptive: 192,
    ascii_data: 40,
    compact_data: 56,
    unicode_size: 64,
};

/// CPython v3.13.0. No `_PyCFrame`: the thread state points at the frame itself.
pub const V3_13: Layout = Layout {
    minor: 13,
    tstate_interp: 16,
    tstate_cframe: None,
    current_frame: 72,
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    owned_by_generator: 1,
    owned_by_cstack: Some(3),
    code_firstlineno: 68,
    code_filename: 112,
    code_name: 120,
    code_qualname: 128,
    code_linetable: 136,
    code_firsttraceable: 184,
    code_adaptive: 200,
    ascii_data: 40,
    compact_data: 56,
    unicode_size: 64,
};

/// The table for a `PY_VERSION_HEX`: 3.11–3.13, release candidates and finals only (alphas and
/// betas may still move fields).
pub fn for_version(hex: u64) -> Option<&'static Layout> {
    let (major, minor, level) = ((hex >> 24) & 0xff, (hex >> 16) & 0xff, (hex >> 4) & 0xf);
    if major != 3 || level < 0xc {
        return None;
    }
    match minor {
        11 => Some(&V3_11),
        12 => Some(&V3_12),
        13 => Some(&V3_13),
        _ => None,
    }
}

/// `_Py_DebugOffsets` (CPython v3.13.0 `Include/internal/pycore_runtime.h`), at offset 0 of
/// `_PyRuntime`: the cookie, the version, and where it says each field we read lives.
mod debug_offsets {
    pub const COOKIE: &[u8; 8] = b"xdebugpy";
    pub const VERSION: usize = 8;
    pub const TSTATE_CURRENT_FRAME: usize = 184;
    pub const FRAME_PREVIOUS: usize = 232;
    pub const FRAME_EXECUTABLE: usize = 240;
    pub const FRAME_INSTR_PTR: usize = 248;
    pub const FRAME_OWNER: usize = 264;
    pub const CODE_FILENAME: usize = 280;
    pub const CODE_QUALNAME: usize = 296;
    pub const CODE_LINETABLE: usize = 304;
    pub const CODE_FIRSTLINENO: usize = 312;
    pub const CODE_ADAPTIVE: usize = 344;
    pub const ASCIIOBJECT_SIZE: usize = 560;
}

type ThisThreadState = unsafe extern "C" fn() -> *mut c_void;
type ThreadInterp = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

/// The running interpreter, checked against its layout table.
pub struct Runtime {
    pub layout: &'static Layout,
    pub code_type: usize,
    pub unicode_type: usize,
    pub bytes_type: usize,
    /// `PyGILState_GetThisThreadState`: reads thread-local state, no GIL needed.
    pub this_thread_state: ThisThreadState,
    /// `PyThreadState_GetInterpreter`: reads one field, no GIL needed.
    pub thread_interp: ThreadInterp,
}

/// Reads a `T` at `addr`.
///
/// # Safety
/// `addr` must be readable for `size_of::<T>()` bytes and aligned for `T`.
#[inline(always)]
pub unsafe fn rd<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's contract. Volatile: the memory belongs to the interpreter, which the
    // compiler knows nothing about.
    unsafe { std::ptr::read_volatile(addr as *const T) }
}

/// Whether `addr` can be an object or frame address: non-null, 8-aligned, user space.
#[inline(always)]
pub fn plausible(addr: usize) -> bool {
    addr >= 4096 && addr & 7 == 0 && addr < (1 << 47)
}

impl Runtime {
    /// The running interpreter if it is one whose layout is known and checks out.
    pub fn find() -> Option<Runtime> {
        let version = sym(c"Py_Version")?;
        // SAFETY: `Py_Version` is a `const unsigned long` (3.11+; older versions lack the symbol).
        let layout = for_version(unsafe { rd::<u64>(version) })?;
        let rt = Runtime {
            layout,
            code_type: sym(c"PyCode_Type")?,
            unicode_type: sym(c"PyUnicode_Type")?,
            bytes_type: sym(c"PyBytes_Type")?,
            // SAFETY: these CPython functions have these signatures in 3.9+.
            this_thread_state: unsafe {
                std::mem::transmute::<usize, ThisThreadState>(sym(
                    c"PyGILState_GetThisThreadState",
                )?)
            },
            // SAFETY: as above.
            thread_interp: unsafe {
                std::mem::transmute::<usize, ThreadInterp>(sym(c"PyThreadState_GetInterpreter")?)
            },
        };
        let type_type = sym(c"PyType_Type")?;
        let ok = rt.type_is(rt.code_type, type_type, c"code", layout.code_adaptive)
            && rt.type_is(rt.unicode_type, type_type, c"str", layout.unicode_size)
            && rt.type_is(rt.bytes_type, type_type, c"bytes", BYTES_SVAL + 1)
            && (layout.minor != 13 || debug_offsets_agree(layout));
        ok.then_some(rt)
    }

    /// Whether the static type object at `ty` has the object header we expect (its type is
    /// `type_type`), the name `name` and the instance size `size`.
    fn type_is(&self, ty: usize, type_type: usize, name: &CStr, size: usize) -> bool {
        // SAFETY: `ty` is a static `PyTypeObject` of the interpreter; these fields lie inside
        // its fixed header whatever the build, so the reads are in bounds.
        unsafe {
            if rd::<usize>(ty + OB_TYPE) != type_type || rd::<usize>(ty + TP_BASICSIZE) != size {
                return false;
            }
            let tp_name = rd::<*const std::ffi::c_char>(ty + TP_NAME);
            !tp_name.is_null() && CStr::from_ptr(tp_name) == name
        }
    }
}

/// On 3.13, whether `_PyRuntime.debug_offsets` says what our table says.
fn debug_offsets_agree(layout: &Layout) -> bool {
    use debug_offsets as d;
    let (Some(runtime), Some(version)) = (sym(c"_PyRuntime"), sym(c"Py_Version")) else {
        return false;
    };
    let field = |at: usize| -> usize {
        // SAFETY: `_PyRuntime` starts with `_Py_DebugOffsets` (checked by the cookie first),
        // which is longer than the largest offset read here.
        unsafe { rd::<u64>(runtime + at) as usize }
    };
    // SAFETY: `_PyRuntime` is a large static structure; its first 8 bytes are readable.
    let cookie = unsafe { rd::<[u8; 8]>(runtime) };
    // SAFETY: as for `Runtime::find`.
    let version = unsafe { rd::<u64>(version) };
    &cookie == d::COOKIE
        && field(d::VERSION) as u64 == version
        && field(d::TSTATE_CURRENT_FRAME) == layout.current_frame
        && field(d::FRAME_PREVIOUS) == layout.frame_previous
        && field(d::FRAME_EXECUTABLE) == layout.frame_code
        && field(d::FRAME_INSTR_PTR) == layout.frame_instr
        && field(d::FRAME_OWNER) == layout.frame_owner
        && field(d::CODE_FILENAME) == layout.code_filename
        && field(d::CODE_QUALNAME) == layout.code_qualname
        && field(d::CODE_LINETABLE) == layout.code_linetable
        && field(d::CODE_FIRSTLINENO) == layout.code_firstlineno
        && field(d::CODE_ADAPTIVE) == layout.code_adaptive
        && field(d::ASCIIOBJECT_SIZE) == layout.ascii_data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pick_their_table() {
        assert_eq!(for_version(0x030b07f0), Some(&V3_11));
        assert_eq!(for_version(0x030b02f0), Some(&V3_11));
        assert_eq!(for_version(0x030c01f0), Some(&V3_12));
        assert_eq!(for_version(0x030d00f0), Some(&V3_13));
        assert_eq!(for_version(0x030d00c1), Some(&V3_13));
        // Betas, older and newer interpreters: no raw walking.
        assert_eq!(for_version(0x030d00b2), None);
        assert_eq!(for_version(0x030a0df0), None);
        assert_eq!(for_version(0x030e00f0), None);
    }
}
