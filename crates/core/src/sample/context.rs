//! What samples are fetched from (`Ctx`), the variables a stream sees, sample types known
//! before evaluation, and the text matching shared by ACLs and map files.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use sluice_http::{RequestView, ResponseView};

use crate::conf::sample::{Match, NameRef, Sample, VarName, VarScope, Vars};
use crate::runtime::Process;
pub use crate::stick::Tracker;
use crate::stick::{Counter, Table};

/// The variables a stream sees: its connection's and its transaction's (the process's live
/// in `Process`), and the stick-table entries it tracks.
#[derive(Debug, Default)]
pub struct StreamVars {
    /// The session's variables: one connection's, shared by the streams of an HTTP/2 one
    /// (HAProxy's session is the connection).
    pub sess: std::rc::Rc<RefCell<Vars>>,
    pub txn: RefCell<Vars>,
    /// `track-sc0`, `track-sc1`, `track-sc2` of the transaction (`http-request`,
    /// `tcp-request content` in HTTP mode), released when it ends.
    pub trackers: RefCell<Slots>,
    /// The slots the connection tracks (`tcp-request connection|session`, and `tcp-request
    /// content` in TCP mode), released when it closes.
    pub sess_trackers: std::rc::Rc<RefCell<Slots>>,
    /// The current request's unique id (`unique-id-format`).
    pub unique_id: RefCell<Option<std::rc::Rc<str>>>,
    /// What the transaction's capture slots hold so far (`capture.req.hdr(N)`,
    /// `capture.res.hdr(N)`), copied from its log record when the frontend has slots.
    pub captured: RefCell<Captured>,
    /// Where the last final rule that applied was written (`last_rule_file`,
    /// `last_rule_line`).
    pub last_rule: RefCell<Option<crate::conf::Loc>>,
    /// The addresses `tcp-request` rules set (`set-src`, `set-dst` and their ports), which
    /// the rest of the connection sees (an HTTP rule changes only its own request's).
    pub set_src: std::cell::Cell<Option<SocketAddr>>,
    pub set_dst: std::cell::Cell<Option<SocketAddr>>,
    /// `set-log-level` of any rule list: the log line's severity (`Some(None)`: no line),
    /// for the session in TCP mode, the transaction in HTTP mode, the last rule to set it
    /// winning (`tcp-request content`, then `http-request`, then the response's lists).
    pub log_level: std::cell::Cell<Option<Option<u8>>>,
}

impl StreamVars {
    /// The variables of a stream of a session whose own variables and tracked entries are
    /// `sess` and `sess_trackers` (an HTTP/2 connection's streams share them). Built field
    /// by field: a default's own session cells would be allocated only to be dropped.
    pub fn in_session(
        sess: std::rc::Rc<RefCell<Vars>>,
        sess_trackers: std::rc::Rc<RefCell<Slots>>,
        set_dst: Option<SocketAddr>,
    ) -> StreamVars {
        StreamVars {
            sess,
            sess_trackers,
            set_dst: std::cell::Cell::new(set_dst),
            txn: RefCell::default(),
            trackers: RefCell::default(),
            unique_id: RefCell::default(),
            captured: RefCell::default(),
            last_rule: RefCell::default(),
            set_src: std::cell::Cell::default(),
            log_level: std::cell::Cell::default(),
        }
    }
}

/// The values of a transaction's capture slots, request side and response side.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    pub req: Vec<Option<String>>,
    pub res: Vec<Option<String>>,
}

impl<'a> Ctx<'a> {
    /// What samples see outside any connection (`global set-var`, health checks'
    /// `set-var`): the process and the variables given; no frontend of their own (the first
    /// one's index stands in).
    pub fn detached(process: &'a Process, vars: &'a StreamVars) -> Ctx<'a> {
        Ctx {
            process,
            frontend: 0,
            backend: None,
            server: None,
            src: SocketAddr::from(([0, 0, 0, 0], 0)),
            dst: None,
            client: None,
            server_conn: None,
            req: None,
            body: None,
            whole_lens: (None, None),
            res: None,
            res_body: None,
            on_response: false,
            vars,
            unique_id: None,
            payload: None,
            res_payload: None,
            arrival: None,
            first_request: false,
            set_timeouts: (None, None),
            cache: None,
            fault: None,
        }
    }

    /// What samples see of a client connection before any request.
    pub fn of_connection(
        process: &'a Process,
        frontend: usize,
        arrival: Arrival,
        src: SocketAddr,
        client: &'a crate::transport::Conn,
        vars: &'a StreamVars,
    ) -> Ctx<'a> {
        Ctx {
            frontend,
            src,
            client: Some(client),
            arrival: Some(arrival),
            ..Ctx::detached(process, vars)
        }
    }

    /// The TCP-mode payload a fetch of `side` reads.
    pub fn payload_of(
        &self,
        side: crate::conf::sample::PayloadSide,
    ) -> Option<&'a super::payload::Payload<'a>> {
        match side {
            crate::conf::sample::PayloadSide::Req => self.payload,
            crate::conf::sample::PayloadSide::Res => self.res_payload,
        }
    }

    /// The client's address, if it has one (see [`crate::transport::Conn::client_addr`]).
    pub fn client_addr(&self) -> Option<SocketAddr> {
        if let Some(set) = self.vars.set_src.get() {
            return Some(set);
        }
        match self.client {
            Some(c) => c.client_addr(self.src),
            None => Some(self.src),
        }
    }

    /// The stick table a fetch names, or by default the current proxy's (the backend's
    /// once routed, else the frontend's).
    pub fn table(&self, name: Option<&NameRef>) -> Option<&'a Arc<Table>> {
        let st = &self.process.state;
        let i = match name {
            Some(n) => n.index(&st.tables, |t| &t.conf.name)?,
            None => self
                .backend
                .and_then(|b| st.own_tables.backends[b])
                .or(st.own_tables.frontends[self.frontend])?,
        };
        Some(&st.tables[i])
    }
}

/// The three tracking slots (`track-sc0..2`), allocated when a rule first tracks: most
/// connections never do, and they stay small.
#[derive(Debug, Default)]
pub struct Slots(Option<Box<[Option<Tracker>; 3]>>);

impl Slots {
    pub fn get(&self, n: usize) -> Option<&Tracker> {
        self.0.as_ref()?[n].as_ref()
    }

    pub fn set(&mut self, n: usize, t: Tracker) {
        self.0.get_or_insert_with(Default::default)[n] = Some(t);
    }

    pub fn is_empty(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|s| s.iter().all(Option::is_none))
    }

    /// Releases every entry tracked.
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

impl StreamVars {
    /// Remembers `rule`, which applies, when it ends its list.
    pub fn note_rule(&self, rule: &crate::conf::rules::Rule) {
        if rule.is_final() && rule.at.is_some() {
            *self.last_rule.borrow_mut() = rule.at.clone();
        }
    }

    /// What slot `n` tracks: the transaction's entry, else the connection's (as HAProxy's
    /// `sc*` fetches look them up).
    pub fn with_tracked<R>(&self, n: u8, f: impl FnOnce(Option<&Tracker>) -> R) -> R {
        let n = usize::from(n);
        let txn = self.trackers.borrow();
        if let Some(t) = txn.get(n) {
            return f(Some(t));
        }
        f(self.sess_trackers.borrow().get(n))
    }

    /// Whether slot `n` tracks an entry already (a second `track-scN` is ignored).
    pub fn tracking(&self, n: u8) -> bool {
        self.with_tracked(n, |t| t.is_some())
    }

    /// Adds `counts` to the entry of every slot in use.
    pub fn count(&self, counts: &[(Counter, u64)], now: u64) {
        for n in 0..3 {
            self.with_tracked(n, |t| {
                if let Some(t) = t {
                    t.count(counts, now)
                }
            });
        }
    }

    pub fn get(&self, process: &Process, v: &VarName) -> Option<Sample<'static>> {
        match v.scope {
            VarScope::Proc => process
                .vars
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&v.name)
                .cloned(),
            VarScope::Sess => self.sess.borrow().get(&v.name).cloned(),
            VarScope::Txn | VarScope::Req | VarScope::Res | VarScope::Check => {
                self.txn.borrow().get(&v.name).cloned()
            }
        }
    }

    /// Sets `v` to `value`, under its `set-var` conditions.
    pub fn set(&self, process: &Process, v: &VarName, value: Sample<'static>) {
        let c = &v.conds;
        match v.scope {
            VarScope::Proc => process
                .vars
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .set_if(&v.name, value, c, true),
            VarScope::Sess => self.sess.borrow_mut().set_if(&v.name, value, c, false),
            VarScope::Txn | VarScope::Req | VarScope::Res | VarScope::Check => {
                self.txn.borrow_mut().set_if(&v.name, value, c, false)
            }
        }
    }

    pub fn unset(&self, process: &Process, v: &VarName) {
        match v.scope {
            VarScope::Proc => process
                .vars
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unset(&v.name),
            VarScope::Sess => self.sess.borrow_mut().unset(&v.name),
            VarScope::Txn | VarScope::Req | VarScope::Res | VarScope::Check => {
                self.txn.borrow_mut().unset(&v.name)
            }
        }
    }
}

/// Everything a sample may be fetched from, for one evaluation.
#[derive(Clone)]
pub struct Ctx<'a> {
    pub process: &'a Process,
    pub frontend: usize,
    pub backend: Option<usize>,
    pub server: Option<usize>,
    pub src: SocketAddr,
    /// The address the client connected to, when a rule set it (`set-dst`).
    pub dst: Option<SocketAddr>,
    /// The client connection (its local address is asked of the kernel only when a rule
    /// needs it).
    pub client: Option<&'a crate::transport::Conn>,
    /// The connection to the server that answered (response rules): `ssl_bc*`.
    pub server_conn: Option<&'a crate::transport::Conn>,
    pub req: Option<&'a RequestView<'a>>,
    /// The request body, when buffered (`option http-buffer-request`).
    pub body: Option<&'a [u8]>,
    /// The lengths of a request and a response body that arrived whole without a
    /// `Content-Length` (chunked), for `req.body_size` and `res.body_size`.
    pub whole_lens: (Option<u64>, Option<u64>),
    pub res: Option<&'a ResponseView<'a>>,
    /// The response body, when an `http-response wait-for-body` rule buffered it.
    pub res_body: Option<&'a [u8]>,
    /// Evaluated for a response rule: the request's head is out of reach
    /// (`Fetch::needs_request_head` fails) and `hdr` reads the response, as in HAProxy.
    pub on_response: bool,
    pub vars: &'a StreamVars,
    pub unique_id: Option<std::rc::Rc<str>>,
    /// What a TCP-mode client sent before its content rules decided.
    pub payload: Option<&'a super::payload::Payload<'a>>,
    /// What a TCP-mode server sent before its response rules decided (`res.len`,
    /// `res.payload`).
    pub res_payload: Option<&'a super::payload::Payload<'a>>,
    /// Where the client connection arrived (none outside a connection: `global` rules).
    pub arrival: Option<Arrival>,
    /// The request is the first of its client connection (`http_first_req`): always so
    /// for an HTTP/2 stream, as in HAProxy, where each stream is a transaction of its own.
    pub first_request: bool,
    /// What `set-timeout server` and `set-timeout tunnel` rules set so far.
    pub set_timeouts: (Option<std::time::Duration>, Option<std::time::Duration>),
    /// The cache the response was served from (`res.cache_hit`), if it was.
    pub cache: Option<usize>,
    /// `fc_err`, `fc_err_str`: why the client connection failed before its session
    /// started, HAProxy's `CO_ER_*` number and text (only for `error-log-format`).
    pub fault: Option<(u8, &'static str)>,
}

/// Where a client connection arrived: the worker thread serving it (from 0) and the
/// listener (its frontend's `bind` line, by index) that accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub thread: usize,
    pub listener: usize,
}

/// A sample's type, as known before evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    Ip,
    Str,
    Bin,
}

/// Whether text `s` matches pattern `p` by `how` (`str`, `beg`, `end`, `sub`, `dir`,
/// `dom`), ignoring ASCII case when `icase`.
pub fn text_match(how: Match, s: &[u8], p: &[u8], icase: bool) -> bool {
    let eq = |a: &[u8], b: &[u8]| {
        if icase {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    match how {
        Match::Str => eq(s, p),
        Match::Bin => s == p,
        Match::Beg => s.len() >= p.len() && eq(&s[..p.len()], p),
        Match::End => s.len() >= p.len() && eq(&s[s.len() - p.len()..], p),
        Match::Sub => p.is_empty() || s.windows(p.len()).any(|w| eq(w, p)),
        // A part between delimiters (or the ends): '/' and '?' for a directory; also '.'
        // and ':' for a domain.
        Match::Dir => delimited(s, p, b"/?", eq),
        Match::Dom => delimited(s, p, b"/?.:", eq),
        _ => false,
    }
}

fn delimited(s: &[u8], p: &[u8], delims: &[u8], eq: impl Fn(&[u8], &[u8]) -> bool) -> bool {
    let p = trim_delims(p, delims);
    if p.is_empty() {
        return false;
    }
    (0..=s.len().saturating_sub(p.len())).any(|i| {
        s.len() >= i + p.len()
            && eq(&s[i..i + p.len()], p)
            && (i == 0 || delims.contains(&s[i - 1]))
            && (i + p.len() == s.len() || delims.contains(&s[i + p.len()]))
    })
}

fn trim_delims<'p>(mut p: &'p [u8], delims: &[u8]) -> &'p [u8] {
    while let [first, rest @ ..] = p {
        if !delims.contains(first) {
            break;
        }
        p = rest;
    }
    while let [rest @ .., last] = p {
        if !delims.contains(last) {
            break;
        }
        p = rest;
    }
    p
}
