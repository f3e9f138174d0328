//! Kernel splicing: a response body of known length moves from the server's socket to the
//! client's through a pipe (`splice(2)`), never through user space (`option
//! splice-response`, `option splice-auto`), as HAProxy's splicing does. Each worker keeps
//! the pipes it made for the next bodies; the process counts them for `show info`.
//!
//! Invariants:
//! - Only between two plain TCP sockets (TLS, HTTP/2 streams and unix sockets keep the
//!   copying path), and only a body nothing needs to read (no compression, no cache store:
//!   the caller decides).
//! - A pipe goes back to its worker's pool only empty; one left holding bytes (a client or
//!   server gone mid-body) is closed. At most `maxpipes` exist at once in the process
//!   (default `maxconn / 4`, HAProxy's); without one, the body is copied as usual.
//! - A socket's readiness is cleared only after the kernel said it has nothing (a pipe
//!   found full never clears the server's), so an event is never lost.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sluice_config::{Keyword, KwError, Scope};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::conf::{GlobalConf, ProxyConf};

pub const PROXY_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option splice-response", Scope::PROXY, "what servers send moves to clients through a kernel pipe (splice), not through sluice's buffers: a mode tcp stream's bytes, an HTTP response body of known length",
        |c: &mut ProxyConf, on| c.stream.splice.response = on;
    "option splice-request", Scope::PROXY, "what clients send moves to servers through a kernel pipe (splice): a mode tcp stream's bytes, an HTTP request body of known length",
        |c: &mut ProxyConf, on| c.stream.splice.request = on;
    "option splice-auto", Scope::PROXY, "both ways: splice-request and splice-response",
        |c: &mut ProxyConf, on| c.stream.splice = crate::conf::stream::Splice { request: on, response: on };
];

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "nosplice",
        scope: Scope::GLOBAL,
        help: "nosplice: no kernel splicing, whatever the proxies say",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.nosplice = true),
    },
    Keyword {
        name: "tune.pipesize",
        scope: Scope::GLOBAL,
        help: "tune.pipesize SIZE: the size of splicing pipes (default: the system's, 64 kB)",
        parse: |g, a| {
            let v = crate::conf::one_arg(a, "a size")?;
            let n = sluice_config::units::parse_size(v).map_err(|e| KwError::bad(1, v, e))?;
            g.pipesize = Some(n as usize);
            Ok(())
        },
    },
    Keyword {
        name: "maxpipes",
        scope: Scope::GLOBAL,
        help: "maxpipes N: the most kernel pipes splicing uses at once (default maxconn / 4)",
        parse: |g, a| {
            let v = crate::conf::one_arg(a, "a number of pipes")?;
            let n = v
                .parse()
                .map_err(|_| KwError::bad(1, v, "expects a number"))?;
            g.maxpipes = Some(n);
            Ok(())
        },
    },
];

/// The most pipes the process may have: `maxpipes`, else a quarter of `maxconn` (the
/// process's, as it stands).
pub fn max_pipes(g: &GlobalConf, maxconn: usize) -> usize {
    g.maxpipes.map_or(maxconn / 4, |n| n as usize)
}

/// The process's pipes, as `show info` counts them.
#[derive(Debug, Default)]
pub struct PipeCounts {
    /// Moving a body now.
    pub used: AtomicUsize,
    /// Kept empty in a worker's pool.
    pub free: AtomicUsize,
}

/// A kernel pipe, and how many bytes it holds.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    held: usize,
    size: usize,
    /// Bytes delivered since the last [`pass`] that returned (one cancelled meanwhile).
    drained: u64,
}

impl Pipe {
    fn new(size: Option<usize>) -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` is a valid array of two descriptors for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded: both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut got = 65536;
        if let Some(n) = size {
            // SAFETY: F_SETPIPE_SZ on a pipe this function owns; the result is checked.
            let r = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, n as libc::c_int) };
            if r > 0 {
                got = r as usize;
            }
        }
        Ok(Pipe {
            read,
            write,
            held: 0,
            size: got,
            drained: 0,
        })
    }
}

/// A worker's empty pipes, ready for the next body.
#[derive(Debug, Default)]
pub struct Pipes(RefCell<Vec<Pipe>>);

/// A pipe taken for one body: back to the pool when it ends empty, closed otherwise.
pub struct Lease<'a> {
    pipe: Option<Pipe>,
    pool: &'a Pipes,
    counts: &'a PipeCounts,
}

impl Lease<'_> {
    /// Bytes the pipe holds: read from one side and not yet written to the other.
    pub fn held(&self) -> u64 {
        self.pipe.as_ref().map_or(0, |p| p.held as u64)
    }
}

impl Pipes {
    /// A pipe for one body: a pooled one, else a new one while the process has fewer than
    /// `max` (`None`: the body is copied).
    pub fn take<'a>(
        &'a self,
        counts: &'a PipeCounts,
        max: usize,
        size: Option<usize>,
    ) -> Option<Lease<'a>> {
        let pipe = match self.0.borrow_mut().pop() {
            Some(p) => {
                counts.free.fetch_sub(1, Ordering::Relaxed);
                p
            }
            None => {
                let all = counts.used.load(Ordering::Relaxed) + counts.free.load(Ordering::Relaxed);
                if all >= max {
                    return None;
                }
                Pipe::new(size).ok()?
            }
        };
        counts.used.fetch_add(1, Ordering::Relaxed);
        Some(Lease {
            pipe: Some(pipe),
            pool: self,
            counts,
        })
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.counts.used.fetch_sub(1, Ordering::Relaxed);
        if let Some(p) = self.pipe.take().filter(|p| p.held == 0) {
            self.pool.0.borrow_mut().push(p);
            self.counts.free.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Why splicing stopped before its end.
#[derive(Debug)]
pub enum Stopped {
    /// The side read closed before the end (`None`) or failed.
    Read(Option<io::Error>),
    ReadTimeout,
    /// The side written failed, or did not take bytes for its limit.
    Write(io::Error),
    WriteTimeout,
}

/// Moves `n` bytes from `from` to `to` through the leased pipe, waiting at most `limits`
/// (for `from`, for `to`) for either side to move. The bytes moved, or why it stopped.
pub async fn forward(
    from: &TcpStream,
    to: &TcpStream,
    lease: &mut Lease<'_>,
    mut n: u64,
    limits: (Option<Duration>, Option<Duration>),
    moved: &mut u64,
) -> Result<(), Stopped> {
    let Some(pipe) = lease.pipe.as_mut() else {
        return Err(Stopped::Read(None));
    };
    while n > 0 || pipe.held > 0 {
        if n > 0 && pipe.held < pipe.size {
            let want = (n as usize).min(pipe.size - pipe.held);
            match splice(from.as_raw_fd(), pipe.write.as_raw_fd(), want, false) {
                Ok(0) => return Err(Stopped::Read(None)),
                Ok(k) => {
                    pipe.held += k;
                    n -= k as u64;
                    continue;
                }
                // With an empty pipe, only the server can be out of bytes.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && pipe.held == 0 => {
                    wait(from, Interest::READABLE, limits.0)
                        .await
                        .map_err(|e| e.map_or(Stopped::ReadTimeout, |e| Stopped::Read(Some(e))))?;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Stopped::Read(Some(e))),
            }
        }
        match splice(pipe.read.as_raw_fd(), to.as_raw_fd(), pipe.held, n > 0) {
            Ok(k) => {
                pipe.held -= k;
                *moved += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait(to, Interest::WRITABLE, limits.1)
                    .await
                    .map_err(|e| e.map_or(Stopped::WriteTimeout, Stopped::Write))?;
            }
            Err(e) => return Err(Stopped::Write(e)),
        }
    }
    Ok(())
}

/// Moves what `from` has now, up to a pipe's worth, to `to` (waiting at most `limit` for
/// `to` to take it), after waiting for `from` to have something: the bytes moved, 0 at
/// `from`'s end of stream. Cancel-safe (a `select!` branch): bytes left in the pipe by a
/// cancelled call go first at the next one, and are counted then.
pub async fn pass(
    from: &TcpStream,
    to: &TcpStream,
    lease: &mut Lease<'_>,
    limit: Option<Duration>,
) -> Result<u64, Stopped> {
    let Some(pipe) = lease.pipe.as_mut() else {
        return std::future::pending().await;
    };
    // What `from` has is moved before returning, a pipe's worth at a time (one wake of the
    // relay per burst, not per pipe), up to PASS_MAX: the relay hears of the activity at
    // least that often, and its inactivity timers never fire under a steady stream.
    loop {
        if pipe.drained >= PASS_MAX {
            return Ok(std::mem::take(&mut pipe.drained));
        }
        while pipe.held == 0 {
            match splice(from.as_raw_fd(), pipe.write.as_raw_fd(), pipe.size, false) {
                // The end of stream is told by a call that moved nothing.
                Ok(0) => return Ok(std::mem::take(&mut pipe.drained)),
                Ok(k) => pipe.held = k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && pipe.drained > 0 => {
                    return Ok(std::mem::take(&mut pipe.drained))
                }
                // The relay's own timers watch how long a side stays quiet.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait(from, Interest::READABLE, None)
                        .await
                        .map_err(|e| e.map_or(Stopped::ReadTimeout, |e| Stopped::Read(Some(e))))?
                }
                Err(e) => return Err(Stopped::Read(Some(e))),
            }
        }
        while pipe.held > 0 {
            match splice(pipe.read.as_raw_fd(), to.as_raw_fd(), pipe.held, false) {
                Ok(k) => {
                    pipe.held -= k;
                    pipe.drained += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait(to, Interest::WRITABLE, limit)
                        .await
                        .map_err(|e| e.map_or(Stopped::WriteTimeout, Stopped::Write))?
                }
                Err(e) => return Err(Stopped::Write(e)),
            }
        }
    }
}

/// The most one [`pass`] moves before it returns.
const PASS_MAX: u64 = 1 << 20;

/// Waits until `sock` may be ready for `interest` again, after the kernel said it was not:
/// its readiness is cleared first, then awaited (at most `limit`). `Err(None)`: timed out.
async fn wait(
    sock: &TcpStream,
    interest: Interest,
    limit: Option<Duration>,
) -> Result<(), Option<io::Error>> {
    let _ = sock.try_io(interest, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
    let ready = sock.ready(interest);
    match limit {
        Some(d) => match tokio::time::timeout(d, ready).await {
            Ok(r) => r.map(|_| ()).map_err(Some),
            Err(_) => Err(None),
        },
        None => ready.await.map(|_| ()).map_err(Some),
    }
}

/// One `splice(2)` call, non-blocking; `more` when more bytes follow on the way out.
fn splice(from: RawFd, to: RawFd, len: usize, more: bool) -> io::Result<usize> {
    let mut flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    if more {
        flags |= libc::SPLICE_F_MORE;
    }
    // SAFETY: both descriptors are open for the call's duration (owned by the callers'
    // sockets and pipe); null offsets are valid for sockets and pipes.
    let r = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    match r {
        r if r >= 0 => Ok(r as usize),
        _ => Err(io::Error::last_os_error()),
    }
}
