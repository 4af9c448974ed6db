/*
 * wl_alert.c -- a training loop for the tracer's live alerts, with a SIGUSR1 handler as a
 * training script's checkpoint handler would be.
 *
 * Mimics: a PyTorch training script that marks its steps and asks to be told (SIGUSR1) when
 * memory grows, to save a checkpoint.  It dlopens the framework stand-in RTLD_LOCAL, as Python
 * does, and runs 40 steps, each begun with vramtrace_mark_step() (looked up with
 * dlsym(RTLD_DEFAULT), a no-op without the tracer) and making and freeing a 2 MiB activation
 * (caching allocator).  argv[1] picks the shape:
 *
 *   leak     each step also keeps a 1 MiB tensor (fw_alloc, FW_MODE_ASYNC: cudaMallocAsync by
 *            libtorch_standin.so) never freed: +1 MiB a step from step 1, 40 MiB live at exit.
 *   leak-stops  the leak for steps 1 to 24 only, then 16 steps that keep nothing: 24 MiB live
 *            at exit, made one a step (a history that stopped growing: bounded growth, which
 *            the live alert sees while it grows).
 *   healthy  steps 1, 2 and 3 fill caches kept to the end (8, 4 and 2 MiB: a warm-up), and every
 *            10th step an evaluation holds 64 MiB into the next step, which frees it (peaks).
 *            Nothing grows after the warm-up.
 *
 * Either shape with "-unmarked" appended (leak-unmarked, healthy-unmarked) is a loop that marks
 * nothing, as a CuPy or JAX loop: 80 steps of 25 ms (a sleep each), so that the tracer can only
 * find its steps in the allocation pattern, which recurs once a step.
 *
 * With --wait-signal as argv[2], after the loop it waits up to 2 s for SIGUSR1.  It prints one
 * line per step, then "SIGUSR1 received" (the handler ran; it only sets a flag) or "no SIGUSR1".
 * Exits 0 when every call succeeded; usage on stderr and exit 2 otherwise.
 */
#include "fw_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define MiB (1024ull * 1024ull)
#define STEPS 40
#define UNMARKED_STEPS 80
#define FN(type, p) ((type)(uintptr_t)(p))

static volatile sig_atomic_t got_usr1;

static void on_usr1(int sig)
{
    (void)sig;
    got_usr1 = 1;
}

int main(int argc, char **argv)
{
    const char *shape = argc > 1 ? argv[1] : "";
    int unmarked = !strcmp(shape, "leak-unmarked") || !strcmp(shape, "healthy-unmarked");
    int stops = !strcmp(shape, "leak-stops");
    int leak = !strcmp(shape, "leak") || !strcmp(shape, "leak-unmarked") || stops;
    int healthy = !strcmp(shape, "healthy") || !strcmp(shape, "healthy-unmarked");
    int wait_signal = argc > 2 && !strcmp(argv[2], "--wait-signal");
    if ((!leak && !healthy) || argc > 3 || (argc == 3 && !wait_signal)) {
        fprintf(stderr, "usage: wl_alert leak|healthy[-unmarked]|leak-stops [--wait-signal]\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    EXPECT(sigaction(SIGUSR1, &sa, NULL), 0);

    void *fw = dlopen("libtorch_standin.so", RTLD_NOW | RTLD_LOCAL);
    if (!fw) {
        out("dlopen(libtorch_standin.so) failed: %s", dlerror());
        return 1;
    }
    void (*mark)(void) = FN(void (*)(void), dlsym(RTLD_DEFAULT, "vramtrace_mark_step"));
    fw_alloc_fn alloc = FN(fw_alloc_fn, dlsym(fw, "fw_alloc"));
    fw_free_fn ffree = FN(fw_free_fn, dlsym(fw, "fw_free"));
    EXPECT(alloc && ffree, 1);

    void *eval = NULL;
    int steps = unmarked ? UNMARKED_STEPS : STEPS;
    for (int step = 1; step <= steps; step++) {
        if (mark && !unmarked)
            mark();
        if (unmarked) {
            struct timespec step_time = {0, 25 * 1000 * 1000};
            nanosleep(&step_time, NULL);
        }
        out("step %d", step);
        if (eval) {
            EXPECT(ffree(eval), 0);
            eval = NULL;
        }
        void *act = alloc(2 * MiB, FW_MODE_CACHING);
        EXPECT(act != NULL, 1);
        EXPECT(ffree(act), 0);
        if (leak) {
            if (!stops || step <= 24)
                EXPECT(alloc(1 * MiB, FW_MODE_ASYNC) != NULL, 1); /* a history tensor, kept */
        } else {
            if (step <= 3)
                EXPECT(alloc((8 * MiB) >> (step - 1), FW_MODE_ASYNC) != NULL, 1); /* a cache */
            if (step % 10 == 0)
                EXPECT((eval = alloc(64 * MiB, FW_MODE_ASYNC)) != NULL, 1); /* evaluation */
        }
    }
    if (eval)
        EXPECT(ffree(eval), 0);
    for (int i = 0; wait_signal && !got_usr1 && i < 200; i++) {
        struct timespec ten_ms = {0, 10 * 1000 * 1000};
        nanosleep(&ten_ms, NULL);
    }
    out(got_usr1 ? "SIGUSR1 received" : "no SIGUSR1");
    return wl_finish();
}
