//! Version 2 events: random sequences round-trip through the encoder and both readers, every
//! `Op` variant included; damaged and arbitrary bytes never panic and both readers agree on
//! them; events from a newer writer are skipped with the chunk's state kept.

use proptest::prelude::*;

use super::compact::{event_into, event_into_general, event_into_plain};
use super::fields::WINDOW;
use super::tests::{any_event, damage, Damage};
use super::*;
use crate::format::compact::{encode, Delta};

/// Events where most fields repeat the previous event's, as in a real trace, and some do not:
/// each event takes the fields its mask picks from the one before.
fn any_sequence() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((any_event(), any::<u16>()), 1..24).prop_map(|raw| {
        let mut out: Vec<Event> = Vec::with_capacity(raw.len());
        for (mut e, keep) in raw {
            if let Some(p) = out.last() {
                let kept = |bit: u32| keep & (1 << bit) != 0;
                if kept(0) {
                    e.seq = p.seq.wrapping_add(1);
                }
                if kept(1) {
                    e.thread = p.thread;
                }
                if kept(2) {
                    (e.inner, e.outer) = (None, None);
                }
                if kept(3) {
                    e.result = 0;
                }
                if kept(4) {
                    (e.device, e.context) = (p.device, p.context);
                }
                if kept(5) {
                    e.caller = p.caller;
                }
                if kept(6) {
                    (e.stack, e.py_stack, e.py_inferred) = (p.stack, p.py_stack, p.py_inferred);
                }
                if kept(7) {
                    e.nccl_scope = p.nccl_scope;
                }
                if kept(8) {
                    e.time_ns = p.time_ns.wrapping_add(u64::from(keep >> 9));
                }
            }
            out.push(e);
        }
        out
    })
}

/// The payloads of `events` encoded as one chunk.
fn encode_all(events: &[Event]) -> Vec<Vec<u8>> {
    let mut d = Delta::default();
    events
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            encode(e, &mut d, &mut out);
            out
        })
        .collect()
}

/// Decodes payloads in order as a chunk, with the fast entry point (followed by `tail` bytes)
/// and with the general reader alone; both must agree, and neither may panic.
/// The fast entry point packs with `pext` where the CPU has it fast; the plain fast reader is
/// held to the same answers too.
fn decode_all(payloads: &[Vec<u8>], tail: u8) -> Vec<Option<Event>> {
    let (mut fast, mut plain, mut general) = (Delta::default(), Delta::default(), Delta::default());
    let mut out = Vec::new();
    for p in payloads {
        let mut followed = p.clone();
        followed.extend_from_slice(&[tail; WINDOW]);
        let (mut a, mut b, mut c) = (blank(), blank(), blank());
        let got_a = event_into(&followed, p.len(), &mut fast, &mut a).then_some(a);
        let got_b = event_into_general(p, p.len(), &mut general, &mut b).then_some(b);
        let got_c = event_into_plain(&followed, p.len(), &mut plain, &mut c).then_some(c);
        assert_eq!(got_a, got_b, "the readers disagree on {p:?}");
        assert_eq!(got_c, got_b, "the plain fast reader disagrees on {p:?}");
        assert_eq!(fast, general, "the readers move the state apart on {p:?}");
        assert_eq!(
            plain, general,
            "the plain fast reader moves the state apart on {p:?}"
        );
        out.push(got_a);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any sequence of events, any `Op` variant with any values, reads back exactly.
    #[test]
    fn sequences_round_trip(events in any_sequence()) {
        let payloads = encode_all(&events);
        for tail in [0x80u8, 0x00, 0x01] {
            let back = decode_all(&payloads, tail);
            let want: Vec<Option<Event>> = events.iter().cloned().map(Some).collect();
            prop_assert_eq!(&back, &want);
        }
    }

    /// Through the writer and the reader, in chunks of a few events (the state resets at each),
    /// with records of other kinds between: the same records come back, by both ways of reading.
    #[test]
    fn sequences_round_trip_through_chunks(events in any_sequence(), chunk in 64usize..400) {
        use crate::format::{Header, Record, RecordRef, TraceReader, TraceWriter};
        let mut records: Vec<Record> = events.into_iter().map(Record::Event).collect();
        records.insert(records.len() / 2, Record::Warning("between".into()));
        let mut w = TraceWriter::new(Vec::new(), &Header::default())
            .unwrap()
            .with_chunk_bytes(chunk);
        for r in &records {
            w.write(r).unwrap();
        }
        let bytes = w.finish().unwrap();
        let back: Vec<Record> = TraceReader::new(&bytes[..]).unwrap().collect();
        prop_assert_eq!(&back, &records);
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let mut lent = Vec::new();
        while let Some(r) = reader.next_event_or_record() {
            lent.push(match r {
                RecordRef::Event(e) => Record::Event(e.clone()),
                RecordRef::Other(r) => r,
            });
        }
        prop_assert_eq!(&lent, &records);
        prop_assert_eq!(reader.skipped(), 0);
    }

    /// Decoding into a used event gives the same as into a fresh one.
    #[test]
    fn decoding_over_a_used_event_leaves_nothing_behind(e in any_event(), used in any_event()) {
        let payload = &encode_all(std::slice::from_ref(&e))[0];
        let mut got = used;
        prop_assert!(event_into(payload, payload.len(), &mut Delta::default(), &mut got));
        prop_assert_eq!(got, e);
    }

    /// Damaged payloads never panic, and both readers make the same of them.
    #[test]
    fn damaged_sequences_decode_the_same_on_both_readers(
        events in any_sequence(),
        which in any::<usize>(),
        d in damage(),
    ) {
        let mut payloads = encode_all(&events);
        let n = payloads.len();
        let bytes = &mut payloads[which % n];
        match d {
            Damage::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            Damage::Set(at, b) => {
                let len = bytes.len();
                bytes[at % len] = b;
            }
            Damage::Append(tail) => bytes.extend(tail),
        }
        let back = decode_all(&payloads, 0x80);
        // Events before the damaged one are untouched.
        for (got, want) in back.iter().zip(&events).take(which % n) {
            prop_assert_eq!(got.as_ref(), Some(want));
        }
    }

    /// Bytes that were never an event never panic either.
    #[test]
    fn arbitrary_bytes_decode_the_same_on_both_readers(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..6)
    ) {
        decode_all(&payloads, 0x01);
    }
}

/// An event whose operation, or API, is one this reader does not know (a newer writer's) is
/// skipped, and the events after it in the chunk still decode: its header moved the state on.
#[test]
fn unknown_operations_and_apis_are_skipped_with_the_state_kept() {
    let mut first = blank();
    first.seq = 7;
    first.thread = 3;
    first.caller = 0x40_1000;
    first.op = Op::Free {
        ptr: 0x7f00_0000_0000,
        stream: 0,
    };
    let mut second = first.clone();
    second.seq = 8;
    second.time_ns = 99;
    let payloads = encode_all(&[first.clone(), second.clone()]);
    let unknown_op = {
        // flags, time, api, thread, caller, then the op's variant index (the rest is its mask
        // and pointer): an index no variant has, and fields after it.
        let mut p = payloads[0].clone();
        let at = p.len() - 1 - 1 - 7;
        assert_eq!(p[at], op_index(&first.op) as u8);
        p[at] = 120;
        p
    };
    let unknown_api = {
        let mut p = payloads[0].clone();
        assert!(Api::ALL.len() < 0x80);
        p[2] = Api::ALL.len() as u8;
        p
    };
    // An unknown API with a known operation: the operation still moves the pointer base, so
    // the next event is whole.
    let back = decode_all(&[unknown_api, payloads[1].clone()], 0x80);
    assert_eq!(back, vec![None, Some(second.clone())]);
    // An unknown operation: its header moves the state on. (Its pointer does not move the
    // base, as a newer writer's would not; this one was written by a writer that knew it, so
    // the next pointer reads against the base before it.)
    let back = decode_all(&[unknown_op, payloads[1].clone()], 0x80);
    assert_eq!(back[0], None);
    let mut want = second;
    want.op = Op::Free { ptr: 0, stream: 0 };
    assert_eq!(back[1], Some(want));
}

#[test]
fn apis_are_numbered_by_position() {
    for (i, api) in Api::ALL.iter().enumerate() {
        assert_eq!(*api as usize, i);
    }
}

/// A typical allocation is a fraction of its version 1 size.
#[test]
fn a_repeating_allocation_is_small() {
    let mut a = blank();
    a.seq = 1;
    a.time_ns = 1_000_000;
    a.thread = 1234;
    a.context = 0xc0;
    a.caller = 0x7f12_3456_7000;
    a.op = Op::Alloc {
        kind: crate::event::MemKind::Device,
        ptr: 0x7f00_0020_0000,
        size: 1 << 20,
        stream: 0,
        pool: 0,
        flags: 0,
        pitch: 0,
    };
    let mut b = a.clone();
    b.seq = 2;
    b.time_ns += 300;
    if let Op::Alloc { ptr, .. } = &mut b.op {
        *ptr += 1 << 20;
    }
    let payloads = encode_all(&[a, b.clone()]);
    let v1 = postcard::to_stdvec(&b).unwrap().len();
    assert!(payloads[1].len() * 3 < v1, "{} vs {v1}", payloads[1].len());
}

/// Every `Op` variant, with every field zero and with every field set, round-trips (on top of
/// the random variants above).
#[test]
fn every_variant_round_trips() {
    for &shape in Shape::ALL {
        for fill in [0u8, 2] {
            // Bytes of 2 read as 2 for every integer, `Managed`, `Finalize`, two-element lists
            // and two-byte strings; zeros as zero and empty.
            let bytes = [fill; 64];
            let op = shape
                .decode(&mut Cursor::new(&bytes, bytes.len()))
                .expect("a sample of the variant");
            let mut e = blank();
            e.seq = 1;
            e.op = op;
            let payloads = encode_all(&[e.clone(), e.clone()]);
            assert_eq!(
                decode_all(&payloads, 0x80),
                vec![Some(e.clone()), Some(e.clone())],
                "{shape:?}"
            );
        }
    }
}

/// The one-pass reader of common events hard-codes the variant indexes of the operations it
/// reads: they must be the ones postcard gives them.
#[test]
fn the_common_operations_have_the_indexes_the_one_pass_reader_expects() {
    use super::hot::{ALLOC, FREE, FREE_HOST};
    let ops = [
        (
            Op::Alloc {
                kind: crate::event::MemKind::Device,
                ptr: 0,
                size: 0,
                stream: 0,
                pool: 0,
                flags: 0,
                pitch: 0,
            },
            ALLOC,
        ),
        (Op::Free { ptr: 0, stream: 0 }, FREE),
        (Op::FreeHost { ptr: 0 }, FREE_HOST),
    ];
    for (op, index) in ops {
        assert_eq!(op_index(&op), u32::from(index), "{op:?}");
    }
}
