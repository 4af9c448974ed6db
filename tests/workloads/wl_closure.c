/*
 * wl_closure.c -- obtains driver function pointers every way a real program can, and allocates
 * one buffer through each, so a tracer has to close every path (the "closure rule" of
 * /work/shared/notes/cuda-interception.md section 2).
 *
 * Mimics: CuPy / JAX / cuBLAS-style access to libcuda without linking it.  Links nothing from
 * CUDA.  Paths and the buffer each allocates (device 0, primary context):
 *   A  dlsym(libcuda, "cuMemAlloc_v2")                          69632 B  LEAKED   0x700000000000
 *   B  dlvsym(libcudart, "cudaGetDriverEntryPointByVersion", "libcudart.so.13")
 *        -> ("cuMemAlloc", 12000)                               73728 B  freed
 *   C  dlsym("cuGetProcAddress_v2") -> gpa("cuGetProcAddress", 13000) -> gpa("cuMemAlloc", 13000)
 *                                                              77824 B  LEAKED   0x700000011000
 *   D  dlsym("cuGetProcAddress") (4-arg v1) -> ("cuGetProcAddress", 11030) -> ("cuMemAlloc")
 *                                                              81920 B  freed
 *   E  gpa("cuMemAllocAsync", 13000, PER_THREAD_DEFAULT_STREAM) = cuMemAllocAsync_ptsz
 *                                                              86016 B  LEAKED   0x700000024000
 *   F  gpa("cuMemAlloc", 3010) = legacy v1 cuMemAlloc (32-bit ABI)
 *                                                              90112 B  LEAKED   0x10000000
 *   G  dlsym(libcudart, "cudaGetDriverEntryPoint")("cuMemAlloc")  94208 B  freed
 *   H  dlsym(libcudart, "cudaGetDriverEntryPointByVersion")("cuMemCreate", 12000)
 *                                         handle 0x1000, 4194304 B  LEAKED (never mapped)
 *   Device 0 used at exit: 4517888 B.  Look-ups that find nothing (planted; codes as observed
 *   on a real 580 driver): cuGetProcAddress_v2("cuMemAllocAsync", 11000) -> 0, status 2 (version
 *   not sufficient), pfn NULL; cuGetProcAddress_v2("cuNoSuchFunction") -> 0, status 1, pfn NULL;
 *   the 4-argument cuGetProcAddress("cuNoSuchFunction") -> 500, pfn untouched;
 *   dlvsym(libcuda, "cuMemAlloc_v2", "libcuda.so.1") -> NULL (libcuda has no symbol versions).
 *   gpa("cuMemFree", 3010) returns the legacy 32-bit cuMemFree.
 *   Frees go through cuMemFree pointers obtained the same ways (dlsym, gpa, entry point).
 * The transcript is identical with STANDIN_GPA_INTERNAL=1.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <string.h>

typedef cudaError_t (*ep_fn)(const char *, void **, unsigned long long,
                             cudaDriverEntryPointQueryResult *);
typedef cudaError_t (*epv_fn)(const char *, void **, unsigned int, unsigned long long,
                              cudaDriverEntryPointQueryResult *);

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    out("dlsym(%s) = %s", name, p ? "non-null" : "NULL");
    EXPECT(p != NULL, 1);
    return p;
}

#define FN(type, p) ((type)(uintptr_t)(p))

int main(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    out("dlopen(libcuda.so.1) = %s", cuda ? "handle" : dlerror());
    if (!cuda)
        return 1;
    CUcontext ctx = NULL;
    CALL(0, FN(PFN_cuInit_v2000, sym(cuda, "cuInit"))(0), "cuInit(0) = %d", RC);
    CALL(0, FN(PFN_cuDevicePrimaryCtxRetain_v7000, sym(cuda, "cuDevicePrimaryCtxRetain"))(&ctx, 0),
         "cuDevicePrimaryCtxRetain(0) = %d ctx=0x%llx", RC, P(ctx));
    CALL(0, FN(PFN_cuCtxSetCurrent_v4000, sym(cuda, "cuCtxSetCurrent"))(ctx),
         "cuCtxSetCurrent = %d", RC);
    PFN_cuMemFree_v3020 free_dlsym = FN(PFN_cuMemFree_v3020, sym(cuda, "cuMemFree_v2"));

    /* A: dlsym. */
    CUdeviceptr a = 0, b = 0, c = 0, d = 0, e = 0, g = 0;
    PFN_cuMemAlloc_v3020 alloc_a = FN(PFN_cuMemAlloc_v3020, sym(cuda, "cuMemAlloc_v2"));
    CALL(0, alloc_a(&a, 69632), "A cuMemAlloc_v2[dlsym](69632) = %d ptr=0x%llx", RC, a);

    /* B: dlvsym.  libcuda (like the real one) has no symbol versions, so dlvsym finds nothing
     * there; the versioned runtime's resolver is found through dlvsym instead. */
    void *nv = dlvsym(cuda, "cuMemAlloc_v2", "libcuda.so.1");
    out("dlvsym(libcuda, cuMemAlloc_v2, libcuda.so.1) = %s", nv ? "non-null" : "NULL");
    EXPECT(nv == NULL, 1);
    void *cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    out("dlopen(libcudart.so.13) = %s", cudart ? "handle" : dlerror());
    if (!cudart)
        return 1;
    epv_fn epv_b = FN(epv_fn, dlvsym(cudart, "cudaGetDriverEntryPointByVersion", "libcudart.so.13"));
    out("dlvsym(libcudart, cudaGetDriverEntryPointByVersion, libcudart.so.13) = %s",
        epv_b ? "non-null" : "NULL");
    EXPECT(epv_b != NULL, 1);
    void *fb = NULL;
    cudaDriverEntryPointQueryResult bst = -1;
    if (epv_b) {
        CALL(0, epv_b("cuMemAlloc", &fb, 12000, cudaEnableDefault, &bst),
             "cudaGetDriverEntryPointByVersion[dlvsym](cuMemAlloc, 12000) = %d status=%d", RC, bst);
        CALL(0, FN(PFN_cuMemAlloc_v3020, fb)(&b, 73728),
             "B cuMemAlloc_v2[dlvsym entry point](73728) = %d ptr=0x%llx", RC, b);
        CALL(0, free_dlsym(b), "B cuMemFree_v2[dlsym](0x%llx) = %d", b, RC);
    }

    /* C: cuGetProcAddress_v2 -> "cuGetProcAddress" -> everything. */
    PFN_cuGetProcAddress_v12000 boot =
        FN(PFN_cuGetProcAddress_v12000, sym(cuda, "cuGetProcAddress_v2"));
    void *p = NULL;
    CUdriverProcAddressQueryResult st = -1;
    CALL(0, boot("cuGetProcAddress", &p, 13000, 0, &st),
         "cuGetProcAddress_v2(cuGetProcAddress, 13000) = %d status=%d", RC, st);
    PFN_cuGetProcAddress_v12000 gpa = FN(PFN_cuGetProcAddress_v12000, p);
    void *fa = NULL, *ff = NULL;
    CALL(0, gpa("cuMemAlloc", &fa, 13000, 0, &st), "gpa(cuMemAlloc, 13000) = %d status=%d", RC, st);
    CALL(0, gpa("cuMemFree", &ff, 13000, 0, &st), "gpa(cuMemFree, 13000) = %d status=%d", RC, st);
    CALL(0, FN(PFN_cuMemAlloc_v3020, fa)(&c, 77824), "C cuMemAlloc_v2[gpa](77824) = %d ptr=0x%llx",
         RC, c);

    /* D: the 4-argument cuGetProcAddress, asked for itself below 12000 (-> v1). */
    PFN_cuGetProcAddress_v11030 boot1 =
        FN(PFN_cuGetProcAddress_v11030, sym(cuda, "cuGetProcAddress"));
    CALL(0, boot1("cuGetProcAddress", &p, 11030, 0), "cuGetProcAddress(cuGetProcAddress, 11030) = %d",
         RC);
    PFN_cuGetProcAddress_v11030 gpa1 = FN(PFN_cuGetProcAddress_v11030, p);
    CALL(0, gpa1("cuMemAlloc", &fa, 11030, 0), "gpa_v1(cuMemAlloc, 11030) = %d", RC);
    CALL(0, FN(PFN_cuMemAlloc_v3020, fa)(&d, 81920), "D cuMemAlloc_v2[gpa v1](81920) = %d ptr=0x%llx",
         RC, d);
    CALL(0, FN(PFN_cuMemFree_v3020, ff)(d), "D cuMemFree_v2[gpa](0x%llx) = %d", d, RC);

    /* E: per-thread default stream variant. */
    CALL(0, gpa("cuMemAllocAsync", &fa, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
         "gpa(cuMemAllocAsync, 13000, ptds) = %d status=%d", RC, st);
    CALL(0, FN(PFN_cuMemAllocAsync_v11020, fa)(&e, 86016, NULL),
         "E cuMemAllocAsync_ptsz[gpa](86016) = %d ptr=0x%llx", RC, e);

    /* F: the legacy 32-bit ABI. */
    unsigned int f32 = 0;
    CALL(0, gpa("cuMemAlloc", &fa, 3010, 0, &st), "gpa(cuMemAlloc, 3010) = %d status=%d", RC, st);
    CALL(0, FN(PFN_cuMemAlloc_v2000, fa)(&f32, 90112), "F cuMemAlloc[v1, gpa](90112) = %d ptr=0x%x",
         RC, f32);
    CALL(0, gpa("cuMemFree", &p, 3010, 0, &st), "gpa(cuMemFree, 3010) = %d status=%d (legacy)", RC,
         st);
    p = (void *)0x1;
    CALL(0, gpa("cuMemAllocAsync", &p, 11000, 0, &st),
         "gpa(cuMemAllocAsync, 11000) = %d status=%d pfn=%s", RC, st, p ? "non-null" : "NULL");
    EXPECT(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    p = (void *)0x1;
    CALL(0, gpa("cuNoSuchFunction", &p, 13000, 0, &st),
         "gpa(cuNoSuchFunction, 13000) = %d status=%d pfn=%s", RC, st, p ? "non-null" : "NULL");
    EXPECT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    p = (void *)0x1;
    CALL(CUDA_ERROR_NOT_FOUND, gpa1("cuNoSuchFunction", &p, 11030, 0),
         "gpa_v1(cuNoSuchFunction, 11030) = %d pfn=0x%llx (untouched)", RC, P(p));

    /* G, H: the runtime's entry-point API. */
    ep_fn ep = FN(ep_fn, sym(cudart, "cudaGetDriverEntryPoint"));
    epv_fn epv = FN(epv_fn, sym(cudart, "cudaGetDriverEntryPointByVersion"));
    cudaDriverEntryPointQueryResult rst = -1;
    CALL(0, ep("cuMemAlloc", &fa, cudaEnableDefault, &rst),
         "cudaGetDriverEntryPoint(cuMemAlloc) = %d status=%d", RC, rst);
    CALL(0, ep("cuMemFree", &ff, cudaEnableDefault, &rst),
         "cudaGetDriverEntryPoint(cuMemFree) = %d status=%d", RC, rst);
    CALL(0, FN(PFN_cuMemAlloc_v3020, fa)(&g, 94208),
         "G cuMemAlloc_v2[entry point](94208) = %d ptr=0x%llx", RC, g);
    CALL(0, FN(PFN_cuMemFree_v3020, ff)(g), "G cuMemFree_v2[entry point](0x%llx) = %d", g, RC);
    CALL(0, epv("cuMemCreate", &fa, 12000, cudaEnableDefault, &rst),
         "cudaGetDriverEntryPointByVersion(cuMemCreate, 12000) = %d status=%d", RC, rst);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle hh = 0;
    CALL(0, FN(PFN_cuMemCreate_v10020, fa)(&hh, 4194304, &prop, 0),
         "H cuMemCreate[entry point by version](4194304) = %d handle=0x%llx", RC, hh);

    size_t fr = 0, tot = 0;
    void *mi = NULL;
    CALL(0, gpa("cuMemGetInfo", &mi, 13000, 0, &st), "gpa(cuMemGetInfo, 13000) = %d", RC);
    typedef CUresult (*meminfo_fn)(size_t *, size_t *);
    CALL(0, FN(meminfo_fn, mi)(&fr, &tot), "cuMemGetInfo_v2 = %d free=%zu total=%zu used=%zu", RC,
         fr, tot, tot - fr);
    EXPECT(tot - fr, 4517888);
    out("leaked: A=0x%llx C=0x%llx E=0x%llx F=0x%x H=0x%llx", a, c, e, f32, hh);
    return wl_finish();
}
