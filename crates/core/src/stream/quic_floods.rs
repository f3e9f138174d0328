//! QUIC frames that ask for no work, limited as the HTTP/2 front limits its own
//! (`super::h2_frames`): a client that sends more than [`NO_WORK_LIMIT`] of them within
//! [`NO_WORK_WINDOW`] loses its connection, as a flood of them would cost the worker for
//! nothing. quinn parses the frames and keeps only per-connection totals
//! (`quinn::Connection::stats`), so the totals are sampled every [`SAMPLE`]: a flood is
//! seen at most that late.
//!
//! Frames that do no work: PING (each asks for an acknowledgement); DATA_BLOCKED,
//! STREAM_DATA_BLOCKED and STREAMS_BLOCKED (windows open as the proxy reads, not when it is
//! told); PATH_CHALLENGE (each asks for an answer; a client probing a new address sends a
//! few); MAX_DATA and MAX_STREAM_DATA beyond [`UPDATES_PER_DATA`] for each STREAM frame the
//! proxy sent (a client opens windows as it reads what it was sent); RESET_STREAM and
//! STOP_SENDING beyond two for each STREAM frame the client sent (a stream is ended once
//! each way).

use std::time::{Duration, Instant};

use quinn::ConnectionStats;

pub use super::h2_frames::{NO_WORK_LIMIT, NO_WORK_WINDOW, UPDATES_PER_DATA};

/// How often a connection's totals are read.
pub const SAMPLE: Duration = Duration::from_secs(1);

/// The no-work frames counted at the start of the current window, and when it started.
#[derive(Debug)]
pub struct NoWork {
    base: u64,
    since: Instant,
}

impl NoWork {
    pub fn new() -> NoWork {
        NoWork {
            base: 0,
            since: crate::clock::now(),
        }
    }

    /// Whether the client has sent more frames that do no work than its window allows,
    /// by its connection's totals now.
    pub fn flooded(&mut self, stats: &ConnectionStats) -> bool {
        let total = no_work(stats);
        if crate::clock::since(self.since) > NO_WORK_WINDOW {
            (self.base, self.since) = (total, crate::clock::now());
        }
        total.saturating_sub(self.base) > u64::from(NO_WORK_LIMIT)
    }
}

/// Frames the client sent so far that did no work.
fn no_work(stats: &ConnectionStats) -> u64 {
    let (rx, tx) = (&stats.frame_rx, &stats.frame_tx);
    let updates = (rx.max_data + rx.max_stream_data)
        .saturating_sub(tx.stream.saturating_mul(u64::from(UPDATES_PER_DATA)));
    let ends = (rx.reset_stream + rx.stop_sending).saturating_sub(rx.stream.saturating_mul(2));
    rx.ping
        + rx.data_blocked
        + rx.stream_data_blocked
        + rx.streams_blocked_bidi
        + rx.streams_blocked_uni
        + rx.path_challenge
        + updates
        + ends
}
