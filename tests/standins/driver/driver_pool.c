/*
 * driver_pool.c -- stream-ordered allocation and memory pools of the libcuda.so.1 stand-in.
 *
 * Mimics: cuMemAllocAsync / cuMemFreeAsync / cuMemAllocFromPoolAsync (and their _ptsz
 * variants, which share this code) / cuMemPoolCreate / cuMemPoolDestroy / cuMemPoolTrimTo /
 * cuDeviceGetDefaultMemPool.  As with real pools, a block freed with cuMemFreeAsync stays in the
 * pool's cache (cuMemGetInfo still counts it as used) until cuMemPoolTrimTo releases it, and a
 * later allocation of a size that fits a cached block gets the same address back.  The cache is a
 * stack, so a repeated alloc/free of one size is O(1).  Destroying a pool with allocations
 * outstanding succeeds; they stay valid and are freed directly later.
 */
#include "driver_internal.h"

#include <stdlib.h>

static CUresult async_take(struct pool *p, struct ctx *c, uint64_t size, CUdeviceptr *dptr)
{
    uint64_t bytes = round_up(size, DEV_ALIGN);
    for (struct rec **pp = &p->cache; *pp; pp = &(*pp)->cnext) {
        struct rec *r = *pp;
        if (r->bytes < bytes)
            continue;
        *pp = r->cnext;
        r->cnext = NULL;
        p->cached_bytes -= r->bytes;
        r->size = size;
        r->ctx = c;
        rec_insert(r);
        *dptr = r->addr;
        return CUDA_SUCCESS;
    }
    struct rec *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t addr;
    CUresult rc = dev_take(p->device, bytes, 0, &addr);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        /* Like a real pool: give cached memory of the device back and try once more. */
        for (int i = 0; i < g.npools; i++)
            if (g.pools[i].used && g.pools[i].device == p->device)
                pool_release_cached(&g.pools[i], 0);
        rc = dev_take(p->device, bytes, 0, &addr);
    }
    if (rc != CUDA_SUCCESS) {
        free(r);
        return rc;
    }
    r->addr = addr;
    r->size = size;
    r->bytes = bytes;
    r->kind = RK_ASYNC;
    r->device = p->device;
    r->ctx = c;
    r->pool = p;
    rec_insert(r);
    *dptr = addr;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    (void)s;
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c;
    lock();
    CUresult rc = need_ctx(&c);
    if (rc == CUDA_SUCCESS)
        rc = async_take(&g.pools[g.dev[c->device].default_pool], c, size, dptr);
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool ph,
                                             CUstream s)
{
    (void)s;
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c;
    lock();
    CUresult rc = need_ctx(&c);
    if (rc == CUDA_SUCCESS) {
        struct pool *p = pool_from_handle(ph);
        if (!p || !p->alive)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            rc = async_take(p, c, size, dptr);
    }
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    (void)s;
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct rec *r = rec_find(dptr);
    if (!r || r->kind == RK_ARRAY || r->kind == RK_IPC) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    rec_remove(dptr);
    if (r->kind == RK_ASYNC && r->pool->alive) {
        r->cnext = r->pool->cache;
        r->pool->cache = r;
        r->pool->cached_bytes += r->bytes;
    } else {
        rec_release(r);
    }
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.id < 0 || props->location.id >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    if (g.npools == MAX_POOLS) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct pool *p = &g.pools[g.npools++];
    p->used = p->alive = 1;
    p->device = props->location.id;
    *out = pool_handle(p);
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemPoolDestroy(CUmemoryPool ph)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct pool *p = pool_from_handle(ph);
    if (!p || !p->alive || p->is_default) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    pool_release_cached(p, 0);
    p->alive = 0; /* outstanding allocations stay valid */
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemPoolTrimTo(CUmemoryPool ph, size_t keep)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct pool *p = pool_from_handle(ph);
    if (!p || !p->alive) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    pool_release_cached(p, keep);
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = pool_handle(&g.pools[g.dev[dev].default_pool]);
    return CUDA_SUCCESS;
}
