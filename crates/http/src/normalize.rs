//! URI normalizers (`http-request normalize-uri`): each rewrites one aspect of a request
//! target the way RFC 3986 §6.2.2 describes, so that rules, caches and servers see one
//! spelling for one resource.
//!
//! Invariants:
//! - A normalizer only touches the target's path and query (an absolute-form target keeps
//!   its scheme and authority as they are); a target without a path (`*`, an authority)
//!   is left alone.
//! - The output is never longer than the input but for `fragment-encode` (each `#` becomes
//!   `%23`).
//! - Only the `strict` forms fail, on a `%` that does not start two hexadecimal digits.

use crate::request::{path_start, split_target};

/// One normalizer and its option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UriNormalizer {
    /// `fragment-encode`: `#` written `%23`.
    FragmentEncode,
    /// `fragment-strip`: the fragment (`#...`) removed.
    FragmentStrip,
    /// `path-merge-slashes`: runs of `/` in the path made one.
    PathMergeSlashes,
    /// `path-strip-dot`: `.` segments of the path removed.
    PathStripDot,
    /// `path-strip-dotdot [full]`: a `..` segment removed with the segment before it; with
    /// `full`, those that climb above the root removed too.
    PathStripDotdot { full: bool },
    /// `percent-decode-unreserved [strict]`: `%XX` of a letter, digit, `-`, `.`, `_` or
    /// `~` written as that character.
    PercentDecodeUnreserved { strict: bool },
    /// `percent-to-uppercase [strict]`: the hexadecimal digits of `%xx` upper-cased.
    PercentToUppercase { strict: bool },
    /// `query-sort-by-name`: the query's `&`-separated parameters sorted by name, those of
    /// one name keeping their order.
    QuerySortByName,
}

/// A `%` not followed by two hexadecimal digits, under a `strict` normalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPercent;

impl UriNormalizer {
    /// The normalizer of a configuration's words (`path-strip-dotdot full`), or what is
    /// wrong with them.
    pub fn parse(words: &[&str]) -> Result<UriNormalizer, String> {
        let (name, opt) = match words {
            [] => return Err("missing argument <normalizer>".into()),
            [name] => (*name, None),
            [name, opt] => (*name, Some(*opt)),
            [_, _, extra, ..] => return Err(format!("unexpected argument '{extra}'")),
        };
        let flag = |word: &str| match opt {
            None => Ok(false),
            Some(o) if o == word => Ok(true),
            Some(o) => Err(format!("unknown argument '{o}' for '{name}' normalizer")),
        };
        let plain = |n: UriNormalizer| match opt {
            None => Ok(n),
            Some(o) => Err(format!("unknown argument '{o}' for '{name}' normalizer")),
        };
        match name {
            "fragment-encode" => plain(UriNormalizer::FragmentEncode),
            "fragment-strip" => plain(UriNormalizer::FragmentStrip),
            "path-merge-slashes" => plain(UriNormalizer::PathMergeSlashes),
            "path-strip-dot" => plain(UriNormalizer::PathStripDot),
            "query-sort-by-name" => plain(UriNormalizer::QuerySortByName),
            "path-strip-dotdot" => Ok(UriNormalizer::PathStripDotdot {
                full: flag("full")?,
            }),
            "percent-decode-unreserved" => Ok(UriNormalizer::PercentDecodeUnreserved {
                strict: flag("strict")?,
            }),
            "percent-to-uppercase" => Ok(UriNormalizer::PercentToUppercase {
                strict: flag("strict")?,
            }),
            other => Err(format!("unknown normalizer '{other}'")),
        }
    }

    /// The target `target` normalized (`None`: it has no path, nothing to do).
    pub fn apply(self, target: &[u8]) -> Result<Option<Vec<u8>>, BadPercent> {
        let start = path_start(target);
        let (prefix, rest) = target.split_at(start);
        if !rest.starts_with(b"/") {
            return Ok(None);
        }
        let (_, path, query) = split_target(target);
        // What the path-only normalizers leave after the path.
        let with_query = |new_path: Vec<u8>| {
            let mut out = prefix.to_vec();
            out.extend_from_slice(&new_path);
            if let Some(q) = query {
                out.push(b'?');
                out.extend_from_slice(q);
            }
            out
        };
        let whole = |new_rest: Vec<u8>| [prefix, &new_rest].concat();
        Ok(Some(match self {
            UriNormalizer::PathMergeSlashes => with_query(merge_slashes(path)),
            UriNormalizer::PathStripDot => with_query(strip_dot(path)),
            UriNormalizer::PathStripDotdot { full } => with_query(strip_dotdot(path, full)),
            UriNormalizer::QuerySortByName => match query {
                Some(q) => whole([path, b"?", &sort_query(q)].concat()),
                None => return Ok(None),
            },
            UriNormalizer::PercentToUppercase { strict } => whole(percent_upper(rest, strict)?),
            UriNormalizer::PercentDecodeUnreserved { strict } => {
                whole(percent_decode_unreserved(rest, strict)?)
            }
            UriNormalizer::FragmentStrip => {
                let end = memchr::memchr(b'#', rest).unwrap_or(rest.len());
                whole(rest[..end].to_vec())
            }
            UriNormalizer::FragmentEncode => whole(fragment_encode(rest)),
        }))
    }
}

fn merge_slashes(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for &c in path {
        if !(c == b'/' && out.last() == Some(&b'/')) {
            out.push(c);
        }
    }
    out
}

/// Drops every `.` segment with the `/` after it (`/a/.` is `/a/`).
fn strip_dot(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    let mut rest = path;
    while !rest.is_empty() {
        let (segment, slash, next) = match memchr::memchr(b'/', rest) {
            Some(i) => (&rest[..i], true, &rest[i + 1..]),
            None => (rest, false, &[][..]),
        };
        if segment != b"." {
            out.extend_from_slice(segment);
            if slash {
                out.push(b'/');
            }
        }
        rest = next;
    }
    out
}

/// Removes `/..` segments with the segment before each, read from the end as RFC 3986's
/// algorithm does; those that climb above the root stay (`/../a` is `/../a`) unless `full`.
fn strip_dotdot(path: &[u8], full: bool) -> Vec<u8> {
    // Built backwards, reversed at the end.
    let mut rev = Vec::with_capacity(path.len());
    let mut end = path.len();
    let mut up = 0usize;
    // A last `/..` without its trailing slash climbs too.
    if path.ends_with(b"/..") {
        up += 1;
        end -= 2;
    }
    // `end` is one past the `/` that ends the segment being looked at.
    while end > 0 {
        let slash = end - 1;
        if slash >= 3 && &path[slash - 3..=slash] == b"/../" {
            up += 1;
            end -= 3;
            continue;
        }
        let seg_start = path[..slash].iter().rposition(|&c| c == b'/');
        if up > 0 {
            if slash == 0 {
                break;
            }
            up -= 1;
            end = seg_start.map_or(0, |s| s + 1);
        } else {
            rev.extend(path[seg_start.map_or(0, |s| s + 1)..=slash].iter().rev());
            end = seg_start.map_or(0, |s| s + 1);
        }
    }
    if up > 0 {
        rev.push(b'/');
        if !full {
            for _ in 0..up {
                rev.extend_from_slice(b"../");
            }
        }
    }
    rev.reverse();
    rev
}

fn sort_query(query: &[u8]) -> Vec<u8> {
    let mut params: Vec<&[u8]> = Vec::new();
    let mut rest = query;
    while !rest.is_empty() {
        match memchr::memchr(b'&', rest) {
            Some(i) => {
                params.push(&rest[..i]);
                rest = &rest[i + 1..];
            }
            None => {
                params.push(rest);
                rest = &[];
            }
        }
    }
    let name = |p: &[u8]| -> Vec<u8> { p.split(|&c| c == b'=').next().unwrap_or(p).to_vec() };
    // A stable sort: parameters of one name keep their order.
    params.sort_by_key(|p| name(p));
    params.join(&b'&')
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Calls `each` for every `%XX` (its position and the byte it stands for) and copies the
/// rest; a `%` without two hexadecimal digits is an error when `strict`.
fn rewrite_percents(
    input: &[u8],
    strict: bool,
    mut each: impl FnMut(&mut Vec<u8>, &[u8; 3], u8),
) -> Result<Vec<u8>, BadPercent> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        let c = input[i];
        if c == b'%' {
            if let (Some(&h), Some(&l)) = (input.get(i + 1), input.get(i + 2)) {
                if let (Some(hv), Some(lv)) = (hex(h), hex(l)) {
                    each(&mut out, &[c, h, l], hv << 4 | lv);
                    i += 3;
                    continue;
                }
            }
            if strict {
                return Err(BadPercent);
            }
        }
        out.push(c);
        i += 1;
    }
    Ok(out)
}

fn percent_upper(input: &[u8], strict: bool) -> Result<Vec<u8>, BadPercent> {
    rewrite_percents(input, strict, |out, seq, _| {
        out.push(b'%');
        out.push(seq[1].to_ascii_uppercase());
        out.push(seq[2].to_ascii_uppercase());
    })
}

fn percent_decode_unreserved(input: &[u8], strict: bool) -> Result<Vec<u8>, BadPercent> {
    rewrite_percents(input, strict, |out, seq, byte| {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.extend_from_slice(seq);
        }
    })
}

fn fragment_encode(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    for &c in input {
        if c == b'#' {
            out.extend_from_slice(b"%23");
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::UriNormalizer as N;
    use super::*;

    fn run(n: N, t: &str) -> String {
        match n.apply(t.as_bytes()) {
            Ok(Some(v)) => String::from_utf8(v).unwrap(),
            Ok(None) => t.to_string(),
            Err(BadPercent) => "400".into(),
        }
    }

    /// The examples of HAProxy 2.6's manual, each normalizer's.
    #[test]
    fn the_manuals_examples() {
        let cases: &[(N, &str, &str)] = &[
            (N::FragmentEncode, "/#foo", "/%23foo"),
            (N::FragmentStrip, "/#foo", "/"),
            (N::PathStripDot, "/.", "/"),
            (N::PathStripDot, "/./bar/", "/bar/"),
            (N::PathStripDot, "/a/./a", "/a/a"),
            (N::PathStripDot, "/.well-known/", "/.well-known/"),
            (N::PathStripDotdot { full: false }, "/foo/../", "/"),
            (N::PathStripDotdot { full: false }, "/foo/../bar/", "/bar/"),
            (N::PathStripDotdot { full: false }, "/foo/bar/../", "/foo/"),
            (N::PathStripDotdot { full: false }, "/../bar/", "/../bar/"),
            (N::PathStripDotdot { full: false }, "/bar/../../", "/../"),
            (N::PathStripDotdot { full: false }, "/foo//../", "/foo/"),
            (
                N::PathStripDotdot { full: false },
                "/foo/%2E%2E/",
                "/foo/%2E%2E/",
            ),
            (N::PathStripDotdot { full: true }, "/../bar/", "/bar/"),
            (N::PathStripDotdot { full: true }, "/bar/../../", "/"),
            (N::PathMergeSlashes, "//", "/"),
            (N::PathMergeSlashes, "/foo//bar", "/foo/bar"),
            (
                N::PercentDecodeUnreserved { strict: false },
                "/%61dmin",
                "/admin",
            ),
            (
                N::PercentDecodeUnreserved { strict: false },
                "/foo%3Fbar=baz",
                "/foo%3Fbar=baz",
            ),
            (
                N::PercentDecodeUnreserved { strict: false },
                "/%%36%36",
                "/%66",
            ),
            (N::PercentDecodeUnreserved { strict: false }, "/%ZZ", "/%ZZ"),
            (
                N::PercentDecodeUnreserved { strict: true },
                "/%%36%36",
                "400",
            ),
            (N::PercentDecodeUnreserved { strict: true }, "/%ZZ", "400"),
            (N::PercentToUppercase { strict: false }, "/%6f", "/%6F"),
            (N::PercentToUppercase { strict: false }, "/%zz", "/%zz"),
            (N::PercentToUppercase { strict: true }, "/%zz", "400"),
            (N::QuerySortByName, "/?c=3&a=1&b=2", "/?a=1&b=2&c=3"),
            (N::QuerySortByName, "/?aaa=3&a=1&aa=2", "/?a=1&aa=2&aaa=3"),
            (
                N::QuerySortByName,
                "/?a=3&b=4&a=1&b=5&a=2",
                "/?a=3&a=1&a=2&b=4&b=5",
            ),
        ];
        for (n, input, want) in cases {
            assert_eq!(run(*n, input), *want, "{n:?} on {input}");
        }
    }

    #[test]
    fn path_normalizers_leave_the_query_and_authority_alone() {
        let dotdot = N::PathStripDotdot { full: false };
        assert_eq!(run(dotdot, "/a/../b?x=/../y"), "/b?x=/../y");
        assert_eq!(
            run(N::PathMergeSlashes, "http://h//a//b?q=//"),
            "http://h/a/b?q=//"
        );
        assert_eq!(run(N::PathStripDot, "/a/.?./."), "/a/?./.");
        assert_eq!(run(dotdot, "/a/.."), "/");
        assert_eq!(run(N::QuerySortByName, "/p"), "/p");
        assert_eq!(
            run(N::PercentToUppercase { strict: false }, "/%7e?q=%2f"),
            "/%7E?q=%2F"
        );
        // No path: nothing to do.
        assert_eq!(N::PathMergeSlashes.apply(b"*"), Ok(None));
    }

    #[test]
    fn configuration_words() {
        assert_eq!(
            N::parse(&["path-strip-dotdot", "full"]),
            Ok(N::PathStripDotdot { full: true })
        );
        assert_eq!(
            N::parse(&["percent-to-uppercase"]),
            Ok(N::PercentToUppercase { strict: false })
        );
        assert!(N::parse(&["path-merge-slashes", "strict"]).is_err());
        assert!(N::parse(&["path-strip-dotdot", "strict"]).is_err());
        assert!(N::parse(&["nonsense"]).is_err());
        assert!(N::parse(&[]).is_err());
    }
}
