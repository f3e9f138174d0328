//! Listening sockets and accepting: `bind` and `maxconn` (global and per frontend).
//!
//! Sockets are opened once by the main thread (or adopted with `fd@N`). Each listening socket
//! is polled by one worker only (the sockets are spread over the workers a bind allows), so
//! a new connection wakes one event loop, never all of them. That worker accepts it and, still
//! unregistered with any event loop, gives it to the least loaded worker
//! (`Thread::dispatch`): itself, or a sibling through the sibling's inbox, where it is
//! registered once.
//!
//! `maxconn` is enforced with semaphores taken *after* a connection is known to be waiting
//! and *before* accepting it: at the limit, workers simply stop calling accept and the
//! kernel's backlog absorbs new connections; no busy loop. An accept loop with nothing to
//! accept holds no slot, so idle listeners never starve busy ones.
//!
//! Replacing a process without handing the sockets over (`-sf` without `-x`): both
//! processes' sockets sit in one SO_REUSEPORT group, and closing a listening socket resets
//! every connection still in its accept queue. So the new process steers the group's new
//! connections to its own socket ([`steer_here`]) before it signals the old one, and a soft
//! stop empties the accept queue of a socket this process alone holds before closing it
//! ([`accept_loop`]): nothing the kernel accepted on the old socket is lost.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use sluice_config::{Keyword, KwError, Scope};
use tokio::io::unix::AsyncFd;

use super::thread::Thread;
pub use crate::conf::listen::*;
use crate::conf::{one_arg, one_of, GlobalConf, ProxyConf};
use crate::transport::sockopt::set_option;
use crate::transport::Detached;

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "noreuseport",
        scope: Scope::GLOBAL,
        help: "noreuseport: listening sockets without SO_REUSEPORT (one socket per address; a reload then needs -x to take them over)",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.noreuseport = true),
    },
    Keyword {
        name: "maxconn",
        scope: Scope::GLOBAL,
        help: "maxconn N: maximum concurrent client connections for the whole process",
        parse: |g, a| count_arg(a).map(|n| g.maxconn = Some(n)),
    },
    Keyword {
        name: "maxconnrate",
        scope: Scope::GLOBAL,
        help: "maxconnrate N: connections accepted per second by the process (beyond, they wait in the kernel's queue)",
        parse: |g, a| rate_arg(a).map(|n| g.rate_limits.conn = Some(n)),
    },
    Keyword {
        name: "maxsessrate",
        scope: Scope::GLOBAL,
        help: "maxsessrate N: sessions started per second by the process (each accepted connection is one)",
        parse: |g, a| rate_arg(a).map(|n| g.rate_limits.sess = Some(n)),
    },
    Keyword {
        name: "maxsslrate",
        scope: Scope::GLOBAL,
        help: "maxsslrate N: connections accepted per second on ssl binds (each costs a handshake)",
        parse: |g, a| rate_arg(a).map(|n| g.rate_limits.ssl = Some(n)),
    },
    Keyword {
        name: "tune.listener.default-shards",
        scope: Scope::GLOBAL,
        help: "tune.listener.default-shards by-process|by-thread|by-group: listening sockets per bind line without 'shards' (by-group, the default, and by-process give one)",
        parse: |g, a| {
            let v = one_arg(a, "by-process, by-thread or by-group")?;
            g.default_shards = match v {
                "by-process" => Shards::ByProcess,
                "by-thread" => Shards::ByThread,
                "by-group" => Shards::ByGroup,
                other => {
                    return Err(KwError::bad(
                        1,
                        other,
                        "expects by-process, by-thread or by-group",
                    ))
                }
            };
            Ok(())
        },
    },
    Keyword {
        name: "tune.listener.multi-queue",
        scope: Scope::GLOBAL,
        help: "tune.listener.multi-queue on|fair|off: new connections go to the least loaded worker (on), to each in turn (fair) or stay where accepted (off)",
        parse: |g, a| {
            let choices = [
                ("on", Dispatch::LeastLoaded),
                ("fair", Dispatch::RoundRobin),
                ("off", Dispatch::Local),
            ];
            g.dispatch = one_of(a, "on, fair or off", &choices)?;
            Ok(())
        },
    },
];

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
    Keyword {
        name: "backlog",
        scope: Scope::FE,
        help: "backlog N: the kernel's queue of connections not yet accepted on this frontend's listeners (default: its maxconn)",
        parse: |c, a| count_arg(a).map(|n| c.listen.backlog = Some(n)),
    },
    Keyword {
        name: "option socket-stats",
        scope: Scope::FE,
        help: "option socket-stats: statistics get a row per listener",
        parse: |c, a| sluice_config::no_args(a).map(|_| c.listen.socket_stats = true),
    },
    Keyword {
        name: "rate-limit sessions",
        scope: Scope::FE,
        help: "rate-limit sessions N: connections this frontend accepts per second (beyond, they wait in the kernel's queue)",
        parse: |c, a| rate_arg(a).map(|n| c.listen.rate_limit = Some(n)),
    },
];

/// A number of events per second.
fn rate_arg(a: &[String]) -> Result<u32, KwError> {
    let v = one_arg(a, "a number per second")?;
    v.parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| KwError::bad(1, v, "expects a positive number per second"))
}

fn count_arg(a: &[String]) -> Result<usize, KwError> {
    let v = one_arg(a, "a positive integer")?;
    v.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| KwError::bad(1, v, "expects a positive integer"))
}

/// Bind options HAProxy has that sluice does not implement yet.
const PENDING_BIND_OPTIONS: &[&str] = &["process", "transparent", "interface", "tfo", "level"];

pub fn add_bind(c: &mut ProxyConf, args: &[String]) -> Result<(), KwError> {
    let [addrs, opts @ ..] = args else {
        return Err(KwError::Missing(
            "an address (ADDR:PORT, [v6]:PORT, *:PORT, :PORT or fd@N)",
        ));
    };
    let mut threads = None;
    let mut name = None;
    let mut tls = None;
    let (mut maxconn, mut backlog) = (None, None);
    let mut h2 = false;
    let mut shards = None;
    let mut defer_accept = false;
    let mut accept_proxy = false;
    let mut v6only = None;
    let mut quic_force_retry = false;
    let mut perms = UnixPerms::default();
    let mut i = 0;
    while i < opts.len() {
        if let Some(took) = crate::tls::bind_option(&mut tls, opts, i).map_err(|e| e.shifted(1))? {
            i += took;
            continue;
        }
        let o = opts[i].as_str();
        match o {
            "thread" => {
                let v = opts
                    .get(i + 1)
                    .ok_or(KwError::Missing("a thread number or range after 'thread'"))?;
                threads = Some(parse_threads(v).map_err(|e| KwError::bad(i + 3, v, e))?);
                i += 2;
            }
            "name" => {
                let v = opts
                    .get(i + 1)
                    .ok_or(KwError::Missing("a name after 'name'"))?;
                name = Some(v.clone());
                i += 2;
            }
            "proto" => {
                let v = opts
                    .get(i + 1)
                    .ok_or(KwError::Missing("a protocol after 'proto' (h1 or h2)"))?;
                h2 = match v.as_str() {
                    "h2" => true,
                    "h1" => false,
                    _ => return Err(KwError::bad(i + 3, v, "expects h1 or h2")),
                };
                i += 2;
            }
            "shards" => {
                let v = opts.get(i + 1).ok_or(KwError::Missing(
                    "a count, by-thread or by-group after 'shards'",
                ))?;
                shards = Some(match v.as_str() {
                    "by-thread" => Shards::ByThread,
                    "by-group" => Shards::ByGroup,
                    n => Shards::Count(n.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(
                        || {
                            KwError::bad(
                                i + 3,
                                v,
                                "expects a positive count, by-thread or by-group",
                            )
                        },
                    )?),
                });
                i += 2;
            }
            "defer-accept" => {
                defer_accept = true;
                i += 1;
            }
            "accept-proxy" => {
                accept_proxy = true;
                i += 1;
            }
            "quic-force-retry" => {
                quic_force_retry = true;
                i += 1;
            }
            "v6only" | "v4v6" => {
                v6only = Some(o == "v6only");
                i += 1;
            }
            "maxconn" | "backlog" => {
                let v = opts
                    .get(i + 1)
                    .ok_or(KwError::Missing("a number after 'maxconn'/'backlog'"))?;
                let n = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| KwError::bad(i + 3, v, "expects a positive integer"))?;
                *(if o == "maxconn" {
                    &mut maxconn
                } else {
                    &mut backlog
                }) = Some(n);
                i += 2;
            }
            "mode" | "uid" | "gid" | "user" | "group" => {
                let v = opts.get(i + 1).ok_or(KwError::Missing(
                    "a value after 'mode', 'uid', 'gid', 'user' or 'group'",
                ))?;
                unix_perm(&mut perms, o, v).map_err(|e| KwError::bad(i + 3, v, e))?;
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
    for spec in addrs
        .split(',')
        .map(|a| parse_bind(a).map_err(|e| KwError::bad(1, a, e)))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
    {
        if matches!(spec, BindSpec::Fd(_))
            && shards.is_some_and(|s| s != Shards::Count(1) && s != Shards::ByGroup)
        {
            return Err(KwError::bad(
                1,
                addrs,
                "an inherited socket (fd@) is one socket: 'shards' needs an address",
            ));
        }
        c.listen.binds.push(Bind {
            spec,
            name: name.clone(),
            threads,
            at: c.at.clone(),
            tls: tls.clone(),
            maxconn,
            backlog,
            h2,
            shards,
            defer_accept,
            accept_proxy,
            v6only,
            perms,
            quic_force_retry,
        });
    }
    Ok(())
}

/// `mode OCTAL`, `uid N`, `gid N`, `user NAME`, `group NAME`: a unix socket's permissions
/// and owner (HAProxy accepts them on any bind; only unix sockets have a file to apply
/// them to).
fn unix_perm(perms: &mut UnixPerms, option: &str, v: &str) -> Result<(), String> {
    let number = |v: &str| {
        v.parse::<u32>()
            .map_err(|_| format!("'{option}' expects a number"))
    };
    match option {
        "mode" => {
            perms.mode = Some(
                u32::from_str_radix(v, 8)
                    .ok()
                    .filter(|&m| m <= 0o7777)
                    .ok_or("'mode' expects an octal mode, as 660")?,
            )
        }
        "uid" => perms.uid = Some(number(v)?),
        "gid" => perms.gid = Some(number(v)?),
        "user" => {
            perms.uid = Some(
                crate::accounts::user_id(v)
                    .ok_or_else(|| format!("unknown user '{v}'"))?
                    .0,
            )
        }
        _ => {
            perms.gid =
                Some(crate::accounts::group_id(v).ok_or_else(|| format!("unknown group '{v}'"))?)
        }
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

/// An address of a `bind` line: `fd@N`, a unix socket (`unix@PATH`, `/PATH`,
/// `abns@NAME`), or `ADDR:PORT` where PORT may be a range (`:1247-1248`, one listener per
/// port).
fn parse_bind(a: &str) -> Result<Vec<BindSpec>, String> {
    if let Some(unix) = UnixAddr::parse(a) {
        return Ok(vec![BindSpec::Unix(unix?)]);
    }
    let quic = [("quic4@", true), ("quic6@", false)]
        .into_iter()
        .find_map(|(p, v4)| Some((a.strip_prefix(p)?, v4)));
    if let Some((rest, v4)) = quic {
        return parse_bind(rest)?
            .into_iter()
            .map(|spec| match spec {
                BindSpec::Addr(addr) if addr.is_ipv4() == v4 => Ok(BindSpec::Quic(addr)),
                _ => Err(format!(
                    "'{}' expects an IPv{} ADDR:PORT",
                    &a[..6],
                    if v4 { 4 } else { 6 }
                )),
            })
            .collect();
    }
    if let Some(n) = a.strip_prefix("fd@") {
        return n
            .parse::<RawFd>()
            .ok()
            .filter(|&n| n >= 0)
            .map(|fd| vec![BindSpec::Fd(fd)])
            .ok_or_else(|| "fd@ expects a file descriptor number".into());
    }
    if let Ok(addr) = a.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err("invalid port '0' (1 to 65535)".into());
        }
        return Ok(vec![BindSpec::Addr(addr)]);
    }
    let (host, ports) = a.rsplit_once(':').ok_or("expects ADDR:PORT")?;
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("invalid port '{p}' (1 to 65535)"))
    };
    let (lo, hi) = match ports.split_once('-') {
        Some((lo, hi)) => (port(lo)?, port(hi)?),
        None => (port(ports)?, port(ports)?),
    };
    if hi < lo {
        return Err(format!("invalid port range '{ports}' (low-high)"));
    }
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip = match host {
        "" | "*" | "0.0.0.0" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        h => h
            .parse::<IpAddr>()
            .map_err(|_| format!("invalid address '{h}' (names are not accepted here)"))?,
    };
    Ok((lo..=hi)
        .map(|p| BindSpec::Addr(SocketAddr::new(ip, p)))
        .collect())
}

/// Why a listening socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{file}:{line}: bind {addr}: {source}")]
    Bind {
        file: std::sync::Arc<str>,
        line: usize,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{file}:{line}: bind {addr}: {source}")]
    Unix {
        file: std::sync::Arc<str>,
        line: usize,
        addr: UnixAddr,
        source: std::io::Error,
    },
    #[error("{file}:{line}: bind fd@{fd}: {reason}")]
    Fd {
        file: std::sync::Arc<str>,
        line: usize,
        fd: RawFd,
        reason: String,
    },
}

/// Opens (or adopts) the listening socket of a `bind` line.
pub fn open_bind(
    bind: &Bind,
    backlog: usize,
    reuse_port: bool,
) -> Result<socket2::Socket, ListenError> {
    let (file, line) = (bind.at.file.clone(), bind.at.line);
    open(bind, backlog, reuse_port).map_err(|e| match e {
        OpenError::Bind(addr, source) => ListenError::Bind {
            file,
            line,
            addr,
            source,
        },
        OpenError::Unix(addr, source) => ListenError::Unix {
            file,
            line,
            addr,
            source,
        },
        OpenError::Fd(fd, reason) => ListenError::Fd {
            file,
            line,
            fd,
            reason,
        },
    })
}

#[derive(Debug)]
enum OpenError {
    Bind(SocketAddr, std::io::Error),
    Unix(UnixAddr, std::io::Error),
    Fd(RawFd, String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Bind(a, e) => write!(f, "cannot bind {a}: {e}"),
            OpenError::Unix(a, e) => write!(f, "cannot bind {a}: {e}"),
            OpenError::Fd(n, r) => write!(f, "fd@{n}: {r}"),
        }
    }
}

/// Opens (or adopts) the listening socket of `bind`.
fn open(bind: &Bind, backlog: usize, reuse_port: bool) -> Result<socket2::Socket, OpenError> {
    let backlog = backlog.min(65535) as i32;
    match bind.spec {
        BindSpec::Addr(addr) => {
            let mk = || -> std::io::Result<socket2::Socket> {
                let sock = socket2::Socket::new(
                    socket2::Domain::for_address(addr),
                    socket2::Type::STREAM,
                    None,
                )?;
                sock.set_reuse_address(true)?;
                // As HAProxy does: a new process (`-sf`, `-st`) binds beside the old one
                // (unless `noreuseport`).
                sock.set_reuse_port(reuse_port)?;
                // `v6only`/`v4v6`, else the system's default, as HAProxy.
                if let (true, Some(only)) = (addr.is_ipv6(), bind.v6only) {
                    sock.set_only_v6(only)?;
                }
                sock.bind(&addr.into())?;
                sock.listen(backlog)?;
                sock.set_nonblocking(true)?;
                Ok(sock)
            };
            mk().map_err(|source| OpenError::Bind(addr, source))
        }
        BindSpec::Unix(ref u) => {
            open_unix(u, bind.perms, backlog).map_err(|e| OpenError::Unix(u.clone(), e))
        }
        BindSpec::Quic(addr) => {
            open_udp(addr, reuse_port, bind.v6only).map_err(|e| OpenError::Bind(addr, e))
        }
        BindSpec::Fd(fd) => {
            let fail = |reason: String| OpenError::Fd(fd, reason);
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
            // SAFETY: the checks above prove `fd` is an open listening stream socket; the
            // process takes ownership of it here, once (each `bind fd@N` line is adopted
            // once).
            Ok(unsafe { socket2::Socket::from_raw_fd(fd) })
        }
    }
}

/// The listen backlog of a `bind` line: its own `backlog`, else its frontend's, else the
/// frontend's `maxconn`, else the process's.
pub fn backlog_of(fe: &crate::conf::Frontend, bind: &Bind, global_max: usize) -> usize {
    bind.backlog
        .or(fe.listen.backlog)
        .or(fe.listen.maxconn)
        .unwrap_or(global_max)
}

/// Suspends a listening TCP socket as HAProxy does for `disable frontend`: it stops
/// listening (connections waiting and new ones are refused) but stays bound, for
/// [`resume`].
pub fn suspend(sock: &socket2::Socket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let unspec = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: `unspec` is a valid sockaddr of the length given, read by the call only;
    // the descriptor is the socket's own, open while `sock` is borrowed.
    let rc = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            &unspec,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Listens again on a socket [`suspend`] stopped.
pub fn resume(sock: &socket2::Socket, backlog: usize) -> std::io::Result<()> {
    sock.listen(backlog.min(65535) as i32)
}

/// A QUIC listener's UDP socket. Each worker has its own in the address's SO_REUSEPORT
/// group: the kernel sends a client's datagrams (by their addresses) to one of them, so a
/// connection stays on the worker that saw its first packet.
fn open_udp(
    addr: SocketAddr,
    reuse_port: bool,
    v6only: Option<bool>,
) -> std::io::Result<socket2::Socket> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        None,
    )?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(reuse_port)?;
    if let (true, Some(only)) = (addr.is_ipv6(), v6only) {
        sock.set_only_v6(only)?;
    }
    sock.bind(&addr.into())?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// A listening unix socket. A socket file is bound under a temporary name beside its path,
/// given its mode and owner, listening, then renamed over the path: a process being
/// replaced keeps its own socket until then, and a client never finds the path missing or
/// not yet accepting (HAProxy binds them the same way).
fn open_unix(addr: &UnixAddr, perms: UnixPerms, backlog: i32) -> std::io::Result<socket2::Socket> {
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    let UnixAddr::Path(path) = addr else {
        sock.bind(&addr.sockaddr()?)?;
        sock.listen(backlog)?;
        sock.set_nonblocking(true)?;
        return Ok(sock);
    };
    let mut tmp = path.clone().into_os_string();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    sock.bind(&socket2::SockAddr::unix(&tmp)?)?;
    let placed = (|| {
        if let Some(mode) = perms.mode {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        }
        if perms.uid.is_some() || perms.gid.is_some() {
            std::os::unix::fs::chown(&tmp, perms.uid, perms.gid)?;
        }
        sock.listen(backlog)?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// One worker's copy of a listening socket, before it is registered with its event loop.
#[derive(Debug)]
pub struct Listening {
    pub frontend: usize,
    /// Its place among the frontend's listeners (its `bind` addresses).
    pub listener: usize,
    /// The workers the bind is restricted to (`thread N[-M]`, 1-based), if any: its
    /// connections are dispatched among those only.
    pub threads: Option<(usize, usize)>,
    /// Bound by this process (not inherited, adopted or taken over): unless handed over, the
    /// socket closes with the process, and its accept queue with it.
    pub owned: bool,
    /// `defer-accept` on its bind line.
    pub defer_accept: bool,
    /// A TCP or a unix stream socket.
    pub socket: socket2::Socket,
}

/// A listening socket registered with the current worker's event loop.
pub(crate) struct Registered {
    frontend: usize,
    listener: usize,
    threads: Option<(usize, usize)>,
    owned: bool,
    fd: AsyncFd<socket2::Socket>,
}

impl Listening {
    /// A UDP socket (a QUIC listener's), which has nothing to accept.
    pub(crate) fn is_datagram(&self) -> bool {
        self.socket.r#type().ok() == Some(socket2::Type::DGRAM)
    }

    /// Sets the socket's options before any worker polls it, so that a process saying it
    /// listens (and a previous one told to go) has them in force on every connection the
    /// kernel completes from then on.
    pub fn prepare(&self) -> std::io::Result<()> {
        if self.is_datagram() || self.socket.domain()? == socket2::Domain::UNIX {
            return Ok(());
        }
        // Inherited by every accepted connection (whoever opened the socket): requests and
        // responses leave at once, without a setsockopt per connection.
        self.socket.set_tcp_nodelay(true)?;
        // Set either way: a socket handed over by the previous process keeps its options.
        defer_accept(&self.socket, self.defer_accept)
    }

    pub(crate) fn register(self) -> std::io::Result<Registered> {
        Ok(Registered {
            frontend: self.frontend,
            listener: self.listener,
            threads: self.threads,
            owned: self.owned,
            // SAFETY: the listener owns its descriptor and moves into the AsyncFd, which
            // keeps it open and unchanged until both are dropped together.
            fd: unsafe { AsyncFd::register(self.socket) }?,
        })
    }
}

/// `TCP_DEFER_ACCEPT`: the kernel queues a connection for accept once data arrived on it,
/// waiting at most one second (as HAProxy does) for a silent client before queueing it
/// anyway.
fn defer_accept(socket: &socket2::Socket, on: bool) -> std::io::Result<()> {
    let seconds: libc::c_int = on.into();
    set_option(socket, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, &seconds)
}

/// Accepts connections for one frontend on this worker's copy of a listening socket, until
/// the worker stops; then empties the accept queue (see the module docs).
pub(crate) async fn accept_loop(t: Rc<Thread>, l: Registered) {
    let w = t.w.clone();
    let mut errors = ErrorLog::default();
    loop {
        // Paused (SIGTTOU): connections wait in the kernel's queue until SIGTTIN. A
        // disabled frontend (`disable frontend`) waits likewise, its sockets suspended.
        let paused = || {
            w.process.paused.load(std::sync::atomic::Ordering::Relaxed)
                || w.process.state.frontends[l.frontend]
                    .paused
                    .load(std::sync::atomic::Ordering::Relaxed)
        };
        while paused() && !t.stopped() {
            let resumed = w.process.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if !paused() {
                break;
            }
            tokio::select! {
                _ = resumed => {}
                _ = t.until_stopped() => {}
            }
        }
        // A connection is waiting before a slot is taken: an idle loop holds none.
        let ready = tokio::select! {
            r = l.fd.readable() => r,
            _ = t.until_stopped() => break,
        };
        let Ok(mut ready) = ready else {
            return;
        };
        if paused() {
            // Paused while waiting: the connection stays queued, readiness kept for later.
            continue;
        }
        match accept_one(&t, &l).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // A sibling took it: wait for the next one.
                ready.clear_ready();
            }
            Err(e) => {
                // Out of descriptors or similar: back off instead of spinning.
                errors.note(&w, &e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let _ = tokio::time::timeout(DRAIN_MAX, drain(&t, &l)).await;
}

/// How long a stopping process keeps a socket it alone holds open for connections still
/// arriving on it (handshakes under way when the new process steered new ones away).
const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// The longest a soft stop empties an accept queue (when nothing steers connections away,
/// they keep coming).
const DRAIN_MAX: Duration = Duration::from_secs(1);

/// Serves what is already queued on the socket, then, if it closes with this process, waits
/// for the queue to stay empty for [`DRAIN_QUIET`].
async fn drain(t: &Thread, l: &Registered) {
    let w = &t.w;
    let closes_here = l.owned
        && !w
            .process
            .handover
            .taken
            .load(std::sync::atomic::Ordering::Relaxed);
    loop {
        while accept_one(t, l).await.is_ok() {}
        if !closes_here {
            return;
        }
        match tokio::time::timeout(DRAIN_QUIET, l.fd.readable()).await {
            Ok(Ok(mut ready)) => ready.clear_ready(),
            _ => return,
        }
    }
}

/// Accepts one connection and starts serving it (here or on a sibling), still unregistered
/// with any event loop.
async fn accept_one(t: &Thread, l: &Registered) -> std::io::Result<()> {
    let p = &t.w.process;
    let tls = p.config.frontends[l.frontend].listen.binds[l.listener]
        .tls
        .as_ref()
        .is_some_and(|b| b.ssl);
    let slot = p.admission.admit(l.frontend, l.listener, tls).await;
    let (sock, peer) =
        socket2::SockRef::from(l.fd.get_ref()).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    // A unix socket's client has no address: it reads as unspecified, and the connection
    // knows it is a unix one.
    let unix = peer.is_unix();
    let peer = peer.as_socket().unwrap_or_else(|| ([0, 0, 0, 0], 0).into());
    t.dispatch(
        Detached::accepted(sock.into(), unix),
        peer,
        (l.frontend, l.listener),
        slot,
        l.threads,
    );
    Ok(())
}

/// Accept failures, counted and reported at most once a second.
struct ErrorLog {
    last: Instant,
    suppressed: u64,
}

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            last: Instant::now() - Duration::from_secs(60),
            suppressed: 0,
        }
    }
}

impl ErrorLog {
    fn note(&mut self, w: &crate::runtime::Worker, e: &std::io::Error) {
        w.ctx().counters.accept_errors.bump();
        if self.last.elapsed() >= Duration::from_secs(1) {
            say!(
                "sluice: accept failed on worker {}: {e} ({} similar errors suppressed)",
                w.tid,
                self.suppressed
            );
            self.last = Instant::now();
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
    }
}

/// Makes the SO_REUSEPORT group of `socket` (just bound and listening) send every new
/// connection to `socket`, so the processes it replaces receive none while they finish.
///
/// The kernel appends a socket to its group when it starts listening, so ours is the last of
/// the group's listening sockets, which `/proc/net/tcp` counts; a one-instruction classic BPF
/// program returns that index. When an older socket leaves the group, the last one takes
/// its place, the index falls out of range and the kernel's hash decides again, among the
/// sockets left. Returns whether there was a group to steer.
pub fn steer_here(socket: &socket2::Socket) -> std::io::Result<bool> {
    // A unix socket has no group: its path goes to the newest socket when it is renamed.
    let Some(addr) = socket.local_addr()?.as_socket() else {
        return Ok(false);
    };
    let n = listening_sockets(addr)?;
    if n < 2 {
        return Ok(false);
    }
    let mut program = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: (n - 1) as u32,
    }];
    let fprog = libc::sock_fprog {
        len: 1,
        filter: program.as_mut_ptr(),
    };
    // `fprog` points at `program`, valid until the call returns; the kernel copies both.
    set_option(
        socket,
        libc::SOL_SOCKET,
        libc::SO_ATTACH_REUSEPORT_CBPF,
        &fprog,
    )?;
    Ok(true)
}

/// How many TCP sockets listen on exactly `addr` in this network namespace.
fn listening_sockets(addr: SocketAddr) -> std::io::Result<usize> {
    let table = match addr {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table)?;
    Ok(text
        .lines()
        .skip(1)
        .filter(|line| {
            let mut cols = line.split_whitespace().skip(1);
            let (Some(local), Some(_remote), Some(state)) = (cols.next(), cols.next(), cols.next())
            else {
                return false;
            };
            // 0A: TCP_LISTEN.
            state == "0A" && proc_addr(local) == Some(addr)
        })
        .count())
}

/// Reads an address as `/proc/net/tcp` prints it: the address's 32-bit words in the
/// machine's byte order, then the port, in hexadecimal.
fn proc_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for k in (0..ip.len()).step_by(8) {
        let word = u32::from_str_radix(ip.get(k..k + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip: IpAddr = match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok()?.into(),
        16 => <[u8; 16]>::try_from(bytes).ok()?.into(),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_forms() {
        assert_eq!(
            parse_bind("127.0.0.1:80"),
            Ok(vec![BindSpec::Addr("127.0.0.1:80".parse().unwrap())])
        );
        assert_eq!(
            parse_bind("[::1]:80"),
            Ok(vec![BindSpec::Addr("[::1]:80".parse().unwrap())])
        );
        assert_eq!(
            parse_bind("*:80"),
            Ok(vec![BindSpec::Addr("0.0.0.0:80".parse().unwrap())])
        );
        assert_eq!(
            parse_bind(":80"),
            Ok(vec![BindSpec::Addr("0.0.0.0:80".parse().unwrap())])
        );
        assert_eq!(parse_bind("fd@3"), Ok(vec![BindSpec::Fd(3)]));
        let range = parse_bind(":1247-1249").unwrap();
        assert_eq!(range.len(), 3);
        assert_eq!(range[2], BindSpec::Addr("0.0.0.0:1249".parse().unwrap()));
        assert!(parse_bind(":1249-1247").is_err());
        assert_eq!(
            parse_bind("[::]:443"),
            Ok(vec![BindSpec::Addr("[::]:443".parse().unwrap())])
        );
        assert!(parse_bind("fd@x").is_err());
        assert!(parse_bind("localhost:80").is_err());
        assert!(parse_bind("127.0.0.1").is_err());
        assert!(parse_bind(":99999").is_err());
        assert!(parse_bind(":0").is_err(), "HAProxy refuses port 0");
        assert!(parse_bind("127.0.0.1:0").is_err());
        let mut c = ProxyConf::default();
        add_bind(&mut c, &["127.0.0.1:1,127.0.0.1:2".into()]).unwrap();
        assert_eq!(c.listen.binds.len(), 2);
        assert!(
            add_bind(&mut c, &[":80".into(), "ssl".into(), "npn".into()])
                .unwrap_err()
                .to_string()
                .contains("not supported yet")
        );
        add_bind(&mut c, &[":81".into(), "thread".into(), "2".into()]).unwrap();
        let b = c.listen.binds.last().unwrap();
        assert!(b.on_thread(1) && !b.on_thread(0));
        assert_eq!(parse_threads("1-3"), Ok((1, 3)));
        assert!(parse_threads("0").is_err() && parse_threads("3-1").is_err());
    }

    /// The `bind` of one address, without options.
    fn bind_of(addr: &str) -> Bind {
        let mut c = ProxyConf::default();
        add_bind(&mut c, &[addr.to_string()]).unwrap();
        c.listen.binds.remove(0)
    }

    #[test]
    fn fd_adoption_checks_the_descriptor() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let sfd = std::os::fd::AsRawFd::as_raw_fd(&s);
        let bind = |fd: i32| bind_of(&format!("fd@{fd}"));
        assert!(open(&bind(sfd), 10, true)
            .unwrap_err()
            .to_string()
            .contains("not a listening socket"));
        assert!(open(&bind(9999), 10, true).is_err());
        let adopted = open(&bind(fd), 10, true).unwrap();
        std::mem::forget(l); // ownership moved to `adopted`
        let local = adopted.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local.ip().to_string(), "127.0.0.1");
    }

    #[test]
    fn listening_sockets_are_counted_from_proc() {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = a.local_addr().unwrap();
        assert_eq!(listening_sockets(addr).unwrap(), 1);
        let b = open(&bind_of(&addr.to_string()), 10, true);
        assert!(b.is_err(), "the first socket has no SO_REUSEPORT");
        let v6 = std::net::TcpListener::bind("[::1]:0");
        if let Ok(v6) = v6 {
            assert_eq!(listening_sockets(v6.local_addr().unwrap()).unwrap(), 1);
        }
        assert_eq!(
            proc_addr("0100007F:1F90").filter(|_| cfg!(target_endian = "little")),
            cfg!(target_endian = "little").then(|| "127.0.0.1:8080".parse().unwrap())
        );
    }
}
