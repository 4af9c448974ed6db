//! wl_soak on a 64 MiB stand-in device: the leak of 4 MiB every 5 steps (keep_history) fills it,
//! and the program goes on, its allocations refused, for 140 more steps. The growth is judged on
//! the course before the first out-of-memory failure: a full device cannot grow, and its flat
//! end said "no steady growth" and "teardown-only: none needed" of the leak that filled it.

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
    let out = vramtrace_tests::traced::vramtrace_command()
        .arg("report")
        .arg(trace)
        .output()
        .unwrap();
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
            "  verdict   OUT OF MEMORY (125 failures; the first: cudaMalloc of 1.0 MiB on device \
             0 at step 2 with 11.2 MiB live); no ALERT or warning; 1 note: peak at temporary at \
             wl_soak.c:{temporary} (wl_soak) on device 0"
        )
    );
});
