//! `mode tcp`: a client connection is relayed as bytes to a server chosen by the backend's
//! balancing, with connection retries (and `option redispatch`), `timeout connect`, and the
//! client/server inactivity timeouts; half-closes are passed on.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::backend::{Backend, Server};
use crate::balance::PickKey;
use crate::buffer::Buf;
use crate::config::Frontend;
use crate::threads::Worker;

pub(crate) async fn serve(w: &Rc<Worker>, mut client: TcpStream, peer: SocketAddr, fe: &Frontend) {
    let Some(backend) = fe.rules.default_backend else {
        return;
    };
    let started = Instant::now();
    let date = std::time::SystemTime::now();
    let config = w.config();
    let be = &config.backends[backend];
    let key = PickKey {
        client: peer.ip(),
        path: b"",
        header: None,
    };
    let Some(mut server) = be.balancer.pick(&be.servers, &key) else {
        return;
    };
    let mut retries = 0;
    let Some(mut conn) = connect(be, &mut server, &key, &mut retries).await else {
        log(
            w, fe, be, server, peer, date, started, -1, 0, *b"SC", retries,
        );
        return;
    };
    let t_connect = started.elapsed().as_millis() as i64;
    let srv = &be.servers[server];
    srv.cur_conns.fetch_add(1, Ordering::Relaxed);
    Server::add(&srv.counters.requests);
    let idle = fe.stream.timeout_client.max(be.timeout_server);
    let (mut cbuf, mut sbuf) = (Buf::default(), Buf::default());
    let limits = crate::tunnel::Limits {
        idle,
        a_fin: fe.stream.timeout_client_fin,
        b_fin: be.timeout_server_fin,
    };
    let bytes = crate::tunnel::relay(
        &mut client,
        &mut conn,
        &mut cbuf,
        &mut sbuf,
        &w.bufs,
        limits,
    )
    .await;
    cbuf.clear(&w.bufs);
    sbuf.clear(&w.bufs);
    log(
        w, fe, be, server, peer, date, started, t_connect, bytes, *b"--", retries,
    );
    srv.cur_conns.fetch_sub(1, Ordering::Relaxed);
}

/// The tcplog line of a connection (when the frontend logs).
#[allow(clippy::too_many_arguments)]
fn log(
    w: &Worker,
    fe: &Frontend,
    be: &Backend,
    server: usize,
    peer: SocketAddr,
    date: std::time::SystemTime,
    started: Instant,
    t_connect: i64,
    bytes: u64,
    term: [u8; 2],
    retries: u32,
) {
    let Some(loggers) = fe.loggers.get().filter(|l| !l.is_empty()) else {
        return;
    };
    let srv = &be.servers[server];
    let rec = crate::log::Record {
        client: peer,
        date,
        frontend: &fe.name,
        backend: &be.name,
        server: &srv.name,
        t_request: -1,
        t_queue: 0,
        t_connect,
        t_response: -1,
        t_active: started.elapsed().as_millis() as i64,
        status: -1,
        bytes,
        term,
        act_conn: w.active_total(),
        fe_conn: fe.cur_conns.load(Ordering::Relaxed),
        be_conn: be
            .servers
            .iter()
            .map(|s| s.cur_conns.load(Ordering::Relaxed))
            .sum(),
        srv_conn: srv.cur_conns.load(Ordering::Relaxed),
        retries,
        srv_queue: 0,
        be_queue: 0,
        method: String::new(),
        uri: String::new(),
        version: String::new(),
    };
    crate::log::emit(
        loggers,
        fe.log.format.as_ref().unwrap_or(&crate::log::Format::Tcp),
        &rec,
    );
}

/// Connects with `retries`, the last one on another server with `option redispatch`.
async fn connect(
    be: &Backend,
    server: &mut usize,
    key: &PickKey<'_>,
    retries: &mut u32,
) -> Option<TcpStream> {
    for attempt in 0..=be.retries {
        if attempt > 0 {
            *retries += 1;
            Server::add(&be.servers[*server].counters.retries);
            if be.redispatch && attempt == be.retries {
                if let Some(other) = (0..be.servers.len() * 2)
                    .filter_map(|_| be.balancer.pick(&be.servers, key))
                    .find(|s| s != server)
                {
                    Server::add(&be.servers[*server].counters.redispatches);
                    *server = other;
                }
            }
        }
        let srv = &be.servers[*server];
        let attempt = match be.timeout_connect {
            Some(t) => tokio::time::timeout(t, TcpStream::connect(srv.addr))
                .await
                .ok(),
            None => Some(TcpStream::connect(srv.addr).await),
        };
        match attempt {
            Some(Ok(s)) => {
                let _ = s.set_nodelay(true);
                Server::add(&srv.counters.connect);
                return Some(s);
            }
            _ => Server::add(&srv.counters.connect_errors),
        }
    }
    None
}
