"""Healthy: a GPT-style language model (6 layers, d=512, seq 256, batch 16, bf16 autocast,
AdamW) trained for 120 steps with PyTorch's default caching allocator, evaluated every 25 steps on
a batch of another size. Nothing leaks: the allocator warms up over the first steps (optimizer
state, cached segments), the evaluations allocate and free their own activations, and what is
live at the end is the model, its gradients and the optimizer state.

The diff check inserts a leaking line at DIFF-LEAK-HERE (see run.sh)."""
import torch
import torch.nn as nn

from acc import DEVICE, StepClock, out, steps

TRUTH = {"kind": "healthy", "steps": 120, "allocator": "default"}

torch.manual_seed(0)
VOCAB, D, LAYERS, SEQ, BATCH = 8192, 512, 6, 256, 16


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(SEQ, D))
        layer = nn.TransformerEncoderLayer(D, 8, 4 * D, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(D, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        h = self.blocks(h, mask=self.mask[: tokens.shape[1], : tokens.shape[1]], is_causal=True)
        return self.head(h)


def batch(n):
    tokens = torch.randint(0, VOCAB, (n, SEQ + 1), device=DEVICE)
    return tokens[:, :-1], tokens[:, 1:]


model = GPT().to(DEVICE)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
clock = StepClock()
n_steps = steps(120)
evals = []
# DIFF-LEAK-SETUP
for step in range(n_steps):
    clock.start()
    x, y = batch(BATCH)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    # DIFF-LEAK-HERE
    clock.stop()
    if (step + 1) % 25 == 0:
        model.eval()
        with torch.no_grad(), torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            ex, ey = batch(BATCH // 2)
            evals.append(nn.functional.cross_entropy(model(ex).float().view(-1, VOCAB), ey.reshape(-1)).item())
        model.train()
clock.report("healthy_gpt")
out("healthy_gpt", steps=n_steps, evals=len(evals))
