//! Access-log settings: targets, framing and line formats (`log`, `log-format`).

use std::net::SocketAddr;

/// Where log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stdout,
    Stderr,
    Udp(SocketAddr),
    /// A unix datagram socket (`/dev/log`, `unix@PATH`): the local syslog daemon.
    Unix(String),
}

/// How a line is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Raw,
    Short,
    Rfc3164,
    Rfc5424,
}

/// One `log` line of the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTarget {
    pub target: Target,
    pub framing: Framing,
    pub facility: u8,
    /// Longest line sent (`len`), default 1024.
    pub max_len: usize,
}

/// A proxy's logging: its targets (or the global ones) and the line format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogConf {
    pub targets: Vec<LogTarget>,
    /// `log global` was given: use the global section's targets.
    pub use_global: bool,
    pub format: Option<Format>,
    /// `option dontlognull`: connections on which the client sent nothing are not logged.
    pub dont_log_null: bool,
}

/// The line format of a proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Http,
    Tcp,
    Custom(Vec<Token>),
}

/// A piece of a `log-format` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Text(String),
    Var(Var),
}

/// The `%` variables sluice knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    ClientIp,
    ClientPort,
    DateLocal,
    DateRequest,
    Frontend,
    Backend,
    Server,
    TimeRequest,
    TimeQueue,
    TimeConnect,
    TimeResponse,
    TimeActive,
    TimeTotal,
    Status,
    Bytes,
    TermState,
    TermStateCookies,
    ActConn,
    FeConn,
    BeConn,
    SrvConn,
    Retries,
    SrvQueue,
    BeQueue,
    RequestLine,
    RequestLineQuoted,
    Method,
    Uri,
    Version,
    /// Captured request / response cookie (none are captured: `-`).
    Cookie,
}
