//! Version 2 and 3 events: random sequences round-trip through the encoder and both readers,
//! every `Op` variant included; damaged and arbitrary bytes never panic and both readers agree on
//! them; events from a newer writer are skipped with the chunk's state (and columns) kept.

use proptest::prelude::*;

use super::compact::{
    event_into, event_into_general, event_into_plain, split_event_into, split_event_into_general,
    split_event_into_with, Decoded,
};
use super::fields::WINDOW;
use super::parts::{Columns, PADDING};
use super::tests::{any_event, damage, Damage};
use super::*;
use crate::format::compact::{encode, Delta, InRecord, Split};
use crate::format::layout::{Column, COLUMNAR_OPS, COLUMNS};

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

/// A chunk's events as a format version writes them: each event's record payload, and in version
/// 3 the chunk's columns.
#[derive(Clone, Debug)]
struct Encoded {
    version: u32,
    payloads: Vec<Vec<u8>>,
    columns: [Vec<u8>; COLUMNS],
}

/// `events` encoded as one chunk of `version` (2 or 3).
fn encode_all(version: u32, events: &[Event]) -> Encoded {
    let mut d = Delta::default();
    let mut columns: [Vec<u8>; COLUMNS] = Default::default();
    let payloads = events
        .iter()
        .map(|e| {
            let mut out = Vec::new();
            if version == 2 {
                encode(e, &mut d, &mut InRecord(&mut out));
            } else {
                let lanes = &mut Split {
                    record: &mut out,
                    columns: &mut columns,
                };
                encode(e, &mut d, lanes);
            }
            out
        })
        .collect();
    Encoded {
        version,
        payloads,
        columns,
    }
}

/// The columns of `enc` in a chunk as the trace reader keeps it (padded with `tail` bytes), and
/// where they lie.
fn padded_columns(enc: &Encoded, tail: u8) -> (Vec<u8>, Columns) {
    let mut chunk = Vec::new();
    let ranges = enc.columns.clone().map(|column| {
        let start = chunk.len();
        chunk.extend_from_slice(&column);
        start..chunk.len()
    });
    chunk.extend_from_slice(&[tail; PADDING]);
    (chunk, Columns::new(&ranges))
}

/// Decodes the payloads in order as a chunk, with the fast entry point (followed by `tail`
/// bytes) and with the general reader alone; both must agree, and neither may panic.
/// The fast entry point packs with `pext` where the CPU has it fast; the plain fast reader is
/// held to the same answers too. In version 3 the columns are followed by the chunk's padding
/// (`tail` bytes), which no value may take, and the readers must move the columns alike.
fn decode_all(enc: &Encoded, tail: u8) -> Vec<Option<Event>> {
    let (mut fast, mut plain, mut general) = (Delta::default(), Delta::default(), Delta::default());
    let (chunk, cols) = padded_columns(enc, tail);
    let (mut fast_cols, mut plain_cols, mut general_cols) = (cols, cols, cols);
    let mut out = Vec::new();
    for p in &enc.payloads {
        let mut followed = p.clone();
        followed.extend_from_slice(&[tail; WINDOW]);
        let (mut a, mut b, mut c) = (blank(), blank(), blank());
        let (got_a, got_b, got_c) = if enc.version == 2 {
            (
                event_into(&followed, p.len(), &mut fast, &mut a),
                event_into_general(p, p.len(), &mut general, &mut b),
                event_into_plain(&followed, p.len(), &mut plain, &mut c),
            )
        } else {
            let (x, y, z) = (
                split_event_into(
                    &followed,
                    p.len(),
                    &chunk,
                    &mut fast_cols,
                    &mut fast,
                    &mut a,
                ),
                split_event_into_general(
                    p,
                    p.len(),
                    &chunk,
                    &mut general_cols,
                    &mut general,
                    &mut b,
                ),
                split_event_into_with::<false>(
                    &followed,
                    p.len(),
                    &chunk,
                    &mut plain_cols,
                    &mut plain,
                    &mut c,
                ),
            );
            assert_eq!(x, y, "the readers disagree on {p:?}");
            assert_eq!(z, y, "the plain fast reader disagrees on {p:?}");
            // After damage the columns and the chunk's state are lost, wherever a reader left
            // them (the one-pass reader moves the state as it reads).
            if y == Decoded::Damaged {
                (fast_cols, plain_cols) = (general_cols, general_cols);
                (fast, plain) = (general, general);
            }
            assert_eq!(
                fast_cols, general_cols,
                "the readers move the columns apart"
            );
            assert_eq!(
                plain_cols, general_cols,
                "the plain reader moves the columns apart"
            );
            let event = |d: Decoded| d == Decoded::Event;
            (event(x), event(y), event(z))
        };
        let (got_a, got_b, got_c) = (got_a.then_some(a), got_b.then_some(b), got_c.then_some(c));
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

/// Whether decoding `enc` (version 3) reads every value of every column: a writer and a reader
/// that agree on where each value goes leave none.
fn reads_every_column_value(enc: &Encoded) -> bool {
    let (chunk, mut cols) = padded_columns(enc, 0x80);
    let (mut d, mut e) = (Delta::default(), blank());
    for p in &enc.payloads {
        split_event_into_general(p, p.len(), &chunk, &mut cols, &mut d, &mut e);
    }
    cols.read_whole()
}

/// The versions that write events against the previous one: 2, and 3 with its columns.
const VERSIONS: [u32; 2] = [2, 3];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any sequence of events, any `Op` variant with any values, reads back exactly.
    #[test]
    fn sequences_round_trip(events in any_sequence()) {
        for version in VERSIONS {
            let enc = encode_all(version, &events);
            for tail in [0x80u8, 0x00, 0x01] {
                let back = decode_all(&enc, tail);
                let want: Vec<Option<Event>> = events.iter().cloned().map(Some).collect();
                prop_assert_eq!(&back, &want, "version {}", version);
            }
            prop_assert!(version == 2 || reads_every_column_value(&enc));
        }
    }

    /// Through the writer and the reader, in chunks of a few events (the state resets at each),
    /// with records of other kinds between: the same records come back, by both ways of reading.
    #[test]
    fn sequences_round_trip_through_chunks(
        events in any_sequence(),
        chunk in 64usize..400,
        version in 2u32..=4,
    ) {
        use crate::format::{Header, Record, RecordRef, TraceReader, TraceWriter};
        let mut records: Vec<Record> = events.into_iter().map(Record::Event).collect();
        records.insert(records.len() / 2, Record::Warning("between".into()));
        let mut w = TraceWriter::with_format_version(Vec::new(), &Header::default(), version)
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
        let payload = &encode_all(2, std::slice::from_ref(&e)).payloads[0];
        let mut got = used.clone();
        prop_assert!(event_into(payload, payload.len(), &mut Delta::default(), &mut got));
        prop_assert_eq!(got, e.clone());
        let enc = encode_all(3, std::slice::from_ref(&e));
        let payload = &enc.payloads[0];
        let (chunk, mut cols) = padded_columns(&enc, 0);
        let mut got = used;
        let decoded =
            split_event_into(payload, payload.len(), &chunk, &mut cols, &mut Delta::default(), &mut got);
        prop_assert_eq!(decoded, Decoded::Event);
        prop_assert_eq!(got, e);
    }

    /// Damaged payloads never panic, and both readers make the same of them.
    #[test]
    fn damaged_sequences_decode_the_same_on_both_readers(
        events in any_sequence(),
        version in 2u32..=3,
        in_column in any::<bool>(),
        which in any::<usize>(),
        d in damage(),
    ) {
        let mut enc = encode_all(version, &events);
        let n = enc.payloads.len();
        // In version 3, the damage may hit a column instead: then no event may panic or make
        // the readers disagree, whichever event reads the damaged value.
        let in_column = version == 3 && in_column && !enc.columns[which % COLUMNS].is_empty();
        let bytes = if in_column {
            &mut enc.columns[which % COLUMNS]
        } else {
            &mut enc.payloads[which % n]
        };
        match d {
            Damage::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            Damage::Set(at, b) => {
                let len = bytes.len();
                bytes[at % len] = b;
            }
            Damage::Append(tail) => bytes.extend(tail),
        }
        let back = decode_all(&enc, 0x80);
        // Events before the damaged one are untouched.
        if !in_column {
            for (got, want) in back.iter().zip(&events).take(which % n) {
                prop_assert_eq!(got.as_ref(), Some(want));
            }
        }
    }

    /// Bytes that were never an event never panic either.
    #[test]
    fn arbitrary_bytes_decode_the_same_on_both_readers(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..6),
        columns in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..24), COLUMNS),
    ) {
        let columns: [Vec<u8>; COLUMNS] = columns.try_into().expect("a vector per column");
        for version in VERSIONS {
            let columns = columns.clone();
            decode_all(&Encoded { version, payloads: payloads.clone(), columns }, 0x01);
        }
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
    let enc = encode_all(2, &[first.clone(), second.clone()]);
    let payloads = &enc.payloads;
    let v2 = |payloads: Vec<Vec<u8>>| Encoded {
        payloads,
        ..enc.clone()
    };
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
    let back = decode_all(&v2(vec![unknown_api, payloads[1].clone()]), 0x80);
    assert_eq!(back, vec![None, Some(second.clone())]);
    // An unknown operation: its header moves the state on. (Its pointer does not move the
    // base, as a newer writer's would not; this one was written by a writer that knew it, so
    // the next pointer reads against the base before it.)
    let back = decode_all(&v2(vec![unknown_op, payloads[1].clone()]), 0x80);
    assert_eq!(back[0], None);
    let mut want = second;
    want.op = Op::Free { ptr: 0, stream: 0 };
    assert_eq!(back[1], Some(want));
}

/// Version 3: an event of an operation this reader does not know has its fields in its record
/// (a newer writer appends operations past [`COLUMNAR_OPS`]), so skipping it by its length leaves
/// the columns where the next event's values start; one of an API it does not know reads its
/// operation, columns included.
#[test]
fn unknown_operations_and_apis_are_skipped_with_the_columns_kept() {
    let mut first = blank();
    (first.seq, first.thread, first.caller) = (7, 3, 0x40_1000);
    first.op = Op::Free {
        ptr: 0x7f00_0000_0000,
        stream: 0,
    };
    let second = Event {
        seq: 8,
        time_ns: 99,
        op: Op::Free {
            ptr: 0x7f00_0000_1000,
            stream: 5,
        },
        ..first.clone()
    };
    // The record of a version 3 event without nesting, result or changes of place, stacks or
    // NCCL scope: flags, API, operation index and mask.
    let enc = encode_all(3, &[first.clone(), second.clone()]);
    assert_eq!(enc.payloads[0].len(), 4);
    assert_eq!(enc.payloads[0][2], op_index(&first.op) as u8);
    let mut unknown_api = enc.clone();
    assert!(Api::ALL.len() < 0x80);
    unknown_api.payloads[0][1] = Api::ALL.len() as u8;
    assert_eq!(
        decode_all(&unknown_api, 0x80),
        vec![None, Some(second.clone())]
    );
    // A newer writer's operation: the same header (its values in the columns), then an index
    // past this reader's, a mask and fields in the record, nothing in the operation columns.
    let mut newer = encode_all(
        3,
        &[
            Event {
                op: Op::RangePop,
                ..first.clone()
            },
            second.clone(),
        ],
    );
    newer.payloads[0].splice(2.., [COLUMNAR_OPS as u8 + 5, 0b11, 0x81, 0x01, 9]);
    assert_eq!(decode_all(&newer, 0x80), vec![None, Some(second)]);
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
    let v1 = postcard::to_stdvec(&b).unwrap().len();
    let v2 = encode_all(2, &[a.clone(), b.clone()]).payloads[1].len();
    assert!(v2 * 3 < v1, "{v2} vs {v1}");
    // Version 3: the same bytes, those that vary in the columns; the record keeps four.
    let alone = encode_all(3, std::slice::from_ref(&a));
    let both = encode_all(3, &[a, b]);
    let columns = |e: &Encoded| e.columns.iter().map(Vec::len).sum::<usize>();
    assert_eq!(both.payloads[1].len(), 4);
    assert_eq!(
        both.payloads[1].len() + columns(&both) - columns(&alone),
        v2
    );
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
            for version in VERSIONS {
                let enc = encode_all(version, &[e.clone(), e.clone()]);
                assert_eq!(
                    decode_all(&enc, 0x80),
                    vec![Some(e.clone()), Some(e.clone())],
                    "{shape:?}, version {version}"
                );
            }
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

/// The operations of version 3 are the first [`COLUMNAR_OPS`] variants, the last of them
/// `PrimaryCtxRetain`: operations appended later must keep their fields in their records, and
/// those of version 3 must keep theirs in the columns.
#[test]
fn version_3_has_its_operations_in_columns() {
    let last = Op::PrimaryCtxRetain { device: 0, ctx: 0 };
    assert_eq!(op_index(&last), COLUMNAR_OPS - 1);
    assert!(Shape::ALL.len() as u32 >= COLUMNAR_OPS);
    // An allocation's values go to the columns: its pointer apart from the rest.
    let mut e = blank();
    e.seq = 1;
    e.op = Op::Alloc {
        kind: crate::event::MemKind::Async,
        ptr: 0x1000,
        size: 300,
        stream: 0,
        pool: 0,
        flags: 0,
        pitch: 0,
    };
    let enc = encode_all(3, &[e]);
    assert_eq!(enc.payloads[0], [0, 0, 0, 0b111]);
    assert_eq!(enc.columns[Column::Ptr as usize], [0x80, 0x40]);
    assert_eq!(enc.columns[Column::Value as usize], [1, 0xac, 0x02]);
    assert_eq!(enc.columns[Column::Time as usize], [0]);
}
