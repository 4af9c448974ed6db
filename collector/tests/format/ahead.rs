//! Reading ahead on a second thread gives exactly what reading on the calling thread gives, on
//! whole, cut and damaged files of both versions.

use vramtrace_collector::format::{Record, TraceReader};

use crate::layout;
use crate::support::*;

#[test]
fn a_file_read_ahead_on_threads_reads_as_on_one() {
    let dir = tempfile::tempdir().unwrap();
    let records = varied_records(2000);
    let bytes = write(&records, 1024);
    let mut damaged = bytes.clone();
    let n = damaged.len();
    damaged[n / 3] ^= 0x20;
    damaged[n / 2] ^= 0x01;
    let broken = layout::edit_chunk(&bytes, 3, |raw| {
        // The first item names a shape the chunk has not defined.
        let items = layout::items_of(raw);
        raw[items.start] = 5;
    });
    let v4 = std::fs::read(format!(
        "{}/../tests/fixtures/format/v4-varied.vtrace",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let files = [
        bytes.clone(),
        bytes[..bytes.len() - 100].to_vec(),
        bytes[..bytes.len() / 3].to_vec(),
        damaged,
        broken,
        v4.clone(),
        v4[..v4.len() / 2].to_vec(),
    ];
    for (i, file) in files.iter().enumerate() {
        let path = dir.path().join(format!("{i}.vtrace"));
        std::fs::write(&path, file).unwrap();
        let mut direct = TraceReader::new(&file[..]).unwrap();
        let want: Vec<Record> = direct.by_ref().collect();
        {
            let mut ahead = TraceReader::open(&path).unwrap();
            assert_eq!(read_lent(&mut ahead), want, "file {i}");
            assert_eq!(ahead.ending(), direct.ending(), "file {i}");
            assert_eq!(ahead.unread(), direct.unread(), "file {i}");
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
                "file {i}"
            );
        }
        if i == 3 || i == 4 {
            assert!(!direct.unread().is_empty(), "file {i}");
        }
        // Dropped half-way: the threads stop.
        let mut early = TraceReader::open(&path).unwrap();
        assert!(early.next_record().is_some());
        drop(early);
    }
}
