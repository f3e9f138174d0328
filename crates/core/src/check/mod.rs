//! Health checks spread over workers (capability 2): a check is a task on one worker; on each
//! wake-up from sleep it may move to a less loaded worker, then it runs (within the worker's
//! check slots), updates its server's health as HAProxy's state machine does, and sleeps
//! until its next interval.
//!
//! Invariants:
//! - There is one task per health check and one per agent check, each on one worker at a
//!   time; a server's `running` flags guard against a second run at once all the same.
//! - A check moves only on a wake-up from sleep, to a random other worker whose load is at
//!   most half of its own and that holds less than twice its fair share of checks; a check
//!   that has just moved does not move again before it runs (no ping-pong). Moving goes
//!   through the target's inbox (the worker layer does it).
//! - No global queue or timer: each worker sleeps until its own next event.
//! - A worker wakes its checks on its own grid (1/32 of the smallest interval, see
//!   [`grid`]): checks falling due in one step share one wake-up, and when the worker wakes
//!   for anything else less than a step before its next tick, that tick's checks start
//!   then ([`on_wake`]). Rounding to the nearest tick and starting early, a check is never
//!   more than one and a half steps early or half a step late.
//!
//! The state machine (HAProxy 2.6): `health` runs from 0 to `rise + fall - 1`; a server is up
//! from `rise` on. A success adds one, jumping to the top once `rise` is reached; a failure
//! removes one, dropping to 0 (down) once below `rise`. A checked server starts up at health
//! `rise`, so the first failed check takes it down. The interval is `inter` at the top,
//! `downinter` at 0, `fastinter` in between.

mod external;
mod keywords;
mod probe;
mod spop;

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub use self::keywords::{
    external_lines, GLOBAL_KEYWORDS, KEYWORDS, OPTION_KEYWORDS, SERVER_OPTIONS,
};
use self::probe::{describe, probe, read_until};
pub use crate::conf::check::*;
use crate::conf::{Backend, Config};
use crate::log::Severity;
use crate::runtime::{AdminState, CheckResult, OperState, Process, Worker};
use crate::transport::{Conn, Socket};

/// A check between two runs: which server, when it is due, and whether it has just moved.
/// Plain data, so that it can cross to another worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckTask {
    pub backend: usize,
    pub server: usize,
    /// The server's agent check rather than its health check.
    pub agent: bool,
    pub due: Instant,
    /// It arrived from another worker: it runs here before it may move again.
    pub moved: bool,
}

/// Every check of a configuration with its first due time: check k of N first fires at k/N
/// of the smallest interval (capped by `max-spread-checks`), so that they do not all fire
/// at once.
pub fn initial_tasks(config: &Config, now: Instant) -> Vec<CheckTask> {
    // (backend, server, agent, interval) of every check.
    let mut checked: Vec<(usize, usize, bool, Duration)> = Vec::new();
    for (b, be) in config.backends.iter().enumerate() {
        for (s, srv) in be.servers.iter().enumerate() {
            if let Some(c) = &srv.check {
                checked.push((b, s, false, c.inter));
            }
            if let Some(a) = &srv.agent {
                let inter = a
                    .inter
                    .or(srv.check.as_ref().map(|c| c.inter))
                    .unwrap_or(CheckOpts::default().inter);
                checked.push((b, s, true, inter));
            }
        }
    }
    let n = checked.len() as u32;
    let Some(min) = checked.iter().map(|c| c.3).min() else {
        return Vec::new();
    };
    let window = config
        .global
        .check
        .max_spread
        .map_or(min, |cap| min.min(cap));
    checked
        .iter()
        .enumerate()
        .map(|(k, &(backend, server, agent, _))| CheckTask {
            backend,
            server,
            agent,
            due: now + window * k as u32 / n,
            moved: false,
        })
        .collect()
}

/// What the state machine says after a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    None,
    Up,
    Down,
}

/// Applies one result to `health` (HAProxy's counter, see the module docs).
pub fn next_health(health: u32, passed: bool, rise: u32, fall: u32) -> (u32, Transition) {
    let top = rise + fall - 1;
    if passed {
        if health >= top {
            return (top, Transition::None);
        }
        let h = health + 1;
        if h >= rise {
            (
                top,
                if health < rise {
                    Transition::Up
                } else {
                    Transition::None
                },
            )
        } else {
            (h, Transition::None)
        }
    } else {
        if health == 0 {
            return (0, Transition::None);
        }
        let h = health - 1;
        if h < rise {
            (
                0,
                if health >= rise {
                    Transition::Down
                } else {
                    Transition::None
                },
            )
        } else {
            (h, Transition::None)
        }
    }
}

/// The interval before the next check at this health.
pub fn interval_for(c: &CheckOpts, health: u32) -> Duration {
    if health >= c.rise + c.fall - 1 {
        c.inter
    } else if health == 0 {
        c.downinter.unwrap_or(c.inter)
    } else {
        c.fastinter.unwrap_or(c.inter)
    }
}

/// Adds `spread-checks` jitter (+/- `pct` percent) to an interval.
fn jitter(d: Duration, pct: u8) -> Duration {
    if pct == 0 {
        return d;
    }
    let span = d.as_secs_f64() * f64::from(pct) / 100.0;
    let off = (fastrand::f64() * 2.0 - 1.0) * span;
    Duration::from_secs_f64((d.as_secs_f64() + off).max(0.001))
}

/// The spacing of check wake-ups: 1/32 of the smallest interval of any check, within
/// 1-50 ms. Each worker wakes its checks on its own grid of this step (the workers' grids
/// offset from one another), so the checks falling due within one step share one wake-up
/// instead of waking the worker one by one; a check is late by less than 1/32 of its
/// interval, which `spread-checks` jitter usually exceeds.
fn grid(w: &Worker) -> Duration {
    *w.checks.grid.get_or_init(|| {
        let smallest = w
            .config()
            .backends
            .iter()
            .flat_map(|be| &be.servers)
            .flat_map(|s| {
                let c = s
                    .check
                    .iter()
                    .flat_map(|c| [Some(c.inter), c.fastinter, c.downinter]);
                c.chain(s.agent.iter().map(|a| a.inter)).flatten()
            })
            .min()
            .unwrap_or(CheckOpts::default().inter);
        (smallest / 32).clamp(Duration::from_millis(1), Duration::from_millis(50))
    })
}

/// Called each time the worker wakes up, for whatever reason: when its next check tick is
/// less than one grid step away, that tick's checks start now, so that a worker awake for
/// traffic does not wake again for them (a check may thus run up to one step early).
pub fn on_wake(w: &Worker, now: Instant) {
    let ticks = w.checks.ticks.borrow();
    if let Some((&tick, early)) = ticks.first_key_value() {
        if tick <= now + grid(w) {
            early.notify_waiters();
        }
    }
}

/// The tick of this worker's grid nearest to `t` (so that intervals keep their length on
/// average).
fn tick_near(w: &Worker, t: Instant) -> Instant {
    let step = grid(w);
    let workers = w.process.threads.len().max(1) as u32;
    grid_tick(w.process.started + step * w.tid as u32 / workers, step, t)
}

/// The point of the grid `origin + k * step` (k >= 0) nearest to `t`.
fn grid_tick(origin: Instant, step: Duration, t: Instant) -> Instant {
    let since = t.saturating_duration_since(origin).as_nanos();
    let steps = (since + step.as_nanos() / 2) / step.as_nanos();
    origin + step * steps as u32
}

/// The worker a check should move to: one random other worker, if its load is at most half
/// of this one's (and this one has at least two things to run). `batchmates` are the checks
/// that woke on the same tick and run already: they are not counted against this one, or
/// every shared wake-up would scatter its checks over the other workers.
fn better_home(w: &Worker, batchmates: usize) -> Option<usize> {
    let threads = &w.process.threads;
    let n = threads.len();
    if n < 2 {
        return None;
    }
    let me = w.ctx();
    let mine = me.load().saturating_sub(batchmates);
    let t = (w.tid + 1 + fastrand::usize(..n - 1)) % n;
    let other = &threads[t];
    // The load rule moves checks off a busy worker; the cap keeps them from piling onto the
    // quietest one (sleeping checks are not in the load figure): a worker takes more only
    // while it holds less than twice its fair share.
    let homed = |c: &crate::runtime::ThreadCtx| c.checks_homed.load(Ordering::Relaxed);
    let total: usize = threads.iter().map(homed).sum();
    let cap = 2 * total.div_ceil(n);
    (mine >= 2 && other.load() * 2 <= mine && homed(other) < cap).then_some(t)
}

/// Counts a check task as living on its worker for as long as it runs there.
struct Homed<'a>(&'a crate::runtime::ThreadCtx);

impl<'a> Homed<'a> {
    fn new(w: &'a Worker) -> Self {
        w.ctx().checks_homed.fetch_add(1, Ordering::Relaxed);
        Homed(w.ctx())
    }
}

impl Drop for Homed<'_> {
    fn drop(&mut self) {
        self.0.checks_homed.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs a check task on this worker until it should move: then returns the target worker
/// and the task, for the caller to send through that worker's inbox.
pub async fn run(w: Rc<Worker>, mut task: CheckTask) -> (usize, CheckTask) {
    if task.moved {
        w.ctx().counters.checks_moved.bump();
    }
    let _homed = Homed::new(&w);
    loop {
        let checked = &w.state().backends[task.backend].servers[task.server];
        if checked.gone() {
            // `del server`: the check ends with its server (its task is dropped).
            return (w.tid, task);
        }
        let wake = checked
            .check
            .as_ref()
            .filter(|_| !task.agent)
            .map(|c| &c.wake);
        let tick = tick_near(&w, task.due);
        let early = w.checks.ticks.borrow_mut().entry(tick).or_default().clone();
        let sleep = tokio::time::sleep_until(tick.into());
        match wake {
            // Traffic errors (`observe`, `on-error`) may ask for a check before it is due.
            Some(wake) => {
                tokio::select! {
                    _ = sleep => {}
                    _ = early.notified() => {}
                    _ = wake.notified() => {}
                }
            }
            None => {
                tokio::select! {
                    _ = sleep => {}
                    _ = early.notified() => {}
                }
            }
        }
        w.checks.ticks.borrow_mut().remove(&tick);
        // Started early (the worker was awake anyway): the next interval counts from the
        // tick, so that checks keep their rate.
        let early_by = tick.saturating_duration_since(Instant::now());
        let ctx = w.ctx();
        ctx.checks_awake.fetch_add(1, Ordering::Relaxed);
        let batch = &w.checks.batch;
        let batchmates = match batch.get() {
            (t, n) if t == tick => n,
            _ => 0,
        };
        if !task.moved {
            if let Some(to) = better_home(&w, batchmates) {
                ctx.checks_awake.fetch_sub(1, Ordering::Relaxed);
                task.moved = true;
                return (to, task);
            }
        }
        task.moved = false;
        batch.set((tick, batchmates + 1));
        let slot = match w.checks.slots.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                ctx.counters.checks_queued.bump();
                w.checks.slots.acquire().await.expect("never closed")
            }
        };
        let next = if task.agent {
            run_agent(&w, task.backend, task.server).await
        } else {
            run_once(&w, task.backend, task.server).await
        };
        drop(slot);
        let (t, n) = batch.get();
        if t == tick {
            batch.set((t, n.saturating_sub(1)));
        }
        ctx.checks_awake.fetch_sub(1, Ordering::Relaxed);
        let pct = w.config().global.check.spread_pct;
        task.due = Instant::now() + early_by + jitter(next, pct);
    }
}

/// The `X-Haproxy-Server-State` value, as HAProxy 2.6 writes it: the state with the
/// health counter's progress (`UP 2/3` going down, `DOWN 1/2` going up, `NOLB` draining),
/// the address, names, node, weights, sessions and queue.
fn server_state_header(w: &Worker, backend: usize, server: usize) -> String {
    let be = &w.config().backends[backend];
    let bst = &w.state().backends[backend];
    let (srv, st) = (&be.servers[server], &bst.servers[server]);
    let opts = srv.check.as_ref().expect("checked server");
    let check = st.check.as_ref().expect("checked server");
    let (rise, fall) = (opts.rise, opts.fall);
    let health = check.health.load(Ordering::Relaxed);
    let state = match st.oper() {
        _ if check.paused.load(Ordering::Relaxed) => "no check".to_string(),
        OperState::Down if health == 0 => "DOWN".to_string(),
        OperState::Down => format!("DOWN {health}/{rise}"),
        oper => {
            let word = if oper == OperState::Stopping {
                "NOLB"
            } else {
                "UP"
            };
            if health == rise + fall - 1 {
                word.to_string()
            } else {
                format!("{word} {}/{fall}", (health + 1).saturating_sub(rise))
            }
        }
    };
    // A unix socket server has no address: HAProxy writes `unix` and no port.
    let (address, port) = match srv.unix {
        Some(_) => ("unix".to_string(), String::new()),
        None => (st.addr().ip().to_string(), st.addr().port().to_string()),
    };
    let throttle = st
        .ramp_percent()
        .map(|n| format!("; throttle={n}%"))
        .unwrap_or_default();
    format!(
        "{state}; address={address}; port={port}; name={}/{}; node={}; weight={}/{}; scur={}/{}; qcur={}{throttle}",
        be.name,
        srv.name,
        w.config().global.node_name(),
        st.reported_weight(),
        bst.usable_weight(be),
        st.in_flight.load(Ordering::Relaxed),
        bst.in_flight(),
        st.queue.waiting.load(Ordering::Relaxed),
    )
}

/// Runs one health check of a server and applies its result. Returns the interval before
/// the next one.
async fn run_once(w: &Rc<Worker>, backend: usize, server: usize) -> Duration {
    let be = &w.config().backends[backend];
    let srv = &be.servers[server];
    let opts = srv.check.as_ref().expect("checked server");
    let st = &w.state().backends[backend].servers[server];
    let check = st.check.as_ref().expect("checked server");
    if check.paused.load(Ordering::Relaxed) || st.admin() == crate::runtime::AdminState::Maint {
        // `disable health`: the state stays as it is until checks are enabled again.
        // Maintenance pauses the checks too, as in HAProxy: a server in it is not
        // reported down on top.
        return opts.inter;
    }
    if check.running.swap(true, Ordering::Acquire) {
        // Cannot happen with one task per server; never run two at once regardless.
        return opts.inter;
    }
    let state = be
        .check
        .send_state
        .then(|| server_state_header(w, backend, server));
    let result = probe(&w.process, be, srv, st.addr(), state).await;
    check.running.store(false, Ordering::Release);
    w.ctx().counters.checks_run.bump();
    if !result.passed {
        check.failed.fetch_add(1, Ordering::Relaxed);
    }
    let before = check.health.load(Ordering::Relaxed);
    let (health, _) = next_health(before, result.passed, opts.rise, opts.fall);
    check.health.store(health, Ordering::Relaxed);
    let transition = settle(&w.process, backend, server, Some(result.stopping));
    // As HAProxy's `option log-health-checks`: a result is logged when its status or the
    // server's health changed.
    let mut last = check.last.lock().unwrap_or_else(|e| e.into_inner());
    let changed = last.as_ref().is_none_or(|l| l.status != result.status) || before != health;
    report(
        &w.process,
        backend,
        server,
        &result,
        (health, changed),
        transition,
    );
    *last = Some(result);
    interval_for(opts, health)
}

/// Sets the server's operational state from its checks: up while its health check (if
/// any) is at `rise` or above and its agent (if any) has not said down; up but taking no
/// new traffic (NOLB) while `stopping` (`http-check disable-on-404`; `None` keeps it as
/// it is).
pub fn settle(p: &Process, backend: usize, server: usize, stopping: Option<bool>) -> Transition {
    let conf = &p.config.backends[backend].servers[server];
    let state = &p.state.backends[backend];
    let st = &state.servers[server];
    let health_up = match (&conf.check, &st.check) {
        (Some(c), Some(cs)) => cs.health.load(Ordering::Relaxed) >= c.rise,
        _ => true,
    };
    let agent_up = st
        .agent
        .as_ref()
        .is_none_or(|a| a.up.load(Ordering::Relaxed));
    let now = st.oper();
    let target = if !(health_up && agent_up) {
        OperState::Down
    } else if stopping.unwrap_or(now == OperState::Stopping) {
        OperState::Stopping
    } else {
        OperState::Up
    };
    if target == now {
        return Transition::None;
    }
    state.set_oper(server, target);
    let opts = conf.check.as_ref();
    match (now, target) {
        (OperState::Down, _) => {
            if opts.is_some_and(|c| c.shutdown_backups_on_up) && !conf.backup {
                // `on-marked-up shutdown-backup-sessions`: traffic leaves the backups.
                for (c, s) in p.config.backends[backend]
                    .servers
                    .iter()
                    .zip(state.servers.iter())
                {
                    if c.backup {
                        s.kill.notify_waiters();
                    }
                }
            }
            propagate(p, backend, server, target);
            Transition::Up
        }
        (_, OperState::Down) => {
            if let Some(cs) = &st.check {
                cs.downs.fetch_add(1, Ordering::Relaxed);
            }
            if conf.shutdown_on_down {
                st.kill.notify_waiters();
            }
            propagate(p, backend, server, target);
            Transition::Down
        }
        _ => {
            propagate(p, backend, server, target);
            Transition::None
        }
    }
}

/// Whether a server's connections may be ended by a state change (`on-marked-down
/// shutdown-sessions` on it, or `on-marked-up shutdown-backup-sessions` on an active server
/// of its backend when it is a backup): only those transactions wait on its notification.
pub fn killable(be: &Backend, server: usize) -> bool {
    let s = &be.servers[server];
    s.shutdown_on_down
        || s.backup
            && be
                .servers
                .iter()
                .any(|o| !o.backup && o.check.as_ref().is_some_and(|c| c.shutdown_backups_on_up))
}

/// An operator's forced health (`set server B/S health`, the stats page): the check
/// counter jumps to the matching end, as HAProxy does.
pub fn force_health(p: &Process, b: usize, s: usize, state: OperState) {
    let conf = &p.config.backends[b].servers[s];
    let st = &p.state.backends[b];
    if let (Some(c), Some(cs)) = (&conf.check, &st.servers[s].check) {
        let health = match state {
            OperState::Down => 0,
            _ => c.rise + c.fall - 1,
        };
        cs.health.store(health, Ordering::Relaxed);
    }
    st.set_oper(s, state);
}

/// An operator's verdict for a server's agent (`set server B/S agent`); false when the
/// server has no agent.
pub fn force_agent(p: &Process, b: usize, s: usize, up: bool) -> bool {
    let Some(agent) = &p.state.backends[b].servers[s].agent else {
        return false;
    };
    agent.up.store(up, Ordering::Relaxed);
    settle(p, b, s, None);
    true
}

/// Pauses or resumes a server's health check (or agent): its state stays as it is
/// meanwhile. False when the server has no such check.
pub fn pause(p: &Process, b: usize, s: usize, agent: bool, paused: bool) -> bool {
    let st = &p.state.backends[b].servers[s];
    let flag = if agent {
        st.agent.as_ref().map(|a| &a.paused)
    } else {
        st.check.as_ref().map(|c| &c.paused)
    };
    flag.map(|f| f.store(paused, Ordering::Relaxed)).is_some()
}

/// Servers that `track` this one take its operational state.
fn propagate(p: &Process, backend: usize, server: usize, state: OperState) {
    for (b, be) in p.config.backends.iter().enumerate() {
        for (s, srv) in be.servers.iter().enumerate() {
            if srv.track == Some((backend, server)) && (b, s) != (backend, server) {
                let st = &p.state.backends[b];
                if st.servers[s].oper() != state {
                    st.set_oper(s, state);
                    propagate(p, b, s, state);
                }
            }
        }
    }
}

/// What the data path saw of a server, for `observe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Connected,
    ConnectFailed,
    /// A response head with this status.
    Response(u16),
    /// An invalid or cut-short response.
    BadResponse,
}

/// Counts what traffic shows of a server with `observe`: after `error-limit` consecutive
/// errors, `on-error` acts (as HAProxy's "Health analyze").
pub fn observe(p: &Process, backend: usize, server: usize, seen: Seen) {
    let conf = &p.config.backends[backend].servers[server];
    let Some((c, mode)) = conf.check.as_ref().and_then(|c| c.observe.map(|m| (c, m))) else {
        return;
    };
    let st = &p.state.backends[backend].servers[server];
    let Some(cs) = &st.check else {
        return;
    };
    let error = match (mode, seen) {
        (_, Seen::ConnectFailed) => Some(true),
        (Observe::Layer4, Seen::Connected) => Some(false),
        (Observe::Layer7, Seen::BadResponse) => Some(true),
        (Observe::Layer7, Seen::Response(s)) => {
            Some((500..600).contains(&s) && s != 501 && s != 505)
        }
        _ => None,
    };
    match error {
        // A success ends the streak; the store is skipped when there is none, so that
        // the line stays shared.
        Some(false) if cs.errors.load(Ordering::Relaxed) != 0 => {
            cs.errors.store(0, Ordering::Relaxed);
        }
        None | Some(false) => {}
        Some(true) => {
            cs.analyze_failures.fetch_add(1, Ordering::Relaxed);
            let n = cs.errors.fetch_add(1, Ordering::Relaxed) + 1;
            if n < c.error_limit {
                return;
            }
            cs.errors.store(0, Ordering::Relaxed);
            let health = cs.health.load(Ordering::Relaxed);
            let next = match c.on_error {
                OnError::Fastinter => health,
                OnError::FailCheck => next_health(health, false, c.rise, c.fall).0,
                OnError::SuddenDeath => health.min(c.rise),
                OnError::MarkDown => 0,
            };
            cs.health.store(next, Ordering::Relaxed);
            let transition = settle(p, backend, server, None);
            let last = match seen {
                Seen::ConnectFailed => "L4 unsuccessful connection",
                Seen::BadResponse => "L7 invalid response",
                _ => "L7 bad status",
            };
            let result = CheckResult {
                passed: false,
                status: "HANA",
                reason: "Health analyze",
                code: None,
                info: Some(format!(
                    "Detected {n} consecutive errors, last one was: {last}"
                )),
                duration_ms: 0,
                stopping: false,
            };
            let changed = health != next;
            report(p, backend, server, &result, (next, changed), transition);
            *cs.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            // Check again soon to confirm, at `fastinter`.
            cs.wake.notify_one();
        }
    }
}

/// Runs one agent check: reads the agent's line and applies its words. An agent that cannot
/// be reached changes nothing. Returns the interval before the next one.
async fn run_agent(w: &Rc<Worker>, backend: usize, server: usize) -> Duration {
    let be = &w.config().backends[backend];
    let srv = &be.servers[server];
    let opts = srv.agent.as_ref().expect("agent-checked server");
    let inter = opts
        .inter
        .or(srv.check.as_ref().map(|c| c.inter))
        .unwrap_or(CheckOpts::default().inter);
    let st = &w.state().backends[backend].servers[server];
    let agent = st.agent.as_ref().expect("agent-checked server");
    if agent.paused.load(Ordering::Relaxed) || agent.running.swap(true, Ordering::Acquire) {
        return inter;
    }
    let mut addr = st.addr();
    if let Some(ip) = opts.addr {
        addr.set_ip(ip);
    }
    if let Some(p) = opts.port {
        addr.set_port(p);
    }
    let started = Instant::now();
    let exchange = async {
        let mut socket = Socket::dial(addr)?;
        match &opts.send {
            Some(send) => socket.write_all(send.as_bytes()).await?,
            None => socket.connected().await?,
        }
        let conn = Conn::from(socket);
        // The agent's answer is one line; then the connection ends with a reset, as
        // every check's does.
        let reply = read_until(&conn, |b| b.contains(&b'\n')).await;
        conn.abort();
        reply
    };
    let got = tokio::time::timeout(inter, exchange).await;
    agent.running.store(false, Ordering::Release);
    w.ctx().counters.checks_run.bump();
    let duration_ms = started.elapsed().as_millis() as u64;
    let result = match got {
        Ok(Ok(reply)) => {
            let line = String::from_utf8_lossy(&reply);
            let line = line.lines().next().unwrap_or("").trim().to_string();
            apply_agent(w, backend, server, &line);
            // The description after `#`, else the whole line, is what logs show.
            let info = line
                .split_once('#')
                .map_or(line.as_str(), |(_, d)| d)
                .trim()
                .to_string();
            let up = agent.up.load(Ordering::Relaxed);
            CheckResult {
                passed: up,
                status: if up { "L7OK" } else { "L7STS" },
                reason: if up {
                    "Layer7 check passed"
                } else {
                    "Layer7 wrong status"
                },
                code: None,
                info: (!info.is_empty()).then_some(info),
                duration_ms,
                stopping: false,
            }
        }
        Ok(Err(e)) => CheckResult {
            passed: false,
            status: "L4CON",
            reason: "Layer4 connection problem",
            code: None,
            info: Some(describe(&e)),
            duration_ms,
            stopping: false,
        },
        Err(_) => CheckResult {
            passed: false,
            status: "L4TOUT",
            reason: "Layer4 timeout",
            code: None,
            info: None,
            duration_ms,
            stopping: false,
        },
    };
    let transition = settle(&w.process, backend, server, None);
    if transition != Transition::None {
        let health = st
            .check
            .as_ref()
            .map_or(0, |c| c.health.load(Ordering::Relaxed));
        report(
            &w.process,
            backend,
            server,
            &result,
            (health, false),
            transition,
        );
    }
    *agent.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
    inter
}

/// Applies an agent's words, as HAProxy does: `up`; `down`, `fail`, `stopped` (down);
/// `ready`, `drain`, `maint` (administrative state); `N%` (weight, of the configured one);
/// anything after `#` is a description.
fn apply_agent(w: &Worker, backend: usize, server: usize, line: &str) {
    let state = &w.state().backends[backend];
    let agent = state.servers[server].agent.as_ref().expect("agent");
    let words = line.split('#').next().unwrap_or("");
    for word in words.split([' ', ',', '\t']).filter(|w| !w.is_empty()) {
        match word.to_ascii_lowercase().as_str() {
            "up" => agent.up.store(true, Ordering::Relaxed),
            "down" | "fail" | "stopped" => agent.up.store(false, Ordering::Relaxed),
            "ready" => set_admin(&w.process, backend, server, AdminState::Ready),
            "drain" => set_admin(&w.process, backend, server, AdminState::Drain),
            "maint" => set_admin(&w.process, backend, server, AdminState::Maint),
            pct if pct.ends_with('%') => {
                if let Ok(p) = pct.trim_end_matches('%').parse::<u32>() {
                    let initial = w.config().backends[backend].servers[server].weight;
                    state.set_weight(server, initial * p / 100);
                }
            }
            _ => {}
        }
    }
}

/// Sends the state change (and, with `option log-health-checks`, a health check's result
/// when `changed`) to the backend's log targets in HAProxy's wording. The reason goes with
/// the state change only when no result line gave it.
fn report(
    p: &Process,
    backend: usize,
    server: usize,
    r: &CheckResult,
    (health, changed): (u32, bool),
    transition: Transition,
) {
    let be = &p.config.backends[backend];
    let loggers = &p.backend_loggers[backend];
    if loggers.is_empty() && be.email.is_none() {
        return;
    }
    let srv = &be.servers[server];
    let name = format!("{}/{}", be.name, srv.name);
    let mut why = format!("reason: {}", r.reason);
    if let Some(code) = r.code {
        why.push_str(&format!(", code: {code}"));
    }
    if let Some(info) = &r.info {
        why.push_str(&format!(", info: \"{info}\""));
    }
    let duration = format!("check duration: {}ms", r.duration_ms);
    let send = |sev, msg: &str| {
        for l in loggers {
            l.send_at(sev, msg);
        }
    };
    let result_line = be.check.log_all && changed;
    if let (true, Some(opts)) = (result_line, &srv.check) {
        let up = health >= opts.rise;
        let status = if up {
            format!("{}/{} UP", health + 1 - opts.rise, opts.fall)
        } else {
            format!("{health}/{} DOWN", opts.rise)
        };
        let verb = match (r.passed, r.status) {
            (true, "L7OKC") => "conditionally succeeded",
            (true, _) => "succeeded",
            (false, _) => "failed",
        };
        send(
            Severity::Notice,
            &format!("Health check for server {name} {verb}, {why}, {duration}, status: {status}."),
        );
    }
    let because = if result_line {
        String::new()
    } else {
        format!(", {why}, {duration}")
    };
    match transition {
        Transition::None => {}
        Transition::Up => log_state_change(p, (backend, server), true, &because, Severity::Alert),
        Transition::Down => {
            log_state_change(p, (backend, server), false, &because, Severity::Alert)
        }
    }
}

/// An operator's change of a server's administrative state (CLI, statistics page, agent),
/// applied and logged in HAProxy's words.
pub fn set_admin(p: &Process, backend: usize, server: usize, to: AdminState) {
    let st = &p.state.backends[backend];
    let was = st.servers[server].admin();
    st.set_admin(server, to);
    if was == to {
        return;
    }
    if was == AdminState::Maint {
        leave_maintenance(p, backend, server);
    }
    let be = &p.config.backends[backend];
    let name = format!("{}/{}", be.name, be.servers[server].name);
    let (active, backup) = st.usable_counts(be);
    let sst = &st.servers[server];
    // As HAProxy: a server that leaves service for maintenance is an alert (a notice when
    // it was draining or already down), and a backend left without servers an emergency.
    let mut severity = Severity::Notice;
    let msg = match (was, to) {
        (_, AdminState::Maint) if sst.oper() == OperState::Down => format!(
            "Server {name} was DOWN and now enters maintenance. {active} active and {backup} backup servers left. {} sessions active, 0 requeued, {} remaining in queue.",
            sst.in_flight.load(Ordering::Relaxed),
            sst.queue.waiting.load(Ordering::Relaxed)
        ),
        (was, AdminState::Maint) => {
            if was != AdminState::Drain {
                severity = Severity::Alert;
            }
            format!(
                "Server {name} is going DOWN for maintenance. {active} active and {backup} backup servers left. {} sessions active, 0 requeued, {} remaining in queue.",
                sst.in_flight.load(Ordering::Relaxed),
                sst.queue.waiting.load(Ordering::Relaxed)
            )
        }
        (_, AdminState::Drain) => format!(
            "Server {name} enters drain state. {active} active and {backup} backup servers online. 0 sessions requeued, 0 total in queue."
        ),
        (AdminState::Maint, AdminState::Ready) if sst.oper() == OperState::Down => {
            format!("Server {name} is DOWN/READY (leaving forced maintenance).")
        }
        (AdminState::Maint, AdminState::Ready) => {
            format!("Server {name} is UP/READY (leaving forced maintenance).")
        }
        (_, AdminState::Ready) => format!("Server {name} is UP (leaving forced drain)."),
    };
    for l in &p.backend_loggers[backend] {
        l.send_at(severity, &msg);
    }
    if to == AdminState::Drain {
        // HAProxy mails a server entering drain (not one entering maintenance).
        crate::mail::alert(p, backend, Severity::Notice, &msg);
    }
    if to == AdminState::Maint && severity == Severity::Alert && active + backup == 0 {
        for l in &p.backend_loggers[backend] {
            l.send_at(
                Severity::Emerg,
                &format!("backend {} has no server available!", be.name),
            );
        }
    }
}

/// A server leaving maintenance comes up as HAProxy's does: a tracking server takes its
/// target's state; any other turns up unless its agent (if asked) says down, its health
/// check (if running) restarting at the lowest up health, "start OK but check at once".
fn leave_maintenance(p: &Process, backend: usize, server: usize) {
    let st = &p.state.backends[backend];
    let (conf, sst) = (
        &p.config.backends[backend].servers[server],
        &st.servers[server],
    );
    if let Some((tb, ts)) = conf.track {
        st.set_oper(server, p.state.backends[tb].servers[ts].oper());
        return;
    }
    if let (Some(c), Some(opts)) = (&sst.check, &conf.check) {
        if !c.paused.load(Ordering::Relaxed) {
            c.health.store(opts.rise, Ordering::Relaxed);
            c.wake.notify_one();
        }
    }
    let agent_down = sst
        .agent
        .as_ref()
        .is_some_and(|a| !a.paused.load(Ordering::Relaxed) && !a.up.load(Ordering::Relaxed));
    if !agent_down {
        st.set_oper(server, OperState::Up);
    }
}

/// `set server B/S health up|stopping|down` from the CLI: applied as [`force_health`]
/// does, and logged as HAProxy logs it (`changed from CLI`).
pub fn force_health_from_cli(p: &Process, backend: usize, server: usize, state: OperState) {
    let st = &p.state.backends[backend];
    let was_usable = st.servers[server].usable();
    force_health(p, backend, server, state);
    let usable = st.servers[server].usable();
    if was_usable != usable {
        let because = ", changed from CLI";
        log_state_change(p, (backend, server), usable, because, Severity::Notice);
    }
}

/// Logs a server going UP (at `up_severity`) or DOWN (alert, then emerg when the backend
/// has no server left), with `because` after the state, in HAProxy's words.
fn log_state_change(
    p: &Process,
    (backend, server): (usize, usize),
    up: bool,
    because: &str,
    up_severity: Severity,
) {
    let be = &p.config.backends[backend];
    let st = &p.state.backends[backend];
    let name = format!("{}/{}", be.name, be.servers[server].name);
    let (active, backup) = st.usable_counts(be);
    let send = |sev, msg: &str| {
        for l in &p.backend_loggers[backend] {
            l.send_at(sev, msg);
        }
    };
    if up {
        let msg = format!(
            "Server {name} is UP{because}. {active} active and {backup} backup servers online. 0 sessions requeued, 0 total in queue."
        );
        send(up_severity, &msg);
        // HAProxy mails a server coming up as a notice.
        crate::mail::alert(p, backend, Severity::Notice, &msg);
        return;
    }
    let sst = &st.servers[server];
    let msg = format!(
        "Server {name} is DOWN{because}. {active} active and {backup} backup servers left. {} sessions active, 0 requeued, {} remaining in queue.",
        sst.in_flight.load(Ordering::Relaxed),
        sst.queue.waiting.load(Ordering::Relaxed)
    );
    send(Severity::Alert, &msg);
    crate::mail::alert(p, backend, Severity::Alert, &msg);
    if active + backup == 0 {
        send(
            Severity::Emerg,
            &format!("backend {} has no server available!", be.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_wake_ups_fall_on_the_nearest_grid_tick() {
        let o = Instant::now();
        let step = Duration::from_millis(30);
        let ms = Duration::from_millis;
        assert_eq!(grid_tick(o, step, o + ms(14)), o);
        assert_eq!(grid_tick(o, step, o + ms(16)), o + ms(30));
        assert_eq!(grid_tick(o, step, o + ms(1000)), o + ms(990));
        assert_eq!(grid_tick(o, step, o + ms(1006)), o + ms(1020));
        // Before the grid starts: its first tick.
        assert_eq!(grid_tick(o + ms(5), step, o), o + ms(5));
    }

    #[test]
    fn health_follows_haproxy_rise_and_fall() {
        let (rise, fall) = (2, 3);
        // Starts up at `rise`: the first failure takes it down.
        assert_eq!(next_health(2, false, rise, fall), (0, Transition::Down));
        // Down: `rise` successes bring it up, to the top at once.
        assert_eq!(next_health(0, true, rise, fall), (1, Transition::None));
        assert_eq!(next_health(1, true, rise, fall), (4, Transition::Up));
        // Up at the top: `fall` failures take it down.
        assert_eq!(next_health(4, false, rise, fall), (3, Transition::None));
        assert_eq!(next_health(3, false, rise, fall), (2, Transition::None));
        assert_eq!(next_health(2, false, rise, fall), (0, Transition::Down));
        // A success in between climbs back to the top.
        assert_eq!(next_health(3, true, rise, fall), (4, Transition::None));
        assert_eq!(next_health(0, false, rise, fall), (0, Transition::None));
        // rise 1 / fall 1: every result decides.
        assert_eq!(next_health(0, true, 1, 1), (1, Transition::Up));
        assert_eq!(next_health(1, false, 1, 1), (0, Transition::Down));
    }

    #[test]
    fn intervals_by_state() {
        let c = CheckOpts {
            inter: Duration::from_secs(2),
            fastinter: Some(Duration::from_millis(500)),
            downinter: Some(Duration::from_secs(5)),
            ..CheckOpts::default()
        };
        assert_eq!(interval_for(&c, 4), Duration::from_secs(2));
        assert_eq!(interval_for(&c, 2), Duration::from_millis(500));
        assert_eq!(interval_for(&c, 0), Duration::from_secs(5));
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(10), 20);
            assert!(j >= Duration::from_secs(8) && j <= Duration::from_secs(12));
        }
    }
}
