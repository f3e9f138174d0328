//! Access logs through the real binary: httplog lines over UDP syslog parsed field by field,
//! termination codes for timeouts and failures, stdout raw logs, tcplog, log-format.

mod common;

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// A syslog collector on 127.0.0.1.
struct Collector(UdpSocket);

impl Collector {
    fn new() -> Collector {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        Collector(s)
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.0.local_addr().unwrap()
    }

    /// The next datagram, as text.
    fn next(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self
            .0
            .recv(&mut buf)
            .expect("a log line within the timeout");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// The fields of an httplog message, split as HAProxy documents them.
#[derive(Debug)]
struct HttpLog {
    client: String,
    date: String,
    frontend: String,
    backend_server: String,
    timers: Vec<i64>,
    status: i64,
    bytes: u64,
    term: String,
    conns: Vec<u64>,
    queues: String,
    request: String,
}

fn parse_httplog(msg: &str) -> HttpLog {
    let (head, request) = msg.split_once(" \"").expect("quoted request line");
    let f: Vec<&str> = head.split(' ').collect();
    assert_eq!(f.len(), 12, "{msg}");
    HttpLog {
        client: f[0].into(),
        date: f[1].trim_matches(|c| c == '[' || c == ']').into(),
        frontend: f[2].into(),
        backend_server: f[3].into(),
        timers: f[4].split('/').map(|t| t.parse().unwrap()).collect(),
        status: f[5].parse().unwrap(),
        bytes: f[6].parse().unwrap(),
        term: f[9].into(),
        conns: f[10].split('/').map(|t| t.parse().unwrap()).collect(),
        queues: f[11].into(),
        request: request.trim_end_matches('"').into(),
    }
    .check_cookies(f[7], f[8])
}

impl HttpLog {
    fn check_cookies(self, cc: &str, cs: &str) -> Self {
        assert_eq!((cc, cs), ("-", "-"));
        self
    }
}

/// Strips the RFC 3164 framing: `<134>Nov 22 06:40:00 sluice[123]: msg`.
fn syslog_msg(line: &str, pri: u32) -> String {
    let rest = line
        .strip_prefix(&format!("<{pri}>"))
        .unwrap_or_else(|| panic!("priority {pri}: {line}"));
    let (_, msg) = rest
        .split_once("]: ")
        .unwrap_or_else(|| panic!("tag: {line}"));
    assert!(rest.contains(" sluice["), "{line}");
    msg.to_string()
}

fn config(collector: &Collector, origin_addr: std::net::SocketAddr, extra_be: &str) -> String {
    format!(
        "global\n    log {} local0\n{DEFAULTS}    log global\n    option httplog\n    timeout http-request 300ms\nfrontend fe\n    {{fe}}\n    use_backend slow if {{ path_beg /slow }}\n    default_backend be\nbackend be\n{extra_be}\n    server s1 {origin_addr}\nbackend slow\n    timeout server 200ms\n    server s2 {origin_addr}\n",
        collector.addr()
    )
}

#[test]
fn httplog_lines_reach_syslog_field_by_field() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            if r.target.starts_with("/slow") {
                Reply::Delayed(Duration::from_secs(2), ok_response("late"))
            } else {
                ok_response("hello").into()
            }
        }),
    );
    let collector = Collector::new();
    let p = Sluice::start(&config(&collector, origin.addr, ""));
    let mut c = p.connect();
    let before = Instant::now();
    assert_eq!(c.get("/ok?x=1").status, 200);
    let line = collector.next();
    let l = parse_httplog(&syslog_msg(&line, 134));
    assert!(l.client.starts_with("127.0.0.1:"), "{l:?}");
    let port: u16 = l.client.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(port, c.writer.local_addr().unwrap().port());
    assert!(
        l.date.contains('/') && l.date.contains(':') && l.date.contains('.'),
        "{l:?}"
    );
    assert_eq!(
        (l.frontend.as_str(), l.backend_server.as_str()),
        ("fe", "be/s1")
    );
    assert_eq!(l.timers.len(), 5);
    assert!(
        l.timers.iter().all(|&t| t >= 0),
        "all steps happened: {l:?}"
    );
    let elapsed = before.elapsed().as_millis() as i64;
    assert!(l.timers[4] <= elapsed + 5, "Ta within the request: {l:?}");
    assert_eq!(l.status, 200);
    assert!(l.bytes > 5, "head and body counted: {l:?}");
    assert_eq!(l.term, "----");
    assert_eq!(l.conns.len(), 5);
    assert!(l.conns[0] >= 1 && l.conns[1] >= 1, "{l:?}");
    assert_eq!(l.queues, "0/0");
    assert_eq!(l.request, "GET /ok?x=1 HTTP/1.1");

    // A slow server: 504 and sH.
    assert_eq!(get(p.addr(), "/slow").status, 504);
    let l = parse_httplog(&syslog_msg(&collector.next(), 134));
    assert_eq!(
        (l.status, l.term.as_str(), l.backend_server.as_str()),
        (504, "sH--", "slow/s2")
    );
    // A malformed request: 400 and PR.
    let (r, _) = raw_exchange(p.addr(), b"GET / HTTP/1.1\r\nHost : x\r\n\r\n");
    assert_eq!(r.unwrap().status, 400);
    let l = parse_httplog(&syslog_msg(&collector.next(), 134));
    assert_eq!((l.status, l.term.as_str()), (400, "PR--"));
    // A slow client (timeout http-request): 408 and cR.
    let mut slow = p.connect();
    slow.send(b"GET / HTTP/1.1\r\n");
    assert_eq!(slow.response().status, 408);
    let l = parse_httplog(&syslog_msg(&collector.next(), 134));
    assert_eq!((l.status, l.term.as_str()), (408, "cR--"));
}

#[test]
fn connection_refused_logs_sc() {
    let (_dead_port, dead) = refused_addr();
    let collector = Collector::new();
    let p = Sluice::start(&config(&collector, dead, "    retries 1"));
    assert_eq!(get(p.addr(), "/").status, 503);
    let l = parse_httplog(&syslog_msg(&collector.next(), 134));
    assert_eq!((l.status, l.term.as_str()), (503, "SC--"));
    assert_eq!(l.conns[4], 1, "one retry: {l:?}");
}

#[test]
fn stdout_raw_logs_and_log_format() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    log global\n    log-format \"%ci %ft %b/%s %ST %{{+Q}}r %tsc\"\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    // The first line is awaited before the second request: the workers write their lines
    // in the order their transactions end.
    get(p.addr(), "/a");
    stdout_lines(&p, 1);
    get(p.addr(), "/b");
    let lines = stdout_lines(&p, 2);
    assert_eq!(lines[0], "127.0.0.1 fe be/s1 200 \"GET /a HTTP/1.1\" ----");
    assert_eq!(lines[1], "127.0.0.1 fe be/s1 200 \"GET /b HTTP/1.1\" ----");
}

/// A TCP server that echoes the first bytes each connection sends (up to 64), once.
fn echo_once_server() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut b = [0u8; 64];
            let n = s.read(&mut b).unwrap_or(0);
            let _ = s.write_all(&b[..n]);
        }
    });
    addr
}

#[test]
fn tcplog_in_tcp_mode() {
    let addr = echo_once_server();
    let collector = Collector::new();
    let p = Sluice::start(&format!(
        "global\n    log {} format rfc5424 local1\ndefaults\n    mode tcp\n    log global\n    option tcplog\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n    server echo {addr}\n",
        collector.addr()
    ));
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(p.addr()).unwrap();
        s.write_all(b"12345").unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
    }
    let line = collector.next();
    // RFC 5424: <PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG; local1.info = 142.
    assert!(line.starts_with("<142>1 "), "{line}");
    let msg = line.splitn(8, ' ').nth(7).unwrap();
    let f: Vec<&str> = msg.split(' ').collect();
    assert_eq!(f.len(), 9, "{msg}");
    assert_eq!((f[2], f[3]), ("raw", "raw/echo"));
    assert_eq!(f[5], "5", "bytes sent to the client: {msg}");
    assert_eq!(f[6], "--");
}

#[test]
fn log_keywords_are_checked() {
    let check = check_config;
    let (ok, err) = check("global\n    log stdout format json local0\n");
    assert!(
        !ok && err.contains("expects raw, short, rfc3164 or rfc5424"),
        "{err}"
    );
    let (ok, err) = check("frontend f\n    bind :1\n    log-format \"%ci %nope\"\n");
    assert!(
        !ok && err.contains("unknown log-format variable '%nope'"),
        "{err}"
    );
    let (ok, err) = check("global\n    log 127.0.0.1:514\n");
    assert!(!ok && err.contains("facility"), "{err}");
}

/// The log lines on standard output once `n` are there.
fn stdout_lines(p: &Sluice, n: usize) -> Vec<String> {
    wait_until("log lines", || p.stdout().lines().count() >= n);
    p.stdout().lines().map(str::to_string).collect()
}

#[test]
fn captures_appear_in_httplog_as_haproxy_prints_them() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    capture request header Host len 20\n    capture request header User-Agent len 5\n    capture response header Content-Type len 30\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET /cap HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.1\r\n\r\n");
    assert_eq!(c.response_for(false).unwrap().status, 200);
    let line = &stdout_lines(&p, 1)[0];
    assert!(
        line.ends_with(" 0/0 {example.com|curl/} {text/plain} \"GET /cap HTTP/1.1\""),
        "{line}"
    );
}

#[test]
fn log_format_samples_options_and_unique_ids() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    unique-id-format %{{+X}}o\\ %ci:%cp_%rt:%pid\n    unique-id-header X-Unique-ID\n    capture request header Host len 20\n    log-format \"%[req.hdr(host),lower] %{{+Q}}[path] %ID %U %hrl %{{+X}}ST %pid\"\n    http-response set-header X-ID %[unique-id]\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET /p HTTP/1.1\r\nHost: WWW.Example.COM\r\n\r\n");
    let r = c.response_for(false).unwrap();
    let id = r.header("x-id").expect("the unique id").to_string();
    let seen = origin.requests().pop().unwrap();
    assert_eq!(seen.header("x-unique-id"), Some(id.as_str()));
    // %ci in hexadecimal (+X applies to every variable after %{+X}o): 7F000001.
    assert!(id.starts_with("7F000001:"), "{id}");
    let line = &stdout_lines(&p, 1)[0];
    let pid = p.pid();
    assert_eq!(
        *line,
        // %U counts the request as HAProxy does (`haproxy_size`): 53 for these 42 bytes.
        format!("www.example.com \"/p\" {id} 53 WWW.Example.COM C8 {pid}")
    );
}

#[test]
fn a_bad_request_is_logged_as_badreq() {
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    let mut c = p.connect();
    c.send(b"GARBAGE\r\n\r\n");
    assert_eq!(c.response_for(false).unwrap().status, 400);
    let line = &stdout_lines(&p, 1)[0];
    assert!(line.ends_with(" \"<BADREQ>\""), "{line}");
}

#[test]
fn an_invalid_server_response_is_ph_and_counts_end_with_the_request() {
    let bad = Origin::with_handler(
        "bad",
        std::sync::Arc::new(|_: &Received| Reply::Raw(b"NOT HTTP AT ALL\r\n\r\n".to_vec())),
    );
    let good = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    use_backend bad if {{ path /bad }}\n    default_backend be\nbackend be\n    server s1 {}\nbackend bad\n    server s2 {}\n",
        good.addr, bad.addr
    ));
    assert_eq!(get(p.addr(), "/bad").status, 502);
    let line = stdout_lines(&p, 1)[0].clone();
    let l = parse_httplog(&line);
    assert_eq!((l.status, l.term.as_str()), (502, "PH--"), "{line}");
    assert_eq!(get(p.addr(), "/ok").status, 200);
    let line = stdout_lines(&p, 2)[1].clone();
    let l = parse_httplog(&line);
    // This connection is open on the process and the frontend (the first one may not be
    // closed yet); none is left on the backend and the server once the request is over, as
    // HAProxy logs it.
    assert!(l.conns[0] >= 1 && l.conns[1] >= 1, "{line}");
    assert_eq!(l.conns[2..], [0, 0, 0], "{line}");
}

#[test]
fn capture_actions_and_log_levels() {
    let origin = Origin::start("o");
    let collector = Collector::new();
    let p = Sluice::start(&format!(
        "global\n    log {} local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    declare capture response len 8\n    capture request header Host len 20\n    http-request capture path len 4\n    http-request capture req.hdr(x-id) len 10\n    http-response capture res.hdr(content-type) id 0\n    http-request set-log-level silent if {{ path /quiet }}\n    http-request set-log-level err if {{ path /loud }}\n    default_backend be\nbackend be\n    server s1 {}\n",
        collector.addr(),
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET /quiet HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.response().status, 200);
    c.send(b"GET /loud HTTP/1.1\r\nHost: example.com\r\nX-Id: abc\r\n\r\n");
    assert_eq!(c.response().status, 200);
    // The silent request left no line: the first one is the second request's, at `err`.
    let line = collector.next();
    assert!(line.starts_with("<131>"), "local0.err is 16*8+3: {line}");
    assert!(
        line.contains(" {example.com|/lou|abc} {text/pla} \"GET /loud HTTP/1.1\""),
        "{line}"
    );
}

#[test]
fn log_targets_filter_by_level_and_sample_lines() {
    let origin = Origin::start("o");
    let (notice, sampled) = (Collector::new(), Collector::new());
    // `notice`: only lines at least that urgent. `sample 2-3:3 ... debug warning`: lines 2
    // and 3 of every 3, and a line more urgent than the second level goes out at it.
    let p = Sluice::start(&format!(
        "global\n    log {} local0 notice\n    log {} sample 2-3:3 local1 debug warning\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    http-request set-log-level err if {{ path /loud }}\n    default_backend be\nbackend be\n    server s1 {}\n",
        notice.addr(),
        sampled.addr(),
        origin.addr
    ));
    let mut c = p.connect();
    for path in ["/r1", "/r2", "/r3", "/r4", "/loud"] {
        assert_eq!(c.get(path).status, 200);
    }
    // The info lines never reached the `notice` target: its first line is the `err` one.
    let line = notice.next();
    assert!(
        line.starts_with("<131>") && line.contains("GET /loud"),
        "{line}"
    );
    // Lines 1 and 4 were left out of the sample; the `err` line went out at `warning`
    // (local1.info is 17*8+6, local1.warning 17*8+4).
    for (path, pri) in [("/r2", "<142>"), ("/r3", "<142>"), ("/loud", "<140>")] {
        let line = sampled.next();
        assert!(
            line.starts_with(pri) && line.contains(&format!("GET {path} ")),
            "{path}: {line}"
        );
    }
    let check = check_config;
    for (cfg, err) in [
        ("log 127.0.0.1:514 sample 3-2:5 local0", "runs backwards"),
        ("log 127.0.0.1:514 sample 1-3,2:5 local0", "overlaps"),
        (
            "log 127.0.0.1:514 sample 1-6:5 local0",
            "should be at least 6",
        ),
        ("log 127.0.0.1:514 sample 1 local0", "RANGES:SIZE"),
        ("log 127.0.0.1:514 local0 info err debug", "unexpected"),
    ] {
        let (ok, out) = check(&format!("global\n    {cfg}\n"));
        assert!(
            !ok && out.contains(err) && out.contains("c.cfg:2"),
            "{cfg}: {out}"
        );
    }
}

#[test]
fn cookies_addresses_timers_and_logasap() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|_: &Received| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: SESSIONID=xyz789; path=/\r\n\r\nok"
                    .to_vec(),
            )
        }),
    );
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    capture cookie SESSION len 14\n    log-format \"%CC %CS %si:%sp %bi %HP %HQ %ms %Th %Ti %Tq %sslc %sslv %{{+E}}[req.hdr(x-raw)]\"\n    default_backend be\nbackend be\n    server s1 {}\nfrontend asap\n    {{fe}}\n    option logasap\n    log-format \"%ST %B %Ta %lc\"\n    default_backend be\n",
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\nCookie: lang=fr; SESSIONID=abc123456789\r\nX-Raw: a\"b]c\\d\r\n\r\n");
    assert_eq!(c.response().status, 200);
    let line = stdout_lines(&p, 1).remove(0);
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f[0], "SESSIONID=abc1", "{line}");
    assert_eq!(f[1], "SESSIONID=xyz7", "{line}");
    assert_eq!(f[2], origin.addr.to_string(), "{line}");
    assert_eq!(f[3], "127.0.0.1", "{line}");
    assert_eq!((f[4], f[5]), ("/a/b", "?x=1"), "{line}");
    assert_eq!(f[6].len(), 3, "{line}");
    assert_eq!(f[7], "0", "{line}");
    let (ti, tq): (i64, i64) = (f[8].parse().unwrap(), f[9].parse().unwrap());
    assert!(ti >= 0 && tq >= ti, "{line}");
    assert_eq!((f[10], f[11]), ("-", "-"), "{line}");
    assert_eq!(
        f[12], "a\\\"b\\]c\\\\d",
        "+E escapes quotes, ] and backslashes: {line}"
    );
    // logasap: the line goes out with the head, its totals marked as partial.
    let mut c = Conn::new(p.addrs[1]);
    c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(c.response().status, 200);
    let line = stdout_lines(&p, 2).remove(1);
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f[0], "200", "{line}");
    assert!(f[1].starts_with('+') && f[2].starts_with('+'), "{line}");
    // `%lc` counts the frontend's earlier lines, 0 for its first, as HAProxy's.
    assert_eq!(f[3], "0", "the frontend's first line: {line}");
}

#[test]
fn the_termination_state_shows_what_happened_to_the_persistence_cookie() {
    let origin = Origin::start("o");
    let setter = Origin::with_handler(
        "setter",
        Arc::new(|_: &Received| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: JS=abc; path=/\r\n\r\nok"
                    .to_vec(),
            )
        }),
    );
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    log-format \"%tsc\"\n    use_backend rw if {{ path_beg /rw }}\n    default_backend ins\nbackend ins\n    cookie SRV insert indirect\n    server s1 {} cookie s1\nbackend rw\n    cookie JS prefix\n    server s2 {} cookie s2\n",
        origin.addr, setter.addr
    ));
    // Each request's line is awaited before the next request: the workers write their
    // lines in the order their transactions end, which is not the clients' order.
    let mut logged = 0;
    let mut ask = |path: &str, cookie: &str| {
        let mut c = p.connect();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: h\r\n{cookie}\r\n").as_bytes());
        assert_eq!(c.response().status, 200);
        logged += 1;
        stdout_lines(&p, logged);
    };
    ask("/", "");
    ask("/", "Cookie: SRV=s1\r\n");
    ask("/", "Cookie: SRV=nobody\r\n");
    ask("/rw", "");
    let lines = stdout_lines(&p, 4);
    // No cookie, one inserted; a valid one, nothing to add; an invalid one, a new one
    // inserted; the server's own cookie prefixed.
    assert_eq!(lines, ["--NI", "--VN", "--II", "--NR"]);
}

#[test]
fn dontlog_normal_and_separate_errors() {
    let collector = Collector::new();
    let p = Sluice::start(&format!(
        "global\n    log {} local0\n{DEFAULTS}    log global\n    option httplog\n    option dontlog-normal\n    option log-separate-errors\nfrontend fe\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok if {{ path /ok }}\n    default_backend be\nbackend be\n    server s 127.0.0.1:9 disabled\n",
        collector.addr()
    ));
    assert_eq!(get(p.addr(), "/ok").status, 200);
    assert_eq!(get(p.addr(), "/down").status, 503);
    // The normal transaction left no line; the failed one is at `err` (local0: 16*8+3).
    let line = collector.next();
    assert!(
        line.starts_with("<131>") && line.contains(" 503 "),
        "{line}"
    );
    assert!(line.contains("\"GET /down HTTP/1.1\""), "{line}");
}

#[test]
fn dates_timers_hostname_response_captures_and_response_samples() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    capture response header Content-Type len 30\n    http-response set-var(txn.len) res.hdr(content-length)\n    log-format \"%T|%Tl|%trg|%trl|%Td|%Tu|%Ta|%hsl|%H|%[status]|%[res.hdr(content-type)]|%[var(txn.len)]|%[path]\"\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    assert_eq!(get(p.addr(), "/d").status, 200);
    let line = stdout_lines(&p, 1)[0].clone();
    let f: Vec<&str> = line.split('|').collect();
    assert_eq!(f.len(), 13, "{line}");
    // `10/Oct/2000:13:55:36 +0000`: the date in UTC, then local with its offset.
    let date_shape = |d: &str| {
        let b = d.as_bytes();
        d.len() == 26
            && b[2] == b'/'
            && b[6] == b'/'
            && b[11] == b':'
            && b[20] == b' '
            && (b[21] == b'+' || b[21] == b'-')
    };
    for d in &f[..4] {
        assert!(date_shape(d), "{d} in {line}");
    }
    assert!(
        f[0].ends_with(" +0000") && f[2].ends_with(" +0000"),
        "{line}"
    );
    assert_eq!(f[0], f[2], "%T and %trg are the same date");
    let td: i64 = f[4].parse().unwrap();
    assert!(td >= 0, "{line}");
    assert_eq!(f[5], f[6], "%Tu is %Ta without a handshake");
    assert_eq!(f[7], "text/plain");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(f[8], host.trim());
    // Samples reading the response (or a variable its rules set) see it.
    assert_eq!(f[9..], ["200", "text/plain", "4", "/d"], "{line}");
}

#[test]
fn the_request_counter_is_one_count_for_every_worker() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n{DEFAULTS}frontend fe\n    {{fe}}\n    unique-id-format %rt\n    http-response set-header x-id %[unique-id]\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    // One connection per request: they spread over both workers.
    let mut ids: Vec<u64> = (0..20)
        .map(|_| {
            let r = get(p.addr(), "/");
            r.header("x-id").expect("an id").parse().unwrap()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..20).collect::<Vec<u64>>());
}

#[test]
fn a_unique_id_renders_its_samples() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    unique-id-format TEST-%[req.hdr(in)]-%[str(x)]-%[path]\n    unique-id-header X-Unique-ID\n    http-response set-header x-id %[unique-id]\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET /p HTTP/1.1\r\nHost: t\r\nin: foo\r\n\r\n");
    // As HAProxy 2.6.12 renders it (its reg-test stream/unique-id).
    assert_eq!(c.response().header("x-id"), Some("TEST-foo-x-/p"));
    let got = origin.requests().pop().unwrap();
    assert_eq!(got.header("x-unique-id"), Some("TEST-foo-x-/p"));
}

#[test]
fn a_tcp_log_line_shows_where_the_connection_arrived() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\ndefaults\n    log global\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\n\
         listen raw\n    {{fe}}\n    log-format \"dst=%fi:%fp src=%ci\"\n    server s {}\n",
        origin.addr
    ));
    let req = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let (r, _) = raw_exchange(p.addr(), req);
    assert_eq!(r.expect("an answer").status, 200);
    // As HAProxy's reg-test log/wrong_ip_port_logging expects: the frontend's address.
    let want = format!("dst={}:{} src=127.0.0.1", p.addr().ip(), p.addr().port());
    wait_until("the TCP log line", || p.stdout().lines().any(|l| l == want));
}

#[test]
fn a_proxys_own_log_line_adds_to_an_inherited_log_global() {
    let (global, own) = (Collector::new(), Collector::new());
    let origin = Origin::start("o");
    // As in HAProxy (its reg-test http-set-timeout/set_timeout): `log global` from the
    // defaults and the proxy's own line both get the proxy's lines.
    let p = Sluice::start(&format!(
        "global\n    log {} local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    log {} local1\n    default_backend be\nbackend be\n    server s {}\n",
        global.addr(),
        own.addr(),
        origin.addr
    ));
    assert_eq!(get(p.addr(), "/seen").status, 200);
    for c in [&global, &own] {
        assert!(c.next().contains("\"GET /seen HTTP/1.1\""));
    }
}

/// `tune.http.logurilen`: the request line a log line holds is cut to that many bytes, and
/// the fields read from it follow (`%HV` is HTTP/0.9 when the cut falls within the target).
/// The expected lines are what HAProxy 2.6.12 logged for the same configuration and
/// requests.
#[test]
fn the_logged_request_line_is_cut_at_tune_http_logurilen() {
    let p = Sluice::start(&format!(
        "global\n    tune.http.logurilen 40\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    log-format \"%r|%HU|%HV|%HP|%HQ|%HM\"\n    http-request return status 200\n"
    ));
    let paths = [
        "/aaaaaaaaaabbbbbbbbbbcccccccccc?q=dddddddd",
        "/aaaaaaaaaabbbbbbbbbbccccccc",
        "/aaaaaaaaaabbbbbbbbbbcccccc",
        "/short",
    ];
    for (i, path) in paths.iter().enumerate() {
        assert_eq!(get(p.addr(), path).status, 200);
        stdout_lines(&p, i + 1);
    }
    assert_eq!(
        stdout_lines(&p, 4),
        [
            "GET /aaaaaaaaaabbbbbbbbbbcccccccccc?q=dd|/aaaaaaaaaabbbbbbbbbbcccccccccc?q=dd|HTTP/0.9|/aaaaaaaaaabbbbbbbbbbcccccccccc|?q=dd|GET",
            "GET /aaaaaaaaaabbbbbbbbbbccccccc HTTP/1.|/aaaaaaaaaabbbbbbbbbbccccccc|HTTP/1.|/aaaaaaaaaabbbbbbbbbbccccccc||GET",
            "GET /aaaaaaaaaabbbbbbbbbbcccccc HTTP/1.1|/aaaaaaaaaabbbbbbbbbbcccccc|HTTP/1.1|/aaaaaaaaaabbbbbbbbbbcccccc||GET",
            "GET /short HTTP/1.1|/short|HTTP/1.1|/short||GET",
        ]
    );
}

/// `tcp-request content set-log-level` in TCP mode: the session's line goes out at that
/// severity, or not at all with `silent` (the line of the session after a silenced one is
/// the next the collector gets).
#[test]
fn tcp_content_rules_set_the_log_level() {
    let addr = echo_once_server();
    let collector = Collector::new();
    let p = Sluice::start(&format!(
        "global\n    log {} local1\ndefaults\n    mode tcp\n    log global\n    option tcplog\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n    tcp-request inspect-delay 5s\n    tcp-request content set-log-level err if {{ req.payload(0,3) -m str bad }}\n    tcp-request content set-log-level silent if {{ req.payload(0,4) -m str quie }}\n    tcp-request content accept if {{ req.len gt 0 }}\n    server echo {addr}\n",
        collector.addr()
    ));
    let session = |sent: &[u8]| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(p.addr()).unwrap();
        s.write_all(sent).unwrap();
        let mut b = vec![0u8; sent.len()];
        s.read_exact(&mut b).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
    };
    session(b"quiet");
    session(b"1234567");
    // local1 is 17: info 17*8+6 = 142, err 17*8+3 = 139. The silenced session sent 5
    // bytes, this one 7.
    let line = collector.next();
    assert!(
        line.starts_with("<142>") && line.contains(" 7 -- "),
        "{line}"
    );
    session(b"bad!!");
    let line = collector.next();
    assert!(line.starts_with("<139>"), "{line}");
    let (ok, out) = check_config(
        "defaults\n    mode tcp\nfrontend f\n    bind 127.0.0.1:8080\n    tcp-request connection set-log-level err\n",
    );
    assert!(!ok && out.contains(":5:"), "{out}");
}

/// `capture cookie ... len N` is cut to `tune.http.cookielen` (63 by default) with
/// HAProxy's warning: HAProxy 2.6.12 logs the same 63 bytes (`SID=` and 59 of the value)
/// for this configuration and request.
#[test]
fn a_cookie_capture_is_cut_to_tune_http_cookielen() {
    let origin = Origin::start("o");
    let value = "x".repeat(90);
    for (global, kept) in [("", 63), ("    tune.http.cookielen 10\n", 10)] {
        let config = format!(
            "global\n    log stdout format raw local0\n{global}{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    capture cookie SID len 100\n    log-format \"%CC\"\n    default_backend be\nbackend be\n    server s1 {}\n",
            origin.addr
        );
        let p = Sluice::start(&config);
        assert!(
            p.stderr().contains(&format!(
                "truncating capture length to {kept} bytes for frontend 'fe'."
            )),
            "{}",
            p.stderr()
        );
        let mut c = p.connect();
        c.send(format!("GET / HTTP/1.1\r\nHost: a\r\nCookie: SID={value}\r\n\r\n").as_bytes());
        assert_eq!(c.response_for(false).unwrap().status, 200);
        let want: String = format!("SID={value}").chars().take(kept).collect();
        assert_eq!(stdout_lines(&p, 1)[0], want);
    }
}

/// `option http-ignore-probes`: a connection that sends nothing until `timeout
/// http-request` is closed without a 408, a log line or a request error counted
/// (browsers' pre-connects); without the option it gets all three.
#[test]
fn http_ignore_probes_leaves_no_trace_of_an_empty_connection() {
    use std::io::Read;
    let dir = TempDir::new();
    for ignore in [false, true] {
        let sock = dir.0.join(format!("s{ignore}.sock"));
        let option = if ignore {
            "    option http-ignore-probes\n"
        } else {
            ""
        };
        let p = Sluice::start(&format!(
            "global\n    log stdout format raw local0\n    stats socket {}\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    timeout http-request 300ms\n    log-format \"%ST %r\"\n{option}    http-request return status 200\n",
            sock.display()
        ));
        let mut probe = std::net::TcpStream::connect(p.addr()).unwrap();
        let mut got = Vec::new();
        probe.read_to_end(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got).starts_with("HTTP/1.1 408"),
            !ignore,
            "{}",
            String::from_utf8_lossy(&got)
        );
        // The probe's line, when it has one, is awaited before the next request.
        if !ignore {
            stdout_lines(&p, 1);
        }
        assert_eq!(get(p.addr(), "/after").status, 200);
        let lines = stdout_lines(&p, 1);
        let want_first = if ignore {
            "200 GET /after HTTP/1.1"
        } else {
            "408 <BADREQ>"
        };
        assert_eq!(lines[0], want_first, "{lines:?}");
        let csv = Sluice::cli(&sock, "show stat");
        let ereq = stat_field(&csv, "fe", "FRONTEND", "ereq");
        assert_eq!(ereq, if ignore { "0" } else { "1" });
    }
}

/// `log-format-sd`: the lines sent to an `rfc5424` target carry its structured data where
/// the format has `-` otherwise, with the time written as HAProxy 2.6 writes it
/// (microseconds, a numeric offset); checked against HAProxy 2.6.12's line for the same
/// configuration: `<134>1 TIME - haproxy PID - [exampleSDID@1234 bytes="900"
/// status="200"] 127.0.0.1:... fe be/s ...`. Sample fetches there are refused (not built).
#[test]
fn log_format_sd_fills_the_rfc5424_structured_data() {
    let origin = Origin::start("o");
    let collector = Collector::new();
    let p = Sluice::start(&format!(
        "global\n    log {} format rfc5424 local0\n{DEFAULTS}    log global\n    option httplog\nfrontend fe\n    {{fe}}\n    log-format-sd [exampleSDID@1234\\ bytes=\\\"%B\\\"\\ status=\\\"%ST\\\"]\n    default_backend be\nbackend be\n    server s {}\n",
        collector.addr(),
        origin.addr
    ));
    let r = get(p.addr(), "/sd");
    assert_eq!(r.status, 200);
    let line = collector.next();
    let f: Vec<&str> = line.splitn(7, ' ').collect();
    assert_eq!(
        (f[0], f[2], f[3], f[5]),
        ("<134>1", "-", "sluice", "-"),
        "{line}"
    );
    // 2026-11-27T00:22:10.300123+00:00
    assert!(f[1].len() == 32 && f[1].ends_with("+00:00"), "{line}");
    let (sd, msg) = f[6].split_once("] ").expect("structured data");
    let bytes = sd
        .strip_prefix("[exampleSDID@1234 bytes=\"")
        .and_then(|rest| rest.strip_suffix("\" status=\"200\""))
        .expect("the structured data's shape");
    assert!(bytes.parse::<u64>().unwrap() > 0, "{line}");
    // The message follows, with the same byte count.
    assert!(
        msg.contains(" fe be/s ") && msg.contains(&format!(" 200 {bytes} ")),
        "{line}"
    );
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    log-format-sd [x@1\\ a=\\\"%[src]\\\"]\n"
    ));
    assert!(
        !ok && err.contains("sample fetches in log-format-sd"),
        "{err}"
    );
}
