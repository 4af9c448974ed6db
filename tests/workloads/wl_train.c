/*
 * wl_train.c -- the bundled example: a training loop with a slow leak.
 *
 * Mimics: a PyTorch training script.  It loads the framework stand-in with
 * dlopen(libtorch_standin.so, RTLD_NOW | RTLD_LOCAL) (as Python does), initialises a one-rank
 * NCCL process group, registers a 4 MiB buffer with NCCL, then runs 20 steps.  Each step:
 * calls vramtrace_mark_step() if the tracer is preloaded (looked up with
 * dlsym(RTLD_DEFAULT, "vramtrace_mark_step"), called as void(void)), prints the step number,
 * allocates three activations from the caching allocator (2 MiB, 512 KiB, 1 MiB; freed within
 * the step), all-reduces, runs a cuBLAS gemm (the first one allocates the 4 MiB workspace of
 * libcublas), and appends a 1 MiB tensor (cudaMallocAsync) to a history list that is never
 * freed.  After the loop: destroys the process group, frees the registered buffer WITHOUT
 * deregistering it, and shuts the framework down (cuBLAS handle destroyed, cache emptied).
 * Ground truth (device 0):
 *   LEAK 1: 20 x cudaMallocAsync(1048576) by libtorch_standin.so, one per step, never freed
 *           (+1 MiB per step; 20971520 B at exit).
 *   LEAK 2: NCCL registration of the 4 MiB buffer (cudaMallocAsync 4194304, freed with
 *           cudaFreeAsync after the loop) never deregistered; no device memory.
 *   Not leaks: 2 caching segments (cudaMalloc 2 MiB each, step 1, freed at shutdown), the cuBLAS
 *   workspace (cuMemAlloc_v2 4 MiB via dlsym, step 1, freed at shutdown), all NCCL memory (freed
 *   by ncclCommDestroy).  cudaMemGetInfo used at exit = 25165824 (the 20 MiB history + the freed
 *   4 MiB block still cached by the default pool).
 * Variants (one argument, for the comparisons of two runs):
 *   --extra-leak  LEAK 3: after each history tensor, a 4 MiB cudaMallocAsync kept in a second list
 *                 (+4 MiB per step; 83886080 B at exit; used at exit 109051904).
 *   --fix-leak    LEAK 1 fixed: each history tensor is freed at the end of its step (used at exit
 *                 5242880: the default pool keeps the freed 4 MiB block and one 1 MiB block).
 *   --checkpoint  the loop as a long job runs it: each step takes 150 ms (3 s in all, long enough
 *                 for the tracer's live alert to come while it runs), and a SIGUSR1 handler asks
 *                 for a checkpoint, which the step "saves" as it ends: it prints "checkpoint saved
 *                 after step N (asked by SIGUSR1)" once.  The same leak.
 *   Anything else: usage on stderr, exit 2.
 * Built twice: wl_train, and wl_train_moved (-DWL_TRAIN_MOVED: the same lines, other addresses).
 */
#include "fw_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define MiB (1024ull * 1024ull)
#define STEPS 20
#define FN(type, p) ((type)(uintptr_t)(p))

static void *fw;
static volatile sig_atomic_t checkpoint_asked;

static void on_usr1(int sig)
{
    (void)sig;
    checkpoint_asked = 1;
}

#ifdef WL_TRAIN_MOVED
/* Built a second time as wl_train_moved with this code placed before main: the same source
 * lines, every function of the program at other offsets (a rebuild, as far as addresses go). */
__attribute__((used, noinline)) static unsigned long wl_moved_padding(unsigned long x)
{
    volatile unsigned long acc[64] = {0};
    for (unsigned long i = 0; i < 64; i++)
        acc[i] = x * i + (acc[(i + 7) % 64] ^ (x >> (i % 13)));
    return acc[x % 64] + acc[(x + 1) % 64] * 3 + acc[(x + 2) % 64] * 5 + acc[(x + 3) % 64] * 7;
}
#endif

static void *sym(const char *name)
{
    void *p = dlsym(fw, name);
    if (!p) {
        out("dlsym(%s) = NULL", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    int extra_leak = 0, fix_leak = 0, checkpoint = 0, saved = 0;
    /* --extra-leak or --fix-leak; --checkpoint alone or with either */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--extra-leak") == 0 && !fix_leak) {
            extra_leak = 1;
        } else if (strcmp(argv[i], "--fix-leak") == 0 && !extra_leak) {
            fix_leak = 1;
        } else if (strcmp(argv[i], "--checkpoint") == 0) {
            checkpoint = 1;
        } else {
            fprintf(stderr, "usage: wl_train [--extra-leak | --fix-leak] [--checkpoint]\n");
            return 2;
        }
    }
    struct sigaction sa = {.sa_handler = on_usr1}; /* an empty mask, no flags */
    EXPECT(checkpoint ? sigaction(SIGUSR1, &sa, NULL) : 0, 0);
    fw = dlopen("libtorch_standin.so", RTLD_NOW | RTLD_LOCAL);
    if (!fw) {
        out("dlopen(libtorch_standin.so) failed: %s", dlerror());
        return 1;
    }
    void (*mark)(void) = FN(void (*)(void), dlsym(RTLD_DEFAULT, "vramtrace_mark_step"));
    fw_alloc_fn alloc = FN(fw_alloc_fn, sym("fw_alloc"));
    fw_free_fn ffree = FN(fw_free_fn, sym("fw_free"));
    fw_all_reduce_fn all_reduce = FN(fw_all_reduce_fn, sym("fw_all_reduce"));
    fw_matmul_fn matmul = FN(fw_matmul_fn, sym("fw_matmul"));
    typedef ncclResult_t (*reg_fn)(ncclComm_t, void *, size_t, void **);
    typedef cudaError_t (*meminfo_fn)(size_t *, size_t *);

    CALL(0, FN(fw_void_fn, sym("fw_init_process_group"))(), "init_process_group = %d", RC);
    ncclComm_t comm = FN(fw_comm_fn, sym("fw_process_group_comm"))();
    void *regbuf = alloc(4 * MiB, FW_MODE_ASYNC), *reg = NULL;
    out("registered buffer = 0x%llx", P(regbuf));
    CALL(0, FN(reg_fn, sym("ncclCommRegister"))(comm, regbuf, 4 * MiB, &reg),
         "ncclCommRegister(4 MiB) = %d", RC);

    void *history[STEPS], *extra[STEPS];
    for (int step = 0; step < STEPS; step++) {
        if (mark)
            mark();
        out("step %d", step + 1);
        void *a1 = alloc(2 * MiB, FW_MODE_CACHING);
        void *a2 = alloc(512 * 1024, FW_MODE_CACHING);
        void *a3 = alloc(1 * MiB, FW_MODE_CACHING);
        EXPECT(a1 && a2 && a3, 1);
        EXPECT(all_reduce(a1, 4096), 0);
        EXPECT(matmul(512, 512, 512), 0);
        EXPECT(ffree(a3) | ffree(a2) | ffree(a1), 0);
        history[step] = alloc(1 * MiB, FW_MODE_ASYNC); // @leak
        out("  history[%d] = 0x%llx", step, P(history[step]));
        if (extra_leak) {
            extra[step] = alloc(4 * MiB, FW_MODE_ASYNC); // @extra_leak
            out("  extra[%d] = 0x%llx", step, P(extra[step]));
        }
        if (fix_leak)
            EXPECT(ffree(history[step]), 0);
        if (checkpoint) {
            struct timespec step_time = {0, 150 * 1000 * 1000};
            nanosleep(&step_time, NULL);
            if (checkpoint_asked && !saved) {
                out("checkpoint saved after step %d (asked by SIGUSR1)", step + 1);
                saved = 1;
            }
        }
    }
    CALL(0, FN(fw_void_fn, sym("fw_destroy_process_group"))(), "destroy_process_group = %d", RC);
    CALL(0, ffree(regbuf), "free registered buffer = %d (registration kept)", RC);
    CALL(0, FN(fw_void_fn, sym("fw_shutdown"))(), "framework shutdown = %d", RC);
    size_t f = 0, t = 0;
    CALL(0, FN(meminfo_fn, sym("cudaMemGetInfo"))(&f, &t), "cudaMemGetInfo = %d used=%zu", RC, t - f);
    EXPECT(t - f, extra_leak ? 104 * MiB : fix_leak ? 5 * MiB : 24 * MiB);
    return wl_finish();
}
