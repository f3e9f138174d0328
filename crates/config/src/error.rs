use std::fmt;

/// Why a keyword's arguments were refused. Produced by keyword parsers, which do not know
/// the file and line; [`ConfigError`] adds that context.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KwError {
    /// A required argument is absent; the string names what was expected.
    #[error("missing argument: expects {0}")]
    Missing(&'static str),
    /// Argument number `index` (1-based, after the keyword) is invalid.
    #[error("argument {index} '{value}': {reason}")]
    BadArg {
        index: usize,
        value: String,
        reason: String,
    },
    /// Too many arguments were given.
    #[error("unexpected extra argument '{0}'")]
    Extra(String),
    /// Anything else, worded by the parser.
    #[error("{0}")]
    Invalid(String),
    /// A keyword HAProxy has that sluice recognises but does not implement yet.
    #[error("not supported yet ({0})")]
    NotYet(&'static str),
}

impl KwError {
    pub fn bad(index: usize, value: &str, reason: impl Into<String>) -> Self {
        KwError::BadArg {
            index,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// A configuration error located in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl ConfigError {
    pub fn at(file: &str, line: usize, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}
