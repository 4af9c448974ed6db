//! The report's call-site stacks and groups: the top call sites and the `--by` groups with the
//! mixed Python + native stack of each, and where each module's symbols came from.

use serde::Serialize;
use vramtrace_collector::live::{CallSite, LiveState};
use vramtrace_collector::symbols::{
    Attribution, CallRef, CallSiteGroup, Granularity, StackFrame, Symbolizer,
};

/// A call site or group with its stack.
#[derive(Serialize)]
pub struct Attributed<T: Serialize> {
    #[serde(flatten)]
    pub item: T,
    /// Its stack: Python frames innermost first, then native frames innermost first; every
    /// frame, CUDA libraries included. (Called `frames` because a call site's `stack` is
    /// already its interned stack id.)
    pub frames: Vec<StackFrame>,
}

/// Live memory grouped at the `--by` granularity.
#[derive(Serialize)]
pub struct Grouping {
    pub by: Granularity,
    /// Groups in all.
    pub total: usize,
    /// The largest groups, at most `--top`; each stack is the one of the group's largest call.
    pub list: Vec<Attributed<CallSiteGroup>>,
}

/// Where one module's symbols came from.
#[derive(Serialize)]
pub struct SymbolFacts {
    /// Module file name.
    pub module: String,
    /// Whether a file was found: when not, its frames are `module+0xOFFSET`.
    pub found: bool,
    /// The binary used (the recorded path, or a copy with the same build id).
    pub binary: Option<String>,
    /// The file whose DWARF was read (the binary, or a separate debug file); `null` when only
    /// symbol tables name its functions.
    pub debug_info: Option<String>,
    /// What went wrong on the way: a rebuilt binary, a missing file, unreadable DWARF.
    pub notes: Vec<String>,
}

/// The stacks of the top call sites.
pub fn site_stacks(a: &mut Attribution<'_>, sites: Vec<CallSite>) -> Vec<Attributed<CallSite>> {
    sites
        .into_iter()
        .map(|site| {
            let call = CallRef {
                caller: site.caller,
                stack: site.stack,
                py_stack: site.py_stack,
            };
            Attributed {
                frames: a.stack(call),
                item: site,
            }
        })
        .collect()
}

/// Live memory grouped `by`, the `top` largest groups with their stacks.
pub fn grouping(
    a: &mut Attribution<'_>,
    state: &LiveState,
    by: Granularity,
    top: usize,
) -> Grouping {
    let mut groups = a.group_live(state, by);
    let total = groups.len();
    groups.truncate(top);
    let list = groups
        .into_iter()
        .map(|group| Attributed {
            frames: a.stack(group.example),
            item: group,
        })
        .collect();
    Grouping { by, total, list }
}

/// The sources of every module the report resolved an address in, by module name (then
/// binary): the order the symbolizer first needed them follows call sites out of hash maps, and
/// varied from run to run.
pub fn symbol_facts(symbols: &Symbolizer) -> Vec<SymbolFacts> {
    let mut facts: Vec<SymbolFacts> = symbols
        .sources()
        .map(|(module, source)| SymbolFacts {
            module: module.to_string(),
            found: source.found(),
            binary: source.binary.as_ref().map(|p| p.display().to_string()),
            debug_info: source.debug_info.as_ref().map(|p| p.display().to_string()),
            notes: source.notes.clone(),
        })
        .collect();
    facts.sort_by(|a, b| (&a.module, &a.binary).cmp(&(&b.module, &b.binary)));
    facts
}
