//! Symbolization against real binaries built at test time: exact functions, files and lines
//! from DWARF (inlined frames included), function names from symbol tables, `module+offset` when
//! no file is usable, the search for a binary by build id, and call-site keys and mixed stacks.

mod attribution;
mod dwarf;
mod fallback;
mod fixture;
