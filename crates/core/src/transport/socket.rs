//! A socket of the data path: TCP (or unix), plain or TLS, registered with the event loop
//! of the worker that made or adopted it; the one type pools hold and workers pass each
//! other (detached). The seam's invariants are in `transport`'s documentation.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fds::Counted;
use crate::proxy_proto::HeaderError;

/// What is known about a connection's TLS session once its handshake is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsInfo {
    pub sni: Option<String>,
    pub alpn: Option<Vec<u8>>,
    /// `TLSv1.3`, `TLSv1.2`.
    pub version: &'static str,
    /// The suite's OpenSSL name (`TLS_AES_128_GCM_SHA256`, `ECDHE-RSA-AES128-GCM-SHA256`).
    pub cipher: &'static str,
    /// The client's certificate, verified (`verify optional|required`): its subject and
    /// issuer.
    pub client_cert: Option<(String, String)>,
    /// The session was resumed (by ticket or by id), not fully negotiated.
    pub resumed: bool,
    /// What the client's ClientHello offered, when captured.
    pub hello: Option<std::sync::Arc<crate::tls::hello::Capture>>,
    /// The session's secrets, with `tune.ssl.keylog on`.
    pub keys: Option<std::sync::Arc<crate::tls::keylog::Secrets>>,
}

/// What a stream of a multiplexed client connection knows of that connection.
#[derive(Debug, Clone)]
pub struct Origin {
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Shared by the connection's streams (each stream's copy of the origin is a count).
    pub tls: Option<std::sync::Arc<TlsInfo>>,
    /// The connection came over a unix socket: `peer` and `local` stand for addresses it
    /// does not have.
    pub unix: bool,
}

/// What the kernel knows of a TCP connection (`TCP_INFO`, HAProxy's `fc_rtt` family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    /// The smoothed round-trip time and its variance, in microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub reordering: u32,
}

/// What follows a write, so that it can leave in fewer packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing known: everything leaves now.
    Flush,
    /// The next bytes of the same message are already in hand (never when they depend on
    /// a peer): TCP may hold a partial segment (`MSG_MORE`) for fuller packets. TLS sends
    /// now: its records are whole already, and a client's half-received record could
    /// otherwise hold them.
    More,
    /// The connection is shut down right after: TCP's FIN rides on the last segment, and
    /// TLS keeps its last records to leave with the close_notify in one write.
    Close,
}

/// One socket, client or server side: TCP (or unix), plain or TLS.
#[derive(Debug)]
pub struct Socket {
    io: Io,
    /// The descriptor's place in the open count.
    _fd: Counted,
    /// What a PROXY protocol header said of the client (its addresses replace the
    /// socket's); not carried when the connection moves to another worker.
    proxied: Option<Box<crate::proxy_proto::Proxied>>,
    /// The socket is a unix one (its peer has no address).
    unix: bool,
}

enum Io {
    Tcp(TcpStream),
    Tls(Box<Tls>),
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Io::Tcp(s) => s.fmt(f),
            Io::Tls(t) => t.tcp.fmt(f),
        }
    }
}

/// A TLS connection: the socket and rustls's state, driven by [`Socket`]'s calls (a handshake
/// advances as the connection is read).
struct Tls {
    tcp: TcpStream,
    state: std::cell::RefCell<rustls::Connection>,
    /// The client's ClientHello while it arrives (`tune.ssl.capture-buffer-size`), then
    /// what it offered.
    hello: std::cell::RefCell<Hello>,
    /// The session's secrets (`tune.ssl.keylog on`).
    keys: std::cell::RefCell<Option<crate::tls::keylog::Secrets>>,
}

/// Where capturing a client's ClientHello stands.
#[derive(Debug, Default)]
enum Hello {
    #[default]
    Off,
    Collecting(crate::tls::hello::Collector),
    Done(Option<std::sync::Arc<crate::tls::hello::Capture>>),
}

/// Reads records from the socket, copying them into a ClientHello being collected.
struct Tee<'a> {
    socket: Nonblocking<'a>,
    hello: &'a std::cell::RefCell<Hello>,
}

impl io::Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.socket.read(buf)?;
        let mut hello = self.hello.borrow_mut();
        if let Hello::Collecting(c) = &mut *hello {
            if let crate::tls::hello::Collected::Done(got) = c.push(&buf[..n]) {
                *hello = Hello::Done(got);
            }
        }
        Ok(n)
    }
}

/// `std::io` reads and writes over a registered socket, without waiting (`WouldBlock`
/// when it would).
struct Nonblocking<'a>(&'a TcpStream);

impl io::Read for Nonblocking<'_> {
    // rustls reads records through here: a short read drained the socket, as for TCP.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let got = self.0.try_read(buf);
        drained_if_short(self.0, &got, buf.len());
        got
    }
}

impl io::Write for Nonblocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    // rustls hands over its pending records together: one system call for all of them.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Tls {
    /// rustls's processing of the records read; during the handshake, the secrets it
    /// logs are kept (`tls::keylog`).
    fn process(&self, st: &mut rustls::Connection) -> Result<rustls::IoState, rustls::Error> {
        if st.is_handshaking() {
            crate::tls::keylog::collecting(&self.keys, || st.process_new_packets())
        } else {
            st.process_new_packets()
        }
    }

    /// Reads records from the socket into rustls (copying a ClientHello being captured).
    fn read_records(&self, st: &mut rustls::Connection) -> io::Result<usize> {
        if matches!(*self.hello.borrow(), Hello::Collecting(_)) {
            return st.read_tls(&mut Tee {
                socket: Nonblocking(&self.tcp),
                hello: &self.hello,
            });
        }
        st.read_tls(&mut Nonblocking(&self.tcp))
    }

    /// Sends what rustls has to send, as far as the socket takes it now.
    fn push(&self) -> io::Result<()> {
        let mut st = self.state.borrow_mut();
        while st.wants_write() {
            match st.write_tls(&mut Nonblocking(&self.tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends everything rustls has to send, waiting for the socket as needed.
    async fn flush(&self) -> io::Result<()> {
        loop {
            self.push()?;
            if !self.state.borrow().wants_write() {
                return Ok(());
            }
            self.tcp.writable().await?;
        }
    }

    /// Decrypted bytes are waiting, or the peer closed its side.
    fn has_plaintext(&self) -> bool {
        let mut st = self.state.borrow_mut();
        self.process(&mut st)
            .map(|s| s.plaintext_bytes_to_read() > 0 || s.peer_has_closed())
            .unwrap_or(true)
    }

    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut st = self.state.borrow_mut();
                match io::Read::read(&mut st.reader(), buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    // The peer closed without close_notify: an end of stream like TCP's.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                }
                match self.read_records(&mut st) {
                    Ok(0) => return Ok(0),
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
                if let Err(e) = self.process(&mut st) {
                    // The alert goes out before the error ends the connection.
                    drop(st);
                    let _ = self.push();
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
            // Handshake messages (or alerts) to send in return.
            self.push()?;
        }
    }

    /// Reads once into the room left in `buf`, as [`Socket::try_read_into`]. Only as much of
    /// the room as there are decrypted bytes for is initialized: a request of a few hundred
    /// bytes does not cost a memset of the whole buffer.
    fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        loop {
            let (ready, closed) = {
                let mut st = self.state.borrow_mut();
                match self.process(&mut st) {
                    Ok(io) => (io.plaintext_bytes_to_read(), io.peer_has_closed()),
                    Err(e) => {
                        drop(st);
                        let _ = self.push();
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
            };
            if ready > 0 {
                let at = buf.len();
                buf.resize(at + ready.min(buf.capacity() - at), 0);
                let got = self.try_read(&mut buf[at..]);
                buf.truncate(at + *got.as_ref().unwrap_or(&0));
                return got;
            }
            if closed {
                return Ok(0);
            }
            let read = self.read_records(&mut self.state.borrow_mut());
            match read {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            // Handshake messages (or alerts) to send in return.
            self.push()?;
        }
    }

    /// Encrypts `a` then `b` and sends the records, in as few writes as the plaintext
    /// buffer allows (both usually fit: one flush). With `hold`, the records of the last
    /// piece stay queued for the next write or flush.
    async fn write(&self, mut a: &[u8], mut b: &[u8], hold: bool) -> io::Result<()> {
        loop {
            {
                let mut st = self.state.borrow_mut();
                let mut w = st.writer();
                // Given together, a head and a small body share one record: one seal, one
                // record's overhead on the wire and one open for the client.
                let n = if a.is_empty() || b.is_empty() {
                    io::Write::write(&mut w, if a.is_empty() { b } else { a })?
                } else {
                    io::Write::write_vectored(&mut w, &[IoSlice::new(a), IoSlice::new(b)])?
                };
                let from_a = n.min(a.len());
                a = &a[from_a..];
                b = &b[n - from_a..];
            }
            let done = a.is_empty() && b.is_empty();
            if done && hold {
                return Ok(());
            }
            self.flush().await?;
            if done {
                return Ok(());
            }
        }
    }

    fn info(&self) -> Option<TlsInfo> {
        let st = self.state.borrow();
        if st.is_handshaking() {
            return None;
        }
        let sni = match &*st {
            rustls::Connection::Server(s) => s.server_name().map(str::to_string),
            rustls::Connection::Client(_) => None,
        };
        Some(TlsInfo {
            sni,
            alpn: st.alpn_protocol().map(<[u8]>::to_vec),
            version: st
                .protocol_version()
                .map_or("unknown", crate::tls::version_name),
            cipher: st
                .negotiated_cipher_suite()
                .map_or("unknown", |s| crate::tls::suite_name(s.suite())),
            client_cert: st
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| crate::tls::x509::dn_strings(c).unwrap_or_default()),
            resumed: st.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
            hello: match &*self.hello.borrow() {
                Hello::Done(c) => c.clone(),
                _ => None,
            },
            keys: self.keys.borrow().clone().map(std::sync::Arc::new),
        })
    }
}

/// A connection taken out of its worker's event loop, on its way to another worker (a
/// TLS connection with its session).
pub struct Detached {
    io: std::net::TcpStream,
    tls: Option<Box<rustls::Connection>>,
    fd: Counted,
    unix: bool,
}

impl std::fmt::Debug for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.io.fmt(f)
    }
}

impl Detached {
    /// A connection just accepted, not registered with any event loop yet: the worker that
    /// serves it registers it, once.
    /// `TCP_NODELAY` comes from the listening socket: Linux copies it to every connection
    /// accepted there, which saves a system call per connection.
    /// A unix socket's connection (`unix`) is carried in the same stream type: reading,
    /// writing and shutting down are the same system calls on any connected stream
    /// socket, and the calls only TCP has (`TCP_NODELAY`, keep-alive timers, addresses)
    /// fail harmlessly on it.
    pub fn accepted(io: std::net::TcpStream, unix: bool) -> Detached {
        Detached {
            io,
            tls: None,
            fd: Counted::new(),
            unix,
        }
    }
}

impl Socket {
    /// Opens a connection to a server, its socket buffers sized as `bufs` says, from
    /// `source` if given (`source`).
    pub async fn connect(
        addr: SocketAddr,
        bufs: crate::conf::BufSizes,
        source: Option<SocketAddr>,
    ) -> io::Result<Socket> {
        let conn = Socket::dial_with(addr, bufs, source)?;
        conn.connected().await?;
        let _ = conn.tcp().set_nodelay(true);
        Ok(conn)
    }

    /// Starts a connection to a server and returns at once, the handshake possibly still in
    /// flight: the first write reports how it went (or [`Socket::connected`] waits for it).
    /// On loopback and nearby servers the handshake is usually over before `connect`
    /// returns, so a request written at once saves a trip through the event loop.
    pub fn dial(addr: SocketAddr) -> io::Result<Socket> {
        Socket::dial_with(addr, crate::conf::BufSizes::default(), None)
    }

    /// [`Socket::dial`], the socket's buffers sized as `bufs` says and bound to `source`
    /// (if given) before it connects.
    pub fn dial_with(
        addr: SocketAddr,
        bufs: crate::conf::BufSizes,
        source: Option<SocketAddr>,
    ) -> io::Result<Socket> {
        // Counted before the socket exists, so the figure never lags the descriptors.
        let fd = Counted::new();
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking(),
            None,
        )?;
        crate::sockbuf::apply((&sock).into(), bufs)?;
        if let Some(from) = source {
            if from.port() != 0 {
                // A fixed port may still be in TIME_WAIT from the last connection.
                sock.set_reuse_address(true)?;
            }
            sock.bind(&from.into())?;
        }
        match sock.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(Socket {
            io: Io::Tcp(TcpStream::from_std(sock.into())?),
            _fd: fd,
            proxied: None,
            unix: false,
        })
    }

    /// Opens a connection to a server listening on a unix socket (carried as a TCP one is:
    /// see [`Detached::accepted`]).
    pub fn connect_unix(addr: &crate::conf::listen::UnixAddr) -> io::Result<Socket> {
        let fd = Counted::new();
        let sock = socket2::Socket::new(
            socket2::Domain::UNIX,
            socket2::Type::STREAM.nonblocking(),
            None,
        )?;
        // A unix socket connects at once, or fails (EAGAIN: the server's queue is full).
        sock.connect(&addr.sockaddr()?)?;
        Ok(Socket {
            io: Io::Tcp(TcpStream::from_std(sock.into())?),
            _fd: fd,
            proxied: None,
            unix: true,
        })
    }

    /// Waits until a connection from [`Socket::dial`] is established, or says why it failed.
    pub async fn connected(&self) -> io::Result<()> {
        let stream = self.tcp();
        stream.writable().await?;
        match stream.take_error()? {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Starts TLS on an accepted connection (the handshake runs as it is read); with
    /// `capture` bytes, what the ClientHello offered is kept (`tls::hello`).
    pub fn into_tls(
        self,
        config: std::sync::Arc<rustls::ServerConfig>,
        capture: usize,
    ) -> io::Result<Socket> {
        let Io::Tcp(tcp) = self.io else {
            return Err(io::Error::other("TLS over TLS"));
        };
        let state = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        let hello = match capture {
            0 => Hello::Off,
            n => Hello::Collecting(crate::tls::hello::Collector::new(n)),
        };
        Ok(Socket {
            io: Io::Tls(Box::new(Tls {
                tcp,
                state: std::cell::RefCell::new(state.into()),
                hello: hello.into(),
                keys: Default::default(),
            })),
            _fd: self._fd,
            proxied: self.proxied,
            unix: self.unix,
        })
    }

    /// Starts TLS on a connection to a server and completes the handshake (a server that
    /// fails it, its certificate refused, is a connection failure).
    pub async fn into_tls_client(
        self,
        config: std::sync::Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> io::Result<Socket> {
        let Io::Tcp(tcp) = self.io else {
            return Err(io::Error::other("TLS over TLS"));
        };
        let state = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
        let conn = Socket {
            io: Io::Tls(Box::new(Tls {
                tcp,
                state: std::cell::RefCell::new(state.into()),
                hello: Hello::Off.into(),
                keys: Default::default(),
            })),
            _fd: self._fd,
            proxied: self.proxied,
            unix: self.unix,
        };
        conn.handshake().await?;
        Ok(conn)
    }

    /// Completes a TLS handshake now, rather than as the connection is first read (an
    /// accepted connection's protocol may depend on what it negotiated: ALPN). Nothing to
    /// do without TLS or once done.
    pub async fn handshake(&self) -> io::Result<()> {
        let Io::Tls(t) = &self.io else {
            return Ok(());
        };
        loop {
            t.flush().await?;
            if !t.state.borrow().is_handshaking() {
                return Ok(());
            }
            t.tcp.readable().await?;
            let mut st = t.state.borrow_mut();
            match t.read_records(&mut st) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = t.process(&mut st) {
                drop(st);
                let _ = t.push();
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    /// The TCP socket, when the connection is one in clear (for splicing).
    pub fn plain_tcp(&self) -> Option<&TcpStream> {
        match &self.io {
            Io::Tcp(s) if !self.unix => Some(s),
            _ => None,
        }
    }

    /// The TCP (or unix) socket under the connection.
    fn tcp(&self) -> &TcpStream {
        match &self.io {
            Io::Tcp(s) => s,
            Io::Tls(t) => &t.tcp,
        }
    }

    /// What a stream multiplexed on this connection knows of it. A unix socket's
    /// addresses, which it does not have, read as unspecified ones.
    pub fn origin(&self) -> Origin {
        let none = SocketAddr::from(([0, 0, 0, 0], 0));
        Origin {
            peer: self.peer_addr().unwrap_or(none),
            local: self.local_addr().unwrap_or(none),
            tls: self.tls().map(std::sync::Arc::new),
            unix: self.peer_is_unix(),
        }
    }

    /// The peer came over a unix socket and has no address (a PROXY header that gave one
    /// stands for it).
    pub fn peer_is_unix(&self) -> bool {
        self.unix && self.proxied.as_ref().and_then(|p| p.src).is_none()
    }

    /// The client's address: a PROXY header's, else the socket's peer.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        if let Some(src) = self.proxied.as_ref().and_then(|p| p.src) {
            return Ok(src);
        }
        self.tcp().peer_addr()
    }

    /// The address the client connected to: a PROXY header's, else the socket's.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        if let Some(dst) = self.proxied.as_ref().and_then(|p| p.dst) {
            return Ok(dst);
        }
        self.tcp().local_addr()
    }

    /// `set-tos`: the IP TOS (IPv6: the traffic class) of what the peer is sent.
    pub fn set_tos(&self, tos: u32) {
        let s = socket2::SockRef::from(self.tcp());
        let _ = match self.tcp().peer_addr() {
            Ok(a) if a.is_ipv6() => s.set_tclass_v6(tos),
            _ => s.set_tos_v4(tos),
        };
    }

    /// `set-mark`: the netfilter mark of what the peer is sent (`SO_MARK`, which needs
    /// `CAP_NET_ADMIN`; without it nothing changes, as with HAProxy).
    pub fn set_mark(&self, mark: u32) {
        let _ = socket2::SockRef::from(self.tcp()).set_mark(mark);
    }

    /// `silent-drop`, HAProxy's way: the socket goes into repair mode, so that closing it
    /// sends nothing (`TCP_REPAIR`, which needs `CAP_NET_ADMIN`); failing that, what is
    /// sent dies one hop away (a TTL of 1: no effect on a local network). The close is a
    /// reset either way.
    pub fn silence(&self) {
        let tcp = self.tcp();
        let one: libc::c_int = 1;
        let repaired =
            super::sockopt::set_option(tcp, libc::IPPROTO_TCP, libc::TCP_REPAIR, &one).is_ok();
        let s = socket2::SockRef::from(tcp);
        if !repaired {
            let _ = match tcp.peer_addr() {
                Ok(a) if a.is_ipv6() => s.set_unicast_hops_v6(1),
                _ => s.set_ttl_v4(1),
            };
        }
        let _ = s.set_linger(Some(std::time::Duration::ZERO));
    }

    /// Turns TCP keepalive on with these figures.
    pub fn set_keepalive(&self, ka: &socket2::TcpKeepalive) {
        let _ = socket2::SockRef::from(self.tcp()).set_tcp_keepalive(ka);
    }

    /// Sizes the socket's buffers (`tune.rcvbuf|sndbuf.*`); a refusal leaves the system's.
    pub fn set_buffers(&self, bufs: crate::conf::BufSizes) {
        let _ = crate::sockbuf::apply(socket2::SockRef::from(self.tcp()), bufs);
    }

    /// What the connection's PROXY header said, if it had one.
    pub fn proxied(&self) -> Option<&crate::proxy_proto::Proxied> {
        self.proxied.as_deref()
    }

    /// Reads the PROXY protocol header (v1 or v2) a connection starts with, consuming its
    /// bytes and nothing after them; its addresses then stand for the socket's. The
    /// connection must be plain TCP, not yet read.
    pub async fn read_proxy_header(&mut self) -> Result<(), HeaderError> {
        use crate::proxy_proto::{parse, Parsed, MAX_HEADER};
        let Io::Tcp(tcp) = &self.io else {
            return Err(HeaderError::Bad);
        };
        let mut got = Vec::new();
        let mut peeked = vec![0u8; MAX_HEADER];
        loop {
            // What is already there, without taking it: the header's end is found first.
            let room = MAX_HEADER - got.len();
            let n = tcp
                .peek(&mut peeked[..room])
                .await
                .map_err(|_| HeaderError::Broken)?;
            if n == 0 && got.is_empty() {
                return Err(HeaderError::Closed);
            }
            if n == 0 {
                return Err(HeaderError::Truncated);
            }
            let mut seen = got.clone();
            seen.extend_from_slice(&peeked[..n]);
            let take = match parse(&seen) {
                Parsed::Invalid(why) => return Err(HeaderError::of_invalid(why)),
                Parsed::Header { len, proxied } => {
                    self.proxied = Some(Box::new(proxied));
                    len - got.len()
                }
                // Every byte seen belongs to the header: taken, so that the next peek
                // waits for more.
                Parsed::Incomplete if seen.len() < MAX_HEADER => n,
                Parsed::Incomplete => return Err(HeaderError::Bad),
            };
            let mut buf = vec![0u8; take];
            let mut filled = 0;
            while filled < take {
                match tcp.try_read(&mut buf[filled..]) {
                    Ok(0) => return Err(HeaderError::Truncated),
                    Ok(k) => filled += k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let _ = tcp.readable().await;
                    }
                    Err(_) => return Err(HeaderError::Broken),
                }
            }
            if self.proxied.is_some() {
                return Ok(());
            }
            got.extend_from_slice(&buf);
        }
    }

    /// Whether a completed TLS handshake was a resumption (`None`: not TLS, or not done).
    pub fn tls_resumed(&self) -> Option<bool> {
        match &self.io {
            Io::Tls(t) => t
                .state
                .borrow()
                .handshake_kind()
                .filter(|_| !t.state.borrow().is_handshaking())
                .map(|k| k == rustls::HandshakeKind::Resumed),
            Io::Tcp(_) => None,
        }
    }

    /// Whether the connection is TLS (`ssl_fc`).
    pub fn is_tls(&self) -> bool {
        match &self.io {
            Io::Tls(_) => true,
            Io::Tcp(_) => false,
        }
    }

    /// The TLS session's facts, once its handshake is done.
    pub fn tls(&self) -> Option<TlsInfo> {
        match &self.io {
            Io::Tls(t) => t.info(),
            Io::Tcp(_) => None,
        }
    }

    /// Waits until a read may make progress.
    pub async fn readable(&self) -> io::Result<()> {
        match &self.io {
            Io::Tcp(s) => s.readable().await,
            Io::Tls(t) => {
                t.flush().await?;
                if t.has_plaintext() {
                    return Ok(());
                }
                t.tcp.readable().await
            }
        }
    }

    /// Reads what is available without waiting (`WouldBlock` when nothing is).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.io {
            Io::Tcp(s) => {
                let got = s.try_read(buf);
                drained_if_short(s, &got, buf.len());
                got
            }
            Io::Tls(t) => t.try_read(buf),
        }
    }

    /// Reads once into the room left in `buf` (between its length and its capacity, which
    /// must not be full), appending what came. Over TCP the room is not written before the
    /// kernel fills it, so untouched memory stays untouched.
    pub fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        debug_assert!(buf.len() < buf.capacity(), "no room to read into");
        match &self.io {
            Io::Tcp(s) => {
                let room = buf.capacity() - buf.len();
                let got = s.try_read_buf(buf);
                drained_if_short(s, &got, room);
                got
            }
            Io::Tls(t) => t.try_read_into(buf),
        }
    }

    /// Whether bytes are waiting to be read right now (the next part of a message is
    /// already here, so a write may announce that more follows).
    pub fn has_input(&self) -> bool {
        match &self.io {
            Io::Tls(t) if t.has_plaintext() => return true,
            _ => {}
        }
        // Not readable since a read drained it (see `drained_if_short`): nothing has come
        // as far as the event loop knows, and the peek's system call is spared.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if self.tcp().poll_read_ready(&mut cx).is_pending() {
            return false;
        }
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        socket2::SockRef::from(self.tcp())
            .recv_with_flags(&mut buf, libc::MSG_PEEK | libc::MSG_DONTWAIT)
            .is_ok_and(|n| n > 0)
    }

    /// What the kernel knows of the TCP connection (`TCP_INFO`); `None` for a unix
    /// socket or when the kernel says nothing.
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        use std::os::fd::AsRawFd;
        if self.unix {
            return None;
        }
        let fd = self.tcp().as_raw_fd();
        let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `info` has room for `len` bytes, the most the kernel writes; `fd` is
        // this connection's socket, open while `self` lives.
        let done = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if done != 0 {
            return None;
        }
        // SAFETY: zeroed, then written by the kernel; every field is an integer, valid
        // whatever its bits.
        let i = unsafe { info.assume_init() };
        Some(TcpInfo {
            rtt_us: i.tcpi_rtt,
            rttvar_us: i.tcpi_rttvar,
            unacked: i.tcpi_unacked,
            sacked: i.tcpi_sacked,
            lost: i.tcpi_lost,
            retrans: i.tcpi_retrans,
            fackets: i.tcpi_fackets,
            reordering: i.tcpi_reordering,
        })
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_pair(bytes, &[], Then::Flush).await
    }

    /// Writes `a` then `b` with as few system calls as possible (one `sendmsg` when both
    /// fit); `then` says what follows (see [`Then`]).
    pub async fn write_pair(&mut self, mut a: &[u8], mut b: &[u8], then: Then) -> io::Result<()> {
        match &self.io {
            Io::Tls(t) => return t.write(a, b, then == Then::Close).await,
            Io::Tcp(_) => {}
        }
        let flags = if then == Then::Flush {
            0
        } else {
            libc::MSG_MORE
        } | libc::MSG_NOSIGNAL;
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
        self.reset_on_close();
    }

    /// Makes the close, whenever the connection is dropped, a reset (as [`Socket::abort`]):
    /// for a socket handed to a protocol layer that will drop it.
    pub fn reset_on_close(&self) {
        let _ = socket2::SockRef::from(self.tcp()).set_linger(Some(std::time::Duration::ZERO));
    }

    /// Ends the output of a connection about to be dropped: TLS's close_notify leaves with
    /// whatever is pending. No `shutdown(2)`: closing the descriptor sends the FIN when
    /// nothing is left unread, and a reset when something is, shut down or not.
    pub async fn end_output(&mut self) {
        match &mut self.io {
            Io::Tcp(_) => {}
            Io::Tls(t) => {
                t.state.borrow_mut().send_close_notify();
                let _ = t.flush().await;
            }
        }
    }

    /// Half-closes the sending side (after TLS's close_notify).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match &mut self.io {
            Io::Tcp(s) => s.shutdown().await,
            Io::Tls(t) => {
                t.state.borrow_mut().send_close_notify();
                let _ = t.flush().await;
                t.tcp.shutdown().await
            }
        }
    }

    /// Whether an idle connection can still carry a request: false once the peer closed
    /// it, it failed, or it holds bytes nobody asked for.
    pub fn alive(&self) -> bool {
        if let Io::Tls(t) = &self.io {
            // TLS records may arrive unasked (a TLS 1.3 server's session tickets): they are
            // taken in, and only data or a close makes the connection unusable.
            let mut st = t.state.borrow_mut();
            loop {
                match st.read_tls(&mut Nonblocking(&t.tcp)) {
                    Ok(0) => return false,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return false,
                }
            }
            return st
                .process_new_packets()
                .is_ok_and(|s| s.plaintext_bytes_to_read() == 0 && !s.peer_has_closed());
        }
        // Not readable since its last read drained it (see `drained_if_short`): the server
        // has sent nothing, not even a close, as far as the event loop knows. Else ask the
        // socket, and forget a readiness left over from a read that filled the buffer.
        let tcp = self.tcp();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if tcp.poll_read_ready(&mut cx).is_pending() {
            return true;
        }
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(tcp).peek(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let _ = tcp.try_io(tokio::io::Interest::READABLE, || {
                    Err::<(), _>(io::ErrorKind::WouldBlock.into())
                });
                true
            }
            _ => false,
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
        let (s, tls) = match self.io {
            Io::Tcp(s) => (s, None),
            Io::Tls(t) => (t.tcp, Some(Box::new(t.state.into_inner()))),
        };
        Ok(Detached {
            io: s.into_std()?,
            tls,
            fd: self._fd,
            unix: self.unix,
        })
    }

    /// Registers a detached connection with the current worker's event loop.
    pub fn attach(d: Detached) -> io::Result<Socket> {
        let tcp = TcpStream::from_std(d.io)?;
        let io = match d.tls {
            None => Io::Tcp(tcp),
            // Server connections move between workers: they have no ClientHello to keep.
            Some(state) => Io::Tls(Box::new(Tls {
                tcp,
                state: std::cell::RefCell::new(*state),
                hello: Hello::Off.into(),
                keys: Default::default(),
            })),
        };
        Ok(Socket {
            io,
            _fd: d.fd,
            proxied: None,
            unix: d.unix,
        })
    }

    /// Moves a connection registered with another worker's event loop into this one's.
    pub fn adopt(self) -> io::Result<Socket> {
        Socket::attach(self.detach()?)
    }
}

/// A client connection as a byte stream for a protocol crate (the HTTP/2 front), over
/// plain TCP or TLS.
impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let t = match &mut self.get_mut().io {
            Io::Tcp(s) => return Pin::new(s).poll_read(cx, buf),
            Io::Tls(t) => t,
        };
        loop {
            match t.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            // A readiness left from before is cleared by the read that found nothing.
            std::task::ready!(t.tcp.poll_read_ready(cx))?;
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    /// Over TLS, the slices given together are sealed together (a frame's head and its
    /// payload share a record), and the records leave at the flush the protocol crate
    /// makes after its writes, or once rustls holds all it will: one system call for many
    /// frames rather than one per write. What waits is bounded by rustls's buffer limit.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let t = match &mut self.get_mut().io {
            Io::Tcp(s) => return Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(t) => t,
        };
        let empty = bufs.iter().all(|b| b.is_empty());
        loop {
            let n = io::Write::write_vectored(&mut t.state.borrow_mut().writer(), bufs)?;
            if n > 0 || empty {
                return Poll::Ready(Ok(n));
            }
            // rustls holds as much as it will: the socket must take some first.
            t.push()?;
            if t.state.borrow().wants_write() {
                std::task::ready!(t.tcp.poll_write_ready(cx))?;
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let t = match &mut self.get_mut().io {
            Io::Tcp(s) => return Pin::new(s).poll_flush(cx),
            Io::Tls(t) => t,
        };
        loop {
            t.push()?;
            if !t.state.borrow().wants_write() {
                return Poll::Ready(Ok(()));
            }
            std::task::ready!(t.tcp.poll_write_ready(cx))?;
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if let Io::Tls(t) = &me.io {
            t.state.borrow_mut().send_close_notify();
        }
        std::task::ready!(Pin::new(&mut *me).poll_flush(cx))?;
        match &mut me.io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(t) => Pin::new(&mut t.tcp).poll_shutdown(cx),
        }
    }
}

/// After a read over TCP that returned less than it had room for, the socket's receive queue
/// was empty: its readiness is cleared without the read that would return EAGAIN (the next
/// arrival raises a new edge, so nothing is missed). Saves a system call per wait.
fn drained_if_short(s: &TcpStream, got: &io::Result<usize>, room: usize) {
    if matches!(got, Ok(n) if *n > 0 && *n < room) {
        let _ = s.try_io(tokio::io::Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }
}
