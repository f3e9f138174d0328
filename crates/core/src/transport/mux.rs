//! One stream of a multiplexed client or server connection, served as a connection of its
//! own: an HTTP/2 stream (either side) or a client's HTTP/3 request stream. The calls the
//! HTTP/1.1 session and the transaction make of a stream are the same for both; what only
//! a stream to a server does (send a request, take its answer) is HTTP/2's alone
//! ([`Mux::as_h2`]), since sluice opens no HTTP/3 stream to a server.

use std::io;

use sluice_http::Framing;

use crate::h2_stream::H2Stream;
use crate::h3_stream::H3Stream;

#[derive(Debug)]
pub enum Mux {
    H2(H2Stream),
    /// (Boxed: its receiving half is larger than an HTTP/2 stream's shared state.)
    H3(Box<H3Stream>),
}

macro_rules! either {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Mux::H2($s) => $e,
            Mux::H3($s) => $e,
        }
    };
}

impl Mux {
    /// The HTTP/2 stream this is, if it is one.
    pub fn as_h2(&self) -> Option<&H2Stream> {
        match self {
            Mux::H2(s) => Some(s),
            Mux::H3(_) => None,
        }
    }

    /// The request is served as TLS early data (an HTTP/3 request before its handshake
    /// ended).
    pub fn is_early(&self) -> bool {
        match self {
            Mux::H2(_) => false,
            Mux::H3(s) => s.is_early(),
        }
    }

    /// The HTTP version of the stream's connection (2 or 3).
    pub fn major(&self) -> u8 {
        match self {
            Mux::H2(_) => 2,
            Mux::H3(_) => 3,
        }
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        either!(self, s => s.try_read(buf))
    }

    pub fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        either!(self, s => s.try_read_into(buf))
    }

    pub fn has_input(&self) -> bool {
        either!(self, s => s.has_input())
    }

    pub async fn readable(&self) {
        either!(self, s => s.readable().await)
    }

    pub async fn closed(&self) {
        either!(self, s => s.closed().await)
    }

    pub fn take_trailers(&self) -> Option<http::HeaderMap> {
        either!(self, s => s.take_trailers())
    }

    pub fn message_ended(&self) -> bool {
        either!(self, s => s.message_ended())
    }

    pub fn ended(&self) -> bool {
        either!(self, s => s.ended())
    }

    pub fn send_response(&self, res: http::Response<()>, framing: Framing) -> io::Result<()> {
        either!(self, s => s.send_response(res, framing))
    }

    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        either!(self, s => s.write_all(bytes).await)
    }

    pub fn end_body(&self, trailers: Option<http::HeaderMap>) {
        either!(self, s => s.end_body(trailers))
    }

    /// DATA bytes sent so far on the stream, a count that grows while a write makes
    /// progress.
    pub fn sent_counter(&self) -> std::rc::Rc<std::cell::Cell<u64>> {
        either!(self, s => s.sent_counter())
    }

    pub fn shutdown(&self) {
        either!(self, s => s.shutdown())
    }

    pub fn abort(&self) {
        either!(self, s => s.abort())
    }
}
