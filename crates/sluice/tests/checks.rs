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

fn status(sock: &Path, be: &str, sv: &str) -> String {
    stat_field(&Sluice::cli(sock, "show stat"), be, sv, "status")
}

/// How many of the answers `shares` counted came from `origin`.
fn count(m: &std::collections::BTreeMap<String, usize>, origin: &str) -> usize {
    *m.get(origin).unwrap_or(&0)
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
    assert_eq!(
        stat_field(&csv, "be", "s1", "check_desc"),
        "Layer4 connection problem"
    );
    assert_eq!(
        stat_field(&csv, "be", "s1", "last_chk"),
        "Connection refused"
    );
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
    let csv = Sluice::cli(&sock, "show stat");
    let down: u64 = stat_field(&csv, "be", "s1", "downtime").parse().unwrap();
    let up: u64 = stat_field(&csv, "be", "s2", "downtime").parse().unwrap();
    assert_eq!(up, 0, "s2 was never down");
    assert!(down <= 60, "s1 was down for a moment: {down} s");
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
        "global\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend plain\nbackend plain\n    log {} local0\n    option httpchk GET /health\n    option log-health-checks\n    server a {} check inter 100ms rise 1 fall 1\nbackend wants500\n    option httpchk GET /health HTTP/1.1 example.org\n    http-check expect status 500\n    server b {} check inter 100ms rise 1 fall 1\nbackend any5xx\n    option httpchk GET /health\n    http-check expect rstatus ^5\n    server c {} check inter 100ms rise 1 fall 1\nbackend ranges\n    option httpchk GET /health\n    http-check expect status 200-299,500-503\n    server d {} check inter 100ms rise 1 fall 1\nbackend outside\n    option httpchk GET /health\n    http-check expect status 200-399\n    server e {} check inter 100ms rise 1 fall 1\n",
        sock.display(),
        logs.0.local_addr().unwrap(),
        a.addr,
        b.addr,
        b.addr,
        b.addr,
        b.addr
    ));
    wait_until("a down on its 500", || {
        status(&sock, "plain", "a") == "DOWN"
    });
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "plain", "a", "check_status"), "L7STS");
    assert_eq!(
        stat_field(&csv, "plain", "a", "check_desc"),
        "Layer7 wrong status"
    );
    assert_eq!(stat_field(&csv, "plain", "a", "check_code"), "500");
    wait_until("b judged", || {
        let csv = Sluice::cli(&sock, "show stat");
        stat_field(&csv, "wants500", "b", "check_status") == "L7OK"
    });
    assert_eq!(status(&sock, "wants500", "b"), "UP");
    wait_until("c judged by its regular expression", || {
        status(&sock, "any5xx", "c") == "UP"
            && stat_field(
                &Sluice::cli(&sock, "show stat"),
                "any5xx",
                "c",
                "check_status",
            ) == "L7OK"
    });
    // Status ranges: b's 500 is in 500-503, not in 200-399.
    wait_until("d and e judged by ranges", || {
        let csv = Sluice::cli(&sock, "show stat");
        stat_field(&csv, "ranges", "d", "check_status") == "L7OK"
            && stat_field(&csv, "outside", "e", "check_status") == "L7STS"
    });
    assert_eq!(status(&sock, "ranges", "d"), "UP");
    assert_eq!(status(&sock, "outside", "e"), "DOWN");
    a.health.store(200, Ordering::SeqCst);
    wait_until("a up", || status(&sock, "plain", "a") == "UP");
    let line = logs.wait_for("Health check for server plain/a succeeded");
    assert!(
        line.contains("reason: Layer7 check passed, code: 200, check duration: ")
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
        "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    server a {} rise 5\n    server b {}\n",
        sock.display(),
        a.addr,
        b.addr
    ));
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
    // Without `check`: the check initialising, at the server's `rise` (HAProxy's reg-tests
    // checks/*_odd_health_checks).
    assert_eq!(&row[10..14], ["1", "0", "5", "0"]);
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

/// `n` kept-alive client connections, each having had one answer: load on the worker that
/// serves them.
fn hold_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut b = [0u8; 256];
            let _ = c.read(&mut b);
            c
        })
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
    // Idle workers: the checks, started round-robin, run on both. (A few may move when two
    // happen to be awake at once on a slow machine: that is the rule working, not a fault.)
    wait_until("checks on both workers", || {
        let run = activity(&sock, "checks_run");
        run.iter().all(|&n| n >= 20)
    });
    // Worker 1 gets 40 open client connections: its checks move to worker 2.
    let held = hold_connections(p.addr(), 40);
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
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "a", "agent_status"), "L7OK");
    assert_eq!(stat_field(&csv, "be", "a", "last_agt"), "ready 100%");
    assert_eq!(stat_field(&csv, "be", "a", "agent_health"), "1");
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
    a.down();
    wait_until("a down", || status(&sock, "be", "a") == "DOWN");
    a.up();
    wait_until("a up", || status(&sock, "be", "a") == "UP");
    // Just back: a small share of the traffic (its weight starts near 1 of 20), and the
    // ramp shows as a throttle percentage.
    let throttle = stat_field(&Sluice::cli(&sock, "show stat"), "be", "a", "throttle");
    assert!(throttle.parse::<u32>().is_ok_and(|t| t < 100), "{throttle}");
    let early = count(&shares(&p, 20), "a");
    assert!(early <= 6, "a got {early} of 20 right after coming back");
    // Once the ramp is over, an equal share.
    wait_until("equal shares", || {
        let m = shares(&p, 20);
        (count(&m, "a"), count(&m, "b")) == (10, 10)
    });
    wait_until("the ramp over", || {
        stat_field(&Sluice::cli(&sock, "show stat"), "be", "a", "throttle").is_empty()
    });
}

/// A server that runs `script` on every connection (a scripted protocol peer).
fn scripted(script: fn(&mut TcpStream)) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                script(&mut c);
                // A close with bytes left unread is a reset, which may overtake what the
                // script sent last (the check then sees a cut answer): end with a FIN and
                // read the rest until the check closes.
                let _ = c.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 512];
                while matches!(c.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// A TCP server echoing what it reads, until the peer closes.
fn echo_server() -> SocketAddr {
    scripted(|c| {
        let mut b = [0u8; 64];
        while let Ok(n) = c.read(&mut b) {
            if n == 0 || c.write_all(&b[..n]).is_err() {
                return;
            }
        }
    })
}

/// Reads until `n` bytes arrived (or the peer stopped).
fn read_n(c: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match c.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => got += k,
        }
    }
    buf.truncate(got);
    buf
}

/// Reads one CRLF-terminated line.
fn read_line(c: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        match c.read(&mut b) {
            Ok(1) => line.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&line).into_owned()
}

/// Starts sluice with one backend per (name, check lines, server address), every server
/// checked every 100 ms with rise 1 and fall 1.
fn checked(backends: &[(&str, &str, SocketAddr)]) -> (Sluice, PathBuf, TempDir) {
    let (d, sock) = cli_dir();
    let mut text = format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend {}\n",
        sock.display(),
        backends[0].0
    );
    for (name, lines, addr) in backends {
        text.push_str(&format!(
            "backend {name}\n{lines}    server s {addr} check inter 100ms rise 1 fall 1\n"
        ));
    }
    (Sluice::start(&text), sock, d)
}

/// Waits until every named backend's server has a check result, then returns the
/// (status, check_status, check_desc) of each.
fn verdicts(sock: &Path, names: &[&str]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    wait_until("every check judged", || {
        let csv = Sluice::cli(sock, "show stat");
        out = names
            .iter()
            .map(|n| {
                (
                    stat_field(&csv, n, "s", "status"),
                    stat_field(&csv, n, "s", "check_status"),
                    stat_field(&csv, n, "s", "last_chk"),
                )
            })
            .collect();
        out.iter().all(|(_, cs, _)| !cs.is_empty())
    });
    out
}

#[test]
fn tcp_check_rules_and_protocol_probes() {
    let redis_ok = scripted(|c| {
        if read_n(c, 14) == b"*1\r\n$4\r\nPING\r\n" {
            let _ = c.write_all(b"+PONG\r\n");
        }
    });
    let redis_bad = scripted(|c| {
        read_n(c, 14);
        let _ = c.write_all(b"-NOAUTH Authentication required.\r\n");
    });
    let smtp_ok = scripted(|c| {
        let _ = c.write_all(b"220 mail.example ESMTP\r\n");
        if read_line(c).starts_with("EHLO check.example") {
            let _ = c.write_all(b"250 mail.example\r\n");
        }
        // HAProxy's smtpchk ends with QUIT and wants its 2xx.
        if read_line(c).starts_with("QUIT") {
            let _ = c.write_all(b"221 2.0.0 Bye\r\n");
        }
    });
    let smtp_bad = scripted(|c| {
        let _ = c.write_all(b"554 go away\r\n");
    });
    let rules_ok = scripted(|c| {
        let _ = c.write_all(b"* OK IMAP ready\r\n");
        if read_n(c, 10) == b"a1 LOGOUT\r" {
            let _ = c.write_all(b"\x00\x01BYE");
        }
    });
    let banner_then_close = scripted(|c| {
        let _ = c.write_all(b"* OK IMAP ready\r\n");
    });
    let (_p, sock, _d) = checked(&[
        ("redis_ok", "    option redis-check\n", redis_ok),
        ("redis_bad", "    option redis-check\n", redis_bad),
        ("smtp_ok", "    option smtpchk EHLO check.example\n", smtp_ok),
        ("smtp_bad", "    option smtpchk\n", smtp_bad),
        (
            "rules_ok",
            "    option tcp-check\n    tcp-check expect rstring ^\\*\\ OK\n    tcp-check send a1\\ LOGOUT\\r\n    tcp-check expect rbinary ^0001\n",
            rules_ok,
        ),
        (
            "rules_bad",
            "    option tcp-check\n    tcp-check comment banner\n    tcp-check expect string READY\n",
            banner_then_close,
        ),
    ]);
    let names = [
        "redis_ok",
        "redis_bad",
        "smtp_ok",
        "smtp_bad",
        "rules_ok",
        "rules_bad",
    ];
    let v = verdicts(&sock, &names);
    let by: std::collections::BTreeMap<&str, &(String, String, String)> =
        names.iter().copied().zip(v.iter()).collect();
    for ok in ["redis_ok", "smtp_ok", "rules_ok"] {
        assert_eq!(
            (by[ok].0.as_str(), by[ok].1.as_str()),
            ("UP", "L7OK"),
            "{ok}: {:?}",
            by[ok]
        );
    }
    for bad in ["redis_bad", "smtp_bad", "rules_bad"] {
        assert_eq!(by[bad].0, "DOWN", "{bad}: {:?}", by[bad]);
    }
    assert_eq!(by["redis_bad"].1, "L7STS");
    assert!(
        by["rules_bad"]
            .2
            .contains("TCPCHK did not match content 'READY' at step 2 comment: banner"),
        "{:?}",
        by["rules_bad"]
    );
}

/// A MySQL greeting: protocol 10, a version, a thread id, and the rest zeroed.
fn mysql_greeting() -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"5.7.0-fake\0");
    p.extend_from_slice(&[1, 0, 0, 0]);
    p.extend_from_slice(&[0; 20]);
    let mut pkt = (p.len() as u32).to_le_bytes()[..3].to_vec();
    pkt.push(0);
    pkt.extend_from_slice(&p);
    pkt
}

#[test]
fn database_and_directory_probes() {
    let pg_ok = scripted(|c| {
        let head = read_n(c, 4);
        let len = u32::from_be_bytes(head.clone().try_into().unwrap()) as usize;
        let rest = read_n(c, len - 4);
        if rest[..4] == [0, 3, 0, 0] && rest.ends_with(b"user\0app\0\0") {
            // AuthenticationOk.
            let _ = c.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
        }
    });
    let pg_bad = scripted(|c| {
        read_n(c, 4);
        let _ = c.write_all(b"E\x00\x00\x00\x10SFATAL\x00\x00");
    });
    let mysql_ok = scripted(|c| {
        let _ = c.write_all(&mysql_greeting());
        let head = read_n(c, 4);
        if head.len() == 4 && head[3] == 1 {
            let len = usize::from(head[0]) | usize::from(head[1]) << 8;
            let body = read_n(c, len);
            if body[32..].starts_with(b"checker\0") {
                let _ = c.write_all(&[7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]);
            }
        }
    });
    let mysql_denied = scripted(|c| {
        let _ = c.write_all(&mysql_greeting());
        read_n(c, 4);
        let mut err = vec![0xff, 0x15, 0x04, b'#'];
        err.extend_from_slice(b"28000Access denied");
        let mut pkt = (err.len() as u32).to_le_bytes()[..3].to_vec();
        pkt.push(2);
        pkt.extend_from_slice(&err);
        let _ = c.write_all(&pkt);
    });
    let ldap_ok = scripted(|c| {
        if read_n(c, 14)[5] == 0x60 {
            let _ = c.write_all(&[
                0x30, 0x0c, 0x02, 0x01, 0x01, 0x61, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00,
            ]);
        }
    });
    let ldap_bad = scripted(|c| {
        read_n(c, 14);
        let _ = c.write_all(&[
            0x30, 0x0c, 0x02, 0x01, 0x01, 0x61, 0x07, 0x0a, 0x01, 0x31, 0x04, 0x00, 0x04, 0x00,
        ]);
    });
    let (_p, sock, _d) = checked(&[
        ("pg_ok", "    option pgsql-check user app\n", pg_ok),
        ("pg_bad", "    option pgsql-check user app\n", pg_bad),
        ("my_greet", "    option mysql-check\n", mysql_denied),
        ("my_ok", "    option mysql-check user checker\n", mysql_ok),
        (
            "my_denied",
            "    option mysql-check user checker\n",
            mysql_denied,
        ),
        ("ldap_ok", "    option ldap-check\n", ldap_ok),
        ("ldap_bad", "    option ldap-check\n", ldap_bad),
    ]);
    let names = [
        "pg_ok",
        "pg_bad",
        "my_greet",
        "my_ok",
        "my_denied",
        "ldap_ok",
        "ldap_bad",
    ];
    let v = verdicts(&sock, &names);
    let got: Vec<(&str, &str, &str)> = names
        .iter()
        .zip(&v)
        .map(|(n, (s, cs, _))| (*n, s.as_str(), cs.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("pg_ok", "UP", "L7OK"),
            ("pg_bad", "DOWN", "L7RSP"),
            ("my_greet", "UP", "L7OK"),
            ("my_ok", "UP", "L7OK"),
            ("my_denied", "DOWN", "L7STS"),
            ("ldap_ok", "UP", "L7OK"),
            ("ldap_bad", "DOWN", "L7STS"),
        ]
    );
    assert!(v[4].2.contains("Access denied"), "{:?}", v[4]);
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(
        stat_field(&csv, "ldap_bad", "s", "check_desc"),
        "Layer7 wrong status"
    );
}

#[test]
fn http_check_send_and_disable_on_404() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = vec![0u8; 4096];
            let n = c.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            s2.lock().unwrap().push(req.clone());
            let status = if req.starts_with("HEAD /gone") {
                404
            } else {
                200
            };
            let _ =
                c.write_all(format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").as_bytes());
        }
    });
    let (_p, sock, _d) = checked(&[
        (
            "sent",
            "    option httpchk\n    http-check send meth GET uri /status ver HTTP/1.1 hdr Host svc.example hdr X-Probe 1\n",
            addr,
        ),
        (
            "gone",
            "    option httpchk HEAD /gone\n    http-check disable-on-404\n",
            addr,
        ),
    ]);
    let v = verdicts(&sock, &["sent", "gone"]);
    assert_eq!(v[0].0, "UP");
    // A 404 with disable-on-404: up, but no new traffic.
    assert_eq!(v[1].0, "NOLB");
    assert_eq!(v[1].1, "L7OKC");
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter().any(|r| r.starts_with(
            "GET /status HTTP/1.1\r\nHost: svc.example\r\nX-Probe: 1\r\nconnection: close\r\n\r\n"
        )),
        "{seen:?}"
    );
}

#[test]
fn the_cli_listens_on_tcp_too() {
    let a = Switchable::start("a");
    let (_d, sock) = cli_dir();
    let port = free_port();
    let p = Sluice::start(&format!(
        "global\n    stats socket ipv4@*:{port} level admin\n    stats socket {} level user\n    stats socket {{fd}} level operator\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server a {}\n",
        sock.display(),
        a.addr
    ));
    // The inherited socket (fd@N) answers too, at its own level.
    let mut c = TcpStream::connect(p.addrs[0]).unwrap();
    c.write_all(b"disable server be/a\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert_eq!(out, "Permission denied\n\n");
    let tcp = |cmd: &str| {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(format!("{cmd}\n").as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    };
    assert_eq!(tcp("show backend"), "# name\nbe\n\n");
    assert_eq!(tcp("set weight be/a 5"), "\n");
    assert_eq!(tcp("get weight be/a"), "5 (initial 1)\n\n");
    // The unix socket has its own level.
    assert_eq!(
        Sluice::cli(&sock, "set weight be/a 2"),
        "Permission denied\n\n"
    );
    assert_eq!(Sluice::cli(&sock, "get weight be/a"), "5 (initial 1)\n\n");
}

#[test]
fn requests_queued_on_a_server_that_goes_down_move_to_another() {
    // s1 holds `/hold` until the test opens the gate; anything else answers at once.
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s1 = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let g = g.clone();
            std::thread::spawn(move || {
                let head = read_line(&mut c);
                while !head.contains("/hold") || !g.load(Ordering::SeqCst) {
                    if !head.contains("/hold") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\ns1",
                );
            });
        }
    });
    let s2 = Switchable::start("s2");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}    timeout queue 20s\nfrontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {s1} maxconn 1\n    server s2 {}\n",
        sock.display(),
        s2.addr
    ));
    // Only s1 in service: the first request takes its one slot, the second waits for it.
    Sluice::cli(&sock, "disable server be/s2");
    let addr = p.addr();
    let first = std::thread::spawn(move || get(addr, "/hold").text());
    wait_until("the slot taken", || {
        stat_field(&Sluice::cli(&sock, "show stat"), "be", "s1", "scur") == "1"
    });
    let second = std::thread::spawn(move || get(addr, "/queued").text());
    wait_until("the second request queued", || {
        stat_field(&Sluice::cli(&sock, "show stat"), "be", "s1", "qcur") == "1"
    });
    // s2 back, s1 down: the queued request is served by s2 while s1 still holds the first.
    Sluice::cli(&sock, "enable server be/s2");
    Sluice::cli(&sock, "set server be/s1 health down");
    assert_eq!(second.join().unwrap(), "s2");
    assert!(
        !first.is_finished(),
        "the first request was not released yet"
    );
    gate.store(true, Ordering::SeqCst);
    assert_eq!(first.join().unwrap(), "s1");
    assert_eq!(
        stat_field(&Sluice::cli(&sock, "show stat"), "be", "s1", "wredis"),
        "1"
    );
}

#[test]
fn checks_and_agents_can_be_paused_and_overridden() {
    let mut s1 = Switchable::start("s1");
    let s2 = Switchable::start("s2");
    let (agent_addr, _say) = agent("up");
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {} check inter 50ms rise 1 fall 1\n    server s2 {} check inter 50ms rise 1 fall 1 agent-check agent-port {} agent-inter 50ms\n",
        sock.display(),
        s1.addr,
        s2.addr,
        agent_addr.port()
    ));
    let run = || activity(&sock, "checks_run")[0];
    wait_until("both up", || {
        status(&sock, "be", "s1") == "UP" && status(&sock, "be", "s2") == "UP"
    });
    assert_eq!(Sluice::cli(&sock, "disable health be/s1"), "\n");
    s1.down();
    // Other checks go on (s2's, its agent's) while s1's state stays as it was.
    let before = run();
    wait_until("a dozen more checks", || run() >= before + 12);
    let csv = Sluice::cli(&sock, "show stat");
    // Up, its check disabled: HAProxy 2.6 says "no check" (stats.c, an up server whose
    // check is not enabled).
    assert_eq!(stat_field(&csv, "be", "s1", "status"), "no check");
    assert_eq!(stat_field(&csv, "be", "s1", "chkfail"), "0");
    assert_eq!(Sluice::cli(&sock, "enable health be/s1"), "\n");
    wait_until("s1 down once checked", || {
        status(&sock, "be", "s1") == "DOWN"
    });
    // An agent paused, then overridden from the CLI.
    assert_eq!(Sluice::cli(&sock, "disable agent be/s2"), "\n");
    assert_eq!(Sluice::cli(&sock, "set server be/s2 agent down"), "\n");
    assert_eq!(status(&sock, "be", "s2"), "DOWN (agent)");
    assert_eq!(Sluice::cli(&sock, "set server be/s2 agent up"), "\n");
    assert_eq!(status(&sock, "be", "s2"), "UP");
    assert!(
        Sluice::cli(&sock, "set server be/s1 agent up").starts_with("Server has no agent check.")
    );
}

#[test]
fn checks_per_worker_are_capped() {
    // Every check takes 50 ms at this server, which records how many run at once.
    let now = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (n2, m2) = (now.clone(), most.clone());
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let (n, m) = (n2.clone(), m2.clone());
            std::thread::spawn(move || {
                let cur = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(cur, Ordering::SeqCst);
                read_line(&mut c);
                std::thread::sleep(Duration::from_millis(50));
                n.fetch_sub(1, Ordering::SeqCst);
                let _ = c.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            });
        }
    });
    let (_d, sock) = cli_dir();
    let servers: String = (0..6)
        .map(|i| format!("    server c{i} {addr} check inter 100ms\n"))
        .collect();
    let _p = Sluice::start(&format!(
        "global\n    nbthread 1\n    tune.max-checks-per-thread 1\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    option httpchk GET /\n{servers}",
        sock.display()
    ));
    wait_until("checks waiting for their turn", || {
        activity(&sock, "checks_queued")[0] >= 5 && activity(&sock, "checks_run")[0] >= 12
    });
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "never two checks at once on the worker"
    );
}

#[test]
fn traffic_errors_take_a_server_down_with_observe() {
    // s1 answers its health check but fails real requests with 503.
    let s1 = scripted(|c| {
        let line = read_line(c);
        while read_line(c).len() > 2 {}
        let status = if line.contains("/health") { 200 } else { 503 };
        let _ = c.write_all(
            format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\ns1")
                .as_bytes(),
        );
    });
    let s2 = Switchable::start("s2");
    let logs = Collector::new();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    log {} local0\n    option httpchk GET /health\n    server s1 {s1} check inter 10s observe layer7 error-limit 3 on-error mark-down\n    server s2 {}\n",
        sock.display(),
        logs.0.local_addr().unwrap(),
        s2.addr
    ));
    wait_until("s1 checked up", || status(&sock, "be", "s1") == "UP");
    // Round robin: every other request goes to s1 and fails there.
    let mut failed = 0;
    for i in 0..6 {
        let r = get(p.addr(), &format!("/r{i}"));
        failed += usize::from(r.status == 503);
    }
    assert_eq!(failed, 3);
    let line = logs.wait_for("Server be/s1 is DOWN");
    assert!(
        line.contains("reason: Health analyze, info: \"Detected 3 consecutive errors, last one was: L7 bad status\""),
        "{line}"
    );
    assert!(status(&sock, "be", "s1").starts_with("DOWN"));
    // Every error traffic showed counts as a failed health analysis.
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "s1", "hanafail"), "3");
    assert_eq!(stat_field(&csv, "be", "s2", "hanafail"), "");
    let got = shares(&p, 6);
    assert_eq!(got.get("s2"), Some(&6), "{got:?}");
}

#[test]
fn a_server_marked_down_loses_its_sessions_and_trackers_follow() {
    let mut health = Switchable::start("health");
    let echo = echo_server();
    let (_d, sock) = cli_dir();
    let hp = health.addr.port();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n    server e {echo} check port {hp} inter 100ms rise 1 fall 1 on-marked-down shutdown-sessions\nbackend mirror\n    server m {echo} track raw/e\n",
        sock.display()
    ));
    wait_until("e up", || status(&sock, "raw", "e") == "UP");
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"hello").unwrap();
    assert_eq!(read_n(&mut c, 5), b"hello");
    // The check port goes away: e is marked down and its relayed connection is closed.
    health.down();
    let mut b = [0u8; 8];
    assert_eq!(c.read(&mut b).unwrap_or(0), 0, "the session was shut down");
    assert!(status(&sock, "raw", "e").starts_with("DOWN"));
    wait_until("the tracking server follows", || {
        stat_field(&Sluice::cli(&sock, "show stat"), "mirror", "m", "status") == "DOWN"
            && Sluice::cli(&sock, "show servers state mirror").contains(" m 127.0.0.1 0 ")
    });
    health.up();
    wait_until("e up again", || status(&sock, "raw", "e") == "UP");
    wait_until("the tracking server up again", || {
        stat_field(&Sluice::cli(&sock, "show stat"), "mirror", "m", "status") == "no check"
            && Sluice::cli(&sock, "show servers state mirror").contains(" m 127.0.0.1 2 ")
    });
}

#[test]
fn two_hundred_checks_spread_evenly_over_eight_workers() {
    let target = accepting();
    let (_d, sock) = cli_dir();
    let servers: String = (0..200)
        .map(|i| format!("    server c{i} {target} check inter 200ms\n"))
        .collect();
    let _p = Sluice::start(&format!(
        "global\n    nbthread 8\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend checked\nbackend checked\n{servers}",
        sock.display()
    ));
    // Two intervals: every check has run at least twice.
    wait_until("two rounds of checks", || {
        activity(&sock, "checks_run").iter().sum::<u64>() >= 400
    });
    // The tolerance: a worker takes moving checks only below twice its fair share, and
    // idle workers rarely move any, so every worker stays between a quarter and twice the
    // mean.
    let run = activity(&sock, "checks_run");
    let mean = run.iter().sum::<u64>() as f64 / run.len() as f64;
    for (w, n) in run.iter().enumerate() {
        let share = *n as f64 / mean;
        assert!(
            (0.25..=2.0).contains(&share),
            "worker {w} ran {n} checks, mean {mean:.0}: {run:?}"
        );
    }
}

#[test]
fn a_check_never_runs_twice_at_once_even_while_moving() {
    // One listener per server. A check is "in progress" from its connection's accept until
    // the server answers (the answer comes 40 ms later): a second connection accepted while
    // one is in progress would be a second check of the same server at once. Marking the
    // answer as sent before sending it, and the accept after accepting, can only hide an
    // overlap on a slow machine, never invent one.
    let overlaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let addrs: Vec<SocketAddr> = (0..10)
        .map(|_| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let busy = Arc::new(AtomicBool::new(false));
            let overlaps = overlaps.clone();
            std::thread::spawn(move || {
                for c in l.incoming() {
                    let Ok(mut c) = c else { continue };
                    if busy.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let busy = busy.clone();
                    std::thread::spawn(move || {
                        read_line(&mut c);
                        std::thread::sleep(Duration::from_millis(40));
                        busy.store(false, Ordering::SeqCst);
                        let _ = c.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
                    });
                }
            });
            addr
        })
        .collect();
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let servers: String = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("    server c{i} {a} check inter 30ms\n"))
        .collect();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {}\n{DEFAULTS}frontend busy\n    {{fe}} thread 1\n    default_backend app\nbackend app\n    server o {}\nbackend checked\n    option httpchk GET /\n    timeout check 5s\n{servers}",
        sock.display(),
        origin.addr
    ));
    // Load on worker 1 makes the checks move while they run every 30 ms.
    let held = hold_connections(p.addr(), 20);
    wait_until("checks moving and running", || {
        activity(&sock, "checks_moved")[1] >= 5
            && activity(&sock, "checks_run").iter().sum::<u64>() >= 150
    });
    drop(held);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a server saw two checks at once"
    );
}

#[test]
fn a_server_moves_to_another_address_at_run_time() {
    let old = Switchable::start("old");
    let new = Switchable::start("new");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server a {} check inter 100ms\n",
        sock.display(),
        old.addr
    ));
    // A kept-alive client: its server connection is pooled, and must not be reused after
    // the move.
    let mut c = p.connect();
    assert_eq!(c.get("/1").text(), "old");
    let answer = Sluice::cli(
        &sock,
        &format!("set server be/a addr 127.0.0.1 port {}", new.addr.port()),
    );
    assert_eq!(
        answer,
        format!(
            "IP changed from '127.0.0.1' to '127.0.0.1', port changed from '{}' to '{}' by 'stats socket command'\n\n",
            old.addr.port(),
            new.addr.port()
        )
    );
    assert_eq!(c.get("/2").text(), "new");
    assert_eq!(get(p.addr(), "/3").text(), "new");
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "a", "addr"), new.addr.to_string());
    // A new name needs run-time resolution, which a server without `resolvers` has not:
    // HAProxy 2.6's answers.
    assert_eq!(
        Sluice::cli(&sock, "set server be/a fqdn app.test"),
        "set server <b>/<s> fqdn failed because no resolution is configured.\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "set server be/a fqdn"),
        "set server <b>/<s> fqdn requires a FQDN.\n\n"
    );
}

#[test]
fn maintenance_with_shutdown_sessions_ends_connections() {
    let echo = echo_server();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {} level admin\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n    server e {echo} on-marked-down shutdown-sessions\n",
        sock.display()
    ));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"ping").unwrap();
    assert_eq!(read_n(&mut c, 4), b"ping");
    Sluice::cli(&sock, "set server raw/e state maint");
    let mut b = [0u8; 8];
    assert_eq!(c.read(&mut b).unwrap_or(0), 0, "the session was shut down");
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "raw", "e", "status"), "MAINT");
    assert_eq!(stat_field(&csv, "raw", "e", "uweight"), "1");
}

#[test]
fn a_server_back_up_ends_the_backup_sessions_when_asked() {
    let mut health = Switchable::start("health");
    let echo = echo_server();
    let (_d, sock) = cli_dir();
    let hp = health.addr.port();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n    server a {echo} check port {hp} inter 100ms rise 1 fall 1 on-marked-up shutdown-backup-sessions\n    server b {echo} backup\n",
        sock.display()
    ));
    wait_until("a up", || status(&sock, "raw", "a") == "UP");
    health.down();
    wait_until("a down", || status(&sock, "raw", "a") == "DOWN");
    // Served by the backup meanwhile.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"hello").unwrap();
    assert_eq!(read_n(&mut c, 5), b"hello");
    assert_eq!(
        stat_field(&Sluice::cli(&sock, "show stat"), "raw", "b", "scur"),
        "1"
    );
    health.up();
    let mut b = [0u8; 8];
    assert_eq!(
        c.read(&mut b).unwrap_or(0),
        0,
        "the backup session was shut down"
    );
    assert_eq!(status(&sock, "raw", "a"), "UP");
}

/// How a check's connection ended, as the server saw it after answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Reset,
    Fin,
    Other,
}

/// What a test server saw: each request and how its connection ended.
type Seen = Arc<std::sync::Mutex<Vec<(String, Ending)>>>;

/// An HTTP server that answers every request with a whole response (Content-Length) and
/// then keeps the connection open until the client ends it, recording each request and
/// how its connection ended.
fn keeps_open() -> (SocketAddr, Seen) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let seen = s2.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(20)));
                let mut req = Vec::new();
                let mut b = [0u8; 4096];
                // The head, then as many body bytes as it announces.
                let whole = |r: &[u8]| {
                    let Some(end) = r.windows(4).position(|w| w == b"\r\n\r\n") else {
                        return false;
                    };
                    let head = String::from_utf8_lossy(&r[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    r.len() >= end + 4 + len
                };
                while !whole(&req) {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                let ending = match c.read(&mut b) {
                    Ok(0) => Ending::Fin,
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ending::Reset,
                    _ => Ending::Other,
                };
                let req = String::from_utf8_lossy(&req).into_owned();
                seen.lock().unwrap().push((req, ending));
            });
        }
    });
    (addr, seen)
}

#[test]
fn an_http_check_judges_a_whole_answer_and_ends_with_a_reset() {
    let (quick, quick_seen) = keeps_open();
    let (lingering, lingering_seen) = keeps_open();
    // `timeout check` is shorter than the server's patience: a check that waited for the
    // server to close would time out (L7TOUT) instead of passing.
    let (_p, sock, _d) = checked(&[
        (
            "quick",
            "    timeout check 2s\n    option httpchk GET /health\n",
            quick,
        ),
        (
            "lingering",
            "    timeout check 2s\n    option httpchk GET /health\n    http-check connect linger\n",
            lingering,
        ),
    ]);
    let v = verdicts(&sock, &["quick", "lingering"]);
    assert_eq!((v[0].0.as_str(), v[0].1.as_str()), ("UP", "L7OK"), "{v:?}");
    assert_eq!((v[1].0.as_str(), v[1].1.as_str()), ("UP", "L7OK"), "{v:?}");
    wait_until("three checks of each ended", || {
        quick_seen.lock().unwrap().len() >= 3 && lingering_seen.lock().unwrap().len() >= 3
    });
    // By default the check's connection ends with a reset (no TIME_WAIT on either side);
    // `linger` closes it with a FIN.
    let endings = |s: &Seen| -> Vec<Ending> { s.lock().unwrap().iter().map(|e| e.1).collect() };
    assert!(
        endings(&quick_seen).iter().all(|e| *e == Ending::Reset),
        "{:?}",
        endings(&quick_seen)
    );
    assert!(
        endings(&lingering_seen).iter().all(|e| *e == Ending::Fin),
        "{:?}",
        endings(&lingering_seen)
    );
}

#[test]
fn check_connect_rules_and_variables() {
    let (http_at, http_seen) = keeps_open();
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let l2 = lines.clone();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_at = tcp.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in tcp.incoming() {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let line = read_line(&mut c);
            l2.lock().unwrap().push(line);
            let _ = c.write_all(b"OK\r\n");
        }
    });
    // Both servers are configured on a closed port: only the connect rules' `port` (and
    // `addr`) lead the checks to the listening ones.
    let (_nowhere_port, nowhere) = refused_addr();
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {sock}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend web\n\
         backend web\n    option httpchk\n    http-check connect addr 127.0.0.1 port {hp} comment probe\n    \
         http-check send meth POST uri-lf /health/%[srv_name]?be=%[be_id] hdr X-Backend %b hdr X-Path %[env(PATH)] body-lf id=%[srv_id]\n    \
         server app1 {nowhere} check inter 100ms rise 1 fall 1\n\
         backend kv\n    option tcp-check\n    tcp-check connect port {tp} linger\n    tcp-check send-lf \"HELLO %[be_name]/%s 100%%\\r\\n\"\n    tcp-check expect string OK\n    \
         server kv1 {nowhere} check inter 100ms rise 1 fall 1\n",
        sock = sock.display(),
        hp = http_at.port(),
        tp = tcp_at.port(),
    ));
    wait_until("both checks passed", || {
        let csv = Sluice::cli(&sock, "show stat");
        stat_field(&csv, "web", "app1", "check_status") == "L7OK"
            && stat_field(&csv, "kv", "kv1", "check_status") == "L7OK"
    });
    let req = http_seen.lock().unwrap()[0].0.clone();
    let web_id = stat_field(&Sluice::cli(&sock, "show stat"), "web", "BACKEND", "iid");
    assert!(
        req.starts_with(&format!("POST /health/app1?be={web_id} HTTP/1.0\r\n")),
        "{req}"
    );
    assert!(req.contains("\r\nX-Backend: web\r\n"), "{req}");
    let path = std::env::var("PATH").unwrap_or_default();
    assert!(req.contains(&format!("\r\nX-Path: {path}\r\n")), "{req}");
    assert!(req.contains("\r\ncontent-length: 4\r\n"), "{req}");
    assert!(req.ends_with("\r\n\r\nid=1"), "{req}");
    assert_eq!(lines.lock().unwrap()[0], "HELLO kv/kv1 100%\r\n");
}

#[test]
fn check_connect_and_variables_refuse_what_they_cannot_do() {
    let base = "defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\nbackend b\n";
    for (line, says) in [
        (
            "    http-check connect proto h3\n",
            "argument 2 'h3': expects h1 or h2",
        ),
        (
            "    tcp-check connect send-proxy\n",
            "'send-proxy' is not supported yet",
        ),
        ("    http-check connect port\n", "a value after port"),
        (
            "    http-check connect addr nowhere\n",
            "expects an IP address",
        ),
        (
            "    tcp-check send-lf \"%ci\"\n",
            "unknown variable at '%ci'",
        ),
        (
            "    http-check send uri-lf /%[req.hdr(host)]\n",
            "unknown variable",
        ),
        (
            "    http-check connect port 80\n    http-check connect port 81\n",
            "a second 'http-check connect'",
        ),
    ] {
        let (ok, err) = check_config(&format!("{base}{line}    server s 127.0.0.1:1\n"));
        assert!(!ok, "{line} was accepted");
        assert!(
            err.contains("c.cfg:") && err.contains(says),
            "{line}: {err}"
        );
    }
}

#[test]
fn server_states_saved_before_a_restart_are_taken_back() {
    let (a, b, c) = (Origin::start("a"), Origin::start("b"), Origin::start("c"));
    let servers = format!(
        "    server a {}\n    server b {}\n    server c {}\n",
        a.addr, b.addr, c.addr
    );
    let (d, sock) = cli_dir();
    let first = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n{servers}backend other\n{servers}",
        sock.display()
    ));
    for cmd in [
        "set server be/a state maint",
        "set weight be/b 7",
        "set server be/c state drain",
        "set weight other/c 3",
    ] {
        assert_eq!(Sluice::cli(&sock, cmd), "\n", "{cmd}");
    }
    // Saved as operators do before a reload: `show servers state` into the file; `other`
    // has a file of its own, under server-state-base.
    let global = d.write("global.state", &Sluice::cli(&sock, "show servers state"));
    d.write(
        "other.state",
        &Sluice::cli(&sock, "show servers state other"),
    );
    drop(first);
    let sock2 = d.0.join("second.sock");
    let second = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n    server-state-file {global}\n    server-state-base {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    load-server-state-from-file global\n{servers}backend other\n    load-server-state-from-file local\n    server-state-file-name other.state\n{servers}",
        sock2.display(),
        d.0.display()
    ));
    let state = Sluice::cli(&sock2, "show servers state");
    let row = |be: &str, srv: &str| -> Vec<String> {
        state
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(be) && l.split(' ').nth(3) == Some(srv))
            .unwrap_or_else(|| panic!("{be}/{srv}: {state}"))
            .split(' ')
            .map(String::from)
            .collect()
    };
    // Columns: srv_admin_state (6) and srv_uweight (7).
    assert_eq!(row("be", "a")[6], "1", "{state}");
    assert_eq!(row("be", "b")[7], "7", "{state}");
    assert_eq!(row("be", "c")[6], "8", "{state}");
    assert_eq!(row("other", "c")[7], "3", "{state}");
    assert_eq!(row("other", "a")[6], "0", "{state}");
    // Only b takes new requests in `be`: a is in maintenance and c drains.
    for _ in 0..6 {
        assert!(get(second.addr(), "/").text().starts_with("b "));
    }
}

/// A server that answers every check 200 and keeps what each sent (its first read).
fn recording_check_server() -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = vec![0u8; 4096];
            let n = c.read(&mut buf).unwrap_or(0);
            s2.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (addr, seen)
}

#[test]
fn a_backends_own_option_httpchk_drops_the_inherited_http_check_rules() {
    let (addr, seen) = recording_check_server();
    let p = Sluice::start(&format!(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\n    option httpchk GET /inherited\n    http-check send hdr X-Probe 1\n    http-check expect status 201\nfrontend f\n    {{fe}}\n    default_backend a\nfrontend g\n    {{fe}}\n    default_backend b\nbackend a\n    server s {addr} check inter 100ms fall 1\nbackend b\n    option httpchk GET /own\n    server s {addr} check inter 100ms fall 1\n"
    ));
    let has = |start: &str| {
        let seen = seen.lock().unwrap();
        seen.iter().find(|r| r.starts_with(start)).cloned()
    };
    let count = |start: &str| {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|r| r.starts_with(start))
            .count()
    };
    // `a` inherits the defaults' expect (201), which its server's 200 fails; `b` has been
    // judged at least once when its second check arrives.
    wait_until("a down and b checked twice", || {
        get(p.addrs[0], "/").status == 503 && count("GET /own ") >= 2
    });
    // `a` inherits the defaults' request whole; `b`'s own `option httpchk` starts anew, as
    // HAProxy's does: without the header, and without the expect (2xx and 3xx pass).
    assert!(has("GET /inherited ").unwrap().contains("X-Probe: 1\r\n"));
    assert!(!has("GET /own ").unwrap().contains("X-Probe"));
    assert_eq!(get(p.addrs[1], "/").status, 200);
}

#[test]
fn send_state_tells_the_server_its_state_as_haproxy_words_it() {
    let origin = Origin::start("o");
    let port = origin.addr.port();
    let _p = Sluice::start(&format!(
        "{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    option httpchk GET /health\n    http-check send-state\n    server s {} check inter 100ms\n",
        origin.addr
    ));
    let states = || -> Vec<String> {
        origin
            .requests()
            .iter()
            .filter(|r| r.target == "/health")
            .filter_map(|r| r.header("x-haproxy-server-state").map(str::to_string))
            .collect()
    };
    wait_until("three checks", || states().len() >= 3);
    let got = states();
    // Health starts at `rise` (2 of 2+3-1, "UP 1/3"); a passed check makes it full at once,
    // as in HAProxy.
    for (state, want) in got.iter().zip(["UP 1/3", "UP", "UP"]) {
        let (head, rest) = state.split_once(';').unwrap();
        assert_eq!(head, want, "{got:?}");
        assert!(
            rest.starts_with(&format!(
                " address=127.0.0.1; port={port}; name=be/s; node="
            )) && rest.ends_with("; weight=1/1; scur=0/0; qcur=0"),
            "{state}"
        );
    }
}

/// During a `slowstart` ramp the state header says how far it went (`; throttle=N%`, whole
/// seconds of the ramp's, at least 1%), as HAProxy's does.
#[test]
fn send_state_reports_the_slowstart_throttle() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let _p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    option httpchk GET /health\n    http-check send-state\n    server s {} check inter 100ms slowstart 60s\n",
        sock.display(),
        origin.addr
    ));
    let states = || -> Vec<String> {
        origin
            .requests()
            .iter()
            .filter_map(|r| r.header("x-haproxy-server-state").map(str::to_string))
            .collect()
    };
    wait_until("a first check", || !states().is_empty());
    assert!(
        !states().iter().any(|s| s.contains("throttle")),
        "{:?}",
        states()
    );
    // Back from maintenance: the weight ramps up over 60 s.
    Sluice::cli(&sock, "set server be/s state maint");
    Sluice::cli(&sock, "set server be/s state ready");
    wait_until("a check during the ramp", || {
        states()
            .iter()
            .any(|s| s.ends_with("; qcur=0; throttle=1%"))
    });
}

/// A server that sends `hello\r\n` to each connection, then closes it (`closing`) or keeps
/// it open without a word more.
fn banner_server(closing: bool) -> SocketAddr {
    let script: fn(&mut TcpStream) = if closing {
        |c| {
            let _ = c.write_all(b"hello\r\n");
            // Whatever the check sends is read before the close, so that it ends with a FIN.
            let _ = c.set_read_timeout(Some(Duration::from_millis(50)));
            let _ = c.read(&mut [0u8; 64]);
        }
    } else {
        |c| {
            let _ = c.write_all(b"hello\r\n");
            let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
            while let Ok(1..) = c.read(&mut [0u8; 64]) {}
        }
    };
    scripted(script)
}

/// `tcp-check` reports word for word as HAProxy 2.6 words them: failing connects (explicit
/// and implicit), mismatches (string, binary, regex, negated), timeouts, comments (their own
/// and `tcp-check comment`, with HAProxy's way of attaching them), `on-error`,
/// `on-success`, `ok-status`, `error-status`, `tout-status`, `status-code`. The expected
/// lines (durations left out) are HAProxy 2.6.12's, recorded from the same configuration
/// and servers by `testdata/haproxy-2.6/record-check-reports.sh`.
#[test]
fn tcp_check_reports_match_haproxys() {
    let (closing, lingering) = (banner_server(true), banner_server(false));
    let refused = free_port();
    check_reports_match(
        "tcp-check",
        &[
            ("{CLOSING_PORT}", closing.port().to_string()),
            ("{CLOSING}", closing.to_string()),
            ("{LINGERING}", lingering.to_string()),
            ("{REFUSED_ADDR}", format!("127.0.0.1:{refused}")),
            ("{REFUSED}", refused.to_string()),
        ],
    );
}

/// `http-check expect hdr|fhdr` (name and value patterns, `-m` methods, comma-separated
/// values, negation) judges and reports as HAProxy 2.6.12 does (recorded as above).
#[test]
fn http_check_header_expectations_match_haproxys() {
    let server = scripted(|c| {
        read_head(c);
        let _ = c.write_all(
            b"HTTP/1.1 200 Fine\r\nX-Version: 1.2, 2.0\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        );
    });
    check_reports_match("http-check-hdr", &[("{SERVER}", server.to_string())]);
}

/// `http-check comment` and `comment` on `expect`/`send` name the rules as HAProxy attaches
/// them (`... comment: TEXT` after a failure's info); a body mismatch reports "HTTP content
/// check did not match"; a failed connect says why, without steps (recorded as above).
#[test]
fn http_check_comments_and_reports_match_haproxys() {
    let server = scripted(|c| {
        read_head(c);
        let _ =
            c.write_all(b"HTTP/1.1 200 Fine\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    });
    let refused = free_port();
    check_reports_match(
        "http-check-comments",
        &[
            ("{SERVER}", server.to_string()),
            ("{REFUSED}", refused.to_string()),
        ],
    );
}

/// `option smtpchk` as HAProxy 2.6.12 runs it: any reply code, a 2xx banner, the greeting
/// and its 2xx (multi-line accepted), QUIT and its 2xx, reporting the last reply's code and
/// text; a refusing banner fails at once, a refused greeting waits for a 2xx until the
/// timeout (recorded as above).
#[test]
fn smtp_checks_match_haproxys() {
    /// An SMTP server greeting with `banner` and answering HELO/EHLO with `helo`, QUIT with
    /// 221; it keeps the connection until the client closes.
    fn smtp(banner: &'static [u8], helo: &'static [u8]) -> SocketAddr {
        serve_each(move |mut c| {
            let _ = c.write_all(banner);
            loop {
                let line = read_line(&mut c);
                let upper = line.to_ascii_uppercase();
                if upper.starts_with("HELO") || upper.starts_with("EHLO") {
                    let _ = c.write_all(helo);
                } else if upper.starts_with("QUIT") {
                    let _ = c.write_all(b"221 2.0.0 Bye\r\n");
                    return;
                } else if line.is_empty() {
                    return;
                }
            }
        })
    }
    let servers = [
        (
            "{OK}",
            smtp(b"220 mail.example ESMTP\r\n", b"250 mail.example\r\n"),
        ),
        (
            "{BANNER554}",
            smtp(b"554 no service here\r\n", b"250 ok\r\n"),
        ),
        ("{EHLO550}", smtp(b"220 hi\r\n", b"550 go away\r\n")),
        (
            "{MULTILINE}",
            smtp(b"220 hi\r\n", b"250-first\r\n250 second\r\n"),
        ),
        ("{GARBAGE}", smtp(b"garbage\r\n", b"250 ok\r\n")),
    ];
    let subs: Vec<(&str, String)> = servers.iter().map(|(k, a)| (*k, a.to_string())).collect();
    check_reports_match("smtpchk", &subs);
}

/// The protocol probes judge and report as HAProxy 2.6.12 does: `redis-check` (`+PONG` or
/// the reply's first line), `pgsql-check` (an error's severity, the authentication requests
/// HAProxy accepts, "PostgreSQL unknown error"), `mysql-check` (with and without a user, an
/// error packet's code and text, the server's version), `ldap-check` (result codes, long
/// lengths, what is not LDAP, a truncated answer), `ssl-hello-chk` (an alert or a
/// handshake record passes, anything else or too little does not); recorded as above.
#[test]
fn protocol_probes_match_haproxys() {
    let servers = [
        probe_server(b"", Some(b"+PONG\x0d\x0a"), false),
        probe_server(b"", Some(b"-NOAUTH Authentication required.\x0d\x0a"), true),
        probe_server(b"", Some(b"-NOAUTH Authentication required.\x0d\x0a"), false),
        probe_server(b"", Some(b"R\x00\x00\x00\x08\x00\x00\x00\x00"), false),
        probe_server(b"", Some(b"E\x00\x00\x002SFATAL\x00C28000\x00Mno pg_hba.conf entry for host\x00\x00"), true),
        probe_server(b"", Some(b"XYZW0000000000"), true),
        probe_server(b"", Some(b"R\x00\x00\x00\x0c\x00\x00\x00\x05salt"), false),
        probe_server(b"O\x00\x00\x00\x0a8.0.36-test\x00\x07\x00\x00\x00abcdefgh\x00\xff\xf7!\x02\x00\xff\x81\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00ijklmnopqrst\x00mysql_native_password\x00", None, false),
        probe_server(b"(\x00\x00\x00\xffj\x04#HY000Host '127.0.0.1' is not allowed", None, true),
        probe_server(b"O\x00\x00\x00\x0a8.0.36-test\x00\x07\x00\x00\x00abcdefgh\x00\xff\xf7!\x02\x00\xff\x81\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00ijklmnopqrst\x00mysql_native_password\x00", Some(b"\x07\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00"), false),
        probe_server(b"O\x00\x00\x00\x0a8.0.36-test\x00\x07\x00\x00\x00abcdefgh\x00\xff\xf7!\x02\x00\xff\x81\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00ijklmnopqrst\x00mysql_native_password\x00", Some(b")\x00\x00\x02\xff\x15\x04#28000Access denied for user 'haproxy'"), true),
        probe_server(b"\x05\x00\x00", None, true),
        probe_server(b"", Some(b"0\x0c\x02\x01\x01a\x07\x0a\x01\x00\x04\x00\x04\x00"), false),
        probe_server(b"", Some(b"0\x0c\x02\x01\x01a\x07\x0a\x011\x04\x00\x04\x00"), false),
        probe_server(b"", Some(b"HTTP/1.1 400 Bad Request\x0d\x0a\x0d\x0a"), true),
        probe_server(b"", Some(b"0\x0c\x02\x01\x01a\x07\x0a"), true),
        probe_server(b"", Some(b"0\x84\x00\x00\x00\x0c\x02\x01\x01a\x84\x00\x00\x00\x07\x0a\x01\x00\x04\x00\x04\x00"), false),
        probe_server(b"", Some(b"\x15\x03\x00\x00\x02\x02\x28"), true),
        probe_server(b"", Some(b"\x16\x03\x01\x00\x04\x0e\x00\x00\x00"), false),
        probe_server(b"", Some(b"HTTP/1.1 400 Bad Request\x0d\x0a\x0d\x0a"), true),
        probe_server(b"", Some(b"\x16\x03"), false),
    ];
    let keys: Vec<String> = (1..=servers.len()).map(|i| format!("{{S{i}}}")).collect();
    let subs: Vec<(&str, String)> = keys
        .iter()
        .zip(&servers)
        .map(|(k, a)| (k.as_str(), a.to_string()))
        .collect();
    check_reports_match("probes", &subs);
}

/// A server that sends `first` when a connection opens, answers the first bytes it reads
/// with `reply` (if any), then closes (`closing`) or keeps the connection until the client
/// leaves.
fn probe_server(first: &'static [u8], reply: Option<&'static [u8]>, closing: bool) -> SocketAddr {
    serve_each(move |mut c| {
        let _ = c.write_all(first);
        if let Some(reply) = reply {
            let _ = c.read(&mut [0u8; 4096]);
            let _ = c.write_all(reply);
        }
        if closing {
            let _ = c.set_read_timeout(Some(Duration::from_millis(50)));
        }
        while let Ok(1..) = c.read(&mut [0u8; 64]) {}
    })
}

/// A server on 127.0.0.1 that runs `serve` on each connection it accepts, in a thread of
/// its own, reads timing out after 10 s.
fn serve_each(serve: impl Fn(TcpStream) + Clone + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let serve = serve.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                serve(c);
            });
        }
    });
    addr
}

/// Runs `testdata/haproxy-2.6/NAME.cfg` (its placeholders replaced) until every backend
/// reported a check result, and compares the reports (durations and the `{REFUSED}` port
/// left out) with `NAME-reports.txt`, HAProxy's; with `SLUICE_CHECK_RECORD=haproxy`, runs
/// HAProxy instead and writes that file.
fn check_reports_match(name: &str, subs: &[(&str, String)]) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/haproxy-2.6");
    let mut cfg = std::fs::read_to_string(format!("{dir}/{name}.cfg")).unwrap();
    for (from, to) in subs {
        cfg = cfg.replace(from, to);
    }
    let refused = subs
        .iter()
        .find(|(k, _)| *k == "{REFUSED}")
        .map(|x| x.1.clone());
    let expected_file = format!("{dir}/{name}-reports.txt");
    let record = std::env::var("SLUICE_CHECK_RECORD").is_ok_and(|v| v == "haproxy");
    let p = if record {
        Sluice::start_program("haproxy", &["-db"], &cfg)
    } else {
        Sluice::start(&cfg)
    };
    let backends = cfg.lines().filter(|l| l.starts_with("backend ")).count();
    let reports = || -> Vec<String> {
        let mut lines: Vec<String> = p
            .stdout()
            .lines()
            .filter(|l| l.starts_with("Health check for server "))
            .map(|l| {
                let (head, rest) = l.split_once(", check duration: ").unwrap_or((l, ""));
                let tail = rest.split_once(", ").map_or("", |x| x.1);
                let line = format!("{head}, check duration: Nms, {tail}");
                match &refused {
                    Some(port) => line.replace(port.as_str(), "{REFUSED}"),
                    None => line,
                }
            })
            .collect();
        lines.sort();
        lines.dedup_by(|a, b| a.split(',').next() == b.split(',').next());
        lines
    };
    wait_until("a report for every backend", || reports().len() >= backends);
    let got = reports().join("\n") + "\n";
    if record {
        std::fs::write(&expected_file, &got).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&expected_file).unwrap();
    for (g, e) in got.lines().zip(expected.lines()) {
        assert_eq!(g, e);
    }
    assert_eq!(got.lines().count(), expected.lines().count(), "{got}");
}

/// A server in maintenance is not checked, as in HAProxy (entering maintenance pauses its
/// checks): while its twin out of maintenance fails check after check, it fails none.
#[test]
fn maintenance_pauses_the_checks() {
    let refused = free_port();
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server maint 127.0.0.1:{refused} check inter 100ms fall 1 disabled\n    server live 127.0.0.1:{refused} check inter 100ms fall 1\n",
        sock.display()
    ));
    let chkfail = |srv: &str| -> u64 {
        stat_field(&Sluice::cli(&sock, "show stat"), "be", srv, "chkfail")
            .parse()
            .unwrap_or(0)
    };
    wait_until("the live server failing checks", || chkfail("live") >= 3);
    assert_eq!(chkfail("maint"), 0);
}

/// The HTTP check's rules as HAProxy 2.6 inherits them (its reg-test checks/http-check-send):
/// a backend without rules of its own takes its defaults' (the request line of `option
/// httpchk` without what is smuggled after its version, then `http-check send`); a backend
/// with a rule of its own starts from HAProxy's `OPTIONS / HTTP/1.0`.
#[test]
fn http_check_rules_are_inherited_or_replaced_as_haproxys() {
    let (addr, seen) = recording_check_server();
    let _p = Sluice::start(&format!(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\n    option httpchk GET /status HTTP/1.1\\r\\nHdr:\\ must-be-removed\n    http-check send hdr Host my-www-host hdr X-test true body test\n\
         frontend f\n    {{fe}}\n    default_backend be4\n\
         backend be4\n    server s {addr} check inter 100ms\n\
         backend be5\n    http-check send hdr Host other-www-host hdr X-New-Test true body other\n    server s {addr} check inter 100ms\n"
    ));
    let has = |start: &str, host: &str| {
        let seen = seen.lock().unwrap();
        seen.iter()
            .find(|r| r.starts_with(start) && r.contains(host))
            .cloned()
    };
    wait_until("both backends checked", || {
        has("GET /status HTTP/1.1\r\n", "my-www-host").is_some()
            && has("OPTIONS / HTTP/1.0\r\n", "other-www-host").is_some()
    });
    let be4 = has("GET /status", "my-www-host").unwrap();
    assert!(!be4.contains("Hdr"), "{be4}");
    assert!(
        be4.contains("X-test: true\r\n") && be4.ends_with("\r\n\r\ntest"),
        "{be4}"
    );
    let be5 = has("OPTIONS /", "other-www-host").unwrap();
    assert!(
        !be5.contains("X-test") && be5.contains("X-New-Test: true\r\n"),
        "{be5}"
    );
}

/// `addr IP:PORT` checks that address and port (HAProxy reads both); a `port` option, before
/// or after it, wins.
#[test]
fn a_check_address_may_carry_its_port() {
    let live = TcpListener::bind("127.0.0.1:0").unwrap();
    let live_addr = live.local_addr().unwrap();
    std::thread::spawn(move || for _c in live.incoming() {});
    let dead = free_port();
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend a\nbackend a\n    server s 127.0.0.1:{dead} check inter 100ms rise 1 fall 1 addr {live_addr}\nbackend b\n    server s 127.0.0.1:{dead} check inter 100ms rise 1 fall 1 addr {live_addr} port {dead}\nbackend c\n    server s 127.0.0.1:{dead} check inter 100ms rise 1 fall 1 port {dead} addr {live_addr}\n",
        sock.display()
    ));
    let v = verdicts(&sock, &["a", "b", "c"]);
    assert_eq!((v[0].0.as_str(), v[0].1.as_str()), ("UP", "L4OK"), "{v:?}");
    assert_eq!(v[1].0, "DOWN", "{v:?}");
    assert_eq!(v[2].0, "DOWN", "{v:?}");
}

/// `http-check set-var|set-var-fmt|unset-var` and `tcp-check set-var`: check-scoped
/// variables a check's texts read (`%[var(check.x)]`), set in order at each check, as
/// HAProxy 2.6 sends them (the same configuration gave the same request there).
#[test]
fn check_variables_fill_the_checks_texts() {
    let origin = Origin::start("o");
    let pinged = scripted(|c| {
        if read_line(c) == "PING 7\r\n" {
            let _ = c.write_all(b"PONG\r\n");
        }
    });
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend web\nbackend web\n    option httpchk\n    http-check set-var(check.path) str(/health)\n    http-check set-var(check.n) int(41),add(1)\n    http-check set-var-fmt(check.tag) \"n=%[var(check.n)]\"\n    http-check set-var(check.gone) str(x)\n    http-check unset-var(check.gone)\n    http-check send meth GET uri-lf \"%[var(check.path)]\" hdr x-tag \"%[var(check.tag)]\" hdr x-gone \"[%[var(check.gone)]]\"\n    server s {} check inter 100ms rise 1 fall 1\nbackend raw\n    option tcp-check\n    tcp-check set-var(check.word) str(PING)\n    tcp-check set-var(check.n) int(7)\n    tcp-check send-lf \"%[var(check.word)] %[var(check.n)]\\r\\n\"\n    tcp-check expect string PONG\n    server s {pinged} check inter 100ms rise 1 fall 1\n",
        sock.display(),
        origin.addr
    ));
    let v = verdicts(&sock, &["web", "raw"]);
    assert_eq!(v[1].0, "UP", "{v:?}");
    let seen = origin.requests();
    let r = seen.first().expect("a check request");
    assert_eq!((r.method.as_str(), r.target.as_str()), ("GET", "/health"));
    assert_eq!(r.header("x-tag"), Some("n=42"));
    assert_eq!(r.header("x-gone"), Some("[]"));
    // A transaction's scope is not a check's.
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}backend b\n    option httpchk\n    http-check set-var(txn.x) str(a)\n    server s 127.0.0.1:80 check\n"
    ));
    assert!(!ok && out.contains("check., sess. or proc."), "{out}");
}

/// `http-check expect hdr name-lf ... value-lf ...`: the patterns are texts with variables
/// (`check.` variables set by `http-check set-var`, the server's name), filled in at each
/// check: a server whose answer carries its own name passes, one named otherwise fails.
#[test]
fn header_expectations_fill_in_their_lf_patterns() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|_: &Received| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nX-Ready: alpha-ok\r\nContent-Length: 0\r\n\r\n".to_vec(),
            )
        }),
    );
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    option httpchk GET /health\n    http-check set-var(check.want) str(x-ready)\n    http-check expect hdr name-lf \"%[var(check.want)]\" value-lf -m beg \"%[srv_name]-\"\n    server alpha {} check inter 100ms rise 1 fall 1\n    server beta {} check inter 100ms rise 1 fall 1\n",
        sock.display(),
        origin.addr,
        origin.addr
    ));
    wait_until("alpha up and beta down", || {
        status(&sock, "be", "alpha") == "UP" && status(&sock, "be", "beta").starts_with("DOWN")
    });
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}backend be\n    option httpchk\n    http-check expect hdr name-lf -m reg x value y\n    server s 127.0.0.1:1 check\n"
    ));
    assert!(
        !ok && out.contains("cannot be a regular expression"),
        "{out}"
    );
}

/// `option spop-check` sends HAProxy's SPOP health-check hello and judges the agent's
/// answer as HAProxy 2.6.12 does (recorded as above): a valid AGENT-HELLO passes ("SPOA
/// server is ok") only when the hello received is byte for byte HAProxy's; a wrong
/// version, a missing or out-of-range frame size, a fragmented hello, a disconnect (its
/// status code's reason), something not SPOP and a silent close each fail with their
/// reason.
#[test]
fn spop_check_matches_haproxys() {
    // HAProxy's hello with 16 kB buffers, captured from HAProxy 2.6.12.
    const HELLO: &[u8] = b"\x00\x00\x00\x4e\x01\x00\x00\x00\x01\x00\x00\x12supported-versions\x08\x032.0\x0emax-frame-size\x03\xfc\xf0\x06\x0ccapabilities\x08\x00\x0bhealthcheck\x11";
    /// An agent frame of `kind` with FIN set and `items`, length-prefixed.
    fn frame(kind: u8, flags: u8, items: &[u8]) -> Vec<u8> {
        let mut f = vec![kind, 0, 0, 0, flags, 0, 0];
        f.extend_from_slice(items);
        let mut out = (f.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&f);
        out
    }
    let version = |v: &str| {
        let mut i = b"\x07version\x08".to_vec();
        i.push(v.len() as u8);
        i.extend_from_slice(v.as_bytes());
        i
    };
    let size = |s: &[u8]| [b"\x0emax-frame-size\x03".as_slice(), s].concat();
    let caps = b"\x0ccapabilities\x08\x10pipelining,async".to_vec();
    let good = [version("2.0"), size(b"\xfc\xf0\x06"), caps.clone()].concat();
    // An agent answering `reply` only to HAProxy's exact hello (else garbage).
    let agent = |reply: Vec<u8>| {
        serve_each(move |mut c| {
            let mut got = vec![0u8; HELLO.len()];
            let exact = c.read_exact(&mut got).is_ok() && got == HELLO;
            let _ = c.write_all(if exact { &reply } else { b"not the hello\n" });
            while let Ok(1..) = c.read(&mut [0u8; 64]) {}
        })
    };
    let extra = b"\x05other\x06\x7f\x00\x00\x01\x04bin!\x09\x02hi\x03nul\x00".to_vec();
    let servers = [
        agent(frame(101, 1, &good)),
        agent(frame(
            101,
            1,
            &[version("1.0"), size(b"\xfc\xf0\x06")].concat(),
        )),
        agent(frame(101, 1, &[version("2.0"), caps.clone()].concat())),
        agent(frame(101, 1, &[version("2.0"), size(b"\x64")].concat())),
        agent(frame(
            102,
            1,
            b"\x0bstatus-code\x03\x02\x07message\x08\x03bye",
        )),
        agent(frame(101, 0, &good)),
        probe_server(b"", Some(b"HTTP/1.1 400 Bad Request\x0d\x0a\x0d\x0a"), true),
        probe_server(b"", None, true),
        agent(frame(101, 1, &[extra, good].concat())),
    ];
    let keys: Vec<String> = (1..=servers.len()).map(|i| format!("{{S{i}}}")).collect();
    let subs: Vec<(&str, String)> = keys
        .iter()
        .zip(&servers)
        .map(|(k, a)| (k.as_str(), a.to_string()))
        .collect();
    check_reports_match("spop", &subs);
}

/// `option external-check`: the program gets `NOT_USED NOT_USED ADDR PORT` (a backend has
/// no listener) and the `HAPROXY_*` variables with nothing else of the environment but
/// `PATH`, and its exit status is the verdict: 0 passes (`PROCOK`), another fails with its
/// code (`PROCERR`), one still running at `timeout check` is terminated (`PROCTOUT`); a
/// command without `/` is looked for in `external-check path`. Reports compared line by
/// line with HAProxy 2.6.12's (recorded as above). Configurations that cannot run one are
/// refused with HAProxy's words.
#[test]
fn external_checks_match_haproxys() {
    let dir = TempDir::new();
    let script = |name: &str, body: &str| {
        let path = dir.0.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
        path.display().to_string()
    };
    let server = serve_each(|_| {});
    let ok = script(
        "ok.sh",
        &format!(
            "[ \"$1 $2 $3 $4\" = \"NOT_USED NOT_USED 127.0.0.1 {}\" ] && [ \"$HAPROXY_PROXY_NAME/$HAPROXY_SERVER_NAME $HAPROXY_SERVER_PORT $HAPROXY_SERVER_SSL $PATH\" = \"x1/s {} 0 \" ] && [ -z \"$HOME\" ] && exit 0\nexit 9",
            server.port(),
            server.port()
        ),
    );
    let fail = script("fail.sh", "exit 3");
    let slow = script("slow.sh", "/bin/sleep 5");
    let subs = [
        ("{S1}", server.to_string()),
        ("{OK}", ok),
        ("{FAIL}", fail),
        ("{SLOW}", slow),
    ];
    check_reports_match("external", &subs);
    // Without the global `external-check`, without a command, with a relative command and
    // no path: refused.
    let base = |global: &str, be: &str| {
        check_config(&format!(
            "global\n{global}{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    default_backend b\nbackend b\n{be}    server s 127.0.0.1:1 check\n"
        ))
    };
    let (ok, err) = base(
        "",
        "    option external-check\n    external-check command /bin/true\n",
    );
    assert!(
        !ok && err.contains("unable to find required 'global.external-check'"),
        "{err}"
    );
    let (ok, err) = base("    external-check\n", "    option external-check\n");
    assert!(
        !ok && err.contains("unable to find required 'external-check command'"),
        "{err}"
    );
    let (ok, err) = base(
        "    external-check\n",
        "    option external-check\n    external-check command true\n",
    );
    assert!(!ok && err.contains("does not have a leading '/'"), "{err}");
}

/// A scripted SMTP server on 127.0.0.1: answers each step of an exchange as a mailer
/// does (a two-line reply to HELO), one connection at a time, and keeps what each
/// connection said.
struct Mta {
    addr: SocketAddr,
    mails: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Mta {
    fn start() -> Mta {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mails = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = mails.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let said = Mta::converse(conn);
                kept.lock().unwrap().push(said);
            }
        });
        Mta { addr, mails }
    }

    fn converse(mut conn: TcpStream) -> String {
        use std::io::BufRead;
        conn.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
        let mut said = String::new();
        let _ = conn.write_all(b"220 mta.test ESMTP\r\n");
        let mut in_data = false;
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            said.push_str(&line);
            let reply: &[u8] = if in_data {
                if line == ".\r\n" {
                    in_data = false;
                    b"250 queued\r\n"
                } else {
                    b""
                }
            } else if line.starts_with("HELO ") {
                b"250-mta.test\r\n250 pleased\r\n"
            } else if line.starts_with("DATA") {
                in_data = true;
                b"354 go on\r\n"
            } else if line.starts_with("QUIT") {
                let _ = conn.write_all(b"221 bye\r\n");
                break;
            } else {
                b"250 ok\r\n"
            };
            let _ = conn.write_all(reply);
            line.clear();
        }
        said
    }

    fn mails(&self) -> Vec<String> {
        self.mails.lock().unwrap().clone()
    }
}

/// `email-alert`: a server's state changes are mailed over SMTP as HAProxy 2.6 mails them
/// (HELO with `myhostname`, the envelope, `From`/`To`/`Date`/`Subject: [HAProxy Alert]`
/// headers, the log line's text as subject and body; compared with HAProxy 2.6.12's mails
/// for the same commands), down at `alert` (the default level), up and drain at `notice`,
/// to every mailer of the `mailers` section (one refusing: counted as failed);
/// configurations missing a part are warned about, an unknown section refused.
#[test]
fn email_alerts_mail_state_changes_as_haproxy_does() {
    let mta = Mta::start();
    let origin = Origin::start("o");
    // A second mailer that refuses every connection: each mail fails there, counted.
    let (_dead_port, dead) = refused_addr();
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}\
         mailers mta\n    mailer smtp1 {}\n    mailer dead {dead}\n    timeout mail 5s\n\
         frontend fe\n    {{fe}}\n    default_backend quiet\n\
         backend quiet\n    email-alert from lb@example.com\n    email-alert to ops@example.com\n    email-alert mailers mta\n    email-alert myhostname lb1\n    server s1 {}\n\
         backend chatty\n    email-alert from lb@example.com\n    email-alert to ops@example.com\n    email-alert mailers mta\n    email-alert level notice\n    server s2 {}\n",
        sock.display(),
        mta.addr,
        origin.addr,
        origin.addr
    ));
    let cli = |cmd: &str| Sluice::cli(&sock, cmd);
    // `quiet` mails at alert: its server going down, not coming back up.
    assert_eq!(cli("set server quiet/s1 health down"), "\n");
    wait_until("the first mail", || mta.mails().len() == 1);
    assert_eq!(cli("set server quiet/s1 health up"), "\n");
    assert_eq!(cli("set server quiet/s1 health down"), "\n");
    // `chatty` mails at notice: up too.
    assert_eq!(cli("set server chatty/s2 health down"), "\n");
    assert_eq!(cli("set server chatty/s2 health up"), "\n");
    assert_eq!(cli("set server chatty/s2 state drain"), "\n");
    wait_until("five mails", || mta.mails().len() == 5);
    let mails = mta.mails();
    let subject = |m: &str| -> String {
        m.lines()
            .find_map(|l| l.strip_prefix("Subject: [HAProxy Alert] "))
            .unwrap_or_default()
            .to_string()
    };
    // The up of `quiet` was not mailed: its second mail is the second down.
    let down = "Server quiet/s1 is DOWN, changed from CLI. 0 active and 0 backup servers left. 0 sessions active, 0 requeued, 0 remaining in queue";
    assert_eq!(subject(&mails[0]), down);
    assert_eq!(subject(&mails[1]), down);
    assert!(
        subject(&mails[2]).starts_with("Server chatty/s2 is DOWN"),
        "{}",
        mails[2]
    );
    assert!(
        subject(&mails[3]).starts_with("Server chatty/s2 is UP, changed from CLI."),
        "{}",
        mails[3]
    );
    // Word for word as HAProxy 2.6.12 mailed it for the same commands.
    assert_eq!(
        subject(&mails[4]),
        "Server chatty/s2 enters drain state. 0 active and 0 backup servers online. 0 sessions requeued, 0 total in queue"
    );
    let first = &mails[0];
    for part in [
        "HELO lb1\r\n",
        "MAIL FROM:<lb@example.com>\r\n",
        "RCPT TO:<ops@example.com>\r\n",
        "DATA\r\n",
        "From: lb@example.com\r\nTo: ops@example.com\r\nDate: ",
        &format!("\r\n\r\n{down}\r\n\r\n.\r\nQUIT\r\n"),
    ] {
        assert!(first.contains(part), "{part:?} in {first}");
    }
    // Without a host name, HELO says the machine's.
    assert!(mails[2].starts_with("HELO ") && !mails[2].starts_with("HELO lb1"));
    let count = |name: &str| activity(&sock, name).iter().sum::<u64>();
    wait_until("the mails counted", || {
        count("mails_sent") == 5 && count("mails_failed") == 5
    });

    // A part missing: ignored with HAProxy's warning; an unknown mailers section: refused.
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}listen b\n    bind 127.0.0.1:8\n    email-alert from lb@example.com\n    server s {}\n",
        origin.addr
    ));
    assert!(ok, "{err}");
    assert!(
        err.contains("'email-alert' will be ignored for listen 'b'"),
        "{err}"
    );
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}listen b\n    bind 127.0.0.1:8\n    email-alert from a@x\n    email-alert to b@x\n    email-alert mailers nope\n    server s {}\n",
        origin.addr
    ));
    assert!(!ok);
    assert!(
        err.contains("Proxy 'b': unable to find mailers 'nope'."),
        "{err}"
    );
}

/// A server the configuration puts in maintenance (`disabled`) shows in `show servers
/// state` as HAProxy 2.6.12 shows it: stopped, in configured and forced maintenance (5),
/// its check paused (8) at health 0; enabled, it runs, keeps the configured bit (4) and
/// takes traffic.
#[test]
fn a_disabled_server_shows_and_comes_back_as_haproxys() {
    let a = Switchable::start("a");
    let b = Switchable::start("b");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend f\n    {{fe}}\n    default_backend be\nbackend be\n    server a {}\n    server b {} disabled\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    let row = || -> Vec<String> {
        let state = Sluice::cli(&sock, "show servers state be");
        let line = state
            .lines()
            .find(|l| l.contains(" b 127.0.0.1 "))
            .expect("b listed");
        line.split(' ').map(str::to_string).collect()
    };
    // op, admin, then check status, result, health, state.
    let fields = |r: &[String]| [5, 6, 10, 11, 12, 13].map(|i| r[i].clone());
    assert_eq!(fields(&row()), ["0", "5", "1", "0", "0", "8"]);
    assert_eq!(count(&shares(&p, 4), "a"), 4);
    assert_eq!(Sluice::cli(&sock, "enable server be/b"), "\n");
    assert_eq!(fields(&row()), ["2", "4", "1", "0", "0", "8"]);
    assert_eq!(status(&sock, "be", "b"), "no check");
    assert_eq!(shares(&p, 10).len(), 2);
}
