//! A streaming decoder for chunked bodies that re-emits them in canonical form.
//!
//! The proxy never forwards a chunked body byte for byte: it decodes it strictly (section C of
//! `docs/h1-strictness.md`) and writes either canonical chunks (`{hex}\r\n data \r\n`, extensions
//! stripped, disallowed trailers dropped) or the bare data. A peer's odd framing therefore
//! never reaches the other side.

use crate::head::{is_tchar, value_ok};
use crate::name_is;

/// Longest chunk-size line accepted (size plus extensions).
const MAX_SIZE_LINE: usize = 4096 + 32;
/// Total extension bytes accepted per message.
const MAX_EXTENSIONS: usize = 4096;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 8192;
/// Chunk sizes are capped at 2^52 - 1 (13 hex digits).
const MAX_SIZE_DIGITS: usize = 13;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("invalid chunk size")]
    BadSize,
    #[error("invalid chunk extension")]
    BadExtension,
    #[error("chunk extensions too long")]
    ExtensionsTooLong,
    #[error("missing CRLF after chunk")]
    BadCrlf,
    #[error("invalid trailer section")]
    BadTrailer,
}

/// What the decoder writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkedOut {
    /// Canonical chunked encoding.
    Chunked,
    /// The body bytes only (for a peer that does not get chunked).
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data,
    DataCrlf,
    Trailers,
    Done,
}

#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    remaining: u64,
    ext_total: usize,
    /// In `Raw` mode, the allowed trailer lines (`name: value\r\n` each), kept for a caller
    /// that re-frames the body itself.
    trailers: Vec<u8>,
    /// Data bytes decoded so far (without framing).
    data: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size,
            remaining: 0,
            ext_total: 0,
            trailers: Vec::new(),
            data: 0,
        }
    }

    /// The body's data bytes decoded so far, without chunk framing or trailers.
    pub fn data_len(&self) -> u64 {
        self.data
    }

    /// Allowed trailer lines seen in `Raw` mode.
    pub fn trailers(&self) -> &[u8] {
        &self.trailers
    }

    /// The last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes as much of `input` as possible, appending re-framed bytes to `out`.
    /// Returns the number of input bytes consumed; fewer than `input.len()` means the rest is
    /// an incomplete line (or follows the end of the body).
    pub fn decode(
        &mut self,
        input: &[u8],
        mode: ChunkedOut,
        out: &mut Vec<u8>,
    ) -> Result<usize, ChunkError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Done => return Ok(pos),
                State::Size => {
                    let Some(nl) = memchr::memchr(b'\n', rest) else {
                        if rest.len() > MAX_SIZE_LINE {
                            return Err(ChunkError::ExtensionsTooLong);
                        }
                        return Ok(pos);
                    };
                    let line = rest[..nl].strip_suffix(b"\r").ok_or(ChunkError::BadSize)?;
                    let (size, ext_len) = parse_size_line(line)?;
                    self.ext_total += ext_len;
                    if self.ext_total > MAX_EXTENSIONS {
                        return Err(ChunkError::ExtensionsTooLong);
                    }
                    pos += nl + 1;
                    if size == 0 {
                        self.state = State::Trailers;
                    } else {
                        self.remaining = size;
                        self.state = State::Data;
                    }
                }
                State::Data => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let n = (self.remaining.min(rest.len() as u64)) as usize;
                    if mode == ChunkedOut::Chunked {
                        push_chunk(out, &rest[..n]);
                    } else {
                        out.extend_from_slice(&rest[..n]);
                    }
                    self.remaining -= n as u64;
                    self.data += n as u64;
                    pos += n;
                    if self.remaining == 0 {
                        self.state = State::DataCrlf;
                    }
                }
                State::DataCrlf => {
                    if rest.len() < 2 {
                        if rest.first().is_some_and(|&b| b != b'\r') {
                            return Err(ChunkError::BadCrlf);
                        }
                        return Ok(pos);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ChunkError::BadCrlf);
                    }
                    pos += 2;
                    self.state = State::Size;
                }
                State::Trailers => {
                    let end = if rest.starts_with(b"\r\n") {
                        Some(0)
                    } else {
                        memchr::memmem::find(rest, b"\r\n\r\n").map(|i| i + 2)
                    };
                    let Some(end) = end else {
                        if rest.len() > MAX_TRAILERS || (rest.first() == Some(&b'\n')) {
                            return Err(ChunkError::BadTrailer);
                        }
                        return Ok(pos);
                    };
                    if mode == ChunkedOut::Chunked {
                        out.extend_from_slice(b"0\r\n");
                    }
                    for line in rest[..end].split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                        let line = line.strip_suffix(b"\r").ok_or(ChunkError::BadTrailer)?;
                        let (name, value) = parse_trailer(line)?;
                        if trailer_allowed(name) {
                            let dst = if mode == ChunkedOut::Chunked {
                                &mut *out
                            } else {
                                &mut self.trailers
                            };
                            dst.extend_from_slice(name);
                            dst.extend_from_slice(b": ");
                            dst.extend_from_slice(value);
                            dst.extend_from_slice(b"\r\n");
                        }
                    }
                    if mode == ChunkedOut::Chunked {
                        out.extend_from_slice(b"\r\n");
                    }
                    pos += end + 2;
                    self.state = State::Done;
                }
            }
        }
    }
}

/// Appends one canonical chunk holding `data` (which must not be empty).
pub fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    push_chunk_header(out, data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `{len:x}\r\n`.
pub fn push_chunk_header(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// Parses `1*HEXDIG [ BWS ";" ext ]`; returns the size and the extension length.
fn parse_size_line(line: &[u8]) -> Result<(u64, usize), ChunkError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > MAX_SIZE_DIGITS {
        return Err(ChunkError::BadSize);
    }
    let size = u64::from_str_radix(std::str::from_utf8(&line[..digits]).unwrap_or("x"), 16)
        .map_err(|_| ChunkError::BadSize)?;
    let ext = &line[digits..];
    if ext.is_empty() {
        return Ok((size, 0));
    }
    let after_ws = ext
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .ok_or(ChunkError::BadSize)?;
    if ext[after_ws] != b';' {
        return Err(ChunkError::BadSize);
    }
    check_extensions(&ext[after_ws..])?;
    Ok((size, ext.len()))
}

fn check_extensions(ext: &[u8]) -> Result<(), ChunkError> {
    let mut i = 0;
    while i < ext.len() {
        let b = ext[i];
        if b == b'"' {
            i += 1;
            loop {
                match ext.get(i) {
                    None => return Err(ChunkError::BadExtension),
                    Some(b'"') => break,
                    Some(b'\\') => {
                        match ext.get(i + 1) {
                            Some(&c) if c == b'\t' || (c >= 0x20 && c != 0x7f) => {}
                            _ => return Err(ChunkError::BadExtension),
                        }
                        i += 2;
                        continue;
                    }
                    Some(&c) if c == b'\t' || (c >= 0x20 && c != 0x7f) => {}
                    Some(_) => return Err(ChunkError::BadExtension),
                }
                i += 1;
            }
        } else if !(is_tchar(b) || matches!(b, b';' | b'=' | b' ' | b'\t')) {
            return Err(ChunkError::BadExtension);
        }
        i += 1;
    }
    Ok(())
}

fn parse_trailer(line: &[u8]) -> Result<(&[u8], &[u8]), ChunkError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(ChunkError::BadTrailer)?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(ChunkError::BadTrailer);
    }
    let value = crate::head::trim_ows(&line[colon + 1..]);
    if !value_ok(value) {
        return Err(ChunkError::BadTrailer);
    }
    Ok((name, value))
}

/// Trailer fields that must never be forwarded (RFC 9110 §6.5.1): framing, routing,
/// authentication and content metadata.
fn trailer_allowed(name: &[u8]) -> bool {
    const DENY: [&str; 9] = [
        "content-length",
        "transfer-encoding",
        "host",
        "authorization",
        "content-type",
        "content-encoding",
        "content-range",
        "trailer",
        "connection",
    ];
    !DENY.iter().any(|d| name_is(name, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8], mode: ChunkedOut) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let n = d.decode(input, mode, &mut out)?;
        Ok((out, n, d.is_done()))
    }

    #[test]
    fn decodes_and_canonicalises() {
        let body = b"5;name=\"v a\"\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\nContent-Length: 9\r\n\r\nNEXT";
        let (out, n, done) = run(body, ChunkedOut::Chunked).unwrap();
        assert!(done);
        assert_eq!(n, body.len() - 4);
        assert_eq!(out, b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n");
        let mut d = ChunkedDecoder::new();
        let mut raw = Vec::new();
        d.decode(body, ChunkedOut::Raw, &mut raw).unwrap();
        assert_eq!(raw, b"hello world");
        assert_eq!(
            d.trailers(),
            b"X-Sum: 1\r\n",
            "kept aside, disallowed ones dropped"
        );
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let body = b"a\r\n0123456789\r\n1;x=y\r\nZ\r\n0\r\nT: v\r\n\r\n";
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        for &b in body.iter() {
            pending.push(b);
            let n = d.decode(&pending, ChunkedOut::Raw, &mut out).unwrap();
            pending.drain(..n);
        }
        assert!(d.is_done());
        assert_eq!(out, b"0123456789Z");
    }

    #[test]
    fn rejects_bad_sizes_and_crlf() {
        for bad in [
            &b"0x3\r\nabc\r\n0\r\n\r\n"[..],
            b"+3\r\nabc\r\n0\r\n\r\n",
            b"-3\r\nabc\r\n0\r\n\r\n",
            b"_3\r\nabc\r\n0\r\n\r\n",
            b" 3\r\nabc\r\n0\r\n\r\n",
            b"\r\nabc\r\n0\r\n\r\n",
            b"3 \r\nabc\r\n0\r\n\r\n",
            b"fffffffffffffffff\r\n",
            b"3\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\n0\r\n\r\n",
            b"3\r\nabcd\r\n0\r\n\r\n",
            b"3;a=\"b\r\nabc\r\n0\r\n\r\n",
            b"3;a\x01\r\nabc\r\n0\r\n\r\n",
            b"3;a\\b\r\nabc\r\n0\r\n\r\n",
        ] {
            assert!(
                run(bad, ChunkedOut::Chunked).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = format!("3;{}\r\nabc\r\n0\r\n\r\n", "a".repeat(70000));
        assert_eq!(
            run(huge.as_bytes(), ChunkedOut::Chunked).unwrap_err(),
            ChunkError::ExtensionsTooLong
        );
    }

    #[test]
    fn incomplete_input_waits() {
        let (out, n, done) = run(b"5\r\nhel", ChunkedOut::Raw).unwrap();
        assert_eq!((out.as_slice(), n, done), (&b"hel"[..], 6, false));
        let (_, n, done) = run(b"5\r\nhello\r\n0\r\nX: y\r\n", ChunkedOut::Raw).unwrap();
        assert_eq!((n, done), (13, false));
    }

    #[test]
    fn chunk_header_hex() {
        let mut v = Vec::new();
        push_chunk_header(&mut v, 0x1a2b);
        assert_eq!(v, b"1a2b\r\n");
    }
}
