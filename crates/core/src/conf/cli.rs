//! Runtime CLI settings (`stats socket`).

use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Access levels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    User,
    Operator,
    Admin,
}

impl Level {
    /// HAProxy's word for it (`show cli level`).
    pub fn name(self) -> &'static str {
        match self {
            Level::User => "user",
            Level::Operator => "operator",
            Level::Admin => "admin",
        }
    }
}

/// Where a `stats socket` listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliAddr {
    /// A unix socket path (also `unix@PATH`).
    Unix(String),
    /// `ipv4@ADDR:PORT`, `ipv6@[ADDR]:PORT` or `ADDR:PORT`.
    Tcp(SocketAddr),
    /// `fd@N`: a listening socket inherited from the parent process.
    Fd(RawFd),
}

impl std::fmt::Display for CliAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliAddr::Unix(p) => write!(f, "{p}"),
            CliAddr::Tcp(a) => write!(f, "{a}"),
            CliAddr::Fd(n) => write!(f, "fd@{n}"),
        }
    }
}

/// One `stats socket` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConf {
    pub addr: CliAddr,
    /// `mode`: permissions of a unix socket file.
    pub mode: Option<u32>,
    pub level: Level,
    /// `expose-fd listeners`: a process replacing this one may take its listening sockets
    /// here (`-x`).
    pub expose_fd: bool,
}
