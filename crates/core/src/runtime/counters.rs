//! Counters kept per worker and summed when read.
//!
//! A hot-path counter written by every worker would bounce its cache line between cores on
//! every request. Here each worker writes only its own slot (one per cache-line pair), with a
//! plain load and store rather than a locked read-modify-write: the slot has a single writer.
//! Readers (CLI, stats, logs) add the slots up; a sum may miss increments made during the
//! read, never count one twice.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::padded::Padded;

/// A counter with one writer (the worker owning the slot) and any number of readers.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one. Only the owning worker may call it.
    #[inline]
    pub fn bump(&self) {
        self.add(1);
    }

    /// Adds `n`. Only the owning worker may call it.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Overwrites the value (the owner publishing a figure it keeps elsewhere).
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
}

/// One slot per worker, each on cache lines of its own.
#[derive(Debug)]
pub struct PerWorker<T> {
    slots: Box<[Padded<T>]>,
}

impl<T: Default> PerWorker<T> {
    pub fn new(workers: usize) -> Self {
        PerWorker {
            slots: (0..workers.max(1)).map(|_| Padded::default()).collect(),
        }
    }
}

impl<T> PerWorker<T> {
    /// Worker `tid`'s slot: only that worker writes it.
    #[inline]
    pub fn at(&self, tid: usize) -> &T {
        &self.slots[tid].0
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|p| &p.0)
    }

    /// The sum over workers of one counter.
    pub fn sum(&self, f: impl Fn(&T) -> &Counter) -> u64 {
        self.iter().map(|t| f(t).get()).sum()
    }
}

/// What a server counts per worker (HAProxy's names in the comments).
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// New connections opened (`connect`).
    pub connect: Counter,
    /// Requests sent over a reused connection (`reuse`).
    pub reuse: Counter,
    /// Requests sent (`lbtot`).
    pub requests: Counter,
    /// Connection attempts that failed (`econ`).
    pub connect_errors: Counter,
    /// Responses that were invalid or cut short (`eresp`).
    pub response_errors: Counter,
    /// Connection retries (`wretr`).
    pub retries: Counter,
    /// Requests moved to another server after failed connections (`wredis`).
    pub redispatches: Counter,
}

/// What a proxy counts per worker.
#[derive(Debug, Default)]
pub struct ProxyCounters {
    /// Bytes fed to the compressor (`comp_in`).
    pub comp_in: Counter,
    /// Bytes it produced (`comp_out`).
    pub comp_out: Counter,
    /// Body bytes of responses sent uncompressed by a proxy with compression (`comp_byp`).
    pub comp_byp: Counter,
    /// Responses compressed (`comp_rsp`).
    pub comp_rsp: Counter,
}

/// What a worker counts about itself (`show activity`).
#[derive(Debug, Default)]
pub struct WorkerCounters {
    pub accepted: Counter,
    /// Connections this worker accepted but handed to a less loaded sibling.
    pub handed_off: Counter,
    /// Connections received from a sibling through the inbox.
    pub adopted: Counter,
    pub requests: Counter,
    pub accept_errors: Counter,
    /// Idle server connections closed by the purge timer.
    pub idle_purged: Counter,
    /// Idle server connections this worker took over from a sibling.
    pub fd_takeover: Counter,
    /// Event-loop wake-ups (returns from waiting for events).
    pub loops: Counter,
    /// Health checks run here.
    pub checks_run: Counter,
    /// Health checks that moved here from a busier worker.
    pub checks_moved: Counter,
    /// Health checks that had to wait for a slot (`tune.max-checks-per-thread`).
    pub checks_queued: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_separate_and_summed() {
        let c: PerWorker<ServerCounters> = PerWorker::new(3);
        c.at(0).requests.bump();
        c.at(2).requests.add(5);
        c.at(1).reuse.bump();
        assert_eq!(c.sum(|s| &s.requests), 6);
        assert_eq!(c.sum(|s| &s.reuse), 1);
        let a = c.at(0) as *const _ as usize;
        let b = c.at(1) as *const _ as usize;
        assert!(b - a >= 128, "slots share a cache line");
    }
}
