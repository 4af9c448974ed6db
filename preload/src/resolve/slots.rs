//! The real functions behind each hook.
//!
//! Every hook exists as one exported symbol (which interposes by name and forwards to the
//! definition the program would have bound to) plus [`COPIES`] unexported copies that are handed
//! out by the resolvers (`dlsym`, `cuGetProcAddress`, ...). Each copy forwards to its own real
//! pointer, so pointers that differ (a driver that hands out internal entry points, a second copy
//! of the runtime) each keep their exact target.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{driver, loaded};

/// Wrapper copies per hook for pointers handed out by resolvers.
pub const COPIES: usize = 4;
/// Slot index of the exported symbol's real function.
pub const LINK: usize = COPIES;

/// The real function of each copy of one hook.
pub struct Slots {
    real: [AtomicUsize; COPIES + 1],
}

impl Slots {
    /// Empty slots.
    #[allow(clippy::declare_interior_mutable_const)]
    pub const fn new() -> Self {
        const EMPTY: AtomicUsize = AtomicUsize::new(0);
        Slots {
            real: [EMPTY; COPIES + 1],
        }
    }

    /// The real function for copy `K`; the exported copy (`LINK`) resolves it on first use.
    #[inline]
    pub fn real<const K: usize>(&self, name: &CStr) -> Option<usize> {
        let p = self.real[K].load(Ordering::Acquire);
        if p != 0 {
            return Some(p);
        }
        if K == LINK {
            return self.resolve_link(name);
        }
        None
    }

    #[cold]
    fn resolve_link(&self, name: &CStr) -> Option<usize> {
        let p = loaded::find_real(name)?;
        driver::note_function(p);
        self.real[LINK].store(p, Ordering::Release);
        Some(p)
    }

    /// The exported copy's real function if it was already resolved.
    pub fn link_value(&self) -> usize {
        self.real[LINK].load(Ordering::Acquire)
    }

    /// The copy index that forwards to `real`, claiming a free one if needed; `None` when all
    /// copies forward elsewhere.
    pub fn claim(&self, real: usize) -> Option<usize> {
        debug_assert!(!loaded::is_ours(real));
        for (i, slot) in self.real[..COPIES].iter().enumerate() {
            match slot.compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(i),
                Err(existing) if existing == real => return Some(i),
                Err(_) => {}
            }
        }
        None
    }

    /// Forgets every resolved pointer (tests only).
    #[cfg(test)]
    pub fn clear(&self) {
        for s in &self.real {
            s.store(0, Ordering::Release);
        }
    }
}

impl Default for Slots {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_distinct_pointers_once_each() {
        let s = Slots::new();
        assert_eq!(s.claim(0x1000), Some(0));
        assert_eq!(s.claim(0x2000), Some(1));
        assert_eq!(s.claim(0x1000), Some(0));
        assert_eq!(s.claim(0x3000), Some(2));
        assert_eq!(s.claim(0x4000), Some(3));
        assert_eq!(s.claim(0x5000), None);
        assert_eq!(s.real::<1>(c"x"), Some(0x2000));
        s.clear();
        assert_eq!(s.real::<1>(c"x"), None);
    }
}
