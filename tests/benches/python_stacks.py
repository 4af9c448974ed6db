"""Stack-capture cost with Python frames (tests/benches/capture_overhead.rs runs this).

Calls cudaMalloc + cudaFree of the runtime stand-in through ctypes.PyDLL, which keeps the GIL
held during the call (as PyTorch's allocator calls do not, but as a tracer must handle), from
DEPTH nested Python frames, ROUNDS rounds of N pairs; prints the median ns per call of the
rounds as `python_alloc_free <ns>`.  Usage: python_stacks.py N ROUNDS DEPTH
"""
import ctypes
import sys
import time

N, ROUNDS, DEPTH = (int(a) for a in sys.argv[1:4])
rt = ctypes.PyDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMalloc.restype = ctypes.c_int
rt.cudaFree.argtypes = [ctypes.c_void_p]
rt.cudaFree.restype = ctypes.c_int


def rounds():
    malloc, free, p = rt.cudaMalloc, rt.cudaFree, ctypes.c_void_p()
    ref = ctypes.byref(p)
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter_ns()
        for _ in range(N):
            if malloc(ref, 256) or free(p):
                sys.exit("a stand-in call failed")
        times.append((time.perf_counter_ns() - t0) / (2 * N))
    times.sort()
    return times[len(times) // 2]


def nest(depth):
    # Each level is one more Python frame on the stack the tracer reads.
    return rounds() if depth <= 1 else nest(depth - 1)


print(f"python_alloc_free {nest(DEPTH):.1f}")
