"""Leak in CuPy (no PyTorch): 100 iterations of a small numerical loop through CuPy's default
memory pool. Each iteration makes 4 MiB temporaries (freed back to the pool) and keeps a
1,049,088-byte result (262,272 float32: its own size class in the pool, so no freed temporary
can serve it) in a history list at LEAK-LINE: the pool asks the driver for a new block there every
iteration. The program's step is the iteration; nothing marks it, so the steps must come from the
allocation pattern.

Truth: steady growth of 1,049,088 bytes per iteration from iteration 0, at LEAK-LINE."""
import cupy

from plain import out, steps

TRUTH = {
    "kind": "leak",
    "steps": 100,
    "step_unit": "iteration (from the allocation pattern)",
    "allocator": "cupy",
    "torch": False,
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 1049088, "from_step": 0, "what": "CuPy arrays kept across iterations"}],
}

cupy.random.seed(0)
state = cupy.zeros((1 << 20,), dtype=cupy.float32)
history = []
n = steps(100)
for it in range(n):
    noise = cupy.random.standard_normal((1 << 20,), dtype=cupy.float32)
    state = 0.9 * state + 0.1 * cupy.tanh(noise)
    history.append(state[: 262272] * 1.0)  # LEAK-LINE
    del noise
total = float(sum(float(h[0]) for h in history[-3:]))
out("leak_cupy", iterations=n, kept=len(history), tail=f"{total:.4f}")
