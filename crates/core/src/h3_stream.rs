//! A client's HTTP/3 request stream as a connection for the HTTP/1.1 session, as
//! `h2_stream` makes a client's HTTP/2 stream one: the request head is the session's
//! already (decoded by the `h3` crate, read through `sluice_http::RequestView::h2` over the
//! same `http` parts), so what reads here is the body's data, its trailers kept aside; the
//! response head is given as the transaction made it ([`H3Stream::send_response`]) and
//! leaves as a HEADERS frame, its body as DATA frames, the end as trailers or the stream's
//! FIN.
//!
//! Reads and writes are made by the session's own task: reads poll the stream (no copy
//! but into the stream's small buffer, which holds at most one chunk QUIC handed over);
//! each write sends its data at once. The `h3` crate sends only from `async` calls while
//! the session's head writers and the end of a body are synchronous calls, so a head or an
//! end (trailers, FIN) is polled once on the spot, which sends it whenever QUIC takes it
//! into its buffer (nearly always); if not, a task finishes it ([`drive`]). A send under
//! way owns the sending half ([`Wire`]); a write that is cancelled (a timeout around it)
//! leaves it under way, finished by the next write or by that task.
//!
//! Invariants:
//! - What a connection holds for its client is bounded: each stream has at most one write
//!   handed to QUIC and not taken yet, and its connection's streams at most their
//!   [`Budget`] together (a write waits for room beyond, so the session stops reading from
//!   its server), plus what QUIC's own send window for the connection allows
//!   (`stream::h3`'s transport settings). The worker's gauge (`show activity`'s
//!   `h3_queued`) moves with every budget. Writes waiting for room are woken one at a
//!   time, each passing the turn on as it takes its room while room is left.
//! - Every stream ends on the wire: a message complete ends with its FIN (trailers first
//!   when it has some); one left incomplete when the stream is dropped is reset
//!   (H3_REQUEST_CANCELLED), as is one whose response head never came.
//! - A CONNECT's stream ([`H3Stream::tunnel`]) carries its tunnel's bytes as DATA both
//!   ways once a 2xx answered it.
//! - A send is never dropped before it is done: the sending half dropped in the middle of
//!   a frame would end the stream as if complete (a truncated frame is a connection
//!   error). Data counts in its connection's budget until it is sent, however its write
//!   ends.
//! - All calls come from one task, on the worker that owns the QUIC connection, and the
//!   task that may finish its sends; no lock, no borrow held across an await.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use sluice_http::Framing;

/// The `h3` crate's halves of a request stream over `quinn`.
pub type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
pub type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// What the streams of one connection may have handed QUIC and not had taken yet, together.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    held: Cell<usize>,
    /// Wakes the writes waiting for room, when there are some (`waiting`).
    room: tokio::sync::Notify,
    waiting: Cell<usize>,
    /// The worker's gauge of what all its connections hold.
    gauge: Arc<AtomicU64>,
}

impl Budget {
    pub fn new(limit: usize, gauge: Arc<AtomicU64>) -> Rc<Budget> {
        Rc::new(Budget {
            limit,
            held: Cell::new(0),
            room: tokio::sync::Notify::new(),
            waiting: Cell::new(0),
            gauge,
        })
    }

    /// Whether `n` more bytes fit (always, when nothing is held: a write is never refused
    /// for its size alone).
    fn fits(&self, n: usize) -> bool {
        self.held.get() == 0 || self.held.get() + n <= self.limit
    }

    fn take(&self, n: usize) {
        self.held.set(self.held.get() + n);
        self.gauge.fetch_add(n as u64, Ordering::Relaxed);
        // The turn passes on while room is left.
        self.wake_one();
    }

    fn give(&self, n: usize) {
        self.held.set(self.held.get() - n);
        self.gauge.fetch_sub(n as u64, Ordering::Relaxed);
        self.wake_one();
    }

    /// Wakes one waiting write, if any and if room is left: a write taking its room wakes
    /// the next, so room made wakes as many writes as it holds, one after another, not
    /// every stream of the connection to find most of them still without room.
    fn wake_one(&self) {
        if self.waiting.get() > 0 && self.held.get() < self.limit {
            self.room.notify_one();
        }
    }

    /// Waits until `n` more bytes fit.
    async fn room_for(&self, n: usize) {
        /// Counted among the waiters while it waits, whether it ends or is cancelled.
        struct Waiting<'a>(&'a Cell<usize>);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
            }
        }
        while !self.fits(n) {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.fits(n) {
                return;
            }
            self.waiting.set(self.waiting.get() + 1);
            let _waiting = Waiting(&self.waiting);
            room.await;
        }
    }
}

/// Bytes counted in a connection's budget until dropped (with the send that carries them,
/// however it ends).
struct Held {
    budget: Rc<Budget>,
    n: usize,
}

impl Held {
    fn take(budget: &Rc<Budget>, n: usize) -> Held {
        budget.take(n);
        Held {
            budget: budget.clone(),
            n,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.give(self.n);
    }
}

/// One client request stream, inside the `Conn` of the HTTP/1.1 side.
pub struct H3Stream {
    recv: RefCell<Recv>,
    send: Send,
    /// A CONNECT: a 2xx opens a tunnel whose bytes cross as DATA until either side ends.
    tunnel: bool,
    /// The request came as TLS early data and is served before the handshake ended
    /// (`ssl_fc_has_early`).
    early: bool,
}

struct Recv {
    /// Data read from the stream and not taken yet: `up[read..]`.
    up: Vec<u8>,
    read: usize,
    /// The request body still arriving (`None` once read to its end, or gone).
    body: Option<RecvHalf>,
    /// The DATA frames have ended: what is left to read is the trailers.
    data_done: bool,
    trailers: Option<http::HeaderMap>,
    /// The client reset the stream (or its connection went away).
    gone: bool,
}

/// What goes out on a stream, in order.
enum Op {
    Head(http::Response<()>),
    /// Data, counted in the connection's budget until it is sent.
    Data(Bytes, Held),
    Trailers(http::HeaderMap),
    Finish,
}

/// A send under way: it holds the sending half until it is done.
type InFlight = Pin<Box<dyn Future<Output = (SendHalf, io::Result<()>)>>>;

/// The stream's sending side as the wire sees it, shared with the task that finishes a
/// send nobody waits for ([`drive`]).
struct Wire {
    /// The `h3` crate's sending half, when no send holds it (`None` too once the message
    /// has ended on the wire, or failed).
    half: Cell<Option<SendHalf>>,
    /// The send holding the half. Never dropped before it is done: the half dropped in the
    /// middle of a frame would end the stream as if it were complete.
    in_flight: Cell<Option<InFlight>>,
    /// What is to go after the send under way.
    ops: RefCell<VecDeque<Op>>,
    /// A task is finishing the send under way and what is queued after it.
    driven: Cell<bool>,
    /// The stream is to be reset once the send under way is done.
    reset_after: Cell<bool>,
    /// A send failed (the client stopped the stream, or its connection went away).
    failed: Cell<bool>,
    /// Signalled when the task finishing the sends is done.
    done: tokio::sync::Notify,
    /// DATA bytes sent so far (read while a write is under way: shared).
    sent: Rc<Cell<u64>>,
    /// Kept until the stream's end has been sent.
    hold: Cell<Option<Box<dyn std::any::Any>>>,
}

struct Send {
    wire: Rc<Wire>,
    state: RefCell<SendState>,
    /// The connection's budget, which data handed to QUIC and not taken yet counts in.
    budget: Rc<Budget>,
    /// The connection, whose close ends what waits for the client ([`H3Stream::closed`]).
    conn: quinn::Connection,
}

#[derive(Debug, Default)]
struct SendState {
    /// The response head has been given, and the body it announced.
    head: Option<Framing>,
    /// Bytes still owed by a body of known length.
    remaining: u64,
    /// The message's end is queued (or the stream reset): nothing more is taken.
    closed: bool,
}

fn broken() -> io::Error {
    io::ErrorKind::BrokenPipe.into()
}

impl H3Stream {
    /// A client's request stream, its head read already (`first`: data read of the body
    /// while telling whether it has one); `ended`: the request has no body. Data in flight
    /// counts in `budget`; `conn` is the stream's connection; `hold` is kept until the
    /// stream's end has been sent (by the task its drop may start).
    pub fn answering(
        (send, recv): (SendHalf, RecvHalf),
        (first, ended): (Vec<u8>, bool),
        budget: Rc<Budget>,
        conn: quinn::Connection,
        hold: Box<dyn std::any::Any>,
    ) -> H3Stream {
        H3Stream {
            recv: RefCell::new(Recv {
                up: first,
                read: 0,
                body: (!ended).then_some(recv),
                data_done: false,
                trailers: None,
                gone: false,
            }),
            send: Send {
                wire: Rc::new(Wire {
                    half: Cell::new(Some(send)),
                    in_flight: Cell::new(None),
                    ops: RefCell::default(),
                    driven: Cell::new(false),
                    reset_after: Cell::new(false),
                    failed: Cell::new(false),
                    done: tokio::sync::Notify::new(),
                    sent: Rc::default(),
                    hold: Cell::new(Some(hold)),
                }),
                state: RefCell::default(),
                budget,
                conn,
            },
            tunnel: false,
            early: false,
        }
    }

    /// The request is served as early data, before its connection's handshake ended.
    pub fn served_early(&mut self) {
        self.early = true;
    }

    pub fn is_early(&self) -> bool {
        self.early
    }

    /// The stream asks for a tunnel (a CONNECT): the answer that opens it has no length,
    /// and the tunnel's bytes follow until either side ends.
    pub fn tunnel(&mut self) {
        self.tunnel = true;
    }

    /// Waits for the first of the request body (some data, or its end) and tells whether
    /// the request has one: HTTP/3 says so only by the stream's end, where HTTP/2's
    /// HEADERS carry a flag. Returns what was read, and whether the body ended without
    /// data; `None` when the client reset the stream (the request is not served).
    pub async fn first_data(recv: &mut RecvHalf) -> Option<(Vec<u8>, bool)> {
        match recv.recv_data().await {
            Ok(Some(mut data)) => {
                let mut first = Vec::with_capacity(data.remaining());
                while data.has_remaining() {
                    let chunk = data.chunk();
                    first.extend_from_slice(chunk);
                    let n = chunk.len();
                    data.advance(n);
                }
                Some((first, false))
            }
            Ok(None) => {
                // Trailers alone, without data, are kept with nothing to read: rare enough
                // to read them here and give them up.
                recv.recv_trailers().await.ok()?;
                Some((Vec::new(), true))
            }
            Err(_) => None,
        }
    }

    /// Reads what is there (`WouldBlock` when nothing is yet, 0 at the message's end).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut r = self.recv.borrow_mut();
        let n = r.readable_now(buf.len())?;
        buf[..n].copy_from_slice(&r.up[r.read..r.read + n]);
        r.consume(n);
        Ok(n)
    }

    /// Appends what is there to `buf`, up to its capacity, as [`Self::try_read`].
    pub fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut r = self.recv.borrow_mut();
        let n = r.readable_now(buf.capacity() - buf.len())?;
        buf.extend_from_slice(&r.up[r.read..r.read + n]);
        r.consume(n);
        Ok(n)
    }

    pub fn has_input(&self) -> bool {
        let r = self.recv.borrow();
        r.read < r.up.len()
    }

    /// Resolves once a read may make progress.
    pub async fn readable(&self) {
        std::future::poll_fn(|cx| self.recv.borrow_mut().poll_fill(cx)).await
    }

    /// The trailers that ended the request body, once it was read whole (taken once).
    pub fn take_trailers(&self) -> Option<http::HeaderMap> {
        self.recv.borrow_mut().trailers.take()
    }

    /// The request body was read to its end, whole (not cut by a reset).
    pub fn message_ended(&self) -> bool {
        let r = self.recv.borrow();
        !r.gone && r.body.is_none() && r.read == r.up.len()
    }

    /// Nothing more will be read.
    pub fn ended(&self) -> bool {
        let r = self.recv.borrow();
        r.gone || (r.body.is_none() && r.read == r.up.len())
    }

    /// Resolves once the client is known to be gone: a send to it failed, or its
    /// connection closed.
    pub async fn closed(&self) {
        if !self.send.wire.failed.get() {
            self.send.conn.closed().await;
        }
    }

    /// Gives the response head as the transaction made it; its body follows with
    /// [`Self::write_all`], delimited as `framing` says (a body the stream delimits ends
    /// with [`Self::end_body`]). The head leaves at once ([`Wire::start`]). Fails once the
    /// stream is gone, or if a head was given.
    pub fn send_response(&self, mut res: http::Response<()>, framing: Framing) -> io::Result<()> {
        let framing = if self.tunnel && res.status().is_success() {
            // (RFC 9110 §9.3.6: a CONNECT's 2xx has no content.)
            res.headers_mut().remove(http::header::CONTENT_LENGTH);
            Framing::UntilClose
        } else {
            framing
        };
        let wire = &self.send.wire;
        let mut st = self.send.state.borrow_mut();
        if wire.failed.get() || st.closed {
            return Err(broken());
        }
        if st.head.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a response head sent twice",
            ));
        }
        st.head = Some(framing);
        let mut ops = wire.ops.borrow_mut();
        ops.push_back(Op::Head(res));
        match framing {
            Framing::Length(0) | Framing::None => {
                ops.push_back(Op::Finish);
                st.closed = true;
            }
            Framing::Length(n) => st.remaining = n,
            _ => {}
        }
        drop((ops, st));
        wire.start();
        Ok(())
    }

    /// Sends the next bytes of the response body once the connection's budget has room; a
    /// body of known length ends with its last byte. Cancelled, the send goes on: it is
    /// finished by the next write, or when the stream is dropped.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let (wire, budget) = (&self.send.wire, &self.send.budget);
        budget.room_for(bytes.len()).await;
        if self.send.state.borrow().head.is_none() {
            return Err(broken());
        }
        wire.settle().await?;
        {
            let mut st = self.send.state.borrow_mut();
            if st.closed {
                return Err(broken());
            }
            let held = Held::take(budget, bytes.len());
            let mut ops = wire.ops.borrow_mut();
            ops.push_back(Op::Data(Bytes::copy_from_slice(bytes), held));
            if matches!(st.head, Some(Framing::Length(_))) {
                st.remaining = st.remaining.saturating_sub(bytes.len() as u64);
                if st.remaining == 0 {
                    ops.push_back(Op::Finish);
                    st.closed = true;
                }
            }
        }
        wire.begin()?;
        wire.settle().await
    }

    /// Ends a body the stream delimits: with `trailers`, else with the stream's FIN.
    pub fn end_body(&self, trailers: Option<http::HeaderMap>) {
        let mut st = self.send.state.borrow_mut();
        if st.closed || st.head.is_none() {
            return;
        }
        let mut ops = self.send.wire.ops.borrow_mut();
        if let Some(t) = trailers {
            ops.push_back(Op::Trailers(t));
        }
        ops.push_back(Op::Finish);
        st.closed = true;
        drop((ops, st));
        self.send.wire.start();
    }

    /// A reading of the DATA bytes sent so far.
    pub fn sent_counter(&self) -> Rc<Cell<u64>> {
        self.send.wire.sent.clone()
    }

    /// Nothing more will be written: a body delimited by the stream ends here; a message
    /// not complete is reset.
    pub fn shutdown(&self) {
        let complete = matches!(
            self.send.state.borrow().head,
            Some(Framing::Delimited | Framing::UntilClose)
        );
        match complete {
            true => self.end_body(None),
            false => self.abort(),
        }
    }

    /// Ends the stream at once, with a reset if its message was not complete (after the
    /// send under way, if any: its half is not dropped in the middle of a frame).
    pub fn abort(&self) {
        let mut st = self.send.state.borrow_mut();
        if st.closed {
            return;
        }
        st.closed = true;
        let wire = &self.send.wire;
        // (What was queued goes with the reset; its data's budget is given back.)
        wire.ops.borrow_mut().clear();
        match wire.half.take() {
            Some(mut half) => half.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED),
            None => {
                wire.reset_after.set(true);
                wire.drive();
            }
        }
        if let Some(body) = self.recv.borrow_mut().body.as_mut() {
            body.stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
        }
    }
}

impl std::fmt::Debug for H3Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HTTP/3 stream")
    }
}

impl Drop for H3Stream {
    fn drop(&mut self) {
        // A message left incomplete is reset; what a complete one has left to send (an
        // end, or a send a cancelled write left) goes from a task of its own, which keeps
        // the stream counted by its connection until then.
        self.abort();
        let wire = &self.send.wire;
        if wire.busy() {
            wire.drive();
        }
    }
}

impl Wire {
    /// Starts sending what is queued, from a synchronous call (a head, an end): polled
    /// once on the spot, it usually completes there, QUIC taking it into its buffer; if
    /// not, a task finishes it ([`drive`]), so that it never waits for a write that may
    /// not come (a tunnel's answer, the head of a body its server is slow to send).
    fn start(self: &Rc<Self>) {
        if self.driven.get() {
            return;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // (A send a cancelled write left may be under way: what is queued goes after it.)
        loop {
            if self.begin().is_err() {
                return;
            }
            match self.poll_in_flight(&mut cx) {
                Poll::Pending => return self.drive(),
                Poll::Ready(Err(_)) => return,
                Poll::Ready(Ok(())) if self.ops.borrow().is_empty() => return,
                Poll::Ready(Ok(())) => {}
            }
        }
    }

    /// Whether a send is under way or queued.
    fn busy(&self) -> bool {
        let sending = self.in_flight.take();
        let busy = sending.is_some();
        self.in_flight.set(sending);
        busy || !self.ops.borrow().is_empty()
    }

    /// Makes what is queued the send under way, unless one is already (it goes after).
    fn begin(&self) -> io::Result<()> {
        if self.failed.get() {
            self.ops.borrow_mut().clear();
            return Err(broken());
        }
        let ops = std::mem::take(&mut *self.ops.borrow_mut());
        if ops.is_empty() {
            return Ok(());
        }
        let held = self.in_flight.take();
        if held.is_some() {
            self.in_flight.set(held);
            self.ops.borrow_mut().extend(ops);
            return Ok(());
        }
        let Some(half) = self.half.take() else {
            return Err(broken());
        };
        let sent = self.sent.clone();
        self.in_flight
            .set(Some(Box::pin(send_all(half, ops, sent))));
        Ok(())
    }

    /// Polls the send under way in place; ready (with how it went) once there is none.
    fn poll_in_flight(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(mut sending) = self.in_flight.take() else {
            return Poll::Ready(if self.failed.get() {
                Err(broken())
            } else {
                Ok(())
            });
        };
        match sending.as_mut().poll(cx) {
            Poll::Pending => {
                self.in_flight.set(Some(sending));
                Poll::Pending
            }
            Poll::Ready((half, Ok(()))) => {
                self.half.set(Some(half));
                Poll::Ready(Ok(()))
            }
            Poll::Ready((_, Err(e))) => {
                self.failed.set(true);
                self.ops.borrow_mut().clear();
                Poll::Ready(Err(e))
            }
        }
    }

    /// Waits until no send is under way (finished here, or by its task).
    async fn settle(&self) -> io::Result<()> {
        loop {
            if !self.driven.get() {
                return std::future::poll_fn(|cx| self.poll_in_flight(cx)).await;
            }
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.driven.get() {
                done.await;
            }
        }
    }

    /// Has a task finish the send under way and what is queued, unless one does.
    fn drive(self: &Rc<Self>) {
        if !self.driven.replace(true) {
            tokio::task::spawn_local(drive(self.clone()));
        }
    }
}

/// Finishes the sends of a stream nobody waits for: the one under way, then what is
/// queued, then the reset if one was asked for; the stream's hold goes last.
async fn drive(wire: Rc<Wire>) {
    loop {
        if std::future::poll_fn(|cx| wire.poll_in_flight(cx))
            .await
            .is_err()
        {
            break;
        }
        if wire.ops.borrow().is_empty() || wire.begin().is_err() {
            break;
        }
    }
    if wire.reset_after.get() {
        if let Some(mut half) = wire.half.take() {
            half.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
        }
    }
    wire.driven.set(false);
    wire.done.notify_waiters();
    drop(wire.hold.take());
}

/// Sends `ops` in order, giving the half back with how it went.
async fn send_all(
    mut half: SendHalf,
    ops: VecDeque<Op>,
    sent: Rc<Cell<u64>>,
) -> (SendHalf, io::Result<()>) {
    for op in ops {
        let done = match op {
            Op::Head(res) => half.send_response(res).await,
            Op::Data(data, held) => {
                let n = data.len() as u64;
                let r = half.send_data(data).await;
                drop(held);
                if r.is_ok() {
                    sent.set(sent.get() + n);
                }
                r
            }
            Op::Trailers(t) => half.send_trailers(t).await,
            Op::Finish => half.finish().await,
        };
        if done.is_err() {
            return (half, Err(broken()));
        }
    }
    (half, Ok(()))
}

impl Recv {
    /// How many bytes a read of `want` takes now: an error once the stream is gone,
    /// `WouldBlock` while nothing is there.
    fn readable_now(&self, want: usize) -> io::Result<usize> {
        let unread = self.up.len() - self.read;
        if unread > 0 {
            return Ok(unread.min(want));
        }
        if self.gone {
            return Err(broken());
        }
        match self.body {
            None => Ok(0),
            Some(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn consume(&mut self, n: usize) {
        self.read += n;
        if self.read == self.up.len() {
            self.up.clear();
            self.read = 0;
        }
    }

    /// Ready once there is something to read, the body ended or the stream is gone.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.read < self.up.len() || self.gone {
            return Poll::Ready(());
        }
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(());
        };
        if !self.data_done {
            match body.poll_recv_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(Some(mut data))) => {
                    while data.has_remaining() {
                        let chunk = data.chunk();
                        self.up.extend_from_slice(chunk);
                        let n = chunk.len();
                        data.advance(n);
                    }
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(None)) => self.data_done = true,
                Poll::Ready(Err(_)) => {
                    self.gone = true;
                    self.body = None;
                    return Poll::Ready(());
                }
            }
        }
        match body.poll_recv_trailers(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(trailers)) => {
                self.trailers = trailers;
                self.body = None;
                Poll::Ready(())
            }
            Poll::Ready(Err(_)) => {
                self.gone = true;
                self.body = None;
                Poll::Ready(())
            }
        }
    }
}
