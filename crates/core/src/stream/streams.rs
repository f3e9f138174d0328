//! What a multiplexed client connection (HTTP/2, HTTP/3) knows of its streams for its own
//! life: how many are being served and how many have started, so that it can tell when it
//! is idle (`timeout http-keep-alive`, else `timeout client`; before its first stream
//! `timeout http-request`, as HAProxy counts it) and wait for the last one before closing.
//!
//! Invariants:
//! - A stream counts from the moment its connection accepted it (before its task runs, so
//!   the idle timer never starts in between) until its [`Open`] guard is dropped.
//! - The last stream to end wakes whoever waits for the connection to be idle, or for its
//!   streams to be done (each checks the count before it waits).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use crate::runtime::Worker;

#[derive(Debug, Default)]
pub(super) struct Streams {
    active: Cell<usize>,
    started: Cell<u32>,
    went_idle: tokio::sync::Notify,
}

/// One stream counted among its connection's until dropped.
#[derive(Debug)]
pub(super) struct Open(Rc<Streams>);

impl Drop for Open {
    fn drop(&mut self) {
        let s = &self.0;
        s.active.set(s.active.get() - 1);
        if s.active.get() == 0 {
            // Every waiter: the connection's idle timer and its wait for the last stream
            // may both be there (a `notify_one` would wake the first alone).
            s.went_idle.notify_waiters();
        }
    }
}

impl Streams {
    /// A stream accepted: its guard, and how many streams started before it.
    pub fn open(self: &Rc<Self>) -> (Open, u32) {
        self.active.set(self.active.get() + 1);
        let earlier = self.started.get();
        self.started.set(earlier + 1);
        (Open(self.clone()), earlier)
    }

    /// Resolves once the connection has had no stream for its limit: `first` before its
    /// first stream, `idle` after (`None`: never).
    pub async fn idle(&self, first: Option<Duration>, idle: Option<Duration>) {
        loop {
            match (self.active.get(), idle) {
                (0, _) if self.started.get() == 0 => match first {
                    Some(d) => return tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                },
                (0, Some(d)) => return tokio::time::sleep(d).await,
                (0, None) => std::future::pending().await,
                _ => self.went_idle.notified().await,
            }
        }
    }

    /// Resolves once no stream is being served.
    pub async fn done(&self) {
        while self.active.get() > 0 {
            self.went_idle.notified().await;
        }
    }
}

/// Resolves once the worker stops softly (at once if it already has).
pub(super) async fn soft_stop(w: &Worker) {
    let stop = w.soft_stop.notified();
    if !w.stopping() {
        stop.await;
    }
}
