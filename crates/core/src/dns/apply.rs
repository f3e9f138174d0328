//! What an answer does to its server: a new address (and, from an SRV record, port and
//! weight), out of service once a failure has lasted its hold, back when the name
//! resolves; the addresses servers following one name share out among themselves.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::config::in_network;
use super::query::{Outcome, Target};
use crate::conf::resolvers::ServerResolve;
use crate::log::Severity;
use crate::runtime::Process;

/// What a server's resolution remembers between answers.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Times {
    /// When the last valid answer came (`None`: never, the server started unresolved).
    pub last_valid: Option<Instant>,
    /// When an answer last had the server's own address (or SRV record).
    pub seen: Option<Instant>,
}

/// Applies an outcome to server `(b, s)`: a new address when its own is no longer
/// answered (once `hold obsolete` has passed since it last was), out of service once a
/// failure has lasted its hold, back in service when it resolves.
pub(super) fn apply(
    p: &Process,
    (b, s): (usize, usize),
    times: &mut Times,
    (conf, fqdn): (&ServerResolve, &str),
    outcome: Outcome,
) {
    let section = &p.config.resolvers[conf.resolvers];
    let sst = &p.state.backends[b].servers[s];
    let now = Instant::now();
    // The server's own address (record) is still answered, or was within `hold obsolete`.
    let mut kept = |present: bool| {
        if present {
            times.seen = Some(now);
        }
        let held = times
            .seen
            .is_some_and(|t| now.duration_since(t) < section.hold.obsolete);
        !present && held && !sst.unresolved()
    };
    let (hold, why) = match outcome {
        Outcome::Valid(addrs, ns) if !addrs.is_empty() => {
            times.last_valid = Some(now);
            if kept(addrs.contains(&sst.addr().ip())) {
                return;
            }
            take_answer(p, (b, s), conf, fqdn, (&addrs, ns));
            // The address it took is answered.
            times.seen = Some(now);
            return;
        }
        Outcome::Records(records, ns) => {
            times.last_valid = Some(now);
            let own = sst.fqdn().map(|t| (t, sst.addr().port()));
            let present = own
                .as_ref()
                .is_some_and(|(n, port)| records.iter().any(|t| &t.name == n && t.port == *port));
            if kept(present) {
                return;
            }
            match pick_record(p, (b, s), conf, &records) {
                Some(target) => {
                    take_record(p, (b, s), conf, (target, ns));
                    times.seen = Some(now);
                }
                None => enter_maintenance(p, (b, s), "entry removed from SRV record"),
            }
            return;
        }
        Outcome::Valid(..) | Outcome::Other => (section.hold.other, "unspecified DNS error"),
        Outcome::Nx => (section.hold.nx, "DNS NX status"),
        Outcome::Refused => (section.hold.refused, "DNS refused status"),
        Outcome::Timeout => (section.hold.timeout, "DNS timeout status"),
    };
    let held = times
        .last_valid
        .is_some_and(|t| now.duration_since(t) < hold);
    if !held {
        enter_maintenance(p, (b, s), why);
    }
}

/// An SRV record the server takes: its target's address and the record's port (the
/// target becomes the server's name), and its weight unless `ignore-weight` (HAProxy's
/// mapping of 0-65535 onto 0-256).
fn take_record(
    p: &Process,
    (b, s): (usize, usize),
    conf: &ServerResolve,
    (t, ns): (&Target, usize),
) {
    let st = &p.state.backends[b];
    let sst = &st.servers[s];
    let old = sst.addr();
    let moved = sst.fqdn().as_deref() != Some(t.name.as_str())
        || old.port() != t.port
        || !t.addrs.contains(&old.ip());
    if let (true, Some(&ip)) = (moved, t.addrs.first()) {
        sst.set_fqdn(t.name.clone());
        sst.set_addr(SocketAddr::new(ip, t.port));
        p.resolvers[conf.resolvers][ns].update.bump();
        let section = &p.config.resolvers[conf.resolvers];
        let by = format!("{}/{}", section.name, section.nameservers[ns].name);
        let msg = format!(
            "{} changed its IP from {} to {ip} by {by}.",
            server_name(p, b, s),
            old.ip()
        );
        log(p, b, Severity::Notice, &msg);
    }
    let weight = u32::from(t.weight).div_ceil(256);
    if !conf.ignore_weight && sst.weight() != weight {
        st.set_weight(s, weight);
    }
    if sst.unresolved() && st.set_unresolved(s, false) {
        let msg = format!(
            "Server {} ('{}') is UP/READY (resolves again).",
            server_name(p, b, s),
            t.name
        );
        log(p, b, Severity::Notice, &msg);
    }
}

/// The record a server takes: the one it has if still answered, else the first (by
/// priority) no other server following the name holds.
fn pick_record<'a>(
    p: &Process,
    (b, s): (usize, usize),
    conf: &ServerResolve,
    records: &'a [Target],
) -> Option<&'a Target> {
    let sst = &p.state.backends[b].servers[s];
    let same = |t: &&Target, (n, port): &(String, u16)| t.name == *n && t.port == *port;
    let current = sst
        .fqdn()
        .filter(|_| !sst.unresolved())
        .map(|t| (t, sst.addr().port()));
    let taken = taken_records(p, (b, s), conf);
    current
        .as_ref()
        .and_then(|c| records.iter().find(|t| same(t, c)))
        .or_else(|| records.iter().find(|t| !taken.iter().any(|k| same(t, k))))
}

/// The records (target, port) other servers of the backend following the same SRV name
/// hold; a server out of service for its name holds none.
fn taken_records(p: &Process, (b, s): (usize, usize), conf: &ServerResolve) -> Vec<(String, u16)> {
    let st = &p.state.backends[b];
    let be = &p.config.backends[b];
    (0..st.servers.len())
        .filter(|&o| o != s)
        .filter(|&o| {
            be.servers[o]
                .resolve
                .as_ref()
                .is_some_and(|r| r.fqdn == conf.fqdn)
        })
        .map(|o| &st.servers[o])
        .filter(|o| !o.unresolved() && !o.gone())
        .filter_map(|o| Some((o.fqdn()?, o.addr().port())))
        .collect()
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
