//! Encoder benchmark (not a test): every corpus file in 16 KiB chunks with a flush after each
//! chunk (hot: one buffer over and over; cold: a fresh copy per response, the copies spread
//! past the caches), and whole, through sluice's levels 1 and 2 and flate2 (zlib-rs backend)
//! levels 1 and 6, all in gzip framing. Reports MB/s of input on one core, ratio and bytes kept per
//! stream, then the time for a 13-byte and a 1 KiB body including stream set-up.
//!
//! `cargo run --release -p sluice-deflate --example bench [-- CORPUS_DIR]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use sluice_deflate::{max_encoded_len, Format, Stream, MAX_FINISH_LEN, MAX_FLUSH_LEN};

/// Counts live heap bytes, to measure what an encoder keeps per stream.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[derive(Clone, Copy)]
enum Enc {
    Sluice(u8),
    Flate2(u32),
}

impl Enc {
    fn name(self) -> String {
        match self {
            Enc::Sluice(l) => format!("sluice level {l}"),
            Enc::Flate2(l) => format!("flate2+zlib-rs level {l}"),
        }
    }

    /// Compresses `data` fed in `chunk`-byte pieces with a flush after each; returns the
    /// compressed size.
    fn run(self, data: &[u8], chunk: usize, out: &mut Vec<u8>) -> usize {
        match self {
            // `out` keeps its length between runs, as the proxy's per-worker scratch does:
            // the encoder never reads the bytes there, so growing it is the only zero-fill.
            Enc::Sluice(level) => {
                let mut s = Stream::new(Format::Gzip, level);
                let need = max_encoded_len(chunk) + MAX_FLUSH_LEN + MAX_FINISH_LEN;
                let mut total = 0;
                for piece in data.chunks(chunk) {
                    if out.len() < total + need {
                        out.resize(total + need, 0);
                    }
                    total += s.encode(piece, &mut out[total..], true).unwrap();
                    total += s.flush(&mut out[total..]).unwrap();
                }
                if out.len() < total + MAX_FINISH_LEN {
                    out.resize(total + MAX_FINISH_LEN, 0);
                }
                total += s.finish(&mut out[total..]).unwrap();
                total
            }
            Enc::Flate2(level) => {
                out.clear();
                let mut e = flate2::write::GzEncoder::new(
                    std::mem::take(out),
                    flate2::Compression::new(level),
                );
                for piece in data.chunks(chunk) {
                    e.write_all(piece).unwrap();
                    e.flush().unwrap();
                }
                *out = e.finish().unwrap();
                out.len()
            }
        }
    }

    /// Heap bytes plus inline size an encoder keeps between calls.
    fn state_bytes(self, sample: &[u8]) -> usize {
        match self {
            Enc::Sluice(level) => {
                let before = LIVE.load(Ordering::Relaxed);
                let mut s = Stream::new(Format::Gzip, level);
                let mut buf = vec![0u8; max_encoded_len(sample.len()) + MAX_FLUSH_LEN];
                let n = s.encode(sample, &mut buf, true).unwrap();
                s.flush(&mut buf[n..]).unwrap();
                drop(buf);
                let held = LIVE.load(Ordering::Relaxed) - before;
                std::hint::black_box(&s);
                held.max(0) as usize + std::mem::size_of::<Stream>()
            }
            Enc::Flate2(level) => {
                let before = LIVE.load(Ordering::Relaxed);
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
                e.write_all(sample).unwrap();
                e.flush().unwrap();
                let out_len = e.get_ref().capacity();
                let held = LIVE.load(Ordering::Relaxed) - before - out_len as isize;
                std::hint::black_box(&e);
                held.max(0) as usize + std::mem::size_of_val(&e)
            }
        }
    }
}

/// Median seconds of one run of `f`, each sample repeating it enough to last ~20 ms.
fn time(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    f();
    let once = start.elapsed().as_secs_f64().max(1e-7);
    let reps = ((0.02 / once) as usize).clamp(1, 1_000_000);
    let mut samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_secs_f64() / reps as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[2]
}

/// Median seconds per response when every response is a different copy of `data`: the
/// copies fill 64 MiB, past this machine's per-core caches, so each response's input comes
/// from far memory as a proxied body does, and no hot loop over one buffer hides that.
fn time_cold(e: Enc, data: &[u8], chunk: usize, out: &mut Vec<u8>) -> f64 {
    const SPREAD: usize = 64 << 20;
    if data.is_empty() {
        return time(|| {
            e.run(data, chunk, out);
        });
    }
    let copies = SPREAD.div_ceil(data.len()).max(2);
    let pool: Vec<u8> = data
        .iter()
        .copied()
        .cycle()
        .take(copies * data.len())
        .collect();
    // Small files make millions of copies: a sample takes at most 20,000 of them, spread
    // over the whole pool, so it stays cold without taking minutes.
    let step = (copies / 20_000).max(1);
    let timed = copies.div_ceil(step);
    let mut samples: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for copy in pool.chunks_exact(data.len()).step_by(step) {
                e.run(copy, chunk, out);
            }
            t.elapsed().as_secs_f64() / timed as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[2]
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/corpus").to_string()
    });
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            !n.ends_with(".md") && n != "SHA256SUMS"
        })
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    let all = [
        Enc::Sluice(1),
        Enc::Sluice(2),
        Enc::Flate2(1),
        Enc::Flate2(6),
    ];
    // BENCH_ENCODERS=0,2 keeps a subset (indices into the list above) while iterating.
    let encoders: Vec<Enc> = match std::env::var("BENCH_ENCODERS") {
        Ok(v) => v
            .split(',')
            .filter_map(|i| i.parse::<usize>().ok())
            .filter_map(|i| all.get(i).copied())
            .collect(),
        Err(_) => all.to_vec(),
    };
    let mut out = Vec::new();
    for (mode, chunk_of, cold) in [
        ("16 KiB chunks, flush after each", Some(16384), false),
        (
            "16 KiB chunks, flush after each, cold: a fresh stream per response over copies \
             spread across 64 MiB, as a proxy meets them",
            Some(16384),
            true,
        ),
        ("whole file per call", None, false),
    ] {
        println!("\n## gzip, {mode}\n");
        println!(
            "| file | bytes | {} |",
            encoders
                .iter()
                .map(|e| format!("{} MB/s | ratio", e.name()))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        println!("|---|---:|{}", "---:|---:|".repeat(encoders.len()));
        let mut agg = vec![(0.0f64, 0usize); encoders.len()];
        let total_in: usize = files.iter().map(|f| f.1.len()).sum();
        for (name, data) in &files {
            let chunk = chunk_of.unwrap_or(data.len().max(1));
            let mut cells = Vec::new();
            for (i, e) in encoders.iter().enumerate() {
                let size = e.run(data, chunk, &mut out);
                let secs = if cold {
                    time_cold(*e, data, chunk, &mut out)
                } else {
                    time(|| {
                        e.run(data, chunk, &mut out);
                    })
                };
                agg[i].0 += secs;
                agg[i].1 += size;
                cells.push(format!(
                    "{:.0} | {:.2}",
                    data.len() as f64 / secs / 1e6,
                    data.len() as f64 / size as f64
                ));
            }
            println!("| {name} | {} | {} |", data.len(), cells.join(" | "));
        }
        let cells: Vec<String> = agg
            .iter()
            .map(|(secs, size)| {
                format!(
                    "**{:.0}** | **{:.2}**",
                    total_in as f64 / secs / 1e6,
                    total_in as f64 / *size as f64
                )
            })
            .collect();
        println!("| **all files** | {total_in} | {} |", cells.join(" | "));
    }
    println!("\n## Per stream\n");
    println!("| encoder | bytes kept per stream | 13-byte body (µs, set-up included) | 1 KiB body (µs) |");
    println!("|---|---:|---:|---:|");
    let html = &files
        .iter()
        .find(|f| f.0.ends_with(".html"))
        .expect("an html file")
        .1;
    let kib = &html[..1024];
    let tiny = b"Hello world!\n";
    for &e in &encoders {
        let state = e.state_bytes(&html[..16384]);
        let t13 = time(|| {
            e.run(tiny, 16384, &mut out);
        });
        let t1k = time(|| {
            e.run(kib, 16384, &mut out);
        });
        println!(
            "| {} | {state} | {:.3} | {:.2} |",
            e.name(),
            t13 * 1e6,
            t1k * 1e6
        );
    }
}
