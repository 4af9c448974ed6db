/*
 * driver_mem.c -- linear, legacy 32-bit, pitched, managed, host, IPC and array memory of the
 * libcuda.so.1 stand-in.
 *
 * Mimics: cuMemAlloc_v2 / cuMemAlloc (v1 ABI) / cuMemFree_v2 / cuMemAllocPitch_v2 /
 * cuMemAllocManaged / cuMemHostAlloc / cuMemAllocHost_v2 / cuMemFreeHost / cuMemHostRegister /
 * cuIpc* / cuArray* / cuMemGetInfo_v2 of the real driver: the codes they return (OOM leaves the
 * out-pointer unchanged, size 0 and unknown pointers are CUDA_ERROR_INVALID_VALUE, freeing 0
 * succeeds), pitch rounding
 * to 512 bytes, and host memory that is real and writable.  Host memory comes from a fixed
 * address range (HOST_BASE) so that host pointers are the same from run to run.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One device-side allocation of `bytes` for the current context. */
static CUresult dev_alloc(uint64_t *out, uint64_t size, uint64_t bytes, int kind, int legacy)
{
    struct ctx *c;
    CUresult rc;
    lock();
    if ((rc = need_ctx(&c)) != CUDA_SUCCESS)
        goto out;
    struct rec *r = calloc(1, sizeof *r);
    if (!r) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    uint64_t addr;
    if ((rc = dev_take(c->device, bytes, legacy, &addr)) != CUDA_SUCCESS) {
        free(r);
        goto out;
    }
    r->addr = addr;
    r->size = size;
    r->bytes = bytes;
    r->kind = kind;
    r->device = c->device;
    r->ctx = c;
    rec_insert(r);
    *out = addr;
out:
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemGetInfo(size_t *free_b, size_t *total)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!free_b || !total)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c;
    lock();
    CUresult rc = need_ctx(&c);
    if (rc == CUDA_SUCCESS) {
        *free_b = g.dev[c->device].cap - g.dev[c->device].used;
        *total = g.dev[c->device].cap;
    }
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a;
    CUresult rc = dev_alloc(&a, size, round_up(size, DEV_ALIGN), RK_LINEAR, 0);
    if (rc == CUDA_SUCCESS)
        *dptr = a;
    return rc;
}

/* The v1 ABI: 32-bit pointer and size; served from a low per-device window so it fits. */
HIDDEN CUresult impl_cuMemAlloc_legacy(unsigned int *dptr, unsigned int size)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a;
    CUresult rc = dev_alloc(&a, size, round_up(size, DEV_ALIGN), RK_LEGACY, 1);
    if (rc == CUDA_SUCCESS)
        *dptr = (unsigned int)a;
    return rc;
}

HIDDEN CUresult impl_cuMemFree(CUdeviceptr dptr)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr == 0)
        return CUDA_SUCCESS; /* as observed on the real driver */
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    lock();
    struct rec *r = rec_find(dptr);
    if (r && r->kind != RK_ARRAY && r->kind != RK_IPC) {
        rec_remove(dptr);
        rec_release(r);
        rc = CUDA_SUCCESS;
    }
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h,
                                     unsigned elem)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !pitch || w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = round_up(w, 512), a;
    CUresult rc = dev_alloc(&a, p * h, p * h, RK_PITCH, 0);
    if (rc == CUDA_SUCCESS) {
        *dptr = a;
        *pitch = p;
    }
    return rc;
}

HIDDEN CUresult impl_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a;
    CUresult rc = dev_alloc(&a, size, round_up(size, DEV_ALIGN), RK_MANAGED, 0);
    if (rc == CUDA_SUCCESS)
        *dptr = a;
    return rc;
}

/* ------------------------------------------------------------------ host memory */
static void host_arena_setup(void)
{
    if (g.host_mapped)
        return;
    const char *knob = getenv("STANDIN_HOST_ARENA"); /* "0": plain posix_memalign */
    if (knob && strcmp(knob, "0") == 0) {
        g.host_mapped = -1;
        return;
    }
    void *p = mmap((void *)(uintptr_t)HOST_BASE, HOST_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == (void *)(uintptr_t)HOST_BASE) {
        arena_init(&g.host, HOST_BASE, HOST_SIZE);
        g.host_mapped = 1;
    } else {
        if (p != MAP_FAILED)
            munmap(p, HOST_SIZE);
        g.host_mapped = -1;
    }
}

HIDDEN CUresult impl_cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pp || size == 0 || (flags & ~7u))
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c;
    CUresult rc;
    lock();
    if ((rc = need_ctx(&c)) != CUDA_SUCCESS)
        goto out;
    struct hrec *h = calloc(1, sizeof *h);
    if (!h) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    host_arena_setup();
    uint64_t bytes = round_up(size, HOST_ALIGN), a = 0;
    if (g.host_mapped == 1) {
        a = arena_alloc(&g.host, bytes, HOST_ALIGN);
        h->from_arena = 1;
    } else {
        void *m = NULL;
        if (posix_memalign(&m, HOST_ALIGN, bytes) == 0)
            a = (uint64_t)(uintptr_t)m;
    }
    if (!a) {
        free(h);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    h->addr = a;
    h->size = size;
    h->bytes = bytes;
    h->next = g.hosts;
    g.hosts = h;
    *pp = (void *)(uintptr_t)a;
out:
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuMemFreeHost(void *p)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t a = (uint64_t)(uintptr_t)p;
    lock();
    for (struct hrec **pp = &g.hosts; *pp; pp = &(*pp)->next) {
        struct hrec *h = *pp;
        if (h->addr != a)
            continue;
        *pp = h->next;
        if (h->from_arena) {
            madvise(p, h->bytes, MADV_DONTNEED); /* give the pages back, reads as zero */
            arena_free(&g.host, h->addr, h->bytes);
        } else {
            free(p);
        }
        free(h);
        unlock();
        return CUDA_SUCCESS;
    }
    unlock();
    return CUDA_ERROR_INVALID_VALUE;
}

HIDDEN CUresult impl_cuMemHostRegister(void *p, size_t size, unsigned flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || size == 0 || (flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t a = (uint64_t)(uintptr_t)p;
    lock();
    for (struct hrec *h = g.regs; h; h = h->next) {
        if (h->addr == a) {
            unlock();
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    }
    struct hrec *h = calloc(1, sizeof *h);
    if (!h) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->addr = a;
    h->size = h->bytes = size;
    h->next = g.regs;
    g.regs = h;
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuMemHostUnregister(void *p)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t a = (uint64_t)(uintptr_t)p;
    lock();
    for (struct hrec **pp = &g.regs; *pp; pp = &(*pp)->next) {
        if ((*pp)->addr == a) {
            struct hrec *h = *pp;
            *pp = h->next;
            free(h);
            unlock();
            return CUDA_SUCCESS;
        }
    }
    unlock();
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* ------------------------------------------------------------------ IPC */
static const char ipc_magic[8] = {'V', 'T', 'S', 'I', 'P', 'C', '1', 0};

HIDDEN CUresult impl_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    struct rec *r = rec_find(dptr);
    int ok = r && (r->kind == RK_LINEAR || r->kind == RK_PITCH);
    unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, ipc_magic, 8);
    memcpy(h->reserved + 8, &dptr, sizeof dptr);
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h, unsigned flags)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
        memcmp(h.reserved, ipc_magic, 8) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t target;
    memcpy(&target, h.reserved + 8, sizeof target);
    struct ctx *c;
    CUresult rc;
    lock();
    if ((rc = need_ctx(&c)) != CUDA_SUCCESS)
        goto out;
    struct rec *t = rec_find(target);
    if (!t || (t->kind != RK_LINEAR && t->kind != RK_PITCH)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct rec *r = calloc(1, sizeof *r);
    uint64_t a = r ? arena_alloc(&g.ipc, t->bytes, DEV_ALIGN) : 0;
    if (!a) {
        free(r);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    r->addr = a;
    r->size = t->size;
    r->bytes = t->bytes;
    r->kind = RK_IPC;
    r->device = t->device;
    r->ctx = c;
    r->target = target;
    rec_insert(r);
    *pdptr = a;
out:
    unlock();
    return rc;
}

HIDDEN CUresult impl_cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    lock();
    struct rec *r = rec_find(dptr);
    if (r && r->kind == RK_IPC) {
        rec_remove(dptr);
        rec_release(r);
        rc = CUDA_SUCCESS;
    }
    unlock();
    return rc;
}

/* ------------------------------------------------------------------ arrays */
static uint64_t format_bytes(int f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

static CUresult array_alloc(CUarray *a, size_t w, size_t h, size_t d, int format, unsigned nch)
{
    uint64_t es = format_bytes(format);
    if (!a || w == 0 || es == 0 || (nch != 1 && nch != 2 && nch != 4))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t size = (uint64_t)w * (h ? h : 1) * (d ? d : 1) * es * nch, addr;
    CUresult rc = dev_alloc(&addr, size, round_up(size, DEV_ALIGN), RK_ARRAY, 0);
    if (rc == CUDA_SUCCESS)
        *a = (CUarray)(uintptr_t)addr;
    return rc;
}

HIDDEN CUresult impl_cuArrayCreate(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return array_alloc(a, d->Width, d->Height, 0, d->Format, d->NumChannels);
}

HIDDEN CUresult impl_cuArray3DCreate(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return array_alloc(a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
}

HIDDEN CUresult impl_cuArrayDestroy(CUarray arr)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t a = (uint64_t)(uintptr_t)arr;
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    lock();
    struct rec *r = rec_find(a);
    if (r && r->kind == RK_ARRAY) {
        rec_remove(a);
        rec_release(r);
        rc = CUDA_SUCCESS;
    }
    unlock();
    return rc;
}
