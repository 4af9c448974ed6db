/*
 * driver_vmm.c -- the virtual memory management API of the libcuda.so.1 stand-in.
 *
 * Mimics: cuMemCreate / cuMemRelease / cuMemRetainAllocationHandle / cuMemMap / cuMemUnmap /
 * cuMemSetAccess / cuMemAddressReserve / cuMemAddressFree / cuMemExportToShareableHandle /
 * cuMemImportFromShareableHandle.  Physical memory (a handle) uses device capacity; it goes back
 * only when every handle reference is released AND no mapping uses it (the NCCL pattern: map,
 * then retain + release twice, then unmap).  Reservations are VA only (VA_BASE), and
 * cuMemAddressFree succeeds while mappings remain, like the real driver, so a tracer can see a
 * mapping left inside a freed reservation (its VA is not handed out again until the last such
 * mapping is unmapped).  cuMemUnmap must not cut a mapping (it may span several, and gaps).
 */
#include "driver_internal.h"

#include <stdlib.h>

static struct phys *phys_find(uint64_t handle)
{
    for (struct phys *p = g.phys; p; p = p->next)
        if (p->handle == handle)
            return p;
    return NULL;
}

/* Free the physical bytes once nothing refers to them any more. */
static void phys_maybe_free(struct phys *ph)
{
    if (ph->refs > 0 || ph->maps > 0)
        return;
    g.dev[ph->device].used -= ph->size;
    for (struct phys **pp = &g.phys; *pp; pp = &(*pp)->next) {
        if (*pp == ph) {
            *pp = ph->next;
            break;
        }
    }
    for (struct token **tp = &g.tokens; *tp;) {
        if ((*tp)->handle == ph->handle) {
            struct token *t = *tp;
            *tp = t->next;
            free(t);
        } else {
            tp = &(*tp)->next;
        }
    }
    free(ph);
}

static int has_mapping(uint64_t addr, uint64_t size)
{
    for (struct mapping *m = g.maps; m; m = m->next)
        if (m->addr < addr + size && addr < m->addr + m->size)
            return 1;
    return 0;
}

/* Give back the VA of freed reservations whose last mapping is gone. */
static void reap_zombies(void)
{
    for (struct resv **pp = &g.zombies; *pp;) {
        struct resv *rv = *pp;
        if (has_mapping(rv->addr, rv->size)) {
            pp = &rv->next;
            continue;
        }
        *pp = rv->next;
        arena_free(&g.va, rv->addr, rv->size);
        free(rv);
    }
}

HIDDEN CUresult impl_cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *p,
                                                   int option)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gran || !p || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                        option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *gran = GRANULARITY;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !prop || flags != 0 || size == 0 || size % GRANULARITY ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    struct device *d = &g.dev[prop->location.id];
    struct phys *ph = NULL;
    if (size > d->cap || d->used + size > d->cap || !(ph = calloc(1, sizeof *ph))) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->used += size;
    ph->handle = g.next_handle++;
    ph->size = size;
    ph->device = prop->location.id;
    ph->htypes = prop->requestedHandleTypes;
    ph->refs = 1;
    ph->next = g.phys;
    g.phys = ph;
    *h = ph->handle;
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemRelease(CUmemGenericAllocationHandle h)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct phys *ph = phys_find(h);
    if (!ph || ph->refs == 0) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    ph->refs--;
    phys_maybe_free(ph);
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    lock();
    for (struct mapping *m = g.maps; m; m = m->next) {
        if (a >= m->addr && a < m->addr + m->size) {
            m->ph->refs++;
            *h = m->ph->handle;
            unlock();
            return CUDA_SUCCESS;
        }
    }
    unlock();
    return CUDA_ERROR_INVALID_VALUE;
}

HIDDEN CUresult impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle h, unsigned long long flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0 || size == 0 || size % GRANULARITY || offset % GRANULARITY ||
        ptr + size < ptr)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    struct phys *ph = phys_find(h);
    if (!ph || ph->refs == 0 || offset > ph->size || size > ph->size - offset)
        goto out;
    struct resv *rv;
    for (rv = g.resvs; rv; rv = rv->next)
        if (ptr >= rv->addr && ptr + size <= rv->addr + rv->size)
            break;
    if (!rv)
        goto out;
    for (struct mapping *m = g.maps; m; m = m->next)
        if (ptr < m->addr + m->size && m->addr < ptr + size)
            goto out;
    struct mapping *m = calloc(1, sizeof *m);
    if (!m) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->addr = ptr;
    m->size = size;
    m->offset = offset;
    m->ph = ph;
    m->next = g.maps;
    g.maps = m;
    ph->maps++;
    rc = CUDA_SUCCESS;
out:
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (size == 0 || ptr + size < ptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t end = ptr + size, covered = 0;
    lock();
    /* Every mapping touching the range must lie inside it (a range that cuts one fails and
     * unmaps nothing); gaps between them are allowed, as on the real driver, but the range must
     * hold at least one mapping. */
    for (struct mapping *m = g.maps; m; m = m->next) {
        if (!(m->addr < end && ptr < m->addr + m->size))
            continue;
        if (m->addr < ptr || m->addr + m->size > end) {
            unlock();
            return CUDA_ERROR_INVALID_VALUE;
        }
        covered += m->size;
    }
    if (covered == 0) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (struct mapping **pp = &g.maps; *pp;) {
        struct mapping *m = *pp;
        if (m->addr >= ptr && m->addr < end) {
            *pp = m->next;
            m->ph->maps--;
            phys_maybe_free(m->ph);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    reap_zombies();
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *d,
                                    size_t count)
{
    (void)ptr;
    (void)size;
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align,
                                         CUdeviceptr hint, unsigned long long flags)
{
    (void)hint; /* a hint is only a hint */
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || flags != 0 || size == 0 || size % GRANULARITY || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align == 0)
        align = GRANULARITY;
    lock();
    struct resv *rv = calloc(1, sizeof *rv);
    uint64_t a = rv ? arena_alloc(&g.va, size, align) : 0;
    if (!a) {
        free(rv);
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    rv->addr = a;
    rv->size = size;
    rv->next = g.resvs;
    g.resvs = rv;
    *ptr = a;
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    for (struct resv **pp = &g.resvs; *pp; pp = &(*pp)->next) {
        struct resv *rv = *pp;
        if (rv->addr == ptr && rv->size == size) {
            *pp = rv->next;
            if (has_mapping(rv->addr, rv->size)) { /* succeeds; the mappings stay */
                rv->next = g.zombies;
                g.zombies = rv;
            } else {
                arena_free(&g.va, rv->addr, rv->size);
                free(rv);
            }
            unlock();
            return CUDA_SUCCESS;
        }
    }
    unlock();
    return CUDA_ERROR_INVALID_VALUE;
}

HIDDEN CUresult impl_cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                                  int type, unsigned long long flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    lock();
    struct phys *ph = phys_find(h);
    struct token *t = NULL;
    if (!ph || ph->refs == 0 || !(ph->htypes & type) || !(t = calloc(1, sizeof *t))) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    t->token = g.next_token++;
    t->handle = h;
    t->next = g.tokens;
    g.tokens = t;
    *(int *)out = t->token;
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                                    int type)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int tok = (int)(intptr_t)os;
    lock();
    for (struct token *t = g.tokens; t; t = t->next) {
        if (t->token != tok)
            continue;
        struct phys *ph = phys_find(t->handle);
        if (!ph)
            break;
        ph->refs++; /* the import is one more reference to the same allocation */
        *h = ph->handle;
        unlock();
        return CUDA_SUCCESS;
    }
    unlock();
    return CUDA_ERROR_INVALID_VALUE;
}
