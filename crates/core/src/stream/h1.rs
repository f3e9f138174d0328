//! The HTTP/1.1 keep-alive loop: one transaction per request, in order, while the client
//! connection stays open. An HTTP/2 stream (`h2`) runs the same loop over its pipe, so both
//! protocols share every step after the head is read.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::report::Cause;
use super::session::Session;
use super::txn::Txn;
use crate::buffer::Buf;
use crate::runtime::{SessionInfo, Worker};
use crate::sample::StreamVars;
use crate::transport::Conn;

/// How an HTTP session starts: fresh, or from a TCP frontend that chose an HTTP backend
/// (HAProxy's upgrade), with what the client sent so far and that backend.
#[derive(Default)]
pub(super) struct Start {
    /// Requests its client connection carried before (an HTTP/2 connection's streams).
    pub earlier: u32,
    /// Bytes already read from the client.
    pub read: Buf,
    /// The backend every request goes to (the TCP frontend's choice).
    pub backend: Option<usize>,
    /// The request head an HTTP/2 stream carries, decoded already.
    pub head: Option<super::session::ClientHead>,
}

/// A client connection that turned out to speak HTTP/2 (its preface came where a request
/// was expected): the connection, what was read of it, and its variables.
pub(super) type SpeaksH2 = (Conn, Vec<u8>, StreamVars);

/// Serves one HTTP client connection until it closes: one transaction per request, in
/// order, while the connection stays open. A client that opens with HTTP/2's preface is
/// given back ([`SpeaksH2`]) for the HTTP/2 side to serve.
///
/// The session is made before the future: the future then holds it and the loop alone,
/// not its makings as well (an HTTP/2 stream's task carries one, and moves it whole).
pub(super) fn serve_http(
    w: &Rc<Worker>,
    client: Conn,
    peer: SocketAddr,
    fe: usize,
    info: Arc<SessionInfo>,
    vars: StreamVars,
    start: Start,
) -> impl std::future::Future<Output = Option<SpeaksH2>> + 'static {
    let mut s = Session {
        w: w.clone(),
        fe,
        client,
        peer: peer.into(),
        // `tcp-request ... set-dst`: the destination the HTTP rules start from.
        dst: vars.set_dst.get().into(),
        connection_addrs: (peer, vars.set_dst.get()),
        body: None,
        cbuf: start.read,
        sbuf: Buf::default(),
        out: Vec::new(),
        private: None,
        last_server: None,
        requests: 0,
        earlier: start.earlier,
        pinned: start.backend,
        received: 0,
        info,
        vars,
        given: start.head,
        speaks_h2: false,
    };
    async move {
        run(&mut s).await;
        let upgrade = s.speaks_h2.then(|| s.cbuf.bytes().to_vec());
        // Buffers go back to the worker's pool; whatever they held goes with the connection.
        s.cbuf.clear(&s.w.bufs);
        s.sbuf.clear(&s.w.bufs);
        upgrade.map(|read| (s.client, read, s.vars))
    }
}

async fn run(s: &mut Session) {
    loop {
        let mut txn = Txn::default();
        // An earlier request's `set-src`/`set-dst` were its own.
        s.peer.set(s.connection_addrs.0);
        s.dst.set(s.connection_addrs.1);
        s.vars.txn.borrow_mut().clear();
        s.vars.unique_id.take();
        s.vars.captured.take();
        s.vars.last_rule.take();
        // (`tcp-request content` rules run again for each request in HTTP mode.)
        s.vars.log_level.set(None);
        txn.log.received_before = s.received;
        let head = match s.read_head(&mut txn.log).await {
            Ok(h) => h,
            // Not HTTP/1: the caller serves the connection as HTTP/2.
            Err(_) if s.speaks_h2 => return,
            Err(fail) => {
                // A connection that sent nothing is logged only if it got an answer, and
                // not at all with `option dontlognull`.
                let null = !txn.log.got_bytes;
                if null && s.frontend().log.ignore_probes {
                    return;
                }
                if !null || (fail.status.is_some() && !s.frontend().log.dont_log_null) {
                    txn.log_head_failure(s, &fail);
                }
                // Boxed, as the other failure below: rare, and kilobytes a stream would
                // otherwise carry all its life.
                return Box::pin(s.fail_head(fail.status)).await;
            }
        };
        s.w.ctx().counters.requests.bump();
        txn.log.parsed = true;
        s.info.busy.store(true, Ordering::Relaxed);
        let req = head.view(s.cbuf.bytes());
        txn.log.head_in = super::report::head_size(&req, &s.cbuf.bytes()[..head.len()]);
        if !s.frontend().traces.is_empty() {
            txn.traced = crate::filters::next_stream(&s.w.process);
            txn.trace(s).start();
        }
        if !s.w.process.loggers[s.fe].is_empty() {
            let max = s.w.config().global.log_settings.request_line_max();
            txn.log.capture_line(&req, s.client.is_stream(), max);
        }
        // Boxed: a transaction's state exists while a request is handled, not while the
        // connection waits for the next one (or for the rest of a head).
        let done = Box::pin(txn.handle(s, head)).await;
        s.info.busy.store(false, Ordering::Relaxed);
        s.info.route(None, None);
        let status = match &done {
            Err(fail) => fail.status.map_or(-1, i64::from),
            Ok(_) => txn.log.status,
        };
        // HAProxy's failures: the server's 5xx but 501 and 505, or its timeout, break or
        // nonsense; not the proxy's own answers.
        let server_failed = match &done {
            Err(fail) => matches!(
                fail.cause,
                Cause::ServerTimeout | Cause::Server(_) | Cause::InvalidResponse
            ),
            Ok(_) => {
                txn.log.local.is_none()
                    && (500..600).contains(&status)
                    && status != 501
                    && status != 505
            }
        };
        s.end_tracking(status, server_failed, txn.bytes_in(s), txn.log.bytes);
        if txn.traced != 0 {
            let trace = txn.trace(s);
            if done.is_ok() {
                trace.end(crate::filters::Channel::Request);
                trace.end(crate::filters::Channel::Response);
            }
            trace.stop();
        }
        match done {
            Ok(keep) => {
                txn.log_done(s);
                s.requests += 1;
                s.info.requests.store(s.requests, Ordering::Relaxed);
                if !keep {
                    return s.close_after(txn.last_request).await;
                }
            }
            Err(fail) => {
                txn.log_end(s, &fail);
                return Box::pin(s.fail(txn.backend, fail.status)).await;
            }
        }
    }
}
