/*
 * wl_harm.c -- programs that do to their own process what a tracer must survive without harm:
 * close every descriptor, spread a file over every descriptor number, run under a descriptor limit
 * of 4, exec, fork and _exit, vfork, lose events in a storm of threads, exit while threads still
 * allocate.  argv[1] names the mode; each prints its transcript (descriptor numbers included, so a
 * tracer that takes one the program would have had shows) and documents its ground truth.
 *
 * Data modes (argv[2] = DATA, a file the program creates):
 *   closefds | spreadfds | lowlimit DATA
 *     lowlimit: RLIMIT_NOFILE soft limit 4 first (only 0, 1, 2 and one more), and the last one
 *     held (/dev/null) across the first call and the sleep, so the tracer's file is created
 *     while the program holds every descriptor; closed after the sleep.
 *     cudaMalloc 1048576 -> 0x700000000000; sleep 300 ms (the tracer has written its file;
 *     lowlimit then waits until it is in VRAMTRACE_OUTPUT's directory: wait_for_trace_file);
 *     closefds/spreadfds: close every descriptor from 3 up to the limit (at most 65536);
 *     open DATA -> descriptor 3; spreadfds: dup2 it onto every number from 4 to min(limit, 1024)-1;
 *     then 11 times: write 100 bytes ('a' + i) to descriptor 3, cudaMalloc 4096 + cudaFree of it,
 *     sleep 30 ms; close what was opened; cudaFree 0x700000000000.
 *     DATA holds exactly 1100 bytes; nothing is live at exit; 24 calls.
 *
 * Process modes:
 *   exec-self        cudaMalloc 1048576 (live at the exec), then execl(/proc/self/exe, "after-exec").
 *   after-exec       cudaMalloc 2097152 -> 0x700000000000, cudaFree, cudaMalloc 4096 (leaked), exit 0.
 *   exec-fail        cudaMalloc 1048576, execl("/nonexistent/wl_harm") fails (ENOENT, printed),
 *                    cudaMalloc 2097152, exit 0 (both live).
 *   fork-exec        cudaMalloc 1048576 (leaked); fork; the child (no call of its own) execs
 *                    "after-exec"; the parent waits (status 0), cudaMalloc 2097152 (leaked), exit 0.
 *   fork-_exit N     N children one after another, each: cudaMalloc 4096 -> 0x700000100000, cudaFree,
 *   fork-_Exit N     cudaMalloc 8192 (leaked), then _exit(0) / _Exit(0).  Parent: cudaMalloc
 *                    1048576 before and cudaFree after; nothing live.
 *   vfork            cudaMalloc 1048576; vfork: the child _exit(7)s; vfork again: the child execs
 *                    /bin/true; the parent checks both statuses, cudaMalloc 2097152, frees both.
 *   storm T M        T threads x M pairs cudaMalloc/cudaFree of 512 * (1 + (7i + 3t) mod 64) bytes,
 *                    joined; sleep 1 s; then cudaMalloc 3145728 (the planted leak, live at exit).
 *   exit-busy T      T threads allocate and free 4096 bytes without end; after 300 ms the main
 *                    thread prints "exiting" and calls exit(0) with them still running.
 */
#include "cuda_standin.h"
#include "wl_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

static long open_max(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > 65536)
        return 65536;
    return (long)r.rlim_cur;
}

/* Under the tracer, waits (up to 5 s) until its trace file is in the output directory
 * (VRAMTRACE_OUTPUT's, fresh for each run): the tracer creates it from its own thread once the
 * first GPU call started it, and a program that opens its file at once can take the last
 * descriptor first (the tracer then waits for one, up to 2 s). What lowlimit tests after this
 * is the program's own descriptors under the limit.
 * Prints nothing: the transcript stays the same. */
static void wait_for_trace_file(void)
{
    const char *output = getenv("VRAMTRACE_OUTPUT");
    const char *slash = output ? strrchr(output, '/') : NULL;
    if (!slash)
        return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - output), output);
    for (int i = 0; i < 500; i++) {
        DIR *d = opendir(dir);
        int found = 0;
        struct dirent *e;
        while (d && !found && (e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            found = n > 7 && !strcmp(e->d_name + n - 7, ".vtrace");
        }
        if (d)
            closedir(d);
        if (found)
            return;
        sleep_ms(10);
    }
}

static int data_program(const char *mode, const char *path)
{
    int held = -1;
    if (!strcmp(mode, "lowlimit")) {
        struct rlimit r;
        getrlimit(RLIMIT_NOFILE, &r);
        r.rlim_cur = 4;
        EXPECT(setrlimit(RLIMIT_NOFILE, &r), 0);
        held = open("/dev/null", O_RDONLY);
        EXPECT(held, 3);
    }
    void *a = NULL;
    CALL(0, cudaMalloc(&a, 1 << 20), "cudaMalloc(1048576) = %d ptr=0x%llx", RC, P(a));
    sleep_ms(300);
    if (held >= 0)
        close(held);
    if (!strcmp(mode, "lowlimit"))
        wait_for_trace_file();
    long limit = open_max();
    if (strcmp(mode, "lowlimit")) {
        for (long fd = 3; fd < limit; fd++)
            close((int)fd);
        out("closed descriptors 3..%ld", limit - 1);
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    out("open(DATA) = %d", fd);
    EXPECT(fd, 3);
    if (fd < 0)
        return wl_finish();
    long spread = 0;
    if (!strcmp(mode, "spreadfds")) {
        long top = limit < 1024 ? limit : 1024;
        for (long k = 4; k < top; k++)
            spread += dup2(fd, (int)k) == k;
        out("dup2 onto %ld numbers", spread);
        EXPECT(spread, top - 4);
    }
    for (int i = 0; i < 11; i++) {
        char buf[100];
        memset(buf, 'a' + i, sizeof buf);
        EXPECT(write(fd, buf, sizeof buf), 100);
        void *p = NULL;
        CALL(0, cudaMalloc(&p, 4096), "cudaMalloc(4096) = %d ptr=0x%llx", RC, P(p));
        CALL(0, cudaFree(p), "cudaFree(0x%llx) = %d", P(p), RC);
        sleep_ms(30);
    }
    for (long k = 4; k < 4 + spread; k++)
        close((int)k);
    EXPECT(close(fd), 0);
    CALL(0, cudaFree(a), "cudaFree(0x%llx) = %d", P(a), RC);
    return wl_finish();
}

static int after_exec(void)
{
    void *a = NULL, *b = NULL;
    CALL(0, cudaMalloc(&a, 2 << 20), "after exec: cudaMalloc(2097152) = %d ptr=0x%llx", RC, P(a));
    CALL(0, cudaFree(a), "after exec: cudaFree(0x%llx) = %d", P(a), RC);
    CALL(0, cudaMalloc(&b, 4096), "after exec: cudaMalloc(4096) = %d ptr=0x%llx", RC, P(b));
    return wl_finish();
}

static int exec_program(const char *mode)
{
    void *a = NULL;
    CALL(0, cudaMalloc(&a, 1 << 20), "cudaMalloc(1048576) = %d ptr=0x%llx", RC, P(a));
    if (!strcmp(mode, "exec-self")) {
        execl("/proc/self/exe", "wl_harm", "after-exec", (char *)NULL);
        out("execl failed: %s", strerror(errno));
        return 1;
    }
    if (!strcmp(mode, "exec-fail")) {
        errno = 0;
        int rc = execl("/nonexistent/wl_harm", "wl_harm", "after-exec", (char *)NULL);
        int err = errno;
        out("execl(/nonexistent/wl_harm) = %d errno=%s", rc, strerror(err));
        EXPECT(err, ENOENT);
    } else {
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", "wl_harm", "after-exec", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        EXPECT(waitpid(pid, &st, 0), pid);
        out("child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1);
    }
    void *b = NULL;
    CALL(0, cudaMalloc(&b, 2 << 20), "cudaMalloc(2097152) = %d ptr=0x%llx", RC, P(b));
    return wl_finish();
}

static int fork_exit_program(const char *mode, long n)
{
    void *big = NULL;
    CALL(0, cudaMalloc(&big, 1 << 20), "parent cudaMalloc(1048576) = %d ptr=0x%llx", RC, P(big));
    for (long i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            void *a = NULL, *b = NULL;
            CALL(0, cudaMalloc(&a, 4096), "child %ld cudaMalloc(4096) = %d ptr=0x%llx", i, RC, P(a));
            CALL(0, cudaFree(a), "child %ld cudaFree(0x%llx) = %d", i, P(a), RC);
            CALL(0, cudaMalloc(&b, 8192), "child %ld cudaMalloc(8192) = %d ptr=0x%llx", i, RC, P(b));
            if (!strcmp(mode, "fork-_Exit"))
                _Exit(wl_mismatches ? 1 : 0);
            _exit(wl_mismatches ? 1 : 0);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            out("child %ld: bad status 0x%x", i, st);
            wl_mismatches++;
        }
    }
    out("parent reaped %ld children", n);
    CALL(0, cudaFree(big), "parent cudaFree(0x%llx) = %d", P(big), RC);
    return wl_finish();
}

static int vfork_program(void)
{
    void *a = NULL, *b = NULL;
    CALL(0, cudaMalloc(&a, 1 << 20), "cudaMalloc(1048576) = %d ptr=0x%llx", RC, P(a));
    int st = 0;
    pid_t pid = vfork();
    if (pid == 0)
        _exit(7);
    EXPECT(waitpid(pid, &st, 0), pid);
    out("vfork child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 7, 1);
    pid = vfork();
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    EXPECT(waitpid(pid, &st, 0), pid);
    out("vfork+exec child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1);
    CALL(0, cudaMalloc(&b, 2 << 20), "cudaMalloc(2097152) = %d ptr=0x%llx", RC, P(b));
    CALL(0, cudaFree(a), "cudaFree(0x%llx) = %d", P(a), RC);
    CALL(0, cudaFree(b), "cudaFree(0x%llx) = %d", P(b), RC);
    return wl_finish();
}

struct storm_arg {
    long t, pairs;
    long failed;
};

static void *storm_thread(void *p)
{
    struct storm_arg *s = p;
    for (long i = 0; i < s->pairs; i++) {
        void *q = NULL;
        size_t size = 512 * (size_t)(1 + (7 * i + 3 * s->t) % 64);
        s->failed += cudaMalloc(&q, size) != 0;
        s->failed += cudaFree(q) != 0;
    }
    return NULL;
}

static int storm_program(long threads, long pairs)
{
    pthread_t tid[256];
    struct storm_arg args[256];
    if (threads < 1 || threads > 256)
        threads = 16;
    for (long t = 0; t < threads; t++) {
        args[t] = (struct storm_arg){t, pairs, 0};
        pthread_create(&tid[t], NULL, storm_thread, &args[t]);
    }
    long failed = 0;
    for (long t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        failed += args[t].failed;
    }
    out("storm: %ld threads x %ld pairs, %ld failed", threads, pairs, failed);
    EXPECT(failed, 0);
    sleep_ms(1000);
    void *leak = NULL;
    CALL(0, cudaMalloc(&leak, 3 << 20), "planted leak: cudaMalloc(3145728) = %d", RC);
    return wl_finish();
}

static void *busy_thread(void *unused)
{
    (void)unused;
    for (;;) {
        void *q = NULL;
        if (cudaMalloc(&q, 4096) == 0)
            cudaFree(q);
    }
    return NULL;
}

static int exit_busy_program(long threads)
{
    pthread_t tid;
    for (long t = 0; t < threads; t++)
        pthread_create(&tid, NULL, busy_thread, NULL);
    sleep_ms(300);
    out("exiting");
    exit(0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    if ((!strcmp(mode, "closefds") || !strcmp(mode, "spreadfds") || !strcmp(mode, "lowlimit")) &&
        argc > 2)
        return data_program(mode, argv[2]);
    if (!strcmp(mode, "after-exec"))
        return after_exec();
    if (!strcmp(mode, "exec-self") || !strcmp(mode, "exec-fail") || !strcmp(mode, "fork-exec"))
        return exec_program(mode);
    if (!strcmp(mode, "fork-_exit") || !strcmp(mode, "fork-_Exit"))
        return fork_exit_program(mode, n > 0 ? n : 10);
    if (!strcmp(mode, "vfork"))
        return vfork_program();
    if (!strcmp(mode, "storm"))
        return storm_program(n > 0 ? n : 16, argc > 3 ? strtol(argv[3], NULL, 10) : 1000);
    if (!strcmp(mode, "exit-busy"))
        return exit_busy_program(n > 0 ? n : 4);
    fprintf(stderr, "usage: wl_harm closefds|spreadfds|lowlimit DATA | exec-self | exec-fail | "
                    "fork-exec | fork-_exit N | fork-_Exit N | vfork | storm T M | exit-busy T\n");
    return 2;
}
