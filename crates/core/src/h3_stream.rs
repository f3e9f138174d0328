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
//! into its buffer (nearly always); if not, it is finished before the next write, or from a
//! task of its own when the stream is dropped.
//!
//! Invariants:
//! - What a connection holds for its client is bounded: each stream has at most one write
//!   handed to QUIC and not taken yet, and its connection's streams at most their
//!   [`Budget`] together (a write waits for room beyond, so the session stops reading from
//!   its server), plus what QUIC's own send window for the connection allows
//!   (`stream::h3`'s transport settings). The worker's gauge (`show activity`'s
//!   `h3_queued`) moves with every budget.
//! - Every stream ends on the wire: a message complete ends with its FIN (trailers first
//!   when it has some); one left incomplete when the stream is dropped is reset
//!   (H3_REQUEST_CANCELLED), as is one whose response head never came.
//! - A CONNECT's stream ([`H3Stream::tunnel`]) carries its tunnel's bytes as DATA both
//!   ways once a 2xx answered it.
//! - All calls come from one task, on the worker that owns the QUIC connection; no lock,
//!   no borrow held across an await (the sending half is taken out of its cell while a
//!   send holds it).

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
    }

    fn give(&self, n: usize) {
        self.held.set(self.held.get() - n);
        self.gauge.fetch_sub(n as u64, Ordering::Relaxed);
        if self.waiting.get() > 0 {
            self.room.notify_waiters();
        }
    }

    /// Waits until `n` more bytes fit.
    async fn room_for(&self, n: usize) {
        while !self.fits(n) {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.fits(n) {
                return;
            }
            self.waiting.set(self.waiting.get() + 1);
            room.await;
            self.waiting.set(self.waiting.get() - 1);
        }
    }
}

/// One client request stream, inside the `Conn` of the HTTP/1.1 side.
pub struct H3Stream {
    recv: RefCell<Recv>,
    send: Send,
    /// Kept until the stream's end has been sent (see `Drop`).
    hold: Cell<Option<Box<dyn std::any::Any>>>,
    /// A CONNECT: a 2xx opens a tunnel whose bytes cross as DATA until either side ends.
    tunnel: bool,
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

/// What is left to send once the session is done with the stream (its end: trailers,
/// FIN, or a reset), in order.
#[derive(Debug)]
enum Op {
    Head(http::Response<()>),
    Trailers(http::HeaderMap),
    Finish,
}

/// A send that did not complete when first tried (QUIC's buffer was full): it holds the
/// sending half until it is done.
type InFlight = Pin<Box<dyn Future<Output = (SendHalf, io::Result<()>)>>>;

struct Send {
    /// The `h3` crate's sending half; `None` while a send holds it, or once the message
    /// has ended on the wire.
    half: Cell<Option<SendHalf>>,
    /// The send holding the half, if one did not complete at once.
    in_flight: Cell<Option<InFlight>>,
    state: RefCell<SendState>,
    /// The connection's budget, which data handed to QUIC and not taken yet counts in.
    budget: Rc<Budget>,
    /// DATA bytes sent so far (read while a write is under way: shared).
    sent: Rc<Cell<u64>>,
    /// The connection, whose close ends what waits for the client ([`H3Stream::closed`]).
    conn: quinn::Connection,
}

#[derive(Debug, Default)]
struct SendState {
    /// What is to go before the next data, or at the end.
    ops: VecDeque<Op>,
    /// The response head has been given, and the body it announced.
    head: Option<Framing>,
    /// Bytes still owed by a body of known length.
    remaining: u64,
    /// The message's end is queued (or the stream reset): nothing more is taken.
    closed: bool,
    /// A send failed (the client stopped the stream, or its connection went away).
    failed: bool,
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
                half: Cell::new(Some(send)),
                in_flight: Cell::new(None),
                state: RefCell::default(),
                budget,
                sent: Rc::default(),
                conn,
            },
            hold: Cell::new(Some(hold)),
            tunnel: false,
        }
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
        if !self.send.state.borrow().failed {
            self.send.conn.closed().await;
        }
    }

    /// Gives the response head as the transaction made it; its body follows with
    /// [`Self::write_all`], delimited as `framing` says (a body the stream delimits ends
    /// with [`Self::end_body`]). The head leaves with the first data, or when the stream
    /// is dropped. Fails once the stream is gone, or if a head was given.
    pub fn send_response(&self, mut res: http::Response<()>, framing: Framing) -> io::Result<()> {
        let framing = if self.tunnel && res.status().is_success() {
            // (RFC 9110 §9.3.6: a CONNECT's 2xx has no content.)
            res.headers_mut().remove(http::header::CONTENT_LENGTH);
            Framing::UntilClose
        } else {
            framing
        };
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
        self.push();
        Ok(())
    }

    /// Starts sending what is queued (a head, an end) at once, as the session's head
    /// writers and the end of a body are synchronous: it usually completes on the spot,
    /// QUIC taking it into its buffer; if not, it is finished before the next write, or
    /// from a task of its own when the stream is dropped. (A head never waits for the
    /// body: a tunnel's answer, or a response whose server is slow to send its body,
    /// reaches the client at once.)
    fn push(&self) {
        let ops = std::mem::take(&mut self.send.state.borrow_mut().ops);
        if ops.is_empty() {
            return;
        }
        let Some(half) = self.send.half.take() else {
            // A send is under way: these go after it.
            let mut st = self.send.state.borrow_mut();
            for op in ops.into_iter().rev() {
                st.ops.push_front(op);
            }
            return;
        };
        let mut sending: InFlight = Box::pin(send_all(half, ops));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match sending.as_mut().poll(&mut cx) {
            Poll::Ready((half, sent)) => self.settled(half, sent),
            Poll::Pending => self.send.in_flight.set(Some(sending)),
        }
    }

    /// A send is done: the half is back, or the stream failed.
    fn settled(&self, half: SendHalf, sent: io::Result<()>) {
        match sent {
            Ok(()) => self.send.half.set(Some(half)),
            Err(_) => self.send.state.borrow_mut().failed = true,
        }
    }

    /// Waits for a send under way, if any.
    async fn settle(&self) {
        if let Some(sending) = self.send.in_flight.take() {
            let (half, sent) = sending.await;
            self.settled(half, sent);
        }
    }

    /// Sends the next bytes of the response body (the head first, if it has not left),
    /// once the connection's budget has room; a body of known length ends with its last
    /// byte.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let budget = &self.send.budget;
        budget.room_for(bytes.len()).await;
        {
            let st = self.send.state.borrow();
            if st.failed || st.closed || st.head.is_none() {
                return Err(broken());
            }
        }
        self.settle().await;
        let Some(mut half) = self.send.half.take() else {
            return Err(broken());
        };
        budget.take(bytes.len());
        let sent = self.send_data(&mut half, bytes).await;
        budget.give(bytes.len());
        match sent {
            Ok(()) => {
                self.send.half.set(Some(half));
                Ok(())
            }
            Err(e) => {
                self.send.state.borrow_mut().failed = true;
                Err(e)
            }
        }
    }

    /// What [`Self::write_all`] sends, with `half` taken: what is queued before the data,
    /// the data, and the end if the data completes the body.
    async fn send_data(&self, half: &mut SendHalf, bytes: &[u8]) -> io::Result<()> {
        let before = std::mem::take(&mut self.send.state.borrow_mut().ops);
        for op in before {
            send(half, op).await?;
        }
        half.send_data(Bytes::copy_from_slice(bytes))
            .await
            .map_err(|_| broken())?;
        self.send
            .sent
            .set(self.send.sent.get() + bytes.len() as u64);
        let complete = {
            let mut st = self.send.state.borrow_mut();
            let counted = matches!(st.head, Some(Framing::Length(_)));
            st.remaining = st.remaining.saturating_sub(bytes.len() as u64);
            let complete = counted && st.remaining == 0;
            st.closed |= complete;
            complete
        };
        if complete {
            send(half, Op::Finish).await?;
        }
        Ok(())
    }

    /// Ends a body the stream delimits: with `trailers`, else with the stream's FIN (sent
    /// when the stream is dropped).
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
        self.push();
    }

    /// A reading of the DATA bytes sent so far.
    pub fn sent_counter(&self) -> impl Fn() -> u64 + 'static {
        let sent = self.send.sent.clone();
        move || sent.get()
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
        st.closed = true;
        st.ops.clear();
        if let Some(mut half) = self.send.half.take() {
            half.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
        }
        if let Some(sending) = self.send.in_flight.take() {
            // (Dropped, the half would end the stream as if complete.)
            tokio::task::spawn_local(async move {
                let (mut half, _) = sending.await;
                half.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
            });
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
        // A message left incomplete is reset; what a complete one has left to send (its
        // head when it has no body, its trailers, its FIN) goes from a task of its own.
        self.abort();
        let Some(sending) = self.send.in_flight.take() else {
            return;
        };
        let ops = std::mem::take(&mut self.send.state.borrow_mut().ops);
        let hold = self.hold.take();
        tokio::task::spawn_local(async move {
            let (half, sent) = sending.await;
            if sent.is_ok() {
                let _ = send_all(half, ops).await;
            }
            drop(hold);
        });
    }
}

/// Sends `ops` in order, giving the half back with how it went.
async fn send_all(mut half: SendHalf, ops: VecDeque<Op>) -> (SendHalf, io::Result<()>) {
    for op in ops {
        if let Err(e) = send(&mut half, op).await {
            return (half, Err(e));
        }
    }
    (half, Ok(()))
}

/// Sends one of the stream's operations.
async fn send(half: &mut SendHalf, op: Op) -> io::Result<()> {
    let sent = match op {
        Op::Head(res) => half.send_response(res).await,
        Op::Trailers(t) => half.send_trailers(t).await,
        Op::Finish => half.finish().await,
    };
    sent.map_err(|_| broken())
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
