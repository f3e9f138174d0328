//! Server occupancy: the fair FIFO queue of a server with `maxconn` (`maxqueue`,
//! `timeout queue`) and the in-flight count that `leastconn` and `random` read.
//!
//! Invariant: every count taken here is given back by a drop guard, so a request that ends
//! in any way (error, client gone, panic, its future dropped) leaves the counts right.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::conf::Server;
use crate::runtime::counters::Held;
use crate::runtime::ServerState;

/// Why a request could not get a server slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("the server's queue is full (maxqueue)")]
    Full,
    #[error("timeout queue expired")]
    Timeout,
    /// The server went down or into maintenance while the request waited: it is to be
    /// redistributed.
    #[error("the server left while the request was queued")]
    ServerGone,
}

/// The right to send one request to a server under its `maxconn` (none without one).
/// Dropped, its permit goes back, unless the limit was lowered meanwhile: then it pays
/// one of the permits owed.
#[derive(Debug)]
pub struct ServerSlot(Option<(OwnedSemaphorePermit, Arc<AtomicUsize>)>);

impl Drop for ServerSlot {
    fn drop(&mut self) {
        let Some((permit, debt)) = self.0.take() else {
            return;
        };
        let owed = debt.fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1));
        if owed.is_ok() {
            permit.forget();
        }
    }
}

/// Sets a server's `maxconn` at runtime (`set maxconn server`): a raise lets waiting
/// requests in at once; a cut takes free permits away now and the rest as requests in
/// flight end; 0 lifts the limit. Only a server configured with a limit has the queue to
/// change (`false` otherwise).
pub fn set_limit(st: &ServerState, n: usize) -> bool {
    let Some(slots) = &st.queue.slots else {
        return false;
    };
    // 0 is no limit, as in HAProxy: as many permits as the semaphore holds.
    let permits = |l: usize| if l == 0 { Semaphore::MAX_PERMITS } else { l };
    let old = permits(st.queue.limit.swap(n, Ordering::AcqRel));
    let n = permits(n);
    if n > old {
        // Owed permits are forgiven first, then the semaphore grows.
        let mut grow = n - old;
        let _ = st
            .queue
            .debt
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                let forgiven = d.min(n - old);
                grow = n - old - forgiven;
                Some(d - forgiven)
            });
        slots.add_permits(grow);
    } else {
        let cut = old - n;
        let taken = slots.forget_permits(cut);
        st.queue.debt.fetch_add(cut - taken, Ordering::AcqRel);
    }
    true
}

/// Waits for a free slot on a server with `maxconn`, in arrival order, up to `timeout queue`.
pub async fn wait_turn(
    conf: &Server,
    st: &ServerState,
    limit: Option<Duration>,
) -> Result<ServerSlot, QueueError> {
    let Some(slots) = &st.queue.slots else {
        return Ok(ServerSlot(None));
    };
    let slot = |p| ServerSlot(Some((p, st.queue.debt.clone())));
    if let Ok(p) = slots.clone().try_acquire_owned() {
        return Ok(slot(p));
    }
    if conf
        .maxqueue
        .is_some_and(|m| st.queue.waiting.load(Ordering::Relaxed) >= m)
    {
        return Err(QueueError::Full);
    }
    let _waiting = Held::take(&st.queue.waiting);
    st.peaks
        .queued
        .note(st.queue.waiting.load(Ordering::Relaxed) as u64);
    // Registered before the state is read, so that a change in between is not missed.
    let gone = st.queue.closed.notified();
    tokio::pin!(gone);
    gone.as_mut().enable();
    if !st.usable() && st.admin() != crate::runtime::AdminState::Drain {
        return Err(QueueError::ServerGone);
    }
    let turn = async {
        match limit {
            Some(d) => tokio::time::timeout(d, slots.clone().acquire_owned())
                .await
                .map_err(|_| QueueError::Timeout)?,
            None => slots.clone().acquire_owned().await,
        }
        .map_err(|_| QueueError::Timeout)
    };
    tokio::select! {
        got = turn => got.map(slot),
        _ = &mut gone => Err(QueueError::ServerGone),
    }
}

/// Counts a request in flight on a server for its lifetime.
#[derive(Debug)]
pub struct InFlight<'a>(&'a ServerState);

impl<'a> InFlight<'a> {
    pub fn new(s: &'a ServerState) -> Self {
        let now = s.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        s.peaks.sessions.note(now as u64);
        InFlight(s)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
