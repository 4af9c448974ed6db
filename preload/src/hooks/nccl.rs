//! NCCL hooks. Each NCCL call opens a scope on its thread: the driver calls NCCL makes inside it
//! (through its own static runtime) carry the scope id, and the NCCL event closing the scope names
//! the communicator, so NCCL's buffers are attributed to the communicator that owns them.

use libc::c_void;
use vramtrace_collector::event::{Api, CommEnd, Op};

use super::{out, Call, Order};
use crate::ffi::NcclUniqueId;

type Ptr = *mut c_void;

handler!(comm_init_rank, NcclCommInitRank, Create,
(comm: *mut Ptr, nranks: i32, id: NcclUniqueId, rank: i32),
|r| Op::CommInit {
    // SAFETY: written by the real call when it succeeded.
    comm: unsafe { out(comm, r) },
    nranks,
    rank,
    parent: 0,
    color: 0,
    key: 0,
});
handler!(comm_init_rank_config, NcclCommInitRankConfig, Create,
(comm: *mut Ptr, nranks: i32, id: NcclUniqueId, rank: i32, config: Ptr),
|r| Op::CommInit {
    // SAFETY: written by the real call when it succeeded.
    comm: unsafe { out(comm, r) },
    nranks,
    rank,
    parent: 0,
    color: 0,
    key: 0,
});

unsafe fn comm_init_all(
    real: unsafe extern "C" fn(*mut Ptr, i32, *const i32) -> i32,
    caller: usize,
    comms: *mut Ptr,
    ndev: i32,
    devlist: *const i32,
) -> i32 {
    let call = Call::begin(Api::NcclCommInitAll, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(comms, ndev, devlist) };
    call.end(r, || {
        let n = if r == 0 && !comms.is_null() {
            ndev.max(0) as usize
        } else {
            0
        };
        // SAFETY: on success the real call filled `ndev` communicators; `devlist`, when given,
        // holds `ndev` device ordinals.
        let (c, d) = unsafe {
            let c = (0..n).map(|i| *comms.add(i) as u64).collect();
            let d = (0..n)
                .map(|i| {
                    if devlist.is_null() {
                        i as i32
                    } else {
                        *devlist.add(i)
                    }
                })
                .collect();
            (c, d)
        };
        Op::CommInitAll {
            comms: c,
            devices: d,
        }
    });
    r
}

unsafe fn comm_split(
    real: unsafe extern "C" fn(Ptr, i32, i32, *mut Ptr, Ptr) -> i32,
    caller: usize,
    comm: Ptr,
    color: i32,
    key: i32,
    newcomm: *mut Ptr,
    config: Ptr,
) -> i32 {
    let call = Call::begin(Api::NcclCommSplit, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(comm, color, key, newcomm, config) };
    call.end(r, || Op::CommInit {
        // SAFETY: written by the real call when it succeeded (NULL for NCCL_SPLIT_NOCOLOR).
        comm: unsafe { out(newcomm, r) },
        nranks: 0,
        rank: -1,
        parent: comm as u64,
        color,
        key,
    });
    r
}

/// `ncclCommDestroy`, `ncclCommAbort`, `ncclCommFinalize`.
macro_rules! comm_end_handler {
    ($fn:ident, $api:ident, $how:ident, $order:ident) => {
        unsafe fn $fn(real: unsafe extern "C" fn(Ptr) -> i32, caller: usize, comm: Ptr) -> i32 {
            let call = Call::begin(Api::$api, caller, Order::$order);
            // SAFETY: the program's own argument.
            let r = unsafe { real(comm) };
            call.end(r, || Op::CommEnd {
                comm: comm as u64,
                how: CommEnd::$how,
            });
            r
        }
    };
}
comm_end_handler!(comm_destroy, NcclCommDestroy, Destroy, Destroy);
comm_end_handler!(comm_abort, NcclCommAbort, Abort, Destroy);
comm_end_handler!(comm_finalize, NcclCommFinalize, Finalize, Create);

unsafe fn mem_alloc_labelled(
    real: unsafe extern "C" fn(*mut Ptr, usize) -> i32,
    caller: usize,
    ptr: *mut Ptr,
    size: usize,
) -> i32 {
    let call = Call::begin(Api::NcclMemAlloc, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(ptr, size) };
    call.end(r, || Op::NcclMemAlloc {
        // SAFETY: written by the real call when it succeeded.
        ptr: unsafe { out(ptr, r) },
        size: size as u64,
    });
    r
}

release_handler!(mem_free, NcclMemFree, Ptr, |ptr| Op::NcclMemFree {
    ptr: ptr as u64
});

unsafe fn comm_register(
    real: unsafe extern "C" fn(Ptr, Ptr, usize, *mut Ptr) -> i32,
    caller: usize,
    comm: Ptr,
    buff: Ptr,
    size: usize,
    handle: *mut Ptr,
) -> i32 {
    let call = Call::begin(Api::NcclCommRegister, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(comm, buff, size, handle) };
    call.end(r, || Op::Register {
        comm: comm as u64,
        ptr: buff as u64,
        size: size as u64,
        // SAFETY: written by the real call when it succeeded.
        handle: unsafe { out(handle, r) },
    });
    r
}

unsafe fn comm_deregister(
    real: unsafe extern "C" fn(Ptr, Ptr) -> i32,
    caller: usize,
    comm: Ptr,
    handle: Ptr,
) -> i32 {
    let call = Call::begin(Api::NcclCommDeregister, caller, Order::Destroy);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(comm, handle) };
    call.end(r, || Op::Deregister {
        comm: comm as u64,
        handle: handle as u64,
    });
    r
}

unsafe fn comm_window_register(
    real: unsafe extern "C" fn(Ptr, Ptr, usize, *mut Ptr, i32) -> i32,
    caller: usize,
    comm: Ptr,
    buff: Ptr,
    size: usize,
    win: *mut Ptr,
    flags: i32,
) -> i32 {
    let call = Call::begin(Api::NcclCommWindowRegister, caller, Order::Create);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(comm, buff, size, win, flags) };
    call.end(r, || Op::WindowRegister {
        comm: comm as u64,
        ptr: buff as u64,
        size: size as u64,
        // SAFETY: written by the real call when it succeeded.
        window: unsafe { out(win, r) },
        flags,
    });
    r
}

unsafe fn comm_window_deregister(
    real: unsafe extern "C" fn(Ptr, Ptr) -> i32,
    caller: usize,
    comm: Ptr,
    win: Ptr,
) -> i32 {
    let call = Call::begin(Api::NcclCommWindowDeregister, caller, Order::Destroy);
    // SAFETY: the program's own arguments.
    let r = unsafe { real(comm, win) };
    call.end(r, || Op::WindowDeregister {
        comm: comm as u64,
        window: win as u64,
    });
    r
}

hooks! {
    fn ncclCommInitRank(comm: *mut Ptr, nranks: i32, id: NcclUniqueId, rank: i32) -> i32, missing 3 => comm_init_rank;
    fn ncclCommInitRankConfig(comm: *mut Ptr, nranks: i32, id: NcclUniqueId, rank: i32,
        config: Ptr) -> i32, missing 3 => comm_init_rank_config;
    fn ncclCommInitAll(comms: *mut Ptr, ndev: i32, devlist: *const i32) -> i32, missing 3 => comm_init_all;
    fn ncclCommSplit(comm: Ptr, color: i32, key: i32, newcomm: *mut Ptr, config: Ptr) -> i32, missing 3 => comm_split;
    fn ncclCommDestroy(comm: Ptr) -> i32, missing 3 => comm_destroy;
    fn ncclCommAbort(comm: Ptr) -> i32, missing 3 => comm_abort;
    fn ncclCommFinalize(comm: Ptr) -> i32, missing 3 => comm_finalize;
    fn ncclMemAlloc(ptr: *mut Ptr, size: usize) -> i32, missing 3 => mem_alloc_labelled;
    fn ncclMemFree(ptr: Ptr) -> i32, missing 3 => mem_free;
    fn ncclCommRegister(comm: Ptr, buff: Ptr, size: usize, handle: *mut Ptr) -> i32, missing 3 => comm_register;
    fn ncclCommDeregister(comm: Ptr, handle: Ptr) -> i32, missing 3 => comm_deregister;
    fn ncclCommWindowRegister(comm: Ptr, buff: Ptr, size: usize, win: *mut Ptr, flags: i32)
        -> i32, missing 3 => comm_window_register;
    fn ncclCommWindowDeregister(comm: Ptr, win: Ptr) -> i32, missing 3 => comm_window_deregister;
}
