//! Per-thread idle server-connection pools with bounded cross-thread takeover.
//!
//! Each server keeps, for every worker, two idle lists: *idle* connections served a single
//! request (not yet proven reusable), *safe* ones served more. A worker takes from its own
//! lists first (newest first). When it has none, it may take one over from a sibling only
//! while the server's total idle count is at least `pool-low-conn`, or while descriptors are
//! short (`tune.pool-low-fd-ratio`); otherwise it opens a new connection. That gate is what
//! keeps threads from stealing each other's connections on every request (capability 1).
//!
//! Releasing, purging and the need estimate follow HAProxy's idle-connection rules: a
//! released connection is kept if the server may pool at all, descriptors are not scarce,
//! `pool-max-conn` is not reached, and either this worker has no connection of that class
//! yet or the total stays within `max(used, need) + pool-low-conn`. Every `pool-purge-delay`
//! each worker closes its share of half the surplus above the estimated need, oldest first.
//!
//! The logic is generic over the connection type ([`Resource`]) so that a single-threaded
//! model test can drive it with plain values; the proxy uses tokio sockets.
//!
//! # Concurrency
//! Each per-thread list pair sits behind its own mutex. Its owner locks it to take and
//! return; a sibling only ever `try_lock`s it (never waits) to take one connection over.
//! Whoever removes a connection from a list owns it exclusively, so no connection is ever
//! used by two workers. The per-server counters are atomics updated next to the list
//! operations; they may lag a concurrent operation by one (they steer decisions, they do not
//! protect memory). A taker on another thread moves the socket into its own event loop
//! (`transport::Socket::adopt`) before use; see `docs/internals/threading.md`.

pub mod h2;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use sluice_config::{Keyword, KwError, Scope};

use crate::conf::backend::ReuseMode;
use crate::conf::pool::{PoolConf, PoolGlobal};
use crate::conf::{one_arg, one_of, GlobalConf};
use crate::padded::Padded;
use crate::transport::Socket;

/// What the pool needs to know about a connection it holds.
pub trait Resource {
    /// False once the peer has closed it, it failed, or it has bytes nobody asked for.
    fn alive(&self) -> bool;
}

impl Resource for Socket {
    fn alive(&self) -> bool {
        Socket::alive(self)
    }
}

impl PoolGlobal {
    /// The descriptor situation now.
    pub fn pressure(&self) -> Pressure {
        Pressure {
            used_fds: crate::fds::used(),
            fd_limit: crate::fds::limit(),
            low_ratio: self.low_ratio,
            high_ratio: self.high_ratio,
            shared: self.shared,
        }
    }
}

fn ratio_arg(a: &[String]) -> Result<u8, KwError> {
    let v = one_arg(a, "a percentage")?;
    v.parse::<u8>()
        .ok()
        .filter(|n| *n <= 100)
        .ok_or_else(|| KwError::bad(1, v, "expects a percentage from 0 to 100"))
}

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "tune.pool-low-fd-ratio",
        scope: Scope::GLOBAL,
        help: "tune.pool-low-fd-ratio PCT: descriptor use above which idle pools keep only one connection per thread and takeover ignores pool-low-conn (default 20)",
        parse: |g, a| ratio_arg(a).map(|r| g.pool.low_ratio = r),
    },
    Keyword {
        name: "tune.pool-high-fd-ratio",
        scope: Scope::GLOBAL,
        help: "tune.pool-high-fd-ratio PCT: descriptor use above which no idle connection is kept (default 25)",
        parse: |g, a| ratio_arg(a).map(|r| g.pool.high_ratio = r),
    },
    Keyword {
        name: "tune.idle-pool.shared",
        scope: Scope::GLOBAL,
        help: "tune.idle-pool.shared on|off: whether workers may take over each other's idle connections",
        parse: |g, a| {
            g.pool.shared = one_of(a, "on or off", &[("on", true), ("full", true), ("off", false)])?;
            Ok(())
        },
    },
];

/// Process-wide pool settings and the descriptor situation at the time of a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pressure {
    pub used_fds: usize,
    pub fd_limit: usize,
    pub low_ratio: u8,
    pub high_ratio: u8,
    /// `tune.idle-pool.shared`: takeover allowed at all.
    pub shared: bool,
}

impl Pressure {
    fn over(&self, ratio: u8) -> bool {
        self.used_fds * 100 >= self.fd_limit * usize::from(ratio)
    }

    /// Descriptors are short: keep no more than the first connection per thread, and steal
    /// regardless of `pool-low-conn`.
    pub fn low(&self) -> bool {
        self.over(self.low_ratio)
    }

    /// Descriptors are scarce: keep nothing, and close an idle connection before opening one.
    pub fn high(&self) -> bool {
        self.over(self.high_ratio)
    }
}

/// Which idle connections a request may use, from `http-reuse` and its position in the
/// client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Nothing,
    SafeOnly,
    Any,
}

impl Want {
    pub fn for_request(mode: ReuseMode, first_request: bool) -> Want {
        match (mode, first_request) {
            (ReuseMode::Never, _) => Want::Nothing,
            (ReuseMode::Safe, true) => Want::Nothing,
            (ReuseMode::Aggressive, true) => Want::SafeOnly,
            _ => Want::Any,
        }
    }
}

/// The takeover gate: stealing is allowed only while the server's idle total reaches
/// `pool-low-conn`, or while descriptors are short.
pub fn may_take_over(idle_total: usize, low_conn: usize, p: &Pressure) -> bool {
    p.shared && (idle_total >= low_conn || p.low())
}

/// Inputs of the keep-or-close decision for a released connection.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub server_usable: bool,
    pub reuse_never: bool,
    /// The connection served more than one request.
    pub safe: bool,
    /// This worker already holds idle connections of that class / of the other class.
    pub have_same_class: bool,
    pub have_safe: bool,
    pub used: usize,
    pub idle: usize,
    pub need: usize,
}

/// Whether a released connection is kept idle (HAProxy's `srv_add_to_idle_list` rules).
pub fn keep_on_release(conf: &PoolConf, p: &Pressure, r: &Release) -> bool {
    if !r.server_usable || r.reuse_never || conf.purge_delay.is_zero() || p.high() {
        return false;
    }
    if conf.max_conn.is_some_and(|m| r.idle >= m) {
        return false;
    }
    // Every worker may keep a first connection of a class (a safe one, or an idle one while it
    // holds no safe one).
    let first = !r.have_safe && (r.safe || !r.have_same_class);
    let within_need = !p.low() && r.used + r.idle <= r.used.max(r.need) + conf.low_conn;
    first || within_need
}

/// Connections to close at a purge: half the surplus above the recent need, rounded up.
pub fn purge_quota(used: usize, idle: usize, max_used: usize, need: usize) -> usize {
    (used + idle).saturating_sub(max_used.max(need)).div_ceil(2)
}

/// The need estimate after a purge period: it follows recent peaks.
pub fn next_need(need: usize, max_used: usize) -> usize {
    ((need + max_used) / 2).max(max_used)
}

/// An idle connection.
#[derive(Debug)]
pub struct IdleConn<C> {
    pub conn: C,
    /// When it went idle.
    pub since: Instant,
    /// Requests it has served.
    pub served: u32,
    /// The server announced it will close it then (`Keep-Alive: timeout=N`).
    pub expires: Option<Instant>,
}

impl<C: Resource> IdleConn<C> {
    fn usable(&self, now: Instant) -> bool {
        self.expires.is_none_or(|e| now < e) && self.conn.alive()
    }
}

#[derive(Debug)]
struct ThreadIdle<C> {
    /// Oldest at the front, newest at the back.
    idle: VecDeque<IdleConn<C>>,
    safe: VecDeque<IdleConn<C>>,
    /// Last purge period this worker applied.
    purged_epoch: u64,
}

impl<C> Default for ThreadIdle<C> {
    fn default() -> Self {
        ThreadIdle {
            idle: VecDeque::new(),
            safe: VecDeque::new(),
            purged_epoch: 0,
        }
    }
}

impl<C: Resource> ThreadIdle<C> {
    /// Newest usable connection the request may use; dead or expired ones met on the way are
    /// returned in `dropped`.
    fn pop(&mut self, want: Want, now: Instant, dropped: &mut Vec<C>) -> Option<IdleConn<C>> {
        loop {
            let c = match want {
                Want::Nothing => return None,
                Want::SafeOnly => self.safe.pop_back()?,
                Want::Any => match self.safe.pop_back() {
                    Some(c) => c,
                    None => self.idle.pop_back()?,
                },
            };
            if c.usable(now) {
                return Some(c);
            }
            dropped.push(c.conn);
        }
    }

    fn len(&self) -> usize {
        self.idle.len() + self.safe.len()
    }

    /// Removes the oldest connection of either class.
    fn pop_oldest(&mut self) -> Option<IdleConn<C>> {
        match (self.idle.front(), self.safe.front()) {
            (Some(a), Some(b)) if b.since < a.since => self.safe.pop_front(),
            (Some(_), _) => self.idle.pop_front(),
            (None, _) => self.safe.pop_front(),
        }
    }
}

/// Per-server counters shared by all workers (HAProxy's `curr_idle_conns`, `curr_safe_nb`,
/// `curr_used_conns`, `max_used_conns`, `est_need_conns`, `curr_idle_thr`).
#[derive(Debug)]
pub struct PoolStats {
    pub idle_cur: AtomicUsize,
    pub safe_cur: AtomicUsize,
    pub used_cur: AtomicUsize,
    pub used_max: AtomicUsize,
    pub need_est: AtomicUsize,
    /// Idle connections per worker, each on cache lines of its own.
    pub per_thread: Box<[Padded<AtomicUsize>]>,
    /// Sibling to try first at the next takeover.
    next_takeover: AtomicUsize,
    /// The current purge period and its surplus.
    purge_epoch: AtomicU64,
    purge_exceed: AtomicUsize,
    pub takeovers: AtomicU64,
    /// Idle connections of one worker closed by another: dead ones met during a takeover,
    /// and evictions under descriptor pressure. (Their sockets leave the owner's event loop
    /// from the closing worker's thread.)
    pub foreign_closed: AtomicU64,
}

/// What `get` found.
#[derive(Debug)]
pub enum Got<C> {
    /// From this worker's own lists.
    Local(IdleConn<C>),
    /// Taken over from worker `from`; still registered with that worker's event loop.
    Stolen(IdleConn<C>, usize),
    None,
}

/// One server's idle connections: a list pair per worker, and shared counters.
#[derive(Debug)]
pub struct ServerPools<C> {
    pub conf: PoolConf,
    pub stats: PoolStats,
    /// Each worker's lists, on cache lines of their own: a worker locking its own lists
    /// never touches a line a sibling locks.
    per_thread: Box<[Padded<Mutex<ThreadIdle<C>>>]>,
}

impl<C: Resource> ServerPools<C> {
    pub fn new(nbthread: usize, conf: PoolConf) -> Self {
        let n = nbthread.max(1);
        ServerPools {
            conf,
            stats: PoolStats {
                idle_cur: AtomicUsize::new(0),
                safe_cur: AtomicUsize::new(0),
                used_cur: AtomicUsize::new(0),
                used_max: AtomicUsize::new(0),
                need_est: AtomicUsize::new(0),
                per_thread: (0..n).map(|_| Padded::default()).collect(),
                next_takeover: AtomicUsize::new(0),
                purge_epoch: AtomicU64::new(0),
                purge_exceed: AtomicUsize::new(0),
                takeovers: AtomicU64::new(0),
                foreign_closed: AtomicU64::new(0),
            },
            per_thread: (0..n).map(|_| Padded::default()).collect(),
        }
    }

    fn lock(&self, tid: usize) -> std::sync::MutexGuard<'_, ThreadIdle<C>> {
        self.per_thread[tid]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Updates the counters after `taken` connections left thread `tid`'s lists, `safe` of
    /// them from the safe list.
    fn note_removed(&self, tid: usize, taken: usize, safe: usize) {
        self.stats.idle_cur.fetch_sub(taken, Ordering::Relaxed);
        self.stats.safe_cur.fetch_sub(safe, Ordering::Relaxed);
        self.stats.per_thread[tid].fetch_sub(taken, Ordering::Relaxed);
    }

    /// Takes `want` connections from `tid`'s own lists, else (if the gate allows) from a
    /// sibling. Dead connections met on the way are pushed to `dropped` for the caller to
    /// close. A connection obtained counts as used.
    pub fn get(
        &self,
        tid: usize,
        want: Want,
        p: &Pressure,
        now: Instant,
        dropped: &mut Vec<C>,
    ) -> Got<C> {
        if want == Want::Nothing || self.conf.max_conn == Some(0) {
            return Got::None;
        }
        if self.stats.per_thread[tid].load(Ordering::Relaxed) > 0 {
            let mut l = self.lock(tid);
            let (before, before_safe) = (l.len(), l.safe.len());
            let got = l.pop(want, now, dropped);
            let (after, after_safe) = (l.len(), l.safe.len());
            drop(l);
            self.note_removed(tid, before - after, before_safe - after_safe);
            if let Some(c) = got {
                self.use_one();
                return Got::Local(c);
            }
        }
        if !may_take_over(
            self.stats.idle_cur.load(Ordering::Relaxed),
            self.conf.low_conn,
            p,
        ) {
            return Got::None;
        }
        let n = self.per_thread.len();
        let start = self.stats.next_takeover.load(Ordering::Relaxed);
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == tid || self.stats.per_thread[victim].load(Ordering::Relaxed) == 0 {
                continue;
            }
            // Never wait on a busy sibling: try the next one.
            let Ok(mut l) = self.per_thread[victim].try_lock() else {
                continue;
            };
            let (before, before_safe) = (l.len(), l.safe.len());
            let dead_before = dropped.len();
            let got = l.pop(want, now, dropped);
            let (after, after_safe) = (l.len(), l.safe.len());
            drop(l);
            self.note_removed(victim, before - after, before_safe - after_safe);
            let dead = dropped.len() - dead_before;
            if dead > 0 {
                self.stats
                    .foreign_closed
                    .fetch_add(dead as u64, Ordering::Relaxed);
            }
            if let Some(c) = got {
                self.stats
                    .next_takeover
                    .store(victim + 1, Ordering::Relaxed);
                self.stats.takeovers.fetch_add(1, Ordering::Relaxed);
                self.use_one();
                return Got::Stolen(c, victim);
            }
        }
        Got::None
    }

    /// Counts a connection put to use (new or reused); the need estimate never lags the
    /// current use.
    pub fn use_one(&self) {
        let used = self.stats.used_cur.fetch_add(1, Ordering::Relaxed) + 1;
        // Read first: the maxima rarely move, and a plain read keeps the line shared.
        for max in [&self.stats.used_max, &self.stats.need_est] {
            if used > max.load(Ordering::Relaxed) {
                max.fetch_max(used, Ordering::Relaxed);
            }
        }
    }

    /// Counts a used connection that was closed instead of released.
    pub fn close_used(&self) {
        self.stats.used_cur.fetch_sub(1, Ordering::Relaxed);
    }

    /// Returns a used connection after a complete response. `Err` gives it back when it is
    /// not kept; the caller closes it. Either way it no longer counts as used.
    #[allow(clippy::too_many_arguments)]
    pub fn release(
        &self,
        tid: usize,
        conn: C,
        served: u32,
        server_usable: bool,
        reuse_never: bool,
        p: &Pressure,
        now: Instant,
        expires: Option<Instant>,
    ) -> Result<(), C> {
        self.stats.used_cur.fetch_sub(1, Ordering::Relaxed);
        let safe = served > 1;
        let mut l = self.lock(tid);
        let r = Release {
            server_usable,
            reuse_never,
            safe,
            have_same_class: if safe {
                !l.safe.is_empty()
            } else {
                !l.idle.is_empty()
            },
            have_safe: !l.safe.is_empty(),
            used: self.stats.used_cur.load(Ordering::Relaxed),
            idle: self.stats.idle_cur.load(Ordering::Relaxed),
            need: self.stats.need_est.load(Ordering::Relaxed),
        };
        if !keep_on_release(&self.conf, p, &r) {
            return Err(conn);
        }
        let item = IdleConn {
            conn,
            since: now,
            served,
            expires,
        };
        if safe {
            l.safe.push_back(item);
            self.stats.safe_cur.fetch_add(1, Ordering::Relaxed);
        } else {
            l.idle.push_back(item);
        }
        self.stats.idle_cur.fetch_add(1, Ordering::Relaxed);
        self.stats.per_thread[tid].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Worker `tid`'s periodic maintenance: drops its dead and expired connections and, once
    /// per `pool-purge-delay`, closes its share of half the surplus above the need, oldest
    /// first. `now_ms` is a monotonic clock in milliseconds. Returns what to close.
    pub fn purge(&self, tid: usize, now: Instant, now_ms: u64) -> Vec<C> {
        let mut out = Vec::new();
        let delay = self.conf.purge_delay.as_millis() as u64;
        if let Some(epoch) = now_ms.checked_div(delay) {
            let last = self.stats.purge_epoch.load(Ordering::Relaxed);
            if epoch > last
                && self
                    .stats
                    .purge_epoch
                    .compare_exchange(last, epoch, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                // The first worker into a new period decides for everyone.
                let s = &self.stats;
                let used = s.used_cur.load(Ordering::Relaxed);
                let max_used = s.used_max.load(Ordering::Relaxed);
                let need = s.need_est.load(Ordering::Relaxed);
                let idle = s.idle_cur.load(Ordering::Relaxed);
                s.purge_exceed
                    .store(purge_quota(used, idle, max_used, need), Ordering::Relaxed);
                s.need_est
                    .store(next_need(need, max_used), Ordering::Relaxed);
                s.used_max.store(used, Ordering::Relaxed);
            }
        }
        if self.stats.per_thread[tid].load(Ordering::Relaxed) == 0 {
            // Nothing idle here: no lock taken (a backend of many checked servers without
            // traffic would otherwise lock every list of every server four times a second).
            return out;
        }
        let mut guard = self.lock(tid);
        let l = &mut *guard;
        let before = (l.len(), l.safe.len());
        // Dead or expiring connections go whenever seen.
        let keep = |c: &IdleConn<C>| c.usable(now);
        for list in [&mut l.idle, &mut l.safe] {
            let mut i = 0;
            while i < list.len() {
                if keep(&list[i]) {
                    i += 1;
                } else if let Some(c) = list.remove(i) {
                    out.push(c.conn);
                }
            }
        }
        let epoch = self.stats.purge_epoch.load(Ordering::Relaxed);
        if delay > 0 && l.purged_epoch < epoch {
            l.purged_epoch = epoch;
            let quota = self.stats.purge_exceed.load(Ordering::Relaxed);
            let total = self.stats.idle_cur.load(Ordering::Relaxed).max(1);
            // This worker's share, in proportion to what it holds.
            let share = (quota * l.len()).div_ceil(total).min(l.len());
            for _ in 0..share {
                if let Some(c) = l.pop_oldest() {
                    out.push(c.conn);
                }
            }
        }
        let after = (l.len(), l.safe.len());
        drop(guard);
        self.note_removed(tid, before.0 - after.0, before.1 - after.1);
        out
    }

    /// Takes every idle connection of every worker (a server being deleted); the caller
    /// closes them.
    pub fn take_all(&self) -> Vec<C> {
        let mut out = Vec::new();
        for tid in 0..self.per_thread.len() {
            let mut guard = self.lock(tid);
            let l = &mut *guard;
            let (idle, safe) = (l.len(), l.safe.len());
            out.extend(l.idle.drain(..).chain(l.safe.drain(..)).map(|c| c.conn));
            drop(guard);
            self.note_removed(tid, idle, safe);
        }
        out
    }

    /// Removes one idle connection to make room for a new one under descriptor pressure:
    /// this worker's oldest, else one from a sibling that is not busy.
    pub fn evict_one(&self, tid: usize) -> Option<C> {
        let n = self.per_thread.len();
        for k in 0..n {
            let t = (tid + k) % n;
            if self.stats.per_thread[t].load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut l = if t == tid {
                self.lock(t)
            } else {
                match self.per_thread[t].try_lock() {
                    Ok(l) => l,
                    Err(_) => continue,
                }
            };
            let was_safe = l.safe.len();
            if let Some(c) = l.pop_oldest() {
                let safe = was_safe - l.safe.len();
                drop(l);
                self.note_removed(t, 1, safe);
                if t != tid {
                    self.stats.foreign_closed.fetch_add(1, Ordering::Relaxed);
                }
                return Some(c.conn);
            }
        }
        None
    }

    /// Idle connections held by worker `tid` (idle, safe).
    pub fn counts(&self, tid: usize) -> (usize, usize) {
        let l = self.lock(tid);
        (l.idle.len(), l.safe.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pressure(used: usize) -> Pressure {
        Pressure {
            used_fds: used,
            fd_limit: 1000,
            low_ratio: 20,
            high_ratio: 25,
            shared: true,
        }
    }

    #[test]
    fn reuse_modes() {
        assert_eq!(Want::for_request(ReuseMode::Never, false), Want::Nothing);
        assert_eq!(Want::for_request(ReuseMode::Safe, true), Want::Nothing);
        assert_eq!(Want::for_request(ReuseMode::Safe, false), Want::Any);
        assert_eq!(
            Want::for_request(ReuseMode::Aggressive, true),
            Want::SafeOnly
        );
        assert_eq!(Want::for_request(ReuseMode::Aggressive, false), Want::Any);
        assert_eq!(Want::for_request(ReuseMode::Always, true), Want::Any);
    }

    #[test]
    fn takeover_gate() {
        assert!(may_take_over(4, 4, &pressure(10)), "at the threshold");
        assert!(!may_take_over(3, 4, &pressure(10)), "below it");
        assert!(
            may_take_over(0, 0, &pressure(10)),
            "pool-low-conn 0 always allows"
        );
        assert!(
            may_take_over(1, 4, &pressure(200)),
            "descriptors short: allowed anyway"
        );
        let mut off = pressure(10);
        off.shared = false;
        assert!(!may_take_over(100, 0, &off), "tune.idle-pool.shared off");
    }

    #[test]
    fn keep_rules() {
        let conf = PoolConf {
            max_conn: Some(10),
            low_conn: 2,
            purge_delay: Duration::from_secs(5),
        };
        let base = Release {
            server_usable: true,
            reuse_never: false,
            safe: false,
            have_same_class: false,
            have_safe: false,
            used: 5,
            idle: 0,
            need: 5,
        };
        let p = pressure(10);
        assert!(
            keep_on_release(&conf, &p, &base),
            "first idle connection of this worker"
        );
        assert!(!keep_on_release(
            &conf,
            &p,
            &Release {
                server_usable: false,
                ..base
            }
        ));
        assert!(!keep_on_release(
            &conf,
            &p,
            &Release {
                reuse_never: true,
                ..base
            }
        ));
        assert!(!keep_on_release(
            &PoolConf {
                purge_delay: Duration::ZERO,
                ..conf
            },
            &p,
            &base
        ));
        assert!(!keep_on_release(
            &PoolConf {
                max_conn: Some(0),
                ..conf
            },
            &p,
            &base
        ));
        assert!(
            !keep_on_release(&conf, &p, &Release { idle: 10, ..base }),
            "pool-max-conn reached"
        );
        assert!(
            !keep_on_release(&conf, &pressure(250), &base),
            "above the high fd ratio"
        );
        // Not the first of its class: kept only within max(used, need) + low.
        let more = Release {
            have_same_class: true,
            ..base
        };
        assert!(
            keep_on_release(&conf, &p, &Release { idle: 2, ..more }),
            "5 + 2 <= 5 + 2"
        );
        assert!(
            !keep_on_release(&conf, &p, &Release { idle: 3, ..more }),
            "5 + 3 > 5 + 2"
        );
        assert!(
            keep_on_release(
                &conf,
                &p,
                &Release {
                    idle: 3,
                    need: 6,
                    ..more
                }
            ),
            "need raises the room"
        );
        assert!(
            !keep_on_release(&conf, &pressure(210), &Release { idle: 1, ..more }),
            "short of fds: first only"
        );
        assert!(
            keep_on_release(&conf, &pressure(210), &base),
            "but the first is always kept"
        );
        // A worker holding a safe connection keeps no extra first idle one.
        assert!(!keep_on_release(
            &conf,
            &pressure(210),
            &Release {
                have_safe: true,
                ..base
            }
        ));
    }

    #[test]
    fn purge_math() {
        assert_eq!(purge_quota(2, 10, 4, 3), 4, "surplus 8, half");
        assert_eq!(purge_quota(2, 3, 4, 3), 1, "surplus 1 rounds up");
        assert_eq!(purge_quota(4, 0, 4, 3), 0, "no surplus at the peak");
        assert_eq!(next_need(10, 4), 7);
        assert_eq!(next_need(2, 8), 8, "never below the recent peak");
    }

    #[derive(Debug)]
    struct Fake {
        id: u32,
        alive: bool,
    }

    impl Resource for Fake {
        fn alive(&self) -> bool {
            self.alive
        }
    }

    #[test]
    fn closing_a_siblings_connection_is_counted() {
        let pools: ServerPools<Fake> = ServerPools::new(
            2,
            PoolConf {
                max_conn: None,
                low_conn: 0,
                purge_delay: Duration::from_secs(5),
            },
        );
        let now = Instant::now();
        let p = pressure(10);
        // Newest last: the newest (taken first) is dead.
        for (id, alive) in [(1, true), (2, false)] {
            pools.use_one();
            let kept = pools.release(1, Fake { id, alive }, 2, true, false, &p, now, None);
            assert!(kept.is_ok());
        }
        // Worker 0 takes over: the dead one is met (and closed here), the live one taken.
        let mut dead = Vec::new();
        let got = pools.get(0, Want::Any, &p, now, &mut dead);
        assert!(
            matches!(got, Got::Stolen(ref c, 1) if c.conn.id == 1),
            "{got:?}"
        );
        assert_eq!(dead.len(), 1);
        assert_eq!(pools.stats.foreign_closed.load(Ordering::Relaxed), 1);
        // Eviction of a sibling's connection is counted too; of its own, not.
        pools.use_one();
        let _ = pools.release(
            1,
            Fake { id: 3, alive: true },
            2,
            true,
            false,
            &p,
            now,
            None,
        );
        assert_eq!(pools.evict_one(0).map(|c| c.id), Some(3));
        assert_eq!(pools.stats.foreign_closed.load(Ordering::Relaxed), 2);
        pools.use_one();
        let _ = pools.release(
            0,
            Fake { id: 4, alive: true },
            2,
            true,
            false,
            &p,
            now,
            None,
        );
        assert_eq!(pools.evict_one(0).map(|c| c.id), Some(4));
        assert_eq!(pools.stats.foreign_closed.load(Ordering::Relaxed), 2);
    }

    /// A seeded random sequence of take / return / close / purge / takeover operations on a
    /// single-threaded model of several workers, checking the counters' invariants after
    /// every step. Replay a failure with SLUICE_POOL_SEED=<seed>.
    #[test]
    fn randomized_model_keeps_its_invariants() {
        let seeds: Vec<u64> = match std::env::var("SLUICE_POOL_SEED") {
            Ok(s) => vec![s.parse().unwrap()],
            Err(_) => (1..=40).collect(),
        };
        for seed in seeds {
            run_model(seed);
        }
    }

    fn run_model(seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let threads = 1 + rng.usize(..4);
        let conf = PoolConf {
            max_conn: if rng.bool() {
                Some(rng.usize(..8))
            } else {
                None
            },
            low_conn: rng.usize(..6),
            purge_delay: Duration::from_millis(100),
        };
        let pool: ServerPools<Fake> = ServerPools::new(threads, conf);
        let start = Instant::now();
        let mut clock_ms = 0u64;
        let mut next_id = 0u32;
        let mut held: Vec<(usize, Fake, u32)> = Vec::new(); // (thread, conn, served)
        let mut closed = std::collections::HashSet::new();
        for step in 0..2000 {
            let tid = rng.usize(..threads);
            let p = pressure(if rng.u8(..10) == 0 { 230 } else { 10 });
            let now = start + Duration::from_millis(clock_ms);
            match rng.u8(..10) {
                0..=3 => {
                    let want = [Want::Any, Want::SafeOnly, Want::Nothing][rng.usize(..3)];
                    let mut dropped = Vec::new();
                    let got = pool.get(tid, want, &p, now, &mut dropped);
                    for d in dropped {
                        assert!(
                            !d.alive,
                            "seed {seed} step {step}: a live connection was dropped"
                        );
                        closed.insert(d.id);
                    }
                    match got {
                        Got::Local(c) | Got::Stolen(c, _) => {
                            assert!(
                                c.conn.alive,
                                "seed {seed}: a dead connection was handed out"
                            );
                            held.push((tid, c.conn, c.served));
                        }
                        Got::None => {
                            pool.use_one();
                            next_id += 1;
                            held.push((
                                tid,
                                Fake {
                                    id: next_id,
                                    alive: true,
                                },
                                0,
                            ));
                        }
                    }
                }
                4..=6 if !held.is_empty() => {
                    let (t, conn, served) = held.swap_remove(rng.usize(..held.len()));
                    match pool.release(t, conn, served + 1, true, false, &p, now, None) {
                        Ok(()) => {}
                        Err(c) => {
                            closed.insert(c.id);
                        }
                    }
                }
                7 if !held.is_empty() => {
                    let (_, c, _) = held.swap_remove(rng.usize(..held.len()));
                    pool.close_used();
                    closed.insert(c.id);
                }
                8 => {
                    // The server closes one idle connection somewhere.
                    let t = rng.usize(..threads);
                    let mut l = pool.lock(t);
                    let n = l.len();
                    if n > 0 {
                        let i = rng.usize(..n);
                        let li = l.idle.len();
                        if i < li {
                            l.idle[i].conn.alive = false;
                        } else {
                            l.safe[i - li].conn.alive = false;
                        }
                    }
                }
                _ => {
                    clock_ms += rng.u64(..60);
                    let now = start + Duration::from_millis(clock_ms);
                    for c in pool.purge(tid, now, clock_ms) {
                        closed.insert(c.id);
                    }
                }
            }
            // Invariants.
            let mut total = 0;
            let mut safe = 0;
            let mut seen = std::collections::HashSet::new();
            for t in 0..threads {
                let l = pool.lock(t);
                assert_eq!(
                    pool.stats.per_thread[t].load(Ordering::Relaxed),
                    l.len(),
                    "seed {seed} step {step}: per-thread count"
                );
                total += l.len();
                safe += l.safe.len();
                for c in l.idle.iter().chain(l.safe.iter()) {
                    assert!(
                        seen.insert(c.conn.id),
                        "seed {seed}: connection {} pooled twice",
                        c.conn.id
                    );
                    assert!(
                        !closed.contains(&c.conn.id),
                        "seed {seed}: a closed connection is pooled"
                    );
                }
                for c in &l.safe {
                    assert!(
                        c.served > 1,
                        "seed {seed}: an unproven connection in the safe list"
                    );
                }
            }
            for (_, c, _) in &held {
                assert!(
                    seen.insert(c.id),
                    "seed {seed}: connection {} both held and pooled",
                    c.id
                );
            }
            assert_eq!(
                pool.stats.idle_cur.load(Ordering::Relaxed),
                total,
                "seed {seed} step {step}: idle total"
            );
            assert_eq!(
                pool.stats.safe_cur.load(Ordering::Relaxed),
                safe,
                "seed {seed} step {step}: safe total"
            );
            assert_eq!(
                pool.stats.used_cur.load(Ordering::Relaxed),
                held.len(),
                "seed {seed} step {step}: used"
            );
            if let Some(m) = conf.max_conn {
                assert!(
                    total <= m,
                    "seed {seed} step {step}: pool-max-conn {m} exceeded ({total})"
                );
            }
            assert!(
                pool.stats.need_est.load(Ordering::Relaxed)
                    >= held.len().min(pool.stats.used_max.load(Ordering::Relaxed))
            );
        }
    }

    #[test]
    fn purge_shrinks_towards_the_need() {
        let conf = PoolConf {
            max_conn: None,
            low_conn: 100,
            purge_delay: Duration::from_millis(1000),
        };
        let pool: ServerPools<Fake> = ServerPools::new(1, conf);
        let now = Instant::now();
        let p = pressure(10);
        // 20 connections in use at the peak, then all released.
        for _ in 0..20 {
            pool.use_one();
        }
        for id in 0..20 {
            pool.release(0, Fake { id, alive: true }, 2, true, false, &p, now, None)
                .unwrap();
        }
        assert_eq!(pool.counts(0).1, 20);
        // Period 1: used 0, max_used 20, need 20: no surplus above the peak; the estimate
        // keeps the peak and max_used restarts from 0.
        assert!(pool.purge(0, now, 1000).is_empty());
        // Period 2: surplus 20 above max(max_used 0, need 20)? need decays to 10 first.
        let closed = pool.purge(0, now, 2000);
        assert_eq!(closed.len(), 0, "need was still 20 when deciding");
        let closed = pool.purge(0, now, 3000);
        assert_eq!(closed.len(), 5, "(20 - need 10) / 2");
        let closed = pool.purge(0, now, 4000);
        assert_eq!(closed.len(), 5, "(15 - need 5) / 2");
        // Oldest first: the remaining ones are the newest.
        assert!(pool.lock(0).safe.iter().all(|c| c.conn.id >= 10));
    }

    #[test]
    fn expiring_connections_are_never_handed_out() {
        let pool: ServerPools<Fake> = ServerPools::new(1, PoolConf::default());
        let now = Instant::now();
        let p = pressure(10);
        pool.use_one();
        pool.release(
            0,
            Fake { id: 1, alive: true },
            1,
            true,
            false,
            &p,
            now,
            Some(now + Duration::from_millis(10)),
        )
        .unwrap();
        let mut dropped = Vec::new();
        let later = now + Duration::from_millis(20);
        assert!(matches!(
            pool.get(0, Want::Any, &p, later, &mut dropped),
            Got::None
        ));
        assert_eq!(dropped.len(), 1);
        assert_eq!(pool.stats.idle_cur.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn takeover_respects_the_threshold() {
        let conf = PoolConf {
            max_conn: None,
            low_conn: 2,
            purge_delay: Duration::from_secs(5),
        };
        let pool: ServerPools<Fake> = ServerPools::new(2, conf);
        let now = Instant::now();
        let p = pressure(10);
        pool.use_one();
        pool.release(
            0,
            Fake { id: 1, alive: true },
            2,
            true,
            false,
            &p,
            now,
            None,
        )
        .unwrap();
        let mut d = Vec::new();
        // One idle connection in the whole server, threshold 2: worker 1 may not steal.
        assert!(matches!(pool.get(1, Want::Any, &p, now, &mut d), Got::None));
        pool.use_one();
        pool.release(
            0,
            Fake { id: 2, alive: true },
            2,
            true,
            false,
            &p,
            now,
            None,
        )
        .unwrap();
        // Two: now it may, and it takes the newest.
        match pool.get(1, Want::Any, &p, now, &mut d) {
            Got::Stolen(c, 0) => assert_eq!(c.conn.id, 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(pool.stats.takeovers.load(Ordering::Relaxed), 1);
        // Short of descriptors, the gate opens below the threshold.
        assert!(matches!(
            pool.get(1, Want::Any, &pressure(210), now, &mut d),
            Got::Stolen(..)
        ));
    }
}
