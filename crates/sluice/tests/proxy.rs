//! Proxying behaviour through the real binary: forwarding, headers, keep-alive and reuse,
//! bodies, pipelining, error statuses.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

fn one_backend(origin: &Origin, extra_fe: &str, extra_be: &str) -> String {
    format!(
        "global\n    nbthread 2\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n{extra_fe}\n    default_backend be\n\nbackend be\n{extra_be}\n    server s1 {}\n",
        origin.addr
    )
}

#[test]
fn forwards_and_rewrites_headers() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(
        &origin,
        "    option forwardfor\n    http-request set-header X-Set v1\n    http-request del-header X-Drop\n    http-request add-header X-Add a",
        "    http-response set-header X-Resp yes\n    http-response del-header X-Origin-Secret",
    ));
    let mut c = p.connect();
    c.send(
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.test\r\nConnection: keep-alive, X-Nominated\r\nX-Nominated: 1\r\n\
Keep-Alive: timeout=5\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Connection: x\r\nX-Drop: d\r\nX-Set: old\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n",
    );
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "o /a?b=1");
    assert_eq!(r.header("x-resp"), Some("yes"));
    let got = &origin.requests()[0];
    assert_eq!(got.method, "GET");
    assert_eq!(got.target, "/a?b=1");
    assert_eq!(got.header("host"), Some("example.test"));
    for hop in [
        "connection",
        "x-nominated",
        "keep-alive",
        "te",
        "upgrade",
        "proxy-connection",
        "x-drop",
    ] {
        assert_eq!(
            got.header(hop),
            None,
            "{hop} must not be forwarded: {}",
            got.raw_head
        );
    }
    assert_eq!(got.header("x-set"), Some("v1"));
    assert_eq!(got.header("x-add"), Some("a"));
    // The client's own X-Forwarded-For is kept and ours is added after it.
    let xff: Vec<&str> = got
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-for"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(xff, vec!["6.6.6.6", "127.0.0.1"]);
    assert!(got.raw_head.starts_with("GET /a?b=1 HTTP/1.1\r\n"));
}

#[test]
fn forwardfor_except_and_custom_header() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(
        &origin,
        "",
        "    option forwardfor except 10.0.0.0/8 header X-Client",
    ));
    get(p.addr(), "/");
    let got = &origin.requests()[0];
    assert_eq!(got.header("x-client"), Some("127.0.0.1"));
    assert_eq!(got.header("x-forwarded-for"), None);
    let origin2 = Origin::start("o");
    let p2 = Sluice::start(&one_backend(
        &origin2,
        "    option forwardfor except 127.0.0.0/8",
        "",
    ));
    get(p2.addr(), "/");
    assert_eq!(origin2.requests()[0].header("x-forwarded-for"), None);
}

#[test]
fn response_hop_by_hop_headers_are_removed() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|_| {
            Reply::Raw(b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=9\r\nX-Keep: 2\r\nContent-Length: 2\r\n\r\nok".to_vec())
        }),
    );
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let r = get(p.addr(), "/");
    assert_eq!(r.text(), "ok");
    assert_eq!(r.header("x-hop"), None);
    assert_eq!(r.header("keep-alive"), None);
    assert_eq!(r.header("connection"), None);
    assert_eq!(r.header("x-keep"), Some("2"));
}

#[test]
fn keep_alive_reuses_one_server_connection() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    for i in 0..20 {
        let r = c.get(&format!("/{i}"));
        assert_eq!(r.text(), format!("o /{i}"));
    }
    assert_eq!(origin.count(), 20);
    assert_eq!(
        origin.conns(),
        1,
        "20 requests on one client connection must reuse one server connection"
    );
}

#[test]
fn reuse_safe_gives_each_client_connection_a_fresh_first_connection() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    // Two client connections, one after the other: with http-reuse safe (the default) the
    // second client's first request may not use the first client's idle connection, its
    // second request may.
    let mut a = p.connect();
    a.get("/a1");
    a.get("/a2");
    drop(a);
    let mut b = p.connect();
    b.get("/b1");
    b.get("/b2");
    assert_eq!(origin.conns(), 2);
}

#[test]
fn reuse_always_shares_idle_connections_between_clients() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    http-reuse always\n    server s1 {}\n",
        origin.addr
    ));
    for i in 0..5 {
        let mut c = p.connect();
        assert_eq!(c.get(&format!("/{i}")).status, 200);
    }
    assert_eq!(origin.conns(), 1);
}

#[test]
fn reuse_aggressive_needs_a_proven_connection_for_first_requests() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    http-reuse aggressive\n    server s1 {}\n",
        origin.addr
    ));
    // Client 1 makes one request: its connection has served once (not proven).
    let mut a = p.connect();
    a.get("/1");
    drop(a);
    // Client 2's first request may not use it: a second server connection.
    let mut b = p.connect();
    b.get("/2");
    b.get("/3");
    drop(b);
    assert_eq!(origin.conns(), 2);
    // Client 3's first request may use a connection that served several requests.
    let mut c = p.connect();
    c.get("/4");
    assert_eq!(origin.conns(), 2);
}

#[test]
fn reuse_never_keeps_connections_private() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    http-reuse never\n    server s1 {}\n",
        origin.addr
    ));
    let mut a = p.connect();
    let mut b = p.connect();
    for i in 0..3 {
        a.get(&format!("/a{i}"));
        b.get(&format!("/b{i}"));
    }
    let reqs = origin.requests();
    let conn_of = |prefix: &str| {
        let mut ids: Vec<usize> = reqs
            .iter()
            .filter(|r| r.target.starts_with(prefix))
            .map(|r| r.conn)
            .collect();
        ids.dedup();
        ids
    };
    assert_eq!(conn_of("/a").len(), 1);
    assert_eq!(conn_of("/b").len(), 1);
    assert_ne!(conn_of("/a"), conn_of("/b"));
    assert_eq!(origin.conns(), 2);
}

#[test]
fn http_server_close_and_httpclose() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "", "    option http-server-close"));
    let mut c = p.connect();
    for _ in 0..3 {
        assert_eq!(c.get("/").status, 200);
    }
    assert_eq!(origin.conns(), 3, "a server connection per request");
    assert!(origin
        .requests()
        .iter()
        .all(|r| r.header("connection") == Some("close")));

    // `option http-pretend-keepalive`: the server is not told, the connection still ends.
    let origin3 = Origin::start("o");
    let p3 = Sluice::start(&one_backend(
        &origin3,
        "",
        "    option http-server-close\n    option http-pretend-keepalive",
    ));
    let mut c3 = p3.connect();
    for _ in 0..3 {
        assert_eq!(c3.get("/").status, 200);
    }
    assert_eq!(origin3.conns(), 3, "a server connection per request still");
    assert!(origin3
        .requests()
        .iter()
        .all(|r| r.header("connection").is_none()));

    let origin2 = Origin::start("o");
    let p2 = Sluice::start(&one_backend(&origin2, "    option httpclose", ""));
    let mut c2 = p2.connect();
    let r = c2.get("/");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c2.is_closed());
}

/// A client that announced its request as the last (`Connection: close`, no body) is not
/// waited for once answered: the connection ends at once, as in HAProxy and nginx. The
/// client here keeps sending a byte every 50 ms after the response; a proxy that drained
/// the connection until the client closed (what protects pipelined requests when the
/// proxy alone decides to close) would hold it open for as long as the bytes came.
#[test]
fn a_client_that_announced_its_last_request_is_not_waited_for() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock = dir.0.join("stats.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server s1 {}\n",
        sock.display(),
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    assert_eq!(c.response().status, 200);
    assert!(
        c.is_closed(),
        "the proxy's side is closed after the response"
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let (mut w, stop) = (c.writer.try_clone().unwrap(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            // Fails with a reset once the proxy has closed: that is expected.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && w.write_all(b"x").is_ok() {
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    wait_until("the connection to end while the client still sends", || {
        Sluice::cli(&sock, "show info").contains("\nCurrConns: 0\n")
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickle.join().unwrap();
}

#[test]
fn request_bodies_content_length_and_chunked() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    c.send(b"POST /cl HTTP/1.1\r\nHost: t\r\nContent-Length: 011\r\n\r\nhello world");
    assert_eq!(c.response().status, 200);
    c.send(b"POST /ch HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n");
    assert_eq!(c.response().status, 200);
    let reqs = origin.requests();
    assert_eq!(reqs[0].body, b"hello world");
    assert_eq!(reqs[0].header("content-length"), Some("11"));
    assert_eq!(reqs[1].body, b"hello world");
    assert_eq!(reqs[1].header("transfer-encoding"), Some("chunked"));
    assert!(!reqs[1]
        .raw_head
        .to_ascii_lowercase()
        .contains("content-length"));
}

#[test]
fn expect_100_continue_does_not_deadlock() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    c.send(b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.response();
    assert_eq!(interim.status, 100);
    c.send(b"data");
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(origin.requests()[0].body, b"data");
}

#[test]
fn response_framings_reach_the_client_correctly() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            Reply::Raw(match r.target.as_str() {
                "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n".to_vec(),
                "/204" => b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
                "/304" => b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n".to_vec(),
                "/head" => b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n".to_vec(),
                "/hints" => b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
                _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            })
        }),
    );
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    let r = c.get("/chunked");
    assert_eq!((r.status, r.text().as_str()), (200, "abcde"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(c.get("/204").status, 204);
    let r = c.get("/304");
    assert_eq!((r.status, r.header("content-length")), (304, Some("99")));
    c.send(b"HEAD /head HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response_for(true).unwrap();
    assert_eq!((r.status, r.header("content-length")), (200, Some("1234")));
    let early = c.get("/hints");
    assert_eq!(early.status, 103);
    assert_eq!(early.header("link"), Some("</s.css>"));
    assert_eq!(c.response().text(), "ok");
    // After all of that the connection is still in sync.
    assert_eq!(c.get("/plain").text(), "ok");
    assert_eq!(origin.conns(), 1);
}

#[test]
fn close_delimited_response_is_rechunked_for_http11_and_closed_for_http10() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|_| {
            Reply::Raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close".to_vec())
        }),
    );
    // The origin handler keeps the connection open after answering; close it from a wrapper
    // origin that answers then closes.
    drop(origin);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in listener.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil close");
        }
    });
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {addr}\n"
    ));
    let mut c = p.connect();
    let r = c.get("/");
    assert_eq!(r.text(), "until close");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(
        c.get("/again").text(),
        "until close",
        "the client connection stays usable"
    );
    let mut c10 = p.connect();
    c10.send(b"GET / HTTP/1.0\r\n\r\n");
    let r = c10.response();
    assert_eq!(r.text(), "until close");
    assert!(c10.is_closed());
}

/// An HTTP/1.0 server's answers reach an HTTP/1.1 client as HTTP/1.0, as HAProxy writes
/// them (reg-test compression/basic): kept alive with `Connection: keep-alive` when sized,
/// never chunked, closed with the connection when not sized.
#[test]
fn http10_servers_are_answered_as_http10() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| match r.target.as_str() {
            "/sized" => Reply::Raw(
                b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"
                    .to_vec(),
            ),
            _ => Reply::RawThenClose(
                b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close".to_vec(),
            ),
        }),
    );
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    let r = c.get("/sized");
    assert_eq!(
        (r.version.as_str(), r.text().as_str()),
        ("HTTP/1.0", "hello")
    );
    assert_eq!(r.header("connection"), Some("keep-alive"));
    let r = c.get("/close");
    assert_eq!(
        (r.version.as_str(), r.text().as_str()),
        ("HTTP/1.0", "until close")
    );
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.header("connection"), None);
    assert!(c.is_closed());
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    c.send(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\nPOST /2 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET /3 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response().text(), "o /1");
    assert_eq!(c.response().text(), "o /2");
    assert_eq!(c.response().text(), "o /3");
    assert_eq!(origin.overlaps.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn http10_clients() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    c.send(b"GET /x HTTP/1.0\r\n\r\n");
    let r = c.response();
    assert_eq!(r.text(), "o /x");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed());
    let mut k = p.connect();
    k.send(b"GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = k.response();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    k.send(b"GET /k2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(k.response().text(), "o /k2");
    // The origin sees the client's version (a Host-less HTTP/1.1 request would be
    // invalid), asked to keep the connection open for the pool.
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 3);
    for r in &reqs {
        let line = r.raw_head.lines().next().unwrap();
        assert!(line.ends_with(" HTTP/1.0"), "{line}");
        assert!(
            r.raw_head
                .to_ascii_lowercase()
                .contains("connection: keep-alive\r\n"),
            "{}",
            r.raw_head
        );
        assert!(!r.raw_head.to_ascii_lowercase().contains("host:"));
    }
}

#[test]
fn large_bodies_stream_through_bounded_memory() {
    const SIZE: usize = 64 << 20;
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            if r.target == "/download" {
                let mut v =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n").into_bytes();
                v.resize(v.len() + SIZE, b'x');
                Reply::Raw(v)
            } else {
                ok_response(&r.body.len().to_string()).into()
            }
        }),
    );
    let p = Sluice::start(&one_backend(&origin, "", ""));
    let mut c = p.connect();
    let r = c.get("/download");
    assert_eq!(r.body.len(), SIZE);
    let mut head =
        format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: {SIZE}\r\n\r\n").into_bytes();
    head.resize(head.len() + SIZE, b'y');
    c.send(&head);
    assert_eq!(c.response().text(), SIZE.to_string());
    // Peak resident memory stays far below one body: nothing was buffered whole.
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
    let hwm_kb: usize = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(
        hwm_kb < 48 * 1024,
        "peak RSS {hwm_kb} kB after moving two 64 MiB bodies"
    );
}

#[test]
fn local_responses_and_denials() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(
        &origin,
        "    acl blocked path_beg /admin\n    acl ping path /ping\n    http-request deny if blocked\n    http-request deny deny_status 429 if { path /slow }\n    http-request return status 201 content-type text/plain string pong if ping",
        "",
    ));
    let mut c = p.connect();
    let r = c.get("/ping");
    assert_eq!((r.status, r.text().as_str()), (201, "pong"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(
        c.get("/ok").status,
        200,
        "return keeps the connection alive"
    );
    let (r, closed) = raw_exchange(p.addr(), b"GET /admin/x HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.unwrap().status, 403);
    assert!(closed);
    let (r, _) = raw_exchange(p.addr(), b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.unwrap().status, 429);
    assert_eq!(origin.count(), 1);
}

#[test]
fn return_serves_a_file() {
    let dir = TempDir::new();
    let page = dir.write("maintenance.html", "<h1>back soon</h1>\n");
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend fe\n    {{fe}}\n    http-request return status 503 content-type text/html file {page}\n"
    ));
    let r = get(p.addr(), "/anything");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.text(), "<h1>back soon</h1>\n");
}

#[test]
fn error_statuses() {
    // No backend matches and no default: 503 with HAProxy's page.
    let p = Sluice::start(&format!("{DEFAULTS}\nfrontend fe\n    {{fe}}\n"));
    let r = get(p.addr(), "/");
    assert_eq!(r.status, 503);
    assert_eq!(
        r.text(),
        "<html><body><h1>503 Service Unavailable</h1>\nNo server is available to handle this request.\n</body></html>\n"
    );
    assert_eq!(r.header("content-type"), Some("text/html"));

    // Every server disabled: 503.
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 127.0.0.1:9 disabled\n"
    ));
    assert_eq!(get(p.addr(), "/").status, 503);

    // Connection refused: 503.
    let (_dead_port, dead) = refused_addr();
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {dead}\n"
    ));
    assert_eq!(get(p.addr(), "/").status, 503);

    // A server slower than timeout server: 504.
    let slow = Origin::with_handler(
        "slow",
        Arc::new(|_| Reply::Delayed(Duration::from_secs(3), ok_response("late"))),
    );
    let p = Sluice::start(&format!(
        "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 300ms\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        slow.addr
    ));
    assert_eq!(get(p.addr(), "/").status, 504);

    // A server closing without answering: 502.
    let rude = Origin::with_handler("rude", Arc::new(|_| Reply::Close));
    let p = Sluice::start(&one_backend(&rude, "", ""));
    assert_eq!(get(p.addr(), "/").status, 502);
}

#[test]
fn a_failed_server_does_not_stop_the_others() {
    let good = Origin::start("good");
    let (_dead_port, dead) = refused_addr();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server dead {dead}\n    server good {}\n",
        good.addr
    ));
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(get(p.addr(), "/").status);
    }
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 5);
    assert_eq!(statuses.iter().filter(|&&s| s == 503).count(), 5);
    assert_eq!(good.count(), 5);
}

#[test]
fn slow_request_head_gets_408() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(&origin, "    timeout http-request 300ms", ""));
    let mut c = p.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n");
    let r = c.response();
    assert_eq!(r.status, 408);
    assert!(c.is_closed());
    assert_eq!(origin.count(), 0);
}

#[test]
fn keep_alive_timeout_closes_idle_client_connections() {
    let origin = Origin::start("o");
    let p = Sluice::start(&one_backend(
        &origin,
        "    timeout http-keep-alive 200ms",
        "",
    ));
    let mut c = p.connect();
    assert_eq!(c.get("/").status, 200);
    // Nothing more is sent: the proxy closes quietly (no 408 between requests).
    assert!(c.is_closed());
}

#[test]
fn frontend_maxconn_pauses_accepting() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    maxconn 2\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    let mut a = p.connect();
    let mut b = p.connect();
    assert_eq!(a.get("/a").status, 200);
    assert_eq!(b.get("/b").status, 200);
    // A third connection is accepted by the kernel but not served while two are open.
    let mut third = p.connect();
    third.send(b"GET /third HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        origin.count(),
        2,
        "the third request must wait for a free slot"
    );
    drop(a);
    assert_eq!(third.response().text(), "o /third");
    assert_eq!(b.get("/b2").status, 200);
}

/// `return ... default-errorfiles` answers with the proxy's own page for the status (its
/// `http-error`, `errorfile`, or the built-in one), in request and response rules.
#[test]
fn a_return_may_answer_with_the_proxys_error_page() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    http-error status 503 content-type text/plain string \"nothing here\"\n    http-request return status 503 default-errorfiles if {{ path /mine }}\n    http-request return status 404 default-errorfiles if {{ path /builtin }}\n    default_backend be\nbackend be\n    http-error status 502 content-type text/plain string \"backend page\"\n    http-request set-var(txn.late) bool(1) if {{ path /late }}\n    http-response return status 502 default-errorfiles if {{ var(txn.late) -m bool }}\n    server s {}\n",
        origin.addr
    ));
    let r = get(p.addr(), "/mine");
    assert_eq!((r.status, r.text().as_str()), (503, "nothing here"));
    let r = get(p.addr(), "/builtin");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("404 Not Found"), "{}", r.text());
    let r = get(p.addr(), "/late");
    assert_eq!((r.status, r.text().as_str()), (502, "backend page"));
    assert_eq!(get(p.addr(), "/other").text(), "o /other");
}

#[test]
fn errorfile_and_http_error_replace_built_in_pages() {
    let dir = TempDir::new();
    let page = dir.write(
        "503.http",
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nall busy :(\n",
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}\n    errorfile 503 {page}\nfrontend fe\n    {{fe}}\n    http-error status 503 content-type text/plain string \"nothing here\"\n    monitor-uri /up\n    http-error status 200 content-type text/plain string up\n    use_backend own if {{ path_beg /own }}\n    use_backend plain if {{ path_beg /plain }}\nbackend own\n    http-error status 503 content-type text/plain hdr Retry-After 30 lf-string \"backend %[be_name] says no to %[path]\"\n    server s 127.0.0.1:9 disabled\nbackend plain\n    server s 127.0.0.1:9 disabled\n"
    ));
    let r = get(p.addr(), "/nowhere");
    assert_eq!((r.status, r.text().as_str()), (503, "nothing here"));
    // The monitor's 200 page is one of them too, as in HAProxy.
    let r = get(p.addr(), "/up");
    assert_eq!((r.status, r.text().as_str()), (200, "up"));
    let r = get(p.addr(), "/plain");
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, "all busy :(\n"),
        "errorfile from defaults"
    );
    let r = get(p.addr(), "/own");
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, "backend own says no to /own"),
        "the backend's page wins, rendered for the request"
    );
    assert_eq!(r.header("retry-after"), Some("30"));
    // A malformed request after all of that still gets the built-in 400.
    let (r, _) = raw_exchange(p.addr(), b"GET / HTTP/1.1\r\nHost : x\r\n\r\n");
    assert_eq!(r.unwrap().status, 400);
    // A file that is not an HTTP response is refused at load time.
    let bad = dir.write("bad.http", "just text\n");
    let cfg = dir.write(
        "c.cfg",
        &format!("frontend f\n    bind :1\n    errorfile 503 {bad}\n"),
    );
    let out = std::process::Command::new(sluice_bin())
        .args(["-c", "-f", &cfg])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid HTTP response"));
}

#[test]
fn response_header_names_go_out_in_lower_case_as_haproxy_relays_them() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|_: &Received| {
            Reply::Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Custom-Thing: Value\r\nSet-Cookie: A=B\r\n\r\nok".to_vec())
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    http-response set-header X-Added Yes\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let mut s = std::net::TcpStream::connect(p.addr()).unwrap();
    use std::io::{Read, Write};
    s.write_all(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let head = raw.split("\r\n\r\n").next().unwrap();
    for line in head.lines().skip(1) {
        let name = line.split(':').next().unwrap();
        assert_eq!(name, name.to_ascii_lowercase(), "{head}");
    }
    // Values are untouched.
    assert!(
        head.contains("x-custom-thing: Value") && head.contains("x-added: Yes"),
        "{head}"
    );
}

#[test]
fn errorloc_answers_with_a_redirect_and_ulimit_n_sets_the_descriptor_limit() {
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    ulimit-n 2000\n    stats socket {}\n{DEFAULTS}    errorloc 503 https://status.example.com/\nfrontend fe\n    {{fe}}\n    errorloc303 503 /missing\n    use_backend be if {{ path /be }}\nbackend be\n    server s 127.0.0.1:9 disabled\n",
        sock.display()
    ));
    let r = get(p.addr(), "/be");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://status.example.com/"));
    let r = get(p.addr(), "/nowhere");
    assert_eq!((r.status, r.header("location")), (303, Some("/missing")));
    assert!(Sluice::cli(&sock, "show info").contains("Ulimit-n: 2000"));
}

#[test]
fn http_error_takes_an_errorfile_or_a_body_file() {
    let dir = TempDir::new();
    let full = dir.write(
        "503.http",
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nfull\n",
    );
    let body = dir.write("body.html", "<p>down for a while</p>\n");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    use_backend body if {{ path_beg /body }}\n    default_backend full\nbackend full\n    http-error status 503 errorfile {full}\n    server s 127.0.0.1:9 disabled\nbackend body\n    http-error status 503 content-type text/html file {body} hdr x-why maintenance\n    server s 127.0.0.1:9 disabled\n"
    ));
    let r = get(p.addr(), "/");
    assert_eq!((r.status, r.text().as_str()), (503, "full\n"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = get(p.addr(), "/body");
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, "<p>down for a while</p>\n")
    );
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("x-why"), Some("maintenance"));
}

#[test]
fn heads_and_bodies_arriving_in_pieces_are_put_together() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    // While a connection waits for the rest of a head, what it sent so far is held apart
    // from the buffers (small heads) or in its buffer (large ones): both come out whole.
    for filler in [10, 3000] {
        let head = format!(
            "POST /pieces HTTP/1.1\r\nHost: t\r\nX-Filler: {}\r\nContent-Length: 11\r\n\r\nhello world",
            "f".repeat(filler)
        );
        let mut c = p.connect();
        for piece in head.as_bytes().chunks(head.len() / 4 + 1) {
            c.send(piece);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let r = c.response();
        assert_eq!((r.status, r.text().as_str()), (200, "o /pieces"));
        let got = origin.requests().pop().unwrap();
        assert_eq!(got.header("x-filler").map(str::len), Some(filler));
        assert_eq!(got.body, b"hello world");
        // The connection goes on with the next request.
        assert_eq!(c.get("/next").text(), "o /next");
    }
}

#[test]
fn a_head_response_leaves_its_server_connection_reusable() {
    // A server that answers HEAD as it should: the head of the GET answer, no body.
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            if r.method == "HEAD" {
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\n"
                    .to_vec()
                    .into()
            } else {
                ok_response("hello").into()
            }
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let mut c = p.connect();
    for _ in 0..3 {
        c.send(b"HEAD /h HTTP/1.1\r\nHost: t\r\n\r\n");
        let r = c.response_for(true).unwrap();
        assert_eq!(r.status, 200);
    }
    c.send(b"GET /g HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response().status, 200);
    // Nothing follows a HEAD response's head: the one server connection served them all.
    assert_eq!(origin.count(), 4);
    assert_eq!(origin.conns(), 1);
}

/// The proxy-side socket of a client connection, as `ss` shows it (with its TOS and
/// netfilter mark).
fn proxy_socket(proxy: std::net::SocketAddr, client: std::net::SocketAddr) -> String {
    let out = std::process::Command::new("ss")
        .args(["-tnie", "--tos", "state", "established"])
        .args(["sport", "=", &format!(":{}", proxy.port())])
        .args(["dport", "=", &format!(":{}", client.port())])
        .output()
        .expect("ss runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `set-tos` and `set-mark` mark what the client is sent (`ss` shows them on the proxy's
/// socket; a mark needs CAP_NET_ADMIN, which the test checks it has); `silent-drop` ends
/// the connection unanswered, counted as denied and logged `PR--`, the request never
/// reaching a server.
#[test]
fn socket_actions_mark_or_silence_the_client() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock_path = dir.0.join("s.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    log stdout format raw local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    http-request set-tos 0x10 if {{ path /marked }}\n    http-request set-mark 42 if {{ path /marked }}\n    http-request silent-drop if {{ path /drop }}\n    default_backend be\nbackend be\n    server s {}\n",
        sock_path.display(),
        origin.addr
    ));
    let mut c = p.connect();
    assert_eq!(c.get("/marked").status, 200);
    let local = c.reader.get_ref().local_addr().unwrap();
    let line = proxy_socket(p.addr(), local);
    assert!(line.contains("tos:0x10"), "{line}");
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if root {
        assert!(line.contains("fwmark:0x2a"), "{line}");
    }
    let mut d = p.connect();
    d.send(b"GET /drop HTTP/1.1\r\nHost: t\r\n\r\n");
    wait_until("the drop logged", || p.stdout().contains("GET /drop"));
    let log = p.stdout();
    let dropped = log.lines().find(|l| l.contains("GET /drop")).unwrap();
    // As HAProxy 2.6.12 logs it for the same configuration.
    assert!(
        dropped.contains(" fe fe/<NOSRV> -1/-1/-1/-1/0 -1 0 - - PR-- "),
        "{dropped}"
    );
    assert_eq!(
        stat_field(
            &Sluice::cli(&sock_path, "show stat"),
            "fe",
            "FRONTEND",
            "dreq"
        ),
        "1"
    );
    assert!(origin.requests().iter().all(|r| r.target != "/drop"));
}

/// `rb` and `tb` of the `skmem` of the established TCP sockets `filter` selects (`ss`).
fn socket_buffers(filter: &str) -> Vec<(u64, u64)> {
    let out = std::process::Command::new("ss")
        .args(["-Htmn", "state", "established", filter])
        .output()
        .expect("ss (Debian's iproute2; .ci/run installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |mem: &str, key: &str| -> u64 {
        mem.split(',')
            .find_map(|f| f.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {text}"))
    };
    text.split("skmem:(")
        .skip(1)
        .map(|rest| {
            let mem = rest.split(')').next().unwrap_or_default();
            (field(mem, "rb"), field(mem, "tb"))
        })
        .collect()
}

/// `tune.rcvbuf|sndbuf.client|server` size the sockets as asked (the kernel shows twice the
/// size set: its bookkeeping's share), on both sides of a proxied exchange.
#[test]
fn tune_socket_buffers_size_client_and_server_sockets() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    tune.rcvbuf.client 65536\n    tune.sndbuf.client 32768\n    tune.rcvbuf.server 49152\n    tune.sndbuf.server 24576\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    // A keep-alive exchange: the client's connection stays open, the server's stays pooled.
    let mut c = p.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response_for(false).unwrap().status, 200);
    let client_side = socket_buffers(&format!("( sport = :{} )", p.addr().port()));
    assert_eq!(client_side, vec![(131072, 65536)]);
    let server_side = socket_buffers(&format!("( dport = :{} )", origin.addr.port()));
    assert_eq!(server_side, vec![(98304, 49152)]);
}

/// `source ADDR` (backend) and the server option `source ADDR`: the address connections to
/// the servers leave from, a server's own winning (the origin answers with the address it
/// sees; all of 127.0.0.0/8 is local on Linux).
#[test]
fn source_sets_the_address_server_connections_leave_from() {
    use std::io::Write;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                if try_read_head(&mut s).is_none() {
                    return;
                }
                let ip = s.peer_addr().unwrap().ip().to_string();
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ip}",
                        ip.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    use_backend two if {{ path /two }}\n    default_backend one\nbackend one\n    source 127.0.0.2\n    server s {addr}\nbackend two\n    source 127.0.0.2\n    server s {addr} source 127.0.0.3\n"
    ));
    assert_eq!(get(p.addr(), "/one").text(), "127.0.0.2");
    assert_eq!(get(p.addr(), "/two").text(), "127.0.0.3");
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}backend b\n    source 127.0.0.2 usesrc clientip\n    server s {addr}\n"
    ));
    assert!(!ok && out.contains("not supported yet"), "{out}");
}

/// `option nolinger`: in a frontend, a client connection the proxy ends ends with a reset;
/// in a backend, a server connection it closes does too; without
/// it both end with a FIN.
#[test]
fn option_nolinger_ends_connections_with_a_reset() {
    use std::io::{Read, Write};
    // An origin that answers one request, then reports how its connection ended.
    let (ends_tx, ends_rx) = std::sync::mpsc::channel::<bool>();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let tx = ends_tx.clone();
            std::thread::spawn(move || {
                let mut s = s;
                if try_read_head(&mut s).is_none() {
                    return;
                }
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                let mut b = [0u8; 64];
                let reset = loop {
                    match s.read(&mut b) {
                        Ok(0) => break false,
                        Ok(_) => {}
                        Err(e) => break e.kind() == std::io::ErrorKind::ConnectionReset,
                    }
                };
                let _ = tx.send(reset);
            });
        }
    });
    for nolinger in [false, true] {
        let option = if nolinger {
            "    option nolinger\n"
        } else {
            ""
        };
        let p = Sluice::start(&format!(
            "{DEFAULTS}frontend fe\n    {{fe}}\n{option}    default_backend be\nbackend be\n    option http-server-close\n{option}    server s {origin}\n"
        ));
        let mut c = std::net::TcpStream::connect(p.addr()).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let ended = c.read_to_end(&mut got);
        // (With a reset, what the client had not read yet may be lost, as HAProxy's
        // manual warns.)
        if !nolinger {
            assert!(
                String::from_utf8_lossy(&got).ends_with("\r\n\r\nok"),
                "{got:?}"
            );
        }
        let client_reset =
            matches!(&ended, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset);
        assert_eq!(client_reset, nolinger, "{ended:?}");
        let server_reset = ends_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert_eq!(server_reset, nolinger);
    }
}

/// `h1-case-adjust` (and `-file`): with `option h1-case-adjust-bogus-client` the field
/// names of responses to HTTP/1 clients (the proxy's own pages too) are spelled as listed,
/// with `option h1-case-adjust-bogus-server` those of requests to servers; without them,
/// nothing changes. Pairs that are not a lower-case name and a case-variant of it, or
/// repeated, are refused.
#[test]
fn h1_case_adjust_respells_header_names() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let file = dir.write("case.txt", "# names\n  x-custom   X-CUSTOM  \n\n");
    let p = Sluice::start(&format!(
        "global\n    h1-case-adjust content-type Content-Type\n    h1-case-adjust-file {file}\n{DEFAULTS}frontend fe\n    {{fe}}\n    option h1-case-adjust-bogus-client\n    default_backend be\nfrontend plain\n    {{fe}}\n    default_backend be\nfrontend nowhere\n    {{fe}}\n    option h1-case-adjust-bogus-client\nbackend be\n    option h1-case-adjust-bogus-server\n    server s {}\n",
        origin.addr
    ));
    let raw = |i: usize, path: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(p.addrs[i]).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nx-custom: 1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let adjusted = raw(0, "/a");
    assert!(adjusted.contains("\r\nContent-Type: "), "{adjusted}");
    let plain = raw(1, "/b");
    assert!(plain.contains("\r\ncontent-type: "), "{plain}");
    // The proxy's own page (no backend: 503) is adjusted too.
    let page = raw(2, "/c");
    assert!(
        page.starts_with("HTTP/1.1 503") && page.contains("\r\nContent-Type: "),
        "{page}"
    );
    for r in origin.requests() {
        assert!(r.raw_head.contains("\r\nX-CUSTOM: 1\r\n"), "{}", r.raw_head);
    }
    for (line, why) in [
        ("h1-case-adjust Content-Type Content-Type", "lower case"),
        (
            "h1-case-adjust content-type Content-Length",
            "only by its case",
        ),
        (
            "h1-case-adjust x-a X-A\n    h1-case-adjust x-a X-a",
            "duplicate",
        ),
    ] {
        let (ok, err) = check_config(&format!("global\n    {line}\n"));
        assert!(!ok && err.contains(why), "{line}: {err}");
    }
}

/// `fd-hard-limit N`: without `ulimit-n` or `maxconn`, the descriptor limit is the lower of
/// N and the system's hard limit, and `maxconn` follows it. The splicing and poller
/// settings that ask for what sluice never does are taken (`maxpipes` shows in `show
/// info`).
#[test]
fn fd_hard_limit_caps_the_descriptor_limit_and_maxconn() {
    // The system's hard limit, as this process sees it (the proxy's is the same).
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let _p = Sluice::start(&format!(
        "global\n    fd-hard-limit 1500\n    maxpipes 64\n    nosplice\n    nopoll\n    nokqueue\n    noevports\n    tune.pipesize 64k\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s 127.0.0.1:9\n",
        sock.display()
    ));
    let info = Sluice::cli(&sock, "show info");
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {info}"))
    };
    let limit = hard.min(1500);
    assert_eq!(field("Ulimit-n"), limit);
    assert!(field("Maxconn") * 2 <= limit, "{info}");
    assert_eq!((field("Maxpipes"), field("PipesUsed")), (64, 0));
}
