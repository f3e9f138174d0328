//! The PROXY protocol, in (`bind ... accept-proxy`, `tcp-request connection expect-proxy
//! layer4`) and out (`send-proxy`, `send-proxy-v2`, `proxy-v2-options`), against scripted
//! peers and between two sluice processes.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use common::*;
use sluice_core::proxy_proto::{parse, tlv, v1_header, v2_header, Parsed};

/// The frontend answers with what it believes of the client.
const SHOW: &str = "http-request return status 200 content-type text/plain lf-string \"%[src]:%[src_port] %[dst]:%[dst_port] %[fc_pp_authority] %[fc_pp_unique_id]\"";

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Sends `bytes` then reads the whole answer (the request asks the server to close).
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn request(header: &[u8]) -> Vec<u8> {
    [
        header,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]
    .concat()
}

fn body(answer: &str) -> &str {
    answer.split("\r\n\r\n").nth(1).unwrap_or("")
}

#[test]
fn accept_proxy_takes_the_client_from_v1_and_v2_headers() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} accept-proxy\n    {SHOW}\n"
    ));
    let v1 = v1_header(a("192.0.2.10:4321"), a("198.51.100.1:80"));
    assert_eq!(
        body(&exchange(p.addr(), &request(&v1))),
        "192.0.2.10:4321 198.51.100.1:80  "
    );
    let tlvs = [
        (tlv::AUTHORITY, b"www.example".to_vec()),
        (tlv::UNIQUE_ID, b"req-42".to_vec()),
    ];
    let v2 = v2_header(a("[2001:db8::7]:5555"), a("[2001:db8::1]:443"), &tlvs, true);
    assert_eq!(
        body(&exchange(p.addr(), &request(&v2))),
        "2001:db8::7:5555 2001:db8::1:443 www.example req-42"
    );
    // A header arriving a byte at a time is read whole, and nothing after it is lost.
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    for b in request(&v1) {
        s.write_all(&[b]).unwrap();
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(body(&out), "192.0.2.10:4321 198.51.100.1:80  ");
}

#[test]
fn bad_headers_are_refused_before_anything_reaches_a_server() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}} accept-proxy\n    default_backend be\nbackend be\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    let good = v2_header(a("192.0.2.1:1"), a("192.0.2.2:2"), &[], true);
    let mut bad_crc = good.clone();
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 1;
    let cases: Vec<Vec<u8>> = vec![
        // No header at all: an HTTP request straight away.
        request(b""),
        request(b"PROXY TCP4 192.0.2.1 192.0.2.2 +1 2\r\n"),
        request(b"PROXY TCP4 2001:db8::1 192.0.2.2 1 2\r\n"),
        request(&[b"PROXY TCP4 ".to_vec(), vec![b'9'; 200]].concat()),
        request(&bad_crc),
        // v2 announcing more than sluice accepts.
        request(&[&good[..14], &[0xff, 0xff]].concat()),
        request(b"PROXY UDP4 192.0.2.1 192.0.2.2 1 2\r\n"),
    ];
    for case in &cases {
        let answer = exchange(p.addr(), case);
        assert!(answer.is_empty(), "{answer}");
    }
    // A header cut short by the client's close.
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(&good[..10]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty());
    let refused = cases.len() + 1;
    wait_until("every refusal counted as a request error", || {
        let csv = Sluice::cli(&sock, "show stat");
        stat_field(&csv, "fe", "FRONTEND", "ereq") == refused.to_string()
    });
    assert_eq!(origin.count(), 0);
    // Each is logged as HAProxy logs it: `IP:PORT [DATE] FRONTEND/BIND: REASON`.
    wait_until("a line each", || p.stdout().lines().count() >= refused);
    let out = p.stdout();
    let mut reasons: Vec<&str> = out
        .lines()
        .map(|l| {
            assert!(l.starts_with("127.0.0.1:") && l.contains("] fe/1: "), "{l}");
            l.split_once("] fe/1: ").map_or("", |(_, r)| r)
        })
        .collect();
    reasons.sort_unstable();
    let bad = "Received an invalid PROXY protocol header";
    assert_eq!(
        reasons,
        [
            bad,
            bad,
            bad,
            bad,
            bad,
            "Received an unhandled protocol in the PROXY protocol header",
            "Received something which does not look like a PROXY protocol header",
            "Truncated PROXY protocol header received",
        ],
        "{out}"
    );
    // The listener still serves well-formed clients.
    let answer = exchange(p.addr(), &request(&good));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(origin.requests()[0].header("x-forwarded-for"), None);
}

#[test]
fn expect_proxy_applies_where_its_condition_holds() {
    // Clients from 127.0.0.1 (the proxy in front) must send a header; the rule names the
    // real peer, before the header is read.
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    tcp-request connection expect-proxy layer4 if {{ src 127.0.0.1 }}\n    {SHOW}\n"
    ));
    let v1 = v1_header(a("203.0.113.9:9999"), a("203.0.113.1:80"));
    assert!(body(&exchange(p.addr(), &request(&v1))).starts_with("203.0.113.9:9999 "));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    tcp-request connection expect-proxy layer4 if {{ src 10.0.0.0/8 }}\n    {SHOW}\n"
    ));
    assert!(body(&exchange(p.addr(), &request(b""))).starts_with("127.0.0.1:"));
}

/// A server that records everything each connection sends until it closes, answering
/// nothing.
fn recorder() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let seen = s2.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                seen.lock().unwrap().push(got);
            });
        }
    });
    (addr, seen)
}

#[test]
fn send_proxy_puts_the_clients_addresses_before_its_bytes() {
    let (v1_srv, v1_seen) = recorder();
    let (v2_srv, v2_seen) = recorder();
    let p = Sluice::start(&format!(
        "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten one\n    {{fe}}\n    server s {v1_srv} send-proxy\nlisten two\n    {{fe}}\n    server s {v2_srv} send-proxy-v2 proxy-v2-options crc32c,authority\n"
    ));
    for (addr, seen, v2) in [(p.addrs[0], &v1_seen, false), (p.addrs[1], &v2_seen, true)] {
        let mut c = TcpStream::connect(addr).unwrap();
        let local = c.local_addr().unwrap();
        c.write_all(b"hello").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = c.read_to_end(&mut Vec::new());
        wait_until("the server saw the connection", || {
            !seen.lock().unwrap().is_empty()
        });
        let got = seen.lock().unwrap()[0].clone();
        let Parsed::Header { len, proxied } = parse(&got) else {
            panic!("no header: {:?}", String::from_utf8_lossy(&got));
        };
        assert_eq!(got.starts_with(b"PROXY TCP4 "), !v2);
        assert_eq!(proxied.src, Some(local));
        assert_eq!(proxied.dst, Some(addr));
        assert_eq!(&got[len..], b"hello");
    }
}

#[test]
fn two_sluices_carry_the_client_and_its_tls_name_through_proxy_v2() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let back = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} accept-proxy\n    {SHOW}\n"
    ));
    let front = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    unique-id-format id-%cp\n    default_backend be\nbackend be\n    server s {} send-proxy-v2 proxy-v2-options authority,unique-id,crc32c\n",
        back.addr()
    ));
    let tcp = TcpStream::connect(front.addr()).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let config = ca.client(&[], &[&rustls::version::TLS13]);
    let name = rustls::pki_types::ServerName::try_from("site.test").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.sock.set_read_timeout(Some(TIMEOUT)).unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert_eq!(
        body(&out),
        format!(
            "127.0.0.1:{port} 127.0.0.1:{} site.test id-{port}",
            front.addr().port()
        )
    );
}
