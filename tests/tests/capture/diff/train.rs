//! wl_train against itself: in another run (ASLR moves every library), rebuilt (wl_train_moved:
//! the same lines, main at other offsets), with `--extra-leak` (4 MiB more kept every step),
//! with `--fix-leak` (the 1 MiB history tensor freed in its step), and as eight ranks of which
//! rank 3 has the extra leak. Against `--fix-leak`, the plain program is a new steady leak of
//! 1 MiB a step: a regression, though it adds only 20 MiB.

use std::path::Path;

use serde_json::Value;
use vramtrace_tests::source::{line_of, standin_source, workload_source};
use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{text, vramtrace_command, Workload};

use super::{diff_json, diff_text, frames_in, subdir, the_trace};
use crate::MIB;

/// Runs `w` traced into `dir/name/` and returns its trace.
fn traced(dir: &Path, name: &str, w: Workload) -> std::path::PathBuf {
    let d = subdir(dir, name);
    let run = w.run_both(&d);
    assert!(run.output.status.success(), "{}", run.stderr());
    the_trace(&d)
}

fn plain(dir: &Path, name: &str) -> std::path::PathBuf {
    traced(dir, name, Workload::new("wl_train"))
}

/// Where the module named `file_name` was loaded in a trace.
fn base_of(trace: &Trace, file_name: &str) -> u64 {
    let modules = trace.state.modules().modules();
    let m = modules.iter().find(|m| m.file_name() == file_name);
    m.unwrap_or_else(|| panic!("{file_name} not in the trace"))
        .base
}

/// The sites of `d` that changed, as `(status, label)`.
fn changed(d: &Value) -> Vec<(String, String)> {
    d["sites"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["status"].as_str().unwrap().into(),
                s["label"].as_str().unwrap().into(),
            )
        })
        .collect()
}

/// The history tensor's site: fw_alloc's cudaMallocAsync called from main's history line.
fn history_frames() -> Vec<(String, u64)> {
    let train = workload_source("wl_train.c");
    vec![(
        "main".into(),
        line_of(&train, "history[step] = alloc(1 * MiB, FW_MODE_ASYNC);").into(),
    )]
}

fn fw_alloc_frames() -> Vec<(String, u64)> {
    let fw = standin_source("framework/fw_alloc.c");
    let call = "if (cudaMallocAsync(&p, size, NULL) == cudaSuccess)";
    vec![("fw_alloc".into(), line_of(&fw, call).into())]
}

// Two runs of the same program: every library at another address (the test checks they moved),
// and not one site differs; exit 0.
captest!(two_runs_at_other_addresses_do_not_differ, |dir| {
    let (a, b) = (plain(dir, "a"), plain(dir, "b"));
    let (ta, tb) = (Trace::load(&a), Trace::load(&b));
    for module in [
        "libtorch_standin.so",
        "libcudart.so.13",
        "libc.so.6",
        "wl_train",
    ] {
        assert_ne!(
            base_of(&ta, module),
            base_of(&tb, module),
            "{module} loaded at the same address in both runs: is ASLR off?"
        );
    }
    let (code, d) = diff_json([&a, &b]);
    assert_eq!(code, 0);
    let s = &d["sites"];
    assert_eq!(s["changed"], 0, "{:?}", changed(&d));
    assert_eq!(
        (&s["only_in_a"], &s["only_in_b"], &s["guessed"]),
        (&Value::from(0), &Value::from(0), &Value::from(0))
    );
    assert_eq!(s["matched"], s["unchanged"]);
    assert_eq!(d["steps"]["aligned"], true);
    assert_eq!(d["steps"]["first_difference"], Value::Null);
    assert_eq!(d["totals"]["live_bytes"]["a"], 20 * MIB);
});

// The same program rebuilt with code placed before main: main's instructions sit at other
// offsets of the executable, its function, file and lines are the same, and so are its sites.
captest!(
    a_rebuilt_program_is_matched_by_function_file_and_line,
    |dir| {
        let a = plain(dir, "a");
        let b = traced(dir, "b", Workload::new("wl_train_moved"));
        // The history allocation's frame in main, as an offset into the executable.
        let main_offset = |path: &Path, exe: &str| {
            let t = Trace::load(path);
            let e = t
            .events
            .iter()
            .rev()
            .find(|e| matches!(e.op, vramtrace_collector::event::Op::Alloc { size, .. } if size == MIB))
            .expect("a history allocation");
            let base = base_of(&t, exe);
            let module = t
                .state
                .modules()
                .modules()
                .iter()
                .find(|m| m.file_name() == exe)
                .unwrap()
                .clone();
            let frames = &t.stacks[&e.stack];
            let inside = frames
                .iter()
                .find(|&&f| module.contains(f))
                .expect("a frame in main");
            inside - base
        };
        let (oa, ob) = (
            main_offset(&a, "wl_train"),
            main_offset(&b, "wl_train_moved"),
        );
        assert_ne!(oa, ob, "the rebuild did not move main");
        let (code, d) = diff_json([&a, &b]);
        assert_eq!(code, 0);
        let s = &d["sites"];
        assert_eq!(s["changed"], 0, "{:?}", changed(&d));
        assert_eq!(
            (&s["only_in_a"], &s["only_in_b"], &s["guessed"]),
            (&Value::from(0), &Value::from(0), &Value::from(0))
        );
    }
);

// One more leak: exactly one site differs, new in B, at fw_alloc called from main's extra line,
// holding 20 × 4 MiB and growing 4 MiB per step; the verdict is a regression (exit 1) on live
// memory, growth, and a new steady growth.
captest!(an_extra_leak_is_the_one_difference, |dir| {
    let a = plain(dir, "a");
    let b = traced(dir, "b", Workload::new("wl_train").arg("--extra-leak"));
    let (code, d) = diff_json([&a, &b]);
    assert_eq!(code, 1);
    let s = &d["sites"];
    assert_eq!(
        (&s["changed"], &s["only_in_b"], &s["only_in_a"]),
        (&Value::from(1), &Value::from(1), &Value::from(0))
    );
    let leak = &s["list"][0];
    let train = workload_source("wl_train.c");
    let line = line_of(&train, "extra[step] = alloc(4 * MiB, FW_MODE_ASYNC);");
    assert_eq!(
        leak["label"],
        format!("main at wl_train.c:{line} → fw_alloc")
    );
    assert_eq!(
        frames_in(leak, &train),
        [("main".to_string(), u64::from(line))]
    );
    let fw = standin_source("framework/fw_alloc.c");
    assert_eq!(frames_in(leak, &fw), fw_alloc_frames());
    assert_eq!(
        (&leak["status"], &leak["match"]),
        (&Value::from("new"), &Value::from("only-in-b"))
    );
    let b_site = &leak["b"];
    assert_eq!(b_site["live_bytes"], 80 * MIB);
    assert_eq!(b_site["live_count"], 20);
    assert_eq!(b_site["allocations"], 20);
    assert_eq!(b_site["growth"], (4 * MIB) as f64);
    assert_eq!(b_site["peak_bytes"], 80 * MIB);
    assert_eq!(d["totals"]["growth"]["change"], (4 * MIB) as f64);
    let exceeded: Vec<&str> = (d["verdict"]["checks"].as_array().unwrap().iter())
        .filter(|c| c["exceeded"] == true)
        .map(|c| c["metric"].as_str().unwrap())
        .collect();
    assert_eq!(exceeded, ["live_bytes", "growth_per_step", "new_growth"]);
    // Step N against step N, as each begins: 4 MiB more for every step before it.
    let rows = d["steps"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 20);
    for r in rows {
        assert_eq!(
            r["change"].as_u64().unwrap(),
            (r["step"].as_u64().unwrap() - 1) * 4 * MIB,
            "{r}"
        );
    }
    assert_eq!(d["steps"]["first_difference"], 2);
});

// The history leak fixed: its site shrank to nothing (20 MiB live in A, nothing in B though it
// still allocates, 1 MiB a step less), which is no regression (exit 0).
captest!(a_fixed_leak_is_gone, |dir| {
    let a = plain(dir, "a");
    let b = traced(dir, "b", Workload::new("wl_train").arg("--fix-leak"));
    let (code, d) = diff_json([&a, &b]);
    assert_eq!(code, 0);
    let top = &d["sites"]["list"][0];
    assert_eq!(top["status"], "shrank");
    assert_eq!(top["match"], "exact");
    assert_eq!(
        frames_in(top, &workload_source("wl_train.c")),
        history_frames()
    );
    assert_eq!(
        (&top["a"]["live_bytes"], &top["b"]["live_bytes"]),
        (&Value::from(20 * MIB), &Value::from(0))
    );
    assert_eq!(top["change"]["growth"], -((MIB) as f64));
    assert_eq!(top["a"]["allocations"], top["b"]["allocations"]);
    assert_eq!(d["totals"]["live_bytes"]["change"], -((20 * MIB) as i64));
    assert_eq!(d["verdict"]["regression"], false);
});

// A leak of 1 MiB a step where the other run had none (the history tensor kept, against the
// run that frees it): 20 MiB more at the end and 1 MiB a step more, under every threshold, but a
// steady growth at a site that did not grow: a regression (exit 1) that names the site. Two
// runs without the leak do not differ (exit 0).
captest!(a_new_slow_leak_is_a_regression, |dir| {
    let fixed = |name| traced(dir, name, Workload::new("wl_train").arg("--fix-leak"));
    let (a, a2) = (fixed("a"), fixed("a2"));
    let b = plain(dir, "b");
    let (code, d) = diff_json([&a, &b]);
    assert_eq!(code, 1);
    let v = &d["verdict"];
    let exceeded: Vec<&str> = (v["checks"].as_array().unwrap().iter())
        .filter(|c| c["exceeded"] == true)
        .map(|c| c["metric"].as_str().unwrap())
        .collect();
    assert_eq!(exceeded, ["new_growth"]);
    assert_eq!(d["totals"]["growth"]["change"], MIB as f64);
    assert_eq!(d["totals"]["live_bytes"]["change"], 20 * MIB);
    let new = v["new_growth"].as_array().unwrap();
    assert_eq!(new.len(), 1);
    let train = workload_source("wl_train.c");
    let line = line_of(&train, "history[step] = alloc(1 * MiB, FW_MODE_ASYNC);");
    assert_eq!(
        new[0]["label"],
        format!("main at wl_train.c:{line} → fw_alloc")
    );
    assert_eq!(new[0]["owner"], "libtorch_standin.so");
    assert_eq!(
        (
            &new[0]["rate"],
            &new[0]["above_floor"],
            &new[0]["regression"]
        ),
        (
            &Value::from(MIB as f64),
            &Value::Bool(true),
            &Value::Bool(true)
        )
    );
    // The same site is the top difference, and its row says it grew (A had the site).
    let top = &d["sites"]["list"][0];
    assert_eq!(top["label"], new[0]["label"]);
    assert_eq!(frames_in(top, &train), history_frames());
    assert_eq!(
        (
            &top["status"],
            &top["a"]["allocations"],
            &top["b"]["allocations"]
        ),
        (&Value::from("grew"), &Value::from(20), &Value::from(20))
    );
    let (code, shown) = diff_text(&a, &b);
    assert_eq!(code, Some(1));
    let verdict = format!(
        "VERDICT  REGRESSION (exit 1): new steady growth +1.0 MiB/step at main at \
         wl_train.c:{line} → fw_alloc (libtorch_standin.so): above 64.0 KiB"
    );
    assert!(shown.contains(&verdict), "{shown}");
    let (code, d) = diff_json([&a, &a2]);
    assert_eq!(code, 0, "{}", d["verdict"]);
    assert_eq!(d["verdict"]["new_growth"].as_array().unwrap().len(), 0);
});

/// Eight ranks of wl_train in `dir`, rank 3 with the extra leak.
fn eight_ranks(dir: &Path) {
    for rank in 0..8 {
        let mut w = Workload::new("wl_train").env("RANK", rank.to_string());
        if rank == 3 {
            w = w.arg("--extra-leak");
        }
        let run = w.run_traced(dir);
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    assert_eq!(vramtrace_tests::traced::trace_files(dir).len(), 8);
}

// A directory of eight ranks: the rank table names rank 3 first (live memory 100 MiB against a
// median of 20 MiB), and rank 3 against the median of the others is exactly its extra leak.
captest!(eight_ranks_name_the_odd_one_first, |dir| {
    eight_ranks(dir);
    let out = vramtrace_command()
        .args(["report", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ranks = r["ranks"].as_array().unwrap();
    let order: Vec<i64> = ranks.iter().map(|x| x["rank"].as_i64().unwrap()).collect();
    assert_eq!(order, [3, 0, 1, 2, 4, 5, 6, 7]);
    assert_eq!(ranks[0]["differs_in"], "live_bytes");
    assert_eq!(
        (&ranks[0]["value"], &ranks[0]["median"]),
        (
            &Value::from((100 * MIB) as f64),
            &Value::from((20 * MIB) as f64)
        )
    );
    assert_eq!(ranks[0]["growth"], (5 * MIB) as f64);
    assert!(ranks[1..]
        .iter()
        .all(|x| x["distance"] == 0.0 && x["live_bytes"] == 20 * MIB));
    assert_eq!(ranks[0]["odd"], true);
    assert!(ranks[1..].iter().all(|x| x["odd"] == false));
    assert_eq!(
        r["reports"].as_array().unwrap().len(),
        8,
        "--json keeps every report"
    );
    // On one page: the table, rank 3's report in full, one line for each other rank.
    let text_out = vramtrace_command().arg("report").arg(dir).output().unwrap();
    let shown = text(&text_out.stdout);
    assert!(
        shown.contains(
            "Ranks (8 traces): 7 of 8 traces grow alike: first cause +1.0 MiB/step at main at \
             wl_train.c:128 → fw_alloc (libtorch_standin.so); rank 3 differs most: live at end \
             100.0 MiB against a median of 20.0 MiB"
        ),
        "{shown}"
    );
    let reports: Vec<&str> = shown.lines().filter(|l| l.starts_with("════ ")).collect();
    assert_eq!(reports.len(), 1, "{shown}");
    assert!(reports[0].starts_with("════ rank 3 ("), "{shown}");
    assert_eq!(shown.matches("\nFINDINGS\n").count(), 1, "{shown}");
    let (_, rest) = shown
        .split_once(
            "\nThe other traces, like the median: one line each (--all prints every report)\n",
        )
        .unwrap_or_else(|| panic!("no summary of the other ranks in:\n{shown}"));
    let summarised: Vec<&str> = rest.lines().collect();
    assert_eq!(summarised.len(), 7, "{rest}");
    for (line, rank) in summarised.iter().zip([0, 1, 2, 4, 5, 6, 7]) {
        assert!(line.starts_with(&format!("  rank {rank} (pid ")), "{line}");
        assert!(line.contains(": 20.0 MiB live at end, peak "), "{line}");
        assert!(
            line.contains(", growth +1.0 MiB/step at main at wl_train.c:128 → fw_alloc (libtorch_standin.so), "),
            "{line}"
        );
    }
    let all = vramtrace_command()
        .args(["report", "--all"])
        .arg(dir)
        .output()
        .unwrap();
    let every = text(&all.stdout);
    assert_eq!(every.lines().filter(|l| l.starts_with("════ ")).count(), 8);
    assert!(!every.contains("The other traces"));

    let (code, d) = diff_json([
        std::ffi::OsStr::new("--rank"),
        "3".as_ref(),
        dir.as_os_str(),
    ]);
    assert_eq!(code, 1);
    assert_eq!(d["a"]["path"], "median of 7 traces");
    assert_eq!(d["sites"]["changed"], 1);
    let leak = &d["sites"]["list"][0];
    let train = workload_source("wl_train.c");
    let line = line_of(&train, "extra[step] = alloc(4 * MiB, FW_MODE_ASYNC);");
    assert_eq!(
        frames_in(leak, &train),
        [("main".to_string(), u64::from(line))]
    );
    assert_eq!(leak["change"]["live_bytes"], 80 * MIB);
    let (code, d) = diff_json([
        std::ffi::OsStr::new("--rank"),
        "6".as_ref(),
        dir.as_os_str(),
    ]);
    assert_eq!(code, 0, "rank 6 is like the median of the others");
    assert_eq!(d["sites"]["changed"], 0);
});

// Four ranks, three leaking 1 MiB a step at line 128 and rank 2 with the leak fixed: rank 2 is
// the one that differs, but the job is about the leak the others share. The headline says that
// first, and the report of a leaking rank is printed in full beside rank 2's.
captest!(
    a_healthy_rank_among_leaking_ones_does_not_hide_the_leak,
    |dir| {
        for rank in 0..4 {
            let mut w = Workload::new("wl_train")
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", "4");
            if rank == 2 {
                w = w.arg("--fix-leak");
            }
            let run = w.run_traced(dir);
            assert!(run.output.status.success(), "{}", run.stderr());
        }
        let out = vramtrace_command().arg("report").arg(dir).output().unwrap();
        let shown = text(&out.stdout);
        let line = line_of(
            &workload_source("wl_train.c"),
            "history[step] = alloc(1 * MiB, FW_MODE_ASYNC); // @leak",
        );
        assert!(
            shown.contains(&format!(
            "\nRanks (4 traces): 3 of 4 traces grow alike: first cause +1.0 MiB/step at main at \
             wl_train.c:{line} → fw_alloc (libtorch_standin.so); rank 2 differs most: live at \
             end 0 B against a median of 20.0 MiB\n"
        )),
            "{shown}"
        );
        let reports: Vec<&str> = shown.lines().filter(|l| l.starts_with("════ ")).collect();
        assert_eq!(reports.len(), 2, "{shown}");
        assert!(reports[0].starts_with("════ rank 2 ("), "{shown}");
        assert!(
            reports[1].starts_with("════ rank 0 (")
                && reports[1]
                    .ends_with("): it grows as most traces do, its report stands for them ════"),
            "{shown}"
        );
        assert_eq!(
            shown
                .matches("\n  1. ALERT: steady growth at main at wl_train.c:")
                .count(),
            1,
            "{shown}"
        );
    }
);

// Two native functions of one program that call the same allocator wrapper (wl_shapes: a
// warm-up's buffers at warm_up, a late leak's at keep, both through fw_alloc) share that frame
// and no more: they are two sites, never paired by a guess. The late leak is new in B, the
// warm-up's buffers gone from it.
captest!(two_functions_of_one_wrapper_are_not_paired, |dir| {
    let a = traced(dir, "warmup", Workload::new("wl_shapes").arg("warmup"));
    let b = traced(dir, "late", Workload::new("wl_shapes").arg("late"));
    let (code, d) = diff_json([&a, &b]);
    assert_eq!(code, 1);
    let sites = changed(&d);
    let status = |function: &str| {
        (sites.iter())
            .find(|(_, label)| label.starts_with(&format!("{function} at wl_shapes.c:")))
            .map(|(status, _)| status.clone())
    };
    assert_eq!(
        (status("keep").as_deref(), status("warm_up").as_deref()),
        (Some("new"), Some("gone")),
        "{sites:?}"
    );
    assert_eq!(d["top_difference"]["status"], "new");
});

// Four ranks with the history leak fixed against four with it, rank 2 with the extra leak too:
// every pair regressed, and the set's verdict names the worst, rank 2's 4 MiB a step at the
// extra leak's line (it named rank 0's 1 MiB, the first pair's, and rank 2's new cause only
// further down).
captest!(a_jobs_verdict_names_its_worst_pair, |dir| {
    let (a, b) = (subdir(dir, "a"), subdir(dir, "b"));
    for rank in 0..4 {
        let env = |w: Workload| w.env("RANK", rank.to_string()).env("WORLD_SIZE", "4");
        let run = env(Workload::new("wl_train").arg("--fix-leak")).run_traced(&a);
        assert!(run.output.status.success(), "{}", run.stderr());
        let mut w = env(Workload::new("wl_train"));
        if rank == 2 {
            w = w.arg("--extra-leak");
        }
        let run = w.run_traced(&b);
        assert!(run.output.status.success(), "{}", run.stderr());
    }
    let (code, shown) = diff_text(&a, &b);
    assert_eq!(code, Some(1));
    let train = workload_source("wl_train.c");
    let extra = line_of(&train, "extra[step] = alloc(4 * MiB, FW_MODE_ASYNC);");
    let verdict = shown.lines().next().unwrap();
    assert!(
        verdict.starts_with(&format!(
            "VERDICT  REGRESSION (exit 1): 4 of 4 pairs (rank 0, rank 1, rank 2, rank 3); worst, \
             rank 2: new steady growth +4.0 MiB/step at main at wl_train.c:{extra} → fw_alloc \
             (libtorch_standin.so): "
        )),
        "{shown}"
    );
});
