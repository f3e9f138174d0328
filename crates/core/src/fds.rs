//! Counts the process's open sockets against its descriptor limit, for the idle pools'
//! file-descriptor pressure rules (`tune.pool-low-fd-ratio`, `tune.pool-high-fd-ratio`).
//!
//! Every client and server socket the proxy opens is counted while it is open (listeners and
//! the few internal descriptors are a fixed margin); reading the count is one atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static OPEN: AtomicUsize = AtomicUsize::new(0);
/// Descriptors that are not connections: stdio, epoll and event descriptors, listeners.
const MARGIN: usize = 32;

/// One counted socket; the count drops with it.
#[derive(Debug)]
pub struct Counted(());

impl Counted {
    pub fn new() -> Counted {
        OPEN.fetch_add(1, Ordering::Relaxed);
        Counted(())
    }
}

impl Default for Counted {
    fn default() -> Self {
        Counted::new()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Descriptors in use now (approximate by `MARGIN`).
pub fn used() -> usize {
    OPEN.load(Ordering::Relaxed) + MARGIN
}

/// The soft `RLIMIT_NOFILE`, read once.
pub fn limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes into the struct we pass.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
        if ok {
            lim.rlim_cur as usize
        } else {
            1024
        }
    })
}
