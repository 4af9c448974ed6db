//! The event encoding of versions 2 and 3: each event written against the previous event of its
//! chunk.
//!
//! ```text
//! event  := flags | time | api | [seq] [thread] [inner outer] [result] [device context] [caller]
//!           [stack py_stack py_inferred] [nccl_scope] | op index | op mask | op fields
//! ```
//!
//! Every part is a postcard value (a LEB128 varint, zigzagged where signed; `bool` and an
//! `Option`'s tag one byte), so the bytes stay postcard's primitives and the readers of
//! `decode/` read them. `flags` (at most `0xff`) says which of the bracketed parts are present:
//! an absent one is "as in the previous event of the chunk" (`seq`: the previous plus one;
//! `inner`, `outer`: `None`; `result`: 0). Where present, `seq`, `time` (always present) and
//! `caller` are zigzagged differences from the previous event's value; the others are plain.
//! The operation is its variant index (as in version 1), a varint mask with bit *i* set when
//! field *i* is not zero (0, an empty string or list, the first variant of an enum), and the
//! nonzero fields in order; a pointer field (`ptr`) is the zigzagged difference from the
//! previous nonzero pointer of the chunk. The previous event, and pointer, of a chunk's first
//! event are all zeros, so every chunk decodes on its own.
//!
//! The reader keeps the same [`Delta`] as the writer, record by record. An event whose API or
//! operation the reader does not know (from a newer writer) still updates it from its header
//! (only variants of version 2 move the pointer base) and is skipped by its length.
//!
//! Version 3 writes the same parts in the same order, but the values that vary from event to
//! event go to the chunk's columns instead of the record ([`Lanes`], `layout.rs`): the time, the
//! sequence number, thread and caller where present, and the integer fields of the operation
//! (pointers in a column of their own) — for the operations of version 3 only
//! ([`COLUMNAR_OPS`]); strings and lists stay in the record.

use super::decode;
use super::layout::{Column, COLUMNAR_OPS, COLUMNS};
use super::varint;
use crate::event::{CommEnd, Event, MemKind};

/// Where the parts of an event are written: the record, and a column for each value that varies
/// from event to event.
pub(crate) trait Lanes {
    fn record(&mut self) -> &mut Vec<u8>;
    fn column(&mut self, c: Column) -> &mut Vec<u8>;
}

/// Version 2: every part in the record.
pub(crate) struct InRecord<'a>(pub &'a mut Vec<u8>);

impl Lanes for InRecord<'_> {
    #[inline(always)]
    fn record(&mut self) -> &mut Vec<u8> {
        self.0
    }

    #[inline(always)]
    fn column(&mut self, _: Column) -> &mut Vec<u8> {
        self.0
    }
}

/// Version 3: the varying values in the chunk's columns.
pub(crate) struct Split<'a> {
    pub record: &'a mut Vec<u8>,
    pub columns: &'a mut [Vec<u8>; COLUMNS],
}

impl Lanes for Split<'_> {
    #[inline(always)]
    fn record(&mut self) -> &mut Vec<u8> {
        self.record
    }

    #[inline(always)]
    fn column(&mut self, c: Column) -> &mut Vec<u8> {
        &mut self.columns[c as usize]
    }
}

/// `seq` is not the previous plus one: the difference follows.
pub(crate) const SEQ: u32 = 1;
/// `thread` differs from the previous event's.
pub(crate) const THREAD: u32 = 1 << 1;
/// `inner` and `outer` follow (else both `None`).
pub(crate) const NEST: u32 = 1 << 2;
/// `result` follows (else 0).
pub(crate) const RESULT: u32 = 1 << 3;
/// `device` and `context` differ from the previous event's.
pub(crate) const PLACE: u32 = 1 << 4;
/// `caller` differs from the previous event's.
pub(crate) const CALLER: u32 = 1 << 5;
/// `stack`, `py_stack` or `py_inferred` differ from the previous event's.
pub(crate) const STACKS: u32 = 1 << 6;
/// `nccl_scope` differs from the previous event's.
pub(crate) const NCCL: u32 = 1 << 7;

/// What the next event of a chunk is written against: the previous event's fields, and the
/// previous nonzero pointer. All zeros at the start of every chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub seq: u64,
    pub time_ns: u64,
    pub thread: u32,
    pub device: i32,
    pub context: u64,
    pub caller: u64,
    pub stack: u32,
    pub py_stack: u32,
    pub py_inferred: bool,
    pub nccl_scope: u64,
    pub ptr: u64,
}

/// A difference as a zigzag varint value: small either way is small.
#[inline(always)]
pub(crate) fn zig(new: u64, old: u64) -> u64 {
    let d = new.wrapping_sub(old) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// The difference a zigzag value stands for, to add (wrapping) to the old value.
#[inline(always)]
pub(crate) fn unzig(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

/// A signed 32-bit value as postcard writes it.
#[inline(always)]
fn zig32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

/// Takes the fields of an operation in order (see `decode::op_fields`); the method names are
/// the field types of `decode`'s `op_shapes!`.
pub(crate) trait Sink {
    fn u64(&mut self, v: &u64);
    fn ptr(&mut self, v: &u64);
    fn u32(&mut self, v: &u32);
    fn i32(&mut self, v: &i32);
    fn kind(&mut self, v: &MemKind);
    fn how(&mut self, v: &CommEnd);
    fn string(&mut self, v: &str);
    fn u64s(&mut self, v: &[u64]);
    fn i32s(&mut self, v: &[i32]);
}

/// Writes the nonzero fields and gathers the mask.
struct Fields<'a, L> {
    lanes: &'a mut L,
    /// Whether the integer fields go to the columns (version 3's operations) or the record.
    columnar: bool,
    base: &'a mut u64,
    mask: u64,
    bit: u32,
}

impl<L: Lanes> Fields<'_, L> {
    /// Where an integer field goes.
    #[inline(always)]
    fn value(&mut self) -> &mut Vec<u8> {
        if self.columnar {
            self.lanes.column(Column::Value)
        } else {
            self.lanes.record()
        }
    }

    /// Notes field `bit` as present when `nonzero`; `true` when it is to be written.
    #[inline(always)]
    fn next(&mut self, nonzero: bool) -> bool {
        if nonzero {
            self.mask |= 1 << self.bit;
        }
        self.bit += 1;
        nonzero
    }
}

impl<L: Lanes> Sink for Fields<'_, L> {
    fn u64(&mut self, v: &u64) {
        if self.next(*v != 0) {
            varint::put(self.value(), *v);
        }
    }

    fn ptr(&mut self, v: &u64) {
        // Only operations of version 2 have pointer fields (see `op_shapes!`): columnar ones.
        debug_assert!(self.columnar);
        if self.next(*v != 0) {
            varint::put(self.lanes.column(Column::Ptr), zig(*v, *self.base));
            *self.base = *v;
        }
    }

    fn u32(&mut self, v: &u32) {
        if self.next(*v != 0) {
            varint::put(self.value(), u64::from(*v));
        }
    }

    fn i32(&mut self, v: &i32) {
        if self.next(*v != 0) {
            varint::put(self.value(), zig32(*v));
        }
    }

    fn kind(&mut self, v: &MemKind) {
        let index = match v {
            MemKind::Device => 0,
            MemKind::Async => 1,
            MemKind::Managed => 2,
            MemKind::Pitched => 3,
            MemKind::HostPinned => 4,
            MemKind::Array => 5,
        };
        self.u64(&index);
    }

    fn how(&mut self, v: &CommEnd) {
        let index = match v {
            CommEnd::Destroy => 0,
            CommEnd::Abort => 1,
            CommEnd::Finalize => 2,
        };
        self.u64(&index);
    }

    fn string(&mut self, v: &str) {
        if self.next(!v.is_empty()) {
            let out = self.lanes.record();
            varint::put(out, v.len() as u64);
            out.extend_from_slice(v.as_bytes());
        }
    }

    fn u64s(&mut self, v: &[u64]) {
        if self.next(!v.is_empty()) {
            let out = self.lanes.record();
            varint::put(out, v.len() as u64);
            for &x in v {
                varint::put(out, x);
            }
        }
    }

    fn i32s(&mut self, v: &[i32]) {
        if self.next(!v.is_empty()) {
            let out = self.lanes.record();
            varint::put(out, v.len() as u64);
            for &x in v {
                varint::put(out, zig32(x));
            }
        }
    }
}

/// Appends the encoding of `e` to `lanes` (version 2: [`InRecord`]; version 3: [`Split`]),
/// written against `d`, and moves `d` on to `e`.
pub(crate) fn encode(e: &Event, d: &mut Delta, lanes: &mut impl Lanes) {
    let next = d.seq.wrapping_add(1);
    let mut flags = 0;
    let set = |on: bool, flag: u32| if on { flag } else { 0 };
    flags |= set(e.seq != next, SEQ);
    flags |= set(e.thread != d.thread, THREAD);
    flags |= set(e.inner.is_some() || e.outer.is_some(), NEST);
    flags |= set(e.result != 0, RESULT);
    flags |= set(e.device != d.device || e.context != d.context, PLACE);
    flags |= set(e.caller != d.caller, CALLER);
    flags |= set(
        (e.stack, e.py_stack, e.py_inferred) != (d.stack, d.py_stack, d.py_inferred),
        STACKS,
    );
    flags |= set(e.nccl_scope != d.nccl_scope, NCCL);
    varint::put(lanes.record(), u64::from(flags));
    varint::put(lanes.column(Column::Time), zig(e.time_ns, d.time_ns));
    varint::put(lanes.record(), e.api as u64);
    if flags & SEQ != 0 {
        varint::put(lanes.column(Column::Seq), zig(e.seq, next));
    }
    if flags & THREAD != 0 {
        varint::put(lanes.column(Column::Thread), u64::from(e.thread));
    }
    let out = lanes.record();
    if flags & NEST != 0 {
        for api in [e.inner, e.outer] {
            match api {
                None => out.push(0),
                Some(api) => {
                    out.push(1);
                    varint::put(out, api as u64);
                }
            }
        }
    }
    if flags & RESULT != 0 {
        varint::put(out, zig32(e.result));
    }
    if flags & PLACE != 0 {
        varint::put(out, zig32(e.device));
        varint::put(out, e.context);
    }
    if flags & CALLER != 0 {
        varint::put(lanes.column(Column::Caller), zig(e.caller, d.caller));
    }
    let out = lanes.record();
    if flags & STACKS != 0 {
        varint::put(out, u64::from(e.stack));
        varint::put(out, u64::from(e.py_stack));
        out.push(u8::from(e.py_inferred));
    }
    if flags & NCCL != 0 {
        varint::put(out, e.nccl_scope);
    }
    *d = Delta {
        seq: e.seq,
        time_ns: e.time_ns,
        thread: e.thread,
        device: e.device,
        context: e.context,
        caller: e.caller,
        stack: e.stack,
        py_stack: e.py_stack,
        py_inferred: e.py_inferred,
        nccl_scope: e.nccl_scope,
        ptr: d.ptr,
    };
    let index = decode::op_index(&e.op);
    varint::put(out, u64::from(index));
    // The mask goes before the fields: one byte kept for it (every variant has at most seven
    // fields), widened afterwards should a variant ever have more.
    let at = out.len();
    out.push(0);
    let mut fields = Fields {
        lanes,
        columnar: index < COLUMNAR_OPS,
        base: &mut d.ptr,
        mask: 0,
        bit: 0,
    };
    decode::op_fields(&e.op, &mut fields);
    let mask = fields.mask;
    let out = lanes.record();
    if mask < 0x80 {
        out[at] = mask as u8;
    } else {
        let mut wide = Vec::with_capacity(10);
        varint::put(&mut wide, mask);
        out.splice(at..at + 1, wide);
    }
}
