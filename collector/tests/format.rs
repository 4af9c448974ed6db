//! Trace format: round trips, a file cut off at every byte, damage, and foreign files.

use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{
    End, Ending, Header, Module, Packing, Record, RecordRef, Segment, StackDef, Stats, TraceError,
    TraceReader, TraceWriter, FORMAT_VERSION, OLDEST_VERSION,
};

fn header() -> Header {
    Header {
        tool_version: "test".into(),
        pid: 42,
        ppid: 1,
        host: "h".into(),
        command_line: vec!["prog".into(), "--x".into()],
        pointer_size: 8,
        ..Header::default()
    }
}

fn event(seq: u64) -> Event {
    Event {
        seq,
        time_ns: 1000 + seq,
        thread: 7,
        api: Api::CudaMalloc,
        inner: Some(Api::CuMemAlloc),
        outer: None,
        result: 0,
        device: 0,
        context: 0xc0,
        caller: 0x401000 + seq,
        stack: 0,
        py_stack: 0,
        py_inferred: false,
        nccl_scope: 0,
        op: Op::Alloc {
            kind: MemKind::Device,
            ptr: 0x7000_0000_0000 + seq * 512,
            size: 512,
            stream: 0,
            pool: 0,
            flags: 0,
            pitch: 0,
        },
    }
}

fn sample_records(n: u64) -> Vec<Record> {
    let mut v = vec![
        Record::Module(Module {
            id: 1,
            path: "/bin/prog".into(),
            base: 0x400000,
            segments: vec![Segment {
                start: 0x400000,
                len: 0x1000,
                executable: true,
            }],
            build_id: vec![1, 2, 3],
        }),
        Record::Stack(StackDef {
            id: 1,
            frames: vec![1, 2, 3],
        }),
    ];
    v.extend((0..n).map(|i| Record::Event(event(i))));
    v.push(Record::End(End {
        time_ns: 5,
        stats: Stats {
            events: n,
            ..Stats::default()
        },
        reason: "exit".into(),
    }));
    v
}

/// Writes records with small chunks so a trace has many chunk boundaries.
fn write(records: &[Record], chunk: usize) -> Vec<u8> {
    write_version(records, chunk, FORMAT_VERSION)
}

/// [`write`] in a given format version.
fn write_version(records: &[Record], chunk: usize, version: u32) -> Vec<u8> {
    let mut w = TraceWriter::with_format_version(Vec::new(), &header(), version)
        .unwrap()
        .with_chunk_bytes(chunk);
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn round_trip_is_exact_and_complete() {
    let records = sample_records(1000);
    let bytes = write(&records, 1024);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(r.header(), &header());
    let back: Vec<Record> = r.by_ref().collect();
    assert_eq!(back, records);
    assert_eq!(r.ending(), Some(&Ending::Complete));
    assert!(r.chunks() > 5, "small chunks give many chunks");
    assert_eq!(r.skipped(), 0);
}

#[test]
fn a_file_cut_at_any_byte_opens_or_fails_cleanly() {
    for version in OLDEST_VERSION..=FORMAT_VERSION {
        cut_at_any_byte(version);
    }
}

fn cut_at_any_byte(version: u32) {
    let records = sample_records(300);
    let bytes = write_version(&records, 1024, version);
    let header_len = {
        let r = TraceReader::new(&bytes[..]).unwrap();
        r.offset() as usize
    };
    let mut last_count = 0;
    for cut in 0..bytes.len() {
        let part = &bytes[..cut];
        match TraceReader::new(part) {
            Err(TraceError::TruncatedHeader { have, .. }) => {
                assert!(cut < header_len, "cut {cut}");
                assert!(have <= cut as u64);
            }
            Err(e) => panic!("cut at {cut}: unexpected error {e}"),
            Ok(mut r) => {
                let got: Vec<Record> = r.by_ref().collect();
                // Everything read is a prefix of what was written.
                assert_eq!(&records[..got.len()], &got[..], "cut {cut}");
                assert!(
                    got.len() >= last_count,
                    "more bytes never read fewer records"
                );
                last_count = got.len();
                match r.ending().unwrap() {
                    Ending::Complete => panic!("a cut file is never complete (cut {cut})"),
                    Ending::NoEndRecord { offset } => assert_eq!(*offset, cut as u64),
                    Ending::Truncated { offset, .. } => assert!(*offset < cut as u64),
                    Ending::Corrupt { .. } => panic!("a cut is not damage (cut {cut})"),
                }
            }
        }
    }
    assert!(last_count > 250, "most records survive a cut near the end");
}

#[test]
fn damage_in_a_chunk_stops_there() {
    let records = sample_records(200);
    let mut bytes = write(&records, 256);
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert!(!got.is_empty() && got.len() < records.len());
    assert_eq!(&records[..got.len()], &got[..]);
    assert!(matches!(r.ending(), Some(Ending::Corrupt { .. })));
}

#[test]
fn foreign_and_wrong_version_files_are_rejected() {
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
    let mut bytes = write(&sample_records(1), 1024);
    bytes[8] = 99;
    let err = TraceReader::new(&bytes[..]).err().unwrap();
    assert!(matches!(
        err,
        TraceError::UnsupportedVersion { found: 99, .. }
    ));
    assert_eq!(
        err.to_string(),
        "trace format version 99 is not supported (this vramtrace reads versions 1 to 4)"
    );
    bytes[8] = 0;
    assert!(matches!(
        TraceReader::new(&bytes[..]),
        Err(TraceError::UnsupportedVersion { found: 0, .. })
    ));
    assert!(TraceWriter::with_format_version(Vec::new(), &header(), 5).is_err());
}

/// Traces of versions 1 (events in postcard's layout), 2 (events against the previous one) and 3
/// (their varying values in columns) read as they always did, with both readers, and a version 4
/// trace of the same records reads the same, in fewer bytes.
#[test]
fn older_versions_still_read() {
    let mut records = sample_records(3000);
    records.insert(1500, Record::Warning("between events".into()));
    let files: Vec<Vec<u8>> = (1..=4).map(|v| write_version(&records, 1024, v)).collect();
    for (i, bytes) in files.iter().enumerate() {
        assert_eq!(
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
            i as u32 + 1
        );
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        let back: Vec<Record> = r.by_ref().collect();
        assert_eq!(back, records);
        assert_eq!(r.ending(), Some(&Ending::Complete));
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(read_lent(&mut r), records);
    }
    assert_eq!(write(&records, 1024), files[3]);
    // Events of many shapes, in chunks of the writer's default size (tiny ones pay for each
    // chunk's table and frame).
    let varied = varied_records(20_000);
    // (203,847, 119,419 and 99,005 bytes when written.)
    let [v1, v2, v3, v4] = [1, 2, 3, 4].map(|v| write_version(&varied, 256 * 1024, v).len());
    assert!(v2 * 3 < v1 * 2, "{v2} vs {v1}");
    assert!(v3 * 10 < v2 * 9, "{v3} vs {v2}");
    assert!(v4 < v3, "{v4} vs {v3}");
}

#[test]
fn unknown_record_kinds_are_skipped_by_length() {
    // Build a chunk by hand holding: an unknown tag 99, then a known event.
    let mut raw = Vec::new();
    let unknown = [99u8, 1, 2, 3];
    raw.push(unknown.len() as u8);
    raw.extend_from_slice(&unknown);
    let mut ev = vec![1u8];
    ev.extend(postcard::to_stdvec(&event(5)).unwrap());
    raw.push(ev.len() as u8);
    raw.extend_from_slice(&ev);
    // Version 1: events in postcard's layout.
    let mut bytes = write_version(&[], 1024, 1);
    let packed = zstd::bulk::compress(&raw, 1).unwrap();
    bytes.extend_from_slice(&(packed.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&2u32.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&packed).to_le_bytes());
    bytes.extend_from_slice(&packed);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert_eq!(got, vec![Record::Event(event(5))]);
    assert_eq!(r.skipped(), 1);
}

/// Reads every record with `next_event_or_record`, owning the lent events.
fn read_lent<R: std::io::Read>(r: &mut TraceReader<R>) -> Vec<Record> {
    let mut got = Vec::new();
    while let Some(next) = r.next_event_or_record() {
        got.push(match next {
            RecordRef::Event(e) => Record::Event(e.clone()),
            RecordRef::Other(record) => record,
        });
    }
    got
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

/// Bytes of the table of record and column lengths at the start of a version 3 or 4 chunk.
const TABLE_BYTES: usize = 28;

/// Where the records of the decompressed chunk `raw` of a trace of `version` lie.
fn records_of(raw: &[u8], version: u32) -> std::ops::Range<usize> {
    if version < 3 {
        return 0..raw.len();
    }
    let len = u32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
    TABLE_BYTES..TABLE_BYTES + len
}

/// Where each record of the decompressed chunk `raw` of a trace of `version` starts (in version
/// 4, each item: a record's item byte, or a shape's number).
fn record_starts(raw: &[u8], version: u32) -> Vec<usize> {
    let records = records_of(raw, version);
    let mut starts = Vec::new();
    let mut at = records.start;
    while at < records.end {
        starts.push(at);
        if version >= 4 {
            if raw[at] < 0xfe {
                at += 1;
                continue;
            }
            at += 1;
        }
        let (mut len, mut shift, mut used) = (0usize, 0, 0);
        loop {
            let b = raw[at + used];
            len |= usize::from(b & 0x7f) << shift;
            used += 1;
            shift += 7;
            if b < 0x80 {
                break;
            }
        }
        at += used + len;
    }
    starts
}

/// The format version of the trace `bytes`.
fn version_of(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[8..12].try_into().unwrap())
}

/// `bytes` (a trace) with the decompressed chunk `index` changed by `edit`, the chunk
/// compressed again with a right header.
fn edit_chunk(bytes: &[u8], index: usize, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let mut at = 16 + word(12) + 4;
    for _ in 0..index {
        at += 16 + word(at);
    }
    let packed_len = word(at);
    let mut raw = zstd::bulk::decompress(&bytes[at + 16..at + 16 + packed_len], 1 << 24).unwrap();
    edit(&mut raw);
    let packed = zstd::bulk::compress(&raw, 1).unwrap();
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(&(packed.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    out.extend_from_slice(&bytes[at + 8..at + 12]);
    out.extend_from_slice(&crc32fast::hash(&packed).to_le_bytes());
    out.extend_from_slice(&packed);
    out.extend_from_slice(&bytes[at + 16 + packed_len..]);
    out
}

/// `bytes` with `more` inserted among the records of chunk `index`, before its record `before`
/// (the table of a version 3 or 4 chunk counting them).
fn insert_records(bytes: &[u8], index: usize, before: usize, more: &[u8]) -> Vec<u8> {
    let version = version_of(bytes);
    edit_chunk(bytes, index, |raw| {
        let at = record_starts(raw, version)[before];
        raw.splice(at..at, more.iter().copied());
        if version >= 3 {
            let len = u32::from_le_bytes(raw[..4].try_into().unwrap()) + more.len() as u32;
            raw[..4].copy_from_slice(&len.to_le_bytes());
        }
    })
}

/// `bytes` with the byte in the middle XORed with `mask`.
fn damaged_in_the_middle(bytes: &[u8], mask: u8) -> Vec<u8> {
    let mut damaged = bytes.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= mask;
    damaged
}

/// `bytes` with records to skip among the events of chunk 2: an unknown kind, and a body without
/// a readable tag.
fn with_records_to_skip(bytes: &[u8]) -> Vec<u8> {
    if version_of(bytes) >= 4 {
        // Each an item of its own, not a shape.
        insert_records(bytes, 2, 3, &[0xff, 3, 99, 0, 0, 0xff, 1, 0x80])
    } else {
        insert_records(bytes, 2, 3, &[3, 99, 0, 0, 1, 0x80])
    }
}

/// The events a record reader reads from `reader`.
fn events_read<R: std::io::Read>(reader: &mut TraceReader<R>) -> Vec<Event> {
    reader
        .by_ref()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// The events the replay loop applies from `reader`, and whether it stopped early.
fn events_replayed<R: std::io::Read>(reader: &mut TraceReader<R>) -> (Vec<Event>, bool) {
    let mut seen = Vec::new();
    let stopped = vramtrace_collector::live::LiveState::new().replay_visiting(
        reader,
        |_, e| {
            seen.push(e.clone());
            true
        },
        |_| {},
    );
    (seen, stopped)
}

/// Whatever the file (both format versions, whole, cut, damaged, with records to skip inside a
/// chunk, with framing that breaks mid-chunk), a reader made by `open` (chunks read and
/// decompressed on a second thread) gives exactly what one reading on the calling thread gives.
#[test]
fn a_file_read_ahead_on_a_thread_reads_as_on_one() {
    let dir = tempfile::tempdir().unwrap();
    let records = sample_records(2000);
    for version in OLDEST_VERSION..=FORMAT_VERSION {
        let bytes = write_version(&records, 1024, version);
        let damaged = damaged_in_the_middle(&bytes, 0xff);
        let skips = with_records_to_skip(&bytes);
        // Chunk 3's framing breaks inside its fifth record.
        let broken = edit_chunk(&bytes, 3, |raw| {
            let at = record_starts(raw, version)[4];
            raw.truncate(at + 2);
        });
        let files = [
            bytes.clone(),
            bytes[..bytes.len() - 100].to_vec(),
            bytes[..bytes.len() / 3].to_vec(),
            damaged,
            skips,
            broken,
        ];
        for (i, file) in files.iter().enumerate() {
            let path = dir.path().join(format!("{version}-{i}.vtrace"));
            std::fs::write(&path, file).unwrap();
            let mut direct = TraceReader::new(&file[..]).unwrap();
            let want: Vec<Record> = direct.by_ref().collect();
            let mut ahead = TraceReader::open(&path).unwrap();
            assert_eq!(read_lent(&mut ahead), want, "version {version}, file {i}");
            assert_eq!(
                ahead.ending(),
                direct.ending(),
                "version {version}, file {i}"
            );
            assert_eq!(
                (
                    ahead.offset(),
                    ahead.chunks(),
                    ahead.records(),
                    ahead.skipped()
                ),
                (
                    direct.offset(),
                    direct.chunks(),
                    direct.records(),
                    direct.skipped()
                ),
                "version {version}, file {i}"
            );
            if i == 4 {
                assert_eq!(direct.skipped(), 2, "version {version}");
                assert_eq!(want, records, "version {version}");
            }
            if i == 5 {
                assert!(
                    matches!(direct.ending(), Some(Ending::Corrupt { .. })),
                    "version {version}: {:?}",
                    direct.ending()
                );
            }
            // Dropped half-way: the reading thread stops.
            let mut early = TraceReader::open(&path).unwrap();
            assert!(early.next_record().is_some());
            drop(early);
        }
    }
}

#[test]
fn events_with_unknown_operations_are_skipped_by_length() {
    // An event from a newer writer: a known event's bytes with its operation replaced by a
    // variant index this reader does not have, and fields after it.
    let mut known = postcard::to_stdvec(&event(5)).unwrap();
    let op_at = known.len() - postcard::to_stdvec(&event(5).op).unwrap().len();
    known.truncate(op_at);
    known.extend_from_slice(&[120, 7, 7, 7]);
    let mut raw = Vec::new();
    for payload in [&known[..], &postcard::to_stdvec(&event(6)).unwrap()[..]] {
        raw.push(payload.len() as u8 + 1);
        raw.push(1);
        raw.extend_from_slice(payload);
    }
    // Version 1: events in postcard's layout.
    let mut bytes = write_version(&[], 1024, 1);
    let packed = zstd::bulk::compress(&raw, 1).unwrap();
    bytes.extend_from_slice(&(packed.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&2u32.to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&packed).to_le_bytes());
    bytes.extend_from_slice(&packed);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert_eq!(got, vec![Record::Event(event(6))]);
    assert_eq!(r.skipped(), 1);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(read_lent(&mut r), vec![Record::Event(event(6))]);
    assert_eq!(r.skipped(), 1);
}

/// Events of many shapes: the common ones (allocations and frees that succeed, which the replay
/// loop reads in one pass) between failures, nested calls, other operations, and changes of
/// thread, place, stacks and NCCL scope, so that each kind follows each other kind.
fn varied_records(n: u64) -> Vec<Record> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut records = sample_records(0);
    records.pop();
    for seq in 1..=n {
        let r = next();
        let mut e = event(seq);
        e.inner = None;
        e.thread = 1 + (r % 3) as u32;
        e.caller = 0x401000 + (r >> 8) % 5 * 0x40;
        e.op = match (r >> 16) % 10 {
            0..=3 => Op::Alloc {
                kind: if r >> 20 & 1 == 0 {
                    MemKind::Device
                } else {
                    MemKind::Async
                },
                ptr: 0x7000_0000_0000 + (r >> 24) % 64 * 0x1000,
                size: 512 << ((r >> 30) % 4),
                stream: (r >> 32) % 2,
                pool: 0,
                flags: 0,
                pitch: 0,
            },
            4..=6 => Op::Free {
                ptr: 0x7000_0000_0000 + (r >> 24) % 64 * 0x1000,
                stream: 0,
            },
            7 => Op::FreeHost {
                ptr: 0x6000_0000_0000 + (r >> 24) % 8 * 0x1000,
            },
            8 => Op::RangePush {
                name: format!("r{}", r % 7),
            },
            _ => Op::MarkStep { step: seq },
        };
        match (r >> 40) % 12 {
            0 => e.result = 2,
            1 => e.inner = Some(Api::CuMemAlloc),
            2 => (e.device, e.context) = (1, 0xc1),
            3 => (e.stack, e.py_stack, e.py_inferred) = (1, 3, r >> 44 & 1 == 1),
            4 => e.nccl_scope = seq,
            5 => e.seq = seq + 2,
            // Every seldom-changing field zero, as a chunk's state starts: the first event of a
            // chunk then writes none of them, and the reader must not keep the last chunk's.
            6 => e.context = 0,
            _ => {}
        }
        records.push(Record::Event(e));
        // Now and then a long record that is not an event, so that a chunk can end with the
        // common events before it read in one pass.
        if r >> 48 & 31 == 0 {
            records.push(Record::Warning("w".repeat(90)));
        }
    }
    records
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
    let read = |bytes: &[u8]| -> Vec<Record> { TraceReader::new(bytes).unwrap().collect() };
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

/// The replay loop (`LiveState::replay_visiting`, which `vramtrace` reads with) sees exactly
/// the events a record reader reads, on whole, cut, damaged and re-framed files of both format
/// versions.
#[test]
fn the_replay_loop_sees_the_events_a_record_reader_reads() {
    let dir = tempfile::tempdir().unwrap();
    let records = varied_records(3000);
    for version in OLDEST_VERSION..=FORMAT_VERSION {
        for chunk in [300, 4096] {
            let bytes = write_version(&records, chunk, version);
            let files = [
                bytes.clone(),
                bytes[..bytes.len() - 77].to_vec(),
                damaged_in_the_middle(&bytes, 0x55),
                with_records_to_skip(&bytes),
            ];
            for (i, file) in files.iter().enumerate() {
                let what = format!("version {version}, chunk {chunk}, file {i}");
                let mut direct = TraceReader::new(&file[..]).unwrap();
                let want = events_read(&mut direct);
                if i == 0 || i == 3 {
                    assert_eq!(want.len(), 3000, "{what}");
                }
                let path = dir.path().join(format!("{version}-{chunk}-{i}.vtrace"));
                std::fs::write(&path, file).unwrap();
                for mut reader in [
                    TraceReader::new(std::io::Cursor::new(file.clone())).unwrap(),
                    TraceReader::new(std::io::Cursor::new(std::fs::read(&path).unwrap())).unwrap(),
                ] {
                    let (seen, stopped) = events_replayed(&mut reader);
                    assert!(!stopped, "{what}");
                    assert_eq!(seen, want, "{what}");
                    assert_eq!(reader.ending(), direct.ending(), "{what}");
                    assert_eq!(
                        (reader.records(), reader.skipped(), reader.offset()),
                        (direct.records(), direct.skipped(), direct.offset()),
                        "{what}"
                    );
                }
            }
        }
    }
}

/// The one-pass reader of common events leaves the fields an event does not change alone in the
/// event it lends. A chunk starts from zeros: its first event, read after another record, must
/// not keep the last chunk's stacks and context.
#[test]
fn a_chunk_that_starts_with_another_record_reads_its_events_against_zeros() {
    let plain = |seq: u64| Event {
        inner: None,
        ..event(seq)
    };
    let first = Event {
        stack: 3,
        py_stack: 2,
        py_inferred: true,
        nccl_scope: 9,
        device: 1,
        ..plain(1)
    };
    let zeros = Event {
        context: 0,
        ..plain(2)
    };
    // Each event after another record, so that the one-pass reader reads it.
    let records = vec![
        Record::Warning("v".into()),
        Record::Event(first),
        Record::Warning("w".repeat(400)),
        Record::Warning("x".into()),
        Record::Event(zeros),
        Record::Event(plain(3)),
        Record::Warning("y".repeat(100)),
    ];
    for version in 2..=FORMAT_VERSION {
        let bytes = write_version(&records, 300, version);
        let mut direct = TraceReader::new(&bytes[..]).unwrap();
        let want = events_read(&mut direct);
        assert_eq!(direct.chunks(), 2);
        assert_eq!(want.len(), 3);
        let (seen, _) = events_replayed(&mut TraceReader::new(&bytes[..]).unwrap());
        assert_eq!(seen, want);
    }
}

/// Versions 3 and 4: a damaged event leaves where its values end in the columns unknown, so the
/// events after it in its chunk are skipped (and counted); the other records of the chunk, and
/// every later chunk, read as written — with both readers, and the replay loop.
#[test]
fn a_damaged_event_loses_the_rest_of_its_chunk_and_no_more() {
    for version in 3..=FORMAT_VERSION {
        a_damaged_event_loses_the_rest_of_its_chunk_in(version);
    }
}

fn a_damaged_event_loses_the_rest_of_its_chunk_in(version: u32) {
    let mut records = sample_records(600);
    // Records of other kinds inside chunk 2, after the damaged event.
    let chunk_of = |bytes: &[u8]| {
        let mut r = TraceReader::new(bytes).unwrap();
        let mut of = Vec::new();
        while r.next_record().is_some() {
            of.push(r.chunks() - 1);
        }
        of
    };
    let plain = write_version(&records, 1024, version);
    let first_of_2 = chunk_of(&plain).iter().position(|&c| c == 2).unwrap();
    records.insert(first_of_2 + 9, Record::Warning("after the damage".into()));
    let bytes = write_version(&records, 1024, version);
    let chunks = chunk_of(&bytes);
    assert_eq!(chunks[first_of_2 + 9], 2);
    // Chunk 2's fourth record, an event of a nested call: the tag of its inner API (after its
    // flags and API) becomes 2, which no writer writes. In version 4, where every later event of
    // the chunk names the first one's record (its shape), the first such event whose record is
    // written there: the chunk's first.
    let mut damaged_record = 3;
    let damaged = edit_chunk(&bytes, 2, |raw| {
        let starts = record_starts(raw, version);
        let nested = |at: usize| raw[at + 1] == 1 && raw[at + 2] & 0x04 != 0 && raw[at + 4] == 1;
        let at = if version >= 4 {
            let k = (0..starts.len())
                .find(|&k| raw[starts[k]] == 0xfe && nested(starts[k] + 1))
                .expect("a nested event written as a new shape");
            damaged_record = k;
            starts[k] + 1
        } else {
            starts[3]
        };
        assert_eq!(raw[at + 1], 1, "an event");
        assert_ne!(raw[at + 2] & 0x04, 0, "nested");
        assert_eq!(raw[at + 4], 1, "an inner API");
        raw[at + 4] = 2;
    });
    assert!(damaged_record < 9, "before the other record");
    let want: Vec<Record> = records
        .iter()
        .zip(&chunks)
        .enumerate()
        .filter(|&(i, (r, &c))| {
            c != 2 || i < first_of_2 + damaged_record || !matches!(r, Record::Event(_))
        })
        .map(|(_, (r, _))| r.clone())
        .collect();
    let lost = records.len() - want.len();
    assert!(lost > 10, "the rest of chunk 2's events: {lost}");
    let mut r = TraceReader::new(&damaged[..]).unwrap();
    assert_eq!(r.by_ref().collect::<Vec<_>>(), want);
    assert_eq!(
        (r.skipped(), r.ending()),
        (lost as u64, Some(&Ending::Complete))
    );
    let mut r = TraceReader::new(&damaged[..]).unwrap();
    assert_eq!(read_lent(&mut r), want);
    let (seen, _) = events_replayed(&mut TraceReader::new(&damaged[..]).unwrap());
    let events: Vec<Event> = want
        .into_iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(seen, events);
}

/// An edit to a decompressed version 3 chunk: bytes of its records, of its columns or of its
/// table changed, or bytes cut from its end.
#[derive(Clone, Debug)]
enum ChunkEdit {
    Set {
        at: usize,
        byte: u8,
        in_columns: bool,
    },
    Table {
        which: usize,
        len: u32,
    },
    Cut(usize),
}

fn chunk_edit() -> impl proptest::strategy::Strategy<Value = ChunkEdit> {
    use proptest::prelude::*;
    prop_oneof![
        (any::<usize>(), any::<u8>(), any::<bool>()).prop_map(|(at, byte, in_columns)| {
            ChunkEdit::Set {
                at,
                byte,
                in_columns,
            }
        }),
        (0usize..7, 0u32..4000).prop_map(|(which, len)| ChunkEdit::Table { which, len }),
        (1usize..64).prop_map(ChunkEdit::Cut),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Version 3 and 4 chunks whose checksum holds but whose insides no writer wrote (records,
    /// columns or table changed; in version 4, items naming shapes never defined, or defining
    /// them where none was): reading never panics, and the replay loop sees exactly the events
    /// the record reader reads, with the same counts and ending.
    #[test]
    fn damaged_chunks_read_the_same_by_every_reader(
        edits in proptest::collection::vec(chunk_edit(), 1..4),
        chunk in 0usize..6,
        version in 3u32..=4,
    ) {
        // Some 8 chunks.
        let records = varied_records(1000);
        let bytes = write_version(&records, 2048, version);
        let damaged = edit_chunk(&bytes, chunk, |raw| {
            let records_end = records_of(raw, version).end;
            for edit in &edits {
                match *edit {
                    ChunkEdit::Set { at, byte, in_columns } => {
                        let (lo, hi) = if in_columns {
                            (records_end, raw.len())
                        } else {
                            (TABLE_BYTES, records_end.min(raw.len()))
                        };
                        if hi > lo {
                            raw[lo + at % (hi - lo)] = byte;
                        }
                    }
                    ChunkEdit::Table { which, len } => {
                        raw[4 * which..4 * which + 4].copy_from_slice(&len.to_le_bytes());
                    }
                    ChunkEdit::Cut(n) => raw.truncate(raw.len().saturating_sub(n).max(TABLE_BYTES)),
                }
            }
        });
        let mut direct = TraceReader::new(&damaged[..]).unwrap();
        let want = events_read(&mut direct);
        let mut lent = TraceReader::new(&damaged[..]).unwrap();
        let lent_events: Vec<Event> = read_lent(&mut lent)
            .into_iter()
            .filter_map(|r| match r {
                Record::Event(e) => Some(e),
                _ => None,
            })
            .collect();
        proptest::prop_assert_eq!(&lent_events, &want);
        let mut replayed = TraceReader::new(&damaged[..]).unwrap();
        let (seen, _) = events_replayed(&mut replayed);
        proptest::prop_assert_eq!(&seen, &want);
        for r in [&lent, &replayed] {
            proptest::prop_assert_eq!(
                (r.records(), r.skipped(), r.offset(), r.ending()),
                (direct.records(), direct.skipped(), direct.offset(), direct.ending())
            );
        }
        // The events of the chunks before the damaged one read as written.
        let mut intact = TraceReader::new(&bytes[..]).unwrap();
        let mut before = Vec::new();
        while let Some(r) = intact.next_record() {
            if intact.chunks() > chunk as u64 {
                break;
            }
            if let Record::Event(e) = r {
                before.push(e);
            }
        }
        proptest::prop_assert!(want.len() >= before.len());
        proptest::prop_assert_eq!(&want[..before.len()], &before[..]);
    }
}

/// Version 4: an event record written out (too long to be a shape) whose length runs past the
/// chunk's records, into its columns, is damaged framing for every reader: none reads an event
/// from it.
#[test]
fn a_plain_record_that_runs_past_the_records_is_damage() {
    // A common allocation that changes its place and stacks: a record of more than 16 bytes.
    let mut e = event(1);
    e.inner = None;
    e.device = 3;
    e.context = 0xdead_beef_0000;
    e.stack = 7;
    e.py_stack = 9;
    // Common events before the last (so that the columns after the records are long enough for
    // the one-pass reader to read the last record), which changes its place and stacks again.
    let mut records: Vec<Record> = (1..=30).map(|seq| Record::Event(event(seq))).collect();
    records[0] = Record::Event(e.clone());
    (e.seq, e.device, e.stack) = (31, 4, 8);
    records.push(Record::Event(e));
    let bytes = write_version(&records, 1 << 20, 4);
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    assert_eq!(r.by_ref().count(), 31);
    let damaged = edit_chunk(&bytes, 0, |raw| {
        let starts = record_starts(raw, 4);
        let last = *starts.last().unwrap();
        assert_eq!(raw[last], 0xff, "written out");
        assert!(raw[last + 1] >= 16, "a long record");
        // Three bytes longer: past the records, inside the columns.
        raw[last + 1] += 3;
    });
    let mut direct = TraceReader::new(&damaged[..]).unwrap();
    let want = events_read(&mut direct);
    assert_eq!(want.len(), 30);
    assert!(matches!(direct.ending(), Some(Ending::Corrupt { .. })));
    let mut replayed = TraceReader::new(&damaged[..]).unwrap();
    let (seen, _) = events_replayed(&mut replayed);
    assert_eq!(seen, want);
    assert_eq!(replayed.ending(), direct.ending());
}
