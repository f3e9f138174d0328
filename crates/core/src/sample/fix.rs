//! The FIX protocol's messages as the `fix_is_valid` and `fix_tag_value` converters read
//! them (HAProxy 2.6's rules): `TAG=VALUE` fields ended by SOH (0x01), BeginString,
//! BodyLength and MsgType first, CheckSum last over the bytes before it.
//!
//! Both answer "more bytes may change this" for a message cut short, so that TCP content
//! rules wait for the rest.

use super::payload::Verdict;

const SOH: u8 = 0x01;
/// The shortest message that can be judged.
const MIN_SIZE: usize = 26;

/// Digits only, not 0 (a tag number; names are read with the configuration:
/// `conf::sample_parse::fix_tag`).
fn number(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u32 = 0;
    for d in s {
        n = n.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
    }
    (n != 0).then_some(n)
}

/// The highest tag number each version allows (user tags 10000-19999 aside).
fn allowed(id: u32, version: &[u8]) -> bool {
    let max = match version {
        b"FIX.4.0" => 140,
        b"FIX.4.1" => 211,
        b"FIX.4.2" => 446,
        b"FIX.4.3" => 659,
        b"FIX.4.4" => 956,
        b"FIXT.1.1" => 1621,
        _ => return false,
    };
    id <= max || (10000..=19999).contains(&id)
}

/// One `TAG=VALUE<SOH>` field at the start of `b`: the tag, the value and the bytes it
/// takes; `None` when its end has not arrived, `Some(Err)` when it is malformed.
#[allow(clippy::type_complexity)]
fn field(b: &[u8]) -> Option<Result<(&[u8], &[u8], usize), ()>> {
    let eq = b.iter().position(|&c| c == b'=' || c == SOH);
    let end = b.iter().position(|&c| c == SOH)?;
    let Some(eq) = eq.filter(|&e| e < end && b[e] == b'=') else {
        return Some(Err(()));
    };
    let (tag, value) = (&b[..eq], &b[eq + 1..end]);
    // HAProxy's test for an empty value sees the '=' with it: an empty value passes.
    if tag.is_empty() {
        return Some(Err(()));
    }
    Some(Ok((tag, value, end + 1)))
}

/// `fix_is_valid`: the fields are well formed, the first three are BeginString (a known
/// version), BodyLength (right) and MsgType, and a CheckSum field ends it, right.
pub fn is_valid(msg: &[u8]) -> Verdict<bool> {
    if msg.len() < MIN_SIZE {
        return Verdict::More;
    }
    let mut version: Option<&[u8]> = None;
    let (mut at, mut n, mut sum, mut body_len, mut body) = (0, 0u32, 0u8, 0usize, None);
    while at < msg.len() {
        let (tag, value, len) = match field(&msg[at..]) {
            None => return Verdict::More,
            Some(Err(())) => return Verdict::Is(false),
            Some(Ok(f)) => f,
        };
        let Some(id) = number(tag).filter(|&id| version.is_none_or(|v| allowed(id, v))) else {
            return Verdict::Is(false);
        };
        n += 1;
        match (n, id) {
            (1, 8) => match value {
                b"FIX.4.0" | b"FIX.4.1" | b"FIX.4.2" | b"FIX.4.3" | b"FIX.4.4" | b"FIXT.1.1" => {
                    version = Some(value)
                }
                _ => return Verdict::Is(false),
            },
            (2, 9) => match number(value) {
                Some(l) => {
                    body_len = l as usize;
                    body = Some(at + len);
                }
                None => return Verdict::Is(false),
            },
            (3, 35) => {}
            (1..=3, _) => return Verdict::Is(false),
            (_, 10) => {
                let right_len = body.is_some_and(|b| at - b == body_len);
                let right_sum = value.len() == 3 && number_or_zero(value) == Some(u32::from(sum));
                return Verdict::Is(right_len && right_sum);
            }
            _ => {}
        }
        for &c in &msg[at..at + len] {
            sum = sum.wrapping_add(c);
        }
        at += len;
    }
    if body.is_some() {
        Verdict::More
    } else {
        Verdict::Is(false)
    }
}

/// Three digits, 000 included.
fn number_or_zero(s: &[u8]) -> Option<u32> {
    s.iter().try_fold(0u32, |n, d| {
        d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
    })
}

/// `fix_tag_value(TAG)`: the value of the first field with that tag, before CheckSum.
pub fn tag_value(msg: &[u8], tag: u32) -> Verdict<Option<&[u8]>> {
    let mut at = 0;
    while at < msg.len() {
        let (t, value, len) = match field(&msg[at..]) {
            None => return Verdict::More,
            Some(Err(())) => return Verdict::Is(None),
            Some(Ok(f)) => f,
        };
        match number(t) {
            None => return Verdict::Is(None),
            // An empty value reads as "not yet" in HAProxy: the same here.
            Some(id) if id == tag && value.is_empty() => return Verdict::More,
            Some(id) if id == tag => return Verdict::Is(Some(value)),
            Some(10) => return Verdict::Is(None),
            Some(_) => {}
        }
        at += len;
    }
    Verdict::More
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A logon message with its right length and checksum.
    fn logon() -> Vec<u8> {
        let body = b"35=A\x0149=CLIENT\x0156=SERVER\x0134=1\x0198=0\x01108=30\x01";
        let mut m = format!("8=FIX.4.4\x019={}\x01", body.len()).into_bytes();
        m.extend_from_slice(body);
        let sum = m.iter().fold(0u8, |s, &c| s.wrapping_add(c));
        m.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
        m
    }

    #[test]
    fn messages_are_judged_as_haproxy_judges_them() {
        let m = logon();
        assert_eq!(is_valid(&m), Verdict::Is(true));
        assert_eq!(is_valid(&m[..m.len() - 8]), Verdict::More);
        let mut bad = m.clone();
        let at = bad.len() - 2;
        bad[at] = if bad[at] == b'9' { b'8' } else { b'9' };
        assert_eq!(is_valid(&bad), Verdict::Is(false));
        assert_eq!(
            is_valid(&m.replace_first(b"35=A", b"49=A")),
            Verdict::Is(false)
        );
        assert_eq!(tag_value(&m, 49), Verdict::Is(Some(&b"CLIENT"[..])));
        assert_eq!(
            tag_value(&m, crate::conf::sample_parse::fix_tag("targetcompid")),
            Verdict::Is(Some(&b"SERVER"[..]))
        );
        assert_eq!(tag_value(&m, 999), Verdict::Is(None));
        assert_eq!(tag_value(&m[..20], 49), Verdict::More);
        assert_eq!(crate::conf::sample_parse::fix_tag("nosuch"), 0);
        assert_eq!(crate::conf::sample_parse::fix_tag("0"), 0);
    }

    trait Replace {
        fn replace_first(&self, a: &[u8], b: &[u8]) -> Vec<u8>;
    }

    impl Replace for Vec<u8> {
        fn replace_first(&self, a: &[u8], b: &[u8]) -> Vec<u8> {
            let at = self.windows(a.len()).position(|w| w == a).unwrap();
            [&self[..at], b, &self[at + a.len()..]].concat()
        }
    }
}
