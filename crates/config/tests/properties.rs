//! Property tests over configuration input (the same ground as the cargo-fuzz targets in
//! `fuzz/`, on stable under `cargo test`): arbitrary bytes never panic the lexer or the
//! section reader, errors stay short and located, and time and size values round-trip.

use std::time::Duration;

use proptest::prelude::*;
use sluice_config::units::{parse_size, parse_time};
use sluice_config::{lex_bytes, lex_line, parse_bytes};

fn env(name: &str) -> Option<String> {
    (name == "SET").then(|| "a b".to_string())
}

/// Bytes that look like configuration often enough to reach every branch of the lexer.
fn config_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            4 => any::<u8>(),
            2 => prop::sample::select(b" \t\n\r#\\'\"${}-x".to_vec()),
            1 => Just(b'a'),
        ],
        0..400,
    )
}

/// Time units with the microseconds each stands for.
const TIME_UNITS: [(&str, u64); 7] = [
    ("", 1_000),
    ("us", 1),
    ("ms", 1_000),
    ("s", 1_000_000),
    ("m", 60_000_000),
    ("h", 3_600_000_000),
    ("d", 86_400_000_000),
];

/// Size units with their multipliers.
const SIZE_UNITS: [(&str, u64); 7] = [
    ("", 1),
    ("k", 1 << 10),
    ("K", 1 << 10),
    ("m", 1 << 20),
    ("M", 1 << 20),
    ("g", 1 << 30),
    ("G", 1 << 30),
];

/// A size written with the largest unit that divides it exactly.
fn format_size(n: u64) -> String {
    for (unit, mult) in [("g", 1u64 << 30), ("m", 1 << 20), ("k", 1 << 10)] {
        if n != 0 && n.checked_rem(mult) == Some(0) {
            return format!("{}{unit}", n / mult);
        }
    }
    n.to_string()
}

/// A time written with the largest unit that divides it exactly.
fn format_time(t: Duration) -> String {
    let us = t.as_micros() as u64;
    for (unit, per) in TIME_UNITS.iter().rev() {
        if !unit.is_empty() && us != 0 && us.checked_rem(*per) == Some(0) {
            return format!("{}{unit}", us / per);
        }
    }
    format!("{us}us")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_the_lexer(line in config_bytes()) {
        let words = lex_bytes(&line, &env);
        // Valid UTF-8 takes the same path through the `&str` entry point.
        if let Ok(text) = std::str::from_utf8(&line) {
            prop_assert_eq!(lex_line(text, &env), words);
        }
    }

    #[test]
    fn arbitrary_files_give_sections_or_located_short_errors(text in config_bytes()) {
        let lines = text.split(|&b| b == b'\n').count();
        match parse_bytes("p.cfg", &text, &env) {
            Ok(sections) => {
                for s in sections {
                    for l in std::iter::once(&s.header).chain(&s.lines) {
                        prop_assert!(l.line >= 1 && l.line <= lines);
                        prop_assert!(!l.words.is_empty());
                    }
                }
            }
            Err(errors) => {
                prop_assert!(!errors.is_empty());
                for e in errors {
                    prop_assert!(e.line >= 1 && e.line <= lines, "{}", e);
                    let prefix = format!("p.cfg:{}: ", e.line);
                    prop_assert!(e.to_string().starts_with(&prefix));
                }
            }
        }
    }

    #[test]
    fn comments_may_hold_any_bytes(
        words in prop::collection::vec("[a-z0-9:.]{1,10}", 1..6),
        comment in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut line = words.join(" ").into_bytes();
        line.extend_from_slice(b" #");
        line.extend(comment.iter().copied().filter(|&b| b != b'\n'));
        prop_assert_eq!(lex_bytes(&line, &env).unwrap(), words);
    }

    #[test]
    fn arbitrary_strings_never_panic_the_unit_parsers(s in "\\PC{0,30}|[0-9]{0,25}[a-zA-Z]{0,3}") {
        if let Ok(t) = parse_time(&s) {
            prop_assert_eq!(parse_time(&format_time(t)), Ok(t));
        }
        if let Ok(n) = parse_size(&s) {
            prop_assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
    }

    #[test]
    fn times_round_trip(n in prop_oneof![0u64..100_000, any::<u64>()], unit in 0..TIME_UNITS.len()) {
        let (suffix, per) = TIME_UNITS[unit];
        let written = format!("{n}{suffix}");
        match n.checked_mul(per) {
            Some(us) => {
                let t = parse_time(&written).unwrap();
                prop_assert_eq!(t, Duration::from_micros(us));
                prop_assert_eq!(parse_time(&format_time(t)), Ok(t));
            }
            None => prop_assert!(parse_time(&written).is_err()),
        }
    }

    #[test]
    fn sizes_round_trip(n in prop_oneof![0u64..100_000, any::<u64>()], unit in 0..SIZE_UNITS.len()) {
        let (suffix, mult) = SIZE_UNITS[unit];
        let written = format!("{n}{suffix}");
        match n.checked_mul(mult) {
            Some(bytes) => {
                prop_assert_eq!(parse_size(&written), Ok(bytes));
                prop_assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
            }
            None => prop_assert!(parse_size(&written).is_err()),
        }
    }
}
