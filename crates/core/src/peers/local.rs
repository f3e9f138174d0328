//! The local peer across a reload: before it serves, the new process calls the old one at
//! the local peer's address as the local peer (its own name on both hello lines), asks for
//! the tables (a resync request) and takes what the old one teaches until it says it is
//! done, over the peers protocol like any other peer (so an old process of either sluice or
//! HAProxy 2.6 teaches it). The old process serves that session as any other (`link`).
//!
//! Invariants:
//! - Learning is bounded: a second to connect and between reads, five in all; a missing or
//!   silent old process leaves the tables empty, as at a first start (the other peers then
//!   teach them).
//! - The listener is shared with the process being replaced (`SO_REUSEPORT`), so the
//!   address is never closed between the two.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::learn::{Learner, FOREIGN_TABLES};
use super::wire::{self, Control, Message};
use crate::runtime::Process;
use crate::stick::{PeersConf, Table};

/// How long a new process waits for its predecessor, between reads, and in all.
const LEARN_LIMIT: Duration = Duration::from_secs(1);
const LEARN_TOTAL: Duration = Duration::from_secs(5);

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

/// Learns the section's tables from the process listening at the local peer's address
/// (the one being replaced); the entries learnt.
pub(super) fn learn(process: &Process, p: &PeersConf) -> usize {
    let Ok(mut conn) = TcpStream::connect_timeout(&p.local, LEARN_LIMIT) else {
        return 0;
    };
    let _ = conn.set_read_timeout(Some(LEARN_LIMIT));
    let mut hello = wire::hello(&p.local_name, &p.local_name).into_bytes();
    wire::put_short(
        &mut hello,
        wire::CLASS_CONTROL,
        Control::ResyncRequest as u8,
    );
    if conn.write_all(&hello).is_err() {
        return 0;
    }
    let tables: Vec<(&Arc<Table>, String)> = tables_of(process, &p.name)
        .map(|t| (t, wire::table_name(&t.conf.name, &p.name)))
        .collect();
    let mut lesson = Lesson {
        tables,
        theirs: Learner::default(),
        learned: 0,
    };
    lesson.take(&mut conn);
    if lesson.learned > 0 {
        say!(
            "sluice: peers '{}': {} entries learned from the previous process",
            p.name,
            lesson.learned
        );
    }
    lesson.learned
}

/// What the old process teaches, as it is read.
struct Lesson<'a> {
    /// The section's tables and their names on the wire.
    tables: Vec<(&'a Arc<Table>, String)>,
    /// The old process's table definitions.
    theirs: Learner,
    learned: usize,
}

impl Lesson<'_> {
    /// Reads the status line, then messages until the old process says it is done (then
    /// confirms), stops answering, or sends what is not the protocol.
    fn take(&mut self, conn: &mut TcpStream) {
        let deadline = Instant::now() + LEARN_TOTAL;
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        let mut status = None;
        while Instant::now() < deadline {
            let n = match conn.read(&mut chunk) {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            buf.extend_from_slice(&chunk[..n]);
            if status.is_none() {
                let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                    continue;
                };
                let line: Vec<u8> = buf.drain(..=end).collect();
                status = Some(line);
                if !status.as_deref().is_some_and(|l| l.starts_with(b"200")) {
                    return;
                }
            }
            let mut used = 0;
            while let Ok(Some((msg, n))) = wire::split(&buf[used..]) {
                used += n;
                match self.apply(msg) {
                    Step::Go => {}
                    Step::Done => {
                        let mut confirm = Vec::new();
                        wire::put_short(
                            &mut confirm,
                            wire::CLASS_CONTROL,
                            Control::ResyncConfirm as u8,
                        );
                        let _ = conn.write_all(&confirm);
                        return;
                    }
                    Step::Stop => return,
                }
            }
            if wire::split(&buf[used..]).is_err() {
                return;
            }
            buf.drain(..used);
        }
    }

    fn apply(&mut self, msg: Message<'_>) -> Step {
        match msg {
            Message::Control(Control::ResyncFinished | Control::ResyncPartial) => Step::Done,
            Message::Error(_) => Step::Stop,
            Message::Table(wire::DEFINE, body) => {
                let room = self.tables.len() + FOREIGN_TABLES;
                let tables = &self.tables;
                let ours = |d: &wire::Definition| {
                    tables
                        .iter()
                        .position(|(t, name)| *name == d.name && wire::same_key(d, t.conf.key))
                };
                match self.theirs.define(body, room, ours) {
                    Some(_) => Step::Go,
                    None => Step::Stop,
                }
            }
            Message::Table(wire::SWITCH, body) => match self.theirs.switch(body) {
                Some(()) => Step::Go,
                None => Step::Stop,
            },
            Message::Table(
                kind @ (wire::UPDATE
                | wire::INC_UPDATE
                | wire::UPDATE_TIMED
                | wire::INC_UPDATE_TIMED),
                body,
            ) => self.update(kind, body),
            _ => Step::Go,
        }
    }

    fn update(&mut self, kind: u8, body: &[u8]) -> Step {
        let key = |t: usize| self.tables[t].0.conf.key;
        let (t, u) = match self.theirs.update(kind, body, key) {
            None => return Step::Stop,
            Some(None) => return Step::Go,
            Some(Some((t, _, u))) => (t, u),
        };
        let now = crate::runtime::clock_ms();
        if self.tables[t]
            .0
            .learn(u.key, u.expire.map(u64::from), &u.values, now)
        {
            self.learned += 1;
        }
        Step::Go
    }
}

/// What a message means for the lesson.
enum Step {
    Go,
    Done,
    Stop,
}
