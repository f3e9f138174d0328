//! Responses the proxy makes itself: error pages, redirects, `return`, the statistics page,
//! the exporter. An [`Answer`] is a head (status, reason, fields in order) and a whole body,
//! with no protocol text: each client codec writes it in its own protocol (the HTTP/1 writer
//! here, [`Answer::write_h1`]; HTTP/2 reads it through [`crate::ResponseView::answer`]).
//!
//! Invariant: the fields are those the page is sent with, `content-length` included and
//! spelled as the page was made (HAProxy capitalises some of its own pages' names), so that
//! HTTP/1 output, and the sizes logs count from it, are the page as HAProxy sends it.

use crate::head::{push_header, Version};
use crate::{parse_response, FieldList};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub reason: Vec<u8>,
    /// HTTP/1.0 for an `errorfile` written so; the proxy's own pages are HTTP/1.1.
    pub version: Version,
    pub fields: FieldList,
    pub body: Vec<u8>,
    /// Nothing is sent (an `errorfile` of an empty file): the connection closes without an
    /// answer, the status still logged.
    pub silent: bool,
}

impl Answer {
    /// An answer of `status` with its standard reason, no field and no body yet.
    pub fn new(status: u16) -> Answer {
        Answer {
            status,
            reason: crate::reason(status).as_bytes().to_vec(),
            version: Version::Http11,
            fields: FieldList::default(),
            body: Vec::new(),
            silent: false,
        }
    }

    /// The empty answer of `status` (nothing sent).
    pub fn silent(status: u16) -> Answer {
        Answer {
            silent: true,
            ..Answer::new(status)
        }
    }

    /// The answer with `body` and its `content-length` as the first field, the way the
    /// proxy writes its pages.
    pub fn with_body(status: u16, body: Vec<u8>) -> Answer {
        let mut a = Answer::new(status);
        a.push(b"content-length", body.len().to_string().as_bytes());
        a.body = body;
        a
    }

    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        self.fields.push(name, value);
    }

    /// The first value of field `lower` (a lowercase name).
    pub fn header(&self, lower: &str) -> Option<&[u8]> {
        self.fields.header(lower)
    }

    /// A `Connection` field says `close`.
    pub fn says_close(&self) -> bool {
        self.fields.nominates(b"close")
    }

    /// The connection ends after this answer: `Connection: close` is added unless a field
    /// says it already.
    pub fn close(&mut self) {
        if !self.silent && !self.says_close() {
            self.push(b"connection", b"close");
        }
    }

    /// The answer as HTTP/1 bytes (none for a silent one).
    pub fn write_h1(&self, out: &mut Vec<u8>) {
        if self.silent {
            return;
        }
        out.extend_from_slice(match self.version {
            Version::Http10 => b"HTTP/1.0 ",
            Version::Http11 | Version::Http2 | Version::Http3 => b"HTTP/1.1 ",
        });
        out.extend_from_slice(self.status.to_string().as_bytes());
        if !self.reason.is_empty() {
            out.push(b' ');
            out.extend_from_slice(&self.reason);
        }
        out.extend_from_slice(b"\r\n");
        for (n, v) in self.fields.iter() {
            push_header(out, n, v);
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
    }

    pub fn to_h1(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.body.len());
        self.write_h1(&mut out);
        out
    }

    /// The answer a whole HTTP/1 response stands for (an `errorfile`); its body is every
    /// byte after the head. An empty text is the silent answer of `status`.
    pub fn parse(text: &[u8], status: u16) -> Result<Answer, &'static str> {
        if text.is_empty() {
            return Ok(Answer::silent(status));
        }
        let head = parse_response(text, false)?
            .ok_or("incomplete HTTP response (missing the empty line after the headers)")?;
        Ok(Answer {
            status: head.status,
            reason: text[head.reason.clone()].to_vec(),
            version: head.version,
            fields: FieldList(
                head.headers
                    .iter()
                    .map(|h| {
                        (
                            text[h.name.clone()].to_vec(),
                            text[h.value.clone()].to_vec(),
                        )
                    })
                    .collect(),
            ),
            body: text[head.len..].to_vec(),
            silent: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_written_as_made_and_read_back() {
        let mut a = Answer::with_body(503, b"down".to_vec());
        a.push(b"Cache-Control", b"no-cache");
        a.close();
        a.close();
        let text = a.to_h1();
        assert_eq!(
            text,
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nCache-Control: no-cache\r\nconnection: close\r\n\r\ndown"
        );
        assert_eq!(Answer::parse(&text, 0).unwrap(), a);
        assert_eq!(a.header("cache-control"), Some(&b"no-cache"[..]));
        let mut keep =
            Answer::parse(b"HTTP/1.0 200\r\nConnection: Keep-Alive, Close\r\n\r\n", 0).unwrap();
        assert!(keep.says_close());
        keep.close();
        assert_eq!(
            keep.to_h1(),
            b"HTTP/1.0 200\r\nConnection: Keep-Alive, Close\r\n\r\n"
        );
        let silent = Answer::parse(b"", 403).unwrap();
        assert!(silent.silent && silent.status == 403 && silent.to_h1().is_empty());
        assert!(Answer::parse(b"HTTP/1.1 200 OK\r\n", 0).is_err());
    }
}
