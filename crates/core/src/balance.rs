//! Load-balancing algorithms (`balance`, `hash-type`): which server of a backend gets a
//! request.
//!
//! The algorithms read the live server states and weights of `crate::runtime`:
//! - `roundrobin` and `random` walk a smooth weighted schedule (each server appears
//!   `weight` times, spread out) built from the *live* weights of usable servers, rebuilt
//!   when a server's state or weight changes (the backend's balancing generation moved), so a
//!   change takes effect for the next pick. `leastconn` compares in-flight requests divided
//!   by live weights.
//! - `static-rr` keeps a static map of the configured weights and skips unusable servers.
//! - The hashing algorithms (`source`, `uri`, `url_param`, `hdr()`) place a key exactly as
//!   HAProxy 2.6 does, so that a key lands on the same server behind either proxy: the same
//!   hash functions (`hash-type` function, `avalanche`), and either HAProxy's weight map
//!   (`map-based`, the default: the hash modulo the total weight, over a map that interleaves
//!   servers by weight, rebuilt when a server changes) or its consistent-hashing ring
//!   (`consistent`: each server owns `weight * 16` points keyed by the avalanche of its id and
//!   point number; a key goes to the nearest point). Without a key (no such parameter or
//!   header) the request goes round robin over the same table, as HAProxy does.
//! - Backup servers are considered only when no active server is usable: the first usable
//!   one, or with `option allbackups` all of them in turn, by weight.
//!
//! One shared atomic cursor makes walks lock-free across workers; reading the dynamic
//! table takes a read lock that is only contended while it is being rebuilt, and each
//! worker keeps its own copy while the generation is unchanged.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::balance::{Algo, BalanceConf, HashFn, HashType, UriOpts};
use crate::conf::{Backend, ProxyConf};
use crate::runtime::{clock_ns, BackendState, LbCache, LbTable};
use crate::sample::hash;

/// `option allbackups` (and its `no` form).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option allbackups", Scope::BE, "balance over all backup servers when no active one is usable",
        |c: &mut ProxyConf, on| c.balance.allbackups = on;
];

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "balance",
        scope: Scope::BE,
        help: "balance roundrobin|static-rr|leastconn|first|random[(N)]|source|uri [len N] [depth N] [whole] [path-only]|url_param NAME [check_post]|hdr(NAME) [use_domain_only]|rdp-cookie[(NAME)]",
        parse: |c, args| {
            c.balance.algo = parse_balance(args, &c.rules.book)?;
            Ok(())
        },
    },
    Keyword {
        name: "hash-balance-factor",
        scope: Scope::BE,
        help: "hash-balance-factor N: with consistent hashing, no server takes more than N% of its share of the requests in flight (N >= 100, 0 disables)",
        parse: |c, args| {
            let v = crate::conf::one_arg(args, "a percentage")?;
            let n: u32 = v
                .parse()
                .ok()
                .filter(|&n| n == 0 || (100..=65535).contains(&n))
                .ok_or_else(|| KwError::bad(1, v, "expects 0 or a number from 100 to 65535"))?;
            c.balance.balance_factor = (n > 0).then_some(n);
            Ok(())
        },
    },
    Keyword {
        name: "hash-type",
        scope: Scope::BE,
        help: "hash-type map-based|consistent [sdbm|djb2|wt6|crc32|none] [avalanche]: how hashing algorithms place keys",
        parse: |c, args| {
            c.balance.hash = parse_hash_type(args)?;
            Ok(())
        },
    },
];

fn parse_balance(
    args: &[String],
    book: &crate::conf::patterns::PatternBook,
) -> Result<Algo, KwError> {
    let Some(a) = args.first() else {
        return Err(KwError::Missing("an algorithm"));
    };
    let opts = &args[1..];
    let no_opts = |algo: Algo| match opts.first() {
        Some(extra) => Err(KwError::Extra(extra.clone())),
        None => Ok(algo),
    };
    match a.as_str() {
        "uri" => {
            let mut u = UriOpts::default();
            let mut i = 0;
            while i < opts.len() {
                let idx = i + 2;
                match opts[i].as_str() {
                    "whole" => u.whole = true,
                    "path-only" => u.path_only = true,
                    kw @ ("len" | "depth") => {
                        let v = opts
                            .get(i + 1)
                            .ok_or(KwError::Missing("a number after len/depth"))?;
                        let n = v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                            KwError::bad(idx + 1, v, "expects a positive integer")
                        })?;
                        if kw == "len" {
                            u.len = n;
                        } else {
                            u.depth = n;
                        }
                        i += 1;
                    }
                    other => {
                        return Err(KwError::bad(
                            idx,
                            other,
                            "expects len N, depth N, whole or path-only",
                        ))
                    }
                }
                i += 1;
            }
            Ok(Algo::Uri(u))
        }
        "url_param" => match opts {
            [name] => Ok(Algo::UrlParam(name.clone(), false)),
            // `check_post [MAX]`: the body searched is what the buffer holds.
            [name, kw] if kw == "check_post" => Ok(Algo::UrlParam(name.clone(), true)),
            [name, kw, max] if kw == "check_post" && max.parse::<u64>().is_ok() => {
                Ok(Algo::UrlParam(name.clone(), true))
            }
            [_, kw, other, ..] if kw == "check_post" => {
                Err(KwError::bad(4, other, "expects a size in bytes"))
            }
            [] => Err(KwError::Missing("a parameter name")),
            [_, extra, ..] => Err(KwError::Extra(extra.clone())),
        },
        "hash" => match opts {
            [expr] => crate::conf::sample_parse::parse_expr(expr, book)
                .map(Algo::Hash)
                .map_err(|e| KwError::bad(2, expr, e.0)),
            [] => Err(KwError::Missing("a sample expression")),
            [_, extra, ..] => Err(KwError::Extra(extra.clone())),
        },
        _ if a == "rdp-cookie" || a.starts_with("rdp-cookie(") => {
            let name = match a.strip_prefix("rdp-cookie(") {
                Some(rest) => rest
                    .strip_suffix(')')
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| KwError::bad(1, a, "expects rdp-cookie or rdp-cookie(NAME)"))?,
                None => "mstshash",
            };
            no_opts(Algo::RdpCookie(name.to_string()))
        }
        _ if a.starts_with("hdr(") => {
            let Algo::Hdr(name, _) = parse_algo(a).map_err(|e| KwError::bad(1, a, e))? else {
                unreachable!("hdr( parses as Hdr");
            };
            match opts {
                [] => Ok(Algo::Hdr(name, false)),
                [o] if o == "use_domain_only" => Ok(Algo::Hdr(name, true)),
                [o, ..] => Err(KwError::bad(2, o, "expects use_domain_only")),
            }
        }
        _ => no_opts(parse_algo(a).map_err(|e| KwError::bad(1, a, e))?),
    }
}

fn parse_hash_type(args: &[String]) -> Result<HashType, KwError> {
    let Some(kind) = args.first() else {
        return Err(KwError::Missing("map-based or consistent"));
    };
    let mut h = HashType {
        consistent: match kind.as_str() {
            "map-based" => false,
            "consistent" => true,
            other => return Err(KwError::bad(1, other, "expects map-based or consistent")),
        },
        ..HashType::default()
    };
    // `consistent` without a function name means sdbm with avalanche (HAProxy kept the
    // behaviour of its releases before functions could be named).
    h.avalanche = h.consistent && args.len() == 1;
    for (i, a) in args[1..].iter().enumerate() {
        match a.as_str() {
            "sdbm" => h.func = HashFn::Sdbm,
            "djb2" => h.func = HashFn::Djb2,
            "wt6" => h.func = HashFn::Wt6,
            "crc32" => h.func = HashFn::Crc32,
            "none" => h.func = HashFn::None,
            "avalanche" => h.avalanche = true,
            other => {
                return Err(KwError::bad(
                    i + 2,
                    other,
                    "expects sdbm, djb2, wt6, crc32, none or avalanche",
                ))
            }
        }
    }
    Ok(h)
}

fn parse_algo(a: &str) -> Result<Algo, String> {
    Ok(match a {
        "roundrobin" => Algo::RoundRobin,
        "static-rr" => Algo::StaticRr,
        "leastconn" => Algo::LeastConn,
        "first" => Algo::First,
        "random" => Algo::Random(2),
        "source" => Algo::Source,
        "uri" => Algo::Uri(UriOpts::default()),
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
                Algo::Hdr(h.to_ascii_lowercase(), false)
            } else {
                return Err(
                    "unknown algorithm (roundrobin, static-rr, leastconn, first, random, source, uri, url_param, hdr(NAME))"
                        .into(),
                );
            }
        }
    })
}

/// What a hashing algorithm may hash, taken from the request.
pub struct PickKey<'a> {
    pub client: IpAddr,
    /// The request target as received.
    pub target: &'a [u8],
    /// What the algorithm hashes when it is not in the target: the `hdr(NAME)` header's
    /// first value, the RDP cookie, or a `url_param ... check_post` parameter found in the
    /// body.
    pub extra: Option<&'a [u8]>,
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
        .or_else(|| {
            // An algorithm that picks the same server every time (`first`, a hash) avoids
            // the one that failed as HAProxy's does: the next usable one after it.
            let n = be.servers.len();
            let usable = |i: usize| !be.servers[i].backup && st.servers[i].usable();
            (1..n).map(|d| (not + d) % n).find(|&i| usable(i))
        })
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
            .filter(|&i| active(i))
            .find(|&i| st.servers[i].has_room()),
        Algo::Random(draws) => random(be, st, lb, *draws),
        algo => {
            let key = hash_key(be, algo, key);
            with_schedule(be, st, lb, |t| {
                let found = match key {
                    Some(h) => lookup(t, h, |i| within_share(be, st, i)),
                    None => None,
                };
                found
                    .filter(|&i| st.servers[i].usable())
                    .or_else(|| walk(&t.servers, st))
            })
        }
    }
}

/// The hash of a request's key under a hashing algorithm, as HAProxy computes it; `None`
/// when the request has no key (round robin then).
fn hash_key(be: &Backend, algo: &Algo, key: &PickKey<'_>) -> Option<u32> {
    let bytes: &[u8] = match algo {
        Algo::Source => {
            // The address's 32-bit words, XORed; the hash function does not apply.
            let h = match key.client {
                IpAddr::V4(a) => u32::from(a),
                IpAddr::V6(a) => {
                    let v6 = a.to_ipv4_mapped().map(|v4| u128::from(u32::from(v4)));
                    match v6 {
                        Some(v4) => v4 as u32,
                        None => {
                            let n = u128::from(a);
                            (0..4).fold(0u32, |h, k| h ^ (n >> (96 - 32 * k)) as u32)
                        }
                    }
                }
            };
            return Some(if be.hash.avalanche {
                hash::avalanche(h)
            } else {
                h
            });
        }
        Algo::Uri(u) => uri_key(key.target, u),
        Algo::UrlParam(name, _) => url_param(key.target, name).or(key.extra)?,
        Algo::RdpCookie(_) => key.extra.filter(|v| !v.is_empty())?,
        Algo::Hash(_) => key.extra?,
        Algo::Hdr(_, domain_only) => {
            let v = key.extra.filter(|v| !v.is_empty())?;
            if *domain_only {
                main_domain(v)
            } else {
                v
            }
        }
        _ => return None,
    };
    let h = match be.hash.func {
        HashFn::Sdbm => hash::sdbm(bytes),
        HashFn::Djb2 => hash::djb2(bytes),
        HashFn::Wt6 => hash::wt6(bytes),
        HashFn::Crc32 => hash::crc32(bytes),
        // The key read as a decimal number (what is not one reads as 0).
        HashFn::None => crate::conf::sample::Sample::str(bytes)
            .as_int()
            .unwrap_or(0) as u32,
    };
    Some(if be.hash.avalanche {
        hash::avalanche(h)
    } else {
        h
    })
}

/// The part of the target `balance uri` hashes: up to the query (unless `whole`), at most
/// `len` characters and `depth` directories; with `path-only`, from the path on.
fn uri_key<'a>(target: &'a [u8], u: &UriOpts) -> &'a [u8] {
    let mut t = target;
    if u.path_only {
        t = &t[sluice_http::path_start(t)..];
    }
    if u.len > 0 && t.len() > u.len {
        t = &t[..u.len];
    }
    let mut slashes = 0;
    for (i, &c) in t.iter().enumerate() {
        if c == b'/' {
            slashes += 1;
            if u.depth > 0 && slashes == u.depth + 1 {
                return &t[..i];
            }
        } else if c == b'?' && !u.whole {
            return &t[..i];
        }
    }
    t
}

/// The value of query parameter `name` (up to the next `&`), if the target has it.
fn url_param<'a>(target: &'a [u8], name: &str) -> Option<&'a [u8]> {
    form_param(&target[memchr::memchr(b'?', target)? + 1..], name)
}

/// The value of parameter `name` in `a=1&b=2` text (a query, or a form body for
/// `url_param ... check_post`).
pub fn form_param<'a>(q: &'a [u8], name: &str) -> Option<&'a [u8]> {
    q.split(|&b| b == b'&').find_map(|kv| {
        let v = kv.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(v)
    })
}

/// The value of RDP cookie `name` in the first bytes of an RDP connection request
/// (`Cookie: mstshash=VALUE` ending in CRLF; the name is matched without case).
pub fn rdp_cookie<'a>(data: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let at = memchr::memmem::find(data, b"Cookie: ")? + 8;
    let rest = &data[at..];
    let eq = name.len();
    if rest.len() <= eq || !rest[..eq].eq_ignore_ascii_case(name.as_bytes()) || rest[eq] != b'=' {
        return None;
    }
    let value = &rest[eq + 1..];
    let end = memchr::memmem::find(value, b"\r\n")?;
    Some(&value[..end])
}

/// `use_domain_only`: the label before the last dot (`www.example.com` -> `example`); the
/// whole value when it has no dot.
fn main_domain(v: &[u8]) -> &[u8] {
    let Some(last) = memchr::memrchr(b'.', v) else {
        return v;
    };
    let start = memchr::memrchr(b'.', &v[..last]).map_or(0, |d| d + 1);
    &v[start..last]
}

/// The server a hash goes to in a table: HAProxy's map (`hash % size`) or, for a ring, the
/// point nearest to the hash (the one before it on a tie), or the next point on the ring
/// whose server is `eligible` (`hash-balance-factor`).
fn lookup(t: &LbTable, h: u32, eligible: impl Fn(usize) -> bool) -> Option<usize> {
    if t.servers.is_empty() {
        return None;
    }
    if t.keys.is_empty() {
        return Some(t.servers[h as usize % t.servers.len()]);
    }
    let n = t.keys.len();
    let next = t.keys.partition_point(|&k| k < h) % n;
    let prev = (next + n - 1) % n;
    let dp = h.wrapping_sub(t.keys[prev]);
    let dn = t.keys[next].wrapping_sub(h);
    let start = if dp <= dn { prev } else { next };
    (0..n)
        .map(|k| t.servers[(start + k) % n])
        .find(|&i| eligible(i))
        .or(Some(t.servers[start]))
}

/// `hash-balance-factor`: whether server `i` holds fewer requests in flight than its share,
/// as HAProxy counts it: the requests in flight plus this one, times the factor, split by
/// weight (the remainder spread in server order), at least one.
fn within_share(be: &Backend, st: &BackendState, i: usize) -> bool {
    let Some(factor) = be.balance_factor else {
        return true;
    };
    let weights: Vec<u64> = (0..be.servers.len())
        .map(|k| {
            let usable = !be.servers[k].backup && st.servers[k].usable();
            if usable {
                u64::from(st.servers[k].effective_weight())
            } else {
                0
            }
        })
        .collect();
    let total: u64 = weights.iter().sum();
    if total == 0 {
        return true;
    }
    let slots_total = ((st.in_flight() as u64 + 1) * u64::from(factor)).div_ceil(100);
    let (per_weight, rest) = (slots_total / total, slots_total % total);
    let before: u64 = weights[..i].iter().sum();
    let w = weights[i];
    let slots = (w * per_weight + (before + w) * rest / total - before * rest / total).max(1);
    (st.servers[i].in_flight.load(Ordering::Relaxed) as u64) < slots
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
    f: impl FnOnce(&LbTable) -> R,
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
        let built = Arc::new(build_table(be, st));
        let mut s = st.lb.schedule.write().unwrap_or_else(|e| e.into_inner());
        *s = (gen, built.clone());
        built
    });
    *mine = Some((gen, schedule.clone()));
    drop(cache);
    f(&schedule)
}

/// The table of the backend's algorithm over its usable active servers' live weights.
fn build_table(be: &Backend, st: &BackendState) -> LbTable {
    let weights: Vec<u32> = be
        .servers
        .iter()
        .zip(st.servers.iter())
        .map(|(c, s)| {
            if c.backup || !s.usable() {
                0
            } else {
                s.effective_weight()
            }
        })
        .collect();
    if !be.algo.hashes() {
        return LbTable {
            servers: smooth_schedule(&weights).into(),
            keys: Box::default(),
        };
    }
    if be.hash.consistent {
        return hash_ring(be, &weights);
    }
    LbTable {
        servers: weight_map(be, &weights).into(),
        keys: Box::default(),
    }
}

/// HAProxy's scale of a server weight in its tables (`BE_WEIGHT_SCALE`).
const WEIGHT_SCALE: u32 = 16;

/// HAProxy's map for `hash-type map-based`: each server's weight scaled by 16 and divided by
/// the greatest common divisor of the configured weights; then, slot by slot, every server
/// earns its weight and the richest (the first on a tie) takes the slot and pays the total.
fn weight_map(be: &Backend, weights: &[u32]) -> Vec<usize> {
    let gcd = be
        .servers
        .iter()
        .map(|s| s.weight)
        .filter(|&w| w > 0)
        .fold(0u32, |a, b| {
            let (mut a, mut b) = (a, b);
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        })
        .max(1);
    let scaled: Vec<i64> = weights
        .iter()
        .map(|&w| i64::from((w * WEIGHT_SCALE).div_ceil(gcd)))
        .collect();
    let total: i64 = scaled.iter().sum();
    let mut score = vec![0i64; scaled.len()];
    let mut map = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best: Option<(usize, i64)> = None;
        for (i, &w) in scaled.iter().enumerate() {
            if w == 0 {
                continue;
            }
            score[i] += w;
            let v = (score[i] + total) / total;
            if best.is_none_or(|(_, max)| v > max) {
                best = Some((i, v));
            }
        }
        if let Some((i, _)) = best {
            map.push(i);
            score[i] -= total;
        }
    }
    map
}

/// HAProxy's ring for `hash-type consistent`: a server of id N and weight W owns the points
/// `avalanche(N * 4096 + j)` for j below W * 16.
fn hash_ring(be: &Backend, weights: &[u32]) -> LbTable {
    let mut points: Vec<(u32, usize)> = Vec::new();
    for (i, (srv, &w)) in be.servers.iter().zip(weights).enumerate() {
        for j in 0..w * WEIGHT_SCALE {
            let key = srv.id.wrapping_mul(256 * WEIGHT_SCALE).wrapping_add(j);
            points.push((hash::avalanche(key), i));
        }
    }
    points.sort_by_key(|&(k, _)| k);
    LbTable {
        servers: points.iter().map(|&(_, i)| i).collect(),
        keys: points.iter().map(|&(k, _)| k).collect(),
    }
}

/// The static map of `static-rr`: configured weights, built once.
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
    with_schedule(be, st, lb, |t| walk(&t.servers, st))
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
    let best = with_schedule(be, st, lb, |t| {
        let map = &t.servers;
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
                port: Default::default(),
                unix: None,
                fqdn: None,
                unresolved: false,
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
            target: b"/x",
            extra: None,
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
    fn a_batch_publishes_its_changes_once_and_picks_stay_on_usable_servers() {
        let (be, st) = backend(Algo::RoundRobin, &[(1, false, false), (1, false, false)]);
        let lb = LbCache::default();
        assert_eq!(picks(&be, &st, &lb, 10), [5, 5]);
        let before = st.lb.generation.load(Ordering::Relaxed);
        let batch = st.lb.batch();
        st.set_weight(0, 3);
        st.set_unresolved(1, true);
        assert_eq!(
            st.lb.generation.load(Ordering::Relaxed),
            before,
            "held back"
        );
        // The old schedule still serves, without the server that left.
        assert_eq!(picks(&be, &st, &lb, 10), [10, 0]);
        st.set_unresolved(1, false);
        let nested = st.lb.batch();
        drop(batch);
        assert_eq!(st.lb.generation.load(Ordering::Relaxed), before);
        drop(nested);
        assert_eq!(st.lb.generation.load(Ordering::Relaxed), before + 1);
        assert_eq!(picks(&be, &st, &lb, 100), [75, 25]);
        drop(st.lb.batch());
        assert_eq!(
            st.lb.generation.load(Ordering::Relaxed),
            before + 1,
            "nothing changed"
        );
        st.set_weight(0, 1);
        assert_eq!(st.lb.generation.load(Ordering::Relaxed), before + 2);
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
    fn keys_as_haproxy_takes_them() {
        let u = |len, depth, whole, path_only| UriOpts {
            len,
            depth,
            whole,
            path_only,
        };
        assert_eq!(uri_key(b"/a/b/c?x=1", &u(0, 0, false, false)), b"/a/b/c");
        assert_eq!(uri_key(b"/a/b/c?x=1", &u(0, 0, true, false)), b"/a/b/c?x=1");
        assert_eq!(uri_key(b"/a/b/c?x=1", &u(0, 2, false, false)), b"/a/b");
        assert_eq!(uri_key(b"/a/b/c?x=1", &u(3, 0, false, false)), b"/a/");
        assert_eq!(uri_key(b"http://h/p?q", &u(0, 0, false, true)), b"/p");
        assert_eq!(url_param(b"/p?x=1&id=42&y", "id"), Some(&b"42"[..]));
        assert_eq!(url_param(b"/p?xid=1", "id"), None);
        assert_eq!(main_domain(b"www.example.com"), b"example");
        assert_eq!(main_domain(b"localhost"), b"localhost");
    }

    #[test]
    fn haproxy_weight_map() {
        let (be, _) = backend(Algo::Source, &[(1, false, false), (1, false, false)]);
        // Equal weights alternate (each scaled by 16: the pattern repeats 16 times).
        assert_eq!(weight_map(&be, &[1, 1]), [0, 1].repeat(16));
        let (be, _) = backend(Algo::Source, &[(1, false, false), (2, false, false)]);
        assert_eq!(weight_map(&be, &[1, 2])[..3], [0, 1, 1]);
    }

    #[test]
    fn algorithm_names() {
        assert_eq!(parse_algo("random(3)"), Ok(Algo::Random(3)));
        assert_eq!(
            parse_algo("hdr(X-User)"),
            Ok(Algo::Hdr("x-user".into(), false))
        );
        assert!(parse_algo("random(0)").is_err());
        assert!(parse_algo("hdr()").is_err());
        assert!(parse_algo("weighted").is_err());
    }
}
