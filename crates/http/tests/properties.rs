//! Property tests over the parsers of untrusted input (the same ground as the cargo-fuzz
//! targets in `fuzz/`, but on stable and under `cargo test`): arbitrary bytes never panic,
//! generated valid requests parse to what was generated, and chunked bodies round-trip
//! whatever the chunk sizes and however the input is split.

use proptest::prelude::*;
use sluice_http::{
    parse_request, parse_response, push_chunk_header, ChunkedDecoder, ChunkedOut, Framing, Version,
};

/// Feeds `input` to a decoder in pieces of the given sizes (cycled), keeping unconsumed bytes
/// as a connection buffer would. Returns the output and whether the body ended.
fn decode_split(
    input: &[u8],
    pieces: &[usize],
    mode: ChunkedOut,
) -> Result<(Vec<u8>, bool), sluice_http::ChunkError> {
    let mut d = ChunkedDecoder::new();
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut pos = 0;
    let mut sizes = pieces.iter().cycle();
    while pos < input.len() {
        let n = (*sizes.next().unwrap()).min(input.len() - pos);
        pending.extend_from_slice(&input[pos..pos + n]);
        pos += n;
        let used = d.decode(&pending, mode, &mut out)?;
        assert!(used <= pending.len());
        pending.drain(..used);
    }
    Ok((out, d.is_done()))
}

/// Chunked encoding of `data` with chunks of the given sizes (cycled), optional extensions
/// and hex digits in either case, then a last chunk and `trailers`.
fn encode_chunked(data: &[u8], sizes: &[usize], upper: bool, ext: bool, trailers: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).min(rest.len());
        let mut head = Vec::new();
        push_chunk_header(&mut head, n);
        head.truncate(head.len() - 2);
        if upper {
            head.make_ascii_uppercase();
        }
        out.extend_from_slice(&head);
        if ext {
            out.extend_from_slice(b" ;name=\"quoted \\\" value\";flag");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    out.extend_from_slice(trailers.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
}

/// A header that none of the parser's special cases (framing, Host, Connection) applies to.
fn plain_header() -> impl Strategy<Value = (String, String)> {
    ("x-[a-z0-9-]{1,10}", "([!-~]([ -~]{0,30}[!-~])?)?")
}

prop_compose! {
    fn valid_request()(
        method in prop_oneof![
            Just("GET".to_string()),
            Just("POST".to_string()),
            Just("DELETE".to_string()),
            token().prop_filter("CONNECT has its own rules", |m| m != "CONNECT"),
        ],
        path in "(/[A-Za-z0-9._~%!$&'()*+,;=:@-]{0,12}){1,4}",
        query in proptest::option::of("[A-Za-z0-9=&/?-]{0,20}"),
        http10 in any::<bool>(),
        host in "[a-z0-9]{1,10}(\\.[a-z0-9-]{1,10}){0,2}(:[1-9][0-9]{0,3})?",
        headers in prop::collection::vec(plain_header(), 0..20),
        length in proptest::option::of(0u64..1_000_000),
        lf_only in any::<bool>(),
    ) -> (String, String, Option<String>, bool, String, Vec<(String, String)>, Option<u64>, bool) {
        (method, path, query, http10, host, headers, length, lf_only)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic_the_head_parsers(
        data in prop::collection::vec(any::<u8>(), 0..600),
        head in any::<bool>(),
    ) {
        if let Ok(Some(h)) = parse_request(&data) {
            prop_assert!(h.len <= data.len());
        }
        if let Ok(Some(r)) = parse_response(&data, head) {
            prop_assert!(r.len <= data.len());
        }
    }

    #[test]
    fn mutated_requests_never_panic(
        (method, path, query, http10, host, headers, length, lf_only) in valid_request(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut raw = render(&method, &path, query.as_deref(), http10, &host, &headers, length, lf_only);
        for (at, byte) in edits {
            let i = at.index(raw.len());
            raw[i] = byte;
        }
        let _ = parse_request(&raw);
        let _ = parse_response(&raw, false);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_chunked_decoder(
        data in prop::collection::vec(any::<u8>(), 0..600),
        pieces in prop::collection::vec(1usize..64, 1..4),
    ) {
        let _ = decode_split(&data, &pieces, ChunkedOut::Raw);
        let _ = decode_split(&data, &pieces, ChunkedOut::Chunked);
        // Mostly-valid input goes deeper than random bytes.
        let mut near = encode_chunked(&data, &[7, 100], false, true, "");
        if !data.is_empty() {
            let i = data[0] as usize % near.len();
            near[i] = data[data.len() - 1];
        }
        let _ = decode_split(&near, &pieces, ChunkedOut::Raw);
    }

    #[test]
    fn chunked_round_trip_whatever_the_sizes_and_splits(
        data in prop::collection::vec(any::<u8>(), 0..5000),
        sizes in prop::collection::vec(1usize..3000, 1..6),
        pieces in prop::collection::vec(1usize..700, 1..6),
        upper in any::<bool>(),
        ext in any::<bool>(),
        trailer in proptest::option::of(("x-[a-z]{1,8}", "[!-~]{0,16}")),
    ) {
        let trailers = trailer
            .as_ref()
            .map(|(n, v)| format!("{n}: {v}\r\n"))
            .unwrap_or_default();
        // The decoder caps extensions at 4 KiB per body (an abuse limit): keep them under it.
        let chunks = data.len() / sizes.iter().min().copied().unwrap_or(1) + 1;
        let ext = ext && chunks * 40 < 4096;
        let mut wire = encode_chunked(&data, &sizes, upper, ext, &trailers);
        wire.extend_from_slice(b"GET /next HTTP/1.1\r\n");
        let body_len = wire.len() - 20;

        let (raw, done) = decode_split(&wire[..body_len], &pieces, ChunkedOut::Raw).unwrap();
        prop_assert!(done);
        prop_assert_eq!(&raw, &data);

        // Bytes after the body are left alone.
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        prop_assert_eq!(d.decode(&wire, ChunkedOut::Raw, &mut out).unwrap(), body_len);

        // The canonical re-encoding decodes to the same data, and its trailer survives.
        let (canonical, done) = decode_split(&wire[..body_len], &pieces, ChunkedOut::Chunked).unwrap();
        prop_assert!(done);
        let last = format!("0\r\n{trailers}\r\n");
        prop_assert!(canonical.ends_with(last.as_bytes()));
        let (again, done) = decode_split(&canonical, &[canonical.len()], ChunkedOut::Raw).unwrap();
        prop_assert!(done);
        prop_assert_eq!(&again, &data);
    }

    #[test]
    fn generated_requests_parse_to_what_was_generated(
        (method, path, query, http10, host, headers, length, lf_only) in valid_request(),
        trailing in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut raw = render(&method, &path, query.as_deref(), http10, &host, &headers, length, lf_only);
        let head_len = raw.len();
        raw.extend_from_slice(&trailing);
        let result = parse_request(&raw);
        let with_body = length.is_some_and(|n| n > 0);
        if http10 && with_body && matches!(method.as_str(), "GET" | "HEAD" | "DELETE") {
            prop_assert_eq!(result.unwrap_err().status, 413);
            return Ok(());
        }
        let h = result.unwrap().expect("a complete head");
        prop_assert_eq!(h.len, head_len);
        prop_assert_eq!(&raw[h.method.clone()], method.as_bytes());
        prop_assert_eq!(&raw[h.path.clone()], path.as_bytes());
        let target = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        prop_assert_eq!(&raw[h.target.clone()], target.as_bytes());
        prop_assert_eq!(h.version, if http10 { Version::Http10 } else { Version::Http11 });
        prop_assert_eq!(&raw[h.host.clone().unwrap()], host.as_bytes());
        let expected_framing = match length {
            Some(n) if n > 0 => Framing::Length(n),
            _ => Framing::None,
        };
        prop_assert_eq!(h.framing, expected_framing);
        let parsed: Vec<(&[u8], &[u8])> = h
            .headers
            .iter()
            .map(|x| (&raw[x.name.clone()], &raw[x.value.clone()]))
            .filter(|(n, _)| n.starts_with(b"x-"))
            .collect();
        let generated: Vec<(&[u8], &[u8])> = headers
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        prop_assert_eq!(parsed, generated);
        prop_assert_eq!(h.wants_close, http10);
    }
}

#[allow(clippy::too_many_arguments)]
fn render(
    method: &str,
    path: &str,
    query: Option<&str>,
    http10: bool,
    host: &str,
    headers: &[(String, String)],
    length: Option<u64>,
    lf_only: bool,
) -> Vec<u8> {
    let eol = if lf_only { "\n" } else { "\r\n" };
    let mut s = format!(
        "{method} {path}{}{} HTTP/1.{}{eol}Host: {host}{eol}",
        if query.is_some() { "?" } else { "" },
        query.unwrap_or(""),
        if http10 { 0 } else { 1 },
    );
    for (n, v) in headers {
        s.push_str(&format!("{n}: {v}{eol}"));
    }
    if let Some(n) = length {
        s.push_str(&format!("Content-Length: {n}{eol}"));
    }
    s.push_str(eol);
    s.into_bytes()
}
