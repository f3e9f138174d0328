//! ACLs, conditions and HTTP rules as plain data (evaluated by `crate::rules`).

pub use super::acl::{Acl, Cond, Term};
use super::loc::Loc;

/// What an `http-request` / `http-response` rule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Answer directly with this status, content type and body.
    Return {
        status: u16,
        content_type: Option<String>,
        body: Vec<u8>,
    },
    Deny {
        status: u16,
    },
    /// Stop evaluating rules.
    Allow,
    SetHeader(String, String),
    AddHeader(String, String),
    DelHeader(String),
    /// Answer with a built-in service (`use-service`).
    UseService(Service),
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
}

impl RulesConf {
    /// No ACL, switching or HTTP rule is configured (what `mode tcp` requires).
    pub(crate) fn http_rules_empty(&self) -> bool {
        self.acls.is_empty()
            && self.switching.is_empty()
            && self.http_request.is_empty()
            && self.http_response.is_empty()
    }
}

/// A frontend's rules with backend names resolved to indices into `Config::backends`.
#[derive(Debug, Default)]
pub struct FrontendRules {
    pub switching: Vec<(Option<Cond>, usize)>,
    pub default_backend: Option<usize>,
    pub http_request: Vec<HttpRule>,
    pub http_response: Vec<HttpRule>,
}

/// The rules a backend applies after the frontend's.
#[derive(Debug, Default)]
pub struct BackendRules {
    pub http_request: Vec<HttpRule>,
    pub http_response: Vec<HttpRule>,
}
