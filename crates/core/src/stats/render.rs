//! The three shapes of `show stat`: CSV (HAProxy's header line, then one line per row, each
//! ending in a comma), typed lines, and JSON.

use std::fmt::Write as _;

use super::fields::{self, FIELDS, SEPARATOR};
use super::row::{Cell, Kind, Row};

/// HAProxy's CSV: `# pxname,svname,...,` then the rows.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::with_capacity(64 + rows.len() * 512);
    out.push_str("# ");
    for f in FIELDS {
        out.push_str(f.name);
        out.push(',');
    }
    out.push('\n');
    for r in rows {
        for cell in &r.cells {
            match cell {
                Some(Cell::Num(n)) => {
                    let _ = write!(out, "{n}");
                }
                // A value never carries the separator.
                Some(Cell::Text(t)) => out.push_str(&t.replace(',', " ")),
                None => {}
            }
            out.push(',');
        }
        out.push('\n');
    }
    out
}

/// The position the typed and JSON forms give a column: the module counters after the
/// separator are numbered as if it were not there.
fn typed_pos(i: usize) -> usize {
    if i > SEPARATOR {
        i - 1
    } else {
        i
    }
}

/// The non-empty cells of a row, with their column, skipping the separator.
fn filled(r: &Row) -> impl Iterator<Item = (usize, &Cell)> {
    r.cells
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != SEPARATOR)
        .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
}

/// `show stat typed`: `F.iid.sid.pos.name.1:TAGS:type:value`, one line per value, a blank
/// line after each row.
pub fn typed(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        for (i, c) in filled(r) {
            let f = &FIELDS[i];
            let _ = write!(
                out,
                "{}.{}.{}.{}.{}.1:{}:{}:",
                r.kind.letter(),
                r.iid,
                r.sid,
                typed_pos(i),
                f.name,
                tags(i, r.kind),
                f.ty.name()
            );
            match c {
                Cell::Num(n) => {
                    let _ = writeln!(out, "{n}");
                }
                Cell::Text(t) => {
                    let _ = writeln!(out, "{t}");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// A JSON string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `"tags"` object of a tag string.
pub fn tags_json(tags: &str) -> String {
    let mut t = tags.chars();
    let mut word = |slot| fields::tag_word(slot, t.next().unwrap_or(' '));
    format!(
        "{{\"origin\":{},\"nature\":{},\"scope\":{}}}",
        quote(word(0)),
        quote(word(1)),
        quote(word(2))
    )
}

/// `show stat json`: an array of rows, each an array of field objects.
pub fn json(rows: &[Row]) -> String {
    let mut out = String::from("[");
    for (n, r) in rows.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('[');
        for (k, (i, c)) in filled(r).enumerate() {
            if k > 0 {
                out.push(',');
            }
            let f = &FIELDS[i];
            let value = match c {
                Cell::Num(v) => v.to_string(),
                Cell::Text(t) => quote(t),
            };
            let _ = write!(
                out,
                "{{\"objType\":{},\"proxyId\":{},\"id\":{},\"field\":{{\"pos\":{},\"name\":{}}},\"processNum\":1,\"tags\":{},\"value\":{{\"type\":{},\"value\":{}}}}}",
                quote(r.kind.json_name()),
                r.iid,
                r.sid,
                typed_pos(i),
                quote(f.name),
                tags_json(tags(i, r.kind)),
                quote(f.ty.name()),
                value
            );
        }
        out.push(']');
    }
    out.push_str("]\n");
    out
}

/// The tags of a column on a row of `kind`: a few gauges are tagged differently on
/// backends, whose values are computed from their servers.
pub fn tags(field: usize, kind: Kind) -> &'static str {
    match (FIELDS[field].name, kind) {
        ("act" | "bck" | "rate" | "rate_max", Kind::Backend) => "MGP",
        _ => FIELDS[field].tags,
    }
}
