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
