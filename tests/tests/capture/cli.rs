//! The `vramtrace` command line end to end on real traces: `vramtrace run` on the README's
//! training example, `vramtrace report --json` on what it wrote, and reports of damaged files
//! (a trace cut at chosen byte offsets, a file that is no trace at all).

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use vramtrace_tests::trace::Trace;
use vramtrace_tests::traced::{text, trace_files, vramtrace_command, Workload};
use vramtrace_tests::{standin_ld_library_path, workload};

use crate::MIB;

/// `vramtrace run -o <dir>/r-%p.vtrace -- <workload> <args>`.
fn vramtrace_run(dir: &Path, name: &str, args: &[&str]) -> Output {
    vramtrace_command()
        .arg("run")
        .arg("-o")
        .arg(dir.join("r-%p.vtrace"))
        .arg("--")
        .arg(workload(name))
        .args(args)
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        .output()
        .expect("running vramtrace")
}

fn report_json(trace: &Path) -> Value {
    let out = vramtrace_command()
        .arg("report")
        .arg("--json")
        .arg(trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("report --json prints JSON")
}

// `vramtrace run` on wl_train: the program's output and exit code pass through, a summary
// goes to stderr, one trace is written, and its JSON report has the planted numbers: 20 MiB
// of async history in 20 objects owned by libtorch_standin.so, and the registration whose
// buffer was freed, orphaned with its destroyed communicator.
captest!(run_and_report_wl_train, |dir| {
    let out = vramtrace_run(dir, "wl_train", &[]);
    let plain = Workload::new("wl_train").run_plain();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    let trace = Trace::load(&traces[0]);
    let pid = trace.header.pid;
    assert_eq!(traces[0], dir.join(format!("r-{pid}.vtrace")));
    let summary = text(&out.stderr);
    assert!(
        summary.contains(&format!("{}: pid {pid}", traces[0].display())),
        "{summary}"
    );
    assert!(summary.contains("20.0 MiB in 20 objects"), "{summary}");
    assert!(summary.contains("libtorch_standin.so"), "{summary}");

    let r = report_json(&traces[0]);
    assert_eq!(r["reading"]["complete"], true);
    assert_eq!(r["reading"]["end_reason"], "exit");
    assert_eq!(r["tracer"]["dropped"], 0);
    assert_eq!(r["events"]["steps"], 20);
    let live = &r["live"];
    assert_eq!(live["device_memory"]["count"], 20);
    assert_eq!(live["device_memory"]["bytes"], 20 * MIB);
    let modules = live["by_module"].as_array().unwrap();
    assert_eq!(modules.len(), 1, "{modules:?}");
    assert_eq!(modules[0]["name"], "libtorch_standin.so");
    assert_eq!(
        (modules[0]["count"].as_u64(), modules[0]["bytes"].as_u64()),
        (Some(20), Some(20 * MIB))
    );
    // One call site: the history append of every step.
    assert_eq!(r["call_sites_total"], 1);
    let site = &r["call_sites"][0];
    assert_eq!(site["api"], "cudaMallocAsync");
    assert_eq!(site["module_name"], "libtorch_standin.so");
    assert_eq!(
        (site["count"].as_u64(), site["bytes"].as_u64()),
        (Some(20), Some(20 * MIB))
    );
    // The registration of the 4 MiB buffer freed after the loop, its communicator destroyed.
    assert_eq!(r["orphans_total"], 1);
    let reg = &r["orphans"][0];
    assert_eq!(reg["category"], "registration");
    assert_eq!(reg["bytes"], 4 * MIB);
    assert_eq!(
        reg["flags"],
        serde_json::json!(["communicator-gone", "buffer-gone"])
    );
    let comms = r["communicators"].as_array().unwrap();
    assert_eq!(comms.len(), 1, "{comms:?}");
    assert_eq!(comms[0]["state"], "destroyed");
    assert_eq!(reg["origin"]["communicator"], comms[0]["comm"]);
    assert_eq!(r["failures"]["total"], 0);
    assert_eq!(r["anomalies"]["total"], 0);
    // The text's orphans table says why in the analysis' words, as its finding does: the
    // object's flags (`communicator-gone, buffer-gone`) name one flag for several reasons.
    let out = vramtrace_command()
        .arg("report")
        .arg(&traces[0])
        .output()
        .unwrap();
    let report = text(&out.stdout);
    let row = (report.lines())
        .skip_while(|l| !l.starts_with("Orphans: live"))
        .find(|l| l.trim_start().starts_with("registration"))
        .unwrap_or_else(|| panic!("no registration row in the orphans table:\n{report}"));
    assert!(
        row.contains(" registration-buffer-gone, registration-communicator-gone "),
        "{row}"
    );
    let kinds = &r["analysis"]["orphans"]["objects"][0]["kinds"];
    assert_eq!(
        *kinds,
        serde_json::json!(["registration-buffer-gone", "registration-communicator-gone"])
    );
});

// A program killed by a signal: `vramtrace run` exits 128 + signal like a shell, and the
// trace says which signal ended it. A program that never touches CUDA leaves no trace and
// its own exit code, and `run` says it made no GPU memory call (the tracer was loaded).
captest!(run_passes_exit_codes_through, |dir| {
    let out = vramtrace_run(dir, "wl_signal", &["term"]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    let traces = trace_files(dir);
    assert_eq!(traces.len(), 1);
    let trace = Trace::load(&traces[0]);
    trace.assert_clean("signal 15");
    assert_eq!(trace.state.summary().device_memory.bytes, 6 * MIB);
    std::fs::remove_file(&traces[0]).unwrap();
    // A closed terminal's hang-up, and SIGUSR1 at a program without a handler (an alert's
    // signal), end the trace as well: their default action ends the process too.
    for (how, sig) in [("hup", 1), ("usr1", 10)] {
        let out = vramtrace_run(dir, "wl_signal", &[how]);
        assert_eq!(out.status.code(), Some(128 + sig), "{}", text(&out.stderr));
        let traces = trace_files(dir);
        assert_eq!(traces.len(), 1);
        let trace = Trace::load(&traces[0]);
        trace.assert_clean(&format!("signal {sig}"));
        assert_eq!(trace.state.summary().device_memory.bytes, 6 * MIB);
        std::fs::remove_file(&traces[0]).unwrap();
    }

    let out = vramtrace_run(dir, "wl_signal", &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("usage: wl_signal"), "{stderr}");
    assert!(
        stderr.contains("\nvramtrace: the program made no GPU memory call (no trace written)\n"),
        "{stderr}"
    );
    assert!(trace_files(dir).is_empty());
});

// `vramtrace run -o traces/job-%p.vtrace` where `traces/` does not exist yet (the README's
// example): the directory is made and the one trace lands in it.
captest!(run_writes_into_a_new_directory, |dir| {
    let out = vramtrace_command()
        .current_dir(dir)
        .args(["run", "-o", "traces/job-%p.vtrace", "--"])
        .arg(workload("wl_train"))
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        .output()
        .expect("running vramtrace");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces = trace_files(&dir.join("traces"));
    assert_eq!(traces.len(), 1, "{traces:?}");
    let pid = Trace::load(&traces[0]).header.pid;
    assert_eq!(traces[0], dir.join(format!("traces/job-{pid}.vtrace")));
});

// A `%` sequence in `-o` that is no placeholder is a typo caught before the program runs: one
// error line naming `-o` and every such sequence, exit 2, no file.
captest!(
    run_refuses_an_unknown_placeholder_before_the_program_runs,
    |dir| {
        let out = vramtrace_command()
            .current_dir(dir)
            .args(["run", "-o", "job-%d-%q.vtrace", "--"])
            .arg(workload("wl_train"))
            .env("LD_LIBRARY_PATH", standin_ld_library_path())
            .output()
            .expect("running vramtrace");
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            text(&out.stderr),
            "error: -o job-%d-%q.vtrace: %d, %q are no placeholders (%p pid, %r rank, %h host, %t \
         start, %% a percent sign); write %% for a percent sign in a file name\n"
        );
        assert!(out.stdout.is_empty(), "the program ran");
        assert!(trace_files(dir).is_empty());
    }
);

// A run whose trace rotation cut and trimmed (two threads of 1,000,000 pairs in segments of
// 1 MiB within 3 MiB): the summary names the trace as asked (`-o`), not the first segment left,
// and says which segments are on disk and what rotation deleted.
captest!(the_run_summary_of_a_rotated_trace_names_the_trace, |dir| {
    let out = vramtrace_command()
        .args(["run", "-o"])
        .arg(dir.join("thr.vtrace"))
        .arg("--")
        .arg(workload("wl_threads"))
        .args(["2", "1000000"])
        .env("LD_LIBRARY_PATH", standin_ld_library_path())
        .env("VRAMTRACE_SEGMENT_BYTES", (1 << 20).to_string())
        .env("VRAMTRACE_MAX_BYTES", (3 << 20).to_string())
        .output()
        .expect("running vramtrace");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let head = format!("vramtrace: {}: pid ", dir.join("thr.vtrace").display());
    let at = err
        .lines()
        .position(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("{err}"));
    let segments = err.lines().nth(at + 1).unwrap();
    let report = crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
    let s = &report["reading"]["segments"];
    let first = &s["first_there"];
    assert_eq!(
        segments,
        format!(
            "  in segments {first}-{} on disk (files from thr.seg{first}.vtrace; every command \
             reads them by the name above); rotation (VRAMTRACE_MAX_BYTES) deleted the first {} \
             segments ({} events)",
            s["last_there"], s["removed"]["segments"], s["removed"]["events"]
        )
        .replace("first 1 segments", "first segment"),
        "{err}"
    );
    // Judged on the last segment, as it says, with the command that reads them all.
    assert!(
        err.contains(&format!(
            "\n  verdict  (of segment {}, the last",
            s["last_there"]
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "\n  next     vramtrace report {}\n",
            dir.join("thr.vtrace").display()
        )),
        "{err}"
    );
});

// The demo's loop as a long job runs it (150 ms a step), in segments of 300 ms, its live alerts
// off: the last segment holds two steps or so, too few to judge growth on. The summary says so
// and where growth is judged; the report of the trace judges it over every segment on disk.
captest!(
    the_run_summary_says_where_growth_is_judged_when_the_last_segment_cannot,
    |dir| {
        let out = vramtrace_command()
            .args(["run", "--segment-seconds", "300ms", "-o"])
            .arg(dir.join("job.vtrace"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_vramtrace-demo"))
            .args(["--program", "--checkpoint"])
            .env("VRAMTRACE_ALERT", "0")
            .output()
            .expect("running vramtrace");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let report = crate::vramtrace_json(["report".as_ref(), "--json".as_ref(), dir.as_os_str()]);
        let s = &report["reading"]["segments"];
        let (first, last) = (
            s["first_there"].as_u64().unwrap(),
            s["last_there"].as_u64().unwrap(),
        );
        assert!(last > 2, "{s}");
        // The last segment holds two steps or so (how many depends on when the tracer cut
        // it, and so on the machine's load): with too few to judge growth, the verdict says so
        // and where growth is judged.
        let verdict = err.lines().find(|l| l.starts_with("  verdict  ")).unwrap();
        assert!(
            verdict.starts_with(&format!("  verdict  (of segment {last}, the last")),
            "{err}"
        );
        if verdict.contains(": too few steps") {
            assert!(
                verdict.starts_with(&format!(
                    "  verdict  (of segment {last}, the last: too few steps in it to judge \
                     growth, which `vramtrace report` judges over the {} segments on disk) ",
                    last - first + 1
                )),
                "{err}"
            );
        } else {
            // Judged on the last segment, it still says that the report reads them all.
            assert!(
                verdict.starts_with(&format!(
                    "  verdict  (of segment {last}, the last; `vramtrace report` reads the {} \
                     segments on disk) ",
                    last - first + 1
                )),
                "{err}"
            );
        }
        let line = wl_train_line("leak");
        assert_eq!(
            report["analysis"]["diagnosis"][0]["site"]["label"],
            format!("main at wl_train.c:{line} → fw_alloc"),
        );
    }
);

/// Chunk start offsets of a trace and the record count of each chunk, from the documented
/// layout (docs/trace-format.md): the header block twice (magic, version, header length,
/// header, crc), then chunks with a 40-byte fixed part (sync, packed length, raw length, items,
/// ...).
fn chunks(bytes: &[u8]) -> (u64, Vec<(u64, u64, u64)>) {
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as u64;
    let first = 2 * (20 + word(12));
    let mut at = first;
    let mut v = Vec::new();
    while at < bytes.len() as u64 {
        let (packed, count) = (word(at as usize + 8), word(at as usize + 16));
        v.push((at, 40 + packed, count));
        at += 40 + packed;
    }
    assert_eq!(at, bytes.len() as u64, "chunks end at the end of the file");
    (first, v)
}

// A trace cut anywhere after its header opens (exit 0) and says where reading stopped:
// between chunks it lacks its end record, inside a chunk it is truncated at that chunk's
// start; the records of the complete chunks before are all read.
captest!(a_cut_trace_reports_how_far_it_got, |dir| {
    // Enough events for several chunks of 256 KiB, however fast the run.
    let run = Workload::new("wl_threads")
        .arg("16")
        .arg("5000")
        .run_traced(dir);
    let full_path = run.single_trace().path;
    let bytes = std::fs::read(&full_path).unwrap();
    let (first, list) = chunks(&bytes);
    assert!(list.len() >= 3, "want several chunks, got {list:?}");
    let records_before = |k: usize| list[..k].iter().map(|c| c.2).sum::<u64>();
    let mut cuts: Vec<(u64, &str, u64, u64)> = vec![(first, "no-end-record", first, 0)];
    // The first two chunks and the last one: a cut before any event, one after complete
    // chunks, and one in the chunk holding the end record.
    let n = list.len();
    for (k, &(start, len, _)) in list.iter().enumerate() {
        if k > 1 && k < n - 1 {
            continue;
        }
        if k > 0 {
            cuts.push((start, "no-end-record", start, records_before(k)));
        }
        cuts.push((start + 7, "truncated", start, records_before(k)));
        cuts.push((start + len / 2, "truncated", start, records_before(k)));
    }
    let last = list.last().unwrap().0;
    cuts.push((
        bytes.len() as u64 - 1,
        "truncated",
        last,
        records_before(list.len() - 1),
    ));
    for (cut, kind, offset, records) in cuts {
        let path = dir.join(format!("cut-{cut}.vtrace"));
        std::fs::write(&path, &bytes[..cut as usize]).unwrap();
        let r = report_json(&path);
        let reading = &r["reading"];
        assert_eq!(reading["complete"], false, "cut at {cut}");
        assert_eq!(reading["ending"]["kind"], kind, "cut at {cut}");
        assert_eq!(reading["ending"]["offset"], offset, "cut at {cut}");
        assert_eq!(reading["records"], records, "cut at {cut}");
        // The table says the same in words.
        let out = vramtrace_command()
            .arg("report")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "cut at {cut}: {}",
            text(&out.stderr)
        );
        let words = match kind {
            "truncated" => format!("truncated: cut off inside the chunk at byte {offset}"),
            _ => format!("no end record: the trace stops at byte {offset}"),
        };
        assert!(
            text(&out.stdout).contains(&words),
            "cut at {cut}: {}",
            text(&out.stdout)
        );
    }
    let whole = report_json(&full_path);
    assert_eq!(whole["reading"]["complete"], true);
    assert_eq!(whole["reading"]["records"], records_before(list.len()));
});

// A file that is not a trace (or is cut inside its header): exit 2 and one error line.
captest!(a_file_that_is_no_trace_is_one_error_line, |dir| {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let random: Vec<u8> = (0..65536)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let path = dir.join("random.bin");
    std::fs::write(&path, &random).unwrap();
    let run = Workload::new("wl_runtime").run_traced(dir);
    let trace = std::fs::read(run.single_trace().path).unwrap();
    let cut = dir.join("header-cut.bin");
    std::fs::write(&cut, &trace[..20]).unwrap();
    for p in [&path, &cut] {
        for json in [false, true] {
            let mut c = vramtrace_command();
            c.arg("report");
            if json {
                c.arg("--json");
            }
            let out = c.arg(p).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{}", p.display());
            assert_eq!(text(&out.stdout), "", "{}", p.display());
            let err = text(&out.stderr);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with("error: ") && err.contains(&*p.to_string_lossy()),
                "{err}"
            );
        }
    }
});

// The README's demo of `diff`: `vramtrace-demo --regression` traces the loop a second time with
// a regression planted (4 MiB more kept every step, at `fw_alloc` called from wl_train.c line
// 111) and diffs it against the first run: exit 1, the planted site named first. An unknown
// flag is an error, not silently the plain demo.
captest!(the_demo_diffs_a_planted_regression, |dir| {
    let demo = || {
        let mut c = vramtrace_tests::traced::clean_command(env!("CARGO_BIN_EXE_vramtrace-demo"));
        c.current_dir(dir);
        c
    };
    let out = demo().arg("--regression").output().unwrap();
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}{}", text(&out.stderr));
    assert!(
        shown.contains("\nVERDICT  REGRESSION (exit 1): "),
        "{shown}"
    );
    let top = shown
        .lines()
        .find(|l| l.starts_with("  top difference, view driver: "))
        .unwrap_or_else(|| panic!("no top difference in: {shown}"));
    assert!(
        top.contains("fw_alloc") && top.contains("wl_train.c:131") && top.contains("+80.0 MiB"),
        "{top}"
    );
    // The README shows these lines of it: they must be what the demo prints.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let shown_in_readme: Vec<&str> = (readme.lines())
        .filter(|l| l.starts_with("VERDICT  REGRESSION") || l.starts_with("  top difference, "))
        .collect();
    assert_eq!(shown_in_readme.len(), 2, "the README's demo of diff");
    // The time to full is the demo's step time, which varies from run to run: `(6.9 ms)`.
    let timeless = |l: &str| match l.split_once("steps (") {
        Some((head, rest)) => format!("{head}steps (…{}", &rest[rest.find(')').unwrap_or(0)..]),
        None => l.to_string(),
    };
    for line in shown_in_readme {
        assert!(
            shown.lines().any(|l| timeless(l) == timeless(line)),
            "README: {line}\ndemo: {shown}"
        );
    }
    // The live alert's threshold is the default share of the stand-in's 512 MiB, and says so.
    let said = format!("{shown}{}", text(&out.stderr));
    assert!(
        said.contains("(above the threshold of 524.3 KiB per step, 0.1% of 512.0 MiB); "),
        "{said}"
    );
    let traces = trace_files(&dir.join("vramtrace-demo"));
    assert_eq!(traces.len(), 2, "{traces:?}");

    // Run again, it replaces its own trace and nothing else named like one: a user's notes,
    // another program's trace and a user's own trace of the same loop (here a copy of the
    // demo's) under the demo's names stay as they were.
    let kept = dir.join("vramtrace-demo");
    std::fs::write(kept.join("train-notes.vtrace"), "notes\n").unwrap();
    std::fs::write(kept.join("train-7.vtrace"), "not a trace\n").unwrap();
    let other =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gpu/healthy_compile-bare.vtrace");
    std::fs::copy(&other, kept.join("train-8.vtrace")).unwrap();
    let demo_trace = traces
        .iter()
        .find(|t| t.to_string_lossy().contains("/train-"));
    let users = std::fs::read(demo_trace.unwrap()).unwrap();
    std::fs::write(kept.join("train-9228.vtrace"), &users).unwrap();
    let out = demo().output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let removed: Vec<&str> = (shown.lines())
        .filter(|l| l.starts_with("(removed the demo's earlier trace "))
        .collect();
    let first = traces
        .iter()
        .find(|t| t.to_string_lossy().contains("/train-"));
    let first = first.unwrap().file_name().unwrap().to_string_lossy();
    assert!(
        removed.len() == 1 && removed[0].ends_with(&format!("{first})")),
        "{shown}"
    );
    assert_eq!(
        std::fs::read(kept.join("train-notes.vtrace")).unwrap(),
        b"notes\n"
    );
    assert_eq!(
        std::fs::read(kept.join("train-7.vtrace")).unwrap(),
        b"not a trace\n"
    );
    assert_eq!(
        std::fs::read(kept.join("train-8.vtrace")).unwrap(),
        std::fs::read(&other).unwrap()
    );
    assert_eq!(
        std::fs::read(kept.join("train-9228.vtrace")).unwrap(),
        users
    );

    let out = demo().args(["--program", "--extra-leek"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with(
            "vramtrace-demo: error: unknown arguments '--program --extra-leek'\nusage: "
        ),
        "{}",
        text(&out.stderr)
    );
});

/// `vramtrace CMD ARGS...`: exit code and stdout.
fn vramtrace_out(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = vramtrace_command().args(args).output().unwrap();
    (out.status.code(), text(&out.stdout))
}

// One place, one name: the planted extra leak of wl_train (main calls fw_alloc at line 111 and
// keeps the 4 MiB it returns) reads the same in run's summary, the report's first finding,
// replay, diff's top difference, export csv-live and the HTML page's chart.
captest!(a_place_has_one_label_in_every_output, |dir| {
    let line = wl_train_line("extra_leak");
    let label = format!("main at wl_train.c:{line} → fw_alloc");
    let a_dir = dir.join("a");
    let b_dir = dir.join("b");
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    assert_eq!(
        vramtrace_run(&a_dir, "wl_train", &[]).status.code(),
        Some(0)
    );
    let run = vramtrace_run(&b_dir, "wl_train", &["--extra-leak"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let (a, b) = (trace_files(&a_dir).remove(0), trace_files(&b_dir).remove(0));
    // run's summary: the largest live site first.
    let summary = text(&run.stderr);
    let first = summary
        .lines()
        .find(|l| l.contains("80.0 MiB"))
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        first.contains(&format!(" {label} (libtorch_standin.so)")),
        "{first}"
    );
    // The report: the first finding, and the live set.
    let r = report_json(&b);
    assert_eq!(
        r["analysis"]["diagnosis"][0]["site"]["label"],
        label.as_str()
    );
    assert_eq!(r["analysis"]["leaks"]["sites"][0]["label"], label.as_str());
    // replay at the last step.
    let args = [
        "replay".as_ref(),
        "--json".as_ref(),
        "--at".as_ref(),
        "step 20".as_ref(),
    ];
    let (code, out) = vramtrace_out(&[&args[..], &[b.as_os_str()]].concat());
    assert_eq!(code, Some(0), "{out}");
    let replay: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        replay["analysis"]["diagnosis"][0]["site"]["label"],
        label.as_str()
    );
    // diff: the new leak is the top difference.
    let args = [
        "diff".as_ref(),
        "--json".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
    ];
    let (code, out) = vramtrace_out(&args);
    assert_eq!(code, Some(1), "{out}");
    let diff: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(diff["top_difference"]["label"], label.as_str());
    // export csv-live: its 20 objects.
    let csv = dir.join("live.csv");
    let (code, _) = vramtrace_out(&[
        "export".as_ref(),
        "--format".as_ref(),
        "csv-live".as_ref(),
        "-o".as_ref(),
        csv.as_os_str(),
        b.as_os_str(),
    ]);
    assert_eq!(code, Some(0));
    let rows = std::fs::read_to_string(&csv).unwrap();
    let labelled = rows
        .lines()
        .filter(|l| l.contains(&format!(",{label},")))
        .count();
    assert_eq!(labelled, 20, "{rows}");
    // The HTML page: the chart's band (by native function, the default for a native program).
    let page = dir.join("page.html");
    let (code, _) = vramtrace_out(&[
        "report".as_ref(),
        "--html".as_ref(),
        page.as_os_str(),
        b.as_os_str(),
    ]);
    assert_eq!(code, Some(0));
    let html = std::fs::read_to_string(&page).unwrap();
    let tag = r#"id="vramtrace-data">"#;
    let start = html.find(tag).unwrap() + tag.len();
    let end = html[start..].find("</script>").unwrap() + start;
    let data: Value = serde_json::from_str(&html[start..end]).unwrap();
    let bands = data["devices"][0]["bands"]["function"].as_array().unwrap();
    assert!(
        bands.iter().any(|b| b["label"] == label.as_str()),
        "{bands:#?}"
    );
});

/// The line of wl_train.c that `// @marker` ends.
fn wl_train_line(marker: &str) -> usize {
    let source =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/wl_train.c"))
            .unwrap();
    source
        .lines()
        .position(|l| l.trim_end().ends_with(&format!("// @{marker}")))
        .unwrap_or_else(|| panic!("no // @{marker} in wl_train.c"))
        + 1
}
