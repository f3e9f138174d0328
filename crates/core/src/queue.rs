//! Server occupancy: the fair FIFO queue of a server with `maxconn` (`maxqueue`,
//! `timeout queue`) and the in-flight count that `leastconn` and `random` read.
//!
//! Invariant: every count taken here is given back by a drop guard, so a request that ends
//! in any way (error, client gone, panic, its future dropped) leaves the counts right.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::conf::Server;
use crate::runtime::counters::Held;
use crate::runtime::limit::Permit;
use crate::runtime::{BackendState, ServerState};

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
#[derive(Debug)]
pub struct ServerSlot(#[allow(dead_code)] Option<Permit>);

/// Sets a server's `maxconn` at runtime (`set maxconn server`; 0 lifts it). Only a server
/// configured with a limit has the queue to change (`false` otherwise).
pub fn set_limit(st: &ServerState, n: usize) -> bool {
    match &st.queue.slots {
        Some(slots) => {
            slots.set(n);
            true
        }
        None => false,
    }
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
    if let Ok(p) = slots.try_take() {
        return Ok(ServerSlot(Some(p)));
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
            Some(d) => tokio::time::timeout(d, slots.take())
                .await
                .map_err(|_| QueueError::Timeout)?,
            None => slots.take().await,
        }
        .map_err(|_| QueueError::Timeout)
    };
    tokio::select! {
        got = turn => got.map(|p| ServerSlot(Some(p))),
        _ = &mut gone => Err(QueueError::ServerGone),
    }
}

/// Counts a request in flight on a server, and on its backend, for its lifetime (each
/// count's peak noted as it rises: `smax`).
#[derive(Debug)]
pub struct InFlight<'a>(&'a BackendState, &'a ServerState);

impl<'a> InFlight<'a> {
    pub fn new(b: &'a BackendState, s: &'a ServerState) -> Self {
        let now = s.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        s.peaks.sessions.note(now as u64);
        let now = b.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        b.peaks.sessions.note(now as u64);
        InFlight(b, s)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.1.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
