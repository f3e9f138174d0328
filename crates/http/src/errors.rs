//! The proxy's own error responses: a status line, a few headers and a small HTML body.

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

fn explanation(status: u16) -> &'static str {
    match status {
        400 => "The request could not be understood.",
        403 => "Access to this resource is denied.",
        404 => "No backend is configured for this request.",
        408 => "The request took too long to arrive.",
        413 => "The request body is not allowed here.",
        414 => "The request target is longer than this proxy accepts.",
        431 => "The request header section is larger than this proxy accepts.",
        500 => "The proxy failed while handling the request.",
        501 => "The proxy does not implement what this request needs.",
        502 => "The server sent an invalid or incomplete response.",
        503 => "No server is available to handle this request.",
        504 => "The server did not answer in time.",
        505 => "This proxy speaks HTTP/1.0 and HTTP/1.1 only.",
        _ => "The request could not be served.",
    }
}

/// A complete `Connection: close` error response for `status`.
pub fn error_page(status: u16) -> Vec<u8> {
    let body = format!(
        "<html><body><h1>{status} {}</h1>\n{}\n</body></html>\n",
        reason(status),
        explanation(status)
    );
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\ncontent-type: text/html\r\nconnection: close\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_page_is_a_valid_response() {
        let page = super::error_page(503);
        let r = crate::parse_response(&page, false).unwrap().unwrap();
        assert_eq!(r.status, 503);
        assert!(r.must_close);
        assert_eq!(
            r.framing,
            crate::Framing::Length((page.len() - r.len) as u64)
        );
    }
}
