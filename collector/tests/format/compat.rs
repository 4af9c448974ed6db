//! Format 4 and 5 files (as the tracer wrote them before format 6: real GPU traces among them)
//! read through the same decoder: only the framing (4) and the header (4, 5) differ.

use vramtrace_collector::format::{Ending, Record, TraceError, TraceReader};

use crate::support::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../tests/fixtures/format/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fixtures (`tests/fixtures/format/`) were written by the format 4 writer from the records
/// their names say.
#[test]
fn format_4_files_read_exactly() {
    for (name, records) in [
        ("v4-varied.vtrace", varied_records(3000)),
        ("v4-every-op.vtrace", every_op_records()),
        ("v4-sample.vtrace", sample_records(300)),
    ] {
        let bytes = fixture(name);
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(r.version(), 4);
        assert_eq!(r.header(), &header());
        assert_eq!(r.by_ref().collect::<Vec<_>>(), records, "{name}");
        let complete = matches!(records.last(), Some(Record::End(_)));
        assert_eq!(r.ending() == Some(&Ending::Complete), complete, "{name}");
        assert!(r.unread().is_empty());
        // The same records in format 5 read the same.
        assert_eq!(read(&write(&records, 4096)), records);
    }
}

/// The format 5 fixtures (`tests/fixtures/format/`) were written by the format 5 writer from the
/// records their names say; their headers have no segment.
#[test]
fn format_5_files_read_exactly() {
    for (name, records) in [
        ("v5-varied.vtrace", varied_records(3000)),
        ("v5-every-op.vtrace", every_op_records()),
    ] {
        let bytes = fixture(name);
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(r.version(), 5);
        assert_eq!(r.header(), &header());
        assert_eq!(r.header().segment, None);
        assert_eq!(r.by_ref().collect::<Vec<_>>(), records, "{name}");
        let complete = matches!(records.last(), Some(Record::End(_)));
        assert_eq!(r.ending() == Some(&Ending::Complete), complete, "{name}");
        assert!(r.unread().is_empty());
    }
}

/// Cut at any byte, a format 4 file reads up to its last whole chunk.
#[test]
fn a_format_4_file_cut_at_any_byte_reads_up_to_its_last_whole_chunk() {
    let bytes = fixture("v4-varied.vtrace");
    let records = varied_records(3000);
    let header_len = TraceReader::new(&bytes[..]).unwrap().offset() as usize;
    let mut last = 0;
    // Every byte of the first chunks, then every 7th.
    for cut in (0..bytes.len()).filter(|&c| c < 4096 || c % 7 == 0) {
        match TraceReader::new(&bytes[..cut]) {
            Err(TraceError::TruncatedHeader { have, .. }) => {
                assert!(cut < header_len && have <= cut as u64, "cut {cut}")
            }
            Err(e) => panic!("cut {cut}: {e}"),
            Ok(mut r) => {
                let got: Vec<Record> = r.by_ref().collect();
                assert_eq!(&records[..got.len()], &got[..], "cut {cut}");
                assert!(got.len() >= last, "more bytes never read fewer records");
                last = got.len();
                match r.ending().unwrap() {
                    Ending::NoEndRecord { offset } => assert_eq!(*offset, cut as u64),
                    Ending::Truncated { offset, .. } => {
                        assert!(*offset < cut as u64);
                        let u = r.unread();
                        assert_eq!((u.len(), u[0].offset + u[0].bytes), (1, cut as u64));
                    }
                    other => panic!("cut {cut}: {other:?}"),
                }
            }
        }
    }
    assert!(last > 2900, "most records survive a cut near the end");
}

/// Format 4 chunks cannot be found again after damage: reading stops there, and the rest of the
/// file is listed unread.
#[test]
fn damage_in_a_format_4_chunk_stops_there() {
    let mut bytes = fixture("v4-varied.vtrace");
    let records = varied_records(3000);
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let got: Vec<Record> = r.by_ref().collect();
    assert!(!got.is_empty() && got.len() < records.len());
    assert_eq!(&records[..got.len()], &got[..]);
    let Some(Ending::Corrupt { offset, .. }) = r.ending() else {
        panic!("{:?}", r.ending())
    };
    assert!(*offset <= at as u64);
    let u = r.unread();
    assert_eq!(u.len(), 1);
    assert_eq!(
        (u[0].offset, u[0].offset + u[0].bytes),
        (*offset, bytes.len() as u64)
    );
}

/// Real traces of GPU programs (`tests/fixtures/gpu/`: run 1's in format 4; in format 5, run 4's
/// and later ones under `vramtrace run` (`-recorder`) or without its hooks (`-bare`)) read
/// whole: every record of every chunk, nothing skipped or damaged, the end record last.
#[test]
fn real_gpu_traces_read_whole() {
    let dir = format!("{}/../tests/fixtures/gpu", env!("CARGO_MANIFEST_DIR"));
    let (mut read, mut recorded) = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "vtrace") {
            continue;
        }
        let mut r = TraceReader::open(&path).unwrap();
        let records: Vec<Record> = r.by_ref().collect();
        let name = path.to_string_lossy();
        let run_4 = name.contains("-recorder") || name.contains("-bare");
        let version = if run_4 { 5 } else { 4 };
        assert_eq!(r.version(), version, "{}", path.display());
        recorded += usize::from(run_4);
        assert_eq!(r.ending(), Some(&Ending::Complete), "{}", path.display());
        assert_eq!(
            (r.skipped(), r.unread()),
            (0, &[][..]),
            "{}",
            path.display()
        );
        assert!(matches!(records.last(), Some(Record::End(_))));
        assert!(
            records
                .iter()
                .filter(|r| matches!(r, Record::Event(_)))
                .count()
                > 30
        );
        read += 1;
    }
    // The four first traces, the acceptance programs', and run 4's three
    // (tests/fixtures/gpu/README.md).
    assert_eq!((read, recorded), (25, 7));
}
