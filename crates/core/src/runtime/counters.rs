//! Counters kept per worker and summed when read.
//!
//! A hot-path counter written by every worker would bounce its cache line between cores on
//! every request. Here each worker writes only its own slot (one per cache-line pair), with a
//! plain load and store rather than a locked read-modify-write: the slot has a single writer.
//! Readers (CLI, stats, logs) add the slots up; a sum may miss increments made during the
//! read, never count one twice.
//!
//! `clear counters all` cannot write into slots it does not own: it records the sums at that
//! moment as a baseline that reads subtract ([`PerWorker::clear`]). Maxima ([`Peak`]) are
//! shared, written only when exceeded, and may be reset by anyone.

use crate::freq::PerSecond;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::padded::Padded;

/// A counter with one writer (the worker owning the slot) and any number of readers.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one. Only the owning worker may call it.
    #[inline]
    pub fn bump(&self) {
        self.add(1);
    }

    /// Adds `n`. Only the owning worker may call it.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Overwrites the value (the owner publishing a figure it keeps elsewhere).
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
}

/// What one nameserver of a `resolvers` section answered (`show resolvers`), HAProxy's
/// counters. Only the first worker, which runs the resolutions, writes them.
#[derive(Debug, Default)]
pub struct NameserverCounters {
    pub sent: Counter,
    pub snd_error: Counter,
    pub valid: Counter,
    /// Valid answers that changed a server's address.
    pub update: Counter,
    pub cname: Counter,
    pub cname_error: Counter,
    pub any_err: Counter,
    pub nx: Counter,
    pub timeout: Counter,
    pub refused: Counter,
    pub other: Counter,
    pub invalid: Counter,
    pub too_big: Counter,
    pub truncated: Counter,
    pub outdated: Counter,
    /// Answers large enough to be read on a helper thread rather than on the worker (not
    /// one of HAProxy's counters: not shown by `show resolvers`).
    pub read_apart: Counter,
}

/// A group of counters that `clear counters all` can zero (it lists them in a fixed order).
pub trait CounterSet {
    fn counters(&self) -> Vec<&Counter>;
}

/// One slot per worker, each on cache lines of its own, and the baseline reads subtract.
#[derive(Debug)]
pub struct PerWorker<T> {
    slots: Box<[Padded<T>]>,
    /// The sums at the last `clear counters all` (written by the clearing thread only).
    baseline: T,
}

impl<T: Default> PerWorker<T> {
    pub fn new(workers: usize) -> Self {
        PerWorker {
            slots: (0..workers.max(1)).map(|_| Padded::default()).collect(),
            baseline: T::default(),
        }
    }
}

impl<T> PerWorker<T> {
    /// Worker `tid`'s slot: only that worker writes it.
    #[inline]
    pub fn at(&self, tid: usize) -> &T {
        &self.slots[tid].0
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|p| &p.0)
    }

    /// The sum over workers of one counter, since the last clear.
    pub fn sum(&self, f: impl Fn(&T) -> &Counter) -> u64 {
        let total: u64 = self.iter().map(|t| f(t).get()).sum();
        total.wrapping_sub(f(&self.baseline).get())
    }
}

impl<T: CounterSet> PerWorker<T> {
    /// Zeroes every counter as reads see them (`clear counters all`).
    pub fn clear(&self) {
        let base = self.baseline.counters();
        let slots: Vec<Vec<&Counter>> = self.iter().map(|t| t.counters()).collect();
        for (i, b) in base.iter().enumerate() {
            b.set(slots.iter().map(|s| s[i].get()).sum());
        }
    }
}

/// A maximum (`smax`, `qmax`, `rate_max`, `ttime_max`, ...): read before written, so that
/// its cache line is only dirtied when a new maximum is reached.
#[derive(Debug, Default)]
pub struct Peak(AtomicU64);

impl Peak {
    #[inline]
    pub fn note(&self, v: u64) {
        if v > self.0.load(Ordering::Relaxed) {
            self.0.fetch_max(v, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// `clear counters`.
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// An average over about the last 1024 values (HAProxy's `qtime`, `ctime`, `rtime`,
/// `ttime`), with its maximum kept apart as a shared [`Peak`].
#[derive(Debug, Default)]
pub struct Timing {
    sum: Counter,
    n: Counter,
}

impl Timing {
    const WINDOW: u64 = 1024;

    #[inline]
    pub fn add(&self, v: u64) {
        let n = self.n.get();
        let sum = self.sum.get();
        let sum = if n >= Self::WINDOW {
            sum - sum / Self::WINDOW + v
        } else {
            sum + v
        };
        self.sum.set(sum);
        self.n.set(n + 1);
    }

    /// The average over every worker's window, each weighted by the values it holds.
    pub fn average<'a>(slots: impl Iterator<Item = &'a Timing>) -> u64 {
        let (sum, n) = slots.fold((0, 0), |(s, n), t| {
            (s + t.sum.get(), n + t.n.get().min(Self::WINDOW))
        });
        sum.checked_div(n).unwrap_or(0)
    }
}

/// A proxy's or server's four timings, the millisecond figures of each request.
#[derive(Debug, Default)]
pub struct Timings {
    pub queue: Timing,
    pub connect: Timing,
    pub response: Timing,
    pub total: Timing,
}

/// HTTP responses by status class (`hrsp_1xx` .. `hrsp_5xx`, `hrsp_other`).
#[derive(Debug, Default)]
pub struct StatusClasses(pub [Counter; 6]);

impl StatusClasses {
    #[inline]
    pub fn count(&self, status: u16) {
        let class = match status {
            100..=599 => usize::from(status / 100) - 1,
            _ => 5,
        };
        self.0[class].bump();
    }
}

/// What each transaction (or TCP session) adds to the proxy or server it went through.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Sessions: client connections on a frontend, transactions on a backend or server
    /// (`stot`).
    pub sessions: Counter,
    /// Bytes received from clients and sent to them (`bin`, `bout`).
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    /// Responses by status class.
    pub status: StatusClasses,
    /// Transfers aborted by the client, and by the server (`cli_abrt`, `srv_abrt`).
    pub client_aborts: Counter,
    pub server_aborts: Counter,
    /// Internal errors (`eint`).
    pub internal_errors: Counter,
    pub timings: Timings,
    /// When the last transaction started, in [`crate::runtime::clock_ms`] (`lastsess`).
    pub last_session: Counter,
}

impl Traffic {
    fn counters(&self) -> impl Iterator<Item = &Counter> {
        [
            &self.sessions,
            &self.bytes_in,
            &self.bytes_out,
            &self.client_aborts,
            &self.server_aborts,
            &self.internal_errors,
        ]
        .into_iter()
        .chain(self.status.0.iter())
    }
}

/// What a server counts per worker (HAProxy's names in the comments).
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// New connections opened (`connect`).
    pub connect: Counter,
    /// Requests sent over a reused connection (`reuse`).
    pub reuse: Counter,
    /// Requests sent (`lbtot`, `req_tot`).
    pub requests: Counter,
    /// Connection attempts that failed (`econ`).
    pub connect_errors: Counter,
    /// Responses that were invalid or cut short (`eresp`).
    pub response_errors: Counter,
    /// Connection retries (`wretr`).
    pub retries: Counter,
    /// Requests moved to another server after failed connections (`wredis`).
    pub redispatches: Counter,
    /// Responses refused (`dresp`: `http-response deny`, `option checkcache`).
    pub denied_responses: Counter,
    /// Transactions per second (`rate`).
    pub rate: PerSecond,
    pub traffic: Traffic,
}

impl CounterSet for ServerCounters {
    fn counters(&self) -> Vec<&Counter> {
        [
            &self.connect,
            &self.reuse,
            &self.requests,
            &self.connect_errors,
            &self.response_errors,
            &self.retries,
            &self.redispatches,
            &self.denied_responses,
        ]
        .into_iter()
        .chain(self.traffic.counters())
        .collect()
    }
}

/// What a proxy counts per worker, on its frontend side or its backend side (a listener
/// uses the same kinds).
#[derive(Debug, Default)]
pub struct ProxyCounters {
    /// Bytes fed to the compressor (`comp_in`).
    pub comp_in: Counter,
    /// Bytes it produced (`comp_out`).
    pub comp_out: Counter,
    /// Body bytes of responses sent uncompressed by a proxy with compression (`comp_byp`).
    pub comp_byp: Counter,
    /// Responses compressed (`comp_rsp`).
    pub comp_rsp: Counter,
    /// Requests looked up in a cache by this proxy's `cache-use` rules, and those answered
    /// from it (`cache_lookups`, `cache_hits`).
    pub cache_lookups: Counter,
    pub cache_hits: Counter,
    /// Connections accepted (`conn_tot`, frontends).
    pub connections: Counter,
    /// HTTP requests (`req_tot`).
    pub requests: Counter,
    /// Requests denied by rules (`dreq`) and responses denied (`dresp`).
    pub denied_requests: Counter,
    pub denied_responses: Counter,
    /// Invalid or incomplete requests (`ereq`, frontends).
    pub request_errors: Counter,
    /// Requests answered by the proxy itself (`intercepted`, frontends).
    pub intercepted: Counter,
    /// Sessions, connections and requests per second (`rate`, `conn_rate`, `req_rate`).
    pub session_rate: PerSecond,
    pub connection_rate: PerSecond,
    pub request_rate: PerSecond,
    pub traffic: Traffic,
    /// TLS handshakes completed (`ssl_sess`), those that resumed a session
    /// (`ssl_reused_sess`), and those that failed (`ssl_failed_handshake`).
    pub tls_handshakes: Counter,
    pub tls_reused: Counter,
    pub tls_failed: Counter,
    /// HTTP/2 client connections (`h2_total_connections`), and their frames.
    pub h2_connections: Counter,
    pub h2: H2Frames,
}

/// HTTP/2 frames of a frontend's client connections, counted on the wire
/// (`crate::stream::h2_frames`).
#[derive(Debug, Default)]
pub struct H2Frames {
    /// Received (`h2_headers_rcvd`, `h2_data_rcvd`, `h2_settings_rcvd`,
    /// `h2_rst_stream_rcvd`, `h2_goaway_rcvd`).
    pub headers_rcvd: Counter,
    pub data_rcvd: Counter,
    pub settings_rcvd: Counter,
    pub rst_stream_rcvd: Counter,
    pub goaway_rcvd: Counter,
    /// Sent (`h2_rst_stream_resp`, `h2_goaway_resp`).
    pub rst_stream_resp: Counter,
    pub goaway_resp: Counter,
    /// Sent GOAWAY and RST_STREAM frames whose error code says the client broke the
    /// protocol (`h2_detected_conn_protocol_errors`, `h2_detected_strm_protocol_errors`).
    pub conn_proto_err: Counter,
    pub strm_proto_err: Counter,
}

impl CounterSet for H2Frames {
    fn counters(&self) -> Vec<&Counter> {
        vec![
            &self.headers_rcvd,
            &self.data_rcvd,
            &self.settings_rcvd,
            &self.rst_stream_rcvd,
            &self.goaway_rcvd,
            &self.rst_stream_resp,
            &self.goaway_resp,
            &self.conn_proto_err,
            &self.strm_proto_err,
        ]
    }
}

impl CounterSet for ProxyCounters {
    fn counters(&self) -> Vec<&Counter> {
        [
            &self.comp_in,
            &self.comp_out,
            &self.comp_byp,
            &self.comp_rsp,
            &self.connections,
            &self.requests,
            &self.denied_requests,
            &self.denied_responses,
            &self.request_errors,
            &self.intercepted,
            &self.tls_handshakes,
            &self.tls_reused,
            &self.tls_failed,
            &self.h2_connections,
        ]
        .into_iter()
        .chain(self.traffic.counters())
        .chain(self.h2.counters())
        .collect()
    }
}

/// The maxima of a proxy or server (shared, written only when exceeded).
#[derive(Debug, Default)]
pub struct Peaks {
    /// Sessions at once (`smax`), requests waiting at once (`qmax`).
    pub sessions: Peak,
    pub queued: Peak,
    /// Rate maxima (`rate_max`, `conn_rate_max`, `req_rate_max`), sampled.
    pub session_rate: Peak,
    pub connection_rate: Peak,
    pub request_rate: Peak,
    /// Timing maxima (`qtime_max`, `ctime_max`, `rtime_max`, `ttime_max`).
    pub queue_ms: Peak,
    pub connect_ms: Peak,
    pub response_ms: Peak,
    pub total_ms: Peak,
}

impl Peaks {
    pub fn reset(&self) {
        for p in [
            &self.sessions,
            &self.queued,
            &self.session_rate,
            &self.connection_rate,
            &self.request_rate,
            &self.queue_ms,
            &self.connect_ms,
            &self.response_ms,
            &self.total_ms,
        ] {
            p.reset();
        }
    }
}

/// What a worker counts about itself (`show activity`).
#[derive(Debug, Default)]
pub struct WorkerCounters {
    pub accepted: Counter,
    /// Client connections this worker served (accepted here or adopted), numbering them.
    pub accepted_sessions: Counter,
    /// Connections this worker accepted but handed to a less loaded sibling.
    pub handed_off: Counter,
    /// Connections received from a sibling through the inbox.
    pub adopted: Counter,
    pub requests: Counter,
    pub accept_errors: Counter,
    /// Idle server connections closed by the purge timer.
    pub idle_purged: Counter,
    /// Idle server connections this worker took over from a sibling.
    pub fd_takeover: Counter,
    /// Event-loop wake-ups (returns from waiting for events).
    pub loops: Counter,
    /// Health checks run here.
    pub checks_run: Counter,
    /// Health checks that moved here from a busier worker.
    pub checks_moved: Counter,
    /// Health checks that had to wait for a slot (`tune.max-checks-per-thread`).
    pub checks_queued: Counter,
    /// Email alerts this worker sent to a mailer, and those a mailer did not take.
    pub mails_sent: Counter,
    pub mails_failed: Counter,
    /// DATA the HTTP/2 client connections of this worker have queued for their clients and
    /// not written yet (a gauge: `h2_stream::Queued` moves it).
    pub h2_queued: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// QUIC connections whose handshake completed here, and Retry packets sent (a client
    /// asked to prove its address first).
    pub quic_conns: Counter,
    pub quic_retries: Counter,
    /// QUIC connections cut for a flood of frames that do no work.
    pub quic_floods: Counter,
    /// Datagrams this worker's QUIC sockets dropped as no QUIC packet, handed to the
    /// worker they named, or could not hand over.
    pub quic: std::sync::Arc<crate::transport::quic_route::Tally>,
    /// Response data the HTTP/3 streams of this worker have queued and not handed to QUIC
    /// yet (a gauge: `h3_stream::Budget` moves it).
    pub h3_queued: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// TLS client connections accepted here, and those that ended (`CumSslConns`,
    /// `CurrSslConns`), with their rate (`SslRate`).
    pub tls_sessions: Counter,
    pub tls_closed: Counter,
    pub tls_rate: PerSecond,
    /// Client handshakes that were full (and their rate, `SslFrontendKeyRate`) or resumed.
    pub tls_full: Counter,
    pub tls_full_rate: PerSecond,
    pub tls_resumed: Counter,
    /// Full handshakes with servers (`SslBackendKeyRate`).
    pub tls_backend_full_rate: PerSecond,
}

/// One unit of a shared count, given back on drop.
pub struct Held<'a>(&'a AtomicUsize);

impl<'a> Held<'a> {
    pub fn take(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Held(count)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_separate_and_summed() {
        let c: PerWorker<ServerCounters> = PerWorker::new(3);
        c.at(1).traffic.sessions.add(4);
        c.clear();
        assert_eq!(c.sum(|s| &s.traffic.sessions), 0);
        c.at(0).requests.bump();
        c.at(2).requests.add(5);
        c.at(1).reuse.bump();
        assert_eq!(c.sum(|s| &s.requests), 6);
        assert_eq!(c.sum(|s| &s.reuse), 1);
        let a = c.at(0) as *const _ as usize;
        let b = c.at(1) as *const _ as usize;
        assert!(b - a >= 128, "slots share a cache line");
    }
}
