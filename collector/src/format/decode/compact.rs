//! Decoding version 2 and 3 events (the layout is in `format/compact.rs`). A version 2 event is a
//! row of postcard primitives, so the readers of version 1's primitives serve: the common event
//! goes to the one-pass reader (`hot`), another short one to `straight`, anything else to the
//! general reader. Version 3 is the same row with the varying values in the chunk's columns: the
//! same readers read it through [`Split`] where version 2's read through [`Whole`].
//!
//! Each event is read against the [`Delta`] of its chunk (the previous event), which moves on
//! only when the event was read whole (or its header was, for an event this reader does not
//! know): a fast reader that gives up leaves it as it was for the general reader.

use super::cursor::Cursor;
use super::fields::{MAX_PAYLOAD, WINDOW};
use super::hot::{self, Common};
use super::parts::{Columns, Parts, Split, Whole};
use super::straight::Straight;
#[cfg(target_arch = "x86_64")]
use super::wire::packs_with_pext;
use super::wire::Wire;
use super::ShapeTable;
use crate::event::{Api, Event};
use crate::format::compact::{
    unzig, Delta, CALLER, NCCL, NEST, PLACE, RESULT, SEQ, STACKS, THREAD,
};
use crate::format::layout::{Column, COLUMNAR_OPS};

/// What reading an event gave.
enum Got {
    /// The event, in `e`.
    Event,
    /// Its header was read, but its API or operation is one this reader does not know.
    Unknown,
}

/// What decoding a version 3 event gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// The event, in `e`.
    Event,
    /// An event of an API or operation this reader does not know, skipped: the chunk's state
    /// and columns moved on past it.
    Unknown,
    /// Bytes no writer wrote: where this event's values end in the columns is not known, so no
    /// later event of the chunk can be read.
    Damaged,
}

impl From<Got> for Decoded {
    fn from(got: Got) -> Self {
        match got {
            Got::Event => Decoded::Event,
            Got::Unknown => Decoded::Unknown,
        }
    }
}

/// Reads the fields of an operation: those its mask marks present from the event's parts, the
/// others zero; pointers against the chunk's previous pointer.
struct Masked<'a, P> {
    p: &'a mut P,
    /// Whether the integer fields are in the columns (version 3's operations) or the record.
    columnar: bool,
    mask: u64,
    base: &'a mut u64,
}

impl<P> Masked<'_, P> {
    /// Whether the next field is present.
    #[inline(always)]
    fn present(&mut self) -> bool {
        let present = self.mask & 1 != 0;
        self.mask >>= 1;
        present
    }
}

// `within_payload` is asked of the record, after the operation (`read`).
impl<P: Parts> Wire for Masked<'_, P> {
    #[inline(always)]
    fn varint(&mut self, max_bytes: u32, last_max: u8) -> Option<u64> {
        if !self.present() {
            Some(0)
        } else if self.columnar {
            self.p.column(Column::Value, max_bytes, last_max)
        } else {
            self.p.record().varint(max_bytes, last_max)
        }
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        // No operation has a field of one byte (a `bool`): kept in the record should one come.
        if self.present() {
            self.p.record().byte()
        } else {
            Some(0)
        }
    }

    fn string(&mut self) -> Option<String> {
        if self.present() {
            self.p.record().string()
        } else {
            Some(String::new())
        }
    }

    fn u64s(&mut self) -> Option<Vec<u64>> {
        if self.present() {
            self.p.record().u64s()
        } else {
            Some(Vec::new())
        }
    }

    fn i32s(&mut self) -> Option<Vec<i32>> {
        if self.present() {
            self.p.record().i32s()
        } else {
            Some(Vec::new())
        }
    }

    #[inline(always)]
    fn ptr(&mut self) -> Option<u64> {
        if !self.present() {
            return Some(0);
        }
        let v = self
            .base
            .wrapping_add(unzig(self.p.column_u64(Column::Ptr)?));
        *self.base = v;
        Some(v)
    }
}

/// An `Option<Api>` as its raw index.
#[inline(always)]
fn raw_option(r: &mut impl Wire) -> Option<Option<u32>> {
    match r.byte()? {
        0 => Some(None),
        1 => Some(Some(r.u32()?)),
        _ => None,
    }
}

/// The API of a raw index; `None` when this reader does not know it.
#[inline(always)]
fn api(index: u32) -> Option<Api> {
    Api::ALL.get(index as usize).copied()
}

/// Reads one event from `p` against `d` (moved on as it reads) into `e`; `None` when `p` gives
/// up (then `d` and `e` are partly overwritten).
///
/// Every field goes to `e` from the value just read or kept, never loaded back from `d`: `d` is
/// written a field at a time, and copying it on to `e` a few cycles later, which the compiler does
/// with wider loads, waits for those stores to reach the cache (a store-forwarding stall that cost
/// a third of this function's time).
#[inline(always)]
fn read(p: &mut impl Parts, d: &mut Delta, e: &mut Event) -> Option<Got> {
    let flags = p.record().u32()?;
    if flags > 0xff {
        return None;
    }
    let time = p.column_u64(Column::Time)?;
    let api_index = p.record().u32()?;
    let mut seq = d.seq.wrapping_add(1);
    if flags & SEQ != 0 {
        seq = seq.wrapping_add(unzig(p.column_u64(Column::Seq)?));
    }
    d.seq = seq;
    e.seq = seq;
    let time_ns = d.time_ns.wrapping_add(unzig(time));
    d.time_ns = time_ns;
    e.time_ns = time_ns;
    if flags & THREAD != 0 {
        d.thread = p.column_u32(Column::Thread)?;
    }
    e.thread = d.thread;
    let r = p.record();
    let (inner, outer) = if flags & NEST != 0 {
        (raw_option(r)?, raw_option(r)?)
    } else {
        (None, None)
    };
    e.result = if flags & RESULT != 0 { r.i32()? } else { 0 };
    if flags & PLACE != 0 {
        d.device = r.i32()?;
        d.context = r.u64()?;
    }
    e.device = d.device;
    e.context = d.context;
    if flags & CALLER != 0 {
        let caller = d.caller.wrapping_add(unzig(p.column_u64(Column::Caller)?));
        d.caller = caller;
    }
    e.caller = d.caller;
    let r = p.record();
    if flags & STACKS != 0 {
        d.stack = r.u32()?;
        d.py_stack = r.u32()?;
        d.py_inferred = r.bool()?;
    }
    e.stack = d.stack;
    e.py_stack = d.py_stack;
    e.py_inferred = d.py_inferred;
    if flags & NCCL != 0 {
        d.nccl_scope = r.u64()?;
    }
    e.nccl_scope = d.nccl_scope;
    let index = r.u32()?;
    // The header is read: from here on, something unknown skips the event with `d` moved on
    // (by the operation too where it is known, whatever the API).
    let Some(shape) = ShapeTable::get().0.get(index as usize).copied().flatten() else {
        return r.within_payload().then_some(Got::Unknown);
    };
    let mask = r.u64()?;
    let masked = &mut Masked {
        p,
        columnar: index < COLUMNAR_OPS,
        mask,
        base: &mut d.ptr,
    };
    shape.decode_into(masked, &mut e.op)?;
    if !p.record().within_payload() {
        return None;
    }
    let (Some(api), Some(inner), Some(outer)) = (
        api(api_index),
        inner.map_or(Some(None), |i| api(i).map(Some)),
        outer.map_or(Some(None), |i| api(i).map(Some)),
    ) else {
        return Some(Got::Unknown);
    };
    e.api = api;
    e.inner = inner;
    e.outer = outer;
    Some(Got::Event)
}

/// Decodes the version 2 event payload `bytes[..len]` against `d` into `e`; `false` when it is
/// not an event this reader can give (an API or operation it does not know: `d` moves on past
/// it; damage: `d` stays). As with version 1, the bytes after the payload may be loaded, never
/// used.
#[inline(always)]
pub(crate) fn event_into(bytes: &[u8], len: usize, d: &mut Delta, e: &mut Event) -> bool {
    #[cfg(target_arch = "x86_64")]
    if packs_with_pext() {
        // SAFETY: the CPU has BMI2 (checked just now).
        return unsafe { event_into_bmi2(bytes, len, d, e) };
    }
    event_into_with::<false>(bytes, len, d, e)
}

/// [`event_into`] compiled for BMI2, so varints pack with `pext`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn event_into_bmi2(bytes: &[u8], len: usize, d: &mut Delta, e: &mut Event) -> bool {
    event_into_with::<true>(bytes, len, d, e)
}

/// [`event_into`] without `pext`, whatever the CPU (for tests: both must agree with the general
/// reader).
#[cfg(test)]
pub(super) fn event_into_plain(bytes: &[u8], len: usize, d: &mut Delta, e: &mut Event) -> bool {
    event_into_with::<false>(bytes, len, d, e)
}

/// [`event_into`] with varints packed by `pext` or not: `PEXT` only inside functions compiled
/// for BMI2 (a replay loop compiled so calls this, inlined, for every event).
#[inline(always)]
pub(crate) fn event_into_with<const PEXT: bool>(
    bytes: &[u8],
    len: usize,
    d: &mut Delta,
    e: &mut Event,
) -> bool {
    if len <= MAX_PAYLOAD {
        if let Some(window) = bytes.get(..WINDOW) {
            let window: &[u8; WINDOW] = window.try_into().expect("a window");
            // Not known to match `d`: the event takes every field.
            if hot::read::<PEXT>(window, len, d, e, &mut false) {
                return true;
            }
            let saved = *d;
            if let Some(got) = read(&mut Whole(Straight::<PEXT>::new(window, len)), d, e) {
                return matches!(got, Got::Event);
            }
            *d = saved;
        }
    }
    event_into_general(bytes, len, d, e)
}

/// [`event_into`] with the general reader alone: kept out of line, so the fast path stays small
/// (and for tests: the fast one must agree with it).
pub(super) fn event_into_general(bytes: &[u8], len: usize, d: &mut Delta, e: &mut Event) -> bool {
    let mut moved = *d;
    match read(&mut Whole(Cursor::new(bytes, len)), &mut moved, e) {
        Some(got) => {
            *d = moved;
            matches!(got, Got::Event)
        }
        None => false,
    }
}

/// Decodes the version 3 event whose record payload is `bytes[..len]`, its values in the columns
/// of `chunk` that `cols` points into, against `d` into `e`. `d` and `cols` move on past an
/// event read whole and past one this reader does not know; damage leaves them as they were.
#[inline(always)]
pub(crate) fn split_event_into(
    bytes: &[u8],
    len: usize,
    chunk: &[u8],
    cols: &mut Columns,
    d: &mut Delta,
    e: &mut Event,
) -> Decoded {
    #[cfg(target_arch = "x86_64")]
    if packs_with_pext() {
        // SAFETY: the CPU has BMI2 (checked just now).
        return unsafe { split_event_into_bmi2(bytes, len, chunk, cols, d, e) };
    }
    split_event_into_with::<false>(bytes, len, chunk, cols, d, e)
}

/// [`split_event_into`] compiled for BMI2, so varints pack with `pext`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn split_event_into_bmi2(
    bytes: &[u8],
    len: usize,
    chunk: &[u8],
    cols: &mut Columns,
    d: &mut Delta,
    e: &mut Event,
) -> Decoded {
    split_event_into_with::<true>(bytes, len, chunk, cols, d, e)
}

/// [`split_event_into`] with varints packed by `pext` or not (`PEXT` only inside functions
/// compiled for BMI2): the one-pass reader, then the short one, then the general one.
#[inline(always)]
pub(crate) fn split_event_into_with<const PEXT: bool>(
    bytes: &[u8],
    len: usize,
    chunk: &[u8],
    cols: &mut Columns,
    d: &mut Delta,
    e: &mut Event,
) -> Decoded {
    if len <= MAX_PAYLOAD {
        if let Some(window) = bytes.get(..WINDOW) {
            let window: &[u8; WINDOW] = window.try_into().expect("a window");
            match hot::read_split::<PEXT>(window, len, chunk, cols, d, e, &mut false) {
                Common::Read => return Decoded::Event,
                Common::Damaged => return Decoded::Damaged,
                Common::Other => {}
            }
            let saved = *d;
            let record = Straight::<PEXT>::new(window, len);
            if let Some(p) = &mut Split::<_, PEXT>::new(record, chunk, cols) {
                if let Some(got) = read(p, d, e) {
                    let to = p.read_to();
                    cols.advance(to);
                    return got.into();
                }
            }
            *d = saved;
        }
    }
    split_event_into_general(bytes, len, chunk, cols, d, e)
}

/// [`split_event_into`] with the general reader alone (out of line; and for tests).
pub(super) fn split_event_into_general(
    bytes: &[u8],
    len: usize,
    chunk: &[u8],
    cols: &mut Columns,
    d: &mut Delta,
    e: &mut Event,
) -> Decoded {
    let mut moved = *d;
    let Some(p) = &mut Split::<_, false>::new(Cursor::new(bytes, len), chunk, cols) else {
        return Decoded::Damaged;
    };
    match read(p, &mut moved, e) {
        Some(got) => {
            *d = moved;
            let to = p.read_to();
            cols.advance(to);
            got.into()
        }
        None => Decoded::Damaged,
    }
}
