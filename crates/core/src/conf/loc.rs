//! Source locations kept for errors found after parsing.

use std::sync::Arc;

use sluice_config::ConfigError;

/// Where a line came from, kept by settings that are validated after their section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loc {
    pub file: Arc<str>,
    pub line: usize,
}

impl Loc {
    pub fn error(&self, msg: impl Into<String>) -> ConfigError {
        ConfigError::at(&self.file, self.line, msg)
    }
}
