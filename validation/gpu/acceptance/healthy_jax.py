"""Healthy JAX (no PyTorch): an MLP trained for 200 steps with jax.jit and plain SGD, with XLA's
default preallocation (XLA reserves 75% of the device in one block at start and serves every
array from it). Nothing leaks.

Truth: no growth (the one up-front block is JAX's pool, not a leak and not a batch)."""
import jax
import jax.numpy as jnp

from plain import out, steps

TRUTH = {"kind": "healthy", "serial": True, "steps": 200, "allocator": "jax", "torch": False}

key = jax.random.PRNGKey(0)
k1, k2, key = jax.random.split(key, 3)
params = {
    "w1": jax.random.normal(k1, (1024, 4096)) * 0.02,
    "w2": jax.random.normal(k2, (4096, 10)) * 0.02,
}


def loss_fn(p, x, y):
    h = jax.nn.gelu(x @ p["w1"])
    logits = h @ p["w2"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))


@jax.jit
def update(p, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, g: a - 1e-2 * g, p, grads), loss


n = steps(200)
for step in range(n):
    key, kx, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (512, 1024))
    y = jax.random.randint(ky, (512,), 0, 10)
    params, loss = update(params, x, y)
loss.block_until_ready()
out("healthy_jax", steps=n, finite=bool(jnp.isfinite(loss)))
