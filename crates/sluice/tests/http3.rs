//! The HTTP/3 front (`bind quic4@... ssl crt ...`), through the real binary with a real
//! HTTP/3 client (aioquic, `tests/clients/h3client.py`). The rules shared with HTTP/1.1
//! and HTTP/2 are in `http2.rs`'s table-driven test, which takes HTTP/3 too.

mod common;

use std::io::BufRead;
use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;

const DEFAULTS: &str =
    "defaults\n mode http\n timeout client 10s\n timeout server 10s\n timeout connect 5s\n";

/// A proxy with one QUIC listener in front of `backend` (its server lines), and the
/// listener's port.
fn quic_proxy(frontend_lines: &str, backend: &str, global: &str) -> (Sluice, u16, TempDir) {
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let (held, port) = quic_port();
    let p = Sluice::start(&format!(
        "global\n{global}{DEFAULTS}frontend fe\n bind quic4@127.0.0.1:{port} ssl crt {pem}\n\
         {frontend_lines} default_backend b\nbackend b\n{backend}"
    ));
    drop(held);
    (p, port, dir)
}

/// The backend line of a proxy in front of `origin` alone.
fn server_line(origin: &Origin) -> String {
    format!(" server o {}\n", origin.addr)
}

/// A QUIC proxy (its frontend's and global lines added) in front of a plain origin, with an
/// admin stats socket to read the counters from.
struct Watched {
    port: u16,
    sock: std::path::PathBuf,
    _kept: (Sluice, Origin, TempDir, TempDir),
}

fn watched(frontend_lines: &str, global: &str) -> Watched {
    let origin = Origin::start("o");
    let (cli, sock) = cli_dir();
    let (p, port, dir) = quic_proxy(
        frontend_lines,
        &server_line(&origin),
        &format!("{global} stats socket {} level admin\n", sock.display()),
    );
    Watched {
        port,
        sock,
        _kept: (p, origin, cli, dir),
    }
}

/// Bodies cross both ways, with and without a length, up to a megabyte: the server gets
/// the request body whole (a body without a length goes chunked to an HTTP/1.1 server),
/// the client gets the response body whole, on one connection with several streams at
/// once.
#[test]
fn bodies_cross_http3_both_ways() {
    let big = 1 << 20;
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            let body = match r.target.as_str() {
                "/big" => vec![b'y'; big],
                _ => format!(
                    "{} {} {} te={} cl={}",
                    r.method,
                    r.target,
                    r.body.len(),
                    r.header("transfer-encoding").unwrap_or("-"),
                    r.header("content-length").unwrap_or("-"),
                )
                .into_bytes(),
            };
            let mut out =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
            out.extend_from_slice(&body);
            Reply::Raw(out)
        }),
    );
    let (p, port, _dir) = quic_proxy("", &server_line(&origin), "");
    let n = 300_000;
    let results = h3_requests(
        port,
        &json!([
            {"path": "/big"},
            {"method": "POST", "path": "/up", "body_size": n,
             "headers": [["content-length", n.to_string()]]},
            {"method": "POST", "path": "/chunked", "body_size": 70_000},
            {"path": "/plain"},
        ]),
    );
    assert_eq!(results[0]["status"], 200);
    assert_eq!(results[0]["body_size"], big);
    assert_eq!(
        results[1]["body"],
        format!("POST /up {n} te=- cl={n}"),
        "{results:?}"
    );
    assert_eq!(results[2]["body"], "POST /chunked 70000 te=chunked cl=-");
    // A request without a body goes without one (no framing made up for it).
    assert_eq!(results[3]["body"], "GET /plain 0 te=- cl=-");
    drop(p);
}

/// A server that dies in the middle of a response body: the stream is reset (the client
/// is not told the response ended), and the connection serves the next request.
#[test]
fn a_server_dying_mid_body_resets_its_stream_only() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| match r.target.as_str() {
            "/cut" => Reply::RawThenClose(
                b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nonly a part".to_vec(),
            ),
            _ => Reply::Raw(ok_response("fine")),
        }),
    );
    let (p, port, _dir) = quic_proxy("", &server_line(&origin), "");
    let results = h3_requests(
        port,
        &json!([{"path": "/cut", "sequential": true}, {"path": "/after"}]),
    );
    assert!(results[0]["reset"].is_u64(), "{results:?}");
    assert_ne!(results[0]["body_size"], 100_000);
    assert_eq!(results[1]["status"], 200);
    assert_eq!(results[1]["body"], "fine");
    drop(p);
}

/// Requests over HTTP/3 are counted and logged as HTTP/3: the frontend's sessions and
/// requests in `show stat`, the request line `%r` with `HTTP/3.0`, `fc_http_major` 3, and
/// its TLS session in `show info` (`CumSslConns`, and `CurrSslConns` back to 0 after).
#[test]
fn http3_requests_are_counted_and_logged() {
    let logs = UdpSocket::bind("127.0.0.1:0").unwrap();
    logs.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let origin = Origin::start("o");
    let (_cli_dir, sock) = cli_dir();
    let (p, port, _dir) = quic_proxy(
        &format!(
            " log {} local0\n log-format \"%r %ST major=%[fc_http_major] ver=%[req.ver]\"\n",
            logs.local_addr().unwrap()
        ),
        &server_line(&origin),
        &format!(" stats socket {} level admin\n", sock.display()),
    );
    let results = h3_requests(port, &json!([{"path": "/one"}, {"path": "/two"}]));
    assert!(results.iter().all(|r| r["status"] == 200), "{results:?}");
    let mut lines = Vec::new();
    let mut buf = [0u8; 2048];
    while lines.len() < 2 {
        let n = logs.recv(&mut buf).expect("a log line");
        lines.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    lines.sort();
    assert!(
        lines[0].ends_with("GET https://localhost/one HTTP/3.0 200 major=3 ver=3.0"),
        "{lines:?}"
    );
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "req_tot"), "2", "{csv}");
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "stot"), "1", "{csv}");
    // One TLS session counted, and counted out once the connection is gone.
    assert_eq!(show_info_number(&sock, "CumSslConns"), 1);
    wait_until("the QUIC connection counted out", || {
        show_info_number(&sock, "CurrSslConns") == 0
    });
    drop(p);
}

/// A QUIC listener is checked as the configuration loads: it needs `ssl` and a
/// certificate, an HTTP proxy, and an address of its family; `quic-force-retry` needs a
/// QUIC address.
#[test]
fn quic_listeners_are_checked_at_load() {
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let cases = [
        (
            "frontend f\n mode http\n bind quic4@127.0.0.1:4433\n".to_string(),
            "needs 'ssl' and a certificate",
        ),
        (
            format!("frontend f\n mode tcp\n bind quic4@127.0.0.1:4433 ssl crt {pem}\n"),
            "needs 'mode http'",
        ),
        (
            format!("frontend f\n mode http\n bind quic4@[::1]:4433 ssl crt {pem}\n"),
            "expects an IPv4 ADDR:PORT",
        ),
        (
            "frontend f\n mode http\n bind 127.0.0.1:4433 quic-force-retry\n".to_string(),
            "'quic-force-retry' needs a QUIC address",
        ),
    ];
    for (config, error) in cases {
        let (ok, out) = check_config(&format!(
            "{config} default_backend b\nbackend b\n mode http\n server s 127.0.0.1:1\n"
        ));
        assert!(!ok, "{config}");
        assert!(out.contains(error), "{config}: {out}");
        assert!(out.contains(":3:"), "the bind's line: {out}");
    }
    let (ok, out) = check_config(&format!(
        "global\n tune.quic.frontend.max-streams-bidi 10\n cluster-secret s3cret\n\
         frontend f\n mode http\n bind quic4@127.0.0.1:4433 ssl crt {pem} quic-force-retry\n\
         default_backend b\nbackend b\n mode http\n server s 127.0.0.1:1\n"
    ));
    assert!(ok, "{out}");
}

/// `quic-force-retry`: every client proves its address with a Retry before its
/// handshake (counted in `show activity`); aioquic follows the Retry and is served.
/// Without it, a client below `tune.quic.retry-threshold` gets none.
#[test]
fn a_forced_retry_is_followed_and_served() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let (_cli_dir, sock) = cli_dir();
    let (held, port) = quic_port();
    let (held_plain, plain) = quic_port();
    let p = Sluice::start(&format!(
        "global\n cluster-secret s3cret\n nbthread 1\n stats socket {} level admin\n\
         {DEFAULTS}frontend fe\n\
         bind quic4@127.0.0.1:{port} ssl crt {pem} quic-force-retry\n\
         bind quic4@127.0.0.1:{plain} ssl crt {pem}\n default_backend b\n\
         backend b\n server o {}\n",
        sock.display(),
        origin.addr
    ));
    drop((held, held_plain));
    let activity = |row: &str| {
        let out = Sluice::cli(&sock, "show activity");
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{row}:")))
            .unwrap_or_else(|| panic!("{row} in {out}"))
            .to_string();
        line.split_whitespace().nth(1).unwrap().to_string()
    };
    let results = h3_requests(plain, &json!([{"path": "/p"}]));
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(activity("quic_retries"), "0");
    let results = h3_requests(port, &json!([{"path": "/r"}]));
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(activity("quic_retries"), "1");
    assert_eq!(activity("quic_conns"), "2");
    drop(p);
}

/// A `show activity` row's total.
fn activity(sock: &std::path::Path, row: &str) -> u64 {
    let out = Sluice::cli(sock, "show activity");
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{row}: ")))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{row} in {out}"))
}

/// A client that stops reading (it neither takes nor acknowledges anything) makes the
/// proxy hold at most its connection's budget (four buffers, fewer than
/// `tune.quic.frontend.conn-tx-buffers.limit` here) in writes QUIC has not taken, however
/// many streams it has open, as `show activity`'s `h3_queued` counts it (QUIC's own send
/// window is that limit). The client's PINGs keep its connection until it is killed; once
/// its connection then times out, nothing stays counted.
#[test]
fn a_client_that_stops_reading_holds_at_most_the_connection_budget() {
    const BODY: usize = 4 << 20;
    const BUDGET: u64 = 4 * 16384;
    let origin = Origin::sized(BODY);
    let (_cli_dir, sock) = cli_dir();
    let (p, port, _dir) = quic_proxy(
        "",
        &server_line(&origin),
        &format!(
            " stats socket {} level admin\n tune.quic.frontend.conn-tx-buffers.limit 8\n\
             tune.quic.frontend.max-idle-timeout 5s\n",
            sock.display()
        ),
    );
    let requests: Vec<_> = (0..10)
        .map(|i| json!({"path": format!("/big{i}"), "stall": true}))
        .collect();
    let mut client = h3_spawn(port, &serde_json::Value::from(requests));
    // The client says when its requests are sent (it ends within a minute, whatever).
    let mut said = String::new();
    let mut lines = std::io::BufReader::new(client.stderr.take().unwrap()).lines();
    while !said.contains("stalled") {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the client ended: {said}"));
        said += &line.unwrap();
    }
    // QUIC's window fills, then the streams' writes wait.
    wait_until("writes waiting", || activity(&sock, "h3_queued") >= 16384);
    for _ in 0..20 {
        let held = activity(&sock, "h3_queued");
        assert!(held <= BUDGET, "{held} held, over the budget");
    }
    // The client's silence ends its connection; what its streams held is given back.
    let _ = client.kill();
    let _ = client.wait();
    wait_until("nothing left queued", || activity(&sock, "h3_queued") == 0);
    drop(p);
}

/// Many streams of one connection relaying large responses through a budget of one buffer
/// (`conn-tx-buffers.limit 1`): the writes waiting for room are woken one at a time, each
/// passing the turn on, and every response arrives whole.
#[test]
fn streams_waiting_for_their_connections_budget_all_finish() {
    const BODY: usize = 300_000;
    let origin = Origin::sized(BODY);
    let (p, port, _dir) = quic_proxy(
        "",
        &server_line(&origin),
        " tune.quic.frontend.conn-tx-buffers.limit 1\n",
    );
    let requests: Vec<_> = (0..20)
        .map(|i| json!({"path": format!("/big{i}")}))
        .collect();
    let results = h3_requests(port, &serde_json::Value::from(requests));
    assert_eq!(results.len(), 20);
    for r in &results {
        assert_eq!(r["status"], 200, "{r:?}");
        assert_eq!(r["body_size"], BODY, "{r:?}");
    }
    drop(p);
}

/// A client whose address changes in the middle of a connection (a new UDP port: NAT
/// rebinding, or a phone moving networks) keeps its connection: QUIC validates the new
/// path and the next request is served on the same connection (one session counted).
#[test]
fn a_client_that_changes_its_address_keeps_its_connection() {
    let Watched { port, sock, .. } = &watched("", " nbthread 1\n");
    let (port, sock) = (*port, sock.as_path());
    let results = h3_requests(
        port,
        &json!([{"path": "/before", "sequential": true}, {"path": "/after", "rebind": true}]),
    );
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(results[1]["status"], 200, "{results:?}");
    assert_eq!(activity(sock, "quic_conns"), 1);
    let csv = Sluice::cli(sock, "show stat");
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "req_tot"), "2", "{csv}");
}

/// A client whose new address the kernel hashes to another worker's socket keeps its
/// connection too: the connection IDs the proxy gives out name their worker, and a worker
/// that receives a datagram naming another hands it over (`quic_forwarded`), where the
/// other worker would not know the connection. With two workers, a client moves to new
/// ports until one lands on the other worker (each move has a third of a chance or more).
#[test]
fn a_client_that_moves_to_another_workers_socket_keeps_its_connection() {
    let Watched { port, sock, .. } = &watched("", " nbthread 2\n");
    let (port, sock) = (*port, sock.as_path());
    let mut moves: Vec<_> = vec![json!({"path": "/first", "sequential": true})];
    moves.extend((0..10).map(|i| json!({"path": format!("/moved{i}"), "rebind": true})));
    let mut runs = 0;
    while activity(sock, "quic_forwarded") == 0 {
        assert!(runs < 10, "no move reached the other worker in {runs} runs");
        runs += 1;
        let results = h3_requests(port, &serde_json::Value::from(moves.clone()));
        for r in &results {
            assert_eq!(r["status"], 200, "{results:?}");
        }
        assert_eq!(activity(sock, "quic_conns"), runs, "one connection a run");
    }
    assert_eq!(activity(sock, "quic_fwd_lost"), 0);
    // What was handed over was read: the inboxes hold nothing.
    wait_until("the inboxes empty", || activity(sock, "quic_fwd_held") == 0);
    let csv = Sluice::cli(sock, "show stat");
    let served = (runs * moves.len() as u64).to_string();
    assert_eq!(
        stat_field(&csv, "fe", "FRONTEND", "req_tot"),
        served,
        "{csv}"
    );
}

/// Datagrams that cannot be QUIC packets (empty, shorter than a protected packet, an
/// Initial in less than 1,200 bytes, text) are dropped before the endpoint and counted
/// (`quic_malformed`); a real client's datagrams afterwards are served and none of them
/// is counted.
#[test]
fn datagrams_that_are_no_quic_packets_are_dropped_and_counted() {
    let Watched { port, sock, .. } = &watched("", "");
    let (port, sock) = (*port, sock.as_path());
    let mut initial = vec![0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x40, 80];
    initial.resize(100, 0);
    let garbage: [&[u8]; 4] = [b"", &[0x40; 10], &initial, b"GET / HTTP/1.1\r\n\r\n"];
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in garbage {
        udp.send_to(d, ("127.0.0.1", port)).unwrap();
    }
    wait_until("the datagrams counted", || {
        activity(sock, "quic_malformed") == 4
    });
    let results = h3_requests(port, &json!([{"path": "/"}]));
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(activity(sock, "quic_malformed"), 4);
}

/// A connection with no stream for `timeout client` is closed by the proxy (the client
/// hears the close: not its own idle timer, which QUIC's 30 s idle timeout would set off),
/// whatever the one-second flood sample does meanwhile.
#[test]
fn an_idle_connection_is_closed_at_its_timeout() {
    let origin = Origin::start("o");
    let (p, port, _dir) = quic_proxy(" timeout client 1500ms\n", &server_line(&origin), "");
    // (`pings: 0`: no PING, the connection's end awaited.)
    let results = h3_requests(
        port,
        &json!([{"path": "/", "sequential": true}, {"pings": 0}]),
    );
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_ne!(results[1]["reason"], "Idle timeout", "{results:?}");
    drop(p);
}

/// A client that floods its connection with frames that do no work (PING here, each in
/// a packet of its own) loses it with H3_EXCESSIVE_LOAD once past the limit, as an
/// HTTP/2 client does, and the cut is counted (`quic_floods`); its earlier request was
/// served.
#[test]
fn a_flood_of_pings_loses_its_connection() {
    let Watched { port, sock, .. } = &watched("", "");
    let results = h3_requests(
        *port,
        &json!([{"path": "/", "sequential": true}, {"pings": 100_000}]),
    );
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(results[1]["closed"], 0x107, "{results:?}");
    assert_eq!(activity(sock, "quic_floods"), 1);
}

/// 0-RTT is refused: the session tickets the proxy gives allow no early data, so a client
/// that resumes its session (which it does) sends its requests only once the handshake is
/// done, where they cannot be replayed.
#[test]
fn sessions_resume_without_early_data() {
    let origin = Origin::start("o");
    let (p, port, _dir) = quic_proxy("", &server_line(&origin), "");
    let out = h3_requests(port, &json!([{"path": "/again", "resume": true}]));
    let out = &out[0];
    // (No early data extension in the ticket, or a zero allowance.)
    assert_eq!(
        out["ticket_max_early_data"].as_u64().unwrap_or(0),
        0,
        "{out}"
    );
    assert_eq!(out["resumed"], true, "{out}");
    assert_eq!(out["early_data_accepted"], false, "{out}");
    assert_eq!(out["results"][0]["status"], 200, "{out}");
    drop(p);
}

/// With `allow-0rtt` on its bind, a resumed client's requests come as early data
/// (the tickets allow it): a GET is served at once, its server told `Early-Data: 1`; a
/// POST sent with it waits for the handshake to end (a replay never ends it), so it
/// reaches its server as an ordinary request; a request after a full handshake is not
/// marked; under `http-request wait-for-handshake` (in a backend too) an early GET waits
/// as well. Rules see it by `ssl_fc_has_early`. Over TCP the option is refused at load.
#[test]
fn early_data_is_taken_for_safe_requests_with_allow_0rtt() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            let early = r.header("early-data").unwrap_or("-").to_string();
            let fetch = r.header("x-has-early").unwrap_or("-").to_string();
            let text = format!("{} {} early={early} has_early={fetch}", r.method, r.target);
            ok_response(&text).into()
        }),
    );
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let (held, port) = quic_port();
    let p = Sluice::start(&format!(
        "global\n nbthread 1\n{DEFAULTS}frontend fe\n\
         bind quic4@127.0.0.1:{port} ssl crt {pem} allow-0rtt\n\
         http-request set-header x-has-early %[ssl_fc_has_early]\n default_backend b\n\
         backend b\n server o {}\n",
        origin.addr
    ));
    drop(held);
    let reqs = json!([
        {"path": "/get", "resume": true},
        {"method": "POST", "path": "/post", "body": "b"},
    ]);
    let out = h3_requests(port, &reqs);
    let out = &out[0];
    assert_eq!(out["ticket_max_early_data"], 0xffff_ffffu32, "{out}");
    assert_eq!(out["resumed"], true, "{out}");
    assert_eq!(out["early_data_accepted"], true, "{out}");
    assert_eq!(
        out["results"][0]["body"], "GET /get early=1 has_early=1",
        "{out}"
    );
    assert_eq!(
        out["results"][1]["body"], "POST /post early=- has_early=0",
        "{out}"
    );
    // A request after a full handshake is no early data.
    let plain = h3_requests(port, &json!([{"path": "/plain"}]));
    assert_eq!(
        plain[0]["body"], "GET /plain early=- has_early=0",
        "{plain:?}"
    );
    drop(p);
    // With `http-request wait-for-handshake` (here in the backend), an early GET waits
    // too; `ssl-default-bind-options allow-0rtt` allows early data as the bind's own.
    let (held, port) = quic_port();
    let p = Sluice::start(&format!(
        "global\n nbthread 1\n ssl-default-bind-options allow-0rtt\n{DEFAULTS}frontend fe\n\
         bind quic4@127.0.0.1:{port} ssl crt {pem}\n default_backend b\n\
         backend b\n http-request wait-for-handshake\n server o {}\n",
        origin.addr
    ));
    drop(held);
    let out = h3_requests(port, &json!([{"path": "/held", "resume": true}]));
    assert_eq!(out[0]["early_data_accepted"], true, "{out:?}");
    assert_eq!(
        out[0]["results"][0]["body"], "GET /held early=- has_early=-",
        "{out:?}"
    );
    drop(p);
    let (ok, text) = check_config(&format!(
        "{DEFAULTS}frontend fe\n bind 127.0.0.1:1 ssl crt {pem} allow-0rtt\n default_backend b\n\
         backend b\n server o {}\n",
        origin.addr
    ));
    assert!(!ok && text.contains("QUIC listeners only"), "{text}");
    // Without a session cache no early data can come: said at load.
    let (ok, text) = check_config(&format!(
        "global\n tune.ssl.cachesize 0\n{DEFAULTS}frontend fe\n\
         bind quic4@127.0.0.1:1 ssl crt {pem} allow-0rtt\n default_backend b\n\
         backend b\n server o {}\n",
        origin.addr
    ));
    assert!(ok && text.contains("takes no early data"), "{text}");
}

/// Compression applies to HTTP/3 responses as to the others: a client that accepts gzip
/// gets the body compressed (delimited by the stream, no length), which inflates to the
/// server's; one that does not gets it as it is, with the server's length.
#[test]
fn compression_applies_over_http3() {
    use std::io::Read;
    let text: String = (0..400).map(|i| format!("line {i} of a page\n")).collect();
    let page = text.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |_: &Received| {
            Reply::Raw(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{page}",
                    page.len()
                )
                .into_bytes(),
            )
        }),
    );
    let (p, port, _dir) = quic_proxy(
        " compression algo gzip\n compression type text/plain\n",
        &server_line(&origin),
        "",
    );
    let results = h3_requests(
        port,
        &json!([{"path": "/z", "headers": [["accept-encoding", "gzip"]]}, {"path": "/plain"}]),
    );
    let zipped = &results[0];
    assert_eq!(
        h3_field(zipped, "content-encoding").as_deref(),
        Some("gzip"),
        "{zipped}"
    );
    assert_eq!(h3_field(zipped, "content-length"), None, "{zipped}");
    let body: Vec<u8> = zipped["body"]
        .as_str()
        .unwrap()
        .chars()
        .map(|c| c as u8)
        .collect();
    assert!(body.len() < text.len() / 4, "{} bytes", body.len());
    let mut inflated = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut inflated)
        .unwrap();
    assert_eq!(inflated, text);
    let plain = &results[1];
    assert_eq!(h3_field(plain, "content-encoding"), None);
    assert_eq!(plain["body_size"], text.len());
    assert_eq!(
        h3_field(plain, "content-length"),
        Some(text.len().to_string())
    );
    drop(p);
}

/// `sess.` variables belong to the session, which for HAProxy is the connection: a later
/// request of the same QUIC connection reads what an earlier one set, another connection
/// does not (each HTTP/3 stream used to start with variables of its own).
#[test]
fn the_streams_of_a_quic_connection_share_its_session_variables() {
    let origin = Origin::start("o");
    let (p, port, _dir) = quic_proxy(
        " http-request set-var(sess.user) str(alice) if { path /login }\n\
         http-request set-header x-user %[var(sess.user)]\n",
        &server_line(&origin),
        "",
    );
    let one = h3_requests(
        port,
        &json!([{"path": "/login", "sequential": true}, {"path": "/later"}]),
    );
    let other = h3_requests(port, &json!([{"path": "/elsewhere"}]));
    assert!(
        one.iter().chain(&other).all(|r| r["status"] == 200),
        "{one:?} {other:?}"
    );
    let user = |path: &str| -> Option<String> {
        origin
            .requests()
            .into_iter()
            .find(|r| r.target == path)
            .and_then(|r| r.header("x-user").map(str::to_string))
    };
    assert_eq!(user("/login").as_deref(), Some("alice"));
    assert_eq!(user("/later").as_deref(), Some("alice"));
    assert_eq!(user("/elsewhere").as_deref(), Some(""));
    drop(p);
}

/// A CONNECT over HTTP/3 opens a tunnel as over HTTP/2: the server's 2xx reaches the
/// client as the stream's answer (no length), the tunnel's bytes cross both ways as DATA,
/// and the client's end reaches the server, whose last bytes and end come back. A server
/// that refuses answers as it says; extended CONNECT (a protocol) gets 501.
#[test]
fn a_connect_over_http3_opens_a_tunnel() {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let echo = tunnel_echo_server(heads.clone());
    let (p, port, _dir) = quic_proxy("", &format!(" server e {echo}\n"), "");
    let results = h3_requests(
        port,
        &json!([
            {"authority": "echo.test:7", "tunnel": ["hello ", "over quic"], "sequential": true},
            {"authority": "refused.test:7", "tunnel": ["never"]},
        ]),
    );
    let open = &results[0];
    assert_eq!(open["status"], 200, "{open}");
    assert_eq!(h3_field(open, "content-length"), None, "{open}");
    assert_eq!(open["body"], "hello over quicbye", "{open}");
    let refused = &results[1];
    assert_eq!(refused["status"], 403, "{refused}");
    assert_eq!(refused["body"], "refused", "{refused}");
    let heads = heads.lock().unwrap();
    assert!(
        heads[0].starts_with("CONNECT echo.test:7 HTTP/1.1\r\n"),
        "{heads:?}"
    );
    drop(p);
}

/// A frontend serving the same site over TLS (TCP) and QUIC advertises HTTP/3 with
/// HAProxy's rule (`http-response set-header alt-svc ...`): a client over HTTP/2 learns the
/// QUIC port from the field, and an HTTP/3 client reaches the same rules and servers there.
#[test]
fn alt_svc_leads_a_tls_client_to_http3() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let (held, port) = quic_port();
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n {{fe}} ssl crt {pem} alpn h2,http/1.1\n\
         bind quic4@127.0.0.1:{port} ssl crt {pem}\n\
         http-response set-header alt-svc \"h3=\\\":{port}\\\"; ma=60\"\n\
         default_backend b\n\
         backend b\n server o {}\n",
        origin.addr
    ));
    drop(held);
    let out = std::process::Command::new("curl")
        .args(["-sk", "--http2", "-D", "-", "-o", "/dev/null"])
        .arg(format!("https://{}/", p.addr()))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/2 200"), "{head}");
    let advertised = head
        .lines()
        .find_map(|l| l.strip_prefix("alt-svc: "))
        .unwrap_or_else(|| panic!("no alt-svc in {head}"));
    let quic: u16 = advertised
        .split_once("h3=\":")
        .and_then(|(_, rest)| rest.split('"').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no h3 port in {advertised}"));
    assert_eq!(quic, port);
    let results = h3_requests(quic, &json!([{"path": "/upgraded"}]));
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert!(h3_field(&results[0], "alt-svc").is_some());
    assert_eq!(origin.requests().len(), 2);
    drop(p);
}

/// A reload (`-sf`) keeps the QUIC connections under way on the old process: a large
/// response it is sending when the new process starts (its sending needs the client's
/// acknowledgements and window updates after the reload) arrives whole from the old
/// process, while a new connection reaches the new one. (Each QUIC connection has a socket
/// of its own, connected to its client; the old process's listener leaves the address's
/// group at its soft stop.)
#[test]
fn a_reload_keeps_the_quic_connections_under_way() {
    const BODY: usize = 3 << 20;
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            if r.target == "/slow" {
                // Held until the test has reloaded the proxy (it says so on the channel).
                let _ = gate.lock().unwrap().recv_timeout(TIMEOUT);
                let mut raw =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n").into_bytes();
                raw.resize(raw.len() + BODY, b'x');
                return Reply::Raw(raw);
            }
            Reply::Raw(ok_response("fresh"))
        }),
    );
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let (held, port) = quic_port();
    let cfg = |generation: &str| {
        format!(
            "global\n nbthread 1\n{DEFAULTS}frontend fe\n\
             bind quic4@127.0.0.1:{port} ssl crt {pem}\n\
             http-response set-header x-gen {generation}\n default_backend b\n\
             backend b\n server o {}\n",
            origin.addr
        )
    };
    let mut old = Sluice::start(&cfg("one"));
    drop(held);
    let client = h3_spawn(port, &json!([{"path": "/slow"}]));
    wait_until("the request reached the server", || origin.count() == 1);
    let new = Sluice::start_args(&cfg("two"), &["-sf".into(), old.pid().to_string()]);
    wait_until("the old process stops softly", || {
        old.stderr().contains("soft stop")
    });
    release.send(()).unwrap();
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\nold: {}\nnew: {}",
        String::from_utf8_lossy(&out.stderr),
        old.stderr(),
        new.stderr()
    );
    let results: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results[0]["status"], 200, "{results:?}");
    assert_eq!(results[0]["body_size"], BODY);
    assert_eq!(h3_field(&results[0], "x-gen").as_deref(), Some("one"));
    let fresh = h3_requests(port, &json!([{"path": "/fresh"}]));
    assert_eq!(
        h3_field(&fresh[0], "x-gen").as_deref(),
        Some("two"),
        "{fresh:?}"
    );
    // The old process ends once its connection has.
    wait_until("the old process exits", || {
        old.child.try_wait().unwrap().is_some()
    });
    drop(new);
}
