//! The tracer as an NVTX injection library: NVTX (as used by `torch.cuda.nvtx`, and by any program
//! built with the NVTX v3 headers) loads the library named by `NVTX_INJECTION64_PATH` and calls its
//! `InitializeInjectionNvtx2`, which fills NVTX's callback tables. `vramtrace run` points that
//! variable at libvramtrace.so. Ranges and marks become events; a pushed range named by
//! `VRAMTRACE_STEP_RANGE` also marks the start of a training step.
//!
//! Return values stay those of NVTX without a tool: pushes and pops report
//! `NVTX_NO_PUSH_POP_TRACKING` and range starts return id 0, so the program sees no difference.

use std::ffi::{c_char, c_int, c_void, CStr};

use vramtrace_collector::event::{Api, Op};

use super::tracer_api;
use super::{Call, Order};
use crate::session;

/// `NVTX_NO_PUSH_POP_TRACKING`: what nvtxRangePush/Pop return when no tool tracks nesting.
const NO_PUSH_POP_TRACKING: c_int = -2;

const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;

const CBID_CORE_MARK_EX: usize = 1;
const CBID_CORE_MARK_A: usize = 2;
const CBID_CORE_RANGE_START_EX: usize = 4;
const CBID_CORE_RANGE_START_A: usize = 5;
const CBID_CORE_RANGE_PUSH_EX: usize = 8;
const CBID_CORE_RANGE_PUSH_A: usize = 9;
const CBID_CORE_RANGE_POP: usize = 11;

const CBID_CORE2_DOMAIN_MARK_EX: usize = 1;
const CBID_CORE2_DOMAIN_RANGE_START_EX: usize = 2;
const CBID_CORE2_DOMAIN_RANGE_PUSH_EX: usize = 4;
const CBID_CORE2_DOMAIN_RANGE_POP: usize = 5;

/// `NVTX_MESSAGE_TYPE_ASCII`.
const MESSAGE_ASCII: i32 = 1;

type FunctionPointer = *const c_void;
/// `NvtxFunctionTable`: an array of pointers to NVTX's function-pointer slots.
type FunctionTable = *mut *mut FunctionPointer;
type GetModuleFunctionTable = unsafe extern "C" fn(u32, *mut FunctionTable, *mut u32) -> c_int;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

/// `nvtxEventAttributes_t` (version 3), the fields before and including the message.
#[repr(C)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_char,
}

fn message(attrs: *const EventAttributes) -> String {
    if attrs.is_null() {
        return String::new();
    }
    // SAFETY: NVTX passes the program's attribute struct; we read the fixed leading fields and
    // only follow the message pointer for ASCII messages.
    let a = unsafe { &*attrs };
    if usize::from(a.size) < std::mem::size_of::<EventAttributes>()
        || a.message_type != MESSAGE_ASCII
        || a.message.is_null()
    {
        return String::new();
    }
    // SAFETY: an ASCII message is a NUL-terminated string.
    unsafe { CStr::from_ptr(a.message) }
        .to_string_lossy()
        .into_owned()
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NVTX's A-variants take NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn push(name: String) {
    let is_step = session::config()
        .step_range
        .as_deref()
        .is_some_and(|s| s == name);
    let call = Call::begin(Api::NvtxRangePush, 0, Order::Create);
    call.end(0, || Op::RangePush { name });
    if is_step {
        tracer_api::vramtrace_mark_step();
    }
}

fn mark(name: String) {
    let call = Call::begin(Api::NvtxMark, 0, Order::Create);
    call.end(0, || Op::Mark { name });
}

extern "C" fn range_push_a(msg: *const c_char) -> c_int {
    let _ = std::panic::catch_unwind(|| push(text(msg)));
    NO_PUSH_POP_TRACKING
}

extern "C" fn range_push_ex(attrs: *const EventAttributes) -> c_int {
    let _ = std::panic::catch_unwind(|| push(message(attrs)));
    NO_PUSH_POP_TRACKING
}

extern "C" fn domain_range_push_ex(_domain: *mut c_void, attrs: *const EventAttributes) -> c_int {
    range_push_ex(attrs)
}

extern "C" fn range_pop() -> c_int {
    let _ = std::panic::catch_unwind(|| {
        let call = Call::begin(Api::NvtxRangePop, 0, Order::Create);
        call.end(0, || Op::RangePop);
    });
    NO_PUSH_POP_TRACKING
}

extern "C" fn domain_range_pop(_domain: *mut c_void) -> c_int {
    range_pop()
}

extern "C" fn mark_a(msg: *const c_char) {
    let _ = std::panic::catch_unwind(|| mark(text(msg)));
}

extern "C" fn mark_ex(attrs: *const EventAttributes) {
    let _ = std::panic::catch_unwind(|| mark(message(attrs)));
}

extern "C" fn domain_mark_ex(_domain: *mut c_void, attrs: *const EventAttributes) {
    mark_ex(attrs)
}

extern "C" fn range_start_a(msg: *const c_char) -> u64 {
    mark_a(msg);
    0
}

extern "C" fn range_start_ex(attrs: *const EventAttributes) -> u64 {
    mark_ex(attrs);
    0
}

extern "C" fn domain_range_start_ex(_domain: *mut c_void, attrs: *const EventAttributes) -> u64 {
    range_start_ex(attrs)
}

/// Fills the slots of one NVTX module's function table.
///
/// # Safety
/// `get` is NVTX's GetModuleFunctionTable.
unsafe fn install(get: GetModuleFunctionTable, module: u32, entries: &[(usize, FunctionPointer)]) {
    let mut table: FunctionTable = std::ptr::null_mut();
    let mut size: u32 = 0;
    // SAFETY: NVTX writes the table pointer and its length.
    if unsafe { get(module, &mut table, &mut size) } == 0 || table.is_null() {
        return;
    }
    for &(id, f) in entries {
        if id < size as usize {
            // SAFETY: `table[id]` points at NVTX's slot for callback `id` (checked < size).
            let slot = unsafe { *table.add(id) };
            if !slot.is_null() {
                // SAFETY: the slot is NVTX's function pointer for that callback.
                unsafe { *slot = f };
            }
        }
    }
}

/// The NVTX injection entry point: called once by NVTX with its export-table getter; returns 1
/// when the tracer attached.
///
/// # Safety
/// Called by NVTX's initialisation with a valid getter.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(
    get_export_table: Option<unsafe extern "C" fn(u32) -> *const c_void>,
) -> c_int {
    let Some(get_export_table) = get_export_table else {
        return 0;
    };
    if session::config().disabled {
        return 0;
    }
    // SAFETY: NVTX's getter returns its callback export table (or NULL).
    let callbacks = unsafe { get_export_table(ETID_CALLBACKS) } as *const ExportTableCallbacks;
    if callbacks.is_null() {
        return 0;
    }
    // SAFETY: a non-null NvtxExportTableCallbacks from NVTX.
    let Some(get) = (unsafe { &*callbacks }).get_module_function_table else {
        return 0;
    };
    let core: [(usize, FunctionPointer); 7] = [
        (CBID_CORE_MARK_EX, mark_ex as FunctionPointer),
        (CBID_CORE_MARK_A, mark_a as FunctionPointer),
        (CBID_CORE_RANGE_START_EX, range_start_ex as FunctionPointer),
        (CBID_CORE_RANGE_START_A, range_start_a as FunctionPointer),
        (CBID_CORE_RANGE_PUSH_EX, range_push_ex as FunctionPointer),
        (CBID_CORE_RANGE_PUSH_A, range_push_a as FunctionPointer),
        (CBID_CORE_RANGE_POP, range_pop as FunctionPointer),
    ];
    let core2: [(usize, FunctionPointer); 4] = [
        (CBID_CORE2_DOMAIN_MARK_EX, domain_mark_ex as FunctionPointer),
        (
            CBID_CORE2_DOMAIN_RANGE_START_EX,
            domain_range_start_ex as FunctionPointer,
        ),
        (
            CBID_CORE2_DOMAIN_RANGE_PUSH_EX,
            domain_range_push_ex as FunctionPointer,
        ),
        (
            CBID_CORE2_DOMAIN_RANGE_POP,
            domain_range_pop as FunctionPointer,
        ),
    ];
    // SAFETY: `get` is NVTX's GetModuleFunctionTable.
    unsafe {
        install(get, MODULE_CORE, &core);
        install(get, MODULE_CORE2, &core2);
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_attributes_match_nvtx_v3() {
        assert_eq!(std::mem::offset_of!(EventAttributes, message_type), 32);
        assert_eq!(std::mem::offset_of!(EventAttributes, message), 40);
        assert_eq!(std::mem::size_of::<EventAttributes>(), 48);
    }
}
