"""The classic PyTorch leak: a list that keeps every loss with its autograd graph. Each step
leaves the loss and the activations of its graph alive. A tracer of allocations sees where the
leaked memory was allocated — the forward line below (LEAK-LINE) — growing by the same amount
every step. Steps come from NVTX ranges named "step" (run with NVTX_INJECTION64_PATH pointing at
libvramtrace.so and VRAMTRACE_STEP_RANGE=step)."""
import torch
from common import out

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
history = []
for step in range(8):
    torch.cuda.nvtx.range_push("step")
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).pow(2).mean()  # LEAK-LINE
    opt.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    opt.step()
    history.append(loss)  # planted leak: keeps the graph and its activations
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("step")
torch.cuda.nvtx.range_pop()
out("pyleak", steps=len(history), allocated=torch.cuda.memory_allocated())
