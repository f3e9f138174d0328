//! Health-check settings: per server (`check`, `inter`, `rise`, ...), per backend (the check
//! kind, `timeout check`, `option log-health-checks`) and process-wide (`spread-checks`,
//! `tune.max-checks-per-thread`).

use std::net::IpAddr;
use std::time::Duration;

use super::sample::{Expr, Fmt, VarName};

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
    /// `check-proto`: the HTTP version of HTTP checks (default: the server's, HTTP/2 for
    /// `proto h2` or when TLS's ALPN chose `h2`).
    pub proto: Option<CheckProto>,
}

/// The protocol an HTTP check speaks (`check-proto h1|h2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckProto {
    H1,
    H2,
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
            proto: None,
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
    /// A status code in any of these inclusive ranges (`200,301-304`).
    Status(Vec<(u16, u16)>),
    /// The status code (as text) matches.
    RStatus(Re),
    /// The body contains this string.
    String(String),
    /// The body matches.
    RString(Re),
    /// A header whose name matches (and, if given, one of whose values matches: each
    /// comma-separated value for `hdr`, the whole line's for `fhdr`).
    Header {
        name: HeaderMatch,
        value: Option<HeaderMatch>,
        full: bool,
    },
}

/// How `http-check expect hdr|fhdr` matches a header name or value (`-m str|beg|end|sub|reg`;
/// names ignore case, as HTTP's do, except with a regular expression).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderMatch {
    Str(String),
    Beg(String),
    End(String),
    Sub(String),
    Reg(Re),
    /// `name-lf` / `value-lf`: a text with variables, filled in at each check, then
    /// matched as `-m str|beg|end|sub` says (`Str`, `Beg`, `End` or `Sub` of its text).
    Lf(Box<HeaderMatch>, CheckText),
}

impl HeaderMatch {
    /// Whether `v` matches, ignoring ASCII case when `icase`; a `-lf` pattern is filled in
    /// with `vars` first.
    pub fn matches_at(&self, v: &[u8], icase: bool, vars: &CheckVars<'_>) -> bool {
        let HeaderMatch::Lf(how, text) = self else {
            return self.matches(v, icase);
        };
        let mut p = String::new();
        text.render(vars, &mut p);
        let filled = match **how {
            HeaderMatch::Beg(_) => HeaderMatch::Beg(p),
            HeaderMatch::End(_) => HeaderMatch::End(p),
            HeaderMatch::Sub(_) => HeaderMatch::Sub(p),
            _ => HeaderMatch::Str(p),
        };
        filled.matches(v, icase)
    }

    /// Whether `v` matches, ignoring ASCII case when `icase` (a `-lf` pattern: never, see
    /// [`HeaderMatch::matches_at`]).
    pub fn matches(&self, v: &[u8], icase: bool) -> bool {
        let eq = |a: &[u8], b: &[u8]| {
            if icase {
                a.eq_ignore_ascii_case(b)
            } else {
                a == b
            }
        };
        match self {
            HeaderMatch::Str(p) => eq(v, p.as_bytes()),
            HeaderMatch::Beg(p) => v.len() >= p.len() && eq(&v[..p.len()], p.as_bytes()),
            HeaderMatch::End(p) => v.len() >= p.len() && eq(&v[v.len() - p.len()..], p.as_bytes()),
            HeaderMatch::Sub(p) => p.is_empty() || v.windows(p.len()).any(|w| eq(w, p.as_bytes())),
            HeaderMatch::Reg(re) => re.0.is_match(v),
            HeaderMatch::Lf(..) => false,
        }
    }
}

/// The request an HTTP check sends (`option httpchk`, then `http-check send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    /// `uri` (plain) or `uri-lf` (with variables).
    pub uri: CheckText,
    pub version: String,
    /// Header lines, in order (`option httpchk`'s HOST is a `host` header); their values
    /// may hold variables, as HAProxy reads them.
    pub headers: Vec<(String, CheckText)>,
    /// `body` (plain) or `body-lf` (with variables).
    pub body: CheckText,
    /// `http-check set-var|set-var-fmt|unset-var`, in order: run before the request is
    /// made, which their variables may fill.
    pub vars: Vec<VarStep>,
}

/// `set-var(NAME) EXPR`, `set-var-fmt(NAME) FMT` or `unset-var(NAME)` of `http-check` and
/// `tcp-check`: a variable (`check.`, `sess.` or `proc.`) set when the check reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VarStep {
    Set(VarName, Expr),
    SetFmt(VarName, Fmt),
    Unset(VarName),
}

/// Text a check sends, with variables filled in at each check (`tcp-check send-lf`,
/// `http-check send uri-lf|body-lf|hdr`): HAProxy's log-format syntax, limited to what a
/// check knows (its backend and server).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckText(pub Vec<TextPart>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextPart {
    Literal(String),
    /// `%b`, `%[be_name]`.
    BackendName,
    /// `%[be_id]`.
    BackendId,
    /// `%s`, `%[srv_name]`.
    ServerName,
    /// `%[srv_id]`.
    ServerId,
    /// `%H`: the host name.
    Hostname,
    /// `%pid`.
    Pid,
    /// `%[env(NAME)]`, read when the check runs.
    Env(String),
    /// `%[date]`: seconds since the epoch.
    Date,
    /// `%[var(NAME)]`: a variable's value when the text is sent.
    Var(VarName),
}

/// How a check's texts read variables (`%[var(check.x)]`): given by the check that runs.
#[derive(Clone, Copy)]
pub struct VarValues<'a>(pub &'a dyn Fn(&VarName) -> Option<String>);

impl std::fmt::Debug for VarValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VarValues")
    }
}

/// What a check's variables stand for.
#[derive(Debug, Clone, Copy)]
pub struct CheckVars<'a> {
    pub backend: &'a str,
    pub backend_id: u32,
    pub server: &'a str,
    pub server_id: u32,
    pub values: VarValues<'a>,
    /// The environment as the configuration left it (`setenv`), for `%[env(NAME)]`.
    pub env: &'a sluice_config::Env,
}

impl CheckText {
    pub fn literal(s: &str) -> CheckText {
        CheckText(vec![TextPart::Literal(s.to_string())])
    }

    pub fn is_empty(&self) -> bool {
        self.0
            .iter()
            .all(|p| matches!(p, TextPart::Literal(s) if s.is_empty()))
    }

    /// Appends the text, variables filled in, to `out`.
    pub fn render(&self, vars: &CheckVars<'_>, out: &mut String) {
        use std::fmt::Write as _;
        for part in &self.0 {
            let _ = match part {
                TextPart::Literal(s) => {
                    out.push_str(s);
                    Ok(())
                }
                TextPart::BackendName => write!(out, "{}", vars.backend),
                TextPart::BackendId => write!(out, "{}", vars.backend_id),
                TextPart::ServerName => write!(out, "{}", vars.server),
                TextPart::ServerId => write!(out, "{}", vars.server_id),
                TextPart::Hostname => write!(out, "{}", super::host::hostname()),
                TextPart::Pid => write!(out, "{}", std::process::id()),
                TextPart::Env(name) => write!(out, "{}", vars.env.get(name).unwrap_or_default()),
                TextPart::Date => write!(
                    out,
                    "{}",
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs())
                ),
                TextPart::Var(name) => {
                    out.push_str(&(vars.values.0)(name).unwrap_or_default());
                    Ok(())
                }
            };
        }
    }
}

impl HttpRequest {
    /// The request as sent: one per connection, which the server is asked to close.
    pub fn render(&self, vars: &CheckVars<'_>) -> Vec<u8> {
        let mut req = format!("{} ", self.method);
        self.uri.render(vars, &mut req);
        req.push(' ');
        req.push_str(&self.version);
        req.push_str("\r\n");
        for (n, v) in &self.headers {
            req.push_str(n);
            req.push_str(": ");
            v.render(vars, &mut req);
            req.push_str("\r\n");
        }
        let mut body = String::new();
        self.body.render(vars, &mut body);
        if !body.is_empty() {
            req.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        req.push_str("connection: close\r\n\r\n");
        req.push_str(&body);
        req.into_bytes()
    }
}

impl Default for HttpRequest {
    fn default() -> Self {
        HttpRequest {
            method: "OPTIONS".into(),
            uri: CheckText::literal("/"),
            version: "HTTP/1.0".into(),
            headers: Vec::new(),
            body: CheckText::default(),
            vars: Vec::new(),
        }
    }
}

/// What a received-bytes expectation looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// These bytes anywhere in what was received (`string`).
    Contains(Vec<u8>),
    /// The same, written in hexadecimal (`binary`).
    ContainsBinary(Vec<u8>),
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
    /// Open the connection (`tcp-check connect`).
    Connect(ConnectRule),
    /// `send`, `send-binary`, and the step's own `comment`.
    Send(Vec<u8>, Option<String>),
    /// `send-lf`: text with variables.
    SendText(CheckText, Option<String>),
    /// `option ssl-hello-chk`'s SSLv3 client hello, stamped with the time it is sent.
    SslHello,
    /// Read until `pattern` is found (or, negated, until the peer is done without it), after
    /// at least `min_recv` bytes.
    Expect {
        neg: bool,
        pattern: Pattern,
        /// `min-recv N`: decide once N bytes arrived (a mismatch then fails at once);
        /// without it, a mismatch waits for more until the end or the timeout, as HAProxy.
        min_recv: Option<usize>,
        opts: ExpectOpts,
    },
    /// Names the steps that follow in failure reports (those of the next kind of step, as
    /// HAProxy attaches it).
    Comment(String),
    /// `set-var`, `set-var-fmt`, `unset-var`.
    Var(VarStep),
}

/// What a `tcp-check expect` reports besides its pattern.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExpectOpts {
    /// `comment TEXT`: names this step in failure reports.
    pub comment: Option<String>,
    /// `ok-status`, `error-status`, `tout-status`: the check status when it passes, fails,
    /// or times out (HAProxy's status names: `L7OK`, `L7STS`, `L4TOUT`, ...).
    pub ok_status: Option<&'static str>,
    pub error_status: Option<&'static str>,
    pub tout_status: Option<&'static str>,
    /// `on-success FMT`, `on-error FMT`: the report's info text.
    pub on_success: Option<CheckText>,
    pub on_error: Option<CheckText>,
    /// `status-code EXPR`: the check's code (an integer).
    pub status_code: Option<i64>,
    /// A protocol probe's report taken from the reply itself (HAProxy's built-in rule sets
    /// write it with `res.payload` expressions): on failure, on success, and whether the
    /// code is the reply's first three digits.
    pub error_report: Option<Report>,
    pub success_report: Option<Report>,
    pub code_from_reply: bool,
}

/// What of a reply a probe reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// Its first line (`res.payload(0,0),cut_crlf`).
    Line,
    /// Its first line after the three-digit code (`res.payload(4,0),ltrim(' '),cut_crlf`).
    Text,
    /// What follows its first N bytes, up to a NUL (`res.payload(N,0)`, which a report,
    /// being C text, ends at the first NUL).
    From(usize),
}

/// Where and how a check connects (`tcp-check connect`, `http-check connect`): the check's
/// own address and port (the server's `addr` and `port` options, else the server's) unless
/// given here.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRule {
    pub port: Option<u16>,
    pub addr: Option<IpAddr>,
    /// `linger`: close with a FIN; by default a check ends its connection with a reset, so
    /// that neither side keeps it in TIME_WAIT.
    pub linger: bool,
    /// `comment`: names this step in failure reports.
    pub comment: Option<String>,
    /// Plain or TLS: the check's own settings (`default`, and a connection no rule
    /// opened), `ssl`, or plain (an explicit rule without either, as HAProxy's).
    pub layer: ConnectLayer,
    /// `sni NAME`, `alpn LIST`: what a TLS connection asks for, instead of the check's.
    pub sni: Option<String>,
    pub alpn: Option<Vec<String>>,
    /// `proto h1|h2`: the HTTP version an HTTP check speaks on it.
    pub proto: Option<CheckProto>,
}

impl BackendCheck {
    /// Whether a connect rule of its checks asks for TLS (`ssl`).
    pub fn uses_ssl(&self) -> bool {
        let ssl = |c: &ConnectRule| c.layer == ConnectLayer::Ssl;
        ssl(&self.http_connect)
            || self
                .tcp_rules
                .iter()
                .any(|r| matches!(r, TcpRule::Connect(c) if ssl(c)))
    }
}

/// What a check connection carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectLayer {
    /// As the server's checks: TLS with `check-ssl` (or `ssl`), else plain.
    #[default]
    Default,
    /// TLS, with the server's TLS settings.
    Ssl,
    Plain,
}

/// One `http-check expect [!] KIND VALUE [comment TEXT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpExpect {
    /// `!`: the check passes when the expectation does not hold.
    pub negated: bool,
    pub expect: Expect,
    /// The comment naming it in failure reports (its own `comment`, or an `http-check
    /// comment` line before it, as HAProxy attaches them).
    pub comment: Option<String>,
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
    Mysql {
        user: Option<String>,
        /// `pre-41`: the login of MySQL servers older than 4.1.
        pre41: bool,
    },
    /// `option ldap-check`: an anonymous bind.
    Ldap,
    /// `option external-check`: the backend's `external-check command`, whose exit status
    /// is the verdict.
    External,
    /// `option spop-check`: an SPOP hello asking for a health check.
    Spop,
}

/// A backend's check settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackendCheck {
    pub kind: CheckKind,
    pub http: HttpRequest,
    /// `http-check connect`: where the HTTP check connects, and how it closes.
    pub http_connect: ConnectRule,
    /// The `http-check expect` lines, judged in order on the answer (the first that fails
    /// is the report); without any, 2xx and 3xx pass.
    pub expects: Vec<HttpExpect>,
    /// The HTTP check's rules (its request, expects and connect) came from a defaults
    /// section: the proxy's first `option httpchk` or `http-check` rule replaces them.
    pub http_rules_inherited: bool,
    /// An `http-check comment` not yet attached, and the kind of the last rule after it
    /// (`send`, `expect`): a comment names the rules of the next kind only.
    pub pending_comment: Option<(String, Option<&'static str>)>,
    /// `http-check disable-on-404`: a server that is up and answers 404 stops taking new
    /// traffic (NOLB) without being marked down.
    pub disable_on_404: bool,
    /// `http-check send-state`: the request carries `X-Haproxy-Server-State`, the
    /// server's state as the proxy sees it.
    pub send_state: bool,
    /// The `tcp-check` lines, in order.
    pub tcp_rules: Vec<TcpRule>,
    /// `external-check command` and `external-check path` (`PATH` for the command).
    pub external: ExternalCheck,
    /// `timeout check`: the time a check may take once connected (default: `inter`).
    pub timeout: Option<Duration>,
    /// `option log-health-checks`: every check result is logged, not only state changes.
    pub log_all: bool,
}

/// `external-check command CMD` and `external-check path PATH`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExternalCheck {
    pub command: Option<String>,
    pub path: Option<String>,
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
    /// `external-check`: backends may run `option external-check`.
    pub external: bool,
}
