//! Per-thread idle server connections.
//!
//! Each server keeps one idle list per worker thread, split in two classes: *idle*
//! connections have served a single request and are not yet proven reusable, *safe* ones
//! have served more. A worker takes from and returns to its own lists (LIFO, so the warmest
//! connection is reused first).
//!
//! # Concurrency
//! Every per-thread list sits behind its own mutex even though only its owner uses it today:
//! the takeover feature lets another worker lock a sibling's list (with `try_lock`, never
//! waiting) and move a connection out. A connection in a list is registered with its owner's
//! event loop; whoever removes it owns it exclusively, so no connection is ever used by two
//! workers at once. A taker on another thread must deregister it (`into_std`) and register it
//! in its own loop (`from_std`) before use; see `docs/internals/threading.md`.

use std::mem::MaybeUninit;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::backend::ReuseMode;

/// An idle server connection.
#[derive(Debug)]
pub struct IdleConn {
    pub stream: TcpStream,
    /// When it went idle.
    pub since: Instant,
    /// Requests it has served.
    pub served: u32,
}

#[derive(Debug, Default)]
struct ThreadIdle {
    /// Served one request: not proven reusable yet.
    idle: Vec<IdleConn>,
    /// Served several requests.
    safe: Vec<IdleConn>,
}

/// One server's idle connections, one list pair per worker thread.
#[derive(Debug)]
pub struct ServerPools {
    per_thread: Box<[Mutex<ThreadIdle>]>,
}

/// Which idle connections a request may use, from `http-reuse` and its position in the
/// client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Nothing,
    SafeOnly,
    Any,
}

impl Want {
    pub fn for_request(mode: ReuseMode, first_request: bool) -> Want {
        match (mode, first_request) {
            (ReuseMode::Never, _) => Want::Nothing,
            (ReuseMode::Safe, true) => Want::Nothing,
            (ReuseMode::Aggressive, true) => Want::SafeOnly,
            _ => Want::Any,
        }
    }
}

impl ServerPools {
    pub fn new(nbthread: usize) -> Self {
        ServerPools {
            per_thread: (0..nbthread.max(1)).map(|_| Mutex::default()).collect(),
        }
    }

    fn list(&self, tid: usize) -> std::sync::MutexGuard<'_, ThreadIdle> {
        self.per_thread[tid]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a live idle connection from thread `tid`'s own lists, safe ones first.
    /// Connections found closed by the server on the way are dropped.
    pub fn take(&self, tid: usize, want: Want) -> Option<IdleConn> {
        if want == Want::Nothing {
            return None;
        }
        let mut l = self.list(tid);
        loop {
            let conn = match l.safe.pop() {
                Some(c) => c,
                None if want == Want::Any => l.idle.pop()?,
                None => return None,
            };
            if is_alive(&conn.stream) {
                return Some(conn);
            }
        }
    }

    /// Returns a connection that just finished a response to thread `tid`'s lists.
    pub fn put(&self, tid: usize, stream: TcpStream, served: u32) {
        let conn = IdleConn {
            stream,
            since: Instant::now(),
            served,
        };
        let mut l = self.list(tid);
        if served > 1 {
            l.safe.push(conn);
        } else {
            l.idle.push(conn);
        }
    }

    /// Closes thread `tid`'s connections idle for longer than `max_idle`, and those the
    /// server has closed. Returns how many were closed.
    pub fn purge(&self, tid: usize, max_idle: Duration) -> usize {
        let now = Instant::now();
        let mut l = self.list(tid);
        let before = l.idle.len() + l.safe.len();
        let keep = |c: &IdleConn| now.duration_since(c.since) < max_idle && is_alive(&c.stream);
        l.idle.retain(keep);
        l.safe.retain(keep);
        before - l.idle.len() - l.safe.len()
    }

    /// Idle connections currently held by thread `tid` (idle, safe).
    pub fn counts(&self, tid: usize) -> (usize, usize) {
        let l = self.list(tid);
        (l.idle.len(), l.safe.len())
    }
}

/// A connection is alive if reading would block: no EOF, no error and no unexpected bytes
/// from the server (which would desynchronise the next response).
fn is_alive(stream: &TcpStream) -> bool {
    let mut buf = [MaybeUninit::<u8>::uninit(); 1];
    match socket2::SockRef::from(stream).peek(&mut buf) {
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
        Ok(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_modes() {
        assert_eq!(Want::for_request(ReuseMode::Never, false), Want::Nothing);
        assert_eq!(Want::for_request(ReuseMode::Safe, true), Want::Nothing);
        assert_eq!(Want::for_request(ReuseMode::Safe, false), Want::Any);
        assert_eq!(
            Want::for_request(ReuseMode::Aggressive, true),
            Want::SafeOnly
        );
        assert_eq!(Want::for_request(ReuseMode::Aggressive, false), Want::Any);
        assert_eq!(Want::for_request(ReuseMode::Always, true), Want::Any);
    }

    #[test]
    fn take_put_purge_on_real_sockets() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let a = TcpStream::connect(addr).await.unwrap();
            let (peer_a, _) = l.accept().await.unwrap();
            let b = TcpStream::connect(addr).await.unwrap();
            let (_peer_b, _) = l.accept().await.unwrap();
            let pools = ServerPools::new(2);
            pools.put(0, a, 1);
            pools.put(0, b, 3);
            assert_eq!(pools.counts(0), (1, 1));
            assert_eq!(pools.counts(1), (0, 0));
            assert!(pools.take(1, Want::Any).is_none());
            // Safe first.
            let c = pools.take(0, Want::SafeOnly).unwrap();
            assert_eq!(c.served, 3);
            assert!(pools.take(0, Want::SafeOnly).is_none());
            // A connection the server closed is never handed out.
            drop(peer_a);
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(pools.take(0, Want::Any).is_none());
            assert_eq!(pools.counts(0), (0, 0));
            pools.put(0, c.stream, 4);
            assert_eq!(pools.purge(0, Duration::from_secs(60)), 0);
            assert_eq!(pools.purge(0, Duration::ZERO), 1);
        });
    }
}
