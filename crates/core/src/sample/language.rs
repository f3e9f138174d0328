//! The `language` converter: the tag an `Accept-Language` value prefers among the ones a
//! configuration offers, read as HAProxy 2.6 reads it (best effort on malformed parts, the
//! first range of the highest q-value winning, a range's variant falling back to its base
//! language).

/// The offered tag (one of `offered`'s `;`-separated tags) the highest-weighted range of
/// `accept` matches; none when no range with a q-value above 0 matches.
pub fn preferred<'a>(accept: &[u8], offered: &'a [u8]) -> Option<&'a [u8]> {
    let mut r = Reader { b: accept, at: 0 };
    let (mut best, mut best_q) = (None, 0);
    while r.skip_spaces() {
        let start = r.at;
        r.skip_while(|c| c != b';' && c != b',' && !c.is_ascii_whitespace());
        let range = &accept[start..r.at];
        let tag = offered.split(|&b| b == b';').find(|t| matches(range, t));
        if let Some(tag) = tag.filter(|_| !range.is_empty()) {
            if let Some(q) = r.q_value() {
                if q > best_q {
                    best = Some(tag);
                    if q >= 1000 {
                        break;
                    }
                    best_q = q;
                }
            }
        }
        // On to the next comma (a q-value read without its dot took one character more,
        // which may have been that comma: HAProxy then skips a range, and so does this).
        r.skip_while(|c| c != b',');
        r.at += 1;
    }
    best
}

/// Whether a language range names `tag`, or `tag` is its base language (`fr-CH` names
/// `fr`). Case counts, as in HAProxy.
fn matches(range: &[u8], tag: &[u8]) -> bool {
    match range.strip_prefix(tag) {
        Some(rest) => rest.is_empty() || rest[0] == b'-',
        None => false,
    }
}

/// A cursor over an `Accept-Language` value.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    fn skip_while(&mut self, keep: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
    }

    /// Skips spaces; whether anything is left.
    fn skip_spaces(&mut self) -> bool {
        self.skip_while(|c| c.is_ascii_whitespace());
        self.at < self.b.len()
    }

    /// Takes `c` if it comes next (spaces before it skipped).
    fn eat(&mut self, c: u8) -> bool {
        let found = self.skip_spaces() && self.peek() == Some(c);
        self.at += usize::from(found);
        found
    }

    /// The weight after a range, in thousandths: 1000 unless `;q=` gives one; a parameter
    /// that does not parse counts as 1000 (HAProxy's best effort), values above 1 are 1.
    /// None when something other than a parameter or a comma follows: the range is
    /// skipped.
    fn q_value(&mut self) -> Option<u32> {
        if !self.skip_spaces() || self.peek() == Some(b',') {
            return Some(1000);
        }
        if !self.eat(b';') {
            return None;
        }
        if !self.eat(b'q') || !self.eat(b'=') || !self.skip_spaces() {
            return Some(1000);
        }
        let digit = |r: &Self| {
            r.peek()
                .filter(u8::is_ascii_digit)
                .map(|d| u32::from(d - b'0'))
        };
        let Some(units) = digit(self) else {
            return Some(1000);
        };
        self.at += 1;
        let mut q = units * 1000;
        // As HAProxy's reader, the character after the units is taken whatever it is.
        let dot = self.peek() == Some(b'.');
        self.at += 1;
        if dot {
            for scale in [100, 10, 1] {
                let Some(d) = digit(self) else { break };
                q += d * scale;
                self.at += 1;
            }
        }
        Some(q.min(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick<'a>(accept: &str, offered: &'a str) -> Option<&'a str> {
        preferred(accept.as_bytes(), offered.as_bytes()).map(|t| std::str::from_utf8(t).unwrap())
    }

    #[test]
    fn the_highest_weight_wins_and_the_first_among_equals() {
        assert_eq!(pick("de, en;q=0.5, es;q=0.7", "es;fr;en"), Some("es"));
        assert_eq!(pick("en;q=0.5, es;q=0.5", "es;en"), Some("en"));
        assert_eq!(pick("fr-CH, fr;q=0.9", "es;fr;en"), Some("fr"));
        assert_eq!(pick("en-US", "en-US;en"), Some("en-US"));
        assert_eq!(pick("en;q=0, de", "en"), None);
        assert_eq!(pick("EN", "en"), None);
        assert_eq!(pick("en;q=2", "en"), Some("en"));
        assert_eq!(pick("fr;q=0.001", "fr"), Some("fr"));
        assert_eq!(pick("en x, fr;q=0.5", "en;fr"), Some("fr"));
        // A q-value without its dot takes the comma after it, and the next range is lost.
        assert_eq!(pick("en;q=0, fr;q=0.001", "fr;en"), None);
        assert_eq!(pick("en;q=0.0, fr;q=0.001", "fr;en"), Some("fr"));
    }
}
