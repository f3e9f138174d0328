//! Round trip of sluice's DEFLATE encoder through zlib-rs' decoder: arbitrary data, chunking,
//! flushes, levels and formats must decode to the input and stay within the output bound.
//! Run: `cargo +nightly fuzz run deflate_roundtrip -- -max_total_time=60` from `fuzz/`.
#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use sluice_deflate::{max_encoded_len, Format, Stream, MAX_FINISH_LEN, MAX_FLUSH_LEN};

fuzz_target!(|input: &[u8]| {
    let Some((&ctl, data)) = input.split_first() else { return };
    let format = [Format::Raw, Format::Zlib, Format::Gzip][(ctl % 3) as usize];
    let chunk = 1 + (ctl as usize >> 2) * 97;
    let mut s = Stream::new(format, ctl >> 6);
    let mut out = Vec::new();
    for (i, piece) in data.chunks(chunk).enumerate() {
        s.set_level((ctl.wrapping_add(i as u8)) % 3);
        let mut buf = vec![0u8; max_encoded_len(piece.len()) + MAX_FLUSH_LEN];
        let n = s.encode(piece, &mut buf, true).unwrap();
        assert!(n <= max_encoded_len(piece.len()));
        let m = if i % 2 == 0 { n + s.flush(&mut buf[n..]).unwrap() } else { n };
        out.extend_from_slice(&buf[..m]);
    }
    let mut buf = vec![0u8; MAX_FINISH_LEN];
    let n = s.finish(&mut buf).unwrap();
    out.extend_from_slice(&buf[..n]);
    let mut back = Vec::new();
    match format {
        Format::Gzip => flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut back),
        Format::Zlib => flate2::read::ZlibDecoder::new(&out[..]).read_to_end(&mut back),
        Format::Raw => flate2::read::DeflateDecoder::new(&out[..]).read_to_end(&mut back),
    }
    .unwrap();
    assert_eq!(back, data);
});
