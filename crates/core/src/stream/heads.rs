//! Head writers: the request head sent to a server and the response head sent to a client,
//! with hop-by-hop fields removed, rule edits applied, and framing and connection headers
//! chosen by the proxy; locally generated responses.

use std::net::IpAddr;
use std::time::Duration;

use sluice_http::{
    name_is, reason, split_target, Answer, Framing, RequestCopy, RequestView, ResponseView, Version,
};

use super::keywords::{in_net, ForwardFor};
use crate::compression::{self, Algo};
use crate::conf::{Backend, Frontend};
use crate::cookie::ResponseCookie;
use crate::h2_stream::{FieldStore, RequestFields, ServerRequest};
use crate::rules::{
    holds, run_shared, Action, Level, Redirect, RedirectKind, Reply, Rule, TargetPart, TimeoutKind,
};
use crate::sample::{text_match, Ctx, Match};

/// Edits accumulated by rules: headers (`set-header`, `add-header`, `del-header`), the
/// request line (`set-method`, `set-path`, ...), the response status (`set-status`), and
/// what rules set for the rest of the transaction (captures, timeouts, early
/// hints). Values are rendered when the rule runs.
#[derive(Default)]
pub(crate) struct Edits {
    pub del: Vec<(String, Match)>,
    /// `del-header REGEX -m reg`.
    pub del_re: Vec<regex::bytes::Regex>,
    pub add: Vec<(String, Vec<u8>)>,
    pub method: Option<Vec<u8>>,
    pub target: Option<Vec<u8>>,
    pub status: Option<(u16, Option<String>)>,
    /// The persistence cookie of the response (`cookie`). Boxed, as the other parts
    /// that are rare and large: a transaction's future holds two `Edits` across its awaits.
    pub cookie: Option<Box<ResponseCookie>>,
    /// `replace-header` / `replace-value`: (name, regex, template, per value).
    pub replace: Vec<(String, regex::bytes::Regex, Vec<u8>, bool)>,
    /// `capture`: (slot, value) on the rule's side.
    pub captures: Vec<(usize, String)>,
    /// `set-timeout server|tunnel`.
    pub timeout_server: Option<Duration>,
    pub timeout_tunnel: Option<Duration>,
    /// `early-hint`: the headers of a 103 answer.
    pub early_hints: Vec<(String, Vec<u8>)>,
    /// `http-response deny`: the status, and the rule's own answer if it gave one.
    pub denied: Option<Box<(u16, Option<Answer>)>>,
    /// `http-response return`: the answer that replaces the server's, and its status
    /// (`None`: the proxy's error page of that status).
    pub returned: Option<Box<(u16, Option<Answer>)>>,
    /// `http-response silent-drop`: the client's connection was silenced, to be closed.
    pub dropped: bool,
    /// `http-request cache-use`: the request's key and what it allows of the cache.
    pub cache_lookup: Option<Box<crate::cache::Lookup>>,
    /// `http-response cache-store`: the cache (by index) the response goes to.
    pub cache_store: Option<usize>,
}

impl Edits {
    /// Runs one list of HTTP response rules (`http-response`, `http-after-response`);
    /// `allow` ends the list.
    pub fn response_rules(&mut self, rules: &[Rule], cx: &Ctx<'_>) {
        // Each rule sees the response as the rules before it left it (HAProxy edits the
        // message in place): a copy with the edits so far, made again after each edit.
        let mut seen = SeenResponse::default();
        for rule in rules {
            let view;
            let edited;
            let cx = match seen.view(cx.res, self) {
                Some(v) => {
                    view = v;
                    edited = Ctx {
                        res: Some(&view),
                        ..cx.clone()
                    };
                    &edited
                }
                None => cx,
            };
            if !holds(&rule.cond, cx) {
                continue;
            }
            if !matches!(rule.action, Action::Return(_)) {
                cx.vars.note_rule(rule);
            }
            match &rule.action {
                Action::Allow => break,
                Action::Deny { status, reply } => {
                    let answer = reply.as_ref().map(|r| reply_answer(r, cx));
                    self.denied = Some(Box::new((*status, answer)));
                    break;
                }
                Action::Return(reply) => {
                    // (`default-errorfiles`: the proxy's page, which the relay has.)
                    let page = (!reply.default_page).then(|| reply_answer(reply, cx));
                    self.returned = Some(Box::new((reply.status, page)));
                    cx.vars.note_rule(rule);
                    break;
                }
                Action::SilentDrop => {
                    crate::rules::silence(cx);
                    self.dropped = true;
                    break;
                }
                // `http-response redirect location ...`: the redirect replaces the answer.
                Action::Redirect(r) => {
                    if let Some(req) = cx.req {
                        let page = redirect(r, req, &Edits::default(), cx);
                        self.returned = Some(Box::new((r.code, Some(page))));
                    }
                    break;
                }
                other => {
                    // An entry first tracked on the response still counts the request, as
                    // HAProxy's `http-response track-sc` does; its errors and bytes are
                    // counted when the transaction ends, as for every tracked entry.
                    let count_request = matches!(other, Action::Track { .. });
                    if !run_shared(other, cx, Level::Txn { count_request }) {
                        self.apply(other, cx)
                    }
                }
            }
        }
    }

    /// What the response's head edits amount to so far (an edit changes it).
    fn response_shape(&self) -> ResponseShape {
        ResponseShape {
            del: self.del.len() + self.del_re.len(),
            add: self.add.len(),
            replace: self.replace.len(),
            status: self.status.as_ref().map(|(c, r)| (*c, r.clone())),
        }
    }

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
            Action::ReplaceTarget { part, re, with } => {
                let t = target(self);
                let (prefix, path, query) = split_target(&t);
                // The part the regex sees, and what stays around it.
                let (before, seen, after): (&[u8], Vec<u8>, Vec<u8>) = match part {
                    TargetPart::Uri => (b"", t.clone(), Vec::new()),
                    TargetPart::PathQ => (prefix, t[prefix.len()..].to_vec(), Vec::new()),
                    TargetPart::Path => {
                        let q = query.map(|q| [&b"?"[..], q].concat()).unwrap_or_default();
                        (prefix, path.to_vec(), q)
                    }
                };
                if let Some(caps) = re.0.captures(&seen) {
                    let template = String::from_utf8_lossy(&with.render(cx)).into_owned();
                    let template = crate::conf::sample_parse::substitution(&template);
                    let mut rewritten = Vec::new();
                    caps.expand(template.as_bytes(), &mut rewritten);
                    let m = caps.get(0).expect("the whole match");
                    let mut out = before.to_vec();
                    out.extend_from_slice(&seen[..m.start()]);
                    out.extend_from_slice(&rewritten);
                    out.extend_from_slice(&seen[m.end()..]);
                    out.extend_from_slice(&after);
                    self.target = Some(out);
                }
            }
            Action::DelHeaderRe(re) => self.del_re.push(re.0.clone()),
            Action::EarlyHint(n, v) => self.early_hints.push((n.clone(), v.render(cx))),
            Action::CacheStore(c) => self.cache_store = Some(c.index),
            Action::SetTimeout(kind, e) => {
                let ms = e.eval(cx).and_then(|v| v.as_int()).filter(|&ms| ms > 0);
                if let Some(ms) = ms {
                    let d = Some(Duration::from_millis(ms as u64));
                    match kind {
                        TimeoutKind::Server => self.timeout_server = d,
                        TimeoutKind::Tunnel => self.timeout_tunnel = d,
                    }
                }
            }
            Action::Capture { expr, len, slot } => {
                if let Some(text) = crate::rules::captured(expr, *len, cx) {
                    // The next rules read the slot at once (`capture.req.hdr(N)`).
                    let mut captured = cx.vars.captured.borrow_mut();
                    let side = if cx.res.is_some() {
                        &mut captured.res
                    } else {
                        &mut captured.req
                    };
                    if let Some(v) = side.get_mut(*slot) {
                        *v = Some(text.clone());
                    }
                    self.captures.push((*slot, text));
                }
            }
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
            || self.del_re.iter().any(|re| re.is_match(name))
    }
}

pub(crate) fn local_response(status: u16, content_type: Option<&str>, body: &[u8]) -> Answer {
    local_response_with(status, content_type, &[], body)
}

/// [`local_response`] with more headers (`return ... hdr NAME VALUE`).
pub(crate) fn local_response_with(
    status: u16,
    content_type: Option<&str>,
    headers: &[(&str, Vec<u8>)],
    body: &[u8],
) -> Answer {
    let mut page = Answer::with_body(status, body.to_vec());
    if let Some(ct) = content_type {
        page.push(b"content-type", ct.as_bytes());
    }
    for (n, v) in headers {
        page.push(n.as_bytes(), v);
    }
    page
}

/// The answer of a `return`, or of a `deny`/`tarpit` with a payload.
pub(crate) fn reply_answer(r: &Reply, cx: &Ctx<'_>) -> Answer {
    if let Some(raw) = &r.raw {
        return Answer::clone(raw);
    }
    let rendered = r.lf.as_ref().map(|f| f.render(cx));
    let body = rendered.as_deref().unwrap_or(&r.body);
    // A header whose value comes out empty is left out, as HAProxy leaves it.
    let headers: Vec<(&str, Vec<u8>)> = r
        .hdrs
        .iter()
        .map(|(n, v)| (n.as_str(), v.render(cx)))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    // `content-type` goes with a body only, as HAProxy writes it.
    let content_type = r.content_type.as_deref().filter(|_| !body.is_empty());
    local_response_with(r.status, content_type, &headers, body)
}

/// How far a response's edits went (compared to know when a copy is stale).
#[derive(Default, PartialEq)]
struct ResponseShape {
    del: usize,
    add: usize,
    replace: usize,
    status: Option<(u16, Option<String>)>,
}

/// The response as response rules see it after edits: a copy of its head with them
/// applied (fields, not text), made again when they change.
#[derive(Default)]
struct SeenResponse {
    copy: Option<Answer>,
    shape: ResponseShape,
}

impl SeenResponse {
    /// The edited response, or `None` while there are no edits (the original is it).
    fn view(&mut self, orig: Option<&ResponseView<'_>>, edits: &Edits) -> Option<ResponseView<'_>> {
        let orig = orig?;
        let shape = edits.response_shape();
        if shape == ResponseShape::default() {
            return None;
        }
        if self.copy.is_none() || self.shape != shape {
            self.copy = Some(answer_fields(orig, edits, (orig.framing(), true)));
            self.shape = shape;
        }
        self.copy.as_ref().map(ResponseView::answer)
    }
}

/// The response of a `redirect` (`http-request`, or `http-response` with `location`).
pub(super) fn redirect(r: &Redirect, req: &RequestView<'_>, edits: &Edits, cx: &Ctx<'_>) -> Answer {
    let target = edits.target.as_deref().unwrap_or(req.target());
    let (_, path, query) = split_target(target);
    let mut path = path.to_vec();
    if r.append_slash && !path.ends_with(b"/") {
        path.push(b'/');
    }
    let tail = |mut out: Vec<u8>| {
        out.extend_from_slice(&path);
        if let (Some(q), false) = (query, r.drop_query) {
            out.push(b'?');
            out.extend_from_slice(q);
        }
        out
    };
    let value = r.value.render(cx);
    let location = match r.kind {
        RedirectKind::Location => value,
        RedirectKind::Prefix => {
            // A prefix of "/" adds nothing before the path.
            let prefix = if value == b"/" { Vec::new() } else { value };
            tail(prefix)
        }
        RedirectKind::Scheme => {
            let mut out = value;
            out.extend_from_slice(b"://");
            out.extend_from_slice(req.header("host").unwrap_or_default());
            tail(out)
        }
    };
    let mut page = Answer::with_body(r.code, Vec::new());
    page.push(b"location", &location);
    if let Some(c) = &r.set_cookie {
        let c = if c.contains('=') {
            c.clone()
        } else {
            format!("{c}=")
        };
        page.push(b"set-cookie", format!("{c}; path=/").as_bytes());
    }
    if let Some(c) = &r.clear_cookie {
        let expired = format!("{c}=; Max-Age=0; Expires=Thu, 01-Jan-1970 00:00:01 GMT; path=/");
        page.push(b"set-cookie", expired.as_bytes());
    }
    page
}

/// The forwardfor setting that applies: the backend's, else the frontend's.
pub(crate) fn forwardfor<'a>(
    fe: &'a Frontend,
    be: &'a Backend,
    ip: Option<IpAddr>,
) -> Option<(&'a ForwardFor, IpAddr)> {
    // A client without an address (a unix socket's) gets no header, as in HAProxy.
    let ip = ip?;
    address_header(fe, be, ip, |s| &s.forwardfor).map(|f| (f, ip))
}

/// The `option originalto` header for a request to `dst` (the backend's setting, else the
/// frontend's), unless `except` covers that address.
pub(crate) fn originalto<'a>(
    fe: &'a Frontend,
    be: &'a Backend,
    dst: IpAddr,
) -> Option<(&'a str, Vec<u8>)> {
    address_header(fe, be, dst, |s| &s.originalto)
        .map(|f| (f.header.as_str(), dst.to_string().into_bytes()))
}

/// An address header's setting: the backend's, else the frontend's, unless its `except`
/// network covers `ip`.
fn address_header<'a>(
    fe: &'a Frontend,
    be: &'a Backend,
    ip: IpAddr,
    which: fn(&super::keywords::StreamConf) -> &Option<ForwardFor>,
) -> Option<&'a ForwardFor> {
    let f = which(&be.stream).as_ref().or(which(&fe.stream).as_ref())?;
    (!f.except.is_some_and(|net| in_net(ip, net))).then_some(f)
}

/// The request as rules after an editing rule see it: the client's head with the edits
/// applied, held by value.
pub(crate) fn edited_request(req: &RequestView<'_>, edits: &Edits) -> RequestCopy {
    let mut out = request_copy(req, edits);
    for (name, value) in req.headers() {
        if edits.deletes(name) {
            continue;
        }
        match edits.replaced(name, value) {
            Some(v) => out.push(name, &v),
            None => out.push(name, value),
        }
    }
    for (n, v) in &edits.add {
        out.push(n.as_bytes(), v);
    }
    out
}

/// A copy of `req`'s request line and framing, the rules' method and target applied, and
/// no field yet.
fn request_copy(req: &RequestView<'_>, edits: &Edits) -> RequestCopy {
    RequestCopy {
        method: edits.method.as_deref().unwrap_or(req.method()).to_vec(),
        target: edits.target.as_deref().unwrap_or(req.target()).to_vec(),
        scheme: req.scheme().map(str::to_owned),
        version: req.version(),
        framing: req.framing(),
        wants_close: req.wants_close(),
        fields: Default::default(),
    }
}

/// The request as it leaves for a server, held by value (the fields
/// [`build_request_head`] writes): what the response's rules read of it.
pub(crate) fn sent_request(
    req: &RequestView<'_>,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
    server_close: bool,
    upgrade: Option<&[u8]>,
) -> RequestCopy {
    let mut out = request_copy(req, edits);
    sent_fields(&mut out, req, edits, xff, (server_close, upgrade));
    out
}

/// Writes the HTTP/1.1 request line, the rules' method and target applied. The server sees
/// the client's version: an HTTP/1.0 request may lack Host, which an HTTP/1.1 request may
/// not (an HTTP/2 one goes as HTTP/1.1).
fn request_line(out: &mut Vec<u8>, req: &RequestView<'_>, edits: &Edits) {
    out.extend_from_slice(edits.method.as_deref().unwrap_or(req.method()));
    out.push(b' ');
    out.extend_from_slice(edits.target.as_deref().unwrap_or(req.target()));
    out.extend_from_slice(match req.version() {
        Version::Http10 => b" HTTP/1.0\r\n",
        Version::Http11 | Version::Http2 | Version::Http3 => b" HTTP/1.1\r\n",
    });
}

/// Where the fields of a request for a server go: HTTP/1.1 text, or an HTTP/2 head.
trait FieldOut {
    fn field(&mut self, name: &[u8], value: &[u8]);
}

/// How many fields a head's iterator may give (its upper bound): what a map is sized for.
fn room(fields: sluice_http::Headers<'_>) -> usize {
    let (low, high) = fields.size_hint();
    high.unwrap_or(low)
}

impl FieldOut for Vec<u8> {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        push_header(self, name, value);
    }
}

/// The fields of the request a server gets, whatever its protocol: hop-by-hop fields
/// removed first (so a client cannot nominate the proxy's own headers for removal), then
/// the edits and X-Forwarded-For. `Expect` is the proxy's business (it answers `100
/// Continue` itself); the framing fields are the writer's.
fn request_fields(
    out: &mut impl FieldOut,
    req: &RequestView<'_>,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
) {
    let mut has_xff = false;
    for (name, value) in req.headers() {
        if req.is_hop_by_hop(name) || edits.deletes(name) || name.eq_ignore_ascii_case(b"expect") {
            continue;
        }
        if let Some((f, _)) = xff {
            has_xff |= name.eq_ignore_ascii_case(f.header.as_bytes());
        }
        match edits.replaced(name, value) {
            Some(v) => out.field(name, &v),
            None => out.field(name, value),
        }
    }
    for (n, v) in &edits.add {
        out.field(n.as_bytes(), v);
    }
    if let Some((f, ip)) = xff {
        if !(f.if_none && has_xff) {
            out.field(f.header.as_bytes(), ip.to_string().as_bytes());
        }
    }
}

/// Writes the request head sent to an HTTP/1.1 server: the request line and
/// [`sent_fields`].
pub(crate) fn build_request_head(
    out: &mut Vec<u8>,
    req: &RequestView<'_>,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
    server_close: bool,
    upgrade: Option<&[u8]>,
) {
    request_line(out, req, edits);
    sent_fields(out, req, edits, xff, (server_close, upgrade));
    out.extend_from_slice(b"\r\n");
}

/// The fields of a request for an HTTP/1.1 server: [`request_fields`], the canonical
/// framing field and the connection's (`server_close`, or the protocol `upgrade` asks for).
fn sent_fields(
    out: &mut impl FieldOut,
    req: &RequestView<'_>,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
    (server_close, upgrade): (bool, Option<&[u8]>),
) {
    request_fields(out, req, edits, xff);
    match req.framing() {
        Framing::Length(n) => out.field(b"content-length", Digits::new(n).as_bytes()),
        // An HTTP/2 client's body without a length goes chunked.
        Framing::Chunked | Framing::Delimited => out.field(b"transfer-encoding", b"chunked"),
        Framing::None | Framing::UntilClose => {
            // A body-less POST/PUT still states its length so the server does not wait.
            if matches!(req.method(), b"POST" | b"PUT" | b"PATCH") {
                out.field(b"content-length", b"0");
            }
        }
    }
    if let Some(up) = upgrade {
        out.field(b"connection", b"upgrade");
        out.field(b"upgrade", up);
    } else if server_close {
        out.field(b"connection", b"close");
    } else if req.version() == Version::Http10 {
        // HTTP/1.0 closes by default: ask to keep the server connection for the pool.
        out.field(b"connection", b"keep-alive");
    }
}

impl FieldOut for RequestCopy {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.push(name, value);
    }
}

impl FieldOut for RequestFields {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.push(name, value);
    }
}

/// The request head for an HTTP/2 server, from the client's head and the rules' edits
/// (the same fields as [`build_request_head`] writes, without text); `upgrade` is what
/// the client asked to switch to. `None` if HTTP/2 cannot carry it.
pub(crate) fn server_request(
    req: &RequestView<'_>,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
    upgrade: Option<&[u8]>,
) -> Option<ServerRequest> {
    let mut out = RequestFields::with_capacity(room(req.headers()) + edits.add.len());
    request_fields(&mut out, req, edits, xff);
    // A chunked body reaches the stream as its data, its trailers aside.
    let framing = match req.framing() {
        Framing::Chunked => Framing::Delimited,
        other => other,
    };
    out.finish(
        edits.method.as_deref().unwrap_or(req.method()),
        edits.target.as_deref().unwrap_or(req.target()),
        framing,
        upgrade.is_some_and(|u| u.eq_ignore_ascii_case(b"websocket")),
    )
}

/// The protocols a request asks to switch to: a bodiless HTTP/1.1 request with `Upgrade`
/// nominated by `Connection`. `h2c`/`h2` are removed (a proxy must not tunnel cleartext HTTP/2
/// it does not speak); nothing left means no upgrade.
pub(crate) fn upgrade_request(req: &RequestView<'_>) -> Option<Vec<u8>> {
    // (An HTTP/2 head nominates no field: a WebSocket opened over HTTP/2 is the one that
    // does, made the HTTP/1.1 upgrade it stands for; `h2_stream::as_websocket_upgrade`.)
    if !matches!(req.version(), Version::Http11 | Version::Http2)
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

/// The fields of a response a client gets, whatever its protocol: the server's without
/// hop-by-hop ones and those the rules deleted (names in lower case, as HAProxy relays
/// them; values replaced as rules say, the persistence cookie's `Set-Cookie` rewritten, a
/// compressed body's `ETag` and `Vary` adjusted), then the rules' additions, the inserted
/// cookie and a compressed body's own fields. The framing fields are the writer's.
fn response_fields(
    out: &mut impl FieldOut,
    rsp: &ResponseView<'_>,
    edits: &Edits,
    compressed: Option<Algo>,
) {
    let mut saw_vary = false;
    let mut server_cookie = false;
    let mut lowered = [0u8; 64];
    for (name, value) in rsp.headers() {
        if rsp.is_hop_by_hop(name) || edits.deletes(name) {
            continue;
        }
        let name = lower_name(name, &mut lowered);
        if compressed.is_some() {
            if let Some(v) = compression::rewritten_value(name, value, &mut saw_vary) {
                out.field(name, &v);
                continue;
            }
        }
        if let Some(c) = edits
            .cookie
            .as_ref()
            .filter(|_| name_is(name, "set-cookie"))
        {
            match c.server_set_cookie(value, &mut server_cookie) {
                Some(v) if v.is_empty() => {}
                Some(v) => out.field(name, &v),
                None => out.field(name, value),
            }
            continue;
        }
        match edits.replaced(name, value) {
            Some(v) => out.field(name, &v),
            None => out.field(name, value),
        }
    }
    for (n, v) in &edits.add {
        out.field(lower_name(n.as_bytes(), &mut lowered), v);
    }
    if let Some(c) = &edits.cookie {
        for (n, v) in c.inserted(server_cookie) {
            out.field(n.as_bytes(), &v);
        }
    }
    if let Some(algo) = compressed {
        for (n, v) in compression::added_headers(algo, saw_vary) {
            out.field(n.as_bytes(), v.as_bytes());
        }
    }
}

/// The status a client gets, and its reason phrase: the rules', else the server's (its
/// own phrase, or the standard one when it sent none).
fn response_status<'a>(rsp: &ResponseView<'a>, edits: &'a Edits) -> (u16, &'a [u8]) {
    let status = edits.status.as_ref().map_or(rsp.status(), |(c, _)| *c);
    let phrase = match &edits.status {
        Some((_, Some(text))) => text.as_bytes(),
        Some((code, None)) => reason(*code).as_bytes(),
        None if rsp.reason().is_empty() => reason(status).as_bytes(),
        None => rsp.reason(),
    };
    (status, phrase)
}

impl FieldOut for Answer {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.push(name, value);
    }
}

/// The head of `rsp` after the rules' `edits`, as fields (its body left out): what
/// [`write_response_head`] would write for an HTTP/1.1 client given `framing` and whether
/// the connection is kept. The edited head of one of the proxy's own answers, and the
/// response as the rules after an edit see it.
pub(crate) fn answer_fields(
    rsp: &ResponseView<'_>,
    edits: &Edits,
    (framing, keep): (Framing, bool),
) -> Answer {
    let (status, phrase) = response_status(rsp, edits);
    let mut out = Answer::new(status);
    out.reason = phrase.to_vec();
    out.version = rsp.version();
    response_fields(&mut out, rsp, edits, None);
    match framing {
        Framing::Length(n) => out.push(b"content-length", Digits::new(n).as_bytes()),
        Framing::Chunked => out.push(b"transfer-encoding", b"chunked"),
        Framing::None | Framing::UntilClose | Framing::Delimited => {}
    }
    match (keep, rsp.version() == Version::Http10) {
        (false, false) => out.push(b"connection", b"close"),
        (true, true) => out.push(b"connection", b"keep-alive"),
        _ => {}
    }
    out
}

/// Writes a response head for an HTTP/1 client. `client` is `None` for interim (1xx)
/// responses; otherwise (framing sent to the client, keep-alive, client version, length
/// to repeat for HEAD/304).
pub(crate) fn write_response_head(
    out: &mut Vec<u8>,
    rsp: &ResponseView<'_>,
    edits: &Edits,
    client: Option<(Framing, bool, Version, Option<Vec<u8>>)>,
    compressed: Option<Algo>,
) {
    let (status, phrase) = response_status(rsp, edits);
    // An HTTP/1.0 server's answer keeps its version, as HAProxy writes it (an HTTP/2
    // server's is 1.1).
    let rsp_10 = rsp.version() == Version::Http10;
    out.extend_from_slice(if rsp_10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(Digits::new(u64::from(status)).as_bytes());
    out.push(b' ');
    out.extend_from_slice(phrase);
    out.extend_from_slice(b"\r\n");
    response_fields(out, rsp, edits, compressed);
    if let Some((framing, keep, version, length_hint)) = client {
        match framing {
            Framing::Length(n) => push_header(out, b"content-length", Digits::new(n).as_bytes()),
            Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
            Framing::None => {
                if let Some(v) = length_hint {
                    push_header(out, b"content-length", &v);
                }
            }
            // (The relay never asks an HTTP/1 client for a codec's delimiting.)
            Framing::UntilClose | Framing::Delimited => {}
        }
        // HTTP/1.0 closes unless told otherwise, HTTP/1.1 keeps alive unless told.
        if !keep && !rsp_10 {
            out.extend_from_slice(b"connection: close\r\n");
        } else if keep && (version == Version::Http10 || rsp_10) {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// A response head for an HTTP/2 client; `length` is the `Content-Length` it announces,
/// if any. `None` if a field cannot be carried (which the header checks of the rules and
/// of the HTTP/1 parser prevent).
pub(crate) fn client_response(
    rsp: &ResponseView<'_>,
    edits: &Edits,
    length: Option<&[u8]>,
    compressed: Option<Algo>,
) -> Option<http::Response<()>> {
    let status = edits.status.as_ref().map_or(rsp.status(), |(c, _)| *c);
    let mut out = ResponseFields(FieldStore::with_capacity(
        room(rsp.headers()) + edits.add.len() + 2,
    ));
    response_fields(&mut out, rsp, edits, compressed);
    if let Some(n) = length {
        out.field(b"content-length", n);
    }
    let fields = out.0.finish()?;
    let mut res = http::Response::new(());
    *res.status_mut() = http::StatusCode::from_u16(status).ok()?;
    *res.headers_mut() = fields;
    Some(res)
}

/// The fields of a response for an HTTP/2 client as they are given.
struct ResponseFields(FieldStore);

impl FieldOut for ResponseFields {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0.push(name, value);
    }
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

/// `name` in lower case, in `buf` when it has capitals (a name longer than the buffer,
/// which no real header has, is left as it is).
fn lower_name<'a>(name: &'a [u8], buf: &'a mut [u8; 64]) -> &'a [u8] {
    if name.len() > buf.len() || !name.iter().any(u8::is_ascii_uppercase) {
        return name;
    }
    let out = &mut buf[..name.len()];
    out.copy_from_slice(name);
    out.make_ascii_lowercase();
    out
}

pub(crate) use sluice_http::push_header;

/// Sends the response head to a client's HTTP/2 or HTTP/3 stream (no text), its body to
/// follow as `framing` says.
pub(super) fn send_stream_head(
    stream: &crate::transport::Mux,
    view: &ResponseView<'_>,
    edits: &Edits,
    (framing, length_hint): (Framing, Option<Vec<u8>>),
    algo: Option<Algo>,
) -> std::io::Result<()> {
    let digits;
    let length = match framing {
        Framing::Length(n) => {
            digits = Digits::new(n);
            Some(digits.as_bytes())
        }
        Framing::None => length_hint.as_deref(),
        Framing::Chunked | Framing::UntilClose | Framing::Delimited => None,
    };
    let Some(res) = client_response(view, edits, length, algo) else {
        stream.abort();
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a response field HTTP/2 and HTTP/3 cannot carry",
        ));
    };
    stream.send_response(res, framing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_http::parse_request;

    /// `option forwardfor` as it comes by default.
    fn xff_header() -> ForwardFor {
        ForwardFor {
            header: "x-forwarded-for".into(),
            except: None,
            if_none: false,
        }
    }

    #[test]
    fn request_head_strips_hop_by_hop_before_adding_ours() {
        let raw = b"POST /p HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Forwarded-For, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nContent-Length: 003\r\nX-Keep: y\r\n\r\n";
        let head = parse_request(raw).unwrap().unwrap();
        let f = xff_header();
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
    fn a_request_for_an_http2_server_has_the_fields_an_http1_server_gets() {
        let raw = b"PUT /p?q HTTP/1.1\r\nHost: h\r\nConnection: X-Secret\r\nX-Secret: 1\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\nX-Keep: y\r\nX-Gone: 1\r\n\r\n";
        let head = parse_request(raw).unwrap().unwrap();
        let f = xff_header();
        let mut edits = Edits::default();
        edits.remove("x-gone", Match::Str);
        edits.remove("host", Match::Str);
        edits.add.push(("Host".into(), b"other.test".to_vec()));
        edits.add.push(("X-Added".into(), b"a".to_vec()));
        edits.method = Some(b"POST".to_vec());
        let view = sluice_http::RequestView::h1(raw, &head);
        let xff = Some((&f, "10.0.0.9".parse().unwrap()));
        let req = server_request(&view, &edits, xff, None).unwrap();
        assert_eq!(req.method, http::Method::POST);
        assert_eq!(&req.target[..], b"/p?q");
        assert_eq!(req.host.as_deref(), Some(&b"other.test"[..]));
        assert_eq!(req.framing, Framing::Delimited);
        let names: Vec<&str> = req.fields.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-keep", "x-added", "x-forwarded-for"]);
        assert_eq!(req.fields["x-forwarded-for"], "10.0.0.9");
        // A field HTTP/2 cannot carry makes the request so.
        edits.add.push(("bad name".into(), b"v".to_vec()));
        assert!(server_request(&view, &edits, None, None).is_none());
        // A WebSocket the client asked for is said so (the stream decides how it goes).
        let ws = server_request(&view, &Edits::default(), None, Some(b"websocket"));
        assert!(ws.unwrap().websocket);
    }

    #[test]
    fn a_response_for_an_http2_client_has_the_fields_an_http1_client_gets() {
        let raw = b"HTTP/1.1 200 Fine\r\nContent-Length: 5\r\nConnection: x-hop\r\nX-Hop: 1\r\nETag: \"e\"\r\nX-Server: Kept\r\nX-Gone: 1\r\n\r\nhello";
        let head = sluice_http::parse_response(raw, false).unwrap().unwrap();
        let view = ResponseView::h1(raw, &head);
        let mut edits = Edits::default();
        edits.remove("x-gone", Match::Str);
        edits.add.push(("X-Added".into(), b"a".to_vec()));
        let res = client_response(&view, &edits, Some(b"5"), None).unwrap();
        assert_eq!(res.status(), 200);
        let fields: Vec<(&str, &str)> = res
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            fields,
            [
                ("etag", "\"e\""),
                ("x-server", "Kept"),
                ("x-added", "a"),
                ("content-length", "5")
            ]
        );
        // Compressed: the fields a compressed body needs, the length left to the caller.
        let res = client_response(&view, &edits, None, Some(Algo::Gzip)).unwrap();
        assert_eq!(res.headers()["etag"], "W/\"e\"");
        assert_eq!(res.headers()["content-encoding"], "gzip");
        assert_eq!(res.headers()["vary"], "Accept-Encoding");
        assert!(!res.headers().contains_key("content-length"));
        // A status the rules set.
        edits.status = Some((503, None));
        let res = client_response(&view, &edits, None, None).unwrap();
        assert_eq!(res.status(), 503);
    }
}
