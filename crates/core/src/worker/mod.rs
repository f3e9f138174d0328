//! Worker threads: one single-threaded event loop per thread (`nbthread`), their inboxes
//! for anything that crosses threads, the accept dispatch between them, and each worker's
//! background duties (idle-pool purge, busy-time measure).
//!
//! Invariants (see `docs/internals/threading.md`):
//! - A client connection is served by one worker for its whole life, registered only with
//!   that worker's event loop.
//! - A connection moves between workers only detached from its event loop
//!   (`transport::Detached`) through the target's inbox; every such move is counted on both
//!   sides (`accq_pushed`, `adopted`).
//! - `ThreadCtx` fields are written by their owner and read by anyone.

pub mod listener;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Keyword, KwError, Scope};
use tokio::sync::mpsc;

use crate::conf::{one_arg, GlobalConf};
use crate::runtime::{Process, Slot, Worker};
use crate::transport::{Conn, Detached};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "nbthread",
    scope: Scope::GLOBAL,
    help: "nbthread N: number of worker threads (default: CPUs available to the process)",
    parse: |g, a| {
        let v = one_arg(a, "a thread count")?;
        let n = v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .ok_or_else(|| KwError::bad(1, v, "expects an integer from 1 to 1024"))?;
        g.nbthread = Some(n);
        Ok(())
    },
}];

/// Everything that crosses into a worker.
#[derive(Debug)]
pub enum InboxMsg {
    /// Serve this connection (detached by the sender).
    Adopt {
        conn: Detached,
        peer: SocketAddr,
        frontend: usize,
        slot: Slot,
    },
    /// Soft stop: stop accepting, close idle client connections, finish the rest.
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

/// A worker thread's own state around its [`Worker`] handle.
pub(crate) struct Thread {
    pub w: Rc<Worker>,
    inboxes: Inboxes,
    accepting: RefCell<Vec<tokio::task::JoinHandle<()>>>,
}

impl Thread {
    /// Serves a freshly accepted connection here, or hands it to a sibling whose load is
    /// under half of ours (the same 2x rule HAProxy applies to task redistribution).
    pub fn dispatch(
        &self,
        conn: Conn,
        peer: SocketAddr,
        frontend: usize,
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
                        frontend,
                        slot,
                    };
                    self.inboxes.send(&w.process, other, msg);
                }
                return;
            }
        }
        tokio::task::spawn_local(crate::stream::serve(w.clone(), conn, peer, frontend, slot));
    }

    fn handle(&self, msg: InboxMsg) {
        let w = &self.w;
        w.ctx().inbox_pending.fetch_sub(1, Ordering::Relaxed);
        match msg {
            InboxMsg::Adopt {
                conn,
                peer,
                frontend,
                slot,
            } => {
                w.ctx().counters.adopted.bump();
                // Registers the socket with this worker's event loop.
                if let Ok(conn) = Conn::attach(conn) {
                    tokio::task::spawn_local(crate::stream::serve(
                        w.clone(),
                        conn,
                        peer,
                        frontend,
                        slot,
                    ));
                }
            }
            InboxMsg::Stop => {
                // Dropping the accept tasks closes this worker's copies of the listeners.
                for task in self.accepting.borrow_mut().drain(..) {
                    task.abort();
                }
                w.stop.notify_waiters();
            }
        }
    }
}

/// Creates the inboxes of `n` workers.
pub fn inboxes(n: usize) -> (Inboxes, Vec<mpsc::UnboundedReceiver<InboxMsg>>) {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::unbounded_channel()).unzip();
    (Inboxes(tx.into()), rx)
}

/// Starts worker `tid` on its own thread with its share of the listening sockets.
pub fn spawn(
    tid: usize,
    process: Arc<Process>,
    inboxes: Inboxes,
    listeners: Vec<listener::Listening>,
    inbox: mpsc::UnboundedReceiver<InboxMsg>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("sluice-w{tid}"))
        .spawn(move || worker_main(tid, process, inboxes, listeners, inbox))
        .map(|_| ())
}

fn worker_main(
    tid: usize,
    process: Arc<Process>,
    inboxes: Inboxes,
    listeners: Vec<listener::Listening>,
    mut inbox: mpsc::UnboundedReceiver<InboxMsg>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_unpark(|| {
            BUSY.with(|b| {
                b.unparked.set(Some(std::time::Instant::now()));
                b.loops.set(b.loops.get() + 1);
            })
        })
        .on_thread_park(|| {
            BUSY.with(|b| {
                if let Some(t) = b.unparked.take() {
                    b.busy_ns
                        .set(b.busy_ns.get() + t.elapsed().as_nanos() as u64);
                }
            })
        })
        .build_local(Default::default())
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: worker {tid}: cannot build its event loop: {e}");
            std::process::exit(1);
        }
    };
    rt.block_on(async move {
        let t = Rc::new(Thread {
            w: Rc::new(Worker::new(tid, process)),
            inboxes,
            accepting: RefCell::default(),
        });
        for l in listeners {
            match l.register() {
                Ok(l) => {
                    let task = tokio::task::spawn_local(listener::accept_loop(t.clone(), l));
                    t.accepting.borrow_mut().push(task);
                }
                Err(e) => eprintln!("sluice: worker {tid}: cannot register a listener: {e}"),
            }
        }
        tokio::task::spawn_local(purge_idle(t.w.clone()));
        tokio::task::spawn_local(measure_busy(t.w.clone()));
        while let Some(msg) = inbox.recv().await {
            t.handle(msg);
        }
    });
}

/// Runs this worker's share of idle-pool maintenance: dead and expiring connections go at
/// once, and once per `pool-purge-delay` half the surplus above the need (see `pool`).
async fn purge_idle(w: Rc<Worker>) {
    // One clock for every worker, so that they agree on purge periods.
    let start = w.process.started;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let now = std::time::Instant::now();
        let now_ms = now.duration_since(start).as_millis() as u64 + 1;
        let mut closed = 0;
        for be in w.state().backends.iter() {
            for srv in be.servers.iter() {
                closed += srv.idle.purge(w.tid, now, now_ms).len();
            }
        }
        w.ctx().counters.idle_purged.add(closed as u64);
    }
}

/// Busy-time accounting of the current worker thread, fed by the runtime's park/unpark hooks.
struct Busy {
    unparked: Cell<Option<std::time::Instant>>,
    busy_ns: Cell<u64>,
    loops: Cell<u64>,
}

thread_local! {
    static BUSY: Busy = const {
        Busy {
            unparked: Cell::new(None),
            busy_ns: Cell::new(0),
            loops: Cell::new(0),
        }
    };
}

/// Publishes the worker's busy share every 250 ms, smoothed (half old, half new) so that it
/// follows changes within about a second.
async fn measure_busy(w: Rc<Worker>) {
    const PERIOD: Duration = Duration::from_millis(250);
    let mut tick = tokio::time::interval(PERIOD);
    let mut last_busy = 0u64;
    let mut last_at = std::time::Instant::now();
    let mut smoothed = 0f64;
    loop {
        tick.tick().await;
        let now = std::time::Instant::now();
        // The time since this wake-up is busy too but not yet accounted: include it.
        let busy = BUSY.with(|b| {
            b.busy_ns.get()
                + b.unparked
                    .get()
                    .map_or(0, |t| t.elapsed().as_nanos() as u64)
        });
        let wall = now.duration_since(last_at).as_nanos().max(1) as f64;
        let share = ((busy.saturating_sub(last_busy)) as f64 / wall).min(1.0) * 100.0;
        smoothed = (smoothed + share) / 2.0;
        w.ctx()
            .busy_pct
            .store(smoothed.round() as u32, Ordering::Relaxed);
        w.ctx().counters.loops.set(BUSY.with(|b| b.loops.get()));
        last_busy = busy;
        last_at = now;
    }
}
