//! The fast decoder against postcard, the reference: on every `Event` value, on damaged and
//! foreign bytes, and on variants it does not know.

use proptest::prelude::*;

use super::*;
use crate::event::{CommEnd, MemKind};

fn reference(bytes: &[u8]) -> Option<Event> {
    postcard::take_from_bytes::<Event>(bytes)
        .ok()
        .map(|(e, _)| e)
}

pub(super) fn any_api() -> impl Strategy<Value = Api> {
    (0..Api::ALL.len()).prop_map(|i| Api::ALL[i])
}

fn any_kind() -> impl Strategy<Value = MemKind> {
    prop::sample::select(vec![
        MemKind::Device,
        MemKind::Async,
        MemKind::Managed,
        MemKind::Pitched,
        MemKind::HostPinned,
        MemKind::Array,
    ])
}

/// Every `Op` variant, with any field values.
pub(super) fn any_op() -> impl Strategy<Value = Op> {
    // Zero, small and any: the one-pass reader of common events reads only what is short, and
    // tests each of an allocation's mostly-zero fields apart only when some is not zero.
    let u = || prop_oneof![Just(0u64), 1..300u64, any::<u64>()];
    let w = || prop_oneof![Just(0u32), 1..300u32, any::<u32>()];
    let i = any::<i32>;
    let how = prop::sample::select(vec![CommEnd::Destroy, CommEnd::Abort, CommEnd::Finalize]);
    prop_oneof![
        (any_kind(), u(), u(), u(), u(), w(), u()).prop_map(
            |(kind, ptr, size, stream, pool, flags, pitch)| Op::Alloc {
                kind,
                ptr,
                size,
                stream,
                pool,
                flags,
                pitch
            }
        ),
        (u(), u()).prop_map(|(ptr, stream)| Op::Free { ptr, stream }),
        u().prop_map(|ptr| Op::FreeHost { ptr }),
        (u(), u(), w()).prop_map(|(ptr, size, flags)| Op::HostRegister { ptr, size, flags }),
        u().prop_map(|ptr| Op::HostUnregister { ptr }),
        (u(), u(), u(), u()).prop_map(|(ptr, size, alignment, hint)| Op::Reserve {
            ptr,
            size,
            alignment,
            hint
        }),
        (u(), u()).prop_map(|(ptr, size)| Op::ReserveFree { ptr, size }),
        (u(), u(), i(), w()).prop_map(|(handle, size, device, handle_types)| Op::Create {
            handle,
            size,
            device,
            handle_types
        }),
        u().prop_map(|handle| Op::Release { handle }),
        (u(), u()).prop_map(|(handle, ptr)| Op::Retain { handle, ptr }),
        (u(), u(), w()).prop_map(|(handle, shareable, handle_type)| Op::Import {
            handle,
            shareable,
            handle_type
        }),
        (u(), u(), u(), u()).prop_map(|(ptr, size, offset, handle)| Op::Map {
            ptr,
            size,
            offset,
            handle
        }),
        (u(), u()).prop_map(|(ptr, size)| Op::Unmap { ptr, size }),
        (u(), i()).prop_map(|(pool, device)| Op::PoolCreate { pool, device }),
        u().prop_map(|pool| Op::PoolDestroy { pool }),
        (u(), u()).prop_map(|(pool, keep)| Op::PoolTrim { pool, keep }),
        (u(), w()).prop_map(|(ptr, flags)| Op::IpcOpen { ptr, flags }),
        u().prop_map(|ptr| Op::IpcClose { ptr }),
        (u(), u(), u(), u(), u(), w(), w()).prop_map(
            |(array, bytes, width, height, depth, format, channels)| Op::ArrayCreate {
                array,
                bytes,
                width,
                height,
                depth,
                format,
                channels
            }
        ),
        u().prop_map(|array| Op::ArrayDestroy { array }),
        (u(), i(), w()).prop_map(|(ctx, device, flags)| Op::CtxCreate { ctx, device, flags }),
        u().prop_map(|ctx| Op::CtxDestroy { ctx }),
        (i(), u()).prop_map(|(device, ctx)| Op::PrimaryCtxRetain { device, ctx }),
        i().prop_map(|device| Op::PrimaryCtxRelease { device }),
        i().prop_map(|device| Op::PrimaryCtxReset { device }),
        i().prop_map(|device| Op::DeviceReset { device }),
        (u(), i(), i(), u(), i(), i()).prop_map(|(comm, nranks, rank, parent, color, key)| {
            Op::CommInit {
                comm,
                nranks,
                rank,
                parent,
                color,
                key,
            }
        }),
        (
            prop::collection::vec(u(), 0..6),
            prop::collection::vec(i(), 0..6)
        )
            .prop_map(|(comms, devices)| Op::CommInitAll { comms, devices }),
        (u(), how).prop_map(|(comm, how)| Op::CommEnd { comm, how }),
        (u(), u()).prop_map(|(ptr, size)| Op::NcclMemAlloc { ptr, size }),
        u().prop_map(|ptr| Op::NcclMemFree { ptr }),
        (u(), u(), u(), u()).prop_map(|(comm, ptr, size, handle)| Op::Register {
            comm,
            ptr,
            size,
            handle
        }),
        (u(), u()).prop_map(|(comm, handle)| Op::Deregister { comm, handle }),
        (u(), u(), u(), u(), i()).prop_map(|(comm, ptr, size, window, flags)| {
            Op::WindowRegister {
                comm,
                ptr,
                size,
                window,
                flags,
            }
        }),
        (u(), u()).prop_map(|(comm, window)| Op::WindowDeregister { comm, window }),
        u().prop_map(|step| Op::MarkStep { step }),
        any::<String>().prop_map(|name| Op::RangePush { name }),
        Just(Op::RangePop),
        any::<String>().prop_map(|name| Op::Mark { name }),
        (u(), u()).prop_map(|(free, total)| Op::DeviceMemory { free, total }),
    ]
}

/// Small values more often than not: most varints in a trace are one or two bytes.
pub(super) fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![0..300u64, any::<u64>()]
}

pub(super) fn any_event() -> impl Strategy<Value = Event> {
    (
        (any_u64(), any_u64(), any::<u32>(), any_api()),
        (
            prop::option::of(any_api()),
            prop::option::of(any_api()),
            any::<i32>(),
            any::<i32>(),
        ),
        (any_u64(), any_u64(), any::<u32>(), any::<u32>()),
        (any::<bool>(), any_u64(), any_op()),
    )
        .prop_map(
            |(
                (seq, time_ns, thread, api),
                (inner, outer, result, device),
                (context, caller, stack, py_stack),
                (py_inferred, nccl_scope, op),
            )| Event {
                seq,
                time_ns,
                thread,
                api,
                inner,
                outer,
                result,
                device,
                context,
                caller,
                stack,
                py_stack,
                py_inferred,
                nccl_scope,
                op,
            },
        )
}

/// One change to an encoded event.
#[derive(Clone, Debug)]
pub(super) enum Damage {
    Truncate(usize),
    Set(usize, u8),
    Append(Vec<u8>),
}

pub(super) fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        any::<usize>().prop_map(Damage::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Damage::Set(at, b)),
        prop::collection::vec(any::<u8>(), 1..8).prop_map(Damage::Append),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every event postcard writes, the fast path reads back exactly, into a fresh event or over
    /// a used one.
    #[test]
    fn the_fast_path_reads_every_event_postcard_writes(e in any_event(), before in any_event()) {
        let bytes = postcard::to_stdvec(&e).unwrap();
        let mut got = before;
        prop_assert!(
            fast_into(&bytes, bytes.len(), &mut got).is_some(),
            "fast path gave up on {:?}",
            e
        );
        // Followed by other bytes (the rest of a chunk), which must not be taken for its own:
        // this takes the mask reader where the payload is short enough.
        for tail in [0x80u8, 0x00, 0x01] {
            let mut followed = bytes.clone();
            followed.extend_from_slice(&[tail; WINDOW]);
            let mut again = blank();
            prop_assert!(event_into(&followed, bytes.len(), &mut again));
            prop_assert_eq!(&again, &e);
        }
        // The mask reader reads it exactly, or leaves it to the general reader.
        if bytes.len() <= MAX_PAYLOAD {
            let mut window = [0x80u8; WINDOW];
            window[..bytes.len()].copy_from_slice(&bytes);
            let mut masked = blank();
            if read_into(&mut Fields::<false>::new(&window, bytes.len()), &mut masked).is_some() {
                prop_assert_eq!(&masked, &e);
            } else {
                // Only strings, lists and values of 2^56 and more are left to it.
                prop_assert!(
                    matches!(e.op, Op::RangePush { .. } | Op::Mark { .. } | Op::CommInitAll { .. })
                        || bytes.windows(8).any(|w| w.iter().all(|b| b & 0x80 != 0)),
                    "{:?}",
                    e
                );
            }
        }
        prop_assert_eq!(&got, &e);
        prop_assert_eq!(event(&bytes), Some(e));
    }

    /// Damaged bytes decode to what postcard makes of them: the same event, or nothing.
    #[test]
    fn damaged_events_decode_as_postcard_decodes_them(e in any_event(), d in damage()) {
        let mut bytes = postcard::to_stdvec(&e).unwrap();
        match d {
            Damage::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            Damage::Set(at, b) => {
                let n = bytes.len();
                bytes[at % n] = b;
            }
            Damage::Append(tail) => bytes.extend(tail),
        }
        prop_assert_eq!(event(&bytes), reference(&bytes));
        // The same payload followed by more bytes: those are never part of it.
        for tail in [0x80u8, 0x01] {
            let mut followed = bytes.clone();
            followed.extend_from_slice(&[tail; WINDOW]);
            let mut got = blank();
            let decoded = event_into(&followed, bytes.len(), &mut got).then_some(got);
            prop_assert_eq!(decoded, reference(&bytes));
        }
    }

    /// Bytes that were never an event decode to what postcard makes of them.
    #[test]
    fn arbitrary_bytes_decode_as_postcard_decodes_them(
        bytes in prop::collection::vec(any::<u8>(), 0..64)
    ) {
        prop_assert_eq!(event(&bytes), reference(&bytes));
    }

    /// The wire index of every variant maps to its shape.
    #[test]
    fn every_variant_has_its_shape(op in any_op()) {
        let bytes = postcard::to_stdvec(&op).unwrap();
        let index = Cursor::new(&bytes, bytes.len()).u32().unwrap() as usize;
        prop_assert_eq!(ShapeTable::get().0[index], Some(shape_of(&op)));
    }
}

#[test]
fn every_shape_is_in_the_table() {
    let table = ShapeTable::get();
    for shape in Shape::ALL {
        assert!(table.0.contains(&Some(*shape)), "{shape:?}");
    }
}

/// An event whose operation is a variant this reader does not know (from a newer writer) is not
/// decoded, exactly as postcard does not decode it, so the reader skips the record.
#[test]
fn unknown_variants_are_not_decoded() {
    let e = blank();
    let known = postcard::to_stdvec(&e).unwrap();
    // The op is the last field: `RangePop` is its variant index alone.
    let prefix = &known[..known.len() - 1];
    for unknown in [Shape::ALL.len() as u32, 200, u32::MAX] {
        let mut bytes = prefix.to_vec();
        let mut index = [0u8; 5];
        bytes.extend_from_slice(postcard::to_slice(&unknown, &mut index).unwrap());
        bytes.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            reference(&bytes),
            None,
            "postcard decodes variant {unknown}"
        );
        assert_eq!(event(&bytes), None, "variant {unknown}");
        let mut reused = blank();
        assert!(
            !event_into(&bytes, bytes.len(), &mut reused),
            "variant {unknown}"
        );
    }
    let mut unknown_api = postcard::to_stdvec(&e).unwrap();
    // seq, time, thread, then the api: one byte each for a blank event.
    unknown_api[3] = Api::ALL.len() as u8;
    assert_eq!(event(&unknown_api), None);
}

/// Replacing an operation skips the drop of the old one only for variants with nothing on the
/// heap: exactly the variants with strings or lists must say they own some.
#[test]
fn only_variants_with_strings_or_lists_own_heap_memory() {
    let owning: Vec<Shape> = Shape::ALL
        .iter()
        .copied()
        .filter(|s| s.owns_heap())
        .collect();
    assert_eq!(owning, [Shape::CommInitAll, Shape::RangePush, Shape::Mark]);
}
