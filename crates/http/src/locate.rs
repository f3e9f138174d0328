//! Where a refused head goes wrong: the offset of the first byte that breaks HTTP/1.x's
//! grammar (start line, then `name: value` lines, each ended by CRLF or LF), as `show
//! errors` reports it. A head that follows the grammar but was refused for its meaning (a
//! bad Content-Length, say) is located at the start of its first header line.

/// `tchar` of RFC 9110: what a method or a header name is made of.
fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The offset of the first byte of `buf` that breaks the grammar of a request head
/// (`request`) or a response head.
pub fn error_position(buf: &[u8], request: bool) -> usize {
    let mut i = 0;
    let at = |i: usize| buf.get(i).copied();
    // The start line.
    if request {
        let start = i;
        while at(i).is_some_and(tchar) {
            i += 1;
        }
        if i == start || at(i) != Some(b' ') {
            return i;
        }
        i += 1;
        let start = i;
        while at(i).is_some_and(|b| b.is_ascii_graphic()) {
            i += 1;
        }
        if i == start || at(i) != Some(b' ') {
            return i;
        }
        i += 1;
        for (k, &want) in b"HTTP/1.".iter().enumerate() {
            if at(i + k) != Some(want) {
                return i + k;
            }
        }
        i += 7;
        if !at(i).is_some_and(|b| b.is_ascii_digit()) {
            return i;
        }
        i += 1;
    } else {
        for (k, &want) in b"HTTP/1.".iter().enumerate() {
            if at(i + k) != Some(want) {
                return i + k;
            }
        }
        i += 7;
        if !at(i).is_some_and(|b| b.is_ascii_digit()) || at(i + 1) != Some(b' ') {
            return i;
        }
        i += 2;
        for _ in 0..3 {
            if !at(i).is_some_and(|b| b.is_ascii_digit()) {
                return i;
            }
            i += 1;
        }
        while at(i).is_some_and(|b| b == b'\t' || (b >= 0x20 && b != 0x7f)) {
            i += 1;
        }
    }
    match eol(buf, i) {
        Some(n) => i = n,
        None => return i,
    }
    let first_header = i;
    // Header lines, until the empty line.
    loop {
        if let Some(n) = eol(buf, i) {
            // The empty line: the grammar holds; the meaning did not.
            let _ = n;
            return first_header.min(buf.len());
        }
        let start = i;
        while at(i).is_some_and(tchar) {
            i += 1;
        }
        if i == start || at(i) != Some(b':') {
            return i;
        }
        i += 1;
        while at(i).is_some_and(|b| b == b'\t' || (b >= 0x20 && b != 0x7f) || b >= 0x80) {
            i += 1;
        }
        match eol(buf, i) {
            Some(n) => i = n,
            None => return i,
        }
    }
}

/// The offset after a line end at `i` (CRLF or LF), if there is one.
fn eol(buf: &[u8], i: usize) -> Option<usize> {
    match (buf.get(i), buf.get(i + 1)) {
        (Some(b'\r'), Some(b'\n')) => Some(i + 2),
        (Some(b'\n'), _) => Some(i + 1),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::error_position;

    #[test]
    fn finds_the_first_byte_off_the_grammar() {
        assert_eq!(error_position(b"NOT HTTP AT ALL\r\n\r\n", true), 9);
        assert_eq!(
            error_position(b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n", true),
            28
        );
        assert_eq!(error_position(b"G@T / HTTP/1.1\r\n\r\n", true), 1);
        assert_eq!(error_position(b"GET / HTTP/2.0\r\n\r\n", true), 11);
        assert_eq!(
            error_position(b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", true),
            20
        );
        // Grammatical, refused for its meaning: the first header line.
        assert_eq!(
            error_position(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", true),
            16
        );
        assert_eq!(error_position(b"HTTP/1.1 2OO OK\r\n\r\n", false), 10);
        assert_eq!(error_position(b"SSH-2.0-OpenSSH\r\n", false), 0);
    }
}
