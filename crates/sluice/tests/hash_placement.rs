//! Hash-based balancing places each key on the server HAProxy 2.6 picks: the same
//! configuration (`testdata/haproxy-2.6/hash-placement.cfg`) under sluice must give the
//! answers recorded from HAProxy in `hash-placement.txt` (see `hash_placement.py` there).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;

use common::*;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/haproxy-2.6");

/// The recorded configuration with its answering frontends replaced by origins (which
/// answer `NAME TARGET`) and the proxy's port by a kernel-chosen one.
fn start() -> (Sluice, Vec<Origin>) {
    let text = std::fs::read_to_string(format!("{DATA}/hash-placement.cfg")).unwrap();
    let origins: Vec<Origin> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| Origin::start(n))
        .collect();
    let mut cfg = String::new();
    let mut skip = false;
    for line in text.lines() {
        if line.starts_with("frontend answer_") {
            skip = true;
            continue;
        }
        if !line.starts_with(' ') {
            skip = false;
        }
        if skip {
            continue;
        }
        let mut line = line.replace("bind 127.0.0.1:19100", "{fe}");
        for (k, o) in origins.iter().enumerate() {
            line = line.replace(&format!("127.0.0.1:{}", 19101 + k), &o.addr.to_string());
        }
        cfg.push_str(&line);
        cfg.push('\n');
    }
    (Sluice::start(&cfg), origins)
}

/// The server that answers `target` on backend `host`, from client address `source`.
fn server(addr: SocketAddr, host: &str, target: &str, user: Option<&str>, source: &str) -> String {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    sock.bind(&from.into()).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let user = user.map(|u| format!("X-User: {u}\r\n")).unwrap_or_default();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\n{user}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    while r.read_line(&mut line).unwrap() > 0 {
        body = line.clone();
        line.clear();
    }
    body.split_whitespace().next().unwrap_or("").to_string()
}

#[test]
fn keys_land_on_the_servers_haproxy_chooses() {
    let (p, _origins) = start();
    let expected = std::fs::read_to_string(format!("{DATA}/hash-placement.txt")).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in expected.lines() {
        let [backend, kind, key, want] = line.split(' ').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}");
        };
        // Without the parameter, url_param goes round robin: nothing to compare.
        if backend.starts_with("param_") && !key.contains("id=") {
            continue;
        }
        let got = match kind {
            "uri" => server(p.addr(), backend, key, None, "127.0.0.1"),
            "hdr" => server(p.addr(), backend, "/", Some(key), "127.0.0.1"),
            "src" => server(p.addr(), backend, "/", None, key),
            _ => panic!("bad kind {kind}"),
        };
        checked += 1;
        if got != want {
            wrong.push(format!(
                "{backend} {kind} {key}: HAProxy {want}, sluice {got}"
            ));
        }
    }
    assert!(checked > 300, "{checked}");
    assert!(
        wrong.is_empty(),
        "{} of {checked} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
