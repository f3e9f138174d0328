//! Strict HTTP/1.1 for a proxy: message heads, body framing and error responses.
//!
//! Heads are parsed with `httparse` and then checked against the rules of
//! `docs/h1-strictness.md` at the repository root: anything that could let two parties
//! disagree on where a message ends is refused with the status the table gives. A parsed
//! head keeps byte ranges into the caller's buffer rather than copies, so it is valid only
//! while that buffer is untouched.
//!
//! Transactions read heads through the protocol-neutral [`RequestView`] and
//! [`ResponseView`].
//!
//! Invariant: a request head that parses successfully has exactly one framing
//! ([`Framing`]) and, for HTTP/1.1, exactly one valid Host.

mod answer;
mod chunked;
mod copy;
mod errors;
mod fields;
mod head;
mod locate;
mod normalize;
mod request;
mod response;
mod view;

pub use answer::Answer;
pub use chunked::{push_chunk, push_chunk_header, ChunkError, ChunkedDecoder, ChunkedOut};
pub use copy::RequestCopy;
pub use errors::{error_page, page_says_close, raw_error_page, reason};
pub use fields::FieldList;
pub use head::{push_header, trim_ows, Fields, Framing, Header, Version};
pub use locate::error_position;
pub use normalize::{BadPercent, UriNormalizer};
pub use request::{
    parse_request, parse_request_limited, parse_request_relaxed, path_start, split_target,
    HeadError, RequestHead,
};
pub use response::{parse_response, parse_response_limited, ResponseHead};
pub use view::{join_cookies, Headers, RequestView, ResponseView};

/// Headers beyond this count make a request fail with 431 (a response with 502).
pub const MAX_HEADERS: usize = 100;

/// Case-insensitive ASCII comparison of a header name with a lowercase literal.
pub fn name_is(name: &[u8], lower: &str) -> bool {
    name.eq_ignore_ascii_case(lower.as_bytes())
}
