//! HTTP/2 towards servers through the real binary: an HTTP/2 origin (the `h2` crate's server,
//! counting its connections and streams) behind `server ... proto h2`, HTTP/1.1 and HTTP/2
//! clients in front; `ssl alpn h2,http/1.1` against a second sluice terminating TLS (it
//! chooses h2, or only http/1.1); a server that resets streams, closes its connection or is
//! down; and the configuration lines that must be refused.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;

/// What the HTTP/2 origin has seen.
#[derive(Default)]
struct Seen {
    conns: AtomicUsize,
    /// Connections that ended.
    closed: AtomicUsize,
    streams: AtomicUsize,
    /// Request heads, as "METHOD URI te=.. cl=..".
    heads: Mutex<Vec<String>>,
    /// The reasons of the streams the proxy reset.
    resets: Mutex<Vec<h2::Reason>>,
    /// Streams refused (REFUSED_STREAM), by path.
    refused: Mutex<std::collections::HashMap<String, usize>>,
}

/// An HTTP/2 origin (prior knowledge) on 127.0.0.1, on a thread of its own. Answers:
/// - `/sized`: 200 with a `content-length`;
/// - `/trailers`: 200, a body without length, then trailers (`grpc-status: 0`);
/// - `/big`: 1 MiB without length, under the proxy's flow control;
/// - `/reset`: resets the stream (REFUSED_STREAM would allow a retry; INTERNAL_ERROR);
/// - `/refuse-once/...`: refuses the path's first stream unprocessed (REFUSED_STREAM), then
///   answers as below; `/refuse-always/...` refuses every one;
/// - `/goaway`: answers, then closes its connection gracefully;
/// - `/hang`: never answers, and records the reset that ends the stream;
/// - `/early`: answers 413 without reading the body, then stops the upload with
///   RST_STREAM (NO_ERROR), as RFC 9113 §8.1 allows;
/// - a CONNECT (plain, or extended with `:protocol`, which it allows unless started
///   [`H2Origin::without_extended_connect`]): 200, then echoes the stream's DATA until the
///   proxy ends its side, then "bye" and the end; 403 for `refused.test`;
/// - anything else: 200 echoing the connection's number, the request's body length, byte
///   sum and trailer `x-sum`, without length.
struct H2Origin {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl H2Origin {
    fn start() -> H2Origin {
        H2Origin::start_with(true)
    }

    fn without_extended_connect() -> H2Origin {
        H2Origin::start_with(false)
    }

    fn start_with(extended_connect: bool) -> H2Origin {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let local = tokio::task::LocalSet::new();
                local
                    .run_until(async move {
                        loop {
                            let Ok((tcp, _)) = listener.accept().await else {
                                return;
                            };
                            let n = s.conns.fetch_add(1, Ordering::SeqCst) + 1;
                            let serve = serve_conn(tcp, n, s.clone(), extended_connect);
                            tokio::task::spawn_local(serve);
                        }
                    })
                    .await;
            });
        });
        H2Origin { addr, seen }
    }

    fn conns(&self) -> usize {
        self.seen.conns.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.seen.closed.load(Ordering::SeqCst)
    }

    fn streams(&self) -> usize {
        self.seen.streams.load(Ordering::SeqCst)
    }
}

async fn serve_conn(tcp: tokio::net::TcpStream, n: usize, seen: Arc<Seen>, extended: bool) {
    let mut builder = h2::server::Builder::new();
    if extended {
        builder.enable_connect_protocol();
    }
    if let Ok(mut conn) = builder.handshake(tcp).await {
        while let Some(Ok((req, respond))) = conn.accept().await {
            seen.streams.fetch_add(1, Ordering::SeqCst);
            let path = req.uri().path().to_string();
            let goaway = path == "/goaway";
            tokio::task::spawn_local(answer(req, respond, n, seen.clone()));
            if goaway {
                conn.graceful_shutdown();
            }
        }
    }
    seen.closed.fetch_add(1, Ordering::SeqCst);
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    conn: usize,
    seen: Arc<Seen>,
) {
    let (parts, mut body) = req.into_parts();
    if parts.method == http::Method::CONNECT {
        return tunnel(parts, body, respond, seen).await;
    }
    let path = parts.uri.path().to_string();
    if path.starts_with("/refuse-") {
        let mut refused = seen.refused.lock().unwrap();
        let n = refused.entry(path.clone()).or_default();
        if *n == 0 || path.starts_with("/refuse-always") {
            *n += 1;
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            return;
        }
    }
    if parts.uri.path() == "/early" {
        // Dropping the request's body unread after a complete response makes the `h2`
        // crate follow the response with RST_STREAM (NO_ERROR).
        let rsp = http::Response::builder().status(413).body(()).unwrap();
        let _ = respond.send_response(rsp, true);
        return;
    }
    let field = |n: &str| {
        parts
            .headers
            .get(n)
            .map_or("-".to_string(), |v| v.to_str().unwrap().to_string())
    };
    let mut head = format!(
        "{} {} te={} cl={} host={} connection={}",
        parts.method,
        parts.uri,
        field("te"),
        field("content-length"),
        field("host"),
        field("connection"),
    );
    if parts.headers.contains_key("x-edit") {
        head.push_str(&format!(
            " x-edit={} x-gone={}",
            field("x-edit"),
            field("x-gone")
        ));
    }
    seen.heads.lock().unwrap().push(head);
    let (mut len, mut sum) = (0u64, 0u64);
    while let Some(Ok(d)) = body.data().await {
        len += d.len() as u64;
        sum += d.iter().map(|&b| u64::from(b)).sum::<u64>();
        let _ = body.flow_control().release_capacity(d.len());
    }
    let trailer = match body.trailers().await {
        Ok(Some(t)) => t
            .get("x-sum")
            .map_or("-".into(), |v| v.to_str().unwrap().to_string()),
        _ => "-".into(),
    };
    let path = parts.uri.path();
    if path == "/reset" {
        respond.send_reset(h2::Reason::INTERNAL_ERROR);
        return;
    }
    if path == "/hang" {
        if let Ok(reason) = std::future::poll_fn(|cx| respond.poll_reset(cx)).await {
            seen.resets.lock().unwrap().push(reason);
        }
        return;
    }
    let text = format!("conn={conn} len={len} sum={sum} trailer={trailer} path={path}");
    let mut rsp = http::Response::builder().status(200).header("x-conn", conn);
    if path == "/sized" {
        rsp = rsp.header("content-length", text.len());
    }
    let head_only = parts.method == http::Method::HEAD;
    let Ok(mut send) = respond.send_response(rsp.body(()).unwrap(), head_only) else {
        return;
    };
    if head_only {
        return;
    }
    let body: Bytes = if path == "/big" {
        (0..1 << 20)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into()
    } else {
        text.into()
    };
    let mut data = body;
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let room = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(n)) if n > 0 => n,
            Some(Ok(_)) => continue,
            _ => return,
        };
        let part = data.split_to(room.min(data.len()));
        let last = data.is_empty() && path != "/trailers";
        if send.send_data(part, last).is_err() {
            return;
        }
    }
    if path == "/trailers" {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        let _ = send.send_trailers(t);
    }
}

/// Answers a CONNECT stream: see [`H2Origin`].
async fn tunnel(
    parts: http::request::Parts,
    mut body: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    seen: Arc<Seen>,
) {
    let protocol = parts.extensions.get::<h2::ext::Protocol>();
    let key = parts.headers.get("sec-websocket-key");
    seen.heads.lock().unwrap().push(format!(
        "CONNECT {} protocol={} key={}",
        parts.uri,
        protocol.map_or("-", |p| p.as_str()),
        key.map_or("-", |k| k.to_str().unwrap()),
    ));
    let refused = parts.uri.host() == Some("refused.test");
    let rsp = http::Response::builder()
        .status(if refused { 403 } else { 200 })
        .body(())
        .unwrap();
    let Ok(mut send) = respond.send_response(rsp, refused) else {
        return;
    };
    if refused {
        return;
    }
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
        if send.send_data(d, false).is_err() {
            return;
        }
    }
    let _ = send.send_data(Bytes::from_static(b"bye"), true);
}

fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 client connection (prior knowledge) to `addr`, driven on the current runtime.
async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    send
}

fn config(server_line: &str, extra_global: &str) -> String {
    format!(
        "global\n nbthread 1\n{extra_global}\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 3s\n\
         frontend fe\n {{fe}}\n default_backend be\n\
         backend be\n {server_line}\n"
    )
}

/// Sends raw HTTP/1.1 bytes on a new connection and reads until the server closes.
fn exchange_raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn sum(b: &[u8]) -> u64 {
    b.iter().map(|&x| u64::from(x)).sum()
}

#[test]
fn requests_from_many_clients_share_one_http2_connection() {
    let origin = H2Origin::start();
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&config(
        &format!("server s {} proto h2", origin.addr),
        &format!(" stats socket {}\n", sock.display()),
    ));
    let addr = p.addr();
    let clients: Vec<_> = (0..8)
        .map(|c| {
            std::thread::spawn(move || {
                let mut conn = Conn::new(addr);
                for i in 0..6 {
                    let r = conn.get(&format!("/c{c}/r{i}?q=1"));
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert_eq!(
                        r.header("x-conn"),
                        Some("1"),
                        "one connection to the server"
                    );
                    assert_eq!(
                        r.text(),
                        format!("conn=1 len=0 sum=0 trailer=- path=/c{c}/r{i}")
                    );
                    // The server gave no length: the HTTP/1.1 client gets it chunked.
                    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(origin.conns(), 1);
    assert_eq!(origin.streams(), 48);
    let heads = origin.seen.heads.lock().unwrap().clone();
    assert!(
        heads.iter().all(|h| h.starts_with("GET http://test/c")
            && h.ends_with("te=trailers cl=- host=- connection=-")),
        "{heads:?}"
    );
    // A transaction is counted once it has ended, which may be just after its client read
    // the response.
    wait_until("every response counted", || {
        stat_field(&Sluice::cli(&sock, "show stat"), "be", "s", "hrsp_2xx") == "48"
    });
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "s", "connect"), "1");
    assert_eq!(stat_field(&csv, "be", "s", "reuse"), "47");
}

#[test]
fn bodies_trailers_and_head_cross_both_ways() {
    let origin = H2Origin::start();
    let p = Sluice::start(&config(&format!("server s {} proto h2", origin.addr), ""));
    let addr = p.addr();
    // A body with a length.
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    let mut req = format!(
        "POST /up HTTP/1.1\r\nHost: app.test\r\nContent-Length: {}\r\nTE: trailers\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let out = exchange_raw(addr, &req);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains(&format!("len=100000 sum={} trailer=- path=/up", sum(&body))),
        "{out}"
    );
    // A chunked body with a trailer, and a response that ends in trailers.
    let out = exchange_raw(
        addr,
        b"POST /trailers HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\
          TE: trailers\r\nConnection: close\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 42\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("len=11 sum=1116 trailer=42"), "{out}");
    assert!(out.contains("\r\n0\r\ngrpc-status: 0\r\n\r\n"), "{out}");
    let heads = origin.seen.heads.lock().unwrap().clone();
    assert!(
        heads.contains(&"POST http://app.test/up te=trailers cl=100000 host=- connection=-".into()),
        "{heads:?}"
    );
    assert!(
        heads
            .contains(&"POST http://app.test/trailers te=trailers cl=- host=- connection=-".into()),
        "{heads:?}"
    );
    // A response with a length keeps it; HEAD gets a head alone.
    let r = get(addr, "/sized");
    assert_eq!(r.status, 200);
    let length = r.body.len().to_string();
    assert_eq!(r.header("content-length"), Some(length.as_str()));
    assert_eq!(r.header("transfer-encoding"), None);
    let out = exchange_raw(
        addr,
        b"HEAD /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.ends_with("\r\n\r\n"),
        "a HEAD answer has no body: {out}"
    );
    // A megabyte comes through the server's stream and the client's connection whole.
    let r = get(addr, "/big");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 1 << 20);
    assert!(r
        .body
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i % 251) as u8));
    assert_eq!(origin.conns(), 1);
}

#[test]
fn rules_read_and_edit_an_exchange_with_an_http2_server() {
    let origin = H2Origin::start();
    let server = format!(
        "http-request set-header x-edit yes\n \
         http-request del-header x-gone\n \
         http-request set-method PUT if {{ path /method }}\n \
         http-request set-header host rewritten.test if {{ path /host }}\n \
         http-response set-header x-seen \"%[res.hdr(x-conn)] %[res.ver] %[status]\"\n \
         http-response del-header x-conn\n \
         server s {} proto h2",
        origin.addr
    );
    let p = Sluice::start(&config(&server, ""));
    let addr = p.addr();
    for path in ["/method", "/host"] {
        let out = exchange_raw(
            addr,
            format!(
                "GET {path} HTTP/1.1\r\nHost: app.test\r\nX-Gone: 1\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        // The response as rules see it: the server's field, HTTP/2, its status.
        assert!(out.contains("\r\nx-seen: 1 2.0 200\r\n"), "{out}");
        assert!(!out.contains("x-conn"), "{out}");
        assert!(out.contains("transfer-encoding: chunked\r\n"), "{out}");
    }
    let heads = origin.seen.heads.lock().unwrap().clone();
    let sent = |h: &str| heads.iter().any(|x| x == h);
    let tail = "te=trailers cl=- host=- connection=- x-edit=yes x-gone=-";
    assert!(
        sent(&format!("PUT http://app.test/method {tail}")),
        "{heads:?}"
    );
    assert!(
        sent(&format!("GET http://rewritten.test/host {tail}")),
        "{heads:?}"
    );
}

#[test]
fn http2_clients_reach_http2_servers() {
    let origin = H2Origin::start();
    let p = Sluice::start(
        &config(&format!("server s {} proto h2", origin.addr), "")
            .replace("{fe}\n", "{fe} proto h2\n"),
    );
    let addr = p.addr();
    client_runtime().block_on(async {
        let send = h2_client(addr).await;
        let mut tasks = Vec::new();
        for i in 0..20 {
            let s = send.clone();
            tasks.push(tokio::spawn(async move {
                let path = if i % 2 == 0 { "/trailers" } else { "/echo" };
                let req = http::Request::post(format!("http://h2.test{path}"))
                    .body(())
                    .unwrap();
                let (rsp, mut up) = s.ready().await.unwrap().send_request(req, false).unwrap();
                up.send_data(Bytes::from_static(b"abc"), false).unwrap();
                let mut t = http::HeaderMap::new();
                t.insert("x-sum", "7".parse().unwrap());
                up.send_trailers(t).unwrap();
                let (parts, mut body) = rsp.await.unwrap().into_parts();
                let mut text = Vec::new();
                while let Some(d) = body.data().await {
                    let d = d.unwrap();
                    let _ = body.flow_control().release_capacity(d.len());
                    text.extend_from_slice(&d);
                }
                let trailers = body.trailers().await.unwrap();
                (
                    path,
                    parts.status,
                    String::from_utf8(text).unwrap(),
                    trailers,
                )
            }));
        }
        for t in tasks {
            let (path, status, text, trailers) = t.await.unwrap();
            assert_eq!(status, 200);
            assert_eq!(text, format!("conn=1 len=3 sum=294 trailer=7 path={path}"));
            let grpc = trailers.as_ref().and_then(|t| t.get("grpc-status"));
            if path == "/trailers" {
                assert_eq!(grpc.map(|v| v.to_str().unwrap()), Some("0"));
            } else {
                assert!(grpc.is_none());
            }
        }
    });
    assert_eq!(origin.conns(), 1);
    assert_eq!(origin.streams(), 20);
}

#[test]
fn a_failing_http2_server_costs_its_request_and_the_connection_is_replaced() {
    let origin = H2Origin::start();
    let p = Sluice::start(&config(&format!("server s {} proto h2", origin.addr), ""));
    let addr = p.addr();
    assert_eq!(get(addr, "/one").status, 200);
    // A reset stream is a failed response: 502 (not replayed: the server had the request),
    // and the connection serves the next.
    assert_eq!(get(addr, "/reset").status, 502);
    assert_eq!(origin.streams(), 2);
    let r = get(addr, "/two");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-conn"), Some("1"));
    // The server closes its connection: the next request opens another.
    assert_eq!(get(addr, "/goaway").status, 200);
    wait_until("the next request to reach a second connection", || {
        get(addr, "/three").header("x-conn") == Some("2")
    });
    assert_eq!(origin.conns(), 2);
    // A server that is not there: 503, and the proxy goes on serving.
    let down = free_port();
    let p2 = Sluice::start(&config(&format!("server s 127.0.0.1:{down} proto h2"), ""));
    assert_eq!(get(p2.addr(), "/").status, 503);
    assert_eq!(get(addr, "/four").status, 200);
}

/// A stream the server refused unprocessed (REFUSED_STREAM) is sent again once, whatever
/// its method, when it has no body to send again; a reset that is not a refusal is not
/// (test above), nor is a refused request whose body has left.
#[test]
fn a_stream_the_server_refused_is_sent_again_once() {
    let origin = H2Origin::start();
    // The connection must outlive the test, however slow the machine.
    let p = Sluice::start(&config(
        &format!("server s {} proto h2 pool-purge-delay 10m", origin.addr),
        "",
    ));
    let addr = p.addr();
    let refused = |path: &str| origin.seen.refused.lock().unwrap().get(path).copied();
    for (request, path) in [
        ("GET /refuse-once/get HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "/refuse-once/get"),
        // Not idempotent: only a refusal makes it safe to send again.
        ("POST /refuse-once/post HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "/refuse-once/post"),
        (
            "DELETE /refuse-once/delete HTTP/1.1\r\nHost: x\r\nConnection: close\r\ncontent-length: 0\r\n\r\n",
            "/refuse-once/delete",
        ),
    ] {
        let before = origin.streams();
        let (r, _) = raw_exchange(addr, request.as_bytes());
        let r = r.unwrap_or_else(|| panic!("no response to {request}"));
        assert_eq!(r.status, 200, "{request}");
        assert!(r.text().contains(&format!("path={path}")), "{}", r.text());
        assert_eq!(origin.streams() - before, 2, "{request}");
        assert_eq!(refused(path), Some(1));
    }
    // Refused again: one replay only, then 502.
    let before = origin.streams();
    assert_eq!(get(addr, "/refuse-always/x").status, 502);
    assert_eq!(origin.streams() - before, 2);
    assert_eq!(refused("/refuse-always/x"), Some(2));
    // A body that has left is not sent again.
    let before = origin.streams();
    let (r, _) = raw_exchange(
        addr,
        b"POST /refuse-once/body HTTP/1.1\r\nHost: x\r\nConnection: close\r\ncontent-length: 3\r\n\r\nabc",
    );
    assert_eq!(r.unwrap().status, 502);
    assert_eq!(origin.streams() - before, 1);
    // The connection was never at fault: one all along.
    assert_eq!(get(addr, "/after").header("x-conn"), Some("1"));
    assert_eq!(origin.conns(), 1);
}

/// A connection to an HTTP/2 server that carried no stream for the server's
/// `pool-purge-delay` is closed, as HAProxy purges idle server connections, and the next
/// request opens another; one with a stream in flight stays, however long it takes.
#[test]
fn an_idle_http2_connection_is_closed_after_the_purge_delay() {
    let origin = H2Origin::start();
    let p = Sluice::start(&config(
        &format!("server s {} proto h2 pool-purge-delay 200ms", origin.addr),
        "",
    ));
    let r = get(p.addr(), "/first");
    assert_eq!((r.status, r.header("x-conn")), (200, Some("1")));
    wait_until("the idle connection to close", || origin.closed() == 1);
    let r = get(p.addr(), "/second");
    assert_eq!(r.header("x-conn"), Some("2"), "a new connection");

    let addr = p.addr();
    let hanging = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /hang HTTP/1.1\r\nHost: h\r\n\r\n")
            .unwrap();
        std::thread::sleep(Duration::from_millis(1200));
    });
    wait_until("the hanging request to reach the server", || {
        origin.streams() == 3
    });
    // Six purge delays with its stream open: the connection stays.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(origin.closed(), 1, "a busy connection is not purged");
    hanging.join().unwrap();
    // Its stream ends (`timeout server` cancels it, the client being gone), and the
    // connection is idle from then on.
    wait_until("the connection to close once idle", || origin.closed() == 2);
    assert_eq!(origin.conns(), 2);
}

#[test]
fn a_stream_the_proxy_gives_up_on_is_cancelled_on_the_server() {
    let origin = H2Origin::start();
    let p = Sluice::start(
        &config(&format!("server s {} proto h2", origin.addr), "")
            .replace("timeout server 10s", "timeout server 1s"),
    );
    let addr = p.addr();
    // `timeout server` strikes: the client gets 504 and the server sees the stream
    // cancelled, not left open on a connection that goes on serving.
    assert_eq!(get(addr, "/hang").status, 504);
    wait_until("the server to see the stream cancelled", || {
        !origin.seen.resets.lock().unwrap().is_empty()
    });
    assert_eq!(
        origin.seen.resets.lock().unwrap().as_slice(),
        &[h2::Reason::CANCEL]
    );
    let r = get(addr, "/after");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-conn"),
        Some("1"),
        "the connection goes on serving"
    );
}

#[test]
fn a_server_that_answers_before_the_whole_upload_is_heard() {
    let origin = H2Origin::start();
    let p = Sluice::start(&config(&format!("server s {} proto h2", origin.addr), ""));
    // A megabyte, far more than the stream's window: the server's answer and its
    // RST_STREAM (NO_ERROR) come while the proxy still has most of it to send.
    let body = vec![b'x'; 1 << 20];
    let mut req = format!(
        "POST /early HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let out = exchange_raw(p.addr(), &req);
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert_eq!(get(p.addr(), "/next").status, 200);
}

/// The server side of the TLS tests: a second sluice terminating TLS (certificate `pem`,
/// ALPN `offered`), HTTP/1.1 to `origin` behind it, its CLI on `sock`.
fn tls_front(pem: &str, offered: &str, sock: &std::path::Path, origin: SocketAddr) -> Sluice {
    Sluice::start(&format!(
        "global\n nbthread 1\n stats socket {}\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 3s\n\
         frontend fe\n {{fe}} ssl crt {pem} alpn {offered}\n default_backend be\n\
         backend be\n server o {origin}\n",
        sock.display(),
    ))
}

#[test]
fn over_tls_alpn_chooses_http2_when_the_server_offers_it() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    for (offered, h2) in [("h2,http/1.1", true), ("http/1.1", false)] {
        let sock = dir.0.join(format!("tls-{h2}.sock"));
        let tls = tls_front(&pem, offered, &sock, origin.addr);
        let p = Sluice::start(&config(
            &format!("server s {} ssl verify none alpn h2,http/1.1", tls.addr()),
            "",
        ));
        for i in 0..10 {
            let r = get(p.addr(), &format!("/tls/{i}"));
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let csv = Sluice::cli(&sock, "show stat");
        let h2_conns = stat_field(&csv, "fe", "FRONTEND", "h2_total_connections");
        let h2_heads = stat_field(&csv, "fe", "FRONTEND", "h2_headers_rcvd");
        if h2 {
            assert_eq!((h2_conns.as_str(), h2_heads.as_str()), ("1", "10"));
        } else {
            assert_eq!((h2_conns.as_str(), h2_heads.as_str()), ("0", "0"));
        }
    }
    assert_eq!(origin.count(), 20);
}

#[test]
fn proto_lines_that_cannot_work_are_refused() {
    let front = "frontend f\n bind 127.0.0.1:1\n default_backend b\n";
    let (ok, out) = check_config(&format!(
        "defaults\n mode http\nbackend b\n server s 127.0.0.1:1 proto h3\n{front}"
    ));
    assert!(!ok);
    assert!(out.contains(":4") && out.contains("'h3'"), "{out}");
    let (ok, out) = check_config(&format!(
        "defaults\n mode tcp\nbackend b\n server s 127.0.0.1:1 proto h2\n{front}"
    ));
    assert!(!ok);
    assert!(out.contains("'proto h2' needs mode http"), "{out}");
    let (ok, out) = check_config(&format!(
        "defaults\n mode http\nbackend b\n server s 127.0.0.1:1 proto h2 check check-proto fcgi\n{front}"
    ));
    assert!(!ok);
    assert!(
        out.contains(":4") && out.contains("'fcgi': expects h1 or h2"),
        "{out}"
    );
    let (ok, out) = check_config(&format!(
        "defaults\n mode http\nbackend b\n server s 127.0.0.1:1 proto h2\n \
         server t 127.0.0.1:2 ssl verify none alpn h2,http/1.1\n{front}"
    ));
    assert!(ok, "{out}");
}

#[test]
fn http_checks_speak_http2_to_an_http2_server() {
    let origin = H2Origin::start();
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let server = |name: &str, opts: &str| {
        format!(
            " server {name} {} proto h2 check inter 100ms rise 1 fall 1 {opts}\n",
            origin.addr
        )
    };
    let p = Sluice::start(&format!(
        "global\n stats socket {}\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 3s\n\
         frontend fe\n {{fe}}\n default_backend alive\n\
         backend alive\n option httpchk GET /alive\n http-check expect string path=/alive\n{}\
         backend forced\n option httpchk GET /forced\n{}\
         backend reset\n option httpchk GET /reset\n{}\
         backend h1\n option httpchk GET /h1\n{}",
        sock.display(),
        server("a", ""),
        server("f", "check-proto h2"),
        server("r", ""),
        server("o", "check-proto h1"),
    ));
    let field =
        |be: &str, sv: &str, f: &str| stat_field(&Sluice::cli(&sock, "show stat"), be, sv, f);
    wait_until("every check judged", || {
        field("alive", "a", "check_status") == "L7OK"
            && field("forced", "f", "check_status") == "L7OK"
            && field("reset", "r", "status") == "DOWN"
            && field("h1", "o", "status") == "DOWN"
    });
    assert_eq!(field("alive", "a", "status"), "UP");
    assert_eq!(field("alive", "a", "check_code"), "200");
    // A reset stream is not an answer.
    assert_eq!(field("reset", "r", "check_status"), "L7RSP");
    // `check-proto h1` speaks HTTP/1.1, which this server does not understand.
    assert_ne!(field("h1", "o", "check_status"), "L7OK");
    let heads = origin.seen.heads.lock().unwrap().clone();
    // As HTTP/2 streams (`:scheme` and `:authority`, `te: trailers`).
    let seen = |path: &str| {
        heads
            .iter()
            .any(|h| h.starts_with(&format!("GET http://{}{path} te=trailers", origin.addr)))
    };
    assert!(seen("/alive") && seen("/forced"), "{heads:?}");
    assert!(!heads.iter().any(|h| h.contains("/h1")), "{heads:?}");
    // Traffic still flows to the server the checks keep up.
    assert_eq!(get(p.addr(), "/x").status, 200);
}

#[test]
fn http_checks_over_tls_speak_what_alpn_chose() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    for (offered, h2) in [("h2,http/1.1", true), ("http/1.1", false)] {
        let tls_sock = dir.0.join(format!("tls-{h2}.sock"));
        let sock = dir.0.join(format!("checker-{h2}.sock"));
        let tls = tls_front(&pem, offered, &tls_sock, origin.addr);
        let _checker = Sluice::start(&format!(
            "global\n stats socket {}\n\
             defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 3s\n\
             frontend fe\n {{fe}}\n default_backend be\n\
             backend be\n option httpchk GET /chk\n\
             server s {} ssl verify none alpn h2,http/1.1 check inter 100ms rise 1 fall 1\n",
            sock.display(),
            tls.addr()
        ));
        wait_until("the check passes", || {
            stat_field(&Sluice::cli(&sock, "show stat"), "be", "s", "check_status") == "L7OK"
        });
        let csv = Sluice::cli(&tls_sock, "show stat");
        let h2_heads: u64 = stat_field(&csv, "fe", "FRONTEND", "h2_headers_rcvd")
            .parse()
            .unwrap();
        assert_eq!(
            h2_heads > 0,
            h2,
            "offered {offered}: {h2_heads} HTTP/2 requests"
        );
    }
    assert!(origin
        .requests()
        .iter()
        .any(|r| r.method == "GET" && r.target == "/chk"));
}

#[test]
fn websockets_and_connect_reach_an_http2_server_as_connect_streams() {
    let origin = H2Origin::start();
    let p = Sluice::start(&config(
        &format!("server s {} proto h2\n timeout tunnel 10s", origin.addr),
        "",
    ));
    let open = |req: &[u8]| {
        let mut s = TcpStream::connect(p.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(req).unwrap();
        let head = read_head(&mut s).to_ascii_lowercase();
        (s, head)
    };
    // The key and its answer are RFC 6455's own example.
    let (mut ws, head) = open(b"GET /chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    for field in [
        "upgrade: websocket\r\n",
        "connection: upgrade\r\n",
        "sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n",
    ] {
        assert!(head.contains(field), "{field} in {head}");
    }
    let rest = echo_through(&mut ws, &[b"\x81\x05hello", &[9u8; 40_000]]);
    assert_eq!(rest, b"bye", "the server's last bytes, then the end");
    let (mut tunnel, head) =
        open(b"CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\n\r\n");
    assert!(head.starts_with("http/1.1 200 "), "{head}");
    assert!(!head.contains("content-length") && !head.contains("transfer-encoding"));
    assert_eq!(echo_through(&mut tunnel, &[b"\x16\x03\x01 hello"]), b"bye");
    let refused = exchange_raw(
        p.addr(),
        b"CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n",
    );
    assert!(refused.starts_with("HTTP/1.1 403 "), "{refused}");
    let heads = origin.seen.heads.lock().unwrap().clone();
    assert_eq!(
        heads,
        [
            "CONNECT http://ws.test/chat protocol=websocket key=-",
            "CONNECT origin.test:443 protocol=- key=-",
            "CONNECT refused.test:443 protocol=- key=-",
        ]
    );
}

#[test]
fn a_websocket_upgrade_to_a_server_without_extended_connect_is_a_plain_request() {
    let origin = H2Origin::without_extended_connect();
    let p = Sluice::start(&config(&format!("server s {} proto h2", origin.addr), ""));
    let mut c = Conn::new(p.addr());
    c.send(b"GET /chat HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "conn=1 len=0 sum=0 trailer=- path=/chat");
    // And the connection goes on as HTTP.
    assert_eq!(c.get("/next").status, 200);
}

#[test]
fn an_http2_clients_websocket_reaches_an_http2_server() {
    let origin = H2Origin::start();
    let p = Sluice::start(
        &config(
            &format!("server s {} proto h2\n timeout tunnel 10s", origin.addr),
            "",
        )
        .replace("{fe}\n", "{fe} proto h2\n"),
    );
    let addr = p.addr();
    client_runtime().block_on(async {
        let send = h2_client(addr).await;
        let mut send = send.ready().await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !send.is_extended_connect_protocol_enabled() {
            assert!(std::time::Instant::now() < deadline, "no extended CONNECT");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("http://ws.test/chat")
            .header("sec-websocket-version", "13")
            .body(())
            .unwrap();
        req.extensions_mut()
            .insert(h2::ext::Protocol::from("websocket"));
        let (res, mut up) = send.send_request(req, false).unwrap();
        let res = res.await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("sec-websocket-accept").is_none());
        let mut down = res.into_body();
        up.send_data(Bytes::from_static(b"hello"), false).unwrap();
        let got = down.data().await.unwrap().unwrap();
        assert_eq!(&got[..], b"hello");
        up.send_data(Bytes::new(), true).unwrap();
        let mut rest = Vec::new();
        while let Some(d) = down.data().await {
            rest.extend_from_slice(&d.unwrap());
        }
        assert_eq!(rest, b"bye");
    });
    // The key sluice made up for the HTTP/1.1 leg does not reach the HTTP/2 server.
    let heads = origin.seen.heads.lock().unwrap().clone();
    assert_eq!(
        heads,
        ["CONNECT http://ws.test/chat protocol=websocket key=-"]
    );
}

/// `http-send-name-header` towards an HTTP/2 server: the field names the server (one field,
/// the client's own removed), as towards an HTTP/1.1 one.
#[test]
fn http_send_name_header_reaches_an_http2_server() {
    let origin = H2Origin::start();
    let server = format!(
        "http-send-name-header X-Edit\n server s2 {} proto h2",
        origin.addr
    );
    let p = Sluice::start(&config(&server, ""));
    let out = exchange_raw(
        p.addr(),
        b"GET /named HTTP/1.1\r\nHost: app.test\r\nX-Edit: spoofed\r\nConnection: close\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let heads = origin.seen.heads.lock().unwrap().clone();
    assert!(
        heads.iter().any(|h| h.ends_with(" x-edit=s2 x-gone=-")),
        "{heads:?}"
    );
}

/// A real gRPC server and client (Python's `grpcio`): the server answers behind `proto h2`,
/// the client speaks HTTP/2 to the proxy. The script prints the server's port, reads the
/// proxy's, makes its calls through it and prints what they returned as one JSON line.
const GRPC_SCRIPT: &str = r#"
import json, sys
from concurrent import futures
import grpc

def echo(req, ctx):
    ctx.set_trailing_metadata((("x-sum", str(sum(req))),))
    return b"echo:" + req

def count(req, ctx):
    for i in range(int(req)):
        yield b"part%d" % i

def gather(parts, ctx):
    data = b"".join(parts)
    return b"got %d bytes sum %d" % (len(data), sum(data))

def shout(parts, ctx):
    for p in parts:
        yield p.upper()

def big(req, ctx):
    return bytes(i % 251 for i in range(int(req)))

def fail(req, ctx):
    ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "not you")

handlers = {
    "Echo": grpc.unary_unary_rpc_method_handler(echo),
    "Count": grpc.unary_stream_rpc_method_handler(count),
    "Gather": grpc.stream_unary_rpc_method_handler(gather),
    "Shout": grpc.stream_stream_rpc_method_handler(shout),
    "Big": grpc.unary_unary_rpc_method_handler(big),
    "Fail": grpc.unary_unary_rpc_method_handler(fail),
}
server = grpc.server(futures.ThreadPoolExecutor(4))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Svc", handlers),))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
proxy = sys.stdin.readline().strip()
ch = grpc.insecure_channel("127.0.0.1:" + proxy)
out = {}
resp, call = ch.unary_unary("/t.Svc/Echo").with_call(b"hello", timeout=20)
out["echo"] = [resp.decode(), dict(call.trailing_metadata()).get("x-sum")]
out["count"] = [m.decode() for m in ch.unary_stream("/t.Svc/Count")(b"3", timeout=20)]
parts = [bytes([i]) * 100000 for i in range(1, 6)]
out["gather"] = ch.stream_unary("/t.Svc/Gather")(iter(parts), timeout=20).decode()
out["shout"] = [m.decode() for m in ch.stream_stream("/t.Svc/Shout")(iter([b"a", b"bc"]), timeout=20)]
data = ch.unary_unary("/t.Svc/Big")(b"1000000", timeout=20)
out["big"] = [len(data), sum(data)]
try:
    ch.unary_unary("/t.Svc/Fail")(b"x", timeout=20)
    out["fail"] = "passed"
except grpc.RpcError as e:
    out["fail"] = [e.code().name, e.details()]
print(json.dumps(out), flush=True)
server.stop(0)
"#;

/// gRPC end to end over HTTP/2 on both sides (h2 -> h2), with a real gRPC server and
/// client: unary calls with trailing metadata, server, client and bidirectional streaming,
/// 500 kB up and 1 MB down under flow control, and an error status, which travels in the
/// trailers. Bodies cross as data, their trailers aside: nothing in between is HTTP/1.1.
#[test]
fn grpc_calls_cross_http2_end_to_end() {
    let dir = TempDir::new();
    let script = dir.write("grpc_pair.py", GRPC_SCRIPT);
    let mut py = std::process::Command::new("python3")
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut out = std::io::BufReader::new(py.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let port: u16 = line
        .trim()
        .parse()
        .expect("the gRPC server's port (is grpcio installed?)");
    let p = Sluice::start(&format!(
        "global\n nbthread 1\n\
         defaults\n mode http\n timeout client 20s\n timeout server 20s\n timeout connect 3s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\n\
         backend be\n server s 127.0.0.1:{port} proto h2\n"
    ));
    let mut stdin = py.stdin.take().unwrap();
    writeln!(stdin, "{}", p.addr().port()).unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let status = py.wait().unwrap();
    assert!(status.success(), "the gRPC client failed: {line}");
    let got: serde_json::Value = serde_json::from_str(&line).expect("the calls' results");
    let sum_up: u64 = (1..=5u64).map(|i| i * 100_000).sum();
    let sum_down: u64 = (0..1_000_000u64).map(|i| i % 251).sum();
    assert_eq!(
        got,
        serde_json::json!({
            "echo": ["echo:hello", "532"],
            "count": ["part0", "part1", "part2"],
            "gather": format!("got 500000 bytes sum {sum_up}"),
            "shout": ["A", "BC"],
            "big": [1_000_000, sum_down],
            "fail": ["PERMISSION_DENIED", "not you"],
        })
    );
}

/// A server added at run time may speak another protocol than the configuration's
/// servers: `proto h2` into a backend of HTTP/1.1 servers, HTTP/1.1 into one of `proto h2`
/// servers. Requests reach each in its protocol once it is enabled.
#[test]
fn an_added_server_is_spoken_to_in_its_own_protocol() {
    let h2 = H2Origin::start();
    let h1 = Origin::start("h1");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n nbthread 1\n stats socket {} level admin\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 3s\n\
         frontend fe\n {{fe}}\n use_backend b2 if {{ path_beg /two }}\n default_backend b1\n\
         backend b1\n server old {}\n\
         backend b2\n server old {} proto h2\n",
        sock.display(),
        h1.addr,
        h2.addr
    ));
    let cli = |cmd: &str| Sluice::cli(&sock, cmd).trim_end().to_string();
    assert_eq!(cli("disable server b1/old"), "");
    assert_eq!(cli("disable server b2/old"), "");
    let added = format!("add server b1/new {} proto h2", h2.addr);
    assert_eq!(cli(&added), "New server registered.");
    assert_eq!(
        cli(&format!("add server b2/new {}", h1.addr)),
        "New server registered."
    );
    assert_eq!(cli("enable server b1/new"), "");
    assert_eq!(cli("enable server b2/new"), "");
    let before = h2.seen.streams.load(Ordering::SeqCst);
    let r = get(p.addr(), "/one");
    assert_eq!(r.status, 200);
    assert_eq!(h2.seen.streams.load(Ordering::SeqCst), before + 1, "{r:?}");
    let r = get(p.addr(), "/two");
    assert_eq!((r.status, r.text().split(' ').next()), (200, Some("h1")));
}
