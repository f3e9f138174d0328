//! Stick tables through the real binary: rate limiting by client address shared by every
//! worker, general purpose counters, the table fetches and converters, `show table` and
//! `clear table`.

mod common;

use common::*;

/// One request on a new connection (so that, with two workers, requests land on both).
fn status(p: &Sluice, path: &str) -> u16 {
    get(p.addr(), path).status
}

/// A value from `show table NAME`'s first entry: `name=value` or `name(period)=value`.
fn entry_value(sock: &std::path::Path, table: &str, name: &str) -> Option<u64> {
    let out = Sluice::cli(sock, &format!("show table {table}"));
    let line = out.lines().find(|l| l.contains("key="))?;
    line.split_whitespace().find_map(|w| {
        let (k, v) = w.split_once('=')?;
        (k == name || k.split('(').next() == Some(name)).then(|| v.parse().ok())?
    })
}

#[test]
fn the_n_plus_first_request_in_a_window_is_refused_on_every_worker_and_the_limit_recovers() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    stick-table type ip size 1k expire 30s store http_req_rate(3s),http_req_cnt,http_err_cnt\n    http-request track-sc0 src\n    http-request deny deny_status 429 if {{ sc_http_req_rate(0) gt 5 }}\n    http-request return status 200 content-type text/plain string ok\n",
        sock.display()
    ));
    // Eight requests take far less than the three-second period even on a loaded machine:
    // each counts, the sixth inside the window is refused.
    let mut answers = Vec::new();
    for _ in 0..8 {
        answers.push(status(&p, "/"));
    }
    let refused = answers.iter().filter(|&&s| s == 429).count();
    assert!(refused >= 1, "{answers:?}");
    assert_eq!(answers[..5], [200; 5], "{answers:?}");
    // Every request counted in one entry, whichever worker served it; refusals are errors.
    assert_eq!(entry_value(&sock, "fe", "http_req_cnt"), Some(8));
    assert_eq!(
        entry_value(&sock, "fe", "http_err_cnt"),
        Some(refused as u64)
    );
    // With nothing sent, the rate falls back to zero within two periods; requests pass again.
    wait_until("the rate to decay", || {
        entry_value(&sock, "fe", "http_req_rate") == Some(0)
    });
    assert_eq!(status(&p, "/"), 200);
    let table = Sluice::cli(&sock, "show table fe");
    assert!(
        table.starts_with("# table: fe, type: ip, size:1024, used:1\n"),
        "{table}"
    );
    assert!(table.contains(" key=127.0.0.1 use=0 exp="), "{table}");
    assert!(Sluice::cli(&sock, "show table").contains("# table: fe, type: ip"));
    // Cleared: the entry is gone.
    assert_eq!(Sluice::cli(&sock, "clear table fe"), "\n");
    assert!(!Sluice::cli(&sock, "show table fe").contains("key="));
}

#[test]
fn counters_fetches_and_converters() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    stick-table type ip size 100 expire 1m store gpc0,http_req_cnt\n    http-request track-sc1 src\n    http-request sc-inc-gpc0(1) if {{ path_beg /bad }}\n    http-request deny deny_status 403 if {{ sc1_get_gpc0 ge 2 }}\n    http-request return status 200 content-type text/plain lf-string \"%[sc1_get_gpc0] %[src_get_gpc0] %[src,table_http_req_cnt(fe)] %[src,in_table(fe)] %[str(10.9.9.9),in_table(fe)] %[sc1_tracked] %[sc0_tracked]\"\n",
        sock.display()
    ));
    assert_eq!(get(p.addr(), "/").text(), "0 0 1 1 0 1 0");
    assert_eq!(get(p.addr(), "/bad").text(), "1 1 2 1 0 1 0");
    // Two marks: refused from now on.
    assert_eq!(status(&p, "/bad"), 403);
    assert_eq!(status(&p, "/"), 403);
    assert_eq!(entry_value(&sock, "fe", "gpc0"), Some(2));
    Sluice::cli(&sock, "clear table fe key 127.0.0.1");
    assert_eq!(status(&p, "/"), 200);
}

#[test]
fn tables_are_checked_when_the_configuration_is_read() {
    for (body, says) in [
        (
            "frontend fe\n    bind 127.0.0.1:1\n    http-request track-sc0 src\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n",
            "track-sc0 needs a stick table",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    http-request track-sc0 src table nosuch\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n",
            "no proxy 'nosuch' with a stick-table",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 10 store http_req_rate\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n",
            "needs a period",
        ),
        (
            "frontend fe\n    bind 127.0.0.1:1\n    stick-table type ip size 10 peers mypeers\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n",
            "not supported yet",
        ),
    ] {
        let (ok, out) = check_config(&format!("{DEFAULTS}{body}"));
        assert!(!ok && out.contains(says), "{body}: {out}");
    }
    // A backend's table, named from a frontend rule.
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request track-sc0 src table be\n    default_backend be\nbackend be\n    stick-table type ip size 10 store http_req_rate(10s)\n    server s 127.0.0.1:2\n"
    ));
    assert!(ok, "{out}");
}
