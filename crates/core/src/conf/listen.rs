//! Listening addresses and connection limits (`bind`, `maxconn`).

use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::loc::Loc;

/// One `bind` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindSpec {
    Addr(SocketAddr),
    /// An already-listening socket inherited from the parent process.
    Fd(RawFd),
    /// A unix socket (`unix@PATH`, `/PATH`, `abns@NAME`).
    Unix(UnixAddr),
    /// A UDP address served as QUIC (`quic4@ADDR:PORT`, `quic6@ADDR:PORT`): HTTP/3.
    Quic(SocketAddr),
}

impl std::fmt::Display for BindSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindSpec::Addr(a) => write!(f, "{a}"),
            BindSpec::Fd(n) => write!(f, "fd@{n}"),
            BindSpec::Unix(u) => write!(f, "{u}"),
            BindSpec::Quic(a) if a.is_ipv4() => write!(f, "quic4@{a}"),
            BindSpec::Quic(a) => write!(f, "quic6@{a}"),
        }
    }
}

/// A unix socket's address, for a `bind` or a `server`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UnixAddr {
    /// A socket file (`unix@PATH`, or a path starting with `/`).
    Path(std::path::PathBuf),
    /// A name in Linux's abstract namespace (`abns@NAME`): no file, gone with its last
    /// holder.
    Abstract(String),
}

impl UnixAddr {
    /// `unix@PATH`, `/PATH`, `abns@NAME` (`None`: not a unix address).
    pub fn parse(a: &str) -> Option<Result<UnixAddr, String>> {
        let (path, name) = if let Some(p) = a.strip_prefix("unix@") {
            (Some(p), None)
        } else if a.starts_with('/') {
            (Some(a), None)
        } else {
            (None, Some(a.strip_prefix("abns@")?))
        };
        // Room for the name in `sun_path` (108 bytes: a path's final NUL, an abstract
        // name's leading one).
        let fits = |n: &str| !n.is_empty() && n.len() < 108;
        Some(match (path, name) {
            (Some(p), _) if fits(p) => Ok(UnixAddr::Path(p.into())),
            (Some(p), _) => Err(format!(
                "unix socket path '{p}': empty or longer than 107 bytes"
            )),
            (_, Some(n)) if fits(n) => Ok(UnixAddr::Abstract(n.into())),
            (_, n) => Err(format!(
                "abstract socket name '{}': empty or longer than 107 bytes",
                n.unwrap_or_default()
            )),
        })
    }

    /// The kernel's address. An abstract name fills the whole of `sun_path`, padded with
    /// NULs, as HAProxy binds and connects them, so that sluice and HAProxy reach each
    /// other's `abns@` sockets.
    pub fn sockaddr(&self) -> std::io::Result<socket2::SockAddr> {
        match self {
            UnixAddr::Path(p) => socket2::SockAddr::unix(p),
            UnixAddr::Abstract(n) => {
                use std::os::unix::ffi::OsStrExt;
                // The leading NUL marks the abstract namespace.
                let mut path = vec![0u8; 108];
                path[1..=n.len()].copy_from_slice(n.as_bytes());
                socket2::SockAddr::unix(std::ffi::OsStr::from_bytes(&path))
            }
        }
    }
}

impl std::fmt::Display for UnixAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnixAddr::Path(p) => write!(f, "unix@{}", p.display()),
            UnixAddr::Abstract(n) => write!(f, "abns@{n}"),
        }
    }
}

/// `mode`, `uid`/`user`, `gid`/`group` of a unix socket `bind`: its file's permissions and
/// owner (`None`: the process's umask and identity).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnixPerms {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// A `bind` line's address and the workers allowed to accept on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub spec: BindSpec,
    /// `name`: what statistics call this listener (`sock-N` without one).
    pub name: Option<String>,
    /// `thread N[-M]` (1-based, inclusive); `None`: every worker.
    pub threads: Option<(usize, usize)>,
    /// The `bind` line, for errors found when the socket is opened.
    pub at: Loc,
    /// `ssl` and its options: connections are TLS.
    pub tls: Option<super::tls::BindTls>,
    /// `maxconn N`: connections this listener holds at once (beyond, they wait in the
    /// kernel's queue).
    pub maxconn: Option<usize>,
    /// `backlog N`: the kernel's queue of connections not yet accepted.
    pub backlog: Option<usize>,
    /// `proto h2`: connections speak HTTP/2 from their first byte (prior knowledge),
    /// whatever TLS's ALPN chose. Without it, a TLS connection speaks HTTP/2 when ALPN
    /// chose `h2`, and any other HTTP/1.1.
    pub h2: bool,
    /// `shards`: how many listening sockets this address gets (`None`: the global
    /// `tune.listener.default-shards`).
    pub shards: Option<Shards>,
    /// `defer-accept`: a connection is accepted once its first bytes arrived (or, if its
    /// client stays silent, after the kernel's first retransmission), so accepting it and
    /// reading its first request take one wake-up instead of two.
    pub defer_accept: bool,
    /// `accept-proxy`: each connection starts with a PROXY protocol header (v1 or v2),
    /// whose addresses stand for the socket's.
    pub accept_proxy: bool,
    /// `v6only` (true) or `v4v6` (false) on an IPv6 address; `None`: the system's default.
    pub v6only: Option<bool>,
    /// A unix socket's file permissions and owner.
    pub perms: UnixPerms,
    /// `quic-force-retry`: every new QUIC client proves its address first (a Retry).
    pub quic_force_retry: bool,
}

impl Bind {
    /// Whether worker `tid` (0-based) accepts on this bind.
    pub fn on_thread(&self, tid: usize) -> bool {
        self.threads
            .is_none_or(|(a, b)| (a..=b).contains(&(tid + 1)))
    }

    /// How many listening sockets this bind opens, with `nbthread` workers: one per worker
    /// the bind allows at most, and one for an inherited socket (`fd@N`), which cannot be
    /// duplicated into a new one.
    pub fn shard_count(&self, default: Shards, nbthread: usize) -> usize {
        if matches!(self.spec, BindSpec::Fd(_)) {
            return 1;
        }
        let allowed = (0..nbthread).filter(|&t| self.on_thread(t)).count().max(1);
        // A QUIC address has a socket per worker unless told otherwise: datagrams have no
        // accept to dispatch, so each worker serves what its own socket receives.
        if matches!(self.spec, BindSpec::Quic(_)) && self.shards.is_none() {
            return allowed;
        }
        match self.shards.unwrap_or(default) {
            Shards::Count(n) => n.min(allowed),
            Shards::ByThread => allowed,
            // sluice has one thread group, and one process.
            Shards::ByGroup | Shards::ByProcess => 1,
        }
    }
}

/// `shards N|by-thread|by-group` and `tune.listener.default-shards`: an address gets that
/// many listening sockets in one SO_REUSEPORT group, each polled by a different worker, so
/// that the kernel spreads new connections over several accepting workers (each still hands
/// a connection to the least loaded worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shards {
    Count(usize),
    ByThread,
    /// One per thread group: sluice has one group, so one socket (the default).
    #[default]
    ByGroup,
    /// `by-process` (default-shards only): one socket.
    ByProcess,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenConf {
    pub binds: Vec<Bind>,
    pub maxconn: Option<usize>,
    /// `backlog N`: the accept queue of the frontend's listeners (else its `maxconn`).
    pub backlog: Option<usize>,
    /// `option socket-stats`: statistics have a row per listener.
    pub socket_stats: bool,
    /// `rate-limit sessions N`: new connections accepted per second.
    pub rate_limit: Option<u32>,
}

/// The configured limits, per second (`None`: unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    /// `maxconnrate`: connections accepted by the process.
    pub conn: Option<u32>,
    /// `maxsessrate`: sessions (here, as accepted connections) of the process.
    pub sess: Option<u32>,
    /// `maxsslrate`: connections accepted on `ssl` binds.
    pub ssl: Option<u32>,
    /// `rate-limit sessions`, by frontend.
    pub frontends: Vec<Option<u32>>,
}

/// `tune.listener.multi-queue`: which worker a new connection goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// `on`: the least loaded worker (the default).
    #[default]
    LeastLoaded,
    /// `fair`: each worker in turn, whatever its load.
    RoundRobin,
    /// `off`: the worker that accepted it.
    Local,
}
