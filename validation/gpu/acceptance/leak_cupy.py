"""Leak in CuPy (no PyTorch): 100 iterations of a small numerical loop through CuPy's default
memory pool. Each iteration makes 256 KiB temporaries (freed back to the pool, which serves the
next iteration's from them) and keeps a 4,194,816-byte history row (1,048,704 float32: larger
than any freed block, so the pool asks the driver for a new block for it) in a list at
LEAK-LINE. The program's step is the iteration; nothing marks it, so the steps come from the
allocation pattern: the kept row's allocation recurs once an iteration.

CuPy's pool serves an array from any free block large enough (splitting it): a leak of arrays no
larger than the program's temporaries is served from the temporaries' freed blocks, and the
driver then sees the pool grow at the line that needed new memory, not at the line that keeps
the arrays (the report says so: its line is where the allocator asked).

Truth: steady growth of 4,194,816 bytes per iteration from iteration 0, at LEAK-LINE."""
import cupy

from plain import out, steps

TRUTH = {
    "kind": "leak",
    "steps": 100,
    "step_unit": "iteration (from the allocation pattern)",
    "allocator": "cupy",
    "torch": False,
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 4194816, "from_step": 0, "what": "CuPy arrays kept across iterations"}],
}

cupy.random.seed(0)
state = cupy.zeros((1 << 16,), dtype=cupy.float32)
history = []
n = steps(100)
for it in range(n):
    noise = cupy.random.standard_normal((1 << 16,), dtype=cupy.float32)
    state = 0.9 * state + 0.1 * cupy.tanh(noise)
    history.append(cupy.concatenate([state] * 16 + [state[:128]]))  # LEAK-LINE
    del noise
total = float(sum(float(h[0]) for h in history[-3:]))
out("leak_cupy", iterations=n, kept=len(history), tail=f"{total:.4f}")
