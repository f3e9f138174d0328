//! HAProxy's PROXY protocol, versions 1 (one text line) and 2 (binary, with TLVs): the
//! header a load balancer in front puts before a connection's first byte to tell who the
//! client is (`bind ... accept-proxy`, `tcp-request connection expect-proxy layer4`), and
//! the one sluice puts before its own connections to servers (`send-proxy`,
//! `send-proxy-v2`, `proxy-v2-options`).
//!
//! Invariants: [`parse`] reads at most [`MAX_HEADER`] bytes and says exactly how many the
//! header took, so that not one byte after it is consumed; anything that departs from the
//! specification (a family that does not match its addresses, a port with a sign, a TLV
//! that runs past the header, a CRC32C that does not match) is refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::conf::backend::{SendProxy, ServerOption, ServerOpts};

/// The server options that make sluice send a header: `send-proxy` (v1), `send-proxy-v2`,
/// `send-proxy-v2-ssl` (with the `ssl` TLV), `send-proxy-v2-ssl-cn` (and the client
/// certificate's CN), `proxy-v2-options LIST` (v2 TLVs: `ssl`, `cert-cn`, `ssl-cipher`,
/// `cert-sig`, `cert-key`, `authority`, `crc32c`, `unique-id`).
pub const SERVER_OPTIONS: &[ServerOption] = &[
    ServerOption {
        name: "send-proxy",
        help: "send a PROXY protocol v1 header (the client's addresses) before the request",
        args: 0,
        parse: |o, _| {
            o.send_proxy = Some(SendProxy::default());
            Ok(())
        },
    },
    ServerOption {
        name: "send-proxy-v2",
        help: "send a PROXY protocol v2 header before the request",
        args: 0,
        parse: |o, _| {
            v2_opts(o);
            Ok(())
        },
    },
    ServerOption {
        name: "send-proxy-v2-ssl",
        help: "send a PROXY protocol v2 header with the client connection's TLS facts",
        args: 0,
        parse: |o, _| {
            v2_opts(o).ssl = true;
            Ok(())
        },
    },
    ServerOption {
        name: "send-proxy-v2-ssl-cn",
        help: "as send-proxy-v2-ssl, with the client certificate's common name",
        args: 0,
        parse: |o, _| {
            let s = v2_opts(o);
            s.ssl = true;
            s.cert_cn = true;
            Ok(())
        },
    },
    ServerOption {
        name: "proxy-v2-options",
        help: "LIST: the TLVs a PROXY v2 header carries (authority, crc32c, unique-id, ssl, cert-cn, ...)",
        args: 1,
        parse: |o, a| {
            let s = v2_opts(o);
            for opt in a[0].split(',') {
                match opt {
                    "ssl" => s.ssl = true,
                    "cert-cn" => s.cert_cn = true,
                    "ssl-cipher" => s.cipher = true,
                    "cert-sig" => s.cert_sig = true,
                    "cert-key" => s.cert_key = true,
                    "authority" => s.authority = true,
                    "crc32c" => s.crc32c = true,
                    "unique-id" => s.unique_id = true,
                    other => return Err(format!("unknown proxy-v2-options '{other}' (expects ssl, cert-cn, ssl-cipher, cert-sig, cert-key, authority, crc32c, unique-id)")),
                }
            }
            Ok(())
        },
    },
];

/// The server's v2 settings, made v2 (an earlier `send-proxy` included).
fn v2_opts(o: &mut ServerOpts) -> &mut SendProxy {
    let s = o.send_proxy.get_or_insert_with(SendProxy::default);
    s.v2 = true;
    s
}

/// What a header to a server tells of the client.
#[derive(Debug, Clone, Default)]
pub struct ClientFacts {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The client's TLS session: its SNI, version (`TLSv1.3`), suite, and certificate's
    /// subject (`/CN=...`), when it was TLS.
    pub tls: Option<TlsFacts>,
    pub unique_id: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct TlsFacts {
    pub sni: Option<String>,
    pub version: &'static str,
    pub cipher: &'static str,
    pub subject: Option<String>,
}

/// The header for a server with options `o`, for the client `c`.
pub fn header_for(o: &SendProxy, c: &ClientFacts) -> Vec<u8> {
    let (Some(src), Some(dst)) = (c.src, c.dst) else {
        return match o.v2 {
            true => v2_local(),
            false => b"PROXY UNKNOWN\r\n".to_vec(),
        };
    };
    if !o.v2 {
        return v1_header(src, dst);
    }
    let mut tlvs = Vec::new();
    if o.authority {
        if let Some(sni) = c.tls.as_ref().and_then(|t| t.sni.as_ref()) {
            tlvs.push((tlv::AUTHORITY, sni.as_bytes().to_vec()));
        }
    }
    if o.unique_id {
        if let Some(id) = &c.unique_id {
            tlvs.push((tlv::UNIQUE_ID, id.as_bytes().to_vec()));
        }
    }
    if o.ssl || o.cert_cn || o.cipher {
        tlvs.push((tlv::SSL, ssl_tlv(o, c.tls.as_ref())));
    }
    v2_header(src, dst, &tlvs, o.crc32c)
}

/// The `PP2_TYPE_SSL` TLV: client flags (1: TLS, 2: a certificate on the connection, 4: on
/// the session), the verify result (0: verified), then sub-TLVs.
fn ssl_tlv(o: &SendProxy, tls: Option<&TlsFacts>) -> Vec<u8> {
    let Some(t) = tls else {
        return vec![0, 0, 0, 0, 1];
    };
    let cn = t
        .subject
        .as_deref()
        .and_then(|s| s.split('/').find_map(|part| part.strip_prefix("CN=")));
    let flags = 0x01 | if t.subject.is_some() { 0x06 } else { 0 };
    let mut v = vec![flags, 0, 0, 0, 0];
    let mut sub = |kind: u8, value: &[u8]| {
        v.push(kind);
        v.extend((value.len() as u16).to_be_bytes());
        v.extend(value);
    };
    sub(tlv::SSL_VERSION, t.version.as_bytes());
    if o.cert_cn {
        if let Some(cn) = cn {
            sub(tlv::SSL_CN, cn.as_bytes());
        }
    }
    if o.cipher {
        sub(tlv::SSL_CIPHER, t.cipher.as_bytes());
    }
    v
}

/// A v2 `LOCAL` header (the connection's own addresses stand).
fn v2_local() -> Vec<u8> {
    let mut h = SIG.to_vec();
    h.extend([0x20, 0x00, 0, 0]);
    h
}

/// The v2 signature.
const SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 line, CRLF included, as the specification bounds it.
const MAX_V1: usize = 107;
/// The longest header accepted (v2 with its TLVs).
pub const MAX_HEADER: usize = 4096;

/// v2 TLV types.
pub mod tlv {
    pub const ALPN: u8 = 0x01;
    pub const AUTHORITY: u8 = 0x02;
    pub const CRC32C: u8 = 0x03;
    pub const UNIQUE_ID: u8 = 0x05;
    pub const SSL: u8 = 0x20;
    pub const SSL_VERSION: u8 = 0x21;
    pub const SSL_CN: u8 = 0x22;
    pub const SSL_CIPHER: u8 = 0x23;
    pub const SSL_SIG_ALG: u8 = 0x24;
    pub const SSL_KEY_ALG: u8 = 0x25;
}

/// What a received header said of the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxied {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// TLVs (v2): the ALPN, the authority (the SNI the sender saw), the unique id.
    pub alpn: Option<Box<[u8]>>,
    pub authority: Option<Box<[u8]>>,
    pub unique_id: Option<Box<[u8]>>,
}

/// The result of reading the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A header may still be completed by more bytes.
    Incomplete,
    /// A header of `len` bytes; `LOCAL` and `UNKNOWN` headers carry no addresses.
    Header {
        len: usize,
        proxied: Proxied,
    },
    Invalid(&'static str),
}

/// Reads a PROXY header (v1 or v2) at the start of `b`.
pub fn parse(b: &[u8]) -> Parsed {
    if b.len() < SIG.len() && (SIG.starts_with(b) || b"PROXY ".starts_with(&b[..b.len().min(6)])) {
        return Parsed::Incomplete;
    }
    if b.starts_with(SIG) {
        return v2(b);
    }
    if b.starts_with(b"PROXY ") {
        return v1(b);
    }
    Parsed::Invalid(NOT_A_HEADER)
}

const NOT_A_HEADER: &str = "not a PROXY protocol header";
const OTHER_VERSION: &str = "v2 header of another version";
const UNKNOWN_PROTOCOL: &str = "v1 header with an unknown protocol or missing fields";

/// Why a client's PROXY header was not read, in HAProxy's terms (`CO_ER_PRX_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// The connection closed before any byte.
    Closed,
    /// It closed within the header.
    Truncated,
    /// It broke (a reset).
    Broken,
    /// What came is not a PROXY header (nor its version 2).
    NotHeader,
    /// A version 1 header names a protocol other than TCP4, TCP6 or UNKNOWN.
    BadProtocol,
    /// Any other flaw in the header.
    Bad,
}

impl HeaderError {
    /// The kind of `Parsed::Invalid(why)`.
    pub fn of_invalid(why: &str) -> HeaderError {
        match why {
            NOT_A_HEADER | OTHER_VERSION => HeaderError::NotHeader,
            UNKNOWN_PROTOCOL => HeaderError::BadProtocol,
            _ => HeaderError::Bad,
        }
    }
}

fn v1(b: &[u8]) -> Parsed {
    let window = &b[..b.len().min(MAX_V1)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if b.len() >= MAX_V1 {
            Parsed::Invalid("v1 header longer than 107 bytes")
        } else if window.contains(&b'\n') || window.contains(&b'\r') && !window.ends_with(b"\r") {
            Parsed::Invalid("v1 header with a stray CR or LF")
        } else {
            Parsed::Incomplete
        };
    };
    let Ok(line) = std::str::from_utf8(&b[6..end]) else {
        return Parsed::Invalid("v1 header is not text");
    };
    let words: Vec<&str> = line.split(' ').collect();
    let proxied = match words.as_slice() {
        ["UNKNOWN", ..] => Proxied::default(),
        [proto @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            let v6 = *proto == "TCP6";
            let ip = |s: &str| match s.parse::<IpAddr>() {
                Ok(a @ IpAddr::V4(_)) if !v6 => Some(a),
                Ok(a @ IpAddr::V6(_)) if v6 => Some(a),
                _ => None,
            };
            let port = |s: &str| {
                (!s.is_empty() && s.len() <= 5 && s.bytes().all(|c| c.is_ascii_digit()))
                    .then(|| s.parse::<u16>().ok())
                    .flatten()
            };
            match (ip(src), ip(dst), port(sport), port(dport)) {
                (Some(s), Some(d), Some(sp), Some(dp)) => Proxied {
                    src: Some(SocketAddr::new(s, sp)),
                    dst: Some(SocketAddr::new(d, dp)),
                    ..Proxied::default()
                },
                _ => return Parsed::Invalid("v1 header with a bad address or port"),
            }
        }
        _ => return Parsed::Invalid(UNKNOWN_PROTOCOL),
    };
    Parsed::Header {
        len: end + 2,
        proxied,
    }
}

fn v2(b: &[u8]) -> Parsed {
    let Some(head) = b.get(..16) else {
        return Parsed::Incomplete;
    };
    let (ver_cmd, fam) = (head[12], head[13]);
    if ver_cmd >> 4 != 2 {
        return Parsed::Invalid(OTHER_VERSION);
    }
    let len = 16 + usize::from(u16::from_be_bytes([head[14], head[15]]));
    if len > MAX_HEADER {
        return Parsed::Invalid("v2 header too long");
    }
    let Some(all) = b.get(..len) else {
        return Parsed::Incomplete;
    };
    let body = &all[16..];
    let local = match ver_cmd & 0xf {
        0 => true,
        1 => false,
        _ => return Parsed::Invalid("v2 header with an unknown command"),
    };
    let (addrs, rest) = match fam {
        0x00 => (None, body),
        0x11 if body.len() >= 12 => {
            let ip = |o: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    body[o],
                    body[o + 1],
                    body[o + 2],
                    body[o + 3],
                ))
            };
            (
                Some((ip(0), ip(4), port(&body[8..]), port(&body[10..]))),
                &body[12..],
            )
        }
        0x21 if body.len() >= 36 => {
            let ip = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&body[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            (
                Some((ip(0), ip(16), port(&body[32..]), port(&body[34..]))),
                &body[36..],
            )
        }
        0x11 | 0x21 => return Parsed::Invalid("v2 header shorter than its addresses"),
        _ if local => (None, &body[body.len()..]),
        _ => return Parsed::Invalid("v2 header of an unsupported family"),
    };
    let mut proxied = Proxied::default();
    if !local {
        match addrs {
            Some((s, d, sp, dp)) => {
                proxied.src = Some(SocketAddr::new(s, sp));
                proxied.dst = Some(SocketAddr::new(d, dp));
            }
            None => return Parsed::Invalid("v2 PROXY command without addresses"),
        }
    }
    if let Err(e) = tlvs(all, len - rest.len(), &mut proxied) {
        return Parsed::Invalid(e);
    }
    if local {
        proxied = Proxied::default();
    }
    Parsed::Header { len, proxied }
}

fn port(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Reads the TLVs of `header` from `at`, checking a CRC32C one over the whole header.
fn tlvs(header: &[u8], mut at: usize, p: &mut Proxied) -> Result<(), &'static str> {
    while at < header.len() {
        let Some(&[kind, hi, lo]) = header.get(at..at + 3) else {
            return Err("v2 TLV cut short");
        };
        let n = usize::from(u16::from_be_bytes([hi, lo]));
        let Some(value) = header.get(at + 3..at + 3 + n) else {
            return Err("v2 TLV longer than the header");
        };
        match kind {
            tlv::ALPN => p.alpn = Some(value.into()),
            tlv::AUTHORITY => p.authority = Some(value.into()),
            tlv::UNIQUE_ID => p.unique_id = Some(value.into()),
            tlv::CRC32C => {
                let [a, b, c, d] = value else {
                    return Err("v2 CRC32C TLV of a wrong size");
                };
                let mut zeroed = header.to_vec();
                zeroed[at + 3..at + 7].fill(0);
                if crc32c::crc32c(&zeroed) != u32::from_be_bytes([*a, *b, *c, *d]) {
                    return Err("v2 header whose CRC32C does not match");
                }
            }
            _ => {}
        }
        at += 3 + n;
    }
    Ok(())
}

/// A v1 header for a connection from `src` to `dst` (`UNKNOWN` when their families
/// differ).
pub fn v1_header(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (src, dst) = (plain(src), plain(dst));
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            format!("PROXY TCP4 {s} {d} {} {}\r\n", src.port(), dst.port()).into_bytes()
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            format!("PROXY TCP6 {s} {d} {} {}\r\n", src.port(), dst.port()).into_bytes()
        }
        _ => b"PROXY UNKNOWN\r\n".to_vec(),
    }
}

/// A v2 header with the TLVs given (`(type, value)`), and a CRC32C over it when `crc`.
pub fn v2_header(src: SocketAddr, dst: SocketAddr, tlvs: &[(u8, Vec<u8>)], crc: bool) -> Vec<u8> {
    let (src, dst) = (plain(src), plain(dst));
    let mut h = SIG.to_vec();
    h.push(0x21);
    let addrs: Vec<u8> = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.push(0x11);
            [&s.octets()[..], &d.octets()].concat()
        }
        (s, d) => {
            h.push(0x21);
            [&v6(s).octets()[..], &v6(d).octets()].concat()
        }
    };
    h.extend([0, 0]);
    h.extend(addrs);
    h.extend(src.port().to_be_bytes());
    h.extend(dst.port().to_be_bytes());
    for (kind, value) in tlvs {
        h.push(*kind);
        h.extend((value.len() as u16).to_be_bytes());
        h.extend(value);
    }
    let crc_at = crc.then(|| {
        h.extend([tlv::CRC32C, 0, 4, 0, 0, 0, 0]);
        h.len() - 4
    });
    let len = (h.len() - 16) as u16;
    h[14..16].copy_from_slice(&len.to_be_bytes());
    if let Some(at) = crc_at {
        let sum = crc32c::crc32c(&h);
        h[at..at + 4].copy_from_slice(&sum.to_be_bytes());
    }
    h
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn plain(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v) => v
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    }
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_round_trip_and_prefixes() {
        let h = v1_header(a("192.0.2.1:5000"), a("198.51.100.2:443"));
        assert_eq!(h, b"PROXY TCP4 192.0.2.1 198.51.100.2 5000 443\r\n");
        let mut wire = h.clone();
        wire.extend(b"GET / HTTP/1.1\r\n");
        match parse(&wire) {
            Parsed::Header { len, proxied } => {
                assert_eq!(len, h.len());
                assert_eq!(proxied.src, Some(a("192.0.2.1:5000")));
                assert_eq!(proxied.dst, Some(a("198.51.100.2:443")));
            }
            other => panic!("{other:?}"),
        }
        for cut in 0..h.len() {
            assert_eq!(parse(&h[..cut]), Parsed::Incomplete, "cut at {cut}");
        }
        let h6 = v1_header(a("[2001:db8::1]:1"), a("[2001:db8::2]:2"));
        assert!(matches!(parse(&h6), Parsed::Header { .. }));
        assert!(matches!(
            parse(b"PROXY UNKNOWN\r\n"),
            Parsed::Header { len: 15, .. }
        ));
    }

    #[test]
    fn v1_malformed() {
        for bad in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.2 +5000 443\r\n"[..],
            b"PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 70000 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1  198.51.100.2 1 2\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1 2\n",
            b"GET / HTTP/1.1\r\n",
        ] {
            assert!(
                matches!(parse(bad), Parsed::Invalid(_)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"PROXY ".to_vec(), vec![b'1'; 200]].concat();
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
    }

    #[test]
    fn v2_round_trip_with_tlvs_and_crc() {
        let tlvs = vec![
            (tlv::AUTHORITY, b"a.example".to_vec()),
            (tlv::UNIQUE_ID, b"id-1".to_vec()),
        ];
        for (src, dst) in [
            (a("192.0.2.1:5000"), a("198.51.100.2:443")),
            (a("[2001:db8::1]:1"), a("[2001:db8::2]:2")),
        ] {
            let h = v2_header(src, dst, &tlvs, true);
            match parse(&h) {
                Parsed::Header { len, proxied } => {
                    assert_eq!(len, h.len());
                    assert_eq!(proxied.src, Some(src));
                    assert_eq!(proxied.dst, Some(dst));
                    assert_eq!(proxied.authority.as_deref(), Some(&b"a.example"[..]));
                    assert_eq!(proxied.unique_id.as_deref(), Some(&b"id-1"[..]));
                }
                other => panic!("{other:?}"),
            }
            for cut in 0..h.len() {
                assert_eq!(parse(&h[..cut]), Parsed::Incomplete, "cut at {cut}");
            }
            // A flipped bit anywhere after the signature is refused (by the structure or
            // by the CRC), but in the CRC TLV's own type, which makes it another TLV.
            let crc_type = h.len() - 7;
            for i in (12..h.len()).filter(|&i| i != crc_type) {
                let mut bad = h.clone();
                bad[i] ^= 0x04;
                assert!(!matches!(parse(&bad), Parsed::Header { .. }), "byte {i}");
            }
        }
    }

    #[test]
    fn v2_malformed_and_local() {
        let good = v2_header(a("192.0.2.1:5000"), a("198.51.100.2:443"), &[], false);
        let mut local = good.clone();
        local[12] = 0x20;
        assert!(
            matches!(parse(&local), Parsed::Header { proxied, .. } if proxied == Proxied::default())
        );
        let mut bad = good.clone();
        bad[12] = 0x31;
        assert!(matches!(parse(&bad), Parsed::Invalid(_)));
        let mut short = good.clone();
        short[15] = 4;
        short.truncate(20);
        assert!(matches!(parse(&short), Parsed::Invalid(_)));
        let mut overlong = good.clone();
        overlong[14..16].copy_from_slice(&5000u16.to_be_bytes());
        assert!(matches!(parse(&overlong), Parsed::Invalid(_)));
        let mut tlv_past = good.clone();
        tlv_past.extend([tlv::AUTHORITY, 0, 9, b'x']);
        let n = (tlv_past.len() - 16) as u16;
        tlv_past[14..16].copy_from_slice(&n.to_be_bytes());
        assert!(matches!(parse(&tlv_past), Parsed::Invalid(_)));
    }
}
