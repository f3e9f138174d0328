//! A client's HTTP/2 stream as the HTTP/1.1 connection its session serves. The HTTP/2 front
//! (`stream::h2`) writes the stream's request as an HTTP/1.1 head; the session reads it,
//! then the body as it arrives on the stream, through [`crate::transport::Conn`]'s calls.
//! What the session writes back is parsed once for its head, which leaves as a HEADERS
//! frame, and its body leaves as DATA frames as the client's flow control allows. No task
//! and no buffer stand between the two: each call works on the stream itself.
//!
//! Invariants:
//! - Credit for received DATA is given back only once the session has taken the bytes: a
//!   client cannot send more than its window ahead of the session.
//! - A stream the client reset (or whose connection went away) reads as ended and refuses
//!   writes, so a request the session has not read yet never reaches a server.
//! - Every stream ends on the wire: a response the session leaves unfinished is reset,
//!   unless its body was delimited by the close (then it ends normally).
//! - All calls come from the stream's task, on the worker that owns the connection; the
//!   mutex only satisfies `Send` bounds and is never contended.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use sluice_http::{
    parse_response, push_chunk, push_header, ChunkedDecoder, ChunkedOut, Framing, ResponseHead,
};

/// The session's end of a stream, inside its `Conn`.
#[derive(Debug)]
pub struct H2Stream {
    state: Arc<Mutex<State>>,
}

/// The stream task's handle: tells when the client reset the stream before its answer.
#[derive(Debug)]
pub struct ResetWatch {
    state: Arc<Mutex<State>>,
}

/// Who ended the stream early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// The client reset it, or its connection went away.
    Client,
    /// The session gave up on it.
    Session,
}

#[derive(Debug)]
struct State {
    /// Bytes for the session to read: the head, then the body as framed for it.
    up: Vec<u8>,
    read: usize,
    /// The request body still arriving; `None` once its end was framed into `up`.
    body: Option<RecvStream>,
    /// The body goes to the session chunked (the client gave no length), with trailers.
    chunked: bool,
    /// DATA bytes in `up` whose flow-control credit is still owed to the client.
    owed: usize,
    down: Down,
    head_request: bool,
    gone: Option<Gone>,
}

#[derive(Debug)]
enum Down {
    /// Waiting for the response head; its bytes so far.
    Head {
        respond: SendResponse<Bytes>,
        buf: Vec<u8>,
    },
    /// The head has left; the body goes as its framing says.
    Body {
        send: SendStream<Bytes>,
        reader: BodyReader,
        /// A part of a chunk's framing that came without the rest.
        leftover: Bytes,
    },
    /// The response has ended on the wire.
    Done,
}

/// Body bytes taken out of one write, ready to leave.
struct Outgoing {
    data: Bytes,
    /// The body ends with them.
    last: bool,
    trailers: Option<http::HeaderMap>,
}

fn broken() -> io::Error {
    io::ErrorKind::BrokenPipe.into()
}

impl H2Stream {
    /// A stream whose request head is `head` (its body, if any, still on `body`: chunked
    /// for the session when `chunked`), answered on `respond`.
    pub fn new(
        head: Vec<u8>,
        body: RecvStream,
        chunked: bool,
        respond: SendResponse<Bytes>,
        head_request: bool,
    ) -> (H2Stream, ResetWatch) {
        let body = (!body.is_end_stream()).then_some(body);
        let state = Arc::new(Mutex::new(State {
            up: head,
            read: 0,
            body,
            chunked,
            owed: 0,
            down: Down::Head {
                respond,
                buf: Vec::new(),
            },
            head_request,
            gone: None,
        }));
        (
            H2Stream {
                state: state.clone(),
            },
            ResetWatch { state },
        )
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Reads what is there (`WouldBlock` when nothing is yet, 0 at the request's end).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut st = self.lock();
        let n = st.readable_now(buf.len())?;
        let from = st.read;
        buf[..n].copy_from_slice(&st.up[from..from + n]);
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

    /// Copies what is waiting without consuming it.
    pub fn peek(&self, buf: &mut [u8]) -> usize {
        let st = self.lock();
        let n = buf.len().min(st.unread().len());
        buf[..n].copy_from_slice(&st.unread()[..n]);
        n
    }

    pub fn has_input(&self) -> bool {
        !self.lock().unread().is_empty()
    }

    /// Resolves once a read may make progress.
    pub async fn readable(&self) {
        std::future::poll_fn(|cx| self.lock().poll_fill(cx)).await
    }

    /// Resolves once the client has reset the stream (or its connection went away). The
    /// end of the request is not a close: an HTTP/2 request ends its side as a matter of
    /// course.
    pub async fn closed(&self) {
        std::future::poll_fn(|cx| self.lock().poll_client_gone(cx)).await
    }

    /// The stream is over for reading: reset, or the request read to its end.
    pub fn ended(&self) -> bool {
        let st = self.lock();
        st.gone.is_some() || (st.body.is_none() && st.unread().is_empty())
    }

    /// Writes the next bytes of the response: its head leaves once complete, its body as
    /// flow control allows. Fails once the stream is gone.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        let Some(mut out) = self.lock().take_body(bytes)? else {
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

    /// The session will write no more: a body delimited by the close ends here; a response
    /// not complete is reset.
    pub fn shutdown(&self) {
        self.lock().end();
    }

    /// Ends the stream at once, with a reset if its response was not complete.
    pub fn abort(&self) {
        let mut st = self.lock();
        if !matches!(st.down, Down::Done) {
            st.reset();
        }
        st.gone.get_or_insert(Gone::Session);
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        self.lock().end();
    }
}

impl ResetWatch {
    /// Resolves if the client resets the stream (or its connection goes away) before its
    /// response has ended; never after.
    pub async fn reset(&self) {
        std::future::poll_fn(|cx| lock(&self.state).poll_client_gone(cx)).await
    }
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn unread(&self) -> &[u8] {
        &self.up[self.read..]
    }

    /// How many bytes a read of at most `room` takes now.
    fn readable_now(&self, room: usize) -> io::Result<usize> {
        if self.gone.is_some() {
            return Ok(0);
        }
        match self.unread().len().min(room) {
            0 if room > 0 && self.body.is_some() => Err(io::ErrorKind::WouldBlock.into()),
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
        // The session has taken the DATA: the client may send as much again.
        if let Some(body) = self.body.as_mut().filter(|_| self.owed > 0) {
            let _ = body.flow_control().release_capacity(self.owed);
        }
        self.owed = 0;
    }

    /// Frames the next part of the request body into `up` once the session has read what
    /// was there. Ready when there is something to read, or the request or stream is over.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.gone.is_some() || !self.unread().is_empty() {
            return Poll::Ready(());
        }
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(());
        };
        loop {
            match body.poll_data(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(data))) if data.is_empty() => {}
                Poll::Ready(Some(Ok(data))) => {
                    if self.chunked {
                        push_chunk(&mut self.up, &data);
                    } else {
                        self.up.extend_from_slice(&data);
                    }
                    self.owed = data.len();
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Err(_))) => {
                    self.gone = Some(Gone::Client);
                    return Poll::Ready(());
                }
                Poll::Ready(None) => break,
            }
        }
        if self.chunked {
            match body.poll_trailers(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => {
                    self.gone = Some(Gone::Client);
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(trailers)) => {
                    self.up.extend_from_slice(b"0\r\n");
                    for (name, value) in trailers.iter().flatten() {
                        push_header(&mut self.up, name.as_str().as_bytes(), value.as_bytes());
                    }
                    self.up.extend_from_slice(b"\r\n");
                }
            }
        }
        self.body = None;
        Poll::Ready(())
    }

    fn poll_client_gone(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.gone {
            Some(Gone::Client) => return Poll::Ready(()),
            Some(Gone::Session) => return Poll::Pending,
            None => {}
        }
        let reset = match &mut self.down {
            Down::Head { respond, .. } => respond.poll_reset(cx),
            Down::Body { send, .. } => send.poll_reset(cx),
            // Answered: what the client does with the stream now changes nothing.
            Down::Done => return Poll::Pending,
        };
        if reset.is_pending() {
            return Poll::Pending;
        }
        self.gone = Some(Gone::Client);
        Poll::Ready(())
    }

    /// Takes in the next bytes the session wrote: completes the head (and sends it), and
    /// returns the body data they carry, if any.
    fn take_body(&mut self, bytes: &[u8]) -> io::Result<Option<Outgoing>> {
        if self.gone.is_some() {
            return Err(broken());
        }
        let mut input = match &mut self.down {
            Down::Head { buf, .. } => {
                if buf.is_empty() {
                    // Exactly sized: the head becomes shared bytes without a copy.
                    buf.reserve_exact(bytes.len());
                }
                buf.extend_from_slice(bytes);
                match self.start_response()? {
                    Some(rest) => rest,
                    None => return Ok(None),
                }
            }
            Down::Body { leftover, .. } if leftover.is_empty() => Bytes::copy_from_slice(bytes),
            Down::Body { leftover, .. } => [&leftover[..], bytes].concat().into(),
            // Bytes after the message's end go nowhere, as on a connection that closed.
            Down::Done => return Ok(None),
        };
        let Down::Body {
            reader, leftover, ..
        } = &mut self.down
        else {
            return Ok(None);
        };
        let (data, last) = reader
            .take(&mut input)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        *leftover = input;
        let trailers = if last { reader.trailers() } else { None };
        Ok(Some(Outgoing {
            data,
            last,
            trailers,
        }))
    }

    /// Sends the response head once it is complete. Returns the bytes after it when a body
    /// follows (`None`: the head is not complete yet, or the response has no body).
    fn start_response(&mut self) -> io::Result<Option<Bytes>> {
        let Down::Head { buf, .. } = &mut self.down else {
            return Ok(None);
        };
        let head = loop {
            match parse_response(buf, self.head_request) {
                // Interim answers (100 Continue) stay between the session and the server.
                Ok(Some(h)) if h.status < 200 => drop(buf.drain(..h.len)),
                Ok(Some(h)) => break h,
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.reset();
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
        };
        let Down::Head { mut respond, buf } = std::mem::replace(&mut self.down, Down::Done) else {
            unreachable!("matched above")
        };
        let bytes = Bytes::from(buf);
        let Some(res) = response(&head, &bytes) else {
            respond.send_reset(Reason::INTERNAL_ERROR);
            self.gone = Some(Gone::Session);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a response field HTTP/2 cannot carry",
            ));
        };
        let no_body = matches!(head.framing, Framing::None | Framing::Length(0));
        let send = respond.send_response(res, no_body).map_err(|_| {
            self.gone = Some(Gone::Client);
            broken()
        })?;
        if no_body {
            return Ok(None);
        }
        self.down = Down::Body {
            send,
            reader: BodyReader::new(head.framing),
            leftover: Bytes::new(),
        };
        Ok(Some(bytes.slice(head.len..)))
    }

    /// Sends as much of `out` as the client's flow control allows now.
    fn poll_send(&mut self, cx: &mut Context<'_>, out: &mut Outgoing) -> Poll<io::Result<()>> {
        let Down::Body { send, .. } = &mut self.down else {
            return Poll::Ready(Err(broken()));
        };
        if self.gone.is_some() {
            return Poll::Ready(Err(broken()));
        }
        send.reserve_capacity(out.data.len());
        let room = match send.poll_capacity(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(n))) => n.min(out.data.len()),
            Poll::Ready(None | Some(Err(_))) => {
                self.gone = Some(Gone::Client);
                return Poll::Ready(Err(broken()));
            }
        };
        let part = out.data.split_to(room);
        let end = out.last && out.trailers.is_none() && out.data.is_empty();
        if send.send_data(part, end).is_err() {
            self.gone = Some(Gone::Client);
            return Poll::Ready(Err(broken()));
        }
        if end {
            self.down = Down::Done;
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
        }
        self.down = Down::Done;
    }

    /// The session is done with the stream.
    fn end(&mut self) {
        match &self.down {
            Down::Done => {}
            Down::Body { reader, .. } if reader.framing == Framing::UntilClose => self.finish(None),
            _ if self.gone.is_some() => self.down = Down::Done,
            _ => {
                self.reset();
                self.gone = Some(Gone::Session);
            }
        }
    }

    /// Resets the stream: its response cannot be completed.
    fn reset(&mut self) {
        match &mut self.down {
            Down::Head { respond, .. } => respond.send_reset(Reason::INTERNAL_ERROR),
            Down::Body { send, .. } => send.send_reset(Reason::INTERNAL_ERROR),
            Down::Done => {}
        }
        self.down = Down::Done;
    }
}

/// The HTTP/2 response for a parsed HTTP/1.1 head, without the fields HTTP/2 forbids; its
/// field values are slices of `bytes`, not copies. `None` if a field cannot be carried.
fn response(head: &ResponseHead, bytes: &Bytes) -> Option<http::Response<()>> {
    let mut fields = http::HeaderMap::with_capacity(head.headers.len());
    for h in head.headers.iter() {
        let name = &bytes[h.name.clone()];
        if head.is_hop_by_hop(name) && !sluice_http::name_is(name, "content-length") {
            continue;
        }
        let value = http::HeaderValue::from_maybe_shared(bytes.slice(h.value.clone())).ok()?;
        fields.append(http::HeaderName::from_bytes(name).ok()?, value);
    }
    let mut res = http::Response::new(());
    *res.status_mut() = http::StatusCode::from_u16(head.status).ok()?;
    *res.headers_mut() = fields;
    Some(res)
}

/// An HTTP/1.1 body as its sender framed it, taken out of the bytes read so far.
#[derive(Debug)]
pub(crate) struct BodyReader {
    pub(crate) framing: Framing,
    /// Bytes still to come with `Content-Length`.
    left: u64,
    chunks: ChunkedDecoder,
}

impl BodyReader {
    pub(crate) fn new(framing: Framing) -> BodyReader {
        BodyReader {
            framing,
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunks: ChunkedDecoder::new(),
        }
    }

    /// Takes the body bytes out of `buf`, and whether the body is complete.
    pub(crate) fn take(
        &mut self,
        buf: &mut Bytes,
    ) -> Result<(Bytes, bool), sluice_http::ChunkError> {
        match self.framing {
            Framing::Length(_) => {
                let n = (self.left.min(buf.len() as u64)) as usize;
                self.left -= n as u64;
                Ok((buf.split_to(n), self.left == 0))
            }
            Framing::Chunked => {
                let mut out = Vec::with_capacity(buf.len());
                let used = self.chunks.decode(buf, ChunkedOut::Raw, &mut out)?;
                buf.advance(used);
                Ok((out.into(), self.chunks.is_done()))
            }
            Framing::UntilClose => Ok((std::mem::take(buf), false)),
            Framing::None => Ok((Bytes::new(), true)),
        }
    }

    /// The trailers of a chunked body, if it had any.
    pub(crate) fn trailers(&self) -> Option<http::HeaderMap> {
        let lines = self.chunks.trailers();
        if lines.is_empty() {
            return None;
        }
        let mut map = http::HeaderMap::new();
        for line in lines.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = memchr::memchr(b':', line) else {
                continue;
            };
            let name = http::HeaderName::from_bytes(&line[..colon]);
            let value = http::HeaderValue::from_bytes(sluice_http::trim_ows(&line[colon + 1..]));
            if let (Ok(n), Ok(v)) = (name, value) {
                map.append(n, v);
            }
        }
        (!map.is_empty()).then_some(map)
    }
}
