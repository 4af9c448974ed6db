/*
 * driver_internal.h -- private state of the libcuda.so.1 stand-in (not installed, not exported).
 *
 * Mimics: the real driver keeps all of its bookkeeping behind hidden symbols; only the cu*
 * entry points are visible.  Everything declared here is HIDDEN, and the implementation
 * functions (impl_cu*) are what both the exported entry points and the internal copies handed out
 * under STANDIN_GPA_INTERNAL=1 call, so no call inside the library ever goes through the PLT.
 */
#ifndef DRIVER_INTERNAL_H
#define DRIVER_INTERNAL_H

#include "cuda_standin.h"

#include <pthread.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))

#define MAX_DEVICES 8
#define MAX_CTX 4096
#define MAX_POOLS 256
#define CTX_STACK_DEPTH 32

#define DEV_ALIGN 512ULL
#define GRANULARITY (2ULL << 20)
#define DEV_BASE 0x700000000000ULL   /* device d: DEV_BASE + d * DEV_STRIDE */
#define DEV_STRIDE 0x10000000000ULL
#define VA_BASE 0x600000000000ULL    /* cuMemAddressReserve */
#define VA_SIZE 0x10000000000ULL
#define IPC_BASE 0x500000000000ULL   /* cuIpcOpenMemHandle */
#define IPC_SIZE 0x10000000000ULL
#define HOST_BASE 0x400000000000ULL  /* real, writable host memory (cuMemHostAlloc ...) */
#define HOST_SIZE (1ULL << 30)
#define HOST_ALIGN 4096ULL
#define LEGACY_BASE 0x10000000ULL    /* 32-bit cuMemAlloc: device d at LEGACY_BASE*(d+1) */
#define LEGACY_SIZE 0x10000000ULL
#define CTX_HANDLE_BASE 0xcc000000ULL  /* CUcontext values: base + index * 0x100 */
#define POOL_HANDLE_BASE 0xcd000000ULL /* CUmemoryPool values */
#define FIRST_VMM_HANDLE 0x1000ULL
#define FIRST_SHARE_TOKEN 1000

/* A range allocator: sorted free list, first fit, lowest address first, coalescing. */
struct range {
    uint64_t start, len;
};
struct arena {
    uint64_t base, size;
    struct range *fr;
    size_t n, cap;
};
HIDDEN void arena_init(struct arena *a, uint64_t base, uint64_t size);
HIDDEN uint64_t arena_alloc(struct arena *a, uint64_t bytes, uint64_t align); /* 0: none */
HIDDEN void arena_free(struct arena *a, uint64_t addr, uint64_t bytes);

enum rec_kind { RK_LINEAR, RK_LEGACY, RK_PITCH, RK_MANAGED, RK_ARRAY, RK_ASYNC, RK_IPC };

struct ctx {
    int used;    /* slot in use */
    int alive;   /* created context not destroyed; primary: retain > 0 */
    int primary; /* the device's primary context */
    int device;
    int retain;  /* primary only */
    unsigned flags;
};

struct pool;

/* A device-side allocation (anything with a device address). */
struct rec {
    uint64_t addr;
    uint64_t size;  /* requested */
    uint64_t bytes; /* accounted (rounded) */
    int kind;
    int device;
    struct ctx *ctx;   /* owner: the context current when it was made */
    struct pool *pool; /* RK_ASYNC */
    uint64_t target;   /* RK_IPC: the allocation it maps */
    struct rec *hnext; /* hash chain */
    struct rec *cnext; /* pool cache stack (top = most recently freed) */
};

struct pool {
    int used, alive, device, is_default;
    struct rec *cache; /* stack of cached blocks (still hold device bytes) */
    uint64_t cached_bytes;
};

struct device {
    uint64_t cap, used;
    struct arena arena, legacy;
    int primary_ctx; /* index into g.ctxs */
    int default_pool; /* index into g.pools */
};

/* Virtual memory management objects. */
struct phys {
    uint64_t handle, size;
    int device, htypes;
    int refs; /* handle references (create, retain, import) */
    int maps; /* mappings using it */
    struct phys *next;
};
struct resv {
    uint64_t addr, size;
    struct resv *next;
};
struct mapping {
    uint64_t addr, size, offset;
    struct phys *ph;
    struct mapping *next;
};
struct token {
    int token;
    uint64_t handle;
    struct token *next;
};

/* Host memory (cuMemHostAlloc / cuMemAllocHost) and registrations. */
struct hrec {
    uint64_t addr, size, bytes;
    int from_arena;
    struct hrec *next;
};

#define HASH_BITS 16
#define HASH_N (1u << HASH_BITS)

struct state {
    pthread_mutex_t mu;
    int initialized;
    int ndev;
    struct device dev[MAX_DEVICES];
    struct ctx ctxs[MAX_CTX];
    int nctx;
    struct pool pools[MAX_POOLS];
    int npools;
    struct rec *tab[HASH_N];
    struct arena va, ipc, host;
    int host_mapped; /* 1: host arena mmapped at HOST_BASE, -1: fall back to posix_memalign */
    struct hrec *hosts, *regs;
    struct phys *phys;
    struct resv *resvs;
    struct resv *zombies; /* freed reservations that still had mappings: VA not reusable yet */
    struct mapping *maps;
    struct token *tokens;
    uint64_t next_handle;
    int next_token;
};

extern HIDDEN struct state g;

static inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* core (driver_core.c) */
HIDDEN void lock(void);
HIDDEN void unlock(void);
HIDDEN int is_init(void);
HIDDEN struct ctx *cur_ctx(void); /* the calling thread's current context, or NULL */
HIDDEN CUresult need_ctx(struct ctx **out); /* current and usable context */
HIDDEN struct ctx *ctx_from_handle(CUcontext h);
HIDDEN CUcontext ctx_handle(const struct ctx *c);
HIDDEN struct pool *pool_from_handle(CUmemoryPool h);
HIDDEN CUmemoryPool pool_handle(const struct pool *p);
HIDDEN void rec_insert(struct rec *r);
HIDDEN struct rec *rec_find(uint64_t addr);
HIDDEN struct rec *rec_remove(uint64_t addr);
/* Take `bytes` of device memory: sets *addr or returns CUDA_ERROR_OUT_OF_MEMORY. */
HIDDEN CUresult dev_take(int device, uint64_t bytes, int legacy, uint64_t *addr);
HIDDEN void rec_release(struct rec *r); /* give the bytes back and free the record */
HIDDEN void ctx_free_all(struct ctx *c);  /* every allocation owned by c (caller holds lock) */
HIDDEN void pool_release_cached(struct pool *p, uint64_t keep);

/* implementations (driver_core.c, driver_mem.c, driver_vmm.c, driver_pool.c) */
HIDDEN CUresult impl_cuInit(unsigned int flags);
HIDDEN CUresult impl_cuDriverGetVersion(int *v);
HIDDEN CUresult impl_cuDeviceGet(CUdevice *d, int ordinal);
HIDDEN CUresult impl_cuDeviceGetCount(int *n);
HIDDEN CUresult impl_cuGetErrorName(CUresult e, const char **s);
HIDDEN CUresult impl_cuCtxGetCurrent(CUcontext *pctx);
HIDDEN CUresult impl_cuCtxSetCurrent(CUcontext ctx);
HIDDEN CUresult impl_cuCtxGetDevice(CUdevice *d);
HIDDEN CUresult impl_cuCtxPushCurrent(CUcontext ctx);
HIDDEN CUresult impl_cuCtxPopCurrent(CUcontext *pctx);
HIDDEN CUresult impl_cuCtxCreate(CUcontext *pctx, unsigned flags, CUdevice dev);
HIDDEN CUresult impl_cuCtxDestroy(CUcontext ctx);
HIDDEN CUresult impl_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
HIDDEN CUresult impl_cuDevicePrimaryCtxRelease(CUdevice dev);
HIDDEN CUresult impl_cuDevicePrimaryCtxReset(CUdevice dev);

HIDDEN CUresult impl_cuMemGetInfo(size_t *free, size_t *total);
HIDDEN CUresult impl_cuMemAlloc(CUdeviceptr *dptr, size_t size);
HIDDEN CUresult impl_cuMemAlloc_legacy(unsigned int *dptr, unsigned int size);
HIDDEN CUresult impl_cuMemFree(CUdeviceptr dptr);
HIDDEN CUresult impl_cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h,
                                     unsigned elem);
HIDDEN CUresult impl_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags);
HIDDEN CUresult impl_cuMemHostAlloc(void **pp, size_t size, unsigned flags);
HIDDEN CUresult impl_cuMemFreeHost(void *p);
HIDDEN CUresult impl_cuMemHostRegister(void *p, size_t size, unsigned flags);
HIDDEN CUresult impl_cuMemHostUnregister(void *p);
HIDDEN CUresult impl_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr);
HIDDEN CUresult impl_cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned flags);
HIDDEN CUresult impl_cuIpcCloseMemHandle(CUdeviceptr dptr);
HIDDEN CUresult impl_cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d);
HIDDEN CUresult impl_cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d);
HIDDEN CUresult impl_cuArrayDestroy(CUarray a);

HIDDEN CUresult impl_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                                   int option);
HIDDEN CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags);
HIDDEN CUresult impl_cuMemRelease(CUmemGenericAllocationHandle h);
HIDDEN CUresult impl_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr);
HIDDEN CUresult impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle h, unsigned long long flags);
HIDDEN CUresult impl_cuMemUnmap(CUdeviceptr ptr, size_t size);
HIDDEN CUresult impl_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *d,
                                    size_t count);
HIDDEN CUresult impl_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align,
                                         CUdeviceptr hint, unsigned long long flags);
HIDDEN CUresult impl_cuMemAddressFree(CUdeviceptr ptr, size_t size);
HIDDEN CUresult impl_cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                                  int type, unsigned long long flags);
HIDDEN CUresult impl_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                                    int type);

HIDDEN CUresult impl_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s);
HIDDEN CUresult impl_cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
HIDDEN CUresult impl_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool p,
                                             CUstream s);
HIDDEN CUresult impl_cuMemPoolCreate(CUmemoryPool *p, const CUmemPoolProps *props);
HIDDEN CUresult impl_cuMemPoolDestroy(CUmemoryPool p);
HIDDEN CUresult impl_cuMemPoolTrimTo(CUmemoryPool p, size_t keep);
HIDDEN CUresult impl_cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice dev);

#endif /* DRIVER_INTERNAL_H */
