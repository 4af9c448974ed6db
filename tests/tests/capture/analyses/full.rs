//! wl_soak on a 64 MiB stand-in device: the leak of 4 MiB every 5 steps (keep_history) fills it,
//! and the program goes on, its allocations refused, for 140 more steps. The growth is judged on
//! the course before the first out-of-memory failure: a full device cannot grow, and its flat
//! end said "no steady growth" and "teardown-only: none needed" of the leak that filled it. A
//! device where a place goes on growing after a refused request was not full, and is judged
//! whole.

use vramtrace_tests::source::{line_of, workload_source};
use vramtrace_tests::traced::Workload;

use crate::{vramtrace_json, MIB};

/// `report --json` of wl_soak run for `steps` steps on the 64 MiB device, keeping 4 MiB every 5.
fn report_of_soak(dir: &std::path::Path, steps: u64) -> serde_json::Value {
    let trace = Workload::new("wl_soak")
        .arg(steps.to_string())
        .arg("50")
        .arg("5")
        .arg((4 * MIB).to_string())
        .env("STANDIN_DEVICE_MEM", "64M")
        .run_traced(dir)
        .single_trace();
    vramtrace_json(["report".as_ref(), "--json".as_ref(), trace.path.as_os_str()])
}

captest!(
    a_leak_that_fills_the_device_is_judged_before_it_is_full,
    |dir| {
        let r = report_of_soak(dir, 200);
        assert!(
            r["failures"]["out_of_memory"].as_u64() > Some(0),
            "{}",
            r["failures"]
        );
        let first = &r["analysis"]["diagnosis"][0];
        assert_eq!(first["class"], "steady-growth", "{first}");
        assert_eq!(first["severity"], "alert", "{first}");
        let line = line_of(
            &workload_source("wl_soak.c"),
            "int rc = cudaMalloc(&p, bytes);",
        );
        assert_eq!(
            first["site"]["label"],
            format!("keep_history at wl_soak.c:{line}"),
            "{first}"
        );
        let rate = first["evidence"]["rate"].as_f64().unwrap();
        assert!((rate - 4.0 * MIB as f64 / 5.0).abs() < 1.0, "{rate}");
        let device = &r["analysis"]["growth"]["holders"][0]["phases"];
        assert!(device["full_from"].as_u64().is_some(), "{device}");
    }
);

// The same leak in a run of 52 steps: its first allocations are refused in its last step, after
// its last sample, so its course is not cut; it is full all the same (a program the error ended,
// as PyTorch's does): out of memory at step 52, not "7.6 MiB left, full in 9 steps".
captest!(a_run_ended_by_running_out_of_memory_is_full, |dir| {
    let r = report_of_soak(dir, 52);
    let device = &r["analysis"]["growth"]["holders"][0];
    assert_eq!(
        device["phases"]["full_from"],
        serde_json::Value::Null,
        "{device}"
    );
    let p = &device["projection"];
    assert_eq!(
        (&p["out_of_memory_at_step"], &p["steps_to_full"]),
        (&52.into(), &0.0.into()),
        "{p}"
    );
    let first = &r["analysis"]["diagnosis"][0];
    assert_eq!(first["evidence"]["out_of_memory_at_step"], 52, "{first}");
});

/// The second line of `report TRACE`: its verdict.
fn verdict(trace: &std::path::Path) -> String {
    let out = vramtrace_tests::traced::report_of(trace, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap_or_default().to_string()
}

// The verdict says a device ran out of memory, the first thing a post-mortem asks: with the
// growth's rate where the leak did it; ahead of the findings where no finding did (here 16
// temporaries of up to 2 MiB live at once on a 12 MiB device: a peak, a note, and no leak).
captest!(the_verdict_says_the_device_ran_out_of_memory, |dir| {
    let leak = dir.join("leak");
    std::fs::create_dir(&leak).unwrap();
    let trace = Workload::new("wl_soak")
        .arg("52")
        .arg("50")
        .arg("5")
        .arg((4 * MIB).to_string())
        .env("STANDIN_DEVICE_MEM", "64M")
        .run_traced(&leak)
        .single_trace();
    let line = line_of(
        &workload_source("wl_soak.c"),
        "int rc = cudaMalloc(&p, bytes);",
    );
    assert_eq!(
        verdict(&trace.path),
        format!(
            "  verdict   ALERT: steady growth at keep_history at wl_soak.c:{line} (wl_soak) on \
             device 0, +819.2 KiB per step, out of memory at step 52; 1 more finding (DIAGNOSIS \
             below)"
        )
    );
    let peak = dir.join("peak");
    std::fs::create_dir(&peak).unwrap();
    let run = Workload::new("wl_soak")
        .arg("50")
        .arg("10")
        .arg("0")
        .env("STANDIN_DEVICE_MEM", "12M")
        .run_traced(&peak);
    let temporary = line_of(&workload_source("wl_soak.c"), "failed += cudaMalloc(p, 256");
    assert_eq!(
        verdict(&run.single_trace().path),
        format!(
            "  verdict   OUT OF MEMORY (125 failures; the first: cudaMalloc of 1.0 MiB at \
             temporary at wl_soak.c:{temporary} (wl_soak) on device 0 at step 2 with 11.2 MiB \
             live, more than all that was free (846.8 KiB)); no ALERT or warning; 1 note: peak at temporary at wl_soak.c:{temporary} \
             (wl_soak) on device 0"
        )
    );
});

// wl_soak on a 96 MiB device, temporaries of up to 8 MiB: one is refused at step 4 with 22 MiB
// free (the stand-in's first fit finds no piece that large), and the program goes on, keeping
// 1 MiB every 2 steps (keep_history) for 56 more steps. The device was not full: its growth is
// judged on the whole course, the leak named and the gate failed (it said "teardown-only: none
// needed" and passed).
captest!(
    growth_that_goes_on_after_a_refused_request_is_judged,
    |dir| {
        let trace = Workload::new("wl_soak")
            .arg("60")
            .arg("100")
            .arg("2")
            .arg("1048576")
            .arg("1")
            .arg("8388608")
            .env("STANDIN_DEVICE_MEM", "96M")
            .run_traced(dir)
            .single_trace();
        let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), trace.path.as_os_str()]);
        assert!(r["failures"]["out_of_memory"].as_u64() > Some(0));
        let line = line_of(
            &workload_source("wl_soak.c"),
            "int rc = cudaMalloc(&p, bytes);",
        );
        let first = &r["analysis"]["diagnosis"][0];
        assert_eq!(
            (&first["class"], &first["site"]["label"]),
            (
                &"steady-growth".into(),
                &format!("keep_history at wl_soak.c:{line}").into()
            ),
            "{first}"
        );
        assert_eq!(first["evidence"]["rate"], MIB as f64 / 2.0, "{first}");
        let gate = vramtrace_tests::traced::report_of(&trace.path, &["--fail-on", "growth"]);
        assert_eq!(gate.status.code(), Some(1));
        // The failure's block says the request fit in what was free: no piece that large.
        let text = vramtrace_tests::traced::report_of(&trace.path, &[]);
        let text = String::from_utf8(text.stdout).unwrap();
        assert!(
            text.contains(
                "\n  free then 22.2 MiB of the device's 96.0 MiB (as the trace counts it); the \
                 request fit in it: the driver had no free piece of 7.2 MiB (fragmented), or \
                 memory the trace does not see held the rest\n"
            ),
            "{text}"
        );
        // Its 16 failures explained are one call from one place: one block, the rest counted.
        let explained = r["analysis"]["ooms"]["failures"].as_array().unwrap().len();
        assert_eq!(text.matches("\nOut of memory: ").count(), 1, "{text}");
        let last = r["analysis"]["ooms"]["failures"][explained - 1]["failure"]["origin"]["step"]
            .as_u64()
            .unwrap();
        assert!(
            text.contains(&format!(
                "\n  and {} more failures like it, from the same place, in steps 4-{last} (each \
                 in `--json`'s ooms.failures)\n",
                explained - 1
            )),
            "{text}"
        );
    }
);

// wl_alert's healthy loop on a 64 MiB device: its evaluation every 10 steps asks for 64 MiB,
// more than the device had free with 16 MiB live. The verdict names the request's line and
// says it could not fit whatever grew before (nothing did).
captest!(a_request_larger_than_all_that_was_free_is_said, |dir| {
    let trace = Workload::new("wl_alert")
        .arg("healthy")
        .env("STANDIN_DEVICE_MEM", "64M")
        .run_traced(dir)
        .single_trace();
    let eval = line_of(&workload_source("wl_alert.c"), "/* evaluation */");
    let cache = line_of(&workload_source("wl_alert.c"), "/* a cache */");
    assert_eq!(
        verdict(&trace.path),
        format!(
            "  verdict   OUT OF MEMORY (4 failures; the first: cudaMallocAsync of 64.0 MiB at \
             main at wl_alert.c:{eval} → fw_alloc (libtorch_standin.so) on device 0 at step 10 \
             with 16.0 MiB live, more than all that was free (48.0 MiB)); no ALERT or warning; 1 \
             note: teardown-only at main at wl_alert.c:{cache} → fw_alloc (libtorch_standin.so)"
        )
    );
});

// A healthy loop whose evaluation asks for more than all the device has free (64 MiB of a 70 MiB
// device holding 16 MiB) fails alone, every tenth step: the device was never full, and its
// course is judged over every step, not cut at the first failure ("out of memory from step 10
// (the course after it is not judged …)" had left 30 steps unread).
captest!(
    a_request_larger_than_all_that_is_free_does_not_cut_the_course,
    |dir| {
        let trace = Workload::new("wl_alert")
            .arg("healthy")
            .env("STANDIN_DEVICE_MEM", "70M")
            .run_traced(dir)
            .single_trace();
        let r = vramtrace_json(["report".as_ref(), "--json".as_ref(), trace.path.as_os_str()]);
        assert_eq!(r["failures"]["out_of_memory"], 4, "{}", r["failures"]);
        let device = (r["analysis"]["growth"]["holders"]
            .as_array()
            .unwrap()
            .iter())
        .find(|h| h["memory"] == "device" && h["device"] == 0)
        .unwrap_or_else(|| panic!("{}", r["analysis"]["growth"]));
        assert_eq!(
            device["phases"]["full_from"],
            serde_json::Value::Null,
            "{device}"
        );
        assert_eq!(device["samples"], 40, "{device}");
        assert_eq!(device["steady_growth"], 0.0, "{device}");
    }
);

// The healthy loop's evaluation every ten steps (64 MiB, freed in the next step) rises three
// times at the step boundaries: recurring, not "a one-off rise at step 10".
captest!(an_evaluation_every_ten_steps_is_no_one_off, |dir| {
    let trace = Workload::new("wl_alert")
        .arg("healthy")
        .run_traced(dir)
        .single_trace();
    let out = vramtrace_tests::traced::report_of(&trace.path, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "\n  phases         device 0: steady from step 3, 3 rises of up to +64.0 MiB after the \
             warm-up, the first at step 10 (given back later)\n"
        ),
        "{text}"
    );
});
