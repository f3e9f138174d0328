//! Health-check settings: per server (`check`, `inter`, `rise`, ...), per backend (the check
//! kind, `timeout check`, `option log-health-checks`) and process-wide (`spread-checks`,
//! `tune.max-checks-per-thread`).

use std::net::IpAddr;
use std::time::Duration;

/// A server's check options as written (`server` or `default-server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOpts {
    /// `check` / `no-check`.
    pub enabled: bool,
    /// `inter`: the interval while the server is fully up (HAProxy's 2 s).
    pub inter: Duration,
    /// `fastinter`: the interval while the server changes state (default: `inter`).
    pub fastinter: Option<Duration>,
    /// `downinter`: the interval while the server is fully down (default: `inter`).
    pub downinter: Option<Duration>,
    /// `rise`: consecutive successes that bring a down server up (2).
    pub rise: u32,
    /// `fall`: consecutive failures that take an up server down (3).
    pub fall: u32,
    /// `port`: check this port instead of the server's.
    pub port: Option<u16>,
    /// `addr`: check this address instead of the server's.
    pub addr: Option<IpAddr>,
    /// The agent check (`agent-check`, `agent-port`, ...).
    pub agent: AgentOpts,
    /// `observe layer4|layer7`: the server's real traffic counts as checks too.
    pub observe: Option<Observe>,
    /// `error-limit`: consecutive errors seen in traffic before `on-error` acts (10).
    pub error_limit: u32,
    /// `on-error`: what those errors do (`fastinter` by default).
    pub on_error: OnError,
    /// `on-marked-down shutdown-sessions`: a server marked down loses its connections.
    pub shutdown_on_down: bool,
    /// `on-marked-up shutdown-backup-sessions`: a server marked up ends the backups'
    /// connections.
    pub shutdown_backups_on_up: bool,
}

/// What `observe` watches in a server's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observe {
    /// Connection failures.
    Layer4,
    /// Connection failures, invalid responses and 5xx statuses (but 501 and 505).
    Layer7,
}

/// What `error-limit` consecutive traffic errors do (`on-error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Check again soon, at `fastinter`.
    #[default]
    Fastinter,
    /// Count as one failed check.
    FailCheck,
    /// Leave one failure before down, and check soon.
    SuddenDeath,
    /// Mark the server down at once, and check soon.
    MarkDown,
}

/// A server's agent-check options: a TCP service on the server that answers one line saying
/// how the server wants to be treated (`up`, `down`, `drain`, `50%`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentOpts {
    /// `agent-check` / `no-agent-check`.
    pub enabled: bool,
    /// `agent-port` (required with `agent-check`).
    pub port: Option<u16>,
    /// `agent-addr`: the agent's address, when not the server's.
    pub addr: Option<IpAddr>,
    /// `agent-inter` (default: `inter`).
    pub inter: Option<Duration>,
    /// `agent-send`: a string sent to the agent before reading its answer.
    pub send: Option<String>,
}

impl Default for CheckOpts {
    fn default() -> Self {
        CheckOpts {
            enabled: false,
            inter: Duration::from_secs(2),
            fastinter: None,
            downinter: None,
            rise: 2,
            fall: 3,
            port: None,
            addr: None,
            agent: AgentOpts::default(),
            observe: None,
            error_limit: 10,
            on_error: OnError::Fastinter,
            shutdown_on_down: false,
            shutdown_backups_on_up: false,
        }
    }
}

/// A regular expression compiled once, at configuration time (equal when written alike).
#[derive(Debug, Clone)]
pub struct Re(pub regex::bytes::Regex);

impl PartialEq for Re {
    fn eq(&self, other: &Re) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Re {}

/// What an HTTP check expects of the response (`http-check expect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Any of these status codes.
    Status(Vec<u16>),
    /// The status code (as text) matches.
    RStatus(Re),
    /// The body contains this string.
    String(String),
    /// The body matches.
    RString(Re),
}

/// The request an HTTP check sends (`option httpchk`, then `http-check send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub uri: String,
    pub version: String,
    /// Header lines, in order (`option httpchk`'s HOST is a `host` header).
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Default for HttpRequest {
    fn default() -> Self {
        HttpRequest {
            method: "OPTIONS".into(),
            uri: "/".into(),
            version: "HTTP/1.0".into(),
            headers: Vec::new(),
            body: String::new(),
        }
    }
}

/// What a received-bytes expectation looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// These bytes anywhere in what was received.
    Contains(Vec<u8>),
    /// What was received starts with these bytes (protocol probes).
    Prefix(Vec<u8>),
    /// What was received matches (`rstring`, `rbinary` as hexadecimal of the bytes).
    Regex(Re),
    /// The hexadecimal form of what was received matches (`rbinary`).
    RegexHex(Re),
}

/// One step of a `tcp-check` rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpRule {
    /// Open the connection (to `port` instead of the server's, when given).
    Connect {
        port: Option<u16>,
    },
    Send(Vec<u8>),
    /// Read until `pattern` is found (or, negated, until the peer is done without it), after
    /// at least `min_recv` bytes.
    Expect {
        neg: bool,
        pattern: Pattern,
        min_recv: usize,
    },
    /// Names the steps that follow in failure reports.
    Comment(String),
}

/// How a backend's servers are checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CheckKind {
    /// A connection that completes is a success (HAProxy's "Layer4 check passed").
    #[default]
    Tcp,
    /// `option httpchk`: one request (`BackendCheck::http`), judged by `expect`.
    Http,
    /// `option tcp-check`: the backend's `tcp-check` rules (`BackendCheck::tcp_rules`).
    TcpCheck,
    /// A protocol probe written as rules (`option redis-check`, `smtpchk`, `pgsql-check`).
    Probe(Vec<TcpRule>),
    /// `option mysql-check [user U]`: the server's greeting, then a login when a user is
    /// given.
    Mysql { user: Option<String> },
    /// `option ldap-check`: an anonymous bind.
    Ldap,
}

/// A backend's check settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackendCheck {
    pub kind: CheckKind,
    pub http: HttpRequest,
    /// `http-check expect [!] status|string VALUE`; without it, 2xx and 3xx pass.
    pub expect: Option<(bool, Expect)>,
    /// `http-check disable-on-404`: a server that is up and answers 404 stops taking new
    /// traffic (NOLB) without being marked down.
    pub disable_on_404: bool,
    /// The `tcp-check` lines, in order.
    pub tcp_rules: Vec<TcpRule>,
    /// `timeout check`: the time a check may take once connected (default: `inter`).
    pub timeout: Option<Duration>,
    /// `option log-health-checks`: every check result is logged, not only state changes.
    pub log_all: bool,
}

/// Process-wide check settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalCheck {
    /// `spread-checks`: random +/- percent added to every interval (0 to 50).
    pub spread_pct: u8,
    /// `max-spread-checks`: the longest window the first checks are spread over.
    pub max_spread: Option<Duration>,
    /// `tune.max-checks-per-thread`: checks running at once per worker (0: no limit).
    pub max_per_thread: usize,
}
