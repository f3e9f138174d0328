//! Head writers: the request head sent to a server and the response head sent to a client,
//! with hop-by-hop fields removed, rule edits applied, and framing and connection headers
//! chosen by the proxy; locally generated responses.

use std::net::IpAddr;

use sluice_http::{name_is, reason, split_target, Framing, RequestView, ResponseView, Version};

use super::keywords::{in_net, ForwardFor};
use crate::compression::{self, Algo};
use crate::conf::{Backend, Frontend};
use crate::cookie::ResponseCookie;
use crate::rules::Action;
use crate::sample::{text_match, Ctx, Match};

/// Edits accumulated by rules: headers (`set-header`, `add-header`, `del-header`), the
/// request line (`set-method`, `set-path`, ...), the response status (`set-status`).
/// Values are rendered when the rule runs.
#[derive(Default)]
pub(crate) struct Edits {
    pub del: Vec<(String, Match)>,
    pub add: Vec<(String, Vec<u8>)>,
    pub method: Option<Vec<u8>>,
    pub target: Option<Vec<u8>>,
    pub status: Option<(u16, Option<String>)>,
    /// The persistence cookie of the response (`cookie`).
    pub cookie: Option<ResponseCookie>,
    /// `replace-header` / `replace-value`: (name, regex, template, per value).
    pub replace: Vec<(String, regex::bytes::Regex, Vec<u8>, bool)>,
}

impl Edits {
    /// Applies an editing action (other actions are the caller's).
    pub fn apply(&mut self, action: &Action, cx: &Ctx<'_>) {
        let target = |e: &Edits| -> Vec<u8> {
            e.target
                .clone()
                .or_else(|| cx.req.map(|r| r.target().to_vec()))
                .unwrap_or_default()
        };
        match action {
            Action::SetHeader(n, v) => {
                let v = v.render(cx);
                self.remove(n, Match::Str);
                self.add.push((n.clone(), v));
            }
            Action::AddHeader(n, v) => self.add.push((n.clone(), v.render(cx))),
            Action::DelHeader(n, how) => self.remove(n, *how),
            Action::SetMethod(f) => self.method = Some(f.render(cx)),
            Action::SetUri(f) => self.target = Some(f.render(cx)),
            Action::SetPath(f) => {
                let t = target(self);
                let (prefix, _, query) = split_target(&t);
                let mut out = prefix.to_vec();
                out.extend_from_slice(&f.render(cx));
                if let Some(q) = query {
                    out.push(b'?');
                    out.extend_from_slice(q);
                }
                self.target = Some(out);
            }
            Action::SetPathQ(f) => {
                let t = target(self);
                let (prefix, _, _) = split_target(&t);
                let mut out = prefix.to_vec();
                out.extend_from_slice(&f.render(cx));
                self.target = Some(out);
            }
            Action::SetQuery(f) => {
                let t = target(self);
                let (prefix, path, _) = split_target(&t);
                let mut out = prefix.to_vec();
                out.extend_from_slice(path);
                let q = f.render(cx);
                if !q.is_empty() {
                    out.push(b'?');
                    out.extend_from_slice(&q);
                }
                self.target = Some(out);
            }
            Action::SetStatus(code, reason) => self.status = Some((*code, reason.clone())),
            Action::ReplaceHeader {
                name,
                re,
                with,
                per_value,
            } => {
                let template = String::from_utf8_lossy(&with.render(cx)).into_owned();
                let template = crate::conf::sample_parse::substitution(&template).into_bytes();
                self.replace.push((
                    name.to_ascii_lowercase(),
                    re.0.clone(),
                    template,
                    *per_value,
                ));
            }
            _ => {}
        }
    }

    pub fn remove(&mut self, name: &str, how: Match) {
        let name = name.to_ascii_lowercase();
        self.add
            .retain(|(n, _)| !text_match(how, n.as_bytes(), name.as_bytes(), true));
        self.del.push((name, how));
    }

    /// A header's value after `replace-header` / `replace-value` (`None`: unchanged). A
    /// rule replaces a whole value its regex matches in.
    pub fn replaced(&self, name: &[u8], original: &[u8]) -> Option<Vec<u8>> {
        if self.replace.is_empty() {
            return None;
        }
        let mut value: Option<Vec<u8>> = None;
        for (n, re, template, per_value) in &self.replace {
            if !name.eq_ignore_ascii_case(n.as_bytes()) {
                continue;
            }
            let one = |v: &[u8]| -> Vec<u8> {
                match re.captures(v) {
                    Some(caps) => {
                        let mut out = Vec::new();
                        caps.expand(template, &mut out);
                        out
                    }
                    None => v.to_vec(),
                }
            };
            let base = value.take().unwrap_or_else(|| original.to_vec());
            value = Some(if *per_value {
                base.split(|&b| b == b',')
                    .map(|v| one(sluice_http::trim_ows(v)))
                    .collect::<Vec<_>>()
                    .join(&b", "[..])
            } else {
                one(&base)
            });
        }
        value
    }

    pub fn deletes(&self, name: &[u8]) -> bool {
        self.del
            .iter()
            .any(|(d, how)| text_match(*how, name, d.as_bytes(), true))
    }
}

pub(crate) fn local_response(status: u16, content_type: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    if let Some(ct) = content_type {
        out.extend_from_slice(format!("content-type: {ct}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Inserts `connection: close` into a locally generated response that lacks it.
pub(crate) fn with_close(bytes: Vec<u8>) -> Vec<u8> {
    if bytes.is_empty() {
        // An empty error page (`errorfile CODE /dev/null`): nothing is sent.
        return bytes;
    }
    let head_end = memchr::memmem::find(&bytes, b"\r\n\r\n").unwrap_or(bytes.len());
    if memchr::memmem::find(
        &bytes[..head_end].to_ascii_lowercase(),
        b"connection: close",
    )
    .is_some()
    {
        return bytes;
    }
    let mut out = Vec::with_capacity(bytes.len() + 19);
    out.extend_from_slice(&bytes[..head_end + 2]);
    out.extend_from_slice(b"connection: close\r\n");
    out.extend_from_slice(&bytes[head_end + 2..]);
    out
}

/// The forwardfor setting that applies: the backend's, else the frontend's.
pub(crate) fn forwardfor<'a>(
    fe: &'a Frontend,
    be: &'a Backend,
    ip: IpAddr,
) -> Option<(&'a ForwardFor, IpAddr)> {
    let f = be
        .stream
        .forwardfor
        .as_ref()
        .or(fe.stream.forwardfor.as_ref())?;
    if f.except.is_some_and(|net| in_net(ip, net)) {
        return None;
    }
    Some((f, ip))
}

/// Writes the request head sent to the server: hop-by-hop fields removed first (so a client
/// cannot nominate the proxy's own headers for removal), then edits, X-Forwarded-For and the
/// canonical framing header.
pub(crate) fn build_request_head(
    out: &mut Vec<u8>,
    req: &RequestView<'_>,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
    server_close: bool,
    upgrade: Option<&[u8]>,
) {
    out.extend_from_slice(edits.method.as_deref().unwrap_or(req.method()));
    out.push(b' ');
    out.extend_from_slice(edits.target.as_deref().unwrap_or(req.target()));
    // The server sees the client's version: an HTTP/1.0 request may lack Host, which an
    // HTTP/1.1 request may not.
    out.extend_from_slice(match req.version() {
        Version::Http10 => b" HTTP/1.0\r\n",
        Version::Http11 => b" HTTP/1.1\r\n",
    });
    let mut has_xff = false;
    for (name, value) in req.headers() {
        if req.is_hop_by_hop(name) || edits.deletes(name) || name.eq_ignore_ascii_case(b"expect") {
            continue;
        }
        if let Some((f, _)) = xff {
            has_xff |= name.eq_ignore_ascii_case(f.header.as_bytes());
        }
        match edits.replaced(name, value) {
            Some(v) => push_header(out, name, &v),
            None => push_header(out, name, value),
        }
    }
    for (n, v) in &edits.add {
        push_header(out, n.as_bytes(), v);
    }
    if let Some((f, ip)) = xff {
        if !(f.if_none && has_xff) {
            push_header(out, f.header.as_bytes(), ip.to_string().as_bytes());
        }
    }
    match req.framing() {
        Framing::Length(n) => push_header(out, b"content-length", Digits::new(n).as_bytes()),
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::None | Framing::UntilClose => {
            // A body-less POST/PUT still states its length so the server does not wait.
            if matches!(req.method(), b"POST" | b"PUT" | b"PATCH") {
                out.extend_from_slice(b"content-length: 0\r\n");
            }
        }
    }
    if let Some(up) = upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
        push_header(out, b"upgrade", up);
    } else if server_close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if req.version() == Version::Http10 {
        // HTTP/1.0 closes by default: ask to keep the server connection for the pool.
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The protocols a request asks to switch to: a bodiless HTTP/1.1 request with `Upgrade`
/// nominated by `Connection`. `h2c`/`h2` are removed (a proxy must not tunnel cleartext HTTP/2
/// it does not speak); nothing left means no upgrade.
pub(crate) fn upgrade_request(req: &RequestView<'_>) -> Option<Vec<u8>> {
    if req.version() != Version::Http11
        || req.framing() != Framing::None
        || !req.nominates(b"upgrade")
    {
        return None;
    }
    let value = req.header("upgrade")?;
    let kept: Vec<&[u8]> = value
        .split(|&b| b == b',')
        .map(|t| {
            let t = t.strip_prefix(b" ").unwrap_or(t);
            t.strip_suffix(b" ").unwrap_or(t)
        })
        .filter(|t| {
            !t.is_empty() && !t.eq_ignore_ascii_case(b"h2c") && !t.eq_ignore_ascii_case(b"h2")
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join(&b", "[..]))
}

/// Writes a response head for the client. `client` is `None` for interim (1xx) responses;
/// otherwise (framing sent to the client, keep-alive, client version, length to repeat for
/// HEAD/304).
pub(crate) fn write_response_head(
    out: &mut Vec<u8>,
    rsp: &ResponseView<'_>,
    edits: &Edits,
    client: Option<(Framing, bool, Version, Option<Vec<u8>>)>,
    compressed: Option<Algo>,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    let status = edits.status.as_ref().map_or(rsp.status(), |(c, _)| *c);
    out.extend_from_slice(Digits::new(u64::from(status)).as_bytes());
    out.push(b' ');
    match &edits.status {
        Some((_, Some(text))) => out.extend_from_slice(text.as_bytes()),
        Some((code, None)) => out.extend_from_slice(reason(*code).as_bytes()),
        None if rsp.reason().is_empty() => out.extend_from_slice(reason(status).as_bytes()),
        None => out.extend_from_slice(rsp.reason()),
    }
    out.extend_from_slice(b"\r\n");
    let mut saw_vary = false;
    let mut server_cookie = false;
    for (name, value) in rsp.headers() {
        if rsp.is_hop_by_hop(name) || edits.deletes(name) {
            continue;
        }
        if compressed.is_some() && !compression::rewrite_header(out, name, value, &mut saw_vary) {
            continue;
        }
        if let Some(c) = edits
            .cookie
            .as_ref()
            .filter(|_| name_is(name, "set-cookie"))
        {
            match c.server_set_cookie(value, &mut server_cookie) {
                Some(v) if v.is_empty() => {}
                Some(v) => push_header(out, name, &v),
                None => push_header(out, name, value),
            }
            continue;
        }
        match edits.replaced(name, value) {
            Some(v) => push_header(out, name, &v),
            None => push_header(out, name, value),
        }
    }
    for (n, v) in &edits.add {
        push_header(out, n.as_bytes(), v);
    }
    if let Some(c) = &edits.cookie {
        for (n, v) in c.inserted(server_cookie) {
            push_header(out, n.as_bytes(), &v);
        }
    }
    if let Some(algo) = compressed {
        compression::added_headers(out, algo, saw_vary);
    }
    if let Some((framing, keep, version, length_hint)) = client {
        match framing {
            Framing::Length(n) => push_header(out, b"content-length", Digits::new(n).as_bytes()),
            Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            Framing::None => {
                if let Some(v) = length_hint {
                    push_header(out, b"content-length", &v);
                }
            }
            Framing::UntilClose => {}
        }
        if !keep {
            out.extend_from_slice(b"connection: close\r\n");
        } else if version == Version::Http10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// A decimal number formatted on the stack.
pub(crate) struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    pub fn new(mut n: u64) -> Digits {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        loop {
            start -= 1;
            buf[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Digits { buf, start }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

pub(crate) fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_http::parse_request;

    #[test]
    fn request_head_strips_hop_by_hop_before_adding_ours() {
        let raw = b"POST /p HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Forwarded-For, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nContent-Length: 003\r\nX-Keep: y\r\n\r\n";
        let head = parse_request(raw).unwrap().unwrap();
        let f = ForwardFor {
            header: "x-forwarded-for".into(),
            except: None,
            if_none: false,
        };
        let mut edits = Edits::default();
        edits.remove("X-Keep", Match::Str);
        edits.add.push(("X-Keep".into(), b"z".to_vec()));
        let mut out = Vec::new();
        build_request_head(
            &mut out,
            &sluice_http::RequestView::h1(raw, &head),
            &edits,
            Some((&f, "10.0.0.9".parse().unwrap())),
            false,
            None,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "POST /p HTTP/1.1\r\nHost: h\r\nX-Keep: z\r\nx-forwarded-for: 10.0.0.9\r\ncontent-length: 3\r\n\r\n"
        );
    }

    #[test]
    fn close_is_inserted_once() {
        let r = with_close(local_response(200, Some("text/plain"), b"hi"));
        let text = String::from_utf8(r).unwrap();
        assert!(text.contains("connection: close\r\n"));
        assert!(text.ends_with("\r\n\r\nhi"));
        let again = with_close(text.into_bytes());
        assert_eq!(
            String::from_utf8(again)
                .unwrap()
                .matches("connection: close")
                .count(),
            1
        );
    }
}
