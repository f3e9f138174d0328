//! ACLs and conditions, as HAProxy's: `acl NAME CRITERION [FLAGS] [OPERATOR] [PATTERN...]`
//! and the `if`/`unless` conditions that use them.
//!
//! A criterion is a sample expression (`req.hdr(host),lower`), or one of HAProxy's ACL
//! keywords that add a match method to a fetch (`path_beg`, `hdr_dom(host)`, `url_reg`,
//! `hdr_val(content-length)`). Without `-m`, the method follows the sample's type: integers
//! match integer ranges, addresses networks, booleans their truth, text exact strings.
//!
//! A condition is HAProxy's: ACL names (several `acl` lines with one name are OR'ed),
//! predefined ACLs (`TRUE`, `LOCALHOST`, `METH_GET`, ...), `!` negation, implicit AND
//! between terms, `or`/`||` between groups, and anonymous ACLs in braces. Named ACLs must be
//! declared before use; they are resolved when the configuration is read, so workers only
//! evaluate plain data.

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::acl::*;
use crate::conf::patterns::{Compile, Compiled, Entry, Family, FormKind, PatternBook};
use crate::conf::rules::RulesConf;
use crate::conf::ProxyConf;
use crate::sample::{self, parse_expr, Ctx, Expr, Kind, Match, Regex, Sample};

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[Keyword {
    name: "acl",
    scope: Scope::FE_BE,
    help: "acl NAME CRITERION [-i] [-m METHOD] [-f FILE] [OPERATOR] [PATTERN...]: declare or extend a named condition",
    parse: |c, args| {
        let [name, rest @ ..] = args else {
            return Err(KwError::Missing("a name, a criterion and patterns"));
        };
        if !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_.:".contains(ch))
        {
            return Err(KwError::bad(
                1,
                name,
                "ACL names use letters, digits, '-', '_', '.', ':'",
            ));
        }
        let acl = parse_acl(rest, 2, &c.rules.book)?;
        c.rules.acls.push((name.clone(), acl));
        Ok(())
    },
}];

impl Acl {
    pub fn matches(&self, cx: &Ctx<'_>) -> bool {
        match self.how {
            Match::Found => self.expr.eval(cx).is_some(),
            Match::Bool => self
                .expr
                .eval(cx)
                .is_some_and(|s| s.as_bool().unwrap_or(false)),
            _ => self.expr.eval_all(cx, |s| self.pattern_matches(s)),
        }
    }

    fn pattern_matches(&self, s: &Sample<'_>) -> bool {
        self.lists.iter().any(|u| {
            let snapshot = u.list.load();
            any_matches(self.how, self.icase, snapshot.acl(u.form), s)
        })
    }

    /// The patterns it matches now (of every list it reads), for tests and the CLI.
    pub fn current_patterns(&self) -> Vec<Pattern> {
        let mut out = Vec::new();
        for u in &self.lists {
            out.extend(u.list.load().acl(u.form).iter().cloned());
        }
        out
    }
}

/// Whether any of `patterns` matches the sample by `how`.
fn any_matches(how: Match, icase: bool, patterns: &[Pattern], s: &Sample<'_>) -> bool {
    let subject = Subject::of(how, s);
    patterns.iter().any(|p| subject.matches(how, icase, p))
}

/// The indices of the patterns that match the sample by `how` (`get acl`).
pub fn matching(how: Match, icase: bool, patterns: &[Pattern], s: &Sample<'_>) -> Vec<usize> {
    let subject = Subject::of(how, s);
    (0..patterns.len())
        .filter(|&i| subject.matches(how, icase, &patterns[i]))
        .collect()
}

/// A sample as a match method reads it, taken once for all the patterns.
enum Subject<'s> {
    Int(Option<i64>),
    Ip(Option<std::net::IpAddr>),
    Text(std::borrow::Cow<'s, [u8]>),
}

impl<'s> Subject<'s> {
    fn of(how: Match, s: &'s Sample<'_>) -> Self {
        match how {
            Match::Len => Subject::Int(Some(s.as_bytes().len() as i64)),
            Match::Int => Subject::Int(s.as_int()),
            Match::Ip => Subject::Ip(s.as_ip()),
            _ => Subject::Text(s.as_bytes()),
        }
    }

    fn matches(&self, how: Match, icase: bool, p: &Pattern) -> bool {
        match (self, p) {
            (Subject::Int(Some(v)), Pattern::Range(lo, hi)) => {
                lo.is_none_or(|lo| *v >= lo) && hi.is_none_or(|hi| *v <= hi)
            }
            (Subject::Ip(Some(ip)), Pattern::Net(net, bits)) => sample::in_net(*ip, *net, *bits),
            (Subject::Text(text), Pattern::Regex(re)) if how == Match::Reg => re.0.is_match(text),
            (Subject::Text(text), Pattern::Text(t)) if how != Match::Reg => {
                sample::text_match(how, text, t, icase)
            }
            _ => false,
        }
    }
}

impl Cond {
    pub fn eval(&self, cx: &Ctx<'_>) -> bool {
        let hit = self.groups.iter().any(|g| {
            g.iter()
                .all(|t| t.acls.iter().any(|a| a.matches(cx)) != t.neg)
        });
        hit != self.unless
    }
}

/// A condition's outcome while a TCP-mode payload is still arriving: HAProxy's
/// PASS/FAIL/MISS, where MISS means "more bytes may change the answer".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partial {
    Pass,
    Fail,
    Miss,
}

impl Partial {
    fn not(self) -> Partial {
        match self {
            Partial::Pass => Partial::Fail,
            Partial::Fail => Partial::Pass,
            Partial::Miss => Partial::Miss,
        }
    }
}

impl Cond {
    /// Evaluates against a payload that may still grow (`cx.payload`): an ACL that did not
    /// match because bytes were missing is a miss, and a miss decides nothing (negated, it
    /// stays a miss). Without a payload this is [`Cond::eval`].
    pub fn eval_partial(&self, cx: &Ctx<'_>) -> Partial {
        // The payload being inspected: the server's for `tcp-response` rules, else the
        // client's.
        let Some(payload) = cx.res_payload.or(cx.payload) else {
            return if self.eval(cx) {
                Partial::Pass
            } else {
                Partial::Fail
            };
        };
        let acl = |a: &Acl| {
            payload.reset();
            match (a.matches(cx), payload.short()) {
                (true, _) => Partial::Pass,
                (false, true) => Partial::Miss,
                (false, false) => Partial::Fail,
            }
        };
        let term = |t: &Term| {
            let mut r = Partial::Fail;
            for a in &t.acls {
                match acl(a) {
                    Partial::Pass => {
                        r = Partial::Pass;
                        break;
                    }
                    Partial::Miss => r = Partial::Miss,
                    Partial::Fail => {}
                }
            }
            if t.neg {
                r.not()
            } else {
                r
            }
        };
        let group = |g: &Vec<Term>| {
            let mut r = Partial::Pass;
            for t in g {
                match term(t) {
                    Partial::Fail => return Partial::Fail,
                    Partial::Miss => r = Partial::Miss,
                    Partial::Pass => {}
                }
            }
            r
        };
        let mut r = Partial::Fail;
        for g in &self.groups {
            match group(g) {
                Partial::Pass => {
                    r = Partial::Pass;
                    break;
                }
                Partial::Miss => r = Partial::Miss,
                Partial::Fail => {}
            }
        }
        if self.unless {
            r.not()
        } else {
            r
        }
    }
}

/// Evaluates an optional condition (absent means true).
pub fn holds(cond: &Option<Cond>, cx: &Ctx<'_>) -> bool {
    cond.as_ref().is_none_or(|c| c.eval(cx))
}

/// HAProxy's ACL keywords that are a fetch with a match method: the suffix gives the
/// method (`path_beg` is `path -m beg`).
const SUFFIXES: &[(&str, Match)] = &[
    ("_beg", Match::Beg),
    ("_end", Match::End),
    ("_sub", Match::Sub),
    ("_reg", Match::Reg),
    ("_dir", Match::Dir),
    ("_dom", Match::Dom),
    ("_len", Match::Len),
    ("_found", Match::Found),
    ("_val", Match::Int),
    ("_ip", Match::Ip),
];

/// Reads a criterion: an expression, or an ACL keyword with its method.
fn criterion(text: &str, book: &PatternBook) -> Result<(Expr, Option<Match>), String> {
    let direct = parse_expr(text, book);
    if let Ok(e) = direct {
        return Ok((request_hdr(e), None));
    }
    let head_end = text.find(['(', ',']).unwrap_or(text.len());
    let (head, tail) = text.split_at(head_end);
    for (suffix, how) in SUFFIXES {
        if let Some(base) = head.strip_suffix(suffix) {
            if let Ok(e) = parse_expr(&format!("{base}{tail}"), book) {
                return Ok((request_hdr(e), Some(*how)));
            }
        }
    }
    Err(direct.unwrap_err().0)
}

/// An ACL's `hdr` is the request's header wherever the ACL is used (HAProxy's ACL
/// keyword), unlike the `hdr` of a sample expression in a response rule.
fn request_hdr(mut e: Expr) -> Expr {
    if let crate::sample::Fetch::Hdr(name, occ) = e.fetch {
        e.fetch = crate::sample::Fetch::ReqHdr(name, occ);
    }
    e
}

fn method(name: &str) -> Option<Match> {
    Some(match name {
        "found" => Match::Found,
        "bool" => Match::Bool,
        "int" => Match::Int,
        "ip" => Match::Ip,
        "str" => Match::Str,
        "beg" => Match::Beg,
        "end" => Match::End,
        "sub" => Match::Sub,
        "reg" => Match::Reg,
        "dir" => Match::Dir,
        "dom" => Match::Dom,
        "len" => Match::Len,
        "bin" => Match::Bin,
        _ => return None,
    })
}

/// Reads `CRITERION [FLAGS] [OPERATOR] [PATTERN...]`; `first_index` is the position of the
/// criterion on the line, for error messages.
pub(crate) fn parse_acl(
    args: &[String],
    first_index: usize,
    book: &PatternBook,
) -> Result<Acl, KwError> {
    let Some(crit) = args.first() else {
        return Err(KwError::Missing(
            "a criterion (a sample fetch such as path, hdr(host), src, or an ACL keyword such as path_beg)",
        ));
    };
    let (expr, implied) = criterion(crit, book).map_err(|e| KwError::bad(first_index, crit, e))?;
    let mut how = implied;
    let mut icase = false;
    let mut words: Vec<(usize, String)> = Vec::new();
    // Pattern files: where each was named, its path, and whether its lines are map lines.
    let mut files: Vec<(usize, &str, bool)> = Vec::new();
    let mut i = 1;
    let mut flags_done = false;
    while i < args.len() {
        let idx = first_index + i;
        let v = &args[i];
        if !flags_done
            && v.starts_with('-')
            && v.len() > 1
            && !v[1..].starts_with(|c: char| c.is_ascii_digit())
        {
            let value = |what: &'static str| args.get(i + 1).ok_or(KwError::Missing(what));
            match v.as_str() {
                "-i" => icase = true,
                "-n" => {}
                "--" => flags_done = true,
                "-m" => {
                    let m = value("a match method after '-m'")?;
                    how = Some(method(m).ok_or_else(|| {
                        KwError::bad(
                            idx + 1,
                            m,
                            "unknown match method (found, bool, int, ip, str, beg, end, sub, reg, dir, dom, len, bin)",
                        )
                    })?);
                    i += 1;
                }
                "-f" | "-M" => {
                    let f = value("a file name after '-f'")?;
                    files.push((idx + 1, f.as_str(), v == "-M"));
                    i += 1;
                }
                "-u" => i += 1,
                other => {
                    return Err(KwError::bad(
                        idx,
                        other,
                        "unknown ACL flag (-i, -n, -m, -f, -M, -u, --)",
                    ))
                }
            }
            i += 1;
            continue;
        }
        flags_done = true;
        words.push((idx, v.clone()));
        i += 1;
    }
    let how = how.unwrap_or(match expr.output() {
        Kind::Bool => Match::Bool,
        Kind::Int => Match::Int,
        Kind::Ip => Match::Ip,
        Kind::Str | Kind::Bin => Match::Str,
    });
    let entries = entries(how, &words)?;
    for (idx, e) in &entries {
        compile_pattern(how, icase, e).map_err(|why| KwError::bad(*idx, e, why))?;
    }
    if entries.is_empty() && files.is_empty() && !matches!(how, Match::Found | Match::Bool) {
        return Err(KwError::Missing("at least one pattern to match"));
    }
    let mut lists = Vec::new();
    for (idx, path, with_values) in files {
        let list = book
            .file(path, Family::Acl, with_values)
            .map_err(|e| KwError::bad(idx, path, e))?;
        let form = list
            .add_form(acl_kind(how, icase), acl_form(how, icase))
            .map_err(|e| KwError::bad(idx, path, e))?;
        lists.push(PatternUse { list, form });
    }
    let name = crit.split('(').next().unwrap_or(crit);
    let list = book.inline(name, entries.into_iter().map(|(_, e)| e).collect());
    let form = list
        .add_form(acl_kind(how, icase), acl_form(how, icase))
        .map_err(KwError::Invalid)?;
    lists.push(PatternUse { list, form });
    Ok(Acl {
        expr,
        how,
        icase,
        lists,
    })
}

/// What an ACL's use of a list is.
fn acl_kind(how: Match, icase: bool) -> FormKind {
    FormKind {
        how,
        icase,
        values: None,
    }
}

/// How an ACL's patterns are compiled, for its lists.
fn acl_form(how: Match, icase: bool) -> Compile {
    Box::new(move |entries: &[&Entry]| {
        entries
            .iter()
            .map(|e| compile_pattern(how, icase, &e.key))
            .collect::<Result<Vec<_>, _>>()
            .map(Compiled::Acl)
    })
}

/// The patterns written on an ACL line, one entry each (an integer operator goes with the
/// value after it).
fn entries(how: Match, words: &[(usize, String)]) -> Result<Vec<(usize, String)>, KwError> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut op: Option<&str> = None;
    for (idx, w) in words {
        if matches!(how, Match::Found | Match::Bool) {
            return Err(KwError::bad(*idx, w, "this match method takes no pattern"));
        }
        let is_op = matches!(how, Match::Int | Match::Len)
            && matches!(w.as_str(), "eq" | "ge" | "gt" | "le" | "lt");
        match op.take() {
            _ if is_op => op = Some(w),
            Some(o) => out.push((*idx, format!("{o} {w}"))),
            None => out.push((*idx, w.clone())),
        }
    }
    if op.is_some() {
        return Err(KwError::Missing("an integer after the operator"));
    }
    Ok(out)
}

/// One pattern, prepared for its method: the error says why it is not one (HAProxy's
/// words where the CLI shows them).
pub fn compile_pattern(how: Match, icase: bool, text: &str) -> Result<Pattern, String> {
    Ok(match how {
        Match::Found | Match::Bool => return Err("this match method takes no pattern".into()),
        Match::Int | Match::Len => {
            let int = |s: &str| {
                s.parse::<i64>()
                    .map_err(|_| format!("'{text}' expects an integer or a range A:B"))
            };
            let (lo, hi) = match text.split_once(' ') {
                Some((o, w)) => {
                    let n = int(w.trim())?;
                    match o {
                        "eq" => (Some(n), Some(n)),
                        "ge" => (Some(n), None),
                        "gt" => (Some(n.saturating_add(1)), None),
                        "le" => (None, Some(n)),
                        "lt" => (None, Some(n.saturating_sub(1))),
                        _ => return Err(format!("'{o}' is not an integer operator")),
                    }
                }
                None => match text.split_once(':') {
                    Some((a, b)) => (
                        (!a.is_empty()).then(|| int(a)).transpose()?,
                        (!b.is_empty()).then(|| int(b)).transpose()?,
                    ),
                    None => {
                        let n = int(text)?;
                        (Some(n), Some(n))
                    }
                },
            };
            Pattern::Range(lo, hi)
        }
        Match::Ip => {
            let (ip, bits) = sample::parse_net(text)
                .ok_or_else(|| format!("'{text}' is not a valid IPv4 or IPv6 address"))?;
            Pattern::Net(ip, bits)
        }
        Match::Reg => {
            let re = regex::bytes::RegexBuilder::new(text)
                .case_insensitive(icase)
                .build()
                .map_err(|e| format!("invalid regular expression: {e}"))?;
            Pattern::Regex(Regex(re))
        }
        Match::Bin => {
            let bytes = crate::conf::sample_parse::from_hex(text)
                .ok_or_else(|| format!("'{text}' expects hexadecimal bytes"))?;
            Pattern::Text(bytes)
        }
        _ => Pattern::Text(text.as_bytes().to_vec()),
    })
}

/// HAProxy's predefined ACLs, as the ACL lines they stand for.
const PREDEFINED: &[(&str, &str)] = &[
    ("TRUE", "always_true"),
    ("FALSE", "always_false"),
    ("HTTP", "always_true"),
    ("HTTP_1.0", "req.ver 1.0"),
    ("HTTP_1.1", "req.ver 1.1"),
    ("HTTP_2.0", "always_false"),
    ("HTTP_CONTENT", "req.hdr(content-length),add(0) gt 0"),
    ("HTTP_URL_ABS", "url_reg ^[^/:]*://"),
    ("HTTP_URL_SLASH", "url_beg /"),
    ("HTTP_URL_STAR", "url *"),
    ("LOCALHOST", "src 127.0.0.1/8 ::1"),
    ("METH_CONNECT", "method CONNECT"),
    ("METH_DELETE", "method DELETE"),
    ("METH_GET", "method GET HEAD"),
    ("METH_HEAD", "method HEAD"),
    ("METH_OPTIONS", "method OPTIONS"),
    ("METH_POST", "method POST"),
    ("METH_PUT", "method PUT"),
    ("METH_TRACE", "method TRACE"),
    ("REQ_CONTENT", "req.len gt 0"),
    ("WAIT_END", "always_true"),
];

fn predefined(name: &str) -> Option<Acl> {
    let (_, line) = PREDEFINED.iter().find(|(n, _)| *n == name)?;
    let words: Vec<String> = line.split(' ').map(str::to_string).collect();
    // Not part of the configuration's lists: the CLI does not list or edit them.
    parse_acl(&words, 1, &PatternBook::default()).ok()
}

/// Parses an optional `if|unless COND` at the start of `args`.
pub(crate) fn parse_cond(
    rules: &RulesConf,
    args: &[String],
    first_index: usize,
) -> Result<Option<Cond>, KwError> {
    let Some(kw) = args.first() else {
        return Ok(None);
    };
    let unless = match kw.as_str() {
        "if" => false,
        "unless" => true,
        _ => return Err(KwError::bad(first_index, kw, "expects 'if' or 'unless'")),
    };
    let words = &args[1..];
    if words.is_empty() {
        return Err(KwError::Missing("a condition after 'if'/'unless'"));
    }
    let mut groups = vec![Vec::new()];
    let mut i = 0;
    while i < words.len() {
        let idx = first_index + 1 + i;
        let mut w = words[i].as_str();
        if w == "or" || w == "||" {
            if groups.last().is_none_or(Vec::is_empty) {
                return Err(KwError::bad(idx, w, "'or' needs a condition on each side"));
            }
            groups.push(Vec::new());
            i += 1;
            continue;
        }
        let mut neg = false;
        if w == "!" {
            neg = true;
            i += 1;
            w = words
                .get(i)
                .map(String::as_str)
                .ok_or(KwError::Missing("an ACL after '!'"))?;
        } else if let Some(rest) = w.strip_prefix('!') {
            neg = true;
            w = rest;
        }
        let name = (w != "{").then(|| w.to_string());
        let acls = if w == "{" {
            let close = words[i..]
                .iter()
                .position(|x| x == "}")
                .ok_or_else(|| KwError::bad(idx, "{", "anonymous ACL without closing '}'"))?;
            let acl = parse_acl(&words[i + 1..i + close], idx + 1, &rules.book)?;
            i += close;
            vec![acl]
        } else {
            let found: Vec<Acl> = rules
                .acls
                .iter()
                .filter(|(n, _)| n == w)
                .map(|(_, a)| a.clone())
                .collect();
            if found.is_empty() {
                match predefined(w) {
                    Some(acl) => vec![acl],
                    None => {
                        return Err(KwError::bad(
                            idx,
                            w,
                            "no such ACL (ACLs must be declared before use)",
                        ))
                    }
                }
            } else {
                found
            }
        };
        groups
            .last_mut()
            .expect("at least one group")
            .push(Term { neg, acls, name });
        i += 1;
    }
    if groups.last().is_none_or(Vec::is_empty) {
        return Err(KwError::Invalid("condition ends with 'or'".into()));
    }
    Ok(Some(Cond { unless, groups }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(line: &str) -> Result<Acl, KwError> {
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        parse_acl(&words, 2, &PatternBook::default())
    }

    #[test]
    fn criteria_and_methods() {
        let a = acl("path_beg /api /static").unwrap();
        assert_eq!(a.how, Match::Beg);
        assert_eq!(a.current_patterns().len(), 2);
        assert_eq!(acl("hdr_dom(host) -i example.com").unwrap().how, Match::Dom);
        assert_eq!(
            acl("hdr_val(content-length) gt 10").unwrap().how,
            Match::Int
        );
        assert_eq!(acl("src 10.0.0.0/8").unwrap().how, Match::Ip);
        assert_eq!(acl("dst_port 80 443").unwrap().how, Match::Int);
        assert_eq!(
            acl("req.hdr(host),lower -m end .example.com").unwrap().how,
            Match::End
        );
        assert_eq!(acl("ssl_fc").unwrap().how, Match::Bool);
        assert_eq!(acl("req.cook(sid) -m found").unwrap().how, Match::Found);
        assert_eq!(
            acl("status 500:599").unwrap().current_patterns(),
            vec![Pattern::Range(Some(500), Some(599))]
        );
        assert_eq!(
            acl("nbsrv(be) lt 2").unwrap().current_patterns(),
            vec![Pattern::Range(None, Some(1))]
        );
        assert!(acl("path_nosuch /x").is_err());
        assert!(acl("src 10.0.0.0/99").is_err());
        assert!(acl("path").is_err(), "no pattern");
        assert!(acl("path -m nosuch x").is_err());
        assert!(acl("path_reg (").is_err());
    }
}
