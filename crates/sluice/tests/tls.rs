//! TLS termination through the real binary: certificates made at test time (rcgen), a
//! rustls client, SNI choosing among certificates, ALPN, protocol versions, the TLS sample
//! fetches and log variables, and configuration errors.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use common::*;
use rustls::pki_types::{CertificateDer, ServerName};

type TlsClient = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `addr` asking for `sni`; `Err` when the handshake fails.
fn connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    sni: &str,
) -> std::io::Result<TlsClient> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(TIMEOUT))?;
    let conn =
        rustls::ClientConnection::new(config, ServerName::try_from(sni.to_string()).unwrap())
            .map_err(std::io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// The certificate the server presented.
fn presented(s: &TlsClient) -> Vec<u8> {
    let certs: &[CertificateDer<'_>] = s.conn.peer_certificates().unwrap();
    certs[0].to_vec()
}

/// One request on an open TLS connection; the response head and body as text.
fn request(s: &mut (impl Read + Write), path: &str) -> String {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Enough for one small response: read until its body (Content-Length) is in.
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "connection closed: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out).to_string();
        if let Some(at) = text.find("\r\n\r\n") {
            let len: usize = text[..at]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if out.len() >= at + 4 + len {
                return text;
            }
        }
    }
}

#[test]
fn sni_chooses_the_certificate_exact_then_wildcard_then_default() {
    let origin = Origin::start("o");
    let ca = Ca::new();
    let dir = TempDir::new();
    let (default, default_der) = ca.leaf(&dir, "default.pem", &["default.test"]);
    let (exact, exact_der) = ca.leaf(&dir, "exact.pem", &["www.site.test"]);
    let (wild, wild_der) = ca.leaf(&dir, "wild.pem", &["*.site.test"]);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {default} crt {wild} crt {exact}\n    {{fe}} ssl crt {default} crt {exact} strict-sni\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let client = ca.client(&[], &[&rustls::version::TLS13, &rustls::version::TLS12]);
    // The exact name wins over the wildcard listed before it.
    let s = connect(p.addrs[0], client.clone(), "www.site.test").unwrap();
    assert_eq!(presented(&s), exact_der);
    let s = connect(p.addrs[0], client.clone(), "api.site.test").unwrap();
    assert_eq!(presented(&s), wild_der);
    // No match: the first certificate of the line (which the client then refuses, the name
    // not being its).
    assert!(connect(p.addrs[0], client.clone(), "other.test").is_err());
    let s = connect(p.addrs[0], client.clone(), "default.test").unwrap();
    assert_eq!(presented(&s), default_der);
    // strict-sni: no certificate for an unknown name, the handshake fails.
    assert!(connect(p.addrs[1], client.clone(), "api.site.test").is_err());
    let mut s = connect(p.addrs[1], client, "www.site.test").unwrap();
    assert!(request(&mut s, "/x").starts_with("HTTP/1.1 200"));
}

#[test]
fn requests_over_tls_see_the_session_in_fetches_and_logs() {
    let origin = Origin::start("o");
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}} ssl crt {crt} alpn h2,http/1.1\n    {{fe}}\n    log-format \"%sslv %sslc %[ssl_fc]\"\n    http-request set-header X-TLS %[ssl_fc]\n    http-request set-header X-SNI %[ssl_fc_sni] if {{ ssl_fc }}\n    http-request set-header X-Proto %[ssl_fc_protocol] if {{ ssl_fc }}\n    http-request set-header X-Cipher %[ssl_fc_cipher] if {{ ssl_fc }}\n    http-request set-header X-ALPN %[ssl_fc_alpn] if {{ ssl_fc }}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let client = ca.client(&["http/1.1"], &[&rustls::version::TLS13]);
    let mut s = connect(p.addrs[0], client, "site.test").unwrap();
    assert_eq!(s.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    // Two requests on one connection. Each line is awaited before the next request: the
    // workers write their lines in the order their transactions end.
    let logged = |n: usize| wait_until("log lines", || p.stdout().lines().count() >= n);
    assert!(request(&mut s, "/a").ends_with("o /a"));
    logged(1);
    assert!(request(&mut s, "/b").ends_with("o /b"));
    logged(2);
    let seen = origin.requests().pop().unwrap();
    assert_eq!(seen.header("x-tls"), Some("1"));
    assert_eq!(seen.header("x-sni"), Some("site.test"));
    assert_eq!(seen.header("x-proto"), Some("TLSv1.3"));
    assert!(
        seen.header("x-cipher")
            .is_some_and(|c| c.starts_with("TLS_")),
        "{seen:?}"
    );
    assert_eq!(seen.header("x-alpn"), Some("http/1.1"));
    // The clear listener of the same frontend.
    assert_eq!(get(p.addrs[1], "/c").status, 200);
    assert_eq!(origin.requests().pop().unwrap().header("x-tls"), Some("0"));
    let lines = {
        logged(3);
        p.stdout()
    };
    let first = lines.lines().next().unwrap();
    assert!(
        first.starts_with("TLSv1.3 TLS_") && first.ends_with(" 1"),
        "{first}"
    );
    assert!(
        lines.lines().nth(2).unwrap().starts_with("- - 0"),
        "{lines}"
    );
}

#[test]
fn option_httpslog_adds_the_sessions_errors_resumption_and_names() {
    let origin = Origin::start("o");
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}}\n    option httpslog\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    // One client, two connections: the second resumes the first one's session.
    let client = ca.client(&[], &[&rustls::version::TLS13]);
    // Each line is awaited before the next request: the workers write their lines in the
    // order their transactions end.
    for (n, path) in ["/full", "/resumed"].into_iter().enumerate() {
        let mut s = connect(p.addrs[0], client.clone(), "site.test").unwrap();
        assert!(request(&mut s, path).ends_with(&format!("o {path}")));
        wait_until("its line", || p.stdout().lines().count() > n);
    }
    assert_eq!(get(p.addrs[1], "/clear").status, 200);
    wait_until("three log lines", || p.stdout().lines().count() >= 3);
    let out = p.stdout();
    let lines: Vec<&str> = out.lines().collect();
    let suite = "TLSv1.3/TLS_AES_128_GCM_SHA256";
    for (line, tail) in [
        (
            lines[0],
            format!("\"GET /full HTTP/1.1\" 0/0000000000000000/0/0/0 site.test/{suite}"),
        ),
        (
            lines[1],
            format!("\"GET /resumed HTTP/1.1\" 0/0000000000000000/0/0/1 site.test/{suite}"),
        ),
        // A clear connection has no TLS session to report.
        (
            lines[2],
            "\"GET /clear HTTP/1.1\" 0/-/-/-/- -/-/-".to_string(),
        ),
    ] {
        assert!(line.ends_with(&tail), "{line}\nshould end with {tail}");
    }
    // `%ft`: a TLS connection's frontend is `fe~`, as HAProxy writes it.
    assert!(
        lines[0].contains(" fe~ be/s ") && lines[1].contains(" fe~ be/s "),
        "{out}"
    );
    assert!(lines[2].contains(" fe be/s "), "{out}");
}

#[test]
fn versions_and_suites_are_enforced() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt} ssl-min-ver TLSv1.3\n    {{fe}} ssl crt {crt} ssl-max-ver TLSv1.2 ciphers ECDHE-ECDSA-AES256-GCM-SHA384\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_fc_protocol] %[ssl_fc_cipher]\"\n",
    ));
    let tls12 = ca.client(&[], &[&rustls::version::TLS12]);
    let tls13 = ca.client(&[], &[&rustls::version::TLS13]);
    assert!(connect(p.addrs[0], tls12.clone(), "site.test").is_err());
    let mut s = connect(p.addrs[0], tls13.clone(), "site.test").unwrap();
    let answer = request(&mut s, "/");
    assert!(answer.contains("\r\n\r\nTLSv1.3 TLS_"), "{answer}");
    assert!(connect(p.addrs[1], tls13, "site.test").is_err());
    let mut s = connect(p.addrs[1], tls12, "site.test").unwrap();
    assert!(request(&mut s, "/").ends_with("TLSv1.2 ECDHE-ECDSA-AES256-GCM-SHA384"));
}

#[test]
fn version_options_of_binds_servers_and_defaults() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    // Turning off what rustls never speaks changes nothing; `no-tlsv12` leaves TLS 1.3
    // (the bind's own `ssl-max-ver` wins over the default one), `force-tlsv12` TLS 1.2, and
    // the defaults' `ssl-max-ver TLSv1.2` applies to a bind without options of its own.
    let p = Sluice::start(&format!(
        "global\n    ssl-default-bind-options no-sslv3 no-tlsv10 no-tlsv11 ssl-max-ver TLSv1.2\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt} no-sslv3 no-tlsv10 no-tlsv11 no-tlsv12 ssl-max-ver TLSv1.3\n    {{fe}} ssl crt {crt} force-tlsv12\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_fc_protocol]\"\n",
    ));
    let tls12 = ca.client(&[], &[&rustls::version::TLS12]);
    let tls13 = ca.client(&[], &[&rustls::version::TLS13]);
    for (addr, speaks) in [
        (p.addrs[0], "TLSv1.3"),
        (p.addrs[1], "TLSv1.2"),
        (p.addrs[2], "TLSv1.2"),
    ] {
        let (good, bad) = match speaks {
            "TLSv1.3" => (tls13.clone(), tls12.clone()),
            _ => (tls12.clone(), tls13.clone()),
        };
        assert!(connect(addr, bad, "site.test").is_err(), "{speaks}");
        let mut s = connect(addr, good, "site.test").unwrap();
        assert!(request(&mut s, "/").ends_with(speaks));
    }
    // Towards servers: the origin above speaks only TLS 1.2 on its second bind, so a
    // server line that forces TLS 1.3 cannot connect, and one that forces TLS 1.2 can.
    let front = Sluice::start(&format!(
        "{DEFAULTS}frontend f\n    {{fe}}\n    use_backend b13 if {{ path /13 }}\n    default_backend b12\nbackend b13\n    server s {} ssl verify none force-tlsv13\nbackend b12\n    server s {} ssl verify none no-tlsv13 ssl-min-ver TLSv1.2\n",
        p.addrs[1], p.addrs[1]
    ));
    assert_eq!(get(front.addr(), "/13").status, 503);
    let r = get(front.addr(), "/12");
    assert_eq!((r.status, r.text()), (200, "TLSv1.2".to_string()));
    // Versions rustls does not have cannot be forced.
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt {crt} force-tlsv11\n"
    ));
    assert!(
        !ok && err.contains("force-tlsv11: rustls has only TLSv1.2 and TLSv1.3"),
        "{err}"
    );
}

#[test]
fn garbage_instead_of_a_client_hello_closes_only_that_connection() {
    let origin = Origin::start("o");
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    // Plain HTTP on the TLS port, and a truncated record.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    assert!(!String::from_utf8_lossy(&buf).contains("HTTP/1.1 200"));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.write_all(&[0x16, 0x03, 0x01, 0x40, 0x00, 0x01]).unwrap();
    drop(c);
    // Others are served.
    let mut s = connect(
        p.addr(),
        ca.client(&[], &[&rustls::version::TLS13]),
        "site.test",
    )
    .unwrap();
    assert!(request(&mut s, "/").starts_with("HTTP/1.1 200"));
}

#[test]
fn tls_configuration_errors_name_the_bind_line() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    for (bind, says) in [
        (
            "bind 127.0.0.1:1 ssl crt /nonexistent.pem",
            "/nonexistent.pem",
        ),
        ("bind 127.0.0.1:1 ssl", "needs at least one 'crt"),
        ("bind 127.0.0.1:1 crt CRT", "TLS options without 'ssl'"),
        (
            "bind 127.0.0.1:1 ssl crt CRT ciphers DHE-RSA-AES128-GCM-SHA256",
            "no usable cipher in 'DHE-RSA-AES128-GCM-SHA256'",
        ),
        (
            "bind 127.0.0.1:1 ssl crt CRT curves sect571r1",
            "no usable curve in 'sect571r1'",
        ),
        (
            "bind 127.0.0.1:1 ssl crt CRT ssl-min-ver TLSv1.0 ssl-max-ver TLSv1.1",
            "no TLS version left",
        ),
        (
            "bind 127.0.0.1:1 ssl crt CRT crl-file x.pem",
            "bind option 'crl-file': not supported yet",
        ),
    ] {
        let bind = bind.replace("CRT", &crt);
        let (ok, out) = check_config(&format!(
            "{DEFAULTS}frontend fe\n    {bind}\n    http-request return status 200\n"
        ));
        assert!(
            !ok && out.contains(says) && out.contains(":7:"),
            "{bind}: {out}"
        );
    }
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt {crt} alpn http/1.1\n    http-request return status 200\n"
    ));
    assert!(ok, "{out}");
    // Mozilla's "intermediate" lists: what rustls lacks (DHE, secp521r1) is skipped with one
    // warning per list naming it, as OpenSSL skips it; the global lists apply to the bind.
    let (ok, out) = check_config(&format!(
        "global\n    ssl-default-bind-ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-CHACHA20-POLY1305\n    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt {crt} curves X25519:secp521r1\n    bind 127.0.0.1:2 ssl crt {crt}\n    http-request return status 200\n"
    ));
    assert!(ok, "{out}");
    let warned = |what: &str| out.matches(what).count();
    assert_eq!(
        warned("ciphers: DHE-RSA-AES128-GCM-SHA256, DHE-RSA-CHACHA20-POLY1305 not available with rustls, skipped"),
        1,
        "{out}"
    );
    assert_eq!(
        warned("curves: secp521r1 not available with rustls, skipped"),
        1,
        "{out}"
    );
    assert_eq!(warned("ciphersuites"), 0, "{out}");
    // `alpn` on a bind without `ssl` has nothing to negotiate in: ignored with a warning, as
    // HAProxy does, and the bind serves in clear.
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 alpn h2,http/1.1\n    http-request return status 200\n"
    ));
    assert!(ok, "{out}");
    assert!(
        out.contains("'alpn' ignored on bind 127.0.0.1:1 which has no 'ssl'."),
        "{out}"
    );
    // OpenSSL's engines have no counterpart: the line is refused with that reason.
    let (ok, out) = check_config(&format!(
        "global\n    ssl-engine pkcs11\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request return status 200\n"
    ));
    assert!(
        !ok && out.contains(":2:") && out.contains("ssl-engine") && out.contains("rustls"),
        "{out}"
    );
}

#[test]
fn sessions_resume_by_ticket_and_by_id() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    tune.ssl.cachesize 100\n    tune.ssl.default-dh-param 2048\n    ssl-dh-param-file dhparam.pem\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {crt} no-tls-tickets\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    for inert in ["tune.ssl.default-dh-param", "ssl-dh-param-file"] {
        assert!(p
            .stderr()
            .contains(&format!("'{inert}' is accepted but has no effect")));
    }
    for (addr, versions) in [
        (p.addrs[0], &rustls::version::TLS13),
        (p.addrs[0], &rustls::version::TLS12),
        (p.addrs[1], &rustls::version::TLS12),
        (p.addrs[1], &rustls::version::TLS13),
    ] {
        // One client configuration keeps its session cache between connections.
        let client = ca.client(&[], &[versions]);
        let mut first = connect(addr, client.clone(), "site.test").unwrap();
        assert!(request(&mut first, "/").starts_with("HTTP/1.1 200"));
        assert_eq!(
            first.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Full)
        );
        drop(first);
        let mut second = connect(addr, client, "site.test").unwrap();
        assert!(request(&mut second, "/").starts_with("HTTP/1.1 200"));
        assert_eq!(
            second.conn.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed),
            "{addr} {versions:?}"
        );
    }
    // show info counts them: eight TLS connections, half of them resumed, none open now.
    let info = |field: &str| show_info(&sock, field);
    wait_until("the connections to end", || info("CurrSslConns") == "0");
    assert_eq!(info("CumSslConns"), "8");
    assert_eq!(info("SslFrontendSessionReuse_pct"), "50");
    // So does show stat's TLS module, and a failed handshake is counted there too.
    let mut junk = TcpStream::connect(p.addrs[1]).unwrap();
    junk.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let _ = junk.read_to_end(&mut Vec::new());
    wait_until("the failed handshake to be counted", || {
        stat_field(
            &Sluice::cli(&sock, "show stat"),
            "fe",
            "FRONTEND",
            "ssl_failed_handshake",
        ) == "1"
    });
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "ssl_sess"), "8");
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "ssl_reused_sess"), "4");
}

/// The value of one `show info` field, from the CLI socket at `sock`.
fn show_info(sock: &std::path::Path, field: &str) -> String {
    Sluice::cli(sock, "show info")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}: ")).map(str::to_string))
        .unwrap_or_default()
}

/// A client session store that counts the TLS 1.3 tickets it is given.
#[derive(Debug)]
struct CountingStore {
    inner: rustls::client::ClientSessionMemoryCache,
    tickets: std::sync::atomic::AtomicUsize,
}

impl rustls::client::ClientSessionStore for CountingStore {
    fn set_kx_hint(&self, server: ServerName<'static>, group: rustls::NamedGroup) {
        self.inner.set_kx_hint(server, group)
    }
    fn kx_hint(&self, server: &ServerName<'_>) -> Option<rustls::NamedGroup> {
        self.inner.kx_hint(server)
    }
    fn set_tls12_session(
        &self,
        server: ServerName<'static>,
        value: rustls::client::Tls12ClientSessionValue,
    ) {
        self.inner.set_tls12_session(server, value)
    }
    fn tls12_session(
        &self,
        server: &ServerName<'_>,
    ) -> Option<rustls::client::Tls12ClientSessionValue> {
        self.inner.tls12_session(server)
    }
    fn remove_tls12_session(&self, server: &ServerName<'static>) {
        self.inner.remove_tls12_session(server)
    }
    fn insert_tls13_ticket(
        &self,
        server: ServerName<'static>,
        value: rustls::client::Tls13ClientSessionValue,
    ) {
        self.tickets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.insert_tls13_ticket(server, value)
    }
    fn take_tls13_ticket(
        &self,
        server: &ServerName<'static>,
    ) -> Option<rustls::client::Tls13ClientSessionValue> {
        self.inner.take_tls13_ticket(server)
    }
}

#[test]
fn no_tickets_are_issued_when_nothing_could_resume_them() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "global\n    tune.ssl.cachesize 0\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {crt} no-tls-tickets\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    // Tickets on, no cache: the client is given tickets and resumes with one. Tickets off
    // and no cache: nothing could resume, so no ticket is sent at all.
    for (addr, tickets, second) in [
        (p.addrs[0], true, rustls::HandshakeKind::Resumed),
        (p.addrs[1], false, rustls::HandshakeKind::Full),
    ] {
        let store = Arc::new(CountingStore {
            inner: rustls::client::ClientSessionMemoryCache::new(16),
            tickets: 0.into(),
        });
        let mut config = (*ca.client(&[], &[&rustls::version::TLS13])).clone();
        config.resumption = rustls::client::Resumption::store(store.clone());
        let config = Arc::new(config);
        let mut first = connect(addr, config.clone(), "site.test").unwrap();
        assert!(request(&mut first, "/").starts_with("HTTP/1.1 200"));
        drop(first);
        let got = store.tickets.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(got > 0, tickets, "{addr}: {got} tickets");
        let mut again = connect(addr, config, "site.test").unwrap();
        assert!(request(&mut again, "/").starts_with("HTTP/1.1 200"));
        assert_eq!(again.conn.handshake_kind(), Some(second), "{addr}");
    }
}

#[test]
fn a_crt_list_chooses_certificates_by_its_own_names() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (a, a_der) = ca.leaf(&dir, "a.pem", &["a.test", "shop.test", "*.shop.test"]);
    let (b, b_der) = ca.leaf(&dir, "b.pem", &["b.test", "shop.test", "api.shop.test"]);
    // shop.test is on both: the list gives it to b, and a wildcard of b's to a except api.
    let list = dir.write(
        "certs.list",
        &format!("# comment\n{a} [] a.test *.shop.test !api.shop.test\n{b} b.test shop.test api.shop.test\n"),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt-list {list}\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    let client = ca.client(&[], &[&rustls::version::TLS13]);
    let cert = |sni: &str| presented(&connect(p.addr(), client.clone(), sni).unwrap());
    assert_eq!(cert("a.test"), a_der);
    assert_eq!(cert("shop.test"), b_der);
    assert_eq!(cert("api.shop.test"), b_der);
    assert_eq!(cert("www.shop.test"), a_der, "a's wildcard filter");
    let bad = dir.write("bad.list", &format!("{a} [alpn h2] a.test\n"));
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt-list {bad}\n    http-request return status 200\n"
    ));
    assert!(
        !ok && out.contains("line 1: per-certificate options '[alpn h2]': not supported yet"),
        "{out}"
    );
}

#[test]
fn client_certificates_are_verified_against_the_ca_file() {
    let ca = Ca::new();
    let other_ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let ca_file = dir.write("ca.pem", &ca.cert.pem());
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt} ca-file {ca_file} verify required\n    {{fe}} ssl crt {crt} ca-file {ca_file} verify optional\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_c_used] %[ssl_c_verify] %[ssl_c_s_dn] %[ssl_c_i_dn]\"\n"
    ));
    // A client certificate made by the same CA, and one by another.
    let with_cert = |issuer: &Ca, cn: &str| {
        let (cert, key) = issuer.client_cert(cn);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_root_certificates(roots)
                .with_client_auth_cert(vec![cert.der().clone()], key)
                .unwrap(),
        )
    };
    let anonymous = ca.client(&[], &[&rustls::version::TLS13]);
    let good = with_cert(&ca, "alice");
    let forged = with_cert(&other_ca, "mallory");
    // required: no certificate or a foreign one, no session.
    let fails = |addr, c: Arc<rustls::ClientConfig>| {
        connect(addr, c, "site.test")
            .and_then(|mut s| {
                s.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")?;
                let mut b = [0u8; 64];
                match s.read(&mut b)? {
                    0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
                    _ => Ok(()),
                }
            })
            .is_err()
    };
    assert!(fails(p.addrs[0], anonymous.clone()));
    assert!(fails(p.addrs[0], forged.clone()));
    let mut s = connect(p.addrs[0], good.clone(), "site.test").unwrap();
    let answer = request(&mut s, "/");
    assert!(
        answer.ends_with("1 0 /CN=alice /CN=sluice test CA"),
        "{answer}"
    );
    // optional: without a certificate the session goes on; a foreign one still fails.
    let mut s = connect(p.addrs[1], anonymous, "site.test").unwrap();
    assert!(request(&mut s, "/").ends_with("\r\n\r\n0 0  "));
    assert!(fails(p.addrs[1], forged));
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt {crt} verify required\n    http-request return status 200\n"
    ));
    assert!(
        !ok && out.contains("'verify required' needs a 'ca-file'"),
        "{out}"
    );
}

#[test]
fn certificates_are_replaced_at_run_time_from_the_cli() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let (crt, old_der) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    let client = ca.client(&[], &[&rustls::version::TLS13]);
    let mut before = connect(p.addr(), client.clone(), "site.test").unwrap();
    assert_eq!(presented(&before), old_der);
    // A new certificate for the same file, in a transaction.
    let (_, new_der) = ca.leaf(&dir, "next.pem", &["site.test"]);
    let new_pem = std::fs::read_to_string(dir.0.join("next.pem")).unwrap();
    let out = Sluice::cli(&sock, &format!("set ssl cert {crt} <<\n{new_pem}"));
    assert!(
        out.contains(&format!("Transaction created for certificate {crt}!")),
        "{out}"
    );
    let listed = Sluice::cli(&sock, "show ssl cert");
    assert!(
        listed.contains(&format!("# transaction\n*{crt}\n# filename\n{crt}\n")),
        "{listed}"
    );
    // Not committed yet: handshakes still get the old one.
    assert_eq!(
        presented(&connect(p.addr(), client.clone(), "site.test").unwrap()),
        old_der
    );
    let out = Sluice::cli(&sock, &format!("commit ssl cert {crt}"));
    assert!(out.contains("Success!"), "{out}");
    assert_eq!(
        presented(&connect(p.addr(), client.clone(), "site.test").unwrap()),
        new_der
    );
    // The connection opened before keeps going.
    assert!(request(&mut before, "/").starts_with("HTTP/1.1 200"));
    let shown = Sluice::cli(&sock, &format!("show ssl cert {crt}"));
    assert!(
        shown.contains("Status: Used") && shown.contains("Issuer: /CN=sluice test CA"),
        "{shown}"
    );
    assert!(Sluice::cli(&sock, &format!("abort ssl cert {crt}")).contains("No ongoing transaction"));
    let out = Sluice::cli(&sock, "set ssl cert /not/loaded.pem <<\nx\n");
    assert!(out.contains("not referenced by the configuration"), "{out}");
}

#[test]
fn connections_to_servers_can_be_tls_and_are_verified() {
    let ca = Ca::new();
    let other_ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "origin.pem", &["origin.test"]);
    let (foreign, _) = other_ca.leaf(&dir, "foreign.pem", &["origin.test"]);
    let ca_file = dir.write("ca.pem", &ca.cert.pem());
    // The TLS servers: two sluice listeners answering with what they saw.
    let origin = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {foreign}\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_fc] %[ssl_fc_sni] %[src_port]\"\n"
    ));
    let (good, bad) = (origin.addrs[0], origin.addrs[1]);
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    log-format \"%b %ST %ts\"\n    use_backend named if {{ path /named }}\n    use_backend any if {{ path /any }}\n    use_backend refused if {{ path /refused }}\n    use_backend nameless if {{ path /nameless }}\nbackend named\n    server s {good} ssl verify required ca-file {ca_file} sni str(origin.test)\nbackend any\n    server s {bad} ssl verify none\nbackend refused\n    retries 0\n    server s {bad} ssl ca-file {ca_file} sni str(origin.test)\nbackend nameless\n    server s {good} ssl ca-file {ca_file}\n"
    ));
    let mut c = p.connect();
    let first = c.get("/named").text();
    assert!(first.starts_with("1 origin.test "), "{first}");
    // Kept alive: the second request reuses the TLS connection to the server.
    let second = c.get("/named").text();
    assert_eq!(
        first, second,
        "same server-side port: the connection was reused"
    );
    assert!(get(p.addr(), "/any").text().starts_with("1 "));
    // Signed by another authority: the handshake fails, which is a connection failure,
    // logged as such (server side, while connecting).
    assert_eq!(get(p.addr(), "/refused").status, 503);
    wait_until("the refused request's log line", || {
        p.stdout().lines().any(|l| l.starts_with("refused "))
    });
    let out = p.stdout();
    let line = out.lines().find(|l| l.starts_with("refused ")).unwrap();
    assert_eq!(line, "refused 503 SC", "{out}");
    // Without sni, the chain is checked but not the names (and no SNI is sent).
    let r = get(p.addr(), "/nameless").text();
    assert!(r.starts_with("1  "), "{r}");
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    server s 127.0.0.1:2 ssl\n"
    ));
    assert!(!ok && out.contains("no ca-file is given"), "{out}");
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    server s 127.0.0.1:2 ssl verify none sni req.hdr(host)\n"
    ));
    assert!(!ok && out.contains("per-request SNI"), "{out}");
}

#[test]
fn a_slow_handshake_is_cut_off_by_the_request_timeout() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n    timeout http-request 500ms\nfrontend fe\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    // The start of a ClientHello record, then nothing: the connection is closed, long
    // before the client's own 20 s read timeout.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 256];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    assert!(started.elapsed() < TIMEOUT);
    // The proxy serves others meanwhile and after.
    let mut s = connect(
        p.addr(),
        ca.client(&[], &[&rustls::version::TLS13]),
        "site.test",
    )
    .unwrap();
    assert!(request(&mut s, "/").starts_with("HTTP/1.1 200"));
}

#[test]
fn the_servers_order_of_suites_wins_unless_prefer_client_ciphers() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {crt} prefer-client-ciphers\n    http-request return status 200 content-type text/plain lf-string %[ssl_fc_cipher]\n"
    ));
    // A client preferring ChaCha20 to AES-128-GCM.
    let client = ca.client_offering(
        vec![
            rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
        ],
        &rustls::version::TLS13,
    );
    let mut s = connect(p.addrs[0], client.clone(), "site.test").unwrap();
    assert!(request(&mut s, "/").ends_with("TLS_AES_128_GCM_SHA256"));
    let mut s = connect(p.addrs[1], client, "site.test").unwrap();
    assert!(request(&mut s, "/").ends_with("TLS_CHACHA20_POLY1305_SHA256"));
}

#[test]
fn a_response_that_ends_the_connection_arrives_whole_then_close_notify() {
    // Its last records wait for the close_notify and leave with it: nothing may be lost.
    let big: String = (0..40_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let body = big.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            match r.target.as_str() {
            "/chunked" => format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n5\r\ntail.\r\n0\r\n\r\n",
                body.len()
            )
            .into_bytes()
            .into(),
            _ => ok_response(&body).into(),
        }
        }),
    );
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    for (path, expect) in [
        ("/length", big.clone()),
        ("/chunked", format!("{big}tail.")),
    ] {
        let req = format!("GET {path} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
        // Over TLS: read_to_end fails on a close without close_notify.
        let mut s = connect(
            p.addrs[0],
            ca.client(&[], &[&rustls::version::TLS13]),
            "site.test",
        )
        .unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("a clean TLS close");
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text:.200}");
        let payload = text.split_once("\r\n\r\n").unwrap().1;
        let payload = if path == "/chunked" {
            dechunk(payload)
        } else {
            payload.to_string()
        };
        assert_eq!(payload.len(), expect.len(), "{path} over TLS");
        assert!(payload == expect, "{path} over TLS");
        // In clear: the whole response, then the end of the stream.
        let mut c = TcpStream::connect(p.addrs[1]).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        let text = String::from_utf8_lossy(&got);
        let payload = text.split_once("\r\n\r\n").unwrap().1;
        let payload = if path == "/chunked" {
            dechunk(payload)
        } else {
            payload.to_string()
        };
        assert!(
            payload == expect,
            "{path} in clear: {} bytes",
            payload.len()
        );
    }
}

/// The data of a chunked body (sizes in hex, no extensions, no trailers).
fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").expect("a chunk size line");
        let n = usize::from_str_radix(size, 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}

#[test]
fn by_default_aes_128_is_chosen_over_aes_256_the_client_lists_first() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_fc_protocol] %[ssl_fc_cipher]\"\n"
    ));
    use rustls::crypto::ring::cipher_suite as cs;
    // Clients that list the 256-bit suite first, as OpenSSL's defaults do.
    for (version, offered, chosen) in [
        (
            &rustls::version::TLS13,
            vec![cs::TLS13_AES_256_GCM_SHA384, cs::TLS13_AES_128_GCM_SHA256],
            "TLSv1.3 TLS_AES_128_GCM_SHA256",
        ),
        (
            &rustls::version::TLS12,
            vec![
                cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
                cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            ],
            "TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256",
        ),
    ] {
        let client = ca.client_offering(offered, version);
        let mut s = connect(p.addr(), client, "site.test").unwrap();
        let body = request(&mut s, "/");
        assert!(body.ends_with(chosen), "{body}");
    }
}

#[test]
fn ecdsa_and_rsa_certificates_for_one_name_follow_what_the_client_offers() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (ecdsa, ecdsa_der) = ca.leaf(&dir, "ecdsa.pem", &["site.test"]);
    // ring signs with RSA but does not make RSA keys: openssl makes this one.
    let rsa_key = dir.0.join("rsa.key");
    let made = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&rsa_key)
        .output()
        .expect("openssl");
    assert!(made.status.success());
    let key = rcgen::KeyPair::from_pem(&std::fs::read_to_string(&rsa_key).unwrap()).unwrap();
    let params = rcgen::CertificateParams::new(vec!["site.test".to_string()]).unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let rsa = dir.write("rsa.pem", &format!("{}{}", cert.pem(), key.serialize_pem()));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {ecdsa} crt {rsa}\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    // A TLS 1.2 client offering only RSA suites gets the RSA certificate; one offering
    // ECDSA (or TLS 1.3) the first, ECDSA, one.
    let client = |suites, v| ca.client_offering(suites, v);
    use rustls::crypto::ring::cipher_suite as cs;
    let rsa_only = client(
        vec![cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256],
        &rustls::version::TLS12,
    );
    let s = connect(p.addr(), rsa_only, "site.test").unwrap();
    assert_eq!(presented(&s), cert.der().to_vec());
    let ecdsa_only = client(
        vec![cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256],
        &rustls::version::TLS12,
    );
    assert_eq!(
        presented(&connect(p.addr(), ecdsa_only, "site.test").unwrap()),
        ecdsa_der
    );
    let tls13 = ca.client(&[], &[&rustls::version::TLS13]);
    assert_eq!(
        presented(&connect(p.addr(), tls13, "site.test").unwrap()),
        ecdsa_der
    );
}

#[test]
fn health_checks_go_over_tls_with_the_server() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "origin.pem", &["origin.test"]);
    let origin = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain string up\n"
    ));
    let plain = Origin::start("plain");
    let sock = dir.0.join("admin.sock");
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    option httpchk GET /\n    server tls {} ssl verify none check inter 200ms\n    server wrong {} check-ssl verify none check inter 200ms\n",
        sock.display(),
        origin.addr(),
        plain.addr
    ));
    let status =
        |srv: &str| stat_field(&Sluice::cli(&sock, "show stat"), "be", srv, "check_status");
    wait_until("both checks to run", || {
        status("tls").starts_with("L7") && status("wrong").starts_with("L6")
    });
    assert_eq!(status("tls"), "L7OK");
    assert_eq!(status("wrong"), "L6RSP");
}

#[test]
fn an_idle_tls_server_connection_moves_to_another_worker_with_its_session() {
    // Server side: a TLS listener in front of an origin that holds the /fill requests until
    // both are in, so that worker 1 ends up with two idle TLS connections.
    let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = arrived.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            if r.target.starts_with("/fill") {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let deadline = std::time::Instant::now() + TIMEOUT;
                while seen.load(std::sync::atomic::Ordering::SeqCst) < 2
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            ok_response(&format!("o {}", r.target)).into()
        }),
    );
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "origin.pem", &["origin.test"]);
    let tls_origin = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    default_backend be\nbackend be\n    server o {}\n",
        origin.addr
    ));
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}frontend w1\n    {{fe}} thread 1\n    default_backend be\nfrontend w2\n    {{fe}} thread 2\n    default_backend be\nbackend be\n    http-reuse always\n    server s1 {} ssl verify none pool-low-conn 2\n",
        sock.display(),
        tls_origin.addr()
    ));
    let addr = p.addrs[0];
    let fill: Vec<_> = (0..2)
        .map(|i| std::thread::spawn(move || get(addr, &format!("/fill{i}")).status))
        .collect();
    for f in fill {
        assert_eq!(f.join().unwrap(), 200);
    }
    let takeovers = || {
        Sluice::cli(&sock, "show activity")
            .lines()
            .find(|l| l.starts_with("fd_takeover:"))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
            .unwrap_or_default()
    };
    wait_until("two idle connections on worker 1", || {
        Sluice::cli(&sock, "show servers conn")
            .lines()
            .find(|l| l.starts_with("be/s1 "))
            .and_then(|l| l.split_whitespace().nth(13).map(|v| v == "2"))
            .unwrap_or(false)
    });
    // Worker 2 takes one over: the TLS session goes with the socket and keeps working.
    assert_eq!(get(p.addrs[1], "/stolen").text(), "o /stolen");
    assert_eq!(takeovers(), "1");
    assert_eq!(get(p.addrs[1], "/again").text(), "o /again");
}

#[test]
fn crt_base_and_ca_base_resolve_relative_names() {
    let ca = Ca::new();
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.0.join("certs")).unwrap();
    std::fs::create_dir_all(dir.0.join("cas")).unwrap();
    let (_, der) = ca.leaf(&dir, "certs/site.pem", &["site.test"]);
    dir.write("cas/ca.pem", &ca.cert.pem());
    let p = Sluice::start(&format!(
        "global\n    crt-base {}\n    ca-base {}\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt site.pem ca-file ca.pem verify optional\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_c_used]\"\n",
        dir.0.join("certs").display(),
        dir.0.join("cas").display()
    ));
    let mut s = connect(
        p.addr(),
        ca.client(&[], &[&rustls::version::TLS13]),
        "site.test",
    )
    .unwrap();
    assert_eq!(presented(&s), der);
    assert!(request(&mut s, "/").ends_with("\r\n\r\n0"));
}

/// A TLS front for health checks to aim at: it knows only `localhost` and refuses other
/// names (`strict-sni`), offers h2 and http/1.1, and relays to `origin`; its CLI on `sock`.
fn strict_sni_front(pem: &str, sock: &std::path::Path, origin: SocketAddr) -> Sluice {
    Sluice::start(&format!(
        "global\n stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {pem} strict-sni alpn h2,http/1.1\n    default_backend be\nbackend be\n    server o {origin}\n",
        sock.display(),
    ))
}

/// HEADERS frames the front of [`strict_sni_front`] received: checks that spoke HTTP/2.
fn h2_heads_received(sock: &std::path::Path) -> u64 {
    let csv = Sluice::cli(sock, "show stat");
    stat_field(&csv, "fe", "FRONTEND", "h2_headers_rcvd")
        .parse()
        .unwrap()
}

#[test]
fn health_checks_ask_for_check_sni_and_offer_check_alpn() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let front_sock = dir.0.join("front.sock");
    let sock = dir.0.join("checker.sock");
    let front = strict_sni_front(&pem, &front_sock, origin.addr);
    let backend = |name: &str, opts: &str| {
        format!(
            "backend {name}\n    option httpchk GET /{name}\n    server s {} ssl verify none check inter 100ms rise 1 fall 1 {opts}\n",
            front.addr()
        )
    };
    let _checker = Sluice::start(&format!(
        "global\n stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend named\n{}{}{}",
        sock.display(),
        backend("named", "check-sni localhost"),
        backend("misnamed", "check-sni other.test"),
        backend("h2", "check-sni localhost check-alpn h2"),
    ));
    let field = |be: &str, f: &str| stat_field(&Sluice::cli(&sock, "show stat"), be, "s", f);
    wait_until("every check judged", || {
        field("named", "check_status") == "L7OK"
            && field("h2", "check_status") == "L7OK"
            && field("misnamed", "status") == "DOWN"
    });
    // The front refused the handshake that asked for a name it does not have.
    assert!(
        field("misnamed", "check_status").starts_with("L6"),
        "{}",
        field("misnamed", "check_status")
    );
    let seen = |path: &str| origin.requests().iter().any(|r| r.target == path);
    assert!(seen("/named") && seen("/h2") && !seen("/misnamed"));
    // The check that offered only h2 spoke HTTP/2; the others, without ALPN, HTTP/1.1.
    assert!(h2_heads_received(&front_sock) > 0);
    let (ok, out) = check_config(
        "defaults\n mode http\nbackend b\n server s 127.0.0.1:1 ssl verify none check check-sni -bad-\nfrontend f\n bind 127.0.0.1:1\n default_backend b\n",
    );
    assert!(
        !ok && out.contains(":4") && out.contains("'-bad-' is not a valid name"),
        "{out}"
    );
}

/// `http-check connect` and `tcp-check connect` with `ssl`, `sni`, `alpn` and `proto`, as
/// HAProxy 2.6 reads them: `ssl` makes a server without `check-ssl` checked over TLS,
/// asking for the rule's name and protocols; an explicit connect without `default` or
/// `ssl` is plain even on a `check-ssl` server, and `default` takes the server's TLS.
#[test]
fn check_connect_rules_choose_tls_name_and_protocols() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let front_sock = dir.0.join("front.sock");
    let sock = dir.0.join("checker.sock");
    let front = strict_sni_front(&pem, &front_sock, origin.addr);
    let backend = |name: &str, connect: &str, server: &str| {
        format!(
            "backend {name}\n    option httpchk GET /{name}\n    http-check connect {connect}\n    server s {} {server} check inter 100ms rise 1 fall 1\n",
            front.addr()
        )
    };
    let _checker = Sluice::start(&format!(
        "global\n stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend rule\n{}{}{}{}backend tcp\n    option tcp-check\n    tcp-check connect ssl sni localhost alpn http/1.1\n    tcp-check send \"GET /tcp HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n\"\n    tcp-check expect rstring ^HTTP/1.1\\ 200\n    server s {} verify none check inter 100ms rise 1 fall 1\nbackend hs\n    server s {} check-ssl check-sni localhost verify none check inter 100ms rise 1 fall 1\nbackend hello\n    option ssl-hello-chk\n    server s {} check inter 100ms rise 1 fall 1\nbackend hello_plain\n    option ssl-hello-chk\n    server s {} check inter 100ms rise 1 fall 1\n",
        sock.display(),
        backend("rule", "ssl sni localhost alpn h2", "verify none"),
        backend("misnamed", "ssl sni other.test", "verify none"),
        backend("plain", "linger", "ssl verify none"),
        backend("dflt", "default sni localhost proto h1", "check-ssl verify none"),
        front.addr(),
        front.addr(),
        front.addr(),
        origin.addr
    ));
    let field = |be: &str, f: &str| stat_field(&Sluice::cli(&sock, "show stat"), be, "s", f);
    wait_until("every check judged", || {
        ["rule", "dflt", "tcp"]
            .iter()
            .all(|b| field(b, "check_status") == "L7OK")
            && field("misnamed", "status") == "DOWN"
            && field("plain", "status") == "DOWN"
            && field("hs", "check_status").starts_with('L')
            && field("hello", "check_status").starts_with('L')
            && field("hello_plain", "check_status").starts_with('L')
    });
    // `option ssl-hello-chk`: a TLS server answers the SSLv3 hello (with an alert: rustls
    // speaks no SSLv3), an HTTP server does not.
    assert_eq!(field("hello", "check_status"), "L6OK");
    assert_eq!(field("hello", "status"), "UP");
    assert_eq!(field("hello_plain", "status"), "DOWN");
    // A connection check over TLS passes at layer 6, as HAProxy reports it (its reg-test
    // checks/tcp-check-ssl).
    assert_eq!(field("hs", "check_status"), "L6OK");
    let seen = |path: &str| origin.requests().iter().any(|r| r.target == path);
    assert!(seen("/rule") && seen("/dflt") && seen("/tcp"));
    assert!(!seen("/misnamed") && !seen("/plain"));
    // The front refused the name it does not have, and the plain request was no handshake.
    assert!(field("misnamed", "check_status").starts_with("L6"));
    // Only the rule that offered h2 alone spoke HTTP/2.
    assert!(h2_heads_received(&front_sock) > 0);
}

/// `set server B/S ssl on|off` switches a server's traffic between TLS and plain text at
/// once (kept connections included), shows in `show servers state`'s `srv_use_ssl`, and is
/// refused, in HAProxy's words, for a server without TLS settings.
#[test]
fn set_server_ssl_switches_between_tls_and_plain_text() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "origin.pem", &["origin.test"]);
    // One TLS listener and one plain one, both answering whether they saw TLS.
    let origin = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}}\n    http-request return status 200 content-type text/plain lf-string \"tls=%[ssl_fc]\"\n"
    ));
    let (tls, plain) = (origin.addrs[0], origin.addrs[1]);
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    use_backend other if {{ path /other }}\n    default_backend be\nbackend be\n    retries 0\n    server s {tls} ssl verify none\nbackend other\n    server o {plain}\n",
        sock.display()
    ));
    let cli = |cmd: &str| Sluice::cli(&sock, cmd);
    let use_ssl = || {
        let state = cli("show servers state be");
        let row = state.lines().rfind(|l| !l.is_empty()).unwrap().to_string();
        row.split_whitespace().nth(20).unwrap().to_string()
    };
    let mut c = p.connect();
    assert_eq!(c.get("/").text(), "tls=1");
    assert_eq!(use_ssl(), "1");
    assert_eq!(
        cli("set server be/s ssl off"),
        "server ssl setting updated.\n\n"
    );
    assert_eq!(use_ssl(), "0");
    // Plain text to the TLS listener: no answer from it (what it sends back is no HTTP),
    // even on the kept connection.
    let status = c.get("/").status;
    assert!(status == 502 || status == 503, "{status}");
    // Pointed at the plain listener, it works in plain text.
    assert!(cli(&format!(
        "set server be/s addr {} port {}",
        plain.ip(),
        plain.port()
    ))
    .starts_with("IP changed"));
    assert_eq!(get(p.addr(), "/").text(), "tls=0");
    assert!(cli(&format!(
        "set server be/s addr {} port {}",
        tls.ip(),
        tls.port()
    ))
    .starts_with("IP changed"));
    assert_eq!(
        cli("set server be/s ssl on"),
        "server ssl setting updated.\n\n"
    );
    assert_eq!(get(p.addr(), "/").text(), "tls=1");
    assert_eq!(use_ssl(), "1");
    assert_eq!(
        cli("set server other/o ssl on"),
        "'set server <srv> ssl' cannot be set.  default-server should define ssl settings\n\n"
    );
    assert_eq!(
        cli("set server be/s ssl maybe"),
        "'set server <srv> ssl' expects 'on' or 'off'.\n\n"
    );
}

/// The lists of a ClientHello (record header first): its version, suites, extension
/// types, supported groups and point formats.
fn hello_lists(rec: &[u8]) -> (u16, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let m = &rec[5 + 4..];
    let version = u16::from_be_bytes([m[0], m[1]]);
    let mut at = 2 + 32;
    at += 1 + m[at] as usize;
    let n = u16::from_be_bytes([m[at], m[at + 1]]) as usize;
    let suites = m[at + 2..at + 2 + n].to_vec();
    at += 2 + n;
    at += 1 + m[at] as usize;
    let end = at + 2 + u16::from_be_bytes([m[at], m[at + 1]]) as usize;
    at += 2;
    let (mut exts, mut groups, mut formats) = (Vec::new(), Vec::new(), Vec::new());
    // As HAProxy's dissector: it stops once four bytes or fewer are left, so an empty
    // last extension (rustls's order varies from one hello to the next) is not listed.
    while at + 4 < end {
        let id = [m[at], m[at + 1]];
        let len = u16::from_be_bytes([m[at + 2], m[at + 3]]) as usize;
        let data = &m[at + 4..at + 4 + len];
        exts.extend_from_slice(&id);
        match id {
            [0, 10] => groups = data[2..].to_vec(),
            [0, 11] => formats = data[1..].to_vec(),
            _ => {}
        }
        at += 4 + len;
    }
    (version, suites, exts, groups, formats)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02X}")).collect()
}

/// `ssl_fc_protocol_hello_id`, `ssl_fc_cipherlist_*`, `ssl_fc_extlist_bin`,
/// `ssl_fc_eclist_bin` and `ssl_fc_ecformats_bin` give what the client's ClientHello
/// offered, read from the very bytes the client sent; a small `tune.ssl.capture-buffer-size`
/// cuts the lists in order. (With `SLUICE_TLS_PEER=haproxy` the same test runs against
/// HAProxy 2.6, which passes it too.)
#[test]
fn client_hello_fetches_read_what_the_client_offered() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let ask = |size: usize| {
        let cfg = format!(
            "global\n    tune.ssl.capture-buffer-size {size}\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_fc_protocol_hello_id] %[ssl_fc_cipherlist_hex] %[ssl_fc_cipherlist_xxh] %[ssl_fc_extlist_bin,hex] %[ssl_fc_eclist_bin,hex] %[ssl_fc_ecformats_bin,hex] %[ssl_fc_cipherlist_str]\"\n"
        );
        let p = match std::env::var("SLUICE_TLS_PEER").as_deref() {
            Ok("haproxy") => Sluice::start_program("haproxy", &["-db"], &cfg),
            _ => Sluice::start(&cfg),
        };
        let config = ca.client(
            &["http/1.1"],
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        );
        let mut conn =
            rustls::ClientConnection::new(config, ServerName::try_from("site.test").unwrap())
                .unwrap();
        let mut hello = Vec::new();
        conn.write_tls(&mut hello).unwrap();
        let mut tcp = TcpStream::connect(p.addr()).unwrap();
        tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
        tcp.write_all(&hello).unwrap();
        let mut s = rustls::StreamOwned::new(conn, tcp);
        let answer = request(&mut s, "/");
        let body = answer.split("\r\n\r\n").nth(1).unwrap().to_string();
        (hello, body)
    };
    let (hello, body) = ask(1024);
    let (version, suites, exts, groups, formats) = hello_lists(&hello);
    let f: Vec<&str> = body.splitn(7, ' ').collect();
    assert_eq!(f[0], version.to_string());
    assert_eq!(f[1], hex(&suites));
    assert_eq!(f[3], hex(&exts));
    assert_eq!(f[4], hex(&groups));
    assert_eq!(f[5], hex(&formats));
    assert!(f[6].starts_with("TLS_AES_256_GCM_SHA384,"), "{}", f[6]);
    assert!(f[6].contains("ECDHE-RSA-AES128-GCM-SHA256"), "{}", f[6]);
    // A buffer of 8 bytes: four suites, and nothing of the other lists; the hash is of the
    // whole list still.
    let (hello, small) = ask(8);
    let (_, suites, ..) = hello_lists(&hello);
    let s: Vec<&str> = small.splitn(7, ' ').collect();
    assert_eq!(s[1], hex(&suites[..8]));
    assert_eq!((s[2], s[3], s[4]), (f[2], "", ""));
}

/// A TLS connection to `addr` (`site.test`) on a socket that keeps every byte it reads.
fn recorded(
    addr: SocketAddr,
    client: Arc<rustls::ClientConfig>,
) -> (
    rustls::StreamOwned<rustls::ClientConnection, Recorder>,
    Arc<std::sync::Mutex<Vec<u8>>>,
) {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let conn =
        rustls::ClientConnection::new(client, ServerName::try_from("site.test").unwrap()).unwrap();
    let mut s = rustls::StreamOwned::new(
        conn,
        Recorder {
            tcp,
            seen: seen.clone(),
        },
    );
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).unwrap();
    }
    (s, seen)
}

struct Recorder {
    tcp: TcpStream,
    seen: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.seen.lock().unwrap().extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// The lengths of the application-data records in raw TLS bytes (their headers are clear).
fn data_records(mut raw: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    while raw.len() >= 5 {
        let len = u16::from_be_bytes([raw[3], raw[4]]) as usize;
        if raw[0] == 23 {
            out.push(len);
        }
        raw = &raw[(5 + len).min(raw.len())..];
    }
    out
}

#[test]
fn tune_ssl_maxrecord_and_hard_maxrecord_limit_the_data_each_record_carries() {
    let body = "x".repeat(40_000);
    let origin = Origin::with_handler(
        "big",
        Arc::new(move |_: &Received| ok_response(&body).into()),
    );
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let fetch = |global: &str| {
        let p = Sluice::start(&format!(
            "global\n{global}{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    default_backend be\nbackend be\n    server o {}\n",
            origin.addr
        ));
        let (mut s, seen) = recorded(p.addr(), ca.client(&[], &[&rustls::version::TLS13]));
        let text = request(&mut s, "/");
        assert!(text.ends_with(&"x".repeat(40_000)), "{}", &text[..200]);
        let records = data_records(&seen.lock().unwrap());
        records.into_iter().max().unwrap()
    };
    // TLS 1.3 adds its content type and AES-GCM's 16-byte tag to each record's data.
    let limited = fetch("    tune.ssl.maxrecord 1400\n");
    assert!((1000..=1400 + 17).contains(&limited), "{limited}");
    let unlimited = fetch("    tune.ssl.maxrecord 0\n");
    assert!(unlimited > 16_000, "{unlimited}");
    // `tune.ssl.hard-maxrecord` limits records alike, and the smaller of the two wins.
    let hard = fetch("    tune.ssl.hard-maxrecord 1400\n");
    assert!((1000..=1400 + 17).contains(&hard), "{hard}");
    let both = fetch("    tune.ssl.maxrecord 4000\n    tune.ssl.hard-maxrecord 1400\n");
    assert!((1000..=1400 + 17).contains(&both), "{both}");
    let both = fetch("    tune.ssl.maxrecord 1400\n    tune.ssl.hard-maxrecord 4000\n");
    assert!((1000..=1400 + 17).contains(&both), "{both}");
    for kw in ["maxrecord", "hard-maxrecord"] {
        let (ok, out) = check_config(&format!(
            "global\n    tune.ssl.{kw} 10\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request return status 200\n"
        ));
        assert!(
            !ok && out.contains(":2:") && out.contains("smallest record"),
            "{out}"
        );
    }
}

#[test]
fn issuers_chain_path_completes_a_lone_certificate_and_roots_can_be_left_out() {
    let root = Ca::named("sluice test root");
    let inter = root.intermediate("sluice test intermediate");
    let dir = TempDir::new();
    // A certificate file with no intermediate in it, and one that carries its own.
    let (lone, lone_der) = inter.leaf(&dir, "lone.pem", &["site.test"]);
    let (carried, _) = inter.leaf(&dir, "carried.pem", &["site.test"]);
    let text = std::fs::read_to_string(&carried).unwrap();
    std::fs::write(&carried, format!("{text}{}", inter.cert.pem())).unwrap();
    std::fs::create_dir(dir.0.join("issuers")).unwrap();
    dir.write(
        "issuers/inter.pem",
        &format!("{}{}", inter.cert.pem(), root.cert.pem()),
    );
    let issuers = dir.0.join("issuers");
    let client = root.client(&[], &[&rustls::version::TLS13]);
    let start = |global: &str| {
        Sluice::start(&format!(
            "global\n{global}{DEFAULTS}frontend fe\n    {{fe}} ssl crt {lone}\n    {{fe}} ssl crt {carried}\n    http-request return status 200 content-type text/plain string ok\n"
        ))
    };
    let chain = |addr: SocketAddr| {
        let mut s = connect(addr, client.clone(), "site.test").unwrap();
        assert!(request(&mut s, "/").starts_with("HTTP/1.1 200"));
        let certs: &[CertificateDer<'_>] = s.conn.peer_certificates().unwrap();
        certs.iter().map(|c| c.to_vec()).collect::<Vec<_>>()
    };
    // Alone, the certificate cannot be verified by a client that trusts only the root.
    let p = start("");
    assert!(connect(p.addr(), client.clone(), "site.test").is_err());
    assert_eq!(chain(p.addrs[1]).len(), 2);
    drop(p);
    let p = start(&format!("    issuers-chain-path {}\n", issuers.display()));
    let served = chain(p.addrs[0]);
    assert_eq!(served.len(), 3);
    assert_eq!(served[0], lone_der);
    assert_eq!(served[1], inter.cert.der().to_vec());
    assert_eq!(served[2], root.cert.der().to_vec());
    // A file with its own chain is served as it is.
    assert_eq!(chain(p.addrs[1]).len(), 2);
    drop(p);
    let p = start(&format!(
        "    issuers-chain-path {}\n    ssl-skip-self-issued-ca\n",
        issuers.display()
    ));
    let served = chain(p.addrs[0]);
    assert_eq!(served, vec![lone_der, inter.cert.der().to_vec()]);
    let (ok, out) = check_config(&format!(
        "global\n    issuers-chain-path {}/none\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request return status 200\n",
        dir.0.display()
    ));
    assert!(
        !ok && out.contains(":2:") && out.contains("issuers-chain-path"),
        "{out}"
    );
}

#[test]
fn global_defaults_of_server_verification_and_curves_apply_to_lines_without_their_own() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "origin.pem", &["origin.test"]);
    // TLS servers: one that takes any group, one that takes only X25519.
    let origin = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {crt} curves X25519\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    let (any, x25519) = (origin.addrs[0], origin.addrs[1]);
    let p = Sluice::start(&format!(
        "global\n    ssl-server-verify none\n    ssl-default-server-curves P-256\n    ssl-default-bind-curves P-256\n{DEFAULTS}frontend fe\n    {{fe}}\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {crt} curves X25519\n    use_backend unverified if {{ path /unverified }}\n    use_backend verified if {{ path /verified }}\n    use_backend x25519 if {{ path /x25519 }}\nbackend unverified\n    server s {any} ssl\nbackend verified\n    retries 0\n    server s {any} ssl verify required ca-file {}\nbackend x25519\n    retries 0\n    server s {x25519} ssl\n",
        dir.write("other-ca.pem", &Ca::new().cert.pem())
    ));
    // `ssl-server-verify none`: a server line with `ssl` alone is not verified...
    assert_eq!(get(p.addr(), "/unverified").status, 200);
    // ...while a line's own `verify required` still is (by another authority: refused).
    assert_eq!(get(p.addr(), "/verified").status, 503);
    // `ssl-default-server-curves P-256`: no group in common with an X25519-only server.
    assert_eq!(get(p.addr(), "/x25519").status, 503);
    // `ssl-default-bind-curves P-256` on the bind without `curves`; its own on the other.
    let offering = |group: &'static dyn rustls::crypto::SupportedKxGroup| {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.kx_groups = vec![group];
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert.der().clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    let (p256, x) = (
        offering(rustls::crypto::ring::kx_group::SECP256R1),
        offering(rustls::crypto::ring::kx_group::X25519),
    );
    assert!(connect(p.addrs[1], p256.clone(), "origin.test").is_ok());
    assert!(connect(p.addrs[1], x.clone(), "origin.test").is_err());
    assert!(connect(p.addrs[2], x, "origin.test").is_ok());
    assert!(connect(p.addrs[2], p256, "origin.test").is_err());
    // Without the global line, `ssl` alone needs a ca-file; bad values name the line.
    for (global, says) in [
        ("", "no ca-file is given"),
        ("    ssl-server-verify maybe\n", "expects none or required"),
        ("    ssl-default-server-curves sect163k1\n", "sect163k1"),
    ] {
        let (ok, out) = check_config(&format!(
            "global\n{global}{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    server s 127.0.0.1:2 ssl\n"
        ));
        assert!(!ok && out.contains(says), "{global}: {out}");
    }
}

#[test]
fn servers_get_a_client_certificate_and_ca_verify_file_names_no_authority() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let ca_file = ca.ca_file(&dir);
    // The origin requires a client certificate from the CA (`ca-verify-file`: verified,
    // but not named in the handshake), and says whose it got.
    let origin = Sluice::start(&format!(
        "{DEFAULTS}frontend o\n    {{fe}} ssl crt {crt} ca-verify-file {ca_file} verify required\n    {{fe}} ssl crt {crt} ca-file {ca_file} verify required\n    http-request return status 200 content-type text/plain lf-string \"%[ssl_c_s_dn]\"\n"
    ));
    // `crt FILE` on a server line: the certificate and its key in one PEM file.
    let (cert, key) = ca.client_cert("proxy");
    let identity = dir.write(
        "proxy.pem",
        &format!("{}{}", cert.pem(), key.serialize_pem()),
    );
    let front = Sluice::start(&format!(
        "{DEFAULTS}frontend f\n    {{fe}}\n    use_backend anonymous if {{ path /anon }}\n    default_backend mtls\nbackend mtls\n    server s {o} ssl verify required ca-file {ca_file} sni str(site.test) crt {identity}\nbackend anonymous\n    server s {o} ssl verify required ca-file {ca_file} sni str(site.test)\n",
        o = origin.addrs[0]
    ));
    let r = get(front.addr(), "/");
    assert_eq!((r.status, r.text()), (200, "/CN=proxy".to_string()));
    // Without a certificate the origin refuses the handshake; with TLS 1.3 the client's
    // side of it is over by then, so the refusal is the server's answer to the request.
    assert_eq!(get(front.addr(), "/anon").status, 502);
    // What a client is told about acceptable authorities, by OpenSSL's own client: nothing
    // with `ca-verify-file`, the CA with `ca-file`.
    let names = |addr: std::net::SocketAddr| {
        let out = std::process::Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &addr.to_string(),
                "-servername",
                "site.test",
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let hidden = names(origin.addrs[0]);
    assert!(
        hidden.contains("No client certificate CA names sent"),
        "{hidden}"
    );
    let named = names(origin.addrs[1]);
    assert!(
        named.contains("Acceptable client certificate CA names"),
        "{named}"
    );
}

/// `sigalgs`: what the handshake may be signed with (names rustls lacks skipped with a
/// warning, as OpenSSL skips them; a list with nothing usable refused); `client-sigalgs`:
/// what client certificates may be verified with.
#[test]
fn sigalgs_restrict_the_handshake_and_client_certificates() {
    let ca = Ca::new();
    let dir = TempDir::new();
    // An ECDSA P-256 certificate and client certificate.
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let ca_file = dir.write("ca.pem", &ca.cert.pem());
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt {crt} sigalgs ECDSA+SHA256:DSA+SHA256:ed448\n    http-request return status 200\n"
    ));
    assert!(ok, "{out}");
    assert!(
        out.contains("sigalgs: DSA+SHA256, ed448 not available with rustls, skipped"),
        "{out}"
    );
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1 ssl crt {crt} sigalgs DSA+SHA256\n    http-request return status 200\n"
    ));
    assert!(
        !ok && out.contains("no usable signature algorithm"),
        "{out}"
    );

    let p = Sluice::start(&format!(
        "global\n    ssl-default-bind-sigalgs RSA-PSS+SHA256\n{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt} sigalgs ECDSA+SHA256\n    {{fe}} ssl crt {crt}\n    {{fe}} ssl crt {crt} sigalgs ECDSA+SHA256 ca-file {ca_file} verify required client-sigalgs RSA-PSS+SHA256:ECDSA+SHA384\n    {{fe}} ssl crt {crt} sigalgs ECDSA+SHA256 ca-file {ca_file} verify required client-sigalgs ECDSA+SHA256\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    let tls13 = ca.client(&[], &[&rustls::version::TLS13]);
    // The bind's own list allows the key's scheme; the global one, inherited by the second
    // bind, does not: no certificate can sign, the handshake fails.
    let mut s = connect(p.addrs[0], tls13.clone(), "site.test").unwrap();
    assert!(request(&mut s, "/").ends_with("ok"));
    assert!(connect(p.addrs[1], tls13, "site.test").is_err());
    // A client certificate signing with ECDSA P-256 is refused where client-sigalgs leaves
    // it out, and accepted where it names it.
    let (cert, key) = ca.client_cert("alice");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let with_cert = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![cert.der().clone()], key)
        .unwrap(),
    );
    let served = |addr| {
        connect(addr, with_cert.clone(), "site.test")
            .and_then(|mut s| {
                s.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")?;
                let mut b = [0u8; 64];
                match s.read(&mut b)? {
                    0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
                    _ => Ok(()),
                }
            })
            .is_ok()
    };
    assert!(!served(p.addrs[2]));
    assert!(served(p.addrs[3]));
}

/// `no-ssl` undoes an `ssl` a server inherits from `default-server`.
#[test]
fn no_ssl_undoes_an_inherited_ssl() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let tls_front = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {pem}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    use_backend plain if {{ path_beg /plain }}\n    default_backend tls\nbackend tls\n    default-server ssl verify none\n    server s {}\nbackend plain\n    default-server ssl verify none\n    server s {} no-ssl\n",
        tls_front.addr(),
        origin.addr
    ));
    assert_eq!(get(p.addr(), "/tls").text(), "o /tls");
    assert_eq!(get(p.addr(), "/plain").text(), "o /plain");
}

/// `ssl_bc`, `ssl_bc_protocol`, `ssl_bc_cipher`, `ssl_bc_alpn`: the connection to the
/// server that answered, as response rules and logs see it (a TLS origin, here a sluice of
/// its own; a plain one says `ssl_bc` is false and has no session facts).
#[test]
fn ssl_bc_fetches_describe_the_server_connection() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "origin.pem", &["origin.test"]);
    let origin = Sluice::start(&format!(
        "{DEFAULTS}frontend o\n    {{fe}} ssl crt {crt} alpn http/1.1\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    let plain = Origin::start("plain");
    let front = Sluice::start(&format!(
        "{DEFAULTS}frontend f\n    {{fe}}\n    use_backend clear if {{ path /clear }}\n    default_backend tls\nbackend tls\n    server s {} ssl verify none alpn http/1.1\n    http-response set-header X-BC \"%[ssl_bc] %[ssl_bc_protocol] %[ssl_bc_alpn] %[ssl_bc_cipher]\"\nbackend clear\n    server s {}\n    http-response set-header X-BC \"%[ssl_bc] %[ssl_bc_protocol]-\"\n",
        origin.addr(),
        plain.addr
    ));
    let r = get(front.addr(), "/");
    assert_eq!(r.status, 200);
    let bc = r.header("x-bc").unwrap_or_default().to_string();
    assert!(bc.starts_with("1 TLSv1.3 http/1.1 TLS_"), "{bc}");
    let r = get(front.addr(), "/clear");
    assert_eq!(r.header("x-bc"), Some("0 -"));
}

/// A connection whose TLS handshake fails leaves HAProxy's line, `IP:PORT [DATE]
/// FRONTEND/BIND: REASON`, or its `error-log-format` (where `fc_err` and `fc_err_str` are
/// HAProxy's number and text); with `option dontlognull` a client that closed during the
/// handshake is not logged.
#[test]
fn failed_handshakes_are_logged_as_haproxy_logs_them() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}} ssl crt {crt} name secure\n    http-request return status 200\nfrontend quiet\n    {{fe}} ssl crt {crt}\n    option dontlognull\n    error-log-format \"%ci %ft %[fc_err] %[fc_err_str]\"\n    http-request return status 200\n",
        sock.display()
    ));
    let failed = |fe: &str| {
        stat_field(
            &Sluice::cli(&sock, "show stat"),
            fe,
            "FRONTEND",
            "ssl_failed_handshake",
        )
    };
    // Something that is not TLS, and a client that closes before its hello.
    let junk = |addr| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let _ = s.read_to_end(&mut Vec::new());
        s.local_addr().unwrap().port()
    };
    let empty = |addr| {
        let s = TcpStream::connect(addr).unwrap();
        let port = s.local_addr().unwrap().port();
        drop(s);
        port
    };
    let junk_port = junk(p.addrs[0]);
    wait_until("the junk to be counted", || failed("fe") == "1");
    let empty_port = empty(p.addrs[0]);
    wait_until("the close to be counted", || failed("fe") == "2");
    wait_until("two lines", || p.stdout().lines().count() >= 2);
    let out = p.stdout();
    // Each connection's line, found by its client port (the workers write them in any
    // order).
    let line_of = |port: u16| {
        let start = format!("127.0.0.1:{port} [");
        out.lines().find(|l| l.starts_with(&start)).unwrap_or("")
    };
    let shape = |line: &str, port: u16, reason: &str| {
        let (head, tail) = line.split_once(" [").unwrap_or_default();
        let (date, tail) = tail.split_once("] ").unwrap_or_default();
        assert_eq!(head, format!("127.0.0.1:{port}"), "{line}");
        assert_eq!(date.len(), "26/Nov/2026:01:02:03.456".len(), "{line}");
        assert_eq!(tail, format!("fe/secure: {reason}"), "{line}");
    };
    shape(line_of(junk_port), junk_port, "SSL handshake failure");
    shape(
        line_of(empty_port),
        empty_port,
        "Connection closed during SSL handshake",
    );
    // The quiet frontend: the close is counted but not logged, the junk is, in its format.
    empty(p.addrs[1]);
    wait_until("the close to be counted", || failed("quiet") == "1");
    junk(p.addrs[1]);
    wait_until("the junk to be counted", || failed("quiet") == "2");
    wait_until("its line", || p.stdout().lines().count() >= 3);
    let out = p.stdout();
    assert_eq!(
        out.lines().skip(2).collect::<Vec<_>>(),
        ["127.0.0.1 quiet 34 SSL handshake failure"],
        "{out}"
    );
}

/// `maxsslconn`: past that many client TLS connections open, a new one is closed before
/// its handshake and logged with HAProxy's reason; once one ends, a new one is served.
#[test]
fn maxsslconn_bounds_the_tls_connections_open() {
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    maxsslconn 1\n    log stdout format raw local0\n{DEFAULTS}    log global\n    option dontlognull\nfrontend fe\n    {{fe}} ssl crt {crt}\n    error-log-format \"%ci %[fc_err] %[fc_err_str]\"\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    let info = |field: &str| show_info(&sock, field);
    assert_eq!(info("MaxSslConns"), "1");
    let client = || ca.client(&[], &[&rustls::version::TLS13]);
    let mut first = connect(p.addr(), client(), "site.test").unwrap();
    assert!(request(&mut first, "/").ends_with("ok"));
    assert_eq!(info("CurrSslConns"), "1");
    // The second is closed before its handshake.
    assert!(connect(p.addr(), client(), "site.test").is_err());
    let line = "127.0.0.1 27 Too many SSL connections";
    wait_until("its line", || p.stdout().lines().any(|l| l == line));
    drop(first);
    wait_until("the first to end", || info("CurrSslConns") == "0");
    let mut third = connect(p.addr(), client(), "site.test").unwrap();
    assert!(request(&mut third, "/").ends_with("ok"));
}

/// One line of a key log: label, client random, secret.
type KeyLine = (String, Vec<u8>, Vec<u8>);

/// The secrets a client's side of a session logged, as NSS key log labels.
#[derive(Debug, Default)]
struct ClientKeys(std::sync::Mutex<Vec<KeyLine>>);

impl rustls::KeyLog for ClientKeys {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let entry = (label.to_string(), client_random.to_vec(), secret.to_vec());
        self.0.lock().unwrap().push(entry);
    }
}

impl ClientKeys {
    fn secret(&self, label: &str) -> String {
        let keys = self.0.lock().unwrap();
        let (_, _, s) = keys.iter().find(|(l, _, _)| l == label).expect(label);
        s.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn client_random(&self) -> String {
        let keys = self.0.lock().unwrap();
        keys[0].1.iter().map(|b| format!("{b:02X}")).collect()
    }
}

/// `tune.ssl.keylog on`: the fetches give the session's secrets as the client derived
/// them (its own key log, through rustls's), TLS 1.3's traffic secrets as hexadecimal text
/// and TLS 1.2's master secret (`ssl_fc_session_key`) and the client random as binary;
/// without the setting they give nothing.
#[test]
fn tune_ssl_keylog_gives_the_session_secrets_to_fetches() {
    let origin = Origin::start("o");
    let ca = Ca::new();
    let dir = TempDir::new();
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let headers = "    http-request set-header X-CR %[ssl_fc_client_random,hex]\n    \
        http-request set-header X-CHTS %[ssl_fc_client_handshake_traffic_secret]\n    \
        http-request set-header X-SHTS %[ssl_fc_server_handshake_traffic_secret]\n    \
        http-request set-header X-CTS %[ssl_fc_client_traffic_secret_0]\n    \
        http-request set-header X-STS %[ssl_fc_server_traffic_secret_0]\n    \
        http-request set-header X-EXP %[ssl_fc_exporter_secret]\n    \
        http-request set-header X-SK %[ssl_fc_session_key,hex]\n";
    let config = |keylog: &str| {
        format!(
            "global\n{keylog}{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt}\n{headers}    default_backend be\nbackend be\n    server s {}\n",
            origin.addr
        )
    };
    let on = Sluice::start(&config("    tune.ssl.keylog on\n"));
    let off = Sluice::start(&config(""));
    let ask = |p: &Sluice, version: &'static rustls::SupportedProtocolVersion| {
        let keys = Arc::new(ClientKeys::default());
        let mut client = (*ca.client(&["http/1.1"], &[version])).clone();
        client.key_log = keys.clone();
        let mut s = connect(p.addr(), Arc::new(client), "site.test").unwrap();
        request(&mut s, "/k");
        (origin.requests().pop().unwrap(), keys)
    };
    let (seen, keys) = ask(&on, &rustls::version::TLS13);
    let h = |n: &str| seen.header(n).unwrap_or_default().to_string();
    assert_eq!(h("x-cr"), keys.client_random());
    assert_eq!(h("x-chts"), keys.secret("CLIENT_HANDSHAKE_TRAFFIC_SECRET"));
    assert_eq!(h("x-shts"), keys.secret("SERVER_HANDSHAKE_TRAFFIC_SECRET"));
    assert_eq!(h("x-cts"), keys.secret("CLIENT_TRAFFIC_SECRET_0"));
    assert_eq!(h("x-sts"), keys.secret("SERVER_TRAFFIC_SECRET_0"));
    assert_eq!(h("x-exp"), keys.secret("EXPORTER_SECRET"));
    assert_eq!(h("x-sk"), "", "no master secret in TLS 1.3");
    assert_eq!(h("x-cts").len(), 64, "SHA-256 suites: 32 bytes");
    // TLS 1.2: the master secret.
    let (seen, keys) = ask(&on, &rustls::version::TLS12);
    let master = keys.secret("CLIENT_RANDOM").to_ascii_uppercase();
    assert_eq!(seen.header("x-sk"), Some(master.as_str()));
    assert_eq!(seen.header("x-cr"), Some(keys.client_random().as_str()));
    assert_eq!(seen.header("x-cts"), Some(""));
    // Without the setting: nothing.
    let (seen, _) = ask(&off, &rustls::version::TLS13);
    for n in ["x-cr", "x-cts", "x-sk"] {
        assert_eq!(seen.header(n), Some(""), "{n}: {seen:?}");
    }
}
