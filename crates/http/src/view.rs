//! Protocol-neutral views of message heads: what a proxy transaction reads of a request or a
//! response, whichever protocol carried it. Rules, routing, compression decisions and the
//! head writers work on these views, never on a protocol's own head type, so an HTTP/2
//! session can later hand its transactions heads it decoded itself.
//!
//! HTTP/1 heads (byte ranges into the connection's buffer) are the one kind so far. A view is
//! `Copy` and borrows the head and its buffer: it lives no longer than the bytes it shows.

use crate::head::{Framing, Version};
use crate::{name_is, RequestHead, ResponseHead};

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
}

impl<'a> RequestView<'a> {
    /// An HTTP/1 head parsed from `buf` by [`crate::parse_request`].
    pub fn h1(buf: &'a [u8], head: &'a RequestHead) -> Self {
        RequestView {
            kind: RequestKind::H1 { buf, head },
        }
    }

    pub fn method(&self) -> &'a [u8] {
        let RequestKind::H1 { buf, head } = self.kind;
        &buf[head.method.clone()]
    }

    /// The request target as sent (origin or absolute form).
    pub fn target(&self) -> &'a [u8] {
        let RequestKind::H1 { buf, head } = self.kind;
        &buf[head.target.clone()]
    }

    /// The path part of the target.
    pub fn path(&self) -> &'a [u8] {
        let RequestKind::H1 { buf, head } = self.kind;
        &buf[head.path.clone()]
    }

    pub fn version(&self) -> Version {
        let RequestKind::H1 { head, .. } = self.kind;
        head.version
    }

    /// How the request body is delimited.
    pub fn framing(&self) -> Framing {
        let RequestKind::H1 { head, .. } = self.kind;
        head.framing
    }

    /// The part of the body already received with the head (at most its announced length).
    pub fn body_so_far(&self) -> &'a [u8] {
        let RequestKind::H1 { buf, head } = self.kind;
        let rest = buf.get(head.len..).unwrap_or_default();
        match head.framing {
            Framing::Length(n) => &rest[..rest.len().min(n as usize)],
            _ => &[],
        }
    }

    /// The client asked to close its connection after this exchange.
    pub fn wants_close(&self) -> bool {
        let RequestKind::H1 { head, .. } = self.kind;
        head.wants_close
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
        self.headers()
            .find(|(n, _)| name_is(n, lower))
            .map(|(_, v)| v)
    }

    /// Every header as (name, value), in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let RequestKind::H1 { buf, head } = self.kind;
        head.headers
            .iter()
            .map(move |h| (&buf[h.name.clone()], &buf[h.value.clone()]))
    }

    /// Fields that must not be forwarded: hop-by-hop ones, those nominated by `Connection`,
    /// and the framing fields the proxy writes itself.
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        let RequestKind::H1 { head, .. } = self.kind;
        head.is_hop_by_hop(name)
    }

    /// Whether `Connection` nominates `token` (lowercase).
    pub fn nominates(&self, token: &[u8]) -> bool {
        let RequestKind::H1 { head, .. } = self.kind;
        head.nominated.iter().any(|n| n == token)
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
}

impl<'a> ResponseView<'a> {
    /// An HTTP/1 head parsed from `buf` by [`crate::parse_response`].
    pub fn h1(buf: &'a [u8], head: &'a ResponseHead) -> Self {
        ResponseView {
            kind: ResponseKind::H1 { buf, head },
        }
    }

    pub fn status(&self) -> u16 {
        let ResponseKind::H1 { head, .. } = self.kind;
        head.status
    }

    /// The reason phrase the server sent (empty when it sent none).
    pub fn reason(&self) -> &'a [u8] {
        let ResponseKind::H1 { buf, head } = self.kind;
        &buf[head.reason.clone()]
    }

    pub fn version(&self) -> Version {
        let ResponseKind::H1 { head, .. } = self.kind;
        head.version
    }

    /// How the response body is delimited.
    pub fn framing(&self) -> Framing {
        let ResponseKind::H1 { head, .. } = self.kind;
        head.framing
    }

    /// The server's connection cannot carry another request after this response.
    pub fn must_close(&self) -> bool {
        let ResponseKind::H1 { head, .. } = self.kind;
        head.must_close
    }

    /// The first value of header `lower` (a lowercase name).
    pub fn header(&self, lower: &str) -> Option<&'a [u8]> {
        self.headers()
            .find(|(n, _)| name_is(n, lower))
            .map(|(_, v)| v)
    }

    /// Every header as (name, value), in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let ResponseKind::H1 { buf, head } = self.kind;
        head.headers
            .iter()
            .map(move |h| (&buf[h.name.clone()], &buf[h.value.clone()]))
    }

    /// Fields that must not be forwarded (as for requests).
    pub fn is_hop_by_hop(&self, name: &[u8]) -> bool {
        let ResponseKind::H1 { head, .. } = self.kind;
        head.is_hop_by_hop(name)
    }
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
