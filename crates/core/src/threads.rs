//! Worker threads: one single-threaded event loop per thread (`nbthread`), a [`ThreadCtx`]
//! per worker that other threads may read, and a per-worker inbox for anything that
//! crosses threads.
//!
//! Invariants (see `docs/internals/threading.md`):
//! - A client connection is served by one worker for its whole life, registered only with
//!   that worker's event loop.
//! - A socket moves between workers only as a plain `std` socket through the target's inbox:
//!   deregistered by the sender (`into_std`), registered by the receiver (`from_std`). Every
//!   such move is counted on both sides.
//! - `ThreadCtx` fields are atomics written by their owner and read by anyone.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Keyword, KwError, Scope};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::backend::one_arg;
use crate::buffer::BufPool;
use crate::config::{Config, GlobalConf};
use crate::listener::{self, Admission, ListenError, Slot};
use crate::{cli, stream};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "hard-stop-after",
        scope: Scope::GLOBAL,
        help: "hard-stop-after TIME: longest a soft stop (SIGUSR1) may wait for active connections",
        parse: |g, a| crate::backend::time_arg(a).map(|t| g.hard_stop_after = Some(t)),
    },
    Keyword {
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
    },
];

pub fn effective_nbthread(g: &GlobalConf) -> usize {
    g.nbthread
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Per-worker counters (`show activity` prints them).
#[derive(Debug, Default)]
pub struct WorkerCounters {
    pub accepted: AtomicU64,
    /// Connections this worker accepted but handed to a less loaded sibling.
    pub handed_off: AtomicU64,
    /// Connections received from a sibling through the inbox.
    pub adopted: AtomicU64,
    pub requests: AtomicU64,
    pub accept_errors: AtomicU64,
    /// Idle server connections closed by the purge timer.
    pub idle_purged: AtomicU64,
    /// Idle server connections this worker took over from a sibling.
    pub fd_takeover: AtomicU64,
    /// Event-loop wake-ups (returns from waiting for events).
    pub loops: AtomicU64,
}

/// What other threads may know about a worker. Aligned to two cache lines so that workers
/// updating their own counters never write a line another worker's counters share.
#[derive(Debug)]
#[repr(align(128))]
pub struct ThreadCtx {
    pub id: usize,
    /// Client connections being served: the load figure balancing decisions compare.
    pub active: AtomicUsize,
    /// Messages sent to this worker's inbox and not yet handled.
    pub inbox_pending: AtomicUsize,
    /// Share of time (percent) the worker spent outside its event loop's wait, smoothed
    /// over about a second.
    pub busy_pct: AtomicU32,
    pub counters: WorkerCounters,
    inbox: mpsc::UnboundedSender<InboxMsg>,
}

impl ThreadCtx {
    pub fn load(&self) -> usize {
        self.active.load(Ordering::Relaxed) + self.inbox_pending.load(Ordering::Relaxed)
    }

    fn send(&self, msg: InboxMsg) -> bool {
        self.inbox_pending.fetch_add(1, Ordering::Relaxed);
        let ok = self.inbox.send(msg).is_ok();
        if !ok {
            self.inbox_pending.fetch_sub(1, Ordering::Relaxed);
        }
        ok
    }
}

/// Everything that crosses into a worker.
#[derive(Debug)]
enum InboxMsg {
    /// Serve this connection (deregistered by the sender).
    Adopt {
        stream: std::net::TcpStream,
        peer: SocketAddr,
        frontend: usize,
        slot: Slot,
    },
    /// Soft stop: stop accepting, close idle client connections, finish the rest.
    Stop,
}

/// State shared by all workers (read-only apart from atomics).
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: Arc<Config>,
    pub threads: Box<[ThreadCtx]>,
    pub admission: Admission,
    pub stopping: AtomicBool,
    pub started: std::time::Instant,
}

/// A worker's view of the process, owned by its thread.
pub(crate) struct Worker {
    pub tid: usize,
    pub shared: Arc<Shared>,
    pub bufs: BufPool,
    /// Compressor output, used within one synchronous step at a time.
    pub comp_out: RefCell<Vec<u8>>,
    /// Decoded body bytes waiting to be compressed, same discipline.
    pub comp_plain: RefCell<Vec<u8>>,
    /// Woken at soft stop, for client connections waiting idle between requests.
    pub stop: tokio::sync::Notify,
    accepting: RefCell<Vec<tokio::task::JoinHandle<()>>>,
}

impl Worker {
    pub fn ctx(&self) -> &ThreadCtx {
        &self.shared.threads[self.tid]
    }

    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Client connections open in the whole process (`%ac`).
    pub fn active_total(&self) -> usize {
        self.shared
            .threads
            .iter()
            .map(|t| t.active.load(Ordering::Relaxed))
            .sum()
    }

    pub fn busy_pct(&self) -> u32 {
        self.ctx().busy_pct.load(Ordering::Relaxed)
    }

    pub fn stopping(&self) -> bool {
        self.shared.stopping.load(Ordering::Relaxed)
    }

    /// Serves a freshly accepted connection here, or hands it to a sibling whose load is
    /// under half of ours (the same 2x rule HAProxy applies to task redistribution).
    pub fn dispatch(
        self: &Rc<Self>,
        sock: TcpStream,
        peer: SocketAddr,
        frontend: usize,
        slot: Slot,
        pinned: bool,
    ) {
        let ctx = self.ctx();
        ctx.counters.accepted.fetch_add(1, Ordering::Relaxed);
        let mine = ctx.load();
        let n = self.shared.threads.len();
        // A bind restricted to some threads (`thread N`) keeps its connections there.
        if n > 1 && mine >= 2 && !pinned {
            let other = &self.shared.threads[(self.tid + 1 + fastrand::usize(..n - 1)) % n];
            if other.load() * 2 < mine {
                if let Ok(stream) = sock.into_std() {
                    ctx.counters.handed_off.fetch_add(1, Ordering::Relaxed);
                    other.send(InboxMsg::Adopt {
                        stream,
                        peer,
                        frontend,
                        slot,
                    });
                }
                return;
            }
        }
        self.serve_local(sock, peer, frontend, slot);
    }

    fn serve_local(
        self: &Rc<Self>,
        sock: TcpStream,
        peer: SocketAddr,
        frontend: usize,
        slot: Slot,
    ) {
        let fe = self.shared.config.frontends[frontend].clone();
        tokio::task::spawn_local(stream::serve(self.clone(), sock, peer, fe, slot));
    }

    fn handle(self: &Rc<Self>, msg: InboxMsg) {
        self.ctx().inbox_pending.fetch_sub(1, Ordering::Relaxed);
        match msg {
            InboxMsg::Adopt {
                stream,
                peer,
                frontend,
                slot,
            } => {
                self.ctx().counters.adopted.fetch_add(1, Ordering::Relaxed);
                // Registers the socket with this worker's event loop.
                if let Ok(sock) = TcpStream::from_std(stream) {
                    self.serve_local(sock, peer, frontend, slot);
                }
            }
            InboxMsg::Stop => {
                // Dropping the accept tasks closes this worker's copies of the listeners.
                for task in self.accepting.borrow_mut().drain(..) {
                    task.abort();
                }
                self.stop.notify_waiters();
            }
        }
    }
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error("cannot start worker {tid}: {source}")]
    Worker { tid: usize, source: std::io::Error },
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
    #[error("{0}")]
    Fds(String),
    #[error("cannot open a log target: {0}")]
    Log(std::io::Error),
    #[error("stats socket {path}: {source}")]
    Cli {
        path: String,
        source: std::io::Error,
    },
}

/// Opens the listeners, starts the workers and blocks until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), RunError> {
    let nbthread = effective_nbthread(&config.global);
    // Without a global maxconn, HAProxy derives one from the descriptor limit; with one, the
    // limit is raised to match or the start is refused.
    let global_max = crate::fds::ensure(config.global.maxconn).map_err(RunError::Fds)?;
    let mut listeners = Vec::new();
    for (fi, fe) in config.frontends.iter().enumerate() {
        let backlog = fe.listen.maxconn.unwrap_or(global_max);
        for bind in &fe.listen.binds {
            listeners.push((fi, bind.clone(), listener::open(&bind.spec, backlog)?));
        }
    }
    for fe in &config.frontends {
        let loggers = crate::log::open_all(&fe.log, &config.global.log).map_err(RunError::Log)?;
        let _ = fe.loggers.set(loggers);
    }
    let admission = Admission::new(
        global_max,
        config
            .frontends
            .iter()
            .map(|f| f.listen.maxconn.unwrap_or(global_max)),
    );
    let mut inboxes = Vec::new();
    let threads: Box<[ThreadCtx]> = (0..nbthread)
        .map(|id| {
            let (tx, rx) = mpsc::unbounded_channel();
            inboxes.push(rx);
            ThreadCtx {
                id,
                active: AtomicUsize::new(0),
                inbox_pending: AtomicUsize::new(0),
                busy_pct: AtomicU32::new(0),
                counters: WorkerCounters::default(),
                inbox: tx,
            }
        })
        .collect();
    let shared = Arc::new(Shared {
        config: Arc::new(config),
        threads,
        admission,
        stopping: AtomicBool::new(false),
        started: std::time::Instant::now(),
    });
    for (tid, inbox) in inboxes.into_iter().enumerate() {
        let mine = listeners
            .iter()
            .filter(|(_, bind, _)| bind.on_thread(tid))
            .map(|(fe, bind, l)| l.try_clone().map(|l| (*fe, bind.threads.is_some(), l)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| RunError::Worker { tid, source })?;
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("sluice-w{tid}"))
            .spawn(move || worker_main(tid, shared, mine, inbox))
            .map_err(|source| RunError::Worker { tid, source })?;
    }
    if let Some(conf) = shared.config.global.stats_socket.clone() {
        let listener = cli::bind(&conf).map_err(|source| RunError::Cli {
            path: conf.path.clone(),
            source,
        })?;
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("sluice-cli".into())
            .spawn(move || cli::serve(shared, conf, listener))
            .map_err(|source| RunError::Worker {
                tid: usize::MAX,
                source,
            })?;
    }
    let addrs: Vec<String> = listeners
        .iter()
        .filter_map(|(_, _, l)| l.local_addr().ok().map(|a| a.to_string()))
        .collect();
    // The workers hold their own copies; a soft stop closes those.
    drop(listeners);
    eprintln!(
        "sluice: {nbthread} worker(s) listening on {}",
        addrs.join(", ")
    );
    wait_for_stop_signal(&shared)
}

fn worker_main(
    tid: usize,
    shared: Arc<Shared>,
    listeners: Vec<(usize, bool, std::net::TcpListener)>,
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
        let bufs = BufPool::new(shared.config.global.bufsize);
        let w = Rc::new(Worker {
            tid,
            shared,
            bufs,
            comp_out: RefCell::default(),
            comp_plain: RefCell::default(),
            stop: tokio::sync::Notify::new(),
            accepting: RefCell::default(),
        });
        for (fe, pinned, l) in listeners {
            match tokio::net::TcpListener::from_std(l) {
                Ok(l) => {
                    let task =
                        tokio::task::spawn_local(listener::accept_loop(w.clone(), fe, pinned, l));
                    w.accepting.borrow_mut().push(task);
                }
                Err(e) => eprintln!("sluice: worker {tid}: cannot register a listener: {e}"),
            }
        }
        tokio::task::spawn_local(purge_idle(w.clone()));
        tokio::task::spawn_local(measure_busy(w.clone()));
        while let Some(msg) = inbox.recv().await {
            w.handle(msg);
        }
    });
}

/// Runs this worker's share of idle-pool maintenance: dead and expiring connections go at
/// once, and once per `pool-purge-delay` half the surplus above the need (see `pool`).
async fn purge_idle(w: Rc<Worker>) {
    // One clock for every worker, so that they agree on purge periods.
    let start = w.shared.started;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let now = std::time::Instant::now();
        let now_ms = now.duration_since(start).as_millis() as u64 + 1;
        let mut closed = 0;
        for be in &w.config().backends {
            for srv in &be.servers {
                closed += srv.idle.purge(w.tid, now, now_ms).len();
            }
        }
        w.ctx()
            .counters
            .idle_purged
            .fetch_add(closed as u64, Ordering::Relaxed);
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
        w.ctx()
            .counters
            .loops
            .store(BUSY.with(|b| b.loops.get()), Ordering::Relaxed);
        last_busy = busy;
        last_at = now;
    }
}

/// The control thread: SIGTERM/SIGINT stop at once; SIGUSR1 starts a soft stop, which ends
/// when no client connection is left or when `hard-stop-after` expires.
fn wait_for_stop_signal(shared: &Shared) -> Result<(), RunError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Signals)?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(RunError::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(RunError::Signals)?;
        let mut usr1 = signal(SignalKind::user_defined1()).map_err(RunError::Signals)?;
        tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = usr1.recv() => {}
        }
        eprintln!("sluice: soft stop: no longer accepting, finishing active connections");
        shared.stopping.store(true, Ordering::Relaxed);
        for t in shared.threads.iter() {
            t.send(InboxMsg::Stop);
        }
        let deadline = shared
            .config
            .global
            .hard_stop_after
            .map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                _ = term.recv() => return Ok(()),
                _ = int.recv() => return Ok(()),
                _ = tick.tick() => {}
            }
            let active: usize = shared
                .threads
                .iter()
                .map(|t| t.active.load(Ordering::Relaxed))
                .sum();
            if active == 0 {
                return Ok(());
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                eprintln!(
                    "sluice: hard-stop-after reached with {active} connection(s) still active"
                );
                return Ok(());
            }
        }
    })
}
