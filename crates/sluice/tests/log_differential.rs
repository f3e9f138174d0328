//! Access-log lines compared with HAProxy 2.6's, case by case: each case is a
//! configuration and a scripted exchange; `testdata/haproxy-2.6/logs/CASE.log` holds the
//! line HAProxy wrote for it, with what varies from run to run masked (the client's port,
//! the date, the timers but -1). The same exchange through sluice must give the same line.
//!
//! Recording (one command, with Debian's `haproxy` installed):
//! `bash testdata/haproxy-2.6/record-logs.sh`, which runs these cases with
//! `SLUICE_LOG_RECORD=haproxy` against `haproxy -db` and rewrites the files.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// The lines of every case come from one origin whose answer depends on the path.
fn origin() -> Origin {
    Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            // `/wait/...` is the same answer, for the rules that wait for bodies.
            let path = r.target.as_str();
            let path = path.strip_prefix("/wait").unwrap_or(path);
            if let Some(code) = path.strip_prefix("/status/") {
                let code: u16 = code.parse().unwrap_or(500);
                let body = "status page\n";
                return format!(
                    "HTTP/1.1 {code} Whatever\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
                .into();
            }
            match path {
                "/slow" => Reply::Delayed(Duration::from_secs(2), ok_response("late\n")),
                // More than the sockets on the way hold: a client that does not read stalls it.
                "/big" => ok_response(&"x".repeat(16 << 20)).into(),
                "/chunked" => b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n world\n\r\n0\r\n\r\n".to_vec().into(),
                // A head and part of the body, the rest much later.
                "/stall" => Reply::Dripped(
                    vec![
                        b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n0123456789".to_vec(),
                        b"0123456789".to_vec(),
                    ],
                    Duration::from_secs(3),
                ),
                "/early" => b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n".to_vec().into(),
                _ => ok_response("hello world\n").into(),
            }
        }),
    )
}

/// The configuration every HTTP case shares; `{o}` is the origin.
const HTTP: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    option httplog
    timeout connect 1s
    timeout client 2s
    timeout server 500ms
    timeout http-request 1s
frontend fe
    {fe}
    capture request header Host len 20
    capture response header Content-Type len 20
    use_backend refused if { path /refused }
    use_backend nosrv if { path /nosrv }
    default_backend be
backend be
    server s {o}
backend refused
    retries 1
    option redispatch
    server dead 127.0.0.1:1
backend nosrv
    server off 127.0.0.1:1 disabled
";

const TCP: &str = "global
    log stdout format raw local0
defaults
    log global
    option tcplog
    timeout connect 1s
    timeout client 2s
    timeout server 2s
listen raw
    {fe}
    server s {o}
";

const CUSTOM: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe}
    log-format \"%ci %ft %b %s %ST %B %ts %tsc %HM %HU %HP %HV %{+Q}r %hr %hs %ac/%fc/%bc/%sc/%rc %sq/%bq\"
    capture request header User-Agent len 10
    capture response header Content-Length len 10
    default_backend be
backend be
    server s {o}
";

/// A request on a fresh connection, read to its close.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    read_to_close(addr, bytes)
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nUser-Agent: tester/1.0\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

/// The cases: a name, the configuration, the exchange, and how many lines it logs. An
/// exchange sees the proxy and the origin; a connection it returns stays open until the
/// case's lines are logged.
type Exchange = Box<dyn Fn(&Sluice, &Origin) -> Option<TcpStream>>;

/// A TLS frontend with `option httpslog`; `{crt}` is its certificate.
const TLS: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    option httpslog
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe} ssl crt {crt}
    default_backend be
backend be
    server s {o}
";

/// Health checks logged with `option log-health-checks`: a server that answers and one
/// that refuses.
const CHECKS: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    option httplog
    option log-health-checks
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe}
    default_backend be
backend be
    server up {o} check inter 200ms rise 2 fall 2
    server down 127.0.0.1:1 check inter 200ms rise 2 fall 2
";

/// Administrative changes from the CLI (its socket is the first placeholder: the case's
/// address).
const ADMIN: &str = "global
    log stdout format raw local0
    stats socket {fd} level admin
defaults
    mode http
    log global
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe}
    default_backend be
backend be
    server s {o}
    server t {o} check inter 5s
";

/// One server and the CLI: the backend's last server goes to maintenance.
const ADMIN_ONE: &str = "global
    log stdout format raw local0
    stats socket {fd} level admin
defaults
    mode http
    log global
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe}
    default_backend be
backend be
    server s {o}
";

/// Sends one CLI command on its own connection and reads the answer.
fn cli(addr: SocketAddr, cmd: &str) {
    drop(exchange(addr, format!("{cmd}\n").as_bytes()));
}

/// A server's `wretr` in `show stat`, asked on the CLI at `addr`.
fn retries(addr: SocketAddr, backend: &str, server: &str) -> u64 {
    let csv = String::from_utf8_lossy(&exchange(addr, b"show stat\n")).into_owned();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or("")
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let col = header
        .iter()
        .position(|h| *h == "wretr")
        .expect("a wretr column");
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&backend) && f.get(1) == Some(&server))
        .and_then(|f| f.get(col).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// One request over TLS 1.3 with the one suite both proxies then agree on.
fn tls_exchange(ca: &Ca, addr: SocketAddr) {
    let config = ca.client_offering(
        vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256],
        &rustls::version::TLS13,
    );
    let name = rustls::pki_types::ServerName::try_from("site.test").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(&get("/ok")).unwrap();
    let _ = tls.read_to_end(&mut Vec::new());
}

/// Cases whose byte count depends on the kernel's socket buffers: masked.
const BYTES_VARY: &[&str] = &["client_stalls_mid_response"];

/// Lines kept different on purpose: (case, what HAProxy logs, what sluice logs instead).
const ON_PURPOSE: &[(&str, &str, &str)] = &[
    // sluice answers an over-long request line with 414 (docs/h1-strictness.md); HAProxy
    // with 400.
    ("oversized_head", " 400 0 ", " 414 0 "),
    // HAProxy queues a request any server may take on its backend (`%bq` counts it there);
    // sluice queues it on the server the balancer picked (fair across workers per server).
    ("client_gone_while_queued", " 0/1 ", " 0/0 "),
];

fn cases(ca: &std::sync::Arc<Ca>, crt: &str) -> Vec<(&'static str, String, Exchange, usize)> {
    fn on(f: fn(SocketAddr)) -> Exchange {
        Box::new(move |p, _| {
            f(p.addr());
            None
        })
    }
    fn with(f: fn(&Sluice, &Origin) -> Option<TcpStream>) -> Exchange {
        Box::new(f)
    }
    let tls_ca = ca.clone();
    let case = |name, config: &str, f: Exchange, lines| (name, config.to_string(), f, lines);
    vec![
        case("ok", HTTP, on(|a| drop(exchange(a, &get("/ok")))), 1),
        case(
            "server_404",
            HTTP,
            on(|a| drop(exchange(a, &get("/status/404")))),
            1,
        ),
        case(
            "server_500",
            HTTP,
            on(|a| drop(exchange(a, &get("/status/500")))),
            1,
        ),
        case(
            "refused_retried",
            HTTP,
            on(|a| drop(exchange(a, &get("/refused")))),
            1,
        ),
        case(
            "no_server",
            HTTP,
            on(|a| drop(exchange(a, &get("/nosrv")))),
            1,
        ),
        case(
            "server_timeout",
            HTTP,
            on(|a| drop(exchange(a, &get("/slow")))),
            1,
        ),
        case(
            "chunked",
            HTTP,
            on(|a| drop(exchange(a, &get("/chunked")))),
            1,
        ),
        case(
            "early_hints",
            HTTP,
            on(|a| drop(exchange(a, &get("/early")))),
            1,
        ),
        case(
            "head",
            HTTP,
            on(|a| {
                let req = b"HEAD /ok HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n";
                drop(exchange(a, req))
            }),
            1,
        ),
        case(
            "keep_alive",
            HTTP,
            on(|a| {
                let two = b"GET /one HTTP/1.1\r\nHost: a.example\r\n\r\nGET /two HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n";
                drop(exchange(a, two))
            }),
            2,
        ),
        case(
            "bad_request",
            HTTP,
            on(|a| drop(exchange(a, b"GET /a b HTTP/1.1\r\nHost: a.example\r\n\r\n"))),
            1,
        ),
        case(
            "client_gone_in_head",
            HTTP,
            on(|a| {
                let mut c = TcpStream::connect(a).unwrap();
                c.write_all(b"GET /x HTTP/1.1\r\nHost: a.ex").unwrap();
            }),
            1,
        ),
        case(
            "request_timeout",
            HTTP,
            on(|a| drop(exchange(a, b"GET /x HTTP/1.1\r\nHost: a.ex"))),
            1,
        ),
        case(
            "client_abort",
            HTTP,
            with(|p, o| {
                let mut c = TcpStream::connect(p.addr()).unwrap();
                c.write_all(b"GET /slow HTTP/1.1\r\nHost: a.example\r\n\r\n")
                    .unwrap();
                // Gone once the server has the request (it answers after 2 s).
                wait_until("the request at the server", || o.count() >= 1);
                None
            }),
            1,
        ),
        case(
            "oversized_head",
            HTTP,
            on(|a| {
                let long = format!(
                    "GET /{} HTTP/1.1\r\nHost: a.example\r\n\r\n",
                    "a".repeat(20000)
                );
                drop(exchange(a, long.as_bytes()))
            }),
            1,
        ),
        case(
            "tcp_session",
            TCP,
            on(|a| {
                let req = b"GET /ok HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n";
                drop(exchange(a, req))
            }),
            1,
        ),
        case(
            "log_format",
            CUSTOM,
            on(|a| drop(exchange(a, &get("/ok")))),
            1,
        ),
        case(
            "log_format_variables",
            VARIABLES,
            on(|a| drop(exchange(a, &get("/ok?x=1")))),
            1,
        ),
        case(
            "log_format_absolute_uri",
            VARIABLES,
            on(|a| drop(exchange(a, &get("http://a.example/abs/p?y=2")))),
            1,
        ),
        case(
            "abort_during_retries",
            ABORT,
            with(|p, _| {
                // The CLI is the first address, the frontend the second.
                let mut c = TcpStream::connect(p.addrs[1]).unwrap();
                c.write_all(b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
                    .unwrap();
                // Gone once the first connection attempt failed and a retry waits.
                wait_until("a retry", || retries(p.addrs[0], "be", "dead") >= 1);
                None
            }),
            1,
        ),
        case(
            "client_stalls_mid_response",
            HTTP,
            with(|p, _| {
                let mut c = TcpStream::connect(p.addr()).unwrap();
                c.write_all(&get("/big")).unwrap();
                // Reads nothing: open until `timeout client` (2 s) has ended the stream.
                Some(c)
            }),
            1,
        ),
        // The first result of each server, then the one going down (in either order).
        case("health_checks", CHECKS, on(|_| {}), 3),
        case(
            "admin_changes",
            ADMIN,
            on(|a| {
                for cmd in [
                    "disable server be/s",
                    "enable server be/s",
                    "set server be/t state drain",
                    "set server be/t state ready",
                    "set server be/t state maint",
                    "set server be/t state ready",
                    "set weight be/s 0",
                    "set server be/t health down",
                ] {
                    cli(a, cmd);
                }
            }),
            8,
        ),
        case(
            "response_edited",
            RESPONSES,
            on(|a| drop(exchange(a, &get("/edited")))),
            1,
        ),
        case(
            "response_compressed",
            RESPONSES,
            on(|a| {
                let req = b"GET /ok HTTP/1.1\r\nHost: a.example\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n";
                drop(exchange(a, req))
            }),
            1,
        ),
        case(
            "response_denied",
            RESPONSES,
            on(|a| drop(exchange(a, &get("/denied")))),
            1,
        ),
        case(
            "response_returned",
            RESPONSES,
            on(|a| drop(exchange(a, &get("/returned")))),
            1,
        ),
        case(
            "response_body_waited",
            RESPONSES,
            on(|a| drop(exchange(a, &get("/wait/chunked")))),
            1,
        ),
        case(
            "response_body_late",
            RESPONSES,
            on(|a| drop(exchange(a, &get("/wait/stall")))),
            1,
        ),
        case(
            "request_body_late",
            RESPONSES,
            on(|a| {
                let req =
                    b"POST /wait/ok HTTP/1.1\r\nHost: a.example\r\nContent-Length: 20\r\n\r\n0123";
                drop(exchange(a, req))
            }),
            1,
        ),
        case(
            "client_gone_while_queued",
            QUEUED,
            with(|p, o| {
                // The CLI is the first address, the frontend the second.
                let mut first = TcpStream::connect(p.addrs[1]).unwrap();
                first
                    .write_all(
                        b"GET /slow HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
                    )
                    .unwrap();
                wait_until("the first request at the server", || o.count() >= 1);
                let mut second = TcpStream::connect(p.addrs[1]).unwrap();
                second
                    .write_all(b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
                    .unwrap();
                // (HAProxy queues it on the backend, sluice on the server.)
                wait_until("the second request queued", || {
                    queued(p.addrs[0], "be", "s") + queued(p.addrs[0], "be", "BACKEND") >= 1
                });
                // Gone while queued; the first one is answered when the server is done.
                drop(second);
                Some(first)
            }),
            2,
        ),
        case(
            "last_server_to_maintenance",
            ADMIN_ONE,
            on(|a| {
                cli(a, "disable server be/s");
            }),
            2,
        ),
        case(
            "tls_httpslog",
            &TLS.replace("{crt}", crt),
            Box::new(move |p, _| {
                tls_exchange(&tls_ca, p.addr());
                None
            }),
            1,
        ),
    ]
}

/// Response rules that edit, deny, replace or wait for the server's answer; HAProxy counts
/// a response as it received it, whatever the rules then do.
const RESPONSES: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    option httplog
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe}
    http-request set-var(txn.path) path
    http-request wait-for-body time 300ms if { path_beg /wait }
    http-response wait-for-body time 300ms if { var(txn.path) -m beg /wait }
    http-response set-header x-body %[res.body] if { var(txn.path) -m beg /wait }
    http-response set-header x-added added-by-a-rule
    http-response del-header content-type if { var(txn.path) -m str /edited }
    http-response deny if { var(txn.path) -m str /denied }
    http-response return status 201 content-type text/plain string hi if { var(txn.path) -m str /returned }
    compression algo gzip
    compression type text/plain
    default_backend be
backend be
    cookie SRV insert indirect nocache
    server s {o} cookie s1
";

/// Every variable whose value does not change from run to run (ports, dates, timers and
/// the host name do).
const VARIABLES: &str = "global
    log stdout format raw local0
defaults
    mode http
    log global
    timeout connect 1s
    timeout client 2s
    timeout server 2s
frontend fe
    {fe}
    log-format \"%ci %f %ft %b %s %si %bi %ST %B %U %CC %CS %tsc %ac %fc %bc %sc %rc %sq %bq %HM %HU %HP %HPO %HQ %HV %{+Q}r %ts %lc\"
    default_backend be
backend be
    server s {o}
";

/// `option abortonclose` with a server that refuses and retries that wait in between.
const ABORT: &str = "global
    log stdout format raw local0
    stats socket {fd}
defaults
    mode http
    log global
    option httplog
    option abortonclose
    retries 3
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend fe
    {fe}
    default_backend be
backend be
    server dead 127.0.0.1:1
";

/// A server with `maxconn 1` and `option abortonclose`: a second request waits in its queue.
const QUEUED: &str = "global
    log stdout format raw local0
    stats socket {fd}
defaults
    mode http
    log global
    option httplog
    option abortonclose
    timeout connect 1s
    timeout client 5s
    timeout server 5s
    timeout queue 5s
frontend fe
    {fe}
    default_backend be
backend be
    server s {o} maxconn 1
";

/// A server's `qcur` in `show stat`, asked on the CLI at `addr`.
fn queued(addr: SocketAddr, backend: &str, server: &str) -> u64 {
    let csv = String::from_utf8_lossy(&exchange(addr, b"show stat\n")).into_owned();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or("")
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let col = header
        .iter()
        .position(|h| *h == "qcur")
        .expect("a qcur column");
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&backend) && f.get(1) == Some(&server))
        .and_then(|f| f.get(col).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// A line with what changes from run to run masked: the client's port, the date, and every
/// timer but -1 (the timers are the first `a/b/...` field after the server).
fn mask(line: &str) -> String {
    if let Some((before, after)) = line.split_once("check duration: ") {
        let rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        return format!("{before}check duration: T{rest}");
    }
    let mut words: Vec<String> = line.split(' ').map(String::from).collect();
    if let Some(first) = words.first_mut() {
        if let Some((ip, _)) = first.rsplit_once(':') {
            *first = format!("{ip}:PORT");
        }
    }
    let mut timers_done = false;
    for w in words.iter_mut() {
        if w.starts_with('[') && w.ends_with(']') && w.contains('/') && w.contains(':') {
            *w = "[DATE]".into();
        } else if !timers_done
            && w.contains('/')
            && w.split('/').count() >= 3
            && w.split('/')
                .all(|t| t.trim_start_matches('+').parse::<i64>().is_ok())
        {
            *w = w
                .split('/')
                .map(|t| if t == "-1" { "-1" } else { "T" })
                .collect::<Vec<_>>()
                .join("/");
            timers_done = true;
        }
    }
    words.join(" ")
}

/// The line with its byte count (the field after the status) masked.
fn mask_bytes(line: &str) -> String {
    let mut words: Vec<&str> = line.split(' ').collect();
    if let Some(i) = words
        .iter()
        .position(|w| w.contains("/T") || w.contains("T/"))
    {
        if let Some(b) = words.get_mut(i + 2) {
            *b = "B";
        }
    }
    words.join(" ")
}

fn reference(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/haproxy-2.6/logs")
        .join(format!("{name}.log"))
}

/// Runs one case through `proxy` (sluice, or HAProxy when recording) and returns its
/// masked lines.
fn run(config: &str, exchange: &Exchange, lines: usize, haproxy: bool) -> Vec<String> {
    let o = origin();
    let config = config.replace("{o}", &o.addr.to_string());
    let p = if haproxy {
        Sluice::start_program("haproxy", &["-db"], &config)
    } else {
        Sluice::start(&config)
    };
    let held = exchange(&p, &o);
    let logged = || {
        let mut lines: Vec<String> = p
            .stdout()
            .lines()
            .filter(|l| {
                [" fe ", " fe~ ", " raw "].iter().any(|w| l.contains(w))
                    || l.starts_with("Health check for")
                    || l.starts_with("Server ")
                    || l.starts_with("backend ")
            })
            .map(mask)
            .collect();
        // Lines of different servers or connections come in no fixed order.
        lines.sort();
        lines
    };
    wait_until("the log lines", || logged().len() >= lines);
    drop(held);
    // Checks go on: only the first lines are the case's.
    let mut got = logged();
    got.truncate(lines);
    got
}

#[test]
fn access_log_lines_match_haproxys() {
    let haproxy = std::env::var("SLUICE_LOG_RECORD").as_deref() == Ok("haproxy");
    let dir = TempDir::new();
    let ca = std::sync::Arc::new(Ca::new());
    let (crt, _) = ca.leaf(&dir, "site.pem", &["site.test"]);
    let mut differ = Vec::new();
    for (name, config, exchange, lines) in cases(&ca, &crt) {
        let mut got = run(&config, &exchange, lines, haproxy);
        if BYTES_VARY.contains(&name) {
            got = got.iter().map(|l| mask_bytes(l)).collect();
        }
        let path = reference(name);
        if haproxy {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, got.join("\n") + "\n").unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (record with testdata/haproxy-2.6/record-logs.sh)",
                path.display()
            )
        });
        let want: Vec<String> = want
            .lines()
            .map(
                |l| match ON_PURPOSE.iter().find(|(case, ..)| *case == name) {
                    Some((_, theirs, ours)) => l.replace(theirs, ours),
                    None => l.to_string(),
                },
            )
            .collect();
        if got != want {
            differ.push(format!("{name}:\n  haproxy {want:?}\n  sluice  {got:?}"));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn masking_keeps_what_matters() {
    assert_eq!(
        mask("127.0.0.1:40850 [26/Nov/2026:11:11:44.716] fe be/s 0/0/-1/-1/3002 503 217 - - SC-- 1/1/0/0/3 0/0 {a.example} {} \"GET /dead HTTP/1.1\""),
        "127.0.0.1:PORT [DATE] fe be/s T/T/-1/-1/T 503 217 - - SC-- 1/1/0/0/3 0/0 {a.example} {} \"GET /dead HTTP/1.1\""
    );
}
