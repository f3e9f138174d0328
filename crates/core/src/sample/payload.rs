//! What TCP-mode content rules read of the bytes a client sent before they decided: the
//! raw payload (`req.len`, `req.payload`) and the facts of a TLS ClientHello in it
//! (`req.ssl_hello_type`, `req.ssl_ver`, `req.ssl_sni`, `req.ssl_alpn`, `req.ssl_ec_ext`,
//! `req.ssl_st_ext`), for routing TLS by name without terminating it.
//!
//! Nothing is decrypted: a ClientHello travels in clear. A fetch that needs more bytes than
//! arrived says so ([`Payload::short`]), so that the rules wait for them until `tcp-request
//! inspect-delay` ends, as HAProxy's do; once the payload is final the same fetch simply
//! finds nothing.

use crate::wire::Cursor;
use std::cell::Cell;

/// The bytes inspected so far.
#[derive(Debug)]
pub struct Payload<'a> {
    pub bytes: &'a [u8],
    /// No more will come before the rules decide (buffer full, client done, delay over).
    pub last: bool,
    /// Set by a fetch that could not give its value, or gave one that more bytes may
    /// change, while the payload is not final.
    short: Cell<bool>,
}

impl<'a> Payload<'a> {
    pub fn new(bytes: &'a [u8], last: bool) -> Payload<'a> {
        Payload {
            bytes,
            last,
            short: Cell::new(false),
        }
    }

    /// Clears the "more bytes may change this" mark before a fetch.
    pub fn reset(&self) {
        self.short.set(false);
    }

    /// Whether a fetch since [`Payload::reset`] lacked bytes that may still come.
    pub fn short(&self) -> bool {
        self.short.get()
    }

    /// Marks the current fetch as one more bytes may change (when they may still come).
    pub fn wants_more(&self) {
        if !self.last {
            self.short.set(true);
        }
    }

    /// `req.payload(OFFSET,LENGTH)`: LENGTH bytes from OFFSET (0: all from OFFSET on).
    pub fn slice(&self, offset: usize, len: usize) -> Option<&'a [u8]> {
        let end = if len == 0 {
            self.bytes.len()
        } else {
            offset.checked_add(len)?
        };
        let Some(s) = self.bytes.get(offset..end) else {
            self.wants_more();
            return None;
        };
        if len == 0 {
            self.wants_more();
        }
        Some(s)
    }

    /// `req.payload_lv`: the block whose size is the big-endian number of `size_len` bytes at
    /// `size_at`, starting after that size or at `start` (absolute, or with `relative`
    /// counted from the end of the size).
    pub fn length_value(
        &self,
        size_at: usize,
        size_len: usize,
        start: Option<(bool, i64)>,
    ) -> Option<&'a [u8]> {
        let size_bytes = self.slice(size_at, size_len)?;
        let size = size_bytes
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        let after = size_at + size_len;
        let begin = match start {
            None => after,
            Some((false, at)) => usize::try_from(at).ok()?,
            Some((true, delta)) => usize::try_from(after as i64 + delta).ok()?,
        };
        if size == 0 {
            return None;
        }
        self.slice(begin, size)
    }

    /// The ClientHello at the start of the payload, when it is one and arrived whole.
    pub fn hello(&self) -> Option<Hello<'a>> {
        match parse_hello(self.bytes) {
            Parsed::Hello(h) => Some(h),
            Parsed::Short => {
                self.wants_more();
                None
            }
            Parsed::Not => None,
        }
    }

    /// `req.ssl_hello_type`: the type of the first handshake message of a TLS record
    /// (1: ClientHello), once the whole message is in.
    pub fn hello_type(&self) -> Option<u8> {
        let b = self.bytes;
        if !matches!(b.first(), Some(0x14..=0x17 | 0xff)) {
            if b.is_empty() {
                self.wants_more();
            }
            return None;
        }
        let Some(head) = b.get(..9) else {
            self.wants_more();
            return None;
        };
        if head[1] < 3 || u16::from_be_bytes([head[3], head[4]]) < 4 {
            return None;
        }
        let len = usize::from(head[6]) << 16 | usize::from(head[7]) << 8 | usize::from(head[8]);
        if b.len() < 9 + len {
            self.wants_more();
            return None;
        }
        Some(head[5])
    }
}

/// The facts of a ClientHello that rules may read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hello<'a> {
    /// `client_version` as HAProxy gives it: major * 65536 + minor (TLS 1.2: 0x30003).
    pub version: u32,
    /// The `server_name` extension's host name.
    pub sni: Option<&'a [u8]>,
    /// The ALPN protocol names, in the client's order of preference.
    pub alpn: Vec<&'a [u8]>,
    /// The `supported_groups` (formerly elliptic curves) extension is present.
    pub ec_ext: bool,
    /// The session ticket extension: absent (0), empty (1), with a ticket (2).
    pub session_ticket: u8,
}

enum Parsed<'a> {
    Hello(Hello<'a>),
    /// The bytes so far start like a ClientHello that has not arrived whole.
    Short,
    Not,
}

/// Reads a ClientHello in the first TLS record: a handshake record (type 22, version 3.x)
/// whose message is a ClientHello (type 1), whole within the record.
fn parse_hello(b: &[u8]) -> Parsed<'_> {
    let Some(head) = b.get(..5) else {
        // What arrived so far could still be a handshake record's header.
        let plausible = matches!(b, [] | [0x16] | [0x16, 3, ..]);
        return if plausible {
            Parsed::Short
        } else {
            Parsed::Not
        };
    };
    if head[0] != 0x16 || head[1] != 3 {
        return Parsed::Not;
    }
    let record = usize::from(u16::from_be_bytes([head[3], head[4]]));
    let Some(body) = b.get(5..5 + record) else {
        return Parsed::Short;
    };
    let mut c = Cursor(body);
    let (Some(1), Some(len)) = (c.u8(), c.take(3)) else {
        return Parsed::Not;
    };
    let len = usize::from(len[0]) << 16 | usize::from(len[1]) << 8 | usize::from(len[2]);
    match c.take(len) {
        Some(msg) => hello_fields(msg).map_or(Parsed::Not, Parsed::Hello),
        // A ClientHello spread over several records is not read (HAProxy reads the first).
        None => Parsed::Not,
    }
}

fn hello_fields(msg: &[u8]) -> Option<Hello<'_>> {
    let mut c = Cursor(msg);
    let v = c.take(2)?;
    let mut hello = Hello {
        version: u32::from(v[0]) << 16 | u32::from(v[1]),
        ..Hello::default()
    };
    c.take(32)?; // random
    let session = c.vec(1)?;
    let suites = c.vec(2)?;
    let compression = c.vec(1)?;
    if session.len() > 32 || suites.len() < 2 || compression.is_empty() {
        return None;
    }
    let mut exts = Cursor(c.vec(2).unwrap_or_default());
    while !exts.0.is_empty() {
        let kind = usize::from(exts.u16()?);
        let data = exts.vec(2)?;
        match kind {
            0 => hello.sni = server_name(data),
            10 => hello.ec_ext = true,
            16 => hello.alpn = alpn(data)?,
            35 => hello.session_ticket = if data.is_empty() { 1 } else { 2 },
            _ => {}
        }
    }
    Some(hello)
}

/// The first `host_name` of a `server_name` extension.
fn server_name(data: &[u8]) -> Option<&[u8]> {
    let mut list = Cursor(Cursor(data).vec(2)?);
    while !list.0.is_empty() {
        let kind = list.u8()?;
        let name = list.vec(2)?;
        if kind == 0 && !name.is_empty() {
            return Some(name);
        }
    }
    None
}

fn alpn(data: &[u8]) -> Option<Vec<&[u8]>> {
    let mut list = Cursor(Cursor(data).vec(2)?);
    let mut names = Vec::new();
    while !list.0.is_empty() {
        names.push(list.vec(1)?);
    }
    Some(names)
}

/// What a protocol message read from a payload turned out to be (FIX, MQTT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<T> {
    Is(T),
    /// Cut short: more bytes may decide.
    More,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as a client writes it: SNI, ALPN, supported groups, an empty ticket.
    fn client_hello(sni: &str, alpn: &[&str]) -> Vec<u8> {
        let mut exts = Vec::new();
        let mut ext = |kind: u16, data: Vec<u8>| {
            exts.extend(kind.to_be_bytes());
            exts.extend((data.len() as u16).to_be_bytes());
            exts.extend(data);
        };
        let mut names = vec![0u8];
        names.extend((sni.len() as u16).to_be_bytes());
        names.extend(sni.as_bytes());
        let mut sn = (names.len() as u16).to_be_bytes().to_vec();
        sn.extend(names);
        ext(0, sn);
        ext(10, vec![0, 2, 0, 29]);
        let mut protos = Vec::new();
        for p in alpn {
            protos.push(p.len() as u8);
            protos.extend(p.as_bytes());
        }
        let mut a = (protos.len() as u16).to_be_bytes().to_vec();
        a.extend(protos);
        ext(16, a);
        ext(35, vec![]);
        let mut msg = vec![3, 3];
        msg.extend([7u8; 32]);
        msg.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        msg.extend((exts.len() as u16).to_be_bytes());
        msg.extend(exts);
        let mut hs = vec![1, 0];
        hs.extend((msg.len() as u16).to_be_bytes());
        hs.extend(msg);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn reads_a_client_hello() {
        let b = client_hello("a.example", &["h2", "http/1.1"]);
        let p = Payload::new(&b, false);
        let h = p.hello().unwrap();
        assert_eq!(h.version, 0x30003);
        assert_eq!(h.sni, Some(&b"a.example"[..]));
        assert_eq!(h.alpn, vec![&b"h2"[..], b"http/1.1"]);
        assert!(h.ec_ext);
        assert_eq!(h.session_ticket, 1);
        assert_eq!(p.hello_type(), Some(1));
        assert!(!p.short());
    }

    #[test]
    fn a_partial_hello_asks_for_more_until_the_payload_is_final() {
        let b = client_hello("a.example", &[]);
        for cut in 0..b.len() {
            let p = Payload::new(&b[..cut], false);
            assert!(p.hello().is_none() && p.short(), "cut at {cut}");
            p.reset();
            assert!(p.hello_type().is_none() && p.short(), "cut at {cut}");
            let last = Payload::new(&b[..cut], true);
            assert!(last.hello().is_none() && !last.short());
        }
    }

    #[test]
    fn other_protocols_are_not_hellos_and_ask_for_nothing() {
        for b in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            // A record header of SSL 2 (too old to be a hello), whole.
            b"\x16\x02\x00\x00\x05\x01\x00\x00\x01",
            b"SSH-2.0-x\r\n",
        ] {
            let p = Payload::new(b, false);
            assert!(p.hello().is_none() && !p.short());
            assert!(p.hello_type().is_none() && !p.short());
        }
    }

    #[test]
    fn damaged_lengths_are_refused_without_panicking() {
        let mut b = client_hello("a.example", &["h2"]);
        for i in 5..b.len() {
            let keep = b[i];
            for v in [0u8, 1, 0x7f, 0xff] {
                b[i] = v;
                let p = Payload::new(&b, true);
                let _ = p.hello();
                let _ = p.hello_type();
            }
            b[i] = keep;
        }
    }

    #[test]
    fn payload_slices() {
        let p = Payload::new(b"abcdef", false);
        assert_eq!(p.slice(1, 2), Some(&b"bc"[..]));
        assert!(!p.short());
        assert_eq!(p.slice(4, 4), None);
        assert!(p.short());
        p.reset();
        assert_eq!(p.slice(2, 0), Some(&b"cdef"[..]));
        assert!(p.short());
    }
}
