//! `mode tcp`: bytes relayed both ways with half-close, balancing, retries and redispatch.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use common::*;

/// Echoes until EOF, then says "bye <name>" and closes.
fn echo(name: &'static str) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 8192];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.write_all(format!("bye {name}").as_bytes());
            });
        }
    });
    addr
}

fn talk(addr: std::net::SocketAddr, msg: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    echo_through(&mut s, &[msg])
}

#[test]
fn tcp_echo_with_half_close_and_balancing() {
    let (a, b) = (echo("a"), echo("b"));
    let p = Sluice::start(&format!(
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n    balance roundrobin\n    server a {a}\n    server b {b}\n"
    ));
    // Not HTTP at all, in both directions.
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(String::from_utf8(talk(p.addr(), &payload)).unwrap());
    }
    seen.sort();
    assert_eq!(seen, vec!["bye a", "bye a", "bye b", "bye b"]);
}

#[test]
fn tcp_connect_retries_and_redispatch() {
    let good = echo("good");
    let (_dead_port, dead) = refused_addr();
    let p = Sluice::start(&format!(
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    retries 1\n    option redispatch\n    server dead {dead}\n    server good {good}\n"
    ));
    for _ in 0..4 {
        assert_eq!(talk(p.addr(), b"ping"), b"bye good");
    }
}

#[test]
fn tcp_mode_configuration_errors() {
    let check = check_config;
    let (ok, err) = check(
        "frontend f\n    mode tcp\n    bind :1\n    default_backend b\nbackend b\n    mode http\n",
    );
    assert!(ok, "a TCP frontend may use an HTTP backend: {err}");
    let (ok, err) = check(
        "frontend f\n    mode http\n    bind :1\n    default_backend b\nbackend b\n    mode tcp\n",
    );
    assert!(
        !ok && err.contains("http frontend 'f' cannot use tcp backend 'b' (see 'mode')"),
        "{err}"
    );
}

#[test]
fn http_settings_of_a_tcp_proxy_are_ignored_with_haproxys_warnings() {
    // No `mode`: TCP, as in HAProxy. Each HTTP-only setting is named once, and `-c` passes.
    let (ok, err) = check_config(
        "listen l\n    bind :1\n    option httplog\n    option forwardfor\n    http-request deny\n    http-response del-header x\n    redirect prefix /x\n    capture request header Host len 10\n    stats enable\n    cookie SRV insert\n    monitor-uri /m\n    balance uri\n    server s 127.0.0.1:2 cookie a\n",
    );
    assert!(ok, "{err}");
    for w in [
        "'stats' statement ignored for proxy 'l' as it requires HTTP mode.",
        "'capture' statement ignored for proxy 'l' as it requires HTTP mode.",
        "'http-request' rules ignored for proxy 'l' as they require HTTP mode.",
        "'http-response' rules ignored for proxy 'l' as they require HTTP mode.",
        "'redirect' rules ignored for proxy 'l' as they require HTTP mode.",
        "'option forwardfor' ignored for proxy 'l' as it requires HTTP mode.",
        "cookie will be ignored for proxy 'l' (needs 'mode http').",
        "monitor-uri will be ignored for proxy 'l' (needs 'mode http').",
        "Layer 7 hash not possible for proxy 'l' (needs 'mode http'). Falling back to round robin.",
        "'option httplog' not usable with proxy 'l' (needs 'mode http'). Falling back to 'option tcplog'.",
        "proxy 'l' : ignoring cookie for server 's' as HTTP mode is disabled.",
    ] {
        assert!(err.contains(&format!("[WARNING] config : {w}")), "{w}\n{err}");
    }
}

#[test]
fn a_proxy_without_mode_relays_a_raw_protocol_byte_for_byte() {
    // A Redis-like exchange through a `listen` written without `mode`, in a configuration
    // whose defaults say nothing of it either: bytes no HTTP parser would take (an inline
    // command, binary, no CRLF pairs) go through unchanged both ways.
    let origin = echo("srv");
    let p = Sluice::start(&format!(
        "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten redis\n    {{fe}}\n    server r {origin}\n"
    ));
    let msg: &[u8] = b"*1\r\n$4\r\nPING\r\n\x00\xff\x16\x03";
    // `talk` checks the echo, byte for byte, then reads what the server says at the end.
    assert_eq!(talk(p.addr(), msg), b"bye srv");
}

#[test]
fn server_fin_closes_half_closed_relays() {
    // A server that reads until the client's end of stream, then neither writes nor closes.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 1024];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            h.lock().unwrap().push(s);
        }
    });
    let p = Sluice::start(&format!(
        "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n    timeout server-fin 300ms\nlisten raw\n    {{fe}}\n    server s {addr}\n"
    ));
    let mut s = TcpStream::connect(p.addr()).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(b"last words").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest);
    assert!(
        end.is_ok(),
        "closed by server-fin, not by the test's read timeout: {end:?}"
    );
}

/// What `ss` shows of the established TCP sockets matching `filter`, one line each.
fn sockets(filter: &str) -> Vec<String> {
    let out = std::process::Command::new("ss")
        .args(["-tnoH", "state", "established", filter])
        .output()
        .expect("ss runs (iproute2, installed by .ci/run)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The seconds left on a socket's keepalive timer as `ss` prints it (`1min9sec`, `49sec`).
fn keepalive_secs(line: &str) -> u64 {
    let t = line
        .split("timer:(keepalive,")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no keepalive timer: {line}"));
    let (min, rest) = t.split_once("min").unwrap_or(("0", t));
    let sec = rest.strip_suffix("sec").unwrap_or("0");
    let sec = if rest.ends_with("ms") { "0" } else { sec };
    min.parse::<u64>().unwrap_or(0) * 60 + sec.parse::<u64>().unwrap_or(0)
}

#[test]
fn tcp_keepalive_is_on_where_the_options_say() {
    let (with, without) = (echo("with"), echo("without"));
    let p = Sluice::start(&format!(
        "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten ka\n    {{fe}}\n    option tcpka\n    clitcpka-idle 70s\n    srvtcpka-idle 50s\n    srvtcpka-cnt 4\n    server s {with}\nlisten plain\n    {{fe}}\n    server s {without}\n"
    ));
    for (addr, origin, on) in [(p.addrs[0], with, true), (p.addrs[1], without, false)] {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(TIMEOUT)).unwrap();
        // One echo proves both connections are up.
        c.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        c.read_exact(&mut one).unwrap();
        // sluice's socket towards the client (its source port is the listener's), and its
        // socket towards the server (whose destination is the origin).
        let client_side = sockets(&format!("( sport = :{} )", addr.port()));
        let server_side = sockets(&format!("( dport = :{} )", origin.port()));
        assert_eq!(client_side.len(), 1, "{client_side:?}");
        assert_eq!(server_side.len(), 1, "{server_side:?}");
        for line in client_side.iter().chain(&server_side) {
            assert_eq!(line.contains("timer:(keepalive"), on, "{line}");
        }
        if on {
            // The figures set: at most 70 s before the first probe to the client, 50 s to
            // the server, and more than the other figure can explain.
            let client = keepalive_secs(&client_side[0]);
            let server = keepalive_secs(&server_side[0]);
            assert!((51..=70).contains(&client), "{client_side:?}");
            assert!(
                (1..=50).contains(&server) && server < client,
                "{server_side:?}"
            );
        }
    }
}

/// A server on `addr` that says its name and closes.
fn greeter(addr: std::net::SocketAddr, name: &'static str) {
    let l = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(name.as_bytes());
        }
    });
}

#[test]
fn servers_without_a_port_take_the_clients() {
    // Clients reach sluice on 127.0.0.1:P and 127.0.0.3:P; the servers are on 127.0.0.2
    // (loopback too) at P (no port in the server line) and P+1 (`:+1`).
    let free = |ip: &str, port: u16| TcpListener::bind((ip, port)).is_ok();
    let p = loop {
        let p = free_port();
        if p < 65000 && free("127.0.0.2", p) && free("127.0.0.2", p + 1) && free("127.0.0.3", p) {
            break p;
        }
    };
    greeter(format!("127.0.0.2:{p}").parse().unwrap(), "same");
    greeter(format!("127.0.0.2:{}", p + 1).parse().unwrap(), "next");
    let px = Sluice::start(&format!(
        "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten same\n    bind 127.0.0.1:{p}\n    server s 127.0.0.2 check\nlisten next\n    bind 127.0.0.3:{p}\n    server s 127.0.0.2:+1\n"
    ));
    let read = |ip: &str| {
        let addr: std::net::SocketAddr = format!("{ip}:{p}").parse().unwrap();
        wait_until("the listener", || TcpStream::connect(addr).is_ok());
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert_eq!(read("127.0.0.1"), "same");
    assert_eq!(read("127.0.0.3"), "next");
    // Checks of a server without a port need one: disabled, said at start.
    let said = "backend 'same', server 's': server has neither service port nor check port. Check has been disabled.";
    assert!(px.stderr().contains(said), "{}", px.stderr());
}

#[test]
fn a_tcp_frontend_hands_http_clients_to_an_http_backend() {
    let origin = Origin::start("web");
    let raw = echo("raw");
    let p = Sluice::start(&format!(
        "defaults\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nfrontend f\n    {{fe}}\n    tcp-request inspect-delay 5s\n    tcp-request content accept if {{ req.len gt 3 }}\n    use_backend raw if {{ req.payload(0,4) -m str PING }}\n    default_backend web\nbackend raw\n    server s {raw}\nbackend web\n    mode http\n    http-request set-header X-Via upgraded\n    server s {}\n",
        origin.addr
    ));
    // Bytes for the TCP backend go through as bytes.
    assert_eq!(talk(p.addr(), b"PING 1"), b"bye raw");
    // An HTTP client becomes an HTTP session of the backend: its rules apply, and its
    // keep-alive connection carries both requests there.
    let mut c = Conn::new(p.addr());
    for path in ["/a", "/b"] {
        let r = c.get(path);
        assert_eq!((r.status, r.text()), (200, format!("web {path}")));
    }
    let seen = origin.requests();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|r| r.header("x-via") == Some("upgraded")));
}

/// `option contstats`: a TCP stream's bytes reach the statistics as they move (a
/// long-lived connection shows its traffic while it lasts), counted once in all; without
/// it they are counted when the stream ends, as HAProxy counts them.
#[test]
fn contstats_counts_a_streams_bytes_while_it_lasts() {
    let server = echo("e");
    for contstats in [true, false] {
        let dir = TempDir::new();
        let sock = dir.0.join("cli.sock");
        let option = if contstats {
            "    option contstats\n"
        } else {
            ""
        };
        let p = Sluice::start(&format!(
            "global\n    stats socket {}\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\nlisten raw\n    {{fe}}\n{option}    server e {server}\n",
            sock.display()
        ));
        let bytes =
            |field: &str| stat_field(&Sluice::cli(&sock, "show stat"), "raw", "FRONTEND", field);
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(TIMEOUT)).unwrap();
        c.write_all(&[b'x'; 1000]).unwrap();
        let mut back = vec![0u8; 1000];
        c.read_exact(&mut back).unwrap();
        if contstats {
            wait_until("the bytes counted while the stream is open", || {
                bytes("bin") == "1000" && bytes("bout") == "1000"
            });
        } else {
            // The echo came back: both ways have moved, and nothing is counted yet.
            assert_eq!((bytes("bin"), bytes("bout")), ("0".into(), "0".into()));
        }
        drop(c);
        wait_until("the stream ended", || {
            stat_field(&Sluice::cli(&sock, "show stat"), "raw", "e", "stot") == "1"
                && bytes("bin") == "1000"
        });
        // (The server says goodbye as the client leaves: 5 more bytes.)
        wait_until("the goodbye counted", || bytes("bout") == "1005");
        let server_in = stat_field(&Sluice::cli(&sock, "show stat"), "raw", "e", "bin");
        assert_eq!(server_in, "1000");
    }
}

/// An idle TCP session ends at the first of `timeout client` and `timeout server` to run
/// out (HAProxy 2.6.12 closed one with `timeout client 1s`, `timeout server 3s` after 1 s,
/// `cD`), and at `timeout tunnel` when it is set, which supersedes both once the session
/// relays; each is checked here against a 60 s other one, which the test would not wait.
#[test]
fn an_idle_tcp_session_ends_at_its_first_timeout() {
    let server = echo("e");
    for timeouts in [
        "    timeout client 200ms\n    timeout server 60s\n",
        "    timeout client 60s\n    timeout server 200ms\n",
        "    timeout client 60s\n    timeout server 60s\n    timeout tunnel 200ms\n",
    ] {
        let p = Sluice::start(&format!(
            "defaults\n    mode tcp\n    timeout connect 5s\n{timeouts}listen raw\n    {{fe}}\n    server e {server}\n"
        ));
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(TIMEOUT)).unwrap();
        c.write_all(b"hi").unwrap();
        let mut back = [0u8; 2];
        c.read_exact(&mut back).unwrap();
        // Idle from here: the proxy closes (the echo server's goodbye may come first).
        let mut rest = Vec::new();
        let closed = c.read_to_end(&mut rest);
        assert!(
            closed.is_ok(),
            "{timeouts}: still open after {TIMEOUT:?}: {closed:?}"
        );
    }
}

/// `option independent-streams` on the backend: bytes written to the server no longer
/// count as its activity, so a server that reads and never answers is idle past `timeout
/// server` while the client keeps sending, and the session ends on its side (`sD`), as
/// HAProxy's manual describes; without it, the client's bytes keep both sides active.
#[test]
fn independent_streams_time_out_a_silent_server() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let sink = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0u8; 1024];
                while let Ok(1..) = s.read(&mut buf) {}
            });
        }
    });
    let p = Sluice::start(&format!(
        "defaults\n    mode tcp\n    log stdout format raw local0\n    option tcplog\n    timeout connect 5s\n    timeout client 60s\n    timeout server 300ms\nlisten raw\n    {{fe}}\n    option independent-streams\n    server sink {sink}\n"
    ));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_millis(50)))
        .unwrap();
    // Keep sending until the proxy closes (the test's own limit is far above 300 ms).
    let started = std::time::Instant::now();
    let closed = loop {
        assert!(
            started.elapsed() < TIMEOUT,
            "the silent server's side never timed out"
        );
        if c.write_all(b"x").is_err() {
            break true;
        }
        match c.read(&mut [0u8; 16]) {
            Ok(0) => break true,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            _ => {}
        }
    };
    assert!(closed);
    wait_until("the session logged", || {
        p.stdout().contains(" raw raw/sink ")
    });
    let line = p.stdout();
    assert!(line.contains(" sD "), "{line}");
}
