/*
 * cuda_standin.h -- the CUDA driver / runtime, NCCL and cuBLAS types and prototypes shared by
 * every CPU stand-in library and every workload program of vramtrace's test suite.
 *
 * Mimics: the ABI of the real CUDA 13 headers (cuda.h, cuda_runtime_api.h, driver_types.h,
 * cudaTypedefs.h) and NCCL 2.28 (nccl.h), written by hand.  Result codes are plain ints (a newer
 * library may return values an older enum does not list), struct layouts match the real headers
 * field for field (checked by the _Static_asserts at the end), and the structs that the real API
 * passes BY VALUE (CUipcMemHandle, ncclUniqueId, cudaExtent) are passed by value here too.
 */
#ifndef CUDA_STANDIN_H
#define CUDA_STANDIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ basic types */
typedef int CUresult;
typedef int cudaError_t;
typedef int ncclResult_t;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef struct cudaArray *cudaArray_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
typedef struct ncclConfig_st ncclConfig_t; /* opaque here; the stand-in accepts NULL or anything */
typedef int CUdriverProcAddressQueryResult;
typedef int cudaDriverEntryPointQueryResult;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef int cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;

/* ------------------------------------------------------------------ driver result codes */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CUDA_ERROR_NOT_SUPPORTED 801

/* ------------------------------------------------------------------ runtime result codes */
#define cudaSuccess 0
#define cudaErrorInvalidValue 1
#define cudaErrorMemoryAllocation 2
#define cudaErrorInitializationError 3
#define cudaErrorInvalidDevicePointer 17
#define cudaErrorInsufficientDriver 35
#define cudaErrorInvalidDevice 101
#define cudaErrorDeviceUninitialized 201
#define cudaErrorInvalidResourceHandle 400
#define cudaErrorSymbolNotFound 500
#define cudaErrorHostMemoryAlreadyRegistered 712
#define cudaErrorHostMemoryNotRegistered 713
#define cudaErrorNotSupported 801
#define cudaErrorUnknown 999

/* ------------------------------------------------------------------ NCCL result codes */
#define ncclSuccess 0
#define ncclUnhandledCudaError 1
#define ncclSystemError 2
#define ncclInternalError 3
#define ncclInvalidArgument 4
#define ncclInvalidUsage 5
#define ncclRemoteError 6
#define ncclInProgress 7

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE 22809
#define NCCL_SPLIT_NOCOLOR (-1)
#define NCCL_UNIQUE_ID_BYTES 128

/* ncclDataType_t / ncclRedOp_t values (nccl.h) */
#define ncclInt8 0
#define ncclUint8 1
#define ncclInt32 2
#define ncclUint32 3
#define ncclInt64 4
#define ncclUint64 5
#define ncclFloat16 6
#define ncclFloat32 7
#define ncclFloat64 8
#define ncclBfloat16 9
#define ncclSum 0
#define ncclProd 1
#define ncclMax 2
#define ncclMin 3
#define ncclAvg 4

/* cuBLAS status codes */
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_STATUS_NOT_INITIALIZED 1
#define CUBLAS_STATUS_ALLOC_FAILED 3
#define CUBLAS_STATUS_INVALID_VALUE 7

/* ------------------------------------------------------------------ enums used as plain ints */
/* CUdriverProcAddressQueryResult / cudaDriverEntryPointQueryResult */
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2
#define cudaDriverEntryPointSuccess 0
#define cudaDriverEntryPointSymbolNotFound 1
#define cudaDriverEntryPointVersionNotSufficent 2
/* cuGetProcAddress flags / cudaGetDriverEntryPoint flags */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
#define cudaEnableDefault 0
#define cudaEnableLegacyStream 1
#define cudaEnablePerThreadDefaultStream 2

/* CUarray_format */
#define CU_AD_FORMAT_UNSIGNED_INT8 0x01
#define CU_AD_FORMAT_UNSIGNED_INT16 0x02
#define CU_AD_FORMAT_UNSIGNED_INT32 0x03
#define CU_AD_FORMAT_SIGNED_INT8 0x08
#define CU_AD_FORMAT_SIGNED_INT16 0x09
#define CU_AD_FORMAT_SIGNED_INT32 0x0a
#define CU_AD_FORMAT_HALF 0x10
#define CU_AD_FORMAT_FLOAT 0x20

/* cudaChannelFormatKind */
#define cudaChannelFormatKindSigned 0
#define cudaChannelFormatKindUnsigned 1
#define cudaChannelFormatKindFloat 2

/* CUmemAllocationType, CUmemLocationType, CUmemAllocationHandleType, CUmemAccess_flags */
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_HANDLE_TYPE_NONE 0
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1
#define cudaMemAllocationTypePinned 1
#define cudaMemLocationTypeDevice 1
#define cudaMemHandleTypeNone 0

/* attach / host-alloc / ipc flags */
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_MEM_ATTACH_HOST 0x2
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

/* ------------------------------------------------------------------ structs */
typedef struct CUmemLocation_st {
    int type; /* CUmemLocationType */
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;

typedef struct CUmemPoolProps_st {
    int allocType;   /* CUmemAllocationType */
    int handleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

struct cudaMemLocation {
    int type; /* enum cudaMemLocationType */
    int id;
};

struct cudaMemPoolProps {
    int allocType;   /* enum cudaMemAllocationType */
    int handleTypes; /* enum cudaMemAllocationHandleType */
    struct cudaMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
};

typedef struct CUDA_ARRAY_DESCRIPTOR_st { /* the _v2 layout */
    size_t Width;
    size_t Height;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st { /* the _v2 layout */
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

struct cudaChannelFormatDesc {
    int x;
    int y;
    int z;
    int w;
    int f; /* enum cudaChannelFormatKind */
};

struct cudaExtent {
    size_t width;
    size_t height;
    size_t depth;
};

struct cudaPitchedPtr {
    void *ptr;
    size_t pitch;
    size_t xsize;
    size_t ysize;
};

typedef struct CUipcMemHandle_st {
    char reserved[64];
} CUipcMemHandle;

typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* ------------------------------------------------------------------ driver API (libcuda.so.1) */
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuGetErrorName(CUresult error, const char **pStr);

CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams, unsigned int flags,
                        CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);

CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize); /* legacy 32-bit ABI */
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFree(unsigned int dptr); /* legacy 32-bit ABI */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       int option);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      int handleType, unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        int shHandleType);

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev);

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
CUresult cuArrayDestroy(CUarray hArray);

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                          unsigned long long flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             unsigned long long flags, CUdriverProcAddressQueryResult *symbolStatus);

/* Function-pointer types, named as in the real cudaTypedefs.h (PFN_<name>_v<version>). */
typedef CUresult (*PFN_cuInit_v2000)(unsigned int);
typedef CUresult (*PFN_cuMemAlloc_v2000)(unsigned int *, unsigned int);
typedef CUresult (*PFN_cuMemAlloc_v3020)(CUdeviceptr *, size_t);
typedef CUresult (*PFN_cuMemFree_v2000)(unsigned int);
typedef CUresult (*PFN_cuMemFree_v3020)(CUdeviceptr);
typedef CUresult (*PFN_cuMemAllocAsync_v11020)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*PFN_cuMemFreeAsync_v11020)(CUdeviceptr, CUstream);
typedef CUresult (*PFN_cuMemAllocFromPoolAsync_v11020)(CUdeviceptr *, size_t, CUmemoryPool,
                                                       CUstream);
typedef CUresult (*PFN_cuMemCreate_v10020)(CUmemGenericAllocationHandle *, size_t,
                                           const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*PFN_cuMemRelease_v10020)(CUmemGenericAllocationHandle);
typedef CUresult (*PFN_cuMemRetainAllocationHandle_v11000)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*PFN_cuMemMap_v10020)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                        unsigned long long);
typedef CUresult (*PFN_cuMemUnmap_v10020)(CUdeviceptr, size_t);
typedef CUresult (*PFN_cuMemSetAccess_v10020)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*PFN_cuMemAddressReserve_v10020)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                                   unsigned long long);
typedef CUresult (*PFN_cuMemAddressFree_v10020)(CUdeviceptr, size_t);
typedef CUresult (*PFN_cuCtxGetDevice_v2000)(CUdevice *);
typedef CUresult (*PFN_cuCtxGetCurrent_v4000)(CUcontext *);
typedef CUresult (*PFN_cuCtxSetCurrent_v4000)(CUcontext);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain_v7000)(CUcontext *, CUdevice);
typedef CUresult (*PFN_cuGetProcAddress_v11030)(const char *, void **, int, unsigned long long);
typedef CUresult (*PFN_cuGetProcAddress_v12000)(const char *, void **, int, unsigned long long,
                                                CUdriverProcAddressQueryResult *);

/* ------------------------------------------------------------------ runtime API (libcudart.so.13) */
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent);
cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                            size_t width, size_t height, unsigned int flags);
cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                              struct cudaExtent extent, unsigned int flags);
cudaError_t cudaFreeArray(cudaArray_t array);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult *driverStatus);

/* ------------------------------------------------------------------ NCCL (libnccl.so.2) */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* ------------------------------------------------------------------ cuBLAS (libcublas.so.13) */
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t workspaceSizeInBytes);
/* Stand-in only: a "GEMM" that needs the handle's workspace (allocated on first use). */
cublasStatus_t cublasStandinGemm(cublasHandle_t handle, size_t m, size_t n, size_t k);
/* Stand-in only: where the handle's workspace lives (NULL/0 before the first gemm). */
cublasStatus_t cublasStandinWorkspaceInfo(cublasHandle_t handle, void **ptr, size_t *size);

/* ------------------------------------------------------------------ layout checks */
_Static_assert(sizeof(CUmemLocation) == 8, "CUmemLocation layout");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(offsetof(CUmemAllocationProp, win32HandleMetaData) == 16, "CUmemAllocationProp");
_Static_assert(offsetof(CUmemAllocationProp, allocFlags) == 24, "CUmemAllocationProp");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc layout");
_Static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps layout");
_Static_assert(offsetof(CUmemPoolProps, maxSize) == 24, "CUmemPoolProps layout");
_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "cudaMemPoolProps");
_Static_assert(sizeof(CUDA_ARRAY_DESCRIPTOR) == 24, "CUDA_ARRAY_DESCRIPTOR layout");
_Static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40, "CUDA_ARRAY3D_DESCRIPTOR layout");
_Static_assert(sizeof(struct cudaChannelFormatDesc) == 20, "cudaChannelFormatDesc layout");
_Static_assert(sizeof(struct cudaExtent) == 24, "cudaExtent layout");
_Static_assert(sizeof(struct cudaPitchedPtr) == 32, "cudaPitchedPtr layout");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle layout");
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId layout");

#ifdef __cplusplus
}
#endif

#endif /* CUDA_STANDIN_H */
