//! HAProxy's samples: typed values fetched from the connection, the request, the response,
//! the proxy's state or variables, then passed through converters (`req.hdr(host),lower`).
//! ACLs match them, rule actions and log formats print them, `use_backend` names a backend
//! with them.
//!
//! Invariants:
//! - A fetch that has nothing to give (no such header, no response yet) gives no sample, and
//!   a converter that cannot apply (a string that is no integer for `add`) ends the chain with
//!   no sample; neither is an error at run time.
//! - Evaluation never allocates for a fetch that borrows from the request or response unless
//!   a converter changes the bytes.

mod context;
mod conv;
mod fetch;
mod fix;
pub mod hash;
mod json;
mod jwt;
mod language;
mod mqtt;
pub mod payload;
mod table;

pub use self::context::{text_match, Arrival, Captured, Ctx, Kind, Slots, StreamVars, Tracker};
pub use self::conv::{find_entry, in_net};
pub use crate::conf::sample::*;
pub use crate::conf::sample_parse::{
    parse_expr, parse_fmt, parse_map, parse_net, parse_var, ParseError,
};

impl Expr {
    /// Fetches and converts; `None` when any step has nothing to give.
    pub fn eval<'a>(&'a self, cx: &'a Ctx<'a>) -> Option<Sample<'a>> {
        let mut s = fetch::fetch(&self.fetch, cx)?;
        for c in &self.convs {
            s = conv::apply(c, s, cx)?;
        }
        Some(s)
    }

    /// Every value of a multi-valued fetch (each occurrence of a header), converted; ACLs
    /// match any of them.
    pub fn eval_all<'a>(
        &'a self,
        cx: &'a Ctx<'a>,
        mut each: impl FnMut(&Sample<'a>) -> bool,
    ) -> bool {
        let convert = |s: Sample<'a>| -> Option<Sample<'a>> {
            let mut s = s;
            for c in &self.convs {
                s = conv::apply(c, s, cx)?;
            }
            Some(s)
        };
        match fetch::all_values(&self.fetch, cx) {
            Some(values) => values.into_iter().filter_map(convert).any(|s| each(&s)),
            None => self.eval(cx).is_some_and(|s| each(&s)),
        }
    }

    /// What type the expression gives, for an ACL's default match method.
    pub fn output(&self) -> Kind {
        let mut k = fetch::kind(&self.fetch);
        for c in &self.convs {
            k = conv::kind(c, k);
        }
        k
    }
}

impl Fmt {
    /// The value for this evaluation; a sample with nothing to give prints nothing.
    pub fn render(&self, cx: &Ctx<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        for part in &self.0 {
            match part {
                FmtPart::Text(t) => out.extend_from_slice(t.as_bytes()),
                FmtPart::Expr(e) => {
                    if let Some(s) = e.eval(cx) {
                        out.extend_from_slice(&s.as_bytes());
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts() {
        assert_eq!(Sample::str(b"42abc").as_int(), Some(42));
        assert_eq!(Sample::str(b"-7").as_int(), Some(-7));
        assert_eq!(Sample::str(b"x1").as_int(), None);
        assert_eq!(Sample::Bool(true).as_int(), Some(1));
        assert_eq!(Sample::Int(0).as_bool(), Some(false));
        assert_eq!(Sample::str(b"1").as_bool(), None);
        assert_eq!(
            Sample::str(b"10.0.0.1").as_ip(),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(&*Sample::Int(-3).as_bytes(), b"-3");
    }

    #[test]
    fn text_matching() {
        assert!(text_match(Match::Beg, b"/api/x", b"/api", false));
        assert!(text_match(Match::End, b"/a.JPG", b".jpg", true));
        assert!(!text_match(Match::End, b"/a.JPG", b".jpg", false));
        assert!(text_match(Match::Sub, b"abcdef", b"cd", false));
        assert!(text_match(Match::Dir, b"/img/x.png", b"img", false));
        assert!(!text_match(Match::Dir, b"/images/x.png", b"img", false));
        assert!(text_match(
            Match::Dom,
            b"www.example.com:8080",
            b"example.com",
            false
        ));
        assert!(!text_match(
            Match::Dom,
            b"www.myexample.com",
            b"example.com",
            false
        ));
    }
}
