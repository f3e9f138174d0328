//! Choosing a server before balancing: `use-server` rules, the persistence cookie
//! (`cookie`), and stick-table persistence, as HAProxy's `stick` rules: `stick match` sends a request
//! whose key has an entry to the server the entry names, `stick store-request` and
//! `stick store-response` make the key's entry name the server that served the request,
//! and `stick on` does both.
//!
//! Invariants:
//! - A table a `stick` rule uses stores `server_id` (added when the configuration is
//!   loaded): entries name servers by their `id`, which reloads keep.
//! - `use-server` wins over the cookie, the cookie over `stick match`; the first matching
//!   rule with a usable server wins (a server that is down only with `option persist` or
//!   `force-persist`); `ignore-persist` leaves the cookie and the tables out.
//! - Keys are stored once the server is known, when its response head arrives, and only
//!   the first key of each table is kept per request, as HAProxy keeps at most one.

use std::sync::Arc;

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::cookie::{StickKind, StickRule};
use crate::conf::{Backend, ProxyConf};
use crate::cookie::CookieSeen;
use crate::runtime::BackendState;
use crate::sample::Ctx;
use crate::stick::{Counter, Key, Table};

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "persist",
        scope: Scope::BE,
        help: "persist rdp-cookie[(NAME)]: a TCP connection goes to the server its RDP cookie (msts by default) names, while it is up",
        parse: |c, a| {
            let v = crate::conf::one_arg(a, "rdp-cookie or rdp-cookie(NAME)")?;
            let name = match v.strip_prefix("rdp-cookie") {
                Some("") => "msts",
                Some(rest) => rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| KwError::bad(1, v, "expects rdp-cookie or rdp-cookie(NAME)"))?,
                None => return Err(KwError::bad(1, v, "expects rdp-cookie or rdp-cookie(NAME)")),
            };
            c.persist.rdp_cookie = Some(name.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "stick",
        scope: Scope::BACKEND,
        help: "stick on|match|store-request|store-response EXPR [table T] [if|unless COND]: stick-table persistence",
        parse: |c, a| {
            let rule = parse_stick(c, a)?;
            c.persist.stick.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "use-server",
        scope: Scope::BACKEND,
        help: "use-server NAME [if|unless COND]: send matching requests to this server (while it is up)",
        parse: |c, a| {
            let Some(name) = a.first() else {
                return Err(KwError::Missing("a server name"));
            };
            let cond = crate::acl::parse_cond(&c.rules, &a[1..], 2)?;
            c.persist
                .use_server
                .push((crate::conf::sample::NameRef::new(name.clone()), cond));
            Ok(())
        },
    },
    Keyword {
        name: "force-persist",
        scope: Scope::BACKEND,
        help: "force-persist if|unless COND: persistence may lead matching requests to a server that is down",
        parse: |c, a| {
            let cond = crate::acl::parse_cond(&c.rules, a, 1)?
                .ok_or(KwError::Missing("a condition (if|unless COND)"))?;
            c.persist.force.push(cond);
            Ok(())
        },
    },
    Keyword {
        name: "ignore-persist",
        scope: Scope::BACKEND,
        help: "ignore-persist if|unless COND: matching requests are balanced whatever their cookie or table entry says",
        parse: |c, a| {
            let cond = crate::acl::parse_cond(&c.rules, a, 1)?
                .ok_or(KwError::Missing("a condition (if|unless COND)"))?;
            c.persist.ignore.push(cond);
            Ok(())
        },
    },
];

/// The server of the first `use-server` rule whose condition holds and whose server is
/// usable (or, with `option persist` or `force`, whatever its state).
fn forced_server(be: &Backend, st: &BackendState, cx: &Ctx<'_>, force: bool) -> Option<usize> {
    be.persist.use_server.iter().find_map(|(name, cond)| {
        if !crate::acl::holds(cond, cx) {
            return None;
        }
        let i = name.index(&be.servers, |s| &s.name)?;
        (force || be.persist.persist || st.servers[i].usable()).then_some(i)
    })
}

/// `force-persist` / `ignore-persist`: whether a condition of `conds` holds.
fn any_holds(conds: &[crate::conf::acl::Cond], cx: &Ctx<'_>) -> bool {
    conds.iter().any(|c| c.eval(cx))
}

fn parse_stick(c: &ProxyConf, a: &[String]) -> Result<StickRule, KwError> {
    let Some(kind) = a.first() else {
        return Err(KwError::Missing(
            "on, match, store-request or store-response",
        ));
    };
    let kind = match kind.as_str() {
        "on" => StickKind::On,
        "match" => StickKind::Match,
        "store-request" => StickKind::StoreRequest,
        "store-response" => StickKind::StoreResponse,
        other => {
            return Err(KwError::bad(
                1,
                other,
                "expects on, match, store-request or store-response",
            ))
        }
    };
    let cond_at = a
        .iter()
        .position(|w| w == "if" || w == "unless")
        .unwrap_or(a.len());
    let cond = crate::acl::parse_cond(&c.rules, &a[cond_at..], cond_at + 1)?;
    let (key, table) = match &a[1..cond_at] {
        [key] => (key, None),
        [key, kw, t] if kw == "table" => (key, Some(crate::conf::sample::NameRef::new(t.clone()))),
        [] => return Err(KwError::Missing("a key (a sample expression)")),
        [_, other, ..] => return Err(KwError::bad(3, other, "expects 'table NAME'")),
    };
    let key =
        crate::sample::parse_expr(key, &c.rules.book).map_err(|e| KwError::bad(2, key, e.0))?;
    Ok(StickRule {
        kind,
        key,
        table,
        cond,
    })
}

/// The key a rule gives for this request or response, with its table.
fn key_of<'a>(rule: &StickRule, cx: &Ctx<'a>) -> Option<(&'a Arc<Table>, Key)> {
    if !crate::acl::holds(&rule.cond, cx) {
        return None;
    }
    let t = cx.table(rule.table.as_ref())?;
    let k = rule.key.eval(cx)?;
    Some((t, Key::from_sample(&k, t.conf.key)?))
}

/// What persistence decided for a request.
#[derive(Default)]
pub struct Persisted {
    /// The server a `use-server` rule, the cookie or a table entry leads to, if usable.
    pub server: Option<usize>,
    /// The server the request's cookie names (whatever its state), with the cookie's dates.
    pub cookie: Option<(usize, crate::cookie::CookieDates)>,
    /// The third letter of the termination state (`-` without cookie persistence).
    pub cookie_flag: u8,
    /// The keys `stick on|store-request` rules store once the server answers.
    pub stick: Vec<(Arc<Table>, Key)>,
}

/// The server for a request before balancing, in HAProxy's order: `use-server` rules,
/// then the persistence cookie, then `stick match|on` rules (neither with a matching
/// `ignore-persist`; a server that is down only with `option persist` or a matching
/// `force-persist`).
pub fn decide(
    be: &Backend,
    st: &BackendState,
    cx: &Ctx<'_>,
    req: &sluice_http::RequestView<'_>,
) -> Persisted {
    let p = &be.persist;
    if p.cookie.is_none() && p.stick.is_empty() && p.use_server.is_empty() {
        return Persisted {
            cookie_flag: b'-',
            ..Persisted::default()
        };
    }
    let force = any_holds(&p.force, cx);
    let down_ok = force || p.persist;
    let seen = p
        .cookie
        .as_ref()
        .map(|c| crate::cookie::server_of(be, c, req));
    let cookie = match seen {
        Some(CookieSeen::Server(i, dates)) => Some((i, dates)),
        _ => None,
    };
    let stick = if p.stick.is_empty() {
        Vec::new()
    } else {
        keys(be, cx, false)
    };
    let mut server = forced_server(be, st, cx, force);
    if server.is_none() && !any_holds(&p.ignore, cx) {
        server = cookie
            .map(|(i, _)| i)
            .filter(|&i| down_ok || st.servers[i].usable())
            .or_else(|| matched_server(be, st, cx, down_ok));
    }
    let cookie_flag = match seen {
        None => b'-',
        Some(CookieSeen::None) => b'N',
        Some(CookieSeen::Invalid) => b'I',
        Some(CookieSeen::Expired) => b'E',
        Some(CookieSeen::Old) => b'O',
        Some(CookieSeen::Server(i, _)) if server == Some(i) && st.servers[i].usable() => b'V',
        // Its server is down: taken there anyway (`option persist`) or redispatched.
        Some(CookieSeen::Server(i, _)) if !st.servers[i].usable() => b'D',
        Some(CookieSeen::Server(..)) => b'V',
    };
    Persisted {
        server,
        cookie,
        cookie_flag,
        stick,
    }
}

/// The server the request's `stick match|on` rules lead to, if any.
fn matched_server(be: &Backend, st: &BackendState, cx: &Ctx<'_>, down_ok: bool) -> Option<usize> {
    let now = crate::runtime::clock_ms();
    be.persist
        .stick
        .iter()
        .filter(|r| r.kind.matches())
        .find_map(|r| {
            let (t, k) = key_of(r, cx)?;
            let entry = t.lookup(&k, now)?;
            let id = entry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(Counter::ServerId, now)?;
            // (A deleted server's id may have been given to a server added since.)
            let (i, _, sst) = st.live(be).find(|(_, s, _)| u64::from(s.id) == id)?;
            (down_ok || sst.usable()).then_some(i)
        })
}

/// What a request's `stick on|store-request` (`response: false`) or a response's `stick
/// store-response` rules will store: one key per table.
pub fn keys(be: &Backend, cx: &Ctx<'_>, response: bool) -> Vec<(Arc<Table>, Key)> {
    let mut out: Vec<(Arc<Table>, Key)> = Vec::new();
    let wanted = |k: StickKind| {
        if response {
            k == StickKind::StoreResponse
        } else {
            k.stores_request()
        }
    };
    for r in be.persist.stick.iter().filter(|r| wanted(r.kind)) {
        if let Some((t, k)) = key_of(r, cx) {
            if !out.iter().any(|(o, _)| Arc::ptr_eq(o, t)) {
                out.push((t.clone(), k));
            }
        }
    }
    out
}

/// The keys' entries now name server `id`.
pub fn store(keys: &[(Arc<Table>, Key)], id: u32) {
    let now = crate::runtime::clock_ms();
    for (t, k) in keys {
        if let Some(e) = t.touch(k.clone(), now) {
            let mut e = e.lock().unwrap_or_else(|e| e.into_inner());
            e.set(Counter::ServerId, u64::from(id));
            t.changed(k, &mut e);
        }
    }
}

/// `persist rdp-cookie`: the server a TCP connection's RDP cookie names, as HAProxy
/// decodes it (`IP.PORT.REST`: the IPv4 address and the port as their network-order
/// bytes read as little-endian integers, in decimal), when that server is up (or `option
/// persist`).
pub fn rdp_server(be: &Backend, st: &BackendState, data: &[u8]) -> Option<usize> {
    let name = be.persist.rdp_cookie.as_deref()?;
    let value = crate::balance::rdp_cookie(data, name)?;
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(3, '.');
    let addr: u32 = parts.next()?.parse().ok()?;
    let port = parts.next()?.parse::<u32>().ok()?;
    parts.next()?;
    let ip = std::net::Ipv4Addr::from(addr.to_le_bytes());
    // (`ntohs` of the number as HAProxy reads it: its low 16 bits, bytes swapped.)
    let port = (port as u16).swap_bytes();
    let target = std::net::SocketAddr::from((ip, port));
    be.servers
        .iter()
        .position(|s| s.addr == target)
        .filter(|&i| st.servers[i].usable() || be.persist.persist)
}
