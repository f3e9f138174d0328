//! Run-time name resolution (`resolvers`): servers follow their names as a real DNS server
//! (dnsmasq, from Debian's packages) changes its records under traffic, leave service when
//! their name stops resolving and come back, and bad answers from a hostile nameserver
//! are counted and ignored.

mod common;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

/// dnsmasq answering on a loopback port from a hosts file the test rewrites; names under
/// `test` it does not have are NXDOMAIN.
struct Dns {
    child: Child,
    hosts: PathBuf,
    addr: SocketAddr,
}

impl Dns {
    fn start(dir: &TempDir, hosts: &str) -> Dns {
        Dns::start_with(dir, hosts, &[])
    }

    /// With more of dnsmasq's options (`--srv-host=...`).
    fn start_with(dir: &TempDir, hosts: &str, extra: &[String]) -> Dns {
        let path = PathBuf::from(dir.write("hosts", hosts));
        // The files must be readable once dnsmasq drops to its own user.
        let _ = Command::new("chmod")
            .args(["a+rx", &dir.0.to_string_lossy()])
            .status();
        let _ = Command::new("chmod")
            .args(["a+r", &path.to_string_lossy()])
            .status();
        // A port free a moment ago may be taken by the time dnsmasq binds it (by the
        // query sockets of another test's proxy): another is tried.
        for _ in 0..20 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
            if let Some(child) = Dns::spawn(&path, addr, extra) {
                return Dns {
                    child,
                    hosts: path,
                    addr,
                };
            }
        }
        panic!("dnsmasq never started");
    }

    /// dnsmasq on `addr`, once it answers (`None` when it could not bind the port).
    fn spawn(hosts: &Path, addr: SocketAddr, extra: &[String]) -> Option<Child> {
        let mut child = Command::new("dnsmasq")
            .args([
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--local=/test/",
                "--pid-file=",
                &format!("--port={}", addr.port()),
                &format!("--addn-hosts={}", hosts.display()),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq (Debian's dnsmasq-base) must be installed");
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe
            .set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 512];
        for _ in 0..300 {
            if child.try_wait().ok().flatten().is_some() {
                return None;
            }
            let _ = probe.send_to(&probe_query(), addr);
            if probe.recv_from(&mut buf).is_ok() {
                return Some(child);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Started again on its port with other options (SRV records are not reread on
    /// SIGHUP), as soon as the port is free again; queries meanwhile time out, which the
    /// `hold timeout` of the tests covers.
    fn restart_with(&mut self, extra: &[String]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut started = None;
        wait_until("dnsmasq to start again on its port", || {
            // Polled until the old one's port is free, then started there.
            if UdpSocket::bind(self.addr).is_err() {
                return false;
            }
            started = Dns::spawn(&self.hosts, self.addr, extra);
            started.is_some()
        });
        self.child = started.expect("started");
    }

    /// New records: the hosts file is rewritten and reread (SIGHUP).
    fn set(&self, hosts: &str) {
        std::fs::write(&self.hosts, hosts).unwrap();
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A query for `probe.test` (A), as a readiness probe.
fn probe_query() -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["probe", "test"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Listeners on one port at 127.0.0.1, 127.0.0.2, ... (a name moving between them keeps
/// the server line's port).
fn hosts_on_one_port(n: u8) -> Vec<TcpListener> {
    'port: for _ in 0..50 {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        let mut all = vec![first];
        for host in 2..=n {
            match TcpListener::bind(("127.0.0.".to_string() + &host.to_string(), port)) {
                Ok(l) => all.push(l),
                Err(_) => continue 'port,
            }
        }
        return all;
    }
    panic!("no port free on 127.0.0.1 to 127.0.0.{n}");
}

fn two_hosts_one_port() -> (TcpListener, TcpListener) {
    let mut l = hosts_on_one_port(2);
    let b = l.pop().unwrap();
    (l.pop().unwrap(), b)
}

fn config(sock: &Path, ns: SocketAddr, server: &str) -> String {
    config_with(sock, ns, server, ("", ""))
}

/// With more lines in `global` and in the backend.
fn config_with(
    sock: &Path,
    ns: SocketAddr,
    server: &str,
    (global, backend): (&str, &str),
) -> String {
    format!(
        "global\n    stats socket {} level admin\n{global}resolvers dns\n    nameserver ns1 {ns}\n    timeout resolve 50ms\n    timeout retry 200ms\n    hold valid 100ms\n    hold nx 300ms\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n{backend}    {server}\n",
        sock.display()
    )
}

fn status(sock: &Path) -> String {
    stat_field(&Sluice::cli(sock, "show stat"), "be", "web", "status")
}

fn counter(sock: &Path, name: &str) -> u64 {
    let out = Sluice::cli(sock, "show resolvers dns");
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_server_follows_its_name_as_the_records_change() {
    let dir = TempDir::new();
    let dns = Dns::start(&dir, "127.0.0.1 web.test\n127.0.0.2 other.test\n");
    let (la, lb) = two_hosts_one_port();
    let port = la.local_addr().unwrap().port();
    let (a, b) = (Origin::on("a", la), Origin::on("b", lb));
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&config(
        &sock,
        dns.addr,
        &format!("server web web.test:{port} resolvers dns init-addr none"),
    ));
    // `init-addr none`: out of service until the name resolves, then served by `a`.
    wait_until("the name resolves", || get(p.addr(), "/").status == 200);
    assert_eq!(get(p.addr(), "/x").text(), "a /x");
    let state = Sluice::cli(&sock, "show servers state be");
    assert!(state.contains(" web.test "), "{state}");
    // The record moves: the server follows it, no request failing meanwhile.
    dns.set("127.0.0.2 web.test\n");
    wait_until("the server follows its name", || {
        let r = get(p.addr(), "/y");
        assert_eq!(r.status, 200, "a request failed while the name moved");
        r.text() == "b /y"
    });
    assert!(
        counter(&sock, "update") >= 2,
        "{}",
        Sluice::cli(&sock, "show resolvers")
    );
    assert!(counter(&sock, "valid") >= 2);
    assert!(a.count() > 0 && b.count() > 0);
    // The name goes away (NXDOMAIN): past `hold nx`, out of service; back when it returns.
    dns.set("127.0.0.2 other.test\n");
    wait_until("the server leaves service", || {
        status(&sock) == "MAINT (resolution)"
    });
    assert_eq!(get(p.addr(), "/").status, 503);
    assert!(counter(&sock, "nx") >= 1);
    let state = Sluice::cli(&sock, "show servers state be");
    let line = state.lines().find(|l| l.contains(" web ")).unwrap();
    let admin: u32 = line.split(' ').nth(6).unwrap().parse().unwrap();
    assert_eq!(admin & 0x20, 0x20, "RMAINT in {state}");
    dns.set("127.0.0.1 web.test\n");
    wait_until("the server comes back", || {
        get(p.addr(), "/z").status == 200
    });
    assert_eq!(get(p.addr(), "/z").text(), "a /z");
    assert_ne!(status(&sock), "MAINT (resolution)");
}

/// `hold obsolete`: an address that stops being answered is kept that long (here longer
/// than the test) before the server moves: after several answers without it, the server
/// still has it.
#[test]
fn hold_obsolete_keeps_an_address_no_longer_answered() {
    let dir = TempDir::new();
    let dns = Dns::start(&dir, "127.0.0.1 web.test\n");
    let (la, lb) = two_hosts_one_port();
    let port = la.local_addr().unwrap().port();
    let (_a, _b) = (Origin::on("a", la), Origin::on("b", lb));
    let (_d, sock) = cli_dir();
    let text = config(
        &sock,
        dns.addr,
        &format!("server web web.test:{port} resolvers dns init-addr none"),
    )
    .replace(
        "    hold nx 300ms\n",
        "    hold nx 300ms\n    hold obsolete 1h\n",
    );
    let p = Sluice::start(&text);
    wait_until("the name resolves", || get(p.addr(), "/").text() == "a /");
    dns.set("127.0.0.2 web.test\n");
    let before = counter(&sock, "valid");
    wait_until("answers without the old address come", || {
        counter(&sock, "valid") >= before + 6
    });
    assert_eq!(get(p.addr(), "/still").text(), "a /still");
    assert_eq!(
        counter(&sock, "update"),
        1,
        "only the first address was taken"
    );
}

/// A `tcp@` nameserver is asked over TCP (dnsmasq answers there too), its answers taken
/// as over UDP.
#[test]
fn a_tcp_nameserver_is_asked_over_tcp() {
    let dir = TempDir::new();
    let dns = Dns::start(&dir, "127.0.0.1 web.test\n");
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let server = format!(
        "server web web.test:{} resolvers dns init-addr none",
        origin.addr.port()
    );
    let text = config(&sock, dns.addr, &server).replace(
        &format!("nameserver ns1 {}", dns.addr),
        &format!("nameserver ns1 tcp@{}", dns.addr),
    );
    let p = Sluice::start(&text);
    wait_until("the name resolves over TCP", || {
        get(p.addr(), "/").status == 200
    });
    assert_eq!(get(p.addr(), "/t").text(), "o /t");
    assert!(counter(&sock, "valid") >= 1);
    assert_eq!(counter(&sock, "snd_error"), 0);
}

#[test]
fn set_server_fqdn_moves_a_server_that_follows_its_name() {
    let dir = TempDir::new();
    let dns = Dns::start(&dir, "127.0.0.1 web.test\n127.0.0.2 other.test\n");
    let (la, lb) = two_hosts_one_port();
    let port = la.local_addr().unwrap().port();
    let (_a, _b) = (Origin::on("a", la), Origin::on("b", lb));
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "{}    server fixed 127.0.0.1:{port}\n",
        config(
            &sock,
            dns.addr,
            &format!("server web web.test:{port} resolvers dns init-addr none")
        )
    ));
    wait_until("the name resolves", || {
        status(&sock) != "MAINT (resolution)"
    });
    assert_eq!(
        Sluice::cli(&sock, "set server be/fixed fqdn other.test"),
        "set server <b>/<s> fqdn failed because no resolution is configured.\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "set server be/web fqdn other.test"),
        "be/web changed its FQDN from web.test to other.test by 'stats socket command'\n\n"
    );
    wait_until("the server takes the new name's address", || {
        let state = Sluice::cli(&sock, "show servers state be");
        state.contains("127.0.0.2 ") && state.contains(" other.test ")
    });
    drop(dns);
    drop(p);
}

/// `server-template`: the addresses a name resolves to are shared out among the servers,
/// one each; those left without one wait in `MAINT (resolution)` and take an address when
/// one appears; a server whose address goes away leaves service (no request fails).
#[test]
fn a_server_template_shares_out_the_addresses() {
    let dir = TempDir::new();
    let three = "127.0.0.1 pool.test\n127.0.0.2 pool.test\n127.0.0.3 pool.test\n";
    let dns = Dns::start(&dir, "127.0.0.1 pool.test\n127.0.0.2 pool.test\n");
    let listeners = hosts_on_one_port(3);
    let port = listeners[0].local_addr().unwrap().port();
    let _origins: Vec<Origin> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| Origin::on(&format!("o{}", i + 1), l))
        .collect();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&config(
        &sock,
        dns.addr,
        &format!("server-template srv 1-3 pool.test:{port} resolvers dns init-addr none"),
    ));
    let addrs = |sock: &Path| -> Vec<(String, String)> {
        let csv = Sluice::cli(sock, "show stat");
        (1..=3)
            .map(|i| {
                let sv = format!("srv{i}");
                (
                    stat_field(&csv, "be", &sv, "addr"),
                    stat_field(&csv, "be", &sv, "status"),
                )
            })
            .collect()
    };
    let in_service = |a: &[(String, String)]| -> Vec<String> {
        let mut up: Vec<String> = a
            .iter()
            .filter(|(_, st)| st != "MAINT (resolution)")
            .map(|(ad, _)| ad.clone())
            .collect();
        up.sort();
        up
    };
    wait_until("two servers take the two addresses", || {
        in_service(&addrs(&sock)) == [format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")]
    });
    assert_eq!(
        addrs(&sock)
            .iter()
            .filter(|(_, st)| st == "MAINT (resolution)")
            .count(),
        1
    );
    dns.set(three);
    wait_until("the third server takes the new address", || {
        in_service(&addrs(&sock)).len() == 3
    });
    let mut seen: Vec<String> = (0..30)
        .map(|i| get(p.addr(), &format!("/{i}")).text())
        .collect();
    seen.sort();
    seen.dedup_by(|a, b| a.split(' ').next() == b.split(' ').next());
    assert_eq!(seen.len(), 3, "each address is served: {seen:?}");
    dns.set("127.0.0.1 pool.test\n127.0.0.3 pool.test\n");
    wait_until("the server whose address went away leaves service", || {
        let r = get(p.addr(), "/");
        assert_eq!(r.status, 200, "a request failed while an address went away");
        in_service(&addrs(&sock)) == [format!("127.0.0.1:{port}"), format!("127.0.0.3:{port}")]
    });
    let log = Sluice::cli(&sock, "show resolvers");
    assert!(log.contains("Resolvers section dns"), "{log}");
}

/// A template of 50 over a name with 50 addresses (an answer larger than a 512-byte
/// datagram: `accepted_payload_size` announces more), then 45: each server has an address
/// of its own, and the five left without one wait out of service. (Nothing listens at
/// these addresses: without checks the servers are in service all the same.)
#[test]
fn a_template_of_fifty_takes_fifty_addresses() {
    let dir = TempDir::new();
    let hosts = |n: u8| -> String { (1..=n).map(|i| format!("127.0.1.{i} big.test\n")).collect() };
    let dns = Dns::start(&dir, &hosts(50));
    let (_d, sock) = cli_dir();
    let text = config(
        &sock,
        dns.addr,
        "server-template s 1-50 big.test:80 resolvers dns init-addr none",
    )
    .replace(
        "    hold nx 300ms\n",
        "    hold nx 300ms\n    accepted_payload_size 8192\n",
    );
    let _p = Sluice::start(&text);
    let assigned = |sock: &Path| -> (usize, usize) {
        let csv = Sluice::cli(sock, "show stat");
        let mut up = Vec::new();
        for i in 1..=50 {
            let sv = format!("s{i}");
            if stat_field(&csv, "be", &sv, "status") != "MAINT (resolution)" {
                up.push(stat_field(&csv, "be", &sv, "addr"));
            }
        }
        let n = up.len();
        up.sort();
        up.dedup();
        (n, up.len())
    };
    wait_until("fifty servers take fifty addresses", || {
        assigned(&sock) == (50, 50)
    });
    assert_eq!(counter(&sock, "truncated"), 0);
    dns.set(&hosts(45));
    wait_until("five servers leave service", || assigned(&sock) == (45, 45));
}

/// SRV records: a template's servers take one record each, its target's address, its
/// port and its weight (HAProxy's mapping, 512 -> 2); a server without a record waits in
/// `MAINT (resolution)`, and a record that goes away takes its server out of service.
#[test]
fn srv_records_give_servers_their_address_port_and_weight() {
    let dir = TempDir::new();
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let srv = |target: &str, port: u16, weight: u16| {
        format!("--srv-host=_http._tcp.app.test,{target},{port},0,{weight}")
    };
    let both = [
        srv("a.app.test", a.addr.port(), 512),
        srv("b.app.test", b.addr.port(), 256),
    ];
    let mut dns = Dns::start_with(&dir, "127.0.0.1 a.app.test\n127.0.0.1 b.app.test\n", &both);
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&config(
        &sock,
        dns.addr,
        "server-template app 3 _http._tcp.app.test resolvers dns",
    ));
    let rows = |sock: &Path| -> Vec<(String, String, String)> {
        let csv = Sluice::cli(sock, "show stat");
        (1..=3)
            .map(|i| {
                let sv = format!("app{i}");
                let f = |n| stat_field(&csv, "be", &sv, n);
                (f("addr"), f("weight"), f("status"))
            })
            .collect()
    };
    let in_service = |r: &[(String, String, String)]| -> Vec<(String, String)> {
        let mut up: Vec<_> = r
            .iter()
            .filter(|(_, _, st)| st != "MAINT (resolution)")
            .map(|(ad, w, _)| (ad.clone(), w.clone()))
            .collect();
        up.sort();
        up
    };
    let mut want = vec![
        (a.addr.to_string(), "2".to_string()),
        (b.addr.to_string(), "1".to_string()),
    ];
    want.sort();
    wait_until("two servers take the two records", || {
        in_service(&rows(&sock)) == want
    });
    let mut seen: Vec<String> = (0..20)
        .map(|i| get(p.addr(), &format!("/{i}")).text())
        .collect();
    seen.retain(|t| t.starts_with("b "));
    assert!(!seen.is_empty(), "the lighter record is served too");
    let state = Sluice::cli(&sock, "show servers state be");
    assert!(state.contains(" _http._tcp.app.test "), "{state}");
    assert!(state.contains(" a.app.test "), "{state}");
    // The heavier record goes away: its server leaves service, the other stays.
    dns.restart_with(&[srv("b.app.test", b.addr.port(), 256)]);
    wait_until("the server of the removed record leaves service", || {
        in_service(&rows(&sock)) == [(b.addr.to_string(), "1".to_string())]
    });
    assert_eq!(get(p.addr(), "/last").text(), "b /last");
}

/// `init-addr last`: a process started with the state file the previous one saved takes
/// the address the server's name had, with no nameserver answering any more (without
/// the file it would wait in `MAINT (resolution)`).
#[test]
fn a_restart_keeps_the_resolved_address_through_the_state_file() {
    let dir = TempDir::new();
    let dns = Dns::start(&dir, "127.0.0.2 web.test\n");
    let (la, lb) = two_hosts_one_port();
    let port = la.local_addr().unwrap().port();
    let (_a, _b) = (Origin::on("a", la), Origin::on("b", lb));
    let state = dir.0.join("servers.state");
    let global = format!("    server-state-file {}\n", state.display());
    let lines = (global.as_str(), "    load-server-state-from-file global\n");
    let server = format!("server web web.test:{port} resolvers dns init-addr last,none");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&config_with(&sock, dns.addr, &server, lines));
    wait_until("the name resolves", || get(p.addr(), "/").text() == "b /");
    std::fs::write(&state, Sluice::cli(&sock, "show servers state")).unwrap();
    drop(p);
    drop(dns);
    let silent = SocketAddr::from(([127, 0, 0, 1], free_udp_port()));
    let (_d2, sock2) = cli_dir();
    let p = Sluice::start(&config_with(&sock2, silent, &server, lines));
    wait_until("the saved address serves", || {
        get(p.addr(), "/x").text() == "b /x"
    });
    assert_ne!(status(&sock2), "MAINT (resolution)");
    // Without the file: nothing to start from, and no answer.
    let (_d3, sock3) = cli_dir();
    let p = Sluice::start(&config(&sock3, silent, &server));
    assert_eq!(status(&sock3), "MAINT (resolution)");
    assert_eq!(get(p.addr(), "/").status, 503);
}

/// A nameserver that answers every query badly, one way after another: garbage, the
/// wrong id, a truncated answer. Each is counted; the server keeps its address and stays
/// in service (the answers are not applied, and `hold timeout` has not passed).
#[test]
fn bad_answers_are_counted_and_ignored() {
    let ns = UdpSocket::bind("127.0.0.1:0").unwrap();
    let ns_addr = ns.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        for turn in 0usize.. {
            let Ok((n, from)) = ns.recv_from(&mut buf) else {
                return;
            };
            let mut reply = buf[..n].to_vec();
            match turn % 3 {
                0 => reply = b"\x12\x34 not a DNS message".to_vec(),
                1 => {
                    reply[0] ^= 0xff;
                    reply[2] |= 0x80;
                }
                _ => reply[2] |= 0x80 | 0x02,
            }
            let _ = ns.send_to(&reply, from);
        }
    });
    let origin = Origin::start("o");
    let port = origin.addr.port();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&config(
        &sock,
        ns_addr,
        &format!("server web web.test:{port} resolvers dns init-addr 127.0.0.1"),
    ));
    wait_until("each kind of bad answer is seen", || {
        counter(&sock, "invalid") >= 1
            && counter(&sock, "outdated") >= 1
            && counter(&sock, "truncated") >= 1
    });
    assert_eq!(counter(&sock, "valid"), 0);
    assert_eq!(counter(&sock, "update"), 0);
    assert_eq!(get(p.addr(), "/").text(), "o /");
    assert!(Sluice::cli(&sock, "show servers state be").contains(" 127.0.0.1 "));
}

#[test]
fn resolvers_lines_are_checked() {
    let ok = "resolvers dns\n    nameserver ns1 127.0.0.1:53\n    nameserver ns2 tcp@127.0.0.1:53\n    accepted_payload_size 8192\n    resolve_retries 2\n    timeout resolve 1s\n    timeout retry 1s\n    hold valid 10s\n    hold obsolete 0s\ndefaults\n    mode http\nfrontend fe\n    bind 127.0.0.1:8080\n    default_backend be\nbackend be\n    server s1 web.invalid:80 resolvers dns resolve-prefer ipv4 resolve-net 10.0.0.0/8 resolve-opts allow-dup-ip init-addr last,none\n";
    let (passed, out) = check_config(ok);
    assert!(passed, "{out}");
    for (text, says) in [
        (
            "backend be\n    server s1 web.invalid:80 resolvers nope init-addr none\n",
            "can't find resolvers section 'nope'",
        ),
        ("resolvers dns\n    hold forever 1s\n", "'hold' expects"),
        ("resolvers dns\n    nameserver ns1 127.0.0.1\n    accepted_payload_size 100\n", "accepted_payload_size"),
        ("resolvers dns\n", "no nameserver"),
        (
            "resolvers dns\n    nameserver ns1 127.0.0.1\nbackend be\n    server s1 web.invalid:80 resolvers dns resolve-prefer ipv5\n",
            "expects 'ipv4' or 'ipv6'",
        ),
        // Without `init-addr none`, a name that does not resolve at start is an error.
        ("backend be\n    server s1 web.invalid:80\n", "cannot resolve"),
    ] {
        let (passed, out) = check_config(text);
        assert!(!passed, "accepted: {text}");
        assert!(out.contains(says), "{text}\n{out}");
    }
}

/// A large answer (200 SRV records and their addresses, about 12 kB over TCP) is read on
/// a helper thread rather than on the first worker: its servers take their records as
/// with a small one.
#[test]
fn a_large_srv_answer_fills_a_large_template() {
    let dir = TempDir::new();
    let n = 200;
    let records: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "--srv-host=_http._tcp.many.test,t{i}.many.test,{},0,10",
                1000 + i
            )
        })
        .collect();
    let hosts: String = (0..n)
        .map(|i| format!("127.0.{}.{} t{i}.many.test\n", 2 + i / 250, 1 + i % 250))
        .collect();
    let dns = Dns::start_with(&dir, &hosts, &records);
    let (_d, sock) = cli_dir();
    let text = config(
        &sock,
        dns.addr,
        &format!("server-template s 1-{n} _http._tcp.many.test resolvers dns init-addr none"),
    )
    .replace(
        &format!("nameserver ns1 {}", dns.addr),
        &format!("nameserver ns1 tcp@{}", dns.addr),
    );
    let _p = Sluice::start(&text);
    let ports = |sock: &Path| -> Vec<String> {
        let csv = Sluice::cli(sock, "show stat");
        let mut p: Vec<String> = (1..=n)
            .map(|i| stat_field(&csv, "be", &format!("s{i}"), "addr"))
            .filter_map(|a| a.rsplit_once(':').map(|(_, port)| port.to_string()))
            .collect();
        p.sort();
        p.dedup();
        p
    };
    wait_until("two hundred servers take two hundred records", || {
        ports(&sock).len() == n
    });
    assert_eq!(counter(&sock, "truncated"), 0);
}
