//! The command line and configuration errors, through the real binary.

mod common;

use std::process::Command;

use common::*;

fn check(text: &str) -> (bool, String, String) {
    let dir = TempDir::new();
    let path = dir.write("c.cfg", text);
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &path])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).replace(&path, "c.cfg"),
    )
}

#[test]
fn every_example_config_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    // The tour's certificate is made by the reader first (its header says how): here, one
    // made for the test stands in for it.
    let tmp = TempDir::new();
    let pem = self_signed(&tmp);
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cfg") {
            let text = std::fs::read_to_string(&path)
                .unwrap()
                .replace("/tmp/sluice-tour.pem", &pem);
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let checked = tmp.write(&name, &text);
            let out = Command::new(sluice_bin())
                .arg("-c")
                .arg("-f")
                .arg(&checked)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                "Configuration file is valid"
            );
            seen += 1;
        }
    }
    assert!(seen >= 3, "examples/ holds at least three configs");
}

#[test]
fn errors_name_file_line_and_keyword() {
    let cases: &[(&str, &str)] = &[
        ("frontend f\n    bind :1\n    frobnicate 1\n", "c.cfg:3: unknown keyword 'frobnicate' in 'frontend' section"),
        ("backend b\n    balanse roundrobin\n", "c.cfg:2: unknown keyword 'balanse' in 'backend' section; did you mean 'balance'?"),
        ("backend b\n    timeout connetc 5s\n", "c.cfg:2: unknown keyword 'timeout connetc' in 'backend' section; did you mean 'timeout connect'?"),
        ("backend b\n    timeout connect 5x\n", "c.cfg:2: 'timeout connect' in 'backend' section: argument 1 '5x': unknown time unit 'x'"),
        ("backend b\n    server s1 127.0.0.1:80 weight 999\n", "c.cfg:2: 'server' in 'backend' section: argument 4 '999': expects an integer from 0 to 256"),
        ("frontend f\n    bind :1\n    default_backend b\nbackend b\n    server s1 127.0.0.1:80 resolvers dns\n", "c.cfg:4: backend 'b': server 's1': can't find resolvers section 'dns'"),
        ("frontend f\n    bind :1\n    default_backend b\nbackend b\n    server s1 127.0.0.1:80 track nope/s9\n", "c.cfg:4: backend 'b': server 's1' tracks 'nope/s9', which does not exist"),
        ("backend b\n    server s1 127.0.0.1:80 check rise 0\n", "c.cfg:2: 'server' in 'backend' section: argument 5 '0': expects a positive integer"),
        ("backend b\n    tcp-check expect string-lf %[src]\n", "c.cfg:2: 'tcp-check expect' in 'backend' section: tcp-check expect string-lf: not supported yet"),
        ("backend b\n    http-check expect rstatus ^(2\n", "c.cfg:2: 'http-check expect' in 'backend' section: argument 2 '^(2': invalid regular expression"),
        ("frontend f\n    bind :1\n    server s 1.2.3.4:5\n", "c.cfg:3: 'server' is not allowed in 'frontend' section"),
        ("frontend f\n    bind :1\n    use_backend nope\n", "c.cfg:3: backend 'nope' not found"),
        ("frontend f\n    bind :1\n    use_backend b if missing_acl\nbackend b\n", "c.cfg:3: 'use_backend' in 'frontend' section: argument 3 'missing_acl': no such ACL"),
        ("frontend f\n", "c.cfg:1: frontend 'f' has no 'bind' line"),
        ("global\n    nbthread zero\n", "c.cfg:2: 'nbthread' in 'global' section: argument 1 'zero': expects an integer from 1 to 1024"),
        ("listen l\n    bind \"unterminated\n", "c.cfg:2: unterminated double quote"),
        ("bind :80\n", "c.cfg:1: unknown keyword 'bind' out of section"),
        ("frontend f\n    bind :1\n    mode health\n", "c.cfg:3: 'mode' in 'frontend' section: argument 1 'health': expects http or tcp"),
        ("backend b\n    balance hash nosuch(x)\n", "c.cfg:2: 'balance' in 'backend' section: argument 2 'nosuch(x)': unknown sample fetch 'nosuch'"),
        ("fcgi-app php\n    docroot /var/www\n", "c.cfg:1: 'fcgi-app' section: not supported yet"),
        ("frontend f\n    bind :1\n    log-format \"%trg %Tnope\"\n", "unknown log-format variable '%Tnope'"),
    ];
    for (text, want) in cases {
        let (ok, _, stderr) = check(text);
        assert!(!ok, "{text:?} must be refused");
        assert!(
            stderr.contains(want),
            "{text:?}\nwant: {want}\ngot:  {stderr}"
        );
    }
}

#[test]
fn all_errors_are_reported_at_once() {
    let (ok, _, stderr) =
        check("frontend f\n    bind :1\n    nope1\n    nope2\nbackend b\n    nope3\n");
    assert!(!ok);
    for l in ["c.cfg:3:", "c.cfg:4:", "c.cfg:6:"] {
        assert!(stderr.contains(l), "{stderr}");
    }
    assert!(stderr.contains("3 error(s)"));
}

#[test]
fn environment_variables_and_defaults_inheritance() {
    let (ok, out, err) = check("defaults\n    timeout client \"${SLUICE_T-5s}\"\nfrontend f\n    bind \"127.0.0.1:${SLUICE_PORT-8080}\"\n    default_backend b\nbackend b\n");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "Configuration file is valid");
}

#[test]
fn command_line() {
    let out = Command::new(sluice_bin()).arg("-v").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("sluice version "));
    let out = Command::new(sluice_bin()).arg("-h").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("-f FILE"));
    let out = Command::new(sluice_bin()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no configuration file"));
    let out = Command::new(sluice_bin())
        .args(["-f", "/nonexistent.cfg", "-c"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.cfg: cannot read file"));
    let out = Command::new(sluice_bin()).args(["-Z"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option '-Z'"));
    let out = Command::new(sluice_bin()).args(["-x"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("-x expects a stats socket path"));
    let out = Command::new(sluice_bin())
        .args(["-f", "x.cfg", "-sf", "12", "abc"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("-sf expects process ids, not 'abc'"));
}

#[test]
fn several_files_are_read_in_order() {
    let dir = TempDir::new();
    let a = dir.write("a.cfg", "defaults\n    timeout client 5s\n");
    let b = dir.write(
        "b.cfg",
        "frontend f\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n",
    );
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &a, "-f", &b])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_directory_given_to_f_is_read_cfg_file_by_cfg_file_in_lexical_order() {
    let dir = TempDir::new();
    // A `defaults` section applies to the proxies after it: read after the proxies, its
    // `mode http` changes nothing (the frontend stays in TCP mode, where HTTP rules are
    // ignored with a warning); read before them, it puts the frontend in HTTP mode.
    dir.write(
        "10-proxies.cfg",
        "frontend f\n    bind 127.0.0.1:1\n    http-request return status 200 content-type text/plain string hi\n",
    );
    dir.write("20-late.cfg", "defaults\n    mode http\n");
    // Neither a file not ending in .cfg nor a hidden one is read.
    dir.write("30-notes.txt", "this is not configuration\n");
    dir.write(".hidden.cfg", "this is not configuration either\n");
    let path = dir.0.display().to_string();
    let check = || {
        Command::new(sluice_bin())
            .args(["-c", "-f", &path])
            .output()
            .unwrap()
    };
    let ignored = "'http-request' rules ignored for frontend 'f' as they require HTTP mode.";
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(ignored), "{err}");
    dir.write("05-early.cfg", "defaults\n    mode http\n");
    let out = check();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains(ignored), "{err}");
}

#[test]
fn binding_an_address_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = TempDir::new();
    let cfg = dir.write("c.cfg", &format!("frontend f\n    bind {addr}\n"));
    let out = Command::new(sluice_bin())
        .args(["-f", &cfg])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // The failing line is named, as for any other configuration error.
    assert!(err.contains(&format!("{cfg}:2: bind {addr}: ")), "{err}");
    assert!(err.contains("in use"), "{err}");
    // `-c` checks the files only, as HAProxy's: it binds nothing, so it passes.
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &cfg])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Configuration file is valid"
    );
    drop(taken);
}

#[test]
fn check_mode_binds_nothing() {
    // Addresses that are not this machine's (TEST-NET-1 and -3, an IPv6 documentation
    // address), as on a build host: `-c` passes, as HAProxy's does.
    let text = "frontend f\n    bind 192.0.2.10:80\n    bind 203.0.113.7:443,[2001:db8::1]:8443\n    default_backend b\nbackend b\n    server s 192.0.2.20:80\n";
    let (ok, err) = check_config(text);
    assert!(ok, "{err}");
}

#[test]
fn port_zero_is_refused_with_its_line() {
    for addr in ["127.0.0.1:0", ":0", "[::1]:0"] {
        let (ok, err) = check_config(&format!("frontend f\n    bind {addr}\n"));
        assert!(!ok, "{addr} accepted");
        assert!(err.contains("c.cfg:2: 'bind'"), "{err}");
        assert!(err.contains("invalid port '0'"), "{err}");
    }
}

#[test]
fn binds_ipv4_and_ipv6_addresses() {
    let o = Origin::start("o");
    // Pick free ports from the kernel, then release them for sluice.
    let v4 = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let v6 = std::net::TcpListener::bind("[::1]:0")
        .ok()
        .map(|l| l.local_addr().unwrap());
    let binds = match v6 {
        Some(v6) => format!("    bind {v4}\n    bind {v6}\n"),
        None => format!("    bind {v4}\n"),
    };
    let dir = TempDir::new();
    let cfg = dir.write(
        "c.cfg",
        &format!(
            "{DEFAULTS}\nfrontend f\n{binds}    default_backend b\nbackend b\n    server s {}\n",
            o.addr
        ),
    );
    let mut child = Command::new(sluice_bin())
        .args(["-f", &cfg])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wait_get = |addr: std::net::SocketAddr| {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if let Ok(s) = std::net::TcpStream::connect(addr) {
                drop(s);
                return get(addr, "/v").text();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{addr} never accepted"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    assert_eq!(wait_get(v4), "o /v");
    if let Some(v6) = v6 {
        assert_eq!(wait_get(v6), "o /v");
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_real_http_client_works_through_the_proxy() {
    if Command::new("curl").arg("--version").output().is_err() {
        panic!("curl is required (installed by .ci/run)");
    }
    let o = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend f\n    {{fe}}\n    default_backend b\nbackend b\n    server s {}\n",
        o.addr
    ));
    let url = format!("http://{}/curl", p.addr());
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-X",
            "POST",
            "--data-binary",
            "payload",
            "-D",
            "-",
            &url,
            &url,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    assert_eq!(text.matches("o /curl").count(), 2);
    assert_eq!(o.conns(), 1, "curl reused its connection and so did sluice");
    assert!(o.requests().iter().all(|r| r.body == b"payload"));
}

#[test]
fn a_maxconn_the_descriptor_limit_cannot_hold_is_refused() {
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new();
    // The start is refused before anything is bound: any port will do.
    let cfg = dir.write(
        "c.cfg",
        "global\n    maxconn 1000\nfrontend f\n    bind 127.0.0.1:9\n",
    );
    let mut cmd = Command::new(sluice_bin());
    cmd.args(["-f", &cfg]);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 100,
                rlim_max: 100,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("maxconn 1000 needs 2064 file descriptors but the hard limit is 100"),
        "{err}"
    );
}

/// `no strict-limits`: the same shortfall is a warning and the process starts (and serves);
/// `strict-limits`, the default, is accepted as it is.
#[test]
fn no_strict_limits_starts_despite_the_descriptor_limit() {
    let p = Sluice::start_limited(
        &format!(
            "global\n    maxconn 1000\n    strict-limits\n    no strict-limits\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200\n"
        ),
        Some(100),
    );
    assert_eq!(get(p.addr(), "/").status, 200);
    assert!(
        p.stderr().contains(
            "[WARNING] maxconn 1000 needs 2064 file descriptors but the hard limit is 100"
        ),
        "{}",
        p.stderr()
    );
}

#[test]
fn a_low_descriptor_limit_pauses_accepting_without_spinning() {
    let origin = Origin::start("o");
    // 100 descriptors: the derived maxconn is (100 - 64) / 2 = 18.
    let p = Sluice::start_limited(
        &format!("{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s {}\n", origin.addr),
        Some(100),
    );
    let mut first = p.connect();
    assert_eq!(first.get("/first").status, 200);
    // Far more clients than it may hold: the rest wait in the kernel's backlog.
    let crowd: Vec<std::net::TcpStream> = (0..60)
        .filter_map(|_| std::net::TcpStream::connect(p.addr()).ok())
        .collect();
    let cpu = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.pid())).unwrap();
        let f: Vec<u64> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        f[10] + f[11]
    };
    let before = cpu();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let ticks = cpu() - before;
    assert!(
        ticks < 50,
        "a paused accept loop must not spin: {ticks} ticks in one second"
    );
    // The connection it already holds is still served.
    assert_eq!(first.get("/still").status, 200);
    drop(crowd);
    let mut late = p.connect();
    assert_eq!(
        late.get("/late").status,
        200,
        "accepting resumes as connections close"
    );
}

#[test]
fn the_quick_start_demo_runs_and_balances() {
    // The README's demo, with its three addresses moved to ports the kernel hands out.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/demo.cfg"
    ))
    .unwrap();
    let ports: Vec<std::net::SocketAddr> = (0..3)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        })
        .collect();
    let text = text
        .replace("127.0.0.1:8080", &ports[0].to_string())
        .replace("127.0.0.1:8081", &ports[1].to_string())
        .replace("127.0.0.1:8082", &ports[2].to_string());
    let dir = TempDir::new();
    let cfg = dir.write("demo.cfg", &text);
    let mut child = Command::new(sluice_bin())
        .args(["-f", &cfg])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::net::TcpStream::connect(ports[0]).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the demo exited ({status}): {err}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let a = get(ports[0], "/").text();
    let b = get(ports[0], "/").text();
    let mut seen = vec![a, b];
    seen.sort();
    assert_eq!(seen, vec!["hello from server a\n", "hello from server b\n"]);
    assert_eq!(get(ports[0], "/health").text(), "ok\n");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_cli_speaks_haproxys_protocol() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixStream;
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let _p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n",
        sock.display()
    ));
    let path = std::env::var("PATH").unwrap_or_default();
    let connect = || {
        let c = UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        c
    };
    // Several commands on one line, each answer ending with an empty line; then the close.
    let mut c = connect();
    c.write_all(b"show env PATH;show threads\n").unwrap();
    let mut all = String::new();
    c.read_to_string(&mut all).unwrap();
    assert!(
        all.starts_with(&format!("PATH={path}\n\nThread 1: ")),
        "{all}"
    );
    assert!(
        all.ends_with("\n\n") && all.contains("\nThread 2: "),
        "{all}"
    );
    // A request half-closed by its client is still answered.
    let mut c = connect();
    c.write_all(b"show env PATH\n").unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut all = String::new();
    c.read_to_string(&mut all).unwrap();
    assert_eq!(all, format!("PATH={path}\n\n"));
    // Interactive: a prompt after each answer, until quit.
    let c = connect();
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    let mut prompt = [0u8; 2];
    w.write_all(b"prompt\n").unwrap();
    r.read_exact(&mut prompt).unwrap();
    assert_eq!(&prompt, b"> ");
    w.write_all(b"show env PATH\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, format!("PATH={path}\n"));
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "\n");
    r.read_exact(&mut prompt).unwrap();
    assert_eq!(&prompt, b"> ");
    w.write_all(b"quit\n").unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn conditions_with_cc_and_if_blocks() {
    let cc = |expr: &str| {
        Command::new(sluice_bin())
            .args(["-cc", expr])
            .env("SLUICE_TEST_SET", "yes")
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(cc("defined(SLUICE_TEST_SET)"), Some(0));
    assert_eq!(cc("defined(SLUICE_TEST_UNSET)"), Some(1));
    assert_eq!(cc("version_atleast(2.4) && !version_atleast(3.0)"), Some(0));
    assert_eq!(cc("feature(PROMEX) && feature(OPENSSL)"), Some(0));
    assert_eq!(
        cc("feature(QUIC) || openssl_version_atleast(1.1.1)"),
        Some(1)
    );
    assert_eq!(cc("streq(\"${SLUICE_TEST_SET}\",yes)"), Some(0));
    // `$NAME` in double quotes too, as HAProxy reads it.
    assert_eq!(
        cc("defined(SLUICE_TEST_SET) && streq(\"$SLUICE_TEST_SET\",\"yes\")"),
        Some(0)
    );
    assert_eq!(cc("streq(\"$SLUICE_TEST_SET\",\"no\")"), Some(1));
    assert_eq!(cc("streq(\"$SLUICE_TEST_SET\","), Some(2));
    assert_eq!(cc("nosuch(x)"), Some(2));
    // A configuration whose blocks pick the valid part: read as written, the skipped
    // branches would be errors.
    let dir = TempDir::new();
    let cfg = dir.write(
        "c.cfg",
        ".if defined(SLUICE_TEST_SET)\n.notice \"taking the set branch\"\nfrontend f\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n.else\n    this is not a keyword\n.endif\n\
         .if version_before(2.0)\n    nor is this\n.endif\n",
    );
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &cfg])
        .env("SLUICE_TEST_SET", "yes")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("notice: taking the set branch"), "{err}");
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &cfg])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("c.cfg:9"), "{err}");
    let out = Command::new(sluice_bin()).arg("-vv").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Follows HAProxy 2.6.12") && text.contains("+PROMEX"),
        "{text}"
    );
    assert!(
        text.contains("\nTLS: rustls with aws-lc-rs")
            && text.contains("\nMemory allocator: system"),
        "{text}"
    );
}

#[test]
fn a_memory_limit_is_set_and_the_process_serves_under_it() {
    let p = Sluice::start_args(
        "defaults\n mode http\n timeout client 5s\n\
         frontend fe\n {fe}\n http-request return status 200 content-type text/plain string fine\n",
        &["-m".to_string(), "256".to_string()],
    );
    let r = common::get(p.addr(), "/");
    assert_eq!((r.status, r.text().as_str()), (200, "fine"));
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", p.pid())).unwrap();
    let address = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .unwrap();
    assert!(address.contains(&(256u64 << 20).to_string()), "{address}");
}

#[test]
fn more_of_haproxys_command_line() {
    let dir = TempDir::new();
    let sock = dir.0.join("only.sock");
    // No frontend, but a CLI socket: the process starts (as HAProxy's does); -N sets the
    // connection limit, -C the directory the configuration is read from, -L and -q are
    // accepted.
    dir.write(
        "only.cfg",
        &format!("global\n    stats socket {}\n", sock.display()),
    );
    let mut child = Command::new(sluice_bin())
        .args([
            "-C",
            &dir.0.display().to_string(),
            "-f",
            "only.cfg",
            "-N",
            "321",
            "-L",
            "peer1",
            "-q",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    let info = loop {
        if sock.exists() {
            let out = Sluice::cli(&sock, "show info");
            if !out.is_empty() {
                break out;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the CLI-only process did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(info.contains("\nMaxconn: 321\n"), "{info}");
    // SAFETY: SIGTERM to the process this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // It ends by the signal, as HAProxy's process does.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    // Neither a frontend nor a CLI socket: nothing to serve. `-c` says so and exits 2, as
    // HAProxy 2.6 does; a start refuses.
    let dir = TempDir::new();
    let cfg = dir.write(
        "c.cfg",
        "global\n    nbthread 1\nbackend b\n    server s 127.0.0.1:1\n",
    );
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &cfg])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "Configuration file has no error but will not start (no listener) => exit(2)."
        ),
        "{out:?}"
    );
    let out = Command::new(sluice_bin())
        .args(["-f", &cfg])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to serve"),
        "{out:?}"
    );
    let out = Command::new(sluice_bin())
        .args(["-N", "0"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("-N expects a positive number"));
}

#[test]
fn the_systemd_unit_uses_options_sluice_has() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/sluice.service"
    ))
    .unwrap();
    assert!(unit.contains("\nType=notify\n"));
    assert!(unit.contains("\nExecReload=/bin/kill -USR2 $MAINPID\n"));
    let start = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/sluice "))
        .unwrap();
    assert_eq!(start, "-Ws -f $CONFIG -p $PIDFILE");
    // The check it runs before starting and reloading works on a real configuration.
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.cfg");
    let pre = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStartPre=/usr/local/bin/sluice "))
        .unwrap()
        .replace("$CONFIG", demo);
    let out = Command::new(sluice_bin())
        .args(pre.split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn port_ranges_and_ipv6_dual_stack_binds() {
    // Two consecutive free ports for a range, and a third for the IPv6 binds.
    let (lo, v6) = loop {
        let p = free_port();
        if p < 65000 && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            break (p, free_port());
        }
    };
    let v6_only = free_port();
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: the IPv6 part is skipped");
    }
    let _p = Sluice::start(&format!(
        "{DEFAULTS}frontend f\n    {{fe}}\n    bind 127.0.0.1:{lo}-{}\n    bind [::]:{v6} v4v6\n    bind [::]:{v6_only} v6only\n    http-request return status 200 content-type text/plain lf-string \"%[dst_port]\"\n",
        lo + 1
    ));
    let at = |port: u16| -> std::net::SocketAddr { ([127, 0, 0, 1], port).into() };
    // Both ports of the range answer, each saying which it is.
    for port in [lo, lo + 1] {
        wait_until("the range's listeners", || {
            std::net::TcpStream::connect(at(port)).is_ok()
        });
        assert_eq!(get(at(port), "/").text(), port.to_string());
    }
    // `v4v6` takes IPv4 clients on an IPv6 wildcard, `v6only` does not.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        assert_eq!(get(at(v6), "/").text(), v6.to_string());
        let six: std::net::SocketAddr = format!("[::1]:{v6_only}").parse().unwrap();
        assert_eq!(get(six, "/").text(), v6_only.to_string());
        assert!(std::net::TcpStream::connect(at(v6_only)).is_err());
    }
}

/// A configuration whose only flaw is a warning (an ACL reading the request in a response
/// rule never matches), as HAProxy 2.6.12 warns of it.
const WARNED: &str = "defaults\n    mode http\n    timeout client 1s\n    timeout server 1s\n    timeout connect 1s\nfrontend fe\n    bind 127.0.0.1:8080\n    http-response set-header X 1 if { path /x }\n    http-request return status 200\n";

/// `zero-warning` and `-dW`: a warning fails `-c` (and a start) with HAProxy's words and
/// status; without them it is only said.
#[test]
fn zero_warning_refuses_a_configuration_with_warnings() {
    let (ok, out) = check_config(WARNED);
    assert!(ok && out.contains("[WARNING] config : parsing ["), "{out}");
    let (ok, out) = check_config(&format!("global\n    zero-warning\n{WARNED}"));
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "[ALERT] config : Some warnings were found and 'zero-warning' is set. Aborting."
        ),
        "{out}"
    );
    let dir = TempDir::new();
    let path = dir.write("w.cfg", WARNED);
    let out = Command::new(sluice_bin())
        .args(["-c", "-dW", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'zero-warning' is set"));
}

/// `quiet` and `-q`: no message at start. The process says it listens before it signals
/// the processes it replaces (`-sf`), so once a stand-in for one has been told to go, the
/// message would be there.
#[test]
fn quiet_and_q_start_without_a_message() {
    for (global, args) in [
        ("", vec![]),
        ("global\n    quiet\n", vec![]),
        ("", vec!["-q".to_string()]),
    ] {
        let mut old = Command::new("sleep").arg("60").spawn().unwrap();
        let mut args = args.clone();
        args.extend(["-sf".to_string(), old.id().to_string()]);
        // (Not `Sluice::start`: it waits for the very message.)
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let p = Sluice::start_program(
            sluice_bin(),
            &args,
            &format!(
                "{global}{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200\n"
            ),
        );
        wait_until("the replaced process told to go", || {
            old.try_wait().unwrap().is_some()
        });
        let said = p.stderr().contains("listening on");
        assert_eq!(
            said,
            global.is_empty() && args.len() == 2,
            "{global:?} {args:?}"
        );
    }
}

/// `set-dumpable`: the core size limit is raised again (here from a soft limit of 0 the
/// process inherits).
#[test]
fn set_dumpable_raises_the_core_size_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write the struct given; lowering the soft limit
    // of core dumps only changes how this test process and its children may dump.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_CORE, &mut lim), 0);
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: lim.rlim_max,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_CORE, &zero), 0);
    }
    let p = Sluice::start(&format!(
        "global\n    set-dumpable\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200\n"
    ));
    // SAFETY: as above, the limit as it was.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) };
    let core_limit = || {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", p.pid())).unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max core file size"))
            .unwrap()
            .to_string();
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols[4].to_string(), cols[5].to_string())
    };
    wait_until("a raised core size limit", || {
        let (soft, hard) = core_limit();
        soft != "0" && soft == hard
    });
}

/// `setenv`, `presetenv`, `unsetenv` and `resetenv` change the environment the
/// configuration reads as its lines are read (a `${VAR}` or `.if defined(VAR)` below sees them),
/// and what reads it later (`env()`, `show env`) sees the same; the process's own
/// environment (`PATH` here) is left as it was unless a line says otherwise.
#[test]
fn setenv_and_its_kin_change_what_the_configuration_reads() {
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n    setenv GREETING hello\n    presetenv GREETING ignored\n    presetenv OTHER kept\n    setenv DOOMED 1\n    unsetenv DOOMED\n    setenv STATUS 203\n{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status \"${{STATUS}}\" content-type text/plain lf-string \"${{GREETING}} %[env(OTHER)] %[env(DOOMED)]-\"\n",
        sock.display()
    ));
    let r = get(p.addr(), "/");
    assert_eq!(r.status, 203);
    assert_eq!(r.text(), "hello kept -");
    assert_eq!(
        Sluice::cli(&sock, "show env GREETING").trim_end(),
        "GREETING=hello"
    );
    assert_eq!(
        Sluice::cli(&sock, "show env DOOMED").trim_end(),
        "Variable not found"
    );
    assert!(Sluice::cli(&sock, "show env PATH").starts_with("PATH="));
    // `resetenv` keeps only what it names.
    let (ok, out) = check_config(&format!(
        "global\n    setenv A 1\n    resetenv A\n.if defined(PATH)\n.alert PATH is still there\n.endif\n.if !defined(A)\n.alert A is gone\n.endif\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n"
    ));
    assert!(ok, "{out}");
    let (ok, out) =
        check_config("global\n    resetenv\n.if !defined(PATH)\n.alert PATH is gone\n.endif\n");
    assert!(!ok && out.contains("PATH is gone"), "{out}");
    let (ok, out) = check_config("global\n    setenv ONLYNAME\n");
    assert!(
        !ok && out.contains(":2:") && out.contains("a name and a value"),
        "{out}"
    );
}

/// The README's tour (`examples/tour.cfg`) runs as the README shows it: HTTP/2 over TLS,
/// round robin over two checked servers, the rate limit answering 429 past 20 requests,
/// the statistics page and the CLI. Its certificate, socket and ports are moved to the
/// test's own.
#[test]
fn the_readme_tour_runs() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tour.cfg"
    ))
    .unwrap();
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let sock = dir.0.join("tour.sock");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let text = text
        .replace("/tmp/sluice-tour.pem", &pem)
        .replace("/tmp/sluice-tour.sock", &sock.to_string_lossy())
        .replace(":8443", &format!(":{}", ports[0]))
        .replace(":8081", &format!(":{}", ports[1]))
        .replace(":8082", &format!(":{}", ports[2]));
    let cfg = dir.write("tour.cfg", &text);
    let mut child = Command::new(sluice_bin())
        .args(["-f", &cfg])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("https://127.0.0.1:{}", ports[0]);
    let curl = |path: &str| {
        let out = Command::new("curl")
            .args(["-sk", "--http2", "-w", "\n%{http_code} %{http_version}"])
            .arg(format!("{url}{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    wait_until("the tour listens", || curl("/").ends_with("200 2"));
    // Both servers answer in turn; the CLI sees their checks.
    let state = Sluice::cli(&sock, "show servers state app");
    assert_eq!(
        state.lines().filter(|l| l.contains(" app ")).count(),
        2,
        "{state}"
    );
    let mut seen: Vec<String> = (0..2).map(|_| curl("/")).collect();
    seen.sort();
    assert!(seen[0].starts_with("hello from a"), "{seen:?}");
    assert!(seen[1].starts_with("hello from b"), "{seen:?}");
    let page = curl("/stats");
    assert!(page.contains("app") && page.ends_with("200 2"), "{page}");
    // The rate limit: past 20 requests in 10 seconds, 429.
    let codes: Vec<String> = (0..25).map(|_| curl("/")).collect();
    assert!(codes.iter().any(|c| c.ends_with("429 2")), "{codes:?}");
    let _ = child.kill();
    let _ = child.wait();
}
