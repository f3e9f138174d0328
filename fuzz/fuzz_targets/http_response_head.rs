//! Response heads from servers are untrusted too: any bytes must parse, wait or fail cleanly,
//! and an accepted head must stay inside the input. The first byte picks whether the request
//! was HEAD.
//! Run: `cargo +nightly fuzz run http_response_head -- -max_total_time=60` from `fuzz/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_http::{parse_response, Framing};

fuzz_target!(|input: &[u8]| {
    let Some((&ctl, data)) = input.split_first() else {
        return;
    };
    let head_request = ctl & 1 == 1;
    if let Ok(Some(r)) = parse_response(data, head_request) {
        assert!(r.len <= data.len());
        assert!((100..=599).contains(&r.status));
        assert!(r.reason.start <= r.reason.end && r.reason.end <= r.len);
        for h in &r.headers {
            assert!(h.name.end <= r.len && h.value.end <= r.len);
        }
        if head_request || r.status < 200 || r.status == 204 || r.status == 304 {
            assert_eq!(r.framing, Framing::None);
        }
        if r.framing == Framing::UntilClose {
            assert!(r.must_close);
        }
    }
});
