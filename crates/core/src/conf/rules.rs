//! ACLs, conditions and HTTP rules as plain data (evaluated by `crate::rules`).

pub use super::acl::{Acl, Cond, Term};
use super::loc::Loc;
use super::sample::{Expr, Fmt, Match, Regex, VarName};

/// What an `http-request` / `http-response` rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer directly with this status, content type and body.
    Return {
        status: u16,
        content_type: Option<String>,
        body: Vec<u8>,
        /// `lf-string`: the body as a log-format value, rendered per request.
        lf: Option<Fmt>,
    },
    Deny {
        status: u16,
    },
    /// Stop evaluating rules.
    Allow,
    SetHeader(String, Fmt),
    AddHeader(String, Fmt),
    /// Remove the headers whose name matches (`-m str|beg|end|sub`, case ignored).
    DelHeader(String, Match),
    /// `replace-header NAME REGEX FMT` (the whole value, when the regex matches in it) and
    /// `replace-value` (each comma-separated value): `\N` in the format are the regex's
    /// groups.
    ReplaceHeader {
        name: String,
        re: Regex,
        with: Fmt,
        per_value: bool,
    },
    SetMethod(Fmt),
    SetPath(Fmt),
    SetPathQ(Fmt),
    SetQuery(Fmt),
    SetUri(Fmt),
    Redirect(Redirect),
    SetVar(VarName, Expr),
    UnsetVar(VarName),
    /// `http-response set-status N [reason TEXT]`.
    SetStatus(u16, Option<String>),
    /// `track-scN KEY [table T]`: count this request in the key's entry of the table
    /// (the rule's proxy's when `None`) and keep it in slot N.
    Track {
        slot: u8,
        key: Expr,
        table: Option<String>,
    },
    /// `sc-inc-gpc0(N)` / `sc-inc-gpc1(N)`: add one to a general purpose counter of the
    /// entry tracked in slot N.
    ScIncGpc {
        slot: u8,
        gpc: u8,
    },
    /// `sc-set-gpt0(N) VALUE`.
    ScSetGpt0 {
        slot: u8,
        value: Expr,
    },
    /// Answer with a built-in service (`use-service`).
    UseService(Service),
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRule {
    pub action: Action,
    pub cond: Option<Cond>,
}

/// Rules as the keywords set them, before backend names are resolved.
#[derive(Debug, Clone, Default)]
pub struct RulesConf {
    pub acls: Vec<(String, Acl)>,
    pub switching: Vec<(String, Option<Cond>, Loc)>,
    pub default_backend: Option<(String, Loc)>,
    pub http_request: Vec<HttpRule>,
    pub http_response: Vec<HttpRule>,
    /// `tcp-request connection accept|reject [if|unless COND]`, in order.
    pub tcp_connection: Vec<TcpRule>,
}

/// A `tcp-request connection` rule: the first whose condition holds decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpRule {
    pub accept: bool,
    pub cond: Option<Cond>,
}

impl RulesConf {
    /// No switching or HTTP rule is configured (what `mode tcp` requires; ACLs may serve
    /// `tcp-request` rules).
    pub(crate) fn http_rules_empty(&self) -> bool {
        self.switching.is_empty() && self.http_request.is_empty() && self.http_response.is_empty()
    }
}

/// A frontend's rules with backend names resolved to indices into `Config::backends`.
#[derive(Debug, Default)]
pub struct FrontendRules {
    pub switching: Vec<(Option<Cond>, BackendRef)>,
    pub default_backend: Option<usize>,
    pub http_request: Vec<HttpRule>,
    pub http_response: Vec<HttpRule>,
    pub tcp_connection: Vec<TcpRule>,
}

/// The rules a backend applies after the frontend's.
#[derive(Debug, Default)]
pub struct BackendRules {
    pub http_request: Vec<HttpRule>,
    pub http_response: Vec<HttpRule>,
}
