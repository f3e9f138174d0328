//! A `peers` section on the first worker: its shared tables with the log of this
//! process's changes to them, its peers with their sessions, and the tasks that keep them
//! linked (a listener at the local peer's address, a connection out to each peer, a
//! collector per table).
//!
//! Invariants:
//! - Everything here lives on the first worker (`Rc`, `Cell`): the only things crossing
//!   threads are the tables themselves (their shard and entry locks) and the changed keys
//!   the workers hand over (`stick::Changes`).
//! - The log holds each changed key once, at the number of its latest change, so a peer
//!   that falls behind gets each entry once, as it is now; it holds at most the table's
//!   size of keys (the oldest go first, as the table's own entries would).
//! - A peer has at most one session: opening one ends the one before.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::local::tables_of;
use crate::conf::stick::{PeersConf, RemotePeer};
use crate::runtime::Process;
use crate::stick::{Key, Table};

/// How long a process that has learnt nothing waits for a peer to teach it the tables
/// before it considers itself up to date (HAProxy's figure).
pub(super) const RESYNC_LIMIT: Duration = Duration::from_secs(5);

/// Whether this process still has to be taught the tables by a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resync {
    Needed,
    /// Asked of this peer, whose answer is awaited.
    Asked(usize),
    Done,
}

/// A section's state on the first worker.
pub(super) struct Node {
    pub process: Arc<Process>,
    pub conf: PeersConf,
    pub tables: Vec<Shared>,
    pub peers: Vec<Peer>,
    /// Bumped when changes were logged: the sessions push them.
    pub pushed: watch::Sender<u64>,
    pub resync: Cell<Resync>,
    sessions: Cell<u64>,
    /// When the section started (`show peers`).
    started: (std::time::SystemTime, Instant),
}

/// A table shared by the section: its name on the wire and the log of this process's
/// changes.
pub(super) struct Shared {
    pub table: Arc<Table>,
    pub wire_name: String,
    /// What its updates carry (its `store`, on the wire).
    pub columns: super::wire::Columns,
    pub log: RefCell<Log>,
}

/// Another peer: its live session, what became of the last handshake, its counters (as
/// `show peers` prints them), and where each table stands with it.
pub(super) struct Peer {
    pub conf: RemotePeer,
    /// The local peer: this process's own name, whose sessions are the process before or
    /// after this one at a reload (never called: it calls).
    pub local: bool,
    /// The live session's number (0: none).
    pub session: Cell<u64>,
    /// Signalled when its session ends or is replaced.
    pub ended: Notify,
    /// It answered a request for the tables as not up to date itself: not asked again.
    pub partial: Cell<bool>,
    /// The last handshake's status code (HAProxy's: 100 connecting, 200 done, 5xx
    /// refused; 0 none yet) and when it ended.
    pub status: Cell<u16>,
    pub handshake: Cell<Option<Instant>>,
    /// The live session's addresses (its local end, the peer's).
    pub ends: Cell<Option<(SocketAddr, SocketAddr)>>,
    /// When it is called next, and when the live session's next heartbeat is due
    /// (`show peers`' timers).
    pub reconnect: Cell<Option<Instant>>,
    pub heartbeat: Cell<Option<Instant>>,
    pub counts: PeerCounts,
    /// Per table of the section, in its order.
    pub tables: Vec<PeerTable>,
}

/// A peer's counters, named as HAProxy's `show peers` names them.
#[derive(Default)]
pub(super) struct PeerCounts {
    pub tx_hbt: Cell<u32>,
    pub rx_hbt: Cell<u32>,
    pub new_conn: Cell<u32>,
    pub proto_err: Cell<u32>,
    /// Sessions replaced by a newer one.
    pub coll: Cell<u32>,
}

/// Where a table stands with a peer (HAProxy's names): the peer's number for it and the
/// data types it sends, the last update of ours sent and the last it acknowledged, the
/// last of its updates received and the last acknowledged.
#[derive(Default)]
pub(super) struct PeerTable {
    pub remote_id: Cell<u64>,
    pub remote_data: Cell<u64>,
    pub last_pushed: Cell<u32>,
    pub update: Cell<u32>,
    pub last_get: Cell<u32>,
    pub last_acked: Cell<u32>,
}

impl Node {
    pub(super) fn new(process: &Arc<Process>, conf: PeersConf, learned: bool) -> Node {
        let tables: Vec<Shared> = tables_of(process, &conf.name)
            .map(|t| Shared {
                wire_name: super::wire::table_name(&t.conf.name, &conf.name),
                columns: super::wire::Columns::of(&t.conf.store),
                table: t.clone(),
                log: RefCell::default(),
            })
            .collect();
        let local = RemotePeer {
            name: conf.local_name.clone(),
            addr: conf.local,
            tls: Default::default(),
            connector: None,
        };
        // The local peer first: `show peers` lists the peers from the last.
        let peers = std::iter::once(&local)
            .chain(&conf.remotes)
            .map(|r| Peer {
                local: r.name == conf.local_name,
                conf: r.clone(),
                session: Cell::new(0),
                ended: Notify::new(),
                partial: Cell::new(false),
                status: Cell::new(0),
                handshake: Cell::new(None),
                ends: Cell::new(None),
                reconnect: Cell::new(None),
                heartbeat: Cell::new(None),
                counts: PeerCounts::default(),
                tables: tables.iter().map(|_| PeerTable::default()).collect(),
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
            started: (std::time::SystemTime::now(), Instant::now()),
        }
    }

    /// Opens a session with peer `p`, ending the one it had; the session's number.
    pub fn open(&self, p: usize) -> u64 {
        let id = self.sessions.get() + 1;
        self.sessions.set(id);
        let peer = &self.peers[p];
        if peer.session.replace(id) != 0 {
            peer.counts.coll.set(peer.counts.coll.get() + 1);
            peer.ended.notify_waiters();
        }
        peer.status.set(super::wire::status::SUCCESS);
        peer.handshake.set(Some(Instant::now()));
        id
    }

    /// Ends session `id` of peer `p` (if it is still the live one).
    pub fn close(&self, p: usize, id: u64) {
        let peer = &self.peers[p];
        if peer.session.get() == id {
            peer.session.set(0);
            peer.ends.set(None);
            peer.heartbeat.set(None);
            peer.ended.notify_waiters();
        }
        if self.resync.get() == Resync::Asked(p) {
            self.resync.set(Resync::Needed);
        }
    }

    /// The section as HAProxy's `show peers` prints it: the section, then each peer (the
    /// last defined first, the local one last) with its counters and where each table
    /// stands with it. Addresses of objects are this process's, as HAProxy prints its own.
    pub fn show(&self, out: &mut String) {
        let flags = match self.resync.get() {
            Resync::Done => 0x3,
            Resync::Needed => 0x1,
            Resync::Asked(_) => 0x200d,
        };
        let resync_at = self.started.1 + RESYNC_LIMIT;
        let since = self
            .started
            .0
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let date = crate::log::strftime(since.as_secs() as i64, "%d/%b/%Y:%H:%M:%S", true);
        let _ = writeln!(
            out,
            "{:p}: [{}] id={} disabled={} flags=0x{flags:x} resync_timeout={} task_calls=0",
            self,
            date.unwrap_or_default(),
            self.conf.name,
            u8::from(self.conf.disabled),
            until(Some(resync_at)),
        );
        for peer in self.peers.iter().rev() {
            self.show_peer(peer, out);
        }
    }

    fn show_peer(&self, peer: &Peer, out: &mut String) {
        let active = peer.session.get() != 0;
        let c = &peer.counts;
        let _ = writeln!(
            out,
            "  {:p}: id={}({},{}) addr={} last_status={} last_hdshk={}",
            peer,
            peer.conf.name,
            if peer.local { "local" } else { "remote" },
            if active { "active" } else { "inactive" },
            peer.conf.addr,
            status_name(peer.status.get()),
            peer.handshake
                .get()
                .map_or("<NEVER>".into(), |t| human_time(t.elapsed())),
        );
        let _ = writeln!(
            out,
            "        reconnect={} heartbeat={} confirm=0 tx_hbt={} rx_hbt={} no_hbt=0 new_conn={} proto_err={} coll={}",
            until(peer.reconnect.get()),
            until(peer.heartbeat.get()),
            c.tx_hbt.get(),
            c.rx_hbt.get(),
            c.new_conn.get(),
            c.proto_err.get(),
            c.coll.get()
        );
        out.push_str("        flags=0x0");
        if let Some((local, remote)) = peer.ends.get() {
            let _ = write!(out, "\n        xprt=RAW src={local} addr={remote}");
        }
        self.show_tables(peer, out);
    }

    fn show_tables(&self, peer: &Peer, out: &mut String) {
        if !self.tables.is_empty() {
            out.push_str("\n        shared tables:");
        }
        for (i, t) in self.tables.iter().enumerate().rev() {
            let st = &peer.tables[i];
            let update = t.log.borrow().last();
            let _ = write!(
                out,
                "\n          {st:p} local_id={} remote_id={} flags=0x0 remote_data=0x{:x}\n              last_acked={} last_pushed={} last_get={} teaching_origin=0 update={}\n              table:{:p} id={} update={update} localupdate={update} commitupdate={update} refcnt=1\n        Dictionary cache not dumped (use \"show peers dict\")",
                i + 1,
                st.remote_id.get(),
                st.remote_data.get(),
                st.last_acked.get(),
                st.last_pushed.get(),
                st.last_get.get(),
                st.update.get(),
                Arc::as_ptr(&t.table),
                t.table.conf.name,
            );
        }
        out.push('\n');
    }

    /// Whether session `id` is still peer `p`'s live one.
    pub fn live(&self, p: usize, id: u64) -> bool {
        self.peers[p].session.get() == id
    }
}

/// A handshake's status code as `show peers` names it.
fn status_name(code: u16) -> &'static str {
    use super::wire::status::*;
    match code {
        CONNECTING => "CONN",
        SUCCESS => "ESTA",
        TRY_AGAIN => "RETR",
        PROTOCOL_ERROR => "PROT",
        BAD_VERSION => "VERS",
        BAD_HOST => "NAME",
        UNKNOWN_PEER => "UNKN",
        _ => "NONE",
    }
}

/// A duration as HAProxy prints one: its two largest units (`1d2h`, `3m4s`, `0s`).
fn human_time(d: Duration) -> String {
    let t = d.as_secs();
    let mut out = String::new();
    let mut left = 2;
    for (n, unit) in [
        (t / 86400, 'd'),
        (t % 86400 / 3600, 'h'),
        (t % 3600 / 60, 'm'),
    ] {
        if left > 0 && n > 0 {
            let _ = write!(out, "{n}{unit}");
            left -= 1;
        }
    }
    if (left > 0 && !t.is_multiple_of(60)) || t == 0 {
        let _ = write!(out, "{}s", t % 60);
    }
    out
}

/// Time left until `at`, as `show peers` prints a timer.
fn until(at: Option<Instant>) -> String {
    match at {
        None => "<NEVER>".into(),
        Some(at) => match at.checked_duration_since(Instant::now()) {
            None => "<PAST>".into(),
            Some(d) => human_time(d),
        },
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
    pub fn add(&mut self, key: Key, room: usize) {
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
