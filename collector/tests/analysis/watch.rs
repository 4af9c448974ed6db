//! The live analysis judged as the tracer's writer judges it: records applied one by one, a
//! judgement at each step. A planted leak alerts once, on its device, at the step its growth has
//! lasted the confirmation; a warm-up and one-off peaks never alert.

use vramtrace_collector::analysis::{GrowthConfig, Judgement, Reason, Watch, WatchConfig};
use vramtrace_collector::event::Op;
use vramtrace_collector::format::{Attachment, Record};
use vramtrace_collector::live::SampleAxis;

use crate::support::*;

/// Judges at every step of `b` (a judgement is due whenever a step was sampled); returns the
/// step and device of each alert raised, and the watch.
fn judged_at_every_step(b: &Builder, config: WatchConfig) -> (Vec<(u64, i32)>, Watch) {
    judged_with_stride(b, config, 1)
}

/// [`judged_at_every_step`], judging at most every `stride`-th step.
fn judged_with_stride(b: &Builder, config: WatchConfig, stride: u64) -> (Vec<(u64, i32)>, Watch) {
    let mut watch = Watch::new(WatchConfig {
        every_ns: 0,
        ..config
    });
    watch.set_stride(stride);
    let mut raised = Vec::new();
    for r in &b.records {
        if let Record::Event(e) = r {
            watch.apply_event(e);
            if matches!(e.op, Op::MarkStep { .. }) && watch.due(e.time_ns) {
                let j = watch.judge(e.time_ns);
                raised.extend(j.raised.iter().map(|&d| (j.steps, d)));
            }
        } else {
            watch.apply(r);
        }
    }
    (raised, watch)
}

/// 1 GiB of device memory, as the stand-ins have.
fn config() -> WatchConfig {
    WatchConfig {
        growth: GrowthConfig {
            device_memory: Some(1 << 30),
            ..GrowthConfig::default()
        },
        ..WatchConfig::default()
    }
}

/// Weights, temporaries every step, and from step 1 a leak of 1 MiB a step.
fn leaking(steps: u64) -> Builder {
    let mut b = Builder::new();
    b.malloc(site(1), 0x1000_0000, 64 * MIB);
    for step in 1..=steps {
        b.mark(step);
        b.malloc(site(2), 0x2000_0000, 2 * MIB);
        b.free(0x2000_0000);
        b.malloc_async(site(5), 0x3000_0000 + step * MIB, MIB);
    }
    b
}

#[test]
fn a_leak_alerts_once_when_its_growth_has_lasted_the_confirmation() {
    let (raised, watch) = judged_at_every_step(&leaking(40), config());
    // Step k's sample (at its mark) holds what steps 1 to k-1 left: the leak grows from the
    // sample of step 1 on, and ten steps later, at step 11's mark, its growth is confirmed.
    assert_eq!(raised, vec![(11, 0)]);
    let mut watch = watch;
    let j = watch.judge(u64::MAX);
    assert_eq!(j.axis, SampleAxis::Steps);
    let d = j.device(0).unwrap();
    assert_eq!(d.steady_growth, MIB as f64);
    // 1 MiB a step is under 0.1% of 1 GiB: it alerts for the horizon, full in
    // (1 GiB - 64 MiB - 39 MiB) / 1 MiB steps from the last sample (step 40's, holding what
    // steps 1 to 39 leaked).
    assert_eq!(d.alert, Some(Reason::Horizon));
    assert_eq!(
        d.projection.unwrap().steps_to_full,
        Some((1024 - 64 - 39) as f64)
    );
    assert_eq!(d.leak_suspect_bytes, 40 * MIB);
    assert_eq!(d.live_bytes, 104 * MIB);
    let top = d.top.as_ref().unwrap();
    assert_eq!((top.site.caller, top.course.rate), (site(5), MIB as f64));
    // Each device alerts once.
    assert!(j.raised.is_empty());
}

/// At a lower resolution (the writer fell behind), the same leak alerts at the first step
/// judged after its growth has lasted the confirmation: later, never not at all.
#[test]
fn a_lower_resolution_delays_the_alert_to_the_next_step_it_judges() {
    for (stride, at) in [(1, 11), (2, 11), (4, 13), (8, 17), (64, 65)] {
        let (raised, _) = judged_with_stride(&leaking(80), config(), stride);
        // Judged at step 1, then every `stride`-th step after the last judged.
        assert_eq!(raised, vec![(at, 0)], "every {stride} steps");
    }
}

#[test]
fn an_absolute_threshold_alerts_for_growth() {
    let c = WatchConfig {
        threshold_bytes: Some(MIB / 2),
        confirm: 5,
        ..config()
    };
    let (raised, mut watch) = judged_at_every_step(&leaking(20), c);
    assert_eq!(raised, vec![(6, 0)]);
    let j = watch.judge(u64::MAX);
    assert_eq!(j.device(0).unwrap().alert, Some(Reason::Growth));
    assert_eq!(j.device(0).unwrap().threshold, (MIB / 2) as f64);
}

#[test]
fn a_warm_up_and_one_off_peaks_never_alert() {
    let mut b = Builder::new();
    b.malloc(site(1), 0x1000_0000, 64 * MIB);
    for step in 1..=60u64 {
        b.mark(step);
        // Caches filled over the first three steps, kept to the end.
        if step <= 3 {
            b.malloc(site(3), 0x5000_0000 + step * 16 * MIB, (16 >> step) * MIB);
        }
        b.malloc(site(2), 0x2000_0000, 2 * MIB);
        b.free(0x2000_0000);
        // An evaluation every tenth step holds 256 MiB across the next step's start.
        if step % 10 == 0 {
            b.malloc(site(4), 0x6000_0000, 256 * MIB);
        }
        if step % 10 == 1 && step > 1 {
            b.free(0x6000_0000);
        }
    }
    let (raised, mut watch) = judged_at_every_step(&b, config());
    assert_eq!(raised, vec![]);
    let j = watch.judge(u64::MAX);
    assert_eq!(j.device(0).unwrap().steady_growth, 0.0);
    assert_eq!(j.device(0).unwrap().leak_suspect_bytes, 0);
}

/// Judged once a second of the trace's time, as the writer judges a program without step marks.
fn judged_every_second(b: &Builder, config: WatchConfig) -> Vec<u64> {
    let mut watch = Watch::new(WatchConfig {
        every_ns: 1_000_000_000,
        ..config
    });
    let mut raised = Vec::new();
    for r in &b.records {
        if let Record::Event(e) = r {
            watch.apply_event(e);
            if watch.due(e.time_ns) {
                let j = watch.judge(e.time_ns);
                assert_eq!(j.axis, SampleAxis::Time);
                raised.extend(j.raised.iter().map(|_| e.time_ns / 1_000_000_000));
            }
        } else {
            watch.apply(r);
        }
    }
    raised
}

/// Without marks: 1 MiB every 10 ms for `growing_s` seconds (a model being built and its first
/// step taken, or a leak), then temporaries only until second 30.
fn unmarked_growth(growing_s: u64) -> Builder {
    let mut b = Builder::new();
    b.tick_ns = 5_000_000;
    let mut ptr = 0x1000_0000;
    while b.time_ns < 30_000_000_000 {
        if b.time_ns < growing_s * 1_000_000_000 {
            b.malloc(site(1), ptr, MIB);
            ptr += MIB;
        } else {
            b.malloc(site(2), 0x9000_0000, MIB);
            b.free(0x9000_0000);
        }
    }
    b
}

#[test]
fn growth_judged_per_time_window_alerts_only_once_it_has_lasted_the_confirmation_time() {
    // Judged per time window: a program whose allocations show no pattern to follow.
    let config = || WatchConfig {
        find_steps: false,
        ..self::config()
    };
    // Two seconds of growth at start-up are hundreds of windows, but not the default 10 minutes.
    assert_eq!(
        judged_every_second(&unmarked_growth(2), config()),
        Vec::<u64>::new()
    );
    // Without the rule, the two seconds of start-up alert within them (what the H200 showed).
    let none = WatchConfig {
        confirm_time_ns: 0,
        ..config()
    };
    assert_eq!(judged_every_second(&unmarked_growth(2), none), vec![1]);
    // With 5 s asked for: two seconds of growth still do not alert; growth that goes on does,
    // at the judgement of second 6, the first whose samples span 5 s of growth (a sample is
    // taken at the end of its window).
    let c = WatchConfig {
        confirm_time_ns: 5_000_000_000,
        ..config()
    };
    assert_eq!(
        judged_every_second(&unmarked_growth(2), c),
        Vec::<u64>::new()
    );
    assert_eq!(judged_every_second(&unmarked_growth(30), c), vec![6]);
}

/// Without marks: a loop of 15 ms steps (a 2 MiB temporary made and freed, and from the first
/// step a 1 MiB array kept) running for `seconds`; from `marks_from_s` on, each step marked.
fn unmarked_loop(seconds: u64, marks_from_s: Option<u64>) -> Builder {
    let mut b = Builder::new();
    b.tick_ns = 5_000_000;
    let mut step = 0;
    while b.time_ns < seconds * 1_000_000_000 {
        step += 1;
        if marks_from_s.is_some_and(|s| b.time_ns >= s * 1_000_000_000) {
            b.mark(step);
        }
        b.malloc(site(2), 0x2000_0000, 2 * MIB);
        b.free(0x2000_0000);
        b.malloc_async(site(5), 0x1_0000_0000 + step * MIB, MIB);
    }
    b
}

/// Judged once a second of the trace's time; the second, step and axis of each alert, and the
/// watch.
fn judged_each_second(b: &Builder, config: WatchConfig) -> (Vec<(u64, u64, SampleAxis)>, Watch) {
    let mut watch = Watch::new(WatchConfig {
        every_ns: 1_000_000_000,
        ..config
    });
    let mut raised = Vec::new();
    for r in &b.records {
        if let Record::Event(e) = r {
            watch.apply_event(e);
            if watch.due(e.time_ns) {
                let j = watch.judge(e.time_ns);
                let at = (e.time_ns / 1_000_000_000, j.steps, j.axis);
                raised.extend(j.raised.iter().map(|_| at));
            }
        } else {
            watch.apply(r);
        }
    }
    (raised, watch)
}

#[test]
fn an_unmarked_loop_is_judged_per_step_of_its_pattern_once_it_has_lasted() {
    // The kept array's allocation recurs once a step. At the judgement of second 1 its
    // occurrences span less than a second; at second 2 (in step 134) the watch follows it, and
    // numbers its steps on from the 134 seen, as the loop counts them. Growth per step must
    // then last 10 steps and a minute: the first judgement 60 s past the steps' start is at
    // second 63, in step 4,201.
    let b = unmarked_loop(90, None);
    let (raised, watch) = judged_each_second(&b, config());
    assert_eq!(raised, vec![(63, 4201, SampleAxis::Steps)]);
    assert!(watch.state().follows_pattern());
    let mut watch = watch;
    let j = watch.judge(b.time_ns);
    assert_eq!(j.device(0).unwrap().steady_growth, MIB as f64);
    // With 5 s asked for: at second 8, the first judgement 5 s past the steps' start.
    let c = WatchConfig {
        confirm_pattern_ns: 5_000_000_000,
        ..config()
    };
    let (raised, _) = judged_each_second(&unmarked_loop(10, None), c);
    assert_eq!(raised, vec![(8, 534, SampleAxis::Steps)]);
    // The same steps in a PyTorch program under the Python hooks are its start: the hooks
    // mark its steps, and no pattern is followed.
    let mut b = Builder::new();
    b.records.push(Record::Attachment(Attachment {
        kind: "torch.allocator".into(),
        id: 1,
        offset: 0,
        total: 2,
        time_ns: 0,
        after_seq: 0,
        data: b"{}".to_vec(),
    }));
    b.records.extend(unmarked_loop(10, None).records);
    let (raised, watch) = judged_each_second(&b, c);
    assert_eq!(raised, vec![]);
    assert!(!watch.state().follows_pattern());
}

#[test]
fn marks_that_come_after_a_followed_pattern_win() {
    // Followed from second 2; marks from second 5 on end it: steps are the marks from there,
    // counted from the first as a reader of the whole trace counts them.
    let b = unmarked_loop(8, Some(5));
    let (_, watch) = judged_each_second(&b, config());
    assert!(!watch.state().follows_pattern());
    let marks = watch.state().marks();
    assert_eq!(marks, 150);
    assert_eq!(watch.steps(), watch.state().steps());
    assert_eq!(watch.state().steps(), marks);
}

#[test]
fn a_pattern_that_stops_is_let_go_and_the_run_judged_per_time_window_again() {
    // A start that repeats itself: a 1 MiB weight every 15 ms for 3 s (200 of them), which the
    // watch follows from second 2 (133 seen); then a loop with no period: an array of a size
    // never seen before kept every 10 ms, to second 100.
    let mut b = Builder::new();
    b.tick_ns = 15_000_000;
    for i in 0..200u64 {
        b.malloc(site(3), 0x1_0000_0000 + i * MIB, MIB);
    }
    b.tick_ns = 10_000_000;
    let mut i = 0u64;
    while b.time_ns < 100_000_000_000 {
        let size = 64 * 1024 + (i * 7919 % 4096) * 16;
        b.malloc_async(site(6), 0x10_0000_0000 + i * MIB, size);
        i += 1;
    }
    let c = WatchConfig {
        confirm_time_ns: 5_000_000_000,
        ..config()
    };
    let (raised, watch) = judged_each_second(&b, c);
    // At second 33 the weight has not come for 30 s: the pattern is let go, and the run, judged
    // per time window again, has grown for more than 5 s. The steps followed stay counted.
    assert_eq!(raised, vec![(33, 200, SampleAxis::Time)]);
    assert!(!watch.state().follows_pattern());
    assert_eq!((watch.steps(), watch.state().steps()), (200, 0));
}

/// Streams a builder's events into a watch as they are made (a long run's records are not
/// kept), judging once a second of the trace's time.
struct Stream {
    b: Builder,
    watch: Watch,
}

impl Stream {
    fn new(c: WatchConfig) -> Self {
        let watch = Watch::new(WatchConfig {
            every_ns: 1_000_000_000,
            ..c
        });
        Stream {
            b: Builder::new(),
            watch,
        }
    }

    fn flush(&mut self) {
        for r in std::mem::take(&mut self.b.records) {
            match &r {
                Record::Event(e) => {
                    self.watch.apply_event(e);
                    if self.watch.due(e.time_ns) {
                        let _ = self.watch.judge(e.time_ns);
                    }
                }
                r => self.watch.apply(r),
            }
        }
    }
}

#[test]
fn a_dense_loop_is_followed_once_the_detectors_buffer_is_full() {
    // 70 allocations and frees a step, 1.25 µs apart: 800,000 a second fill the detector's
    // buffer (1,048,576) before the watch looks again, and the pattern decided then is followed
    // at the next look, its latest occurrence kept current (its boundaries are not kept
    // once followed: the detector is off).
    let mut s = Stream::new(config());
    s.b.tick_ns = 1250;
    while s.b.time_ns < 8_000_000_000 {
        for k in 0..35u64 {
            s.b.malloc(site(2), 0x2000_0000 + k * 0x100_0000, (k + 1) * 4096);
        }
        for k in 0..35u64 {
            s.b.free(0x2000_0000 + k * 0x100_0000);
        }
        if s.b.records.len() > 100_000 {
            s.flush();
        }
    }
    s.flush();
    assert!(s.watch.state().follows_pattern());
    assert_eq!(s.watch.state().step_tokens(), 0);
}

#[test]
fn a_pattern_followed_at_its_last_occurrence_is_let_go_too() {
    // A start repeating a 1 MiB allocation every 15 ms (68 of them, the last at 1.02 s) is
    // followed at the judgement that comes with its last occurrence, so no step of it is ever
    // applied. 30 s after that occurrence it is let go all the same, and the detector, looking
    // anew, finds the leaking loop that came after (15 ms steps) and alerts per step once the
    // growth has lasted a minute. Held by the start's pattern, the loop would be judged per time
    // window only, and need 10 minutes.
    let mut s = Stream::new(config());
    s.b.tick_ns = 15_000_000;
    for i in 0..68u64 {
        s.b.malloc(site(3), 0x1_0000_0000 + i * MIB, MIB);
    }
    s.b.tick_ns = 5_000_000;
    let mut step = 0;
    let mut raised = Vec::new();
    while s.b.time_ns < 200_000_000_000 {
        step += 1;
        s.b.malloc(site(2), 0x2000_0000, 2 * MIB);
        s.b.free(0x2000_0000);
        s.b.malloc_async(site(5), 0x100_0000_0000 + step * MIB, MIB);
        if s.b.records.len() > 10_000 {
            for r in std::mem::take(&mut s.b.records) {
                if let Record::Event(e) = &r {
                    s.watch.apply_event(e);
                    if s.watch.due(e.time_ns) {
                        let j = s.watch.judge(e.time_ns);
                        let at = (e.time_ns / 1_000_000_000, j.axis);
                        raised.extend(j.raised.iter().map(|_| at));
                    }
                }
            }
        }
    }
    assert_eq!(raised, vec![(95, SampleAxis::Steps)]);
}

#[test]
fn a_segment_snapshot_written_while_a_pattern_is_followed_has_no_steps() {
    // The tracer starts each segment from its live state's snapshot: steps the watch follows
    // from a pattern are its own, and a reader of the segment finds its own; so neither the
    // snapshot nor the objects in it carry them.
    let (_, watch) = judged_each_second(&unmarked_loop(10, None), config());
    let state = watch.state();
    assert!(state.follows_pattern() && state.steps() > 300);
    let snapshot = state.snapshot();
    assert_eq!((snapshot.steps, snapshot.step_times), (0, None));
    assert!(snapshot.objects.len() > 600);
    assert!(snapshot.objects.iter().all(|o| o.step == 0));
}

#[test]
fn an_unmarked_program_of_a_few_milliseconds_growing_all_along_is_not_said_to_grow() {
    // A program without step marks that lasts 4 ms, keeping 256 KiB every 50 µs for its first
    // 3 ms (its model built, its caches filled) and then ending: judged per time window of a
    // millisecond, its growth lasted 3 windows of its 4. Per time window, growth shorter than
    // the confirmation's windows is as much a program's start as a leak: the end says nothing
    // of it (the note is for growth that could have been confirmed and was not).
    let mut b = Builder::new();
    b.tick_ns = 50_000;
    for i in 0..60u64 {
        b.malloc(site(3), 0x1_0000_0000 + i * MIB, 256 * 1024);
    }
    for _ in 0..20 {
        b.malloc(site(2), 0x2000_0000, MIB);
        b.free(0x2000_0000);
    }
    let j = judged_at_the_end(&b, config());
    assert_eq!(j.axis, SampleAxis::Time);
    let d = &j.devices[0];
    assert!(d.steady_growth > 0.0, "{d:?}");
    assert_eq!((d.alert, d.held), (None, None), "{d:?}");
}

#[test]
fn per_time_window_a_place_s_staircase_beside_a_flat_device_is_not_said_to_grow() {
    // As CuPy's leak_cupy ran on the H100, without step marks: a process of 476 ms whose loop of
    // 31 ms keeps 4 MiB a millisecond (400 MiB in one burst, at 100 ms), while another place
    // takes 256 KiB three times, evenly spread. Per time window the device rose once and stays
    // flat: no alert and no note, though the staircase alone reads as steady growth.
    let mut b = Builder::new();
    b.tick_ns = 1_000_000;
    let mut at = 0;
    for i in 0..476u64 {
        match i {
            40 | 170 | 300 => {
                b.malloc(site(3), 0x1_0000_0000 + at * MIB, 256 * 1024);
                at += 1;
            }
            100..=130 => {
                for k in 0..4 {
                    b.malloc(site(4), 0x10_0000_0000 + (i * 4 + k) * 4 * MIB, 4 * MIB);
                }
            }
            _ => {
                b.malloc(site(2), 0x2000_0000, MIB);
                b.free(0x2000_0000);
            }
        }
    }
    let c = WatchConfig {
        confirm_time_ns: 100_000_000,
        ..config()
    };
    let j = judged_at_the_end(&b, c);
    assert_eq!(j.axis, SampleAxis::Time);
    let d = &j.devices[0];
    assert_eq!((d.alert, d.held), (None, None), "{d:?}");
}

/// Every record of `b` applied, then one judgement at its last event, as the end of a run
/// judges.
fn judged_at_the_end(b: &Builder, config: WatchConfig) -> Judgement {
    let mut watch = Watch::new(WatchConfig {
        every_ns: 0,
        ..config
    });
    let mut end = 0;
    for r in &b.records {
        match r {
            Record::Event(e) => {
                watch.apply_event(e);
                end = e.time_ns;
            }
            r => watch.apply(r),
        }
    }
    watch.judge(end)
}
