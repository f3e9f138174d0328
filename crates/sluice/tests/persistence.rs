//! Cookie persistence (`cookie ... insert|rewrite|prefix`, server `cookie`): a client keeps
//! its server across connections and workers, and moves when the server fails.

mod common;

use std::sync::Arc;

use common::*;

/// An origin answering `NAME TARGET`, setting `set_cookie` when given.
fn origin(name: &str, set_cookie: Option<&str>) -> Origin {
    let (n, c) = (name.to_string(), set_cookie.map(str::to_string));
    Origin::with_handler(
        name,
        Arc::new(move |r: &Received| {
            let body = format!("{n} {}", r.target);
            let extra = c
                .as_ref()
                .map(|c| format!("Set-Cookie: {c}\r\n"))
                .unwrap_or_default();
            Reply::Raw(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{extra}\r\n{body}",
                    body.len()
                )
                .into_bytes(),
            )
        }),
    )
}

/// A request on a new connection with a Cookie header; the response.
fn ask(p: &Sluice, cookie: Option<&str>) -> Response {
    let mut c = p.connect();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    c.send(format!("GET /x HTTP/1.1\r\nHost: t\r\n{cookie}\r\n").as_bytes());
    c.response_for(false).expect("a response")
}

fn set_cookies(r: &Response) -> Vec<String> {
    r.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.clone())
        .collect()
}

#[test]
fn insert_mode_keeps_a_client_on_its_server_across_workers() {
    let (a, b) = (origin("a", None), origin("b", None));
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    cookie SRV insert indirect nocache httponly\n    server a {} cookie ca\n    server b {} cookie cb\n",
        a.addr, b.addr
    ));
    let first = ask(&p, Some("theme=dark"));
    let server = first.text()[..1].to_string();
    assert_eq!(
        set_cookies(&first),
        [format!("SRV=c{server}; path=/; HttpOnly")]
    );
    assert_eq!(first.header("cache-control"), Some("private"));
    // The cookie brings the client back to its server, each time on a new connection
    // (and so on either worker); no new cookie, and the server never sees it (indirect).
    for _ in 0..12 {
        let r = ask(&p, Some(&format!("theme=dark; SRV=c{server}")));
        assert_eq!(&r.text()[..1], server);
        assert!(set_cookies(&r).is_empty(), "{:?}", r.headers);
    }
    let seen = if server == "a" { &a } else { &b };
    let last = seen.requests().pop().unwrap();
    assert_eq!(last.header("cookie"), Some("theme=dark"));
    // A cookie naming no server is balanced and replaced.
    let r = ask(&p, Some("SRV=nosuch"));
    assert_eq!(set_cookies(&r).len(), 1);
}

#[test]
fn a_failed_server_sends_its_clients_elsewhere_with_a_new_cookie() {
    let b = origin("b", None);
    // Server a is a closed port: its clients' connections fail.
    let (_dead_port, dead) = refused_addr();
    let p = Sluice::start(&format!(
        "{DEFAULTS}    retries 1\n    option redispatch\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    cookie SRV insert indirect\n    server a {dead} cookie ca\n    server b {} cookie cb\n",
        b.addr
    ));
    let r = ask(&p, Some("SRV=ca"));
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("b "));
    assert_eq!(set_cookies(&r), ["SRV=cb; path=/"]);
}

#[test]
fn a_server_in_maintenance_loses_its_clients_unless_persist() {
    let (a, b) = (origin("a", None), origin("b", None));
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let cfg = |persist: &str| {
        format!(
            "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n{persist}    cookie SRV insert\n    server a {} cookie ca\n    server b {} cookie cb\n",
            sock.display(),
            a.addr,
            b.addr
        )
    };
    let p = Sluice::start(&cfg(""));
    assert!(ask(&p, Some("SRV=ca")).text().starts_with("a "));
    Sluice::cli(&sock, "disable server be/a");
    let r = ask(&p, Some("SRV=ca"));
    assert!(r.text().starts_with("b "));
    assert_eq!(set_cookies(&r), ["SRV=cb; path=/"]);
    drop(p);
    let p = Sluice::start(&cfg("    option persist\n"));
    Sluice::cli(&sock, "disable server be/a");
    assert!(ask(&p, Some("SRV=ca")).text().starts_with("a "));
}

#[test]
fn rewrite_and_prefix_modes_use_the_servers_own_cookie() {
    let a = origin("a", Some("SRV=from-app; Path=/"));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    cookie SRV rewrite\n    server a {} cookie ca\n",
        a.addr
    ));
    assert_eq!(set_cookies(&ask(&p, None)), ["SRV=ca; Path=/"]);
    drop(p);
    let (a, b) = (
        origin("a", Some("JSESSIONID=abc; Path=/")),
        origin("b", Some("JSESSIONID=abc; Path=/")),
    );
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    cookie JSESSIONID prefix\n    server a {} cookie ca\n    server b {} cookie cb\n",
        a.addr, b.addr
    ));
    let r = ask(&p, None);
    let server = r.text()[..1].to_string();
    assert_eq!(
        set_cookies(&r),
        [format!("JSESSIONID=c{server}~abc; Path=/")]
    );
    for _ in 0..6 {
        let r = ask(&p, Some(&format!("JSESSIONID=c{server}~abc; lang=fr")));
        assert_eq!(&r.text()[..1], server);
    }
    let seen = if server == "a" { &a } else { &b };
    assert_eq!(
        seen.requests().pop().unwrap().header("cookie"),
        Some("JSESSIONID=abc; lang=fr")
    );
}

#[test]
fn cookie_lines_are_checked() {
    for (line, says) in [
        (
            "cookie SRV insert rewrite",
            "only one of insert, rewrite and prefix",
        ),
        ("cookie SRV insert maxidle soon", "argument 4 'soon'"),
        ("cookie SRV frob", "expects insert"),
    ] {
        let (ok, out) = check_config(&format!(
            "{DEFAULTS}backend be\n    {line}\n    server a 127.0.0.1:1 cookie a\n"
        ));
        assert!(!ok && out.contains(says), "{line}: {out}");
    }
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}backend be\n    server a 127.0.0.1:1 cookie a;b\n"
    ));
    assert!(!ok && out.contains("cookie value"), "{out}");
}

#[test]
fn stick_tables_keep_a_session_on_the_server_that_created_it() {
    let (a, b) = (
        origin("a", Some("SID=from-a")),
        origin("b", Some("SID=from-b")),
    );
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    stick-table type string len 32 size 100 expire 30m\n    stick store-response res.cook(SID)\n    stick match req.cook(SID)\n    server s1 {}\n    server s2 {}\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    // The first answer creates the session; its server is remembered by the cookie's value.
    let first = ask(&p, None);
    let (server, sid) = if first.text().starts_with("a ") {
        ("a", "SID=from-a")
    } else {
        ("b", "SID=from-b")
    };
    // Round robin would alternate; the table keeps every request of the session on it.
    for _ in 0..6 {
        assert!(ask(&p, Some(sid)).text().starts_with(server));
    }
    let table = Sluice::cli(&sock, "show table be");
    let id = if server == "a" { 1 } else { 2 };
    let line = table
        .lines()
        .find(|l| l.contains(&format!("key={}", &sid[4..])))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains(&format!("server_id={id}")), "{line}");
    // Its server goes into maintenance: the session moves to the other one.
    let (name, survivor) = if server == "a" {
        ("s1", "b")
    } else {
        ("s2", "a")
    };
    Sluice::cli(&sock, &format!("disable server be/{name}"));
    assert!(ask(&p, Some(sid)).text().starts_with(survivor));
}

#[test]
fn stick_on_source_and_its_checks() {
    let (a, b) = (origin("a", None), origin("b", None));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    stick-table type ip size 100 expire 1m\n    stick on src\n    server s1 {}\n    server s2 {}\n",
        a.addr, b.addr
    ));
    let first = ask(&p, None).text();
    for _ in 0..5 {
        assert_eq!(ask(&p, None).text()[..1], first[..1]);
    }
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    stick on src\n    server s 127.0.0.1:2\n"
    ));
    assert!(!ok && out.contains("stick needs a stick table"), "{out}");
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    stick on src\n    default_backend be\nbackend be\n    server s 127.0.0.1:2\n"
    ));
    assert!(!ok && out.contains("stick"), "{out}");
}

#[test]
fn inserted_cookies_carry_dates_and_expire() {
    let (a, b) = (origin("a", None), origin("b", None));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    cookie SRV insert indirect maxidle 30m maxlife 8h\n    server s1 {} cookie s1\n    server s2 {} cookie s2\n",
        a.addr, b.addr
    ));
    let first = ask(&p, None);
    let set = set_cookies(&first);
    assert_eq!(set.len(), 1, "{set:?}");
    // `SRV=s1|LLLLL|FFFFF; path=/`: the server, its last use and its creation.
    let value = set[0].split(';').next().unwrap().to_string();
    let parts: Vec<&str> = value.split('|').collect();
    assert_eq!(parts.len(), 3, "{value}");
    assert!(parts.iter().skip(1).all(|d| d.len() == 5));
    let server = &first.text()[..1];
    for _ in 0..4 {
        assert_eq!(&ask(&p, Some(&value)).text()[..1], server);
    }
    // A cookie last used in 1970 is ignored: the request is balanced and gets a new one.
    let stale = format!("{}|AAAAA|AAAAA", parts[0]);
    let mut moved = false;
    for _ in 0..4 {
        let r = ask(&p, Some(&stale));
        assert_eq!(set_cookies(&r).len(), 1);
        moved |= &r.text()[..1] != server;
    }
    assert!(moved, "round robin took over from the expired cookie");
}

#[test]
fn dynamic_cookies_are_derived_from_the_key_and_the_address() {
    let (a, b) = (origin("a", None), origin("b", None));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    cookie SRV insert dynamic\n    dynamic-cookie-key s3cr3t\n    server s1 {}\n    server s2 {}\n",
        a.addr, b.addr
    ));
    let first = ask(&p, None);
    let set = set_cookies(&first);
    let value = set[0].split(';').next().unwrap().to_string();
    let hex = value.strip_prefix("SRV=").unwrap();
    assert!(
        hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{value}"
    );
    let server = &first.text()[..1];
    for _ in 0..4 {
        assert_eq!(&ask(&p, Some(&value)).text()[..1], server);
    }
}

#[test]
fn use_server_force_persist_and_ignore_persist() {
    let (a, b) = (origin("a", None), origin("b", None));
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    cookie SRV insert indirect\n    use-server s2 if {{ path_beg /admin }}\n    force-persist if {{ hdr(x-force) -m found }}\n    ignore-persist if {{ path_end .png }}\n    server s1 {} cookie c1\n    server s2 {} cookie c2\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    let path = |path: &str, cookie: Option<&str>, force: bool| {
        let mut c = p.connect();
        let cookie = cookie
            .map(|c| format!("Cookie: {c}\r\n"))
            .unwrap_or_default();
        let force = if force { "X-Force: 1\r\n" } else { "" };
        c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{cookie}{force}\r\n").as_bytes());
        c.response().text()[..1].to_string()
    };
    // use-server wins over the cookie.
    for _ in 0..3 {
        assert_eq!(path("/admin", Some("SRV=c1"), false), "b");
    }
    // ignore-persist: the cookie is not consulted, round robin takes both servers.
    let seen: std::collections::HashSet<String> = (0..4)
        .map(|_| path("/i.png", Some("SRV=c1"), false))
        .collect();
    assert_eq!(seen.len(), 2);
    // A server in maintenance keeps its clients only under force-persist.
    Sluice::cli(&sock, "disable server be/s1");
    assert_eq!(path("/x", Some("SRV=c1"), true), "a");
    assert_eq!(path("/x", Some("SRV=c1"), false), "b");
    let (ok, out) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:1\n    default_backend be\nbackend be\n    use-server nosuch\n    server s 127.0.0.1:2\n"
    ));
    assert!(
        !ok && out.contains("use-server names no server 'nosuch'"),
        "{out}"
    );
}

#[test]
fn postonly_secure_domain_and_preserve() {
    let plain = origin("a", None);
    let own = origin("b", Some("SRV=mine; path=/app"));
    let p = Sluice::start(&format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    use_backend keeps if {{ path_beg /keep }}\n    default_backend posts\nbackend posts\n    cookie SRV insert postonly secure domain .example.com\n    server a {} cookie ca\nbackend keeps\n    cookie SRV insert preserve\n    server b {} cookie cb\n",
        plain.addr, own.addr
    ));
    let send = |req: &str| {
        let mut c = p.connect();
        c.send(req.as_bytes());
        c.response_for(false).expect("a response")
    };
    // postonly: only the answer to a POST carries the cookie, with its attributes.
    let r = send("GET /x HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(set_cookies(&r).is_empty(), "{:?}", r.headers);
    let r = send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(
        set_cookies(&r),
        ["SRV=ca; path=/; domain=.example.com; Secure"]
    );
    // preserve: the server set the cookie itself, so it is left as it is.
    let r = send("GET /keep HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(set_cookies(&r), ["SRV=mine; path=/app"]);
}

#[test]
fn persist_with_redispatch_keeps_a_down_server_until_it_fails() {
    let (a, b) = (origin("a", None), origin("b", None));
    let dir = TempDir::new();
    let sock = dir.0.join("admin.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {} level admin\n{DEFAULTS}    retries 1\nbackend be\n    option persist\n    option redispatch\n    cookie SRV insert\n    server a {} cookie ca\n    server b {} cookie cb\nfrontend fe\n    {{fe}}\n    default_backend be\n",
        sock.display(),
        a.addr,
        b.addr
    ));
    // Marked down, but still answering: persist keeps its clients on it.
    Sluice::cli(&sock, "set server be/a health down");
    assert!(ask(&p, Some("SRV=ca")).text().starts_with("a "));
    // Once connecting to it fails, redispatch sends the client to another server.
    drop(a);
    let (_dead_port, dead) = refused_addr();
    Sluice::cli(
        &sock,
        &format!("set server be/a addr 127.0.0.1 port {}", dead.port()),
    );
    let r = ask(&p, Some("SRV=ca"));
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("b "), "{}", r.text());
    assert_eq!(set_cookies(&r), ["SRV=cb; path=/"]);
}

#[test]
fn stick_store_request_keeps_a_key_on_the_server_first_chosen() {
    let (a, b) = (origin("a", None), origin("b", None));
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    balance roundrobin\n    stick-table type string len 32 size 100 expire 1m\n    stick match req.hdr(x-user)\n    stick store-request req.hdr(x-user)\n    server a {}\n    server b {}\n",
        a.addr, b.addr
    ));
    let as_user = |user: &str| {
        let mut c = p.connect();
        c.send(format!("GET /x HTTP/1.1\r\nHost: t\r\nx-user: {user}\r\n\r\n").as_bytes());
        c.response().text()[..1].to_string()
    };
    let alice = as_user("alice");
    let bob = as_user("bob");
    // One worker's round robin alternates; the stored keys keep each user where they
    // started.
    assert_ne!(alice, bob);
    for _ in 0..5 {
        assert_eq!(as_user("alice"), alice);
        assert_eq!(as_user("bob"), bob);
    }
}

/// `option checkcache`: a response that sets a cookie and that a shared cache would keep
/// (a cacheable status to a GET, HEAD, OPTIONS or TRACE, an age, `Expires`, `ETag` or
/// `Last-Modified`, nothing keeping it private) is refused, with an alert, and the client
/// gets the proxy's page for its status, counted as a denied response; the rest pass. What
/// passes and what is refused is what HAProxy 2.6.12 did with the same server: `ETag` and
/// `max-age=60` refused (HAProxy's "200 OK / Service ready." page), no age or validator,
/// `public` alone, `private` and a POST passed.
#[test]
fn checkcache_refuses_cacheable_cookies() {
    let origin = Origin::with_handler(
        "o",
        Arc::new(|r: &Received| {
            let extra = match r.target.as_str() {
                "/private" => "Cache-Control: private\r\n",
                "/public" => "Cache-Control: public\r\n",
                "/etag" => "ETag: \"x\"\r\n",
                "/maxage" => "Cache-Control: max-age=60\r\n",
                _ => "",
            };
            format!("HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\n{extra}Content-Length: 2\r\n\r\nok")
                .into_bytes()
                .into()
        }),
    );
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    option checkcache\n    server s {}\n",
        sock.display(),
        origin.addr
    ));
    for (path, passes) in [
        ("/x", true),
        ("/public", true),
        ("/etag", false),
        ("/maxage", false),
        ("/private", true),
    ] {
        let r = get(p.addr(), path);
        assert_eq!(r.status, 200, "{path}");
        if passes {
            assert_eq!(
                (r.text(), r.header("set-cookie")),
                ("ok".into(), Some("a=1")),
                "{path}"
            );
        } else {
            assert!(r.text().contains("Service ready."), "{path}: {}", r.text());
            assert_eq!(r.header("set-cookie"), None, "{path}");
        }
    }
    let mut c = p.connect();
    c.send(b"POST /etag HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(c.response().text(), "ok", "a POST is not cached");
    let csv = Sluice::cli(&sock, "show stat");
    assert_eq!(stat_field(&csv, "be", "BACKEND", "dresp"), "2", "{csv}");
    assert_eq!(stat_field(&csv, "be", "s", "dresp"), "2", "{csv}");
    assert_eq!(stat_field(&csv, "fe", "FRONTEND", "dresp"), "2", "{csv}");
    assert!(p
        .stderr()
        .contains("Blocking cacheable cookie in response from instance be, server s."));
}
