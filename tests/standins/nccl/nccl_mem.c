/*
 * nccl_mem.c -- ncclMemAlloc / ncclMemFree and buffer / window registration of the libnccl.so.2
 * stand-in.
 *
 * Mimics: NCCL's ncclMemAlloc, which rounds the size up to the VMM granularity (2 MiB) and uses
 * cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess through its cuGetProcAddress
 * table, and ncclMemFree, which does cuMemRetainAllocationHandle, cuMemRelease, cuMemUnmap,
 * cuMemRelease, cuMemAddressFree.  ncclCommRegister / ncclCommWindowRegister only keep host-side
 * bookkeeping (a malloc'd handle), no device memory; deregistering an unknown handle is
 * ncclInvalidArgument.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "nccl_internal.h"

#include <stdlib.h>

struct memrec {
    CUdeviceptr va;
    size_t size;
    struct memrec *next;
};

struct reg {
    ncclComm_t comm;
    void *buff;
    size_t size;
    int window, flags;
    struct reg *next;
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct memrec *mems;
static struct reg *regs;

static void mem_lock(void) { pthread_mutex_lock(&mem_mu); }
static void mem_unlock(void) { pthread_mutex_unlock(&mem_mu); }

__attribute__((constructor)) static void nccl_mem_ctor(void)
{
    pthread_atfork(mem_lock, mem_unlock, mem_unlock);
}

NCCL_API ncclResult_t pncclMemAlloc(void **ptr, size_t size)
{
    if (!ptr || size == 0)
        return ncclInvalidArgument;
    cudaError_t e = rt_ensure();
    int dev = 0;
    if (e == cudaSuccess)
        e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return cuda_result(e);
    struct memrec *m = calloc(1, sizeof *m);
    if (!m)
        return ncclSystemError;
    m->size = (size + VMM_GRANULARITY - 1) / VMM_GRANULARITY * VMM_GRANULARITY;
    ncclResult_t res = vmm_alloc(dev, m->size, &m->va);
    if (res != ncclSuccess) {
        free(m);
        return res;
    }
    mem_lock();
    m->next = mems;
    mems = m;
    mem_unlock();
    *ptr = (void *)(uintptr_t)m->va;
    debug_alloc(dev, "allocator.cc:183", 0, m->size, *ptr);
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclMemFree(void *ptr)
{
    if (!ptr)
        return ncclSuccess;
    CUdeviceptr va = (CUdeviceptr)(uintptr_t)ptr;
    mem_lock();
    struct memrec **pp = &mems;
    while (*pp && (*pp)->va != va)
        pp = &(*pp)->next;
    struct memrec *m = *pp;
    if (m)
        *pp = m->next;
    mem_unlock();
    if (!m)
        return ncclInvalidArgument;
    cudaError_t e = rt_ensure();
    if (e != cudaSuccess)
        return cuda_result(e);
    CUmemGenericAllocationHandle h;
    CUresult r = rt_drv.cuMemRetainAllocationHandle(&h, ptr);
    if (r == CUDA_SUCCESS)
        r = rt_drv.cuMemRelease(h);
    if (r == CUDA_SUCCESS)
        r = rt_drv.cuMemUnmap(va, m->size);
    if (r == CUDA_SUCCESS)
        r = rt_drv.cuMemRelease(h);
    if (r == CUDA_SUCCESS)
        r = rt_drv.cuMemAddressFree(va, m->size);
    free(m);
    return cu_result(r);
}

static ncclResult_t reg_add(ncclComm_t comm, void *buff, size_t size, int window, int flags,
                            struct reg **out)
{
    if (!comm_valid(comm) || !buff || size == 0 || !out)
        return ncclInvalidArgument;
    struct reg *r = calloc(1, sizeof *r);
    if (!r)
        return ncclSystemError;
    r->comm = comm;
    r->buff = buff;
    r->size = size;
    r->window = window;
    r->flags = flags;
    mem_lock();
    r->next = regs;
    regs = r;
    mem_unlock();
    *out = r;
    return ncclSuccess;
}

static ncclResult_t reg_remove(ncclComm_t comm, void *handle, int window)
{
    if (!comm_valid(comm))
        return ncclInvalidArgument;
    mem_lock();
    for (struct reg **pp = &regs; *pp; pp = &(*pp)->next) {
        struct reg *r = *pp;
        if (r == handle && r->comm == comm && r->window == window) {
            *pp = r->next;
            mem_unlock();
            free(r);
            return ncclSuccess;
        }
    }
    mem_unlock();
    return ncclInvalidArgument;
}

NCCL_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                       void **handle)
{
    struct reg *r = NULL;
    ncclResult_t res = reg_add(comm, buff, size, 0, 0, handle ? &r : NULL);
    if (res == ncclSuccess)
        *handle = r;
    return res;
}

NCCL_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle)
{
    return reg_remove(comm, handle, 0);
}

NCCL_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                             ncclWindow_t *win, int winFlags)
{
    struct reg *r = NULL;
    ncclResult_t res = reg_add(comm, buff, size, 1, winFlags, win ? &r : NULL);
    if (res == ncclSuccess)
        *win = (ncclWindow_t)r;
    return res;
}

NCCL_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    return reg_remove(comm, win, 1);
}

/* Like the real libnccl.so.2: the public names are WEAK aliases of GLOBAL pnccl* symbols (the
 * profiling interface). */
NCCL_ALIAS(ncclMemAlloc)
NCCL_ALIAS(ncclMemFree)
NCCL_ALIAS(ncclCommRegister)
NCCL_ALIAS(ncclCommDeregister)
NCCL_ALIAS(ncclCommWindowRegister)
NCCL_ALIAS(ncclCommWindowDeregister)
