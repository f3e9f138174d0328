//! Socket buffer sizes: `tune.rcvbuf.client|server` and `tune.sndbuf.client|server`, as
//! HAProxy's: client sizes are set on each accepted connection, server sizes on a server
//! socket before it connects. Unset sizes keep the system's (`net.ipv4.tcp_rmem|wmem`,
//! tuned by the kernel as the connection goes).

use sluice_config::{Keyword, KwError, Scope};

use crate::conf::{one_arg, BufSizes, GlobalConf};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "tune.rcvbuf.client",
        scope: Scope::GLOBAL,
        help:
            "tune.rcvbuf.client SIZE: the receive buffer of client sockets (default: the system's)",
        parse: |g, a| size(a).map(|n| g.client_bufs.rcv = Some(n)),
    },
    Keyword {
        name: "tune.sndbuf.client",
        scope: Scope::GLOBAL,
        help: "tune.sndbuf.client SIZE: the send buffer of client sockets (default: the system's)",
        parse: |g, a| size(a).map(|n| g.client_bufs.snd = Some(n)),
    },
    Keyword {
        name: "tune.rcvbuf.server",
        scope: Scope::GLOBAL,
        help:
            "tune.rcvbuf.server SIZE: the receive buffer of server sockets (default: the system's)",
        parse: |g, a| size(a).map(|n| g.server_bufs.rcv = Some(n)),
    },
    Keyword {
        name: "tune.sndbuf.server",
        scope: Scope::GLOBAL,
        help: "tune.sndbuf.server SIZE: the send buffer of server sockets (default: the system's)",
        parse: |g, a| size(a).map(|n| g.server_bufs.snd = Some(n)),
    },
];

fn size(a: &[String]) -> Result<usize, KwError> {
    let v = one_arg(a, "a size in bytes")?;
    sluice_config::units::parse_size(v)
        .ok()
        .filter(|&n| n > 0 && n <= i32::MAX as u64)
        .map(|n| n as usize)
        .ok_or_else(|| KwError::bad(1, v, "expects a size in bytes, above 0"))
}

/// Sets the sizes `b` gives on `sock` (the kernel doubles them for its bookkeeping and
/// keeps them within `net.core.rmem_max|wmem_max`).
pub fn apply(sock: socket2::SockRef<'_>, b: BufSizes) -> std::io::Result<()> {
    if let Some(n) = b.rcv {
        sock.set_recv_buffer_size(n)?;
    }
    if let Some(n) = b.snd {
        sock.set_send_buffer_size(n)?;
    }
    Ok(())
}
