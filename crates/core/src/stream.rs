//! One client connection's HTTP/1.1 life: read a request head, apply rules, route it,
//! forward it and its body to a server over a pooled or new connection, relay the response,
//! then keep the connection alive for the next (possibly pipelined) request or close it.
//!
//! Invariants:
//! - Memory per connection is two buffers of `tune.bufsize` (client side, server side) plus
//!   small state; bodies are streamed through them, never accumulated.
//! - Nothing of a request reaches a server before its head has been fully validated.
//! - A server connection goes back to the pool only after a complete, well-framed response
//!   with nothing trailing it, and after the whole request body was sent.
//! - Requests on one client connection are handled one at a time, so pipelined requests are
//!   answered in order and a server connection never carries two requests at once.
//!
//! The states are documented in `docs/internals/stream-lifecycle.md`.

use std::future::Future;
use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{no_args, units, Keyword, KwError, Scope};
use sluice_http::{
    error_page, parse_request, parse_response, push_chunk_header, reason, ChunkedDecoder,
    ChunkedOut, Framing, HeadError, RequestHead, ResponseHead, Version,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::backend::Pooled;
use crate::backend::{one_arg, time_arg, Backend, ReuseMode, Server};
use crate::balance::PickKey;
use crate::buffer::{Buf, BufPool};
use crate::compression::{
    self, Algo, CompConf, CompCounters, Compressor, GlobalComp, RATE_IN, RATE_OUT,
};
use crate::config::{Frontend, GlobalConf, ProxyConf};
use crate::fds::Counted;
use crate::listener::Slot;
use crate::pool::{self, Got, Want};
use crate::rules::{holds, Action, HttpRule, ReqView};
use crate::threads::Worker;
use std::time::Instant;

/// How connections are kept alive (`option http-server-close`, `option httpclose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum CloseMode {
    #[default]
    KeepAlive,
    /// Client side kept alive, server connection closed after each response.
    ServerClose,
    /// Both sides closed after each response.
    Close,
}

/// `option forwardfor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardFor {
    pub header: String,
    /// Clients in this network (address, prefix length) get no header.
    pub except: Option<(IpAddr, u8)>,
    pub if_none: bool,
}

/// `mode`: what a proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Http,
    /// Bytes relayed as they are, both ways (see `tcp`).
    Tcp,
}

/// Per-proxy settings of the stream layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamConf {
    pub mode: Mode,
    pub timeout_client: Option<Duration>,
    pub timeout_http_request: Option<Duration>,
    pub timeout_keep_alive: Option<Duration>,
    pub timeout_client_fin: Option<Duration>,
    pub forwardfor: Option<ForwardFor>,
    pub close_mode: CloseMode,
}

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "tune.bufsize",
    scope: Scope::GLOBAL,
    help: "tune.bufsize SIZE: per-direction buffer size of a connection (default 16384)",
    parse: |g, a| {
        let v = one_arg(a, "a size")?;
        let n = units::parse_size(v).map_err(|e| KwError::bad(1, v, e))?;
        if !(1024..=1 << 26).contains(&n) {
            return Err(KwError::bad(1, v, "expects a size from 1024 to 64m"));
        }
        g.bufsize = n as usize;
        Ok(())
    },
}];

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "mode",
        scope: Scope::PROXY,
        help: "mode http|tcp: the proxy's protocol",
        parse: |c, a| {
            c.stream.mode = match one_arg(a, "http or tcp")? {
                "http" => Mode::Http,
                "tcp" => Mode::Tcp,
                other => return Err(KwError::bad(1, other, "expects http or tcp")),
            };
            Ok(())
        },
    },
    Keyword {
        name: "timeout client",
        scope: Scope::FE,
        help: "timeout client TIME: maximum inactivity time on the client side",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_client = Some(t)),
    },
    Keyword {
        name: "timeout http-request",
        scope: Scope::FE,
        help: "timeout http-request TIME: maximum time to receive a complete request head",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_http_request = Some(t)),
    },
    Keyword {
        name: "timeout http-keep-alive",
        scope: Scope::FE,
        help: "timeout http-keep-alive TIME: maximum wait for the next request on a kept-alive connection",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_keep_alive = Some(t)),
    },
    Keyword {
        name: "timeout client-fin",
        scope: Scope::FE,
        help: "timeout client-fin TIME: inactivity limit on the client side once the server side has closed",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_client_fin = Some(t)),
    },
    Keyword {
        name: "option forwardfor",
        scope: Scope::PROXY,
        help: "option forwardfor [except NET] [header NAME] [if-none]: add the client address",
        parse: |c, a| parse_forwardfor(a).map(|f| c.stream.forwardfor = Some(f)),
    },
    Keyword {
        name: "no option forwardfor",
        scope: Scope::PROXY,
        help: "no option forwardfor: cancel an inherited option forwardfor",
        parse: |c, a| no_args(a).map(|_| c.stream.forwardfor = None),
    },
];

/// Connection-closing options (`NAME` and `no NAME`).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option http-server-close", Scope::PROXY, "close the server connection after each response",
        |c: &mut ProxyConf, on| c.stream.close_mode = if on { CloseMode::ServerClose } else { CloseMode::KeepAlive };
    "option httpclose", Scope::PROXY, "close both connections after each response",
        |c: &mut ProxyConf, on| c.stream.close_mode = if on { CloseMode::Close } else { CloseMode::KeepAlive };
];

fn parse_forwardfor(args: &[String]) -> Result<ForwardFor, KwError> {
    let mut f = ForwardFor {
        header: "x-forwarded-for".into(),
        except: None,
        if_none: false,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "if-none" => f.if_none = true,
            kw @ ("except" | "header") => {
                let v = args
                    .get(i + 1)
                    .ok_or(KwError::Missing("a value after except/header"))?;
                if kw == "except" {
                    f.except = Some(parse_net(v).map_err(|e| KwError::bad(i + 2, v, e))?);
                } else {
                    f.header = v.to_ascii_lowercase();
                }
                i += 1;
            }
            other => {
                return Err(KwError::bad(
                    i + 1,
                    other,
                    "expects except, header or if-none",
                ))
            }
        }
        i += 1;
    }
    Ok(f)
}

fn parse_net(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| "expects an address or network (a.b.c.d/len)".to_string())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or("invalid prefix length")?,
        None => max,
    };
    Ok((ip, len))
}

fn in_net(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    let mask = |bits: u32, len: u8| {
        if len == 0 {
            0
        } else {
            u128::MAX << (bits - u32::from(len))
        }
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = mask(32, len) as u32;
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = mask(128, len);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

/// Why a stream step stopped.
#[derive(Debug)]
enum Fail {
    /// The client went away or must be dropped without a response.
    ClientGone,
    /// Answer this error status, then close.
    Status(u16),
}

async fn within<F: Future>(limit: Option<Duration>, f: F) -> Result<F::Output, ()> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await.map_err(|_| ()),
        None => Ok(f.await),
    }
}

/// A server connection attached to the current request.
struct ServerConn {
    stream: TcpStream,
    fd: Counted,
    backend: usize,
    server: usize,
    /// Requests already completed on this connection.
    served: u32,
    /// It came from a pool (or is the session's private one) rather than a fresh connect.
    reused: bool,
    used: Used,
}

/// Keeps the server's count of used connections right however a connection ends: armed while
/// the connection is in use, it gives the count back on drop unless the connection went back
/// to the pool (which does that itself).
struct Used {
    w: Rc<Worker>,
    backend: usize,
    server: usize,
    armed: bool,
}

impl Drop for Used {
    fn drop(&mut self) {
        if self.armed {
            self.w.config().backends[self.backend].servers[self.server]
                .idle
                .close_used();
        }
    }
}

/// The routing decision for a request, computed from its head.
enum Route {
    /// Answer locally with these bytes; `close` when the connection cannot continue.
    Respond {
        bytes: Vec<u8>,
        close: bool,
    },
    /// Answer with the error page for this status (the backend's pages win when known).
    Error(u16, Option<usize>),
    Forward {
        backend: usize,
        server: usize,
    },
}

/// Facts about the current request kept after its head leaves the buffer.
struct ReqFacts {
    framing: Framing,
    version: Version,
    is_head: bool,
    idempotent: bool,
    wants_close: bool,
    expect_continue: bool,
    /// The algorithm to compress the response with, if the request allows it.
    comp: Option<Algo>,
    /// The protocols the client asks to switch to (`Upgrade`, h2c removed), if any.
    upgrade: Option<Vec<u8>>,
}

/// Header edits accumulated by `set-header` / `add-header` / `del-header` rules.
#[derive(Default)]
struct Edits {
    del: Vec<String>,
    add: Vec<(String, String)>,
}

impl Edits {
    fn apply(&mut self, action: &Action) {
        match action {
            Action::SetHeader(n, v) => {
                self.remove(n);
                self.add.push((n.clone(), v.clone()));
            }
            Action::AddHeader(n, v) => self.add.push((n.clone(), v.clone())),
            Action::DelHeader(n) => self.remove(n),
            _ => {}
        }
    }

    fn remove(&mut self, name: &str) {
        self.add.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.del.push(name.to_ascii_lowercase());
    }

    fn deletes(&self, name: &[u8]) -> bool {
        self.del
            .iter()
            .any(|d| name.eq_ignore_ascii_case(d.as_bytes()))
    }
}

/// Serves one client connection until it closes.
pub(crate) async fn serve(
    w: Rc<Worker>,
    client: TcpStream,
    peer: SocketAddr,
    fe: Arc<Frontend>,
    slot: Slot,
) {
    let ctx = w.ctx();
    ctx.active.fetch_add(1, Ordering::Relaxed);
    fe.cur_conns.fetch_add(1, Ordering::Relaxed);
    let _fd = Counted::new();
    let fe_ref = fe.clone();
    if fe.stream.mode == Mode::Tcp {
        crate::tcp::serve(&w, client, peer, &fe).await;
        fe.cur_conns.fetch_sub(1, Ordering::Relaxed);
        drop(slot);
        ctx.active.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let mut s = Session {
        w: w.clone(),
        fe,
        client,
        peer,
        cbuf: Buf::default(),
        sbuf: Buf::default(),
        out: Vec::with_capacity(1024),
        private: None,
        requests: 0,
        backend: None,
        lg: ReqLog::default(),
    };
    s.run().await;
    // Buffers go back to the worker's pool; whatever they held is discarded with the
    // connection.
    s.cbuf.clear(&w.bufs);
    s.sbuf.clear(&w.bufs);
    drop(slot);
    fe_ref.cur_conns.fetch_sub(1, Ordering::Relaxed);
    ctx.active.fetch_sub(1, Ordering::Relaxed);
}

struct Session {
    w: Rc<Worker>,
    fe: Arc<Frontend>,
    client: TcpStream,
    peer: SocketAddr,
    cbuf: Buf,
    sbuf: Buf,
    /// Scratch for outgoing bytes.
    out: Vec<u8>,
    /// With `http-reuse never`, the server connection this client connection owns.
    private: Option<ServerConn>,
    requests: u32,
    /// The backend of the current request, once routed.
    backend: Option<usize>,
    /// What the access log will say about the current request.
    lg: ReqLog,
}

/// Facts about the current request for its access-log line (milliseconds, -1 when a step
/// did not happen).
struct ReqLog {
    started: Option<Instant>,
    date: Option<std::time::SystemTime>,
    head_done: Option<Instant>,
    got_bytes: bool,
    t_queue: i64,
    t_connect: i64,
    t_response: i64,
    status: i64,
    bytes: u64,
    retries: u32,
    server: Option<usize>,
    term: Option<[u8; 2]>,
    line: Option<(String, String, &'static str)>,
}

impl Default for ReqLog {
    fn default() -> Self {
        ReqLog {
            started: None,
            date: None,
            head_done: None,
            got_bytes: false,
            t_queue: -1,
            t_connect: -1,
            t_response: -1,
            status: -1,
            bytes: 0,
            retries: 0,
            server: None,
            term: None,
            line: None,
        }
    }
}

fn ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

impl Session {
    async fn run(&mut self) {
        loop {
            self.backend = None;
            self.lg = ReqLog::default();
            let head = match self.read_head().await {
                Ok(h) => h,
                Err(Fail::ClientGone) => {
                    if self.lg.got_bytes {
                        self.emit_log(-1, *b"CR");
                    }
                    return;
                }
                Err(Fail::Status(status)) => {
                    self.emit_log(
                        i64::from(status),
                        if status == 408 { *b"cR" } else { *b"PR" },
                    );
                    return self.fail(status).await;
                }
            };
            self.w
                .ctx()
                .counters
                .requests
                .fetch_add(1, Ordering::Relaxed);
            if self.logging() {
                let b = self.cbuf.bytes();
                self.lg.line = Some((
                    String::from_utf8_lossy(head.method(b)).into_owned(),
                    String::from_utf8_lossy(&b[head.target.clone()]).into_owned(),
                    if head.version == Version::Http10 {
                        "HTTP/1.0"
                    } else {
                        "HTTP/1.1"
                    },
                ));
            }
            let keep = match self.handle(head).await {
                Ok(keep) => {
                    self.emit_log(self.lg.status, self.lg.term.unwrap_or(*b"--"));
                    keep
                }
                Err(Fail::ClientGone) => {
                    let term =
                        self.lg
                            .term
                            .unwrap_or(if self.lg.status >= 0 { *b"CD" } else { *b"CH" });
                    self.emit_log(self.lg.status, term);
                    return;
                }
                Err(Fail::Status(status)) => {
                    self.lg.bytes = self.error_bytes(status, self.backend).len() as u64;
                    let term = self.lg.term.unwrap_or(match status {
                        503 => *b"SC",
                        504 => *b"sH",
                        502 => *b"SH",
                        408 => *b"cD",
                        _ => *b"PR",
                    });
                    self.emit_log(i64::from(status), term);
                    return self.fail(status).await;
                }
            };
            self.requests += 1;
            if !keep {
                return self.close_gracefully().await;
            }
        }
    }

    /// Waits for a complete request head, enforcing `timeout http-request` (total time from
    /// the first wait for this request) and `timeout http-keep-alive` between requests.
    async fn read_head(&mut self) -> Result<RequestHead, Fail> {
        let st = &self.fe.stream;
        let started = tokio::time::Instant::now();
        self.lg.started = Some(Instant::now());
        self.lg.date = Some(std::time::SystemTime::now());
        loop {
            if !self.cbuf.is_empty() {
                match parse_request(self.cbuf.bytes()) {
                    Ok(Some(h)) => {
                        self.lg.head_done = Some(Instant::now());
                        return Ok(h);
                    }
                    Ok(None) => {}
                    Err(HeadError { status, .. }) => return Err(Fail::Status(status)),
                }
                if self.cbuf.is_full() {
                    let line_done = memchr::memchr(b'\n', self.cbuf.bytes()).is_some();
                    return Err(Fail::Status(if line_done { 431 } else { 414 }));
                }
            }
            let idle_wait = self.cbuf.is_empty() && self.requests > 0;
            let limit = if idle_wait {
                st.timeout_keep_alive
                    .or(st.timeout_http_request)
                    .or(st.timeout_client)
            } else {
                match st.timeout_http_request {
                    Some(t) => Some(t.saturating_sub(started.elapsed())),
                    None => st.timeout_client,
                }
            };
            // A connection with nothing of a request buffered is idle: a soft stop closes it.
            // The notification is registered before the flag is read, so none is missed.
            let w = self.w.clone();
            let stop = w.stop.notified();
            tokio::pin!(stop);
            stop.as_mut().enable();
            let idle = self.cbuf.is_empty();
            if idle && w.stopping() {
                return Err(Fail::ClientGone);
            }
            let read = tokio::select! {
                r = within(limit, self.cbuf.fill(&mut self.client, &w.bufs)) => r,
                _ = &mut stop, if idle => return Err(Fail::ClientGone),
            };
            if matches!(read, Ok(Ok(n)) if n > 0) {
                self.lg.got_bytes = true;
            }
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => return Err(Fail::ClientGone),
                Ok(Ok(_)) => {}
                Err(()) if idle_wait || self.cbuf.is_empty() && self.requests > 0 => {
                    return Err(Fail::ClientGone)
                }
                Err(()) => return Err(Fail::Status(408)),
            }
        }
    }

    /// Sends an error page and closes.
    fn logging(&self) -> bool {
        self.fe.loggers.get().is_some_and(|l| !l.is_empty())
    }

    /// Sends the access-log line of the current request.
    fn emit_log(&self, status: i64, term: [u8; 2]) {
        let Some(loggers) = self.fe.loggers.get().filter(|l| !l.is_empty()) else {
            return;
        };
        let config = self.w.config();
        let lg = &self.lg;
        let now = Instant::now();
        let be = self.backend.map(|b| &config.backends[b]);
        let srv = be.zip(lg.server).map(|(be, s)| &be.servers[s]);
        let (method, uri, version) = lg
            .line
            .clone()
            .unwrap_or_else(|| ("<BADREQ>".into(), String::new(), ""));
        let rec = crate::log::Record {
            client: self.peer,
            date: lg.date.unwrap_or_else(std::time::SystemTime::now),
            frontend: &self.fe.name,
            backend: be.map_or(&self.fe.name, |b| &b.name),
            server: srv.map_or("<NOSRV>", |s| &s.name),
            t_request: lg.started.zip(lg.head_done).map_or(-1, |(a, b)| ms(b - a)),
            t_queue: lg.t_queue,
            t_connect: lg.t_connect,
            t_response: lg.t_response,
            t_active: lg.started.map_or(-1, |a| ms(now - a)),
            status,
            bytes: lg.bytes,
            term,
            act_conn: self.w.active_total(),
            fe_conn: self.fe.cur_conns.load(Ordering::Relaxed),
            // The request is over; HAProxy's counts include it.
            be_conn: be.map_or(0, |b| {
                b.servers
                    .iter()
                    .map(|s| s.cur_conns.load(Ordering::Relaxed))
                    .sum()
            }) + usize::from(srv.is_some()),
            srv_conn: srv.map_or(0, |s| s.cur_conns.load(Ordering::Relaxed) + 1),
            retries: lg.retries,
            srv_queue: srv.map_or(0, |s| s.queued.load(Ordering::Relaxed)),
            be_queue: 0,
            method,
            uri,
            version: version.into(),
        };
        // A TCP frontend logs from `tcp`; here the default is the HTTP line.
        let format = self
            .fe
            .log
            .format
            .as_ref()
            .unwrap_or(&crate::log::Format::Http);
        crate::log::emit(loggers, format, &rec);
    }

    /// The error response for `status`: a backend's `errorfile`/`http-error` page, else the
    /// frontend's, else the built-in one.
    fn error_bytes(&self, status: u16, backend: Option<usize>) -> Vec<u8> {
        let config = self.w.config();
        backend
            .and_then(|b| config.backends[b].errors.get(status))
            .or_else(|| self.fe.errors.get(status))
            .map_or_else(|| error_page(status), <[u8]>::to_vec)
    }

    async fn fail(&mut self, status: u16) {
        let page = self.error_bytes(status, self.backend);
        let _ = within(Some(Duration::from_secs(5)), self.client.write_all(&page)).await;
        self.close_gracefully().await;
    }

    /// Half-closes and drains briefly, so that a response is not destroyed by a reset when
    /// the client still had unread bytes in flight.
    async fn close_gracefully(&mut self) {
        let _ = self.client.shutdown().await;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 256 * 1024 {
            match within(Some(Duration::from_secs(1)), self.client.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
    }

    /// Handles one request whose head is at the start of the client buffer. Returns whether
    /// the client connection stays open.
    async fn handle(&mut self, head: RequestHead) -> Result<bool, Fail> {
        let facts = {
            let buf = self.cbuf.bytes();
            ReqFacts {
                framing: head.framing,
                version: head.version,
                is_head: head.is_head(buf),
                idempotent: head.is_idempotent(buf),
                wants_close: head.wants_close,
                expect_continue: head
                    .header(buf, "expect")
                    .is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue")),
                comp: None,
                upgrade: upgrade_request(&head, buf),
            }
        };
        let (route, mut edits) = self.route(&head);
        match route {
            Route::Error(status, backend) => {
                self.cbuf.consume(head.len);
                self.lg.status = i64::from(status);
                self.lg.term = Some(if status == 503 { *b"SC" } else { *b"PR" });
                let bytes = self.error_bytes(status, backend);
                self.lg.bytes = bytes.len() as u64;
                self.write_client(&with_close(bytes)).await?;
                Ok(false)
            }
            Route::Respond { bytes, close } => {
                self.cbuf.consume(head.len);
                self.lg.status = std::str::from_utf8(bytes.get(9..12).unwrap_or_default())
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(-1);
                self.lg.term = Some(*b"LR");
                self.lg.bytes = bytes.len() as u64;
                let close = close || facts.wants_close || facts.framing != Framing::None;
                let bytes = if close { with_close(bytes) } else { bytes };
                self.write_client(&bytes).await?;
                Ok(!close)
            }
            Route::Forward { backend, server } => {
                self.backend = Some(backend);
                // An Rc clone (thread-local) rather than an Arc one: no shared cache line
                // is written per request.
                let w = self.w.clone();
                let be = &w.config().backends[backend];
                let conf = comp_conf(&self.fe, be);
                let facts = ReqFacts {
                    comp: compression::for_request(conf, &head, self.cbuf.bytes()),
                    ..facts
                };
                if conf.offload {
                    edits.remove("accept-encoding");
                }
                self.out.clear();
                let server_close = self.server_close(be);
                build_request_head(
                    &mut self.out,
                    self.cbuf.bytes(),
                    &head,
                    &edits,
                    forwardfor(&self.fe, be, self.peer.ip()),
                    server_close,
                    facts.upgrade.as_deref(),
                );
                self.cbuf.consume(head.len);
                self.forward(be, backend, server, &facts).await
            }
        }
    }

    /// Relays bytes both ways after a 101 (see `tunnel`); the server connection is never
    /// reused afterwards.
    async fn tunnel(
        &mut self,
        mut conn: ServerConn,
        idle: Option<Duration>,
        fin: Option<Duration>,
    ) {
        let w = self.w.clone();
        let limits = crate::tunnel::Limits {
            idle,
            a_fin: self.fe.stream.timeout_client_fin,
            b_fin: fin,
        };
        crate::tunnel::relay(
            &mut self.client,
            &mut conn.stream,
            &mut self.cbuf,
            &mut self.sbuf,
            &w.bufs,
            limits,
        )
        .await;
    }

    /// A usable server other than `not`, from the balancer.
    fn pick_other(&self, be: &Backend, not: usize) -> Option<usize> {
        let key = PickKey {
            client: self.peer.ip(),
            path: b"",
            header: None,
        };
        (0..be.servers.len() * 2)
            .filter_map(|_| be.balancer.pick(&be.servers, &key))
            .find(|&s| s != not)
    }

    fn server_close(&self, be: &Backend) -> bool {
        self.fe.stream.close_mode.max(be.stream.close_mode) >= CloseMode::ServerClose
    }

    /// Applies frontend rules, routing, then backend rules.
    fn route(&self, head: &RequestHead) -> (Route, Edits) {
        let config = self.w.config();
        let req = ReqView {
            buf: self.cbuf.bytes(),
            head,
        };
        let mut edits = Edits::default();
        if let Some(r) = apply_rules(&self.fe.rules.http_request, &req, &mut edits, None) {
            return (r, edits);
        }
        let rules = &self.fe.rules;
        let backend = rules
            .switching
            .iter()
            .find(|(cond, _)| holds(cond, &req))
            .map(|(_, b)| *b)
            .or(rules.default_backend);
        let Some(backend) = backend else {
            return (Route::Error(404, None), edits);
        };
        let be = &config.backends[backend];
        if let Some(r) = apply_rules(&be.rules.http_request, &req, &mut edits, Some(backend)) {
            return (r, edits);
        }
        let header = match &be.balancer.algo {
            crate::balance::Algo::Hdr(name) => head.header(req.buf, name),
            _ => None,
        };
        let key = PickKey {
            client: self.peer.ip(),
            path: &req.buf[head.path.clone()],
            header,
        };
        // A private connection (http-reuse never) keeps its server while it is usable.
        let server = match &self.private {
            Some(p) if p.backend == backend && be.servers[p.server].usable() => Some(p.server),
            _ => be.balancer.pick(&be.servers, &key),
        };
        match server {
            Some(server) => (Route::Forward { backend, server }, edits),
            None => (Route::Error(503, Some(backend)), edits),
        }
    }

    async fn write_client(&mut self, bytes: &[u8]) -> Result<(), Fail> {
        match within(self.fe.stream.timeout_client, self.client.write_all(bytes)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Fail::ClientGone),
        }
    }

    /// Gets a connection to the server: the private one, a pooled one, or a new one.
    async fn connect(
        &mut self,
        be: &Backend,
        backend: usize,
        server: usize,
        allow_reuse: bool,
    ) -> Result<ServerConn, Fail> {
        let srv: &Server = &be.servers[server];
        let pressure = self.w.config().global.pool.pressure();
        let used = |w: &Rc<Worker>| Used {
            w: w.clone(),
            backend,
            server,
            armed: true,
        };
        if allow_reuse {
            if let Some(p) = self.private.take() {
                if p.backend == backend && p.server == server {
                    return Ok(ServerConn { reused: true, ..p });
                }
            }
            let want = Want::for_request(be.reuse, self.requests == 0);
            let mut dead = Vec::new();
            let got = srv
                .idle
                .get(self.w.tid, want, &pressure, Instant::now(), &mut dead);
            drop(dead);
            let (idle, stolen) = match got {
                Got::Local(c) => (Some(c), false),
                Got::Stolen(c, _) => (Some(c), true),
                Got::None => (None, false),
            };
            if let Some(c) = idle {
                let stream = if stolen {
                    self.w
                        .ctx()
                        .counters
                        .fd_takeover
                        .fetch_add(1, Ordering::Relaxed);
                    // Move the socket from the sibling's event loop into ours.
                    pool::adopt(c.conn.stream)
                } else {
                    Ok(c.conn.stream)
                };
                match stream {
                    Ok(stream) => {
                        Server::add(&srv.counters.reuse);
                        return Ok(ServerConn {
                            stream,
                            fd: c.conn.fd,
                            backend,
                            server,
                            served: c.served,
                            reused: true,
                            used: used(&self.w),
                        });
                    }
                    Err(_) => srv.idle.close_used(),
                }
            }
        }
        if pressure.high() {
            // Descriptors are scarce: an idle connection makes room for the new one.
            drop(srv.idle.evict_one(self.w.tid));
        }
        match within(be.timeout_connect, TcpStream::connect(srv.addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Server::add(&srv.counters.connect);
                srv.idle.use_one();
                Ok(ServerConn {
                    stream,
                    fd: Counted::new(),
                    backend,
                    server,
                    served: 0,
                    reused: false,
                    used: used(&self.w),
                })
            }
            _ => {
                Server::add(&srv.counters.connect_errors);
                Err(Fail::Status(503))
            }
        }
    }

    /// Sends the request (head in `self.out`, body from the client) and relays the response.
    async fn forward(
        &mut self,
        be: &Backend,
        backend: usize,
        server: usize,
        facts: &ReqFacts,
    ) -> Result<bool, Fail> {
        let mut server = server;
        // Held for its drop: the in-flight count follows the request to its server.
        let mut _in_flight = InFlight::new(&be.servers[server]);
        // A server at its maxconn makes the request wait its turn (or refuses it).
        self.lg.server = Some(server);
        let queued_at = Instant::now();
        let queued = if be.abortonclose {
            tokio::select! {
                q = queue_for(&be.servers[server], be.timeout_queue) => q,
                _ = client_gone(&self.client) => {
                    self.lg.term = Some(*b"CQ");
                    Err(Fail::ClientGone)
                }
            }
        } else {
            queue_for(&be.servers[server], be.timeout_queue).await
        };
        self.lg.t_queue = ms(queued_at.elapsed());
        if queued.is_err() {
            self.lg.term = Some(*b"sQ");
        }
        let mut _slot = queued?;
        Server::add(&be.servers[server].counters.requests);
        self.sbuf.clear(&self.w.bufs);
        if facts.expect_continue
            && facts.version == Version::Http11
            && facts.framing != Framing::None
        {
            // The proxy streams the body itself, so it invites the client to send it now
            // rather than relaying the server's interim answer (which could deadlock).
            self.write_client(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        let head_len = self.out.len();
        let connect_at = Instant::now();
        let mut conn = match self.connect(be, backend, server, true).await {
            Ok(c) => c,
            Err(Fail::Status(503)) => {
                // Connection failures only: nothing reached the server, so retrying is safe.
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    if attempt > be.retries {
                        return Err(Fail::Status(503));
                    }
                    Server::add(&be.servers[server].counters.retries);
                    self.lg.retries += 1;
                    if be.redispatch && attempt == be.retries {
                        // The last retry goes to another server (HAProxy's `option redispatch`).
                        if let Some(other) = self.pick_other(be, server) {
                            Server::add(&be.servers[server].counters.redispatches);
                            server = other;
                            self.lg.server = Some(server);
                            _in_flight = InFlight::new(&be.servers[server]);
                            _slot = queue_for(&be.servers[server], be.timeout_queue).await?;
                        }
                    }
                    if let Ok(c) = self.connect(be, backend, server, false).await {
                        break c;
                    }
                }
            }
            Err(e) => return Err(e),
        };
        self.lg.t_connect = if conn.reused {
            0
        } else {
            ms(connect_at.elapsed())
        };
        let sent_at = Instant::now();
        let srv = &be.servers[server];
        // One retry on a fresh connection when a reused one turns out dead before any
        // response byte, for bodiless idempotent requests (nothing was consumed that cannot
        // be sent again).
        let replayable = facts.idempotent && facts.framing == Framing::None;
        let mut attempt = 0;
        let rsp = loop {
            attempt += 1;
            self.out.truncate(head_len);
            let sent = self.send_request(be, &mut conn, facts).await;
            let result = match sent {
                Ok(()) => self.read_response_head(be, &mut conn, facts).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(rsp) => {
                    self.lg.t_response = ms(sent_at.elapsed());
                    self.lg.status = i64::from(rsp.status);
                    break rsp;
                }
                Err(SendFail::Retryable) if conn.reused && replayable && attempt == 1 => {
                    conn = self.connect(be, backend, server, false).await?;
                }
                Err(SendFail::Retryable) | Err(SendFail::Status(502)) => {
                    Server::add(&srv.counters.response_errors);
                    return Err(Fail::Status(502));
                }
                Err(SendFail::Status(s)) => return Err(Fail::Status(s)),
                Err(SendFail::ClientGone) => return Err(Fail::ClientGone),
            }
        };
        self.relay_response(be, conn, rsp, facts).await
    }

    /// Writes the request head and streams the body to the server.
    async fn send_request(
        &mut self,
        be: &Backend,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<(), SendFail> {
        let tserver = be.timeout_server;
        match facts.framing {
            Framing::None | Framing::UntilClose => {
                return write_server(&mut conn.stream, &self.out, tserver).await;
            }
            Framing::Length(total) => {
                let mut remaining = total;
                loop {
                    let take = (remaining as usize).min(self.cbuf.bytes().len());
                    let more = remaining > take as u64;
                    match within(
                        tserver,
                        write_pair(
                            &mut conn.stream,
                            &self.out,
                            &self.cbuf.bytes()[..take],
                            more,
                        ),
                    )
                    .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return Err(SendFail::Retryable),
                        Err(()) => return Err(SendFail::Status(504)),
                    }
                    self.out.clear();
                    self.cbuf.consume(take);
                    remaining -= take as u64;
                    if remaining == 0 {
                        return Ok(());
                    }
                    self.read_client_body().await?;
                }
            }
            Framing::Chunked => {
                let mut dec = ChunkedDecoder::new();
                loop {
                    let used = dec
                        .decode(self.cbuf.bytes(), ChunkedOut::Chunked, &mut self.out)
                        .map_err(|_| SendFail::Status(400))?;
                    self.cbuf.consume(used);
                    if !self.out.is_empty() {
                        write_server(&mut conn.stream, &self.out, tserver).await?;
                        self.out.clear();
                    }
                    if dec.is_done() {
                        return Ok(());
                    }
                    if self.cbuf.is_full() {
                        return Err(SendFail::Status(400));
                    }
                    self.read_client_body().await?;
                }
            }
        }
    }

    async fn read_client_body(&mut self) -> Result<(), SendFail> {
        match within(
            self.fe.stream.timeout_client,
            self.cbuf.fill(&mut self.client, &self.w.bufs),
        )
        .await
        {
            Ok(Ok(n)) if n > 0 => Ok(()),
            Ok(_) => Err(SendFail::ClientGone),
            Err(()) => Err(SendFail::Status(408)),
        }
    }

    /// Reads the final response head, relaying interim (1xx) responses to the client.
    async fn read_response_head(
        &mut self,
        be: &Backend,
        conn: &mut ServerConn,
        facts: &ReqFacts,
    ) -> Result<ResponseHead, SendFail> {
        let bufs = &self.w.bufs;
        let sbuf = &mut self.sbuf;
        let mut got_any = false;
        loop {
            if !sbuf.is_empty() {
                match parse_response(sbuf.bytes(), facts.is_head) {
                    Ok(Some(rsp)) if (100..200).contains(&rsp.status) => {
                        if rsp.status == 101 {
                            // Only an upgrade the client asked for switches protocols.
                            return if facts.upgrade.is_some() {
                                Ok(rsp)
                            } else {
                                Err(SendFail::Status(502))
                            };
                        }
                        let mut interim = Vec::new();
                        write_response_head(
                            &mut interim,
                            sbuf.bytes(),
                            &rsp,
                            &Edits::default(),
                            None,
                            None,
                        );
                        sbuf.consume(rsp.len);
                        if facts.version == Version::Http11 {
                            match within(
                                self.fe.stream.timeout_client,
                                self.client.write_all(&interim),
                            )
                            .await
                            {
                                Ok(Ok(())) => {}
                                _ => return Err(SendFail::ClientGone),
                            }
                        }
                        continue;
                    }
                    Ok(Some(rsp)) => return Ok(rsp),
                    Ok(None) if sbuf.is_full() => return Err(SendFail::Status(502)),
                    Ok(None) => {}
                    Err(_) => return Err(SendFail::Status(502)),
                }
            }
            match within(be.timeout_server, sbuf.fill(&mut conn.stream, bufs)).await {
                Ok(Ok(n)) if n > 0 => got_any = true,
                Ok(_) if !got_any => return Err(SendFail::Retryable),
                Ok(_) => return Err(SendFail::Status(502)),
                Err(()) => return Err(SendFail::Status(504)),
            }
        }
    }

    /// Sends the response head and body to the client (compressed when the request, the
    /// response and the load allow it), then releases the server connection.
    async fn relay_response(
        &mut self,
        be: &Backend,
        mut conn: ServerConn,
        rsp: ResponseHead,
        facts: &ReqFacts,
    ) -> Result<bool, Fail> {
        let w = self.w.clone();
        // Backend rules run before frontend rules, as in HAProxy. (Conditions on
        // http-response rules are refused at configuration time.)
        let mut rsp_edits = Edits::default();
        for rule in be
            .rules
            .http_response
            .iter()
            .chain(self.fe.rules.http_response.iter())
        {
            rsp_edits.apply(&rule.action);
        }
        if rsp.status == 101 {
            self.out.clear();
            write_response_head(
                &mut self.out,
                self.sbuf.bytes(),
                &rsp,
                &rsp_edits,
                None,
                None,
            );
            self.out.truncate(self.out.len() - 2);
            let proto = rsp
                .header(self.sbuf.bytes(), "upgrade")
                .unwrap_or(b"websocket")
                .to_vec();
            self.out.extend_from_slice(b"connection: upgrade\r\n");
            push_header(&mut self.out, b"upgrade", &proto);
            self.out.extend_from_slice(b"\r\n");
            self.sbuf.consume(rsp.len);
            let head = std::mem::take(&mut self.out);
            let sent = self.write_client(&head).await;
            self.out = head;
            sent?;
            let idle = be
                .timeout_tunnel
                .or_else(|| self.fe.stream.timeout_client.max(be.timeout_server));
            self.tunnel(conn, idle, be.timeout_server_fin).await;
            return Ok(false);
        }
        let conf = comp_conf(&self.fe, be);
        let limits = &w.config().global.compression;
        let mut compressor = facts
            .comp
            .filter(|_| compression::response_allows(conf, &rsp, self.sbuf.bytes()))
            .filter(|_| !compression::over_limit(limits, RATE_IN.rate(), w.busy_pct()))
            .map(|algo| Compressor::new(algo, limits.max_level));
        let client_11 = facts.version == Version::Http11;
        let (client_framing, mode) = match rsp.framing {
            _ if compressor.is_some() => (Framing::Chunked, ChunkedOut::Raw),
            Framing::Chunked if client_11 => (Framing::Chunked, ChunkedOut::Chunked),
            Framing::Chunked => (Framing::UntilClose, ChunkedOut::Raw),
            Framing::UntilClose if client_11 => (Framing::Chunked, ChunkedOut::Chunked),
            other => (other, ChunkedOut::Raw),
        };
        let close_mode = self.fe.stream.close_mode.max(be.stream.close_mode);
        let keep_client = !facts.wants_close
            && close_mode != CloseMode::Close
            && client_framing != Framing::UntilClose
            && !w.stopping();
        self.out.clear();
        let expires = keep_alive_deadline(&rsp, self.sbuf.bytes());
        let length_hint = (facts.is_head || rsp.status == 304)
            .then(|| rsp.header(self.sbuf.bytes(), "content-length"))
            .flatten()
            .map(<[u8]>::to_vec);
        write_response_head(
            &mut self.out,
            self.sbuf.bytes(),
            &rsp,
            &rsp_edits,
            Some((client_framing, keep_client, facts.version, length_hint)),
            compressor.as_ref().map(|c| c.algo),
        );
        self.sbuf.consume(rsp.len);
        let mut relay = Relay {
            client: &mut self.client,
            out: &mut self.out,
            sbuf: &mut self.sbuf,
            bufs: &w.bufs,
            server: &mut conn.stream,
            tclient: self.fe.stream.timeout_client,
            tserver: be.timeout_server,
            sent: 0,
        };
        let counters = [&self.fe.comp_counters, &be.comp_counters];
        // `complete`: the server's message ended where its framing said.
        let complete = match compressor.as_mut() {
            Some(c) => {
                for k in counters {
                    k.comp_rsp.fetch_add(1, Ordering::Relaxed);
                }
                relay
                    .compressed(rsp.framing, c, &w, &counters, limits)
                    .await?
            }
            None => {
                let (complete, relayed) = relay.plain(rsp.framing, mode).await?;
                if conf.enabled() {
                    for k in counters {
                        k.comp_byp.fetch_add(relayed, Ordering::Relaxed);
                    }
                }
                complete
            }
        };
        self.lg.bytes = relay.sent;
        let bufs = &w.bufs;
        let sbuf = &mut self.sbuf;
        if !complete {
            // The client got a truncated message: never terminate it as if it were whole.
            Server::add(&be.servers[conn.server].counters.response_errors);
            return Err(Fail::ClientGone);
        }
        // Bytes after the end of the response (or any for an aborted one) poison the
        // connection: it is dropped rather than pooled.
        let clean = sbuf.is_empty();
        sbuf.clear(bufs);
        let reusable =
            clean && !rsp.must_close && close_mode == CloseMode::KeepAlive && !self.w.stopping();
        if reusable {
            conn.served += 1;
            if be.reuse == ReuseMode::Never {
                self.private = Some(conn);
            } else {
                let srv = &be.servers[conn.server];
                let ServerConn {
                    stream,
                    fd,
                    served,
                    mut used,
                    ..
                } = conn;
                // The pool accounts for it from here on (kept or refused).
                used.armed = false;
                let pressure = w.config().global.pool.pressure();
                let kept = srv.idle.release(
                    w.tid,
                    Pooled { stream, fd },
                    served,
                    srv.usable(),
                    false,
                    &pressure,
                    Instant::now(),
                    expires,
                );
                drop(kept);
            }
        }
        Ok(keep_client)
    }
}

/// The pieces a response body relay works with.
struct Relay<'a> {
    client: &'a mut TcpStream,
    out: &'a mut Vec<u8>,
    sbuf: &'a mut Buf,
    bufs: &'a BufPool,
    server: &'a mut TcpStream,
    tclient: Option<Duration>,
    tserver: Option<Duration>,
    /// Bytes written to the client (head included), for the access log.
    sent: u64,
}

impl Relay<'_> {
    /// Relays the body as is (re-framed as `mode` says). Returns whether it was complete and
    /// how many body bytes went through. `self.out` holds the response head.
    async fn plain(&mut self, framing: Framing, mode: ChunkedOut) -> Result<(bool, u64), Fail> {
        let mut relayed = 0u64;
        let complete = match framing {
            Framing::None => {
                if !write_ok(self.client, self.out, self.tclient).await {
                    return Err(Fail::ClientGone);
                }
                self.sent += self.out.len() as u64;
                true
            }
            Framing::Length(total) => {
                // The head and the body bytes already read leave in one writev; the rest is
                // written straight from the server buffer, never copied.
                let mut remaining = total;
                loop {
                    let take = (remaining as usize).min(self.sbuf.bytes().len());
                    let more = remaining > take as u64;
                    let ok = within(
                        self.tclient,
                        write_pair(self.client, self.out, &self.sbuf.bytes()[..take], more),
                    )
                    .await;
                    if !matches!(ok, Ok(Ok(()))) {
                        return Err(Fail::ClientGone);
                    }
                    self.sent += (self.out.len() + take) as u64;
                    self.out.clear();
                    self.sbuf.consume(take);
                    relayed += take as u64;
                    remaining -= take as u64;
                    if remaining == 0 {
                        break true;
                    }
                    if !read_ok(self.server, self.sbuf, self.bufs, self.tserver).await {
                        break false;
                    }
                }
            }
            Framing::Chunked => {
                let mut dec = ChunkedDecoder::new();
                loop {
                    let Ok(used) = dec.decode(self.sbuf.bytes(), mode, self.out) else {
                        break false;
                    };
                    self.sbuf.consume(used);
                    relayed += used as u64;
                    if !self.out.is_empty() {
                        if !write_ok(self.client, self.out, self.tclient).await {
                            return Err(Fail::ClientGone);
                        }
                        self.sent += self.out.len() as u64;
                        self.out.clear();
                    }
                    if dec.is_done() {
                        break true;
                    }
                    if self.sbuf.is_full()
                        || !read_ok(self.server, self.sbuf, self.bufs, self.tserver).await
                    {
                        break false;
                    }
                }
            }
            Framing::UntilClose => loop {
                let data = self.sbuf.bytes();
                if !data.is_empty() {
                    if mode == ChunkedOut::Chunked {
                        push_chunk_header(self.out, data.len());
                        self.out.extend_from_slice(data);
                        self.out.extend_from_slice(b"\r\n");
                    } else {
                        self.out.extend_from_slice(data);
                    }
                    let n = data.len();
                    self.sbuf.consume(n);
                    relayed += n as u64;
                }
                if !self.out.is_empty() {
                    if !write_ok(self.client, self.out, self.tclient).await {
                        return Err(Fail::ClientGone);
                    }
                    self.sent += self.out.len() as u64;
                    self.out.clear();
                }
                match within(self.tserver, self.sbuf.fill(self.server, self.bufs)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => {
                        if mode == ChunkedOut::Chunked
                            && !write_ok(self.client, b"0\r\n\r\n", self.tclient).await
                        {
                            return Err(Fail::ClientGone);
                        }
                        break true;
                    }
                    Err(()) => break false,
                }
            },
        };
        Ok((complete, relayed))
    }

    /// Relays the body through `comp`, one flushed HTTP chunk per read, stepping the level
    /// down or up after each chunk as the limits say. Returns whether it was complete.
    async fn compressed(
        &mut self,
        framing: Framing,
        comp: &mut Compressor,
        w: &Worker,
        counters: &[&CompCounters],
        limits: &GlobalComp,
    ) -> Result<bool, Fail> {
        let mut dec = ChunkedDecoder::new();
        let mut remaining = match framing {
            Framing::Length(n) => n,
            _ => u64::MAX,
        };
        let mut eof = false;
        loop {
            let (used, last) = {
                let mut plain = w.comp_plain.borrow_mut();
                let mut scratch = w.comp_out.borrow_mut();
                plain.clear();
                let avail = self.sbuf.bytes();
                let (data, used, last): (&[u8], usize, bool) = match framing {
                    Framing::Length(_) => {
                        let take = (remaining.min(avail.len() as u64)) as usize;
                        (&avail[..take], take, take as u64 == remaining)
                    }
                    Framing::Chunked => match dec.decode(avail, ChunkedOut::Raw, &mut plain) {
                        Ok(used) => (&plain[..], used, dec.is_done()),
                        Err(_) => return Ok(false),
                    },
                    Framing::UntilClose | Framing::None => (avail, avail.len(), eof),
                };
                if !data.is_empty() || last {
                    let n = comp.chunk(data, last, dec.trailers(), &mut scratch, self.out);
                    for k in counters {
                        k.comp_in.fetch_add(data.len() as u64, Ordering::Relaxed);
                        k.comp_out.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    RATE_IN.add(data.len() as u64);
                    RATE_OUT.add(n as u64);
                    let over = compression::over_limit(limits, RATE_IN.rate(), w.busy_pct());
                    comp.set_level(compression::next_level(
                        comp.level(),
                        limits.max_level,
                        over,
                    ));
                }
                (used, last)
            };
            self.sbuf.consume(used);
            if let Framing::Length(_) = framing {
                remaining -= used as u64;
            }
            if !self.out.is_empty() {
                // More chunks follow unless this was the last: let the kernel coalesce.
                let sent =
                    within(self.tclient, write_pair(self.client, self.out, &[], !last)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    return Err(Fail::ClientGone);
                }
                self.sent += self.out.len() as u64;
                self.out.clear();
            }
            if last {
                return Ok(true);
            }
            if self.sbuf.is_full() {
                return Ok(false);
            }
            match within(self.tserver, self.sbuf.fill(self.server, self.bufs)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(Ok(_)) if framing == Framing::UntilClose => eof = true,
                _ => return Ok(false),
            }
        }
    }
}

/// The compression settings that apply: the backend's when it has any, else the frontend's.
fn comp_conf<'a>(fe: &'a Frontend, be: &'a Backend) -> &'a CompConf {
    if be.compression.algos.is_empty() {
        &fe.compression
    } else {
        &be.compression
    }
}

/// When a server's `Keep-Alive: timeout=N` says it will close an idle connection: the pool
/// retires it a second before that, so a request never races the server's close.
fn keep_alive_deadline(rsp: &ResponseHead, buf: &[u8]) -> Option<Instant> {
    let v = rsp.header(buf, "keep-alive")?;
    let secs = v.split(|&b| b == b',').find_map(|p| {
        let p = std::str::from_utf8(p).ok()?.trim();
        let (k, n) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| n.trim().parse::<u64>().ok())?
    })?;
    Some(Instant::now() + Duration::from_secs(secs).saturating_sub(Duration::from_secs(1)))
}

/// Waits for a free slot on a server with `maxconn`, in arrival order, up to `timeout queue`;
/// 503 when the wait times out or the queue is full (`maxqueue`).
async fn queue_for(
    srv: &Server,
    limit: Option<Duration>,
) -> Result<Option<OwnedSemaphorePermit>, Fail> {
    let Some(slots) = &srv.slots else {
        return Ok(None);
    };
    if let Ok(p) = slots.clone().try_acquire_owned() {
        return Ok(Some(p));
    }
    if srv
        .maxqueue
        .is_some_and(|m| srv.queued.load(Ordering::Relaxed) >= m)
    {
        return Err(Fail::Status(503));
    }
    // Counted while waiting, however the wait ends (including this future being dropped).
    struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    srv.queued.fetch_add(1, Ordering::Relaxed);
    let waiting = Waiting(&srv.queued);
    let got = within(limit, slots.clone().acquire_owned()).await;
    drop(waiting);
    match got {
        Ok(Ok(p)) => Ok(Some(p)),
        _ => Err(Fail::Status(503)),
    }
}

/// Resolves when the client has closed its side (end of stream or reset). Pipelined data is
/// not a close: it is left unread and this never resolves.
async fn client_gone(client: &TcpStream) {
    let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    loop {
        if client.readable().await.is_err() {
            return;
        }
        // Through try_io, a spurious readiness is cleared rather than spun on.
        let peeked = client.try_io(tokio::io::Interest::READABLE, || {
            socket2::SockRef::from(client).peek(&mut probe)
        });
        match peeked {
            Ok(0) => return,
            Ok(_) => return std::future::pending().await,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Counts a request in flight on a server (read by `leastconn` and `random`) for its lifetime.
struct InFlight<'a>(&'a Server);

impl<'a> InFlight<'a> {
    fn new(s: &'a Server) -> Self {
        s.cur_conns.fetch_add(1, Ordering::Relaxed);
        InFlight(s)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.cur_conns.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why sending a request or reading its response head failed.
enum SendFail {
    /// The connection died before any response byte: a replay may be possible.
    Retryable,
    Status(u16),
    ClientGone,
}

async fn write_server(
    stream: &mut TcpStream,
    bytes: &[u8],
    limit: Option<Duration>,
) -> Result<(), SendFail> {
    match within(limit, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(SendFail::Retryable),
        Err(()) => Err(SendFail::Status(504)),
    }
}

/// Writes `a` then `b` with as few system calls as possible (one sendmsg when both fit).
/// `more` says more of the message follows: the kernel may then hold a partial segment
/// (`MSG_MORE`) and send fewer, fuller packets; the last write of a message never sets it.
async fn write_pair(
    stream: &mut TcpStream,
    mut a: &[u8],
    mut b: &[u8],
    more: bool,
) -> std::io::Result<()> {
    let flags = if more { libc::MSG_MORE } else { 0 } | libc::MSG_NOSIGNAL;
    while !a.is_empty() || !b.is_empty() {
        stream.writable().await?;
        let sock = socket2::SockRef::from(&*stream);
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            sock.send_vectored_with_flags(&[IoSlice::new(a), IoSlice::new(b)], flags)
        });
        let n = match sent {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if n < a.len() {
            a = &a[n..];
        } else {
            b = &b[n - a.len()..];
            a = &[];
        }
    }
    Ok(())
}

async fn write_ok(stream: &mut TcpStream, bytes: &[u8], limit: Option<Duration>) -> bool {
    matches!(within(limit, stream.write_all(bytes)).await, Ok(Ok(())))
}

async fn read_ok(
    stream: &mut TcpStream,
    buf: &mut Buf,
    bufs: &crate::buffer::BufPool,
    limit: Option<Duration>,
) -> bool {
    matches!(within(limit, buf.fill(stream, bufs)).await, Ok(Ok(n)) if n > 0)
}

fn apply_rules(
    rules: &[HttpRule],
    req: &ReqView<'_>,
    edits: &mut Edits,
    backend: Option<usize>,
) -> Option<Route> {
    for rule in rules {
        if !holds(&rule.cond, req) {
            continue;
        }
        match &rule.action {
            Action::Return {
                status,
                content_type,
                body,
            } => {
                return Some(Route::Respond {
                    bytes: local_response(*status, content_type.as_deref(), body),
                    close: false,
                })
            }
            Action::Deny { status } => return Some(Route::Error(*status, backend)),
            Action::Allow => return None,
            other => edits.apply(other),
        }
    }
    None
}

fn local_response(status: u16, content_type: Option<&str>, body: &[u8]) -> Vec<u8> {
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
fn with_close(bytes: Vec<u8>) -> Vec<u8> {
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
fn forwardfor<'a>(
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
fn build_request_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    head: &RequestHead,
    edits: &Edits,
    xff: Option<(&ForwardFor, IpAddr)>,
    server_close: bool,
    upgrade: Option<&[u8]>,
) {
    out.extend_from_slice(&buf[head.method.clone()]);
    out.push(b' ');
    out.extend_from_slice(&buf[head.target.clone()]);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut has_xff = false;
    for h in &head.headers {
        let name = &buf[h.name.clone()];
        if head.is_hop_by_hop(name) || edits.deletes(name) || name.eq_ignore_ascii_case(b"expect") {
            continue;
        }
        if let Some((f, _)) = xff {
            has_xff |= name.eq_ignore_ascii_case(f.header.as_bytes());
        }
        push_header(out, name, &buf[h.value.clone()]);
    }
    for (n, v) in &edits.add {
        push_header(out, n.as_bytes(), v.as_bytes());
    }
    if let Some((f, ip)) = xff {
        if !(f.if_none && has_xff) {
            push_header(out, f.header.as_bytes(), ip.to_string().as_bytes());
        }
    }
    match head.framing {
        Framing::Length(n) => push_header(out, b"content-length", Digits::new(n).as_bytes()),
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::None | Framing::UntilClose => {
            // A body-less POST/PUT still states its length so the server does not wait.
            if matches!(&buf[head.method.clone()], b"POST" | b"PUT" | b"PATCH") {
                out.extend_from_slice(b"content-length: 0\r\n");
            }
        }
    }
    if let Some(up) = upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
        push_header(out, b"upgrade", up);
    } else if server_close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The protocols a request asks to switch to: a bodiless HTTP/1.1 request with `Upgrade`
/// nominated by `Connection`. `h2c`/`h2` are removed (a proxy must not tunnel cleartext HTTP/2
/// it does not speak); nothing left means no upgrade.
fn upgrade_request(head: &RequestHead, buf: &[u8]) -> Option<Vec<u8>> {
    if head.version != Version::Http11
        || head.framing != Framing::None
        || !head.nominated.iter().any(|n| n == b"upgrade")
    {
        return None;
    }
    let value = head.header(buf, "upgrade")?;
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
fn write_response_head(
    out: &mut Vec<u8>,
    buf: &[u8],
    rsp: &ResponseHead,
    edits: &Edits,
    client: Option<(Framing, bool, Version, Option<Vec<u8>>)>,
    compressed: Option<Algo>,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(Digits::new(u64::from(rsp.status)).as_bytes());
    out.push(b' ');
    if rsp.reason.is_empty() {
        out.extend_from_slice(reason(rsp.status).as_bytes());
    } else {
        out.extend_from_slice(&buf[rsp.reason.clone()]);
    }
    out.extend_from_slice(b"\r\n");
    let mut saw_vary = false;
    for h in &rsp.headers {
        let name = &buf[h.name.clone()];
        if rsp.is_hop_by_hop(name) || edits.deletes(name) {
            continue;
        }
        let value = &buf[h.value.clone()];
        if compressed.is_some() && !compression::rewrite_header(out, name, value, &mut saw_vary) {
            continue;
        }
        push_header(out, name, value);
    }
    for (n, v) in &edits.add {
        push_header(out, n.as_bytes(), v.as_bytes());
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
struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn new(mut n: u64) -> Digits {
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

    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let net = parse_net("10.0.0.0/8").unwrap();
        assert!(in_net("10.1.2.3".parse().unwrap(), net));
        assert!(!in_net("11.1.2.3".parse().unwrap(), net));
        assert!(in_net("::1".parse().unwrap(), parse_net("::1").unwrap()));
        assert!(in_net(
            "1.2.3.4".parse().unwrap(),
            parse_net("0.0.0.0/0").unwrap()
        ));
        assert!(parse_net("10.0.0.0/33").is_err());
        assert!(parse_net("nope").is_err());
    }

    #[test]
    fn forwardfor_options() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let f = parse_forwardfor(&w("except 127.0.0.0/8 header X-Client if-none")).unwrap();
        assert_eq!(f.header, "x-client");
        assert!(f.if_none);
        assert!(parse_forwardfor(&w("frob")).is_err());
        assert!(parse_forwardfor(&w("except")).is_err());
    }

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
        edits.apply(&Action::SetHeader("X-Keep".into(), "z".into()));
        let mut out = Vec::new();
        build_request_head(
            &mut out,
            raw,
            &head,
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
