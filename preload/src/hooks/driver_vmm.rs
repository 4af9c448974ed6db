//! CUDA driver hooks for virtual memory management: address reservations, physical allocation
//! handles, and the mappings between them (PyTorch's expandable segments, NCCL's buffers).

use libc::c_void;
use vramtrace_collector::event::{Api, Op};

use super::{out, Call, Order};
use crate::ffi::MemAllocationProp;

type DevPtr = u64;
type Handle = u64;

unsafe fn mem_create(
    real: unsafe extern "C" fn(*mut Handle, usize, *const MemAllocationProp, u64) -> i32,
    caller: usize,
    handle: *mut Handle,
    size: usize,
    prop: *const MemAllocationProp,
    flags: u64,
) -> i32 {
    let call = Call::begin(Api::CuMemCreate, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(handle, size, prop, flags) };
    call.end(r, || {
        let (device, handle_types) = if prop.is_null() {
            (-1, 0)
        } else {
            // SAFETY: non-null properties the program passed.
            let p = unsafe { &*prop };
            (p.location.id, p.requested_handle_types)
        };
        Op::Create {
            // SAFETY: written by the real call when it succeeded.
            handle: unsafe { out(handle, r) },
            size: size as u64,
            device,
            handle_types,
        }
    });
    r
}

release_handler!(mem_release, CuMemRelease, Handle, |handle| Op::Release {
    handle
});

unsafe fn mem_retain_allocation_handle(
    real: unsafe extern "C" fn(*mut Handle, *mut c_void) -> i32,
    caller: usize,
    handle: *mut Handle,
    addr: *mut c_void,
) -> i32 {
    let call = Call::begin(Api::CuMemRetainAllocationHandle, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(handle, addr) };
    call.end(r, || Op::Retain {
        // SAFETY: written by the real call when it succeeded.
        handle: unsafe { out(handle, r) },
        ptr: addr as u64,
    });
    r
}

unsafe fn mem_map(
    real: unsafe extern "C" fn(DevPtr, usize, usize, Handle, u64) -> i32,
    caller: usize,
    ptr: DevPtr,
    size: usize,
    offset: usize,
    handle: Handle,
    flags: u64,
) -> i32 {
    let call = Call::begin(Api::CuMemMap, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ptr, size, offset, handle, flags) };
    call.end(r, || Op::Map {
        ptr,
        size: size as u64,
        offset: offset as u64,
        handle,
    });
    r
}

unsafe fn mem_unmap(
    real: unsafe extern "C" fn(DevPtr, usize) -> i32,
    caller: usize,
    ptr: DevPtr,
    size: usize,
) -> i32 {
    let call = Call::begin(Api::CuMemUnmap, caller, Order::Destroy);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ptr, size) };
    call.end(r, || Op::Unmap {
        ptr,
        size: size as u64,
    });
    r
}

unsafe fn mem_address_reserve(
    real: unsafe extern "C" fn(*mut DevPtr, usize, usize, DevPtr, u64) -> i32,
    caller: usize,
    ptr: *mut DevPtr,
    size: usize,
    alignment: usize,
    hint: DevPtr,
    flags: u64,
) -> i32 {
    let call = Call::begin(Api::CuMemAddressReserve, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ptr, size, alignment, hint, flags) };
    call.end(r, || Op::Reserve {
        // SAFETY: written by the real call when it succeeded.
        ptr: unsafe { out(ptr, r) },
        size: size as u64,
        alignment: alignment as u64,
        hint,
    });
    r
}

unsafe fn mem_address_free(
    real: unsafe extern "C" fn(DevPtr, usize) -> i32,
    caller: usize,
    ptr: DevPtr,
    size: usize,
) -> i32 {
    let call = Call::begin(Api::CuMemAddressFree, caller, Order::Destroy);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ptr, size) };
    call.end(r, || Op::ReserveFree {
        ptr,
        size: size as u64,
    });
    r
}

unsafe fn mem_import_from_shareable_handle(
    real: unsafe extern "C" fn(*mut Handle, *mut c_void, u32) -> i32,
    caller: usize,
    handle: *mut Handle,
    os_handle: *mut c_void,
    handle_type: u32,
) -> i32 {
    let call = Call::begin(Api::CuMemImportFromShareableHandle, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(handle, os_handle, handle_type) };
    call.end(r, || Op::Import {
        // SAFETY: written by the real call when it succeeded.
        handle: unsafe { out(handle, r) },
        shareable: os_handle as u64,
        handle_type,
    });
    r
}

hooks! {
    fn cuMemCreate(handle: *mut Handle, size: usize, prop: *const MemAllocationProp, flags: u64)
        -> i32, missing 3 => mem_create;
    fn cuMemRelease(handle: Handle) -> i32, missing 3 => mem_release;
    fn cuMemRetainAllocationHandle(handle: *mut Handle, addr: *mut c_void) -> i32, missing 3 => mem_retain_allocation_handle;
    fn cuMemMap(ptr: DevPtr, size: usize, offset: usize, handle: Handle, flags: u64) -> i32, missing 3 => mem_map;
    fn cuMemUnmap(ptr: DevPtr, size: usize) -> i32, missing 3 => mem_unmap;
    fn cuMemAddressReserve(ptr: *mut DevPtr, size: usize, alignment: usize, hint: DevPtr,
        flags: u64) -> i32, missing 3 => mem_address_reserve;
    fn cuMemAddressFree(ptr: DevPtr, size: usize) -> i32, missing 3 => mem_address_free;
    fn cuMemImportFromShareableHandle(handle: *mut Handle, os_handle: *mut c_void,
        handle_type: u32) -> i32, missing 3 => mem_import_from_shareable_handle;
}
