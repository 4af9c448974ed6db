//! CUDA runtime hooks (`libcudart`). A runtime call that goes on to call the driver is one event:
//! the driver call beneath it is merged in (see `hooks::call`), adding its name.

use libc::c_void;
use vramtrace_collector::event::{Api, MemKind, Op};

use super::{out, Call, Order};
use crate::capture::context;
use crate::ffi::{ChannelFormatDesc, Extent, MemPoolProps, PitchedPtr};

type Ptr = *mut c_void;

alloc_handler!(malloc, CudaMalloc, Device, Ptr, (), stream = 0, flags = 0);
alloc_handler!(
    malloc_host,
    CudaMallocHost,
    HostPinned,
    Ptr,
    (),
    stream = 0,
    flags = 0
);
alloc_handler!(malloc_managed, CudaMallocManaged, Managed, Ptr, (flags: u32), stream = 0, flags = flags);
alloc_handler!(host_alloc, CudaHostAlloc, HostPinned, Ptr, (flags: u32), stream = 0, flags = flags);
alloc_handler!(malloc_async, CudaMallocAsync, Async, Ptr, (stream: Ptr), stream = stream as u64, flags = 0);

unsafe fn malloc_from_pool_async(
    real: unsafe extern "C" fn(*mut Ptr, usize, Ptr, Ptr) -> i32,
    caller: usize,
    devptr: *mut Ptr,
    size: usize,
    pool: Ptr,
    stream: Ptr,
) -> i32 {
    let call = Call::begin(Api::CudaMallocFromPoolAsync, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(devptr, size, pool, stream) };
    call.end(r, || Op::Alloc {
        kind: MemKind::Async,
        // SAFETY: written by the real call when it succeeded.
        ptr: unsafe { out(devptr, r) },
        size: size as u64,
        stream: stream as u64,
        pool: pool as u64,
        flags: 0,
        pitch: 0,
    });
    r
}

unsafe fn free_async(
    real: unsafe extern "C" fn(Ptr, Ptr) -> i32,
    caller: usize,
    ptr: Ptr,
    stream: Ptr,
) -> i32 {
    Call::run(
        Api::CudaFreeAsync,
        caller,
        Order::Destroy,
        // SAFETY: the program's own arguments.
        || unsafe { real(ptr, stream) },
        |_| Op::Free {
            ptr: ptr as u64,
            stream: stream as u64,
        },
    )
}

unsafe fn host_register(
    real: unsafe extern "C" fn(Ptr, usize, u32) -> i32,
    caller: usize,
    ptr: Ptr,
    size: usize,
    flags: u32,
) -> i32 {
    let call = Call::begin(Api::CudaHostRegister, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ptr, size, flags) };
    call.end(r, || Op::HostRegister {
        ptr: ptr as u64,
        size: size as u64,
        flags,
    });
    r
}

release_handler!(free, CudaFree, Ptr, |ptr| Op::Free {
    ptr: ptr as u64,
    stream: 0
});
release_handler!(free_host, CudaFreeHost, Ptr, |ptr| Op::FreeHost {
    ptr: ptr as u64
});
release_handler!(host_unregister, CudaHostUnregister, Ptr, |ptr| {
    Op::HostUnregister { ptr: ptr as u64 }
});
release_handler!(free_array, CudaFreeArray, Ptr, |array| Op::ArrayDestroy {
    array: array as u64
});
release_handler!(mem_pool_destroy, CudaMemPoolDestroy, Ptr, |pool| {
    Op::PoolDestroy { pool: pool as u64 }
});

handler!(malloc_pitch, CudaMallocPitch, Create,
    (devptr: *mut Ptr, pitch: *mut usize, width: usize, height: usize),
    // SAFETY: the call's own out-parameters.
    |r| unsafe { super::pitched(r, devptr.cast(), pitch, width, height, 0) });
handler!(mem_pool_create, CudaMemPoolCreate, Create,
    (pool: *mut Ptr, props: *const MemPoolProps),
    // SAFETY: the call's own arguments.
    |r| unsafe { super::pool_created(r, pool, props) });

unsafe fn malloc_3d(
    real: unsafe extern "C" fn(*mut PitchedPtr, Extent) -> i32,
    caller: usize,
    pitched: *mut PitchedPtr,
    extent: Extent,
) -> i32 {
    let call = Call::begin(Api::CudaMalloc3D, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(pitched, extent) };
    call.end(r, || {
        let rows = extent.height.max(1) as u64 * extent.depth.max(1) as u64;
        let (ptr, pitch) = if r == 0 && !pitched.is_null() {
            // SAFETY: the real call filled the cudaPitchedPtr it was given.
            let p = unsafe { &*pitched };
            (p.ptr as u64, p.pitch as u64)
        } else {
            (0, 0)
        };
        Op::Alloc {
            kind: MemKind::Pitched,
            ptr,
            size: if r == 0 {
                pitch * rows
            } else {
                extent.width as u64 * rows
            },
            stream: 0,
            pool: 0,
            flags: 0,
            pitch,
        }
    });
    r
}

fn channel_bytes(desc: *const ChannelFormatDesc) -> u64 {
    if desc.is_null() {
        return 0;
    }
    // SAFETY: a non-null descriptor the program passed to the real call.
    let d = unsafe { &*desc };
    (d.x.max(0) + d.y.max(0) + d.z.max(0) + d.w.max(0)) as u64 / 8
}

unsafe fn malloc_array(
    real: unsafe extern "C" fn(*mut Ptr, *const ChannelFormatDesc, usize, usize, u32) -> i32,
    caller: usize,
    array: *mut Ptr,
    desc: *const ChannelFormatDesc,
    width: usize,
    height: usize,
    flags: u32,
) -> i32 {
    let call = Call::begin(Api::CudaMallocArray, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(array, desc, width, height, flags) };
    call.end(r, || Op::ArrayCreate {
        // SAFETY: written by the real call when it succeeded.
        array: unsafe { out(array, r) },
        bytes: width as u64 * height.max(1) as u64 * channel_bytes(desc),
        width: width as u64,
        height: height as u64,
        depth: 0,
        format: 0,
        channels: 0,
    });
    r
}

unsafe fn malloc_3d_array(
    real: unsafe extern "C" fn(*mut Ptr, *const ChannelFormatDesc, Extent, u32) -> i32,
    caller: usize,
    array: *mut Ptr,
    desc: *const ChannelFormatDesc,
    extent: Extent,
    flags: u32,
) -> i32 {
    let call = Call::begin(Api::CudaMalloc3DArray, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(array, desc, extent, flags) };
    call.end(r, || Op::ArrayCreate {
        // SAFETY: written by the real call when it succeeded.
        array: unsafe { out(array, r) },
        bytes: extent.width as u64
            * extent.height.max(1) as u64
            * extent.depth.max(1) as u64
            * channel_bytes(desc),
        width: extent.width as u64,
        height: extent.height as u64,
        depth: extent.depth as u64,
        format: 0,
        channels: 0,
    });
    r
}

handler!(mem_pool_trim_to, CudaMemPoolTrimTo, Create, (pool: Ptr, keep: usize), |_r| Op::PoolTrim {
    pool: pool as u64,
    keep: keep as u64,
});

unsafe fn device_reset(real: unsafe extern "C" fn() -> i32, caller: usize) -> i32 {
    // The device is gone from the thread once the reset is done: ask before.
    let (device, _) = context::current();
    let call = Call::begin(Api::CudaDeviceReset, caller, Order::Destroy);
    // SAFETY: no arguments.
    let r = unsafe { real() };
    call.end(r, || Op::DeviceReset { device });
    r
}

hooks! {
    fn cudaMalloc(devptr: *mut Ptr, size: usize) -> i32, missing 3 => malloc;
    fn cudaFree(ptr: Ptr) -> i32, missing 3 => free;
    fn cudaMallocAsync(devptr: *mut Ptr, size: usize, stream: Ptr) -> i32, missing 3 => malloc_async;
    fn cudaFreeAsync(ptr: Ptr, stream: Ptr) -> i32, missing 3 => free_async;
    fn cudaMallocFromPoolAsync(devptr: *mut Ptr, size: usize, pool: Ptr, stream: Ptr) -> i32, missing 3 => malloc_from_pool_async;
    fn cudaMallocManaged(devptr: *mut Ptr, size: usize, flags: u32) -> i32, missing 3 => malloc_managed;
    fn cudaMallocHost(ptr: *mut Ptr, size: usize) -> i32, missing 3 => malloc_host;
    fn cudaHostAlloc(ptr: *mut Ptr, size: usize, flags: u32) -> i32, missing 3 => host_alloc;
    fn cudaFreeHost(ptr: Ptr) -> i32, missing 3 => free_host;
    fn cudaHostRegister(ptr: Ptr, size: usize, flags: u32) -> i32, missing 3 => host_register;
    fn cudaHostUnregister(ptr: Ptr) -> i32, missing 3 => host_unregister;
    fn cudaMallocPitch(devptr: *mut Ptr, pitch: *mut usize, width: usize, height: usize) -> i32, missing 3 => malloc_pitch;
    fn cudaMalloc3D(pitched: *mut PitchedPtr, extent: Extent) -> i32, missing 3 => malloc_3d;
    fn cudaMallocArray(array: *mut Ptr, desc: *const ChannelFormatDesc, width: usize,
        height: usize, flags: u32) -> i32, missing 3 => malloc_array;
    fn cudaMalloc3DArray(array: *mut Ptr, desc: *const ChannelFormatDesc, extent: Extent,
        flags: u32) -> i32, missing 3 => malloc_3d_array;
    fn cudaFreeArray(array: Ptr) -> i32, missing 3 => free_array;
    fn cudaMemPoolCreate(pool: *mut Ptr, props: *const MemPoolProps) -> i32, missing 3 => mem_pool_create;
    fn cudaMemPoolDestroy(pool: Ptr) -> i32, missing 3 => mem_pool_destroy;
    fn cudaMemPoolTrimTo(pool: Ptr, keep: usize) -> i32, missing 3 => mem_pool_trim_to;
    fn cudaDeviceReset() -> i32, missing 3 => device_reset;
}
