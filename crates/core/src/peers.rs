//! `peers` sections, for the local peer: a stick table shared with a `peers` section keeps
//! its entries across a reload. The new process asks the old one for them at the local
//! peer's address before serving (as HAProxy's local peer teaches its successor), then
//! listens there itself to teach the next one.
//!
//! Invariants:
//! - Only the local peer is supported: a section naming another peer is refused when the
//!   configuration is read ("not supported yet"), never silently left unsynchronised.
//! - The teaching protocol is sluice's own (one line per entry, `Table::dump`); it runs
//!   on loopback-or-configured addresses between two sluice processes of one host.
//! - Learning is bounded (a second to connect and read); a missing or silent old process
//!   leaves the tables empty, as at a first start.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{ConfigError, Keyword, KwError, Scope, Section};

pub use crate::conf::stick::PeersConf;
use crate::conf::{GlobalConf, Loc};
use crate::runtime::Process;
use crate::stick::{Table, TableConf};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "localpeer",
    scope: Scope::GLOBAL,
    help: "localpeer NAME: this process's peer name in peers sections (default: the host name)",
    parse: |g, a| {
        let n = crate::conf::one_arg(a, "a peer name")?;
        if n.is_empty() {
            return Err(KwError::bad(1, n, "expects a name"));
        }
        g.localpeer = Some(n.to_string());
        Ok(())
    },
}];

/// How long a new process waits for its predecessor's tables.
const LEARN_LIMIT: Duration = Duration::from_secs(1);

/// `localpeer NAME` (global): the local peer's name (else the host name).
pub fn local_name(g: &GlobalConf) -> String {
    g.localpeer.clone().unwrap_or_else(crate::conf::hostname)
}

/// Reads a `peers NAME` section: its local peer and its own `table` lines (named
/// `SECTION/TABLE`).
///
/// A section that names no local peer is removed with a warning, as HAProxy removes it:
/// `None` then, and its tables are kept unshared.
pub fn parse_section(
    section: &Section,
    local: &str,
    errors: &mut Vec<ConfigError>,
    warnings: &mut Vec<String>,
) -> (Option<PeersConf>, Vec<TableConf>) {
    let name = section.name.clone().unwrap_or_default();
    let header = Loc {
        file: section.header.file.clone(),
        line: section.header.line,
    };
    let mut addr = None;
    let mut tables = Vec::new();
    let mut remote = Vec::new();
    for line in &section.lines {
        let w = &line.words;
        match w[0].as_str() {
            "peer" => match &w[1..] {
                [peer, a, ..] if peer == local => match crate::conf::resolve(a) {
                    Ok(a) => addr = Some(a),
                    Err(e) => errors.push(line.error(format!("'peer' in 'peers' section: {e}"))),
                },
                [peer, ..] => remote.push(line.error(format!(
                    "'peer {peer}': synchronising tables with another peer is not supported yet (only the local peer '{local}', which carries tables across reloads)"
                ))),
                [] => errors.push(line.error("'peer' expects a name and an address")),
            },
            "table" => {
                let Some(t) = w.get(1) else {
                    errors.push(line.error("'table' expects a name"));
                    continue;
                };
                match crate::stick::parse_table(&w[2..]) {
                    Ok(mut conf) => {
                        conf.name = format!("{name}/{t}");
                        conf.peers = Some(name.clone());
                        tables.push(conf);
                    }
                    Err(e) => errors.push(line.error(format!("'table' in 'peers' section: {e}"))),
                }
            }
            other @ ("bind" | "server" | "default-bind" | "default-server" | "disabled"
            | "enabled" | "enable" | "log" | "shards") => errors.push(line.error(format!(
                "'{other}' in 'peers' section: not supported yet"
            ))),
            other => errors.push(line.error(format!(
                "unknown keyword '{other}' in 'peers' section (expects peer or table)"
            ))),
        }
    }
    let Some(local_addr) = addr else {
        warnings.push(format!(
            "parsing [{}:{}] : Removing incomplete section 'peers {name}' (no peer named '{local}').",
            header.file, header.line
        ));
        for t in &mut tables {
            t.peers = None;
        }
        return (None, tables);
    };
    // Other peers beside the local one: their synchronisation is not built.
    errors.extend(remote);
    (
        Some(PeersConf {
            name,
            local: local_addr,
        }),
        tables,
    )
}

/// The tables shared with section `peers`.
fn tables_of<'a>(process: &'a Process, peers: &'a str) -> impl Iterator<Item = &'a Arc<Table>> {
    process
        .state
        .tables
        .iter()
        .filter(move |t| t.conf.peers.as_deref() == Some(peers))
}

/// Learns the tables of every `peers` section from the process this one replaces, then
/// teaches them to the next: a thread per section answers at the local peer's address.
/// A listener that cannot be opened is reported; the tables then only live as long as
/// this process.
pub fn start(process: &Arc<Process>) {
    for p in &process.config.peers {
        learn(process, p);
        match bind(p.local) {
            Ok(listener) => {
                let (process, name) = (process.clone(), p.name.clone());
                let spawned = std::thread::Builder::new()
                    .name("sluice-peers".into())
                    .spawn(move || teach(&process, &name, listener));
                if let Err(e) = spawned {
                    say!("sluice: peers '{}': {e}", p.name);
                }
            }
            Err(e) => say!(
                "sluice: peers '{}': cannot listen on {}: {e} (its tables will not reach the next process)",
                p.name,
                p.local
            ),
        }
    }
}

/// The local peer's socket, shared with the process being replaced (`SO_REUSEPORT`).
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    s.listen(16)?;
    Ok(s.into())
}

/// Asks the process listening at the local peer's address (the one being replaced) for
/// the section's tables.
fn learn(process: &Process, p: &PeersConf) {
    let Ok(mut conn) = TcpStream::connect_timeout(&p.local, LEARN_LIMIT) else {
        return;
    };
    let _ = conn.set_read_timeout(Some(LEARN_LIMIT));
    if conn.write_all(b"teach\n").is_err() {
        return;
    }
    let now = crate::runtime::clock_ms();
    let mut table: Option<&Arc<Table>> = None;
    let mut learned = 0usize;
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { break };
        if let Some(name) = line.strip_prefix("table ") {
            table = tables_of(process, &p.name).find(|t| t.conf.name == name);
        } else if let Some(t) = table {
            learned += usize::from(t.restore(&line, now));
        }
    }
    if learned > 0 {
        say!(
            "sluice: peers '{}': {learned} entries learned from the previous process",
            p.name
        );
    }
}

/// Answers each connection with the section's tables.
fn teach(process: &Process, peers: &str, listener: TcpListener) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(LEARN_LIMIT));
        let _ = conn.set_write_timeout(Some(LEARN_LIMIT));
        let mut ask = String::new();
        if BufReader::new(&conn).read_line(&mut ask).is_err() || ask.trim() != "teach" {
            continue;
        }
        let now = crate::runtime::clock_ms();
        let mut out = String::new();
        for t in tables_of(process, peers) {
            out.push_str(&format!("table {}\n", t.conf.name));
            out.push_str(&t.dump(now));
        }
        let _ = conn.write_all(out.as_bytes());
    }
}
