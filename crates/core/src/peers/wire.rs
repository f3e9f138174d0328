//! HAProxy's peers protocol on the wire, version 2.1 as HAProxy 2.6 speaks it: the
//! three-line hello and the status line of the handshake, then binary messages (a class
//! byte, a type byte, and for types of 128 and above a varint length and that many bytes).
//! Written from HAProxy's description of the protocol (`doc/peers-v2.0.txt`) and the
//! behaviour of HAProxy 2.6 as a peer.
//!
//! Invariants:
//! - Decoding never panics and never reads past its input: every length is checked, a
//!   truncated value is `None`, and a message longer than [`MAX_MESSAGE`] is refused
//!   before it is buffered.
//! - Encoding produces exactly what HAProxy 2.6 decodes: its varints, its key layouts
//!   (IPv4 and IPv6 addresses as their bytes, integers as 32-bit network-order values,
//!   strings as a varint length then the bytes, binary keys at the table's length), its
//!   data type numbers and its order of values (ascending data type).

use std::net::IpAddr;

use crate::conf::stick::{Counter, DataType, KeyType};
use crate::stick::{Key, Stored};

/// The protocol's name in the hello line, and the version sluice speaks.
pub const PROTOCOL: &str = "HAProxyS";
pub const VERSION: (u32, u32) = (2, 1);

/// The hello a peer named `local` says to peer `remote`: the protocol and version, the name
/// it calls, its own name with its process id (and a relative pid of 1, as HAProxy's).
pub fn hello(remote: &str, local: &str) -> String {
    format!(
        "{PROTOCOL} {}.{}\n{remote}\n{local} {} 1\n",
        VERSION.0,
        VERSION.1,
        std::process::id()
    )
}

/// The largest message body accepted (HAProxy's is a buffer: 16 kB by default).
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Status codes of the handshake.
pub mod status {
    /// Not a code on the wire: a call in progress, as `show peers` says.
    pub const CONNECTING: u16 = 100;
    pub const SUCCESS: u16 = 200;
    pub const TRY_AGAIN: u16 = 300;
    pub const PROTOCOL_ERROR: u16 = 501;
    pub const BAD_VERSION: u16 = 502;
    pub const BAD_HOST: u16 = 503;
    pub const UNKNOWN_PEER: u16 = 504;
}

/// Message classes and types.
pub const CLASS_CONTROL: u8 = 0;
pub const CLASS_ERROR: u8 = 1;
pub const CLASS_TABLE: u8 = 10;
pub const CLASS_RESERVED: u8 = 255;

/// Control messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    ResyncRequest = 0,
    ResyncFinished = 1,
    ResyncPartial = 2,
    ResyncConfirm = 3,
    Heartbeat = 4,
}

impl Control {
    fn of(t: u8) -> Option<Control> {
        Some(match t {
            0 => Control::ResyncRequest,
            1 => Control::ResyncFinished,
            2 => Control::ResyncPartial,
            3 => Control::ResyncConfirm,
            4 => Control::Heartbeat,
            _ => return None,
        })
    }
}

/// Error messages (the sender closes after them).
pub const ERROR_PROTOCOL: u8 = 0;
pub const ERROR_SIZE: u8 = 1;

/// Stick-table messages.
pub const UPDATE: u8 = 0x80;
pub const INC_UPDATE: u8 = 0x81;
pub const DEFINE: u8 = 0x82;
pub const SWITCH: u8 = 0x83;
pub const ACK: u8 = 0x84;
pub const UPDATE_TIMED: u8 = 0x85;
pub const INC_UPDATE_TIMED: u8 = 0x86;

/// Appends `v` as the protocol's varint: below 240 one byte; else the low bits in a first
/// byte of 240 and more, then 7 bits a byte, each but the last with its top bit set.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    if v < 240 {
        out.push(v as u8);
        return;
    }
    out.push((v as u8) | 240);
    v = (v - 240) >> 4;
    while v >= 128 {
        out.push((v as u8) | 128);
        v = (v - 128) >> 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*at`, moving past it (`None`: truncated or longer than 64 bits).
pub fn varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let first = *buf.get(*at)?;
    *at += 1;
    let mut v = u64::from(first);
    if first < 240 {
        return Some(v);
    }
    let mut shift = 4u32;
    loop {
        let b = *buf.get(*at)?;
        *at += 1;
        if shift > 60 {
            return None;
        }
        v = v.wrapping_add(u64::from(b) << shift);
        shift += 7;
        if b < 128 {
            return Some(v);
        }
    }
}

fn u32_at(buf: &[u8], at: &mut usize) -> Option<u32> {
    let b = buf.get(*at..*at + 4)?;
    *at += 4;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn bytes_at<'a>(buf: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let b = buf.get(*at..at.checked_add(n)?)?;
    *at += n;
    Some(b)
}

/// One message, its body borrowed from the buffer it was read from.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Control(Control),
    Error(u8),
    /// A stick-table message: its type and body.
    Table(u8, &'a [u8]),
    /// A message of a class or type this side does not know (skipped, as HAProxy does).
    Unknown,
}

/// Why the bytes on a link are not the protocol.
#[derive(Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The reserved class, a bad length: HAProxy answers with a protocol error.
    Protocol,
    /// A message longer than [`MAX_MESSAGE`].
    TooBig,
}

/// Splits the first message off `buf`: the message and the bytes it took, `Ok(None)` when
/// it is not all there yet.
pub fn split(buf: &[u8]) -> Result<Option<(Message<'_>, usize)>, Malformed> {
    let (Some(&class), Some(&kind)) = (buf.first(), buf.get(1)) else {
        return Ok(None);
    };
    if class == CLASS_RESERVED {
        return Err(Malformed::Protocol);
    }
    let mut at = 2;
    let body: &[u8] = if kind >= 128 {
        let Some(len) = varint(buf, &mut at) else {
            // A varint is at most 10 bytes: longer and still unfinished is not one.
            return match buf.len() > 12 {
                true => Err(Malformed::Protocol),
                false => Ok(None),
            };
        };
        let len = usize::try_from(len).map_err(|_| Malformed::TooBig)?;
        if len > MAX_MESSAGE {
            return Err(Malformed::TooBig);
        }
        match buf.get(at..at + len) {
            Some(b) => {
                at += len;
                b
            }
            None => return Ok(None),
        }
    } else {
        &[]
    };
    let msg = match class {
        CLASS_CONTROL => Control::of(kind).map_or(Message::Unknown, Message::Control),
        CLASS_ERROR => Message::Error(kind),
        CLASS_TABLE => Message::Table(kind, body),
        _ => Message::Unknown,
    };
    Ok(Some((msg, at)))
}

/// Appends a message without a body.
pub fn put_short(out: &mut Vec<u8>, class: u8, kind: u8) {
    out.extend_from_slice(&[class, kind]);
}

/// Appends a stick-table message with its body.
fn put_table(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.extend_from_slice(&[CLASS_TABLE, kind]);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// A table's name on the wire: its proxy's name, or for a table of the section itself
/// (`SECTION/TABLE`) what follows the section's name, slash included (HAProxy's).
pub fn table_name(table: &str, section: &str) -> String {
    match table.strip_prefix(section).filter(|r| r.starts_with('/')) {
        Some(rest) => rest.to_string(),
        None => table.to_string(),
    }
}

/// How a data type's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Std {
    /// One varint (signed, unsigned, 64-bit: all the same on the wire).
    Int,
    /// A frequency counter: the age of its current period (ms), its two counts.
    Rate,
    /// A dictionary entry (`server_key`): a varint length and that many bytes.
    Dict,
}

/// The wire form of data type `t` (HAProxy's numbering), and whether it is an array.
fn std_of(t: u8) -> Option<(Std, bool)> {
    Some(match t {
        0..=2 | 4 | 6 | 7 | 9 | 11 | 13 | 15 | 17 | 20 => (Std::Int, false),
        3 | 5 | 8 | 10 | 12 | 14 | 16 | 18 | 21 => (Std::Rate, false),
        19 => (Std::Dict, false),
        22 | 23 => (Std::Int, true),
        24 => (Std::Rate, true),
        _ => return None,
    })
}

/// The network key type and key length of a table, as its definition announces them.
fn key_layout(k: KeyType) -> (u64, u64) {
    match k {
        KeyType::Integer => (2, 4),
        KeyType::Ip => (4, 4),
        KeyType::Ipv6 => (5, 16),
        // HAProxy counts the terminating zero of a string key.
        KeyType::String(len) => (6, len as u64 + 1),
        KeyType::Binary(len) => (7, len as u64),
    }
}

/// What a table's updates carry: which data types, in order, with their array sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns {
    /// Data types (HAProxy's numbers), ascending, with their element count (1 for a
    /// plain type).
    pub types: Vec<(u8, u8)>,
}

impl Columns {
    /// The columns of a table storing `store`.
    pub fn of(store: &[DataType]) -> Columns {
        let mut types: Vec<(u8, u8)> = Vec::new();
        for d in store {
            let (t, _) = d.counter.data_type();
            match types.iter_mut().find(|(x, _)| *x == t) {
                Some((_, n)) => *n += 1,
                None => types.push((t, 1)),
            }
        }
        types.sort_unstable();
        Columns { types }
    }

    /// The bit field of the data types, as a definition announces it.
    pub fn bits(&self) -> u64 {
        self.types.iter().fold(0, |b, (t, _)| b | 1 << t)
    }
}

/// A table definition (a peer names each table it shares once per connection, before its
/// updates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    /// The sender's id for the table.
    pub id: u64,
    pub name: String,
    pub key_type: u64,
    pub key_len: u64,
    pub columns: Columns,
    /// The entries' lifetime (ms), when announced.
    pub expire: Option<u64>,
}

/// Appends the definition of a table: `id`, its name on the network, its key, its columns
/// (with each rate's period and each array's size) and its entries' lifetime.
pub fn put_define(
    out: &mut Vec<u8>,
    id: u64,
    name: &str,
    key: KeyType,
    store: &[DataType],
    expire_ms: u64,
) {
    let mut body = Vec::with_capacity(64);
    put_varint(&mut body, id);
    put_varint(&mut body, name.len() as u64);
    body.extend_from_slice(name.as_bytes());
    let (kt, kl) = key_layout(key);
    put_varint(&mut body, kt);
    put_varint(&mut body, kl);
    let columns = Columns::of(store);
    put_varint(&mut body, columns.bits());
    put_varint(&mut body, expire_ms);
    for &(t, n) in &columns.types {
        let Some((std, array)) = std_of(t) else {
            continue;
        };
        let period = || {
            store
                .iter()
                .find(|d| d.counter.data_type().0 == t)
                .and_then(|d| d.period)
                .map_or(0, |p| p.as_millis() as u64)
        };
        if array || std == Std::Rate {
            put_varint(&mut body, u64::from(t));
        }
        if array {
            put_varint(&mut body, u64::from(n));
        }
        if std == Std::Rate {
            put_varint(&mut body, period());
        }
    }
    put_table(out, DEFINE, &body);
}

/// Reads a table definition.
pub fn define(body: &[u8]) -> Option<Definition> {
    let mut at = 0;
    let id = varint(body, &mut at)?;
    let len = usize::try_from(varint(body, &mut at)?).ok()?;
    let name = String::from_utf8_lossy(bytes_at(body, &mut at, len)?).into_owned();
    let key_type = varint(body, &mut at)?;
    let key_len = varint(body, &mut at)?;
    let bits = varint(body, &mut at)?;
    let mut columns = Columns::default();
    for t in 0..64u8 {
        if bits & (1 << t) != 0 {
            columns.types.push((t, 1));
        }
    }
    // Older peers stop here (no lifetime, no parameters: no arrays then).
    let expire = varint(body, &mut at);
    if expire.is_some() {
        for (t, n) in columns.types.iter_mut() {
            let (std, array) = std_of(*t)?;
            // Each type with parameters repeats its number before them.
            if (array || std == Std::Rate) && varint(body, &mut at)? != u64::from(*t) {
                return None;
            }
            if array {
                *n = u8::try_from(varint(body, &mut at)?).ok()?;
            }
            if std == Std::Rate {
                varint(body, &mut at)?;
            }
        }
    }
    Some(Definition {
        id,
        name,
        key_type,
        key_len,
        columns,
        expire,
    })
}

/// Appends a switch to the sender's table `id` (its updates follow).
pub fn put_switch(out: &mut Vec<u8>, id: u64) {
    let mut body = Vec::with_capacity(5);
    put_varint(&mut body, id);
    put_table(out, SWITCH, &body);
}

/// Appends the acknowledgement of the updates of the receiver's table `id` up to `update`.
pub fn put_ack(out: &mut Vec<u8>, id: u64, update: u32) {
    let mut body = Vec::with_capacity(9);
    put_varint(&mut body, id);
    body.extend_from_slice(&update.to_be_bytes());
    put_table(out, ACK, &body);
}

/// Reads an acknowledgement: the table (the receiver's id) and the update.
pub fn ack(body: &[u8]) -> Option<(u64, u32)> {
    let mut at = 0;
    Some((varint(body, &mut at)?, u32_at(body, &mut at)?))
}

/// One entry's update as sent or received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// Its update id (`None`: the previous one's plus one).
    pub id: Option<u32>,
    /// Its time left (ms), when sent.
    pub expire: Option<u32>,
    pub key: Key,
    /// The values it carries, in column order.
    pub values: Vec<(Counter, Stored)>,
}

/// Appends an update of table key type `key_type` over `columns`: values the entry does
/// not have are sent as zero (each column must be present).
pub fn put_update(out: &mut Vec<u8>, key_type: KeyType, columns: &Columns, u: &Update) {
    let mut body = Vec::with_capacity(64);
    if let Some(id) = u.id {
        body.extend_from_slice(&id.to_be_bytes());
    }
    if let Some(e) = u.expire {
        body.extend_from_slice(&e.to_be_bytes());
    }
    put_key(&mut body, key_type, &u.key);
    for &(t, n) in &columns.types {
        let Some((std, _)) = std_of(t) else { continue };
        for i in 0..n {
            let v = Counter::of_data_type(t, i)
                .and_then(|c| u.values.iter().find(|(k, _)| *k == c))
                .map(|(_, v)| *v);
            match (std, v) {
                (Std::Int, Some(Stored::Count(n))) => put_varint(&mut body, n),
                (Std::Rate, Some(Stored::Rate { age, curr, prev })) => {
                    put_varint(&mut body, age);
                    put_varint(&mut body, curr);
                    put_varint(&mut body, prev);
                }
                (Std::Rate, _) => body.extend_from_slice(&[0, 0, 0]),
                _ => body.push(0),
            }
        }
    }
    let kind = match (u.id.is_some(), u.expire.is_some()) {
        (true, false) => UPDATE,
        (false, false) => INC_UPDATE,
        (true, true) => UPDATE_TIMED,
        (false, true) => INC_UPDATE_TIMED,
    };
    put_table(out, kind, &body);
}

fn put_key(out: &mut Vec<u8>, t: KeyType, key: &Key) {
    match (t, key) {
        (KeyType::Ip, Key::Ip(IpAddr::V4(a))) => out.extend_from_slice(&a.octets()),
        (KeyType::Ipv6, Key::Ip(IpAddr::V6(a))) => out.extend_from_slice(&a.octets()),
        (KeyType::Ip, Key::Ip(IpAddr::V6(a))) => {
            out.extend_from_slice(&a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()))
        }
        (KeyType::Ipv6, Key::Ip(IpAddr::V4(a))) => {
            out.extend_from_slice(&a.to_ipv6_mapped().octets())
        }
        (KeyType::Integer, Key::Int(n)) => out.extend_from_slice(&(*n as u32).to_be_bytes()),
        (KeyType::String(_), Key::Bytes(b)) => {
            put_varint(out, b.len() as u64);
            out.extend_from_slice(b);
        }
        (KeyType::Binary(len), Key::Bytes(b)) => {
            let mut k = b.clone();
            k.resize(len, 0);
            out.extend_from_slice(&k);
        }
        // A key of another type than its table's is never made.
        (_, _) => out.extend_from_slice(&[0; 4]),
    }
}

/// Reads an update of a table with key type `key_type`, whose values follow the sender's
/// `columns`. Values of data types this side does not keep (`server_key`) are skipped.
pub fn update(
    body: &[u8],
    (with_id, timed): (bool, bool),
    key_type: KeyType,
    columns: &Columns,
) -> Option<Update> {
    let mut at = 0;
    let id = match with_id {
        true => Some(u32_at(body, &mut at)?),
        false => None,
    };
    let expire = match timed {
        true => Some(u32_at(body, &mut at)?),
        false => None,
    };
    let key = match key_type {
        KeyType::Ip => {
            let b = bytes_at(body, &mut at, 4)?;
            Key::Ip(IpAddr::from([b[0], b[1], b[2], b[3]]))
        }
        KeyType::Ipv6 => {
            let b: [u8; 16] = bytes_at(body, &mut at, 16)?.try_into().ok()?;
            Key::Ip(IpAddr::from(b))
        }
        KeyType::Integer => Key::Int(i64::from(u32_at(body, &mut at)?)),
        KeyType::String(len) => {
            let n = usize::try_from(varint(body, &mut at)?).ok()?;
            let b = bytes_at(body, &mut at, n)?;
            Key::Bytes(b[..n.min(len)].to_vec())
        }
        KeyType::Binary(len) => Key::Bytes(bytes_at(body, &mut at, len)?.to_vec()),
    };
    let mut values = Vec::new();
    for &(t, n) in &columns.types {
        let (std, _) = std_of(t)?;
        for i in 0..n {
            let v = match std {
                Std::Int => Stored::Count(varint(body, &mut at)?),
                Std::Rate => Stored::Rate {
                    age: varint(body, &mut at)?,
                    curr: varint(body, &mut at)?,
                    prev: varint(body, &mut at)?,
                },
                Std::Dict => {
                    let n = usize::try_from(varint(body, &mut at)?).ok()?;
                    bytes_at(body, &mut at, n)?;
                    continue;
                }
            };
            if let Some(c) = Counter::of_data_type(t, i) {
                values.push((c, v));
            }
        }
    }
    Some(Update {
        id,
        expire,
        key,
        values,
    })
}

/// The key type a definition announces, if it is the one of a table keyed by `mine`
/// (type and length must both match, as HAProxy requires).
pub fn same_key(d: &Definition, mine: KeyType) -> bool {
    key_layout(mine) == (d.key_type, d.key_len)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn varints_are_haproxys() {
        // The boundaries of HAProxy's encoding, each at its length.
        for (v, len) in [
            (0u64, 1),
            (239, 1),
            (240, 2),
            (2287, 2),
            (2288, 3),
            (264_431, 3),
            (264_432, 4),
            (33_818_863, 4),
            (33_818_864, 5),
            (4_328_786_159, 5),
            (4_328_786_160, 6),
            (u64::MAX, 10),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), len, "{v}");
            let mut at = 0;
            assert_eq!(varint(&out, &mut at), Some(v));
            assert_eq!(at, len);
            // Any shorter prefix is truncated.
            for cut in 0..len {
                assert_eq!(varint(&out[..cut], &mut 0), None);
            }
        }
        // 240 is 0xf0 then 0x00; 300 is 0xfc 0x03 (300 - 240 = 60 = 3 << 4 | 12).
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xfc, 0x03]);
    }

    #[test]
    fn a_definition_and_an_update_read_back() {
        let store = [
            DataType {
                counter: Counter::Gpc0,
                period: None,
            },
            DataType {
                counter: Counter::HttpReqRate,
                period: Some(Duration::from_secs(10)),
            },
            DataType {
                counter: Counter::ConnCnt,
                period: None,
            },
        ];
        let mut out = Vec::new();
        put_define(&mut out, 1, "web", KeyType::String(32), &store, 30_000);
        let (Message::Table(DEFINE, body), used) = split(&out).unwrap().unwrap() else {
            panic!()
        };
        assert_eq!(used, out.len());
        let d = define(body).unwrap();
        assert_eq!((d.id, d.name.as_str()), (1, "web"));
        assert_eq!((d.key_type, d.key_len, d.expire), (6, 33, Some(30_000)));
        assert_eq!(d.columns.types, [(2, 1), (4, 1), (10, 1)]);
        assert!(same_key(&d, KeyType::String(32)));
        let u = Update {
            id: Some(7),
            expire: None,
            key: Key::Bytes(b"alice".to_vec()),
            values: vec![
                (Counter::Gpc0, Stored::Count(3)),
                (
                    Counter::HttpReqRate,
                    Stored::Rate {
                        age: 250,
                        curr: 4,
                        prev: 1,
                    },
                ),
            ],
        };
        let mut out = Vec::new();
        put_update(&mut out, KeyType::String(32), &d.columns, &u);
        let (Message::Table(UPDATE, body), _) = split(&out).unwrap().unwrap() else {
            panic!()
        };
        let back = update(body, (true, false), KeyType::String(32), &d.columns).unwrap();
        assert_eq!(back.key, u.key);
        assert_eq!(
            back.values,
            [
                (Counter::Gpc0, Stored::Count(3)),
                (Counter::ConnCnt, Stored::Count(0)),
                (
                    Counter::HttpReqRate,
                    Stored::Rate {
                        age: 250,
                        curr: 4,
                        prev: 1
                    }
                ),
            ]
        );
    }

    #[test]
    fn any_bytes_decode_without_panic() {
        // Every prefix and every byte flipped of valid messages, and noise.
        let mut out = Vec::new();
        put_define(&mut out, 3, "t", KeyType::Ipv6, &[], 0);
        put_ack(&mut out, 3, 99);
        put_switch(&mut out, 3);
        put_short(&mut out, CLASS_CONTROL, Control::Heartbeat as u8);
        let columns = Columns {
            types: vec![(0, 1), (19, 1), (24, 3)],
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for i in 0..out.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = out.clone();
                b[i] ^= flip;
                let _ = split(&b);
                let _ = define(&b[i..]);
                let _ = update(&b[i..], (true, true), KeyType::String(8), &columns);
                let _ = update(&b[i..], (false, false), KeyType::Binary(4), &columns);
            }
            let _ = split(&out[..i]);
        }
        for _ in 0..2000 {
            let n = (seed % 40) as usize;
            let noise: Vec<u8> = (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = split(&noise);
            let _ = define(&noise);
            let _ = ack(&noise);
            let _ = update(&noise, (true, false), KeyType::Ip, &columns);
        }
    }

    #[test]
    fn a_message_too_big_is_refused_before_it_is_read() {
        let mut out = vec![CLASS_TABLE, UPDATE];
        put_varint(&mut out, (MAX_MESSAGE + 1) as u64);
        assert_eq!(split(&out), Err(Malformed::TooBig));
        assert_eq!(split(&[CLASS_RESERVED, 0]), Err(Malformed::Protocol));
        assert_eq!(split(&[CLASS_TABLE]), Ok(None));
    }
}
