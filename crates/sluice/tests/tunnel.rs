//! Upgrade (WebSocket) tunnels: switched only after the server's 101, bytes relayed both ways
//! with half-close; a 200 to an Upgrade request keeps HTTP going; h2c is stripped; timeout
//! tunnel ends idle tunnels. CONNECT: forwarded to the server, a tunnel after its 2xx.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use common::*;

fn proxy(addr: std::net::SocketAddr, extra: &str) -> Sluice {
    Sluice::start(&format!("{DEFAULTS}{extra}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {addr}\n"))
}

#[test]
fn websocket_echo_through_the_tunnel_with_half_close() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(tunnel_echo_server(heads.clone()), "");
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n").unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{head}"
    );
    // Half-close: our end of stream reaches the server, whose last words still come back.
    let rest = echo_through(&mut s, &[b"hello", b"\x81\x05world", &[0u8; 3000]]);
    assert_eq!(rest, b"bye");
    let seen = heads.lock().unwrap()[0].to_ascii_lowercase();
    assert!(
        seen.contains("connection: upgrade") && seen.contains("upgrade: websocket"),
        "{seen}"
    );
}

#[test]
fn a_200_answer_to_an_upgrade_request_keeps_parsing_http() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(tunnel_echo_server(heads.clone()), "");
    let mut c = p.connect();
    // The server declines (/no...): the next, pipelined request is still HTTP.
    c.send(b"GET /no HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response().text(), "plain");
    assert_eq!(c.response().text(), "plain");
    assert_eq!(heads.lock().unwrap().len(), 2);
}

#[test]
fn h2c_upgrades_are_stripped() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(tunnel_echo_server(heads.clone()), "");
    let mut c = p.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n");
    assert_eq!(c.response().text(), "plain");
    let seen = heads.lock().unwrap()[0].to_ascii_lowercase();
    assert!(
        !seen.contains("upgrade") && !seen.contains("http2-settings"),
        "{seen}"
    );
}

#[test]
fn timeout_tunnel_closes_idle_tunnels() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(tunnel_echo_server(heads), "\n    timeout tunnel 300ms");
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n",
    )
    .unwrap();
    assert!(read_head(&mut s).starts_with("HTTP/1.1 101 "));
    s.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    s.read_exact(&mut b).unwrap();
    // Then silence: the proxy closes the tunnel.
    let mut rest = Vec::new();
    let closed = s.read_to_end(&mut rest);
    assert!(
        closed.is_ok(),
        "the proxy closed the idle tunnel (not a read timeout): {closed:?}"
    );
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn connect_is_forwarded_and_the_servers_2xx_opens_a_tunnel() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    // `http-server-close` would ask the server to close after its answer: not for a CONNECT,
    // whose connection becomes the tunnel.
    let p = proxy(
        tunnel_echo_server(heads.clone()),
        "\n    option http-server-close",
    );
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(b"CONNECT origin.test:443 HTTP/1.1\r\nHost: origin.test:443\r\nProxy-Authorization: Basic eDp5\r\n\r\n").unwrap();
    let head = read_head(&mut s).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 "), "{head}");
    for absent in ["content-length", "transfer-encoding", "connection:"] {
        assert!(!head.contains(absent), "{absent} in {head}");
    }
    let rest = echo_through(&mut s, &[b"\x16\x03\x01 a ClientHello, say", &[7u8; 5000]]);
    assert_eq!(rest, b"bye", "the server's last bytes after our half-close");
    let seen = heads.lock().unwrap()[0].clone();
    assert!(
        seen.starts_with("CONNECT origin.test:443 HTTP/1.1\r\n"),
        "{seen}"
    );
    let seen = seen.to_ascii_lowercase();
    assert!(seen.contains("host: origin.test:443\r\n"), "{seen}");
    assert!(seen.contains("proxy-authorization: basic"), "{seen}");
    assert!(!seen.contains("connection:"), "{seen}");
}

#[test]
fn a_refused_connect_is_answered_then_the_connection_closes() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(tunnel_echo_server(heads.clone()), "");
    let mut c = p.connect();
    // What a client sends after its CONNECT was meant for the tunnel: never a request.
    c.send(b"CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\nGET /x HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.text().as_str()), (403, "refused"));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed());
    // Malformed CONNECTs never reach the server.
    for bad in [
        &b"CONNECT /x HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"CONNECT t HTTP/1.1\r\nHost: t\r\n\r\n",
        b"CONNECT t:443 HTTP/1.1\r\nHost: u:443\r\n\r\n",
        b"CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\nContent-Length: 2\r\n\r\nhi",
    ] {
        let (r, _) = raw_exchange(p.addr(), bad);
        assert_eq!(
            r.map(|r| r.status),
            Some(400),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 1, "{heads:?}");
}

/// As HAProxy (its reg-test http-messaging/websocket): a WebSocket handshake without its key
/// is refused with 400, a server's 101 without the key's answer becomes a 502.
#[test]
fn websocket_handshakes_are_checked_both_ways() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|_: &Received| {
            Reply::Raw(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                    .to_vec(),
            )
        }),
    );
    let p = proxy(origin.addr, "");
    let mut c = p.connect();
    c.send(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_eq!(c.response().status, 400);
    assert_eq!(origin.count(), 0, "refused before any server");
    let mut c = p.connect();
    c.send(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    assert_eq!(c.response().status, 502);
}
