//! Call-site labels for the analyses' tables: a site is a native stack, and
//! `libc10_cuda.so+0x4bfb4` tells a PyTorch user nothing, since every tensor comes through that
//! frame. A site is labelled by the program's Python line that made it (`py_leak.py:18 in
//! <module>`: sites are split by that line, so it is the same for all of a site's calls), else by
//! the native function that asked (`DeviceCachingAllocator::alloc_block`), else by
//! `module+offset` as recorded. `report` and `replay` label their tables with it, `export` its
//! frames and the call sites of its Parquet tables.

use std::collections::HashMap;

use vramtrace_collector::analysis::{Analysis, SiteName};
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
        let sites_differ = members
            .iter()
            .any(|&i| list[i].1.site != list[members[0]].1.site);
        for (k, &i) in members.iter().enumerate() {
            let s = &mut *list[i].1;
            let base = s.label.clone().unwrap_or_else(|| s.site.clone());
            let apart = match parting {
                Some(d) => format!("via {}", stacks[k].get(d).map_or("?", String::as_str)),
                None if sites_differ => format!("[{}]", s.site),
                None => format!("[stack {}]", s.stack),
            };
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

/// The label of one site: its program's Python line, else the native function that asked;
/// `None` when nothing names it (the recorded `module+offset` then does).
pub fn label(naming: &mut Attribution<'_>, site: &SiteName) -> Option<String> {
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
        CallSiteKey::Function { function, .. } => Some(short_function(&function)),
        // Nothing names it: the recorded `module+offset` says as much.
        _ => None,
    }
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

/// A demangled C++ name without its parameter list and with only its last two scopes:
/// `c10::cuda::…::DeviceCachingAllocator::alloc_block(AllocParams&, bool)` becomes
/// `DeviceCachingAllocator::alloc_block`. Template arguments and `(anonymous namespace)` are
/// kept whole; C and Rust names pass through.
pub fn short_function(name: &str) -> String {
    // Cut at the '(' that opens the parameter list: the first one outside <…> that does not
    // begin "(anonymous namespace)".
    let mut depth = 0i32;
    let mut end = name.len();
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && !name[i..].starts_with("(anonymous namespace)") => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let head = &name[..end];
    // Split into scopes at "::" outside <…>.
    let mut scopes = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let bytes = head.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                scopes.push(&head[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    scopes.push(&head[start..]);
    let keep = scopes.len().saturating_sub(2);
    let short = scopes[keep..].join("::");
    if short.is_empty() {
        name.to_string()
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::short_function;

    #[test]
    fn function_names_shorten_to_their_last_two_scopes() {
        for (long, short) in [
            (
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::AllocParams&, bool)",
                "DeviceCachingAllocator::alloc_block",
            ),
            ("leak_weights", "leak_weights"),
            ("alloc_buffers(int)", "alloc_buffers"),
            (
                "at::(anonymous namespace)::wrapper_CUDA_empty(c10::ArrayRef<long>)",
                "(anonymous namespace)::wrapper_CUDA_empty",
            ),
            (
                "std::vector<std::pair<int, int>, std::allocator<std::pair<int, int> > >::push_back(int const&)",
                "vector<std::pair<int, int>, std::allocator<std::pair<int, int> > >::push_back",
            ),
            ("vramtrace_collector::live::LiveState::apply", "LiveState::apply"),
        ] {
            assert_eq!(short_function(long), short, "{long}");
        }
    }
}
