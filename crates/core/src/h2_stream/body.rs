//! HTTP/1.1 message bodies as their sender framed them (a length, chunks, or the close),
//! taken apart into the data and trailers an HTTP/2 stream carries.

use bytes::{Buf as _, Bytes};
use sluice_http::{ChunkedDecoder, ChunkedOut, Framing};

/// An HTTP/1.1 body as its sender framed it, taken out of the bytes read so far.
#[derive(Debug)]
pub(crate) struct BodyReader {
    pub(crate) framing: Framing,
    /// Bytes still to come with `Content-Length`.
    left: u64,
    chunks: ChunkedDecoder,
}

impl BodyReader {
    pub(crate) fn new(framing: Framing) -> BodyReader {
        BodyReader {
            framing,
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunks: ChunkedDecoder::new(),
        }
    }

    /// Takes the body bytes out of `buf`, and whether the body is complete.
    pub(crate) fn take(
        &mut self,
        buf: &mut Bytes,
    ) -> Result<(Bytes, bool), sluice_http::ChunkError> {
        match self.framing {
            Framing::Length(_) => {
                let n = (self.left.min(buf.len() as u64)) as usize;
                self.left -= n as u64;
                Ok((buf.split_to(n), self.left == 0))
            }
            Framing::Chunked => {
                let mut out = Vec::with_capacity(buf.len());
                let used = self.chunks.decode(buf, ChunkedOut::Raw, &mut out)?;
                buf.advance(used);
                Ok((out.into(), self.chunks.is_done()))
            }
            // Its end is told apart ([`super::H2Stream::end_body`]), or is the close.
            Framing::UntilClose | Framing::Delimited => Ok((std::mem::take(buf), false)),
            Framing::None => Ok((Bytes::new(), true)),
        }
    }

    /// The trailers of a chunked body, if it had any.
    pub(crate) fn trailers(&self) -> Option<http::HeaderMap> {
        trailers_of_lines(self.chunks.trailers())
    }
}

/// The trailer fields of a chunked body's trailer section (`name: value` lines, as
/// [`sluice_http::ChunkedDecoder::trailers`] keeps them), as HTTP/2 carries them; `None`
/// when there are none (or none HTTP/2 can carry).
pub fn trailers_of_lines(lines: &[u8]) -> Option<http::HeaderMap> {
    if lines.is_empty() {
        return None;
    }
    let mut map = http::HeaderMap::new();
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let name = http::HeaderName::from_bytes(&line[..colon]);
        let value = http::HeaderValue::from_bytes(sluice_http::trim_ows(&line[colon + 1..]));
        if let (Ok(n), Ok(v)) = (name, value) {
            map.append(n, v);
        }
    }
    (!map.is_empty()).then_some(map)
}

/// Appends the last chunk of a chunked body and its trailer section made of `trailers`.
pub fn push_last_chunk(out: &mut Vec<u8>, trailers: Option<&http::HeaderMap>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        sluice_http::push_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}
