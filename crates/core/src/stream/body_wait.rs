//! Waiting for a message body before the rules run: `http-request wait-for-body`,
//! `option http-buffer-request` and `http-response wait-for-body`. This module says how long
//! to wait, when what arrived is enough, and what of it the rules see (`req.body`,
//! `res.body`); the transaction does the reading.
//!
//! As in HAProxy, the wait ends when the whole body is in, when `at-least` bytes of data
//! are, when the buffer is full or when the other side stops sending; running out of time
//! is an error (408 for a request, 504 for a response), not a partial body.

use std::time::Duration;

use sluice_http::Framing;

use crate::acl::holds;
use crate::conf::rules::{Action, Rule};
use crate::conf::{Backend, Frontend};
use crate::sample::Ctx;

/// How long the rules wait for a body, and how much of it is enough.
#[derive(Clone, Copy, Debug)]
pub(super) struct BodyWait {
    pub time: Duration,
    pub at_least: Option<u64>,
}

/// What of a body arrived while the rules waited, as they see it.
#[derive(Debug)]
pub(crate) enum Buffered {
    /// A sized body: the bytes of the buffer from one offset to the other.
    Span(usize, usize),
    /// A chunked body's data without its framing, and whether it is all there.
    Decoded(Vec<u8>, bool),
    /// A body its codec delimits: its data, from one offset of the buffer to the other,
    /// and whether it is all there.
    Delimited(usize, usize, bool),
}

impl Buffered {
    /// The whole body's length, when known without its `Content-Length`: a chunked (or
    /// codec-delimited) body that arrived whole (`req.body_size`, `res.body_size`).
    pub fn whole_len(&self) -> Option<u64> {
        match self {
            Buffered::Decoded(data, true) => Some(data.len() as u64),
            Buffered::Delimited(from, to, true) => Some((to - from) as u64),
            _ => None,
        }
    }

    /// The body's bytes, given the buffer it arrived in.
    pub fn bytes<'a>(&'a self, buf: &'a [u8]) -> Option<&'a [u8]> {
        match self {
            Buffered::Span(from, to) | Buffered::Delimited(from, to, _) => buf.get(*from..*to),
            Buffered::Decoded(data, _) => Some(data),
        }
    }
}

/// The first `wait-for-body` rule of a list whose condition holds. It is looked for
/// before the rules run: a condition on what an earlier rule of the list sets does not see
/// it.
fn rule_wait(rules: &[Rule], cx: &Ctx<'_>) -> Option<BodyWait> {
    rules.iter().find_map(|r| match r.action {
        Action::WaitForBody { time, at_least } if holds(&r.cond, cx) => {
            Some(BodyWait { time, at_least })
        }
        _ => None,
    })
}

/// Whether a list has a `wait-for-body` rule at all (looked for before a context is made
/// to evaluate its condition).
pub(super) fn has_wait(rules: &[Rule]) -> bool {
    rules
        .iter()
        .any(|r| matches!(r.action, Action::WaitForBody { .. }))
}

/// Whether the frontend waits for this request's body: a `wait-for-body` rule, else
/// `option http-buffer-request` (for `timeout http-request`, else `timeout client`).
pub(super) fn request_wait(fe: &Frontend, cx: &Ctx<'_>) -> Option<BodyWait> {
    rule_wait(&fe.rules.http_request, cx).or_else(|| {
        fe.stream.buffer_request.then(|| BodyWait {
            time: fe
                .stream
                .timeout_http_request
                .or(fe.stream.timeout_client)
                .unwrap_or(Duration::from_secs(5)),
            at_least: None,
        })
    })
}

/// Whether the response rules wait for this response's body (the backend's rules run
/// first).
pub(super) fn response_wait(fe: &Frontend, be: &Backend, cx: &Ctx<'_>) -> Option<BodyWait> {
    rule_wait(&be.rules.http_response, cx).or_else(|| rule_wait(&fe.rules.http_response, cx))
}

/// Where the wait stands with what arrived of a body (`arrived` starts where the body does).
pub(super) enum Progress {
    /// Not enough yet.
    Waiting,
    /// Enough, or all there is: the rules may run.
    Enough,
}

/// Whether what arrived of a body so far is enough for the rules. A malformed chunked
/// body is the relay's to refuse: no use waiting for more of it.
pub(super) fn progress(arrived: &[u8], framing: Framing, wait: BodyWait) -> Progress {
    let total = match framing {
        Framing::Length(total) => total,
        Framing::Chunked | Framing::UntilClose | Framing::Delimited => u64::MAX,
        Framing::None => return Progress::Enough,
    };
    let want = wait.at_least.filter(|n| *n > 0).unwrap_or(total).min(total);
    let enough = match framing {
        Framing::Chunked => {
            chunked_data(arrived).is_none_or(|(data, done)| done || data.len() as u64 >= want)
        }
        _ => arrived.len() as u64 >= want,
    };
    if enough {
        Progress::Enough
    } else {
        Progress::Waiting
    }
}

/// What the rules see of a body that starts at `start` of `buf`; `ended`: a body its
/// codec delimits has been read to its end.
pub(super) fn buffered(
    buf: &[u8],
    start: usize,
    framing: Framing,
    ended: bool,
) -> Option<Buffered> {
    let arrived = buf.get(start..)?;
    match framing {
        Framing::None => None,
        Framing::Chunked => {
            chunked_data(arrived).map(|(data, whole)| Buffered::Decoded(data, whole))
        }
        Framing::Length(total) => {
            let have = arrived
                .len()
                .min(usize::try_from(total).unwrap_or(usize::MAX));
            Some(Buffered::Span(start, start + have))
        }
        Framing::UntilClose => Some(Buffered::Span(start, buf.len())),
        Framing::Delimited => Some(Buffered::Delimited(start, buf.len(), ended)),
    }
}

/// The data of the chunked body at the start of `bytes`, as far as it arrived, and whether
/// it is complete; `None` when it is malformed.
fn chunked_data(bytes: &[u8]) -> Option<(Vec<u8>, bool)> {
    let mut decoder = sluice_http::ChunkedDecoder::new();
    let mut data = Vec::new();
    decoder
        .decode(bytes, sluice_http::ChunkedOut::Raw, &mut data)
        .ok()?;
    Some((data, decoder.is_done()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: BodyWait = BodyWait {
        time: Duration::from_secs(1),
        at_least: None,
    };

    fn enough(arrived: &[u8], framing: Framing, at_least: Option<u64>) -> bool {
        let wait = BodyWait { at_least, ..WAIT };
        matches!(progress(arrived, framing, wait), Progress::Enough)
    }

    #[test]
    fn a_wait_ends_with_the_body_or_its_first_bytes() {
        assert!(!enough(b"0123", Framing::Length(10), None));
        assert!(enough(b"0123456789", Framing::Length(10), None));
        assert!(enough(b"0123", Framing::Length(10), Some(4)));
        // `at-least 0` is no limit, as in HAProxy.
        assert!(!enough(b"0123", Framing::Length(10), Some(0)));
        assert!(!enough(b"5\r\nhello\r\n", Framing::Chunked, None));
        assert!(enough(b"5\r\nhello\r\n0\r\n\r\n", Framing::Chunked, None));
        assert!(enough(b"5\r\nhello\r\n", Framing::Chunked, Some(5)));
        assert!(enough(b"zz\r\n", Framing::Chunked, None));
        assert!(!enough(b"abc", Framing::UntilClose, Some(4)));
        assert!(enough(b"", Framing::None, None));
    }

    #[test]
    fn the_rules_see_the_data_without_framing() {
        let buf = b"HEAD5\r\nhello\r\n0\r\n\r\n";
        let b = buffered(buf, 4, Framing::Chunked, false).unwrap();
        assert_eq!(b.bytes(buf), Some(&b"hello"[..]));
        assert_eq!(b.whole_len(), Some(5));
        let part = b"HEAD5\r\nhello\r\n";
        assert_eq!(
            buffered(part, 4, Framing::Chunked, false)
                .unwrap()
                .whole_len(),
            None
        );
        let buf = b"HEADhello world";
        let b = buffered(buf, 4, Framing::Length(5), false).unwrap();
        assert_eq!(b.bytes(buf), Some(&b"hello"[..]));
        assert!(buffered(buf, 4, Framing::None, false).is_none());
        // An HTTP/2 body: its data alone, whole once its stream said so.
        let buf = b"HEADhello";
        let b = buffered(buf, 4, Framing::Delimited, false).unwrap();
        assert_eq!((b.bytes(buf), b.whole_len()), (Some(&b"hello"[..]), None));
        let b = buffered(buf, 4, Framing::Delimited, true).unwrap();
        assert_eq!(b.whole_len(), Some(5));
    }
}
