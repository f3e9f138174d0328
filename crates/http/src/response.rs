//! Response heads from servers. Servers are not trusted: anything malformed is an error the
//! proxy turns into a 502, and the server connection is then never reused.

use crate::head::{
    parse_content_length, range_in, transfer_encoding, value_ok, ConnInfo, Fields, Framing, Header,
    TeVerdict, Version,
};
use crate::request::is_hop_by_hop;
use crate::{name_is, MAX_HEADERS};

/// A parsed response head; ranges index the buffer given to [`parse_response`].
#[derive(Debug, Clone)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub reason: std::ops::Range<usize>,
    pub version: Version,
    pub headers: Fields,
    pub framing: Framing,
    /// The connection cannot carry another request after this response.
    pub must_close: bool,
    pub nominated: Vec<Vec<u8>>,
    /// Accepted only because the parse was relaxed (`option accept-invalid-http-response`):
    /// a field name outside RFC 9110's token characters, or a version of several digits.
    /// HAProxy keeps such a response for `show errors` while passing it on.
    pub irregular: bool,
}

impl ResponseHead {
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        is_hop_by_hop(name, &self.nominated)
    }

    pub fn header<'a>(&self, buf: &'a [u8], lower: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| name_is(&buf[h.name.clone()], lower))
            .map(|h| &buf[h.value.clone()])
    }
}

/// Parses a response head. `head_request` says the request was HEAD (no body follows).
/// `Err` carries a reason; the caller answers 502.
pub fn parse_response(
    buf: &[u8],
    head_request: bool,
) -> Result<Option<ResponseHead>, &'static str> {
    parse_response_limited(buf, head_request, MAX_HEADERS, false)
}

/// [`parse_response`] with at most `max_fields` fields (`tune.http.maxhdr` less the status
/// line). `relaxed` (HAProxy's `option accept-invalid-http-response`) accepts, as HAProxy
/// does, field names of any bytes but controls, white space and `:`, and versions of several digits
/// (`HTTP/1.10`); such a head is marked [`ResponseHead::irregular`]. The framing rules stay
/// as strict as ever: they are what two parsers could read differently.
pub fn parse_response_limited(
    buf: &[u8],
    head_request: bool,
    max_fields: usize,
    relaxed: bool,
) -> Result<Option<ResponseHead>, &'static str> {
    match parse_response_strict(buf, head_request, max_fields) {
        Err(_) if relaxed => relaxed::parse(buf, head_request, max_fields),
        strict => strict,
    }
}

fn parse_response_strict(
    buf: &[u8],
    head_request: bool,
    max_fields: usize,
) -> Result<Option<ResponseHead>, &'static str> {
    // The slots as `parse_request_limited` takes them (written out in each: a helper taking
    // the parse as a closure cost the HTTP/1 path 390 instructions a request, callgrind).
    if max_fields <= MAX_HEADERS {
        // Uninitialized, as for requests.
        let mut storage = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS + 1];
        parse_response_in(buf, head_request, max_fields, &mut storage)
    } else {
        let mut storage = Vec::new();
        storage.resize_with(max_fields + 1, std::mem::MaybeUninit::uninit);
        parse_response_in(buf, head_request, max_fields, &mut storage)
    }
}

fn parse_response_in<'b>(
    buf: &'b [u8],
    head_request: bool,
    max_fields: usize,
    storage: &mut [std::mem::MaybeUninit<httparse::Header<'b>>],
) -> Result<Option<ResponseHead>, &'static str> {
    let mut rsp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut rsp, buf, storage)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err("malformed response head"),
    };
    let version = if rsp.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    let line = StatusLine {
        len,
        status: rsp.code.unwrap_or(0),
        version,
        reason: rsp.reason.unwrap_or("").as_bytes(),
    };
    let fields = rsp.headers.iter().map(|h| (h.name.as_bytes(), h.value));
    interpret(buf, line, fields, head_request, max_fields)
}

/// What a response's first line says (`reason` a slice of the parsed buffer).
struct StatusLine<'b> {
    len: usize,
    status: u16,
    version: Version,
    reason: &'b [u8],
}

/// The head's meaning, from its status line and fields (slices of `buf`), whichever parse
/// found them.
fn interpret<'b>(
    buf: &'b [u8],
    line: StatusLine<'b>,
    fields: impl ExactSizeIterator<Item = (&'b [u8], &'b [u8])>,
    head_request: bool,
    max_fields: usize,
) -> Result<Option<ResponseHead>, &'static str> {
    if fields.len() > max_fields {
        return Err("too many header fields in response");
    }
    let StatusLine {
        len,
        status,
        version,
        reason,
    } = line;
    if !(100..=599).contains(&status) {
        return Err("invalid status code");
    }
    let mut headers = Fields::with_capacity(fields.len());
    let mut conn = ConnInfo::default();
    let mut content_length = None;
    let mut te_values: Vec<&[u8]> = Vec::new();
    for (name, value) in fields {
        if !value_ok(value) {
            return Err("control character in a response header");
        }
        if name_is(name, "content-length") {
            let n = parse_content_length(value).ok_or("invalid Content-Length in response")?;
            if content_length.is_some_and(|p| p != n) {
                return Err("conflicting Content-Length in response");
            }
            content_length = Some(n);
        } else if name_is(name, "transfer-encoding") {
            te_values.push(value);
        } else if name_is(name, "connection") {
            conn.add(value);
        }
        headers.push(Header {
            name: range_in(buf, name),
            value: range_in(buf, value),
        });
    }
    let bodyless = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let mut must_close = conn.close || (version == Version::Http10 && !conn.keep_alive);
    let framing = if bodyless {
        Framing::None
    } else if !te_values.is_empty() {
        if transfer_encoding(&te_values) != TeVerdict::Chunked {
            return Err("unsupported Transfer-Encoding in response");
        }
        // RFC 9112 §6.3: chunked wins over Content-Length, and the connection is not reused.
        must_close |= content_length.is_some();
        Framing::Chunked
    } else if let Some(n) = content_length {
        Framing::Length(n)
    } else {
        must_close = true;
        Framing::UntilClose
    };
    let reason = if reason.is_empty() {
        len..len
    } else {
        range_in(buf, reason)
    };
    Ok(Some(ResponseHead {
        len,
        status,
        reason,
        version,
        headers,
        framing,
        must_close,
        nominated: conn.nominated,
        irregular: false,
    }))
}

/// The relaxed reading of a head that the strict parser refused.
mod relaxed {
    use super::{interpret, ResponseHead, StatusLine};
    use crate::head::{trim_ows, Version};

    pub(super) fn parse(
        buf: &[u8],
        head_request: bool,
        max_fields: usize,
    ) -> Result<Option<ResponseHead>, &'static str> {
        let mut lines = Lines { buf, at: 0 };
        let Some(first) = lines.next() else {
            return Ok(None);
        };
        let (version, status, reason) = status_line(first).ok_or("malformed response head")?;
        let mut fields = Vec::new();
        loop {
            let Some(line) = lines.next() else {
                return Ok(None);
            };
            if line.is_empty() {
                break;
            }
            if fields.len() > max_fields {
                return Err("too many header fields in response");
            }
            fields.push(field(line).ok_or("malformed response head")?);
        }
        let line = StatusLine {
            len: lines.at,
            status,
            version,
            reason,
        };
        let mut head = interpret(buf, line, fields.into_iter(), head_request, max_fields)?;
        if let Some(h) = head.as_mut() {
            h.irregular = true;
        }
        Ok(head)
    }

    /// The lines of a head, each without its CRLF (or bare LF, which the strict parser
    /// accepts too); `at` is where the next one starts.
    struct Lines<'b> {
        buf: &'b [u8],
        at: usize,
    }

    impl<'b> Iterator for Lines<'b> {
        type Item = &'b [u8];

        fn next(&mut self) -> Option<&'b [u8]> {
            let rest = &self.buf[self.at..];
            let end = rest.iter().position(|&b| b == b'\n')?;
            self.at += end + 1;
            let line = &rest[..end];
            Some(line.strip_suffix(b"\r").unwrap_or(line))
        }
    }

    fn is_control(b: u8) -> bool {
        (b < 0x20 && b != b'\t') || b == 0x7f
    }

    /// `HTTP/MAJOR.MINOR SP STATUS [SP REASON]`, digits of any count in the version.
    fn status_line(line: &[u8]) -> Option<(Version, u16, &[u8])> {
        let rest = line.strip_prefix(b"HTTP/")?;
        let (version, rest) = rest.split_at(rest.iter().position(|&b| b == b' ')?);
        let (major, minor) = version.split_at(version.iter().position(|&b| b == b'.')?);
        let (major, minor) = (number(major)?, number(&minor[1..])?);
        let rest = &rest[1..];
        let (code, reason) = rest.split_at(rest.len().min(3));
        let status = u16::try_from(number(code)?).ok()?;
        let reason = match reason {
            [] => reason,
            [b' ', reason @ ..] if !reason.iter().any(|&b| is_control(b)) => reason,
            _ => return None,
        };
        // As HAProxy reads it: 1.1 and anything above keeps the connection by default.
        let version = if major > 1 || (major == 1 && minor >= 1) {
            Version::Http11
        } else {
            Version::Http10
        };
        Some((version, status, reason))
    }

    fn number(digits: &[u8]) -> Option<u32> {
        if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    }

    /// `NAME: VALUE`, the name any bytes but controls, `:` and white space. HAProxy takes
    /// white space into the name too; sluice does not, or `Content-Length : 5` would pass
    /// to the client as a field the proxy did not frame by and the client might.
    fn field(line: &[u8]) -> Option<(&[u8], &[u8])> {
        let colon = line.iter().position(|&b| b == b':')?;
        let name = &line[..colon];
        let odd = |&b: &u8| is_control(b) || b == b' ' || b == b'\t';
        if name.is_empty() || name.iter().any(odd) {
            return None;
        }
        Some((name, trim_ows(&line[colon + 1..])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<ResponseHead, &'static str> {
        parse_response(raw.as_bytes(), false).map(|r| r.expect("complete"))
    }

    #[test]
    fn framings() {
        assert_eq!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
                .unwrap()
                .framing,
            Framing::Length(5)
        );
        let r = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")
            .unwrap();
        assert_eq!(r.framing, Framing::Chunked);
        assert!(r.must_close);
        let r = parse("HTTP/1.1 200 OK\r\n\r\n").unwrap();
        assert_eq!(r.framing, Framing::UntilClose);
        assert!(r.must_close);
        assert_eq!(
            parse("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n")
                .unwrap()
                .framing,
            Framing::None
        );
        assert_eq!(
            parse("HTTP/1.1 304 Not Modified\r\n\r\n").unwrap().framing,
            Framing::None
        );
        assert_eq!(
            parse("HTTP/1.1 103 Early Hints\r\n\r\n").unwrap().framing,
            Framing::None
        );
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(r.framing, Framing::None);
        assert!(
            parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap()
                .must_close
        );
        assert!(
            !parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n")
                .unwrap()
                .must_close
        );
    }

    #[test]
    fn malformed_responses() {
        assert!(
            parse("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n").is_err()
        );
        assert!(parse("HTTP/1.1 200 OK\r\nX : y\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n").is_err());
        assert!(parse("garbage\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 2000 OK\r\n\r\n").is_err());
        assert!(parse("HTTP/1.1 099 OK\r\n\r\n").is_err());
    }

    fn relaxed(raw: &str) -> Result<Option<ResponseHead>, &'static str> {
        parse_response_limited(raw.as_bytes(), false, MAX_HEADERS, true)
    }

    #[test]
    fn relaxed_parse_takes_odd_names_and_long_versions_only() {
        let raw = "HTTP/1.1 200 OK\r\nX(odd)@: 1\r\nContent-Length: 2\r\n\r\nok";
        assert!(parse(raw).is_err());
        let r = relaxed(raw).unwrap().unwrap();
        assert!(r.irregular);
        assert_eq!(r.framing, Framing::Length(2));
        assert_eq!(r.len, raw.len() - 2);
        assert_eq!(r.header(raw.as_bytes(), "x(odd)@"), Some(&b"1"[..]));
        assert_eq!(&raw.as_bytes()[r.reason.clone()], b"OK");
        let r = relaxed("HTTP/1.10 204 No Content\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (r.version, r.status, r.must_close),
            (Version::Http11, 204, false)
        );
        let r = relaxed("HTTP/01.0 200\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((r.version, r.must_close), (Version::Http10, true));
        // A well-formed head is the strict parser's, not marked.
        let r = relaxed("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!r.irregular);
        // Incomplete: more is awaited, as with the strict parser.
        assert!(relaxed("HTTP/1.1 200 OK\r\nX@: 1\r\n").unwrap().is_none());
        // Framing and white space stay refused.
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nab",
            "HTTP/1.1 200 OK\r\nX@: 1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX@: 1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX@: a\r\n b\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX@: a\x01\r\n\r\n",
            "HTTP/1.x 200 OK\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(relaxed(bad).is_err(), "{bad:?}");
        }
        let many: String = (0..5).map(|i| format!("X@{i}: v\r\n")).collect();
        let raw = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert!(parse_response_limited(raw.as_bytes(), false, 4, true).is_err());
        assert!(parse_response_limited(raw.as_bytes(), false, 5, true).is_ok());
    }
}
