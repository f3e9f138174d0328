//! A `peers` section on the peers' thread: its shared tables with the log of this
//! process's changes to them, its peers with their sessions, and the tasks that keep them
//! linked (a listener at the local peer's address, a connection out to each peer, a
//! collector per table).
//!
//! Invariants:
//! - Everything here lives on the peers' thread (`Rc`, `Cell`): the only things crossing
//!   threads are the tables themselves (their shard and entry locks) and the changed keys
//!   the workers hand over (`stick::Changes`).
//! - The log holds each changed key once, at the number of its latest change, so a peer
//!   that falls behind gets each entry once, as it is now; it holds at most the table's
//!   size of keys (the oldest go first, as the table's own entries would).
//! - A peer has at most one session: opening one ends the one before.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::{link, tables_of, PeersConf, RemotePeer};
use crate::runtime::Process;
use crate::stick::{Key, Table};

/// How long a process that has learnt nothing waits for a peer to teach it the tables
/// before it considers itself up to date (HAProxy's figure).
const RESYNC_LIMIT: Duration = Duration::from_secs(5);

/// The wait before calling a peer again after a failed call (HAProxy's figure).
const RECONNECT: Duration = Duration::from_secs(5);

/// A section to start on the peers' thread.
pub(super) struct Start {
    pub section: usize,
    pub listener: std::net::TcpListener,
    /// Entries learnt from the process this one replaces.
    pub learned: usize,
}

/// Runs the sections on this (the peers') thread, until the process ends.
pub(super) fn run(process: Arc<Process>, sections: Vec<Start>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return say!("sluice: peers: {e}"),
    };
    let tasks = tokio::task::LocalSet::new();
    tasks.block_on(&rt, async move {
        for s in sections {
            start(&process, s);
        }
        std::future::pending::<()>().await
    });
}

fn start(process: &Arc<Process>, s: Start) {
    let conf = process.config.peers[s.section].clone();
    let listener = match tokio::net::TcpListener::from_std(s.listener) {
        Ok(l) => l,
        Err(e) => return say!("sluice: peers '{}': {e}", conf.name),
    };
    let node = Rc::new(Node::new(process, conf, s.learned > 0));
    tokio::task::spawn_local(accept(node.clone(), listener));
    if node.conf.disabled {
        return;
    }
    for p in 0..node.peers.len() {
        tokio::task::spawn_local(call_again(node.clone(), p));
    }
    for t in 0..node.tables.len() {
        tokio::task::spawn_local(collect(node.clone(), t));
    }
    let n = node.clone();
    tokio::task::spawn_local(async move {
        tokio::time::sleep(RESYNC_LIMIT).await;
        n.resync.set(Resync::Done);
    });
}

/// Whether this process still has to be taught the tables by a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resync {
    Needed,
    /// Asked of this peer, whose answer is awaited.
    Asked(usize),
    Done,
}

/// A section's state on the peers' thread.
pub(super) struct Node {
    pub process: Arc<Process>,
    pub conf: PeersConf,
    pub tables: Vec<Shared>,
    pub peers: Vec<Peer>,
    /// Bumped when changes were logged: the sessions push them.
    pub pushed: watch::Sender<u64>,
    pub resync: Cell<Resync>,
    sessions: Cell<u64>,
}

/// A table shared by the section: its name on the wire and the log of this process's
/// changes.
pub(super) struct Shared {
    pub table: Arc<Table>,
    pub wire_name: String,
    pub log: RefCell<Log>,
}

/// Another peer: its live session, and how far it acknowledged each table's updates.
pub(super) struct Peer {
    pub conf: RemotePeer,
    /// The live session's number (0: none).
    pub session: Cell<u64>,
    /// Signalled when its session ends or is replaced.
    pub ended: Notify,
    pub acked: RefCell<Vec<u32>>,
    /// It answered a request for the tables as not up to date itself: not asked again.
    pub partial: Cell<bool>,
}

impl Node {
    fn new(process: &Arc<Process>, conf: PeersConf, learned: bool) -> Node {
        let tables: Vec<Shared> = tables_of(process, &conf.name)
            .map(|t| Shared {
                wire_name: wire_name(&t.conf.name, &conf.name),
                table: t.clone(),
                log: RefCell::default(),
            })
            .collect();
        let peers = conf
            .remotes
            .iter()
            .map(|r| Peer {
                conf: r.clone(),
                session: Cell::new(0),
                ended: Notify::new(),
                acked: RefCell::new(vec![0; tables.len()]),
                partial: Cell::new(false),
            })
            .collect();
        let resync = match learned || conf.remotes.is_empty() {
            true => Resync::Done,
            false => Resync::Needed,
        };
        Node {
            process: process.clone(),
            conf,
            tables,
            peers,
            pushed: watch::Sender::new(0),
            resync: Cell::new(resync),
            sessions: Cell::new(0),
        }
    }

    /// Opens a session with peer `p`, ending the one it had; the session's number.
    pub fn open(&self, p: usize) -> u64 {
        let id = self.sessions.get() + 1;
        self.sessions.set(id);
        let peer = &self.peers[p];
        if peer.session.replace(id) != 0 {
            peer.ended.notify_waiters();
        }
        id
    }

    /// Ends session `id` of peer `p` (if it is still the live one).
    pub fn close(&self, p: usize, id: u64) {
        let peer = &self.peers[p];
        if peer.session.get() == id {
            peer.session.set(0);
            peer.ended.notify_waiters();
        }
        if self.resync.get() == Resync::Asked(p) {
            self.resync.set(Resync::Needed);
        }
    }

    /// Whether session `id` is still peer `p`'s live one.
    pub fn live(&self, p: usize, id: u64) -> bool {
        self.peers[p].session.get() == id
    }
}

/// A table's name on the wire: its proxy's name, or for a table of the section itself
/// (`SECTION/TABLE`) what follows the section's name, slash included (HAProxy's).
fn wire_name(table: &str, section: &str) -> String {
    match table.strip_prefix(section).filter(|r| r.starts_with('/')) {
        Some(rest) => rest.to_string(),
        None => table.to_string(),
    }
}

/// This process's changes to a table, by number: each key once, at its latest change.
#[derive(Default)]
pub(super) struct Log {
    last: u32,
    by_number: BTreeMap<u32, Key>,
    number_of: HashMap<Key, u32>,
}

impl Log {
    /// Logs a change of `key`, keeping at most `room` keys.
    fn add(&mut self, key: Key, room: usize) {
        if let Some(old) = self.number_of.remove(&key) {
            self.by_number.remove(&old);
        }
        self.last = self.last.wrapping_add(1);
        self.by_number.insert(self.last, key.clone());
        self.number_of.insert(key, self.last);
        while self.by_number.len() > room.max(1) {
            if let Some((_, k)) = self.by_number.pop_first() {
                self.number_of.remove(&k);
            }
        }
    }

    /// Up to `n` changes after number `from`, in order.
    pub fn after(&self, from: u32, n: usize) -> Vec<(u32, Key)> {
        self.by_number
            .range(from.saturating_add(1)..)
            .take(n)
            .map(|(i, k)| (*i, k.clone()))
            .collect()
    }

    /// The number of the latest change.
    pub fn last(&self) -> u32 {
        self.last
    }
}

/// Takes the changes the workers mark in table `t` and logs them for the sessions.
async fn collect(node: Rc<Node>, t: usize) {
    let shared = &node.tables[t];
    let Some(changes) = shared.table.changes() else {
        return;
    };
    loop {
        changes.wake.notified().await;
        let keys = shared.table.take_changes(crate::runtime::clock_ms());
        let room = shared.table.conf.size;
        let mut log = shared.log.borrow_mut();
        for k in keys {
            log.add(k, room);
        }
        drop(log);
        node.pushed.send_modify(|n| *n += 1);
    }
}

/// Accepts connections at the local peer's address: other peers, and the next process.
async fn accept(node: Rc<Node>, listener: tokio::net::TcpListener) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                tokio::task::spawn_local(link::answer(node.clone(), conn));
            }
            // Out of descriptors, say: not a reason to spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Keeps a session with peer `p`: calls it whenever it has none, again after a failed
/// call, and after a session ended at a random moment (so that two peers calling each
/// other at once settle on one session, as HAProxy's do).
async fn call_again(node: Rc<Node>, p: usize) {
    loop {
        let ended = node.peers[p].ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        let pause = Duration::from_millis(50 + fastrand::u64(..2000));
        if node.peers[p].session.get() != 0 {
            ended.await;
            tokio::time::sleep(pause).await;
            continue;
        }
        match link::call(&node, p).await {
            true => tokio::time::sleep(pause).await,
            false => tokio::time::sleep(RECONNECT).await,
        }
    }
}
