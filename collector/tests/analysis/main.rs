//! The analyses on synthetic traces with planted ground truth (written with `TraceWriter`, read
//! back and replayed): each finds exactly the planted cases, with their exact numbers.

mod devices;
mod faults;
mod oom;
mod orphans;
mod props;
mod support;
mod training;
mod watch;
