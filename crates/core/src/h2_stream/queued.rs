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
//! - A stream that finds the budget full waits; waiting streams are woken in the order
//!   they came, each with a grant of [`GRANT`] bytes it may hand, while what is held and
//!   what is granted leave room in the budget: a frame written wakes a stream at most, not
//!   the hundred a connection may have waiting, and a woken stream relays several buffers
//!   for one wait rather than one buffer per wait (each wait is a poll of the stream's
//!   whole task). What is held stays under the budget, a grant and a buffer
//!   ([`ROOM_PER_WAKE`]).
//! - It also carries the streams the frame scan found broken (a zero WINDOW_UPDATE): each
//!   is reset by its own task once woken ([`Queued::broke`], [`Queued::poll_broken`]); at
//!   most [`BROKEN_KEPT`] marks wait at once (a mark for a stream that has no task, long
//!   closed, would otherwise stay).
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

/// What a stream may hand beyond a budget not yet full: a buffer's worth.
const ROOM_PER_WAKE: u64 = 16 * 1024;

/// What a stream woken from its wait may hand, budget or not: four buffers.
const GRANT: u64 = 4 * ROOM_PER_WAKE;

/// A stream's share of what the connection holds.
#[derive(Debug, Default)]
struct Share {
    /// DATA handed and not written yet.
    queued: u64,
    /// It has ended: its entry goes once nothing is left.
    ended: bool,
    /// What it may still hand though the budget is full (see [`GRANT`]).
    grant: u64,
}

#[derive(Debug, Default)]
struct State {
    held: u64,
    /// What each stream has queued or may hand.
    by_stream: HashMap<u32, Share>,
    /// The streams waiting for room, in the order they came.
    waiting: VecDeque<(u32, Waker)>,
    /// What the grants of woken streams have left, together.
    promised: u64,
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

    /// Room for up to `want` more bytes for `stream`, or `Pending` until it has some: what
    /// its grant has left, else what the budget has (beyond what is held and granted) and
    /// a buffer more, so that it hands its buffer's worth at once rather than the few
    /// bytes the budget has left and a wait for each next few.
    pub(super) fn poll_room(&self, stream: u32, cx: &mut Context<'_>, want: usize) -> Poll<usize> {
        if self.budget == 0 || want == 0 {
            return Poll::Ready(want);
        }
        let mut st = self.lock();
        // (The budget first: a stream holding a grant uses it up by what it hands either way,
        // and the lookup is spared while the budget has room.)
        let taken = st.held + st.promised;
        if taken < self.budget && st.waiting.is_empty() {
            return Poll::Ready(want.min((self.budget - taken + ROOM_PER_WAKE) as usize));
        }
        if let Some(share) = st.by_stream.get(&stream).filter(|s| s.grant > 0) {
            return Poll::Ready(want.min(share.grant as usize));
        }
        // Once per stream, however often it is polled while it waits.
        if !st.waiting.iter().any(|(id, _)| *id == stream) {
            st.waiting.push_back((stream, cx.waker().clone()));
        }
        Poll::Pending
    }

    /// Stream `stream` handed the crate `n` bytes of DATA.
    pub(super) fn handed(&self, stream: u32, n: usize) {
        let n = n as u64;
        let mut st = self.lock();
        st.held += n;
        let share = st.by_stream.entry(stream).or_default();
        share.queued += n;
        let used = share.grant.min(n);
        share.grant -= used;
        st.promised -= used;
        self.gauge.fetch_add(n, Ordering::Relaxed);
    }

    /// A DATA frame of `n` bytes for `stream` left for the socket.
    pub fn written(&self, stream: u32, n: usize) {
        let mut st = self.lock();
        let Some(share) = st.by_stream.get_mut(&stream) else {
            return;
        };
        let n = (n as u64).min(share.queued);
        share.queued -= n;
        if share.queued == 0 && share.ended {
            st.by_stream.remove(&stream);
        }
        st.held -= n;
        self.gauge.fetch_sub(n, Ordering::Relaxed);
        wake(&mut st, self.budget);
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
        st.waiting.retain(|(id, _)| *id != stream);
        if let Some(i) = st.broken.iter().position(|(id, _)| *id == stream) {
            st.broken.remove(i);
            if st.broken.is_empty() {
                self.any_broken.store(false, Ordering::Relaxed);
            }
        }
        let Some(share) = st.by_stream.get_mut(&stream) else {
            return;
        };
        let unused = std::mem::take(&mut share.grant);
        if dropped || share.queued == 0 {
            let n = share.queued;
            st.by_stream.remove(&stream);
            st.held -= n;
            self.gauge.fetch_sub(n, Ordering::Relaxed);
        } else {
            share.ended = true;
        }
        st.promised -= unused;
        wake(&mut st, self.budget);
    }
}

/// Wakes waiting streams, each with a grant, while the budget has room besides what was
/// granted already.
fn wake(st: &mut State, budget: u64) {
    while st.held + st.promised < budget {
        let Some((id, w)) = st.waiting.pop_front() else {
            return;
        };
        st.promised += GRANT;
        st.by_stream.entry(id).or_default().grant = GRANT;
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
        let room = ROOM_PER_WAKE as usize;
        let budget = 2 * room;
        let q = Queued::new(budget, gauge.clone());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(q.poll_room(1, &mut cx, budget), Poll::Ready(budget));
        q.handed(1, budget - 10);
        // What the budget has left, and a buffer's worth beyond it.
        assert_eq!(q.poll_room(3, &mut cx, 3 * room), Poll::Ready(10 + room));
        q.handed(3, 10 + room);
        assert_eq!(gauge.load(Ordering::Relaxed), (budget + room) as u64);
        // Stream 3 is reset with all it handed still queued: given back, later writes
        // ignored.
        q.ended(3, true);
        q.written(3, 40);
        assert_eq!(q.held(), (budget - 10) as u64);
        // Stream 1 ends whole: what it has left counts until written, then it is forgotten.
        q.ended(1, false);
        assert_eq!(q.held(), (budget - 10) as u64);
        q.written(1, budget - 10);
        assert_eq!((q.held(), q.lock().by_stream.len()), (0, 0));
        drop(q);
        assert_eq!(gauge.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn waiting_streams_are_woken_in_turn_with_a_grant() {
        let gauge = Arc::new(AtomicU64::new(0));
        let (room, grant) = (ROOM_PER_WAKE as usize, GRANT as usize);
        let q = Queued::new(2 * room, gauge);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        q.handed(1, 6 * room);
        assert_eq!(q.poll_room(2, &mut cx, room), Poll::Pending);
        assert_eq!(q.poll_room(3, &mut cx, room), Poll::Pending);
        // Written down to the budget: nobody is woken yet.
        q.written(1, 4 * room);
        assert_eq!(q.lock().waiting.len(), 2);
        // Below it: the first to wait is woken with a grant, which takes the room left.
        q.written(1, 1);
        assert_eq!(q.lock().waiting.len(), 1);
        assert_eq!(q.poll_room(2, &mut cx, 16 * room), Poll::Ready(grant));
        assert_eq!(
            q.poll_room(4, &mut cx, 1),
            Poll::Pending,
            "a newcomer waits its turn"
        );
        q.handed(2, grant - room);
        assert_eq!(q.poll_room(2, &mut cx, 16 * room), Poll::Ready(room));
        q.handed(2, room);
        assert_eq!(q.poll_room(2, &mut cx, 1), Poll::Pending);
        // The budget and the grant, at most.
        assert_eq!(q.held(), (2 * room + grant - 1) as u64);
        // A stream that ends leaves the queue.
        q.ended(3, true);
        let queue = |q: &Queued| {
            q.lock()
                .waiting
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
        };
        assert_eq!(queue(&q), [4, 2]);
        // Stream 4 is woken with a grant and resets without using it: the grant goes to
        // the next.
        q.written(2, grant);
        assert_eq!(queue(&q), [2]);
        q.ended(4, true);
        assert!(queue(&q).is_empty());
        assert_eq!(q.lock().promised, GRANT);
    }
}
