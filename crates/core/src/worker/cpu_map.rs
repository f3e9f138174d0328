//! `cpu-map`: which CPUs each worker thread may run on (HAProxy 2.6's syntax and meaning;
//! the lines are read by `conf::cpu_map`). A worker binds itself once, as its thread starts.

use sluice_config::{Keyword, Scope};

use crate::conf::GlobalConf;

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "cpu-map",
    scope: Scope::GLOBAL,
    help: "cpu-map [auto:]1[/THREADS] CPUS...: the CPUs worker threads may run on (THREADS: all, odd, even, N, N-M; CPUS: N or N-M)",
    parse: |g, a| {
        g.cpu_map.push_line(a)
    },
}];

/// Binds the calling thread to `cpus`. Fails when the system refuses (a CPU it does not
/// have or may not use).
pub fn bind_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: `cpu_set_t` is plain data for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `c` is below 64 (`conf::cpu_map` reads no higher), within `cpu_set_t`'s 1024
        // bits; `set` is ours.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`, which
    // outlives the call.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
