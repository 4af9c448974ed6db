//! CUDA driver hooks for the objects memory belongs to or lives in: memory pools, IPC mappings,
//! arrays, and contexts (destroying a context or resetting a primary context frees everything in
//! it).

use libc::c_void;
use vramtrace_collector::event::{Api, Op};

use super::{out, Call, Order};
use crate::ffi::{array_bytes, Array3DDescriptor, ArrayDescriptor, IpcMemHandle, MemPoolProps};

type DevPtr = u64;
type Ptr = *mut c_void;

handler!(mem_pool_create, CuMemPoolCreate, Create,
    (pool: *mut Ptr, props: *const MemPoolProps),
    // SAFETY: the call's own arguments.
    |r| unsafe { super::pool_created(r, pool, props) });

release_handler!(mem_pool_destroy, CuMemPoolDestroy, Ptr, |pool| {
    Op::PoolDestroy { pool: pool as u64 }
});

handler!(mem_pool_trim_to, CuMemPoolTrimTo, Create, (pool: Ptr, keep: usize), |_r| Op::PoolTrim {
    pool: pool as u64,
    keep: keep as u64,
});

/// `cuIpcOpenMemHandle` (v1 and v2 share the ABI).
macro_rules! ipc_open_handler {
    ($fn:ident, $api:ident) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn(*mut DevPtr, IpcMemHandle, u32) -> i32,
            caller: usize,
            ptr: *mut DevPtr,
            handle: IpcMemHandle,
            flags: u32,
        ) -> i32 {
            let call = Call::begin(Api::$api, caller, Order::Create);
            // SAFETY: the program's own arguments.
            let r = unsafe { real(ptr, handle, flags) };
            call.end(r, || Op::IpcOpen {
                // SAFETY: written by the real call when it succeeded.
                ptr: unsafe { out(ptr, r) },
                flags,
            });
            r
        }
    };
}
ipc_open_handler!(ipc_open_mem_handle, CuIpcOpenMemHandle);
ipc_open_handler!(ipc_open_mem_handle_v1, CuIpcOpenMemHandleV1);

release_handler!(ipc_close_mem_handle, CuIpcCloseMemHandle, DevPtr, |ptr| {
    Op::IpcClose { ptr }
});

unsafe fn array_create(
    real: unsafe extern "C" fn(*mut Ptr, *const ArrayDescriptor) -> i32,
    caller: usize,
    array: *mut Ptr,
    desc: *const ArrayDescriptor,
) -> i32 {
    let call = Call::begin(Api::CuArrayCreate, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(array, desc) };
    call.end(r, || {
        // SAFETY: a non-null descriptor the program passed.
        let d = unsafe { desc.as_ref() };
        let (w, h, f, c) = d.map_or((0, 0, 0, 0), |d| {
            (d.width, d.height, d.format, d.num_channels)
        });
        Op::ArrayCreate {
            // SAFETY: written by the real call when it succeeded.
            array: unsafe { out(array, r) },
            bytes: array_bytes(w, h, 0, f, c),
            width: w as u64,
            height: h as u64,
            depth: 0,
            format: f,
            channels: c,
        }
    });
    r
}

unsafe fn array_3d_create(
    real: unsafe extern "C" fn(*mut Ptr, *const Array3DDescriptor) -> i32,
    caller: usize,
    array: *mut Ptr,
    desc: *const Array3DDescriptor,
) -> i32 {
    let call = Call::begin(Api::CuArray3DCreate, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(array, desc) };
    call.end(r, || {
        // SAFETY: a non-null descriptor the program passed.
        let d = unsafe { desc.as_ref() };
        let (w, h, dp, f, c) = d.map_or((0, 0, 0, 0, 0), |d| {
            (d.width, d.height, d.depth, d.format, d.num_channels)
        });
        Op::ArrayCreate {
            // SAFETY: written by the real call when it succeeded.
            array: unsafe { out(array, r) },
            bytes: array_bytes(w, h, dp, f, c),
            width: w as u64,
            height: h as u64,
            depth: dp as u64,
            format: f,
            channels: c,
        }
    });
    r
}

release_handler!(array_destroy, CuArrayDestroy, Ptr, |array| {
    Op::ArrayDestroy {
        array: array as u64,
    }
});

handler!(ctx_create_v2, CuCtxCreateV2, Create, (ctx: *mut Ptr, flags: u32, device: i32),
    // SAFETY: written by the real call when it succeeded.
    |r| Op::CtxCreate { ctx: unsafe { out(ctx, r) }, device, flags });
handler!(ctx_create_v3, CuCtxCreateV3, Create,
    (ctx: *mut Ptr, params: Ptr, num_params: i32, flags: u32, device: i32),
    // SAFETY: written by the real call when it succeeded.
    |r| Op::CtxCreate { ctx: unsafe { out(ctx, r) }, device, flags });
handler!(ctx_create_v4, CuCtxCreateV4, Create, (ctx: *mut Ptr, params: Ptr, flags: u32, device: i32),
    // SAFETY: written by the real call when it succeeded.
    |r| Op::CtxCreate { ctx: unsafe { out(ctx, r) }, device, flags });

release_handler!(ctx_destroy, CuCtxDestroy, Ptr, |ctx| Op::CtxDestroy {
    ctx: ctx as u64
});
release_handler!(
    primary_ctx_release,
    CuDevicePrimaryCtxRelease,
    i32,
    |device| { Op::PrimaryCtxRelease { device } }
);
release_handler!(
    primary_ctx_release_v1,
    CuDevicePrimaryCtxReleaseV1,
    i32,
    |device| { Op::PrimaryCtxRelease { device } }
);
release_handler!(primary_ctx_reset, CuDevicePrimaryCtxReset, i32, |device| {
    Op::PrimaryCtxReset { device }
});
release_handler!(
    primary_ctx_reset_v1,
    CuDevicePrimaryCtxResetV1,
    i32,
    |device| { Op::PrimaryCtxReset { device } }
);

unsafe fn primary_ctx_retain(
    real: unsafe extern "C" fn(*mut Ptr, i32) -> i32,
    caller: usize,
    ctx: *mut Ptr,
    device: i32,
) -> i32 {
    let call = Call::begin(Api::CuDevicePrimaryCtxRetain, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ctx, device) };
    call.end(r, || Op::PrimaryCtxRetain {
        device,
        // SAFETY: written by the real call when it succeeded.
        ctx: unsafe { out(ctx, r) },
    });
    r
}

hooks! {
    fn cuMemPoolCreate(pool: *mut Ptr, props: *const MemPoolProps) -> i32, missing 3 => mem_pool_create;
    fn cuMemPoolDestroy(pool: Ptr) -> i32, missing 3 => mem_pool_destroy;
    fn cuMemPoolTrimTo(pool: Ptr, keep: usize) -> i32, missing 3 => mem_pool_trim_to;
    fn cuIpcOpenMemHandle_v2(ptr: *mut DevPtr, handle: IpcMemHandle, flags: u32) -> i32, missing 3 => ipc_open_mem_handle;
    fn cuIpcOpenMemHandle(ptr: *mut DevPtr, handle: IpcMemHandle, flags: u32) -> i32, missing 3 => ipc_open_mem_handle_v1;
    fn cuIpcCloseMemHandle(ptr: DevPtr) -> i32, missing 3 => ipc_close_mem_handle;
    fn cuArrayCreate_v2(array: *mut Ptr, desc: *const ArrayDescriptor) -> i32, missing 3 => array_create;
    fn cuArray3DCreate_v2(array: *mut Ptr, desc: *const Array3DDescriptor) -> i32, missing 3 => array_3d_create;
    fn cuArrayDestroy(array: Ptr) -> i32, missing 3 => array_destroy;
    fn cuCtxCreate_v2(ctx: *mut Ptr, flags: u32, device: i32) -> i32, missing 3 => ctx_create_v2;
    fn cuCtxCreate_v3(ctx: *mut Ptr, params: Ptr, num_params: i32, flags: u32, device: i32)
        -> i32, missing 3 => ctx_create_v3;
    fn cuCtxCreate_v4(ctx: *mut Ptr, params: Ptr, flags: u32, device: i32) -> i32, missing 3 => ctx_create_v4;
    fn cuCtxDestroy_v2(ctx: Ptr) -> i32, missing 3 => ctx_destroy;
    fn cuDevicePrimaryCtxRetain(ctx: *mut Ptr, device: i32) -> i32, missing 3 => primary_ctx_retain;
    fn cuDevicePrimaryCtxRelease_v2(device: i32) -> i32, missing 3 => primary_ctx_release;
    fn cuDevicePrimaryCtxRelease(device: i32) -> i32, missing 3 => primary_ctx_release_v1;
    fn cuDevicePrimaryCtxReset_v2(device: i32) -> i32, missing 3 => primary_ctx_reset;
    fn cuDevicePrimaryCtxReset(device: i32) -> i32, missing 3 => primary_ctx_reset_v1;
}
