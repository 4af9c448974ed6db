//! Events: each written against the previous event of its chunk, its varying values in the
//! chunk's columns and the rest in its record.
//!
//! ```text
//! record payload := flags | api | [inner outer] | [result] | [device context]
//!                   | [stack py_stack py_inferred] | [nccl_scope] | op index | op mask | op fields
//! columns        := time, [seq], [thread], [caller], and the operation's integer fields
//! ```
//!
//! `flags` says which bracketed parts are present ([`SEQ`] to [`NCCL`]); an absent part is as in
//! the previous event of the chunk (`seq`: the previous plus one; `inner`, `outer`: `None`;
//! `result`: 0). `time`, `seq` and `caller` are zigzagged differences from the previous event's;
//! the others are plain. The operation is its wire index (`ops.rs`), a mask with bit *i* set when
//! field *i* is not zero (0, empty, the first variant of an enum), and the nonzero fields in
//! order. The previous event (and pointer) of a chunk's first event is all zeros, so every chunk
//! decodes on its own.
//!
//! Because every value that depends on the previous event is in a column, a record means the
//! same wherever it occurs: the reader reads it once into a [`Template`], and each event that
//! names it (a shape, `chunk.rs`) takes only its column values.

use super::chunk::{Column, Columns, COLUMNAR_OPS, COLUMNS};
use super::ops::{self, FieldReader, FieldWriter};
use super::varint::{self, unzig, unzig32, zig, zig32};
use crate::event::{Api, Event};

/// `seq` is not the previous plus one: its difference is in the `Seq` column.
pub(crate) const SEQ: u8 = 1;
/// `thread` changed: it is in the `Thread` column.
pub(crate) const THREAD: u8 = 1 << 1;
/// `inner` and `outer` follow (else both `None`).
pub(crate) const NEST: u8 = 1 << 2;
/// `result` follows (else 0).
pub(crate) const RESULT: u8 = 1 << 3;
/// `device` and `context` changed and follow.
pub(crate) const PLACE: u8 = 1 << 4;
/// `caller` changed: its difference is in the `Caller` column.
pub(crate) const CALLER: u8 = 1 << 5;
/// `stack`, `py_stack` or `py_inferred` changed and follow.
pub(crate) const STACKS: u8 = 1 << 6;
/// `nccl_scope` changed and follows.
pub(crate) const NCCL: u8 = 1 << 7;

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

/// Appends the record payload of `e` to `record` and its varying values to `columns`, written
/// against `d`, and moves `d` on to `e`.
pub(crate) fn write(e: &Event, d: &mut Delta, record: &mut Vec<u8>, cols: &mut [Vec<u8>; COLUMNS]) {
    let next = d.seq.wrapping_add(1);
    let set = |on: bool, flag: u8| if on { flag } else { 0 };
    let flags = set(e.seq != next, SEQ)
        | set(e.thread != d.thread, THREAD)
        | set(e.inner.is_some() || e.outer.is_some(), NEST)
        | set(e.result != 0, RESULT)
        | set(e.device != d.device || e.context != d.context, PLACE)
        | set(e.caller != d.caller, CALLER)
        | set(
            (e.stack, e.py_stack, e.py_inferred) != (d.stack, d.py_stack, d.py_inferred),
            STACKS,
        )
        | set(e.nccl_scope != d.nccl_scope, NCCL);
    let col =
        |cols: &mut [Vec<u8>; COLUMNS], c: Column, v: u64| varint::put(&mut cols[c as usize], v);
    varint::put(record, u64::from(flags));
    col(cols, Column::Time, zig(e.time_ns, d.time_ns));
    varint::put(record, e.api as u64);
    if flags & SEQ != 0 {
        col(cols, Column::Seq, zig(e.seq, next));
    }
    if flags & THREAD != 0 {
        col(cols, Column::Thread, u64::from(e.thread));
    }
    if flags & NEST != 0 {
        for api in [e.inner, e.outer] {
            match api {
                None => record.push(0),
                Some(api) => {
                    record.push(1);
                    varint::put(record, api as u64);
                }
            }
        }
    }
    if flags & RESULT != 0 {
        varint::put(record, zig32(e.result));
    }
    if flags & PLACE != 0 {
        varint::put(record, zig32(e.device));
        varint::put(record, e.context);
    }
    if flags & CALLER != 0 {
        col(cols, Column::Caller, zig(e.caller, d.caller));
    }
    if flags & STACKS != 0 {
        varint::put(record, u64::from(e.stack));
        varint::put(record, u64::from(e.py_stack));
        record.push(u8::from(e.py_inferred));
    }
    if flags & NCCL != 0 {
        varint::put(record, e.nccl_scope);
    }
    (d.seq, d.time_ns, d.thread, d.caller) = (e.seq, e.time_ns, e.thread, e.caller);
    (d.device, d.context, d.nccl_scope) = (e.device, e.context, e.nccl_scope);
    (d.stack, d.py_stack, d.py_inferred) = (e.stack, e.py_stack, e.py_inferred);
    let index = ops::index(&e.op);
    varint::put(record, u64::from(index));
    // The mask goes before the fields: one byte kept for it (no variant has more than seven
    // fields), widened afterwards should one ever have more.
    let at = record.len();
    record.push(0);
    let mut fields = Fields {
        record,
        cols,
        columnar: index < COLUMNAR_OPS,
        base: &mut d.ptr,
        mask: 0,
        bit: 0,
    };
    ops::write(&e.op, &mut fields);
    let mask = fields.mask;
    if mask < 0x80 {
        record[at] = mask as u8;
    } else {
        let mut wide = Vec::with_capacity(10);
        varint::put(&mut wide, mask);
        record.splice(at..at + 1, wide);
    }
}

/// Writes the nonzero fields of an operation and gathers its mask.
struct Fields<'a> {
    record: &'a mut Vec<u8>,
    cols: &'a mut [Vec<u8>; COLUMNS],
    /// Whether the integer fields go to the columns or the record.
    columnar: bool,
    base: &'a mut u64,
    mask: u64,
    bit: u32,
}

impl Fields<'_> {
    /// Notes the next field as present when `nonzero`; `true` when it is to be written.
    #[inline(always)]
    fn next(&mut self, nonzero: bool) -> bool {
        self.mask |= u64::from(nonzero) << self.bit;
        self.bit += 1;
        nonzero
    }
}

impl FieldWriter for Fields<'_> {
    fn ptr(&mut self, v: u64) {
        debug_assert!(
            self.columnar,
            "only columnar operations have pointer fields"
        );
        if self.next(v != 0) {
            varint::put(&mut self.cols[Column::Ptr as usize], zig(v, *self.base));
            *self.base = v;
        }
    }

    #[inline(always)]
    fn value(&mut self, v: u64) {
        if self.next(v != 0) {
            let out = match self.columnar {
                true => &mut self.cols[Column::Value as usize],
                false => &mut *self.record,
            };
            varint::put(out, v);
        }
    }

    fn bytes(&mut self, v: &[u8]) {
        if self.next(!v.is_empty()) {
            varint::put(self.record, v.len() as u64);
            self.record.extend_from_slice(v);
        }
    }

    fn list(&mut self, v: impl ExactSizeIterator<Item = u64>) {
        if self.next(v.len() != 0) {
            varint::put(self.record, v.len() as u64);
            v.for_each(|x| varint::put(self.record, x));
        }
    }
}

/// What an event record says, read once: everything but the column values. A shape's record is
/// read into one when the shape is defined; every event that names the shape reuses it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Template {
    flags: u8,
    /// The API (`None`: one this reader does not know), and whether the inner or outer one is one
    /// this reader does not know.
    api: Option<Api>,
    unknown_nest: bool,
    inner: Option<Api>,
    outer: Option<Api>,
    result: i32,
    device: i32,
    context: u64,
    stack: u32,
    py_stack: u32,
    py_inferred: bool,
    nccl_scope: u64,
    /// The operation's wire index, and its field mask.
    op: u32,
    mask: u64,
    /// Where the operation's fields in the record (strings, lists, and the integers of
    /// operations that are not columnar) start and where the record ends, in its chunk.
    fields: usize,
    end: usize,
}

/// Reads the record payload `chunk[at..end]` (after its tag) into a template; `None` when it is
/// damaged.
pub(crate) fn template(chunk: &[u8], mut at: usize, end: usize) -> Option<Template> {
    let mut next = || varint::read(chunk, &mut at, end);
    let flags = u8::try_from(next()?).ok()?;
    let api = Api::ALL.get(usize::try_from(next()?).ok()?).copied();
    let mut t = Template {
        flags,
        api,
        fields: end,
        end,
        ..Template::default()
    };
    let byte = |at: &mut usize| {
        let b = *chunk.get(*at).filter(|_| *at < end)?;
        *at += 1;
        (b <= 1).then_some(b == 1)
    };
    if flags & NEST != 0 {
        for slot in [&mut t.inner, &mut t.outer] {
            if byte(&mut at)? {
                let index = varint::read(chunk, &mut at, end)?;
                match Api::ALL.get(usize::try_from(index).ok()?) {
                    Some(&api) => *slot = Some(api),
                    None => t.unknown_nest = true,
                }
            }
        }
    }
    let next = |at: &mut usize| varint::read(chunk, at, end);
    if flags & RESULT != 0 {
        t.result = unzig32(next(&mut at)?)?;
    }
    if flags & PLACE != 0 {
        t.device = unzig32(next(&mut at)?)?;
        t.context = next(&mut at)?;
    }
    if flags & STACKS != 0 {
        t.stack = u32::try_from(next(&mut at)?).ok()?;
        t.py_stack = u32::try_from(next(&mut at)?).ok()?;
        t.py_inferred = byte(&mut at)?;
    }
    if flags & NCCL != 0 {
        t.nccl_scope = next(&mut at)?;
    }
    t.op = u32::try_from(next(&mut at)?).ok()?;
    // An operation this reader does not know keeps all its fields in its record (only known
    // operations can be columnar): the event is skipped by its length.
    if t.op < ops::KNOWN_OPS {
        t.mask = next(&mut at)?;
        t.fields = at;
    }
    Some(t)
}

/// Makes `e` the state a chunk's first event is read against: every field that the next event
/// may keep from the previous one zero.
pub(crate) fn reset(e: &mut Event) {
    (e.seq, e.time_ns, e.thread, e.caller) = (0, 0, 0, 0);
    (e.device, e.context) = (0, 0);
    (e.stack, e.py_stack, e.py_inferred, e.nccl_scope) = (0, 0, false, 0);
}

/// Reads the event of template `t`, its varying values from `cols`, into `e`, which holds the
/// previous event of the chunk (the reader's state is the event itself; `ptr` is the chunk's
/// previous pointer): `Some(true)` for an event, `Some(false)` for one this reader does not know
/// (an API, operation or enum value of a newer writer: the state moves past it all the same),
/// `None` for damage.
#[inline(always)]
pub(crate) fn read(
    t: &Template,
    chunk: &[u8],
    cols: &mut Columns,
    ptr: &mut u64,
    e: &mut Event,
) -> Option<bool> {
    let f = t.flags;
    e.time_ns = e
        .time_ns
        .wrapping_add(unzig(cols.next(chunk, Column::Time)?));
    let mut seq = e.seq.wrapping_add(1);
    if f & SEQ != 0 {
        seq = seq.wrapping_add(unzig(cols.next(chunk, Column::Seq)?));
    }
    e.seq = seq;
    if f & THREAD != 0 {
        e.thread = u32::try_from(cols.next(chunk, Column::Thread)?).ok()?;
    }
    if f & PLACE != 0 {
        (e.device, e.context) = (t.device, t.context);
    }
    if f & CALLER != 0 {
        e.caller = e
            .caller
            .wrapping_add(unzig(cols.next(chunk, Column::Caller)?));
    }
    if f & STACKS != 0 {
        (e.stack, e.py_stack, e.py_inferred) = (t.stack, t.py_stack, t.py_inferred);
    }
    if f & NCCL != 0 {
        e.nccl_scope = t.nccl_scope;
    }
    (e.inner, e.outer, e.result) = (t.inner, t.outer, t.result);
    let mut fields = Values {
        chunk,
        cols,
        at: t.fields,
        end: t.end,
        columnar: t.op < COLUMNAR_OPS,
        mask: t.mask,
        base: ptr,
        unknown: false,
    };
    let known = ops::read_into(t.op, &mut fields, &mut e.op)?;
    match t.api {
        Some(api) if known && !fields.unknown && !t.unknown_nest => e.api = api,
        _ => return Some(false),
    }
    Some(true)
}

/// Reads an operation's fields: those its mask marks present from the columns (integers of a
/// columnar operation) or the record, the others zero.
struct Values<'a> {
    chunk: &'a [u8],
    cols: &'a mut Columns,
    /// Where the next field in the record is, and where the record ends.
    at: usize,
    end: usize,
    columnar: bool,
    mask: u64,
    base: &'a mut u64,
    /// Set when an enum field holds a value this reader does not know.
    unknown: bool,
}

impl Values<'_> {
    /// Whether the next field is present.
    #[inline(always)]
    fn present(&mut self) -> bool {
        let present = self.mask & 1 != 0;
        self.mask >>= 1;
        present
    }

    /// The length of a string or list in the record, when present: at most the bytes left in
    /// the record (each element takes one at least), so that damage cannot ask for a huge
    /// allocation.
    fn len(&mut self) -> Option<usize> {
        if !self.present() {
            return Some(0);
        }
        let n = usize::try_from(varint::read(self.chunk, &mut self.at, self.end)?).ok()?;
        (n <= self.end - self.at).then_some(n)
    }
}

impl FieldReader for Values<'_> {
    #[inline(always)]
    fn ptr(&mut self) -> Option<u64> {
        if !self.present() {
            return Some(0);
        }
        let d = unzig(self.cols.next(self.chunk, Column::Ptr)?);
        *self.base = self.base.wrapping_add(d);
        Some(*self.base)
    }

    #[inline(always)]
    fn value(&mut self) -> Option<u64> {
        if !self.present() {
            Some(0)
        } else if self.columnar {
            self.cols.next(self.chunk, Column::Value)
        } else {
            varint::read(self.chunk, &mut self.at, self.end)
        }
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.len()?;
        let bytes = self.chunk.get(self.at..self.at + n)?.to_vec();
        self.at += n;
        Some(bytes)
    }

    fn list(&mut self) -> Option<Vec<u64>> {
        let n = self.len()?;
        (0..n)
            .map(|_| varint::read(self.chunk, &mut self.at, self.end))
            .collect()
    }

    fn unknown(&mut self) {
        self.unknown = true;
    }
}
