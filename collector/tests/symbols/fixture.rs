//! The C fixture, built once per test binary with the system compiler: an executable and two
//! shared libraries (one at -O0, one at -O2 with an always-inline function). Running it prints
//! the return addresses above each `probe` call as offsets from each module's load bias, so the
//! tests know exactly which function, file and line every address must name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use object::{Object, ObjectSegment};
use vramtrace_collector::format::{Module, Segment};

/// One return address printed by the fixture.
#[derive(Clone, Debug)]
pub struct Frame {
    pub module: PathBuf,
    pub offset: u64,
}

/// The built fixture.
pub struct Fixture {
    /// Where the sources and everything built from them are.
    pub dir: PathBuf,
    pub app: PathBuf,
    /// `libmodel.so`, built -O0.
    pub model: PathBuf,
    /// `libinline.so`, built -O2.
    pub inline: PathBuf,
    /// Per probe name: the return addresses above the probe call, innermost first.
    pub probes: BTreeMap<String, Vec<Frame>>,
}

const SOURCES: &[&str] = &["probe.h", "model.c", "inline.c", "main.c"];

/// The fixture, built on first use.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(build)
}

/// Runs the C compiler (or another build tool) in `dir`; panics with its output on failure.
pub fn tool(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn build() -> Fixture {
    // One directory per test crate (the tools' tests build the same fixture): rebuilt whole
    // on every run, so nothing stale is ever read.
    let crate_name = env!("CARGO_PKG_NAME");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("symbols-fixture-{crate_name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The sources live beside this file in the collector crate; the tools' tests include this
    // file, so the path is taken from the workspace root.
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("collector/tests/symbols/fixture");
    for f in SOURCES {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let common = ["-g", "-fPIC", "-Wl,--build-id=sha1"];
    let mut args = common.to_vec();
    args.extend(["-O0", "-shared", "model.c", "-o", "libmodel.so"]);
    tool(&dir, "cc", &args);
    let mut args = common.to_vec();
    args.extend([
        "-O2",
        "-fno-optimize-sibling-calls",
        "-shared",
        "inline.c",
        "-o",
        "libinline.so",
    ]);
    tool(&dir, "cc", &args);
    let mut args = common.to_vec();
    args.extend([
        "-O0",
        "-rdynamic",
        "main.c",
        "-L.",
        "-lmodel",
        "-linline",
        "-Wl,-rpath,$ORIGIN",
        "-ldl",
        "-o",
        "app",
    ]);
    tool(&dir, "cc", &args);
    let app = dir.join("app");
    let out = Command::new(&app).output().unwrap();
    assert!(out.status.success(), "the fixture program failed");
    let mut probes: BTreeMap<String, Vec<Frame>> = BTreeMap::new();
    let mut current = String::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let words: Vec<&str> = line.splitn(3, ' ').collect();
        match words[..] {
            ["probe", name] => current = name.to_string(),
            ["frame", offset, path] => {
                let module = if path.starts_with('/') {
                    PathBuf::from(path)
                } else {
                    app.clone()
                };
                probes.entry(current.clone()).or_default().push(Frame {
                    module: module.canonicalize().unwrap_or(module),
                    offset: u64::from_str_radix(offset, 16).unwrap(),
                });
            }
            _ => panic!("unexpected fixture output: {line}"),
        }
    }
    Fixture {
        app: app.canonicalize().unwrap(),
        model: dir.join("libmodel.so").canonicalize().unwrap(),
        inline: dir.join("libinline.so").canonicalize().unwrap(),
        dir: dir.canonicalize().unwrap(),
        probes,
    }
}

impl Fixture {
    /// The return addresses printed for probe `name`, innermost first.
    pub fn probe(&self, name: &str) -> &[Frame] {
        &self.probes[name]
    }

    /// The first return address of probe `name` inside `module`.
    pub fn frame_in(&self, name: &str, module: &Path) -> u64 {
        self.probe(name)
            .iter()
            .find(|f| f.module == module)
            .unwrap_or_else(|| panic!("probe {name} has no frame in {}", module.display()))
            .offset
    }

    /// The line of `source` holding `marker` (`@weights-call`), 1-based.
    pub fn line_of(&self, source: &str, marker: &str) -> u32 {
        let text = std::fs::read_to_string(self.dir.join(source)).unwrap();
        let i = text
            .lines()
            .position(|l| l.contains(marker))
            .unwrap_or_else(|| panic!("{marker} not in {source}"));
        i as u32 + 1
    }

    /// The absolute path of a source file, as DWARF names it.
    pub fn source(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// The GNU build id of a file.
pub fn build_id(path: &Path) -> Vec<u8> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.build_id().unwrap().unwrap_or(&[]).to_vec()
}

/// A module record for `path` as if loaded with load bias `base`: its real build id and its
/// loadable segments moved by `base`.
pub fn module(id: u32, path: &Path, base: u64) -> Module {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let segments = file
        .segments()
        .map(|s| Segment {
            start: base + s.address(),
            len: s.size(),
            executable: true,
        })
        .collect();
    Module {
        id,
        path: path.display().to_string(),
        base,
        segments,
        build_id: file.build_id().unwrap().unwrap_or(&[]).to_vec(),
    }
}

/// A module record for a file that need not exist: one segment of 1 MiB at `base`.
pub fn fake_module(id: u32, path: &str, base: u64, build_id: &[u8]) -> Module {
    Module {
        id,
        path: path.to_string(),
        base,
        segments: vec![Segment {
            start: base,
            len: 1 << 20,
            executable: true,
        }],
        build_id: build_id.to_vec(),
    }
}
