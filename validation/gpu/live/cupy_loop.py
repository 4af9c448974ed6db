"""A CuPy loop that marks no step, for the live alert of a program without marks (docs/live.md):
400 iterations of 25 ms (a sleep each, as a loop that waits on data would), each making 256 KiB
temporaries that CuPy's pool serves again and, with `leak`, keeping a 4,194,816-byte row (larger
than any freed block: the pool asks the driver for it) in a list at LEAK-LINE; with `healthy`,
the last three rows only (the pool reuses the freed ones: nothing grows after the third).

Truth: leak grows 4,194,816 bytes per iteration at LEAK-LINE from the first; healthy is flat
after iteration 3. Run with VRAMTRACE_ALERT_CONFIRM_PATTERN=3s, the leak alerts at LEAK-LINE
while it runs (the pattern followed after a second, 3 s of growth after that); healthy never.
Prints "done <shape> <rows kept>"."""
import sys
import time

import cupy

shape = sys.argv[1] if len(sys.argv) > 1 else ""
if shape not in ("leak", "healthy"):
    sys.exit("usage: cupy_loop.py leak|healthy")
cupy.random.seed(0)
state = cupy.zeros((1 << 16,), dtype=cupy.float32)
history = []
for it in range(400):
    noise = cupy.random.standard_normal((1 << 16,), dtype=cupy.float32)
    state = 0.9 * state + 0.1 * cupy.tanh(noise)
    history.append(cupy.concatenate([state] * 16 + [state[:128]]))  # LEAK-LINE
    if shape == "healthy" and len(history) > 3:
        history.pop(0)
    del noise
    cupy.cuda.Stream.null.synchronize()
    time.sleep(0.025)
print("done", shape, len(history))
