//! Frequency counters, as HAProxy's `freq_ctr`: the events of the current period plus the
//! previous period's, weighted by the share of the current period still to come (a sliding
//! window). The one implementation behind every rate sluice keeps: accept-rate limits,
//! proxy and server rates, stick-table `*_rate` data and the compressor's byte rates.
//!
//! Times are milliseconds of [`crate::clock`]'s monotonic clock. A window's periods start
//! at multiples of their length from where it started (the clock's origin by default, so
//! that counters of one period turn together).
//!
//! - [`Window`]: plain data, for a counter kept under its owner's lock (a stick-table
//!   entry, the accept limits); any period.
//! - [`PerSecond`]: atomics over a one-second period, for a counter read by other threads
//!   (statistics); [`PerSecond::hit`] for a counter one thread writes, [`PerSecond::add`]
//!   for one every worker writes.

use std::sync::atomic::{AtomicU64, Ordering};

/// A sliding window of events over a period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Start of the current period (ms).
    start: u64,
    curr: u64,
    prev: u64,
}

impl Window {
    /// A window whose first period starts at `now`.
    pub fn starting(now: u64) -> Window {
        Window {
            start: now,
            ..Window::default()
        }
    }

    /// Its state (start of the current period, its events, the previous period's), to be
    /// saved and [`Window::from_parts`] made again (a reload's table dump).
    pub fn parts(&self) -> (u64, u64, u64) {
        (self.start, self.curr, self.prev)
    }

    pub fn from_parts(start: u64, curr: u64, prev: u64) -> Window {
        Window { start, curr, prev }
    }

    /// Moves the window to the period holding `now`.
    fn rotate(&mut self, now: u64, period: u64) {
        let period = period.max(1);
        if now < self.start + period {
            return;
        }
        let periods = (now - self.start) / period;
        self.prev = if periods == 1 { self.curr } else { 0 };
        self.curr = 0;
        self.start += periods * period;
    }

    /// Counts `n` events at `now`.
    pub fn add(&mut self, now: u64, period: u64, n: u64) {
        self.rotate(now, period);
        self.curr += n;
    }

    /// The events within the last `period` before `now`.
    pub fn read(&self, now: u64, period: u64) -> u64 {
        let mut w = *self;
        w.rotate(now, period);
        let period = period.max(1);
        let left = period - (now - w.start).min(period);
        w.curr + w.prev * left / period
    }

    /// How long from `now` until one more event fits under `limit`, in milliseconds; zero
    /// when it fits now.
    pub fn wait(&mut self, now: u64, period: u64, limit: u64) -> u64 {
        self.rotate(now, period);
        let period = period.max(1);
        let into = (now - self.start).min(period);
        // curr + 1 + prev × (1 − into/period) ≤ limit, scaled by the period.
        if (self.curr + 1) * period + self.prev * (period - into) <= limit * period {
            return 0;
        }
        if self.curr + 1 > limit || self.prev == 0 {
            // Only the next period has room.
            return period - into;
        }
        let room = (limit - self.curr - 1) * period;
        (period - room / self.prev).saturating_sub(into)
    }
}

/// Events per second over a sliding second, readable from any thread.
#[derive(Debug, Default)]
pub struct PerSecond {
    sec: AtomicU64,
    cur: AtomicU64,
    prev: AtomicU64,
}

impl PerSecond {
    pub const fn new() -> PerSecond {
        PerSecond {
            sec: AtomicU64::new(0),
            cur: AtomicU64::new(0),
            prev: AtomicU64::new(0),
        }
    }

    /// Counts one event at `now`; only one thread ever writes this counter (a worker's
    /// own slot), so plain loads and stores do.
    #[inline]
    pub fn hit(&self, now: u64) {
        let sec = now / 1000;
        let at = self.sec.load(Ordering::Relaxed);
        if at != sec {
            let cur = self.cur.load(Ordering::Relaxed);
            let prev = if at + 1 == sec { cur } else { 0 };
            self.prev.store(prev, Ordering::Relaxed);
            self.cur.store(0, Ordering::Relaxed);
            self.sec.store(sec, Ordering::Relaxed);
        }
        self.cur
            .store(self.cur.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Counts `n` events at `now` from any thread (the period turns once, by whoever sees
    /// it turn first).
    pub fn add(&self, now: u64, n: u64) {
        self.rotate_shared(now / 1000);
        self.cur.fetch_add(n, Ordering::Relaxed);
    }

    fn rotate_shared(&self, now_sec: u64) {
        let sec = self.sec.load(Ordering::Relaxed);
        if sec != now_sec
            && self
                .sec
                .compare_exchange(sec, now_sec, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let cur = self.cur.swap(0, Ordering::Relaxed);
            self.prev
                .store(if now_sec == sec + 1 { cur } else { 0 }, Ordering::Relaxed);
        }
    }

    /// The events within the second before `now`.
    pub fn per_sec(&self, now: u64) -> u64 {
        let sec = now / 1000;
        let left = 1000 - now % 1000;
        let at = self.sec.load(Ordering::Relaxed);
        let (prev, cur) = if at == sec {
            (
                self.prev.load(Ordering::Relaxed),
                self.cur.load(Ordering::Relaxed),
            )
        } else if at + 1 == sec {
            (self.cur.load(Ordering::Relaxed), 0)
        } else {
            (0, 0)
        };
        prev * left / 1000 + cur
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_slides_over_its_period() {
        let mut w = Window::default();
        for _ in 0..10 {
            w.add(1_100, 1000, 1);
        }
        assert_eq!(w.read(1_100, 1000), 10);
        // Half of the next period gone: half of the previous one's events still count.
        assert_eq!(w.read(2_500, 1000), 5);
        assert_eq!(w.read(3_000, 1000), 0);
        // A 10 s period.
        let mut w = Window::default();
        w.add(5_000, 10_000, 4);
        assert_eq!(w.read(12_500, 10_000), 3);
    }

    #[test]
    fn a_limit_waits_for_room() {
        let mut w = Window::default();
        for _ in 0..10 {
            assert_eq!(w.wait(100, 1000, 10), 0);
            w.add(100, 1000, 1);
        }
        assert_eq!(w.wait(100, 1000, 10), 900);
        // The previous second's 10 weigh 10 × (1 − t): one more fits at t ≥ 0.1.
        assert_eq!(w.wait(1_050, 1000, 10), 50);
        assert_eq!(w.wait(1_100, 1000, 10), 0);
    }

    #[test]
    fn per_second_counts_from_one_or_many_writers() {
        let r = PerSecond::new();
        for _ in 0..4 {
            r.hit(1_200);
        }
        r.add(1_300, 6);
        assert_eq!(r.per_sec(1_900), 10);
        assert_eq!(r.per_sec(2_500), 5);
        assert_eq!(r.per_sec(4_000), 0);
    }
}
