//! The few CUDA and NCCL types the hooks read, laid out as in the CUDA 13 and NCCL 2.28 headers.
//! Return codes stay plain `i32` (`CUresult`, `cudaError_t`, `ncclResult_t`): a newer library may
//! return values an older enum does not list.

use libc::c_void;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    pub kind: u32,
    pub id: i32,
}

/// `CUmemAllocationProp` (the fields before `location` and `location` itself are what we read).
#[repr(C)]
pub struct MemAllocationProp {
    pub kind: u32,
    pub requested_handle_types: u32,
    pub location: MemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: [u8; 8],
}

/// `CUmemPoolProps` / `cudaMemPoolProps` (leading fields).
#[repr(C)]
pub struct MemPoolProps {
    pub alloc_type: u32,
    pub handle_types: u32,
    pub location: MemLocation,
}

/// `CUDA_ARRAY_DESCRIPTOR` (v2).
#[repr(C)]
pub struct ArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub num_channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (v2).
#[repr(C)]
pub struct Array3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub num_channels: u32,
    pub flags: u32,
}

/// `cudaChannelFormatDesc`.
#[repr(C)]
pub struct ChannelFormatDesc {
    pub x: i32,
    pub y: i32,
    pub z: i32,
    pub w: i32,
    pub f: i32,
}

/// `cudaExtent`, passed by value (on the stack: it is larger than 16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Extent {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
}

/// `cudaPitchedPtr`.
#[repr(C)]
pub struct PitchedPtr {
    pub ptr: *mut c_void,
    pub pitch: usize,
    pub xsize: usize,
    pub ysize: usize,
}

/// `CUipcMemHandle`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcMemHandle {
    pub reserved: [u8; 64],
}

/// `ncclUniqueId`, passed by value (128 bytes on the stack; declaring it as a pointer crashes
/// real programs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; 128],
}

/// Bytes per channel element of a `CUarray_format`, when known.
pub fn array_format_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => return None,
    })
}

/// Bytes of an array: width × height × depth × element size × channels (0 when the format is
/// one we cannot size).
pub fn array_bytes(width: usize, height: usize, depth: usize, format: u32, channels: u32) -> u64 {
    array_format_bytes(format).map_or(0, |e| {
        width as u64 * height.max(1) as u64 * depth.max(1) as u64 * e * u64::from(channels.max(1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_cuda_headers() {
        assert_eq!(std::mem::size_of::<MemAllocationProp>(), 32);
        assert_eq!(std::mem::offset_of!(MemAllocationProp, location), 8);
        assert_eq!(std::mem::offset_of!(MemPoolProps, location), 8);
        assert_eq!(std::mem::size_of::<ArrayDescriptor>(), 24);
        assert_eq!(std::mem::size_of::<Array3DDescriptor>(), 40);
        assert_eq!(std::mem::size_of::<ChannelFormatDesc>(), 20);
        assert_eq!(std::mem::size_of::<Extent>(), 24);
        assert_eq!(std::mem::size_of::<PitchedPtr>(), 32);
        assert_eq!(std::mem::size_of::<IpcMemHandle>(), 64);
        assert_eq!(std::mem::size_of::<NcclUniqueId>(), 128);
    }

    #[test]
    fn array_sizes() {
        assert_eq!(array_bytes(100, 0, 0, 0x20, 4), 1600);
        assert_eq!(array_bytes(10, 10, 10, 0x01, 1), 1000);
        assert_eq!(array_bytes(10, 10, 10, 0xb0, 1), 0);
    }
}
