//! Keyword tables: each feature exports a `&[Keyword<C>]` whose rows parse that feature's
//! configuration lines into its own settings. [`dispatch`] finds the row for a line.

use crate::error::shorten;
use crate::{ConfigError, KwError, Line};

/// Where a keyword may appear. A set of section kinds, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope(u8);

impl Scope {
    pub const GLOBAL: Scope = Scope(1);
    pub const DEFAULTS: Scope = Scope(2);
    pub const FRONTEND: Scope = Scope(4);
    pub const BACKEND: Scope = Scope(8);
    /// Any proxy section, defaults included.
    pub const PROXY: Scope = Scope(2 | 4 | 8);
    /// Frontend-side keywords (and defaults).
    pub const FE: Scope = Scope(2 | 4);
    /// Backend-side keywords (and defaults).
    pub const BE: Scope = Scope(2 | 8);
    /// Frontend or backend, but not defaults.
    pub const FE_BE: Scope = Scope(4 | 8);

    pub const fn union(self, other: Scope) -> Scope {
        Scope(self.0 | other.0)
    }

    pub fn intersects(self, other: Scope) -> bool {
        self.0 & other.0 != 0
    }
}

/// One row of a keyword table.
pub struct Keyword<C> {
    /// The keyword's words, space separated (`"timeout connect"`, `"option forwardfor"`).
    pub name: &'static str,
    pub scope: Scope,
    /// One line describing the keyword.
    pub help: &'static str,
    /// Parses the words following the keyword's name.
    pub parse: fn(&mut C, &[String]) -> Result<(), KwError>,
}

/// Refuses any argument: for keywords that take none.
pub fn no_args(args: &[String]) -> Result<(), KwError> {
    match args.first() {
        Some(x) => Err(KwError::Extra(x.clone())),
        None => Ok(()),
    }
}

/// The keyword rows of boolean HAProxy options: each `NAME` and its `no NAME` (which cancels a
/// value inherited from `defaults`), neither taking arguments. `set` receives the context and
/// `true` or `false`.
///
/// ```ignore
/// pub const OPTIONS: &[Keyword<ProxyConf>] = flag_keywords![
///     "option abortonclose", Scope::BE, "drop queued requests of departed clients",
///         |c: &mut ProxyConf, on| c.backend.abortonclose = on;
/// ];
/// ```
#[macro_export]
macro_rules! flag_keywords {
    ($( $name:literal, $scope:expr, $help:literal, $set:expr; )*) => {
        &[$(
            $crate::Keyword {
                name: $name,
                scope: $scope,
                help: concat!($name, ": ", $help),
                parse: |c, a| $crate::no_args(a).map(|_| ($set)(c, true)),
            },
            $crate::Keyword {
                name: concat!("no ", $name),
                scope: $scope,
                help: concat!("no ", $name, ": cancel an inherited ", $name),
                parse: |c, a| $crate::no_args(a).map(|_| ($set)(c, false)),
            },
        )*]
    };
}

/// A parser for keywords that are recognised but belong to a feature not built yet.
pub fn not_yet<C>(_: &mut C, _: &[String]) -> Result<(), KwError> {
    Err(KwError::NotYet(
        "recognised HAProxy keyword, not implemented by sluice",
    ))
}

/// Finds the longest row of `tables` whose words prefix the line's words and runs it.
pub fn dispatch<C>(
    tables: &[&[Keyword<C>]],
    ctx: &mut C,
    line: &Line,
    scope: Scope,
    section: &str,
) -> Result<(), ConfigError> {
    let mut best: Option<(&Keyword<C>, usize)> = None;
    for row in tables.iter().flat_map(|t| t.iter()) {
        let n = row.name.split(' ').count();
        if line.words.len() >= n
            && row.name.split(' ').zip(&line.words).all(|(a, b)| a == b)
            && best.is_none_or(|(_, m)| n > m)
        {
            best = Some((row, n));
        }
    }
    let Some((row, n)) = best else {
        return Err(unknown(tables, line, scope, section));
    };
    if !row.scope.intersects(scope) {
        return Err(line.error(format!(
            "'{}' is not allowed in '{section}' section",
            row.name
        )));
    }
    (row.parse)(ctx, &line.words[n..])
        .map_err(|e| line.error(format!("'{}' in '{section}' section: {e}", row.name)))
}

fn unknown<C>(tables: &[&[Keyword<C>]], line: &Line, scope: Scope, section: &str) -> ConfigError {
    // A multi-word family (`timeout`, `option`, `http-request`) is reported with its second word.
    let first = line.words[0].as_str();
    let is_family = tables
        .iter()
        .flat_map(|t| t.iter())
        .any(|r| r.name.starts_with(first) && r.name[first.len()..].starts_with(' '));
    let attempted = match (is_family, line.words.get(1)) {
        (true, Some(second)) => format!("{first} {second}"),
        _ => first.to_string(),
    };
    let mut msg = format!(
        "unknown keyword '{}' in '{section}' section",
        shorten(&attempted)
    );
    let tolerance = (attempted.len() / 3).max(2);
    // The distance is at least the difference in length: rows far longer or shorter than the
    // attempt are skipped, which also keeps a huge word from costing a huge computation.
    let suggestion = tables
        .iter()
        .flat_map(|t| t.iter())
        .filter(|r| {
            r.scope.intersects(scope) && r.name.len().abs_diff(attempted.len()) <= tolerance
        })
        .map(|r| (edit_distance(&attempted, r.name), r.name))
        .min();
    if let Some((d, name)) = suggestion {
        if d <= tolerance {
            msg.push_str(&format!("; did you mean '{name}'?"));
        }
    }
    line.error(msg)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Default)]
    struct Ctx {
        seen: Vec<String>,
    }

    const TABLE: &[Keyword<Ctx>] = &[
        Keyword {
            name: "timeout connect",
            scope: Scope::BE,
            help: "t",
            parse: |c, a| {
                c.seen.push(format!("connect {}", a.join(",")));
                Ok(())
            },
        },
        Keyword {
            name: "timeout",
            scope: Scope::PROXY,
            help: "bare",
            parse: |_, _| Err(KwError::Missing("a timeout name")),
        },
        Keyword {
            name: "balance",
            scope: Scope::BE,
            help: "b",
            parse: |c, a| {
                c.seen.push(format!("balance {}", a.join(",")));
                Ok(())
            },
        },
        Keyword {
            name: "retries",
            scope: Scope::BE,
            help: "r",
            parse: not_yet,
        },
    ];

    fn line(words: &[&str]) -> Line {
        Line {
            file: Arc::from("k.cfg"),
            line: 7,
            words: words.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn longest_match_wins() {
        let mut c = Ctx::default();
        dispatch(
            &[TABLE],
            &mut c,
            &line(&["timeout", "connect", "5s"]),
            Scope::BACKEND,
            "backend",
        )
        .unwrap();
        assert_eq!(c.seen, vec!["connect 5s"]);
    }

    #[test]
    fn errors_carry_location_and_suggestion() {
        let mut c = Ctx::default();
        let e = dispatch(
            &[TABLE],
            &mut c,
            &line(&["balanse", "rr"]),
            Scope::BACKEND,
            "backend",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.cfg:7: unknown keyword 'balanse' in 'backend' section; did you mean 'balance'?"
        );
        let e = dispatch(
            &[TABLE],
            &mut c,
            &line(&["frobnicate"]),
            Scope::BACKEND,
            "backend",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.cfg:7: unknown keyword 'frobnicate' in 'backend' section"
        );
        let e = dispatch(
            &[TABLE],
            &mut c,
            &line(&["balance"]),
            Scope::FRONTEND,
            "frontend",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.cfg:7: 'balance' is not allowed in 'frontend' section"
        );
        let e = dispatch(
            &[TABLE],
            &mut c,
            &line(&["retries", "3"]),
            Scope::BACKEND,
            "backend",
        )
        .unwrap_err();
        assert!(e
            .to_string()
            .contains("'retries' in 'backend' section: not supported yet"));
    }

    #[test]
    fn a_huge_unknown_word_is_cut_and_quick() {
        let mut c = Ctx::default();
        let huge = "x".repeat(1 << 20);
        let started = std::time::Instant::now();
        let e = dispatch(
            &[TABLE],
            &mut c,
            &line(&[&huge, "1"]),
            Scope::BACKEND,
            "backend",
        )
        .unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(
            e.to_string(),
            format!(
                "k.cfg:7: unknown keyword '{}... (1048576 bytes)' in 'backend' section",
                "x".repeat(64)
            )
        );
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("balanse", "balance"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
