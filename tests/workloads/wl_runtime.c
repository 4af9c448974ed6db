/*
 * wl_runtime.c -- exercises every CUDA runtime API of the libcudart.so.13 stand-in (linked with
 * DT_NEEDED, the plain symbol path a runtime hook sees) with planted leaks and failures.
 *
 * Mimics: an ordinary CUDA program.  Ground truth (defaults: 2 devices of 1 GiB; see
 * tests/standins/README.md for the table):
 *   Leaked at exit (device 0):
 *     L1 cudaMalloc            1048576 B  0x700000000000
 *     L2 cudaMallocManaged       65536 B  0x700000100000
 *     L3 cudaMallocHost           4096 B  0x400000000000 (host)
 *     L4 cudaMallocPitch 1000x10 pitch 1024 -> 10240 B  0x700000110000
 *     L5 cudaMallocArray float 256x256 -> 262144 B      0x700000112800
 *     L6 cudaMallocFromPoolAsync 131072 B from created pool P1 (P1 never destroyed) 0x700000152800
 *   Device 0 used at exit: 1517568 B.  Device 1: L7 cudaMalloc 2 MiB freed by cudaDeviceReset.
 *   Failing calls: cudaMalloc(2 GiB) -> 2; cudaFree(never allocated) -> 1; second cudaFree
 *   (double free) -> 1; second cudaHostRegister -> 712; second cudaHostUnregister -> 713;
 *   cudaFree(L7) after cudaDeviceReset -> 1.  cudaMalloc(0) -> 0 with NULL and cudaFree(NULL) -> 0,
 *   neither reaching the driver.  Pool P1 = 0xcd000200 (kept), P2 = 0xcd000300 (destroyed).
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <string.h>

#define MiB (1024ull * 1024ull)

static void *dmalloc(size_t n, int want)
{
    void *p = (void *)0x1; /* sentinel: must stay unchanged on failure */
    int rc = cudaMalloc(&p, n);
    out("cudaMalloc(%zu) = %d ptr=0x%llx", n, rc, P(p));
    EXPECT(rc, want);
    return p;
}

static void dfree(void *p, int want)
{
    int rc = cudaFree(p);
    out("cudaFree(0x%llx) = %d", P(p), rc);
    EXPECT(rc, want);
}

static void meminfo(size_t want_used)
{
    size_t f = 0, t = 0;
    int rc = cudaMemGetInfo(&f, &t);
    out("cudaMemGetInfo = %d free=%zu total=%zu used=%zu", rc, f, t, t - f);
    EXPECT(rc, 0);
    EXPECT(t - f, want_used);
}

int main(void)
{
    int n = -1, dev = -1;
    CALL(0, cudaGetDeviceCount(&n), "cudaGetDeviceCount = %d count=%d", RC, n);
    EXPECT(n, 2);
    CALL(0, cudaSetDevice(0), "cudaSetDevice(0) = %d", RC);
    CALL(0, cudaGetDevice(&dev), "cudaGetDevice = %d device=%d", RC, dev);
    meminfo(0);

    /* L1, plus temporaries that reuse one address, then the planted failures. */
    void *l1 = dmalloc(1 * MiB, 0);
    void *t1 = dmalloc(4096, 0);
    dfree(t1, 0);
    void *t2 = dmalloc(4096, 0);
    EXPECT(P(t2), P(t1)); /* the freed address comes back */
    dfree(t2, 0);
    void *oom = dmalloc(2048 * MiB, cudaErrorMemoryAllocation);
    EXPECT(P(oom), 1); /* unchanged */
    dfree((void *)0x7000deadbe00ull, cudaErrorInvalidValue);
    void *df = dmalloc(8192, 0);
    dfree(df, 0);
    dfree(df, cudaErrorInvalidValue);
    void *zero = (void *)0x1;
    CALL(0, cudaMalloc(&zero, 0), "cudaMalloc(0) = %d ptr=0x%llx", RC, P(zero));
    EXPECT(P(zero), 0);
    dfree(NULL, 0);

    /* Managed. */
    void *l2 = NULL, *tm = NULL;
    CALL(0, cudaMallocManaged(&l2, 65536, cudaMemAttachGlobal),
         "cudaMallocManaged(65536, global) = %d ptr=0x%llx", RC, P(l2));
    CALL(0, cudaMallocManaged(&tm, 4096, cudaMemAttachGlobal),
         "cudaMallocManaged(4096, global) = %d ptr=0x%llx", RC, P(tm));
    dfree(tm, 0);

    /* Host memory: real and writable. */
    void *l3 = NULL, *th = NULL;
    CALL(0, cudaMallocHost(&l3, 4096), "cudaMallocHost(4096) = %d ptr=0x%llx", RC, P(l3));
    memset(l3, 0xab, 4096);
    CALL(0, cudaHostAlloc(&th, 8192, cudaHostAllocPortable),
         "cudaHostAlloc(8192, portable) = %d ptr=0x%llx", RC, P(th));
    memset(th, 0xcd, 8192);
    CALL(0, cudaFreeHost(th), "cudaFreeHost(0x%llx) = %d", P(th), RC);
    static char regbuf[65536];
    CALL(0, cudaHostRegister(regbuf, sizeof regbuf, cudaHostRegisterDefault),
         "cudaHostRegister(static buffer, 65536) = %d", RC);
    CALL(cudaErrorHostMemoryAlreadyRegistered,
         cudaHostRegister(regbuf, sizeof regbuf, cudaHostRegisterDefault),
         "cudaHostRegister(static buffer, 65536) = %d", RC);
    CALL(0, cudaHostUnregister(regbuf), "cudaHostUnregister(static buffer) = %d", RC);
    CALL(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(regbuf),
         "cudaHostUnregister(static buffer) = %d", RC);

    /* Pitched and 3D. */
    void *l4 = NULL, *tp = NULL;
    size_t pitch = 0;
    CALL(0, cudaMallocPitch(&l4, &pitch, 1000, 10),
         "cudaMallocPitch(1000, 10) = %d ptr=0x%llx pitch=%zu", RC, P(l4), pitch);
    EXPECT(pitch, 1024);
    CALL(0, cudaMallocPitch(&tp, &pitch, 100, 3),
         "cudaMallocPitch(100, 3) = %d ptr=0x%llx pitch=%zu", RC, P(tp), pitch);
    dfree(tp, 0);
    struct cudaPitchedPtr pp;
    memset(&pp, 0, sizeof pp);
    struct cudaExtent ext3 = {100, 4, 3};
    CALL(0, cudaMalloc3D(&pp, ext3), "cudaMalloc3D(100x4x3) = %d ptr=0x%llx pitch=%zu xsize=%zu ysize=%zu",
         RC, P(pp.ptr), pp.pitch, pp.xsize, pp.ysize);
    dfree(pp.ptr, 0);

    /* Arrays. */
    struct cudaChannelFormatDesc f1 = {32, 0, 0, 0, cudaChannelFormatKindFloat};
    struct cudaChannelFormatDesc c4 = {8, 8, 8, 8, cudaChannelFormatKindUnsigned};
    struct cudaChannelFormatDesc f4 = {32, 32, 32, 32, cudaChannelFormatKindFloat};
    cudaArray_t l5 = NULL, ta = NULL, t3 = NULL;
    CALL(0, cudaMallocArray(&l5, &f1, 256, 256, 0), "cudaMallocArray(float, 256x256) = %d array=0x%llx",
         RC, P(l5));
    CALL(0, cudaMallocArray(&ta, &c4, 64, 16, 0), "cudaMallocArray(uchar4, 64x16) = %d array=0x%llx",
         RC, P(ta));
    CALL(0, cudaFreeArray(ta), "cudaFreeArray(0x%llx) = %d", P(ta), RC);
    struct cudaExtent ext = {16, 16, 4};
    CALL(0, cudaMalloc3DArray(&t3, &f4, ext, 0), "cudaMalloc3DArray(float4, 16x16x4) = %d array=0x%llx",
         RC, P(t3));
    CALL(0, cudaFreeArray(t3), "cudaFreeArray(0x%llx) = %d", P(t3), RC);

    /* Stream-ordered allocation and pools. */
    cudaStream_t s = NULL;
    CALL(0, cudaStreamCreate(&s), "cudaStreamCreate = %d stream=0x%llx", RC, P(s));
    void *a1 = NULL, *a2 = NULL;
    CALL(0, cudaMallocAsync(&a1, 65536, s), "cudaMallocAsync(65536) = %d ptr=0x%llx", RC, P(a1));
    CALL(0, cudaFreeAsync(a1, s), "cudaFreeAsync(0x%llx) = %d", P(a1), RC);
    CALL(0, cudaMallocAsync(&a2, 65536, s), "cudaMallocAsync(65536) = %d ptr=0x%llx", RC, P(a2));
    EXPECT(P(a2), P(a1)); /* the pool's cached block comes back */
    CALL(0, cudaFreeAsync(a2, s), "cudaFreeAsync(0x%llx) = %d", P(a2), RC);
    cudaMemPool_t dpool = NULL, p1 = NULL, p2 = NULL;
    CALL(0, cudaDeviceGetDefaultMemPool(&dpool, 0), "cudaDeviceGetDefaultMemPool(0) = %d pool=0x%llx",
         RC, P(dpool));
    CALL(0, cudaMemPoolTrimTo(dpool, 0), "cudaMemPoolTrimTo(default, 0) = %d", RC);
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    CALL(0, cudaMemPoolCreate(&p1, &props), "cudaMemPoolCreate(device 0) = %d pool=0x%llx", RC, P(p1));
    void *l6 = NULL, *tpa = NULL;
    CALL(0, cudaMallocFromPoolAsync(&l6, 131072, p1, s),
         "cudaMallocFromPoolAsync(131072, P1) = %d ptr=0x%llx", RC, P(l6));
    CALL(0, cudaMallocFromPoolAsync(&tpa, 4096, p1, s),
         "cudaMallocFromPoolAsync(4096, P1) = %d ptr=0x%llx", RC, P(tpa));
    CALL(0, cudaFreeAsync(tpa, s), "cudaFreeAsync(0x%llx) = %d", P(tpa), RC);
    CALL(0, cudaMemPoolTrimTo(p1, 0), "cudaMemPoolTrimTo(P1, 0) = %d", RC);
    CALL(0, cudaMemPoolCreate(&p2, &props), "cudaMemPoolCreate(device 0) = %d pool=0x%llx", RC, P(p2));
    CALL(0, cudaMemPoolDestroy(p2), "cudaMemPoolDestroy(P2) = %d", RC);
    CALL(0, cudaDeviceSynchronize(), "cudaDeviceSynchronize = %d", RC);
    CALL(0, cudaStreamDestroy(s), "cudaStreamDestroy = %d", RC);
    out("cudaGetErrorString(2) = \"%s\"", cudaGetErrorString(cudaErrorMemoryAllocation));

    /* Driver entry points handed out by the runtime. */
    void *fn = NULL;
    cudaDriverEntryPointQueryResult st = -1;
    CALL(0, cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st),
         "cudaGetDriverEntryPoint(cuMemAlloc) = %d status=%d fn=%s", RC, st, fn ? "non-null" : "NULL");
    EXPECT(st, cudaDriverEntryPointSuccess);
    CUdeviceptr viaep = 0;
    if (fn)
        CALL(0, ((PFN_cuMemAlloc_v3020)(uintptr_t)fn)(&viaep, 12288),
             "  cuMemAlloc_v2 via entry point(12288) = %d ptr=0x%llx", RC, viaep);
    dfree((void *)(uintptr_t)viaep, 0);
    fn = NULL;
    CALL(0, cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 12000,
                                             cudaEnablePerThreadDefaultStream, &st),
         "cudaGetDriverEntryPointByVersion(cuMemAllocAsync, 12000, ptds) = %d status=%d fn=%s", RC, st,
         fn ? "non-null" : "NULL");
    EXPECT(st, cudaDriverEntryPointSuccess);
    fn = (void *)0x1;
    CALL(0, cudaGetDriverEntryPoint("cuNoSuchFunction", &fn, cudaEnableDefault, &st),
         "cudaGetDriverEntryPoint(cuNoSuchFunction) = %d status=%d fn=%s", RC, st,
         fn ? "non-null" : "NULL");
    EXPECT(st, cudaDriverEntryPointSymbolNotFound);
    meminfo(1517568);

    /* Phase 2: device 1, a leak that cudaDeviceReset frees. */
    CALL(0, cudaSetDevice(1), "cudaSetDevice(1) = %d", RC);
    void *l7 = dmalloc(2 * MiB, 0);
    meminfo(2 * MiB);
    CALL(0, cudaDeviceReset(), "cudaDeviceReset = %d", RC);
    meminfo(0);
    dfree(l7, cudaErrorInvalidValue);
    CALL(0, cudaSetDevice(0), "cudaSetDevice(0) = %d", RC);
    meminfo(1517568);
    out("leaked: L1=0x%llx L2=0x%llx L3=0x%llx L4=0x%llx L5=0x%llx L6=0x%llx", P(l1), P(l2), P(l3),
        P(l4), P(l5), P(l6));
    return wl_finish();
}
