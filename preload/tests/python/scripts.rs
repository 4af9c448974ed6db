//! What the Python tests run: the CUDA runtime stand-in (C) and the Python programs.

/// The stand-in: `cudaMalloc`/`cudaFree` on the host heap, and a C thread that allocates.
pub const STANDIN_C: &str = r#"
#include <pthread.h>
#include <stdlib.h>
int cudaMalloc(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
static void *c_worker(void *arg) { void *p = 0; cudaMalloc(&p, (size_t)arg); return p; }
int spawn_c_thread_alloc(size_t n) {
    pthread_t t;
    void *p = 0;
    if (pthread_create(&t, 0, c_worker, (void *)n)) return -1;
    pthread_join(t, &p);
    int rc = p ? 0 : 1;
    free(p);
    return rc;
}
int alloc_loop(size_t calls, size_t size) {
    for (size_t i = 0; i < calls; i++) {
        void *p = 0;
        if (cudaMalloc(&p, size)) return 1;
        cudaFree(p);
    }
    return 0;
}
"#;

/// The program. `# @name` marks the line a frame must name; each allocation has its own size.
pub const SCRIPT: &str = r#"import ctypes
import sys
import threading

released = ctypes.CDLL(sys.argv[1])
held = ctypes.PyDLL(sys.argv[1])
for dll in (released, held):
    dll.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    dll.cudaMalloc.restype = ctypes.c_int
released.spawn_c_thread_alloc.argtypes = [ctypes.c_size_t]
kept = []


def alloc(dll, size):
    p = ctypes.c_void_p()
    rc = dll.cudaMalloc(ctypes.byref(p), size)  # @alloc
    kept.append(p)
    return rc


def inner(dll, size):
    return alloc(dll, size)  # @inner


def outer(dll, size):
    return inner(dll, size)  # @outer


class Model:
    def forward(self, dll, size):
        return outer(dll, size)  # @forward


def steps(dll, base):
    for i in range(2):
        yield alloc(dll, base + i)  # @steps


def größe(dll, size):
    return alloc(dll, size)  # @latin1


def 分配(dll, size):
    return alloc(dll, size)  # @ucs2


def worker(size):
    alloc(released, size)  # @worker


def regenerated(dll, size, n):
    namespace = {"alloc": alloc, "dll": dll}
    source = "\n" * n + "def gen(size):\n    return alloc(dll, size)\n"
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace["gen"](size)  # @regenerated


def main():
    print("released", alloc(released, 1001))  # @main_released
    print("held", alloc(held, 1002))  # @main_held
    print("nested released", Model().forward(released, 1003))  # @main_nested_released
    print("nested held", Model().forward(held, 1004))  # @main_nested_held
    print("generator released", list(steps(released, 1005)))  # @main_gen_released
    print("generator held", list(steps(held, 1007)))  # @main_gen_held
    print("names", größe(released, 1009), 分配(released, 1010), 分配(held, 1011))  # @main_names
    t = threading.Thread(target=worker, args=(1012,))
    t.start()
    t.join()
    print("thread joined")
    alloc(held, 1013)  # @main_before_c
    print("c thread", released.spawn_c_thread_alloc(1014))
    for n in range(6):
        # Each `gen` dies before the next is made, which may take its address.
        print("regenerated", regenerated(released, 2000 + n, n))  # @main_regenerated
    print("allocations", len(kept))


main()  # @module
"#;

/// Four threads allocate without the GIL while another keeps compiling, running and dropping
/// new code objects (which may reuse the addresses of dead ones).
pub const THREADS_SCRIPT: &str = r#"import ctypes
import sys
import threading

dll = ctypes.CDLL(sys.argv[1])
dll.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
dll.cudaFree.argtypes = [ctypes.c_void_p]


def alloc(size):
    p = ctypes.c_void_p()
    dll.cudaMalloc(ctypes.byref(p), size)  # @alloc
    dll.cudaFree(p)


def worker(k):
    for i in range(300):
        alloc(10000 * (k + 1) + i)  # @worker


def churn(stop):
    n = 0
    while not stop.is_set():
        exec(compile(f"def f{n}():\n    return {n}\nf{n}()\n", "<churn>", "exec"), {})
        n += 1


stop = threading.Event()
churner = threading.Thread(target=churn, args=(stop,))
churner.start()
workers = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
for t in workers:
    t.start()
for t in workers:
    t.join()
stop.set()
churner.join()
print("done")
"#;

/// Allocates in a C loop called from 32 Python frames deep and prints the best time per
/// allocation (and free) of 7 rounds, pausing between rounds so the writer catches up. The
/// time is the calling thread's CPU time: the hooks' own cost, not the writer's or other
/// programs' on a shared machine.
pub const BENCH: &str = r#"import ctypes
import sys
import time

path, gil, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
dll = ctypes.CDLL(path) if gil == "released" else ctypes.PyDLL(path)
dll.alloc_loop.argtypes = [ctypes.c_size_t, ctypes.c_size_t]


def rounds():
    best = None
    for _ in range(7):
        time.sleep(0.05)
        start = time.thread_time_ns()
        dll.alloc_loop(calls, 64)
        took = time.thread_time_ns() - start
        best = took if best is None else min(best, took)
    print(best / calls)


def nest(k):
    return nest(k - 1) if k else rounds()


nest(30)
"#;
