//! The tasks that keep a `peers` section linked, on the first worker's event loop: its
//! listener at the local peer's address (other peers, and the next process), a call to
//! each other peer whenever it has no session, a collector per shared table taking the
//! changes the workers mark, and the answers to the CLI's `show peers`.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link;
use super::node::{Node, Resync, RESYNC_LIMIT};
use crate::runtime::{PeersListener, Process};

/// The wait before calling a peer again after a failed call (HAProxy's figure).
const RECONNECT: Duration = Duration::from_secs(5);

/// How long the changes to a table are gathered before they are sent.
const GATHER: Duration = Duration::from_millis(1);

/// Serves the sections on this worker's event loop, until the process ends.
pub(super) async fn serve(process: Arc<Process>, sections: Vec<PeersListener>) {
    let nodes: Vec<Rc<Node>> = sections
        .into_iter()
        .filter_map(|s| start(&process, s))
        .collect();
    answer_show(&process, &nodes).await
}

/// Answers the CLI's `show peers` as it asks, until the process ends.
async fn answer_show(process: &Process, nodes: &[Rc<Node>]) {
    loop {
        process.show_peers.wake.notified().await;
        for ask in process.show_peers.take() {
            let mut out = String::new();
            let named = nodes
                .iter()
                .filter(|n| ask.section.as_ref().is_none_or(|s| *s == n.conf.name));
            for (i, n) in named.enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                n.show(&mut out);
            }
            let _ = ask.answer.send(out);
        }
    }
}

fn start(process: &Arc<Process>, s: PeersListener) -> Option<Rc<Node>> {
    let conf = process.config.peers[s.section].clone();
    let listener = match tokio::net::TcpListener::from_std(s.listener) {
        Ok(l) => l,
        Err(e) => {
            say!("sluice: peers '{}': {e}", conf.name);
            return None;
        }
    };
    let node = Rc::new(Node::new(process, conf, s.learned > 0));
    tokio::task::spawn_local(accept(node.clone(), listener));
    if node.conf.disabled {
        return Some(node);
    }
    // (The local peer is not called: the next process calls it.)
    for p in (0..node.peers.len()).filter(|&p| !node.peers[p].local) {
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
    Some(node)
}

/// Takes the changes the workers mark in table `t` and logs them for the sessions.
async fn collect(node: Rc<Node>, t: usize) {
    let shared = &node.tables[t];
    let Some(changes) = shared.table.changes() else {
        return;
    };
    let mut last = tokio::time::Instant::now();
    loop {
        changes.wake.notified().await;
        // Changes are taken at most once per GATHER: a change after a quiet moment leaves at
        // once, and under a stream of them the ones of each moment leave together (one
        // wake-up of this thread, one write per session, an entry changed again meanwhile
        // sent once), whatever the request rate.
        if last.elapsed() < GATHER {
            tokio::time::sleep_until(last + GATHER).await;
        }
        last = tokio::time::Instant::now();
        let keys = shared.table.take_changes();
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
        let peer = &node.peers[p];
        if peer.session.get() != 0 {
            ended.await;
        } else if !link::call(&node, p).await {
            // (A call that opened a session and saw it end pauses as one ended above.)
            peer.reconnect.set(Some(Instant::now() + RECONNECT));
            tokio::time::sleep(RECONNECT).await;
            continue;
        }
        peer.reconnect.set(Some(Instant::now() + pause));
        tokio::time::sleep(pause).await;
    }
}
