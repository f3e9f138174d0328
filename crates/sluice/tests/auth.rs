//! `userlist` sections and HTTP basic authentication (`http-request auth`, `http_auth`,
//! `http_auth_group`), with real hashes of each scheme made by the system's tools.

mod common;

use std::process::Command;

use base64::Engine as _;
use common::*;

/// A crypt(3) hash of `password` made by a real tool: `openssl passwd` for SHA-512,
/// SHA-256 and MD5, `mkpasswd` (Debian's whois package) for bcrypt and yescrypt.
fn hash(scheme: &str, password: &str) -> String {
    let out = match scheme {
        "sha512" | "sha256" | "md5" => {
            let flag = match scheme {
                "sha512" => "-6",
                "sha256" => "-5",
                _ => "-1",
            };
            Command::new("openssl")
                .args(["passwd", flag, password])
                .output()
        }
        other => Command::new("mkpasswd")
            .args(["-m", other, password])
            .output(),
    }
    .unwrap_or_else(|e| panic!("{scheme}: {e} (openssl and mkpasswd are installed by .ci/run)"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn ask(addr: std::net::SocketAddr, path: &str, creds: Option<(&str, &str)>) -> Response {
    let auth = creds.map_or(String::new(), |(u, p)| {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        format!("Authorization: Basic {b64}\r\n")
    });
    let mut c = Conn::new(addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n").as_bytes());
    c.response()
}

#[test]
fn users_of_every_hash_scheme_authenticate_and_groups_gate_access() {
    let users = [
        ("alice", "sha512", "a-secret"),
        ("bob", "sha256", "b secret"),
        ("carol", "md5", "c:secret"),
        ("dave", "bcrypt", "d-secret"),
        ("erin", "yescrypt", "e-secret"),
    ];
    let mut lines = String::new();
    for (name, scheme, pass) in users {
        lines.push_str(&format!(
            "    user {name} password {}\n",
            hash(scheme, pass)
        ));
    }
    let p = Sluice::start(&format!(
        "userlist people\n    group admins users alice,erin\n    group staff\n{lines}    user frank insecure-password plain groups staff\n{DEFAULTS}frontend fe\n    {{fe}}\n    acl auth_ok http_auth(people)\n    acl admin http_auth_group(people) admins\n    http-request auth realm private unless auth_ok\n    http-request return status 200 content-type text/plain lf-string \"%[http_auth_user] admin\" if admin\n    http-request return status 200 content-type text/plain lf-string \"%[http_auth_user]\"\nfrontend plain\n    {{fe}}\n    http-request auth unless {{ http_auth(people) }}\n    http-request return status 200\n"
    ));
    // No credentials, a wrong password, an unknown user: asked again, with the realm.
    for creds in [
        None,
        Some(("alice", "wrong")),
        Some(("nobody", "x")),
        Some(("bob", "b secre")),
    ] {
        let r = ask(p.addrs[0], "/", creds);
        assert_eq!(r.status, 401, "{creds:?}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"private\"")
        );
        assert!(r.text().contains("401 Unauthorized"), "{}", r.text());
    }
    for (name, _, pass) in users {
        let r = ask(p.addrs[0], "/", Some((name, pass)));
        assert_eq!(r.status, 200, "{name}");
        let admin = matches!(name, "alice" | "erin");
        let expected = if admin {
            format!("{name} admin")
        } else {
            name.to_string()
        };
        assert_eq!(r.text(), expected);
    }
    assert_eq!(
        ask(p.addrs[0], "/", Some(("frank", "plain"))).text(),
        "frank"
    );
    // Without a realm, the proxy's name is the realm, as in HAProxy.
    let r = ask(p.addrs[1], "/", None);
    assert_eq!(
        (r.status, r.header("www-authenticate")),
        (401, Some("Basic realm=\"plain\""))
    );
    assert_eq!(ask(p.addrs[1], "/", Some(("dave", "d-secret"))).status, 200);
}

#[test]
fn userlist_errors_name_their_line() {
    for (text, says) in [
        (
            "userlist u\n    user a password notahash\n",
            "c.cfg:2: user 'a': password 'notahash' is not a hash",
        ),
        (
            "userlist u\n    user a groups nope\n",
            "c.cfg:2: group 'nope' is not declared",
        ),
        (
            "userlist u\n    group g users zed\n",
            "c.cfg:2: user 'zed' is not declared",
        ),
        (
            "userlist u\n    frob x\n",
            "c.cfg:2: unknown keyword 'frob' in 'userlist' section",
        ),
    ] {
        let (ok, err) = check_config(&format!(
            "{text}{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request return status 200\n"
        ));
        assert!(!ok && err.contains(says), "{text}: {err}");
    }
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-request auth unless {{ http_auth(missing) }}\n"
    ));
    assert!(!ok && err.contains("no userlist named 'missing'"), "{err}");
}

/// `option http-use-proxy-header`: a request for a proxy (an absolute URI) is asked for
/// credentials with 407 and `Proxy-Authenticate`, and gives them in `Proxy-Authorization`;
/// a request for a path keeps the origin's fields, and without the option so does every
/// request (HAProxy 2.6's `TX_USE_PX_CONN`).
#[test]
fn proxy_requests_authenticate_with_the_proxy_fields() {
    let p = Sluice::start(&format!(
        "userlist people\n    user frank insecure-password plain\n{DEFAULTS}frontend px\n    {{fe}}\n    option http-use-proxy-header\n    http-request auth realm gate unless {{ http_auth(people) }}\n    http-request return status 200 content-type text/plain lf-string \"%[http_auth_type] %[http_auth_user]\"\nfrontend origin\n    {{fe}}\n    http-request auth realm gate unless {{ http_auth(people) }}\n    http-request return status 200\n"
    ));
    let b64 = base64::engine::general_purpose::STANDARD.encode("frank:plain");
    let send = |addr, target: &str, field: &str| {
        let creds = if field.is_empty() {
            String::new()
        } else {
            format!("{field}: Basic {b64}\r\n")
        };
        let mut c = Conn::new(addr);
        let req = format!("GET {target} HTTP/1.1\r\nHost: origin.example\r\n{creds}\r\n");
        c.send(req.as_bytes());
        c.response()
    };
    let absolute = "http://origin.example/a";
    let r = send(p.addrs[0], absolute, "");
    assert_eq!(r.status, 407, "{}", r.text());
    assert_eq!(r.header("proxy-authenticate"), Some("Basic realm=\"gate\""));
    assert_eq!(r.header("www-authenticate"), None);
    assert!(r.text().contains("407"), "{}", r.text());
    // The origin's field does not authenticate a proxy request; the proxy's does.
    assert_eq!(send(p.addrs[0], absolute, "Authorization").status, 407);
    let r = send(p.addrs[0], absolute, "Proxy-Authorization");
    assert_eq!((r.status, r.text()), (200, "Basic frank".to_string()));
    // A path is a request for the origin, option or not.
    let r = send(p.addrs[0], "/a", "");
    assert_eq!(
        (r.status, r.header("www-authenticate")),
        (401, Some("Basic realm=\"gate\""))
    );
    assert_eq!(send(p.addrs[0], "/a", "Authorization").status, 200);
    assert_eq!(send(p.addrs[0], "/a", "Proxy-Authorization").status, 401);
    // Without the option an absolute URI is the origin's too.
    assert_eq!(send(p.addrs[1], absolute, "").status, 401);
    assert_eq!(send(p.addrs[1], absolute, "Authorization").status, 200);
}
