//! The data path: one client connection from accept to close.
//!
//! - `session`: an HTTP/1.1 client connection (or an HTTP/2 stream served as one) and its
//!   buffers; `h1`: its keep-alive loop.
//! - `txn`: one request/response exchange on it: the request's facts, sending the request,
//!   reading the response head; `route`: rules, routing and server choice; `reply`: the
//!   answers the proxy makes itself; `txn_log`: the access-log line and the counters.
//! - `body_wait`: waiting for a request or response body before the rules run.
//! - `connect`: the server connection for a request (queue, pool, retries, redispatch),
//!   shared by HTTP and TCP; `deadline`: the timeouts as inactivity limits.
//! - `relay`: the response body (plain or compressed) and the connection back to the pool.
//! - `cached`: answering from a cache (`cache-use`) and keeping a response for it
//!   (`cache-store`).
//! - `heads`: the head writers (HTTP/1.1 text and HTTP/2 fields from one field list);
//!   `report`: how a transaction ended, for logs and counters.
//! - `h2`: the HTTP/2 front; each stream is served by a session of its own.
//!   `h2_frames`: its frames, counted on the wire. `h2_server`: HTTP/2 towards servers,
//!   each request a stream on the worker's connection to its server (`pool::h2`).
//! - `tcp`, `tunnel`: `mode tcp` and upgraded connections, relayed as bytes.
//! - `conn_error`: a connection that fails before its session starts, and its log line.
//! - `keywords`: the data path's configuration keywords.
//!
//! The states are documented in `docs/internals/stream-lifecycle.md`.

mod body_wait;
mod cached;
mod conn_error;
mod connect;
mod deadline;
mod h1;
pub mod h2;
mod h2_frames;
pub(crate) mod h2_server;
pub mod h3;
mod h3_early;
mod heads;
pub mod keywords;
mod quic_floods;
mod relay;
mod reply;
mod report;
mod route;
mod session;
mod streams;
mod tcp;
mod tunnel;
mod txn;
mod txn_log;
mod upload;

use std::net::SocketAddr;
use std::rc::Rc;

use self::h1::serve_http;
use crate::conf::stream::Mode;
use crate::rules::{tcp_verdict, Level};
use crate::runtime::counters::Held;
use crate::runtime::{ClientConn, Slot, Worker};
use crate::sample::{Arrival, Ctx, StreamVars};
use crate::stick::Counter;
use crate::transport::{Conn, Socket};

/// Serves one accepted client connection of frontend `fe` until it closes. `slot` is its
/// place under `maxconn`; both it and the connection counts are given back however the
/// stream ends.
pub async fn serve(
    w: Rc<Worker>,
    socket: Socket,
    mut peer: SocketAddr,
    (fe, listener): (usize, usize),
    slot: Slot,
) {
    let accepted = std::time::SystemTime::now();
    crate::keepalive::apply(&socket, &w.config().frontends[fe].stream.cli_ka);
    socket.set_buffers(w.config().global.client_bufs);
    if w.config().frontends[fe].stream.nolinger {
        socket.reset_on_close();
    }
    let mut client = Conn::from(socket);
    // A connection that fails before its session starts, logged as HAProxy logs it.
    let log_failure = |client: &Conn, peer: SocketAddr, e: conn_error::ConnError| {
        let arrival = Arrival {
            thread: w.tid,
            listener,
        };
        let failed = conn_error::Failed {
            client,
            peer,
            arrival,
            date: accepted,
        };
        conn_error::log(&w, fe, &failed, e);
    };
    // `accept-proxy`, `expect-proxy layer4`: who the client is comes first, from the proxy
    // in front; a header that is bad or does not come closes the connection.
    if expects_proxy(&w, &client, peer, (fe, listener)) {
        let st = &w.config().frontends[fe].stream;
        let limit = st.timeout_http_request.or(st.timeout_client);
        let failure = match deadline::within(limit, client.read_proxy_header()).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(conn_error::ConnError::Proxy(Some(e))),
            Err(()) => Some(conn_error::ConnError::Proxy(None)),
        };
        match failure {
            None => peer = client.peer_addr().unwrap_or(peer),
            Some(e) => {
                // As HAProxy counts a connection that dies before its session starts.
                w.state().frontends[fe]
                    .counters
                    .at(w.tid)
                    .request_errors
                    .bump();
                log_failure(&client, peer, e);
                client.abort();
                return;
            }
        }
    }
    let counted = ClientConn::open(&w.process, w.tid, (fe, listener), peer);
    let _slot = slot;
    // A TLS bind: the handshake is completed once the connection rules let it in.
    let acceptor = w.config().frontends[fe].listen.binds[listener]
        .tls
        .as_ref()
        .and_then(|t| t.acceptor.clone());
    let client = match acceptor {
        // `maxsslconn`: refused before its handshake.
        Some(_)
            if w.config()
                .global
                .tls
                .max_conns
                .is_some_and(|m| w.process.tls_open() >= m) =>
        {
            log_failure(&client, peer, conn_error::ConnError::TooMany);
            client.abort();
            return;
        }
        Some(a) => match client.into_tls(a.config, w.config().global.tls.capture_buffer) {
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
    if !session_accepted(&w, &client, peer, (fe, listener), &vars) {
        // `tcp-request connection|session reject`: closed before anything is read.
        client.abort();
        return;
    }
    // `tcp-request connection|session set-src`: the client the rest of it sees.
    let peer = vars.set_src.get().unwrap_or(peer);
    // After the connection rules: a connection they refuse costs no handshake.
    if client.is_tls() {
        if let Err(e) = handshake(&w, (fe, listener), &client).await {
            log_failure(&client, peer, e);
            return;
        }
    }
    let info = counted.info.clone();
    let served = async {
        match w.config().frontends[fe].stream.mode {
            // Boxed, as is HTTP/2's: a TCP session's state (3.3 kB) and an HTTP/2
            // connection's (4.8 kB) would otherwise size every HTTP/1.1 connection's (2.7 kB),
            // each of them allocated whole as its task starts.
            Mode::Tcp => {
                let upgrade = Box::pin(tcp::serve(&w, client, peer, fe, &info, &vars)).await;
                // The TCP frontend chose an HTTP backend: the connection becomes an HTTP session
                // bound to that backend, starting from what the client sent so far.
                if let Some((client, read, backend)) = upgrade {
                    let start = h1::Start {
                        read,
                        backend: Some(backend),
                        ..Default::default()
                    };
                    let served = serve_http(&w, client, peer, fe, info.clone(), vars, start);
                    if let Some((client, read, vars)) = Box::pin(served).await {
                        Box::pin(h2::serve(&w, client, peer, fe, info, vars, read)).await
                    }
                }
            }
            Mode::Http if h2::negotiated(&w, fe, listener, &client) => {
                Box::pin(h2::serve(&w, client, peer, fe, info, vars, Vec::new())).await
            }
            Mode::Http => {
                let served =
                    serve_http(&w, client, peer, fe, info.clone(), vars, Default::default());
                // A client with HTTP/2 prior knowledge, found by its preface.
                if let Some((client, read, vars)) = served.await {
                    Box::pin(h2::serve(&w, client, peer, fe, info, vars, read)).await
                }
            }
        }
    };
    // `shutdown session`: a request in progress ends by its own watch (and is logged);
    // a connection between requests is dropped here.
    tokio::select! {
        biased;
        () = served => {}
        () = counted.info.kill.pulled() => {}
    }
}

/// A TLS client connection's end, counted when the stream is dropped however it ends.
pub(super) struct TlsEnd(pub(super) Rc<Worker>);

impl Drop for TlsEnd {
    fn drop(&mut self) {
        self.0.ctx().counters.tls_closed.bump();
    }
}

/// Completes a TLS client's handshake, within `timeout http-request` (else `timeout
/// client`), before anything else is read: what it negotiated (ALPN) may choose the
/// protocol. Counted on the worker, the frontend and the listener.
async fn handshake(
    w: &Worker,
    (fe, listener): (usize, usize),
    client: &Conn,
) -> Result<(), conn_error::ConnError> {
    let st = &w.config().frontends[fe].stream;
    let limit = st.timeout_http_request.or(st.timeout_client);
    let in_handshake = Held::take(&w.ctx().handshaking);
    let outcome = deadline::within(limit, client.handshake()).await;
    let done = matches!(outcome, Ok(Ok(())));
    drop(in_handshake);
    let resumed = client.tls_resumed() == Some(true);
    let fe_state = &w.state().frontends[fe];
    let counters = std::iter::once(fe_state.counters.at(w.tid)).chain(
        fe_state
            .listeners
            .get(listener)
            .map(|l| l.counters.at(w.tid)),
    );
    for c in counters {
        if !done {
            c.tls_failed.bump();
            continue;
        }
        c.tls_handshakes.bump();
        if resumed {
            c.tls_reused.bump();
        }
    }
    if done {
        let c = &w.ctx().counters;
        if resumed {
            c.tls_resumed.bump();
        } else {
            c.tls_full.bump();
            c.tls_full_rate.hit(crate::runtime::clock_ms());
        }
    }
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(conn_error::ConnError::of_handshake(Some(&e))),
        Err(()) => Err(conn_error::ConnError::of_handshake(None)),
    }
}

/// Whether the connection starts with a PROXY protocol header: its bind says so
/// (`accept-proxy`), or a `tcp-request connection expect-proxy layer4` rule does.
fn expects_proxy(
    w: &Worker,
    client: &Conn,
    peer: SocketAddr,
    (fe, listener): (usize, usize),
) -> bool {
    let frontend = &w.config().frontends[fe];
    if frontend
        .listen
        .binds
        .get(listener)
        .is_some_and(|b| b.accept_proxy)
    {
        return true;
    }
    let rules = &frontend.rules.tcp_connection;
    if !rules
        .iter()
        .any(|r| r.action == crate::conf::rules::Action::ExpectProxy)
    {
        return false;
    }
    let vars = StreamVars::default();
    let cx = connection_ctx(w, (fe, listener), peer, client, &vars);
    crate::rules::expects_proxy(rules, &cx)
}

/// What connection rules see of a client connection accepted by `listener` of `fe` on
/// this worker.
fn connection_ctx<'a>(
    w: &'a Worker,
    (fe, listener): (usize, usize),
    peer: SocketAddr,
    client: &'a Conn,
    vars: &'a StreamVars,
) -> Ctx<'a> {
    let arrival = Arrival {
        thread: w.tid,
        listener,
    };
    Ctx::of_connection(&w.process, fe, arrival, peer, client, vars)
}

/// Whether `tcp-request connection` then `tcp-request session` rules let the connection
/// in. The entries they track count it as a session (`sess_cnt`, `sess_rate`).
fn session_accepted(
    w: &Worker,
    client: &Conn,
    peer: SocketAddr,
    (fe, listener): (usize, usize),
    vars: &StreamVars,
) -> bool {
    let rules = &w.config().frontends[fe].rules;
    if rules.tcp_connection.is_empty() && rules.tcp_session.is_empty() {
        return true;
    }
    let cx = connection_ctx(w, (fe, listener), peer, client, vars);
    let accepted = tcp_verdict(&rules.tcp_connection, &cx, Level::Session)
        && tcp_verdict(&rules.tcp_session, &cx, Level::Session);
    if accepted {
        let session = [(Counter::SessCnt, 1), (Counter::SessRate, 1)];
        vars.count(&session, crate::runtime::clock_ms());
    }
    accepted
}
