//! wl_train: a training loop of 20 marked steps whose only growth is a 1 MiB history tensor per
//! step (tests/standins/README.md, "wl_train").

use std::collections::BTreeSet;

use vramtrace_collector::analysis::{
    analyze, growth, Analysis, Growth, GrowthConfig, OrphanKind, Shape,
};
use vramtrace_collector::analysis::{AddressSpace, PhysicalMemory};
use vramtrace_collector::event::Api::*;
use vramtrace_collector::event::Op;
use vramtrace_collector::live::{Category, Holder, SampleAxis, Totals};
use vramtrace_tests::source::{standin_source, workload_source};
use vramtrace_tests::trace::{Call, Trace};
use vramtrace_tests::traced::Workload;

use super::{at, lines_in};
use crate::{vramtrace_json, MIB};

/// The peak on device 0, reached by the last history tensor: 20 MiB of history, the 4 MiB
/// registered buffer, 2 caching segments of 2 MiB, the 4 MiB cuBLAS workspace, and NCCL's 2 MiB
/// proxy handle, 1 MiB all-reduce buffer and 2 channel buffers of 4096.
const PEAK: u64 = 35 * MIB + 8192;

/// The device size the tracer sampled with `cuMemGetInfo` (`Op::DeviceMemory`).
fn sampled_total(trace: &Trace) -> u64 {
    let totals: BTreeSet<u64> = (trace.samples.iter())
        .filter_map(|e| match e.op {
            Op::DeviceMemory { total, .. } => Some(total),
            _ => None,
        })
        .collect();
    assert_eq!(totals.len(), 1, "one device size: {totals:?}");
    totals.into_iter().next().unwrap()
}

/// wl_train traced, with every analysis at its end.
fn analyzed(dir: &std::path::Path) -> (Trace, Analysis) {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let analysis = analyze(&trace.state, &GrowthConfig::default());
    (trace, analysis)
}

fn device_0(g: &Growth) -> (f64, Option<f64>, bool) {
    let h = g
        .holders
        .iter()
        .find(|h| h.holder == Holder::Device { device: 0 });
    let h = h.expect("device 0 in the growth analysis");
    (h.steady_growth, h.threshold, h.alert)
}

// One sample per step boundary (x = k: after step k; the last step never ends, so 20 samples,
// x = 0..19). Only the history site grows, by exactly 1 MiB per step from 0; every other site is
// flat (activations live within a step). The site is fw_alloc's cudaMallocAsync called from
// main's history line. The default threshold comes from the observed peak; against the
// device's real 1 GiB (the tracer's samples), 1 MiB per step is under 0.1%: no alert.
captest!(wl_train_growth_is_the_history_at_one_mib_per_step, |dir| {
    let (trace, a) = analyzed(dir);
    let state = &trace.state;
    let s = &a.steps;
    assert_eq!(
        (s.source, s.steps, s.marks, s.pattern.clone()),
        ("marks", 20, 20, None)
    );
    let g = &a.growth;
    assert_eq!((g.axis, g.ticks, g.stride), (SampleAxis::Steps, 20, 1));
    assert_eq!(g.steady.len(), 1, "{:#?}", g.steady);
    assert!(g.peaks.is_empty() && g.shrinking.is_empty(), "{g:#?}");
    let site = &g.steady[0];
    assert_eq!(
        (site.holder, site.course.shape),
        (Holder::Device { device: 0 }, Shape::Steady)
    );
    let fit = site.course.fit.expect("a line");
    assert_eq!(
        (fit.slope, fit.intercept, fit.r2, fit.samples),
        (1048576.0, 0.0, 1.0, 20)
    );
    let c = &site.course;
    assert_eq!((c.samples, c.first_bytes, c.last_bytes), (20, 0, 19 * MIB));
    let (fw, train) = (
        standin_source("framework/fw_alloc.c"),
        workload_source("wl_train.c"),
    );
    let (caller, stack) = (site.site.caller, site.site.stack);
    let call = "if (cudaMallocAsync(&p, size, NULL) == cudaSuccess)";
    assert_eq!(
        lines_in(state, caller, stack, &fw),
        at(&fw, &[("fw_alloc", call)])
    );
    let history = "history[step] = alloc(1 * MiB, FW_MODE_ASYNC);";
    assert_eq!(
        lines_in(state, caller, stack, &train),
        at(&train, &[("main", history)])
    );

    // The device's size comes from the tracer's own cuMemGetInfo samples: 1 GiB, on which 1 MiB
    // per step is 0.098%, just under the 0.1% alert; but at that rate the 990 MiB left after the
    // last step (PEAK less the last history tensor was live then) are gone in 989 steps, well
    // within the horizon of 10,000: it alerts on the projection.
    let total = sampled_total(&trace);
    assert_eq!(total, 1 << 30, "the stand-in's default device memory");
    assert_eq!(
        (g.device_memory, g.device_memory_source),
        (Some(total), "sampled")
    );
    assert_eq!(device_0(g), (1048576.0, Some(total as f64 * 0.001), true));
    let headroom = total - (PEAK - MIB);
    let projection = g.holders[0].projection.expect("a projection");
    assert_eq!(
        (projection.headroom, projection.steps_to_full),
        (headroom, Some(headroom as f64 / MIB as f64))
    );
    assert!(projection.within_horizon && site.alert && g.alert);
    // With a horizon of 900 steps (and none in time: the stand-in's steps last microseconds),
    // 1 MiB a step no longer alerts.
    let config = GrowthConfig {
        device_memory: Some(total),
        horizon_steps: 900,
        horizon_ns: 0,
        ..GrowthConfig::default()
    };
    let g = growth(state, &config);
    assert_eq!(
        (g.device_memory, g.device_memory_source),
        (Some(total), "given")
    );
    assert_eq!(device_0(&g), (1048576.0, Some(total as f64 * 0.001), false));
    assert_eq!(g.steady[0].course.slope(), 1048576.0);
    assert!(!g.steady[0].alert && !g.alert, "{g:#?}");
});

// On a 512 MiB device the same growth is 0.2% per step: `report --device-memory` with the size
// the tracer sampled alerts, on the device and on the history site.
captest!(wl_train_growth_alerts_on_a_smaller_device, |dir| {
    let w = Workload::new("wl_train").env("STANDIN_DEVICE_MEM", "512M");
    let trace = w.run_traced(dir).single_trace();
    assert_eq!(sampled_total(&trace), 512 * MIB);
    let path = trace.path.display().to_string();
    let r = vramtrace_json(["report", "--json", "--device-memory", "512MiB", &path]);
    let g = &r["analysis"]["growth"];
    assert_eq!(g["device_memory"].as_u64(), Some(512 * MIB));
    assert_eq!(
        (&g["device_memory_source"], &g["alert"]),
        (&"given".into(), &true.into())
    );
    let holder = &g["holders"][0];
    assert_eq!(
        (&holder["memory"], &holder["alert"]),
        (&"device".into(), &true.into())
    );
    assert_eq!(
        holder["threshold"].as_f64(),
        Some(512.0 * MIB as f64 * 0.001)
    );
    let steady = g["steady"].as_array().unwrap();
    assert_eq!(steady.len(), 1);
    assert_eq!(steady[0]["fit"]["slope"].as_f64(), Some(1048576.0));
    assert_eq!(steady[0]["module_name"], "libtorch_standin.so");
    assert_eq!(steady[0]["alert"], true);
});

// Leaks are exactly the 20 history tensors, made in steps 1 to 20 at main's history line
// (activations, caching segments, the cuBLAS workspace and NCCL's memory are all freed), and
// the registration made at main's ncclCommRegister line, which holds no memory of its own.
captest!(wl_train_leaks_are_the_history_and_the_registration, |dir| {
    let (trace, a) = analyzed(dir);
    let train = workload_source("wl_train.c");
    let l = &a.leaks;
    let history = Totals {
        count: 20,
        bytes: 20 * MIB,
    };
    assert_eq!((l.device, l.host, l.views), (history, Totals::default(), 1));
    let sites: Vec<_> = (l.sites.iter())
        .map(|s| {
            let lines = lines_in(&trace.state, s.site.caller, s.site.stack, &train);
            let kinds: Vec<Category> = s.categories.iter().copied().collect();
            (
                s.count,
                s.bytes,
                s.orphans,
                s.first_step,
                s.last_step,
                kinds,
                lines,
            )
        })
        .collect();
    let history = "history[step] = alloc(1 * MiB, FW_MODE_ASYNC);";
    let register = "sym(\"ncclCommRegister\"))(comm, regbuf";
    let (async_, registration) = (vec![Category::Async], vec![Category::Registration]);
    let want = [
        (
            20,
            20 * MIB,
            0,
            1,
            20,
            async_,
            at(&train, &[("main", history)]),
        ),
        (
            1,
            0,
            1,
            0,
            0,
            registration,
            at(&train, &[("main", register)]),
        ),
    ];
    assert_eq!(sites, want);
    assert!(l.sites.iter().all(|s| s.host_bytes == 0));
});

// The only orphan is the registration of the 4 MiB buffer: freed before it was deregistered,
// on a communicator destroyed since. Nothing else is orphaned, failed or anomalous.
captest!(wl_train_only_orphan_is_the_registration, |dir| {
    let (trace, a) = analyzed(dir);
    let o = &a.orphans;
    assert_eq!(o.total, Totals { count: 1, bytes: 0 });
    let kinds: Vec<_> = o
        .by_kind
        .iter()
        .map(|k| (k.kind, k.count, k.bytes))
        .collect();
    use OrphanKind::{RegistrationBufferGone as Buffer, RegistrationCommunicatorGone as Comm};
    assert_eq!(kinds, [(Buffer, 1, 0)]);
    let reg = &o.objects[0];
    assert_eq!(
        (reg.kind, reg.kinds.as_slice()),
        (Buffer, &[Buffer, Comm][..])
    );
    let what = (reg.category, reg.bytes, reg.device_bytes, reg.step);
    assert_eq!(what, (Category::Registration, 4 * MIB, 0, 0));
    let Op::CommInit { comm, .. } = trace.of(NcclCommInitRank)[0].op else {
        panic!("ncclCommInitRank without CommInit")
    };
    assert_eq!(reg.communicator, Some(comm));
    let failed = (a.ooms.total, a.anomalies.total, a.anomalies.dropped_events);
    assert_eq!(failed, (0, 0, Some(0)));
});

// The device peaks when the last history tensor is made, in step 20, with everything of
// `PEAK` live; host memory peaks when NCCL's proxy thread adds its 64 KiB to init's 4096. At
// the end the default pool still holds the freed 4 MiB registered buffer (the driver counts it
// used: 24 MiB, README), the only memory serving nothing.
captest!(wl_train_peaks_and_the_pools_reserve, |dir| {
    let (trace, a) = analyzed(dir);
    let mut history = trace.of(CudaMallocAsync).into_iter().rev();
    let last = history
        .find(|e| Call::of(e).size == MIB)
        .expect("the history");
    let host = trace.of(CuMemHostAlloc)[1];
    let holders: Vec<_> = (a.peaks.holders.iter())
        .map(|h| {
            (
                h.holder,
                h.peak.bytes,
                h.peak.count,
                h.peak.event,
                h.peak.step,
            )
        })
        .collect();
    let device = Holder::Device { device: 0 };
    let want = [
        (device, PEAK, 28, trace.ordinal(last.seq), 20),
        (Holder::Host, 69632, 2, trace.ordinal(host.seq), 0),
    ];
    assert_eq!(holders, want);
    let now: Vec<u64> = a.peaks.holders.iter().map(|h| h.now_bytes).collect();
    assert_eq!(now, [20 * MIB, 0]);
    let mut by_site: Vec<_> = (a.peaks.holders[0].by_site.iter())
        .map(|s| {
            (
                s.site.module_name.clone().unwrap_or_default(),
                s.count,
                s.bytes,
            )
        })
        .collect();
    by_site.sort();
    let (fw, nccl, blas) = ("libtorch_standin.so", "libnccl.so.2", "libcublas.so.13");
    // NCCL's proxy and channels, made by one call of the program's: one place.
    let nccl_sites = [(nccl, 1, MIB), (nccl, 3, 2 * MIB + 8192)];
    let fw_sites = [
        (fw, 1, 2 * MIB),
        (fw, 1, 2 * MIB),
        (fw, 1, 4 * MIB),
        (fw, 20, 20 * MIB),
    ];
    let want = [(blas, 1, 4 * MIB)]
        .into_iter()
        .chain(nccl_sites)
        .chain(fw_sites);
    let want: Vec<_> = want.map(|(m, n, b)| (m.to_string(), n, b)).collect();
    assert_eq!(by_site, want);

    let f = &a.fragmentation;
    assert_eq!(
        f.address_space,
        AddressSpace::default(),
        "NCCL's proxy range is freed"
    );
    assert_eq!(f.physical, PhysicalMemory::default());
    let pools: Vec<_> = (f.pools.iter())
        .map(|p| {
            (
                p.pool.pool,
                p.pool.device,
                p.pool.in_use,
                p.pool.allocations,
                p.pool.trims,
            )
        })
        .collect();
    assert_eq!(
        pools,
        [(0, 0, 20 * MIB, 20, 0)],
        "the default pool of device 0"
    );
    let p = &f.pools[0];
    let reserve = (
        p.pool.high_water,
        p.pool.high_water_since_trim,
        p.free_bytes,
    );
    assert_eq!(reserve, (24 * MIB, 24 * MIB, 4 * MIB));
    assert_eq!(
        (f.unusable_bytes, f.unusable_share),
        (4 * MIB, Some(4.0 / 24.0))
    );
});

// The report's totals count orphaned device memory; wl_train's one orphan, a registration, holds
// none: the totals' line says it is there, as FINDINGS counts it ("orphaned 0 B in 0 objects"
// beside "1 orphan").
captest!(the_live_totals_count_every_orphan, |dir| {
    let trace = Workload::new("wl_train").run_traced(dir).single_trace();
    let out = vramtrace_tests::traced::report_of(&trace.path, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\n  orphans        1 orphan, holding 0 B of device memory: ")
            && text.contains(
                "\n  orphaned       0 B in 0 objects; and 1 orphan holding no device memory of its \
                 own\n"
            ),
        "{text}"
    );
    // The drop after the last step is net: its history tensor made, the 15 MiB torn down.
    assert!(
        text.contains(
            "\n  phases         device 0: steady from step 1, 14.0 MiB less live at the end than \
             at the steady state's last sample\n"
        ),
        "{text}"
    );
});
