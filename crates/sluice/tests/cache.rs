//! HAProxy's small object cache through the real binary: `cache` sections, `http-request
//! cache-use`, `http-response cache-store`, what is stored and for how long, `Age`, HEAD and
//! conditional requests (304), invalidation by unsafe methods, `Vary` with `process-vary`,
//! the size bound, `show cache`, the statistics and the log's `<CACHE>` server. The
//! expected behaviour was checked side by side with HAProxy 2.6.12 on the same
//! configuration (`curl` and `show stat`).

mod common;

use common::*;
use std::sync::Arc;

/// An origin whose answers are cacheable as the path says: `/nostore` forbids it, `/vary`
/// varies on Accept-Encoding (and answers gzip-encoded bytes to a client accepting them),
/// `/big` is 6 kB, `/chunked` is sent in chunks; every body says how many requests the
/// origin had.
fn cacheable_origin() -> Origin {
    let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Origin::with_handler(
        "o",
        Arc::new(move |r: &Received| {
            let count = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if r.method == "POST" || r.method == "DELETE" {
                return b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
                    .to_vec()
                    .into();
            }
            let mut body = format!("{} #{count}", r.target);
            let mut fields = String::from(
                "cache-control: max-age=30\r\netag: \"v1\"\r\nlast-modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n",
            );
            match r.target.split('?').next().unwrap_or_default() {
                "/nostore" => fields = "cache-control: no-store\r\n".into(),
                "/private" => fields = "cache-control: private, max-age=30\r\n".into(),
                "/bare" => fields = String::new(),
                "/vary" => {
                    fields.push_str("vary: accept-encoding\r\n");
                    if r.header("accept-encoding")
                        .is_some_and(|a| a.contains("gzip"))
                    {
                        fields.push_str("content-encoding: gzip\r\n");
                        body = format!("gz {body}");
                    }
                }
                "/big" => body = "x".repeat(6000),
                _ => {}
            }
            if r.target == "/chunked" {
                let (a, b) = body.split_at(3);
                return format!(
                    "HTTP/1.1 200 OK\r\n{fields}transfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                    a.len(),
                    b.len()
                )
                .into_bytes()
                .into();
            }
            format!(
                "HTTP/1.1 200 OK\r\n{fields}content-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
            .into()
        }),
    )
}

fn request(p: &Sluice, raw: &str) -> Response {
    let mut c = Conn::new(p.addr());
    c.send(raw.as_bytes());
    c.response_for(raw.starts_with("HEAD")).expect("a response")
}

fn get_with(p: &Sluice, path: &str, extra: &str) -> Response {
    request(p, &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n"))
}

fn start(origin: &Origin, dir: &TempDir, cache: &str) -> Sluice {
    Sluice::start(&format!(
        "global\n    log stdout format raw local0\n    stats socket {} level admin\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    log-format \"%b/%s %ST %HU\"\n    default_backend be\nbackend be\n    http-request cache-use c1\n    http-response cache-store c1\n    http-response set-header x-cache HIT if !{{ srv_id -m found }}\n    server s1 {}\ncache c1\n{cache}",
        dir.0.join("admin.sock").display(),
        origin.addr
    ))
}

/// `res.cache_hit` and `res.cache_name` say whether and where from a response was served,
/// to the response rules and the log.
#[test]
fn cache_hits_are_seen_by_rules_and_logs() {
    let origin = cacheable_origin();
    let p = Sluice::start(&format!(
        "global\n    log stdout format raw local0\n{DEFAULTS}    log global\nfrontend fe\n    {{fe}}\n    log-format \"%HU hit=%[res.cache_hit] name=%[res.cache_name]\"\n    http-after-response set-header x-hit %[res.cache_hit]\n    http-after-response set-header x-name %[res.cache_name] if {{ res.cache_hit }}\n    default_backend be\nbackend be\n    http-request cache-use pages\n    http-response cache-store pages\n    server s1 {}\ncache pages\n    total-max-size 4\n",
        origin.addr
    ));
    let miss = get_with(&p, "/a", "");
    assert_eq!(miss.header("x-hit"), Some("0"));
    assert_eq!(miss.header("x-name"), None);
    let hit = get_with(&p, "/a", "");
    assert_eq!(hit.text(), "/a #1");
    assert_eq!(hit.header("x-hit"), Some("1"));
    assert_eq!(hit.header("x-name"), Some("pages"));
    wait_until("both logged", || p.stdout().lines().count() >= 2);
    let log = p.stdout();
    assert!(log.contains("/a hit=0 name=-\n"), "{log}");
    assert!(log.contains("/a hit=1 name=pages\n"), "{log}");
}

#[test]
fn objects_are_served_from_memory_until_they_expire_or_change() {
    let origin = cacheable_origin();
    let dir = TempDir::new();
    let p = start(&origin, &dir, "    total-max-size 4\n    max-age 240\n");
    let sock = dir.0.join("admin.sock");

    // A miss, then hits: the origin sees one request; the hit has an Age and the rule's
    // field (no server answered it).
    let first = get_with(&p, "/a", "");
    assert_eq!((first.status, first.text().as_str()), (200, "/a #1"));
    assert_eq!(first.header("x-cache"), None);
    let hit = get_with(&p, "/a", "");
    assert_eq!(hit.text(), "/a #1");
    assert_eq!(hit.header("x-cache"), Some("HIT"));
    assert_eq!(hit.header("age"), Some("0"));
    assert_eq!(hit.header("etag"), Some("\"v1\""));
    assert_eq!(origin.count(), 1);
    // HEAD: the head only, with the object's length.
    let head = request(&p, "HEAD /a HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("5"))
    );
    // Conditional requests the object satisfies: 304.
    let inm = get_with(&p, "/a", "If-None-Match: W/\"v1\"\r\n");
    assert_eq!((inm.status, inm.text().as_str()), (304, ""));
    let ims = get_with(
        &p,
        "/a",
        "If-Modified-Since: Thu, 22 Oct 2015 07:28:00 GMT\r\n",
    );
    assert_eq!(ims.status, 304);
    let older = get_with(
        &p,
        "/a",
        "If-Modified-Since: Tue, 20 Oct 2015 07:28:00 GMT\r\n",
    );
    assert_eq!((older.status, older.text().as_str()), (200, "/a #1"));
    // Another host is another object.
    let other = request(&p, "GET /a HTTP/1.1\r\nHost: elsewhere\r\n\r\n");
    assert_eq!(other.text(), "/a #2");
    assert_eq!(origin.count(), 2);

    // What the request forbids: HTTP/1.0, no-cache, Authorization go to the server.
    assert_eq!(
        request(&p, "GET /a HTTP/1.0\r\nHost: t\r\n\r\n").text(),
        "/a #3"
    );
    assert_eq!(
        get_with(&p, "/a", "Cache-Control: no-cache\r\n").text(),
        "/a #4"
    );
    assert_eq!(
        get_with(&p, "/a", "Authorization: Basic eDp5\r\n").text(),
        "/a #5"
    );
    // ... and what the response forbids: never stored.
    for path in ["/nostore", "/private", "/bare"] {
        let a = get_with(&p, path, "").text();
        let b = get_with(&p, path, "").text();
        assert_ne!(a, b, "{path} was served from the cache");
    }
    // A chunked response is stored once whole, and served with its length.
    let c1 = get_with(&p, "/chunked", "");
    let c2 = get_with(&p, "/chunked", "");
    assert_eq!(c1.text(), c2.text());
    assert_eq!(
        c2.header("content-length"),
        Some(c1.text().len().to_string().as_str())
    );

    // A successful POST drops the object: the next GET goes to the server again.
    let before = origin.count();
    assert_eq!(get_with(&p, "/a", "").text(), "/a #1");
    let post = request(
        &p,
        "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx",
    );
    assert_eq!(post.status, 204);
    let after = get_with(&p, "/a", "");
    assert_eq!(after.header("x-cache"), None);
    assert_eq!(origin.count(), before + 2);
    assert_eq!(get_with(&p, "/a", "").header("x-cache"), Some("HIT"));

    // The statistics count the backend's lookups and hits; the log names <CACHE>.
    let csv = Sluice::cli(&sock, "show stat");
    let lookups: u64 = stat_field(&csv, "be", "BACKEND", "cache_lookups")
        .parse()
        .unwrap();
    let hits: u64 = stat_field(&csv, "be", "BACKEND", "cache_hits")
        .parse()
        .unwrap();
    assert!(
        hits >= 7 && lookups > hits,
        "lookups {lookups}, hits {hits}"
    );
    wait_until("the hit logged", || {
        p.stdout().contains("be/<CACHE> 304 /a\n")
    });
    assert!(p.stdout().contains("be/s1 200 /a\n"), "{}", p.stdout());
    let show = Sluice::cli(&sock, "show cache");
    assert!(show.contains(": c1 (shctx:0x"), "{show}");
    assert!(show.contains(" size:"), "{show}");
}

#[test]
fn vary_and_size_limits() {
    let origin = cacheable_origin();
    let dir = TempDir::new();
    // Objects of at most 4 kB in a 1 MB cache, varying on Accept-Encoding.
    let p = start(
        &origin,
        &dir,
        "    total-max-size 1\n    max-object-size 4096\n    process-vary on\n    max-secondary-entries 2\n",
    );
    // Too big: never stored.
    get_with(&p, "/big", "");
    get_with(&p, "/big", "");
    assert_eq!(origin.count(), 2);
    // One variant per encoding: a gzip client never gets the identity one, nor the reverse.
    assert_eq!(
        get_with(&p, "/vary", "Accept-Encoding: gzip\r\n").text(),
        "gz /vary #3"
    );
    assert_eq!(get_with(&p, "/vary", "").text(), "/vary #4");
    assert_eq!(
        get_with(&p, "/vary", "Accept-Encoding: br, gzip\r\n").text(),
        "gz /vary #3"
    );
    assert_eq!(get_with(&p, "/vary", "").text(), "/vary #4");
    assert_eq!(origin.count(), 4);

    // Without process-vary, a response with Vary is never stored.
    let origin = cacheable_origin();
    let dir = TempDir::new();
    let p = start(&origin, &dir, "    total-max-size 1\n");
    get_with(&p, "/vary", "");
    get_with(&p, "/vary", "");
    assert_eq!(origin.count(), 2);
}

#[test]
fn the_cache_holds_no_more_than_its_size() {
    let origin = cacheable_origin();
    let dir = TempDir::new();
    let p = start(
        &origin,
        &dir,
        "    total-max-size 1\n    max-object-size 65536\n",
    );
    let sock = dir.0.join("admin.sock");
    // 300 objects of about 6 kB: twice what 1 MB holds.
    for i in 0..300 {
        get_with(&p, &format!("/big?{i}"), "");
    }
    let show = Sluice::cli(&sock, "show cache");
    let sizes: Vec<usize> = show
        .lines()
        .filter_map(|l| l.split(" size:").nth(1))
        .filter_map(|s| s.split(' ').next()?.parse().ok())
        .collect();
    let held: usize = sizes.iter().sum();
    assert!(held <= 1024 * 1024, "{held} bytes held");
    assert!(
        sizes.len() > 100 && sizes.len() < 300,
        "{} objects",
        sizes.len()
    );
    // The newest are there, the oldest went first.
    assert_eq!(get_with(&p, "/big?299", "").header("x-cache"), Some("HIT"));
    assert_eq!(get_with(&p, "/big?0", "").header("x-cache"), None);
}

#[test]
fn cache_sections_are_checked() {
    for (text, says) in [
        (
            "cache c\n    max-age 10\n",
            "Size not specified for cache 'c'",
        ),
        (
            "cache c\n    total-max-size 5000\n",
            "must not be greater than 4095",
        ),
        (
            "cache c\n    total-max-size 1\n    max-object-size 900000\n",
            "\"max-object-size\" is limited to an half of \"total-max-size\"",
        ),
        (
            "cache c\n    total-max-size 1\n    process-vary maybe\n",
            "expects \"on\" or \"off\"",
        ),
        (
            "cache c\n    total-max-size 1\n    colour blue\n",
            "unknown keyword 'colour' in 'cache' section",
        ),
        (
            "cache c\n    total-max-size 1\nbackend b\n    http-request cache-use nosuch\n",
            "unable to find the cache 'nosuch'",
        ),
    ] {
        let (ok, out) = check_config(&format!("{DEFAULTS}{text}"));
        assert!(!ok && out.contains(says), "{text}: {out}");
    }
}
