//! Custom error responses: `errorfile CODE FILE` (a complete HTTP response in a file, as
//! HAProxy's errorfiles are) and `http-error status CODE [content-type T] [string S | file F]`.
//! They replace the built-in pages of `sluice_http::error_page`; a backend's pages win over
//! its frontend's once a request has been routed to it.

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::errorpages::ErrorPages;
use crate::conf::ProxyConf;

/// Status codes whose pages may be replaced (those the proxy itself produces).
const CODES: [u16; 12] = [400, 403, 404, 405, 408, 413, 414, 425, 429, 431, 500, 501];
const CODES_5XX: [u16; 4] = [502, 503, 504, 505];

fn status_arg(v: &str, index: usize) -> Result<u16, KwError> {
    v.parse::<u16>()
        .ok()
        .filter(|s| CODES.contains(s) || CODES_5XX.contains(s))
        .ok_or_else(|| {
            KwError::bad(
                index,
                v,
                "expects a status the proxy produces (400-414, 425, 429, 431, 500-505)",
            )
        })
}

/// The response must end the connection cleanly: it is sent before closing. A file without
/// Content-Length (Debian's stock errorfiles have none: their body runs to the close) gets
/// one for its body, so that the client knows where the page ends either way. An empty file
/// (`/dev/null`) is an empty response: the connection closes without an answer.
fn with_close_and_length(head_and_body: &[u8]) -> Result<Vec<u8>, String> {
    if head_and_body.is_empty() {
        return Ok(Vec::new());
    }
    let head = sluice_http::parse_response(head_and_body, false)
        .map_err(|e| format!("not a valid HTTP response: {e}"))?
        .ok_or("incomplete HTTP response (missing the empty line after the headers)")?;
    let v = head_and_body;
    if head.header(v, "content-length").is_some() {
        return Ok(v.to_vec());
    }
    if head.header(v, "transfer-encoding").is_some() {
        return Err("a chunked error response is not supported (give it a Content-Length)".into());
    }
    // Inserted before the empty line that ends the head (CRLF or bare LF line ends).
    let eol: &[u8] = if v[..head.len].ends_with(b"\r\n\r\n") {
        b"\r\n"
    } else {
        b"\n"
    };
    let mut out = v[..head.len - eol.len()].to_vec();
    out.extend_from_slice(format!("content-length: {}", v.len() - head.len).as_bytes());
    out.extend_from_slice(eol);
    out.extend_from_slice(eol);
    out.extend_from_slice(&v[head.len..]);
    Ok(out)
}

/// An error file as it is sent (`errorfile` of a rule's answer).
pub(crate) fn load_errorfile(path: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read file: {e}"))?;
    with_close_and_length(&bytes)
}

/// `errorfile CODE FILE` (in a proxy or an `http-errors` section): the page to send.
pub fn parse_errorfile(a: &[String]) -> Result<(u16, Vec<u8>), KwError> {
    let [code, file] = a else {
        return Err(KwError::Missing("a status code and a file"));
    };
    let status = status_arg(code, 1)?;
    let bytes =
        std::fs::read(file).map_err(|e| KwError::bad(2, file, format!("cannot read file: {e}")))?;
    let bytes = with_close_and_length(&bytes).map_err(|e| KwError::bad(2, file, e))?;
    Ok((status, bytes))
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "errorfile",
        scope: Scope::PROXY,
        help: "errorfile CODE FILE: send FILE (a complete HTTP response) instead of the built-in CODE page",
        parse: |c, a| {
            let (status, bytes) = parse_errorfile(a)?;
            c.errors.set(status, bytes);
            Ok(())
        },
    },
    Keyword {
        name: "errorfiles",
        scope: Scope::PROXY,
        help: "errorfiles NAME [CODE...]: the pages of http-errors section NAME (all, or these codes)",
        parse: |c, a| {
            let [name, codes @ ..] = a else {
                return Err(KwError::Missing("the name of an http-errors section"));
            };
            let codes = codes
                .iter()
                .enumerate()
                .map(|(i, code)| status_arg(code, i + 2))
                .collect::<Result<Vec<_>, _>>()?;
            let at = c.at.clone();
            c.errors.use_set(name.clone(), codes, at);
            Ok(())
        },
    },
    Keyword {
        name: "http-error",
        scope: Scope::PROXY,
        help: "http-error status CODE [content-type T] [string S | file F]: replace a built-in error page",
        parse: |c, a| {
            let [kw, code, rest @ ..] = a else {
                return Err(KwError::Missing("status CODE"));
            };
            if kw != "status" {
                return Err(KwError::bad(1, kw, "expects 'status'"));
            }
            let status = status_arg(code, 2)?;
            let mut content_type = None;
            let mut body = Vec::new();
            let mut i = 0;
            while i < rest.len() {
                let v = rest.get(i + 1).ok_or_else(|| KwError::Invalid(format!("'{}' expects a value", rest[i])))?;
                match rest[i].as_str() {
                    "content-type" => content_type = Some(v.clone()),
                    "string" => body = v.clone().into_bytes(),
                    "file" => body = std::fs::read(v).map_err(|e| KwError::bad(i + 4, v, format!("cannot read file: {e}")))?,
                    "errorfile" => {
                        let (_, page) = parse_errorfile(&[code.clone(), v.clone()])?;
                        c.errors.set(status, page);
                        return Ok(());
                    }
                    "lf-string" | "lf-file" | "errorfiles" | "default-errorfiles" | "hdr" => {
                        return Err(KwError::Invalid(format!(
                            "http-error option '{}': not supported yet",
                            rest[i]
                        )))
                    }
                    other => return Err(KwError::bad(i + 3, other, "expects content-type, string, file or errorfile")),
                }
                i += 2;
            }
            let mut out = format!(
                "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\n",
                sluice_http::reason(status),
                body.len()
            )
            .into_bytes();
            if let Some(ct) = content_type {
                out.extend_from_slice(format!("content-type: {ct}\r\n").as_bytes());
            }
            out.extend_from_slice(b"connection: close\r\n\r\n");
            out.extend_from_slice(&body);
            c.errors.set(status, out);
            Ok(())
        },
    },
];
