//! Routing and balancing through the real binary, observed as request counts at origins.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;

fn backend_with(algo: &str, servers: &[(&Origin, &str)]) -> String {
    let mut cfg = format!("global\n    nbthread 2\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance {algo}\n");
    for (i, (o, opts)) in servers.iter().enumerate() {
        cfg.push_str(&format!("    server s{i} {} {opts}\n", o.addr));
    }
    cfg
}

/// Sends `n` requests, each on a new connection, and returns how many each origin served.
fn spread(p: &Sluice, n: usize, path: impl Fn(usize) -> String) -> Vec<String> {
    (0..n)
        .map(|i| {
            get(p.addr(), &path(i))
                .text()
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn counts(names: &[String]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for n in names {
        *m.entry(n.clone()).or_insert(0) += 1;
    }
    m
}

#[test]
fn roundrobin_and_static_rr_follow_weights() {
    for algo in ["roundrobin", "static-rr"] {
        let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
        let p = Sluice::start(&backend_with(
            algo,
            &[(&a, "weight 3"), (&b, "weight 1"), (&c, "")],
        ));
        let got = counts(&spread(&p, 50, |_| "/".into()));
        // Sequential requests walk the weighted schedule exactly: 10 cycles of 5.
        assert_eq!(got["a"], 30, "{algo}: {got:?}");
        assert_eq!(got["b"], 10, "{algo}: {got:?}");
        assert_eq!(got["c"], 10, "{algo}: {got:?}");
    }
}

#[test]
fn weight_zero_and_disabled_servers_get_nothing() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let p = Sluice::start(&backend_with(
        "roundrobin",
        &[(&a, ""), (&b, "weight 0"), (&c, "disabled")],
    ));
    spread(&p, 6, |_| "/".into());
    assert_eq!((a.count(), b.count(), c.count()), (6, 0, 0));
}

#[test]
fn backup_servers_only_when_no_active_server_is_usable() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let p = Sluice::start(&backend_with(
        "roundrobin",
        &[(&a, ""), (&b, "backup"), (&c, "backup")],
    ));
    spread(&p, 4, |_| "/".into());
    assert_eq!((a.count(), b.count(), c.count()), (4, 0, 0));
    let p = Sluice::start(&backend_with(
        "roundrobin",
        &[(&a, "disabled"), (&b, "backup"), (&c, "backup")],
    ));
    spread(&p, 4, |_| "/".into());
    // Only the first usable backup serves (HAProxy's default without allbackups).
    assert_eq!((b.count(), c.count()), (4, 0));
}

#[test]
fn first_fills_the_first_server() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let p = Sluice::start(&backend_with("first", &[(&a, ""), (&b, "")]));
    spread(&p, 5, |_| "/".into());
    assert_eq!((a.count(), b.count()), (5, 0));
}

#[test]
fn leastconn_avoids_the_busy_server() {
    // The slow server holds every response until the test lets it go: no timing assumption.
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = release.clone();
    let slow = Origin::with_handler(
        "slow",
        Arc::new(move |_| {
            while !gate.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            ok_response("slow /").into()
        }),
    );
    let fast = Origin::start("fast");
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let cfg = backend_with("leastconn", &[(&slow, ""), (&fast, "")]).replacen(
        "global\n",
        &format!("global\n    stats socket {}\n", sock.display()),
        1,
    );
    let p = Sluice::start(&cfg);
    // Requests in flight on a server as the balancer counts them (s0 slow, s1 fast).
    let scur = |sv: &str| -> u64 {
        stat_field(&Sluice::cli(&sock, "show stat"), "be", sv, "scur")
            .parse()
            .unwrap()
    };
    let addr = p.addr();
    let deadline = std::time::Instant::now() + TIMEOUT;
    // Occupy the slow server with one in-flight request. Between two idle servers leastconn
    // may pick either, so send one at a time until one lands there (any that went to the
    // fast server have been answered).
    let mut holders = Vec::new();
    while slow.count() == 0 {
        let h = std::thread::spawn(move || get(addr, "/hold").text());
        while slow.count() == 0 && !h.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "no request reached the slow server"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        holders.push(h);
    }
    // While the slow server holds a request, new requests go to the fast one. A client can
    // read a whole response before the proxy has taken that request off the fast server's
    // count (that happens just after the last byte is written, possibly on another worker),
    // so each request waits until the previous ones are no longer counted: otherwise the
    // servers tie at one each and either may be picked.
    let mut got = Vec::new();
    for i in 0..6 {
        while scur("s1") != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "request {i}: earlier requests still counted on the fast server"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            scur("s0"),
            1,
            "request {i}: the slow server holds one request"
        );
        got.push(get(addr, "/").text().split(' ').next().unwrap().to_string());
    }
    assert!(got.iter().all(|n| n == "fast"), "{got:?}");
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    for h in holders {
        let t = h.join().unwrap();
        assert!(t == "slow /" || t == "fast /hold", "{t}");
    }
    assert_eq!(slow.count(), 1);
}

#[test]
fn random_uses_every_server() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let p = Sluice::start(&backend_with("random(2)", &[(&a, ""), (&b, ""), (&c, "")]));
    spread(&p, 60, |_| "/".into());
    assert_eq!(a.count() + b.count() + c.count(), 60);
    assert!(
        a.count() > 0 && b.count() > 0 && c.count() > 0,
        "{} {} {}",
        a.count(),
        b.count(),
        c.count()
    );
}

#[test]
fn uri_and_hdr_hashing_are_sticky() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let p = Sluice::start(&backend_with("uri", &[(&a, ""), (&b, ""), (&c, "")]));
    for path in ["/x", "/y", "/z/1", "/w?q=1"] {
        let first = spread(&p, 1, |_| path.to_string());
        let again = spread(&p, 5, |_| path.to_string());
        assert!(
            again.iter().all(|n| *n == first[0]),
            "{path}: {first:?} then {again:?}"
        );
    }
    let many = counts(&spread(&p, 60, |i| format!("/p{i}")));
    assert!(many.len() >= 2, "different URIs spread: {many:?}");

    let p = Sluice::start(&backend_with(
        "hdr(X-User)",
        &[(&a, ""), (&b, ""), (&c, "")],
    ));
    let by_user = |user: &str| {
        let mut c = p.connect();
        c.send(format!("GET / HTTP/1.1\r\nHost: t\r\nX-User: {user}\r\n\r\n").as_bytes());
        c.response().text().split(' ').next().unwrap().to_string()
    };
    for user in ["alice", "bob", "carol"] {
        let first = by_user(user);
        for _ in 0..4 {
            assert_eq!(by_user(user), first, "{user}");
        }
    }
    // Without the header: round robin over all three.
    let got = counts(&spread(&p, 6, |_| "/".into()));
    assert_eq!(got.len(), 3, "{got:?}");
}

#[test]
fn source_hashing_keeps_a_client_on_one_server() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let p = Sluice::start(&backend_with("source", &[(&a, ""), (&b, ""), (&c, "")]));
    let got = counts(&spread(&p, 10, |i| format!("/{i}")));
    assert_eq!(got.len(), 1, "one client address, one server: {got:?}");
}

#[test]
fn acl_routing_with_use_backend() {
    let (api, img, admin, def) = (
        Origin::start("api"),
        Origin::start("img"),
        Origin::start("admin"),
        Origin::start("def"),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend fe\n    {{fe}}\n    acl is_api path_beg /api/\n    acl is_img path_end .png .jpg\n    acl is_post method POST\n    acl admin_hdr hdr(X-Role) -i admin\n    use_backend api if is_api !is_post\n    use_backend img if is_img or {{ path /logo }}\n    use_backend admin if admin_hdr\n    default_backend def\n\
backend api\n    server s {}\nbackend img\n    server s {}\nbackend admin\n    server s {}\nbackend def\n    server s {}\n",
        api.addr, img.addr, admin.addr, def.addr
    ));
    let route = |req: &str| {
        let mut c = p.connect();
        c.send(req.as_bytes());
        c.response().text().split(' ').next().unwrap().to_string()
    };
    assert_eq!(route("GET /api/x HTTP/1.1\r\nHost: t\r\n\r\n"), "api");
    assert_eq!(
        route("POST /api/x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"),
        "def"
    );
    assert_eq!(route("GET /a/b.png HTTP/1.1\r\nHost: t\r\n\r\n"), "img");
    assert_eq!(route("GET /logo HTTP/1.1\r\nHost: t\r\n\r\n"), "img");
    assert_eq!(
        route("GET /x HTTP/1.1\r\nHost: t\r\nX-Role: ADMIN\r\n\r\n"),
        "admin"
    );
    assert_eq!(route("GET /x HTTP/1.1\r\nHost: t\r\n\r\n"), "def");
    // Routing applies to each request of a keep-alive connection, pipelined ones included.
    let mut c = p.connect();
    c.send(b"GET /api/1 HTTP/1.1\r\nHost: t\r\n\r\nGET /x.jpg HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(c.response().text().starts_with("api"));
    assert!(c.response().text().starts_with("img"));
}

#[test]
fn listen_section_is_frontend_and_backend() {
    let o = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nlisten web\n    {{fe}}\n    http-request set-header X-Once 1\n    option forwardfor\n    server s1 {}\n",
        o.addr
    ));
    assert_eq!(get(p.addr(), "/l").text(), "o /l");
    let r = &o.requests()[0];
    assert_eq!(r.header_count("x-once"), 1, "listen rules apply once");
    assert_eq!(r.header_count("x-forwarded-for"), 1);
}

#[test]
fn retries_and_redispatch_on_connection_failures() {
    let good = Origin::start("good");
    let (_dead_port, dead) = refused_addr();
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let cfg = |opts: &str| {
        format!(
            "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n{opts}\n    server dead {dead}\n    server good {}\n",
            sock.display(),
            good.addr
        )
    };
    // With redispatch, requests meant for the dead server end up on the good one.
    let p = Sluice::start(&cfg("    retries 2\n    option redispatch"));
    for _ in 0..6 {
        assert_eq!(get(p.addr(), "/").status, 200);
    }
    assert_eq!(good.count(), 6);
    let csv = Sluice::cli(&sock, "show stat");
    let col = |name: &str| stat_field(&csv, "be", "dead", name);
    // Each request first sent to the dead server was retried twice, the second time elsewhere
    // (the redispatch re-runs the balancer, so how many started there depends on the cursor).
    let retried: u64 = col("wretr").parse().unwrap();
    let redispatched: u64 = col("wredis").parse().unwrap();
    assert!(redispatched >= 3, "{csv}");
    assert_eq!(retried, 2 * redispatched, "{csv}");
    drop(p);
    // Without it, the retries stay on the dead server and end in 503.
    let p = Sluice::start(&cfg("    retries 1"));
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = (0..4).map(|_| get(p.addr(), "/").status).collect();
    assert_eq!(
        statuses.iter().filter(|&&s| s == 503).count(),
        2,
        "{statuses:?}"
    );
    // Each retry on the same server waited HAProxy's turn-around, min(1s, timeout connect).
    assert!(started.elapsed() >= Duration::from_millis(1900));
}

/// An origin that holds `/hold*` requests until released and records arrival order.
fn gated() -> (Origin, Arc<std::sync::atomic::AtomicBool>) {
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = release.clone();
    let o = Origin::with_handler(
        "gated",
        Arc::new(move |r: &Received| {
            if r.target.starts_with("/hold") {
                while !gate.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            ok_response(&format!("gated {}", r.target)).into()
        }),
    );
    (o, release)
}

fn qcur(sock: &std::path::Path) -> u64 {
    stat_field(&Sluice::cli(sock, "show stat"), "be", "s", "qcur")
        .parse()
        .unwrap()
}

#[test]
fn server_maxconn_queues_in_arrival_order() {
    let (origin, release) = gated();
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {}\n{DEFAULTS}\n    timeout queue 20s\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {} maxconn 1\n",
        sock.display(),
        origin.addr
    ));
    let addr = p.addr();
    let mut clients = Vec::new();
    for i in 0..4 {
        clients.push(std::thread::spawn(move || {
            get(addr, &format!("/hold{i}")).text()
        }));
        // Each request is in (in flight or queued) before the next one is sent.
        let deadline = std::time::Instant::now() + TIMEOUT;
        while origin.count() + qcur(&sock) as usize != i + 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "request {i} not queued"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(
        origin.count(),
        1,
        "maxconn 1: one at the server, three queued"
    );
    assert_eq!(qcur(&sock), 3);
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    for (i, c) in clients.into_iter().enumerate() {
        assert_eq!(c.join().unwrap(), format!("gated /hold{i}"));
    }
    let order: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        order,
        vec!["/hold0", "/hold1", "/hold2", "/hold3"],
        "served in arrival order"
    );
}

#[test]
fn queue_timeout_and_maxqueue_give_503() {
    let (origin, release) = gated();
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}\n    timeout queue 2s\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {} maxconn 1 maxqueue 1\n",
        sock.display(),
        origin.addr
    ));
    let addr = p.addr();
    let holder = std::thread::spawn(move || get(addr, "/hold").status);
    let deadline = std::time::Instant::now() + TIMEOUT;
    while origin.count() == 0 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let queued = std::thread::spawn(move || get(addr, "/q").status);
    while qcur(&sock) != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "second request never queued"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The queue is full: refused at once, while the queued request is still waiting.
    assert_eq!(get(addr, "/full").status, 503, "queue full");
    assert!(
        !queued.is_finished(),
        "the queued request was still waiting when /full was refused"
    );
    assert_eq!(queued.join().unwrap(), 503, "queue timeout");
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(holder.join().unwrap(), 200);
    assert_eq!(get(addr, "/after").status, 200);
}

#[test]
fn abortonclose_drops_queued_requests_of_departed_clients() {
    for abort in [true, false] {
        let (origin, release) = gated();
        let dir = TempDir::new();
        let sock = dir.0.join("cli.sock");
        let p = Sluice::start(&format!(
            "global\n    stats socket {}\n{DEFAULTS}\n    timeout queue 20s\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n{}\n    server s {} maxconn 1\n",
            sock.display(),
            if abort { "    option abortonclose" } else { "" },
            origin.addr
        ));
        let addr = p.addr();
        let holder = std::thread::spawn(move || get(addr, "/hold").status);
        let deadline = std::time::Instant::now() + TIMEOUT;
        while origin.count() == 0 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        // A second client queues, then gives up.
        let mut quitter = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(
            &mut quitter,
            b"GET /hold-quitter HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .unwrap();
        while qcur(&sock) != 1 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(quitter);
        if abort {
            while qcur(&sock) != 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the departed client's request left the queue"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        release.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(holder.join().unwrap(), 200);
        // A later request is served after whatever was queued.
        assert_eq!(get(addr, "/after").status, 200);
        let sent_quitter = origin
            .requests()
            .iter()
            .any(|r| r.target == "/hold-quitter");
        assert_eq!(
            sent_quitter, !abort,
            "abortonclose={abort}: the abandoned request reached the server: {sent_quitter}"
        );
    }
}

#[test]
fn url_param_check_post_finds_the_parameter_in_a_form_body() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance url_param user check_post\n    server a {}\n    server b {}\n",
        a.addr, b.addr
    ));
    let post = |user: &str| {
        let body = format!("user={user}&x=1");
        let mut c = p.connect();
        c.send(
            format!(
                "POST /login HTTP/1.1\r\nHost: h\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        c.response().text()[..1].to_string()
    };
    // A user's requests land on one server, whether the parameter is in the query or the
    // form body; some users land on each server.
    let mut seen = std::collections::HashSet::new();
    for user in [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    ] {
        let server = post(user);
        assert_eq!(post(user), server);
        assert_eq!(
            get(p.addr(), &format!("/login?user={user}")).text()[..1],
            server
        );
        seen.insert(server);
    }
    assert_eq!(seen.len(), 2, "eight users spread over both servers");
}

#[test]
fn rdp_cookie_keeps_a_terminal_session_on_one_server() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let p = Sluice::start(&format!(
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nfrontend fe\n    {{fe}}\n    tcp-request inspect-delay 5s\n    default_backend be\nbackend be\n    balance rdp-cookie\n    server a {}\n    server b {}\n",
        a.addr, b.addr
    ));
    // An RDP connection request carries `Cookie: mstshash=USER`; the origins here answer
    // HTTP, so the cookie travels in front of a request line they read as a header.
    let ask = |user: &str| {
        let mut c = p.connect();
        c.send(format!("GET / HTTP/1.1\r\nCookie: mstshash={user}\r\nHost: h\r\n\r\n").as_bytes());
        c.response().text()[..1].to_string()
    };
    let mut seen = std::collections::HashSet::new();
    for user in ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"] {
        let server = ask(user);
        for _ in 0..3 {
            assert_eq!(ask(user), server, "{user}");
        }
        seen.insert(server);
    }
    assert_eq!(seen.len(), 2);
}

#[test]
fn the_balance_factor_moves_a_busy_key_to_the_next_server() {
    let slow = |name: &str| {
        let n = name.to_string();
        Origin::with_handler(
            name,
            Arc::new(move |r: &Received| {
                Reply::Delayed(
                    Duration::from_millis(800),
                    ok_response(&format!("{n} {}", r.target)),
                )
            }),
        )
    };
    let (a, b) = (slow("a"), slow("b"));
    for (factor, spread) in [("", false), ("    hash-balance-factor 100\n", true)] {
        let p = Sluice::start(&format!(
            "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance uri\n    hash-type consistent\n{factor}    server a {}\n    server b {}\n",
            a.addr, b.addr
        ));
        let before = a.count() + b.count();
        let addr = p.addr();
        let first = std::thread::spawn(move || get(addr, "/same").text());
        wait_until("the first request to be in flight", || {
            a.count() + b.count() > before
        });
        let second = get(addr, "/same").text();
        let first = first.join().unwrap();
        assert_eq!(
            first[..1] != second[..1],
            spread,
            "{factor}: {first} / {second}"
        );
    }
}

#[test]
fn dispatch_serves_a_backend_without_servers() {
    let o = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    dispatch {}\n",
        o.addr
    ));
    assert_eq!(get(p.addr(), "/d").text(), "o /d");
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    dispatch nowhere\n"
    ));
    assert!(!ok && out.contains("dispatch"), "{out}");
}

/// `http-send-name-header`: each request names the server it went to in that field (one
/// field, the client's own removed), also when a redispatch moved it off a dead server.
#[test]
fn http_send_name_header_names_the_server_a_request_reached() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let (_dead_port, dead) = refused_addr();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    retries 1\n    option redispatch\n    http-send-name-header X-Served-By\n    server dead {dead}\n    server a {}\n    server b {}\n",
        a.addr, b.addr
    ));
    for _ in 0..6 {
        let mut c = p.connect();
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\nX-Served-By: spoofed\r\n\r\n");
        assert_eq!(c.response_for(false).unwrap().status, 200);
    }
    assert_eq!(a.count() + b.count(), 6);
    for (origin, name) in [(&a, "a"), (&b, "b")] {
        for r in origin.requests() {
            assert_eq!(r.header_count("x-served-by"), 1, "{:?}", r.headers);
            assert_eq!(r.header("x-served-by"), Some(name));
        }
    }
    // Requests the balancer meant for the dead server were redispatched, and say so.
    assert!(a.count() >= 1 && b.count() >= 1);
}

/// `retry-on`: a request without a body answered with a listed status (or not answered:
/// `empty-response`) is sent again, `retries N` times at most; with `option redispatch` a
/// retry goes to another server at once when
/// the balancing is no hash (HAProxy's choice), else it stays. The client gets the retried
/// answer. `retry-on none` retries nothing, not even a failed connection (the default,
/// `conn-failure`, retries those only). The counts are HAProxy 2.6.12's on the same
/// configurations: `first` 1 request and 1 session (`stot`), `wretr` 1, `wredis` 1, `good`
/// 1; without redispatch, `retries 3`: 4 requests and sessions, `wretr` 6 (HAProxy counts
/// a retry that stays on its server twice).
#[test]
fn retry_on_sends_a_failed_request_again() {
    let busy = Origin::with_handler(
        "busy",
        Arc::new(|_: &Received| {
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"
                .to_vec()
                .into()
        }),
    );
    let good = Origin::start("good");
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let cfg = |opts: &str, first: std::net::SocketAddr| {
        format!(
            "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}\n    timeout connect 200ms\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance first\n{opts}\n    server first {first}\n    server good {}\n",
            sock.display(),
            good.addr
        )
    };
    let p = Sluice::start(&cfg(
        "    retries 2\n    option redispatch\n    retry-on 503",
        busy.addr,
    ));
    let r = get(p.addr(), "/again");
    assert_eq!((r.status, r.text()), (200, "good /again".to_string()));
    assert_eq!(busy.count(), 1, "the retry went elsewhere at once");
    assert_eq!(good.count(), 1);
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "first", "wretr"), "1", "{csv}");
    assert_eq!(stat_field(&csv, "be", "first", "wredis"), "1", "{csv}");
    assert_eq!(stat_field(&csv, "be", "first", "stot"), "1", "{csv}");
    drop(p);
    // Without redispatch the retries stay on the server: `retries 3`, three more tries.
    let p = Sluice::start(&cfg("    retries 3\n    retry-on 503", busy.addr));
    assert_eq!(get(p.addr(), "/stay").status, 503);
    assert_eq!(busy.count(), 5, "four tries on the busy server");
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "first", "wretr"), "6", "{csv}");
    assert_eq!(stat_field(&csv, "be", "first", "stot"), "4", "{csv}");
    // A POST has a body: it is not sent again, and its 503 reaches the client.
    let mut c = p.connect();
    c.send(b"POST /form HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.response().status, 503);
    drop(p);
    // Without 503 in the list, the busy answer is the client's.
    let p = Sluice::start(&cfg(
        "    retries 2\n    option redispatch\n    retry-on empty-response",
        busy.addr,
    ));
    assert_eq!(get(p.addr(), "/once").status, 503);
    drop(p);
    // An answer that never comes (the server closes): `empty-response` sends it again.
    let closing = Origin::with_handler("closing", Arc::new(|_: &Received| Reply::Close));
    let p = Sluice::start(&cfg(
        "    retries 1\n    option redispatch\n    retry-on empty-response",
        closing.addr,
    ));
    assert_eq!(get(p.addr(), "/e").text(), "good /e");
    drop(p);
    // A server that refuses connections: retried by default, not with `retry-on none`.
    let (_dead_port, dead) = refused_addr();
    for (opts, retries) in [
        ("    retries 2", "2"),
        ("    retries 2\n    retry-on none", "0"),
    ] {
        let p = Sluice::start(&cfg(opts, dead));
        assert_eq!(get(p.addr(), "/d").status, 503);
        let csv = Sluice::cli(&sock, "show stat");
        assert_eq!(
            stat_field(&csv, "be", "first", "wretr"),
            retries,
            "{opts}: {csv}"
        );
        drop(p);
    }
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    default_backend be\nbackend be\n    retry-on 418\n    server s 127.0.0.1:1\n"
    ));
    assert!(!ok && err.contains("'418'"), "{err}");
}

/// `option prefer-last-server`: a client connection's requests stay on the server of its
/// last one while it is usable (round robin would alternate); the balancing goes on for
/// the other clients, and the preference ends when the server goes into maintenance.
#[test]
fn prefer_last_server_keeps_a_connection_on_its_server() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let cfg = |opts: &str| {
        format!(
            "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n{opts}\n    server a {}\n    server b {}\n",
            sock.display(),
            a.addr,
            b.addr
        )
    };
    let names = |p: &Sluice, n: usize| -> Vec<String> {
        let mut c = p.connect();
        (0..n)
            .map(|i| {
                c.get(&format!("/{i}"))
                    .text()
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let p = Sluice::start(&cfg(""));
    let seen = names(&p, 4);
    assert_ne!(seen[0], seen[1], "round robin alternates: {seen:?}");
    drop(p);
    let p = Sluice::start(&cfg("    option prefer-last-server"));
    let seen = names(&p, 4);
    assert!(seen.iter().all(|n| *n == seen[0]), "{seen:?}");
    // Its server in maintenance: the next request goes to the other one.
    let mut c = p.connect();
    let first = c.get("/x").text().split(' ').next().unwrap().to_string();
    Sluice::cli(&sock, &format!("disable server be/{first}"));
    let next = c.get("/y").text().split(' ').next().unwrap().to_string();
    assert_ne!(first, next);
}

/// A 401 asking for NTLM (or Negotiate) authentication binds the exchange to its server
/// connection, as HAProxy does: the client connection's next request goes to that server
/// on that very connection, which no other client gets (`http-reuse always` would share
/// an idle connection otherwise).
#[test]
fn an_ntlm_challenge_keeps_the_server_connection_for_its_client() {
    let handler = |name: &'static str| -> Handler {
        Arc::new(move |r: &Received| {
            if r.header("authorization")
                .is_some_and(|v| v.starts_with("NTLM"))
            {
                ok_response(&format!("{name} conn {}", r.conn)).into()
            } else {
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: NTLM\r\nContent-Length: {}\r\n\r\n{name} conn {}",
                    format!("{name} conn {}", r.conn).len(),
                    r.conn
                )
                .into_bytes()
                .into()
            }
        })
    };
    let a = Origin::with_handler("a", handler("a"));
    let b = Origin::with_handler("b", handler("b"));
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    http-reuse always\n    server a {}\n    server b {}\n",
        a.addr, b.addr
    ));
    let mut alice = p.connect();
    let challenge = alice.get("/login");
    assert_eq!(challenge.status, 401);
    let bound = challenge.text();
    // Another client meanwhile: never on Alice's server connection.
    for i in 0..4 {
        let other = get(p.addr(), &format!("/other{i}")).text();
        assert_ne!(other, bound, "another client got the bound connection");
    }
    alice.send(b"GET /login HTTP/1.1\r\nHost: t\r\nAuthorization: NTLM TlRMTVNTUAAB\r\n\r\n");
    let answer = alice.response();
    assert_eq!((answer.status, answer.text()), (200, bound.clone()));
    alice.send(b"GET /next HTTP/1.1\r\nHost: t\r\nAuthorization: NTLM TlRMTVNTUAAD\r\n\r\n");
    assert_eq!(
        alice.response().text(),
        bound,
        "the connection stays Alice's"
    );
}

/// `max-keep-alive-queue`: with `option prefer-last-server`, a request stays on its
/// connection's last server even when that server is full (it waits in its queue, where
/// `balance first` alone would take the next server), unless the queue would pass the
/// limit (`0`: only while the server has room), as HAProxy's rule says.
#[test]
fn max_keep_alive_queue_bounds_the_preference_for_the_last_server() {
    for (limit, expected) in [("", "gated /y"), ("    max-keep-alive-queue 0\n", "b /y")] {
        let (a, release) = gated();
        let b = Origin::start("b");
        let dir = TempDir::new();
        let sock = dir.0.join("cli.sock");
        let p = Sluice::start(&format!(
            "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}\n    timeout queue 20s\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance first\n    option prefer-last-server\n{limit}    server a {} maxconn 1\n    server b {} maxconn 1\n",
            sock.display(),
            a.addr,
            b.addr
        ));
        let mut alice = p.connect();
        assert_eq!(alice.get("/x").text(), "gated /x");
        // Another client takes the first server's only slot.
        let addr = p.addr();
        let held = std::thread::spawn(move || get(addr, "/hold").text());
        wait_until("the first server busy", || {
            a.requests().iter().any(|r| r.target == "/hold")
        });
        let asked = std::thread::spawn(move || alice.get("/y").text());
        if limit.is_empty() {
            // Queued behind the held request on its last server.
            wait_until("Alice queued", || {
                stat_field(&Sluice::cli(&sock, "show stat"), "be", "a", "qcur") == "1"
            });
        } else {
            // Sent to the next server while the first is full (released before, the first
            // would have room again and take it back).
            wait_until("Alice sent to b", || {
                b.requests().iter().any(|r| r.target == "/y")
            });
        }
        release.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(asked.join().unwrap(), expected, "limit {limit:?}");
        assert_eq!(held.join().unwrap(), "gated /hold");
    }
}

/// `persist rdp-cookie`: a TCP connection whose RDP cookie (`msts=IP.PORT.0000`, HAProxy's
/// encoding: the address and the port as their network-order bytes read as little-endian
/// numbers) names a server that is up goes to it, whatever the balancing says; one naming
/// no server is balanced.
#[test]
fn persist_rdp_cookie_sends_a_connection_to_the_server_it_names() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let p = Sluice::start(&format!(
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten rdp\n    {{fe}}\n    tcp-request inspect-delay 5s\n    persist rdp-cookie\n    balance roundrobin\n    server a {}\n    server b {}\n",
        a.addr, b.addr
    ));
    let msts = |addr: std::net::SocketAddr| {
        let std::net::IpAddr::V4(ip) = addr.ip() else {
            unreachable!()
        };
        format!(
            "{}.{}.0000",
            u32::from_le_bytes(ip.octets()),
            addr.port().swap_bytes()
        )
    };
    let ask = |cookie: &str| {
        let mut c = p.connect();
        c.send(format!("GET / HTTP/1.1\r\nCookie: msts={cookie}\r\nHost: h\r\n\r\n").as_bytes());
        c.response().text()[..1].to_string()
    };
    for _ in 0..4 {
        assert_eq!(ask(&msts(b.addr)), "b");
    }
    for _ in 0..4 {
        assert_eq!(ask(&msts(a.addr)), "a");
    }
    let unknown: Vec<String> = (0..4).map(|_| ask("16777343.1.0000")).collect();
    assert!(
        unknown.contains(&"a".into()) && unknown.contains(&"b".into()),
        "{unknown:?}"
    );
}

/// `add server` and `del server` as HAProxy 2.6 does them (its answers word for word): a
/// server added at run time starts in maintenance, takes traffic once enabled, shows in
/// the statistics and `show servers state`, and is deleted once in maintenance, its name
/// free again; requests keep flowing throughout with none failed.
#[test]
fn servers_are_added_and_deleted_at_run_time() {
    let (a, b) = (Origin::start("A"), Origin::start("B"));
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend test\n\
         backend test\n    balance roundrobin\n    server s0 {}\n\
         backend other\n    balance static-rr\n\
         backend bytes\n    mode tcp\n    balance random\n",
        sock.display(),
        a.addr
    ));
    let cli = |cmd: &str| Sluice::cli(&sock, cmd).trim_end().to_string();
    let add = |rest: &str| cli(&format!("add server {rest}"));
    assert_eq!(add(&format!("foo/s1 {}", b.addr)), "No such backend.");
    assert_eq!(
        add("test/s1"),
        "'server' expects <name> and <addr>[:<port>] as arguments."
    );
    assert_eq!(
        add(&format!("other/s1 {}", b.addr)),
        "Backend must use a dynamic load balancing to support dynamic servers."
    );
    assert_eq!(
        add(&format!("bytes/s1 {} proto h2", b.addr)),
        "MUX protocol is not usable for server."
    );
    assert_eq!(
        add(&format!("test/s1 {} cookie c1", b.addr)),
        "'cookie' option is not accepted for dynamic server"
    );
    // Requests flow all along, on two connections kept alive and new ones.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = p.addr();
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut answered, mut failed) = (0, Vec::new());
            let mut c = Conn::new(addr);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && answered < 20_000 {
                let r = c.get("/flow");
                if r.status == 200 {
                    answered += 1;
                } else {
                    failed.push(r.status);
                }
            }
            (answered, failed)
        })
    };
    assert_eq!(
        add(&format!("test/s1 {}", b.addr)),
        "New server registered."
    );
    assert_eq!(
        add(&format!("test/s1 {}", b.addr)),
        "Already exists a server with the same name in backend."
    );
    let state = cli("show servers state test");
    let row = state
        .lines()
        .find(|l| l.contains(" s1 "))
        .expect("s1 listed");
    // As HAProxy 2.6.12 shows it: backend id 3 (proxies are numbered from 2: fe, then
    // test), srv_id 2, stopped (0) and in maintenance (1), its check initialising (1) at
    // health 0.
    assert!(row.starts_with("3 test 2 s1 "), "{row}");
    let fields: Vec<&str> = row.split(' ').collect();
    assert_eq!(
        (fields[5], fields[6], fields[10], fields[12]),
        ("0", "1", "1", "0"),
        "{row}"
    );
    // In maintenance: nothing reaches it.
    for _ in 0..4 {
        assert_eq!(get(p.addr(), "/m").text().split(' ').next(), Some("A"));
    }
    assert_eq!(cli("enable server test/s1"), "");
    let served: Vec<String> = (0..6)
        .map(|_| {
            get(p.addr(), "/rr")
                .text()
                .split(' ')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert!(served.iter().any(|s| s == "B"), "{served:?}");
    assert!(served.iter().any(|s| s == "A"), "{served:?}");
    assert!(cli("show stat").contains("\ntest,s1,"));
    assert_eq!(
        cli("del server test/s1"),
        "Only servers in maintenance mode can be deleted."
    );
    assert_eq!(cli("disable server test/s1"), "");
    // Its requests in flight finish; it is deleted once nothing is left on it.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        match cli("del server test/s1").as_str() {
            "Server deleted." => break,
            "Server still has connections attached to it, cannot remove it." => {
                assert!(std::time::Instant::now() < deadline, "never deleted");
                std::thread::sleep(Duration::from_millis(20));
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(cli("del server test/s1"), "No such server.");
    assert!(!cli("show servers state test").contains(" s1 "));
    assert!(!cli("show stat").contains("\ntest,s1,"));
    let before = b.count();
    for _ in 0..4 {
        assert_eq!(get(p.addr(), "/gone").text().split(' ').next(), Some("A"));
    }
    assert_eq!(b.count(), before, "a deleted server got a request");
    // Its name is free again; the new server takes the first free id.
    assert_eq!(
        add(&format!("test/s1 {}", b.addr)),
        "New server registered."
    );
    assert!(cli("show servers state test").contains("\n3 test 2 s1 "));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (answered, failed) = load.join().unwrap();
    assert!(answered > 0);
    assert!(failed.is_empty(), "failed requests: {failed:?}");
}

/// A server added with `check` is checked once `enable health` asks for it (HAProxy adds
/// it with its check paused): one that does not answer goes down and gets no traffic. One
/// added with `track` follows the server it tracks.
#[test]
fn an_added_server_is_checked_once_its_health_check_is_enabled() {
    let a = Origin::start("A");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend test\n\
         backend test\n    server s0 {}\n    server sc {closed} check inter 100 fall 1 rise 1\n",
        sock.display(),
        a.addr
    ));
    let cli = |cmd: &str| Sluice::cli(&sock, cmd).trim_end().to_string();
    let status = || stat_field(&cli("show stat"), "test", "s1", "status");
    // `track` names a server of the configuration with a check, as HAProxy wants.
    for (target, answer) in [
        (
            "nope",
            "unable to find required server 'nope' for tracking.",
        ),
        (
            "other/s0",
            "unable to find required proxy 'other' for tracking.",
        ),
        (
            "s0",
            "unable to use test/s0 for tracking as it does not have any check nor agent enabled.",
        ),
    ] {
        assert_eq!(
            cli(&format!("add server test/t {} track {target}", a.addr)),
            answer
        );
    }
    assert_eq!(
        cli(&format!(
            "add server test/s1 {closed} check inter 100 fall 1"
        )),
        "New server registered."
    );
    assert_eq!(cli("enable server test/s1"), "");
    // Paused: the server counts as up without a check.
    assert_eq!(status(), "no check");
    assert_eq!(cli("enable health test/s1"), "");
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !status().starts_with("DOWN") {
        assert!(std::time::Instant::now() < deadline, "{}", status());
        std::thread::sleep(Duration::from_millis(20));
    }
    let check = stat_field(&cli("show stat"), "test", "s1", "check_status");
    assert_eq!(check, "L4CON");
    for _ in 0..4 {
        assert_eq!(get(p.addr(), "/").status, 200);
    }
    // A tracker follows sc, down for good.
    assert_eq!(
        cli(&format!("add server test/t {} track sc", a.addr)),
        "New server registered."
    );
    assert_eq!(cli("enable server test/t"), "");
    let tracked = || stat_field(&cli("show stat"), "test", "t", "status");
    while !tracked().starts_with("DOWN") {
        assert!(std::time::Instant::now() < deadline, "{}", tracked());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        cli("del server test/sc"),
        "This server cannot be removed at runtime due to other configuration elements pointing to it."
    );
    // Deleted, its check ends with it.
    assert_eq!(cli("disable server test/s1"), "");
    assert_eq!(cli("del server test/s1"), "Server deleted.");
}
