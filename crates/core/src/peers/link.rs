//! One session with another peer: the handshake (as caller or callee), then the tables'
//! updates both ways. What arrives is applied to the tables as it is read; what leaves is
//! written by a sender woken by the node's log, the receiver's acknowledgements and
//! control answers, and a heartbeat when it has said nothing for a while.
//!
//! Invariants:
//! - The receiver never waits on the sender (they run side by side on the two halves of
//!   the socket), so two peers pushing at each other cannot block each other.
//! - What is buffered from a peer is bounded by the largest message accepted
//!   (`wire::MAX_MESSAGE`); a malformed message ends the session after HAProxy's protocol
//!   error message.
//! - A session silent for `SILENCE` is dead (a live peer sends a heartbeat every
//!   `HEARTBEAT`), and one whose writes stall for as long is too.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use super::learn::{Learner, FOREIGN_TABLES};
use super::node::{Node, Resync};
use super::wire::{self, status, Control, Message};
use crate::conf::BufSizes;
use crate::runtime::counters::Held;
use crate::stick::Key;
use crate::transport::{Detached, Socket};

/// How long a session may stay silent (HAProxy's reconnect period).
const SILENCE: Duration = Duration::from_secs(5);

/// How long a session may say nothing before it sends a heartbeat (HAProxy's figure).
const HEARTBEAT: Duration = Duration::from_secs(3);

/// How long a connection and the handshake may take.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(5);

/// What a sender writes at most at once before it looks at its other work again.
const BATCH: usize = 32 * 1024;

/// The longest handshake line.
const LINE_MAX: usize = 512;

/// Calls peer `p`, says hello and serves the session until it ends. Whether a session was
/// opened.
pub(super) async fn call(node: &Rc<Node>, p: usize) -> bool {
    let peer = &node.peers[p];
    let _active = Held::take(&node.process.peer_sessions.active);
    peer.counts.new_conn.set(peer.counts.new_conn.get() + 1);
    peer.status.set(status::CONNECTING);
    let hello = async {
        let mut conn = Socket::connect(peer.conf.addr, BufSizes::default(), None)
            .await
            .ok()?;
        if let Some(c) = &peer.conf.connector {
            conn = conn
                .into_tls_client(c.config.clone(), c.name.clone())
                .await
                .ok()?;
        }
        let hello = wire::hello(&peer.conf.name, &node.conf.local_name);
        conn.write_all(hello.as_bytes()).await.ok()?;
        let mut read = Vec::new();
        let line = read_line(&mut conn, &mut read).await?;
        Some((conn, read, line.trim().parse::<u16>().unwrap_or(0)))
    };
    let Ok(Some((conn, read, code))) = tokio::time::timeout(HANDSHAKE_LIMIT, hello).await else {
        return false;
    };
    peer.handshake.set(Some(std::time::Instant::now()));
    peer.status.set(code);
    if code != status::SUCCESS {
        return false;
    }
    serve(node, p, conn, read).await;
    true
}

/// Answers a connection to the local peer's address: a peer saying hello (each of its
/// lines judged as it comes, as HAProxy does), another peer or the local one (the next
/// process, which asks for the tables).
pub(super) async fn answer(node: Rc<Node>, conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut read = Vec::new();
    let hello = async {
        let mut conn = accepted(&node, conn).await?;
        let first = read_line(&mut conn, &mut read).await?;
        if let Err(code) = version(&first) {
            return Some((conn, Hello::Refused(code)));
        }
        let host = read_line(&mut conn, &mut read).await?;
        if host != node.conf.local_name {
            return Some((conn, Hello::Refused(status::BAD_HOST)));
        }
        let last = read_line(&mut conn, &mut read).await?;
        let hello = match peer(&node, &last) {
            Ok(p) => Hello::Peer(p),
            Err(code) => Hello::Refused(code),
        };
        Some((conn, hello))
    };
    let Ok(Some((mut conn, hello))) = tokio::time::timeout(HANDSHAKE_LIMIT, hello).await else {
        return;
    };
    match hello {
        Hello::Refused(code) => {
            let _ = conn.write_all(format!("{code}\n").as_bytes()).await;
        }
        Hello::Peer(p) => {
            let _active = Held::take(&node.process.peer_sessions.active);
            if conn.write_all(b"200\n").await.is_ok() {
                serve(&node, p, conn, read).await;
            }
        }
    }
}

/// A connection accepted at the local peer's address, as a socket of this thread, its TLS
/// handshake done when the listener has `ssl`.
async fn accepted(node: &Node, conn: TcpStream) -> Option<Socket> {
    let conn = Socket::attach(Detached::accepted(conn.into_std().ok()?, false)).ok()?;
    let Some(acceptor) = node.conf.tls.as_ref().and_then(|t| t.acceptor.as_ref()) else {
        return Some(conn);
    };
    let conn = conn.into_tls(acceptor.config.clone(), 0).ok()?;
    conn.handshake().await.ok()?;
    Some(conn)
}

/// What a connection to the local peer's address asked for.
enum Hello {
    Peer(usize),
    Refused(u16),
}

/// Judges a hello's first line: the protocol, in a version this side speaks.
fn version(line: &str) -> Result<(), u16> {
    let version = line
        .strip_prefix(wire::PROTOCOL)
        .and_then(|v| v.strip_prefix(' '))
        .ok_or(status::PROTOCOL_ERROR)?;
    let (major, minor) = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or(status::BAD_VERSION)?;
    match major == wire::VERSION.0 && minor <= wire::VERSION.1 {
        true => Ok(()),
        false => Err(status::BAD_VERSION),
    }
}

/// Which peer a hello's last line (`NAME PID RELATIVE-PID`) names.
fn peer(node: &Node, line: &str) -> Result<usize, u16> {
    let (name, _) = line.split_once(' ').ok_or(status::PROTOCOL_ERROR)?;
    if node.conf.disabled {
        return Err(status::TRY_AGAIN);
    }
    node.peers
        .iter()
        .position(|p| p.conf.name == name)
        .ok_or(status::UNKNOWN_PEER)
}

/// Reads a line (without its end, `\r\n` or `\n`), keeping what follows in `read`.
async fn read_line(conn: &mut Socket, read: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = read.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = read.drain(..=end).collect();
            let line = line.strip_suffix(b"\n")?;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            return Some(String::from_utf8_lossy(line).into_owned());
        }
        if read.len() > LINE_MAX {
            return None;
        }
        let mut chunk = [0u8; 256];
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        read.extend_from_slice(&chunk[..n]);
    }
}

/// A session's state, shared by its receiver and its sender.
struct Link {
    p: usize,
    /// The other side's table definitions.
    theirs: RefCell<Learner>,
    /// Per table of theirs: the last update received, and the last acknowledged.
    got: RefCell<HashMap<u64, (u32, u32)>>,
    /// Per table of ours: the last logged change sent.
    sent: RefCell<Vec<u32>>,
    /// The table of ours the updates sent are for, and the last update number sent.
    sending: Cell<Option<(usize, u32)>>,
    /// Entries to teach in full (they asked for the tables).
    teach: RefCell<Option<VecDeque<(usize, Key)>>>,
    /// Resync answers of theirs to confirm.
    confirm: Cell<u32>,
    ask: Cell<bool>,
    /// The error message to send before closing.
    fatal: Cell<Option<u8>>,
    work: tokio::sync::Notify,
}

/// Serves a session with peer `p` (its handshake done; `read` what came after it).
async fn serve(node: &Rc<Node>, p: usize, conn: Socket, read: Vec<u8>) {
    let id = node.open(p);
    let _connected = Held::take(&node.process.peer_sessions.connected);
    let link = Link {
        p,
        theirs: RefCell::default(),
        got: RefCell::default(),
        sent: RefCell::new(
            node.peers[p]
                .tables
                .iter()
                .map(|t| t.update.get())
                .collect(),
        ),
        sending: Cell::new(None),
        teach: RefCell::new(None),
        confirm: Cell::new(0),
        ask: Cell::new(false),
        fatal: Cell::new(None),
        work: tokio::sync::Notify::new(),
    };
    if node.resync.get() == Resync::Needed && !node.peers[p].partial.get() {
        node.resync.set(Resync::Asked(p));
        link.ask.set(true);
    }
    if let (Ok(local), Ok(remote)) = (conn.local_addr(), conn.peer_addr()) {
        node.peers[p].ends.set(Some((local, remote)));
    }
    let (rd, wr) = tokio::io::split(conn);
    let replaced = async {
        loop {
            let ended = node.peers[p].ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !node.live(p, id) {
                return;
            }
            ended.await;
        }
    };
    tokio::select! {
        () = receive(node, &link, rd, read) => {}
        () = send(node, &link, wr) => {}
        () = replaced => {}
    }
    node.close(p, id);
}

/// Reads and applies the peer's messages until it closes, falls silent or errs.
async fn receive(node: &Node, link: &Link, mut rd: ReadHalf<Socket>, mut buf: Vec<u8>) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let mut used = 0;
        loop {
            match wire::split(&buf[used..]) {
                Ok(Some((msg, n))) => {
                    if let Err(fatal) = handle(node, link, msg) {
                        return fail(node, link, fatal).await;
                    }
                    used += n;
                }
                Ok(None) => break,
                Err(wire::Malformed::Protocol) => {
                    return fail(node, link, Some(wire::ERROR_PROTOCOL)).await
                }
                Err(wire::Malformed::TooBig) => {
                    return fail(node, link, Some(wire::ERROR_SIZE)).await
                }
            }
        }
        buf.drain(..used);
        match tokio::time::timeout(SILENCE, rd.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return,
        }
    }
}

/// Ends the session, after the error message `code` when there is one (the sender writes
/// it and returns, which ends the session).
async fn fail(node: &Node, link: &Link, code: Option<u8>) {
    if code.is_none() {
        return;
    }
    let counts = &node.peers[link.p].counts;
    counts.proto_err.set(counts.proto_err.get() + 1);
    link.fatal.set(code);
    link.work.notify_one();
    std::future::pending().await
}

/// Applies one message. `Err` ends the session (with the error message to send, if any).
fn handle(node: &Node, link: &Link, msg: Message<'_>) -> Result<(), Option<u8>> {
    let malformed = Some(wire::ERROR_PROTOCOL);
    match msg {
        Message::Control(Control::ResyncRequest) => {
            let now = crate::runtime::clock_ms();
            let all = node
                .tables
                .iter()
                .enumerate()
                .flat_map(|(t, s)| s.table.entries(now).into_iter().map(move |(k, _)| (t, k)))
                .collect();
            *link.teach.borrow_mut() = Some(all);
            link.work.notify_one();
        }
        Message::Control(c @ (Control::ResyncFinished | Control::ResyncPartial)) => {
            if node.resync.get() == Resync::Asked(link.p) {
                let done = c == Control::ResyncFinished;
                node.resync
                    .set(if done { Resync::Done } else { Resync::Needed });
                node.peers[link.p].partial.set(!done);
            }
            link.confirm.set(link.confirm.get() + 1);
            link.work.notify_one();
        }
        Message::Control(Control::Heartbeat) => {
            let counts = &node.peers[link.p].counts;
            counts.rx_hbt.set(counts.rx_hbt.get() + 1);
        }
        Message::Control(Control::ResyncConfirm) | Message::Unknown => {}
        Message::Error(_) => return Err(None),
        Message::Table(wire::DEFINE, body) => {
            let room = node.tables.len() + FOREIGN_TABLES;
            let ours = |d: &wire::Definition| {
                node.tables
                    .iter()
                    .position(|s| s.wire_name == d.name && wire::same_key(d, s.table.conf.key))
            };
            let d = link
                .theirs
                .borrow_mut()
                .define(body, room, ours)
                .ok_or(malformed)?;
            if let Some(t) = d.ours.and_then(|t| node.peers[link.p].tables.get(t)) {
                t.remote_id.set(d.id);
                t.remote_data.set(d.bits);
            }
        }
        Message::Table(wire::SWITCH, body) => {
            link.theirs.borrow_mut().switch(body).ok_or(malformed)?;
        }
        Message::Table(kind @ wire::UPDATE..=wire::INC_UPDATE, body)
        | Message::Table(kind @ wire::UPDATE_TIMED..=wire::INC_UPDATE_TIMED, body) => {
            learn(node, link, kind, body).ok_or(malformed)?;
        }
        Message::Table(wire::ACK, body) => {
            let (table, update) = wire::ack(body).ok_or(malformed)?;
            // Our table numbers are their positions from 1.
            let i = usize::try_from(table).ok().and_then(|t| t.checked_sub(1));
            if let Some(t) = i.and_then(|i| node.peers[link.p].tables.get(i)) {
                t.update.set(update);
            }
        }
        Message::Table(..) => {}
    }
    Ok(())
}

/// Takes an entry update into its table (if it is one of ours). `None`: malformed.
fn learn(node: &Node, link: &Link, kind: u8, body: &[u8]) -> Option<()> {
    let key = |t: usize| node.tables[t].table.conf.key;
    let Some((t, theirs, u)) = link.theirs.borrow().update(kind, body, key)? else {
        return Some(());
    };
    let now = crate::runtime::clock_ms();
    node.tables[t]
        .table
        .learn(u.key, u.expire.map(u64::from), &u.values, now);
    let mut got = link.got.borrow_mut();
    let g = got.entry(theirs).or_insert((0, 0));
    g.0 = u.id.unwrap_or(g.0.wrapping_add(1));
    node.peers[link.p].tables[t].last_get.set(g.0);
    link.work.notify_one();
    Some(())
}

/// Writes what the session owes the peer, as it comes, until the socket fails or stalls.
async fn send(node: &Node, link: &Link, mut wr: WriteHalf<Socket>) {
    let mut pushed = node.pushed.subscribe();
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let mut out = Vec::new();
        if let Some(code) = link.fatal.get() {
            wire::put_short(&mut out, wire::CLASS_ERROR, code);
            let _ = tokio::time::timeout(SILENCE, write(&mut wr, &out)).await;
            return;
        }
        fill(node, link, &mut out);
        let heartbeat = quiet_since + HEARTBEAT;
        node.peers[link.p].heartbeat.set(Some(heartbeat.into_std()));
        if out.is_empty() {
            pushed.mark_unchanged();
            tokio::select! {
                () = link.work.notified() => {}
                r = pushed.changed() => if r.is_err() { return },
                () = tokio::time::sleep_until(heartbeat) => {
                    wire::put_short(&mut out, wire::CLASS_CONTROL, Control::Heartbeat as u8);
                    let counts = &node.peers[link.p].counts;
                    counts.tx_hbt.set(counts.tx_hbt.get() + 1);
                }
            }
            if out.is_empty() {
                continue;
            }
        }
        match tokio::time::timeout(SILENCE, write(&mut wr, &out)).await {
            Ok(Ok(())) => quiet_since = tokio::time::Instant::now(),
            _ => return,
        }
    }
}

/// Writes `out` and flushes it (over TLS, records leave at the flush).
async fn write(wr: &mut WriteHalf<Socket>, out: &[u8]) -> std::io::Result<()> {
    wr.write_all(out).await?;
    wr.flush().await
}

/// Appends what is owed now, up to about [`BATCH`] bytes: a request for the tables, the
/// acknowledgements, the tables in full when asked, the changes logged since the last
/// ones sent, and the confirmations of the peer's resync answers.
fn fill(node: &Node, link: &Link, out: &mut Vec<u8>) {
    if link.ask.replace(false) {
        wire::put_short(out, wire::CLASS_CONTROL, Control::ResyncRequest as u8);
    }
    for (table, (got, acked)) in link.got.borrow_mut().iter_mut() {
        if got != acked {
            wire::put_ack(out, *table, *got);
            *acked = *got;
            let ours = link.theirs.borrow().ours(*table);
            if let Some(t) = ours.and_then(|t| node.peers[link.p].tables.get(t)) {
                t.last_acked.set(*got);
            }
        }
    }
    teach(node, link, out);
    if link.teach.borrow().is_none() {
        for t in 0..node.tables.len() {
            push(node, link, t, out);
        }
    }
    for _ in 0..link.confirm.replace(0) {
        wire::put_short(out, wire::CLASS_CONTROL, Control::ResyncConfirm as u8);
    }
}

/// Teaches the entries still to teach (each with its time left), then says whether this
/// process was up to date itself.
fn teach(node: &Node, link: &Link, out: &mut Vec<u8>) {
    let mut teach = link.teach.borrow_mut();
    let Some(queue) = teach.as_mut() else {
        return;
    };
    let now = crate::runtime::clock_ms();
    while out.len() < BATCH {
        let Some((t, key)) = queue.pop_front() else {
            let answer = match node.resync.get() {
                Resync::Done => Control::ResyncFinished,
                _ => Control::ResyncPartial,
            };
            wire::put_short(out, wire::CLASS_CONTROL, answer as u8);
            *teach = None;
            return;
        };
        let number = node.tables[t].log.borrow().last();
        put_entry(node, link, (t, number, true), key, now, out);
    }
}

/// Sends table `t`'s changes logged since the last one sent.
fn push(node: &Node, link: &Link, t: usize, out: &mut Vec<u8>) {
    if out.len() >= BATCH {
        return;
    }
    let from = link.sent.borrow()[t];
    let changes = node.tables[t].log.borrow().after(from, 256);
    let now = crate::runtime::clock_ms();
    for (number, key) in changes {
        link.sent.borrow_mut()[t] = number;
        node.peers[link.p].tables[t].last_pushed.set(number);
        put_entry(node, link, (t, number, false), key, now, out);
        if out.len() >= BATCH {
            return;
        }
    }
}

/// Appends the update of `key` in table `t` (its definition first when the previous
/// update was of another table), numbered `number`, with its time left when `timed`. An
/// entry gone meanwhile is skipped.
fn put_entry(
    node: &Node,
    link: &Link,
    (t, number, timed): (usize, u32, bool),
    key: Key,
    now: u64,
    out: &mut Vec<u8>,
) {
    let shared = &node.tables[t];
    let table = &shared.table;
    let Some(entry) = table.lookup(&key, now) else {
        return;
    };
    let (values, left) = {
        let mut e = entry.lock().unwrap_or_else(|e| e.into_inner());
        e.sent();
        (e.snapshot(now), e.expires.map(|x| x.saturating_sub(now)))
    };
    let previous = link.sending.get();
    if previous.map(|(x, _)| x) != Some(t) {
        let expire = table.conf.expire.map_or(0, |d| d.as_millis() as u64);
        let id = t as u64 + 1;
        wire::put_define(
            out,
            id,
            &shared.wire_name,
            table.conf.key,
            &table.conf.store,
            expire,
        );
    }
    let follows = previous == Some((t, number.wrapping_sub(1)));
    let update = wire::Update {
        id: (!follows).then_some(number),
        expire: timed.then(|| left.map_or(0, |l| l.min(u64::from(u32::MAX)) as u32)),
        key,
        values,
    };
    wire::put_update(out, table.conf.key, &shared.columns, &update);
    link.sending.set(Some((t, number)));
}
