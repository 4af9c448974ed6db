"""Healthy: a HuggingFace transformers Llama model built from a config (no download: 4 layers,
hidden 512), trained for 100 optimizer steps with gradient accumulation over 4 micro-batches of
varying sequence length, under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. Nothing leaks;
the varying lengths make the allocator map and unmap pages while it warms up."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "healthy",
    "steps": 100,
    "allocator": "expandable",
    "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
}

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=8000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=8,
    max_position_embeddings=512,
)
model = LlamaForCausalLM(config).to(DEVICE)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
gen = torch.Generator().manual_seed(1)
ACCUM, BATCH = 4, 8
clock = StepClock()
n_steps = steps(100)
for step in range(n_steps):
    clock.start()
    for micro in range(ACCUM):
        seq = int(torch.randint(96, 257, (1,), generator=gen))
        ids = torch.randint(0, config.vocab_size, (BATCH, seq), generator=gen).to(DEVICE)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss / ACCUM
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.stop()
clock.report("healthy_hf_llama")
out("healthy_hf_llama", steps=n_steps)
