//! `mode tcp`: a client connection is relayed as bytes to a server chosen by the backend's
//! balancing, with connection retries (and `option redispatch`), `timeout connect`, and the
//! client/server inactivity timeouts; half-closes are passed on.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

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
    let Some(mut conn) = connect(be, &mut server, &key).await else {
        return;
    };
    let srv = &be.servers[server];
    srv.cur_conns.fetch_add(1, Ordering::Relaxed);
    Server::add(&srv.counters.requests);
    let idle = fe.stream.timeout_client.max(be.timeout_server);
    let (mut cbuf, mut sbuf) = (Buf::default(), Buf::default());
    crate::tunnel::relay(&mut client, &mut conn, &mut cbuf, &mut sbuf, &w.bufs, idle).await;
    cbuf.clear(&w.bufs);
    sbuf.clear(&w.bufs);
    srv.cur_conns.fetch_sub(1, Ordering::Relaxed);
}

/// Connects with `retries`, the last one on another server with `option redispatch`.
async fn connect(be: &Backend, server: &mut usize, key: &PickKey<'_>) -> Option<TcpStream> {
    for attempt in 0..=be.retries {
        if attempt > 0 {
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
