//! The data path: one client connection from accept to close.
//!
//! - `session`: an HTTP/1.1 client connection and its buffers; its keep-alive loop is
//!   [`serve_http`] here.
//! - `txn`: one request/response exchange on it: rules, routing, server choice, sending
//!   the request, reading the response head, logging.
//! - `connect`: the server connection for a request (queue, pool, retries, redispatch),
//!   shared by HTTP and TCP.
//! - `relay`: the response body (plain or compressed) and the connection back to the pool.
//! - `heads`: the head writers; `report`: how a transaction ended, for logs and counters.
//! - `h2`: the HTTP/2 front; each stream is served as an HTTP/1.1 session.
//! - `tcp`, `tunnel`: `mode tcp` and upgraded connections, relayed as bytes.
//! - `keywords`: the data path's configuration keywords.
//!
//! The states are documented in `docs/internals/stream-lifecycle.md`.

mod connect;
mod deadline;
pub mod h2;
mod heads;
pub mod keywords;
mod relay;
mod report;
mod session;
mod tcp;
mod tunnel;
mod txn;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use self::session::Session;
use self::txn::Txn;
use crate::buffer::Buf;
use crate::conf::stream::Mode;
use crate::rules::{tcp_verdict, Level};
use crate::runtime::{ClientConn, SessionInfo, Slot, Worker};
use crate::sample::{Ctx, StreamVars};
use crate::stick::Counter;
use crate::transport::Conn;

/// Serves one accepted client connection of frontend `fe` until it closes. `slot` is its
/// place under `maxconn`; both it and the connection counts are given back however the
/// stream ends.
pub async fn serve(
    w: Rc<Worker>,
    client: Conn,
    peer: SocketAddr,
    (fe, listener): (usize, usize),
    slot: Slot,
) {
    let counted = ClientConn::open(&w.process, w.tid, (fe, listener), peer);
    let _slot = slot;
    // A TLS bind: the handshake runs as the connection is first read.
    let acceptor = w.config().frontends[fe].listen.binds[listener]
        .tls
        .as_ref()
        .and_then(|t| t.acceptor.clone());
    let client = match acceptor {
        Some(a) => match client.into_tls(a.config) {
            Ok(c) => {
                let ctx = w.ctx();
                ctx.counters.tls_sessions.bump();
                ctx.counters.tls_rate.hit(crate::runtime::clock_ms());
                c
            }
            Err(_) => return,
        },
        None => client,
    };
    // `CurrSslConns` counts it until it ends.
    let _tls = client.is_tls().then(|| TlsEnd(w.clone()));
    // The connection's variables and tracked entries, released when it closes.
    let vars = StreamVars::default();
    if !session_accepted(&w, &client, peer, fe, &vars) {
        // `tcp-request connection|session reject`: closed before anything is read.
        client.abort();
        return;
    }
    let info = counted.info.clone();
    match w.config().frontends[fe].stream.mode {
        // Boxed: a TCP session's state does not size every HTTP connection's.
        Mode::Tcp => Box::pin(tcp::serve(&w, client, peer, fe, &info, &vars)).await,
        Mode::Http => match h2::negotiate(&w, fe, listener, &client).await {
            Some(true) => h2::serve(&w, client, peer, fe, info, vars).await,
            Some(false) => serve_http(&w, client, peer, fe, info, vars).await,
            None => {}
        },
    }
}

/// A TLS client connection's end, counted when the stream is dropped however it ends.
struct TlsEnd(Rc<Worker>);

impl Drop for TlsEnd {
    fn drop(&mut self) {
        self.0.ctx().counters.tls_closed.bump();
    }
}

/// Whether `tcp-request connection` then `tcp-request session` rules let the connection
/// in. The entries they track count it as a session (`sess_cnt`, `sess_rate`).
fn session_accepted(
    w: &Worker,
    client: &Conn,
    peer: SocketAddr,
    fe: usize,
    vars: &StreamVars,
) -> bool {
    let rules = &w.config().frontends[fe].rules;
    if rules.tcp_connection.is_empty() && rules.tcp_session.is_empty() {
        return true;
    }
    let cx = Ctx::of_connection(&w.process, fe, peer, client, vars);
    let accepted = tcp_verdict(&rules.tcp_connection, &cx, Level::Session)
        && tcp_verdict(&rules.tcp_session, &cx, Level::Session);
    if accepted {
        let session = [(Counter::SessCnt, 1), (Counter::SessRate, 1)];
        vars.count(&session, crate::runtime::clock_ms());
    }
    accepted
}

/// Serves one HTTP client connection until it closes: one transaction per request, in
/// order, while the connection stays open.
async fn serve_http(
    w: &Rc<Worker>,
    client: Conn,
    peer: SocketAddr,
    fe: usize,
    info: Arc<SessionInfo>,
    vars: StreamVars,
) {
    let mut s = Session {
        w: w.clone(),
        fe,
        client,
        peer: peer.into(),
        dst: None.into(),
        body: None.into(),
        chunked_body: None,
        cbuf: Buf::default(),
        sbuf: Buf::default(),
        out: Vec::new(),
        private: None,
        requests: 0,
        received: 0,
        info,
        vars,
    };
    run(&mut s).await;
    // Buffers go back to the worker's pool; whatever they held goes with the connection.
    s.cbuf.clear(&w.bufs);
    s.sbuf.clear(&w.bufs);
}

async fn run(s: &mut Session) {
    loop {
        let mut txn = Txn::default();
        s.vars.txn.borrow_mut().clear();
        s.vars.unique_id.take();
        txn.log.received_before = s.received;
        let head = match s.read_head(&mut txn.log).await {
            Ok(h) => h,
            Err(fail) => {
                // A connection that sent nothing is logged only if it got an answer, and
                // not at all with `option dontlognull`.
                let null = !txn.log.got_bytes;
                if !null || (fail.status.is_some() && !s.frontend().log.dont_log_null) {
                    txn.log_end(s, &fail);
                }
                return s.fail(txn.backend, fail.status).await;
            }
        };
        s.w.ctx().counters.requests.bump();
        if s.requests == 0 {
            // The handshake is over once a request has come through it.
            if let Some(resumed) = s.client.tls_resumed() {
                let c = &s.w.ctx().counters;
                if resumed {
                    c.tls_resumed.bump();
                } else {
                    c.tls_full.bump();
                    c.tls_full_rate.hit(crate::runtime::clock_ms());
                }
            }
        }
        txn.log.parsed = true;
        s.info.busy.store(true, Ordering::Relaxed);
        if !s.w.process.loggers[s.fe].is_empty() {
            txn.log
                .capture_line(s.cbuf.bytes(), &head, s.client.is_stream());
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
        s.end_tracking(status, s.received - txn.log.received_before, txn.log.bytes);
        match done {
            Ok(keep) => {
                txn.log_done(s);
                s.requests += 1;
                s.info.requests.store(s.requests, Ordering::Relaxed);
                if !keep {
                    return s.close_gracefully().await;
                }
            }
            Err(fail) => {
                txn.log_end(s, &fail);
                return s.fail(txn.backend, fail.status).await;
            }
        }
    }
}
