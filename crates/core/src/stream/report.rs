//! How a transaction ended and what its access-log line reports: the [`Fail`] of a
//! transaction that could not complete, with its [`Cause`] (and the I/O error behind it) and
//! the [`Phase`] it was in, from which HAProxy's two-letter termination code derives.

use std::io;
use std::time::Instant;

use sluice_http::{RequestView, Version};

use super::connect::{Attempts, ConnectError};
use crate::runtime::{clock_ms_at, Peaks, ProxyCounters, Timings, Traffic, Worker};

/// Where the transaction was when it ended (the second letter of the termination code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Phase {
    /// Waiting for or reading the request head.
    #[default]
    Request,
    /// Waiting in a server's queue.
    Queue,
    /// Connecting to the server.
    Connect,
    /// Sending the request and waiting for the response head.
    Headers,
    /// Relaying the response body.
    Data,
    /// Relaying an upgraded connection.
    Tunnel,
    /// Answered by the proxy itself.
    Local,
}

impl Phase {
    fn letter(self) -> u8 {
        match self {
            Phase::Request => b'R',
            Phase::Queue => b'Q',
            Phase::Connect => b'C',
            Phase::Headers => b'H',
            Phase::Data => b'D',
            Phase::Tunnel => b'T',
            Phase::Local => b'L',
        }
    }
}

/// What ended a transaction early (the first letter of the termination code), with the
/// I/O error behind it when there is one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Cause {
    /// The client closed or failed (`C`).
    #[error("the client closed the connection")]
    ClientClosed(#[source] Option<io::Error>),
    /// The client was too slow (`c`).
    #[error("the client timed out")]
    ClientTimeout,
    /// The proxy refused the request: invalid, denied, or no route (`P`).
    #[error("the proxy refused the request")]
    Proxy,
    /// No server connection could be had (`S`, `s` on timeouts; `C` if the client left).
    #[error(transparent)]
    Connect(ConnectError),
    /// The server was too slow (`s`).
    #[error("the server timed out")]
    ServerTimeout,
    /// The proxy ended it: its server was marked down with `shutdown-sessions` (`K`).
    #[error("killed: the server was marked down")]
    Killed,
    /// The server closed or failed (`S`).
    #[error("the server closed the connection")]
    Server(#[source] Option<io::Error>),
    /// The server's response was invalid: the proxy refused it (`P`, as HAProxy's `PH--`).
    #[error("the server sent an invalid response")]
    InvalidResponse,
}

impl Cause {
    fn letter(&self) -> u8 {
        match self {
            Cause::ClientClosed(_) => b'C',
            Cause::ClientTimeout => b'c',
            Cause::Proxy => b'P',
            Cause::Connect(e) => e.term()[0],
            Cause::ServerTimeout => b's',
            Cause::Killed => b'K',
            Cause::Server(_) => b'S',
            Cause::InvalidResponse => b'P',
        }
    }
}

/// A transaction that could not complete.
#[derive(Debug)]
pub(crate) struct Fail {
    /// The status to answer before closing; `None`: close without a response (the client
    /// is gone, or part of a response was already sent).
    pub status: Option<u16>,
    pub cause: Cause,
    pub phase: Phase,
}

impl Fail {
    pub fn answer(status: u16, cause: Cause, phase: Phase) -> Fail {
        Fail {
            status: Some(status),
            cause,
            phase,
        }
    }

    pub fn drop(cause: Cause, phase: Phase) -> Fail {
        Fail {
            status: None,
            cause,
            phase,
        }
    }

    /// HAProxy's two-letter termination state.
    pub fn term(&self) -> [u8; 2] {
        [self.cause.letter(), self.phase.letter()]
    }
}

/// Facts about the current request for its access-log line (milliseconds, -1 when a step
/// did not happen).
#[derive(Debug)]
pub(crate) struct ReqLog {
    pub started: Option<Instant>,
    pub date: Option<std::time::SystemTime>,
    pub head_done: Option<Instant>,
    /// When the request's first byte arrived (what was buffered counts from `started`).
    pub first_byte: Option<Instant>,
    /// `capture cookie`: the request's and the response's cookie.
    pub cookie_req: Option<String>,
    pub cookie_res: Option<String>,
    /// The line already went out (`option logasap`).
    pub logged: bool,
    /// The persistence cookie's status on the request and what the response did with it
    /// (the last two letters of `%tsc`).
    pub cookie_flags: [u8; 2],
    pub got_bytes: bool,
    pub attempts: Option<Attempts>,
    pub t_response: i64,
    pub status: i64,
    pub bytes: u64,
    /// What of the server's answer counts in `bytes` besides the final response relayed:
    /// HAProxy counts what it receives, so interim (1xx) responses, and a response the
    /// proxy answered in place of (a rule's `deny`, `return`, a body waited for too long)
    /// as far as it had arrived.
    pub received: u64,
    /// The request head's bytes on the wire and as HAProxy counts them (`htx_head_size`):
    /// `bin` and `%U` count the latter.
    pub head_in: (u64, u64),
    pub term: Option<[u8; 2]>,
    pub line: Option<(String, String, &'static str)>,
    /// The session's received-bytes count when this request began.
    pub received_before: u64,
    /// The request head was valid.
    pub parsed: bool,
    /// Answered by the proxy itself: denied by a rule, or intercepted (`return`, ...).
    pub local: Option<Local>,
    /// `capture request header` / `capture response header` values, in order.
    pub captures_req: Vec<Option<String>>,
    pub captures_res: Vec<Option<String>>,
    /// The request's unique id (`unique-id-format`).
    pub unique_id: Option<std::rc::Rc<str>>,
    /// The `%[...]` samples of the log format, rendered once the request was routed.
    pub samples: Vec<String>,
    /// The request's number on its worker (`%rt`).
    pub counter: u64,
}

/// How the proxy answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Local {
    Denied,
    /// The server's response was refused (`http-response deny`, `option checkcache`):
    /// counted as a denied response (`dresp`), where a denied request counts in `dreq`.
    DeniedResponse,
    Intercepted,
    /// Answered from a cache (`cache-use`): logged with the server `<CACHE>`.
    Cached,
}

impl Default for ReqLog {
    fn default() -> Self {
        ReqLog {
            started: None,
            date: None,
            head_done: None,
            first_byte: None,
            cookie_req: None,
            cookie_res: None,
            logged: false,
            cookie_flags: *b"--",
            got_bytes: false,
            attempts: None,
            t_response: -1,
            status: -1,
            bytes: 0,
            received: 0,
            head_in: (0, 0),
            term: None,
            line: None,
            received_before: 0,
            parsed: false,
            local: None,
            captures_req: Vec::new(),
            captures_res: Vec::new(),
            unique_id: None,
            samples: Vec::new(),
            counter: 0,
        }
    }
}

/// The values of `capture ... header NAME len N` lines among `headers`: the last
/// occurrence of each, cut to its length.
/// The size HAProxy 2.6 counts for a response head (`%B`, `bout`): its HTX form, not its
/// bytes on the wire. The start line takes 20 bytes of structure plus its version, code
/// and reason; each header its name and value; the end of headers one byte. `Connection`,
/// which HAProxy's H1 layer writes itself on output, is not counted. `head` is the head
/// as sent, `name: value` lines ending in CRLF.
pub(crate) fn htx_head_size(head: &[u8]) -> u64 {
    // Called for every request and response: one pass over the line ends (memchr), the
    // colon looked for in the line's first bytes (names are short).
    let trim_cr = |l: &[u8]| -> usize { l.len() - usize::from(l.last() == Some(&b'\r')) };
    let mut ends = memchr::memchr_iter(b'\n', head).chain(std::iter::once(head.len()));
    let Some(first) = ends.next() else {
        return 0;
    };
    let start = &head[..trim_cr(&head[..first])];
    // The two spaces between version, code and reason are not stored; any inside the
    // reason are.
    let separators = start.iter().filter(|&&b| b == b' ').take(2).count();
    let mut size = 20 + (start.len() - separators) as u64;
    let mut at = first + 1;
    for end in ends {
        let Some(line) = head.get(at..end) else {
            break;
        };
        at = end + 1;
        let line = &line[..trim_cr(line)];
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        if name.eq_ignore_ascii_case(b"connection") {
            continue;
        }
        let value = sluice_http::trim_ows(&line[colon + 1..]);
        size += (name.len() + value.len()) as u64;
    }
    size + 1
}

/// A request head's size on the wire and as HAProxy counts it ([`htx_head_size`]): an
/// HTTP/1 head's from its bytes (`wire`); an HTTP/2 one's as the HTTP/1.1 head it
/// stands for (`Host` from `:authority` first, as the view shows it) would count.
pub(crate) fn head_size(req: &RequestView<'_>, wire: &[u8]) -> (u64, u64) {
    if !matches!(req.version(), Version::Http2 | Version::Http3) {
        return (wire.len() as u64, htx_head_size(wire));
    }
    // "METHOD TARGET HTTP/1.1\r\n", then "name: value\r\n" lines, then "\r\n".
    let line = req.method().len() + 1 + req.target().len() + 11;
    let (mut wire_len, mut htx) = (line + 2, 20 + line - 4);
    for (name, value) in req.headers() {
        wire_len += name.len() + 2 + value.len() + 2;
        if !name.eq_ignore_ascii_case(b"connection") {
            htx += name.len() + value.len();
        }
    }
    (wire_len as u64, htx as u64 + 1)
}

/// What HAProxy counts for one of the proxy's own answers (head as [`htx_head_size`]
/// counts it, and body): nothing for a silent one.
pub(crate) fn htx_answer_size(page: &sluice_http::Answer) -> u64 {
    if page.silent {
        return 0;
    }
    // The start line without its two separators: version, status digits, reason.
    let digits = super::heads::Digits::new(u64::from(page.status));
    let start = "HTTP/1.1".len() + digits.as_bytes().len();
    let fields: usize = page
        .fields
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(b"connection"))
        .map(|(n, v)| n.len() + v.len())
        .sum();
    (20 + start + page.reason.len() + fields + 1 + page.body.len()) as u64
}

pub(crate) fn captures<'h>(
    wanted: &[(String, usize)],
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
) -> Vec<Option<String>> {
    let headers: Vec<_> = headers.collect();
    wanted
        .iter()
        .map(|(name, len)| {
            headers
                .iter()
                .rev()
                .find(|(n, _)| sluice_http::name_is(n, name))
                .map(|(_, v)| String::from_utf8_lossy(&v[..v.len().min(*len)]).into_owned())
        })
        .collect()
}

/// `capture cookie NAME len N`: the first cookie whose name starts with `name`, as
/// `name=value` cut to `len`, among Cookie header values (or, `set`, Set-Cookie values,
/// whose first pair is the cookie).
pub(crate) fn capture_cookie<'h>(
    headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    name: &str,
    len: usize,
    set: bool,
) -> Option<String> {
    for (_, v) in headers {
        let pairs: Vec<&[u8]> = if set {
            v.split(|&b| b == b';').take(1).collect()
        } else {
            v.split(|&b| b == b';').collect()
        };
        for pair in pairs {
            let pair = sluice_http::trim_ows(pair);
            if pair.starts_with(name.as_bytes()) && pair.contains(&b'=') {
                let cut = &pair[..pair.len().min(len)];
                return Some(String::from_utf8_lossy(cut).into_owned());
            }
        }
    }
    None
}

impl ReqLog {
    /// Keeps the request line for the log (the head leaves the buffer soon), cut to `max`
    /// bytes as HAProxy cuts it (`tune.http.logurilen`): a line cut within its target has
    /// no version (`%HV` then says `HTTP/0.9`, as HAProxy's reading of the cut line does).
    /// `h2`: the request came on a stream of an HTTP/2 connection.
    pub fn capture_line(&mut self, req: &RequestView<'_>, h2: bool, max: usize) {
        // HAProxy holds an HTTP/2 request's target in absolute form (its scheme, its
        // normalized authority, then the path).
        let target = match (req.scheme(), req.header("host")) {
            (Some(scheme), Some(host)) if req.method() != b"CONNECT" => format!(
                "{scheme}://{}{}",
                String::from_utf8_lossy(host),
                String::from_utf8_lossy(req.target())
            ),
            _ => String::from_utf8_lossy(req.target()).into_owned(),
        };
        let mut method = String::from_utf8_lossy(req.method()).into_owned();
        let mut target = target;
        let mut version = if req.version() == Version::Http3 {
            "HTTP/3.0"
        } else if h2 {
            "HTTP/2.0"
        } else if req.version() == Version::Http10 {
            "HTTP/1.0"
        } else {
            "HTTP/1.1"
        };
        let whole = method.len() + 1 + target.len() + 1 + version.len();
        if whole > max {
            let room_target = max.saturating_sub(method.len() + 1);
            if room_target <= target.len() {
                truncate_at_char(&mut target, room_target);
                version = "";
                truncate_at_char(&mut method, max);
            } else {
                version = &version[..max - method.len() - 1 - target.len() - 1];
            }
        }
        self.line = Some((method, target, version));
    }
}

/// Cuts `s` to at most `n` bytes, at a character boundary.
fn truncate_at_char(s: &mut String, n: usize) {
    if s.len() > n {
        let mut at = n;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
}

/// What one transaction (or TCP session) adds to the statistics of its frontend, backend
/// and server (`show stat`): all in the worker's own counter slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    /// The HTTP status sent to the client (none in TCP mode or when nothing was sent).
    pub status: Option<u16>,
    /// An HTTP request was parsed.
    pub request: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub term: [u8; 2],
    pub local: Option<Local>,
    /// Milliseconds, -1 when the step did not happen.
    pub t_queue: i64,
    pub t_connect: i64,
    pub t_response: i64,
    pub t_total: i64,
    /// When the transaction ended.
    pub at: Instant,
}

/// The counters of frontend `fe` and of its listener on this worker.
fn front_counters(
    w: &Worker,
    (fe, listener): (usize, usize),
) -> (&ProxyCounters, Option<&ProxyCounters>) {
    let frontend = &w.state().frontends[fe];
    let l = frontend
        .listeners
        .get(listener)
        .map(|l| l.counters.at(w.tid));
    (frontend.counters.at(w.tid), l)
}

impl Tally {
    pub fn count(
        &self,
        w: &Worker,
        (fe, listener): (usize, usize),
        backend: Option<usize>,
        server: Option<usize>,
    ) {
        let now = clock_ms_at(self.at);
        let state = w.state();
        let (f, l) = front_counters(w, (fe, listener));
        // A frontend's (and listener's) sessions are its connections, counted at accept.
        for t in std::iter::once(&f.traffic).chain(l.map(|l| &l.traffic)) {
            t.bytes_in.add(self.bytes_in);
            t.bytes_out.add(self.bytes_out);
        }
        if let Some(st) = self.status {
            f.traffic.status.count(st);
        }
        if self.request {
            f.requests.bump();
            f.request_rate.hit(now);
        }
        // Invalid, timed out or abandoned while the request was being received.
        let invalid = self.local.is_none()
            && self.term[1] == b'R'
            && matches!(self.term[0], b'P' | b'c' | b'C');
        for c in std::iter::once(f).chain(l) {
            match self.local {
                Some(Local::Denied) => c.denied_requests.bump(),
                Some(Local::DeniedResponse) => c.denied_responses.bump(),
                _ => {}
            }
            if invalid {
                c.request_errors.bump();
            }
        }
        // A cache hit counts as intercepted when the frontend's rule found it, as HAProxy's.
        if self.local == Some(Local::Intercepted)
            || (self.local == Some(Local::Cached) && backend.is_none())
        {
            f.intercepted.bump();
        }
        let Some(b) = backend else {
            return;
        };
        let bs = &state.backends[b];
        let bc = bs.counters.at(w.tid);
        let denied_response = self.local == Some(Local::DeniedResponse);
        if denied_response {
            bc.denied_responses.bump();
        }
        bc.session_rate.hit(now);
        if self.request {
            bc.requests.bump();
        }
        self.transaction(&bc.traffic, &bs.peaks, now);
        let Some(s) = server else {
            return;
        };
        let ss = &bs.servers[s];
        let sc = ss.counters.at(w.tid);
        if denied_response {
            sc.denied_responses.bump();
        }
        sc.rate.hit(now);
        self.transaction(&sc.traffic, &ss.peaks, now);
    }

    /// Bytes a stream moved, counted before it ends (`option contstats`): `(in, out)` on
    /// the frontend and listener, the backend and the server, as [`Tally::count`] counts
    /// them.
    pub(crate) fn add_bytes(
        w: &Worker,
        (fe, listener): (usize, usize),
        backend: usize,
        server: usize,
        (bytes_in, bytes_out): (u64, u64),
    ) {
        let (f, l) = front_counters(w, (fe, listener));
        let bs = &w.state().backends[backend];
        let traffic = [
            Some(&f.traffic),
            l.map(|l| &l.traffic),
            Some(&bs.counters.at(w.tid).traffic),
            bs.servers
                .get(server)
                .map(|s| &s.counters.at(w.tid).traffic),
        ];
        for t in traffic.into_iter().flatten() {
            t.bytes_in.add(bytes_in);
            t.bytes_out.add(bytes_out);
        }
    }

    /// What the transaction adds to a backend or server it went through.
    fn transaction(&self, t: &Traffic, peaks: &Peaks, now: u64) {
        t.sessions.bump();
        t.last_session.set(now);
        t.bytes_in.add(self.bytes_in);
        t.bytes_out.add(self.bytes_out);
        if let Some(st) = self.status {
            t.status.count(st);
        }
        if self.term[0] == b'C' && matches!(self.term[1], b'H' | b'D' | b'T') {
            t.client_aborts.bump();
        }
        if self.term[0] == b'S' && matches!(self.term[1], b'D' | b'T') {
            t.server_aborts.bump();
        }
        self.time(&t.timings, peaks);
    }

    /// Adds the steps that happened to the averages and maxima.
    fn time(&self, t: &Timings, peaks: &Peaks) {
        for (v, timing, peak) in [
            (self.t_queue, &t.queue, &peaks.queue_ms),
            (self.t_connect, &t.connect, &peaks.connect_ms),
            (self.t_response, &t.response, &peaks.response_ms),
            (self.t_total, &t.total, &peaks.total_ms),
        ] {
            if let Ok(v) = u64::try_from(v) {
                timing.add(v);
                peak.note(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn heads_count_as_haproxy_counts_them() {
        // HAProxy 2.6 logs 84 for this response with a 12-byte body, and 217 for its 503
        // page with a 107-byte body (recorded side by side on the same origin).
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 12\r\nconnection: close\r\n\r\n";
        assert_eq!(super::htx_head_size(ok) + 12, 84);
        let page = sluice_http::error_page(503);
        assert_eq!(page.body.len(), 107);
        assert_eq!(super::htx_answer_size(&page), 217);
        let text = page.to_h1();
        assert_eq!(super::htx_head_size(&text[..text.len() - 107]) + 107, 217);
    }
}
