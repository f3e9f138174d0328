//! Statistics as HAProxy 2.6 reports them: one row per frontend, server and backend, in
//! configuration order, with HAProxy's columns ([`fields`]), rendered as CSV (`show stat`,
//! the stats page's `;csv`), typed lines (`show stat typed`) or JSON (`show stat json`);
//! and the process figures of `show info` ([`info`]).
//!
//! Invariants:
//! - Rows are built from the per-worker counters summed on read; nothing here is written on
//!   the data path. The only writer is [`sample`], which raises the sampled maxima.
//! - A column is filled on exactly the rows HAProxy 2.6 fills it on, and left empty on the
//!   others, so that tools reading HAProxy's CSV find the same shape.

pub mod errors;
pub mod fields;
pub mod info;
mod keywords;
pub mod page;
pub mod prometheus;
mod render;
mod row;

use std::sync::atomic::Ordering;

pub use self::fields::{Field, Ty, FIELDS};
pub use self::keywords::{GLOBAL_KEYWORDS, KEYWORDS};
pub use self::render::{csv, json, typed};
pub use self::row::{Cell, Kind, Row};
use crate::conf::stream::Mode;
use crate::conf::{Backend, Frontend};
use crate::runtime::counters::Counter;
use crate::runtime::{
    clock_ms, BackendState, FrontendState, PerWorker, Process, ProxyCounters, ServerCounters,
    ServerState, Timing, Traffic,
};

/// Which rows a `show stat` asks for: a proxy (by name or id, `None` for all), a mask of
/// row types, a server id (`None` for all).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub proxy: Option<String>,
    pub types: Option<u32>,
    pub sid: Option<u32>,
}

impl Filter {
    fn proxy_matches(&self, name: &str, iid: u32) -> bool {
        self.proxy
            .as_deref()
            .is_none_or(|p| p == name || p.parse::<u32>().is_ok_and(|id| id == iid))
    }

    fn keeps(&self, row: &Row) -> bool {
        self.types.is_none_or(|m| m & row.kind.mask() != 0)
            && self
                .sid
                .is_none_or(|s| row.kind != Kind::Server || row.sid == s)
    }
}

/// Every row the filter keeps, in configuration order: for each proxy section, its
/// frontend, then its servers, then its backend.
pub fn collect(p: &Process, filter: &Filter) -> Vec<Row> {
    let now = clock_ms();
    // (section order, side: 0 frontend / 1 backend, index)
    let mut proxies: Vec<(usize, u8, usize)> = p
        .config
        .frontends
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.disabled)
        .map(|(i, f)| (f.order, 0, i))
        .chain(
            p.config
                .backends
                .iter()
                .enumerate()
                .filter(|(_, b)| !b.disabled)
                .map(|(i, b)| (b.order, 1, i)),
        )
        .collect();
    proxies.sort_unstable();
    let mut rows = Vec::new();
    for (_, side, i) in proxies {
        if side == 0 {
            let (fe, st) = (&p.config.frontends[i], &p.state.frontends[i]);
            if filter.proxy_matches(&fe.name, fe.id) {
                rows.push(frontend_row(p, i, fe, st, now));
                if fe.listen.socket_stats {
                    for (li, (bind, ls)) in
                        fe.listen.binds.iter().zip(st.listeners.iter()).enumerate()
                    {
                        rows.push(listener_row(fe, li, bind, ls));
                    }
                }
            }
        } else {
            let (be, st) = (&p.config.backends[i], &p.state.backends[i]);
            if !filter.proxy_matches(&be.name, be.id) {
                continue;
            }
            for (_, srv, sst) in st.live(be) {
                rows.push(server_row(p, be, srv, sst, now));
            }
            rows.push(backend_row(p, be, st, now));
        }
    }
    rows.retain(|r| filter.keeps(r));
    rows
}

/// Raises the sampled maxima (rates, and a backend's sessions at once): called by one
/// worker a few times a second.
pub fn sample(p: &Process) {
    let now = clock_ms();
    let all_fe = |f: fn(&ProxyCounters) -> &crate::freq::PerSecond| -> u64 {
        p.state
            .frontends
            .iter()
            .map(|st| rate(&st.counters, f, now))
            .sum()
    };
    let figures = &p.figures;
    figures
        .peaks
        .connection_rate
        .note(all_fe(|k| &k.connection_rate));
    figures.peaks.session_rate.note(all_fe(|k| &k.session_rate));
    let out: u64 = p
        .state
        .frontends
        .iter()
        .map(|st| st.counters.sum(|k| &k.traffic.bytes_out))
        .sum();
    let mut last = figures
        .bytes_out_at
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if last.1 != 0 && now > last.1 {
        let rate = out.saturating_sub(last.0) * 1000 / (now - last.1);
        figures.bytes_out_rate.store(rate, Ordering::Relaxed);
    }
    *last = (out, now);
    drop(last);
    for st in p.state.frontends.iter() {
        let c = &st.counters;
        st.peaks
            .session_rate
            .note(rate(c, |k| &k.session_rate, now));
        st.peaks
            .connection_rate
            .note(rate(c, |k| &k.connection_rate, now));
        st.peaks
            .request_rate
            .note(rate(c, |k| &k.request_rate, now));
    }
    for st in p.state.backends.iter() {
        st.peaks
            .session_rate
            .note(rate(&st.counters, |k| &k.session_rate, now));
        st.peaks.sessions.note(st.in_flight() as u64);
        st.peaks.queued.note(queued(st) as u64);
        for s in st.servers.iter() {
            s.peaks
                .session_rate
                .note(s.counters.iter().map(|k| k.rate.per_sec(now)).sum());
        }
    }
}

/// `clear counters`: the maxima start again. With `all`, every counter does.
pub fn clear(p: &Process, all: bool) {
    for st in p.state.frontends.iter() {
        st.peaks.reset();
        if all {
            st.counters.clear();
        }
    }
    for st in p.state.backends.iter() {
        st.peaks.reset();
        if all {
            st.counters.clear();
        }
        for s in st.servers.iter() {
            s.peaks.reset();
            if all {
                s.counters.clear();
            }
        }
    }
}

fn rate<T>(c: &PerWorker<T>, f: impl Fn(&T) -> &crate::freq::PerSecond, now: u64) -> u64 {
    c.iter().map(|k| f(k).per_sec(now)).sum()
}

fn queued(st: &BackendState) -> usize {
    st.servers
        .iter()
        .map(|s| s.queue.waiting.load(Ordering::Relaxed))
        .sum()
}

/// A proxy mode as HAProxy names it.
pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Http => "http",
        Mode::Tcp => "tcp",
    }
}

/// Seconds since a [`clock_ms`] stamp, -1 for never (`lastsess`).
fn since(stamp: u64, now: u64) -> i64 {
    if stamp == 0 {
        -1
    } else {
        (now.saturating_sub(stamp) / 1000) as i64
    }
}

/// The columns HAProxy fills with zeros for features sluice does not have yet (TLS,
/// HTTP/2, caching, tcp-request rules), on the rows it fills them on.
fn zeros(row: &mut Row, names: &[&str]) {
    for n in names {
        row.num(n, 0);
    }
}

/// The counters of HAProxy's statistics modules that a row has figures for.
#[derive(Debug, Default)]
struct Modules {
    /// Open and total HTTP/1 connections, bytes in and out.
    h1: Option<(u64, u64, u64, u64)>,
    /// TLS handshakes, resumed ones, failed ones.
    tls: Option<(u64, u64, u64)>,
    /// HTTP/2: open and total connections, then the frame counts in [`H2_FRAMES`]'s order.
    h2: Option<(u64, u64, [u64; H2_FRAMES.len()])>,
}

/// Where a counter of a proxy's is.
type Getter = fn(&ProxyCounters) -> &Counter;

/// The HTTP/2 module's frame counters and where each comes from.
const H2_FRAMES: [(&str, Getter); 9] = [
    ("h2_headers_rcvd", |k| &k.h2.headers_rcvd),
    ("h2_data_rcvd", |k| &k.h2.data_rcvd),
    ("h2_settings_rcvd", |k| &k.h2.settings_rcvd),
    ("h2_rst_stream_rcvd", |k| &k.h2.rst_stream_rcvd),
    ("h2_goaway_rcvd", |k| &k.h2.goaway_rcvd),
    ("h2_detected_conn_protocol_errors", |k| &k.h2.conn_proto_err),
    ("h2_detected_strm_protocol_errors", |k| &k.h2.strm_proto_err),
    ("h2_rst_stream_resp", |k| &k.h2.rst_stream_resp),
    ("h2_goaway_resp", |k| &k.h2.goaway_resp),
];

impl Modules {
    /// The TLS and HTTP/2 figures of a frontend or a listener.
    fn of(c: &PerWorker<ProxyCounters>, h2_open: Option<u64>) -> Modules {
        Modules {
            h1: None,
            tls: Some((
                c.sum(|k| &k.tls_handshakes),
                c.sum(|k| &k.tls_reused),
                c.sum(|k| &k.tls_failed),
            )),
            h2: h2_open.map(|open| {
                (
                    open,
                    c.sum(|k| &k.h2_connections),
                    H2_FRAMES.map(|(_, get)| c.sum(get)),
                )
            }),
        }
    }
}

/// The module counters after the separator: all of them on proxies; the TLS ones on servers
/// and listeners.
fn module_counters(row: &mut Row, m: Modules) {
    let first = fields::SEPARATOR + 1;
    let last = if matches!(row.kind, Kind::Server | Kind::Listener) {
        first + 3
    } else {
        FIELDS.len()
    };
    for i in first..last {
        row.cells[i] = Some(Cell::Num(0));
    }
    row.cells[fields::SEPARATOR] = Some(Cell::Text("-".into()));
    if let Some((conns, total, bin, bout)) = m.h1 {
        row.num("h1_open_connections", conns);
        row.num("h1_total_connections", total);
        row.num("h1_bytes_in", bin);
        row.num("h1_bytes_out", bout);
    }
    if let Some((sessions, reused, failed)) = m.tls {
        row.num("ssl_sess", sessions);
        row.num("ssl_reused_sess", reused);
        row.num("ssl_failed_handshake", failed);
    }
    if let Some((open, total, frames)) = m.h2 {
        row.num("h2_open_connections", open);
        row.num("h2_total_connections", total);
        for ((name, _), n) in H2_FRAMES.iter().zip(frames) {
            row.num(name, n);
        }
    }
}

/// Sessions, bytes and denials: what proxies and listeners both count.
fn sessions_and_bytes(row: &mut Row, c: &PerWorker<ProxyCounters>) {
    row.num("stot", c.sum(|k| &k.traffic.sessions));
    row.num("bin", c.sum(|k| &k.traffic.bytes_in));
    row.num("bout", c.sum(|k| &k.traffic.bytes_out));
    row.num("dreq", c.sum(|k| &k.denied_requests));
    row.num("dresp", c.sum(|k| &k.denied_responses));
}

fn proxy_traffic(row: &mut Row, c: &PerWorker<ProxyCounters>, http: bool) {
    sessions_and_bytes(row, c);
    row.num("comp_in", c.sum(|k| &k.comp_in));
    row.num("comp_out", c.sum(|k| &k.comp_out));
    row.num("comp_byp", c.sum(|k| &k.comp_byp));
    row.num("comp_rsp", c.sum(|k| &k.comp_rsp));
    row.num("eint", c.sum(|k| &k.traffic.internal_errors));
    zeros(row, &["wrew"]);
    if http {
        for (i, name) in HRSP.iter().enumerate() {
            row.num(name, c.sum(|k| &k.traffic.status.0[i]));
        }
        row.num("cache_lookups", c.sum(|k| &k.cache_lookups));
        row.num("cache_hits", c.sum(|k| &k.cache_hits));
    }
}

pub(crate) const HRSP: [&str; 6] = [
    "hrsp_1xx",
    "hrsp_2xx",
    "hrsp_3xx",
    "hrsp_4xx",
    "hrsp_5xx",
    "hrsp_other",
];

fn frontend_row(p: &Process, i: usize, fe: &Frontend, st: &FrontendState, now: u64) -> Row {
    let mut r = Row::new(Kind::Frontend, fe.id, 0);
    let c = &st.counters;
    let http = fe.stream.mode == Mode::Http;
    r.text("pxname", &fe.name);
    r.text("svname", "FRONTEND");
    r.num("scur", st.conns.load(Ordering::Relaxed));
    r.num("smax", st.peaks.sessions.get());
    r.num("slim", p.admission.frontend_limit(i));
    proxy_traffic(&mut r, c, http);
    r.num("ereq", c.sum(|k| &k.request_errors));
    r.text(
        "status",
        if p.stopping.load(Ordering::Relaxed) {
            "STOP"
        } else if st.paused.load(Ordering::Relaxed) {
            // `disable frontend`.
            "PAUSED"
        } else {
            "OPEN"
        },
    );
    ids(&mut r);
    let sess_rate = rate(c, |k| &k.session_rate, now);
    let conn_rate = rate(c, |k| &k.connection_rate, now);
    let req_rate = rate(c, |k| &k.request_rate, now);
    r.num("rate", sess_rate);
    r.num("rate_lim", fe.listen.rate_limit.unwrap_or(0));
    r.num("rate_max", st.peaks.session_rate.get().max(sess_rate));
    r.num("req_rate", req_rate);
    r.num("req_rate_max", st.peaks.request_rate.get().max(req_rate));
    r.num("req_tot", c.sum(|k| &k.requests));
    r.text("mode", mode_name(fe.stream.mode));
    r.num("conn_rate", conn_rate);
    r.num(
        "conn_rate_max",
        st.peaks.connection_rate.get().max(conn_rate),
    );
    r.num("conn_tot", c.sum(|k| &k.connections));
    if http {
        r.num("intercepted", c.sum(|k| &k.intercepted));
    }
    zeros(&mut r, &["dcon", "dses"]);
    let h2_open = st.h2_conns.load(Ordering::Relaxed) as u64;
    let mut m = Modules::of(c, Some(h2_open));
    m.h1 = http.then(|| {
        (
            (st.conns.load(Ordering::Relaxed) as u64).saturating_sub(h2_open),
            c.sum(|k| &k.connections)
                .saturating_sub(c.sum(|k| &k.h2_connections)),
            c.sum(|k| &k.traffic.bytes_in),
            c.sum(|k| &k.traffic.bytes_out),
        )
    });
    module_counters(&mut r, m);
    r
}

/// A listener's row (`option socket-stats`).
fn listener_row(
    fe: &Frontend,
    index: usize,
    bind: &crate::conf::listen::Bind,
    st: &crate::runtime::ListenerState,
) -> Row {
    let mut r = Row::new(Kind::Listener, fe.id, index as u32 + 1);
    let c = &st.counters;
    r.text("pxname", &fe.name);
    r.text(
        "svname",
        bind.name
            .clone()
            .unwrap_or_else(|| format!("sock-{}", index + 1)),
    );
    r.num("scur", st.conns.load(Ordering::Relaxed));
    r.num("smax", st.peak.get());
    r.num("slim", 0);
    sessions_and_bytes(&mut r, c);
    r.num("ereq", c.sum(|k| &k.request_errors));
    r.text("status", "OPEN");
    ids(&mut r);
    r.text("addr", bind.spec.to_string());
    r.text("mode", mode_name(fe.stream.mode));
    zeros(&mut r, &["dcon", "dses", "wrew"]);
    r.num("eint", c.sum(|k| &k.traffic.internal_errors));
    module_counters(&mut r, Modules::of(c, None));
    r
}

/// `pid` (the process number, 1), `iid`, `sid`, `type`.
fn ids(r: &mut Row) {
    r.num("pid", 1);
    r.num("iid", r.iid);
    r.num("sid", r.sid);
    r.num("type", r.kind.code());
}

/// What a backend's or server's transactions add up to: aborts, the last one, and the
/// averages and maxima of the four timings.
fn transactions<T>(
    r: &mut Row,
    c: &PerWorker<T>,
    t: impl Fn(&T) -> &Traffic,
    peaks: &crate::runtime::Peaks,
    now: u64,
) {
    r.num("cli_abrt", c.sum(|k| &t(k).client_aborts));
    r.num("srv_abrt", c.sum(|k| &t(k).server_aborts));
    let last = c.iter().map(|k| t(k).last_session.get()).max();
    r.num("lastsess", since(last.unwrap_or(0), now));
    let avg = |f: fn(&crate::runtime::Timings) -> &Timing| {
        Timing::average(c.iter().map(|s| f(&t(s).timings)))
    };
    r.num("qtime", avg(|t| &t.queue));
    r.num("ctime", avg(|t| &t.connect));
    r.num("rtime", avg(|t| &t.response));
    r.num("ttime", avg(|t| &t.total));
    r.num("qtime_max", peaks.queue_ms.get());
    r.num("ctime_max", peaks.connect_ms.get());
    r.num("rtime_max", peaks.response_ms.get());
    r.num("ttime_max", peaks.total_ms.get());
}

fn server_row(
    p: &Process,
    be: &Backend,
    srv: &crate::conf::Server,
    st: &ServerState,
    now: u64,
) -> Row {
    let mut r = Row::new(Kind::Server, be.id, srv.id);
    let c: &PerWorker<ServerCounters> = &st.counters;
    let http = be.stream.mode == Mode::Http;
    r.text("pxname", &be.name);
    r.text("svname", &srv.name);
    r.num("qcur", st.queue.waiting.load(Ordering::Relaxed));
    r.num("qmax", st.peaks.queued.get());
    r.num("scur", st.in_flight.load(Ordering::Relaxed));
    r.num("smax", st.peaks.sessions.get());
    // The limit now (`set maxconn server` may have changed it; 0 lifted it).
    let limit = st.queue.slots.as_ref().map_or(0, |l| l.get());
    if limit > 0 {
        r.num("slim", limit);
    }
    r.num("stot", c.sum(|k| &k.traffic.sessions));
    r.num("bin", c.sum(|k| &k.traffic.bytes_in));
    r.num("bout", c.sum(|k| &k.traffic.bytes_out));
    r.num("dresp", c.sum(|k| &k.denied_responses));
    r.num("econ", c.sum(|k| &k.connect_errors));
    r.num("eresp", c.sum(|k| &k.response_errors));
    r.num("wretr", c.sum(|k| &k.retries));
    r.num("wredis", c.sum(|k| &k.redispatches));
    r.text(
        "status",
        st.status(srv.check.as_ref().map(|c| (c.rise, c.fall))),
    );
    // The effective weight (ramping with slowstart), and the one set by the user.
    r.num("weight", st.reported_weight());
    r.num("uweight", st.weight());
    // `slowstart`: how far the ramp has gone, while it goes.
    if st.usable() && st.weight() > 0 && st.effective_weight() < st.weight() {
        r.num("throttle", st.effective_weight() * 100 / st.weight());
    }
    r.num("act", u8::from(!srv.backup));
    r.num("bck", u8::from(srv.backup));
    r.num(
        "lastchg",
        st.last_change.lock().map_or(0, |t| t.elapsed().as_secs()),
    );
    if let Some(m) = srv.maxqueue {
        r.num("qlimit", m);
    }
    ids(&mut r);
    r.num("lbtot", c.sum(|k| &k.requests));
    let sess_rate: u64 = c.iter().map(|k| k.rate.per_sec(now)).sum();
    r.num("rate", sess_rate);
    r.num("rate_max", st.peaks.session_rate.get().max(sess_rate));
    if http {
        for (i, name) in HRSP.iter().enumerate() {
            r.num(name, c.sum(|k| &k.traffic.status.0[i]));
        }
        r.num("req_tot", c.sum(|k| &k.requests));
    }
    transactions(&mut r, c, |k| &k.traffic, &st.peaks, now);
    // A unix socket server has no address to show: HAProxy says `unix`.
    r.text(
        "addr",
        match srv.unix {
            Some(_) => "unix".to_string(),
            None => st.addr().to_string(),
        },
    );
    r.text("mode", mode_name(be.stream.mode));
    r.num("wrew", 0);
    r.num("connect", c.sum(|k| &k.connect));
    r.num("reuse", c.sum(|k| &k.reuse));
    r.num("eint", c.sum(|k| &k.traffic.internal_errors));
    let pool = &st.idle.stats;
    let idle = pool.idle_cur.load(Ordering::Relaxed);
    let safe = pool.safe_cur.load(Ordering::Relaxed).min(idle);
    r.num("srv_icur", idle);
    if let Some(m) = srv.pool.max_conn {
        r.num("src_ilim", m);
    }
    r.num("idle_conn_cur", idle - safe);
    r.num("safe_conn_cur", safe);
    r.num("used_conn_cur", pool.used_cur.load(Ordering::Relaxed));
    r.num("need_conn_est", pool.need_est.load(Ordering::Relaxed));
    if let Some((b, s)) = srv.track {
        let tb = &p.config.backends[b];
        r.text("tracked", format!("{}/{}", tb.name, tb.servers[s].name));
    }
    checks(&mut r, srv, st);
    module_counters(&mut r, Modules::default());
    r
}

/// The health-check and agent columns of a server.
fn checks(r: &mut Row, srv: &crate::conf::Server, st: &ServerState) {
    if let (Some(c), Some(cs)) = (&srv.check, &st.check) {
        r.num("chkfail", cs.failed.load(Ordering::Relaxed));
        if c.observe.is_some() {
            r.num("hanafail", cs.analyze_failures.load(Ordering::Relaxed));
        }
        r.num("chkdown", cs.downs.load(Ordering::Relaxed));
        r.num("downtime", st.downtime().as_secs());
        r.num("check_rise", c.rise);
        r.num("check_fall", c.fall);
        // HAProxy counts health from 0 to rise+fall-1 and shows it as is.
        r.num("check_health", cs.health.load(Ordering::Relaxed));
        if let Some(last) = cs.last.lock().ok().and_then(|l| l.clone()) {
            r.text("check_status", last.status);
            r.num("check_duration", last.duration_ms);
            r.text("check_desc", last.reason);
            if let Some(code) = last.code {
                r.num("check_code", code);
            }
            if let Some(info) = last.info {
                // What the check found, without the CSV's separators.
                r.text("last_chk", info.replace(',', " "));
            }
        }
    }
    if let Some(a) = &st.agent {
        let up = a.up.load(Ordering::Relaxed);
        r.num("agent_rise", 1);
        r.num("agent_fall", 1);
        r.num("agent_health", u8::from(up));
        if let Some(last) = a.last.lock().ok().and_then(|l| l.clone()) {
            r.text("agent_status", last.status);
            r.num("agent_duration", last.duration_ms);
            r.text("agent_desc", last.reason);
            if let Some(info) = last.info {
                r.text("last_agt", info.replace(',', " "));
            }
        }
    }
}

fn backend_row(p: &Process, be: &Backend, st: &BackendState, now: u64) -> Row {
    let mut r = Row::new(Kind::Backend, be.id, 0);
    let c = &st.counters;
    let http = be.stream.mode == Mode::Http;
    r.text("pxname", &be.name);
    r.text("svname", "BACKEND");
    let queued = queued(st);
    r.num("qcur", queued);
    r.num("qmax", st.peaks.queued.get().max(queued as u64));
    let in_flight = st.in_flight();
    r.num("scur", in_flight);
    r.num("smax", st.peaks.sessions.get().max(in_flight as u64));
    // `fullconn`, else HAProxy's default for a backend: a tenth of the process's limit.
    let slim = be
        .fullconn
        .unwrap_or((p.admission.global_limit() / 10).max(1));
    r.num("slim", slim);
    proxy_traffic(&mut r, c, http);
    let sum = |f: fn(&ServerCounters) -> &crate::runtime::Counter| -> u64 {
        st.servers.iter().map(|s| s.counters.sum(f)).sum()
    };
    r.num("econ", sum(|k| &k.connect_errors));
    r.num("eresp", sum(|k| &k.response_errors));
    r.num("wretr", sum(|k| &k.retries));
    r.num("wredis", sum(|k| &k.redispatches));
    r.num("connect", sum(|k| &k.connect));
    r.num("reuse", sum(|k| &k.reuse));
    r.num("lbtot", sum(|k| &k.requests));
    let usable: Vec<(&crate::conf::Server, &ServerState)> = be
        .servers
        .iter()
        .zip(st.servers.iter().map(|s| &**s))
        .filter(|(_, s)| s.usable())
        .collect();
    let down = usable.is_empty();
    r.text("status", if down { "DOWN" } else { "UP" });
    r.num("weight", st.usable_weight(be));
    // As HAProxy's `tot_uweight`: the user weights of the usable active servers.
    r.num(
        "uweight",
        usable
            .iter()
            .filter(|(c, _)| !c.backup)
            .map(|(_, s)| u64::from(s.weight()))
            .sum::<u64>(),
    );
    r.num("act", usable.iter().filter(|(c, _)| !c.backup).count());
    r.num("bck", usable.iter().filter(|(c, _)| c.backup).count());
    r.num("chkdown", st.downs.load(Ordering::Relaxed));
    r.num(
        "lastchg",
        st.last_change.lock().map_or(0, |t| t.elapsed().as_secs()),
    );
    r.num("downtime", st.downtime.total().as_secs());
    ids(&mut r);
    let sess_rate = rate(c, |k| &k.session_rate, now);
    r.num("rate", sess_rate);
    r.num("rate_max", st.peaks.session_rate.get().max(sess_rate));
    if http {
        r.num("req_tot", c.sum(|k| &k.requests));
    }
    transactions(&mut r, c, |k| &k.traffic, &st.peaks, now);
    r.text("mode", mode_name(be.stream.mode));
    r.text("algo", be.algo.name());
    // HAProxy's aggregated states: 0 while at least one server is up.
    for n in [
        "agg_server_status",
        "agg_server_check_status",
        "agg_check_status",
    ] {
        r.num(n, u8::from(down));
    }
    let h1 = http.then(|| {
        (
            0,
            0,
            c.sum(|k| &k.traffic.bytes_in),
            c.sum(|k| &k.traffic.bytes_out),
        )
    });
    module_counters(
        &mut r,
        Modules {
            h1,
            ..Modules::default()
        },
    );
    r
}
