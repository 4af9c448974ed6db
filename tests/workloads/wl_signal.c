/*
 * wl_signal.c -- allocates three buffers and then dies from a signal: argv[1] is `segv`
 * (raise(SIGSEGV)), `abort` (abort()), `term` (kill(getpid(), SIGTERM)), `term-blocked` (the
 * same while this thread blocks SIGTERM for 100 ms, so the kernel must pick another thread: the
 * tracer's writer thread is the only other one, and it must not take the signal), `hup`
 * (kill(getpid(), SIGHUP): a closed terminal) or `usr1` (kill(getpid(), SIGUSR1), as an alert's
 * signal reaches a program without a handler).
 *
 * Mimics: a training process that crashes or is killed; a tracer must still have recorded what
 * was live.  Ground truth (device 0): cudaMalloc 1048576 -> 0x700000000000, 2097152 ->
 * 0x700000100000, 3145728 -> 0x700000300000, all live when the process dies (6291456 B); the
 * process ends by the named signal (exit status 128 + signal in a shell).  No argument or an
 * unknown one: usage message, exit 2.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "";
    if (strcmp(how, "segv") && strcmp(how, "abort") && strcmp(how, "term") && strcmp(how, "term-blocked")
        && strcmp(how, "hup") && strcmp(how, "usr1")) {
        fprintf(stderr, "usage: wl_signal segv|abort|term|term-blocked|hup|usr1\n");
        return 2;
    }
    for (int i = 1; i <= 3; i++) {
        void *p = NULL;
        CALL(0, cudaMalloc(&p, (size_t)i << 20), "cudaMalloc(%d) = %d ptr=0x%llx", i << 20, RC, P(p));
    }
    out("raising %s", how);
    if (!strcmp(how, "segv"))
        raise(SIGSEGV);
    else if (!strcmp(how, "abort"))
        abort();
    else if (!strcmp(how, "term"))
        kill(getpid(), SIGTERM);
    else if (!strcmp(how, "hup"))
        kill(getpid(), SIGHUP);
    else if (!strcmp(how, "usr1"))
        kill(getpid(), SIGUSR1);
    else {
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &term, NULL);
        kill(getpid(), SIGTERM);
        struct timespec wait = {0, 100 * 1000 * 1000};
        nanosleep(&wait, NULL);
        pthread_sigmask(SIG_UNBLOCK, &term, NULL); /* delivered here, now */
    }
    pause(); /* the signal is delivered at once; never reached */
    return 3;
}
