//! Request heads from clients are untrusted: any bytes must give a head, "need more" or a
//! refusal, never a panic, and an accepted head must describe bytes that are really there.
//! Run: `cargo +nightly fuzz run http_request_head -- -max_total_time=60` from `fuzz/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_http::{parse_request, Framing, Version};

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
        Ok(Some(h)) => {
            assert!(h.len <= data.len());
            for r in [&h.method, &h.target, &h.path]
                .into_iter()
                .chain(h.headers.iter().flat_map(|x| [&x.name, &x.value]))
                .chain(h.host.as_ref())
            {
                assert!(r.start <= r.end && r.end <= h.len);
            }
            assert!(!data[h.method.clone()].is_empty());
            if h.version == Version::Http11 {
                assert!(h.host.is_some(), "HTTP/1.1 without Host accepted");
            }
            assert_ne!(
                h.framing,
                Framing::UntilClose,
                "requests are never close-delimited"
            );
            // The verdict does not depend on what follows the head.
            let again = parse_request(&data[..h.len]).unwrap().unwrap();
            assert_eq!(again.len, h.len);
            assert_eq!(again.framing, h.framing);
        }
        Ok(None) => {}
        Err(e) => assert!((400..=505).contains(&e.status)),
    }
});
