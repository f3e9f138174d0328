//! Relaying bytes both ways between two connections: upgraded HTTP connections (after a
//! 101) and `mode tcp` proxies. Each side's end of stream is passed on to the other as a
//! half-close; the relay ends when both sides have finished, on an error, or when nothing
//! moved for the inactivity limit, reading or writing: a peer that stops reading cannot pin
//! the tunnel.

use std::time::{Duration, Instant};

use super::deadline::within;
use crate::buffer::{Buf, BufPool};
use crate::transport::splice::{self, Lease, Stopped};
use crate::transport::Conn;

/// The pipes of the directions spliced rather than copied (`option splice-*`, both sides
/// sockets in clear): towards `b` (the server) and towards `a` (the client).
#[derive(Default)]
pub(crate) struct Spliced<'p> {
    pub to_b: Option<Lease<'p>>,
    pub to_a: Option<Lease<'p>>,
}

/// What a stream between frontend `fe` and backend `be` may splice: `option splice-*` on
/// either side, nothing under the global `nosplice`.
pub(crate) fn splicing(
    w: &crate::runtime::Worker,
    fe: &crate::conf::Frontend,
    be: &crate::conf::Backend,
) -> crate::conf::stream::Splice {
    match w.config().global.nosplice {
        true => Default::default(),
        false => fe.stream.splice.or(be.stream.splice),
    }
}

/// The pipes of the directions `splice` asks for ([`splicing`]), when both connections
/// are sockets in clear and pipes are to be had (else those directions are copied).
pub(crate) fn spliced<'w>(
    w: &'w crate::runtime::Worker,
    splice: crate::conf::stream::Splice,
    (client, server): (&Conn, &Conn),
) -> Spliced<'w> {
    if client.plain_tcp().is_none() || server.plain_tcp().is_none() {
        return Default::default();
    }
    Spliced {
        to_b: splice.request.then(|| pipe(w)).flatten(),
        to_a: splice.response.then(|| pipe(w)).flatten(),
    }
}

/// A pipe of this worker's for a spliced stream or body (`None`: `maxpipes` reached, or
/// the system refused one).
pub(crate) fn pipe(w: &crate::runtime::Worker) -> Option<Lease<'_>> {
    let p = &w.process;
    let max = splice::max_pipes(&p.config.global, p.admission.global_limit());
    w.pipes.take(&p.pipes, max, p.config.global.pipesize)
}

/// Inactivity limits of a relay. Each side has its own: `a_idle` (the client's, `timeout
/// client`) and `b_idle` (the server's, `timeout server`); a tunnel's `timeout tunnel` is
/// both. Bytes read from a side are its activity, and so are bytes written to it unless
/// that side is `independent` (`option independent-streams`): the relay ends when a side
/// has been inactive for its limit. Once `a` (the client) has finished, `b_fin` (`timeout
/// server-fin`) limits the wait on `b`, and once `b` has finished, `a_fin` (`timeout
/// client-fin`) the wait on `a`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    pub a_idle: Option<Duration>,
    pub b_idle: Option<Duration>,
    /// Bytes written to that side do not count as its activity.
    pub independent: (bool, bool),
    pub a_fin: Option<Duration>,
    pub b_fin: Option<Duration>,
}

impl Limits {
    /// Limits with `timeout tunnel` (else the client's and server's timeouts).
    pub fn new(
        tunnel: Option<Duration>,
        (client, server): (Option<Duration>, Option<Duration>),
        independent: (bool, bool),
        (a_fin, b_fin): (Option<Duration>, Option<Duration>),
    ) -> Limits {
        Limits {
            a_idle: tunnel.or(client),
            b_idle: tunnel.or(server),
            independent,
            a_fin,
            b_fin,
        }
    }
}

/// The side of a relay that stayed inactive past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// `a`, the client (HAProxy's `cD`).
    A,
    /// `b`, the server (`sD`).
    B,
}

/// Told the bytes delivered each way as they go (`option contstats`): (to `b`, to `a`).
pub(crate) type Progress<'p> = Option<&'p dyn Fn(u64, u64)>;

/// Bytes a relay delivered each way.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Moved {
    pub to_a: u64,
    pub to_b: u64,
    /// The relay ended because this side was inactive for its limit.
    pub idle: Option<Side>,
}

/// When each side was last active, and what follows from it.
struct Activity {
    limits: Limits,
    a: Instant,
    b: Instant,
}

impl Activity {
    /// Bytes moved from `from`: activity of the side read, and of the side written unless
    /// it is independent.
    fn moved(&mut self, from: Side) {
        let now = Instant::now();
        let (ind_a, ind_b) = self.limits.independent;
        match from {
            Side::A => {
                self.a = now;
                if !ind_b {
                    self.b = now;
                }
            }
            Side::B => {
                self.b = now;
                if !ind_a {
                    self.a = now;
                }
            }
        }
    }

    /// The side that runs out first and when, given which sides have finished.
    fn next_out(&self, (a_done, b_done): (bool, bool)) -> Option<(Instant, Side)> {
        let l = &self.limits;
        let a = || l.a_idle.map(|d| (self.a + d, Side::A));
        let b = || l.b_idle.map(|d| (self.b + d, Side::B));
        match (a_done, b_done) {
            // Waiting on the server only, or on the client only.
            (true, false) => l.b_fin.map(|d| (self.b + d, Side::B)).or_else(b),
            (false, true) => l.a_fin.map(|d| (self.a + d, Side::A)).or_else(a),
            _ => match (a(), b()) {
                (Some(x), Some(y)) => Some(if y.0 < x.0 { y } else { x }),
                (one, None) | (None, one) => one,
            },
        }
    }
}

/// Relays until both directions are done. Bytes already in `a_buf` (read from `a`) and
/// `b_buf` (read from `b`) are delivered first.
pub(crate) async fn relay(
    a: &mut Conn,
    b: &mut Conn,
    (a_buf, b_buf): (&mut Buf, &mut Buf),
    (bufs, mut spliced): (&BufPool, Spliced<'_>),
    limits: Limits,
    progress: Progress<'_>,
) -> Moved {
    let mut moved = Moved::default();
    let told = |to_b: u64, to_a: u64| {
        if let Some(p) = progress {
            p(to_b, to_a);
        }
    };
    let now = Instant::now();
    let mut active = Activity {
        limits,
        a: now,
        b: now,
    };
    if !a_buf.is_empty() {
        let n = a_buf.bytes().len();
        if !deliver(b, a_buf, limits.b_idle).await {
            return moved;
        }
        moved.to_b += n as u64;
        told(n as u64, 0);
    }
    if !b_buf.is_empty() {
        let n = b_buf.bytes().len();
        if !deliver(a, b_buf, limits.a_idle).await {
            return moved;
        }
        moved.to_a += n as u64;
        told(0, n as u64);
    }
    let (mut a_done, mut b_done) = (false, false);
    while !(a_done && b_done) {
        let out = active.next_out((a_done, b_done));
        let quiet = async {
            match out {
                Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let (to_b, to_a) = (spliced.to_b.is_some(), spliced.to_a.is_some());
        tokio::select! {
            r = pass(&*a, &*b, spliced.to_b.as_mut(), limits.b_idle), if !a_done && to_b => match r {
                Ok(n) if n > 0 => {
                    moved.to_b += n;
                    active.moved(Side::A);
                    told(n, 0);
                }
                Ok(_) | Err(Stopped::Read(_) | Stopped::ReadTimeout) => {
                    a_done = true;
                    let _ = within(limits.b_idle, b.shutdown()).await;
                }
                Err(Stopped::Write(_) | Stopped::WriteTimeout) => return moved,
            },
            r = pass(&*b, &*a, spliced.to_a.as_mut(), limits.a_idle), if !b_done && to_a => match r {
                Ok(n) if n > 0 => {
                    moved.to_a += n;
                    active.moved(Side::B);
                    told(0, n);
                }
                Ok(_) | Err(Stopped::Read(_) | Stopped::ReadTimeout) => {
                    b_done = true;
                    let _ = within(limits.a_idle, a.shutdown()).await;
                }
                Err(Stopped::Write(_) | Stopped::WriteTimeout) => return moved,
            },
            r = a_buf.fill(&*a, bufs), if !a_done && !to_b => match r {
                Ok(n) if n > 0 => {
                    if !deliver(b, a_buf, limits.b_idle).await {
                        return moved;
                    }
                    moved.to_b += n as u64;
                    active.moved(Side::A);
                    told(n as u64, 0);
                }
                _ => {
                    a_done = true;
                    let _ = within(limits.b_idle, b.shutdown()).await;
                }
            },
            r = b_buf.fill(&*b, bufs), if !b_done && !to_a => match r {
                Ok(n) if n > 0 => {
                    if !deliver(a, b_buf, limits.a_idle).await {
                        return moved;
                    }
                    moved.to_a += n as u64;
                    active.moved(Side::B);
                    told(0, n as u64);
                }
                _ => {
                    b_done = true;
                    let _ = within(limits.a_idle, a.shutdown()).await;
                }
            },
            _ = quiet => {
                return Moved {
                    idle: out.map(|(_, side)| side),
                    ..moved
                };
            }
        }
    }
    moved
}

/// Splices what `from` has to `to` through `lease` (never done without one).
async fn pass(
    from: &Conn,
    to: &Conn,
    lease: Option<&mut Lease<'_>>,
    limit: Option<Duration>,
) -> Result<u64, Stopped> {
    match (from.plain_tcp(), to.plain_tcp(), lease) {
        (Some(from), Some(to), Some(lease)) => splice::pass(from, to, lease, limit).await,
        _ => std::future::pending().await,
    }
}

/// Writes everything `buf` holds to `to` within `limit`; false when the peer failed or
/// stopped reading for that long.
async fn deliver(to: &mut Conn, buf: &mut Buf, limit: Option<Duration>) -> bool {
    let ok = matches!(within(limit, to.write_all(buf.bytes())).await, Ok(Ok(())));
    let n = buf.bytes().len();
    buf.consume(n);
    ok
}
