//! The `vramtrace` command line, run as a user would: known traces in, exact numbers, exit codes
//! and error lines out.

mod errors;
mod exports;
mod html;
mod replay;
mod report;
mod run;
mod support;
mod symbols;
