//! ACLs and conditions as plain data (matched by `crate::acl`).

pub use super::patterns::{Pattern, PatternUse};
use super::sample::{Expr, Match};

/// One ACL: a sample expression, how its samples match, and the patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub expr: Expr,
    pub how: Match,
    /// `-i`: text patterns ignore ASCII case.
    pub icase: bool,
    /// The pattern lists it reads (its files, then the patterns written on its line): any
    /// pattern matching makes the ACL true (none are needed for `found` and `bool`).
    pub lists: Vec<PatternUse>,
}

/// An ACL reference in a condition: true when any of `acls` matches, inverted by `neg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub neg: bool,
    pub acls: Vec<Acl>,
    /// The ACL's name; none for an anonymous one (`{ ... }`).
    pub name: Option<String>,
}

/// `if`/`unless` followed by OR'ed groups of AND'ed terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    pub unless: bool,
    pub groups: Vec<Vec<Term>>,
}

impl Term {
    /// HAProxy's keyword of a fetch the term reads that needs the request's head, when
    /// it has one (a response rule's term that does never matches).
    pub fn request_head_keyword(&self) -> Option<&'static str> {
        self.acls
            .iter()
            .find_map(|a| a.expr.fetch.request_head_keyword())
    }
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
