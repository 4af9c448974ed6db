//! Naming a call site for reports: the frame that names its owner as `module+offset`, with the
//! raw stack id, caller address and an example Python stack kept for symbolization, and a label
//! a symbolizing reader fills in.

use serde::Serialize;

use crate::live::{LiveState, SiteId};

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
    /// The site in words (`train.py:88 in step`, or the native function that asked), filled in
    /// by a reader with symbols ([`Analysis::sites_mut`](super::Analysis::sites_mut)); `null`
    /// otherwise.
    pub label: Option<String>,
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
            label: None,
        };
    };
    let (py_stack, py_stacks_vary) = state.site_python(id).unwrap_or((0, false));
    let owner = state.owners().resolve(caller, key.stack);
    let location = state.locate(owner.frame);
    SiteName {
        stack: key.stack,
        caller,
        site: location.to_string(),
        module: owner.module,
        module_name: owner
            .module
            .and_then(|m| state.owners().module_name(m).map(str::to_string)),
        py_stack,
        py_stacks_vary,
        label: None,
    }
}

/// What one call site holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteAmount {
    #[serde(flatten)]
    pub site: SiteName,
    pub count: u64,
    pub bytes: u64,
}

/// Names a list of `(site, count, bytes)`.
pub(crate) fn amounts(
    state: &LiveState,
    holdings: impl IntoIterator<Item = crate::live::SiteHolding>,
) -> Vec<SiteAmount> {
    holdings
        .into_iter()
        .map(|h| SiteAmount {
            site: name(state, h.site),
            count: h.count,
            bytes: h.bytes,
        })
        .collect()
}
