/*
 * runtime_internal.h -- private header of the CUDA runtime stand-in (runtime_core.c).
 *
 * Mimics: the real libcudart keeps a table of driver entry points that it fills at first use
 * from cuGetProcAddress (it has no link-time dependency on libcuda).  runtime_core.c is compiled
 * twice: into libcudart.so.13 (RT_API = default visibility, versioned @@libcudart.so.13 through
 * libcudart.map) and, with -DRT_STATIC, into libnccl.so.2 where every cuda* symbol is hidden,
 * exactly like the CUDA runtime that NCCL links statically.
 */
#ifndef RUNTIME_INTERNAL_H
#define RUNTIME_INTERNAL_H

#include "cuda_standin.h"

#ifdef RT_STATIC
#define RT_API __attribute__((visibility("hidden")))
#else
#define RT_API __attribute__((visibility("default")))
#endif
#define RT_HIDDEN __attribute__((visibility("hidden")))

/* The driver entry points the runtime (and NCCL, through its static copy) uses.  Every one is
 * obtained through the cuGetProcAddress pointer that gpa("cuGetProcAddress") returned. */
struct rt_driver {
    PFN_cuGetProcAddress_v12000 gpa;
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxReset)(CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuMemGetInfo)(size_t *, size_t *);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*cuMemAllocHost)(void **, size_t);
    CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
    CUresult (*cuMemFreeHost)(void *);
    CUresult (*cuMemHostRegister)(void *, size_t, unsigned int);
    CUresult (*cuMemHostUnregister)(void *);
    CUresult (*cuMemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
    CUresult (*cuArrayCreate)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*cuArray3DCreate)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*cuArrayDestroy)(CUarray);
    CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*cuMemPoolDestroy)(CUmemoryPool);
    CUresult (*cuMemPoolTrimTo)(CUmemoryPool, size_t);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
    CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
    CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                    unsigned long long);
    CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
};

/* The filled table; only valid after rt_ensure() returned cudaSuccess. */
RT_HIDDEN extern struct rt_driver rt_drv;
/* Lazy process init (dlopen + cuGetProcAddress) and per-thread init (primary context of the
 * current device made current). */
RT_HIDDEN cudaError_t rt_ensure(void);
/* Driver result -> runtime result. */
RT_HIDDEN cudaError_t rt_map(CUresult r);

#endif /* RUNTIME_INTERNAL_H */
