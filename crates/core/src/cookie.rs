//! Cookie persistence, as HAProxy's: `cookie NAME insert|rewrite|prefix [indirect]
//! [nocache] [postonly] [preserve] [httponly] [secure] [domain D] [attr A]`, the server
//! option `cookie VALUE` and `option persist`.
//!
//! A request whose cookie names a usable server goes to that server (a server that is down
//! only with `option persist`; otherwise the request is balanced and the response gives the
//! client a new cookie). On the way back, the response carries the cookie for the server
//! that answered: inserted by the proxy (`insert`), or the server's own cookie rewritten to
//! the server's value (`rewrite`) or prefixed with it (`prefix`, which requests lose before
//! reaching the server).
//!
//! Everything here is plain functions over the configuration and the request or response
//! bytes; the stream layer calls them while routing and writing heads.

use sluice_config::{Keyword, KwError, Scope};
use sluice_http::{name_is, trim_ows, RequestView};

pub use crate::conf::backend::ServerOption;
pub use crate::conf::cookie::{CookieConf, CookieMode, PersistConf};
use crate::conf::{Backend, ProxyConf};

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "cookie",
        scope: Scope::BE,
        help: "cookie NAME insert|rewrite|prefix [indirect] [nocache] [postonly] [preserve] [httponly] [secure] [domain D] [attr A] [maxidle T] [maxlife T] [dynamic]: cookie persistence",
        parse: |c, a| {
            c.persist.cookie = Some(parse_cookie(a)?);
            Ok(())
        },
    },
    Keyword {
        name: "dynamic-cookie-key",
        scope: Scope::BE,
        help: "dynamic-cookie-key KEY: the secret 'cookie ... dynamic' derives server cookies from",
        parse: |c, a| {
            c.persist.dynamic_key = Some(crate::conf::one_arg(a, "a key")?.to_string());
            Ok(())
        },
    },
];

/// `option persist` (and `no option persist`).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option persist", Scope::BE, "a cookie naming a server that is down still leads to it",
        |c: &mut ProxyConf, on| c.persist.persist = on;
];

/// The server option `cookie VALUE`.
pub const SERVER_OPTIONS: &[ServerOption] = &[ServerOption {
    name: "cookie",
    help: "VALUE: the server's value for the backend's persistence cookie",
    args: 1,
    parse: |o, a| {
        if a[0].is_empty() || !a[0].bytes().all(cookie_octet) {
            return Err(
                "expects a cookie value (no spaces, quotes, commas, semicolons or backslashes)"
                    .into(),
            );
        }
        o.cookie = Some(a[0].clone());
        Ok(())
    },
}];

/// A byte a cookie value may hold (RFC 6265 `cookie-octet`).
fn cookie_octet(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e)
}

fn parse_cookie(a: &[String]) -> Result<CookieConf, KwError> {
    let Some(name) = a.first() else {
        return Err(KwError::Missing("a cookie name"));
    };
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(KwError::bad(1, name, "not a valid cookie name"));
    }
    let mut c = CookieConf {
        name: name.clone(),
        mode: CookieMode::Rewrite,
        indirect: false,
        nocache: false,
        postonly: false,
        preserve: false,
        httponly: false,
        secure: false,
        domains: Vec::new(),
        attrs: Vec::new(),
        maxidle: None,
        maxlife: None,
        dynamic: false,
    };
    let mut mode = None;
    let mut i = 1;
    while i < a.len() {
        let idx = i + 1;
        let value = || {
            a.get(i + 1)
                .cloned()
                .ok_or_else(|| KwError::Invalid(format!("'{}' expects a value", a[i])))
        };
        match a[i].as_str() {
            m @ ("insert" | "rewrite" | "prefix") => {
                if mode.is_some() {
                    return Err(KwError::bad(idx, m, "only one of insert, rewrite and prefix"));
                }
                mode = Some(match m {
                    "insert" => CookieMode::Insert,
                    "rewrite" => CookieMode::Rewrite,
                    _ => CookieMode::Prefix,
                });
            }
            "indirect" => c.indirect = true,
            "nocache" => c.nocache = true,
            "postonly" => c.postonly = true,
            "preserve" => c.preserve = true,
            "httponly" => c.httponly = true,
            "secure" => c.secure = true,
            "domain" => {
                c.domains.push(value()?);
                i += 1;
            }
            "attr" => {
                let v = value()?;
                if v.bytes().any(|b| b < 0x20 || b == b';') {
                    return Err(KwError::bad(idx + 1, &v, "an attribute may not hold ';' or control characters"));
                }
                c.attrs.push(v);
                i += 1;
            }
            o @ ("maxidle" | "maxlife") => {
                let v = value()?;
                let t = sluice_config::units::parse_time(&v)
                    .map_err(|e| KwError::bad(idx + 1, &v, e))?;
                if o == "maxidle" {
                    c.maxidle = Some(t);
                } else {
                    c.maxlife = Some(t);
                }
                i += 1;
            }
            "dynamic" => c.dynamic = true,
            other => {
                return Err(KwError::bad(
                    idx,
                    other,
                    "expects insert, rewrite, prefix, indirect, nocache, postonly, preserve, httponly, secure, domain, attr, maxidle, maxlife or dynamic",
                ))
            }
        }
        i += 1;
    }
    c.mode = mode.unwrap_or(CookieMode::Rewrite);
    Ok(c)
}

/// The values of cookie `name` in a request's Cookie headers.
fn request_values<'a>(req: &RequestView<'a>, name: &str) -> impl Iterator<Item = &'a [u8]> {
    let name = name.as_bytes().to_vec();
    req.headers()
        .filter(|(n, _)| name_is(n, "cookie"))
        .flat_map(|(_, v)| v.split(|&b| b == b';'))
        .filter_map(move |pair| {
            let pair = trim_ows(pair);
            let eq = memchr::memchr(b'=', pair)?;
            (trim_ows(&pair[..eq]) == name.as_slice()).then(|| trim_ows(&pair[eq + 1..]))
        })
}

/// The dates an inserted cookie carries (`maxidle`, `maxlife`), in seconds since the epoch:
/// its last use and its creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CookieDates {
    pub last: Option<u64>,
    pub first: Option<u64>,
}

/// What a request's persistence cookie says, as the third letter of HAProxy's
/// termination state reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieSeen {
    /// `N`: no persistence cookie.
    None,
    /// `I`: a value no server has.
    Invalid,
    /// `E`: its last use is older than `maxidle` (or dated ahead).
    Expired,
    /// `O`: its creation is older than `maxlife`.
    Old,
    /// A server's value (`V` when it was used, `D` when the server was down).
    Server(usize, CookieDates),
}

/// What a request's persistence cookie names (whether or not the server is usable).
pub fn server_of(be: &Backend, c: &CookieConf, req: &RequestView<'_>) -> CookieSeen {
    let now = unix_now();
    let mut seen = CookieSeen::None;
    for v in request_values(req, &c.name) {
        let v = match c.mode {
            // `s1~value`: the server's part is before the tilde.
            CookieMode::Prefix => v.split(|&b| b == b'~').next().unwrap_or(v),
            _ => v,
        };
        let mut parts = v.split(|&b| b == b'|');
        let value = parts.next().unwrap_or(v);
        let dates = CookieDates {
            last: parts.next().and_then(decode_date),
            first: parts.next().and_then(decode_date),
        };
        let too_old = |date: Option<u64>, limit: Option<std::time::Duration>| matches!((date, limit), (Some(d), Some(l)) if now.saturating_sub(d) > l.as_secs() || d > now + 86400);
        let server = be
            .servers
            .iter()
            .position(|s| s.cookie.as_deref().map(str::as_bytes) == Some(value));
        seen = match server {
            None => CookieSeen::Invalid,
            Some(_) if too_old(dates.last, c.maxidle) => CookieSeen::Expired,
            Some(_) if too_old(dates.first, c.maxlife) => CookieSeen::Old,
            Some(i) => return CookieSeen::Server(i, dates),
        };
    }
    seen
}

/// Seconds since the epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const DATE_DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A cookie date as HAProxy writes it: the time in units of 4 seconds, 30 bits in five
/// base64 digits, most significant first (cookies HAProxy set keep working).
fn encode_date(secs: u64) -> String {
    let v = (secs >> 2) as u32;
    (0..5)
        .map(|i| DATE_DIGITS[((v >> (24 - 6 * i)) & 0x3f) as usize] as char)
        .collect()
}

fn decode_date(s: &[u8]) -> Option<u64> {
    if s.len() != 5 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = DATE_DIGITS.iter().position(|&x| x == b)?;
        v = (v << 6) | d as u64;
    }
    Some(v << 2)
}

/// The cookie value `dynamic` derives for a server: XXH64 of the key, the address's bytes
/// and the port (four bytes, network order), in hexadecimal, as HAProxy derives it.
pub fn dynamic_value(key: &str, addr: std::net::SocketAddr) -> String {
    let mut buf = key.as_bytes().to_vec();
    match addr.ip() {
        std::net::IpAddr::V4(ip) => buf.extend_from_slice(&ip.octets()),
        std::net::IpAddr::V6(ip) => buf.extend_from_slice(&ip.octets()),
    }
    buf.extend_from_slice(&u32::from(addr.port()).to_be_bytes());
    format!("{:016x}", xxhash_rust::xxh64::xxh64(&buf, 0))
}

/// The Cookie header the server gets instead of the client's, when persistence changes it:
/// `insert indirect` removes the persistence cookie, `prefix` strips the server's part.
/// `Some(empty)`: no Cookie header is left. `None`: the request's headers go as they are.
pub fn request_cookie_header(c: &CookieConf, req: &RequestView<'_>) -> Option<Vec<u8>> {
    let strip = match c.mode {
        CookieMode::Insert => c.indirect,
        CookieMode::Prefix => true,
        CookieMode::Rewrite => false,
    };
    if !strip || request_values(req, &c.name).next().is_none() {
        return None;
    }
    let mut pairs: Vec<Vec<u8>> = Vec::new();
    for (_, v) in req.headers().filter(|(n, _)| name_is(n, "cookie")) {
        for pair in v.split(|&b| b == b';') {
            let pair = trim_ows(pair);
            if pair.is_empty() {
                continue;
            }
            let eq = memchr::memchr(b'=', pair);
            let is_ours = eq.is_some_and(|e| trim_ows(&pair[..e]) == c.name.as_bytes());
            match (is_ours, c.mode, eq) {
                (false, _, _) => pairs.push(pair.to_vec()),
                (true, CookieMode::Prefix, Some(e)) => {
                    let value = trim_ows(&pair[e + 1..]);
                    if let Some(t) = memchr::memchr(b'~', value) {
                        let mut p = c.name.as_bytes().to_vec();
                        p.push(b'=');
                        p.extend_from_slice(&value[t + 1..]);
                        pairs.push(p);
                    }
                }
                (true, _, _) => {}
            }
        }
    }
    Some(pairs.join(&b"; "[..]))
}

/// What the response to a request does with the persistence cookie, for the server that
/// answered: `server_cookie` is that server's value, `client_had` whether the request's
/// cookie already named it, `post` whether the request was a POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseCookie {
    /// What was done to the response's cookie (the fourth letter of the termination
    /// state), once the head was written.
    outcome: std::cell::Cell<u8>,
    conf: CookieConf,
    server_cookie: String,
    client_had: bool,
    post: bool,
    /// The dates the request's cookie carried.
    dates: CookieDates,
}

impl ResponseCookie {
    pub fn new(
        be: &Backend,
        server: usize,
        client_had: Option<CookieDates>,
        post: bool,
    ) -> Option<ResponseCookie> {
        let conf = be.persist.cookie.clone()?;
        let server_cookie = be.servers.get(server)?.cookie.clone()?;
        Some(ResponseCookie {
            outcome: std::cell::Cell::new(b'N'),
            conf,
            server_cookie,
            client_had: client_had.is_some(),
            post,
            dates: client_had.unwrap_or_default(),
        })
    }

    /// Whether a valid cookie must be sent again for its dates: the last use is behind
    /// (HAProxy dates it a little ahead, in 4-second units), or the creation date must
    /// appear or go.
    fn dates_stale(&self, now: u64) -> bool {
        let c = &self.conf;
        ((c.maxidle.is_some() || self.dates.last.is_some())
            && self.dates.last.is_none_or(|l| l < now))
            || (c.maxlife.is_some() && self.dates.first.is_none())
            || (c.maxlife.is_none() && self.dates.first.is_some())
    }

    /// A `Set-Cookie` value from the server: kept (`None`), removed (`Some(empty)`), or
    /// rewritten. `seen` records that the server set the persistence cookie itself.
    pub fn server_set_cookie(&self, value: &[u8], seen: &mut bool) -> Option<Vec<u8>> {
        let v = trim_ows(value);
        let eq = memchr::memchr(b'=', v)?;
        if trim_ows(&v[..eq]) != self.conf.name.as_bytes() {
            return None;
        }
        *seen = true;
        // `P` unless changed below.
        self.outcome.set(b'P');
        let rest = &v[eq + 1..];
        let (old, attrs) = match memchr::memchr(b';', rest) {
            Some(s) => (&rest[..s], &rest[s..]),
            None => (rest, &b""[..]),
        };
        let mut out = format!("{}=", self.conf.name).into_bytes();
        if self.conf.mode != CookieMode::Insert || !self.conf.preserve {
            self.outcome.set(if self.conf.mode == CookieMode::Insert {
                b'D'
            } else {
                b'R'
            });
        }
        match self.conf.mode {
            CookieMode::Insert if self.conf.preserve => return None,
            CookieMode::Insert => return Some(Vec::new()),
            CookieMode::Rewrite => out.extend_from_slice(self.server_cookie.as_bytes()),
            CookieMode::Prefix => {
                out.extend_from_slice(self.server_cookie.as_bytes());
                out.push(b'~');
                out.extend_from_slice(trim_ows(old));
            }
        }
        out.extend_from_slice(attrs);
        Some(out)
    }

    /// The fourth letter of the termination state: `N` (no cookie), `I` (inserted), `U`
    /// (updated), `P` (the server's, passed), `R` (rewritten), `D` (deleted).
    pub fn outcome(&self) -> u8 {
        self.outcome.get()
    }

    /// The headers the proxy adds (insert mode), once the server's own are known.
    pub fn inserted(&self, server_set_one: bool) -> Vec<(&'static str, Vec<u8>)> {
        let c = &self.conf;
        let now = unix_now();
        if c.mode != CookieMode::Insert
            || (self.client_had && !self.dates_stale(now))
            || (c.postonly && !self.post)
            || (c.preserve && server_set_one)
        {
            return Vec::new();
        }
        // A valid cookie sent again only for its dates is an update.
        self.outcome.set(if self.client_had { b'U' } else { b'I' });
        let mut value = self.server_cookie.clone();
        if c.maxidle.is_some() || c.maxlife.is_some() {
            value.push('|');
            value.push_str(&encode_date(now + 3));
            if c.maxlife.is_some() {
                value.push('|');
                value.push_str(&encode_date(self.dates.first.unwrap_or(now + 3)));
            }
        }
        let mut base = format!("{}={value}; path=/", c.name);
        let mut tail = String::new();
        if c.httponly {
            tail.push_str("; HttpOnly");
        }
        if c.secure {
            tail.push_str("; Secure");
        }
        for a in &c.attrs {
            tail.push_str("; ");
            tail.push_str(a);
        }
        let mut out: Vec<(&'static str, Vec<u8>)> = if c.domains.is_empty() {
            base.push_str(&tail);
            vec![("set-cookie", base.into_bytes())]
        } else {
            c.domains
                .iter()
                .map(|d| {
                    (
                        "set-cookie",
                        format!("{base}; domain={d}{tail}").into_bytes(),
                    )
                })
                .collect()
        };
        if c.nocache {
            out.push(("cache-control", b"private".to_vec()));
        }
        out
    }
}

/// `option checkcache`'s rule, as HAProxy 2.6 applies it: a response to a GET, HEAD,
/// OPTIONS or TRACE (`safe_method`) that carries `Set-Cookie` (or `Set-Cookie2`), whose
/// status is cacheable by default (200, 203, 204, 206, 300, 301, 404, 405, 410, 414,
/// 501), which neither `Pragma: no-cache` nor its `Cache-Control` (`private`, `no-cache`,
/// `no-store`, `max-age=0`, `s-maxage=0`, `no-cache="set-cookie..."`; `public` allows again)
/// keeps out of shared caches, and which a cache would store (an age, `Expires`, `ETag` or
/// `Last-Modified`).
pub fn cacheable_cookie(rsp: &sluice_http::ResponseView<'_>, safe_method: bool) -> bool {
    use sluice_http::{name_is, trim_ows};
    let cacheable_status = matches!(
        rsp.status(),
        200 | 203 | 204 | 206 | 300 | 301 | 404 | 405 | 410 | 414 | 501
    );
    let cookie = rsp
        .headers()
        .any(|(n, _)| name_is(n, "set-cookie") || name_is(n, "set-cookie2"));
    if !(safe_method && cacheable_status && cookie) {
        return false;
    }
    if rsp
        .header("pragma")
        .is_some_and(|v| trim_ows(v).eq_ignore_ascii_case(b"no-cache"))
    {
        return false;
    }
    let starts = |v: &[u8], p: &[u8]| v.len() >= p.len() && v[..p.len()].eq_ignore_ascii_case(p);
    let (mut cacheable, mut with_cookie, mut fresh) = (true, true, false);
    let values = rsp
        .headers()
        .filter(|(n, _)| name_is(n, "cache-control"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .map(trim_ows);
    for v in values {
        let is = |word: &[u8]| v.eq_ignore_ascii_case(word);
        if is(b"public") {
            (cacheable, with_cookie) = (true, true);
        } else if is(b"private")
            || is(b"no-cache")
            || is(b"no-store")
            || is(b"max-age=0")
            || is(b"s-maxage=0")
        {
            (cacheable, with_cookie) = (false, false);
        } else if starts(v, b"no-cache=\"set-cookie") {
            with_cookie = false;
        } else if starts(v, b"s-maxage") || starts(v, b"max-age") {
            fresh = true;
        }
    }
    let kept = fresh
        || rsp.header("expires").is_some()
        || rsp.header("etag").is_some()
        || rsp.header("last-modified").is_some();
    cacheable && with_cookie && kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(line: &str) -> Result<CookieConf, KwError> {
        let w: Vec<String> = line.split_whitespace().map(String::from).collect();
        parse_cookie(&w)
    }

    #[test]
    fn cookie_lines() {
        let c = conf("SRV insert indirect nocache httponly domain .a.test").unwrap();
        assert_eq!(c.mode, CookieMode::Insert);
        assert!(c.indirect && c.nocache && c.httponly);
        assert_eq!(c.domains, vec![".a.test".to_string()]);
        assert_eq!(conf("SRV").unwrap().mode, CookieMode::Rewrite);
        assert!(conf("SRV insert rewrite").is_err());
        let c = conf("SRV insert maxidle 30m maxlife 8h dynamic").unwrap();
        assert_eq!(c.maxidle, Some(std::time::Duration::from_secs(1800)));
        assert!(c.dynamic && c.maxlife.is_some());
        assert!(conf("S;V insert").is_err());
    }

    #[test]
    fn server_cookies_are_rewritten_by_mode() {
        let rc = |line: &str| ResponseCookie {
            conf: conf(line).unwrap(),
            server_cookie: "s1".into(),
            client_had: false,
            post: false,
            dates: CookieDates::default(),
            outcome: std::cell::Cell::new(b'N'),
        };
        let mut seen = false;
        assert_eq!(
            rc("SRV rewrite").server_set_cookie(b"SRV=abc; path=/", &mut seen),
            Some(b"SRV=s1; path=/".to_vec())
        );
        assert!(seen);
        assert_eq!(
            rc("JSESSIONID prefix").server_set_cookie(b"JSESSIONID=xyz", &mut seen),
            Some(b"JSESSIONID=s1~xyz".to_vec())
        );
        assert_eq!(
            rc("SRV insert").server_set_cookie(b"SRV=x", &mut seen),
            Some(Vec::new())
        );
        assert_eq!(
            rc("SRV insert preserve").server_set_cookie(b"SRV=x", &mut seen),
            None
        );
        let mut other = false;
        assert_eq!(
            rc("SRV rewrite").server_set_cookie(b"OTHER=1", &mut other),
            None
        );
        assert!(!other);
        let ins = rc("SRV insert nocache secure").inserted(false);
        assert_eq!(ins[0].1, b"SRV=s1; path=/; Secure");
        assert_eq!(ins[1], ("cache-control", b"private".to_vec()));
        assert!(rc("SRV insert postonly").inserted(false).is_empty());
    }

    #[test]
    fn dates_and_dynamic_values_are_haproxys() {
        // HAProxy's own encoding of 393463510 (in 4-second units) is "Xc8bW".
        assert_eq!(encode_date(393463510 << 2), "Xc8bW");
        assert_eq!(decode_date(b"Xc8bV"), Some(393463509 << 2));
        assert_eq!(decode_date(b"Xc8b"), None);
        let v = dynamic_value("secret", "192.0.2.1:80".parse().unwrap());
        assert_eq!(v.len(), 16);
        assert_ne!(v, dynamic_value("secret", "192.0.2.1:81".parse().unwrap()));
    }
}
