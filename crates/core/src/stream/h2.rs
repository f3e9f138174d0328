//! The HTTP/2 front: a client connection that speaks HTTP/2 (`proto h2`, or TLS whose ALPN
//! chose `h2`) is driven by the `h2` crate on its worker, and each of its streams is served
//! as an HTTP/1.1 session of its own, in a task of its own, whose connection is the stream
//! itself (`crate::h2_stream`). So every stream goes through the same head checks, rules,
//! routing, queues, pools, compression and logs as an HTTP/1.1 request.
//!
//! A stream's request head reaches its session as the `h2` crate decoded it
//! (`sluice_http::RequestView::h2`: `:authority` reads as `Host`, cookies joined), never as
//! text; its body is read as it comes, as data (with `Content-Length` when the client gave
//! one, else delimited by the stream, its trailers aside). A tunnel's request (CONNECT,
//! and a WebSocket's extended CONNECT) still reads as the HTTP/1.1 request that opens one.
//! A server's response leaves as HEADERS made for the stream from its head and the rules'
//! edits (`stream::heads::client_response`, no text), then DATA frames under the client's
//! flow control; the proxy's own answers (errors, redirects, `return`, the stats page: a
//! `sluice_http::Answer`, cache hits, a tunnel's opening) leave the same way from their
//! fields, without the connection-specific ones HTTP/2 forbids.
//!
//! Invariants:
//! - HTTP/2's own rules (pseudo-headers, connection-specific fields, `Content-Length`
//!   against DATA, field names and values a server could read otherwise than the proxy) are
//!   enforced by the `h2` crate (and the `http` types it fills) before a stream is seen
//!   here; a head with more fields than an HTTP/1.1 one may have is refused with 431.
//! - A stream the client resets reads as ended and refuses writes, so its session ends as
//!   soon as it touches it (a request not yet read never reaches a server), and a
//!   client that resets streams faster than it lets them finish loses its connection
//!   (GOAWAY ENHANCE_YOUR_CALM): the 2023 rapid-reset pattern cannot keep servers busy.
//! - At a soft stop, or once idle past `timeout http-keep-alive` (else `timeout client`),
//!   the connection sends GOAWAY and closes when its streams are done. Before its first
//!   stream, idle is `timeout http-request` (else `timeout client`), as HAProxy counts it.

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};
use sluice_config::{Keyword, KwError, Scope};

use super::deadline::within;
use super::h2_frames::{read_preface, Tallied};
use super::session::ClientHead;
use super::streams::{soft_stop, Open, Streams};
use crate::conf::{one_arg, u32_in, GlobalConf};
use crate::h2_stream::{H2Stream, Queued, ResetWatch};
use crate::runtime::counters::Held;
use crate::runtime::{SessionInfo, Worker};
use crate::sample::StreamVars;
use crate::transport::{Conn, Origin};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "tune.h2.header-table-size",
        scope: Scope::GLOBAL,
        help: "tune.h2.header-table-size N: the HPACK table size clients may use (default 4096, at most 65536)",
        parse: |g, a| u32_in(a, 0, 65536).map(|n| g.h2.header_table_size = n),
    },
    Keyword {
        name: "tune.h2.initial-window-size",
        scope: Scope::GLOBAL,
        help: "tune.h2.initial-window-size N: bytes a client may send on a stream before it is read (default 65535)",
        parse: |g, a| u32_in(a, 0, (1 << 31) - 1).map(|n| g.h2.initial_window_size = n),
    },
    Keyword {
        name: "tune.h2.max-concurrent-streams",
        scope: Scope::GLOBAL,
        help: "tune.h2.max-concurrent-streams N: streams a client may have open at once on a connection (default 100)",
        parse: |g, a| u32_in(a, 1, u32::MAX).map(|n| g.h2.max_concurrent_streams = n),
    },
    Keyword {
        name: "tune.h2.fe.send-budget",
        scope: Scope::GLOBAL,
        help: "tune.h2.fe.send-budget SIZE: bytes a client connection's HTTP/2 streams may have queued for it together (sluice's own; default 64 x tune.bufsize, 0: no limit)",
        parse: |g, a| {
            let v = one_arg(a, "a size")?;
            let n = sluice_config::units::parse_size(v).map_err(|e| KwError::bad(1, v, e))?;
            g.h2.send_budget = Some(n as usize);
            Ok(())
        },
    },
    Keyword {
        name: "tune.h2.max-frame-size",
        scope: Scope::GLOBAL,
        help: "tune.h2.max-frame-size N: the largest frame sent (default 16384, from 16384 to 16777215)",
        parse: |g, a| u32_in(a, 16384, (1 << 24) - 1).map(|n| g.h2.max_frame_size = n),
    },
];

pub const GLOBAL_FLAG_KEYWORDS: &[Keyword<GlobalConf>] = sluice_config::flag_keywords![
    "h2-workaround-bogus-websocket-clients", Scope::GLOBAL, "HTTP/2 clients are not told that WebSockets may open over HTTP/2 streams (RFC 8441), so that they open them over HTTP/1.1",
        |g: &mut GlobalConf, on| g.h2.no_extended_connect = on;
];

/// Client resets of streams not yet answered that a connection may make per
/// `RESET_WINDOW`, per stream it may have open: past it, the connection is closed.
const RESETS_PER_STREAM: u32 = 2;
const RESET_WINDOW: Duration = Duration::from_secs(10);

/// How long a connection that sent GOAWAY on its own (idle) waits for the frame to go out.
const GOAWAY_LINGER: Duration = Duration::from_secs(5);

/// Whether a new client connection of `listener` speaks HTTP/2: `proto h2`, or a TLS
/// handshake (done) whose ALPN chose `h2`.
pub(super) fn negotiated(w: &Worker, fe: usize, listener: usize, client: &Conn) -> bool {
    w.config().frontends[fe].listen.binds[listener].h2
        || client.tls().and_then(|t| t.alpn).as_deref() == Some(b"h2")
}

/// What every stream of one connection shares.
struct ConnShared {
    w: Rc<Worker>,
    fe: usize,
    origin: Origin,
    info: Arc<SessionInfo>,
    /// The connection's `sess.` variables and the entries it tracks (`tcp-request
    /// connection|session track-sc*`), which every stream shares.
    sess_vars: std::rc::Rc<std::cell::RefCell<crate::conf::sample::Vars>>,
    sess_trackers: std::rc::Rc<std::cell::RefCell<crate::sample::Slots>>,
    /// The address `tcp-request connection|session set-dst` gave the connection.
    set_dst: Option<SocketAddr>,
    /// Streams being served now, and started so far (the idle timer's).
    streams: Rc<Streams>,
    /// Streams the client reset before their answer, in the current window.
    resets: Cell<(u32, tokio::time::Instant)>,
    /// The DATA the streams have queued for the client, and its budget.
    queued: Arc<Queued>,
}

/// Serves an HTTP/2 client connection until it closes.
pub(super) async fn serve(
    w: &Rc<Worker>,
    client: Conn,
    peer: SocketAddr,
    fe: usize,
    info: Arc<SessionInfo>,
    vars: StreamVars,
    read: Vec<u8>,
) {
    // The connection is a socket (only a socket is served as HTTP/2).
    let Ok(client) = client.into_socket() else {
        return;
    };
    let tune = w.config().global.h2;
    let st = &w.config().frontends[fe].stream;
    let origin = Origin {
        peer,
        local: client.local_addr().unwrap_or(peer),
        tls: client.tls().map(Arc::new),
        unix: client.peer_is_unix(),
    };
    let fe_state = &w.state().frontends[fe];
    let first_limit = st.timeout_http_request.or(st.timeout_client);
    // In cleartext the client's preface is checked before the crate answers with its
    // SETTINGS (over TLS, ALPN chose HTTP/2 already); `read` is what an HTTP/1 session
    // read of it before it knew (prior knowledge on an HTTP/1 bind).
    let first = if client.is_tls() && read.is_empty() {
        Vec::new()
    } else {
        match within(first_limit, read_preface(&client, read)).await {
            Ok(Some(bytes)) => bytes,
            _ => return,
        }
    };
    let queued = Queued::new(
        w.config().global.h2_send_budget(),
        w.ctx().counters.h2_queued.clone(),
    );
    let mut builder = h2::server::Builder::new();
    // WebSockets over HTTP/2 (RFC 8441): SETTINGS_ENABLE_CONNECT_PROTOCOL, unless
    // `h2-workaround-bogus-websocket-clients`.
    if !tune.no_extended_connect {
        builder.enable_connect_protocol();
    }
    let handshake = builder
        .header_table_size(tune.header_table_size)
        .initial_window_size(tune.initial_window_size)
        .max_concurrent_streams(tune.max_concurrent_streams)
        .max_frame_size(tune.max_frame_size)
        // A head larger than a buffer could not be served over HTTP/1.1 either.
        .max_header_list_size(w.config().global.head_room() as u32)
        // What a stream's response may have waiting in the connection's send queue (the
        // crate's default, 400 kB a stream, let a client that opens its windows and stops
        // reading hold 40 MB a connection).
        .max_send_buffer_size(w.config().global.h2_send_buffer())
        .handshake::<_, Bytes>(Tallied::new(
            client,
            (&fe_state.counters.at(w.tid).h2, queued.clone()),
            first,
        ));
    let Ok(Ok(mut conn)) = within(first_limit, handshake).await else {
        return;
    };
    let _open = Held::take(&fe_state.h2_conns);
    fe_state.counters.at(w.tid).h2_connections.bump();
    let shared = Rc::new(ConnShared {
        w: w.clone(),
        fe,
        origin,
        info,
        sess_vars: vars.sess.clone(),
        sess_trackers: vars.sess_trackers.clone(),
        set_dst: vars.set_dst.get(),
        streams: Rc::default(),
        resets: Cell::new((0, tokio::time::Instant::now())),
        queued,
    });
    let idle_limit = st.timeout_keep_alive.or(st.timeout_client);
    let reset_budget = RESETS_PER_STREAM.saturating_mul(tune.max_concurrent_streams);
    let mut going_away = false;
    let mut linger = None;
    loop {
        let idle = async {
            match linger {
                // GOAWAY sent: the time it has to leave.
                Some(until) => tokio::time::sleep_until(until).await,
                None => shared.streams.idle(first_limit, idle_limit).await,
            }
        };
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((req, respond))) => {
                    let (open, earlier) = shared.streams.open();
                    if let Some((session, watch)) = stream_session(&shared, req, respond, earlier) {
                        tokio::task::spawn_local(crate::clock::Ticking::new(Serving {
                            session,
                            watch: Some(watch),
                            shared: shared.clone(),
                            open,
                        }));
                    }
                }
                Some(Err(_)) | None => break,
            },
            () = soft_stop(w), if !going_away => {
                going_away = true;
                conn.graceful_shutdown();
            }
            () = idle => {
                if linger.is_some() {
                    break;
                }
                conn.abrupt_shutdown(Reason::NO_ERROR);
                linger = Some(tokio::time::Instant::now() + GOAWAY_LINGER);
                going_away = true;
            }
        }
        if over_reset_budget(&shared, reset_budget) && linger.is_none() {
            conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            linger = Some(tokio::time::Instant::now() + GOAWAY_LINGER);
            going_away = true;
        }
    }
}

fn over_reset_budget(shared: &ConnShared, budget: u32) -> bool {
    let (n, since) = shared.resets.get();
    if since.elapsed() > RESET_WINDOW {
        shared.resets.set((0, tokio::time::Instant::now()));
        return false;
    }
    n > budget
}

/// Serves one stream as an HTTP/1.1 session of its own, reading and writing the stream
/// itself (`crate::h2_stream`): the session, and the watch that tells when the client
/// resets it; `None` when the stream was answered at once (a CONNECT for a protocol not
/// served).
fn stream_session(
    shared: &Rc<ConnShared>,
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    earlier: u32,
) -> Option<(
    impl Future<Output = Option<super::h1::SpeaksH2>> + 'static,
    ResetWatch,
)> {
    let (mut parts, body) = req.into_parts();
    if parts.method == http::Method::CONNECT && crate::h2_stream::tunnel(&parts).is_none() {
        // Extended CONNECT opens WebSockets only (RFC 8441); other protocols
        // (`connect-udp`, ...) are not served.
        let res = http::Response::builder()
            .status(501)
            .body(())
            .unwrap_or_default();
        let _ = respond.send_response(res, true);
        return None;
    }
    let ended = body.is_end_stream();
    let tunnel = crate::h2_stream::tunnel(&parts);
    let (end, watch) = H2Stream::answering(&parts, body, respond, shared.queued.clone());
    // The head is the session's, as decoded: a WebSocket's made the GET that opens one
    // over HTTP/1.1; a tunnel has no body to frame (its bytes cross raw once it opens).
    if tunnel == Some(crate::h2_stream::Tunnel::WebSocket) {
        crate::h2_stream::as_websocket_upgrade(&mut parts);
    }
    sluice_http::join_cookies(&mut parts.headers);
    let head = Some(ClientHead::H2 {
        parts: Box::new(parts),
        ended: ended || tunnel.is_some(),
    });
    let vars = StreamVars::in_session(
        shared.sess_vars.clone(),
        shared.sess_trackers.clone(),
        shared.set_dst,
    );
    let session = super::h1::serve_http(
        &shared.w,
        Conn::h2_stream(end, shared.origin.clone(), None),
        shared.origin.peer,
        shared.fe,
        shared.info.clone(),
        vars,
        super::h1::Start {
            earlier,
            head,
            ..Default::default()
        },
    );
    Some((session, watch))
}

pin_project_lite::pin_project! {
    /// One stream being served, counted among its connection's until it ends (`open`). A
    /// client that resets it before its answer is counted against the connection's reset
    /// budget; its session then sees the stream as ended and finishes (its log line
    /// included). A future of its own rather than an `async` block, so that the session
    /// lives in it once, not as the block's capture and again as the pinned local a
    /// `select!` needs.
    struct Serving<F> {
        #[pin]
        session: F,
        // `None` once the reset is counted.
        watch: Option<ResetWatch>,
        shared: Rc<ConnShared>,
        // Held for its drop: the stream counts as being served until this ends.
        open: Open,
    }
}

impl<F: Future> Future for Serving<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        loop {
            // (A stream's session never hands its connection over: it has none of its own.)
            if this.session.as_mut().poll(cx).is_ready() {
                // A session that ended because the client reset the stream (it saw the reset
                // first: reading the body, waiting for room, `option abortonclose`) counts
                // that reset all the same.
                if let Some(watch) = this.watch.take() {
                    if watch.poll_reset(cx).is_ready() {
                        count_reset(this.shared);
                    }
                }
                return Poll::Ready(());
            }
            let Some(watch) = this.watch.as_ref() else {
                return Poll::Pending;
            };
            if watch.poll_reset(cx).is_pending() {
                return Poll::Pending;
            }
            count_reset(this.shared);
            *this.watch = None;
        }
    }
}

/// A client reset a stream before its answer: counted against the connection's budget.
fn count_reset(shared: &ConnShared) {
    let (n, since) = shared.resets.get();
    shared.resets.set((n + 1, since));
}
