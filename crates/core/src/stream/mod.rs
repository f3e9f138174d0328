//! The data path: one client connection from accept to close.
//!
//! - [`session`]: an HTTP/1.1 client connection, its buffers and its keep-alive loop.
//! - [`txn`]: one request/response exchange on it: rules, routing, server choice, sending
//!   the request, reading the response head, logging.
//! - `connect`: the server connection for a request (queue, pool, retries, redispatch),
//!   shared by HTTP and TCP.
//! - `relay`: the response body (plain or compressed) and the connection back to the pool.
//! - `heads`: the head writers.
//! - `tcp`, `tunnel`: `mode tcp` and upgraded connections, relayed as bytes.
//! - `keywords`: the data path's configuration keywords.
//!
//! The states are documented in `docs/internals/stream-lifecycle.md`.

mod connect;
mod heads;
pub mod keywords;
mod relay;
pub(crate) mod session;
mod tcp;
mod tunnel;
pub(crate) mod txn;

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use crate::conf::stream::Mode;
use crate::runtime::{ClientConn, Slot, Worker};
use crate::transport::Conn;

/// Serves one accepted client connection of frontend `fe` until it closes. `slot` is its
/// place under `maxconn`; both it and the connection counts are given back however the
/// stream ends.
pub async fn serve(w: Rc<Worker>, client: Conn, peer: SocketAddr, fe: usize, slot: Slot) {
    let _counted = ClientConn::open(&w.process, w.tid, fe);
    let _slot = slot;
    match w.config().frontends[fe].stream.mode {
        Mode::Tcp => tcp::serve(&w, client, peer, fe).await,
        Mode::Http => session::serve(&w, client, peer, fe).await,
    }
}

/// Runs `f` within `limit` (`Err` when it expires).
pub(crate) async fn within<F: Future>(limit: Option<Duration>, f: F) -> Result<F::Output, ()> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await.map_err(|_| ()),
        None => Ok(f.await),
    }
}
