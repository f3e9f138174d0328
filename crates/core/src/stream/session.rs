//! The HTTP/1.1 client session: owns the client connection and its two buffers, reads and
//! validates each request head, and closes the connection gracefully. Its keep-alive loop
//! (in the module root) hands each head to a transaction (`txn`).
//!
//! Invariants:
//! - Nothing of a request reaches a server before its head has been fully validated.
//! - Requests are handled one at a time, so pipelined requests are answered in order and a
//!   server connection never carries two requests at once.
//! - A connection with nothing of a request buffered is idle: it holds no buffer storage
//!   (both buffers go back to the worker's pool) and at most `OUT_IDLE_CAPACITY` bytes of
//!   output scratch. A soft stop does not close it under a request the client may be
//!   sending: its next request is answered with `Connection: close` (unless `no option
//!   idle-close-on-response` asks for HAProxy 2.6's default, closing it at once).

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use sluice_http::{error_page, parse_request_limited, Answer, HeadError, RequestHead, RequestView};

use super::connect::ServerConn;
use super::deadline::within;
use super::heads::reply_answer;
use super::report::{Cause, Fail, Phase, ReqLog};
use crate::buffer::Buf;
use crate::clock;
use crate::conf::Frontend;
use crate::errorpages::Page;
use crate::runtime::Worker;
use crate::sample::{Ctx, StreamVars};
use crate::stick::Counter;
use crate::transport::Conn;

/// What the output scratch keeps while the connection waits for its next request.
const OUT_IDLE_CAPACITY: usize = 4096;

/// A request head: HTTP/1 text at the start of the client buffer, or the head of an
/// HTTP/2 stream as the `h2` crate decoded it (its body follows in the client buffer as
/// HTTP/1.1 would carry it: chunked when the client gave no length). Read through
/// [`ClientHead::view`].
pub(crate) enum ClientHead {
    H1(RequestHead),
    H2 {
        parts: Box<http::request::Parts>,
        /// The stream carries no body.
        ended: bool,
    },
}

impl ClientHead {
    /// The head; `cbuf` is the client buffer it was parsed from (HTTP/1).
    pub fn view<'a>(&'a self, cbuf: &'a [u8]) -> RequestView<'a> {
        match self {
            ClientHead::H1(head) => RequestView::h1(cbuf, head),
            ClientHead::H2 { parts, ended } => RequestView::h2(parts, *ended),
        }
    }

    /// Bytes of the client buffer the head takes.
    pub fn len(&self) -> usize {
        match self {
            ClientHead::H1(head) => head.len,
            ClientHead::H2 { .. } => 0,
        }
    }
}

pub(crate) struct Session {
    pub w: Rc<Worker>,
    /// Index of the frontend in the configuration.
    pub fe: usize,
    pub client: Conn,
    /// The client's address as the current request sees it (an `http-request set-src`
    /// changes it for that request alone, as HAProxy 2.6's does).
    pub peer: Cell<SocketAddr>,
    /// The address the client connected to, when `set-dst` changed it (likewise).
    pub dst: Cell<Option<SocketAddr>>,
    /// What each request starts from: the connection's addresses as its `tcp-request
    /// connection|session` rules left them.
    pub connection_addrs: (SocketAddr, Option<SocketAddr>),
    /// What of the current request's body the rules see, when they waited for it (`option
    /// http-buffer-request`, `wait-for-body`).
    pub body: Option<super::body_wait::Buffered>,
    pub cbuf: Buf,
    pub sbuf: Buf,
    /// Scratch for outgoing bytes (head writers, re-framed chunks).
    pub out: Vec<u8>,
    /// With `http-reuse never`, the server connection this client connection owns.
    pub private: Option<ServerConn>,
    /// The backend and server the last response came from (`option prefer-last-server`).
    pub last_server: Option<(usize, usize)>,
    /// Requests completed on this connection.
    pub requests: u32,
    /// Requests its client connection carried before this session began: the earlier
    /// streams of an HTTP/2 connection. Only the very first request of a client connection
    /// is its first for `http-reuse safe`.
    pub earlier: u32,
    /// The backend of every request, when a TCP frontend chose it (an upgrade to HTTP).
    pub pinned: Option<usize>,
    /// Bytes received from the client so far (`bin`).
    pub received: u64,
    /// What `show sess` shows of this connection.
    pub info: std::sync::Arc<crate::runtime::SessionInfo>,
    /// Its variables (`sess.` for the connection, `txn.` for the current request).
    pub vars: StreamVars,
    /// The client opened with HTTP/2's preface (prior knowledge): the connection is to
    /// be served as HTTP/2 (`option disable-h2-upgrade` prevents it).
    pub speaks_h2: bool,
    /// The head of the request an HTTP/2 stream carries, decoded already: the first (and
    /// only) one the session reads.
    pub given: Option<ClientHead>,
}

impl Session {
    pub fn frontend(&self) -> &Frontend {
        &self.w.config().frontends[self.fe]
    }

    /// What conditions and samples see of a request of this session.
    pub fn sample_ctx<'a>(&'a self, req: &'a RequestView<'a>, backend: Option<usize>) -> Ctx<'a> {
        Ctx {
            backend,
            req: Some(req),
            ..self.sample_ctx_base()
        }
    }

    /// What response rules, log samples and persistence see once a server answered: the
    /// response, the request as it was sent (when kept), the backend and its server.
    pub fn response_ctx<'a>(
        &'a self,
        (backend, server): (usize, usize),
        req: Option<&'a RequestView<'a>>,
        res: &'a sluice_http::ResponseView<'a>,
    ) -> Ctx<'a> {
        Ctx {
            backend: Some(backend),
            server: Some(server),
            req,
            res: Some(res),
            ..self.sample_ctx_base()
        }
    }

    /// The transaction is over: the entries tracking it count its error (a 4xx answer), a
    /// failure its server caused (`server_failed`) and its bytes, and those it tracked
    /// itself are released.
    pub fn end_tracking(&self, status: i64, server_failed: bool, bytes_in: u64, bytes_out: u64) {
        let v = &self.vars;
        if v.trackers.borrow().is_empty() && v.sess_trackers.borrow().is_empty() {
            return;
        }
        let mut counts = vec![
            (Counter::BytesInCnt, bytes_in),
            (Counter::BytesInRate, bytes_in),
            (Counter::BytesOutCnt, bytes_out),
            (Counter::BytesOutRate, bytes_out),
        ];
        if (400..500).contains(&status) {
            counts.extend([(Counter::HttpErrCnt, 1), (Counter::HttpErrRate, 1)]);
        }
        if server_failed {
            counts.extend([(Counter::HttpFailCnt, 1), (Counter::HttpFailRate, 1)]);
        }
        v.count(&counts, crate::runtime::clock_ms());
        v.trackers.borrow_mut().clear();
    }

    /// What samples see of this session alone.
    pub fn sample_ctx_base(&self) -> Ctx<'_> {
        let conn = Ctx::of_connection(
            &self.w.process,
            self.fe,
            crate::sample::Arrival {
                thread: self.w.tid,
                listener: self.info.listener,
            },
            self.peer.get(),
            &self.client,
            &self.vars,
        );
        Ctx {
            unique_id: self.vars.unique_id.borrow().clone(),
            dst: self.dst.get(),
            body: self.body.as_ref().and_then(|b| b.bytes(self.cbuf.bytes())),
            whole_lens: (self.body.as_ref().and_then(|b| b.whole_len()), None),
            first_request: self.requests == 0,
            ..conn
        }
    }

    /// Waits for a complete request head, enforcing `timeout http-request` (total time from
    /// the first wait for this request) and `timeout http-keep-alive` between requests.
    pub async fn read_head(&mut self, lg: &mut ReqLog) -> Result<ClientHead, Fail> {
        let w = self.w.clone();
        let st = &w.config().frontends[self.fe].stream;
        let started = clock::now();
        lg.started = Some(started);
        lg.date = Some(std::time::SystemTime::now());
        if let Some(head) = self.given.take() {
            lg.got_bytes = true;
            lg.first_byte = lg.started;
            lg.head_done = lg.started;
            // As many fields as an HTTP/1.1 head may have (the `h2` crate bounds their size).
            if head.view(&[]).headers().count() > w.config().global.max_fields() {
                return Err(Fail::answer(431, Cause::Proxy, Phase::Request));
            }
            // An empty `:scheme` is no scheme: HAProxy answers 400.
            if let ClientHead::H2 { parts, .. } = &head {
                if parts.uri.scheme_str() == Some("") {
                    return Err(Fail::answer(400, Cause::Proxy, Phase::Request));
                }
            }
            return Ok(head);
        }
        if !self.cbuf.is_empty() {
            lg.first_byte = lg.started;
        }
        let gone = |e| Fail::drop(Cause::ClientClosed(e), Phase::Request);
        // A head must leave `tune.maxrewrite` of the buffer free, complete or not.
        let room = w.config().global.head_room();
        let relaxed = w.config().frontends[self.fe].stream.accept_invalid_request;
        let max_fields = w.config().global.max_fields();
        let first = self.requests == 0 && self.earlier == 0 && !self.client.is_stream();
        loop {
            // An HTTP/2 client with prior knowledge opens with the preface, which an
            // HTTP/1.1 head cannot start with: the connection goes to the HTTP/2 side
            // (what was read with it), as HAProxy's HTTP/1 side hands it over.
            let preface = match first && !self.cbuf.is_empty() {
                true => h2_preface(self.cbuf.bytes()),
                false => Some(false),
            };
            if preface == Some(true) {
                if st.disable_h2_upgrade {
                    // (HAProxy's answer to it then.)
                    self.capture_error();
                    return Err(Fail::answer(400, Cause::Proxy, Phase::Request));
                }
                self.speaks_h2 = true;
                return Err(Fail::drop(Cause::Proxy, Phase::Request));
            }
            if !self.cbuf.is_empty() && preface == Some(false) {
                match parse_request_limited(self.cbuf.bytes(), relaxed, max_fields) {
                    Ok(Some(h)) if h.len <= room => {
                        lg.head_done = Some(clock::now());
                        return Ok(ClientHead::H1(h));
                    }
                    Ok(Some(_)) => {
                        self.capture_error();
                        return Err(Fail::answer(431, Cause::Proxy, Phase::Request));
                    }
                    Ok(None) => {}
                    Err(HeadError { status, .. }) => {
                        self.capture_error();
                        return Err(Fail::answer(status, Cause::Proxy, Phase::Request));
                    }
                }
                if self.cbuf.is_full() || self.cbuf.bytes().len() >= room {
                    let line_done = memchr::memchr(b'\n', self.cbuf.bytes()).is_some();
                    let status = if line_done { 431 } else { 414 };
                    self.capture_error();
                    return Err(Fail::answer(status, Cause::Proxy, Phase::Request));
                }
            }
            let idle_wait = self.cbuf.is_empty() && self.requests > 0;
            if idle_wait && self.out.capacity() > OUT_IDLE_CAPACITY {
                // Re-framed and compressed responses grow the scratch to a few buffers; an
                // idle connection keeps only what a head needs.
                self.out = Vec::with_capacity(OUT_IDLE_CAPACITY);
            }
            let limit = if idle_wait {
                st.timeout_keep_alive
                    .or(st.timeout_http_request)
                    .or(st.timeout_client)
            } else {
                match st.timeout_http_request {
                    Some(t) => Some(t.saturating_sub(clock::since(started))),
                    None => st.timeout_client,
                }
            };
            // At a soft stop an idle connection is not closed under a request the client may
            // be sending at that moment: it waits for its next request, which is answered
            // and then closes the connection (or for its timeouts, or `hard-stop-after`).
            // `no option idle-close-on-response` closes it at once, as HAProxy 2.6 does by
            // default (a request on its way is then lost unless the client retries it).
            let stop = w.soft_stop.notified();
            let close_at_stop = async {
                match idle_wait && st.close_idle_at_stop {
                    true if w.stopping() => {}
                    true => stop.await,
                    false => std::future::pending().await,
                }
            };
            let read = tokio::select! {
                biased;
                read = within(limit, self.cbuf.fill_head(&self.client, &w.bufs)) => read,
                // Nothing was read: `fill_head` returns with the first bytes.
                () = close_at_stop => return Err(gone(None)),
            };
            match read {
                Ok(Ok(0)) => return Err(gone(None)),
                Ok(Err(e)) => return Err(gone(Some(e))),
                Ok(Ok(n)) => {
                    lg.got_bytes = true;
                    lg.first_byte.get_or_insert_with(clock::now);
                    self.received += n as u64;
                }
                Err(()) if self.cbuf.is_empty() && self.requests > 0 => return Err(gone(None)),
                Err(()) => return Err(Fail::answer(408, Cause::ClientTimeout, Phase::Request)),
            }
        }
    }

    /// Keeps the refused request for `show errors`.
    fn capture_error(&self) {
        let bytes = self.cbuf.bytes();
        self.w.state().frontends[self.fe]
            .errors
            .keep(crate::runtime::CapturedError {
                when: std::time::SystemTime::now(),
                peer: self.peer.get(),
                server: None,
                other: None,
                at: sluice_http::error_position(bytes, true),
                bytes: bytes.to_vec(),
                event: 0,
            });
    }

    /// The error response for `status`: a backend's `errorfile`/`http-error` page, else the
    /// frontend's, else the built-in one.
    pub fn error_answer(&self, status: u16, backend: Option<usize>) -> Answer {
        self.error_page_for(status, backend, None)
    }

    /// The size HAProxy counts for the error page it answers `status` with (`%B`): its
    /// HTX form, with the `Connection: close` of HAProxy's built-in 400 and 408 pages.
    pub fn error_page_size(&self, status: u16, backend: Option<usize>) -> u64 {
        let page = self.error_answer(status, backend);
        let builtin = self.custom_page(status, backend).is_none();
        let close = if builtin && sluice_http::page_says_close(status) {
            "connection".len() + "close".len()
        } else {
            0
        };
        super::report::htx_answer_size(&page) + close as u64
    }

    /// The page configured for `status` (`errorfile`, `http-error`), the backend's first.
    fn custom_page(&self, status: u16, backend: Option<usize>) -> Option<&Page> {
        backend
            .and_then(|b| self.w.config().backends[b].errors.get(status))
            .or_else(|| self.frontend().errors.get(status))
    }

    /// [`Self::error_answer`] for a request still at hand: a page rendered per request
    /// (`http-error ... lf-string`) sees it.
    pub fn error_page_for(
        &self,
        status: u16,
        backend: Option<usize>,
        req: Option<&RequestView<'_>>,
    ) -> Answer {
        match self.custom_page(status, backend) {
            None => error_page(status),
            Some(Page::Static(page)) => Answer::clone(page),
            Some(Page::Reply(r)) => {
                let cx = Ctx {
                    backend,
                    req,
                    ..self.sample_ctx_base()
                };
                let mut page = reply_answer(r, &cx);
                page.close();
                page
            }
        }
    }

    /// Sends the error page of `status` and closes gracefully; without a status the
    /// connection is simply dropped.
    /// Answers a request whose head was refused (no stream exists yet, in HAProxy's
    /// terms) and closes: an `errorfile` for the status if the frontend has one, else the
    /// built-in page as HAProxy's connection layer writes it (`raw_error_page`).
    pub async fn fail_head(&mut self, status: Option<u16>) {
        let Some(status) = status else {
            return;
        };
        let page = match self.frontend().errors.get(status) {
            None => sluice_http::raw_error_page(status),
            Some(_) => self.error_answer(status, None),
        };
        let _ = within(Some(Duration::from_secs(5)), self.write_page(&page)).await;
        self.close_gracefully().await;
    }

    pub async fn fail(&mut self, backend: Option<usize>, status: Option<u16>) {
        let Some(status) = status else {
            return;
        };
        let page = self.error_answer(status, backend);
        let _ = within(Some(Duration::from_secs(5)), self.write_page(&page)).await;
        self.close_gracefully().await;
    }

    /// Closes after a response the connection ends with. When the client announced that
    /// request as its last and nothing of it is left unread, the connection ends at once:
    /// all that may still come is the client's own close, and a reset in answer to that
    /// cannot cost it a response it has already read. Otherwise it drains first.
    pub async fn close_after(&mut self, last_request: bool) {
        if last_request
            && !self.client.is_stream()
            && self.cbuf.is_empty()
            && !self.client.has_input()
        {
            self.client.end_output().await;
            return;
        }
        self.close_gracefully().await
    }

    /// Half-closes and drains briefly, so that a response is not destroyed by a reset when
    /// the client still had unread bytes in flight.
    pub async fn close_gracefully(&mut self) {
        let _ = self.client.shutdown().await;
        // Drained through the client buffer (from the worker's pool): no scratch of its own
        // sizes every connection's state.
        let w = self.w.clone();
        let mut drained = 0;
        while drained < 256 * 1024 {
            self.cbuf.clear(&w.bufs);
            match within(
                Some(Duration::from_secs(1)),
                self.cbuf.fill(&self.client, &w.bufs),
            )
            .await
            {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
        self.cbuf.clear(&w.bufs);
    }

    /// Writes to the client within `timeout client`.
    /// Writes an answer the proxy made itself, `page` (a whole HTTP/1.1 response: an error
    /// page, an `errorfile`, a `return`, a redirect), in the client's protocol: as it is to
    /// an HTTP/1 client; to an HTTP/2 stream, its head as HEADERS made from the page's
    /// fields (read once here: the stream takes heads, never text) and its body as DATA.
    /// An empty page (`errorfile CODE /dev/null`) sends nothing.
    /// Sends one of the proxy's own answers in the client's protocol: as HTTP/1 text, or
    /// as HEADERS (made from its fields, `heads::send_stream_head`, the relay's writer) and
    /// DATA to an HTTP/2 stream. A silent answer sends nothing.
    pub async fn write_page(&mut self, page: &Answer) -> Result<(), Cause> {
        if page.silent {
            return Ok(());
        }
        let Some(stream) = self.client.as_stream() else {
            let mut text = page.to_h1();
            if self.frontend().stream.case_adjust_client {
                self.w.config().global.case_adjust.apply(&mut text);
            }
            return self.write_client(&text).await;
        };
        let closed = |e| Cause::ClientClosed(Some(e));
        let view = sluice_http::ResponseView::answer(page);
        let framed = (view.framing(), None);
        super::heads::send_stream_head(stream, &view, &Default::default(), framed, None)
            .map_err(closed)?;
        self.write_client(&page.body).await
    }

    pub async fn write_client(&mut self, bytes: &[u8]) -> Result<(), Cause> {
        let limit = self.frontend().stream.timeout_client;
        match within(limit, self.client.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Cause::ClientClosed(Some(e))),
            Err(()) => Err(Cause::ClientTimeout),
        }
    }

    /// The client's request body, delimited by its HTTP/2 stream, was read to its end
    /// (what made the last read come back empty).
    pub fn client_body_ended(&self) -> bool {
        self.client.as_stream().is_some_and(|st| st.message_ended())
    }

    /// Reads more of the request body within `timeout client`.
    pub async fn read_client(&mut self) -> Result<(), Cause> {
        let w = self.w.clone();
        let limit = w.config().frontends[self.fe].stream.timeout_client;
        match within(limit, self.cbuf.fill(&self.client, &w.bufs)).await {
            Ok(Ok(n)) if n > 0 => {
                self.received += n as u64;
                Ok(())
            }
            Ok(Ok(_)) => Err(Cause::ClientClosed(None)),
            Ok(Err(e)) => Err(Cause::ClientClosed(Some(e))),
            Err(()) => Err(Cause::ClientTimeout),
        }
    }
}

/// Whether `bytes` open with HTTP/2's connection preface: `Some(true)` if its request line
/// is there whole, `None` while what came so far is the start of it.
fn h2_preface(bytes: &[u8]) -> Option<bool> {
    const LINE: &[u8] = b"PRI * HTTP/2.0\r\n";
    let n = bytes.len().min(LINE.len());
    if bytes[..n] != LINE[..n] {
        return Some(false);
    }
    (n == LINE.len()).then_some(true)
}
