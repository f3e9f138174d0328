//! The HTTP/3 front: `bind quic4@ADDR:PORT ssl crt ...` (and `quic6@`). QUIC is `quinn`'s
//! (with rustls, the certificates and TLS settings of the bind line) and HTTP/3's framing
//! the `h3` crate's; each request stream is served as an HTTP/2 stream is, as an HTTP/1.1
//! session of its own over the stream (`crate::h3_stream`), so rules, routing, queues,
//! pools, compression, logs and statistics apply to it unchanged.
//!
//! A CONNECT opens a tunnel as over HTTP/2: the server's 2xx leaves as the stream's
//! response and the tunnel's bytes cross as DATA both ways until either side ends.
//! Extended CONNECT (RFC 9220's WebSockets, WebTransport) is answered 501.
//!
//! Each worker has its own UDP socket in the address's SO_REUSEPORT group and its own
//! `quinn` endpoint on it: the kernel hashes a client's addresses to one socket, so a
//! connection lives on the worker that received its first packet (or the one that
//! packet's connection ID names, `transport::quic_route`), as a TCP connection does once
//! accepted. Once its handshake is done, a connection has a socket of its own,
//! connected to its client (`transport::quic_socket`), so that a process replacing this
//! one (a reload) does not receive its datagrams. A client that changes its address may be
//! hashed to another worker: the connection IDs name their worker, and the datagram is
//! handed over to it (`transport::quic_route`). Frames that do no work are limited
//! (`super::quic_floods`).
//!
//! Invariants:
//! - 0-RTT is refused (a replayed request could repeat an effect) unless the bind says
//!   `allow-0rtt`, and then only safe methods go before the handshake ends
//!   (`super::h3_early`).
//! - A client proves its address (a Retry) before the proxy spends a handshake on it when
//!   the bind says `quic-force-retry`, or while more than `tune.quic.retry-threshold`
//!   connections of the worker are half open.
//! - A connection counts under `maxconn` as a TCP one does, from its first packet to its
//!   close; what it may hold is bounded by its send window
//!   (`tune.quic.frontend.conn-tx-buffers.limit` buffers) and its streams' budget (four
//!   buffers, or the window if smaller).
//! - At a soft stop the endpoint takes no new connection and its listener leaves the
//!   address's group; each connection sends GOAWAY and closes once its streams are done
//!   and its client has closed (or 5 s after), so that nothing QUIC still had to send is
//!   thrown away.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_config::{Keyword, Scope};

use super::deadline::within;
use super::h3_early::{
    early_request, opening, takes_early_data, waits_for_handshake, HalfOpen, Handshake,
    Handshaking, StatefulTickets,
};
use super::quic_floods::{self, NoWork};
use super::session::ClientHead;
use super::streams::{soft_stop, Open, Streams};
use crate::conf::listen::{Bind, BindSpec};
use crate::conf::stream::Mode;
use crate::conf::{one_arg, time_arg, u32_in, GlobalConf};
use crate::h3_stream::{Budget, H3Stream};
use crate::runtime::{ClientConn, SessionInfo, Worker};
use crate::sample::StreamVars;
use crate::transport::quic_route::{Route, WorkerCids};
use crate::transport::quic_socket::QuicSocket;
use crate::transport::{Conn, Origin, TlsInfo};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "tune.quic.frontend.max-streams-bidi",
        scope: Scope::GLOBAL,
        help: "tune.quic.frontend.max-streams-bidi N: request streams an HTTP/3 client may have open at once (default 100)",
        parse: |g, a| u32_in(a, 1, u32::MAX).map(|n| g.quic.max_streams_bidi = n),
    },
    Keyword {
        name: "tune.quic.frontend.max-idle-timeout",
        scope: Scope::GLOBAL,
        help: "tune.quic.frontend.max-idle-timeout TIME: a QUIC connection silent this long is closed (default 30s)",
        parse: |g, a| time_arg(a).map(|d| g.quic.max_idle_timeout = d),
    },
    Keyword {
        name: "tune.quic.frontend.conn-tx-buffers.limit",
        scope: Scope::GLOBAL,
        help: "tune.quic.frontend.conn-tx-buffers.limit N: buffers of tune.bufsize a QUIC connection may have sent and not acknowledged (default 30)",
        parse: |g, a| u32_in(a, 1, u32::MAX).map(|n| g.quic.tx_buffers = n),
    },
    Keyword {
        name: "tune.quic.retry-threshold",
        scope: Scope::GLOBAL,
        help: "tune.quic.retry-threshold N: half-open QUIC connections (per worker) past which new clients must prove their address first (default 100)",
        parse: |g, a| u32_in(a, 0, u32::MAX).map(|n| g.quic.retry_threshold = n),
    },
    Keyword {
        name: "cluster-secret",
        scope: Scope::GLOBAL,
        help: "cluster-secret TEXT: the secret QUIC's stateless reset and Retry token keys derive from, shared by the nodes of a cluster",
        parse: |g, a| {
            let v = one_arg(a, "a secret")?;
            g.quic.cluster_secret = Some(v.to_string());
            Ok(())
        },
    },
];

/// What a `bind quic4@...` line must have, checked at load: HTTP, TLS with a certificate
/// (ALPN `h3` unless the line names its own), none of the options a byte stream has.
pub fn check_bind(b: &mut Bind, mode: Mode) -> Option<String> {
    if !matches!(b.spec, BindSpec::Quic(_)) {
        if b.tls.as_ref().is_some_and(|t| t.allow_0rtt) {
            return Some(
                "'allow-0rtt' is taken on QUIC listeners only (quic4@, quic6@): over TCP, sluice reads no TLS early data".into(),
            );
        }
        return b
            .quic_force_retry
            .then(|| "'quic-force-retry' needs a QUIC address (quic4@, quic6@)".into());
    }
    if mode != Mode::Http {
        return Some("a QUIC listener serves HTTP/3: its proxy needs 'mode http'".into());
    }
    if b.h2 || b.accept_proxy || b.defer_accept {
        return Some(
            "'proto', 'accept-proxy' and 'defer-accept' have no meaning on a QUIC listener".into(),
        );
    }
    match &mut b.tls {
        Some(t) if t.ssl => {
            if t.alpn.is_empty() {
                t.alpn = vec!["h3".into()];
            }
            None
        }
        _ => Some("a QUIC listener needs 'ssl' and a certificate ('crt')".into()),
    }
}

/// The QUIC settings of a bind, from its TLS acceptor and `tune.quic.*`.
fn server_config(w: &Worker, bind: &Bind) -> Result<quinn::ServerConfig, String> {
    let acceptor = bind
        .tls
        .as_ref()
        .and_then(|t| t.acceptor.as_ref())
        .ok_or("no TLS acceptor")?;
    let g = &w.config().global;
    let mut tls = (*acceptor.config).clone();
    // No 0-RTT unless the bind says `allow-0rtt`: early data could be replayed (QUIC wants
    // all or nothing here).
    let early = takes_early_data(w, bind);
    tls.max_early_data_size = if early { u32::MAX } else { 0 };
    if early {
        // rustls takes early data only on sessions resumed from its cache (each ticket
        // then resumes once, so a replayed first flight is refused even before the rules
        // below), not from stateless tickets.
        tls.ticketer = Arc::new(StatefulTickets);
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| format!("TLS settings QUIC cannot use: {e}"))?;
    let mut config = match keys(g) {
        Some((token, _)) => quinn::ServerConfig::new(Arc::new(crypto), Arc::new(token)),
        None => quinn::ServerConfig::with_crypto(Arc::new(crypto)),
    };
    let mut transport = quinn::TransportConfig::default();
    let q = &g.quic;
    let window = window(w.config());
    transport
        .max_concurrent_bidi_streams(q.max_streams_bidi.into())
        // The client's control stream and QPACK's two, and room for a few it may add.
        .max_concurrent_uni_streams(8u32.into())
        .max_idle_timeout(quinn::IdleTimeout::try_from(q.max_idle_timeout).ok())
        .send_window(window)
        .stream_receive_window(quinn::VarInt::from_u32(g.bufsize as u32 * 4))
        .receive_window(quinn::VarInt::from_u64(window).unwrap_or(quinn::VarInt::MAX));
    config.transport_config(Arc::new(transport));
    // What an unaccepted connection may buffer (its early packets).
    config.incoming_buffer_size(g.bufsize as u64);
    config.incoming_buffer_size_total(g.bufsize as u64 * 64);
    Ok(config)
}

/// What a connection may have sent and not acknowledged (QUIC's send window):
/// `tune.quic.frontend.conn-tx-buffers.limit` buffers.
fn window(config: &crate::conf::Config) -> u64 {
    let g = &config.global;
    (g.bufsize as u64).saturating_mul(g.quic.tx_buffers.into())
}

/// Buffers a connection's streams may have handed QUIC and not had taken yet, together.
/// Few: quinn wakes every stream blocked on a full send window whenever a little of it
/// frees, so a hundred streams blocked there cost a hundred wake-ups per acknowledgement
/// (2.4 times the CPU per 76 kB response, bench/RESULTS.md, session 33); the streams
/// beyond these wait in the budget, woken one at a time. Four keep the window fed.
const QUEUED_BUFFERS: usize = 4;

/// The bytes of a connection's [`Budget`]: [`QUEUED_BUFFERS`], or the window if smaller.
fn queued_limit(config: &crate::conf::Config) -> usize {
    let buffers = QUEUED_BUFFERS.saturating_mul(config.global.bufsize);
    buffers.min(window(config) as usize)
}

/// The Retry token key and the stateless reset key, derived from `cluster-secret`
/// (`None`: each endpoint draws its own at random).
fn keys(g: &GlobalConf) -> Option<(ring::hkdf::Prk, ring::hmac::Key)> {
    let secret = g.quic.cluster_secret.as_ref()?;
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"sluice quic");
    let prk = salt.extract(secret.as_bytes());
    let token = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"sluice quic retry")
        .extract(secret.as_bytes());
    let mut reset = [0u8; 32];
    prk.expand(&[b"stateless reset"], ring::hkdf::HKDF_SHA256)
        .ok()?
        .fill(&mut reset)
        .ok()?;
    Some((token, ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &reset)))
}

/// Serves the QUIC listener `(fe, listener)` on this worker's UDP `socket` until the
/// worker stops; then lets the connections it has finish.
pub async fn serve_endpoint(
    w: Rc<Worker>,
    (fe, listener): (usize, usize),
    socket: socket2::Socket,
) {
    let bind = &w.config().frontends[fe].listen.binds[listener];
    let server = match server_config(&w, bind) {
        Ok(c) => c,
        Err(e) => {
            say!("sluice: bind {}: {e}", bind.spec);
            return;
        }
    };
    let mut endpoint_config = match keys(&w.config().global) {
        Some((_, reset)) => quinn::EndpointConfig::new(Arc::new(reset)),
        None => quinn::EndpointConfig::default(),
    };
    let tid = w.tid;
    endpoint_config.cid_generator(move || Box::new(WorkerCids::new(tid)));
    let routes = w
        .process
        .quic_routes
        .get((fe, listener), w.process.threads.len());
    let route = Route::new(routes, tid, w.ctx().counters.quic.clone());
    let opened = QuicSocket::new(socket.into(), route).and_then(|s| {
        let runtime = Arc::new(quinn::TokioRuntime);
        let e = quinn::Endpoint::new_with_abstract_socket(
            endpoint_config,
            Some(server),
            s.clone(),
            runtime,
        )?;
        Ok((s, e))
    });
    let (sockets, endpoint) = match opened {
        Ok(both) => both,
        Err(e) => {
            say!("sluice: bind {}: {e}", bind.spec);
            return;
        }
    };
    let force_retry = bind.quic_force_retry;
    let early_waits = waits_for_handshake(w.config(), fe);
    let half_open = Rc::new(Cell::new(0u32));
    loop {
        let stop = w.soft_stop.notified();
        if w.stopping() {
            break;
        }
        let incoming = tokio::select! {
            i = endpoint.accept() => i,
            () = stop => break,
        };
        let Some(incoming) = incoming else { break };
        let threshold = w.config().global.quic.retry_threshold;
        if !incoming.remote_address_validated() && (force_retry || half_open.get() >= threshold) {
            if incoming.retry().is_ok() {
                w.ctx().counters.quic_retries.bump();
            }
            continue;
        }
        // Counted now, not when its task runs: a burst of new clients must see each other.
        let held = (
            HalfOpen::new(half_open.clone()),
            sockets.clone(),
            early_waits,
        );
        let task = serve_connection(w.clone(), incoming, (fe, listener), held);
        tokio::task::spawn_local(crate::clock::Ticking::new(task));
    }
    // No new connection; those open finish (each sends GOAWAY at the soft stop), the
    // endpoint's driver running until the last one closes. The listener leaves the
    // address's group, so that a process replacing this one gets every new client while
    // this one's connections keep their own sockets.
    endpoint.set_server_config(None);
    if let Err(e) = sockets.retire() {
        say!("sluice: bind {}: cannot retire the QUIC listener ({e}); new clients may reach this stopping process", bind.spec);
    }
}

/// What every stream of one connection shares.
struct Shared {
    w: Rc<Worker>,
    fe: usize,
    origin: Origin,
    info: Arc<SessionInfo>,
    /// What the streams may have handed QUIC and not had taken yet, together.
    budget: Rc<Budget>,
    /// The QUIC connection (its streams wait on its close).
    conn: quinn::Connection,
    /// Streams being served (or still sending their ends), and started so far.
    streams: Rc<Streams>,
    /// Whether the TLS handshake is done (a request before is early data).
    handshake: Rc<Handshake>,
    /// The frontend has `http-request wait-for-handshake`: no early request is served
    /// before the handshake ends, whatever its method.
    early_waits: bool,
    /// The connection's `sess.` variables and the entries it tracks, which every stream
    /// shares (HAProxy's session is the connection, as over HTTP/1.1 and HTTP/2).
    sess_vars: Rc<std::cell::RefCell<crate::conf::sample::Vars>>,
    sess_trackers: Rc<std::cell::RefCell<crate::sample::Slots>>,
}

/// Serves one QUIC connection: its handshake, then its request streams.
async fn serve_connection(
    w: Rc<Worker>,
    incoming: quinn::Incoming,
    (fe, listener): (usize, usize),
    (half_open, sockets, early_waits): (HalfOpen, Arc<QuicSocket>, bool),
) {
    let peer = incoming.remote_address();
    w.ctx()
        .starting
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let _slot = w.process.admission.admit(fe, listener, true).await;
    let counted = ClientConn::open(&w.process, w.tid, (fe, listener), peer);
    let st = &w.config().frontends[fe].stream;
    let limit = st.timeout_http_request.or(st.timeout_client);
    let Ok(connecting) = incoming.accept() else {
        return;
    };
    let fe_state = &w.state().frontends[fe];
    let early = takes_early_data(&w, &w.config().frontends[fe].listen.binds[listener]);
    let Some((conn, handshake_end)) = opening(connecting, early, limit).await else {
        fe_state.counters.at(w.tid).tls_failed.bump();
        return;
    };
    // The connection's own socket from now on (see `transport::quic_socket`); without one
    // (out of descriptors), its datagrams keep coming through the listener.
    let _own = sockets.own(peer, conn.local_ip()).ok();
    let mut handshake = Handshaking::new(
        (w.clone(), fe),
        conn.clone(),
        half_open,
        (handshake_end, limit),
    );
    let local = conn
        .local_ip()
        .map_or(peer, |ip| SocketAddr::new(ip, local_port(&w, fe, listener)));
    let origin = Origin {
        peer,
        local,
        tls: Some(Arc::new(tls_info(&conn))),
        unix: false,
    };
    let mut builder = h3::server::builder();
    builder.max_field_section_size(w.config().global.head_room() as u64);
    let built = within(
        limit,
        builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone())),
    );
    let Ok(Ok(mut h3conn)) = built.await else {
        return;
    };
    let shared = Rc::new(Shared {
        w: w.clone(),
        fe,
        origin,
        info: counted.info.clone(),
        budget: Budget::new(queued_limit(w.config()), w.ctx().counters.h3_queued.clone()),
        conn: conn.clone(),
        streams: Rc::default(),
        handshake: handshake.state.clone(),
        early_waits,
        sess_vars: Rc::default(),
        sess_trackers: Rc::default(),
    });
    let idle_limit = st.timeout_keep_alive.or(st.timeout_client);
    let mut floods = (NoWork::new(), tokio::time::interval(quic_floods::SAMPLE));
    // The idle timer lives across the loop's turns (the flood sample ends one each second)
    // and starts again only when a stream comes.
    let idle = shared.streams.idle(limit, idle_limit);
    tokio::pin!(idle);
    // Whether the last streams' data may still be on its way when they are done.
    let linger = loop {
        tokio::select! {
            next = h3conn.accept() => match next {
                Ok(Some(resolver)) => {
                    // A request is early data only if the handshake has not ended by now
                    // (quinn may have seen its end before this task did).
                    if !handshake.check_now() {
                        return;
                    }
                    let (open, earlier) = shared.streams.open();
                    let early = !shared.handshake.is_done();
                    let task = serve_stream(shared.clone(), resolver, (earlier, early), open);
                    tokio::task::spawn_local(crate::clock::Ticking::new(task));
                    idle.set(shared.streams.idle(limit, idle_limit));
                }
                // The client said GOAWAY (its requests finish), or the connection failed.
                Ok(None) => break true,
                Err(_) => break false,
            },
            () = soft_stop(&w) => break true,
            () = &mut idle => break false,
            ended = handshake.ended(), if handshake.pending() => {
                if !handshake.settle(ended) {
                    return;
                }
            }
            _ = floods.1.tick() => if floods.0.flooded(&conn.stats()) {
                w.ctx().counters.quic_floods.bump();
                conn.close(H3_EXCESSIVE_LOAD.into(), b"frames that do no work");
                return;
            },
            () = counted.info.kill.pulled() => {
                conn.close(h3::error::Code::H3_NO_ERROR.value().try_into().unwrap_or_default(), b"");
                return;
            }
        }
    };
    // GOAWAY, then the streams under way finish before the connection closes. (Its id is
    // the first stream not served: the one after the last accepted, hence the 1.)
    let _ = within(Some(Duration::from_secs(1)), h3conn.shutdown(1)).await;
    // (A handshake still under way may end meanwhile: requests waiting for it go on.)
    loop {
        tokio::select! {
            () = shared.streams.done() => break,
            () = counted.info.kill.pulled() => break,
            ended = handshake.ended(), if handshake.pending() => {
                if !handshake.settle(ended) {
                    return;
                }
            }
        }
    }
    handshake.finish();
    // A stream is done once QUIC has taken its last bytes, not once the client has them:
    // closing now would throw away what is still to be sent. The client closes when it
    // has its answers (GOAWAY told it to go); it is given a little time to.
    if linger {
        let _ = within(Some(GOAWAY_LINGER), conn.closed()).await;
    }
    drop(h3conn);
}

/// The application error a connection cut for a flood ends with (RFC 9114, 8.1).
const H3_EXCESSIVE_LOAD: u32 = 0x107;

/// How long a connection that sent GOAWAY with answers still on their way waits for its
/// client to close it.
const GOAWAY_LINGER: Duration = Duration::from_secs(5);

/// The listener's port, as the client reached it.
fn local_port(w: &Worker, fe: usize, listener: usize) -> u16 {
    match w.config().frontends[fe].listen.binds[listener].spec {
        BindSpec::Quic(a) => a.port(),
        _ => 0,
    }
}

/// What TLS fetches and logs see of a QUIC connection's handshake.
fn tls_info(conn: &quinn::Connection) -> TlsInfo {
    let data = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok());
    TlsInfo {
        alpn: data.as_ref().and_then(|d| d.protocol.clone()),
        sni: data.as_ref().and_then(|d| d.server_name.clone()),
        // QUIC is TLS 1.3 only; `quinn` does not say which suite was chosen.
        version: "TLSv1.3",
        cipher: "",
        client_cert: None,
        resumed: false,
        hello: None,
        keys: None,
    }
}

/// Serves one request stream as an HTTP/1.1 session of its own, reading and writing the
/// stream itself (`crate::h3_stream`).
async fn serve_stream(
    shared: Rc<Shared>,
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    (earlier, early): (u32, bool),
    open: Open,
) {
    let limit = {
        let st = &shared.w.config().frontends[shared.fe].stream;
        st.timeout_http_request.or(st.timeout_client)
    };
    let Ok(Ok((req, stream))) = within(limit, resolver.resolve_request()).await else {
        return;
    };
    let (mut parts, ()) = req.into_parts();
    let early_rules = (&*shared.handshake, shared.early_waits);
    let served_early = match early {
        true => match early_request(&mut parts, early_rules, limit).await {
            Some(served_early) => served_early,
            None => return,
        },
        false => false,
    };
    let (send, mut recv) = stream.split();
    let (budget, conn) = (shared.budget.clone(), shared.conn.clone());
    let connect = parts.method == http::Method::CONNECT;
    if connect && parts.extensions.get::<h3::ext::Protocol>().is_some() {
        // Extended CONNECT (WebTransport, CONNECT-UDP) is not served; the `h3` crate
        // knows no WebSocket protocol (RFC 9220).
        let halves = (send, recv);
        let end = H3Stream::answering(halves, (Vec::new(), true), budget, conn, Box::new(open));
        let res = http::Response::builder()
            .status(501)
            .body(())
            .unwrap_or_default();
        let _ = end.send_response(res, sluice_http::Framing::None);
        return;
    }
    // Whether the request has a body shows only by the stream's end: wait for its first
    // data or its end (a length says there is one). A CONNECT's stream carries its
    // tunnel's bytes once the server has opened it, and no body before.
    let (first, ended) = match parts.headers.get(http::header::CONTENT_LENGTH) {
        _ if connect => (Vec::new(), false),
        Some(v) if v.as_bytes() != b"0" => (Vec::new(), false),
        _ => match within(limit, H3Stream::first_data(&mut recv)).await {
            Ok(Some(got)) => got,
            // Reset by the client, or nothing within the request's time.
            Ok(None) | Err(()) => return,
        },
    };
    let mut end = H3Stream::answering((send, recv), (first, ended), budget, conn, Box::new(open));
    if connect {
        end.tunnel();
    }
    if served_early {
        end.served_early();
    }
    sluice_http::join_cookies(&mut parts.headers);
    let head = Some(ClientHead::H2 {
        parts: Box::new(parts),
        ended: ended || connect,
    });
    let _ = super::h1::serve_http(
        &shared.w,
        Conn::h3_stream(end, shared.origin.clone()),
        shared.origin.peer,
        shared.fe,
        shared.info.clone(),
        StreamVars::in_session(shared.sess_vars.clone(), shared.sess_trackers.clone(), None),
        super::h1::Start {
            earlier,
            head,
            ..Default::default()
        },
    )
    .await;
}
