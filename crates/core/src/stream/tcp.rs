//! `mode tcp`: a client connection is relayed as bytes to a server chosen by the backend's
//! balancing, through the same queueing and connection-retry policy as HTTP (`connect`),
//! with `timeout connect` and the client/server inactivity timeouts; half-closes are passed
//! on (`tunnel`).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::connect::{self, Attempts};
use super::report::Tally;
use super::tunnel::Moved;
use crate::balance::{self, PickKey};
use crate::buffer::Buf;
use crate::conf::rules::RuleSets;
use crate::rules::{tcp_inspect, Inspected, Level};
use crate::runtime::Worker;
use crate::sample::payload::Payload;
use crate::sample::{Ctx, StreamVars};
use crate::stick::Counter;
use crate::transport::Conn;

/// Relays a client connection of TCP frontend `fe`. When the backend its rules choose is in
/// HTTP mode, the connection is handed back instead, with what was read of it, to be served
/// as HTTP by that backend (HAProxy's upgrade of a TCP stream).
pub(crate) async fn serve(
    w: &Rc<Worker>,
    client: Conn,
    peer: SocketAddr,
    fe: usize,
    info: &crate::runtime::SessionInfo,
    vars: &StreamVars,
) -> Option<(Conn, Buf, usize)> {
    let config = w.config();
    let frontend = &config.frontends[fe];
    let started = Instant::now();
    let date = std::time::SystemTime::now();
    // The request capture slots `tcp-request content capture` fills.
    vars.captured.borrow_mut().req = vec![None; frontend.log.captures_req.len()];
    // What the client sends while the content rules decide is kept here and relayed first.
    let mut cbuf = Buf::default();
    let look = Inspecting {
        w,
        peer,
        fe,
        arrival: crate::sample::Arrival {
            thread: w.tid,
            listener: info.listener,
        },
        backend: None,
        vars,
    };
    let client = look.admits(client, &mut cbuf, &frontend.rules).await?;
    let Some(backend) = look.switch(&client, cbuf.bytes()) else {
        cbuf.clear(&w.bufs);
        return None;
    };
    let be = &config.backends[backend];
    if be.stream.mode == crate::conf::stream::Mode::Http {
        return Some((client, cbuf, backend));
    }
    let look = Inspecting {
        backend: Some(backend),
        ..look
    };
    let _trace = (!frontend.traces.is_empty() || !be.traces.is_empty()).then(|| {
        let trace = crate::filters::StreamTrace {
            frontend: &frontend.traces,
            backend: &be.traces,
            stream: crate::filters::next_stream(&w.process),
            mode: "TCP",
            routed: true,
        };
        trace.start();
        trace.set_backend(&be.name);
        crate::filters::Stopping(trace)
    });
    relay_to(w, client, cbuf, look, info, (started, date)).await;
    None
}

/// The TCP session once its backend is chosen: the backend's content rules, a server,
/// then the relay, counted and logged.
async fn relay_to(
    w: &Rc<Worker>,
    client: Conn,
    mut cbuf: Buf,
    look: Inspecting<'_>,
    info: &crate::runtime::SessionInfo,
    (started, date): (Instant, std::time::SystemTime),
) {
    let Inspecting {
        peer,
        fe,
        vars,
        arrival,
        ..
    } = look;
    let backend = look.backend.unwrap_or_default();
    let config = w.config();
    let frontend = &config.frontends[fe];
    let be = &config.backends[backend];
    let mut sbuf = Buf::default();

    let Some(mut client) = look.admits(client, &mut cbuf, &be.rules).await else {
        return;
    };
    // `tcp-request content set-src`: the client the logs and the server see.
    let peer = vars.set_src.get().unwrap_or(peer);
    // Who it is, and for `%fi`/`%fp` where it arrived (asked of the kernel only then).
    let format = frontend.log.format.as_ref();
    let dst = format
        .and_then(|f| match f {
            crate::log::Format::Custom(t) => super::txn_log::needs_dst(t).then_some(()),
            _ => None,
        })
        .and_then(|()| client.local_addr().ok());
    let who = (crate::log::Client::of(&client, peer, info.listener), dst);
    // `balance rdp-cookie`: the cookie of the RDP connection request, once it arrived
    // (within `tcp-request inspect-delay`).
    let mut rdp = None;
    let rdp_algo = matches!(be.algo, crate::balance::Algo::RdpCookie(_));
    if (rdp_algo || be.persist.rdp_cookie.is_some()) && cbuf.is_empty() {
        let wait = frontend.rules.inspect_delay.unwrap_or_default();
        let _ = tokio::time::timeout(wait, cbuf.fill(&client, &w.bufs)).await;
    }
    if let crate::balance::Algo::RdpCookie(name) = &be.algo {
        rdp = balance::rdp_cookie(cbuf.bytes(), name);
    }
    let key = PickKey {
        client: peer.ip(),
        target: b"",
        extra: rdp,
    };
    // `persist rdp-cookie`: the server the cookie names, before any balancing.
    let st = &w.state().backends[backend];
    let persisted = crate::persist::rdp_server(be, st, cbuf.bytes());
    let Some(server) = persisted.or_else(|| balance::pick(be, st, &key, &w.lb)) else {
        let at = Attempts::new(0);
        tally(&at, started, Moved::default(), *b"SC").count(
            w,
            (fe, info.listener),
            Some(backend),
            None,
        );
        let extras = look.log_extras(&client, None);
        return log(
            w, fe, backend, None, who, &extras, date, started, &at, 0, *b"SC",
        );
    };
    let mut at = Attempts::new(server);
    let abort_on = be.abortonclose.then_some(&client);
    let facts = connect::Client {
        conn: &client,
        peer,
        unique_id: None,
    };
    let got = connect::establish(w, backend, server, &key, None, abort_on, &facts, &mut at).await;
    let (mut conn, occupancy) = match got {
        Ok(c) => c,
        Err(e) => {
            let server = Some(at.server);
            tally(&at, started, Moved::default(), e.term()).count(
                w,
                (fe, info.listener),
                Some(backend),
                None,
            );
            let extras = look.log_extras(&client, server);
            return log(
                w,
                fe,
                backend,
                server,
                who,
                &extras,
                date,
                started,
                &at,
                0,
                e.term(),
            );
        }
    };
    let cx = Ctx {
        backend: Some(backend),
        server: Some(at.server),
        ..Ctx::of_connection(&w.process, fe, arrival, peer, &client, vars)
    };
    let rules = crate::conf::rules::RuleSets::tcp_response_of(&be.rules, &frontend.rules);
    let delay = rules.response_inspect_delay;
    if !inspect_response(
        &cx,
        &mut conn.conn,
        &mut sbuf,
        &rules.tcp_response,
        delay,
        w,
    )
    .await
    {
        // `tcp-response content reject`: both sides are closed.
        sbuf.clear(&w.bufs);
        conn.conn.abort();
        client.abort();
        return;
    }
    info.route(Some(backend), Some(at.server));
    info.busy.store(true, std::sync::atomic::Ordering::Relaxed);
    // `timeout tunnel` once the session relays (HAProxy's rule in TCP), else each side's.
    let limits = super::tunnel::Limits::new(
        be.timeout_tunnel,
        (frontend.stream.timeout_client, be.timeout_server),
        (frontend.stream.independent, be.stream.independent),
        (frontend.stream.timeout_client_fin, be.timeout_server_fin),
    );
    // `on-marked-down shutdown-sessions` ends the relay.
    let state = &w.state().backends[backend].servers[at.server];
    let killable = crate::check::killable(be, at.server);
    let kill = async {
        match killable {
            true => state.kill.notified().await,
            false => std::future::pending().await,
        }
    };
    // `option contstats`: the statistics count the bytes as they move, not at the end.
    let reported = std::cell::Cell::new((0u64, 0u64));
    let report = |to_b: u64, to_a: u64| {
        let (i, o) = reported.get();
        reported.set((i + to_b, o + to_a));
        let traffic = (to_b, to_a);
        Tally::add_bytes(w, (fe, info.listener), backend, at.server, traffic);
    };
    let progress: super::tunnel::Progress = frontend.stream.contstats.then_some(&report);
    let splice = super::tunnel::splicing(w, frontend, be);
    let spliced = super::tunnel::spliced(w, splice, (&client, &conn.conn));
    let relay = super::tunnel::relay(
        &mut client,
        &mut conn.conn,
        (&mut cbuf, &mut sbuf),
        (&w.bufs, spliced),
        limits,
        progress,
    );
    // An idle session ends on the side that was inactive for its limit (HAProxy's `cD`,
    // `sD`).
    let (moved, term) = tokio::select! {
        moved = relay => {
            let term = match moved.idle {
                Some(super::tunnel::Side::A) => *b"cD",
                Some(super::tunnel::Side::B) => *b"sD",
                None => *b"--",
            };
            (moved, term)
        }
        _ = kill => (Default::default(), *b"KD"),
    };
    let bytes = moved.to_a;
    let null = moved.to_b == 0;
    let traffic = [
        (Counter::BytesInCnt, moved.to_b),
        (Counter::BytesInRate, moved.to_b),
        (Counter::BytesOutCnt, moved.to_a),
        (Counter::BytesOutRate, moved.to_a),
    ];
    vars.count(&traffic, crate::runtime::clock_ms());
    // (What `contstats` counted already is not counted again.)
    let (counted_in, counted_out) = reported.get();
    let unreported = Moved {
        to_b: moved.to_b - counted_in,
        to_a: moved.to_a - counted_out,
        ..moved
    };
    tally(&at, started, unreported, term).count(
        w,
        (fe, info.listener),
        Some(backend),
        Some(at.server),
    );
    cbuf.clear(&w.bufs);
    sbuf.clear(&w.bufs);
    // The session is over: as in HAProxy's line, it no longer counts on its server.
    drop(occupancy);
    if !(null && frontend.log.dont_log_null) {
        let extras = look.log_extras(&client, Some(at.server));
        log(
            w,
            fe,
            backend,
            Some(at.server),
            who,
            &extras,
            date,
            started,
            &at,
            bytes,
            term,
        );
    }
}

/// What a TCP log line takes from the session when it ends: its format's `%[...]` samples
/// (the connection, its backend and server) and its capture slots
/// (`tcp-request content capture`).
struct LogExtras {
    samples: Vec<String>,
    captures: Vec<Option<String>>,
    /// `set-log-level` (`Some(None)`: no line).
    level: Option<Option<u8>>,
}

/// Where a TCP session stands while its content rules and switching rules read what the
/// client sent.
#[derive(Clone, Copy)]
struct Inspecting<'a> {
    w: &'a Worker,
    peer: SocketAddr,
    fe: usize,
    arrival: crate::sample::Arrival,
    backend: Option<usize>,
    vars: &'a StreamVars,
}

impl Inspecting<'_> {
    /// The samples and captures of the session's log line, now.
    fn log_extras(&self, client: &Conn, server: Option<usize>) -> LogExtras {
        let config = self.w.config();
        let tokens = match &config.frontends[self.fe].log.format {
            Some(crate::log::Format::Custom(t)) if !self.w.process.loggers[self.fe].is_empty() => {
                t.as_slice()
            }
            _ => &[],
        };
        let cx = Ctx {
            backend: self.backend,
            server,
            ..self.ctx(client)
        };
        LogExtras {
            samples: super::txn_log::render_samples(tokens, &cx),
            captures: self.vars.captured.borrow().req.clone(),
            level: self.vars.log_level.get(),
        }
    }
}

impl Inspecting<'_> {
    /// Runs a proxy's `tcp-request content` rules ([`Self::inspect`]) and gives the
    /// connection back if they let it through; one they reject is closed at once, what it
    /// sent dropped.
    async fn admits(&self, mut client: Conn, buf: &mut Buf, rules: &RuleSets) -> Option<Conn> {
        if self
            .inspect(&mut client, buf, &rules.tcp_content, rules.inspect_delay)
            .await
        {
            return Some(client);
        }
        buf.clear(&self.w.bufs);
        client.abort();
        None
    }

    /// Whether `tcp-request content` rules let the connection through. Bytes are read into
    /// `buf` while a rule's condition needs more of them, until `delay` (`tcp-request
    /// inspect-delay`) ends, the buffer is full or the client has finished; without a
    /// delay the rules decide at once on what is there. Their tracking is the connection's.
    async fn inspect(
        &self,
        client: &mut Conn,
        buf: &mut Buf,
        rules: &[crate::conf::rules::Rule],
        delay: Option<std::time::Duration>,
    ) -> bool {
        if rules.is_empty() {
            return true;
        }
        let decide = |client: &Conn, payload: &Payload<'_>| {
            let cx = Ctx {
                backend: self.backend,
                payload: Some(payload),
                ..self.ctx(client)
            };
            tcp_inspect(rules, &cx, Level::Session)
        };
        inspect_payload((client, buf, &self.w.bufs), delay, decide).await
    }

    /// What the rules see of the connection before its content.
    fn ctx<'c>(&'c self, client: &'c Conn) -> Ctx<'c> {
        Ctx::of_connection(
            &self.w.process,
            self.fe,
            self.arrival,
            self.peer,
            client,
            self.vars,
        )
    }

    /// The backend the frontend's `use_backend` rules choose on what the client sent, else
    /// its default backend.
    fn switch(&self, client: &Conn, sent: &[u8]) -> Option<usize> {
        let config = self.w.config();
        let rules = &config.frontends[self.fe].rules;
        if rules.switching.is_empty() {
            return rules.default_backend;
        }
        let payload = Payload::new(sent, true);
        let cx = Ctx {
            payload: Some(&payload),
            ..self.ctx(client)
        };
        crate::rules::switch(&rules.switching, &cx, &config.backends).or(rules.default_backend)
    }
}

/// Whether `tcp-response content` rules let the session go on, on what the server sent
/// (`res.len`, `res.payload`), read as the request side's rules read the client's
/// ([`inspect_payload`], within `tcp-response inspect-delay`). What was read is relayed to
/// the client first.
async fn inspect_response(
    cx: &Ctx<'_>,
    server: &mut Conn,
    buf: &mut Buf,
    rules: &[crate::conf::rules::Rule],
    delay: Option<std::time::Duration>,
    w: &Worker,
) -> bool {
    if rules.is_empty() {
        return true;
    }
    let decide = |_: &Conn, payload: &Payload<'_>| {
        let cx = Ctx {
            res_payload: Some(payload),
            ..cx.clone()
        };
        tcp_inspect(rules, &cx, Level::Session)
    };
    inspect_payload((server, buf, &w.bufs), delay, decide).await
}

/// Reads `conn` into `buf` while `decide` (content rules on the payload so far) waits for
/// more bytes, until `delay` ends, the buffer is full or the peer has finished; without a
/// delay the rules decide at once on what is there. Whether they let the session go on.
async fn inspect_payload(
    (conn, buf, bufs): (&mut Conn, &mut Buf, &crate::buffer::BufPool),
    delay: Option<std::time::Duration>,
    decide: impl Fn(&Conn, &Payload<'_>) -> Inspected,
) -> bool {
    let until = delay
        .filter(|d| !d.is_zero())
        .map(|d| tokio::time::Instant::now() + d);
    let mut done = false;
    loop {
        let last = done || buf.is_full() || until.is_none_or(|u| tokio::time::Instant::now() >= u);
        match decide(conn, &Payload::new(buf.bytes(), last)) {
            Inspected::Accept => return true,
            Inspected::Reject => return false,
            Inspected::Wait => {}
        }
        let Some(until) = until else {
            return true;
        };
        match tokio::time::timeout_at(until, buf.fill(conn, bufs)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => done = true,
            Err(_) => {}
        }
    }
}

/// What a TCP session adds to the statistics.
fn tally(at: &Attempts, started: Instant, moved: Moved, term: [u8; 2]) -> Tally {
    let now = Instant::now();
    Tally {
        status: None,
        request: false,
        bytes_in: moved.to_b,
        bytes_out: moved.to_a,
        term,
        local: None,
        t_queue: at.t_queue,
        t_connect: at.t_connect,
        t_response: -1,
        t_total: connect::ms(now - started),
        at: now,
    }
}

#[allow(clippy::too_many_arguments)]
fn log(
    w: &Worker,
    fe: usize,
    backend: usize,
    server: Option<usize>,
    (who, dst): (crate::log::Client, Option<std::net::SocketAddr>),
    extras: &LogExtras,
    date: std::time::SystemTime,
    started: Instant,
    at: &Attempts,
    bytes: u64,
    term: [u8; 2],
) {
    let loggers = &w.process.loggers[fe];
    if loggers.is_empty() || extras.level == Some(None) {
        return;
    }
    let config = w.config();
    let (frontend, be) = (&config.frontends[fe], &config.backends[backend]);
    let st = &w.state().backends[backend];
    let rec = crate::log::Record {
        client: who,
        dst,
        date,
        frontend: &frontend.name,
        backend: &be.name,
        server: server.map_or("<NOSRV>", |s| &be.servers[s].name),
        t_request: -1,
        t_queue: at.t_queue.max(0),
        t_connect: at.t_connect,
        t_response: -1,
        t_active: connect::ms(started.elapsed()),
        status: -1,
        bytes,
        term,
        act_conn: w.process.active_total(),
        fe_conn: w.state().frontends[fe].conns.load(Ordering::Relaxed),
        be_conn: st.in_flight(),
        srv_conn: server.map_or(0, |s| st.servers[s].in_flight.load(Ordering::Relaxed)),
        retries: at.retries,
        srv_queue: 0,
        be_queue: 0,
        log_counter: super::txn_log::count_line(
            frontend
                .log
                .format
                .as_ref()
                .unwrap_or(&crate::log::Format::Tcp),
            &w.state().frontends[fe],
        ),
        samples: &extras.samples,
        captures_req: &extras.captures,
        ..crate::log::Record::blank(who, date, &frontend.name)
    };
    let format = frontend
        .log
        .format
        .as_ref()
        .unwrap_or(&crate::log::Format::Tcp);
    let sd = frontend.log.format_sd.as_deref();
    crate::log::emit_at(loggers, (format, sd), &rec, extras.level.flatten());
}
