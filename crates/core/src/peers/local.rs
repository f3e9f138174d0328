//! The local peer across a reload: the new process asks the old one, at the local peer's
//! address, for the tables of the section before it serves, as HAProxy's local peer
//! teaches its successor. The exchange is sluice's own (a `teach` line, then the tables as
//! [`Table::dump`] lines): both ends are sluice processes of one host, and the entries
//! keep their exact expiry and rates.
//!
//! Invariants:
//! - Learning is bounded (a second to connect and read); a missing or silent old process
//!   leaves the tables empty, as at a first start (the other peers then teach them).
//! - The listener is shared with the process being replaced (`SO_REUSEPORT`), so the
//!   address is never closed between the two.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::Process;
use crate::stick::{PeersConf, Table};
use crate::transport::Socket;

/// How long a new process waits for its predecessor's tables.
const LEARN_LIMIT: Duration = Duration::from_secs(1);

/// The first line a new process sends to the old one.
pub(super) const TEACH: &str = "teach";

/// The local peer's socket, shared with the process being replaced (`SO_REUSEPORT`).
pub(super) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    s.listen(64)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Asks the process listening at the local peer's address (the one being replaced) for
/// the section's tables; the entries learned.
pub(super) fn learn(process: &Process, p: &PeersConf) -> usize {
    let Ok(mut conn) = TcpStream::connect_timeout(&p.local, LEARN_LIMIT) else {
        return 0;
    };
    let _ = conn.set_read_timeout(Some(LEARN_LIMIT));
    if conn.write_all(format!("{TEACH}\n").as_bytes()).is_err() {
        return 0;
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
    learned
}

/// The tables shared with section `peers`.
pub(super) fn tables_of<'a>(
    process: &'a Process,
    peers: &'a str,
) -> impl Iterator<Item = &'a Arc<Table>> {
    process
        .state
        .tables
        .iter()
        .filter(move |t| t.conf.peers.as_deref() == Some(peers))
}

/// Answers the next process (it sent [`TEACH`]) with the section's tables.
pub(super) async fn teach(process: &Process, peers: &str, mut conn: Socket) {
    let now = crate::runtime::clock_ms();
    let mut out = String::new();
    for t in tables_of(process, peers) {
        out.push_str(&format!("table {}\n", t.conf.name));
        out.push_str(&t.dump(now));
    }
    let _ = tokio::time::timeout(LEARN_LIMIT, conn.write_all(out.as_bytes())).await;
}
