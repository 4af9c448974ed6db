//! The one description of the operations ([`Op`]) that the writer and the reader both follow:
//! each variant's wire index (its position here, which is its declaration order) and its fields
//! in order, the address fields marked `ptr`.
//!
//! Adding a variant to `Op` means appending it there and here; the `match`es generated below
//! are exhaustive, so a variant missing here does not compile. A field is written as its type
//! says ([`Field`]): an integer as a varint (`i32` zigzagged, an enum as its variant index), a
//! string or list as its length and then its bytes or varints; an address as the zigzagged
//! difference from the chunk's previous one, in the pointer column.

use super::varint::{unzig32, zig32};
use crate::event::{CommEnd, MemKind, Op};

/// Takes an operation's fields, as the writer writes them.
pub(crate) trait FieldWriter {
    /// An address.
    fn ptr(&mut self, v: u64);
    /// An integer (0 when absent).
    fn value(&mut self, v: u64);
    /// A string's bytes.
    fn bytes(&mut self, v: &[u8]);
    /// A list's values.
    fn list(&mut self, v: impl ExactSizeIterator<Item = u64>);
}

/// Gives an operation's fields, as the reader reads them; `None` for damage.
pub(crate) trait FieldReader {
    fn ptr(&mut self) -> Option<u64>;
    fn value(&mut self) -> Option<u64>;
    fn bytes(&mut self) -> Option<Vec<u8>>;
    fn list(&mut self) -> Option<Vec<u64>>;
    /// Notes a value this reader does not know (an enum variant of a newer writer).
    fn unknown(&mut self);
}

/// A field's type, to and from what is written.
pub(crate) trait Field: Sized {
    fn put(&self, w: &mut impl FieldWriter);
    fn get(r: &mut impl FieldReader) -> Option<Self>;
}

/// Integers, each written as a varint of a `u64`: `(to, from)` the `u64`.
macro_rules! int_fields {
    ($($type:ty: $to:expr, $from:expr;)*) => {$(
        impl Field for $type {
            fn put(&self, w: &mut impl FieldWriter) {
                w.value($to(*self));
            }
            #[inline(always)]
            fn get(r: &mut impl FieldReader) -> Option<Self> {
                r.value().and_then($from)
            }
        }
    )*};
}

int_fields! {
    u64: |v| v, Some;
    u32: u64::from, |v| u32::try_from(v).ok();
    i32: zig32, unzig32;
}

/// Enums written as their variant index, with the variants in order.
macro_rules! enum_fields {
    ($($type:ident [$($variant:ident),*])*) => {$(
        impl Field for $type {
            fn put(&self, w: &mut impl FieldWriter) {
                w.value(*self as u64);
            }
            #[inline(always)]
            fn get(r: &mut impl FieldReader) -> Option<Self> {
                const ALL: &[$type] = &[$($type::$variant),*];
                let i = r.value()?;
                let known = usize::try_from(i).ok().and_then(|i| ALL.get(i));
                Some(*known.unwrap_or_else(|| {
                    r.unknown();
                    &ALL[0]
                }))
            }
        }
    )*};
}

enum_fields! {
    MemKind [Device, Async, Managed, Pitched, HostPinned, Array]
    CommEnd [Destroy, Abort, Finalize]
}

impl Field for String {
    fn put(&self, w: &mut impl FieldWriter) {
        w.bytes(self.as_bytes());
    }
    fn get(r: &mut impl FieldReader) -> Option<Self> {
        String::from_utf8(r.bytes()?).ok()
    }
}

impl Field for Vec<u64> {
    fn put(&self, w: &mut impl FieldWriter) {
        w.list(self.iter().copied());
    }
    fn get(r: &mut impl FieldReader) -> Option<Self> {
        r.list()
    }
}

impl Field for Vec<i32> {
    fn put(&self, w: &mut impl FieldWriter) {
        w.list(self.iter().map(|&v| zig32(v)));
    }
    fn get(r: &mut impl FieldReader) -> Option<Self> {
        r.list()?.into_iter().map(unzig32).collect()
    }
}

/// Writes a field: an address (`ptr`) or as its type says.
macro_rules! put {
    (ptr; $w:ident, $v:ident) => {
        $w.ptr(*$v)
    };
    (; $w:ident, $v:ident) => {
        Field::put($v, $w)
    };
}

/// Reads a field: an address (`ptr`) or as its type says.
macro_rules! get {
    (ptr; $r:ident) => {
        $r.ptr()
    };
    (; $r:ident) => {
        Field::get($r)
    };
}

macro_rules! operations {
    ($($variant:ident { $($field:ident $(: $ptr:ident)?),* $(,)? }),* $(,)?) => {
        /// The variants in wire order: `Index::X as u32` is the wire index of `Op::X`.
        #[derive(Clone, Copy)]
        enum Index {
            $($variant,)*
        }

        /// The variants by wire index.
        const BY_INDEX: &[Index] = &[$(Index::$variant,)*];

        /// Variants this build knows: wire indexes `0..KNOWN_OPS`.
        pub(crate) const KNOWN_OPS: u32 = BY_INDEX.len() as u32;

        /// The wire index of `op`.
        #[inline]
        pub(crate) fn index(op: &Op) -> u32 {
            (match op {
                $(Op::$variant { .. } => Index::$variant,)*
            }) as u32
        }

        /// Hands the fields of `op` to `w` in order.
        #[inline]
        pub(crate) fn write(op: &Op, w: &mut impl FieldWriter) {
            match op {
                $(Op::$variant { $($field),* } => {
                    $(put!($($ptr)?; w, $field);)*
                })*
            }
        }

        /// Reads the fields of the variant of wire index `index` from `r` into `op`: in place
        /// when `op` is that variant already (as the previous event's mostly is), so nothing is
        /// built aside, moved and dropped. `Some(false)` for an index this build does not know
        /// (nothing is read); `None` when `r` gives up (`op` may then be partly overwritten,
        /// every field of it is written again by the next event that reads it).
        #[inline(always)]
        pub(crate) fn read_into(index: u32, r: &mut impl FieldReader, op: &mut Op) -> Option<bool> {
            let Some(&variant) = BY_INDEX.get(index as usize) else {
                return Some(false);
            };
            match (variant, op) {
                $((Index::$variant, Op::$variant { $($field),* }) => {
                    $(*$field = get!($($ptr)?; r)?;)*
                })*
                (variant, op) => *op = read_new(variant, r)?,
            }
            Some(true)
        }

        /// Reads the fields of `variant` into a new operation.
        #[inline(always)]
        fn read_new(variant: Index, r: &mut impl FieldReader) -> Option<Op> {
            Some(match variant {
                $(Index::$variant => Op::$variant { $($field: get!($($ptr)?; r)?,)* },)*
            })
        }
    };
}

// Only operations before `COLUMNAR_OPS` (`chunk.rs`) may have `ptr` fields: a reader skips an
// operation it does not know without reading its fields, so only these may move the pointer base.
operations! {
    Alloc { kind, ptr: ptr, size, stream, pool, flags, pitch },
    Free { ptr: ptr, stream },
    FreeHost { ptr: ptr },
    HostRegister { ptr: ptr, size, flags },
    HostUnregister { ptr: ptr },
    Reserve { ptr: ptr, size, alignment, hint },
    ReserveFree { ptr: ptr, size },
    Create { handle, size, device, handle_types },
    Release { handle },
    Retain { handle, ptr: ptr },
    Import { handle, shareable, handle_type },
    Map { ptr: ptr, size, offset, handle },
    Unmap { ptr: ptr, size },
    PoolCreate { pool, device },
    PoolDestroy { pool },
    PoolTrim { pool, keep },
    IpcOpen { ptr: ptr, flags },
    IpcClose { ptr: ptr },
    ArrayCreate { array, bytes, width, height, depth, format, channels },
    ArrayDestroy { array },
    CtxCreate { ctx, device, flags },
    CtxDestroy { ctx },
    PrimaryCtxRelease { device },
    PrimaryCtxReset { device },
    DeviceReset { device },
    CommInit { comm, nranks, rank, parent, color, key },
    CommInitAll { comms, devices },
    CommEnd { comm, how },
    NcclMemAlloc { ptr: ptr, size },
    NcclMemFree { ptr: ptr },
    Register { comm, ptr: ptr, size, handle },
    Deregister { comm, handle },
    WindowRegister { comm, ptr: ptr, size, window, flags },
    WindowDeregister { comm, window },
    MarkStep { step },
    RangePush { name },
    RangePop {},
    Mark { name },
    DeviceMemory { free, total },
    PrimaryCtxRetain { device, ctx },
    MarkIteration { n },
}
