//! The intercepted entry points, one variant per exact exported symbol.
//!
//! Variants are serialized by index, so new ones are only ever appended (a reader that meets an
//! index it does not know skips the whole record, see `format::reader`).

use serde::{Deserialize, Serialize};

macro_rules! apis {
    ($($variant:ident => $name:literal, $layer:ident;)*) => {
        /// One intercepted function, named exactly as the library exports it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Api {
            $($variant,)*
        }

        impl Api {
            /// Every variant, in serialization order.
            pub const ALL: &'static [Api] = &[$(Api::$variant,)*];

            /// The exported symbol name (`cuMemAlloc_v2`, not `cuMemAlloc`).
            pub const fn name(self) -> &'static str {
                match self { $(Api::$variant => $name,)* }
            }

            /// Which library layer the function belongs to.
            #[inline]
            pub const fn layer(self) -> Layer {
                // A table, not a match: this is on the path of every intercepted call.
                const LAYERS: &[Layer] = &[$(Layer::$layer,)*];
                LAYERS[self as usize]
            }
        }
    };
}

/// The library an entry point belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layer {
    /// The CUDA runtime (`libcudart`).
    Runtime,
    /// The CUDA driver (`libcuda`).
    Driver,
    /// NCCL (`libnccl`).
    Nccl,
    /// The tracer's own API (`vramtrace_mark_step`, ...).
    Tracer,
}

apis! {
    CudaMalloc => "cudaMalloc", Runtime;
    CudaFree => "cudaFree", Runtime;
    CudaMallocAsync => "cudaMallocAsync", Runtime;
    CudaFreeAsync => "cudaFreeAsync", Runtime;
    CudaMallocFromPoolAsync => "cudaMallocFromPoolAsync", Runtime;
    CudaMallocManaged => "cudaMallocManaged", Runtime;
    CudaMallocHost => "cudaMallocHost", Runtime;
    CudaHostAlloc => "cudaHostAlloc", Runtime;
    CudaFreeHost => "cudaFreeHost", Runtime;
    CudaHostRegister => "cudaHostRegister", Runtime;
    CudaHostUnregister => "cudaHostUnregister", Runtime;
    CudaMallocPitch => "cudaMallocPitch", Runtime;
    CudaMalloc3D => "cudaMalloc3D", Runtime;
    CudaMallocArray => "cudaMallocArray", Runtime;
    CudaMalloc3DArray => "cudaMalloc3DArray", Runtime;
    CudaFreeArray => "cudaFreeArray", Runtime;
    CudaMemPoolCreate => "cudaMemPoolCreate", Runtime;
    CudaMemPoolDestroy => "cudaMemPoolDestroy", Runtime;
    CudaMemPoolTrimTo => "cudaMemPoolTrimTo", Runtime;
    CudaDeviceReset => "cudaDeviceReset", Runtime;

    CuMemAlloc => "cuMemAlloc_v2", Driver;
    CuMemFree => "cuMemFree_v2", Driver;
    CuMemAllocPitch => "cuMemAllocPitch_v2", Driver;
    CuMemAllocManaged => "cuMemAllocManaged", Driver;
    CuMemAllocAsync => "cuMemAllocAsync", Driver;
    CuMemAllocAsyncPtsz => "cuMemAllocAsync_ptsz", Driver;
    CuMemFreeAsync => "cuMemFreeAsync", Driver;
    CuMemFreeAsyncPtsz => "cuMemFreeAsync_ptsz", Driver;
    CuMemAllocFromPoolAsync => "cuMemAllocFromPoolAsync", Driver;
    CuMemAllocFromPoolAsyncPtsz => "cuMemAllocFromPoolAsync_ptsz", Driver;
    CuMemHostAlloc => "cuMemHostAlloc", Driver;
    CuMemAllocHost => "cuMemAllocHost_v2", Driver;
    CuMemFreeHost => "cuMemFreeHost", Driver;
    CuMemHostRegister => "cuMemHostRegister_v2", Driver;
    CuMemHostRegisterV1 => "cuMemHostRegister", Driver;
    CuMemHostUnregister => "cuMemHostUnregister", Driver;
    CuMemCreate => "cuMemCreate", Driver;
    CuMemRelease => "cuMemRelease", Driver;
    CuMemRetainAllocationHandle => "cuMemRetainAllocationHandle", Driver;
    CuMemMap => "cuMemMap", Driver;
    CuMemUnmap => "cuMemUnmap", Driver;
    CuMemAddressReserve => "cuMemAddressReserve", Driver;
    CuMemAddressFree => "cuMemAddressFree", Driver;
    CuMemImportFromShareableHandle => "cuMemImportFromShareableHandle", Driver;
    CuMemPoolCreate => "cuMemPoolCreate", Driver;
    CuMemPoolDestroy => "cuMemPoolDestroy", Driver;
    CuMemPoolTrimTo => "cuMemPoolTrimTo", Driver;
    CuIpcOpenMemHandle => "cuIpcOpenMemHandle_v2", Driver;
    CuIpcOpenMemHandleV1 => "cuIpcOpenMemHandle", Driver;
    CuIpcCloseMemHandle => "cuIpcCloseMemHandle", Driver;
    CuArrayCreate => "cuArrayCreate_v2", Driver;
    CuArray3DCreate => "cuArray3DCreate_v2", Driver;
    CuArrayDestroy => "cuArrayDestroy", Driver;
    CuCtxCreateV2 => "cuCtxCreate_v2", Driver;
    CuCtxCreateV3 => "cuCtxCreate_v3", Driver;
    CuCtxCreateV4 => "cuCtxCreate_v4", Driver;
    CuCtxDestroy => "cuCtxDestroy_v2", Driver;
    CuDevicePrimaryCtxRelease => "cuDevicePrimaryCtxRelease_v2", Driver;
    CuDevicePrimaryCtxReleaseV1 => "cuDevicePrimaryCtxRelease", Driver;
    CuDevicePrimaryCtxReset => "cuDevicePrimaryCtxReset_v2", Driver;
    CuDevicePrimaryCtxResetV1 => "cuDevicePrimaryCtxReset", Driver;

    NcclCommInitRank => "ncclCommInitRank", Nccl;
    NcclCommInitRankConfig => "ncclCommInitRankConfig", Nccl;
    NcclCommInitAll => "ncclCommInitAll", Nccl;
    NcclCommSplit => "ncclCommSplit", Nccl;
    NcclCommDestroy => "ncclCommDestroy", Nccl;
    NcclCommAbort => "ncclCommAbort", Nccl;
    NcclCommFinalize => "ncclCommFinalize", Nccl;
    NcclMemAlloc => "ncclMemAlloc", Nccl;
    NcclMemFree => "ncclMemFree", Nccl;
    NcclCommRegister => "ncclCommRegister", Nccl;
    NcclCommDeregister => "ncclCommDeregister", Nccl;
    NcclCommWindowRegister => "ncclCommWindowRegister", Nccl;
    NcclCommWindowDeregister => "ncclCommWindowDeregister", Nccl;

    TracerMarkStep => "vramtrace_mark_step", Tracer;
    NvtxRangePush => "nvtxRangePush", Tracer;
    NvtxRangePop => "nvtxRangePop", Tracer;
    NvtxMark => "nvtxMark", Tracer;
    TracerMemInfo => "cuMemGetInfo_v2", Tracer;
    CuDevicePrimaryCtxRetain => "cuDevicePrimaryCtxRetain", Driver;
    TracerMarkIteration => "vramtrace_mark_iteration", Tracer;
}

impl Api {
    /// Looks an exact exported name up.
    #[cfg(test)]
    pub(crate) fn from_name(name: &str) -> Option<Api> {
        Api::ALL.iter().copied().find(|a| a.name() == name)
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<_> = Api::ALL.iter().map(|a| a.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Api::ALL.len());
        for a in Api::ALL {
            assert_eq!(Api::from_name(a.name()), Some(*a));
        }
        assert_eq!(
            Api::from_name("cuMemAlloc"),
            None,
            "the v1 ABI is not cuMemAlloc_v2"
        );
    }
}
