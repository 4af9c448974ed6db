//! The common version 2 event read in one pass: an allocation or a free that succeeded, outside
//! nested calls. Nearly every event of a training loop is one; reading it through the general
//! machinery (a reader behind a trait, a mask reader per operation field, the chunk's state saved
//! in case the reader gives up) cost more than twice the instructions of reading it here.
//!
//! Everything is read into locals and checked first; only an event read whole, that the general
//! reader would read the same, is written to the chunk's [`Delta`] and the event. Anything else
//! (another operation, a failed call, a varint of nine bytes or more, a field past the payload, a
//! value postcard rejects) is left untouched for the readers in `compact`, which decide.
//!
//! Version 3's reader (`read_split`) checks the whole record first; after that only damage can
//! stop it, and damage loses the rest of the chunk, so it reads the columns' values straight
//! into the chunk's state. It also takes nested calls (a runtime call over the driver names its
//! inner API: nearly every event of a real trace), and version 4's shapes keep what it checked
//! (`read_hot_shape`).

use super::fields::{MAX_PAYLOAD, WINDOW};
use super::parts::{Columns, InPlace, Parts, Whole};
use super::replace_op;
use super::straight::Straight;
use super::wire::{mem_kind, Wire};
use crate::event::{Api, Event, MemKind, Op};
use crate::format::compact::{
    unzig, Delta, CALLER, NCCL, NEST, PLACE, RESULT, SEQ, STACKS, THREAD,
};
use crate::format::layout::Column;
use crate::format::shapes::HotShape;

/// Variant indexes of the operations read here: postcard numbers variants by declaration order
/// (checked against the shape table in the tests).
pub(super) const ALLOC: u8 = 0;
pub(super) const FREE: u8 = 1;
pub(super) const FREE_HOST: u8 = 2;

/// A `u64` field of an operation: 0 unless its bit of `mask` is set.
#[inline(always)]
fn field(p: &mut impl Parts, mask: u64, bit: u32) -> Option<u64> {
    if mask & (1 << bit) != 0 {
        p.column_u64(Column::Value)
    } else {
        Some(0)
    }
}

/// A pointer field: against the chunk's previous pointer `base`, which it moves on.
#[inline(always)]
fn ptr(p: &mut impl Parts, mask: u64, bit: u32, base: &mut u64) -> Option<u64> {
    if mask & (1 << bit) == 0 {
        return Some(0);
    }
    // The value first, then the base (see `split_values`).
    let delta = unzig(p.column_u64(Column::Ptr)?);
    *base = base.wrapping_add(delta);
    Some(*base)
}

/// The header fields of an event that change from one event to the next, as read.
struct Header {
    seq: u64,
    time_ns: u64,
    thread: u32,
    caller: u64,
    api: Api,
}

/// The header fields that seldom change: where the call ran and what stacks and NCCL call it
/// belongs to. An event that changes none of them leaves them alone, in the chunk's state and
/// (see `synced`) in the event.
#[derive(Clone, Copy)]
struct Quiet {
    device: i32,
    context: u64,
    stack: u32,
    py_stack: u32,
    py_inferred: bool,
    nccl_scope: u64,
}

impl Quiet {
    #[inline(always)]
    fn of(d: &Delta) -> Self {
        Quiet {
            device: d.device,
            context: d.context,
            stack: d.stack,
            py_stack: d.py_stack,
            py_inferred: d.py_inferred,
            nccl_scope: d.nccl_scope,
        }
    }

    /// Writes them to the chunk's state and the event, whose nesting and result the common
    /// event clears.
    #[inline(always)]
    fn write(self, d: &mut Delta, e: &mut Event) {
        d.device = self.device;
        d.context = self.context;
        d.stack = self.stack;
        d.py_stack = self.py_stack;
        d.py_inferred = self.py_inferred;
        d.nccl_scope = self.nccl_scope;
        e.inner = None;
        e.outer = None;
        e.result = 0;
        e.device = self.device;
        e.context = self.context;
        e.stack = self.stack;
        e.py_stack = self.py_stack;
        e.py_inferred = self.py_inferred;
        e.nccl_scope = self.nccl_scope;
    }
}

/// The flags of the seldom-changing fields.
const QUIET: u32 = PLACE | STACKS | NCCL;

/// Reads the payload `window[..len]` against `d` into `e` if it is an allocation or a free that
/// succeeded, outside nested calls, in the fields this reader takes; `false` (and `d` and `e`
/// untouched) otherwise.
///
/// `synced` says that `e`'s seldom-changing fields ([`Quiet`]) are `d`'s and its nesting and
/// result clear, as this reader leaves them (it sets `synced`); the caller clears it whenever
/// anything else moves `d` or writes `e`. Then an event that changes none of them writes only
/// the rest: a training loop's allocations and frees seldom change them, and copying them into
/// both on every event was a tenth of this reader's instructions.
#[inline(always)]
pub(crate) fn read<const PEXT: bool>(
    window: &[u8; WINDOW],
    len: usize,
    d: &mut Delta,
    e: &mut Event,
    synced: &mut bool,
) -> bool {
    let p = &mut Whole(Straight::<PEXT>::new(window, len));
    try_read(p, d, e, synced).is_some()
}

#[inline(always)]
fn try_read(p: &mut impl Parts, d: &mut Delta, e: &mut Event, synced: &mut bool) -> Option<()> {
    // Fields may run past the payload while read (never past the window): checked at the end.
    let flags = p.record().u32()?;
    // Nested calls and failures take the general way.
    if flags > 0xff || flags & (NEST | RESULT) != 0 {
        return None;
    }
    let time = p.column_u64(Column::Time)?;
    let api = *Api::ALL.get(p.record().u32()? as usize)?;
    let mut h = Header {
        seq: d.seq.wrapping_add(1),
        time_ns: d.time_ns.wrapping_add(unzig(time)),
        thread: d.thread,
        caller: d.caller,
        api,
    };
    // Read only when some of them change (else they are not even loaded).
    let mut quiet = None;
    if flags & SEQ != 0 {
        h.seq = h.seq.wrapping_add(unzig(p.column_u64(Column::Seq)?));
    }
    if flags & THREAD != 0 {
        h.thread = p.column_u32(Column::Thread)?;
    }
    if flags & QUIET != 0 {
        let mut q = Quiet::of(d);
        if flags & PLACE != 0 {
            q.device = p.record().i32()?;
            q.context = p.record().u64()?;
        }
        if flags & CALLER != 0 {
            h.caller = h.caller.wrapping_add(unzig(p.column_u64(Column::Caller)?));
        }
        if flags & STACKS != 0 {
            let r = p.record();
            q.stack = r.u32()?;
            q.py_stack = r.u32()?;
            q.py_inferred = r.bool()?;
        }
        if flags & NCCL != 0 {
            q.nccl_scope = p.record().u64()?;
        }
        quiet = Some(q);
    } else if flags & CALLER != 0 {
        h.caller = h.caller.wrapping_add(unzig(p.column_u64(Column::Caller)?));
    }
    // The operation's index and mask: one byte each here.
    let r = p.record();
    let (index, mask) = (r.byte()?, u64::from(r.byte()?));
    if index > FREE_HOST || mask >= 0x80 {
        return None;
    }
    let mut base = d.ptr;
    operation(p, index, mask, &mut base, &mut e.op)?;
    finish(h, quiet, base, d, e, synced);
    Some(())
}

/// Reads the fields of a common operation (`index` and `mask` checked) into `op`, pointers
/// against `base`; `None` when a field does not read or the record ran past its payload.
#[inline(always)]
fn operation(p: &mut impl Parts, index: u8, mask: u64, base: &mut u64, op: &mut Op) -> Option<()> {
    match index {
        ALLOC => {
            let kind = if mask & 1 != 0 {
                mem_kind(p.column_u32(Column::Value)?)?
            } else {
                MemKind::Device
            };
            let ptr = ptr(p, mask, 1, base)?;
            let size = field(p, mask, 2)?;
            // Stream, pool, flags and pitch are mostly all zero: one test for the four, and
            // each way writes the operation itself (values merged from both ways would wait in
            // memory).
            if mask & 0b111_1000 == 0 {
                write_alloc(p, op, kind, ptr, size, (0, 0, 0, 0))?;
            } else {
                let stream = field(p, mask, 3)?;
                let pool = field(p, mask, 4)?;
                let flags = if mask & (1 << 5) != 0 {
                    p.column_u32(Column::Value)?
                } else {
                    0
                };
                let pitch = field(p, mask, 6)?;
                write_alloc(p, op, kind, ptr, size, (stream, pool, flags, pitch))?;
            }
        }
        FREE => {
            let ptr = ptr(p, mask, 0, base)?;
            let stream = field(p, mask, 1)?;
            if !p.record().within_payload() {
                return None;
            }
            replace_op(op, Op::Free { ptr, stream });
        }
        _ => {
            let ptr = ptr(p, mask, 0, base)?;
            if !p.record().within_payload() {
                return None;
            }
            replace_op(op, Op::FreeHost { ptr });
        }
    }
    Some(())
}

/// Writes an allocation of `kind`, `ptr` and `size` with `rest` (stream, pool, flags, pitch) to
/// `op` once its record is known to have ended inside its payload; `None` otherwise.
#[inline(always)]
fn write_alloc(
    p: &mut impl Parts,
    op: &mut Op,
    kind: MemKind,
    ptr: u64,
    size: u64,
    (stream, pool, flags, pitch): (u64, u64, u32, u64),
) -> Option<()> {
    if !p.record().within_payload() {
        return None;
    }
    // Written whole whatever the lent event held: checking for an allocation to write only its
    // fields was a branch as unpredictable as the mix of allocations and frees.
    replace_op(
        op,
        Op::Alloc {
            kind,
            ptr,
            size,
            stream,
            pool,
            flags,
            pitch,
        },
    );
    Some(())
}

/// An event read whole: the chunk's state moves on (to the pointer `base`), and the event takes
/// the header.
#[inline(always)]
fn finish(
    h: Header,
    quiet: Option<Quiet>,
    base: u64,
    d: &mut Delta,
    e: &mut Event,
    synced: &mut bool,
) {
    match quiet {
        Some(q) => q.write(d, e),
        None if !*synced => Quiet::of(d).write(d, e),
        None => {}
    }
    *synced = true;
    d.seq = h.seq;
    d.time_ns = h.time_ns;
    d.thread = h.thread;
    d.caller = h.caller;
    d.ptr = base;
    e.seq = h.seq;
    e.time_ns = h.time_ns;
    e.thread = h.thread;
    e.api = h.api;
    e.caller = h.caller;
}

/// What the one-pass reader made of a version 3 event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Common {
    /// The event, read whole into the event and the chunk's state.
    Read,
    /// Not a common event (or not one this reader takes): nothing was read.
    Other,
    /// A common event whose record reads, but not its values: damage. The columns and the
    /// chunk's state were moved on, partly (neither is read again: the chunk's remaining events
    /// are lost); the event's header was not.
    Damaged,
}

/// [`read`] for version 3, which reads the record whole and checks it before it reads any value
/// from the columns: once it reads them, only damage can stop it, and the general reader would
/// find the same damage (the same values read in the same order). So the columns are read in
/// place, with nothing to save and restore.
#[inline(always)]
pub(crate) fn read_split<const PEXT: bool>(
    window: &[u8; WINDOW],
    len: usize,
    chunk: &[u8],
    cols: &mut Columns,
    d: &mut Delta,
    e: &mut Event,
    synced: &mut bool,
) -> Common {
    let mut r = Straight::<PEXT>::new(window, len);
    let Some((flags, api, nest, quiet, index, mask)) = split_record(&mut r, d) else {
        return Common::Other;
    };
    let Some(mut p) = InPlace::<_, PEXT>::new(r, chunk, cols) else {
        return Common::Other;
    };
    // From here only damage can stop the reader, and damage loses the chunk's remaining events:
    // the chunk's state is never read again then. So the values go straight to it, rather than
    // through locals that outlive the registers.
    // The event is not lent after damage either (it is skipped): its API can go now.
    e.api = api;
    if split_values(&mut p, flags, index, mask, d, &mut e.op).is_none() {
        return Common::Damaged;
    }
    finish_split(quiet, nest, d, e, synced);
    Common::Read
}

/// The header of a split event whose values were read into `d`: into `e`, with the
/// seldom-changing fields where they changed (or `e` is not `synced` with `d`) and the nesting.
#[inline(always)]
fn finish_split(quiet: Option<Quiet>, nest: Nest, d: &mut Delta, e: &mut Event, synced: &mut bool) {
    match quiet {
        Some(q) => q.write(d, e),
        None if !*synced => Quiet::of(d).write(d, e),
        None => {}
    }
    *synced = true;
    // Written on every event (after `Quiet::write`, which clears them): `synced` does not cover
    // the nesting in versions 3 and 4.
    (e.inner, e.outer) = nest;
    e.seq = d.seq;
    e.time_ns = d.time_ns;
    e.thread = d.thread;
    e.caller = d.caller;
}

/// What the one-pass reader takes from the record `window[..len]` of a version 4 shape, once for
/// all the events that name it: its flags, API, operation index and mask, when it is a common
/// event's record without the seldom-changing fields (those depend on the chunk's state).
pub(crate) fn common_shape(window: &[u8; WINDOW], len: usize) -> Option<HotShape> {
    if len > MAX_PAYLOAD {
        return None;
    }
    let mut r = Straight::<false>::new(window, len);
    let (flags, api, nest, quiet, index, mask) = split_record(&mut r, &Delta::default())?;
    if quiet.is_some() {
        return None;
    }
    Some(HotShape {
        flags: u8::try_from(flags).ok()?,
        api,
        nest,
        index,
        mask: u8::try_from(mask).ok()?,
    })
}

/// A record read and checked before: nothing left to read in it.
struct Checked;

impl Wire for Checked {
    #[inline(always)]
    fn varint(&mut self, _: u32, _: u8) -> Option<u64> {
        None
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        None
    }
}

/// [`read_split`] for an event of version 4 that names a [`HotShape`]: its record was read and
/// checked when the shape was defined, so only its values are read, from the columns.
#[inline(always)]
pub(crate) fn read_hot_shape<const PEXT: bool>(
    shape: HotShape,
    chunk: &[u8],
    cols: &mut Columns,
    d: &mut Delta,
    e: &mut Event,
    synced: &mut bool,
) -> Common {
    let Some(mut p) = InPlace::<_, PEXT>::new(Checked, chunk, cols) else {
        return Common::Other;
    };
    e.api = shape.api;
    let (flags, index, mask) = (u32::from(shape.flags), shape.index, u64::from(shape.mask));
    if split_values(&mut p, flags, index, mask, d, &mut e.op).is_none() {
        return Common::Damaged;
    }
    finish_split(None, shape.nest, d, e, synced);
    Common::Read
}

/// The values of a common version 3 event whose record was read: its header's from the columns
/// into the chunk's state `d`, its operation's into `op`.
#[inline(always)]
fn split_values(
    p: &mut impl Parts,
    flags: u32,
    index: u8,
    mask: u64,
    d: &mut Delta,
    op: &mut Op,
) -> Option<()> {
    // Each value is read before the state it moves is loaded: loaded first, the state waited
    // on the stack while the column was read.
    d.seq = d.seq.wrapping_add(1);
    let time = unzig(p.column_u64(Column::Time)?);
    d.time_ns = d.time_ns.wrapping_add(time);
    if flags & SEQ != 0 {
        let seq = unzig(p.column_u64(Column::Seq)?);
        d.seq = d.seq.wrapping_add(seq);
    }
    if flags & THREAD != 0 {
        d.thread = p.column_u32(Column::Thread)?;
    }
    if flags & CALLER != 0 {
        let caller = unzig(p.column_u64(Column::Caller)?);
        d.caller = d.caller.wrapping_add(caller);
    }
    operation(p, index, mask, &mut d.ptr, op)
}

/// The record of a version 3 event if it is a common one, read whole and checked: its flags, API,
/// seldom-changing fields where they changed, operation index and mask.
#[inline(always)]
fn split_record<const PEXT: bool>(
    r: &mut Straight<'_, PEXT>,
    d: &Delta,
) -> Option<(u32, Api, Nest, Option<Quiet>, u8, u64)> {
    let flags = r.u32()?;
    if flags > 0xff || flags & RESULT != 0 {
        return None;
    }
    let api = *Api::ALL.get(r.u32()? as usize)?;
    // A call of the runtime over the driver names the driver call it made inside: one more
    // byte or two, in nearly every event of a real trace.
    let nest = if flags & NEST != 0 {
        (r.option_api()?, r.option_api()?)
    } else {
        (None, None)
    };
    let mut quiet = None;
    if flags & QUIET != 0 {
        let mut q = Quiet::of(d);
        if flags & PLACE != 0 {
            q.device = r.i32()?;
            q.context = r.u64()?;
        }
        if flags & STACKS != 0 {
            q.stack = r.u32()?;
            q.py_stack = r.u32()?;
            q.py_inferred = r.bool()?;
        }
        if flags & NCCL != 0 {
            q.nccl_scope = r.u64()?;
        }
        quiet = Some(q);
    }
    let (index, mask) = (r.byte()?, u64::from(r.byte()?));
    if index > FREE_HOST || mask >= 0x80 || !r.within_payload() {
        return None;
    }
    Some((flags, api, nest, quiet, index, mask))
}

/// An event's inner and outer API (nested calls).
pub(crate) type Nest = (Option<Api>, Option<Api>);
