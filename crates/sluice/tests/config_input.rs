//! Unusual configuration input through the real binary: files that are not UTF-8, and
//! arguments so long that echoing them would flood the terminal.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn valid_config() -> Vec<u8> {
    format!(
        "{DEFAULTS}frontend f\n    bind 127.0.0.1:1\n    default_backend b\nbackend b\n    server s 127.0.0.1:2\n"
    )
    .into_bytes()
}

#[test]
fn latin1_comments_are_accepted() {
    let mut cfg = b"# R\xe9glages du proxy (Latin-1)\n".to_vec();
    cfg.extend_from_slice(&valid_config());
    cfg.extend_from_slice(b"    # serveur d'\xe9t\xe9 \xff\xfe\r\n");
    let (ok, err) = check_config_bytes(&cfg);
    assert!(ok, "{err}");
}

#[test]
fn latin1_in_an_argument_is_refused_with_its_line() {
    let mut cfg = valid_config();
    cfg.extend_from_slice(b"    server caf\xe9 127.0.0.1:3\n");
    let (ok, err) = check_config_bytes(&cfg);
    assert!(!ok);
    let line = valid_config().iter().filter(|&&b| b == b'\n').count() + 1;
    assert!(
        err.contains(&format!(
            "c.cfg:{line}: word 2 is not valid UTF-8 (byte 0xE9)"
        )),
        "{err}"
    );
    assert_eq!(err.matches("not valid UTF-8").count(), 1, "{err}");
}

#[test]
fn huge_arguments_are_shortened_in_errors() {
    let huge = "A".repeat(5 << 20);
    let cases = [
        // An argument refused by its keyword's parser.
        format!("{DEFAULTS}backend b\n    timeout server 5{huge}\n"),
        // An extra argument.
        format!("{DEFAULTS}backend b\n    balance roundrobin {huge}\n"),
        // An unknown keyword (and its did-you-mean search).
        format!("{DEFAULTS}backend b\n    {huge} x\n"),
        format!("{DEFAULTS}backend b\n    timeout {huge}\n"),
        // Out of any section.
        format!("{huge}\n"),
        // A name echoed by the proxy's own checks.
        format!("{DEFAULTS}frontend f\n    bind 127.0.0.1:1\n    default_backend {huge}\n"),
    ];
    for cfg in cases {
        let started = Instant::now();
        let (ok, err) = check_config_bytes(cfg.as_bytes());
        assert!(!ok);
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "took {:?}",
            started.elapsed()
        );
        assert!(
            err.len() < 2000,
            "{} bytes of errors: {}",
            err.len(),
            &err[..2000]
        );
        assert!(err.contains("c.cfg:"), "{err}");
        // Either the argument was cut where it is quoted, or the message lost its middle.
        assert!(
            err.contains("... (") || err.contains("bytes omitted"),
            "{err}"
        );
    }
}
