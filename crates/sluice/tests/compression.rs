//! Response compression through the real binary: every algorithm round-trips every corpus
//! file from plain, chunked and slow origins; each skip rule; each header rewrite; Accept-
//! Encoding negotiation; offload; throttling by rate.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use common::*;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/corpus");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            !n.ends_with(".md") && n != "SHA256SUMS"
        })
        .map(|p| {
            (
                format!("/{}", p.file_name().unwrap().to_string_lossy()),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match encoding {
        "gzip" => flate2::read::GzDecoder::new(body).read_to_end(&mut out),
        "deflate-zlib" => flate2::read::ZlibDecoder::new(body).read_to_end(&mut out),
        "deflate-raw" => flate2::read::DeflateDecoder::new(body).read_to_end(&mut out),
        other => panic!("{other}"),
    }
    .expect("decodable body");
    out
}

fn system_gunzip(body: &[u8]) -> Vec<u8> {
    let mut child = std::process::Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip (installed by .ci/run)");
    let mut stdin = child.stdin.take().unwrap();
    let body = body.to_vec();
    let t = std::thread::spawn(move || stdin.write_all(&body).unwrap());
    let out = child.wait_with_output().unwrap();
    t.join().unwrap();
    assert!(out.status.success());
    out.stdout
}

/// An origin serving the corpus: `/plain/F` with Content-Length, `/chunked/F` chunked in
/// 5000-byte chunks, `/slow/F` dripped in 3 pieces. Content type from the extension.
fn corpus_origin() -> Origin {
    let files = Arc::new(corpus());
    Origin::with_handler(
        "corpus",
        Arc::new(move |r: &Received| {
            let (mode, name) = r.target[1..]
                .split_once('/')
                .map(|(m, n)| (m.to_string(), format!("/{n}")))
                .unwrap();
            let Some((_, body)) = files.iter().find(|(n, _)| *n == name) else {
                return Reply::Raw(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec());
            };
            let ct = if name.ends_with(".html") {
                "text/html"
            } else if name.ends_with(".js") {
                "application/javascript"
            } else if name.ends_with(".css") {
                "text/css"
            } else if name.ends_with(".json") {
                "application/json"
            } else {
                "text/plain"
            };
            match mode.as_str() {
                "plain" => {
                    let mut v = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    v.extend_from_slice(body);
                    Reply::Raw(v)
                }
                "chunked" => {
                    let mut v = format!("HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes();
                    for c in body.chunks(5000) {
                        v.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                        v.extend_from_slice(c);
                        v.extend_from_slice(b"\r\n");
                    }
                    v.extend_from_slice(b"0\r\nX-Checksum: abc\r\n\r\n");
                    Reply::Raw(v)
                }
                _ => {
                    let mut head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    let third = body.len() / 3 + 1;
                    let mut pieces: Vec<Vec<u8>> = body.chunks(third).map(<[u8]>::to_vec).collect();
                    head.extend_from_slice(&pieces.remove(0));
                    pieces.insert(0, head);
                    Reply::Dripped(pieces, Duration::from_millis(30))
                }
            }
        }),
    )
}

fn proxy(origin: &Origin, comp: &str, global: &str) -> Sluice {
    Sluice::start(&format!(
        "global\n    nbthread 2\n{global}\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n{comp}\n    server s1 {}\n",
        origin.addr
    ))
}

fn request(c: &mut Conn, path: &str, ae: &str) -> Response {
    c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {ae}\r\n\r\n").as_bytes());
    c.response()
}

#[test]
fn every_algorithm_round_trips_every_corpus_file() {
    let origin = corpus_origin();
    for (algo, ae, decoder) in [
        ("gzip", "gzip", "gzip"),
        ("deflate", "deflate", "deflate-zlib"),
        ("raw-deflate", "deflate", "deflate-raw"),
    ] {
        let p = proxy(&origin, &format!("    compression algo {algo}"), "");
        let mut c = p.connect();
        for (name, body) in corpus() {
            for mode in ["plain", "chunked", "slow"] {
                if body.len() < 256 && mode != "plain" {
                    continue;
                }
                let r = request(&mut c, &format!("/{mode}{name}"), ae);
                assert_eq!(r.status, 200);
                assert_eq!(
                    r.header("content-encoding"),
                    Some(ae),
                    "{algo} {mode} {name}"
                );
                assert_eq!(r.header("transfer-encoding"), Some("chunked"));
                assert_eq!(r.header("content-length"), None);
                assert_eq!(decode(decoder, &r.body), body, "{algo} {mode} {name}");
                if algo == "gzip" && mode == "plain" {
                    assert_eq!(system_gunzip(&r.body), body, "gzip -d {name}");
                }
                // (A tiny body grows: HAProxy has no minimum size either.)
                assert!(
                    r.body.len() < body.len() || body.len() < 256,
                    "{algo} {mode} {name} did not shrink"
                );
            }
        }
    }
}

#[test]
fn chunked_trailers_are_preserved() {
    let origin = corpus_origin();
    let p = proxy(&origin, "    compression algo gzip", "");
    let mut c = p.connect();
    c.send(b"GET /chunked/jquery.min.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n");
    // Read the raw bytes of this one response and look for the trailer after the last chunk.
    let r = c.response();
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    // The test client drops trailers; ask the proxy again and read raw bytes instead.
    let mut s = std::net::TcpStream::connect(p.addr()).unwrap();
    s.write_all(b"GET /chunked/jquery.min.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    assert!(
        raw.ends_with(b"0\r\nX-Checksum: abc\r\n\r\n"),
        "trailer kept after the last chunk"
    );
}

/// An origin answering every request with `response`.
fn fixed_origin(response: &'static str) -> Origin {
    Origin::with_handler(
        "fixed",
        Arc::new(move |_| Reply::Raw(response.as_bytes().to_vec())),
    )
}

fn body_of(n: usize) -> String {
    "compressible text ".repeat(n / 18 + 1)[..n].to_string()
}

#[test]
fn skip_rules() {
    let big = body_of(5000);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let cases: Vec<(&str, &'static str)> = vec![
        ("status 404", leak(format!("HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("HTTP/1.0 response", leak(format!("HTTP/1.0 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("already encoded", leak(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: br\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("no-transform", leak(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, no-transform\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("multipart", leak(format!("HTTP/1.1 200 OK\r\nContent-Type: multipart/mixed; boundary=x\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("unlisted type", leak(format!("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("no content type", leak(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("invalid etag", leak(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: abc\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("two etags", leak(format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"a\"\r\nETag: \"b\"\r\nContent-Length: {}\r\n\r\n{big}", big.len()))),
        ("below minsize", "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n\r\n0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"),
        ("no body (204)", "HTTP/1.1 204 No Content\r\nContent-Type: text/html\r\n\r\n"),
    ];
    for (name, response) in cases {
        let origin = fixed_origin(response);
        let p = proxy(
            &origin,
            "    compression algo gzip\n    compression type text/html text/plain\n    compression minsize-res 256",
            "",
        );
        let mut c = p.connect();
        let r = request(&mut c, "/x", "gzip");
        assert_eq!(
            r.header("content-encoding").filter(|v| *v == "gzip"),
            None,
            "{name}: must not be compressed"
        );
        let sent_body = response.split_once("\r\n\r\n").unwrap().1;
        assert_eq!(r.text(), sent_body, "{name}: body unchanged");
    }
    // Request side: HEAD, HTTP/1.0, no Accept-Encoding, q=0.
    let origin = fixed_origin(leak(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    )));
    let p = proxy(&origin, "    compression algo gzip", "");
    let mut c = p.connect();
    c.send(b"HEAD / HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n");
    let r = c.response_for(true).unwrap();
    assert_eq!(r.header("content-encoding"), None, "HEAD");
    assert_eq!(r.header("content-length"), Some("5000"));
    // Old browsers whose gzip HAProxy 2.6 does not trust get the response as it is (checked
    // side by side with HAProxy): Mozilla/4 but MSIE 7+ or MSIE 6 with SV1.
    for (ua, compressed) in [
        ("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)", false),
        (
            "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)",
            true,
        ),
        ("Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)", true),
        ("Mozilla/5.0 (X11; Linux x86_64)", true),
    ] {
        let mut c = p.connect();
        c.send(
            format!(
                "GET / HTTP/1.1\r\nHost: t\r\nUser-Agent: {ua}\r\nAccept-Encoding: gzip\r\n\r\n"
            )
            .as_bytes(),
        );
        let r = c.response();
        assert_eq!(r.header("content-encoding").is_some(), compressed, "{ua}");
    }
    let mut c10 = p.connect();
    c10.send(b"GET / HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    let r = c10.response();
    assert_eq!(
        r.header("content-encoding"),
        None,
        "HTTP/1.0 client gets identity"
    );
    assert_eq!(r.text(), big);
    let mut c = p.connect();
    assert_eq!(
        c.get("/").header("content-encoding"),
        None,
        "no Accept-Encoding"
    );
    assert_eq!(
        request(&mut c, "/", "gzip;q=0").header("content-encoding"),
        None,
        "q=0"
    );
    assert_eq!(
        request(&mut c, "/", "gzip").header("content-encoding"),
        Some("gzip"),
        "control"
    );
}

#[test]
fn header_rewrites() {
    let big = body_of(3000);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let origin = fixed_origin(leak(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: \"v1\"\r\nVary: Origin\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    )));
    let p = proxy(&origin, "    compression algo gzip deflate", "");
    let mut c = p.connect();
    let r = request(&mut c, "/", "gzip, deflate");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    assert_eq!(r.header("vary"), Some("Origin, Accept-Encoding"));
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(decode("gzip", &r.body), big.as_bytes());
    // Without a Vary header one is added; q-values pick deflate here.
    let origin = fixed_origin(leak(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    )));
    let p = proxy(&origin, "    compression algo gzip deflate", "");
    let mut c = p.connect();
    let r = request(&mut c, "/", "gzip;q=0.4, deflate;q=0.9");
    assert_eq!(r.header("content-encoding"), Some("deflate"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(decode("deflate-zlib", &r.body), big.as_bytes());
    // Keep-alive continues correctly after compressed responses.
    for _ in 0..3 {
        let r = request(&mut c, "/", "*");
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert_eq!(decode("gzip", &r.body), big.as_bytes());
    }
    assert_eq!(origin.conns(), 1);
}

#[test]
fn frontend_settings_apply_unless_the_backend_has_its_own() {
    let big = body_of(3000);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let origin = fixed_origin(leak(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    )));
    let p = Sluice::start(&format!(
        "{DEFAULTS}\nfrontend fe\n    {{fe}}\n    compression algo gzip\n    use_backend own if {{ path /own }}\n    default_backend inherit\nbackend inherit\n    server s {}\nbackend own\n    compression algo deflate\n    server s {}\n",
        origin.addr, origin.addr
    ));
    let mut c = p.connect();
    assert_eq!(
        request(&mut c, "/x", "gzip, deflate").header("content-encoding"),
        Some("gzip")
    );
    assert_eq!(
        request(&mut c, "/own", "gzip, deflate").header("content-encoding"),
        Some("deflate")
    );
}

#[test]
fn offload_removes_accept_encoding_before_the_server() {
    let origin = Origin::start("o");
    let p = proxy(
        &origin,
        "    compression algo gzip\n    compression offload",
        "",
    );
    let mut c = p.connect();
    request(&mut c, "/", "gzip, br");
    assert_eq!(origin.requests()[0].header("accept-encoding"), None);
    let origin2 = Origin::start("o");
    let p2 = proxy(&origin2, "    compression algo gzip", "");
    let mut c2 = p2.connect();
    request(&mut c2, "/", "gzip, br");
    assert_eq!(
        origin2.requests()[0].header("accept-encoding"),
        Some("gzip, br")
    );
}

#[test]
fn a_client_aborting_mid_response_frees_everything() {
    let big: Vec<u8> = corpus().into_iter().flat_map(|(_, b)| b).collect();
    let big = Arc::new(big);
    let b2 = big.clone();
    let origin = Origin::with_handler(
        "big",
        Arc::new(move |r: &Received| {
            if r.target == "/small" {
                return ok_response("small and fine").into();
            }
            let mut v = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                b2.len()
            )
            .into_bytes();
            v.extend_from_slice(&b2);
            Reply::Raw(v)
        }),
    );
    let p = proxy(&origin, "    compression algo gzip", "");
    for _ in 0..5 {
        let mut s = std::net::TcpStream::connect(p.addr()).unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
            .unwrap();
        let mut some = [0u8; 1000];
        let _ = s.read(&mut some).unwrap();
        drop(s); // abort after the first bytes
    }
    // The proxy keeps serving, compressed and not.
    let mut c = p.connect();
    let r = request(&mut c, "/big", "gzip");
    assert_eq!(decode("gzip", &r.body), *big);
    assert_eq!(c.get("/small").text(), "small and fine");
}

#[test]
fn a_very_low_maxcomprate_stops_compressing_new_responses() {
    let big = body_of(200_000);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let origin = fixed_origin(leak(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    )));
    // 1 kB/s: the first response (200 kB) puts the input rate far above it.
    let p = proxy(&origin, "    compression algo gzip", "    maxcomprate 1");
    let mut c = p.connect();
    let first = request(&mut c, "/", "gzip");
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &first.body), big.as_bytes());
    let second = request(&mut c, "/", "gzip");
    assert_eq!(
        second.header("content-encoding"),
        None,
        "over maxcomprate: sent uncompressed"
    );
    assert_eq!(second.text(), big);
}

#[test]
fn compression_keywords_are_checked() {
    let check = check_config;
    assert!(check("global\n    maxcomprate 100\n    maxcompcpuusage 85\n    tune.comp.maxlevel 2\nfrontend f\n    bind :1\n    compression algo gzip deflate raw-deflate identity\n    compression type text/html\n    compression offload\n    compression minsize-res 1k\n").0);
    let (ok, err) = check("frontend f\n    bind :1\n    compression algo brotli\n");
    assert!(
        !ok && err.contains("argument 1 'brotli': unknown algorithm"),
        "{err}"
    );
    let (ok, err) = check("global\n    tune.comp.maxlevel 9\n");
    assert!(!ok && err.contains("levels 0 (stored), 1 and 2"), "{err}");
    let (ok, err) = check("global\n    tune.zlib.memlevel 8\n");
    assert!(!ok && err.contains("zlib tunables do not apply"), "{err}");
    let (ok, err) = check("frontend f\n    bind :1\n    compression algo-req gzip\n");
    assert!(!ok && err.contains("not supported yet"), "{err}");
    let (ok, err) = check("frontend f\n    bind :1\n    compression frob\n");
    assert!(
        !ok && err.contains("unknown keyword 'compression frob'"),
        "{err}"
    );
}

/// A numeric `show stat` field.
fn stat(csv: &str, px: &str, sv: &str, field: &str) -> u64 {
    stat_field(csv, px, sv, field).parse().unwrap_or(0)
}

#[test]
fn counters_show_compressed_and_bypassed_bytes() {
    let big = body_of(200_000);
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let origin = fixed_origin(leak(format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    )));
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    let p = proxy(
        &origin,
        "    compression algo gzip",
        &format!(
            "    maxcomprate 1\n    stats socket {} level admin",
            sock.display()
        ),
    );
    let mut c = p.connect();
    let first = request(&mut c, "/", "gzip");
    assert_eq!(first.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &first.body), big.as_bytes());
    // Over the limit after the first piece, the running response stepped down to stored
    // blocks: it stays a valid gzip stream but barely shrinks.
    assert!(first.body.len() > big.len() / 2, "{}", first.body.len());
    let second = request(&mut c, "/", "gzip");
    assert_eq!(second.header("content-encoding"), None);
    // Counters are updated as the relay finishes, just after the client has the last byte.
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut csv = Sluice::cli(&sock, "show stat");
    while stat(&csv, "be", "BACKEND", "comp_byp") < 200_000 {
        assert!(std::time::Instant::now() < deadline, "{csv}");
        std::thread::sleep(Duration::from_millis(10));
        csv = Sluice::cli(&sock, "show stat");
    }
    for px in [("fe", "FRONTEND"), ("be", "BACKEND")] {
        assert_eq!(stat(&csv, px.0, px.1, "comp_rsp"), 1, "{csv}");
        assert_eq!(stat(&csv, px.0, px.1, "comp_in"), 200_000);
        // Everything the compressor produced is the gzip body the client received.
        assert_eq!(stat(&csv, px.0, px.1, "comp_out"), first.body.len() as u64);
        assert_eq!(
            stat(&csv, px.0, px.1, "comp_byp"),
            200_000,
            "the second response bypassed the compressor"
        );
    }
    let info = Sluice::cli(&sock, "show info");
    assert!(info.contains("CompressBpsRateLim: 1000\n"), "{info}");
    assert!(info.contains("Name: sluice\n"));
    assert!(Sluice::cli(&sock, "help").contains("show activity"));
    let activity = Sluice::cli(&sock, "show activity");
    assert!(activity.contains("accepted: 1 ["), "{activity}");
    assert!(
        activity.contains("\nloops: ") && activity.contains("\nfd_takeover: "),
        "{activity}"
    );
    assert!(Sluice::cli(&sock, "frobnicate").starts_with("Unknown command"));
}

#[test]
fn filter_compression_and_option_http_keep_alive_at_run_time() {
    let origin = corpus_origin();
    // The defaults close server connections; `option http-keep-alive` in the frontend and
    // the backend (HAProxy closes if either side says so) keeps them, so both requests of
    // the client go over one server connection.
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n{DEFAULTS}    option http-server-close\nfrontend fe\n    {{fe}}\n    option http-keep-alive\n    filter compression\n    compression algo gzip\n    compression type text/html\n    default_backend be\nbackend be\n    option http-keep-alive\n    server s1 {}\n",
        origin.addr
    ));
    let (name, body) = corpus()
        .into_iter()
        .find(|(n, b)| n.ends_with(".html") && b.len() > 1000)
        .expect("an HTML file in the corpus");
    let mut c = p.connect();
    for _ in 0..2 {
        let r = request(&mut c, &format!("/plain{name}"), "gzip");
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert_eq!(decode("gzip", &r.body), body);
    }
    assert_eq!(origin.conns(), 1, "the server connection was kept");
}

/// `filter trace` (HAProxy's debugging filter) writes a line per stream event to the
/// standard error, labelled `NAME/PROXY`: the frontend's trace hears the stream start, its
/// backend chosen, the request's and the response's heads (names in lower case), their
/// ends and the stream stop; the backend's hears the stream from its backend on; a `quiet`
/// one says nothing; `random-forwarding` is read with a warning. Compression goes on as
/// before with `filter compression` declared, which another filter makes mandatory (as in
/// HAProxy); a TCP stream is traced from start to stop.
#[test]
fn filter_trace_tells_each_stream_event() {
    let origin = corpus_origin();
    let tcp_port = free_port();
    let cfg = format!(
        "{DEFAULTS}frontend fe\n    {{fe}}\n    filter trace name FE random-forwarding\n    filter compression\n    compression algo gzip\n    default_backend be\nbackend be\n    filter trace\n    filter trace name Q quiet\n    server s1 {}\nfrontend tcpfe\n    mode tcp\n    bind 127.0.0.1:{tcp_port}\n    filter trace name T\n    default_backend tcpbe\nbackend tcpbe\n    mode tcp\n    server s1 {}\n",
        origin.addr, origin.addr
    );
    let p = Sluice::start(&cfg);
    let mut c = p.connect();
    let rsp = request(&mut c, "/plain/access.log", "gzip");
    assert_eq!(rsp.status, 200);
    assert_eq!(rsp.header("content-encoding"), Some("gzip"));
    let events = |label: &str| -> Vec<String> {
        p.stderr()
            .lines()
            .filter_map(|l| l.split_once(&format!("[{label:<20}] ")).map(|x| x.1))
            .map(|l| l.split_once("] ").map_or(l, |x| x.1).trim_end().to_string())
            .collect()
    };
    wait_until("the stream's stop traced", || {
        events("TRACE/be").iter().any(|e| e == "trace_stream_stop")
    });
    let fe = events("FE/fe");
    assert_eq!(
        fe[0],
        "filter initialized [quiet=false - fwd random=true - hexdump=false]"
    );
    let expected_start = [
        "trace_stream_start",
        "trace_stream_set_backend : backend=be",
        "trace_http_headers       : channel=REQUEST    - mode=HTTP  (backend)\tGET /plain/access.log HTTP/1.1",
        "\thost: t",
        "\taccept-encoding: gzip",
        "trace_http_headers       : channel=RESPONSE   - mode=HTTP  (backend)\tHTTP/1.1 200 OK",
    ];
    assert_eq!(&fe[1..7], &expected_start[..], "{fe:#?}");
    let tail = [
        "trace_http_end           : channel=REQUEST    - mode=HTTP  (backend)",
        "trace_http_end           : channel=RESPONSE   - mode=HTTP  (backend)",
        "trace_stream_stop",
    ];
    assert_eq!(&fe[fe.len() - 3..], &tail[..], "{fe:#?}");
    let be = events("TRACE/be");
    assert_eq!(be[1], "trace_stream_set_backend : backend=be", "{be:#?}");
    assert!(!be.iter().any(|e| e == "trace_stream_start"), "{be:#?}");
    assert_eq!(&be[be.len() - 3..], &tail[..], "{be:#?}");
    assert!(events("Q/be").is_empty());
    assert!(p
        .stderr()
        .contains("'random-forwarding' is accepted but has no effect"));
    // A TCP stream: start, backend, stop once the client leaves.
    let mut t = std::net::TcpStream::connect(("127.0.0.1", tcp_port)).unwrap();
    t.write_all(b"GET /plain/hello.txt HTTP/1.0\r\n\r\n")
        .unwrap();
    assert!(read_head(&mut t).starts_with("HTTP/1.1 200"));
    drop(t);
    wait_until("the TCP stream's stop traced", || {
        events("T/tcpfe").iter().any(|e| e == "trace_stream_stop")
    });
    let tcp = events("T/tcpfe");
    assert_eq!(
        &tcp[1..],
        [
            "trace_stream_start",
            "trace_stream_set_backend : backend=tcpbe",
            "trace_stream_stop"
        ]
    );
}

/// Compression beside another filter needs its own `filter compression` line, as in
/// HAProxy; a trace filter's unknown option is refused with its line.
#[test]
fn filter_lines_are_checked() {
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    filter trace\n    compression algo gzip\n    default_backend be\nbackend be\n    server s1 127.0.0.1:1\n"
    ));
    assert!(!ok);
    assert!(
        err.contains("c.cfg:8")
            && err.contains(
                "frontend 'fe': require an explicit filter declaration to use HTTP compression"
            ),
        "{err}"
    );
    let (ok, err) = check_config(&format!(
        "{DEFAULTS}frontend fe\n    bind 127.0.0.1:8080\n    filter trace bogus\n    default_backend be\nbackend be\n    server s1 127.0.0.1:1\n"
    ));
    assert!(!ok);
    assert!(err.contains("c.cfg:8") && err.contains("'bogus'"), "{err}");
}
