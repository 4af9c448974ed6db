//! Who made a place's memory, as far as causes and advice go: the framework or library whose
//! module asked for it (PyTorch, JAX/XLA, CuPy, NCCL, cuBLAS), another library (an extension
//! calling the CUDA allocator itself), Python itself (ctypes), or nobody known. Read from the
//! owner module's path, in this one place, for every analysis that words a cause or groups views.

use serde::Serialize;

use crate::units::base_name;

/// The kind of module that asked for a place's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerKind {
    /// PyTorch (`libc10_cuda.so`, `libtorch_cuda.so`, `torch/_C…so`): its caching allocator's
    /// segments, or with `cudaMallocAsync` its tensors; also PyTorch's own view of its tensors.
    Torch,
    /// JAX and XLA (`jaxlib`, `xla_cuda_plugin.so`, `libxla…`): XLA's allocator.
    Jax,
    /// TensorFlow (`libtensorflow…`).
    TensorFlow,
    /// CuPy (its Cython modules under `cupy/` or `cupy_backends/`): its memory pool.
    Cupy,
    /// NCCL (`libnccl.so`): communicators' buffers.
    Nccl,
    /// cuBLAS and cuBLASLt: workspaces.
    Cublas,
    /// Python itself (ctypes, libffi, the interpreter): the program called the CUDA API directly.
    Python,
    /// Any other module: an extension or the program's own native code.
    Extension,
    /// No module contains the caller.
    #[default]
    Unknown,
}

impl OwnerKind {
    /// The kind of the module at `path` (a file name alone works for every kind but CuPy, whose
    /// modules are named only by their directory).
    pub(crate) fn of_module(path: &str) -> OwnerKind {
        let name = base_name(path);
        let starts = |p: &str| name.starts_with(p);
        if starts("libnccl") {
            OwnerKind::Nccl
        } else if starts("libcublas") {
            OwnerKind::Cublas
        } else if starts("libtorch")
            || starts("libc10")
            || (starts("_C.") && path.contains("torch"))
        {
            OwnerKind::Torch
        } else if path.contains("/jaxlib/")
            || path.contains("/jax_plugins/")
            || name.contains("xla")
            || starts("libjax")
        {
            OwnerKind::Jax
        } else if starts("libtensorflow") || path.contains("/tensorflow/") {
            OwnerKind::TensorFlow
        } else if path.contains("/cupy/") || path.contains("/cupy_backends/") || starts("cupy") {
            OwnerKind::Cupy
        } else if starts("libffi") || starts("_ctypes") || starts("libpython") || starts("python") {
            OwnerKind::Python
        } else {
            OwnerKind::Extension
        }
    }

    /// Whether the module is a framework's allocator: what it asks the driver for are pools or
    /// segments it carves the program's arrays from, so the line where it asked need not be the
    /// line whose arrays stay live.
    pub(crate) const fn is_framework(self) -> bool {
        matches!(
            self,
            OwnerKind::Torch | OwnerKind::Jax | OwnerKind::TensorFlow | OwnerKind::Cupy
        )
    }

    /// Whether what this kind of module allocated through entry point `api` is a framework
    /// allocator's pool or segment (not one array). Stream-ordered allocations (PyTorch's
    /// `cudaMallocAsync` backend) are one array each.
    pub(crate) fn makes_pools(self, api: Option<&str>) -> bool {
        let per_array = api.is_some_and(|a| {
            a.contains("MallocAsync") || a.contains("AllocAsync") || a.contains("FromPool")
        });
        self.is_framework() && !per_array
    }

    /// The name users know it by.
    pub const fn name(self) -> &'static str {
        match self {
            OwnerKind::Torch => "PyTorch",
            OwnerKind::Jax => "JAX/XLA",
            OwnerKind::TensorFlow => "TensorFlow",
            OwnerKind::Cupy => "CuPy",
            OwnerKind::Nccl => "NCCL",
            OwnerKind::Cublas => "cuBLAS",
            OwnerKind::Python => "Python",
            OwnerKind::Extension => "an extension",
            OwnerKind::Unknown => "unknown",
        }
    }
}

/// Whether frames of the module at `path` are a library's rather than the program's own: the
/// CUDA libraries, NCCL, cuBLAS, the frameworks, the C and C++ runtimes and the interpreter. A
/// native program's call site is named by its first frame outside them.
pub fn is_library_module(path: &str) -> bool {
    let name = base_name(path);
    let system = [
        "libc.so",
        "libc-",
        "libstdc++",
        "libgcc_s",
        "libpthread",
        "ld-linux",
    ];
    let cuda = [
        "libcuda",
        "libnvidia",
        "libcudnn",
        "libcufft",
        "libcurand",
        "libcusparse",
    ];
    crate::module_map::is_cuda_library(name)
        || system.iter().chain(&cuda).any(|p| name.starts_with(p))
        || !matches!(
            OwnerKind::of_module(path),
            OwnerKind::Extension | OwnerKind::Unknown
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_are_told_by_their_path() {
        for (path, kind) in [
            ("/usr/lib/x86_64-linux-gnu/libnccl.so.2", OwnerKind::Nccl),
            ("/opt/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublasLt.so.13", OwnerKind::Cublas),
            ("/opt/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so", OwnerKind::Torch),
            ("/opt/venv/lib/python3.12/site-packages/torch/_C.cpython-312-x86_64-linux-gnu.so", OwnerKind::Torch),
            ("/opt/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so", OwnerKind::Jax),
            ("/opt/venv/lib/python3.12/site-packages/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so", OwnerKind::Cupy),
            ("/usr/lib/x86_64-linux-gnu/libffi.so.8", OwnerKind::Python),
            ("/work/ext/libleaky.so", OwnerKind::Extension),
            ("libtorch_standin.so", OwnerKind::Torch),
        ] {
            assert_eq!(OwnerKind::of_module(path), kind, "{path}");
        }
        assert!(OwnerKind::Cupy.is_framework() && !OwnerKind::Nccl.is_framework());
    }

    #[test]
    fn a_native_program_is_not_a_library() {
        assert!(!is_library_module("/work/bin/wl_train"));
        assert!(!is_library_module("/work/ext/libleaky.so"));
        for lib in [
            "libnccl.so.2",
            "libcudart.so.13",
            "/lib/x86_64-linux-gnu/libc.so.6",
            "libc10_cuda.so",
        ] {
            assert!(is_library_module(lib), "{lib}");
        }
    }
}
