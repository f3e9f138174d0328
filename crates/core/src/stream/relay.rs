//! Relaying a response: the head as the client must see it, then the body as is (re-framed
//! when the client's version needs it) or through the compressor, then the server connection
//! back to the pool (or kept private, or closed). A 101 turns the exchange into a tunnel.
//!
//! Invariants:
//! - Memory per connection is the two session buffers plus `Session::out`, which holds one
//!   head or one re-framed/compressed chunk at a time; bodies are streamed, never
//!   accumulated.
//! - A server connection goes back to the pool only after a complete, well-framed response
//!   with nothing trailing it, and after the whole request body was sent.
//! - A write announces that more follows (`MSG_MORE`) only when the next bytes are already
//!   waiting on the server connection, or when it is the last of a response after which the
//!   client connection is closed (the close then carries it: one write for TLS's last records
//!   and close_notify, one segment for TCP's data and FIN).

use std::time::{Duration, Instant};

use sluice_http::{
    push_chunk_header, Answer, ChunkedDecoder, ChunkedOut, Framing, ResponseView, Version,
};

use super::body_wait::{self, BodyWait, Buffered, Progress};
use super::connect::ServerConn;
use super::deadline::within;
use super::heads::{push_header, send_stream_head, write_response_head, Edits};
use super::keywords::CloseMode;
use super::report::{Cause, Fail, Local, Phase};
use super::session::Session;
use super::txn::{ReqFacts, ServerHead, Txn};
use crate::buffer::Buf;
use crate::check::Seen;
use crate::compression::{self, Compressor, GlobalComp};
use crate::conf::backend::ReuseMode;
use crate::conf::Backend;
use crate::h2_stream::{push_last_chunk, trailers_of_lines};
use crate::rules::{tcp_verdict, Level};
use crate::runtime::{ProxyCounters, Worker};
use crate::transport::{Conn, Then};

impl Txn {
    /// Sends the response head and body to the client (compressed when the request, the
    /// response and the load allow it), then releases the server connection.
    pub(super) async fn relay_response(
        &mut self,
        s: &mut Session,
        be: &Backend,
        mut conn: ServerConn,
        rsp: ServerHead,
        facts: &ReqFacts,
    ) -> Result<bool, Fail> {
        let w = s.w.clone();
        let fe = &w.config().frontends[s.fe];
        self.phase = Phase::Data;
        // Backend rules run before frontend rules, as in HAProxy. Their conditions see the
        // response, the request as it was sent, and the variables.
        let mut rsp_edits = Edits::default();
        let (b, f) = (&be.rules, &fe.rules);
        let sent = self.sent_head.take();
        // Headers are captured as the server sent them, before the rules (which may read
        // the slots).
        if !fe.log.captures_res.is_empty() {
            let view = rsp.view(s.sbuf.bytes());
            self.log.captures_res = super::report::captures(&fe.log.captures_res, view.headers());
            self.share_captures(s);
        }
        // HAProxy counts the response as it receives it, before any rule edits it.
        let head_in = rsp.htx_size(s.sbuf.bytes());
        if self.traced != 0 {
            self.trace(s).response(&rsp.view(s.sbuf.bytes()));
        }
        if be.persist.cookie.is_some() {
            // No persistence cookie set, unless the relay gets to set one.
            self.log.cookie_flags[1] = b'N';
        }
        let waits = body_wait::has_wait(&be.rules.http_response)
            || body_wait::has_wait(&fe.rules.http_response);
        let wait = if !waits {
            None
        } else {
            let view = rsp.view(s.sbuf.bytes());
            let req = sent.as_ref().map(sluice_http::RequestView::copy);
            let mut cx = s.response_ctx((conn.backend, conn.server), req.as_ref(), &view);
            cx.on_response = true;
            body_wait::response_wait(fe, be, &cx)
        };
        let res_body = match wait {
            Some(wait) => {
                let head = (&rsp, head_in);
                self.wait_for_response_body(s, &mut conn, head, wait, facts)
                    .await?
            }
            None => None,
        };
        if super::txn::has_response_rules(fe, be) {
            let view = rsp.view(s.sbuf.bytes());
            let req = sent.as_ref().map(sluice_http::RequestView::copy);
            let mut cx = s.response_ctx((conn.backend, conn.server), req.as_ref(), &view);
            cx.res_body = res_body.as_ref().and_then(|b| b.bytes(s.sbuf.bytes()));
            cx.whole_lens.1 = res_body.as_ref().and_then(Buffered::whole_len);
            cx.on_response = true;
            cx.server_conn = Some(&conn.conn);
            if !tcp_verdict(
                &crate::conf::rules::RuleSets::tcp_response_of(b, f).tcp_response,
                &cx,
                Level::Txn {
                    count_request: false,
                },
            ) {
                // `tcp-response content reject`: the server connection is dropped and the
                // client gets nothing.
                return Err(Fail::drop(Cause::Proxy, Phase::Headers));
            }
            for rules in [&b.http_response, &f.http_response] {
                if rsp_edits.denied.is_none() && rsp_edits.returned.is_none() && !rsp_edits.dropped
                {
                    rsp_edits.response_rules(rules, &cx);
                }
            }
            if rsp_edits.dropped {
                // `http-response silent-drop`: both connections end, the client told nothing.
                self.answered_instead(s, &rsp, head_in);
                self.log.local = Some(Local::Denied);
                return Err(Fail::drop(Cause::Proxy, Phase::Headers));
            }
            if let Some((status, page)) = rsp_edits.returned.take().map(|r| *r) {
                // `http-response return`: the proxy's answer instead of the server's, whose
                // response is dropped with its connection.
                let backend = Some(conn.backend);
                let page = page.unwrap_or_else(|| s.error_answer(status, backend));
                let mut page = super::reply::after_response(s, backend, None, page);
                page.close();
                self.answered_instead(s, &rsp, head_in);
                self.log.status = i64::from(status);
                self.log.term = Some(*b"LH");
                self.log.bytes += super::report::htx_answer_size(&page);
                s.write_page(&page)
                    .await
                    .map_err(|c| Fail::drop(c, Phase::Headers))?;
                return Ok(false);
            }
            if let Some(denied) = rsp_edits.denied.take() {
                return self
                    .deny_response(s, (&rsp, head_in), conn.backend, *denied)
                    .await;
            }
            for rules in [&b.http_after_response, &f.http_after_response] {
                rsp_edits.response_rules(rules, &cx);
            }
        }
        if be.checkcache && crate::cookie::cacheable_cookie(&rsp.view(s.sbuf.bytes()), facts.safe) {
            // As HAProxy alerts and denies it, answering the page of the response's status.
            let what = format!(
                "Blocking cacheable cookie in response from instance {}, server {}.",
                be.name, be.servers[conn.server].name
            );
            say!("sluice: [ALERT] {what}");
            for l in &w.process.backend_loggers[conn.backend] {
                l.send_at(crate::log::Severity::Alert, &what);
            }
            let status = rsp.status();
            return self
                .deny_response(s, (&rsp, head_in), conn.backend, (status, None))
                .await;
        }
        if Txn::log_reads_response(s) {
            let view = rsp.view(s.sbuf.bytes());
            let req = sent.as_ref().map(sluice_http::RequestView::copy);
            let mut cx = s.response_ctx((conn.backend, conn.server), req.as_ref(), &view);
            cx.res_body = res_body.as_ref().and_then(|b| b.bytes(s.sbuf.bytes()));
            cx.whole_lens.1 = res_body.as_ref().and_then(Buffered::whole_len);
            cx.server_conn = Some(&conn.conn);
            self.render_log_samples_at_response(s, &cx);
        }
        // `cache-store`: the head as the rules left it, before the persistence cookie (which
        // is this client's alone) is added.
        let mut capture = rsp_edits.cache_store.and_then(|cache| {
            let view = rsp.view(s.sbuf.bytes());
            let mut head = Vec::new();
            write_response_head(&mut head, &view, &rsp_edits, None, None);
            super::cached::Capture::start(s, cache, facts, &view, head)
        });
        if !be.persist.stick.is_empty() {
            let view = rsp.view(s.sbuf.bytes());
            let cx = s.response_ctx((conn.backend, conn.server), None, &view);
            let mut keys = crate::persist::keys(be, &cx, true);
            keys.extend(facts.stick.iter().cloned());
            crate::persist::store(&keys, be.servers[conn.server].id);
        }
        rsp_edits.cookie = crate::cookie::ResponseCookie::new(
            be,
            conn.server,
            facts
                .cookie_server
                .filter(|(s, _)| *s == conn.server)
                .map(|(_, dates)| dates),
            facts.post,
        )
        .map(Box::new);
        let status = rsp.status();
        if status == 101 || (facts.connect && (200..300).contains(&status)) {
            // Boxed: a tunnel's state (2.6 kB) would otherwise size every transaction's
            // future, each moved into its box as a request starts.
            return Box::pin(self.upgrade(s, be, conn, &rsp, (rsp_edits, facts))).await;
        }
        let view = rsp.view(s.sbuf.bytes());
        let owned = asks_connection_auth(&view);
        if let Some((name, len)) = &fe.log.capture_cookie {
            let set = view
                .headers()
                .filter(|(n, _)| sluice_http::name_is(n, "set-cookie"));
            self.log.cookie_res = super::report::capture_cookie(set, name, *len, true);
        }
        if !fe.log.captures_res.is_empty() {
            for (slot, value) in rsp_edits.captures.drain(..) {
                if let Some(c) = self.log.captures_res.get_mut(slot) {
                    *c = Some(value);
                }
            }
        }
        let conf = compression::conf_for(fe, be);
        let limits = &w.config().global.compression;
        let mut compressor = facts
            .comp
            .filter(|_| compression::response_allows(conf, &view))
            .filter(|_| !over_compression_limit(&w, limits))
            .map(|algo| Compressor::new(algo, limits.max_level));
        if compressor.is_some() {
            // Compressed for this client: not stored (hits are served as stored).
            capture = None;
        }
        // A HEAD a rule turned into another method: the server sends a body the client
        // must not get. It is read and dropped, and the server connection stays usable.
        let dropped = facts.is_head && !facts.server_head;
        if dropped {
            capture = None;
        }
        // A body of unknown length goes to an HTTP/2 client as its data alone, its stream
        // delimiting it (trailers aside), and to an HTTP/1.1 client chunked, unless the
        // answer is an HTTP/1.0 server's, which HTTP/1 clients get as HTTP/1.0 (as HAProxy
        // sends it: never chunked).
        let client_h2 = s.client.as_stream().is_some();
        let client_11 = facts.version != Version::Http10 && view.version() != Version::Http10;
        let framing = rsp.framing();
        let to_client = if dropped { Framing::None } else { framing };
        let no_length = matches!(
            to_client,
            Framing::Chunked | Framing::UntilClose | Framing::Delimited
        );
        let (client_framing, mode) = match to_client {
            _ if client_h2 && (no_length || compressor.is_some()) => {
                (Framing::Delimited, ChunkedOut::Raw)
            }
            _ if compressor.is_some() => (Framing::Chunked, ChunkedOut::Raw),
            _ if no_length && client_11 => (Framing::Chunked, ChunkedOut::Chunked),
            _ if no_length => (Framing::UntilClose, ChunkedOut::Raw),
            other => (other, ChunkedOut::Raw),
        };
        let close_mode = fe.stream.close_mode.max(be.stream.close_mode);
        let keep_client = !facts.wants_close
            && !self.upload_cut
            && close_mode != CloseMode::Close
            && client_framing != Framing::UntilClose
            && !w.stopping();
        s.out.clear();
        s.out.reserve(rsp.len() + 256);
        let expires = keep_alive_deadline(&view);
        let length_hint = (facts.is_head || status == 304)
            .then(|| view.header("content-length"))
            .flatten()
            .map(<[u8]>::to_vec);
        let algo = compressor.as_ref().map(|c| c.algo);
        match s.client.as_stream() {
            Some(stream) => {
                let framed = (client_framing, length_hint);
                send_stream_head(stream, &view, &rsp_edits, framed, algo)
                    .map_err(|e| Fail::drop(Cause::ClientClosed(Some(e)), Phase::Data))?;
            }
            None => {
                let client = Some((client_framing, keep_client, facts.version, length_hint));
                write_response_head(&mut s.out, &view, &rsp_edits, client, algo);
                if fe.stream.case_adjust_client {
                    w.config().global.case_adjust.apply(&mut s.out);
                }
            }
        }
        s.sbuf.consume(rsp.len());
        if let Some(c) = &rsp_edits.cookie {
            self.log.cookie_flags[1] = c.outcome();
        }
        if fe.log.asap {
            // `option logasap`: the line goes out now, with what is known so far.
            self.log.bytes = self.log.received + head_in;
            self.emit_log(s, i64::from(status), *b"--", true);
            self.log.logged = true;
        }
        let backend = self.backend.expect("routed");
        // `option splice-response|splice-auto` on either side, unless `nosplice`; a body
        // kept for the cache passes through the buffers.
        let splice = super::tunnel::splicing(&w, fe, &w.config().backends[backend]).response
            && capture.is_none();
        let mut relay = Relay {
            splice,
            client: &mut s.client,
            out: &mut s.out,
            sbuf: &mut s.sbuf,
            worker: &w,
            server: &mut conn.conn,
            tclient: fe.stream.timeout_client,
            tserver: facts.timeout_server,
            sent: 0,
            relayed: 0,
            data: None,
            closing: !keep_client,
            capture: capture.as_mut(),
        };
        let counters = [
            w.state().frontends[s.fe].counters.at(w.tid),
            w.state().backends[backend].counters.at(w.tid),
        ];
        let outcome = match compressor.as_mut() {
            _ if dropped => match relay.plain(Framing::None, mode).await {
                Ok(()) => relay.drop_body(framing).await,
                Err(e) => Err(e),
            },
            Some(c) => {
                for k in counters {
                    k.comp_rsp.bump();
                }
                relay.compressed(framing, c, &w, &counters, limits).await
            }
            None => {
                let outcome = relay.plain(framing, mode).await;
                if conf.enabled() {
                    for k in counters {
                        k.comp_byp.add(relay.relayed);
                    }
                }
                outcome
            }
        };
        // The body's data as taken from the server (before compression); a chunked message
        // has one more byte in HAProxy's count (its end of trailers).
        let body = relay.data.unwrap_or(0);
        let eot = u64::from(matches!(framing, Framing::Chunked | Framing::Delimited));
        self.log.bytes = self.log.received + head_in + body + eot;
        if let Err(cause) = outcome {
            if matches!(cause, Cause::Server(_) | Cause::ServerTimeout) {
                // The client got a truncated message: never terminate it as if it were whole.
                w.state().backends[backend].servers[conn.server]
                    .counters
                    .at(w.tid)
                    .response_errors
                    .bump();
                crate::check::observe(&w.process, backend, conn.server, Seen::BadResponse);
            }
            return Err(Fail::drop(cause, Phase::Data));
        }
        // Bytes after the end of the response poison the connection: it is dropped rather
        // than pooled.
        let clean = s.sbuf.is_empty();
        s.sbuf.clear(&w.bufs);
        let st = &w.state().backends[backend].servers[conn.server];
        // A connection to an address the server has left is not kept.
        let same_addr = st.addr_gen.load(std::sync::atomic::Ordering::Acquire) == conn.addr_gen;
        let reusable = clean
            && !self.upload_cut
            && same_addr
            && !rsp.must_close()
            && close_mode == CloseMode::KeepAlive
            && !w.stopping();
        s.last_server = Some((conn.backend, conn.server));
        if reusable {
            conn.served += 1;
            // A connection whose PROXY header spoke for this client stays its own, as does
            // one an NTLM or Negotiate authentication is bound to.
            conn.owned |= owned;
            if be.reuse == ReuseMode::Never || be.servers[conn.server].private_conns() || conn.owned
            {
                s.private = Some(conn);
            } else if let Some((c, served)) = conn.into_pooled() {
                let pressure = w.config().global.pool.pressure();
                let kept = st.idle.release(
                    w.tid,
                    c,
                    served,
                    st.usable(),
                    false,
                    &pressure,
                    crate::clock::now(),
                    expires,
                );
                drop(kept);
            }
        }
        Ok(keep_client)
    }

    /// The server's response is refused (`http-response deny`, `option checkcache`): it
    /// is dropped with its connection, and the client gets `page` (else the error page of
    /// `status`) instead, counted as a denied response.
    async fn deny_response(
        &mut self,
        s: &mut Session,
        (rsp, head_in): (&ServerHead, u64),
        backend: usize,
        (status, page): (u16, Option<Answer>),
    ) -> Result<bool, Fail> {
        let backend = Some(backend);
        let page = page.unwrap_or_else(|| s.error_answer(status, backend));
        let mut page = super::reply::after_response(s, backend, None, page);
        page.close();
        self.answered_instead(s, rsp, head_in);
        self.log.local = Some(Local::DeniedResponse);
        self.log.status = i64::from(status);
        self.log.term = Some(*b"PH");
        self.log.bytes += super::report::htx_answer_size(&page);
        s.write_page(&page)
            .await
            .map_err(|c| Fail::drop(c, Phase::Headers))?;
        Ok(false)
    }

    /// The proxy answers in place of the server's response (a rule's `deny` or `return`, a
    /// body that came too late): HAProxy counts what it had received of it and logs no
    /// response time.
    fn answered_instead(&mut self, s: &Session, rsp: &ServerHead, head_in: u64) {
        let body = body_wait::buffered(s.sbuf.bytes(), rsp.len(), rsp.framing(), false);
        let body = body.as_ref().and_then(|b| b.bytes(s.sbuf.bytes()));
        self.log.received += head_in + body.map_or(0, |b| b.len() as u64);
        self.log.bytes = self.log.received;
        self.log.t_response = -1;
    }

    /// `http-response wait-for-body`: reads the response body into the server buffer (as
    /// much as fits) before the response rules run, and gives them what arrived
    /// (`res.body`). The relay then sends it on from the buffer.
    async fn wait_for_response_body(
        &mut self,
        s: &mut Session,
        conn: &mut ServerConn,
        (rsp, head_in): (&ServerHead, u64),
        wait: BodyWait,
        facts: &ReqFacts,
    ) -> Result<Option<Buffered>, Fail> {
        let w = s.w.clone();
        let framing = rsp.framing();
        let started = tokio::time::Instant::now();
        let deadline = started + wait.time;
        while !s.sbuf.is_full() {
            let arrived = s.sbuf.bytes().get(rsp.len()..).unwrap_or_default();
            if let Progress::Enough = body_wait::progress(arrived, framing, wait) {
                break;
            }
            let read = within(facts.timeout_server, s.sbuf.fill(&conn.conn, &w.bufs));
            match tokio::time::timeout_at(deadline, read).await {
                Ok(Ok(Ok(n))) if n > 0 => {}
                // The server stopped sending: the rules see what it sent, the relay finds
                // out whether that was all.
                Ok(Ok(_)) => break,
                Ok(Err(())) | Err(_) => {
                    self.answered_instead(s, rsp, head_in);
                    // HAProxy 2.6 logs a response that did not come in time as `sR`.
                    return Err(Fail::answer(504, Cause::ServerTimeout, Phase::Request));
                }
            }
        }
        // HAProxy's response time ends when the response rules have run.
        self.log.t_response += super::connect::ms(started.elapsed());
        let ended = conn.conn.as_stream().is_some_and(|st| st.message_ended());
        Ok(body_wait::buffered(
            s.sbuf.bytes(),
            rsp.len(),
            framing,
            ended,
        ))
    }

    /// Answers the client's upgrade with the server's 101 (or its CONNECT with the server's
    /// 2xx, which has no body whatever its fields say), then relays bytes both ways; the
    /// server connection is never reused afterwards.
    async fn upgrade(
        &mut self,
        s: &mut Session,
        be: &Backend,
        mut conn: ServerConn,
        rsp: &ServerHead,
        (mut edits, facts): (Edits, &ReqFacts),
    ) -> Result<bool, Fail> {
        let w = s.w.clone();
        let fe = &w.config().frontends[s.fe];
        s.out.clear();
        if let Some(accept) = rsp.websocket_accept() {
            // An HTTP/2 server opened the WebSocket with a 2xx: its HTTP/1.1 client
            // expects the 101 and the key's answer.
            edits.status.get_or_insert((101, None));
            edits
                .add
                .push(("sec-websocket-accept".into(), accept.as_bytes().to_vec()));
        }
        let view = rsp.view(s.sbuf.bytes());
        if let Some(stream) = s.client.as_stream() {
            // The stream makes the answer that opens its tunnel a 2xx (RFC 8441).
            let framed = (Framing::UntilClose, None);
            send_stream_head(stream, &view, &edits, framed, None)
                .map_err(|e| Fail::drop(Cause::ClientClosed(Some(e)), Phase::Data))?;
        } else {
            write_response_head(&mut s.out, &view, &edits, None, None);
            if !facts.connect {
                s.out.truncate(s.out.len() - 2);
                let proto = view.header("upgrade").unwrap_or(b"websocket").to_vec();
                s.out.extend_from_slice(b"connection: upgrade\r\n");
                push_header(&mut s.out, b"upgrade", &proto);
                s.out.extend_from_slice(b"\r\n");
            }
        }
        s.sbuf.consume(rsp.len());
        if !s.out.is_empty() {
            let head = std::mem::take(&mut s.out);
            let sent = s.write_client(&head).await;
            s.out = head;
            sent.map_err(|c| Fail::drop(c, Phase::Data))?;
        }
        self.phase = Phase::Tunnel;
        let limits = super::tunnel::Limits::new(
            facts.timeout_tunnel.or(be.timeout_tunnel),
            (fe.stream.timeout_client, facts.timeout_server),
            (fe.stream.independent, be.stream.independent),
            (fe.stream.timeout_client_fin, be.timeout_server_fin),
        );
        // What the client sent before the switch was counted as it arrived.
        let counted = s.cbuf.bytes().len() as u64;
        // A tunnel's bytes are spliced as a `mode tcp` stream's would be.
        let splice = super::tunnel::splicing(&w, fe, be);
        let spliced = super::tunnel::spliced(&w, splice, (&s.client, &conn.conn));
        let moved = super::tunnel::relay(
            &mut s.client,
            &mut conn.conn,
            (&mut s.cbuf, &mut s.sbuf),
            (&w.bufs, spliced),
            limits,
            None,
        )
        .await;
        self.log.bytes += moved.to_a;
        s.received += moved.to_b.saturating_sub(counted);
        Ok(false)
    }
}

/// When a server's `Keep-Alive: timeout=N` says it will close an idle connection: the pool
/// retires it a second before that, so a request never races the server's close.
fn keep_alive_deadline(rsp: &ResponseView<'_>) -> Option<Instant> {
    let v = rsp.header("keep-alive")?;
    let secs = v.split(|&b| b == b',').find_map(|p| {
        let p = std::str::from_utf8(p).ok()?.trim();
        let (k, n) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| n.trim().parse::<u64>().ok())?
    })?;
    Some(crate::clock::now() + Duration::from_secs(secs).saturating_sub(Duration::from_secs(1)))
}

/// The pieces a response body relay works with.
struct Relay<'a> {
    client: &'a mut Conn,
    out: &'a mut Vec<u8>,
    sbuf: &'a mut Buf,
    /// The worker: its buffer pool, its cache (a capture is stored there).
    worker: &'a Worker,
    server: &'a mut Conn,
    tclient: Option<Duration>,
    tserver: Option<Duration>,
    /// Bytes written to the client (head included), for the access log.
    sent: u64,
    /// Body bytes taken from the server.
    relayed: u64,
    /// The body's data bytes taken from the server, without chunk framing, before any
    /// compression (`None` when there is no body).
    data: Option<u64>,
    /// The client connection is closed once the response is sent.
    closing: bool,
    /// `cache-store`: the body is kept as it passes, and stored once whole, before its
    /// last bytes leave (a client that asks again at once finds it).
    capture: Option<&'a mut super::cached::Capture>,
    /// A body of known length may be spliced once the buffer is sent.
    splice: bool,
}

impl Relay<'_> {
    /// What follows a write: `more` when the next bytes are already waiting, the close
    /// after the `last` one when the connection ends with this response.
    fn then(&self, more: bool, last: bool) -> Then {
        match (more, last && self.closing) {
            (true, _) => Then::More,
            (false, true) => Then::Close,
            (false, false) => Then::Flush,
        }
    }

    /// Writes `self.out` then `extra` to the client.
    async fn send(&mut self, extra_len: usize, then: Then) -> Result<(), Cause> {
        let extra = &self.sbuf.bytes()[..extra_len];
        // `timeout client` is an inactivity timeout: a client that keeps reading, however
        // slowly, is served.
        let progress = self.client.progress();
        let write = self.client.write_pair(self.out, extra, then);
        match super::deadline::idle_within(self.tclient, progress, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Cause::ClientClosed(Some(e))),
            Err(()) => return Err(Cause::ClientTimeout),
        }
        self.sent += (self.out.len() + extra_len) as u64;
        self.out.clear();
        self.sbuf.consume(extra_len);
        Ok(())
    }

    /// Reads more of the body from the server (`Ok(false)` at its end of stream).
    async fn read_server(&mut self) -> Result<bool, Cause> {
        match within(self.tserver, self.sbuf.fill(self.server, &self.worker.bufs)).await {
            Ok(Ok(n)) => Ok(n > 0),
            Ok(Err(e)) => Err(Cause::Server(Some(e))),
            Err(()) => Err(Cause::ServerTimeout),
        }
    }

    /// The trailers of a body the server's stream delimited, once it ended whole (`None`
    /// if the stream was cut).
    fn server_trailers(&self) -> Option<Option<http::HeaderMap>> {
        let stream = self.server.as_stream()?;
        stream.message_ended().then(|| stream.take_trailers())
    }

    /// An HTTP/2 client's body is complete: its stream ends, with `trailers` if any. (An
    /// HTTP/1 client's body carries its own end.)
    fn end_stream_body(&self, trailers: impl FnOnce() -> Option<http::HeaderMap>) {
        if let Some(stream) = self.client.as_stream() {
            stream.end_body(trailers());
        }
    }

    /// The body has been taken whole from the server: a capture is stored.
    fn whole(&mut self) {
        if let Some(c) = self.capture.as_mut() {
            c.finish(self.worker);
        }
    }

    /// Relays the body as is (re-framed as `mode` says). `self.out` holds the response head.
    async fn plain(&mut self, framing: Framing, mode: ChunkedOut) -> Result<(), Cause> {
        let truncated = || Cause::Server(None);
        match framing {
            Framing::None => {
                self.whole();
                self.send(0, self.then(false, true)).await
            }
            Framing::Length(total) => {
                // The head and the body bytes already read leave in one writev; the rest is
                // written straight from the server buffer, never copied.
                let mut remaining = total;
                loop {
                    let take = (remaining as usize).min(self.sbuf.bytes().len());
                    // Only a full buffer can have left bytes waiting; the peek confirms it.
                    let more = remaining > take as u64
                        && self.sbuf.read_to_capacity()
                        && self.server.has_input();
                    if let Some(c) = self.capture.as_mut() {
                        c.keep(&self.sbuf.bytes()[..take]);
                    }
                    if remaining == take as u64 {
                        self.whole();
                    }
                    self.send(take, self.then(more, remaining == take as u64))
                        .await?;
                    self.relayed += take as u64;
                    *self.data.get_or_insert(0) += take as u64;
                    remaining -= take as u64;
                    if remaining == 0 {
                        return Ok(());
                    }
                    if self.splice && self.spliced(remaining).await? {
                        return Ok(());
                    }
                    if !self.read_server().await? {
                        return Err(truncated());
                    }
                }
            }
            Framing::Chunked => {
                let mut dec = ChunkedDecoder::new();
                loop {
                    let used = dec
                        .decode(self.sbuf.bytes(), mode, self.out)
                        .map_err(|_| truncated())?;
                    if let Some(c) = self.capture.as_mut() {
                        c.keep(&self.sbuf.bytes()[..used]);
                    }
                    self.sbuf.consume(used);
                    self.relayed += used as u64;
                    self.data = Some(dec.data_len());
                    if dec.is_done() {
                        self.whole();
                    }
                    if !self.out.is_empty() {
                        self.send(0, self.then(false, dec.is_done())).await?;
                    }
                    if dec.is_done() {
                        self.end_stream_body(|| trailers_of_lines(dec.trailers()));
                        return Ok(());
                    }
                    if self.sbuf.is_full() || !self.read_server().await? {
                        return Err(truncated());
                    }
                }
            }
            Framing::UntilClose | Framing::Delimited => loop {
                let data = self.sbuf.bytes();
                if let Some(c) = self.capture.as_mut() {
                    c.keep(data);
                }
                if !data.is_empty() {
                    if mode == ChunkedOut::Chunked {
                        push_chunk_header(self.out, data.len());
                        self.out.extend_from_slice(data);
                        self.out.extend_from_slice(b"\r\n");
                    } else {
                        self.out.extend_from_slice(data);
                    }
                    let n = data.len();
                    self.sbuf.consume(n);
                    self.relayed += n as u64;
                    *self.data.get_or_insert(0) += n as u64;
                }
                if !self.out.is_empty() {
                    self.send(0, Then::Flush).await?;
                }
                if !self.read_server().await? {
                    // A body its stream delimits ends whole or not at all.
                    let trailers = match framing {
                        Framing::Delimited => Some(self.server_trailers().ok_or_else(truncated)?),
                        _ => None,
                    };
                    self.whole();
                    if mode == ChunkedOut::Chunked {
                        push_last_chunk(self.out, trailers.as_ref().and_then(Option::as_ref));
                        self.send(0, self.then(false, true)).await?;
                    }
                    self.end_stream_body(|| trailers.flatten());
                    return Ok(());
                }
            },
        }
    }

    /// Splices the body's last `remaining` bytes from server to client (its buffer sent):
    /// whether it did (`false`: not between two sockets in clear, or no pipe to be had;
    /// the caller copies them).
    async fn spliced(&mut self, remaining: u64) -> Result<bool, Cause> {
        use crate::transport::splice::{self, Stopped};
        let (Some(from), Some(to)) = (self.server.plain_tcp(), self.client.plain_tcp()) else {
            return Ok(false);
        };
        let Some(mut lease) = super::tunnel::pipe(self.worker) else {
            return Ok(false);
        };
        let mut moved = 0;
        let limits = (self.tserver, self.tclient);
        let done = splice::forward(from, to, &mut lease, remaining, limits, &mut moved).await;
        drop(lease);
        self.sent += moved;
        self.relayed += moved;
        *self.data.get_or_insert(0) += moved;
        match done {
            Ok(()) => {
                self.whole();
                Ok(true)
            }
            Err(Stopped::Read(e)) => Err(Cause::Server(e)),
            Err(Stopped::ReadTimeout) => Err(Cause::ServerTimeout),
            Err(Stopped::Write(e)) => Err(Cause::ClientClosed(Some(e))),
            Err(Stopped::WriteTimeout) => Err(Cause::ClientTimeout),
        }
    }

    /// Reads the body to its end and drops it (a HEAD the server got as another method).
    async fn drop_body(&mut self, framing: Framing) -> Result<(), Cause> {
        let truncated = || Cause::Server(None);
        let mut dec = ChunkedDecoder::new();
        let mut remaining = match framing {
            Framing::None => return Ok(()),
            Framing::Length(n) => n,
            Framing::Chunked | Framing::UntilClose | Framing::Delimited => u64::MAX,
        };
        let mut sink = Vec::new();
        loop {
            let avail = self.sbuf.bytes();
            let (used, done) = match framing {
                Framing::Chunked => {
                    let used = dec
                        .decode(avail, ChunkedOut::Raw, &mut sink)
                        .map_err(|_| truncated())?;
                    sink.clear();
                    self.data = Some(dec.data_len());
                    (used, dec.is_done())
                }
                _ => {
                    let used = (remaining.min(avail.len() as u64)) as usize;
                    remaining -= used as u64;
                    *self.data.get_or_insert(0) += used as u64;
                    (used, remaining == 0)
                }
            };
            self.sbuf.consume(used);
            self.relayed += used as u64;
            if done {
                return Ok(());
            }
            if self.sbuf.is_full() {
                return Err(truncated());
            }
            if !self.read_server().await? {
                // Only a body that lasts until the close (or its stream's end) ends this way.
                return match framing {
                    Framing::UntilClose => Ok(()),
                    Framing::Delimited if self.server_trailers().is_some() => Ok(()),
                    _ => Err(truncated()),
                };
            }
        }
    }

    /// Relays the body through `comp`, one flushed HTTP chunk per read, stepping the level
    /// down or up after each chunk as the limits say.
    async fn compressed(
        &mut self,
        framing: Framing,
        comp: &mut Compressor,
        w: &Worker,
        counters: &[&ProxyCounters],
        limits: &GlobalComp,
    ) -> Result<(), Cause> {
        let mut dec = ChunkedDecoder::new();
        let mut remaining = match framing {
            Framing::Length(n) => n,
            _ => u64::MAX,
        };
        let mut eof = false;
        // The trailers of a body its server's stream delimited, once it ended.
        let mut stream_trailers: Option<http::HeaderMap> = None;
        let to_stream = self.client.as_stream().is_some();
        loop {
            let (used, last) = {
                let mut plain = w.comp_plain.borrow_mut();
                let mut scratch = w.comp_out.borrow_mut();
                plain.clear();
                let avail = self.sbuf.bytes();
                let (data, used, last): (&[u8], usize, bool) = match framing {
                    Framing::Length(_) => {
                        let take = (remaining.min(avail.len() as u64)) as usize;
                        (&avail[..take], take, take as u64 == remaining)
                    }
                    Framing::Chunked => match dec.decode(avail, ChunkedOut::Raw, &mut plain) {
                        Ok(used) => (&plain[..], used, dec.is_done()),
                        Err(_) => return Err(Cause::Server(None)),
                    },
                    Framing::UntilClose | Framing::Delimited | Framing::None => {
                        (avail, avail.len(), eof)
                    }
                };
                *self.data.get_or_insert(0) += data.len() as u64;
                if !data.is_empty() || last {
                    let mut lines = Vec::new();
                    let chunked = (!to_stream).then(|| match &stream_trailers {
                        Some(t) => {
                            push_last_fields(&mut lines, t);
                            &lines[..]
                        }
                        None => dec.trailers(),
                    });
                    let n = comp.chunk(data, last, chunked, &mut scratch, self.out);
                    for k in counters {
                        k.comp_in.add(data.len() as u64);
                        k.comp_out.add(n as u64);
                    }
                    let figures = &w.process.figures;
                    let now = crate::clock::clock_ms();
                    figures.compress_in.add(now, data.len() as u64);
                    figures.compress_out.add(now, n as u64);
                    let over = over_compression_limit(w, limits);
                    comp.set_level(compression::next_level(
                        comp.level(),
                        limits.max_level,
                        over,
                    ));
                }
                (used, last)
            };
            self.sbuf.consume(used);
            if let Framing::Length(_) = framing {
                remaining -= used as u64;
            }
            if !self.out.is_empty() {
                // Let the kernel coalesce only when the next chunk's input is already here.
                let more = !last && self.sbuf.read_to_capacity() && self.server.has_input();
                self.send(0, self.then(more, last)).await?;
            }
            if last {
                let trailers = stream_trailers.take();
                self.end_stream_body(|| trailers.or_else(|| trailers_of_lines(dec.trailers())));
                return Ok(());
            }
            if self.sbuf.is_full() {
                return Err(Cause::Server(None));
            }
            match self.read_server().await? {
                true => {}
                false if framing == Framing::UntilClose => eof = true,
                false if framing == Framing::Delimited => {
                    stream_trailers = self.server_trailers().ok_or(Cause::Server(None))?;
                    eof = true;
                }
                false => return Err(Cause::Server(None)),
            }
        }
    }
}

/// The compressors' input rate, every worker's, in bytes per second.
/// Whether compressing more would go over the process's limits (its input rate against
/// `maxcomprate` as the CLI left it, the worker's load against `maxcompcpuusage`).
fn over_compression_limit(w: &crate::runtime::Worker, limits: &GlobalComp) -> bool {
    let rate = w
        .process
        .figures
        .compress_in
        .per_sec(crate::clock::clock_ms());
    let max_rate = w
        .process
        .compress_limit
        .load(std::sync::atomic::Ordering::Relaxed);
    compression::over_limit(max_rate, limits.max_cpu, rate, w.busy_pct())
}

/// A 401 (or 407) asking for NTLM or Negotiate authentication (`WWW-Authenticate`, or
/// `Proxy-Authenticate`, starting with `NTLM` or `Nego`): such an authentication is bound
/// to its connection, which HAProxy then keeps for the client connection alone.
fn asks_connection_auth(rsp: &ResponseView<'_>) -> bool {
    let field = match rsp.status() {
        401 => "www-authenticate",
        407 => "proxy-authenticate",
        _ => return false,
    };
    rsp.headers()
        .filter(|(n, _)| sluice_http::name_is(n, field))
        .any(|(_, v)| {
            let v = v.get(..4).unwrap_or_default();
            v.eq_ignore_ascii_case(b"NTLM") || v.eq_ignore_ascii_case(b"Nego")
        })
}

/// Appends `trailers` as the `name: value` lines of a trailer section.
fn push_last_fields(out: &mut Vec<u8>, trailers: &http::HeaderMap) {
    for (name, value) in trailers {
        push_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
}
