//! The transport seam: every client and server connection reaches the data path as a
//! [`Conn`], whatever carries its bytes. Plain TCP is the first (and so far only) kind; TLS
//! adds a variant here and leaves the HTTP and relay code unchanged.
//!
//! Invariants:
//! - A `Conn` is registered with the event loop of the worker that created or attached it,
//!   and is used only there. Moving it to another worker goes through [`Conn::detach`] (on
//!   the sender) and [`Conn::attach`] (on the receiver).
//! - Every `Conn` holds one slot of the open-descriptor count (`fds`) for its whole life,
//!   so no socket can be forgotten by the pools' descriptor rules.
//! - `MSG_MORE` is only ever set by the caller's `more` hint, which must mean "the next bytes
//!   of this message are already in hand": a hint given while waiting on a peer would hold
//!   sent bytes in the kernel for up to 200 ms.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::fds::Counted;

/// What is known about a connection's TLS session (nothing until TLS exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    pub sni: Option<String>,
    pub alpn: Option<Vec<u8>>,
}

/// One connection, client or server side.
#[derive(Debug)]
pub struct Conn {
    io: Io,
    _fd: Counted,
}

#[derive(Debug)]
enum Io {
    Tcp(TcpStream),
}

/// A connection taken out of its worker's event loop, on its way to another worker.
#[derive(Debug)]
pub struct Detached {
    io: std::net::TcpStream,
    fd: Counted,
}

impl Conn {
    /// An accepted client connection.
    pub fn accepted(stream: TcpStream) -> Conn {
        let _ = stream.set_nodelay(true);
        Conn {
            io: Io::Tcp(stream),
            _fd: Counted::new(),
        }
    }

    /// Opens a connection to a server.
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let conn = Conn::dial(addr)?;
        conn.connected().await?;
        let _ = conn.tcp().set_nodelay(true);
        Ok(conn)
    }

    /// Starts a connection to a server and returns at once, the handshake possibly still in
    /// flight: the first write reports how it went (or [`Conn::connected`] waits for it).
    /// On loopback and nearby servers the handshake is usually over before `connect`
    /// returns, so a request written at once saves a trip through the event loop.
    pub fn dial(addr: SocketAddr) -> io::Result<Conn> {
        // Counted before the socket exists, so the figure never lags the descriptors.
        let fd = Counted::new();
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking(),
            None,
        )?;
        match sock.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(Conn {
            io: Io::Tcp(TcpStream::from_std(sock.into())?),
            _fd: fd,
        })
    }

    /// Waits until a connection from [`Conn::dial`] is established, or says why it failed.
    pub async fn connected(&self) -> io::Result<()> {
        let stream = self.tcp();
        stream.writable().await?;
        match stream.take_error()? {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn tcp(&self) -> &TcpStream {
        match &self.io {
            Io::Tcp(s) => s,
        }
    }

    fn tcp_mut(&mut self) -> &mut TcpStream {
        match &mut self.io {
            Io::Tcp(s) => s,
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().local_addr()
    }

    /// The TLS session's facts, when the connection is encrypted.
    pub fn tls(&self) -> Option<&TlsInfo> {
        None
    }

    /// Waits until a read may make progress.
    pub async fn readable(&self) -> io::Result<()> {
        self.tcp().readable().await
    }

    /// Reads what is available without waiting (`WouldBlock` when nothing is).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp().try_read(buf)
    }

    /// Whether bytes are waiting to be read right now (the next part of a message is
    /// already here, so a write may announce that more follows).
    pub fn has_input(&self) -> bool {
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        socket2::SockRef::from(self.tcp())
            .recv_with_flags(&mut buf, libc::MSG_PEEK | libc::MSG_DONTWAIT)
            .is_ok_and(|n| n > 0)
    }

    /// Copies what is waiting to be read into `buf` without consuming it (`balance
    /// rdp-cookie` looks at a connection's first bytes before they are relayed).
    pub fn peek_now(&self, buf: &mut [u8]) -> usize {
        let mut tmp = vec![MaybeUninit::<u8>::uninit(); buf.len()];
        let n = socket2::SockRef::from(self.tcp())
            .recv_with_flags(&mut tmp, libc::MSG_PEEK | libc::MSG_DONTWAIT)
            .unwrap_or(0);
        for (d, s) in buf.iter_mut().zip(&tmp[..n]) {
            // SAFETY: the kernel wrote the first `n` bytes.
            *d = unsafe { s.assume_init() };
        }
        n
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_pair(bytes, &[], false).await
    }

    /// Writes `a` then `b` with as few system calls as possible (one `sendmsg` when both
    /// fit). `more` says the next bytes of the same message are already buffered: the
    /// kernel may then hold a partial segment and send fuller packets. Never pass `more`
    /// when the next bytes depend on a peer.
    pub async fn write_pair(&mut self, mut a: &[u8], mut b: &[u8], more: bool) -> io::Result<()> {
        let flags = if more { libc::MSG_MORE } else { 0 } | libc::MSG_NOSIGNAL;
        let stream = self.tcp();
        let sock = socket2::SockRef::from(stream);
        // The first attempt goes straight to the socket: a connection is nearly always
        // writable, and a fresh one has no readiness recorded yet, so waiting first would
        // cost a trip through the event loop. A refusal just means waiting below.
        let mut first = true;
        while !a.is_empty() || !b.is_empty() {
            let sent = if std::mem::take(&mut first) {
                sock.send_vectored_with_flags(&[IoSlice::new(a), IoSlice::new(b)], flags)
            } else {
                stream.writable().await?;
                stream.try_io(tokio::io::Interest::WRITABLE, || {
                    sock.send_vectored_with_flags(&[IoSlice::new(a), IoSlice::new(b)], flags)
                })
            };
            let n = match sent {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            if n < a.len() {
                a = &a[n..];
            } else {
                b = &b[n - a.len()..];
                a = &[];
            }
        }
        Ok(())
    }

    /// Closes with a reset rather than a FIN: nothing unsent is delivered and neither side
    /// keeps the connection in TIME_WAIT.
    pub fn abort(self) {
        let _ = socket2::SockRef::from(self.tcp()).set_linger(Some(std::time::Duration::ZERO));
    }

    /// Half-closes the sending side.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        self.tcp_mut().shutdown().await
    }

    /// Whether an idle connection can still carry a request: false once the peer closed
    /// it, it failed, or it holds bytes nobody asked for.
    pub fn alive(&self) -> bool {
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(self.tcp()).peek(&mut buf) {
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => false,
        }
    }

    /// Resolves when the peer has closed its side (end of stream or reset). Pipelined data
    /// is not a close: it is left unread and this never resolves.
    pub async fn closed(&self) {
        let stream = self.tcp();
        let mut probe = [MaybeUninit::<u8>::uninit(); 1];
        loop {
            if stream.readable().await.is_err() {
                return;
            }
            // Through try_io, a spurious readiness is cleared rather than spun on.
            let peeked = stream.try_io(tokio::io::Interest::READABLE, || {
                socket2::SockRef::from(stream).peek(&mut probe)
            });
            match peeked {
                Ok(0) => return,
                Ok(_) => return std::future::pending().await,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }

    /// Takes the connection out of this worker's event loop.
    pub fn detach(self) -> io::Result<Detached> {
        let Io::Tcp(s) = self.io;
        Ok(Detached {
            io: s.into_std()?,
            fd: self._fd,
        })
    }

    /// Registers a detached connection with the current worker's event loop.
    pub fn attach(d: Detached) -> io::Result<Conn> {
        Ok(Conn {
            io: Io::Tcp(TcpStream::from_std(d.io)?),
            _fd: d.fd,
        })
    }

    /// Moves a connection registered with another worker's event loop into this one's.
    pub fn adopt(self) -> io::Result<Conn> {
        Conn::attach(self.detach()?)
    }
}
