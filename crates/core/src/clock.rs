//! The data path's clock: the time is read once when a connection's task is polled, and
//! that reading serves every question asked of the clock during the poll.
//!
//! A request asks the time a dozen times (its timeouts, the queue and connect timers, the
//! idle pool's ages, the statistics' rates), each a `clock_gettime`. A poll lasts
//! microseconds, and every one of those uses is in milliseconds or coarser, so one reading
//! per poll serves them all, as HAProxy's `now_ms` serves a whole turn of its loop.
//!
//! It is also the process's one monotonic clock in milliseconds and nanoseconds (counted
//! from the first reading, never 0), cheap to store in atomics: rates, ages and ramps all
//! read it.
//!
//! Invariants:
//! - During a poll of a [`Ticking`] future, [`now`] returns the instant read as that poll
//!   began; anywhere else it reads the clock.
//! - Ticking polls may nest: the inner one reads the clock anew, and the outer reading is
//!   back when it returns (or unwinds).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

thread_local! {
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The current instant: the poll's reading, or the clock outside a ticking poll.
pub fn now() -> Instant {
    NOW.with(Cell::get).unwrap_or_else(Instant::now)
}

/// The time since `earlier` (zero if it is later than [`now`]).
pub fn since(earlier: Instant) -> Duration {
    now().saturating_duration_since(earlier)
}

/// The instant `d` from [`now`], for tokio's timers.
pub fn deadline(d: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::from_std(now());
    // A limit too far to express is as good as none (as `tokio::time::timeout` has it).
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// A monotonic clock in nanoseconds (never 0), cheap to store in an atomic.
pub fn clock_ns() -> u64 {
    clock_base().elapsed().as_nanos() as u64 + 1
}

fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// [`clock_ns`] in milliseconds (never 0).
pub fn clock_ms() -> u64 {
    clock_ms_at(Instant::now())
}

/// [`clock_ms`] of an instant already read (saves reading the clock again).
pub fn clock_ms_at(t: Instant) -> u64 {
    t.saturating_duration_since(clock_base()).as_millis() as u64 + 1
}

/// A future whose every poll reads the clock once for [`now`].
///
/// The future is boxed: a connection's or a stream's future is kilobytes, and a task
/// moves its future several times while it is spawned, stored and dropped (whole, even
/// once finished), where a box moves as a pointer. One allocation per task costs less.
pub struct Ticking<F>(Pin<Box<F>>);

impl<F: Future> Ticking<F> {
    pub fn new(f: F) -> Ticking<F> {
        Ticking(Box::pin(f))
    }
}

impl<F: Future> Future for Ticking<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        /// Puts the outer reading back, also when the poll panics.
        struct Restore(Option<Instant>);
        impl Drop for Restore {
            fn drop(&mut self) {
                NOW.with(|n| n.set(self.0));
            }
        }
        let _restore = Restore(NOW.with(|n| n.replace(Some(Instant::now()))));
        self.0.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_sees_one_instant_and_outside_the_clock_runs() {
        let outside = now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now() > outside, "outside a poll, now() reads the clock");
        let mut f = std::pin::pin!(Ticking::new(async {
            let a = now();
            std::thread::sleep(Duration::from_millis(2));
            let b = now();
            let inner = Ticking::new(async { now() }).await;
            (a, b, inner, now())
        }));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let Poll::Ready((a, b, inner, after)) = f.as_mut().poll(&mut cx) else {
            panic!("the future is ready at once");
        };
        assert_eq!(a, b, "one reading per poll");
        assert!(inner > a, "a nested poll reads anew");
        assert_eq!(after, a, "and the outer reading is back after it");
        assert!(
            NOW.with(Cell::get).is_none(),
            "nothing left behind after the poll"
        );
    }
}
