//! The `vramtrace` command line, run as a user would: known traces in, exact numbers, exit codes
//! and error lines out.

mod acceptance;
mod data;
mod diff;
mod errors;
mod exports;
mod gate;
mod gpu;
mod html;
mod outputs;
mod reading;
mod replay;
mod report;
mod run;
mod runs;
mod said_once;
mod segments;
mod support;
mod symbols;
