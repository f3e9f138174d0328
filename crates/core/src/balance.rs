//! Load-balancing algorithms (`balance`): which server of a backend gets a request.
//!
//! Weighted algorithms walk a precomputed smooth weighted schedule (each server appears
//! `weight` times, spread out) with one shared atomic cursor, so picking is lock-free across
//! workers. Servers that are not usable are skipped at pick time; backup servers are
//! considered only when no active server is usable, and then only the first usable one (as
//! HAProxy without `option allbackups`). Weights are static until health checks exist, so
//! `roundrobin` and `static-rr` currently behave the same.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_config::{Keyword, KwError, Scope};

use crate::backend::Server;
use crate::config::ProxyConf;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Algo {
    #[default]
    RoundRobin,
    StaticRr,
    LeastConn,
    First,
    /// Power of N random choices (weighted draws, least loaded wins).
    Random(u32),
    Source,
    Uri,
    /// Hash of the named header (lowercase); round robin when it is absent.
    Hdr(String),
}

impl Algo {
    /// The name as written after `balance`.
    pub fn name(&self) -> String {
        match self {
            Algo::RoundRobin => "roundrobin".into(),
            Algo::StaticRr => "static-rr".into(),
            Algo::LeastConn => "leastconn".into(),
            Algo::First => "first".into(),
            Algo::Random(n) => format!("random({n})"),
            Algo::Source => "source".into(),
            Algo::Uri => "uri".into(),
            Algo::Hdr(h) => format!("hdr({h})"),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BalanceConf {
    pub algo: Algo,
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[Keyword {
    name: "balance",
    scope: Scope::BE,
    help: "balance roundrobin|static-rr|leastconn|first|random[(N)]|source|uri|hdr(NAME)",
    parse: |c, args| {
        let Some(a) = args.first() else {
            return Err(KwError::Missing("an algorithm"));
        };
        if args.len() > 1 && !matches!(a.as_str(), "uri") {
            return Err(KwError::Extra(args[1].clone()));
        }
        if a == "uri" && args.len() > 1 {
            return Err(KwError::bad(
                2,
                &args[1],
                "uri options are not supported yet",
            ));
        }
        c.balance.algo = parse_algo(a).map_err(|e| KwError::bad(1, a, e))?;
        Ok(())
    },
}];

fn parse_algo(a: &str) -> Result<Algo, String> {
    Ok(match a {
        "roundrobin" => Algo::RoundRobin,
        "static-rr" => Algo::StaticRr,
        "leastconn" => Algo::LeastConn,
        "first" => Algo::First,
        "random" => Algo::Random(2),
        "source" => Algo::Source,
        "uri" => Algo::Uri,
        _ => {
            if let Some(n) = a.strip_prefix("random(").and_then(|r| r.strip_suffix(')')) {
                let n: u32 = n
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or("random(N) expects N >= 1")?;
                Algo::Random(n)
            } else if let Some(h) = a.strip_prefix("hdr(").and_then(|r| r.strip_suffix(')')) {
                if h.is_empty() {
                    return Err("hdr() expects a header name".into());
                }
                Algo::Hdr(h.to_ascii_lowercase())
            } else {
                return Err(
                    "unknown algorithm (roundrobin, static-rr, leastconn, first, random, source, uri, hdr(NAME))"
                        .into(),
                );
            }
        }
    })
}

/// What a hashing algorithm may hash, taken from the request.
pub struct PickKey<'a> {
    pub client: IpAddr,
    pub path: &'a [u8],
    /// The value of the `hdr(NAME)` header, when the algorithm needs one and it is present.
    pub header: Option<&'a [u8]>,
}

#[derive(Debug)]
pub struct Balancer {
    pub algo: Algo,
    /// Indices of active (non-backup) servers, each repeated by weight, smoothly interleaved.
    schedule: Vec<usize>,
    cursor: AtomicUsize,
}

impl Balancer {
    pub fn new(algo: Algo, servers: &[Server]) -> Balancer {
        let weights: Vec<u32> = servers
            .iter()
            .map(|s| if s.backup || s.disabled { 0 } else { s.weight })
            .collect();
        Balancer {
            algo,
            schedule: smooth_schedule(&weights),
            cursor: AtomicUsize::new(0),
        }
    }

    /// Chooses a server index, or `None` when no server is usable. A server at its `maxconn`
    /// is passed over for one with room when the algorithm offers one; when all are full the
    /// request queues on the algorithm's first choice.
    pub fn pick(&self, servers: &[Server], key: &PickKey<'_>) -> Option<usize> {
        let first = self.pick_any(servers, key)?;
        if servers[first].has_room() {
            return Some(first);
        }
        (0..servers.len())
            .filter_map(|_| self.pick_any(servers, key))
            .find(|&i| servers[i].has_room())
            .or(Some(first))
    }

    fn pick_any(&self, servers: &[Server], key: &PickKey<'_>) -> Option<usize> {
        let active = self.schedule.iter().any(|&i| servers[i].usable());
        if !active {
            return servers.iter().position(|s| s.backup && s.usable());
        }
        match &self.algo {
            Algo::RoundRobin | Algo::StaticRr => self.next_rr(servers),
            Algo::LeastConn => self.least_conn(servers),
            Algo::First => servers
                .iter()
                .position(|s| !s.backup && s.usable() && s.has_room())
                .or_else(|| servers.iter().position(|s| !s.backup && s.usable())),
            Algo::Random(draws) => self.random(servers, *draws),
            Algo::Source => {
                let h = match key.client {
                    IpAddr::V4(a) => hash(&a.octets()),
                    IpAddr::V6(a) => hash(&a.octets()),
                };
                self.by_hash(servers, h)
            }
            Algo::Uri => self.by_hash(servers, hash(key.path)),
            Algo::Hdr(_) => match key.header {
                Some(v) => self.by_hash(servers, hash(v)),
                None => self.next_rr(servers),
            },
        }
    }

    fn next_rr(&self, servers: &[Server]) -> Option<usize> {
        let len = self.schedule.len();
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        (0..len)
            .map(|k| self.schedule[(start + k) % len])
            .find(|&i| servers[i].usable())
    }

    fn least_conn(&self, servers: &[Server]) -> Option<usize> {
        // Rotate the starting point so that ties spread over servers.
        let n = servers.len();
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<(usize, u64, u64)> = None;
        for k in 0..n {
            let i = (start + k) % n;
            let s = &servers[i];
            if s.backup || !s.usable() {
                continue;
            }
            let cur = s.cur_conns.load(Ordering::Relaxed) as u64;
            let w = s.weight as u64;
            // cur/w < best_cur/best_w, compared without division.
            if best.is_none_or(|(_, bc, bw)| cur * bw < bc * w) {
                best = Some((i, cur, w));
            }
        }
        best.map(|(i, _, _)| i)
    }

    fn random(&self, servers: &[Server], draws: u32) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for _ in 0..draws {
            let i = self.schedule[fastrand::usize(..self.schedule.len())];
            if !servers[i].usable() {
                continue;
            }
            let load = servers[i].cur_conns.load(Ordering::Relaxed);
            if best.is_none_or(|(_, b)| load < b) {
                best = Some((i, load));
            }
        }
        best.map(|(i, _)| i).or_else(|| self.next_rr(servers))
    }

    /// Map-based hashing: the hash selects a slot of the weighted schedule.
    fn by_hash(&self, servers: &[Server], h: u64) -> Option<usize> {
        let i = self.schedule[(h % self.schedule.len() as u64) as usize];
        if servers[i].usable() {
            Some(i)
        } else {
            self.next_rr(servers)
        }
    }
}

/// FNV-1a, then a final mix so that nearby keys spread over slots.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// Smooth weighted round robin: at each step every server gains its weight, the richest is
/// chosen and pays the total. Each server appears exactly `weight` times per cycle.
fn smooth_schedule(weights: &[u32]) -> Vec<usize> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, &w) in weights.iter().enumerate() {
            current[i] += i64::from(w);
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        out.push(best);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::ServerPools;
    use std::sync::atomic::AtomicUsize;

    fn server(weight: u32, backup: bool, disabled: bool) -> Server {
        Server {
            name: String::new(),
            addr: "127.0.0.1:1".parse().unwrap(),
            weight,
            backup,
            disabled,
            cur_conns: AtomicUsize::new(0),
            counters: Default::default(),
            idle: ServerPools::new(1, Default::default()),
            slots: None,
            maxconn: None,
            maxqueue: None,
            queued: AtomicUsize::new(0),
        }
    }

    fn key() -> PickKey<'static> {
        PickKey {
            client: "10.0.0.1".parse().unwrap(),
            path: b"/x",
            header: None,
        }
    }

    #[test]
    fn schedule_respects_weights_and_spreads() {
        let s = smooth_schedule(&[5, 1, 1]);
        assert_eq!(s.len(), 7);
        assert_eq!(s.iter().filter(|&&i| i == 0).count(), 5);
        assert!(s.windows(2).any(|w| w[0] != w[1]));
        assert!(smooth_schedule(&[0, 0]).is_empty());
    }

    #[test]
    fn roundrobin_skips_disabled_and_uses_backup_last() {
        let servers = vec![
            server(1, false, false),
            server(1, false, true),
            server(1, true, false),
        ];
        let b = Balancer::new(Algo::RoundRobin, &servers);
        for _ in 0..4 {
            assert_eq!(b.pick(&servers, &key()), Some(0));
        }
        let servers = vec![
            server(1, false, true),
            server(1, true, false),
            server(1, true, false),
        ];
        let b = Balancer::new(Algo::RoundRobin, &servers);
        assert_eq!(b.pick(&servers, &key()), Some(1));
        let servers = vec![server(1, false, true)];
        let b = Balancer::new(Algo::RoundRobin, &servers);
        assert_eq!(b.pick(&servers, &key()), None);
    }

    #[test]
    fn leastconn_prefers_idle_servers() {
        let servers = vec![server(1, false, false), server(1, false, false)];
        servers[0].cur_conns.store(3, Ordering::Relaxed);
        let b = Balancer::new(Algo::LeastConn, &servers);
        assert_eq!(b.pick(&servers, &key()), Some(1));
    }

    #[test]
    fn hashing_is_stable() {
        let servers = vec![
            server(1, false, false),
            server(1, false, false),
            server(1, false, false),
        ];
        let b = Balancer::new(Algo::Source, &servers);
        let first = b.pick(&servers, &key());
        for _ in 0..10 {
            assert_eq!(b.pick(&servers, &key()), first);
        }
    }

    #[test]
    fn algorithm_names() {
        assert_eq!(parse_algo("random(3)"), Ok(Algo::Random(3)));
        assert_eq!(parse_algo("hdr(X-User)"), Ok(Algo::Hdr("x-user".into())));
        assert!(parse_algo("random(0)").is_err());
        assert!(parse_algo("hdr()").is_err());
        assert!(parse_algo("weighted").is_err());
    }
}
