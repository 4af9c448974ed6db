/*
 * wl_shapes.c -- training loops WITHOUT step marks, one per shape of memory over a run.
 *
 * Mimics: PyTorch training scripts under the cudaMallocAsync backend (one cudaMallocAsync /
 * cudaFreeAsync per tensor), which never call vramtrace_mark_step: the tracer must find the steps
 * in the allocation pattern.  Like wl_train it dlopens the framework stand-in RTLD_LOCAL and
 * takes NCCL's functions from that handle.  Every step runs the same body, a small model's
 * forward and backward pass (train_step: six activations of k x 256 KiB kept through six
 * gradients of k x 128 KiB, k = 1..6, all freed within the step; like a real step, more kinds
 * of tensor than a communicator or an evaluation makes).  argv[1] picks the shape:
 *
 *   warmup     30 steps; steps 1, 2 and 3 also allocate a cache buffer each (8, 4 and 2 MiB,
 *              at warm_up's line) kept to the end: growth that stops.  Nothing leaks.
 *   inner      20 steps; each also makes 40 pairs of a 64 KiB scratch buffer (allocated and
 *              freed at inner_loop's line) and keeps a 1 MiB history tensor (at keep's line):
 *              +1 MiB a step, 20 MiB live at exit.
 *   staircase  30 steps; steps 1, 6, 11, ... 26 each make a new NCCL communicator
 *              (ncclCommInitRank at new_comm's line) and all-reduce on it once, never destroyed:
 *              per communicator 2 MiB (proxy, cuMemCreate) + 2 x 4096 (channels) + 1 MiB (the
 *              first all-reduce's buffer) of device memory, so (3 MiB + 8192) / 5 a step.
 *   late       40 steps; from step 21 on each keeps a 1 MiB history tensor: +1 MiB a step
 *              from step 21, 20 MiB live at exit.
 *   teardown   20 steps keeping a 1 MiB history tensor each (+1 MiB a step), all freed after
 *              the loop: nothing live at exit, yet the run leaked.
 *   eval       50 steps; after every 10th, an evaluation (at evaluate's line) allocates and
 *              frees three 4 MiB tensors.  Nothing leaks.
 *
 * Ground truth: as above, device 0, no marks.  Prints one line per step; exits 0 when every
 * call succeeded.
 */
#include "fw_standin.h"
#include "wl_common.h"

#include <dlfcn.h>
#include <string.h>

#define MiB (1024ull * 1024ull)
#define KiB 1024ull
#define LAYERS 6
#define FN(type, p) ((type)(uintptr_t)(p))

static void *fw;
static fw_alloc_fn alloc;
static fw_free_fn ffree;

static void *sym(const char *name)
{
    void *p = dlsym(fw, name);
    if (!p) {
        out("dlsym(%s) = NULL", name);
        exit(1);
    }
    return p;
}

/* A small model's step: a forward pass keeps one activation per layer (k x 256 KiB for layer
 * k), the backward pass makes and drops one gradient per layer (k x 128 KiB), then the
 * activations go: twelve kinds of tensor, all freed within the step. */
static void train_step(void)
{
    void *act[LAYERS];
    for (int k = 0; k < LAYERS; k++) {
        act[k] = alloc((size_t)(k + 1) * 256 * KiB, FW_MODE_ASYNC); /* forward */
        EXPECT(act[k] != NULL, 1);
    }
    for (int k = LAYERS - 1; k >= 0; k--) {
        void *grad = alloc((size_t)(k + 1) * 128 * KiB, FW_MODE_ASYNC); /* backward */
        EXPECT(grad != NULL, 1);
        EXPECT(ffree(grad), 0);
    }
    for (int k = LAYERS - 1; k >= 0; k--)
        EXPECT(ffree(act[k]), 0);
}

static void *warm_up(size_t size)
{
    return alloc(size, FW_MODE_ASYNC); /* a cache filled while warming up */
}

static void inner_loop(void)
{
    for (int i = 0; i < 40; i++) {
        void *scratch = alloc(64 * KiB, FW_MODE_ASYNC);
        EXPECT(scratch != NULL, 1);
        EXPECT(ffree(scratch), 0);
    }
}

static void *keep(void)
{
    return alloc(1 * MiB, FW_MODE_ASYNC); /* a history tensor kept across steps */
}

static void evaluate(void)
{
    for (int i = 0; i < 3; i++) {
        void *batch = alloc(4 * MiB, FW_MODE_ASYNC);
        EXPECT(batch != NULL, 1);
        EXPECT(ffree(batch), 0);
    }
}

typedef ncclResult_t (*unique_id_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*all_reduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                      ncclComm_t, cudaStream_t);

static void new_comm(void *buf)
{
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    CALL(0, FN(unique_id_fn, sym("ncclGetUniqueId"))(&id), "ncclGetUniqueId = %d", RC);
    CALL(0, FN(init_rank_fn, sym("ncclCommInitRank"))(&comm, 1, id, 0), "ncclCommInitRank = %d", RC);
    CALL(0, FN(all_reduce_fn, sym("ncclAllReduce"))(buf, buf, 1024, ncclFloat32, ncclSum, comm, NULL),
         "ncclAllReduce = %d", RC);
}

int main(int argc, char **argv)
{
    const char *shape = argc > 1 ? argv[1] : "";
    fw = dlopen("libtorch_standin.so", RTLD_NOW | RTLD_LOCAL);
    if (!fw) {
        out("dlopen(libtorch_standin.so) failed: %s", dlerror());
        return 1;
    }
    alloc = FN(fw_alloc_fn, sym("fw_alloc"));
    ffree = FN(fw_free_fn, sym("fw_free"));

    void *kept[64];
    int n_kept = 0;
    if (!strcmp(shape, "warmup")) {
        size_t cache[3] = {8 * MiB, 4 * MiB, 2 * MiB};
        for (int step = 1; step <= 30; step++) {
            out("step %d", step);
            train_step();
            if (step <= 3)
                kept[n_kept++] = warm_up(cache[step - 1]);
        }
    } else if (!strcmp(shape, "inner")) {
        for (int step = 1; step <= 20; step++) {
            out("step %d", step);
            train_step();
            inner_loop();
            kept[n_kept++] = keep();
        }
    } else if (!strcmp(shape, "staircase")) {
        void *buf = alloc(4096, FW_MODE_ASYNC);
        for (int step = 1; step <= 30; step++) {
            out("step %d", step);
            train_step();
            if (step % 5 == 1)
                new_comm(buf);
        }
    } else if (!strcmp(shape, "late")) {
        for (int step = 1; step <= 40; step++) {
            out("step %d", step);
            train_step();
            if (step > 20)
                kept[n_kept++] = keep();
        }
    } else if (!strcmp(shape, "teardown")) {
        for (int step = 1; step <= 20; step++) {
            out("step %d", step);
            train_step();
            kept[n_kept++] = keep();
        }
        while (n_kept > 0)
            EXPECT(ffree(kept[--n_kept]), 0);
    } else if (!strcmp(shape, "eval")) {
        for (int step = 1; step <= 50; step++) {
            out("step %d", step);
            train_step();
            if (step % 10 == 0)
                evaluate();
        }
    } else {
        out("usage: wl_shapes warmup|inner|staircase|late|teardown|eval");
        return 2;
    }
    out("kept %d", n_kept);
    return wl_finish();
}
