//! ACLs, conditions and rules (`http-request`, `http-response`, `http-after-response`,
//! `tcp-request`, `tcp-response`) as plain data (evaluated by `crate::rules` and the
//! stream).

pub use super::acl::{Acl, Cond, Term};
use super::loc::Loc;
use super::sample::{Counter, Expr, Fmt, Match, Regex, VarName};

/// What a rule does. `tcp-request` and `tcp-response` rules take `Allow` (their `accept`),
/// `Reject`, the tracking actions and variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer directly (`return`).
    Return(Reply),
    /// Refuse the request: the error page of `status`, or `reply` when the rule gives one.
    Deny {
        status: u16,
        reply: Option<Reply>,
    },
    /// Hold the request for `timeout tarpit`, then refuse it as `Deny` does.
    Tarpit {
        status: u16,
        reply: Option<Reply>,
    },
    /// `auth [realm R]`: ask for credentials (401 with `WWW-Authenticate: Basic`); without
    /// a realm, the proxy's name is the realm, as in HAProxy.
    Auth(Option<String>),
    /// Stop evaluating rules.
    Allow,
    /// Close the connection without an answer (`tcp-request ... reject`).
    Reject,
    /// `silent-drop`: close it so that the client is not told (no FIN, no reset reaching
    /// it, as far as the system allows).
    SilentDrop,
    /// `disable-l7-retry` (sluice retries no request once sent): what it asks is always so.
    AlwaysSo,
    /// `wait-for-handshake`: nothing by the time rules run. Only an HTTP/3 request can come
    /// as TLS early data (`allow-0rtt`), and with this rule in its frontend or any backend
    /// each such request waits for its handshake before it is read, whatever the rule's
    /// condition.
    WaitForHandshake,
    /// `set-tos V`: the IP TOS (IPv6: traffic class) of what the client is sent.
    SetTos(u32),
    /// `set-mark V`: the netfilter mark of what the client is sent.
    SetMark(u32),
    /// `tcp-request connection expect-proxy layer4`: the connection starts with a PROXY
    /// protocol header.
    ExpectProxy,
    SetHeader(String, Fmt),
    AddHeader(String, Fmt),
    /// Remove the headers whose name matches (`-m str|beg|end|sub`, case ignored).
    DelHeader(String, Match),
    /// `del-header REGEX -m reg`.
    DelHeaderRe(Regex),
    /// `early-hint NAME FMT`: a header of the 103 answer sent before the request is
    /// forwarded (consecutive rules make one answer).
    EarlyHint(String, Fmt),
    /// `set-log-level LEVEL` (`None`: `silent`, no log line).
    SetLogLevel(Option<u8>),
    /// `set-timeout server|tunnel TIME|EXPR` (milliseconds when an expression).
    SetTimeout(TimeoutKind, Expr),
    /// `set-src EXPR` / `set-dst EXPR`: the address the rest of the stream sees.
    SetSrc(Expr),
    SetDst(Expr),
    /// `add-acl(FILE) KEY`, `del-acl(FILE) KEY`, `set-map(FILE) KEY VALUE`, `del-map(FILE)
    /// KEY`: an entry of the list loaded from FILE added (when absent), set (or added) or
    /// deleted, as the CLI's `add acl`, `set map` and `del map` do.
    EditList {
        list: super::sample::NameRef,
        edit: ListEdit,
        key: Fmt,
        value: Option<Fmt>,
    },
    /// `set-src-port EXPR` / `set-dst-port EXPR`: the port alone.
    SetSrcPort(Expr),
    SetDstPort(Expr),
    /// `capture SAMPLE len N`: the sample, cut to `len`, in request capture slot `slot`.
    Capture {
        expr: Expr,
        len: usize,
        slot: usize,
    },
    /// `wait-for-body time T [at-least N]`: wait for the body (at most `T`, or until `N`
    /// bytes are there) before the next rules.
    WaitForBody {
        time: std::time::Duration,
        at_least: Option<u64>,
    },
    /// `replace-header NAME REGEX FMT` (the whole value, when the regex matches in it) and
    /// `replace-value` (each comma-separated value): `\N` in the format are the regex's
    /// groups.
    ReplaceHeader {
        name: String,
        re: Regex,
        with: Fmt,
        per_value: bool,
    },
    /// `replace-path|replace-pathq|replace-uri REGEX FMT`: the part, where the regex
    /// matches, rewritten with the format (`\N` are the regex's groups).
    ReplaceTarget {
        part: TargetPart,
        re: Regex,
        with: Fmt,
    },
    SetMethod(Fmt),
    SetPath(Fmt),
    SetPathQ(Fmt),
    SetQuery(Fmt),
    SetUri(Fmt),
    /// `normalize-uri NORMALIZER [full|strict]` (experimental in HAProxy 2.6: it needs
    /// `expose-experimental-directives`).
    NormalizeUri(sluice_http::UriNormalizer),
    Redirect(Redirect),
    SetVar(VarName, Expr),
    /// `set-var-fmt(NAME) FMT`: the variable takes the rendered format as a string.
    SetVarFmt(VarName, Fmt),
    UnsetVar(VarName),
    /// `http-response set-status N [reason TEXT]`.
    SetStatus(u16, Option<String>),
    /// `track-scN KEY [table T]`: count this request in the key's entry of the table
    /// (the rule's proxy's when `None`) and keep it in slot N.
    Track {
        slot: u8,
        key: Expr,
        table: Option<super::sample::NameRef>,
    },
    /// `sc-inc-gpc0(N)`, `sc-inc-gpc1(N)`, `sc-inc-gpc(IDX,N)`: add one to a general
    /// purpose counter (and its rate) of the entry tracked in slot N.
    ScIncGpc {
        slot: u8,
        counter: Counter,
    },
    /// `sc-set-gpt0(N) VALUE`, `sc-set-gpt(IDX,N) VALUE`: set a general purpose tag of
    /// the entry tracked in slot N.
    ScSetGpt {
        slot: u8,
        tag: Counter,
        value: Expr,
    },
    /// Answer with a built-in service (`use-service`).
    UseService(Service),
    /// `http-request cache-use NAME`: answer from the cache when it holds the object (and
    /// key the transaction for `cache-store`).
    CacheUse(super::cache::CacheRef),
    /// `http-response cache-store NAME`: store the response once relayed whole.
    CacheStore(super::cache::CacheRef),
}

/// A response the proxy writes itself (`return`, and `deny`/`tarpit` given a payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// `lf-string` / `lf-file`: the body as a log-format value, rendered per request.
    pub lf: Option<Fmt>,
    /// `hdr NAME FMT`, in order.
    pub hdrs: Vec<(String, Fmt)>,
    /// `errorfile FILE`: the whole response as the file has it (status line and headers
    /// included); the other fields are unused.
    pub raw: Option<sluice_http::Answer>,
    /// `errorfiles NAME`: the page of this status in that `http-errors` section, and the
    /// rule's line; made `raw` (or the reply the section has) once every section is known.
    pub errorfiles: Option<(String, super::loc::Loc)>,
    /// `default-errorfiles`: the proxy's own page for the status (its `errorfile`,
    /// `http-error` or the built-in one), found when answering.
    pub default_page: bool,
}

/// The part of the request target a `replace-*` rule rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetPart {
    Path,
    PathQ,
    Uri,
}

/// Which timeout `set-timeout` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutKind {
    Server,
    Tunnel,
}

/// `http-request redirect location|prefix|scheme VALUE [options]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub kind: RedirectKind,
    pub value: Fmt,
    pub code: u16,
    pub drop_query: bool,
    pub append_slash: bool,
    /// `set-cookie NAME[=VALUE]`.
    pub set_cookie: Option<String>,
    /// `clear-cookie NAME[=]`.
    pub clear_cookie: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    /// The value is the whole location.
    Location,
    /// The value replaces the scheme and authority; the path and query stay.
    Prefix,
    /// The value replaces the scheme; the Host header gives the authority.
    Scheme,
}

/// Where a `use_backend` rule sends a request: a backend named in the configuration, or one
/// whose name a log-format expression gives at run time (ignored when no backend has it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendRef {
    Fixed(usize),
    Dynamic(Fmt),
}

/// The services `http-request use-service` can answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Metrics in Prometheus's text format (`prometheus-exporter`).
    PrometheusExporter,
}

/// An action under a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub cond: Option<Cond>,
    /// Its condition or its values read the request head: after an editing rule, it must
    /// see the edited request.
    pub reads_request: bool,
    /// Where it was written (`last_rule_file`, `last_rule_line`).
    pub at: Option<super::loc::Loc>,
}

impl Rule {
    /// Whether a rule that applies ends its list, and so becomes the stream's last rule
    /// (`last_rule_file`): HAProxy's final actions.
    pub fn is_final(&self) -> bool {
        matches!(
            self.action,
            Action::Allow
                | Action::Deny { .. }
                | Action::Tarpit { .. }
                | Action::Reject
                | Action::Return(_)
                | Action::Auth(_)
                | Action::Redirect(_)
                | Action::UseService(_)
        )
    }

    pub fn new(action: Action, cond: Option<Cond>) -> Rule {
        let reads_request =
            cond.as_ref().is_some_and(Cond::reads_request) || action.reads_request();
        Rule {
            action,
            cond,
            reads_request,
            at: None,
        }
    }
}

impl Action {
    /// Whether running it evaluates something from the request head.
    fn reads_request(&self) -> bool {
        // A redirect reads the path and the Host header itself.
        matches!(self, Action::Redirect(_)) || self.exprs().iter().any(|e| e.reads_request())
    }

    /// The sample expressions it evaluates, in its values and its formats.
    pub fn exprs(&self) -> Vec<&Expr> {
        fn reply(r: &Reply) -> Vec<&Expr> {
            let mut out: Vec<&Expr> = r.lf.iter().flat_map(Fmt::exprs).collect();
            out.extend(r.hdrs.iter().flat_map(|(_, v)| v.exprs()));
            out
        }
        match self {
            Action::Return(r) => reply(r),
            Action::Deny { reply: r, .. } | Action::Tarpit { reply: r, .. } => {
                r.as_ref().map(reply).unwrap_or_default()
            }
            Action::SetHeader(_, f)
            | Action::AddHeader(_, f)
            | Action::EarlyHint(_, f)
            | Action::SetMethod(f)
            | Action::SetPath(f)
            | Action::SetPathQ(f)
            | Action::SetQuery(f)
            | Action::SetUri(f)
            | Action::SetVarFmt(_, f) => f.exprs().collect(),
            Action::ReplaceHeader { with, .. } | Action::ReplaceTarget { with, .. } => {
                with.exprs().collect()
            }
            Action::SetVar(_, e)
            | Action::Track { key: e, .. }
            | Action::ScSetGpt { value: e, .. }
            | Action::SetTimeout(_, e)
            | Action::SetSrc(e)
            | Action::SetDst(e)
            | Action::SetSrcPort(e)
            | Action::SetDstPort(e)
            | Action::Capture { expr: e, .. } => vec![e],
            _ => Vec::new(),
        }
    }
}

/// What a list-editing action does to its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListEdit {
    Add,
    Set,
    Del,
}

/// The rule lists a proxy may have beside its switching rules, in HAProxy's order of
/// evaluation within each phase.
#[derive(Debug, Clone, Default)]
pub struct RuleSets {
    pub http_request: Vec<Rule>,
    pub http_response: Vec<Rule>,
    /// Run on every response, the proxy's own included (errors, `return`, redirects).
    pub http_after_response: Vec<Rule>,
    /// `tcp-request connection`: before anything is read (frontends).
    pub tcp_connection: Vec<Rule>,
    /// `tcp-request session`: once the connection is accepted (frontends).
    pub tcp_session: Vec<Rule>,
    /// `tcp-request content`: per request in HTTP mode, after `inspect-delay` in TCP mode.
    pub tcp_content: Vec<Rule>,
    /// `tcp-response content`: when the server's response starts.
    pub tcp_response: Vec<Rule>,
    /// `tcp-request inspect-delay`: how long TCP content rules wait for data.
    pub inspect_delay: Option<std::time::Duration>,
    /// `tcp-response inspect-delay`: how long `tcp-response content` rules may wait for
    /// the server's payload (TCP mode).
    pub response_inspect_delay: Option<std::time::Duration>,
    /// `redirect ...`: after the `http-request` rules of the same proxy.
    pub redirects: Vec<Rule>,
}

impl RuleSets {
    /// The sets that hold a transaction's `tcp-response` rules: its backend's, or, for a
    /// `listen` section (whose rules all run on its frontend side), its frontend's.
    pub fn tcp_response_of<'a>(backend: &'a RuleSets, frontend: &'a RuleSets) -> &'a RuleSets {
        if backend.tcp_response.is_empty() {
            frontend
        } else {
            backend
        }
    }

    /// Every rule of every list.
    pub fn all(&self) -> impl Iterator<Item = &Rule> {
        self.http_request
            .iter()
            .chain(&self.http_response)
            .chain(&self.http_after_response)
            .chain(&self.tcp_connection)
            .chain(&self.tcp_session)
            .chain(&self.tcp_content)
            .chain(&self.tcp_response)
            .chain(&self.redirects)
    }
}

/// Rules as the keywords set them, before backend names are resolved.
#[derive(Debug, Clone, Default)]
pub struct RulesConf {
    /// The configuration's pattern lists, which the ACLs and maps read here join.
    pub book: super::patterns::PatternBook,
    pub acls: Vec<(String, Acl)>,
    pub switching: Vec<(String, Option<Cond>, Loc)>,
    pub default_backend: Option<(String, Loc)>,
    pub sets: RuleSets,
}

/// A frontend's rules with backend names resolved to indices into `Config::backends`.
#[derive(Debug, Default)]
pub struct FrontendRules {
    pub switching: Vec<(Option<Cond>, BackendRef)>,
    pub default_backend: Option<usize>,
    pub sets: RuleSets,
}

impl std::ops::Deref for FrontendRules {
    type Target = RuleSets;
    fn deref(&self) -> &RuleSets {
        &self.sets
    }
}
