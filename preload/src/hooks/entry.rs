//! One hook as the resolvers see it: its exact exported name, where its real function is kept,
//! and which of its copies to hand out for a real pointer. The `hooks!` macro builds one per
//! hook; the resolvers (`hooks::closure`) look them up by name.

use crate::resolve::{driver, loaded, Slots, COPIES};

/// One hook as the resolvers see it.
pub struct HookEntry {
    /// The exact exported name (`cuMemAlloc_v2`).
    pub name: &'static str,
    pub slots: &'static Slots,
    exported: *const (),
    copies: [*const (); COPIES],
}

// SAFETY: the pointers are addresses of functions in this library; they are never written.
unsafe impl Sync for HookEntry {}

impl HookEntry {
    /// A registry entry (built by the `hooks!` macro).
    pub const fn new(
        name: &'static str,
        slots: &'static Slots,
        exported: *const (),
        copies: [*const (); COPIES],
    ) -> Self {
        HookEntry {
            name,
            slots,
            exported,
            copies,
        }
    }

    /// The wrapper to hand out in place of `real`, or `None` when every copy already forwards to
    /// another function (the caller then hands out `real` itself and says so).
    pub fn wrap(&'static self, real: usize) -> Option<usize> {
        if real == 0 {
            return None;
        }
        if loaded::is_ours(real) {
            return Some(real);
        }
        if self.name.starts_with("cu") && !self.name.starts_with("cuda") {
            driver::note_function(real);
        }
        if self.slots.link_value() == real {
            return Some(self.exported as usize);
        }
        self.slots.claim(real).map(|i| self.copies[i] as usize)
    }
}
