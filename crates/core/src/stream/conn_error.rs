//! A client connection that fails before it carries anything (`maxsslconn`, its PROXY
//! header, its TLS handshake) and the log line it leaves, as HAProxy 2.6 logs an embryonic
//! session's error: by default `IP:PORT [DATE] FRONTEND/BIND: REASON`, or the frontend's
//! `error-log-format`.
//!
//! Invariants: a line goes out only from a frontend that logs; with `option dontlognull`
//! a connection that closed or broke without completing anything is not logged (HAProxy
//! leaves out its "empty" and "abort" errors).

use std::net::SocketAddr;
use std::time::SystemTime;

use crate::log::{Client, Record, Severity};
use crate::proxy_proto::HeaderError;
use crate::runtime::Worker;
use crate::sample::{Arrival, Ctx, StreamVars};
use crate::transport::Conn;

/// Why a client connection failed before its session started, as HAProxy's `CO_ER_*`
/// errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnError {
    /// Its PROXY header was refused, or did not come in time (`None`).
    Proxy(Option<HeaderError>),
    /// `maxsslconn` client TLS connections were open already.
    TooMany,
    /// The client closed the connection during the TLS handshake.
    Closed,
    /// The connection broke (reset) during the TLS handshake.
    Aborted,
    /// The handshake did not complete in time.
    TimedOut,
    /// The client's handshake was refused (a TLS protocol error or alert).
    Refused,
}

impl ConnError {
    /// HAProxy 2.6's `CO_ER_*` number for it (what `fc_err` says).
    pub fn code(self) -> u8 {
        match self {
            ConnError::Proxy(e) => match e {
                Some(HeaderError::Closed) => 11,
                Some(HeaderError::Broken) => 12,
                None => 13,
                Some(HeaderError::Truncated) => 14,
                Some(HeaderError::NotHeader) => 15,
                Some(HeaderError::Bad) => 16,
                Some(HeaderError::BadProtocol) => 17,
            },
            ConnError::Closed => 24,
            ConnError::Aborted => 25,
            ConnError::TimedOut => 26,
            ConnError::TooMany => 27,
            ConnError::Refused => 34,
        }
    }

    /// HAProxy's text for it.
    pub fn text(self) -> &'static str {
        match self {
            ConnError::Proxy(e) => match e {
                None => "Timeout while waiting for PROXY protocol header",
                Some(HeaderError::Closed) => {
                    "Connection closed while waiting for PROXY protocol header"
                }
                Some(HeaderError::Broken) => {
                    "Connection error while waiting for PROXY protocol header"
                }
                Some(HeaderError::Truncated) => "Truncated PROXY protocol header received",
                Some(HeaderError::NotHeader) => {
                    "Received something which does not look like a PROXY protocol header"
                }
                Some(HeaderError::BadProtocol) => {
                    "Received an unhandled protocol in the PROXY protocol header"
                }
                Some(HeaderError::Bad) => "Received an invalid PROXY protocol header",
            },
            ConnError::TooMany => "Too many SSL connections",
            ConnError::Closed => "Connection closed during SSL handshake",
            ConnError::Aborted => "Connection error during SSL handshake",
            ConnError::TimedOut => "Timeout during SSL handshake",
            ConnError::Refused => "SSL handshake failure",
        }
    }

    /// What a failed handshake's outcome says: `None` for the time limit.
    pub fn of_handshake(outcome: Option<&std::io::Error>) -> ConnError {
        match outcome.map(std::io::Error::kind) {
            None => ConnError::TimedOut,
            Some(std::io::ErrorKind::UnexpectedEof) => ConnError::Closed,
            Some(std::io::ErrorKind::InvalidData) => ConnError::Refused,
            Some(_) => ConnError::Aborted,
        }
    }

    /// Nothing was completed: what `option dontlognull` leaves out.
    fn is_null(self) -> bool {
        matches!(
            self,
            ConnError::Closed
                | ConnError::Aborted
                | ConnError::Proxy(Some(HeaderError::Closed | HeaderError::Broken))
        )
    }
}

/// Where the failed connection came from.
pub struct Failed<'a> {
    pub client: &'a Conn,
    pub peer: SocketAddr,
    pub arrival: Arrival,
    /// When it was accepted.
    pub date: SystemTime,
}

/// Logs `err` for a connection of frontend `fe`, as HAProxy does.
pub fn log(w: &Worker, fe: usize, failed: &Failed<'_>, err: ConnError) {
    let loggers = &w.process.loggers[fe];
    let frontend = &w.config().frontends[fe];
    if loggers.is_empty() || (frontend.log.dont_log_null && err.is_null()) {
        return;
    }
    let severity = match frontend.log.separate_errors {
        true => Severity::Err,
        false => Severity::Info,
    };
    let who = Client::of(failed.client, failed.peer, failed.arrival.listener);
    let line = match &frontend.log.error_format {
        Some(tokens) => {
            let vars = StreamVars::default();
            let cx = Ctx {
                fault: Some((err.code(), err.text())),
                ..Ctx::of_connection(
                    &w.process,
                    fe,
                    failed.arrival,
                    failed.peer,
                    failed.client,
                    &vars,
                )
            };
            let samples = super::txn_log::render_samples(tokens, &cx);
            let rec = Record {
                samples: &samples,
                ..Record::blank(who, failed.date, &frontend.name)
            };
            rec.render_tokens(tokens)
        }
        None => {
            let client = match who {
                Client::Addr(a) => format!("{}:{}", a.ip(), a.port()),
                Client::Unix { listener } => format!("unix:{listener}"),
            };
            let bind = &frontend.listen.binds[failed.arrival.listener];
            let bind = bind
                .name
                .clone()
                .unwrap_or_else(|| (failed.arrival.listener + 1).to_string());
            let date = crate::log::log_date(failed.date);
            format!("{client} [{date}] {}/{bind}: {}", frontend.name, err.text())
        }
    };
    for l in loggers {
        l.send_at(severity, &line);
    }
}
