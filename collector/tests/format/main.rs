//! Trace format: round trips of every record and operation, format 4 files, damage (a flipped
//! bit anywhere, a cut at every byte, random bytes) and reading ahead on other threads.

mod ahead;
mod compat;
mod damage;
mod layout;
mod roundtrip;
mod support;
