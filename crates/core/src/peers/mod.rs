//! `peers` sections: stick tables shared between processes. Each section's tables are
//! kept in step with the other peers it names over HAProxy's peers protocol (so sluice and
//! HAProxy 2.6 nodes can share them), and carried from the old process to the new one at
//! a reload by the local peer.
//!
//! - `wire`: the protocol's messages; `link`: one session with another peer (handshake,
//!   updates both ways, heartbeats); `node`: a section's state on the peers' thread (the
//!   log of local changes, the sessions, the connections out and in); `local`: the
//!   handover to the next process.
//!
//! Invariants:
//! - Updates leave the request path at once: a worker only marks the entry it changed
//!   (`Table::changed`); the peers' thread, one for the process, takes the marks, numbers
//!   them and sends them. Entries learned from a peer are written under the same shard and
//!   entry locks as the workers' own changes, and are never sent back.
//! - At most one session per peer: a new one (theirs or ours) ends the older.
//! - Bytes from a peer are never trusted: a malformed message ends that session (with
//!   HAProxy's protocol error message) and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;

use sluice_config::{ConfigError, Keyword, KwError, Scope, Section};

pub use crate::conf::stick::{PeersConf, RemotePeer};
use crate::conf::{GlobalConf, Loc};
use crate::runtime::Process;
use crate::stick::{Table, TableConf};

mod link;
mod local;
mod node;
pub mod wire;

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

/// `localpeer NAME` (global): the local peer's name (else the host name).
pub fn local_name(g: &GlobalConf) -> String {
    g.localpeer.clone().unwrap_or_else(crate::conf::hostname)
}

/// Reads a `peers NAME` section: its local peer (`peer`/`server` named as this process,
/// or `bind`), the other peers, and its own `table` lines (named `SECTION/TABLE`).
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
    let mut read = SectionLines::default();
    for line in &section.lines {
        if let Err(e) = read.line(&line.words, local, &name) {
            errors.push(line.error(e));
        }
    }
    let local_addr = match (read.local, read.bind) {
        (Some(Some(a)), _) | (Some(None), Some(a)) => a,
        (Some(None), None) => {
            errors.push(ConfigError::at(
                &header.file,
                header.line,
                format!("peers section '{name}': the local peer '{local}' has no address (expects 'bind ADDR:PORT')"),
            ));
            return (None, read.tables);
        }
        (None, _) => {
            warnings.push(format!(
                "parsing [{}:{}] : Removing incomplete section 'peers {name}' (no peer named '{local}').",
                header.file, header.line
            ));
            for t in &mut read.tables {
                t.peers = None;
            }
            return (None, read.tables);
        }
    };
    (
        Some(PeersConf {
            name,
            local_name: local.to_string(),
            local: local_addr,
            remotes: read.remotes,
            disabled: read.disabled,
        }),
        read.tables,
    )
}

/// What the lines of a `peers` section said so far.
#[derive(Default)]
struct SectionLines {
    /// The local peer's line, with its address if it gave one.
    local: Option<Option<SocketAddr>>,
    bind: Option<SocketAddr>,
    remotes: Vec<RemotePeer>,
    tables: Vec<TableConf>,
    disabled: bool,
}

impl SectionLines {
    fn line(&mut self, w: &[String], local: &str, section: &str) -> Result<(), String> {
        match w[0].as_str() {
            // `peer NAME ADDR` (1.x syntax), `server NAME [ADDR]` (2.x, with `bind`).
            kw @ ("peer" | "server") => {
                let Some(peer) = w.get(1) else {
                    return Err(format!("'{kw}' expects a name and an address"));
                };
                let addr = match w.get(2) {
                    Some(a) => Some(
                        crate::conf::resolve(a)
                            .map_err(|e| format!("'{kw}' in 'peers' section: {e}"))?,
                    ),
                    None if kw == "peer" => return Err("'peer' expects a name and an address".into()),
                    None => None,
                };
                no_options(kw, &w[3.min(w.len())..])?;
                if self.local.is_some() && peer == local || self.remotes.iter().any(|r| &r.name == peer) {
                    return Err(format!("'{kw} {peer}': a peer of that name is already defined"));
                }
                match (peer == local, addr) {
                    (true, a) => self.local = Some(a),
                    (false, Some(addr)) => self.remotes.push(RemotePeer {
                        name: peer.clone(),
                        addr,
                    }),
                    (false, None) => {
                        return Err(format!("'server {peer}': a remote peer needs an address"))
                    }
                }
            }
            "bind" => {
                let a = w.get(1).ok_or("'bind' expects an address")?;
                self.bind = Some(
                    crate::conf::resolve(a).map_err(|e| format!("'bind' in 'peers' section: {e}"))?,
                );
                no_options("bind", &w[2..])?;
            }
            kw @ ("default-server" | "default-bind") => no_options(kw, &w[1..])?,
            "disabled" => self.disabled = true,
            "enabled" | "enable" => self.disabled = false,
            "table" => {
                let t = w.get(1).ok_or("'table' expects a name")?;
                let mut conf = crate::stick::parse_table(&w[2..])
                    .map_err(|e| format!("'table' in 'peers' section: {e}"))?;
                conf.name = format!("{section}/{t}");
                conf.peers = Some(section.to_string());
                self.tables.push(conf);
            }
            other @ ("log" | "shards") => {
                return Err(format!("'{other}' in 'peers' section: not supported yet"))
            }
            other => {
                return Err(format!(
                    "unknown keyword '{other}' in 'peers' section (expects peer, server, bind, table, disabled)"
                ))
            }
        }
        Ok(())
    }
}

/// Options on a peer, server or bind line: TLS between peers and the other server and bind
/// options are not built.
fn no_options(kw: &str, rest: &[String]) -> Result<(), String> {
    match rest.first() {
        None => Ok(()),
        Some(o) => Err(format!(
            "'{kw}' in 'peers' section: option '{o}' is not supported yet (peers links are plain TCP)"
        )),
    }
}

/// `show peers [dict|-] [SECTION]`: asked of the peers' thread, which owns the sessions
/// (nothing when no section runs; the dictionary cache does not exist in sluice).
pub fn show(process: &Process, args: &[&str]) -> String {
    let section = args
        .iter()
        .find(|a| !matches!(**a, "dict" | "-"))
        .map(|s| s.to_string());
    if let Some(s) = &section {
        if !process.config.peers.iter().any(|p| &p.name == s) {
            return "No such peers\n".into();
        }
    }
    if process.config.peers.is_empty() {
        return String::new();
    }
    let (answer, text) = std::sync::mpsc::channel();
    process
        .show_peers
        .push(crate::runtime::ShowPeers { section, answer });
    text.recv_timeout(std::time::Duration::from_secs(1))
        .unwrap_or_default()
}

/// The tables shared with section `peers`.
fn tables_of<'a>(process: &'a Process, peers: &'a str) -> impl Iterator<Item = &'a Arc<Table>> {
    process
        .state
        .tables
        .iter()
        .filter(move |t| t.conf.peers.as_deref() == Some(peers))
}

/// Starts every `peers` section: its tables first learn the entries of the process this
/// one replaces (synchronously, before serving), then the section listens at the local
/// peer's address on the peers' thread, which links it with the other peers and teaches
/// the next process. A listener that cannot be opened is reported; the section's tables
/// then stay this process's own.
pub fn start(process: &Arc<Process>) {
    let mut sections = Vec::new();
    for (i, p) in process.config.peers.iter().enumerate() {
        let learned = local::learn(process, p);
        match local::bind(p.local) {
            Ok(listener) => sections.push(node::Start {
                section: i,
                listener,
                learned,
            }),
            Err(e) => say!(
                "sluice: peers '{}': cannot listen on {}: {e} (its tables are not shared)",
                p.name,
                p.local
            ),
        }
    }
    if sections.is_empty() {
        return;
    }
    let process = process.clone();
    let spawned = std::thread::Builder::new()
        .name("sluice-peers".into())
        .spawn(move || node::run(process, sections));
    if let Err(e) = spawned {
        say!("sluice: peers: {e}");
    }
}
