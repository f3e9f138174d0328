//! Converters: what each does to a sample and the type it gives.

use std::borrow::Cow;
use std::net::IpAddr;

use base64::Engine as _;

use super::context::{text_match, Ctx, Kind};
use super::hash;
use crate::conf::sample::{
    Conv, DigestAlg, IntArg, KeyArg, MapFile, MapKey, MapOut, Match, Sample, StrArg,
};

pub(super) fn kind(c: &Conv, input: Kind) -> Kind {
    use Conv::*;
    match c {
        B64Dec => Kind::Bin,
        Map(m, _) if m.out == MapOut::Int => Kind::Int,
        Map(m, _) if m.out == MapOut::Ip => Kind::Ip,
        // Bytes of text stay text; of anything else, the binary form's bytes.
        Bytes(..) if matches!(input, Kind::Str) => Kind::Str,
        Bytes(..) => Kind::Bin,
        SetVar(_) => input,
        Length | Add(_) | Sub(_) | Mul(_) | Div(_) | Mod(_) | And(_) | Or(_) | Xor(_) | Neg
        | Crc32(_) | Djb2(_) | Sdbm(_) | Wt6(_) | Xxh3(_) | Hex2i => Kind::Int,
        Crc32c(_) | Xxh32(_) | Xxh64(_) => Kind::Int,
        Bool | Not | Odd | Even => Kind::Bool,
        IpMask(..) => Kind::Ip,
        Table { .. } => Kind::Int,
        InTable(_) | SecureMemcmp(_) | FixIsValid | MqttIsValid => Kind::Bool,
        FixTagValue(_) | MqttFieldValue(..) => Kind::Bin,
        Strcmp(_) | TableTrackers(_) | JsonQuery { int: true, .. } | JwtVerify { .. } => Kind::Int,
        JwtQuery { int: true, .. } => Kind::Int,
        Digest(_) | Hmac(..) | Ub64Dec => Kind::Bin,
        _ => Kind::Str,
    }
}

/// Bytes in upper-case hexadecimal, as HAProxy's `hex` writes them.
pub(super) fn hex_upper(b: &[u8]) -> String {
    hex(b, true)
}

/// `b` as hexadecimal digits, upper or lower case.
pub(super) fn hex(b: &[u8], upper: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(2 * b.len());
    for x in b {
        let _ = if upper {
            write!(out, "{x:02X}")
        } else {
            write!(out, "{x:02x}")
        };
    }
    out
}

/// No sample yet: a payload still arriving may complete the input.
fn more(cx: &Ctx<'_>) -> Option<Sample<'static>> {
    if let Some(p) = cx.payload {
        p.wants_more();
    }
    None
}

fn text(s: Vec<u8>) -> Sample<'static> {
    Sample::Str(Cow::Owned(s))
}

/// The digest of `data` (ring's, or the `sha2` crate's SHA-224, which ring lacks).
fn digest(a: DigestAlg, data: &[u8]) -> Vec<u8> {
    use sha2::Digest as _;
    let alg = match a {
        DigestAlg::Sha224 => return sha2::Sha224::digest(data).to_vec(),
        DigestAlg::Sha1 => &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        DigestAlg::Sha256 => &ring::digest::SHA256,
        DigestAlg::Sha384 => &ring::digest::SHA384,
        DigestAlg::Sha512 => &ring::digest::SHA512,
    };
    ring::digest::digest(alg, data).as_ref().to_vec()
}

/// The HMAC of `data` under `key` (ring's, or the `hmac` and `sha2` crates' for SHA-224,
/// which ring lacks).
fn hmac(a: DigestAlg, key: &[u8], data: &[u8]) -> Vec<u8> {
    use hmac::Mac as _;
    let alg = match a {
        DigestAlg::Sha224 => {
            return match hmac::Hmac::<sha2::Sha224>::new_from_slice(key) {
                Ok(mut m) => {
                    m.update(data);
                    m.finalize().into_bytes().to_vec()
                }
                // (Any key length is taken: no error can come.)
                Err(_) => Vec::new(),
            };
        }
        DigestAlg::Sha1 => ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        DigestAlg::Sha256 => ring::hmac::HMAC_SHA256,
        DigestAlg::Sha384 => ring::hmac::HMAC_SHA384,
        DigestAlg::Sha512 => ring::hmac::HMAC_SHA512,
    };
    ring::hmac::sign(&ring::hmac::Key::new(alg, key), data)
        .as_ref()
        .to_vec()
}

/// Percent-encodes every byte but the unreserved ones (RFC 3986: letters, digits,
/// `-._~`), as `url_enc(query)` does.
fn url_encode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// `be2dec`/`be2hex`: the input cut in chunks of `size` bytes (a shorter last one unless
/// `truncate`), each written by `write`, joined by `sep`.
fn be_chunks(
    input: &[u8],
    sep: &str,
    size: usize,
    truncate: bool,
    write: impl Fn(&[u8]) -> String,
) -> Vec<u8> {
    input
        .chunks(size.max(1))
        .filter(|c| !truncate || c.len() == size)
        .map(write)
        .collect::<Vec<_>>()
        .join(sep)
        .into_bytes()
}

pub(super) fn apply<'a>(c: &Conv, s: Sample<'a>, cx: &Ctx<'_>) -> Option<Sample<'a>> {
    let int_arg = |a: &IntArg| match a {
        IntArg::Const(n) => Some(*n),
        IntArg::Var(v) => cx.vars.get(cx.process, v)?.as_int(),
    };
    let arith = |f: &dyn Fn(i64, i64) -> i64, a: &IntArg| -> Option<Sample<'a>> {
        Some(Sample::Int(f(s.as_int()?, int_arg(a)?)))
    };
    let hashed = |h: u32, avalanche: bool| {
        Sample::Int(i64::from(if avalanche { hash::avalanche(h) } else { h }))
    };
    Some(match c {
        Conv::Lower => text(s.as_bytes().to_ascii_lowercase()),
        Conv::Upper => text(s.as_bytes().to_ascii_uppercase()),
        Conv::Base64 => text(
            base64::engine::general_purpose::STANDARD
                .encode(s.as_binary())
                .into_bytes(),
        ),
        Conv::B64Dec => Sample::Bin(Cow::Owned(
            base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .ok()?,
        )),
        Conv::Hex => Sample::string(hex_upper(&s.as_binary())),
        // As HAProxy 2.6.12 answers: the digits as a 64-bit value read as signed, and
        // nothing for anything else (its manual says 0).
        Conv::Hex2i => {
            let t = std::str::from_utf8(&s.as_bytes()).ok()?.to_string();
            Sample::Int(u64::from_str_radix(t.trim(), 16).ok()? as i64)
        }
        Conv::UrlDec(in_form) => text(url_decode(&s.as_bytes(), *in_form)),
        Conv::Json => text(json_escape(&s.as_bytes())),
        Conv::Length => Sample::Int(s.as_bytes().len() as i64),
        Conv::Field {
            index,
            delims,
            count,
        } => {
            let bytes = s.as_bytes();
            let parts: Vec<&[u8]> = bytes.split(|b| delims.contains(b)).collect();
            text(select(&parts, *index, *count, delims)?)
        }
        Conv::Word {
            index,
            delims,
            count,
        } => {
            let bytes = s.as_bytes();
            let parts: Vec<&[u8]> = bytes
                .split(|b| delims.contains(b))
                .filter(|w| !w.is_empty())
                .collect();
            text(select(&parts, *index, *count, delims)?)
        }
        Conv::Regsub { re, subst, global } => {
            let bytes = s.as_bytes();
            let out = if *global {
                re.0.replace_all(&bytes, subst.as_bytes())
            } else {
                re.0.replace(&bytes, subst.as_bytes())
            };
            text(out.into_owned())
        }
        Conv::Map(map, default) => {
            let v = lookup(map, &s)
                .map(|v| v.into_owned())
                .or_else(|| default.clone())?;
            match map.out {
                MapOut::Str => Sample::string(v),
                MapOut::Int => Sample::Int(v.trim().parse().ok()?),
                MapOut::Ip => Sample::Ip(v.trim().parse().ok()?),
            }
        }
        Conv::Add(a) => arith(&|x, y| x.wrapping_add(y), a)?,
        Conv::Sub(a) => arith(&|x, y| x.wrapping_sub(y), a)?,
        Conv::Mul(a) => arith(&|x, y| x.wrapping_mul(y), a)?,
        // Division by zero gives the largest integer, modulo by zero 0, as HAProxy.
        Conv::Div(a) => arith(&|x, y| if y == 0 { i64::MAX } else { x.wrapping_div(y) }, a)?,
        Conv::Mod(a) => arith(&|x, y| if y == 0 { 0 } else { x.wrapping_rem(y) }, a)?,
        Conv::And(a) => arith(&|x, y| x & y, a)?,
        Conv::Or(a) => arith(&|x, y| x | y, a)?,
        Conv::Xor(a) => arith(&|x, y| x ^ y, a)?,
        Conv::Neg => Sample::Int(s.as_int()?.wrapping_neg()),
        Conv::Bool => Sample::Bool(s.as_int()? != 0),
        Conv::Not => Sample::Bool(s.as_int()? == 0),
        Conv::Odd => Sample::Bool(s.as_int()? & 1 == 1),
        Conv::Even => Sample::Bool(s.as_int()? & 1 == 0),
        Conv::IpMask(v4, v6) => Sample::Ip(mask(s.as_ip()?, *v4, *v6)?),
        Conv::Crc32(a) => hashed(hash::crc32(&s.as_binary()), *a),
        Conv::Djb2(a) => hashed(hash::djb2(&s.as_binary()), *a),
        Conv::Sdbm(a) => hashed(hash::sdbm(&s.as_binary()), *a),
        Conv::Wt6(a) => hashed(hash::wt6(&s.as_binary()), *a),
        // HAProxy gives the 64-bit hash as a signed integer.
        Conv::Xxh3(seed) => Sample::Int(hash::xxh3(&s.as_binary(), *seed) as i64),
        Conv::Crc32c(a) => hashed(crc32c::crc32c(&s.as_binary()), *a),
        Conv::Xxh32(seed) => Sample::Int(i64::from(hash::xxh32(&s.as_binary(), *seed))),
        Conv::Xxh64(seed) => Sample::Int(hash::xxh64(&s.as_binary(), *seed) as i64),
        Conv::HttpDate(offset, per_sec) => {
            Sample::string(http_date(s.as_int()?.wrapping_add(*offset), *per_sec)?)
        }
        Conv::Language(tags, default) => {
            let best = super::language::preferred(&s.as_bytes(), tags);
            text(best.or(default.as_deref())?.to_vec())
        }
        Conv::Bytes(offset, len) => {
            let slice = |b: &[u8]| -> Option<Vec<u8>> {
                let start = (*offset).min(b.len());
                let end = len.map_or(b.len(), |l| (start + l).min(b.len()));
                (start < b.len() || b.is_empty()).then(|| b[start..end].to_vec())
            };
            match s {
                Sample::Str(t) => text(slice(&t)?),
                other => Sample::Bin(Cow::Owned(slice(&other.as_binary())?)),
            }
        }
        Conv::Ltime(f, offset) => {
            Sample::string(crate::log::strftime(s.as_int()? + offset, f, true)?)
        }
        Conv::Utime(f, offset) => {
            Sample::string(crate::log::strftime(s.as_int()? + offset, f, false)?)
        }
        Conv::Concat(prefix, var, suffix) => {
            let mut out = s.as_bytes().into_owned();
            out.extend_from_slice(prefix.as_bytes());
            if let Some(v) = var.as_ref().and_then(|v| cx.vars.get(cx.process, v)) {
                out.extend_from_slice(&v.as_bytes());
            }
            out.extend_from_slice(suffix.as_bytes());
            text(out)
        }
        Conv::Table { op, counter, table } => super::table::convert(&s, *op, *counter, table, cx)?,
        Conv::InTable(table) => super::table::contains(&s, table, cx)?,
        Conv::TableTrackers(table) => super::table::trackers(&s, table, cx)?,
        Conv::Digest(alg) => Sample::Bin(Cow::Owned(digest(*alg, &s.as_binary()))),
        Conv::Hmac(alg, key) => {
            let key = match key {
                KeyArg::Const(k) => k.clone(),
                KeyArg::Var(v) => base64::engine::general_purpose::STANDARD
                    .decode(cx.vars.get(cx.process, v)?.as_bytes())
                    .ok()?,
            };
            Sample::Bin(Cow::Owned(hmac(*alg, &key, &s.as_binary())))
        }
        Conv::Ub64Enc => text(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(s.as_binary())
                .into_bytes(),
        ),
        Conv::Ub64Dec => Sample::Bin(Cow::Owned(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s.as_bytes().as_ref())
                .ok()?,
        )),
        Conv::UrlEnc => text(url_encode(&s.as_bytes())),
        Conv::Be2Dec {
            sep,
            size,
            truncate,
        } => text(be_chunks(&s.as_binary(), sep, *size, *truncate, |c| {
            c.iter()
                .fold(0u64, |n, &b| n << 8 | u64::from(b))
                .to_string()
        })),
        Conv::Be2Hex {
            sep,
            size,
            truncate,
        } => text(be_chunks(&s.as_binary(), sep, *size, *truncate, |c| {
            hex_upper(c)
        })),
        Conv::AddItem(delim, var, suffix) => {
            let mut out = s.as_bytes().into_owned();
            let value = var.as_ref().and_then(|v| cx.vars.get(cx.process, v));
            let item: Vec<u8> = match &value {
                Some(v) => [v.as_bytes().as_ref(), suffix.as_bytes()].concat(),
                None => suffix.as_bytes().to_vec(),
            };
            if !item.is_empty() {
                if !out.is_empty() {
                    out.extend_from_slice(delim.as_bytes());
                }
                out.extend_from_slice(&item);
            }
            text(out)
        }
        Conv::JsonQuery { path, int } => super::json::query(&s.as_binary(), path, *int)?,
        Conv::JwtQuery { payload, path, int } => {
            super::jwt::query(&s.as_binary(), *payload, path.as_ref(), *int)?
        }
        Conv::JwtVerify { alg, key } => {
            let alg = match alg {
                StrArg::Const(a) => std::borrow::Cow::Borrowed(&a[..]),
                StrArg::Var(v) => {
                    std::borrow::Cow::Owned(cx.vars.get(cx.process, v)?.as_bytes().to_vec())
                }
            };
            Sample::Int(super::jwt::verify(&s.as_binary(), &alg, key))
        }
        Conv::FixIsValid => match super::fix::is_valid(&s.as_binary()) {
            super::payload::Verdict::Is(valid) => Sample::Bool(valid),
            super::payload::Verdict::More => return more(cx),
        },
        Conv::FixTagValue(tag) => match super::fix::tag_value(&s.as_binary(), *tag) {
            super::payload::Verdict::Is(v) => Sample::Bin(v?.to_vec().into()),
            super::payload::Verdict::More => return more(cx),
        },
        Conv::MqttIsValid => match super::mqtt::is_valid(&s.as_binary()) {
            super::payload::Verdict::Is(valid) => Sample::Bool(valid),
            super::payload::Verdict::More => return more(cx),
        },
        Conv::MqttFieldValue(kind, field) => {
            match super::mqtt::field_value(&s.as_binary(), *kind, *field) {
                super::payload::Verdict::Is(v) => Sample::Bin(v?.into()),
                super::payload::Verdict::More => return more(cx),
            }
        }
        Conv::Iif(yes, no) => Sample::string(if s.as_bool()? {
            yes.clone()
        } else {
            no.clone()
        }),
        Conv::SecureMemcmp(v) => {
            let other = cx.vars.get(cx.process, v)?;
            let (a, b) = (s.as_binary(), other.as_binary());
            Sample::Bool(crate::auth::same(&a, &b))
        }
        Conv::Strcmp(v) => {
            let other = cx.vars.get(cx.process, v)?;
            // As HAProxy's (memcmp's): the first differing bytes' difference, else the
            // lengths'.
            let (a, b) = (s.as_bytes(), other.as_bytes());
            let diff = a.iter().zip(b.iter()).find(|(x, y)| x != y);
            Sample::Int(match diff {
                Some((x, y)) => i64::from(*x) - i64::from(*y),
                None => a.len() as i64 - b.len() as i64,
            })
        }
        Conv::SetVar(v) => {
            cx.vars.set(cx.process, v, s.clone().into_owned());
            s
        }
    })
}

/// Fields `index` .. `index + count - 1` (1-based; negative from the end; count 0: to the
/// end), joined by the first delimiter.
fn select(parts: &[&[u8]], index: i32, count: u32, delims: &[u8]) -> Option<Vec<u8>> {
    let n = parts.len() as i64;
    let first = if index > 0 {
        i64::from(index) - 1
    } else {
        n + i64::from(index)
    };
    if first < 0 || first >= n {
        return None;
    }
    let last = if count == 0 {
        n
    } else {
        (first + i64::from(count)).min(n)
    };
    let sep = delims.first().copied().unwrap_or(b' ');
    let mut out = Vec::new();
    for (k, p) in parts[first as usize..last as usize].iter().enumerate() {
        if k > 0 {
            out.push(sep);
        }
        out.extend_from_slice(p);
    }
    Some(out)
}

fn url_decode(s: &[u8], in_form: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut in_query = in_form;
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        match b {
            b'%' if i + 2 < s.len() => {
                let hex = std::str::from_utf8(&s[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b),
                }
            }
            b'?' => {
                in_query = true;
                out.push(b);
            }
            b'+' if in_query => out.push(b' '),
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

fn json_escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out
}

fn mask(ip: IpAddr, v4: IpAddr, v6: Option<IpAddr>) -> Option<IpAddr> {
    match (ip, v4, v6) {
        (IpAddr::V4(a), IpAddr::V4(m), _) => Some(IpAddr::V4((u32::from(a) & u32::from(m)).into())),
        (IpAddr::V6(a), _, Some(IpAddr::V6(m))) => {
            Some(IpAddr::V6((u128::from(a) & u128::from(m)).into()))
        }
        _ => None,
    }
}

/// The value of the first entry of `map` whose key matches the sample (from the list as
/// it is now: the CLI may edit it).
pub(super) fn lookup<'m>(map: &'m MapFile, s: &Sample<'_>) -> Option<Cow<'m, str>> {
    let snapshot = map.list.list.load();
    let entries = snapshot.map(map.list.form);
    let (key, value) = &entries[find_entry(map.how, map.substitute, entries, s)?];
    if map.substitute {
        // `map_regm`: the value with the key's captures put into it.
        let MapKey::Regex(re) = key else { return None };
        let bytes = s.as_bytes();
        let caps = re.0.captures(&bytes)?;
        let mut out = Vec::new();
        caps.expand(value.as_bytes(), &mut out);
        return Some(Cow::Owned(String::from_utf8_lossy(&out).into_owned()));
    }
    Some(Cow::Owned(value.clone()))
}

/// Which entry of a map's compiled form the sample finds (`get map` asks too). HAProxy
/// indexes `beg` and `ip` maps in trees, whose lookup gives the longest prefix (the most
/// specific network), not the first line; the others are lists: the first wins.
pub fn find_entry(
    how: Match,
    substitute: bool,
    entries: &[(MapKey, String)],
    s: &Sample<'_>,
) -> Option<usize> {
    let bytes = s.as_bytes();
    if substitute {
        return entries
            .iter()
            .position(|(key, _)| matches!(key, MapKey::Regex(re) if re.0.is_match(&bytes)));
    }
    let int = s.as_int();
    let ip = s.as_ip();
    let mut hits = entries
        .iter()
        .enumerate()
        .filter(|(_, (key, _))| map_matches(how, key, &bytes, int, ip));
    let found = match how {
        Match::Beg | Match::Ip => hits.rev().max_by_key(|(_, (key, _))| match key {
            MapKey::Text(t) => t.len(),
            MapKey::Net(_, bits) => usize::from(*bits),
            _ => 0,
        }),
        _ => hits.next(),
    };
    found.map(|(i, _)| i)
}

fn map_matches(how: Match, key: &MapKey, s: &[u8], int: Option<i64>, ip: Option<IpAddr>) -> bool {
    match (how, key) {
        (Match::Int, MapKey::Int(k)) => int == Some(*k),
        (Match::Ip, MapKey::Net(net, bits)) => ip.is_some_and(|ip| in_net(ip, *net, *bits)),
        (Match::Reg, MapKey::Regex(re)) => re.0.is_match(s),
        (how, MapKey::Text(k)) => text_match(how, s, k, false),
        _ => false,
    }
}

/// Whether `ip` is inside `net`/`bits` (an IPv4 address also matches as IPv4-mapped IPv6).
pub fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits.min(32)))
            };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits.min(128)))
            };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

/// `http_date`: an IMF-fixdate, with the fraction of a second HAProxy appends (unpadded)
/// when the input counts milliseconds or microseconds.
fn http_date(t: i64, per_sec: i64) -> Option<String> {
    // HAProxy keeps 55 bits of the seconds so that huge values stay positive.
    let secs = (t / per_sec) & 0x007f_ffff_ffff_ffff;
    let date = crate::log::strftime(secs, "%a, %d %b %Y %H:%M:%S", false)?;
    Some(if per_sec == 1 {
        format!("{date} GMT")
    } else {
        format!("{date}.{} GMT", t % per_sec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_words() {
        let parts: Vec<&[u8]> = b"a,b,,c".split(|&b| b == b',').collect();
        assert_eq!(select(&parts, 2, 1, b","), Some(b"b".to_vec()));
        assert_eq!(select(&parts, -1, 1, b","), Some(b"c".to_vec()));
        assert_eq!(select(&parts, 2, 0, b","), Some(b"b,,c".to_vec()));
        assert_eq!(select(&parts, 9, 1, b","), None);
    }

    #[test]
    fn decoding_and_escaping() {
        assert_eq!(url_decode(b"/a%20b?x=1+2%41", false), b"/a b?x=1 2A");
        assert_eq!(url_decode(b"100%", false), b"100%");
        // `url_dec(1)`: a form from the start, as HAProxy's reg-test converter/url_dec.
        assert_eq!(url_decode(b"/bla+%20?a=b+c", true), b"/bla  ?a=b c");
        assert_eq!(url_decode(b"/bla+%20?a=b+c", false), b"/bla+ ?a=b c");
        assert_eq!(json_escape(b"a\"b\\/\n\x01"), b"a\\\"b\\\\\\/\\n\\u0001");
    }

    #[test]
    fn networks() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(in_net(ip("10.1.2.3"), ip("10.0.0.0"), 8));
        assert!(!in_net(ip("11.1.2.3"), ip("10.0.0.0"), 8));
        assert!(in_net(ip("::ffff:10.1.2.3"), ip("10.0.0.0"), 8));
        assert!(in_net(ip("2001:db8::1"), ip("2001:db8::"), 32));
        assert_eq!(
            mask(ip("192.168.7.9"), ip("255.255.255.0"), None),
            Some(ip("192.168.7.0"))
        );
    }
}
