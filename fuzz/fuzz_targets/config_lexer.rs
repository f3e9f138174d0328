//! Configuration files may hold anything (a wrong file, another encoding, a pasted binary):
//! the lexer and the section reader must return words or located errors, never panic.
//! Run: `cargo +nightly fuzz run config_lexer -- -max_total_time=60` from `fuzz/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_config::{lex_bytes, parse_bytes};

fuzz_target!(|data: &[u8]| {
    let env = |name: &str| (name == "X").then(|| "v a l".to_string());
    for line in data.split(|&b| b == b'\n') {
        let _ = lex_bytes(line, &env);
    }
    let lines = data.split(|&b| b == b'\n').count();
    match parse_bytes("fuzz.cfg", data, &env) {
        Ok(sections) => {
            for s in &sections {
                for l in std::iter::once(&s.header).chain(&s.lines) {
                    assert!(l.line >= 1 && l.line <= lines && !l.words.is_empty());
                }
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            for e in &errors {
                assert!(e.line >= 1 && e.line <= lines);
                assert!(
                    e.to_string().len() < 2048,
                    "an error message echoes too much"
                );
            }
        }
    }
});
