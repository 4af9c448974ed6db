/*
 * wl_fork.c -- a parent that forks N children (argv[1], default 1000), each making CUDA runtime
 * calls and exiting with exit(0).
 *
 * Mimics: data-loader worker processes (fork after CUDA init).  The driver stand-in is fork-safe
 * (its lock is taken in pthread_atfork's prepare handler), and each child works on its own copy
 * of the state it inherited.  Ground truth (device 0):
 *   parent: cudaMalloc 1048576 -> 0x700000000000, freed after all children were reaped.
 *   each child (sequential, the parent waits for each): cudaMalloc 4096 -> 0x700000100000,
 *   cudaFree of it, cudaMalloc 8192 -> 0x700000100000 LEAKED (1 leak of 8192 B per child
 *   process, each at the same address, each owned by that child), exit status 0.
 *   Parent at exit: used 0, no leak.  Total calls: parent 2 + 3 per child.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    void *big = NULL;
    CALL(0, cudaMalloc(&big, 1 << 20), "parent cudaMalloc(1048576) = %d ptr=0x%llx", RC, P(big));
    for (long i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            out("fork #%ld failed", i);
            return 1;
        }
        if (pid == 0) {
            void *a = NULL, *b = NULL;
            CALL(0, cudaMalloc(&a, 4096), "child %ld cudaMalloc(4096) = %d ptr=0x%llx", i, RC, P(a));
            CALL(0, cudaFree(a), "child %ld cudaFree(0x%llx) = %d", i, P(a), RC);
            CALL(0, cudaMalloc(&b, 8192), "child %ld cudaMalloc(8192) = %d ptr=0x%llx", i, RC, P(b));
            exit(wl_mismatches ? 1 : 0);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            out("child %ld: bad status 0x%x", i, st);
            wl_mismatches++;
        }
    }
    out("parent reaped %ld children", n);
    CALL(0, cudaFree(big), "parent cudaFree(0x%llx) = %d", P(big), RC);
    size_t f = 0, t = 0;
    CALL(0, cudaMemGetInfo(&f, &t), "parent cudaMemGetInfo = %d used=%zu", RC, t - f);
    EXPECT(t - f, 0);
    return wl_finish();
}
