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

mod conv;
mod fetch;
pub mod hash;
mod parse;
mod time;

use std::cell::RefCell;
use std::net::SocketAddr;

use sluice_http::{RequestView, ResponseView};

pub use self::conv::in_net;
pub use self::parse::{parse_expr, parse_fmt, parse_map, parse_net, parse_var, ParseError};
pub use crate::conf::sample::*;
use crate::runtime::Process;

/// The variables a stream sees: its connection's and its transaction's (the process's live
/// in `Process`).
#[derive(Debug, Default)]
pub struct StreamVars {
    pub sess: RefCell<Vars>,
    pub txn: RefCell<Vars>,
}

impl StreamVars {
    pub fn get(&self, process: &Process, v: &VarName) -> Option<Sample<'static>> {
        match v.scope {
            VarScope::Proc => process
                .vars
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&v.name)
                .cloned(),
            VarScope::Sess => self.sess.borrow().get(&v.name).cloned(),
            VarScope::Txn | VarScope::Req | VarScope::Res => {
                self.txn.borrow().get(&v.name).cloned()
            }
        }
    }

    pub fn set(&self, process: &Process, v: &VarName, value: Sample<'static>) {
        match v.scope {
            VarScope::Proc => process
                .vars
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .set(&v.name, value),
            VarScope::Sess => self.sess.borrow_mut().set(&v.name, value),
            VarScope::Txn | VarScope::Req | VarScope::Res => {
                self.txn.borrow_mut().set(&v.name, value)
            }
        }
    }

    pub fn unset(&self, process: &Process, v: &VarName) {
        match v.scope {
            VarScope::Proc => process
                .vars
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unset(&v.name),
            VarScope::Sess => self.sess.borrow_mut().unset(&v.name),
            VarScope::Txn | VarScope::Req | VarScope::Res => self.txn.borrow_mut().unset(&v.name),
        }
    }
}

/// Everything a sample may be fetched from, for one evaluation.
pub struct Ctx<'a> {
    pub process: &'a Process,
    pub frontend: usize,
    pub backend: Option<usize>,
    pub server: Option<usize>,
    pub src: SocketAddr,
    /// The client connection (its local address is asked of the kernel only when a rule
    /// needs it).
    pub client: Option<&'a crate::transport::Conn>,
    pub req: Option<&'a RequestView<'a>>,
    /// The request body, when buffered (`option http-buffer-request`).
    pub body: Option<&'a [u8]>,
    pub res: Option<&'a ResponseView<'a>>,
    pub vars: &'a StreamVars,
    pub unique_id: Option<&'a str>,
}

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

/// A sample's type, as known before evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int,
    Ip,
    Str,
    Bin,
}

/// Whether text `s` matches pattern `p` by `how` (`str`, `beg`, `end`, `sub`, `dir`,
/// `dom`), ignoring ASCII case when `icase`.
pub fn text_match(how: Match, s: &[u8], p: &[u8], icase: bool) -> bool {
    let eq = |a: &[u8], b: &[u8]| {
        if icase {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    match how {
        Match::Str => eq(s, p),
        Match::Beg => s.len() >= p.len() && eq(&s[..p.len()], p),
        Match::End => s.len() >= p.len() && eq(&s[s.len() - p.len()..], p),
        Match::Sub => p.is_empty() || s.windows(p.len()).any(|w| eq(w, p)),
        // A part between delimiters (or the ends): '/' and '?' for a directory; also '.'
        // and ':' for a domain.
        Match::Dir => delimited(s, p, b"/?", eq),
        Match::Dom => delimited(s, p, b"/?.:", eq),
        _ => false,
    }
}

fn delimited(s: &[u8], p: &[u8], delims: &[u8], eq: impl Fn(&[u8], &[u8]) -> bool) -> bool {
    let p = trim_delims(p, delims);
    if p.is_empty() {
        return false;
    }
    (0..=s.len().saturating_sub(p.len())).any(|i| {
        s.len() >= i + p.len()
            && eq(&s[i..i + p.len()], p)
            && (i == 0 || delims.contains(&s[i - 1]))
            && (i + p.len() == s.len() || delims.contains(&s[i + p.len()]))
    })
}

fn trim_delims<'p>(mut p: &'p [u8], delims: &[u8]) -> &'p [u8] {
    while let [first, rest @ ..] = p {
        if !delims.contains(first) {
            break;
        }
        p = rest;
    }
    while let [rest @ .., last] = p {
        if !delims.contains(last) {
            break;
        }
        p = rest;
    }
    p
}

/// Prints a sample as log formats and header values do: text as is, `-` for none.
pub fn print(s: Option<&Sample<'_>>, out: &mut Vec<u8>) {
    match s {
        Some(s) => out.extend_from_slice(&s.as_bytes()),
        None => out.push(b'-'),
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
