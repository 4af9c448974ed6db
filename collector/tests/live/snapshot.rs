//! A state restored from a snapshot reads the rest of a trace exactly as the state it was taken
//! from: the same live set, origins, flags, sites and totals at the end, whatever the events.

use proptest::prelude::*;
use serde_json::{json, Value};
use vramtrace_collector::analysis::site_name;
use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{
    Header, PyCode, PyFrame, PyStackDef, Record, TraceReader, TraceWriter,
};
use vramtrace_collector::live::LiveState;

use crate::props::{any_event, any_events};
use crate::support::*;

/// What a reader says about the live set at the end, field by field.
fn live_set(s: &LiveState) -> Value {
    let mut objects: Vec<Value> = s
        .live_objects()
        .map(|o| {
            let site = s.site(o.origin.site);
            json!({"object": o, "site": site, "python": s.site_python(o.origin.site)})
        })
        .collect();
    objects.sort_by_key(|v| v.to_string());
    json!({
        "objects": objects,
        "summary": s.summary(),
        "communicators": s.communicators().collect::<Vec<_>>(),
        "contexts": s.contexts().collect::<Vec<_>>(),
        "pools": s.pools().collect::<Vec<_>>(),
        "devices": s.device_accounts().collect::<Vec<_>>(),
        // Holders that held something once and nothing now are history.
        "holders": (s.holders().iter())
            .filter(|h| h.count > 0)
            .map(|h| (h.holder, h.bytes, h.count))
            .collect::<Vec<_>>(),
        "events": s.events(),
        "last_seq": s.last_seq(),
        "steps": s.steps(),
        "sites": s.site_count(),
        "missing": s.losses().missing(),
    })
}

/// `head` applied, then its snapshot written into a trace with `tail` after it, read back into
/// a new state.
fn through_a_snapshot(t: &Trace, head: &[Event], tail: &[Event]) -> LiveState {
    let mut state = LiveState::new();
    for r in t.definitions() {
        state.apply(&r);
    }
    for e in head {
        state.apply_event(e);
    }
    let mut w = TraceWriter::new(Vec::new(), &Header::default())
        .unwrap()
        .with_chunk_bytes(512);
    for r in state.snapshot_records(state.snapshot()) {
        w.write(&r).unwrap();
    }
    for e in tail {
        w.write_event(e).unwrap();
    }
    let bytes = w.finish().unwrap();
    let mut restored = LiveState::new();
    restored.replay(&mut TraceReader::new(&bytes[..]).unwrap());
    restored
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_state_restored_from_a_snapshot_ends_where_the_whole_replay_ends(
        events in prop::collection::vec(any_event(), 1..150),
        cut in 0.0..1.0f64,
    ) {
        let mut t = Trace::new();
        t.stack(7, &[APP + 0x40, NCCL + 0x40]);
        let events = any_events(&mut t, events);
        let cut = ((events.len() as f64) * cut) as usize;
        for e in &events {
            t.state.apply_event(e);
        }
        let restored = through_a_snapshot(&t, &events[..cut], &events[cut..]);
        prop_assert_eq!(live_set(&restored), live_set(&t.state));
    }
}

/// A training loop with step marks, leaking one buffer a step from a stack of its own: cut
/// anywhere, the restored state ends with the same live set, and its objects keep the steps
/// they were made in.
#[test]
fn a_restored_training_loop_keeps_origins_steps_and_sites() {
    let mut t = Trace::new();
    t.stack(3, &[CUDART + 0x10, APP + 0x200]);
    let mut events = Vec::new();
    for step in 0..50u64 {
        events.push(t.make(Api::TracerMarkStep, Op::MarkStep { step }));
        t.stack = 0;
        events.push(t.make(Api::CudaMalloc, alloc(MemKind::Device, 0x7000_0000, 4096)));
        t.stack = 3;
        events.push(t.make(
            Api::CudaMalloc,
            alloc(MemKind::Device, 0x8000_0000 + step * 0x1000, 1 << 20),
        ));
        events.push(t.make(
            Api::CudaFree,
            Op::Free {
                ptr: 0x7000_0000,
                stream: 0,
            },
        ));
    }
    for e in &events {
        t.state.apply_event(e);
    }
    for cut in [1, 77, 100, 199] {
        let restored = through_a_snapshot(&t, &events[..cut], &events[cut..]);
        assert_eq!(live_set(&restored), live_set(&t.state), "cut at {cut}");
        let r = restored.restored().unwrap();
        assert_eq!((r.events, r.complete), (cut as u64, true));
    }
    let restored = through_a_snapshot(&t, &events[..100], &events[100..]);
    let mut steps: Vec<u64> = restored.live_objects().map(|o| o.origin.step).collect();
    steps.sort_unstable();
    assert_eq!(steps, (1..=50).collect::<Vec<_>>());
    assert_eq!(restored.steps(), 50);
}

/// A helper's line reached from two lines of the script is two sites, each named with the line
/// its path came by, in the state that saw the calls and in one restored from a snapshot taken
/// between them.
#[test]
fn a_line_reached_on_two_paths_keeps_its_paths_through_a_snapshot() {
    let mut t = Trace::new();
    t.stack(3, &[CUDART + 0x10, APP + 0x200]);
    let code = |id: u32, function: &str| {
        Record::PyCode(PyCode {
            id,
            file: "train.py".into(),
            function: function.into(),
            first_line: 1,
        })
    };
    t.define(code(1, "make"));
    t.define(code(2, "<module>"));
    for (id, caller) in [(1, 14), (2, 16)] {
        t.define(Record::PyStack(PyStackDef {
            id,
            frames: vec![
                PyFrame { code: 1, line: 6 },
                PyFrame {
                    code: 2,
                    line: caller,
                },
            ],
        }));
    }
    t.stack = 3;
    let mut events = Vec::new();
    for step in 0..4u64 {
        let mut temporary = t.make(Api::CudaMalloc, alloc(MemKind::Device, 0x7000_0000, 4096));
        temporary.py_stack = 1;
        let mut kept = t.make(
            Api::CudaMalloc,
            alloc(MemKind::Device, 0x8000_0000 + step * 0x1000, 1 << 20),
        );
        kept.py_stack = 2;
        let mut free = t.make(
            Api::CudaFree,
            Op::Free {
                ptr: 0x7000_0000,
                stream: 0,
            },
        );
        free.py_stack = 1;
        events.extend([temporary, kept, free]);
    }
    for e in &events {
        t.state.apply_event(e);
    }
    let paths = |s: &LiveState| -> Vec<(u32, Option<u32>)> {
        (0..s.site_count() as u32)
            .map(|id| site_name(s, id))
            .map(|n| (n.source.unwrap().line, n.via.map(|v| v.line)))
            .collect()
    };
    assert_eq!(paths(&t.state), [(6, Some(14)), (6, Some(16))]);
    let restored = through_a_snapshot(&t, &events[..4], &events[4..]);
    assert_eq!(paths(&restored), [(6, Some(14)), (6, Some(16))]);
    assert_eq!(live_set(&restored), live_set(&t.state));
}
