//! `vramtrace-gpu-check RESULTS_DIR`: checks the results of `validation/gpu/run.sh` (the unpacked
//! `results.tar.gz`) against what the traced programs and NCCL say about themselves, and prints
//! one Markdown table row per criterion — the table that goes into docs/gpu-validation.md.
//!
//! Criteria (issue 3): PyTorch's caching allocator's reserved bytes, expandable segments' mapped
//! physical bytes and the async backend's allocated bytes equal what the trace holds at every step
//! mark; every pointer NCCL's ALLOC debug lines name is a live object of libnccl and of the
//! communicator; cuBLAS workspaces and the extension's buffers are owned by their modules; the
//! failed request of the OOM scenario is there with its live set; the driver's used memory minus
//! the context baseline minus the traced live bytes stays under 2 MiB per device; the programs
//! print the same with and without the tracer. Exit code 1 when a criterion fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use vramtrace_collector::event::{Event, Op};
use vramtrace_collector::format::{Record, TraceReader};
use vramtrace_collector::live::{Category, LiveObject, LiveState};

/// One checked criterion.
struct Row {
    scenario: String,
    criterion: String,
    expected: String,
    found: String,
    ok: bool,
}

struct Checker {
    dir: PathBuf,
    rows: Vec<Row>,
}

/// `key=value` fields of the `VT <tag> ...` lines a scenario printed.
fn vt_lines(path: &Path, tag: &str) -> Vec<BTreeMap<String, String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("VT "))
        .filter_map(|l| l.strip_prefix(tag))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn num(fields: &BTreeMap<String, String>, key: &str) -> u64 {
    fields.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The module file name that owns an object.
fn owner<'a>(state: &'a LiveState, o: &LiveObject) -> &'a str {
    o.origin
        .module
        .and_then(|id| state.modules().by_id(id))
        .map(|m| m.file_name())
        .unwrap_or("?")
}

/// Live bytes of objects owned by a module whose file name starts with `module`, in `categories`.
fn owned_bytes(state: &LiveState, module: &str, categories: &[Category]) -> u64 {
    state
        .live_objects()
        .filter(|o| categories.contains(&o.category) && owner(state, o).starts_with(module))
        .map(|o| o.bytes)
        .sum()
}

/// Replays a trace, calling `at_mark(state, mark_number)` after every step mark (1-based).
fn replay(path: &Path, mut at_mark: impl FnMut(&LiveState, u64)) -> Option<LiveState> {
    let mut reader = TraceReader::open(path).ok()?;
    let mut state = LiveState::new();
    let mut marks = 0;
    for r in reader.by_ref() {
        state.apply(&r);
        if let Record::Event(Event {
            op: Op::MarkStep { .. },
            ..
        }) = r
        {
            marks += 1;
            at_mark(&state, marks);
        }
    }
    Some(state)
}

impl Checker {
    fn row(&mut self, scenario: &str, criterion: &str, expected: String, found: String, ok: bool) {
        self.rows.push(Row {
            scenario: scenario.into(),
            criterion: criterion.into(),
            expected,
            found,
            ok,
        });
    }

    /// The scenario's trace (the largest, if the program started helpers that traced too).
    fn trace(&self, scenario: &str) -> Option<PathBuf> {
        let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "vtrace")
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{scenario}-")))
            })
            .map(|p| (std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0), p))
            .collect();
        found.sort();
        found.pop().map(|(_, p)| p)
    }

    fn out(&self, scenario: &str, kind: &str) -> PathBuf {
        self.dir.join(format!("{scenario}.{kind}.out"))
    }

    fn identical_output(&mut self, scenario: &str) {
        let a = std::fs::read(self.out(scenario, "plain"));
        let b = std::fs::read(self.out(scenario, "traced"));
        let (ok, found) = match (a, b) {
            (Ok(a), Ok(b)) if a == b => (true, format!("identical ({} bytes)", a.len())),
            (Ok(_), Ok(_)) => (false, "different".into()),
            _ => (false, "missing".into()),
        };
        self.row(
            scenario,
            "stdout with and without the tracer",
            "identical".into(),
            found,
            ok,
        );
    }

    /// PyTorch's own counter at each printed step equals what the trace holds at the next mark.
    fn per_step(&mut self, scenario: &str, counter: &str, categories: &[Category], what: &str) {
        let printed: Vec<u64> = vt_lines(&self.out(scenario, "traced"), "step")
            .iter()
            .chain(vt_lines(&self.out(scenario, "traced"), "end").iter())
            .map(|f| num(f, counter))
            .collect();
        let Some(path) = self.trace(scenario) else {
            self.row(scenario, what, "a trace".into(), "none".into(), false);
            return;
        };
        let mut traced = BTreeMap::new();
        replay(&path, |s, mark| {
            traced.insert(mark, owned_bytes(s, "libc10_cuda.so", categories));
        });
        // Marks: one at each step start, one after the loop, one after the end line; the value
        // printed for step k is held at mark k + 2, the end line's at the last mark.
        let mut pairs = Vec::new();
        for (k, &p) in printed.iter().enumerate() {
            let mark = if k + 1 == printed.len() {
                traced.keys().next_back().copied().unwrap_or(0)
            } else {
                k as u64 + 2
            };
            pairs.push((p, traced.get(&mark).copied().unwrap_or(u64::MAX)));
        }
        let ok = !pairs.is_empty() && pairs.iter().all(|(p, t)| p == t);
        let fmt = |v: Vec<u64>| {
            v.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        self.row(
            scenario,
            what,
            format!("torch: {}", fmt(pairs.iter().map(|p| p.0).collect())),
            format!("trace: {}", fmt(pairs.iter().map(|p| p.1).collect())),
            ok,
        );
    }

    fn nccl(&mut self) {
        let scenario = "nccl";
        // NCCL's own log of the traced process (the plain run writes one too).
        let pid = self
            .trace(scenario)
            .and_then(|p| TraceReader::open(p).ok().map(|r| r.header().pid));
        let mut pointers: Vec<(bool, u64, u64)> = Vec::new();
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if pid.is_none_or(|p| name != format!("nccl-debug.{p}.log")) {
                continue;
            }
            for l in std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .lines()
            {
                let host = l.contains("Cuda Host Alloc Size");
                if !(host || l.contains("Cuda Alloc Size")) {
                    continue;
                }
                let w: Vec<&str> = l.split_whitespace().collect();
                let size = w
                    .iter()
                    .position(|&x| x == "Size")
                    .and_then(|i| w.get(i + 1)?.parse().ok());
                let ptr = w.iter().position(|&x| x == "pointer").and_then(|i| {
                    u64::from_str_radix(w.get(i + 1)?.trim_start_matches("0x"), 16).ok()
                });
                if let (Some(s), Some(p)) = (size, ptr) {
                    pointers.push((host, p, s));
                }
            }
        }
        let Some(path) = self.trace(scenario) else {
            self.row(
                scenario,
                "NCCL allocations in the trace",
                "a trace".into(),
                "none".into(),
                false,
            );
            return;
        };
        let mut at_first = None;
        let mut after_destroy = None;
        let state = replay(&path, |s, mark| {
            let objects: Vec<(Category, u64, u64, String, Option<u64>)> = s
                .live_objects()
                .map(|o| {
                    (
                        o.category,
                        o.address,
                        o.bytes,
                        owner(s, &o).to_string(),
                        o.origin.communicator,
                    )
                })
                .collect();
            if mark == 1 {
                at_first = Some(objects);
            } else if mark == 2 {
                after_destroy = Some(objects);
            }
        });
        let comms: Vec<u64> = state
            .as_ref()
            .map(|s| s.communicators().map(|c| c.comm).collect())
            .unwrap_or_default();
        let objects = at_first.unwrap_or_default();
        let mut matched = 0;
        let mut misses = Vec::new();
        for &(host, p, size) in &pointers {
            let hit = objects.iter().find(|(cat, addr, bytes, module, comm)| {
                let kinds_ok = if host {
                    *cat == Category::HostPinned
                } else {
                    matches!(cat, Category::Mapping | Category::Device | Category::Async)
                };
                kinds_ok
                    && p >= *addr
                    && p + size <= *addr + (*bytes).max(1)
                    && module.starts_with("libnccl")
                    && comm.is_some_and(|c| comms.contains(&c))
            });
            match hit {
                Some(_) => matched += 1,
                None => misses.push(format!("{:#x}", p)),
            }
        }
        self.row(
            scenario,
            "every pointer of NCCL's ALLOC lines is a live libnccl object of the communicator (after the all-reduces)",
            format!("{} pointers, {} communicator(s)", pointers.len(), comms.len()),
            if misses.is_empty() {
                format!("{matched} matched")
            } else {
                format!("{matched} matched; missing {}", misses.iter().take(5).cloned().collect::<Vec<_>>().join(" "))
            },
            !pointers.is_empty() && misses.is_empty(),
        );
        let left: Vec<_> = after_destroy
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.3.starts_with("libnccl") && o.0 != Category::Mapping)
            .collect();
        let bytes: u64 = left.iter().map(|o| o.2).sum();
        self.row(
            scenario,
            "NCCL buffers left after destroy_process_group() (listed by the report as orphans)",
            "listed".into(),
            format!("{} objects, {} bytes", left.len(), bytes),
            true,
        );
    }

    fn owned(&mut self, scenario: &str, module: &str, criterion: &str, min_objects: usize) {
        let Some(path) = self.trace(scenario) else {
            self.row(scenario, criterion, "a trace".into(), "none".into(), false);
            return;
        };
        // Ownership is judged on everything ever made (a workspace may be freed at exit): the
        // largest live set seen at any step mark or at the end.
        let mut best: (usize, u64) = (0, 0);
        let state = replay(&path, |s, _| {
            let (n, b) = count_owned(s, module);
            if b > best.1 {
                best = (n, b);
            }
        });
        if let Some(s) = state.as_ref() {
            let (n, b) = count_owned(s, module);
            if b > best.1 {
                best = (n, b);
            }
        }
        self.row(
            scenario,
            criterion,
            format!("≥ {min_objects} objects owned by {module}"),
            format!("{} objects, {} bytes", best.0, best.1),
            best.0 >= min_objects,
        );
    }

    fn oom(&mut self) {
        let scenario = "oom";
        let Some(state) = self.trace(scenario).and_then(|p| replay(&p, |_, _| {})) else {
            self.row(
                scenario,
                "the failed request",
                "a trace".into(),
                "none".into(),
                false,
            );
            return;
        };
        let fails: Vec<_> = state
            .failures()
            .iter()
            .filter(|f| f.out_of_memory)
            .map(|f| (f.request_bytes, f.live_device_bytes))
            .collect();
        let ok = fails
            .iter()
            .any(|&(s, live)| s == 4 << 40 && live >= 1 << 30);
        self.row(
            scenario,
            "the 4 TiB request fails with out-of-memory and the live set at that instant is there",
            "size 4398046511104, ≥ 1 GiB live".into(),
            format!("{fails:?}"),
            ok,
        );
    }

    fn accounting(&mut self, scenario: &str) {
        let Some(state) = self.trace(scenario).and_then(|p| replay(&p, |_, _| {})) else {
            return;
        };
        for a in state.device_accounts() {
            let unexplained = a.unexplained();
            self.row(
                scenario,
                &format!(
                    "device {}: driver used − context baseline − traced live",
                    a.device
                ),
                "< 2 MiB".into(),
                format!(
                    "{unexplained} B (used {} B, baseline {} B, traced {} B, {} samples)",
                    a.last_used,
                    a.baseline(),
                    a.last_traced,
                    a.samples
                ),
                unexplained.unsigned_abs() < 2 << 20,
            );
        }
    }

    /// Python attribution: the innermost frame in `file` of the allocations that grew.
    fn python_line(&mut self, scenario: &str, file: &str, marker: &str, min_bytes: u64) {
        let source = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../validation/gpu/scenarios")
                .join(file),
        )
        .unwrap_or_default();
        let line = source
            .lines()
            .position(|l| l.contains(marker))
            .map(|i| i as u32 + 1)
            .unwrap_or(0);
        let Some(path) = self.trace(scenario) else {
            self.row(
                scenario,
                "Python line of the leak",
                "a trace".into(),
                "none".into(),
                false,
            );
            return;
        };
        let by_line = |s: &LiveState| {
            let mut by_line: BTreeMap<u32, u64> = BTreeMap::new();
            for o in s.live_objects() {
                if o.device_bytes() == 0 {
                    continue;
                }
                let inner = s
                    .python_stacks()
                    .frames(o.origin.py_stack)
                    .find(|f| f.file.is_some_and(|p| p.ends_with(file)));
                if let Some(f) = inner {
                    *by_line.entry(f.line).or_default() += o.bytes;
                }
            }
            by_line
        };
        let mut per_mark: Vec<u64> = Vec::new();
        let mut top_lines: BTreeMap<u32, u64> = BTreeMap::new();
        let end = replay(&path, |s, _| {
            top_lines = by_line(s);
            per_mark.push(top_lines.get(&line).copied().unwrap_or(0));
        });
        if per_mark.is_empty() {
            // No steps: what the line holds when the program ends.
            let at_end = end.as_ref().map(by_line).unwrap_or_default();
            let held = at_end.get(&line).copied().unwrap_or(0);
            self.row(
                scenario,
                &format!("leak attributed to {file}:{line} ({marker})"),
                format!("{min_bytes} bytes live at that line at exit"),
                format!("lines holding device memory at exit: {at_end:?}"),
                held == min_bytes,
            );
            return;
        }
        let steps: Vec<i64> = per_mark
            .windows(2)
            .map(|w| w[1] as i64 - w[0] as i64)
            .collect();
        let grows = steps.len() >= 3 && steps.iter().all(|&d| d > 0);
        self.row(
            scenario,
            &format!("leak attributed to {file}:{line} ({marker})"),
            "live bytes at that line grow every step".into(),
            format!(
                "per step mark: {per_mark:?}; lines holding device memory at the last mark: {top_lines:?}"
            ),
            grows,
        );
    }

    fn overhead(&mut self) {
        let read = |kind: &str| -> Option<f64> {
            std::fs::read_to_string(self.dir.join(format!("train.{kind}.err")))
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("VT-TIME train median_ms="))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        };
        if let (Some(p), Some(t)) = (read("plain"), read("traced")) {
            self.row(
                "train",
                "median step time, plain vs traced (GPT-style loop, caching allocator)",
                format!("{p:.2} ms"),
                format!("{t:.2} ms ({:+.1}%)", (t / p - 1.0) * 100.0),
                true,
            );
        }
    }
}

fn count_owned(s: &LiveState, module: &str) -> (usize, u64) {
    let mut n = 0;
    let mut b = 0;
    for o in s.live_objects() {
        if o.device_bytes() > 0 && owner(s, &o).starts_with(module) {
            n += 1;
            b += o.bytes;
        }
    }
    (n, b)
}

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: vramtrace-gpu-check RESULTS_DIR  (the unpacked results.tar.gz)");
        return ExitCode::from(2);
    };
    let mut c = Checker {
        dir,
        rows: Vec::new(),
    };
    for s in [
        "default",
        "expandable",
        "async",
        "nccl",
        "cublas",
        "extension",
        "cupy",
        "jax",
        "oom",
        "pyleak",
        "train",
    ] {
        if c.out(s, "plain").exists() {
            c.identical_output(s);
        }
    }
    c.per_step(
        "default",
        "reserved",
        &[Category::Device],
        "cudaMalloc bytes of libc10_cuda.so = torch.cuda.memory_reserved() at every step",
    );
    c.per_step(
        "expandable",
        "reserved",
        &[Category::Physical],
        "mapped physical bytes of libc10_cuda.so = memory_reserved() at every step",
    );
    c.per_step(
        "async",
        "allocated",
        &[Category::Async],
        "cudaMallocAsync bytes of libc10_cuda.so = torch.cuda.memory_allocated() at every step",
    );
    c.nccl();
    c.owned(
        "cublas",
        "libcublas",
        "cuBLAS/cuBLASLt workspaces owned by libcublas*",
        1,
    );
    c.owned(
        "extension",
        "libleaky.so",
        "the extension's 2 leaked buffers owned by libleaky.so",
        2,
    );
    c.owned(
        "cupy",
        "runtime.cpython",
        "CuPy's arrays owned by its runtime module",
        10,
    );
    c.oom();
    for s in [
        "default",
        "expandable",
        "async",
        "nccl",
        "cublas",
        "extension",
        "oom",
        "pyleak",
        "accounting",
        "accounting_eager",
        "default_eager",
        "nccl_eager",
    ] {
        c.accounting(s);
    }
    c.python_line("pyleak", "py_leak.py", "# LEAK-LINE", 0);
    c.python_line("extension", "extension.py", "lib.leaky_run(", 16 << 20);
    c.overhead();

    println!("| scenario | criterion | expected | found | result |");
    println!("| --- | --- | --- | --- | --- |");
    let mut failed = 0;
    for r in &c.rows {
        if !r.ok {
            failed += 1;
        }
        println!(
            "| {} | {} | {} | {} | {} |",
            r.scenario,
            r.criterion,
            r.expected,
            r.found,
            if r.ok { "pass" } else { "FAIL" }
        );
    }
    eprintln!("{} criteria, {failed} failed", c.rows.len());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
