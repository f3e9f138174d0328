//! The probes: what one check does on the wire and how its outcome is named, in HAProxy's
//! terms (`L4OK`, `L4CON`, `L4TOUT`, `L7OK`, `L7STS`, `L7RSP`, `L7TOUT`).
//!
//! A plain check connects. `option httpchk` sends one request and judges the status (or
//! the body), in HTTP/2 when the server is spoken to in HTTP/2 (or `check-proto h2`).
//! `option tcp-check` runs the backend's `tcp-check` rules; the protocol probes
//! (`redis-check`, `smtpchk`, `pgsql-check`) are rule sets too, while `mysql-check` and
//! `ldap-check` speak a little of their protocols here, and `spop-check` the hello of
//! [`super::spop`].

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{external, spop};
use crate::conf::check::{
    BackendCheck, CheckKind, CheckOpts, CheckProto, CheckText, CheckVars, ConnectLayer,
    ConnectRule, Expect, ExpectOpts, HeaderMatch, HttpExpect, Pattern, Re, Report, TcpRule,
    VarStep, VarValues,
};
use crate::conf::listen::{BindSpec, UnixAddr};
use crate::conf::tls::Connector;
use crate::conf::{Backend, Server};
use crate::h2_stream::{response_head, H2Stream, ServerRequest};
use crate::runtime::{CheckResult, Process};
use crate::sample::{Ctx, Sample, StreamVars, VarName};
use crate::transport::{Conn, Origin, Socket};

/// Longest response kept for judging (status line, headers, the start of a body).
const MAX_READ: usize = 16384;

/// The variables of one check run (`check.` and `sess.`; `proc.` are the process's), which
/// its `set-var` steps fill and its texts read.
struct CheckScope<'a> {
    process: &'a Process,
    vars: StreamVars,
}

impl CheckScope<'_> {
    fn apply(&self, step: &VarStep) {
        let cx = Ctx::detached(self.process, &self.vars);
        match step {
            VarStep::Set(name, e) => {
                if let Some(v) = e.eval(&cx).map(Sample::into_owned) {
                    self.vars.set(self.process, name, v);
                }
            }
            VarStep::SetFmt(name, f) => {
                let v = Sample::Str(std::borrow::Cow::Owned(f.render(&cx)));
                self.vars.set(self.process, name, v);
            }
            VarStep::Unset(name) => self.vars.unset(self.process, name),
        }
    }

    fn value(&self, name: &VarName) -> Option<String> {
        let v = self.vars.get(self.process, name)?;
        Some(String::from_utf8_lossy(&v.as_bytes()).into_owned())
    }
}

/// Runs one check of `srv` (now at `addr`) as its backend says.
/// `state`: the `X-Haproxy-Server-State` value an HTTP check sends (`http-check
/// send-state`).
pub async fn probe(
    process: &Process,
    be: &Backend,
    srv: &Server,
    addr: SocketAddr,
    state: Option<String>,
) -> CheckResult {
    let started = Instant::now();
    let opts = srv.check.as_ref().expect("checked server");
    let connect_limit = be.timeout_connect.map_or(opts.inter, |t| t.min(opts.inter));
    let limit = be.check.timeout.unwrap_or(opts.inter);
    let scope = CheckScope {
        process,
        vars: StreamVars::default(),
    };
    let lookup = |name: &VarName| scope.value(name);
    let vars = CheckVars {
        backend: &be.name,
        backend_id: be.id,
        server: &srv.name,
        server_id: srv.id,
        values: VarValues(&lookup),
        env: &process.config.global.env,
    };
    let at = Target::of(srv, addr, opts);
    let tls = srv.check_tls.as_ref();
    let outcome = match &be.check.kind {
        CheckKind::TcpCheck => {
            let limits = (connect_limit, limit);
            let on = (&vars, &scope);
            rules((at, addr), &be.check.tcp_rules, on, limits, tls, true).await
        }
        CheckKind::Probe(r) => {
            let on = (&vars, &scope);
            rules((at, addr), r, on, (connect_limit, limit), tls, false).await
        }
        CheckKind::Http => {
            let how = &be.check.http_connect;
            for step in &be.check.http.vars {
                scope.apply(step);
            }
            let mut req = be.check.http.render(&vars);
            if let Some(state) = state {
                // After the request line.
                let at = memchr::memmem::find(&req, b"\r\n").map_or(req.len(), |i| i + 2);
                let line = format!("X-Haproxy-Server-State: {state}\r\n");
                req.splice(at..at, line.into_bytes());
            }
            let h2 = speaks_h2(srv, opts, how);
            // Sent with the connection when it is sure to be HTTP/1.1.
            let early = if h2 == Some(false) { &req[..] } else { &[] };
            let tls = tls_for(how, tls);
            match open(at.aimed(how, addr), connect_limit, early, tls.as_ref()).await {
                Ok(conn) if h2.unwrap_or_else(|| chose_h2(&conn)) => {
                    http2(conn, &req, (&be.check, &vars), limit, how).await
                }
                Ok(mut conn) => {
                    let o = if early.is_empty() {
                        match conn.write_all(&req).await {
                            Ok(()) => http(&conn, (&be.check, &vars), limit).await,
                            Err(e) => Outcome::invalid(&e),
                        }
                    } else {
                        http(&conn, (&be.check, &vars), limit).await
                    };
                    close(conn, how);
                    o
                }
                Err(o) => o,
            }
        }
        CheckKind::External => external(process, be, srv, addr, limit).await,
        kind => match open(at, connect_limit, &[], tls).await {
            Ok(mut conn) => {
                let o = match kind {
                    CheckKind::Mysql { user, pre41 } => {
                        mysql(&mut conn, user.as_deref(), *pre41, limit).await
                    }
                    CheckKind::Ldap => ldap(&mut conn, limit).await,
                    CheckKind::Spop => spop(&mut conn, process.config.global.bufsize, limit).await,
                    // A handshake that completed passes at layer 6 (`check-ssl`), as HAProxy
                    // reports it.
                    _ if conn.is_tls() => Outcome::pass("L6OK", "Layer6 check passed"),
                    _ => Outcome::pass("L4OK", "Layer4 check passed"),
                };
                close(conn, &ConnectRule::default());
                o
            }
            Err(o) => o,
        },
    };
    outcome.finish(started)
}

/// Where a connect rule sends the check: its own address and port when it has them.
fn aim(mut at: SocketAddr, how: &ConnectRule) -> SocketAddr {
    if let Some(ip) = how.addr {
        at.set_ip(ip);
    }
    if let Some(p) = how.port {
        at.set_port(p);
    }
    at
}

/// Whether an HTTP check of `srv` speaks HTTP/2: its connect rule's `proto`, else
/// `check-proto` if given, else as the server's traffic does (`proto h2`). `None` when
/// TLS's ALPN will tell, the connection offering `h2`.
fn speaks_h2(srv: &Server, opts: &CheckOpts, how: &ConnectRule) -> Option<bool> {
    match how.proto.or(opts.proto) {
        Some(p) => Some(p == CheckProto::H2),
        None if srv.h2 => Some(true),
        None => {
            let offers_h2 = tls_for(how, srv.check_tls.as_ref())
                .is_some_and(|c| c.config.alpn_protocols.iter().any(|p| p == b"h2"));
            (!offers_h2).then_some(false)
        }
    }
}

/// The TLS a connection that `how` opens starts: none on a plain one; else the check's
/// (the server's `check-ssl` settings, built for every server whose checks ask for `ssl`),
/// asking for the rule's own name and protocols.
fn tls_for(how: &ConnectRule, check: Option<&Connector>) -> Option<Connector> {
    let base = match how.layer {
        ConnectLayer::Plain => return None,
        ConnectLayer::Default | ConnectLayer::Ssl => check?,
    };
    Some(crate::tls::asking(
        base,
        how.sni.as_deref(),
        how.alpn.as_deref(),
    ))
}

/// Whether the check's TLS handshake chose HTTP/2 by ALPN.
fn chose_h2(conn: &Conn) -> bool {
    conn.tls().and_then(|t| t.alpn).as_deref() == Some(b"h2")
}

/// An HTTP check in HTTP/2: the connection's preface, then the check's request as one
/// stream (its HTTP/1.1 text, which the configuration made, read once for its head; the
/// answer read back as HTTP/1.1 by the same stream adapter the data path uses), judged as
/// [`http`] judges. The connection ends
/// with the check, with a reset unless the connect rule says `linger`.
async fn http2(
    conn: Conn,
    req: &[u8],
    (check, vars): (&BackendCheck, &CheckVars<'_>),
    limit: Duration,
    how: &ConnectRule,
) -> Outcome {
    if !how.linger {
        conn.reset_on_close();
    }
    let origin = Origin {
        tls: None,
        ..conn.origin()
    };
    let peer = origin.peer;
    let tls = conn.is_tls();
    // `open` made a socket: the HTTP/2 connection runs over it.
    let Ok(socket) = conn.into_socket() else {
        return Outcome::invalid(&io::Error::from(io::ErrorKind::InvalidInput));
    };
    let preface = h2::client::Builder::new().handshake::<_, Bytes>(socket);
    let (send, connection) = match tokio::time::timeout(limit, preface).await {
        Err(_) => return Outcome::fail("L7TOUT", "Layer7 timeout", None),
        Ok(Err(e)) => return Outcome::invalid(&io::Error::other(e)),
        Ok(Ok(pair)) => pair,
    };
    let exchange = async move {
        let unfit = || Outcome::invalid(&io::Error::from(io::ErrorKind::InvalidInput));
        let Ok(Some(head)) = sluice_http::parse_request(req) else {
            return unfit();
        };
        let Some(ask) = ServerRequest::from_view(&sluice_http::RequestView::h1(req, &head)) else {
            return unfit();
        };
        let end = H2Stream::asking(send, (tls, peer), None);
        let sent = end.send_request(&ask).await;
        let mut stream = Conn::h2_stream(end, origin, None);
        let sent = match (sent, &req[head.len..]) {
            (Ok(()), []) => Ok(()),
            (Ok(()), body) => stream.write_all(body).await,
            (Err(e), _) => Err(e),
        };
        if let Err(e) = sent {
            return Outcome::invalid(&e);
        }
        let answer = match stream.as_h2().map(|end| end.response()) {
            Some(answer) => tokio::time::timeout(limit, answer).await,
            None => return unfit(),
        };
        match answer {
            Err(_) => Outcome::fail("L7TOUT", "Layer7 timeout", None),
            Ok(Err(e)) => Outcome::invalid(&e),
            Ok(Ok(a)) => {
                let mut text = Vec::new();
                response_head(&a.parts, a.ended, head.is_head(req), &mut text);
                http_after(&stream, text, (check, vars), limit).await
            }
        }
    };
    let exchange = tokio::time::timeout(limit, exchange);
    tokio::pin!(exchange, connection);
    // The connection is driven while the stream runs; should it end first, the stream
    // learns why.
    let done = tokio::select! {
        done = &mut exchange => done,
        _ = &mut connection => exchange.await,
    };
    done.unwrap_or_else(|_| Outcome::fail("L7TOUT", "Layer7 timeout", None))
}

/// Ends a check's connection: with a reset unless the rule says `linger`, as HAProxy does,
/// so that checks leave no TIME_WAIT behind on either side.
pub fn close(conn: Conn, how: &ConnectRule) {
    if !how.linger {
        conn.abort();
    }
}

/// A probe's verdict, before its duration is known.
#[derive(Debug)]
struct Outcome {
    passed: bool,
    status: &'static str,
    reason: &'static str,
    code: Option<u16>,
    info: Option<String>,
    /// `http-check disable-on-404` matched: up, but no new traffic.
    stopping: bool,
}

impl Outcome {
    fn pass(status: &'static str, reason: &'static str) -> Outcome {
        Outcome {
            passed: true,
            status,
            reason,
            code: None,
            info: None,
            stopping: false,
        }
    }

    fn fail(status: &'static str, reason: &'static str, info: Option<String>) -> Outcome {
        Outcome {
            passed: false,
            status,
            reason,
            code: None,
            info,
            stopping: false,
        }
    }

    /// The answer could not be read (or the request not sent): `L7RSP` with the error.
    /// The outcome with `suffix` after its info (the info is the suffix when it had none).
    fn at(self, suffix: &str) -> Outcome {
        let info = format!("{}{suffix}", self.info.as_deref().unwrap_or_default());
        Outcome {
            info: Some(info),
            ..self
        }
    }

    fn invalid(e: &io::Error) -> Outcome {
        Outcome::fail("L7RSP", "Layer7 invalid response", Some(describe(e)))
    }

    fn finish(self, started: Instant) -> CheckResult {
        CheckResult {
            passed: self.passed,
            status: self.status,
            reason: self.reason,
            code: self.code,
            info: self.info,
            duration_ms: started.elapsed().as_millis() as u64,
            stopping: self.stopping,
        }
    }
}

/// Where a check connects: the server's address, with `addr` and `port` applied.
pub fn target(server: SocketAddr, opts: &CheckOpts) -> SocketAddr {
    let mut a = server;
    if let Some(ip) = opts.addr {
        a.set_ip(ip);
    }
    if let Some(p) = opts.port {
        a.set_port(p);
    }
    a
}

/// Where a check connects: an address, or the unix socket of a server listening on one
/// (unless the check names an address or a port of its own, as in HAProxy).
#[derive(Clone, Copy)]
enum Target<'a> {
    Inet(SocketAddr),
    Unix(&'a UnixAddr),
}

impl<'a> Target<'a> {
    fn of(srv: &'a Server, addr: SocketAddr, opts: &CheckOpts) -> Target<'a> {
        match &srv.unix {
            Some(u) if opts.addr.is_none() && opts.port.is_none() => Target::Unix(u),
            _ => Target::Inet(target(addr, opts)),
        }
    }

    /// Moved by a `connect` rule's `addr` and `port` (a unix socket has neither: a rule
    /// naming one connects there, on the server's address).
    fn aimed(self, how: &ConnectRule, server: SocketAddr) -> Target<'a> {
        match self {
            Target::Unix(_) if how.addr.is_none() && how.port.is_none() => self,
            Target::Unix(_) => Target::Inet(aim(server, how)),
            Target::Inet(a) => Target::Inet(aim(a, how)),
        }
    }
}

/// Opens the check's connection within `limit` (the layer-4 part of a check). With `first`
/// bytes (a request), they are written as soon as the connection allows, which proves it
/// established without waiting for the event loop to say so.
async fn open(
    to: Target<'_>,
    limit: Duration,
    first: &[u8],
    tls: Option<&Connector>,
) -> Result<Conn, Outcome> {
    let opening = async {
        let mut conn = match to {
            Target::Inet(addr) => Socket::dial(addr)?,
            Target::Unix(u) => Socket::connect_unix(u)?,
        };
        if first.is_empty() || tls.is_some() {
            conn.connected().await?;
        } else {
            conn.write_all(first).await?;
        }
        Ok::<_, io::Error>(conn)
    };
    let deadline = tokio::time::Instant::now() + limit;
    let conn = match tokio::time::timeout_at(deadline, opening).await {
        Err(_) => return Err(Outcome::fail("L4TOUT", "Layer4 timeout", None)),
        Ok(Err(e)) => {
            return Err(Outcome::fail(
                "L4CON",
                "Layer4 connection problem",
                Some(describe(&e)),
            ))
        }
        Ok(Ok(c)) => c,
    };
    let Some(c) = tls else {
        return Ok(Conn::from(conn));
    };
    // `check-ssl` (or a server with `ssl`): the handshake is layer 6.
    let handshake = async {
        let mut conn = conn
            .into_tls_client(c.config.clone(), c.name.clone())
            .await?;
        if !first.is_empty() {
            conn.write_all(first).await?;
        }
        Ok::<_, io::Error>(conn)
    };
    match tokio::time::timeout_at(deadline, handshake).await {
        Err(_) => Err(Outcome::fail("L6TOUT", "Layer6 timeout", None)),
        Ok(Err(e)) => Err(Outcome::fail(
            "L6RSP",
            "Layer6 invalid response",
            Some(describe(&e)),
        )),
        Ok(Ok(c)) => Ok(Conn::from(c)),
    }
}

/// An I/O error as HAProxy's check logs name it.
pub fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "Connection refused".into(),
        io::ErrorKind::ConnectionReset => "Connection reset by peer".into(),
        io::ErrorKind::UnexpectedEof => "Connection closed early".into(),
        _ => e.to_string(),
    }
}

/// Reads once more into `buf` (up to [`MAX_READ`]); `Ok(0)` at the peer's end of stream.
async fn read_more(conn: &Conn, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; 4096];
    loop {
        conn.readable().await?;
        match conn.try_read(&mut chunk) {
            Ok(n) => {
                let room = MAX_READ.saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Reads until `done` says the answer is whole, the peer closes, or [`MAX_READ`] bytes
/// arrived.
pub async fn read_until(conn: &Conn, done: impl Fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
    read_more_until(conn, Vec::new(), done).await
}

/// [`read_until`], what was read before being `out`.
async fn read_more_until(
    conn: &Conn,
    mut out: Vec<u8>,
    done: impl Fn(&[u8]) -> bool,
) -> io::Result<Vec<u8>> {
    if done(&out) {
        return Ok(out);
    }
    loop {
        match read_more(conn, &mut out).await {
            Ok(0) => break,
            Ok(_) if out.len() >= MAX_READ || done(&out) => break,
            Ok(_) => {}
            // A server that resets right after answering still answered.
            Err(e) if !out.is_empty() && e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        }
    }
    if out.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(out)
}

/// Whether `rsp` is a whole HTTP response: a final status's head, then as many body bytes
/// as its Content-Length says (none after HEAD, 204 or 304). Without a length the body
/// ends when the server closes. Stopping here rather than at the close saves waiting for
/// the server's FIN, which often arrives on its own.
fn whole_response(rsp: &[u8], head_only: bool) -> bool {
    let Some(head_end) = memchr::memmem::find(rsp, b"\r\n\r\n") else {
        return false;
    };
    let Some((code, _, body)) = parse_status(rsp) else {
        // Not HTTP: judged as soon as it is here.
        return true;
    };
    if code < 200 {
        return false;
    }
    if head_only || code == 204 || code == 304 {
        return true;
    }
    let length = rsp[..head_end].split(|&b| b == b'\n').find_map(|line| {
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        name.eq_ignore_ascii_case(b"content-length").then(|| {
            std::str::from_utf8(&value[1..])
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })?
    });
    length.is_some_and(|n| body.len() >= n)
}

/// `option httpchk`: the answer to the request `open` sent, judged by `http-check expect` (2xx and 3xx otherwise).
async fn http(conn: &Conn, on: (&BackendCheck, &CheckVars<'_>), limit: Duration) -> Outcome {
    http_after(conn, Vec::new(), on, limit).await
}

/// [`http`], the answer starting with `start` (an HTTP/2 answer's head, as HTTP/1.1 text).
async fn http_after(
    conn: &Conn,
    start: Vec<u8>,
    (check, vars): (&BackendCheck, &CheckVars<'_>),
    limit: Duration,
) -> Outcome {
    let head_only = check.http.method.eq_ignore_ascii_case("HEAD");
    let answer = read_more_until(conn, start, |b| whole_response(b, head_only));
    let rsp = match tokio::time::timeout(limit, answer).await {
        Err(_) => return Outcome::fail("L7TOUT", "Layer7 timeout", None),
        Ok(Err(e)) => return Outcome::invalid(&e),
        Ok(Ok(r)) => r,
    };
    let Some((code, phrase, body)) = parse_status(&rsp) else {
        return Outcome::fail(
            "L7RSP",
            "Layer7 invalid response",
            Some("not an HTTP response".into()),
        );
    };
    // The expects in order: the first that fails makes the report.
    let failed = check
        .expects
        .iter()
        .find(|e| expectation_holds(&e.expect, (code, body, &rsp), vars) == e.negated);
    let ok = match failed {
        None => !check.expects.is_empty() || (200..400).contains(&code),
        Some(_) => false,
    };
    let body_check = |e: &HttpExpect| matches!(e.expect, Expect::String(_) | Expect::RString(_));
    // A body expectation's failure says so; a status one gives the reason phrase.
    let info = match failed {
        Some(e) if body_check(e) => Some(if e.negated {
            "HTTP check matched unwanted content".to_string()
        } else {
            "HTTP content check did not match".to_string()
        }),
        _ => (!phrase.is_empty()).then(|| phrase.to_string()),
    };
    let info = match (failed.and_then(|e| e.comment.as_ref()), info) {
        (Some(c), Some(i)) => Some(format!("{i} comment: {c}")),
        (Some(c), None) => Some(format!(" comment: {c}")),
        (None, i) => i,
    };
    let mut o = if code == 404 && check.disable_on_404 {
        // Up, but asking for no new traffic (HAProxy's L7OKC).
        let mut o = Outcome::pass("L7OKC", "Layer7 check conditionally passed");
        o.stopping = true;
        o
    } else if ok {
        Outcome::pass("L7OK", "Layer7 check passed")
    } else if failed.is_some_and(body_check) {
        Outcome::fail("L7RSP", "Layer7 invalid response", None)
    } else {
        Outcome::fail("L7STS", "Layer7 wrong status", None)
    };
    // As HAProxy: only the statuses with data show the code.
    o.code = matches!(o.status, "L7OK" | "L7OKC" | "L7STS").then_some(code);
    // As HAProxy: the reason phrase explains a failure; a success says nothing more.
    if !o.passed {
        o.info = info;
    }
    o
}

/// Whether the answer meets one `http-check expect` (before its `!`).
fn expectation_holds(
    expect: &Expect,
    (code, body, rsp): (u16, &[u8], &[u8]),
    vars: &CheckVars<'_>,
) -> bool {
    match expect {
        Expect::Status(ranges) => ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&code)),
        Expect::RStatus(re) => re.0.is_match(code.to_string().as_bytes()),
        Expect::String(s) => contains(body, s.as_bytes()),
        Expect::RString(re) => re.0.is_match(body),
        Expect::Header { name, value, full } => {
            has_header(rsp, (name, value.as_ref()), *full, vars)
        }
    }
}

/// Whether a response head has a header whose name matches `name` and, with `value`, one
/// of its values matching (each comma-separated value, or with `full` the whole value), as
/// HAProxy's `http-check expect hdr|fhdr` looks.
fn has_header(
    rsp: &[u8],
    (name, value): (&HeaderMatch, Option<&HeaderMatch>),
    full: bool,
    vars: &CheckVars<'_>,
) -> bool {
    let head_end = memchr::memmem::find(rsp, b"\r\n\r\n").unwrap_or(rsp.len());
    let icase = !matches!(name, HeaderMatch::Reg(_));
    rsp[..head_end]
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii()))
        })
        .filter(|(n, _)| name.matches_at(n, icase, vars))
        .any(|(_, v)| match value {
            None => true,
            Some(m) if full => m.matches_at(v, false, vars),
            Some(m) => v
                .split(|&b| b == b',')
                .any(|part| m.matches_at(part.trim_ascii(), false, vars)),
        })
}

/// The status code, reason phrase and body of an HTTP/1.x response.
pub fn parse_status(rsp: &[u8]) -> Option<(u16, &str, &[u8])> {
    let line_end = memchr::memmem::find(rsp, b"\r\n")?;
    let line = std::str::from_utf8(&rsp[..line_end]).ok()?;
    let rest = line.strip_prefix("HTTP/1.")?;
    let mut parts = rest.splitn(3, ' ');
    let _minor = parts.next()?;
    let code: u16 = parts.next()?.parse().ok()?;
    let phrase = parts.next().unwrap_or("").trim();
    let body = memchr::memmem::find(rsp, b"\r\n\r\n").map_or(&[][..], |i| &rsp[i + 4..]);
    Some((code, phrase, body))
}

/// The bytes in hexadecimal, upper case, as `rbinary` matches them.
fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Runs a rule set. Without a leading `connect` rule (comments aside), the connection opens
/// first. Each `expect` judges what arrived since the last `send` (or `connect`), as
/// HAProxy's do: consecutive expects read the same bytes. `generic`: the
/// backend's own `tcp-check` rules, reported as HAProxy reports them (`... at step N of
/// tcp-check (...)`, `TCPCHK did not match content ...`, `(tcp-check)`); a protocol probe
/// written as rules keeps its own words.
async fn rules(
    (at, addr): (Target<'_>, SocketAddr),
    rules: &[TcpRule],
    (vars, scope): (&CheckVars<'_>, &CheckScope<'_>),
    (connect_limit, limit): (Duration, Duration),
    tls: Option<&Connector>,
    generic: bool,
) -> Outcome {
    // The open connection and the rule it was opened by.
    let implicit = ConnectRule::default();
    let mut conn: Option<(Conn, &ConnectRule)> = None;
    let first = rules.iter().find(|r| !matches!(r, TcpRule::Comment(_)));
    if !matches!(first, Some(TcpRule::Connect(_))) {
        match open(at, connect_limit, &[], tls).await {
            Ok(c) => conn = Some((c, &implicit)),
            Err(o) if generic => return o.at(" at initial connection step of tcp-check"),
            Err(o) => return o,
        }
    }
    let run = RuleRun {
        to: at,
        addr,
        vars,
        scope,
        connect_limit,
        tls,
        generic,
    };
    let outcome = run.run(rules, &mut conn, limit).await;
    if let Some((c, how)) = conn {
        close(c, how);
    }
    outcome
}

/// What running a rule set needs besides its rules.
struct RuleRun<'a> {
    to: Target<'a>,
    addr: SocketAddr,
    vars: &'a CheckVars<'a>,
    scope: &'a CheckScope<'a>,
    connect_limit: Duration,
    tls: Option<&'a Connector>,
    generic: bool,
}

impl RuleRun<'_> {
    async fn run<'r>(
        &self,
        rules: &'r [TcpRule],
        conn: &mut Option<(Conn, &'r ConnectRule)>,
        limit: Duration,
    ) -> Outcome {
        let deadline = tokio::time::Instant::now() + limit;
        let mut buf = Vec::new();
        let comments = step_comments(rules);
        for (i, rule) in rules.iter().enumerate() {
            let step = Step {
                number: i + 1,
                comment: comments[i],
                generic: self.generic,
            };
            match rule {
                TcpRule::Comment(_) => {}
                TcpRule::Var(step) => self.scope.apply(step),
                TcpRule::Connect(how) => {
                    if let Some((old, old_how)) = conn.take() {
                        close(old, old_how);
                    }
                    let to = self.to.aimed(how, self.addr);
                    let tls = tls_for(how, self.tls);
                    match open(to, self.connect_limit, &[], tls.as_ref()).await {
                        Ok(c) => *conn = Some((c, how)),
                        Err(o) => return step.report(o, &connect_what(how)),
                    }
                    buf.clear();
                }
                TcpRule::Send(..) | TcpRule::SendText(..) | TcpRule::SslHello => {
                    let made;
                    let bytes = match rule {
                        TcpRule::SendText(t, _) => {
                            let mut s = String::new();
                            t.render(self.vars, &mut s);
                            made = s.into_bytes();
                            made.as_slice()
                        }
                        TcpRule::SslHello => {
                            made = ssl_hello(std::time::SystemTime::now());
                            made.as_slice()
                        }
                        TcpRule::Send(b, _) => b.as_slice(),
                        _ => unreachable!("only sends here"),
                    };
                    // What arrived before a send is done with (HAProxy releases its input
                    // buffer there): the expects after it judge what follows.
                    buf.clear();
                    let c = &mut conn.as_mut().expect("connected before sending").0;
                    let sent = tokio::time::timeout_at(deadline, c.write_all(bytes)).await;
                    match sent {
                        Err(_) => {
                            let o = Outcome::fail("L7TOUT", "Layer7 timeout", None);
                            return step.report(o, "(send)");
                        }
                        Ok(Err(e)) if self.generic => {
                            let o = Outcome::fail("SOCKERR", "Socket error", Some(describe(&e)));
                            return step.report(o, "(send)");
                        }
                        Ok(Err(e)) => {
                            return Outcome::fail(
                                "L7RSP",
                                "Layer7 invalid response",
                                Some(step.plain(&format!("{} on send", describe(&e)))),
                            )
                        }
                        Ok(Ok(())) => {}
                    }
                }
                TcpRule::Expect {
                    neg,
                    pattern,
                    min_recv,
                    opts,
                } => {
                    let c = &conn.as_ref().expect("connected before expecting").0;
                    let matched = |b: &[u8]| match pattern {
                        Pattern::Contains(p) | Pattern::ContainsBinary(p) => contains(b, p),
                        Pattern::Prefix(p) => b.starts_with(p),
                        Pattern::Regex(re) => re.0.is_match(b),
                        Pattern::RegexHex(re) => re.0.is_match(hex_of(b).as_bytes()),
                    };
                    // Bytes needed before judging: the pattern's, and `min-recv`'s.
                    let need = match pattern {
                        Pattern::Contains(p) | Pattern::ContainsBinary(p) | Pattern::Prefix(p) => {
                            p.len()
                        }
                        Pattern::Regex(_) | Pattern::RegexHex(_) => 0,
                    }
                    .max(min_recv.unwrap_or(0))
                    .max(1);
                    let mut closed = false;
                    loop {
                        if buf.len() >= need || closed {
                            // A match decides at once (a pass, or a negated rule's
                            // failure); so does a mismatch under `min-recv`, as HAProxy.
                            if matched(&buf) || min_recv.is_some() {
                                break;
                            }
                        }
                        if closed || buf.len() >= MAX_READ {
                            break;
                        }
                        match tokio::time::timeout_at(deadline, read_more(c, &mut buf)).await {
                            // Nothing unwanted arrived in time: a negated rule passes.
                            Err(_) if *neg => break,
                            Err(_) => {
                                let status = opts.tout_status.unwrap_or("L7TOUT");
                                let o = Outcome::fail(status, reason_of(status), None);
                                return step.report(o, &expect_what(pattern));
                            }
                            Ok(Ok(0)) => closed = true,
                            Ok(Ok(_)) => {}
                            // As HAProxy: what arrived before an error is judged.
                            Ok(Err(_)) if self.generic => closed = true,
                            Ok(Err(e)) => {
                                return Outcome::fail(
                                    "L7RSP",
                                    "Layer7 invalid response",
                                    Some(step.plain(&describe(&e))),
                                )
                            }
                        }
                    }
                    if closed && buf.is_empty() && self.generic {
                        return empty_response(&step, opts);
                    }
                    if matched(&buf) == *neg {
                        return self.mismatch(&step, (*neg, pattern, opts), &buf);
                    }
                }
            }
        }
        self.passed(rules, &buf)
    }

    /// An `expect` that failed on what arrived: its `on-error` text or HAProxy's, then its
    /// comment; its `error-status` and `status-code`.
    fn mismatch(
        &self,
        step: &Step<'_>,
        (neg, pattern, opts): (bool, &Pattern, &ExpectOpts),
        got: &[u8],
    ) -> Outcome {
        let status = opts.error_status.unwrap_or("L7RSP");
        let mut info = match &opts.on_error {
            Some(text) => {
                let mut s = String::new();
                text.render(self.vars, &mut s);
                s
            }
            None if opts.error_report.is_some() => report(opts.error_report, got),
            None if self.generic => {
                let verdict = if neg {
                    "TCPCHK matched unwanted content"
                } else {
                    "TCPCHK did not match content"
                };
                let what = match pattern {
                    Pattern::Contains(p) | Pattern::Prefix(p) => {
                        format!(" '{}'", String::from_utf8_lossy(p))
                    }
                    Pattern::ContainsBinary(_) => " (binary)".to_string(),
                    Pattern::Regex(_) => " (regex)".to_string(),
                    Pattern::RegexHex(_) => " (binary regex)".to_string(),
                };
                format!("{verdict}{what} at step {}", step.number)
            }
            // HAProxy's own rule sets say nothing more than their status.
            None if opts.error_status.is_some() => {
                return Outcome::fail(status, reason_of(status), None);
            }
            None => return self.probe_mismatch(step, pattern),
        };
        if let Some(c) = step.comment {
            info.push_str(&format!(" comment: {c}"));
        }
        let mut o = Outcome::fail(status, reason_of(status), Some(info));
        o.code = with_code(status, reply_code(opts, got));
        o
    }

    /// A protocol probe's mismatch, in sluice's words.
    fn probe_mismatch(&self, step: &Step<'_>, pattern: &Pattern) -> Outcome {
        let what = match pattern {
            Pattern::Contains(p) | Pattern::Prefix(p) | Pattern::ContainsBinary(p) => {
                String::from_utf8_lossy(p).into_owned()
            }
            Pattern::Regex(re) | Pattern::RegexHex(re) => re.0.as_str().to_string(),
        };
        Outcome::fail(
            "L7RSP",
            "Layer7 invalid response",
            Some(step.plain(&format!("TCPCHK did not match content '{what}'"))),
        )
    }

    /// Every rule passed: as HAProxy judges by the last one (an `expect`: its `ok-status`,
    /// `on-success` and `status-code`; a `connect`: layer 4, or 6 over TLS).
    fn passed(&self, rules: &[TcpRule], got: &[u8]) -> Outcome {
        let last = rules
            .iter()
            .rev()
            .find(|r| !matches!(r, TcpRule::Comment(_)));
        if !self.generic {
            let status = match last {
                Some(TcpRule::Expect { opts, .. }) => opts.ok_status.unwrap_or("L7OK"),
                _ => "L7OK",
            };
            let mut o = Outcome::pass(status, reason_of(status));
            // A probe that reports from the reply (`option smtpchk`): its code and text.
            if let Some(TcpRule::Expect { opts, .. }) = last {
                let info = match &opts.on_success {
                    Some(text) => {
                        let mut s = String::new();
                        text.render(self.vars, &mut s);
                        Some(s)
                    }
                    None => opts.success_report.map(|r| report(Some(r), got)),
                };
                if info.is_some() {
                    o.info = info;
                    o.code = with_code("L7OK", reply_code(opts, got));
                }
            }
            return o;
        }
        let (status, info, code) = match last {
            Some(TcpRule::Expect { opts, .. }) => {
                let info = match &opts.on_success {
                    Some(text) => {
                        let mut s = String::new();
                        text.render(self.vars, &mut s);
                        s
                    }
                    None => "(tcp-check)".to_string(),
                };
                (
                    opts.ok_status.unwrap_or("L7OK"),
                    Some(info),
                    opts.status_code,
                )
            }
            Some(TcpRule::Connect(_)) => {
                let status = if self.tls.is_some() { "L6OK" } else { "L4OK" };
                (status, Some("(tcp-check)".to_string()), None)
            }
            _ => ("L7OK", Some("(tcp-check)".to_string()), None),
        };
        let mut o = Outcome::pass(status, reason_of(status));
        o.info = info;
        o.code = with_code(status, code);
        o
    }
}

/// One step of a rule set, as failure reports name it.
struct Step<'a> {
    number: usize,
    comment: Option<&'a str>,
    generic: bool,
}

impl Step<'_> {
    /// A connection, send or receive failure, with HAProxy's ` at step N of tcp-check
    /// (WHAT) comment: 'C'` after the error's own text.
    fn report(&self, o: Outcome, what: &str) -> Outcome {
        if !self.generic {
            let info = o.info.clone().map(|i| self.plain(&i));
            return Outcome { info, ..o };
        }
        let mut suffix = format!(" at step {} of tcp-check {what}", self.number);
        if let Some(c) = self.comment {
            suffix.push_str(&format!(" comment: '{c}'"));
        }
        o.at(&suffix)
    }

    /// sluice's own wording, for protocol probes.
    fn plain(&self, what: &str) -> String {
        match self.comment {
            Some(c) => format!("{what} at step {} comment '{c}'", self.number),
            None => format!("{what} at step {}", self.number),
        }
    }
}

/// The comment naming each rule in failure reports, as HAProxy attaches them: a rule's own
/// `comment`, else the last `tcp-check comment` before it, which names the rules that follow
/// it up to the first of another kind than the one after it (a `connect` keeps it for
/// itself).
fn step_comments(rules: &[TcpRule]) -> Vec<Option<&str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Comment,
        Connect,
        Send,
        Expect,
        Var,
    }
    let mut out = Vec::with_capacity(rules.len());
    let (mut prev, mut pending) = (Kind::Comment, None);
    for rule in rules {
        let kind = match rule {
            TcpRule::Comment(_) => Kind::Comment,
            TcpRule::Connect(_) => Kind::Connect,
            TcpRule::Send(..) | TcpRule::SendText(..) | TcpRule::SslHello => Kind::Send,
            TcpRule::Expect { .. } => Kind::Expect,
            TcpRule::Var(_) => Kind::Var,
        };
        if kind != prev && prev != Kind::Comment {
            pending = None;
        }
        prev = kind;
        out.push(match rule {
            TcpRule::Comment(c) => {
                pending = Some(c.as_str());
                None
            }
            TcpRule::Connect(how) => how.comment.as_deref().or(pending.take()),
            TcpRule::Send(_, c) | TcpRule::SendText(_, c) => c.as_deref().or(pending),
            TcpRule::SslHello => pending,
            TcpRule::Expect { opts, .. } => opts.comment.as_deref().or(pending),
            TcpRule::Var(_) => None,
        });
    }
    out
}

/// What a probe reports of a reply (see [`Report`]).
fn report(what: Option<Report>, got: &[u8]) -> String {
    let text = match what {
        Some(Report::From(n)) => {
            let rest = got.get(n..).unwrap_or_default();
            rest.split(|&b| b == 0).next().unwrap_or_default()
        }
        Some(Report::Text) => first_line(got.get(4..).unwrap_or_default().trim_ascii_start()),
        _ => first_line(got),
    };
    String::from_utf8_lossy(text).into_owned()
}

/// Up to the first CR or LF (`cut_crlf`).
fn first_line(b: &[u8]) -> &[u8] {
    b.split(|&c| c == b'\r' || c == b'\n')
        .next()
        .unwrap_or_default()
}

/// The code an expect reports: its `status-code`, or the reply's first three digits.
fn reply_code(opts: &ExpectOpts, got: &[u8]) -> Option<i64> {
    if !opts.code_from_reply {
        return opts.status_code;
    }
    std::str::from_utf8(got.get(..3)?).ok()?.parse().ok()
}

/// A connection that ended with nothing received where an `expect` waited.
fn empty_response(step: &Step<'_>, opts: &ExpectOpts) -> Outcome {
    let status = opts.error_status.unwrap_or("L7RSP");
    let mut info = format!("TCPCHK got an empty response at step {}", step.number);
    if let Some(c) = step.comment {
        info.push_str(&format!(" comment: '{c}'"));
    }
    Outcome::fail(status, reason_of(status), Some(info))
}

/// How a failed `connect` step is named: `(connect port N)` or `(connect)`.
fn connect_what(how: &ConnectRule) -> String {
    match how.port {
        Some(p) => format!("(connect port {p})"),
        None => "(connect)".into(),
    }
}

/// How an `expect` step that timed out is named.
fn expect_what(pattern: &Pattern) -> String {
    match pattern {
        Pattern::Contains(p) | Pattern::Prefix(p) => {
            format!("(expect string '{}')", String::from_utf8_lossy(p))
        }
        Pattern::ContainsBinary(p) => format!("(expect binary '{}')", String::from_utf8_lossy(p)),
        Pattern::Regex(_) => "(expect regex)".into(),
        Pattern::RegexHex(_) => "(expect binary regex)".into(),
    }
}

/// HAProxy's description of a check status.
fn reason_of(status: &str) -> &'static str {
    match status {
        "L4OK" => "Layer4 check passed",
        "L4TOUT" => "Layer4 timeout",
        "L4CON" => "Layer4 connection problem",
        "L6OK" => "Layer6 check passed",
        "L6TOUT" => "Layer6 timeout",
        "L6RSP" => "Layer6 invalid response",
        "L7TOUT" => "Layer7 timeout",
        "L7RSP" => "Layer7 invalid response",
        "L7OK" => "Layer7 check passed",
        "L7OKC" => "Layer7 check conditionally passed",
        "L7STS" => "Layer7 wrong status",
        "SOCKERR" => "Socket error",
        _ => "Unknown",
    }
}

/// The code a report shows: only layer-7 results with data have one (0 unless
/// `status-code` gave it), as HAProxy prints them.
fn with_code(status: &str, code: Option<i64>) -> Option<u16> {
    matches!(status, "L7OK" | "L7OKC" | "L7STS").then(|| code.unwrap_or(0).clamp(0, 65535) as u16)
}

/// The rules of `option redis-check`: PING, expect +PONG.
pub fn redis_rules() -> Vec<TcpRule> {
    // HAProxy 2.6's rule set: PING, `+PONG`, the reply's first line reported on failure.
    vec![
        TcpRule::Send(b"*1\r\n$4\r\nPING\r\n".to_vec(), None),
        TcpRule::Expect {
            neg: false,
            pattern: Pattern::Contains(b"+PONG\r\n".to_vec()),
            min_recv: None,
            opts: ExpectOpts {
                error_status: Some("L7STS"),
                error_report: Some(Report::Line),
                on_success: Some(CheckText::literal("Redis server is ok")),
                ..ExpectOpts::default()
            },
        },
    ]
}

/// The rules of `option smtpchk [HELO|EHLO DOMAIN]`: a 2xx banner, the greeting, a 2xx
/// answer.
pub fn smtp_rules(verb: &str, domain: &str) -> Vec<TcpRule> {
    // HAProxy 2.6's rule set: any reply code, then a 2xx banner, the greeting and its 2xx
    // (multi-line answers accepted), then QUIT and its 2xx, the last reply's code and text
    // reported.
    let expect = |re: &str, min_recv, error_status, error_report, success: bool| TcpRule::Expect {
        neg: false,
        pattern: Pattern::Regex(Re(regex::bytes::Regex::new(re).expect("a valid pattern"))),
        min_recv,
        opts: ExpectOpts {
            error_status: Some(error_status),
            error_report: Some(error_report),
            success_report: success.then_some(Report::Text),
            code_from_reply: error_report == Report::Text,
            ..ExpectOpts::default()
        },
    };
    vec![
        TcpRule::Connect(ConnectRule {
            linger: true,
            ..ConnectRule::default()
        }),
        expect("^[0-9]{3}[ \\r]", Some(4), "L7RSP", Report::Line, false),
        expect("^2[0-9]{2}[ \\r]", Some(4), "L7STS", Report::Text, false),
        TcpRule::Send(format!("{verb} {domain}\r\n").into_bytes(), None),
        expect(
            "^(2[0-9]{2}-[^\\r]*\\r\\n)*2[0-9]{2}[ \\r]",
            None,
            "L7STS",
            Report::Text,
            true,
        ),
        TcpRule::Send(b"QUIT\r\n".to_vec(), None),
        expect("^2[0-9]{2}[- \\r]", Some(4), "L7STS", Report::Text, true),
    ]
}

/// The rules of `option ssl-hello-chk`, as HAProxy 2.6's rule set: an SSLv3 client hello,
/// then a record that is a handshake or an alert (0x16 or 0x15) is a server speaking SSL.
pub fn ssl_hello_rules() -> Vec<TcpRule> {
    vec![
        TcpRule::SslHello,
        TcpRule::Expect {
            neg: false,
            pattern: Pattern::RegexHex(Re(regex::bytes::Regex::new("^1[56]").expect("valid"))),
            min_recv: Some(5),
            opts: ExpectOpts {
                ok_status: Some("L6OK"),
                error_status: Some("L6RSP"),
                tout_status: Some("L6TOUT"),
                ..ExpectOpts::default()
            },
        },
    ]
}

/// An SSLv3 CLIENT HELLO (RFC 2246, A.3 and A.4) offering the 39 most common suites of its
/// time, its random starting with the time, as HAProxy sends it: enough for any SSL or
/// TLS server to answer with a handshake record or an alert.
fn ssl_hello(now: std::time::SystemTime) -> Vec<u8> {
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    let suites: Vec<u16> = (0x01..=0x1b).chain(0x2f..=0x3a).collect();
    let mut hello = vec![0x03, 0x00]; // client version SSLv3
    hello.extend_from_slice(&secs.to_be_bytes());
    hello.extend_from_slice(b"HAPROXYSSLCHK\nHAPROXYSSLCHK\n"); // the random's other 28 bytes
    hello.push(0); // no session id
    hello.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
    for s in suites {
        hello.extend_from_slice(&s.to_be_bytes());
    }
    hello.extend_from_slice(&[1, 0]); // one compression method: none
    let mut handshake = vec![0x01, 0, 0, hello.len() as u8]; // CLIENT HELLO, 24-bit length
    handshake.extend_from_slice(&hello);
    let mut record = vec![0x16, 0x03, 0x00]; // handshake record, SSLv3
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

/// The rules of `option pgsql-check user USER`: a startup message (protocol 3.0), then an
/// authentication request (`R`) rather than an error (`E`).
pub fn pgsql_rules(user: &str) -> Vec<TcpRule> {
    let mut params = Vec::new();
    params.extend_from_slice(b"user\0");
    params.extend_from_slice(user.as_bytes());
    params.extend_from_slice(b"\0\0");
    let len = (8 + params.len()) as u32;
    let mut msg = len.to_be_bytes().to_vec();
    msg.extend_from_slice(&196_608u32.to_be_bytes());
    msg.extend_from_slice(&params);
    // HAProxy 2.6's rule set: no error message (`E`, whose severity is reported), then an
    // authentication request or success (`R`, of the lengths and kinds it accepts).
    let regex = |re: &str| Re(regex::bytes::Regex::new(re).expect("a valid pattern"));
    vec![
        TcpRule::Connect(ConnectRule {
            linger: true,
            ..ConnectRule::default()
        }),
        TcpRule::Send(msg, None),
        TcpRule::Expect {
            neg: true,
            pattern: Pattern::Regex(regex("^E")),
            min_recv: Some(5),
            opts: ExpectOpts {
                error_status: Some("L7RSP"),
                error_report: Some(Report::From(6)),
                ..ExpectOpts::default()
            },
        },
        TcpRule::Expect {
            neg: false,
            pattern: Pattern::RegexHex(regex("^52000000(08|0A|0C)000000(00|02|03|04|05|06)")),
            min_recv: Some(9),
            opts: ExpectOpts {
                error_status: Some("L7STS"),
                on_success: Some(CheckText::literal("PostgreSQL server is ok")),
                on_error: Some(CheckText::literal("PostgreSQL unknown error")),
                ..ExpectOpts::default()
            },
        },
    ]
}

/// Reads until at least `n` bytes are in `buf` (or the peer closes).
async fn read_at_least(conn: &Conn, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    while buf.len() < n {
        if read_more(conn, buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Reads one MySQL packet (3-byte little-endian length, sequence number, payload).
/// `option mysql-check [user U [post-41|pre-41]]`, as HAProxy 2.6's rule set: with a user,
/// the login (then `COM_QUIT`) leaves as soon as the connection opens; the greeting must be
/// a whole packet that is not an error packet, and with a user the packet after it too. A
/// pass reports the server's version; an error packet its code and the rest of it
/// (`#SQLSTATE` and message); a truncated answer fails without a word.
async fn mysql(conn: &mut Conn, user: Option<&str>, pre41: bool, limit: Duration) -> Outcome {
    let exchange = async {
        if let Some(user) = user {
            conn.write_all(&mysql_login(user, pre41)).await?;
        }
        let mut buf = Vec::new();
        let greeting = mysql_packet(conn, &mut buf, 0).await?;
        if user.is_some() {
            mysql_packet(conn, &mut buf, greeting).await?;
        }
        Ok::<_, io::Error>(buf)
    };
    match tokio::time::timeout(limit, exchange).await {
        Err(_) => Outcome::fail("L7TOUT", "Layer7 timeout", None),
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            // An error packet: its code, and its text from the SQL state on.
            let (code, text) = match e.into_inner().and_then(|b| b.downcast::<MysqlError>().ok()) {
                Some(m) => (m.0, m.1),
                None => (0, String::new()),
            };
            let mut o = Outcome::fail("L7STS", "Layer7 wrong status", Some(text));
            o.code = Some(code);
            o
        }
        // Truncated or cut: HAProxy's L7RSP, with nothing to say.
        Ok(Err(_)) => Outcome::fail("L7RSP", "Layer7 invalid response", None),
        Ok(Ok(buf)) => {
            let version = buf.get(5..).unwrap_or_default();
            let version = version.split(|&b| b == 0).next().unwrap_or_default();
            let mut o = Outcome::pass("L7OK", "Layer7 check passed");
            o.code = Some(0);
            o.info = Some(String::from_utf8_lossy(version).into_owned());
            o
        }
    }
}

/// A MySQL error packet: its code and its text.
#[derive(Debug)]
struct MysqlError(u16, String);

impl std::fmt::Display for MysqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MySQL error {}: {}", self.0, self.1)
    }
}

impl std::error::Error for MysqlError {}

/// Reads the packet at `at` of `buf` (reading more as needed) and returns where the next
/// one starts; an error packet is an `InvalidData` error carrying a [`MysqlError`].
async fn mysql_packet(conn: &Conn, buf: &mut Vec<u8>, at: usize) -> io::Result<usize> {
    read_at_least(conn, buf, at + 4).await?;
    let len = usize::from(buf[at]) | usize::from(buf[at + 1]) << 8 | usize::from(buf[at + 2]) << 16;
    read_at_least(conn, buf, at + 4 + len).await?;
    if buf.get(at + 4) == Some(&0xff) {
        let code = u16::from_le_bytes([buf[at + 5], buf[at + 6]]);
        let text = String::from_utf8_lossy(buf.get(at + 7..).unwrap_or_default()).into_owned();
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            MysqlError(code, text),
        ));
    }
    Ok(at + 4 + len)
}

/// HAProxy's login packet (4.1 or older) for `user`, without password, then `COM_QUIT`.
fn mysql_login(user: &str, pre41: bool) -> Vec<u8> {
    let mut body = Vec::new();
    if pre41 {
        body.extend_from_slice(&[0x00, 0x80, 0x00, 0x00, 0x01]);
    } else {
        body.extend_from_slice(&[0x00, 0x82, 0x00, 0x00, 0x00, 0x80, 0x00, 0x01, 0x21]);
        body.extend_from_slice(&[0; 23]);
    }
    body.extend_from_slice(user.as_bytes());
    body.extend_from_slice(&[0x00, 0x00]);
    let mut pkt = (body.len() as u32).to_le_bytes()[..3].to_vec();
    pkt.push(1);
    pkt.extend_from_slice(&body);
    // COM_QUIT, sequence 0.
    pkt.extend_from_slice(&[0x01, 0x00, 0x00, 0x00, 0x01]);
    pkt
}

/// `option ldap-check`, as HAProxy 2.6: an anonymous LDAPv3 simple bind; the answer must
/// start with a SEQUENCE (at least 14 bytes), be a bind response to message 1, and carry
/// result code 0 ("Success"); another code is `L7STS` with that code, anything else "Not
/// LDAPv3 protocol".
async fn ldap(conn: &mut Conn, limit: Duration) -> Outcome {
    // BindRequest, message id 1: version 3, empty name, empty simple password.
    const BIND: &[u8] = &[
        0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00,
    ];
    let exchange = async {
        conn.write_all(BIND).await?;
        let mut buf = Vec::new();
        loop {
            match ldap_bind_result(&buf) {
                LdapAnswer::Short => {}
                decided => return Ok::<_, io::Error>(decided),
            }
            if read_more(conn, &mut buf).await? == 0 || buf.len() >= MAX_READ {
                // Cut short: a SEQUENCE that never ended says nothing more.
                return Ok(match buf.first() {
                    Some(0x30) => LdapAnswer::Short,
                    _ => LdapAnswer::NotLdap,
                });
            }
        }
    };
    let not_ldap = || {
        Outcome::fail(
            "L7RSP",
            "Layer7 invalid response",
            Some("Not LDAPv3 protocol".into()),
        )
    };
    match tokio::time::timeout(limit, exchange).await {
        Err(_) => Outcome::fail("L7TOUT", "Layer7 timeout", None),
        Ok(Err(_)) | Ok(Ok(LdapAnswer::NotLdap)) => not_ldap(),
        Ok(Ok(LdapAnswer::Short)) => Outcome::fail("L7RSP", "Layer7 invalid response", None),
        Ok(Ok(LdapAnswer::Code(0))) => {
            let mut o = Outcome::pass("L7OK", "Layer7 check passed");
            o.code = Some(0);
            o.info = Some("Success".into());
            o
        }
        Ok(Ok(LdapAnswer::Code(code))) => {
            let mut o = Outcome::fail(
                "L7STS",
                "Layer7 wrong status",
                Some("See RFC: http://tools.ietf.org/html/rfc4511#section-4.1.9".into()),
            );
            o.code = Some(u16::from(code));
            o
        }
    }
}

/// `option external-check`: the backend's program run for `srv` at `addr`, judged by its
/// exit status (HAProxy's `PROCOK`, `PROCERR` with the status as its code, `PROCTOUT`).
async fn external(
    process: &Process,
    be: &Backend,
    srv: &Server,
    addr: SocketAddr,
    limit: Duration,
) -> Outcome {
    let Some(command) = be.check.external.command.as_deref() else {
        return Outcome::fail("PROCERR", "External check error", None);
    };
    // A `listen` section's first address; a backend has none.
    let unused = || ("NOT_USED".to_string(), "NOT_USED".to_string());
    let proxy = process
        .config
        .frontends
        .iter()
        .find(|f| f.order == be.order)
        .and_then(|f| f.listen.binds.first())
        .map_or_else(unused, |b| match &b.spec {
            BindSpec::Addr(a) | BindSpec::Quic(a) => (a.ip().to_string(), a.port().to_string()),
            BindSpec::Unix(u) => (u.to_string(), "NOT_USED".to_string()),
            BindSpec::Fd(_) => unused(),
        });
    // The server's requests in flight (`HAPROXY_SERVER_CURCONN`).
    let config = &process.config;
    let b = config.backends.iter().position(|x| std::ptr::eq(x, be));
    let s = b.and_then(|b| {
        config.backends[b]
            .servers
            .iter()
            .position(|x| std::ptr::eq(x, srv))
    });
    let curconn = b.zip(s).map_or(0, |(b, s)| {
        process.state.backends[b].servers[s]
            .in_flight
            .load(std::sync::atomic::Ordering::Relaxed)
    });
    let run = external::Run {
        command,
        path: be.check.external.path.as_deref().unwrap_or(""),
        proxy,
        proxy_name: &be.name,
        proxy_id: be.id,
        server_name: &srv.name,
        server_id: srv.id,
        server: addr,
        maxconn: srv.maxconn.unwrap_or(0),
        curconn,
        ssl: srv.tls.is_some(),
        proto: if be.stream.mode == crate::conf::stream::Mode::Tcp {
            "tcp"
        } else if srv.h2 {
            "h2"
        } else {
            "h1"
        },
    };
    match external::run(&run, limit).await {
        external::Ended::Exited(0) => {
            let mut o = Outcome::pass("PROCOK", "External check passed");
            o.code = Some(0);
            o
        }
        external::Ended::Exited(code) => {
            let mut o = Outcome::fail("PROCERR", "External check error", None);
            o.code = u16::try_from(code).ok();
            o
        }
        external::Ended::TimedOut => {
            // (HAProxy reports the code it had then: none yet, 0.)
            let mut o = Outcome::fail("PROCTOUT", "External check timeout", None);
            o.code = Some(0);
            o
        }
        external::Ended::NotStarted => Outcome::fail("PROCERR", "External check error", None),
    }
}

/// `option spop-check`: a HAPROXY-HELLO asking for a health check, judged on the agent's
/// hello; frames are at most a buffer less the length prefix, as HAProxy's.
async fn spop(conn: &mut Conn, bufsize: usize, limit: Duration) -> Outcome {
    let max_frame = u32::try_from(bufsize.saturating_sub(4)).unwrap_or(u32::MAX);
    let exchange = async {
        conn.write_all(&spop::health_hello(max_frame)).await?;
        let whole = |b: &[u8]| spop::frame_len(b).is_some_and(|n| b.len() >= n);
        read_until(conn, whole).await
    };
    match tokio::time::timeout(limit, exchange).await {
        Err(_) => Outcome::fail("L7TOUT", "Layer7 timeout", None),
        // HAProxy's probe is a rule set whose second step (after the connect) reads.
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Outcome::fail(
            "L7RSP",
            "Layer7 invalid response",
            Some("TCPCHK got an empty response at step 2".into()),
        ),
        Ok(Err(e)) => Outcome::invalid(&e),
        Ok(Ok(answer)) => {
            let end = spop::frame_len(&answer).map_or(answer.len(), |n| n.min(answer.len()));
            match spop::judge(answer.get(4..end).unwrap_or_default(), max_frame) {
                Ok(()) => {
                    let mut o = Outcome::pass("L7OK", "Layer7 check passed");
                    o.code = Some(0);
                    o.info = Some("SPOA server is ok".into());
                    o
                }
                Err(refusal) => Outcome::fail(
                    "L7RSP",
                    "Layer7 invalid response",
                    Some(refusal.reason().into()),
                ),
            }
        }
    }
}

/// What an LDAP bind answer says so far.
#[derive(Debug, PartialEq, Eq)]
enum LdapAnswer {
    /// More bytes are needed.
    Short,
    NotLdap,
    /// Its result code.
    Code(u8),
}

/// Reads a bind response as HAProxy does: a SEQUENCE of at least 14 bytes (its length in
/// short form, or long form on 2 or 4 bytes), message id 1, a bindResponse, an ENUMERATED
/// result code.
fn ldap_bind_result(b: &[u8]) -> LdapAnswer {
    if b.len() < 14 {
        return LdapAnswer::Short;
    }
    if b[0] != 0x30 {
        return LdapAnswer::NotLdap;
    }
    let (len, nbytes) = match b[1] {
        l if l & 0x80 == 0 => (usize::from(l), 0),
        0x82 => (usize::from(u16::from_be_bytes([b[2], b[3]])), 2),
        0x84 => (u32::from_be_bytes([b[2], b[3], b[4], b[5]]) as usize, 4),
        _ => return LdapAnswer::NotLdap,
    };
    if b.len() < 2 + nbytes + len {
        return LdapAnswer::Short;
    }
    let mut at = 2 + nbytes;
    if b.get(at..at + 4) != Some(&[0x02, 0x01, 0x01, 0x61][..]) {
        return LdapAnswer::NotLdap;
    }
    at += 4;
    // The bindResponse's own length.
    at += 1 + b.get(at).map_or(0, |&l| {
        if l & 0x80 != 0 {
            usize::from(l & 0x7f)
        } else {
            0
        }
    });
    if b.get(at..at + 2) != Some(&[0x0a, 0x01][..]) {
        return LdapAnswer::NotLdap;
    }
    b.get(at + 2)
        .map_or(LdapAnswer::NotLdap, |&c| LdapAnswer::Code(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ssl_hello_is_haproxys() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(0x0102_0304);
        let h = ssl_hello(t);
        // Record, handshake and hello headers with their lengths, as HAProxy's template.
        assert_eq!(h[..11], [0x16, 3, 0, 0, 0x79, 1, 0, 0, 0x75, 3, 0]);
        assert_eq!(h.len(), 5 + 0x79);
        assert_eq!(h[11..15], [1, 2, 3, 4]);
        assert_eq!(&h[15..43], b"HAPROXYSSLCHK\nHAPROXYSSLCHK\n");
        assert_eq!(h[43..46], [0, 0, 0x4e]);
        assert_eq!(h[h.len() - 4..], [0, 0x3a, 1, 0]);
    }

    #[test]
    fn status_lines() {
        let (code, phrase, body) =
            parse_status(b"HTTP/1.1 503 Service Unavailable\r\nx: y\r\n\r\nbusy").unwrap();
        assert_eq!(
            (code, phrase, body),
            (503, "Service Unavailable", &b"busy"[..])
        );
        assert_eq!(parse_status(b"HTTP/1.0 200\r\n\r\n").unwrap().0, 200);
        assert!(parse_status(b"SSH-2.0-OpenSSH\r\n").is_none());
    }

    #[test]
    fn protocol_messages() {
        let pg = pgsql_rules("app");
        let TcpRule::Send(msg, _) = &pg[1] else {
            panic!()
        };
        assert_eq!(&msg[..4], &(msg.len() as u32).to_be_bytes());
        assert_eq!(&msg[4..8], &[0, 3, 0, 0]);
        assert!(msg.ends_with(b"user\0app\0\0"));
        assert_eq!(
            ldap_bind_result(&[
                0x30, 0x0c, 0x02, 0x01, 0x01, 0x61, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00
            ]),
            LdapAnswer::Code(0)
        );
        assert_eq!(
            ldap_bind_result(&[
                0x30, 0x0c, 0x02, 0x01, 0x01, 0x61, 0x07, 0x0a, 0x01, 0x31, 0x04, 0x00, 0x04, 0x00
            ]),
            LdapAnswer::Code(0x31)
        );
        assert_eq!(ldap_bind_result(b"HTTP/1.1 200 OK"), LdapAnswer::NotLdap);
        assert_eq!(ldap_bind_result(&[0x30, 0x0c]), LdapAnswer::Short);
    }
}
