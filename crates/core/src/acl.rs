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
        let acl = parse_acl(rest, 2)?;
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
        match self.how {
            Match::Int | Match::Len => {
                let v = if self.how == Match::Len {
                    Some(s.as_bytes().len() as i64)
                } else {
                    s.as_int()
                };
                v.is_some_and(|v| {
                    self.patterns.iter().any(|p| match p {
                        Pattern::Range(lo, hi) => {
                            lo.is_none_or(|lo| v >= lo) && hi.is_none_or(|hi| v <= hi)
                        }
                        _ => false,
                    })
                })
            }
            Match::Ip => s.as_ip().is_some_and(|ip| {
                self.patterns.iter().any(|p| match p {
                    Pattern::Net(net, bits) => sample::in_net(ip, *net, *bits),
                    _ => false,
                })
            }),
            Match::Reg => {
                let text = s.as_bytes();
                self.patterns.iter().any(|p| match p {
                    Pattern::Regex(re) => re.0.is_match(&text),
                    _ => false,
                })
            }
            how => {
                let text = s.as_bytes();
                self.patterns.iter().any(|p| match p {
                    Pattern::Text(t) => sample::text_match(how, &text, t, self.icase),
                    _ => false,
                })
            }
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
        let Some(payload) = cx.payload else {
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
fn criterion(text: &str) -> Result<(Expr, Option<Match>), String> {
    let direct = parse_expr(text);
    if let Ok(e) = direct {
        return Ok((e, None));
    }
    let head_end = text.find(['(', ',']).unwrap_or(text.len());
    let (head, tail) = text.split_at(head_end);
    for (suffix, how) in SUFFIXES {
        if let Some(base) = head.strip_suffix(suffix) {
            if let Ok(e) = parse_expr(&format!("{base}{tail}")) {
                return Ok((e, Some(*how)));
            }
        }
    }
    Err(direct.unwrap_err().0)
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
pub(crate) fn parse_acl(args: &[String], first_index: usize) -> Result<Acl, KwError> {
    let Some(crit) = args.first() else {
        return Err(KwError::Missing(
            "a criterion (a sample fetch such as path, hdr(host), src, or an ACL keyword such as path_beg)",
        ));
    };
    let (expr, implied) = criterion(crit).map_err(|e| KwError::bad(first_index, crit, e))?;
    let mut how = implied;
    let mut icase = false;
    let mut words: Vec<(usize, String)> = Vec::new();
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
                    let text = std::fs::read_to_string(f)
                        .map_err(|e| KwError::bad(idx + 1, f, format!("cannot read: {e}")))?;
                    for line in text.lines() {
                        let line = line.trim();
                        if line.is_empty() || line.starts_with('#') {
                            continue;
                        }
                        // A map file (`-M`) has a value after its key: the key is the pattern.
                        let key = if v == "-M" {
                            line.split_whitespace().next().unwrap_or(line)
                        } else {
                            line
                        };
                        words.push((idx + 1, key.to_string()));
                    }
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
    let patterns = patterns(how, icase, &words)?;
    if patterns.is_empty() && !matches!(how, Match::Found | Match::Bool) {
        return Err(KwError::Missing("at least one pattern to match"));
    }
    Ok(Acl {
        expr,
        how,
        icase,
        patterns,
    })
}

/// Prepares the patterns for their method (integer operators apply to the next value).
fn patterns(how: Match, icase: bool, words: &[(usize, String)]) -> Result<Vec<Pattern>, KwError> {
    let mut out = Vec::new();
    let mut op: Option<&str> = None;
    for (idx, w) in words {
        let idx = *idx;
        match how {
            Match::Found | Match::Bool => {
                return Err(KwError::bad(idx, w, "this match method takes no pattern"))
            }
            Match::Int | Match::Len => {
                if matches!(w.as_str(), "eq" | "ge" | "gt" | "le" | "lt") {
                    op = Some(w.as_str());
                    continue;
                }
                let int = |s: &str| {
                    s.parse::<i64>()
                        .map_err(|_| KwError::bad(idx, w, "expects an integer or a range A:B"))
                };
                let range = match op.take() {
                    Some(o) => {
                        let n = int(w)?;
                        match o {
                            "eq" => (Some(n), Some(n)),
                            "ge" => (Some(n), None),
                            "gt" => (Some(n.saturating_add(1)), None),
                            "le" => (None, Some(n)),
                            _ => (None, Some(n.saturating_sub(1))),
                        }
                    }
                    None => match w.split_once(':') {
                        Some((a, b)) => (
                            (!a.is_empty()).then(|| int(a)).transpose()?,
                            (!b.is_empty()).then(|| int(b)).transpose()?,
                        ),
                        None => {
                            let n = int(w)?;
                            (Some(n), Some(n))
                        }
                    },
                };
                out.push(Pattern::Range(range.0, range.1));
            }
            Match::Ip => {
                let (ip, bits) = sample::parse_net(w)
                    .ok_or_else(|| KwError::bad(idx, w, "expects an address or a network"))?;
                out.push(Pattern::Net(ip, bits));
            }
            Match::Reg => {
                let re = regex::bytes::RegexBuilder::new(w)
                    .case_insensitive(icase)
                    .build()
                    .map_err(|e| {
                        KwError::bad(idx, w, format!("invalid regular expression: {e}"))
                    })?;
                out.push(Pattern::Regex(Regex(re)));
            }
            Match::Bin => {
                let bytes = (0..w.len())
                    .step_by(2)
                    .map(|i| w.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
                    .collect::<Option<Vec<u8>>>()
                    .filter(|_| w.len() % 2 == 0)
                    .ok_or_else(|| KwError::bad(idx, w, "expects hexadecimal bytes"))?;
                out.push(Pattern::Text(bytes));
            }
            _ => out.push(Pattern::Text(w.as_bytes().to_vec())),
        }
    }
    if op.is_some() {
        return Err(KwError::Missing("an integer after the operator"));
    }
    Ok(out)
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
    parse_acl(&words, 1).ok()
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
        let acls = if w == "{" {
            let close = words[i..]
                .iter()
                .position(|x| x == "}")
                .ok_or_else(|| KwError::bad(idx, "{", "anonymous ACL without closing '}'"))?;
            let acl = parse_acl(&words[i + 1..i + close], idx + 1)?;
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
            .push(Term { neg, acls });
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
        parse_acl(&words, 2)
    }

    #[test]
    fn criteria_and_methods() {
        let a = acl("path_beg /api /static").unwrap();
        assert_eq!(a.how, Match::Beg);
        assert_eq!(a.patterns.len(), 2);
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
            acl("status 500:599").unwrap().patterns,
            vec![Pattern::Range(Some(500), Some(599))]
        );
        assert_eq!(
            acl("nbsrv(be) lt 2").unwrap().patterns,
            vec![Pattern::Range(None, Some(1))]
        );
        assert!(acl("path_nosuch /x").is_err());
        assert!(acl("src 10.0.0.0/99").is_err());
        assert!(acl("path").is_err(), "no pattern");
        assert!(acl("path -m nosuch x").is_err());
        assert!(acl("path_reg (").is_err());
    }
}
