//! CUDA driver hooks for pointer allocations: device, pitched, managed, stream-ordered, and
//! page-locked host memory. These see every path to the driver, including the ones that never
//! touch the runtime's exported symbols (NCCL's static runtime, cuBLAS's `dlsym`, CuPy, JAX).

use libc::c_void;
use vramtrace_collector::event::{Api, MemKind, Op};

use super::{out, Call, Order};

type DevPtr = u64;
type Ptr = *mut c_void;

alloc_handler!(
    mem_alloc,
    CuMemAlloc,
    Device,
    DevPtr,
    (),
    stream = 0,
    flags = 0
);
alloc_handler!(mem_alloc_managed, CuMemAllocManaged, Managed, DevPtr, (flags: u32),
    stream = 0, flags = flags);
alloc_handler!(mem_alloc_async, CuMemAllocAsync, Async, DevPtr, (stream: Ptr),
    stream = stream as u64, flags = 0);
alloc_handler!(mem_alloc_async_ptsz, CuMemAllocAsyncPtsz, Async, DevPtr, (stream: Ptr),
    stream = stream as u64, flags = 0);
alloc_handler!(mem_host_alloc, CuMemHostAlloc, HostPinned, Ptr, (flags: u32),
    stream = 0, flags = flags);
alloc_handler!(
    mem_alloc_host,
    CuMemAllocHost,
    HostPinned,
    Ptr,
    (),
    stream = 0,
    flags = 0
);

release_handler!(mem_free, CuMemFree, DevPtr, |ptr| Op::Free {
    ptr,
    stream: 0
});
release_handler!(mem_free_host, CuMemFreeHost, Ptr, |ptr| Op::FreeHost {
    ptr: ptr as u64
});
release_handler!(mem_host_unregister, CuMemHostUnregister, Ptr, |ptr| {
    Op::HostUnregister { ptr: ptr as u64 }
});

/// `cuMemAllocFromPoolAsync` and its per-thread-stream variant.
macro_rules! from_pool_handler {
    ($fn:ident, $api:ident) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn(*mut DevPtr, usize, Ptr, Ptr) -> i32,
            caller: usize,
            dptr: *mut DevPtr,
            size: usize,
            pool: Ptr,
            stream: Ptr,
        ) -> i32 {
            let call = Call::begin(Api::$api, caller, Order::Create);
            // SAFETY: the program's own arguments.
            let r = unsafe { real(dptr, size, pool, stream) };
            call.end(r, || Op::Alloc {
                kind: MemKind::Async,
                // SAFETY: written by the real call when it succeeded.
                ptr: unsafe { out(dptr, r) },
                size: size as u64,
                stream: stream as u64,
                pool: pool as u64,
                flags: 0,
                pitch: 0,
            });
            r
        }
    };
}
from_pool_handler!(mem_alloc_from_pool_async, CuMemAllocFromPoolAsync);
from_pool_handler!(mem_alloc_from_pool_async_ptsz, CuMemAllocFromPoolAsyncPtsz);

/// `cuMemFreeAsync` and its per-thread-stream variant.
macro_rules! free_async_handler {
    ($fn:ident, $api:ident) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn(DevPtr, Ptr) -> i32,
            caller: usize,
            ptr: DevPtr,
            stream: Ptr,
        ) -> i32 {
            Call::run(
                Api::$api,
                caller,
                Order::Destroy,
                // SAFETY: the program's own arguments.
                || unsafe { real(ptr, stream) },
                |_| Op::Free {
                    ptr,
                    stream: stream as u64,
                },
            )
        }
    };
}
free_async_handler!(mem_free_async, CuMemFreeAsync);
free_async_handler!(mem_free_async_ptsz, CuMemFreeAsyncPtsz);

/// `cuMemHostRegister` (v1 and v2 share the ABI).
macro_rules! host_register_handler {
    ($fn:ident, $api:ident) => {
        unsafe fn $fn(
            real: unsafe extern "C" fn(Ptr, usize, u32) -> i32,
            caller: usize,
            ptr: Ptr,
            size: usize,
            flags: u32,
        ) -> i32 {
            let call = Call::begin(Api::$api, caller, Order::Create);
            // SAFETY: the program's own arguments.
            let r = unsafe { real(ptr, size, flags) };
            call.end(r, || Op::HostRegister {
                ptr: ptr as u64,
                size: size as u64,
                flags,
            });
            r
        }
    };
}
host_register_handler!(mem_host_register, CuMemHostRegister);
host_register_handler!(mem_host_register_v1, CuMemHostRegisterV1);

handler!(mem_alloc_pitch, CuMemAllocPitch, Create,
    (dptr: *mut DevPtr, pitch: *mut usize, width: usize, height: usize, element: u32),
    // SAFETY: the call's own out-parameters.
    |r| unsafe { super::pitched(r, dptr, pitch, width, height, element) });

hooks! {
    fn cuMemAlloc_v2(dptr: *mut DevPtr, size: usize) -> i32, missing 3 => mem_alloc;
    fn cuMemFree_v2(dptr: DevPtr) -> i32, missing 3 => mem_free;
    fn cuMemAllocPitch_v2(dptr: *mut DevPtr, pitch: *mut usize, width: usize, height: usize,
        element: u32) -> i32, missing 3 => mem_alloc_pitch;
    fn cuMemAllocManaged(dptr: *mut DevPtr, size: usize, flags: u32) -> i32, missing 3 => mem_alloc_managed;
    fn cuMemAllocAsync(dptr: *mut DevPtr, size: usize, stream: Ptr) -> i32, missing 3 => mem_alloc_async;
    fn cuMemAllocAsync_ptsz(dptr: *mut DevPtr, size: usize, stream: Ptr) -> i32, missing 3 => mem_alloc_async_ptsz;
    fn cuMemFreeAsync(dptr: DevPtr, stream: Ptr) -> i32, missing 3 => mem_free_async;
    fn cuMemFreeAsync_ptsz(dptr: DevPtr, stream: Ptr) -> i32, missing 3 => mem_free_async_ptsz;
    fn cuMemAllocFromPoolAsync(dptr: *mut DevPtr, size: usize, pool: Ptr, stream: Ptr) -> i32, missing 3 => mem_alloc_from_pool_async;
    fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut DevPtr, size: usize, pool: Ptr, stream: Ptr)
        -> i32, missing 3 => mem_alloc_from_pool_async_ptsz;
    fn cuMemHostAlloc(pp: *mut Ptr, size: usize, flags: u32) -> i32, missing 3 => mem_host_alloc;
    fn cuMemAllocHost_v2(pp: *mut Ptr, size: usize) -> i32, missing 3 => mem_alloc_host;
    fn cuMemFreeHost(p: Ptr) -> i32, missing 3 => mem_free_host;
    fn cuMemHostRegister_v2(p: Ptr, size: usize, flags: u32) -> i32, missing 3 => mem_host_register;
    fn cuMemHostRegister(p: Ptr, size: usize, flags: u32) -> i32, missing 3 => mem_host_register_v1;
    fn cuMemHostUnregister(p: Ptr) -> i32, missing 3 => mem_host_unregister;
}
