//! The heads of an HTTP/2 exchange as sluice makes them: a request for a server
//! ([`ServerRequest`], from the transaction's fields, without text; [`FieldStore`] gathers
//! the fields of any head sluice writes), and what still crosses as HTTP/1.1 text: a
//! client's tunnel request (CONNECT, a WebSocket's extended CONNECT), the proxy's own
//! answers read back for HEADERS, and a health check's answer rendered for its judge.
//! HTTP/1.1's connection-specific fields never cross into HTTP/2, and what HTTP/2 says in
//! pseudo-headers (`:authority`, `:scheme`) becomes `Host` or comes from it.

use base64::Engine as _;
use bytes::Bytes;
use sluice_http::{push_header, Framing};

/// The tunnels a stream may carry, each opened by a CONNECT (RFC 9113 §8.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel {
    /// `:protocol websocket` (RFC 8441), an HTTP/1.1 `Upgrade: websocket`, which an
    /// HTTP/1.1 server's 101 opens.
    WebSocket,
    /// No `:protocol`: to wherever `:authority` names, which a 2xx opens.
    Connect,
}

impl Tunnel {
    /// Whether an HTTP/1.1 server's answer `status` opens the tunnel (an HTTP/2 server's
    /// opens with any 2xx).
    pub(super) fn opened_by(self, status: u16) -> bool {
        match self {
            Tunnel::WebSocket => status == 101,
            Tunnel::Connect => (200..300).contains(&status),
        }
    }
}

/// The tunnel a client's stream asks for: a WebSocket (CONNECT with `:protocol
/// websocket`) or a plain CONNECT (no `:protocol`). `None` for any other request, and for
/// a CONNECT with another protocol, which sluice does not open.
pub fn tunnel(parts: &http::request::Parts) -> Option<Tunnel> {
    if parts.method != http::Method::CONNECT {
        return None;
    }
    match parts.extensions.get::<h2::ext::Protocol>() {
        None => Some(Tunnel::Connect),
        Some(p) if p.as_str().eq_ignore_ascii_case("websocket") => Some(Tunnel::WebSocket),
        Some(_) => None,
    }
}

/// Makes a WebSocket opened over HTTP/2 ([`tunnel`]) the request HTTP/1.1 opens one with,
/// as HAProxy's HTX has it: a GET with `Upgrade: websocket` (RFC 6455 §4.1) and a key of
/// its own, as HTTP/2 clients send none. What follows on the stream is the tunnel's bytes.
pub fn as_websocket_upgrade(parts: &mut http::request::Parts) {
    parts.method = http::Method::GET;
    parts.extensions.remove::<h2::ext::Protocol>();
    let nonce: [u8; 16] = std::array::from_fn(|_| fastrand::u8(..));
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    let h = &mut parts.headers;
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("upgrade"),
    );
    h.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static("websocket"),
    );
    if let Ok(key) = http::HeaderValue::from_str(&key) {
        h.insert(http::header::SEC_WEBSOCKET_KEY, key);
    }
}

/// A request for an HTTP/2 server as the transaction prepared it from the client's head and
/// the rules' edits, without text: the connection-specific fields are gone, the proxy's
/// own are in. What depends on the connection it leaves on (`:scheme`, the authority of a
/// request that names none, whether a WebSocket may go as an extended CONNECT) is settled
/// by [`request`].
#[derive(Debug, Clone)]
pub struct ServerRequest {
    pub method: http::Method,
    /// The target as the client gave it (origin or absolute form), or a CONNECT's
    /// authority.
    pub target: Bytes,
    /// The `Host` field, which becomes `:authority`.
    pub host: Option<Bytes>,
    /// The fields but `Host` and the framing ones.
    pub fields: http::HeaderMap,
    pub framing: Framing,
    /// The client asked for a WebSocket (HTTP/1.1 `Upgrade: websocket`).
    pub websocket: bool,
}

/// The fields of an HTTP/2 head as they are given, their values written one after the
/// other into one buffer and each taken out of it as a slice of shared bytes: one
/// allocation for them all (while they fit), and a copy of the head shares them instead
/// of copying each. A field HTTP/2 cannot carry makes the whole head so.
#[derive(Debug, Default)]
pub struct FieldStore {
    fields: http::HeaderMap,
    store: bytes::BytesMut,
    invalid: bool,
}

impl FieldStore {
    /// Room for about `n` fields.
    pub fn with_capacity(n: usize) -> FieldStore {
        FieldStore {
            fields: http::HeaderMap::with_capacity(n),
            store: bytes::BytesMut::with_capacity(n * 32 + 64),
            invalid: false,
        }
    }

    /// `bytes` as a slice of the shared buffer.
    pub fn keep(&mut self, bytes: &[u8]) -> Bytes {
        self.store.extend_from_slice(bytes);
        self.store.split().freeze()
    }

    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        let Ok(name) = http::HeaderName::from_bytes(name) else {
            self.invalid = true;
            return;
        };
        let value = self.keep(value);
        match http::HeaderValue::from_maybe_shared(value) {
            Ok(v) => {
                self.fields.append(name, v);
            }
            Err(_) => self.invalid = true,
        }
    }

    /// The fields; `None` if one cannot be carried.
    pub fn finish(self) -> Option<http::HeaderMap> {
        (!self.invalid).then_some(self.fields)
    }
}

/// A [`ServerRequest`] under construction: its fields as they are given (a
/// [`FieldStore`], whose buffer the target and `Host` share), `Host` kept aside for
/// `:authority`.
#[derive(Debug, Default)]
pub struct RequestFields {
    fields: FieldStore,
    host: Option<Bytes>,
}

impl RequestFields {
    /// Room for about `n` fields.
    pub fn with_capacity(n: usize) -> RequestFields {
        RequestFields {
            fields: FieldStore::with_capacity(n),
            host: None,
        }
    }

    /// Adds a field the server is to get (never a connection-specific one: the caller
    /// left those out).
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        if !name.eq_ignore_ascii_case(b"host") {
            self.fields.push(name, value);
        } else if self.host.is_none() {
            self.host = Some(self.fields.keep(value));
        }
    }

    /// The request with these fields; `None` if HTTP/2 cannot carry it.
    pub fn finish(
        mut self,
        method: &[u8],
        target: &[u8],
        framing: Framing,
        websocket: bool,
    ) -> Option<ServerRequest> {
        let method = http::Method::from_bytes(method).ok()?;
        let target = self.fields.keep(target);
        Some(ServerRequest {
            method,
            target,
            host: self.host,
            fields: self.fields.finish()?,
            framing,
            websocket,
        })
    }
}

impl ServerRequest {
    /// The request for an HTTP/2 server that carries `req` as it is, without the fields a
    /// proxy does not forward (a health check's request, which no rule edits).
    pub fn from_view(req: &sluice_http::RequestView<'_>) -> Option<ServerRequest> {
        let (low, high) = req.headers().size_hint();
        let mut fields = RequestFields::with_capacity(high.unwrap_or(low));
        for (name, value) in req.headers() {
            if !req.is_hop_by_hop(name) && !name.eq_ignore_ascii_case(b"expect") {
                fields.push(name, value);
            }
        }
        fields.finish(req.method(), req.target(), req.framing(), false)
    }
}

/// The tunnel a request to a server opens on its stream: a CONNECT, or a WebSocket when the
/// server allows extended CONNECT (`extended`, RFC 8441). Without that, the upgrade is
/// dropped and the server answers the plain GET as such.
pub(super) fn tunnel_asked(req: &ServerRequest, extended: bool) -> Option<Tunnel> {
    if req.method == http::Method::CONNECT {
        return Some(Tunnel::Connect);
    }
    (req.websocket && extended).then_some(Tunnel::WebSocket)
}

/// The `Sec-WebSocket-Accept` an HTTP/1.1 client expects for its `Sec-WebSocket-Key`
/// (RFC 6455 §4.2.2), which an HTTP/2 server does not send.
pub(super) fn websocket_accept(key: &[u8]) -> String {
    const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key);
    ctx.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(ctx.finish())
}

/// The HTTP/2 request for `req` on a connection to `server` (TLS when `tls`); `None` if it
/// cannot be carried (a target HTTP/2 cannot name). A WebSocket `tunnel` goes as the
/// extended CONNECT (RFC 8441), without the key HTTP/2 does not use.
pub(super) fn request(
    req: &ServerRequest,
    (tls, server): (bool, std::net::SocketAddr),
    tunnel: Option<Tunnel>,
) -> Option<http::Request<()>> {
    let uri = if req.target.starts_with(b"/") {
        // Made of the shared bytes of the target and the host: no text is formatted.
        let authority = match &req.host {
            Some(host) => http::uri::Authority::from_maybe_shared(host.clone()).ok()?,
            // No `Host` (HTTP/1.0): the server's address names it.
            None => server.to_string().parse().ok()?,
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(if tls {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        });
        parts.authority = Some(authority);
        parts.path_and_query =
            Some(http::uri::PathAndQuery::from_maybe_shared(req.target.clone()).ok()?);
        http::Uri::from_parts(parts).ok()?
    } else if req.method == http::Method::CONNECT {
        http::Uri::from_maybe_shared(req.target.clone()).ok()?
    } else {
        // Absolute-form names its own scheme and authority; `*` has no HTTP/2 form here.
        http::Uri::from_maybe_shared(req.target.clone())
            .ok()
            .filter(|u: &http::Uri| u.authority().is_some())?
    };
    let mut out = http::Request::new(());
    *out.method_mut() = req.method.clone();
    *out.uri_mut() = uri;
    // The request is kept for a replay after REFUSED_STREAM: its fields are copied (their
    // values are shared bytes), with room for the two the proxy adds.
    let mut fields = http::HeaderMap::with_capacity(req.fields.len() + 2);
    fields.extend(req.fields.iter().map(|(n, v)| (n.clone(), v.clone())));
    if tunnel == Some(Tunnel::WebSocket) {
        *out.method_mut() = http::Method::CONNECT;
        out.extensions_mut()
            .insert(h2::ext::Protocol::from_static("websocket"));
        fields.remove(http::header::SEC_WEBSOCKET_KEY);
    }
    if let Framing::Length(n) = req.framing {
        fields.insert(http::header::CONTENT_LENGTH, n.into());
    }
    // The proxy passes the trailers of every response it relays (chunked to an HTTP/1.1
    // client, as trailers to an HTTP/2 one), and says so: gRPC servers require it.
    if tunnel.is_none() {
        fields.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    }
    *out.headers_mut() = fields;
    Some(out)
}

fn status_line(status: http::StatusCode, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes the HTTP/1.1 head of a stream's response into `out`; `ended` says the stream
/// carries no body. A body without a length is read to the stream's end (the head says
/// `connection: close`, as a body delimited by the close). For a health check, which
/// judges answers as HTTP/1.1 text; the data path reads heads through
/// `sluice_http::ResponseView`.
pub fn response_head(
    parts: &http::response::Parts,
    ended: bool,
    head_request: bool,
    out: &mut Vec<u8>,
) {
    let status = parts.status;
    status_line(status, out);
    for (name, value) in &parts.headers {
        push_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let bodiless = head_request || status.is_informational() || status == 204 || status == 304;
    let sized = parts.headers.contains_key(http::header::CONTENT_LENGTH);
    if !bodiless && !sized && ended {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_http::parse_request;

    /// What the transaction prepares for an HTTP/2 server from an HTTP/1.1 request whose
    /// `Host` and framing fields it has taken out (as `stream::heads` does).
    fn prepared(
        method: &str,
        target: &str,
        host: Option<&str>,
        fields: &[(&str, &str)],
    ) -> ServerRequest {
        let mut map = http::HeaderMap::new();
        for (n, v) in fields {
            map.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        ServerRequest {
            method: method.parse().unwrap(),
            target: Bytes::copy_from_slice(target.as_bytes()),
            host: host.map(|h| Bytes::copy_from_slice(h.as_bytes())),
            fields: map,
            framing: Framing::Length(3),
            websocket: false,
        }
    }

    fn translate(req: &ServerRequest) -> Option<http::Request<()>> {
        request(req, (false, "127.0.0.1:1".parse().unwrap()), None)
    }

    #[test]
    fn a_request_names_its_authority_and_says_trailers_are_taken() {
        let req = translate(&prepared(
            "POST",
            "/a?b=1",
            Some("app.test"),
            &[("x-kept", "yes")],
        ))
        .unwrap();
        assert_eq!(req.method(), http::Method::POST);
        assert_eq!(req.uri().to_string(), "http://app.test/a?b=1");
        let h = req.headers();
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["content-length"], "3");
        assert_eq!(h["x-kept"], "yes");
        assert!(!h.contains_key("host"));
    }

    #[test]
    fn a_request_without_host_names_the_server() {
        let req = translate(&prepared("GET", "/", None, &[])).unwrap();
        assert_eq!(req.uri().to_string(), "http://127.0.0.1:1/");
        assert!(translate(&prepared("OPTIONS", "*", Some("a"), &[])).is_none());
        let absolute = translate(&prepared("GET", "https://b.test/x", Some("b.test"), &[]));
        assert_eq!(absolute.unwrap().uri().to_string(), "https://b.test/x");
    }

    fn head_of(status: u16, fields: &[(&str, &str)], ended: bool, head_req: bool) -> String {
        let mut b = http::Response::builder().status(status);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        let (parts, ()) = b.body(()).unwrap().into_parts();
        let mut out = Vec::new();
        response_head(&parts, ended, head_req, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_response_head_is_framed_for_http1_and_closes_its_pipe() {
        let delimited = head_of(200, &[("x-a", "1")], false, false);
        assert_eq!(
            delimited,
            "HTTP/1.1 200 OK\r\nx-a: 1\r\nconnection: close\r\n\r\n"
        );
        let sized = head_of(404, &[("content-length", "5")], false, false);
        assert!(sized.starts_with("HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\n"));
        assert!(!sized.contains("chunked"));
        assert!(head_of(200, &[], true, false).contains("content-length: 0\r\n"));
        let head = head_of(200, &[], true, true);
        assert!(!head.contains("content-length") && !head.contains("chunked"));
        assert!(!head_of(304, &[], true, false).contains("content-length"));
    }

    /// The HTTP/1.1 head a stream's request was read as before the views (the reference the
    /// views are held to): written into `out`. Returns whether its body
    /// goes chunked (it follows, and the client gave no length).
    fn request_head(parts: &http::request::Parts, ended: bool, out: &mut Vec<u8>) -> bool {
        out.extend_from_slice(parts.method.as_str().as_bytes());
        out.push(b' ');
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        request_fields(parts, out);
        let chunked = !ended && !parts.headers.contains_key(http::header::CONTENT_LENGTH);
        if chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        chunked
    }

    /// The request's fields, `:authority` as `Host` and the cookies in one field.
    fn request_fields(parts: &http::request::Parts, out: &mut Vec<u8>) {
        let authority = parts.uri.authority();
        if let Some(a) = authority {
            push_header(out, b"host", a.as_str().as_bytes());
        }
        let mut cookies: Vec<&[u8]> = Vec::new();
        for (name, value) in &parts.headers {
            match name.as_str() {
                "host" if authority.is_some() => {}
                "cookie" => cookies.push(value.as_bytes()),
                n => push_header(out, n.as_bytes(), value.as_bytes()),
            }
        }
        if !cookies.is_empty() {
            push_header(out, b"cookie", &cookies.join(&b"; "[..]));
        }
    }

    fn h2_request(method: &str, uri: &str, fields: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        sluice_http::join_cookies(&mut parts.headers);
        parts
    }

    /// The fields a view shows that a proxy forwards (its framing fields are its own), in
    /// order within each name (the joined cookie field stands where the first cookie was,
    /// which HTTP does not tell apart from the end).
    fn forwarded<'a>(v: &sluice_http::RequestView<'a>) -> Vec<(&'a [u8], &'a [u8])> {
        let mut fields: Vec<_> = v.headers().filter(|(n, _)| !v.is_hop_by_hop(n)).collect();
        fields.sort_by_key(|(n, _)| *n);
        fields
    }

    #[test]
    fn an_http2_request_reads_as_its_http1_translation() {
        use sluice_http::RequestView;
        let cases = [
            (
                "GET",
                "https://app.test/a/b?x=1",
                vec![("accept", "*/*")],
                true,
            ),
            (
                "POST",
                "http://app.test:8080/up",
                vec![("content-length", "3"), ("x-a", "1"), ("x-a", "2")],
                false,
            ),
            (
                "PUT",
                "http://app.test/chunks",
                vec![("cookie", "a=1"), ("x-b", "y"), ("cookie", "b=2")],
                false,
            ),
            (
                "HEAD",
                "http://app.test/",
                vec![("host", "other.test")],
                true,
            ),
        ];
        for (method, uri, fields, ended) in cases {
            let parts = h2_request(method, uri, &fields);
            let mut text = Vec::new();
            request_head(&parts, ended, &mut text);
            let head = parse_request(&text).unwrap().unwrap();
            let (one, two) = (
                RequestView::h1(&text, &head),
                RequestView::h2(&parts, ended),
            );
            assert_eq!(one.method(), two.method());
            assert_eq!(one.target(), two.target(), "{uri}");
            assert_eq!(one.path(), two.path(), "{uri}");
            // A body the stream delimits was read chunked before.
            let framing = match two.framing() {
                Framing::Delimited => Framing::Chunked,
                f => f,
            };
            assert_eq!(one.framing(), framing, "{uri}");
            assert_eq!(one.header("host"), two.header("host"), "{uri}");
            assert_eq!(one.header("cookie"), two.header("cookie"), "{uri}");
            assert_eq!(forwarded(&one), forwarded(&two), "{uri}");
            assert_eq!(
                (one.is_head(), one.wants_close()),
                (two.is_head(), two.wants_close())
            );
            assert_eq!(two.version(), sluice_http::Version::Http2);
        }
    }

    #[test]
    fn an_http2_response_reads_as_its_http1_translation() {
        use sluice_http::{parse_response, ResponseView};
        /// Status, fields, whether the head ends the stream, whether it answers a HEAD.
        type Case = (u16, Vec<(&'static str, &'static str)>, bool, bool);
        let cases: [Case; 5] = [
            (
                200,
                vec![("x-a", "1"), ("content-type", "text/plain")],
                false,
                false,
            ),
            (404, vec![("content-length", "5")], false, false),
            (200, vec![], true, false),
            (200, vec![("content-length", "9")], false, true),
            (304, vec![("etag", "\"e\"")], true, false),
        ];
        for (status, fields, ended, head_req) in cases {
            let mut b = http::Response::builder().status(status);
            for (n, v) in &fields {
                b = b.header(*n, *v);
            }
            let (parts, ()) = b.body(()).unwrap().into_parts();
            let mut text = Vec::new();
            response_head(&parts, ended, head_req, &mut text);
            let head = parse_response(&text, head_req).unwrap().unwrap();
            let one = ResponseView::h1(&text, &head);
            let two = ResponseView::h2(&parts, ended, head_req);
            assert_eq!(one.status(), two.status());
            // A body the stream delimits reads to its end, as one the close delimits.
            let framing = match two.framing() {
                Framing::Delimited => Framing::UntilClose,
                f => f,
            };
            assert_eq!(one.framing(), framing, "{status} {fields:?}");
            let kept = |v: &ResponseView<'_>| -> Vec<(Vec<u8>, Vec<u8>)> {
                v.headers()
                    .filter(|(n, _)| !v.is_hop_by_hop(n))
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect()
            };
            assert_eq!(kept(&one), kept(&two));
            assert_eq!(one.header("content-type"), two.header("content-type"));
            assert!(!two.must_close() && two.reason().is_empty());
        }
    }
}
