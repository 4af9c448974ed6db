//! The live-allocation state: each semantic of each operation, with exact numbers, and property
//! tests over random valid event sequences.

mod attribution;
mod memory;
mod nccl;
mod props;
mod snapshot;
mod support;
mod teardown;
mod vmm;
