//! Getting a server connection for a request, for HTTP and TCP alike: the server's queue
//! (`maxconn`), a private, pooled or new connection, and the one connection-retry policy
//! (`retries` spaced by HAProxy's turn-around delay, the last retry elsewhere with
//! `option redispatch`).
//!
//! Invariants:
//! - A retry only ever follows a failed connection attempt: nothing reached a server, so it
//!   is safe for any request.
//! - The server's used-connection count follows the connection: a [`ServerConn`] gives it
//!   back when dropped unless it went back to the pool, which then owns the count.
//! - The request holds its server's queue slot and in-flight count ([`Occupancy`]) until it
//!   ends, and moves them when it is redispatched.

use std::io;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::balance::{self, PickKey};
use crate::check::{self, Seen};
use crate::clock;
use crate::pool::h2::Pick;
use crate::pool::{Got, Want};
use crate::proxy_proto::{self, ClientFacts, TlsFacts};
use crate::queue::{self, InFlight, QueueError, ServerSlot};
use crate::runtime::Worker;
use crate::transport::{Conn, Socket};

/// A server connection attached to the current request.
pub(crate) struct ServerConn {
    pub conn: Conn,
    pub backend: usize,
    pub server: usize,
    /// Requests already completed on this connection.
    pub served: u32,
    /// It came from a pool (or is the session's private one) rather than a fresh connect.
    pub reused: bool,
    /// The server's address generation when the connection was opened or taken.
    pub addr_gen: u64,
    /// An authentication is bound to it (NTLM, Negotiate): it stays its client
    /// connection's own for good.
    pub owned: bool,
    used: Used,
}

impl ServerConn {
    /// Hands the connection to the pool, which accounts for it from here on (kept or not);
    /// a stream is not pooled (its HTTP/2 link is what lasts) and ends here.
    pub fn into_pooled(mut self) -> Option<(Socket, u32)> {
        self.used.armed = false;
        let served = self.served;
        self.conn.into_socket().ok().map(|s| (s, served))
    }
}

/// Gives the server's used-connection count back on drop while armed.
struct Used {
    w: Rc<Worker>,
    backend: usize,
    server: usize,
    armed: bool,
}

impl Drop for Used {
    fn drop(&mut self) {
        if self.armed {
            self.w.state().backends[self.backend].servers[self.server]
                .idle
                .close_used();
        }
    }
}

/// Why no server connection could be had. The cause is kept: the status and the log's
/// termination code derive from it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("no server slot: {0}")]
    Queue(#[from] QueueError),
    #[error("cannot connect: {0}")]
    Connect(io::Error),
    #[error("the client left while the request was queued")]
    ClientGone,
    /// `option abortonclose`: the client left while the connection was being retried.
    #[error("the client left while the server connection was being attempted")]
    ClientGoneConnecting,
}

impl ConnectError {
    /// HAProxy's two-letter termination state.
    pub fn term(&self) -> [u8; 2] {
        match self {
            ConnectError::Queue(_) => *b"sQ",
            ConnectError::Connect(e) if e.kind() == io::ErrorKind::TimedOut => *b"sC",
            ConnectError::Connect(_) => *b"SC",
            ConnectError::ClientGone => *b"CQ",
            ConnectError::ClientGoneConnecting => *b"CC",
        }
    }
}

/// What the access log reports about getting the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempts {
    /// The server finally used (it changes on redispatch).
    pub server: usize,
    pub retries: u32,
    /// Milliseconds in the queue, -1 when the request never got that far.
    pub t_queue: i64,
    /// Milliseconds to connect (0 for a reused connection), -1 likewise.
    pub t_connect: i64,
}

impl Attempts {
    pub fn new(server: usize) -> Attempts {
        Attempts {
            server,
            retries: 0,
            t_queue: -1,
            t_connect: -1,
        }
    }
}

/// What the request holds on its server while it runs.
pub(crate) struct Occupancy<'a> {
    _in_flight: InFlight<'a>,
    _slot: ServerSlot,
}

/// How the first attempt may reuse a connection (HTTP); `None` for a fresh one (TCP).
pub(crate) struct Reuse<'s> {
    /// With `http-reuse never`, the connection the client connection owns.
    pub private: &'s mut Option<ServerConn>,
    pub first_request: bool,
}

/// The client a server connection is opened for, as a PROXY header to the server tells of
/// it (read only when the server has `send-proxy`).
pub(crate) struct Client<'a> {
    pub conn: &'a Conn,
    pub peer: std::net::SocketAddr,
    pub unique_id: Option<std::rc::Rc<str>>,
}

impl Client<'_> {
    fn facts(&self) -> ClientFacts {
        ClientFacts {
            src: Some(self.peer),
            dst: self.conn.local_addr().ok(),
            tls: self.conn.tls().map(|t| TlsFacts {
                sni: t.sni,
                version: t.version,
                cipher: t.cipher,
                subject: t.client_cert.map(|c| c.0),
            }),
            unique_id: self.unique_id.as_deref().map(str::to_string),
        }
    }
}

/// The pause before a connection is retried on the server that just refused it.
const TURN_AROUND: std::time::Duration = std::time::Duration::from_secs(1);

/// Gets a connection to `backend`'s server `server` (or, after failures and with
/// `option redispatch`, another one). With `abort_on` (`option abortonclose`), a client
/// that closes while queued ends the wait.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn establish<'w>(
    w: &'w Rc<Worker>,
    backend: usize,
    server: usize,
    key: &PickKey<'_>,
    mut reuse: Option<Reuse<'_>>,
    abort_on: Option<&Conn>,
    client: &Client<'_>,
    at: &mut Attempts,
) -> Result<(ServerConn, Occupancy<'w>), ConnectError> {
    let be = &w.config().backends[backend];
    let st = &w.state().backends[backend];
    let mut server = server;
    at.server = server;
    let queued_at = clock::now();
    let mut occupancy = occupy(w, backend, server, abort_on).await;
    if let Err(ConnectError::Queue(QueueError::ServerGone)) = occupancy {
        // Its server went away while it waited: the request goes to another one, as
        // HAProxy redistributes a down server's queue.
        if let Some(other) = balance::pick(be, st, key, &w.lb) {
            st.servers[server].counters.at(w.tid).redispatches.bump();
            server = other;
            at.server = server;
            occupancy = occupy(w, backend, server, abort_on).await;
        }
    }
    at.t_queue = ms(clock::since(queued_at));
    let mut occ = occupancy?;
    let connect_at = clock::now();
    let mut attempt = 0;
    loop {
        let got = match reuse.take() {
            Some(r) => connect_reusing(w, backend, server, r, client).await,
            None => connect_new(w, backend, server, client).await,
        };
        match got {
            Ok(c) => {
                at.t_connect = if c.reused {
                    0
                } else {
                    ms(clock::since(connect_at))
                };
                return Ok((c, occ));
            }
            // (`retry-on` without `conn-failure`: a failed connection is not retried.)
            Err(e) if attempt >= be.retries || !be.retry_on.conn_failure => {
                return Err(ConnectError::Connect(e))
            }
            Err(_) => {}
        }
        attempt += 1;
        at.retries += 1;
        let counters = st.servers[server].counters.at(w.tid);
        counters.retries.bump();
        let failed = server;
        if be.redispatch && attempt == be.retries {
            if let Some(other) = balance::pick_other(be, st, key, &w.lb, server) {
                counters.redispatches.bump();
                server = other;
                at.server = server;
                drop(occ);
                occupancy = occupy(w, backend, server, abort_on).await;
                occ = occupancy?;
            }
        }
        if server == failed {
            // HAProxy's turn-around: the same server is tried again only after
            // min(1s, timeout connect), rather than hammered at once.
            let turn = be
                .timeout_connect
                .map_or(TURN_AROUND, |t| t.min(TURN_AROUND));
            match abort_on {
                // `option abortonclose`: a client that leaves meanwhile ends it (`CC`).
                Some(client) => tokio::select! {
                    () = tokio::time::sleep(turn) => {}
                    () = client.closed() => return Err(ConnectError::ClientGoneConnecting),
                },
                None => tokio::time::sleep(turn).await,
            }
        }
    }
}

/// Takes a queue slot and the in-flight count on a server.
async fn occupy<'w>(
    w: &'w Rc<Worker>,
    backend: usize,
    server: usize,
    abort_on: Option<&Conn>,
) -> Result<Occupancy<'w>, ConnectError> {
    let be = &w.config().backends[backend];
    let bst = &w.state().backends[backend];
    let st = &bst.servers[server];
    let in_flight = InFlight::new(bst, st);
    let turn = queue::wait_turn(&be.servers[server], st, be.timeout_queue);
    let slot = match abort_on {
        Some(client) => tokio::select! {
            t = turn => t?,
            _ = client.closed() => return Err(ConnectError::ClientGone),
        },
        None => turn.await?,
    };
    st.counters.at(w.tid).requests.bump();
    Ok(Occupancy {
        _in_flight: in_flight,
        _slot: slot,
    })
}

/// The session's private connection, an idle one from the pools, or a new one.
async fn connect_reusing(
    w: &Rc<Worker>,
    backend: usize,
    server: usize,
    reuse: Reuse<'_>,
    client: &Client<'_>,
) -> io::Result<ServerConn> {
    if let Some(p) = reuse.private.take() {
        if p.backend == backend && p.server == server {
            return Ok(ServerConn { reused: true, ..p });
        }
    }
    let be = &w.config().backends[backend];
    if be.servers[server].private_conns() {
        // Its PROXY header or its port speaks for one client: never shared.
        return connect_new(w, backend, server, client).await;
    }
    let st = &w.state().backends[backend].servers[server];
    let addr_gen = st.addr_gen.load(Ordering::Acquire);
    loop {
        match w.h2_links.pick(backend, server, addr_gen) {
            Pick::Stream(link) => {
                // A stream on the worker's HTTP/2 connection to the server.
                st.counters.at(w.tid).reuse.bump();
                return Ok(ServerConn {
                    conn: super::h2_server::stream_on(&link),
                    backend,
                    server,
                    served: 0,
                    // Not a connection that may have gone stale while idle: a stream that
                    // fails failed at the server, and is not replayed elsewhere.
                    reused: false,
                    addr_gen,
                    owned: false,
                    used: used(w, backend, server, false),
                });
            }
            Pick::Wait(opened) => opened.notified().await,
            Pick::Connect => break,
        }
    }
    let pressure = w.config().global.pool.pressure();
    let want = Want::for_request(be.reuse, reuse.first_request);
    let mut dead = Vec::new();
    let got = st.idle.get(w.tid, want, &pressure, clock::now(), &mut dead);
    drop(dead);
    let idle = match got {
        Got::Local(c) => Some(Ok(c)),
        Got::Stolen(c, _) => {
            w.ctx().counters.fd_takeover.bump();
            // Move the socket from the sibling's event loop into ours.
            Some(
                c.conn
                    .adopt()
                    .map(|conn| crate::pool::IdleConn { conn, ..c }),
            )
        }
        Got::None => None,
    };
    match idle {
        Some(Ok(c)) => {
            st.counters.at(w.tid).reuse.bump();
            Ok(ServerConn {
                conn: Conn::from(c.conn),
                backend,
                server,
                served: c.served,
                reused: true,
                addr_gen: st.addr_gen.load(Ordering::Acquire),
                owned: false,
                used: used(w, backend, server, true),
            })
        }
        Some(Err(_)) => {
            st.idle.close_used();
            connect_new(w, backend, server, client).await
        }
        None => connect_new(w, backend, server, client).await,
    }
}

/// Opens a new connection within `timeout connect`. Boxed: its state (1.8 kB) would
/// otherwise size every transaction's future, and most requests reuse a connection.
async fn connect_new(
    w: &Rc<Worker>,
    backend: usize,
    server: usize,
    client: &Client<'_>,
) -> io::Result<ServerConn> {
    Box::pin(open_new(w, backend, server, client)).await
}

async fn open_new(
    w: &Rc<Worker>,
    backend: usize,
    server: usize,
    client: &Client<'_>,
) -> io::Result<ServerConn> {
    let be = &w.config().backends[backend];
    let st = &w.state().backends[backend].servers[server];
    if w.config().global.pool.pressure().high() {
        // Descriptors are scarce: an idle connection makes room for the new one.
        drop(st.idle.evict_one(w.tid));
    }
    let addr_gen = st.addr_gen.load(Ordering::Acquire);
    let mut addr = st.addr();
    let srv = &be.servers[server];
    if srv.port != crate::conf::backend::PortMap::Fixed {
        // No port of its own: the one the client connected to (moved by an offset).
        let client_port = client.conn.local_addr().map_or(0, |a| a.port());
        addr.set_port(srv.port.port(addr.port(), client_port));
    }
    // Requests for a `proto h2` server wait for this connection rather than open their own.
    let _opening = be.servers[server]
        .h2
        .then(|| w.h2_links.opening(backend, server))
        .flatten();
    let connect = async {
        let mut conn = match &srv.unix {
            Some(u) => Socket::connect_unix(u)?,
            None => Socket::connect(addr, w.config().global.server_bufs, srv.source).await?,
        };
        crate::keepalive::apply(&conn, &be.stream.srv_ka);
        if be.stream.nolinger {
            conn.reset_on_close();
        }
        if let Some(pp) = &be.servers[server].send_proxy {
            // Before anything else, TLS included.
            conn.write_all(&proxy_proto::header_for(pp, &client.facts()))
                .await?;
        }
        let tls = be.servers[server]
            .tls
            .as_ref()
            .filter(|_| !st.plain.load(Ordering::Acquire));
        match tls {
            // `ssl`: the handshake is part of connecting (a refused certificate is a
            // connection failure, as in HAProxy).
            Some(c) => {
                let conn = conn
                    .into_tls_client(c.config.clone(), c.name.clone())
                    .await?;
                if conn.tls_resumed() == Some(false) {
                    w.ctx()
                        .counters
                        .tls_backend_full_rate
                        .hit(crate::runtime::clock_ms());
                }
                Ok::<_, io::Error>(conn)
            }
            None => Ok(conn),
        }
    };
    let connect = async {
        let conn = connect.await?;
        if super::h2_server::speaks_h2(w, backend, server, &conn) {
            // The HTTP/2 handshake is part of connecting; the request gets the first stream.
            return super::h2_server::start(w, backend, server, conn, addr_gen).await;
        }
        Ok(Conn::from(conn))
    };
    let attempt = match be.timeout_connect {
        Some(t) => tokio::time::timeout(t, connect)
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into())),
        None => connect.await,
    };
    let counters = st.counters.at(w.tid);
    let seen = if attempt.is_ok() {
        Seen::Connected
    } else {
        Seen::ConnectFailed
    };
    check::observe(&w.process, backend, server, seen);
    match attempt {
        Ok(conn) => {
            counters.connect.bump();
            // A stream's connection is its HTTP/2 link, counted until the link ends.
            st.idle.use_one();
            let armed = !conn.is_stream();
            Ok(ServerConn {
                conn,
                backend,
                server,
                served: 0,
                reused: false,
                addr_gen,
                owned: false,
                used: used(w, backend, server, armed),
            })
        }
        Err(e) => {
            counters.connect_errors.bump();
            Err(e)
        }
    }
}

fn used(w: &Rc<Worker>, backend: usize, server: usize, armed: bool) -> Used {
    Used {
        w: w.clone(),
        backend,
        server,
        armed,
    }
}

pub(crate) fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}
