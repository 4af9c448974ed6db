"""A custom CUDA extension (validation/gpu/ext/leaky.cu, built with nvcc on the machine) that
allocates with cudaMalloc and keeps two of five buffers (a planted leak of 2 x 8 MiB)."""
import ctypes
import sys

import torch
from common import out

torch.zeros(1, device="cuda")
lib = ctypes.CDLL(sys.argv[1])
lib.leaky_run.restype = ctypes.c_int
rc = lib.leaky_run(5, 2, 8 << 20)
out("extension", rc=rc, kept=lib.leaky_kept())
