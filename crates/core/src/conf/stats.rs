//! Monitoring settings of a frontend (`monitor-uri`, `monitor fail`).

use super::rules::Cond;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MonitorConf {
    /// `monitor-uri`: a request for exactly this URI is answered by the proxy itself, 200
    /// while the service is fine.
    pub uri: Option<String>,
    /// `monitor fail if|unless COND`: when it holds, the monitor URI answers 503.
    pub fail: Option<Cond>,
}

/// The statistics page of a proxy (`stats enable`, `stats uri`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatsPage {
    /// `stats enable` (or any other `stats` page keyword, as in HAProxy).
    pub enabled: bool,
    /// `stats uri`: requests whose URI starts with it get the page (`/haproxy?stats`).
    pub uri: Option<String>,
    /// `stats realm`: the basic-authentication realm.
    pub realm: Option<String>,
    /// `stats auth USER:PASS`, any number.
    pub auth: Vec<(String, String)>,
    /// `stats refresh`: the page reloads itself this often.
    pub refresh: Option<std::time::Duration>,
    pub hide_version: bool,
    pub show_legends: bool,
    /// `stats show-node [NAME]`: the node name shown (the host name without NAME).
    pub show_node: Option<Option<String>>,
    /// `stats show-desc [DESC]` (the global `description` without DESC).
    pub show_desc: Option<Option<String>>,
    /// `description TEXT`: this proxy's, shown beside its name on the page.
    pub description: Option<String>,
    /// `stats scope NAME`: only these proxies are shown (all without any).
    pub scope: Vec<String>,
    /// `stats admin if|unless COND`: when it holds, the page offers server actions.
    pub admin: Option<Cond>,
    /// `stats http-request allow|deny|auth [realm R] [if|unless COND]`, in order.
    pub rules: Vec<(StatsRule, Option<Cond>)>,
}

/// What a `stats http-request` rule does with a request for the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsRule {
    Allow,
    Deny,
    /// Ask for credentials (`stats auth` users), with this realm.
    Auth(Option<String>),
}

impl StatsPage {
    /// The URI prefix the page answers on.
    pub fn uri(&self) -> &str {
        self.uri.as_deref().unwrap_or("/haproxy?stats")
    }
}
