//! A worker thread's state around its `Worker` handle: accept dispatch to the least loaded
//! worker (capability 4) and the handling of inbox messages.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use super::inbox::{InboxMsg, Inboxes};
use crate::check::CheckTask;
use crate::conf::listen::Dispatch;
use crate::runtime::{Slot, Worker};
use crate::transport::{Detached, Socket};

/// Up to this many workers, dispatch compares every worker's load (join the shortest
/// queue); beyond, two drawn at random and the accepting one (power of two choices), so
/// that the cost of a choice stays flat.
const COMPARE_ALL: usize = 8;

/// A worker thread's own state around its [`Worker`] handle.
pub(crate) struct Thread {
    pub w: Rc<Worker>,
    pub inboxes: Inboxes,
    /// Soft stop: the accept loops empty their queues and close their sockets.
    pub stopped: Cell<bool>,
    pub stop: tokio::sync::Notify,
    /// Where accept dispatch starts its next search among equally loaded workers.
    pub rotor: Cell<usize>,
}

impl Thread {
    /// Serves a freshly accepted connection on the worker `tune.listener.multi-queue`
    /// chooses (by default the least loaded, see `least_loaded`): here, or handed over
    /// before any event loop registered it (the target registers it once). A bind
    /// restricted to some workers (`thread N[-M]`, 1-based) dispatches among those.
    pub fn dispatch(
        &self,
        conn: Detached,
        peer: SocketAddr,
        entry: (usize, usize),
        slot: Slot,
        allowed: Option<(usize, usize)>,
    ) {
        let w = &self.w;
        let ctx = w.ctx();
        ctx.counters.accepted.bump();
        let threads = &w.process.threads;
        let (from, to) = allowed.map_or((0, threads.len()), |(a, b)| (a - 1, b.min(threads.len())));
        let allowed = &threads[from..to];
        let mine = w.tid - from;
        let target = from
            + match w.config().global.dispatch {
                Dispatch::LeastLoaded => least_loaded(allowed, mine, &self.rotor),
                Dispatch::RoundRobin => {
                    let next = self.rotor.get() % allowed.len();
                    self.rotor.set(next + 1);
                    next
                }
                Dispatch::Local => mine,
            };
        if target != w.tid {
            ctx.counters.handed_off.bump();
            let msg = InboxMsg::Adopt {
                conn,
                peer,
                entry,
                slot,
            };
            self.inboxes.send(&w.process, target, msg);
            return;
        }
        self.start_serving(conn, peer, entry, slot);
    }

    /// Registers a connection with this worker's event loop and serves it.
    fn start_serving(&self, conn: Detached, peer: SocketAddr, entry: (usize, usize), slot: Slot) {
        let w = &self.w;
        match Socket::attach(conn) {
            Ok(conn) => {
                // Counted in the load until its task starts (`ClientConn::open`).
                w.ctx().starting.fetch_add(1, Ordering::Relaxed);
                tokio::task::spawn_local(crate::clock::Ticking::new(crate::stream::serve(
                    w.clone(),
                    conn,
                    peer,
                    entry,
                    slot,
                )));
            }
            Err(e) => say!(
                "sluice: worker {}: cannot register a connection: {e}",
                w.tid
            ),
        }
    }

    pub fn handle(&self, msg: InboxMsg) {
        let w = &self.w;
        match msg {
            InboxMsg::Adopt {
                conn,
                peer,
                entry,
                slot,
            } => {
                w.ctx().counters.adopted.bump();
                self.start_serving(conn, peer, entry, slot);
            }
            InboxMsg::Check(task) => self.start_check(task),
            InboxMsg::Stop => {
                self.stopped.set(true);
                self.stop.notify_waiters();
                w.soft_stop.notify_waiters();
            }
        }
        // Only now: a connection handed over is counted as starting before it stops
        // counting as waiting, so a soft stop never sees it in neither.
        w.ctx().inbox_pending.fetch_sub(1, Ordering::Relaxed);
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
            if !w.state().backends[task.backend].servers[task.server].gone() {
                inboxes.send(&w.process, to, InboxMsg::Check(task));
            }
        });
    }

    /// Starts the checks of the servers the CLI adds, as they come (the first worker's
    /// duty; `runtime::AddedChecks`).
    pub async fn start_added_checks(self: Rc<Self>) {
        let process = self.w.process.clone();
        loop {
            process.added_checks.wake.notified().await;
            for (backend, server, agent) in process.added_checks.take() {
                self.start_check(CheckTask {
                    backend,
                    server,
                    agent,
                    due: std::time::Instant::now(),
                    moved: false,
                });
            }
        }
    }
}

/// The worker that should take a new connection: the least loaded among every worker (or,
/// past `COMPARE_ALL`, among this one and two drawn at random). Ties go round: the search
/// starts after the last worker chosen, so that idle workers share connections too.
fn least_loaded(threads: &[crate::runtime::ThreadCtx], mine: usize, rotor: &Cell<usize>) -> usize {
    let n = threads.len();
    if n < 2 {
        return mine;
    }
    let mut best: Option<(usize, usize)> = None;
    let mut consider = |i: usize| {
        let load = threads[i].load();
        if best.is_none_or(|(least, _)| load < least) {
            best = Some((load, i));
        }
    };
    if n <= COMPARE_ALL {
        let start = rotor.get();
        (0..n).map(|k| (start + k) % n).for_each(&mut consider);
    } else {
        consider(mine);
        consider(fastrand::usize(..n));
        consider(fastrand::usize(..n));
    }
    let chosen = best.map_or(mine, |(_, i)| i);
    rotor.set((chosen + 1) % n);
    chosen
}
