//! TLS and HTTP/2 through the real binary with OpenSSL-based clients, so that what the
//! rustls clients of the other tests accept is also what common clients accept: curl
//! verifying the chain (`--cacert`) and presenting a client certificate, Python's `ssl`
//! module verifying, resuming sessions (TLS 1.3 tickets, TLS 1.2) and presenting a client
//! certificate, and h2load multiplexing many streams over few connections to two backends.

mod common;

use std::process::Command;

use common::*;

/// The frontend's answer shows what the TLS session was: version, client certificate
/// used, its verification result, its subject and the protocol ALPN chose.
const SHOW_SESSION: &str = "http-request return status 200 content-type text/plain lf-string \"%[ssl_fc_protocol] %[ssl_c_used] %[ssl_c_verify] %[ssl_c_s_dn] %[ssl_fc_alpn]\"";

/// A frontend with two TLS binds for `site.test`: the first asks nothing of clients, the
/// second requires a certificate from `ca`.
fn session_frontend(ca: &Ca, dir: &TempDir) -> Sluice {
    let (crt, _) = ca.leaf(dir, "site.pem", &["site.test"]);
    let ca_file = ca.ca_file(dir);
    Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {crt} alpn h2,http/1.1\n    {{fe}} ssl crt {crt} ca-file {ca_file} verify required alpn h2,http/1.1\n    {SHOW_SESSION}\n"
    ))
}

fn required(tool: &str) {
    if Command::new(tool).arg("--version").output().is_err() {
        panic!("{tool} is required (installed by .ci/run)");
    }
}

/// curl for `https://site.test:PORT/` (resolved to 127.0.0.1); its exit code, its output
/// and its error message.
fn curl(port: u16, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--resolve"])
        .arg(format!("site.test:{port}:127.0.0.1"))
        .args(args)
        .arg(format!("https://site.test:{port}/"))
        .output()
        .expect("curl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn curl_verifies_the_chain_and_presents_a_client_certificate() {
    required("curl");
    let ca = Ca::new();
    let dir = TempDir::new();
    let p = session_frontend(&ca, &dir);
    let ca_file = ca.ca_file(&dir);
    let (open, need_cert) = (p.addrs[0].port(), p.addrs[1].port());
    // The chain verifies against the CA, for the name asked (no `-k`).
    let v = "\n%{http_version}";
    for (flag, version, alpn) in [("--http1.1", "1.1", "http/1.1"), ("--http2", "2", "h2")] {
        let (code, out, err) = curl(open, &[flag, "--cacert", &ca_file, "-w", v]);
        assert_eq!(code, 0, "{out} {err}");
        assert_eq!(out, format!("TLSv1.3 0 0  {alpn}\n{version}"));
    }
    // Another CA's view of it: curl refuses the server (60: peer certificate not verified).
    let stranger = Ca::named("stranger CA");
    let other_dir = TempDir::new();
    let (code, out, err) = curl(open, &["--cacert", &stranger.ca_file(&other_dir)]);
    assert_eq!((code, out.as_str()), (60, ""), "{err}");
    // `verify required`: a certificate from the CA gets in and is seen by the rules.
    let (cert, key) = ca.client_identity(&dir, "alice");
    let (code, out, err) = curl(
        need_cert,
        &[
            "--http2", "--cacert", &ca_file, "--cert", &cert, "--key", &key,
        ],
    );
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out, "TLSv1.3 1 0 /CN=alice h2");
    // Without one, or with one from another CA, no answer.
    let (code, out, err) = curl(need_cert, &["--cacert", &ca_file]);
    assert!(code != 0 && out.is_empty(), "{code} {out} {err}");
    let (cert, key) = stranger.client_identity(&other_dir, "mallory");
    let (code, out, err) = curl(
        need_cert,
        &["--cacert", &ca_file, "--cert", &cert, "--key", &key],
    );
    assert!(code != 0 && out.is_empty(), "{code} {out} {err}");
}

/// Python's `ssl` module (OpenSSL) against the two binds of [`session_frontend`]: each
/// line it prints is one connection, as JSON.
const PYTHON_CLIENT: &str = r#"
import json, socket, ssl, sys

open_port, cert_port = int(sys.argv[1]), int(sys.argv[2])
ca, other_ca, cert, key = sys.argv[3:7]

def context(cafile, version=None, identity=None):
    ctx = ssl.create_default_context(cafile=cafile)
    if version == "1.2":
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if version == "1.3":
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if identity:
        ctx.load_cert_chain(*identity)
    return ctx

def fetch(name, port, ctx, session=None):
    out = {"name": name}
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
            with ctx.wrap_socket(raw, server_hostname="site.test", session=session) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                out.update(version=s.version(), reused=s.session_reused,
                           body=data.split(b"\r\n\r\n", 1)[1].decode())
                session = s.session
    except (ssl.SSLError, ConnectionError) as e:
        out["error"] = type(e).__name__
        session = None
    print(json.dumps(out), flush=True)
    return session

for version in ("1.3", "1.2"):
    ctx = context(ca, version)
    first = fetch("first " + version, open_port, ctx)
    fetch("again " + version, open_port, ctx, first)
fetch("stranger", open_port, context(other_ca))
fetch("identity", cert_port, context(ca, "1.3", (cert, key)))
fetch("anonymous", cert_port, context(ca, "1.3"))
"#;

#[test]
fn pythons_ssl_module_verifies_resumes_and_presents_a_client_certificate() {
    required("python3");
    let ca = Ca::new();
    let dir = TempDir::new();
    let p = session_frontend(&ca, &dir);
    let (cert, key) = ca.client_identity(&dir, "bob");
    let stranger = Ca::named("stranger CA");
    let other_dir = TempDir::new();
    let script = dir.write("client.py", PYTHON_CLIENT);
    let out = Command::new("python3")
        .arg(&script)
        .arg(p.addrs[0].port().to_string())
        .arg(p.addrs[1].port().to_string())
        .args([ca.ca_file(&dir), stranger.ca_file(&other_dir), cert, key])
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_name = |name: &str| {
        lines
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
    };
    for (version, shown) in [("1.3", "TLSv1.3"), ("1.2", "TLSv1.2")] {
        let first = by_name(&format!("first {version}"));
        assert_eq!(first["version"], shown, "{text}");
        assert_eq!(first["reused"], false, "{text}");
        assert_eq!(first["body"], format!("{shown} 0 0  "), "{text}");
        // The second handshake resumes the first one's session.
        let again = by_name(&format!("again {version}"));
        assert_eq!(again["reused"], true, "{text}");
        assert_eq!(again["body"], format!("{shown} 0 0  "), "{text}");
    }
    assert_eq!(by_name("stranger")["error"], "SSLCertVerificationError");
    assert_eq!(by_name("identity")["body"], "TLSv1.3 1 0 /CN=bob ");
    assert!(by_name("anonymous")["error"].is_string(), "{text}");
}

#[test]
fn h2load_multiplexes_many_streams_over_tls_to_two_backends() {
    required("h2load");
    let (api, web) = (Origin::start("api"), Origin::start("web"));
    let dir = TempDir::new();
    let pem = self_signed(&dir);
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}} ssl crt {pem} alpn h2,http/1.1\n    use_backend api if {{ path_beg /api/ }}\n    default_backend web\nbackend api\n    server a {}\nbackend web\n    server w {}\n",
        api.addr, web.addr
    ));
    let port = p.addrs[0].port();
    // 400 requests over 4 connections, up to 25 streams of each at once, the two paths
    // taken in turns.
    let out = Command::new("h2load")
        .args(["-n", "400", "-c", "4", "-m", "25", "-t", "1"])
        .arg(format!("https://127.0.0.1:{port}/api/items"))
        .arg(format!("https://127.0.0.1:{port}/index.html"))
        .output()
        .expect("h2load runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Application protocol: h2"), "{text}");
    assert!(
        text.contains("requests: 400 total, 400 started, 400 done, 400 succeeded, 0 failed"),
        "{text}"
    );
    assert!(text.contains("status codes: 400 2xx"), "{text}");
    assert_eq!(api.count(), 200);
    assert_eq!(web.count(), 200);
    assert!(api.requests().iter().all(|r| r.target == "/api/items"));
    assert!(web.requests().iter().all(|r| r.target == "/index.html"));
}
