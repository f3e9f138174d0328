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
    parse_response_limited(buf, head_request, MAX_HEADERS)
}

/// [`parse_response`] with at most `max_fields` fields (`tune.http.maxhdr` less the status
/// line).
pub fn parse_response_limited(
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
    if rsp.headers.len() > max_fields {
        return Err("too many header fields in response");
    }
    let status = rsp.code.unwrap_or(0);
    if !(100..=599).contains(&status) {
        return Err("invalid status code");
    }
    let version = if rsp.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    let mut headers = Fields::with_capacity(rsp.headers.len());
    let mut conn = ConnInfo::default();
    let mut content_length = None;
    let mut te_values: Vec<&[u8]> = Vec::new();
    for h in rsp.headers.iter() {
        let name = h.name.as_bytes();
        if !value_ok(h.value) {
            return Err("control character in a response header");
        }
        if name_is(name, "content-length") {
            let n = parse_content_length(h.value).ok_or("invalid Content-Length in response")?;
            if content_length.is_some_and(|p| p != n) {
                return Err("conflicting Content-Length in response");
            }
            content_length = Some(n);
        } else if name_is(name, "transfer-encoding") {
            te_values.push(h.value);
        } else if name_is(name, "connection") {
            conn.add(h.value);
        }
        headers.push(Header {
            name: range_in(buf, name),
            value: range_in(buf, h.value),
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
    let reason = rsp.reason.unwrap_or("").as_bytes();
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
    }))
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
}
