//! TCP mode reading what the client sent before choosing: `tcp-request inspect-delay`,
//! `tcp-request content` rules and `use_backend` on the payload, as HAProxy routes TLS by
//! its SNI without terminating it (`req.ssl_sni`, `req_ssl_hello_type`, ...).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::*;

const TCP_DEFAULTS: &str =
    "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n";

/// A server that keeps the first bytes of each connection (as many as arrive before the
/// client pauses for 300 ms or closes), then closes.
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
                s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
                    .unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                seen.lock().unwrap().push(got);
            });
        }
    });
    (addr, seen)
}

/// The bytes of a ClientHello a rustls client sends for `name`, with ALPN `alpn`.
fn client_hello(name: &str, alpn: &[&str]) -> Vec<u8> {
    let ca = Ca::new();
    let config = ca.client(alpn, &[&rustls::version::TLS13]);
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(config, server).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

#[test]
fn tls_is_routed_by_its_sni_and_passed_through_untouched() {
    let ca = Ca::new();
    let dir = TempDir::new();
    // Two TLS origins (sluice instances terminating TLS), each with its own name.
    let origin = |name: &str| {
        let (crt, _) = ca.leaf(&dir, &format!("{name}.pem"), &[name]);
        Sluice::start(&format!(
            "{DEFAULTS}frontend o\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain lf-string \"{name} %[ssl_fc_sni]\"\n"
        ))
    };
    let (a, b) = (origin("a.example"), origin("www.b.example"));
    let plain = Origin::start("plain");
    // No `mode` anywhere: TCP, as in HAProxy.
    let p = Sluice::start(&format!(
        "{TCP_DEFAULTS}frontend f\n    {{fe}}\n    tcp-request inspect-delay 5s\n    tcp-request content accept if {{ req_ssl_hello_type 1 }}\n    use_backend a if {{ req.ssl_sni -i a.example }}\n    use_backend b if {{ req_ssl_sni -m end .b.example }}\n    default_backend plain\nbackend a\n    server s {}\nbackend b\n    server s {}\nbackend plain\n    server s {}\n",
        a.addr(),
        b.addr(),
        plain.addr
    ));
    let port = p.addr().port();
    let ca_file = ca.ca_file(&dir);
    for name in ["a.example", "www.b.example"] {
        // curl verifies the origin's certificate for the name: the TLS session is the
        // origin's own, end to end.
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "20", "--cacert", &ca_file, "--resolve"])
            .arg(format!("{name}:{port}:127.0.0.1"))
            .arg(format!("https://{name}:{port}/"))
            .output()
            .expect("curl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{name} {name}")
        );
    }
    // A client in clear is no ClientHello: no rule matches, it goes to the default backend.
    let r = get(p.addr(), "/x");
    assert_eq!(r.text(), "plain /x");
}

#[test]
fn a_client_hello_arriving_in_pieces_is_read_whole_before_routing() {
    let (a, seen_a) = recorder();
    let (other, seen_other) = recorder();
    let p = Sluice::start(&format!(
        "{TCP_DEFAULTS}frontend f\n    {{fe}}\n    tcp-request inspect-delay 10s\n    tcp-request content accept if {{ req_ssl_hello_type 1 }}\n    use_backend a if {{ req.ssl_sni a.example }} {{ req.ssl_alpn h2 }}\n    default_backend other\nbackend a\n    server s {a}\nbackend other\n    server s {other}\n"
    ));
    let hello = client_hello("a.example", &["http/1.1", "h2"]);
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    // Byte by byte: however the rules see it split, they wait for the whole message.
    for b in &hello {
        s.write_all(std::slice::from_ref(b)).unwrap();
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    wait_until("the server saw the hello", || {
        !seen_a.lock().unwrap().is_empty()
    });
    assert_eq!(seen_a.lock().unwrap()[0], hello, "relayed unchanged");
    assert!(seen_other.lock().unwrap().is_empty());
}

#[test]
fn content_rules_refuse_what_is_not_tls_before_any_server_sees_it() {
    let (srv, seen) = recorder();
    let p = Sluice::start(&format!(
        "{TCP_DEFAULTS}frontend f\n    {{fe}}\n    tcp-request inspect-delay 5s\n    tcp-request content reject unless {{ req_ssl_hello_type 1 }}\n    default_backend b\nbackend b\n    server s {srv}\n"
    ));
    // Plain HTTP, then SSH's banner: both refused, the connection closed with nothing sent.
    for msg in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"SSH-2.0-OpenSSH_9.2\r\n",
    ] {
        let mut s = TcpStream::connect(p.addr()).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(msg).unwrap();
        let mut back = Vec::new();
        let _ = s.read_to_end(&mut back);
        assert!(back.is_empty(), "{back:?}");
    }
    // A ClientHello goes through, and is the first thing the server ever received.
    let hello = client_hello("x.example", &[]);
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.write_all(&hello).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = s.read_to_end(&mut Vec::new());
    wait_until("the server saw the hello", || {
        !seen.lock().unwrap().is_empty()
    });
    assert_eq!(*seen.lock().unwrap(), vec![hello]);
}

/// `req.payload_lv(OFFSET1,LENGTH[,OFFSET2])`: a length-prefixed block of the payload routes
/// the connection once it arrived whole (the size field's bytes first, then the block).
#[test]
fn length_prefixed_blocks_route_connections() {
    let (abc, seen_abc) = recorder();
    let (bcd, seen_bcd) = recorder();
    let (other, seen_other) = recorder();
    let p = Sluice::start(&format!(
        "{TCP_DEFAULTS}frontend f\n    {{fe}}\n    tcp-request inspect-delay 10s\n    tcp-request content accept if {{ req.payload_lv(1,2) -m found }}\n    use_backend abc if {{ req.payload_lv(1,2) -m bin 616263 }}\n    use_backend bcd if {{ req.payload_lv(1,2,+1) -m bin 62636400 }}\n    default_backend other\nbackend abc\n    server s {abc}\nbackend bcd\n    server s {bcd}\nbackend other\n    server s {other}\n"
    ));
    let send = |bytes: &[u8]| {
        let mut s = TcpStream::connect(p.addr()).unwrap();
        s.set_nodelay(true).unwrap();
        // In two writes: the block's end may arrive after the size (whether the proxy reads
        // them apart is the kernel's to decide; the unit tests of `sample::payload` judge
        // a block cut short).
        s.write_all(&bytes[..4]).unwrap();
        s.write_all(&bytes[4..]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let _ = s.read_to_end(&mut Vec::new());
    };
    send(b"\x07\x00\x03abcZZ");
    wait_until("abc routed", || seen_abc.lock().unwrap().len() == 1);
    send(b"\x07\x00\x04Xbcd\x00Z");
    wait_until("bcd routed", || seen_bcd.lock().unwrap().len() == 1);
    send(b"\x07\x00\x02xyZZ");
    wait_until("others routed", || seen_other.lock().unwrap().len() == 1);
    assert_eq!(seen_abc.lock().unwrap()[0], b"\x07\x00\x03abcZZ");
}

/// `fix_is_valid` and `fix_tag_value` on a FIX session's first message: the rules wait
/// while the message is cut short, then route by its SenderCompID, and a message with a
/// wrong checksum is refused.
#[test]
fn fix_messages_are_validated_and_routed_once_whole() {
    let (alpha, seen_alpha) = recorder();
    let (other, seen_other) = recorder();
    let p = Sluice::start(&format!(
        "{TCP_DEFAULTS}frontend f\n    {{fe}}\n    tcp-request inspect-delay 10s\n    tcp-request content reject unless {{ req.payload(0,0),fix_is_valid }}\n    use_backend alpha if {{ req.payload(0,0),fix_tag_value(SenderCompID) -m str ALPHA }}\n    default_backend other\nbackend alpha\n    server s {alpha}\nbackend other\n    server s {other}\n"
    ));
    let logon = |sender: &str, spoil: u8| {
        let body = format!("35=A\x0149={sender}\x0156=SERVER\x0134=1\x0198=0\x01108=30\x01");
        let mut m = format!("8=FIX.4.4\x019={}\x01{body}", body.len()).into_bytes();
        let sum = m.iter().fold(spoil, |s, &c| s.wrapping_add(c));
        m.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
        m
    };
    let send = |bytes: &[u8]| {
        let mut s = TcpStream::connect(p.addr()).unwrap();
        s.set_nodelay(true).unwrap();
        // The checksum in a write of its own (a message cut short is judged "more data" by
        // the unit tests of `sample::fix`).
        s.write_all(&bytes[..bytes.len() - 5]).unwrap();
        s.write_all(&bytes[bytes.len() - 5..]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
    };
    let alpha_msg = logon("ALPHA", 0);
    send(&alpha_msg);
    wait_until("ALPHA routed", || seen_alpha.lock().unwrap().len() == 1);
    send(&logon("BETA", 0));
    wait_until("BETA routed", || seen_other.lock().unwrap().len() == 1);
    // A spoiled checksum: refused, reaching no server.
    send(&logon("ALPHA", 1));
    send(&logon("BETA", 0));
    wait_until("the next BETA routed", || {
        seen_other.lock().unwrap().len() == 2
    });
    assert_eq!(seen_alpha.lock().unwrap().len(), 1);
    assert_eq!(seen_alpha.lock().unwrap()[0], alpha_msg);
}

/// `tcp-request content capture SAMPLE len N` keeps the SNI of a ClientHello in a request
/// capture slot, which a TCP log line shows (`%hr`, `%[capture.req.hdr(0)]`), with the
/// format's other samples (HAProxy 2.6.12 writes the same line for this configuration).
#[test]
fn a_tcp_session_logs_its_captures_and_samples() {
    let (server, _seen) = recorder();
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{TCP_DEFAULTS}    log global\nfrontend f\n    {{fe}}\n    tcp-request inspect-delay 5s\n    tcp-request content capture req.ssl_sni len 9\n    tcp-request content accept if {{ req_ssl_hello_type 1 }}\n    log-format \"%ft %b/%s sni=%[capture.req.hdr(0)] caps=%hr be=%[be_name] srv=%[srv_name]\"\n    default_backend b\nbackend b\n    server s {server}\n"
    ));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.write_all(&client_hello("sni.example.test", &[])).unwrap();
    drop(c);
    wait_until("the session logged", || p.stdout().contains("sni="));
    let line = p.stdout();
    assert!(
        line.contains("f b/s sni=sni.examp caps={sni.examp} be=b srv=s"),
        "{line}"
    );
    // A header capture needs HTTP; the sample's slot stays.
    let (ok, out) = check_config(&format!(
        "{TCP_DEFAULTS}frontend f\n    bind :1\n    capture request header host len 5\n    tcp-request content capture req.ssl_sni len 9\n    default_backend b\nbackend b\n    server s 127.0.0.1:2\n"
    ));
    assert!(ok && out.contains("'capture' statement ignored"), "{out}");
}

/// `tcp-request ... set-src`, `set-dst` and their ports change the addresses the rest of
/// the connection sees: the TCP log line, and an HTTP session's rules.
#[test]
fn tcp_rules_set_the_connections_addresses() {
    let (server, _seen) = recorder();
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{TCP_DEFAULTS}    log global\nfrontend f\n    {{fe}}\n    tcp-request connection set-src-port int(4242)\n    tcp-request content set-dst ipv4(127.0.0.9)\n    tcp-request content set-dst-port int(99)\n    log-format \"%ci:%cp src=%[src]:%[src_port] dst=%[dst]:%[dst_port]\"\n    default_backend b\nbackend b\n    server s {server}\n"
    ));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.write_all(b"hello").unwrap();
    drop(c);
    wait_until("the session logged", || p.stdout().contains("src="));
    let line = p.stdout();
    assert!(
        line.contains("127.0.0.1:4242 src=127.0.0.1:4242 dst=127.0.0.9:99"),
        "{line}"
    );
    let h = Sluice::start(
        "defaults\n    mode http\n    timeout client 5s\nfrontend fe\n    {fe}\n    tcp-request connection set-src ipv4(10.1.2.3)\n    tcp-request session set-dst-port int(8080)\n    http-request return status 200 content-type text/plain lf-string \"%[src] %[dst_port]\"\n",
    );
    assert_eq!(get(h.addr(), "/").text(), "10.1.2.3 8080");
}

/// A server that speaks first: sends `first`, then `rest` in a segment of its own (the
/// proxy may read them apart or together: the outcome is the same either way), then keeps
/// the connection until the peer closes.
fn banner_server(first: &'static [u8], rest: &'static [u8]) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.set_nodelay(true);
                let _ = s.write_all(first);
                let _ = s.write_all(rest);
                let mut sink = [0u8; 64];
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// `tcp-response inspect-delay` and `tcp-response content` rules on the server's payload
/// (`res.len`, `res.payload`): the rules wait for the bytes they need (the waiting itself is
/// the request side's, `inspect_payload`, tested with a ClientHello in pieces above), a
/// banner they accept reaches the client whole, one they reject closes the session with
/// nothing relayed.
#[test]
fn tcp_response_rules_read_the_servers_payload() {
    let good = banner_server(b"SS", b"H-2.0-test\r\n");
    let bad = banner_server(b"BA", b"D-banner\r\n");
    let rules = "    tcp-response inspect-delay 5s\n    tcp-response content reject if { res.payload(0,4) -m str BAD- }\n    tcp-response content accept if { res.len gt 3 }\n";
    let p = Sluice::start(&format!(
        "{TCP_DEFAULTS}listen good\n    {{fe}}\n{rules}    server s {good}\nlisten bad\n    {{fe}}\n{rules}    server s {bad}\n"
    ));
    let mut c = TcpStream::connect(p.addrs[0]).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while !got.ends_with(b"\r\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"SSH-2.0-test\r\n");
    let mut c = TcpStream::connect(p.addrs[1]).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(got.is_empty(), "{got:?}");
}
