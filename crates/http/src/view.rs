//! Protocol-neutral views of message heads: what a proxy transaction reads of a request or a
//! response, whichever protocol carried it. Rules, routing, compression decisions and the
//! head writers work on these views, never on a protocol's own head type.
//!
//! Four kinds of head: HTTP/1 heads (byte ranges into the connection's buffer), HTTP/2
//! heads as the `h2` crate decodes them (`http::request::Parts` and `http::response::Parts`,
//! whose values are shared bytes, never copied here), the proxy's own answers
//! ([`crate::Answer`]) and requests held by value ([`crate::RequestCopy`]). A view is `Copy` and borrows the head: it lives no
//! longer than the bytes it shows.
//!
//! Invariant: both kinds answer alike for the same message. An HTTP/2 request's
//! `:authority` reads as its `Host` (first, as HTTP/1.1 puts it), its body without a
//! length reads as [`Framing::Delimited`] (its data alone, its end the stream's) and its cookies as one field once the
//! codec has joined them ([`join_cookies`]); an HTTP/2 response without a body and without
//! a length reads as `Content-Length: 0`, as a server of HTTP/1.1 would have said.

use crate::head::{Framing, Version};
use crate::{name_is, Answer, RequestCopy, RequestHead, ResponseHead};

/// A request head.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    kind: RequestKind<'a>,
}

#[derive(Debug, Clone, Copy)]
enum RequestKind<'a> {
    H1 {
        buf: &'a [u8],
        head: &'a RequestHead,
    },
    H2 {
        parts: &'a http::request::Parts,
        framing: Framing,
    },
    Copy(&'a RequestCopy),
}

/// Every header of a head as (name, value), in order.
pub struct Headers<'a> {
    kind: HeadersKind<'a>,
}

enum HeadersKind<'a> {
    H1 {
        buf: &'a [u8],
        fields: std::slice::Iter<'a, crate::Header>,
    },
    H2 {
        /// `:authority`, read as `Host` before the other fields (taken once shown).
        host: Option<&'a [u8]>,
        /// There is an `:authority`: a `host` field is not shown.
        authority: bool,
        fields: http::header::Iter<'a, http::HeaderValue>,
    },
    /// Fields held by value (an [`Answer`], a [`RequestCopy`]).
    Owned(std::slice::Iter<'a, (Vec<u8>, Vec<u8>)>),
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], &'a [u8]);

    /// Exact for HTTP/1; for HTTP/2, at most the fields and `:authority` (a `host` field
    /// under an `:authority` is not shown). Writers size their maps with the upper bound.
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.kind {
            HeadersKind::H1 { fields, .. } => fields.size_hint(),
            HeadersKind::H2 {
                host,
                authority,
                fields,
            } => {
                let (low, high) = fields.size_hint();
                let extra = usize::from(host.is_some());
                let low = if *authority { extra } else { low };
                (low, high.map(|h| h + extra))
            }
            HeadersKind::Owned(fields) => fields.size_hint(),
        }
    }

    // Inlined across crates, as the iterator it replaced was: every header lookup runs it.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.kind {
            HeadersKind::H1 { buf, fields } => {
                let h = fields.next()?;
                Some((&buf[h.name.clone()], &buf[h.value.clone()]))
            }
            HeadersKind::H2 {
                host,
                authority,
                fields,
            } => {
                if let Some(h) = host.take() {
                    return Some((b"host", h));
                }
                loop {
                    let (name, value) = fields.next()?;
                    // `:authority` wins over a `host` field (RFC 9113 §8.3.1).
                    if *authority && name == http::header::HOST {
                        continue;
                    }
                    return Some((name.as_str().as_bytes(), value.as_bytes()));
                }
            }
            HeadersKind::Owned(fields) => fields.next().map(|(n, v)| (&n[..], &v[..])),
        }
    }
}

/// The first value of field `lower` in an HTTP/1 head parsed from `buf`.
fn h1_header<'a>(buf: &'a [u8], fields: &'a crate::Fields, lower: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|h| name_is(&buf[h.name.clone()], lower))
        .map(|h| &buf[h.value.clone()])
}

/// Joins an HTTP/2 request's `cookie` fields into one, as HTTP/1.1 wants them (RFC 9113
/// §8.2.3): what the codec does before it shows the head. Nothing is allocated for a
/// request with one cookie field or none.
pub fn join_cookies(headers: &mut http::HeaderMap) {
    let joined = {
        let mut all = headers.get_all(http::header::COOKIE).iter();
        match (all.next(), all.next()) {
            (Some(first), Some(_)) => {
                let values = headers.get_all(http::header::COOKIE).iter();
                let mut out = Vec::with_capacity(first.len() * 2);
                for (i, v) in values.enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b"; ");
                    }
                    out.extend_from_slice(v.as_bytes());
                }
                out
            }
            _ => return,
        }
    };
    if let Ok(v) = http::HeaderValue::from_bytes(&joined) {
        headers.insert(http::header::COOKIE, v);
    }
}

impl<'a> RequestView<'a> {
    /// An HTTP/1 head parsed from `buf` by [`crate::parse_request`].
    pub fn h1(buf: &'a [u8], head: &'a RequestHead) -> Self {
        RequestView {
            kind: RequestKind::H1 { buf, head },
        }
    }

    /// A request head held by value.
    pub fn copy(copy: &'a RequestCopy) -> Self {
        RequestView {
            kind: RequestKind::Copy(copy),
        }
    }

    /// An HTTP/2 request head; `ended` says its stream carries no body.
    pub fn h2(parts: &'a http::request::Parts, ended: bool) -> Self {
        let length = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok()?.parse().ok());
        let framing = match length {
            Some(n) => Framing::Length(n),
            None if ended => Framing::None,
            None => Framing::Delimited,
        };
        RequestView {
            kind: RequestKind::H2 { parts, framing },
        }
    }

    pub fn method(&self) -> &'a [u8] {
        match self.kind {
            RequestKind::H1 { buf, head } => &buf[head.method.clone()],
            RequestKind::H2 { parts, .. } => parts.method.as_str().as_bytes(),
            RequestKind::Copy(c) => &c.method,
        }
    }

    /// The request target as sent (origin or absolute form; a CONNECT's authority).
    pub fn target(&self) -> &'a [u8] {
        match self.kind {
            RequestKind::H1 { buf, head } => &buf[head.target.clone()],
            RequestKind::H2 { parts, .. } if parts.method == http::Method::CONNECT => {
                parts.uri.authority().map_or(b"", |a| a.as_str().as_bytes())
            }
            RequestKind::H2 { parts, .. } => parts
                .uri
                .path_and_query()
                .map_or(b"/", |p| p.as_str().as_bytes()),
            RequestKind::Copy(c) => &c.target,
        }
    }

    /// An HTTP/2 request's `:scheme` (HTTP/1 has none in its head).
    pub fn scheme(&self) -> Option<&'a str> {
        match self.kind {
            RequestKind::H1 { .. } => None,
            RequestKind::H2 { parts, .. } => parts.uri.scheme_str(),
            RequestKind::Copy(c) => c.scheme.as_deref(),
        }
    }

    /// The path part of the target.
    pub fn path(&self) -> &'a [u8] {
        match self.kind {
            RequestKind::H1 { buf, head } => &buf[head.path.clone()],
            RequestKind::H2 { parts, .. } if parts.method == http::Method::CONNECT => b"",
            RequestKind::H2 { parts, .. } => parts.uri.path().as_bytes(),
            RequestKind::Copy(c) => crate::split_target(&c.target).1,
        }
    }

    pub fn version(&self) -> Version {
        match self.kind {
            RequestKind::H1 { head, .. } => head.version,
            RequestKind::H2 { parts, .. } if parts.version == http::Version::HTTP_3 => {
                Version::Http3
            }
            RequestKind::H2 { .. } => Version::Http2,
            RequestKind::Copy(c) => c.version,
        }
    }

    /// How the request body is delimited.
    pub fn framing(&self) -> Framing {
        match self.kind {
            RequestKind::H1 { head, .. } => head.framing,
            RequestKind::H2 { framing, .. } => framing,
            RequestKind::Copy(c) => c.framing,
        }
    }

    /// The part of the body already received with the head (at most its announced length;
    /// an HTTP/2 body is never in the head's bytes).
    pub fn body_so_far(&self) -> &'a [u8] {
        let RequestKind::H1 { buf, head } = self.kind else {
            return &[];
        };
        let rest = buf.get(head.len..).unwrap_or_default();
        match head.framing {
            Framing::Length(n) => &rest[..rest.len().min(n as usize)],
            _ => &[],
        }
    }

    /// The client asked to close its connection after this exchange (an HTTP/2 stream
    /// never does: its connection is not the message's business).
    pub fn wants_close(&self) -> bool {
        match self.kind {
            RequestKind::H1 { head, .. } => head.wants_close,
            RequestKind::H2 { .. } => false,
            RequestKind::Copy(c) => c.wants_close,
        }
    }

    pub fn is_head(&self) -> bool {
        self.method() == b"HEAD"
    }

    /// Methods RFC 9110 §9.2.2 calls idempotent: safe to replay when a reused connection fails.
    pub fn is_idempotent(&self) -> bool {
        matches!(
            self.method(),
            b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" | b"PUT" | b"DELETE"
        )
    }

    /// The first value of header `lower` (a lowercase name).
    pub fn header(&self, lower: &str) -> Option<&'a [u8]> {
        match self.kind {
            // The HTTP/1 head's own fields, searched without the general iterator: every
            // request looks up several.
            RequestKind::H1 { buf, head } => h1_header(buf, &head.headers, lower),
            RequestKind::H2 { .. } => self
                .headers()
                .find(|(n, _)| name_is(n, lower))
                .map(|(_, v)| v),
            RequestKind::Copy(c) => c.fields.header(lower),
        }
    }

    /// Every header as (name, value), in order.
    pub fn headers(&self) -> Headers<'a> {
        let kind = match self.kind {
            RequestKind::H1 { buf, head } => HeadersKind::H1 {
                buf,
                fields: head.headers.iter(),
            },
            RequestKind::H2 { parts, .. } => {
                let host = normalized_authority(parts);
                HeadersKind::H2 {
                    host,
                    authority: host.is_some(),
                    fields: parts.headers.iter(),
                }
            }
            RequestKind::Copy(c) => HeadersKind::Owned(c.fields.iter()),
        };
        Headers { kind }
    }

    /// Fields that must not be forwarded: hop-by-hop ones, those nominated by `Connection`,
    /// and the framing fields the proxy writes itself.
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        match self.kind {
            RequestKind::H1 { head, .. } => head.is_hop_by_hop(name),
            RequestKind::H2 { .. } => crate::request::is_hop_by_hop(name, &[]),
            RequestKind::Copy(c) => {
                crate::request::is_hop_by_hop(name, &[])
                    || c.fields.nominates(&name.to_ascii_lowercase())
            }
        }
    }

    /// Whether `Connection` nominates `token` (lowercase; HTTP/2 has no `Connection`).
    pub fn nominates(&self, token: &[u8]) -> bool {
        match self.kind {
            RequestKind::H1 { head, .. } => head.nominated.iter().any(|n| n == token),
            // HTTP/2 has no `Connection` field; the proxy's own WebSocket translation is
            // the one HTTP/2 head that carries one.
            RequestKind::H2 { parts, .. } => parts
                .headers
                .get_all(http::header::CONNECTION)
                .iter()
                .flat_map(|v| v.as_bytes().split(|&b| b == b','))
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token)),
            RequestKind::Copy(c) => c.fields.nominates(token),
        }
    }
}

/// A response head.
#[derive(Debug, Clone, Copy)]
pub struct ResponseView<'a> {
    kind: ResponseKind<'a>,
}

#[derive(Debug, Clone, Copy)]
enum ResponseKind<'a> {
    H1 {
        buf: &'a [u8],
        head: &'a ResponseHead,
    },
    H2 {
        parts: &'a http::response::Parts,
        framing: Framing,
    },
    Answer(&'a Answer),
}

impl<'a> ResponseView<'a> {
    /// An HTTP/1 head parsed from `buf` by [`crate::parse_response`].
    pub fn h1(buf: &'a [u8], head: &'a ResponseHead) -> Self {
        ResponseView {
            kind: ResponseKind::H1 { buf, head },
        }
    }

    /// The head of one of the proxy's own answers.
    pub fn answer(answer: &'a Answer) -> Self {
        ResponseView {
            kind: ResponseKind::Answer(answer),
        }
    }

    /// An HTTP/2 response head; `ended` says its stream carries no body, `head_request`
    /// that it answers a HEAD (no body, whatever its fields say).
    pub fn h2(parts: &'a http::response::Parts, ended: bool, head_request: bool) -> Self {
        let status = parts.status;
        let bodiless = head_request || status.is_informational() || status == 204 || status == 304;
        let length = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok()?.parse().ok());
        let framing = match length {
            _ if bodiless => Framing::None,
            Some(n) => Framing::Length(n),
            None if ended => Framing::Length(0),
            None => Framing::Delimited,
        };
        ResponseView {
            kind: ResponseKind::H2 { parts, framing },
        }
    }

    pub fn status(&self) -> u16 {
        match self.kind {
            ResponseKind::H1 { head, .. } => head.status,
            ResponseKind::H2 { parts, .. } => parts.status.as_u16(),
            ResponseKind::Answer(a) => a.status,
        }
    }

    /// The reason phrase the server sent (empty when it sent none, as HTTP/2 never does).
    pub fn reason(&self) -> &'a [u8] {
        match self.kind {
            ResponseKind::H1 { buf, head } => &buf[head.reason.clone()],
            ResponseKind::H2 { .. } => b"",
            ResponseKind::Answer(a) => &a.reason,
        }
    }

    pub fn version(&self) -> Version {
        match self.kind {
            ResponseKind::H1 { head, .. } => head.version,
            ResponseKind::H2 { .. } => Version::Http2,
            ResponseKind::Answer(a) => a.version,
        }
    }

    /// How the response body is delimited.
    pub fn framing(&self) -> Framing {
        match self.kind {
            ResponseKind::H1 { head, .. } => head.framing,
            ResponseKind::H2 { framing, .. } => framing,
            // The length it announces (an `errorfile` may say one; a rules' copy of a
            // chunked response says chunked), else its body's.
            ResponseKind::Answer(a) => {
                let length = a.header("content-length");
                match length.and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok()) {
                    Some(n) => Framing::Length(n),
                    None if a.header("transfer-encoding").is_some() => Framing::Chunked,
                    None => Framing::Length(a.body.len() as u64),
                }
            }
        }
    }

    /// The server's connection cannot carry another request after this response (an
    /// HTTP/2 connection outlives its streams).
    pub fn must_close(&self) -> bool {
        match self.kind {
            ResponseKind::H1 { head, .. } => head.must_close,
            ResponseKind::H2 { .. } => false,
            ResponseKind::Answer(a) => a.says_close(),
        }
    }

    /// The first value of header `lower` (a lowercase name).
    pub fn header(&self, lower: &str) -> Option<&'a [u8]> {
        match self.kind {
            ResponseKind::H1 { buf, head } => h1_header(buf, &head.headers, lower),
            ResponseKind::H2 { parts, .. } => parts.headers.get(lower).map(|v| v.as_bytes()),
            ResponseKind::Answer(a) => a.header(lower),
        }
    }

    /// Every header as (name, value), in order.
    pub fn headers(&self) -> Headers<'a> {
        let kind = match self.kind {
            ResponseKind::H1 { buf, head } => HeadersKind::H1 {
                buf,
                fields: head.headers.iter(),
            },
            ResponseKind::H2 { parts, .. } => HeadersKind::H2 {
                host: None,
                authority: false,
                fields: parts.headers.iter(),
            },
            ResponseKind::Answer(a) => HeadersKind::Owned(a.fields.iter()),
        };
        Headers { kind }
    }

    /// Fields that must not be forwarded (as for requests).
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        match self.kind {
            ResponseKind::H1 { head, .. } => head.is_hop_by_hop(name),
            ResponseKind::H2 { .. } | ResponseKind::Answer(_) => {
                crate::request::is_hop_by_hop(name, &[])
            }
        }
    }
}

/// An HTTP/2 request's `:authority` without the port its scheme implies (`http://h:80` is
/// `h`), as HAProxy 2.6 normalizes it (and the `Host` it makes of it).
fn normalized_authority(parts: &http::request::Parts) -> Option<&[u8]> {
    let a = parts.uri.authority()?.as_str();
    let default = match parts.uri.scheme_str() {
        Some("http") => ":80",
        Some("https") => ":443",
        _ => return Some(a.as_bytes()),
    };
    Some(a.strip_suffix(default).unwrap_or(a).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h1_request_view() {
        let raw =
            b"HEAD /a/b?x=1 HTTP/1.1\r\nHost: h\r\nConnection: close, X-Y\r\nAccept: */*\r\n\r\n";
        let head = crate::parse_request(raw).unwrap().unwrap();
        let v = RequestView::h1(raw, &head);
        assert_eq!(v.method(), b"HEAD");
        assert_eq!(v.target(), b"/a/b?x=1");
        assert_eq!(v.path(), b"/a/b");
        assert!(v.is_head() && v.is_idempotent() && v.wants_close());
        assert_eq!(v.header("accept"), Some(&b"*/*"[..]));
        assert_eq!(v.headers().count(), 3);
        assert!(v.nominates(b"x-y") && v.is_hop_by_hop(b"X-Y") && !v.is_hop_by_hop(b"accept"));
        assert_eq!(v.framing(), Framing::None);
    }

    #[test]
    fn h1_response_view() {
        let raw = b"HTTP/1.1 404 Nope\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
        let head = crate::parse_response(raw, false).unwrap().unwrap();
        let v = ResponseView::h1(raw, &head);
        assert_eq!((v.status(), v.reason()), (404, &b"Nope"[..]));
        assert_eq!(v.framing(), Framing::Length(3));
        assert!(v.must_close());
        assert_eq!(v.header("content-length"), Some(&b"3"[..]));
        assert!(v.is_hop_by_hop(b"connection"));
    }
}
