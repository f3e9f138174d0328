//! One HTTP transaction: a request/response exchange on a client session. It applies the
//! rules, routes to a backend, picks a server, gets a server connection (queue, pool,
//! retries: `connect`), sends the request with its body, reads the response head, relays
//! the response (`relay`), and writes the access-log line.
//!
//! Every failure is a [`Fail`]: the status to answer, if any, and its [`Cause`] with the
//! I/O error behind it; the log's termination code derives from the cause and the
//! [`Phase`] the transaction was in.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use sluice_http::{
    parse_response, reason, split_target, ChunkedDecoder, ChunkedOut, Framing, RequestHead,
    RequestView, ResponseHead, ResponseView, Version,
};

use super::connect::{self, Attempts, ConnectError, Reuse, ServerConn};
use super::deadline::within;
use super::heads::{
    build_request_head, edited_request, forwardfor, local_response, originalto, reply_bytes,
    upgrade_request, with_close, write_response_head, Edits,
};
use super::keywords::CloseMode;
use super::report::{Cause, Fail, Local, Phase, ReqLog, Tally};
use super::session::Session;
use crate::balance::{self, PickKey};
use crate::check::{self, Seen};
use crate::clock;
use crate::compression::{self, Algo};
use crate::conf::{Backend, Frontend};
use crate::cookie;
use crate::persist;
use crate::rules::{
    holds, run_shared, tcp_verdict, Action, BackendRef, Level, Redirect, RedirectKind, Rule,
    Service,
};
use crate::sample::Ctx;
use crate::stats;
use crate::transport::Then;

/// The routing decision for a request, computed from its head.
enum Route {
    /// Answer locally with these bytes; `close` when the connection cannot continue.
    Respond { bytes: Vec<u8>, close: bool },
    /// Answer with the error page for this status (the backend's pages win when known);
    /// `denied` when a rule refused the request.
    Error {
        status: u16,
        backend: Option<usize>,
        denied: bool,
        /// The rule's own answer (`deny ... string ...`), instead of the error page.
        page: Option<Vec<u8>>,
    },
    /// Hold the connection for `timeout tarpit`, then answer as `Error` does (denied).
    Tarpit {
        status: u16,
        backend: Option<usize>,
        page: Option<Vec<u8>>,
    },
    Forward {
        backend: usize,
        server: usize,
        /// The server the request's persistence cookie named, and its dates, if any.
        cookie_server: Option<(usize, cookie::CookieDates)>,
        /// The keys `stick on|store-request` rules store once the server is known.
        stick: StickKeys,
        /// The request's letter for `%tsc` about its persistence cookie.
        cookie_flag: u8,
    },
    /// The statistics page of the frontend (`None`) or of a backend.
    StatsPage(Option<usize>),
    /// Close the connection without an answer (`tcp-request content reject`).
    Reject { backend: Option<usize> },
    /// Answer with a stored object (`cache-use`).
    Cached {
        entry: std::sync::Arc<crate::cache::Entry>,
        backend: Option<usize>,
    },
}

/// Facts about the current request kept after its head leaves the buffer.
pub(crate) struct ReqFacts {
    pub framing: Framing,
    pub version: Version,
    pub is_head: bool,
    pub idempotent: bool,
    pub wants_close: bool,
    pub expect_continue: bool,
    /// The algorithm to compress the response with, if the request allows it.
    pub comp: Option<Algo>,
    /// The protocols the client asks to switch to (`Upgrade`, h2c removed), if any.
    pub upgrade: Option<Vec<u8>>,
    /// A CONNECT: a 2xx answer opens a tunnel to wherever the server connected.
    pub connect: bool,
    /// The server the request's persistence cookie named, and its dates, if any (`cookie`).
    pub cookie_server: Option<(usize, cookie::CookieDates)>,
    /// A POST (`cookie ... postonly`).
    pub post: bool,
    /// `timeout server`, or what `set-timeout server` made it.
    pub timeout_server: Option<Duration>,
    /// `set-timeout tunnel`, if a rule set it.
    pub timeout_tunnel: Option<Duration>,
    /// The keys `stick on|store-request` rules store once the server answers.
    pub stick: StickKeys,
    /// What `cache-use` learnt of the request, for `cache-store`.
    pub cache: Option<crate::cache::Lookup>,
}

/// Stick-table keys and their tables (`persist`).
pub(crate) type StickKeys = Vec<(std::sync::Arc<crate::stick::Table>, crate::stick::Key)>;

/// One request/response exchange.
#[derive(Debug, Default)]
pub(crate) struct Txn {
    /// The backend, once routed.
    pub backend: Option<usize>,
    pub phase: Phase,
    pub log: ReqLog,
    /// The proxy's end of the server connection (`%bi`, `%bp`), when the log shows it.
    pub backend_src: Option<std::net::SocketAddr>,
    /// The request head as sent to the server, kept for response rules that read it
    /// (only when the proxies have response rules).
    pub sent_head: Option<(Vec<u8>, RequestHead)>,
    /// The client announced this request as its last (`Connection: close`, or HTTP/1.0
    /// without keep-alive) and sent no body with it: once answered, it sends nothing more
    /// than its own close.
    pub last_request: bool,
}

/// Why sending a request or reading its response head failed.
enum SendFail {
    /// The connection died before any response byte: a replay may be possible.
    Retryable(io::Error),
    Fail(Fail),
}

impl Txn {
    /// Handles one request whose head is at the start of the client buffer. Returns whether
    /// the client connection stays open.
    pub async fn handle(&mut self, s: &mut Session, head: RequestHead) -> Result<bool, Fail> {
        let req = RequestView::h1(s.cbuf.bytes(), &head);
        let connect = head.is_connect(s.cbuf.bytes());
        let mut facts = ReqFacts {
            framing: req.framing(),
            version: req.version(),
            is_head: req.is_head(),
            idempotent: req.is_idempotent(),
            // A CONNECT refused leaves the connection: what the client sent after it was
            // meant for a tunnel, not the next request.
            wants_close: req.wants_close() || connect,
            expect_continue: req
                .header("expect")
                .is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue")),
            comp: None,
            upgrade: upgrade_request(&req),
            connect,
            cookie_server: None,
            post: req.method() == b"POST",
            timeout_server: None,
            timeout_tunnel: None,
            stick: Vec::new(),
            cache: None,
        };
        self.last_request = facts.wants_close && facts.framing == Framing::None;
        self.request_log_facts(s, &req);
        if let Some(wait) = body_wait(s) {
            // The client was invited to send its body already.
            if self.wait_for_body(s, &head, &facts, wait).await? {
                facts.expect_continue = false;
            }
        }
        let req = RequestView::h1(s.cbuf.bytes(), &head);
        let (route, mut edits) = route(s, &req);
        s.body.set(None);
        s.chunked_body = None;
        self.render_log_samples(s, &req, &route);
        if !edits.captures.is_empty() {
            for (slot, value) in edits.captures.drain(..) {
                if let Some(c) = self.log.captures_req.get_mut(slot) {
                    *c = Some(value);
                }
            }
            self.share_captures(s);
        }
        self.log.level = edits.log_level.take();
        match route {
            Route::Reject { backend } => {
                self.phase = Phase::Local;
                self.log.local = Some(Local::Denied);
                self.backend = backend;
                s.cbuf.consume(head.len);
                Err(Fail::drop(Cause::Proxy, Phase::Request))
            }
            Route::Tarpit {
                status,
                backend,
                page,
            } => {
                // Held, then refused: the client is slowed down at the cost of a timer.
                let w = s.w.clone();
                let be = backend.map(|b| &w.config().backends[b]);
                let hold = s
                    .frontend()
                    .stream
                    .timeout_tarpit
                    .or(be.and_then(|b| b.stream.timeout_tarpit))
                    .or(be.and_then(|b| b.timeout_connect))
                    .unwrap_or_default();
                self.phase = Phase::Local;
                self.log.local = Some(Local::Denied);
                let page = page.unwrap_or_else(|| s.error_page_for(status, backend, Some(&req)));
                let bytes = with_close(after_response(s, backend, Some(&req), page));
                s.cbuf.consume(head.len);
                self.backend = backend;
                self.log.status = i64::from(status);
                self.log.term = Some(*b"PT");
                tokio::time::sleep(hold).await;
                self.log.bytes = super::report::htx_message_size(&bytes);
                self.send_local(s, &bytes).await?;
                Ok(false)
            }
            Route::Error {
                status,
                backend,
                denied,
                page,
            } => {
                self.phase = Phase::Local;
                if denied {
                    self.log.local = Some(Local::Denied);
                }
                let page = page.unwrap_or_else(|| s.error_page_for(status, backend, Some(&req)));
                let bytes = after_response(s, backend, Some(&req), page);
                s.cbuf.consume(head.len);
                self.backend = backend;
                // (An empty page, `errorfile` of /dev/null, still logs its status.)
                self.log.status = Some(status_of(&bytes))
                    .filter(|&n| n > 0)
                    .unwrap_or(i64::from(status));
                self.log.term = Some(if status == 503 { *b"SC" } else { *b"PR" });
                let bytes = with_close(bytes);
                self.log.bytes = super::report::htx_message_size(&bytes);
                self.send_local(s, &bytes).await?;
                Ok(false)
            }
            Route::Respond { bytes, close } => {
                self.phase = Phase::Local;
                self.log.local = Some(Local::Intercepted);
                let bytes = after_response(s, None, Some(&req), bytes);
                s.cbuf.consume(head.len);
                self.log.status = status_of(&bytes);
                self.log.term = Some(*b"LR");
                let close = close || facts.wants_close || facts.framing != Framing::None;
                let bytes = if close { with_close(bytes) } else { bytes };
                self.log.bytes = super::report::htx_message_size(&bytes);
                self.send_local(s, &bytes).await?;
                Ok(!close)
            }
            Route::Cached { entry, backend } => {
                let answer = self.cached_answer(s, &entry, &req, backend, &facts)?;
                s.cbuf.consume(head.len);
                self.send_cached(s, answer, &entry).await
            }
            Route::StatsPage(backend) => {
                self.phase = Phase::Local;
                self.log.local = Some(Local::Intercepted);
                self.backend = backend;
                let w = s.w.clone();
                let config = w.config();
                let page = match backend {
                    Some(b) => &config.backends[b].stats,
                    None => &config.frontends[s.fe].stats,
                };
                let cx = s.sample_ctx(&req, backend);
                let admin = page.admin.as_ref().is_some_and(|c| c.eval(&cx));
                let rule = page
                    .rules
                    .iter()
                    .find(|(_, cond)| holds(cond, &cx))
                    .map(|(r, _)| r);
                let method = req.method().to_vec();
                let target = req.target().to_vec();
                let authorization = req.header("authorization").map(<[u8]>::to_vec);
                s.cbuf.consume(head.len);
                // A form is small: read it whole when its length is announced.
                let mut body = Vec::new();
                let mut consumed = facts.framing == Framing::None;
                if let Framing::Length(n) = facts.framing {
                    if n <= 65536 {
                        while (s.cbuf.bytes().len() as u64) < n {
                            s.read_client()
                                .await
                                .map_err(|c| Fail::drop(c, Phase::Request))?;
                        }
                        body = s.cbuf.bytes()[..n as usize].to_vec();
                        s.cbuf.consume(n as usize);
                        consumed = true;
                    }
                }
                let bytes = stats::page::answer(
                    &w.process,
                    &stats::page::PageRequest {
                        page,
                        method: &method,
                        target: &target,
                        authorization: authorization.as_deref(),
                        admin,
                        rule,
                        body: &body,
                    },
                );
                let bytes = after_response(s, backend, None, bytes);
                self.log.status = status_of(&bytes);
                self.log.term = Some(*b"LR");
                let close = facts.wants_close || !consumed;
                let bytes = if close { with_close(bytes) } else { bytes };
                self.log.bytes = super::report::htx_message_size(&bytes);
                self.send_local(s, &bytes).await?;
                Ok(!close)
            }
            Route::Forward {
                backend,
                server,
                cookie_server,
                stick,
                cookie_flag,
            } => {
                self.log.cookie_flags[0] = cookie_flag;
                self.backend = Some(backend);
                s.info.route(Some(backend), Some(server));
                // An Rc clone (thread-local) rather than an Arc one: no shared cache line
                // is written per request.
                let w = s.w.clone();
                let fe = &w.config().frontends[s.fe];
                let be = &w.config().backends[backend];
                let conf = compression::conf_for(fe, be);
                let req = RequestView::h1(s.cbuf.bytes(), &head);
                let facts = ReqFacts {
                    comp: compression::for_request(conf, &req),
                    cookie_server,
                    stick,
                    timeout_server: edits.timeout_server.or(be.timeout_server),
                    timeout_tunnel: edits.timeout_tunnel,
                    cache: edits.cache_lookup.take(),
                    ..facts
                };
                if fe.stream.originalto.is_some() || be.stream.originalto.is_some() {
                    let dst = s.dst.get().or_else(|| s.client.local_addr().ok());
                    if let Some((name, v)) = dst.and_then(|d| originalto(fe, be, d.ip())) {
                        edits.add.push((name.to_string(), v));
                    }
                }
                if conf.offload {
                    edits.remove("accept-encoding", crate::sample::Match::Str);
                }
                if let (Some(name), Some(id)) = (&fe.log.unique_id_header, &self.log.unique_id) {
                    edits.remove(name, crate::sample::Match::Str);
                    edits.add.push((name.clone(), id.as_bytes().to_vec()));
                }
                if let Some(c) = &be.persist.cookie {
                    if let Some(header) = cookie::request_cookie_header(c, &req) {
                        edits.remove("cookie", crate::sample::Match::Str);
                        if !header.is_empty() {
                            edits.add.push(("cookie".into(), header));
                        }
                    }
                }
                s.out.clear();
                // One allocation for a session's first head (an HTTP/2 stream's only one):
                // the client's head plus room for what the proxy adds.
                s.out.reserve(head.len + 256);
                build_request_head(
                    &mut s.out,
                    &req,
                    &edits,
                    forwardfor(fe, be, s.client.client_addr(s.peer.get()).map(|a| a.ip())),
                    // A tunnel that opens ends with its connection anyway.
                    server_close(fe, be) && !facts.connect,
                    facts.upgrade.as_deref(),
                );
                if has_response_rules(fe, be) || log_reads_response(s) {
                    // The response's rules (or log samples) may read the request: keep it
                    // as sent.
                    self.sent_head = sluice_http::parse_request(&s.out)
                        .ok()
                        .flatten()
                        .map(|h| (s.out.clone(), h));
                }
                s.cbuf.consume(head.len);
                if !edits.early_hints.is_empty() && facts.version == Version::Http11 {
                    let mut hint = b"HTTP/1.1 103 Early Hints\r\n".to_vec();
                    for (n, v) in &edits.early_hints {
                        super::heads::push_header(&mut hint, n.as_bytes(), v);
                    }
                    hint.extend_from_slice(b"\r\n");
                    self.send_local(s, &hint).await?;
                }
                if !check::killable(be, server) {
                    return self.forward(s, backend, server, &facts).await;
                }
                // `on-marked-down shutdown-sessions` ends the exchange wherever it is. (Only
                // then: waiting on the server's notification takes a lock shared by workers.)
                let kill = w.state().backends[backend].servers[server].kill.notified();
                tokio::select! {
                    done = self.forward(s, backend, server, &facts) => done,
                    _ = kill => Err(Fail::drop(Cause::Killed, self.phase)),
                }
            }
        }
    }

    /// Reads the request body into the client buffer (as much as fits) before the rules
    /// run, within the wait's time, and shows it to them (`req.body`). A body sent with
    /// chunked framing is not waited for. Returns whether it sent `100 Continue`.
    async fn wait_for_body(
        &mut self,
        s: &mut Session,
        head: &RequestHead,
        facts: &ReqFacts,
        wait: BodyWait,
    ) -> Result<bool, Fail> {
        // A chunked body's length is known once its last chunk arrived.
        let total = match facts.framing {
            Framing::Length(total) => total,
            Framing::Chunked => u64::MAX,
            _ => return Ok(false),
        };
        let chunked = facts.framing == Framing::Chunked;
        let want = wait.at_least.map_or(total, |n| n.min(total));
        let invite = facts.expect_continue && facts.version == Version::Http11 && total > 0;
        if invite {
            self.send_local(s, b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        let deadline = tokio::time::Instant::now() + wait.time;
        loop {
            let arrived = &s.cbuf.bytes()[head.len..];
            let enough = if chunked {
                // A malformed body is the relay's to refuse: no use waiting for more.
                chunked_data(arrived).is_none_or(|(data, done)| done || data.len() as u64 >= want)
            } else {
                arrived.len() as u64 >= want
            };
            if enough || s.cbuf.is_full() {
                break;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, s.read_client()).await {
                Ok(Ok(())) => {}
                Ok(Err(c)) => return Err(Fail::drop(c, Phase::Request)),
                // Out of time: the rules see what arrived.
                Err(_) => break,
            }
        }
        let arrived = &s.cbuf.bytes()[head.len..];
        if chunked {
            s.chunked_body = chunked_data(arrived).map(|(data, _)| data);
        } else {
            let have = arrived.len().min(total as usize);
            s.body.set(Some((head.len, head.len + have)));
        }
        Ok(invite)
    }

    async fn send_local(&mut self, s: &mut Session, bytes: &[u8]) -> Result<(), Fail> {
        s.write_client(bytes)
            .await
            .map_err(|c| Fail::drop(c, self.phase))
    }

    /// Sends the request (head in `s.out`, body from the client) and relays the response.
    async fn forward(
        &mut self,
        s: &mut Session,
        backend: usize,
        server: usize,
        facts: &ReqFacts,
    ) -> Result<bool, Fail> {
        let w = s.w.clone();
        let be = &w.config().backends[backend];
        s.sbuf.clear(&w.bufs);
        if facts.expect_continue
            && facts.version == Version::Http11
            && facts.framing != Framing::None
        {
            // The proxy streams the body itself, so it invites the client to send it now
            // rather than relaying the server's interim answer (which could deadlock).
            self.send_local(s, b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        // What a redispatch hashes: the request has left the buffer by now.
        let key = PickKey {
            client: s.peer.get().ip(),
            target: b"",
            extra: None,
        };
        self.phase = Phase::Queue;
        let mut at = Attempts::new(server);
        let reuse = Reuse {
            private: &mut s.private,
            first_request: s.requests == 0 && s.earlier == 0,
        };
        let abort_on = be.abortonclose.then_some(&s.client);
        let client = connect::Client {
            conn: &s.client,
            peer: s.peer.get(),
            unique_id: s.vars.unique_id.borrow().clone(),
        };
        let got = connect::establish(
            &w,
            backend,
            server,
            &key,
            Some(reuse),
            abort_on,
            &client,
            &mut at,
        );
        let got = got.await;
        self.log.attempts = Some(at);
        let (mut conn, _occupancy) = got.map_err(|e| {
            let phase = match e {
                ConnectError::Connect(_) | ConnectError::ClientGoneConnecting => Phase::Connect,
                _ => Phase::Queue,
            };
            match e {
                ConnectError::ClientGone | ConnectError::ClientGoneConnecting => {
                    Fail::drop(Cause::Connect(e), phase)
                }
                e => Fail::answer(503, Cause::Connect(e), phase),
            }
        })?;
        let server = at.server;
        s.info.route(Some(backend), Some(server));
        self.phase = Phase::Headers;
        if logs_backend_src(s.frontend()) {
            self.backend_src = conn.conn.local_addr().ok();
        }
        let head_len = s.out.len();
        let sent_at = clock::now();
        let counters = w.state().backends[backend].servers[server]
            .counters
            .at(w.tid);
        // One retry on a fresh connection when a reused one turns out dead before any
        // response byte, for bodiless idempotent requests (nothing was consumed that cannot
        // be sent again); and for any bodiless request whose HTTP/2 stream the server did
        // not process (it cannot have acted on it).
        let replayable = facts.idempotent && facts.framing == Framing::None;
        let unprocessed = |e: &io::Error| {
            matches!(facts.framing, Framing::None | Framing::Length(0))
                && crate::h2_stream::refused(e)
        };
        let mut attempt = 0;
        let rsp = loop {
            attempt += 1;
            s.out.truncate(head_len);
            let result = match self.send_request(s, &mut conn, facts).await {
                Ok(()) => {
                    // The request has left: its buffer serves others while the server
                    // thinks (an HTTP/2 connection has many streams waiting at once).
                    s.cbuf.release(&w.bufs);
                    self.read_response_head(s, be, &mut conn, facts).await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(rsp) => {
                    self.log.t_response = connect::ms(clock::since(sent_at));
                    self.log.status = i64::from(rsp.status);
                    check::observe(&w.process, backend, server, Seen::Response(rsp.status));
                    break rsp;
                }
                Err(SendFail::Retryable(e))
                    if attempt == 1 && (conn.reused && replayable || unprocessed(&e)) =>
                {
                    // A dead connection is replaced by a new one; a refused stream is
                    // followed by another stream, on the link if it still takes them.
                    let reuse = unprocessed(&e).then_some(Reuse {
                        private: &mut s.private,
                        first_request: false,
                    });
                    let mut again = Attempts::new(server);
                    let client = connect::Client {
                        conn: &s.client,
                        peer: s.peer.get(),
                        unique_id: s.vars.unique_id.borrow().clone(),
                    };
                    conn = connect::establish(
                        &w, backend, server, &key, reuse, None, &client, &mut again,
                    )
                    .await
                    .map(|(c, _)| c)
                    .map_err(|e| Fail::answer(503, Cause::Connect(e), Phase::Connect))?;
                }
                Err(SendFail::Retryable(e)) => {
                    counters.response_errors.bump();
                    check::observe(&w.process, backend, server, Seen::BadResponse);
                    return Err(Fail::answer(502, Cause::Server(Some(e)), Phase::Headers));
                }
                Err(SendFail::Fail(f)) => {
                    if matches!(f.cause, Cause::Server(_) | Cause::InvalidResponse) {
                        counters.response_errors.bump();
                        check::observe(&w.process, backend, server, Seen::BadResponse);
                    }
                    return Err(f);
                }
            }
        };
        self.relay_response(s, be, conn, rsp, facts).await
    }

    /// Writes the request head and streams the body to the server.
    async fn send_request(
        &mut self,
        s: &mut Session,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<(), SendFail> {
        let tserver = facts.timeout_server;
        let to_server = |r: Result<io::Result<()>, ()>| match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SendFail::Retryable(e)),
            Err(()) => Err(SendFail::Fail(Fail::answer(
                504,
                Cause::ServerTimeout,
                Phase::Headers,
            ))),
        };
        let from_client = |c: Cause| {
            SendFail::Fail(match c {
                Cause::ClientTimeout => Fail::answer(408, c, Phase::Headers),
                c => Fail::drop(c, Phase::Headers),
            })
        };
        match facts.framing {
            Framing::None | Framing::UntilClose => {
                to_server(within(tserver, conn.conn.write_all(&s.out)).await)
            }
            Framing::Length(total) => {
                let mut remaining = total;
                loop {
                    let take = (remaining as usize).min(s.cbuf.bytes().len());
                    // Only hold the segment back when the rest is already waiting.
                    let then = if remaining > take as u64
                        && s.cbuf.read_to_capacity()
                        && s.client.has_input()
                    {
                        Then::More
                    } else {
                        Then::Flush
                    };
                    let body = &s.cbuf.bytes()[..take];
                    to_server(within(tserver, conn.conn.write_pair(&s.out, body, then)).await)?;
                    s.out.clear();
                    s.cbuf.consume(take);
                    remaining -= take as u64;
                    if remaining == 0 {
                        return Ok(());
                    }
                    s.read_client().await.map_err(from_client)?;
                }
            }
            Framing::Chunked => {
                let mut dec = ChunkedDecoder::new();
                let bad = || SendFail::Fail(Fail::answer(400, Cause::Proxy, Phase::Headers));
                loop {
                    let used = dec
                        .decode(s.cbuf.bytes(), ChunkedOut::Chunked, &mut s.out)
                        .map_err(|_| bad())?;
                    s.cbuf.consume(used);
                    if !s.out.is_empty() {
                        to_server(within(tserver, conn.conn.write_all(&s.out)).await)?;
                        s.out.clear();
                    }
                    if dec.is_done() {
                        return Ok(());
                    }
                    if s.cbuf.is_full() {
                        return Err(bad());
                    }
                    s.read_client().await.map_err(from_client)?;
                }
            }
        }
    }

    /// Reads the final response head, relaying interim (1xx) responses to the client.
    async fn read_response_head(
        &mut self,
        s: &mut Session,
        be: &Backend,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<ResponseHead, SendFail> {
        let w = s.w.clone();
        let invalid = || SendFail::Fail(Fail::answer(502, Cause::InvalidResponse, Phase::Headers));
        let truncated = || SendFail::Fail(Fail::answer(502, Cause::Server(None), Phase::Headers));
        let head_room = w.config().global.head_room();
        let mut got_any = false;
        loop {
            if !s.sbuf.is_empty() {
                match parse_response(s.sbuf.bytes(), facts.is_head) {
                    Ok(Some(rsp)) if (100..200).contains(&rsp.status) => {
                        if rsp.status == 101 {
                            // Only an upgrade the client asked for switches protocols.
                            return if facts.upgrade.is_some() {
                                Ok(rsp)
                            } else {
                                Err(invalid())
                            };
                        }
                        let mut interim = Vec::new();
                        write_response_head(
                            &mut interim,
                            &ResponseView::h1(s.sbuf.bytes(), &rsp),
                            &Edits::default(),
                            None,
                            None,
                        );
                        s.sbuf.consume(rsp.len);
                        // HAProxy counts interim responses in the bytes of the transaction.
                        self.log.interim_bytes += super::report::htx_head_size(&interim);
                        if facts.version == Version::Http11 {
                            s.write_client(&interim)
                                .await
                                .map_err(|c| SendFail::Fail(Fail::drop(c, Phase::Headers)))?;
                        }
                        continue;
                    }
                    Ok(Some(rsp)) if rsp.len <= head_room => return Ok(rsp),
                    Ok(Some(_)) => {
                        self.capture_response(s, be, conn);
                        return Err(invalid());
                    }
                    Ok(None) if s.sbuf.is_full() || s.sbuf.bytes().len() >= head_room => {
                        self.capture_response(s, be, conn);
                        return Err(invalid());
                    }
                    Ok(None) => {}
                    Err(_) => {
                        self.capture_response(s, be, conn);
                        return Err(invalid());
                    }
                }
            }
            match within(facts.timeout_server, s.sbuf.fill(&mut conn.conn, &w.bufs)).await {
                Ok(Ok(n)) if n > 0 => got_any = true,
                Ok(Ok(_)) if !got_any => {
                    return Err(SendFail::Retryable(io::ErrorKind::UnexpectedEof.into()))
                }
                Ok(Err(e)) if !got_any => return Err(SendFail::Retryable(e)),
                // The server closed (or failed) in the middle of its response head.
                Ok(_) => return Err(truncated()),
                Err(()) => {
                    return Err(SendFail::Fail(Fail::answer(
                        504,
                        Cause::ServerTimeout,
                        Phase::Headers,
                    )))
                }
            }
        }
    }

    /// Keeps the invalid response head for `show errors`.
    fn capture_response(&self, s: &Session, be: &Backend, conn: &ServerConn) {
        let bytes = s.sbuf.bytes();
        let server = self.log.attempts.map(|a| &be.servers[a.server]);
        let backend = self.backend.expect("a response comes from a backend");
        s.w.state().backends[backend]
            .errors
            .keep(crate::runtime::CapturedError {
                when: std::time::SystemTime::now(),
                peer: conn.conn.peer_addr().unwrap_or(s.peer.get()),
                server: server.map(|srv| (srv.id, srv.name.clone())),
                at: sluice_http::error_position(bytes, false),
                bytes: bytes.to_vec(),
                event: 0,
            });
    }

    /// Lets samples read the capture slots (`capture.req.hdr(N)`, `capture.res.hdr(N)`).
    pub(super) fn share_captures(&self, s: &Session) {
        *s.vars.captured.borrow_mut() = crate::sample::Captured {
            req: self.log.captures_req.clone(),
            res: self.log.captures_res.clone(),
        };
    }

    /// What the log keeps of the request head before rules run: its number, captured
    /// headers and unique id.
    fn request_log_facts(&mut self, s: &Session, req: &RequestView<'_>) {
        let fe = s.frontend();
        let shows_rt = |t: &[crate::log::Token]| {
            t.iter().any(|t| {
                matches!(
                    t,
                    crate::log::Token::Var(crate::log::Var::RequestCounter, _)
                )
            })
        };
        let custom = match &fe.log.format {
            Some(crate::log::Format::Custom(t)) => Some(t.as_slice()),
            _ => None,
        };
        // The shared counter costs a write to a line every worker writes: only for
        // formats that show it.
        self.log.counter =
            if fe.log.unique_id.as_deref().is_some_and(shows_rt) || custom.is_some_and(shows_rt) {
                s.w.process
                    .figures
                    .request_ids
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            } else {
                s.w.ctx().counters.requests.get()
            };
        if !fe.log.captures_req.is_empty() {
            self.log.captures_req = super::report::captures(&fe.log.captures_req, req.headers());
            self.share_captures(s);
        }
        if let Some((name, len)) = &fe.log.capture_cookie {
            let cookies = req
                .headers()
                .filter(|(n, _)| sluice_http::name_is(n, "cookie"));
            self.log.cookie_req = super::report::capture_cookie(cookies, name, *len, false);
        }
        if let Some(format) = &fe.log.unique_id {
            let date = self.log.date.unwrap_or_else(std::time::SystemTime::now);
            let rec = crate::log::Record {
                dst: needs_dst(format)
                    .then(|| s.client.local_addr().ok())
                    .flatten(),
                request_counter: self.log.counter,
                ..crate::log::Record::blank(
                    crate::log::Client::of(&s.client, s.peer.get(), s.info.listener),
                    date,
                    &fe.name,
                )
            };
            let id: std::rc::Rc<str> = rec.render_tokens(format).into();
            *s.vars.unique_id.borrow_mut() = Some(id.clone());
            self.log.unique_id = Some(id);
        }
    }

    /// The `%[...]` samples of the frontend's log format, while the request is at hand.
    fn render_log_samples(&mut self, s: &Session, req: &RequestView<'_>, route: &Route) {
        let Some(tokens) = log_sample_tokens(s) else {
            return;
        };
        let backend = match route {
            Route::Forward { backend, .. } => Some(*backend),
            Route::Error { backend, .. } => *backend,
            _ => None,
        };
        self.log.samples = render_samples(tokens, &s.sample_ctx(req, backend));
    }

    /// Renders the log format's samples again once the response is in (`cx` sees the
    /// request as sent and the response); see `log_reads_response`.
    pub(super) fn render_log_samples_at_response(&mut self, s: &Session, cx: &Ctx<'_>) {
        if let Some(tokens) = log_sample_tokens(s) {
            self.log.samples = render_samples(tokens, cx);
        }
    }

    /// Counts and logs a transaction that completed.
    pub fn log_done(&self, s: &Session) {
        let term = self.log.term.unwrap_or(*b"--");
        self.count(s, self.log.status, term);
        if !self.log.logged {
            self.emit_log(s, self.log.status, term, false);
        }
    }

    /// Logs a transaction that failed.
    pub fn log_end(&mut self, s: &Session, fail: &Fail) {
        let status = match fail.status {
            Some(st) => {
                self.log.bytes = super::report::htx_message_size(&s.error_bytes(st, self.backend));
                i64::from(st)
            }
            None => self.log.status,
        };
        let term = self.log.term.unwrap_or_else(|| fail.term());
        self.count(s, status, term);
        if !self.log.logged {
            self.emit_log(s, status, term, false);
        }
    }

    /// What the request counts in `bin` and `%U`, as HAProxy counts it: its head's HTX
    /// size, then its body as received; nothing when no head was read.
    pub fn bytes_in(&self, s: &Session) -> u64 {
        let (wire, htx) = self.log.head_in;
        if wire == 0 {
            return 0;
        }
        (s.received - self.log.received_before).saturating_sub(wire) + htx
    }

    /// The line of a request whose head never completed. HAProxy's connection layer answers
    /// those itself, outside any stream: its line counts no bytes, and a client that left
    /// within its head is logged with status 400 though nothing was sent.
    pub fn log_head_failure(&mut self, s: &Session, fail: &Fail) {
        self.log.bytes = 0;
        let term = self.log.term.unwrap_or_else(|| fail.term());
        self.count(s, fail.status.map_or(-1, i64::from), term);
        if !self.log.logged {
            self.emit_log(s, fail.status.map_or(400, i64::from), term, false);
        }
    }

    /// Adds the transaction to the statistics of its frontend, backend and server.
    fn count(&self, s: &Session, status: i64, term: [u8; 2]) {
        let lg = &self.log;
        let at = clock::now();
        let ms = |d: std::time::Duration| d.as_millis() as i64;
        // The server counts once a connection to it was made.
        let server = lg.attempts.filter(|a| a.t_connect >= 0).map(|a| a.server);
        Tally {
            status: u16::try_from(status).ok().filter(|&st| st > 0),
            request: lg.parsed,
            bytes_in: self.bytes_in(s),
            bytes_out: lg.bytes,
            term,
            local: lg.local,
            t_queue: lg.attempts.map_or(-1, |a| a.t_queue),
            t_connect: lg.attempts.map_or(-1, |a| a.t_connect),
            t_response: lg.t_response,
            t_total: lg.started.map_or(-1, |a| ms(at - a)),
            at,
        }
        .count(&s.w, (s.fe, s.info.listener), self.backend, server);
    }

    /// Sends the access-log line of the transaction.
    /// The access-log line; `asap`: sent as the response starts (`option logasap`).
    pub(super) fn emit_log(&self, s: &Session, status: i64, term: [u8; 2], asap: bool) {
        let process = &s.w.process;
        let loggers = &process.loggers[s.fe];
        if loggers.is_empty() || self.log.level == Some(None) {
            return;
        }
        let config = s.w.config();
        let fe = s.frontend();
        // An error in HAProxy's sense: a 5xx answer, a termination other than normal or
        // local, or a retried connection.
        let retried = self.log.attempts.is_some_and(|a| a.retries > 0);
        let error = !matches!(term[0], b'-' | b'L') || status >= 500 || retried;
        if fe.log.dont_log_normal && !error {
            return;
        }
        let level = match self.log.level.flatten() {
            None if error && fe.log.separate_errors => Some(3),
            other => other,
        };
        let lg = &self.log;
        let now = clock::now();
        let be = self.backend.map(|b| &config.backends[b]);
        let be_state = self.backend.map(|b| &s.w.state().backends[b]);
        let server = lg.attempts.map(|a| a.server);
        let srv = be.zip(server).map(|(be, i)| &be.servers[i]);
        let srv_state = be_state.zip(server).map(|(st, i)| &st.servers[i]);
        let (method, uri, version) = lg
            .line
            .clone()
            .unwrap_or_else(|| ("<BADREQ>".into(), String::new(), ""));
        let no_response = vec![None; fe.log.captures_res.len()];
        let ms = |d: std::time::Duration| d.as_millis() as i64;
        // A TCP frontend logs from `tcp`; here the default is the HTTP line.
        let format = fe.log.format.as_ref().unwrap_or(&crate::log::Format::Http);
        let rec = crate::log::Record {
            client: crate::log::Client::of(&s.client, s.peer.get(), s.info.listener),
            date: lg.date.unwrap_or_else(std::time::SystemTime::now),
            frontend: &fe.name,
            backend: be.map_or(&fe.name, |b| &b.name),
            server: match lg.local {
                Some(Local::Cached) => "<CACHE>",
                _ => srv.map_or("<NOSRV>", |s| &s.name),
            },
            t_request: lg
                .first_byte
                .zip(lg.head_done)
                .map_or(-1, |(a, b)| ms(b - a)),
            t_queue: lg.attempts.map_or(-1, |a| a.t_queue),
            t_connect: lg.attempts.map_or(-1, |a| a.t_connect),
            t_response: lg.t_response,
            t_active: lg.first_byte.or(lg.started).map_or(-1, |a| ms(now - a)),
            status,
            bytes: lg.bytes,
            term,
            act_conn: process.active_total(),
            fe_conn: process.state.frontends[s.fe]
                .conns
                .load(std::sync::atomic::Ordering::Relaxed),
            // The request is over: as in HAProxy's line, it no longer counts on its backend
            // and server.
            be_conn: be_state.map_or(0, |b| b.in_flight()),
            srv_conn: srv_state.map_or(0, |st| {
                st.in_flight.load(std::sync::atomic::Ordering::Relaxed)
            }),
            retries: lg.attempts.map_or(0, |a| a.retries),
            srv_queue: srv_state.map_or(0, |st| {
                st.queue.waiting.load(std::sync::atomic::Ordering::Relaxed)
            }),
            be_queue: 0,
            method,
            uri,
            version: version.into(),
            dst: needs_dst(format_tokens(format))
                .then(|| s.client.local_addr().ok())
                .flatten(),
            bytes_in: self.bytes_in(s),
            captures_req: &lg.captures_req,
            captures_res: if lg.line.is_some() && lg.captures_res.is_empty() {
                // No response to capture from: the configured slots print empty (`{}`).
                &no_response
            } else {
                &lg.captures_res
            },
            unique_id: lg.unique_id.as_deref(),
            samples: &lg.samples,
            request_counter: lg.counter,
            cookie_req: lg.cookie_req.as_deref(),
            cookie_res: lg.cookie_res.as_deref(),
            server_addr: srv.map(|s| s.addr),
            backend_src: self.backend_src,
            t_idle: lg.started.zip(lg.first_byte).map_or(-1, |(a, b)| ms(b - a)),
            asap,
            cookie_flags: lg.cookie_flags,
            log_counter: count_line(format, &process.state.frontends[s.fe]),
            tls: s.client.tls().map(|t| (t.cipher, t.version)),
        };
        crate::log::emit_at(loggers, format, &rec, level);
    }
}

/// The tokens of a custom format (the built-in ones use no `%fi`/`%fp`).
fn format_tokens(f: &crate::log::Format) -> &[crate::log::Token] {
    match f {
        crate::log::Format::Custom(t) => t,
        _ => &[],
    }
}

/// Whether responses through this frontend and backend run rules (which may read the
/// request).
pub(super) fn has_response_rules(fe: &Frontend, be: &Backend) -> bool {
    let (f, b) = (&fe.rules, &be.rules);
    [
        &b.tcp_response,
        &b.http_response,
        &f.http_response,
        &b.http_after_response,
        &f.http_after_response,
    ]
    .iter()
    .any(|l| !l.is_empty())
}

/// `%lc`: the frontend's line count, this line included (counted only for formats that
/// show it, since the counter is shared by the workers).
pub(super) fn count_line(format: &crate::log::Format, fe: &crate::runtime::FrontendState) -> u64 {
    let shows = format_tokens(format)
        .iter()
        .any(|t| matches!(t, crate::log::Token::Var(crate::log::Var::LogCounter, _)));
    // The frontend's count of lines before this one, as HAProxy's `%lc` (0 first).
    if shows {
        fe.log_lines
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    } else {
        0
    }
}

/// Whether the frontend's log shows the proxy's end of server connections (a system call
/// to learn).
fn logs_backend_src(fe: &Frontend) -> bool {
    let tokens = fe.log.format.as_ref().map_or(&[][..], format_tokens);
    tokens.iter().any(|t| {
        matches!(
            t,
            crate::log::Token::Var(
                crate::log::Var::BackendSrcIp | crate::log::Var::BackendSrcPort,
                _
            )
        )
    })
}

/// Whether a format prints the address the client connected to (a system call to learn).
fn needs_dst(tokens: &[crate::log::Token]) -> bool {
    tokens.iter().any(|t| {
        matches!(
            t,
            crate::log::Token::Var(
                crate::log::Var::FrontendIp | crate::log::Var::FrontendPort,
                _
            )
        )
    })
}

/// Whether the server connection closes after this response.
pub(crate) fn server_close(fe: &Frontend, be: &Backend) -> bool {
    fe.stream.close_mode.max(be.stream.close_mode) >= CloseMode::ServerClose
}

/// Applies frontend rules, routing, then backend rules, and picks a server.
/// The status code of a response the proxy wrote itself.
fn status_of(bytes: &[u8]) -> i64 {
    std::str::from_utf8(bytes.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1)
}

/// The response of a built-in service.
fn serve(s: &Session, service: Service, req: &RequestView<'_>) -> Vec<u8> {
    match service {
        Service::PrometheusExporter => {
            let target = req.target();
            let query = target
                .iter()
                .position(|&b| b == b'?')
                .map_or(&b""[..], |i| &target[i + 1..]);
            let scope = stats::prometheus::Scope::from_query(&String::from_utf8_lossy(query));
            let body = stats::prometheus::render(&s.w.process, scope);
            local_response(
                200,
                Some("text/plain; version=0.0.4; charset=utf-8"),
                body.as_bytes(),
            )
        }
    }
}

/// The path and query of a request target in absolute form (`http://host/p?q` gives
/// `/p?q`), as HAProxy compares `monitor-uri`; any other form as it is.
fn origin_form(target: &[u8]) -> &[u8] {
    let lower = target.get(..8).map(|p| p.to_ascii_lowercase());
    let after_scheme = match lower.as_deref() {
        Some(p) if p.starts_with(b"http://") => &target[7..],
        Some(p) if p.starts_with(b"https://") => &target[8..],
        _ => return target,
    };
    match after_scheme.iter().position(|&b| b == b'/') {
        Some(i) => &after_scheme[i..],
        None => b"/",
    }
}

/// `page` (a whole response) with one more header, after its status line.
fn with_header(mut page: Vec<u8>, name: &str, value: &str) -> Vec<u8> {
    let Some(eol) = page.windows(2).position(|w| w == b"\r\n") else {
        return page;
    };
    let line = format!("{name}: {value}\r\n");
    page.splice(eol + 2..eol + 2, line.into_bytes());
    page
}

fn route(s: &Session, req: &RequestView<'_>) -> (Route, Edits) {
    let config = s.w.config();
    let fe = s.frontend();
    let mut edits = Edits::default();
    if fe.monitor.uri.as_deref().map(str::as_bytes) == Some(origin_form(req.target())) {
        // `monitor-uri`: the proxy answers for itself, before any rule.
        let failing = fe
            .monitor
            .fail
            .as_ref()
            .is_some_and(|c| c.eval(&s.sample_ctx(req, None)));
        let route = if failing {
            Route::Error {
                status: 503,
                backend: None,
                denied: false,
                page: None,
            }
        } else {
            // HAProxy's 200 page (or the `errorfile 200` in its place), then close.
            Route::Respond {
                bytes: s.error_page_for(200, None, Some(req)),
                close: true,
            }
        };
        return (route, edits);
    }
    if !content_accepts(s, &fe.rules.tcp_content, req, None, false) {
        return (Route::Reject { backend: None }, edits);
    }
    // The request counts in every entry tracked so far (later ones count it as they start).
    s.vars
        .count(&crate::rules::REQUEST, crate::runtime::clock_ms());
    let mut view = RuleView::new(req);
    if let Some(r) = apply_rules(s, &fe.rules.http_request, &mut view, &mut edits, None) {
        return (r, edits);
    }
    if let Some(r) = apply_rules(s, &fe.rules.redirects, &mut view, &mut edits, None) {
        return (r, edits);
    }
    if fe.stats.enabled && req.target().starts_with(fe.stats.uri().as_bytes()) {
        return (Route::StatsPage(None), edits);
    }
    let backend = if let Some(b) = s.pinned {
        // A TCP frontend chose this HTTP backend for the whole connection.
        Some(b)
    } else if fe.rules.switching.is_empty() {
        fe.rules.default_backend
    } else {
        let reads = fe.rules.switching.iter().any(|(cond, target)| {
            cond.as_ref().is_some_and(|c| c.reads_request())
                || matches!(target, BackendRef::Dynamic(f) if f.reads_request())
        });
        let now = if reads { view.get(&edits) } else { view.last() };
        let cx = s.sample_ctx(&now, None);
        crate::rules::switch(&fe.rules.switching, &cx, &config.backends)
            .or(fe.rules.default_backend)
    };
    // No backend: 503, as HAProxy answers.
    let Some(backend) = backend else {
        return (
            Route::Error {
                status: 503,
                backend: None,
                denied: false,
                page: None,
            },
            edits,
        );
    };
    let be = &config.backends[backend];
    let st = &s.w.state().backends[backend];
    if !content_accepts(
        s,
        &be.rules.tcp_content,
        &view.get(&edits),
        Some(backend),
        true,
    ) {
        return (
            Route::Reject {
                backend: Some(backend),
            },
            edits,
        );
    }
    if let Some(r) = apply_rules(
        s,
        &be.rules.http_request,
        &mut view,
        &mut edits,
        Some(backend),
    ) {
        return (r, edits);
    }
    if let Some(r) = apply_rules(s, &be.rules.redirects, &mut view, &mut edits, Some(backend)) {
        return (r, edits);
    }
    // Balancing and persistence see the request as rewritten (the body is the client's).
    let orig = view.orig;
    let p = &be.persist;
    let reads =
        be.algo.hashes() || p.cookie.is_some() || !p.stick.is_empty() || !p.use_server.is_empty();
    let req = if reads { view.get(&edits) } else { view.last() };
    let req = &req;
    if be.stats.enabled && req.target().starts_with(be.stats.uri().as_bytes()) {
        return (Route::StatsPage(Some(backend)), edits);
    }
    // `balance hash EXPR`: the sample as binary, seen as balancing sees the request.
    let hashed = match &be.algo {
        balance::Algo::Hash(e) => e
            .eval(&s.sample_ctx(req, Some(backend)))
            .map(|v| v.as_binary().into_owned()),
        _ => None,
    };
    let extra = match &be.algo {
        balance::Algo::Hash(_) => hashed.as_deref(),
        // The first value of the first such header, as HAProxy takes it.
        balance::Algo::Hdr(name, _) => req
            .header(name)
            .map(|v| sluice_http::trim_ows(v.split(|&b| b == b',').next().unwrap_or(v))),
        // `check_post`: a form body, as far as it arrived with the head.
        balance::Algo::UrlParam(name, true) => req
            .header("content-type")
            .filter(|t| t.starts_with(b"application/x-www-form-urlencoded"))
            .and_then(|_| balance::form_param(orig.body_so_far(), name)),
        _ => None,
    };
    let key = PickKey {
        client: s.peer.get().ip(),
        target: req.target(),
        extra,
    };
    let persisted = persist::decide(be, st, &s.sample_ctx(req, Some(backend)), req);
    // A private connection (http-reuse never) keeps its server while it is usable.
    let server = match &s.private {
        Some(p) if p.backend == backend && st.servers[p.server].usable() => Some(p.server),
        _ => persisted
            .server
            .or_else(|| balance::pick(be, st, &key, &s.w.lb)),
    };
    match server {
        Some(server) => (
            Route::Forward {
                backend,
                server,
                cookie_server: persisted.cookie,
                stick: persisted.stick,
                cookie_flag: persisted.cookie_flag,
            },
            edits,
        ),
        None => (
            Route::Error {
                status: 503,
                backend: Some(backend),
                denied: false,
                page: None,
            },
            edits,
        ),
    }
}

/// The request as rules see it: the client's, or once a rule edited it, a copy with the
/// edits so far applied (made again only when needed after another edit), so that later
/// conditions, routing and balancing see what the server will get.
struct RuleView<'r> {
    orig: &'r RequestView<'r>,
    copy: Option<(Vec<u8>, RequestHead)>,
    stale: bool,
}

impl<'r> RuleView<'r> {
    fn new(orig: &'r RequestView<'r>) -> RuleView<'r> {
        RuleView {
            orig,
            copy: None,
            stale: false,
        }
    }

    /// The request with `edits` applied.
    fn get(&mut self, edits: &Edits) -> RequestView<'_> {
        if self.stale {
            self.copy = edited_request(self.orig, edits);
            self.stale = false;
        }
        self.last()
    }

    /// The request as last made, for a rule that does not read it (no copy is made for
    /// it; only its target, unchanged by any edit so far when edits do not hold one, may be
    /// looked at).
    fn last(&self) -> RequestView<'_> {
        match &self.copy {
            Some((bytes, head)) => RequestView::h1(bytes, head),
            None => *self.orig,
        }
    }
}

fn apply_rules(
    s: &Session,
    rules: &[Rule],
    view: &mut RuleView<'_>,
    edits: &mut Edits,
    backend: Option<usize>,
) -> Option<Route> {
    let req = view.orig;
    for rule in rules {
        let now = if rule.reads_request {
            view.get(edits)
        } else {
            view.last()
        };
        let mut cx = s.sample_ctx(&now, backend);
        cx.set_timeouts = (edits.timeout_server, edits.timeout_tunnel);
        if !holds(&rule.cond, &cx) {
            continue;
        }
        // A `return` renders its answer before it counts as the last rule (HAProxy's
        // order); a `deny` page after.
        if !matches!(rule.action, Action::Return(_)) {
            cx.vars.note_rule(rule);
        }
        let edited = match &rule.action {
            Action::Return(reply) => {
                let bytes = reply_bytes(reply, &cx);
                cx.vars.note_rule(rule);
                return Some(Route::Respond {
                    bytes,
                    close: false,
                });
            }
            Action::Deny { status, reply } => {
                return Some(Route::Error {
                    status: *status,
                    backend,
                    denied: true,
                    page: reply.as_ref().map(|r| reply_bytes(r, &cx)),
                })
            }
            Action::Auth(realm) => {
                let config = s.w.config();
                let realm = realm.as_deref().unwrap_or_else(|| match backend {
                    Some(b) => &config.backends[b].name,
                    None => &s.frontend().name,
                });
                let page = s.error_page_for(401, backend, Some(&now));
                return Some(Route::Error {
                    status: 401,
                    backend,
                    denied: false,
                    page: Some(with_header(
                        page,
                        "WWW-Authenticate",
                        &format!("Basic realm=\"{realm}\""),
                    )),
                });
            }
            Action::Tarpit { status, reply } => {
                return Some(Route::Tarpit {
                    status: *status,
                    backend,
                    page: reply.as_ref().map(|r| reply_bytes(r, &cx)),
                })
            }
            Action::Reject => return Some(Route::Reject { backend }),
            Action::SetSrc(e) => {
                if let Some(ip) = e.eval(&cx).and_then(|v| v.as_ip()) {
                    let addr = SocketAddr::new(ip, s.peer.get().port());
                    s.peer.set(addr);
                    cx.src = addr;
                }
                false
            }
            Action::SetDst(e) => {
                if let Some(ip) = e.eval(&cx).and_then(|v| v.as_ip()) {
                    let port = cx
                        .client
                        .and_then(|c| c.local_addr().ok())
                        .map_or(0, |a| a.port());
                    let addr = SocketAddr::new(ip, s.dst.get().map_or(port, |a| a.port()));
                    s.dst.set(Some(addr));
                    cx.dst = Some(addr);
                }
                false
            }
            // The body was waited for before the rules ran (`wait_for_body`).
            Action::WaitForBody { .. } => false,
            Action::CacheUse(c) => {
                if let Some(entry) = cache_use(s, c.index, &now, backend, edits) {
                    return Some(Route::Cached { entry, backend });
                }
                false
            }
            Action::Allow => return None,
            Action::UseService(service) => {
                return Some(Route::Respond {
                    bytes: serve(s, *service, req),
                    close: false,
                })
            }
            Action::Redirect(r) => {
                return Some(Route::Respond {
                    bytes: redirect(r, req, edits, &cx),
                    close: false,
                })
            }
            other => {
                let level = Level::Txn {
                    count_request: true,
                };
                let edits_it = !run_shared(other, &cx, level);
                if edits_it {
                    edits.apply(other, &cx);
                }
                edits_it
            }
        };
        view.stale |= edited;
    }
    None
}

/// `http-request cache-use`: keys the request (for `cache-store` on its response) and,
/// when the cache holds a fresh object it may get, returns it. Lookups and hits count on
/// the proxy whose rule it is, as HAProxy's.
fn cache_use(
    s: &Session,
    cache: usize,
    req: &RequestView<'_>,
    backend: Option<usize>,
    edits: &mut Edits,
) -> Option<std::sync::Arc<crate::cache::Entry>> {
    let w = &s.w;
    let store = &w.state().caches[cache];
    let lookup = crate::cache::Lookup::of(req, store.conf.process_vary)?;
    let ignore = lookup.policy.ignore;
    let key = lookup.key;
    let vary = lookup.vary.clone().unwrap_or_default();
    edits.cache_lookup = Some(lookup);
    if ignore {
        return None;
    }
    let counters = match backend {
        Some(b) => w.state().backends[b].counters.at(w.tid),
        None => w.state().frontends[s.fe].counters.at(w.tid),
    };
    counters.cache_lookups.bump();
    let entry = store.lookup(&key, &vary, crate::cache::unix_now())?;
    counters.cache_hits.bump();
    Some(entry)
}

/// Whether `tcp-request content` rules let an HTTP request through (their tracking is the
/// transaction's).
fn content_accepts(
    s: &Session,
    rules: &[Rule],
    req: &RequestView<'_>,
    backend: Option<usize>,
    count_request: bool,
) -> bool {
    rules.is_empty()
        || tcp_verdict(
            rules,
            &s.sample_ctx(req, backend),
            Level::Txn { count_request },
        )
}

/// How long the rules wait for a request body, and how much of it is enough.
struct BodyWait {
    time: Duration,
    at_least: Option<u64>,
}

/// Whether the frontend's rules wait for the request body: `option http-buffer-request`
/// (for `timeout http-request`, else `timeout client`) or a `wait-for-body` rule.
fn body_wait(s: &Session) -> Option<BodyWait> {
    let fe = s.frontend();
    let rule = fe.rules.http_request.iter().find_map(|r| match r.action {
        Action::WaitForBody { time, at_least } => Some(BodyWait { time, at_least }),
        _ => None,
    });
    rule.or_else(|| {
        fe.stream.buffer_request.then(|| BodyWait {
            time: fe
                .stream
                .timeout_http_request
                .or(fe.stream.timeout_client)
                .unwrap_or(Duration::from_secs(5)),
            at_least: None,
        })
    })
}

/// A response the proxy wrote itself, through the `http-after-response` rules of the
/// backend (if any) then the frontend. `req`: the request, when still buffered.
pub(super) fn after_response(
    s: &Session,
    backend: Option<usize>,
    req: Option<&RequestView<'_>>,
    bytes: Vec<u8>,
) -> Vec<u8> {
    let config = s.w.config();
    let be_rules = backend.map_or(&[][..], |b| &config.backends[b].rules.http_after_response);
    let fe_rules = &s.frontend().rules.http_after_response;
    if be_rules.is_empty() && fe_rules.is_empty() {
        return bytes;
    }
    let Ok(Some(rsp)) = sluice_http::parse_response(&bytes, false) else {
        return bytes;
    };
    let view = ResponseView::h1(&bytes, &rsp);
    let cx = Ctx {
        backend,
        req,
        res: Some(&view),
        ..s.sample_ctx_base()
    };
    let mut edits = Edits::default();
    for rules in [be_rules, fe_rules] {
        edits.response_rules(rules, &cx);
    }
    let mut out = Vec::with_capacity(bytes.len() + 64);
    let client = (rsp.framing, !rsp.must_close, Version::Http11, None);
    write_response_head(&mut out, &view, &edits, Some(client), None);
    out.extend_from_slice(&bytes[rsp.len..]);
    out
}

/// The response of `http-request redirect`.
fn redirect(r: &Redirect, req: &RequestView<'_>, edits: &Edits, cx: &Ctx<'_>) -> Vec<u8> {
    let target = edits.target.as_deref().unwrap_or(req.target());
    let (_, path, query) = split_target(target);
    let mut path = path.to_vec();
    if r.append_slash && !path.ends_with(b"/") {
        path.push(b'/');
    }
    let tail = |mut out: Vec<u8>| {
        out.extend_from_slice(&path);
        if let (Some(q), false) = (query, r.drop_query) {
            out.push(b'?');
            out.extend_from_slice(q);
        }
        out
    };
    let value = r.value.render(cx);
    let location = match r.kind {
        RedirectKind::Location => value,
        RedirectKind::Prefix => {
            // A prefix of "/" adds nothing before the path.
            let prefix = if value == b"/" { Vec::new() } else { value };
            tail(prefix)
        }
        RedirectKind::Scheme => {
            let mut out = value;
            out.extend_from_slice(b"://");
            out.extend_from_slice(req.header("host").unwrap_or_default());
            tail(out)
        }
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-length: 0\r\nlocation: ",
        r.code,
        reason(r.code)
    )
    .into_bytes();
    out.extend_from_slice(&location);
    out.extend_from_slice(b"\r\n");
    if let Some(c) = &r.set_cookie {
        let c = if c.contains('=') {
            c.clone()
        } else {
            format!("{c}=")
        };
        out.extend_from_slice(format!("set-cookie: {c}; path=/\r\n").as_bytes());
    }
    if let Some(c) = &r.clear_cookie {
        out.extend_from_slice(
            format!(
                "set-cookie: {c}=; Max-Age=0; Expires=Thu, 01-Jan-1970 00:00:01 GMT; path=/\r\n"
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The data of the chunked body at the start of `bytes`, as far as it arrived, and whether
/// it is complete; `None` when it is malformed.
fn chunked_data(bytes: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut decoder = sluice_http::ChunkedDecoder::new();
    let mut data = Vec::new();
    decoder
        .decode(bytes, sluice_http::ChunkedOut::Raw, &mut data)
        .ok()?;
    Some((data, decoder.is_done()))
}

/// Whether a sample of the log format reads the response or a variable: those are
/// rendered again once the response is in, as HAProxy evaluates them when the line is
/// written.
pub(super) fn log_reads_response(s: &Session) -> bool {
    log_sample_tokens(s).is_some_and(|tokens| {
        tokens
            .iter()
            .any(|t| matches!(t, crate::log::Token::Sample(e, _) if e.reads_response()))
    })
}

/// The frontend's custom log format, when it has somewhere to go.
fn log_sample_tokens(s: &Session) -> Option<&[crate::log::Token]> {
    let Some(crate::log::Format::Custom(tokens)) = &s.frontend().log.format else {
        return None;
    };
    (!s.w.process.loggers[s.fe].is_empty()).then_some(tokens.as_slice())
}

/// The text of each `%[...]` sample of a format (`-` when it gives nothing).
fn render_samples(tokens: &[crate::log::Token], cx: &Ctx<'_>) -> Vec<String> {
    tokens
        .iter()
        .filter_map(|t| match t {
            crate::log::Token::Sample(e, _) => Some(e.eval(cx).map_or_else(
                || "-".into(),
                |v| String::from_utf8_lossy(&v.as_bytes()).into_owned(),
            )),
            _ => None,
        })
        .collect()
}
