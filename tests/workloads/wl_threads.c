/*
 * wl_threads.c -- T threads (argv[1], default 16), each making M (argv[2], default 1000)
 * allocate/free pairs of varying sizes through the CUDA runtime, and leaking exactly
 * (thread_index + 1) buffers of 4096 bytes.
 *
 * Mimics: a multi-threaded process (data loaders, several streams) where freed addresses are
 * reused across threads.  Threads with an odd index use cudaMallocAsync/cudaFreeAsync for their
 * pairs, the others cudaMalloc/cudaFree; all leaks are cudaMalloc(4096).  Only totals are printed
 * (the per-call interleaving is not deterministic).  Ground truth with the defaults: calls =
 * 2*T*M + T*(T+1)/2 = 32136 (plus cudaDeviceGetDefaultMemPool + cudaMemPoolTrimTo +
 * cudaMemGetInfo at the end), 0 failed, leaked buffers T*(T+1)/2 = 136, leaked bytes 557056,
 * all on device 0; after trimming the default pool, cudaMemGetInfo used = 557056.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <pthread.h>

static long pairs = 1000;
static long total_calls, total_failed, total_leaked, total_leaked_bytes;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
    long t = (long)(intptr_t)arg, calls = 0, failed = 0, leaked = 0;
    int use_async = t % 2 == 1;
    for (long i = 0; i < pairs; i++) {
        size_t size = 512 * (size_t)(1 + (i * 7 + t * 3) % 64);
        void *p = NULL;
        int rc = use_async ? cudaMallocAsync(&p, size, NULL) : cudaMalloc(&p, size);
        calls++;
        failed += rc != 0;
        rc = use_async ? cudaFreeAsync(p, NULL) : cudaFree(p);
        calls++;
        failed += rc != 0;
    }
    for (long k = 0; k <= t; k++) {
        void *p = NULL;
        int rc = cudaMalloc(&p, 4096);
        calls++;
        failed += rc != 0;
        leaked += rc == 0;
    }
    pthread_mutex_lock(&mu);
    total_calls += calls;
    total_failed += failed;
    total_leaked += leaked;
    total_leaked_bytes += leaked * 4096;
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = argc > 1 ? strtol(argv[1], NULL, 10) : 16;
    if (argc > 2)
        pairs = strtol(argv[2], NULL, 10);
    if (nthreads < 1 || nthreads > 1024 || pairs < 0) {
        fprintf(stderr, "usage: wl_threads [threads] [pairs]\n");
        return 2;
    }
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    for (long t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (long t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    free(th);
    long want_leaks = nthreads * (nthreads + 1) / 2;
    out("threads=%ld pairs_per_thread=%ld calls=%ld failed=%ld leaked_buffers=%ld leaked_bytes=%ld",
        nthreads, pairs, total_calls, total_failed, total_leaked, total_leaked_bytes);
    EXPECT(total_calls, 2 * nthreads * pairs + want_leaks);
    EXPECT(total_failed, 0);
    EXPECT(total_leaked, want_leaks);
    cudaMemPool_t pool = NULL;
    CALL(0, cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool(0) = %d", RC);
    CALL(0, cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo(default, 0) = %d", RC);
    size_t f = 0, tot = 0;
    CALL(0, cudaMemGetInfo(&f, &tot), "cudaMemGetInfo = %d used=%zu", RC, tot - f);
    EXPECT(tot - f, want_leaks * 4096);
    return wl_finish();
}
