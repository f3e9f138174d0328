//! HTTP/2 frames on the wire, where the `h2` crate does not look:
//! - [`Tallied`]: the crate does not tell which frames it read or wrote, so a client
//!   connection it drives is wrapped in it, which follows the frame headers in the bytes
//!   going each way and counts what `show stat`'s HTTP/2 module reports (HEADERS, DATA,
//!   SETTINGS, RST_STREAM and GOAWAY received; RST_STREAM and GOAWAY sent, and the protocol
//!   errors those announce) and tells the connection's [`Queued`] each DATA frame that
//!   leaves;
//! - [`read_preface`]: a cleartext client's first bytes are checked (the preface, then
//!   SETTINGS) before the crate, which speaks first, sees the connection; [`Tallied`]
//!   gives them back to it;
//! - frames that ask for no work (PRIORITY, which the crate ignores; empty DATA that does
//!   not end its stream; empty CONTINUATION that does not end its head; WINDOW_UPDATE
//!   beyond what the DATA sent to the client earns, see [`UPDATES_PER_DATA`]; RST_STREAM
//!   beyond one per HEADERS the client sent, as a stream is reset once) are counted
//!   as they are read: a client that sends more than [`NO_WORK_LIMIT`] of them within
//!   [`NO_WORK_WINDOW`] loses its connection, as a flood of them would cost the worker
//!   for nothing (the crate itself bounds SETTINGS, PING and reset floods).
//!
//! Invariants:
//! - [`Tallied`] looks at bytes, never holds or copies them (but for the first 8 bytes of
//!   an RST_STREAM, GOAWAY or WINDOW_UPDATE payload, where the error code or increment
//!   is), and changes one byte only: the increment of a zero WINDOW_UPDATE on a stream
//!   becomes 1, the stream being reset with PROTOCOL_ERROR instead ([`Queued::broke`]),
//!   as RFC 9113 wants, where the crate would end the whole connection. Otherwise a
//!   wrapped connection behaves as the bare one.
//! - [`Tallied`] gives back exactly the bytes the gate read, before anything else.
//! - The scan keeps its place across any split of the bytes into reads and writes; a
//!   payload is skipped by its length, never walked.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::h2_stream::Queued;
use crate::runtime::counters::H2Frames;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const PRIORITY: u8 = 2;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

/// Flags: END_STREAM (DATA), END_HEADERS (CONTINUATION).
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// Frames that ask for no work a connection may send within [`NO_WORK_WINDOW`].
pub const NO_WORK_LIMIT: u32 = 1000;
pub const NO_WORK_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// WINDOW_UPDATE frames each DATA frame sent to the client earns: a client opens windows
/// as it reads what it was sent, on the stream and on the connection (twice that here, for
/// clients that read in small pieces). Updates past it, on a connection that was sent
/// nothing or on streams long closed, do no work (the crate still walks its streams for
/// each). At most [`UPDATE_CREDIT_MAX`] are banked.
pub const UPDATES_PER_DATA: u32 = 4;
const UPDATE_CREDIT_MAX: u32 = 100_000;

/// A frame's header, as the scan found it.
#[derive(Debug, Clone, Copy)]
struct Frame {
    kind: u8,
    flags: u8,
    len: usize,
    stream: u32,
}

impl Frame {
    /// The frame asks for no work: nothing a stream or the connection would do with it.
    fn does_nothing(&self) -> bool {
        match self.kind {
            PRIORITY => true,
            DATA => self.len == 0 && self.flags & END_STREAM == 0,
            CONTINUATION => self.len == 0 && self.flags & END_HEADERS == 0,
            _ => false,
        }
    }
}

/// The client's connection preface, which precedes its first frame.
const PREFACE_LEN: usize = 24;

/// Error codes that report a peer breaking the protocol (RFC 9113, section 7):
/// PROTOCOL_ERROR, FRAME_SIZE_ERROR, COMPRESSION_ERROR.
fn is_protocol_error(code: u32) -> bool {
    matches!(code, 0x1 | 0x6 | 0x9)
}

/// One direction's place in the frame sequence.
#[derive(Debug, Default)]
struct Scan {
    /// Bytes of the connection preface still to pass.
    preface: usize,
    /// The frame header being gathered, and how much of it is in.
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    left: usize,
    /// The first payload bytes of an RST_STREAM or GOAWAY: how many are wanted, and in.
    code: [u8; 8],
    want: usize,
    got: usize,
}

impl Scan {
    /// Follows `bytes`, calling `seen(frame, code, at)` once per frame: at its header, or
    /// for RST_STREAM, GOAWAY and WINDOW_UPDATE once their error code (the increment for a
    /// WINDOW_UPDATE) is in, `at` being the offset in `bytes` of its last byte.
    fn feed(&mut self, whole: &[u8], mut seen: impl FnMut(Frame, Option<u32>, usize)) {
        let mut bytes = whole;
        while !bytes.is_empty() {
            if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                bytes = &bytes[n..];
            } else if self.want > self.got {
                let n = (self.want - self.got).min(bytes.len());
                self.code[self.got..self.got + n].copy_from_slice(&bytes[..n]);
                self.got += n;
                self.left -= n;
                bytes = &bytes[n..];
                if self.got == self.want {
                    let at = self.want - 4;
                    let code = u32::from_be_bytes(self.code[at..at + 4].try_into().unwrap());
                    seen(self.frame(), Some(code), whole.len() - bytes.len() - 1);
                }
            } else if self.left > 0 {
                let n = self.left.min(bytes.len());
                self.left -= n;
                bytes = &bytes[n..];
            } else {
                let n = (9 - self.have).min(bytes.len());
                self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
                self.have += n;
                bytes = &bytes[n..];
                if self.have == 9 {
                    self.have = 0;
                    self.left =
                        u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]) as usize;
                    // RST_STREAM's code is its payload, as is WINDOW_UPDATE's increment;
                    // GOAWAY's follows the last stream id. A payload too short to hold it
                    // has none.
                    self.want = match self.head[3] {
                        RST_STREAM | WINDOW_UPDATE => 4,
                        GOAWAY => 8,
                        _ => 0,
                    };
                    if self.want > self.left {
                        self.want = 0;
                    }
                    self.got = 0;
                    if self.want == 0 {
                        seen(self.frame(), None, 0);
                    }
                }
            }
        }
    }
}

impl Scan {
    /// The frame whose header was read last.
    fn frame(&self) -> Frame {
        Frame {
            kind: self.head[3],
            flags: self.head[4],
            len: u32::from_be_bytes([0, self.head[0], self.head[1], self.head[2]]) as usize,
            stream: u32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]])
                & 0x7fff_ffff,
        }
    }
}

/// A client connection whose HTTP/2 frames are counted into a frontend's counters.
pub struct Tallied<'a, T> {
    io: T,
    counters: &'a H2Frames,
    queued: std::sync::Arc<Queued>,
    read: Scan,
    written: Scan,
    /// Frames that asked for no work in the current window, and when it began.
    no_work: (u32, tokio::time::Instant),
    /// WINDOW_UPDATE frames the DATA sent has earned and the client has not used yet.
    update_credit: u32,
    /// RST_STREAM frames the client's HEADERS (one per stream, or per trailers) allow.
    reset_credit: u32,
    /// Bytes taken from the connection before it was wrapped ([`read_preface`]), read
    /// again first.
    first: Vec<u8>,
    at: usize,
}

impl<'a, T> Tallied<'a, T> {
    /// Wraps `io`, whose first bytes `first` were read already; the DATA written is
    /// reported to `queued`.
    pub fn new(
        io: T,
        (counters, queued): (&'a H2Frames, std::sync::Arc<Queued>),
        first: Vec<u8>,
    ) -> Self {
        Tallied {
            io,
            counters,
            queued,
            first,
            at: 0,
            read: Scan {
                preface: PREFACE_LEN,
                ..Scan::default()
            },
            written: Scan::default(),
            no_work: (0, tokio::time::Instant::now()),
            update_credit: 0,
            reset_credit: 0,
        }
    }

    /// The client sent too many frames that ask for no work: its connection ends.
    fn flooded(&self) -> bool {
        self.no_work.0 > NO_WORK_LIMIT
    }

    /// Follows what was read. A zero WINDOW_UPDATE on a stream is that stream's error
    /// (RFC 9113 §6.9), where the crate would end the connection: its increment becomes 1
    /// (the byte it grants is never used) and the stream is marked for its reset.
    fn received(&mut self, bytes: &mut [u8]) {
        let c = self.counters;
        let mut idle = 0;
        let (credit, resets) = (&mut self.update_credit, &mut self.reset_credit);
        let mut zeroed = Vec::new();
        self.read.feed(bytes, |frame, code, at| {
            idle += u32::from(frame.does_nothing());
            let zero = code.is_some_and(|inc| inc & 0x7fff_ffff == 0);
            if frame.kind == WINDOW_UPDATE && frame.stream != 0 && zero {
                zeroed.push((frame.stream, at));
            }
            // (RST_STREAM and WINDOW_UPDATE are seen once their payload is in.)
            let spent = match (frame.kind, code) {
                (WINDOW_UPDATE, _) => Some(&mut *credit),
                (RST_STREAM, Some(_)) => Some(&mut *resets),
                _ => None,
            };
            if let Some(c) = spent {
                match c.checked_sub(1) {
                    Some(left) => *c = left,
                    None => idle += 1,
                }
            }
            if frame.kind == HEADERS {
                *resets = resets.saturating_add(1);
            }
            match frame.kind {
                HEADERS => c.headers_rcvd.bump(),
                DATA => c.data_rcvd.bump(),
                SETTINGS => c.settings_rcvd.bump(),
                RST_STREAM => c.rst_stream_rcvd.bump(),
                GOAWAY => c.goaway_rcvd.bump(),
                _ => {}
            }
        });
        for (stream, at) in zeroed {
            bytes[at] = 1;
            self.queued.broke(stream);
        }
        if idle > 0 {
            let (n, since) = self.no_work;
            self.no_work = if since.elapsed() > NO_WORK_WINDOW {
                (idle, tokio::time::Instant::now())
            } else {
                (n.saturating_add(idle), since)
            };
        }
    }

    fn sent(&mut self, bytes: &[u8]) {
        let c = self.counters;
        let queued = &self.queued;
        let credit = &mut self.update_credit;
        self.written.feed(bytes, |frame, code, _| {
            let bad = code.is_some_and(is_protocol_error);
            match frame.kind {
                DATA => {
                    queued.written(frame.stream, frame.len);
                    *credit = (*credit + UPDATES_PER_DATA).min(UPDATE_CREDIT_MAX);
                }
                RST_STREAM => {
                    c.rst_stream_resp.bump();
                    if bad {
                        c.strm_proto_err.bump();
                    }
                }
                GOAWAY => {
                    c.goaway_resp.bump();
                    if bad {
                        c.conn_proto_err.bump();
                    }
                }
                _ => {}
            }
        });
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tallied<'_, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let polled = if me.at < me.first.len() {
            let n = (me.first.len() - me.at).min(buf.remaining());
            buf.put_slice(&me.first[me.at..me.at + n]);
            me.at += n;
            Poll::Ready(Ok(()))
        } else {
            Pin::new(&mut me.io).poll_read(cx, buf)
        };
        if let Poll::Ready(Ok(())) = polled {
            me.received(&mut buf.filled_mut()[before..]);
            if me.flooded() {
                // The crate ends the connection on a read error.
                return Poll::Ready(Err(io::Error::other(
                    "too many HTTP/2 frames that ask for no work",
                )));
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tallied<'_, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let polled = Pin::new(&mut me.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            me.sent(&buf[..n]);
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let polled = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = polled {
            for b in bufs {
                let take = n.min(b.len());
                me.sent(&b[..take]);
                n -= take;
                if n == 0 {
                    break;
                }
            }
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The first bytes a cleartext HTTP/2 client must send: the connection preface, then the
/// header of a SETTINGS frame (RFC 9113 §3.4).
const GATE_LEN: usize = PREFACE_LEN + 9;
const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads a cleartext client's first bytes before the `h2` crate sees the connection (it
/// sends its own SETTINGS before reading anything): `None` when they are not the
/// connection preface followed by SETTINGS (an HTTP/1 request on a `proto h2` port, a
/// HEADERS frame first), so the connection is closed without a byte sent, as HAProxy
/// does. Otherwise the bytes read, to be given back to the crate ([`Tallied::new`]).
pub async fn read_preface(conn: &crate::transport::Socket, read: Vec<u8>) -> Option<Vec<u8>> {
    let mut got = read;
    let mut have = got.len();
    if got.len() < GATE_LEN {
        got.resize(GATE_LEN, 0);
    }
    let seen = have.min(PREFACE_LEN);
    if got[..seen] != PREFACE[..seen] {
        return None;
    }
    while have < GATE_LEN {
        conn.readable().await.ok()?;
        match conn.try_read(&mut got[have..]) {
            Ok(0) => return None,
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
        let seen = have.min(PREFACE_LEN);
        if got[..seen] != PREFACE[..seen] {
            return None;
        }
    }
    (got[PREFACE_LEN + 3] == SETTINGS).then_some(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(out: &mut Vec<u8>, kind: u8, stream: u32, payload: &[u8]) {
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
        out.push(kind);
        out.push(0);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
    }

    /// The frames seen in `bytes` cut into pieces of `step` bytes.
    fn seen(bytes: &[u8], preface: usize, step: usize) -> Vec<(u8, Option<u32>)> {
        let mut scan = Scan {
            preface,
            ..Scan::default()
        };
        let mut out = Vec::new();
        for piece in bytes.chunks(step) {
            scan.feed(piece, |f, c, _| out.push((f.kind, c)));
        }
        out
    }

    #[test]
    fn frames_are_found_across_any_split_of_the_bytes() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        frame(&mut bytes, SETTINGS, 0, &[0, 3, 0, 0, 0, 100]);
        frame(&mut bytes, HEADERS, 1, &[0x82; 20]);
        frame(&mut bytes, DATA, 1, &[7; 1000]);
        frame(&mut bytes, RST_STREAM, 1, &8u32.to_be_bytes());
        let mut goaway = 5u32.to_be_bytes().to_vec();
        goaway.extend_from_slice(&1u32.to_be_bytes());
        goaway.extend_from_slice(b"debug data");
        frame(&mut bytes, GOAWAY, 0, &goaway);
        frame(&mut bytes, DATA, 3, &[]);
        let want = vec![
            (SETTINGS, None),
            (HEADERS, None),
            (DATA, None),
            (RST_STREAM, Some(8)),
            (GOAWAY, Some(1)),
            (DATA, None),
        ];
        for step in [1, 2, 3, 5, 9, 10, 64, 4096] {
            assert_eq!(seen(&bytes, PREFACE_LEN, step), want, "pieces of {step}");
        }
    }

    #[test]
    fn a_payload_too_short_for_an_error_code_has_none() {
        let mut bytes = Vec::new();
        frame(&mut bytes, RST_STREAM, 1, &[0, 1]);
        frame(&mut bytes, GOAWAY, 0, &[0, 0, 0, 0, 0, 0]);
        frame(&mut bytes, HEADERS, 3, &[1]);
        assert_eq!(
            seen(&bytes, 0, 1),
            vec![(RST_STREAM, None), (GOAWAY, None), (HEADERS, None)]
        );
    }

    #[test]
    fn frames_that_ask_for_no_work_are_told_apart() {
        let no_work = |kind, flags, len| {
            Frame {
                kind,
                flags,
                len,
                stream: 1,
            }
            .does_nothing()
        };
        assert!(no_work(PRIORITY, 0, 5));
        assert!(no_work(DATA, 0, 0));
        assert!(
            !no_work(DATA, END_STREAM, 0),
            "an empty DATA that ends its stream"
        );
        assert!(!no_work(DATA, 0, 1));
        assert!(no_work(CONTINUATION, 0, 0));
        assert!(!no_work(CONTINUATION, END_HEADERS, 0));
        assert!(!no_work(HEADERS, 0, 0));
        assert!(!no_work(SETTINGS, 0, 0));
    }
}
