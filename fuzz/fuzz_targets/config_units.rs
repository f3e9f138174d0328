//! Time and size values: any string must parse or be refused without a panic, and an accepted
//! value written back with the smallest unit parses to the same value.
//! Run: `cargo +nightly fuzz run config_units -- -max_total_time=60` from `fuzz/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_config::units::{parse_size, parse_time};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    if let Ok(t) = parse_time(&s) {
        let back = format!("{}us", t.as_micros());
        assert_eq!(parse_time(&back), Ok(t));
    }
    if let Ok(n) = parse_size(&s) {
        assert_eq!(parse_size(&n.to_string()), Ok(n));
    }
});
