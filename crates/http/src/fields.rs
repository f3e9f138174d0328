//! Header fields held by value, in order ([`FieldList`]): those of the proxy's own answers
//! and of request copies. Names keep the spelling they were given.

use crate::name_is;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldList(pub Vec<(Vec<u8>, Vec<u8>)>);

impl FieldList {
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        self.0.push((name.to_vec(), value.to_vec()));
    }

    /// The first value of field `lower` (a lowercase name).
    pub fn header(&self, lower: &str) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(n, _)| name_is(n, lower))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether a `Connection` field names `token` (lowercase).
    pub fn nominates(&self, token: &[u8]) -> bool {
        self.0
            .iter()
            .filter(|(n, _)| name_is(n, "connection"))
            .flat_map(|(_, v)| v.split(|&b| b == b','))
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
    }
}

impl std::ops::Deref for FieldList {
    type Target = Vec<(Vec<u8>, Vec<u8>)>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for FieldList {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
