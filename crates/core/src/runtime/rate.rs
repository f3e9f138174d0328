//! Accept-rate limits: global `maxconnrate`, `maxsessrate` and `maxsslrate` (which `set
//! rate-limit ... global` changes at run time), and a frontend's `rate-limit sessions`. A
//! listener over a limit stops accepting until the rate falls under it again; new
//! connections wait in the kernel's accept queue meanwhile, as HAProxy's paused listeners
//! leave them.
//!
//! Invariants:
//! - A rate is HAProxy's: a sliding one-second window ([`crate::freq::Window`]).
//! - A connection is accepted only when every limit that applies to it has room, and it is
//!   counted in all of them at once, under one lock: workers accepting together never
//!   overshoot a limit.
//! - With no limit configured nothing is counted here and accepting never waits.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::freq::Window;

pub use crate::conf::listen::RateLimits;

/// A process-wide accept rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobalRate {
    /// `maxconnrate`.
    Conn,
    /// `maxsessrate`.
    Sess,
    /// `maxsslrate`.
    Ssl,
}

/// The limits and the windows of every limit, shared by the workers.
#[derive(Debug)]
pub struct AcceptRates {
    /// The process-wide limits, by [`GlobalRate`] (0: none).
    global: [AtomicU32; 3],
    /// `rate-limit sessions`, by frontend.
    frontends: Vec<Option<u32>>,
    /// conn, sess, ssl, then one per frontend.
    windows: Mutex<Vec<Window>>,
}

impl AcceptRates {
    pub fn new(limits: RateLimits) -> AcceptRates {
        let n = 3 + limits.frontends.len();
        let at = |l: Option<u32>| AtomicU32::new(l.unwrap_or(0));
        AcceptRates {
            global: [at(limits.conn), at(limits.sess), at(limits.ssl)],
            frontends: limits.frontends,
            windows: Mutex::new(vec![Window::default(); n]),
        }
    }

    /// A process-wide limit, if set.
    pub fn global(&self, which: GlobalRate) -> Option<u32> {
        Some(self.global[which as usize].load(Ordering::Relaxed)).filter(|&n| n > 0)
    }

    /// Changes a process-wide limit (0: none); it applies from the next connection.
    pub fn set_global(&self, which: GlobalRate, n: u32) {
        self.global[which as usize].store(n, Ordering::Relaxed);
    }

    /// Whether any limit applies to frontend `fe`'s connections.
    fn applies(&self, fe: usize) -> bool {
        [GlobalRate::Conn, GlobalRate::Sess, GlobalRate::Ssl]
            .iter()
            .any(|&g| self.global(g).is_some())
            || self.frontends.get(fe).copied().flatten().is_some()
    }

    /// Waits until one more connection of frontend `fe` (on an `ssl` bind if `tls`) fits
    /// under every limit, and counts it.
    pub async fn pace(&self, fe: usize, tls: bool) {
        if !self.applies(fe) {
            return;
        }
        loop {
            let wait = self.try_take(fe, tls, crate::clock::clock_ms());
            if wait.is_zero() {
                return;
            }
            // At least a millisecond: the window moves by whole milliseconds of waiting.
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }

    /// Counts the connection if it fits at `now` (ms; zero), else how long until it may.
    fn try_take(&self, fe: usize, tls: bool, now: u64) -> Duration {
        let applicable = [
            (0, self.global(GlobalRate::Conn)),
            (1, self.global(GlobalRate::Sess)),
            (2, self.global(GlobalRate::Ssl).filter(|_| tls)),
            (3 + fe, self.frontends.get(fe).copied().flatten()),
        ];
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut wait = 0;
        for (i, limit) in applicable {
            if let Some(limit) = limit {
                wait = wait.max(windows[i].wait(now, 1000, u64::from(limit)));
            }
        }
        if wait == 0 {
            for (i, limit) in applicable {
                if limit.is_some() {
                    windows[i].add(now, 1000, 1);
                }
            }
        }
        Duration::from_millis(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(conn: u32) -> AcceptRates {
        AcceptRates::new(RateLimits {
            conn: Some(conn),
            frontends: vec![None],
            ..RateLimits::default()
        })
    }

    #[test]
    fn a_second_takes_the_limit_then_the_window_slides() {
        let r = limits(10);
        let at = Duration::from_millis;
        for _ in 0..10 {
            assert!(r.try_take(0, false, 100).is_zero());
        }
        // Full: the next fits once the second is over.
        assert_eq!(r.try_take(0, false, 100), at(900));
        // Next second: the previous one's 10 weigh 10 × (1 − t); one more fits at t ≥ 0.1.
        assert_eq!(r.try_take(0, false, 1_050), at(50));
        assert!(r.try_take(0, false, 1_100).is_zero());
        // Two seconds later nothing is left of them.
        for _ in 0..10 {
            assert!(r.try_take(0, false, 3_000).is_zero());
        }
    }

    #[test]
    fn every_applicable_limit_counts_and_the_strictest_decides() {
        let r = AcceptRates::new(RateLimits {
            ssl: Some(2),
            frontends: vec![Some(3), None],
            ..RateLimits::default()
        });
        let t = 10;
        assert!(r.try_take(0, true, t).is_zero());
        assert!(r.try_take(0, true, t).is_zero());
        // The ssl limit is reached; clear connections of frontend 0 still have room...
        assert!(!r.try_take(0, true, t).is_zero());
        assert!(r.try_take(0, false, t).is_zero());
        // ...until frontend 0's own limit; frontend 1 has none.
        assert!(!r.try_take(0, false, t).is_zero());
        assert!(r.try_take(1, false, t).is_zero());
    }
}
