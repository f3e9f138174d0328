//! Accept-rate limits: global `maxconnrate`, `maxsessrate` and `maxsslrate`, and a
//! frontend's `rate-limit sessions`. A listener over a limit stops accepting until the rate
//! falls under it again; new connections wait in the kernel's accept queue meanwhile, as
//! HAProxy's paused listeners leave them.
//!
//! Invariants:
//! - A rate is HAProxy's: the events of the current second plus the previous second's,
//!   weighted by how much of the current second is left (a sliding one-second window).
//! - A connection is accepted only when every limit that applies to it has room, and it is
//!   counted in all of them at once, under one lock: workers accepting together never
//!   overshoot a limit.
//! - With no limit configured nothing is counted here and accepting never waits.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::conf::listen::RateLimits;

/// Events in a sliding one-second window.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    /// The second (since the limiter's start) `curr` counts.
    second: u64,
    curr: u32,
    prev: u32,
}

impl Window {
    /// Moves the window to `second`.
    fn roll(&mut self, second: u64) {
        if second == self.second {
            return;
        }
        self.prev = if second == self.second + 1 {
            self.curr
        } else {
            0
        };
        self.curr = 0;
        self.second = second;
    }

    /// How long from `into` (into the current second) until one more event fits under
    /// `limit`; zero when it fits now. In microseconds, so that the arithmetic is exact.
    fn wait(&self, limit: u32, into: Duration) -> Duration {
        const SEC: u64 = 1_000_000;
        let into_us = (into.as_micros() as u64).min(SEC);
        let (curr, prev, limit) = (u64::from(self.curr), u64::from(self.prev), u64::from(limit));
        // curr + 1 + prev × (1 − t) ≤ limit, scaled by a second.
        if (curr + 1) * SEC + prev * (SEC - into_us) <= limit * SEC {
            return Duration::ZERO;
        }
        if curr + 1 > limit || prev == 0 {
            // Only the next second has room.
            return Duration::from_micros(SEC - into_us);
        }
        let room = (limit - curr - 1) * SEC;
        let t_us = SEC - room / prev;
        Duration::from_micros(t_us.saturating_sub(into_us))
    }
}

/// The windows of every configured limit, shared by the workers.
#[derive(Debug)]
pub struct AcceptRates {
    pub limits: RateLimits,
    start: Instant,
    /// conn, sess, ssl, then one per frontend.
    windows: Mutex<Vec<Window>>,
}

impl AcceptRates {
    pub fn new(limits: RateLimits) -> AcceptRates {
        let n = 3 + limits.frontends.len();
        AcceptRates {
            limits,
            start: Instant::now(),
            windows: Mutex::new(vec![Window::default(); n]),
        }
    }

    /// Whether any limit applies to frontend `fe`'s connections.
    fn applies(&self, fe: usize) -> bool {
        let l = &self.limits;
        l.conn.is_some()
            || l.sess.is_some()
            || l.ssl.is_some()
            || l.frontends.get(fe).copied().flatten().is_some()
    }

    /// Waits until one more connection of frontend `fe` (on an `ssl` bind if `tls`) fits
    /// under every limit, and counts it.
    pub async fn pace(&self, fe: usize, tls: bool) {
        if !self.applies(fe) {
            return;
        }
        loop {
            let wait = self.try_take(fe, tls, self.start.elapsed());
            if wait.is_zero() {
                return;
            }
            // At least a millisecond: the window moves by whole milliseconds of waiting.
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }

    /// Counts the connection if it fits now (zero), else how long until it may.
    fn try_take(&self, fe: usize, tls: bool, now: Duration) -> Duration {
        let l = &self.limits;
        let (second, into) = (now.as_secs(), now - Duration::from_secs(now.as_secs()));
        let applicable = [
            (0, l.conn),
            (1, l.sess),
            (2, l.ssl.filter(|_| tls)),
            (3 + fe, l.frontends.get(fe).copied().flatten()),
        ];
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut wait = Duration::ZERO;
        for (i, limit) in applicable {
            if let Some(limit) = limit {
                windows[i].roll(second);
                wait = wait.max(windows[i].wait(limit, into));
            }
        }
        if wait.is_zero() {
            for (i, limit) in applicable {
                if limit.is_some() {
                    windows[i].curr += 1;
                }
            }
        }
        wait
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
        let at = |ms| Duration::from_millis(ms);
        for _ in 0..10 {
            assert!(r.try_take(0, false, at(100)).is_zero());
        }
        // Full: the next fits once the second is over.
        assert_eq!(r.try_take(0, false, at(100)), at(900));
        // Next second: the previous one's 10 weigh 10 × (1 − t); one more fits at t ≥ 0.1.
        assert_eq!(r.try_take(0, false, at(1_050)), at(50));
        assert!(r.try_take(0, false, at(1_100)).is_zero());
        // Two seconds later nothing is left of them.
        for _ in 0..10 {
            assert!(r.try_take(0, false, at(3_000)).is_zero());
        }
    }

    #[test]
    fn every_applicable_limit_counts_and_the_strictest_decides() {
        let r = AcceptRates::new(RateLimits {
            ssl: Some(2),
            frontends: vec![Some(3), None],
            ..RateLimits::default()
        });
        let t = Duration::from_millis(10);
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
