"""Leak: a GPT-2-style HuggingFace model (built from a config, no download) trained for 100 steps
under DistributedDataParallel (single-rank NCCL group), default caching allocator. Every step
keeps its logits on the GPU for "later analysis": 8 x 256 x 8192 float32 = 64 MiB a step, allocated
by the forward call at LEAK-LINE (inside the model's LM head) and held by the list.

Truth: steady growth of 64 MiB per step from step 0, at LEAK-LINE (the program's own line that
allocated the kept tensors; the append below only keeps them)."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import GPT2Config, GPT2LMHeadModel

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 100,
    "allocator": "default",
    "nccl": True,
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 67108864, "from_step": 0, "what": "tensors kept across steps"}],
}

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29542")
dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo", rank=0, world_size=1)
torch.manual_seed(0)
config = GPT2Config(vocab_size=8192, n_positions=256, n_embd=256, n_layer=4, n_head=4)
model = DDP(GPT2LMHeadModel(config).to(DEVICE), device_ids=[0] if DEVICE.type == "cuda" else None)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
all_logits = []
clock = StepClock()
n_steps = steps(100)
for step in range(n_steps):
    clock.start()
    ids = torch.randint(0, config.vocab_size, (8, 256), device=DEVICE)
    outputs = model(input_ids=ids, labels=ids)  # LEAK-LINE
    opt.zero_grad(set_to_none=True)
    outputs.loss.backward()
    opt.step()
    all_logits.append(outputs.logits.detach())
    clock.stop()
clock.report("leak_logits_ddp")
dist.destroy_process_group()
out("leak_logits_ddp", steps=n_steps, kept=len(all_logits), dtype=all_logits[0].dtype)
