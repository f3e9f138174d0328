//! What an answer does to its server: a new address (and, from an SRV record, port and
//! weight), out of service once a failure has lasted its hold, back when the name
//! resolves; the addresses servers following one name share out among themselves.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use super::config::in_network;
use super::query::{Outcome, Records, Target};
use crate::conf::resolvers::ServerResolve;
use crate::log::Severity;
use crate::runtime::Process;

/// What one thing a server holds from its name: an address, or an SRV record (target,
/// port).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Claim {
    Addr(IpAddr),
    Record(String, u16),
}

/// What the servers of one backend following one name hold, gathered once per answer and
/// kept as each server takes or leaves something: sharing an answer out among N servers
/// costs N lookups, not N scans of N servers.
#[derive(Debug, Default)]
pub(super) struct Claims {
    held: HashMap<Claim, u32>,
    /// Where the search for a free SRV record goes on from: in one pass a record is only
    /// given up when the answer no longer has it, so those before are all held.
    cursor: usize,
}

impl Claims {
    /// What the servers of backend `b` following `conf`'s name (`fqdn` for an address,
    /// the SRV name for records) hold now.
    pub fn gather(p: &Process, b: usize, (conf, fqdn): (&ServerResolve, &str)) -> Claims {
        let be = &p.config.backends[b];
        let mut c = Claims::default();
        for s in 0..p.state.backends[b].servers.len() {
            let Some(r) = &be.servers[s].resolve else {
                continue;
            };
            let same = match conf.srv {
                true => r.srv && r.fqdn == conf.fqdn,
                false => !r.srv && p.state.backends[b].servers[s].fqdn().as_deref() == Some(fqdn),
            };
            if let Some(claim) = same.then(|| claim_of(p, (b, s), conf.srv)).flatten() {
                *c.held.entry(claim).or_default() += 1;
            }
        }
        c
    }

    /// Whether a server other than one holding `own` holds `c`.
    fn others(&self, c: &Claim, own: Option<&Claim>) -> bool {
        let n = self.held.get(c).copied().unwrap_or(0);
        n > u32::from(own == Some(c))
    }

    fn moved(&mut self, from: Option<Claim>, to: Option<Claim>) {
        if let Some(f) = from {
            if let Some(n) = self.held.get_mut(&f) {
                *n = n.saturating_sub(1);
            }
        }
        if let Some(t) = to {
            *self.held.entry(t).or_default() += 1;
        }
    }
}

/// What server `(b, s)` holds from its name now (nothing while out of service for it).
fn claim_of(p: &Process, (b, s): (usize, usize), srv: bool) -> Option<Claim> {
    let sst = &p.state.backends[b].servers[s];
    if sst.unresolved() || sst.gone() {
        return None;
    }
    Some(match srv {
        true => Claim::Record(sst.fqdn()?, sst.addr().port()),
        false => Claim::Addr(sst.addr().ip()),
    })
}

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
    (times, claims): (&mut Times, &mut Claims),
    (conf, fqdn): (&ServerResolve, &str),
    outcome: &Outcome,
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
            take_answer(p, (b, s), (conf, fqdn), (addrs, *ns), claims);
            // The address it took is answered.
            times.seen = Some(now);
            return;
        }
        Outcome::Records(records, ns) => {
            times.last_valid = Some(now);
            let own = sst.fqdn().map(|t| (t, sst.addr().port()));
            let present = own.as_ref().is_some_and(|(n, port)| records.has(n, *port));
            if kept(present) {
                return;
            }
            let before = claim_of(p, (b, s), true);
            match pick_record(before.as_ref(), records, claims) {
                Some(target) => {
                    take_record(p, (b, s), conf, (target, *ns));
                    times.seen = Some(now);
                }
                None => enter_maintenance(p, (b, s), "entry removed from SRV record"),
            }
            claims.moved(before, claim_of(p, (b, s), true));
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
    if sst.fqdn().as_deref() != Some(t.name.as_str()) {
        sst.set_fqdn(t.name.clone());
    }
    // Another target at the same address and port changes nothing to connect to: its
    // connections stay.
    let moved = old.port() != t.port || !t.addrs.contains(&old.ip());
    if let (true, Some(&ip)) = (moved, t.addrs.first()) {
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

/// The record a server holding `own` takes: the one it has if still answered, else the
/// first (by priority) no other server holds.
fn pick_record<'a>(
    own: Option<&Claim>,
    records: &'a Records,
    claims: &mut Claims,
) -> Option<&'a Target> {
    if let Some(Claim::Record(name, port)) = own {
        if let Some(t) = records.get(name, *port) {
            return Some(t);
        }
    }
    let from = claims.cursor.min(records.list.len());
    let i = records.list[from..]
        .iter()
        .position(|t| !claims.others(&Claim::Record(t.name.clone(), t.port), own))?;
    claims.cursor = from + i + 1;
    records.list.get(from + i)
}

/// A valid answer with addresses: the server keeps its address if it is among them (and,
/// unless `allow-dup-ip`, no other server following the name has it), else takes one that
/// is free; with none free it leaves service ("No IP for server").
fn take_answer(
    p: &Process,
    (b, s): (usize, usize),
    (conf, fqdn): (&ServerResolve, &str),
    (addrs, ns): (&[IpAddr], usize),
    claims: &mut Claims,
) {
    let st = &p.state.backends[b];
    let sst = &st.servers[s];
    let name = server_name(p, b, s);
    let old = sst.addr();
    let own = claim_of(p, (b, s), false);
    let taken = |ip: &IpAddr| !conf.allow_dup_ip && claims.others(&Claim::Addr(*ip), own.as_ref());
    let keep = addrs.contains(&old.ip()) && !sst.unresolved() && !taken(&old.ip());
    if !keep {
        let Some(ip) = choose(conf, taken, addrs) else {
            enter_maintenance(p, (b, s), "No IP for server");
            return claims.moved(own, None);
        };
        claims.moved(own, Some(Claim::Addr(ip)));
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
    let (active, backup) = st.usable_counts(&p.config.backends[b]);
    log(p, b, Severity::Alert, &format!(
        "Server {} is going DOWN for maintenance ({why}). {active} active and {backup} backup servers left. {} sessions active, 0 requeued, {} remaining in queue.",
        server_name(p, b, s),
        sst.in_flight.load(std::sync::atomic::Ordering::Relaxed),
        sst.queue.waiting.load(std::sync::atomic::Ordering::Relaxed)
    ));
}

/// The address a server takes from those answered and not `taken`: one in its
/// `resolve-net` networks first, in the order answered.
fn choose(
    conf: &ServerResolve,
    taken: impl Fn(&IpAddr) -> bool,
    addrs: &[IpAddr],
) -> Option<IpAddr> {
    let preferred =
        |ip: &&IpAddr| conf.nets.is_empty() || conf.nets.iter().any(|n| in_network(**ip, *n));
    let free = |ip: &&IpAddr| !taken(ip);
    addrs
        .iter()
        .find(|ip| preferred(ip) && free(ip))
        .or_else(|| addrs.iter().find(free))
        .copied()
}

fn log(p: &Process, backend: usize, severity: Severity, msg: &str) {
    for l in &p.backend_loggers[backend] {
        l.send_at(severity, msg);
    }
}
