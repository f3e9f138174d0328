//! Load-balancing algorithms (`balance`): which server of a backend gets a request.
//!
//! The algorithms read the live server states and weights of `crate::runtime`:
//! - `roundrobin` and `random` walk a smooth weighted schedule (each server appears
//!   `weight` times, spread out) built from the *live* weights of usable servers, rebuilt
//!   when a server's state or weight changes (the backend's balancing generation moved), so a
//!   change takes effect for the next pick. `leastconn` compares in-flight requests divided
//!   by live weights.
//! - `static-rr`, `source`, `uri` and `hdr()` keep a static map of the configured weights
//!   (so a key keeps its server while the server set is stable) and skip unusable servers.
//! - Backup servers are considered only when no active server is usable: the first usable
//!   one, or with `option allbackups` all of them in turn, by weight.
//!
//! One shared atomic cursor makes walks lock-free across workers; reading the dynamic
//! schedule takes a read lock that is only contended while it is being rebuilt.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::balance::{Algo, BalanceConf};
use crate::conf::{Backend, ProxyConf};
use crate::runtime::{clock_ns, BackendState, LbCache};

/// `option allbackups` (and its `no` form).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option allbackups", Scope::BE, "balance over all backup servers when no active one is usable",
        |c: &mut ProxyConf, on| c.balance.allbackups = on;
];

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

/// Chooses a server index of `be`, or `None` when no server is usable. A server at its
/// `maxconn` is passed over for one with room when the algorithm offers one; when all are
/// full the request queues on the algorithm's first choice.
pub fn pick(be: &Backend, st: &BackendState, key: &PickKey<'_>, lb: &LbCache) -> Option<usize> {
    let first = pick_any(be, st, key, lb)?;
    if st.servers[first].has_room() {
        return Some(first);
    }
    (0..be.servers.len())
        .filter_map(|_| pick_any(be, st, key, lb))
        .find(|&i| st.servers[i].has_room())
        .or(Some(first))
}

/// A usable server other than `not` (the last connection retry with `option redispatch`).
pub fn pick_other(
    be: &Backend,
    st: &BackendState,
    key: &PickKey<'_>,
    lb: &LbCache,
    not: usize,
) -> Option<usize> {
    (0..be.servers.len() * 2)
        .filter_map(|_| pick(be, st, key, lb))
        .find(|&s| s != not)
}

fn pick_any(be: &Backend, st: &BackendState, key: &PickKey<'_>, lb: &LbCache) -> Option<usize> {
    let active = |i: usize| !be.servers[i].backup && st.servers[i].usable();
    if !(0..be.servers.len()).any(active) {
        return backup(be, st);
    }
    match &be.algo {
        Algo::RoundRobin => next_rr(be, st, lb),
        Algo::StaticRr => next_static(be, st, lb),
        Algo::LeastConn => least_conn(be, st),
        Algo::First => (0..be.servers.len())
            .find(|&i| active(i) && st.servers[i].has_room())
            .or_else(|| (0..be.servers.len()).find(|&i| active(i))),
        Algo::Random(draws) => random(be, st, lb, *draws),
        Algo::Source => {
            let h = match key.client {
                IpAddr::V4(a) => hash(&a.octets()),
                IpAddr::V6(a) => hash(&a.octets()),
            };
            by_hash(be, st, lb, h)
        }
        Algo::Uri => by_hash(be, st, lb, hash(key.path)),
        Algo::Hdr(_) => match key.header {
            Some(v) => by_hash(be, st, lb, hash(v)),
            None => next_rr(be, st, lb),
        },
    }
}

/// A backup server, when no active one is usable: the first usable one, or with
/// `option allbackups` each usable one in turn, by weight.
fn backup(be: &Backend, st: &BackendState) -> Option<usize> {
    let usable = |i: &usize| be.servers[*i].backup && st.servers[*i].usable();
    if !be.allbackups {
        return (0..be.servers.len()).find(usable);
    }
    let weights: Vec<(usize, u32)> = (0..be.servers.len())
        .filter(usable)
        .map(|i| (i, st.servers[i].effective_weight()))
        .collect();
    let total: u64 = weights.iter().map(|&(_, w)| u64::from(w)).sum();
    if total == 0 {
        return None;
    }
    let mut k = st.lb.cursor.fetch_add(1, Ordering::Relaxed) as u64 % total;
    weights.into_iter().find_map(|(i, w)| {
        if k < u64::from(w) {
            Some(i)
        } else {
            k -= u64::from(w);
            None
        }
    })
}

/// Runs `f` on the dynamic schedule (live weights of usable active servers). The worker's
/// copy serves while the backend's balancing generation is unchanged; after a change, the
/// first worker to notice rebuilds the shared schedule and the others copy it.
fn with_schedule<R>(
    be: &Backend,
    st: &BackendState,
    lb: &LbCache,
    f: impl FnOnce(&[usize]) -> R,
) -> R {
    let mut gen = st.lb.generation.load(Ordering::Acquire);
    let ramp = st.lb.ramp_until.load(Ordering::Relaxed);
    if ramp != 0 {
        // A weight is ramping up (`slowstart`): a new schedule every 100 ms until it is done.
        let now = clock_ns();
        if now < ramp {
            gen = gen.wrapping_add((now / 100_000_000) << 32);
        }
    }
    let mut cache = lb.0.borrow_mut();
    if cache.len() <= st.index {
        cache.resize(st.index + 1, None);
    }
    let mine = &mut cache[st.index];
    if let Some((g, s)) = mine {
        if *g == gen {
            return f(s);
        }
    }
    let shared = {
        let s = st.lb.schedule.read().unwrap_or_else(|e| e.into_inner());
        (s.0 == gen).then(|| s.1.clone())
    };
    let schedule = shared.unwrap_or_else(|| {
        let weights: Vec<u32> = be
            .servers
            .iter()
            .zip(st.servers.iter())
            .map(|(c, s)| if c.backup { 0 } else { s.effective_weight() })
            .collect();
        let built: Arc<[usize]> = smooth_schedule(&weights).into();
        let mut s = st.lb.schedule.write().unwrap_or_else(|e| e.into_inner());
        *s = (gen, built.clone());
        built
    });
    *mine = Some((gen, schedule.clone()));
    drop(cache);
    f(&schedule)
}

/// The static map of `static-rr` and the hash algorithms: configured weights, built once.
fn static_map<'a>(be: &Backend, st: &'a BackendState) -> &'a [usize] {
    st.lb.static_map.get_or_init(|| {
        let weights: Vec<u32> = be
            .servers
            .iter()
            .map(|s| if s.backup { 0 } else { s.weight })
            .collect();
        smooth_schedule(&weights).into()
    })
}

fn walk(map: &[usize], st: &BackendState) -> Option<usize> {
    let len = map.len();
    if len == 0 {
        return None;
    }
    let start = st.lb.cursor.fetch_add(1, Ordering::Relaxed);
    (0..len)
        .map(|k| map[(start + k) % len])
        .find(|&i| st.servers[i].usable())
}

fn next_rr(be: &Backend, st: &BackendState, lb: &LbCache) -> Option<usize> {
    with_schedule(be, st, lb, |map| walk(map, st))
}

fn next_static(be: &Backend, st: &BackendState, lb: &LbCache) -> Option<usize> {
    walk(static_map(be, st), st).or_else(|| next_rr(be, st, lb))
}

fn least_conn(be: &Backend, st: &BackendState) -> Option<usize> {
    // Rotate the starting point so that ties spread over servers.
    let n = be.servers.len();
    let start = st.lb.cursor.fetch_add(1, Ordering::Relaxed);
    let mut best: Option<(usize, u64, u64)> = None;
    for k in 0..n {
        let i = (start + k) % n;
        let s = &st.servers[i];
        let w = u64::from(s.effective_weight());
        if be.servers[i].backup || w == 0 {
            continue;
        }
        let cur = s.in_flight.load(Ordering::Relaxed) as u64;
        // cur/w < best_cur/best_w, compared without division.
        if best.is_none_or(|(_, bc, bw)| cur * bw < bc * w) {
            best = Some((i, cur, w));
        }
    }
    best.map(|(i, _, _)| i)
}

fn random(be: &Backend, st: &BackendState, lb: &LbCache, draws: u32) -> Option<usize> {
    let best = with_schedule(be, st, lb, |map| {
        let mut best: Option<(usize, usize)> = None;
        if map.is_empty() {
            return None;
        }
        for _ in 0..draws {
            let i = map[fastrand::usize(..map.len())];
            if !st.servers[i].usable() {
                continue;
            }
            let load = st.servers[i].in_flight.load(Ordering::Relaxed);
            if best.is_none_or(|(_, b)| load < b) {
                best = Some((i, load));
            }
        }
        best.map(|(i, _)| i)
    });
    best.or_else(|| next_rr(be, st, lb))
}

/// Map-based hashing: the hash selects a slot of the static map; an unusable server's
/// requests go round robin over the others.
fn by_hash(be: &Backend, st: &BackendState, lb: &LbCache, h: u64) -> Option<usize> {
    let map = static_map(be, st);
    if map.is_empty() {
        return next_rr(be, st, lb);
    }
    let i = map[(h % map.len() as u64) as usize];
    if st.servers[i].usable() {
        Some(i)
    } else {
        next_rr(be, st, lb)
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
    use crate::runtime::AdminState;

    fn backend(algo: Algo, servers: &[(u32, bool, bool)]) -> (Backend, BackendState) {
        let mut c = ProxyConf::default();
        c.balance.algo = algo;
        for (i, &(weight, backup, disabled)) in servers.iter().enumerate() {
            c.backend.servers.push(crate::conf::backend::ServerSpec {
                name: format!("s{i}"),
                addr: "127.0.0.1:1".parse().unwrap(),
                opts: crate::conf::backend::ServerOpts {
                    weight: Some(weight),
                    backup,
                    disabled,
                    ..Default::default()
                },
            });
        }
        let be = crate::backend::lower("be", 1, &c);
        let st = BackendState::new(&be, 0, 1);
        (be, st)
    }

    fn key() -> PickKey<'static> {
        PickKey {
            client: "10.0.0.1".parse().unwrap(),
            path: b"/x",
            header: None,
        }
    }

    /// Counts `n` picks with one worker's cache (kept across calls, as a worker's is).
    fn picks(be: &Backend, st: &BackendState, lb: &LbCache, n: usize) -> Vec<usize> {
        let mut count = vec![0; be.servers.len()];
        for _ in 0..n {
            count[pick(be, st, &key(), lb).unwrap()] += 1;
        }
        count
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
        let (be, st) = backend(
            Algo::RoundRobin,
            &[(1, false, false), (1, false, true), (1, true, false)],
        );
        for _ in 0..4 {
            assert_eq!(pick(&be, &st, &key(), &LbCache::default()), Some(0));
        }
        let (be, st) = backend(
            Algo::RoundRobin,
            &[(1, false, true), (1, true, false), (1, true, false)],
        );
        assert_eq!(pick(&be, &st, &key(), &LbCache::default()), Some(1));
        let (be, st) = backend(Algo::RoundRobin, &[(1, false, true)]);
        assert_eq!(pick(&be, &st, &key(), &LbCache::default()), None);
    }

    #[test]
    fn roundrobin_follows_live_weights_and_states() {
        let (be, st) = backend(Algo::RoundRobin, &[(1, false, false), (1, false, false)]);
        let lb = LbCache::default();
        assert_eq!(picks(&be, &st, &lb, 100), [50, 50]);
        st.set_weight(0, 3);
        assert_eq!(picks(&be, &st, &lb, 100), [75, 25]);
        st.set_admin(1, AdminState::Drain);
        assert_eq!(picks(&be, &st, &lb, 10), [10, 0]);
        st.set_admin(1, AdminState::Ready);
        st.set_weight(0, 0);
        assert_eq!(picks(&be, &st, &lb, 10), [0, 10]);
        st.set_admin(1, AdminState::Maint);
        assert_eq!(pick(&be, &st, &key(), &LbCache::default()), None);
    }

    #[test]
    fn static_rr_keeps_its_map_but_skips_unusable_servers() {
        let (be, st) = backend(Algo::StaticRr, &[(3, false, false), (1, false, false)]);
        let lb = LbCache::default();
        st.set_weight(0, 1);
        assert_eq!(picks(&be, &st, &lb, 100), [75, 25], "configured weights");
        st.set_admin(0, AdminState::Maint);
        assert_eq!(picks(&be, &st, &lb, 10), [0, 10]);
    }

    #[test]
    fn leastconn_prefers_idle_servers_by_live_weight() {
        let (be, st) = backend(Algo::LeastConn, &[(1, false, false), (1, false, false)]);
        st.servers[0].in_flight.store(3, Ordering::Relaxed);
        assert_eq!(pick(&be, &st, &key(), &LbCache::default()), Some(1));
        st.servers[1].in_flight.store(2, Ordering::Relaxed);
        st.set_weight(0, 4);
        assert_eq!(
            pick(&be, &st, &key(), &LbCache::default()),
            Some(0),
            "3/4 < 2/1"
        );
    }

    #[test]
    fn hashing_is_stable_and_avoids_unusable_servers() {
        let (be, st) = backend(
            Algo::Source,
            &[(1, false, false), (1, false, false), (1, false, false)],
        );
        let first = pick(&be, &st, &key(), &LbCache::default()).unwrap();
        for _ in 0..10 {
            assert_eq!(pick(&be, &st, &key(), &LbCache::default()), Some(first));
        }
        st.set_admin(first, AdminState::Maint);
        for _ in 0..10 {
            assert_ne!(pick(&be, &st, &key(), &LbCache::default()), Some(first));
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
