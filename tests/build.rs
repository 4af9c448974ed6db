//! Builds the CPU stand-ins of libcuda / libcudart / libnccl / libcublas / a framework library,
//! and the C workload programs, with the system C compiler (`$CC`, else `cc`).
//!
//! Output: `$OUT_DIR/standins/lib/` (shared objects named by their soname, plus the unversioned
//! `libX.so` development symlinks) and `$OUT_DIR/workloads/` (executables whose RUNPATH is
//! `$ORIGIN/../standins/lib`).  The paths reach the crate as `VRAMTRACE_STANDIN_LIB_DIR`,
//! `VRAMTRACE_WORKLOAD_DIR` and `VRAMTRACE_STANDIN_INCLUDE_DIR`.  Any compiler failure fails the
//! build with the command line and the compiler's output.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const COMMON: &[&str] = &[
    "-g",
    "-O0",
    "-fno-omit-frame-pointer",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pthread",
    "-D_GNU_SOURCE",
];
const LIB: &[&str] = &["-fPIC", "-shared", "-fvisibility=hidden", "-Wl,-Bsymbolic"];

/// Which stand-in libraries each workload links (DT_NEEDED). Workloads not listed link none.
const WORKLOAD_LINKS: &[(&str, &[&str])] = &[
    ("wl_runtime", &["libcudart.so.13"]),
    ("wl_driver", &["libcuda.so.1"]),
    ("wl_closure", &[]),
    ("wl_cublas", &["libcublas.so.13", "libcudart.so.13"]),
    ("wl_framework", &[]),
    ("wl_fork", &["libcudart.so.13"]),
    ("wl_threads", &["libcudart.so.13"]),
    ("wl_signal", &["libcudart.so.13"]),
    ("wl_harm", &["libcudart.so.13"]),
    ("wl_train", &[]),
    ("wl_shapes", &[]),
    ("wl_alert", &[]),
    ("wl_soak", &["libcudart.so.13"]),
    ("wl_probe", &["libcudart.so.13", "libcuda.so.1"]),
    ("bench_calls", &["libcudart.so.13"]),
];

/// Workloads built a second time from another's source with extra flags: `(name, source, flags)`.
const VARIANTS: &[(&str, &str, &[&str])] =
    &[("wl_train_moved", "wl_train.c", &["-DWL_TRAIN_MOVED"])];

struct Ctx {
    cc: String,
    src: PathBuf,
    inc: PathBuf,
    lib_dir: PathBuf,
    obj_dir: PathBuf,
}

impl Ctx {
    fn run(&self, args: &[String], what: &str) {
        let out = Command::new(&self.cc)
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "stand-in build: cannot run the C compiler `{}`: {e}",
                    self.cc
                )
            });
        if !out.status.success() {
            panic!(
                "stand-in build failed while building {what}\ncommand: {} {}\n{}{}",
                self.cc,
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn sources(&self, dir: &str) -> Vec<String> {
        c_files(&self.src.join(dir))
    }

    fn base_args(&self) -> Vec<String> {
        let mut a: Vec<String> = COMMON.iter().map(|s| s.to_string()).collect();
        a.push(format!("-I{}", self.inc.display()));
        a
    }

    /// Link a shared library named by its soname, plus the `libX.so` symlink.
    fn shared(&self, soname: &str, inputs: Vec<String>, extra: &[String]) {
        let mut a = self.base_args();
        a.extend(LIB.iter().map(|s| s.to_string()));
        a.extend(inputs);
        a.extend(extra.iter().cloned());
        a.push(format!("-Wl,-soname,{soname}"));
        a.push("-Wl,-rpath,$ORIGIN".into());
        a.push("-o".into());
        a.push(self.lib_dir.join(soname).display().to_string());
        self.run(&a, soname);
        if let Some(dev) = soname.find(".so").map(|i| &soname[..i + 3]) {
            if dev != soname {
                let link = self.lib_dir.join(dev);
                let _ = fs::remove_file(&link);
                std::os::unix::fs::symlink(soname, &link)
                    .unwrap_or_else(|e| panic!("stand-in build: symlink {}: {e}", link.display()));
            }
        }
    }

    fn lib(&self, soname: &str) -> String {
        self.lib_dir.join(soname).display().to_string()
    }
}

/// The `.c` files of a directory, sorted.
fn c_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("stand-in build: cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .map(|p| p.display().to_string())
        .collect();
    v.sort();
    v
}

fn rerun_for_tree(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    if let Ok(rd) = fs::read_dir(dir) {
        let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                rerun_for_tree(&p);
            } else {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    rerun_for_tree(&manifest.join("standins"));
    rerun_for_tree(&manifest.join("workloads"));

    let cx = Ctx {
        cc: env::var("CC")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "cc".into()),
        src: manifest.join("standins"),
        inc: manifest.join("standins/include"),
        lib_dir: out.join("standins/lib"),
        obj_dir: out.join("standins/obj"),
    };
    let wl_dir = out.join("workloads");
    for d in [&cx.lib_dir, &cx.obj_dir, &wl_dir] {
        fs::create_dir_all(d)
            .unwrap_or_else(|e| panic!("stand-in build: mkdir {}: {e}", d.display()));
    }

    // libcuda.so.1: the driver (no DT_NEEDED on anything CUDA).
    cx.shared("libcuda.so.1", cx.sources("driver"), &[]);

    // libcudart.so.13: the runtime, every export versioned @@libcudart.so.13, no DT_NEEDED on libcuda.
    let map = cx.src.join("runtime/libcudart.map").display().to_string();
    cx.shared(
        "libcudart.so.13",
        vec![cx.src.join("runtime/runtime_core.c").display().to_string()],
        &[format!("-Wl,--version-script={map}")],
    );

    // The same runtime, compiled again with hidden visibility for NCCL to link statically.
    let rt_static = cx.obj_dir.join("runtime_static.o").display().to_string();
    let mut a = cx.base_args();
    a.extend(["-fPIC", "-fvisibility=hidden", "-DRT_STATIC", "-c"].map(String::from));
    a.push(cx.src.join("runtime/runtime_core.c").display().to_string());
    a.push("-o".into());
    a.push(rt_static.clone());
    cx.run(&a, "runtime_static.o");

    // libnccl.so.2: its own static runtime, no DT_NEEDED on libcudart or libcuda.
    let mut nccl = cx.sources("nccl");
    nccl.push(rt_static);
    cx.shared("libnccl.so.2", nccl, &[]);

    // libcublas.so.13: DT_NEEDED libcudart.so.13, like the real one.
    let mut blas = cx.sources("cublas");
    blas.push(cx.lib("libcudart.so.13"));
    cx.shared("libcublas.so.13", blas, &[]);

    // libtorch_standin.so: DT_NEEDED libcudart.so.13, libnccl.so.2, libcublas.so.13.
    let mut fw = cx.sources("framework");
    fw.push(cx.lib("libcudart.so.13"));
    fw.push(cx.lib("libnccl.so.2"));
    fw.push(cx.lib("libcublas.so.13"));
    cx.shared("libtorch_standin.so", fw, &[]);

    // Workloads, two at a time per available core.
    let wl_src = manifest.join("workloads");
    let mut workloads: Vec<(String, String, &[&str])> = c_files(&wl_src)
        .into_iter()
        .map(|src| {
            let name = Path::new(&src)
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .to_string();
            (name, src, &[][..])
        })
        .collect();
    for &(name, source, flags) in VARIANTS {
        let src = wl_src.join(source).display().to_string();
        workloads.push((name.to_string(), src, flags));
    }
    let fw_inc = cx.src.join("framework");
    std::thread::scope(|s| {
        let jobs = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2);
        for chunk in workloads.chunks(workloads.len().div_ceil(jobs).max(1)) {
            let (cx, wl_dir, fw_inc, wl_src) = (&cx, &wl_dir, &fw_inc, &wl_src);
            s.spawn(move || {
                for (name, src, flags) in chunk {
                    let mut a = cx.base_args();
                    a.extend(flags.iter().map(|f| f.to_string()));
                    a.push(format!("-I{}", fw_inc.display()));
                    a.push(format!("-I{}", wl_src.display()));
                    a.push(src.clone());
                    a.push("-Wl,--no-as-needed".into());
                    // A variant links what its source's workload links.
                    let base = Path::new(src).file_stem().unwrap().to_string_lossy();
                    let links = WORKLOAD_LINKS
                        .iter()
                        .find(|(n, _)| *n == base)
                        .map(|(_, l)| *l);
                    for l in links.unwrap_or(&[]) {
                        a.push(cx.lib(l));
                    }
                    a.push("-ldl".into());
                    a.push("-Wl,-rpath,$ORIGIN/../standins/lib".into());
                    a.push("-o".into());
                    a.push(wl_dir.join(name).display().to_string());
                    cx.run(&a, name);
                }
            });
        }
    });

    println!(
        "cargo:rustc-env=VRAMTRACE_STANDIN_LIB_DIR={}",
        cx.lib_dir.display()
    );
    println!(
        "cargo:rustc-env=VRAMTRACE_WORKLOAD_DIR={}",
        wl_dir.display()
    );
    println!(
        "cargo:rustc-env=VRAMTRACE_STANDIN_INCLUDE_DIR={}",
        cx.inc.display()
    );
}
