use std::borrow::Cow;
use std::fmt;

/// Characters of an argument kept when an error message quotes it.
pub const ECHO_CHARS: usize = 64;

/// Longest error message shown whole; longer ones (a parser that quoted a huge argument
/// itself) lose their middle.
const MAX_MESSAGE: usize = 512;

/// `s` as an error message may quote it: unchanged up to [`ECHO_CHARS`] characters, else its
/// first [`ECHO_CHARS`] characters, `...` and the full length in bytes.
pub fn shorten(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(ECHO_CHARS) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => Cow::Owned(format!("{}... ({} bytes)", &s[..cut], s.len())),
    }
}

/// Caps a whole message at about [`MAX_MESSAGE`] bytes, keeping its start and its end.
fn cap_message(m: &str) -> Cow<'_, str> {
    if m.len() <= MAX_MESSAGE {
        return Cow::Borrowed(m);
    }
    let mut head = MAX_MESSAGE / 2;
    while !m.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = m.len() - MAX_MESSAGE / 4;
    while !m.is_char_boundary(tail) {
        tail += 1;
    }
    Cow::Owned(format!(
        "{} ...({} bytes omitted)... {}",
        &m[..head],
        tail - head,
        &m[tail..]
    ))
}

/// Why a keyword's arguments were refused. Produced by keyword parsers, which do not know
/// the file and line; [`ConfigError`] adds that context.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KwError {
    /// A required argument is absent; the string names what was expected.
    #[error("missing argument: expects {0}")]
    Missing(&'static str),
    /// Argument number `index` (1-based, after the keyword) is invalid.
    #[error("argument {index} '{}': {}", shorten(value), cap_message(reason))]
    BadArg {
        index: usize,
        value: String,
        reason: String,
    },
    /// Too many arguments were given.
    #[error("unexpected extra argument '{}'", shorten(.0))]
    Extra(String),
    /// Anything else, worded by the parser.
    #[error("{}", cap_message(.0))]
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

    /// The same error, for arguments parsed after `n` more words of the keyword
    /// (`tcp-request content ACTION ...` parsed as `ACTION ...`).
    pub fn shifted(self, n: usize) -> Self {
        match self {
            KwError::BadArg {
                index,
                value,
                reason,
            } => KwError::BadArg {
                index: index + n,
                value,
                reason,
            },
            e => e,
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
        let message = cap_message(&self.message);
        if self.line == 0 {
            write!(f, "{}: {message}", self.file)
        } else {
            write!(f, "{}:{}: {message}", self.file, self.line)
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_arguments_are_quoted_whole() {
        assert_eq!(shorten("5s"), "5s");
        let exact = "é".repeat(ECHO_CHARS);
        assert_eq!(shorten(&exact), exact.as_str());
        assert_eq!(
            KwError::bad(2, "x", "bad").to_string(),
            "argument 2 'x': bad"
        );
        assert_eq!(
            KwError::Extra("y".into()).to_string(),
            "unexpected extra argument 'y'"
        );
    }

    #[test]
    fn long_arguments_are_cut_with_their_length() {
        let long = "é".repeat(1000);
        let cut = shorten(&long);
        assert_eq!(cut, format!("{}... (2000 bytes)", "é".repeat(ECHO_CHARS)));
        let huge = "A".repeat(5 << 20);
        let e = KwError::bad(1, &huge, format!("unknown unit '{huge}'")).to_string();
        assert!(e.len() < 1024, "{}", e.len());
        assert!(e.starts_with(&format!(
            "argument 1 '{}... (5242880 bytes)': unknown unit '",
            "A".repeat(64)
        )));
        let e = KwError::Extra(huge.clone()).to_string();
        assert!(e.len() < 200 && e.ends_with("... (5242880 bytes)'"), "{e}");
        let e = KwError::Invalid(format!("'{huge}' is odd")).to_string();
        assert!(e.len() < 1024 && e.ends_with("' is odd") && e.contains("bytes omitted"));
        let e = ConfigError::at("f.cfg", 3, format!("backend '{huge}' not found")).to_string();
        assert!(e.len() < 1024, "{}", e.len());
        assert!(e.starts_with("f.cfg:3: backend 'AAAA") && e.ends_with("' not found"));
        // Short messages are untouched.
        assert_eq!(ConfigError::at("f.cfg", 3, "x").to_string(), "f.cfg:3: x");
    }
}
