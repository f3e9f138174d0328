//! Stopping: SIGUSR1 soft stop finishes in-flight requests, answers an idle connection's
//! next request with `Connection: close` (or, with `no option idle-close-on-response`,
//! closes it at once), stops accepting and exits; `hard-stop-after`
//! bounds it; SIGTERM stops at once.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

fn signal(p: &Sluice, sig: i32) {
    // SAFETY: kill with a pid we started.
    assert_eq!(unsafe { libc::kill(p.pid() as i32, sig) }, 0);
}

fn wait_exit(p: &mut Sluice) -> std::process::ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "sluice did not exit: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An origin holding responses until released.
fn gated_origin() -> (Origin, Arc<AtomicBool>) {
    let release = Arc::new(AtomicBool::new(false));
    let gate = release.clone();
    let origin = Origin::with_handler(
        "gated",
        Arc::new(move |r: &Received| {
            if r.target == "/slow" {
                while !gate.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            ok_response(&format!("done {}", r.target)).into()
        }),
    );
    (origin, release)
}

#[test]
fn soft_stop_finishes_in_flight_requests_then_exits() {
    let (origin, release) = gated_origin();
    let mut p = Sluice::start(&format!(
        "global\n    nbthread 2\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nfrontend closing\n    {{fe}}\n    no option idle-close-on-response\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let addr = p.addr();
    // Idle keep-alive clients and several requests in flight.
    let mut idle = p.connect();
    assert_eq!(idle.get("/quick").text(), "done /quick");
    let mut closing = Conn::new(p.addrs[1]);
    assert_eq!(closing.get("/quick").text(), "done /quick");
    let in_flight: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::new(addr);
                let r = c.get("/slow");
                (r.status, r.text(), r.header("connection").map(String::from))
            })
        })
        .collect();
    let deadline = Instant::now() + TIMEOUT;
    while origin
        .requests()
        .iter()
        .filter(|r| r.target == "/slow")
        .count()
        < 4
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&p, libc::SIGUSR1);
    // With `no option idle-close-on-response` the idle connection is closed at once, as
    // HAProxy 2.6 closes it by default.
    assert!(
        closing.is_closed(),
        "an idle connection closes at a soft stop"
    );
    // By default it is not closed under a request its client may be sending: its next
    // request is answered, with `Connection: close`, and then it closes.
    let deadline = Instant::now() + TIMEOUT;
    while !p.stderr().contains("soft stop") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = idle.get("/after");
    assert_eq!((r.status, r.text().as_str()), (200, "done /after"));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(idle.is_closed(), "closed after its answer");
    // New connections are refused once the listeners are closed.
    let deadline = Instant::now() + TIMEOUT;
    while std::net::TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "waits for in-flight requests"
    );
    release.store(true, Ordering::SeqCst);
    for t in in_flight {
        let (status, text, connection) = t.join().unwrap();
        assert_eq!(
            (status, text.as_str()),
            (200, "done /slow"),
            "every in-flight request completes"
        );
        assert_eq!(connection.as_deref(), Some("close"));
    }
    assert!(wait_exit(&mut p).success());
    assert!(p.stderr().contains("soft stop"));
}

#[test]
fn hard_stop_after_bounds_a_soft_stop() {
    let (origin, release) = gated_origin();
    let mut p = Sluice::start(&format!(
        "global\n    hard-stop-after 300ms\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let deadline = Instant::now() + TIMEOUT;
    while origin.count() == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&p, libc::SIGUSR1);
    assert!(wait_exit(&mut p).success());
    assert!(
        p.stderr().contains("hard-stop-after reached"),
        "{}",
        p.stderr()
    );
    // The held request never completed: its connection was cut by the exit.
    assert!(c.response_for(false).is_none());
    release.store(true, Ordering::SeqCst);
}

#[test]
fn sigterm_stops_at_once() {
    let (origin, _release) = gated_origin();
    let mut p = Sluice::start(&format!("{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n", origin.addr));
    let mut c = p.connect();
    c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let deadline = Instant::now() + TIMEOUT;
    while origin.count() == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&p, libc::SIGTERM);
    // It ends by the signal, as HAProxy's process does (a master exits 0 instead).
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(wait_exit(&mut p).signal(), Some(libc::SIGTERM));
}
