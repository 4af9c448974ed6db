/*
 * driver.c -- the exported entry points of the libcuda.so.1 stand-in and its cuGetProcAddress.
 *
 * Mimics: the real libcuda.so.1 exports thin, exactly-named entry points (cuMemAlloc_v2,
 * cuMemAlloc, cuCtxCreate_v4, cuMemAllocAsync_ptsz, ...) over hidden implementation; the library
 * is built with -fvisibility=hidden and -Bsymbolic, so nothing inside it goes through the PLT and
 * an LD_PRELOAD hook only ever sees calls made from outside.  cuGetProcAddress / _v2 take a BASE
 * name plus the caller's cudaVersion and flags and return the ABI version that caller was built
 * against (cuMemAlloc below 3020 -> the 32-bit v1 entry, cuCtxCreate 12050+ -> _v4, PTDS flag ->
 * _ptsz, ...); asked for "cuGetProcAddress" it returns itself, which is how libcudart and NCCL
 * bootstrap.  With STANDIN_GPA_INTERNAL=1 it hands out INTERNAL copies of the entry points (same
 * behaviour, different address, not in the dynamic symbol table), like a driver whose returned
 * pointers are not its exported symbols.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* One exported entry point plus one internal copy with the same behaviour. */
#define ENTRY(name, impl, params, args)                                                            \
    EXPORT CUresult name params { return impl args; }                                            \
    static CUresult internal_##name params { return impl args; }

static CUresult gpa_lookup(const char *sym, void **pfn, int ver, unsigned long long flags,
                           CUdriverProcAddressQueryResult *status);
static CUresult gpa_v1(const char *sym, void **pfn, int ver, unsigned long long flags);

/* cuCtxCreate_v3 (affinity parameters) and _v4 (CUctxCreateParams): the parameters only tune
 * scheduling, so both create the same context as _v2. */
static CUresult ctx_create_v3(CUcontext *c, void *params, int n, unsigned f, CUdevice d)
{
    if (n < 0 || (n > 0 && !params))
        return CUDA_ERROR_INVALID_VALUE;
    return impl_cuCtxCreate(c, f, d);
}

static CUresult ctx_create_v4(CUcontext *c, void *params, unsigned f, CUdevice d)
{
    (void)params;
    return impl_cuCtxCreate(c, f, d);
}

ENTRY(cuInit, impl_cuInit, (unsigned int f), (f))
ENTRY(cuDriverGetVersion, impl_cuDriverGetVersion, (int *v), (v))
ENTRY(cuDeviceGet, impl_cuDeviceGet, (CUdevice *d, int o), (d, o))
ENTRY(cuDeviceGetCount, impl_cuDeviceGetCount, (int *n), (n))
ENTRY(cuGetErrorName, impl_cuGetErrorName, (CUresult e, const char **s), (e, s))
ENTRY(cuCtxGetCurrent, impl_cuCtxGetCurrent, (CUcontext *c), (c))
ENTRY(cuCtxSetCurrent, impl_cuCtxSetCurrent, (CUcontext c), (c))
ENTRY(cuCtxGetDevice, impl_cuCtxGetDevice, (CUdevice *d), (d))
ENTRY(cuCtxPushCurrent_v2, impl_cuCtxPushCurrent, (CUcontext c), (c))
ENTRY(cuCtxPopCurrent_v2, impl_cuCtxPopCurrent, (CUcontext *c), (c))
ENTRY(cuCtxCreate_v2, impl_cuCtxCreate, (CUcontext *c, unsigned int f, CUdevice d), (c, f, d))
ENTRY(cuCtxCreate_v3, ctx_create_v3,
      (CUcontext *c, void *params, int n, unsigned int f, CUdevice d), (c, params, n, f, d))
ENTRY(cuCtxCreate_v4, ctx_create_v4, (CUcontext *c, void *params, unsigned int f, CUdevice d),
      (c, params, f, d))
ENTRY(cuCtxDestroy_v2, impl_cuCtxDestroy, (CUcontext c), (c))
ENTRY(cuDevicePrimaryCtxRetain, impl_cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d), (c, d))
ENTRY(cuDevicePrimaryCtxRelease, impl_cuDevicePrimaryCtxRelease, (CUdevice d), (d))
ENTRY(cuDevicePrimaryCtxRelease_v2, impl_cuDevicePrimaryCtxRelease, (CUdevice d), (d))
ENTRY(cuDevicePrimaryCtxReset, impl_cuDevicePrimaryCtxReset, (CUdevice d), (d))
ENTRY(cuDevicePrimaryCtxReset_v2, impl_cuDevicePrimaryCtxReset, (CUdevice d), (d))

ENTRY(cuMemGetInfo_v2, impl_cuMemGetInfo, (size_t *f, size_t *t), (f, t))
ENTRY(cuMemAlloc_v2, impl_cuMemAlloc, (CUdeviceptr *p, size_t n), (p, n))
ENTRY(cuMemAlloc, impl_cuMemAlloc_legacy, (unsigned int *p, unsigned int n), (p, n))
ENTRY(cuMemFree_v2, impl_cuMemFree, (CUdeviceptr p), (p))
ENTRY(cuMemFree, impl_cuMemFree, (unsigned int p), (p))
ENTRY(cuMemAllocPitch_v2, impl_cuMemAllocPitch,
      (CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e), (p, pitch, w, h, e))
ENTRY(cuMemAllocManaged, impl_cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned int f),
      (p, n, f))
ENTRY(cuMemAllocAsync, impl_cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s))
ENTRY(cuMemAllocAsync_ptsz, impl_cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s),
      (p, n, s))
ENTRY(cuMemFreeAsync, impl_cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
ENTRY(cuMemFreeAsync_ptsz, impl_cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))
ENTRY(cuMemAllocFromPoolAsync, impl_cuMemAllocFromPoolAsync,
      (CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s))
ENTRY(cuMemAllocFromPoolAsync_ptsz, impl_cuMemAllocFromPoolAsync,
      (CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s))
ENTRY(cuMemHostAlloc, impl_cuMemHostAlloc, (void **p, size_t n, unsigned int f), (p, n, f))
ENTRY(cuMemAllocHost_v2, impl_cuMemHostAlloc, (void **p, size_t n), (p, n, 0))
ENTRY(cuMemFreeHost, impl_cuMemFreeHost, (void *p), (p))
ENTRY(cuMemHostRegister_v2, impl_cuMemHostRegister, (void *p, size_t n, unsigned int f), (p, n, f))
ENTRY(cuMemHostRegister, impl_cuMemHostRegister, (void *p, size_t n, unsigned int f), (p, n, f))
ENTRY(cuMemHostUnregister, impl_cuMemHostUnregister, (void *p), (p))

ENTRY(cuMemGetAllocationGranularity, impl_cuMemGetAllocationGranularity,
      (size_t *gr, const CUmemAllocationProp *p, int o), (gr, p, o))
ENTRY(cuMemCreate, impl_cuMemCreate,
      (CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *p,
       unsigned long long f),
      (h, n, p, f))
ENTRY(cuMemRelease, impl_cuMemRelease, (CUmemGenericAllocationHandle h), (h))
ENTRY(cuMemRetainAllocationHandle, impl_cuMemRetainAllocationHandle,
      (CUmemGenericAllocationHandle *h, void *a), (h, a))
ENTRY(cuMemMap, impl_cuMemMap,
      (CUdeviceptr p, size_t n, size_t o, CUmemGenericAllocationHandle h, unsigned long long f),
      (p, n, o, h, f))
ENTRY(cuMemUnmap, impl_cuMemUnmap, (CUdeviceptr p, size_t n), (p, n))
ENTRY(cuMemSetAccess, impl_cuMemSetAccess,
      (CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t c), (p, n, d, c))
ENTRY(cuMemAddressReserve, impl_cuMemAddressReserve,
      (CUdeviceptr *p, size_t n, size_t a, CUdeviceptr h, unsigned long long f), (p, n, a, h, f))
ENTRY(cuMemAddressFree, impl_cuMemAddressFree, (CUdeviceptr p, size_t n), (p, n))
ENTRY(cuMemExportToShareableHandle, impl_cuMemExportToShareableHandle,
      (void *o, CUmemGenericAllocationHandle h, int t, unsigned long long f), (o, h, t, f))
ENTRY(cuMemImportFromShareableHandle, impl_cuMemImportFromShareableHandle,
      (CUmemGenericAllocationHandle *h, void *os, int t), (h, os, t))

ENTRY(cuMemPoolCreate, impl_cuMemPoolCreate, (CUmemoryPool *p, const CUmemPoolProps *pr),
      (p, pr))
ENTRY(cuMemPoolDestroy, impl_cuMemPoolDestroy, (CUmemoryPool p), (p))
ENTRY(cuMemPoolTrimTo, impl_cuMemPoolTrimTo, (CUmemoryPool p, size_t k), (p, k))
ENTRY(cuDeviceGetDefaultMemPool, impl_cuDeviceGetDefaultMemPool, (CUmemoryPool *p, CUdevice d),
      (p, d))

ENTRY(cuIpcGetMemHandle, impl_cuIpcGetMemHandle, (CUipcMemHandle *h, CUdeviceptr p), (h, p))
ENTRY(cuIpcOpenMemHandle_v2, impl_cuIpcOpenMemHandle,
      (CUdeviceptr *p, CUipcMemHandle h, unsigned int f), (p, h, f))
ENTRY(cuIpcOpenMemHandle, impl_cuIpcOpenMemHandle,
      (CUdeviceptr *p, CUipcMemHandle h, unsigned int f), (p, h, f))
ENTRY(cuIpcCloseMemHandle, impl_cuIpcCloseMemHandle, (CUdeviceptr p), (p))

ENTRY(cuArrayCreate_v2, impl_cuArrayCreate, (CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d), (a, d))
ENTRY(cuArray3DCreate_v2, impl_cuArray3DCreate, (CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d),
      (a, d))
ENTRY(cuArrayDestroy, impl_cuArrayDestroy, (CUarray a), (a))

ENTRY(cuGetProcAddress, gpa_v1,
      (const char *s, void **pfn, int v, unsigned long long f), (s, pfn, v, f))
ENTRY(cuGetProcAddress_v2, gpa_lookup,
      (const char *s, void **pfn, int v, unsigned long long f, CUdriverProcAddressQueryResult *st),
      (s, pfn, v, f, st))

/* ------------------------------------------------------------------ cuGetProcAddress table */
struct row {
    const char *base;
    int minver; /* lowest cudaVersion that gets this entry */
    int ptsz;   /* 1: only with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
    void *exported, *internal;
};

#define ROW(base, ver, fn) {base, ver, 0, (void *)fn, (void *)internal_##fn}
#define ROW_PTSZ(base, ver, fn) {base, ver, 1, (void *)fn, (void *)internal_##fn}

static const struct row rows[] = {
    ROW("cuInit", 0, cuInit),
    ROW("cuDriverGetVersion", 0, cuDriverGetVersion),
    ROW("cuDeviceGet", 0, cuDeviceGet),
    ROW("cuDeviceGetCount", 0, cuDeviceGetCount),
    ROW("cuGetErrorName", 0, cuGetErrorName),
    ROW("cuCtxGetCurrent", 0, cuCtxGetCurrent),
    ROW("cuCtxSetCurrent", 0, cuCtxSetCurrent),
    ROW("cuCtxGetDevice", 0, cuCtxGetDevice),
    ROW("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    ROW("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    ROW("cuCtxCreate", 3020, cuCtxCreate_v2),
    ROW("cuCtxCreate", 11040, cuCtxCreate_v3),
    ROW("cuCtxCreate", 12050, cuCtxCreate_v4),
    ROW("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    ROW("cuDevicePrimaryCtxRetain", 0, cuDevicePrimaryCtxRetain),
    ROW("cuDevicePrimaryCtxRelease", 0, cuDevicePrimaryCtxRelease),
    ROW("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    ROW("cuDevicePrimaryCtxReset", 0, cuDevicePrimaryCtxReset),
    ROW("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    ROW("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    ROW("cuMemAlloc", 0, cuMemAlloc),
    ROW("cuMemAlloc", 3020, cuMemAlloc_v2),
    ROW("cuMemFree", 0, cuMemFree),
    ROW("cuMemFree", 3020, cuMemFree_v2),
    ROW("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    ROW("cuMemAllocManaged", 0, cuMemAllocManaged),
    ROW("cuMemAllocAsync", 11020, cuMemAllocAsync),
    ROW_PTSZ("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    ROW("cuMemFreeAsync", 11020, cuMemFreeAsync),
    ROW_PTSZ("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    ROW("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    ROW_PTSZ("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    ROW("cuMemHostAlloc", 0, cuMemHostAlloc),
    ROW("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    ROW("cuMemFreeHost", 0, cuMemFreeHost),
    ROW("cuMemHostRegister", 0, cuMemHostRegister),
    ROW("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    ROW("cuMemHostUnregister", 0, cuMemHostUnregister),
    ROW("cuMemGetAllocationGranularity", 0, cuMemGetAllocationGranularity),
    ROW("cuMemCreate", 0, cuMemCreate),
    ROW("cuMemRelease", 0, cuMemRelease),
    ROW("cuMemRetainAllocationHandle", 0, cuMemRetainAllocationHandle),
    ROW("cuMemMap", 0, cuMemMap),
    ROW("cuMemUnmap", 0, cuMemUnmap),
    ROW("cuMemSetAccess", 0, cuMemSetAccess),
    ROW("cuMemAddressReserve", 0, cuMemAddressReserve),
    ROW("cuMemAddressFree", 0, cuMemAddressFree),
    ROW("cuMemExportToShareableHandle", 0, cuMemExportToShareableHandle),
    ROW("cuMemImportFromShareableHandle", 0, cuMemImportFromShareableHandle),
    ROW("cuMemPoolCreate", 0, cuMemPoolCreate),
    ROW("cuMemPoolDestroy", 0, cuMemPoolDestroy),
    ROW("cuMemPoolTrimTo", 0, cuMemPoolTrimTo),
    ROW("cuDeviceGetDefaultMemPool", 0, cuDeviceGetDefaultMemPool),
    ROW("cuIpcGetMemHandle", 0, cuIpcGetMemHandle),
    ROW("cuIpcOpenMemHandle", 0, cuIpcOpenMemHandle),
    ROW("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    ROW("cuIpcCloseMemHandle", 0, cuIpcCloseMemHandle),
    ROW("cuArrayCreate", 3020, cuArrayCreate_v2),
    ROW("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    ROW("cuArrayDestroy", 0, cuArrayDestroy),
    ROW("cuGetProcAddress", 0, cuGetProcAddress),
    ROW("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

static int gpa_internal_mode(void)
{
    static int mode = -1;
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m < 0) {
        const char *s = getenv("STANDIN_GPA_INTERNAL");
        m = s && *s && strcmp(s, "0") != 0;
        __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

/* The search both entry points share: the best row for (name, version, flags), or NULL with
 * *status saying why. */
static const struct row *gpa_find(const char *sym, int ver, unsigned long long flags,
                                  CUdriverProcAddressQueryResult *status)
{
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct row *best = NULL;
    int named = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct row *r = &rows[i];
        if (strcmp(r->base, sym) != 0)
            continue;
        named = 1;
        if (r->minver > ver || (r->ptsz && !want_ptsz))
            continue;
        if (!best || r->minver > best->minver || (r->minver == best->minver && r->ptsz))
            best = r;
    }
    *status = best    ? CU_GET_PROC_ADDRESS_SUCCESS
              : named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best;
}

static void *gpa_pick(const struct row *r)
{
    return gpa_internal_mode() ? r->internal : r->exported;
}

/* cuGetProcAddress_v2, as observed on a real 580 driver: a name that is unknown (or only known
 * for a newer cudaVersion) still returns CUDA_SUCCESS, with *pfn = NULL and the reason in
 * *symbolStatus (which may be NULL). */
static CUresult gpa_lookup(const char *sym, void **pfn, int ver, unsigned long long flags,
                           CUdriverProcAddressQueryResult *status)
{
    if (!sym || !pfn || (flags & ~3ULL))
        return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult st;
    const struct row *r = gpa_find(sym, ver, flags, &st);
    *pfn = r ? gpa_pick(r) : NULL;
    if (status)
        *status = st;
    return CUDA_SUCCESS;
}

/* The 4-argument cuGetProcAddress, as observed: a miss is CUDA_ERROR_NOT_FOUND and *pfn is left
 * untouched. */
static CUresult gpa_v1(const char *sym, void **pfn, int ver, unsigned long long flags)
{
    if (!sym || !pfn || (flags & ~3ULL))
        return CUDA_ERROR_INVALID_VALUE;
    CUdriverProcAddressQueryResult st;
    const struct row *r = gpa_find(sym, ver, flags, &st);
    if (!r)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = gpa_pick(r);
    return CUDA_SUCCESS;
}
