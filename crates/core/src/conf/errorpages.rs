//! Custom error pages as configured (`errorfile`, `http-error`).

use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct ErrorPages {
    pages: Vec<(u16, Arc<[u8]>)>,
}

impl ErrorPages {
    pub fn get(&self, status: u16) -> Option<&[u8]> {
        self.pages
            .iter()
            .rev()
            .find(|(s, _)| *s == status)
            .map(|(_, b)| &b[..])
    }

    pub(crate) fn set(&mut self, status: u16, bytes: Vec<u8>) {
        self.pages.retain(|(s, _)| *s != status);
        self.pages.push((status, bytes.into()));
    }
}
