//! Counts the process's open sockets against its descriptor limit, for the idle pools'
//! file-descriptor pressure rules (`tune.pool-low-fd-ratio`, `tune.pool-high-fd-ratio`).
//!
//! Every client and server socket the proxy opens is counted while it is open (listeners and
//! the few internal descriptors are a fixed margin); reading the count is one atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Client and server sockets open now (`show activity`'s `open_sockets`).
pub fn open_sockets() -> usize {
    OPEN.load(Ordering::Relaxed)
}

/// Descriptors in use now (approximate by `MARGIN`).
pub fn used() -> usize {
    OPEN.load(Ordering::Relaxed) + MARGIN
}

fn get_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        (lim.rlim_cur, lim.rlim_max)
    } else {
        (1024, 1024)
    }
}

fn set_soft_limit(soft: u64, hard: u64) -> bool {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 }
}

/// Descriptors a `maxconn` needs: two per proxied connection plus the margin.
pub fn needed(maxconn: usize) -> usize {
    maxconn * 2 + 2 * MARGIN
}

/// Raises the descriptor limit to what `maxconn` needs (or, without one, to the hard limit)
/// and returns the `maxconn` to apply. Refuses, with the figures, when the hard limit is too
/// low: running out of descriptors under load is worse than not starting.
/// With `ulimit` (`ulimit-n`), the limit is set to that figure first (the hard one too when
/// it is lower and the process may raise it), and `maxconn` defaults to what it allows.
/// Otherwise `cap` (`fd-hard-limit`) stands for the hard limit when it is lower: the limit
/// in force is brought down to it and never raised past it (the system's hard limit itself
/// is left as it is).
pub fn ensure(
    maxconn: Option<usize>,
    ulimit: Option<u64>,
    cap: Option<u64>,
) -> Result<usize, String> {
    if let Some(n) = ulimit {
        let (_, hard) = get_limit();
        if !set_soft_limit(n, hard.max(n)) && !set_soft_limit(n, hard) {
            return Err(format!(
                "ulimit-n {n}: cannot set the file descriptor limit (the hard limit is {hard})"
            ));
        }
        if let Some(m) = maxconn.filter(|&m| needed(m) as u64 > n) {
            return Err(format!(
                "maxconn {m} needs {} file descriptors but ulimit-n is {n}",
                needed(m)
            ));
        }
        let effective = maxconn
            .unwrap_or((n as usize).saturating_sub(2 * MARGIN) / 2)
            .max(1);
        LIMIT.store(get_limit().0 as usize, Ordering::Relaxed);
        return Ok(effective);
    }
    let (soft, system_hard) = get_limit();
    let hard = system_hard.min(cap.unwrap_or(u64::MAX));
    if soft > hard {
        set_soft_limit(hard, system_hard);
    }
    let soft = soft.min(hard);
    let effective = match maxconn {
        Some(m) => {
            let need = needed(m) as u64;
            if need > hard {
                let which = if hard < system_hard {
                    "fd-hard-limit"
                } else {
                    "ulimit -Hn"
                };
                return Err(format!(
                    "maxconn {m} needs {need} file descriptors but the hard limit is {hard} ({which}): lower maxconn or raise the limit"
                ));
            }
            if need > soft && !set_soft_limit(need, system_hard) {
                return Err(format!(
                    "cannot raise the file descriptor limit from {soft} to {need}"
                ));
            }
            m
        }
        None => {
            if hard > soft {
                set_soft_limit(hard, system_hard);
            }
            let now = get_limit().0 as usize;
            (now.saturating_sub(2 * MARGIN) / 2).clamp(16, 1_000_000)
        }
    };
    LIMIT.store(get_limit().0 as usize, Ordering::Relaxed);
    Ok(effective)
}

/// The `maxconn` the descriptor limit in force allows.
pub fn maxconn_for_limit() -> usize {
    (get_limit().0 as usize).saturating_sub(2 * MARGIN).max(2) / 2
}

static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The descriptor limit in force (after `ensure`).
pub fn limit() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        0 => get_limit().0 as usize,
        n => n,
    }
}
