//! Call-site labels for the analyses' tables: a site is a native stack, and
//! `libc10_cuda.so+0x4bfb4` tells a PyTorch user nothing, since every tensor comes through that
//! frame. A site is labelled by the program's Python line that made it (`py_leak.py:18 in
//! <module>`: sites are split by that line, so it is the same for all of a site's calls), else by
//! the native function that asked (`DeviceCachingAllocator::alloc_block`), else by
//! `module+offset` as recorded. `report` and `replay` label their tables with it, `export` its
//! frames.

use std::collections::HashMap;

use vramtrace_collector::analysis::owner::is_library_module;
use vramtrace_collector::analysis::site::short_function;
use vramtrace_collector::analysis::{Analysis, OwnerKind, SiteName};
use vramtrace_collector::python::is_library_file;
use vramtrace_collector::symbols::{
    Attribution, CallRef, CallSiteKey, FrameKind, Granularity, StackFrame,
};

/// Fills in the label of every site the answers name, and tells apart the places of one list
/// whose labels came out the same.
pub fn label_sites(analysis: &mut Analysis, naming: &mut Attribution<'_>) {
    let mut done: HashMap<(u32, u64, u32), Option<String>> = HashMap::new();
    for site in analysis.sites_mut() {
        // A row of another view (a framework allocator's) comes named by its source.
        if (site.stack, site.caller, site.py_stack) == (0, 0, 0) && site.label.is_some() {
            continue;
        }
        let key = (site.stack, site.caller, site.py_stack);
        let label = done
            .entry(key)
            .or_insert_with(|| label(naming, site))
            .clone();
        site.label = label;
    }
    let g = &mut analysis.growth;
    for list in [
        &mut g.steady,
        &mut g.peaks,
        &mut g.shrinking,
        &mut g.one_off_rises,
    ] {
        // Rows of one place on two holders (device and host) are told apart by their holder.
        let rows = list.iter_mut().map(|s| (s.holder.name(), &mut s.site));
        tell_apart(naming, rows.collect());
    }
    let leaks = analysis.leaks.sites.iter_mut();
    tell_apart(
        naming,
        leaks.map(|s| (String::new(), &mut s.site)).collect(),
    );
    for h in &mut analysis.peaks.holders {
        let rows = h.by_site.iter_mut().map(|s| (String::new(), &mut s.site));
        tell_apart(naming, rows.collect());
    }
    for f in &mut analysis.ooms.failures {
        let rows = f.by_site.iter_mut().map(|s| (String::new(), &mut s.site));
        tell_apart(naming, rows.collect());
    }
    let findings = analysis.diagnosis.iter_mut().filter_map(|f| {
        let kind = format!(
            "{} {}",
            f.class.name(),
            f.holder.map_or(String::new(), |h| h.name())
        );
        f.site.as_mut().map(|s| (kind, s))
    });
    tell_apart(naming, findings.collect());
}

/// Places of one list that read the same on one holder (two native paths through one
/// function, as NCCL's channel buffers and its all-reduce buffer both come from its own
/// `cudaMalloc`) are told apart by the first function where their stacks part: `cudaMalloc via
/// comm_create`. When no function differs, by their recorded `module+offset`, else their stack.
fn tell_apart(naming: &mut Attribution<'_>, mut list: Vec<(String, &mut SiteName)>) {
    type Shown = (String, String, Option<String>);
    let shown = |holder: &str, s: &SiteName| -> Shown {
        let label = s.label.clone().unwrap_or_else(|| s.site.clone());
        (holder.to_string(), label, s.module_name.clone())
    };
    let mut groups: HashMap<Shown, Vec<usize>> = HashMap::new();
    for (i, (holder, s)) in list.iter().enumerate() {
        groups.entry(shown(holder, s)).or_default().push(i);
    }
    for members in groups.into_values().filter(|m| m.len() > 1) {
        let stacks: Vec<Vec<String>> = members
            .iter()
            .map(|&i| native_functions(naming, list[i].1))
            .collect();
        let depth = stacks.iter().map(Vec::len).max().unwrap_or(0);
        let parting = (0..depth).find(|&d| {
            let at = |s: &Vec<String>| s.get(d).cloned().unwrap_or_default();
            stacks.iter().any(|s| at(s) != at(&stacks[0]))
        });
        // Each member is told apart by the first of these that no other member shares.
        let tags: Vec<[Option<String>; 3]> = members
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let s = &*list[i].1;
                let via = parting
                    .map(|d| format!("via {}", stacks[k].get(d).map_or("?", String::as_str)));
                [
                    via,
                    Some(format!("[{}]", s.site)),
                    Some(format!("[stack {}]", s.stack)),
                ]
            })
            .collect();
        for (k, &i) in members.iter().enumerate() {
            let unique = (0..3).find_map(|t| {
                let tag = tags[k][t].as_ref()?;
                let shared = tags.iter().filter(|o| o[t].as_ref() == Some(tag)).count();
                (shared == 1).then(|| tag.clone())
            });
            let s = &mut *list[i].1;
            let base = s.label.clone().unwrap_or_else(|| s.site.clone());
            let apart = unique.unwrap_or_else(|| format!("[stack {}]", s.stack));
            s.label = Some(format!("{base} {apart}"));
        }
    }
}

/// The function names of a site's native frames, innermost first, outside the CUDA libraries.
fn native_functions(naming: &mut Attribution<'_>, site: &SiteName) -> Vec<String> {
    let call = CallRef {
        caller: site.caller,
        stack: site.stack,
        py_stack: site.py_stack,
    };
    naming
        .stack(call)
        .into_iter()
        .filter(|f| f.kind == FrameKind::Native && !f.in_cuda_library())
        .map(|f| {
            f.function
                .as_deref()
                .map_or("?".to_string(), short_function)
        })
        .collect()
}

fn label(naming: &mut Attribution<'_>, site: &SiteName) -> Option<String> {
    let call = CallRef {
        caller: site.caller,
        stack: site.stack,
        py_stack: site.py_stack,
    };
    match naming.key(Granularity::Python, call) {
        CallSiteKey::Python {
            file,
            line,
            function,
        } => Some(format!("{}:{line} in {function}", base_name(&file))),
        // A native program's own function, where a library (NCCL, a framework) allocated for
        // it: the place the user can change.
        _ if program_function(naming, site).is_some() => program_function(naming, site),
        CallSiteKey::Function { function, .. } => Some(short_function(&function)),
        // Nothing names it: the recorded `module+offset` says as much.
        _ => None,
    }
}

/// A native program's own function where a library owns the site (its memory made by NCCL,
/// cuBLAS or a framework on the program's behalf), and the library function it called:
/// `init_comms → ncclCommInitRank`. `None` for a site with a Python line, a site the program
/// owns, or when symbols name no function of the program.
fn program_function(naming: &mut Attribution<'_>, site: &SiteName) -> Option<String> {
    if site.source.is_some() || site.program_frame == 0 || !is_library_owned(site) {
        return None;
    }
    let call = CallRef {
        caller: site.caller,
        stack: site.stack,
        py_stack: site.py_stack,
    };
    let frames: Vec<StackFrame> = naming
        .stack(call)
        .into_iter()
        .filter(|f| f.kind == FrameKind::Native)
        .collect();
    let ours = |f: &StackFrame| f.module.as_deref().is_some_and(|m| !is_library_module(m));
    let k = frames.iter().position(ours)?;
    let program = short_function(frames[k].function.as_deref()?);
    let entry = frames[..k]
        .iter()
        .rev()
        .find(|f| !f.in_cuda_library())
        .and_then(|f| f.function.as_deref())
        .map(short_function);
    Some(match entry {
        Some(entry) => format!("{program} → {entry}"),
        None => program,
    })
}

/// Whether a site's owner is a library rather than the program (its memory made by NCCL,
/// cuBLAS or a framework on the program's behalf).
fn is_library_owned(site: &SiteName) -> bool {
    !matches!(site.owner, OwnerKind::Extension | OwnerKind::Unknown)
}

/// The label of a call with these (mixed) frames: its program's innermost Python frame (as
/// [`is_library_file`] tells the program from packages), else its first
/// named native frame outside the CUDA libraries; `None` when neither exists.
pub fn frames_label(frames: &[StackFrame]) -> Option<String> {
    let python = || frames.iter().filter(|f| f.kind == FrameKind::Python);
    let program = python()
        .find(|f| !f.file.as_deref().is_some_and(is_library_file))
        .or_else(|| python().next());
    if let Some(p) = program {
        return Some(format!(
            "{}:{} in {}",
            base_name(p.file.as_deref().unwrap_or("<unknown>")),
            p.line.unwrap_or(0),
            p.function.as_deref().unwrap_or("?")
        ));
    }
    frames
        .iter()
        .filter(|f| !f.in_cuda_library())
        .find_map(|f| f.function.as_deref())
        .map(short_function)
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
