//! HTTP/3 requests as TLS early data (0-RTT, `allow-0rtt` on a QUIC bind): the handshake a
//! connection follows while it already serves ([`Handshaking`]), and which early requests
//! go at once ([`early_request`]).
//!
//! Invariants:
//! - Early data is taken only on sessions resumed from the bind's cache ([`StatefulTickets`]:
//!   rustls then takes each ticket once, so a replayed first flight gets no early data).
//! - No request but a GET, HEAD, OPTIONS or TRACE reaches a server before its connection's
//!   handshake has ended, and none at all when `wait-for-handshake` is in the frontend or
//!   any backend; a request waiting for a handshake that fails, or that does not end
//!   within `timeout http-request`, is dropped unanswered.
//! - A connection's handshake counts once: done (`tls_handshakes`, `CumSslConns`,
//!   `quic_conns`, and `CurrSslConns` until the connection ends) or failed (`tls_failed`).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::deadline::within;
use crate::conf::listen::Bind;
use crate::runtime::Worker;

/// A QUIC bind takes TLS early data: its own `allow-0rtt`, or `ssl-default-bind-options`'.
pub(super) fn takes_early_data(w: &Worker, bind: &Bind) -> bool {
    let defaults = w.config().global.tls.bind.options.allow_0rtt;
    bind.tls.as_ref().is_some_and(|t| t.allow_0rtt) || defaults
}

/// Where a connection's TLS handshake stands for its requests: done, failed, or
/// (`allow-0rtt`) under way while requests that came as early data are read.
#[derive(Debug, Default)]
pub(super) struct Handshake {
    /// `Some(true)` once done, `Some(false)` once failed.
    ended: Cell<Option<bool>>,
    changed: tokio::sync::Notify,
}

impl Handshake {
    fn end(&self, done: bool) {
        if self.ended.get().is_none() {
            self.ended.set(Some(done));
            self.changed.notify_waiters();
        }
    }

    pub(super) fn is_done(&self) -> bool {
        self.ended.get() == Some(true)
    }

    /// Whether the handshake ended done (false: it failed), once it has ended.
    async fn wait(&self) -> bool {
        loop {
            let changed = self.changed.notified();
            if let Some(done) = self.ended.get() {
                return done;
            }
            changed.await;
        }
    }
}

/// `http-request wait-for-handshake` is in frontend `fe` or in any backend (whatever its
/// condition: an early request waits before it is routed).
pub(super) fn waits_for_handshake(config: &crate::conf::Config, fe: usize) -> bool {
    use crate::conf::rules::Action;
    let waits = |rules: &[crate::conf::rules::Rule]| {
        rules
            .iter()
            .any(|r| matches!(r.action, Action::WaitForHandshake))
    };
    waits(&config.frontends[fe].rules.http_request)
        || config.backends.iter().any(|b| waits(&b.rules.http_request))
}

/// Ends a handshake as failed when dropped, unless it ended before.
struct Unblock(Rc<Handshake>);

impl Drop for Unblock {
    fn drop(&mut self) {
        self.0.end(false);
    }
}

/// Tickets that name a session of the server's cache rather than carry it (rustls makes
/// them when no stateless ticket maker is enabled).
#[derive(Debug)]
pub(super) struct StatefulTickets;

impl rustls::server::ProducesTickets for StatefulTickets {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The connection once it may serve requests: with `early` (`allow-0rtt`) at once, with
/// the handshake's end still to come; else once its handshake is done, within `limit`.
pub(super) async fn opening(
    connecting: quinn::Connecting,
    early: bool,
    limit: Option<Duration>,
) -> Option<(quinn::Connection, Option<quinn::ZeroRttAccepted>)> {
    let mut connecting = connecting;
    if early {
        // The whole ClientHello first (it may span datagrams): what the connection's
        // TLS fetches see (SNI, ALPN) is read from it once.
        if !matches!(within(limit, connecting.handshake_data()).await, Ok(Ok(_))) {
            return None;
        }
        match connecting.into_0rtt() {
            Ok((conn, end)) => return Some((conn, Some(end))),
            Err(back) => connecting = back,
        }
    }
    match within(limit, connecting).await {
        Ok(Ok(conn)) => Some((conn, None)),
        _ => None,
    }
}

/// A half-open connection, counted until its handshake ends either way.
pub(super) struct HalfOpen(Rc<Cell<u32>>);

impl HalfOpen {
    pub(super) fn new(count: Rc<Cell<u32>>) -> HalfOpen {
        count.set(count.get() + 1);
        HalfOpen(count)
    }
}

impl Drop for HalfOpen {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// A connection's handshake as the connection's task follows it: counted once done (at
/// once without early data), failed when it does not end in time.
pub(super) struct Handshaking {
    w: Rc<Worker>,
    fe: usize,
    conn: quinn::Connection,
    /// What its requests see of it.
    pub state: Rc<Handshake>,
    /// The connection counts as half open until the handshake ends.
    half_open: Option<HalfOpen>,
    /// The TLS session's count, held from the handshake's end to the connection's.
    counted: Option<super::TlsEnd>,
    /// The end still to come (early data): whether it came within the limit and quinn's
    /// word on it (whether early data was taken).
    end: Option<Pin<Box<dyn Future<Output = Option<bool>>>>>,
    _unblock: Unblock,
}

impl Handshaking {
    /// Follows `conn`'s handshake, whose end is still to come when `end` is given (within
    /// `limit`), else done now.
    pub fn new(
        (w, fe): (Rc<Worker>, usize),
        conn: quinn::Connection,
        half_open: HalfOpen,
        (end, limit): (Option<quinn::ZeroRttAccepted>, Option<Duration>),
    ) -> Handshaking {
        let state = Rc::new(Handshake::default());
        let end = end.map(|end| -> Pin<Box<dyn Future<Output = Option<bool>>>> {
            Box::pin(async move { within(limit, end).await.ok() })
        });
        let mut h = Handshaking {
            w,
            fe,
            conn,
            state: state.clone(),
            half_open: Some(half_open),
            counted: None,
            end,
            _unblock: Unblock(state),
        };
        if h.end.is_none() {
            h.done();
        }
        h
    }

    /// The end is still to come.
    pub fn pending(&self) -> bool {
        self.end.is_some()
    }

    /// Resolves with the end when it comes (never when none is to come).
    pub async fn ended(&mut self) -> Option<bool> {
        match &mut self.end {
            Some(end) => end.await,
            None => std::future::pending().await,
        }
    }

    /// Takes the end in, if quinn has seen it by now; false when the handshake failed (the
    /// connection is then closed).
    pub fn check_now(&mut self) -> bool {
        let Some(end) = &mut self.end else {
            return true;
        };
        let mut now = Context::from_waker(std::task::Waker::noop());
        match end.as_mut().poll(&mut now) {
            Poll::Ready(ended) => self.settle(ended),
            Poll::Pending => true,
        }
    }

    /// Takes the end in: counted when done, else the connection closed (false). (`None`:
    /// not within the limit. quinn's future says whether early data was taken, which
    /// means the handshake is done; when it was not, the connection's state tells.)
    pub fn settle(&mut self, ended: Option<bool>) -> bool {
        self.end = None;
        let done = ended == Some(true) || (ended.is_some() && self.conn.close_reason().is_none());
        if !done {
            self.failed();
            self.conn.close(0u32.into(), b"");
            return false;
        }
        self.done();
        true
    }

    /// The connection ends: a handshake that has not ended by now failed.
    pub fn finish(&mut self) {
        if self.end.take().is_some() {
            self.failed();
        }
    }

    fn done(&mut self) {
        self.end_with(true).tls_handshakes.bump();
        let w = &self.w;
        w.ctx().counters.tls_sessions.bump();
        w.ctx().counters.quic_conns.bump();
        self.counted = Some(super::TlsEnd(w.clone()));
    }

    fn failed(&mut self) {
        self.end_with(false).tls_failed.bump();
    }

    /// The handshake ends (no longer half open): its frontend's counters, to count how.
    fn end_with(&mut self, done: bool) -> &crate::runtime::counters::ProxyCounters {
        self.half_open.take();
        self.state.end(done);
        self.w.state().frontends[self.fe].counters.at(self.w.tid)
    }
}

/// A request that came before its connection's handshake was done (`allow-0rtt`), which
/// could be a replay: a safe method is served at once, its server told by `Early-Data: 1`
/// (RFC 8470), as HAProxy tells it; any other, or any at all under `http-request
/// wait-for-handshake`, waits for the handshake, which a replay never completes. Whether
/// it is served as early data (`None`: the handshake did not end within `limit`).
pub(super) async fn early_request(
    parts: &mut http::request::Parts,
    (handshake, all_wait): (&Handshake, bool),
    limit: Option<Duration>,
) -> Option<bool> {
    use http::Method;
    let safe = [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE].contains(&parts.method);
    if safe && !all_wait {
        let one = http::HeaderValue::from_static("1");
        parts.headers.insert("early-data", one);
        return Some(true);
    }
    match within(limit, handshake.wait()).await {
        Ok(true) => Some(false),
        // Failed, or not ended in time: the request is not served.
        Ok(false) | Err(()) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: http::Method) -> http::request::Parts {
        let (parts, ()) = http::Request::builder()
            .method(method)
            .uri("/")
            .body(())
            .unwrap_or_default()
            .into_parts();
        parts
    }

    /// An early safe request goes at once, marked; any other waits for the handshake's
    /// end, and is refused when it does not come in time.
    #[test]
    fn early_requests_are_marked_or_wait_for_the_handshake() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let handshake = Handshake::default();
            let mut get = request(http::Method::GET);
            assert_eq!(
                early_request(&mut get, (&handshake, false), None).await,
                Some(true)
            );
            assert_eq!(get.headers["early-data"], "1");
            // Under `wait-for-handshake`, a GET waits too.
            let short = Some(Duration::from_millis(1));
            let mut held = request(http::Method::GET);
            assert_eq!(
                early_request(&mut held, (&handshake, true), short).await,
                None
            );
            let mut post = request(http::Method::POST);
            assert_eq!(
                early_request(&mut post, (&handshake, false), short).await,
                None
            );
            let waiting = early_request(&mut post, (&handshake, false), None);
            let finish = async { handshake.end(true) };
            let (served, ()) = tokio::join!(waiting, finish);
            assert_eq!(served, Some(false));
            assert!(!post.headers.contains_key("early-data"));
            // A handshake that fails releases what waits for it, unserved.
            let failing = Handshake::default();
            let mut put = request(http::Method::PUT);
            let waiting = early_request(&mut put, (&failing, false), None);
            let (served, ()) = tokio::join!(waiting, async { failing.end(false) });
            assert_eq!(served, None);
        });
    }
}
