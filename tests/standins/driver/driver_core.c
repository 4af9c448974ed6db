/*
 * driver_core.c -- state, locking, device arenas, contexts and cuInit of the libcuda.so.1
 * stand-in.
 *
 * Mimics: the real driver's process-wide state (one lock, fork-safe through pthread_atfork),
 * per-thread current-context stacks, primary contexts with a retain count, contexts created by
 * cuCtxCreate, and the rule that an allocation belongs to the context current when it was made
 * (cuCtxDestroy, cuDevicePrimaryCtxReset and releasing the primary context to 0 free them).
 * Device pointers are fake numbers in a per-device range (DEV_BASE + d * DEV_STRIDE) handed out
 * first fit, 512-byte aligned, lowest address first, so freed addresses recur.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <string.h>

HIDDEN struct state g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __thread int tls_depth;
static __thread struct ctx *tls_stack[CTX_STACK_DEPTH];

HIDDEN void lock(void) { pthread_mutex_lock(&g.mu); }
HIDDEN void unlock(void) { pthread_mutex_unlock(&g.mu); }
HIDDEN int is_init(void) { return __atomic_load_n(&g.initialized, __ATOMIC_ACQUIRE); }

static void atfork_prepare(void) { lock(); }
static void atfork_parent(void) { unlock(); }
static void atfork_child(void) { unlock(); }

__attribute__((constructor)) static void driver_ctor(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ------------------------------------------------------------------ range allocator */
HIDDEN void arena_init(struct arena *a, uint64_t base, uint64_t size)
{
    a->base = base;
    a->size = size;
    a->cap = 16;
    a->fr = malloc(a->cap * sizeof *a->fr);
    if (!a->fr)
        abort();
    a->n = 1;
    a->fr[0].start = base;
    a->fr[0].len = size;
}

static void arena_insert_at(struct arena *a, size_t i, uint64_t start, uint64_t len)
{
    if (a->n == a->cap) {
        a->cap *= 2;
        a->fr = realloc(a->fr, a->cap * sizeof *a->fr);
        if (!a->fr)
            abort();
    }
    memmove(&a->fr[i + 1], &a->fr[i], (a->n - i) * sizeof *a->fr);
    a->fr[i].start = start;
    a->fr[i].len = len;
    a->n++;
}

HIDDEN uint64_t arena_alloc(struct arena *a, uint64_t bytes, uint64_t align)
{
    for (size_t i = 0; i < a->n; i++) {
        uint64_t start = a->fr[i].start, end = start + a->fr[i].len;
        uint64_t s = round_up(start, align);
        if (s < start || s + bytes > end || s + bytes < s)
            continue;
        uint64_t lo = s - start, hi_start = s + bytes, hi = end - hi_start;
        if (lo && hi) {
            a->fr[i].len = lo;
            arena_insert_at(a, i + 1, hi_start, hi);
        } else if (lo) {
            a->fr[i].len = lo;
        } else if (hi) {
            a->fr[i].start = hi_start;
            a->fr[i].len = hi;
        } else {
            memmove(&a->fr[i], &a->fr[i + 1], (a->n - i - 1) * sizeof *a->fr);
            a->n--;
        }
        return s;
    }
    return 0;
}

HIDDEN void arena_free(struct arena *a, uint64_t addr, uint64_t bytes)
{
    size_t lo = 0, hi = a->n; /* first range starting after addr */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->fr[mid].start > addr)
            hi = mid;
        else
            lo = mid + 1;
    }
    size_t i = lo;
    int merge_prev = i > 0 && a->fr[i - 1].start + a->fr[i - 1].len == addr;
    int merge_next = i < a->n && addr + bytes == a->fr[i].start;
    if (merge_prev && merge_next) {
        a->fr[i - 1].len += bytes + a->fr[i].len;
        memmove(&a->fr[i], &a->fr[i + 1], (a->n - i - 1) * sizeof *a->fr);
        a->n--;
    } else if (merge_prev) {
        a->fr[i - 1].len += bytes;
    } else if (merge_next) {
        a->fr[i].start = addr;
        a->fr[i].len += bytes;
    } else {
        arena_insert_at(a, i, addr, bytes);
    }
}

/* ------------------------------------------------------------------ allocation records */
static inline size_t slot(uint64_t addr)
{
    return (size_t)(((addr >> 9) * 0x9E3779B97F4A7C15ULL) >> (64 - HASH_BITS));
}

HIDDEN void rec_insert(struct rec *r)
{
    size_t s = slot(r->addr);
    r->hnext = g.tab[s];
    g.tab[s] = r;
}

HIDDEN struct rec *rec_find(uint64_t addr)
{
    for (struct rec *r = g.tab[slot(addr)]; r; r = r->hnext)
        if (r->addr == addr)
            return r;
    return NULL;
}

HIDDEN struct rec *rec_remove(uint64_t addr)
{
    for (struct rec **pp = &g.tab[slot(addr)]; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->addr == addr) {
            struct rec *r = *pp;
            *pp = r->hnext;
            r->hnext = NULL;
            return r;
        }
    }
    return NULL;
}

HIDDEN CUresult dev_take(int device, uint64_t bytes, int legacy, uint64_t *addr)
{
    struct device *d = &g.dev[device];
    if (bytes > d->cap || d->used + bytes > d->cap)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t a = arena_alloc(legacy ? &d->legacy : &d->arena, bytes, DEV_ALIGN);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d->used += bytes;
    *addr = a;
    return CUDA_SUCCESS;
}

HIDDEN void rec_release(struct rec *r)
{
    struct device *d = &g.dev[r->device];
    switch (r->kind) {
    case RK_IPC:
        arena_free(&g.ipc, r->addr, r->bytes);
        break;
    case RK_LEGACY:
        arena_free(&d->legacy, r->addr, r->bytes);
        d->used -= r->bytes;
        break;
    default:
        arena_free(&d->arena, r->addr, r->bytes);
        d->used -= r->bytes;
        break;
    }
    free(r);
}

HIDDEN void ctx_free_all(struct ctx *c)
{
    for (size_t s = 0; s < HASH_N; s++) {
        struct rec **pp = &g.tab[s];
        while (*pp) {
            struct rec *r = *pp;
            if (r->ctx == c) {
                *pp = r->hnext;
                rec_release(r);
            } else {
                pp = &r->hnext;
            }
        }
    }
    for (int i = 0; i < g.npools; i++) {
        struct pool *p = &g.pools[i];
        struct rec **pp = &p->cache;
        while (*pp) {
            struct rec *r = *pp;
            if (r->ctx == c) {
                *pp = r->cnext;
                p->cached_bytes -= r->bytes;
                rec_release(r);
            } else {
                pp = &r->cnext;
            }
        }
    }
}

HIDDEN void pool_release_cached(struct pool *p, uint64_t keep)
{
    /* Oldest cached block (bottom of the stack) first. */
    while (p->cached_bytes > keep && p->cache) {
        struct rec **pp = &p->cache;
        while ((*pp)->cnext)
            pp = &(*pp)->cnext;
        struct rec *r = *pp;
        *pp = NULL;
        p->cached_bytes -= r->bytes;
        rec_release(r);
    }
}

/* ------------------------------------------------------------------ handles */
HIDDEN CUcontext ctx_handle(const struct ctx *c)
{
    return (CUcontext)(uintptr_t)(CTX_HANDLE_BASE + (uint64_t)(c - g.ctxs) * 0x100);
}

HIDDEN struct ctx *ctx_from_handle(CUcontext h)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    if (v < CTX_HANDLE_BASE || (v - CTX_HANDLE_BASE) % 0x100)
        return NULL;
    uint64_t i = (v - CTX_HANDLE_BASE) / 0x100;
    if (i >= (uint64_t)g.nctx || !g.ctxs[i].used)
        return NULL;
    return &g.ctxs[i];
}

HIDDEN CUmemoryPool pool_handle(const struct pool *p)
{
    return (CUmemoryPool)(uintptr_t)(POOL_HANDLE_BASE + (uint64_t)(p - g.pools) * 0x100);
}

HIDDEN struct pool *pool_from_handle(CUmemoryPool h)
{
    uint64_t v = (uint64_t)(uintptr_t)h;
    if (v < POOL_HANDLE_BASE || (v - POOL_HANDLE_BASE) % 0x100)
        return NULL;
    uint64_t i = (v - POOL_HANDLE_BASE) / 0x100;
    if (i >= (uint64_t)g.npools || !g.pools[i].used)
        return NULL;
    return &g.pools[i];
}

HIDDEN struct ctx *cur_ctx(void) { return tls_depth ? tls_stack[tls_depth - 1] : NULL; }

HIDDEN CUresult need_ctx(struct ctx **out)
{
    struct ctx *c = cur_ctx();
    if (!c || !c->alive)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ init and devices */
static uint64_t env_size(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s)
        return dflt;
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v ? v : dflt;
}

HIDDEN CUresult impl_cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    if (!g.initialized) {
        uint64_t n = env_size("STANDIN_DEVICES", 2);
        if (n > MAX_DEVICES)
            n = MAX_DEVICES;
        uint64_t cap = env_size("STANDIN_DEVICE_MEM", 1ULL << 30);
        cap = round_up(cap, DEV_ALIGN);
        if (cap > DEV_STRIDE)
            cap = DEV_STRIDE;
        g.ndev = (int)n;
        for (int d = 0; d < g.ndev; d++) {
            struct device *dv = &g.dev[d];
            dv->cap = cap;
            dv->used = 0;
            arena_init(&dv->arena, DEV_BASE + (uint64_t)d * DEV_STRIDE, cap);
            arena_init(&dv->legacy, LEGACY_BASE * (uint64_t)(d + 1),
                       cap < LEGACY_SIZE ? cap : LEGACY_SIZE);
            dv->primary_ctx = g.nctx;
            struct ctx *c = &g.ctxs[g.nctx++];
            c->used = 1;
            c->primary = 1;
            c->device = d;
            dv->default_pool = g.npools;
            struct pool *p = &g.pools[g.npools++];
            p->used = p->alive = p->is_default = 1;
            p->device = d;
        }
        arena_init(&g.va, VA_BASE, VA_SIZE);
        arena_init(&g.ipc, IPC_BASE, IPC_SIZE);
        g.next_handle = FIRST_VMM_HANDLE;
        g.next_token = FIRST_SHARE_TOKEN;
        __atomic_store_n(&g.initialized, 1, __ATOMIC_RELEASE);
    }
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDeviceGetCount(int *n)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = g.ndev;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuGetErrorName(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    switch (e) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        *s = "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
        break;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: *s = "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ contexts */
HIDDEN CUresult impl_cuCtxGetCurrent(CUcontext *pctx)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    *pctx = c ? ctx_handle(c) : NULL;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuCtxGetDevice(CUdevice *d)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    struct ctx *c = cur_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = c->device;
    return CUDA_SUCCESS;
}

/* A context may be made current if it is a primary context or a live created one. */
static struct ctx *settable(CUcontext h)
{
    struct ctx *c = ctx_from_handle(h);
    if (!c || (!c->primary && !c->alive))
        return NULL;
    return c;
}

HIDDEN CUresult impl_cuCtxSetCurrent(CUcontext h)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h) { /* like popping the top of the stack */
        if (tls_depth)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    lock();
    struct ctx *c = settable(h);
    unlock();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth)
        tls_stack[tls_depth - 1] = c;
    else
        tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuCtxPushCurrent(CUcontext h)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct ctx *c = settable(h);
    unlock();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth == CTX_STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuCtxPopCurrent(CUcontext *pctx)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!tls_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct ctx *c = tls_stack[--tls_depth];
    if (pctx)
        *pctx = ctx_handle(c);
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuCtxCreate(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (tls_depth == CTX_STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    lock();
    if (g.nctx == MAX_CTX) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct ctx *c = &g.ctxs[g.nctx++];
    c->used = 1;
    c->alive = 1;
    c->device = dev;
    c->flags = flags;
    unlock();
    tls_stack[tls_depth++] = c;
    *pctx = ctx_handle(c);
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuCtxDestroy(CUcontext h)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    lock();
    struct ctx *c = ctx_from_handle(h);
    if (!c || c->primary || !c->alive) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    ctx_free_all(c);
    c->alive = 0;
    unlock();
    int j = 0; /* it is popped from the calling thread's stack */
    for (int i = 0; i < tls_depth; i++)
        if (tls_stack[i] != c)
            tls_stack[j++] = tls_stack[i];
    tls_depth = j;
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    struct ctx *c = &g.ctxs[g.dev[dev].primary_ctx];
    c->retain++;
    c->alive = 1;
    *pctx = ctx_handle(c);
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    struct ctx *c = &g.ctxs[g.dev[dev].primary_ctx];
    if (c->retain == 0) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->retain == 0) {
        ctx_free_all(c);
        c->alive = 0;
    }
    unlock();
    return CUDA_SUCCESS;
}

HIDDEN CUresult impl_cuDevicePrimaryCtxReset(CUdevice dev)
{
    if (!is_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    lock();
    ctx_free_all(&g.ctxs[g.dev[dev].primary_ctx]);
    unlock();
    return CUDA_SUCCESS;
}
