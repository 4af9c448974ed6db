/*
 * runtime_core.c -- the CUDA runtime stand-in (libcudart.so.13, and the static copy in
 * libnccl.so.2).
 *
 * Mimics: how the real CUDA 13 runtime reaches the driver.  It has NO DT_NEEDED on libcuda; on
 * first use it does dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), dlsym(h,
 * "cuGetProcAddress_v2"), asks that for "cuGetProcAddress" (cudaVersion 13000, flags 0) and from
 * then on obtains every driver function through the pointer that call returned -- it never calls
 * dlsym for anything else.  Each allocation call makes exactly one driver memory call
 * (cudaMalloc -> cuMemAlloc_v2, cudaMallocHost -> cuMemAllocHost_v2, cudaMallocAsync ->
 * cuMemAllocAsync, cudaMalloc3D -> cuMemAllocPitch_v2, cudaMallocArray -> cuArrayCreate_v2, ...)
 * after a lazy per-thread init that retains the current device's primary context (once per
 * process per device) and makes it current.  cudaMalloc(&p, 0) returns cudaSuccess with p = NULL
 * and no driver call, like the real one.  Internal calls use static functions (no PLT).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define RT_CUDA_VERSION 13000
#define RT_MAX_DEVICES 64
#define RT_MAX_STREAMS 4096
#define RT_STREAM_BASE 0xcf000000ULL

RT_HIDDEN struct rt_driver rt_drv;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_init_rc;
static pthread_mutex_t rt_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext rt_primary[RT_MAX_DEVICES];
static unsigned char rt_live_streams[RT_MAX_STREAMS];
static int rt_next_stream = 1;
static __thread int tls_ready;
static __thread int tls_dev;

#define DRV(name) {#name, offsetof(struct rt_driver, name)}
static const struct {
    const char *base;
    size_t off;
} rt_names[] = {
    DRV(cuInit), DRV(cuDeviceGetCount), DRV(cuDevicePrimaryCtxRetain),
    DRV(cuDevicePrimaryCtxReset), DRV(cuCtxGetCurrent), DRV(cuCtxSetCurrent),
    DRV(cuCtxGetDevice), DRV(cuMemGetInfo), DRV(cuMemAlloc), DRV(cuMemFree),
    DRV(cuMemAllocAsync), DRV(cuMemFreeAsync), DRV(cuMemAllocFromPoolAsync),
    DRV(cuMemAllocManaged), DRV(cuMemAllocHost), DRV(cuMemHostAlloc), DRV(cuMemFreeHost),
    DRV(cuMemHostRegister), DRV(cuMemHostUnregister), DRV(cuMemAllocPitch), DRV(cuArrayCreate),
    DRV(cuArray3DCreate), DRV(cuArrayDestroy), DRV(cuMemPoolCreate), DRV(cuMemPoolDestroy),
    DRV(cuMemPoolTrimTo), DRV(cuDeviceGetDefaultMemPool), DRV(cuMemCreate), DRV(cuMemRelease),
    DRV(cuMemRetainAllocationHandle), DRV(cuMemMap), DRV(cuMemUnmap), DRV(cuMemSetAccess),
    DRV(cuMemAddressReserve), DRV(cuMemAddressFree),
};

static void rt_atfork_prepare(void) { pthread_mutex_lock(&rt_mu); }
static void rt_atfork_release(void) { pthread_mutex_unlock(&rt_mu); }

__attribute__((constructor)) static void rt_ctor(void)
{
    pthread_atfork(rt_atfork_prepare, rt_atfork_release, rt_atfork_release);
}

static void rt_global_init(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        rt_init_rc = cudaErrorInsufficientDriver;
        return;
    }
    PFN_cuGetProcAddress_v12000 boot =
        (PFN_cuGetProcAddress_v12000)(uintptr_t)dlsym(h, "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult st = 0;
    void *fn = NULL;
    if (!boot || boot("cuGetProcAddress", &fn, RT_CUDA_VERSION, 0, &st) != CUDA_SUCCESS || !fn) {
        rt_init_rc = cudaErrorInsufficientDriver;
        return;
    }
    rt_drv.gpa = (PFN_cuGetProcAddress_v12000)(uintptr_t)fn;
    for (size_t i = 0; i < sizeof rt_names / sizeof rt_names[0]; i++) {
        fn = NULL;
        if (rt_drv.gpa(rt_names[i].base, &fn, RT_CUDA_VERSION, 0, &st) != CUDA_SUCCESS || !fn) {
            rt_init_rc = cudaErrorInsufficientDriver;
            return;
        }
        *(void **)((char *)&rt_drv + rt_names[i].off) = fn;
    }
    rt_init_rc = rt_map(rt_drv.cuInit(0));
}

static cudaError_t rt_global(void)
{
    pthread_once(&rt_once, rt_global_init);
    return rt_init_rc;
}

RT_HIDDEN cudaError_t rt_map(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
    }
}

/* Retain device d's primary context (once per process) and make it current in this thread. */
static cudaError_t rt_activate(int d)
{
    int n = 0;
    CUresult r = rt_drv.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS)
        return rt_map(r);
    if (d < 0 || d >= n || d >= RT_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_mutex_lock(&rt_mu);
    if (!rt_primary[d])
        r = rt_drv.cuDevicePrimaryCtxRetain(&rt_primary[d], d);
    CUcontext c = rt_primary[d];
    pthread_mutex_unlock(&rt_mu);
    if (r != CUDA_SUCCESS)
        return rt_map(r);
    if ((r = rt_drv.cuCtxSetCurrent(c)) != CUDA_SUCCESS)
        return rt_map(r);
    tls_dev = d;
    tls_ready = 1;
    return cudaSuccess;
}

RT_HIDDEN cudaError_t rt_ensure(void)
{
    if (__builtin_expect(tls_ready, 1))
        return cudaSuccess;
    cudaError_t e = rt_global();
    if (e != cudaSuccess)
        return e;
    CUcontext cur = NULL;
    CUdevice d;
    if (rt_drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur &&
        rt_drv.cuCtxGetDevice(&d) == CUDA_SUCCESS) {
        tls_dev = d; /* a context the program made current is used as is */
        tls_ready = 1;
        return cudaSuccess;
    }
    return rt_activate(tls_dev);
}

#define ENSURE()                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = rt_ensure();                                                              \
        if (e_ != cudaSuccess)                                                                     \
            return e_;                                                                             \
    } while (0)

/* ------------------------------------------------------------------ devices */
RT_API cudaError_t cudaGetDeviceCount(int *count)
{
    cudaError_t e = rt_global();
    if (e != cudaSuccess)
        return e;
    if (!count)
        return cudaErrorInvalidValue;
    return rt_map(rt_drv.cuDeviceGetCount(count));
}

RT_API cudaError_t cudaSetDevice(int device)
{
    cudaError_t e = rt_global();
    if (e != cudaSuccess)
        return e;
    return rt_activate(device);
}

RT_API cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return cudaErrorInvalidValue;
    ENSURE();
    CUdevice d;
    *device = rt_drv.cuCtxGetDevice(&d) == CUDA_SUCCESS ? d : tls_dev;
    return cudaSuccess;
}

RT_API cudaError_t cudaDeviceReset(void)
{
    ENSURE();
    CUdevice d;
    if (rt_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        d = tls_dev;
    return rt_map(rt_drv.cuDevicePrimaryCtxReset(d));
}

RT_API cudaError_t cudaDeviceSynchronize(void)
{
    ENSURE();
    return cudaSuccess;
}

RT_API cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    ENSURE();
    return rt_map(rt_drv.cuMemGetInfo(free_b, total));
}

/* ------------------------------------------------------------------ linear, managed, pitched */
RT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    ENSURE();
    if (!devPtr)
        return cudaErrorInvalidValue;
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    return rt_map(rt_drv.cuMemAlloc((CUdeviceptr *)devPtr, size));
}

RT_API cudaError_t cudaFree(void *devPtr)
{
    ENSURE();
    if (!devPtr)
        return cudaSuccess;
    return rt_map(rt_drv.cuMemFree((CUdeviceptr)(uintptr_t)devPtr));
}

RT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    ENSURE();
    return rt_map(rt_drv.cuMemAllocManaged((CUdeviceptr *)devPtr, size, flags));
}

RT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    ENSURE();
    return rt_map(rt_drv.cuMemAllocPitch((CUdeviceptr *)devPtr, pitch, width, height, 4));
}

RT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *p, struct cudaExtent extent)
{
    ENSURE();
    if (!p)
        return cudaErrorInvalidValue;
    CUdeviceptr d;
    size_t pitch;
    CUresult r = rt_drv.cuMemAllocPitch(&d, &pitch, extent.width, extent.height * extent.depth, 4);
    if (r != CUDA_SUCCESS)
        return rt_map(r);
    p->ptr = (void *)(uintptr_t)d;
    p->pitch = pitch;
    p->xsize = extent.width;
    p->ysize = extent.height;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ stream-ordered and pools */
RT_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
{
    /* On a thread it has not set up, it asks the driver first and again once it has: the first
     * answer an error, as the real runtime's was on a PyTorch autograd thread's first
     * stream-ordered allocation (two cuMemAllocAsync beneath one cudaMallocAsync, seen on the
     * GPU on 2026-12-07). */
    if (!tls_ready) {
        cudaError_t e = rt_global();
        if (e != cudaSuccess)
            return e;
        CUresult r = rt_drv.cuMemAllocAsync((CUdeviceptr *)devPtr, size, s);
        if (r != CUDA_ERROR_INVALID_CONTEXT)
            return rt_map(r);
    }
    ENSURE();
    return rt_map(rt_drv.cuMemAllocAsync((CUdeviceptr *)devPtr, size, s));
}

RT_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s)
{
    ENSURE();
    if (!devPtr)
        return cudaSuccess;
    return rt_map(rt_drv.cuMemFreeAsync((CUdeviceptr)(uintptr_t)devPtr, s));
}

RT_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                           cudaStream_t s)
{
    ENSURE();
    return rt_map(rt_drv.cuMemAllocFromPoolAsync((CUdeviceptr *)ptr, size, pool, s));
}

RT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props)
{
    ENSURE();
    return rt_map(rt_drv.cuMemPoolCreate(pool, (const CUmemPoolProps *)props));
}

RT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool)
{
    ENSURE();
    return rt_map(rt_drv.cuMemPoolDestroy(pool));
}

RT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep)
{
    ENSURE();
    return rt_map(rt_drv.cuMemPoolTrimTo(pool, minBytesToKeep));
}

RT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device)
{
    ENSURE();
    return rt_map(rt_drv.cuDeviceGetDefaultMemPool(pool, device));
}

/* ------------------------------------------------------------------ host memory */
RT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    ENSURE();
    return rt_map(rt_drv.cuMemAllocHost(ptr, size));
}

RT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    ENSURE();
    return rt_map(rt_drv.cuMemHostAlloc(pHost, size, flags));
}

RT_API cudaError_t cudaFreeHost(void *ptr)
{
    ENSURE();
    if (!ptr)
        return cudaSuccess;
    return rt_map(rt_drv.cuMemFreeHost(ptr));
}

RT_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    ENSURE();
    return rt_map(rt_drv.cuMemHostRegister(ptr, size, flags));
}

RT_API cudaError_t cudaHostUnregister(void *ptr)
{
    ENSURE();
    return rt_map(rt_drv.cuMemHostUnregister(ptr));
}

/* ------------------------------------------------------------------ arrays */
/* A channel description -> (CUarray_format, NumChannels) with the same bytes per element. */
static int rt_array_format(const struct cudaChannelFormatDesc *d, int *format, unsigned *nch)
{
    int bits[4] = {d->x, d->y, d->z, d->w}, n = 0, same = 1;
    for (int i = 0; i < 4; i++) {
        if (bits[i] < 0)
            return 0;
        if (bits[i]) {
            n++;
            same &= bits[i] == d->x;
        }
    }
    if (same && (n == 1 || n == 2 || n == 4)) {
        int f = 0;
        if (d->f == cudaChannelFormatKindFloat)
            f = d->x == 16 ? CU_AD_FORMAT_HALF : d->x == 32 ? CU_AD_FORMAT_FLOAT : 0;
        else if (d->f == cudaChannelFormatKindSigned)
            f = d->x == 8    ? CU_AD_FORMAT_SIGNED_INT8
                : d->x == 16 ? CU_AD_FORMAT_SIGNED_INT16
                : d->x == 32 ? CU_AD_FORMAT_SIGNED_INT32
                             : 0;
        else if (d->f == cudaChannelFormatKindUnsigned)
            f = d->x == 8    ? CU_AD_FORMAT_UNSIGNED_INT8
                : d->x == 16 ? CU_AD_FORMAT_UNSIGNED_INT16
                : d->x == 32 ? CU_AD_FORMAT_UNSIGNED_INT32
                             : 0;
        if (f) {
            *format = f;
            *nch = (unsigned)n;
            return 1;
        }
    }
    /* Otherwise only the element size matters: (x+y+z+w)/8 bytes. */
    switch ((d->x + d->y + d->z + d->w) / 8) {
    case 1: *format = CU_AD_FORMAT_UNSIGNED_INT8; *nch = 1; return 1;
    case 2: *format = CU_AD_FORMAT_UNSIGNED_INT16; *nch = 1; return 1;
    case 4: *format = CU_AD_FORMAT_UNSIGNED_INT32; *nch = 1; return 1;
    case 8: *format = CU_AD_FORMAT_UNSIGNED_INT32; *nch = 2; return 1;
    case 16: *format = CU_AD_FORMAT_UNSIGNED_INT32; *nch = 4; return 1;
    default: return 0;
    }
}

RT_API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                   size_t width, size_t height, unsigned int flags)
{
    (void)flags;
    ENSURE();
    CUDA_ARRAY_DESCRIPTOR d = {.Width = width, .Height = height};
    if (!array || !desc || !rt_array_format(desc, &d.Format, &d.NumChannels))
        return cudaErrorInvalidValue;
    return rt_map(rt_drv.cuArrayCreate((CUarray *)array, &d));
}

RT_API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                     struct cudaExtent extent, unsigned int flags)
{
    ENSURE();
    CUDA_ARRAY3D_DESCRIPTOR d = {
        .Width = extent.width, .Height = extent.height, .Depth = extent.depth, .Flags = flags};
    if (!array || !desc || !rt_array_format(desc, &d.Format, &d.NumChannels))
        return cudaErrorInvalidValue;
    return rt_map(rt_drv.cuArray3DCreate((CUarray *)array, &d));
}

RT_API cudaError_t cudaFreeArray(cudaArray_t array)
{
    ENSURE();
    if (!array)
        return cudaSuccess;
    return rt_map(rt_drv.cuArrayDestroy((CUarray)array));
}

/* ------------------------------------------------------------------ streams */
RT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    ENSURE();
    if (!pStream)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&rt_mu);
    int i = rt_next_stream < RT_MAX_STREAMS ? rt_next_stream++ : 0;
    if (i)
        rt_live_streams[i] = 1;
    pthread_mutex_unlock(&rt_mu);
    if (!i)
        return cudaErrorMemoryAllocation;
    *pStream = (cudaStream_t)(uintptr_t)(RT_STREAM_BASE + (uint64_t)i * 0x100);
    return cudaSuccess;
}

RT_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENSURE();
    uint64_t v = (uint64_t)(uintptr_t)stream;
    uint64_t i = (v - RT_STREAM_BASE) / 0x100;
    cudaError_t e = cudaErrorInvalidResourceHandle;
    pthread_mutex_lock(&rt_mu);
    if (v > RT_STREAM_BASE && (v - RT_STREAM_BASE) % 0x100 == 0 && i < RT_MAX_STREAMS &&
        rt_live_streams[i]) {
        rt_live_streams[i] = 0;
        e = cudaSuccess;
    }
    pthread_mutex_unlock(&rt_mu);
    return e;
}

/* ------------------------------------------------------------------ errors */
RT_API const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unrecognized error code";
    }
}

/* ------------------------------------------------------------------ driver entry points */
static cudaError_t rt_entry_point(const char *symbol, void **funcPtr, int version,
                                  unsigned long long flags,
                                  cudaDriverEntryPointQueryResult *status)
{
    ENSURE();
    if (!symbol || !funcPtr || flags > cudaEnablePerThreadDefaultStream)
        return cudaErrorInvalidValue;
    unsigned long long cuflags = flags == cudaEnablePerThreadDefaultStream
                                     ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                 : flags == cudaEnableLegacyStream ? CU_GET_PROC_ADDRESS_LEGACY_STREAM
                                                                   : CU_GET_PROC_ADDRESS_DEFAULT;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = rt_drv.gpa(symbol, funcPtr, version, cuflags, &st);
    if (status)
        *status = st;
    if (r == CUDA_ERROR_NOT_FOUND) { /* reported through *status, not the return value */
        *funcPtr = NULL;
        return cudaSuccess;
    }
    return rt_map(r);
}

RT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                           unsigned long long flags,
                                           cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_entry_point(symbol, funcPtr, RT_CUDA_VERSION, flags, driverStatus);
}

RT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                    unsigned int cudaVersion,
                                                    unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult *driverStatus)
{
    return rt_entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus);
}
