//! A request body's way to its server, past what the first write took: early answers
//! watched while it goes (a server refusing an upload is heard at once), and the rest of a
//! body of known length spliced from client to server (`option splice-request`).
//!
//! Invariants:
//! - An upload stops at an early answer of 300 or more (the answer is then in the server
//!   buffer, for the response to relay); an interim answer or an early 2xx changes nothing.
//! - Spliced bytes count as received from the client (once in the pipe), as copied ones
//!   do.
//! - A splice cut short (an early answer, a failure) drops its pipe with what it held: the
//!   body is not sent whole either way.

use std::io;
use std::time::Duration;

use sluice_http::parse_response;

use super::connect::ServerConn;
use super::deadline::within;
use super::report::{Cause, Fail, Phase};
use super::session::Session;
use crate::buffer::{Buf, BufPool};
use crate::transport::Conn;

/// Why sending a request or reading its response head failed.
pub(super) enum SendFail {
    /// The connection died before any response byte: a replay may be possible.
    Retryable(io::Error),
    Fail(Fail),
}

/// What a write of the request to the server came to: a failure may be retried elsewhere;
/// `timeout server` striking is a 504.
pub(super) fn sent_to_server(r: Result<io::Result<()>, ()>) -> Result<(), SendFail> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(SendFail::Retryable(e)),
        Err(()) => Err(server_timeout()),
    }
}

fn server_timeout() -> SendFail {
    SendFail::Fail(Fail::answer(504, Cause::ServerTimeout, Phase::Headers))
}

/// Waits for more of the request body (`false`), or for the server to refuse the rest of
/// it (`true`; the answer's bytes are in the server buffer): an early answer of 300 or more
/// (a 413 or a 401 to an upload) reaches the client at once rather than after the whole
/// upload, and the upload stops there (HAProxy keeps relaying the body while the server
/// reads it; a server that answers this early rarely does). An interim `100 Continue`, a
/// `101`, or a 2xx sent before the body is all in (some servers stream their answer while
/// they read) change nothing: the upload goes on, and those are relayed once it is done
/// (`watching` turns off). Watched on plain TCP server connections (a TLS one may be
/// readable for a session ticket alone; an HTTP/2 stream's answer waits, for now, until the
/// body is sent).
pub(super) async fn more_body_or_answer(
    s: &mut Session,
    conn: &mut ServerConn,
    watching: &mut bool,
) -> Result<bool, Cause> {
    if !*watching || conn.conn.is_tls() || conn.conn.is_stream() {
        return s.read_client().await.map(|()| false);
    }
    loop {
        tokio::select! {
            biased;
            // The server first: a steady upload must not hide its answer.
            r = conn.conn.readable() => {
                if r.is_err() {
                    return Ok(true);
                }
            }
            r = s.read_client() => return r.map(|()| false),
        }
        match server_refused(s, conn).await {
            Some(refused) if refused => return Ok(true),
            Some(_) => {
                *watching = false;
                return s.read_client().await.map(|()| false);
            }
            None => {}
        }
    }
}

/// A write of the request body failed: whether the server had answered first (a server
/// that refuses an upload often closes at once, and its answer is still to be read).
pub(super) async fn answered_before_failing(s: &mut Session, conn: &mut ServerConn) -> bool {
    !conn.conn.is_stream() && server_refused(s, conn).await.is_some() && !s.sbuf.is_empty()
}

/// Takes what the server sent without waiting: whether it is the start of an answer that
/// refuses the rest of the upload (`Some(true)`: 300 or more, or the connection closed),
/// one that does not (`Some(false)`), or not enough to say (`None`).
pub(super) async fn server_refused(s: &mut Session, conn: &mut ServerConn) -> Option<bool> {
    let w = s.w.clone();
    refusal(&mut s.sbuf, &conn.conn, &w.bufs).await
}

/// [`server_refused`] over the server buffer and connection themselves (for a caller that
/// holds other parts of the session meanwhile).
async fn refusal(sbuf: &mut Buf, server: &Conn, bufs: &BufPool) -> Option<bool> {
    // A zero limit: the bytes the socket holds, or nothing (readiness may be stale).
    let read = within(Some(Duration::ZERO), sbuf.fill(server, bufs)).await;
    if let Ok(Ok(0) | Err(_)) = read {
        return Some(true);
    }
    early_status(sbuf.bytes()).map(|status| status >= 300)
}

/// The status of the first answer after any whole interim ones (`100`-`199` but `101`),
/// once its status line is in.
pub(super) fn early_status(mut bytes: &[u8]) -> Option<u16> {
    loop {
        match parse_response(bytes, false) {
            Ok(Some(rsp)) if (100..200).contains(&rsp.status) && rsp.status != 101 => {
                bytes = &bytes[rsp.len..];
            }
            Ok(Some(rsp)) => return Some(rsp.status),
            // A head not whole yet: its status line says (`HTTP/1.x NNN`).
            Ok(None) => {
                let code = std::str::from_utf8(bytes.get(9..12)?).ok()?.parse().ok()?;
                return bytes
                    .starts_with(b"HTTP/1.")
                    .then_some(code)
                    .filter(|c: &u16| !(100..200).contains(c) || *c == 101);
            }
            // Not HTTP: reading the answer says so.
            Err(_) => return Some(999),
        }
    }
}

/// How a spliced rest of a body ended.
pub(super) enum Spliced {
    /// No splice: not two sockets in clear, or no pipe to be had (the caller copies).
    No,
    /// The body is all sent.
    Sent,
    /// The server answered early and refused the rest ([`more_body_or_answer`]'s `true`).
    Refused,
}

/// Splices the body's last `remaining` bytes from the client to the server (what the
/// client buffer held is sent), watching for an early answer meanwhile when `watching`.
pub(super) async fn splice_rest(
    s: &mut Session,
    conn: &mut ServerConn,
    remaining: u64,
    watching: bool,
    tserver: Option<Duration>,
) -> Result<Spliced, SendFail> {
    use crate::transport::splice::{self, Stopped};
    let w = s.w.clone();
    let tclient = w.config().frontends[s.fe].stream.timeout_client;
    let (Some(from), Some(to)) = (s.client.plain_tcp(), conn.conn.plain_tcp()) else {
        return Ok(Spliced::No);
    };
    let Some(mut lease) = super::tunnel::pipe(&w) else {
        return Ok(Spliced::No);
    };
    let mut moved = 0;
    let done = {
        let forward = splice::forward(
            from,
            to,
            &mut lease,
            remaining,
            (tclient, tserver),
            &mut moved,
        );
        tokio::pin!(forward);
        let mut watching = watching;
        loop {
            tokio::select! {
                biased;
                r = conn.conn.readable(), if watching => {
                    if r.is_err() {
                        break None;
                    }
                    match refusal(&mut s.sbuf, &conn.conn, &w.bufs).await {
                        Some(true) => break None,
                        Some(false) => watching = false,
                        None => {}
                    }
                }
                r = &mut forward => break Some(r),
            }
        }
    };
    // Received: what reached the server, and what the pipe still held.
    s.received += moved + lease.held();
    drop(lease);
    match done {
        None => Ok(Spliced::Refused),
        Some(Ok(())) => Ok(Spliced::Sent),
        Some(Err(Stopped::Read(e))) => Err(from_client(Cause::ClientClosed(e))),
        Some(Err(Stopped::ReadTimeout)) => Err(from_client(Cause::ClientTimeout)),
        Some(Err(Stopped::Write(e))) if !answered_before_failing(s, conn).await => {
            Err(SendFail::Retryable(e))
        }
        Some(Err(Stopped::Write(_))) => Ok(Spliced::Refused),
        Some(Err(Stopped::WriteTimeout)) => Err(server_timeout()),
    }
}

/// A failure on the client's side while its body is sent.
pub(super) fn from_client(c: Cause) -> SendFail {
    SendFail::Fail(match c {
        Cause::ClientTimeout => Fail::answer(408, c, Phase::Headers),
        c => Fail::drop(c, Phase::Headers),
    })
}
