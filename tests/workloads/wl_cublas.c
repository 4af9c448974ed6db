/*
 * wl_cublas.c -- two cuBLAS handles whose workspaces the "math library" allocates straight from
 * the driver (dlsym(libcuda, "cuMemAlloc_v2")), one destroyed and one leaked.
 *
 * Mimics: a program linking libcublas.so.13 (and libcudart.so.13).  Ground truth (device 0):
 *   cublasCreate_v2 x3; the first cublasStandinGemm on handles 1 and 2 each allocate a 4 MiB
 *   workspace through cuMemAlloc_v2 obtained by dlsym (owned by libcublas.so.13): WS1
 *   0x700000000000, WS2 0x700000400000.  Handle 3 gets a caller workspace (cudaMalloc 4 MiB,
 *   0x700000800000) with cublasSetWorkspace_v2, so its gemm allocates nothing; that handle is
 *   destroyed and its workspace cudaFree'd.  cublasDestroy_v2(handle 1) frees WS1 through the
 *   dlsym'd cuMemFree_v2.  LEAKED: WS2 (4194304 B, cuMemAlloc_v2 via dlsym, libcublas).
 *   Used at exit: 4194304 B.  Failing call: cublasStandinGemm(NULL) -> 1 (not initialized).
 */
#include "cuda_standin.h"
#include "wl_common.h"

static size_t used(void)
{
    size_t f = 0, t = 0;
    CALL(0, cudaMemGetInfo(&f, &t), "cudaMemGetInfo = %d used=%zu", RC, t - f);
    return t - f;
}

static void ws(const char *name, cublasHandle_t h)
{
    void *p = NULL;
    size_t n = 0;
    CALL(0, cublasStandinWorkspaceInfo(h, &p, &n), "cublasStandinWorkspaceInfo(%s) = %d ptr=0x%llx size=%zu",
         name, RC, P(p), n);
}

int main(void)
{
    cublasHandle_t h1 = NULL, h2 = NULL, h3 = NULL;
    CALL(0, cublasCreate_v2(&h1), "cublasCreate_v2 = %d (handle 1)", RC);
    CALL(0, cublasCreate_v2(&h2), "cublasCreate_v2 = %d (handle 2)", RC);
    EXPECT(used(), 0);
    CALL(0, cublasStandinGemm(h1, 128, 128, 128), "cublasStandinGemm(handle 1, 128^3) = %d", RC);
    ws("handle 1", h1);
    CALL(0, cublasStandinGemm(h1, 256, 64, 32), "cublasStandinGemm(handle 1, 256x64x32) = %d", RC);
    CALL(0, cublasStandinGemm(h2, 64, 64, 64), "cublasStandinGemm(handle 2, 64^3) = %d", RC);
    ws("handle 2", h2);
    EXPECT(used(), 8u << 20);
    CALL(CUBLAS_STATUS_NOT_INITIALIZED, cublasStandinGemm(NULL, 1, 1, 1),
         "cublasStandinGemm(NULL) = %d", RC);

    void *user = NULL;
    CALL(0, cublasCreate_v2(&h3), "cublasCreate_v2 = %d (handle 3)", RC);
    CALL(0, cudaMalloc(&user, 4u << 20), "cudaMalloc(4194304) = %d ptr=0x%llx", RC, P(user));
    CALL(0, cublasSetWorkspace_v2(h3, user, 4u << 20), "cublasSetWorkspace_v2(handle 3) = %d", RC);
    CALL(0, cublasStandinGemm(h3, 32, 32, 32), "cublasStandinGemm(handle 3, 32^3) = %d", RC);
    ws("handle 3", h3);
    EXPECT(used(), 12u << 20);
    CALL(0, cublasDestroy_v2(h3), "cublasDestroy_v2(handle 3) = %d", RC);
    CALL(0, cudaFree(user), "cudaFree(0x%llx) = %d", P(user), RC);

    CALL(0, cublasDestroy_v2(h1), "cublasDestroy_v2(handle 1) = %d", RC);
    EXPECT(used(), 4u << 20); /* handle 2 and its workspace are never destroyed */
    return wl_finish();
}
