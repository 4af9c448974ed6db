//! Naming a call site for reports: the frame that names its owner as `module+offset`, the kind of
//! owner ([`OwnerKind`]), the program's own Python line and native frame, with the raw stack id,
//! caller address and an example Python stack kept for symbolization, and a label a symbolizing
//! reader fills in; and the place the analyses group sites by.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::owner::{is_library_module, OwnerKind};
use crate::live::{LiveState, ProgramLine, SiteId};
use crate::module_map::is_tracer;
use crate::units::{base_name, line_label};

/// Where the analyses group call sites: the program's own Python line, on one path of the
/// program to it, and the module that allocated for it (one line reaches the allocator through
/// many native paths, and the line is what the user can change; a helper's line called from two
/// lines of the script is two places, each named with its caller, as PyTorch's recorder lines
/// are); for a call without Python frames into a library, the program's call into it and the
/// library (the library's own paths from there, NCCL's `cudaMalloc` and its `cuMemCreate` under
/// one `ncclCommInitRank`, are one place: the program's call is what the user can change); else
/// the native call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    Line {
        line: ProgramLine,
        module: Option<u32>,
    },
    Call {
        /// The program's frame: the first outside the libraries.
        frame: u64,
        module: Option<u32>,
    },
    Site(SiteId),
}

/// Which of `items` are one place with the others of their line: all those of a line that
/// grows steadily on two of its paths or more, which keeps what it makes itself (a helper that
/// caches what it returns, called from three lines) — the rule of what a place is, for the
/// report's series and `diff`'s sites and tensor lines alike. `items`: each one's line (`None`
/// where it is not a line on a path of the program) and whether it grows steadily; the indexes
/// of those to make one place.
pub(crate) fn one_place_per_line<K: Ord>(
    items: impl IntoIterator<Item = (Option<K>, bool)>,
) -> BTreeSet<usize> {
    let items: Vec<(Option<K>, bool)> = items.into_iter().collect();
    let mut growing: BTreeMap<&K, usize> = BTreeMap::new();
    for (line, grows) in &items {
        if let (Some(line), true) = (line, grows) {
            *growing.entry(line).or_default() += 1;
        }
    }
    (items.iter().enumerate())
        .filter(|(_, (line, _))| {
            line.as_ref()
                .is_some_and(|l| growing.get(l).is_some_and(|&n| n >= 2))
        })
        .map(|(i, _)| i)
        .collect()
}

/// The place of call site `id`.
pub fn place(state: &LiveState, id: SiteId) -> Place {
    let Some((key, caller)) = state.site(id) else {
        return Place::Site(id);
    };
    let owners = state.owners();
    let module = owners.resolve(caller, key.stack).module;
    if key.line.is_some() {
        return Place::Line {
            line: key.line,
            module,
        };
    }
    // A library allocated: its place is the program's call into it, where the stack has one.
    let library = (module.and_then(|m| owners.module_name(m))).is_some_and(is_library_module);
    match program_frame(state, caller, key.stack) {
        (frame, _) if library && frame != 0 => Place::Call { frame, module },
        _ => Place::Site(id),
    }
}

/// A call site as reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteName {
    /// Interned native stack, 0 when the site is its caller address alone.
    pub stack: u32,
    /// Return address of the (first) allocating call there.
    #[serde(serialize_with = "crate::live::hex")]
    pub caller: u64,
    /// The frame naming the owner, as `module+offset`.
    pub site: String,
    /// Owner module id and file name.
    pub module: Option<u32>,
    pub module_name: Option<String>,
    /// The Python stack of the first call there that had one (0: none). Sites are native
    /// stacks; this names the Python line that reached it.
    pub py_stack: u32,
    /// Whether calls at the site came from more than one Python stack.
    pub py_stacks_vary: bool,
    /// What kind of module the owner is (a framework, NCCL, cuBLAS, an extension...).
    pub owner: OwnerKind,
    /// The entry point of the first call there (`cudaMalloc`, `cudaMallocAsync`...); `null`
    /// for a place another view names.
    pub api: Option<&'static str>,
    /// The program's own Python line behind the site (the innermost frame outside installed
    /// packages and the standard library), when the calls had Python frames.
    pub source: Option<SourceLine>,
    /// Where that line is reached on several paths of the program (a helper called from two
    /// lines of the script), the first line of this site's path that the others do not share:
    /// the line whose call this site's memory came from (`helpers.py:9 in make via
    /// train.py:40 in <module>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<SourceLine>,
    /// The program's own first native frame: the innermost outside the CUDA libraries, NCCL,
    /// cuBLAS, the frameworks and the C runtime (0: none). A native program's site is labelled
    /// by it, so a communicator NCCL allocates for `main` is `main`'s.
    #[serde(serialize_with = "crate::live::hex")]
    pub program_frame: u64,
    /// The frame before it, in the library the program called (`ncclCommInitRank`): 0 when the
    /// program frame is the site's own caller or there is none.
    #[serde(serialize_with = "crate::live::hex")]
    pub entry_frame: u64,
    /// The site in words (`train.py:88 in step`, or the native function that asked), filled in
    /// by a reader with symbols (`symbols::label_sites`, behind the `symbols` feature); `null`
    /// otherwise.
    pub label: Option<String>,
    /// The place the analyses group the site in.
    #[serde(skip)]
    pub place: Place,
}

impl SiteName {
    /// Whether the site's memory is a framework allocator's pool or segment (not one array):
    /// the line made the allocator grow, and need not be the line whose arrays keep it.
    /// Stream-ordered allocations (PyTorch's `cudaMallocAsync` backend) are one array each.
    pub fn is_framework_pool(&self) -> bool {
        self.owner.makes_pools(self.api)
    }

    /// The site as reached on the program's path through `via` ([`SiteName::via`]), labelled so.
    pub(crate) fn reached_via(mut self, via: Option<SourceLine>) -> SiteName {
        self.via = via;
        self.label = self.label.take().map(|l| self.on_its_path(l));
        self
    }

    /// The site as its line, whatever path reached it (the label without its path).
    pub(crate) fn without_path(mut self) -> SiteName {
        if let Some(via) = self.via.take() {
            let tag = format!(" via {}", via.label());
            if let Some(label) = &mut self.label {
                if let Some(line) = label.strip_suffix(&tag) {
                    *label = line.to_string();
                }
            }
        }
        self
    }

    /// `label` with the line of the program's path the site came by, where other paths reach
    /// its line ([`SiteName::via`]): how every output names the site.
    pub fn on_its_path(&self, label: String) -> String {
        match &self.via {
            Some(via) => format!("{label} via {}", via.label()),
            None => label,
        }
    }

    /// A place another view of memory names by its Python line alone (a framework allocator's
    /// records): no native stack, the view named where a library would be.
    pub fn of_line(view_name: &str, owner: OwnerKind, source: SourceLine) -> SiteName {
        SiteName {
            stack: 0,
            caller: 0,
            site: format!("{}:{} in {}", source.file, source.line, source.function),
            module: None,
            module_name: Some(view_name.to_string()),
            py_stack: 0,
            py_stacks_vary: false,
            owner,
            api: None,
            label: Some(source.label()),
            source: Some(source),
            via: None,
            program_frame: 0,
            entry_frame: 0,
            place: Place::Site(u32::MAX),
        }
    }
}

/// A line of the program's Python source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SourceLine {
    /// The file as the interpreter named it (`co_filename`).
    pub file: String,
    pub line: u32,
    /// The function (`co_qualname`), `<module>` at the top level.
    pub function: String,
}

impl SourceLine {
    /// `train.py:42 in step`: the file's base name, as the reports show a line.
    pub fn label(&self) -> String {
        line_label(&self.file, self.line, &self.function)
    }

    /// Whether two lines are the same line of the same file (files compared by base name when
    /// one view recorded a relative path).
    pub(crate) fn same_line(&self, other: &SourceLine) -> bool {
        self.line == other.line
            && (self.file == other.file || base_name(&self.file) == base_name(&other.file))
    }
}

/// The program's line of Python stack frames `line`, with its code object's names.
fn source_of(state: &LiveState, line: ProgramLine) -> Option<SourceLine> {
    if !line.is_some() {
        return None;
    }
    let code = state.python_stacks().code(line.code)?;
    Some(SourceLine {
        file: code.file.clone(),
        line: line.line,
        function: code.function.clone(),
    })
}

/// Where site `id`'s Python line is also reached on other paths of the program (other sites at
/// the same line), the first frame of its own path that differs from one of theirs.
fn via(state: &LiveState, id: SiteId) -> Option<SourceLine> {
    let (key, _) = state.site(id)?;
    let line = key.line;
    if !line.is_some() {
        return None;
    }
    let python = state.python_stacks();
    let callers = |site: SiteId| -> Vec<(u32, u32)> {
        let py_stack = state.site_python(site).map_or(0, |p| p.0);
        (python.program_callers(py_stack).iter())
            .map(|f| (f.code, f.line))
            .collect()
    };
    let others: Vec<Vec<(u32, u32)>> = (state.sites_at_line(line).iter().copied())
        .filter(|&other| {
            state
                .site(other)
                .is_some_and(|(k, _)| k.line.callers != line.callers)
        })
        .map(callers)
        .collect();
    if others.is_empty() {
        return None;
    }
    let mine = callers(id);
    let depth = (0..mine.len()).find(|&d| others.iter().any(|o| o.get(d) != mine.get(d)))?;
    let (code, line) = mine[depth];
    source_of(
        state,
        ProgramLine {
            code,
            line,
            callers: 0,
        },
    )
}

/// The innermost frame of a site that belongs to the program rather than to a library, and the
/// frame before it (in the library the program called); 0 for either that is not there. The
/// tracer's own frames are skipped: the program's call to an intercepted function goes through
/// its hook (`ncclCommInitRank::imp`) into the library's (`pncclCommInitRank`), which the
/// reports name, as they leave the tracer out of every stack.
fn program_frame(state: &LiveState, caller: u64, stack: u32) -> (u64, u64) {
    let owners = state.owners();
    let module = |addr: u64| owners.modules().find(addr);
    let frames: Vec<u64> = std::iter::once(caller)
        .chain(owners.stack(stack).unwrap_or(&[]).iter().copied())
        .filter(|&a| a != 0 && !module(a).is_some_and(|m| is_tracer(m.file_name())))
        .collect();
    let ours = |addr: u64| module(addr).is_some_and(|m| !is_library_module(&m.path));
    match frames.iter().position(|&a| ours(a)) {
        Some(k) => (frames[k], k.checked_sub(1).map_or(0, |e| frames[e])),
        None => (0, 0),
    }
}

/// Names call site `id` of `state`.
pub fn name(state: &LiveState, id: SiteId) -> SiteName {
    let Some((key, caller)) = state.site(id) else {
        return SiteName {
            stack: 0,
            caller: 0,
            site: "(unknown)".to_string(),
            module: None,
            module_name: None,
            py_stack: 0,
            py_stacks_vary: false,
            owner: OwnerKind::Unknown,
            api: None,
            source: None,
            via: None,
            program_frame: 0,
            entry_frame: 0,
            label: None,
            place: Place::Site(id),
        };
    };
    let (py_stack, py_stacks_vary) = state.site_python(id).unwrap_or((0, false));
    let owner = state.owners().resolve(caller, key.stack);
    let location = state.locate(owner.frame);
    let (program, entry) = program_frame(state, caller, key.stack);
    let module = owner.module.and_then(|m| state.owners().modules().by_id(m));
    SiteName {
        stack: key.stack,
        caller,
        site: location.to_string(),
        module: owner.module,
        module_name: module.map(|m| m.file_name().to_string()),
        py_stack,
        py_stacks_vary,
        owner: module.map_or(OwnerKind::Unknown, |m| OwnerKind::of_module(&m.path)),
        api: state.site_api(id).map(|a| a.name()),
        source: source_of(state, key.line),
        via: via(state, id),
        program_frame: program,
        entry_frame: entry,
        label: None,
        place: place(state, id),
    }
}

/// What one place holds (see [`Place`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteAmount {
    /// The place's largest call site.
    #[serde(flatten)]
    pub site: SiteName,
    pub count: u64,
    pub bytes: u64,
    /// Call sites merged into it.
    pub sites: usize,
}

/// Names a list of `(site, count, bytes)`, merged by place, largest first.
pub(crate) fn amounts(
    state: &LiveState,
    holdings: impl IntoIterator<Item = crate::live::SiteHolding>,
) -> Vec<SiteAmount> {
    // Per place: objects, bytes, and each site's bytes.
    type Tally = (u64, u64, Vec<(u64, SiteId)>);
    let mut by_place: BTreeMap<Place, Tally> = BTreeMap::new();
    for h in holdings {
        let e = by_place.entry(place(state, h.site)).or_default();
        e.0 += h.count;
        e.1 += h.bytes;
        e.2.push((h.bytes, h.site));
    }
    let mut list: Vec<SiteAmount> = by_place
        .into_values()
        .map(|(count, bytes, mut sites)| {
            sites.sort_by_key(|&(b, id)| (std::cmp::Reverse(b), id));
            SiteAmount {
                site: name(state, sites[0].1),
                count,
                bytes,
                sites: sites.len(),
            }
        })
        .collect();
    list.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.count.cmp(&a.count))
            .then((a.site.stack, a.site.caller).cmp(&(b.site.stack, b.site.caller)))
    });
    list
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
    use super::{one_place_per_line, short_function};

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

    // A line growing on two of its three paths is one place on all three; a line growing on one
    // path, a line on no path and a line that does not grow keep theirs.
    #[test]
    fn a_line_growing_on_two_paths_is_one_place_on_all_of_them() {
        let items = [
            (Some("helper:7"), true),
            (Some("helper:7"), false),
            (Some("train:40"), true),
            (None, true),
            (Some("helper:7"), true),
            (None, true),
            (Some("eval:9"), false),
            (Some("eval:9"), false),
        ];
        let whole: Vec<usize> = one_place_per_line(items).into_iter().collect();
        assert_eq!(whole, [0, 1, 4]);
    }
}
