/*
 * cublas.c -- the libcublas.so.13 stand-in ("the math library").
 *
 * Mimics: how the real cuBLAS / cuBLASLt get device memory for their workspaces: not through
 * libcudart but straight from the driver, with dlsym(dlopen("libcuda.so.1"), "cuMemAlloc_v2")
 * and "cuMemFree_v2" (seen in the dlsym log of a real PyTorch process).  The library has
 * DT_NEEDED on libcudart.so.13 like the real one and uses it for context set-up
 * (cublasCreate_v2 -> cudaGetDevice + cudaFree(NULL)).  The first cublasStandinGemm of a handle
 * allocates a 4 MiB workspace that lives until cublasDestroy_v2, unless the caller supplied a
 * big enough one with cublasSetWorkspace_v2.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cuda_standin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define CUBLAS_API __attribute__((visibility("default")))
#define HANDLE_MAGIC 0x63626c73u /* "cbls" */
#define WORKSPACE_BYTES (4u << 20)

struct cublasContext {
    uint32_t magic;
    int device;
    CUdeviceptr workspace; /* allocated by the library */
    void *user_ws;         /* given by cublasSetWorkspace_v2 */
    size_t user_ws_size;
};

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static PFN_cuMemAlloc_v3020 drv_alloc;
static PFN_cuMemFree_v3020 drv_free;

static void drv_resolve(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return;
    drv_alloc = (PFN_cuMemAlloc_v3020)(uintptr_t)dlsym(h, "cuMemAlloc_v2");
    drv_free = (PFN_cuMemFree_v3020)(uintptr_t)dlsym(h, "cuMemFree_v2");
}

static int valid(cublasHandle_t h) { return h && h->magic == HANDLE_MAGIC; }

CUBLAS_API cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaFree(NULL) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasContext *c = calloc(1, sizeof *c);
    if (!c)
        return CUBLAS_STATUS_ALLOC_FAILED;
    c->magic = HANDLE_MAGIC;
    c->device = dev;
    *handle = c;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (handle->workspace && drv_free)
        drv_free(handle->workspace);
    handle->magic = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                                size_t workspaceSizeInBytes)
{
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspaceSizeInBytes && !workspace)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->user_ws = workspace;
    handle->user_ws_size = workspaceSizeInBytes;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasStandinGemm(cublasHandle_t handle, size_t m, size_t n, size_t k)
{
    (void)m;
    (void)n;
    (void)k;
    if (!valid(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (handle->workspace || (handle->user_ws && handle->user_ws_size >= WORKSPACE_BYTES))
        return CUBLAS_STATUS_SUCCESS;
    pthread_once(&drv_once, drv_resolve);
    if (!drv_alloc || !drv_free)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    CUdeviceptr p;
    if (drv_alloc(&p, WORKSPACE_BYTES) != CUDA_SUCCESS)
        return CUBLAS_STATUS_ALLOC_FAILED;
    handle->workspace = p;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasStandinWorkspaceInfo(cublasHandle_t handle, void **ptr,
                                                     size_t *size)
{
    if (!valid(handle) || !ptr || !size)
        return CUBLAS_STATUS_INVALID_VALUE;
    *ptr = (void *)(uintptr_t)handle->workspace;
    *size = handle->workspace ? WORKSPACE_BYTES : 0;
    return CUBLAS_STATUS_SUCCESS;
}
