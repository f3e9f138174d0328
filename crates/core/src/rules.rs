//! ACLs and the rules that use them: `acl`, `use_backend`, `default_backend`,
//! `http-request` and `http-response`.
//!
//! A condition is HAProxy's: ACL names (several `acl` lines with one name are OR'ed),
//! `!` negation, implicit AND between terms, `or`/`||` between groups, and anonymous ACLs in
//! braces. Named ACLs must be declared before use; they are resolved at parse time so the
//! workers only evaluate plain data. Conditions see the request as the client sent it.

use sluice_config::{ConfigError, Keyword, KwError, Scope};
use sluice_http::{name_is, trim_ows, RequestView};

pub use crate::conf::rules::*;
use crate::conf::{Loc, ProxyConf};

impl Acl {
    fn matches(&self, req: &RequestView<'_>) -> bool {
        let eq = |a: &[u8], b: &[u8]| {
            if self.icase {
                a.eq_ignore_ascii_case(b)
            } else {
                a == b
            }
        };
        let sample = |s: &[u8]| {
            self.values.iter().any(|v| {
                let v = v.as_bytes();
                match self.criterion {
                    Criterion::PathBeg => s.len() >= v.len() && eq(&s[..v.len()], v),
                    Criterion::PathEnd => s.len() >= v.len() && eq(&s[s.len() - v.len()..], v),
                    _ => eq(s, v),
                }
            })
        };
        match &self.criterion {
            Criterion::Path | Criterion::PathBeg | Criterion::PathEnd => sample(req.path()),
            Criterion::Method => sample(req.method()),
            Criterion::Hdr(name) => req.headers().any(|(n, v)| {
                name_is(n, name) && v.split(|&b| b == b',').any(|v| sample(trim_ows(v)))
            }),
        }
    }
}

impl Cond {
    pub fn eval(&self, req: &RequestView<'_>) -> bool {
        let hit = self.groups.iter().any(|g| {
            g.iter()
                .all(|t| t.acls.iter().any(|a| a.matches(req)) != t.neg)
        });
        hit != self.unless
    }
}

/// Evaluates an optional condition (absent means true).
pub fn holds(cond: &Option<Cond>, req: &RequestView<'_>) -> bool {
    cond.as_ref().is_none_or(|c| c.eval(req))
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "acl",
        scope: Scope::FE_BE,
        help: "acl NAME CRITERION [-i] VALUE...: declare or extend a named condition",
        parse: |c, args| {
            let [name, rest @ ..] = args else {
                return Err(KwError::Missing("a name, a criterion and values"));
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
    },
    Keyword {
        name: "use_backend",
        scope: Scope::FRONTEND,
        help: "use_backend NAME [if|unless COND]: route matching requests to a backend",
        parse: |c, args| {
            let Some(name) = args.first() else {
                return Err(KwError::Missing("a backend name"));
            };
            let cond = parse_cond(&c.rules, &args[1..], 2)?;
            let at = c.at.clone();
            c.rules.switching.push((name.clone(), cond, at));
            Ok(())
        },
    },
    Keyword {
        name: "default_backend",
        scope: Scope::FE,
        help: "default_backend NAME: backend for requests no use_backend rule routed",
        parse: |c, args| {
            let name = crate::conf::one_arg(args, "a backend name")?;
            c.rules.default_backend = Some((name.to_string(), c.at.clone()));
            Ok(())
        },
    },
    Keyword {
        name: "http-request",
        scope: Scope::FE_BE,
        help:
            "http-request return|deny|allow|set-header|add-header|del-header|use-service ... [if|unless COND]",
        parse: |c, args| {
            let rule = parse_rule(&c.rules, args, Side::Request)?;
            c.rules.http_request.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "http-response",
        scope: Scope::FE_BE,
        help: "http-response set-header|add-header|del-header ... [if|unless COND]",
        parse: |c, args| {
            let rule = parse_rule(&c.rules, args, Side::Response)?;
            c.rules.http_response.push(rule);
            Ok(())
        },
    },
];

fn parse_acl(args: &[String], first_index: usize) -> Result<Acl, KwError> {
    let Some(crit) = args.first() else {
        return Err(KwError::Missing(
            "a criterion (path, path_beg, path_end, hdr(NAME), method)",
        ));
    };
    let criterion = match crit.as_str() {
        "path" => Criterion::Path,
        "path_beg" => Criterion::PathBeg,
        "path_end" => Criterion::PathEnd,
        "method" => Criterion::Method,
        c => match c.strip_prefix("hdr(").and_then(|r| r.strip_suffix(')')) {
            Some(h) if !h.is_empty() && !h.contains(',') => Criterion::Hdr(h.to_ascii_lowercase()),
            _ => {
                return Err(KwError::bad(
                    first_index,
                    c,
                    "unknown criterion (path, path_beg, path_end, hdr(NAME), method)",
                ))
            }
        },
    };
    let mut icase = false;
    let mut values = Vec::new();
    let mut flags_done = false;
    for (i, v) in args[1..].iter().enumerate() {
        if !flags_done && v.starts_with('-') {
            match v.as_str() {
                "-i" => icase = true,
                "--" => flags_done = true,
                _ => {
                    return Err(KwError::bad(
                        first_index + 1 + i,
                        v,
                        "unsupported ACL flag (only -i and --)",
                    ))
                }
            }
            continue;
        }
        flags_done = true;
        values.push(v.clone());
    }
    if values.is_empty() {
        return Err(KwError::Missing("at least one value to match"));
    }
    Ok(Acl {
        criterion,
        values,
        icase,
    })
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
                return Err(KwError::bad(
                    idx,
                    w,
                    "no such ACL (ACLs must be declared before use)",
                ));
            }
            found
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

/// Actions HAProxy has that sluice does not implement yet.
const PENDING_ACTIONS: &[&str] = &[
    "redirect",
    "set-path",
    "set-query",
    "set-uri",
    "set-method",
    "replace-header",
    "replace-value",
    "set-var",
    "unset-var",
    "tarpit",
    "auth",
    "capture",
    "track-sc0",
    "track-sc1",
    "track-sc2",
    "set-log-level",
    "use-service",
    "cache-use",
    "cache-store",
    "set-status",
    "silent-drop",
    "reject",
    "wait-for-body",
    "normalize-uri",
    "lua",
];

fn parse_rule(rules: &RulesConf, args: &[String], side: Side) -> Result<HttpRule, KwError> {
    let Some(action) = args.first() else {
        return Err(KwError::Missing("an action"));
    };
    let cond_at = args
        .iter()
        .position(|a| a == "if" || a == "unless")
        .unwrap_or(args.len());
    let cond = parse_cond(rules, &args[cond_at..], cond_at + 1)?;
    if side == Side::Response && cond.is_some() {
        return Err(KwError::Invalid(
            "conditions on http-response rules are not supported yet".into(),
        ));
    }
    let params = &args[1..cond_at];
    let action = match (action.as_str(), side) {
        ("return", Side::Request) => parse_return(params)?,
        ("deny", Side::Request) => {
            let status = match params {
                [] => 403,
                [kw, n] if kw == "deny_status" => parse_status(n, 3)?,
                [kw] if kw == "deny_status" => {
                    return Err(KwError::Missing("a status after deny_status"))
                }
                [other, ..] => return Err(KwError::bad(2, other, "expects 'deny_status N'")),
            };
            Action::Deny { status }
        }
        ("allow", Side::Request) => {
            sluice_config::no_args(params)?;
            Action::Allow
        }
        ("use-service", Side::Request) => match params {
            [name] if name == "prometheus-exporter" => {
                Action::UseService(Service::PrometheusExporter)
            }
            [name] => {
                return Err(KwError::bad(
                    2,
                    name,
                    "unknown service (sluice has prometheus-exporter)",
                ))
            }
            [] => return Err(KwError::Missing("a service name")),
            [_, extra, ..] => return Err(KwError::Extra(extra.clone())),
        },
        ("set-header" | "add-header", _) => {
            let [name, value] = params else {
                return Err(KwError::Missing("a header name and a value"));
            };
            check_name(name, 2)?;
            if value.contains("%[") || value.contains("%{") {
                return Err(KwError::bad(
                    3,
                    value,
                    "sample expressions in values are not supported yet",
                ));
            }
            if value.bytes().any(|b| b < 0x20 && b != b'\t') {
                return Err(KwError::bad(
                    3,
                    value,
                    "control characters are not allowed in a header value",
                ));
            }
            if action == "set-header" {
                Action::SetHeader(name.clone(), value.clone())
            } else {
                Action::AddHeader(name.clone(), value.clone())
            }
        }
        ("del-header", _) => {
            let [name] = params else {
                return Err(KwError::Missing("a header name"));
            };
            check_name(name, 2)?;
            Action::DelHeader(name.clone())
        }
        (a, _) if PENDING_ACTIONS.contains(&a) || matches!(a, "return" | "deny" | "allow") => {
            return Err(KwError::Invalid(format!(
                "action '{a}': not supported yet here"
            )))
        }
        (a, _) => return Err(KwError::bad(1, a, "unknown action")),
    };
    Ok(HttpRule { action, cond })
}

fn check_name(name: &str, index: usize) -> Result<(), KwError> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(KwError::bad(index, name, "not a valid header name"))
    }
}

fn parse_status(s: &str, index: usize) -> Result<u16, KwError> {
    s.parse::<u16>()
        .ok()
        .filter(|n| (200..=599).contains(n))
        .ok_or_else(|| KwError::bad(index, s, "expects a status code from 200 to 599"))
}

fn parse_return(params: &[String]) -> Result<Action, KwError> {
    let mut status = 200;
    let mut content_type = None;
    let mut body = Vec::new();
    let mut i = 0;
    while i < params.len() {
        let idx = i + 2;
        let arg = params
            .get(i + 1)
            .ok_or_else(|| KwError::Invalid(format!("'{}' expects a value", params[i])))?;
        match params[i].as_str() {
            "status" => status = parse_status(arg, idx + 1)?,
            "content-type" => content_type = Some(arg.clone()),
            "string" => body = arg.clone().into_bytes(),
            "file" => {
                body = std::fs::read(arg)
                    .map_err(|e| KwError::bad(idx + 1, arg, format!("cannot read file: {e}")))?;
            }
            other @ ("lf-string" | "lf-file" | "errorfile" | "errorfiles" | "hdr"
            | "default-errorfiles") => {
                return Err(KwError::Invalid(format!(
                    "return option '{other}': not supported yet"
                )))
            }
            other => {
                return Err(KwError::bad(
                    idx,
                    other,
                    "expects status, content-type, string or file",
                ))
            }
        }
        i += 2;
    }
    if !body.is_empty() && content_type.is_none() {
        return Err(KwError::Invalid(
            "a 'return' with a body needs a content-type".into(),
        ));
    }
    Ok(Action::Return {
        status,
        content_type,
        body,
    })
}

/// Resolves a frontend's backend references. `own` is the backend of a `listen` section.
pub(crate) fn lower_frontend(
    rules: &RulesConf,
    backends: &[&str],
    own: Option<&str>,
) -> Result<FrontendRules, ConfigError> {
    let find = |name: &str, at: &Loc| {
        backends
            .iter()
            .position(|b| *b == name)
            .ok_or_else(|| at.error(format!("backend '{name}' not found")))
    };
    let mut switching = Vec::new();
    for (name, cond, at) in &rules.switching {
        switching.push((cond.clone(), find(name, at)?));
    }
    let default_backend = match (&rules.default_backend, own) {
        (Some((name, at)), _) => Some(find(name, at)?),
        (None, Some(own)) => backends.iter().position(|b| *b == own),
        (None, None) => None,
    };
    Ok(FrontendRules {
        switching,
        default_backend,
        http_request: rules.http_request.clone(),
        http_response: rules.http_response.clone(),
    })
}

pub(crate) fn lower_backend(rules: &RulesConf) -> BackendRules {
    BackendRules {
        http_request: rules.http_request.clone(),
        http_response: rules.http_response.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn conf(lines: &[&str]) -> Result<ProxyConf, KwError> {
        let mut c = ProxyConf::default();
        for l in lines {
            let w = words(l);
            let kw = KEYWORDS.iter().find(|k| k.name == w[0]).expect("keyword");
            (kw.parse)(&mut c, &w[1..])?;
        }
        Ok(c)
    }

    fn eval(c: &Cond, raw: &[u8]) -> bool {
        let head = sluice_http::parse_request(raw).unwrap().unwrap();
        c.eval(&RequestView::h1(raw, &head))
    }

    #[test]
    fn conditions() {
        let c = conf(&[
            "acl api path_beg /api",
            "acl img path_end .png .jpg",
            "acl post method POST",
            "acl admin hdr(X-Role) -i admin",
            "use_backend b if api !post or img",
            "use_backend c if { path /exact } admin",
            "use_backend d unless api",
        ])
        .unwrap();
        let first = c.rules.switching[0].1.clone().unwrap();
        assert!(eval(&first, b"GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!eval(
            &first,
            b"POST /api/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(eval(
            &first,
            b"POST /a.png HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!eval(&first, b"GET /other HTTP/1.1\r\nHost: a\r\n\r\n"));
        let second = c.rules.switching[1].1.clone().unwrap();
        assert!(eval(
            &second,
            b"GET /exact HTTP/1.1\r\nHost: a\r\nX-Role: user, ADMIN\r\n\r\n"
        ));
        assert!(!eval(&second, b"GET /exact HTTP/1.1\r\nHost: a\r\n\r\n"));
        let third = c.rules.switching[2].1.clone().unwrap();
        assert!(eval(&third, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!eval(&third, b"GET /api HTTP/1.1\r\nHost: a\r\n\r\n"));
    }

    #[test]
    fn condition_errors() {
        assert!(conf(&["use_backend b if nope"])
            .unwrap_err()
            .to_string()
            .contains("no such ACL"));
        assert!(conf(&["acl a path /", "use_backend b if a or"]).is_err());
        assert!(conf(&["acl a path /", "use_backend b when a"]).is_err());
        assert!(conf(&["use_backend b if { path /x"]).is_err());
        assert!(conf(&["acl a frob /x"])
            .unwrap_err()
            .to_string()
            .contains("unknown criterion"));
        assert!(conf(&["acl a path"]).is_err());
        assert!(conf(&["acl a path -m beg /x"]).is_err());
    }

    #[test]
    fn http_rules() {
        let c = conf(&[
            "http-request return status 201 content-type text/plain string hello",
            "http-request deny deny_status 429",
            "http-request set-header X-A 1",
            "http-request del-header X-B",
            "http-response add-header X-C 2",
        ])
        .unwrap();
        assert_eq!(
            c.rules.http_request[0].action,
            Action::Return {
                status: 201,
                content_type: Some("text/plain".into()),
                body: b"hello".to_vec()
            }
        );
        assert_eq!(c.rules.http_request[1].action, Action::Deny { status: 429 });
        assert_eq!(
            c.rules.http_request[2].action,
            Action::SetHeader("X-A".into(), "1".into())
        );
        assert!(conf(&["http-request frob"])
            .unwrap_err()
            .to_string()
            .contains("unknown action"));
        assert!(conf(&["http-request redirect location /"])
            .unwrap_err()
            .to_string()
            .contains("not supported yet"));
        assert!(conf(&["http-response return status 200"])
            .unwrap_err()
            .to_string()
            .contains("not supported yet"));
        assert!(conf(&["http-request set-header X %[src]"]).is_err());
        assert!(conf(&["http-request return string x"])
            .unwrap_err()
            .to_string()
            .contains("content-type"));
        assert!(conf(&["http-request return status 99"]).is_err());
    }
}
