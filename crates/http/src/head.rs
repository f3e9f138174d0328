//! Pieces shared by request and response heads.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut, Range};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
    /// A message an HTTP/2 codec decoded (its head is a [`crate::RequestView::h2`] or
    /// [`crate::ResponseView::h2`]).
    Http2,
    /// A message an HTTP/3 codec decoded (read through the same views as HTTP/2's: the
    /// `http` crate's parts).
    Http3,
}

/// A header as two ranges into the buffer the head was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: Range<usize>,
    pub value: Range<usize>,
}

/// A head's field list. Its storage goes back to a per-thread free list when the head is
/// dropped, and the next head parsed on that thread takes it: once a worker has warmed up,
/// parsing a head allocates nothing (heads come and go with every request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields(Vec<Header>);

/// Free lists hold at most this many field lists per thread...
const SPARE_LISTS: usize = 64;
/// ...of at most this many fields each (4 KiB): a rare huge head does not stay parked.
const SPARE_FIELDS: usize = 128;

thread_local! {
    static SPARE: RefCell<Vec<Vec<Header>>> = const { RefCell::new(Vec::new()) };
}

impl Fields {
    /// An empty list with room for `n` fields, reusing a spare one when the thread has one.
    pub fn with_capacity(n: usize) -> Fields {
        let spare = SPARE
            .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
            .ok()
            .flatten();
        let mut v = spare.unwrap_or_default();
        v.reserve(n);
        Fields(v)
    }
}

impl Drop for Fields {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        if v.capacity() == 0 || v.capacity() > SPARE_FIELDS {
            return;
        }
        v.clear();
        // A thread that is exiting, or a list dropped while the free list is in use, just
        // frees it.
        let _ = SPARE.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < SPARE_LISTS {
                    s.push(v);
                }
            }
        });
    }
}

impl Deref for Fields {
    type Target = Vec<Header>;
    fn deref(&self) -> &Vec<Header> {
        &self.0
    }
}

impl DerefMut for Fields {
    fn deref_mut(&mut self) -> &mut Vec<Header> {
        &mut self.0
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes (responses only).
    UntilClose,
    /// Delimited by the codec that carried it (HTTP/2's DATA frames up to END_STREAM):
    /// what is read of it is its data alone, its trailers come aside, and its end is the
    /// message's, not the connection's.
    Delimited,
}

/// Connection-level facts gathered from `Connection` and related headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ConnInfo {
    pub close: bool,
    pub keep_alive: bool,
    /// Lowercased header names nominated by `Connection`, to strip as hop-by-hop.
    pub nominated: Vec<Vec<u8>>,
}

impl ConnInfo {
    pub(crate) fn add(&mut self, value: &[u8]) {
        for tok in value.split(|&b| b == b',') {
            let tok = trim_ows(tok);
            if tok.is_empty() {
                continue;
            }
            // The two connection options are not field names: only other tokens are kept
            // (and copied), so the usual `Connection` value allocates nothing.
            if tok.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if tok.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else {
                self.nominated.push(tok.to_ascii_lowercase());
            }
        }
    }
}

/// Appends one field line, `name: value\r\n`.
pub fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Removes optional whitespace (SP, HTAB) around a field value or list element.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Field values: visible ASCII, SP, HTAB and obs-text; no other control byte.
pub(crate) fn value_ok(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Parses a Content-Length field value, which may be a list of identical values.
/// Returns `None` when malformed or when the list holds different values.
pub(crate) fn parse_content_length(v: &[u8]) -> Option<u64> {
    let mut result = None;
    for part in v.split(|&b| b == b',') {
        let part = trim_ows(part);
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n: u64 = std::str::from_utf8(part).ok()?.parse().ok()?;
        match result {
            Some(prev) if prev != n => return None,
            _ => result = Some(n),
        }
    }
    result
}

/// What a `Transfer-Encoding` list says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TeVerdict {
    /// Exactly `chunked`.
    Chunked,
    /// Syntactically broken, or `chunked` twice, or `chunked` not last.
    Malformed,
    /// Well formed but uses a coding other than a final `chunked`.
    Unsupported,
}

pub(crate) fn transfer_encoding(values: &[&[u8]]) -> TeVerdict {
    let mut codings: Vec<Vec<u8>> = Vec::new();
    for v in values {
        for tok in v.split(|&b| b == b',') {
            let tok = trim_ows(tok);
            if tok.is_empty() || !tok.iter().all(|&b| is_tchar(b)) {
                return TeVerdict::Malformed;
            }
            codings.push(tok.to_ascii_lowercase());
        }
    }
    let chunked = codings
        .iter()
        .filter(|c| c.as_slice() == b"chunked")
        .count();
    if chunked > 1 || (chunked == 1 && codings.last().map(Vec::as_slice) != Some(b"chunked")) {
        return TeVerdict::Malformed;
    }
    if chunked == 1 && codings.len() == 1 {
        TeVerdict::Chunked
    } else {
        TeVerdict::Unsupported
    }
}

/// The byte range of a slice taken from `buf`.
pub(crate) fn range_in(buf: &[u8], s: &[u8]) -> std::ops::Range<usize> {
    let start = s.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_values() {
        assert_eq!(parse_content_length(b"3"), Some(3));
        assert_eq!(parse_content_length(b"003"), Some(3));
        assert_eq!(parse_content_length(b"3, 3"), Some(3));
        assert_eq!(parse_content_length(b"3, 4"), None);
        for bad in [
            &b"+3"[..],
            b"-1",
            b"0x3",
            b"1 2",
            b"",
            b"3_0",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_content_length(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn transfer_encoding_lists() {
        assert_eq!(transfer_encoding(&[b"chunked"]), TeVerdict::Chunked);
        assert_eq!(transfer_encoding(&[b"CHUNKED"]), TeVerdict::Chunked);
        assert_eq!(transfer_encoding(&[b"chunked, gzip"]), TeVerdict::Malformed);
        assert_eq!(
            transfer_encoding(&[b"chunked", b"chunked"]),
            TeVerdict::Malformed
        );
        assert_eq!(
            transfer_encoding(&[b"chunked, chunked"]),
            TeVerdict::Malformed
        );
        assert_eq!(transfer_encoding(&[b", chunked"]), TeVerdict::Malformed);
        assert_eq!(transfer_encoding(&[b"\"chunked\""]), TeVerdict::Malformed);
        assert_eq!(
            transfer_encoding(&[b"gzip, chunked"]),
            TeVerdict::Unsupported
        );
        assert_eq!(transfer_encoding(&[b"identity"]), TeVerdict::Unsupported);
        assert_eq!(transfer_encoding(&[b"xchunked"]), TeVerdict::Unsupported);
    }
}
