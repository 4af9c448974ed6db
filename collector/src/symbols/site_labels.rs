//! Call-site labels for the analyses' tables: a site is a native stack, and
//! `libc10_cuda.so+0x4bfb4` tells a PyTorch user nothing, since every tensor comes through that
//! frame. A site is labelled by the program's Python line that made it (`py_leak.py:18 in
//! <module>`: sites are split by that line, so it is the same for all of a site's calls), else by
//! the native function that asked (`DeviceCachingAllocator::alloc_block`), else by
//! `module+offset` as recorded. The analysis names its sites here, once, with the reader's symbols
//! ([`label_sites`]): `report`, `replay` and `diff` show what it says, `export` its frames and the
//! call sites of its Parquet tables.

use std::collections::HashMap;

use super::{frames_label, Attribution, CallRef, FrameKind};
use crate::analysis::{short_function, Analysis, SiteName};

/// Fills in the label of every site the answers name, and tells apart the places of one list
/// whose labels came out the same, each by the same tag in every list.
pub fn label_sites(analysis: &mut Analysis, naming: &mut Attribution<'_>) {
    // Each place (its native stack, caller and Python stack) is named once; the rows of other
    // views (a framework allocator's) come named by their source.
    let mut places: HashMap<Place, SiteName> = HashMap::new();
    for site in analysis.sites_mut().filter(|s| own(s)) {
        let named = places.entry(place(site)).or_insert_with(|| {
            let mut named = site.clone();
            named.label = label(naming, site);
            named
        });
        site.label = named.label.clone();
    }
    // Places that read the same get one distinguishing tag each, chosen among all of them, and
    // wear it in every list where another place reads the same: a place has one name, or that
    // name and always the same tag, in every table.
    let tags = tell_apart(naming, &places);
    let g = &mut analysis.growth;
    for list in [
        &mut g.steady,
        &mut g.peaks,
        &mut g.shrinking,
        &mut g.one_off_rises,
    ] {
        // Rows of one place on two holders (device and host) are told apart by their holder.
        let rows = list.iter_mut().map(|s| (s.holder.name(), &mut s.site));
        tag_alike(&tags, rows.collect());
    }
    let leaks = analysis.leaks.sites.iter_mut();
    tag_alike(&tags, leaks.map(|s| (String::new(), &mut s.site)).collect());
    for h in &mut analysis.peaks.holders {
        let rows = h.by_site.iter_mut().map(|s| (String::new(), &mut s.site));
        tag_alike(&tags, rows.collect());
    }
    for f in &mut analysis.ooms.failures {
        let rows = f.by_site.iter_mut().map(|s| (String::new(), &mut s.site));
        tag_alike(&tags, rows.collect());
    }
    let findings = analysis.diagnosis.iter_mut().filter_map(|f| {
        let kind = format!(
            "{} {}",
            f.class.name(),
            f.holder.map_or(String::new(), |h| h.name())
        );
        f.site.as_mut().map(|s| (kind, s))
    });
    tag_alike(&tags, findings.collect());
}

/// Whether the tracer's reader names `s` (not a row of a framework allocator's view, which
/// comes named by its source).
fn own(s: &SiteName) -> bool {
    (s.stack, s.caller, s.py_stack) != (0, 0, 0) || s.label.is_none()
}

fn place(s: &SiteName) -> Place {
    (s.stack, s.caller, s.py_stack)
}

/// In one list, the rows of places that read the same on one holder (`String`: the holder,
/// or what else tells rows apart) wear their tags.
fn tag_alike(tags: &HashMap<Place, String>, mut list: Vec<(String, &mut SiteName)>) {
    let shown = |holder: &str, s: &SiteName| {
        let label = s.label.clone().unwrap_or_else(|| s.site.clone());
        (holder.to_string(), label, s.module_name.clone())
    };
    let mut groups: HashMap<_, Vec<usize>> = HashMap::new();
    for (i, (holder, s)) in list.iter().enumerate() {
        groups.entry(shown(holder, s)).or_default().push(i);
    }
    for members in groups.into_values() {
        let mut distinct: Vec<Place> = members.iter().map(|&i| place(list[i].1)).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < 2 {
            continue;
        }
        for i in members {
            let s = &mut *list[i].1;
            if let Some(tagged) = tags.get(&place(s)).filter(|_| own(s)) {
                s.label = Some(tagged.clone());
            }
        }
    }
}

/// A place: its native stack, its caller, its Python stack.
type Place = (u32, u64, u32);

/// Places that read the same (two native paths through one function, as NCCL's channel
/// buffers and its all-reduce buffer both come from its own `cudaMalloc`) are told apart by the
/// first function where their stacks part: `cudaMalloc via comm_create`. When no function
/// differs, by their recorded `module+offset`, else their stack. Returns the tagged labels of
/// the places that share theirs.
fn tell_apart(
    naming: &mut Attribution<'_>,
    places: &HashMap<Place, SiteName>,
) -> HashMap<Place, String> {
    let shown = |s: &SiteName| {
        let label = s.label.clone().unwrap_or_else(|| s.site.clone());
        (label, s.module_name.clone())
    };
    let mut groups: HashMap<(String, Option<String>), Vec<Place>> = HashMap::new();
    for (key, s) in places {
        groups.entry(shown(s)).or_default().push(*key);
    }
    let mut apart = HashMap::new();
    for mut members in groups.into_values().filter(|m| m.len() > 1) {
        // In one order whatever the hash map's, so that the names are the same in every run.
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
                let via = parting
                    .map(|d| format!("via {}", stacks[k].get(d).map_or("?", String::as_str)));
                [
                    via,
                    Some(format!("[{}]", s.site)),
                    Some(format!("[stack {}]", s.stack)),
                ]
            })
            .collect();
        for (k, (key, s)) in members.iter().zip(&sites).enumerate() {
            let unique = (0..3).find_map(|t| {
                let tag = tags[k][t].as_ref()?;
                let shared = tags.iter().filter(|o| o[t].as_ref() == Some(tag)).count();
                (shared == 1).then(|| tag.clone())
            });
            let base = shown(s).0;
            let tag = unique.unwrap_or_else(|| format!("[stack {}]", s.stack));
            apart.insert(*key, format!("{base} {tag}"));
        }
    }
    apart
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

/// The label of `site`: its mixed stack named by the one rule ([`frames_label`]); `None` when
/// nothing names it (the recorded `module+offset` then does).
pub fn label(naming: &mut Attribution<'_>, site: &SiteName) -> Option<String> {
    let call = CallRef {
        caller: site.caller,
        stack: site.stack,
        py_stack: site.py_stack,
    };
    frames_label(&naming.stack(call))
}
