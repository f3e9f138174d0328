//! `peers` sections: stick tables shared between processes. Each section's tables are
//! kept in step with the other peers it names over HAProxy's peers protocol (so sluice and
//! HAProxy 2.6 nodes can share them), and carried from the old process to the new one at
//! a reload by the local peer.
//!
//! - `wire`: the protocol's messages; `link`: one session with another peer (handshake,
//!   updates both ways, heartbeats); `node`: a section's state on the first worker (the
//!   log of local changes, the peers and their counters, `show peers`); `run`: the tasks
//!   that keep it linked (the listener, the calls out, the collectors of changes);
//!   `local`: the handover to the next process.
//!
//! Invariants:
//! - Updates leave the request path at once: a worker only marks the entry it changed
//!   (`Table::changed`); the first worker, whose event loop serves the sections beside its
//!   clients, takes the marks at most once a millisecond, numbers them and sends them.
//!   Entries learned from a peer are written under the same shard and entry locks as the
//!   workers' own changes, and are never sent back.
//! - At most one session per peer: a new one (theirs or ours) ends the older.
//! - Bytes from a peer are never trusted: a malformed message ends that session (with
//!   HAProxy's protocol error message) and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;

use sluice_config::{ConfigError, Keyword, KwError, Scope, Section};

use crate::conf::backend::ServerOpts;
pub use crate::conf::stick::{PeersConf, RemotePeer};
use crate::conf::tls::{BindTls, ServerTlsOpts};
use crate::conf::{GlobalConf, Loc};
use std::rc::Rc;

use crate::runtime::{PeersListener, Process, Worker};
use crate::stick::TableConf;

mod learn;
mod link;
mod local;
mod node;
mod run;
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
            tls: read.bind_tls,
            at: header,
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
    /// TLS of the local peer's listener (its `bind` or `peer` line, over `default-bind`).
    bind_tls: Option<BindTls>,
    default_bind: Option<BindTls>,
    /// TLS towards the other peers (`default-server`, then each line's own).
    default_server: ServerTlsOpts,
    remotes: Vec<RemotePeer>,
    tables: Vec<TableConf>,
    disabled: bool,
}

impl SectionLines {
    fn line(&mut self, w: &[String], local: &str, section: &str) -> Result<(), String> {
        match w[0].as_str() {
            // `peer NAME ADDR` (1.x syntax), `server NAME [ADDR]` (2.x, with `bind`).
            kw @ ("peer" | "server") => self.peer(kw, &w[1..], local)?,
            "bind" => {
                let a = w.get(1).ok_or("'bind' expects an address")?;
                self.bind = Some(
                    crate::conf::resolve(a).map_err(|e| format!("'bind' in 'peers' section: {e}"))?,
                );
                self.bind_tls = bind_tls(self.default_bind.clone(), "bind", &w[2..])?;
            }
            "default-bind" => self.default_bind = bind_tls(None, "default-bind", &w[1..])?,
            "default-server" => {
                self.default_server = server_tls(&ServerTlsOpts::default(), "default-server", &w[1..])?
            }
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
                    "unknown keyword '{other}' in 'peers' section (expects peer, server, bind, default-server, default-bind, table, disabled)"
                ))
            }
        }
        Ok(())
    }

    /// A `peer NAME ADDR [options]` or `server NAME [ADDR] [options]` line: the local peer
    /// (its options are its listener's) or another one (options of the connection to it).
    fn peer(&mut self, kw: &str, w: &[String], local: &str) -> Result<(), String> {
        let Some(peer) = w.first() else {
            return Err(format!("'{kw}' expects a name and an address"));
        };
        // `server NAME` alone is the local peer of the 2.x syntax.
        let addr = match w
            .get(1)
            .filter(|a| kw == "peer" || crate::conf::resolve(a).is_ok())
        {
            Some(a) => Some(
                crate::conf::resolve(a).map_err(|e| format!("'{kw}' in 'peers' section: {e}"))?,
            ),
            None if kw == "peer" => return Err("'peer' expects a name and an address".into()),
            None => None,
        };
        let options = &w[1 + usize::from(addr.is_some())..];
        let known =
            self.local.is_some() && peer == local || self.remotes.iter().any(|r| &r.name == peer);
        if known {
            return Err(format!(
                "'{kw} {peer}': a peer of that name is already defined"
            ));
        }
        if peer == local {
            self.local = Some(addr);
            if kw == "peer" {
                self.bind_tls = bind_tls(self.default_bind.clone(), kw, options)?;
            } else if let Some(o) = options.first() {
                return Err(format!("'server {peer}': option '{o}' on the local peer: put the listener's options on the 'bind' line"));
            }
            return Ok(());
        }
        let Some(addr) = addr else {
            return Err(format!("'{kw} {peer}': a remote peer needs an address"));
        };
        self.remotes.push(RemotePeer {
            name: peer.clone(),
            addr,
            tls: server_tls(&self.default_server, kw, options)?,
            connector: None,
        });
        Ok(())
    }
}

/// The TLS options of a connection to a peer, over `base`: the server options of TLS
/// (`ssl`, `verify`, `ca-file`, `crt`, `sni`, ...); any other server option is refused.
fn server_tls(base: &ServerTlsOpts, kw: &str, w: &[String]) -> Result<ServerTlsOpts, String> {
    let mut opts = ServerOpts {
        tls: base.clone(),
        ..ServerOpts::default()
    };
    let mut i = 0;
    while i < w.len() {
        let word = w[i].as_str();
        let Some(o) = crate::tls::SERVER_OPTIONS.iter().find(|o| o.name == word) else {
            return Err(format!(
                "'{kw}' in 'peers' section: option '{word}' is not supported yet (only TLS options)"
            ));
        };
        let args = w
            .get(i + 1..i + 1 + o.args)
            .ok_or_else(|| format!("'{kw}': option '{word}' expects {} argument(s)", o.args))?;
        (o.parse)(&mut opts, args).map_err(|e| format!("'{kw}': option '{word}': {e}"))?;
        i += 1 + o.args;
    }
    Ok(opts.tls)
}

/// The TLS options of the local peer's listener, over `base`: the bind options of TLS
/// (`ssl`, `crt`, `ca-file`, `verify`, ...); any other bind option is refused.
fn bind_tls(base: Option<BindTls>, kw: &str, w: &[String]) -> Result<Option<BindTls>, String> {
    let mut tls = base;
    let mut i = 0;
    while i < w.len() {
        match crate::tls::bind_option(&mut tls, w, i).map_err(|e| format!("'{kw}': {e}"))? {
            Some(n) => i += n,
            None => {
                return Err(format!(
                "'{kw}' in 'peers' section: option '{}' is not supported yet (only TLS options)",
                w[i]
            ))
            }
        }
    }
    if tls.as_ref().is_some_and(|t| t.allow_0rtt) {
        return Err(format!(
            "'{kw}' in 'peers' section: 'allow-0rtt' is taken on QUIC listeners only"
        ));
    }
    Ok(tls)
}

/// `show peers [dict|-] [SECTION]`: asked of the first worker, which owns the sessions
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

/// Starts every `peers` section: its tables first learn the entries of the process this
/// one replaces (synchronously, before serving), then the section listens at the local
/// peer's address, for the first worker to link it with the other peers and teach the next
/// process ([`run`]). A listener that cannot be opened is reported; the section's tables
/// then stay this process's own.
pub fn start(process: &Arc<Process>) {
    let mut sections = Vec::new();
    for (i, p) in process.config.peers.iter().enumerate() {
        let learned = local::learn(process, p);
        match local::bind(p.local) {
            Ok(listener) => sections.push(PeersListener {
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
    *process
        .peers_listeners
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = sections;
}

/// Serves the `peers` sections on this worker (the first), until the process ends: their
/// sessions share its event loop with its clients, so a session's work costs no thread
/// switch.
pub async fn run(w: Rc<Worker>) {
    let sections = std::mem::take(
        &mut *w
            .process
            .peers_listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    if !sections.is_empty() {
        run::serve(w.process.clone(), sections).await;
    }
}
