//! Unix and abstract sockets through the real binary: `bind unix@PATH|/PATH|abns@NAME` with
//! `mode`, servers on `unix@PATH` and `abns@NAME` (traffic and health checks), what HAProxy
//! shows of a client or a server without an address (logs, `src`, `X-Forwarded-For`,
//! `show stat`, `show servers state`), TCP mode, and reloads with and without the socket
//! handover.

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};

/// An HTTP server on a unix socket at `path`: answers `from-unix` and records each request
/// head.
fn unix_origin(path: &std::path::Path) -> Arc<Mutex<Vec<String>>> {
    serve_unix(UnixListener::bind(path).unwrap())
}

/// The same server on an abstract name, bound as HAProxy binds them (the whole of
/// `sun_path`, padded with NULs).
fn abstract_origin(name: &str) -> Arc<Mutex<Vec<String>>> {
    let l = UnixListener::bind_addr(&abstract_addr(name)).unwrap();
    serve_unix(l)
}

fn abstract_addr(name: &str) -> std::os::unix::net::SocketAddr {
    use std::os::linux::net::SocketAddrExt;
    let mut padded = name.as_bytes().to_vec();
    padded.resize(107, 0);
    std::os::unix::net::SocketAddr::from_abstract_name(&padded).unwrap()
}

fn serve_unix(l: UnixListener) -> Arc<Mutex<Vec<String>>> {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let seen = seen.clone();
            std::thread::spawn(move || {
                // A health check's connection closes without a request.
                let Some(head) = try_read_head(&mut s) else {
                    return;
                };
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nfrom-unix",
                );
            });
        }
    });
    heads
}

/// One request over a connected unix socket; the response's body.
fn request_over(mut s: UnixStream) -> String {
    s.write_all(b"GET /u HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default()
}

/// A name no other test (or process) uses.
fn unique(tag: &str) -> String {
    format!("sluice-test-{tag}-{}", std::process::id())
}

#[test]
fn http_over_unix_and_abstract_sockets_both_ways() {
    let dir = TempDir::new();
    let origin_path = dir.0.join("origin.sock");
    let heads = unix_origin(&origin_path);
    let abns_origin = unique("origin");
    let abns_heads = abstract_origin(&abns_origin);
    let fe_path = dir.0.join("fe.sock");
    let abns_fe = unique("fe");
    let admin = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n    stats socket {} level admin\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    bind unix@{} mode 600\n    bind abns@{abns_fe}\n    option forwardfor\n    log-format \"ci=%ci cp=%cp fi=%fi fp=%fp src=%[src] dst=%[dst] path=%HP\"\n    use_backend abns if {{ path_beg /a }}\n    default_backend be\nbackend be\n    server s unix@{} check inter 100ms\nbackend abns\n    server s abns@{abns_origin}\n",
        admin.display(),
        fe_path.display(),
        origin_path.display(),
    ));
    // The socket file has its mode, and no temporary name is left beside it.
    let meta = std::fs::metadata(&fe_path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".tmp")), "{names:?}");

    // Over the socket file, to the unix server: no address, so no X-Forwarded-For.
    assert_eq!(
        request_over(UnixStream::connect(&fe_path).unwrap()),
        "from-unix"
    );
    // Over the abstract name (padded as HAProxy's), to the abstract server.
    let s = UnixStream::connect_addr(&abstract_addr(&abns_fe)).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut s = s;
    s.write_all(b"GET /a HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.ends_with("from-unix"), "{out}");
    // Over TCP: the client's address is forwarded.
    assert_eq!(get(p.addr(), "/t").text(), "from-unix");
    {
        let heads = heads.lock().unwrap();
        let via_unix = heads.iter().find(|h| h.starts_with("GET /u ")).unwrap();
        assert!(
            !via_unix.to_ascii_lowercase().contains("x-forwarded-for"),
            "{via_unix}"
        );
        let via_tcp = heads.iter().find(|h| h.starts_with("GET /t ")).unwrap();
        assert!(
            via_tcp.contains("x-forwarded-for: 127.0.0.1\r\n"),
            "{via_tcp}"
        );
    }
    assert_eq!(abns_heads.lock().unwrap().len(), 1);

    // HAProxy's log of a unix client: `unix` and the listener's id; no src, no dst.
    wait_until("three log lines", || {
        p.stdout().lines().filter(|l| l.starts_with("ci=")).count() == 3
    });
    let log = p.stdout();
    assert!(
        log.contains("ci=unix cp=2 fi=unix fp=2 src=- dst=- path=/u\n"),
        "{log}"
    );
    assert!(
        log.contains("ci=unix cp=3 fi=unix fp=3 src=- dst=- path=/a\n"),
        "{log}"
    );
    assert!(
        log.contains(" src=127.0.0.1 dst=127.0.0.1 path=/t\n"),
        "{log}"
    );

    // A unix server is checked over its socket, and shows no address.
    wait_until("the unix server checked", || {
        stat_field(&Sluice::cli(&admin, "show stat"), "be", "s", "check_status") == "L4OK"
    });
    let csv = Sluice::cli(&admin, "show stat");
    assert_eq!(stat_field(&csv, "be", "s", "addr"), "unix");
    assert_eq!(stat_field(&csv, "be", "s", "status"), "UP");
    let state = Sluice::cli(&admin, "show servers state be");
    let line = state.lines().find(|l| l.contains(" be 1 s ")).unwrap();
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!((f[4], f[18]), ("-", "0"), "{line}");
    assert_eq!(
        Sluice::cli(&admin, "set server be/s addr 127.0.0.1 port 80"),
        "Update for the current server address family is only supported through configuration file by 'stats socket command'\n\n"
    );
}

#[test]
fn tcp_mode_relays_bytes_between_unix_sockets() {
    let dir = TempDir::new();
    let echo_path = dir.0.join("echo.sock");
    let l = UnixListener::bind(&echo_path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let fe_path = dir.0.join("fe.sock");
    let _p = Sluice::start(&format!(
        "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten db\n    {{fe}}\n    bind {}\n    server echo {}\n",
        fe_path.display(),
        echo_path.display()
    ));
    let mut s = UnixStream::connect(&fe_path).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    // Binary bytes, not HTTP: a proxy without `mode` is a TCP one.
    let msg: Vec<u8> = (0..=255u8).cycle().take(50_000).collect();
    s.write_all(&msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);
}

#[test]
fn unix_binds_are_checked_when_the_configuration_is_read() {
    let long = format!("/tmp/{}", "x".repeat(120));
    for (bind, says) in [
        (format!("unix@{long}"), "longer than 107 bytes"),
        ("abns@".to_string(), "abstract socket name ''"),
        (
            "unix@/tmp/a.sock mode 999".to_string(),
            "expects an octal mode",
        ),
        (
            "unix@/tmp/a.sock user no-such-user-here".to_string(),
            "unknown user",
        ),
    ] {
        let (ok, out) = check_config(&format!(
            "{DEFAULTS}frontend fe\n    bind {bind}\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n"
        ));
        assert!(!ok && out.contains(says), "{bind}: {out}");
    }
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind /run/x.sock mode 660 uid 0 gid 0\n    bind abns@x\n    default_backend be\nbackend be\n    server s /run/app.sock\n    server t abns@app\n"
    ));
    assert!(ok, "{out}");
}

/// A reload hands the unix socket over with `-x` (the same socket, its file untouched);
/// without it the new process binds its own and renames it over the path. Either way the
/// client connected to the old process finishes, and new ones reach the new process.
#[test]
fn reloads_keep_unix_listeners_with_and_without_handover() {
    let dir = TempDir::new();
    let origin_path = dir.0.join("origin.sock");
    let _heads = unix_origin(&origin_path);
    let fe_path = dir.0.join("fe.sock");
    let admin = dir.0.join("admin.sock");
    let cfg = format!(
        "global\n    stats socket {} level admin expose-fd listeners\n{DEFAULTS}frontend fe\n    bind unix@{}\n    default_backend be\nbackend be\n    server s unix@{}\n",
        admin.display(),
        fe_path.display(),
        origin_path.display()
    );
    let first = Sluice::start(&cfg);
    let inode = std::fs::metadata(&fe_path).unwrap().ino();
    assert_eq!(
        request_over(UnixStream::connect(&fe_path).unwrap()),
        "from-unix"
    );
    // A client of the old process, mid-request when the reload happens.
    let mut pending = UnixStream::connect(&fe_path).unwrap();
    pending
        .write_all(b"GET /u HTTP/1.1\r\nHost: t\r\n")
        .unwrap();

    let second = Sluice::start_args(
        &cfg,
        &[
            "-x".into(),
            admin.display().to_string(),
            "-sf".into(),
            first.pid().to_string(),
        ],
    );
    assert_eq!(std::fs::metadata(&fe_path).unwrap().ino(), inode);
    pending.write_all(b"Connection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    pending.read_to_string(&mut out).unwrap();
    assert!(out.ends_with("from-unix"), "{out}");
    let mut first = first;
    wait_until("the old process gone", || {
        first.child.try_wait().unwrap().is_some()
    });
    assert_eq!(
        request_over(UnixStream::connect(&fe_path).unwrap()),
        "from-unix"
    );

    // Without -x: a new socket renamed over the path.
    let third = Sluice::start_args(&cfg, &["-sf".into(), second.pid().to_string()]);
    assert_ne!(std::fs::metadata(&fe_path).unwrap().ino(), inode);
    let mut second = second;
    wait_until("the second process gone", || {
        second.child.try_wait().unwrap().is_some()
    });
    assert_eq!(
        request_over(UnixStream::connect(&fe_path).unwrap()),
        "from-unix"
    );
    drop(third);
}
