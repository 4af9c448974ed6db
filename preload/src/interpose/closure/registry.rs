//! Every hook by exact exported name: the library's hooks and the resolvers' own.

use crate::hooks::{self, HookEntry};

/// The hook for an exact exported name.
pub fn find(name: &[u8]) -> Option<&'static HookEntry> {
    if !(name.starts_with(b"cu") || name.starts_with(b"nccl")) {
        return None;
    }
    hooks::all()
        .chain(super::proc_address::ENTRIES.iter().copied())
        .chain(super::entry_point::ENTRIES.iter().copied())
        .find(|e| e.name.as_bytes() == name)
}
