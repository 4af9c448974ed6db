/*
 * fw_alloc.c -- the three tensor allocators of libtorch_standin.so.
 *
 * Mimics: PyTorch's CUDA caching allocator in its three configurations.
 *  - mode 0 (default caching): cudaMalloc of whole segments (2 MiB, or the request rounded up to
 *    2 MiB), blocks split best-fit and merged on free, freed blocks stay cached; nothing goes back
 *    to CUDA until fw_empty_cache (torch.cuda.empty_cache), which cudaFrees segments with no live
 *    block.
 *  - mode 1 (expandable_segments:True): one 64 MiB VA reservation, 2 MiB physical pages created
 *    and mapped as it grows, unmapped and released from the top by fw_empty_cache.  Every cuMem*
 *    function comes ONLY from cudaGetDriverEntryPointByVersion(name, &fn, 12000,
 *    cudaEnableDefault, &status), as PyTorch does, so a symbol hook on cuMemCreate sees nothing.
 *  - mode 2 (backend:cudaMallocAsync): one cudaMallocAsync / cudaFreeAsync per tensor.
 */
#include "fw_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define SEGMENT (2ull << 20)
#define PAGE (2ull << 20)
#define EXP_VA_BYTES (64ull << 20)
#define EXP_PAGES (EXP_VA_BYTES / PAGE)
#define BLOCK_ALIGN 512ull

struct segment;
struct block {
    uint64_t addr, size;
    int free, mode;
    struct segment *seg;
    struct block *prev, *next; /* address order inside the segment */
    struct block *lnext;       /* live list */
};
struct segment {
    uint64_t addr, size;
    struct block *head;
    struct segment *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct segment *caching; /* mode 0 segments */
static struct segment expandable; /* mode 1: addr = VA base, size = mapped bytes */
static CUmemGenericAllocationHandle pages[EXP_PAGES];
static struct block *live;
static uint64_t async_bytes;

static struct {
    int resolved;
    PFN_cuMemAddressReserve_v10020 reserve;
    PFN_cuMemCreate_v10020 create;
    PFN_cuMemMap_v10020 map;
    PFN_cuMemSetAccess_v10020 set_access;
    PFN_cuMemUnmap_v10020 unmap;
    PFN_cuMemRelease_v10020 release;
    PFN_cuMemAddressFree_v10020 address_free;
} vmm;

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static int entry(const char *name, void **fn)
{
    cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &st);
    return e == cudaSuccess && st == cudaDriverEntryPointSuccess && *fn;
}

static int vmm_resolve(void)
{
    if (vmm.resolved)
        return vmm.resolved > 0;
    int ok = entry("cuMemAddressReserve", (void **)&vmm.reserve) &&
             entry("cuMemCreate", (void **)&vmm.create) && entry("cuMemMap", (void **)&vmm.map) &&
             entry("cuMemSetAccess", (void **)&vmm.set_access) &&
             entry("cuMemUnmap", (void **)&vmm.unmap) &&
             entry("cuMemRelease", (void **)&vmm.release) &&
             entry("cuMemAddressFree", (void **)&vmm.address_free);
    vmm.resolved = ok ? 1 : -1;
    return ok;
}

static struct block *new_block(struct segment *s, uint64_t addr, uint64_t size, int mode)
{
    struct block *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    b->addr = addr;
    b->size = size;
    b->free = 1;
    b->mode = mode;
    b->seg = s;
    return b;
}

/* Cut `b` to `size`, the rest becomes a free block right after it. */
static void split(struct block *b, uint64_t size)
{
    if (b->size - size < BLOCK_ALIGN)
        return;
    struct block *r = new_block(b->seg, b->addr + size, b->size - size, b->mode);
    r->prev = b;
    r->next = b->next;
    if (b->next)
        b->next->prev = r;
    b->next = r;
    b->size = size;
}

static struct block *best_fit(struct segment *s, uint64_t size, struct block *best)
{
    for (struct block *b = s->head; b; b = b->next)
        if (b->free && b->size >= size && (!best || b->size < best->size))
            best = b;
    return best;
}

static struct block *last_block(struct segment *s)
{
    struct block *b = s->head;
    while (b && b->next)
        b = b->next;
    return b;
}

static struct block *alloc_caching(uint64_t size)
{
    struct block *best = NULL;
    for (struct segment *s = caching; s; s = s->next)
        best = best_fit(s, size, best);
    if (best)
        return best;
    uint64_t bytes = round_up(size, SEGMENT);
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess)
        return NULL;
    struct segment *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->addr = (uint64_t)(uintptr_t)p;
    s->size = bytes;
    s->head = new_block(s, s->addr, bytes, FW_MODE_CACHING);
    struct segment **pp = &caching; /* keep segments in address order */
    while (*pp && (*pp)->addr < s->addr)
        pp = &(*pp)->next;
    s->next = *pp;
    *pp = s;
    return s->head;
}

static int map_page(void)
{
    struct segment *s = &expandable;
    uint64_t i = s->size / PAGE;
    int dev = 0;
    cudaGetDevice(&dev);
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    if (vmm.create(&pages[i], PAGE, &prop, 0) != CUDA_SUCCESS)
        return 0;
    if (vmm.map(s->addr + s->size, PAGE, 0, pages[i], 0) != CUDA_SUCCESS) {
        vmm.release(pages[i]);
        return 0;
    }
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    vmm.set_access(s->addr + s->size, PAGE, &ad, 1);
    s->size += PAGE;
    return 1;
}

static struct block *alloc_expandable(uint64_t size)
{
    struct segment *s = &expandable;
    if (!vmm_resolve())
        return NULL;
    if (!s->addr) {
        CUdeviceptr va;
        if (vmm.reserve(&va, EXP_VA_BYTES, 0, 0, 0) != CUDA_SUCCESS)
            return NULL;
        s->addr = va;
        s->size = 0;
    }
    struct block *b = best_fit(s, size, NULL);
    if (b)
        return b;
    struct block *tail = last_block(s);
    uint64_t have = tail && tail->free ? tail->size : 0, old_end = s->addr + s->size;
    if (s->size + round_up(size - have, PAGE) > EXP_VA_BYTES)
        return NULL;
    uint64_t before = s->size;
    while (s->size - before + have < size)
        if (!map_page())
            break;
    uint64_t added = s->size - before;
    if (added) {
        if (tail && tail->free) {
            tail->size += added;
        } else {
            struct block *n = new_block(s, old_end, added, FW_MODE_EXPANDABLE);
            n->prev = tail;
            if (tail)
                tail->next = n;
            else
                s->head = n;
            tail = n;
        }
    }
    return tail && tail->free && tail->size >= size ? tail : NULL;
}

FW_API void *fw_alloc(size_t size, int mode)
{
    uint64_t req = round_up(size ? size : 1, BLOCK_ALIGN);
    struct block *b = NULL;
    pthread_mutex_lock(&mu);
    if (mode == FW_MODE_CACHING || mode == FW_MODE_EXPANDABLE) {
        b = mode == FW_MODE_CACHING ? alloc_caching(req) : alloc_expandable(req);
        if (b) {
            split(b, req);
            b->free = 0;
        }
    } else if (mode == FW_MODE_ASYNC) {
        void *p = NULL;
        if (cudaMallocAsync(&p, size, NULL) == cudaSuccess) {
            b = new_block(NULL, (uint64_t)(uintptr_t)p, req, FW_MODE_ASYNC);
            b->free = 0;
            async_bytes += req;
        }
    }
    if (b) {
        b->lnext = live;
        live = b;
    }
    pthread_mutex_unlock(&mu);
    return b ? (void *)(uintptr_t)b->addr : NULL;
}

static void merge_next(struct block *b)
{
    struct block *n = b->next;
    if (!n || !n->free)
        return;
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    free(n);
}

FW_API int fw_free(void *ptr)
{
    uint64_t a = (uint64_t)(uintptr_t)ptr;
    pthread_mutex_lock(&mu);
    struct block **pp = &live;
    while (*pp && (*pp)->addr != a)
        pp = &(*pp)->lnext;
    struct block *b = *pp;
    if (!b) {
        pthread_mutex_unlock(&mu);
        return -1;
    }
    *pp = b->lnext;
    b->lnext = NULL;
    int rc = 0;
    if (b->mode == FW_MODE_ASYNC) {
        rc = cudaFreeAsync(ptr, NULL);
        async_bytes -= b->size;
        free(b);
    } else {
        b->free = 1;
        merge_next(b);
        if (b->prev && b->prev->free)
            merge_next(b->prev);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

FW_API int fw_empty_cache(void)
{
    int rc = 0;
    pthread_mutex_lock(&mu);
    for (struct segment **pp = &caching; *pp;) {
        struct segment *s = *pp;
        if (s->head->free && !s->head->next) {
            int e = cudaFree((void *)(uintptr_t)s->addr);
            if (e && !rc)
                rc = e;
            *pp = s->next;
            free(s->head);
            free(s);
        } else {
            pp = &s->next;
        }
    }
    struct segment *s = &expandable;
    struct block *tail = last_block(s);
    while (tail && tail->free && s->size && s->addr + s->size - PAGE >= tail->addr) {
        uint64_t i = s->size / PAGE - 1;
        vmm.unmap(s->addr + i * PAGE, PAGE);
        vmm.release(pages[i]);
        s->size -= PAGE;
        tail->size -= PAGE;
        if (tail->size == 0) {
            struct block *p = tail->prev;
            if (p)
                p->next = NULL;
            else
                s->head = NULL;
            free(tail);
            tail = p;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

FW_HIDDEN int fw_release_va(void)
{
    int rc = 0;
    pthread_mutex_lock(&mu);
    if (expandable.addr && expandable.size == 0) {
        rc = vmm.address_free(expandable.addr, EXP_VA_BYTES);
        expandable.addr = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

FW_API size_t fw_reserved_bytes(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = expandable.size + async_bytes;
    for (struct segment *s = caching; s; s = s->next)
        n += s->size;
    pthread_mutex_unlock(&mu);
    return n;
}

FW_API size_t fw_allocated_bytes(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = 0;
    for (struct block *b = live; b; b = b->lnext)
        n += b->size;
    pthread_mutex_unlock(&mu);
    return n;
}

/*
 * For an allocator kept elsewhere (the Python stand-in of torch, tests/standins/torch/): the
 * driver-level calls made from this library, as libc10_cuda's allocator makes them, so the
 * tracer sees them owned by the framework. Return the CUDA error; no bookkeeping here.
 */
FW_API int fw_raw_malloc(void **ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
FW_API int fw_raw_malloc_async(void **ptr, size_t bytes) { return cudaMallocAsync(ptr, bytes, NULL); }
FW_API int fw_raw_free_async(void *ptr) { return cudaFreeAsync(ptr, NULL); }
