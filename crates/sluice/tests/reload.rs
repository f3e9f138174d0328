//! Replacing a running process and the signals an operator sends it, as with HAProxy:
//! `-sf`/`-st` with a pidfile, SIGHUP (server states), SIGUSR2 (ignored outside
//! master-worker mode), SIGTTOU/SIGTTIN (accepting paused and resumed).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill with a pid this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

#[test]
fn sighup_sigusr2_and_sigttou_sigttin() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    ));
    assert_eq!(get(p.addr(), "/").status, 200);
    signal(p.pid(), libc::SIGHUP);
    // (The request just answered may still count as active at that moment.)
    wait_until("the server states", || {
        p.stderr()
            .contains("SIGHUP: Server be/s1 is no check. Conn: ")
    });
    signal(p.pid(), libc::SIGUSR2);
    wait_until("SIGUSR2 noted", || p.stderr().contains("SIGUSR2 received"));
    assert_eq!(
        get(p.addr(), "/").status,
        200,
        "still serving after SIGHUP and SIGUSR2"
    );
    // SIGTTOU: a new connection waits unanswered in the kernel's queue; SIGTTIN: it is
    // served, nothing lost.
    signal(p.pid(), libc::SIGTTOU);
    wait_until("listeners paused", || {
        p.stderr().contains("SIGTTOU received")
    });
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.write_all(b"GET /queued HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut b = [0u8; 64];
    assert!(
        matches!(c.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "answered while paused"
    );
    assert!(!origin.requests().iter().any(|r| r.target == "/queued"));
    signal(p.pid(), libc::SIGTTIN);
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// A port that stays reserved for as long as the socket lives: bound with SO_REUSEPORT but
/// not listening, so the processes under test can bind it too and nothing else takes it.
fn reserved_port() -> (socket2::Socket, SocketAddr) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_reuse_address(true).unwrap();
    s.set_reuse_port(true).unwrap();
    s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    (s, addr)
}

#[test]
fn a_new_process_with_sf_takes_over_and_the_old_one_finishes() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let dir = TempDir::new();
    let pidfile = dir.0.join("sluice.pid").display().to_string();
    let cfg = |name: &str| {
        format!(
            "{DEFAULTS}frontend fe\n    bind {addr}\n    http-request set-header X-Gen {name}\n    default_backend be\nbackend be\n    server s1 {}\n",
            origin.addr
        )
    };
    let mut old = Sluice::start_args(&cfg("one"), &["-p".into(), pidfile.clone()]);
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(pid.trim(), old.pid().to_string());
    assert_eq!(get(addr, "/").status, 200);
    let new = Sluice::start_args(
        &cfg("two"),
        &[
            "-p".into(),
            pidfile.clone(),
            "-sf".into(),
            pid.trim().into(),
        ],
    );
    let status = {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(s) = old.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the old process did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert!(status.success(), "{status}");
    assert!(old.stderr().contains("soft stop"));
    assert_eq!(
        std::fs::read_to_string(&pidfile).unwrap().trim(),
        new.pid().to_string()
    );
    // Only the new process answers now.
    let before = origin.count();
    for _ in 0..5 {
        assert_eq!(get(addr, "/").status, 200);
    }
    let requests = origin.requests();
    assert!(requests[before..]
        .iter()
        .all(|r| r.header("x-gen") == Some("two")));
}

#[test]
fn st_stops_the_old_process_at_once() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let cfg = format!(
        "{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let mut old = Sluice::start_args(&cfg, &[]);
    let _new = Sluice::start_args(&cfg, &["-st".into(), old.pid().to_string()]);
    wait_until("the old process gone", || {
        old.child.try_wait().unwrap().is_some()
    });
    assert_eq!(get(addr, "/").status, 200);
    let (ok, err) = check_config("defaults\n    mode http\nglobal\n    pidfile\n");
    assert!(!ok && err.contains("c.cfg:4"), "{err}");
}

/// One request on a new connection; whether a whole 200 came back.
fn one_shot(addr: SocketAddr) -> bool {
    let Ok(mut c) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(TIMEOUT));
    if c.write_all(b"GET /one HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out.starts_with(b"HTTP/1.1 200")
}

#[test]
fn reloads_with_socket_handover_lose_no_request() {
    reloads_lose_no_request(true);
}

/// Without `-x`, both processes listen side by side (SO_REUSEPORT): the old one must empty
/// its accept queue before closing its socket.
#[test]
fn reloads_without_handover_lose_no_request() {
    reloads_lose_no_request(false);
}

fn reloads_lose_no_request(handover: bool) {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let pidfile = dir.0.join("pid").display().to_string();
    let cfg = format!(
        "global\n    nbthread 2\n    stats socket {} level admin expose-fd listeners\n{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        sock.display(),
        origin.addr
    );
    let mut current = Sluice::start_args(&cfg, &["-p".into(), pidfile.clone()]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let counts = std::sync::Arc::new(std::sync::Mutex::new((0u64, 0u64, 0u64, 0u64)));
    // One client opens a connection per request, another keeps its connection alive (and
    // opens a new one when the server closes it, as browsers do).
    let short = {
        let (stop, counts) = (stop.clone(), counts.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let ok = one_shot(addr);
                let mut c = counts.lock().unwrap();
                c.0 += 1;
                c.1 += u64::from(!ok);
            }
        })
    };
    let long = {
        let (stop, counts) = (stop.clone(), counts.clone());
        std::thread::spawn(move || {
            let mut conn: Option<Conn> = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let c = conn.get_or_insert_with(|| Conn::new(addr));
                c.send(b"GET /ka HTTP/1.1\r\nHost: t\r\n\r\n");
                let r = c.response_for(false);
                let ok = r.as_ref().is_some_and(|r| r.status == 200);
                if r.as_ref()
                    .is_none_or(|r| r.header("connection") == Some("close"))
                {
                    conn = None;
                }
                let mut k = counts.lock().unwrap();
                k.2 += 1;
                k.3 += u64::from(!ok);
            }
        })
    };
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(150));
        let old_pid = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .to_string();
        let mut args = vec!["-p".into(), pidfile.clone()];
        if handover {
            args.extend(["-x".into(), sock.display().to_string()]);
        }
        args.extend(["-sf".into(), old_pid]);
        let next = Sluice::start_args(&cfg, &args);
        let deadline = Instant::now() + TIMEOUT;
        while current.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "the old process did not finish: {}",
                current.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        current = next;
    }
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    short.join().unwrap();
    long.join().unwrap();
    let (short_n, short_failed, long_n, long_failed) = *counts.lock().unwrap();
    assert!(
        short_n > 20 && long_n > 20,
        "too little traffic: {short_n}, {long_n}"
    );
    assert_eq!(
        (short_failed, long_failed),
        (0, 0),
        "failed requests over 10 reloads: {short_failed} of {short_n} one-shot, {long_failed} of {long_n} keep-alive"
    );
    assert_eq!(get(addr, "/").status, 200);
}

#[test]
fn x_needs_a_stats_socket_that_exposes_its_listeners() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock = dir.0.join("plain.sock");
    let _old = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        sock.display(),
        origin.addr
    ));
    let (_port, addr) = reserved_port();
    let cfg = dir.write(
        "new.cfg",
        &format!("{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n", origin.addr),
    );
    let out = std::process::Command::new(sluice_bin())
        .args(["-f", &cfg, "-x", &sock.display().to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot take the listeners over from") && err.contains("expose-fd listeners"),
        "{err}"
    );
}

/// Whether process `pid` exists.
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Runs sluice with `args` that make it detach, until the command returns (successfully);
/// the pid it wrote to `pidfile`.
fn start_detached(args: &[&str], pidfile: &str) -> i32 {
    let out = std::process::Command::new(sluice_bin())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn d_detaches_once_listening_and_the_pidfile_names_the_daemon() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let dir = TempDir::new();
    let pidfile = dir.0.join("d.pid").display().to_string();
    let cfg = dir.write(
        "d.cfg",
        &format!("{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n", origin.addr),
    );
    // The command returns once the daemon listens.
    let pid = start_detached(&["-D", "-f", &cfg, "-p", &pidfile], &pidfile);
    assert!(alive(pid));
    assert_eq!(get(addr, "/").status, 200);
    // SAFETY: SIGTERM to the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    wait_until("the daemon gone", || !alive(pid));
    // A daemon that cannot start says so, and the command fails.
    let bad = dir.write(
        "bad.cfg",
        &format!("global\n    user no-such-user-here\n{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n", origin.addr),
    );
    let out = std::process::Command::new(sluice_bin())
        .args(["-D", "-f", &bad])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown user 'no-such-user-here'"), "{err}");
}

#[test]
fn user_group_and_chroot_apply_once_the_sockets_are_open() {
    let origin = Origin::start("o");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let dir = TempDir::new();
    let jail = dir.0.join("jail");
    std::fs::create_dir(&jail).unwrap();
    let cfg = format!(
        "global\n    uid 65534\n    gid 65534\n    chroot {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        jail.display(),
        origin.addr
    );
    if !root {
        // Only root may change identity: the refusal is clear.
        let (_port, addr) = reserved_port();
        let path = dir.write("c.cfg", &cfg.replace("{fe}", &format!("bind {addr}")));
        let out = std::process::Command::new(sluice_bin())
            .args(["-f", &path])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("cannot chroot to"),
            "{err}"
        );
        return;
    }
    let p = Sluice::start(&cfg);
    assert_eq!(
        get(p.addr(), "/").status,
        200,
        "serves after dropping privileges"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    assert_eq!(field("Uid:"), "65534");
    assert_eq!(field("Gid:"), "65534");
    let root_link = std::fs::read_link(format!("/proc/{}/root", p.pid())).unwrap();
    assert_eq!(root_link, jail);
}

/// Stops a master with SIGTERM and waits for it (so that it cleans up after itself).
fn stop_master(mut master: Sluice) {
    signal(master.pid(), libc::SIGTERM);
    wait_until("the master gone", || {
        master.child.try_wait().unwrap().is_some()
    });
}

/// The worker pids a master reported ready, in order.
fn workers(p: &Sluice) -> Vec<i32> {
    p.stderr()
        .lines()
        .filter_map(|l| l.strip_prefix("sluice: master: worker "))
        .filter_map(|l| l.strip_suffix(" ready"))
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[test]
fn a_master_reloads_its_worker_on_sigusr2_without_losing_a_request() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let cfg = format!(
        "global\n    nbthread 2\n{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let master = Sluice::start_args(&cfg, &["-W".into()]);
    wait_until("the first worker", || workers(&master).len() == 1);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let clients: Vec<_> = (0..2)
        .map(|k| {
            let (stop, failed, sent) = (stop.clone(), failed.clone(), sent.clone());
            std::thread::spawn(move || {
                let mut conn: Option<Conn> = None;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let ok = if k == 0 {
                        one_shot(addr)
                    } else {
                        let c = conn.get_or_insert_with(|| Conn::new(addr));
                        c.send(b"GET /ka HTTP/1.1\r\nHost: t\r\n\r\n");
                        let r = c.response_for(false);
                        if r.as_ref()
                            .is_none_or(|r| r.header("connection") == Some("close"))
                        {
                            conn = None;
                        }
                        r.is_some_and(|r| r.status == 200)
                    };
                    sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if !ok {
                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for n in 2..=11 {
        std::thread::sleep(Duration::from_millis(150));
        signal(master.pid(), libc::SIGUSR2);
        wait_until("the new worker", || workers(&master).len() == n);
    }
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let all = workers(&master);
    // The replaced workers finished; only the last one runs.
    wait_until("the old workers gone", || {
        all[..10].iter().all(|&p| !alive(p))
    });
    assert!(alive(all[10]));
    let (n, f) = (
        sent.load(std::sync::atomic::Ordering::Relaxed),
        failed.load(std::sync::atomic::Ordering::Relaxed),
    );
    assert!(n > 20, "too little traffic: {n}");
    assert_eq!(f, 0, "{f} of {n} requests failed over 10 reloads");
    // SIGTERM to the master stops everything.
    stop_master(master);
    wait_until("the last worker gone", || !alive(all[10]));
}

#[test]
fn ws_tells_systemd_ready_and_reloading() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let dir = TempDir::new();
    let notify = dir.0.join("notify");
    let systemd = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    systemd.set_read_timeout(Some(TIMEOUT)).unwrap();
    let cfg = dir.write(
        "ws.cfg",
        &format!("{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n", origin.addr),
    );
    let mut master = Reaped(
        std::process::Command::new(sluice_bin())
            .args(["-Ws", "-f", &cfg])
            .env("NOTIFY_SOCKET", &notify)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let said = || {
        let mut b = [0u8; 256];
        let n = systemd.recv(&mut b).unwrap();
        String::from_utf8_lossy(&b[..n]).into_owned()
    };
    let first = said();
    assert!(first.starts_with("READY=1\nMAINPID="), "{first}");
    assert_eq!(get(addr, "/").status, 200);
    signal(master.0.id(), libc::SIGUSR2);
    assert!(said().starts_with("RELOADING=1"));
    assert!(said().starts_with("READY=1"));
    assert_eq!(get(addr, "/").status, 200);
    signal(master.0.id(), libc::SIGTERM);
    assert!(master.0.wait().unwrap().success());
}

/// A child process killed (by its pid) if the test fails before it ends, so that it does
/// not outlive the test.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn the_master_cli_shows_processes_reloads_and_routes_commands() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let dir = TempDir::new();
    let cli = dir.0.join("master.sock");
    let cfg = format!(
        "{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let master = Sluice::start_args(&cfg, &["-W".into(), "-S".into(), cli.display().to_string()]);
    wait_until("the first worker", || workers(&master).len() == 1);
    let first = workers(&master)[0];
    wait_until("the master CLI", || cli.exists());
    let procs = Sluice::cli(&cli, "show proc");
    assert!(procs.starts_with("#<PID>"), "{procs}");
    assert!(
        procs.contains(&format!("\n{:<16}master", master.pid())),
        "{procs}"
    );
    assert!(procs.contains(&format!("\n{first:<16}worker")), "{procs}");
    // A command for the worker, through the master.
    let info = Sluice::cli(&cli, "@1 show info");
    assert!(info.contains(&format!("\nPid: {first}\n")), "{info}");
    // `reload` as SIGUSR2: a new worker, the old one finishes.
    Sluice::cli(&cli, "reload");
    wait_until("the new worker", || workers(&master).len() == 2);
    let second = workers(&master)[1];
    wait_until("the old worker gone", || !alive(first));
    let info = Sluice::cli(&cli, "@1 show info");
    assert!(info.contains(&format!("\nPid: {second}\n")), "{info}");
    assert_eq!(get(addr, "/").status, 200);
    assert!(Sluice::cli(&cli, "@9 show info").contains("No such worker"));
    stop_master(master);
    wait_until("the worker gone", || !alive(second));
}

#[test]
fn the_master_cli_listens_on_tcp_and_inherited_sockets_with_the_cli_protocol() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let cfg = format!(
        "{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let port = free_port();
    let master = Sluice::start_args(
        &cfg,
        &[
            "-W".into(),
            "-S".into(),
            format!("ipv4@127.0.0.1:{port}"),
            "-S".into(),
            "{fd}".into(),
        ],
    );
    wait_until("the first worker", || workers(&master).len() == 1);
    let worker = workers(&master)[0];
    // TCP: several commands on one line, each answer ended by an empty line.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"show proc; @1 show info\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let (procs, info) = out.split_once("\n\n").unwrap();
    assert!(procs.contains(&format!("\n{worker:<16}worker")), "{out}");
    assert!(info.contains(&format!("\nPid: {worker}\n")), "{out}");
    // The inherited socket, interactive: a prompt after each answer until `quit`.
    let mut c = TcpStream::connect(master.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    let read_to_prompt = |c: &mut TcpStream| {
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        // ("#<PID> " in a header is no prompt.)
        while got != b"> " && !got.ends_with(b"\n> ") {
            assert_eq!(c.read(&mut b).unwrap(), 1, "closed early: {got:?}");
            got.push(b[0]);
        }
        String::from_utf8(got).unwrap()
    };
    c.write_all(b"prompt\n").unwrap();
    assert_eq!(read_to_prompt(&mut c), "> ");
    c.write_all(b"show proc\n").unwrap();
    let procs = read_to_prompt(&mut c);
    assert!(
        procs.starts_with("#<PID>") && procs.ends_with("\n\n> "),
        "{procs}"
    );
    c.write_all(b"quit\n").unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    // The master holds its CLI sockets; the worker does not (close-on-exec).
    let inode = std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .find(|l| l.contains(&format!(":{port:04X} 00000000:0000 0A")))
        .and_then(|l| l.split_whitespace().nth(9).map(str::to_string))
        .expect("the master CLI listens");
    let holds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .any(|t| t.display().to_string() == format!("socket:[{inode}]"))
    };
    assert!(holds(master.pid()));
    assert!(!holds(worker as u32));
    stop_master(master);
    wait_until("the worker gone", || !alive(worker));
}

#[test]
fn s_refuses_bind_options_it_does_not_know() {
    let out = std::process::Command::new(sluice_bin())
        .args(["-W", "-S", "/tmp/x.sock,user,nobody", "-f", "/dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "-S /tmp/x.sock,user,nobody: bind option 'user' is not supported on the master CLI yet"
        ),
        "{err}"
    );
}

#[test]
fn d_with_w_detaches_the_master_once_a_worker_listens() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let dir = TempDir::new();
    let pidfile = dir.0.join("m.pid").display().to_string();
    let cfg = dir.write(
        "m.cfg",
        &format!("{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n", origin.addr),
    );
    // Returns once the detached master's worker listens (standard error closed by then).
    let master = start_detached(&["-D", "-W", "-f", &cfg, "-p", &pidfile], &pidfile);
    assert!(alive(master));
    assert_eq!(get(addr, "/").status, 200);
    let children = || {
        std::fs::read_to_string(format!("/proc/{master}/task/{master}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect::<Vec<_>>()
    };
    let first = children();
    assert_eq!(first.len(), 1, "one worker: {first:?}");
    // A reload through the detached master.
    signal(master as u32, libc::SIGUSR2);
    wait_until("the old worker gone and a new one", || {
        let now = children();
        now.len() == 1 && now != first
    });
    assert_eq!(get(addr, "/").status, 200);
    let second = children()[0];
    signal(master as u32, libc::SIGTERM);
    wait_until("the master gone", || !alive(master));
    wait_until("the worker gone", || !alive(second));
}

/// The descriptors process `pid` holds, by what they point to.
fn descriptors(pid: i32) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| {
            let t = t.display().to_string();
            // Sockets and pipes differ by inode from one process to the next: their kind
            // is what counts.
            t.split(':').next().unwrap_or("").to_string()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn reloads_leak_no_descriptor_into_the_new_worker() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let cfg = format!(
        "{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let master = Sluice::start_args(&cfg, &["-W".into()]);
    wait_until("the first worker", || workers(&master).len() == 1);
    let mut seen = Vec::new();
    for n in 2..=4 {
        signal(master.pid(), libc::SIGUSR2);
        wait_until("the new worker", || workers(&master).len() == n);
        let w = workers(&master)[n - 1];
        wait_until("the old worker gone", || !alive(workers(&master)[n - 2]));
        seen.push(descriptors(w));
    }
    // Each new worker holds the same descriptors as the one before it: nothing piles up.
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1], seen[2]);
    assert_eq!(get(addr, "/").status, 200);
    stop_master(master);
}

#[test]
fn a_table_shared_with_the_local_peer_survives_a_reload() {
    let (_port, addr) = reserved_port();
    let (_peer_port, peer) = reserved_port();
    let dir = TempDir::new();
    let sock = |n: &str| dir.0.join(format!("{n}.sock"));
    let cfg = |n: &str| {
        format!(
            "global\n    localpeer lb1\n    stats socket {} level admin\npeers local\n    peer lb1 {peer}\n    table hits type string len 32 size 100 expire 1m store http_req_cnt,gpc0\n{DEFAULTS}frontend fe\n    bind {addr}\n    stick-table type ip size 100 expire 1m store http_req_cnt peers local\n    http-request track-sc0 src\n    http-request track-sc1 path table local/hits\n    http-request sc-inc-gpc0(1) if {{ path /mark }}\n    http-request return status 200 content-type text/plain lf-string \"%[sc0_http_req_cnt] %[sc1_get_gpc0]\"\n",
            sock(n).display()
        )
    };
    let old = Sluice::start_args(&cfg("one"), &[]);
    for _ in 0..3 {
        assert_eq!(get(addr, "/mark").status, 200);
    }
    assert_eq!(get(addr, "/mark").text(), "4 4");
    let new = Sluice::start_args(&cfg("two"), &["-sf".into(), old.pid().to_string()]);
    assert!(
        new.stderr()
            .contains("entries learned from the previous process"),
        "{}",
        new.stderr()
    );
    // Both tables go on from where the old process left them.
    assert!(Sluice::cli(&sock("two"), "show table fe").contains("http_req_cnt=4"));
    let mut old = old;
    wait_until("the old process to finish", || {
        old.child.try_wait().ok().flatten().is_some()
    });
    assert_eq!(get(addr, "/mark").text(), "5 5");
    let hits = Sluice::cli(&sock("two"), "show table local/hits");
    assert!(
        hits.contains("key=/mark") && hits.contains("gpc0=5"),
        "{hits}"
    );
    // Other peers are accepted (tests/peers.rs syncs with them, in clear and over TLS);
    // server options other than TLS's are refused, by name, and so are `shards`.
    let pair = |extra: &str| {
        check_config(&format!(
            "global\n    localpeer lb1\npeers pair\n    peer lb1 127.0.0.1:10000\n    peer lb2 10.0.0.2:10000{extra}\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 10 peers pair\n    http-request track-sc0 src\n    http-request return status 200\n"
        ))
    };
    let (ok, out) = pair("");
    assert!(ok, "{out}");
    let (ok, out) = pair(" check inter 1s");
    assert!(
        !ok && out.contains("option 'check' is not supported yet (only TLS options)"),
        "{out}"
    );
    let (ok, out) = pair(" ssl");
    assert!(
        !ok && out.contains("peer 'lb2': verify is required"),
        "{out}"
    );
    let (ok, out) = pair("\n    shards 2");
    assert!(
        !ok && out.contains("'shards' in 'peers' section: not supported yet"),
        "{out}"
    );
    // A section that does not name this process is removed with HAProxy's warning, and
    // the tables that named it stay unshared.
    let (ok, out) = check_config(&format!(
        "global\n    localpeer lb1\npeers other\n    peer lb7 10.0.0.7:10000\n    peer lb8 10.0.0.8:10000\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 10 peers other\n    http-request track-sc0 src\n    http-request return status 200\n"
    ));
    assert!(ok, "{out}");
    assert!(
        out.contains("Removing incomplete section 'peers other' (no peer named 'lb1').")
            && out
                .contains("Proxy 'fe': unable to find local peer 'lb1' in peers section 'other'."),
        "{out}"
    );
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 10 peers nosuch\n    http-request return status 200\n"
    ));
    assert!(
        !ok && out.contains("peers 'nosuch', which is not defined"),
        "{out}"
    );
}

#[test]
fn a_master_stopped_by_sigint_exits_130_and_by_sigterm_0() {
    // As HAProxy 2.6's master (checked side by side): 130 after SIGINT, 0 after SIGTERM.
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 0)] {
        let (_port, addr) = reserved_port();
        let cfg =
            format!("{DEFAULTS}frontend fe\n    bind {addr}\n    http-request return status 200\n");
        let mut master = Sluice::start_args(&cfg, &["-W".into()]);
        wait_until("the first worker", || workers(&master).len() == 1);
        let worker = workers(&master)[0];
        signal(master.pid(), sig);
        wait_until("the master gone", || {
            master.child.try_wait().unwrap().is_some()
        });
        let status = master.child.try_wait().unwrap().unwrap();
        assert_eq!(status.code(), Some(code), "{sig}");
        wait_until("its worker gone", || !alive(worker));
    }
}

/// `master-worker` in `global` does what `-W` does: the process started is the master,
/// and a worker of its own serves.
#[test]
fn master_worker_in_global_makes_a_master() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let cfg = format!(
        "global\n    master-worker\n{DEFAULTS}frontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let master = Sluice::start_args(&cfg, &[]);
    wait_until("the worker", || workers(&master).len() == 1);
    let worker = workers(&master)[0];
    assert_ne!(worker, master.pid() as i32);
    assert_eq!(get(addr, "/").text(), "o /");
    let (ok, out) = check_config("global\n    master-worker no-exit-on-failure\n");
    assert!(!ok && out.contains("not supported yet"), "{out}");
}

/// `mworker-max-reloads N`: a worker still serving after more than N reloads (here held by
/// an idle keep-alive connection, which a soft stop lets finish) gets SIGTERM from the
/// master; one that has outlived N reloads or fewer is left to finish.
#[test]
fn a_worker_outliving_mworker_max_reloads_is_terminated() {
    let origin = Origin::start("o");
    let (_port, addr) = reserved_port();
    let cfg = format!(
        "global\n    mworker-max-reloads 1\ndefaults\n    mode http\n    timeout client 60s\n    timeout server 60s\n    timeout connect 5s\n    timeout http-keep-alive 60s\nfrontend fe\n    bind {addr}\n    default_backend be\nbackend be\n    server s1 {}\n",
        origin.addr
    );
    let master = Sluice::start_args(&cfg, &["-W".into()]);
    wait_until("the first worker", || workers(&master).len() == 1);
    let first = workers(&master)[0];
    // A kept-alive connection holds the first worker past its soft stop.
    let mut held = Conn::new(addr);
    assert_eq!(held.get("/hold").status, 200);
    signal(master.pid(), libc::SIGUSR2);
    wait_until("the second worker", || workers(&master).len() == 2);
    // One reload outlived: it still runs, its connection open.
    assert!(alive(first));
    signal(master.pid(), libc::SIGUSR2);
    wait_until("the third worker", || workers(&master).len() == 3);
    // Two outlived: terminated, its connection with it.
    wait_until("the first worker terminated", || !alive(first));
    assert!(master.stderr().contains(&format!(
        "worker {first} has outlived 1 reloads: terminated"
    )));
    assert!(alive(workers(&master)[2]));
    stop_master(master);
}
