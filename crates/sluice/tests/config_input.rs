//! Unusual configuration input through the real binary: files that are not UTF-8.

mod common;

use std::process::Command;

use common::*;

/// Runs `sluice -c` on raw bytes: (valid, stderr with the temporary path shown as `c.cfg`).
fn check_bytes(content: &[u8]) -> (bool, String) {
    let dir = TempDir::new();
    let path = dir.0.join("c.cfg");
    std::fs::write(&path, content).unwrap();
    let path = path.to_string_lossy().into_owned();
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &path])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).replace(&path, "c.cfg"),
    )
}

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
    let (ok, err) = check_bytes(&cfg);
    assert!(ok, "{err}");
}

#[test]
fn latin1_in_an_argument_is_refused_with_its_line() {
    let mut cfg = valid_config();
    cfg.extend_from_slice(b"    server caf\xe9 127.0.0.1:3\n");
    let (ok, err) = check_bytes(&cfg);
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
