//! HAProxy-syntax configuration reading, independent of what the keywords mean.
//!
//! This crate turns configuration files into [`Section`]s of lexed [`Line`]s and provides the
//! [`Keyword`] table type that feature modules use to parse their own keywords. It knows nothing
//! about any particular keyword: the proxy's modules own their tables (as HAProxy's keyword
//! tables live next to the feature), and a dispatcher ([`dispatch`]) routes each line to the row
//! whose words match it, reporting unknown keywords with file, line and a "did you mean".
//!
//! Invariant: every error produced while reading a file carries the file name and line number
//! of the offending line.

pub mod cond;
mod env;
mod error;
mod keyword;
mod lexer;
mod section;
pub mod units;

pub use env::{Env, ENV_KEYWORDS};
pub use error::{shorten, ConfigError, KwError};
pub use keyword::{dispatch, no_args, not_yet, Keyword, Scope};
pub use lexer::{lex_bytes, lex_line, LexError};
pub use section::{parse_bytes, parse_files, parse_str, Line, Section, SectionKind};
