//! Asking a `resolvers` section: queries over UDP to each of its nameservers, sent again
//! after `timeout retry` up to `resolve_retries` times, answers judged (id, question,
//! truncation, size, response code) and counted on the nameserver that gave them; A/AAAA
//! answers read as addresses (CNAMEs followed), SRV answers as records.

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use super::wire::Wire;
use crate::conf::resolvers::{Family, ServerResolve};
use std::sync::Arc;

use crate::runtime::{NameserverCounters, Process};

/// What a resolution came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The addresses answered (none: the name exists but has no address of either
    /// family), and the nameserver that answered.
    Valid(Vec<IpAddr>, usize),
    /// An SRV name: its records (by priority), and the nameserver that answered.
    Records(std::rc::Rc<Records>, usize),
    Nx,
    Refused,
    Timeout,
    Other,
}

/// An SRV answer's records, by priority, and found by target and port.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Records {
    pub list: Vec<Target>,
    index: std::collections::HashMap<(String, u16), usize>,
}

impl Records {
    fn new(list: Vec<Target>) -> Records {
        let index = list
            .iter()
            .enumerate()
            .map(|(i, t)| ((t.name.clone(), t.port), i))
            .collect();
        Records { list, index }
    }

    pub fn get(&self, name: &str, port: u16) -> Option<&Target> {
        self.index
            .get(&(name.to_string(), port))
            .map(|&i| &self.list[i])
    }

    pub fn has(&self, name: &str, port: u16) -> bool {
        self.get(name, port).is_some()
    }
}

/// An SRV record as a server takes it: where (the target's addresses, the port) and its
/// weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub name: String,
    pub port: u16,
    pub weight: u16,
    pub addrs: Vec<IpAddr>,
}

/// Asks `fqdn` of the section, the preferred family first, then the other when the name
/// has no address of the first.
pub(super) async fn resolve(
    p: &Arc<Process>,
    (wire, section): (&Wire, usize),
    fqdn: &str,
    prefer: Family,
) -> Outcome {
    let types = match prefer {
        Family::V6 => [RecordType::AAAA, RecordType::A],
        Family::V4 => [RecordType::A, RecordType::AAAA],
    };
    let Ok(name) = Name::from_ascii(fqdn) else {
        return Outcome::Other;
    };
    let mut last = Outcome::Other;
    for t in types {
        match query(p, (wire, section), &name, t).await {
            Ok((m, ns)) => {
                let addrs = addresses(&m, &name, t, &p.resolvers[section][ns]);
                if !addrs.is_empty() {
                    return Outcome::Valid(addrs, ns);
                }
                last = Outcome::Valid(addrs, ns);
            }
            Err(failed) => return failed,
        }
    }
    last
}

/// Asks an SRV name: its records by priority, each with its target's addresses (from the
/// answer's additional records, else asked of the target's name; a target that gives
/// none is left out).
pub(super) async fn resolve_srv(p: &Arc<Process>, wire: &Wire, conf: &ServerResolve) -> Outcome {
    let Ok(name) = Name::from_ascii(&conf.fqdn) else {
        return Outcome::Other;
    };
    let (m, ns) = match query(p, (wire, conf.resolvers), &name, RecordType::SRV).await {
        Ok(answered) => answered,
        Err(failed) => return failed,
    };
    let mut records = apart(m.answers.len() > APART_RECORDS, {
        let prefer = conf.prefer;
        let name = name.clone();
        move || srv_records(&m, &name, prefer)
    })
    .await;
    for t in &mut records {
        if t.addrs.is_empty() {
            if let Outcome::Valid(addrs, _) =
                Box::pin(resolve(p, (wire, conf.resolvers), &t.name, conf.prefer)).await
            {
                t.addrs = addrs;
            }
        }
    }
    records.retain(|t| !t.addrs.is_empty());
    Outcome::Records(std::rc::Rc::new(Records::new(records)), ns)
}

/// One query, sent to every nameserver of the section and again after `timeout retry`,
/// `resolve_retries` times in all; the first acceptable answer decides: its message and
/// the nameserver's index, or what it said instead (NXDOMAIN, REFUSED, ...).
async fn query(
    p: &Arc<Process>,
    (wire, section): (&Wire, usize),
    name: &Name,
    t: RecordType,
) -> Result<(Message, usize), Outcome> {
    let conf = &p.config.resolvers[section];
    let counters = &p.resolvers[section];
    for _ in 0..conf.retries {
        let (id, mut answers) = wire.register();
        let got = ask(p, (wire, section), (id, name, t), &mut answers).await;
        wire.forget(id);
        if let Some(decided) = got {
            return decided;
        }
    }
    for c in counters.iter() {
        c.timeout.bump();
    }
    Err(Outcome::Timeout)
}

/// One round of a query: sent to each nameserver, the answers judged until one decides or
/// `timeout retry` passes (`None`).
async fn ask(
    p: &Arc<Process>,
    (wire, section): (&Wire, usize),
    (id, name, t): (u16, &Name, RecordType),
    answers: &mut tokio::sync::mpsc::UnboundedReceiver<super::wire::Datagram>,
) -> Option<Result<(Message, usize), Outcome>> {
    let conf = &p.config.resolvers[section];
    let counters = &p.resolvers[section];
    let bytes = question(id, name, t, conf.payload)?;
    for (i, ns) in conf.nameservers.iter().enumerate() {
        match wire.send(&bytes, (i, ns.addr)).await {
            Ok(_) => counters[i].sent.bump(),
            Err(_) => counters[i].snd_error.bump(),
        }
    }
    let deadline = tokio::time::Instant::now() + conf.timeout_retry;
    loop {
        let Ok(Some((bytes, ns))) = tokio::time::timeout_at(deadline, answers.recv()).await else {
            return None;
        };
        // Over TCP an answer is as large as it needs (no datagram to fit).
        let limit = if conf.nameservers[ns].tcp {
            u16::MAX
        } else {
            conf.payload
        };
        let large = bytes.len() > APART_BYTES;
        if large {
            counters[ns].read_apart.bump();
        }
        let judged = apart(large, {
            let (p, name) = (p.clone(), name.clone());
            move || judge(&bytes, (id, &name, t), limit, &p.resolvers[section][ns])
        })
        .await;
        match judged {
            Some(Ok(m)) => return Some(Ok((m, ns))),
            Some(Err(said)) => return Some(Err(said.into())),
            None => {}
        }
    }
}

/// Answers larger than this are read on a helper thread (a thousand SRV records are about a
/// millisecond of reading: the worker's own requests would wait that long).
const APART_BYTES: usize = 8 * 1024;
/// Answers with more records than this have their records gathered there too.
const APART_RECORDS: usize = 64;

/// Runs `f` here, or on the runtime's helper threads when `far` (the worker serves its
/// requests meanwhile); its result either way.
async fn apart<T: Send + 'static>(far: bool, f: impl FnOnce() -> T + Send + 'static) -> T {
    if !far {
        return f();
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(t) => t,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: the runtime is shutting down, and this task with it.
            Err(_) => std::future::pending().await,
        },
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

/// What an answer says, counted on its nameserver: the message when it answers the query
/// (NOERROR), what it said instead, or `None` when it is no answer to the query (ignored:
/// the wait goes on for a proper one).
/// What a nameserver said instead of answering (plain data: judged on a helper thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    Nx,
    Refused,
    Other,
}

impl From<Said> for Outcome {
    fn from(s: Said) -> Outcome {
        match s {
            Said::Nx => Outcome::Nx,
            Said::Refused => Outcome::Refused,
            Said::Other => Outcome::Other,
        }
    }
}

fn judge(
    bytes: &[u8],
    (id, name, t): (u16, &Name, RecordType),
    payload: u16,
    c: &NameserverCounters,
) -> Option<Result<Message, Said>> {
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
    let said = match m.metadata.response_code {
        ResponseCode::NoError => {
            c.valid.bump();
            return Some(Ok(m));
        }
        ResponseCode::NXDomain => (&c.nx, Said::Nx),
        ResponseCode::Refused => (&c.refused, Said::Refused),
        _ => (&c.other, Said::Other),
    };
    said.0.bump();
    Some(Err(said.1))
}

/// The addresses of type `t` an answer gives for `name` or the names it is an alias of
/// (CNAME), in the order answered.
fn addresses(m: &Message, name: &Name, t: RecordType, c: &NameserverCounters) -> Vec<IpAddr> {
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
    addrs
}

/// The SRV records an answer gives for `name`, by priority (then as answered), each with
/// the addresses the additional section gives its target (the preferred family first).
fn srv_records(m: &Message, name: &Name, prefer: Family) -> Vec<Target> {
    // The additional section's addresses by name, gathered once (an answer may carry a
    // thousand records: looking each target up in it would be quadratic).
    let key = |n: &Name| n.to_ascii().trim_end_matches('.').to_ascii_lowercase();
    let mut extra: std::collections::HashMap<String, Vec<IpAddr>> = Default::default();
    for a in &m.additionals {
        let ip = match &a.data {
            RData::A(v4) => IpAddr::V4(v4.0),
            RData::AAAA(v6) => IpAddr::V6(v6.0),
            _ => continue,
        };
        extra.entry(key(&a.name)).or_default().push(ip);
    }
    let mut found: Vec<(u16, Target)> = m
        .answers
        .iter()
        .filter(|rec| rec.name.eq_ignore_root_case(name))
        .filter_map(|rec| match &rec.data {
            RData::SRV(srv) => Some((srv.priority, srv)),
            _ => None,
        })
        .map(|(priority, srv)| {
            let target = key(&srv.target);
            let mut addrs = extra.get(&target).cloned().unwrap_or_default();
            addrs.sort_by_key(|ip| ip.is_ipv6() != (prefer == Family::V6));
            let target = Target {
                name: target,
                port: srv.port,
                weight: srv.weight,
                addrs,
            };
            (priority, target)
        })
        .collect();
    found.sort_by_key(|(priority, _)| *priority);
    found.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Record;

    #[test]
    fn answers_are_judged_against_their_question() {
        let name = Name::from_ascii("web.test").unwrap();
        let c = NameserverCounters::default();
        let mut answer = Message::new(7, MessageType::Response, OpCode::Query);
        answer.add_query(Query::query(name.clone(), RecordType::A));
        let a = hickory_proto::rr::rdata::A("10.0.0.5".parse().unwrap());
        answer
            .answers
            .push(Record::from_rdata(name.clone(), 60, RData::A(a)));
        let bytes = answer.to_vec().unwrap();
        let Some(Ok(m)) = judge(&bytes, (7, &name, RecordType::A), 512, &c) else {
            panic!("a proper answer is taken");
        };
        assert_eq!(
            addresses(&m, &name, RecordType::A, &c),
            vec!["10.0.0.5".parse::<IpAddr>().unwrap()]
        );
        assert!(judge(&bytes, (8, &name, RecordType::A), 512, &c).is_none());
        assert!(judge(b"garbage", (7, &name, RecordType::A), 512, &c).is_none());
        assert!(judge(&bytes, (7, &name, RecordType::AAAA), 512, &c).is_none());
        assert_eq!(
            (c.valid.get(), c.outdated.get(), c.invalid.get()),
            (1, 2, 1)
        );
    }

    #[test]
    fn srv_records_come_by_priority_with_their_addresses() {
        use hickory_proto::rr::rdata::{A, SRV};
        let name = Name::from_ascii("_http._tcp.app.test").unwrap();
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        let srv = |prio, port, target: &str| {
            let t = Name::from_ascii(target).unwrap();
            Record::from_rdata(name.clone(), 60, RData::SRV(SRV::new(prio, 10, port, t)))
        };
        m.answers.push(srv(20, 8002, "b.app.test"));
        m.answers.push(srv(10, 8001, "a.app.test"));
        let a = Name::from_ascii("a.app.test").unwrap();
        m.additionals.push(Record::from_rdata(
            a,
            60,
            RData::A(A("10.0.0.1".parse().unwrap())),
        ));
        let got = srv_records(&m, &name, Family::V4);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].name.as_str(), got[0].port), ("a.app.test", 8001));
        assert_eq!(got[0].addrs, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            (got[1].name.as_str(), got[1].addrs.len()),
            ("b.app.test", 0)
        );
    }
}
