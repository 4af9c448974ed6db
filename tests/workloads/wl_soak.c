/*
 * wl_soak.c -- a training loop flat out, for long runs under a disk budget and for floods.
 *
 * Mimics: a training job that makes many short-lived allocations a step (a framework's
 * temporaries) and leaks slowly.  argv[1] is how long: "N" steps, or "Ns" seconds of wall
 * time.  Each step: vramtrace_mark_step() (looked up with dlsym(RTLD_DEFAULT), a no-op without
 * the tracer), then argv[2] temporaries (default 1000): each a cudaMalloc of 256 B to 2 MiB (a
 * fixed pseudo-random sequence) kept among the last TEMPS_LIVE, the oldest freed to make room,
 * as a framework's activations come and go; and, every argv[3] steps (default 100, 0: never),
 * keep_history(): one cudaMalloc of argv[4] bytes (default 65536) that is never freed -- the
 * planted leak, at keep_history in wl_soak.c.  The temporaries left are freed at the end.
 * With argv[5] = N > 1 threads, N - 1 more threads make temporaries the same way (their own
 * sequence) without marks or leaks until the loop ends: a flood of calls from several threads,
 * as data loaders and side streams make.  argv[6] is the largest temporary (default 2097152).
 *
 * Ground truth: leaked buffers = steps / every, each of argv[4] bytes, live at the end on
 * device 0; every call succeeds (give the stand-in device memory for the leak:
 * STANDIN_DEVICE_MEM).  It prints "steps=S temporaries=T leaked_buffers=L leaked_bytes=B" and
 * the result line (a run by time prints a number of steps that depends on the machine).
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define FN(type, p) ((type)(uintptr_t)(p))
/* Temporaries live at once. */
#define TEMPS_LIVE 16

static long leaked, leaked_bytes;
static atomic_long failed;
static atomic_int done;
/* Temporaries are 256 B to this many bytes. */
static unsigned long long largest = 2 << 20;

/* Temporaries of TEMPS_LIVE live at once, from the xorshift state `rng`; `slot` counts them. */
struct temporaries {
    void *live[TEMPS_LIVE];
    unsigned long long rng, slot;
};

static void temporary(struct temporaries *t)
{
    t->rng ^= t->rng << 13;
    t->rng ^= t->rng >> 7;
    t->rng ^= t->rng << 17;
    void **p = &t->live[t->slot++ % TEMPS_LIVE];
    if (*p)
        failed += cudaFree(*p) != 0;
    *p = NULL;
    failed += cudaMalloc(p, 256 * (size_t)(1 + t->rng % (largest / 256))) != 0;
}

static void free_temporaries(struct temporaries *t)
{
    for (int i = 0; i < TEMPS_LIVE; i++)
        if (t->live[i])
            failed += cudaFree(t->live[i]) != 0;
}

/* A side thread: temporaries until the loop is done. */
static void *side(void *arg)
{
    struct temporaries t = {.rng = 0x2545f4914f6cdd1dull * (unsigned long long)(uintptr_t)arg};
    while (!atomic_load(&done))
        temporary(&t);
    free_temporaries(&t);
    return NULL;
}

/* The planted leak: a history buffer kept for good. */
__attribute__((noinline)) static void keep_history(size_t bytes)
{
    void *p = NULL;
    int rc = cudaMalloc(&p, bytes);
    failed += rc != 0;
    leaked += rc == 0;
    leaked_bytes += rc == 0 ? (long)bytes : 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    /* argv[7] (0: never) is the last step the leak keeps a buffer in: a leak that stops, its
     * buffers made over steps leak_every..argv[7] and held to the end (bounded growth). */
    if (argc < 2 || argc > 8) {
        fprintf(stderr, "usage: wl_soak STEPS|SECONDSs [temporaries] [leak_every] [leak_bytes] [threads] [largest] [leak_until]\n");
        return 2;
    }
    char *end = NULL;
    double amount = strtod(argv[1], &end);
    int by_time = end && *end == 's';
    long temps = argc > 2 ? strtol(argv[2], NULL, 10) : 1000;
    long every = argc > 3 ? strtol(argv[3], NULL, 10) : 100;
    long bytes = argc > 4 ? strtol(argv[4], NULL, 10) : 65536;
    long threads = argc > 5 ? strtol(argv[5], NULL, 10) : 1;
    if (argc > 6)
        largest = strtoull(argv[6], NULL, 10);
    long until_step = argc > 7 ? strtol(argv[7], NULL, 10) : 0;
    if (amount <= 0 || temps < 0 || every < 0 || bytes <= 0 || threads < 1 || threads > 64 ||
        largest < 256 || until_step < 0) {
        fprintf(stderr, "usage: wl_soak STEPS|SECONDSs [temporaries] [leak_every] [leak_bytes] [threads] [largest] [leak_until]\n");
        return 2;
    }
    pthread_t others[64];
    for (long i = 1; i < threads; i++)
        pthread_create(&others[i], NULL, side, (void *)(uintptr_t)i);
    void (*mark)(void) = FN(void (*)(void), dlsym(RTLD_DEFAULT, "vramtrace_mark_step"));
    double until = now_s() + amount;
    long steps = 0;
    struct temporaries mine = {.rng = 0x9e3779b97f4a7c15ull};
    for (;;) {
        if (by_time ? now_s() >= until : steps >= (long)amount)
            break;
        steps++;
        if (mark)
            mark();
        for (long i = 0; i < temps; i++)
            temporary(&mine);
        if (every > 0 && steps % every == 0 && (until_step == 0 || steps <= until_step))
            keep_history((size_t)bytes);
    }
    free_temporaries(&mine);
    atomic_store(&done, 1);
    for (long i = 1; i < threads; i++)
        pthread_join(others[i], NULL);
    if (by_time) {
        out("ran for %gs, %ld temporaries a step", amount, temps);
        fprintf(stderr, "wl_soak: %ld steps, %ld leaked buffers\n", steps, leaked);
    } else {
        out("steps=%ld temporaries=%ld leaked_buffers=%ld leaked_bytes=%ld", steps, temps, leaked,
            leaked_bytes);
    }
    EXPECT(atomic_load(&failed), 0);
    long leaking = until_step > 0 && until_step < steps ? until_step : steps;
    EXPECT(leaked, every > 0 ? leaking / every : 0);
    return wl_finish();
}
