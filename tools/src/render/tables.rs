//! Terminal tables in the house style, shared by every command that prints them.

use std::io::{self, Write};

use comfy_table::{CellAlignment, ContentArrangement, LineStyle, Table, TableStyle};

/// Lines under the header only: quiet enough to read many tables in a row.
const STYLE: TableStyle =
    TableStyle::new().header_separator(LineStyle::none().fill('─').junction('─'));

/// A table with `headers`, the columns listed in `right` aligned right (numbers).
pub fn table(headers: &[&str], right: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_style(STYLE)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(headers.to_vec());
    for &i in right {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// Writes a titled table after a blank line.
pub fn emit(out: &mut impl Write, title: &str, t: &Table) -> io::Result<()> {
    writeln!(out, "\n{title}")?;
    writeln!(out, "{t}")
}

/// A name, or `(unknown)`.
pub fn or_unknown(name: Option<&str>) -> &str {
    name.unwrap_or("(unknown)")
}

/// `5`, or `3..9` for a range of sequence numbers.
pub fn seq_range(first: u64, last: u64) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}..{last}")
    }
}
