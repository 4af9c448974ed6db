//! Origins, owner modules, call sites, and the tracer's own records.

use vramtrace_collector::event::{Api, MemKind, Op};
use vramtrace_collector::format::{End, Lookup, Record, Stats};
use vramtrace_collector::live::Category;

use crate::support::*;

#[test]
fn objects_remember_their_step_and_origin() {
    let mut t = Trace::new();
    t.malloc(0x1000, 1);
    t.ok(Api::TracerMarkStep, Op::MarkStep { step: 1 });
    t.ok(Api::TracerMarkStep, Op::MarkStep { step: 2 });
    t.thread = 7;
    t.caller = APP + 0x222;
    t.malloc(0x2000, 1);
    let o = find(&t.state, Category::Device, 0x2000).unwrap();
    assert_eq!(o.origin.step, 2);
    assert_eq!(o.origin.thread, 7);
    assert_eq!(o.origin.caller, APP + 0x222);
    assert_eq!(o.origin.module, Some(APP_ID));
    assert_eq!(o.origin.seq, 4);
    assert_eq!(o.origin.time_ns, 4000);
    assert_eq!(o.origin.api, Api::CudaMalloc);
    assert_eq!(
        find(&t.state, Category::Device, 0x1000)
            .unwrap()
            .origin
            .step,
        0
    );
    assert_eq!(t.state.steps(), 2);
}

#[test]
fn the_owner_is_the_first_frame_outside_cuda() {
    let mut t = Trace::new();
    t.stack(
        3,
        &[LIBCUDA + 0x10, CUDART + 0x20, CUBLAS + 0x30, APP + 0x40],
    );
    t.caller = CUDART + 0x5;
    t.stack = 3;
    t.ok(Api::CuMemAlloc, alloc(MemKind::Device, 0x1000, 64));
    t.stack = 0;
    t.ok(Api::CuMemAlloc, alloc(MemKind::Device, 0x2000, 32));
    assert_eq!(
        find(&t.state, Category::Device, 0x1000)
            .unwrap()
            .origin
            .module,
        Some(CUBLAS_ID)
    );
    assert_eq!(
        find(&t.state, Category::Device, 0x2000)
            .unwrap()
            .origin
            .module,
        Some(2)
    );
    let modules: Vec<_> = t
        .state
        .summary()
        .by_module
        .into_iter()
        .map(|m| (m.name.unwrap(), m.bytes))
        .collect();
    assert_eq!(
        modules,
        vec![
            ("libcublas.so.13".to_string(), 64),
            ("libcudart.so.13".to_string(), 32)
        ]
    );
    let sites = t.state.by_call_site();
    assert_eq!(sites[0].stack, 3);
    assert_eq!(sites[0].location.to_string(), "libcublas.so.13+0x30");
    assert_eq!(sites[1].caller, CUDART + 0x5);
}

#[test]
fn call_sites_group_live_objects() {
    let mut t = Trace::new();
    t.caller = APP + 0x10;
    t.malloc(0x1000, 100);
    t.malloc(0x2000, 100);
    t.caller = APP + 0x20;
    t.malloc(0x3000, 1000);
    t.ok(Api::CudaMallocHost, alloc(MemKind::HostPinned, 0x9000, 7));
    t.caller = APP + 0x30;
    t.malloc(0x4000, 5);
    t.free(0x4000);
    let sites = t.state.by_call_site();
    let got: Vec<_> = sites
        .iter()
        .map(|s| {
            (
                s.caller,
                s.count,
                s.bytes,
                s.host_bytes,
                s.first_seq,
                s.last_seq,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (APP + 0x20, 2, 1000, 7, 3, 4),
            (APP + 0x10, 2, 200, 0, 1, 2)
        ]
    );
    assert_eq!(sites[0].location.to_string(), "app+0x20");
    assert_eq!(sites[0].module_name.as_deref(), Some("app"));
}

#[test]
fn tracer_records_are_kept() {
    let mut t = Trace::new();
    t.state.apply(&Record::Stats(Stats {
        dropped: 3,
        events: 10,
        ..Stats::default()
    }));
    assert_eq!(t.state.stats().unwrap().dropped, 3);
    t.state.apply(&Record::Lookup(Lookup {
        via: "cuGetProcAddress_v2".into(),
        symbol: "cuMemAlloc".into(),
        cuda_version: 12000,
        flags: 0,
        reason: "v1 ABI".into(),
    }));
    t.state
        .apply(&Record::Warning("bad VRAMTRACE_STACK_DEPTH".into()));
    t.state.apply(&Record::End(End {
        time_ns: 9,
        stats: Stats {
            dropped: 4,
            late: 1,
            events: 12,
            ..Stats::default()
        },
        reason: "exit".into(),
    }));
    assert_eq!(t.state.stats().unwrap().dropped, 4);
    assert_eq!(t.state.end().unwrap().reason, "exit");
    assert_eq!(t.state.lookups()[0].symbol, "cuMemAlloc");
    assert_eq!(
        t.state.warnings(),
        ["bad VRAMTRACE_STACK_DEPTH".to_string()]
    );
}
