"""A PyTorch loop that marks its own steps with the wheel's module (`vramtrace.mark_step()`) and
keeps one 4 MiB tensor per step (LEAK-LINE), 10 steps, no optimizer (so the only marks are the
module's). Prints whether the tracer is loaded and the marks' numbers."""
import torch
import vramtrace

kept = []
marks = []
for step in range(10):
    marks.append(vramtrace.mark_step())
    kept.append(torch.empty(1 << 20, dtype=torch.float32, device="cuda"))  # LEAK-LINE
    scratch = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    del scratch
torch.cuda.synchronize()
print("enabled", vramtrace.enabled(), "marks", marks, flush=True)
