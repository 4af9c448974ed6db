/*
 * bench_calls.c -- per-call cost of the stand-in's hot allocation paths, for tracer overhead
 * budgets.  argv: iterations (default 1000000), rounds (default 7), optionally which measure
 * to run (runtime, driver or baseline; "all" or absent: all three), and optionally a pause in
 * milliseconds before each round (default 0): with one long enough for the tracer's writer to
 * empty its buffer, a round measures what each call pays while the writer keeps up, not how
 * fast the writer drains a flood.
 *
 * Mimics: PyTorch's backend:cudaMallocAsync mode, where one cudaMallocAsync/cudaFreeAsync pair
 * per tensor is the hottest memory path (about 1.2 us a pair on the real H200, see
 * /work/shared/notes/cuda-interception.md section 5).  Measures, with CLOCK_MONOTONIC:
 *   runtime_async_pair   cudaMallocAsync + cudaFreeAsync (4096 B) through libcudart
 *   driver_async_gpa     cuMemAllocAsync + cuMemFreeAsync through pointers from cuGetProcAddress
 *   baseline_ctx_device  two cuCtxGetDevice calls (dlsym'd; not a memory call, so un-hooked)
 * and prints one line per measure: `name ns_per_call_median ns_per_call_min cpu_ns_per_call_median`
 * (per CALL, i.e. the time of a pair / 2; the last column is the calling thread's own CPU time,
 * CLOCK_THREAD_CPUTIME_ID, which time spent waiting or preempted does not count).  Output is
 * timing, so it is not deterministic.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <string.h>
#include <time.h>

#define FN(type, p) ((type)(uintptr_t)(p))

static long iters = 1000000;
static PFN_cuMemAllocAsync_v11020 drv_alloc;
static PFN_cuMemFreeAsync_v11020 drv_free;
static PFN_cuCtxGetDevice_v2000 get_device;

static double clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int run(int which, long n)
{
    int bad = 0;
    for (long i = 0; i < n; i++) {
        if (which == 0) {
            void *p;
            bad |= cudaMallocAsync(&p, 4096, NULL);
            bad |= cudaFreeAsync(p, NULL);
        } else if (which == 1) {
            CUdeviceptr p;
            bad |= drv_alloc(&p, 4096, NULL);
            bad |= drv_free(p, NULL);
        } else {
            CUdevice d;
            bad |= get_device(&d);
            bad |= get_device(&d);
        }
    }
    return bad;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        iters = strtol(argv[1], NULL, 10);
    long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 7;
    const char *only = argc > 3 && strcmp(argv[3], "all") != 0 ? argv[3] : NULL;
    long pause_ms = argc > 4 ? strtol(argv[4], NULL, 10) : 0;
    if (iters < 1 || rounds < 1 || rounds > 1000 || pause_ms < 0 || pause_ms > 10000) {
        fprintf(stderr,
                "usage: bench_calls [iterations] [rounds] [runtime|driver|baseline|all] [pause_ms]\n");
        return 2;
    }
    struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
    void *warm = NULL;
    if (cudaMalloc(&warm, 4096) != 0 || cudaFree(warm) != 0)
        return 1;
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    PFN_cuGetProcAddress_v12000 boot =
        cu ? FN(PFN_cuGetProcAddress_v12000, dlsym(cu, "cuGetProcAddress_v2")) : NULL;
    void *gpa = NULL, *fa = NULL, *ff = NULL;
    CUdriverProcAddressQueryResult st;
    if (!boot || boot("cuGetProcAddress", &gpa, 13000, 0, &st) || !gpa)
        return 1;
    FN(PFN_cuGetProcAddress_v12000, gpa)("cuMemAllocAsync", &fa, 13000, 0, &st);
    FN(PFN_cuGetProcAddress_v12000, gpa)("cuMemFreeAsync", &ff, 13000, 0, &st);
    drv_alloc = FN(PFN_cuMemAllocAsync_v11020, fa);
    drv_free = FN(PFN_cuMemFreeAsync_v11020, ff);
    get_device = FN(PFN_cuCtxGetDevice_v2000, dlsym(cu, "cuCtxGetDevice"));
    if (!drv_alloc || !drv_free || !get_device)
        return 1;
    static const char *names[3] = {"runtime_async_pair", "driver_async_gpa", "baseline_ctx_device"};
    static const char *short_names[3] = {"runtime", "driver", "baseline"};
    double *t = calloc((size_t)rounds, sizeof *t);
    double *cpu = calloc((size_t)rounds, sizeof *cpu);
    for (int w = 0; w < 3; w++) {
        if (only && strcmp(only, short_names[w]) != 0)
            continue;
        if (run(w, iters / 10 + 1))
            return 1;
        for (long r = 0; r < rounds; r++) {
            if (pause_ms > 0)
                nanosleep(&pause, NULL);
            double t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            if (run(w, iters))
                return 1;
            cpu[r] = (clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / (double)iters / 2.0;
            t[r] = (clock_ns(CLOCK_MONOTONIC) - t0) / (double)iters / 2.0;
        }
        qsort(t, (size_t)rounds, sizeof *t, cmp);
        qsort(cpu, (size_t)rounds, sizeof *cpu, cmp);
        out("%s %.1f %.1f %.1f", names[w], t[rounds / 2], t[0], cpu[rounds / 2]);
    }
    free(t);
    free(cpu);
    return 0;
}
