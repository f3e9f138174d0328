//! What an HTTP/2 client connection holds for its client: the DATA its streams handed the
//! `h2` crate that has not been written to the socket yet, and its budget. A client that
//! opens its flow-control windows and stops reading its socket would otherwise have every
//! stream's send queue fill (four buffers each); with the budget, a stream waits before
//! handing more while the connection holds it, so it stops reading from its server too.
//!
//! The crate does not say what it has written: the frames leaving are read off the wire by
//! `stream::h2_frames::Tallied`, which reports each DATA frame ([`Queued::written`]).
//!
//! Invariants:
//! - `held` is the sum of the streams' own counts, and the worker's gauge moves with it.
//! - A stream reset gives back what it still had counted (the crate drops what a reset
//!   stream had queued); one that ended whole keeps it until its last frames are written.
//!   DATA written for a stream no longer counted changes nothing.
//! - Streams waiting for room are woken in the order they came, as many as the room made
//!   (one per [`ROOM_PER_WAKE`] bytes, at least one), all of them once nothing is held: a
//!   frame written wakes a stream or a few, not the hundred a connection may have waiting.
//! - It also carries the streams the frame scan found broken (a zero WINDOW_UPDATE): each
//!   is reset by its own future once woken ([`Queued::broke`], [`Queued::poll_broken`]);
//!   at most [`BROKEN_KEPT`] marks wait at once (a mark for a stream no longer served,
//!   long closed, would otherwise stay).
//! - Only the connection's worker uses it (the mutex satisfies `Send` bounds).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// One client connection's queued DATA.
#[derive(Debug)]
pub struct Queued {
    /// The most the connection's streams may have queued together (0: no limit).
    budget: u64,
    state: Mutex<State>,
    /// The worker's gauge of what all its connections hold.
    gauge: Arc<AtomicU64>,
    /// Some stream is marked broken: a stream whose task is known need not look otherwise.
    any_broken: std::sync::atomic::AtomicBool,
}

/// The room one woken stream is expected to take: a buffer's worth.
const ROOM_PER_WAKE: u64 = 16 * 1024;

#[derive(Debug, Default)]
struct State {
    held: u64,
    /// What each stream has queued, and whether it has ended (its entry then goes once
    /// nothing is left).
    by_stream: HashMap<u32, (u64, bool)>,
    waiting: VecDeque<Waker>,
    /// Streams to reset for a protocol error, and the task waiting on each, if known.
    broken: VecDeque<(u32, Option<Waker>)>,
    /// The task of each open stream, to wake if it breaks.
    watching: HashMap<u32, Waker>,
}

/// Broken-stream marks kept at once.
const BROKEN_KEPT: usize = 64;

impl Queued {
    pub fn new(budget: usize, gauge: Arc<AtomicU64>) -> Arc<Queued> {
        Arc::new(Queued {
            budget: budget as u64,
            state: Mutex::new(State::default()),
            gauge,
            any_broken: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the connection holds now.
    pub fn held(&self) -> u64 {
        self.lock().held
    }

    /// Room for up to `want` more bytes (at least one when any), or `Pending` until some
    /// is written or given back.
    pub(super) fn poll_room(&self, cx: &mut Context<'_>, want: usize) -> Poll<usize> {
        if self.budget == 0 || want == 0 {
            return Poll::Ready(want);
        }
        let mut st = self.lock();
        if st.held >= self.budget {
            // Once per stream, however often it is polled while it waits.
            if !st.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                st.waiting.push_back(cx.waker().clone());
            }
            return Poll::Pending;
        }
        Poll::Ready(want.min((self.budget - st.held) as usize))
    }

    /// Stream `stream` handed the crate `n` bytes of DATA.
    pub(super) fn handed(&self, stream: u32, n: usize) {
        let n = n as u64;
        let mut st = self.lock();
        st.held += n;
        st.by_stream.entry(stream).or_insert((0, false)).0 += n;
        self.gauge.fetch_add(n, Ordering::Relaxed);
    }

    /// A DATA frame of `n` bytes for `stream` left for the socket.
    pub fn written(&self, stream: u32, n: usize) {
        let mut st = self.lock();
        let Some((count, ended)) = st.by_stream.get_mut(&stream) else {
            return;
        };
        let n = (n as u64).min(*count);
        *count -= n;
        if *count == 0 && *ended {
            st.by_stream.remove(&stream);
        }
        st.held -= n;
        self.gauge.fetch_sub(n, Ordering::Relaxed);
        wake(&mut st, n);
    }

    /// Stream `stream` broke the protocol (the scan saw a zero WINDOW_UPDATE for it): its
    /// task resets it ([`Queued::poll_broken`]).
    pub fn broke(&self, stream: u32) {
        let mut st = self.lock();
        if st.broken.len() >= BROKEN_KEPT {
            st.broken.pop_front();
        }
        let waker = st.watching.remove(&stream);
        if let Some(w) = &waker {
            w.wake_by_ref();
        }
        st.broken.push_back((stream, waker));
        self.any_broken.store(true, Ordering::Relaxed);
    }

    /// Whether some stream is marked broken now.
    pub(super) fn any_broken(&self) -> bool {
        self.any_broken.load(Ordering::Relaxed)
    }

    /// Ready once `stream` is marked broken (the mark is taken); else the task is woken
    /// when it is.
    pub(super) fn poll_broken(&self, stream: u32, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.lock();
        if let Some(i) = st.broken.iter().position(|(id, _)| *id == stream) {
            st.broken.remove(i);
            if st.broken.is_empty() {
                self.any_broken.store(false, Ordering::Relaxed);
            }
            return Poll::Ready(());
        }
        match st.watching.get(&stream) {
            // (Polled at every wake of its task: the waker is cloned once.)
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => {
                st.watching.insert(stream, cx.waker().clone());
            }
        }
        Poll::Pending
    }

    /// Stream `stream` is done with: `dropped`, it was reset and what it still had counted
    /// is given back; else that goes as it is written.
    pub(super) fn ended(&self, stream: u32, dropped: bool) {
        let mut st = self.lock();
        st.watching.remove(&stream);
        if let Some(i) = st.broken.iter().position(|(id, _)| *id == stream) {
            st.broken.remove(i);
            if st.broken.is_empty() {
                self.any_broken.store(false, Ordering::Relaxed);
            }
        }
        let Some((count, ended)) = st.by_stream.get_mut(&stream) else {
            return;
        };
        if dropped || *count == 0 {
            let n = *count;
            st.by_stream.remove(&stream);
            st.held -= n;
            self.gauge.fetch_sub(n, Ordering::Relaxed);
            wake(&mut st, n);
        } else {
            *ended = true;
        }
    }
}

/// Wakes the streams the `freed` bytes make room for (all once nothing is held).
fn wake(st: &mut State, freed: u64) {
    let n = if st.held == 0 {
        st.waiting.len()
    } else {
        freed.div_ceil(ROOM_PER_WAKE).max(1) as usize
    };
    for w in st.waiting.drain(..n.min(st.waiting.len())) {
        w.wake();
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        // The connection is gone with whatever the crate still had.
        let held = self.lock().held;
        self.gauge.fetch_sub(held, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_what_streams_hand_and_writes_make_room() {
        let gauge = Arc::new(AtomicU64::new(0));
        let q = Queued::new(100, gauge.clone());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert_eq!(q.poll_room(&mut cx, 60), Poll::Ready(60));
        q.handed(1, 60);
        assert_eq!(q.poll_room(&mut cx, 60), Poll::Ready(40));
        q.handed(3, 40);
        assert_eq!(q.poll_room(&mut cx, 10), Poll::Pending);
        assert_eq!(gauge.load(Ordering::Relaxed), 100);
        q.written(1, 50);
        assert_eq!(q.poll_room(&mut cx, 60), Poll::Ready(50));
        // Stream 3 is reset with 40 still queued: given back, later writes ignored.
        q.ended(3, true);
        q.written(3, 40);
        assert_eq!(q.held(), 10);
        // Stream 1 ends whole: its last 10 count until written, then it is forgotten.
        q.ended(1, false);
        assert_eq!(q.held(), 10);
        q.written(1, 10);
        assert_eq!((q.held(), q.lock().by_stream.len()), (0, 0));
        drop(q);
        assert_eq!(gauge.load(Ordering::Relaxed), 0);
    }
}
