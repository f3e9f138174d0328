//! The UDP side of a worker's QUIC endpoint: the listener's socket, and a socket of its own
//! for each established connection, bound to the listener's address and `connect()`ed to
//! the client (HAProxy 2.7's `quic-socket-owner connection`).
//!
//! Why a socket per connection: the listener's socket is one of an address's SO_REUSEPORT
//! group, whose members the kernel picks from by hashing a datagram's addresses. A process
//! that replaces this one joins the group, and the hash (or its steering program) would
//! send this process's clients to it. Once a group has a connected member, the kernel
//! scores every socket for a datagram instead of taking the group's pick, and the member
//! connected to the datagram's sender wins (Linux's `udp4_lib_lookup2`; the hash skips
//! connected members): an established connection's datagrams reach its own socket, on this
//! worker, whoever joins the group later. The listener then only carries handshakes.
//!
//! Invariants:
//! - A connection's socket joins the group (so that the group counts a connected member)
//!   behind a filter that drops everything until it is connected: between its `bind` and
//!   its `connect`, the group's hash could hand it another client's datagrams.
//! - A receive reads the connected sockets that are ready (an inner epoll set, registered
//!   once with the worker's reactor, says which: a wake costs what is ready, not a poll of
//!   every connection), then the listener. A send goes out of the destination's own socket,
//!   or the listener's when it has none or it would block: both have the same address.
//! - A connection's socket is closed when its connection ends ([`Owned`]).
//! - Every datagram received is sorted by [`Route`] before the endpoint sees it: those of
//!   another worker's connections go there, those that are no QUIC packet are dropped;
//!   datagrams other workers hand over are received as the sockets' own.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::io::unix::AsyncFd;

use super::quic_route::Route;

/// A worker endpoint's sockets.
#[derive(Debug)]
pub struct QuicSocket {
    listener: Arc<dyn AsyncUdpSocket>,
    /// The listener's socket itself (another descriptor of it), to retire it.
    retired: std::net::UdpSocket,
    local: SocketAddr,
    /// Which of the listener and the connections' sockets is read first (they take turns,
    /// so that neither starves the other).
    listener_first: std::sync::atomic::AtomicBool,
    /// Whether the inbox of datagrams other workers handed over is read before the sockets.
    inbox_first: std::sync::atomic::AtomicBool,
    conns: Mutex<Conns>,
    /// Readiness of the connections' sockets (level-triggered).
    ready: AsyncFd<OwnedFd>,
    /// Datagrams to and from the listener's other workers.
    route: Route,
}

#[derive(Debug, Default)]
struct Conns {
    by_peer: HashMap<SocketAddr, Arc<Connected>>,
    by_fd: HashMap<RawFd, Arc<Connected>>,
}

#[derive(Debug)]
struct Connected {
    socket: std::net::UdpSocket,
    state: UdpSocketState,
}

/// A connection's own socket, closed when dropped.
#[derive(Debug)]
pub struct Owned {
    owner: Arc<QuicSocket>,
    peer: SocketAddr,
    fd: RawFd,
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.owner.forget(self.peer, self.fd);
    }
}

fn lock(m: &Mutex<Conns>) -> std::sync::MutexGuard<'_, Conns> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl QuicSocket {
    /// Wraps the listener's socket (bound, non-blocking), on the current worker's reactor.
    pub fn new(listener: std::net::UdpSocket, route: Route) -> io::Result<Arc<QuicSocket>> {
        let local = listener.local_addr()?;
        let retired = listener.try_clone()?;
        let listener = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, listener)?;
        // SAFETY: epoll_create1 takes no pointer; a negative result is an error, else a new
        // descriptor this process owns alone.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the epoll descriptor moves into the AsyncFd, which keeps it open and
        // unchanged until both are dropped together.
        let ready =
            unsafe { AsyncFd::register_with_interest(epoll, tokio::io::Interest::READABLE) }?;
        Ok(Arc::new(QuicSocket {
            listener,
            retired,
            local,
            listener_first: Default::default(),
            inbox_first: Default::default(),
            conns: Mutex::default(),
            ready,
            route,
        }))
    }

    /// Gives the connection from `peer`, which reached `local_ip`, a socket of its own
    /// until the returned guard is dropped. (On a wildcard listener the socket is bound to
    /// the address the client used, which its datagrams are matched on.)
    pub fn own(self: &Arc<Self>, peer: SocketAddr, local_ip: Option<IpAddr>) -> io::Result<Owned> {
        let local = match local_ip {
            Some(ip) if self.local.ip().is_unspecified() => SocketAddr::new(ip, self.local.port()),
            _ => self.local,
        };
        let socket = connected(local, peer)?;
        let state = UdpSocketState::new((&socket).into())?;
        let fd = socket.as_raw_fd();
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: both descriptors are open (the epoll set's and the socket's, owned by
        // `self` and `socket`); `event` is a valid epoll_event the kernel copies.
        let rc = unsafe {
            libc::epoll_ctl(
                self.ready.get_ref().as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd,
                &mut event,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let conn = Arc::new(Connected { socket, state });
        let mut conns = lock(&self.conns);
        conns.by_peer.insert(peer, conn.clone());
        conns.by_fd.insert(fd, conn);
        Ok(Owned {
            owner: self.clone(),
            peer,
            fd,
        })
    }

    /// Takes the listener out of the address's group at a soft stop, the connections
    /// keeping their own sockets: connected to the listener's own address, it is no longer
    /// one the kernel hands new clients to (a connected member is only ever given its
    /// peer's datagrams, and no datagram comes from there), so a process that replaces this
    /// one receives them all. (Its descriptors stay open: the endpoint still sends from it.)
    pub fn retire(&self) -> io::Result<()> {
        let away = match self.local {
            a if !a.ip().is_unspecified() => a,
            SocketAddr::V4(a) => SocketAddr::from(([127, 0, 0, 1], a.port())),
            SocketAddr::V6(a) => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port())),
        };
        self.retired.connect(away)
    }

    /// A connection's socket goes (by its descriptor: two connections from one client
    /// address may overlap, the later one's socket then being the address's).
    fn forget(&self, peer: SocketAddr, fd: RawFd) {
        let mut conns = lock(&self.conns);
        if conns
            .by_peer
            .get(&peer)
            .is_some_and(|c| c.socket.as_raw_fd() == fd)
        {
            conns.by_peer.remove(&peer);
        }
        // (Closing the socket takes it out of the epoll set.)
        conns.by_fd.remove(&fd);
    }

    /// Reads what a ready connection socket has, if any.
    fn poll_connected(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match self.ready.poll_read_ready(cx) {
                Poll::Ready(Ok(g)) => g,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
            // SAFETY: the epoll descriptor is open; `events` has room for the 16 entries
            // the call may write; a zero timeout never blocks.
            let n = unsafe {
                libc::epoll_wait(
                    self.ready.get_ref().as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    0,
                )
            };
            if n <= 0 {
                guard.clear_ready();
                continue;
            }
            for event in &events[..n as usize] {
                let fd = event.u64 as RawFd;
                let Some(conn) = lock(&self.conns).by_fd.get(&fd).cloned() else {
                    continue;
                };
                // An error (an ICMP unreachable, reported on a connected socket) is the
                // client's connection's business, not the endpoint's: skipped.
                if let Ok(n) = conn.state.recv((&conn.socket).into(), bufs, meta) {
                    return Poll::Ready(Ok(n));
                }
            }
        }
    }
}

impl AsyncUdpSocket for QuicSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        // Sends that would block on a connection's socket go out of the listener's.
        self.listener.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let own = lock(&self.conns)
            .by_peer
            .get(&transmit.destination)
            .cloned();
        if let Some(conn) = own {
            match conn.state.send((&conn.socket).into(), transmit) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                sent => return sent,
            }
        }
        self.listener.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        // The inbox and the sockets take turns too: neither starves the other.
        in_turns(
            &self.inbox_first,
            (cx, bufs, meta),
            |cx, bufs, meta| self.route.poll_inbox(cx, bufs, meta).map(Ok),
            |cx, bufs, meta| {
                let got = self.poll_sockets(cx, bufs, meta);
                if let Poll::Ready(Ok(n)) = got {
                    self.route.sort(bufs, meta, n);
                }
                got
            },
        )
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        self.listener.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        self.listener.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.listener.max_receive_segments()
    }
}

impl QuicSocket {
    /// Receives from the listener or the connections' sockets, taking turns.
    fn poll_sockets(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        in_turns(
            &self.listener_first,
            (cx, bufs, meta),
            |cx, bufs, meta| self.listener.poll_recv(cx, bufs, meta),
            |cx, bufs, meta| self.poll_connected(cx, bufs, meta),
        )
    }
}

/// Polls two sources of datagrams, `a` first at every other call (`a_first` flips each
/// time): a source always ready cannot starve the other.
fn in_turns<'c>(
    a_first: &std::sync::atomic::AtomicBool,
    (cx, bufs, meta): (&mut Context, &mut [io::IoSliceMut<'c>], &mut [RecvMeta]),
    a: impl FnOnce(&mut Context, &mut [io::IoSliceMut<'c>], &mut [RecvMeta]) -> Poll<io::Result<usize>>,
    b: impl FnOnce(&mut Context, &mut [io::IoSliceMut<'c>], &mut [RecvMeta]) -> Poll<io::Result<usize>>,
) -> Poll<io::Result<usize>> {
    if a_first.fetch_xor(true, std::sync::atomic::Ordering::Relaxed) {
        // (The flag was set: `b`'s turn first.)
        match b(cx, bufs, meta) {
            Poll::Pending => a(cx, bufs, meta),
            ready => ready,
        }
    } else {
        match a(cx, bufs, meta) {
            Poll::Pending => b(cx, bufs, meta),
            ready => ready,
        }
    }
}

/// A socket bound to `local` (beside the listener, in its SO_REUSEPORT group) and
/// connected to `peer`, non-blocking; it drops what it receives until it is connected.
fn connected(local: SocketAddr, peer: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(local),
        socket2::Type::DGRAM,
        None,
    )?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if local.is_ipv6() {
        sock.set_only_v6(false)?;
    }
    drop_all(&sock, true)?;
    sock.bind(&local.into())?;
    sock.connect(&peer.into())?;
    drop_all(&sock, false)?;
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

/// Attaches (or detaches) a socket filter that drops every datagram.
fn drop_all(sock: &socket2::Socket, on: bool) -> io::Result<()> {
    use super::sockopt::set_option;
    if !on {
        let zero: libc::c_int = 0;
        return set_option(sock, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, &zero);
    }
    let mut program = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    let fprog = libc::sock_fprog {
        len: 1,
        filter: program.as_mut_ptr(),
    };
    // (`fprog` points at `program`, valid until the call returns; the kernel copies both.)
    set_option(sock, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}
