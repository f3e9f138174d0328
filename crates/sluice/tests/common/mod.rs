//! Test harness: real origin servers on 127.0.0.1 with kernel-assigned ports that record
//! what reaches them, the real `sluice` binary started on a generated configuration, and
//! raw-TCP HTTP clients.
#![allow(dead_code)]

mod ca;
#[allow(unused_imports)]
pub use ca::Ca;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A request as an origin received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub conn: usize,
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The trailer fields of a chunked body.
    pub trailers: Vec<(String, String)>,
    /// The head exactly as received.
    pub raw_head: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn header_count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }
}

/// What an origin does with a request.
pub enum Reply {
    /// Send these bytes as the response.
    Raw(Vec<u8>),
    /// Wait, then send.
    Delayed(Duration, Vec<u8>),
    /// Close the connection without answering.
    Close,
    /// Send these pieces one by one with a pause between them (a slow server).
    Dripped(Vec<Vec<u8>>, Duration),
    /// Send, then close the connection (a server retiring an idle connection).
    RawThenClose(Vec<u8>),
}

pub type Handler = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

pub fn ok_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{}",
        body.len(),
        body
    )
    .into_bytes()
}

/// An origin server answering on its own thread per connection.
pub struct Origin {
    pub addr: SocketAddr,
    pub name: String,
    pub received: Arc<Mutex<Vec<Received>>>,
    pub connections: Arc<AtomicUsize>,
    /// Times a request arrived while the previous one on the same connection was unanswered.
    pub overlaps: Arc<AtomicUsize>,
}

impl Origin {
    /// An origin answering `200` with body `"{name} {target}"`.
    pub fn start(name: &str) -> Origin {
        let n = name.to_string();
        Origin::with_handler(
            name,
            Arc::new(move |r: &Received| ok_response(&format!("{n} {}", r.target)).into()),
        )
    }

    pub fn with_handler(name: &str, handler: Handler) -> Origin {
        Origin::serving(name, TcpListener::bind("127.0.0.1:0").unwrap(), handler)
    }

    /// An origin as [`Origin::start`] on a listener the test bound itself.
    pub fn on(name: &str, listener: TcpListener) -> Origin {
        let n = name.to_string();
        Origin::serving(
            name,
            listener,
            Arc::new(move |r: &Received| ok_response(&format!("{n} {}", r.target)).into()),
        )
    }

    fn serving(name: &str, listener: TcpListener, handler: Handler) -> Origin {
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let (r, c, o) = (received.clone(), connections.clone(), overlaps.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let id = c.fetch_add(1, Ordering::SeqCst);
                let (r, o, h) = (r.clone(), o.clone(), handler.clone());
                std::thread::spawn(move || serve_origin_conn(stream, id, r, o, h));
            }
        });
        Origin {
            addr,
            name: name.to_string(),
            received,
            connections,
            overlaps,
        }
    }

    /// An origin answering every request with a body of `size` bytes of `x`, with its length.
    pub fn sized(size: usize) -> Origin {
        Origin::with_handler(
            "sized",
            Arc::new(move |_: &Received| {
                let mut raw =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n").into_bytes();
                raw.resize(raw.len() + size, b'x');
                Reply::Raw(raw)
            }),
        )
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    pub fn conns(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl From<Vec<u8>> for Reply {
    fn from(v: Vec<u8>) -> Reply {
        Reply::Raw(v)
    }
}

fn serve_origin_conn(
    stream: TcpStream,
    id: usize,
    rec: Arc<Mutex<Vec<Received>>>,
    overlaps: Arc<AtomicUsize>,
    h: Handler,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let Some(req) = read_request(&mut reader, id) else {
            return;
        };
        // Anything already buffered behind this request arrived before we answered it.
        if !reader.buffer().is_empty() {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
        rec.lock().unwrap().push(req.clone());
        match h(&req) {
            Reply::Raw(bytes) => {
                if writer.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::Delayed(d, bytes) => {
                std::thread::sleep(d);
                if writer.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::Close => return,
            Reply::RawThenClose(bytes) => {
                let _ = writer.write_all(&bytes);
                return;
            }
            Reply::Dripped(pieces, pause) => {
                for p in pieces {
                    if writer.write_all(&p).is_err() {
                        return;
                    }
                    std::thread::sleep(pause);
                }
            }
        }
    }
}

fn read_request(r: &mut BufReader<TcpStream>, conn: usize) -> Option<Received> {
    let mut raw_head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        raw_head.push_str(&line);
        if line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut lines = raw_head.lines();
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.to_string(), v.trim().to_string()))
        })
        .collect();
    let find = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut trailers = Vec::new();
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(r, &mut trailers)?
    } else if let Some(n) = find("content-length") {
        let mut b = vec![0; n.parse().ok()?];
        r.read_exact(&mut b).ok()?;
        b
    } else {
        Vec::new()
    };
    Some(Received {
        conn,
        method,
        target,
        headers,
        body,
        trailers,
        raw_head,
    })
}

fn read_chunked<R: BufRead>(r: &mut R, trailers: &mut Vec<(String, String)>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let size = usize::from_str_radix(line.trim_end().split(';').next()?, 16).ok()?;
        if size == 0 {
            loop {
                let mut t = String::new();
                r.read_line(&mut t).ok()?;
                if t == "\r\n" || t.is_empty() {
                    return Some(body);
                }
                if let Some((n, v)) = t.split_once(':') {
                    trailers.push((n.to_string(), v.trim().to_string()));
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..]).ok()?;
        let mut crlf = [0; 2];
        r.read_exact(&mut crlf).ok()?;
    }
}

/// A running sluice process, killed on drop.
pub struct Sluice {
    pub child: Child,
    /// Frontend addresses in the order of the `{fe}` placeholders.
    pub addrs: Vec<SocketAddr>,
    pub stderr_path: std::path::PathBuf,
    _dir: TempDir,
}

pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "sluice-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

/// A directory for a test's CLI socket, and the socket's path in it.
pub fn cli_dir() -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new();
    let sock = dir.0.join("cli.sock");
    (dir, sock)
}

/// A self-signed certificate for `localhost` and its key, as one PEM file in `dir`.
pub fn self_signed(dir: &TempDir) -> String {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    dir.write(
        "site.pem",
        &format!("{}{}", c.cert.pem(), c.signing_key.serialize_pem()),
    )
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn sluice_bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

impl Sluice {
    /// Starts sluice on `config`. Each `{fe}` in it becomes `bind fd@N` for a listening socket
    /// this test created on 127.0.0.1 port 0 and passes down (race-free ports); each `{fd}`
    /// becomes `fd@N` alone. `addrs` lists them in order.
    pub fn start(config: &str) -> Sluice {
        Sluice::start_limited(config, None)
    }

    /// Like `start`, with the descriptor limit (`ulimit -n`) set for the process.
    pub fn start_limited(config: &str, nofile: Option<u64>) -> Sluice {
        Sluice::start_with(config, nofile, &[])
    }

    /// Like `start`, with more command-line arguments after `-f FILE` (where `{fd}` is
    /// replaced as in the configuration, after it).
    pub fn start_args(config: &str, args: &[String]) -> Sluice {
        Sluice::start_with(config, None, args)
    }

    /// Starts another proxy program on `config` the same way (its `{fe}` sockets passed
    /// down), for recordings to compare sluice with: HAProxy (`haproxy -db`). Its sockets
    /// listen before it starts, so it is usable at once; nothing waits for it to say so.
    pub fn start_program(program: &str, args: &[&str], config: &str) -> Sluice {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Sluice::spawn(program, config, None, &args, false)
    }

    fn start_with(config: &str, nofile: Option<u64>, args: &[String]) -> Sluice {
        Sluice::spawn(sluice_bin(), config, nofile, args, true)
    }

    fn spawn(
        program: &str,
        config: &str,
        nofile: Option<u64>,
        args: &[String],
        wait: bool,
    ) -> Sluice {
        let dir = TempDir::new();
        let mut listeners = Vec::new();
        let mut text = String::new();
        let mut rest = config;
        // `{fe}` becomes `bind fd@N`, `{fd}` just `fd@N` (for a `stats socket`).
        loop {
            let next = [rest.find("{fe}"), rest.find("{fd}")]
                .into_iter()
                .flatten()
                .min();
            let Some(i) = next else { break };
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            text.push_str(&rest[..i]);
            let bind = if &rest[i..i + 4] == "{fe}" {
                "bind "
            } else {
                ""
            };
            text.push_str(&format!("{bind}fd@{}", l.as_raw_fd()));
            rest = &rest[i + 4..];
            listeners.push(l);
        }
        text.push_str(rest);
        // `{fd}` in an argument (a master CLI, `-S {fd}`) too.
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if !a.contains("{fd}") {
                    return a.clone();
                }
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                let a = a.replace("{fd}", &format!("fd@{}", l.as_raw_fd()));
                listeners.push(l);
                a
            })
            .collect();
        let path = dir.write("test.cfg", &text);
        let stderr_path = dir.0.join("stderr.log");
        let fds: Vec<i32> = listeners.iter().map(|l| l.as_raw_fd()).collect();
        let mut cmd = Command::new(program);
        cmd.arg("-f").arg(&path).args(args).stdin(Stdio::null());
        cmd.stdout(std::fs::File::create(dir.0.join("stdout.log")).unwrap());
        cmd.stderr(std::fs::File::create(&stderr_path).unwrap());
        // SAFETY: only async-signal-safe fcntl calls run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(n) = nofile {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                for &fd in &fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start sluice");
        let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        drop(listeners);
        let mut s = Sluice {
            child,
            addrs,
            stderr_path,
            _dir: dir,
        };
        if wait {
            s.wait_ready();
        }
        s
    }

    /// Polls until the process says it is listening, failing if it exits first.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sluice exited ({status}): {}", self.stderr());
            }
            if self.stderr().contains("listening on") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not start: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// What the process wrote on standard output so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.stderr_path.with_file_name("stdout.log")).unwrap_or_default()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn connect(&self) -> Conn {
        Conn::new(self.addr())
    }

    /// Sends one command to the CLI socket at `path` and returns the answer.
    pub fn cli(path: &std::path::Path, cmd: &str) -> String {
        let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
        s.write_all(format!("{cmd}\n").as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed response as a client received it.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status line's version (`HTTP/1.1`).
    pub version: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A raw client connection.
pub struct Conn {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.set_write_timeout(Some(TIMEOUT)).unwrap();
        Conn {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Reads one response; `head` says it answers a HEAD request.
    pub fn response_for(&mut self, head: bool) -> Option<Response> {
        let mut status_line = String::new();
        if self.reader.read_line(&mut status_line).ok()? == 0 {
            return None;
        }
        let status: u16 = status_line.split(' ').nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            self.reader.read_line(&mut l).ok()?;
            let l = l.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                break;
            }
            let (n, v) = l.split_once(':')?;
            headers.push((n.to_string(), v.trim().to_string()));
        }
        let find = |n: &str| {
            headers
                .iter()
                .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        let body = if head || status == 204 || status == 304 || (100..200).contains(&status) {
            Vec::new()
        } else if find("transfer-encoding").is_some() {
            read_chunked(&mut self.reader, &mut Vec::new())?
        } else if let Some(n) = find("content-length") {
            let mut b = vec![0; n.parse().ok()?];
            self.reader.read_exact(&mut b).ok()?;
            b
        } else {
            let mut b = Vec::new();
            self.reader.read_to_end(&mut b).ok()?;
            b
        };
        Some(Response {
            version: status_line
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_string(),
            status,
            headers,
            body,
        })
    }

    pub fn response(&mut self) -> Response {
        self.response_for(false).expect("a response")
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.send(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes());
        self.response()
    }

    /// True when the server has closed the connection (EOF with nothing more to read).
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.reader.read(&mut b) {
            Ok(n) => n == 0,
            // Still open when nothing came within `TIMEOUT`; a reset is a close.
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

/// An address on 127.0.0.1 that refuses connections for as long as the returned socket
/// lives: its port is bound but not listening, so neither another test's listener nor an
/// outgoing connection takes it meanwhile (a listener bound and dropped leaves a port any
/// test may be given next, and a "dead" server then answers).
pub fn refused_addr() -> (socket2::Socket, SocketAddr) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    (s, addr)
}

/// A free port on 127.0.0.1 for an address sluice binds itself (where it cannot take an
/// inherited socket). It is chosen below the kernel's ephemeral range (32768 and up), so the
/// many connections the tests open never take it between this check and sluice's bind; the
/// tests of one process get different candidates.
pub fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let seed = std::process::id() as usize * 7919;
    loop {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10000 + (seed + k * 104_729) % 22_000;
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
}

/// Sends `bytes` on a fresh connection to `addr` and reads what comes back until the other
/// side closes (at most [`TIMEOUT`] between reads).
pub fn read_to_close(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    c.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

/// Waits until `f` holds, failing after [`TIMEOUT`] with what was awaited.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request on a fresh connection; returns the response.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    Conn::new(addr).get(path)
}

/// Sends raw bytes on a fresh connection and returns the first response and whether the
/// connection was then closed.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> (Option<Response>, bool) {
    let mut c = Conn::new(addr);
    c.send(bytes);
    let r = c.response_for(false);
    let closed = c.is_closed();
    (r, closed)
}

/// Runs `sluice -c` on a configuration text: (valid, stderr).
pub fn check_config(text: &str) -> (bool, String) {
    check_config_bytes(text.as_bytes())
}

/// Runs `sluice -c` on raw configuration bytes: (valid, stderr with the temporary path shown
/// as `c.cfg`).
pub fn check_config_bytes(content: &[u8]) -> (bool, String) {
    let dir = TempDir::new();
    let path = dir.0.join("c.cfg");
    std::fs::write(&path, content).unwrap();
    let path = path.to_string_lossy().into_owned();
    let out = Command::new(sluice_bin())
        .args(["-c", "-f", &path])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).replace(&path, "c.cfg"),
    )
}

/// The value of `field` in a `show stat` CSV row whose first cells are `px`,`sv`.
pub fn stat_field(csv: &str, px: &str, sv: &str, field: &str) -> String {
    let header: Vec<&str> = csv
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let col = header
        .iter()
        .position(|h| *h == field)
        .unwrap_or_else(|| panic!("no column {field}"));
    let row = csv
        .lines()
        .find(|l| l.starts_with(&format!("{px},{sv},")))
        .unwrap_or_else(|| panic!("no row {px},{sv} in {csv}"));
    row.split(',').nth(col).unwrap_or("").to_string()
}

/// The defaults used by most tests.
pub const DEFAULTS: &str = "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    timeout server 30s\n";

/// Reads a response head byte by byte, so that nothing after it is consumed.
pub fn read_head(s: &mut TcpStream) -> String {
    let head = try_read_head(s).expect("connection closed in the head");
    String::from_utf8(head).unwrap()
}

/// Reads a message head (up to its empty line) byte by byte, so that nothing after it is
/// consumed; `None` when the peer closes (or fails) first.
pub fn try_read_head(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return None,
        }
    }
    Some(head)
}

/// Sends each of `msgs` through an open tunnel to an echoing peer and reads it back, then
/// half-closes; returns what the peer sent after that, up to its close.
pub fn echo_through(s: &mut TcpStream, msgs: &[&[u8]]) -> Vec<u8> {
    for msg in msgs {
        s.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).unwrap();
        assert_eq!(&back, msg);
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    rest
}

/// A server that opens tunnels and echoes through them: it answers an Upgrade request with
/// 101, and a CONNECT with 200 (as a forward proxy would, echoing instead of connecting;
/// a CONNECT to `refused.test` gets 403), then echoes bytes until EOF, after which it
/// writes "bye" and closes. Other requests get 200. Records request heads.
pub fn tunnel_echo_server(heads: Arc<Mutex<Vec<String>>>) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let heads = heads.clone();
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = std::io::BufReader::new(s);
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    heads.lock().unwrap().push(head.clone());
                    let lower = head.to_ascii_lowercase();
                    if lower.starts_with("connect refused.test") {
                        w.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 7\r\n\r\nrefused")
                            .unwrap();
                        continue;
                    }
                    let opens: &[u8] = if lower.starts_with("connect ") {
                        b"HTTP/1.1 200 Connection established\r\n\r\n"
                    } else if lower.contains("upgrade: websocket") && !lower.starts_with("get /no")
                    {
                        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
                    } else {
                        b""
                    };
                    if !opens.is_empty() {
                        w.write_all(opens).unwrap();
                        let mut buf = [0u8; 4096];
                        loop {
                            match r.read(&mut buf) {
                                Ok(0) | Err(_) => {
                                    let _ = w.write_all(b"bye");
                                    return;
                                }
                                Ok(n) => {
                                    if w.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    }
                    w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
                        .unwrap();
                }
            });
        }
    });
    addr
}

/// What HAProxy 2.6 counts of an HTTP/1.1 message in `bin`, `bout`, `%B` and `%U` (checked
/// side by side with HAProxy 2.6.12: a 47-byte request counts 40, a 96-byte response 84):
/// its HTX size, 20 bytes for the start line's structure plus the line's three parts
/// without the spaces between them, each header's name and value (Connection's excepted),
/// one byte for the end of headers, then the body.
pub fn haproxy_size(msg: &[u8]) -> u64 {
    let at = msg
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head");
    let head = std::str::from_utf8(&msg[..at]).unwrap();
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap();
    let mut size = 20 + start.len() as u64 - start.matches(' ').count().min(2) as u64;
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        if !name.eq_ignore_ascii_case("connection") {
            size += (name.len() + value.trim().len()) as u64;
        }
    }
    size + 1 + (msg.len() - at - 4) as u64
}

/// A UDP port for a QUIC listener, chosen by the kernel: the socket holding it joins the
/// port's SO_REUSEPORT group, so the proxy can bind beside it; drop it once the proxy
/// listens (until then no datagram is sent to the port).
pub fn quic_port() -> (socket2::Socket, u16) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    s.set_reuse_port(true).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    (s, port)
}

/// Sends `requests` (see `tests/clients/h3client.py`) over one HTTP/3 connection to
/// 127.0.0.1:`port` with aioquic, and returns the results.
pub fn h3_requests(port: u16, requests: &serde_json::Value) -> Vec<serde_json::Value> {
    let child = h3_spawn(port, requests);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "h3client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("h3client's JSON")
}

/// Starts the HTTP/3 client on `requests` and leaves it running (for a client that
/// stalls: kill it when done).
pub fn h3_spawn(port: u16, requests: &serde_json::Value) -> Child {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/h3client.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg("127.0.0.1")
        .arg(port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(requests.to_string().as_bytes())
        .unwrap();
    child
}

/// A field of an HTTP/3 result (`h3_requests`), if the response had it.
pub fn h3_field(result: &serde_json::Value, name: &str) -> Option<String> {
    result["headers"].as_array()?.iter().find_map(|f| {
        (f[0].as_str()? == name).then(|| f[1].as_str().unwrap_or_default().to_string())
    })
}

/// A server that answers as soon as it has a request's head, whatever its body: `answer`,
/// then it keeps the connection without reading more until the peer closes it.
pub fn early_answering_origin(answer: &'static [u8]) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                if try_read_head(&mut s).is_none() {
                    return;
                }
                let _ = s.write_all(answer);
                // Held open, unread, until the proxy closes it (bounded by a timeout).
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut sink = [0u8; 1];
                let _ = s.peek(&mut sink);
            });
        }
    });
    addr
}

/// A server that says `100 Continue` at once (and tells `said`), then reads the whole
/// announced body and answers how much it got.
pub fn continuing_origin(said: std::sync::mpsc::Sender<()>) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let said = said.clone();
            std::thread::spawn(move || {
                let Some(head) = try_read_head(&mut s) else {
                    return;
                };
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
                let _ = said.send(());
                let mut body = vec![0u8; len];
                if s.read_exact(&mut body).is_err() {
                    return;
                }
                let msg = format!("got {len}");
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{msg}",
                        msg.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    addr
}

/// `show info`'s `NAME: VALUE` as a number (`u64::MAX` when it is not there).
pub fn show_info_number(sock: &std::path::Path, name: &str) -> u64 {
    Sluice::cli(sock, "show info")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX)
}
