//! A request head held by value ([`RequestCopy`]): the request as the rules after an edit
//! see it, or as it was sent to a server, for the response's rules. It is made from a view
//! and edits, field by field, whichever protocol the request came in, and read through
//! [`crate::RequestView::copy`] like any other head.

use crate::head::{Framing, Version};
use crate::name_is;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCopy {
    pub method: Vec<u8>,
    /// As sent: origin or absolute form, or a CONNECT's authority.
    pub target: Vec<u8>,
    /// HTTP/2's `:scheme`, when the request came with one.
    pub scheme: Option<String>,
    pub version: Version,
    pub framing: Framing,
    pub wants_close: bool,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl RequestCopy {
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        self.fields.push((name.to_vec(), value.to_vec()));
    }

    /// The first value of field `lower` (a lowercase name).
    pub fn header(&self, lower: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(n, _)| name_is(n, lower))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether a `Connection` field nominates `token` (lowercase).
    pub fn nominates(&self, token: &[u8]) -> bool {
        self.fields
            .iter()
            .filter(|(n, _)| name_is(n, "connection"))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
    }
}
