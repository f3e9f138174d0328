//! Idle connection pools through the real binary: the pool-low-conn takeover gate, the
//! descriptor-shortage override, pool-max-conn, purging, servers closing idle connections,
//! Keep-Alive deadlines. Clients are pinned to workers with `bind ... thread N`.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// Two frontends pinned to workers 1 and 2, one backend; returns the proxy, the CLI path and
/// the temp dir holding it.
fn two_workers(origin: &Origin, server_opts: &str, global: &str) -> (Sluice, PathBuf, TempDir) {
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{global}\n{DEFAULTS}\nfrontend w1\n    {{fe}} thread 1\n    default_backend be\nfrontend w2\n    {{fe}} thread 2\n    default_backend be\nbackend be\n    http-reuse always\n    server s1 {} {server_opts}\n",
        sock.display(),
        origin.addr
    ));
    (p, sock, dir)
}

/// A value from `show activity` (the total).
fn activity(sock: &Path, name: &str) -> u64 {
    let out = Sluice::cli(sock, "show activity");
    out.lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {out}"))
}

/// `idle_cur` of the server from `show servers conn`.
fn idle_cur(sock: &Path) -> usize {
    let out = Sluice::cli(sock, "show servers conn");
    let line = out
        .lines()
        .find(|l| l.starts_with("be/s1 "))
        .unwrap_or_else(|| panic!("{out}"));
    line.split_whitespace().nth(13).unwrap().parse().unwrap()
}

/// An origin that holds each `/fill*` request until `n` of them have arrived, so that they are
/// in flight together on `n` distinct server connections however loaded the machine is; other
/// requests are answered at once.
fn fill_origin(n: usize) -> Origin {
    let arrived = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Origin::with_handler(
        "slow",
        Arc::new(move |r: &Received| {
            if r.target.starts_with("/fill") {
                arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let deadline = Instant::now() + TIMEOUT;
                while arrived.load(std::sync::atomic::Ordering::SeqCst) < n
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            ok_response(&format!("slow {}", r.target)).into()
        }),
    )
}

/// Makes worker 1 hold `n` idle connections: `n` requests in flight at once on frontend w1.
fn fill_worker1(p: &Sluice, n: usize) {
    let addr = p.addrs[0];
    let clients: Vec<_> = (0..n)
        .map(|i| std::thread::spawn(move || get(addr, &format!("/fill{i}")).status))
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
}

#[test]
fn takeover_allowed_at_the_threshold() {
    let origin = fill_origin(2);
    let (p, sock, _d) = two_workers(&origin, "pool-low-conn 2", "");
    fill_worker1(&p, 2);
    wait_until("two idle connections", || idle_cur(&sock) == 2);
    assert_eq!(origin.conns(), 2);
    // Worker 2 has none of its own; the server holds 2 >= pool-low-conn: it takes one over.
    let r = get(p.addrs[1], "/stolen");
    assert_eq!(
        r.text(),
        "slow /stolen",
        "the taken-over connection serves correctly"
    );
    assert_eq!(origin.conns(), 2, "no new server connection");
    assert_eq!(activity(&sock, "fd_takeover"), 1);
    // The connection now belongs to worker 2 and serves it again without a takeover.
    assert_eq!(get(p.addrs[1], "/again").text(), "slow /again");
    assert_eq!(activity(&sock, "fd_takeover"), 1);
    assert_eq!(origin.conns(), 2);
    assert_eq!(origin.overlaps.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn takeover_refused_below_the_threshold() {
    let origin = fill_origin(2);
    let (p, sock, _d) = two_workers(&origin, "pool-low-conn 3", "");
    fill_worker1(&p, 2);
    wait_until("two idle connections", || idle_cur(&sock) == 2);
    assert_eq!(get(p.addrs[1], "/own").text(), "slow /own");
    assert_eq!(
        origin.conns(),
        3,
        "2 idle < pool-low-conn 3: a new connection instead"
    );
    assert_eq!(activity(&sock, "fd_takeover"), 0);
}

#[test]
fn takeover_refused_when_the_pool_is_not_shared() {
    let origin = fill_origin(2);
    let (p, sock, _d) = two_workers(&origin, "", "    tune.idle-pool.shared off");
    fill_worker1(&p, 2);
    wait_until("two idle connections", || idle_cur(&sock) == 2);
    get(p.addrs[1], "/own");
    assert_eq!(origin.conns(), 3);
    assert_eq!(activity(&sock, "fd_takeover"), 0);
}

#[test]
fn descriptor_shortage_overrides_the_threshold() {
    let origin = fill_origin(2);
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    // Limit 200 descriptors, low ratio 20 % = 40; a few dozen open client connections cross it.
    let p = Sluice::start_limited(
        &format!(
            "global\n    nbthread 2\n    maxconn 60\n    stats socket {} level admin\n    tune.pool-low-fd-ratio 20\n    tune.pool-high-fd-ratio 95\n{DEFAULTS}\nfrontend w1\n    {{fe}} thread 1\n    default_backend be\nfrontend w2\n    {{fe}} thread 2\n    default_backend be\nbackend be\n    http-reuse always\n    server s1 {} pool-low-conn 100\n",
            sock.display(),
            origin.addr
        ),
        Some(200),
    );
    fill_worker1(&p, 2);
    wait_until("two idle connections", || idle_cur(&sock) == 2);
    // With 2 idle and pool-low-conn 100, worker 2 could not steal (see
    // takeover_refused_below_the_threshold). Hold idle client connections on worker 1 until
    // descriptors are short (over 20 % of 200).
    let held: Vec<Conn> = (0..20).map(|_| Conn::new(p.addrs[0])).collect();
    wait_until("the connections to be accepted", || {
        activity(&sock, "accepted") >= 22
    });
    assert_eq!(get(p.addrs[1], "/b").text(), "slow /b");
    assert_eq!(
        activity(&sock, "fd_takeover"),
        1,
        "short of descriptors: stealing allowed"
    );
    assert_eq!(origin.conns(), 2);
    drop(held);
}

#[test]
fn pool_max_conn_zero_keeps_nothing() {
    let origin = Origin::start("o");
    let (p, sock, _d) = two_workers(&origin, "pool-max-conn 0", "");
    let mut c = p.connect();
    for i in 0..3 {
        assert_eq!(c.get(&format!("/{i}")).status, 200);
    }
    assert_eq!(origin.conns(), 3);
    assert_eq!(idle_cur(&sock), 0);
}

#[test]
fn pool_max_conn_is_never_exceeded() {
    let origin = fill_origin(5);
    let (p, sock, _d) = two_workers(&origin, "pool-max-conn 2 pool-low-conn 100", "");
    fill_worker1(&p, 5);
    assert_eq!(origin.conns(), 5);
    let csv = Sluice::cli(&sock, "show stat");
    assert!(idle_cur(&sock) <= 2, "{csv}");
    assert!(csv.contains(",2,"), "src_ilim shows the limit: {csv}");
}

#[test]
fn purge_shrinks_the_pool_towards_the_need() {
    let origin = fill_origin(6);
    let (p, sock, _d) = two_workers(&origin, "pool-purge-delay 300ms pool-low-conn 100", "");
    fill_worker1(&p, 6);
    // A connection returns to the pool just after its response reached the client. (On a
    // loaded machine a purge period may pass before the test looks: count those purged too.)
    wait_until("six connections pooled", || {
        idle_cur(&sock) as u64 + activity(&sock, "idle_purged") >= 6
    });
    // Nothing uses them any more: the need estimate decays and half the surplus goes per period.
    wait_until("the pool to shrink", || idle_cur(&sock) <= 2);
    assert!(activity(&sock, "idle_purged") >= 4);
}

#[test]
fn a_server_closing_an_idle_connection_is_never_reused() {
    let origin = Origin::with_handler(
        "closer",
        Arc::new(|r: &Received| {
            Reply::RawThenClose(ok_response(&format!("{} {}", r.method, r.target)))
        }),
    );
    let (p, sock, _d) = two_workers(&origin, "", "");
    let mut c = p.connect();
    assert_eq!(c.get("/first").text(), "GET /first");
    // Let the proxy notice the close (the purge pass checks every 250 ms), though even
    // without it the check before reuse would catch it.
    std::thread::sleep(Duration::from_millis(100));
    // A POST is never replayed: it must go to a live connection the first time.
    c.send(b"POST /second HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(c.response().text(), "POST /second");
    assert_eq!(origin.conns(), 2);
    wait_until("the pool to be empty", || idle_cur(&sock) <= 1);
}

#[test]
fn keep_alive_timeout_retires_connections_before_the_server_does() {
    let origin = Origin::with_handler(
        "ka",
        Arc::new(|_| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            )
        }),
    );
    let (p, _sock, _d) = two_workers(&origin, "", "");
    let mut c = p.connect();
    c.get("/1");
    std::thread::sleep(Duration::from_millis(50));
    c.get("/2");
    assert_eq!(
        origin.conns(),
        2,
        "a 1 s keep-alive leaves no safe margin: not reused"
    );
    let origin = Origin::with_handler(
        "ka",
        Arc::new(|_| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=30\r\nContent-Length: 2\r\n\r\nok"
                    .to_vec(),
            )
        }),
    );
    let (p, _sock, _d) = two_workers(&origin, "", "");
    let mut c = p.connect();
    c.get("/1");
    c.get("/2");
    assert_eq!(origin.conns(), 1);
}

#[test]
fn pool_keywords_are_checked() {
    let check = check_config;
    assert!(check("global\n    nbthread 2\n    tune.pool-low-fd-ratio 10\n    tune.pool-high-fd-ratio 30\n    tune.idle-pool.shared on\nfrontend f\n    bind :1 thread 2\n    default_backend b\nbackend b\n    default-server pool-purge-delay 10s pool-low-conn 4\n    server s 127.0.0.1:2 pool-max-conn -1\n").0);
    let (ok, err) = check("global\n    tune.pool-low-fd-ratio 200\n");
    assert!(!ok && err.contains("percentage"), "{err}");
    let (ok, err) = check("global\n    nbthread 2\nfrontend f\n    bind :1 thread 3\n");
    assert!(!ok && err.contains("above nbthread"), "{err}");
    let (ok, err) = check("backend b\n    server s 127.0.0.1:2 pool-max-conn x\n");
    assert!(
        !ok && err.contains("pool-max-conn") || err.contains("-1"),
        "{err}"
    );
}
