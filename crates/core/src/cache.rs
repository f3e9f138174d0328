//! HAProxy's small object cache: `cache NAME` sections, what is cacheable and for how
//! long, and the store shared by every worker.
//!
//! The rules are HAProxy 2.6's (its configuration manual, section 6, and its code's
//! behaviour): a request is looked up by a hash of `https://` + Host + URI (or its absolute
//! URI); only GET and HEAD over HTTP/1.1 or later are served, and not with `Authorization`,
//! `Cache-Control: no-cache|max-age|max-stale|min-fresh` or, without `Cache-Control`,
//! `Pragma: no-cache`. A response is stored when it is a 200 to a GET, is not `private`,
//! `no-cache`, `no-store`, `max-age=0`, `s-maxage=0` nor `Pragma: no-cache`, has an
//! expiration (`s-maxage`, `max-age`, `Expires`) or a validator (`ETag`,
//! `Last-Modified`), fits `max-object-size`, and has no `Vary` (or, with `process-vary on`,
//! one naming only `accept-encoding` and `referer`). It is served for the least of its own
//! max age and the cache's `max-age`, with an `Age` field; a conditional request
//! (`If-None-Match`, else `If-Modified-Since`) that the object satisfies gets a 304. A
//! successful unsafe request (PUT, POST, DELETE, ...) drops the object of its URI.
//!
//! Invariants:
//! - The bytes held (heads, bodies and a fixed overhead per object) never exceed
//!   `total-max-size`: room is reserved before an object is inserted, by evicting the
//!   oldest objects first, as HAProxy's cache does.
//! - A lookup takes the read lock of one shard of sixteen, chosen by the key: workers never
//!   wait on each other to serve hits, and an insertion blocks only the hits of its shard.
//! - Only complete objects are stored: a response is captured while it is relayed and
//!   inserted once whole.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use sluice_config::{ConfigError, Section};
use sluice_http::{name_is, RequestView, Version};

pub use crate::conf::cache::{CacheConf, CacheRef};

/// HAProxy's limit on `total-max-size`, in megabytes.
const MAX_TOTAL_MB: usize = 4095;
/// What an object costs beside its head and body (HAProxy counts blocks of 1 kB; this is
/// sluice's bookkeeping per object).
const OVERHEAD: usize = 128;
const SHARDS: usize = 16;

/// Reads a `cache NAME` section.
pub fn parse_section(section: &Section, errors: &mut Vec<ConfigError>) -> Option<CacheConf> {
    let name = section.name.clone().unwrap_or_default();
    if name.is_empty() {
        errors.push(section.header.error("'cache' expects a <name> argument"));
        return None;
    }
    let mut total_mb = None;
    let mut conf = CacheConf {
        name,
        total_max_size: 0,
        max_object_size: 0,
        max_age: 60,
        process_vary: false,
        max_secondary_entries: 10,
    };
    for line in &section.lines {
        let w = &line.words;
        let value = match w.as_slice() {
            [_, v] => v.as_str(),
            [kw] => {
                errors.push(line.error(format!("'{kw}' expects a value")));
                continue;
            }
            [kw, ..] => {
                errors.push(line.error(format!("'{kw}' expects one value")));
                continue;
            }
            [] => continue,
        };
        let number = |what: &str| {
            value
                .parse::<usize>()
                .map_err(|_| line.error(format!("{what} wrong value '{value}'")))
        };
        let result = match w[0].as_str() {
            "total-max-size" => number("total-max-size").and_then(|mb| match mb {
                0 => Err(line.error("total-max-size must be at least 1 (megabyte)")),
                mb if mb > MAX_TOTAL_MB => Err(line.error(format!(
                    "\"total-max-size\" ({mb}) must not be greater than {MAX_TOTAL_MB}"
                ))),
                mb => {
                    total_mb = Some(mb);
                    Ok(())
                }
            }),
            "max-object-size" => number("max-object-size").map(|n| conf.max_object_size = n),
            "max-age" => number("max-age").map(|n| conf.max_age = n.min(u32::MAX as usize) as u32),
            "process-vary" => match value {
                "on" | "off" => {
                    conf.process_vary = value == "on";
                    Ok(())
                }
                _ => Err(line.error(
                    "'process-vary' expects \"on\" or \"off\" (enable or disable vary processing)",
                )),
            },
            "max-secondary-entries" => match number("max-secondary-entries") {
                Ok(0) => Err(line.error("max-secondary-entries wrong value '0'")),
                other => other.map(|n| conf.max_secondary_entries = n),
            },
            other => Err(line.error(format!("unknown keyword '{other}' in 'cache' section"))),
        };
        if let Err(e) = result {
            errors.push(e);
        }
    }
    let Some(mb) = total_mb else {
        errors.push(section.header.error(format!(
            "Size not specified for cache '{}' (total-max-size)",
            conf.name
        )));
        return None;
    };
    conf.total_max_size = mb * 1024 * 1024;
    if conf.max_object_size == 0 {
        conf.max_object_size = conf.total_max_size / 256;
    } else if conf.max_object_size > conf.total_max_size / 2 {
        errors.push(section.header.error(format!(
            "\"max-object-size\" is limited to an half of \"total-max-size\" => {}",
            conf.total_max_size / 2
        )));
        return None;
    }
    Some(conf)
}

/// An object's primary key: the SHA-1 of its absolute URI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(pub [u8; 20]);

impl Key {
    /// HAProxy's key: the absolute URI when the request has one, else `https://` + Host +
    /// the URI, so that HTTP/1 and HTTP/2 clients share objects (`None`: no Host).
    pub fn of(req: &RequestView<'_>) -> Option<Key> {
        let target = req.target();
        if target.is_empty() {
            return None;
        }
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
        if !(target.starts_with(b"http://") || target.starts_with(b"https://")) {
            ctx.update(b"https://");
            ctx.update(req.header("host")?);
        }
        ctx.update(target);
        let mut k = [0u8; 20];
        k.copy_from_slice(ctx.finish().as_ref());
        Some(Key(k))
    }

    /// The number `show cache` prints for it (its first four bytes, as HAProxy reads them).
    pub fn short(&self) -> u32 {
        u32::from_ne_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }

    fn shard(&self) -> usize {
        self.0[4] as usize % SHARDS
    }
}

/// What a request allows of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPolicy {
    /// Not served from the cache (nor its response stored).
    pub ignore: bool,
    /// Its response may be stored (`no-store` and `Authorization` forbid it).
    pub storable: bool,
}

/// HAProxy's reading of a request: only GET and HEAD over HTTP/1.1 or later are looked up;
/// `Authorization`, `Cache-Control: max-age|no-cache|max-stale|min-fresh` (or, without
/// `Cache-Control`, `Pragma: no-cache`) skip the cache; `no-store` forbids storing.
pub fn request_policy(req: &RequestView<'_>) -> RequestPolicy {
    let method = req.method();
    let mut p = RequestPolicy {
        ignore: req.version() == Version::Http10 || !(method == b"GET" || method == b"HEAD"),
        storable: matches!(method, b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE"),
    };
    let (mut pragma, mut cache_control) = (false, false);
    for (name, value) in req.headers() {
        if name_is(name, "authorization") {
            p.storable = false;
            p.ignore = true;
        } else if name_is(name, "pragma") {
            pragma |= value.trim_ascii().eq_ignore_ascii_case(b"no-cache");
        } else if name_is(name, "cache-control") {
            cache_control = true;
            for d in directives(value) {
                if ["max-age", "no-cache", "max-stale", "min-fresh"]
                    .iter()
                    .any(|w| starts_with_ci(d, w.as_bytes()))
                {
                    p.ignore = true;
                } else if starts_with_ci(d, b"no-store") {
                    p.storable = false;
                }
            }
        }
    }
    if pragma && !cache_control {
        p.ignore = true;
    }
    p
}

/// The directives of a `Cache-Control` value, trimmed.
fn directives(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|d| !d.is_empty())
}

fn starts_with_ci(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// What `cache-use` learnt of a request, for `cache-store` on its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub key: Key,
    pub policy: RequestPolicy,
    /// The request's fields `Vary` may name (`None`: the cache does not process `Vary`).
    pub vary: Option<VaryInput>,
    pub method: Method,
}

/// What a request's method means to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET: its 200 response may be stored.
    Get,
    /// HEAD, OPTIONS, TRACE: safe, nothing stored.
    Safe,
    /// Any other: a successful answer drops the stored object (RFC 7234 4.4).
    Unsafe,
}

impl Lookup {
    pub fn of(req: &RequestView<'_>, process_vary: bool) -> Option<Lookup> {
        Some(Lookup {
            key: Key::of(req)?,
            policy: request_policy(req),
            vary: process_vary.then(|| VaryInput::of(req)),
            method: match req.method() {
                b"GET" => Method::Get,
                b"HEAD" | b"OPTIONS" | b"TRACE" => Method::Safe,
                _ => Method::Unsafe,
            },
        })
    }
}

/// The request fields a response may vary on, kept from the request when the cache
/// processes `Vary`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VaryInput {
    /// The encodings the client accepts (lower case, those with `q=0` left out; `None`:
    /// no `Accept-Encoding`).
    pub accepts: Option<Vec<Vec<u8>>>,
    pub referer: Option<Vec<u8>>,
}

impl VaryInput {
    pub fn of(req: &RequestView<'_>) -> VaryInput {
        let mut v = VaryInput::default();
        for (name, value) in req.headers() {
            if name_is(name, "accept-encoding") {
                let list = v.accepts.get_or_insert_with(Vec::new);
                for item in value.split(|&b| b == b',') {
                    let mut parts = item.split(|&b| b == b';');
                    let coding = parts.next().unwrap_or_default().trim_ascii();
                    let refused = parts.any(|p| {
                        let p = p.trim_ascii();
                        starts_with_ci(p, b"q=") && p[2..].iter().all(|&c| c == b'0' || c == b'.')
                    });
                    if !coding.is_empty() && !refused {
                        list.push(coding.to_ascii_lowercase());
                    }
                }
            } else if name_is(name, "referer") {
                v.referer = Some(value.to_vec());
            }
        }
        v
    }

    /// Whether the client accepts a response in `encoding` (`None`: identity).
    fn accepts(&self, encoding: Option<&[u8]>) -> bool {
        let Some(coding) = encoding else {
            return true;
        };
        match &self.accepts {
            Some(list) => list.iter().any(|a| a == coding || a == b"*"),
            None => false,
        }
    }
}

/// Which variant of an object a stored response is: the request fields its `Vary` names,
/// with the value they had (for `accept-encoding`, the response's own encoding, which any
/// client accepting it may get).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Variant {
    /// `None`: the response does not vary on `Accept-Encoding`.
    pub encoding: Option<Option<Vec<u8>>>,
    pub referer: Option<Option<Vec<u8>>>,
}

impl Variant {
    fn serves(&self, req: &VaryInput) -> bool {
        self.encoding
            .as_ref()
            .is_none_or(|e| req.accepts(e.as_deref()))
            && self.referer.as_ref().is_none_or(|r| *r == req.referer)
    }

    /// A few bytes standing for it in `show cache` (HAProxy prints its secondary key).
    fn signature(&self) -> [u8; 8] {
        let mut h = [0u8; 8];
        if let Some(e) = &self.encoding {
            h[..4].copy_from_slice(&crc(e.as_deref().unwrap_or(b"identity")).to_be_bytes());
        }
        if let Some(r) = &self.referer {
            h[4..].copy_from_slice(&crc(r.as_deref().unwrap_or_default()).to_be_bytes());
        }
        h
    }
}

fn crc(b: &[u8]) -> u32 {
    crc32fast::hash(b)
}

/// Content codings IANA registers: a response varying on `Accept-Encoding` in another one
/// is not stored (HAProxy's rule).
const KNOWN_CODINGS: &[&[u8]] = &[
    b"aes128gcm",
    b"br",
    b"compress",
    b"deflate",
    b"exi",
    b"gzip",
    b"identity",
    b"pack200-gzip",
    b"x-compress",
    b"x-gzip",
    b"zstd",
];

/// Why and for how long a response is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Seconds it is served for: its own max age, capped by the cache's.
    pub max_age: u64,
    /// Its `Age` when it arrived.
    pub age: u64,
    pub etag: Option<Vec<u8>>,
    /// Its `Last-Modified` (Unix seconds).
    pub last_modified: Option<u64>,
    pub variant: Variant,
}

/// Whether a 200 response to a GET may be stored, as HAProxy decides; `now` in Unix
/// seconds. `req` is what the request said of the fields `Vary` may name (`None`: the
/// cache does not process `Vary`).
pub fn admit<'a>(
    conf: &CacheConf,
    status: u16,
    headers: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    req: &Lookup,
    now: u64,
) -> Option<Admission> {
    if status != 200 || req.method != Method::Get || req.policy.ignore {
        return None;
    }
    let find = |n: &str| headers.clone().find(|(k, _)| name_is(k, n)).map(|(_, v)| v);
    let all = |n: &'static str| headers.clone().filter(move |(k, _)| name_is(k, n));
    if find("pragma").is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"no-cache")) {
        return None;
    }
    let (mut s_maxage, mut max_age, mut fresh) = (None, None, false);
    // `public` makes storable what the request alone would not be (`no-store`).
    let mut storable = req.policy.storable;
    for (_, value) in all("cache-control") {
        for d in directives(value) {
            let lower = d.to_ascii_lowercase();
            match lower.as_slice() {
                b"private" | b"no-cache" | b"no-store" | b"max-age=0" | b"s-maxage=0" => {
                    return None
                }
                b"public" => storable = true,
                _ => {}
            }
            for (name, slot) in [("s-maxage=", &mut s_maxage), ("max-age=", &mut max_age)] {
                if let Some(v) = lower.strip_prefix(name.as_bytes()) {
                    fresh = true;
                    let v = v.strip_prefix(b"\"").unwrap_or(v);
                    let digits = v.iter().take_while(|c| c.is_ascii_digit()).count();
                    // A value that is not a number makes the response uncacheable.
                    *slot = Some(
                        std::str::from_utf8(&v[..digits])
                            .ok()?
                            .parse::<u64>()
                            .ok()?,
                    );
                }
            }
        }
    }
    let expires = match find("expires") {
        Some(v) if !fresh => {
            fresh = true;
            // An invalid date stands for one in the past (RFC 7234 5.3).
            Some(http_date(v).map_or(0, |t| t.saturating_sub(now)))
        }
        _ => None,
    };
    if !storable {
        return None;
    }
    let etag = find("etag").map(<[u8]>::to_vec);
    let last_modified = find("last-modified").and_then(http_date);
    if !fresh && etag.is_none() && find("last-modified").is_none() {
        return None;
    }
    let own = s_maxage
        .filter(|&n| n > 0)
        .or(max_age.filter(|&n| n > 0))
        .or(expires);
    let age = match find("age") {
        None => 0,
        Some(v) => std::str::from_utf8(v.trim_ascii())
            .ok()?
            .parse::<u64>()
            .ok()?,
    };
    // Already stale when it arrived.
    if own.is_some_and(|m| age > m) {
        return None;
    }
    let variant = match find("vary") {
        None => Variant::default(),
        Some(_) => variant(all("vary"), req.vary.as_ref()?, find("content-encoding"))?,
    };
    Some(Admission {
        max_age: own.map_or(u64::from(conf.max_age), |m| m.min(u64::from(conf.max_age))),
        age,
        etag,
        last_modified: last_modified.or(http_date_of(find("date"))),
        variant,
    })
}

fn http_date_of(v: Option<&[u8]>) -> Option<u64> {
    v.and_then(http_date)
}

/// The variant a response with `Vary` is: only `accept-encoding` and `referer` are
/// understood (`None`: another field, or an encoding that is not registered).
fn variant<'a>(
    vary: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    req: &VaryInput,
    encoding: Option<&[u8]>,
) -> Option<Variant> {
    let mut v = Variant::default();
    for (_, value) in vary {
        for field in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if field.eq_ignore_ascii_case(b"accept-encoding") {
                let coding = encoding.map(|e| e.trim_ascii().to_ascii_lowercase());
                if coding
                    .as_ref()
                    .is_some_and(|c| !KNOWN_CODINGS.contains(&c.as_slice()))
                {
                    return None;
                }
                v.encoding = Some(coding.filter(|c| c != b"identity"));
            } else if field.eq_ignore_ascii_case(b"referer") {
                v.referer = Some(req.referer.clone());
            } else if !field.is_empty() {
                return None;
            }
        }
    }
    Some(v)
}

/// An HTTP date (IMF-fixdate, RFC 850 or asctime) in Unix seconds.
pub fn http_date(v: &[u8]) -> Option<u64> {
    let t = httpdate::parse_http_date(std::str::from_utf8(v).ok()?.trim()).ok()?;
    t.duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// A stored response.
#[derive(Debug)]
pub struct Entry {
    pub key: Key,
    pub variant: Variant,
    /// Status line and fields, without framing and hop-by-hop fields nor `Age`.
    pub head: Box<[u8]>,
    pub body: Box<[u8]>,
    /// When it was stored (Unix seconds), and its `Age` then.
    pub stored: u64,
    pub age: u64,
    /// When it stops being served (Unix seconds).
    pub expires: u64,
    pub etag: Option<Box<[u8]>>,
    pub last_modified: Option<u64>,
    /// Its place in the order of insertion (oldest evicted first).
    seq: u64,
}

impl Entry {
    pub fn new(key: Key, head: Vec<u8>, body: Vec<u8>, a: Admission, now: u64) -> Entry {
        Entry {
            key,
            variant: a.variant,
            head: head.into(),
            body: body.into(),
            stored: now,
            age: a.age,
            expires: now + a.max_age,
            etag: a.etag.map(Into::into),
            last_modified: a.last_modified,
            seq: 0,
        }
    }

    /// What it takes of the cache's size.
    pub fn size(&self) -> usize {
        self.head.len() + self.body.len() + OVERHEAD
    }

    /// Its `Age` field now.
    pub fn age_at(&self, now: u64) -> u64 {
        self.age + now.saturating_sub(self.stored)
    }

    /// Whether a request's conditions are met by this object, so a 304 answers it:
    /// `If-None-Match` (`*` or a weakly equal tag), else `If-Modified-Since` no earlier
    /// than its last modification.
    pub fn not_modified(&self, req: &RequestView<'_>) -> bool {
        let mut saw_inm = false;
        for (name, value) in req.headers() {
            if !name_is(name, "if-none-match") {
                continue;
            }
            saw_inm = true;
            if value.trim_ascii() == b"*" {
                return true;
            }
            let Some(etag) = &self.etag else {
                return false;
            };
            let weak = |t: &[u8]| -> Vec<u8> {
                let t = t.trim_ascii();
                t.strip_prefix(b"W/").unwrap_or(t).to_vec()
            };
            if value.split(|&b| b == b',').any(|t| weak(t) == weak(etag)) {
                return true;
            }
        }
        if saw_inm {
            return false;
        }
        match (
            req.header("if-modified-since").and_then(http_date),
            self.last_modified,
        ) {
            (Some(since), Some(modified)) => modified <= since,
            _ => false,
        }
    }
}

/// The variants of one object.
type Variants = Vec<Arc<Entry>>;

#[derive(Default)]
struct Shard {
    objects: HashMap<Key, Variants>,
    /// Keys and sequence numbers in insertion order (an entry replaced or dropped leaves
    /// a stale pair, skipped when reached).
    order: VecDeque<(Key, u64)>,
    /// Entries held (variants counted).
    live: usize,
}

impl Shard {
    /// Drops the order's stale pairs once they outnumber the live ones, so that objects
    /// replaced again and again (and never evicted) do not grow it without bound.
    fn compact(&mut self) {
        if self.order.len() <= 2 * self.live + 64 {
            return;
        }
        let objects = &self.objects;
        self.order.retain(|(key, seq)| {
            objects
                .get(key)
                .is_some_and(|v| v.iter().any(|e| e.seq == *seq))
        });
    }

    /// Takes out the entry of `key` with sequence `seq`, if still there.
    fn take(&mut self, key: &Key, seq: u64) -> Option<Arc<Entry>> {
        let variants = self.objects.get_mut(key)?;
        let at = variants.iter().position(|e| e.seq == seq)?;
        let e = variants.swap_remove(at);
        self.live -= 1;
        if variants.is_empty() {
            self.objects.remove(key);
        }
        Some(e)
    }
}

/// A cache's objects, shared by every worker.
pub struct Store {
    pub conf: CacheConf,
    shards: Box<[RwLock<Shard>]>,
    /// Bytes held (see [`Entry::size`]).
    used: AtomicUsize,
    /// The next sequence number (insertion order).
    seq: Mutex<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("name", &self.conf.name)
            .field("used", &self.used())
            .finish()
    }
}

impl Store {
    pub fn new(conf: CacheConf) -> Store {
        Store {
            conf,
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            used: AtomicUsize::new(0),
            seq: Mutex::new(1),
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The fresh variant of `key` a request with `vary` may get.
    pub fn lookup(&self, key: &Key, vary: &VaryInput, now: u64) -> Option<Arc<Entry>> {
        let shard = self.shards[key.shard()]
            .read()
            .unwrap_or_else(|e| e.into_inner());
        shard
            .objects
            .get(key)?
            .iter()
            .find(|e| e.expires > now && e.variant.serves(vary))
            .cloned()
    }

    /// Whether the object has variants (then the request's `Vary` fields are kept).
    pub fn contains(&self, key: &Key) -> bool {
        let shard = self.shards[key.shard()]
            .read()
            .unwrap_or_else(|e| e.into_inner());
        shard.objects.contains_key(key)
    }

    /// Drops every variant of `key` (a successful unsafe request changed the resource).
    pub fn invalidate(&self, key: &Key) {
        let mut shard = self.shards[key.shard()]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(variants) = shard.objects.remove(key) {
            shard.live -= variants.len();
            let freed: usize = variants.iter().map(|e| e.size()).sum();
            self.used.fetch_sub(freed, Ordering::Relaxed);
        }
    }

    /// Stores `entry`, replacing the same variant of its object; the oldest objects make
    /// room. Refused (`false`) when it exceeds `max-object-size`, when its object has
    /// `max-secondary-entries` other variants, or when nothing can make room.
    pub fn insert(&self, mut entry: Entry, now: u64) -> bool {
        let size = entry.size();
        if entry.head.len() + entry.body.len() > self.conf.max_object_size {
            return false;
        }
        let key = entry.key;
        {
            let shard = self.shards[key.shard()]
                .read()
                .unwrap_or_else(|e| e.into_inner());
            let others = shard.objects.get(&key).map_or(0, |v| {
                v.iter()
                    .filter(|e| e.expires > now && e.variant != entry.variant)
                    .count()
            });
            if others >= self.conf.max_secondary_entries {
                return false;
            }
        }
        if !self.reserve(size) {
            return false;
        }
        let seq = {
            let mut s = self.seq.lock().unwrap_or_else(|e| e.into_inner());
            *s += 1;
            *s
        };
        entry.seq = seq;
        let mut shard = self.shards[key.shard()]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let variants = shard.objects.entry(key).or_default();
        // The same variant, or expired ones, leave.
        let (before, mut freed) = (variants.len(), 0);
        variants.retain(|e| {
            let keep = e.expires > now && e.variant != entry.variant;
            if !keep {
                freed += e.size();
            }
            keep
        });
        variants.push(Arc::new(entry));
        let after = variants.len();
        shard.live = shard.live + after - before;
        shard.order.push_back((key, seq));
        shard.compact();
        self.used.fetch_sub(freed, Ordering::Relaxed);
        true
    }

    /// Reserves `size` bytes, evicting the oldest objects until they fit.
    fn reserve(&self, size: usize) -> bool {
        loop {
            let used = self.used.load(Ordering::Relaxed);
            if used + size <= self.conf.total_max_size {
                if self
                    .used
                    .compare_exchange(used, used + size, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if !self.evict_one() {
                return false;
            }
        }
    }

    /// Drops the oldest object (the shards' oldest entries compared; the one found is taken
    /// under its shard's lock, stale order entries dropped on the way).
    fn evict_one(&self) -> bool {
        loop {
            let oldest = (0..SHARDS)
                .filter_map(|i| {
                    let shard = self.shards[i].read().unwrap_or_else(|e| e.into_inner());
                    shard.order.front().map(|&(_, seq)| (seq, i))
                })
                .min();
            let Some((_, i)) = oldest else {
                return false;
            };
            let mut shard = self.shards[i].write().unwrap_or_else(|e| e.into_inner());
            let Some((key, seq)) = shard.order.pop_front() else {
                continue;
            };
            if let Some(e) = shard.take(&key, seq) {
                self.used.fetch_sub(e.size(), Ordering::Relaxed);
                return true;
            }
        }
    }

    /// `show cache`'s lines for this cache, as HAProxy prints them (its addresses stand
    /// for the objects; blocks are of 1 kB).
    pub fn show(&self, now: u64) -> String {
        let free_blocks =
            (self.conf.total_max_size - self.used().min(self.conf.total_max_size)) / 1024;
        let mut out = format!(
            "{:p}: {} (shctx:{:p}, available blocks:{free_blocks})\n",
            self, self.conf.name, &self.shards
        );
        let mut entries: Vec<Arc<Entry>> = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            entries.extend(
                shard
                    .objects
                    .values()
                    .flatten()
                    .filter(|e| e.expires > now)
                    .cloned(),
            );
        }
        entries.sort_by_key(|e| (e.key.short(), e.seq));
        for e in entries {
            let size = e.size();
            out.push_str(&format!(
                "{:p} hash:{} vary:0x{} size:{size} ({} blocks), refcount:{}, expire:{}\n",
                Arc::as_ptr(&e),
                e.key.short(),
                e.variant
                    .signature()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                size.div_ceil(1024),
                Arc::strong_count(&e) - 2,
                e.expires.saturating_sub(now),
            ));
        }
        out
    }
}

/// Seconds since the Unix epoch: the cache's clock (ages and expiries are whole seconds,
/// as HTTP's).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The head to store: `head` (a response head as the client would get it, framing and
/// hop-by-hop fields already left out) without its `Age` field.
pub fn stored_head(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if !name_is(name.trim_ascii(), "age") {
            out.extend_from_slice(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf() -> CacheConf {
        CacheConf {
            name: "c".into(),
            total_max_size: 8 * 1024,
            max_object_size: 4 * 1024,
            max_age: 60,
            process_vary: true,
            max_secondary_entries: 2,
        }
    }

    fn admit_with(fields: &[(&str, &str)]) -> Option<Admission> {
        let h: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        let req = Lookup {
            key: Key([0; 20]),
            policy: RequestPolicy {
                ignore: false,
                storable: true,
            },
            vary: Some(VaryInput::default()),
            method: Method::Get,
        };
        admit(&conf(), 200, h.iter().copied(), &req, 1_000_000)
    }

    #[test]
    fn responses_are_admitted_as_haproxy_does() {
        // Neither an expiration nor a validator: not stored.
        assert_eq!(admit_with(&[]), None);
        assert_eq!(
            admit_with(&[("Cache-Control", "max-age=30")])
                .unwrap()
                .max_age,
            30
        );
        // Capped by the cache's max-age; s-maxage wins over max-age.
        assert_eq!(
            admit_with(&[("cache-control", "max-age=600")])
                .unwrap()
                .max_age,
            60
        );
        assert_eq!(
            admit_with(&[("cache-control", "max-age=50, s-maxage=20")])
                .unwrap()
                .max_age,
            20
        );
        // A validator alone: the cache's max-age.
        assert_eq!(admit_with(&[("etag", "\"x\"")]).unwrap().max_age, 60);
        for refused in ["private", "no-cache", "no-store", "max-age=0", "s-maxage=0"] {
            assert_eq!(
                admit_with(&[("cache-control", refused), ("etag", "\"x\"")]),
                None
            );
        }
        assert_eq!(
            admit_with(&[("pragma", "no-cache"), ("etag", "\"x\"")]),
            None
        );
        // Already older than its max age.
        assert_eq!(
            admit_with(&[("cache-control", "max-age=5"), ("age", "9")]),
            None
        );
        // An Expires in the past is an expiration of zero: stored, served for no time.
        assert_eq!(
            admit_with(&[("expires", "Thu, 01 Jan 1970 00:00:00 GMT")])
                .unwrap()
                .max_age,
            0
        );
        // Vary: only the fields the cache understands.
        assert!(admit_with(&[("etag", "\"x\""), ("vary", "accept-encoding")]).is_some());
        assert_eq!(admit_with(&[("etag", "\"x\""), ("vary", "cookie")]), None);
        assert_eq!(
            admit_with(&[
                ("etag", "\"x\""),
                ("vary", "accept-encoding"),
                ("content-encoding", "foo")
            ]),
            None
        );
    }

    fn entry(key: u8, body: usize, variant: Variant) -> Entry {
        let a = Admission {
            max_age: 60,
            age: 0,
            etag: None,
            last_modified: None,
            variant,
        };
        Entry::new(
            Key([key; 20]),
            b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
            vec![0; body],
            a,
            100,
        )
    }

    #[test]
    fn the_store_stays_within_its_size_by_evicting_the_oldest() {
        let s = Store::new(conf());
        for k in 0..10u8 {
            assert!(s.insert(entry(k, 1500, Variant::default()), 100));
            assert!(s.used() <= 8 * 1024, "{}", s.used());
        }
        let none = VaryInput::default();
        // The newest are there, the oldest went first.
        assert!(s.lookup(&Key([9; 20]), &none, 100).is_some());
        assert!(s.lookup(&Key([0; 20]), &none, 100).is_none());
        // Too big for one object; expired objects are not served.
        assert!(!s.insert(entry(50, 5000, Variant::default()), 100));
        assert!(s.lookup(&Key([9; 20]), &none, 161).is_none());
        s.invalidate(&Key([9; 20]));
        assert!(s.lookup(&Key([9; 20]), &none, 100).is_none());
    }

    #[test]
    fn variants_follow_accept_encoding_and_are_bounded() {
        let s = Store::new(conf());
        let gz = Variant {
            encoding: Some(Some(b"gzip".to_vec())),
            referer: None,
        };
        let plain = Variant {
            encoding: Some(None),
            referer: None,
        };
        let br = Variant {
            encoding: Some(Some(b"br".to_vec())),
            referer: None,
        };
        assert!(s.insert(entry(1, 10, gz), 100));
        assert!(s.insert(entry(1, 10, plain), 100));
        // max-secondary-entries 2.
        assert!(!s.insert(entry(1, 10, br), 100));
        let accepting = |list: &[&str]| VaryInput {
            accepts: Some(list.iter().map(|a| a.as_bytes().to_vec()).collect()),
            referer: None,
        };
        let got = s.lookup(&Key([1; 20]), &accepting(&["gzip"]), 100).unwrap();
        assert_eq!(got.variant.encoding, Some(Some(b"gzip".to_vec())));
        let got = s.lookup(&Key([1; 20]), &accepting(&["br"]), 100).unwrap();
        assert_eq!(got.variant.encoding, Some(None));
    }
}
