//! A worker thread's state around its `Worker` handle: accept dispatch to the least loaded
//! worker (capability 4) and the handling of inbox messages.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use super::inbox::{InboxMsg, Inboxes};
use crate::check::CheckTask;
use crate::runtime::{Slot, Worker};
use crate::transport::Conn;

/// A worker thread's own state around its [`Worker`] handle.
pub(crate) struct Thread {
    pub w: Rc<Worker>,
    pub inboxes: Inboxes,
    /// Soft stop: the accept loops empty their queues and close their sockets.
    pub stopped: Cell<bool>,
    pub stop: tokio::sync::Notify,
}

impl Thread {
    /// Serves a freshly accepted connection here, or hands it to a sibling whose load is
    /// under half of ours (the same 2x rule HAProxy applies to task redistribution).
    pub fn dispatch(
        &self,
        conn: Conn,
        peer: SocketAddr,
        entry: (usize, usize),
        slot: Slot,
        pinned: bool,
    ) {
        let w = &self.w;
        let ctx = w.ctx();
        ctx.counters.accepted.bump();
        let mine = ctx.load();
        let threads = &w.process.threads;
        let n = threads.len();
        // A bind restricted to some threads (`thread N`) keeps its connections there.
        if n > 1 && mine >= 2 && !pinned {
            let other = (w.tid + 1 + fastrand::usize(..n - 1)) % n;
            if threads[other].load() * 2 < mine {
                if let Ok(conn) = conn.detach() {
                    ctx.counters.handed_off.bump();
                    let msg = InboxMsg::Adopt {
                        conn,
                        peer,
                        entry,
                        slot,
                    };
                    self.inboxes.send(&w.process, other, msg);
                }
                return;
            }
        }
        tokio::task::spawn_local(crate::stream::serve(w.clone(), conn, peer, entry, slot));
    }

    pub fn handle(&self, msg: InboxMsg) {
        let w = &self.w;
        w.ctx().inbox_pending.fetch_sub(1, Ordering::Relaxed);
        match msg {
            InboxMsg::Adopt {
                conn,
                peer,
                entry,
                slot,
            } => {
                w.ctx().counters.adopted.bump();
                // Registers the socket with this worker's event loop.
                if let Ok(conn) = Conn::attach(conn) {
                    tokio::task::spawn_local(crate::stream::serve(
                        w.clone(),
                        conn,
                        peer,
                        entry,
                        slot,
                    ));
                }
            }
            InboxMsg::Check(task) => self.start_check(task),
            InboxMsg::Stop => {
                self.stopped.set(true);
                self.stop.notify_waiters();
            }
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Resolves once this worker stops softly (at once if it already has).
    pub async fn until_stopped(&self) {
        let stop = self.stop.notified();
        if !self.stopped() {
            stop.await;
        }
    }

    /// Runs a health check here until it decides to move, then sends it to its new worker.
    pub fn start_check(&self, task: CheckTask) {
        let w = self.w.clone();
        let inboxes = self.inboxes.clone();
        tokio::task::spawn_local(async move {
            let (to, task) = crate::check::run(w.clone(), task).await;
            inboxes.send(&w.process, to, InboxMsg::Check(task));
        });
    }
}
