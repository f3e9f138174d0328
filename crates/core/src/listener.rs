//! Listening sockets and accepting: `bind` and `maxconn` (global and per frontend).
//!
//! Sockets are opened once by the main thread (or adopted with `fd@N`); every worker then
//! registers its own duplicate of each listening socket in its own event loop and accepts
//! from it, so an accepted connection is born on the worker that will serve it. `maxconn`
//! is enforced with semaphores taken *before* accepting: at the limit, workers simply stop
//! calling accept and the kernel's backlog absorbs new connections; no busy loop.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_config::{Keyword, KwError, Scope};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::one_arg;
use crate::config::{GlobalConf, ProxyConf};
use crate::threads::Worker;

/// One `bind` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindSpec {
    Addr(SocketAddr),
    /// An already-listening socket inherited from the parent process.
    Fd(RawFd),
}

impl std::fmt::Display for BindSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindSpec::Addr(a) => write!(f, "{a}"),
            BindSpec::Fd(n) => write!(f, "fd@{n}"),
        }
    }
}

/// A `bind` line's address and the workers allowed to accept on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub spec: BindSpec,
    /// `thread N[-M]` (1-based, inclusive); `None`: every worker.
    pub threads: Option<(usize, usize)>,
}

impl Bind {
    /// Whether worker `tid` (0-based) accepts on this bind.
    pub fn on_thread(&self, tid: usize) -> bool {
        self.threads
            .is_none_or(|(a, b)| (a..=b).contains(&(tid + 1)))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenConf {
    pub binds: Vec<Bind>,
    pub maxconn: Option<usize>,
}

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "maxconn",
    scope: Scope::GLOBAL,
    help: "maxconn N: maximum concurrent client connections for the whole process",
    parse: |g, a| count_arg(a).map(|n| g.maxconn = Some(n)),
}];

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "bind",
        scope: Scope::FRONTEND,
        help: "bind ADDR:PORT[,...] | fd@N [thread N[-M]]: where the frontend accepts connections, and on which workers",
        parse: add_bind,
    },
    Keyword {
        name: "maxconn",
        scope: Scope::FE,
        help: "maxconn N: maximum concurrent connections on this frontend",
        parse: |c, a| count_arg(a).map(|n| c.listen.maxconn = Some(n)),
    },
];

fn count_arg(a: &[String]) -> Result<usize, KwError> {
    let v = one_arg(a, "a positive integer")?;
    v.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| KwError::bad(1, v, "expects a positive integer"))
}

/// Bind options HAProxy has that sluice does not implement yet.
const PENDING_BIND_OPTIONS: &[&str] = &[
    "ssl",
    "crt",
    "alpn",
    "name",
    "process",
    "shards",
    "accept-proxy",
    "v4v6",
    "v6only",
    "transparent",
    "interface",
    "backlog",
    "defer-accept",
    "tfo",
    "user",
    "group",
    "mode",
    "level",
];

pub(crate) fn add_bind(c: &mut ProxyConf, args: &[String]) -> Result<(), KwError> {
    let [addrs, opts @ ..] = args else {
        return Err(KwError::Missing(
            "an address (ADDR:PORT, [v6]:PORT, *:PORT, :PORT or fd@N)",
        ));
    };
    let mut threads = None;
    let mut i = 0;
    while i < opts.len() {
        let o = opts[i].as_str();
        match o {
            "thread" => {
                let v = opts
                    .get(i + 1)
                    .ok_or(KwError::Missing("a thread number or range after 'thread'"))?;
                threads = Some(parse_threads(v).map_err(|e| KwError::bad(i + 3, v, e))?);
                i += 2;
            }
            _ if PENDING_BIND_OPTIONS.contains(&o) => {
                return Err(KwError::Invalid(format!(
                    "bind option '{o}': not supported yet"
                )))
            }
            _ => return Err(KwError::bad(i + 2, o, "unknown bind option")),
        }
    }
    for a in addrs.split(',') {
        let spec = parse_bind(a).map_err(|e| KwError::bad(1, a, e))?;
        c.listen.binds.push(Bind { spec, threads });
    }
    Ok(())
}

/// `N` or `N-M`, 1-based.
fn parse_threads(v: &str) -> Result<(usize, usize), String> {
    let (a, b) = v.split_once('-').unwrap_or((v, v));
    let a: usize = a
        .parse()
        .map_err(|_| "expects a thread number or range (1-based)".to_string())?;
    let b: usize = b
        .parse()
        .map_err(|_| "expects a thread number or range (1-based)".to_string())?;
    if a == 0 || b < a {
        return Err("expects a thread number or range (1-based, ascending)".into());
    }
    Ok((a, b))
}

fn parse_bind(a: &str) -> Result<BindSpec, String> {
    if let Some(n) = a.strip_prefix("fd@") {
        return n
            .parse::<RawFd>()
            .ok()
            .filter(|&n| n >= 0)
            .map(BindSpec::Fd)
            .ok_or_else(|| "fd@ expects a file descriptor number".into());
    }
    if let Ok(addr) = a.parse::<SocketAddr>() {
        return Ok(BindSpec::Addr(addr));
    }
    let (host, port) = a.rsplit_once(':').ok_or("expects ADDR:PORT")?;
    let port: u16 = port.parse().map_err(|_| format!("invalid port '{port}'"))?;
    let ip = match host {
        "" | "*" | "0.0.0.0" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        h => h
            .parse::<IpAddr>()
            .map_err(|_| format!("invalid address '{h}' (names are not accepted here)"))?,
    };
    Ok(BindSpec::Addr(SocketAddr::new(ip, port)))
}

/// Why a listening socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("fd@{fd}: {reason}")]
    Fd { fd: RawFd, reason: String },
}

/// Opens (or adopts) the listening socket for `spec`.
pub(crate) fn open(spec: &BindSpec, backlog: usize) -> Result<std::net::TcpListener, ListenError> {
    match *spec {
        BindSpec::Addr(addr) => {
            let mk = || -> std::io::Result<std::net::TcpListener> {
                let sock = socket2::Socket::new(
                    socket2::Domain::for_address(addr),
                    socket2::Type::STREAM,
                    None,
                )?;
                sock.set_reuse_address(true)?;
                if addr.is_ipv6() {
                    sock.set_only_v6(true)?;
                }
                sock.bind(&addr.into())?;
                sock.listen(backlog.min(65535) as i32)?;
                sock.set_nonblocking(true)?;
                Ok(sock.into())
            };
            mk().map_err(|source| ListenError::Bind { addr, source })
        }
        BindSpec::Fd(fd) => {
            let fail = |reason: String| ListenError::Fd { fd, reason };
            // SAFETY: the descriptor is only borrowed for the duration of these checks; an
            // invalid number makes the syscalls fail with EBADF, which is reported.
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            let sock = socket2::SockRef::from(&borrowed);
            match sock.is_listener() {
                Ok(true) => {}
                Ok(false) => return Err(fail("not a listening socket".into())),
                Err(e) => return Err(fail(e.to_string())),
            }
            if sock.r#type().map_err(|e| fail(e.to_string()))? != socket2::Type::STREAM {
                return Err(fail("not a stream socket".into()));
            }
            sock.set_nonblocking(true)
                .map_err(|e| fail(e.to_string()))?;
            // SAFETY: the checks above prove `fd` is an open listening TCP socket; the process
            // takes ownership of it here, once (each `bind fd@N` line is adopted once).
            Ok(unsafe { std::net::TcpListener::from_raw_fd(fd) })
        }
    }
}

/// The right to hold one client connection under the global and frontend `maxconn`.
/// Released when the connection ends.
#[derive(Debug)]
pub struct Slot {
    _global: OwnedSemaphorePermit,
    _frontend: OwnedSemaphorePermit,
}

/// Connection-count limits shared by all workers.
#[derive(Debug)]
pub(crate) struct Admission {
    global: Arc<Semaphore>,
    frontends: Vec<Arc<Semaphore>>,
}

impl Admission {
    pub(crate) fn new(global: usize, frontends: impl Iterator<Item = usize>) -> Admission {
        Admission {
            global: Arc::new(Semaphore::new(global)),
            frontends: frontends.map(|n| Arc::new(Semaphore::new(n))).collect(),
        }
    }

    async fn admit(&self, fe: usize) -> Slot {
        let frontend = self.frontends[fe]
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let global = self
            .global
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        Slot {
            _global: global,
            _frontend: frontend,
        }
    }
}

/// Accepts connections for frontend `fe` on this worker's copy of a listening socket.
pub(crate) async fn accept_loop(
    w: Rc<Worker>,
    fe: usize,
    pinned: bool,
    listener: tokio::net::TcpListener,
) {
    let mut last_log = Instant::now() - Duration::from_secs(60);
    let mut suppressed = 0u64;
    loop {
        let slot = w.shared.admission.admit(fe).await;
        match listener.accept().await {
            Ok((sock, peer)) => {
                let _ = sock.set_nodelay(true);
                w.dispatch(sock, peer, fe, slot, pinned);
            }
            Err(e) => {
                // Out of descriptors or similar: back off instead of spinning, and say so at a
                // limited rate.
                w.ctx()
                    .counters
                    .accept_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if last_log.elapsed() >= Duration::from_secs(1) {
                    eprintln!("sluice: accept failed on worker {}: {e} ({suppressed} similar errors suppressed)", w.tid);
                    last_log = Instant::now();
                    suppressed = 0;
                } else {
                    suppressed += 1;
                }
                drop(slot);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_forms() {
        assert_eq!(
            parse_bind("127.0.0.1:80"),
            Ok(BindSpec::Addr("127.0.0.1:80".parse().unwrap()))
        );
        assert_eq!(
            parse_bind("[::1]:80"),
            Ok(BindSpec::Addr("[::1]:80".parse().unwrap()))
        );
        assert_eq!(
            parse_bind("*:80"),
            Ok(BindSpec::Addr("0.0.0.0:80".parse().unwrap()))
        );
        assert_eq!(
            parse_bind(":80"),
            Ok(BindSpec::Addr("0.0.0.0:80".parse().unwrap()))
        );
        assert_eq!(parse_bind("fd@3"), Ok(BindSpec::Fd(3)));
        assert!(parse_bind("fd@x").is_err());
        assert!(parse_bind("localhost:80").is_err());
        assert!(parse_bind("127.0.0.1").is_err());
        assert!(parse_bind(":99999").is_err());
        let mut c = ProxyConf::default();
        add_bind(&mut c, &["127.0.0.1:1,127.0.0.1:2".into()]).unwrap();
        assert_eq!(c.listen.binds.len(), 2);
        assert!(add_bind(&mut c, &[":80".into(), "ssl".into()])
            .unwrap_err()
            .to_string()
            .contains("not supported yet"));
        add_bind(&mut c, &[":81".into(), "thread".into(), "2".into()]).unwrap();
        let b = c.listen.binds.last().unwrap();
        assert!(b.on_thread(1) && !b.on_thread(0));
        assert_eq!(parse_threads("1-3"), Ok((1, 3)));
        assert!(parse_threads("0").is_err() && parse_threads("3-1").is_err());
    }

    #[test]
    fn fd_adoption_checks_the_descriptor() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let sfd = std::os::fd::AsRawFd::as_raw_fd(&s);
        assert!(open(&BindSpec::Fd(sfd), 10)
            .unwrap_err()
            .to_string()
            .contains("not a listening socket"));
        assert!(open(&BindSpec::Fd(9999), 10).is_err());
        let adopted = open(&BindSpec::Fd(fd), 10).unwrap();
        std::mem::forget(l); // ownership moved to `adopted`
        assert_eq!(adopted.local_addr().unwrap().ip().to_string(), "127.0.0.1");
    }
}
