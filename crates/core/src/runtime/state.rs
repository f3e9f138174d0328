//! The live state of proxies and servers, aligned with one configuration generation.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use super::counters::{Peaks, PerWorker, ProxyCounters, ServerCounters};
use crate::conf::{Backend, Config, Frontend, Server};
use crate::pool::ServerPools;
use crate::transport::Socket;

/// What an operator decided about a server (`set server ... state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AdminState {
    Ready = 0,
    /// No new traffic from the balancer; requests in flight finish.
    Drain = 1,
    /// Out of service.
    Maint = 2,
}

/// What the health checks (or an agent, a tracked server, the CLI) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OperState {
    Up = 0,
    Down = 1,
    /// Answering but asking for no new traffic (HAProxy's NOLB).
    Stopping = 2,
}

/// A server's waiting room under `maxconn`.
#[derive(Debug)]
pub struct ServerQueue {
    /// One permit per request served, for a server with `maxconn` (`set maxconn server`
    /// changes it); waiters are served in arrival order whichever worker they are on.
    pub slots: Option<super::limit::Limit>,
    /// Requests waiting now.
    pub waiting: AtomicUsize,
    /// Wakes the waiting requests when the server goes down or into maintenance, so that
    /// they go to another server rather than wait for this one.
    pub closed: tokio::sync::Notify,
}

/// A server's live state.
#[derive(Debug)]
pub struct ServerState {
    pub id: u32,
    admin: AtomicU8,
    oper: AtomicU8,
    weight: AtomicU32,
    /// Requests in flight on this server; `leastconn` and `random` read it.
    pub in_flight: AtomicUsize,
    pub counters: PerWorker<ServerCounters>,
    pub peaks: Peaks,
    pub idle: ServerPools<Socket>,
    pub queue: ServerQueue,
    /// Health-check state; `None` for a server without `check`.
    pub check: Option<CheckState>,
    /// Agent-check state; `None` for a server without `agent-check`.
    pub agent: Option<AgentState>,
    /// When the server last changed state (`lastchg`).
    pub last_change: Mutex<Instant>,
    /// Ends the server's connections (`on-marked-down shutdown-sessions`).
    pub kill: tokio::sync::Notify,
    /// Where the server is now (`set server ... addr` changes it).
    addr: RwLock<SocketAddr>,
    /// Bumped by every change of where or how to connect (address, `ssl`): a connection
    /// opened before it never goes back to the pool, nor takes new HTTP/2 streams.
    pub addr_gen: AtomicU64,
    /// `set server ... ssl off`: connections to this `ssl` server go in plain text.
    pub plain: AtomicBool,
    /// Time spent down (`downtime`).
    downtime: Downtime,
    /// `on-marked-down shutdown-sessions`: entering maintenance ends connections too.
    shutdown_on_down: bool,
    /// `slowstart`: the weight ramps up over this time after the server comes back.
    slowstart: Option<Duration>,
    /// When the current ramp started ([`clock_ns`]), 0 when none.
    ramp_from: AtomicU64,
    /// `del server`: the server is gone. Its index stays (indices never move), in
    /// maintenance for good; whatever lists or names servers passes it by.
    gone: AtomicBool,
    /// Still in the maintenance its configuration put it in (`disabled`), which HAProxy
    /// tells apart (`show servers state`), until its administrative state first changes.
    configured_maint: AtomicBool,
    /// Out of service because its name does not resolve (HAProxy's RMAINT), whatever the
    /// operator's state: `resolvers` answers set and clear it.
    unresolved: AtomicBool,
    /// The name its address follows (`srv_fqdn`; `set server ... fqdn` changes it).
    fqdn: Mutex<Option<String>>,
}

pub use crate::clock::{clock_ms, clock_ms_at, clock_ns};

/// How a check ended, in HAProxy's terms (`check_status` in `show stat`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub passed: bool,
    /// `L4OK`, `L4CON`, `L4TOUT`, `L7OK`, `L7STS`, `L7RSP`, `L7TOUT`.
    pub status: &'static str,
    /// What the status means, as HAProxy's logs word it (`Layer4 check passed`, ...).
    pub reason: &'static str,
    /// The HTTP status of a layer-7 check.
    pub code: Option<u16>,
    /// More detail (the error, or the response's reason phrase).
    pub info: Option<String>,
    pub duration_ms: u64,
    /// `http-check disable-on-404` matched: the server stays up but takes no new traffic.
    pub stopping: bool,
}

/// A server's health-check state, shared by whichever worker runs its check.
#[derive(Debug)]
pub struct CheckState {
    /// HAProxy's health counter, from 0 to `rise + fall - 1`: up from `rise` on.
    pub health: AtomicU32,
    /// A check of this server is running now: there is never a second one at once.
    pub running: AtomicBool,
    /// `disable health`: checks are not run until `enable health`.
    pub paused: AtomicBool,
    /// Consecutive errors seen in the server's traffic (`observe`).
    pub errors: AtomicU32,
    /// Wakes the check task to check now (`on-error`), at `fastinter`.
    pub wake: tokio::sync::Notify,
    /// Checks that failed (`chkfail`).
    pub failed: AtomicU64,
    /// Transitions from up to down (`chkdown`).
    pub downs: AtomicU64,
    pub last: Mutex<Option<CheckResult>>,
    /// Errors seen in traffic by `observe` (`hanafail`).
    pub analyze_failures: AtomicU64,
}

/// A server's agent-check state.
#[derive(Debug)]
pub struct AgentState {
    /// The agent's last word on the server's health (`up` until it says otherwise).
    pub up: AtomicBool,
    pub running: AtomicBool,
    /// `disable agent`: the agent is not asked until `enable agent`.
    pub paused: AtomicBool,
    pub last: Mutex<Option<CheckResult>>,
}

impl ServerState {
    pub fn new(conf: &Server, workers: usize) -> ServerState {
        ServerState {
            id: conf.id,
            admin: AtomicU8::new(if conf.disabled {
                AdminState::Maint
            } else {
                AdminState::Ready
            } as u8),
            // A server starting in maintenance (`disabled`, or added at run time) starts
            // stopped, as HAProxy's (leaving maintenance brings it up, `check::set_admin`).
            oper: AtomicU8::new(if conf.disabled {
                OperState::Down
            } else {
                OperState::Up
            } as u8),
            weight: AtomicU32::new(conf.weight),
            in_flight: AtomicUsize::new(0),
            counters: PerWorker::new(workers),
            peaks: Peaks::default(),
            idle: ServerPools::new(workers, conf.pool),
            queue: ServerQueue {
                slots: conf.maxconn.map(super::limit::Limit::new),
                waiting: AtomicUsize::new(0),
                closed: tokio::sync::Notify::new(),
            },
            // As HAProxy 2.6: a checked server starts up, but at the lowest up health, so
            // the first failed check takes it down.
            check: conf.check.as_ref().map(|c| CheckState {
                health: AtomicU32::new(c.rise),
                running: AtomicBool::new(false),
                paused: AtomicBool::new(false),
                errors: AtomicU32::new(0),
                wake: tokio::sync::Notify::new(),
                failed: AtomicU64::new(0),
                downs: AtomicU64::new(0),
                last: Mutex::new(None),
                analyze_failures: AtomicU64::new(0),
            }),
            agent: conf.agent.as_ref().map(|_| AgentState {
                up: AtomicBool::new(true),
                running: AtomicBool::new(false),
                paused: AtomicBool::new(false),
                last: Mutex::new(None),
            }),
            last_change: Mutex::new(Instant::now()),
            kill: tokio::sync::Notify::new(),
            addr: RwLock::new(conf.addr),
            addr_gen: AtomicU64::new(0),
            plain: AtomicBool::new(false),
            downtime: Downtime::default(),
            shutdown_on_down: conf.shutdown_on_down,
            slowstart: conf.slowstart,
            ramp_from: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            configured_maint: AtomicBool::new(conf.disabled && !conf.dynamic),
            unresolved: AtomicBool::new(conf.unresolved),
            // An SRV name is no server's own: its records give each server a target.
            fqdn: Mutex::new(conf.fqdn.clone().filter(|n| !n.starts_with('_'))),
        }
    }

    /// Still in the maintenance its configuration put it in (`disabled`).
    pub fn configured_maint(&self) -> bool {
        self.configured_maint.load(Ordering::Relaxed)
    }

    /// The server was deleted (`del server`).
    pub fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    pub fn admin(&self) -> AdminState {
        match self.admin.load(Ordering::Relaxed) {
            0 => AdminState::Ready,
            1 => AdminState::Drain,
            _ => AdminState::Maint,
        }
    }

    pub fn oper(&self) -> OperState {
        match self.oper.load(Ordering::Relaxed) {
            0 => OperState::Up,
            1 => OperState::Down,
            _ => OperState::Stopping,
        }
    }

    /// The live weight (what `set weight` changes).
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// Whether the balancer may choose this server for a new request.
    pub fn usable(&self) -> bool {
        self.admin() == AdminState::Ready
            && self.oper() == OperState::Up
            && self.weight() > 0
            && !self.unresolved()
    }

    /// Out of service because its name does not resolve (`MAINT (resolution)`).
    pub fn unresolved(&self) -> bool {
        self.unresolved.load(Ordering::Relaxed)
    }

    /// The name the server's address follows, if any.
    pub fn fqdn(&self) -> Option<String> {
        self.fqdn.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `set server ... fqdn`: the name the server's address follows from now on.
    pub fn set_fqdn(&self, name: String) {
        *self.fqdn.lock().unwrap_or_else(|e| e.into_inner()) = Some(name);
    }

    /// The weight statistics and `send-state` report, as HAProxy's: the effective one while
    /// usable, else the live one.
    pub fn reported_weight(&self) -> u32 {
        if self.usable() {
            self.effective_weight()
        } else {
            self.weight()
        }
    }

    /// The weight the balancer uses: the live weight while usable (ramping up during
    /// `slowstart`, never below 1), else 0.
    pub fn effective_weight(&self) -> u32 {
        if !self.usable() {
            return 0;
        }
        let w = self.weight();
        let from = self.ramp_from.load(Ordering::Relaxed);
        let Some(ss) = self.slowstart.filter(|_| from != 0) else {
            return w;
        };
        let elapsed = clock_ns().saturating_sub(from);
        let total = ss.as_nanos() as u64;
        if elapsed >= total {
            self.ramp_from.store(0, Ordering::Relaxed);
            return w;
        }
        ((u64::from(w) * elapsed / total) as u32).max(1)
    }

    /// How far a `slowstart` ramp has gone, in whole percent of the ramp's time (at least
    /// 1), as HAProxy reports it (`throttle=N%`); `None` outside a ramp.
    pub fn ramp_percent(&self) -> Option<u64> {
        let from = self.ramp_from.load(Ordering::Relaxed);
        let ss = self.slowstart.filter(|_| from != 0 && self.usable())?;
        let elapsed = clock_ns().saturating_sub(from);
        let total = (ss.as_nanos() as u64).max(1);
        // HAProxy counts whole seconds on both sides.
        let (elapsed_s, total_s) = (elapsed / 1_000_000_000, total.div_ceil(1_000_000_000));
        (elapsed < total).then(|| (100 * elapsed_s / total_s).max(1))
    }

    /// Whether a request would be served now rather than queued.
    pub fn has_room(&self) -> bool {
        self.queue.slots.as_ref().is_none_or(|s| s.has_room())
    }

    /// HAProxy's status for `show stat`: `MAINT`, `DRAIN`, `no check`, `UP`, `DOWN`, `NOLB`,
    /// or a transition (`UP 1/3`: up, one more failure counted of `fall`; `DOWN 1/2`: down,
    /// one success counted of `rise`). `rise`/`fall` come from the server's configuration.
    pub fn status(&self, rise_fall: Option<(u32, u32)>) -> String {
        match self.admin() {
            AdminState::Maint => return "MAINT".into(),
            _ if self.unresolved() => return "MAINT (resolution)".into(),
            AdminState::Drain => return "DRAIN".into(),
            AdminState::Ready => {}
        }
        let (Some(c), Some((rise, fall))) = (&self.check, rise_fall) else {
            // Without a health check, only an agent can have changed the state.
            // (or the CLI, or a tracked server).
            return match (&self.agent, self.oper()) {
                (None, OperState::Up) => "no check".into(),
                (Some(_), OperState::Up) => "UP".into(),
                (_, OperState::Down) => "DOWN".into(),
                (_, OperState::Stopping) => "NOLB".into(),
            };
        };
        let health = c.health.load(Ordering::Relaxed);
        let paused = c.paused.load(Ordering::Relaxed);
        match self.oper() {
            OperState::Stopping => "NOLB".into(),
            // As HAProxy: an up server whose check is disabled (`disable health`).
            OperState::Up if paused => "no check".into(),
            OperState::Up if health < rise + fall - 1 => {
                format!("UP {}/{}", health + 1 - rise, fall)
            }
            OperState::Up => "UP".into(),
            // Down while the health check is fine: the agent said so.
            OperState::Down if health >= rise => "DOWN (agent)".into(),
            OperState::Down if health > 0 => format!("DOWN {health}/{rise}"),
            OperState::Down => "DOWN".into(),
        }
    }

    /// The server's address now.
    pub fn addr(&self) -> SocketAddr {
        *self.addr.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the server to another address: idle connections to the old one are closed,
    /// new connections and checks go to the new one.
    pub fn set_addr(&self, addr: SocketAddr) {
        *self.addr.write().unwrap_or_else(|e| e.into_inner()) = addr;
        self.renew_connections();
    }

    /// `set server ... ssl on|off`: TLS or plain text on the next connections.
    pub fn set_ssl(&self, on: bool) {
        self.plain.store(!on, Ordering::Release);
        self.renew_connections();
    }

    /// The idle connections go, and those in use are not kept once done: the next
    /// requests open connections made the new way.
    fn renew_connections(&self) {
        // Before the eviction: a connection released in between is refused by the pool.
        self.addr_gen.fetch_add(1, Ordering::Release);
        for tid in 0..self.idle.stats.per_thread.len() {
            while self.idle.evict_one(tid).is_some() {}
        }
    }

    /// Total time spent down (`downtime`).
    pub fn downtime(&self) -> Duration {
        self.downtime.total()
    }

    /// Notes a change of state now (`lastchg`).
    pub fn changed(&self) {
        *self.last_change.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

/// The last invalid request a frontend received, or the last invalid response a backend's
/// server sent (`show errors`).
#[derive(Debug, Clone)]
pub struct CapturedError {
    pub when: std::time::SystemTime,
    /// The client whose request or response it was (HAProxy's `src`).
    pub peer: SocketAddr,
    /// The server that sent an invalid response.
    pub server: Option<(u32, String)>,
    /// The proxy at the other end: a response's frontend (id, name).
    pub other: Option<(u32, String)>,
    /// Where the head stops following HTTP/1.x's grammar.
    pub at: usize,
    /// The head as received (up to one buffer).
    pub bytes: Vec<u8>,
    /// Which capture of this proxy it is (from 0).
    pub event: u64,
}

/// A proxy's capture of its last protocol error.
#[derive(Debug, Default)]
pub struct ErrorCapture {
    last: Mutex<Option<CapturedError>>,
    events: AtomicU64,
}

impl ErrorCapture {
    /// Keeps `e` as the last error (errors are rare: the lock is taken only then).
    pub fn keep(&self, mut e: CapturedError) {
        e.event = self.events.fetch_add(1, Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    pub fn last(&self) -> Option<CapturedError> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
}

/// Time spent down: the closed stretches, and since when it is down now.
#[derive(Debug, Default)]
pub struct Downtime(Mutex<(Duration, Option<Instant>)>);

impl Downtime {
    /// Notes whether it is down now; says whether that changed.
    pub fn note(&self, down: bool) -> bool {
        let mut d = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match (down, d.1) {
            (true, None) => d.1 = Some(Instant::now()),
            (false, Some(since)) => {
                d.0 += since.elapsed();
                d.1 = None;
            }
            _ => return false,
        }
        true
    }

    pub fn total(&self) -> Duration {
        let d = self.0.lock().unwrap_or_else(|e| e.into_inner());
        d.0 + d.1.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

/// The balancer's live view of a backend. The algorithms (`crate::balance`) fill and read
/// it; it lives here so that it survives while servers change state.
#[derive(Debug, Default)]
pub struct LbState {
    /// Shared cursor of the round-robin and rotation walks.
    pub cursor: AtomicUsize,
    /// Bumped by every change of a server's usable weight.
    pub generation: AtomicU64,
    /// The dynamic weighted schedule and the generation it was built for.
    pub schedule: RwLock<Schedule>,
    /// The static map of `static-rr` (configured weights).
    pub static_map: OnceLock<Box<[usize]>>,
    /// Until when ([`clock_ns`]) a server's weight is ramping up: the dynamic schedule is
    /// rebuilt every 100 ms until then.
    pub ramp_until: AtomicU64,
    /// Open [`LbBatch`]es, and whether a change was made while one was.
    batches: AtomicU32,
    pending: AtomicBool,
}

impl LbState {
    /// Publishes a change of the servers' usable weights: the next pick of every worker
    /// sees a new schedule; while a batch is open, once the last one closes.
    pub fn changed(&self) {
        if self.batches.load(Ordering::SeqCst) == 0 {
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        self.pending.store(true, Ordering::SeqCst);
        // The last batch may have closed meanwhile, before it could see the change.
        if self.batches.load(Ordering::SeqCst) == 0 && self.pending.swap(false, Ordering::SeqCst) {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Holds back the changes made until it is dropped, then publishes them as one: an
    /// answer that moves a thousand servers makes each worker rebuild its schedule once.
    /// (The balancer skips a server that is no longer usable whatever its schedule says.)
    pub fn batch(&self) -> LbBatch<'_> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        LbBatch(self)
    }
}

/// Changes to a backend's servers published together when it is dropped
/// ([`LbState::batch`]).
pub struct LbBatch<'a>(&'a LbState);

impl Drop for LbBatch<'_> {
    fn drop(&mut self) {
        let lb = self.0;
        if lb.batches.fetch_sub(1, Ordering::SeqCst) == 1
            && lb.pending.swap(false, Ordering::SeqCst)
        {
            lb.generation.fetch_add(1, Ordering::Release);
        }
    }
}

/// One worker's copies of its backends' dynamic schedules: while a schedule is unchanged,
/// a pick reads no cache line that other workers write (only the balancing generation).
#[derive(Debug, Default)]
pub struct LbCache(pub RefCell<Vec<Option<Schedule>>>);

/// What the balancer walks or looks up, with the balancing generation it was built for.
pub type Schedule = (u64, Arc<LbTable>);

/// Server indices in the order a walk visits them (a weighted schedule, HAProxy's weight map
/// for `hash-type map-based`, or the points of a consistent-hashing ring in key order), and
/// for a ring the point keys, ascending.
#[derive(Debug, Default)]
pub struct LbTable {
    pub servers: Box<[usize]>,
    pub keys: Box<[u32]>,
}

/// A backend's live state.
#[derive(Debug)]
pub struct BackendState {
    pub id: u32,
    /// Position in the generation's `backends` (the key of per-worker caches).
    pub index: usize,
    /// Aligned with the configuration's `servers` (appended to before them).
    pub servers: crate::conf::server_list::ServerList<Arc<ServerState>>,
    pub lb: LbState,
    /// Requests in flight on its servers (`queue::InFlight` counts both).
    pub in_flight: AtomicUsize,
    pub counters: PerWorker<ProxyCounters>,
    pub peaks: Peaks,
    /// Times the backend lost its last server (`chkdown`), and when it last changed state.
    pub downs: AtomicU64,
    pub last_change: Mutex<Instant>,
    /// Time spent with no usable server (`downtime`).
    pub downtime: Downtime,
    /// The last invalid response of one of its servers.
    pub errors: ErrorCapture,
}

impl BackendState {
    pub fn new(conf: &Backend, index: usize, workers: usize) -> BackendState {
        BackendState {
            id: conf.id,
            index,
            servers: conf
                .servers
                .iter()
                .map(|s| Arc::new(ServerState::new(s, workers)))
                .collect(),
            lb: LbState {
                generation: AtomicU64::new(1),
                ..LbState::default()
            },
            in_flight: AtomicUsize::new(0),
            counters: PerWorker::new(workers),
            peaks: Peaks::default(),
            downs: AtomicU64::new(0),
            last_change: Mutex::new(Instant::now()),
            downtime: Downtime::default(),
            errors: ErrorCapture::default(),
        }
    }

    /// Sets a server's administrative state; the balancer sees it at its next pick. A
    /// server leaving maintenance ramps up with `slowstart`.
    pub fn set_admin(&self, server: usize, state: AdminState) {
        let s = &self.servers[server];
        let was = s.admin.swap(state as u8, Ordering::Relaxed);
        if was != state as u8 {
            s.configured_maint.store(false, Ordering::Relaxed);
            s.changed();
            if was == AdminState::Maint as u8 && state == AdminState::Ready {
                self.start_ramp(server);
            }
            if state == AdminState::Maint {
                s.queue.closed.notify_waiters();
                if s.shutdown_on_down {
                    s.kill.notify_waiters();
                }
            }
            self.note_servers();
        }
        self.lb.changed();
    }

    /// The servers in service now, (active, backup), as HAProxy's logs count them ("N
    /// active and M backup servers left").
    pub fn usable_counts(&self, be: &Backend) -> (usize, usize) {
        let mut counts = (0, 0);
        for (c, s) in be.servers.iter().zip(self.servers.iter()) {
            match (s.usable(), c.backup) {
                (true, false) => counts.0 += 1,
                (true, true) => counts.1 += 1,
                _ => {}
            }
        }
        counts
    }

    /// Takes a server out of service because its name does not resolve, or brings it back
    /// (`resolvers`); the balancer sees it at its next pick. Whether it changed.
    pub fn set_unresolved(&self, server: usize, on: bool) -> bool {
        let s = &self.servers[server];
        if s.unresolved.swap(on, Ordering::Relaxed) == on {
            return false;
        }
        s.changed();
        if on {
            s.queue.closed.notify_waiters();
        } else {
            self.start_ramp(server);
        }
        self.note_servers();
        self.lb.changed();
        true
    }

    /// Notes whether the backend has a usable server left (its `status`, `chkdown`,
    /// `lastchg`, `downtime`).
    fn note_servers(&self) {
        let down = !self.servers.iter().any(|s| s.usable());
        if self.downtime.note(down) {
            if down {
                self.downs.fetch_add(1, Ordering::Relaxed);
            }
            *self.last_change.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        }
    }

    /// Sets a server's operational state (health checks). A server coming back up ramps
    /// up with `slowstart`.
    pub fn set_oper(&self, server: usize, state: OperState) {
        let s = &self.servers[server];
        let was = s.oper.swap(state as u8, Ordering::Relaxed);
        if was != state as u8 {
            s.changed();
            if was == OperState::Down as u8 && state == OperState::Up {
                self.start_ramp(server);
            }
            if state == OperState::Down {
                s.queue.closed.notify_waiters();
            }
            s.downtime.note(state == OperState::Down);
            self.note_servers();
        }
        self.lb.changed();
    }

    /// Sets a server's live weight (0 to 256).
    pub fn set_weight(&self, server: usize, weight: u32) {
        self.servers[server]
            .weight
            .store(weight.min(256), Ordering::Relaxed);
        self.lb.changed();
    }

    /// Starts a server's `slowstart` ramp: its weight grows from 1 to its full value, and
    /// the dynamic schedule is rebuilt as it does.
    fn start_ramp(&self, server: usize) {
        let s = &self.servers[server];
        let Some(ss) = s.slowstart else {
            return;
        };
        let now = clock_ns();
        s.ramp_from.store(now, Ordering::Relaxed);
        self.lb
            .ramp_until
            .fetch_max(now + ss.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Appends the live state of a server added at run time (`add server`), before its
    /// configuration is (`conf::server_list`'s invariant); its index.
    pub fn add_server(&self, conf: &Server, workers: usize) -> usize {
        let at = self.servers.push(Arc::new(ServerState::new(conf, workers)));
        self.lb.changed();
        at
    }

    /// Deletes a server (`del server`, once it is in maintenance with nothing in flight):
    /// it stays at its index, gone.
    pub fn delete_server(&self, server: usize) {
        let s = &self.servers[server];
        s.gone.store(true, Ordering::Release);
        s.queue.closed.notify_waiters();
        self.lb.changed();
    }

    /// The servers that are not gone, with their configuration (`conf`, this backend's):
    /// (index, configuration, state). What the statistics and the CLI list.
    pub fn live<'a>(
        &'a self,
        conf: &'a Backend,
    ) -> impl Iterator<Item = (usize, &'a Server, &'a Arc<ServerState>)> + 'a {
        conf.servers
            .iter()
            .zip(self.servers.iter())
            .enumerate()
            .filter(|(_, (_, s))| !s.gone())
            .map(|(i, (c, s))| (i, c, s))
    }

    /// Requests in flight on all servers.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The weight the balancer shares out: the usable active servers' effective weights,
    /// or the backups' when only they are left (`conf` is this backend's configuration).
    pub fn usable_weight(&self, conf: &Backend) -> u64 {
        let weight = |backup: bool| -> u64 {
            conf.servers
                .iter()
                .zip(self.servers.iter())
                .filter(|(c, s)| c.backup == backup && s.usable())
                .map(|(_, s)| u64::from(s.effective_weight()))
                .sum()
        };
        match weight(false) {
            0 => weight(true),
            active => active,
        }
    }
}

/// A frontend's live state.
#[derive(Debug)]
pub struct FrontendState {
    pub id: u32,
    /// Client connections open on this frontend (`%fc`, `scur`).
    pub conns: AtomicUsize,
    /// Those of them that speak HTTP/2 (`h2_open_connections`).
    pub h2_conns: AtomicUsize,
    pub counters: PerWorker<ProxyCounters>,
    pub peaks: Peaks,
    /// The last invalid request.
    pub errors: ErrorCapture,
    /// One per listener (`bind` address), in order.
    pub listeners: Box<[ListenerState]>,
    /// `disable frontend`: its listening sockets are suspended (new connections refused)
    /// until `enable frontend`.
    pub paused: std::sync::atomic::AtomicBool,
    /// Lines logged by a format that shows `%lc` (only such formats count).
    pub log_lines: std::sync::atomic::AtomicU64,
}

/// What a listener counts (`option socket-stats` shows it).
#[derive(Debug)]
pub struct ListenerState {
    /// Connections open now, and the most at once.
    pub conns: AtomicUsize,
    pub peak: super::counters::Peak,
    /// Sessions, bytes, denied and invalid requests (the same kinds as its frontend's).
    pub counters: PerWorker<ProxyCounters>,
}

/// Each proxy's own stick table (the one its `stick-table` line declares, named after it),
/// found once per generation rather than by name at every request.
#[derive(Debug, Default)]
pub struct OwnTables {
    pub frontends: Box<[Option<usize>]>,
    pub backends: Box<[Option<usize>]>,
}

impl OwnTables {
    fn of(config: &Config) -> OwnTables {
        let find = |name: &str| config.tables.iter().position(|t| t.name == name);
        OwnTables {
            frontends: config.frontends.iter().map(|f| find(&f.name)).collect(),
            backends: config.backends.iter().map(|b| find(&b.name)).collect(),
        }
    }
}

/// The live state of every proxy of the current generation.
#[derive(Debug)]
pub struct Runtime {
    /// Aligned with `Config::frontends`.
    pub frontends: Box<[Arc<FrontendState>]>,
    /// Aligned with `Config::backends`.
    pub backends: Box<[Arc<BackendState>]>,
    /// Aligned with `Config::tables`.
    pub tables: Box<[Arc<crate::stick::Table>]>,
    /// Each frontend's and backend's own table (named after it), by index into `tables`.
    pub own_tables: OwnTables,
    /// Aligned with `Config::caches`.
    pub caches: Box<[Arc<crate::cache::Store>]>,
}

impl Runtime {
    pub fn new(config: &Config) -> Runtime {
        let workers = config.global.nbthread();
        Runtime {
            frontends: config
                .frontends
                .iter()
                .map(|f| Arc::new(new_frontend(f, workers)))
                .collect(),
            backends: config
                .backends
                .iter()
                .enumerate()
                .map(|(i, b)| Arc::new(BackendState::new(b, i, workers)))
                .collect(),
            tables: config
                .tables
                .iter()
                .map(|t| Arc::new(crate::stick::Table::new(t)))
                .collect(),
            caches: new_caches(config),
            own_tables: OwnTables::of(config),
        }
    }

    /// The stick table named `name` (a proxy's name).
    pub fn table(&self, name: &str) -> Option<&Arc<crate::stick::Table>> {
        self.tables.iter().find(|t| t.conf.name == name)
    }

    /// The state for a new generation `new`, keeping what `self` (serving `old`) holds for
    /// the proxies and servers that are still there: matched by id and name, then by name
    /// alone (an id the loader assigned shifts when a section is added before it). A server
    /// keeps its state (counters, admin state, weight, idle connections, queue) only when its
    /// address, `maxconn` and pool settings are unchanged and the worker count is the same;
    /// otherwise it starts afresh. A backend's own counters start afresh.
    pub fn next(&self, old: &Config, new: &Config) -> Runtime {
        let workers = new.global.nbthread();
        let same_workers = workers == old.global.nbthread();
        let frontends = new
            .frontends
            .iter()
            .map(|f| {
                match_index(
                    &old.frontends,
                    |o| o.id == f.id && o.name == f.name,
                    |o| o.name == f.name,
                )
                .filter(|_| same_workers)
                .map(|i| self.frontends[i].clone())
                .unwrap_or_else(|| Arc::new(new_frontend(f, workers)))
            })
            .collect();
        let backends = new
            .backends
            .iter()
            .enumerate()
            .map(|(index, b)| {
                let Some(i) = match_index(
                    &old.backends,
                    |o| o.id == b.id && o.name == b.name,
                    |o| o.name == b.name,
                )
                .filter(|_| same_workers) else {
                    return Arc::new(BackendState::new(b, index, workers));
                };
                let (old_be, old_state) = (&old.backends[i], &self.backends[i]);
                let mut state = BackendState::new(b, index, workers);
                for (j, s) in b.servers.iter().enumerate() {
                    let kept = match_index(
                        old_be.servers.iter(),
                        |o| o.id == s.id && o.name == s.name,
                        |o| o.name == s.name,
                    )
                    .filter(|&k| {
                        let o = &old_be.servers[k];
                        o.addr == s.addr && o.maxconn == s.maxconn && o.pool == s.pool
                    });
                    if let Some(k) = kept {
                        state.servers[j] = old_state.servers[k].clone();
                    }
                }
                // What the servers kept have in flight is the backend's too.
                let kept_in_flight = state
                    .servers
                    .iter()
                    .map(|s| s.in_flight.load(Ordering::Relaxed));
                state
                    .in_flight
                    .store(kept_in_flight.sum(), Ordering::Relaxed);
                Arc::new(state)
            })
            .collect();
        // A table keeps its entries when its definition is unchanged.
        let tables = new
            .tables
            .iter()
            .map(|t| {
                self.tables
                    .iter()
                    .find(|o| o.conf == *t)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(crate::stick::Table::new(t)))
            })
            .collect();
        Runtime {
            frontends,
            backends,
            tables,
            own_tables: OwnTables::of(new),
            // A cache keeps its objects when its definition is unchanged.
            caches: new
                .caches
                .iter()
                .map(|c| {
                    self.caches
                        .iter()
                        .find(|o| o.conf == *c)
                        .cloned()
                        .unwrap_or_else(|| Arc::new(crate::cache::Store::new(c.clone())))
                })
                .collect(),
        }
    }
}

fn new_caches(config: &Config) -> Box<[Arc<crate::cache::Store>]> {
    config
        .caches
        .iter()
        .map(|c| Arc::new(crate::cache::Store::new(c.clone())))
        .collect()
}

fn new_frontend(f: &Frontend, workers: usize) -> FrontendState {
    FrontendState {
        id: f.id,
        conns: AtomicUsize::new(0),
        h2_conns: AtomicUsize::new(0),
        counters: PerWorker::new(workers),
        peaks: Peaks::default(),
        errors: ErrorCapture::default(),
        paused: Default::default(),
        log_lines: Default::default(),
        listeners: f
            .listen
            .binds
            .iter()
            .map(|_| ListenerState {
                conns: AtomicUsize::new(0),
                peak: Default::default(),
                counters: PerWorker::new(workers),
            })
            .collect(),
    }
}

/// The index of the first item matching by id, else the first matching by name.
fn match_index<'a, T: 'a, I: IntoIterator<Item = &'a T> + Clone>(
    items: I,
    by_id: impl Fn(&T) -> bool,
    by_name: impl Fn(&T) -> bool,
) -> Option<usize> {
    items
        .clone()
        .into_iter()
        .position(by_id)
        .or_else(|| items.into_iter().position(by_name))
}
