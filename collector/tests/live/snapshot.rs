//! A state restored from a snapshot reads the rest of a trace exactly as the state it was taken
//! from: the same live set, origins, flags, sites and totals at the end, whatever the events.

use proptest::prelude::*;
use serde_json::{json, Value};
use vramtrace_collector::event::{Api, Event, MemKind, Op};
use vramtrace_collector::format::{Header, TraceReader, TraceWriter};
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
