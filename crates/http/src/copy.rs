//! A request head held by value ([`RequestCopy`]): the request as the rules after an edit
//! see it, or as it was sent to a server, for the response's rules. It is made from a view
//! and edits, field by field, whichever protocol the request came in, and read through
//! [`crate::RequestView::copy`] like any other head.

use crate::head::{Framing, Version};
use crate::FieldList;

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
    pub fields: FieldList,
}

impl RequestCopy {
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        self.fields.push(name, value);
    }
}
