//! A client's HTTP/3 request stream as a connection for the HTTP/1.1 session, as
//! `h2_stream` makes a client's HTTP/2 stream one: the request head is the session's
//! already (decoded by the `h3` crate, read through `sluice_http::RequestView::h2` over the
//! same `http` parts), so what reads here is the body's data, its trailers kept aside; the
//! response head is given as the transaction made it ([`H3Stream::send_response`]) and
//! leaves as a HEADERS frame, its body as DATA frames, the end as trailers or the stream's
//! FIN.
//!
//! Reads are polled by the session's own task (no task, no copy but into the stream's
//! small buffer, which holds at most one chunk QUIC handed over). Writes go through a
//! writer task per stream ([`writer`]), because the `h3` crate sends only from `async`
//! calls while the session's head writers are synchronous: the session queues heads, data
//! and the end, the writer sends them in order.
//!
//! Invariants:
//! - What a connection holds for its client is bounded: its streams queue at most
//!   [`QUEUED_MAX`] bytes of data each for their writers, and at most their connection's
//!   [`Budget`] together (a write waits for room beyond, so the session stops reading from
//!   its server), plus what QUIC's own send window for the connection allows
//!   (`stream::h3`'s transport settings). The worker's gauge (`show activity`'s
//!   `h3_queued`) moves with every budget.
//! - Every stream ends on the wire: a message complete ends with its FIN (trailers first
//!   when it has some); one left incomplete when the stream is dropped is reset
//!   (H3_REQUEST_CANCELLED), as is one whose response head never came.
//! - All calls come from one task, on the worker that owns the QUIC connection; the state
//!   is shared with the writer by `Rc<RefCell>`, no lock, no borrow held across an await.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use sluice_http::Framing;

/// The `h3` crate's halves of a request stream over `quinn`.
pub type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
pub type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// Data a stream may have queued for its writer before a write waits.
pub const QUEUED_MAX: usize = 64 * 1024;

/// What the streams of one connection may have queued for their writers together.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    held: Cell<usize>,
    /// Wakes the writes waiting for room (in the connection's budget, or their stream's).
    room: tokio::sync::Notify,
    /// The worker's gauge of what all its connections hold.
    gauge: Arc<AtomicU64>,
}

impl Budget {
    pub fn new(limit: usize, gauge: Arc<AtomicU64>) -> Rc<Budget> {
        Rc::new(Budget {
            limit,
            held: Cell::new(0),
            room: tokio::sync::Notify::new(),
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
    }

    fn give(&self, n: usize) {
        self.held.set(self.held.get() - n);
        self.gauge.fetch_sub(n as u64, Ordering::Relaxed);
        self.room.notify_waiters();
    }
}

/// One client request stream, inside the `Conn` of the HTTP/1.1 side.
pub struct H3Stream {
    recv: RefCell<Recv>,
    send: Rc<Send>,
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

/// What a stream's writer is given, in order.
#[derive(Debug)]
enum Op {
    Head(http::Response<()>),
    Data(Bytes),
    Trailers(http::HeaderMap),
    Finish,
    Reset,
}

#[derive(Debug)]
struct Send {
    state: RefCell<SendState>,
    /// Wakes the writer: an operation was queued.
    work: tokio::sync::Notify,
    /// Wakes what waits for the writer's failure ([`H3Stream::closed`]).
    failed: tokio::sync::Notify,
    /// The connection's budget, which the stream's queued data counts in.
    budget: Rc<Budget>,
    /// DATA bytes the writer has sent so far.
    sent: Cell<u64>,
}

#[derive(Debug, Default)]
struct SendState {
    ops: VecDeque<Op>,
    /// Data bytes among `ops`.
    queued: usize,
    /// The response head has been given, and the body it announced.
    head: Option<Framing>,
    /// Bytes still owed by a body of known length.
    remaining: u64,
    /// The message's end is queued (or the stream reset): nothing more is taken.
    closed: bool,
    /// The writer failed (the client stopped the stream, or its connection went away).
    failed: bool,
}

fn broken() -> io::Error {
    io::ErrorKind::BrokenPipe.into()
}

impl H3Stream {
    /// A client's request stream, its head read already (`first`: data read of the body
    /// while telling whether it has one); `ended`: the request has no body. The writer task
    /// is started here, on the current worker.
    /// Its queued data counts in `budget`; `hold` is kept until the writer is done.
    pub fn answering(
        send: SendHalf,
        recv: RecvHalf,
        (first, ended): (Vec<u8>, bool),
        budget: Rc<Budget>,
        hold: Box<dyn std::any::Any>,
    ) -> H3Stream {
        let shared = Rc::new(Send {
            state: RefCell::default(),
            work: tokio::sync::Notify::new(),
            failed: tokio::sync::Notify::new(),
            budget,
            sent: Cell::new(0),
        });
        tokio::task::spawn_local(writer(send, shared.clone(), hold));
        H3Stream {
            recv: RefCell::new(Recv {
                up: first,
                read: 0,
                body: (!ended).then_some(recv),
                data_done: false,
                trailers: None,
                gone: false,
            }),
            send: shared,
        }
    }

    /// Waits for the first of the request body (some data, or its end) and tells whether
    /// the request has one: HTTP/3 says so only by the stream's end, where HTTP/2's
    /// HEADERS carry a flag. Returns what was read, and whether the body ended (or the
    /// stream was reset) without data.
    pub async fn first_data(recv: &mut RecvHalf) -> (Vec<u8>, bool) {
        match recv.recv_data().await {
            Ok(Some(mut data)) => {
                let mut first = Vec::with_capacity(data.remaining());
                while data.has_remaining() {
                    let chunk = data.chunk();
                    first.extend_from_slice(chunk);
                    let n = chunk.len();
                    data.advance(n);
                }
                (first, false)
            }
            Ok(None) => {
                // Trailers alone, without data, are kept with nothing to read: rare enough
                // to read them here and give them up.
                let _ = recv.recv_trailers().await;
                (Vec::new(), true)
            }
            Err(_) => (Vec::new(), true),
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

    /// Resolves once the client is known to be gone (its stream stopped, or its
    /// connection closed, as the writer found when sending).
    pub async fn closed(&self) {
        loop {
            let failed = self.send.failed.notified();
            tokio::pin!(failed);
            failed.as_mut().enable();
            if self.send.state.borrow().failed {
                return;
            }
            failed.await;
        }
    }

    /// Gives the response head as the transaction made it; its body follows with
    /// [`Self::write_all`], delimited as `framing` says (a body the stream delimits ends
    /// with [`Self::end_body`]). Fails once the stream is gone, or if a head was given.
    pub fn send_response(&self, res: http::Response<()>, framing: Framing) -> io::Result<()> {
        let mut st = self.send.state.borrow_mut();
        if st.failed || st.closed {
            return Err(broken());
        }
        if st.head.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a response head sent twice",
            ));
        }
        st.ops.push_back(Op::Head(res));
        st.head = Some(framing);
        match framing {
            Framing::Length(0) | Framing::None => {
                st.ops.push_back(Op::Finish);
                st.closed = true;
            }
            Framing::Length(n) => st.remaining = n,
            _ => {}
        }
        drop(st);
        self.send.work.notify_one();
        Ok(())
    }

    /// Queues the next bytes of the response body, once there is room for them; a body
    /// of known length ends with its last byte.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let budget = &self.send.budget;
        loop {
            let room = budget.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut st = self.send.state.borrow_mut();
                if st.failed || st.closed || st.head.is_none() {
                    return Err(broken());
                }
                let stream_fits = st.queued == 0 || st.queued + bytes.len() <= QUEUED_MAX;
                if stream_fits && budget.fits(bytes.len()) {
                    st.queued += bytes.len();
                    budget.take(bytes.len());
                    st.ops.push_back(Op::Data(Bytes::copy_from_slice(bytes)));
                    if matches!(st.head, Some(Framing::Length(_))) {
                        st.remaining = st.remaining.saturating_sub(bytes.len() as u64);
                        if st.remaining == 0 {
                            st.ops.push_back(Op::Finish);
                            st.closed = true;
                        }
                    }
                    drop(st);
                    self.send.work.notify_one();
                    return Ok(());
                }
            }
            room.await;
        }
    }

    /// Ends a body the stream delimits: with `trailers`, else with the stream's FIN.
    pub fn end_body(&self, trailers: Option<http::HeaderMap>) {
        let mut st = self.send.state.borrow_mut();
        if st.closed || st.head.is_none() {
            return;
        }
        if let Some(t) = trailers {
            st.ops.push_back(Op::Trailers(t));
        }
        st.ops.push_back(Op::Finish);
        st.closed = true;
        drop(st);
        self.send.work.notify_one();
    }

    /// A reading of the DATA bytes sent so far.
    pub fn sent_counter(&self) -> impl Fn() -> u64 + 'static {
        let send = self.send.clone();
        move || send.sent.get()
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

    /// Ends the stream at once, with a reset if its message was not complete.
    pub fn abort(&self) {
        let mut st = self.send.state.borrow_mut();
        if st.closed {
            return;
        }
        // What was queued and not sent goes with the reset.
        st.ops.retain(|op| !matches!(op, Op::Data(_)));
        let queued = std::mem::take(&mut st.queued);
        self.send.budget.give(queued);
        st.ops.push_back(Op::Reset);
        st.closed = true;
        drop(st);
        self.send.work.notify_one();
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
        // A message left incomplete is reset; a complete one's end is queued already.
        self.abort();
    }
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

/// Sends what the stream queues, in order, until its end or a failure.
async fn writer(mut half: SendHalf, send: Rc<Send>, _hold: Box<dyn std::any::Any>) {
    loop {
        let work = send.work.notified();
        tokio::pin!(work);
        work.as_mut().enable();
        let op = send.state.borrow_mut().ops.pop_front();
        let Some(op) = op else {
            work.await;
            continue;
        };
        let sent = match op {
            Op::Head(res) => half.send_response(res).await,
            Op::Data(data) => {
                let n = data.len();
                let r = half.send_data(data).await;
                send.state.borrow_mut().queued -= n;
                send.budget.give(n);
                send.sent.set(send.sent.get() + n as u64);
                r
            }
            Op::Trailers(t) => half.send_trailers(t).await,
            Op::Finish => {
                let _ = half.finish().await;
                return;
            }
            Op::Reset => {
                half.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
                return;
            }
        };
        if sent.is_err() {
            let mut st = send.state.borrow_mut();
            st.failed = true;
            st.ops.clear();
            let queued = std::mem::take(&mut st.queued);
            drop(st);
            send.budget.give(queued);
            send.failed.notify_waiters();
            return;
        }
    }
}
