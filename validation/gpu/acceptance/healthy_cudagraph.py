"""Healthy with CUDA graphs: a whole training step of an MLP (forward, backward, and an SGD step
with capturable state) captured once in a CUDA graph after three warm-up steps on a side stream,
then replayed 200 times on new data copied into the static input. The graph's memory pool is
allocated at capture and reused by every replay. Nothing leaks.

Truth: no growth."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {"kind": "healthy", "steps": 200, "allocator": "default"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(DEVICE)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
loss_fn = nn.CrossEntropyLoss()
static_x = torch.randn(256, 1024, device=DEVICE)
static_y = torch.randint(0, 10, (256,), device=DEVICE)

side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(static_x), static_y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = loss_fn(model(static_x), static_y)
    static_loss.backward()
    opt.step()

clock = StepClock()
n_steps = steps(200)
for step in range(n_steps):
    clock.start()
    static_x.copy_(torch.randn(256, 1024, device=DEVICE))
    static_y.copy_(torch.randint(0, 10, (256,), device=DEVICE))
    graph.replay()
    clock.stop()
clock.report("healthy_cudagraph")
out("healthy_cudagraph", steps=n_steps, finite=bool(torch.isfinite(static_loss).item()))
