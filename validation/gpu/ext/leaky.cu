// A stand-in for a user's custom CUDA extension: allocates `n` buffers with cudaMalloc, frees all
// but `keep` of them (the planted leak), and runs a kernel on each so the memory is really used.
#include <cuda_runtime.h>

static void *kept[64];
static int nkept;

__global__ void fill(unsigned char *p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = (unsigned char)i;
}

extern "C" int leaky_run(int n, int keep, size_t bytes) {
    for (int i = 0; i < n; i++) {
        void *p = nullptr;
        cudaError_t rc = cudaMalloc(&p, bytes);
        if (rc != cudaSuccess) return (int)rc;
        fill<<<(unsigned)((bytes + 255) / 256), 256>>>((unsigned char *)p, bytes);
        if (i < keep && nkept < 64) kept[nkept++] = p;
        else cudaFree(p);
    }
    return (int)cudaDeviceSynchronize();
}

extern "C" int leaky_kept(void) { return nkept; }

// One raw allocation per call, kept for good: the per-step leak of the acceptance program
// leak_extension.py.
static void *step_kept[4096];
static int nstep_kept;

extern "C" int leaky_step(size_t bytes) {
    void *p = nullptr;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) return (int)rc;
    fill<<<(unsigned)((bytes + 255) / 256), 256>>>((unsigned char *)p, bytes);
    if (nstep_kept < 4096) step_kept[nstep_kept++] = p;
    return (int)cudaGetLastError();
}
