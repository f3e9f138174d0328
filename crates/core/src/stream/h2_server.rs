//! HTTP/2 towards servers, on the data path: a request for a server the worker has an
//! HTTP/2 link to (`pool::h2`) runs as a stream on that link, and a new connection that
//! speaks HTTP/2 (`proto h2`, or TLS whose ALPN chose `h2`) becomes the link.
//!
//! A transaction still sees an ordinary HTTP/1.1 server connection: a pipe
//! (`crate::pipe`) whose far end a bridge task serves. The bridge reads the request the
//! transaction wrote, sends it as HEADERS (`:authority` from `Host`, no connection-specific
//! fields, `te: trailers` since trailers are always relayed) and DATA, and writes the
//! response back as HTTP/1.1 with `connection: close`: the pipe carries one exchange and is
//! never pooled; the link is what lasts. Queues, `maxconn`, timeouts, logs and compression
//! work unchanged.
//!
//! Invariants:
//! - A link counts as one used connection of its server while it is open; its streams
//!   count as requests (queue slots, `maxconn`), not as connections.
//! - At a soft stop every link is let go: its streams finish, then the connection closes.
//! - A stream the transaction leaves (its client gone, `timeout server`) is cancelled on
//!   the server (RST_STREAM), and one the server resets fails its request (502).

use std::io;
use std::rc::Rc;

use bytes::{Buf, Bytes};
use h2::client::SendRequest;
use sluice_http::{name_is, parse_request, Framing, RequestHead};

use super::h2_body::{from_pipe, into_pipe, Ended};
use super::heads::push_header;
use crate::pipe::{self, Front};
use crate::pool::h2::Link;
use crate::runtime::Worker;
use crate::transport::{Conn, Origin};

/// Whether a new connection to server `server` of `backend` speaks HTTP/2: `proto h2`, or
/// TLS whose ALPN chose `h2`. Only HTTP backends ever do.
pub(crate) fn speaks_h2(w: &Worker, backend: usize, server: usize, conn: &Conn) -> bool {
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
    conn: Conn,
    addr_gen: u64,
) -> io::Result<Conn> {
    let origin = Origin {
        peer: conn.peer_addr()?,
        local: conn.local_addr()?,
        tls: None,
    };
    let tls = conn.is_tls();
    let (send, connection) = h2::client::Builder::new()
        // As large as a buffer: a response head that big passes in HTTP/1.1 too.
        .max_header_list_size(w.config().global.bufsize as u32)
        .handshake::<_, Bytes>(conn)
        .await
        .map_err(io::Error::other)?;
    let link = Link {
        send,
        addr_gen,
        origin,
        tls,
    };
    let first = stream_on(&link);
    let kept = w.h2_links.keep(backend, server, link);
    let w = w.clone();
    tokio::task::spawn_local(async move {
        tokio::pin!(connection);
        let stop = w.soft_stop.notified();
        let stopping = tokio::select! {
            _ = &mut connection => false,
            () = async { if !w.stopping() { stop.await } } => true,
        };
        if let Some(id) = kept {
            w.h2_links.forget(backend, server, id);
        }
        if stopping {
            // Let go: the connection ends once its streams have.
            let _ = connection.await;
        }
        w.state().backends[backend].servers[server]
            .idle
            .close_used();
    });
    Ok(first)
}

/// A pipe whose far end a bridge serves as one stream on `link`.
pub(crate) fn stream_on(link: &Link) -> Conn {
    let (front, end) = pipe::pair();
    let fallback = link.origin.peer.to_string();
    tokio::task::spawn_local(bridge(front, link.send.clone(), link.tls, fallback));
    Conn::stream(end, link.origin.clone())
}

/// Serves one exchange: the transaction's HTTP/1.1 request out as a stream, the stream's
/// response back as HTTP/1.1. A failure aborts the pipe: the transaction sees its server
/// connection fail (502).
async fn bridge(front: Front, send: SendRequest<Bytes>, tls: bool, fallback: String) {
    match exchange(&front, send, tls, &fallback).await {
        Ok(()) => front.finish(),
        Err(_) => front.abort(),
    }
}

async fn exchange(
    front: &Front,
    send: SendRequest<Bytes>,
    tls: bool,
    fallback: &str,
) -> Result<(), Ended> {
    let mut buf = Vec::new();
    let head = loop {
        if front.read(&mut buf).await.map_err(|_| Ended::Reset)? == 0 {
            return Err(Ended::Truncated);
        }
        match parse_request(&buf) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(_) => return Err(Ended::Truncated),
        }
    };
    let req = request(&head, &buf, tls, fallback).ok_or(Ended::Truncated)?;
    let head_request = head.is_head(&buf);
    let no_body = matches!(head.framing, Framing::None | Framing::Length(0));
    let mut send = send.ready().await.map_err(|_| Ended::Reset)?;
    let (response, mut body) = send.send_request(req, no_body).map_err(|_| Ended::Reset)?;
    let mut rest = Bytes::from(buf);
    rest.advance(head.len);
    let upload = async {
        if !no_body {
            from_pipe(front, &mut body, rest, head.framing).await?;
        }
        // The request is whole: the pipe's next end is the transaction leaving (its
        // client gone, `timeout server`), and the stream is cancelled with it.
        let mut spare = Vec::new();
        while front.read(&mut spare).await.map_err(|_| Ended::Reset)? > 0 {
            spare.clear();
        }
        Err::<(), _>(Ended::Reset)
    };
    let download = async {
        let rsp = response.await.map_err(|_| Ended::Reset)?;
        let (parts, recv) = rsp.into_parts();
        let mut out = Vec::with_capacity(256);
        let chunked = response_head(&parts, recv.is_end_stream(), head_request, &mut out);
        into_pipe(front, &out, recv, chunked).await
    };
    tokio::select! {
        done = download => done,
        Err(e) = upload => Err(e),
    }
}

/// The HTTP/2 request for a parsed HTTP/1.1 head, without the connection-specific fields
/// HTTP/2 forbids; `None` if it cannot be carried (a target HTTP/2 cannot name).
fn request(head: &RequestHead, buf: &[u8], tls: bool, fallback: &str) -> Option<http::Request<()>> {
    let target = std::str::from_utf8(&buf[head.target.clone()]).ok()?;
    let uri: http::Uri = if target.starts_with('/') {
        let host = head
            .host
            .clone()
            .and_then(|r| std::str::from_utf8(&buf[r]).ok())
            .unwrap_or(fallback);
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{host}{target}").parse().ok()?
    } else {
        // Absolute-form names its own scheme and authority; `*` has no HTTP/2 form here.
        target
            .parse()
            .ok()
            .filter(|u: &http::Uri| u.authority().is_some())?
    };
    let mut req = http::Request::new(());
    *req.method_mut() = http::Method::from_bytes(head.method(buf)).ok()?;
    *req.uri_mut() = uri;
    let fields = req.headers_mut();
    fields.reserve(head.headers.len() + 1);
    for h in head.headers.iter() {
        let (name, value) = (&buf[h.name.clone()], &buf[h.value.clone()]);
        // `Host` became `:authority`; `Expect` is the proxy's business, not the stream's.
        if head.is_hop_by_hop(name) || name_is(name, "host") || name_is(name, "expect") {
            continue;
        }
        let value = http::HeaderValue::from_bytes(value).ok()?;
        fields.append(http::HeaderName::from_bytes(name).ok()?, value);
    }
    if let Framing::Length(n) = head.framing {
        fields.insert(http::header::CONTENT_LENGTH, n.into());
    }
    // The proxy passes the trailers of every response it relays (chunked to an HTTP/1.1
    // client, as trailers to an HTTP/2 one), and says so: gRPC servers require it.
    fields.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    Some(req)
}

/// Writes the HTTP/1.1 head of a stream's response into `out`; `ended` says the stream
/// carries no body. Returns whether the body goes chunked (no length was given).
fn response_head(
    parts: &http::response::Parts,
    ended: bool,
    head_request: bool,
    out: &mut Vec<u8>,
) -> bool {
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        push_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let bodiless = head_request || status.is_informational() || status == 204 || status == 304;
    let sized = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    let chunked = !bodiless && !sized && !ended;
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !bodiless && !sized {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    chunked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translate(raw: &str) -> http::Request<()> {
        let head = parse_request(raw.as_bytes()).unwrap().unwrap();
        request(&head, raw.as_bytes(), false, "127.0.0.1:1").unwrap()
    }

    #[test]
    fn a_request_head_loses_its_connection_fields_and_says_trailers_are_taken() {
        let req = translate(
            "POST /a?b=1 HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive, x-hop\r\n\
             X-Hop: 1\r\nTE: trailers, deflate\r\nExpect: 100-continue\r\n\
             Content-Length: 3\r\nX-Kept: yes\r\n\r\n",
        );
        assert_eq!(req.method(), http::Method::POST);
        assert_eq!(req.uri().to_string(), "http://app.test/a?b=1");
        let h = req.headers();
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["content-length"], "3");
        assert_eq!(h["x-kept"], "yes");
        for gone in ["host", "connection", "x-hop", "expect"] {
            assert!(!h.contains_key(gone), "{gone} must not be sent");
        }
    }

    #[test]
    fn a_request_without_host_names_the_server() {
        let req = translate("GET / HTTP/1.0\r\n\r\n");
        assert_eq!(req.uri().to_string(), "http://127.0.0.1:1/");
        let head = parse_request(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(request(&head, b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", false, "x").is_none());
    }

    fn head_of(status: u16, fields: &[(&str, &str)], ended: bool, head_req: bool) -> String {
        let mut b = http::Response::builder().status(status);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        let (parts, ()) = b.body(()).unwrap().into_parts();
        let mut out = Vec::new();
        response_head(&parts, ended, head_req, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_response_head_is_framed_for_http1_and_closes_its_pipe() {
        let chunked = head_of(200, &[("x-a", "1")], false, false);
        assert_eq!(
            chunked,
            "HTTP/1.1 200 OK\r\nx-a: 1\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        );
        let sized = head_of(404, &[("content-length", "5")], false, false);
        assert!(sized.starts_with("HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\n"));
        assert!(!sized.contains("chunked"));
        assert!(head_of(200, &[], true, false).contains("content-length: 0\r\n"));
        let head = head_of(200, &[], true, true);
        assert!(!head.contains("content-length") && !head.contains("chunked"));
        assert!(!head_of(304, &[], true, false).contains("content-length"));
    }
}
