//! Request heads: parsing and the strictness rules that decide 400/413/414/431/501/505.

use std::ops::Range;

use crate::head::{
    parse_content_length, range_in, transfer_encoding, value_ok, ConnInfo, Fields, Framing, Header,
    TeVerdict, Version,
};
use crate::{name_is, MAX_HEADERS};

/// Why a request head was refused: the status to answer and a short reason for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {reason}")]
pub struct HeadError {
    pub status: u16,
    pub reason: &'static str,
}

fn reject<T>(status: u16, reason: &'static str) -> Result<T, HeadError> {
    Err(HeadError { status, reason })
}

/// A parsed, validated request head. Ranges index the buffer given to [`parse_request`].
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// Bytes the head occupies at the start of the buffer.
    pub len: usize,
    pub method: Range<usize>,
    pub target: Range<usize>,
    /// The path part of the target (origin-form: up to `?`; absolute-form: after the authority).
    pub path: Range<usize>,
    pub version: Version,
    pub headers: Fields,
    pub framing: Framing,
    pub host: Option<Range<usize>>,
    /// The client asked to close (`Connection: close`, or HTTP/1.0 without keep-alive).
    pub wants_close: bool,
    /// Lowercased names the client nominated in `Connection`.
    pub nominated: Vec<Vec<u8>>,
}

impl RequestHead {
    pub fn method<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.method.clone()]
    }

    pub fn is_head(&self, buf: &[u8]) -> bool {
        self.method(buf) == b"HEAD"
    }

    /// A CONNECT: its target is an authority, and a 2xx answer makes the connection a
    /// tunnel (RFC 9110 §9.3.6).
    pub fn is_connect(&self, buf: &[u8]) -> bool {
        self.method(buf) == b"CONNECT"
    }

    /// Methods RFC 9110 §9.2.2 calls idempotent: safe to replay when a reused connection fails.
    pub fn is_idempotent(&self, buf: &[u8]) -> bool {
        matches!(
            self.method(buf),
            b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"
        )
    }

    /// The first value of header `lower` (a lowercase name).
    pub fn header<'a>(&self, buf: &'a [u8], lower: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| name_is(&buf[h.name.clone()], lower))
            .map(|h| &buf[h.value.clone()])
    }

    /// True for headers that must not be forwarded: hop-by-hop fields, those nominated by
    /// `Connection`, and the framing fields the proxy re-emits itself.
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        is_hop_by_hop(name, &self.nominated)
    }
}

pub(crate) fn is_hop_by_hop(name: &[u8], nominated: &[Vec<u8>]) -> bool {
    const HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "transfer-encoding",
        "content-length",
        "trailer",
    ];
    HOP.iter().any(|h| name_is(name, h)) || nominated.iter().any(|n| name.eq_ignore_ascii_case(n))
}

/// Parses the request head at the start of `buf`. `Ok(None)` means more bytes are needed.
pub fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    parse_request_relaxed(buf, false)
}

/// [`parse_request`], relaxed (`relaxed`, HAProxy's `option accept-invalid-http-request`)
/// in exactly three places where sluice is stricter than HAProxy: a request with both
/// `Content-Length` and `Transfer-Encoding` is read as chunked (its length ignored, as
/// HAProxy drops it), an HTTP/1.1 request may omit `Host`, and an absolute-form target may
/// carry userinfo (`http://user@host/`, compared with `Host` without it).
pub fn parse_request_relaxed(buf: &[u8], relaxed: bool) -> Result<Option<RequestHead>, HeadError> {
    parse_request_limited(buf, relaxed, MAX_HEADERS)
}

/// [`parse_request_relaxed`] with at most `max_fields` fields (`tune.http.maxhdr` less the
/// request line); more is refused with 431.
pub fn parse_request_limited(
    buf: &[u8],
    relaxed: bool,
    max_fields: usize,
) -> Result<Option<RequestHead>, HeadError> {
    if max_fields <= MAX_HEADERS {
        // Left uninitialized: the parser writes the fields it finds, and a typical head
        // has a handful of the 101 slots (3 kB not cleared per request).
        let mut storage = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS + 1];
        parse_request_in(buf, relaxed, max_fields, &mut storage)
    } else {
        // A limit raised past the default: the slots are the request's own.
        let mut storage = Vec::new();
        storage.resize_with(max_fields + 1, std::mem::MaybeUninit::uninit);
        parse_request_in(buf, relaxed, max_fields, &mut storage)
    }
}

fn parse_request_in<'b>(
    buf: &'b [u8],
    relaxed: bool,
    max_fields: usize,
    storage: &mut [std::mem::MaybeUninit<httparse::Header<'b>>],
) -> Result<Option<RequestHead>, HeadError> {
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, storage) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return reject(431, "too many header fields"),
        Err(httparse::Error::Version) => return reject(version_status(buf), "bad HTTP version"),
        Err(_) => return reject(400, "malformed request head"),
    };
    if req.headers.len() > max_fields {
        return reject(431, "too many header fields");
    }
    let method = req.method.unwrap_or_default().as_bytes();
    let target = req.path.unwrap_or_default().as_bytes();
    let version = if req.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    let path = check_target(method, target, relaxed)?;

    let mut headers = Fields::with_capacity(req.headers.len());
    let mut conn = ConnInfo::default();
    let mut content_length: Option<u64> = None;
    let mut te_values: Vec<&[u8]> = Vec::new();
    let mut host: Option<&[u8]> = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = h.value;
        if !value_ok(value) {
            return reject(400, "control character in a header value");
        }
        if name.contains(&b'_') {
            let dashed: Vec<u8> = name
                .iter()
                .map(|&b| if b == b'_' { b'-' } else { b })
                .collect();
            if name_is(&dashed, "content-length") || name_is(&dashed, "transfer-encoding") {
                return reject(400, "framing header name with an underscore");
            }
        }
        if name_is(name, "content-length") {
            let Some(n) = parse_content_length(value) else {
                return reject(400, "invalid Content-Length");
            };
            if content_length.is_some_and(|prev| prev != n) {
                return reject(400, "conflicting Content-Length values");
            }
            content_length = Some(n);
        } else if name_is(name, "transfer-encoding") {
            te_values.push(value);
        } else if name_is(name, "host") {
            if host.is_some() {
                return reject(400, "more than one Host field");
            }
            if !host_ok(value) {
                return reject(400, "invalid Host value");
            }
            host = Some(value);
        } else if name_is(name, "connection") {
            conn.add(value);
        }
        headers.push(Header {
            name: range_in(buf, name),
            value: range_in(buf, value),
        });
    }

    let framing = match (te_values.is_empty(), content_length) {
        (false, _) if version == Version::Http10 => {
            return reject(400, "Transfer-Encoding in an HTTP/1.0 request")
        }
        (false, Some(_)) if !relaxed => {
            return reject(400, "both Content-Length and Transfer-Encoding")
        }
        (false, _) => match transfer_encoding(&te_values) {
            TeVerdict::Chunked => Framing::Chunked,
            TeVerdict::Malformed => return reject(400, "malformed Transfer-Encoding"),
            TeVerdict::Unsupported => return reject(501, "unsupported transfer coding"),
        },
        (true, Some(0)) | (true, None) => Framing::None,
        (true, Some(n)) => Framing::Length(n),
    };
    if version == Version::Http10
        && framing != Framing::None
        && matches!(method, b"GET" | b"HEAD" | b"DELETE")
    {
        return reject(413, "body on an HTTP/1.0 GET, HEAD or DELETE");
    }
    if version == Version::Http11 && host.is_none() && !relaxed {
        return reject(400, "HTTP/1.1 request without Host");
    }
    if let Some(authority) = absolute_authority(target, relaxed) {
        if host.is_some_and(|h| !h.eq_ignore_ascii_case(authority)) {
            return reject(400, "absolute-form authority differs from Host");
        }
    }
    if method == b"CONNECT" {
        if host.is_some_and(|h| !h.eq_ignore_ascii_case(target)) {
            return reject(400, "CONNECT target differs from Host");
        }
        // A CONNECT has no content (RFC 9110 §9.3.6): what follows its head is the
        // tunnel's, which a length must not claim.
        if framing != Framing::None {
            return reject(400, "CONNECT request with a body");
        }
    }
    let wants_close = conn.close || (version == Version::Http10 && !conn.keep_alive);
    Ok(Some(RequestHead {
        len,
        method: range_in(buf, method),
        target: range_in(buf, target),
        path: range_in(buf, &target[path]),
        version,
        headers,
        framing,
        host: host.map(|h| range_in(buf, h)),
        wants_close,
        nominated: conn.nominated,
    }))
}

/// A request line whose version is a well-formed `HTTP/x.y` other than 1.x gets 505.
fn version_status(buf: &[u8]) -> u16 {
    let line_end = memchr::memchr(b'\n', buf).unwrap_or(buf.len());
    let line = buf[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&buf[..line_end]);
    match line.rsplit(|&b| b == b' ').next() {
        Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor])
            if major.is_ascii_digit() && minor.is_ascii_digit() && *major >= b'2' =>
        {
            505
        }
        _ => 400,
    }
}

/// Checks the request-target form against the method; returns the path part's range
/// relative to the target.
fn check_target(method: &[u8], target: &[u8], relaxed: bool) -> Result<Range<usize>, HeadError> {
    if target
        .iter()
        .any(|&b| !(0x21..=0x7e).contains(&b) || b == b'#')
    {
        return reject(400, "invalid character in request target");
    }
    let path_of = |start: usize| {
        let end = memchr::memchr(b'?', &target[start..]).map_or(target.len(), |i| start + i);
        start..end
    };
    match target.first() {
        Some(b'/') if method != b"CONNECT" => Ok(path_of(0)),
        Some(b'*') if target == b"*" && method == b"OPTIONS" => Ok(0..1),
        // authority-form: `host:port`, the port required (RFC 9112 §3.2.3); no path.
        _ if method == b"CONNECT" => match target.iter().rposition(|&b| b == b':') {
            Some(i) if host_ok(target) && target[i + 1..].iter().all(u8::is_ascii_digit) => {
                Ok(target.len()..target.len())
            }
            _ => reject(400, "CONNECT target is not host:port"),
        },
        _ => {
            let Some(authority) = absolute_authority(target, relaxed) else {
                return reject(400, "invalid request target form");
            };
            let start = authority.as_ptr() as usize - target.as_ptr() as usize + authority.len();
            if start == target.len() {
                Ok(start..start)
            } else {
                Ok(path_of(start))
            }
        }
    }
}

/// The authority of an absolute-form target (`http://host:port/path`); with `userinfo`, one
/// written `user@host` is accepted and its host part returned.
fn absolute_authority(target: &[u8], userinfo: bool) -> Option<&[u8]> {
    let rest = target
        .strip_prefix(b"http://")
        .or_else(|| target.strip_prefix(b"https://"))?;
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let mut authority = &rest[..end];
    if userinfo {
        if let Some(at) = authority.iter().rposition(|&b| b == b'@') {
            authority = &authority[at + 1..];
        }
    }
    (!authority.is_empty() && host_ok(authority)).then_some(authority)
}

/// `host [ ":" port ]` with a reg-name or IPv4 host, or a bracketed IPv6 literal; port 1-65535.
fn host_ok(v: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = v.strip_prefix(b"[") {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..close];
        if literal.is_empty()
            || !literal
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return false;
        }
        match &rest[close + 1..] {
            [] => (&b"x"[..], None),
            [b':', port @ ..] => (&b"x"[..], Some(port)),
            _ => return false,
        }
    } else {
        match v.iter().rposition(|&b| b == b':') {
            Some(i) => (&v[..i], Some(&v[i + 1..])),
            None => (v, None),
        }
    };
    let host_chars = host
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b));
    let port_ok = port.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 5
            && p.iter().all(u8::is_ascii_digit)
            && std::str::from_utf8(p)
                .ok()
                .and_then(|s| s.parse::<u32>().ok())
                .is_some_and(|n| (1..=65535).contains(&n))
    });
    !host.is_empty() && host_chars && port_ok
}

/// Where the path of a request target starts: 0 for origin-form (`/p?q`), after the
/// scheme and authority for absolute-form (`http://h:8/p`; the end when it has no path).
pub fn path_start(target: &[u8]) -> usize {
    if target.starts_with(b"/") {
        return 0;
    }
    memchr::memmem::find(target, b"://")
        .and_then(|i| memchr::memchr(b'/', &target[i + 3..]).map(|j| i + 3 + j))
        .unwrap_or(target.len())
}

/// A request target as (scheme and authority of an absolute form, path, query).
pub fn split_target(t: &[u8]) -> (&[u8], &[u8], Option<&[u8]>) {
    let (prefix, rest) = t.split_at(path_start(t));
    match memchr::memchr(b'?', rest) {
        Some(q) => (prefix, &rest[..q], Some(&rest[q + 1..])),
        None => (prefix, rest, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split() {
        assert_eq!(
            split_target(b"/a/b?x=1"),
            (&b""[..], &b"/a/b"[..], Some(&b"x=1"[..]))
        );
        assert_eq!(split_target(b"/a"), (&b""[..], &b"/a"[..], None));
        assert_eq!(
            split_target(b"http://h:8/p?q"),
            (&b"http://h:8"[..], &b"/p"[..], Some(&b"q"[..]))
        );
    }

    fn status(raw: &str) -> u16 {
        match parse_request(raw.as_bytes()) {
            Ok(Some(_)) => 200,
            Ok(None) => 0,
            Err(e) => e.status,
        }
    }

    #[test]
    fn accepts_plain_requests() {
        let raw = b"GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Secret\r\n\r\nrest";
        let h = parse_request(raw).unwrap().unwrap();
        assert_eq!(h.len, raw.len() - 4);
        assert_eq!(&raw[h.path.clone()], b"/a/b");
        assert_eq!(&raw[h.target.clone()], b"/a/b?x=1");
        assert_eq!(h.framing, Framing::None);
        assert!(!h.wants_close);
        assert!(h.is_hop_by_hop(b"x-secret"));
        assert!(h.is_hop_by_hop(b"Keep-Alive"));
        assert!(!h.is_hop_by_hop(b"x-other"));
        assert_eq!(status("GET / HTTP/1.1\nHost: a\n\n"), 200);
        assert_eq!(status("GET / HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\n"), 0);
        assert_eq!(status("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), 200);
        assert_eq!(
            status("GET http://a:8080/x HTTP/1.1\r\nHost: a:8080\r\n\r\n"),
            200
        );
        assert_eq!(status("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), 200);
    }

    #[test]
    fn framing_vectors() {
        let cl = |v: &str| {
            status(&format!(
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {v}\r\n\r\n"
            ))
        };
        assert_eq!(cl("3"), 200);
        assert_eq!(cl("3, 3"), 200);
        assert_eq!(cl("3, 4"), 400);
        assert_eq!(cl("+3"), 400);
        assert_eq!(cl(""), 400);
        assert_eq!(cl("99999999999999999999999"), 400);
        let h = parse_request(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 003\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Length(3));
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"),
            400
        );
        assert_eq!(status("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
        let te = |v: &str| {
            status(&format!(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {v}\r\n\r\n"
            ))
        };
        assert_eq!(te("chunked"), 200);
        assert_eq!(te("CHUNKED"), 200);
        assert_eq!(te("chunked, gzip"), 400);
        assert_eq!(te("gzip, chunked"), 501);
        assert_eq!(te("identity"), 501);
        assert_eq!(te("chunked, chunked"), 400);
        assert_eq!(te("\"chunked\""), 400);
        assert_eq!(
            status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(
            status("POST / HTTP/1.1\r\nHost: a\r\nTransfer_Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(status("GET / HTTP/1.0\r\nContent-Length: 5\r\n\r\n"), 413);
    }

    #[test]
    fn header_syntax_vectors() {
        assert_eq!(status("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nnocolon\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"), 400);
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nX: a\x0bb\r\n\r\n"),
            400
        );
        assert_eq!(
            status("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n"),
            400
        );
        assert_eq!(status("GET / HTTP/1.1\r\n Host: a\r\n\r\n"), 400);
        let many: String = (0..150).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            status(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n")),
            431
        );
    }

    #[test]
    fn request_line_vectors() {
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a:0\r\n\r\n"), 400);
        assert_eq!(status("GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET admin HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET host:80 HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET /\r\n\r\n"), 400);
        assert_eq!(status("GET / http/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.10\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
        assert_eq!(status("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("G(T / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("CONNECT a:443 HTTP/1.1\r\nHost: b:443\r\n\r\n"), 400);
        assert_eq!(
            status("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\nContent-Length: 3\r\n\r\nabc"),
            400
        );
        let raw = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n";
        let head = parse_request(raw).unwrap().unwrap();
        assert!(head.is_connect(raw) && head.framing == Framing::None);
        assert_eq!(&raw[head.target.clone()], b"a.test:443");
        assert!(raw[head.path.clone()].is_empty());
    }

    #[test]
    fn connection_semantics() {
        let h = parse_request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.wants_close);
        let h = parse_request(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(h.wants_close);
        let h = parse_request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.wants_close);
    }
}
