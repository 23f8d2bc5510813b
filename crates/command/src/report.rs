//! Output of results: a table for people, JSON for machines, an error on one line.

use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

/// A table with a header row; numeric-looking cells are right-aligned.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(header.iter().map(Cell::new));
    for row in rows {
        t.add_row(row.into_iter().map(|c| {
            let numeric = c.starts_with(|ch: char| ch.is_ascii_digit() || ch == '-');
            let cell = Cell::new(c);
            if numeric {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        }));
    }
    t.to_string()
}

/// Prints a value as pretty JSON on stdout (a closed pipe is an error, not a panic).
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(out.flush()?)
}

/// The error and its causes on one line, each said once: a cause whose text its
/// context already shows is not repeated.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}
