//! Call-site labels for the analyses' tables: a site is a native stack, and
//! `libc10_cuda.so+0x4bfb4` tells a PyTorch user nothing, since every tensor comes through that
//! frame. A site is labelled by the program's Python line that made it (`py_leak.py:18 in
//! <module>`: sites are split by that line, so it is the same for all of a site's calls), else by
//! the native function that asked (`DeviceCachingAllocator::alloc_block`), else by
//! `module+offset` as recorded. The analysis names its sites here, once, with the reader's symbols
//! ([`label_sites`]): `report`, `replay` and `diff` show what it says, `export` its frames and the
//! call sites of its Parquet tables.

use std::collections::{BTreeSet, HashMap};

use super::{frames_label, Attribution, CallRef, FrameKind};
use crate::analysis::{short_function, Analysis, SiteName};
use crate::live::Holder;

/// Fills in the label of every site the answers name, and tells apart the places of one list
/// whose labels came out the same on one kind of memory, each by the same tag in every list.
pub fn label_sites(analysis: &mut Analysis, naming: &mut Attribution<'_>) {
    // Each place (its native stack, caller and Python stack) is named once; the rows of other
    // views (a framework allocator's) come named by their source.
    let mut named: HashMap<Place, Option<String>> = HashMap::new();
    for site in analysis.sites_mut().filter(|s| own(s)) {
        let label = named
            .entry(place(site))
            .or_insert_with(|| label(naming, site))
            .clone();
        site.label = label;
    }
    // The places of each kind of memory that read the same, and the lists in which two of them
    // stand: there each wears a tag, one per place and kind, chosen among all of them, so that a
    // place has one name, or that name and always the same tag, in every table.
    let mut alike: HashMap<Shown, HashMap<Place, SiteName>> = HashMap::new();
    let mut in_list: HashMap<(usize, String, Shown), BTreeSet<Place>> = HashMap::new();
    each_row(analysis, |list, key, kind, s| {
        let shown = shown(kind, s);
        alike
            .entry(shown.clone())
            .or_default()
            .entry(place(s))
            .or_insert_with(|| s.clone());
        in_list
            .entry((list, key.to_string(), shown))
            .or_default()
            .insert(place(s));
    });
    let mut tags: HashMap<(&'static str, Place), String> = HashMap::new();
    for (shown, places) in alike.iter().filter(|(_, p)| p.len() > 1) {
        for (p, tag) in tell_apart(naming, places) {
            tags.insert((shown.0, p), tag);
        }
    }
    each_row(analysis, |list, key, kind, s| {
        let shown = shown(kind, s);
        let two = in_list
            .get(&(list, key.to_string(), shown))
            .is_some_and(|p| p.len() > 1);
        if let Some(tagged) = tags.get(&(kind, place(s))).filter(|_| two) {
            s.label = Some(tagged.clone());
        }
    });
}

/// What a row shows of a place: the kind of memory it is about, its label, its module.
type Shown = (&'static str, String, Option<String>);

fn shown(kind: &'static str, s: &SiteName) -> Shown {
    let label = s.label.clone().unwrap_or_else(|| s.site.clone());
    (kind, label, s.module_name.clone())
}

/// The kind of memory a holder is: `device` or `host`.
fn kind(h: Holder) -> &'static str {
    match h {
        Holder::Device { .. } => "device",
        Holder::Host => "host",
    }
}

/// Visits every row of every list of the answers that names a place the reader labels: the
/// list's number, what else tells its rows apart (a row's holder, a finding's class), the kind
/// of memory the row is about, and its site.
fn each_row(
    analysis: &mut Analysis,
    mut visit: impl FnMut(usize, &str, &'static str, &mut SiteName),
) {
    let mut list = 0;
    let mut next = || {
        list += 1;
        list
    };
    let g = &mut analysis.growth;
    for rows in [
        &mut g.steady,
        &mut g.peaks,
        &mut g.shrinking,
        &mut g.one_off_rises,
    ] {
        let n = next();
        // Rows of one place on two holders (device and host) are told apart by their holder.
        for s in rows.iter_mut().filter(|s| own(&s.site)) {
            visit(n, &s.holder.name(), kind(s.holder), &mut s.site);
        }
    }
    let n = next();
    for s in analysis.leaks.sites.iter_mut().filter(|s| own(&s.site)) {
        let kind = match (s.bytes, s.host_bytes) {
            (b, _) if b > 0 => "device",
            (_, h) if h > 0 => "host",
            _ => "other",
        };
        visit(n, "", kind, &mut s.site);
    }
    for h in &mut analysis.peaks.holders {
        let n = next();
        for s in h.by_site.iter_mut().filter(|s| own(&s.site)) {
            visit(n, "", kind(h.holder), &mut s.site);
        }
    }
    for f in &mut analysis.ooms.failures {
        let n = next();
        for s in f.by_site.iter_mut().filter(|s| own(&s.site)) {
            visit(n, "", "device", &mut s.site);
        }
    }
    let n = next();
    for f in &mut analysis.diagnosis {
        let key = format!(
            "{} {}",
            f.class.name(),
            f.holder.map_or(String::new(), |h| h.name())
        );
        let kind = f.holder.map_or("other", kind);
        if let Some(s) = f.site.as_mut().filter(|s| own(s)) {
            visit(n, &key, kind, s);
        }
    }
}

/// Whether the tracer's reader names `s` (not a row of a framework allocator's view, which
/// comes named by its source).
fn own(s: &SiteName) -> bool {
    (s.stack, s.caller, s.py_stack) != (0, 0, 0) || s.label.is_none()
}

fn place(s: &SiteName) -> Place {
    (s.stack, s.caller, s.py_stack)
}

/// A place: its native stack, its caller, its Python stack.
type Place = (u32, u64, u32);

/// Places that read the same (two native paths through one function, as NCCL's channel
/// buffers and its all-reduce buffer both come from its own `cudaMalloc`) are told apart by the
/// first function where their stacks part: `cudaMalloc via comm_create`. When no function
/// differs, by their recorded `module+offset`, else their stack. Returns each place's label
/// with its tag.
fn tell_apart(
    naming: &mut Attribution<'_>,
    places: &HashMap<Place, SiteName>,
) -> Vec<(Place, String)> {
    // In one order whatever the hash map's, so that the names are the same in every run.
    let mut members: Vec<Place> = places.keys().copied().collect();
    members.sort_unstable();
    let sites: Vec<&SiteName> = members.iter().map(|k| &places[k]).collect();
    let stacks: Vec<Vec<String>> = sites.iter().map(|s| native_functions(naming, s)).collect();
    let depth = stacks.iter().map(Vec::len).max().unwrap_or(0);
    let parting = (0..depth).find(|&d| {
        let at = |s: &Vec<String>| s.get(d).cloned().unwrap_or_default();
        stacks.iter().any(|s| at(s) != at(&stacks[0]))
    });
    // Each member is told apart by the first of these that no other member shares.
    let tags: Vec<[Option<String>; 3]> = sites
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let via =
                parting.map(|d| format!("via {}", stacks[k].get(d).map_or("?", String::as_str)));
            [
                via,
                Some(format!("[{}]", s.site)),
                Some(format!("[stack {}]", s.stack)),
            ]
        })
        .collect();
    let mut out = Vec::new();
    for (k, (key, s)) in members.iter().zip(&sites).enumerate() {
        let unique = (0..3).find_map(|t| {
            let tag = tags[k][t].as_ref()?;
            let shared = tags.iter().filter(|o| o[t].as_ref() == Some(tag)).count();
            (shared == 1).then(|| tag.clone())
        });
        let base = s.label.clone().unwrap_or_else(|| s.site.clone());
        let tag = unique.unwrap_or_else(|| format!("[stack {}]", s.stack));
        out.push((*key, format!("{base} {tag}")));
    }
    out
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

/// The label of `site`: its mixed stack named by the one rule ([`frames_label`]), and the line
/// of the program's path it came by where other paths reach the same line
/// ([`SiteName::via`]); `None` when nothing names it (the recorded `module+offset` then does).
pub fn label(naming: &mut Attribution<'_>, site: &SiteName) -> Option<String> {
    let call = CallRef {
        caller: site.caller,
        stack: site.stack,
        py_stack: site.py_stack,
    };
    Some(site.on_its_path(frames_label(&naming.stack(call))?))
}
