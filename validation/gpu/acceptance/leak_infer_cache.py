"""Leak without an optimizer: an inference server's loop. A GPT-2-style HuggingFace model (built
from a config, no download) answers 40 requests under torch.inference_mode(); a response cache
keeps every request's full logits on the GPU (1 x 90 x 8192 float32 = 2,949,120 bytes), allocated
by the model call at LEAK-LINE. There is no optimizer, so no optimizer step: the program's step is
the request (one call of the model). The caching allocator serves the logits from 20 MiB
segments, so the driver sees a new segment only every seventh request.

Truth: steady growth of 2,949,120 bytes per request (step) from request 0, at LEAK-LINE."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from acc import DEVICE, StepClock, out, steps

TRUTH = {
    "kind": "leak",
    "steps": 40,
    "step_unit": "request (model call)",
    "allocator": "default",
    "leaks": [{"marker": "LEAK-LINE", "bytes_per_step": 2949120, "from_step": 0, "what": "responses cached on the GPU"}],
}

torch.manual_seed(0)
config = GPT2Config(vocab_size=8192, n_positions=128, n_embd=256, n_layer=4, n_head=4, bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config).to(DEVICE).eval()
cache = {}
clock = StepClock()
n_requests = steps(40)
with torch.inference_mode():
    for request in range(n_requests):
        clock.start()
        prompt = torch.randint(0, config.vocab_size, (1, 90), device=DEVICE)
        logits = model(input_ids=prompt).logits  # LEAK-LINE
        cache[request] = logits
        answer = int(logits[0, -1].argmax())
        clock.stop()
clock.report("leak_infer_cache")
out("leak_infer_cache", requests=n_requests, cached=len(cache), last=answer)
