//! A proxy's `filter` lines, as read.

use super::loc::Loc;

/// The `filter` lines of one proxy, in order of declaration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    /// `filter compression` was written (HAProxy requires it once another filter is
    /// declared, to know the order).
    pub compression: bool,
    pub traces: Vec<TraceConf>,
}

/// `filter trace [name NAME] [quiet] [random-parsing] [random-forwarding] [hexdump]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConf {
    pub at: Loc,
    /// `name`: what its lines are labelled with, before the proxy's name ("TRACE" if none).
    pub name: Option<String>,
    /// `quiet`: the filter says nothing.
    pub quiet: bool,
    /// `random-parsing`, `random-forwarding`, `hexdump`: HAProxy's testing options, which
    /// sluice reads and warns it does not follow.
    pub unfollowed: Vec<&'static str>,
}

/// A `filter trace` of a validated proxy: the label its lines carry (`NAME/PROXY`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub label: String,
    /// Its `random-forwarding` and `hexdump` options, as its first line tells them.
    pub random_forwarding: bool,
    pub hexdump: bool,
}
