//! Whatever is written reads back exactly; what this reader does not know is skipped by its
//! length, and what follows still reads right.

use vramtrace_collector::event::{Api, Event, Op};
use vramtrace_collector::format::{
    Ending, Header, Packing, Record, TraceError, TraceReader, TraceWriter, FORMAT_VERSION,
};

use crate::layout::{self, varint, zig};
use crate::support::*;

#[test]
fn round_trip_is_exact_and_complete() {
    let records = sample_records(1000);
    let bytes = write(&records, 1024);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!((r.header(), r.version()), (&header(), FORMAT_VERSION));
    let back: Vec<Record> = r.by_ref().collect();
    assert_eq!(back, records);
    assert_eq!(r.ending(), Some(&Ending::Complete));
    assert!(r.chunks() > 5, "small chunks give many chunks");
    assert_eq!((r.skipped(), r.unread()), (0, &[][..]));
    assert_eq!(r.offset(), bytes.len() as u64);
}

/// Every operation, with fields zero, small and of any size, under changing event headers, in
/// chunks small and large: read back exactly, by both ways of reading.
#[test]
fn every_operation_reads_back_exactly() {
    let records = every_op_records();
    for chunk in [200, 2048, 1 << 20] {
        let bytes = write(&records, chunk);
        assert_eq!(read(&bytes), records, "chunks of {chunk} bytes");
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(read_lent(&mut r), records);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Random sequences of events of every operation and header, in random chunk sizes.
    #[test]
    fn random_events_read_back_exactly(seed in proptest::prelude::any::<u64>(), n in 1usize..400, chunk in 64usize..4096) {
        let mut rng = Rng(seed | 1);
        let mut records = Vec::new();
        let mut ops = Vec::new();
        for i in 0..n {
            if ops.is_empty() {
                ops = every_op(&mut rng);
            }
            let op = ops.swap_remove((rng.next() % ops.len() as u64) as usize);
            let pick = |r: u64, v: u64| if r.is_multiple_of(3) { v } else { r % 4 };
            // Every field set, in declaration order (the order the generator is drawn in).
            let e = Event {
                seq: pick(rng.next(), rng.next()),
                time_ns: pick(rng.next(), rng.next()),
                thread: pick(rng.next(), rng.next()) as u32,
                api: Api::ALL[(rng.next() % Api::ALL.len() as u64) as usize],
                inner: rng.next().is_multiple_of(2).then(|| Api::ALL[(rng.next() % 7) as usize]),
                outer: rng.next().is_multiple_of(3).then_some(Api::CudaFree),
                result: pick(rng.next(), rng.next()) as i32,
                device: pick(rng.next(), rng.next()) as i32,
                context: pick(rng.next(), rng.next()),
                caller: pick(rng.next(), rng.next()),
                stack: pick(rng.next(), rng.next()) as u32,
                py_stack: pick(rng.next(), rng.next()) as u32,
                py_inferred: rng.next().is_multiple_of(2),
                nccl_scope: pick(rng.next(), rng.next()),
                op,
            };
            records.push(Record::Event(e));
            if i % 37 == 0 {
                records.push(Record::Warning(format!("w{i}")));
            }
        }
        let bytes = write(&records, chunk);
        proptest::prop_assert_eq!(read(&bytes), records);
    }
}

/// One chunk with more kinds of event record than it has shape numbers (each stack id makes a
/// record of its own), mostly a few common ones, in an order that goes round the numbers many
/// times: the reader names each shape as the writer did.
#[test]
fn a_chunk_with_more_kinds_of_record_than_shape_numbers_reads_back() {
    let mut rng = Rng(3);
    let records: Vec<Record> = (1..=20_000)
        .map(|seq| {
            let r = rng.next();
            let mut e = event(seq);
            e.stack = if r >> 61 == 0 {
                (r % 400) as u32
            } else {
                (r % 40) as u32
            };
            Record::Event(e)
        })
        .collect();
    let bytes = write(&records, 1 << 20);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(r.by_ref().collect::<Vec<_>>(), records);
    assert_eq!(r.chunks(), 1);
    // Named, not written out: a few bytes an event.
    assert!(bytes.len() < 20_000 * 4, "{} bytes", bytes.len());
}

#[test]
fn lent_events_are_the_records_in_order() {
    let mut records = sample_records(500);
    records.insert(100, Record::Warning("between events".into()));
    let bytes = write(&records, 2048);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(read_lent(&mut r), records);
    assert_eq!(r.ending(), Some(&Ending::Complete));
    assert_eq!((r.records(), r.skipped()), (records.len() as u64, 0));
}

/// `records` written in chunks of `chunk` bytes, the packing chosen before each record.
fn write_packed(records: &[Record], chunk: usize, packing: impl Fn(usize) -> Packing) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header())
        .unwrap()
        .with_chunk_bytes(chunk);
    for (i, r) in records.iter().enumerate() {
        w.set_packing(packing(i)).unwrap();
        assert_eq!(w.packing(), packing(i));
        w.write(r).unwrap();
    }
    w.finish().unwrap()
}

/// Both packings, and switching between them from chunk to chunk, read back to the same records;
/// the default one is the smaller (it is what the tracer writes when it keeps up).
#[test]
fn chunks_of_either_packing_read_back_the_same() {
    let records = varied_records(20_000);
    let small = write_packed(&records, 64 * 1024, |_| Packing::Small);
    let fast = write_packed(&records, 64 * 1024, |_| Packing::Fast);
    let mixed = write_packed(&records, 4096, |i| {
        if i / 300 % 2 == 0 {
            Packing::Fast
        } else {
            Packing::Small
        }
    });
    assert_eq!(read(&small), records);
    assert_eq!(read(&fast), records);
    assert_eq!(read(&mixed), records);
    assert_eq!(Packing::default(), Packing::Small);
    assert_eq!(write(&records, 64 * 1024), small, "the default packing");
    assert!(
        small.len() * 20 < fast.len() * 19,
        "lazy matching packs at least 5% smaller: {} against {} bytes",
        small.len(),
        fast.len()
    );
}

/// A chunk built by hand from the documented layout: a record of an unknown kind, one without a
/// readable tag, an event of an unknown operation (its fields in its record), one of an unknown
/// API (its pointer in the pointer column), then a known event whose pointer and time depend on
/// the skipped ones having moved the columns on.
#[test]
fn what_this_reader_does_not_know_is_skipped_and_what_follows_reads() {
    let mut items = Vec::new();
    let mut record = |payload: &[u8]| {
        items.push(0xff);
        items.extend(varint(payload.len() as u64));
        items.extend_from_slice(payload);
    };
    record(&[99, 1, 2, 3]);
    record(&[0x80]);
    // flags 0, API 0, operation 120 with whatever fields.
    record(&[1, 0, 0, 120, 5, 7, 7]);
    // flags 0, API 9999, operation 1 (Free) with its pointer present.
    record(&[[1, 0].as_slice(), &varint(9999), &[1, 1]].concat());
    record(&[1, 0, 0, 1, 1]);
    let mut columns: [Vec<u8>; 6] = Default::default();
    for _ in 0..3 {
        columns[0].extend(varint(zig(5)));
    }
    columns[4].extend(varint(zig(0x1000)));
    columns[4].extend(varint(zig(0x800)));
    let raw = layout::raw_chunk(&items, &columns);
    let mut bytes = TraceWriter::new(Vec::new(), &Header::default())
        .unwrap()
        .finish()
        .unwrap();
    bytes.extend(layout::chunk(&raw, 5, 3, 0));
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    let want = Event {
        time_ns: 15,
        ..Event::new(
            3,
            Api::CudaMalloc,
            Op::Free {
                ptr: 0x1800,
                stream: 0,
            },
        )
    };
    assert_eq!(got, vec![Record::Event(want)]);
    assert_eq!((r.skipped(), r.unread()), (4, &[][..]));
    assert_eq!(
        r.ending(),
        Some(&Ending::NoEndRecord {
            offset: bytes.len() as u64
        })
    );
    // An event whose memory kind is one this reader does not know is skipped the same way.
    let mut columns: [Vec<u8>; 6] = Default::default();
    columns[0].extend(varint(2));
    columns[4].extend(varint(2));
    columns[5].extend(varint(6));
    let items = [0xff, 5, 1, 0, 0, 0, 0b11];
    let mut unknown_kind = bytes[..layout::header_blocks(&bytes).1.end].to_vec();
    unknown_kind.extend(layout::chunk(&layout::raw_chunk(&items, &columns), 1, 1, 0));
    let mut r = TraceReader::new(&unknown_kind[..]).unwrap();
    assert_eq!(r.by_ref().count(), 0);
    assert_eq!((r.skipped(), r.unread()), (1, &[][..]));
}

#[test]
fn foreign_and_unsupported_files_are_rejected() {
    assert!(matches!(
        TraceReader::new(&b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\0\0\0"[..]),
        Err(TraceError::NotATrace)
    ));
    assert!(matches!(
        TraceReader::new(&b"hello"[..]),
        Err(TraceError::NotATrace)
    ));
    assert!(matches!(
        TraceReader::new(&b""[..]),
        Err(TraceError::TruncatedHeader { have: 0, .. })
    ));
    // A header block of version 99 whose checksum holds: a newer format, not damage.
    let mut block = b"VRAMTRC\0".to_vec();
    block.extend_from_slice(&99u32.to_le_bytes());
    block.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32fast::hash(&block[8..]);
    block.extend_from_slice(&crc.to_le_bytes());
    let err = TraceReader::new(&block[..]).err().unwrap();
    assert!(matches!(
        err,
        TraceError::UnsupportedVersion { found: 99, .. }
    ));
    assert_eq!(
        err.to_string(),
        "trace format version 99 is not supported (this vramtrace reads versions 4 to 6)"
    );
}

/// An alert raised while the program ran reads back whole between events, and a replay keeps it.
#[test]
fn alerts_read_back_between_events() {
    use vramtrace_collector::format::Alert;
    let alert = Alert {
        time_ns: 5_000_000,
        after_seq: 100,
        step: 12,
        device: 0,
        reason: "horizon".into(),
        rate: 1 << 20,
        unit: "step".into(),
        unit_ns: 0,
        threshold: 1_073_741,
        live_bytes: 40 << 20,
        device_memory: 1 << 30,
        steps_to_full: Some(984),
        seconds_to_full: Some(3),
        place: "leak.py:12 in step".into(),
        place_rate: 1 << 20,
        stack: 3,
        caller: 0x7f00_1234,
        py_stack: 2,
        signal: 10,
        snapshot: "/tmp/t-1.alert-1.json".into(),
    };
    let mut records = sample_records(200);
    records.insert(101, Record::Alert(Box::new(alert.clone())));
    let bytes = write(&records, 2048);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(r.by_ref().collect::<Vec<_>>(), records);
    let mut state = vramtrace_collector::live::LiveState::new();
    state.replay(&mut TraceReader::new(&bytes[..]).unwrap());
    assert_eq!((state.alerts(), state.alerts_total()), (vec![alert], 1));
}

/// A payload of several pieces goes through a trace file, between events, and comes back
/// whole from the live state.
#[test]
fn a_large_payload_survives_the_trace_file() {
    use vramtrace_collector::attached::pieces;
    use vramtrace_collector::format::Attachment;
    use vramtrace_collector::live::LiveState;

    let data: Vec<u8> = (0..(2 * Attachment::PIECE_BYTES + 12345))
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let mark = |seq: u64| {
        Record::Event(Event {
            api: Api::TracerMarkStep,
            inner: None,
            device: -1,
            op: Op::MarkStep { step: seq },
            ..event(seq)
        })
    };
    let mut w = TraceWriter::new(Vec::new(), &Header::default())
        .unwrap()
        .with_chunk_bytes(256 * 1024);
    w.write(&mark(1)).unwrap();
    let written: Vec<Attachment> = pieces("torch.memory_snapshot", 1, 99, 1, &data).collect();
    assert_eq!(written.len(), 3);
    for p in &written {
        w.write(&Record::Attachment(p.clone())).unwrap();
    }
    for p in pieces("torch.allocator", 2, 100, 1, b"") {
        w.write(&Record::Attachment(p)).unwrap();
    }
    w.write(&mark(2)).unwrap();
    let bytes = w.finish().unwrap();
    let mut state = LiveState::new();
    state.replay(&mut TraceReader::new(std::io::Cursor::new(bytes)).unwrap());
    assert_eq!(state.steps(), 2);
    let got = state.attachments().of_kind("torch.memory_snapshot");
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].id, got[0].time_ns, got[0].after_seq), (1, 99, 1));
    assert!(got[0].data == data, "the payload changed on the way");
    assert_eq!(state.attachments().of_kind("torch.allocator")[0].data, b"");
    assert_eq!(state.attachments().broken(), 0);
}

/// A segment's header says where it stands, and its snapshot and end records read back whole
/// (a snapshot large enough to span several chunks' worth of bytes in one record).
#[test]
fn a_segment_reads_back_with_its_place_snapshot_and_end() {
    use vramtrace_collector::event::MemKind;
    use vramtrace_collector::event::{SnapshotObject, SnapshotThing};
    use vramtrace_collector::format::{SegmentEnd, SegmentInfo, Snapshot};
    let place = SegmentInfo {
        index: 3,
        events_before: 1_000_000,
        last_seq: 1_000_042,
        time_ns: 9_000_000_000,
        steps: 500,
        bytes_before: 64 << 20,
    };
    let h = Header {
        segment: Some(place.clone()),
        ..header()
    };
    let objects = (0..20_000u64)
        .map(|i| SnapshotObject {
            call: (i % 7) as u32,
            seq: 10 + i,
            time_ns: 1000 + i,
            step: i / 100,
            flags: 0,
            thing: SnapshotThing::Allocation {
                host: false,
                kind: MemKind::Async,
                ptr: 0x7000_0000 + i * 4096,
                size: 4096,
            },
        })
        .collect();
    let snapshot = Snapshot {
        complete: true,
        events: 1_000_000,
        objects,
        ..Snapshot::default()
    };
    let end = SegmentEnd {
        index: 3,
        events: 5,
        last_seq: 1_000_047,
        ..SegmentEnd::default()
    };
    let mut records = vec![Record::Snapshot(Box::new(snapshot))];
    records.extend(sample_records(5));
    records.insert(records.len() - 1, Record::SegmentEnd(end));
    let mut w = TraceWriter::new(Vec::new(), &h)
        .unwrap()
        .with_chunk_bytes(4096);
    for r in &records {
        w.write(r).unwrap();
    }
    let bytes = w.finish().unwrap();
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header().segment.as_ref(), Some(&place));
    assert_eq!(r.by_ref().collect::<Vec<_>>(), records);
    assert_eq!(r.ending(), Some(&Ending::Complete));
}
