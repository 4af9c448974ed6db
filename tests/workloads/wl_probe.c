/*
 * wl_probe.c -- small scenarios that check single semantics of the driver stand-in, for the
 * integration tests in tests/tests/standins.rs.  argv[1] picks one: info, noinit, oom, reuse,
 * pool, vmm, ctx, gpa, scope.
 *
 * Mimics: nothing of a real program; it pins down the stand-in's memory model (capacity and the
 * STANDIN_* knobs, OOM leaving the out-pointer unchanged, lowest-address-first reuse with
 * coalescing, the async pool cache, NCCL's VMM retain/release pattern, context teardown) and
 * cuGetProcAddress's version/flag table (which exported entry point each request returns, or
 * "internal" under STANDIN_GPA_INTERNAL=1), and that libnccl stays out of the global scope when
 * the framework is loaded RTLD_LOCAL.  Each scenario prints key=value lines and exits 0
 * when every value is the expected one.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <string.h>

#define MiB (1024ull * 1024ull)

static size_t used(void)
{
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    return t - f;
}

static void init_ctx(int dev)
{
    CUcontext c;
    EXPECT(cuInit(0), 0);
    EXPECT(cuDevicePrimaryCtxRetain(&c, dev), 0);
    EXPECT(cuCtxSetCurrent(c), 0);
}

static int info(void)
{
    int n = 0;
    EXPECT(cuInit(0), 0);
    EXPECT(cuDeviceGetCount(&n), 0);
    out("devices=%d", n);
    for (int d = 0; d < n; d++) {
        CUcontext c;
        size_t f = 0, t = 0;
        cuDevicePrimaryCtxRetain(&c, d);
        cuCtxPushCurrent_v2(c);
        CUdeviceptr p = 0;
        int rc = cuMemAlloc_v2(&p, 512);
        cuMemGetInfo_v2(&f, &t);
        out("device=%d total=%zu first_ptr=0x%llx rc=%d", d, t, p, rc);
        cuMemFree_v2(p);
        cuCtxPopCurrent_v2(&c);
    }
    return wl_finish();
}

static int noinit(void)
{
    CUdeviceptr p = 0x1;
    int n = -1;
    out("cuMemAlloc_v2=%d", cuMemAlloc_v2(&p, 4096));
    out("cuDeviceGetCount=%d", cuDeviceGetCount(&n));
    out("cuCtxGetDevice=%d", cuCtxGetDevice(&n));
    void *fn = NULL;
    out("cuGetProcAddress_v2=%d", cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, NULL));
    int v = 0, rc = cuDriverGetVersion(&v);
    out("cuDriverGetVersion=%d version=%d", rc, v);
    return wl_finish();
}

static int oom(void)
{
    init_ctx(0);
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    CUdeviceptr p = 0x1234;
    int rc = cuMemAlloc_v2(&p, t + 512);
    out("over_capacity rc=%d ptr=0x%llx", rc, p);
    rc = cuMemAlloc_v2(&p, t);
    out("whole_device rc=%d ptr=0x%llx", rc, p);
    CUdeviceptr q = 0x5678;
    rc = cuMemAlloc_v2(&q, 1);
    out("one_more rc=%d ptr=0x%llx", rc, q);
    out("free rc=%d", cuMemFree_v2(p));
    out("double_free rc=%d", cuMemFree_v2(p));
    out("zero_size rc=%d", cuMemAlloc_v2(&q, 0));
    return wl_finish();
}

static int reuse(void)
{
    init_ctx(0);
    CUdeviceptr a, b, c, d, e;
    cuMemAlloc_v2(&a, 4096);
    cuMemAlloc_v2(&b, 4096);
    cuMemAlloc_v2(&c, 100); /* rounded to 512 */
    cuMemFree_v2(b);
    cuMemAlloc_v2(&d, 4000);
    out("a=0x%llx b=0x%llx c=0x%llx d=0x%llx reused=%d", a, b, c, d, d == b);
    cuMemFree_v2(a);
    cuMemFree_v2(d);
    cuMemAlloc_v2(&e, 8192); /* the two freed neighbours coalesced */
    out("e=0x%llx coalesced=%d used=%zu", e, e == a, used());
    return wl_finish();
}

static int pool(void)
{
    init_ctx(0);
    CUdeviceptr a, b;
    CUmemoryPool dp;
    cuDeviceGetDefaultMemPool(&dp, 0);
    cuMemAllocAsync(&a, 1 * MiB, NULL);
    out("alloc used=%zu", used());
    cuMemFreeAsync(a, NULL);
    out("freed used=%zu", used());
    cuMemAllocAsync(&b, 512 * 1024, NULL);
    out("realloc same=%d used=%zu", a == b, used());
    cuMemFreeAsync(b, NULL);
    out("double_free rc=%d", cuMemFreeAsync(b, NULL));
    cuMemPoolTrimTo(dp, 2 * MiB);
    out("trim_keep_2MiB used=%zu", used());
    cuMemPoolTrimTo(dp, 0);
    out("trim_0 used=%zu", used());
    return wl_finish();
}

static int vmm(void)
{
    init_ctx(0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h = 0, r = 0;
    CUdeviceptr va = 0;
    int rc = cuMemCreate(&h, 1 * MiB, &prop, 0);
    out("create_unaligned rc=%d", rc);
    cuMemCreate(&h, 4 * MiB, &prop, 0);
    cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0);
    out("handle=0x%llx va=0x%llx used=%zu", h, va, used());
    rc = cuMemMap(va, 4 * MiB, 0, h, 0);
    out("map rc=%d", rc);
    rc = cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0);
    out("map_overlap rc=%d", rc);
    rc = cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + 100));
    out("retain rc=%d same=%d", rc, r == h);
    rc = cuMemRelease(h);
    out("release rc=%d", rc);
    rc = cuMemRelease(h);
    out("release rc=%d used=%zu", rc, used()); /* still mapped: the bytes stay */
    rc = cuMemRelease(h);
    out("release_again rc=%d", rc);
    rc = cuMemUnmap(va, 2 * MiB);
    out("unmap_cut rc=%d", rc);
    rc = cuMemUnmap(va, 8 * MiB);
    out("unmap_with_gap rc=%d used=%zu", rc, used());
    rc = cuMemUnmap(va, 2 * MiB);
    out("unmap_nothing rc=%d", rc);
    rc = cuMemAddressFree(va, 4 * MiB);
    out("address_free_wrong_size rc=%d", rc);
    rc = cuMemAddressFree(va, 8 * MiB);
    out("address_free rc=%d", rc);
    return wl_finish();
}

static int ctx(void)
{
    init_ctx(0);
    CUcontext c;
    CUdeviceptr p;
    cuCtxCreate_v2(&c, 0, 0);
    cuMemAlloc_v2(&p, 1 * MiB);
    cuMemAllocAsync(&p, 1 * MiB, NULL);
    cuMemFreeAsync(p, NULL); /* cached in the default pool, still owned by c */
    out("in_ctx used=%zu", used());
    int rc = cuCtxDestroy_v2(c);
    out("destroy rc=%d used=%zu", rc, used());
    rc = cuMemAlloc_v2(&p, 512);
    out("alloc_on_primary_after_destroy rc=%d ptr=0x%llx", rc, p);
    cuCtxSetCurrent(NULL);
    rc = cuMemAlloc_v2(&p, 512);
    out("no_ctx rc=%d", rc);
    return wl_finish();
}

/* The framework loaded RTLD_LOCAL keeps libnccl out of the global scope: the pncclX names (which
 * a tracer does not define) are found through the handle only. */
static int scope(void)
{
    void *fw = dlopen("libtorch_standin.so", RTLD_NOW | RTLD_LOCAL);
    out("dlopen(libtorch_standin.so, RTLD_LOCAL) ok=%d", fw != NULL);
    EXPECT(fw != NULL, 1);
    void *g = dlsym(RTLD_DEFAULT, "pncclCommInitRank");
    out("global pncclCommInitRank=%s", g ? "non-null" : "NULL");
    EXPECT(g == NULL, 1);
    void *h = fw ? dlsym(fw, "pncclCommInitRank") : NULL;
    out("via handle pncclCommInitRank=%s", h ? "non-null" : "NULL");
    EXPECT(h != NULL, 1);
    return wl_finish();
}

/* Which exported entry point a cuGetProcAddress_v2 request returns. */
static int gpa(void)
{
    static const char *exported[] = {
        "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2", "cuCtxCreate_v2",
        "cuCtxCreate_v3", "cuCtxCreate_v4", "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxRelease_v2", "cuMemHostRegister", "cuMemHostRegister_v2",
        "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", "cuGetProcAddress", "cuGetProcAddress_v2",
        "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz",
        "cuMemAllocFromPoolAsync_ptsz", "cuMemGetInfo_v2", "cuMemCreate", "cuCtxDestroy_v2"};
    static const struct {
        const char *name;
        int ver;
        unsigned long long flags;
    } q[] = {
        {"cuMemAlloc", 3010, 0}, {"cuMemAlloc", 3020, 0}, {"cuMemAlloc", 13000, 0},
        {"cuMemFree", 2000, 0}, {"cuMemFree", 13000, 0}, {"cuCtxCreate", 3020, 0},
        {"cuCtxCreate", 11040, 0}, {"cuCtxCreate", 12040, 0}, {"cuCtxCreate", 12050, 0},
        {"cuCtxCreate", 3010, 0}, {"cuDevicePrimaryCtxRelease", 10000, 0},
        {"cuDevicePrimaryCtxRelease", 11000, 0}, {"cuMemHostRegister", 6000, 0},
        {"cuMemHostRegister", 6050, 0}, {"cuIpcOpenMemHandle", 10000, 0},
        {"cuIpcOpenMemHandle", 11000, 0}, {"cuGetProcAddress", 11030, 0},
        {"cuGetProcAddress", 12000, 0}, {"cuMemAllocAsync", 13000, 0},
        {"cuMemAllocAsync", 13000, 1}, {"cuMemAllocAsync", 13000, 2},
        {"cuMemFreeAsync", 13000, 2}, {"cuMemAllocFromPoolAsync", 12000, 2},
        {"cuMemAllocAsync", 11000, 0}, {"cuMemGetInfo", 13000, 0}, {"cuMemCreate", 12000, 2},
        {"cuCtxDestroy", 13000, 0}, {"cuMemAlloc_v2", 13000, 0}, {"cuNoSuchFunction", 13000, 0},
        {"cuMemAlloc", 13000, 4},
    };
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        void *fn = (void *)0x1;
        CUdriverProcAddressQueryResult st = -1;
        int rc = cuGetProcAddress_v2(q[i].name, &fn, q[i].ver, q[i].flags, &st);
        const char *what = fn == NULL ? "NULL" : fn == (void *)0x1 ? "untouched" : "internal";
        for (size_t k = 0; fn && k < sizeof exported / sizeof exported[0]; k++)
            if (dlsym(cu, exported[k]) == fn)
                what = exported[k];
        out("gpa %s %d %llu -> rc=%d status=%d %s", q[i].name, q[i].ver, q[i].flags, rc, st, what);
    }
    return wl_finish();
}

int main(int argc, char **argv)
{
    const char *s = argc > 1 ? argv[1] : "";
    if (!strcmp(s, "info"))
        return info();
    if (!strcmp(s, "noinit"))
        return noinit();
    if (!strcmp(s, "oom"))
        return oom();
    if (!strcmp(s, "reuse"))
        return reuse();
    if (!strcmp(s, "pool"))
        return pool();
    if (!strcmp(s, "vmm"))
        return vmm();
    if (!strcmp(s, "ctx"))
        return ctx();
    if (!strcmp(s, "gpa"))
        return gpa();
    if (!strcmp(s, "scope"))
        return scope();
    fprintf(stderr, "usage: wl_probe info|noinit|oom|reuse|pool|vmm|ctx|gpa|scope\n");
    return 2;
}
