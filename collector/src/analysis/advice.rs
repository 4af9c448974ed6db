//! The likely cause and the usual fix of each kind of finding, in one line each, worded for the
//! framework or library that made the memory ([`OwnerKind`]): PyTorch's caching allocator and its
//! tensors, JAX/XLA's preallocated pool, CuPy's memory pool, NCCL's communicators, cuBLAS's
//! workspaces, an extension's own allocations. A likely cause, not a proof: the evidence beside it
//! says how sure.

use super::orphans::OrphanKind;
use super::owner::OwnerKind;

/// A cause and its fix.
pub(super) struct Advice {
    pub cause: String,
    pub fix: String,
}

fn advice(cause: impl Into<String>, fix: impl Into<String>) -> Advice {
    Advice {
        cause: cause.into(),
        fix: fix.into(),
    }
}

/// Tensors that stay live step after step, seen one by one.
pub(super) fn kept_tensors() -> Advice {
    advice(
        "tensors kept across steps (appended to a list, or stored with their autograd graph)",
        "store .detach() / .item() or move to CPU (.cpu()) before keeping; clear what is kept",
    )
}

/// A steady growth the tracer alerted on at step `at`, judging steps from before step `from`,
/// where reading began.
pub(super) fn alerted_before(from: u64, at: u64) -> Advice {
    let saw = match at <= from {
        true => format!("in the steps before step {from}, where reading began"),
        false => format!(
            "over the steps up to step {at}, the first of them before step {from}, where \
             reading began"
        ),
    };
    advice(
        format!(
            "steady growth the tracer's live analysis saw {saw}: the steps read are too few to \
             show it again"
        ),
        "read more of the run for the line and its rate (`report` without --last/--since, or \
         `replay` from an earlier step); what the alert names is where to look first",
    )
}

/// A steady growth of memory `owner` asked for (`module` its file name); `asked`: the line is
/// where an allocator asked the driver for memory, not necessarily the one that keeps it;
/// `hooked`: the trace has PyTorch's hooks (their recorder, not its history yet where judged).
pub(super) fn growth(owner: OwnerKind, module: Option<&str>, asked: bool, hooked: bool) -> Advice {
    let module = module.unwrap_or("(unknown module)");
    match owner {
        OwnerKind::Torch if asked => advice(
            "tensors kept across steps: PyTorch's caching allocator reserves more segments step \
             after step; the line is where it asked the driver for memory, not necessarily the \
             line that keeps the tensors",
            if hooked {
                "look for tensors kept across steps (lists, dicts, a loss kept with its graph: \
                 .detach() / .item()); PyTorch's recorder names the line that keeps them from \
                 the history it hands over at exit or at an alert (the report of the whole run), \
                 where that history holds whole steps"
            } else {
                "look for tensors kept across steps (lists, dicts, a loss kept with its graph: \
                 .detach() / .item()); `vramtrace run` records PyTorch's tensors and names the \
                 line that keeps them"
            },
        ),
        OwnerKind::Torch => kept_tensors(),
        OwnerKind::Jax => advice(
            "arrays kept alive across steps (a list, a dict or a closure holding jax.Array \
             results): XLA's allocator grows for them",
            "drop references to arrays no longer needed; keep host copies (jax.device_get) \
             instead of device arrays",
        ),
        OwnerKind::TensorFlow => advice(
            "tensors kept alive across steps: TensorFlow's allocator grows for them",
            "drop references to tensors no longer needed; keep host copies (.numpy())",
        ),
        OwnerKind::Cupy => advice(
            "CuPy arrays kept alive across iterations: CuPy's memory pool asks the driver for \
             more blocks (at the line that needed new memory: when a freed block served a kept \
             array, that is not the line that keeps it)",
            "drop references to arrays no longer needed (del, or keep host copies with .get()); \
             cupy.get_default_memory_pool().free_all_blocks() returns the pool's free blocks",
        ),
        OwnerKind::Nccl => advice(
            "NCCL communicators created and never destroyed: each new process group (new_group, \
             split) allocates its buffers",
            "create the group once and reuse it, or destroy each with \
             dist.destroy_process_group(group) when done",
        ),
        OwnerKind::Cublas => advice(
            "a cuBLAS workspace per new handle or stream",
            "reuse streams and handles across steps",
        ),
        OwnerKind::Python => advice(
            "device memory allocated straight from Python (ctypes) and kept across steps",
            "free it (cudaFree) when done, or allocate it once and reuse it",
        ),
        OwnerKind::Extension => advice(
            format!("raw device allocations in {module} never freed"),
            "free them (cudaFree) when done, or allocate through the framework's allocator",
        ),
        OwnerKind::Unknown => advice(
            "device memory allocated here is kept across steps",
            "free it when done, or keep it once instead of every step",
        ),
    }
}

/// A one-off rise of memory `owner` asked for: one that stayed (`kept`), or that fell back.
pub(super) fn one_off(owner: OwnerKind, kept: bool) -> Advice {
    let smaller = "if this is what runs out of memory: make it smaller (batch, sequence) or \
                   recompute instead of keeping (checkpointing)";
    match owner {
        OwnerKind::Jax => advice(
            "XLA's memory pool: JAX preallocates a share of the device (75% by default) when it \
             starts and serves every array from it (not a leak, not a batch)",
            "XLA_PYTHON_CLIENT_PREALLOCATE=false allocates on demand; \
             XLA_PYTHON_CLIENT_MEM_FRACTION=.5 sizes the pool (to share the device)",
        ),
        OwnerKind::Cupy => advice(
            if kept {
                "a one-off rise that stayed: CuPy's memory pool keeps the blocks of a large \
                 pass for reuse (not a leak)"
            } else {
                "a large temporary that rose and fell back: not a leak"
            },
            format!(
                "{smaller}; cupy.get_default_memory_pool().free_all_blocks() returns what the \
                 pool keeps"
            ),
        ),
        OwnerKind::Torch => advice(
            if kept {
                "a one-off rise that stayed: a large batch or evaluation once, whose memory \
                 PyTorch's caching allocator keeps for reuse (not a leak)"
            } else {
                "a large temporary that rose and fell back: not a leak"
            },
            format!(
                "{smaller}; torch.cuda.empty_cache() after a one-off pass returns what the \
                 allocator kept"
            ),
        ),
        _ => advice(
            if kept {
                "a one-off rise that stayed: a large allocation made once and kept (not a leak)"
            } else {
                "a large temporary that rose and fell back: not a leak"
            },
            smaller,
        ),
    }
}

/// Memory held but unusable when a request failed, or physical memory no mapping reaches.
pub(super) fn fragmentation(owner: OwnerKind, failed: bool) -> Advice {
    let cause = if failed {
        "an allocation failed that the memory held but unusable (pools' reserve, unmapped \
         physical memory) could have served"
    } else {
        "physical memory that no mapping reaches"
    };
    let fix = match owner {
        OwnerKind::Torch => {
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets PyTorch's allocator grow \
             segments instead of splitting them; torch.cuda.empty_cache() returns cached \
             segments"
        }
        OwnerKind::Cupy => "cupy.get_default_memory_pool().free_all_blocks() before large requests",
        OwnerKind::Jax => {
            "XLA_PYTHON_CLIENT_ALLOCATOR=platform, or a smaller \
                           XLA_PYTHON_CLIENT_MEM_FRACTION"
        }
        _ => "trim pools (cudaMemPoolTrimTo) or release unmapped handles (cuMemRelease)",
    };
    advice(cause, fix)
}

/// An out-of-memory error of PyTorch's that its own cache could have served.
pub(super) fn cache_relief(r: &super::fragmentation::OomRelief) -> Advice {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    if r.empty_cache_serves {
        advice(
            format!(
                "PyTorch ran out of memory for {} while its cache held {} in whole free segments:                  given back, they would have served it",
                mib(r.requested),
                mib(r.free_segments)
            ),
            "torch.cuda.empty_cache() after one-off large passes (evaluation, a larger batch);              PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True keeps the cache from splitting",
        )
    } else {
        advice(
            format!(
                "PyTorch ran out of memory for {} while its cache held {} free, split inside                  segments in use: enough, but not in one piece",
                mib(r.requested),
                mib(r.cached_free)
            ),
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the allocator maps free pages into              one growing segment); empty_cache() would not have helped",
        )
    }
}

/// Orphans of `kind`.
pub(super) fn orphan(kind: OrphanKind) -> Advice {
    use OrphanKind::*;
    let (cause, fix) = match kind {
        CommunicatorDestroyed | CommunicatorAborted => (
            "NCCL buffers outlived their communicator",
            "free NCCL buffers (ncclMemFree, deregister windows) before destroying the communicator",
        ),
        ContextGone => (
            "objects of a destroyed context still held",
            "release handles and mappings before destroying the context",
        ),
        PoolDestroyed => (
            "allocations of a destroyed memory pool",
            "free pool allocations before destroying the pool",
        ),
        UnmappedHandle => (
            "physical memory no mapping reaches (cuMemCreate without cuMemRelease)",
            "cuMemRelease each handle once unmapped",
        ),
        MappingWithoutReservation => (
            "a mapping into an address range already freed",
            "cuMemUnmap before cuMemAddressFree",
        ),
        RegistrationBufferGone => (
            "an NCCL registration whose buffer was freed",
            "ncclCommDeregister before freeing the buffer",
        ),
        RegistrationCommunicatorGone => (
            "an NCCL registration whose communicator is gone",
            "deregister buffers before destroying the communicator",
        ),
    };
    advice(format!("{cause} ({})", kind.name()), fix)
}
