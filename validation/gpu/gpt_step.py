"""A GPT-style training loop that prints its step time: the workload of
validation/gpu/profile_hooks.sh, which measures what the tracer costs on the GPU.

8 transformer layers, d=1024, 16 heads, sequence 256, batch 8, bf16 autocast, AdamW. With
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync every tensor is one cudaMallocAsync and one
cudaFreeAsync (about 1,500 events a step), the hardest case for the tracer.

Usage: python gpt_step.py [--steps N] [--warmup N] [--record]
  --record  PyTorch's own memory recorder with Python stacks on for the whole run
            (torch.cuda.memory._record_memory_history(stacks="python")), to compare with.
Prints `step_ms <median of the measured steps>`, `steps <n>`, and `recorder on|unsupported`
with --record (some allocator backends refuse the recorder).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 8192, 1024, 16, 8, 256, 8

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--record", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
dev = torch.device("cuda")
if args.record:
    try:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        print("recorder on")
    except Exception as e:  # noqa: BLE001 - any refusal means "not comparable"
        print(f"recorder unsupported ({type(e).__name__}: {e})")


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(SEQ, D))
        layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        h = self.blocks(h, mask=self.mask, is_causal=True)
        return self.head(h)


model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
times = []
for step in range(args.warmup + args.steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=dev)
    x, y = tokens[:, :-1], tokens[:, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    if step >= args.warmup:
        times.append((time.perf_counter() - t0) * 1e3)
print(f"step_ms {statistics.median(times):.3f}")
print(f"steps {args.steps}")
