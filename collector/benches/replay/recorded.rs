//! The bench's recorded mix (`VRAMTRACE_BENCH_MIX=recorded:DIR`): the events of the traces under
//! DIR (real programs' traces, e.g. a GPU run's), one trace after the other and again until the
//! trace has the events asked for. Each copy's sequence numbers and times follow the last copy's,
//! and each source trace's stack, module and Python ids are kept apart from the others'. The
//! things a copy names (addresses, handles, communicators) are its source's: what one copy of a
//! program leaves live, the next copy of it takes over, so the live set stays one program's.

use std::path::{Path, PathBuf};

use vramtrace_collector::event::Event;
use vramtrace_collector::format::{Record, TraceReader, TraceWriter};

/// The traces under `dir`, in name order.
fn traces(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "vtrace") {
                found.push(p);
            }
        }
    }
    found.sort();
    found
}

/// One source trace: its definitions (stacks, modules, Python code and stacks, ids moved apart)
/// and its events.
struct Source {
    definitions: Vec<Record>,
    events: Vec<Event>,
}

fn load(path: &Path, index: u32) -> Source {
    let ids = index * 1_000_000;
    let mut source = Source {
        definitions: Vec::new(),
        events: Vec::new(),
    };
    let reader = TraceReader::new(std::io::BufReader::new(
        std::fs::File::open(path).expect("open"),
    ));
    for record in reader.expect("a trace") {
        match record {
            Record::Event(mut e) => {
                e.stack += ids * u32::from(e.stack != 0);
                e.py_stack += ids * u32::from(e.py_stack != 0);
                source.events.push(e);
            }
            Record::Stack(mut s) => {
                s.id += ids;
                source.definitions.push(Record::Stack(s));
            }
            Record::Module(mut m) => {
                m.id += ids;
                source.definitions.push(Record::Module(m));
            }
            Record::PyCode(mut c) => {
                c.id += ids;
                source.definitions.push(Record::PyCode(c));
            }
            Record::PyStack(mut s) => {
                s.id += ids;
                s.frames.iter_mut().for_each(|f| f.code += ids);
                source.definitions.push(Record::PyStack(s));
            }
            _ => {}
        }
    }
    source
}

/// Writes `events` events of the recorded mix of the traces under `dir` with `writer`.
pub fn generate<W: std::io::Write>(writer: &mut TraceWriter<W>, dir: &Path, events: u64) {
    let sources: Vec<Source> = traces(dir)
        .iter()
        .enumerate()
        .map(|(i, p)| load(p, i as u32 + 1))
        .filter(|s| !s.events.is_empty())
        .collect();
    assert!(
        !sources.is_empty(),
        "no trace with events under {}",
        dir.display()
    );
    for s in &sources {
        for d in &s.definitions {
            writer.write(d).expect("write");
        }
    }
    let mut written = 0u64;
    let (mut seq_base, mut time_base) = (0u64, 0u64);
    while written < events {
        for s in &sources {
            let (first_time, last_time) = (
                s.events[0].time_ns,
                s.events.iter().map(|e| e.time_ns).max().unwrap_or(0),
            );
            let last_seq = s.events.iter().map(|e| e.seq).max().unwrap_or(0);
            for e in &s.events {
                if written == events {
                    return;
                }
                let mut e = e.clone();
                e.seq += seq_base;
                e.time_ns = time_base + e.time_ns.saturating_sub(first_time);
                writer.write_event(&e).expect("write");
                written += 1;
            }
            seq_base += last_seq + 1;
            time_base += last_time.saturating_sub(first_time) + 1;
        }
    }
}
