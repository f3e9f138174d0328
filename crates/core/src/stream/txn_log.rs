//! A transaction's access-log line: what the log keeps of the request before the rules,
//! the samples the format renders at the request and at the response, the counts, and the
//! line itself when the transaction ends.

use sluice_http::RequestView;

use super::report::{Fail, Local, Tally};
use super::session::Session;
use crate::clock;
use crate::conf::Frontend;
use crate::sample::Ctx;

use super::route::Route;
use super::txn::Txn;

impl Txn {
    /// Lets samples read the capture slots (`capture.req.hdr(N)`, `capture.res.hdr(N)`).
    pub(super) fn share_captures(&self, s: &Session) {
        *s.vars.captured.borrow_mut() = crate::sample::Captured {
            req: self.log.captures_req.clone(),
            res: self.log.captures_res.clone(),
        };
    }

    /// What the log keeps of the request head before rules run: its number, captured
    /// headers and unique id.
    pub(super) fn request_log_facts(&mut self, s: &Session, req: &RequestView<'_>) {
        let fe = s.frontend();
        let shows_rt = |t: &[crate::log::Token]| {
            t.iter().any(|t| {
                matches!(
                    t,
                    crate::log::Token::Var(crate::log::Var::RequestCounter, _)
                )
            })
        };
        let custom = match &fe.log.format {
            Some(crate::log::Format::Custom(t)) => Some(t.as_slice()),
            _ => None,
        };
        // The shared counter costs a write to a line every worker writes: only for
        // formats that show it.
        self.log.counter =
            if fe.log.unique_id.as_deref().is_some_and(shows_rt) || custom.is_some_and(shows_rt) {
                s.w.process
                    .figures
                    .request_ids
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            } else {
                s.w.ctx().counters.requests.get()
            };
        if !fe.log.captures_req.is_empty() {
            self.log.captures_req = super::report::captures(&fe.log.captures_req, req.headers());
            self.share_captures(s);
        }
        if let Some((name, len)) = &fe.log.capture_cookie {
            let cookies = req
                .headers()
                .filter(|(n, _)| sluice_http::name_is(n, "cookie"));
            self.log.cookie_req = super::report::capture_cookie(cookies, name, *len, false);
        }
        if let Some(format) = &fe.log.unique_id {
            let date = self.log.date.unwrap_or_else(std::time::SystemTime::now);
            // Its `%[...]` samples read the request as it arrived.
            let samples = render_samples(format, &s.sample_ctx(req, None));
            let rec = crate::log::Record {
                dst: needs_dst(format)
                    .then(|| s.client.local_addr().ok())
                    .flatten(),
                request_counter: self.log.counter,
                samples: &samples,
                ..crate::log::Record::blank(
                    crate::log::Client::of(&s.client, s.peer.get(), s.info.listener),
                    date,
                    &fe.name,
                )
            };
            let id: std::rc::Rc<str> = rec.render_tokens(format).into();
            *s.vars.unique_id.borrow_mut() = Some(id.clone());
            self.log.unique_id = Some(id);
        }
    }

    /// The `%[...]` samples of the frontend's log format, while the request is at hand.
    pub(super) fn render_log_samples(&mut self, s: &Session, req: &RequestView<'_>, route: &Route) {
        let Some(tokens) = log_sample_tokens(s) else {
            return;
        };
        let backend = match route {
            Route::Forward { backend, .. } => Some(*backend),
            Route::Error { backend, .. } => *backend,
            _ => None,
        };
        self.log.samples = render_samples(tokens, &s.sample_ctx(req, backend));
    }

    /// Renders the log format's samples again once the response is in (`cx` sees the
    /// request as sent and the response); see `log_reads_response`.
    pub(super) fn render_log_samples_at_response(&mut self, s: &Session, cx: &Ctx<'_>) {
        if let Some(tokens) = log_sample_tokens(s) {
            self.log.samples = render_samples(tokens, cx);
        }
    }

    /// Counts and logs a transaction that completed.
    pub fn log_done(&self, s: &Session) {
        let term = self.log.term.unwrap_or(*b"--");
        self.count(s, self.log.status, term);
        if !self.log.logged {
            self.emit_log(s, self.log.status, term, false);
        }
    }

    /// Logs a transaction that failed.
    pub fn log_end(&mut self, s: &Session, fail: &Fail) {
        let status = match fail.status {
            Some(st) => {
                self.log.bytes = self.log.received + s.error_page_size(st, self.backend);
                i64::from(st)
            }
            None => self.log.status,
        };
        let term = self.log.term.unwrap_or_else(|| fail.term());
        self.count(s, status, term);
        if !self.log.logged {
            self.emit_log(s, status, term, false);
        }
    }

    /// What the request counts in `bin` and `%U`, as HAProxy counts it: its head's HTX
    /// size, then its body as received; nothing when no head was read.
    pub fn bytes_in(&self, s: &Session) -> u64 {
        let (wire, htx) = self.log.head_in;
        if wire == 0 {
            return 0;
        }
        (s.received - self.log.received_before).saturating_sub(wire) + htx
    }

    /// The line of a request whose head never completed. HAProxy's connection layer answers
    /// those itself, outside any stream: its line counts no bytes, and a client that left
    /// within its head is logged with status 400 though nothing was sent.
    pub fn log_head_failure(&mut self, s: &Session, fail: &Fail) {
        self.log.bytes = 0;
        let term = self.log.term.unwrap_or_else(|| fail.term());
        self.count(s, fail.status.map_or(-1, i64::from), term);
        if !self.log.logged {
            self.emit_log(s, fail.status.map_or(400, i64::from), term, false);
        }
    }

    /// Adds the transaction to the statistics of its frontend, backend and server.
    pub(super) fn count(&self, s: &Session, status: i64, term: [u8; 2]) {
        let lg = &self.log;
        let at = clock::now();
        let ms = |d: std::time::Duration| d.as_millis() as i64;
        // The server counts once a connection to it was made.
        let server = lg.attempts.filter(|a| a.t_connect >= 0).map(|a| a.server);
        Tally {
            status: u16::try_from(status).ok().filter(|&st| st > 0),
            request: lg.parsed,
            bytes_in: self.bytes_in(s),
            bytes_out: lg.bytes,
            term,
            local: lg.local,
            t_queue: lg.attempts.map_or(-1, |a| a.t_queue),
            t_connect: lg.attempts.map_or(-1, |a| a.t_connect),
            t_response: lg.t_response,
            t_total: lg.started.map_or(-1, |a| ms(at - a)),
            at,
        }
        .count(&s.w, (s.fe, s.info.listener), self.backend, server);
    }

    /// Sends the access-log line of the transaction.
    /// The access-log line; `asap`: sent as the response starts (`option logasap`).
    pub(super) fn emit_log(&self, s: &Session, status: i64, term: [u8; 2], asap: bool) {
        let process = &s.w.process;
        let loggers = &process.loggers[s.fe];
        // `set-log-level` of whichever rule list set it last.
        let set_level = s.vars.log_level.get();
        if loggers.is_empty() || set_level == Some(None) {
            return;
        }
        let config = s.w.config();
        let fe = s.frontend();
        // An error in HAProxy's sense: a 5xx answer, a termination other than normal or
        // local, or a retried connection.
        let retried = self.log.attempts.is_some_and(|a| a.retries > 0);
        let error = !matches!(term[0], b'-' | b'L') || status >= 500 || retried;
        if fe.log.dont_log_normal && !error {
            return;
        }
        let level = match set_level.flatten() {
            None if error && fe.log.separate_errors => Some(3),
            other => other,
        };
        let lg = &self.log;
        let now = clock::now();
        let be = self.backend.map(|b| &config.backends[b]);
        let be_state = self.backend.map(|b| &s.w.state().backends[b]);
        // A client that left while queued was never given its server: HAProxy logs none.
        let server = lg.attempts.map(|a| a.server).filter(|_| term != *b"CQ");
        let srv = be.zip(server).map(|(be, i)| &be.servers[i]);
        let srv_state = be_state.zip(server).map(|(st, i)| &st.servers[i]);
        let (method, uri, version) = lg
            .line
            .clone()
            .unwrap_or_else(|| ("<BADREQ>".into(), String::new(), ""));
        let no_response = vec![None; fe.log.captures_res.len()];
        let ms = |d: std::time::Duration| d.as_millis() as i64;
        // A TCP frontend logs from `tcp`; here the default is the HTTP line.
        let format = fe.log.format.as_ref().unwrap_or(&crate::log::Format::Http);
        let rec = crate::log::Record {
            client: crate::log::Client::of(&s.client, s.peer.get(), s.info.listener),
            date: lg.date.unwrap_or_else(std::time::SystemTime::now),
            frontend: &fe.name,
            backend: be.map_or(&fe.name, |b| &b.name),
            server: match lg.local {
                Some(Local::Cached) => "<CACHE>",
                _ => srv.map_or("<NOSRV>", |s| &s.name),
            },
            t_request: lg
                .first_byte
                .zip(lg.head_done)
                .map_or(-1, |(a, b)| ms(b - a)),
            t_queue: lg.attempts.map_or(-1, |a| a.t_queue),
            t_connect: lg.attempts.map_or(-1, |a| a.t_connect),
            t_response: lg.t_response,
            t_active: lg.first_byte.or(lg.started).map_or(-1, |a| ms(now - a)),
            status,
            bytes: lg.bytes,
            term,
            act_conn: process.active_total(),
            fe_conn: process.state.frontends[s.fe]
                .conns
                .load(std::sync::atomic::Ordering::Relaxed),
            // The request is over: as in HAProxy's line, it no longer counts on its backend
            // and server.
            be_conn: be_state.map_or(0, |b| b.in_flight()),
            srv_conn: srv_state.map_or(0, |st| {
                st.in_flight.load(std::sync::atomic::Ordering::Relaxed)
            }),
            retries: lg.attempts.map_or(0, |a| a.retries),
            srv_queue: srv_state.map_or(0, |st| {
                st.queue.waiting.load(std::sync::atomic::Ordering::Relaxed)
            }),
            be_queue: 0,
            method,
            uri,
            version: version.into(),
            dst: needs_dst(format_tokens(format))
                .then(|| s.client.local_addr().ok())
                .flatten(),
            bytes_in: self.bytes_in(s),
            captures_req: &lg.captures_req,
            captures_res: if lg.line.is_some() && lg.captures_res.is_empty() {
                // No response to capture from: the configured slots print empty (`{}`).
                &no_response
            } else {
                &lg.captures_res
            },
            unique_id: lg.unique_id.as_deref(),
            samples: &lg.samples,
            request_counter: lg.counter,
            cookie_req: lg.cookie_req.as_deref(),
            cookie_res: lg.cookie_res.as_deref(),
            server_addr: srv.map(|s| s.addr),
            backend_src: self.backend_src,
            t_idle: lg.started.zip(lg.first_byte).map_or(-1, |(a, b)| ms(b - a)),
            asap,
            cookie_flags: lg.cookie_flags,
            log_counter: count_line(format, &process.state.frontends[s.fe]),
            tls: s.client.tls().map(|t| (t.cipher, t.version)),
        };
        let sd = fe.log.format_sd.as_deref();
        crate::log::emit_at(loggers, (format, sd), &rec, level);
    }

    /// Whether the frontend's log shows the proxy's end of server connections (a system call
    /// to learn).
    pub(super) fn logs_backend_src(fe: &Frontend) -> bool {
        let tokens = fe.log.format.as_ref().map_or(&[][..], format_tokens);
        tokens.iter().any(|t| {
            matches!(
                t,
                crate::log::Token::Var(
                    crate::log::Var::BackendSrcIp | crate::log::Var::BackendSrcPort,
                    _
                )
            )
        })
    }

    /// Whether a sample of the log format reads the response or a variable: those are
    /// rendered again once the response is in, as HAProxy evaluates them when the line is
    /// written.
    pub(super) fn log_reads_response(s: &Session) -> bool {
        log_sample_tokens(s).is_some_and(|tokens| {
            tokens
                .iter()
                .any(|t| matches!(t, crate::log::Token::Sample(e, _) if e.reads_response()))
        })
    }
}

/// The tokens of a custom format (the built-in ones use no `%fi`/`%fp`).
pub(super) fn format_tokens(f: &crate::log::Format) -> &[crate::log::Token] {
    match f {
        crate::log::Format::Custom(t) => t,
        _ => &[],
    }
}

/// `%lc`: the frontend's line count, this line included (counted only for formats that
/// show it, since the counter is shared by the workers).
pub(super) fn count_line(format: &crate::log::Format, fe: &crate::runtime::FrontendState) -> u64 {
    let shows = format_tokens(format)
        .iter()
        .any(|t| matches!(t, crate::log::Token::Var(crate::log::Var::LogCounter, _)));
    // The frontend's count of lines before this one, as HAProxy's `%lc` (0 first).
    if shows {
        fe.log_lines
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    } else {
        0
    }
}

/// Whether a format prints the address the client connected to (a system call to learn).
pub(super) fn needs_dst(tokens: &[crate::log::Token]) -> bool {
    tokens.iter().any(|t| {
        matches!(
            t,
            crate::log::Token::Var(
                crate::log::Var::FrontendIp | crate::log::Var::FrontendPort,
                _
            )
        )
    })
}

/// The frontend's custom log format, when it has somewhere to go.
pub(super) fn log_sample_tokens(s: &Session) -> Option<&[crate::log::Token]> {
    let Some(crate::log::Format::Custom(tokens)) = &s.frontend().log.format else {
        return None;
    };
    (!s.w.process.loggers[s.fe].is_empty()).then_some(tokens.as_slice())
}

/// The text of each `%[...]` sample of a format (`-` when it gives nothing).
pub(super) fn render_samples(tokens: &[crate::log::Token], cx: &Ctx<'_>) -> Vec<String> {
    tokens
        .iter()
        .filter_map(|t| match t {
            crate::log::Token::Sample(e, _) => Some(e.eval(cx).map_or_else(
                || "-".into(),
                |v| String::from_utf8_lossy(&v.as_bytes()).into_owned(),
            )),
            _ => None,
        })
        .collect()
}
