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
//! each way). The credits count within the window only: a long download earns none for a
//! flood after it.

use std::time::{Duration, Instant};

use quinn::ConnectionStats;

pub use super::h2_frames::{NO_WORK_LIMIT, NO_WORK_WINDOW, UPDATES_PER_DATA};

/// How often a connection's totals are read.
pub const SAMPLE: Duration = Duration::from_secs(1);

/// The connection's totals at the start of the current window, and when it started.
#[derive(Debug)]
pub struct NoWork {
    base: Tallies,
    since: Instant,
}

impl NoWork {
    pub fn new() -> NoWork {
        NoWork {
            base: Tallies::default(),
            since: crate::clock::now(),
        }
    }

    /// Whether the client has sent more frames that do no work within the current window
    /// than it allows, by its connection's totals now.
    pub fn flooded(&mut self, stats: &ConnectionStats) -> bool {
        let now = Tallies::of(stats);
        if crate::clock::since(self.since) > NO_WORK_WINDOW {
            (self.base, self.since) = (now, crate::clock::now());
        }
        now.no_work_since(&self.base) > u64::from(NO_WORK_LIMIT)
    }
}

/// The totals of a connection's frames that the limit reads.
#[derive(Debug, Default, Clone, Copy)]
struct Tallies {
    /// Frames that never do work (PING, the BLOCKED ones, PATH_CHALLENGE).
    idle: u64,
    /// MAX_DATA and MAX_STREAM_DATA received, STREAM frames sent.
    updates: u64,
    sent: u64,
    /// RESET_STREAM and STOP_SENDING received, STREAM frames received.
    ends: u64,
    received: u64,
}

impl Tallies {
    fn of(stats: &ConnectionStats) -> Tallies {
        let rx = &stats.frame_rx;
        Tallies {
            idle: rx.ping
                + rx.data_blocked
                + rx.stream_data_blocked
                + rx.streams_blocked_bidi
                + rx.streams_blocked_uni
                + rx.path_challenge,
            updates: rx.max_data + rx.max_stream_data,
            sent: stats.frame_tx.stream,
            ends: rx.reset_stream + rx.stop_sending,
            received: rx.stream,
        }
    }

    /// Frames that did no work since `base`, the credits earned since then spent first.
    fn no_work_since(&self, base: &Tallies) -> u64 {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        let credit = |got: u64, per: u64| got.saturating_mul(per);
        let updates = d(self.updates, base.updates)
            .saturating_sub(credit(d(self.sent, base.sent), u64::from(UPDATES_PER_DATA)));
        let ends =
            d(self.ends, base.ends).saturating_sub(credit(d(self.received, base.received), 2));
        d(self.idle, base.idle) + updates + ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_count_within_the_window_only() {
        // A long download earned much credit before the window began.
        let base = Tallies {
            idle: 10,
            updates: 1_000,
            sent: 100_000,
            ends: 0,
            received: 50,
        };
        let flood = Tallies {
            updates: base.updates + 2_000,
            ends: 300,
            ..base
        };
        assert_eq!(flood.no_work_since(&base), 2_300);
        // Window updates and stream ends paid for by data and streams in the window.
        let earned = Tallies {
            idle: base.idle + 3,
            updates: base.updates + 40,
            sent: base.sent + 10,
            ends: 4,
            received: base.received + 2,
        };
        assert_eq!(earned.no_work_since(&base), 3);
    }
}
