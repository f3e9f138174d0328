//! Live state: what changes while the proxy runs and what must survive a new configuration
//! generation. The configuration (`crate::conf`) says what should be; this module holds what
//! is: server states and weights, in-flight and queued requests, idle connections, counters,
//! connection admission, and each worker's load.
//!
//! Invariants:
//! - State is keyed by the configuration's stable ids; within one generation, the slices here
//!   are aligned with `Config::frontends`, `Config::backends` and each backend's `servers`.
//! - Hot-path counters are per worker ([`counters::PerWorker`]): a worker writes only its own
//!   slot. The few figures every worker must see at once (in-flight requests per server for
//!   `leastconn`, connections per frontend and per worker) are shared atomics.
//! - A server's administrative and operational states and its weight are atomics any thread
//!   may change; every change bumps its backend's balancing generation so that dynamic
//!   algorithms rebuild their view before the next pick.
//!
//! What a new generation keeps and replaces is written in `docs/internals/architecture.md`.

pub mod counters;
pub mod limit;
mod process;
mod rate;
mod state;

pub use self::counters::{
    Counter, CounterSet, NameserverCounters, Peak, Peaks, PerWorker, ProxyCounters, ServerCounters,
    StatusClasses, Timing, Timings, Traffic, WorkerCounters,
};
pub use self::process::{
    Admission, ClientConn, Handoff, Handover, Mail, MemoryRelease, PeerSessions, PeersListener,
    Process, ProcessFigures, SessionInfo, ShowPeers, Slot, ThreadCtx, Worker, WorkerChecks,
};
pub use self::rate::{AcceptRates, GlobalRate, RateLimits};
pub use self::state::{
    clock_ms, clock_ms_at, clock_ns, AdminState, AgentState, BackendState, CapturedError,
    CheckResult, CheckState, ErrorCapture, FrontendState, LbCache, LbState, LbTable, ListenerState,
    OperState, Runtime, ServerQueue, ServerState,
};
