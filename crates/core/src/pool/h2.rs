//! A worker's HTTP/2 connections to servers (links): one per server that speaks HTTP/2
//! (`proto h2`, or TLS whose ALPN chose `h2`), shared by every request of the worker for
//! that server, each as a stream. The idle pools hold HTTP/1.1 connections, which serve one
//! request at a time; a link serves many at once, so it is kept here rather than taken and
//! given back. What crosses a stream (the translation to and from HTTP/1.1) is the data
//! path's business: `stream::h2_server`.
//!
//! Invariants:
//! - A link lives on the worker that opened it and is never taken over by another: each
//!   worker opens its own, as HAProxy's HTTP/2 server connections stay on their thread.
//! - While a `proto h2` server's link is being opened, the worker's other requests for that
//!   server wait for it instead of each opening a connection of their own.
//! - A link that takes no new stream (the server sent GOAWAY, the connection failed) or was
//!   opened to an address the server has since left is never picked again; the one whose
//!   connection ended is forgotten, and never a newer link in its place.
//! - Every stream holds a lease on its link ([`Link::lease`]) until its connection drops,
//!   so a link knows when it last carried one: the link's task lets it go after the
//!   server's `pool-purge-delay` without any.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::sync::Notify;

use crate::clock;
use crate::conf::backend::{ServerOption, ServerOpts};
use crate::h2_stream::PeerSettings;
use crate::transport::Origin;

/// The server option that chooses the protocol: `proto h2` (`proto h1` is the default).
pub const SERVER_OPTIONS: &[ServerOption] = &[ServerOption {
    name: "proto",
    help: "h2: speak HTTP/2 to the server (h2c in clear, h2 over ssl)",
    args: 1,
    parse: |o: &mut ServerOpts, a| {
        o.h2 = match a[0].as_str() {
            "h2" => true,
            "h1" => false,
            other => {
                return Err(format!(
                    "'{other}': only h1 and h2 are supported towards servers"
                ))
            }
        };
        Ok(())
    },
}];

/// A worker's links, by (backend, server).
#[derive(Default)]
pub struct Links {
    open: RefCell<HashMap<(usize, usize), Entry>>,
    /// Numbers links, so a connection that ends forgets its own link and not a newer one.
    next: Cell<u64>,
}

enum Entry {
    Opening(Rc<Notify>),
    Open(u64, Rc<Link>),
}

/// What a stream needs of its link: the handle that opens streams, and the connection's
/// addresses and whether it is TLS (the `:scheme`).
pub struct Link {
    pub send: SendRequest<Bytes>,
    /// The server's address generation when the link was opened.
    pub addr_gen: u64,
    pub origin: Origin,
    pub tls: bool,
    pub activity: Arc<Activity>,
    /// Whether the server's SETTINGS have arrived (for WebSockets, which need to know).
    pub settings: Arc<PeerSettings>,
}

impl Link {
    /// A stream in use on the link, until the lease drops.
    pub fn lease(&self) -> LinkUse {
        self.activity.in_use.fetch_add(1, Relaxed);
        LinkUse(self.activity.clone())
    }

    /// Whether a new stream may open: not once the server sent GOAWAY or the connection
    /// failed (a stream that must wait for the server's concurrency limit is fine).
    fn takes_streams(&self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        !matches!(self.send.clone().poll_ready(&mut cx), Poll::Ready(Err(_)))
    }
}

/// How busy a link is: its streams in use, and when the last one ended. (Atomics only
/// because a stream's lease rides in a connection, a type that may cross workers; a link's
/// streams never do.)
pub struct Activity {
    born: Instant,
    in_use: AtomicUsize,
    /// Nanoseconds from `born` to the end of the last stream.
    last_end: AtomicU64,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            born: clock::now(),
            in_use: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// Resolves once the link has carried no stream for `delay` (checked every `delay`,
    /// at least every 10 ms).
    pub async fn idle(&self, delay: Duration) {
        loop {
            tokio::time::sleep(delay.max(Duration::from_millis(10))).await;
            let ended = self.born + Duration::from_nanos(self.last_end.load(Relaxed));
            if self.in_use.load(Relaxed) == 0 && clock::since(ended) >= delay {
                return;
            }
        }
    }
}

/// One stream's use of a link (see [`Link::lease`]).
pub struct LinkUse(Arc<Activity>);

impl Drop for LinkUse {
    fn drop(&mut self) {
        let a = &self.0;
        a.in_use.fetch_sub(1, Relaxed);
        let at = clock::since(a.born).as_nanos();
        a.last_end
            .store(u64::try_from(at).unwrap_or(u64::MAX), Relaxed);
    }
}

/// How a request gets to a server that may speak HTTP/2.
pub enum Pick {
    /// A stream on the worker's link.
    Stream(Rc<Link>),
    /// The link is being opened: wait, then pick again.
    Wait(Rc<Notify>),
    /// No link: connect (a connection that speaks HTTP/2 becomes the link).
    Connect,
}

impl Links {
    pub fn pick(&self, backend: usize, server: usize, addr_gen: u64) -> Pick {
        let mut open = self.open.borrow_mut();
        match open.get(&(backend, server)) {
            None => Pick::Connect,
            Some(Entry::Opening(done)) => Pick::Wait(done.clone()),
            Some(Entry::Open(_, l)) if l.addr_gen == addr_gen && l.takes_streams() => {
                Pick::Stream(l.clone())
            }
            Some(Entry::Open(..)) => {
                // Its streams finish where they are; new ones need another connection.
                open.remove(&(backend, server));
                Pick::Connect
            }
        }
    }

    /// Marks a `proto h2` server's link as being opened until the guard drops (the link is
    /// then open, or the attempt failed and the requests that waited connect themselves).
    pub fn opening(&self, backend: usize, server: usize) -> Option<Opening<'_>> {
        let mut open = self.open.borrow_mut();
        if open.contains_key(&(backend, server)) {
            return None;
        }
        let done = Rc::new(Notify::new());
        open.insert((backend, server), Entry::Opening(done.clone()));
        Some(Opening {
            links: self,
            key: (backend, server),
            done,
        })
    }

    /// Makes `link` the worker's link to the server unless another one opened meanwhile
    /// (with ALPN, a connection is known to speak HTTP/2 only once connected): that one
    /// stays, and this one serves its first stream and closes. Returns the link's number
    /// when it was kept.
    pub fn keep(&self, backend: usize, server: usize, link: Link) -> Option<u64> {
        let mut open = self.open.borrow_mut();
        if matches!(open.get(&(backend, server)), Some(Entry::Open(..))) {
            return None;
        }
        let id = self.next.get() + 1;
        self.next.set(id);
        open.insert((backend, server), Entry::Open(id, Rc::new(link)));
        Some(id)
    }

    /// The link numbered `id` ended (or is let go at a soft stop): no new stream goes to it.
    pub fn forget(&self, backend: usize, server: usize, id: u64) {
        let mut open = self.open.borrow_mut();
        if matches!(open.get(&(backend, server)), Some(Entry::Open(n, _)) if *n == id) {
            open.remove(&(backend, server));
        }
    }
}

/// A link being opened; see [`Links::opening`].
pub struct Opening<'a> {
    links: &'a Links,
    key: (usize, usize),
    done: Rc<Notify>,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut open = self.links.open.borrow_mut();
        if matches!(open.get(&self.key), Some(Entry::Opening(d)) if Rc::ptr_eq(d, &self.done)) {
            open.remove(&self.key);
        }
        self.done.notify_waiters();
    }
}
