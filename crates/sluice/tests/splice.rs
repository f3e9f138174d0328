//! Kernel splicing (`option splice-response`, `option splice-request`, `option
//! splice-auto`): response and request bodies of known length move between client and
//! server through a pipe, byte for byte, and the pipes are counted (`show info`'s PipesUsed
//! and PipesFree) and given back.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

/// A body of `n` bytes no two neighbouring windows of which look alike.
fn body(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9u32;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn response(body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

use common::show_info_number as info;

/// One worker: its pipes are the ones `show info` counts as pooled for the next body.
fn proxy(origin: &Origin, option: &str, sock: &Path) -> Sluice {
    Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}{option}frontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        sock.display(),
        origin.addr
    ))
}

/// Reads one response with a `Content-Length` body from `c`: its head and its body.
fn read_response(c: &mut TcpStream) -> (String, Vec<u8>) {
    let head = read_head(c);
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_string)
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    (head, body)
}

#[test]
fn bodies_are_spliced_byte_for_byte_and_the_pipe_kept_for_the_next() {
    let big = body(3 << 20);
    let small = body(70_000);
    let (b1, b2) = (big.clone(), small.clone());
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r| match r.target.as_str() {
            "/big" => Reply::Raw(response(&b1)),
            _ => Reply::Raw(response(&b2)),
        }),
    );
    let (_d, sock) = cli_dir();
    let p = proxy(&origin, "    option splice-response\n", &sock);
    assert_eq!(info(&sock, "PipesFree"), 0);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    for (path, want) in [("/big", &big), ("/small", &small), ("/big", &big)] {
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let (head, got) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(got == *want, "{path}: the body differs");
    }
    // One pipe served the three bodies, one after the other, and waits for the next.
    assert_eq!(info(&sock, "PipesUsed"), 0);
    assert_eq!(info(&sock, "PipesFree"), 1);
    assert!(info(&sock, "Maxpipes") > 0);
}

#[test]
fn without_the_option_nothing_is_spliced() {
    let big = body(1 << 20);
    let b = big.clone();
    let origin = Origin::with_handler("o", Arc::new(move |_| Reply::Raw(response(&b))));
    let (_d, sock) = cli_dir();
    let p = proxy(&origin, "", &sock);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert!(read_response(&mut c).1 == big);
    assert_eq!(info(&sock, "PipesFree"), 0);
    // `nosplice` wins over the proxies' options.
    let (_d2, sock2) = cli_dir();
    let p2 = Sluice::start(&format!(
        "global\n    nosplice\n    stats socket {}\n{DEFAULTS}    option splice-auto\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {}\n",
        sock2.display(),
        origin.addr
    ));
    assert!(get(p2.addr(), "/").status == 200);
    assert_eq!(info(&sock2, "PipesFree"), 0);
}

#[test]
fn a_client_or_a_server_leaving_mid_body_leaves_no_pipe_in_use() {
    let big = body(8 << 20);
    let b = big.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r| match r.target.as_str() {
            // Announces the whole body, sends a tenth of it, closes.
            "/cut" => {
                let mut r = response(&b);
                r.truncate(r.len() - b.len() + b.len() / 10);
                Reply::RawThenClose(r)
            }
            _ => Reply::Raw(response(&b)),
        }),
    );
    let (_d, sock) = cli_dir();
    let p = proxy(&origin, "    option splice-auto\n", &sock);
    // A client that reads a little and goes.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"GET /all HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 100_000];
    c.read_exact(&mut first).unwrap();
    drop(c);
    wait_until("the client's pipe given up", || {
        info(&sock, "PipesUsed") == 0
    });
    // A server that stops short: the client gets what came, then the connection closes.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"GET /cut HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(got.len() < big.len(), "{}", got.len());
    assert!(got.starts_with(b"HTTP/1.1 200"));
    wait_until("the server's pipe given up", || {
        info(&sock, "PipesUsed") == 0
    });
    // And the proxy splices the next one whole.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"GET /all HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert!(read_response(&mut c).1 == big);
}

/// `mode tcp` with `option splice-auto`: both directions through pipes, byte for byte, with
/// the half-close passed on; the two pipes are kept once the connection is done.
#[test]
fn a_tcp_stream_is_spliced_both_ways() {
    // A server that reads until the client's half-close, then sends it all back reversed.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut got = Vec::new();
            if c.read_to_end(&mut got).is_err() {
                continue;
            }
            got.reverse();
            let _ = c.write_all(&got);
        }
    });
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n    option splice-auto\nlisten l\n    {{fe}}\n    server s1 {server}\n",
        sock.display()
    ));
    let sent = body(5 << 20);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut writer = c.try_clone().unwrap();
    let to_send = sent.clone();
    let sender = std::thread::spawn(move || {
        writer.write_all(&to_send).unwrap();
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    sender.join().unwrap();
    let mut want = sent;
    want.reverse();
    assert!(back == want, "{} bytes back", back.len());
    wait_until("both pipes back in the pool", || {
        info(&sock, "PipesUsed") == 0 && info(&sock, "PipesFree") == 2
    });
}

/// Request bodies of known length are spliced to the server (`option splice-request`):
/// the server gets each byte for byte, on one keep-alive connection with one pipe reused,
/// and the frontend counts the spliced bytes it received (`bin`) as copied ones.
#[test]
fn upload_bodies_are_spliced_byte_for_byte() {
    let big = body(3 << 20);
    let small = body(70_000);
    let (b1, b2) = (big.clone(), small.clone());
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r| {
            let want = if r.target == "/big" { &b1 } else { &b2 };
            let verdict: &[u8] = if r.body == *want { b"same" } else { b"diff" };
            Reply::Raw(response(verdict))
        }),
    );
    let (_d, sock) = cli_dir();
    let p = proxy(&origin, "    option splice-request\n", &sock);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    let bin = || -> usize {
        let csv = Sluice::cli(&sock, "show stat");
        stat_field(&csv, "fe", "FRONTEND", "bin").parse().unwrap()
    };
    let mut sent = 0;
    for (path, up) in [("/big", &big), ("/small", &small), ("/big", &big)] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            up.len()
        );
        c.write_all(head.as_bytes()).unwrap();
        c.write_all(up).unwrap();
        sent += up.len();
        let (head, got) = read_response(&mut c);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(got, b"same", "{path}");
    }
    // (`bin` counts heads as HAProxy does, not as their bytes: the bodies are a floor. It
    // is counted as each transaction ends, which may follow its response.)
    wait_until("the bodies counted in bin", || bin() > sent);
    assert_eq!(info(&sock, "PipesUsed"), 0);
    assert_eq!(info(&sock, "PipesFree"), 1);
}

/// While an upload is spliced, the server is still heard: an early final answer (a 413)
/// reaches the client at once and ends the upload, its pipe given back; an interim
/// `100 Continue` does not stop it, and the body arrives whole.
#[test]
fn a_spliced_upload_hears_the_servers_early_answer() {
    let refusing = early_answering_origin(
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope",
    );
    // (What the origin tells of its 100 is not needed here.)
    let continuing = continuing_origin(std::sync::mpsc::channel().0);
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    nbthread 1\n    stats socket {}\n{DEFAULTS}    option splice-request\nfrontend fe\n    {{fe}}\n    use_backend cont if {{ path /cont }}\n    default_backend be\nbackend be\n    server s {refusing}\nbackend cont\n    server s {continuing}\n",
        sock.display(),
    ));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
        .unwrap();
    c.write_all(&[b'a'; 10_000]).unwrap();
    let (head, got) = read_response(&mut c);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert_eq!(got, b"nope");
    // (Given back to the pool, or closed if it held bytes the server never took.)
    wait_until("the pipe given back", || info(&sock, "PipesUsed") == 0);
    // The second server says 100 at once, then reads the whole body.
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    let up = body(2 << 20);
    c.write_all(
        format!(
            "POST /cont HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            up.len()
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(&up).unwrap();
    let mut head = read_head(&mut c);
    if head.starts_with("HTTP/1.1 100") {
        head = read_head(&mut c);
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut said = vec![0u8; format!("got {}", up.len()).len()];
    c.read_exact(&mut said).unwrap();
    assert_eq!(said, format!("got {}", up.len()).into_bytes());
    assert_eq!(info(&sock, "PipesUsed"), 0);
}

/// A client that leaves in the middle of a spliced upload leaves no pipe in use, and the
/// next upload is spliced whole.
#[test]
fn a_client_leaving_mid_upload_leaves_no_pipe_in_use() {
    let up = body(1 << 20);
    let want = up.clone();
    let origin = Origin::with_handler(
        "o",
        Arc::new(move |r| Reply::Raw(response(if r.body == want { b"same" } else { b"diff" }))),
    );
    let (_d, sock) = cli_dir();
    let p = proxy(&origin, "    option splice-auto\n", &sock);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 8000000\r\n\r\n")
        .unwrap();
    c.write_all(&up).unwrap();
    drop(c);
    // (A pipe left holding bytes is closed, not kept.)
    wait_until("the pipe given up", || info(&sock, "PipesUsed") == 0);
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(
        format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            up.len()
        )
        .as_bytes(),
    )
    .unwrap();
    c.write_all(&up).unwrap();
    assert_eq!(read_response(&mut c).1, b"same");
    assert_eq!(info(&sock, "PipesUsed"), 0);
    assert_eq!(info(&sock, "PipesFree"), 1);
}

/// A WebSocket's tunnel, once the server's 101 opened it, is spliced as a `mode tcp`
/// stream is: bytes both ways, byte for byte, and two pipes kept after.
#[test]
fn an_opened_tunnel_is_spliced() {
    let server = tunnel_echo_server(Arc::new(std::sync::Mutex::new(Vec::new())));
    let (_d, sock) = cli_dir();
    let p = Sluice::start(&format!(
        "global\n    stats socket {}\n{DEFAULTS}    option splice-auto\n    timeout tunnel 30s\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    server s1 {server}\n",
        sock.display()
    ));
    let mut c = TcpStream::connect(p.addr()).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(b"GET /chat HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        .unwrap();
    let head = read_head(&mut c);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let sent = body(2 << 20);
    let mut writer = c.try_clone().unwrap();
    let to_send = sent.clone();
    let sender = std::thread::spawn(move || writer.write_all(&to_send).unwrap());
    let mut back = vec![0u8; sent.len()];
    c.read_exact(&mut back).unwrap();
    sender.join().unwrap();
    assert!(back == sent, "the echo differs");
    drop(c);
    wait_until("both pipes back in the pool", || {
        info(&sock, "PipesUsed") == 0 && info(&sock, "PipesFree") == 2
    });
}
