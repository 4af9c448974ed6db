//! The location table of a CPython 3.11+ code object (`co_linetable`), read for line numbers only.
//!
//! Format (CPython `Objects/locations.md`): a sequence of entries, each covering 1–8 code units.
//! The first byte of an entry has its top bit set; bits 3–6 are the entry's code, bits 0–2 the
//! number of code units it covers minus one. Codes 0–12 keep the line (10, 11, 12: line + 0, 1,
//! 2); 13 (no columns) and 14 (long form) start with a signed varint line delta; 15 means "no
//! location". The line starts at `co_firstlineno`. This mirrors `_PyCode_CheckLineNumber` in
//! CPython's `Objects/codeobject.c`, so a line here is what `frame.f_lineno` and tracebacks say.

/// Entry code: no location (the instruction has no line).
const NONE: u8 = 15;
/// Entry code: long form (line delta, end line delta, columns).
const LONG: u8 = 14;
/// Entry code: line delta and no columns.
const NO_COLUMNS: u8 = 13;
/// Entry codes 10–12: one-line forms whose line delta is `code - 10`.
const ONE_LINE0: u8 = 10;

/// The line of the instruction at code unit `index` of a code object whose location table is
/// `table` and whose first line is `first_line`. `None` where the instruction has no line (or
/// the table does not reach `index`). A negative `index` (a frame that has not started) is the
/// first line, as in CPython.
pub fn line_at(table: &[u8], first_line: i32, index: isize) -> Option<u32> {
    if index < 0 {
        return u32::try_from(first_line).ok();
    }
    let index = index as usize;
    let mut line = first_line as i64;
    let mut end = 0usize;
    let mut at = 0usize;
    while at < table.len() {
        let head = table[at];
        let code = (head >> 3) & 15;
        line = line.wrapping_add(match code {
            NO_COLUMNS | LONG => signed_varint(&table[at + 1..]),
            ONE_LINE0..=12 => (code - ONE_LINE0) as i64,
            _ => 0,
        });
        end += (head & 7) as usize + 1;
        if index < end {
            return if code == NONE {
                None
            } else {
                u32::try_from(line).ok()
            };
        }
        // The next entry starts at the next byte with its top bit set.
        at += 1;
        while at < table.len() && table[at] & 0x80 == 0 {
            at += 1;
        }
    }
    None
}

/// A varint of 6-bit groups, least significant first, bit 6 meaning "more follows".
fn varint(bytes: &[u8]) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    for &b in bytes {
        if shift < 64 {
            value |= ((b & 63) as u64) << shift;
        }
        if b & 64 == 0 {
            break;
        }
        shift += 6;
    }
    value
}

/// A varint holding `magnitude << 1 | sign`.
fn signed_varint(bytes: &[u8]) -> i64 {
    let v = varint(bytes);
    let magnitude = (v >> 1) as i64;
    if v & 1 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function's `co_linetable` and `co_firstlineno`, with the line of each code unit as
    /// `code.co_positions()` reports it (0: no line).
    struct Vector {
        first_line: i32,
        table: &'static [u8],
        lines: &'static [u32],
    }

    /// Made by compiling a small module (straight-line code, a loop with a back edge to an
    /// earlier line, a 72-line gap needing a two-byte varint, a multi-line expression, try /
    /// except / finally with location-less cleanup code, a generator) with each CPython and
    /// dumping `co_linetable`, `co_firstlineno` and `co_positions()`.
    const VECTORS: &[Vector] = &[
        // `simple` compiled by CPython 3.11
        Vector {
            first_line: 1,
            table: &[
                128, 0, 216, 8, 9, 136, 65, 137, 5, 128, 65, 216, 11, 12, 136, 113, 137, 53, 128,
                76,
            ],
            lines: &[1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3],
        },
        // `loop` compiled by CPython 3.11
        Vector {
            first_line: 6,
            table: &[
                128, 0, 216, 12, 13, 128, 69, 216, 13, 15, 240, 0, 4, 5, 23, 240, 0, 4, 5, 23, 136,
                1, 216, 11, 12, 136, 113, 137, 53, 240, 0, 3, 9, 23, 216, 12, 17, 144, 81, 137, 74,
                136, 69, 136, 69, 224, 12, 17, 144, 81, 137, 74, 136, 69, 136, 69, 216, 11, 16,
                128, 76,
            ],
            lines: &[
                6, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 12, 12, 12, 12, 12, 12,
                13, 13,
            ],
        },
        // `far_lines` compiled by CPython 3.11
        Vector {
            first_line: 16,
            table: &[
                128, 0, 216, 8, 9, 136, 65, 137, 5, 128, 65, 240, 80, 2, 0, 9, 10, 136, 65, 137, 5,
                128, 65, 216, 9, 10, 216, 9, 10, 241, 3, 1, 10, 11, 224, 9, 10, 241, 5, 2, 10, 11,
                128, 65, 240, 6, 0, 12, 13, 128, 72,
            ],
            lines: &[
                16, 17, 17, 17, 17, 17, 89, 89, 89, 89, 89, 90, 91, 90, 90, 92, 90, 90, 90, 93, 93,
            ],
        },
        // `handler` compiled by CPython 3.11
        Vector {
            first_line: 96,
            table: &[
                128, 0, 240, 2, 5, 5, 17, 216, 15, 16, 136, 113, 137, 115, 140, 115, 240, 8, 0, 13,
                17, 136, 1, 136, 1, 248, 245, 7, 0, 12, 22, 240, 0, 1, 5, 22, 240, 0, 1, 5, 22,
                240, 0, 1, 5, 22, 221, 15, 18, 144, 49, 137, 118, 140, 118, 136, 13, 136, 13, 136,
                13, 136, 13, 136, 13, 224, 12, 16, 136, 1, 136, 1, 248, 248, 248, 248, 240, 7, 1,
                5, 22, 248, 248, 248, 248, 240, 6, 0, 13, 17, 136, 1, 136, 8, 136, 8, 136, 8, 136,
                8,
            ],
            lines: &[
                96, 97, 98, 98, 98, 98, 98, 98, 98, 98, 98, 102, 102, 102, 0, 99, 99, 99, 99, 99,
                99, 99, 99, 99, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100,
                100, 100, 100, 100, 100, 100, 102, 102, 102, 0, 0, 0, 0, 99, 0, 0, 0, 0, 102, 102,
                102, 102, 102, 102,
            ],
        },
        // `gen` compiled by CPython 3.11
        Vector {
            first_line: 105,
            table: &[
                232, 0, 232, 0, 128, 0, 221, 13, 18, 144, 49, 137, 88, 140, 88, 240, 0, 1, 5, 20,
                240, 0, 1, 5, 20, 136, 1, 216, 14, 15, 144, 33, 137, 101, 136, 11, 136, 11, 136,
                11, 136, 11, 240, 3, 1, 5, 20, 240, 0, 1, 5, 20,
            ],
            lines: &[
                105, 105, 105, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106,
                106, 106, 106, 106, 107, 107, 107, 107, 107, 107, 107, 107, 106, 106,
            ],
        },
        // `loop` compiled by CPython 3.13
        Vector {
            first_line: 6,
            table: &[
                128, 0, 216, 12, 13, 128, 69, 219, 13, 15, 136, 1, 216, 11, 12, 136, 113, 143, 53,
                216, 12, 17, 137, 74, 138, 69, 224, 12, 17, 137, 74, 138, 69, 241, 9, 0, 14, 16,
                240, 10, 0, 12, 17, 128, 76,
            ],
            lines: &[
                6, 7, 7, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 12,
                12, 12, 12, 12, 12, 8, 8, 13, 13,
            ],
        },
        // `handler` compiled by CPython 3.13
        Vector {
            first_line: 96,
            table: &[
                128, 0, 240, 2, 5, 5, 17, 217, 15, 16, 139, 115, 240, 8, 0, 13, 17, 137, 1, 248,
                244, 7, 0, 12, 22, 243, 0, 1, 5, 22, 220, 15, 18, 144, 49, 139, 118, 140, 13, 224,
                12, 16, 137, 1, 251, 240, 7, 1, 5, 22, 251, 240, 6, 0, 13, 17, 137, 1, 250,
            ],
            lines: &[
                96, 97, 98, 98, 98, 98, 98, 98, 102, 102, 102, 0, 99, 99, 99, 99, 99, 99, 99, 99,
                99, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 102,
                102, 102, 0, 0, 0, 0, 99, 0, 0, 0, 0, 102, 102, 102, 0, 0, 0,
            ],
        },
        // `gen` compiled by CPython 3.13
        Vector {
            first_line: 105,
            table: &[
                233, 0, 128, 0, 220, 13, 18, 144, 49, 142, 88, 136, 1, 216, 14, 15, 144, 33, 137,
                101, 140, 11, 242, 3, 0, 14, 22, 249,
            ],
            lines: &[
                105, 105, 105, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106, 106,
                106, 107, 107, 107, 107, 107, 107, 107, 107, 107, 106, 106, 106, 0, 0,
            ],
        },
    ];

    #[test]
    fn lines_match_cpython_for_every_code_unit() {
        for (n, v) in VECTORS.iter().enumerate() {
            for (i, &want) in v.lines.iter().enumerate() {
                let want = (want != 0).then_some(want);
                assert_eq!(
                    line_at(v.table, v.first_line, i as isize),
                    want,
                    "vector {n}, code unit {i}"
                );
            }
        }
    }

    #[test]
    fn before_the_first_instruction_is_the_first_line() {
        assert_eq!(line_at(VECTORS[0].table, 41, -1), Some(41));
    }

    #[test]
    fn past_the_table_has_no_line() {
        let v = &VECTORS[0];
        assert_eq!(line_at(v.table, v.first_line, v.lines.len() as isize), None);
        assert_eq!(line_at(&[], 1, 0), None);
    }

    #[test]
    fn truncated_entries_do_not_panic() {
        // A long-form entry cut after its first byte, and a varint that never ends.
        assert_eq!(line_at(&[0xf0], 7, 0), Some(7));
        assert_eq!(line_at(&[0xe8, 0x02, 0x7f], 7, 0), Some(8));
        assert_eq!(line_at(&[0xe8, 0x7f, 0x7f, 0x7f], 7, 0), None);
    }
}
