//! Naming a call site for reports: the frame that names its owner as `module+offset`, with the
//! raw stack id and caller address kept for symbolization.

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
        };
    };
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
