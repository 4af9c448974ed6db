"""The classic PyTorch leak: a list that keeps every loss with its autograd graph. Each step
leaves the loss and the activations its graph holds alive; the leak must be reported at the line
`history.append(loss)` below."""
import torch
from common import mark_step, out

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
history = []
for step in range(8):
    mark_step()
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    opt.step()
    history.append(loss)  # planted leak: keeps the graph and its activations
torch.cuda.synchronize()
out("pyleak", steps=len(history), allocated=torch.cuda.memory_allocated())
