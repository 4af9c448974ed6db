//! wl_driver: the driver API with VMM, pools and IPC; one orphan of each kind it plants, and the
//! address space reserved against what is mapped in it (tests/standins/README.md, "wl_driver").

use vramtrace_collector::analysis::{
    analyze, fragmentation, orphans, FindingClass, GrowthConfig, OrphanKind,
};
use vramtrace_collector::analysis::{AddressSpace, PhysicalMemory, ReservationUse};
use vramtrace_collector::event::Api::*;
use vramtrace_collector::event::Event;
use vramtrace_collector::live::{Category, Totals};
use vramtrace_tests::source::workload_source;
use vramtrace_tests::trace::Hex;
use vramtrace_tests::traced::Workload;

use super::{at, lines_in, the_event};
use crate::MIB;

/// Device memory live at exit (README: D1 + D2 + D3 + V1 + V3 + A1 + AR1).
const LIVE: u64 = 8712192;

// One orphan of each kind wl_driver can plant: V3, a physical handle never mapped; A1, left
// outstanding when its pool was destroyed; V1's mapping, whose reservation was freed under it
// (the mapping is the orphan, not V1's released handle, and it holds no bytes of its own). Each
// is named by the line that made it.
captest!(wl_driver_one_orphan_of_each_kind, |dir| {
    let trace = Workload::new("wl_driver").run_traced(dir).single_trace();
    let state = &trace.state;
    let src = workload_source("wl_driver.c");
    let o = orphans(state);
    use OrphanKind::*;
    assert_eq!(
        o.total,
        Totals {
            count: 3,
            bytes: 3 * MIB
        }
    );
    let kinds: Vec<_> = o
        .by_kind
        .iter()
        .map(|k| (k.kind, k.count, k.bytes))
        .collect();
    assert_eq!(
        kinds,
        [
            (PoolDestroyed, 1, MIB),
            (UnmappedHandle, 1, 2 * MIB),
            (MappingWithoutReservation, 1, 0)
        ]
    );
    let got: Vec<_> = (o.objects.iter())
        .map(|x| {
            assert_eq!(
                (x.kinds.as_slice(), x.device, x.communicator),
                (&[x.kind][..], 0, None)
            );
            let lines = lines_in(state, x.site.caller, x.site.stack, &src);
            (
                x.kind,
                x.category,
                Hex(x.address),
                x.bytes,
                x.device_bytes,
                lines,
            )
        })
        .collect();
    let create = ("create", "CALL(0, cuMemCreate(&h, size, &prop, 0)");
    let v3 = at(&src, &[create, ("main", "v3 = create(2 * MiB, 0, 0);")]);
    let a1 = at(
        &src,
        &[("main", "cuMemAllocFromPoolAsync(&a1, 1 * MiB, p1, NULL)")],
    );
    let map = at(&src, &[("main", "cuMemMap(va1, 2 * MiB, 0, v1, 0)")]);
    use Category::*;
    assert_eq!(
        got,
        [
            (UnmappedHandle, Physical, Hex(0x1002), 2 * MIB, 2 * MIB, v3),
            (PoolDestroyed, Async, Hex(0x7000_0014_f000), MIB, MIB, a1),
            (
                MappingWithoutReservation,
                Mapping,
                Hex(0x6000_0000_0000),
                2 * MIB,
                0,
                map
            ),
        ]
    );
});

/// One reservation, or none (`reserved` 0), with what is mapped in it.
fn space(at: u64, reserved: u64, mapped: u64, largest_gap: u64) -> AddressSpace {
    let partly = (mapped < reserved).then_some(ReservationUse {
        address: at,
        size: reserved,
        mapped,
        largest_gap,
    });
    AddressSpace {
        reservations: u64::from(reserved > 0),
        reserved_bytes: reserved,
        mapped_bytes: mapped,
        unmapped_bytes: reserved - mapped,
        by_reservation: partly.into_iter().collect(),
    }
}

fn physical(handles: u64, bytes: u64, mapped_bytes: u64) -> PhysicalMemory {
    let unmapped_bytes = bytes - mapped_bytes;
    PhysicalMemory {
        handles,
        bytes,
        mapped_bytes,
        unmapped_bytes,
    }
}

// wl_driver's VMM part, reserved against mapped, as it goes: V1 and V2 mapped into the first
// half of the 8 MiB reservation; V2 unmapped (its handle still held); V5 filling the 4 MiB
// reservation, after the first was freed with V1 still mapped (outside any reservation now)
// and V3 created and never mapped; at the end V1 and V3 alone.
captest!(wl_driver_reserved_against_mapped, |dir| {
    let trace = Workload::new("wl_driver").run_traced(dir).single_trace();
    let (va1, va2) = (0x6000_0000_0000, 0x6000_0080_0000);
    let after = |e: &Event| fragmentation(&trace.state_after(e.seq));
    let f = after(the_event(&trace, CuMemMap, va1 + 2 * MIB));
    assert_eq!(f.address_space, space(va1, 8 * MIB, 4 * MIB, 4 * MIB));
    assert_eq!(f.physical, physical(2, 4 * MIB, 4 * MIB));
    let f = after(the_event(&trace, CuMemUnmap, va1 + 2 * MIB));
    assert_eq!(f.address_space, space(va1, 8 * MIB, 2 * MIB, 6 * MIB));
    assert_eq!(f.physical, physical(2, 4 * MIB, 2 * MIB));
    let f = after(the_event(&trace, CuMemMap, va2));
    assert_eq!(f.address_space, space(va2, 4 * MIB, 4 * MIB, 0));
    assert_eq!(f.physical, physical(3, 8 * MIB, 6 * MIB));
    let f = fragmentation(&trace.state);
    assert_eq!(f.address_space, space(0, 0, 0, 0));
    assert_eq!(f.physical, physical(2, 4 * MIB, 2 * MIB));
});

// wl_driver empties the default pool (cuMemPoolTrimTo(default, 0) once its blocks are freed; the
// last one was allocated from it by its handle): no pool holds unused memory, and the only
// device memory serving nothing is V3's 2 MiB. The driver agrees: its last cuMemGetInfo in the
// transcript counts exactly the live bytes as used, no cached block.
captest!(wl_driver_trimmed_default_pool_holds_nothing, |dir| {
    let run = Workload::new("wl_driver").run_traced(dir);
    let stdout = run.stdout();
    let last = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("cuMemGetInfo_v2 = 0"));
    assert!(
        last.is_some_and(|l| l.ends_with(&format!(" used={LIVE}"))),
        "{last:?}"
    );
    let f = fragmentation(&run.single_trace().state);
    let free: Vec<_> = f
        .pools
        .iter()
        .map(|p| (Hex(p.pool.pool), p.free_bytes))
        .collect();
    assert!(
        free.iter().all(|p| p.1 == 0),
        "pools holding unused memory: {free:?}"
    );
    assert_eq!(f.unusable_bytes, 2 * MIB, "{:#?}", f.pools);
    assert_eq!(f.unusable_share, Some(2.0 * MIB as f64 / LIVE as f64));
});

// One cause, one finding: each byte live at exit is in at most one finding. V3 (never mapped)
// is its orphan finding, not also a one-off rise that stayed; V1's handle, which only the
// orphaned mapping reaches, is that mapping's finding, not also memory held until exit. A
// one-off, where the time windows show one (AR1's or D1's rise that stayed, or V4's peak that
// fell, holding nothing at the end), is another; what no finding names is the teardown note.
captest!(wl_driver_names_each_byte_in_one_finding, |dir| {
    let trace = Workload::new("wl_driver").run_traced(dir).single_trace();
    let a = analyze(&trace.state, &GrowthConfig::default());
    let src = workload_source("wl_driver.c");
    let found: Vec<_> = (a.diagnosis.iter())
        .map(|f| {
            let site = f.site.as_ref().unwrap();
            let line = lines_in(&trace.state, site.caller, site.stack, &src)[0].1;
            // What it holds at the end: a one-off says it apart from its rise.
            let held = match f.class {
                FindingClass::Peak => f.evidence.live_at_end.unwrap(),
                _ => f.evidence.bytes,
            };
            (f.class, line, held)
        })
        .collect();
    let line = |text: &str| vramtrace_tests::source::line_of(&src, text);
    use FindingClass::*;
    let orphans = [
        (
            Orphan,
            line("cuMemAllocFromPoolAsync(&a1, 1 * MiB, p1, NULL)"),
            MIB,
        ),
        (
            Orphan,
            line("CALL(0, cuMemCreate(&h, size, &prop, 0)"),
            2 * MIB,
        ),
        // The mapping holds no device memory of its own: V1's 2 MiB, which it maps.
        (Orphan, line("cuMemMap(va1, 2 * MiB, 0, v1, 0)"), 0),
    ];
    assert_eq!(found[..3], orphans, "{found:?}");
    // A one-off, where the time windows show one, then the teardown note, last.
    let rest: Vec<_> = found[3..].iter().map(|f| f.0).collect();
    assert!(
        rest == [Peak, TeardownOnly] || rest == [TeardownOnly],
        "{found:?}"
    );
    // What the findings hold at the end and the 2 MiB the orphaned mapping maps add up to what
    // was live at exit, none counted twice.
    let held: u64 = found.iter().map(|f| f.2).sum();
    assert_eq!(held + 2 * MIB, LIVE, "{found:?}");
});

// Nothing grows on either device: the growth gate's line names device 0, whose memory the run
// is about (8.3 MiB live at exit), not the last device listed (it named device 1).
captest!(wl_driver_gate_names_the_device_that_holds_memory, |dir| {
    let trace = Workload::new("wl_driver").run_traced(dir).single_trace();
    let out = vramtrace_tests::traced::report_of(&trace.path, &["--fail-on", "growth"]);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = (text.lines())
        .find(|l| l.contains(" growth (alert) "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(" growth (alert)   device 0: "), "{line}");
});
