//! ACLs and conditions as plain data (matched by `crate::acl`).

use super::sample::{Expr, Match, Regex};

/// One ACL: a sample expression, how its samples match, and the patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub expr: Expr,
    pub how: Match,
    /// `-i`: text patterns ignore ASCII case.
    pub icase: bool,
    /// Any of them matching makes the ACL true (none are needed for `found` and `bool`).
    pub patterns: Vec<Pattern>,
}

/// A pattern, prepared for its match method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Text(Vec<u8>),
    Regex(Regex),
    /// An integer range, both ends included (`eq`, `ge`, `lt`... and `A:B` become ranges).
    Range(Option<i64>, Option<i64>),
    /// A network: an address and a prefix length.
    Net(std::net::IpAddr, u8),
}

/// An ACL reference in a condition: true when any of `acls` matches, inverted by `neg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub neg: bool,
    pub acls: Vec<Acl>,
}

/// `if`/`unless` followed by OR'ed groups of AND'ed terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub unless: bool,
    pub groups: Vec<Vec<Term>>,
}

impl Cond {
    /// Whether evaluating it reads the request head.
    pub fn reads_request(&self) -> bool {
        self.groups
            .iter()
            .flatten()
            .flat_map(|t| &t.acls)
            .any(|a| a.expr.reads_request())
    }
}
