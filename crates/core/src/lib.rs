//! The sluice proxy: configuration lowering, worker threads, listeners, HTTP streams,
//! backends with their balancing, and per-thread idle server-connection pools.
//!
//! Module map (one concept each; each feature module owns the configuration keywords it
//! implements, in a `KEYWORDS` table):
//! - [`config`]: assembles the keyword tables, lowers sections into a validated [`Config`].
//! - [`threads`]: worker threads, [`threads::ThreadCtx`], per-worker inboxes.
//! - [`listener`]: `bind`, `maxconn`, listening sockets and the accept loops.
//! - [`stream`]: one client connection's HTTP/1.1 life: requests, forwarding, keep-alive.
//! - `tcp`: `mode tcp` proxies; `tunnel`: the two-way byte relay they and WebSocket upgrades share.
//! - `buffer`: per-worker pool of I/O buffers, held only while data is in flight.
//! - [`backend`]: servers, `default-server`, connect/server timeouts, `http-reuse`.
//! - [`balance`]: the `balance` algorithms.
//! - [`compression`]: response compression keywords, negotiation, rules, throttling.
//! - [`pool`]: per-thread idle server connections with bounded takeover (`pool-*` keywords).
//! - [`fds`]: open-socket count against the descriptor limit, for the pools' fd rules.
//! - [`rules`]: ACLs, `use_backend`, `http-request` / `http-response` rules.
//! - [`cli`]: the runtime CLI on a unix socket (`stats socket`), table-driven commands.
//! - [`errorpages`]: `errorfile` and `http-error`, custom error responses.
//! - [`log`]: access logs (`log`, `option httplog`/`tcplog`, `log-format`), never blocking a worker.
//! - [`pending`]: HAProxy keywords recognised but not implemented yet (clear errors).
//!
//! See `docs/internals/threading.md` for what runs where and what crosses threads.

pub mod backend;
pub mod balance;
mod buffer;
pub mod cli;
pub mod compression;
pub mod config;
pub mod errorpages;
pub mod fds;
pub mod listener;
pub mod log;
pub mod pending;
pub mod pool;
pub mod rules;
pub mod stream;
mod tcp;
pub mod threads;
mod tunnel;

pub use config::{load, load_str, Config};
pub use threads::run;
