//! Statistics through the real binary: `show stat` against HAProxy 2.6's columns and row
//! order, values after known traffic (requests, statuses, bytes counted on the wire),
//! `clear counters`, the typed, JSON and filter forms, exact sums over several workers, and
//! `show info`.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use common::*;

/// `show stat` parsed by a CSV reader: the header, and one map per row.
fn stat(sock: &Path, cmd: &str) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let text = Sluice::cli(sock, cmd);
    let body = text.trim_end().strip_prefix("# ").expect("a '# ' header");
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(body.as_bytes());
    let header: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
    let rows = rd
        .records()
        .map(|r| {
            let r = r.unwrap();
            header
                .iter()
                .cloned()
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect();
    (header, rows)
}

fn row<'a>(rows: &'a [HashMap<String, String>], px: &str, sv: &str) -> &'a HashMap<String, String> {
    rows.iter()
        .find(|r| r["pxname"] == px && r["svname"] == sv)
        .unwrap_or_else(|| panic!("no row {px}/{sv}"))
}

fn num(r: &HashMap<String, String>, col: &str) -> u64 {
    r[col]
        .parse()
        .unwrap_or_else(|_| panic!("{col} = {:?} is not a number", r[col]))
}

/// `show stat` once `done` holds for it: a transaction is counted just after its response
/// is sent, so a client can be a moment ahead of the counters.
fn settled(
    sock: &Path,
    done: impl Fn(&[HashMap<String, String>]) -> bool,
) -> Vec<HashMap<String, String>> {
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = stat(sock, "show stat").1;
        if done(&rows) {
            return rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    rows
}

#[test]
fn show_stat_has_haproxy_26_columns_and_configuration_order() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}\
         backend first\n    server s1 {o}\n    server s2 {o} id 7\n\
         listen mid\n    {{fe}}\n    server m1 {o}\n\
         frontend plain\n    mode tcp\n    {{fe}}\n    default_backend tb\n\
         backend tb\n    mode tcp\n    balance leastconn\n    fullconn 123\n    server t1 {o}\n",
        sock.display(),
        o = origin.addr
    ));
    let (header, rows) = stat(&sock, "show stat");
    // `fullconn` is a backend's session limit, as HAProxy shows it.
    let tb = rows
        .iter()
        .find(|r| r["pxname"] == "tb" && r["svname"] == "BACKEND")
        .unwrap();
    assert_eq!(tb["slim"], "123");
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/haproxy-2.6/show-stat-header.csv"
    ))
    .unwrap();
    let reference: Vec<String> = reference
        .trim_end()
        .trim_start_matches("# ")
        .split(',')
        .map(String::from)
        .collect();
    assert_eq!(header, reference);
    assert_eq!(header.len(), 129, "128 columns and the trailing comma");
    let order: Vec<(String, String, String, String, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["pxname"].clone(),
                r["svname"].clone(),
                r["type"].clone(),
                r["mode"].clone(),
                r["pid"].clone(),
                r["iid"].clone(),
                r["sid"].clone(),
            )
        })
        .collect();
    let t = |a: &str, b: &str, c: &str, d: &str, e: &str, f: &str| {
        (
            a.to_string(),
            b.to_string(),
            c.to_string(),
            d.to_string(),
            "1".to_string(),
            e.to_string(),
            f.to_string(),
        )
    };
    assert_eq!(
        order,
        vec![
            t("first", "s1", "2", "http", "2", "1"),
            t("first", "s2", "2", "http", "2", "7"),
            t("first", "BACKEND", "1", "http", "2", "0"),
            t("mid", "FRONTEND", "0", "http", "3", "0"),
            t("mid", "m1", "2", "http", "3", "1"),
            t("mid", "BACKEND", "1", "http", "3", "0"),
            t("plain", "FRONTEND", "0", "tcp", "4", "0"),
            t("tb", "t1", "2", "tcp", "5", "1"),
            t("tb", "BACKEND", "1", "tcp", "5", "0"),
        ]
    );
    // Filled where HAProxy fills them: no HTTP counters on a TCP proxy, no check columns
    // on an unchecked server.
    assert_eq!(row(&rows, "plain", "FRONTEND")["hrsp_2xx"], "");
    assert_eq!(row(&rows, "mid", "FRONTEND")["hrsp_2xx"], "0");
    assert_eq!(row(&rows, "tb", "t1")["req_tot"], "");
    assert_eq!(row(&rows, "first", "s1")["check_status"], "");
    assert_eq!(row(&rows, "first", "s1")["status"], "no check");
    assert_eq!(row(&rows, "tb", "BACKEND")["algo"], "leastconn");
    assert_eq!(row(&rows, "first", "BACKEND")["-"], "-");
    assert_eq!(row(&rows, "first", "BACKEND")["status"], "UP");
}

/// Sends `req` on a new connection and reads the whole answer (the connection closes after
/// it); returns the bytes read.
fn exchange(addr: SocketAddr, req: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(req).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

fn status_of(rsp: &[u8]) -> u16 {
    std::str::from_utf8(&rsp[9..12]).unwrap().parse().unwrap()
}

#[test]
fn counters_after_known_traffic_and_clear_counters() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| {
            if r.target == "/missing" {
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope"
                    .to_vec()
                    .into()
            } else {
                ok_response("twelve bytes").into()
            }
        }),
    );
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}\
         frontend fe\n    {{fe}}\n    acl blocked path /blocked\n    acl local path /local\n    \
         http-request deny if blocked\n    \
         http-request return status 200 content-type text/plain string hi if local\n    \
         default_backend be\n\
         backend be\n    server s1 {}\n",
        sock.display(),
        origin.addr
    ));
    let addr = p.addr();
    let mut sent = 0u64;
    let mut received = 0u64;
    let mut statuses = Vec::new();
    let mut send = |path: &str| {
        let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let rsp = exchange(addr, req.as_bytes());
        // Counted as HAProxy counts them (`haproxy_size`), not as bytes on the wire.
        sent += haproxy_size(req.as_bytes());
        received += haproxy_size(&rsp);
        statuses.push(status_of(&rsp));
    };
    for _ in 0..10 {
        send("/ok");
    }
    for _ in 0..3 {
        send("/missing");
    }
    send("/local");
    send("/local");
    send("/blocked");
    let garbage = b"NOT HTTP AT ALL\r\n\r\n";
    let rsp = exchange(addr, garbage);
    // A request refused before it became one counts nothing either way, as in HAProxy
    // (its answer comes from the connection layer).
    statuses.push(status_of(&rsp));
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 12);
    assert_eq!(statuses.iter().filter(|s| **s == 404).count(), 3);
    assert_eq!(statuses.iter().filter(|s| **s == 403).count(), 1);
    assert_eq!(statuses.iter().filter(|s| **s == 400).count(), 1);

    // Counters are summed at the end of each transaction, and a connection counts until
    // sluice has closed it: the last ones may still be finishing as their clients read.
    let rows = settled(&sock, |r| {
        let fe = row(r, "fe", "FRONTEND");
        num(fe, "stot") == 17
            && num(fe, "bout") == received
            && num(fe, "scur") == 0
            && num(row(r, "be", "s1"), "stot") == 13
    });
    let fe = row(&rows, "fe", "FRONTEND");
    for (col, want) in [
        ("stot", 17),
        ("conn_tot", 17),
        ("req_tot", 16),
        ("hrsp_2xx", 12),
        ("hrsp_4xx", 5),
        ("hrsp_5xx", 0),
        ("ereq", 1),
        ("dreq", 1),
        ("intercepted", 2),
        ("bin", sent),
        ("bout", received),
        ("scur", 0),
    ] {
        assert_eq!(num(fe, col), want, "FRONTEND {col}");
    }
    assert!(num(fe, "smax") >= 1);
    let be = row(&rows, "be", "BACKEND");
    let srv = row(&rows, "be", "s1");
    for r in [be, srv] {
        for (col, want) in [
            ("stot", 13),
            ("req_tot", 13),
            ("lbtot", 13),
            ("hrsp_2xx", 10),
            ("hrsp_4xx", 3),
            ("econ", 0),
            ("eresp", 0),
        ] {
            assert_eq!(num(r, col), want, "{} {col}", r["svname"]);
        }
        assert!(num(r, "lastsess") < 60, "{}", r["lastsess"]);
        assert!(r["ttime"].parse::<u64>().is_ok());
    }
    // What the server answered, as relayed to the clients (counted as HAProxy counts it).
    let per_ok = received_for(addr, "/ok");
    let per_missing = received_for(addr, "/missing");
    let rows = settled(&sock, |r| num(row(r, "be", "s1"), "stot") == 15);
    let srv = row(&rows, "be", "s1");
    assert_eq!(num(srv, "bout"), 11 * per_ok + 4 * per_missing);
    assert_eq!(
        Sluice::cli(&sock, "show info")
            .lines()
            .find(|l| l.starts_with("CumReq:"))
            .unwrap(),
        "CumReq: 18"
    );

    // `clear counters` resets the maxima only; `clear counters all` everything.
    assert_eq!(Sluice::cli(&sock, "clear counters").trim(), "");
    let rows = stat(&sock, "show stat").1;
    assert_eq!(num(row(&rows, "fe", "FRONTEND"), "smax"), 0);
    assert_eq!(num(row(&rows, "fe", "FRONTEND"), "stot"), 19);
    assert_eq!(Sluice::cli(&sock, "clear counters all").trim(), "");
    let rows = stat(&sock, "show stat").1;
    for (px, sv) in [("fe", "FRONTEND"), ("be", "BACKEND"), ("be", "s1")] {
        let r = row(&rows, px, sv);
        for col in ["stot", "bin", "bout", "hrsp_2xx"] {
            assert_eq!(num(r, col), 0, "{px}/{sv} {col} after clear counters all");
        }
    }
    get(addr, "/ok");
    let rows = settled(&sock, |r| num(row(r, "be", "s1"), "hrsp_2xx") == 1);
    assert_eq!(num(row(&rows, "be", "s1"), "hrsp_2xx"), 1);
}

/// Bytes a client receives for one request on a new connection.
/// What one response to `path` counts in `bout` (as HAProxy counts it).
fn received_for(addr: SocketAddr, path: &str) -> u64 {
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    haproxy_size(&exchange(addr, req.as_bytes()))
}

#[test]
fn typed_json_and_filtered_forms() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server a {o}\n    server b {o}\nbackend other\n    server c {o}\n",
        sock.display(),
        o = origin.addr
    ));
    get(p.addr(), "/x");
    settled(&sock, |r| num(row(r, "be", "BACKEND"), "req_tot") == 1);
    let typed = Sluice::cli(&sock, "show stat typed");
    let line = typed
        .lines()
        .find(|l| l.starts_with("F.") && l.contains(".req_tot."))
        .expect("the frontend's req_tot");
    let re = regex_like(line);
    assert_eq!(re, ("F", "2", "0", "48", "req_tot", "MCP", "u64"), "{line}");
    assert!(line.ends_with(":1"), "{line}");
    assert!(typed.contains("S.3.1.1.svname.1:KNS:str:a\n"), "{typed}");
    // Module counters are numbered without the separator.
    assert!(
        typed.contains("B.3.0.103.ssl_sess.1:MCP:u64:0\n"),
        "{typed}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&Sluice::cli(&sock, "show stat json")).unwrap();
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), 6);
    let first = &rows[0][0];
    assert_eq!(first["objType"], "Frontend");
    assert_eq!(first["field"]["name"], "pxname");
    assert_eq!(first["tags"]["origin"], "Key");
    assert_eq!(first["value"]["type"], "str");
    assert_eq!(first["value"]["value"], "fe");

    // `show stat PROXY TYPE SID`: the servers (4) of one backend, then one server.
    let (_, rows) = stat(&sock, "show stat be 4 -1");
    let names: Vec<&str> = rows.iter().map(|r| r["svname"].as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let (_, rows) = stat(&sock, "show stat 3 4 2");
    let names: Vec<&str> = rows.iter().map(|r| r["svname"].as_str()).collect();
    assert_eq!(names, ["b"]);
    let (_, rows) = stat(&sock, "show stat -1 3 -1");
    let names: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["pxname"].as_str(), r["svname"].as_str()))
        .collect();
    assert_eq!(
        names,
        [("fe", "FRONTEND"), ("be", "BACKEND"), ("other", "BACKEND")]
    );
}

/// The parts of a typed line: kind, iid, sid, position, name, tags, type.
fn regex_like(line: &str) -> (&str, &str, &str, &str, &str, &str, &str) {
    let (key, rest) = line.split_once(':').unwrap();
    let mut k = key.split('.');
    let mut r = rest.split(':');
    (
        k.next().unwrap(),
        k.next().unwrap(),
        k.next().unwrap(),
        k.next().unwrap(),
        k.next().unwrap(),
        r.next().unwrap(),
        r.next().unwrap(),
    )
}

#[test]
fn counters_summed_over_workers_are_exact() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 4\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    let addr = p.addr();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Conn::new(addr);
                for i in 0..50 {
                    assert_eq!(c.get(&format!("/r{i}")).status, 200);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // Each figure is counted as its request ends, after the client got the response:
    // they are read once all are in.
    let rows = settled(&sock, |r| {
        num(row(r, "be", "a"), "hrsp_2xx") == 400
            && num(row(r, "fe", "FRONTEND"), "req_tot") == 400
            && num(row(r, "fe", "FRONTEND"), "hrsp_2xx") == 400
            && num(row(r, "be", "BACKEND"), "stot") == 400
    });
    assert_eq!(num(row(&rows, "fe", "FRONTEND"), "req_tot"), 400);
    assert_eq!(num(row(&rows, "fe", "FRONTEND"), "hrsp_2xx"), 400);
    assert_eq!(num(row(&rows, "fe", "FRONTEND"), "stot"), 8);
    assert_eq!(num(row(&rows, "be", "BACKEND"), "stot"), 400);
    assert_eq!(num(row(&rows, "be", "a"), "lbtot"), 400);
    assert_eq!(num(row(&rows, "be", "a"), "hrsp_2xx"), 400);
    assert_eq!(origin.count(), 400);
}

#[test]
fn show_info_has_haproxy_26_fields() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    maxconn 500\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    for _ in 0..3 {
        get(p.addr(), "/");
    }
    let text = Sluice::cli(&sock, "show info");
    let names: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split_once(':').unwrap().0)
        .collect();
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/haproxy-2.6/show-info-fields.txt"
    ))
    .unwrap();
    let reference: Vec<&str> = reference.lines().collect();
    assert_eq!(names, reference);
    let field = |n: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{n}: ")))
            .unwrap()
            .to_string()
    };
    assert_eq!(field("Name"), "sluice");
    assert_eq!(field("Nbthread"), "2");
    assert_eq!(field("Process_num"), "1");
    assert_eq!(field("Pid"), p.pid().to_string());
    assert_eq!(field("Maxconn"), "500");
    assert_eq!(field("CumReq"), "3");
    assert!(field("Uptime").ends_with('s'));
    let typed = Sluice::cli(&sock, "show info typed");
    assert!(typed.contains("\n3.Nbthread.1:CGS:u32:2\n"), "{typed}");
    let json: serde_json::Value =
        serde_json::from_str(&Sluice::cli(&sock, "show info json")).unwrap();
    let items = json.as_array().unwrap();
    assert_eq!(items.len(), reference.len());
    assert_eq!(items[6]["field"]["name"], "Pid");
    assert_eq!(items[6]["value"]["value"], p.pid());
}

/// The metric families of an exposition: name -> type.
fn families(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        })
        .collect()
}

/// The value of one sample, by its name and labels as written.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {series}"))
        .parse()
        .unwrap()
}

#[test]
fn the_prometheus_exporter_publishes_haproxy_26_metrics() {
    let origin = Origin::start("o");
    let (_down_port, down) = refused_addr();
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    acl metrics path /metrics\n    \
         http-request use-service prometheus-exporter if metrics\n    default_backend be\n\
         backend be\n    server up {}\n    server gone {down} check inter 100ms\n",
        origin.addr
    ));
    for _ in 0..5 {
        assert_eq!(get(p.addr(), "/page").status, 200);
    }
    // The checked server goes down after its first failed check; a transaction is counted
    // just after its response is sent.
    let mut text = String::new();
    for _ in 0..100 {
        text = get(p.addr(), "/metrics").text();
        if text.contains("haproxy_server_status{proxy=\"be\",server=\"gone\",state=\"DOWN\"} 1")
            && text.contains("haproxy_backend_http_requests_total{proxy=\"be\"} 5\n")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(families(&text), haproxy_families("prometheus-metrics.txt"));
    assert_eq!(sample(&text, "haproxy_process_nbproc"), 1.0);
    // The pages, and the exporter's own earlier answers.
    assert!(
        sample(
            &text,
            "haproxy_frontend_http_responses_total{proxy=\"fe\",code=\"2xx\"}"
        ) >= 5.0
    );
    assert_eq!(
        sample(&text, "haproxy_backend_http_requests_total{proxy=\"be\"}"),
        5.0
    );
    assert_eq!(
        sample(
            &text,
            "haproxy_server_status{proxy=\"be\",server=\"up\",state=\"UP\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "haproxy_server_check_status{proxy=\"be\",server=\"gone\",state=\"L4CON\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "haproxy_server_limit_sessions{proxy=\"be\",server=\"up\"}"
        )
        .to_string(),
        "NaN"
    );
    // A server without a check: its check counters are NaN, as HAProxy 2.6.12 writes
    // them; the checked one's are numbers.
    for m in [
        "check_failures_total",
        "check_up_down_total",
        "downtime_seconds_total",
    ] {
        let up = format!("haproxy_server_{m}{{proxy=\"be\",server=\"up\"}}");
        assert_eq!(sample(&text, &up).to_string(), "NaN", "{m}");
        let gone = format!("haproxy_server_{m}{{proxy=\"be\",server=\"gone\"}}");
        assert!(!sample(&text, &gone).is_nan(), "{m}");
    }
    // Only what the scope asks for.
    let be_only = get(p.addr(), "/metrics?scope=backend").text();
    let names = families(&be_only);
    assert!(!names.is_empty());
    assert!(
        names.iter().all(|(n, _)| n.starts_with("haproxy_backend_")),
        "{names:?}"
    );
    let none = get(p.addr(), "/metrics?scope=").text();
    assert!(families(&none).is_empty(), "{none}");

    // The exporter's answers are the proxy's own: intercepted, not sent to a server.
    assert_eq!(origin.count(), 5);
}

#[test]
fn promtool_lints_the_exposition_and_prometheus_scrapes_it() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    acl metrics path /metrics\n    \
         http-request use-service prometheus-exporter if metrics\n    default_backend be\n\
         backend be\n    server s1 {} check inter 1s\n",
        origin.addr
    ));
    for _ in 0..7 {
        get(p.addr(), "/x");
    }
    let text = get(p.addr(), "/metrics").body;
    let mut lint = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; .ci/run installs it)");
    lint.stdin.take().unwrap().write_all(&text).unwrap();
    let out = lint.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // HAProxy's own exposition draws exactly this one remark (a counter without `_total`,
    // a name kept so that HAProxy's dashboards work); anything else is ours.
    let remarks: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        remarks,
        ["haproxy_process_failed_resolutions counter metrics should have \"_total\" suffix"],
        "{said}"
    );

    // A real Prometheus server scrapes the exporter; its query API sees the request count.
    let dir = TempDir::new();
    let web = format!("127.0.0.1:{}", free_port());
    let cfg = dir.write(
        "prometheus.yml",
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sluice\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{}']\n",
            p.addr()
        ),
    );
    let mut prom = std::process::Command::new("prometheus")
        .arg(format!("--config.file={cfg}"))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.0.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("prometheus (Debian's prometheus package; .ci/run installs it)");
    let web: SocketAddr = web.parse().unwrap();
    let query = "/api/v1/query?query=haproxy_frontend_http_requests_total%7Bproxy%3D%22fe%22%7D";
    let mut seen = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if TcpStream::connect(web).is_ok() {
            seen = get(web, query).text();
            if seen.contains("\"result\":[{") {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let _ = prom.kill();
    let _ = prom.wait();
    // The scraped value counts the 7 requests and the exporter's own (at least one).
    let v: serde_json::Value = serde_json::from_str(&seen).unwrap_or_else(|_| panic!("{seen}"));
    let value: f64 = v["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap_or_else(|| panic!("{seen}"))
        .parse()
        .unwrap();
    assert!((8.0..20.0).contains(&value), "{seen}");
    assert_eq!(v["data"]["result"][0]["metric"]["job"], "sluice");
}

#[test]
fn monitor_uri_answers_for_the_proxy_and_monitor_fail_turns_it_to_503() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    monitor-uri /healthz\n    \
         acl drain hdr(x-drain) yes\n    monitor fail if drain\n    default_backend be\n\
         frontend abs\n    {{fe}}\n    monitor-uri http://www.example/health\n    default_backend be\n\
         backend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    // A monitor-uri written in absolute form is compared with the target as sent (HAProxy's
    // reg-test checks/http-monitor-uri): not by its path.
    let (r, _) = raw_exchange(
        p.addrs[1],
        b"GET http://www.example/health HTTP/1.1\r\nHost: www.example\r\n\r\n",
    );
    assert!(r.expect("an answer").text().contains("Service ready."));
    assert_eq!(get(p.addrs[1], "/health").text(), "o /health");
    let r = get(p.addr(), "/healthz");
    assert_eq!(r.status, 200);
    let mut c = Conn::new(p.addr());
    c.send(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Drain: yes\r\n\r\n");
    assert_eq!(c.response().status, 503);
    // Only the exact URI is the monitor's; the rest goes to the servers.
    assert_eq!(get(p.addr(), "/healthz/more").status, 200);
    assert_eq!(origin.count(), 2);
    // An absolute-form request is compared by its path, as HAProxy compares it.
    let mut c = Conn::new(p.addr());
    c.send(
        b"GET http://t/healthz HTTP/1.1
Host: t

",
    );
    let r = c.response();
    // HAProxy's own 200 page, and the connection closes after it as HAProxy's does.
    assert_eq!(
        (r.status, r.text().as_str()),
        (
            200,
            "<html><body><h1>200 OK</h1>\nService ready.\n</body></html>\n"
        )
    );
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert!(c.is_closed(), "the monitor answer closes");
    assert_eq!(origin.count(), 2);
    let rows = settled(&sock, |r| num(row(r, "fe", "FRONTEND"), "req_tot") == 4);
    assert_eq!(num(row(&rows, "fe", "FRONTEND"), "intercepted"), 2);
    let (ok, err) = check_config(
        "defaults\n    mode http\nfrontend f\n    bind 127.0.0.1:1\n    monitor fail\n",
    );
    assert!(
        !ok && err.contains("c.cfg:5") && err.contains("'if' or 'unless'"),
        "{err}"
    );
}

#[test]
fn show_env_and_show_threads() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let _p = Sluice::start(&format!(
        "global\n    nbthread 3\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    let path = std::env::var("PATH").unwrap_or_default();
    assert_eq!(
        Sluice::cli(&sock, "show env PATH").trim_end(),
        format!("PATH={path}")
    );
    assert!(Sluice::cli(&sock, "show env")
        .lines()
        .any(|l| l == format!("PATH={path}")));
    assert_eq!(
        Sluice::cli(&sock, "show env SLUICE_NO_SUCH_VARIABLE").trim_end(),
        "Variable not found"
    );
    let threads = Sluice::cli(&sock, "show threads");
    let lines: Vec<&str> = threads.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 3, "{threads}");
    for (i, l) in lines.iter().enumerate() {
        assert!(l.starts_with(&format!("Thread {}: load=", i + 1)), "{l}");
    }
}

/// A raw request on a new connection; the whole answer as text (the connection closes).
fn raw(addr: SocketAddr, req: &str) -> String {
    String::from_utf8_lossy(&exchange(addr, req.as_bytes())).into_owned()
}

#[test]
fn the_stats_page_shows_a_table_per_proxy_and_its_admin_form_drains_a_server() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let (_down_port, down) = refused_addr();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}\
         frontend fe\n    {{fe}}\n    stats enable\n    stats uri /st\n    stats realm Ops\n    \
         stats auth admin:s3cret\n    stats refresh 10s\n    stats show-legends\n    stats show-node edge-1\n    \
         acl all_ok path_beg /\n    stats admin if all_ok\n    default_backend be\n\
         backend be\n    balance roundrobin\n    server a {} check inter 100ms\n    server b {}\n    server gone {down} check inter 100ms\n\
         backend quiet\n    server q {}\n",
        sock.display(),
        a.addr,
        b.addr,
        a.addr
    ));
    let addr = p.addr();
    let auth = "Authorization: Basic YWRtaW46czNjcmV0\r\n"; // admin:s3cret
    let page = |path: &str| {
        raw(
            addr,
            &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n"),
        )
    };

    // No credentials, or wrong ones: 401 with the realm.
    let r = raw(
        addr,
        "GET /st HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    assert!(
        r.to_ascii_lowercase()
            .contains("www-authenticate: basic realm=\"ops\""),
        "{r}"
    );
    let r = raw(addr, "GET /st HTTP/1.1\r\nHost: t\r\nAuthorization: Basic YWRtaW46bm8=\r\nConnection: close\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");

    // Wait until the dead server is found down.
    let mut html = String::new();
    for _ in 0..100 {
        html = page("/st");
        if html.contains("data-server=\"gone\" data-status=\"DOWN\"") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(html.starts_with("HTTP/1.1 200"), "{html}");
    assert!(html.contains("content-type: text/html"), "{html}");
    assert_eq!(
        html.matches("<table class=\"tbl\" id=\"px-").count(),
        3,
        "fe, be, quiet"
    );
    assert!(html.contains("<meta http-equiv=\"refresh\" content=\"10\">"));
    assert!(html.contains(" on edge-1</h2>"));
    assert!(html.contains("id=\"legend\""));
    assert!(
        html.contains("<tr class=\"down server\" data-server=\"gone\" data-status=\"DOWN\">"),
        "{html}"
    );
    assert!(
        html.contains("<tr class=\"active-up server\" data-server=\"a\" data-status=\"UP\">"),
        "{html}"
    );
    assert!(
        html.contains("<tr class=\"nocheck server\" data-server=\"b\""),
        "{html}"
    );
    assert!(html.contains("<form method=\"post\" action=\"/st\">"));
    assert!(!page("/st;norefresh").contains("http-equiv=\"refresh\""));
    let up = page("/st;up");
    assert!(!up.contains("data-server=\"gone\""));
    assert!(up.contains("data-server=\"a\""));

    // The CSV and JSON forms are `show stat`'s.
    let csv = page("/st;csv");
    let header = csv
        .split("\r\n\r\n")
        .nth(1)
        .unwrap()
        .lines()
        .next()
        .unwrap();
    assert_eq!(
        header,
        Sluice::cli(&sock, "show stat").lines().next().unwrap()
    );
    let json = page("/st;json");
    let v: serde_json::Value =
        serde_json::from_str(json.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        v.as_array().unwrap().len(),
        7,
        "fe; a, b, gone, be; q, quiet"
    );

    // The admin form drains server b: no new traffic reaches it.
    let be_id = stat_field(&Sluice::cli(&sock, "show stat"), "be", "BACKEND", "iid");
    let form = format!("s=b&action=drain&b=%23{be_id}");
    let r = raw(
        addr,
        &format!(
            "POST /st HTTP/1.1\r\nHost: t\r\n{auth}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    assert!(r.starts_with("HTTP/1.1 303"), "{r}");
    assert!(
        r.to_ascii_lowercase().contains("location: /st;st=done"),
        "{r}"
    );
    assert_eq!(
        stat_field(&Sluice::cli(&sock, "show stat"), "be", "b", "status"),
        "DRAIN"
    );
    let before = b.count();
    for _ in 0..6 {
        assert_eq!(get(addr, "/x").status, 200);
    }
    assert_eq!(b.count(), before);
    assert!(page("/st;st=DONE").contains("Action processed: DONE"));
    assert!(page("/st").contains("<tr class=\"drain server\" data-server=\"b\""));
}

#[test]
fn the_stats_page_without_admin_refuses_actions_and_scopes_its_proxies() {
    let a = Origin::start("a");
    let _p = Sluice::start(&format!(
        "{DEFAULTS}listen web\n    {{fe}}\n    stats enable\n    stats scope web\n    stats hide-version\n    server a {}\n\
         backend hidden\n    server h {}\n",
        a.addr, a.addr
    ));
    let addr = _p.addr();
    let html = raw(
        addr,
        "GET /haproxy?stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(html.starts_with("HTTP/1.1 200"), "{html}");
    assert_eq!(html.matches("<table class=\"tbl\" id=\"px-").count(), 1);
    assert!(html.contains("id=\"px-web\""));
    assert!(!html.contains("px-hidden"));
    assert!(!html.contains("version"));
    assert!(!html.contains("<form"));
    let form = "s=a&action=maint&b=%232";
    let r = raw(
        addr,
        &format!(
            "POST /haproxy?stats HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
            form.len()
        ),
    );
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert_eq!(get(addr, "/").status, 200);
    let (ok, err) = check_config(
        "defaults\n    mode http\nfrontend f\n    bind 127.0.0.1:1\n    stats auth nopassword\n",
    );
    assert!(
        !ok && err.contains("c.cfg:5") && err.contains("USER:PASSWORD"),
        "{err}"
    );
}

/// Runs Debian's headless Chromium on a URL with extra arguments; its standard output.
fn chromium(url: &str, args: &[&str]) -> String {
    let profile = TempDir::new();
    let out = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--user-data-dir={}", profile.0.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium (Debian's chromium package; .ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_headless_browser_renders_the_stats_page() {
    let a = Origin::start("a");
    let (_down_port, down) = refused_addr();
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    stats enable\n    stats uri /st\n    \
         stats show-legends\n    default_backend be\n\
         backend be\n    server up {} check inter 100ms\n    server gone {down} check inter 100ms\n    server off {}\n\
         backend other\n    server o {}\n",
        sock.display(),
        a.addr,
        a.addr,
        a.addr
    ));
    wait_until_status(&sock, "be", "gone", "DOWN");
    Sluice::cli(&sock, "disable server be/off");
    let url = format!("http://{}/st", p.addr());
    let dom = chromium(&url, &["--dump-dom"]);
    // One table per proxy, each server's row in its state's colour class.
    let tables: Vec<&str> = dom
        .match_indices("<table class=\"tbl\" id=\"px-")
        .map(|(i, _)| {
            let rest = &dom[i + 26..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(tables, ["fe", "be", "other"], "{dom}");
    for (server, class) in [
        ("FRONTEND", "open frontend"),
        ("up", "active-up server"),
        ("gone", "down server"),
        ("off", "maint server"),
        ("BACKEND", "active-up backend"),
    ] {
        assert!(
            dom.contains(&format!("<tr class=\"{class}\" data-server=\"{server}\"")),
            "{server}: {dom}"
        );
    }
    // The screenshot is kept for people to look at.
    let shot = concat!(env!("CARGO_TARGET_TMPDIR"), "/stats-page.png");
    let _ = std::fs::remove_file(shot);
    chromium(
        &url,
        &[&format!("--screenshot={shot}"), "--window-size=1400,800"],
    );
    let png = std::fs::read(shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    eprintln!("stats page screenshot: {shot}");
}

/// Waits until a server's `show stat` status is `want`.
fn wait_until_status(sock: &Path, px: &str, sv: &str, want: &str) {
    settled(sock, |r| row(r, px, sv)["status"] == want);
    assert_eq!(row(&stat(sock, "show stat").1, px, sv)["status"], want);
}

#[test]
fn stats_timeout_bounds_how_long_the_cli_waits_for_a_command() {
    let (_d, sock) = cli_dir();
    let origin = Origin::start("o");
    let _p = Sluice::start(&format!(
        "global\n    stats socket {}\n    stats timeout 200ms\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(8)))
        .unwrap();
    let started = std::time::Instant::now();
    let mut b = [0u8; 16];
    // Nothing sent: the CLI gives up on this connection long before its default 10 s.
    assert!(
        matches!(c.read(&mut b), Ok(0)),
        "the CLI kept the connection open"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
}

#[test]
fn show_errors_keeps_the_last_invalid_request_and_response() {
    let bad = Origin::with_handler(
        "bad",
        std::sync::Arc::new(|_: &Received| {
            b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n"
                .to_vec()
                .into()
        }),
    );
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server broken {}\n",
        sock.display(),
        bad.addr
    ));
    let r = exchange(p.addr(), b"NOT HTTP AT ALL\r\n\r\n");
    assert_eq!(status_of(&r), 400);
    assert_eq!(get(p.addr(), "/x").status, 502);
    let out = Sluice::cli(&sock, "show errors");
    assert!(out.starts_with("Total events captured on ["), "{out}");
    assert!(
        out.contains("] frontend fe (#2): invalid request\n"),
        "{out}"
    );
    assert!(out.contains("error at position 9\n"), "{out}");
    assert!(out.contains("\n  00000  NOT HTTP AT ALL\\r\\n\n"), "{out}");
    assert!(
        out.contains("] backend be (#3): invalid response\n"),
        "{out}"
    );
    // As HAProxy 2.6.12 shows it: the frontend at the other end, the client's address.
    assert!(
        out.contains("  frontend fe (#2), server broken (#1), event #0, src 127.0.0.1:"),
        "{out}"
    );
    assert!(!out.contains(&format!("src {}", bad.addr)), "{out}");
    assert!(out.contains("error at position 10\n"), "{out}");
    assert!(out.contains("  00000  HTTP/1.1 2OO OK\\r\\n\n"), "{out}");
    let only = Sluice::cli(&sock, "show errors fe request");
    assert!(
        only.contains("invalid request") && !only.contains("invalid response"),
        "{only}"
    );
    let only = Sluice::cli(&sock, "show errors -1 response");
    assert!(
        !only.contains("invalid request") && only.contains("invalid response"),
        "{only}"
    );
}

#[test]
fn show_sess_lists_client_connections() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| {
            if r.target == "/slow" {
                std::thread::sleep(std::time::Duration::from_millis(3000));
            }
            ok_response("x").into()
        }),
    );
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    let mut idle = Conn::new(p.addr());
    assert_eq!(idle.get("/x").status, 200);
    let addr = p.addr();
    let slow = std::thread::spawn(move || get(addr, "/slow").status);
    // Until the idle connection's request is counted (its response may reach the client
    // before the worker's bookkeeping after it) and the slow request is routed.
    let idle_src = idle.writer.local_addr().unwrap();
    let mut out = String::new();
    for _ in 0..250 {
        out = Sluice::cli(&sock, "show sess");
        let counted = out
            .lines()
            .any(|l| l.contains(&format!("src={idle_src} ")) && l.contains(" reqs=1 state=idle"));
        let routed = out
            .lines()
            .any(|l| l.contains(" be=be srv=a ") && l.contains("state=active"));
        if counted && routed {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines.len(),
        2,
        "{out}\nthe idle connection is {}; stderr: {}",
        if idle.is_closed() { "closed" } else { "open" },
        p.stderr()
    );
    let idle_line = lines
        .iter()
        .find(|l| l.contains(&format!("src={idle_src} ")))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        idle_line.contains(" fe=fe be=<NONE> srv=<NONE> "),
        "{idle_line}"
    );
    assert!(idle_line.contains(" reqs=1 state=idle"), "{idle_line}");
    let busy = lines.iter().find(|l| l.contains("state=active")).unwrap();
    assert!(
        busy.contains("proto=tcpv4 ") && busy.contains(" fe=fe be=be srv=a "),
        "{busy}"
    );
    assert_eq!(slow.join().unwrap(), 200);
    drop(idle);
}

#[test]
fn the_exporter_leaves_out_servers_in_maintenance_on_request() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    acl metrics path /metrics\n    \
         http-request use-service prometheus-exporter if metrics\n    default_backend be\n\
         backend be\n    server on {o}\n    server off {o} disabled\n",
        o = origin.addr
    ));
    let all = get(p.addr(), "/metrics?scope=server").text();
    assert!(
        all.contains("haproxy_server_status{proxy=\"be\",server=\"off\",state=\"MAINT\"} 1"),
        "{all}"
    );
    let some = get(p.addr(), "/metrics?scope=server&no-maint").text();
    assert!(some.contains("server=\"on\""), "{some}");
    assert!(!some.contains("server=\"off\""), "{some}");
}

#[test]
fn socket_stats_adds_a_row_per_listener() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    {{fe}} name second\n    option socket-stats\n    default_backend be\nbackend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    let second = p.addrs[1];
    let req = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let got = exchange(second, req);
    assert_eq!(status_of(&got), 200);
    let rows = settled(&sock, |r| num(row(r, "fe", "second"), "bout") > 0);
    let names: Vec<(&str, &str, &str)> = rows
        .iter()
        .filter(|r| r["pxname"] == "fe")
        .map(|r| (r["svname"].as_str(), r["type"].as_str(), r["sid"].as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("FRONTEND", "0", "0"),
            ("sock-1", "3", "1"),
            ("second", "3", "2")
        ]
    );
    let l = row(&rows, "fe", "second");
    assert_eq!(num(l, "stot"), 1);
    assert_eq!(num(l, "bin"), haproxy_size(req));
    assert_eq!(num(l, "bout"), haproxy_size(&got));
    assert_eq!(l["status"], "OPEN");
    assert_eq!(l["mode"], "http");
    assert_eq!(l["hrsp_2xx"], "", "listeners have no status classes");
    assert_eq!(num(row(&rows, "fe", "sock-1"), "stot"), 0);
}

#[test]
fn stats_http_request_rules_and_the_weight_action() {
    let a = Origin::start("a");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    stats uri /st\n    \
         stats auth ops:pw\n    acl trusted hdr(x-trusted) yes\n    acl banned hdr(x-banned) yes\n    \
         stats http-request deny if banned\n    stats http-request allow if trusted\n    \
         stats http-request auth realm Inner\n    stats admin if trusted\n    default_backend be\n\
         backend be\n    server s {}\n",
        sock.display(),
        a.addr
    ));
    let addr = p.addr();
    let ask = |extra: &str| {
        raw(
            addr,
            &format!("GET /st HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
        )
    };
    assert!(ask("X-Banned: yes\r\nX-Trusted: yes\r\n").starts_with("HTTP/1.1 403"));
    assert!(ask("X-Trusted: yes\r\n").starts_with("HTTP/1.1 200"));
    let r = ask("");
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    assert!(r.to_ascii_lowercase().contains("realm=\"inner\""), "{r}");
    assert!(ask("Authorization: Basic b3BzOnB3\r\n").starts_with("HTTP/1.1 200")); // ops:pw

    // The weight action: half of the configured weight, then a number.
    let form = "s=s&action=weight&weight=50%25&b=%233";
    let post = |form: &str| {
        raw(
            addr,
            &format!(
                "POST /st HTTP/1.1\r\nHost: t\r\nX-Trusted: yes\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
                form.len()
            ),
        )
    };
    assert!(post(form).starts_with("HTTP/1.1 303"));
    assert_eq!(
        Sluice::cli(&sock, "get weight be/s").trim(),
        "0 (initial 1)"
    );
    assert!(post("s=s&action=weight&weight=7&b=%233").starts_with("HTTP/1.1 303"));
    assert_eq!(
        Sluice::cli(&sock, "get weight be/s").trim(),
        "7 (initial 1)"
    );
    let r = post("s=s&action=weight&weight=999&b=%233");
    assert!(
        r.to_ascii_lowercase().contains("location: /st;st=errp"),
        "{r}"
    );
}

#[test]
fn a_backend_serves_the_stats_page_to_the_requests_routed_to_it() {
    let a = Origin::start("a");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    acl to_stats path_beg /admin/stats\n    use_backend statistics if to_stats\n    default_backend be\n\
         backend statistics\n    stats enable\n    stats uri /admin/stats\n\
         backend be\n    server a {}\n",
        a.addr
    ));
    let html = raw(
        p.addr(),
        "GET /admin/stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(html.starts_with("HTTP/1.1 200"), "{html}");
    assert!(
        html.contains("id=\"px-be\"") && html.contains("id=\"px-statistics\""),
        "{html}"
    );
    assert_eq!(get(p.addr(), "/other").status, 200);
    assert_eq!(a.count(), 1);
}

#[test]
fn the_stats_page_takes_a_scope_in_its_url() {
    let a = Origin::start("a");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    stats enable\n    stats uri /st\n    default_backend app1\nbackend app1\n    server s {o}\nbackend app2\n    server s {o}\nbackend other\n    server s {o}\n",
        o = a.addr
    ));
    let names = |url: &str| -> Vec<String> {
        let csv = raw(
            p.addr(),
            &format!("GET {url} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        );
        let body = csv.split_once("\r\n\r\n").unwrap().1.to_string();
        let mut px: Vec<String> = body
            .lines()
            .skip(1)
            .filter_map(|l| l.split(',').next().map(String::from))
            .filter(|n| !n.is_empty())
            .collect();
        px.dedup();
        px
    };
    assert_eq!(names("/st;csv"), ["fe", "app1", "app2", "other"]);
    // `;scope=TEXT`: the proxies whose name holds it, case ignored (HAProxy's).
    assert_eq!(names("/st;csv;scope=APP"), ["app1", "app2"]);
    assert_eq!(names("/st;csv;scope=app2"), ["app2"]);
}

#[test]
fn listeners_with_socket_stats_have_their_prometheus_families() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    option socket-stats\n    \
         http-request use-service prometheus-exporter if {{ path /metrics }}\n    \
         http-request return status 200 content-type text/plain string ok\n"
    ));
    assert_eq!(get(p.addr(), "/").status, 200);
    let text = get(p.addr(), "/metrics?scope=listener").text();
    assert_eq!(
        families(&text),
        haproxy_families("prometheus-listener-metrics.txt")
    );
    let l = "proxy=\"fe\",listener=\"sock-1\"";
    assert!(sample(&text, &format!("haproxy_listener_sessions_total{{{l}}}")) >= 1.0);
    assert_eq!(
        sample(
            &text,
            &format!("haproxy_listener_status{{{l},state=\"OPEN\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(&text, &format!("haproxy_listener_limit_sessions{{{l}}}")),
        0.0
    );
    // The whole exposition has them too; without socket-stats there are none (the test
    // above compares every family with HAProxy's).
    assert!(get(p.addr(), "/metrics")
        .text()
        .contains("haproxy_listener_bytes_in_total{"));
}

/// The metric families HAProxy 2.6's exporter printed (`name type` per line), recorded in
/// `testdata/haproxy-2.6/FILE`.
fn haproxy_families(file: &str) -> Vec<(String, String)> {
    let path = format!(
        "{}/../../testdata/haproxy-2.6/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.to_string(), t.to_string())
        })
        .collect()
}

/// The buffers `show pools` reports (HAProxy's layout) from a `show pools` answer: those
/// allocated, and those connections hold (allocated but not in the workers' caches).
fn buffers(sock: &Path) -> (u64, u64, String) {
    let text = Sluice::cli(sock, "show pools");
    let line = text
        .lines()
        .find(|l| l.starts_with("  - Pool buffer ("))
        .unwrap_or_else(|| panic!("no buffer pool in {text:?}"))
        .to_string();
    let number_before = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what} in {line}"));
        let digits: String = line[..at]
            .trim_end()
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.chars().rev().collect::<String>().parse().unwrap()
    };
    let allocated = number_before(" allocated (");
    let cached = number_before(" by thread caches)");
    (allocated, allocated - cached, line)
}

/// `show pools` and `PoolAlloc_bytes`/`PoolUsed_bytes` count the workers' I/O buffers:
/// connections idle between requests hold none, a client that stops reading a large
/// response holds at most its connection's two.
#[test]
fn show_pools_counts_the_buffers_connections_hold() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| match r.target.as_str() {
            // More than the sockets on the way hold.
            "/big" => ok_response(&"x".repeat(16 << 20)).into(),
            _ => ok_response("small\n").into(),
        }),
    );
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    tune.bufsize 16384\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    let mut idle: Vec<Conn> = (0..10).map(|_| p.connect()).collect();
    for c in &mut idle {
        assert_eq!(c.get("/").text(), "small\n");
    }
    // Ten keep-alive connections, each between requests: no buffer held.
    wait_until("no buffer held by idle connections", || {
        buffers(&sock).1 == 0
    });
    let (allocated, _, line) = buffers(&sock);
    assert!(allocated >= 1, "{line}");
    assert!(
        line.starts_with("  - Pool buffer (16384 bytes) : "),
        "{line}"
    );
    let info = Sluice::cli(&sock, "show info");
    let field = |n: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{n}: ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(field("PoolAlloc_bytes"), allocated * 16384);
    assert_eq!(field("PoolUsed_bytes"), allocated * 16384);
    // A client that asks for 16 MB and reads nothing: its connection holds a buffer while
    // the response waits, never more than its two.
    let mut stalled = p.connect();
    stalled.send(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n");
    wait_until("the stalled response holding a buffer", || {
        buffers(&sock).1 >= 1
    });
    for _ in 0..5 {
        let (_, held, line) = buffers(&sock);
        assert!(held <= 2, "{line}");
    }
    drop(idle);
}

/// `disable frontend` suspends its listening sockets as HAProxy 2.6 does (a new connection
/// is refused, `show stat` says `PAUSED`), `enable frontend` listens again; the answers are
/// HAProxy's words. `show version` and `show cli level` answer too.
#[test]
fn a_frontend_is_disabled_and_enabled_from_the_cli() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    // A socket of its own (an inherited `fd@` one is not suspended, as in HAProxy).
    let port = free_port();
    let fe_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    bind {fe_addr}\n    default_backend be\n\
         frontend other\n    {{fe}}\n    default_backend be\n\
         backend be\n    server a {}\n",
        sock.display(),
        origin.addr
    ));
    wait_until("the frontend listening", || {
        std::net::TcpStream::connect(fe_addr).is_ok()
    });
    assert_eq!(
        Sluice::cli(&sock, "enable frontend fe"),
        "All sockets are already enabled.\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "disable frontend nope"),
        "No such frontend.\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "disable frontend"),
        "A frontend name is expected.\n\n"
    );
    assert_eq!(Sluice::cli(&sock, "disable frontend fe"), "\n");
    assert_eq!(
        Sluice::cli(&sock, "disable frontend fe"),
        "All sockets are already disabled.\n\n"
    );
    // Refused at once, while the other frontend serves.
    let refused = std::net::TcpStream::connect(fe_addr);
    assert!(
        refused.is_err(),
        "a disabled frontend accepted a connection"
    );
    assert_eq!(get(p.addr(), "/").status, 200);
    let (_, rows) = stat(&sock, "show stat");
    assert_eq!(row(&rows, "fe", "FRONTEND")["status"], "PAUSED");
    assert_eq!(row(&rows, "other", "FRONTEND")["status"], "OPEN");
    assert_eq!(Sluice::cli(&sock, "enable frontend fe"), "\n");
    assert_eq!(get(fe_addr, "/").status, 200);
    let (_, rows) = stat(&sock, "show stat");
    assert_eq!(row(&rows, "fe", "FRONTEND")["status"], "OPEN");
    assert_eq!(
        Sluice::cli(&sock, "show version"),
        format!("{}\n\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(Sluice::cli(&sock, "show cli level"), "admin\n\n");
}

/// `shutdown sessions server B/S` ends the requests in progress on that server (logged as
/// killed, `K`) and `shutdown session 0xID` one connection, as HAProxy 2.6 does; errors in
/// HAProxy's words.
#[test]
fn sessions_are_shut_down_from_the_cli() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| match r.target.as_str() {
            // Answered long after the test is done with it, unless it is cut.
            "/slow" => Reply::Delayed(std::time::Duration::from_secs(30), ok_response("late\n")),
            _ => ok_response("quick\n").into(),
        }),
    );
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n    log stdout format raw local0\n{DEFAULTS}    log global\n    option httplog\n\
         frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    assert_eq!(
        Sluice::cli(&sock, "shutdown session"),
        "Session pointer expected (use 'show sess').\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "shutdown session 0x1"),
        "No such session (use 'show sess').\n\n"
    );
    assert_eq!(
        Sluice::cli(&sock, "shutdown sessions server be/nope"),
        "No such server.\n\n"
    );
    // One request waiting on the server, one connection idle after its request.
    let mut waiting = p.connect();
    waiting.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut idle = p.connect();
    assert_eq!(idle.get("/").text(), "quick\n");
    wait_until("the slow request at the server", || origin.count() >= 2);
    wait_until("the slow request in progress", || {
        Sluice::cli(&sock, "show sess").contains("state=active")
    });
    assert_eq!(Sluice::cli(&sock, "shutdown sessions server be/s"), "\n");
    // Cut while it waited for the server's answer: HAProxy answers 502 and logs `KH--`
    // (the server would answer 200 much later).
    assert_eq!(waiting.response().status, 502);
    wait_until("the killed request logged", || {
        p.stdout().lines().any(|l| {
            l.contains("\"GET /slow HTTP/1.1\"") && l.contains(" 502 ") && l.contains(" KH-- ")
        })
    });
    // The idle connection is untouched by that; `shutdown session` ends it (found by its
    // port: the cut one may still be listed while it closes).
    let listing = Sluice::cli(&sock, "show sess");
    let port = idle.reader.get_ref().local_addr().unwrap().port();
    let id = listing
        .lines()
        .find(|l| l.contains(&format!("src=127.0.0.1:{port} ")) && l.contains("state=idle"))
        .and_then(|l| l.split(':').next())
        .unwrap_or_else(|| panic!("no idle session in {listing}"))
        .to_string();
    assert_eq!(Sluice::cli(&sock, &format!("shutdown session {id}")), "\n");
    assert!(idle.is_closed());
}

/// `set maxconn server B/S N`: a raise lets a queued request in at once, a cut holds new
/// ones back once those in flight are over the new limit; `slim` follows.
#[test]
fn a_servers_maxconn_is_set_from_the_cli() {
    use std::sync::{Condvar, Mutex};
    // Requests to `/hold` wait until the gate opens.
    let gate = std::sync::Arc::new((Mutex::new(false), Condvar::new()));
    let g = gate.clone();
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(move |r: &Received| {
            if r.target == "/hold" {
                let (open, cv) = &*g;
                let mut o = open.lock().unwrap();
                while !*o {
                    o = cv.wait(o).unwrap();
                }
            }
            ok_response("done\n").into()
        }),
    );
    let set_gate = |open: bool| {
        *gate.0.lock().unwrap() = open;
        gate.1.notify_all();
    };
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}    timeout queue 30s\n\
         frontend fe\n    {{fe}}\n    default_backend be\n\
         backend be\n    server s {} maxconn 1\n    server free {} disabled\n",
        sock.display(),
        origin.addr,
        origin.addr
    ));
    let cli = |c: &str| Sluice::cli(&sock, c);
    assert_eq!(cli("set maxconn server be/nope 2"), "No such server.\n\n");
    assert_eq!(
        cli("set maxconn server be/s x"),
        "maxconn string empty or preceded by garbage\n"
    );
    assert!(cli("set maxconn server be/free 2").contains("no 'maxconn' in the configuration"));
    let queued = |n: &str| {
        let (_, rows) = stat(&sock, "show stat");
        row(&rows, "be", "s")[n].clone()
    };
    let hold = || {
        let mut c = p.connect();
        c.send(b"GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
        c
    };
    // maxconn 1: one request at the server, the next one queued.
    let mut a = hold();
    wait_until("a at the server", || origin.count() >= 1);
    let mut b = hold();
    wait_until("b queued", || queued("qcur") == "1");
    // Raised to 2: b goes at once.
    assert_eq!(cli("set maxconn server be/s 2"), "\n");
    wait_until("b at the server", || origin.count() >= 2);
    assert_eq!(queued("slim"), "2");
    // Cut to 1 with two in flight; once they end, one at a time again.
    assert_eq!(cli("set maxconn server be/s 1"), "\n");
    set_gate(true);
    assert_eq!(a.response().text(), "done\n");
    assert_eq!(b.response().text(), "done\n");
    set_gate(false);
    let mut c = hold();
    wait_until("c at the server", || origin.count() >= 3);
    let mut d = hold();
    wait_until("d queued", || queued("qcur") == "1");
    assert_eq!(origin.count(), 3, "d waits while c holds the only slot");
    assert_eq!(queued("slim"), "1");
    set_gate(true);
    assert_eq!(c.response().text(), "done\n");
    assert_eq!(d.response().text(), "done\n");
}

/// `set maxconn frontend` and `set maxconn global` change the connection limits: a
/// connection waiting for a place gets in when the limit rises; answers in HAProxy's words.
#[test]
fn connection_limits_are_set_from_the_cli() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    maxconn 100\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    maxconn 1\n    default_backend be\n\
         backend be\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    let cli = |c: &str| Sluice::cli(&sock, c);
    assert_eq!(
        cli("set maxconn frontend fe"),
        "Integer value expected.\n\n"
    );
    assert_eq!(cli("set maxconn frontend fe -1"), "Value out of range.\n\n");
    assert_eq!(cli("set maxconn frontend nope 2"), "No such frontend.\n\n");
    // One connection holds the only place; the next one waits for it.
    let mut a = p.connect();
    assert_eq!(a.get("/").status, 200);
    let mut b = p.connect();
    b.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(cli("set maxconn frontend fe 2"), "\n");
    assert_eq!(b.response().status, 200);
    let (_, rows) = stat(&sock, "show stat");
    assert_eq!(row(&rows, "fe", "FRONTEND")["slim"], "2");
    let info = |field: &str| -> String {
        cli("show info")
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}: ")).map(String::from))
            .unwrap()
    };
    assert_eq!(cli("set maxconn global"), "Expects an integer value.\n\n");
    assert_eq!(cli("set maxconn global 101"), "Value out of range.\n\n");
    assert_eq!(cli("set maxconn global 50"), "\n");
    assert_eq!(
        (info("Maxconn"), info("Hard_maxconn")),
        ("50".into(), "100".into())
    );
    assert_eq!(cli("set maxconn global 0"), "\n");
    assert_eq!(info("Maxconn"), "100");
    drop((a, b));
}

/// `set rate-limit connections|sessions|ssl-sessions|http-compression global N` changes the
/// process's rate limits, as `show info` then reports them; the answers are HAProxy
/// 2.6.12's for the same commands (recorded by hand with socat).
#[test]
fn rate_limits_are_set_from_the_cli() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    maxconnrate 1000\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    let cli = |c: &str| Sluice::cli(&sock, c);
    let usage = "'set rate-limit' only supports :\n   - 'connections global' to set the per-process maximum connection rate\n   - 'sessions global' to set the per-process maximum session rate\n   - 'ssl-sessions global' to set the per-process maximum SSL session rate\n   - 'http-compression global' to set the per-process maximum compression speed in kB/s\n";
    for bad in [
        "set rate-limit",
        "set rate-limit connections",
        "set rate-limit connections local 5",
        "set rate-limit bogus global 5",
    ] {
        assert_eq!(cli(bad).trim_end(), usage.trim_end(), "{bad}");
    }
    assert_eq!(
        cli("set rate-limit connections global").trim_end(),
        "Expects an integer value."
    );
    assert_eq!(
        cli("set rate-limit connections global -1").trim_end(),
        "Value out of range."
    );
    for ok in [
        "set rate-limit connections global 10",
        "set rate-limit sessions global 20x",
        "set rate-limit ssl-sessions global 30",
        "set rate-limit http-compression global 5",
    ] {
        assert_eq!(cli(ok).trim_end(), "", "{ok}");
    }
    let info = cli("show info");
    for line in [
        "ConnRateLimit: 10",
        "SessRateLimit: 20",
        "SslRateLimit: 30",
        "CompressBpsRateLim: 5120",
    ] {
        assert!(info.lines().any(|l| l == line), "{line}: {info}");
    }
    // Lifted again, and the proxy still serves.
    assert_eq!(cli("set rate-limit connections global 0").trim_end(), "");
    assert!(cli("show info").lines().any(|l| l == "ConnRateLimit: 0"));
    assert_eq!(get(p.addr(), "/x").status, 200);
}

/// `show sess all` gives each connection HAProxy's block (source, frontend and listener,
/// backend and server of the request in progress, age); `show sess 0xID` one of them.
#[test]
fn sessions_are_shown_in_full() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| match r.target.as_str() {
            "/slow" => Reply::Delayed(std::time::Duration::from_secs(30), ok_response("late\n")),
            _ => ok_response("quick\n").into(),
        }),
    );
    let (_d, sock) = cli_dir();
    let port = free_port();
    let _p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:{port} name public\n    default_backend be\nbackend be\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut idle = Conn::new(addr);
    assert_eq!(idle.get("/quick").status, 200);
    let mut waiting = Conn::new(addr);
    waiting.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut all = String::new();
    wait_until("the waiting request routed", || {
        all = Sluice::cli(&sock, "show sess all");
        all.contains("  backend=be (id=")
    });
    let blocks: Vec<&str> = all.split("\n0x").collect();
    assert_eq!(blocks.len(), 2, "{all}");
    let busy = blocks.iter().find(|b| b.contains("backend=be")).unwrap();
    assert!(busy.contains("] id="), "{busy}");
    assert!(busy.contains(" proto=tcpv4 source=127.0.0.1:"), "{busy}");
    assert!(
        busy.contains("\n  frontend=fe (id=2 mode=http), listener=public (id=1)\n"),
        "{busy}"
    );
    assert!(busy.contains("\n  server=s (id=1)\n"), "{busy}");
    assert!(busy.contains(" state=active"), "{busy}");
    let other = blocks.iter().find(|b| !b.contains("backend=be")).unwrap();
    assert!(
        other.contains("  backend=<NONE> (id=-1 mode=-)\n  server=<NONE> (id=-1)\n"),
        "{other}"
    );
    assert!(other.contains(" requests=1 state=idle"), "{other}");
    // One of them by its id.
    let id = all.split(':').next().unwrap().trim_start_matches("0x");
    let one = Sluice::cli(&sock, &format!("show sess 0x{id}"));
    assert_eq!(one.matches("  frontend=fe").count(), 1, "{one}");
    // What is no session pointer lists them all, one line each, as HAProxy reads it.
    assert_eq!(
        Sluice::cli(&sock, "show sess nope")
            .lines()
            .filter(|l| l.starts_with("0x"))
            .count(),
        2
    );
    assert_eq!(Sluice::cli(&sock, "show sess 0x7fffffff").trim(), "");
    drop(waiting);
}

/// `node` and `description` name and describe the process (`show info`, the page's title
/// and description, checks' `send-state`), a proxy's `description` stands beside its name
/// on the page; without a global description `show info` has no such line, as HAProxy's.
#[test]
fn node_and_descriptions_name_the_process_and_its_proxies() {
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    node lb-7\n    description Edge tier, west\n{DEFAULTS}\
         frontend fe\n    {{fe}}\n    description Public entry\n    stats enable\n    stats uri /st\n    \
         stats show-node\n    stats show-desc\n    default_backend be\n\
         backend be\n    description The app servers\n    server s 127.0.0.1:9\n",
        sock.display()
    ));
    let info = Sluice::cli(&sock, "show info");
    assert!(info.contains("\nnode: lb-7\n"), "{info}");
    assert!(info.contains("\ndescription: Edge tier, west\n"), "{info}");
    let html = raw(
        p.addr(),
        "GET /st HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(html.contains(" on lb-7</h2>"), "{html}");
    assert!(
        html.contains("<p class=\"desc\">Edge tier, west</p>"),
        "{html}"
    );
    assert!(html.contains("<caption>fe <span class=\"desc\">Public entry</span></caption>"));
    assert!(html.contains("<caption>be <span class=\"desc\">The app servers</span></caption>"));

    let (_d2, sock2) = cli_dir();
    let _q = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200\n",
        sock2.display()
    ));
    let info = Sluice::cli(&sock2, "show info");
    assert!(
        info.contains("\nnode: ") && !info.contains("\ndescription:"),
        "{info}"
    );
}

/// `show fd [N]`: every descriptor of the process, one line each as HAProxy lists them;
/// the listener, a client connection and a pooled server connection are named after their
/// proxies and server, the CLI's socket as such.
#[test]
fn show_fd_says_what_each_descriptor_is() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        sock.display(),
        origin.addr
    ));
    let mut c = p.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response_for(false).unwrap().status, 200);
    let out = Sluice::cli(&sock, "show fd");
    let find = |needle: &str| out.lines().find(|l| l.contains(needle)).map(str::to_string);
    let listener = find("kind=listener fe=fe proto=tcp").unwrap_or_else(|| panic!("{out}"));
    assert!(listener.ends_with("st=LISTEN"), "{listener}");
    assert!(
        find("kind=client fe=fe sess=0x").is_some_and(|l| l.contains("st=ESTABLISHED")),
        "{out}"
    );
    let server = "kind=server be=be srv=s1 proto=tcp";
    assert!(
        find(server).is_some_and(|l| l.contains(&format!("raddr={}", origin.addr))),
        "{out}"
    );
    assert!(
        find(&format!("kind=cli proto=unix path={}", sock.display())).is_some(),
        "{out}"
    );
    assert!(find("kind=poller").is_some(), "{out}");
    // One descriptor, by its number (HAProxy's `show fd N`).
    let fd = listener.split(':').next().unwrap().trim();
    let one = Sluice::cli(&sock, &format!("show fd {fd}"));
    assert_eq!(one.trim_end(), listener);
    assert!(Sluice::cli(&sock, "show fd x").contains("Expects"));
}

/// `disabled` (and `enabled`, which undoes an inherited one): a disabled frontend listens
/// on nothing, a disabled backend has no server (503), and neither is in `show stat`, as
/// HAProxy 2.6.12 does with the same configuration.
#[test]
fn disabled_proxies_are_checked_but_not_started() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let off = free_port();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend off\n    bind 127.0.0.1:{off}\n    disabled\n    default_backend up\nfrontend fe\n    {{fe}}\n    use_backend down if {{ path /down }}\n    default_backend up\nbackend down\n    disabled\n    server s {}\nbackend up\n    disabled\n    enabled\n    server s {}\n",
        sock.display(),
        origin.addr,
        origin.addr
    ));
    assert_eq!(get(p.addr(), "/").status, 200);
    assert_eq!(get(p.addr(), "/down").status, 503);
    assert_eq!(origin.count(), 1);
    let refused = std::net::TcpStream::connect(("127.0.0.1", off));
    assert!(
        refused.is_err(),
        "the disabled frontend accepted a connection"
    );
    let csv = Sluice::cli(&sock, "show stat");
    let proxies: Vec<&str> = csv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(proxies, ["fe", "up", "up"], "{csv}");
}

/// A backend's row as HAProxy 2.6.12 shows it for the same configuration and traffic: its
/// sessions at once (`smax`) counted as requests take a server, whatever their length; its
/// user weight (`uweight`) that of its usable active servers (not a backup, not one in
/// maintenance).
#[test]
fn a_backend_row_counts_its_sessions_and_usable_weight_as_haproxy() {
    let origin = Origin::start("o");
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {} weight 10\n    server s2 {} weight 20 backup\n    server s3 {} disabled\n",
        sock.display(),
        origin.addr,
        origin.addr,
        origin.addr
    ));
    for _ in 0..3 {
        assert_eq!(get(p.addr(), "/").status, 200);
    }
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "BACKEND", "smax"), "1");
    assert_eq!(stat_field(&csv, "be", "BACKEND", "uweight"), "10");
    assert_eq!(stat_field(&csv, "be", "BACKEND", "weight"), "10");
}
