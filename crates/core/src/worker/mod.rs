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

pub mod cpu_map;
mod inbox;
pub mod listener;
mod thread;

use std::cell::{Cell, OnceCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Keyword, KwError, Scope};
use tokio::sync::mpsc;

pub use self::inbox::{inboxes, InboxMsg, Inboxes};
use self::thread::Thread;
use crate::check::CheckTask;
use crate::conf::{one_arg, GlobalConf};
use crate::runtime::{Process, Worker};

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

/// Starts worker `tid` on its own thread with its share of the listening sockets.
pub fn spawn(
    tid: usize,
    process: Arc<Process>,
    inboxes: Inboxes,
    listeners: Vec<listener::Listening>,
    checks: Vec<CheckTask>,
    inbox: mpsc::UnboundedReceiver<InboxMsg>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("sluice-w{tid}"))
        .spawn(move || worker_main(tid, process, inboxes, listeners, checks, inbox))
        .map(|_| ())
}

fn worker_main(
    tid: usize,
    process: Arc<Process>,
    inboxes: Inboxes,
    listeners: Vec<listener::Listening>,
    checks: Vec<CheckTask>,
    mut inbox: mpsc::UnboundedReceiver<InboxMsg>,
) {
    if let Some(cpus) = process.config.global.cpu_map.cpus_for(tid + 1) {
        if let Err(e) = cpu_map::bind_current_thread(&cpus) {
            say!("sluice: worker {tid}: 'cpu-map' to CPUs {cpus:?} refused ({e}); it runs unbound");
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_unpark(|| {
            let now = std::time::Instant::now();
            BUSY.with(|b| {
                b.unparked.set(Some(now));
                b.loops.set(b.loops.get() + 1);
            });
            WORKER.with(|w| {
                if let Some(w) = w.get() {
                    crate::check::on_wake(w, now);
                }
            });
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
            say!("sluice: worker {tid}: cannot build its event loop: {e}");
            std::process::exit(1);
        }
    };
    rt.block_on(async move {
        let t = Rc::new(Thread {
            w: Rc::new(Worker::new(tid, process)),
            inboxes,
            stopped: Cell::new(false),
            stop: tokio::sync::Notify::new(),
            rotor: Cell::new(tid),
        });
        WORKER.with(|w| {
            let _ = w.set(t.w.clone());
        });
        for l in listeners {
            if l.is_datagram() {
                // A QUIC listener: this worker's own endpoint serves what its socket gets.
                let entry = (l.frontend, l.listener);
                let served = crate::stream::h3::serve_endpoint(t.w.clone(), entry, l.socket);
                let process = t.w.process.clone();
                process.accept_loops.fetch_add(1, Ordering::Relaxed);
                tokio::task::spawn_local(async move {
                    served.await;
                    process.accept_loops.fetch_sub(1, Ordering::Relaxed);
                });
                continue;
            }
            match l.register() {
                Ok(l) => {
                    let (t, process) = (t.clone(), t.w.process.clone());
                    process.accept_loops.fetch_add(1, Ordering::Relaxed);
                    tokio::task::spawn_local(async move {
                        listener::accept_loop(t, l).await;
                        process.accept_loops.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(e) => say!("sluice: worker {tid}: cannot register a listener: {e}"),
            }
        }
        for task in checks {
            t.start_check(task);
        }
        if tid == 0 {
            tokio::task::spawn_local(t.clone().start_added_checks());
            tokio::task::spawn_local(crate::mail::deliver(t.w.clone()));
            tokio::task::spawn_local(crate::dns::run(t.w.clone()));
            tokio::task::spawn_local(crate::peers::run(t.w.clone()));
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
    /// This thread's worker, for the wake-up hook (set once its event loop runs).
    static WORKER: OnceCell<Rc<Worker>> = const { OnceCell::new() };
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
    let mut trims_seen = 0;
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
        if w.tid == 0 {
            crate::stats::sample(&w.process);
            w.process.trim_memory();
        }
        let memory = &w.process.memory;
        let trims = memory.trims.load(Ordering::Relaxed);
        if trims != trims_seen {
            trims_seen = trims;
            if let Some(release) = memory.per_thread {
                release();
            }
        }
        last_busy = busy;
        last_at = now;
    }
}
