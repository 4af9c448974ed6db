//! Damage stays local: a flipped bit anywhere costs at most the chunk it is in (and is reported
//! with its byte range and events), a cut at any byte keeps every whole chunk before it, and no
//! bytes at all make the reader panic or hang.

use std::ops::Range;

use vramtrace_collector::format::{Ending, Record, TraceError, TraceReader, Unread};

use crate::layout::{self, chunk_spans, header_blocks};
use crate::support::*;

/// For each record of the intact trace `bytes`, the chunk it is in.
fn chunk_of_each(bytes: &[u8]) -> Vec<usize> {
    let mut r = TraceReader::new(bytes).unwrap();
    let mut of = Vec::new();
    while r.next_record().is_some() {
        of.push(r.chunks() as usize);
    }
    of
}

/// `records` without those of chunk `k`.
fn without_chunk(records: &[Record], chunk_of: &[usize], k: usize) -> Vec<Record> {
    records
        .iter()
        .zip(chunk_of)
        .filter(|&(_, &c)| c != k)
        .map(|(r, _)| r.clone())
        .collect()
}

/// What reading `bytes` with one bit flipped at `bit` must give: every record but those of the
/// chunk hit, that chunk reported unread (its bytes and its events), and a damaged header block
/// read from its copy.
fn check_flip(bytes: &[u8], records: &[Record], chunk_of: &[usize], bit: usize) {
    let intact = {
        let mut r = TraceReader::new(bytes).unwrap();
        r.by_ref().count();
        r.ending().cloned()
    };
    let mut damaged = bytes.to_vec();
    damaged[bit / 8] ^= 1 << (bit % 8);
    let at = bit / 8;
    let (first, copy) = header_blocks(bytes);
    let spans = chunk_spans(bytes);
    let mut r = TraceReader::new(&damaged[..]).unwrap_or_else(|e| panic!("bit {bit}: {e}"));
    assert_eq!(r.header(), &header(), "bit {bit}");
    let got: Vec<Record> = r.by_ref().collect();
    let unread: Vec<Unread> = r.unread().to_vec();
    if first.contains(&at) {
        assert_eq!(got, records, "bit {bit}");
        assert_eq!(unread.len(), 1, "bit {bit}");
        assert_eq!((unread[0].offset, unread[0].events), (0, Some(0)));
    } else if copy.contains(&at) {
        assert_eq!((&got[..], &unread[..]), (records, &[][..]), "bit {bit}");
    } else {
        let k = spans.iter().position(|s| s.contains(&at)).unwrap();
        let events = chunk_of
            .iter()
            .zip(records)
            .filter(|&(&c, r)| c == k && matches!(r, Record::Event(_)))
            .count() as u64;
        assert_eq!(got, without_chunk(records, chunk_of, k), "bit {bit}");
        let span: Range<usize> = spans[k].clone();
        // The last chunk's events are known only when the part of its fixed part that its own
        // checksum covers (all but the last four bytes) is intact.
        let known = k + 1 < spans.len() || at >= span.start + layout::HEAD - 4;
        assert_eq!(
            unread
                .iter()
                .map(|u| (u.offset, u.bytes, u.events))
                .collect::<Vec<_>>(),
            vec![(
                span.start as u64,
                (span.end - span.start) as u64,
                known.then_some(events)
            )],
            "bit {bit}"
        );
        if k + 1 == spans.len() {
            assert!(!r.ending().unwrap().is_complete(), "the end record is lost");
        }
    }
    if !(spans.last().unwrap().contains(&at)) {
        assert_eq!(r.ending(), intact.as_ref(), "bit {bit}");
    }
}

/// Every bit of the header blocks and of the first chunks' fixed parts, and one bit of every
/// byte elsewhere.
#[test]
fn a_flipped_bit_anywhere_loses_at_most_its_chunk() {
    let mut records = sample_records(0);
    records.splice(1..1, varied_records(400));
    let bytes = write(&records, 1024);
    let chunk_of = chunk_of_each(&bytes);
    let spans = chunk_spans(&bytes);
    assert!(spans.len() >= 5, "{} chunks", spans.len());
    let every_bit = 0..8 * (spans[1].start + layout::HEAD);
    for bit in every_bit.clone() {
        check_flip(&bytes, &records, &chunk_of, bit);
    }
    for byte in every_bit.end / 8..bytes.len() {
        check_flip(&bytes, &records, &chunk_of, 8 * byte + byte % 8);
    }
}

/// One flipped bit at a tenth of a long trace: the rest reads, and the report can say exactly
/// what was lost.
#[test]
fn a_flip_early_in_a_long_trace_loses_one_chunk_of_many() {
    let records = sample_records(200_000);
    let bytes = write(&records, 8 * 1024);
    let spans = chunk_spans(&bytes);
    assert!(spans.len() > 50, "{} chunks", spans.len());
    let mut damaged = bytes.clone();
    let at = bytes.len() / 10;
    damaged[at] ^= 4;
    let mut r = TraceReader::new(&damaged[..]).unwrap();
    let events = r.by_ref().filter(|r| matches!(r, Record::Event(_))).count() as u64;
    let lost: u64 = r.unread().iter().map(|u| u.events.unwrap()).sum();
    assert_eq!(r.unread().len(), 1);
    assert!(
        lost < 200_000 / spans.len() as u64 * 2,
        "{lost} events lost"
    );
    assert_eq!(events + lost, 200_000);
    assert_eq!(r.ending(), Some(&Ending::Complete));
}

/// Cut at any byte, a trace reads every chunk wholly before the cut, and says where it stopped.
#[test]
fn a_cut_at_any_byte_reads_up_to_the_last_whole_chunk() {
    let records = sample_records(300);
    let bytes = write(&records, 512);
    let chunk_of = chunk_of_each(&bytes);
    let spans = chunk_spans(&bytes);
    let first = header_blocks(&bytes).0;
    for cut in 0..=bytes.len() {
        let r = TraceReader::new(&bytes[..cut]);
        if cut < first.end {
            assert!(
                matches!(r, Err(TraceError::TruncatedHeader { .. })),
                "cut {cut}"
            );
            continue;
        }
        let mut r = r.unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let got: Vec<Record> = r.by_ref().collect();
        let whole = spans.iter().filter(|s| s.end <= cut).count();
        let want: Vec<Record> = records
            .iter()
            .zip(&chunk_of)
            .filter(|&(_, &c)| c < whole)
            .map(|(r, _)| r.clone())
            .collect();
        assert_eq!(got, want, "cut {cut}");
        match (r.ending().unwrap(), spans.get(whole)) {
            (Ending::Complete, None) => assert_eq!(cut, bytes.len()),
            (Ending::NoEndRecord { offset }, _) => assert_eq!(*offset, cut as u64),
            (Ending::Truncated { offset, .. }, Some(torn)) => {
                assert_eq!(*offset, torn.start as u64, "cut {cut}");
                assert_eq!(r.unread().len(), 1);
            }
            (other, _) => panic!("cut {cut}: {other:?}"),
        }
    }
}

/// Chunks whose checksums hold but whose insides no writer wrote (a writer's bug): the damaged
/// chunk's records after the damage are lost, and every other chunk reads as written.
#[test]
fn damaged_records_inside_a_chunk_cost_only_that_chunk() {
    let records = varied_records(1000);
    let bytes = write(&records, 2048);
    let chunk_of = chunk_of_each(&bytes);
    let mut rng = Rng(11);
    for k in 0..chunk_spans(&bytes).len() {
        for _ in 0..40 {
            let damaged = layout::edit_chunk(&bytes, k, |raw| {
                let items = layout::items_of(raw);
                let at = match rng.next() % 3 {
                    0 => items.start + (rng.next() as usize) % items.len(),
                    1 => (rng.next() as usize) % raw.len(),
                    _ => (rng.next() as usize) % 28,
                };
                raw[at] = rng.next() as u8;
            });
            let got: Vec<Record> = TraceReader::new(&damaged[..]).unwrap().collect();
            let before: Vec<&Record> = records
                .iter()
                .zip(&chunk_of)
                .filter(|(_, &c)| c < k)
                .map(|(r, _)| r)
                .collect();
            let after: Vec<&Record> = records
                .iter()
                .zip(&chunk_of)
                .filter(|(_, &c)| c > k)
                .map(|(r, _)| r)
                .collect();
            assert!(got.len() >= before.len() + after.len());
            assert_eq!(got[..before.len()].iter().collect::<Vec<_>>(), before);
            assert_eq!(
                got[got.len() - after.len()..].iter().collect::<Vec<_>>(),
                after
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]

    /// Random bytes written over a trace, cut out of it or put into it: reading never panics
    /// and ends, and reading ahead on threads gives what reading on one does.
    #[test]
    fn random_mutation_never_panics_or_hangs(
        edits in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>(), 0u8..4), 1..8),
    ) {
        let mut bytes = write(&varied_records(300), 700);
        for (at, byte, how) in edits {
            if bytes.is_empty() {
                break;
            }
            let at = at % bytes.len();
            match how {
                0 => bytes[at] = byte,
                1 => { bytes.remove(at); }
                2 => bytes.insert(at, byte),
                _ => bytes.truncate(at.max(1)),
            }
        }
        if let Ok(mut r) = TraceReader::new(&bytes[..]) {
            let got: Vec<Record> = r.by_ref().collect();
            proptest::prop_assert!(r.ending().is_some());
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.vtrace");
            std::fs::write(&path, &bytes).unwrap();
            let mut ahead = TraceReader::open(&path).unwrap();
            proptest::prop_assert_eq!(&read_lent(&mut ahead), &got);
            proptest::prop_assert_eq!(ahead.unread(), r.unread());
            proptest::prop_assert_eq!(ahead.ending(), r.ending());
        }
    }
}
