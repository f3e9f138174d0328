//! `zenc`: compresses standard input to standard output with sluice's encoder.
//!
//! ```text
//! zenc [-f gzip|zlib|raw] [-b BYTES] [-l 0|1|2] < in > out
//! ```
//! Input is fed in chunks of `-b` bytes (default 16384) with a flush after each, as the proxy
//! does with its buffers.

use std::io::{Read, Write};
use std::process::ExitCode;

use sluice_deflate::{max_encoded_len, Format, Stream, MAX_FINISH_LEN, MAX_FLUSH_LEN};

fn usage(msg: &str) -> ExitCode {
    eprintln!("zenc: {msg}\nusage: zenc [-f gzip|zlib|raw] [-b BYTES] [-l 0|1|2] < in > out");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut format, mut chunk, mut level) = (Format::Gzip, 16384usize, 1u8);
    let mut i = 0;
    while i < args.len() {
        let val = args.get(i + 1).map(String::as_str);
        match (args[i].as_str(), val) {
            ("-f", Some("gzip")) => format = Format::Gzip,
            ("-f", Some("zlib")) => format = Format::Zlib,
            ("-f", Some("raw")) => format = Format::Raw,
            ("-b", Some(v)) => match v.parse::<usize>() {
                Ok(n) if n > 0 => chunk = n,
                _ => return usage("-b expects a positive byte count"),
            },
            ("-l", Some(v)) => match v.parse::<u8>() {
                Ok(l) if l <= 2 => level = l,
                _ => return usage("-l expects 0, 1 or 2"),
            },
            ("-h", _) => return usage("help"),
            (a, _) => return usage(&format!("bad argument '{a}'")),
        }
        i += 2;
    }
    let mut stream = Stream::new(format, level);
    let mut input = vec![0u8; chunk];
    let mut out = vec![0u8; max_encoded_len(chunk) + MAX_FLUSH_LEN + MAX_FINISH_LEN];
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    loop {
        // Fill a whole chunk unless the input ends.
        let mut filled = 0;
        while filled < chunk {
            match stdin.read(&mut input[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("zenc: read error: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        let end = filled < chunk;
        let mut n = stream
            .encode(&input[..filled], &mut out, true)
            .expect("output sized to the bound");
        n += if end {
            stream.finish(&mut out[n..]).expect("room for the trailer")
        } else {
            stream.flush(&mut out[n..]).expect("room for a flush")
        };
        if let Err(e) = stdout.write_all(&out[..n]) {
            eprintln!("zenc: write error: {e}");
            return ExitCode::from(1);
        }
        if end {
            break;
        }
    }
    ExitCode::SUCCESS
}
