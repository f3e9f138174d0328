//! Name resolution at run time, as HAProxy 2.6's `resolvers`: a server whose address is a
//! name and that names a `resolvers` section follows that name. Its name is asked of the
//! section's nameservers (A or AAAA, its preferred family first; SRV for a name starting
//! with `_`, whose records give address, port and weight) every `hold valid`, and the
//! answer moves it: to another address when the one it has is no longer among those
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
//! - Servers following one name (`server-template`) share its addresses (or SRV records)
//!   out, one each unless `allow-dup-ip`: a server keeps what it has while it is answered.
//!
//! `config` reads the keywords, `query` asks and judges, `apply` moves the servers.

mod apply;
mod config;
mod query;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use self::query::Outcome;
use crate::runtime::{Process, Worker};

pub use self::config::{default_section, lower_server, parse_section, SERVER_OPTIONS};

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
            let sst = &p.state.backends[b].servers[s];
            let (fqdn, outcome) = if conf.srv {
                (conf.fqdn.clone(), query::resolve_srv(p, &conf).await)
            } else {
                let fqdn = sst.fqdn().unwrap_or_else(|| conf.fqdn.clone());
                let outcome = query::resolve(p, conf.resolvers, &fqdn, conf.prefer).await;
                (fqdn, outcome)
            };
            let section = &p.config.resolvers[conf.resolvers];
            let mut l = list.borrow_mut();
            let r = &mut l[i];
            r.running = false;
            r.next = Instant::now()
                + match outcome {
                    Outcome::Valid(..) | Outcome::Records(..) => {
                        section.hold.valid.max(section.timeout_resolve)
                    }
                    _ => section.timeout_resolve,
                };
            apply::apply(p, (b, s), &mut r.last_valid, (&conf, &fqdn), outcome);
        });
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
