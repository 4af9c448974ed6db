"""JAX allocating a few buffers (run with XLA_PYTHON_CLIENT_PREALLOCATE=false so the pool grows
on demand)."""
import jax
import jax.numpy as jnp
from common import out

xs = [jnp.full((1 << 20,), i, dtype=jnp.float32) for i in range(4)]
s = sum(float(x.sum()) for x in xs)
out("jax", sum=f"{s:.1f}", devices=len(jax.devices()))
