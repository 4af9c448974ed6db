//! A training loop with a planted leak of exactly 1 MiB per step, temporaries freed inside each
//! step, weights kept for the whole run, and a 32 MiB workspace live across two step boundaries:
//! each analysis must find exactly the planted cases.

use vramtrace_collector::analysis::{
    analyze, growth, leaks, peaks, step_info, GrowthConfig, Shape,
};
use vramtrace_collector::format::Record;
use vramtrace_collector::live::{Holder, SampleAxis, StepSource};

use crate::support::*;

pub const WEIGHTS: u64 = site(1);
pub const T1: u64 = site(2);
pub const T2: u64 = site(3);
pub const T3: u64 = site(4);
pub const LEAK: u64 = site(5);
pub const WORKSPACE: u64 = site(6);
pub const STEPS: u64 = 20;

/// The planted workload, with step marks.
pub fn workload() -> Builder {
    let mut b = Builder::new();
    b.malloc(WEIGHTS, 0x1000_0000, 64 * MIB);
    for step in 1..=STEPS {
        b.mark(step);
        if step == 12 {
            b.free(0x4000_0000);
        }
        // The same three addresses every step: pointers reused after free.
        b.malloc(T1, 0x2000_0000, 2 * MIB);
        b.malloc(T2, 0x2100_0000, 512 * KIB);
        b.malloc(T3, 0x2200_0000, MIB);
        b.free(0x2200_0000);
        b.free(0x2100_0000);
        b.free(0x2000_0000);
        if step == 10 {
            b.malloc(WORKSPACE, 0x4000_0000, 32 * MIB);
        }
        b.malloc_async(LEAK, 0x3000_0000 + step * MIB, MIB);
    }
    b
}

const DEVICE0: Holder = Holder::Device { device: 0 };

#[test]
fn leaks_are_the_live_set_and_no_temporary() {
    let state = workload().replay();
    let l = leaks(&state);
    assert_eq!((l.device.count, l.device.bytes), (21, 84 * MIB));
    assert_eq!((l.host.count, l.views), (0, 0));
    let sites: Vec<(String, u64, u64, u64, u64)> = l
        .sites
        .iter()
        .map(|s| {
            (
                s.site.site.clone(),
                s.count,
                s.bytes,
                s.first_step,
                s.last_step,
            )
        })
        .collect();
    assert_eq!(
        sites,
        [
            (name(WEIGHTS), 1, 64 * MIB, 0, 0),
            (name(LEAK), 20, 20 * MIB, 1, 20),
        ]
    );
    let leak = &l.sites[1];
    // Each step is 8 events (9 in steps 10 and 12), after the weights' one event.
    assert_eq!(leak.first_seq, 9);
    assert_eq!(leak.first_time_ns, 9_000);
}

#[test]
fn growth_finds_the_planted_slope_and_the_one_off_peak() {
    let state = workload().replay();
    let g = growth(&state, &GrowthConfig::default());
    assert_eq!(g.axis, SampleAxis::Steps);
    assert_eq!((g.ticks, g.stride), (STEPS, 1));
    let steady: Vec<(String, f64, f64)> = g
        .steady
        .iter()
        .map(|s| {
            let f = s.course.fit.unwrap();
            (s.site.site.clone(), f.slope, f.r2)
        })
        .collect();
    assert_eq!(steady, [(name(LEAK), MIB as f64, 1.0)]);
    let leak = &g.steady[0].course;
    // A zero before it began (step 0), then 1..19 MiB at the starts of steps 2..20.
    assert_eq!(
        (leak.samples, leak.first_bytes, leak.last_bytes),
        (20, 0, 19 * MIB)
    );
    let peaks: Vec<(String, u64)> = g
        .peaks
        .iter()
        .map(|s| (s.site.site.clone(), s.course.max_bytes))
        .collect();
    assert_eq!(peaks, [(name(WORKSPACE), 32 * MIB)]);
    assert!(g.shrinking.is_empty());
    let device = &g.holders[0];
    assert_eq!(device.holder, DEVICE0);
    assert_eq!(device.steady_growth, MIB as f64);
    // The workspace makes the device's own line irregular; the sustained growth still shows.
    assert_ne!(device.course.shape, Shape::Steady);
    // Default threshold: 0.1% of the observed peak (109.5 MiB), so 1 MiB per step alerts.
    assert_eq!(g.device_memory_source, "observed-peak");
    assert_eq!(device.threshold, Some(114_819_072.0 * 0.001));
    assert!(device.alert && g.alert);
}

#[test]
fn the_alert_threshold_is_a_share_of_device_memory() {
    let state = workload().replay();
    let gib = GrowthConfig {
        device_memory: Some(1 << 30),
        horizon_steps: 900,
        horizon_ns: 0,
        ..GrowthConfig::default()
    };
    // 0.1% of 1 GiB is 1073741.8 bytes: 1 MiB (1048576) per step stays below it, and the
    // 941 MiB left after the last step (64 MiB of weights and 19 of the leak live then) last
    // 941 steps, beyond a horizon of 900 (this trace's steps last microseconds: no time horizon).
    let g = growth(&state, &gib);
    assert!(!g.alert && !g.holders[0].alert && !g.steady[0].alert);
    assert_eq!(g.steady.len(), 1, "still reported as steady growth");
    let p = g.holders[0].projection.expect("a projection");
    assert_eq!((p.headroom, p.steps_to_full), (941 * MIB, Some(941.0)));
    assert!(!p.within_horizon);
    // Within the default horizon of 10,000 steps, the same growth alerts.
    let g = growth(
        &state,
        &GrowthConfig {
            device_memory: Some(1 << 30),
            ..GrowthConfig::default()
        },
    );
    assert!(g.alert && g.holders[0].alert && g.steady[0].alert);
    assert!(g.holders[0].projection.unwrap().within_horizon);
    let half = GrowthConfig {
        device_memory: Some(512 << 20),
        ..GrowthConfig::default()
    };
    let g = growth(&state, &half);
    assert!(g.alert && g.steady[0].alert);
    assert_eq!(g.device_memory_source, "given");
}

#[test]
fn the_peak_and_what_was_live_then() {
    let state = workload().replay();
    let p = peaks(&state);
    assert_eq!(p.holders.len(), 1);
    let d = &p.holders[0];
    assert_eq!(d.holder, DEVICE0);
    // Step 11 after its third temporary: weights 64 + leak 10 + workspace 32 + 3.5 MiB.
    assert_eq!(
        d.peak.bytes,
        64 * MIB + 10 * MIB + 32 * MIB + 3 * MIB + 512 * KIB
    );
    assert_eq!((d.peak.count, d.peak.step), (15, 11));
    assert_eq!(d.now_bytes, 84 * MIB);
    let by_site: Vec<(String, u64, u64)> = d
        .by_site
        .iter()
        .map(|s| (s.site.site.clone(), s.count, s.bytes))
        .collect();
    assert_eq!(
        by_site,
        [
            (name(WEIGHTS), 1, 64 * MIB),
            (name(WORKSPACE), 1, 32 * MIB),
            (name(LEAK), 10, 10 * MIB),
            (name(T1), 1, 2 * MIB),
            (name(T3), 1, MIB),
            (name(T2), 1, 512 * KIB),
        ]
    );
}

#[test]
fn without_marks_the_repeating_allocation_gives_the_same_steps() {
    let unmarked = workload().without_marks();
    let first = unmarked.replay();
    assert_eq!(first.marks(), 0);
    let pattern = first
        .step_pattern()
        .expect("a repeating allocation pattern");
    // Every kind repeats once a step (the workspace, made once, does not recur); the first
    // allocation of a step, the most regular, begins it.
    let a = &pattern.anchor;
    assert_eq!((a.event, a.bytes, pattern.steps), ("alloc", 2 * MIB, STEPS));
    assert_eq!(first.site(a.site.unwrap()).unwrap().0.caller, T1);
    assert_eq!((pattern.kinds, pattern.in_step), (4, 4));
    // Before the second replay growth can only be read over time.
    assert_eq!(
        growth(&first, &GrowthConfig::default()).axis,
        SampleAxis::Time
    );
    let state = replay(&unmarked.bytes(), pattern.source());
    assert_eq!(state.steps(), STEPS);
    assert_eq!(step_info(&state).source, "pattern");
    let g = growth(&state, &GrowthConfig::default());
    assert_eq!(g.axis, SampleAxis::Steps);
    assert_eq!(g.steady.len(), 1);
    assert_eq!(g.steady[0].site.site, name(LEAK));
    assert_eq!(g.steady[0].course.fit.unwrap().slope, MIB as f64);
    let l = leaks(&state);
    assert_eq!((l.sites[1].first_step, l.sites[1].last_step), (1, 20));
    // A trace that marks its steps needs no pattern.
    assert!(workload().replay().step_pattern().is_none());
}

/// The unmarked workload's records up to and including the first `events` events.
fn first_events(b: &Builder, events: usize) -> Builder {
    let mut seen = 0;
    let mut first = Builder::new();
    first.records = b
        .records
        .iter()
        .take_while(|r| {
            let more = seen < events;
            seen += usize::from(matches!(r, Record::Event(_)));
            more
        })
        .cloned()
        .collect();
    first
}

/// Steps found in the first part of a trace carry on through the rest: replayed with the
/// pattern of its first 6 steps, the whole trace gets all 20 planted steps, exactly the
/// boundaries the whole trace's own pattern names, and the same analyses as a replay with that.
#[test]
fn a_pattern_found_in_the_first_steps_carries_on_through_the_rest() {
    let unmarked = workload().without_marks();
    // Each step is 7 events (8 with the workspace's malloc at step 10 or its free at step 12),
    // after the weights: 6 steps, and the first allocation of the seventh.
    let prefix = first_events(&unmarked, 1 + 6 * 7 + 1);
    let early = prefix
        .replay()
        .step_pattern()
        .expect("a pattern in 6 steps");
    assert_eq!((early.steps, early.boundaries.len()), (7, 7));
    let whole = unmarked.replay().step_pattern().expect("the whole pattern");
    assert_eq!((whole.steps, whole.boundaries.len()), (STEPS, 20));
    assert_eq!(
        (&early.anchor, early.first_seq),
        (&whole.anchor, whole.first_seq)
    );
    assert!(early.last_seq < whole.last_seq);

    let carried = replay(&unmarked.bytes(), early.source());
    assert_eq!(carried.steps(), STEPS);
    assert_eq!(carried.step_pattern().as_ref(), Some(&whole));
    assert_eq!(carried.unapplied_steps(), None);
    let leak = leaks(&carried);
    let leak = leak
        .sites
        .iter()
        .find(|s| s.site.site == name(LEAK))
        .unwrap();
    assert_eq!((leak.count, leak.first_step, leak.last_step), (20, 1, 20));
    let g = growth(&carried, &GrowthConfig::default());
    assert_eq!(g.steady[0].course.fit.unwrap().slope, MIB as f64);

    // Exactly what a second replay with the whole trace's pattern gives.
    let twice = replay(&unmarked.bytes(), whole.source());
    let analyzed = |state| serde_json::to_value(analyze(state, &GrowthConfig::default())).unwrap();
    assert_eq!(analyzed(&carried), analyzed(&twice));
}

/// Steps found in the first part that the rest of the trace does not keep to are not the
/// trace's: a replay with them says which are.
#[test]
fn a_pattern_the_rest_of_the_trace_departs_from_is_not_the_trace_s() {
    let unmarked = workload().without_marks();
    let whole = unmarked.replay().step_pattern().unwrap();
    // The same anchor from its second occurrence: the first step's boundary is not applied.
    let mut late = whole.clone();
    late.boundaries = whole.boundaries[1..2].into();
    let state = replay(&unmarked.bytes(), late.source());
    assert_eq!(state.steps(), STEPS - 1);
    assert_eq!(state.step_pattern().unwrap().steps, STEPS - 1);
    assert_eq!(state.unapplied_steps(), Some(whole.source()));
    // With marks, marks are the steps.
    let marked = replay(&workload().bytes(), whole.source());
    assert_eq!(marked.unapplied_steps(), Some(StepSource::Marks));
    assert_eq!(workload().replay().unapplied_steps(), None);
    assert_eq!(unmarked.replay().unapplied_steps(), Some(whole.source()));
}

#[test]
fn a_trace_without_steps_is_sampled_per_time_window() {
    let mut b = Builder::new();
    // One 1 MiB allocation every millisecond, never freed, and no step marks.
    b.tick_ns = 1_000_000;
    for i in 0..100u64 {
        b.malloc(LEAK, 0x5000_0000 + i * MIB, MIB);
    }
    let state = replay(&b.bytes(), StepSource::Marks);
    let g = growth(&state, &GrowthConfig::default());
    assert_eq!(g.axis, SampleAxis::Time);
    assert_eq!((g.ticks, g.stride, g.window_ns), (100, 1, Some(1_000_000)));
    let device = &g.holders[0];
    assert_eq!(device.course.shape, Shape::Steady);
    // Window k ends before the (k+1)-th allocation: k MiB, for k = 0..99.
    assert_eq!(device.course.fit.unwrap().slope, MIB as f64);
    assert_eq!(device.course.last_bytes, 99 * MIB);
    assert_eq!(device.steady_growth, MIB as f64);
}

/// Another view of memory (a framework allocator's records, by Python line) adds its own rows,
/// judged on the same steps as the driver's, without counting twice towards the device.
#[test]
fn another_view_s_lines_are_judged_beside_the_driver_s() {
    use vramtrace_collector::analysis::{growth_with, LineSeries, OwnerKind, SiteName, SourceLine};
    let state = workload().replay();
    let source = SourceLine {
        file: "train.py".into(),
        line: 46,
        function: "<module>".into(),
    };
    let site = SiteName::of_line("PyTorch tensors", OwnerKind::Torch, source);
    // 512 KiB a step kept by the allocator from step 5 on, on device 0.
    let points = (0..STEPS)
        .map(|k| (k, k.saturating_sub(5) * 512 * KIB))
        .collect();
    let line = LineSeries {
        site,
        holder: DEVICE0,
        view: "allocator",
        points,
        history_from: None,
        now_bytes: None,
    };
    let g = growth_with(&state, &GrowthConfig::default(), vec![line]);
    let steady: Vec<(&str, f64, Option<u64>)> = g
        .steady
        .iter()
        .map(|s| (s.view, s.course.rate, s.course.phases.growth_from))
        .collect();
    assert_eq!(
        steady,
        [
            ("driver", MIB as f64, Some(0)),
            ("allocator", (512 * KIB) as f64, Some(5))
        ]
    );
    // The device's sustained growth is the driver's view: another view's rows name lines.
    assert_eq!(g.holders[0].steady_growth, MIB as f64);
}
