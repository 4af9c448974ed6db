//! Call-site labels for the analyses' tables: a site is a native stack, and
//! `libc10_cuda.so+0x4bfb4` tells a PyTorch user nothing, since every tensor comes through that
//! frame. A site is labelled by the Python line that reached it (`py_leak.py:18 in <module>`),
//! else by the native function that asked (`DeviceCachingAllocator::alloc_block`), else by
//! `module+offset` as recorded.

use std::collections::HashMap;

use vramtrace_collector::analysis::{Analysis, SiteName};
use vramtrace_collector::python::is_library_file;
use vramtrace_collector::symbols::{
    Attribution, CallRef, CallSiteKey, FrameKind, Granularity, StackFrame,
};

/// Fills in the label of every site the answers name.
pub fn label_sites(analysis: &mut Analysis, naming: &mut Attribution<'_>) {
    let mut done: HashMap<(u32, u64, u32, bool), Option<String>> = HashMap::new();
    for site in analysis.sites_mut() {
        let key = (site.stack, site.caller, site.py_stack, site.py_stacks_vary);
        let label = done
            .entry(key)
            .or_insert_with(|| label(naming, site))
            .clone();
        site.label = label;
    }
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
        } => {
            let more = if site.py_stacks_vary {
                " (and other lines)"
            } else {
                ""
            };
            Some(format!("{}:{line} in {function}{more}", base_name(&file)))
        }
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
