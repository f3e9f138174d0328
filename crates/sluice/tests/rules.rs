//! The rules engine through the real binary: sample fetches and converters in rule values,
//! ACLs with their match methods, request and response actions, redirects, variables and
//! `use_backend` with a sample expression.

mod common;

use common::*;

/// One request with extra header lines; the response.
fn ask(p: &Sluice, method: &str, target: &str, headers: &str) -> Response {
    let mut c = p.connect();
    c.send(format!("{method} {target} HTTP/1.1\r\n{headers}\r\n").as_bytes());
    c.response_for(method == "HEAD").expect("a response")
}

/// What HAProxy 2.6.12 answers for this very `lf-string` (run with the same configuration,
/// `curl http://127.0.0.1:PORT/api/users` and `.../`): the converters must agree.
const HAPROXY_ANSWERS: &[(&str, &str)] = &[
    (
        "/api/users",
        "2086524975 2162284669 1634223544 4042491044 589122015 293529663 1306680290 2761070127 4367959314151795169 8673234375921608972 cde a\\/b 1970-01-01 b b aGVsbG8= 6869 -3 0 127.0.0.0 0000000000000001 7F000001 1696554816 AAAAAAAAAQI= 0000000000000001\n",
    ),
    (
        "/",
        "177620 2043925204 1886637733 47 3725504903 2724628003 2250254464 2118074832 5134827694651168302 -5663330039561440355 cde a\\/b 1970-01-01 b b aGVsbG8= 6869 -3 0 127.0.0.0 0000000000000001 7F000001 1696554816 AAAAAAAAAQI= 0000000000000001\n",
    ),
];

#[test]
fn converters_answer_as_haproxy_does() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    http-request return status 200 content-type text/plain lf-string \"%[path,djb2] %[path,crc32] %[path,wt6] %[path,sdbm] %[path,djb2(1)] %[path,crc32(1)] %[path,wt6(1)] %[path,sdbm(1)] %[path,xxh3] %[path,xxh3(5)] %[str(abcdef),bytes(2,3)] %[str(a/b),json] %[int(0),utime(%Y-%m-%d)] %[str(a.b.c),word(2,.)] %[str(a..b),field(3,.)] %[str(hello),base64] %[str(hi),hex] %[int(-7),div(2)] %[int(7),mod(0)] %[src,ipmask(24)] %[int(1),hex] %[src,hex] %[src,crc32] %[int(258),base64] %[bool(1),hex]\\n\"\n"
    ));
    for (path, want) in HAPROXY_ANSWERS {
        let r = get(p.addr(), path);
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), *want, "{path}");
    }
}

#[test]
fn fetches_and_acls_drive_header_rules() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let map = dir.write(
        "hosts.map",
        "# host backend\nwww.example.com be-www\napi.example.com be-api\n",
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    acl is_api path_beg /api
    acl local src 127.0.0.0/8 ::1
    acl big hdr_val(x-size) gt 100
    acl dom hdr_dom(host) -i example.com
    acl versioned path_reg ^/v[0-9]+/
    acl has_sid req.cook(sid) -m found
    acl small_len path_len le 4
    http-request deny deny_status 429 if {{ req.hdr(x-block) -m found }}
    http-request set-var(txn.user) req.hdr(x-user),lower
    http-request set-header X-Src %[src]
    http-request set-header X-Host %[req.hdr(host),lower,field(1,:)]
    http-request set-header X-Q %[url_param(q),upper]
    http-request set-header X-Cook %[req.cook(sid)]
    http-request set-header X-User %[var(txn.user)]
    http-request set-header X-Map %[req.hdr(host),lower,field(1,:),map({map},none)]
    http-request set-header X-Fe %[fe_name]
    http-request set-header X-Forwarded-Proto: https
    http-request set-header X-Acl-Api 1 if is_api local
    http-request set-header X-Acl-Big 1 if big
    http-request set-header X-Acl-Dom 1 if dom
    http-request set-header X-Acl-Versioned 1 if versioned
    http-request set-header X-Acl-Sid 1 if has_sid METH_GET
    http-request set-header X-Acl-Small 1 if small_len
    http-request set-header X-Acl-Not-Api 1 if !is_api
    http-request del-header x-drop- -m beg
    http-request replace-header User-Agent ^curl/(.*)$ CURL-\\1
    http-request replace-value X-List ^b$ B
    http-request set-path /new%[path] if {{ path_beg /old }}
    http-request set-query lang=%[req.hdr(x-lang)] if {{ req.hdr(x-lang) -m found }}
    http-request set-method PUT if {{ method DELETE }}
    default_backend be
backend be
    http-request set-header X-Be %[be_name]/%[nbsrv]
    server s1 {}
",
        origin.addr
    ));
    let r = ask(
        &p,
        "GET",
        "/api/users?q=abc&r=1",
        "Host: WWW.Example.COM:8080\r\nCookie: a=1; sid=xyz\r\nX-User: Bob\r\nX-Size: 150\r\nX-Drop-A: 1\r\nX-Drop-B: 2\r\nX-Keep: 3\r\nUser-Agent: curl/8.1\r\nX-List: a, b,c\r\n",
    );
    assert_eq!(r.status, 200);
    let seen = origin.requests().pop().unwrap();
    let h = |n: &str| seen.header(n).map(str::to_string);
    assert_eq!(h("x-src").as_deref(), Some("127.0.0.1"));
    assert_eq!(h("x-host").as_deref(), Some("www.example.com"));
    assert_eq!(h("x-q").as_deref(), Some("ABC"));
    assert_eq!(h("x-cook").as_deref(), Some("xyz"));
    assert_eq!(h("x-user").as_deref(), Some("bob"));
    assert_eq!(h("x-map").as_deref(), Some("be-www"));
    assert_eq!(h("x-fe").as_deref(), Some("fe"));
    // Written with a trailing colon, as some configurations do: the header meant.
    assert_eq!(h("x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(h("x-be").as_deref(), Some("be/1"));
    for yes in ["x-acl-api", "x-acl-big", "x-acl-dom", "x-acl-sid"] {
        assert_eq!(h(yes).as_deref(), Some("1"), "{yes}: {:?}", seen.headers);
    }
    for no in [
        "x-acl-versioned",
        "x-acl-small",
        "x-acl-not-api",
        "x-drop-a",
        "x-drop-b",
    ] {
        assert_eq!(h(no), None, "{no}: {:?}", seen.headers);
    }
    assert_eq!(h("x-keep").as_deref(), Some("3"));
    assert_eq!(h("user-agent").as_deref(), Some("CURL-8.1"));
    assert_eq!(h("x-list").as_deref(), Some("a, B, c"));

    // The other side of each ACL, and the request-line rewrites.
    let r = ask(
        &p,
        "DELETE",
        "/v2/old",
        "Host: www.myexample.com\r\nX-Size: 100\r\nCookie: sid=1\r\n",
    );
    assert_eq!(r.status, 200);
    let seen = origin.requests().pop().unwrap();
    let h = |n: &str| seen.header(n).map(str::to_string);
    assert_eq!(seen.method, "PUT");
    assert_eq!(seen.target, "/v2/old");
    for no in [
        "x-acl-api",
        "x-acl-big",
        "x-acl-dom",
        "x-acl-sid",
        "x-user",
        "x-q",
    ] {
        assert!(
            h(no).is_none_or(|v| v.is_empty()),
            "{no}: {:?}",
            seen.headers
        );
    }
    assert_eq!(h("x-map").as_deref(), Some("none"));
    assert_eq!(h("x-acl-versioned").as_deref(), Some("1"));
    assert_eq!(h("x-acl-not-api").as_deref(), Some("1"));
    let r = ask(&p, "GET", "/old/page?x=1", "Host: h\r\nX-Lang: fr\r\n");
    assert_eq!(r.status, 200);
    let seen = origin.requests().pop().unwrap();
    assert_eq!(seen.target, "/new/old/page?lang=fr");
    let r = ask(&p, "GET", "/a", "Host: h\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(
        origin.requests().pop().unwrap().header("x-acl-small"),
        Some("1")
    );
    // A denied request never reaches the server.
    let before = origin.requests().len();
    let r = ask(&p, "GET", "/api", "Host: h\r\nX-Block: 1\r\n");
    assert_eq!(r.status, 429);
    assert_eq!(origin.requests().len(), before);
}

#[test]
fn redirects() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request redirect location /login?from=%[path] code 303 if {{ path_beg /private }}
    http-request redirect prefix https://new.example drop-query if {{ path_beg /moved }}
    http-request redirect scheme https code 301 if {{ path_beg /secure }}
    http-request redirect prefix / append-slash set-cookie SEEN=1 clear-cookie OLD if {{ path /dir }}
    http-request return status 200 content-type text/plain string ok
"
    ));
    let r = ask(&p, "GET", "/private/x", "Host: h\r\n");
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/login?from=/private/x"));
    let r = ask(&p, "GET", "/moved/a?b=c", "Host: h\r\n");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://new.example/moved/a"));
    let r = ask(&p, "GET", "/secure/p?k=v", "Host: shop.test\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://shop.test/secure/p?k=v"));
    let r = ask(&p, "GET", "/dir", "Host: h\r\n");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/dir/"));
    let cookies: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        cookies.iter().any(|c| c.starts_with("SEEN=1;")),
        "{cookies:?}"
    );
    assert!(
        cookies.iter().any(|c| c.starts_with("OLD=;")),
        "{cookies:?}"
    );
    assert_eq!(ask(&p, "GET", "/other", "Host: h\r\n").text(), "ok");
}

#[test]
fn use_backend_takes_its_name_from_a_sample() {
    let a = Origin::start("a");
    let b = Origin::start("b");
    let dir = TempDir::new();
    let map = dir.write(
        "hosts.map",
        "a.test be_a\nb.test be_b\nghost.test be_none\n",
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    use_backend %[req.hdr(host),lower,map({map})]
    default_backend be_b
backend be_a
    server a {}
backend be_b
    server b {}
",
        a.addr, b.addr
    ));
    assert_eq!(ask(&p, "GET", "/x", "Host: A.test\r\n").text(), "a /x");
    assert_eq!(ask(&p, "GET", "/x", "Host: b.test\r\n").text(), "b /x");
    // No such backend, or no map entry: the rule is skipped.
    assert_eq!(ask(&p, "GET", "/y", "Host: ghost.test\r\n").text(), "b /y");
    assert_eq!(ask(&p, "GET", "/z", "Host: other\r\n").text(), "b /z");
}

#[test]
fn response_rules_see_the_response_and_the_transaction_variables() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| {
            let status = if r.target == "/fail" { 500 } else { 200 };
            let leak = if r.target == "/leak" {
                "X-Leak: 1\r\n"
            } else {
                ""
            };
            Reply::Raw(
                format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nX-Origin: yes\r\n{leak}\r\nhi"
                )
                .into_bytes(),
            )
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request set-var(txn.tag) str(t1)
    http-response set-header X-Tag %[var(txn.tag)]
    http-response set-header X-Status %[status] if {{ status 500:599 }}
    http-response set-status 503 reason Unavailable if {{ status 500 }} {{ res.hdr(x-origin) -m found }}
    http-response del-header x-origin
    http-response deny content-type text/plain string blocked if {{ res.hdr(x-leak) -m found }}
    default_backend be
backend be
    server s1 {}
",
        origin.addr
    ));
    let r = get(p.addr(), "/fine");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-tag"), Some("t1"));
    assert_eq!(r.header("x-status"), None);
    assert_eq!(r.header("x-origin"), None);
    let r = get(p.addr(), "/fail");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-status"), Some("500"));
    // A denied response is replaced: HAProxy's default status for it is 502.
    let r = get(p.addr(), "/leak");
    assert_eq!((r.status, r.text().as_str()), (502, "blocked"));
    assert_eq!(r.header("x-leak"), None);
}

#[test]
fn after_response_rules_see_every_response_the_proxys_own_included() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request deny deny_status 403 if {{ path /denied }}
    http-request return status 200 content-type text/plain string local if {{ path /local }}
    http-request redirect location /elsewhere if {{ path /moved }}
    http-response set-header X-Phase response
    http-after-response set-header X-After %[status]
    http-after-response set-status 404 if {{ status 403 }}
    http-after-response add-header X-Fe 1
    default_backend be
backend be
    http-after-response set-header X-Be 1
    http-after-response allow
    http-after-response set-header X-Not-Reached 1
    server s1 {}
",
        origin.addr
    ));
    // A proxied response: after the response rules, backend's before frontend's.
    let r = get(p.addr(), "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-phase"), Some("response"));
    assert_eq!(r.header("x-after"), Some("200"));
    assert_eq!(r.header("x-be"), Some("1"));
    assert_eq!(r.header("x-fe"), Some("1"));
    assert_eq!(r.header("x-not-reached"), None);
    // The proxy's own answers go through the frontend's rules too.
    let r = get(p.addr(), "/local");
    assert_eq!((r.status, r.text().as_str()), (200, "local"));
    assert_eq!(r.header("x-after"), Some("200"));
    assert_eq!(r.header("x-phase"), None);
    let r = get(p.addr(), "/denied");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-after"), Some("403"));
    let r = get(p.addr(), "/moved");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/elsewhere"));
    assert_eq!(r.header("x-fe"), Some("1"));
    // The body and the framing survive the rewrite: the connection carries another request.
    let mut c = p.connect();
    assert_eq!(c.get("/local").text(), "local");
    assert_eq!(c.get("/").status, 200);
}

#[test]
fn bad_rules_name_the_line() {
    for (line, says) in [
        ("acl a path_nosuch /x", "unknown sample fetch"),
        (
            "acl a src 10.0.0.0/99",
            "is not a valid IPv4 or IPv6 address",
        ),
        (
            "http-request set-header X %[nosuch]",
            "unknown sample fetch 'nosuch'",
        ),
        (
            "http-request set-header X %[src,nosuch]",
            "unknown converter 'nosuch'",
        ),
        (
            "http-request set-header X %[ssl_fc_session_id]",
            "not supported yet",
        ),
        ("http-request set-var(user) src", "needs a scope"),
        ("http-request set-header X %Tt", "'%Tt' is not supported"),
        (
            "http-request set-var(txn.a,ifbogus) src",
            "unknown set-var condition 'ifbogus'",
        ),
        (
            "http-request set-priority-class int(1)",
            "not supported yet",
        ),
        (
            "http-request normalize-uri path-merge-slashes",
            "is experimental: it needs 'expose-experimental-directives'",
        ),
        ("http-request set-map(/tmp/f) src", "a key and a value"),
        (
            "http-after-response wait-for-body time 1s",
            "not supported yet",
        ),
        (
            "http-request set-header X %[date(0,min)]",
            "unknown unit 'min'",
        ),
        ("http-request auth realm", "expects 'auth [realm REALM]'"),
        (
            "http-request redirect location / code 304",
            "expects 301, 302, 303, 307 or 308",
        ),
    ] {
        let out = check_config(&format!(
            "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    {line}\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n"
        ));
        assert!(!out.0, "{line} was accepted");
        assert!(out.1.contains(says), "{line}: {}", out.1);
        assert!(
            out.1.contains("c.cfg:8"),
            "{line}: names the line: {}",
            out.1
        );
    }
}

/// The start of the answer to a request sent from `source` to `addr` (empty, or an error,
/// when the connection is closed or reset before any answer).
fn from(source: &str, addr: std::net::SocketAddr) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let local: std::net::SocketAddr = format!("{source}:0").parse().unwrap();
    sock.bind(&local.into())?;
    sock.connect(&addr.into())?;
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(TIMEOUT))?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")?;
    // The status line is enough (in mode tcp the server may keep the connection open).
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while out.len() < 12 {
        match s.read(&mut buf)? {
            0 => break,
            n => out.extend_from_slice(&buf[..n]),
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn tcp_request_connection_rules_accept_or_reject_before_reading() {
    for mode in ["http", "tcp"] {
        let origin = Origin::start("o");
        let p = Sluice::start(&format!(
            "{DEFAULTS}frontend fe\n    mode {mode}\n    {{fe}}\n    acl blocked src 127.0.0.2 127.0.0.3\n    acl friend src 127.0.0.3\n    tcp-request inspect-delay 5s\n    tcp-request connection accept if friend\n    tcp-request connection reject if blocked\n    default_backend be\nbackend be\n    mode {mode}\n    server s1 {}\n",
            origin.addr
        ));
        let refused = from("127.0.0.2", p.addr());
        assert!(
            refused.as_ref().map_or(true, |s| s.is_empty()),
            "{mode}: {refused:?}"
        );
        assert!(
            from("127.0.0.1", p.addr())
                .unwrap()
                .starts_with("HTTP/1.1 200"),
            "{mode}"
        );
        // The first rule that matches decides: accepted before the reject rule.
        assert!(
            from("127.0.0.3", p.addr())
                .unwrap()
                .starts_with("HTTP/1.1 200"),
            "{mode}"
        );
        assert!(
            origin.requests().len() == 2,
            "{mode}: the refused connection reached no server"
        );
    }
}

#[test]
fn answers_of_deny_tarpit_return_and_reject() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let page = dir.write(
        "teapot.http",
        "HTTP/1.1 418 I'm a teapot\r\ncontent-type: text/plain\r\n\r\nshort and stout",
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}    timeout tarpit 300ms
frontend fe
    {{fe}}
    http-request deny deny_status 429 content-type text/plain hdr Retry-After 7 hdr X-Path %[path] string slow-down if {{ path /limited }}
    http-request deny status 451 if {{ path /legal }}
    http-request deny errorfile {} if {{ path /teapot }}
    http-request tarpit deny_status 503 if {{ path /trap }}
    http-request reject if {{ path /gone }}
    http-request return status 201 content-type application/json hdr X-A 1 hdr X-Empty %[req.hdr(x-absent)] lf-string {{\\\"src\\\":\\\"%[src]\\\"}} if {{ path /made }}
    http-request return status 200 content-type text/plain if {{ path /bodiless }}
    default_backend be
backend be
    server s1 {}
",
        page,
        origin.addr
    ));
    let r = get(p.addr(), "/limited");
    assert_eq!((r.status, r.text().as_str()), (429, "slow-down"));
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.header("x-path"), Some("/limited"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(get(p.addr(), "/legal").status, 451);
    let r = get(p.addr(), "/teapot");
    assert_eq!((r.status, r.text().as_str()), (418, "short and stout"));
    // The tarpit holds the request for `timeout tarpit` before refusing it.
    let started = std::time::Instant::now();
    assert_eq!(get(p.addr(), "/trap").status, 503);
    assert!(started.elapsed() >= std::time::Duration::from_millis(250));
    let (answer, closed) = raw_exchange(p.addr(), b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.is_none() && closed);
    let r = get(p.addr(), "/made");
    assert_eq!(r.status, 201);
    // A header whose value comes out empty is left out, as HAProxy does.
    assert_eq!(r.header("x-empty"), None);
    assert_eq!(r.header("x-a"), Some("1"));
    assert_eq!(r.text(), "{\"src\":\"127.0.0.1\"}");
    // No body, no content-type, as HAProxy writes it (its reg-test http-rules/http_return).
    let r = get(p.addr(), "/bodiless");
    assert_eq!((r.status, r.header("content-type")), (200, None));
    assert!(origin.requests().is_empty(), "nothing reached the server");
}

#[test]
fn rewrites_addresses_timeouts_and_early_hints() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| {
            if r.target.starts_with("/slow") {
                Reply::Delayed(std::time::Duration::from_secs(3), ok_response("late"))
            } else {
                Reply::Raw(ok_response("ok"))
            }
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    option forwardfor
    option originalto
    http-request set-src hdr(x-real-ip) if {{ hdr(x-real-ip) -m found }}
    http-request set-dst str(10.1.2.3) if {{ path_beg /dst }}
    http-request set-header X-Seen-Src %[src]
    http-request replace-path /old/(.*) /new/\\1
    http-request replace-uri ^/uri/([a-z]+)\\?(.*) /rewritten/\\1?\\2&via=sluice
    http-request del-header ^x-secret- -m reg
    http-request set-timeout server 300ms if {{ path_beg /slow }}
    http-request early-hint link </style.css>;rel=preload if {{ path /hints }}
    http-request early-hint link </app.js>;rel=preload if {{ path /hints }}
    default_backend be
backend be
    server s1 {}
",
        origin.addr
    ));
    let r = ask(
        &p,
        "GET",
        "/old/a/b?q=1",
        "Host: x\r\nX-Real-IP: 192.0.2.7\r\nX-Secret-Token: t\r\nX-SECRET-Other: u\r\nX-Kept: k\r\n",
    );
    assert_eq!(r.status, 200);
    let got = origin.requests().pop().unwrap();
    assert_eq!(got.target, "/new/a/b?q=1");
    assert_eq!(got.header("x-seen-src"), Some("192.0.2.7"));
    assert_eq!(got.header("x-forwarded-for"), Some("192.0.2.7"));
    assert_eq!(got.header("x-original-to"), Some("127.0.0.1"));
    assert_eq!(
        got.header_count("x-secret-token") + got.header_count("x-secret-other"),
        0
    );
    assert_eq!(got.header("x-kept"), Some("k"));
    ask(&p, "GET", "/uri/abc?x=1", "Host: x\r\n");
    assert_eq!(
        origin.requests().pop().unwrap().target,
        "/rewritten/abc?x=1&via=sluice"
    );
    ask(&p, "GET", "/dst", "Host: x\r\n");
    assert_eq!(
        origin.requests().pop().unwrap().header("x-original-to"),
        Some("10.1.2.3")
    );
    // The server timeout set by the rule, not the backend's 30 s.
    assert_eq!(get(p.addr(), "/slow").status, 504);
    // Two hints in one 103 answer, then the response.
    let mut c = p.connect();
    c.send(b"GET /hints HTTP/1.1\r\nHost: x\r\n\r\n");
    let hint = c.response();
    assert_eq!(hint.status, 103);
    let links: Vec<_> = hint.headers.iter().filter(|(n, _)| n == "link").collect();
    assert_eq!(links.len(), 2, "{:?}", hint.headers);
    assert_eq!(c.response().status, 200);
}

#[test]
fn rules_wait_for_the_body_when_asked() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request wait-for-body time 5s
    http-request deny deny_status 403 if {{ req.body -m sub forbidden }}
    http-request set-header X-Body-Len %[req.body,length]
    default_backend be
frontend buffered
    {{fe}}
    option http-buffer-request
    http-request return status 200 content-type text/plain lf-string %[req.body,upper] if {{ method POST }}
    default_backend be
backend be
    server s1 {}
",
        origin.addr
    ));
    // The body comes in two parts: the rules wait for all of it.
    let post = |addr, body: &str| {
        let mut c = Conn::new(addr);
        let (a, b) = body.split_at(body.len() / 2);
        c.send(
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{a}",
                body.len()
            )
            .as_bytes(),
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        c.send(b.as_bytes());
        c.response()
    };
    assert_eq!(post(p.addr(), "this is forbidden text").status, 403);
    let r = post(p.addr(), "hello there");
    assert_eq!(r.status, 200);
    let got = origin.requests().pop().unwrap();
    assert_eq!(got.header("x-body-len"), Some("11"));
    assert_eq!(got.body, b"hello there");
    assert_eq!(post(p.addrs[1], "quiet words").text(), "QUIET WORDS");
    // A chunked body is waited for too, and the rules see its data without the framing;
    // the server still gets the whole body.
    let chunked = |addr, parts: [&str; 2]| {
        let mut c = Conn::new(addr);
        c.send(
            format!(
                "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n",
                parts[0].len(),
                parts[0]
            )
            .as_bytes(),
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        c.send(format!("{:x}\r\n{}\r\n0\r\n\r\n", parts[1].len(), parts[1]).as_bytes());
        c.response()
    };
    assert_eq!(chunked(p.addr(), ["this is ", "forbidden"]).status, 403);
    let r = chunked(p.addr(), ["hello ", "again"]);
    assert_eq!(r.status, 200);
    let got = origin.requests().pop().unwrap();
    assert_eq!(got.header("x-body-len"), Some("11"));
    assert_eq!(got.body, b"hello again");
    assert_eq!(
        chunked(p.addrs[1], ["quiet ", "chunks"]).text(),
        "QUIET CHUNKS"
    );
}

#[test]
fn response_rules_wait_for_the_body_when_asked() {
    use std::time::Duration;
    let head = |len: usize| format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(move |r: &Received| {
            let pause = Duration::from_millis(300);
            match r.target.as_str() {
                // The body comes in two parts: the rules see both.
                "/two-parts" => Reply::Dripped(
                    vec![
                        format!("{}hello ", head(11)).into_bytes(),
                        b"world".to_vec(),
                    ],
                    pause,
                ),
                "/secret" => Reply::Raw(format!("{}a secret", head(8)).into_bytes()),
                "/chunked" => Reply::Dripped(
                    vec![
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n"
                            .to_vec(),
                        b"5\r\nagain\r\n0\r\n\r\n".to_vec(),
                    ],
                    pause,
                ),
                // The rest comes long after the rules gave up waiting.
                "/stalled" => Reply::Dripped(
                    vec![format!("{}0123", head(10)).into_bytes(), b"456789".to_vec()],
                    Duration::from_secs(3),
                ),
                _ => Reply::Dripped(
                    vec![format!("{}0123", head(10)).into_bytes(), b"456789".to_vec()],
                    pause,
                ),
            }
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-response wait-for-body time 5s if {{ status 200 }}
    http-response set-header x-res-body %[res.body]
    http-response set-header x-res-len %[res.body_len]
    http-response set-header x-res-size %[res.body_size]
    http-response deny deny_status 403 if {{ res.body -m sub secret }}
    default_backend be
frontend at-least
    {{fe}}
    http-response wait-for-body time 5s at-least 4
    http-response set-header x-res-body %[res.body]
    default_backend be
frontend late
    {{fe}}
    http-response wait-for-body time 300ms
    default_backend be
backend be
    server s1 {}
",
        origin.addr
    ));
    let r = get(p.addr(), "/two-parts");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-res-body"), Some("hello world"));
    assert_eq!(r.header("x-res-len"), Some("11"));
    assert_eq!(r.header("x-res-size"), Some("11"));
    // The client gets the body the rules waited for, whole.
    assert_eq!(r.text(), "hello world");
    assert_eq!(get(p.addr(), "/secret").status, 403);
    // A chunked body: the rules see its data, the client gets it as it was framed.
    let r = get(p.addr(), "/chunked");
    assert_eq!(r.header("x-res-body"), Some("hello again"));
    // Its size is known once it is whole, as HAProxy knows it.
    assert_eq!(r.header("x-res-size"), Some("11"));
    assert_eq!(r.text(), "hello again");
    // `at-least 4`: the rules run on the first four bytes, the rest follows.
    let r = get(p.addrs[1], "/first-bytes");
    assert_eq!(r.header("x-res-body"), Some("0123"));
    assert_eq!(r.text(), "0123456789");
    // Out of time: 504, as HAProxy answers.
    assert_eq!(get(p.addrs[2], "/stalled").status, 504);
}

/// Response rules as HAProxy 2.6 runs them: the request's head is gone by then, so a
/// condition that reads it never matches (with HAProxy's warning at load), `hdr` reads the
/// response's header, and the method and `capture.req.*` stay.
#[test]
fn response_rules_do_not_read_the_request_head() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|_: &Received| {
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nX-Seen: from-server\r\nContent-Length: 2\r\n\r\nok".to_vec(),
            )
        }),
    );
    let config = format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    acl to_x path /x
    http-response set-header x-hdr %[hdr(x-seen)]
    http-response set-header x-method %[method]
    http-response set-header x-uri %[capture.req.uri]
    http-response deny if to_x
    http-response deny if {{ req.hdr(x-deny) yes }}
    http-response set-status 202 if {{ hdr(x-seen) from-server }}
    http-response set-status 203 if {{ res.hdr(x-seen) from-server }} !{{ path /never }}
    default_backend be
backend be
    server s1 {}
",
        origin.addr
    );
    let p = Sluice::start(&config);
    let mut c = p.connect();
    c.send(b"GET /x HTTP/1.1\r\nHost: t\r\nX-Seen: from-client\r\nX-Deny: yes\r\n\r\n");
    let r = c.response();
    // Neither deny applies (their ACLs read the request); `hdr` in the ACL is the request's
    // (no 202); a negated request ACL is true (203).
    assert_eq!(r.status, 203);
    assert_eq!(r.header("x-hdr"), Some("from-server"));
    assert_eq!(r.header("x-method"), Some("GET"));
    assert_eq!(r.header("x-uri"), Some("/x"));
    // HAProxy's warnings, line by line.
    let (valid, checked) = check_config(&config.replace("{fe}", "bind 127.0.0.1:1"));
    assert!(valid, "{checked}");
    for want in [
        "acl 'to_x' will never match because it only involves keywords that are incompatible with 'frontend http-response header rule'",
        "anonymous acl will never match because it uses keyword 'req.hdr' which is incompatible with 'frontend http-response header rule'",
        "anonymous acl will never match because it uses keyword 'path' which is incompatible with 'frontend http-response header rule'",
    ] {
        assert!(checked.contains(want), "{want}\n{checked}");
    }
}

#[test]
fn the_redirect_keyword_follows_the_http_request_rules() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    redirect scheme https code 301 if {{ hdr(host) -m str plain.test }}\n    http-request return status 200 content-type text/plain string first if {{ path /first }}\n    redirect location /moved if {{ path_beg /old }}\n    default_backend be\nbackend be\n    redirect prefix https://elsewhere.test\n    server s 127.0.0.1:9\n"
    ));
    // http-request rules come before redirect rules, whatever the order of the lines.
    let r = ask(&p, "GET", "/first", "Host: plain.test\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "first"));
    let r = ask(&p, "GET", "/x?y=1", "Host: plain.test\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://plain.test/x?y=1"));
    let r = ask(&p, "GET", "/old/a", "Host: other.test\r\n");
    assert_eq!(r.header("location"), Some("/moved"));
    // The backend's own redirect.
    let r = ask(&p, "GET", "/p", "Host: other.test\r\n");
    assert_eq!(r.header("location"), Some("https://elsewhere.test/p"));
}

#[test]
fn later_rules_see_the_request_as_rewritten_and_variables_carry_it_to_the_response() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request set-header X-Tier gold if {{ path_beg /vip }}
    http-request set-path /premium%[path] if {{ req.hdr(x-tier) -m str gold }}
    http-request set-header X-Seen %[path]
    http-request set-var-fmt(txn.asked) %[req.hdr(host)]%[path]
    use_backend gold if {{ path_beg /premium }}
    http-response set-header X-Asked %[var(txn.asked)]
    default_backend plain
backend gold
    server a {}
backend plain
    server b {}
",
        a.addr, b.addr
    ));
    let r = ask(&p, "GET", "/vip/x", "Host: h.test\r\n");
    // The header set by the first rule made the second one rewrite the path, which the
    // next rule, the switching rule and the server all see.
    assert_eq!(r.text(), "a /premium/vip/x");
    let got = a.requests().pop().unwrap();
    assert_eq!(got.header("x-seen"), Some("/premium/vip/x"));
    // The request as it was sent reaches the response rules through a variable (they may
    // not read its head, as in HAProxy).
    assert_eq!(r.header("x-asked"), Some("h.test/premium/vip/x"));
    let r = ask(&p, "GET", "/plain", "Host: h.test\r\n");
    assert_eq!(r.text(), "b /plain");
    assert_eq!(r.header("x-asked"), Some("h.test/plain"));
}

#[test]
fn request_fetches_converters_and_backend_state() {
    let origin = Origin::start("o");
    let dir = TempDir::new();
    let prefixes = dir.write("prefix.map", "/f pfx-f\n/g pfx-g\n");
    let exact = dir.write("exact.map", "exact hit-exact\n");
    let regexes = dir.write("re.map", "^/f/[a-z]+$ re-hit\n");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request set-var(txn.now) date
    http-request return status 200 content-type text/plain lf-string \"%[dst] %[dst_port] %[pathq] %[query] %[url] %[base] %[req.hdr_cnt(x-a)] %[req.fhdr_cnt(x-a)] %[req.fhdr(x-b)] %[req.hdr(x-b)] %[req.ver] %[fe_conn] %[nbsrv(be)] %[connslots(be)] %[queue(be)] %[avg_queue(be)] %[be_conn(be)] %[path,regsub(/,_,g)] %[path,map_beg({prefixes})] %[str(exact),map_str({exact})] %[path,map_reg({regexes})] %[int(6),mul(7),sub(2),add(3),and(12)] %[int(0),bool] %[int(5),bool] %[int(0),not] %[int(3),not] %[int(86400),ltime(%Y)] %[var(txn.now)] %[date(0,ms)] %[date(10)] %[rand(10),add(100)]\"
    default_backend be
backend be
    server s1 {o} maxconn 10 maxqueue 5
    server s2 {o} maxconn 4 maxqueue 1
",
        o = origin.addr
    ));
    let r = ask(
        &p,
        "GET",
        "/f/a?x=1&y=2",
        "Host: h.example\r\nx-a: 1\r\nx-a: 2,3\r\nx-b: p, q\r\n",
    );
    assert_eq!(r.status, 200);
    let text = r.text();
    let words: Vec<&str> = text.split(' ').collect();
    let port = p.addr().port().to_string();
    assert_eq!(
        words[..30],
        [
            "127.0.0.1",
            port.as_str(),
            "/f/a?x=1&y=2",
            "x=1&y=2",
            "/f/a?x=1&y=2",
            "h.example/f/a",
            "3",
            "2",
            "p,",
            "q",
            "q",
            "1.1",
            "1",
            "2",
            "20",
            "0",
            "0",
            "0",
            "_f_a",
            "pfx-f",
            "hit-exact",
            "re-hit",
            "8",
            "0",
            "1",
            "1",
            "0",
            "1970",
            words[28],
            words[29],
        ],
        "{text}"
    );
    // Dates: seconds, milliseconds of the same moment, ten seconds ahead; rand in range.
    let n = |w: &str| w.parse::<i64>().unwrap_or_else(|_| panic!("{w} in {text}"));
    let (now, ms, ahead, rand) = (n(words[28]), n(words[29]), n(words[30]), n(words[31]));
    assert!((0..=2).contains(&(ms / 1000 - now)), "{text}");
    assert!((10..=12).contains(&(ahead - now)), "{text}");
    assert!((100..110).contains(&rand), "{text}");
}

#[test]
fn acl_match_methods_and_predefined_acls() {
    let dir = TempDir::new();
    let users = dir.write("users.lst", "# users\nalice\nbob\n");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request set-var(txn.a) str(acls)
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] dir\" if {{ path -m dir f }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] NOT-dir\" if {{ path -m dir zz }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] bool\" if {{ req.hdr_cnt(x-a) -m bool }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] NOT-bool\" if {{ req.hdr_cnt(x-none) -m bool }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] file\" if {{ req.hdr(x-user) -f {users} }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] NOT-file\" if {{ req.hdr(x-a) -f {users} }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] n\" if {{ src -n 127.0.0.1 }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] or\" if {{ path /nope }} || {{ path_beg /f }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] NOT-or\" if {{ path /nope }} || {{ path /nope2 }}
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] h11\" if HTTP_1.1
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] h10\" if HTTP_1.0
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] local\" if LOCALHOST
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] true\" if TRUE
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] NOT-false\" if FALSE
    http-request set-var-fmt(txn.a) \"%[var(txn.a)] %ci %HM %HV\"
    http-request return status 200 content-type text/plain lf-string \"%[var(txn.a)]\"
"
    ));
    let r = ask(&p, "GET", "/f/b", "Host: t\r\nx-a: 1\r\nx-user: bob\r\n");
    assert_eq!(
        r.text(),
        "acls dir bool file n or h11 local true 127.0.0.1 GET HTTP/1.1"
    );
    let r = ask(&p, "POST", "/g", "Host: t\r\nContent-Length: 0\r\n");
    assert_eq!(r.text(), "acls n h11 local true 127.0.0.1 POST HTTP/1.1");
}

#[test]
fn allow_unset_var_set_pathq_set_uri_and_del_header_methods() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    stick-table type ip size 10 store http_req_cnt
    http-request track-sc2 src
    http-request set-var(txn.gone) str(x)
    http-request set-var(txn.kept) str(y)
    http-request unset-var(txn.gone)
    http-request set-header x-gone yes if {{ var(txn.gone) -m found }}
    http-request set-header x-kept yes if {{ var(txn.kept) -m found }}
    http-request set-pathq /rewritten?q=1 if {{ path /pq }}
    http-request set-uri /u2?z=9 if {{ path /uri }}
    http-request del-header -suffix -m end
    http-request del-header mid -m sub
    http-request set-timeout tunnel 5s
    http-request allow if {{ path /rewritten /u2 /hdrs }}
    http-request deny deny_status 403
    http-response set-header x-count %[sc2_http_req_cnt]
    http-response allow if {{ status 200 }}
    http-response set-header x-never 1
    default_backend be
backend be
    server s {}
",
        origin.addr
    ));
    let r = ask(&p, "GET", "/pq", "Host: t\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "o /rewritten?q=1"));
    assert_eq!(r.header("x-count"), Some("1"));
    assert_eq!(
        r.header("x-never"),
        None,
        "http-response allow ends the list"
    );
    let r = ask(&p, "GET", "/uri", "Host: t\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "o /u2?z=9"));
    assert_eq!(r.header("x-count"), Some("2"));
    // Not allowed: the deny after `allow` refuses it, and nothing reaches the server.
    let before = origin.count();
    assert_eq!(ask(&p, "GET", "/other", "Host: t\r\n").status, 403);
    assert_eq!(origin.count(), before);
    let r = ask(
        &p,
        "GET",
        "/hdrs",
        "Host: t\r\nA-Suffix: 1\r\nkeep: 1\r\nhas-mid-dle: 1\r\nmiddle-not: 1\r\n",
    );
    assert_eq!(r.status, 200);
    let got = origin.requests().pop().unwrap();
    let names: Vec<String> = got
        .headers
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    assert!(names.contains(&"keep".to_string()), "{names:?}");
    assert!(names.contains(&"x-kept".to_string()), "{names:?}");
    for gone in ["a-suffix", "has-mid-dle", "middle-not", "x-gone"] {
        assert!(!names.contains(&gone.to_string()), "{gone}: {names:?}");
    }
}

/// `capture.req.hdr(N)` and `capture.res.hdr(N)` read the capture slots: header captures
/// taken before the rules, a rule's `capture` seen by the rules after it. The expected
/// values are HAProxy 2.6.12's for this configuration (run side by side with curl).
#[test]
fn capture_fetches_read_the_slots_as_rules_fill_them() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    capture request header Host len 5
    capture response header Content-Type len 10
    declare capture request len 8
    http-request capture path len 4
    http-request capture req.hdr(x-id) id 0
    http-request set-header X-C0 \"%[capture.req.hdr(0)]\"
    http-request set-header X-C1 \"%[capture.req.hdr(1)]/%[capture.req.hdr(2)]/%[capture.req.hdr(3)]\"
    http-response set-header X-R \"%[capture.res.hdr(0)]\"
    http-response set-header X-Q \"%[capture.req.hdr(0)]/%[capture.req.hdr(1)]/%[capture.req.hdr(2)]/%[capture.req.hdr(9)]\"
    default_backend be
backend be
    server s {}
",
        origin.addr
    ));
    let cases = [
        (
            "/longpath",
            "Host: example.com\r\nx-id: abcdefghij\r\n",
            "abcde",
            "//lon/",
            "abcde///lon/",
        ),
        ("/p", "Host: ex\r\n", "ex", "//p/", "ex///p/"),
    ];
    for (path, headers, c0, c1, q) in cases {
        let r = ask(&p, "GET", path, headers);
        let got = origin.requests().pop().unwrap();
        assert_eq!(got.header("x-c0"), Some(c0), "{path}");
        assert_eq!(got.header("x-c1"), Some(c1), "{path}");
        assert_eq!(r.header("x-r"), Some("text/plain"), "{path}");
        assert_eq!(r.header("x-q"), Some(q), "{path}");
    }
}

/// `last_rule_file` and `last_rule_line` name the last final rule that applied: a `deny`
/// page sees its own rule, a `return` answer is rendered before its rule counts, and an
/// `http-response allow` becomes the last rule. The answers are HAProxy 2.6.12's for the
/// same configuration (lines and all).
#[test]
fn last_rule_file_and_line_follow_haproxys_order() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request set-var(txn.x) str(a)
    http-request deny deny_status 403 content-type text/plain lf-string \"denied %[last_rule_file]:%[last_rule_line]\" if {{ path /deny }}
    http-request return status 200 content-type text/plain lf-string \"ret %[last_rule_file]:%[last_rule_line]\" if {{ path /ret }}
    http-request allow if {{ path /allow }}
    http-request set-header X-Before \"%[last_rule_file]:%[last_rule_line]\"
    http-response set-header X-Last \"%[last_rule_file]:%[last_rule_line]\"
    default_backend be
backend be
    http-request set-header X-Be \"%[last_rule_file]:%[last_rule_line]\"
    http-response allow if {{ status 200 }}
    http-response set-header X-Never 1
    server s {}
",
        origin.addr
    ));
    let r = ask(&p, "GET", "/deny", "Host: t\r\n");
    assert_eq!(r.status, 403);
    let text = r.text();
    assert!(
        text.starts_with("denied /") && text.ends_with("/test.cfg:9"),
        "{text}"
    );
    assert_eq!(ask(&p, "GET", "/ret", "Host: t\r\n").text(), "ret :");
    for path in ["/allow", "/other"] {
        let r = ask(&p, "GET", path, "Host: t\r\n");
        let last = r.header("x-last").unwrap_or_default();
        assert!(last.ends_with("/test.cfg:17"), "{path}: {last}");
        assert_eq!(r.header("x-never"), None);
    }
}

/// What HAProxy 2.6.12 answers in a backend's rules: 0 until a `set-timeout` rule sets
/// the timeout, then the value set, in milliseconds.
#[test]
fn cur_server_and_tunnel_timeouts_follow_set_timeout_rules() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    default_backend be
backend be
    http-request set-timeout server 3s if {{ path /server }}
    http-request set-timeout tunnel 11s if {{ path /tunnel }}
    http-request return status 200 content-type text/plain lf-string \"%[cur_server_timeout] %[cur_tunnel_timeout]\"
"
    ));
    for (path, want) in [("/", "0 0"), ("/server", "3000 0"), ("/tunnel", "0 11000")] {
        assert_eq!(ask(&p, "GET", path, "Host: t\r\n").text(), want, "{path}");
    }
}

#[test]
fn http_response_return_replaces_the_servers_answer() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| {
            if r.target == "/fail" {
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!"
                    .to_vec()
                    .into()
            } else {
                ok_response("fine").into()
            }
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    http-response return status 503 content-type text/plain string maintenance hdr X-Was %[status] if {{ status 500 }}\n    server s {}\n",
        origin.addr
    ));
    let r = get(p.addr(), "/fail");
    assert_eq!((r.status, r.text()), (503, "maintenance".to_string()));
    assert_eq!(r.header("x-was"), Some("500"));
    let r = get(p.addr(), "/ok");
    assert_eq!((r.status, r.text()), (200, "fine".to_string()));
}

#[test]
fn rules_in_named_defaults_run_first_and_only_where_haproxy_allows_them() {
    // A named defaults section's rules run before the proxy's own (checked side by side with
    // HAProxy 2.6.12, which accepts and refuses exactly these configurations).
    let p = Sluice::start(
        "defaults web\n    mode http\n    timeout client 5s\n    timeout server 5s\n    timeout connect 1s\n    http-request set-var(txn.order) str(defaults)\n    http-request set-header X-From-Defaults 1\nfrontend fe from web\n    {fe}\n    http-request set-var(txn.order) str(defaults-then-proxy) if { var(txn.order) -m str defaults }\n    http-request return status 200 content-type text/plain lf-string \"%[var(txn.order)] %[req.hdr(x-from-defaults)]\"\n",
    );
    assert_eq!(get(p.addr(), "/").text(), "defaults-then-proxy 1");
    for (text, says) in [
        (
            "defaults\n    mode http\n    http-request deny\nfrontend f\n    bind 127.0.0.1:1\n",
            "c.cfg:3: 'http-request' not allowed in anonymous 'defaults' section",
        ),
        (
            "defaults\n    mode http\n    tcp-response content reject\nfrontend f\n    bind 127.0.0.1:1\n",
            "c.cfg:3: 'tcp-response' not allowed in anonymous 'defaults' section",
        ),
        (
            "defaults web\n    mode http\n    http-request deny\nfrontend f\n    bind 127.0.0.1:1\n    default_backend b\nbackend b\n    server s 127.0.0.1:2\n",
            "frontends and backends cannot inherit from the same defaults section",
        ),
        (
            "defaults web\n    mode http\n    http-request deny\nlisten l\n    bind 127.0.0.1:1\n    server s 127.0.0.1:2\n",
            "a listen section cannot use it",
        ),
    ] {
        let (ok, err) = check_config(text);
        assert!(!ok && err.contains(says), "{text}\n{err}");
    }
    // Rules-free defaults are shared as before.
    let (ok, err) = check_config(
        "defaults web\n    mode http\nfrontend f\n    bind 127.0.0.1:1\n    default_backend b\nbackend b\n    server s 127.0.0.1:2\n",
    );
    assert!(ok, "{err}");
}

#[test]
fn global_set_var_gives_process_variables_at_start() {
    // As HAProxy 2.6 (side by side: the same answer).
    let p = Sluice::start(
        "global\n    set-var proc.a str(primary)\n    set-var proc.n int(42)\n    set-var-fmt proc.b \"%[var(proc.a)]-x\"\ndefaults\n    mode http\n    timeout client 2s\nfrontend fe\n    {fe}\n    http-request return status 200 content-type text/plain lf-string \"%[var(proc.a)] %[var(proc.b)] %[var(proc.n)]\"\n",
    );
    assert_eq!(get(p.addr(), "/").text(), "primary primary-x 42");
    for (line, says) in [
        ("set-var proc.x req.hdr(host)", "at start only constants"),
        ("set-var txn.x str(a)", "only proc. variables"),
    ] {
        let (ok, err) = check_config(&format!("global\n    {line}\n"));
        assert!(!ok && err.contains(says), "{line}: {err}");
    }
}

/// Each response rule sees the response as the rules before it left it, the frontend's
/// rules the backend's edits, as HAProxy edits a message in place (its reg-tests
/// http-rules/h1or2_to_h1c and http_after_response).
#[test]
fn response_rules_see_the_edits_before_them() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|_: &Received| {
            Reply::Raw(b"HTTP/1.1 234 Odd\r\nX-Server: s\r\nContent-Length: 2\r\n\r\nok".to_vec())
        }),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-response set-header x-fe-saw %[res.fhdr(a)]
    http-after-response set-header x-after-status %[status]
    default_backend be
backend be
    http-response set-header a x
    http-response set-header a-copy %[res.fhdr(a)]|
    http-response set-status 200
    http-response set-header x-status %[status]
    http-response del-header x-server
    http-response set-header x-server-seen %[res.hdr(x-server)]-
    server s {}
",
        origin.addr
    ));
    let r = get(p.addr(), "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("a-copy"), Some("x|"));
    assert_eq!(r.header("x-status"), Some("200"));
    assert_eq!(r.header("x-server-seen"), Some("-"));
    assert_eq!(r.header("x-fe-saw"), Some("x"));
    assert_eq!(r.header("x-after-status"), Some("200"));
    assert_eq!(r.text(), "ok");
}

/// `req.cook_val`, `req.hdr_ip` (a port after an IPv4 address left out) and
/// `http_auth_bearer`, as HAProxy 2.6's manual describes them (its reg-tests
/// sample_fetches/cook and http-rules/converters_ipmask_concat_strcmp_field_word use them).
#[test]
fn cookie_values_header_addresses_and_bearer_tokens() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request return status 200 content-type text/plain lf-string \"%[req.cook_val(n),add(1)] %[req.hdr_ip(x-ip)] %[hdr_ip(x-ip,1),ipmask(24)] %[http_auth_bearer] %[http_auth_bearer(x-token)]\"
"
    ));
    let r = ask(
        &p,
        "GET",
        "/",
        "Host: t\r\nCookie: a=1; n=41\r\nX-IP: 10.1.2.3:8080\r\nX-IP: 192.0.2.9\r\nAuthorization: Bearer abc.def\r\nX-Token: bearer xyz\r\n",
    );
    assert_eq!(r.text(), "42 192.0.2.9 10.1.2.0 abc.def xyz");
    // Not a number, not an address, not a bearer: nothing.
    let r = ask(
        &p,
        "GET",
        "/",
        "Host: t\r\nCookie: n=x\r\nX-IP: nowhere\r\nAuthorization: Basic Zm9v\r\n",
    );
    assert_eq!(r.text(), "    ");
}

/// `json_query` paths as HAProxy writes them: member names with a `-`, a dot escaped in a
/// name, array indexes (its reg-test converter/json_query).
#[test]
fn json_query_reads_haproxy_paths() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    option http-buffer-request
    http-request return status 200 content-type text/plain lf-string \"%[req.body,json_query('\\$.negativ-integer','int')] %[req.body,json_query('\\$.my\\.key')] %[req.body,json_query('\\$.a.b[1]')]\"
"
    ));
    let body = r#"{"negativ-integer":-1234,"my.key":"dotted","a":{"b":["x","y"]}}"#;
    let r = ask(
        &p,
        "POST",
        "/",
        &format!("Host: t\r\nContent-Length: {}\r\n\r\n{body}", body.len()),
    );
    assert_eq!(r.text(), "-1234 dotted y");
}

/// `set-var` conditions, the action's and the converter's: the answer is HAProxy 2.6.12's
/// for the same rules (its reg-test sample_fetches/cond_set_var covers them too).
#[test]
fn set_var_conditions_decide_as_haproxys() {
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-request set-var(txn.a,ifnotexists) str(first)
    http-request set-var(txn.a,ifnotexists) str(second)
    http-request set-var(txn.b,ifexists) str(x)
    http-request set-var(txn.n) int(5)
    http-request set-var(txn.n,ifgt) int(3)
    http-request set-var(txn.n,ifgt) int(4)
    http-request set-var(txn.m) int(5)
    http-request set-var(txn.m,iflt) int(7)
    http-request set-var(txn.f,ifnotempty) str()
    http-request set-var(txn.g,ifset) str(x)
    http-request set-var(txn.h,ifnotset) str(y)
    http-request set-var(txn.k,ifnotset,ifnotempty) str(k1)
    http-request set-var(txn.k,ifnotset) str(k2)
    http-request set-var(txn.z) str(q),set-var(txn.c,ifnotexists)
    http-request set-var(txn.z) str(r),set-var(txn.c,ifnotexists)
    http-request return status 200 content-type text/plain lf-string \"a=%[var(txn.a)] b=%[var(txn.b)] n=%[var(txn.n)] m=%[var(txn.m)] f=%[var(txn.f)] g=%[var(txn.g)] h=%[var(txn.h)] k=%[var(txn.k)] c=%[var(txn.c)]\"
"
    ));
    assert_eq!(
        get(p.addr(), "/").text(),
        "a=first b= n=3 m=7 f= g= h=y k=k1 c=q"
    );
}

/// `http-response redirect location ...` replaces the server's answer (only `location` on the
/// response path, as HAProxy allows; its reg-test log/last_rule uses one).
#[test]
fn a_response_rule_redirects() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe
    {{fe}}
    http-response redirect location /elsewhere code 302 if {{ status 200 }}
    default_backend be
backend be
    server s {}
",
        origin.addr
    ));
    let r = get(p.addr(), "/x");
    assert_eq!((r.status, r.header("location")), (302, Some("/elsewhere")));
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    http-response redirect prefix /p\n"
    ));
    assert!(
        !ok && err.contains("only 'location' redirects on the response path"),
        "{err}"
    );
}

/// A HEAD a rule sends as a GET (HAProxy's reg-test http_bodyless_response): the server's
/// body, sized, large or chunked, is read and dropped; the client gets the head alone and
/// both connections carry on.
#[test]
fn a_head_sent_as_a_get_gets_no_body() {
    let origin = Origin::with_handler(
        "o",
        std::sync::Arc::new(|r: &Received| {
            let raw = match r.target.as_str() {
                "/small" => "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nskipped data".to_string(),
                "/big" => format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n{}",
                    "x".repeat(20000)
                ),
                "/chunked" => format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n{}\r\n400\r\n{}\r\n0\r\n\r\n",
                    "a".repeat(15),
                    "b".repeat(1024)
                ),
                _ => return ok_response("last response").into(),
            };
            Reply::Raw(raw.into_bytes())
        }),
    );
    let p = Sluice::start(&format!(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\nfrontend fe\n    {{fe}}\n    http-request set-method GET\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let mut c = Conn::new(p.addr());
    for (path, length) in [
        ("/small", Some("12")),
        ("/big", Some("20000")),
        ("/chunked", None),
    ] {
        c.send(format!("HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.response_for(true).expect("an answer");
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-length"), length, "{path}");
    }
    // Nothing of the bodies reached the client: the next answer is read whole.
    assert_eq!(c.get("/last").text(), "last response");
    let seen = origin.requests();
    assert!(seen.iter().all(|r| r.method == "GET"), "{seen:?}");
    assert_eq!(origin.conns(), 1, "the server connection was kept");
}

/// `set-src-port` and `set-dst-port` change the ports the rules after them (and the logs)
/// see, the addresses kept.
#[test]
fn ports_are_set_by_rules() {
    let p = Sluice::start(
        "defaults\n    mode http\n    timeout client 5s\nfrontend fe\n    {fe}\n    http-request set-src-port int(4242)\n    http-request set-dst-port str(8080)\n    http-request return status 200 content-type text/plain lf-string \"%[src]:%[src_port] %[dst]:%[dst_port]\"\n",
    );
    assert_eq!(get(p.addr(), "/").text(), "127.0.0.1:4242 127.0.0.1:8080");
}

/// What `http-request set-src`/`set-dst` (and their ports) change is the current request's:
/// the next request on the same keep-alive connection starts again from the connection's
/// addresses, as with HAProxy 2.6.
#[test]
fn address_rules_change_one_request_of_a_connection() {
    let p = Sluice::start(
        "defaults\n    mode http\n    timeout client 5s\nfrontend fe\n    {fe}\n    http-request set-src ipv4(10.0.0.9) if { path /r0 }\n    http-request set-dst ipv4(10.0.0.8) if { path /r0 }\n    http-request set-src-port int(4242) if { path /r0 }\n    http-request return status 200 content-type text/plain lf-string \"%[src]:%[src_port] %[dst]\"\n",
    );
    let mut c = p.connect();
    assert_eq!(c.get("/r0").text(), "10.0.0.9:4242 10.0.0.8");
    let again = c.get("/r1").text();
    let (src, dst) = again.split_once(' ').unwrap();
    assert!(src.starts_with("127.0.0.1:"), "{again}");
    assert_ne!(src, "127.0.0.1:4242", "{again}");
    assert_eq!(dst, "127.0.0.1");
}

/// `wait-for-handshake` and `disable-l7-retry` ask for what is always so with sluice (it
/// takes no TLS early data and retries no request once sent): accepted, and the rules
/// after them run.
#[test]
fn rules_that_ask_for_what_is_always_so_pass() {
    let p = Sluice::start(
        "defaults\n    mode http\n    timeout client 5s\nfrontend fe\n    {fe}\n    http-request wait-for-handshake\n    http-request disable-l7-retry\n    http-request return status 200 content-type text/plain string after\n",
    );
    assert_eq!(get(p.addr(), "/").text(), "after");
}

/// `http-request normalize-uri`: each normalizer rewrites the target the server gets (in
/// the order written, later rules seeing the result), a `strict` one answers 400 to a bad
/// `%` without asking the server, and, as in HAProxy 2.6, the action is refused without
/// `expose-experimental-directives`.
#[test]
fn normalize_uri_rewrites_the_target_as_haproxy_does() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "global
    expose-experimental-directives
{DEFAULTS}frontend fe
    {{fe}}
    http-request normalize-uri fragment-strip
    http-request normalize-uri path-merge-slashes
    http-request normalize-uri percent-decode-unreserved strict
    http-request normalize-uri percent-to-uppercase
    http-request normalize-uri path-strip-dot
    http-request normalize-uri path-strip-dotdot full if {{ path_beg /full }}
    http-request normalize-uri path-strip-dotdot
    http-request normalize-uri query-sort-by-name
    http-request set-header X-Seen %[pathq]
    default_backend be
backend be
    server s1 {}
",
        origin.addr
    ));
    let cases = [
        ("//a//b/./c/../d?z=1&a=2&z=0", "/a/b/d?a=2&z=1&z=0"),
        ("/%61dmin/%2fx/%7e?q=%3f", "/admin/%2Fx/~?q=%3F"),
        ("/../x/./", "/../x/"),
        ("/full/../../x", "/x"),
        ("http://h.example/a//b", "http://h.example/a/b"),
    ];
    for (sent, want) in cases {
        let host = "Host: h.example\r\n";
        let r = ask(&p, "GET", sent, host);
        assert_eq!(r.status, 200, "{sent}");
        let seen = origin.requests().pop().unwrap();
        assert_eq!(seen.target, want, "{sent}");
        // Later rules read the normalized request.
        let path_q = want.strip_prefix("http://h.example").unwrap_or(want);
        assert_eq!(seen.header("x-seen"), Some(path_q), "{sent}");
    }
    let before = origin.count();
    let r = ask(&p, "GET", "/%zz/a", "Host: h\r\n");
    assert_eq!(r.status, 400);
    assert_eq!(
        origin.count(),
        before,
        "a refused request reached the server"
    );

    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    http-request normalize-uri path-merge-slashes\n"
    ));
    assert!(
        !ok && out.contains(":8: 'http-request normalize-uri' is experimental"),
        "{out}"
    );
    for bad in [
        "path-strip-dotdot strict",
        "percent-to-uppercase full",
        "nonsense",
    ] {
        let (ok, out) = check_config(&format!(
            "global\n    expose-experimental-directives\n{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    http-request normalize-uri {bad}\n"
        ));
        assert!(!ok && out.contains(":10: 'http-request'"), "{bad}: {out}");
    }
}

/// `option http-restrict-req-hdr-names`: after a proxy's `http-request` rules, fields
/// whose names hold other characters than letters, digits and `-` are kept (`preserve`,
/// the default), removed (`delete`: those the rules added too) or get the request denied
/// with 403 (`reject`), never reaching the server; each proxy applies its own.
#[test]
fn restricted_header_names_are_kept_removed_or_refused() {
    let origin = Origin::start("o");
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend keep\n    {{fe}}\n    default_backend plain\nfrontend del\n    {{fe}}\n    option http-restrict-req-hdr-names delete\n    http-request add-header X_Added 1\n    default_backend plain\nfrontend rej\n    {{fe}}\n    default_backend strict\nbackend plain\n    server s {}\nbackend strict\n    option http-restrict-req-hdr-names reject\n    server s {}\n",
        origin.addr, origin.addr
    ));
    let ask = |i: usize, target: &str| {
        let mut c = Conn::new(p.addrs[i]);
        c.send(
            format!("GET {target} HTTP/1.1\r\nHost: t\r\nX_Forwarded-For: 6.6.6.6\r\nX.Dot: 1\r\nX-Ok: 1\r\n\r\n")
                .as_bytes(),
        );
        c.response()
    };
    assert_eq!(ask(0, "/keep").status, 200);
    assert_eq!(ask(1, "/del").status, 200);
    let r = ask(2, "/rej");
    assert_eq!(r.status, 403);
    let seen = origin.requests();
    let kept = seen.iter().find(|r| r.target == "/keep").unwrap();
    assert_eq!(kept.header("x_forwarded-for"), Some("6.6.6.6"));
    assert_eq!(kept.header("x.dot"), Some("1"));
    let deleted = seen.iter().find(|r| r.target == "/del").unwrap();
    assert_eq!(deleted.header("x_forwarded-for"), None);
    assert_eq!(deleted.header("x.dot"), None);
    assert_eq!(
        deleted.header("x_added"),
        None,
        "added by a rule, then removed"
    );
    assert_eq!(deleted.header("x-ok"), Some("1"));
    assert!(
        seen.iter().all(|r| r.target != "/rej"),
        "the refused request never left"
    );
}
