//! Relaying bytes both ways between two connections: upgraded HTTP connections (after a
//! 101) and `mode tcp` proxies. Each side's end of stream is passed on to the other as a
//! half-close; the relay ends when both sides have finished, on an error, or when nothing
//! moved for the inactivity limit, reading or writing: a peer that stops reading cannot pin
//! the tunnel.

use std::time::Duration;

use super::deadline::within;
use crate::buffer::{Buf, BufPool};
use crate::transport::Conn;

/// Inactivity limits of a relay: `idle` while both directions are open; once `a` (the
/// client) has finished, `b_fin` (`timeout server-fin`) while waiting on `b`, and once `b`
/// has finished, `a_fin` (`timeout client-fin`) while waiting on `a`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    pub idle: Option<Duration>,
    pub a_fin: Option<Duration>,
    pub b_fin: Option<Duration>,
}

/// The inactivity limit of a relay with these client and server timeouts (`None`: none):
/// the first to run out, as HAProxy's (bytes moving either way refresh both sides).
pub(crate) fn first_limit(client: Option<Duration>, server: Option<Duration>) -> Option<Duration> {
    match (client, server) {
        (Some(c), Some(s)) => Some(c.min(s)),
        (one, None) | (None, one) => one,
    }
}

/// Bytes a relay delivered each way.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Moved {
    pub to_a: u64,
    pub to_b: u64,
    /// The relay ended because nothing moved for its inactivity limit.
    pub idle: bool,
}

/// Told the bytes delivered each way as they go (`option contstats`): (to `b`, to `a`).
pub(crate) type Progress<'p> = Option<&'p dyn Fn(u64, u64)>;

/// Relays until both directions are done. Bytes already in `a_buf` (read from `a`) and
/// `b_buf` (read from `b`) are delivered first.
pub(crate) async fn relay(
    a: &mut Conn,
    b: &mut Conn,
    (a_buf, b_buf): (&mut Buf, &mut Buf),
    bufs: &BufPool,
    limits: Limits,
    progress: Progress<'_>,
) -> Moved {
    let mut moved = Moved::default();
    let told = |to_b: u64, to_a: u64| {
        if let Some(p) = progress {
            p(to_b, to_a);
        }
    };
    if !a_buf.is_empty() {
        let n = a_buf.bytes().len();
        if !deliver(b, a_buf, limits.idle).await {
            return moved;
        }
        moved.to_b += n as u64;
        told(n as u64, 0);
    }
    if !b_buf.is_empty() {
        let n = b_buf.bytes().len();
        if !deliver(a, b_buf, limits.idle).await {
            return moved;
        }
        moved.to_a += n as u64;
        told(0, n as u64);
    }
    let (mut a_done, mut b_done) = (false, false);
    while !(a_done && b_done) {
        let limit = match (a_done, b_done) {
            (true, false) => limits.b_fin.or(limits.idle),
            (false, true) => limits.a_fin.or(limits.idle),
            _ => limits.idle,
        };
        let quiet = async {
            match limit {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = a_buf.fill(a, bufs), if !a_done => match r {
                Ok(n) if n > 0 => {
                    if !deliver(b, a_buf, limit).await {
                        return moved;
                    }
                    moved.to_b += n as u64;
                    told(n as u64, 0);
                }
                _ => {
                    a_done = true;
                    let _ = within(limit, b.shutdown()).await;
                }
            },
            r = b_buf.fill(b, bufs), if !b_done => match r {
                Ok(n) if n > 0 => {
                    if !deliver(a, b_buf, limit).await {
                        return moved;
                    }
                    moved.to_a += n as u64;
                    told(0, n as u64);
                }
                _ => {
                    b_done = true;
                    let _ = within(limit, a.shutdown()).await;
                }
            },
            _ = quiet => return Moved { idle: true, ..moved },
        }
    }
    moved
}

/// Writes everything `buf` holds to `to` within `limit`; false when the peer failed or
/// stopped reading for that long.
async fn deliver(to: &mut Conn, buf: &mut Buf, limit: Option<Duration>) -> bool {
    let ok = matches!(within(limit, to.write_all(buf.bytes())).await, Ok(Ok(())));
    let n = buf.bytes().len();
    buf.consume(n);
    ok
}
