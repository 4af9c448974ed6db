/*
 * wl_driver.c -- drives the libcuda.so.1 stand-in directly (DT_NEEDED on libcuda.so.1: the plain
 * symbol path) through every memory API, with planted leaks and failures.
 *
 * Mimics: a program written against the driver API (cuInit, primary context, cuMem*, VMM,
 * pools, IPC, arrays, created contexts).  Ground truth with the defaults (2 devices of 1 GiB; the
 * full table is in tests/standins/README.md):
 *   Leaked at exit, device 0 (10 items, used = 8712192 B):
 *     D1 cuMemAlloc_v2 1048576 B; D2 cuMemAllocPitch_v2 3000x20 (pitch 3072) 61440 B;
 *     D3 cuMemAllocManaged 262144 B; H1 cuMemHostAlloc 8192 B (host);
 *     R1 cuMemHostRegister_v2 16384 B registration never unregistered (no device memory);
 *     V1 handle 0x1000 (2 MiB) mapped into reservation 0x600000000000 that was freed while still
 *        mapped (its handle was released: the mapping alone keeps the 2 MiB);
 *     V3 handle 0x1002 (2 MiB) created and never mapped nor released;
 *     A1 cuMemAllocFromPoolAsync 1 MiB from pool 0xcd000200, destroyed with A1 outstanding;
 *     X1 cuIpcOpenMemHandle (v1) mapping 0x500000000000 never closed (no device bytes);
 *     AR1 cuArrayCreate_v2 1024x512 float = 2 MiB.
 *   Failing calls: cuMemAlloc_v2 before cuInit -> 3; without a context -> 201; size 0 -> 1;
 *   with device 1's primary context current after it was released to 0 -> 201;
 *   4 GiB -> 2 (pointer unchanged); cuMemFree_v2 of an unknown pointer -> 1; pitch element size
 *   3 -> 1; second cuMemFreeHost -> 1; second register -> 712; second unregister -> 713;
 *   cuMemUnmap cutting a mapping -> 1; second cuMemRelease of V2 -> 1; export of a handle created
 *   without a shareable type -> 1; second cuArrayDestroy -> 400; second cuCtxDestroy_v2 -> 201.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <string.h>

#define MiB (1024ull * 1024ull)

static CUdeviceptr dalloc(size_t n, int want)
{
    CUdeviceptr p = 0x1; /* sentinel: must stay unchanged on failure */
    CALL(want, cuMemAlloc_v2(&p, n), "cuMemAlloc_v2(%zu) = %d ptr=0x%llx", n, RC, p);
    return p;
}

static void dfree(CUdeviceptr p, int want)
{
    CALL(want, cuMemFree_v2(p), "cuMemFree_v2(0x%llx) = %d", p, RC);
}

static size_t used(void)
{
    size_t f = 0, t = 0;
    CALL(0, cuMemGetInfo_v2(&f, &t), "cuMemGetInfo_v2 = %d free=%zu total=%zu used=%zu", RC, f, t,
         t - f);
    return t - f;
}

static CUmemGenericAllocationHandle create(size_t size, int dev, int htypes)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = htypes;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h = 0;
    CALL(0, cuMemCreate(&h, size, &prop, 0), "cuMemCreate(%zu, dev %d, types %d) = %d handle=0x%llx",
         size, dev, htypes, RC, h);
    return h;
}

int main(void)
{
    int n = 0, v = 0;
    CUdevice d0 = -1;
    CUcontext pctx = NULL, cur = NULL;
    dalloc(4096, CUDA_ERROR_NOT_INITIALIZED);
    CALL(0, cuInit(0), "cuInit(0) = %d", RC);
    CALL(0, cuDriverGetVersion(&v), "cuDriverGetVersion = %d version=%d", RC, v);
    CALL(0, cuDeviceGetCount(&n), "cuDeviceGetCount = %d count=%d", RC, n);
    CALL(0, cuDeviceGet(&d0, 0), "cuDeviceGet(0) = %d device=%d", RC, d0);
    dalloc(4096, CUDA_ERROR_INVALID_CONTEXT);
    CALL(0, cuDevicePrimaryCtxRetain(&pctx, 0), "cuDevicePrimaryCtxRetain(0) = %d ctx=0x%llx", RC,
         P(pctx));
    CALL(0, cuCtxSetCurrent(pctx), "cuCtxSetCurrent(0x%llx) = %d", P(pctx), RC);
    CALL(0, cuCtxGetCurrent(&cur), "cuCtxGetCurrent = %d ctx=0x%llx", RC, P(cur));
    CALL(0, cuCtxGetDevice(&d0), "cuCtxGetDevice = %d device=%d", RC, d0);
    EXPECT(used(), 0);

    /* Linear memory. */
    CUdeviceptr d1 = dalloc(1 * MiB, 0);
    CUdeviceptr t = dalloc(4096, 0);
    dfree(t, 0);
    EXPECT(dalloc(4096, 0), t); /* reused */
    dfree(t, 0);
    dalloc(0, CUDA_ERROR_INVALID_VALUE);
    EXPECT(dalloc(4096 * MiB, CUDA_ERROR_OUT_OF_MEMORY), 1);
    dfree(0x7000deadbe00ull, CUDA_ERROR_INVALID_VALUE);

    /* Pitched and managed. */
    CUdeviceptr d2 = 0, d3 = 0, tm = 0;
    size_t pitch = 0;
    CALL(0, cuMemAllocPitch_v2(&d2, &pitch, 3000, 20, 4),
         "cuMemAllocPitch_v2(3000, 20, 4) = %d ptr=0x%llx pitch=%zu", RC, d2, pitch);
    EXPECT(pitch, 3072);
    CALL(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch_v2(&t, &pitch, 3000, 20, 3),
         "cuMemAllocPitch_v2(3000, 20, 3) = %d", RC);
    CALL(0, cuMemAllocManaged(&d3, 262144, CU_MEM_ATTACH_GLOBAL),
         "cuMemAllocManaged(262144, global) = %d ptr=0x%llx", RC, d3);
    CALL(0, cuMemAllocManaged(&tm, 8192, CU_MEM_ATTACH_HOST),
         "cuMemAllocManaged(8192, host) = %d ptr=0x%llx", RC, tm);
    dfree(tm, 0);

    /* Host memory and registration. */
    void *h1 = NULL, *th = NULL;
    CALL(0, cuMemHostAlloc(&h1, 8192, CU_MEMHOSTALLOC_DEVICEMAP),
         "cuMemHostAlloc(8192, devicemap) = %d ptr=0x%llx", RC, P(h1));
    memset(h1, 1, 8192);
    CALL(0, cuMemAllocHost_v2(&th, 4096), "cuMemAllocHost_v2(4096) = %d ptr=0x%llx", RC, P(th));
    memset(th, 2, 4096);
    CALL(0, cuMemFreeHost(th), "cuMemFreeHost(0x%llx) = %d", P(th), RC);
    CALL(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(th), "cuMemFreeHost(0x%llx) = %d", P(th), RC);
    static char rbuf[32768], r1buf[16384];
    CALL(0, cuMemHostRegister_v2(rbuf, sizeof rbuf, 0), "cuMemHostRegister_v2(buf, 32768) = %d", RC);
    CALL(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cuMemHostRegister(rbuf, sizeof rbuf, 0),
         "cuMemHostRegister(buf, 32768) = %d", RC);
    CALL(0, cuMemHostUnregister(rbuf), "cuMemHostUnregister(buf) = %d", RC);
    CALL(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(rbuf),
         "cuMemHostUnregister(buf) = %d", RC);
    CALL(0, cuMemHostRegister_v2(r1buf, sizeof r1buf, CU_MEMHOSTREGISTER_PORTABLE),
         "cuMemHostRegister_v2(r1buf, 16384) = %d", RC);

    /* Virtual memory management. */
    size_t gran = 0;
    CUmemAllocationProp gp;
    memset(&gp, 0, sizeof gp);
    gp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    gp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CALL(0, cuMemGetAllocationGranularity(&gran, &gp, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
         "cuMemGetAllocationGranularity = %d granularity=%zu", RC, gran);
    CUdeviceptr va1 = 0, va2 = 0;
    CALL(0, cuMemAddressReserve(&va1, 8 * MiB, 0, 0, 0), "cuMemAddressReserve(8 MiB) = %d va=0x%llx",
         RC, va1);
    CUmemGenericAllocationHandle v1 = create(2 * MiB, 0, 0), v2 = create(2 * MiB, 0, 0);
    CALL(0, cuMemMap(va1, 2 * MiB, 0, v1, 0), "cuMemMap(0x%llx, 2 MiB, V1) = %d", va1, RC);
    CALL(0, cuMemMap(va1 + 2 * MiB, 2 * MiB, 0, v2, 0), "cuMemMap(0x%llx, 2 MiB, V2) = %d",
         va1 + 2 * MiB, RC);
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CALL(0, cuMemSetAccess(va1, 4 * MiB, &ad, 1), "cuMemSetAccess(0x%llx, 4 MiB) = %d", va1, RC);
    CALL(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va1, 3 * MiB), "cuMemUnmap(0x%llx, 3 MiB) = %d", va1, RC);
    CALL(0, cuMemUnmap(va1 + 2 * MiB, 2 * MiB), "cuMemUnmap(0x%llx, 2 MiB) = %d", va1 + 2 * MiB, RC);
    CALL(0, cuMemRelease(v2), "cuMemRelease(0x%llx) = %d", v2, RC);
    CALL(CUDA_ERROR_INVALID_VALUE, cuMemRelease(v2), "cuMemRelease(0x%llx) = %d", v2, RC);
    CUmemGenericAllocationHandle hr = 0;
    CALL(0, cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(va1 + 4096)),
         "cuMemRetainAllocationHandle(0x%llx) = %d handle=0x%llx", va1 + 4096, RC, hr);
    EXPECT(hr, v1);
    CALL(0, cuMemRelease(hr), "cuMemRelease(0x%llx) = %d", hr, RC);
    CALL(0, cuMemRelease(v1), "cuMemRelease(0x%llx) = %d", v1, RC);
    CALL(0, cuMemAddressFree(va1, 8 * MiB), "cuMemAddressFree(0x%llx, 8 MiB) = %d (V1 still mapped)",
         va1, RC);
    CUmemGenericAllocationHandle v3 = create(2 * MiB, 0, 0);
    CUmemGenericAllocationHandle v4 = create(2 * MiB, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    int tok = -1, tok3 = -1;
    CUmemGenericAllocationHandle imp = 0;
    CALL(0, cuMemExportToShareableHandle(&tok, v4, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         "cuMemExportToShareableHandle(0x%llx) = %d token=%d", v4, RC, tok);
    CALL(CUDA_ERROR_INVALID_VALUE,
         cuMemExportToShareableHandle(&tok3, v3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         "cuMemExportToShareableHandle(0x%llx) = %d", v3, RC);
    CALL(0, cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)tok,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         "cuMemImportFromShareableHandle(token %d) = %d handle=0x%llx", tok, RC, imp);
    CALL(0, cuMemRelease(imp), "cuMemRelease(0x%llx) = %d", imp, RC);
    CALL(0, cuMemRelease(v4), "cuMemRelease(0x%llx) = %d", v4, RC);
    CALL(0, cuMemAddressReserve(&va2, 4 * MiB, 0, 0, 0), "cuMemAddressReserve(4 MiB) = %d va=0x%llx",
         RC, va2);
    CUmemGenericAllocationHandle v5 = create(4 * MiB, 0, 0);
    CALL(0, cuMemMap(va2, 4 * MiB, 0, v5, 0), "cuMemMap(0x%llx, 4 MiB, V5) = %d", va2, RC);
    CALL(0, cuMemSetAccess(va2, 4 * MiB, &ad, 1), "cuMemSetAccess(0x%llx, 4 MiB) = %d", va2, RC);
    CALL(0, cuMemUnmap(va2, 4 * MiB), "cuMemUnmap(0x%llx, 4 MiB) = %d", va2, RC);
    CALL(0, cuMemRelease(v5), "cuMemRelease(0x%llx) = %d", v5, RC);
    CALL(0, cuMemAddressFree(va2, 4 * MiB), "cuMemAddressFree(0x%llx, 4 MiB) = %d", va2, RC);

    /* Pools and stream-ordered allocation. */
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 0;
    CUmemoryPool p1 = NULL, dp = NULL;
    CUdeviceptr a1 = 0, a2 = 0, a3 = 0, a4 = 0;
    CALL(0, cuMemPoolCreate(&p1, &pp), "cuMemPoolCreate(device 0) = %d pool=0x%llx", RC, P(p1));
    CALL(0, cuMemAllocFromPoolAsync(&a1, 1 * MiB, p1, NULL),
         "cuMemAllocFromPoolAsync(1 MiB, P1) = %d ptr=0x%llx", RC, a1);
    CALL(0, cuMemAllocFromPoolAsync(&a2, 65536, p1, NULL),
         "cuMemAllocFromPoolAsync(65536, P1) = %d ptr=0x%llx", RC, a2);
    CALL(0, cuMemFreeAsync(a2, NULL), "cuMemFreeAsync(0x%llx) = %d", a2, RC);
    CALL(0, cuMemPoolTrimTo(p1, 0), "cuMemPoolTrimTo(P1, 0) = %d", RC);
    CALL(0, cuMemPoolDestroy(p1), "cuMemPoolDestroy(P1) = %d (A1 outstanding)", RC);
    CALL(0, cuDeviceGetDefaultMemPool(&dp, 0), "cuDeviceGetDefaultMemPool(0) = %d pool=0x%llx", RC,
         P(dp));
    CALL(0, cuMemAllocAsync(&a3, 4096, NULL), "cuMemAllocAsync(4096) = %d ptr=0x%llx", RC, a3);
    CALL(0, cuMemFreeAsync(a3, NULL), "cuMemFreeAsync(0x%llx) = %d", a3, RC);
    CALL(0, cuMemAllocAsync_ptsz(&a4, 4096, NULL), "cuMemAllocAsync_ptsz(4096) = %d ptr=0x%llx", RC,
         a4);
    EXPECT(a4, a3);
    CALL(0, cuMemFreeAsync_ptsz(a4, NULL), "cuMemFreeAsync_ptsz(0x%llx) = %d", a4, RC);
    CALL(0, cuMemAllocFromPoolAsync_ptsz(&a4, 4096, dp, NULL),
         "cuMemAllocFromPoolAsync_ptsz(4096, default) = %d ptr=0x%llx", RC, a4);
    CALL(0, cuMemFreeAsync(a4, NULL), "cuMemFreeAsync(0x%llx) = %d", a4, RC);
    CALL(0, cuMemPoolTrimTo(dp, 0), "cuMemPoolTrimTo(default, 0) = %d", RC);

    /* IPC. */
    CUdeviceptr i1 = dalloc(65536, 0), x0 = 0, x1 = 0;
    CUipcMemHandle ih;
    CALL(0, cuIpcGetMemHandle(&ih, i1), "cuIpcGetMemHandle(0x%llx) = %d", i1, RC);
    CALL(0, cuIpcOpenMemHandle_v2(&x0, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
         "cuIpcOpenMemHandle_v2 = %d ptr=0x%llx", RC, x0);
    CALL(0, cuIpcCloseMemHandle(x0), "cuIpcCloseMemHandle(0x%llx) = %d", x0, RC);
    CALL(0, cuIpcOpenMemHandle(&x1, ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
         "cuIpcOpenMemHandle = %d ptr=0x%llx", RC, x1);
    dfree(i1, 0);

    /* Arrays. */
    CUDA_ARRAY_DESCRIPTOR ar = {1024, 512, CU_AD_FORMAT_FLOAT, 1};
    CUDA_ARRAY3D_DESCRIPTOR ar3 = {64, 64, 8, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    CUarray ar1 = NULL, ta = NULL;
    CALL(0, cuArrayCreate_v2(&ar1, &ar), "cuArrayCreate_v2(1024x512 float) = %d array=0x%llx", RC,
         P(ar1));
    CALL(0, cuArray3DCreate_v2(&ta, &ar3), "cuArray3DCreate_v2(64x64x8 uchar4) = %d array=0x%llx",
         RC, P(ta));
    CALL(0, cuArrayDestroy(ta), "cuArrayDestroy(0x%llx) = %d", P(ta), RC);
    CALL(CUDA_ERROR_INVALID_HANDLE, cuArrayDestroy(ta), "cuArrayDestroy(0x%llx) = %d", P(ta), RC);

    /* Created contexts: their allocations die with them. */
    CUcontext c1 = NULL, c2 = NULL, c3 = NULL, popped = NULL;
    CALL(0, cuCtxCreate_v2(&c1, 0, 0), "cuCtxCreate_v2(dev 0) = %d ctx=0x%llx", RC, P(c1));
    dalloc(1 * MiB, 0);
    CUdeviceptr cm = 0;
    CALL(0, cuMemAllocManaged(&cm, 65536, CU_MEM_ATTACH_GLOBAL),
         "cuMemAllocManaged(65536, global) = %d ptr=0x%llx", RC, cm);
    CALL(0, cuCtxCreate_v4(&c2, NULL, 0, 1), "cuCtxCreate_v4(dev 1) = %d ctx=0x%llx", RC, P(c2));
    dalloc(2 * MiB, 0);
    CALL(0, cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2 = %d ctx=0x%llx", RC, P(popped));
    CALL(0, cuCtxPushCurrent_v2(c2), "cuCtxPushCurrent_v2(0x%llx) = %d", P(c2), RC);
    EXPECT(used(), 2 * MiB);
    CALL(0, cuCtxDestroy_v2(c2), "cuCtxDestroy_v2(0x%llx) = %d", P(c2), RC);
    EXPECT(used(), 8712192 + 1 * MiB + 65536); /* back on c1, device 0 */
    CALL(0, cuCtxDestroy_v2(c1), "cuCtxDestroy_v2(0x%llx) = %d", P(c1), RC);
    CALL(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy_v2(c1), "cuCtxDestroy_v2(0x%llx) = %d", P(c1), RC);
    CALL(0, cuCtxCreate_v3(&c3, NULL, 0, 0, 0), "cuCtxCreate_v3(dev 0) = %d ctx=0x%llx", RC, P(c3));
    dalloc(4096, 0);
    CALL(0, cuCtxDestroy_v2(c3), "cuCtxDestroy_v2(0x%llx) = %d", P(c3), RC);
    CALL(0, cuCtxGetCurrent(&cur), "cuCtxGetCurrent = %d ctx=0x%llx", RC, P(cur));
    EXPECT(P(cur), P(pctx));

    /* Primary context of device 1: release to 0 and reset free its allocations. */
    CUcontext p1ctx = NULL;
    CALL(0, cuDevicePrimaryCtxRetain(&p1ctx, 1), "cuDevicePrimaryCtxRetain(1) = %d ctx=0x%llx", RC,
         P(p1ctx));
    CALL(0, cuCtxPushCurrent_v2(p1ctx), "cuCtxPushCurrent_v2(0x%llx) = %d", P(p1ctx), RC);
    dalloc(1 * MiB, 0);
    CALL(0, cuDevicePrimaryCtxRelease_v2(1), "cuDevicePrimaryCtxRelease_v2(1) = %d", RC);
    dalloc(4096, CUDA_ERROR_INVALID_CONTEXT);
    CALL(0, cuDevicePrimaryCtxRetain(&p1ctx, 1), "cuDevicePrimaryCtxRetain(1) = %d ctx=0x%llx", RC,
         P(p1ctx));
    EXPECT(used(), 0);
    dalloc(3 * MiB, 0);
    CALL(0, cuDevicePrimaryCtxReset_v2(1), "cuDevicePrimaryCtxReset_v2(1) = %d", RC);
    EXPECT(used(), 0);
    CALL(0, cuDevicePrimaryCtxReset(1), "cuDevicePrimaryCtxReset(1) = %d", RC);
    CALL(0, cuDevicePrimaryCtxRelease(1), "cuDevicePrimaryCtxRelease(1) = %d", RC);
    CALL(0, cuCtxPopCurrent_v2(&popped), "cuCtxPopCurrent_v2 = %d ctx=0x%llx", RC, P(popped));

    const char *name = NULL;
    CALL(0, cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &name), "cuGetErrorName(2) = %d name=%s", RC,
         name);
    EXPECT(used(), 8712192);
    out("leaked: D1=0x%llx D2=0x%llx D3=0x%llx H1=0x%llx V1=0x%llx V3=0x%llx A1=0x%llx X1=0x%llx "
        "AR1=0x%llx",
        d1, d2, d3, P(h1), v1, v3, a1, x1, P(ar1));
    return wl_finish();
}
