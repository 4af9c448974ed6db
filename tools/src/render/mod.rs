//! What every command prints, in one place: the analyses in words (`findings/`: the text
//! report, `replay`, `check` and the HTML page say them from the same functions), the terminal
//! tables, and numbers as the outputs print them (`units.rs`). It reads the collector's results
//! only, never a command's, so any command can use it.

pub mod findings;
pub mod tables;
pub mod units;
