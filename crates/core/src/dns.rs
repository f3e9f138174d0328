//! Name resolution at run time, as HAProxy 2.6's `resolvers`: a server whose address is a
//! name and that names a `resolvers` section follows that name. Its name is asked of the
//! section's nameservers (A or AAAA, its preferred family first) every `hold valid`, and
//! the answer moves it: to another address when the one it has is no longer among those
//! answered, into maintenance (`MAINT (resolution)`) when the name fails to resolve for
//! longer than the section holds that failure (`hold nx|refused|timeout|other`), and
//! back once it resolves again.
//!
//! Invariants:
//! - The first worker runs every resolution, with its own timers and a UDP socket per
//!   query; the request path never waits on one: an answer is applied through the same
//!   calls as `set server ... addr` (idle connections to the old address are closed) and
//!   the maintenance flag, each bumping the balancing generation once.
//! - An answer is taken only from a nameserver of the section, with the query's id and
//!   question; anything else (garbage, a wrong id, a truncated or oversized answer) is
//!   counted and ignored, never applied. The wire format is `hickory-proto`'s.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use sluice_config::{ConfigError, Section};

use crate::conf::backend::{ServerOption, ServerSpec};
use crate::conf::resolvers::{Family, InitAddr, Nameserver, Resolvers, ServerResolve};
use crate::log::Severity;
use crate::runtime::{NameserverCounters, Process, Worker};

/// The server options of run-time resolution.
pub const SERVER_OPTIONS: &[ServerOption] = &[
    ServerOption {
        name: "resolvers",
        args: 1,
        parse: |o, a| {
            o.resolve.resolvers = Some(a[0].clone());
            Ok(())
        },
    },
    ServerOption {
        name: "resolve-prefer",
        args: 1,
        parse: |o, a| {
            o.resolve.prefer = Some(match a[0].as_str() {
                "ipv4" => Family::V4,
                "ipv6" => Family::V6,
                _ => return Err("expects 'ipv4' or 'ipv6'".into()),
            });
            Ok(())
        },
    },
    ServerOption {
        name: "resolve-net",
        args: 1,
        parse: |o, a| {
            o.resolve.nets = a[0].split(',').map(network).collect::<Result<_, _>>()?;
            Ok(())
        },
    },
    ServerOption {
        name: "resolve-opts",
        args: 1,
        parse: |o, a| {
            for opt in a[0].split(',') {
                match opt {
                    "allow-dup-ip" => o.resolve.allow_dup_ip = true,
                    "prevent-dup-ip" => o.resolve.allow_dup_ip = false,
                    "ignore-weight" => o.resolve.ignore_weight = true,
                    _ => {
                        return Err(format!(
                            "unknown option '{opt}' (expects allow-dup-ip, ignore-weight or prevent-dup-ip)"
                        ))
                    }
                }
            }
            Ok(())
        },
    },
    ServerOption {
        name: "init-addr",
        args: 1,
        parse: |o, a| {
            let methods = a[0]
                .split(',')
                .map(|m| match m {
                    "last" => Ok(InitAddr::Last),
                    "libc" => Ok(InitAddr::Libc),
                    "none" => Ok(InitAddr::None),
                    ip => ip.parse().map(InitAddr::Ip).map_err(|_| {
                        format!("unknown method '{m}' (expects last, libc, none or an IP address)")
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            o.resolve.init_addr = Some(methods);
            Ok(())
        },
    },
];

/// `NET/BITS` (or an address alone: all its bits).
fn network(s: &str) -> Result<(IpAddr, u8), String> {
    let bad = || format!("'{s}' is not a network (ADDR/BITS)");
    let (ip, bits) = match s.split_once('/') {
        Some((ip, bits)) => (ip, Some(bits)),
        None => (s, None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        Some(b) => b.parse::<u8>().ok().filter(|&b| b <= max).ok_or_else(bad)?,
        None => max,
    };
    Ok((ip, bits))
}

fn in_network(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    let (a, b, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let shift = width - u32::from(bits);
    shift >= width || (a >> shift) == (b >> shift)
}

/// A `resolvers NAME` section: `nameserver`, `parse-resolv-conf`, `accepted_payload_size`,
/// `resolve_retries`, `timeout resolve|retry`, `hold STATUS PERIOD`.
pub fn parse_section(section: &Section, errors: &mut Vec<ConfigError>) -> Option<Resolvers> {
    let Some(name) = section.name.clone() else {
        errors.push(
            section
                .header
                .error("'resolvers' expects a <name> argument"),
        );
        return None;
    };
    let mut r = Resolvers::new(name);
    for line in &section.lines {
        let w: Vec<&str> = line.words.iter().map(String::as_str).collect();
        if let Err(e) = section_line(&mut r, &w) {
            errors.push(line.error(e));
        }
    }
    if r.nameservers.is_empty() {
        errors.push(section.header.error(format!(
            "resolvers '{}': no nameserver (a 'nameserver' line or 'parse-resolv-conf')",
            r.name
        )));
    }
    Some(r)
}

fn section_line(r: &mut Resolvers, w: &[&str]) -> Result<(), String> {
    let time = |t: &str| sluice_config::units::parse_time(t).map_err(|e| e.to_string());
    match w {
        ["nameserver", id, addr] => {
            if r.nameservers.iter().any(|n| n.name == *id) {
                return Err(format!("nameserver '{id}' is defined twice"));
            }
            let addr = nameserver_addr(addr).map_err(|e| format!("nameserver '{id}': {e}"))?;
            r.nameservers.push(Nameserver {
                name: (*id).to_string(),
                addr,
            });
        }
        ["nameserver", ..] => return Err("'nameserver' expects <id> and <addr>[:<port>]".into()),
        ["parse-resolv-conf"] => {
            for (i, addr) in resolv_conf().into_iter().enumerate() {
                r.nameservers.push(Nameserver {
                    name: format!("resolv.conf-{}", i + 1),
                    addr,
                });
            }
        }
        ["accepted_payload_size", n] => {
            r.payload = n
                .parse::<u16>()
                .ok()
                .filter(|&n| n >= 512)
                .ok_or("'accepted_payload_size' expects a size from 512 to 65535")?;
        }
        ["resolve_retries", n] => {
            r.retries = n
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or("'resolve_retries' expects a positive number")?;
        }
        ["timeout", "resolve", t] => r.timeout_resolve = time(t)?,
        ["timeout", "retry", t] => r.timeout_retry = time(t)?,
        ["timeout", ..] => return Err("'timeout' expects 'resolve' or 'retry' and a time".into()),
        ["hold", status, t] => {
            let d = time(t)?;
            let h = &mut r.hold;
            *match *status {
                "valid" => &mut h.valid,
                "nx" => &mut h.nx,
                "other" => &mut h.other,
                "refused" => &mut h.refused,
                "timeout" => &mut h.timeout,
                "obsolete" => &mut h.obsolete,
                _ => {
                    return Err(format!(
                        "'hold' expects nx, other, refused, timeout, valid or obsolete, not '{status}'"
                    ))
                }
            } = d;
        }
        ["resolution_pool_size", _] => {}
        [kw, ..] => {
            return Err(format!(
                "unknown keyword '{kw}' in 'resolvers' section (expects nameserver, parse-resolv-conf, accepted_payload_size, resolve_retries, timeout or hold)"
            ))
        }
        [] => {}
    }
    Ok(())
}

/// `[udp@]ADDR[:PORT]` (port 53 by default). TCP nameservers are not built.
fn nameserver_addr(a: &str) -> Result<SocketAddr, String> {
    if a.starts_with("tcp@") {
        return Err("TCP nameservers ('tcp@') are not supported yet".into());
    }
    let a = a.strip_prefix("udp@").unwrap_or(a);
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok(sa);
    }
    let bare = a.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, 53)),
        Err(_) => crate::conf::resolve(a),
    }
}

/// The nameservers `/etc/resolv.conf` names.
fn resolv_conf() -> Vec<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The section HAProxy makes when a server names `default` and no section has that name:
/// the system's nameservers.
pub fn default_section() -> Option<Resolvers> {
    let mut r = Resolvers::new("default".into());
    for (i, addr) in resolv_conf().into_iter().enumerate() {
        r.nameservers.push(Nameserver {
            name: format!("resolv.conf-{}", i + 1),
            addr,
        });
    }
    (!r.nameservers.is_empty()).then_some(r)
}

/// How server `spec` follows its name, given the `resolvers` sections (`None` when it
/// names none, or its address is not a name).
pub fn lower_server(
    spec: &ServerSpec,
    sections: &[Resolvers],
) -> Result<Option<ServerResolve>, String> {
    let o = &spec.opts.resolve;
    let Some(wanted) = &o.resolvers else {
        return Ok(None);
    };
    let Some(index) = sections.iter().position(|r| &r.name == wanted) else {
        return Err(format!("can't find resolvers section '{wanted}'"));
    };
    let Some(fqdn) = &spec.fqdn else {
        // An IP address has nothing to resolve (HAProxy accepts the line as well).
        return Ok(None);
    };
    Ok(Some(ServerResolve {
        resolvers: index,
        fqdn: fqdn.clone(),
        prefer: o.prefer.unwrap_or_default(),
        nets: o.nets.clone(),
        allow_dup_ip: o.allow_dup_ip,
    }))
}

/// What a resolution came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The addresses answered (none: the name exists but has no address of either
    /// family), and the nameserver that answered.
    Valid(Vec<IpAddr>, usize),
    Nx,
    Refused,
    Timeout,
    Other,
}

/// A server's resolution, as the first worker keeps it.
struct Resolution {
    backend: usize,
    server: usize,
    /// When the last valid answer came (`None`: never, the server started unresolved).
    last_valid: Option<Instant>,
    next: Instant,
    running: bool,
}

/// Runs every server's resolution on this worker (the first), until the process stops.
pub async fn run(w: Rc<Worker>) {
    let p = w.process.clone();
    let now = Instant::now();
    let mut list = Vec::new();
    for (b, be) in p.config.backends.iter().enumerate() {
        for (s, srv) in be.servers.iter().enumerate() {
            if srv.resolve.is_some() {
                list.push(Resolution {
                    backend: b,
                    server: s,
                    last_valid: (!srv.unresolved).then_some(now),
                    next: now,
                    running: false,
                });
            }
        }
    }
    if list.is_empty() {
        return;
    }
    let tick = p
        .config
        .resolvers
        .iter()
        .map(|r| r.timeout_resolve)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .max(Duration::from_millis(10));
    let list = Rc::new(RefCell::new(list));
    loop {
        for (b, s) in p.renamed.take() {
            for r in list.borrow_mut().iter_mut() {
                if (r.backend, r.server) == (b, s) {
                    r.next = Instant::now();
                }
            }
        }
        start_due(&w, &list);
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            () = p.renamed.wake.notified() => {}
        }
        if w.stopping() {
            return;
        }
    }
}

/// Starts the resolutions that are due and not running.
fn start_due(w: &Rc<Worker>, list: &Rc<RefCell<Vec<Resolution>>>) {
    let now = Instant::now();
    for (i, r) in list.borrow_mut().iter_mut().enumerate() {
        if r.running || r.next > now {
            continue;
        }
        r.running = true;
        let (w, list) = (w.clone(), list.clone());
        let (b, s) = (r.backend, r.server);
        tokio::task::spawn_local(async move {
            let p = &w.process;
            let Some(conf) = p.config.backends[b].servers[s].resolve.clone() else {
                return;
            };
            let fqdn = p.state.backends[b].servers[s]
                .fqdn()
                .unwrap_or_else(|| conf.fqdn.clone());
            let section = &p.config.resolvers[conf.resolvers];
            let outcome = resolve(p, conf.resolvers, &fqdn, conf.prefer).await;
            let mut l = list.borrow_mut();
            let r = &mut l[i];
            r.running = false;
            r.next = Instant::now()
                + match outcome {
                    Outcome::Valid(..) => section.hold.valid.max(section.timeout_resolve),
                    _ => section.timeout_resolve,
                };
            apply(p, r, &conf, &fqdn, outcome);
        });
    }
}

/// Asks the name of the section's nameservers, the preferred family first, then the
/// other when the name has no address of the first.
async fn resolve(p: &Process, section: usize, fqdn: &str, prefer: Family) -> Outcome {
    let types = match prefer {
        Family::V6 => [RecordType::AAAA, RecordType::A],
        Family::V4 => [RecordType::A, RecordType::AAAA],
    };
    let mut last = Outcome::Other;
    for t in types {
        last = query(p, section, fqdn, t).await;
        match &last {
            Outcome::Valid(addrs, _) if addrs.is_empty() => {}
            _ => return last,
        }
    }
    last
}

/// One query, sent to every nameserver of the section and again after `timeout retry`,
/// `resolve_retries` times in all; the first acceptable answer decides.
async fn query(p: &Process, section: usize, fqdn: &str, t: RecordType) -> Outcome {
    let conf = &p.config.resolvers[section];
    let counters = &p.resolvers[section];
    let Ok(name) = Name::from_ascii(fqdn) else {
        return Outcome::Other;
    };
    let v6 = conf.nameservers.iter().any(|n| n.addr.is_ipv6());
    let bind: SocketAddr = if v6 { "[::]:0" } else { "0.0.0.0:0" }
        .parse()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let Ok(sock) = tokio::net::UdpSocket::bind(bind).await else {
        for c in counters.iter() {
            c.snd_error.bump();
        }
        return Outcome::Timeout;
    };
    let mut buf = vec![0u8; 65536];
    for _ in 0..conf.retries {
        let id = fastrand::u16(..);
        let Some(bytes) = question(id, &name, t, conf.payload) else {
            return Outcome::Other;
        };
        for (i, ns) in conf.nameservers.iter().enumerate() {
            let to = if v6 { mapped(ns.addr) } else { ns.addr };
            match sock.send_to(&bytes, to).await {
                Ok(_) => counters[i].sent.bump(),
                Err(_) => counters[i].snd_error.bump(),
            }
        }
        let deadline = tokio::time::Instant::now() + conf.timeout_retry;
        loop {
            let got = tokio::time::timeout_at(deadline, sock.recv_from(&mut buf)).await;
            let Ok(Ok((n, from))) = got else { break };
            let from = SocketAddr::new(from.ip().to_canonical(), from.port());
            let Some(i) = conf.nameservers.iter().position(|ns| ns.addr == from) else {
                continue;
            };
            if let Some(outcome) = judge(&buf[..n], (id, &name, t), conf.payload, &counters[i]) {
                return match outcome {
                    Outcome::Valid(addrs, _) => Outcome::Valid(addrs, i),
                    other => other,
                };
            }
        }
    }
    for c in counters.iter() {
        c.timeout.bump();
    }
    Outcome::Timeout
}

/// An IPv4 nameserver's address as a dual-stack socket reaches it.
fn mapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

/// The query's bytes (recursion desired; EDNS0 announcing `payload` when above 512).
fn question(id: u16, name: &Name, t: RecordType, payload: u16) -> Option<Vec<u8>> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(name.clone(), t));
    if payload > 512 {
        let mut e = Edns::new();
        e.set_max_payload(payload);
        m.edns = Some(e);
    }
    m.to_vec().ok()
}

/// What an answer says, counted on its nameserver; `None` when it is not an answer to
/// the query (ignored: the wait goes on for a proper one).
fn judge(
    bytes: &[u8],
    (id, name, t): (u16, &Name, RecordType),
    payload: u16,
    c: &NameserverCounters,
) -> Option<Outcome> {
    if bytes.len() > usize::from(payload) {
        c.too_big.bump();
        return None;
    }
    let Ok(m) = Message::from_vec(bytes) else {
        c.invalid.bump();
        return None;
    };
    let asked = m
        .queries
        .first()
        .is_some_and(|q| q.query_type() == t && q.name().eq_ignore_root_case(name));
    if m.metadata.id != id || m.metadata.message_type != MessageType::Response || !asked {
        c.outdated.bump();
        return None;
    }
    if m.metadata.truncation {
        c.truncated.bump();
        return None;
    }
    match m.metadata.response_code {
        ResponseCode::NoError => {}
        ResponseCode::NXDomain => {
            c.nx.bump();
            return Some(Outcome::Nx);
        }
        ResponseCode::Refused => {
            c.refused.bump();
            return Some(Outcome::Refused);
        }
        _ => {
            c.other.bump();
            return Some(Outcome::Other);
        }
    }
    // The name and the names it is an alias of (CNAME), in the order answered.
    let mut names = vec![name.clone()];
    let mut addrs = Vec::new();
    for rec in &m.answers {
        if !names.iter().any(|n| n.eq_ignore_root_case(&rec.name)) {
            continue;
        }
        match &rec.data {
            RData::A(a) if t == RecordType::A => addrs.push(IpAddr::V4(a.0)),
            RData::AAAA(a) if t == RecordType::AAAA => addrs.push(IpAddr::V6(a.0)),
            RData::CNAME(target) => {
                c.cname.bump();
                names.push(target.0.clone());
            }
            _ => {}
        }
    }
    c.valid.bump();
    Some(Outcome::Valid(addrs, 0))
}

/// Applies an outcome to its server: a new address when its own is no longer answered,
/// out of service once a failure has lasted its hold, back in service when it resolves.
fn apply(p: &Process, r: &mut Resolution, conf: &ServerResolve, fqdn: &str, outcome: Outcome) {
    let section = &p.config.resolvers[conf.resolvers];
    let now = Instant::now();
    let (hold, why) = match outcome {
        Outcome::Valid(addrs, ns) if !addrs.is_empty() => {
            r.last_valid = Some(now);
            return take_answer(p, (r.backend, r.server), conf, fqdn, (&addrs, ns));
        }
        Outcome::Valid(..) | Outcome::Other => (section.hold.other, "unspecified DNS error"),
        Outcome::Nx => (section.hold.nx, "DNS NX status"),
        Outcome::Refused => (section.hold.refused, "DNS refused status"),
        Outcome::Timeout => (section.hold.timeout, "DNS timeout status"),
    };
    let held = r.last_valid.is_some_and(|t| now.duration_since(t) < hold);
    if !held {
        enter_maintenance(p, (r.backend, r.server), why);
    }
}

/// A valid answer with addresses: the server keeps its address if it is among them (and,
/// unless `allow-dup-ip`, no other server following the name has it), else takes one that
/// is free; with none free it leaves service ("No IP for server").
fn take_answer(
    p: &Process,
    (b, s): (usize, usize),
    conf: &ServerResolve,
    fqdn: &str,
    (addrs, ns): (&[IpAddr], usize),
) {
    let st = &p.state.backends[b];
    let sst = &st.servers[s];
    let name = server_name(p, b, s);
    let old = sst.addr();
    let taken = taken(p, (b, s), conf, fqdn);
    let keep = addrs.contains(&old.ip()) && !sst.unresolved() && !taken.contains(&old.ip());
    if !keep {
        let Some(ip) = choose(conf, &taken, addrs) else {
            return enter_maintenance(p, (b, s), "No IP for server");
        };
        if ip != old.ip() {
            sst.set_addr(SocketAddr::new(ip, old.port()));
            p.resolvers[conf.resolvers][ns].update.bump();
            let section = &p.config.resolvers[conf.resolvers];
            let by = format!("{}/{}", section.name, section.nameservers[ns].name);
            let msg = format!("{name} changed its IP from {} to {ip} by {by}.", old.ip());
            log(p, b, Severity::Notice, &msg);
        }
    }
    if sst.unresolved() && st.set_unresolved(s, false) {
        let msg = format!("Server {name} ('{fqdn}') is UP/READY (resolves again).");
        log(p, b, Severity::Notice, &msg);
    }
}

fn server_name(p: &Process, b: usize, s: usize) -> String {
    let be = &p.config.backends[b];
    format!("{}/{}", be.name, be.servers[s].name)
}

/// Takes a server out of service because its name gives it no address, logged as HAProxy
/// logs it (nothing when it is out already).
fn enter_maintenance(p: &Process, (b, s): (usize, usize), why: &str) {
    let st = &p.state.backends[b];
    let sst = &st.servers[s];
    if sst.unresolved() || !st.set_unresolved(s, true) {
        return;
    }
    let (active, backup) = usable_counts(p, b);
    log(p, b, Severity::Alert, &format!(
        "Server {} is going DOWN for maintenance ({why}). {active} active and {backup} backup servers left. {} sessions active, 0 requeued, {} remaining in queue.",
        server_name(p, b, s),
        sst.in_flight.load(std::sync::atomic::Ordering::Relaxed),
        sst.queue.waiting.load(std::sync::atomic::Ordering::Relaxed)
    ));
}

/// The address a server takes from those answered and not `taken`: one in its
/// `resolve-net` networks first, in the order answered.
fn choose(conf: &ServerResolve, taken: &[IpAddr], addrs: &[IpAddr]) -> Option<IpAddr> {
    let preferred =
        |ip: &&IpAddr| conf.nets.is_empty() || conf.nets.iter().any(|n| in_network(**ip, *n));
    let free = |ip: &&IpAddr| !taken.contains(ip);
    addrs
        .iter()
        .find(|ip| preferred(ip) && free(ip))
        .or_else(|| addrs.iter().find(free))
        .copied()
}

/// The addresses other servers of the backend following the same name hold (none with
/// `allow-dup-ip`); a server out of service for its name holds none.
fn taken(p: &Process, (b, s): (usize, usize), conf: &ServerResolve, fqdn: &str) -> Vec<IpAddr> {
    if conf.allow_dup_ip {
        return Vec::new();
    }
    let st = &p.state.backends[b];
    (0..st.servers.len())
        .filter(|&o| o != s && p.config.backends[b].servers[o].resolve.is_some())
        .map(|o| &st.servers[o])
        .filter(|o| !o.unresolved() && !o.gone() && o.fqdn().as_deref() == Some(fqdn))
        .map(|o| o.addr().ip())
        .collect()
}

fn usable_counts(p: &Process, b: usize) -> (usize, usize) {
    let be = &p.config.backends[b];
    let st = &p.state.backends[b];
    let mut counts = (0, 0);
    for (c, s) in be.servers.iter().zip(st.servers.iter()) {
        if s.usable() {
            if c.backup {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
    }
    counts
}

fn log(p: &Process, backend: usize, severity: Severity, msg: &str) {
    for l in &p.backend_loggers[backend] {
        l.send_at(severity, msg);
    }
}

/// `show resolvers [NAME]`, in HAProxy's layout.
pub fn show(p: &Process, name: Option<&str>) -> Result<String, String> {
    let sections = &p.config.resolvers;
    if let Some(n) = name {
        if !sections.iter().any(|r| r.name == n) {
            return Err("Can't find that resolvers section\n".into());
        }
    }
    if sections.is_empty() {
        return Ok("No resolvers found\n".into());
    }
    let mut out = String::new();
    for (i, r) in sections.iter().enumerate() {
        if name.is_some_and(|n| n != r.name) {
            continue;
        }
        out.push_str(&format!("Resolvers section {}\n", r.name));
        for (ns, c) in r.nameservers.iter().zip(p.resolvers[i].iter()) {
            out.push_str(&format!(" nameserver {}:\n", ns.name));
            let rows: [(&str, u64); 15] = [
                ("sent:       ", c.sent.get()),
                ("snd_error:  ", c.snd_error.get()),
                ("valid:      ", c.valid.get()),
                ("update:     ", c.update.get()),
                ("cname:      ", c.cname.get()),
                ("cname_error:", c.cname_error.get()),
                ("any_err:    ", c.any_err.get()),
                ("nx:         ", c.nx.get()),
                ("timeout:    ", c.timeout.get()),
                ("refused:    ", c.refused.get()),
                ("other:      ", c.other.get()),
                ("invalid:    ", c.invalid.get()),
                ("too_big:    ", c.too_big.get()),
                ("truncated:  ", c.truncated.get()),
                ("outdated:   ", c.outdated.get()),
            ];
            for (label, v) in rows {
                out.push_str(&format!("  {label} {v}\n"));
            }
        }
        out.push('\n');
    }
    Ok(out)
}

/// The resolutions by server, for `set server ... fqdn`: whether the server follows its
/// name (only such a server's name can change, as HAProxy's).
pub fn resolves(p: &Process, backend: usize, server: usize) -> bool {
    p.config.backends[backend].servers[server].resolve.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_match_their_addresses() {
        let net = network("10.1.0.0/16").unwrap();
        assert!(in_network("10.1.200.3".parse().unwrap(), net));
        assert!(!in_network("10.2.0.1".parse().unwrap(), net));
        assert!(!in_network("::1".parse().unwrap(), net));
        assert!(in_network(
            "1.2.3.4".parse().unwrap(),
            network("0.0.0.0/0").unwrap()
        ));
        assert!(network("10.0.0.0/33").is_err());
    }

    #[test]
    fn answers_are_judged_against_their_question() {
        let name = Name::from_ascii("web.test").unwrap();
        let c = NameserverCounters::default();
        let mut answer = Message::new(7, MessageType::Response, OpCode::Query);
        answer.add_query(Query::query(name.clone(), RecordType::A));
        answer.answers.push(hickory_proto::rr::Record::from_rdata(
            name.clone(),
            60,
            RData::A(hickory_proto::rr::rdata::A("10.0.0.5".parse().unwrap())),
        ));
        let bytes = answer.to_vec().unwrap();
        assert_eq!(
            judge(&bytes, (7, &name, RecordType::A), 512, &c),
            Some(Outcome::Valid(vec!["10.0.0.5".parse().unwrap()], 0))
        );
        assert_eq!(judge(&bytes, (8, &name, RecordType::A), 512, &c), None);
        assert_eq!(judge(b"garbage", (7, &name, RecordType::A), 512, &c), None);
        assert_eq!(
            (c.valid.get(), c.outdated.get(), c.invalid.get()),
            (1, 1, 1)
        );
    }
}
