//! Decoding `Event` records without serde: nearly every record of a trace is an event, and
//! postcard's serde visitors cost more per event than everything else a replay does with it.
//!
//! The bytes are postcard's (<https://postcard.jamesmunns.com/wire-format>): fields in declaration
//! order, unsigned integers as LEB128 varints, signed ones zigzagged first, `bool` and the tag of
//! an `Option` as one byte (0 or 1), an enum as the varint index of its variant followed by the
//! variant's fields, strings and sequences as a varint length and then their contents.
//!
//! Two readers share the field-by-field code ([`read_into`]): `fields`, for the common short
//! payload of integers, finds where every varint ends in one pass and then reads the fields
//! without waiting on one another; `cursor` reads anything, a field at a time.
//!
//! Postcard stays the reference. A fast reader gives up on anything it was not written for (a
//! variant index it does not know, a tag that is not 0 or 1, an over-long varint, a payload that
//! ends early), and [`event_into`] then decodes with postcard: whatever the bytes, the answer is
//! postcard's. The variant index of each `Op` variant is learned from postcard itself (by encoding
//! a sample of the variant), so the decoder follows the enum's order whatever it becomes; a
//! variant added later that this table lacks decodes through postcard, slower but the same.
//!
//! That is format version 1. Version 2 writes each event against the previous one of its chunk
//! (`format/compact.rs`), still in postcard's primitives: `compact` reads it with the general
//! reader and `straight` (a short payload read straight through), `hot` reads the common event
//! (an allocation or a free that succeeded) in one pass, and [`op_index`] / [`op_fields`] give
//! the writer the variant table and the fields in the order the readers read them.

use std::sync::OnceLock;

use crate::event::{Api, Event, Op};

use self::cursor::Cursor;
use self::fields::Fields;
use self::wire::Wire;
use super::compact::Sink;

pub(crate) mod compact;
mod cursor;
mod fields;
mod hot;
mod parts;
mod straight;
mod wire;

pub(crate) use self::fields::{MAX_PAYLOAD, WINDOW};
pub(crate) use self::hot::read as read_common_event;
pub(crate) use self::hot::{
    common_shape, read_hot_shape, read_split as read_common_split_event, Common,
};
pub(crate) use self::parts::{Columns, PADDING};
#[cfg(target_arch = "x86_64")]
pub(crate) use self::wire::packs_with_pext;

/// Whether a field read with this [`Wire`] method lives on the heap.
macro_rules! on_heap {
    (string) => {
        true
    };
    (u64s) => {
        true
    };
    (i32s) => {
        true
    };
    ($other:ident) => {
        false
    };
}

/// Declares the `Op` variants the fast readers decode, in `Op`'s order, each field with the
/// [`Wire`] method that reads it. The field types must match `Op`'s (or this does not compile).
macro_rules! op_shapes {
    ($($variant:ident { $($field:ident: $read:ident),* $(,)? }),* $(,)?) => {
        /// An `Op` variant, independent of its wire index.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Shape {
            $($variant,)*
        }

        impl Shape {
            const ALL: &'static [Shape] = &[$(Shape::$variant,)*];

            /// Whether the variant has a field on the heap (a string or a list).
            #[inline(always)]
            fn owns_heap(self) -> bool {
                match self {
                    $(Shape::$variant => false $(|| on_heap!($read))*,)*
                }
            }

            /// Reads the variant's fields.
            #[inline(always)]
            fn decode(self, c: &mut impl Wire) -> Option<Op> {
                Some(match self {
                    $(Shape::$variant => Op::$variant { $($field: c.$read()?,)* },)*
                })
            }

            /// Reads the variant's fields into `op`: in place when `op` is that variant already
            /// (as the previous event's mostly is), so the operation is not built aside and then
            /// copied over — a copy that waits on the stores that built it. `None` when `c` gives
            /// up (then `op` may be partly overwritten).
            #[inline(always)]
            fn decode_into(self, c: &mut impl Wire, op: &mut Op) -> Option<()> {
                match (self, op) {
                    $((Shape::$variant, Op::$variant { $($field),* }) => {
                        $(*$field = c.$read()?;)*
                    })*
                    (shape, op) => replace_op(op, shape.decode(c)?),
                }
                Some(())
            }
        }

        /// Hands the fields of `op` to `s` in order, as the readers read them.
        fn visit(op: &Op, s: &mut impl Sink) {
            match op {
                $(Op::$variant { $($field),* } => {
                    $(s.$read($field);)*
                })*
            }
        }

        /// The shape of an `Op`: one arm per variant, so a new variant fails to compile until it
        /// has a shape here.
        fn shape_of(op: &Op) -> Shape {
            match op {
                $(Op::$variant { .. } => Shape::$variant,)*
            }
        }
    };
}

// `ptr` marks the pointer fields version 2 writes against the chunk's previous pointer. A reader
// skips an operation it does not know without reading its fields, so a variant appended after
// version 2 must list its pointers as `u64`: only these variants may move the pointer base.
op_shapes! {
    Alloc { kind: kind, ptr: ptr, size: u64, stream: u64, pool: u64, flags: u32, pitch: u64 },
    Free { ptr: ptr, stream: u64 },
    FreeHost { ptr: ptr },
    HostRegister { ptr: ptr, size: u64, flags: u32 },
    HostUnregister { ptr: ptr },
    Reserve { ptr: ptr, size: u64, alignment: u64, hint: u64 },
    ReserveFree { ptr: ptr, size: u64 },
    Create { handle: u64, size: u64, device: i32, handle_types: u32 },
    Release { handle: u64 },
    Retain { handle: u64, ptr: ptr },
    Import { handle: u64, shareable: u64, handle_type: u32 },
    Map { ptr: ptr, size: u64, offset: u64, handle: u64 },
    Unmap { ptr: ptr, size: u64 },
    PoolCreate { pool: u64, device: i32 },
    PoolDestroy { pool: u64 },
    PoolTrim { pool: u64, keep: u64 },
    IpcOpen { ptr: ptr, flags: u32 },
    IpcClose { ptr: ptr },
    ArrayCreate {
        array: u64, bytes: u64, width: u64, height: u64, depth: u64, format: u32, channels: u32,
    },
    ArrayDestroy { array: u64 },
    CtxCreate { ctx: u64, device: i32, flags: u32 },
    CtxDestroy { ctx: u64 },
    PrimaryCtxRelease { device: i32 },
    PrimaryCtxReset { device: i32 },
    DeviceReset { device: i32 },
    CommInit { comm: u64, nranks: i32, rank: i32, parent: u64, color: i32, key: i32 },
    CommInitAll { comms: u64s, devices: i32s },
    CommEnd { comm: u64, how: how },
    NcclMemAlloc { ptr: ptr, size: u64 },
    NcclMemFree { ptr: ptr },
    Register { comm: u64, ptr: ptr, size: u64, handle: u64 },
    Deregister { comm: u64, handle: u64 },
    WindowRegister { comm: u64, ptr: ptr, size: u64, window: u64, flags: i32 },
    WindowDeregister { comm: u64, window: u64 },
    MarkStep { step: u64 },
    RangePush { name: string },
    RangePop {},
    Mark { name: string },
    DeviceMemory { free: u64, total: u64 },
    PrimaryCtxRetain { device: i32, ctx: u64 },
}

/// Puts `new` in place of `op`, of whatever variant. Most variants own nothing on the heap: their
/// drop glue, a call that only looks at the variant to find that out, is skipped for them. The
/// variant is read from `op` in place: moving the old operation out first to look at it copied
/// all of it, with a wide load that waited on the narrow stores of the event before (5% of the
/// replay's time when allocations and frees alternate).
#[inline(always)]
fn replace_op(op: &mut Op, new: Op) {
    if shape_of(op).owns_heap() {
        *op = new;
    } else {
        // Nothing of the old operation is read: the copy `replace` makes is dead.
        std::mem::forget(std::mem::replace(op, new));
    }
}

/// Variant indexes beyond this go to postcard.
const MAX_INDEX: usize = 128;

/// The shape of each `Op` variant index, as postcard numbers them, and the index of each shape.
struct ShapeTable([Option<Shape>; MAX_INDEX], [u32; Shape::ALL.len()]);

impl ShapeTable {
    fn build() -> Self {
        let mut table = [None; MAX_INDEX];
        let mut indexes = [u32::MAX; Shape::ALL.len()];
        let zeros = [0u8; 64];
        for &shape in Shape::ALL {
            // All-zero bytes are a valid value of every field type (0, the first variant, empty).
            let sample = shape
                .decode(&mut Cursor::new(&zeros, zeros.len()))
                .expect("zero bytes decode as every field type");
            let mut out = [0u8; 64];
            let bytes = postcard::to_slice(&sample, &mut out).expect("a sample op fits 64 bytes");
            let index = Cursor::new(bytes, bytes.len())
                .u32()
                .expect("an encoded op starts with its variant index")
                as usize;
            if let Some(slot) = table.get_mut(index) {
                *slot = Some(shape);
            }
            indexes[shape as usize] = index as u32;
        }
        ShapeTable(table, indexes)
    }

    #[inline]
    fn get() -> &'static ShapeTable {
        static TABLE: OnceLock<ShapeTable> = OnceLock::new();
        TABLE.get_or_init(ShapeTable::build)
    }
}

/// The variant index of `op`, as postcard numbers the variants.
#[inline]
pub(crate) fn op_index(op: &Op) -> u32 {
    ShapeTable::get().1[shape_of(op) as usize]
}

/// Hands the fields of `op` to `s` in order, as the readers read them.
#[inline]
pub(crate) fn op_fields(op: &Op, s: &mut impl Sink) {
    visit(op, s);
}

/// Reads an event's fields from `r` into `e`; `None` when `r` gives up (then `e` is partly
/// overwritten).
#[inline(always)]
fn read_into(r: &mut impl Wire, e: &mut Event) -> Option<()> {
    e.seq = r.u64()?;
    e.time_ns = r.u64()?;
    e.thread = r.u32()?;
    e.api = r.api()?;
    e.inner = r.option_api()?;
    e.outer = r.option_api()?;
    e.result = r.i32()?;
    e.device = r.i32()?;
    e.context = r.u64()?;
    e.caller = r.u64()?;
    e.stack = r.u32()?;
    e.py_stack = r.u32()?;
    e.py_inferred = r.bool()?;
    e.nccl_scope = r.u64()?;
    let shape = ShapeTable::get().0.get(r.u32()? as usize).copied()??;
    shape.decode_into(r, &mut e.op)?;
    // Trailing bytes are allowed, as with postcard: a newer writer may append fields.
    Some(())
}

/// Decodes the event payload `bytes[..len]` into `e` without serde: with [`Fields`] where the
/// payload is short and the bytes after it allow, else with [`Cursor`]; `None` when neither
/// handles the bytes (then `e` is partly overwritten and the caller must use postcard).
#[inline]
fn fast_into(bytes: &[u8], len: usize, e: &mut Event) -> Option<()> {
    if len <= MAX_PAYLOAD {
        if let Some(window) = bytes.get(..WINDOW) {
            let window: &[u8; WINDOW] = window.try_into().expect("a window");
            if read_into(&mut Fields::<false>::new(window, len), e).is_some() {
                return Some(());
            }
        }
    }
    read_into(&mut Cursor::new(bytes, len), e)
}

/// Decodes the event payload `bytes[..len]` into `e`, reusing it; `false` (and `e` unspecified)
/// when postcard rejects the bytes too. The bytes after the payload are read, never used: passing
/// the rest of the chunk lets the fast readers load eight bytes at once, even at the payload's
/// end.
#[inline]
pub(crate) fn event_into(bytes: &[u8], len: usize, e: &mut Event) -> bool {
    if fast_into(bytes, len, e).is_some() {
        return true;
    }
    match postcard::take_from_bytes::<Event>(&bytes[..len.min(bytes.len())]) {
        Ok((event, _)) => {
            *e = event;
            true
        }
        Err(_) => false,
    }
}

/// Decodes an event payload; `None` when postcard rejects it (an unknown variant, damage).
pub(crate) fn event(payload: &[u8]) -> Option<Event> {
    let mut e = blank();
    event_into(payload, payload.len(), &mut e).then_some(e)
}

/// An event to decode into.
pub(crate) fn blank() -> Event {
    Event {
        seq: 0,
        time_ns: 0,
        thread: 0,
        api: Api::CudaMalloc,
        inner: None,
        outer: None,
        result: 0,
        device: 0,
        context: 0,
        caller: 0,
        stack: 0,
        py_stack: 0,
        py_inferred: false,
        nccl_scope: 0,
        op: Op::RangePop,
    }
}

#[cfg(test)]
mod compact_tests;
#[cfg(test)]
mod tests;
