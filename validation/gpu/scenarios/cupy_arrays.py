"""CuPy allocating ten 4 MiB arrays through its own memory pool (its runtime is linked into its
Cython module and reaches the driver through cuGetProcAddress)."""
import cupy
from common import out

arrs = [cupy.full((1 << 20,), i, dtype=cupy.float32) for i in range(10)]
s = sum(float(a.sum()) for a in arrs)
out("cupy", sum=f"{s:.1f}", pool_used=cupy.get_default_memory_pool().used_bytes())
