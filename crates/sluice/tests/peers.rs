//! Stick tables shared between processes over HAProxy's peers protocol: sluice nodes with
//! each other, and with a real HAProxy 2.6 as a peer, on loopback ports.

mod common;
use common::*;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};

/// One line of `show table NAME` holding `key=KEY`, if there is one.
fn entry(sock: &Path, table: &str, key: &str) -> Option<String> {
    Sluice::cli(sock, &format!("show table {table}"))
        .lines()
        .find(|l| l.contains(&format!(" key={key} ")))
        .map(str::to_string)
}

/// Waits until `show table NAME` on `sock` has `key=KEY` with `field` (`name=value`).
fn wait_entry(sock: &Path, table: &str, key: &str, field: &str) -> String {
    let mut last = None;
    wait_until(&format!("{key} with {field} in {table}: {last:?}"), || {
        last = entry(sock, table, key);
        last.as_ref()
            .is_some_and(|l| l.split(' ').any(|w| w == field))
    });
    last.unwrap_or_default()
}

/// HAProxy 2.6's binary (Debian installs it in /usr/sbin, which a user's PATH may lack).
fn haproxy() -> &'static str {
    match Path::new("/usr/sbin/haproxy").exists() {
        true => "/usr/sbin/haproxy",
        false => "haproxy",
    }
}

/// A node of a two- or three-peer cluster, with its CLI socket.
struct Node {
    proxy: Sluice,
    sock: PathBuf,
    _dir: TempDir,
}

/// The configuration of node `me` of `peers` (name, port): a frontend tracking the client
/// address with a limit of 3 requests per 10 s, and tables of each key type in the
/// section.
fn config(me: &str, peers: &[(&str, u16)], sock: &Path, origin: SocketAddr) -> String {
    let lines: String = peers
        .iter()
        .map(|(n, p)| format!("    peer {n} 127.0.0.1:{p}\n"))
        .collect();
    format!(
        "global\n    localpeer {me}\n    stats socket {} level admin\n{DEFAULTS}\
         peers mesh\n{lines}\
         \x20   table strs type string len 32 size 100 expire 60s store gpc0,http_req_cnt\n\
         \x20   table ints type integer size 100 expire 60s store gpc0,conn_cnt\n\
         frontend fe\n    {{fe}}\n    stick-table type ip size 100 expire 60s store http_req_rate(10s),gpc0 peers mesh\n\
         \x20   http-request track-sc0 src\n\
         \x20   http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt 3 }}\n\
         \x20   default_backend be\n\
         backend be\n    server s1 {origin}\n",
        sock.display()
    )
}

fn sluice_node(me: &str, peers: &[(&str, u16)], origin: SocketAddr) -> Node {
    let (dir, sock) = cli_dir();
    let proxy = Sluice::start(&config(me, peers, &sock, origin));
    Node {
        proxy,
        sock,
        _dir: dir,
    }
}

#[test]
fn two_nodes_share_a_rate_limit_and_a_restarted_node_learns_the_tables() {
    let origin = Origin::start("o");
    let peers = [("a", free_port()), ("b", free_port())];
    let a = sluice_node("a", &peers, origin.addr);
    let b = sluice_node("b", &peers, origin.addr);
    // Three requests on A: within the limit.
    for _ in 0..3 {
        assert_eq!(get(a.proxy.addr(), "/").status, 200);
    }
    // B learns the client's rate from A, and counts its next request on top of it.
    wait_entry(&b.sock, "fe", "127.0.0.1", "http_req_rate(10000)=3");
    assert_eq!(get(b.proxy.addr(), "/").status, 429);
    // And A learns B's count in turn: the last writer wins.
    wait_entry(&a.sock, "fe", "127.0.0.1", "http_req_rate(10000)=4");
    assert_eq!(get(a.proxy.addr(), "/").status, 429);
    // Tables of the section itself, each key type, changed from the CLI.
    assert_eq!(
        Sluice::cli(&a.sock, "set table mesh/strs key alice data.gpc0 5"),
        "\n"
    );
    assert_eq!(
        Sluice::cli(&b.sock, "set table mesh/ints key 42 data.gpc0 7"),
        "\n"
    );
    wait_entry(&b.sock, "mesh/strs", "alice", "gpc0=5");
    wait_entry(&a.sock, "mesh/ints", "42", "gpc0=7");
    // `show peers` in HAProxy's layout: the session with B is up, its tables listed.
    let shown = Sluice::cli(&a.sock, "show peers");
    assert!(shown.contains(" id=mesh disabled=0 "), "{shown}");
    assert!(
        shown.contains(": id=b(remote,active) addr=127.0.0.1:"),
        "{shown}"
    );
    assert!(shown.contains(" last_status=ESTA "), "{shown}");
    assert!(shown.contains(": id=a(local,inactive) "), "{shown}");
    // B's session has its next heartbeat due (HAProxy's timer format: `2s`, or `<PAST>`).
    let b_timers = shown
        .lines()
        .skip_while(|l| !l.contains(": id=b(remote,active)"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        b_timers.contains(" heartbeat=") && !b_timers.contains(" heartbeat=<NEVER>"),
        "{shown}"
    );
    assert!(shown.contains(" id=mesh/strs update="), "{shown}");
    assert_eq!(
        Sluice::cli(&a.sock, "show peers nowhere").trim_end(),
        "No such peers"
    );
    wait_until("A's session with B in show info", || {
        let info = Sluice::cli(&a.sock, "show info");
        info.contains("\nActivePeers: 1\n") && info.contains("\nConnectedPeers: 1\n")
    });
    // B restarts with nothing: it asks A for the tables.
    drop(b);
    let b = sluice_node("b", &peers, origin.addr);
    wait_entry(&b.sock, "mesh/strs", "alice", "gpc0=5");
    wait_entry(&b.sock, "mesh/ints", "42", "gpc0=7");
    wait_entry(&b.sock, "fe", "127.0.0.1", "gpc0=0");
}

#[test]
fn three_nodes_each_push_their_changes_to_the_others() {
    let origin = Origin::start("o");
    let peers = [("a", free_port()), ("b", free_port()), ("c", free_port())];
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|me| sluice_node(me, &peers, origin.addr))
        .collect();
    for (i, n) in nodes.iter().enumerate() {
        let cmd = format!("set table mesh/strs key k{i} data.gpc0 {}", 10 + i);
        assert_eq!(Sluice::cli(&n.sock, &cmd), "\n");
    }
    for n in &nodes {
        for i in 0..3 {
            wait_entry(
                &n.sock,
                "mesh/strs",
                &format!("k{i}"),
                &format!("gpc0={}", 10 + i),
            );
        }
    }
}

/// What a peer port answers to `bytes`, until it closes.
fn answer_of(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    read_to_close(addr, bytes)
}

#[test]
fn hostile_bytes_on_the_peer_port_end_that_session_only() {
    let origin = Origin::start("o");
    let peers = [("a", free_port()), ("b", free_port())];
    let a = sluice_node("a", &peers, origin.addr);
    let b = sluice_node("b", &peers, origin.addr);
    let at: SocketAddr = format!("127.0.0.1:{}", peers[0].1).parse().unwrap();
    // Handshakes refused with HAProxy's status codes.
    assert_eq!(answer_of(at, b"GET / HTTP/1.0\r\n\r\n\r\n"), b"501\n");
    assert_eq!(answer_of(at, b"HAProxyS 3.0\nx\ny 1 1\n"), b"502\n");
    assert_eq!(answer_of(at, b"HAProxyS 2.1\nnot-a\nb 1 1\n"), b"503\n");
    assert_eq!(answer_of(at, b"HAProxyS 2.1\na\nstranger 1 1\n"), b"504\n");
    // A session that then sends the reserved class, a message too big and a truncated
    // definition: each gets HAProxy's error message and is closed.
    let hello = b"HAProxyS 2.1\na\nb 1 1\n".to_vec();
    for (bad, error) in [
        (vec![255u8, 0], [1u8, 0]),
        (vec![10, 0x80, 0xff, 0xff, 0xff, 0x7f], [1, 1]),
        (vec![10, 0x82, 3, 1, 9, b'x'], [1, 0]),
    ] {
        let got = answer_of(at, &[hello.clone(), bad].concat());
        assert!(got.starts_with(b"200\n"), "{got:?}");
        assert!(got.ends_with(&error), "{got:?}");
    }
    // Each counted as a protocol error of the peer it claimed to be.
    let shown = Sluice::cli(&a.sock, "show peers mesh");
    assert!(shown.contains(" proto_err=3 "), "{shown}");
    // Updates of a table A does not have are skipped; a key longer than the table's is cut
    // to its length, as HAProxy cuts it.
    let message = |kind: u8, body: &[u8]| [&[10, kind, body.len() as u8][..], body].concat();
    let define = |id: u8, name: &[u8]| {
        // Id, name, key type 6 (string) of length 33, data types: gpc0 (bit 2).
        let body = [&[id, name.len() as u8][..], name, &[6, 33, 4]].concat();
        message(0x82, &body)
    };
    let update = |key: &[u8], gpc0: u8| {
        let body = [&[0, 0, 0, 1, key.len() as u8][..], key, &[gpc0]].concat();
        message(0x80, &body)
    };
    let long = vec![b'k'; 100];
    let mut rogue = TcpStream::connect(at).unwrap();
    rogue
        .write_all(
            &[
                hello.clone(),
                define(7, b"/nope"),
                update(b"z", 1),
                define(1, b"/strs"),
                update(&long, 9),
            ]
            .concat(),
        )
        .unwrap();
    wait_entry(&a.sock, "mesh/strs", &"k".repeat(32), "gpc0=9");
    assert!(entry(&a.sock, "mesh/strs", "z").is_none());
    drop(rogue);
    // A peer defining tables without end is cut off: what a session keeps is bounded.
    let many: Vec<u8> = (0..100u8).flat_map(|i| define(i + 10, b"/other")).collect();
    let got = answer_of(at, &[hello.clone(), many].concat());
    assert!(
        got.starts_with(b"200\n") && got.ends_with(&[1, 0]),
        "{got:?}"
    );
    // The stranger took B's place for a while; the cluster still syncs afterwards.
    assert_eq!(
        Sluice::cli(&b.sock, "set table mesh/strs key after data.gpc0 1"),
        "\n"
    );
    wait_entry(&a.sock, "mesh/strs", "after", "gpc0=1");
}

/// HAProxy 2.6 (Debian's package) as the other peer: entries made on either side reach
/// the other, for ip, string and integer keys, counters and rates.
#[test]
fn haproxy_and_sluice_share_tables() {
    let origin = Origin::start("o");
    let peers = [("h", free_port()), ("s", free_port())];
    let s = sluice_node("s", &peers, origin.addr);
    let (hdir, hsock) = cli_dir();
    let h = Sluice::start_program(
        haproxy(),
        &["-db"],
        &config("h", &peers, &hsock, origin.addr),
    );
    wait_until("HAProxy's CLI", || hsock.exists());
    // Requests through HAProxy count in sluice's table, and the other way round.
    for _ in 0..2 {
        assert_eq!(get(h.addr(), "/").status, 200);
    }
    wait_entry(&s.sock, "fe", "127.0.0.1", "http_req_rate(10000)=2");
    assert_eq!(get(s.proxy.addr(), "/").status, 200);
    wait_entry(&hsock, "fe", "127.0.0.1", "http_req_rate(10000)=3");
    // Counters set from either CLI, in tables of each key type.
    let set = |sock: &Path, cmd: &str| assert_eq!(Sluice::cli(sock, cmd).trim(), "", "{cmd}");
    set(
        &hsock,
        "set table mesh/strs key alice data.gpc0 5 data.http_req_cnt 9",
    );
    set(&s.sock, "set table mesh/strs key bob data.gpc0 6");
    set(&hsock, "set table mesh/ints key 42 data.gpc0 7");
    set(&s.sock, "set table mesh/ints key -3 data.gpc0 8");
    set(&s.sock, "set table fe key 127.0.0.9 data.gpc0 4");
    wait_entry(&s.sock, "mesh/strs", "alice", "gpc0=5");
    wait_entry(&s.sock, "mesh/strs", "alice", "http_req_cnt=9");
    wait_entry(&hsock, "mesh/strs", "bob", "gpc0=6");
    wait_entry(&s.sock, "mesh/ints", "42", "gpc0=7");
    // Integer keys are 32-bit: -3 is 4294967293 on both sides.
    wait_entry(&hsock, "mesh/ints", "4294967293", "gpc0=8");
    wait_entry(&s.sock, "mesh/ints", "4294967293", "gpc0=8");
    wait_entry(&hsock, "fe", "127.0.0.9", "gpc0=4");
    drop((h, hdir));
}

/// `stick on src` holds across nodes: the server a client was given on one node is the one
/// it gets on the other, from the entry the first node shared.
#[test]
fn persistence_holds_across_nodes() {
    let (s1, s2) = (Origin::start("s1"), Origin::start("s2"));
    let peers = [("a", free_port()), ("b", free_port())];
    let node = |me: &str| {
        let (dir, sock) = cli_dir();
        let lines: String = peers
            .iter()
            .map(|(n, p)| format!("    peer {n} 127.0.0.1:{p}\n"))
            .collect();
        let proxy = Sluice::start(&format!(
            "global\n    localpeer {me}\n    stats socket {} level admin\n{DEFAULTS}peers mesh\n{lines}\
             frontend fe\n    {{fe}}\n    default_backend be\n\
             backend be\n    balance roundrobin\n    stick-table type ip size 100 expire 60s peers mesh\n    stick on src\n\
             \x20   server s1 {} id 1\n    server s2 {} id 2\n",
            sock.display(),
            s1.addr,
            s2.addr
        ));
        Node {
            proxy,
            sock,
            _dir: dir,
        }
    };
    let (a, b) = (node("a"), node("b"));
    // On A the client lands on s2 (s1 is out of service there).
    assert_eq!(Sluice::cli(&a.sock, "disable server be/s1"), "\n");
    assert_eq!(
        get(a.proxy.addr(), "/").text().split(' ').next(),
        Some("s2")
    );
    // B learns the client's server and sends it there, where its round robin would start
    // with s1.
    wait_entry(&b.sock, "be", "127.0.0.1", "server_id=2");
    for _ in 0..3 {
        assert_eq!(
            get(b.proxy.addr(), "/").text().split(' ').next(),
            Some("s2")
        );
    }
    assert_eq!(s1.count(), 0);
}

/// TLS between peers, in HAProxy 2.x's syntax (`bind ... ssl crt`, `default-server ssl`,
/// `server NAME` for the local peer): sluice and HAProxy 2.6 share a table over TLS, and a
/// peer speaking clear text to the TLS port gets nothing.
#[test]
fn peers_share_tables_over_tls() {
    let origin = Origin::start("o");
    let certs = TempDir::new();
    let pem = self_signed(&certs);
    let peers = [("h", free_port()), ("s", free_port())];
    let config = |me: &str, sock: &Path| {
        let port = |n: &str| peers.iter().find(|p| p.0 == n).map(|p| p.1).unwrap_or(0);
        let other = if me == "h" { "s" } else { "h" };
        format!(
            "global\n    localpeer {me}\n    stats socket {} level admin\n{DEFAULTS}\
             peers mesh\n    default-server ssl verify none crt {pem}\n    bind 127.0.0.1:{} ssl crt {pem}\n\
             \x20   server {me}\n    server {other} 127.0.0.1:{}\n\
             \x20   table strs type string len 32 size 100 expire 60s store gpc0\n\
             frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
            sock.display(),
            port(me),
            port(other),
            origin.addr
        )
    };
    let (_sdir, ssock) = cli_dir();
    let _s = Sluice::start(&config("s", &ssock));
    let (_hdir, hsock) = cli_dir();
    let _h = Sluice::start_program(haproxy(), &["-db"], &config("h", &hsock));
    wait_until("HAProxy's CLI", || hsock.exists());
    let set = |sock: &Path, cmd: &str| assert_eq!(Sluice::cli(sock, cmd).trim(), "", "{cmd}");
    set(&hsock, "set table mesh/strs key from-haproxy data.gpc0 3");
    set(&ssock, "set table mesh/strs key from-sluice data.gpc0 4");
    wait_entry(&ssock, "mesh/strs", "from-haproxy", "gpc0=3");
    wait_entry(&hsock, "mesh/strs", "from-sluice", "gpc0=4");
    // A clear-text hello on the TLS port is not a TLS handshake: no status comes back.
    let at: SocketAddr = format!("127.0.0.1:{}", peers[1].1).parse().unwrap();
    let answer = answer_of(at, b"HAProxyS 2.1\ns\nh 1 1\n");
    assert!(!answer.starts_with(b"200"), "{answer:?}");
}

/// A reload from HAProxy 2.6 to sluice on one host: the new sluice process calls the old
/// HAProxy at the local peer's address, as the local peer, and learns its tables before it
/// serves.
#[test]
fn sluice_replacing_haproxy_learns_its_tables_through_the_local_peer() {
    let origin = Origin::start("o");
    let port = free_port();
    let config = |sock: &Path| {
        format!(
            "global\n    localpeer lb1\n    stats socket {} level admin\n{DEFAULTS}\
             peers mesh\n    peer lb1 127.0.0.1:{port}\n\
             \x20   table strs type string len 32 size 100 expire 60s store gpc0,http_req_rate(10s)\n\
             frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
            sock.display(),
            origin.addr
        )
    };
    let (_hdir, hsock) = cli_dir();
    let _h = Sluice::start_program(haproxy(), &["-db"], &config(&hsock));
    wait_until("HAProxy's CLI", || hsock.exists());
    let set = |cmd: &str| assert_eq!(Sluice::cli(&hsock, cmd).trim(), "", "{cmd}");
    set("set table mesh/strs key kept data.gpc0 11 data.http_req_rate 5");
    let (_sdir, ssock) = cli_dir();
    let s = Sluice::start(&config(&ssock));
    assert!(
        s.stderr()
            .contains("1 entries learned from the previous process"),
        "{}",
        s.stderr()
    );
    let line = entry(&ssock, "mesh/strs", "kept").unwrap_or_default();
    assert!(line.contains(" gpc0=11 "), "{line}");
    assert!(line.contains(" http_req_rate(10000)=5"), "{line}");
}
