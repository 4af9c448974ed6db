//! Symbolization throughput: return addresses resolved per second, cold (fresh symbolizer: file
//! opened, DWARF units parsed as they are first touched), warm file (new addresses in units
//! already parsed) and warm cache (addresses seen before), over this benchmark's own executable
//! (DWARF line tables of the whole program, std included) and over a copy stripped of DWARF
//! (ELF symbol table only).
//!
//! `cargo bench -p vramtrace-collector --features symbols --bench symbolize`

use std::path::{Path, PathBuf};
use std::time::Instant;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use vramtrace_collector::format::{Module, Segment};
use vramtrace_collector::module_map::ModuleMap;
use vramtrace_collector::symbols::{SymbolSearch, Symbolizer};

/// Addresses per measured pass.
const ADDRESSES: usize = 20_000;
const BASE: u64 = 0x5555_0000_0000;

/// A module record for `path` loaded at `BASE`, and addresses inside its functions: two disjoint
/// sets (for the cold pass and the warm-file pass).
fn setup(path: &Path) -> (ModuleMap, Vec<u64>, Vec<u64>, usize) {
    let data = std::fs::read(path).expect("read the executable");
    let file = object::File::parse(&*data).expect("parse the executable");
    let mut functions: Vec<(u64, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() >= 16)
        .map(|s| (s.address(), s.size()))
        .collect();
    functions.sort_unstable();
    functions.dedup();
    // A fixed pseudo-random walk: the same addresses on every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut pick = |n: usize| -> Vec<u64> {
        (0..n)
            .map(|_| {
                let (start, size) = functions[(next() % functions.len() as u64) as usize];
                BASE + start + 1 + next() % (size - 1)
            })
            .collect()
    };
    let cold = pick(ADDRESSES);
    let fresh = pick(ADDRESSES);
    let segments = file
        .segments()
        .map(|s| Segment {
            start: BASE + s.address(),
            len: s.size(),
            executable: true,
        })
        .collect();
    let mut map = ModuleMap::new();
    map.insert(Module {
        id: 1,
        path: path.display().to_string(),
        base: BASE,
        segments,
        build_id: file.build_id().ok().flatten().unwrap_or(&[]).to_vec(),
    });
    (map, cold, fresh, functions.len())
}

/// Resolves every address once; returns addresses per second and how many got a function name.
fn pass(s: &mut Symbolizer, map: &ModuleMap, addresses: &[u64]) -> (f64, usize) {
    let start = Instant::now();
    let mut named = 0;
    for &a in addresses {
        let r = s.resolve(map, a);
        if r.innermost().is_some_and(|f| f.function.is_some()) {
            named += 1;
        }
    }
    (
        addresses.len() as f64 / start.elapsed().as_secs_f64(),
        named,
    )
}

/// Measured runs per binary; the median of each rate is printed (the machine may be shared).
const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(label: &str, path: &Path) {
    let (map, cold, fresh, functions) = setup(path);
    let (mut cold_rates, mut fresh_rates, mut warm_rates) = (Vec::new(), Vec::new(), Vec::new());
    let mut named = 0;
    for _ in 0..RUNS {
        let mut s = Symbolizer::new(SymbolSearch::only(vec![]));
        let (rate, n) = pass(&mut s, &map, &cold);
        cold_rates.push(rate);
        named = n;
        fresh_rates.push(pass(&mut s, &map, &fresh).0);
        warm_rates.push(pass(&mut s, &map, &cold).0);
    }
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    println!(
        "{label}: {:.1} MiB, {functions} functions; {ADDRESSES} addresses, {named} named; \
         median of {RUNS} runs\n  cold       {:>10.0} addr/s\n  warm file  {:>10.0} addr/s\n  \
         warm cache {:>10.0} addr/s",
        size as f64 / (1 << 20) as f64,
        median(cold_rates),
        median(fresh_rates),
        median(warm_rates),
    );
}

fn main() {
    let exe = std::env::current_exe().expect("own path");
    measure("DWARF (this benchmark, line tables)", &exe);
    let stripped: PathBuf =
        std::env::temp_dir().join(format!("symbolize-bench-{}", std::process::id()));
    let status = std::process::Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&exe)
        .arg(&stripped)
        .status();
    if status.is_ok_and(|s| s.success()) {
        measure("symbol table only (stripped copy)", &stripped);
        let _ = std::fs::remove_file(&stripped);
    } else {
        println!("symbol table only: skipped (objcopy not found)");
    }
}
