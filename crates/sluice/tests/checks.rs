//! Health checks and runtime server control through the real binary: servers that die and
//! come back, HTTP checks judged by status, the CLI steering the balancer, HAProxy's log
//! lines for state changes, and checks spread over workers.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// An HTTP server on a fixed port that can be stopped (connections refused) and started
/// again, answering its name, and `/health` with a status that can be changed.
struct Switchable {
    addr: SocketAddr,
    name: &'static str,
    health: Arc<AtomicU16>,
    running: Option<Arc<AtomicBool>>,
}

impl Switchable {
    fn start(name: &'static str) -> Switchable {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = Switchable {
            addr: l.local_addr().unwrap(),
            name,
            health: Arc::new(AtomicU16::new(200)),
            running: None,
        };
        s.serve(l);
        s
    }

    fn serve(&mut self, l: TcpListener) {
        l.set_nonblocking(true).unwrap();
        let running = Arc::new(AtomicBool::new(true));
        let (run, health, name) = (running.clone(), self.health.clone(), self.name);
        std::thread::spawn(move || {
            while run.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((c, _)) => {
                        let health = health.clone();
                        std::thread::spawn(move || answer(c, name, &health));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        self.running = Some(running);
    }

    /// Closes the listening socket: connections are refused from now on.
    fn down(&mut self) {
        if let Some(r) = self.running.take() {
            r.store(false, Ordering::SeqCst);
        }
        // The accept loop notices within a few milliseconds and drops the listener.
        let deadline = Instant::now() + TIMEOUT;
        while TcpStream::connect(self.addr).is_ok() {
            assert!(Instant::now() < deadline, "the listener did not close");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn up(&mut self) {
        let l = TcpListener::bind(self.addr).unwrap();
        self.serve(l);
    }
}

impl Drop for Switchable {
    fn drop(&mut self) {
        if let Some(r) = &self.running {
            r.store(false, Ordering::SeqCst);
        }
    }
}

/// Answers requests on one connection: `/health` with the current health status, anything
/// else with 200 and the server's name.
fn answer(mut c: TcpStream, name: &str, health: &AtomicU16) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match c.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end + 4);
        let (status, body) = if head.contains(" /health ") {
            (health.load(Ordering::SeqCst), "health".to_string())
        } else {
            (200, name.to_string())
        };
        let close =
            head.contains("HTTP/1.0") || head.to_ascii_lowercase().contains("connection: close");
        let rsp = format!(
            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        if c.write_all(rsp.as_bytes()).is_err() || close {
            return;
        }
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status(sock: &Path, be: &str, sv: &str) -> String {
    stat_field(&Sluice::cli(sock, "show stat"), be, sv, "status")
}

/// Sends `n` requests on new connections and counts the answers by body.
fn shares(p: &Sluice, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for i in 0..n {
        let r = get(p.addr(), &format!("/r{i}"));
        assert_eq!(r.status, 200, "request {i}");
        *out.entry(r.text()).or_insert(0) += 1;
    }
    out
}

fn cli_dir() -> (TempDir, PathBuf) {
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    (dir, sock)
}

/// A syslog collector on 127.0.0.1 keeping every line it receives.
struct Collector(UdpSocket);

impl Collector {
    fn new() -> Collector {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        Collector(s)
    }

    /// Waits for a line containing `needle` and returns it.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        let mut buf = [0u8; 4096];
        loop {
            assert!(Instant::now() < deadline, "no log line with {needle:?}");
            if let Ok(n) = self.0.recv(&mut buf) {
                let line = String::from_utf8_lossy(&buf[..n]).into_owned();
                if line.contains(needle) {
                    return line;
                }
            }
        }
    }
}

#[test]
fn a_dead_server_is_taken_out_and_comes_back() {
    let mut s1 = Switchable::start("s1");
    let s2 = Switchable::start("s2");
    let logs = Collector::new();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {}\n    log {} local0\n{DEFAULTS}    log global\nfrontend f\n    {{fe}}\n    default_backend be\nbackend be\n    option redispatch\n    server s1 {} check inter 100ms rise 2 fall 2\n    server s2 {} check inter 100ms rise 2 fall 2\n",
        sock.display(),
        logs.0.local_addr().unwrap(),
        s1.addr,
        s2.addr
    ));
    wait_until("s1 fully up", || status(&sock, "be", "s1") == "UP");
    assert_eq!(shares(&p, 10).len(), 2, "both servers serve");
    s1.down();
    wait_until("s1 down", || status(&sock, "be", "s1") == "DOWN");
    let line = logs.wait_for("Server be/s1 is DOWN");
    assert!(
        line.contains("Server be/s1 is DOWN, reason: Layer4 connection problem, info: \"Connection refused\", check duration: "),
        "{line}"
    );
    assert!(line.contains("ms. 1 active and 0 backup servers left. 0 sessions active, 0 requeued, 0 remaining in queue."), "{line}");
    // Syslog priority: local0 (16) * 8 + alert (1).
    assert!(line.starts_with("<129>"), "{line}");
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "s1", "check_status"), "L4CON");
    assert_eq!(stat_field(&csv, "be", "s1", "chkdown"), "1");
    // Every request goes to s2 and none fails.
    let got = shares(&p, 20);
    assert_eq!(got.get("s2"), Some(&20), "{got:?}");
    s1.up();
    wait_until("s1 up again", || status(&sock, "be", "s1") == "UP");
    let line = logs.wait_for("Server be/s1 is UP");
    assert!(
        line.contains("Server be/s1 is UP, reason: Layer4 check passed, check duration: "),
        "{line}"
    );
    assert!(
        line.contains("2 active and 0 backup servers online."),
        "{line}"
    );
    assert_eq!(shares(&p, 10).len(), 2, "s1 serves again");
}

#[test]
fn the_last_server_down_is_reported_and_answered_with_503() {
    let mut s1 = Switchable::start("s1");
    let logs = Collector::new();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}backend be\n    log {} local1\n    server s1 {} check inter 100ms fall 1 rise 1\nfrontend f\n    {{fe}}\n    default_backend be\n",
        sock.display(),
        logs.0.local_addr().unwrap(),
        s1.addr,
    ));
    s1.down();
    let line = logs.wait_for("has no server available!");
    // local1 (17) * 8 + emerg (0).
    assert!(
        line.starts_with("<136>") && line.contains("backend be has no server available!"),
        "{line}"
    );
    assert_eq!(get(p.addr(), "/x").status, 503);
    s1.up();
    wait_until("s1 up", || status(&sock, "be", "s1") == "UP");
    assert_eq!(get(p.addr(), "/x").text(), "s1");
}

#[test]
fn http_checks_are_judged_by_their_status() {
    let a = Switchable::start("a");
    let b = Switchable::start("b");
    a.health.store(500, Ordering::SeqCst);
    b.health.store(500, Ordering::SeqCst);
    let logs = Collector::new();
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend plain\nbackend plain\n    log {} local0\n    option httpchk GET /health\n    option log-health-checks\n    server a {} check inter 100ms rise 1 fall 1\nbackend wants500\n    option httpchk GET /health HTTP/1.1 example.org\n    http-check expect status 500\n    server b {} check inter 100ms rise 1 fall 1\n",
        sock.display(),
        logs.0.local_addr().unwrap(),
        a.addr,
        b.addr
    ));
    wait_until("a down on its 500", || {
        status(&sock, "plain", "a") == "DOWN"
    });
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "plain", "a", "check_status"), "L7STS");
    assert_eq!(stat_field(&csv, "plain", "a", "check_code"), "500");
    wait_until("b judged", || {
        let csv = Sluice::cli(&sock, "show stat");
        stat_field(&csv, "wants500", "b", "check_status") == "L7OK"
    });
    assert_eq!(status(&sock, "wants500", "b"), "UP");
    a.health.store(200, Ordering::SeqCst);
    wait_until("a up", || status(&sock, "plain", "a") == "UP");
    let line = logs.wait_for("Health check for server plain/a succeeded");
    assert!(
        line.contains("reason: Layer7 check passed, code: 200, info: \"X\", check duration: ")
            && line.contains(", status: 1/1 UP."),
        "{line}"
    );
}

#[test]
fn the_cli_steers_the_balancer() {
    let a = Switchable::start("a");
    let b = Switchable::start("b");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    server a {}\n    server b {}\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    let count = |m: &std::collections::BTreeMap<String, usize>, k: &str| *m.get(k).unwrap_or(&0);
    assert_eq!(status(&sock, "be", "a"), "no check");
    let m = shares(&p, 20);
    assert_eq!((count(&m, "a"), count(&m, "b")), (10, 10));
    // Weights take effect for the next pick.
    assert_eq!(Sluice::cli(&sock, "set weight be/a 3"), "\n");
    assert_eq!(Sluice::cli(&sock, "get weight be/a"), "3 (initial 1)\n\n");
    let m = shares(&p, 40);
    assert_eq!((count(&m, "a"), count(&m, "b")), (30, 10));
    assert_eq!(Sluice::cli(&sock, "set server be/a weight 100%"), "\n");
    assert_eq!(Sluice::cli(&sock, "get weight be/a"), "1 (initial 1)\n\n");
    // Drain and maintenance: no new traffic.
    Sluice::cli(&sock, "set server be/a state drain");
    assert_eq!(status(&sock, "be", "a"), "DRAIN");
    assert_eq!(count(&shares(&p, 10), "b"), 10);
    Sluice::cli(&sock, "set server be/a state ready");
    Sluice::cli(&sock, "disable server be/b");
    assert_eq!(status(&sock, "be", "b"), "MAINT");
    assert_eq!(count(&shares(&p, 10), "a"), 10);
    Sluice::cli(&sock, "enable server be/b");
    Sluice::cli(&sock, "set server be/b health down");
    assert_eq!(count(&shares(&p, 10), "a"), 10);
    Sluice::cli(&sock, "set server be/b health up");
    assert_eq!(shares(&p, 10).len(), 2);
    // The state dump, HAProxy's version 1.
    let state = Sluice::cli(&sock, "show servers state be");
    let mut lines = state.lines();
    assert_eq!(lines.next(), Some("1"));
    assert!(lines.next().unwrap().starts_with("# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight"));
    let row: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(
        &row[1..9],
        ["be", "1", "a", "127.0.0.1", "2", "0", "1", "1"]
    );
    assert_eq!(Sluice::cli(&sock, "show backend"), "# name\nbe\n\n");
    // Errors.
    assert!(Sluice::cli(&sock, "set weight be/zz 2").starts_with("No such server."));
    assert!(Sluice::cli(&sock, "set weight be/a 300")
        .starts_with("Absolute weight can only be between 0 and 256"));
}

#[test]
fn the_cli_enforces_levels() {
    let a = Switchable::start("a");
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {} level operator\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server a {}\n",
        sock.display(),
        a.addr
    ));
    assert_eq!(
        Sluice::cli(&sock, "set weight be/a 2"),
        "Permission denied\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "disable server be/a"),
        "Permission denied\n\n"
    );
    assert_eq!(Sluice::cli(&sock, "set server be/a state drain"), "\n");
    assert_eq!(status(&sock, "be", "a"), "DRAIN");
    assert_eq!(Sluice::cli(&sock, "enable server be/a"), "\n");
    assert_eq!(status(&sock, "be", "a"), "no check");
}

fn activity(sock: &Path, name: &str) -> Vec<u64> {
    let out = Sluice::cli(sock, "show activity");
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {out}"));
    let inner = line.split('[').nth(1).unwrap().trim_end_matches(']');
    inner
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// A TCP listener that accepts and closes: every layer-4 check passes.
fn accepting() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || for _c in l.incoming() {});
    addr
}

#[test]
fn checks_are_spread_over_workers_and_leave_a_busy_one() {
    let target = accepting();
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let servers: String = (0..20)
        .map(|i| format!("    server c{i} {target} check inter 50ms\n"))
        .collect();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {}\n{DEFAULTS}frontend busy\n    {{fe}} thread 1\n    default_backend app\nbackend app\n    server o {}\nbackend checked\n{servers}",
        sock.display(),
        origin.addr
    ));
    // Idle workers: the checks started round-robin stay where they are, half on each.
    wait_until("checks on both workers", || {
        let run = activity(&sock, "checks_run");
        run.iter().all(|&n| n >= 20)
    });
    assert_eq!(activity(&sock, "checks_moved").iter().sum::<u64>(), 0);
    // Worker 1 gets 40 open client connections: its checks move to worker 2.
    let held: Vec<TcpStream> = (0..40)
        .map(|_| {
            let mut c = TcpStream::connect(p.addr()).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut b = [0u8; 256];
            let _ = c.read(&mut b);
            c
        })
        .collect();
    wait_until("checks moving off the busy worker", || {
        activity(&sock, "checks_moved")[1] >= 5
    });
    let before = activity(&sock, "checks_run");
    std::thread::sleep(Duration::from_millis(500));
    let after = activity(&sock, "checks_run");
    let (busy, idle) = (after[0] - before[0], after[1] - before[1]);
    assert!(
        idle > busy,
        "the idle worker runs most checks: busy {busy}, idle {idle}"
    );
    drop(held);
}

/// An agent: answers every connection with the current line, then closes.
fn agent(line: &str) -> (SocketAddr, Arc<std::sync::Mutex<String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let say = Arc::new(std::sync::Mutex::new(line.to_string()));
    let s = say.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let line = s.lock().unwrap().clone();
            let _ = c.write_all(format!("{line}\n").as_bytes());
        }
    });
    (addr, say)
}

#[test]
fn an_agent_steers_state_and_weight() {
    let a = Switchable::start("a");
    let b = Switchable::start("b");
    let (agent_addr, say) = agent("up");
    let logs = Collector::new();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    log {} local0\n    server a {} weight 4 agent-check agent-port {} agent-inter 100ms\n    server b {} weight 4\n",
        sock.display(),
        logs.0.local_addr().unwrap(),
        a.addr,
        agent_addr.port(),
        b.addr
    ));
    let count = |m: &std::collections::BTreeMap<String, usize>, k: &str| *m.get(k).unwrap_or(&0);
    *say.lock().unwrap() = "down #maintenance window".into();
    wait_until("a down", || status(&sock, "be", "a") == "DOWN");
    let line = logs.wait_for("Server be/a is DOWN");
    assert!(
        line.contains("reason: Layer7 wrong status, info: \"maintenance window\""),
        "{line}"
    );
    assert_eq!(count(&shares(&p, 10), "b"), 10);
    *say.lock().unwrap() = "up 50%".into();
    wait_until("a up at half weight", || {
        status(&sock, "be", "a") == "UP" && Sluice::cli(&sock, "get weight be/a").starts_with("2 ")
    });
    let m = shares(&p, 30);
    assert_eq!((count(&m, "a"), count(&m, "b")), (10, 20));
    *say.lock().unwrap() = "drain".into();
    wait_until("a drained", || status(&sock, "be", "a") == "DRAIN");
    assert_eq!(count(&shares(&p, 10), "b"), 10);
    *say.lock().unwrap() = "ready 100%".into();
    wait_until("a ready", || status(&sock, "be", "a") == "UP");
}

#[test]
fn backups_take_over_when_no_active_server_is_left() {
    let s1 = Switchable::start("s1");
    let b1 = Switchable::start("b1");
    let b2 = Switchable::start("b2");
    let (_d, sock) = cli_dir();
    let conf = |all: &str| {
        format!(
            "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n{all}    server s1 {}\n    server b1 {} backup\n    server b2 {} backup\n",
            sock.display(),
            s1.addr,
            b1.addr,
            b2.addr
        )
    };
    let count = |m: &std::collections::BTreeMap<String, usize>, k: &str| *m.get(k).unwrap_or(&0);
    {
        let p = Sluice::start(&conf(""));
        assert_eq!(
            count(&shares(&p, 6), "s1"),
            6,
            "backups idle while s1 is up"
        );
        Sluice::cli(&sock, "set server be/s1 health down");
        assert_eq!(count(&shares(&p, 6), "b1"), 6, "the first backup only");
    }
    let p = Sluice::start(&conf("    option allbackups\n"));
    Sluice::cli(&sock, "set server be/s1 health down");
    let m = shares(&p, 6);
    assert_eq!((count(&m, "b1"), count(&m, "b2")), (3, 3), "all backups");
    Sluice::cli(&sock, "set server be/s1 health up");
    assert_eq!(count(&shares(&p, 6), "s1"), 6);
}

#[test]
fn slowstart_ramps_a_returning_server_up() {
    let mut a = Switchable::start("a");
    let b = Switchable::start("b");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server a {} weight 20 check inter 100ms rise 1 fall 1 slowstart 8s\n    server b {} weight 20\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    let count = |m: &std::collections::BTreeMap<String, usize>, k: &str| *m.get(k).unwrap_or(&0);
    a.down();
    wait_until("a down", || status(&sock, "be", "a") == "DOWN");
    a.up();
    wait_until("a up", || status(&sock, "be", "a") == "UP");
    // Just back: a small share of the traffic (its weight starts near 1 of 20).
    let early = count(&shares(&p, 20), "a");
    assert!(early <= 6, "a got {early} of 20 right after coming back");
    // Once the ramp is over, an equal share.
    wait_until("equal shares", || {
        let m = shares(&p, 20);
        (count(&m, "a"), count(&m, "b")) == (10, 10)
    });
}
