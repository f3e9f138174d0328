//! One HTTP transaction: a request/response exchange on a client session. It routes the
//! request (rules, backend and server: `route`), answers it itself (`reply`) or gets a
//! server connection (queue, pool, retries: `connect`), sends the request with its body,
//! reads the response head, relays the response (`relay`), and writes the access-log line
//! (`txn_log`).
//!
//! Every failure is a [`Fail`]: the status to answer, if any, and its [`Cause`] with the
//! I/O error behind it; the log's termination code derives from the cause and the
//! [`Phase`] the transaction was in.

use std::io;
use std::time::Duration;

use sluice_http::{
    parse_response_limited, Answer, ChunkedDecoder, ChunkedOut, Framing, RequestCopy, ResponseHead,
    ResponseView, Version,
};

use super::connect::{self, Attempts, ConnectError, Reuse, ServerConn};
use super::deadline::within;
use super::heads::{
    build_request_head, forwardfor, originalto, sent_request, server_request, upgrade_request,
    write_response_head, Edits,
};
use super::keywords::CloseMode;

use super::report::{Cause, Fail, Local, Phase, ReqLog};

use super::body_wait::{self, BodyWait, Progress};
use super::reply::after_response;
use super::route::{route, Route, StickKeys};
use super::session::{ClientHead, Session};
use super::upload::{
    answered_before_failing, from_client, more_body_or_answer, sent_to_server, splice_rest,
    SendFail, Spliced,
};
use crate::balance::PickKey;
use crate::check::{self, Seen};
use crate::clock;
use crate::compression::{self, Algo};
use crate::conf::{Backend, Frontend};
use crate::cookie;
use crate::h2_stream::Tunnel;
use crate::rules::holds;
use crate::stats;
use crate::transport::Then;

/// Facts about the current request kept after its head leaves the buffer.
pub(crate) struct ReqFacts {
    pub framing: Framing,
    pub version: Version,
    /// The client asked for a HEAD: its answer carries no body.
    pub is_head: bool,
    /// The request goes to the server as a HEAD (a rule may have changed the method
    /// either way): the server's answer has no body.
    pub server_head: bool,
    pub idempotent: bool,
    /// GET, HEAD, OPTIONS or TRACE: what a shared cache may answer (`option checkcache`).
    pub safe: bool,
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
    pub cache: Option<Box<crate::cache::Lookup>>,
}

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
    pub sent_head: Option<RequestCopy>,
    /// The client announced this request as its last (`Connection: close`, or HTTP/1.0
    /// without keep-alive) and sent no body with it: once answered, it sends nothing more
    /// than its own close.
    pub last_request: bool,
    /// The server answered before the request body was all sent: the rest of the upload
    /// is not relayed, and neither connection carries another request.
    pub upload_cut: bool,
    /// The request head for an HTTP/2 server (only when the backend has one; `None` there
    /// too if HTTP/2 cannot carry it). Boxed: a transaction to HTTP/1.1 servers only does
    /// not carry its size.
    pub h2_request: Option<Box<crate::h2_stream::ServerRequest>>,
    /// The stream's number in `filter trace` lines (0: no trace filter speaks).
    pub traced: u64,
}

impl Txn {
    /// The trace filters that hear of this transaction: its frontend's, and its backend's
    /// once routed.
    pub(super) fn trace<'a>(&self, s: &'a Session) -> crate::filters::StreamTrace<'a> {
        let config = s.w.config();
        let backend = self.backend.map(|b| &config.backends[b].traces[..]);
        crate::filters::StreamTrace {
            frontend: if self.traced == 0 {
                &[]
            } else {
                &config.frontends[s.fe].traces
            },
            backend: if self.traced == 0 {
                &[]
            } else {
                backend.unwrap_or_default()
            },
            stream: self.traced,
            mode: "HTTP",
            routed: self.backend.is_some(),
        }
    }

    /// Whether a layer-7 retry goes to another server, as HAProxy 2.6 chooses
    /// (`stream_choose_redispatch`): with `option redispatch`, when the server is not up,
    /// or when the balancing is not a hash, the request did not come with a persistence
    /// cookie, and the backend has another active server.
    fn redispatches(s: &Session, backend: usize, server: usize, facts: &ReqFacts) -> bool {
        let be = &s.w.config().backends[backend];
        if !be.redispatch {
            return false;
        }
        let st = &s.w.state().backends[backend].servers;
        let active = (0..be.servers.len())
            .filter(|&i| !be.servers[i].backup && st[i].usable())
            .count();
        !st[server].usable() || (!be.algo.hashes() && facts.cookie_server.is_none() && active > 1)
    }

    /// `retry-on`: the request goes again (its connection, which carries what was
    /// answered, dropped with what was read of it), to another server when HAProxy would
    /// redispatch it. The server left counts the attempt as a session and a retry, as
    /// HAProxy 2.6 counts them (two retries when the next attempt stays on it: the retry's
    /// and its new connection's). Returns the new connection; `at` says where it goes.
    async fn retry<'w>(
        &mut self,
        s: &mut Session,
        w: &'w std::rc::Rc<crate::runtime::Worker>,
        retry: L7Retry<'_>,
        facts: &ReqFacts,
        at: &mut Attempts,
    ) -> Result<(ServerConn, connect::Occupancy<'w>), Fail> {
        let (backend, left) = retry.route;
        let be = &w.config().backends[backend];
        let counters = w.state().backends[backend].servers[left].counters.at(w.tid);
        s.sbuf.clear(&w.bufs);
        at.retries += 1;
        counters.retries.bump();
        counters.traffic.sessions.bump();
        counters.rate.hit(crate::runtime::clock_ms());
        let mut server = left;
        if Txn::redispatches(s, backend, server, facts) {
            let st = &w.state().backends[backend];
            if let Some(other) = crate::balance::pick_other(be, st, retry.key, &w.lb, server) {
                counters.redispatches.bump();
                server = other;
            }
        }
        if server == left {
            counters.retries.bump();
        }
        let client = connect::Client {
            conn: &s.client,
            peer: s.peer.get(),
            unique_id: s.vars.unique_id.borrow().clone(),
        };
        let reuse = Reuse {
            private: &mut s.private,
            first_request: false,
        };
        let mut again = Attempts::new(server);
        let key = retry.key;
        let got = connect::establish(
            w,
            backend,
            server,
            key,
            Some(reuse),
            None,
            &client,
            &mut again,
        )
        .await
        .map_err(|e| Fail::answer(503, Cause::Connect(e), Phase::Connect))?;
        at.server = again.server;
        at.retries += again.retries;
        self.log.attempts = Some(*at);
        s.info.route(Some(backend), Some(at.server));
        // `http-send-name-header`: the head names the server it now goes to.
        if let (Some(text), Some(name)) = (retry.unnamed, &be.stream.send_name_header) {
            s.out.clear();
            s.out.extend_from_slice(text);
            self.name_server(s, name, &be.servers[at.server].name);
        }
        Ok(got)
    }

    /// Tells the trace filters that the request goes to `be`, and its head (as it
    /// arrived: HAProxy's filters see it once the backend is known).
    fn trace_forward(&mut self, s: &Session, be: &Backend, req: &sluice_http::RequestView<'_>) {
        if self.traced == 0 && !be.traces.is_empty() {
            self.traced = crate::filters::next_stream(&s.w.process);
        }
        if self.traced != 0 {
            let trace = self.trace(s);
            trace.set_backend(&be.name);
            trace.request(req);
        }
    }
}

/// Where a layer-7 retry starts from: the backend and server that failed, the request's
/// balancing key, and its head before it named a server (`http-send-name-header`).
struct L7Retry<'a> {
    route: (usize, usize),
    key: &'a PickKey<'a>,
    unnamed: Option<&'a [u8]>,
}

/// A server's final response head: HTTP/1 text at the start of the server buffer, or the
/// head an HTTP/2 stream's answer decoded (its body follows in the server buffer as
/// HTTP/1.1 would carry it). Read through [`ServerHead::view`].
pub(super) enum ServerHead {
    H1(ResponseHead),
    H2 {
        answer: Box<crate::h2_stream::ServerAnswer>,
        head_request: bool,
    },
}

impl ServerHead {
    /// The head; `sbuf` is the server buffer it was parsed from (HTTP/1).
    pub fn view<'a>(&'a self, sbuf: &'a [u8]) -> ResponseView<'a> {
        match self {
            ServerHead::H1(head) => ResponseView::h1(sbuf, head),
            ServerHead::H2 {
                answer,
                head_request,
            } => ResponseView::h2(&answer.parts, answer.ended, *head_request),
        }
    }

    /// The status the client gets: an HTTP/2 server's 2xx that opened a WebSocket is
    /// HTTP/1.1's 101.
    pub fn status(&self) -> u16 {
        match self {
            ServerHead::H1(head) => head.status,
            ServerHead::H2 { answer, .. } if answer.opened == Some(Tunnel::WebSocket) => 101,
            ServerHead::H2 { answer, .. } => answer.parts.status.as_u16(),
        }
    }

    /// The head's size as HAProxy counts the response it receives (`%B`, `bout`): its HTX
    /// form as the server sent it, whatever the rules then change. An HTTP/2 head has the
    /// version `HTTP/2.0` and no reason.
    pub fn htx_size(&self, sbuf: &[u8]) -> u64 {
        match self {
            // From the parsed fields (the same count as `report::htx_head_size` of the
            // text, without walking it again).
            ServerHead::H1(head) => {
                let fields: usize = head
                    .headers
                    .iter()
                    .filter(|h| !sbuf[h.name.clone()].eq_ignore_ascii_case(b"connection"))
                    .map(|h| h.name.len() + h.value.len())
                    .sum();
                (20 + 8 + 3 + head.reason.len() + fields + 1) as u64
            }
            ServerHead::H2 { answer, .. } => {
                let fields: usize = answer
                    .parts
                    .headers
                    .iter()
                    .map(|(n, v)| n.as_str().len() + v.len())
                    .sum();
                20 + 8 + 3 + fields as u64 + 1
            }
        }
    }

    /// Bytes of the server buffer the head takes.
    pub fn len(&self) -> usize {
        match self {
            ServerHead::H1(head) => head.len,
            ServerHead::H2 { .. } => 0,
        }
    }

    pub fn framing(&self) -> Framing {
        match self {
            ServerHead::H1(head) => head.framing,
            ServerHead::H2 { .. } => self.view(&[]).framing(),
        }
    }

    /// What carried the response cannot carry another request: an HTTP/1.1 connection
    /// that must close, and always an HTTP/2 stream (its link is what lasts).
    pub fn must_close(&self) -> bool {
        match self {
            ServerHead::H1(head) => head.must_close,
            ServerHead::H2 { .. } => true,
        }
    }

    /// An HTTP/2 server's answer that opened a WebSocket: the `Sec-WebSocket-Accept` its
    /// HTTP/1.1 client expects (an HTTP/1.1 server's 101 carries its own).
    pub fn websocket_accept(&self) -> Option<&str> {
        match self {
            ServerHead::H2 { answer, .. } => answer.accept.as_deref(),
            ServerHead::H1(_) => None,
        }
    }
}

impl Txn {
    /// Handles one request whose head is at the start of the client buffer. Returns whether
    /// the client connection stays open.
    pub async fn handle(&mut self, s: &mut Session, head: ClientHead) -> Result<bool, Fail> {
        let req = head.view(s.cbuf.bytes());
        let connect = req.method() == b"CONNECT";
        let mut facts = ReqFacts {
            framing: req.framing(),
            version: req.version(),
            is_head: req.is_head(),
            server_head: req.is_head(),
            idempotent: req.is_idempotent(),
            safe: matches!(req.method(), b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE"),
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
        // A WebSocket handshake without its key is refused, as HAProxy's HTTP/1 layer
        // refuses it.
        if facts.upgrade.as_deref().is_some_and(is_websocket)
            && req.header("sec-websocket-key").is_none()
        {
            return Err(Fail::answer(400, Cause::Proxy, Phase::Request));
        }
        let fe = s.frontend();
        let wait = (fe.stream.buffer_request || body_wait::has_wait(&fe.rules.http_request))
            .then(|| body_wait::request_wait(fe, &s.sample_ctx(&req, None)))
            .flatten();
        if let Some(wait) = wait {
            // The client was invited to send its body already.
            if self.wait_for_body(s, &head, &facts, wait).await? {
                facts.expect_continue = false;
            }
        }
        let req = head.view(s.cbuf.bytes());
        let (route, mut edits) = route(s, &req);
        s.body = None;
        self.render_log_samples(s, &req, &route);
        if !edits.captures.is_empty() {
            for (slot, value) in edits.captures.drain(..) {
                if let Some(c) = self.log.captures_req.get_mut(slot) {
                    *c = Some(value);
                }
            }
            self.share_captures(s);
        }
        match route {
            Route::Reject { backend } => {
                self.phase = Phase::Local;
                self.log.local = Some(Local::Denied);
                // An aborted request (`reject`, `silent-drop`) logs no request time, as
                // HAProxy's (`-1/-1/-1/-1/0`).
                self.log.head_done = None;
                self.backend = backend;
                s.cbuf.consume(head.len());
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
                let mut page = after_response(s, backend, Some(&req), page);
                page.close();
                s.cbuf.consume(head.len());
                self.backend = backend;
                self.log.status = i64::from(status);
                self.log.term = Some(*b"PT");
                tokio::time::sleep(hold).await;
                self.send_local(s, &page).await?;
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
                let mut page = after_response(s, backend, Some(&req), page);
                s.cbuf.consume(head.len());
                self.backend = backend;
                // (An empty page, `errorfile` of /dev/null, still logs its status.)
                self.log.status = i64::from(if page.silent { status } else { page.status });
                self.log.term = Some(if status == 503 { *b"SC" } else { *b"PR" });
                page.close();
                self.send_local(s, &page).await?;
                Ok(false)
            }
            Route::Respond { page, close } => {
                self.phase = Phase::Local;
                self.log.local = Some(Local::Intercepted);
                let mut page = after_response(s, None, Some(&req), page);
                s.cbuf.consume(head.len());
                self.log.status = i64::from(page.status);
                self.log.term = Some(*b"LR");
                let close = close || facts.wants_close || facts.framing != Framing::None;
                if close {
                    page.close();
                }
                self.send_local(s, &page).await?;
                Ok(!close)
            }
            Route::Cached {
                entry,
                backend,
                cache,
            } => {
                let answer = self.cached_answer(s, (&entry, cache), &req, backend, &facts)?;
                s.cbuf.consume(head.len());
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
                s.cbuf.consume(head.len());
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
                let page = stats::page::answer(
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
                let mut page = after_response(s, backend, None, page);
                self.log.status = i64::from(page.status);
                self.log.term = Some(*b"LR");
                let close = facts.wants_close || !consumed;
                if close {
                    page.close();
                }
                self.send_local(s, &page).await?;
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
                let req = head.view(s.cbuf.bytes());
                self.trace_forward(s, be, &req);
                let facts = ReqFacts {
                    comp: compression::for_request(conf, &req),
                    cookie_server,
                    stick,
                    timeout_server: edits.timeout_server.or(be.timeout_server),
                    timeout_tunnel: edits.timeout_tunnel,
                    cache: edits.cache_lookup.take(),
                    server_head: edits
                        .method
                        .as_deref()
                        .map_or(facts.server_head, |m| m == b"HEAD"),
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
                if let Some(name) = &be.stream.send_name_header {
                    // The server's name is added once it is known (`forward`).
                    edits.remove(name, crate::sample::Match::Str);
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
                let xff = forwardfor(fe, be, s.client.client_addr(s.peer.get()).map(|a| a.ip()));
                self.h2_request = be
                    .speaks
                    .h2()
                    .then(|| server_request(&req, &edits, xff, facts.upgrade.as_deref()))
                    .flatten()
                    .map(Box::new);
                // A tunnel that opens ends with its connection anyway; `option
                // http-pretend-keepalive` does not say it will close.
                let close = server_close(fe, be) && !facts.connect && !be.stream.pretend_keepalive;
                let upgrade = facts.upgrade.as_deref();
                if be.speaks.h1() {
                    // One allocation for a session's first head (an HTTP/2 stream's only
                    // one): the client's head plus room for what the proxy adds.
                    s.out.reserve(head.len() + 256);
                    build_request_head(&mut s.out, &req, &edits, xff, close, upgrade);
                    if be.stream.case_adjust_server {
                        w.config().global.case_adjust.apply(&mut s.out);
                    }
                }
                if has_response_rules(fe, be) || Txn::log_reads_response(s) {
                    // The response's rules (or log samples) may read the request: keep it
                    // as sent.
                    self.sent_head = Some(sent_request(&req, &edits, xff, close, upgrade));
                }
                s.cbuf.consume(head.len());
                if !edits.early_hints.is_empty() && facts.version == Version::Http11 {
                    let mut hint = Answer::new(103);
                    for (n, v) in &edits.early_hints {
                        hint.push(n.as_bytes(), v);
                    }
                    self.send_interim(s, &hint).await?;
                }
                // `shutdown session`, `shutdown sessions server` end the exchange wherever
                // it is (the connection's own switch: no lock). An HTTP/2 stream runs in a
                // task of its own, which the switch does not wake: its connection ends.
                let info = s.info.clone();
                let stream = s.client.is_stream();
                let session_kill = async {
                    if stream {
                        std::future::pending::<()>().await
                    }
                    info.kill.pulled().await
                };
                if !check::killable(be, server) {
                    return tokio::select! {
                        // The exchange first: no random draw at every wake-up.
                        biased;
                        done = self.forward(s, backend, server, &facts) => done,
                        () = session_kill => Err(killed(self.phase)),
                    };
                }
                // `on-marked-down shutdown-sessions` too. (Only then: waiting on the
                // server's notification takes a lock shared by workers.)
                let kill = w.state().backends[backend].servers[server].kill.notified();
                tokio::select! {
                    done = self.forward(s, backend, server, &facts) => done,
                    _ = kill => Err(killed(self.phase)),
                    () = session_kill => Err(killed(self.phase)),
                }
            }
        }
    }

    /// Reads the request body into the client buffer (as much as fits) before the rules
    /// run, within the wait's time, and shows it to them (`req.body`). Returns whether it
    /// sent `100 Continue`.
    async fn wait_for_body(
        &mut self,
        s: &mut Session,
        head: &ClientHead,
        facts: &ReqFacts,
        wait: BodyWait,
    ) -> Result<bool, Fail> {
        if matches!(facts.framing, Framing::None | Framing::UntilClose) {
            return Ok(false);
        }
        let invite = facts.expect_continue
            && facts.version == Version::Http11
            && facts.framing != Framing::Length(0);
        if invite {
            self.send_interim(s, &Answer::new(100)).await?;
        }
        let deadline = tokio::time::Instant::now() + wait.time;
        while !s.cbuf.is_full() {
            let arrived = &s.cbuf.bytes()[head.len()..];
            if let Progress::Enough = body_wait::progress(arrived, facts.framing, wait) {
                break;
            }
            match tokio::time::timeout_at(deadline, s.read_client()).await {
                Ok(Ok(())) => {}
                // An HTTP/2 body ends with its stream.
                Ok(Err(Cause::ClientClosed(None))) if s.client_body_ended() => break,
                Ok(Err(c)) => return Err(Fail::drop(c, Phase::Request)),
                // Out of time: HAProxy answers 408 rather than run the rules on a part, and
                // logs no request time (its request was never whole).
                Err(_) => {
                    self.log.head_done = None;
                    return Err(Fail::answer(408, Cause::ClientTimeout, Phase::Request));
                }
            }
        }
        // HAProxy's request time ends once the body was waited for.
        self.log.head_done = Some(clock::now());
        let ended = s.client_body_ended();
        s.body = body_wait::buffered(s.cbuf.bytes(), head.len(), facts.framing, ended);
        Ok(invite)
    }

    /// `http-send-name-header`: the server the request goes to (after a redispatch, the
    /// one it went to), named in the request's head for either protocol.
    fn name_server(&mut self, s: &mut Session, name: &str, server: &str) {
        if s.out.ends_with(b"\r\n\r\n") {
            let at = s.out.len() - 2;
            let mut line = Vec::with_capacity(name.len() + server.len() + 4);
            super::heads::push_header(&mut line, name.as_bytes(), server.as_bytes());
            s.out.splice(at..at, line);
        }
        if let Some(req) = self.h2_request.as_mut() {
            let field = http::HeaderName::from_bytes(name.as_bytes()).ok();
            let value = http::HeaderValue::from_str(server).ok();
            if let (Some(n), Some(v)) = (field, value) {
                req.fields.insert(n, v);
            }
        }
    }

    /// Sends an interim answer of the proxy's (`100 Continue`, `103 Early Hints`).
    async fn send_interim(&mut self, s: &mut Session, page: &Answer) -> Result<(), Fail> {
        s.write_page(page)
            .await
            .map_err(|c| Fail::drop(c, self.phase))
    }

    /// Sends one of the proxy's own answers, logged with its size as HAProxy counts it.
    async fn send_local(&mut self, s: &mut Session, page: &Answer) -> Result<(), Fail> {
        self.log.bytes = super::report::htx_answer_size(page);
        s.write_page(page)
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
            self.send_interim(s, &Answer::new(100)).await?;
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
        let (mut conn, mut _occupancy) = got.map_err(|e| {
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
        let mut server = at.server;
        s.info.route(Some(backend), Some(server));
        // `retry-on`'s layer-7 failures: a request without a body may be sent again.
        let l7_retries = be.retry_on.after_sending() && facts.framing == Framing::None;
        // The head before it names its server, to name another on a retry.
        let unnamed = (l7_retries && be.stream.send_name_header.is_some()).then(|| s.out.clone());
        if let Some(name) = &be.stream.send_name_header {
            self.name_server(s, name, &be.servers[server].name);
        }
        self.phase = Phase::Headers;
        if Txn::logs_backend_src(s.frontend()) {
            self.backend_src = conn.conn.local_addr().ok();
        }
        let mut head_len = s.out.len();
        let mut sent_at = clock::now();
        let mut counters = w.state().backends[backend].servers[server]
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
            let retried = match &result {
                Ok(rsp) => be.retry_on.status(rsp.status()),
                Err(SendFail::Retryable(_)) => be.retry_on.empty_response,
                Err(SendFail::Fail(f)) => match f.cause {
                    Cause::ServerTimeout => be.retry_on.response_timeout,
                    Cause::InvalidResponse => be.retry_on.junk_response,
                    _ => false,
                },
            };
            if let (true, Ok(rsp)) = (retried, &result) {
                check::observe(&w.process, backend, server, Seen::Response(rsp.status()));
            }
            // `retries N` allows N of these, the connection retries of this request
            // included.
            if retried && l7_retries && at.retries < be.retries as u32 {
                let retry = L7Retry {
                    route: (backend, server),
                    key: &key,
                    unnamed: unnamed.as_deref(),
                };
                (conn, _occupancy) = self.retry(s, &w, retry, facts, &mut at).await?;
                server = at.server;
                counters = w.state().backends[backend].servers[server]
                    .counters
                    .at(w.tid);
                head_len = s.out.len();
                sent_at = clock::now();
                attempt = 0;
                continue;
            }
            match result {
                Ok(rsp) => {
                    self.log.t_response = connect::ms(clock::since(sent_at));
                    self.log.status = i64::from(rsp.status());
                    check::observe(&w.process, backend, server, Seen::Response(rsp.status()));
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

    /// Writes the request head and streams the body to the server: an HTTP/2 server's head
    /// as prepared for it ([`Txn::h2_request`]), an HTTP/1.1 server's as the text in
    /// `s.out`, which the body's first bytes join.
    async fn send_request(
        &mut self,
        s: &mut Session,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<(), SendFail> {
        let Some(stream) = conn.conn.as_h2() else {
            return self.send_request_over(s, conn, facts).await;
        };
        let invalid = || {
            let e = io::Error::new(io::ErrorKind::InvalidData, "a request HTTP/2 cannot carry");
            SendFail::Fail(Fail::answer(502, Cause::Server(Some(e)), Phase::Headers))
        };
        let req = self.h2_request.as_ref().ok_or_else(invalid)?;
        match within(facts.timeout_server, stream.send_request(req)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(SendFail::Retryable(e)),
            Err(()) => {
                return Err(SendFail::Fail(Fail::answer(
                    504,
                    Cause::ServerTimeout,
                    Phase::Headers,
                )))
            }
        }
        // The head has left: the body follows alone. (The text stays for a retry on a
        // connection of HTTP/1.1.)
        let text = std::mem::take(&mut s.out);
        let sent = self.send_request_over(s, conn, facts).await;
        s.out = text;
        sent
    }

    /// Writes what `s.out` holds (an HTTP/1.1 head, or nothing) and streams the body.
    async fn send_request_over(
        &mut self,
        s: &mut Session,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<(), SendFail> {
        let tserver = facts.timeout_server;
        // Whether an early answer from the server is still looked for, and whether the head
        // has left (a failed first write on a reused connection is retried elsewhere, not
        // read for an answer: a server may say 408 to an idle connection as it closes it).
        let mut watching = true;
        let mut head_sent = false;
        match facts.framing {
            Framing::None | Framing::UntilClose => {
                sent_to_server(within(tserver, conn.conn.write_all(&s.out)).await)
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
                    let sent = sent_to_server(
                        within(tserver, conn.conn.write_pair(&s.out, body, then)).await,
                    );
                    if sent.is_err() && head_sent && answered_before_failing(s, conn).await {
                        self.upload_cut = true;
                        return Ok(());
                    }
                    sent?;
                    head_sent = true;
                    s.out.clear();
                    s.cbuf.consume(take);
                    remaining -= take as u64;
                    if remaining == 0 {
                        return Ok(());
                    }
                    if self.splices_request(s) {
                        match splice_rest(s, conn, remaining, watching, tserver).await? {
                            Spliced::No => {}
                            Spliced::Sent => return Ok(()),
                            Spliced::Refused => {
                                self.upload_cut = true;
                                return Ok(());
                            }
                        }
                    }
                    if more_body_or_answer(s, conn, &mut watching)
                        .await
                        .map_err(from_client)?
                    {
                        self.upload_cut = true;
                        return Ok(());
                    }
                }
            }
            Framing::Chunked => {
                let mut dec = ChunkedDecoder::new();
                let bad = || SendFail::Fail(Fail::answer(400, Cause::Proxy, Phase::Headers));
                // An HTTP/2 server's stream takes the data alone, its trailers aside.
                let mode = if conn.conn.is_stream() {
                    ChunkedOut::Raw
                } else {
                    ChunkedOut::Chunked
                };
                loop {
                    let used = dec
                        .decode(s.cbuf.bytes(), mode, &mut s.out)
                        .map_err(|_| bad())?;
                    s.cbuf.consume(used);
                    if self.flush_out(s, conn, tserver, &mut head_sent).await? {
                        return Ok(());
                    }
                    if dec.is_done() {
                        if let Some(stream) = conn.conn.as_stream() {
                            stream.end_body(crate::h2_stream::trailers_of_lines(dec.trailers()));
                        }
                        return Ok(());
                    }
                    if s.cbuf.is_full() {
                        return Err(bad());
                    }
                    if more_body_or_answer(s, conn, &mut watching)
                        .await
                        .map_err(from_client)?
                    {
                        self.upload_cut = true;
                        return Ok(());
                    }
                }
            }
            Framing::Delimited => loop {
                // An HTTP/2 client's body, as its stream gives it: data, then the end.
                let ended = s.client_body_ended();
                let to_stream = conn.conn.is_stream();
                let data = s.cbuf.bytes();
                if !data.is_empty() {
                    if to_stream {
                        s.out.extend_from_slice(data);
                    } else {
                        sluice_http::push_chunk(&mut s.out, data);
                    }
                    let n = data.len();
                    s.cbuf.consume(n);
                }
                let trailers = if ended {
                    s.client.as_stream().and_then(|st| st.take_trailers())
                } else {
                    None
                };
                if ended && !to_stream {
                    crate::h2_stream::push_last_chunk(&mut s.out, trailers.as_ref());
                }
                if self.flush_out(s, conn, tserver, &mut head_sent).await? {
                    return Ok(());
                }
                if ended {
                    if let Some(stream) = conn.conn.as_stream() {
                        stream.end_body(trailers);
                    }
                    return Ok(());
                }
                match more_body_or_answer(s, conn, &mut watching).await {
                    Ok(true) => {
                        self.upload_cut = true;
                        return Ok(());
                    }
                    Ok(false) => {}
                    // The stream ended: the loop sends what is left and the end.
                    Err(Cause::ClientClosed(None)) if s.client_body_ended() => {}
                    Err(c) => return Err(from_client(c)),
                }
            },
        }
    }

    /// `option splice-request|splice-auto` on either side, unless `nosplice`: the rest of a
    /// request body of known length may be spliced.
    fn splices_request(&self, s: &Session) -> bool {
        let w = &s.w;
        self.backend.is_some_and(|b| {
            let (fe, be) = (&w.config().frontends[s.fe], &w.config().backends[b]);
            super::tunnel::splicing(w, fe, be).request
        })
    }

    /// Writes what `s.out` holds of the request (nothing to do when it is empty); `Ok(true)`
    /// when the write failed after the server had answered, which ends the upload there.
    async fn flush_out(
        &mut self,
        s: &mut Session,
        conn: &mut ServerConn,
        tserver: Option<std::time::Duration>,
        head_sent: &mut bool,
    ) -> Result<bool, SendFail> {
        if s.out.is_empty() {
            return Ok(false);
        }
        let sent = sent_to_server(within(tserver, conn.conn.write_all(&s.out)).await);
        if sent.is_err() && *head_sent && answered_before_failing(s, conn).await {
            self.upload_cut = true;
            return Ok(true);
        }
        sent?;
        *head_sent = true;
        s.out.clear();
        Ok(false)
    }

    /// Reads the final response head, relaying interim (1xx) responses to the client.
    async fn read_response_head(
        &mut self,
        s: &mut Session,
        be: &Backend,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<ServerHead, SendFail> {
        if let Some(stream) = conn.conn.as_h2() {
            return match within(facts.timeout_server, stream.response()).await {
                Ok(Ok(answer)) => Ok(ServerHead::H2 {
                    answer: Box::new(answer),
                    head_request: facts.server_head,
                }),
                Ok(Err(e)) => Err(SendFail::Retryable(e)),
                Err(()) => Err(SendFail::Fail(Fail::answer(
                    504,
                    Cause::ServerTimeout,
                    Phase::Headers,
                ))),
            };
        }
        let w = s.w.clone();
        let invalid = || SendFail::Fail(Fail::answer(502, Cause::InvalidResponse, Phase::Headers));
        let truncated = || SendFail::Fail(Fail::answer(502, Cause::Server(None), Phase::Headers));
        let head_room = w.config().global.head_room();
        let max_fields = w.config().global.max_fields();
        let relaxed = be.stream.accept_invalid_response;
        let mut got_any = false;
        loop {
            if !s.sbuf.is_empty() {
                let parsed =
                    parse_response_limited(s.sbuf.bytes(), facts.server_head, max_fields, relaxed);
                match parsed {
                    Ok(Some(rsp)) if (100..200).contains(&rsp.status) => {
                        if rsp.status == 101 {
                            // Only an upgrade the client asked for switches protocols, and
                            // a WebSocket's with the key's answer (HAProxy answers 502
                            // without it).
                            let view = ResponseView::h1(s.sbuf.bytes(), &rsp);
                            let unanswered = facts.upgrade.as_deref().is_some_and(is_websocket)
                                && view.header("sec-websocket-accept").is_none();
                            return if facts.upgrade.is_some() && !unanswered {
                                Ok(ServerHead::H1(rsp))
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
                        // HAProxy counts interim responses in the bytes of the transaction.
                        self.log.received +=
                            super::report::htx_head_size(&s.sbuf.bytes()[..rsp.len]);
                        s.sbuf.consume(rsp.len);
                        if facts.version == Version::Http11 {
                            s.write_client(&interim)
                                .await
                                .map_err(|c| SendFail::Fail(Fail::drop(c, Phase::Headers)))?;
                        }
                        continue;
                    }
                    Ok(Some(rsp)) if rsp.len <= head_room => {
                        if rsp.irregular {
                            // Passed on, and kept for `show errors` as HAProxy does.
                            self.capture_response(s, be);
                        }
                        return Ok(ServerHead::H1(rsp));
                    }
                    Ok(Some(_)) => {
                        self.capture_response(s, be);
                        return Err(invalid());
                    }
                    Ok(None) if s.sbuf.is_full() || s.sbuf.bytes().len() >= head_room => {
                        self.capture_response(s, be);
                        return Err(invalid());
                    }
                    Ok(None) => {}
                    Err(_) => {
                        self.capture_response(s, be);
                        return Err(invalid());
                    }
                }
            }
            match within(facts.timeout_server, s.sbuf.fill(&conn.conn, &w.bufs)).await {
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
    fn capture_response(&self, s: &Session, be: &Backend) {
        let bytes = s.sbuf.bytes();
        let server = self.log.attempts.map(|a| &be.servers[a.server]);
        let backend = self.backend.expect("a response comes from a backend");
        let fe = s.frontend();
        s.w.state().backends[backend]
            .errors
            .keep(crate::runtime::CapturedError {
                when: std::time::SystemTime::now(),
                peer: s.peer.get(),
                server: server.map(|srv| (srv.id, srv.name.clone())),
                other: Some((fe.id, fe.name.clone())),
                at: sluice_http::error_position(bytes, false),
                bytes: bytes.to_vec(),
                event: 0,
            });
    }
}

/// Whether responses through this frontend and backend run rules (which may read the
/// request).
pub(super) fn has_response_rules(fe: &Frontend, be: &Backend) -> bool {
    let (f, b) = (&fe.rules, &be.rules);
    [
        &b.tcp_response,
        &f.tcp_response,
        &b.http_response,
        &f.http_response,
        &b.http_after_response,
        &f.http_after_response,
    ]
    .iter()
    .any(|l| !l.is_empty())
}

/// Whether an `Upgrade` asks for a WebSocket.
fn is_websocket(upgrade: &[u8]) -> bool {
    upgrade.eq_ignore_ascii_case(b"websocket")
}

/// How a killed exchange ends: before the response head left, the client gets a 502, as
/// HAProxy answers (`KH--`); after it, the connection is cut.
fn killed(phase: Phase) -> Fail {
    match phase {
        Phase::Data | Phase::Tunnel => Fail::drop(Cause::Killed, phase),
        _ => Fail::answer(502, Cause::Killed, phase),
    }
}

/// Whether the server connection closes after this response.
pub(crate) fn server_close(fe: &Frontend, be: &Backend) -> bool {
    fe.stream.close_mode.max(be.stream.close_mode) >= CloseMode::ServerClose
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_http::parse_response;

    #[test]
    fn a_server_head_counts_as_its_text_would() {
        let raw = b"HTTP/1.1 200 Fine Thanks\r\nContent-Length: 5\r\nConnection: keep-alive\r\nX-A:  spaced  \r\nETag: \"e\"\r\n\r\nhello";
        let head = parse_response(raw, false).unwrap().unwrap();
        let counted = ServerHead::H1(head).htx_size(raw);
        let text_len = memchr::memmem::find(raw, b"\r\n\r\n").unwrap() + 4;
        assert_eq!(
            counted,
            super::super::report::htx_head_size(&raw[..text_len])
        );
    }
}
