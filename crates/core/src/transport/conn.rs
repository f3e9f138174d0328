//! A connection as the data path holds it: a [`Socket`] of its own, or one stream of a
//! multiplexed HTTP/2 connection served as a connection (a client's stream, or one opened
//! to a `proto h2` server), so that the HTTP/1.1 session, the transaction and the relay
//! read and write either the same way.
//!
//! Invariants:
//! - A stream has no socket: the calls only sockets answer (TCP options, `TCP_INFO`, the
//!   moves between workers, pooling) do nothing or answer "none" for it, and the socket
//!   type itself never meets a stream (it cannot be asked a socket question it cannot
//!   answer).
//! - A `Conn` lives on the worker that made it (a stream shares its connection's state
//!   without locks); what crosses workers is a [`Socket`], detached.

use std::io;
use std::net::SocketAddr;

use super::mux::Mux;
use super::socket::{Origin, Socket, TcpInfo, Then, TlsInfo};
use crate::h2_stream::H2Stream;
use crate::h3_stream::H3Stream;

/// One connection, client or server side.
#[derive(Debug)]
pub struct Conn {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Socket(Socket),
    /// One stream of a multiplexed connection (HTTP/2, HTTP/3), served as a connection.
    Stream(Box<Stream>),
}

/// A stream served as a connection: the stream, where it came from, and what it keeps
/// while it lives (a server stream: its link's count of streams in use).
struct Stream {
    end: Mux,
    origin: Origin,
    _hold: Option<Box<dyn std::any::Any>>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream of {}", self.origin.peer)
    }
}

impl From<Socket> for Conn {
    fn from(s: Socket) -> Conn {
        Conn {
            kind: Kind::Socket(s),
        }
    }
}

impl Conn {
    /// An HTTP/2 stream (a client's, or one to a server) from `origin`, served as a
    /// connection of its own; `hold` is dropped with it, after the stream.
    pub fn h2_stream(end: H2Stream, origin: Origin, hold: Option<Box<dyn std::any::Any>>) -> Conn {
        Conn {
            kind: Kind::Stream(Box::new(Stream {
                end: Mux::H2(end),
                origin,
                _hold: hold,
            })),
        }
    }

    /// A client's HTTP/3 request stream from `origin`, served as a connection of its own.
    pub fn h3_stream(end: H3Stream, origin: Origin) -> Conn {
        Conn {
            kind: Kind::Stream(Box::new(Stream {
                end: Mux::H3(Box::new(end)),
                origin,
                _hold: None,
            })),
        }
    }

    /// The socket this connection is, if it is one.
    fn socket(&self) -> Option<&Socket> {
        match &self.kind {
            Kind::Socket(s) => Some(s),
            Kind::Stream(_) => None,
        }
    }

    /// The TCP socket, when the connection is one in clear (for splicing).
    pub fn plain_tcp(&self) -> Option<&tokio::net::TcpStream> {
        self.socket()?.plain_tcp()
    }

    /// The socket this connection is (to pool it, or hand it to a protocol crate), or
    /// the connection itself when it is a stream.
    pub fn into_socket(self) -> Result<Socket, Conn> {
        match self.kind {
            Kind::Socket(s) => Ok(s),
            kind @ Kind::Stream(_) => Err(Conn { kind }),
        }
    }

    /// Reads the PROXY protocol header a client connection starts with
    /// ([`Socket::read_proxy_header`]; a stream has none).
    pub async fn read_proxy_header(&mut self) -> Result<(), crate::proxy_proto::HeaderError> {
        match &mut self.kind {
            Kind::Socket(s) => s.read_proxy_header().await,
            Kind::Stream(_) => Err(crate::proxy_proto::HeaderError::Bad),
        }
    }

    /// Starts serving TLS on an accepted client connection ([`Socket::into_tls`]).
    pub fn into_tls(
        self,
        config: std::sync::Arc<rustls::ServerConfig>,
        capture: usize,
    ) -> io::Result<Conn> {
        match self.kind {
            Kind::Socket(s) => s.into_tls(config, capture).map(Conn::from),
            Kind::Stream(_) => Err(io::Error::other("TLS over a stream")),
        }
    }

    /// Completes a TLS server handshake ([`Socket::handshake`]; a stream has none to do).
    pub async fn handshake(&self) -> io::Result<()> {
        match &self.kind {
            Kind::Socket(s) => s.handshake().await,
            Kind::Stream(_) => Ok(()),
        }
    }

    /// Whether this is one stream of a multiplexed (HTTP/2 or HTTP/3) connection.
    pub fn is_stream(&self) -> bool {
        matches!(self.kind, Kind::Stream(_))
    }

    /// The stream this connection is, if it is one.
    pub fn as_stream(&self) -> Option<&Mux> {
        match &self.kind {
            Kind::Stream(s) => Some(&s.end),
            Kind::Socket(_) => None,
        }
    }

    /// The request on this connection is served as TLS early data (`ssl_fc_has_early`).
    pub fn is_early(&self) -> bool {
        self.as_stream().is_some_and(Mux::is_early)
    }

    /// The HTTP/2 stream this connection is, if it is one (a stream to a server).
    pub fn as_h2(&self) -> Option<&H2Stream> {
        self.as_stream().and_then(Mux::as_h2)
    }

    /// The HTTP major version the connection speaks as a whole: 1 for a socket (whatever
    /// its requests say), 2 or 3 for a stream.
    pub fn http_major(&self) -> u8 {
        self.as_stream().map_or(1, Mux::major)
    }

    /// What a stream multiplexed on this connection (or this stream's connection) knows
    /// of it.
    pub fn origin(&self) -> Origin {
        match &self.kind {
            Kind::Socket(s) => s.origin(),
            Kind::Stream(p) => p.origin.clone(),
        }
    }

    /// The peer came over a unix socket and has no address (see
    /// [`Socket::peer_is_unix`]).
    pub fn peer_is_unix(&self) -> bool {
        match &self.kind {
            Kind::Socket(s) => s.peer_is_unix(),
            Kind::Stream(p) => p.origin.unix,
        }
    }

    /// `peer`, the client's address as its stream knows it, unless the client has none: it
    /// came over a unix socket and neither a PROXY header nor `set-src` gave it one (the
    /// unspecified address then stands for it, and is never shown as an address, as
    /// HAProxy's `src` has no value there).
    pub fn client_addr(&self, peer: SocketAddr) -> Option<SocketAddr> {
        let placeholder = SocketAddr::from(([0, 0, 0, 0], 0));
        (!self.peer_is_unix() || peer != placeholder).then_some(peer)
    }

    /// The client's address: a PROXY header's, else the socket's peer (a stream: its
    /// connection's).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.kind {
            Kind::Socket(s) => s.peer_addr(),
            Kind::Stream(p) => Ok(p.origin.peer),
        }
    }

    /// The address the client connected to (a stream: its connection's).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.kind {
            Kind::Socket(s) => s.local_addr(),
            Kind::Stream(p) => Ok(p.origin.local),
        }
    }

    /// `set-tos` (a stream has no socket of its own: nothing to do).
    pub fn set_tos(&self, tos: u32) {
        if let Kind::Socket(s) = &self.kind {
            s.set_tos(tos);
        }
    }

    /// `set-mark` (a stream: nothing to do).
    pub fn set_mark(&self, mark: u32) {
        if let Kind::Socket(s) = &self.kind {
            s.set_mark(mark);
        }
    }

    /// `silent-drop` ([`Socket::silence`]); a stream is only reset.
    pub fn silence(&self) {
        match &self.kind {
            Kind::Socket(s) => s.silence(),
            Kind::Stream(p) => p.end.abort(),
        }
    }

    /// What the connection's PROXY header said, if it had one (a stream's connection
    /// keeps it: the stream sees its addresses in its origin).
    pub fn proxied(&self) -> Option<&crate::proxy_proto::Proxied> {
        self.socket().and_then(Socket::proxied)
    }

    /// Whether a completed TLS handshake was a resumption (`None`: not TLS, not done, or
    /// a stream).
    pub fn tls_resumed(&self) -> Option<bool> {
        self.socket().and_then(Socket::tls_resumed)
    }

    /// Whether the connection is TLS (`ssl_fc`; a stream: its connection).
    pub fn is_tls(&self) -> bool {
        match &self.kind {
            Kind::Socket(s) => s.is_tls(),
            Kind::Stream(p) => p.origin.tls.is_some(),
        }
    }

    /// The TLS session's facts, once its handshake is done.
    pub fn tls(&self) -> Option<TlsInfo> {
        match &self.kind {
            Kind::Socket(s) => s.tls(),
            Kind::Stream(p) => p.origin.tls.as_deref().cloned(),
        }
    }

    /// Waits until a read may make progress.
    pub async fn readable(&self) -> io::Result<()> {
        match &self.kind {
            Kind::Socket(s) => s.readable().await,
            Kind::Stream(p) => {
                p.end.readable().await;
                Ok(())
            }
        }
    }

    /// Reads what is available without waiting (`WouldBlock` when nothing is).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.kind {
            Kind::Socket(s) => s.try_read(buf),
            Kind::Stream(p) => p.end.try_read(buf),
        }
    }

    /// Reads once into the room left in `buf` ([`Socket::try_read_into`]).
    pub fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match &self.kind {
            Kind::Socket(s) => s.try_read_into(buf),
            Kind::Stream(p) => p.end.try_read_into(buf),
        }
    }

    /// Whether bytes are waiting to be read right now.
    pub fn has_input(&self) -> bool {
        match &self.kind {
            Kind::Socket(s) => s.has_input(),
            Kind::Stream(p) => p.end.has_input(),
        }
    }

    /// `TCP_INFO` ([`Socket::tcp_info`]); `None` for a stream (no socket of its own).
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        self.socket().and_then(Socket::tcp_info)
    }

    /// A reading of what has been written so far, a count that grows while a write makes
    /// progress: an HTTP/2 stream's DATA bytes sent (a write can last as long as the
    /// peer's flow control makes it); constant for a socket, whose kernel buffer takes a
    /// response's writes at once.
    pub fn progress(&self) -> impl Fn() -> u64 + 'static {
        let stream = match &self.kind {
            Kind::Stream(p) => Some(p.end.sent_counter()),
            Kind::Socket(_) => None,
        };
        move || stream.as_ref().map_or(0, |sent| sent.get())
    }

    pub async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_pair(bytes, &[], Then::Flush).await
    }

    /// Writes `a` then `b` ([`Socket::write_pair`]; a stream takes them as data).
    pub async fn write_pair(&mut self, a: &[u8], b: &[u8], then: Then) -> io::Result<()> {
        match &mut self.kind {
            Kind::Socket(s) => s.write_pair(a, b, then).await,
            Kind::Stream(p) => {
                p.end.write_all(a).await?;
                p.end.write_all(b).await
            }
        }
    }

    /// Closes with a reset ([`Socket::abort`]; a stream: RST_STREAM).
    pub fn abort(self) {
        match self.kind {
            Kind::Socket(s) => s.abort(),
            Kind::Stream(p) => p.end.abort(),
        }
    }

    /// Makes the close a reset ([`Socket::reset_on_close`]); a stream is left as it is.
    pub fn reset_on_close(&self) {
        if let Kind::Socket(s) = &self.kind {
            s.reset_on_close();
        }
    }

    /// Ends the output of a connection about to be dropped ([`Socket::end_output`]; a
    /// stream ends).
    pub async fn end_output(&mut self) {
        match &mut self.kind {
            Kind::Socket(s) => s.end_output().await,
            Kind::Stream(p) => p.end.shutdown(),
        }
    }

    /// Half-closes the sending side.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        match &mut self.kind {
            Kind::Socket(s) => s.shutdown().await,
            Kind::Stream(p) => {
                p.end.shutdown();
                Ok(())
            }
        }
    }

    /// Whether an idle connection can still carry a request ([`Socket::alive`]).
    pub fn alive(&self) -> bool {
        match &self.kind {
            Kind::Socket(s) => s.alive(),
            Kind::Stream(p) => !p.end.ended(),
        }
    }

    /// Resolves when the peer has closed its side ([`Socket::closed`]).
    pub async fn closed(&self) {
        match &self.kind {
            Kind::Socket(s) => s.closed().await,
            Kind::Stream(p) => p.end.closed().await,
        }
    }
}
