//! The proxy's own error responses: a status line, a few headers and a small HTML body.

use crate::Answer;

/// The standard reason phrase for the statuses the proxy produces or commonly relays.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        410 => "Gone",
        413 => "Payload Too Large",
        414 => "URI Too Long",
        425 => "Too Early",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// The status line's reason and the sentence of HAProxy 2.6's built-in page for `status`,
/// where HAProxy has one (so that clients and monitoring that match on its pages see the
/// same text); sluice's own wording for the statuses HAProxy has no page for.
fn page_text(status: u16) -> (&'static str, &'static str) {
    match status {
        200 => ("OK", "Service ready."),
        400 => ("Bad request", "Your browser sent an invalid request."),
        401 => (
            "Unauthorized",
            "You need a valid user and password to access this content.",
        ),
        403 => ("Forbidden", "Request forbidden by administrative rules."),
        404 => ("Not Found", "The resource could not be found."),
        405 => (
            "Method Not Allowed",
            "A request was made of a resource using a request method not supported by that resource",
        ),
        407 => (
            "Unauthorized",
            "You need a valid user and password to access this content.",
        ),
        408 => (
            "Request Time-out",
            "Your browser didn't send a complete request in time.",
        ),
        410 => (
            "Gone",
            "The resource is no longer available and will not be available again.",
        ),
        421 => (
            "Misdirected Request",
            "Request sent to a non-authoritative server.",
        ),
        425 => ("Too Early", "Your browser sent early data."),
        429 => (
            "Too Many Requests",
            "You have sent too many requests in a given amount of time.",
        ),
        500 => ("Internal Server Error", "An internal server error occurred."),
        502 => (
            "Bad Gateway",
            "The server returned an invalid or incomplete response.",
        ),
        503 => (
            "Service Unavailable",
            "No server is available to handle this request.",
        ),
        504 => ("Gateway Time-out", "The server didn't respond in time."),
        413 => (
            "Payload Too Large",
            "The request entity exceeds the maximum allowed.",
        ),
        422 => (
            "Unprocessable Content",
            "The server cannot process the contained instructions.",
        ),
        414 => (
            reason(414),
            "The request target is longer than this proxy accepts.",
        ),
        431 => (
            reason(431),
            "The request header section is larger than this proxy accepts.",
        ),
        501 => (
            "Not Implemented",
            ".The server does not support the functionality required to fulfill the request.",
        ),
        505 => (reason(505), "This proxy speaks HTTP/1.0 and HTTP/1.1 only."),
        other => (reason(other), "The request could not be served."),
    }
}

/// The built-in error page for `status`, ending its connection (`Connection: close`).
pub fn error_page(status: u16) -> Answer {
    let (reason, sentence) = page_text(status);
    let body = format!("<html><body><h1>{status} {reason}</h1>\n{sentence}\n</body></html>\n");
    let mut page = Answer::with_body(status, body.into_bytes());
    page.reason = reason.as_bytes().to_vec();
    page.push(b"cache-control", b"no-cache");
    page.push(b"content-type", b"text/html");
    page.push(b"connection", b"close");
    page
}

/// Whether HAProxy's built-in page for `status` carries `Connection: close` among its
/// own fields (400 and 408 only): it then counts in the page's size (`%B`), where the
/// `Connection` its HTTP/1 layer writes on output for the others does not.
pub fn page_says_close(status: u16) -> bool {
    matches!(status, 400 | 408)
}

/// The built-in page for `status` as HAProxy's connection layer sends it when a request
/// head is refused before any stream exists: the page's text as HAProxy writes it, its
/// header names capitalised, `Connection: close` among them for 400 and 408 only (the
/// connection closes after it in any case).
pub fn raw_error_page(status: u16) -> Answer {
    let (reason, sentence) = page_text(status);
    let body = format!("<html><body><h1>{status} {reason}</h1>\n{sentence}\n</body></html>\n");
    let mut page = Answer::new(status);
    page.reason = reason.as_bytes().to_vec();
    page.push(b"Content-length", body.len().to_string().as_bytes());
    page.push(b"Cache-Control", b"no-cache");
    if page_says_close(status) {
        page.push(b"Connection", b"close");
    }
    page.push(b"Content-Type", b"text/html");
    page.body = body.into_bytes();
    page
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_page_is_a_valid_response() {
        let page = super::error_page(503).to_h1();
        let r = crate::parse_response(&page, false).unwrap().unwrap();
        assert_eq!(r.status, 503);
        assert!(r.must_close);
        assert_eq!(
            r.framing,
            crate::Framing::Length((page.len() - r.len) as u64)
        );
    }

    #[test]
    fn pages_carry_haproxy_texts() {
        let page = String::from_utf8(super::error_page(400).to_h1()).unwrap();
        assert!(page.starts_with("HTTP/1.1 400 Bad request\r\n"), "{page}");
        assert!(page.ends_with(
            "\r\n\r\n<html><body><h1>400 Bad request</h1>\nYour browser sent an invalid request.\n</body></html>\n"
        ));
        // HAProxy's content-length for its 504 page is 92.
        assert!(String::from_utf8(super::error_page(504).to_h1())
            .unwrap()
            .contains("content-length: 92\r\n"));
    }
}
