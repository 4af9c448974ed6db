/* The hooks' per-thread state, in initial-exec TLS.
 *
 * Rust's thread_local! in a shared object uses the general-dynamic model: every access is a call
 * to __tls_get_addr, dozens of instructions on the path of every intercepted call. A preloaded
 * library's TLS can live in the static TLS block instead (initial-exec), one %fs-relative load.
 * The state is plain zero-initialised words; capture/thread.rs gives them meaning. */
#include <stdint.h>

struct vt_thread_words {
    uint64_t words[8];
};

static __thread struct vt_thread_words vt_thread __attribute__((tls_model("initial-exec"), aligned(16)));

struct vt_thread_words *vramtrace_thread_words(void) { return &vt_thread; }
