//! The process as the data path sees it: the configuration generation being served with its
//! live state, each worker's public figures ([`ThreadCtx`]), connection admission, and the
//! worker-local handle ([`Worker`]) that every stream holds.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::counters::WorkerCounters;
use super::limit::{Limit, Permit};
use super::state::{LbCache, Runtime};
use crate::buffer::BufPool;
use crate::conf::Config;
use crate::log::Logger;

/// What other threads may know about a worker. Aligned to two cache lines so that workers
/// updating their own figures never write a line another worker's figures share.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct ThreadCtx {
    pub id: usize,
    /// Client connections being served: the load figure balancing decisions compare.
    pub active: AtomicUsize,
    /// Messages sent to this worker's inbox and not yet handled.
    pub inbox_pending: AtomicUsize,
    /// Client connections given to this worker (accepted here or adopted) whose task has
    /// not started yet: a burst of accepts counts before the first of them runs.
    pub starting: AtomicUsize,
    /// Client connections in their TLS handshake: counted in the load a second time,
    /// because a handshake costs the worker far more than a request (its key exchange and
    /// signature), so that accept dispatch steers new connections away from a worker busy
    /// with a burst of them.
    pub handshaking: AtomicUsize,
    /// Share of time (percent) the worker spent outside its event loop's wait, smoothed
    /// over about a second.
    pub busy_pct: AtomicU32,
    /// Health checks awake on this worker: running, or waiting for a check slot.
    pub checks_awake: AtomicUsize,
    /// Health-check tasks living on this worker, asleep or awake.
    pub checks_homed: AtomicUsize,
    pub counters: WorkerCounters,
    /// The client connections this worker serves, for `show sess` (locked by the worker at
    /// each connection's start and end, and by the CLI when it lists them).
    pub sessions: std::sync::Mutex<std::collections::HashMap<u64, Arc<SessionInfo>>>,
    /// What this worker's I/O buffers hold (`show pools`).
    pub buffers: Arc<crate::buffer::BufGauge>,
}

/// What `show sess` says about one client connection: fixed at its start, then a few
/// figures its worker updates as its requests go (relaxed stores to a line only it writes).
#[derive(Debug)]
pub struct SessionInfo {
    pub id: u64,
    pub peer: std::net::SocketAddr,
    pub frontend: usize,
    /// The listener (`bind` address) that accepted it.
    pub listener: usize,
    pub started: Instant,
    /// The backend and server of the request in progress (`usize::MAX`: none).
    pub backend: AtomicUsize,
    pub server: AtomicUsize,
    /// Requests completed on the connection.
    pub requests: AtomicU32,
    /// A request is in progress.
    pub busy: AtomicBool,
    /// `shutdown session`, `shutdown sessions server`: ends the connection (the request in
    /// progress, logged as killed, or the wait for the next one).
    pub kill: KillSwitch,
}

/// A connection's kill switch: pulled from the CLI's thread, watched by the connection's
/// task without a lock (a flag and one waker: the task that watched last is woken, which
/// for an HTTP/1 connection is its only task).
#[derive(Debug, Default)]
pub struct KillSwitch {
    pulled: AtomicBool,
    waker: atomic_waker::AtomicWaker,
}

impl KillSwitch {
    pub fn pull(&self) {
        self.pulled.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Resolves once the switch is pulled (at once if it was). The task's waker is stored
    /// at the first poll only: a task keeps its waker, and later polls (every wake-up of
    /// the exchange beside it) cost one load.
    pub async fn pulled(&self) {
        let mut registered = false;
        std::future::poll_fn(|cx| {
            if self.pulled.load(Ordering::Acquire) {
                return std::task::Poll::Ready(());
            }
            if registered {
                return std::task::Poll::Pending;
            }
            self.waker.register(cx.waker());
            registered = true;
            // Pulled between the check and the registration: seen now.
            if self.pulled.load(Ordering::Acquire) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

impl SessionInfo {
    /// Notes the backend and server of the request in progress.
    pub fn route(&self, backend: Option<usize>, server: Option<usize>) {
        self.backend
            .store(backend.unwrap_or(usize::MAX), Ordering::Relaxed);
        self.server
            .store(server.unwrap_or(usize::MAX), Ordering::Relaxed);
    }
}

impl ThreadCtx {
    /// Everything the worker has to run next: the client connections it serves (those in a
    /// TLS handshake twice), those given to it and not started, awake checks, and messages
    /// waiting in its inbox (connections handed over among them). Accept dispatch and check
    /// spreading compare it.
    pub fn load(&self) -> usize {
        self.active.load(Ordering::Relaxed)
            + self.handshaking.load(Ordering::Relaxed)
            + self.starting.load(Ordering::Relaxed)
            + self.checks_awake.load(Ordering::Relaxed)
            + self.inbox_pending.load(Ordering::Relaxed)
    }
}

/// Process-wide figures sampled a few times a second (`stats::sample`).
#[derive(Debug, Default)]
pub struct ProcessFigures {
    /// `MaxConnRate`, `MaxSessRate`.
    pub peaks: super::counters::Peaks,
    /// `BytesOutRate`, and the (total, clock_ms) it was last computed from.
    pub bytes_out_rate: std::sync::atomic::AtomicU64,
    pub bytes_out_at: std::sync::Mutex<(u64, u64)>,
    /// `%rt` for formats that show it: one count for the whole process, as HAProxy's, so
    /// that unique ids built on it do not repeat across workers.
    pub request_ids: std::sync::atomic::AtomicU64,
    /// The most client connections open at once since memory was last given back.
    pub connections_peak: AtomicUsize,
    /// Bytes entering and leaving the compressors, every worker's (`CompressBpsIn`,
    /// `CompressBpsOut`; `maxcomprate` compares the first).
    pub compress_in: crate::freq::PerSecond,
    pub compress_out: crate::freq::PerSecond,
}

/// The right to hold one client connection under the global, frontend and listener
/// `maxconn`. Released when the connection ends.
#[derive(Debug)]
pub struct Slot {
    _global: Permit,
    _frontend: Permit,
    _listener: Option<OwnedSemaphorePermit>,
}

/// Connection-count limits shared by all workers (global, per-frontend and per-listener
/// `maxconn`); the first two may change at runtime (`set maxconn global|frontend`).
#[derive(Debug)]
pub struct Admission {
    global: Limit,
    frontends: Vec<Limit>,
    /// By frontend, then listener: the `bind ... maxconn N` limits.
    listeners: Vec<Vec<Option<Arc<Semaphore>>>>,
    /// The process's limit at start (`Hard_maxconn`): `set maxconn global` stays under it.
    pub hard_limit: usize,
    /// Connections per second (`maxconnrate` and the like).
    pub rates: super::rate::AcceptRates,
}

impl Admission {
    /// `frontends`: each frontend's limit and its listeners' own limits.
    pub fn new(
        global: usize,
        frontends: impl Iterator<Item = (usize, Vec<Option<usize>>)>,
        rates: super::rate::RateLimits,
    ) -> Admission {
        let (frontends, listeners): (Vec<Limit>, Vec<_>) = frontends
            .map(|(limit, binds)| {
                let sems = binds
                    .into_iter()
                    .map(|b| b.map(|n| Arc::new(Semaphore::new(n))))
                    .collect::<Vec<_>>();
                (Limit::new(limit), sems)
            })
            .unzip();
        Admission {
            global: Limit::new(global),
            frontends,
            listeners,
            hard_limit: global,
            rates: super::rate::AcceptRates::new(rates),
        }
    }

    /// The process's `maxconn` now (`Maxconn` in `show info`).
    pub fn global_limit(&self) -> usize {
        self.global.get()
    }

    /// A frontend's `maxconn` now (`slim`; 0: none).
    pub fn frontend_limit(&self, fe: usize) -> usize {
        self.frontends.get(fe).map_or(0, Limit::get)
    }

    /// `set maxconn global N`.
    pub fn set_global_limit(&self, n: usize) {
        self.global.set(n);
    }

    /// `set maxconn frontend NAME N` (0: none).
    pub fn set_frontend_limit(&self, fe: usize, n: usize) {
        if let Some(l) = self.frontends.get(fe) {
            l.set(n);
        }
    }

    /// Waits until one more connection may be held on listener `li` of frontend `fe`
    /// (an `ssl` bind if `tls`), and may be accepted under the rate limits.
    pub async fn admit(&self, fe: usize, li: usize, tls: bool) -> Slot {
        let listener = match self.listeners[fe].get(li).cloned().flatten() {
            Some(s) => Some(s.acquire_owned().await.expect("never closed")),
            None => None,
        };
        let frontend = self.frontends[fe].take().await.expect("never closed");
        let global = self.global.take().await.expect("never closed");
        self.rates.pace(fe, tls).await;
        Slot {
            _global: global,
            _frontend: frontend,
            _listener: listener,
        }
    }
}

/// The listening sockets a replacing process may take (`expose-fd listeners`, `-x`).
#[derive(Debug, Default)]
pub struct Handover {
    /// (frontend, address, socket) of every listener.
    pub sockets: std::sync::Mutex<Vec<(String, String, socket2::Socket)>>,
    /// A replacing process took them: they stay open after this process closes its copies,
    /// so a soft stop has no accept queue of its own to empty.
    pub taken: AtomicBool,
}

/// Everything the workers share: read-only apart from atomics.
#[derive(Debug)]
pub struct Process {
    pub config: Arc<Config>,
    /// `maxcomprate`: bytes per second of compressor input (0: none), which `set
    /// rate-limit http-compression global` changes.
    pub compress_limit: AtomicU64,
    pub state: Runtime,
    pub threads: Box<[ThreadCtx]>,
    pub admission: Admission,
    /// Each frontend's open log targets, aligned with `Config::frontends`.
    pub loggers: Box<[Vec<Arc<Logger>>]>,
    /// Each backend's (health-check events), aligned with `Config::backends`.
    pub backend_loggers: Box<[Vec<Arc<Logger>>]>,
    pub stopping: AtomicBool,
    /// Accept loops still running. A soft stop ends the process only once every one of
    /// them has emptied its queue and handed each connection it took to a worker.
    pub accept_loops: AtomicUsize,
    /// SIGTTOU: the workers stop accepting until SIGTTIN (`resumed`).
    pub paused: AtomicBool,
    pub resumed: Notify,
    pub handover: Handover,
    /// Variables of the `proc.` scope.
    pub vars: std::sync::Mutex<crate::conf::sample::Vars>,
    pub started: Instant,
    /// Process-wide figures of `show info` that are sampled rather than counted.
    pub figures: ProcessFigures,
    /// How the workers give free memory back once connections are gone.
    pub memory: MemoryRelease,
    /// Held while the CLI adds or deletes a server: one change at a time, so that a
    /// backend's server lists grow one server at a time (`conf::server_list`).
    pub server_edits: std::sync::Mutex<()>,
    /// Checks of servers added at run time (`add server ... check`), as (backend, server,
    /// agent check), for the first worker to start as it starts the configuration's.
    pub added_checks: Handoff<(usize, usize, bool)>,
    /// Email alerts to send (`email-alert`), for the first worker to send.
    pub mail: Handoff<Mail>,
    /// Each `resolvers` section's nameservers' counters, aligned with
    /// `Config::resolvers` and their `nameserver` lines.
    pub resolvers: Box<[Box<[super::counters::NameserverCounters]>]>,
    /// Servers whose name changed (`set server ... fqdn`), as (backend, server), for the
    /// first worker's resolutions to ask at once.
    pub renamed: Handoff<(usize, usize)>,
    /// `show peers` asked from the CLI, for the first worker (which owns the sessions) to
    /// answer.
    pub show_peers: Handoff<ShowPeers>,
    /// Sessions with other peers (`show info`'s ActivePeers: opened, handshakes
    /// included; ConnectedPeers: past their handshake), counted by the first worker.
    pub peer_sessions: PeerSessions,
    /// The `peers` sections' listeners, opened at start, for the first worker to serve.
    pub peers_listeners: std::sync::Mutex<Vec<PeersListener>>,
    /// Splicing pipes in use and pooled (`show info`).
    pub pipes: crate::transport::splice::PipeCounts,
    /// The QUIC listeners' workers, for datagrams their connection IDs name.
    pub quic_routes: crate::transport::quic_route::ListenerRoutes,
}

/// A `peers` section's listener at the local peer's address, and the entries its tables
/// learnt from the process this one replaces.
#[derive(Debug)]
pub struct PeersListener {
    pub section: usize,
    pub listener: std::net::TcpListener,
    pub learned: usize,
}

/// Sessions with other peers, as `show info` counts them.
#[derive(Debug, Default)]
pub struct PeerSessions {
    pub active: std::sync::atomic::AtomicUsize,
    pub connected: std::sync::atomic::AtomicUsize,
}

/// A `show peers [SECTION]` for the first worker: it sends the text on `answer`.
#[derive(Debug)]
pub struct ShowPeers {
    pub section: Option<String>,
    pub answer: std::sync::mpsc::Sender<String>,
}

/// Work any thread (the CLI's, a worker's) hands to the first worker, which does it as it
/// comes: pushed under a short lock, taken all at once.
#[derive(Debug)]
pub struct Handoff<T> {
    queue: std::sync::Mutex<Vec<T>>,
    pub wake: Notify,
}

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Handoff {
            queue: std::sync::Mutex::new(Vec::new()),
            wake: Notify::new(),
        }
    }
}

impl<T> Handoff<T> {
    pub fn push(&self, item: T) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.push(item);
        self.wake.notify_one();
    }

    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// An email alert: the backend whose `email-alert` settings send it, and its text (a
/// state change as the log says it, without its final period).
#[derive(Debug, Clone)]
pub struct Mail {
    pub backend: usize,
    pub text: String,
}

/// How free memory goes back to the system once connections are gone ([`Process::trim_memory`]).
#[derive(Debug, Default)]
pub struct MemoryRelease {
    /// Times free memory was given back; a worker that sees it move gives back its own.
    pub trims: AtomicU64,
    /// The allocator's way to give the calling thread's free memory back, for an allocator
    /// that keeps freed pages per thread (mimalloc) where `malloc_trim` does not reach;
    /// `None` with the system allocator alone.
    pub per_thread: Option<fn()>,
}

impl Process {
    /// Client TLS connections open now, over all workers (`CurrSslConns`).
    pub fn tls_open(&self) -> u64 {
        let sum = |get: fn(&ThreadCtx) -> u64| self.threads.iter().map(get).sum::<u64>();
        sum(|t| t.counters.tls_sessions.get()).saturating_sub(sum(|t| t.counters.tls_closed.get()))
    }

    /// Gives the allocator's free memory back to the system once the client connections
    /// have fallen to half their peak (and by at least 256), or to none: the memory of
    /// connections that are gone would otherwise stay with the workers' allocator arenas.
    /// Called by one worker a few times a second; each worker then gives back what its
    /// allocator keeps for its thread alone ([`MemoryRelease::per_thread`]).
    pub fn trim_memory(&self) {
        let now = self.active_total();
        let peak = &self.figures.connections_peak;
        let before = peak.fetch_max(now, Ordering::Relaxed).max(now);
        let fell = before >= now + 256 && before >= 2 * now;
        if fell || (now == 0 && before > 0) {
            peak.store(now, Ordering::Relaxed);
            #[cfg(target_env = "gnu")]
            // SAFETY: malloc_trim only releases free memory of the C allocator, which every
            // Rust allocation here goes through; it takes the allocator's own locks.
            unsafe {
                libc::malloc_trim(0);
            }
            self.memory.trims.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether every connection accepted so far is being served or gone: no accept loop
    /// still runs, and none is waiting in an inbox or for its task to start. A soft stop
    /// must not end the process before, or it would drop connections already accepted.
    pub fn settled(&self) -> bool {
        self.accept_loops.load(Ordering::Relaxed) == 0
            && self.threads.iter().all(|t| {
                t.starting.load(Ordering::Relaxed) == 0
                    && t.inbox_pending.load(Ordering::Relaxed) == 0
            })
    }

    /// The workers' I/O buffers together: their size, how many connections hold, how many
    /// the workers keep free.
    pub fn buffer_pool(&self) -> BufferPool {
        BufferPool {
            size: self.config.global.bufsize,
            in_use: self.threads.iter().map(|t| t.buffers.in_use()).sum(),
            cached: self.threads.iter().map(|t| t.buffers.cached()).sum(),
        }
    }

    /// Client connections open in the whole process (`%ac`).
    pub fn active_total(&self) -> usize {
        self.threads
            .iter()
            .map(|t| t.active.load(Ordering::Relaxed))
            .sum()
    }
}

/// The figures of the workers' buffer pool (`show pools`, `PoolAlloc_bytes`).
#[derive(Debug, Clone, Copy)]
pub struct BufferPool {
    pub size: usize,
    pub in_use: usize,
    pub cached: usize,
}

impl BufferPool {
    /// Buffers allocated: held by connections or kept free.
    pub fn allocated(&self) -> usize {
        self.in_use + self.cached
    }

    pub fn allocated_bytes(&self) -> u64 {
        (self.allocated() * self.size) as u64
    }
}

/// A worker's handle on the process, owned by its thread and shared (`Rc`) by its streams.
pub struct Worker {
    pub tid: usize,
    pub process: Arc<Process>,
    pub bufs: BufPool,
    /// Compressor output, used within one synchronous step at a time.
    pub comp_out: RefCell<Vec<u8>>,
    /// Empty splicing pipes, for the next spliced bodies.
    pub pipes: crate::transport::splice::Pipes,
    /// Decoded body bytes waiting to be compressed, same discipline.
    pub comp_plain: RefCell<Vec<u8>>,
    /// This worker's copies of the balancing schedules.
    pub lb: LbCache,
    /// This worker's side of the health checks.
    pub checks: WorkerChecks,
    /// Signalled when the worker stops softly: connections that can say so (HTTP/2's
    /// GOAWAY) tell their clients at once.
    pub soft_stop: Notify,
    /// This worker's HTTP/2 connections to servers.
    pub h2_links: crate::pool::h2::Links,
}

/// What a worker keeps for the health checks it runs (the check module's policy reads and
/// writes it; it lives here because it belongs to the worker).
#[derive(Debug)]
pub struct WorkerChecks {
    /// Checks allowed to run at once here (`tune.max-checks-per-thread`); the others wait
    /// in arrival order.
    pub slots: Semaphore,
    /// The spacing of this worker's check wake-ups, worked out once from the configuration.
    pub grid: OnceCell<Duration>,
    /// The wake-up tick now being served and how many of the checks it woke are running.
    pub batch: Cell<(Instant, usize)>,
    /// The ticks checks are waiting for, each with the signal that starts them early.
    pub ticks: RefCell<BTreeMap<Instant, Rc<Notify>>>,
}

impl Worker {
    pub fn new(tid: usize, process: Arc<Process>) -> Worker {
        let check_slots = match process.config.global.check.max_per_thread {
            0 => tokio::sync::Semaphore::MAX_PERMITS,
            n => n,
        };
        Worker {
            tid,
            bufs: BufPool::new(
                process.config.global.bufsize,
                process.threads[tid].buffers.clone(),
            ),
            comp_out: RefCell::default(),
            pipes: Default::default(),
            comp_plain: RefCell::default(),
            lb: LbCache::default(),
            process,
            soft_stop: Notify::new(),
            h2_links: Default::default(),
            checks: WorkerChecks {
                slots: Semaphore::new(check_slots),
                grid: OnceCell::new(),
                batch: Cell::new((Instant::now(), 0)),
                ticks: RefCell::default(),
            },
        }
    }

    pub fn ctx(&self) -> &ThreadCtx {
        &self.process.threads[self.tid]
    }

    pub fn config(&self) -> &Config {
        &self.process.config
    }

    pub fn state(&self) -> &Runtime {
        &self.process.state
    }

    pub fn busy_pct(&self) -> u32 {
        self.ctx().busy_pct.load(Ordering::Relaxed)
    }

    pub fn stopping(&self) -> bool {
        self.process.stopping.load(Ordering::Relaxed)
    }
}

/// Counts one client connection on its worker and its frontend for as long as it lives,
/// however it ends (a panicking stream included).
#[derive(Debug)]
pub struct ClientConn {
    process: Arc<Process>,
    tid: usize,
    frontend: usize,
    /// What `show sess` shows of it.
    pub info: Arc<SessionInfo>,
}

impl ClientConn {
    pub fn open(
        process: &Arc<Process>,
        tid: usize,
        (frontend, listener): (usize, usize),
        peer: std::net::SocketAddr,
    ) -> ClientConn {
        let ctx = &process.threads[tid];
        ctx.active.fetch_add(1, Ordering::Relaxed);
        ctx.starting.fetch_sub(1, Ordering::Relaxed);
        let seq = ctx.counters.accepted_sessions.get();
        ctx.counters.accepted_sessions.bump();
        let info = Arc::new(SessionInfo {
            id: (tid as u64) << 48 | seq,
            peer,
            frontend,
            listener,
            started: Instant::now(),
            backend: AtomicUsize::new(usize::MAX),
            server: AtomicUsize::new(usize::MAX),
            requests: AtomicU32::new(0),
            busy: AtomicBool::new(false),
            kill: KillSwitch::default(),
        });
        ctx.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(info.id, info.clone());
        let fe = &process.state.frontends[frontend];
        let now = fe.conns.fetch_add(1, Ordering::Relaxed) + 1;
        fe.peaks.sessions.note(now as u64);
        let c = fe.counters.at(tid);
        let ms = super::state::clock_ms();
        c.connections.bump();
        c.connection_rate.hit(ms);
        c.traffic.sessions.bump();
        c.session_rate.hit(ms);
        if let Some(l) = fe.listeners.get(listener) {
            let now = l.conns.fetch_add(1, Ordering::Relaxed) + 1;
            l.peak.note(now as u64);
            l.counters.at(tid).traffic.sessions.bump();
        }
        ClientConn {
            process: process.clone(),
            tid,
            frontend,
            info,
        }
    }
}

impl Drop for ClientConn {
    fn drop(&mut self) {
        let ctx = &self.process.threads[self.tid];
        ctx.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.info.id);
        ctx.active.fetch_sub(1, Ordering::Relaxed);
        if let Some(l) = self.process.state.frontends[self.frontend]
            .listeners
            .get(self.info.listener)
        {
            l.conns.fetch_sub(1, Ordering::Relaxed);
        }
        self.process.state.frontends[self.frontend]
            .conns
            .fetch_sub(1, Ordering::Relaxed);
    }
}
