//! Stick tables: per-key counters shared by every worker (`stick-table`), as HAProxy keeps
//! them for rate limiting and tracking.
//!
//! Invariants:
//! - A table is split into shards by key hash, each behind its own mutex: workers touching
//!   different keys rarely meet, and no lock covers the whole table on the request path.
//! - An entry lives `expire` after its last update; a full table drops expired entries, then
//!   the least recently updated one (or, with `nopurge`, refuses the new key).
//! - An entry a stream tracks stays valid for that stream even if the table drops it (the
//!   stream holds it).
//! - Rates are HAProxy's sliding counters ([`crate::freq::Window`]), each over its own
//!   period.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sluice_config::{units, Keyword, KwError, Scope};

use crate::conf::sample::Sample;
use crate::conf::stick::ARRAY_MAX;
pub use crate::conf::stick::{Counter, DataType, KeyType, PeersConf, TableConf};
use crate::conf::ProxyConf;
use crate::freq::Window;

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[Keyword {
    name: "stick-table",
    scope: Scope::FE_BE,
    help: "stick-table type ip|ipv6|integer|string [len N]|binary [len N] size N [expire T] [nopurge] [store DATA,...]: per-key counters for tracking and rate limiting",
    parse: |c, a| {
        c.stick = Some(parse_table(a)?);
        Ok(())
    },
}];

pub fn parse_table(a: &[String]) -> Result<TableConf, KwError> {
    let mut key = None;
    let mut size = None;
    let mut t = TableConf {
        name: String::new(),
        key: KeyType::Ip,
        size: 0,
        expire: None,
        nopurge: false,
        store: Vec::new(),
        peers: None,
    };
    let mut i = 0;
    while i < a.len() {
        let idx = i + 1;
        let value = |what: &'static str| a.get(i + 1).ok_or(KwError::Missing(what));
        match a[i].as_str() {
            "type" => {
                let v = value("a key type after 'type'")?;
                let len = match a.get(i + 2).map(String::as_str) {
                    Some("len") => {
                        let n = value("")
                            .ok()
                            .and(a.get(i + 3))
                            .ok_or(KwError::Missing("a length after 'len'"))?;
                        let n: usize =
                            n.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                                KwError::bad(idx + 3, n, "expects a positive length")
                            })?;
                        i += 2;
                        Some(n)
                    }
                    _ => None,
                };
                key = Some(match v.as_str() {
                    "ip" => KeyType::Ip,
                    "ipv6" => KeyType::Ipv6,
                    "integer" => KeyType::Integer,
                    "string" => KeyType::String(len.unwrap_or(32)),
                    "binary" => KeyType::Binary(len.unwrap_or(32)),
                    other => {
                        return Err(KwError::bad(
                            idx + 1,
                            other,
                            "expects ip, ipv6, integer, string or binary",
                        ))
                    }
                });
                i += 1;
            }
            "size" => {
                let v = value("a size after 'size'")?;
                size = Some(
                    units::parse_size(v)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| {
                            KwError::bad(idx + 1, v, "expects a positive size (k, m, g)")
                        })? as usize,
                );
                i += 1;
            }
            "expire" => {
                let v = value("a time after 'expire'")?;
                t.expire = Some(units::parse_time(v).map_err(|e| KwError::bad(idx + 1, v, e))?);
                i += 1;
            }
            "nopurge" => t.nopurge = true,
            "store" => {
                let v = value("data types after 'store'")?;
                for d in store_items(v) {
                    let types = parse_data(d).map_err(|e| KwError::bad(idx + 1, d, e))?;
                    // A type named twice is stored once (HAProxy warns and ignores it).
                    for ty in types {
                        if !t.store.iter().any(|s| s.counter == ty.counter) {
                            t.store.push(ty);
                        }
                    }
                }
                exclusive_arrays(&t.store).map_err(|e| KwError::bad(idx + 1, v, e))?;
                // Entries list their data in HAProxy's order, whatever the line's.
                t.store.sort_by_key(|d| d.counter.data_type());
                i += 1;
            }
            "peers" => {
                t.peers = Some(value("a peers section name")?.clone());
                i += 1;
            }
            "srvkey" | "write-to" | "recv-only" => {
                return Err(KwError::Invalid(format!(
                    "stick-table option '{}': not supported yet",
                    a[i]
                )))
            }
            other => {
                return Err(KwError::bad(
                    idx,
                    other,
                    "expects type, size, expire, nopurge or store",
                ))
            }
        }
        i += 1;
    }
    t.key = key.ok_or(KwError::Missing("'type ip|ipv6|integer|string|binary'"))?;
    t.size = size.ok_or(KwError::Missing("'size N'"))?;
    Ok(t)
}

/// The items of a `store` list: commas between parentheses belong to an item
/// (`gpc_rate(4,10s)`).
fn store_items(v: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, b) in v.bytes().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                items.push(&v[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&v[start..]);
    items
}

/// `http_req_rate(10s)`, `gpc0`, `gpt(4)`, `gpc_rate(4,10s)`, ...: a rate needs its
/// period, a count takes none; an array is its elements.
fn parse_data(d: &str) -> Result<Vec<DataType>, String> {
    let (name, arg) = match d.split_once('(') {
        Some((n, rest)) => (n, Some(rest.strip_suffix(')').ok_or("missing ')'")?)),
        None => (d, None),
    };
    if let Some(array) = parse_array(name, arg)? {
        return Ok(array);
    }
    let period = arg.map(units::parse_time).transpose()?;
    let Some(counter) = Counter::from_name(name) else {
        return Err(match name {
            "server_key" => {
                format!("data type '{name}' is not supported yet")
            }
            _ => format!("unknown data type '{name}'"),
        });
    };
    match (name.ends_with("_rate"), period) {
        (true, None) => Err(format!("'{name}' needs a period, as {name}(10s)")),
        (false, Some(_)) => Err(format!("'{name}' takes no period")),
        _ => Ok(vec![DataType { counter, period }]),
    }
}

/// `gpt(N)`, `gpc(N)`, `gpc_rate(N,PERIOD)`: N elements, 1 to 100 (`None`: not an array).
fn parse_array(name: &str, arg: Option<&str>) -> Result<Option<Vec<DataType>>, String> {
    let element: fn(u8) -> Counter = match name {
        "gpt" => Counter::Gpt,
        "gpc" => Counter::Gpc,
        "gpc_rate" => Counter::GpcRate,
        _ => return Ok(None),
    };
    let arg = arg.ok_or_else(|| format!("'{name}' needs its number of elements, as {name}(4)"))?;
    let (count, period) = match (name, arg.split_once(',')) {
        ("gpc_rate", Some((n, p))) => (n, Some(units::parse_time(p.trim())?)),
        ("gpc_rate", None) => return Err("'gpc_rate' needs a period, as gpc_rate(4,10s)".into()),
        (_, Some(_)) => return Err(format!("'{name}' takes no period")),
        (_, None) => (arg, None),
    };
    let n = count
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=ARRAY_MAX).contains(n))
        .ok_or_else(|| {
            format!("array size is out of allowed range (1-{ARRAY_MAX}) for store option '{name}'")
        })?;
    Ok(Some(
        (0..n as u8)
            .map(|i| DataType {
                counter: element(i),
                period,
            })
            .collect(),
    ))
}

/// A table may not store an array and the legacy counters it stands for (`gpt` and
/// `gpt0`, `gpc` and `gpc0`/`gpc1`, `gpc_rate` and `gpc0_rate`/`gpc1_rate`): HAProxy
/// refuses it, as the array takes the legacy names over.
fn exclusive_arrays(store: &[DataType]) -> Result<(), String> {
    let holds = |f: fn(&Counter) -> bool| store.iter().any(|d| f(&d.counter));
    let clashes: [(&str, &str, bool, bool); 3] = [
        (
            "gpt",
            "gpt0",
            holds(|c| matches!(c, Counter::Gpt(_))),
            holds(|c| *c == Counter::Gpt0),
        ),
        (
            "gpc",
            "gpc[0/1]",
            holds(|c| matches!(c, Counter::Gpc(_))),
            holds(|c| matches!(c, Counter::Gpc0 | Counter::Gpc1)),
        ),
        (
            "gpc_rate",
            "gpc[0/1]_rate",
            holds(|c| matches!(c, Counter::GpcRate(_))),
            holds(|c| matches!(c, Counter::Gpc0Rate | Counter::Gpc1Rate)),
        ),
    ];
    for (array, legacy, a, l) in clashes {
        if a && l {
            return Err(format!(
                "simultaneous usage of '{array}' and '{legacy}' in a same table is not permitted as '{array}' overrides '{legacy}'"
            ));
        }
    }
    Ok(())
}

/// How many shards a table is split into.
const SHARDS: usize = 32;

/// An entry's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    Ip(IpAddr),
    Int(i64),
    Bytes(Vec<u8>),
}

impl Key {
    /// The key a sample gives in a table of type `t` (`None` when it cannot be one).
    pub fn from_sample(s: &Sample<'_>, t: KeyType) -> Option<Key> {
        Some(match t {
            KeyType::Ip => match s.as_ip()? {
                IpAddr::V6(v6) => Key::Ip(IpAddr::V4(v6.to_ipv4_mapped()?)),
                v4 => Key::Ip(v4),
            },
            KeyType::Ipv6 => match s.as_ip()? {
                IpAddr::V4(v4) => Key::Ip(IpAddr::V6(v4.to_ipv6_mapped())),
                v6 => Key::Ip(v6),
            },
            // HAProxy keeps integer keys on 32 bits: -3 is 4294967293.
            KeyType::Integer => Key::Int(i64::from(s.as_int()? as u32)),
            KeyType::String(len) => {
                let b = s.as_bytes();
                Key::Bytes(b[..b.len().min(len)].to_vec())
            }
            // Binary keys are the table's length, padded with zeros, as HAProxy keeps them.
            KeyType::Binary(len) => {
                let b = s.as_bytes();
                let mut key = b[..b.len().min(len)].to_vec();
                key.resize(len, 0);
                Key::Bytes(key)
            }
        })
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Ip(ip) => write!(f, "{ip}"),
            Key::Int(n) => write!(f, "{n}"),
            Key::Bytes(b) => write!(f, "{}", String::from_utf8_lossy(b)),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Value {
    Count(u64),
    Rate(Window, u64),
}

/// A value as it leaves or enters a table (the peers protocol): a count, or a rate as the
/// age of its current period (ms) and its two periods' counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Count(u64),
    Rate { age: u64, curr: u64, prev: u64 },
}

/// One key's data, in the order of the table's `store` list.
#[derive(Debug)]
pub struct Entry {
    values: Vec<(Counter, Value)>,
    /// When it expires (ms), if the table expires entries.
    pub expires: Option<u64>,
    /// Its last update (ms), for dropping the least recent when full.
    pub updated: u64,
    /// Whether it waits among its table's [`Changes`] (shared tables only).
    queued: bool,
}

impl Entry {
    fn new(conf: &TableConf, now: u64) -> Entry {
        Entry {
            values: conf
                .store
                .iter()
                .map(|&d| match (d.counter, d.period) {
                    (c, Some(p)) => (c, Value::Rate(Window::starting(now), p.as_millis() as u64)),
                    (c, None) => (c, Value::Count(0)),
                })
                .collect(),
            expires: None,
            updated: now,
            queued: false,
        }
    }

    /// Notes that the entry was sent as it is now: its next change is queued again.
    pub fn sent(&mut self) {
        self.queued = false;
    }

    /// Every stored value as it leaves the table.
    pub fn snapshot(&self, now: u64) -> Vec<(Counter, Stored)> {
        self.values
            .iter()
            .map(|&(c, v)| match v {
                Value::Count(n) => (c, Stored::Count(n)),
                Value::Rate(r, p) => {
                    let mut r = r;
                    r.add(now, p, 0);
                    let (start, curr, prev) = r.parts();
                    let age = now.saturating_sub(start);
                    (c, Stored::Rate { age, curr, prev })
                }
            })
            .collect()
    }

    /// Takes a value another process sent (a count, or a rate's state), if the entry
    /// stores it. `conn_cur` is each process's own, as in HAProxy: never taken.
    pub fn put(&mut self, c: Counter, v: Stored, now: u64) {
        if c == Counter::ConnCur {
            return;
        }
        match (self.value_mut(c), v) {
            (Some(Value::Count(x)), Stored::Count(n)) => *x = n,
            (Some(Value::Rate(r, _)), Stored::Rate { age, curr, prev }) => {
                *r = Window::from_parts(now.saturating_sub(age), curr, prev)
            }
            _ => {}
        }
    }

    /// Whether the entry stores `c` (or the array element standing for it).
    pub fn stores(&self, c: Counter) -> bool {
        self.value(c).is_some()
    }

    /// Where `c` is kept: `c` itself, or the array element standing for a legacy counter
    /// (`gpc0` in a table storing `gpc(N)`).
    fn value(&self, c: Counter) -> Option<&Value> {
        let at = |c: Counter| self.values.iter().find(|(k, _)| *k == c).map(|(_, v)| v);
        at(c).or_else(|| at(c.array_twin()?))
    }

    fn value_mut(&mut self, c: Counter) -> Option<&mut Value> {
        let c = match self.values.iter().any(|(k, _)| *k == c) {
            true => c,
            false => c.array_twin()?,
        };
        self.values
            .iter_mut()
            .find(|(k, _)| *k == c)
            .map(|(_, v)| v)
    }

    /// Adds `n` to counter `c` if stored (a rate counts `n` events now).
    pub fn add(&mut self, c: Counter, n: u64, now: u64) {
        match self.value_mut(c) {
            Some(Value::Count(x)) => *x = x.saturating_add(n),
            Some(Value::Rate(r, p)) => r.add(now, *p, n),
            None => {}
        }
    }

    /// Takes one from counter `c` (connections ending).
    pub fn sub(&mut self, c: Counter) {
        if let Some(Value::Count(x)) = self.value_mut(c) {
            *x = x.saturating_sub(1);
        }
    }

    /// Stores `n` in counter `c` (`set table`): a count takes it, a rate reads it for the
    /// period starting `now` (then fades), as HAProxy sets one.
    pub fn store(&mut self, c: Counter, n: u64, now: u64) {
        match self.value_mut(c) {
            Some(Value::Count(x)) => *x = n,
            Some(Value::Rate(r, _)) => *r = Window::from_parts(now, n, 0),
            None => {}
        }
    }

    pub fn set(&mut self, c: Counter, n: u64) {
        if let Some(Value::Count(x)) = self.value_mut(c) {
            *x = n;
        }
    }

    /// The value of counter `c`, if stored.
    pub fn get(&self, c: Counter, now: u64) -> Option<u64> {
        self.value(c).map(|v| match v {
            Value::Count(x) => *x,
            Value::Rate(r, p) => r.read(now, *p),
        })
    }

    /// `name=value` for each stored data type, as `show table` prints them.
    pub fn describe(&self, now: u64) -> String {
        let mut out = String::new();
        for (k, v) in &self.values {
            if !out.is_empty() {
                out.push(' ');
            }
            match v {
                Value::Count(x) => out.push_str(&format!("{}={x}", k.name())),
                Value::Rate(r, p) => {
                    out.push_str(&format!("{}({p})={}", k.name(), r.read(now, *p)))
                }
            }
        }
        out
    }
}

/// A tracked or looked-up entry.
pub type EntryRef = Arc<Mutex<Entry>>;

/// An entry a stream tracks (`track-scN`): its table, its key, and the entry itself, kept
/// alive while tracked even if the table drops it. Tracking counts a connection in the
/// entry (`conn_cur`, `conn_cnt`, `conn_rate`); dropping the tracker ends it (`conn_cur`
/// goes down) and starts the entry's expiry again, as HAProxy does when a stream stops
/// tracking.
#[derive(Debug)]
pub struct Tracker {
    pub table: Arc<Table>,
    pub key: Key,
    pub entry: EntryRef,
    /// When tracking started, in the table's clock and as an instant (the clock of the
    /// release is derived from them).
    started: (u64, std::time::Instant),
}

impl Tracker {
    /// Starts tracking `key` in `table` (`None`: the table is full and `nopurge`).
    pub fn start(table: &Arc<Table>, key: Key, now: u64) -> Option<Tracker> {
        let entry = table.touch(key.clone(), now)?;
        let t = Tracker {
            table: table.clone(),
            key,
            entry,
            started: (now, std::time::Instant::now()),
        };
        t.count(
            &[
                (Counter::ConnCur, 1),
                (Counter::ConnCnt, 1),
                (Counter::ConnRate, 1),
            ],
            now,
        );
        Some(t)
    }

    /// Adds each `(counter, n)` the entry stores.
    pub fn count(&self, counts: &[(Counter, u64)], now: u64) {
        let mut e = self.entry.lock().unwrap_or_else(|e| e.into_inner());
        for &(c, n) in counts {
            e.add(c, n, now);
        }
        self.table.changed(&self.key, &mut e);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let now = self.started.0 + self.started.1.elapsed().as_millis() as u64;
        let mut e = self.entry.lock().unwrap_or_else(|e| e.into_inner());
        e.sub(Counter::ConnCur);
        if let Some(x) = self.table.conf.expire {
            e.expires = Some(now + x.as_millis() as u64);
        }
        self.table.changed(&self.key, &mut e);
    }
}

/// A stick table, shared by every worker.
#[derive(Debug)]
pub struct Table {
    pub conf: TableConf,
    shards: Box<[Mutex<HashMap<Key, EntryRef>>]>,
    used: AtomicUsize,
    /// The entries changed here since the peers last took them (a table shared with a
    /// `peers` section only).
    changes: Option<Changes>,
}

/// The keys of a shared table's entries changed by this process: a worker that changes an
/// entry not already waiting adds its key (the only lock taken, once per entry until the
/// peers take them) and wakes the first worker, which sends them.
#[derive(Debug, Default)]
pub struct Changes {
    keys: Mutex<Vec<Key>>,
    pub wake: tokio::sync::Notify,
}

impl Table {
    pub fn new(conf: &TableConf) -> Table {
        Table {
            conf: conf.clone(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            used: AtomicUsize::new(0),
            changes: conf.peers.as_ref().map(|_| Changes::default()),
        }
    }

    /// Notes that this process changed `key`'s entry `e` (locked by the caller): a table
    /// shared with peers sends it to them.
    pub fn changed(&self, key: &Key, e: &mut Entry) {
        let Some(c) = &self.changes else {
            return;
        };
        if e.queued {
            return;
        }
        e.queued = true;
        let mut keys = c.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.push(key.clone());
        if keys.len() == 1 {
            c.wake.notify_one();
        }
    }

    /// Takes the keys changed since the last call. Each entry stays marked until it is
    /// sent ([`Entry::sent`]): changes until then travel with it.
    pub fn take_changes(&self) -> Vec<Key> {
        let Some(c) = &self.changes else {
            return Vec::new();
        };
        std::mem::take(&mut *c.keys.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The table's changes, if it is shared with peers.
    pub fn changes(&self) -> Option<&Changes> {
        self.changes.as_ref()
    }

    /// Takes an entry a peer sent: its values replace the ones kept (the last writer wins,
    /// as between HAProxy peers), and it lives `left` ms (else the table's `expire`). It is
    /// not sent back: only this process's own changes go to the peers. Whether it was
    /// stored (`nopurge` on a full table refuses it).
    pub fn learn(
        &self,
        key: Key,
        left: Option<u64>,
        values: &[(Counter, Stored)],
        now: u64,
    ) -> bool {
        let Some(entry) = self.touch(key, now) else {
            return false;
        };
        let mut e = entry.lock().unwrap_or_else(|e| e.into_inner());
        for &(c, v) in values {
            e.put(c, v, now);
        }
        if let Some(left) = left.filter(|_| self.conf.expire.is_some()) {
            e.expires = Some(now + left);
        }
        true
    }

    fn shard(&self, key: &Key) -> &Mutex<HashMap<Key, EntryRef>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        &self.shards[h.finish() as usize % SHARDS]
    }

    fn expired(e: &Entry, now: u64) -> bool {
        e.expires.is_some_and(|t| now >= t)
    }

    /// Entries in use.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The live entry for `key`, if any.
    pub fn lookup(&self, key: &Key, now: u64) -> Option<EntryRef> {
        let shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let e = shard.get(key)?;
        let live = !Self::expired(&e.lock().unwrap_or_else(|e| e.into_inner()), now);
        live.then(|| e.clone())
    }

    /// The entry for `key`, created if needed (`None`: the table is full and `nopurge`).
    /// Either way its expiry starts again.
    pub fn touch(&self, key: Key, now: u64) -> Option<EntryRef> {
        let expire = self.conf.expire.map(|d| d.as_millis() as u64);
        let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = shard.get(&key).cloned() {
            let mut g = e.lock().unwrap_or_else(|e| e.into_inner());
            if Self::expired(&g, now) {
                *g = Entry::new(&self.conf, now);
            }
            g.expires = expire.map(|x| now + x);
            g.updated = now;
            drop(g);
            return Some(e);
        }
        // This shard's share of the size.
        let room = self.conf.size.div_ceil(SHARDS).max(1);
        if shard.len() >= room {
            shard.retain(|_, e| !Self::expired(&e.lock().unwrap_or_else(|e| e.into_inner()), now));
            if shard.len() >= room {
                if self.conf.nopurge {
                    self.used.store(self.count(), Ordering::Relaxed);
                    return None;
                }
                let oldest = shard
                    .iter()
                    .min_by_key(|(_, e)| e.lock().unwrap_or_else(|e| e.into_inner()).updated)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    shard.remove(&k);
                }
            }
        }
        let mut entry = Entry::new(&self.conf, now);
        entry.expires = expire.map(|x| now + x);
        let e = Arc::new(Mutex::new(entry));
        shard.insert(key, e.clone());
        drop(shard);
        self.used.store(self.count(), Ordering::Relaxed);
        Some(e)
    }

    fn count(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Live entries, for `show table`.
    pub fn entries(&self, now: u64) -> Vec<(Key, EntryRef)> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.retain(|_, e| !Self::expired(&e.lock().unwrap_or_else(|e| e.into_inner()), now));
            out.extend(s.iter().map(|(k, e)| (k.clone(), e.clone())));
        }
        self.used.store(out.len(), Ordering::Relaxed);
        out
    }

    /// Drops one key's entry, or all of them.
    pub fn clear(&self, key: Option<&Key>) {
        for s in self.shards.iter() {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            match key {
                Some(k) => {
                    s.remove(k);
                }
                None => s.clear(),
            }
        }
        self.used.store(self.count(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn conf(size: usize, store: Vec<DataType>) -> TableConf {
        TableConf {
            name: "t".into(),
            key: KeyType::Ip,
            size,
            expire: Some(Duration::from_secs(10)),
            peers: None,
            nopurge: false,
            store,
        }
    }

    #[test]
    fn table_lines() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let t = parse_table(&w(
            "type ip size 100k expire 30s store http_req_rate(10s),gpc0,conn_cur",
        ))
        .unwrap();
        assert_eq!(t.key, KeyType::Ip);
        assert!(t.size >= 100_000);
        assert_eq!(t.expire, Some(Duration::from_secs(30)));
        assert_eq!(t.store.len(), 3);
        let t = parse_table(&w("type string len 64 size 10")).unwrap();
        assert_eq!(t.key, KeyType::String(64));
        assert!(parse_table(&w("size 10")).is_err());
        assert!(parse_table(&w("type ip size 10 store http_req_rate")).is_err());
        assert!(parse_table(&w("type ip size 10 store nosuch")).is_err());
        let t = parse_table(&w("type ip size 10 peers p")).unwrap();
        assert_eq!(t.peers.as_deref(), Some("p"));
        assert!(parse_table(&w("type ip size 10 write-to t"))
            .unwrap_err()
            .to_string()
            .contains("not supported yet"));
    }

    /// What leaves a table for another process (`snapshot`, then `learn` there).
    fn carry(a: &Table, b: &Table, key: &Key, (then, now): (u64, u64)) {
        let e = a.lookup(key, then).unwrap();
        let e = e.lock().unwrap();
        let left = e.expires.map(|x| x - then);
        assert!(b.learn(key.clone(), left, &e.snapshot(then), now));
    }

    #[test]
    fn an_entry_carries_over_to_another_table() {
        let store = vec![
            DataType {
                counter: Counter::HttpReqCnt,
                period: None,
            },
            DataType {
                counter: Counter::HttpReqRate,
                period: Some(Duration::from_secs(10)),
            },
        ];
        let (a, b) = (
            Table::new(&conf(100, store.clone())),
            Table::new(&conf(100, store)),
        );
        let key = Key::Ip("10.0.0.1".parse().unwrap());
        let e = a.touch(key.clone(), 1000).unwrap();
        e.lock().unwrap().add(Counter::HttpReqCnt, 7, 1000);
        e.lock().unwrap().add(Counter::HttpReqRate, 3, 1000);
        carry(&a, &b, &key, (2000, 50));
        let got = b.lookup(&key, 50).unwrap();
        let got = got.lock().unwrap();
        assert_eq!(got.get(Counter::HttpReqCnt, 50), Some(7));
        assert_eq!(got.get(Counter::HttpReqRate, 50), Some(3));
        // The time left before expiry carries over (10 s from 1000, seen at 2000: 9 s).
        assert_eq!(got.expires, Some(50 + 9000));
    }

    #[test]
    fn array_elements_carry_over_and_legacy_names_reach_them() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let conf = parse_table(&w("type ip size 10 store gpc_rate(2,10s),gpt(3),gpc(2)")).unwrap();
        assert_eq!(conf.store.len(), 7);
        let (a, b) = (Table::new(&conf), Table::new(&conf));
        let key = Key::Ip("10.0.0.1".parse().unwrap());
        let e = a.touch(key.clone(), 1000).unwrap();
        e.lock().unwrap().set(Counter::Gpt(2), 9);
        e.lock().unwrap().add(Counter::Gpc1, 4, 1000);
        e.lock().unwrap().add(Counter::GpcRate(1), 3, 1000);
        carry(&a, &b, &key, (1000, 50));
        let got = b.lookup(&key, 50).unwrap();
        let got = got.lock().unwrap();
        assert_eq!(got.get(Counter::Gpt(2), 50), Some(9));
        assert_eq!(got.get(Counter::Gpc(1), 50), Some(4));
        assert_eq!(got.get(Counter::Gpc1Rate, 50), Some(3));
        assert_eq!(got.get(Counter::Gpt0, 50), Some(0));
        assert!(got
            .describe(50)
            .starts_with("gpt0=0 gpt1=0 gpt2=9 gpc0=0 gpc1=4 gpc0_rate(10000)=0"));
    }

    #[test]
    fn entries_count_expire_and_make_room() {
        let t = Table::new(&conf(
            SHARDS,
            vec![
                DataType {
                    counter: Counter::HttpReqRate,
                    period: Some(Duration::from_secs(10)),
                },
                DataType {
                    counter: Counter::Gpc0,
                    period: None,
                },
            ],
        ));
        let k = Key::Ip("10.0.0.1".parse().unwrap());
        let e = t.touch(k.clone(), 0).unwrap();
        e.lock().unwrap().add(Counter::HttpReqRate, 1, 0);
        e.lock().unwrap().add(Counter::Gpc0, 3, 0);
        let again = t.lookup(&k, 1).unwrap();
        assert_eq!(again.lock().unwrap().get(Counter::HttpReqRate, 1), Some(1));
        assert_eq!(again.lock().unwrap().get(Counter::Gpc0, 1), Some(3));
        assert_eq!(again.lock().unwrap().get(Counter::ConnCur, 1), None);
        assert!(t.lookup(&k, 10_000).is_none(), "expired");
        // A full table (one entry per shard here) still takes new keys.
        for n in 0..200u32 {
            assert!(t.touch(Key::Int(i64::from(n)), 20_000).is_some());
        }
        assert!(t.used() <= SHARDS);
        t.clear(None);
        assert_eq!(t.used(), 0);
    }
}
