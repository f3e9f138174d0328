//! Chunked bodies are untrusted: the decoder must never panic, never claim more input than it
//! was given, and give the same body whether the input arrives whole or in pieces; what it
//! re-emits as chunked decodes to that body again. The first byte picks the piece size.
//! Run: `cargo +nightly fuzz run http_chunked -- -max_total_time=60` from `fuzz/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_http::{ChunkedDecoder, ChunkedOut};

/// Decodes `data` fed `piece` bytes at a time, as a connection buffer would.
fn run(data: &[u8], piece: usize, mode: ChunkedOut) -> Option<(Vec<u8>, bool)> {
    let mut d = ChunkedDecoder::new();
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for part in data.chunks(piece) {
        pending.extend_from_slice(part);
        let n = d.decode(&pending, mode, &mut out).ok()?;
        assert!(n <= pending.len());
        pending.drain(..n);
    }
    Some((out, d.is_done()))
}

fuzz_target!(|input: &[u8]| {
    let Some((&ctl, data)) = input.split_first() else {
        return;
    };
    let piece = 1 + ctl as usize;
    let whole = run(data, data.len().max(1), ChunkedOut::Raw);
    let split = run(data, piece, ChunkedOut::Raw);
    if let (Some((a, true)), Some((b, true))) = (&whole, &split) {
        assert_eq!(a, b, "the body depends on how the input was split");
    }
    // Canonical chunked output (one chunk per piece received) decodes to the same body.
    if let Some((canonical, true)) = run(data, piece, ChunkedOut::Chunked) {
        let (body, done) = run(&canonical, canonical.len(), ChunkedOut::Raw)
            .expect("canonical output is valid chunked");
        assert!(done);
        assert_eq!(Some(&body), split.as_ref().map(|s| &s.0));
    }
});
