//! An HTTP/2 stream as an HTTP/1.1 connection, for the HTTP/1.1 code on either end of it:
//! - a client's stream ([`H2Stream::answering`]) is read by the session that serves it: its
//!   request head is the session's already (as the `h2` crate decoded it), so what reads
//!   here is its body as it arrives; its response head is given as the transaction made it
//!   ([`H2Stream::send_response`], the proxy's own answers included: the stream never
//!   reads a head from text) and leaves as HEADERS; its body leaves as DATA;
//! - a stream to a server ([`H2Stream::asking`]) is given its request head as the
//!   transaction prepared it ([`ServerRequest`], no text) and sent as HEADERS, then its body
//!   as DATA; the response head is taken as the `h2` crate decoded it
//!   ([`H2Stream::response`]), then its body's data (the stream carries one exchange and
//!   is never pooled; its connection, `pool::h2`'s link, is what lasts).
//! - a client's stream that opens a tunnel carries its bytes both ways, raw, once the
//!   server agreed ([`Tunnel`]): a WebSocket (RFC 8441: CONNECT with `:protocol
//!   websocket`) reaches the session as the GET with `Upgrade: websocket` it stands for in
//!   HTTP/1.1 (decoded, as HAProxy's HTX has it: [`as_websocket_upgrade`]) and the
//!   server's 101 leaves as a 200; a plain CONNECT reaches it as the CONNECT it is and its
//!   2xx leaves as it is.
//!
//! No task and no buffer stand between the two: each call of the `transport::Conn` that
//! holds the stream works on the stream itself. `heads` translates the heads; `body`
//! delimits what is written (by a length, the stream's end, or, for the proxy's own pages
//! read from text, chunks).
//!
//! Bodies cross as their data alone: what is read of a stream is the DATA's bytes, and a
//! body without a length ([`Framing::Delimited`]) ends with the stream, its trailers kept
//! aside ([`H2Stream::take_trailers`], [`H2Stream::message_ended`]); what is written is
//! data, ended by [`H2Stream::end_body`] with the trailers to send. The HTTP/1 side frames
//! (or unframes) bodies itself; no chunked framing is made up for a stream to undo.
//!
//! Invariants:
//! - DATA is sent only as the peer's flow control allows, and credit for received DATA is
//!   given back only once the HTTP/1.1 side has taken the bytes: a slow side slows the
//!   other, nothing piles up. A client's streams hand the crate DATA only within their
//!   connection's send budget ([`Queued`]), so a client that does not read holds little.
//! - A body without a length crosses as data and its end, its trailers aside, so trailers
//!   pass both ways (chunked on the HTTP/1.1 side).
//! - A stream the peer reset (or whose connection went away) reads as ended and refuses
//!   writes: a client's request not read yet is never read, so it never reaches a server.
//!   A server's stream that the server refused unprocessed (REFUSED_STREAM, RFC 9113
//!   §8.7), or that never opened because the connection takes no more, reads as the
//!   [`Refused`] error instead, so that the transaction may send the request again.
//! - Every stream ends on the wire: one left unfinished is reset (a body delimited by the
//!   close ends normally).
//! - All calls come from one task, on the worker that owns the connection: the state is
//!   shared with the stream's watch by `Rc<RefCell>`, no lock; no borrow is held across an
//!   await or a call out of this module.

mod body;
mod heads;
mod queued;

use std::cell::{RefCell, RefMut};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use sluice_http::Framing;

use self::body::BodyReader;
pub use self::body::{push_last_chunk, trailers_of_lines};
pub use self::heads::{
    as_websocket_upgrade, response_head, tunnel, FieldStore, RequestFields, ServerRequest, Tunnel,
};
pub use self::queued::Queued;

/// One stream, inside the `Conn` of the HTTP/1.1 side.
#[derive(Debug)]
pub struct H2Stream {
    state: Rc<RefCell<State>>,
}

/// What serves a client's stream: tells when the client reset it before its answer.
#[derive(Debug)]
pub struct ResetWatch {
    state: Rc<RefCell<State>>,
}

/// Who ended the stream early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// The peer reset it, or its connection went away.
    Peer,
    /// The HTTP/1.1 side gave up on it.
    Local,
}

#[derive(Debug)]
struct State {
    /// Bytes for the HTTP/1.1 side to read: the body as framed for it (a tunnel's bytes
    /// as they come).
    up: Vec<u8>,
    read: usize,
    /// The server's response, not here yet.
    awaiting: Option<ResponseFuture>,
    /// The body still arriving; `None` once its end was framed into `up`.
    body: Option<RecvStream>,
    /// The body is delimited by the stream (its sender gave no length): its trailers are
    /// read too, and kept aside ([`H2Stream::take_trailers`]).
    delimited: bool,
    /// The trailers that ended the body, until the other side takes them.
    trailers_in: Option<http::HeaderMap>,
    /// DATA bytes in `up` whose flow-control credit is still owed to the peer.
    owed: usize,
    down: Down,
    /// The request is HEAD: its response has no body, whatever its fields say.
    head_request: bool,
    /// This side opened the stream (towards a server).
    asking: bool,
    /// The response has ended on the wire: what the client does with the stream now
    /// changes nothing.
    answered: bool,
    gone: Option<Gone>,
    /// The server did not process the stream (see [`Refused`]).
    refused: bool,
    /// A stream that asks for a tunnel. A client's: the answer that opens it leaves as a
    /// 2xx. A server's: its 2xx reads as what opens it over HTTP/1.1. Either way the
    /// stream then carries the tunnel.
    tunnel: Option<Tunnel>,
    /// A WebSocket to a server: the `Sec-WebSocket-Accept` its HTTP/1.1 client expects.
    accept: Option<String>,
    /// DATA bytes sent so far: a write that keeps sending is not idle, however long the
    /// peer's flow control makes it.
    sent: Rc<std::cell::Cell<u64>>,
    /// A client's stream: its connection's queued DATA and budget, and its own id there.
    queued: Option<(Arc<Queued>, u32)>,
    /// The task its connection wakes should the stream break ([`Queued::poll_broken`]).
    watched: Option<std::task::Waker>,
}

#[derive(Debug)]
enum Down {
    /// A client's stream: its response head is awaited ([`H2Stream::send_response`]).
    Response { respond: SendResponse<Bytes> },
    /// A stream to a server, not open yet: it opens with [`H2Stream::send_request`].
    Request {
        sender: SendRequest<Bytes>,
        to: Server,
    },
    /// The head has left; the body goes as its framing says.
    Body {
        send: SendStream<Bytes>,
        reader: BodyReader,
        /// Bytes written and not sent yet (a part of a chunk's framing waits for the rest).
        input: Bytes,
    },
    /// The message has ended on the wire.
    Done,
}

/// What a request to a server needs beyond its head: the `:scheme`, the authority when
/// the request names none (HTTP/1.0 without `Host`), and whether the server's SETTINGS are
/// known yet.
#[derive(Debug)]
struct Server {
    tls: bool,
    addr: SocketAddr,
    settings: Option<Arc<PeerSettings>>,
}

/// Whether a server connection's first SETTINGS has arrived: until it has, the connection
/// cannot tell whether the server allows extended CONNECT (RFC 8441), which a WebSocket
/// needs. The connection's task marks it known ([`PeerSettings::learned`]) once a PING
/// sent after the preface comes back, since SETTINGS is the first frame a server sends.
#[derive(Debug, Default)]
pub struct PeerSettings {
    known: std::sync::atomic::AtomicBool,
    learned: tokio::sync::Notify,
}

impl PeerSettings {
    /// The server's SETTINGS (or the connection's end) has been seen.
    pub fn learned(&self) {
        self.known.store(true, std::sync::atomic::Ordering::Release);
        self.learned.notify_waiters();
    }

    fn is_known(&self) -> bool {
        self.known.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn known(&self) {
        loop {
            let learned = self.learned.notified();
            if self.is_known() {
                return;
            }
            learned.await;
        }
    }
}

/// A server's answer on a stream to it ([`H2Stream::response`]).
#[derive(Debug)]
pub struct ServerAnswer {
    pub parts: http::response::Parts,
    /// The stream carries no body.
    pub ended: bool,
    /// The tunnel this answer opened (a 2xx to a CONNECT): the stream now carries its bytes.
    pub opened: Option<Tunnel>,
    /// For a WebSocket opened: the `Sec-WebSocket-Accept` its HTTP/1.1 client expects.
    pub accept: Option<String>,
}

/// Body bytes taken out of what was written, ready to leave.
struct Outgoing {
    data: Bytes,
    /// The body ends with them.
    last: bool,
    trailers: Option<http::HeaderMap>,
}

/// A stream to a server that the server did not process: it refused it (REFUSED_STREAM) or
/// it never opened. Sending the request again cannot repeat anything the server did.
#[derive(Debug, thiserror::Error)]
#[error("the server did not process the stream")]
pub struct Refused;

/// Whether `e` is a stream's [`Refused`].
pub fn refused(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Refused>())
}

fn refused_error() -> io::Error {
    io::Error::other(Refused)
}

fn broken() -> io::Error {
    io::ErrorKind::BrokenPipe.into()
}

fn invalid(why: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl H2Stream {
    /// A client's stream, its request as the `h2` crate gave it, answered on `respond`. Its
    /// head is not read here (the session has it as `parts`), only its body, or a
    /// tunnel's bytes ([`Tunnel`]).
    pub fn answering(
        parts: &http::request::Parts,
        body: RecvStream,
        respond: SendResponse<Bytes>,
        queued: Arc<Queued>,
    ) -> (H2Stream, ResetWatch) {
        let id = respond.stream_id().as_u32();
        let ended = body.is_end_stream();
        let tunnel = heads::tunnel(parts);
        // The request's head is the session's already (`sluice_http::RequestView::h2`):
        // what is read here is its body's data (its trailers aside when the client gave no
        // length), or a tunnel's bytes once the server has opened it.
        let delimited =
            tunnel.is_none() && !ended && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
        let state = State::new(
            Vec::new(),
            (!ended).then_some(body),
            delimited,
            Down::Response { respond },
        );
        let state = Rc::new(RefCell::new(State {
            head_request: parts.method == http::Method::HEAD,
            tunnel,
            queued: Some((queued, id)),
            ..state
        }));
        let watch = ResetWatch {
            state: state.clone(),
        };
        (H2Stream { state }, watch)
    }

    /// A stream to be opened on a server connection (`sender`) once a request is written;
    /// `tls` and `addr` are that connection's, `settings` tells when the server's SETTINGS
    /// are known (`None`: the request never waits for them).
    pub fn asking(
        sender: SendRequest<Bytes>,
        (tls, addr): (bool, SocketAddr),
        settings: Option<Arc<PeerSettings>>,
    ) -> H2Stream {
        let down = Down::Request {
            sender,
            to: Server {
                tls,
                addr,
                settings,
            },
        };
        H2Stream {
            state: Rc::new(RefCell::new(State::new(Vec::new(), None, false, down))),
        }
    }

    fn lock(&self) -> RefMut<'_, State> {
        lock(&self.state)
    }

    /// Reads what is there (`WouldBlock` when nothing is yet, 0 at the message's end).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut st = self.lock();
        let n = st.readable_now(buf.len())?;
        buf[..n].copy_from_slice(&st.unread()[..n]);
        st.consume(n);
        Ok(n)
    }

    /// Appends what is there to `buf`, up to its capacity, as [`Self::try_read`].
    pub fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut st = self.lock();
        let n = st.readable_now(buf.capacity() - buf.len())?;
        buf.extend_from_slice(&st.unread()[..n]);
        st.consume(n);
        Ok(n)
    }

    pub fn has_input(&self) -> bool {
        !self.lock().unread().is_empty()
    }

    /// The server's final answer to the request sent ([`Self::send_request`]): its head as
    /// the `h2` crate decoded it. What is read afterwards is its body's data (its trailers
    /// aside), or the bytes of the tunnel it opened.
    /// A stream the server refused unprocessed fails with [`Refused`]; one reset or gone
    /// with `UnexpectedEof`.
    pub async fn response(&self) -> io::Result<ServerAnswer> {
        std::future::poll_fn(|cx| self.lock().poll_response(cx)).await
    }

    /// Resolves once a read may make progress.
    pub async fn readable(&self) {
        std::future::poll_fn(|cx| self.lock().poll_fill(cx)).await
    }

    /// Resolves once the peer has reset the stream (or its connection went away). The end
    /// of the message is not a close: an HTTP/2 message ends its side as a matter of course.
    /// Before a stream to a server opens, and once this side's message has ended, nothing
    /// is watched and no waker registered: await it beside something that registers one.
    pub async fn closed(&self) {
        std::future::poll_fn(|cx| self.lock().poll_peer_gone(cx)).await
    }

    /// The trailers that ended a body delimited by the stream, once it was read whole
    /// (taken once).
    pub fn take_trailers(&self) -> Option<http::HeaderMap> {
        self.lock().trailers_in.take()
    }

    /// The incoming message was read to its end, whole (not cut by a reset).
    pub fn message_ended(&self) -> bool {
        let st = self.lock();
        st.gone.is_none() && st.awaiting.is_none() && st.body.is_none() && st.unread().is_empty()
    }

    /// Nothing more will be read: the stream is gone, or its message was read to the end.
    pub fn ended(&self) -> bool {
        let st = self.lock();
        st.gone.is_some() || (st.awaiting.is_none() && st.body.is_none() && st.unread().is_empty())
    }

    /// Opens a stream to a server with the request head `req`, once the connection takes
    /// one more stream (and, for a WebSocket on a connection so new that whether the server
    /// allows it is not known, once the server's SETTINGS are). Its body follows with
    /// [`Self::write_all`], framed as `req.framing` says.
    pub async fn send_request(&self, req: &ServerRequest) -> io::Result<()> {
        let settings = self.lock().settings_awaited(req);
        if let Some(settings) = settings {
            settings.known().await;
        }
        std::future::poll_fn(|cx| self.lock().poll_request(cx, req)).await
    }

    /// Sends a client's response head as the transaction made it (no text); its body
    /// follows with [`Self::write_all`], delimited as `framing` says (a body the stream
    /// delimits ends with [`Self::end_body`], which sends its trailers). Fails once the stream is gone, or if a head was sent already.
    ///
    /// The answer that opens the stream's tunnel leaves as a 2xx without a length, and the
    /// tunnel's bytes follow as DATA until either side ends (its end is no reset to count
    /// against the client): a WebSocket's 101 is a 200 over HTTP/2, without the key's
    /// answer (RFC 8441 §5); a CONNECT's 2xx has no content (RFC 9110 §9.3.6).
    pub fn send_response(&self, mut res: http::Response<()>, framing: Framing) -> io::Result<()> {
        let mut st = self.lock();
        if st.gone.is_some() {
            return Err(broken());
        }
        let taken = std::mem::replace(&mut st.down, Down::Done);
        let Down::Response { respond } = taken else {
            st.down = taken;
            return Err(invalid("a response head sent twice"));
        };
        let status = res.status().as_u16();
        let framing = if st.tunnel.is_some_and(|t| t.opened_by(status)) {
            if status == 101 {
                *res.status_mut() = http::StatusCode::OK;
                res.headers_mut().remove("sec-websocket-accept");
            }
            res.headers_mut().remove(http::header::CONTENT_LENGTH);
            st.answered = true;
            Framing::UntilClose
        } else {
            framing
        };
        let sent = st.respond_with(respond, res, framing, Bytes::new());
        if sent.is_err() && st.gone.is_none() {
            st.gone = Some(Gone::Local);
        }
        sent
    }

    /// Writes the next bytes of the message's body (a response's once its head was sent,
    /// a request's), as flow control allows. Fails once the stream is gone.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        // A client's stream waits for room in its connection's send budget before it takes
        // the bytes in (a copy): while the client does not read, they stay in the caller's
        // buffer alone.
        std::future::poll_fn(|cx| self.lock().poll_room(cx)).await?;
        self.lock().take_in(bytes)?;
        let Some(mut out) = self.lock().take_body()? else {
            return Ok(());
        };
        while !out.data.is_empty() {
            std::future::poll_fn(|cx| self.lock().poll_send(cx, &mut out)).await?;
        }
        if out.last {
            self.lock().finish(out.trailers.take());
        }
        Ok(())
    }

    /// Ends a body delimited by the stream ([`Framing::Delimited`]) once its data was
    /// written: with `trailers`, or an empty last DATA frame.
    pub fn end_body(&self, trailers: Option<http::HeaderMap>) {
        self.lock().finish(trailers);
    }

    /// A reading of the DATA bytes sent so far on the stream, usable while the stream is
    /// written to (see [`crate::transport::Conn::progress`]).
    pub fn sent_counter(&self) -> Rc<std::cell::Cell<u64>> {
        self.lock().sent.clone()
    }

    /// Nothing more will be written: a body delimited by the close ends here; a message
    /// not complete is reset.
    pub fn shutdown(&self) {
        self.lock().end();
    }

    /// Ends the stream at once, with a reset if its message was not complete.
    pub fn abort(&self) {
        let mut st = self.lock();
        st.reset();
        st.gone.get_or_insert(Gone::Local);
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        let mut st = self.lock();
        st.end();
        if let Some((q, id)) = st.queued.take() {
            // A reset stream's queued DATA is dropped by the crate; a whole one's leaves.
            q.ended(id, st.gone.is_some());
        }
    }
}

impl ResetWatch {
    /// Ready if the client resets the stream (or its connection goes away) before its
    /// response has ended; never after (a client that stops sending a body it was
    /// answered early for is not resetting anything). Never ready registers no waker:
    /// the task polls it beside the session, which does.
    pub fn poll_reset(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = lock(&self.state);
        if st.answered {
            return Poll::Pending;
        }
        st.poll_peer_gone(cx)
    }
}

fn lock(s: &RefCell<State>) -> RefMut<'_, State> {
    s.borrow_mut()
}

impl State {
    fn new(up: Vec<u8>, body: Option<RecvStream>, delimited: bool, down: Down) -> State {
        State {
            asking: matches!(down, Down::Request { .. }),
            up,
            read: 0,
            awaiting: None,
            body,
            delimited,
            trailers_in: None,
            owed: 0,
            down,
            head_request: false,
            answered: false,
            gone: None,
            refused: false,
            tunnel: None,
            accept: None,
            sent: Rc::default(),
            queued: None,
            watched: None,
        }
    }

    fn unread(&self) -> &[u8] {
        &self.up[self.read..]
    }

    /// How many bytes a read of at most `room` takes now.
    fn readable_now(&self, room: usize) -> io::Result<usize> {
        if self.refused {
            return Err(refused_error());
        }
        if self.gone.is_some() {
            return Ok(0);
        }
        // (A response's head is taken with `response`: reading before it reads nothing.)
        let more = self.body.is_some();
        match self.unread().len().min(room) {
            0 if room > 0 && more => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn consume(&mut self, n: usize) {
        self.read += n;
        if self.read < self.up.len() {
            return;
        }
        self.up.clear();
        self.read = 0;
        // The HTTP/1.1 side has taken the DATA: the peer may send as much again.
        if let Some(body) = self.body.as_mut().filter(|_| self.owed > 0) {
            let _ = body.flow_control().release_capacity(self.owed);
        }
        self.owed = 0;
    }

    /// Takes the server's answer once it comes (see [`H2Stream::response`]).
    fn poll_response(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<ServerAnswer>> {
        if self.refused {
            return Poll::Ready(Err(refused_error()));
        }
        let Some(response) = self.awaiting.as_mut().filter(|_| self.gone.is_none()) else {
            return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
        };
        let got = std::task::ready!(Pin::new(response).poll(cx));
        self.awaiting = None;
        let res = match got {
            Ok(res) => res,
            Err(e) => {
                self.refused = e.reason() == Some(Reason::REFUSED_STREAM);
                self.gone = Some(Gone::Peer);
                return Poll::Ready(Err(if self.refused {
                    refused_error()
                } else {
                    io::ErrorKind::UnexpectedEof.into()
                }));
            }
        };
        let (parts, body) = res.into_parts();
        let ended = body.is_end_stream();
        let opened = self.tunnel.filter(|_| parts.status.is_success());
        let status = parts.status;
        let bodiless = self.head_request || status == 204 || status == 304;
        // A tunnel's bytes cross raw; so does a body's data, its trailers aside when it has
        // no length.
        self.delimited = opened.is_none()
            && !bodiless
            && !ended
            && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
        self.body = (!ended).then_some(body);
        let accept = self
            .accept
            .take()
            .filter(|_| opened == Some(Tunnel::WebSocket));
        Poll::Ready(Ok(ServerAnswer {
            parts,
            ended,
            opened,
            accept,
        }))
    }

    /// Puts the next part of the incoming message into `up` once what was there has been
    /// read: the body's data (a response's once its head was taken), its trailers aside. Ready when there is
    /// something to read, or the message or the stream is over.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.gone.is_some() || !self.unread().is_empty() {
            return Poll::Ready(());
        }
        if self.awaiting.is_some() {
            return Poll::Ready(());
        }
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(());
        };
        loop {
            match std::task::ready!(body.poll_data(cx)) {
                Some(Ok(data)) if data.is_empty() => {}
                Some(Ok(data)) => {
                    self.up.extend_from_slice(&data);
                    self.owed = data.len();
                    return Poll::Ready(());
                }
                Some(Err(_)) => {
                    self.gone = Some(Gone::Peer);
                    return Poll::Ready(());
                }
                None => break,
            }
        }
        if self.delimited {
            match std::task::ready!(body.poll_trailers(cx)) {
                Ok(trailers) => self.trailers_in = trailers.filter(|t| !t.is_empty()),
                Err(_) => {
                    self.gone = Some(Gone::Peer);
                    return Poll::Ready(());
                }
            }
        }
        self.body = None;
        Poll::Ready(())
    }

    /// Ready once the connection's send budget has room (at once for a stream to a
    /// server, or one whose head has not left); an error once the peer is gone.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.gone.is_some() {
            return Poll::Ready(Err(broken()));
        }
        let (Some((q, _)), Down::Body { .. }) = (&self.queued, &self.down) else {
            return Poll::Ready(Ok(()));
        };
        if q.poll_room(cx, 1).is_ready() {
            return Poll::Ready(Ok(()));
        }
        // Waiting: a reset of the stream ends the wait.
        match self.poll_peer_gone(cx) {
            Poll::Ready(()) => Poll::Ready(Err(broken())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_peer_gone(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.gone {
            Some(Gone::Peer) => return Poll::Ready(()),
            Some(Gone::Local) => return Poll::Pending,
            None => {}
        }
        // A client's stream its connection's scan found broken is reset here, its error the
        // client's. (Its connection is asked only when its task is not known to it yet, or
        // some stream broke: this is polled at every wake of the task.)
        if let Some((q, id)) = &self.queued {
            let known = self
                .watched
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()));
            if !known || q.any_broken() {
                if q.poll_broken(*id, cx).is_ready() {
                    self.reset_with(Reason::PROTOCOL_ERROR);
                    self.gone = Some(Gone::Peer);
                    return Poll::Ready(());
                }
                self.watched = Some(cx.waker().clone());
            }
        }
        let reset = match &mut self.down {
            Down::Response { respond, .. } => respond.poll_reset(cx),
            Down::Body { send, .. } => send.poll_reset(cx),
            // Not open yet, or the message has left: nothing to watch here.
            Down::Request { .. } | Down::Done => return Poll::Pending,
        };
        let _ = std::task::ready!(reset);
        self.gone = Some(Gone::Peer);
        Poll::Ready(())
    }

    /// Takes in written bytes, behind the body not sent yet.
    fn take_in(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.gone.is_some() {
            return Err(broken());
        }
        match &mut self.down {
            Down::Request { .. } => return Err(invalid("a request body before its head")),
            Down::Response { .. } => return Err(invalid("a response body before its head")),
            Down::Body { input, .. } if input.is_empty() => *input = Bytes::copy_from_slice(bytes),
            Down::Body { input, .. } => *input = [&input[..], bytes].concat().into(),
            // Bytes after the message's end go nowhere, as on a connection that closed.
            Down::Done => {}
        }
        Ok(())
    }

    /// The server's SETTINGS to wait for before the request head leaves: only for a
    /// WebSocket on a connection so new that whether the server allows it is not known.
    fn settings_awaited(&self, req: &ServerRequest) -> Option<Arc<PeerSettings>> {
        let Down::Request { to, sender } = &self.down else {
            return None;
        };
        let settings = to.settings.as_ref().filter(|s| !s.is_known())?;
        heads::tunnel_asked(req, true)?;
        (!sender.is_extended_connect_protocol_enabled()).then(|| settings.clone())
    }

    /// Opens the stream with `req` once the server connection takes another stream.
    fn poll_request(&mut self, cx: &mut Context<'_>, req: &ServerRequest) -> Poll<io::Result<()>> {
        let Down::Request { sender, .. } = &mut self.down else {
            return Poll::Ready(Err(invalid("a request head sent twice")));
        };
        if std::task::ready!(sender.poll_ready(cx)).is_err() {
            // The connection takes no more streams: this one never left.
            self.gone = Some(Gone::Peer);
            self.refused = true;
            return Poll::Ready(Err(refused_error()));
        }
        let sent = self.request(req);
        if sent.is_err() && self.gone.is_none() {
            self.gone = Some(Gone::Local);
        }
        Poll::Ready(sent)
    }

    /// Sends the response head `res` on `respond`; its body follows as `framing` says,
    /// starting with the bytes of `input`.
    fn respond_with(
        &mut self,
        mut respond: SendResponse<Bytes>,
        res: http::Response<()>,
        framing: Framing,
        input: Bytes,
    ) -> io::Result<()> {
        let no_body = matches!(framing, Framing::None | Framing::Length(0));
        let send = respond.send_response(res, no_body).map_err(|_| {
            self.gone = Some(Gone::Peer);
            broken()
        })?;
        if no_body {
            self.answered = true;
        } else {
            self.down = Down::Body {
                send,
                reader: BodyReader::new(framing),
                input,
            };
        }
        Ok(())
    }

    /// Opens the stream with the request head `req`; the server connection has room for it.
    fn request(&mut self, req: &ServerRequest) -> io::Result<()> {
        let Down::Request { mut sender, to } = std::mem::replace(&mut self.down, Down::Done) else {
            unreachable!("called while the request head is awaited")
        };
        let tunnel = heads::tunnel_asked(req, sender.is_extended_connect_protocol_enabled());
        let head = heads::request(req, (to.tls, to.addr), tunnel)
            .ok_or_else(|| invalid("a request HTTP/2 cannot carry"))?;
        self.head_request = req.method == http::Method::HEAD;
        self.tunnel = tunnel;
        if tunnel == Some(Tunnel::WebSocket) {
            self.accept = req
                .fields
                .get(http::header::SEC_WEBSOCKET_KEY)
                .map(|k| heads::websocket_accept(k.as_bytes()));
        }
        // A tunnel's bytes go as DATA until this side ends.
        let framing = if tunnel.is_some() {
            Framing::UntilClose
        } else {
            req.framing
        };
        let no_body = matches!(framing, Framing::None | Framing::Length(0));
        let (response, send) = sender.send_request(head, no_body).map_err(|e| {
            self.gone = Some(Gone::Peer);
            io::Error::other(e)
        })?;
        self.awaiting = Some(response);
        if !no_body {
            self.down = Down::Body {
                send,
                reader: BodyReader::new(framing),
                input: Bytes::new(),
            };
        }
        Ok(())
    }

    /// The body data in what was written so far, if any.
    fn take_body(&mut self) -> io::Result<Option<Outgoing>> {
        let Down::Body { reader, input, .. } = &mut self.down else {
            return Ok(None);
        };
        let (data, last) = match reader.take(input) {
            Ok(taken) => taken,
            Err(e) => {
                self.reset();
                self.gone = Some(Gone::Local);
                return Err(invalid(e));
            }
        };
        if data.is_empty() && !last {
            return Ok(None);
        }
        let trailers = if last { reader.trailers() } else { None };
        Ok(Some(Outgoing {
            data,
            last,
            trailers,
        }))
    }

    /// Sends as much of `out` as the peer's flow control allows now.
    fn poll_send(&mut self, cx: &mut Context<'_>, out: &mut Outgoing) -> Poll<io::Result<()>> {
        let Down::Body { send, .. } = &mut self.down else {
            return Poll::Ready(Err(broken()));
        };
        if self.gone.is_some() {
            return Poll::Ready(Err(broken()));
        }
        // A client's stream hands no more than its connection's budget has room for.
        let want = match &self.queued {
            Some((q, _)) => std::task::ready!(q.poll_room(cx, out.data.len())),
            None => out.data.len(),
        };
        send.reserve_capacity(want);
        let sent = match std::task::ready!(send.poll_capacity(cx)) {
            Some(Ok(n)) => {
                let part = out.data.split_to(n.min(want));
                if let Some((q, id)) = &self.queued {
                    q.handed(*id, part.len());
                }
                self.sent.set(self.sent.get() + part.len() as u64);
                let end = out.last && out.trailers.is_none() && out.data.is_empty();
                send.send_data(part, end).is_ok().then_some(end)
            }
            None | Some(Err(_)) => None,
        };
        let end = match sent {
            Some(end) => end,
            None => {
                let reset = send.poll_reset(cx);
                if self.asking && matches!(reset, Poll::Ready(Ok(r)) if r == Reason::NO_ERROR) {
                    // The server answered without needing the rest of the request (RFC 9113
                    // §8.1): what is left of it goes nowhere, and the response is read.
                    out.data.clear();
                    self.down = Down::Done;
                    return Poll::Ready(Ok(()));
                }
                self.gone = Some(Gone::Peer);
                return Poll::Ready(Err(broken()));
            }
        };
        if end {
            self.down = Down::Done;
            self.answered = !self.asking;
        }
        Poll::Ready(Ok(()))
    }

    /// The body is complete: its trailers, or an empty last DATA frame if the last data
    /// did not end the stream already.
    fn finish(&mut self, trailers: Option<http::HeaderMap>) {
        if let Down::Body { send, .. } = &mut self.down {
            let _ = match trailers {
                Some(t) => send.send_trailers(t),
                None => send.send_data(Bytes::new(), true),
            };
            self.answered = !self.asking;
        }
        self.down = Down::Done;
    }

    /// The HTTP/1.1 side is done writing.
    fn end(&mut self) {
        match &self.down {
            Down::Done => {}
            Down::Body { reader, .. } if reader.framing == Framing::UntilClose => self.finish(None),
            _ if self.gone.is_some() => self.down = Down::Done,
            _ => {
                self.reset();
                self.gone = Some(Gone::Local);
            }
        }
    }

    /// Resets the stream if it is open: its message cannot be completed. A stream to a
    /// server is cancelled; a client's gets an error.
    fn reset(&mut self) {
        let reason = if self.asking {
            Reason::CANCEL
        } else {
            Reason::INTERNAL_ERROR
        };
        self.reset_with(reason);
    }

    /// Resets the stream with `reason` if it is open.
    fn reset_with(&mut self, reason: Reason) {
        match &mut self.down {
            Down::Response { respond, .. } => respond.send_reset(reason),
            Down::Body { send, .. } => send.send_reset(reason),
            Down::Request { .. } | Down::Done => {}
        }
        self.down = Down::Done;
    }
}
