//! Custom error pages as configured (`errorfile`, `http-error`, `errorfiles` and the
//! `http-errors` sections they name).

use std::sync::Arc;

use super::loc::Loc;
use super::rules::Reply;

/// An error page: a whole response as configured, or an answer rendered per request
/// (`http-error ... lf-string|lf-file|hdr`).
#[derive(Debug, Clone)]
pub enum Page {
    Static(Arc<sluice_http::Answer>),
    Reply(Arc<Reply>),
}

/// The pages of every `http-errors` section, by name.
pub type ErrorSets = std::collections::HashMap<String, Vec<(u16, Page)>>;

#[derive(Debug, Clone, Default)]
pub struct ErrorPages {
    pages: Vec<(u16, Page)>,
    /// `errorfiles NAME [CODE...]` lines, resolved once every `http-errors` section is
    /// known: (how many pages were set before the line, name, codes, where).
    pub sets: Vec<(usize, String, Vec<u16>, Loc)>,
}

impl ErrorPages {
    pub fn get(&self, status: u16) -> Option<&Page> {
        self.pages
            .iter()
            .rev()
            .find(|(s, _)| *s == status)
            .map(|(_, p)| p)
    }

    pub(crate) fn set(&mut self, status: u16, page: Page) {
        self.pages.push((status, page));
    }

    /// Records an `errorfiles` line at its place among the pages.
    pub(crate) fn use_set(&mut self, name: String, codes: Vec<u16>, at: Loc) {
        self.sets.push((self.pages.len(), name, codes, at));
    }

    /// Replaces the `errorfiles` lines with the pages of the sections they name, each at
    /// its place (a page set by a later line wins); an unknown name is an error.
    pub fn resolve(&mut self, sections: &ErrorSets) -> Result<(), (Loc, String)> {
        for (pos, name, codes, at) in std::mem::take(&mut self.sets).into_iter().rev() {
            let Some(pages) = sections.get(&name) else {
                return Err((at, format!("no http-errors section named '{name}'")));
            };
            let chosen = pages
                .iter()
                .filter(|(s, _)| codes.is_empty() || codes.contains(s))
                .cloned();
            let tail = self.pages.split_off(pos.min(self.pages.len()));
            self.pages.extend(chosen);
            self.pages.extend(tail);
        }
        Ok(())
    }
}
