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
//! - The first worker runs every resolution, with its own timers and each section's
//!   sockets (`wire`); the request path never waits on one. Servers asking the same name
//!   share one query and its answer, applied a few dozen servers at a time between the
//!   worker's requests, through the same calls as `set server ... addr` (idle connections
//!   to the old address are closed) and the maintenance flag.
//! - An answer is taken only from a nameserver of the section, with the query's id and
//!   question; anything else (garbage, a wrong id, a truncated or oversized answer) is
//!   counted and ignored, never applied. The wire format is `hickory-proto`'s.
//! - Servers following one name (`server-template`) share its addresses (or SRV records)
//!   out, one each unless `allow-dup-ip`: a server keeps what it has while it is answered.
//!
//! `config` reads the keywords, `wire` carries the queries, `query` asks and judges,
//! `apply` moves the servers.

mod apply;
mod config;
mod query;
mod wire;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::query::Outcome;
use crate::conf::resolvers::{Family, ServerResolve};
use crate::runtime::{Process, Worker};

pub use self::config::{default_section, lower_server, parse_section, SERVER_OPTIONS};

/// A server's resolution, as the first worker keeps it.
struct Resolution {
    backend: usize,
    server: usize,
    times: apply::Times,
    next: Instant,
}

/// What is asked: the section, the name, SRV or not, the family asked first. Servers
/// asking the same share one query (`server-template`'s, or servers named alike).
type Key = (usize, String, bool, Family);

/// The last answer to a key (`None` while its query is out), and when it came.
struct Asked {
    at: Instant,
    outcome: Option<Outcome>,
}

/// The first worker's resolutions, the answers they share, and each section's socket
/// (`None` if it could not be opened: its queries then fail as unsent).
#[derive(Default)]
struct Book {
    list: Vec<Resolution>,
    /// The backends of `list`'s servers, each once.
    backends: Vec<usize>,
    asked: HashMap<Key, Asked>,
    wires: Vec<Option<Rc<wire::Wire>>>,
}

/// Runs every server's resolution on this worker (the first), until the process stops.
pub async fn run(w: Rc<Worker>) {
    let p = w.process.clone();
    let Some(book) = Book::of(&p) else {
        return;
    };
    let tick = p
        .config
        .resolvers
        .iter()
        .map(|r| r.timeout_resolve)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .max(Duration::from_millis(10));
    let book = Rc::new(RefCell::new(book));
    loop {
        for (b, s) in p.renamed.take() {
            for r in book.borrow_mut().list.iter_mut() {
                if (r.backend, r.server) == (b, s) {
                    r.next = Instant::now();
                }
            }
        }
        serve_due(&w, &book).await;
        let wait = book.borrow().until_due(tick);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = p.renamed.wake.notified() => {}
        }
        if w.stopping() {
            return;
        }
    }
}

impl Book {
    /// The resolutions of the servers that follow their names, each due now, and the
    /// sections' sockets (`None`: no server follows its name).
    fn of(p: &Arc<Process>) -> Option<Book> {
        let now = Instant::now();
        let mut book = Book::default();
        for (b, be) in p.config.backends.iter().enumerate() {
            for (s, srv) in be.servers.iter().enumerate() {
                if srv.resolve.is_none() {
                    continue;
                }
                // (The state file may have given an unresolved server its last address.)
                let known = (!p.state.backends[b].servers[s].unresolved()).then_some(now);
                book.list.push(Resolution {
                    backend: b,
                    server: s,
                    times: apply::Times {
                        last_valid: known,
                        seen: known,
                    },
                    next: now,
                });
            }
        }
        if book.list.is_empty() {
            return None;
        }
        book.backends = book.list.iter().map(|r| r.backend).collect();
        book.backends.dedup();
        book.wires = (0..p.config.resolvers.len())
            .map(|i| wire::Wire::open(p, i).ok())
            .collect();
        Some(book)
    }

    /// How long until the next resolution is due, at most `tick` (a query in flight keeps
    /// its servers due: they are served when it answers).
    fn until_due(&self, tick: Duration) -> Duration {
        let now = Instant::now();
        self.list
            .iter()
            .map(|r| r.next)
            .filter(|&t| t > now)
            .min()
            .map_or(tick, |t| (t - now).min(tick))
    }
}

/// What server `(b, s)` asks now: its key, and the name it follows.
fn key_of(p: &Process, (b, s): (usize, usize)) -> Option<(Key, ServerResolve, String)> {
    let conf = p.config.backends[b].servers[s].resolve.clone()?;
    let name = match conf.srv {
        true => conf.fqdn.clone(),
        false => p.state.backends[b].servers[s]
            .fqdn()
            .unwrap_or_else(|| conf.fqdn.clone()),
    };
    let key = (conf.resolvers, name.clone(), conf.srv, conf.prefer);
    Some((key, conf, name))
}

/// Servers an answer is applied to before the worker's requests get a turn: a template of
/// a thousand servers takes its answer in slices rather than holding the worker up.
const APPLIED_PER_TURN: usize = 64;

/// Serves the resolutions that are due: from the answer their key was given last, while it
/// is fresh (`hold valid`, or `timeout resolve` for a failure); else the first of them
/// asks, the others waiting for its answer. Whether it stopped with some left (after
/// [`APPLIED_PER_TURN`]): the caller yields and calls again.
fn start_due(w: &Rc<Worker>, book: &Rc<RefCell<Book>>) -> bool {
    let p = &w.process;
    let now = Instant::now();
    let mut guard = book.borrow_mut();
    let Book {
        list, asked, wires, ..
    } = &mut *guard;
    // What the servers sharing each name hold, gathered as first needed in this pass.
    let mut claims: HashMap<(usize, Key), apply::Claims> = HashMap::new();
    let mut applied = 0;
    for r in list.iter_mut().filter(|r| r.next <= now) {
        if applied == APPLIED_PER_TURN {
            return true;
        }
        let Some((key, conf, name)) = key_of(p, (r.backend, r.server)) else {
            continue;
        };
        let section = &p.config.resolvers[conf.resolvers];
        match asked.get(&key) {
            Some(Asked { outcome: None, .. }) => continue,
            Some(Asked {
                at,
                outcome: Some(o),
            }) if now < *at + freshness(section, o) => {
                r.next = *at + freshness(section, o);
                let held = claims
                    .entry((r.backend, key.clone()))
                    .or_insert_with(|| apply::Claims::gather(p, r.backend, (&conf, &name)));
                let server = (r.backend, r.server);
                apply::apply(p, server, (&mut r.times, held), (&conf, &name), o);
                applied += 1;
                continue;
            }
            _ => {}
        }
        let Some(wire) = section_wire(&*wires, conf.resolvers, p) else {
            continue;
        };
        asked.insert(
            key.clone(),
            Asked {
                at: now,
                outcome: None,
            },
        );
        // Still due: it takes the answer with the others as it comes.
        r.next = now;
        tokio::task::spawn_local(ask(w.clone(), book.clone(), (key, conf, name), wire));
    }
    false
}

/// Asks `key`'s name, keeps the answer for the servers that share it and gives it to
/// those due (a few at a time).
async fn ask(
    w: Rc<Worker>,
    book: Rc<RefCell<Book>>,
    (key, conf, name): (Key, ServerResolve, String),
    wire: Rc<wire::Wire>,
) {
    let p = &w.process;
    let outcome = match conf.srv {
        true => query::resolve_srv(p, &wire, &conf).await,
        false => query::resolve(p, (&wire, conf.resolvers), &name, conf.prefer).await,
    };
    let at = Instant::now();
    let outcome = Some(outcome);
    book.borrow_mut().asked.insert(key, Asked { at, outcome });
    serve_due(&w, &book).await;
}

/// Serves the resolutions that are due, a few at a time, the worker's requests served in
/// between; what they change in their backends' balancing is published once, at the end.
async fn serve_due(w: &Rc<Worker>, book: &Rc<RefCell<Book>>) {
    let backends = book.borrow().backends.clone();
    let _batches: Vec<_> = backends
        .iter()
        .map(|&b| w.process.state.backends[b].lb.batch())
        .collect();
    while start_due(w, book) {
        tokio::task::yield_now().await;
    }
}

/// Section `section`'s socket; without one (it could not be opened), the section's
/// queries count as send errors.
fn section_wire(
    wires: &[Option<Rc<wire::Wire>>],
    section: usize,
    p: &Process,
) -> Option<Rc<wire::Wire>> {
    let found = wires.get(section).cloned().flatten();
    if found.is_none() {
        for c in p.resolvers[section].iter() {
            c.snd_error.bump();
        }
    }
    found
}

/// How long an answer stands for the servers that share it.
fn freshness(section: &crate::conf::resolvers::Resolvers, o: &Outcome) -> Duration {
    match o {
        Outcome::Valid(..) | Outcome::Records(..) => {
            section.hold.valid.max(section.timeout_resolve)
        }
        _ => section.timeout_resolve,
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
