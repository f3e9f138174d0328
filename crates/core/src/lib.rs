//! The sluice proxy. The modules form layers; each imports only from layers below it (a
//! test, `tests/layers.rs`, checks it), so the folder layout is the architecture:
//!
//! 1. [`conf`]: one configuration generation as plain data. No behaviour, no state.
//! 2. [`fds`], [`buffer`], [`transport`], [`h2_stream`], [`padded`], [`tls`]: descriptor
//!    accounting, per-worker I/O buffers, the connection seam every socket goes through
//!    (and an HTTP/2 stream, client's or server's, seen as an HTTP/1.1 connection),
//!    cache-line padding, TLS settings.
//! 3. [`pool`], [`log`], [`stick`]: per-thread idle server-connection pools (capability 1),
//!    access log targets, stick tables; self-contained mechanisms over the layers below.
//! 4. [`runtime`]: live state that outlives configuration generations: server states and
//!    weights, queues, idle pools, per-worker counters, admission, worker figures.
//! 5. Mechanisms over the runtime: [`sample`] (HAProxy's samples), [`acl`], [`rules`],
//!    [`balance`], [`cookie`] and [`persist`] (persistence), [`check`] (health checks, capability 2),
//!    [`queue`], [`compression`]
//!    (capability 3's throttling around the `sluice-deflate` encoder), [`errorpages`], and
//!    the backend keywords ([`backend`]), and [`stats`] (the statistics HAProxy's tools
//!    read: `show stat`, `show info`).
//! 6. [`stream`]: the data path: HTTP sessions and transactions, TCP and tunnels.
//! 7. [`worker`]: worker threads, inboxes, accept dispatch (capability 4), listeners.
//! 8. [`control`]: starting and stopping the process, signals, the runtime CLI.
//! 9. [`load`]: the keyword tables of every feature and the lowering into a [`Config`].
//!
//! Each feature module owns the configuration keywords it implements, in a `KEYWORDS`
//! table that writes into the `conf` types. See `docs/internals/architecture.md`.

/// Writes one line to standard error in a single write, so that lines of processes
/// sharing the stream (a master and its workers) never interleave mid-line, as
/// `eprintln!`'s piecewise writes can.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

pub mod conf;

pub mod accounts;
pub mod auth;
pub mod buffer;
pub mod clock;
pub mod fds;
pub mod freq;
pub mod h2_stream;
pub mod h3_stream;
pub mod keepalive;
pub mod padded;
pub mod proxy_proto;
pub mod sockbuf;
pub mod tls;
pub mod transport;
pub mod wire;

pub mod cache;
pub mod log;
pub mod pool;
pub mod stick;

pub mod runtime;

pub mod acl;
pub mod backend;
pub mod balance;
pub mod check;
pub mod compression;
pub mod cookie;
pub mod dns;
pub mod errorpages;
pub mod filters;
pub mod mail;
pub mod peers;
pub mod pending;
pub mod persist;
pub mod queue;
pub mod rules;
pub mod sample;
pub mod stats;

pub mod stream;

pub mod worker;

pub mod control;

pub mod load;

pub use conf::Config;
pub use control::{run, RunOptions};
pub use load::{load, load_str};
