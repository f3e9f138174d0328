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
    /// The least urgent severity sent (the level after the facility; default `debug`):
    /// lines less urgent are not sent to this target.
    pub max_level: u8,
    /// The most urgent severity sent (the second level; default `emerg`): more urgent
    /// lines go out at this one.
    pub min_level: u8,
    /// `sample RANGES:SIZE`: lines are numbered 1 to SIZE in turn, and only those whose
    /// number falls in a range are sent.
    pub sample: Option<LogSample>,
}

/// The sampling of a log target (`sample 1,4-5:10`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSample {
    /// Inclusive, from 1, not overlapping.
    pub ranges: Vec<(u32, u32)>,
    pub size: u32,
}

impl LogSample {
    /// Whether the line numbered `index` (counting from 0, over all lines) is sent.
    pub fn keeps(&self, index: u64) -> bool {
        let n = (index % u64::from(self.size)) as u32 + 1;
        self.ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&n))
    }
}

/// A proxy's logging: its targets (or the global ones) and the line format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogConf {
    pub targets: Vec<LogTarget>,
    /// `log global` was given: use the global section's targets.
    pub use_global: bool,
    pub format: Option<Format>,
    /// `log-format-sd`: the structured data of the lines sent to `rfc5424` targets.
    pub format_sd: Option<Vec<Token>>,
    /// `error-log-format`: the line of a connection that failed before its session
    /// started (its PROXY header, its TLS handshake), instead of HAProxy's `IP:PORT [DATE] FE/BIND: REASON`.
    pub error_format: Option<Vec<Token>>,
    /// `capture request header NAME len N`, in order.
    pub captures_req: Vec<(String, usize)>,
    /// `capture response header NAME len N`, in order.
    pub captures_res: Vec<(String, usize)>,
    /// `unique-id-format`: how each request's unique id is built.
    pub unique_id: Option<Vec<Token>>,
    /// `unique-id-header NAME`: the request header that carries it to the server.
    pub unique_id_header: Option<String>,
    /// `option dontlognull`: connections on which the client sent nothing are not logged.
    pub dont_log_null: bool,
    /// `option http-ignore-probes`: a connection that sent nothing before it closed or
    /// timed out leaves no trace (no log, no error counted, no 408).
    pub ignore_probes: bool,
    /// `log-tag`: the syslog tag of this proxy's lines (else the global one, else `sluice`).
    pub tag: Option<String>,
    /// `option logasap`: the line goes out when the response head is sent, before the body.
    pub asap: bool,
    /// `option dontlog-normal`: only transactions that ended badly (an error status or a
    /// termination code) are logged.
    pub dont_log_normal: bool,
    /// `option log-separate-errors`: those go out at `err` rather than `info`.
    pub separate_errors: bool,
    /// `capture cookie NAME len N`: the first request cookie and response `Set-Cookie`
    /// whose name starts with NAME (`%CC`, `%CS`).
    pub capture_cookie: Option<(String, usize)>,
}

/// The `global` settings of syslog framing and of what lines hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalLog {
    /// `log-tag`.
    pub tag: Option<String>,
    /// `tune.http.logurilen`: the request line logged is cut to this many bytes (1024 when
    /// unset, as HAProxy's).
    pub uri_len: Option<usize>,
    /// `tune.http.cookielen`: the longest `capture cookie ... len` (63 when unset).
    pub cookie_len: Option<usize>,
    /// `log-send-hostname [NAME]`: the host name in syslog headers (`Some("")`: the
    /// system's).
    pub hostname: Option<String>,
}

impl GlobalLog {
    /// The longest cookie capture (`tune.http.cookielen`, 63 by default).
    pub fn cookie_capture_max(&self) -> usize {
        self.cookie_len.unwrap_or(63)
    }

    /// The longest request line a log line holds (`tune.http.logurilen`).
    pub fn request_line_max(&self) -> usize {
        self.uri_len.unwrap_or(1024)
    }
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
    Var(Var, VarOpts),
    /// `%[EXPR]`: a sample, rendered by the stream when the request has been routed.
    Sample(super::sample::Expr, VarOpts),
}

/// `%{+Q,+X}` options of a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VarOpts {
    /// `+Q`: in double quotes.
    pub quote: bool,
    /// `+X`: integers in hexadecimal (upper case).
    pub hex: bool,
    /// `+E`: `"`, `\` and `]` escaped with a backslash (for RFC 5424 structured data).
    pub escape: bool,
}

/// The `%` variables sluice knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    ClientIp,
    ClientPort,
    /// `%fi`, `%fp`: the address the client connected to.
    FrontendIp,
    FrontendPort,
    DateLocal,
    DateRequest,
    /// `%T`, `%trg`: the date in UTC with its zone; `%Tl`, `%trl`: in local time.
    DateGmt,
    DateLocalZone,
    /// `%Ts`: the request's date as seconds since the epoch.
    Timestamp,
    Frontend,
    /// `%ft`: the frontend's name, with `~` after it on a TLS connection.
    FrontendTransport,
    Backend,
    Server,
    TimeRequest,
    TimeQueue,
    TimeConnect,
    TimeResponse,
    TimeActive,
    TimeTotal,
    /// `%Td`: the response body's transfer; `%Tu`: the time as seen from the client.
    TimeData,
    TimeUser,
    Status,
    Bytes,
    /// `%U`: bytes received from the client.
    BytesUploaded,
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
    Method,
    Uri,
    Version,
    /// `%CC`, `%CS`: the request / response cookie `capture cookie` kept (`-`: none).
    CookieReq,
    CookieRes,
    /// `%si`, `%sp`: the server's address; `%bi`, `%bp`: the proxy's side of the server
    /// connection.
    ServerIp,
    ServerPort,
    BackendSrcIp,
    BackendSrcPort,
    /// `%HP`, `%HQ`: the request's path and query (with its `?`).
    Path,
    /// `%HPO`: the path alone (no scheme, authority or query).
    PathOnly,
    Query,
    /// `%ms`: the milliseconds of the request's date.
    DateMs,
    /// `%Th` (handshake), `%Ti` (idle before the request), `%Tq` (`Th + Ti + TR`).
    TimeHandshake,
    TimeIdle,
    TimeTq,
    /// `%sslc`, `%sslv`: the TLS cipher and version (`-`: not TLS).
    SslCipher,
    SslVersion,
    /// `%lc`: the frontend's count of lines logged.
    LogCounter,
    /// `%hr`, `%hs`: captured request / response headers, `{a|b}`; `%hrl`, `%hsl`: the
    /// same as a list, `a b`.
    ReqCaptures,
    ResCaptures,
    ReqCapturesList,
    ResCapturesList,
    /// `%ID`: the unique id (`unique-id-format`).
    UniqueId,
    /// `%H`: the host name.
    Hostname,
    /// `%pid`.
    Pid,
    /// `%rt`: the request's number on the worker.
    RequestCounter,
}
