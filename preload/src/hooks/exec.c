/* execl, execlp and execle: the exec calls that take their arguments as a variadic list.
 *
 * glibc builds an argv array and calls its internal execve, which no hook sees; so these build
 * the same array and call the tracer's execv, execvp and execve hooks (hooks/process.rs), which
 * end the trace and then make the real call. Rust cannot define a C variadic function on stable,
 * so the exported names are naked trampolines in process.rs that jump here with the caller's
 * registers untouched. Errors are glibc's: E2BIG for an argument list that cannot be counted. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>

typedef int (*vt_execv_fn)(const char *, char *const[]);
typedef int (*vt_execve_fn)(const char *, char *const[], char *const[]);

#define VT_HIDDEN __attribute__((visibility("hidden")))

/* The tracer's execv, execvp and execve hooks (set once from the library constructor). */
static vt_execv_fn vt_execv, vt_execvp;
static vt_execve_fn vt_execve;

VT_HIDDEN void vramtrace_set_exec_hooks(vt_execv_fn execv_hook, vt_execv_fn execvp_hook,
                                        vt_execve_fn execve_hook)
{
    vt_execv = execv_hook;
    vt_execvp = execvp_hook;
    vt_execve = execve_hook;
}

/* Counts the arguments after `arg` up to the terminating NULL. */
static ptrdiff_t vt_count(va_list ap)
{
    ptrdiff_t n = 1;
    while (va_arg(ap, const char *) != NULL) {
        if (n == INT_MAX)
            return -1;
        n++;
    }
    return n;
}

#define VT_BUILD_ARGV(last)                                                                        \
    va_list ap;                                                                                    \
    va_start(ap, last);                                                                            \
    ptrdiff_t n = vt_count(ap);                                                                    \
    va_end(ap);                                                                                    \
    if (n < 0) {                                                                                   \
        errno = E2BIG;                                                                             \
        return -1;                                                                                 \
    }                                                                                              \
    const char *argv[n + 1];                                                                       \
    argv[0] = arg;                                                                                 \
    va_start(ap, last);                                                                            \
    for (ptrdiff_t i = 1; i <= n; i++)                                                             \
        argv[i] = va_arg(ap, const char *);

VT_HIDDEN int vramtrace_execl(const char *path, const char *arg, ...)
{
    VT_BUILD_ARGV(arg)
    va_end(ap);
    if (vt_execv == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return vt_execv(path, (char *const *)argv);
}

VT_HIDDEN int vramtrace_execlp(const char *file, const char *arg, ...)
{
    VT_BUILD_ARGV(arg)
    va_end(ap);
    if (vt_execvp == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return vt_execvp(file, (char *const *)argv);
}

VT_HIDDEN int vramtrace_execle(const char *path, const char *arg, ...)
{
    VT_BUILD_ARGV(arg)
    /* After the NULL that ends the arguments comes the environment. */
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    if (vt_execve == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return vt_execve(path, (char *const *)argv, envp);
}
