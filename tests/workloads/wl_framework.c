/*
 * wl_framework.c -- loads the framework stand-in like Python loads an extension module
 * (dlopen(libtorch_standin.so, RTLD_NOW | RTLD_LOCAL), so libcudart, libnccl and libcublas sit
 * in a local scope) and runs its three allocator modes and an NCCL process group.
 *
 * Mimics: a PyTorch program with torch.distributed.  Links only libc/libdl; NCCL and runtime
 * functions are looked up with dlsym on the framework's handle.  Ground truth (device 0 unless
 * noted; the full table is in tests/standins/README.md):
 *   Live at exit (owned by libtorch_standin.so, never freed): caching segment S0 = cudaMalloc
 *   2 MiB 0x700000000000 (live tensors 1 MiB + 256 KiB in it); expandable VA reservation
 *   cuMemAddressReserve 64 MiB 0x600000000000 with 2 mapped pages = cuMemCreate handles 0x1000,
 *   0x1001 (2 MiB each; all cuMem* obtained through cudaGetDriverEntryPointByVersion); async
 *   tensor cudaMallocAsync 200000 B.  Used at exit: 6491648 B.
 *   NCCL: main comm (ncclCommInitRank), split comm (ncclCommSplit color 0), comm on device 1
 *   (ncclCommInitAll, aborted); each init allocates 2x4096 (cudaMalloc in NCCL's static runtime),
 *   2 MiB VMM, 4096 host + 64 KiB host (proxy thread); the first all-reduce on a comm 1 MiB.
 *   Everything NCCL allocated is freed when each comm is destroyed/aborted.
 *   Failing calls: ncclCommDeregister(bogus) -> 4; extra ncclGroupEnd -> 5;
 *   ncclCommSplit(NOCOLOR) -> 0 with newcomm NULL.
 * With argument `leak`: the split comm is never destroyed (its 2x4096 + 2 MiB VMM + 1 MiB lazy
 * buffer on device 0, 4096 + 65536 host, and its proxy thread outlive the program: used at exit
 * 9645568 B) and registration reg2 (of the expandable tensor) is never deregistered.
 * With STANDIN_NCCL_LEAK_ON_DESTROY=1: destroy/abort forget each comm's 1 MiB all-reduce buffer
 * (main comm and split comm on device 0, c2 on device 1): +2 MiB used on device 0 (+1 MiB with
 * `leak`, where the split comm is not destroyed anyway).
 */
#include "fw_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <string.h>

#define MiB (1024ull * 1024ull)
#define FN(type, p) ((type)(uintptr_t)(p))

static void *fw;

static void *sym(const char *name)
{
    void *p = dlsym(fw, name);
    if (!p) {
        out("dlsym(%s) = NULL", name);
        exit(1);
    }
    return p;
}

typedef ncclResult_t (*comm_fn)(ncclComm_t);
typedef ncclResult_t (*comm_int_fn)(ncclComm_t, int *);

int main(int argc, char **argv)
{
    int leak = argc > 1 && strcmp(argv[1], "leak") == 0;
    fw = dlopen("libtorch_standin.so", RTLD_NOW | RTLD_LOCAL);
    out("dlopen(libtorch_standin.so, RTLD_LOCAL) = %s", fw ? "handle" : dlerror());
    if (!fw)
        return 1;
    fw_alloc_fn alloc = FN(fw_alloc_fn, sym("fw_alloc"));
    fw_free_fn ffree = FN(fw_free_fn, sym("fw_free"));
    fw_void_fn empty = FN(fw_void_fn, sym("fw_empty_cache"));
    fw_size_fn reserved = FN(fw_size_fn, sym("fw_reserved_bytes"));
    fw_size_fn allocated = FN(fw_size_fn, sym("fw_allocated_bytes"));
    typedef cudaError_t (*meminfo_fn)(size_t *, size_t *);
    meminfo_fn meminfo = FN(meminfo_fn, sym("cudaMemGetInfo"));

    /* Mode 0: caching. */
    void *t0a = alloc(1 * MiB, FW_MODE_CACHING);
    out("fw_alloc(1 MiB, caching) = 0x%llx", P(t0a));
    void *t0b = alloc(512 * 1024, FW_MODE_CACHING);
    out("fw_alloc(512 KiB, caching) = 0x%llx", P(t0b));
    void *t0c = alloc(3 * MiB, FW_MODE_CACHING);
    out("fw_alloc(3 MiB, caching) = 0x%llx", P(t0c));
    CALL(0, ffree(t0b), "fw_free(0x%llx) = %d", P(t0b), RC);
    void *t0d = alloc(256 * 1024, FW_MODE_CACHING);
    out("fw_alloc(256 KiB, caching) = 0x%llx", P(t0d));
    EXPECT(P(t0d), P(t0b)); /* the cached block comes back */
    CALL(0, ffree(t0c), "fw_free(0x%llx) = %d", P(t0c), RC);
    out("fw_reserved_bytes = %zu", reserved());
    CALL(0, empty(), "fw_empty_cache = %d", RC);
    out("fw_reserved_bytes = %zu", reserved());
    EXPECT(reserved(), 2 * MiB);

    /* Mode 1: expandable segments. */
    void *e1 = alloc(3 * MiB, FW_MODE_EXPANDABLE);
    out("fw_alloc(3 MiB, expandable) = 0x%llx", P(e1));
    void *e2 = alloc(1 * MiB, FW_MODE_EXPANDABLE);
    out("fw_alloc(1 MiB, expandable) = 0x%llx", P(e2));
    void *e3 = alloc(2 * MiB, FW_MODE_EXPANDABLE);
    out("fw_alloc(2 MiB, expandable) = 0x%llx", P(e3));
    out("fw_reserved_bytes = %zu", reserved());
    CALL(0, ffree(e3), "fw_free(0x%llx) = %d", P(e3), RC);
    CALL(0, empty(), "fw_empty_cache = %d", RC);
    CALL(0, ffree(e2), "fw_free(0x%llx) = %d", P(e2), RC);
    CALL(0, empty(), "fw_empty_cache = %d", RC);
    out("fw_reserved_bytes = %zu", reserved());
    EXPECT(reserved(), 6 * MiB);

    /* Mode 2: one cudaMallocAsync per tensor. */
    void *a1 = alloc(200000, FW_MODE_ASYNC);
    out("fw_alloc(200000, async) = 0x%llx", P(a1));
    CALL(0, ffree(a1), "fw_free(0x%llx) = %d", P(a1), RC);
    void *a2 = alloc(200000, FW_MODE_ASYNC);
    out("fw_alloc(200000, async) = 0x%llx", P(a2));
    EXPECT(P(a2), P(a1));
    CALL(-1, ffree((void *)0x1234), "fw_free(0x1234) = %d", RC);
    out("fw_reserved_bytes = %zu fw_allocated_bytes = %zu", reserved(), allocated());
    EXPECT(allocated(), 1 * MiB + 256 * 1024 + 3 * MiB + 200192);

    /* NCCL through the framework's scope. */
    typedef ncclResult_t (*ver_fn)(int *);
    typedef const char *(*err_fn)(ncclResult_t);
    typedef ncclResult_t (*memalloc_fn)(void **, size_t);
    typedef ncclResult_t (*memfree_fn)(void *);
    typedef ncclResult_t (*reg_fn)(ncclComm_t, void *, size_t, void **);
    typedef ncclResult_t (*dereg_fn)(ncclComm_t, void *);
    typedef ncclResult_t (*wreg_fn)(ncclComm_t, void *, size_t, ncclWindow_t *, int);
    typedef ncclResult_t (*wdereg_fn)(ncclComm_t, ncclWindow_t);
    typedef ncclResult_t (*split_fn)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
    typedef ncclResult_t (*initall_fn)(ncclComm_t *, int, const int *);
    typedef ncclResult_t (*group_fn)(void);
    typedef ncclResult_t (*ar_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                  ncclComm_t, cudaStream_t);
    int v = 0;
    CALL(0, FN(ver_fn, sym("ncclGetVersion"))(&v), "ncclGetVersion = %d version=%d", RC, v);
    out("ncclGetErrorString(4) = \"%s\"", FN(err_fn, sym("ncclGetErrorString"))(ncclInvalidArgument));
    CALL(0, FN(fw_void_fn, sym("fw_init_process_group"))(), "fw_init_process_group = %d", RC);
    ncclComm_t comm = FN(fw_comm_fn, sym("fw_process_group_comm"))();
    int cnt = -1, rank = -1, cdev = -1;
    CALL(0, FN(comm_int_fn, sym("ncclCommCount"))(comm, &cnt), "ncclCommCount = %d count=%d", RC, cnt);
    CALL(0, FN(comm_int_fn, sym("ncclCommUserRank"))(comm, &rank), "ncclCommUserRank = %d rank=%d",
         RC, rank);
    CALL(0, FN(comm_int_fn, sym("ncclCommCuDevice"))(comm, &cdev), "ncclCommCuDevice = %d device=%d",
         RC, cdev);
    fw_all_reduce_fn all_reduce = FN(fw_all_reduce_fn, sym("fw_all_reduce"));
    for (int i = 0; i < 3; i++)
        CALL(0, all_reduce(a2, 1024), "fw_all_reduce #%d = %d", i + 1, RC);
    void *m = NULL;
    CALL(0, FN(memalloc_fn, sym("ncclMemAlloc"))(&m, 3 * MiB), "ncclMemAlloc(3 MiB) = %d ptr=0x%llx",
         RC, P(m));
    CALL(0, FN(memfree_fn, sym("ncclMemFree"))(m), "ncclMemFree(0x%llx) = %d", P(m), RC);
    void *reg1 = NULL, *reg2 = NULL;
    ncclWindow_t win = NULL;
    reg_fn reg = FN(reg_fn, sym("ncclCommRegister"));
    dereg_fn dereg = FN(dereg_fn, sym("ncclCommDeregister"));
    CALL(0, reg(comm, t0a, 1 * MiB, &reg1), "ncclCommRegister(0x%llx, 1 MiB) = %d -> reg1", P(t0a), RC);
    CALL(0, reg(comm, e1, 3 * MiB, &reg2), "ncclCommRegister(0x%llx, 3 MiB) = %d -> reg2", P(e1), RC);
    CALL(0, dereg(comm, reg1), "ncclCommDeregister(reg1) = %d", RC);
    CALL(ncclInvalidArgument, dereg(comm, (void *)0x1234), "ncclCommDeregister(bogus) = %d", RC);
    if (!leak)
        CALL(0, dereg(comm, reg2), "ncclCommDeregister(reg2) = %d", RC);
    CALL(0, FN(wreg_fn, sym("ncclCommWindowRegister"))(comm, a2, 200000, &win, 0),
         "ncclCommWindowRegister(0x%llx, 200000) = %d -> win", P(a2), RC);
    CALL(0, FN(wdereg_fn, sym("ncclCommWindowDeregister"))(comm, win),
         "ncclCommWindowDeregister(win) = %d", RC);

    ncclComm_t split = NULL, none = (ncclComm_t)0x1, c2 = NULL;
    split_fn splitf = FN(split_fn, sym("ncclCommSplit"));
    ar_fn ar = FN(ar_fn, sym("ncclAllReduce"));
    CALL(0, splitf(comm, 0, 0, &split, NULL), "ncclCommSplit(color 0) = %d -> split", RC);
    CALL(0, splitf(comm, NCCL_SPLIT_NOCOLOR, 0, &none, NULL), "ncclCommSplit(NOCOLOR) = %d newcomm=%s",
         RC, none ? "non-null" : "NULL");
    CALL(0, FN(group_fn, sym("ncclGroupStart"))(), "ncclGroupStart = %d", RC);
    CALL(0, ar(a2, a2, 256, ncclFloat32, ncclSum, split, NULL), "ncclAllReduce(split) = %d", RC);
    CALL(0, FN(group_fn, sym("ncclGroupEnd"))(), "ncclGroupEnd = %d", RC);
    CALL(ncclInvalidUsage, FN(group_fn, sym("ncclGroupEnd"))(), "ncclGroupEnd = %d", RC);
    if (!leak)
        CALL(0, FN(comm_fn, sym("ncclCommDestroy"))(split), "ncclCommDestroy(split) = %d", RC);
    int dl[1] = {1};
    CALL(0, FN(initall_fn, sym("ncclCommInitAll"))(&c2, 1, dl), "ncclCommInitAll(devlist {1}) = %d -> c2",
         RC);
    CALL(0, FN(comm_int_fn, sym("ncclCommCuDevice"))(c2, &cdev), "ncclCommCuDevice(c2) = %d device=%d",
         RC, cdev);
    CALL(0, ar(a2, a2, 256, ncclFloat32, ncclSum, c2, NULL), "ncclAllReduce(c2) = %d", RC);
    CALL(0, FN(comm_fn, sym("ncclCommAbort"))(c2), "ncclCommAbort(c2) = %d", RC);
    CALL(0, FN(comm_fn, sym("ncclCommFinalize"))(comm), "ncclCommFinalize(main) = %d", RC);
    CALL(0, FN(fw_void_fn, sym("fw_destroy_process_group"))(), "fw_destroy_process_group = %d", RC);

    size_t f = 0, t = 0;
    CALL(0, meminfo(&f, &t), "cudaMemGetInfo = %d used=%zu", RC, t - f);
    /* STANDIN_NCCL_LEAK_ON_DESTROY=1: each destroyed comm on device 0 also leaves its 1 MiB. */
    const char *orphan = getenv("STANDIN_NCCL_LEAK_ON_DESTROY");
    size_t orphans = orphan && *orphan && strcmp(orphan, "0") != 0 ? (leak ? 1 : 2) : 0;
    EXPECT(t - f, (leak ? 9645568 : 6491648) + orphans * MiB);
    out("live: S0=0x%llx t0a=0x%llx t0d=0x%llx e1=0x%llx a2=0x%llx", P(t0a), P(t0a), P(t0d), P(e1),
        P(a2));
    return wl_finish();
}
