//! Integration tests of the CPU stand-ins themselves (no tracer involved): every workload runs
//! to its planted end (exit 0, or death by the named signal for `wl_signal`) and prints the same
//! transcript twice in a row; `wl_probe` pins down single semantics of the driver stand-in; the
//! built libraries have the ELF shape of the real ones (versioned libcudart exports, no
//! DT_NEEDED on libcuda, NCCL exporting no cuda* symbol, ...).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

use vramtrace_tests::{standin_command, standin_lib_dir, workload};

fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = standin_command(name);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", workload(name).display()))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs a workload twice; both runs must exit 0, end with `result: OK` and print the same.
fn deterministic(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let a = run(name, args, env);
    let b = run(name, args, env);
    let (sa, sb) = (stdout(&a), stdout(&b));
    assert!(
        a.status.success(),
        "{name} {args:?} failed: {:?}\n{sa}\n{}",
        a.status,
        String::from_utf8_lossy(&a.stderr)
    );
    assert!(
        b.status.success(),
        "{name} {args:?} failed on the second run: {:?}",
        b.status
    );
    assert_eq!(
        sa, sb,
        "{name} {args:?}: transcript differs between two runs"
    );
    assert!(!sa.contains("MISMATCH"), "{name}: {sa}");
    sa
}

fn ends_ok(s: &str) {
    assert!(s.trim_end().ends_with("result: OK (0 mismatches)"), "{s}");
}

#[test]
fn wl_runtime_transcript() {
    let s = deterministic("wl_runtime", &[], &[]);
    ends_ok(&s);
    assert!(
        s.contains("cudaMalloc(2147483648) = 2 ptr=0x1\n"),
        "OOM leaves the pointer: {s}"
    );
    assert!(
        s.contains("cudaFree(0x700000100000) = 1\n"),
        "double free: {s}"
    );
    assert!(s.contains("cudaHostRegister(static buffer, 65536) = 712\n"));
    assert!(s.contains("cudaHostUnregister(static buffer) = 713\n"));
    assert!(
        s.contains("cudaFree(0x710000000000) = 1\n"),
        "free after cudaDeviceReset"
    );
    assert!(s.contains(
        "leaked: L1=0x700000000000 L2=0x700000100000 L3=0x400000000000 L4=0x700000110000 \
         L5=0x700000112800 L6=0x700000152800\n"
    ));
}

#[test]
fn wl_driver_transcript() {
    let s = deterministic("wl_driver", &[], &[]);
    ends_ok(&s);
    assert!(
        s.starts_with("cuMemAlloc_v2(4096) = 3 ptr=0x1\n"),
        "before cuInit: {s}"
    );
    assert!(s.contains("cuMemAddressFree(0x600000000000, 8 MiB) = 0 (V1 still mapped)"));
    assert!(s.contains("cuMemGetInfo_v2 = 0 free=1065029632 total=1073741824 used=8712192\n"));
}

#[test]
fn wl_closure_transcript_same_with_internal_pointers() {
    let plain = deterministic("wl_closure", &[], &[]);
    ends_ok(&plain);
    let internal = deterministic("wl_closure", &[], &[("STANDIN_GPA_INTERNAL", "1")]);
    assert_eq!(
        plain, internal,
        "STANDIN_GPA_INTERNAL must not change behaviour"
    );
    assert!(plain.contains("F cuMemAlloc[v1, gpa](90112) = 0 ptr=0x10000000\n"));
    assert!(plain.contains("E cuMemAllocAsync_ptsz[gpa](86016) = 0 ptr=0x700000024000\n"));
}

#[test]
fn wl_cublas_transcript() {
    let s = deterministic("wl_cublas", &[], &[]);
    ends_ok(&s);
    assert!(s.contains("cublasStandinWorkspaceInfo(handle 2) = 0 ptr=0x700000400000 size=4194304"));
}

#[test]
fn wl_framework_transcripts() {
    let s = deterministic("wl_framework", &[], &[]);
    ends_ok(&s);
    let leak = deterministic("wl_framework", &["leak"], &[]);
    ends_ok(&leak);
    assert!(!leak.contains("ncclCommDestroy(split)"));
    assert!(!leak.contains("ncclCommDeregister(reg2)"));
    let orphan = deterministic(
        "wl_framework",
        &[],
        &[("STANDIN_NCCL_LEAK_ON_DESTROY", "1")],
    );
    assert!(
        orphan.contains("cudaMemGetInfo = 0 used=8588800\n"),
        "{orphan}"
    );
}

#[test]
fn nccl_debug_alloc_lines() {
    let o = run(
        "wl_framework",
        &[],
        &[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,ALLOC")],
    );
    assert!(o.status.success());
    let s = stdout(&o);
    let dev = s
        .lines()
        .filter(|l| l.contains("NCCL INFO") && l.contains(" Cuda Alloc Size "))
        .count();
    let host = s
        .lines()
        .filter(|l| l.contains("NCCL INFO") && l.contains(" Cuda Host Alloc Size "))
        .count();
    // 3 communicators x (2 channels + proxy VMM + first all-reduce) + one ncclMemAlloc.
    assert_eq!(dev, 13, "{s}");
    // 3 communicators x (init host buffer + proxy thread buffer).
    assert_eq!(host, 6, "{s}");
}

#[test]
fn wl_fork_transcript() {
    let s = deterministic("wl_fork", &["200"], &[]);
    ends_ok(&s);
    assert_eq!(
        s.lines()
            .filter(|l| l.contains("cudaMalloc(8192) = 0 ptr=0x700000100000"))
            .count(),
        200
    );
    assert!(s.contains("parent reaped 200 children\n"));
}

#[test]
fn wl_threads_totals() {
    let s = deterministic("wl_threads", &[], &[]);
    ends_ok(&s);
    assert!(s.starts_with(
        "threads=16 pairs_per_thread=1000 calls=32136 failed=0 leaked_buffers=136 leaked_bytes=557056\n"
    ));
    let s = deterministic("wl_threads", &["4", "50"], &[]);
    assert!(
        s.contains("calls=410 failed=0 leaked_buffers=10 leaked_bytes=40960"),
        "{s}"
    );
}

#[test]
fn wl_signal_dies_by_the_signal() {
    for (arg, sig) in [("segv", 11), ("abort", 6), ("term", 15)] {
        let a = run("wl_signal", &[arg], &[]);
        let b = run("wl_signal", &[arg], &[]);
        assert_eq!(a.status.signal(), Some(sig), "{arg}: {:?}", a.status);
        assert_eq!(stdout(&a), stdout(&b));
        assert_eq!(
            stdout(&a),
            format!(
                "cudaMalloc(1048576) = 0 ptr=0x700000000000\ncudaMalloc(2097152) = 0 ptr=0x700000100000\n\
                 cudaMalloc(3145728) = 0 ptr=0x700000300000\nraising {arg}\n"
            )
        );
    }
    assert_eq!(run("wl_signal", &[], &[]).status.code(), Some(2));
}

#[test]
fn wl_train_transcript() {
    let s = deterministic("wl_train", &[], &[]);
    ends_ok(&s);
    assert_eq!(s.lines().filter(|l| l.starts_with("step ")).count(), 20);
    assert!(s.contains("  history[19] = 0x700002002000\n"));
    assert!(s.contains("cudaMemGetInfo = 0 used=25165824\n"));
}

#[test]
fn bench_calls_prints_three_measures() {
    let o = run("bench_calls", &["2000", "3"], &[]);
    assert!(o.status.success());
    let s = stdout(&o);
    let names: Vec<&str> = s
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "runtime_async_pair",
            "driver_async_gpa",
            "baseline_ctx_device"
        ],
        "{s}"
    );
    for l in s.lines() {
        let v: Vec<f64> = l
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        // Median and fastest wall time, median CPU time of the calling thread.
        assert_eq!(v.len(), 3, "{l}");
        assert!(v[0] >= v[1] && v[1] > 0.0 && v[2] > 0.0, "{l}");
    }
    // One measure alone when asked.
    let o = run("bench_calls", &["2000", "3", "driver"], &[]);
    assert!(o.status.success());
    let s = stdout(&o);
    let names: Vec<&str> = s
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(names, ["driver_async_gpa"], "{s}");
}

fn probe(scenario: &str, env: &[(&str, &str)]) -> String {
    let s = deterministic("wl_probe", &[scenario], env);
    ends_ok(&s);
    s
}

#[test]
fn oom_leaves_pointer_and_capacity_is_exact() {
    let s = probe("oom", &[]);
    assert!(s.contains("over_capacity rc=2 ptr=0x1234\n"), "{s}");
    assert!(s.contains("whole_device rc=0 ptr=0x700000000000\n"));
    assert!(s.contains("one_more rc=2 ptr=0x5678\n"));
    assert!(s.contains("double_free rc=1\n"));
    assert!(s.contains("zero_size rc=1\n"));
}

#[test]
fn freed_addresses_are_reused_lowest_first() {
    let s = probe("reuse", &[]);
    assert!(s.contains("d=0x700000001000 reused=1"), "{s}");
    assert!(s.contains("e=0x700000000000 coalesced=1 used=8704"), "{s}");
}

#[test]
fn env_knobs_set_devices_and_capacity() {
    let s = probe(
        "info",
        &[("STANDIN_DEVICES", "3"), ("STANDIN_DEVICE_MEM", "67108864")],
    );
    assert!(s.starts_with("devices=3\n"), "{s}");
    assert!(
        s.contains("device=2 total=67108864 first_ptr=0x720000000000 rc=0"),
        "{s}"
    );
    let s = probe("info", &[("STANDIN_DEVICE_MEM", "64M")]);
    assert!(
        s.contains("device=1 total=67108864 first_ptr=0x710000000000"),
        "{s}"
    );
}

#[test]
fn calls_before_cuinit_fail() {
    let s = probe("noinit", &[]);
    assert!(
        s.contains("cuMemAlloc_v2=3\ncuDeviceGetCount=3\ncuCtxGetDevice=3\n"),
        "{s}"
    );
    assert!(
        s.contains("cuGetProcAddress_v2=0\ncuDriverGetVersion=0 version=13000\n"),
        "{s}"
    );
}

#[test]
fn async_pool_caches_until_trim() {
    let s = probe("pool", &[]);
    for l in [
        "alloc used=1048576",
        "freed used=1048576",
        "realloc same=1 used=1048576",
        "double_free rc=1",
        "trim_keep_2MiB used=1048576",
        "trim_0 used=0",
    ] {
        assert!(s.contains(l), "missing {l}: {s}");
    }
}

#[test]
fn vmm_follows_the_nccl_release_pattern() {
    let s = probe("vmm", &[]);
    for l in [
        "create_unaligned rc=1",
        "map rc=0",
        "map_overlap rc=1",
        "retain rc=0 same=1",
        "release rc=0 used=4194304",
        "release_again rc=1",
        "unmap_cut rc=1",
        "unmap_with_gap rc=0 used=0",
        "unmap_nothing rc=1",
        "address_free_wrong_size rc=1",
        "address_free rc=0",
    ] {
        assert!(s.contains(l), "missing {l}: {s}");
    }
}

#[test]
fn framework_loaded_rtld_local_hides_nccl() {
    let s = probe("scope", &[]);
    assert!(
        s.contains("dlopen(libtorch_standin.so, RTLD_LOCAL) ok=1\n"),
        "{s}"
    );
    assert!(s.contains("global pncclCommInitRank=NULL\n"), "{s}");
    assert!(s.contains("via handle pncclCommInitRank=non-null\n"), "{s}");
}

#[test]
fn context_destroy_frees_its_allocations() {
    let s = probe("ctx", &[]);
    assert!(
        s.contains("in_ctx used=2097152\ndestroy rc=0 used=0\n"),
        "{s}"
    );
    assert!(s.contains("no_ctx rc=201"), "{s}");
}

#[test]
fn get_proc_address_version_table() {
    let s = probe("gpa", &[]);
    for l in [
        "gpa cuMemAlloc 3010 0 -> rc=0 status=0 cuMemAlloc\n",
        "gpa cuMemAlloc 13000 0 -> rc=0 status=0 cuMemAlloc_v2\n",
        "gpa cuMemFree 2000 0 -> rc=0 status=0 cuMemFree\n",
        "gpa cuCtxCreate 12040 0 -> rc=0 status=0 cuCtxCreate_v3\n",
        "gpa cuCtxCreate 12050 0 -> rc=0 status=0 cuCtxCreate_v4\n",
        "gpa cuCtxCreate 3010 0 -> rc=0 status=2 NULL\n",
        "gpa cuDevicePrimaryCtxRelease 10000 0 -> rc=0 status=0 cuDevicePrimaryCtxRelease\n",
        "gpa cuMemHostRegister 6050 0 -> rc=0 status=0 cuMemHostRegister_v2\n",
        "gpa cuIpcOpenMemHandle 11000 0 -> rc=0 status=0 cuIpcOpenMemHandle_v2\n",
        "gpa cuGetProcAddress 11030 0 -> rc=0 status=0 cuGetProcAddress\n",
        "gpa cuGetProcAddress 12000 0 -> rc=0 status=0 cuGetProcAddress_v2\n",
        "gpa cuMemAllocAsync 13000 1 -> rc=0 status=0 cuMemAllocAsync\n",
        "gpa cuMemAllocAsync 13000 2 -> rc=0 status=0 cuMemAllocAsync_ptsz\n",
        "gpa cuMemAllocFromPoolAsync 12000 2 -> rc=0 status=0 cuMemAllocFromPoolAsync_ptsz\n",
        "gpa cuMemCreate 12000 2 -> rc=0 status=0 cuMemCreate\n",
        "gpa cuMemAlloc_v2 13000 0 -> rc=0 status=1 NULL\n",
        "gpa cuNoSuchFunction 13000 0 -> rc=0 status=1 NULL\n",
        "gpa cuMemAlloc 13000 4 -> rc=1 status=-1 untouched\n",
    ] {
        assert!(s.contains(l), "missing {l:?}:\n{s}");
    }
    let internal = probe("gpa", &[("STANDIN_GPA_INTERNAL", "1")]);
    assert!(
        internal.contains("gpa cuMemAlloc 13000 0 -> rc=0 status=0 internal\n"),
        "{internal}"
    );
    assert!(internal.contains("gpa cuNoSuchFunction 13000 0 -> rc=0 status=1 NULL\n"));
}

// ---------------------------------------------------------------- ELF shape

/// `readelf` output, or None when binutils is not installed (the checks are then skipped).
fn readelf(args: &[&str], lib: &str) -> Option<String> {
    let o = Command::new("readelf")
        .args(args)
        .arg(standin_lib_dir().join(lib))
        .output()
        .ok()?;
    assert!(o.status.success(), "readelf {args:?} {lib}");
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Defined dynamic symbols (name, binding) of a library.
fn exports(lib: &str) -> Option<Vec<(String, String)>> {
    let s = readelf(&["--dyn-syms", "-W"], lib)?;
    Some(
        s.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 8
                    && f[6] != "UND"
                    && f[6] != "ABS"
                    && (f[3] == "FUNC" || f[3] == "OBJECT"))
                    .then(|| (f[7].to_string(), f[4].to_string()))
            })
            .collect(),
    )
}

fn needed(lib: &str) -> Option<Vec<String>> {
    let s = readelf(&["-d", "-W"], lib)?;
    Some(
        s.lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| {
                l.split('[')
                    .nth(1)
                    .map(|x| x.trim_end_matches(']').to_string())
            })
            .collect(),
    )
}

#[test]
fn libcudart_exports_are_versioned_and_it_does_not_link_libcuda() {
    let Some(ex) = exports("libcudart.so.13") else {
        return;
    };
    assert_eq!(ex.len(), 31, "{ex:?}");
    for (name, _) in &ex {
        assert!(
            name.starts_with("cuda") && name.ends_with("@@libcudart.so.13"),
            "{name}"
        );
    }
    assert!(ex.iter().any(|(n, _)| n == "cudaMalloc@@libcudart.so.13"));
    assert!(!needed("libcudart.so.13")
        .unwrap()
        .iter()
        .any(|n| n.starts_with("libcuda")));
}

#[test]
fn libnccl_hides_its_runtime() {
    let Some(ex) = exports("libnccl.so.2") else {
        return;
    };
    assert!(!ex.iter().any(|(n, _)| n.starts_with("cu")), "{ex:?}");
    assert!(
        ex.contains(&("ncclCommInitRank".into(), "WEAK".into())),
        "{ex:?}"
    );
    assert!(
        ex.contains(&("pncclCommInitRank".into(), "GLOBAL".into())),
        "{ex:?}"
    );
    let n = needed("libnccl.so.2").unwrap();
    assert!(!n.iter().any(|n| n.starts_with("libcuda")), "{n:?}");
}

#[test]
fn libcuda_exports_exactly_the_driver_entry_points() {
    let Some(ex) = exports("libcuda.so.1") else {
        return;
    };
    let mut names: Vec<&str> = ex.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("cu") && !n.contains('@')),
        "{names:?}"
    );
    for want in [
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemFree",
        "cuMemFree_v2",
        "cuMemAllocAsync_ptsz",
        "cuCtxCreate_v4",
        "cuIpcOpenMemHandle_v2",
        "cuDevicePrimaryCtxReset_v2",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert_eq!(names.len(), 62, "{names:?}");
    assert!(needed("libcuda.so.1")
        .unwrap()
        .iter()
        .all(|n| !n.starts_with("libcudart")));
}

#[test]
fn framework_and_cublas_depend_on_the_runtime() {
    let Some(fw) = needed("libtorch_standin.so") else {
        return;
    };
    for want in ["libcudart.so.13", "libnccl.so.2", "libcublas.so.13"] {
        assert!(fw.iter().any(|n| n == want), "{fw:?}");
    }
    assert!(needed("libcublas.so.13")
        .unwrap()
        .iter()
        .any(|n| n == "libcudart.so.13"));
}
