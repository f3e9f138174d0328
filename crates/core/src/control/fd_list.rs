//! `show fd [N]`: the process's file descriptors and what each one is for. HAProxy lists
//! its poller's entries with their internal flags and pointers, which sluice does not have;
//! sluice lists every descriptor the process holds, one line each as HAProxy does
//! (`     FD : ...`), with what can be told about it: its kind (`listener`, `client`,
//! `server`, `cli`, `cli-client`, `poller`, `waker`, `pipe`, `file`, ...), its proxy or server, its
//! addresses and its TCP state.
//!
//! The sockets are read from the kernel (`/proc/self/fd`, `/proc/self/net/*`) and named
//! after the configuration and the open sessions: nothing here is kept by the data path.

use std::collections::HashMap;
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::conf::cli::CliAddr;
use crate::conf::listen::BindSpec;
use crate::runtime::Process;

/// A socket as the kernel describes it.
#[derive(Debug, Clone)]
enum Sock {
    Inet {
        proto: &'static str,
        local: SocketAddr,
        remote: SocketAddr,
        state: u8,
    },
    Unix {
        listening: bool,
        path: String,
    },
}

/// `show fd [N]`.
pub fn show_fd(p: &Process, args: &[&str], _: crate::conf::cli::Level) -> String {
    let only = match args.first() {
        Some(n) => match n.parse::<i32>() {
            Ok(n) => Some(n),
            Err(_) => return "Expects a file descriptor number.\n".into(),
        },
        None => None,
    };
    let socks = sockets();
    let mut fds: Vec<(i32, String)> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(Result::ok)
            .filter_map(|e| {
                let fd = e.file_name().to_str()?.parse::<i32>().ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                Some((fd, target.to_string_lossy().into_owned()))
            })
            .collect(),
        Err(e) => return format!("cannot list the descriptors: {e}\n"),
    };
    fds.sort_by_key(|(fd, _)| *fd);
    let mut out = String::new();
    for (fd, target) in fds {
        if only.is_some_and(|n| n != fd) {
            continue;
        }
        let _ = writeln!(out, "{fd:>7} : {}", describe(p, fd, &target, &socks));
    }
    out
}

/// What descriptor `fd` (whose `/proc/self/fd` link is `target`) is.
fn describe(p: &Process, fd: i32, target: &str, socks: &HashMap<u64, Sock>) -> String {
    let inode = target
        .strip_prefix("socket:[")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|n| n.parse::<u64>().ok());
    let Some(inode) = inode else {
        return match target {
            "anon_inode:[eventpoll]" => "kind=poller".into(),
            "anon_inode:[eventfd]" => "kind=waker".into(),
            t if t.starts_with("pipe:") => "kind=pipe".into(),
            t if t.starts_with("anon_inode:") => format!("kind=other what={t}"),
            t => format!("kind=file path={t}"),
        };
    };
    match socks.get(&inode) {
        Some(Sock::Inet {
            proto,
            local,
            remote,
            state,
        }) => {
            let (kind, owner) = inet_owner(p, fd, proto, *local, *remote, *state);
            format!(
                "kind={kind}{owner} proto={proto} laddr={local} raddr={remote} st={}",
                tcp_state(proto, *state)
            )
        }
        Some(Sock::Unix { listening, path }) => {
            let cli = p.config.global.stats_sockets.iter().any(|s| match &s.addr {
                CliAddr::Unix(u) => !path.is_empty() && u == path,
                _ => false,
            });
            // (A connection accepted on a unix socket shows the socket's path too.)
            let kind = match (cli, listening) {
                (true, true) => "cli",
                (true, false) => "cli-client",
                (false, true) => "listener",
                (false, false) => "unix",
            };
            let path = if path.is_empty() { "-" } else { path };
            format!("kind={kind} proto=unix path={path}")
        }
        None => "kind=socket".into(),
    }
}

/// What a TCP or UDP socket is for, and whose it is (` fe=NAME`, ` be=B srv=S`).
fn inet_owner(
    p: &Process,
    fd: i32,
    proto: &str,
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
) -> (&'static str, String) {
    const LISTEN: u8 = 0x0A;
    let config = &p.config;
    if proto.starts_with("tcp") && state == LISTEN {
        for fe in &config.frontends {
            let bound = fe.listen.binds.iter().any(|b| match b.spec {
                BindSpec::Fd(n) => n == fd,
                BindSpec::Addr(a) => same_bind(a, local),
                BindSpec::Unix(_) | BindSpec::Quic(_) => false,
            });
            if bound {
                return ("listener", format!(" fe={}", fe.name));
            }
        }
        let cli = config.global.stats_sockets.iter().any(|s| match s.addr {
            CliAddr::Tcp(a) => same_bind(a, local),
            CliAddr::Fd(n) => n == fd,
            CliAddr::Unix(_) => false,
        });
        return (if cli { "cli" } else { "listener" }, String::new());
    }
    if proto.starts_with("udp") {
        return ("udp", String::new());
    }
    for t in p.threads.iter() {
        let sessions = t.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = sessions.values().find(|i| i.peer == remote) {
            let fe = config.frontends.get(i.frontend).map_or("?", |f| &f.name);
            return (
                "client",
                format!(" fe={fe} sess=0x{:x} thr={}", i.id, t.id + 1),
            );
        }
    }
    for (bi, be) in config.backends.iter().enumerate() {
        for (si, srv) in be.servers.iter().enumerate() {
            let now = p.state.backends[bi].servers[si].addr();
            if now == remote || (srv.addr.ip() == remote.ip() && now.port() == 0) {
                return ("server", format!(" be={} srv={}", be.name, srv.name));
            }
        }
    }
    ("tcp", String::new())
}

/// Whether a socket bound at `local` serves a line that binds `conf` (an unspecified
/// address takes every address of its family).
fn same_bind(conf: SocketAddr, local: SocketAddr) -> bool {
    conf == local
        || (conf.ip().is_unspecified()
            && conf.port() == local.port()
            && conf.is_ipv4() == local.is_ipv4())
}

fn tcp_state(proto: &str, st: u8) -> &'static str {
    if proto.starts_with("udp") {
        return if st == 1 { "CONNECTED" } else { "UNCONNECTED" };
    }
    match st {
        0x01 => "ESTABLISHED",
        0x02 => "SYN_SENT",
        0x03 => "SYN_RECV",
        0x04 => "FIN_WAIT1",
        0x05 => "FIN_WAIT2",
        0x06 => "TIME_WAIT",
        0x07 => "CLOSE",
        0x08 => "CLOSE_WAIT",
        0x09 => "LAST_ACK",
        0x0A => "LISTEN",
        0x0B => "CLOSING",
        _ => "?",
    }
}

/// The process's sockets by inode, from `/proc/self/net`.
fn sockets() -> HashMap<u64, Sock> {
    let mut out = HashMap::new();
    for proto in ["tcp", "tcp6", "udp", "udp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/self/net/{proto}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            if let Some((inode, sock)) = inet_line(proto, line) {
                out.insert(inode, sock);
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string("/proc/self/net/unix") {
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(flags), Some(inode)) = (f.get(3), f.get(6)) else {
                continue;
            };
            let (Ok(flags), Ok(inode)) = (u32::from_str_radix(flags, 16), inode.parse::<u64>())
            else {
                continue;
            };
            let listening = flags & 0x0001_0000 != 0;
            let path = f.get(7).map_or(String::new(), |p| p.to_string());
            out.insert(inode, Sock::Unix { listening, path });
        }
    }
    out
}

/// One line of `/proc/net/tcp|tcp6|udp|udp6`: its inode and socket.
fn inet_line(proto: &'static str, line: &str) -> Option<(u64, Sock)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let local = hex_addr(f.get(1)?)?;
    let remote = hex_addr(f.get(2)?)?;
    let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
    let inode = f.get(9)?.parse::<u64>().ok()?;
    Some((
        inode,
        Sock::Inet {
            proto,
            local,
            remote,
            state,
        },
    ))
}

/// `0100007F:1F90` (IPv4) or 32 hexadecimal digits and a port (IPv6): each 32-bit word of
/// the address as the kernel prints it, in the machine's byte order.
fn hex_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(w.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_addresses_read() {
        if cfg!(target_endian = "little") {
            assert_eq!(
                hex_addr("0100007F:1F90"),
                Some("127.0.0.1:8080".parse().unwrap())
            );
            assert_eq!(
                hex_addr("00000000000000000000000001000000:0050"),
                Some("[::1]:80".parse().unwrap())
            );
        }
        assert_eq!(hex_addr("zz:1"), None);
        assert_eq!(tcp_state("tcp", 0x0A), "LISTEN");
    }
}
