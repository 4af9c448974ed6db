//! The dense ids a replay gives call sites. They are a module of their own so that the parts of
//! the replay that key on them — the site table that hands them out (`live::sites`) and the step
//! detector that follows allocations by site (`live::steps`) — depend on this leaf rather than
//! on each other.

/// Dense id of a call site within one replay, in the order sites are first seen.
pub type SiteId = u32;

/// Dense id of an interned call (a site plus what alike calls share) within one replay.
pub(crate) type CallId = u32;
