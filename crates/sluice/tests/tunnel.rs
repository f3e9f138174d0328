//! Upgrade (WebSocket) tunnels: switched only after the server's 101, bytes relayed both ways
//! with half-close; a 200 to an Upgrade request keeps HTTP going; h2c is stripped; timeout
//! tunnel ends idle tunnels.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use common::*;

fn proxy(addr: std::net::SocketAddr, extra: &str) -> Sluice {
    Sluice::start(&format!("{DEFAULTS}{extra}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {addr}\n"))
}

fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "connection closed in the head");
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

#[test]
fn websocket_echo_through_the_tunnel_with_half_close() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(websocket_echo_server(heads.clone()), "");
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n").unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{head}"
    );
    for msg in [&b"hello"[..], b"\x81\x05world", &[0u8; 3000]] {
        s.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    // Half-close: our end of stream reaches the server, whose last words still come back.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
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
    let p = proxy(websocket_echo_server(heads.clone()), "");
    let mut c = p.connect();
    // The server declines (/no...): the next, pipelined request is still HTTP.
    c.send(b"GET /no HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response().text(), "plain");
    assert_eq!(c.response().text(), "plain");
    assert_eq!(heads.lock().unwrap().len(), 2);
}

#[test]
fn h2c_upgrades_are_stripped() {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let p = proxy(websocket_echo_server(heads.clone()), "");
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
    let p = proxy(websocket_echo_server(heads), "\n    timeout tunnel 300ms");
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
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
