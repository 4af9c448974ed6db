/*
 * wl_common.h -- transcript helpers shared by the workload programs.
 *
 * Every workload prints one line per call (API, return code, out-parameters) and flushes it at
 * once, so that a run with a tracer and a run without one can be compared byte for byte, and so
 * that lines survive a fork or a fatal signal.  EXPECT compares a result with the planted value;
 * a workload exits 0 only when every EXPECT held.
 */
#ifndef WL_COMMON_H
#define WL_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int wl_mismatches;

__attribute__((format(printf, 1, 2))) static void out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Record (and report) a value that differs from the planted one. */
__attribute__((unused)) static int expect_ll(long long got, long long want, const char *what, int line)
{
    if (got != want) {
        wl_mismatches++;
        out("MISMATCH line %d: %s = %lld, planted %lld", line, what, got, want);
    }
    return (int)got;
}
#define EXPECT(got, want) expect_ll((long long)(got), (long long)(want), #got, __LINE__)

/* Run `expr` (a call returning a result code), THEN print the line (so out-parameters printed by
 * the format arguments are read after the call), then check the code against `want`. */
#define CALL(want, expr, ...)                                                                      \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        out(__VA_ARGS__);                                                                          \
        expect_ll(rc_, (want), #expr, __LINE__);                                                   \
    } while (0)
/* The result of the last CALL, for its format arguments: use `RC`. */
#define RC rc_

__attribute__((unused)) static int wl_finish(void)
{
    out("result: %s (%d mismatches)", wl_mismatches ? "FAIL" : "OK", wl_mismatches);
    return wl_mismatches ? 1 : 0;
}

#define P(x) ((unsigned long long)(uintptr_t)(x))

#endif /* WL_COMMON_H */
