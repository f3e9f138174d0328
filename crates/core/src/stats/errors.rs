//! `show errors`: the last invalid request of each frontend and the last invalid response of
//! each backend, with where the head left HTTP/1.x's grammar and its bytes, in HAProxy's
//! layout.

use std::fmt::Write as _;

use crate::log::log_date;
use crate::runtime::{CapturedError, Process};

/// Which captures to show: a proxy (name or id) or all, and requests, responses or both.
#[derive(Debug, Clone, Default)]
pub struct Which {
    pub proxy: Option<String>,
    pub requests: bool,
    pub responses: bool,
}

pub fn render(p: &Process, which: &Which) -> String {
    let mut out = String::new();
    let matches = |name: &str, id: u32| {
        which
            .proxy
            .as_deref()
            .is_none_or(|w| w == name || w.parse::<u32>().is_ok_and(|n| n == id))
    };
    let mut total = 0;
    let mut body = String::new();
    if which.requests {
        for (fe, st) in p.config.frontends.iter().zip(p.state.frontends.iter()) {
            total += st.errors.events();
            if let (true, Some(e)) = (matches(&fe.name, fe.id), st.errors.last()) {
                let _ = writeln!(
                    body,
                    "[{}] frontend {} (#{}): invalid request\n  backend <NONE> (#-1), server <NONE> (#-1), event #{}, src {}",
                    log_date(e.when),
                    fe.name,
                    fe.id,
                    e.event,
                    e.peer
                );
                dump(&mut body, &e);
            }
        }
    }
    if which.responses {
        for (be, st) in p.config.backends.iter().zip(p.state.backends.iter()) {
            total += st.errors.events();
            if let (true, Some(e)) = (matches(&be.name, be.id), st.errors.last()) {
                let (sid, sname) = e.server.clone().unwrap_or((0, "<NONE>".into()));
                let (fid, fname) = match e.other.clone() {
                    Some((id, name)) => (i64::from(id), name),
                    None => (-1, "<NONE>".into()),
                };
                let _ = writeln!(
                    body,
                    "[{}] backend {} (#{}): invalid response\n  frontend {fname} (#{fid}), server {} (#{}), event #{}, src {}",
                    log_date(e.when),
                    be.name,
                    be.id,
                    sname,
                    sid,
                    e.event,
                    e.peer
                );
                dump(&mut body, &e);
            }
        }
    }
    let _ = writeln!(
        out,
        "Total events captured on [{}] : {total}\n",
        log_date(std::time::SystemTime::now())
    );
    out.push_str(&body);
    out
}

/// The capture's figures and its bytes, one line per line of the head (and at most 64
/// bytes per dumped line), each after its offset; what is not printable is escaped.
fn dump(out: &mut String, e: &CapturedError) {
    let _ = writeln!(
        out,
        "  buffer starts at 0 (including 0 out), len {}, error at position {}\n",
        e.bytes.len(),
        e.at
    );
    let mut line_start = 0;
    let mut line = String::new();
    for (i, &b) in e.bytes.iter().enumerate() {
        match b {
            b'\r' => line.push_str("\\r"),
            b'\n' => line.push_str("\\n"),
            b'\t' => line.push_str("\\t"),
            b'\\' => line.push_str("\\\\"),
            0x20..=0x7e => line.push(b as char),
            _ => {
                let _ = write!(line, "\\x{b:02X}");
            }
        }
        if b == b'\n' || i + 1 - line_start >= 64 || i + 1 == e.bytes.len() {
            let _ = writeln!(out, "  {line_start:05}  {line}");
            line.clear();
            line_start = i + 1;
        }
    }
    out.push('\n');
}
