//! Which exported driver function a look-up by base name returns.
//!
//! `cuGetProcAddress("cuMemAlloc", version, flags)` returns the entry point of the ABI that
//! `version` selects (`cuMemAlloc_v2` since CUDA 3.2, the 32-bit `cuMemAlloc` before), and the
//! `_ptsz` variant of stream functions when the per-thread default stream is asked for. The wrapper
//! handed back must have that exact ABI, never simply the newest.

/// Base names whose ABI changed, newest first: `(first CUDA version, exported name)`.
const VERSIONED: &[(&str, &[(u32, &str)])] = &[
    ("cuMemAlloc", &[(3020, "cuMemAlloc_v2"), (0, "cuMemAlloc")]),
    ("cuMemFree", &[(3020, "cuMemFree_v2"), (0, "cuMemFree")]),
    (
        "cuMemAllocPitch",
        &[(3020, "cuMemAllocPitch_v2"), (0, "cuMemAllocPitch")],
    ),
    (
        "cuMemAllocHost",
        &[(3020, "cuMemAllocHost_v2"), (0, "cuMemAllocHost")],
    ),
    (
        "cuMemHostRegister",
        &[(6050, "cuMemHostRegister_v2"), (0, "cuMemHostRegister")],
    ),
    (
        "cuIpcOpenMemHandle",
        &[(11000, "cuIpcOpenMemHandle_v2"), (0, "cuIpcOpenMemHandle")],
    ),
    (
        "cuArrayCreate",
        &[(3020, "cuArrayCreate_v2"), (0, "cuArrayCreate")],
    ),
    (
        "cuArray3DCreate",
        &[(3020, "cuArray3DCreate_v2"), (0, "cuArray3DCreate")],
    ),
    (
        "cuCtxCreate",
        &[
            (12050, "cuCtxCreate_v4"),
            (11040, "cuCtxCreate_v3"),
            (3020, "cuCtxCreate_v2"),
            (0, "cuCtxCreate"),
        ],
    ),
    (
        "cuCtxDestroy",
        &[(4000, "cuCtxDestroy_v2"), (0, "cuCtxDestroy")],
    ),
    (
        "cuDevicePrimaryCtxRelease",
        &[
            (11000, "cuDevicePrimaryCtxRelease_v2"),
            (0, "cuDevicePrimaryCtxRelease"),
        ],
    ),
    (
        "cuDevicePrimaryCtxReset",
        &[
            (11000, "cuDevicePrimaryCtxReset_v2"),
            (0, "cuDevicePrimaryCtxReset"),
        ],
    ),
    (
        "cuGetProcAddress",
        &[(12000, "cuGetProcAddress_v2"), (0, "cuGetProcAddress")],
    ),
];

/// Stream functions with a per-thread-default-stream variant: `(base, _ptsz name)`.
const PER_THREAD: &[(&str, &str)] = &[
    ("cuMemAllocAsync", "cuMemAllocAsync_ptsz"),
    ("cuMemFreeAsync", "cuMemFreeAsync_ptsz"),
    ("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"),
];

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` (same bit as
/// `cudaEnablePerThreadDefaultStream`).
pub const PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// Every exported name a look-up of `base` can return.
pub fn variants(base: &str) -> Vec<&'static str> {
    if let Some((_, v)) = VERSIONED.iter().find(|(b, _)| *b == base) {
        return v.iter().map(|(_, n)| *n).collect();
    }
    if let Some((b, p)) = PER_THREAD.iter().find(|(b, _)| *b == base) {
        return vec![b, p];
    }
    Vec::new()
}

/// The exported name a look-up of `base` returns for `version` (`None`: the newest) and `flags`,
/// by the documented rules. `None` when `base` has a single ABI (the name is the base itself).
pub fn by_rule(base: &str, version: Option<u32>, flags: u64) -> Option<&'static str> {
    if let Some((_, v)) = VERSIONED.iter().find(|(b, _)| *b == base) {
        let want = version.unwrap_or(u32::MAX);
        return v.iter().find(|(since, _)| want >= *since).map(|(_, n)| *n);
    }
    if let Some((b, p)) = PER_THREAD.iter().find(|(b, _)| *b == base) {
        return Some(if flags & PER_THREAD_DEFAULT_STREAM != 0 {
            p
        } else {
            b
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pick_the_abi_asked_for() {
        assert_eq!(by_rule("cuMemAlloc", Some(13000), 0), Some("cuMemAlloc_v2"));
        assert_eq!(by_rule("cuMemAlloc", Some(3010), 0), Some("cuMemAlloc"));
        assert_eq!(by_rule("cuMemAlloc", None, 0), Some("cuMemAlloc_v2"));
        assert_eq!(
            by_rule("cuCtxCreate", Some(12000), 0),
            Some("cuCtxCreate_v3")
        );
        assert_eq!(
            by_rule("cuCtxCreate", Some(13000), 0),
            Some("cuCtxCreate_v4")
        );
        assert_eq!(
            by_rule("cuGetProcAddress", Some(11080), 0),
            Some("cuGetProcAddress")
        );
        assert_eq!(
            by_rule("cuMemAllocAsync", Some(13000), PER_THREAD_DEFAULT_STREAM),
            Some("cuMemAllocAsync_ptsz")
        );
        assert_eq!(
            by_rule("cuMemAllocAsync", Some(13000), 0),
            Some("cuMemAllocAsync")
        );
        assert_eq!(by_rule("cuMemCreate", Some(13000), 0), None);
        assert_eq!(variants("cuMemFree"), vec!["cuMemFree_v2", "cuMemFree"]);
    }
}
