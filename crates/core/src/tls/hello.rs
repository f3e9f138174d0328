//! What a client's TLS ClientHello offered, kept for the `ssl_fc_cipherlist_*`,
//! `ssl_fc_extlist_bin`, `ssl_fc_eclist_bin`, `ssl_fc_ecformats_bin` and
//! `ssl_fc_protocol_hello_id` fetches (JA3-style fingerprints) when
//! `tune.ssl.capture-buffer-size` asks for it.
//!
//! The records a client sends first are copied as they are read (at most [`MAX_HELLO`]
//! bytes, then the copy stops) until its first handshake message is whole; that message is
//! then dissected as HAProxy 2.6 dissects it: the cipher suites (and their xxh64), the
//! extension types, the supported groups and the point formats, in one buffer of the
//! configured size filled in that order, each list cut where the buffer ends.

use std::sync::Arc;

use crate::wire::Cursor;

/// The most bytes of records kept while the ClientHello arrives (a hello is rarely over a
/// few kilobytes; a longer one is not captured).
pub const MAX_HELLO: usize = 16 * 1024 + 5 * 4;

/// What the ClientHello offered, each list as its bytes on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capture {
    /// The `legacy_version` field (0x0303 for TLS 1.2 and 1.3).
    pub protocol_version: u16,
    pub ciphers: Vec<u8>,
    /// xxh64 (seed 0) of the whole cipher suite list, however much of it is kept.
    pub ciphers_xxh64: u64,
    /// The extension types, two bytes each.
    pub extensions: Vec<u8>,
    /// The supported groups (`elliptic_curves`), two bytes each.
    pub groups: Vec<u8>,
    pub point_formats: Vec<u8>,
}

/// Copies the first records of a connection until its ClientHello is whole.
#[derive(Debug)]
pub struct Collector {
    records: Vec<u8>,
    limit: usize,
}

/// Where collecting stands after more bytes.
pub enum Collected {
    More,
    /// Done: the capture, or nothing when the first message was no ClientHello, was too
    /// long or malformed.
    Done(Option<Arc<Capture>>),
}

impl Collector {
    /// Collects for a capture buffer of `limit` bytes.
    pub fn new(limit: usize) -> Collector {
        Collector {
            records: Vec::new(),
            limit,
        }
    }

    /// Takes bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) -> Collected {
        let room = MAX_HELLO.saturating_sub(self.records.len());
        self.records
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
        match handshake_message(&self.records) {
            Some(Ok(msg)) => Collected::Done(dissect(&msg, self.limit).map(Arc::new)),
            Some(Err(())) => Collected::Done(None),
            None if self.records.len() >= MAX_HELLO => Collected::Done(None),
            None => Collected::More,
        }
    }
}

/// The first handshake message of `records` once whole (its fragments joined), an error
/// when they are not handshake records, `None` while more are needed.
fn handshake_message(mut records: &[u8]) -> Option<Result<Vec<u8>, ()>> {
    let mut msg = Vec::new();
    while records.len() >= 5 {
        if records[0] != 22 {
            return Some(Err(()));
        }
        let len = usize::from(u16::from_be_bytes([records[3], records[4]]));
        let body = records.get(5..5 + len)?;
        msg.extend_from_slice(body);
        records = &records[5 + len..];
        if msg.len() >= 4 {
            let want =
                4 + (usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]));
            if msg.len() >= want {
                msg.truncate(want);
                return Some(Ok(msg));
            }
        }
    }
    None
}

/// Reads a ClientHello message (type, length, body) as HAProxy 2.6's dissector does,
/// keeping at most `limit` bytes of lists: what it could read before a malformed part.
pub fn dissect(msg: &[u8], limit: usize) -> Option<Capture> {
    let mut r = Cursor(msg.get(4..)?);
    if msg.first() != Some(&1) {
        return None;
    }
    let protocol_version = r.u16()?;
    r.take(32)?;
    let session = r.u8()?;
    r.take(usize::from(session))?;
    let suites_len = usize::from(r.u16()?);
    let suites = r.take(suites_len)?;
    let mut c = Capture {
        protocol_version,
        ciphers: suites[..suites.len().min(limit)].to_vec(),
        ciphers_xxh64: xxhash_rust::xxh64::xxh64(suites, 0),
        ..Capture::default()
    };
    let mut used = c.ciphers.len();
    let Some(exts) = r
        .u8()
        .and_then(|n| r.take(usize::from(n)))
        .and_then(|_| r.u16())
        .and_then(|n| r.take(usize::from(n)))
    else {
        return Some(c);
    };
    let (mut groups, mut formats) = (None, None);
    let mut e = Cursor(exts);
    // HAProxy stops when four bytes or fewer are left (an empty last extension is not
    // counted): the same here, for the same fingerprints.
    while e.0.len() > 4 {
        if used + 2 > limit {
            break;
        }
        let id = [e.0[0], e.0[1]];
        c.extensions.extend_from_slice(&id);
        used += 2;
        e.take(2)?;
        let len = usize::from(e.u16()?);
        let Some(data) = e.take(len) else {
            return Some(c);
        };
        let mut d = Cursor(data);
        match u16::from_be_bytes(id) {
            0x000a => match d.u16().and_then(|n| d.take(usize::from(n))) {
                Some(list) => groups = Some(list),
                None => return Some(c),
            },
            0x000b => match d.u8().and_then(|n| d.take(usize::from(n))) {
                Some(list) => formats = Some(list),
                None => return Some(c),
            },
            _ => {}
        }
    }
    for (list, into) in [(groups, &mut c.groups), (formats, &mut c.point_formats)] {
        if let Some(list) = list {
            let n = list.len().min(limit.saturating_sub(used));
            into.extend_from_slice(&list[..n]);
            used += n;
        }
    }
    Some(c)
}

/// `list` without GREASE values (RFC 8701: both bytes equal, each `0x?A`), two bytes at a
/// time; an odd last byte is kept.
pub fn without_grease(list: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.len());
    let mut pairs = list.chunks_exact(2);
    for p in pairs.by_ref() {
        if p[0] != p[1] || p[0] & 0x0f != 0x0a {
            out.extend_from_slice(p);
        }
    }
    out.extend_from_slice(pairs.remainder());
    out
}

/// A cipher suite list (two bytes each) as OpenSSL names them, comma-separated, an
/// unknown suite as `UNKNOWN(xxxx)` (what HAProxy 2.6 with OpenSSL prints).
pub fn cipher_names(list: &[u8]) -> String {
    let mut out = String::new();
    for (i, p) in list.chunks_exact(2).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let id = u16::from_be_bytes([p[0], p[1]]);
        match OPENSSL_NAMES.iter().find(|(n, _)| *n == id) {
            Some((_, name)) => out.push_str(name),
            None => out.push_str(&format!("UNKNOWN({id:04x})")),
        }
    }
    out
}

/// The suites clients commonly offer, by IANA number, with OpenSSL's names.
const OPENSSL_NAMES: &[(u16, &str)] = &[
    (0x1301, "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256"),
    (0x1304, "TLS_AES_128_CCM_SHA256"),
    (0x1305, "TLS_AES_128_CCM_8_SHA256"),
    (0xc02b, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    (0xc02c, "ECDHE-ECDSA-AES256-GCM-SHA384"),
    (0xc02f, "ECDHE-RSA-AES128-GCM-SHA256"),
    (0xc030, "ECDHE-RSA-AES256-GCM-SHA384"),
    (0xcca8, "ECDHE-RSA-CHACHA20-POLY1305"),
    (0xcca9, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    (0xccaa, "DHE-RSA-CHACHA20-POLY1305"),
    (0x009e, "DHE-RSA-AES128-GCM-SHA256"),
    (0x009f, "DHE-RSA-AES256-GCM-SHA384"),
    (0xc023, "ECDHE-ECDSA-AES128-SHA256"),
    (0xc024, "ECDHE-ECDSA-AES256-SHA384"),
    (0xc027, "ECDHE-RSA-AES128-SHA256"),
    (0xc028, "ECDHE-RSA-AES256-SHA384"),
    (0xc009, "ECDHE-ECDSA-AES128-SHA"),
    (0xc00a, "ECDHE-ECDSA-AES256-SHA"),
    (0xc013, "ECDHE-RSA-AES128-SHA"),
    (0xc014, "ECDHE-RSA-AES256-SHA"),
    (0x0067, "DHE-RSA-AES128-SHA256"),
    (0x006b, "DHE-RSA-AES256-SHA256"),
    (0x0033, "DHE-RSA-AES128-SHA"),
    (0x0039, "DHE-RSA-AES256-SHA"),
    (0x009c, "AES128-GCM-SHA256"),
    (0x009d, "AES256-GCM-SHA384"),
    (0x003c, "AES128-SHA256"),
    (0x003d, "AES256-SHA256"),
    (0x002f, "AES128-SHA"),
    (0x0035, "AES256-SHA"),
    (0x000a, "DES-CBC3-SHA"),
    (0xc0ac, "ECDHE-ECDSA-AES128-CCM"),
    (0xc0ad, "ECDHE-ECDSA-AES256-CCM"),
    (0xc0ae, "ECDHE-ECDSA-AES128-CCM8"),
    (0xc0af, "ECDHE-ECDSA-AES256-CCM8"),
    (0xc09e, "DHE-RSA-AES128-CCM"),
    (0xc09f, "DHE-RSA-AES256-CCM"),
    (0x00ff, "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with suites, an SNI, groups and point formats, in one record.
    fn hello() -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend([7u8; 32]);
        body.push(0);
        body.extend([0, 6, 0x0a, 0x0a, 0x13, 0x01, 0xc0, 0x2f]);
        body.extend([1, 0]);
        let mut exts = Vec::new();
        exts.extend([0, 0, 0, 5, 0, 3, 0, 0, 0]);
        exts.extend([0, 0x0a, 0, 6, 0, 4, 0x2a, 0x2a, 0, 0x1d]);
        exts.extend([0, 0x0b, 0, 2, 1, 0]);
        exts.extend([0xff, 0x01, 0, 1, 0]);
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        msg.extend(body);
        let mut rec = vec![22, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
        rec.extend(msg);
        rec
    }

    #[test]
    fn dissects_as_haproxy() {
        let mut c = Collector::new(128);
        let rec = hello();
        assert!(matches!(c.push(&rec[..20]), Collected::More));
        let Collected::Done(Some(cap)) = c.push(&rec[20..]) else {
            panic!("a capture")
        };
        assert_eq!(cap.protocol_version, 0x0303);
        assert_eq!(cap.ciphers, [0x0a, 0x0a, 0x13, 0x01, 0xc0, 0x2f]);
        assert_eq!(cap.extensions, [0, 0, 0, 0x0a, 0, 0x0b, 0xff, 0x01]);
        assert_eq!(cap.groups, [0x2a, 0x2a, 0, 0x1d]);
        assert_eq!(cap.point_formats, [0]);
        assert_eq!(without_grease(&cap.ciphers), [0x13, 0x01, 0xc0, 0x2f]);
        // A small buffer: the suites cut, then nothing more fits.
        let Collected::Done(Some(small)) = Collector::new(4).push(&rec) else {
            panic!("a capture")
        };
        assert_eq!(small.ciphers, [0x0a, 0x0a, 0x13, 0x01]);
        assert!(small.extensions.is_empty() && small.groups.is_empty());
        assert_eq!(small.ciphers_xxh64, cap.ciphers_xxh64);
    }

    #[test]
    fn other_first_records_capture_nothing() {
        assert!(matches!(
            Collector::new(64).push(b"GET / HTTP/1.1\r\n\r\n"),
            Collected::Done(None)
        ));
        let mut rec = hello();
        rec[5] = 2;
        assert!(matches!(
            Collector::new(64).push(&rec),
            Collected::Done(None)
        ));
    }
}
