//! HTTP/2 towards servers, on the data path: a request for a server the worker has an
//! HTTP/2 link to (`pool::h2`) runs as a stream on that link, and a new connection that
//! speaks HTTP/2 (`proto h2`, or TLS whose ALPN chose `h2`) becomes the link.
//!
//! A transaction speaks to the stream without HTTP/1.1 text for the heads: its request head
//! leaves as the transaction prepared it from the client's head and the rules' edits
//! (`h2_stream::ServerRequest`: `:authority` from `Host`, no connection-specific fields,
//! `te: trailers` since trailers are always relayed), and the response head is read as the
//! `h2` crate decoded it (`sluice_http::ResponseView::h2`). The bodies still cross as
//! HTTP/1.1 would frame them (chunked without a length, so that trailers pass). The stream
//! carries one exchange and is never pooled: the link is what lasts. Queues, `maxconn`,
//! timeouts, logs and compression work unchanged.
//!
//! Invariants:
//! - A link counts as one used connection of its server while it is open; its streams
//!   count as requests (queue slots, `maxconn`), not as connections.
//! - At a soft stop every link is let go: its streams finish, then the connection closes.
//!   So is a link that carried no stream for the server's `pool-purge-delay`, as HAProxy
//!   purges idle server connections.
//! - A stream the transaction leaves (its client gone, `timeout server`) is cancelled on
//!   the server (RST_STREAM), and one the server resets fails its request (502).

use std::io;
use std::rc::Rc;

use bytes::Bytes;

use crate::h2_stream::H2Stream;
use crate::pool::h2::Link;
use crate::runtime::Worker;
use crate::transport::{Conn, Origin, Socket};

/// Whether a new connection to server `server` of `backend` speaks HTTP/2: `proto h2`, or
/// TLS whose ALPN chose `h2`. Only HTTP backends ever do.
pub(crate) fn speaks_h2(w: &Worker, backend: usize, server: usize, conn: &Socket) -> bool {
    let be = &w.config().backends[backend];
    be.stream.mode == crate::conf::stream::Mode::Http
        && (be.servers[server].h2 || conn.tls().and_then(|t| t.alpn).as_deref() == Some(b"h2"))
}

/// Makes a fresh connection to a server the worker's link to it (the HTTP/2 handshake is
/// part of connecting) and returns the first stream on it.
pub(crate) async fn start(
    w: &Rc<Worker>,
    backend: usize,
    server: usize,
    conn: Socket,
    addr_gen: u64,
) -> io::Result<Conn> {
    let origin = Origin {
        tls: None,
        ..conn.origin()
    };
    let tls = conn.is_tls();
    let (send, mut connection) = h2::client::Builder::new()
        // As large as a buffer: a response head that big passes in HTTP/1.1 too.
        .max_header_list_size(w.config().global.head_room() as u32)
        // What a request body may have waiting in the connection's send queue.
        .max_send_buffer_size(w.config().global.h2_send_buffer())
        .handshake::<_, Bytes>(conn)
        .await
        .map_err(io::Error::other)?;
    let link = Link {
        send,
        addr_gen,
        origin,
        tls,
        activity: Default::default(),
        settings: Default::default(),
    };
    let first = stream_on(&link);
    let activity = link.activity.clone();
    let settings = link.settings.clone();
    let pings = connection.ping_pong();
    let kept = w.h2_links.keep(backend, server, link);
    let purge_delay = w.config().backends[backend].servers[server]
        .pool
        .purge_delay;
    let w = w.clone();
    tokio::task::spawn_local(async move {
        tokio::pin!(connection);
        let stop = w.soft_stop.notified();
        // The server's SETTINGS came before its answer to a PING sent now. (Once that is
        // known, this branch waits forever.)
        let learn = async {
            if let Some(mut pings) = pings {
                let _ = pings.ping(h2::Ping::opaque()).await;
            }
            settings.learned();
            std::future::pending::<()>().await;
        };
        let let_go = tokio::select! {
            _ = &mut connection => false,
            () = learn => unreachable!("never resolves"),
            () = async { if !w.stopping() { stop.await } } => true,
            () = activity.idle(purge_delay), if kept.is_some() => true,
        };
        settings.learned();
        if let Some(id) = kept {
            w.h2_links.forget(backend, server, id);
        }
        if let_go {
            // The connection ends once its streams have (no new one comes now).
            let _ = connection.await;
        }
        w.state().backends[backend].servers[server]
            .idle
            .close_used();
    });
    Ok(first)
}

/// A stream on `link`, opened when the transaction writes its request.
pub(crate) fn stream_on(link: &Link) -> Conn {
    let end = H2Stream::asking(
        link.send.clone(),
        (link.tls, link.origin.peer),
        Some(link.settings.clone()),
    );
    Conn::h2_stream(end, link.origin.clone(), Some(Box::new(link.lease())))
}
