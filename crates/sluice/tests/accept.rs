//! Balanced accept through the real binary: one worker polls each listening socket, and
//! each new connection goes to the least loaded worker the bind allows.

mod common;

use std::path::Path;

use common::*;

/// `name=value` of every `show threads` line, by worker.
fn per_thread(sock: &Path, name: &str) -> Vec<u64> {
    let out = Sluice::cli(sock, "show threads");
    out.lines()
        .filter(|l| l.starts_with("Thread "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {out}"))
        })
        .collect()
}

/// The per-worker values of a `show activity` row (`name: total [ a b c ]`).
fn activity(sock: &Path, name: &str) -> Vec<u64> {
    let out = Sluice::cli(sock, "show activity");
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("{name} in {out}"));
    let inner = &line[line.find('[').unwrap() + 1..line.find(']').unwrap()];
    inner
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// Opens `n` connections one after the other, each answered once and kept open.
fn open_answered(p: &Sluice, n: usize) -> Vec<Conn> {
    (0..n)
        .map(|_| {
            let mut c = p.connect();
            assert_eq!(c.get("/").status, 200);
            c
        })
        .collect()
}

#[test]
fn one_worker_accepts_and_open_connections_spread_evenly() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 3\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    let held = open_answered(&p, 12);
    // Each connection went to a worker with the fewest: four each.
    assert_eq!(per_thread(&sock, "conns"), [4, 4, 4]);
    // One worker polled the socket and accepted them all, handing two thirds over.
    let accepted = activity(&sock, "accepted");
    assert_eq!(accepted.iter().sum::<u64>(), 12, "{accepted:?}");
    assert_eq!(
        accepted.iter().filter(|&&n| n > 0).count(),
        1,
        "{accepted:?}"
    );
    assert_eq!(activity(&sock, "adopted").iter().sum::<u64>(), 8);
    drop(held);
    wait_until("the connections to close", || {
        per_thread(&sock, "conns") == [0, 0, 0]
    });
}

#[test]
fn a_bind_restricted_to_some_workers_dispatches_among_them() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 3\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}} thread 2-3\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    let _held = open_answered(&p, 6);
    assert_eq!(per_thread(&sock, "conns"), [0, 3, 3]);
    assert_eq!(activity(&sock, "accepted")[0], 0);
}

#[test]
fn multi_queue_off_keeps_connections_and_fair_takes_turns() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let cfg = |mode: &str| {
        format!(
            "global\n    nbthread 3\n    tune.listener.multi-queue {mode}\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok\n",
            sock.display()
        )
    };
    let p = Sluice::start(&cfg("off"));
    let held = open_answered(&p, 6);
    let mut conns = per_thread(&sock, "conns");
    conns.sort_unstable();
    assert_eq!(conns, [0, 0, 6], "off: all stay on the accepting worker");
    drop((held, p));
    let p = Sluice::start(&cfg("fair"));
    let _held = open_answered(&p, 6);
    assert_eq!(per_thread(&sock, "conns"), [2, 2, 2]);
}

#[test]
fn a_listener_maxconn_holds_the_next_connection_until_one_closes() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} maxconn 2\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    let held = open_answered(&p, 2);
    // The kernel accepts the third connection, but the proxy does not serve it yet.
    let mut third = p.connect();
    third
        .reader
        .get_ref()
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    third.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(third.response_for(false).is_none(), "served over the limit");
    drop(held);
    third
        .reader
        .get_ref()
        .set_read_timeout(Some(TIMEOUT))
        .unwrap();
    // Once one closes, the waiting connection is served.
    assert_eq!(third.response().status, 200);
}

#[test]
fn backlog_sets_the_accept_queue_of_the_listening_socket() {
    // Addresses the proxy binds itself (an inherited socket keeps its own queue).
    let (a, b) = (free_port(), free_port());
    let _p = Sluice::start(&format!(
        "{DEFAULTS}frontend a\n    bind 127.0.0.1:{a} backlog 77\n    http-request return status 200 content-type text/plain string ok\nfrontend b\n    backlog 55\n    bind 127.0.0.1:{b}\n    http-request return status 200 content-type text/plain string ok\nfrontend ready\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    // `ss` shows a listening socket's backlog as its Send-Q.
    let queue = |port: u16| {
        let out = std::process::Command::new("ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .expect("ss (Debian's iproute2; .ci/run installs it)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .nth(2)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("{text}"))
    };
    assert_eq!(queue(a), 77);
    assert_eq!(queue(b), 55);
}

/// Listening sockets on `port` (`ss` lists each socket of an SO_REUSEPORT group).
fn listening_sockets(port: u16) -> usize {
    let out = std::process::Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("ss (Debian's iproute2; .ci/run installs it)");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn shards_give_an_address_a_socket_per_worker_and_each_accepts() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let (by_thread, capped, one_worker, default) =
        (free_port(), free_port(), free_port(), free_port());
    // `multi-queue off`: a connection stays on the worker whose socket the kernel chose.
    let _p = Sluice::start(&format!(
        "global\n    nbthread 2\n    tune.listener.multi-queue off\n    stats socket {}\n{DEFAULTS}frontend sharded\n    bind 127.0.0.1:{by_thread} shards by-thread\n    bind 127.0.0.1:{capped} shards 8\n    bind 127.0.0.1:{one_worker} thread 2 shards by-thread\n    bind 127.0.0.1:{default}\n    http-request return status 200 content-type text/plain string ok\nfrontend ready\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    assert_eq!(listening_sockets(by_thread), 2);
    // At most one socket per worker the bind allows.
    assert_eq!(listening_sockets(capped), 2);
    assert_eq!(listening_sockets(one_worker), 1);
    assert_eq!(listening_sockets(default), 1);
    // The kernel hashes each new connection (its source port) to one of the two sockets:
    // over 40 connections both workers accept some (all on one: 1 chance in 2^39).
    let before = activity(&sock, "accepted");
    for _ in 0..40 {
        let mut c = Conn::new(format!("127.0.0.1:{by_thread}").parse().unwrap());
        c.send(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        assert_eq!(c.response_for(false).expect("a response").status, 200);
    }
    let after = activity(&sock, "accepted");
    let took: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(took.iter().sum::<u64>(), 40, "{took:?}");
    assert!(took.iter().all(|&n| n > 0), "{took:?}");
}

#[test]
fn default_shards_and_bad_shards_lines() {
    let port = free_port();
    let _p = Sluice::start(&format!(
        "global\n    nbthread 2\n    tune.listener.default-shards by-thread\n{DEFAULTS}frontend a\n    bind 127.0.0.1:{port}\n    http-request return status 200 content-type text/plain string ok\nfrontend ready\n    {{fe}}\n    http-request return status 200 content-type text/plain string ok\n"
    ));
    assert_eq!(listening_sockets(port), 2);
    for (line, says) in [
        ("bind :8080 shards 0", "expects a positive count"),
        ("bind :8080 shards many", "expects a positive count"),
        ("bind :8080 shards", "after 'shards'"),
        ("bind fd@3 shards 2", "'shards' needs an address"),
    ] {
        let (ok, err) = check_config(&format!("{DEFAULTS}frontend f\n    {line}\n"));
        assert!(!ok, "{line}");
        assert!(
            err.contains("c.cfg:7") && err.contains(says),
            "{line}: {err}"
        );
    }
    let (ok, err) = check_config("global\n    tune.listener.default-shards by-core\n");
    assert!(
        !ok && err.contains("c.cfg:2") && err.contains("by-process, by-thread or by-group"),
        "{err}"
    );
}

/// Connections the `FRONTEND` row of `fe` counts as accepted.
fn accepted(sock: &Path, fe: &str) -> u64 {
    stat_field(&Sluice::cli(sock, "show stat"), fe, "FRONTEND", "conn_tot")
        .parse()
        .unwrap()
}

#[test]
fn a_deferred_bind_accepts_a_connection_once_its_client_speaks() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}frontend deferred\n    {{fe}} defer-accept\n    http-request return status 200 content-type text/plain string deferred\nfrontend plain\n    {{fe}}\n    http-request return status 200 content-type text/plain string plain\n",
        sock.display()
    ));
    // The kernel queues a silent client's connection anyway after a second: the check is
    // only conclusive when the twin was accepted well within it, so a slow round is retried.
    let mut concluded = false;
    for round in 0..5u64 {
        let start = std::time::Instant::now();
        let mut deferred = Conn::new(p.addrs[0]);
        let _plain = Conn::new(p.addrs[1]);
        // The same worker polls both sockets: once it accepted the plain twin, it would
        // have accepted the deferred one too, had the kernel queued it.
        wait_until("the plain bind's connection", || {
            accepted(&sock, "plain") == round + 1
        });
        let deferred_accepted = accepted(&sock, "deferred");
        if start.elapsed() < std::time::Duration::from_millis(700) {
            assert_eq!(deferred_accepted, round, "a silent connection was accepted");
            concluded = true;
        }
        let r = deferred.get("/");
        assert_eq!((r.status, r.text()), (200, "deferred".to_string()));
        assert_eq!(accepted(&sock, "deferred"), round + 1);
        if concluded {
            break;
        }
    }
    assert!(concluded, "every round took more than 700 ms");
}

#[test]
fn rate_limits_hold_new_connections_in_the_queue_and_serve_them_all() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    maxconnrate 5000\n    maxsessrate 6000\n    maxsslrate 7000\n{DEFAULTS}frontend limited\n    {{fe}}\n    rate-limit sessions 4\n    default_backend be\nfrontend free\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    let (limited, free) = (p.addrs[0], p.addrs[1]);
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..12)
        .map(|_| {
            std::thread::spawn(move || {
                let status = get(limited, "/").status;
                (status, started.elapsed())
            })
        })
        .collect();
    // The other frontend is not held back meanwhile.
    assert_eq!(get(free, "/").status, 200);
    let free_done = started.elapsed();
    let done: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert!(done.iter().all(|(status, _)| *status == 200), "{done:?}");
    let last = done.iter().map(|(_, at)| *at).max().unwrap();
    // 12 connections at 4 a second (the sliding window lets the first second's 4 go at
    // once): the last cannot be accepted before about two seconds.
    assert!(last >= std::time::Duration::from_millis(1200), "{last:?}");
    assert!(free_done < last, "{free_done:?} {last:?}");
    let info = Sluice::cli(&sock, "show info");
    for line in [
        "ConnRateLimit: 5000",
        "SessRateLimit: 6000",
        "SslRateLimit: 7000",
    ] {
        assert!(info.lines().any(|l| l == line), "{line} in {info}");
    }
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "limited", "FRONTEND", "rate_lim"), "4");
    assert_eq!(stat_field(&csv, "free", "FRONTEND", "rate_lim"), "0");
    let (ok, out) = check_config(&format!(
        "global\n    maxconnrate 0\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request return status 200\n"
    ));
    assert!(
        !ok && out.contains(":2:") && out.contains("positive number per second"),
        "{out}"
    );
}

/// The CPUs a `Cpus_allowed_list` line names (`0-3,6`).
fn cpu_list(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// The CPUs a thread (`/proc/PID/task/TID`) may run on.
fn allowed_cpus(status_path: &std::path::Path) -> Vec<usize> {
    let status = std::fs::read_to_string(status_path).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    cpu_list(line)
}

/// `cpu-map`: each worker thread runs on the CPUs its line gives it, a later line winning
/// for the threads it names (HAProxy numbers threads from 1).
#[test]
fn cpu_map_binds_each_worker_thread() {
    let mine = allowed_cpus(std::path::Path::new("/proc/self/status"));
    let (a, b) = (mine[0], *mine.get(1).unwrap_or(&mine[0]));
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    cpu-map 1/all {a}\n    cpu-map 1/2 {b}\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200\n"
    ));
    assert_eq!(get(p.addr(), "/").status, 200);
    let mut seen = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", p.pid())).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if let Some(tid) = comm.trim().strip_prefix("sluice-w") {
            seen.push((tid.to_string(), allowed_cpus(&dir.join("status"))));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![("0".to_string(), vec![a]), ("1".to_string(), vec![b])]
    );
    let (ok, out) = check_config(&format!(
        "global\n    cpu-map auto:1/1-3 0-1\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n"
    ));
    assert!(
        !ok && out.contains(":2:") && out.contains("as many CPUs as threads"),
        "{out}"
    );
}

/// `noreuseport`: a listening socket without SO_REUSEPORT, alone on its address whatever
/// its `shards` (another socket asking for SO_REUSEPORT cannot bind beside it, as it can by
/// default).
#[test]
fn noreuseport_leaves_an_address_one_socket() {
    for noreuse in [false, true] {
        let port = free_port();
        let option = if noreuse { "    noreuseport\n" } else { "" };
        let _p = Sluice::start(&format!(
            "global\n    nbthread 2\n{option}{DEFAULTS}frontend a\n    bind 127.0.0.1:{port} shards by-thread\n    http-request return status 200\nfrontend ready\n    {{fe}}\n    http-request return status 200\n"
        ));
        assert_eq!(listening_sockets(port), if noreuse { 1 } else { 2 });
        let beside =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        beside.set_reuse_port(true).unwrap();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        assert_eq!(
            beside.bind(&addr.into()).is_ok(),
            !noreuse,
            "noreuseport {noreuse}"
        );
    }
}
