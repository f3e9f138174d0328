//! Every output decodes (flate2 with the zlib-rs backend, and the system `gzip -d`) to the
//! input, stays within the documented bound, and the stream state stays tiny.

use std::io::{Read, Write};

use proptest::prelude::*;
use sluice_deflate::{max_encoded_len, Format, Stream, MAX_FINISH_LEN, MAX_FLUSH_LEN};

/// Encodes `data` split at `cuts`, with a flush after chunks where `flushes` says so and the
/// level for each chunk from `levels`. Checks the bound on every call.
fn encode(
    format: Format,
    data: &[u8],
    chunk_sizes: &[usize],
    levels: &[u8],
    flushes: &[bool],
) -> Vec<u8> {
    let mut s = Stream::new(format, levels.first().copied().unwrap_or(1));
    let mut out = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < data.len() {
        let size = chunk_sizes[i % chunk_sizes.len()].max(1);
        let end = (pos + size).min(data.len());
        s.set_level(levels[i % levels.len()]);
        let mut buf = vec![0u8; max_encoded_len(end - pos) + MAX_FLUSH_LEN];
        let n = s.encode(&data[pos..end], &mut buf, true).unwrap();
        assert!(
            n <= max_encoded_len(end - pos),
            "bound exceeded: {n} > {}",
            max_encoded_len(end - pos)
        );
        let mut m = n;
        if flushes[i % flushes.len()] {
            m += s.flush(&mut buf[n..]).unwrap();
        }
        out.extend_from_slice(&buf[..m]);
        pos = end;
        i += 1;
    }
    let mut buf = vec![0u8; MAX_FINISH_LEN];
    let n = s.finish(&mut buf).unwrap();
    out.extend_from_slice(&buf[..n]);
    out
}

fn decode(format: Format, z: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match format {
        Format::Gzip => flate2::read::GzDecoder::new(z).read_to_end(&mut out),
        Format::Zlib => flate2::read::ZlibDecoder::new(z).read_to_end(&mut out),
        Format::Raw => flate2::read::DeflateDecoder::new(z).read_to_end(&mut out),
    }
    .expect("valid stream");
    out
}

fn check(data: &[u8], chunks: &[usize], levels: &[u8], flushes: &[bool]) {
    for format in [Format::Raw, Format::Zlib, Format::Gzip] {
        let z = encode(format, data, chunks, levels, flushes);
        assert_eq!(
            decode(format, &z),
            data,
            "{format:?} chunks {chunks:?} levels {levels:?}"
        );
    }
}

fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("testdata/corpus in the repository")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            !p.file_name().unwrap().to_string_lossy().ends_with(".md") && !p.ends_with("SHA256SUMS")
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    files
}

#[test]
fn edge_cases() {
    for level in 0..=2 {
        check(b"", &[1], &[level], &[false]);
        check(b"x", &[1], &[level], &[false]);
        check(&[7u8; 1000], &[1000], &[level], &[false]);
        check(&vec![b'a'; 300], &[300], &[level], &[true]);
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog. "
            .iter()
            .cycle()
            .take(32768)
            .copied()
            .collect();
        check(&text, &[32768], &[level], &[false]);
        let text64: Vec<u8> = text.iter().cycle().take(65536).copied().collect();
        check(&text64, &[65536], &[level], &[true]);
        check(&random(100_000, 3), &[100_000], &[level], &[false]);
        check(&random(5000, 9), &[7, 100, 4096], &[level], &[true, false]);
    }
}

#[test]
fn empty_stream_and_empty_final_call() {
    for format in [Format::Raw, Format::Zlib, Format::Gzip] {
        // finish only
        let mut s = Stream::new(format, 1);
        let mut buf = vec![0u8; MAX_FINISH_LEN];
        let n = s.finish(&mut buf).unwrap();
        assert_eq!(decode(format, &buf[..n]), b"");
        // encode with more=false, then finish
        let mut s = Stream::new(format, 2);
        let mut buf = vec![0u8; 200];
        let mut n = s.encode(b"abcabcabc", &mut buf, false).unwrap();
        n += s.finish(&mut buf[n..]).unwrap();
        assert_eq!(decode(format, &buf[..n]), b"abcabcabc");
        assert!(
            s.encode(b"x", &mut [0; 100], true).is_err(),
            "no data after the final block"
        );
    }
}

#[test]
fn incompressible_data_stays_within_the_bound() {
    for level in 0..=2 {
        let data = random(1 << 20, 11);
        let z = encode(Format::Gzip, &data, &[1 << 20], &[level], &[false]);
        assert!(z.len() <= max_encoded_len(data.len()) + MAX_FINISH_LEN);
        // Stored blocks: about 5 bytes per 32 KiB plus framing.
        assert!(
            z.len() < data.len() + data.len() / 32768 * 8 + 64,
            "level {level}: {} for {}",
            z.len(),
            data.len()
        );
        assert_eq!(decode(Format::Gzip, &z), data);
    }
}

#[test]
fn level_switches_mid_stream() {
    let data: Vec<u8> = corpus()
        .into_iter()
        .flat_map(|(_, d)| d)
        .take(300_000)
        .collect();
    check(
        &data,
        &[10_000, 3000, 16384],
        &[0, 1, 2, 1, 0, 2],
        &[true, false, false],
    );
}

#[test]
fn every_corpus_file_at_several_chunk_sizes() {
    for (name, data) in corpus() {
        for chunk in [1024, 16384, data.len().max(1)] {
            for level in 0..=2 {
                for format in [Format::Raw, Format::Zlib, Format::Gzip] {
                    let z = encode(format, &data, &[chunk], &[level], &[true]);
                    assert_eq!(
                        decode(format, &z),
                        data,
                        "{name} chunk {chunk} level {level} {format:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn system_gzip_decodes_our_output() {
    let (_, data) = corpus()
        .into_iter()
        .find(|(n, _)| n.ends_with(".html"))
        .unwrap();
    for level in 0..=2 {
        let z = encode(Format::Gzip, &data, &[16384], &[level], &[true]);
        let mut child = std::process::Command::new("gzip")
            .arg("-dc")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("gzip is installed (by .ci/run)");
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(&z).unwrap());
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, data, "level {level}");
    }
}

#[test]
fn compression_actually_compresses() {
    let (_, html) = corpus()
        .into_iter()
        .find(|(n, _)| n.ends_with(".html"))
        .unwrap();
    let l1 = encode(Format::Raw, &html, &[16384], &[1], &[true]).len();
    let l2 = encode(Format::Raw, &html, &[16384], &[2], &[true]).len();
    assert!(
        l1 * 3 < html.len(),
        "level 1 ratio below 3: {l1} of {}",
        html.len()
    );
    assert!(l2 < l1, "level 2 ({l2}) must beat level 1 ({l1})");
}

#[test]
fn output_too_small_is_refused_without_writing() {
    let mut s = Stream::new(Format::Gzip, 1);
    let mut small = vec![0u8; 10];
    assert!(s.encode(&[1u8; 100], &mut small, true).is_err());
    assert!(small.iter().all(|&b| b == 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn arbitrary_data_chunking_flushes_and_levels(
        data in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'a'), Just(b'b')], 0..20_000),
        chunks in prop::collection::vec(1usize..5000, 1..6),
        levels in prop::collection::vec(0u8..=2, 1..5),
        flushes in prop::collection::vec(any::<bool>(), 1..4),
    ) {
        for format in [Format::Raw, Format::Zlib, Format::Gzip] {
            let z = encode(format, &data, &chunks, &levels, &flushes);
            prop_assert_eq!(decode(format, &z), data.clone());
        }
    }
}
