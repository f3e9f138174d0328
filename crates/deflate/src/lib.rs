//! A stateless DEFLATE encoder (RFC 1951) with zlib (RFC 1950) and gzip (RFC 1952) framing,
//! built for a proxy that compresses thousands of responses at once.
//!
//! Each call compresses only the buffer it is given: matches never reach into data from an
//! earlier call, so nothing but a few bytes of bit queue and checksum survive between calls
//! ([`Stream`] is 24 bytes, no heap). The hash tables are per-thread scratch shared by every
//! stream of the thread, tagged with a per-call generation so a small body never pays for
//! clearing them.
//!
//! Every call ends on a block boundary, so the level may change between any two calls.
//! Levels: 0 stores; 1 is greedy matching emitting fixed-Huffman or stored blocks, whichever
//! is smaller; 2 adds lazy matching over short hash chains and dynamic-Huffman blocks built
//! from the call's own symbol counts.
//!
//! ```
//! use sluice_deflate::{Format, Stream, max_encoded_len, MAX_FINISH_LEN};
//! let body = b"hello hello hello hello";
//! let mut s = Stream::new(Format::Gzip, 1);
//! let mut out = vec![0; max_encoded_len(body.len()) + MAX_FINISH_LEN];
//! let mut n = s.encode(body, &mut out, true).unwrap();
//! n += s.finish(&mut out[n..]).unwrap();
//! out.truncate(n);
//! assert_eq!(&out[..2], &[0x1f, 0x8b]);
//! ```

mod checksum;
mod huffman;
mod matcher;
mod tables;
mod writer;

use writer::Writer;

/// The container around the DEFLATE data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Bare DEFLATE (`Content-Encoding` HAProxy calls `raw-deflate`).
    Raw,
    /// zlib wrapper with Adler-32 (`Content-Encoding: deflate`).
    Zlib,
    /// gzip wrapper with CRC-32.
    Gzip,
}

/// Highest supported level.
pub const MAX_LEVEL: u8 = 2;

/// Output space [`Stream::flush`] may need.
pub const MAX_FLUSH_LEN: usize = 24;
/// Output space [`Stream::finish`] may need.
pub const MAX_FINISH_LEN: usize = 40;

/// The largest output [`Stream::encode`] produces for `n` input bytes (header included).
/// Incompressible data costs its size plus a few bytes per 32 KiB.
pub const fn max_encoded_len(n: usize) -> usize {
    n + (n / matcher::SEGMENT + 1) * matcher::SEGMENT_OVERHEAD + 24
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing written yet: the header is still due.
    Start,
    /// Blocks may follow.
    Open,
    /// The final block has been written; only `finish` may follow.
    Final,
    /// The trailer has been written.
    Done,
}

/// What can go wrong when calling the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The output slice is smaller than the documented bound; nothing was written.
    OutputTooSmall { needed: usize },
    /// Data or a flush after `finish`, or data after a call with `more == false`.
    Finished,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::OutputTooSmall { needed } => {
                write!(f, "output buffer too small (needs {needed} bytes)")
            }
            Error::Finished => write!(f, "the stream is already finished"),
        }
    }
}

impl std::error::Error for Error {}

/// The state of one compressed stream between calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    /// Bits not yet written out (fewer than 8).
    bits: u64,
    nbits: u8,
    format: Format,
    level: u8,
    state: State,
    /// CRC-32 (gzip) or Adler-32 (zlib) of the input so far.
    check: u32,
    /// Input length modulo 2^32.
    isize: u32,
}

impl Stream {
    /// A new stream. Levels above [`MAX_LEVEL`] are clamped.
    pub fn new(format: Format, level: u8) -> Stream {
        Stream {
            bits: 0,
            nbits: 0,
            format,
            level: level.min(MAX_LEVEL),
            state: State::Start,
            check: checksum::initial(format),
            isize: 0,
        }
    }

    pub fn level(&self) -> u8 {
        self.level
    }

    /// Changes the level for the following calls (always legal between calls).
    pub fn set_level(&mut self, level: u8) {
        self.level = level.min(MAX_LEVEL);
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Total input so far, modulo 2^32.
    pub fn total_in(&self) -> u32 {
        self.isize
    }

    /// Compresses `input` into `out` and returns the number of bytes written. `out` must hold
    /// at least [`max_encoded_len`]`(input.len())` bytes. With `more == false` this is the last
    /// input: the final block is written and only [`Stream::finish`] may follow.
    pub fn encode(&mut self, input: &[u8], out: &mut [u8], more: bool) -> Result<usize, Error> {
        if matches!(self.state, State::Final | State::Done) {
            return Err(Error::Finished);
        }
        let needed = max_encoded_len(input.len());
        if out.len() < needed {
            return Err(Error::OutputTooSmall { needed });
        }
        let mut w = Writer::new(out, self.bits, self.nbits);
        self.header(&mut w);
        self.check = checksum::update(self.format, self.check, input);
        self.isize = self.isize.wrapping_add(input.len() as u32);
        let last = !more;
        if input.is_empty() {
            if last {
                w.empty_final_block();
            }
        } else {
            match self.level {
                0 => w.stored_blocks(input, last),
                1 => matcher::fast(&mut w, input, last),
                _ => matcher::better(&mut w, input, last),
            }
        }
        if last {
            self.state = State::Final;
        }
        Ok(self.save(w))
    }

    /// Makes everything encoded so far decodable by the receiver: pending bits are completed
    /// with an empty stored block so the output ends on a byte boundary. `out` needs
    /// [`MAX_FLUSH_LEN`] bytes.
    pub fn flush(&mut self, out: &mut [u8]) -> Result<usize, Error> {
        if self.state == State::Done {
            return Err(Error::Finished);
        }
        if out.len() < MAX_FLUSH_LEN {
            return Err(Error::OutputTooSmall {
                needed: MAX_FLUSH_LEN,
            });
        }
        let mut w = Writer::new(out, self.bits, self.nbits);
        self.header(&mut w);
        if self.state == State::Final {
            w.align();
        } else if w.pending_bits() > 0 {
            w.sync_block();
        }
        Ok(self.save(w))
    }

    /// Writes the final block (unless `encode` already did) and the trailer. `out` needs
    /// [`MAX_FINISH_LEN`] bytes.
    pub fn finish(&mut self, out: &mut [u8]) -> Result<usize, Error> {
        if self.state == State::Done {
            return Err(Error::Finished);
        }
        if out.len() < MAX_FINISH_LEN {
            return Err(Error::OutputTooSmall {
                needed: MAX_FINISH_LEN,
            });
        }
        let mut w = Writer::new(out, self.bits, self.nbits);
        self.header(&mut w);
        if self.state != State::Final {
            w.empty_final_block();
        }
        w.align();
        match self.format {
            Format::Gzip => {
                w.bytes(&self.check.to_le_bytes());
                w.bytes(&self.isize.to_le_bytes());
            }
            Format::Zlib => w.bytes(&self.check.to_be_bytes()),
            Format::Raw => {}
        }
        self.state = State::Done;
        Ok(self.save(w))
    }

    fn header(&mut self, w: &mut Writer<'_>) {
        if self.state != State::Start {
            return;
        }
        match self.format {
            // No name, no mtime, "fastest" flag, OS unknown (255 would be more honest,
            // 3 = Unix is what most encoders send).
            Format::Gzip => w.bytes(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3]),
            // 32 KiB window, deflate, fastest: 0x7801 is a multiple of 31.
            Format::Zlib => w.bytes(&[0x78, 0x01]),
            Format::Raw => {}
        }
        self.state = State::Open;
    }

    fn save(&mut self, w: Writer<'_>) -> usize {
        let (pos, bits, nbits) = w.into_parts();
        self.bits = bits;
        self.nbits = nbits;
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_state_is_small() {
        assert!(
            std::mem::size_of::<Stream>() <= 64,
            "{}",
            std::mem::size_of::<Stream>()
        );
        assert_eq!(std::mem::size_of::<Stream>(), 24);
    }
}
