//! The HTTP/2 front through the real binary: curl over TLS with ALPN, the `h2` crate's
//! client on `proto h2` binds (many streams on one connection, flow control, large bodies,
//! trailers, GOAWAY at a soft stop), and raw frames where the point is a misbehaving client
//! (malformed streams, a rapid-reset flood, SETTINGS and PING floods).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 client connection (prior knowledge) to `addr`; its driver runs in the
/// background and its end is reported through the handle.
async fn h2_connect(
    addr: SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    (send, tokio::spawn(conn))
}

/// An HTTP/2 client connection whose streams start with a receive window of `window`
/// bytes (a slow reader's).
async fn h2_connect_window(addr: SocketAddr, window: u32) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// The response body of a GET of `path` on a new connection whose streams start with a
/// receive window of `window` bytes.
async fn body_with_window(addr: SocketAddr, window: u32, path: &str) -> h2::RecvStream {
    let send = h2_connect_window(addr, window).await;
    let (res, _) = send
        .ready()
        .await
        .unwrap()
        .send_request(get(path), true)
        .unwrap();
    res.await.unwrap().into_body()
}

fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://h2.test{path}"))
        .body(())
        .unwrap()
}

/// Sends a body-less request and reads the whole response: status, headers, body.
async fn fetch(
    send: &mut h2::client::SendRequest<Bytes>,
    req: http::Request<()>,
) -> Result<(http::response::Parts, Vec<u8>), h2::Error> {
    let (res, _) = send.clone().ready().await?.send_request(req, true)?;
    let (parts, mut body) = res.await?.into_parts();
    let mut out = Vec::new();
    while let Some(d) = body.data().await {
        let d = d?;
        body.flow_control().release_capacity(d.len())?;
        out.extend_from_slice(&d);
    }
    Ok((parts, out))
}

fn curl(args: &[&str]) -> String {
    let out = std::process::Command::new("curl")
        .args(["-s", "-k", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn alpn_chooses_http2_or_http1_on_one_tls_bind() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} ssl crt {pem} alpn h2,http/1.1\n {{fe}} ssl crt {pem}\n\
         http-response set-header X-Proto %[ssl_fc_alpn]\n default_backend be\n\
         backend be\n server s {}\n",
        origin.addr
    ));
    let h2_url = format!("https://localhost:{}/a", p.addrs[0].port());
    let resolve = format!("localhost:{}:127.0.0.1", p.addrs[0].port());
    let fmt = "%{http_version} %{http_code} %header{x-proto} ";
    let out = curl(&[
        "--http2",
        "--resolve",
        &resolve,
        "-w",
        fmt,
        "-o",
        "/dev/null",
        &h2_url,
    ]);
    assert_eq!(out, "2 200 h2 ", "HTTP/2 through ALPN");
    let out = curl(&[
        "--http1.1",
        "--resolve",
        &resolve,
        "-w",
        fmt,
        "-o",
        "/dev/null",
        &h2_url,
    ]);
    assert_eq!(out, "1.1 200 http/1.1 ", "HTTP/1.1 on the same bind");
    // A bind that does not offer h2 stays HTTP/1.1 whatever the client asks.
    let plain_url = format!("https://localhost:{}/b", p.addrs[1].port());
    let resolve = format!("localhost:{}:127.0.0.1", p.addrs[1].port());
    let out = curl(&[
        "--http2",
        "--resolve",
        &resolve,
        "-w",
        fmt,
        "-o",
        "/dev/null",
        &plain_url,
    ]);
    assert!(out.starts_with("1.1 200 "), "{out}");
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(targets, ["/a", "/a", "/b"]);
    assert_eq!(
        origin.requests()[0].header("host"),
        Some(&*format!("localhost:{}", p.addrs[0].port()))
    );
}

#[test]
fn streams_of_one_connection_go_through_rules_routing_and_logs() {
    let a = Origin::start("A");
    let b = Origin::with_handler(
        "B",
        Arc::new(|r: &Received| {
            ok_response(&format!(
                "B {} cookie={}",
                r.target,
                r.header("cookie").unwrap_or("-")
            ))
            .into()
        }),
    );
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n nbthread 2\n log stdout format raw local0\n stats socket {}\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n log global\n\
         log-format \"%ci %HM %HU %HV %ST %b\"\n\
         http-request deny if {{ path_beg /forbidden }}\n\
         http-request set-var(txn.ver) req.ver\n\
         http-response set-header X-Stream %[var(txn.ver)]\n\
         use_backend bb if {{ path_beg /b/ }}\n default_backend ba\n\
         backend ba\n server a {}\n backend bb\n server b {}\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    runtime().block_on(async {
        let (mut send, _conn) = h2_connect(p.addr()).await;
        let mut tasks = Vec::new();
        for i in 0..40 {
            let mut s = send.clone();
            let path = if i % 2 == 0 {
                format!("/a/{i}")
            } else {
                format!("/b/{i}")
            };
            tasks.push(tokio::spawn(async move {
                let req = http::Request::get(format!("http://h2.test{path}"))
                    .header("cookie", "x=1")
                    .header("cookie", "y=2")
                    .body(())
                    .unwrap();
                (path, fetch(&mut s, req).await)
            }));
        }
        for t in tasks {
            let (path, res) = t.await.unwrap();
            let (parts, body) = res.expect("a response");
            assert_eq!(parts.status, 200);
            assert_eq!(parts.headers["x-stream"], "2.0", "req.ver");
            let body = String::from_utf8(body).unwrap();
            if path.starts_with("/a/") {
                assert_eq!(body, format!("A {path}"));
            } else {
                assert_eq!(body, format!("B {path} cookie=x=1; y=2"), "cookies joined");
            }
        }
        let (parts, _) = fetch(&mut send, get("/forbidden")).await.unwrap();
        assert_eq!(parts.status, 403);
        // Later streams are not a connection's first request: they reuse idle server
        // connections (http-reuse safe), as later requests of an HTTP/1.1 connection do.
        let (_, first) = fetch(&mut send, get("/a/seq")).await.unwrap();
        assert_eq!(first, b"A /a/seq");
        let opened = a.conns();
        for _ in 0..10 {
            fetch(&mut send, get("/a/seq")).await.unwrap();
        }
        assert_eq!(
            a.conns(),
            opened,
            "sequential streams opened no server connection"
        );
    });
    assert_eq!(a.count(), 31);
    assert_eq!(b.count(), 20);
    assert!(a
        .requests()
        .iter()
        .all(|r| r.header("host") == Some("h2.test")));
    wait_until("every stream logged", || p.stdout().lines().count() >= 52);
    let out = p.stdout();
    // HAProxy's HTTP/2 target is in absolute form (its reg-test
    // http-messaging/scheme_based_normalize).
    assert!(
        out.contains("127.0.0.1 GET http://h2.test/b/1 HTTP/2.0 200 bb"),
        "{out}"
    );
    assert!(
        out.contains("127.0.0.1 GET http://h2.test/forbidden HTTP/2.0 403 fe"),
        "{out}"
    );
    // show stat's HTTP/2 module: one connection, 52 streams, no HTTP/1 connection.
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(
        stat_field(&csv, "fe", "FRONTEND", "h2_total_connections"),
        "1"
    );
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "h2_headers_rcvd"), "52");
    assert_eq!(
        stat_field(&csv, "fe", "FRONTEND", "h1_total_connections"),
        "0"
    );
}

/// A stream's head reaches the rules as the `h2` crate decoded it, never as text: what
/// HTTP/1.1 would refuse for its size is refused as HTTP/1.1 refuses it (431 past 100
/// fields), and what rules read of the head (`:authority` as `Host`, the method, the
/// path, the body's length) is the stream's.
#[test]
fn a_stream_head_is_read_as_the_client_sent_it() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            ok_response(&format!(
                "{} {} host={} len={}",
                r.method,
                r.target,
                r.header("host").unwrap_or("-"),
                r.body.len()
            ))
            .into()
        }),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n\
         http-request set-var-fmt(txn.seen) \"%[method] %[req.hdr(host)] %[path]\"\n\
         http-response set-header x-seen %[var(txn.seen)]\n\
         default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut send, _conn) = h2_connect(p.addr()).await;
        let (parts, body) = fetch(&mut send, get("/a/b?c=1")).await.unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["x-seen"], "GET h2.test /a/b");
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "GET /a/b?c=1 host=h2.test len=0"
        );
        // A body with a length, sent in two frames.
        let req = http::Request::post("http://up.test/up")
            .header("content-length", "10")
            .body(())
            .unwrap();
        let (res, mut up) = send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(req, false)
            .unwrap();
        up.send_data(Bytes::from_static(b"01234"), false).unwrap();
        up.send_data(Bytes::from_static(b"56789"), true).unwrap();
        let rsp = res.await.unwrap();
        assert_eq!(rsp.headers()["x-seen"], "POST up.test /up");
        let mut body = rsp.into_body();
        let mut got = Vec::new();
        while let Some(d) = body.data().await {
            got.extend_from_slice(&d.unwrap());
        }
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "POST /up host=up.test len=10"
        );
        // 101 fields: refused as an HTTP/1.1 head with that many would be.
        let mut many = http::Request::get("http://h2.test/many");
        for i in 0..101 {
            many = many.header(format!("x-f{i}"), "v");
        }
        let (parts, _) = fetch(&mut send, many.body(()).unwrap()).await.unwrap();
        assert_eq!(parts.status, 431);
    });
    assert!(origin.requests().iter().all(|r| r.target != "/many"));
}

/// The response head an HTTP/2 client gets is made for it from the server's and the rules'
/// edits (no text): rules' fields, a compressed body's fields (`content-encoding`, `vary`,
/// a weakened `etag`) and the body itself, whole.
#[test]
fn a_response_head_is_made_for_the_stream() {
    let text = "compress me please, ".repeat(200);
    let body = text.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |_r: &Received| {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\
                 ETag: \"v1\"\r\nX-Server: Kept\r\nX-Drop: 1\r\n\r\n{}",
                body.len(),
                body
            )
            .into_bytes()
            .into()
        }),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n\
         http-request set-var(txn.path) path\n\
         http-response del-header x-drop\n\
         http-response set-status 203 if {{ var(txn.path) /status }}\n\
         default_backend be\nbackend be\n compression algo gzip\n\
         compression type text/plain\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut send, _conn) = h2_connect(p.addr()).await;
        let req = http::Request::get("http://h2.test/status")
            .header("accept-encoding", "gzip")
            .body(())
            .unwrap();
        let (parts, body) = fetch(&mut send, req).await.unwrap();
        assert_eq!(parts.status, 203);
        let h = &parts.headers;
        assert_eq!(h["x-server"], "Kept");
        assert!(!h.contains_key("x-drop"));
        assert_eq!(h["content-encoding"], "gzip");
        assert_eq!(h["vary"], "Accept-Encoding");
        assert_eq!(h["etag"], "W/\"v1\"");
        assert!(!h.contains_key("content-length"), "the length changed");
        let mut plain = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain)
            .unwrap();
        assert_eq!(plain, text);
        // Without `accept-encoding`: the server's length, the body as it is.
        let (parts, body) = fetch(&mut send, get("/plain")).await.unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(
            parts.headers["content-length"],
            text.len().to_string().as_str()
        );
        assert_eq!(body, text.as_bytes());
    });
}

/// The same rules over HTTP/1.1, HTTP/2 and HTTP/3, table-driven: every request of the
/// table gets the same answer and reaches the server the same way over the three protocols
/// (rules reading
/// the method, path, query, `Host`, cookies, repeated fields; deny, redirect, return,
/// set-path, del-header, routing on a header; response rules reading the server's head,
/// the request as it was sent, and the response as the rules before them edited it;
/// `http-after-response` rules over the server's and the proxy's own answers).
#[test]
fn rules_treat_http1_http2_and_http3_requests_alike() {
    let echo = |name: &'static str| {
        Origin::with_handler(
            name,
            Arc::new(move |r: &Received| {
                let body = format!(
                    "{name} {} seen=[{}] drop={} cookie={}",
                    r.target,
                    r.header("x-seen").unwrap_or("-"),
                    r.header("x-drop").unwrap_or("-"),
                    r.header("cookie").unwrap_or("-"),
                );
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Origin: {name}\r\n\
                     X-Origin-Secret: 1\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
                .into()
            }),
        )
    };
    let (a, b) = (echo("A"), echo("B"));
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let (held, quic) = quic_port();
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}}\n {{fe}} proto h2\n bind quic4@127.0.0.1:{quic} ssl crt {pem}\n\
         http-request set-header x-seen \"%[method] %[path] %[query] %[req.hdr(host)] \
         %[url_param(a)] %[req.cook(c)] %[req.hdr_cnt(x-multi)] %[req.fhdr(user-agent)]\"\n\
         http-request deny if {{ path_beg /deny }}\n\
         http-request redirect location /moved if {{ path /old }}\n\
         http-request return status 200 content-type text/plain lf-string \"returned %[path]\" if {{ path /ret }}\n\
         http-request del-header x-drop if {{ path_beg /rw }}\n\
         http-request set-path /rewritten%[path] if {{ path_beg /rw }}\n\
         http-request set-method PUT if {{ path_beg /rewritten }}\n\
         http-response set-header x-resp \"%[status] %[res.hdr(x-origin)]\"\n\
         http-response del-header x-origin-secret\n\
         http-response set-header x-req %[method]\n\
         http-response set-header x-resp2 \"%[res.hdr(x-resp)]\"\n\
         http-after-response set-header x-after \"%[status]\"\n\
         use_backend bb if {{ req.hdr(x-route) -m str two }}\n default_backend ba\n\
         backend ba\n server a {}\nbackend bb\n server b {}\n",
        a.addr, b.addr
    ));
    drop(held);
    type Case = (&'static str, &'static [(&'static str, &'static str)]);
    let cases: &[Case] = &[
        (
            "/a?b=1&a=2",
            &[
                ("cookie", "c=3"),
                ("x-drop", "1"),
                ("x-multi", "m1"),
                ("x-multi", "m2"),
                ("user-agent", "t/1"),
            ],
        ),
        ("/deny/x", &[]),
        ("/old", &[]),
        ("/ret", &[]),
        ("/rw/x?q", &[("x-drop", "1")]),
        ("/routed", &[("x-route", "two")]),
    ];
    // What a client learns of one exchange: the status, the fields rules act on, the body.
    let summary = |status: u16, field: &dyn Fn(&str) -> Option<String>, body: &[u8]| {
        let names = [
            "x-resp",
            "location",
            "content-type",
            "x-origin-secret",
            "x-req",
            "x-resp2",
            "x-after",
        ];
        let fields: Vec<String> = names
            .iter()
            .map(|n| format!("{n}={}", field(n).unwrap_or_else(|| "-".into())))
            .collect();
        format!(
            "{status} {} {}",
            fields.join(" "),
            String::from_utf8_lossy(body)
        )
    };
    let over_h1: Vec<String> = cases
        .iter()
        .map(|(path, fields)| {
            let mut req = format!("GET {path} HTTP/1.1\r\nHost: h2.test\r\n");
            for (n, v) in *fields {
                req.push_str(&format!("{n}: {v}\r\n"));
            }
            req.push_str("Connection: close\r\n\r\n");
            let (r, _) = raw_exchange(p.addrs[0], req.as_bytes());
            let r = r.expect("an answer over HTTP/1.1");
            summary(r.status, &|n| r.header(n).map(str::to_string), &r.body)
        })
        .collect();
    let over_h2: Vec<String> = runtime().block_on(async {
        let (mut send, _conn) = h2_connect(p.addrs[1]).await;
        let mut out = Vec::new();
        for (path, fields) in cases {
            let mut req = http::Request::get(format!("http://h2.test{path}"));
            for (n, v) in *fields {
                req = req.header(*n, *v);
            }
            let (parts, body) = fetch(&mut send, req.body(()).unwrap()).await.unwrap();
            let field = |n: &str| {
                parts
                    .headers
                    .get(n)
                    .map(|v| v.to_str().unwrap().to_string())
            };
            out.push(summary(parts.status.as_u16(), &field, &body));
        }
        out
    });
    assert_eq!(over_h1, over_h2);
    let requests: Vec<serde_json::Value> = cases
        .iter()
        .map(|(path, fields)| {
            serde_json::json!({"path": path, "authority": "h2.test", "sequential": true,
                               "headers": fields.iter().map(|(n, v)| [n, v]).collect::<Vec<_>>()})
        })
        .collect();
    let over_h3: Vec<String> = h3_requests(quic, &serde_json::Value::from(requests))
        .iter()
        .map(|r| {
            let status = r["status"].as_u64().unwrap() as u16;
            summary(
                status,
                &|n| h3_field(r, n),
                r["body"].as_str().unwrap().as_bytes(),
            )
        })
        .collect();
    assert_eq!(over_h1, over_h3);
    // And the table says what it should (not only the same wrong thing twice).
    assert!(
        over_h1[0].contains("seen=[GET /a b=1&a=2 h2.test 2 3 2 t/1] drop=1 cookie=c=3"),
        "{}",
        over_h1[0]
    );
    assert!(
        over_h1[0].starts_with("200 x-resp=200 A "),
        "{}",
        over_h1[0]
    );
    assert!(over_h1[0].contains("x-origin-secret=-"), "{}", over_h1[0]);
    assert!(over_h1[1].starts_with("403 "), "{}", over_h1[1]);
    assert!(
        over_h1[2].starts_with("302 x-resp=- location=/moved"),
        "{}",
        over_h1[2]
    );
    assert!(over_h1[3].ends_with("returned /ret"), "{}", over_h1[3]);
    assert!(
        over_h1[4].contains("A /rewritten/rw/x?q "),
        "{}",
        over_h1[4]
    );
    assert!(over_h1[4].contains("drop=-"), "{}", over_h1[4]);
    assert!(over_h1[5].contains(" B /routed "), "{}", over_h1[5]);
    // Response rules read the request as sent (its method rewritten) and the response as
    // the rule before them left it; after-response rules see every answer.
    for (i, method, origin) in [(0, "GET", "A"), (4, "PUT", "A"), (5, "GET", "B")] {
        let want = format!("x-req={method} x-resp2=200 {origin} x-after=200 ");
        assert!(over_h1[i].contains(&want), "{want}: {}", over_h1[i]);
    }
    for (i, status) in [(1, "403"), (2, "302"), (3, "200")] {
        let want = format!("x-req=- x-resp2=- x-after={status} ");
        assert!(over_h1[i].contains(&want), "{want}: {}", over_h1[i]);
    }
}

/// A cleartext `proto h2` port reads the client's preface and the header of its SETTINGS
/// frame before answering anything: an HTTP/1 request, or a HEADERS frame where SETTINGS
/// must come first, gets the connection closed without a byte (HAProxy closes too; before,
/// the `h2` crate's SETTINGS went out first, and HEADERS first was served).
#[test]
fn a_proto_h2_port_closes_on_anything_but_the_preface_and_settings() {
    use std::io::{Read, Write};
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 5s\n timeout server 5s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let answer = |first: &[u8]| {
        let mut c = std::net::TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(first).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        got
    };
    assert_eq!(answer(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), b"");
    // A HEADERS frame (type 1) right after the preface.
    let headers_first = [PREFACE, &[0, 0, 0, 1, 5, 0, 0, 0, 1]].concat();
    assert_eq!(answer(&headers_first), b"");
    // The preface and an empty SETTINGS frame: the server's SETTINGS comes back.
    let mut c = std::net::TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(&[PREFACE, &[0, 0, 0, 4, 0, 0, 0, 0, 0]].concat())
        .unwrap();
    let mut head = [0u8; 9];
    c.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "a SETTINGS frame first: {head:?}");
    assert_eq!(origin.count(), 0);
}

/// `timeout client` is an inactivity timeout on an HTTP/2 stream too: a client that
/// keeps reading a response slowly but steadily (its window reopened 1 kB at a time, five
/// times a second) is served to the end, although the whole takes several times the
/// timeout; one that stops reading is cut when the timeout passes without progress.
#[test]
fn a_slow_but_steady_http2_reader_is_served_to_the_end() {
    const SIZE: usize = 24 * 1024;
    let payload: Vec<u8> = (0..SIZE).map(|i| (i % 253) as u8).collect();
    let reply = {
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n").into_bytes();
        r.extend_from_slice(&payload);
        r
    };
    let origin = Origin::with_handler("o", Arc::new(move |_: &Received| reply.clone().into()));
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 1s\n timeout server 5s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let mut body = body_with_window(p.addr(), 4096, "/slow").await;
        let mut got = Vec::new();
        let started = std::time::Instant::now();
        while let Some(d) = body.data().await {
            let d = d.expect("the stream was not reset");
            got.extend_from_slice(&d);
            // Credit back in 1 kB steps, one every 200 ms.
            let mut left = d.len();
            while left > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let n = left.min(1024);
                body.flow_control().release_capacity(n).unwrap();
                left -= n;
            }
        }
        assert!(
            got == payload,
            "the body arrived whole ({} bytes)",
            got.len()
        );
        // It took longer than the timeout: the timeout did not count the time spent reading.
        assert!(started.elapsed() > Duration::from_secs(1));
        // A reader that stops giving credit back: its stream is reset once nothing moved
        // for the timeout.
        let mut body = body_with_window(p.addr(), 4096, "/stuck").await;
        let first = body.data().await.unwrap().unwrap();
        assert!(!first.is_empty());
        let next = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match body.data().await {
                    Some(Ok(_)) => {}
                    other => return other,
                }
            }
        })
        .await
        .expect("the server gave up on the stuck stream");
        assert!(matches!(next, Some(Err(_))), "{next:?}");
    });
}

#[test]
fn large_bodies_cross_under_flow_control_with_a_slow_reader() {
    const DOWN: usize = 3 << 20;
    let payload: Vec<u8> = (0..DOWN).map(|i| (i * 7 % 251) as u8).collect();
    let reply = {
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {DOWN}\r\n\r\n").into_bytes();
        r.extend_from_slice(&payload);
        r
    };
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            if r.method == "POST" {
                ok_response(&format!("got {} bytes, sum {}", r.body.len(), sum(&r.body))).into()
            } else {
                reply.clone().into()
            }
        }),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 20s\n timeout server 20s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (send, _conn) = h2_connect(p.addr()).await;
        // Download, reading slowly: the client's window closes and reopens many times.
        let (res, _) = send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(get("/big"), true)
            .unwrap();
        let mut body = res.await.unwrap().into_body();
        let mut got = Vec::new();
        while let Some(d) = body.data().await {
            let d = d.unwrap();
            got.extend_from_slice(&d);
            if got.len() < 512 * 1024 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            body.flow_control().release_capacity(d.len()).unwrap();
        }
        assert!(
            got == payload,
            "the body arrived whole ({} bytes)",
            got.len()
        );
        // Uploads: with a length, and without one (relayed chunked).
        let up: Vec<u8> = (0..(2 << 20)).map(|i| (i % 239) as u8).collect();
        for with_length in [true, false] {
            let mut req = http::Request::post("http://h2.test/up");
            if with_length {
                req = req.header("content-length", up.len());
            }
            let (res, mut stream) = send
                .clone()
                .ready()
                .await
                .unwrap()
                .send_request(req.body(()).unwrap(), false)
                .unwrap();
            let mut rest = Bytes::from(up.clone());
            while !rest.is_empty() {
                stream.reserve_capacity(rest.len().min(64 * 1024));
                let n = std::future::poll_fn(|cx| stream.poll_capacity(cx))
                    .await
                    .unwrap()
                    .unwrap();
                let part = rest.split_to(n.min(rest.len()));
                stream.send_data(part, rest.is_empty()).unwrap();
            }
            let mut body = res.await.unwrap().into_body();
            let mut text = Vec::new();
            while let Some(d) = body.data().await {
                text.extend_from_slice(&d.unwrap());
            }
            assert_eq!(
                String::from_utf8(text).unwrap(),
                format!("got {} bytes, sum {}", up.len(), sum(&up))
            );
        }
    });
    let posts: Vec<Received> = origin
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts[0].header("content-length"), Some("2097152"));
    assert_eq!(posts[1].header("transfer-encoding"), Some("chunked"));
}

fn sum(b: &[u8]) -> u64 {
    b.iter().map(|&x| x as u64).sum()
}

#[test]
fn trailers_pass_both_ways() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            let seen = r
                .trailers
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: grpc-status\r\n\r\n\
                 {:x}\r\n{seen}\r\n0\r\ngrpc-status: 0\r\n\r\n",
                seen.len()
            )
            .into_bytes()
            .into()
        }),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (send, _conn) = h2_connect(p.addr()).await;
        let req = http::Request::post("http://h2.test/rpc").body(()).unwrap();
        let (res, mut stream) = send
            .ready()
            .await
            .unwrap()
            .send_request(req, false)
            .unwrap();
        stream
            .send_data(Bytes::from_static(b"hello"), false)
            .unwrap();
        let mut t = http::HeaderMap::new();
        t.insert("x-checksum", "abc".parse().unwrap());
        stream.send_trailers(t).unwrap();
        let mut body = res.await.unwrap().into_body();
        let mut text = Vec::new();
        while let Some(d) = body.data().await {
            text.extend_from_slice(&d.unwrap());
        }
        assert_eq!(String::from_utf8(text).unwrap(), "x-checksum=abc");
        let trailers = body.trailers().await.unwrap().expect("response trailers");
        assert_eq!(trailers["grpc-status"], "0");
    });
    assert_eq!(origin.requests()[0].body, b"hello");
}

#[test]
fn a_soft_stop_sends_goaway_and_lets_the_stream_in_flight_finish() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|_: &Received| Reply::Delayed(Duration::from_millis(1500), ok_response("late"))),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 30s\n timeout server 30s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut send, conn) = h2_connect(p.addr()).await;
        let (res, _) = send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(get("/slow"), true)
            .unwrap();
        wait_until_async(|| origin.count() == 1).await;
        assert_eq!(unsafe { libc::kill(p.pid() as i32, libc::SIGUSR1) }, 0);
        let res = res.await.expect("the stream in flight is answered");
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let mut text = Vec::new();
        while let Some(d) = body.data().await {
            text.extend_from_slice(&d.unwrap());
        }
        assert_eq!(text, b"late");
        // The server said GOAWAY: the connection ends cleanly, and no new stream is served.
        let end = tokio::time::timeout(TIMEOUT, conn)
            .await
            .expect("the connection ends");
        assert!(end.unwrap().is_ok(), "a graceful end");
        assert!(fetch(&mut send, get("/after")).await.is_err());
    });
    assert_eq!(origin.count(), 1);
}

/// A client that goes while its stream waits for the server: the stream is still served to
/// its end (the server's answer read, the client found gone) and logged, although the
/// connection that carried it is over.
#[test]
fn a_stream_whose_client_went_is_still_logged() {
    stream_outliving_its_connection(|client, _| drop(client));
}

/// The same when `shutdown session` ends the connection.
#[test]
fn a_stream_whose_connection_was_shut_down_is_still_logged() {
    stream_outliving_its_connection(|client, sock| {
        let port = client.local_addr().unwrap().port();
        let listing = Sluice::cli(sock, "show sess");
        let id = listing
            .lines()
            .find(|l| l.contains(&format!("src=127.0.0.1:{port} ")))
            .and_then(|l| l.split(':').next())
            .unwrap_or_else(|| panic!("no session in {listing}"));
        assert_eq!(Sluice::cli(sock, &format!("shutdown session {id}")), "\n");
    });
}

/// Ends the connection of a stream waiting for its server's answer, then lets the server
/// answer: the stream's log line comes then.
fn stream_outliving_its_connection(end: impl FnOnce(TcpStream, &std::path::Path)) {
    // The server answers once the gate opens.
    let release = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let gate = release.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |_: &Received| {
            let (open, opened) = &*gate;
            let _open = opened
                .wait_while(open.lock().unwrap(), |open| !*open)
                .unwrap();
            ok_response("late").into()
        }),
    );
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n log stdout format raw local0\n stats socket {} level admin\n\
         defaults\n mode http\n timeout client 30s\n timeout server 30s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n log global\n log-format \"%HU %ST %ts\"\n\
         default_backend be\nbackend be\n server s {}\n",
        sock.display(),
        origin.addr
    ));
    let h2_open = || {
        stat_field(
            &Sluice::cli(&sock, "show stat"),
            "fe",
            "FRONTEND",
            "h2_open_connections",
        )
    };
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    raw_get(&mut out, 1, "/held");
    s.write_all(&out).unwrap();
    wait_until("the request at the server", || origin.count() == 1);
    assert_eq!(h2_open(), "1");
    end(s, &sock);
    // The server answers only once the proxy closed the connection: the stream outlives
    // it.
    wait_until("the client connection closed", || h2_open() == "0");
    assert!(!p.stdout().contains("/held"));
    *release.0.lock().unwrap() = true;
    release.1.notify_all();
    wait_until("the stream's log line", || p.stdout().contains("/held"));
    // Answered by the server, the client gone meanwhile: `CD`, as HAProxy logs it.
    assert_eq!(p.stdout().trim_end(), "http://h2.test/held 200 CD");
}

async fn wait_until_async(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- raw frames ----

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const DATA: u8 = 0;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK block of literal fields without indexing (no Huffman coding).
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in fields {
        b.push(0);
        b.push(n.len() as u8);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    b
}

fn request_fields(path: &str) -> Vec<(&str, &str)> {
    vec![
        (":method", "GET"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "h2.test"),
    ]
}

/// Adds a GET of `path` that ends stream `id` (one HEADERS frame).
fn raw_get(out: &mut Vec<u8>, id: u32, path: &str) {
    frame(
        out,
        HEADERS,
        END_HEADERS | END_STREAM,
        id,
        &hpack(&request_fields(path)),
    );
}

/// Opens a raw HTTP/2 connection: preface and an empty SETTINGS.
fn raw_h2(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut hello = PREFACE.to_vec();
    frame(&mut hello, SETTINGS, 0, 0, &[]);
    s.write_all(&hello).unwrap();
    s
}

/// Reads frames until `stop` says so or the connection ends; returns (type, flags,
/// stream, payload) of each frame read.
fn read_frames(
    s: &mut TcpStream,
    mut stop: impl FnMut(u8, u32, &[u8]) -> bool,
) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut head = [0u8; 9];
    loop {
        if s.read_exact(&mut head).is_err() {
            return frames;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; len];
        if s.read_exact(&mut payload).is_err() {
            return frames;
        }
        let done = stop(head[3], stream, &payload);
        frames.push((head[3], head[4], stream, payload));
        if done {
            return frames;
        }
    }
}

fn error_code(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(payload[at..at + 4].try_into().unwrap())
}

#[test]
fn malformed_streams_are_refused_and_never_reach_a_server() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    let post = |path: &'static str, extra: (&'static str, &'static str)| {
        let mut f = request_fields(path);
        f[0] = (":method", "POST");
        f.push(extra);
        f
    };
    let with = |path: &'static str, extra: (&'static str, &'static str)| {
        let mut f = request_fields(path);
        f.push(extra);
        f
    };
    // Each on a connection of its own: a stream error resets the stream, and some (a field
    // name with upper case, which breaks the header block) end the whole connection.
    type Fields = Vec<(&'static str, &'static str)>;
    let cases: Vec<(&str, Fields, Option<&[u8]>)> = vec![
        (
            "a connection-specific field",
            with("/bad1", ("connection", "keep-alive")),
            None,
        ),
        (
            "transfer-encoding",
            with("/bad2", ("transfer-encoding", "chunked")),
            None,
        ),
        (
            "te other than trailers",
            with("/bad3", ("te", "gzip")),
            None,
        ),
        (
            "an upper-case field name",
            with("/bad4", ("X-Upper", "1")),
            None,
        ),
        (
            "no :path",
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", "h2.test"),
            ],
            None,
        ),
        (
            "Content-Length against DATA",
            post("/bad6", ("content-length", "10")),
            Some(b"12345"),
        ),
    ];
    for (what, fields, data) in cases {
        let mut s = raw_h2(p.addr());
        let mut out = Vec::new();
        let flags = if data.is_some() {
            END_HEADERS
        } else {
            END_HEADERS | END_STREAM
        };
        frame(&mut out, HEADERS, flags, 1, &hpack(&fields));
        if let Some(d) = data {
            frame(&mut out, DATA, END_STREAM, 1, d);
        }
        s.write_all(&out).unwrap();
        let frames = read_frames(&mut s, |kind, _, _| kind == RST_STREAM || kind == GOAWAY);
        let refused = frames.iter().find_map(|(k, _, st, payload)| match *k {
            RST_STREAM if *st == 1 => Some(error_code(payload, 0)),
            GOAWAY => Some(error_code(payload, 4)),
            _ => None,
        });
        assert_eq!(
            refused,
            Some(1),
            "{what}: PROTOCOL_ERROR; frames: {frames:?}"
        );
    }
    // An empty `:scheme` is answered 400, as HAProxy answers it.
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    let mut fields = request_fields("/noscheme");
    for f in fields.iter_mut().filter(|(n, _)| *n == ":scheme") {
        f.1 = "";
    }
    frame(
        &mut out,
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &hpack(&fields),
    );
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s, |kind, stream, _| {
        (kind == DATA && stream == 1) || kind == RST_STREAM
    });
    // `:status: 400` is HPACK's static entry 12 (0x8c, indexed).
    assert!(
        frames
            .iter()
            .any(|(k, _, st, p)| *k == HEADERS && *st == 1 && p.first() == Some(&0x8c)),
        "a 400: {frames:?}"
    );
    assert!(
        !frames.iter().any(|(k, _, _, _)| *k == RST_STREAM),
        "{frames:?}"
    );
    // A good request on a connection whose other stream was refused is served.
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    frame(
        &mut out,
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &hpack(&with("/bad", ("connection", "x"))),
    );
    raw_get(&mut out, 3, "/good");
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s, |kind, stream, _| kind == DATA && stream == 3);
    assert!(frames
        .iter()
        .any(|(k, _, st, _)| *k == RST_STREAM && *st == 1));
    assert!(frames.iter().any(|(k, _, st, _)| *k == HEADERS && *st == 3));
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        targets,
        ["/good"],
        "only the good request reached the server"
    );
}

#[test]
fn show_stat_counts_the_frames_that_crossed_the_wire() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n stats socket {}\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        sock.display(),
        origin.addr
    ));
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    // Received: SETTINGS (raw_h2's) and its acknowledgement of the proxy's.
    frame(&mut out, SETTINGS, 1, 0, &[]);
    // A GET; a POST whose body comes in two DATA frames; a stream refused for a
    // connection-specific field (RST_STREAM PROTOCOL_ERROR); a stream the client resets.
    raw_get(&mut out, 1, "/get");
    let mut post = request_fields("/post");
    post[0] = (":method", "POST");
    frame(&mut out, HEADERS, END_HEADERS, 3, &hpack(&post));
    frame(&mut out, DATA, 0, 3, b"abc");
    frame(&mut out, DATA, END_STREAM, 3, b"de");
    let mut bad = request_fields("/bad");
    bad.push(("connection", "x"));
    frame(&mut out, HEADERS, END_HEADERS | END_STREAM, 5, &hpack(&bad));
    s.write_all(&out).unwrap();
    let answered = read_frames(&mut s, |kind, stream, _| kind == RST_STREAM && stream == 5);
    assert!(
        answered
            .iter()
            .any(|(k, _, st, p)| *k == RST_STREAM && *st == 5 && error_code(p, 0) == 1),
        "{answered:?}"
    );
    out.clear();
    frame(&mut out, HEADERS, END_HEADERS, 7, &hpack(&post));
    frame(&mut out, RST_STREAM, 0, 7, &8u32.to_be_bytes());
    // The client goes away, then breaks the protocol (a PING must be on stream 0): the
    // proxy answers GOAWAY PROTOCOL_ERROR.
    frame(&mut out, GOAWAY, 0, 0, &[0, 0, 0, 7, 0, 0, 0, 0]);
    frame(&mut out, PING, 0, 1, &[0; 8]);
    s.write_all(&out).unwrap();
    let closing = read_frames(&mut s, |kind, _, _| kind == GOAWAY);
    let goaway = closing
        .iter()
        .find(|(k, ..)| *k == GOAWAY)
        .expect("a GOAWAY");
    assert_eq!(error_code(&goaway.3, 4), 1, "PROTOCOL_ERROR");
    let field = |name: &str| {
        stat_field(&Sluice::cli(&sock, "show stat"), "fe", "FRONTEND", name)
            .parse::<u64>()
            .unwrap()
    };
    wait_until("the GOAWAY counted", || field("h2_goaway_resp") == 1);
    for (name, want) in [
        ("h2_headers_rcvd", 4),
        ("h2_data_rcvd", 2),
        ("h2_settings_rcvd", 2),
        ("h2_rst_stream_rcvd", 1),
        ("h2_goaway_rcvd", 1),
        ("h2_detected_conn_protocol_errors", 1),
        ("h2_detected_strm_protocol_errors", 1),
        ("h2_goaway_resp", 1),
        ("h2_total_connections", 1),
    ] {
        assert_eq!(field(name), want, "{name}");
    }
    // The refused stream's reset, and perhaps others (not errors) as streams end.
    assert!(field("h2_rst_stream_resp") >= 1);
}

/// The process's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Another client gets its answer, over HTTP/1.1, while a flood goes on.
fn others_are_served(p: &Sluice, addr: SocketAddr) {
    let r = common::get(addr, "/other");
    assert_eq!(r.status, 200, "another client is served");
    let _ = p;
}

/// Whether the proxy ends the connection (a close or a reset) before the read timeout.
fn closes(s: &mut TcpStream) -> bool {
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// A proxy for the flood tests: `proto h2` on its first address, HTTP/1 on its second.
fn flood_proxy(origin: &Origin) -> Sluice {
    Sluice::start(&format!(
        "defaults\n mode http\n timeout client 60s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n {{fe}}\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ))
}

/// Frames that ask for no work, made by `one(out, i)` for the i-th: a few, then a
/// request, are served; a flood of 1,500 ends its connection (well before `timeout
/// client`) and other clients are served.
fn a_flood_costs_its_connection(p: &Sluice, one: impl Fn(&mut Vec<u8>, u32)) {
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    for i in 0..10 {
        one(&mut out, i);
    }
    raw_get(&mut out, 1, "/few");
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s, |kind, stream, _| kind == HEADERS && stream == 1);
    assert!(
        frames.iter().any(|f| f.0 == HEADERS && f.2 == 1),
        "{frames:?}"
    );
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    for i in 0..1500 {
        one(&mut out, i);
    }
    let _ = s.write_all(&out);
    assert!(closes(&mut s), "the flooding connection is still open");
    others_are_served(p, p.addrs[1]);
}

/// PRIORITY frames ask for no work (the `h2` crate ignores them): a client that sends more
/// than a thousand within ten seconds loses its connection, and nobody else notices. A
/// handful, as browsers have sent, changes nothing.
#[test]
fn a_flood_of_frames_that_ask_for_no_work_costs_its_connection() {
    const PRIORITY: u8 = 2;
    let origin = Origin::start("o");
    let p = flood_proxy(&origin);
    // Each on a stream of its own, depending on stream 0, weight 16.
    a_flood_costs_its_connection(&p, |out, i| {
        frame(out, PRIORITY, 0, 3 + 2 * i, &[0, 0, 0, 0, 15]);
    });
}

#[test]
fn a_rapid_reset_flood_costs_its_connection_and_nothing_else() {
    rapid_reset_flood(END_HEADERS | END_STREAM, "GET", "");
}

/// The same with uploads the proxy waits for (`option http-buffer-request`): each stream's
/// HEADERS announces a body, then the stream is reset. The stream's session sees the reset
/// first (reading the body) and ends before its watch looks: the reset counts all the same.
#[test]
fn a_rapid_reset_flood_of_uploads_costs_its_connection() {
    rapid_reset_flood(END_HEADERS, "POST", " option http-buffer-request\n");
}

fn rapid_reset_flood(flags: u8, method: &'static str, frontend: &str) {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n {{fe}}\n{frontend} default_backend be\n\
         backend be\n server s {}\n",
        origin.addr
    ));
    others_are_served(&p, p.addrs[1]);
    let before = rss_kib(p.pid());
    let mut s = raw_h2(p.addr());
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut sent = 0u32;
            for round in 0..100u32 {
                let mut out = Vec::new();
                for i in 0..200u32 {
                    let id = 1 + 2 * (round * 200 + i);
                    let mut fields = request_fields("/flood");
                    fields[0] = (":method", method);
                    frame(&mut out, HEADERS, flags, id, &hpack(&fields));
                    frame(&mut out, RST_STREAM, 0, id, &8u32.to_be_bytes());
                }
                if w.write_all(&out).is_err() {
                    break;
                }
                sent += 200;
            }
            sent
        })
    };
    let frames = read_frames(&mut s, |kind, _, _| kind == GOAWAY);
    let sent = writer.join().unwrap();
    let goaway = frames
        .iter()
        .find(|(k, ..)| *k == GOAWAY)
        .expect("the flood is answered with GOAWAY");
    assert_eq!(error_code(&goaway.3, 4), 0xb, "ENHANCE_YOUR_CALM");
    others_are_served(&p, p.addrs[1]);
    assert!(
        origin.count() < 1000,
        "{} of {sent} reset streams reached the server",
        origin.count()
    );
    let grown = rss_kib(p.pid()).saturating_sub(before);
    assert!(grown < 32 * 1024, "memory grew by {grown} KiB");
}

#[test]
fn a_client_that_stops_an_upload_it_was_answered_for_is_not_resetting() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n tune.h2.max-concurrent-streams 2\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n http-request deny if {{ path /denied }}\n\
         default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    let mut s = raw_h2(p.addr());
    // Thirty uploads answered 403 at once, each then stopped with RST_STREAM (CANCEL), as
    // a client does with a body nobody reads: far past the reset budget (2 per allowed
    // stream, so 4 here) if these counted as rapid resets.
    for i in 0..30u32 {
        let id = 1 + 2 * i;
        let mut fields = request_fields("/denied");
        fields[0] = (":method", "POST");
        let mut out = Vec::new();
        frame(&mut out, HEADERS, END_HEADERS, id, &hpack(&fields));
        frame(&mut out, DATA, 0, id, &[b'x'; 1000]);
        s.write_all(&out).unwrap();
        let frames = read_frames(&mut s, |kind, stream, _| {
            kind == GOAWAY || (stream == id && kind == HEADERS)
        });
        assert!(
            frames.iter().all(|f| f.0 != GOAWAY),
            "GOAWAY after {i} answered uploads"
        );
        let mut rst = Vec::new();
        frame(&mut rst, RST_STREAM, 0, id, &8u32.to_be_bytes());
        s.write_all(&rst).unwrap();
    }
    let id = 61;
    let mut out = Vec::new();
    raw_get(&mut out, id, "/after");
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s, |kind, stream, _| {
        kind == GOAWAY || (stream == id && kind == HEADERS)
    });
    assert!(
        frames.iter().any(|f| f.0 == HEADERS && f.2 == id),
        "the connection still serves: {:?}",
        frames.iter().map(|f| (f.0, f.2)).collect::<Vec<_>>()
    );
    assert!(frames.iter().all(|f| f.0 != GOAWAY));
    assert_eq!(origin.count(), 1, "only /after reached the server");
}

#[test]
fn settings_and_ping_floods_do_not_starve_other_clients() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n {{fe}}\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    others_are_served(&p, p.addrs[1]);
    let before = rss_kib(p.pid());
    // The flooding client never reads: whatever sluice answers (PING acks, SETTINGS acks)
    // piles up unless it stops reading that connection.
    let s = raw_h2(p.addr());
    s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let flood = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            for i in 0..2000u64 {
                frame(&mut out, PING, 0, 0, &i.to_be_bytes());
                if i % 4 == 0 {
                    // SETTINGS_MAX_CONCURRENT_STREAMS = 100, again and again.
                    frame(&mut out, SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100]);
                }
            }
            let mut written = 0usize;
            for _ in 0..200 {
                if w.write_all(&out).is_err() {
                    break;
                }
                written += out.len();
            }
            written
        })
    };
    for _ in 0..5 {
        others_are_served(&p, p.addrs[1]);
    }
    let written = flood.join().unwrap();
    others_are_served(&p, p.addrs[1]);
    let grown = rss_kib(p.pid()).saturating_sub(before);
    assert!(
        grown < 32 * 1024,
        "memory grew by {grown} KiB after {written} bytes of flood"
    );
    drop(s);
}

#[test]
fn tune_h2_settings_are_announced_and_bad_lines_are_refused() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n tune.h2.max-concurrent-streams 7\n tune.h2.initial-window-size 1048576\n\
         tune.h2.header-table-size 8192\n tune.h2.max-frame-size 32768\n\
         defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    let mut s = raw_h2(p.addr());
    let frames = read_frames(&mut s, |kind, _, _| kind == SETTINGS);
    let settings = &frames.last().unwrap().3;
    let values: Vec<(u16, u32)> = settings
        .chunks(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), error_code(c, 2)))
        .collect();
    for want in [(1, 8192), (3, 7), (4, 1048576), (5, 32768)] {
        assert!(values.contains(&want), "{want:?} in {values:?}");
    }
    let (ok, err) = check_config(
        "frontend fe\n bind :8080 proto h3\n default_backend be\nbackend be\n server s 127.0.0.1:1\n",
    );
    assert!(
        !ok && err.contains(":2") && err.contains("expects h1 or h2"),
        "{err}"
    );
    let (ok, err) = check_config("global\n tune.h2.max-frame-size 100\n");
    assert!(!ok && err.contains(":2") && err.contains("16384"), "{err}");
}

#[test]
fn an_idle_connection_gets_goaway_after_its_keep_alive_timeout() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|_: &Received| Reply::Delayed(Duration::from_millis(600), ok_response("ok"))),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 30s\n timeout server 10s\n timeout connect 5s\n\
         timeout http-keep-alive 300ms\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut send, conn) = h2_connect(p.addr()).await;
        // The stream outlives the keep-alive timeout: the connection is not idle meanwhile.
        let (parts, body) = fetch(&mut send, get("/slow")).await.unwrap();
        assert_eq!((parts.status.as_u16(), body.as_slice()), (200, &b"ok"[..]));
        // Once idle, it is told GOAWAY and ends, well before `timeout client`.
        let started = Instant::now();
        let end = tokio::time::timeout(TIMEOUT, conn)
            .await
            .expect("the connection ends");
        assert!(end.unwrap().is_ok(), "a graceful end");
        assert!(started.elapsed() < Duration::from_secs(15));
    });
}

#[test]
fn a_connection_without_a_stream_ends_after_the_http_request_timeout() {
    // As HAProxy: before its first stream, an idle HTTP/2 connection is waiting for a
    // request (`timeout http-request`), not idle between requests (keep-alive, 30 s here).
    let p = Sluice::start(
        "defaults\n mode http\n timeout client 30s\n timeout server 10s\n timeout connect 5s\n\
         timeout http-keep-alive 30s\n timeout http-request 300ms\n\
         frontend fe\n {fe} proto h2\n default_backend be\nbackend be\n server s 127.0.0.1:9\n",
    );
    runtime().block_on(async {
        let (_send, conn) = h2_connect(p.addr()).await;
        let end = tokio::time::timeout(TIMEOUT, conn)
            .await
            .expect("the connection ends before the keep-alive or client timeout");
        assert!(end.unwrap().is_ok(), "a graceful end (GOAWAY)");
    });
}

/// Sends each of `words` up a tunnel's stream to an echoing server and reads it back, then
/// ends the stream; returns what came down after that, up to the stream's end.
async fn echo_over_stream(
    up: &mut h2::SendStream<Bytes>,
    mut down: h2::RecvStream,
    words: &[&str],
) -> Vec<u8> {
    for word in words {
        up.send_data(Bytes::from(word.to_string()), false).unwrap();
        let got = down.data().await.unwrap().unwrap();
        down.flow_control().release_capacity(got.len()).unwrap();
        assert_eq!(&got[..], word.as_bytes());
    }
    up.send_data(Bytes::new(), true).unwrap();
    let mut rest = Vec::new();
    while let Some(d) = down.data().await {
        rest.extend_from_slice(&d.unwrap());
    }
    rest
}

#[test]
fn websockets_open_over_http2_streams() {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = tunnel_echo_server(heads.clone());
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 30s\n timeout server 30s\n timeout connect 5s\n\
         timeout tunnel 30s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {server}\n"
    ));
    runtime().block_on(async {
        let (send, _conn) = h2_connect(p.addr()).await;
        let mut send = send.ready().await.unwrap();
        // The server's SETTINGS allow extended CONNECT (RFC 8441).
        wait_until_async(|| send.is_extended_connect_protocol_enabled()).await;
        let open = |path: &str, protocol: &str| {
            let mut req = http::Request::builder()
                .method(http::Method::CONNECT)
                .uri(format!("http://h2.test{path}"))
                .header("sec-websocket-version", "13")
                .body(())
                .unwrap();
            req.extensions_mut()
                .insert(h2::ext::Protocol::from(protocol));
            req
        };
        let (res, mut up) = send
            .send_request(open("/chat", "websocket"), false)
            .unwrap();
        let res = res.await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("sec-websocket-accept").is_none());
        // Two messages each way through the tunnel, then the client ends its side.
        let rest = echo_over_stream(&mut up, res.into_body(), &["hello", "again"]).await;
        assert_eq!(
            rest, b"bye",
            "the server's last bytes, then the end of the stream"
        );
        // Another protocol is not tunneled.
        let (res, _) = send.send_request(open("/other", "chat"), true).unwrap();
        assert_eq!(res.await.unwrap().status(), 501);
        // The connection still serves ordinary requests.
        let (parts, body) = fetch(&mut send, get("/plain")).await.unwrap();
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"plain"[..]));
    });
    let heads = heads.lock().unwrap();
    let ws = heads[0].to_ascii_lowercase();
    assert!(ws.starts_with("get /chat http/1.1\r\n"), "{ws}");
    for field in [
        "upgrade: websocket",
        "connection: upgrade",
        "sec-websocket-version: 13",
        "sec-websocket-key: ",
    ] {
        assert!(ws.contains(field), "{field} in {ws}");
    }
    assert_eq!(heads.len(), 2, "{heads:?}");
}

/// `h2-workaround-bogus-websocket-clients`: the server's SETTINGS do not offer extended
/// CONNECT, so a client opens its WebSockets over HTTP/1.1; `no ...` takes it back.
#[test]
fn the_websocket_workaround_withholds_extended_connect() {
    let server = tunnel_echo_server(Arc::new(std::sync::Mutex::new(Vec::new())));
    for (global, offered) in [
        ("h2-workaround-bogus-websocket-clients", false),
        (
            "h2-workaround-bogus-websocket-clients\n no h2-workaround-bogus-websocket-clients",
            true,
        ),
    ] {
        let p = Sluice::start(&format!(
            "global\n {global}\ndefaults\n mode http\n timeout client 30s\n timeout server 30s\n timeout connect 5s\n\
             frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {server}\n"
        ));
        runtime().block_on(async {
            let (send, _conn) = h2_connect(p.addr()).await;
            let mut send = send.ready().await.unwrap();
            // An answer comes after the server's SETTINGS, its first frame.
            let (parts, _) = fetch(&mut send, get("/plain")).await.unwrap();
            assert_eq!(parts.status.as_u16(), 200);
            assert_eq!(
                send.is_extended_connect_protocol_enabled(),
                offered,
                "{global}"
            );
        });
    }
}

#[test]
fn plain_connect_opens_a_tunnel_over_an_http2_stream() {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = tunnel_echo_server(heads.clone());
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 30s\n timeout server 30s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {server}\n"
    ));
    runtime().block_on(async {
        let (send, _conn) = h2_connect(p.addr()).await;
        let mut send = send.ready().await.unwrap();
        // RFC 9113 §8.5: `:method CONNECT` and `:authority`, no `:scheme` nor `:path`.
        let connect = |authority: &str| {
            http::Request::builder()
                .method(http::Method::CONNECT)
                .uri(authority)
                .body(())
                .unwrap()
        };
        let (res, mut up) = send
            .send_request(connect("origin.test:443"), false)
            .unwrap();
        let res = res.await.unwrap();
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("content-length").is_none());
        let rest = echo_over_stream(&mut up, res.into_body(), &["hello", "again"]).await;
        assert_eq!(
            rest, b"bye",
            "the server's last bytes, then the stream's end"
        );
        // A refusal is an ordinary answer, and the connection serves on.
        let (res, _) = send
            .send_request(connect("refused.test:443"), true)
            .unwrap();
        let res = res.await.unwrap();
        assert_eq!(res.status(), 403);
        let (parts, body) = fetch(&mut send, get("/plain")).await.unwrap();
        assert_eq!((parts.status.as_u16(), &body[..]), (200, &b"plain"[..]));
    });
    let heads = heads.lock().unwrap();
    assert!(
        heads[0].starts_with("CONNECT origin.test:443 HTTP/1.1\r\n"),
        "{heads:?}"
    );
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains("host: origin.test:443\r\n"),
        "{heads:?}"
    );
    assert_eq!(heads.len(), 3, "{heads:?}");
}

/// An HTTP/2 request's authority loses the port its scheme implies, in the `Host` the server
/// gets, the captured header and the logged target, as HAProxy 2.6 normalizes it (its
/// reg-test http-messaging/scheme_based_normalize).
#[test]
fn the_default_port_of_an_authority_is_left_out() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\ndefaults\n    mode http\n    log global\n    timeout client 10s\n    timeout server 10s\n    timeout connect 5s\n\
         frontend fe\n    {{fe}} proto h2\n    capture request header host len 32\n    log-format \"uri: %r; host: %hr\"\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut send, _conn) = h2_connect(p.addr()).await;
        for uri in ["http://hostname:80/", "http://hostname:8080/"] {
            let req = http::Request::get(uri).body(()).unwrap();
            let (parts, _) = fetch(&mut send, req).await.unwrap();
            assert_eq!(parts.status, 200);
        }
    });
    let hosts: Vec<String> = origin
        .requests()
        .iter()
        .map(|r| r.header("host").unwrap_or_default().to_string())
        .collect();
    assert_eq!(hosts, ["hostname", "hostname:8080"]);
    wait_until("both logged", || p.stdout().lines().count() >= 2);
    let out = p.stdout();
    assert!(
        out.contains("uri: GET http://hostname/ HTTP/2.0; host: {hostname}"),
        "{out}"
    );
    assert!(
        out.contains("uri: GET http://hostname:8080/ HTTP/2.0; host: {hostname:8080}"),
        "{out}"
    );
}

/// The proxy's own answers reach an HTTP/2 client as heads and DATA, whatever the page:
/// an `errorfile` without a length (its body until its end), the built-in 503, a cache
/// hit (and a HEAD of it), a `return` with its fields.
#[test]
fn local_answers_reach_http2_clients() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            let body = format!("stored {}", r.target);
            format!(
                "HTTP/1.1 200 OK\r\ncache-control: max-age=30\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
            .into()
        }),
    );
    let dir = TempDir::new();
    let page = dir.write(
        "502.http",
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nX-Page: mine\r\n\r\nno length here\n",
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n\
         http-request return status 202 content-type text/plain hdr x-made here string made if {{ path /made }}\n\
         use_backend gone if {{ path_beg /gone }}\n use_backend paged if {{ path_beg /paged }}\n\
         default_backend cached\n\
         backend cached\n http-request cache-use c\n http-response cache-store c\n server s {}\n\
         backend gone\n server s 127.0.0.1:9 disabled\n\
         backend paged\n errorfile 503 {page}\n http-request deny deny_status 503\n\
         cache c\n total-max-size 4\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut send, _conn) = h2_connect(p.addr()).await;
        let (head, body) = fetch(&mut send, get("/made")).await.unwrap();
        assert_eq!(head.status, 202);
        assert_eq!(head.headers["x-made"], "here");
        assert_eq!(body, b"made");
        let (head, body) = fetch(&mut send, get("/paged")).await.unwrap();
        assert_eq!(
            (head.status.as_u16(), &body[..]),
            (502, &b"no length here\n"[..])
        );
        assert_eq!(head.headers["x-page"], "mine");
        let (head, body) = fetch(&mut send, get("/gone")).await.unwrap();
        assert_eq!(head.status, 503);
        assert!(String::from_utf8_lossy(&body).contains("503"), "{body:?}");
        let (_, first) = fetch(&mut send, get("/obj")).await.unwrap();
        let (head, hit) = fetch(&mut send, get("/obj")).await.unwrap();
        assert_eq!(
            (&first[..], &hit[..]),
            (&b"stored /obj"[..], &b"stored /obj"[..])
        );
        assert!(head.headers.contains_key("age"), "a hit: {head:?}");
        let req = http::Request::head("http://h2.test/obj").body(()).unwrap();
        let (head, body) = fetch(&mut send, req).await.unwrap();
        assert_eq!((head.status.as_u16(), body.len()), (200, 0));
        assert_eq!(head.headers["content-length"], "11");
    });
    assert_eq!(origin.count(), 1, "one miss, then hits");
}

/// `h2_queued` of `show activity`: what the HTTP/2 client connections hold for their
/// clients, all workers together.
fn h2_queued(sock: &std::path::Path) -> u64 {
    Sluice::cli(sock, "show activity")
        .lines()
        .find_map(|l| l.strip_prefix("h2_queued: "))
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("an h2_queued row")
}

/// A client that opens its windows wide and stops reading its socket holds at most the
/// connection's send budget (`tune.h2.fe.send-budget`) in the proxy, however many streams
/// it has open, as `show activity`'s `h2_queued` counts it; when it reads again, every
/// stream's body arrives whole and nothing stays counted.
#[test]
fn a_client_that_stops_reading_holds_at_most_the_send_budget() {
    const BODY: usize = 1 << 20;
    const STREAMS: u32 = 40;
    const BUDGET: u64 = 256 * 1024;
    let origin = Origin::sized(BODY);
    let dir = TempDir::new();
    let sock = dir.0.join("s.sock");
    let p = Sluice::start(&format!(
        "global\n stats socket {}\n tune.h2.fe.send-budget 256k\n\
         defaults\n mode http\n timeout client 30s\n timeout server 30s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        sock.display(),
        origin.addr
    ));
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut out = PREFACE.to_vec();
    // INITIAL_WINDOW_SIZE (4) at its largest, and the connection's window as wide.
    frame(&mut out, SETTINGS, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]);
    frame(&mut out, 8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes());
    for i in 0..STREAMS {
        let id = 1 + 2 * i;
        raw_get(&mut out, id, "/big");
    }
    s.write_all(&out).unwrap();
    // Nothing is read: the kernel's buffers fill, then the proxy's queue, up to its budget.
    wait_until("the send budget filled", || {
        h2_queued(&sock) >= BUDGET - 16 * 1024
    });
    for _ in 0..20 {
        let held = h2_queued(&sock);
        assert!(held <= BUDGET, "{held} held, over the budget");
    }
    // Reading again: every stream's body arrives whole.
    let mut got = std::collections::HashMap::new();
    let mut ended = 0;
    read_frames(&mut s, |kind, stream, payload| {
        if kind == DATA {
            *got.entry(stream).or_insert(0usize) += payload.len();
            if got[&stream] == BODY {
                ended += 1;
            }
        }
        ended == STREAMS as usize
    });
    assert_eq!(got.len(), STREAMS as usize);
    assert!(got.values().all(|&n| n == BODY), "{got:?}");
    wait_until("nothing left queued", || h2_queued(&sock) == 0);
}

/// A client with HTTP/2 prior knowledge on an HTTP/1 bind (no `proto h2`) is served as
/// HTTP/2 once its preface is seen, as HAProxy's HTTP/1 side hands such a connection over;
/// HTTP/1.1 clients of the same bind are served as before, and `option
/// disable-h2-upgrade` answers the preface 400 (HAProxy 2.6.12's answer).
#[test]
fn prior_knowledge_on_an_http1_bind_is_served_as_http2() {
    let origin = Origin::start("o");
    let config = |extra: &str| {
        format!(
            "{DEFAULTS}frontend fe\n    {{fe}}\n{extra}    default_backend be\nbackend be\n    server s1 {}\n",
            origin.addr
        )
    };
    let p = Sluice::start(&config(""));
    let rt = runtime();
    rt.block_on(async {
        let (mut send, _conn) = h2_connect(p.addr()).await;
        for path in ["/a", "/b"] {
            let (parts, body) = fetch(&mut send, get(path)).await.unwrap();
            assert_eq!(parts.status, 200);
            assert_eq!(body, format!("o {path}").as_bytes());
        }
    });
    assert_eq!(common::get(p.addr(), "/c").text(), "o /c");
    let p = Sluice::start(&config("    option disable-h2-upgrade\n"));
    let (r, _) = raw_exchange(p.addr(), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert_eq!(r.map(|r| r.status), Some(400));
}

/// WINDOW_UPDATE frames the client was sent no DATA for (on the connection, or on streams
/// long closed) do no work: a flood of them costs its connection as other such frames do,
/// while a client that reads a large body, opening its windows as it goes, is served to
/// the end (`large_bodies_cross_under_flow_control_with_a_slow_reader` and the rest of
/// this file).
#[test]
fn a_flood_of_window_updates_costs_its_connection() {
    const WINDOW_UPDATE: u8 = 8;
    let origin = Origin::start("o");
    let p = flood_proxy(&origin);
    // On the connection (on a stream never opened the crate would end it itself).
    a_flood_costs_its_connection(&p, |out, _| {
        frame(out, WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes());
    });
}

/// RST_STREAM frames on a stream already reset or ended do no work (a stream is reset once):
/// past one per HEADERS the client sent, a flood of them costs the connection as other
/// such frames do, while a client that resets each stream it opened once is served
/// (`a_client_that_stops_an_upload_it_was_answered_for_is_not_resetting`).
#[test]
fn a_flood_of_resets_on_an_ended_stream_costs_its_connection() {
    const RST_STREAM: u8 = 3;
    let origin = Origin::start("o");
    let p = flood_proxy(&origin);
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    raw_get(&mut out, 1, "/ended");
    s.write_all(&out).unwrap();
    // The whole answer: its stream has ended.
    read_frames(&mut s, |kind, stream, _| kind == 0 && stream == 1);
    let mut out = Vec::new();
    for _ in 0..1500 {
        frame(&mut out, RST_STREAM, 0, 1, &8u32.to_be_bytes());
    }
    let _ = s.write_all(&out);
    assert!(closes(&mut s), "the flooding connection is still open");
    others_are_served(&p, p.addrs[1]);
}

/// Errors are named as RFC 9113 names them: a frame larger than the SETTINGS allow is a
/// FRAME_SIZE_ERROR, DATA beyond the window a FLOW_CONTROL_ERROR (both end the
/// connection), and a zero WINDOW_UPDATE on a stream is that stream's PROTOCOL_ERROR: the
/// stream is reset and the connection serves its other streams (HAProxy does the same).
#[test]
fn protocol_errors_are_named_as_the_rfc_names_them() {
    const WINDOW_UPDATE: u8 = 8;
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    let goaway_code = |frames: &[(u8, u8, u32, Vec<u8>)]| {
        frames
            .iter()
            .find(|(k, ..)| *k == GOAWAY)
            .map(|(_, _, _, payload)| error_code(payload, 4))
    };
    // A HEADERS frame of 20,000 bytes, past the 16,384 allowed.
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    frame(&mut out, HEADERS, END_HEADERS, 1, &vec![0; 20_000]);
    let _ = s.write_all(&out);
    let frames = read_frames(&mut s, |kind, _, _| kind == GOAWAY);
    assert_eq!(
        goaway_code(&frames),
        Some(0x6),
        "FRAME_SIZE_ERROR: {frames:?}"
    );
    // 80,000 bytes of DATA where the windows allow 65,535.
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    let mut fields = request_fields("/upload");
    fields[0] = (":method", "POST");
    frame(&mut out, HEADERS, END_HEADERS, 1, &hpack(&fields));
    for _ in 0..5 {
        frame(&mut out, DATA, 0, 1, &[b'x'; 16_000]);
    }
    let _ = s.write_all(&out);
    let frames = read_frames(&mut s, |kind, _, _| kind == GOAWAY || kind == RST_STREAM);
    let code = frames.iter().find_map(|(k, _, _, payload)| match *k {
        GOAWAY => Some(error_code(payload, 4)),
        RST_STREAM => Some(error_code(payload, 0)),
        _ => None,
    });
    assert_eq!(code, Some(0x3), "FLOW_CONTROL_ERROR: {frames:?}");
    // A zero WINDOW_UPDATE on stream 1 (whose answer waits), then a request on stream 3.
    let slow = Origin::with_handler(
        "slow",
        Arc::new(|_: &Received| Reply::Delayed(Duration::from_millis(300), ok_response("late"))),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        slow.addr
    ));
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    raw_get(&mut out, 1, "/one");
    frame(&mut out, WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes());
    raw_get(&mut out, 3, "/three");
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s, |kind, stream, _| {
        (kind == DATA && stream == 3) || kind == GOAWAY
    });
    let reset = frames
        .iter()
        .find(|(k, _, st, _)| *k == RST_STREAM && *st == 1)
        .map(|(.., payload)| error_code(payload, 0));
    assert_eq!(reset, Some(0x1), "stream 1's PROTOCOL_ERROR: {frames:?}");
    assert_eq!(
        goaway_code(&frames),
        None,
        "the connection stays: {frames:?}"
    );
    assert!(
        frames.iter().any(|(k, _, st, _)| *k == DATA && *st == 3),
        "stream 3 is answered: {frames:?}"
    );
}

/// A stream whose reader has stopped (its window closed, never reopened) does not stall
/// the other streams of its connection: they are answered while it waits, however large
/// its response. (The client's connection window is wider than a stream's, as browsers
/// make it: a client that lets one stream take its whole connection window stalls itself.)
#[test]
fn a_stalled_stream_does_not_hold_up_the_others() {
    const BIG: usize = 4 << 20;
    let big = {
        let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes();
        r.extend(std::iter::repeat_n(b'b', BIG));
        r
    };
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            if r.target == "/big" {
                big.clone().into()
            } else {
                ok_response("small").into()
            }
        }),
    );
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 20s\n timeout server 20s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n default_backend be\nbackend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let tcp = tokio::net::TcpStream::connect(p.addr()).await.unwrap();
        let (send, conn) = h2::client::Builder::new()
            .initial_connection_window_size(16 << 20)
            .handshake::<_, Bytes>(tcp)
            .await
            .unwrap();
        tokio::spawn(conn);
        let (res, _) = send
            .clone()
            .ready()
            .await
            .unwrap()
            .send_request(get("/big"), true)
            .unwrap();
        // The big response starts; its reader takes a first piece and never releases it.
        let mut stalled = res.await.unwrap().into_body();
        let first = stalled.data().await.unwrap().unwrap();
        assert!(!first.is_empty());
        for i in 0..20 {
            let (res, _) = send
                .clone()
                .ready()
                .await
                .unwrap()
                .send_request(get(&format!("/small{i}")), true)
                .unwrap();
            let res = tokio::time::timeout(Duration::from_secs(10), res)
                .await
                .expect("another stream is answered while one is stalled")
                .unwrap();
            let mut body = res.into_body();
            let mut text = Vec::new();
            while let Some(d) = body.data().await {
                let d = d.unwrap();
                body.flow_control().release_capacity(d.len()).unwrap();
                text.extend_from_slice(&d);
            }
            assert_eq!(text, b"small");
        }
        drop(stalled);
    });
}

/// Frames that ask for no work, besides PRIORITY: empty DATA frames that do not end their
/// stream, and empty CONTINUATION frames that do not end their head. A flood of either
/// costs its connection; other clients are served.
#[test]
fn floods_of_empty_data_and_continuation_cost_their_connection() {
    const CONTINUATION: u8 = 9;
    let origin = Origin::start("o");
    let p = flood_proxy(&origin);
    // Empty DATA on an upload that never ends.
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    let mut fields = request_fields("/up");
    fields[0] = (":method", "POST");
    frame(&mut out, HEADERS, END_HEADERS, 1, &hpack(&fields));
    for _ in 0..1500 {
        frame(&mut out, DATA, 0, 1, &[]);
    }
    let _ = s.write_all(&out);
    assert!(
        closes(&mut s),
        "the empty-DATA flood's connection is still open"
    );
    others_are_served(&p, p.addrs[1]);
    // A head that never ends: HEADERS without END_HEADERS, then empty CONTINUATION frames.
    let mut s = raw_h2(p.addr());
    let mut out = Vec::new();
    frame(&mut out, HEADERS, 0, 1, &hpack(&request_fields("/head")));
    for _ in 0..1500 {
        frame(&mut out, CONTINUATION, 0, 1, &[]);
    }
    let _ = s.write_all(&out);
    assert!(
        closes(&mut s),
        "the CONTINUATION flood's connection is still open"
    );
    others_are_served(&p, p.addrs[1]);
    assert!(
        origin.requests().iter().all(|r| r.target == "/other"),
        "neither flood's request reached the server"
    );
}

/// An HPACK bomb: one 4 kB value put in the dynamic table, then referenced a thousand
/// times (4 MB of fields from a few kilobytes on the wire). It is refused before it
/// reaches a server, and others are served.
#[test]
fn an_hpack_bomb_is_refused() {
    let origin = Origin::start("o");
    let p = flood_proxy(&origin);
    let mut s = raw_h2(p.addr());
    let mut block = hpack(&request_fields("/bomb"));
    // Literal with incremental indexing, new name (0x40), a 4,000-byte value: entry 62.
    block.push(0x40);
    block.push(6);
    block.extend_from_slice(b"x-bomb");
    // 4,000 as an HPACK integer with a 7-bit prefix: 127, then 3,873 in 7-bit groups.
    block.extend_from_slice(&[0x7f, 0xa1, 0x1e]);
    block.extend(std::iter::repeat_n(b'v', 4000));
    // Then the entry again and again: indexed field 62 (0xbe), one byte each.
    block.extend(std::iter::repeat_n(0xbe, 1000));
    let mut out = Vec::new();
    frame(&mut out, HEADERS, END_HEADERS | END_STREAM, 1, &block);
    s.write_all(&out).unwrap();
    let frames = read_frames(&mut s, |kind, stream, _| {
        kind == GOAWAY || kind == RST_STREAM || (kind == HEADERS && stream == 1)
    });
    let refused = frames.iter().any(|(k, _, st, payload)| match *k {
        GOAWAY | RST_STREAM => true,
        // An answer (431) rather than a reset is a refusal too; `:status: 200` would not be.
        HEADERS => *st == 1 && payload.first() != Some(&0x88),
        _ => false,
    });
    assert!(
        refused || frames.is_empty(),
        "the bomb was refused: {frames:?}"
    );
    others_are_served(&p, p.addrs[1]);
    assert!(
        origin.requests().iter().all(|r| r.target != "/bomb"),
        "the bomb never reached the server"
    );
}

/// `sess.` variables belong to the session, which for HAProxy is the connection: a later
/// stream of the same HTTP/2 connection reads what an earlier one set, another connection
/// does not.
#[test]
fn the_streams_of_a_connection_share_its_session_variables() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n\
         http-request set-var(sess.user) str(alice) if {{ path /login }}\n\
         http-request set-header x-user %[var(sess.user)]\n default_backend be\n\
         backend be\n server s {}\n",
        origin.addr
    ));
    let user = |path: &str| -> Option<String> {
        origin
            .requests()
            .into_iter()
            .rev()
            .find(|r| r.target == path)
            .and_then(|r| r.header("x-user").map(str::to_string))
    };
    runtime().block_on(async {
        let (mut one, _c1) = h2_connect(p.addr()).await;
        assert_eq!(fetch(&mut one, get("/login")).await.unwrap().0.status, 200);
        assert_eq!(fetch(&mut one, get("/later")).await.unwrap().0.status, 200);
        let (mut other, _c2) = h2_connect(p.addr()).await;
        assert_eq!(
            fetch(&mut other, get("/elsewhere")).await.unwrap().0.status,
            200
        );
    });
    assert_eq!(user("/login").as_deref(), Some("alice"));
    assert_eq!(user("/later").as_deref(), Some("alice"));
    assert_eq!(user("/elsewhere").as_deref(), Some(""));
}

/// What a connection tracks (`tcp-request connection track-sc0`) is tracked for each of
/// its HTTP/2 streams too: their requests count in the entry and rules read its counters,
/// as over HTTP/1.1 (the usual rate limit; HAProxy 2.6.12 answers the same four requests
/// over HTTP/1.1 with 200, 200, 429, 429: a request counts before its rules run). Each
/// stream used to start with no entry tracked, so HTTP/2 clients escaped the limit.
#[test]
fn streams_count_in_what_their_connection_tracks() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n\
         stick-table type ip size 10 expire 1m store http_req_cnt\n\
         tcp-request connection track-sc0 src\n\
         http-request deny deny_status 429 if {{ sc0_http_req_cnt gt 2 }}\n default_backend be\n\
         backend be\n server s {}\n",
        origin.addr
    ));
    let statuses = runtime().block_on(async {
        let (mut c, _d) = h2_connect(p.addr()).await;
        let mut out = Vec::new();
        for i in 0..4 {
            out.push(
                fetch(&mut c, get(&format!("/r{i}")))
                    .await
                    .unwrap()
                    .0
                    .status
                    .as_u16(),
            );
        }
        out
    });
    assert_eq!(statuses, [200, 200, 429, 429]);
}

/// The connection's `tcp-request connection set-dst` is what its HTTP/2 streams' rules
/// see as `dst`, as over HTTP/1.1.
#[test]
fn streams_see_the_destination_their_connection_set() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n\
         frontend fe\n {{fe}} proto h2\n {{fe}}\n\
         tcp-request connection set-dst ipv4(10.1.2.3)\n\
         http-request set-header x-dst %[dst]\n default_backend be\n\
         backend be\n server s {}\n",
        origin.addr
    ));
    runtime().block_on(async {
        let (mut c, _d) = h2_connect(p.addrs[0]).await;
        assert_eq!(fetch(&mut c, get("/h2")).await.unwrap().0.status, 200);
    });
    assert_eq!(common::get(p.addrs[1], "/h1").status, 200);
    for path in ["/h2", "/h1"] {
        let seen = origin
            .requests()
            .into_iter()
            .find(|r| r.target == path)
            .unwrap();
        assert_eq!(seen.header("x-dst"), Some("10.1.2.3"), "{path}");
    }
}
