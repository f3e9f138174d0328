//! Worker inboxes: everything that crosses into a worker goes through its inbox, and is
//! counted in its load until handled.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::check::CheckTask;
use crate::runtime::{Process, Slot};
use crate::transport::Detached;

/// Everything that crosses into a worker.
#[derive(Debug)]
pub enum InboxMsg {
    /// Serve this connection (detached by the sender).
    Adopt {
        conn: Detached,
        peer: SocketAddr,
        /// The frontend and the listener that accepted it.
        entry: (usize, usize),
        slot: Slot,
    },
    /// Run this health check here (it moved from a busier worker).
    Check(CheckTask),
    /// Soft stop: empty the accept queues and stop accepting, close idle client
    /// connections, finish the rest.
    Stop,
}

/// The senders of every worker's inbox, indexed by worker.
#[derive(Debug, Clone)]
pub struct Inboxes(Arc<[mpsc::UnboundedSender<InboxMsg>]>);

impl Inboxes {
    /// Sends `msg` to worker `tid`, counting it in that worker's load until handled.
    pub fn send(&self, process: &Process, tid: usize, msg: InboxMsg) -> bool {
        let ctx = &process.threads[tid];
        ctx.inbox_pending.fetch_add(1, Ordering::Relaxed);
        let ok = self.0[tid].send(msg).is_ok();
        if !ok {
            ctx.inbox_pending.fetch_sub(1, Ordering::Relaxed);
        }
        ok
    }

    /// Asks every worker to stop softly.
    pub fn stop_all(&self, process: &Process) {
        for tid in 0..self.0.len() {
            self.send(process, tid, InboxMsg::Stop);
        }
    }
}

/// Creates the inboxes of `n` workers.
pub fn inboxes(n: usize) -> (Inboxes, Vec<mpsc::UnboundedReceiver<InboxMsg>>) {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::unbounded_channel()).unzip();
    (Inboxes(tx.into()), rx)
}
