//! Finding real functions: glibc's `dlsym` without `dlsym`, definitions in local scopes, the
//! driver library, and the per-hook slots that remember which real function each wrapper calls.

pub mod dl;
pub mod driver;
pub mod elf;
pub mod loaded;
pub mod slots;

pub use slots::{Slots, COPIES, LINK};
