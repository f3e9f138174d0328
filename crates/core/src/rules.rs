//! The rules that use conditions (`crate::acl`): `use_backend`, `default_backend`,
//! `http-request` and `http-response`. Request conditions see the request as the client
//! sent it.

use sluice_config::{ConfigError, Keyword, KwError, Scope};

pub use crate::acl::holds;
pub(crate) use crate::acl::parse_cond;
pub use crate::conf::rules::*;
use crate::conf::{Loc, ProxyConf};
use crate::sample::{Fmt, Match, VarName};

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
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
        name: "tcp-request",
        scope: Scope::FRONTEND,
        help: "tcp-request connection accept|reject [if|unless COND] | tcp-request inspect-delay TIME",
        parse: |c, args| {
            match args.first().map(String::as_str) {
                Some("connection") => {
                    let action = args
                        .get(1)
                        .ok_or(KwError::Missing("accept or reject"))?;
                    let accept = match action.as_str() {
                        "accept" => true,
                        "reject" => false,
                        other => {
                            return Err(KwError::Invalid(format!(
                                "tcp-request connection '{other}': not supported yet (accept and reject are)"
                            )))
                        }
                    };
                    let cond = parse_cond(&c.rules, &args[2..], 3)?;
                    c.rules.tcp_connection.push(TcpRule { accept, cond });
                    Ok(())
                }
                // Content rules are not evaluated, so there is nothing to wait for.
                Some("inspect-delay") => crate::conf::time_arg(&args[1..]).map(|_| ()),
                Some(other @ ("content" | "session")) => Err(KwError::Invalid(format!(
                    "tcp-request {other}: not supported yet"
                ))),
                Some(other) => Err(KwError::bad(
                    1,
                    other,
                    "expects connection, content, session or inspect-delay",
                )),
                None => Err(KwError::Missing("connection, content or inspect-delay")),
            }
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

/// Actions HAProxy has that sluice does not implement yet.
const PENDING_ACTIONS: &[&str] = &[
    "replace-path",
    "replace-pathq",
    "replace-uri",
    "tarpit",
    "auth",
    "capture",
    "set-log-level",
    "set-timeout",
    "set-src",
    "set-dst",
    "set-src-port",
    "set-dst-port",
    "set-nice",
    "set-mark",
    "set-tos",
    "early-hint",
    "cache-use",
    "cache-store",
    "silent-drop",
    "reject",
    "wait-for-body",
    "wait-for-handshake",
    "normalize-uri",
    "strict-mode",
    "do-resolve",
    "send-spoe-group",
    "lua",
];

/// A log-format value of a rule (`%[...]` samples allowed).
fn fmt_arg(v: &str, index: usize) -> Result<Fmt, KwError> {
    crate::sample::parse_fmt(v).map_err(|e| KwError::bad(index, v, e.0))
}

/// A header value: a log-format value without control characters.
fn header_value(v: &str, index: usize) -> Result<Fmt, KwError> {
    if v.bytes().any(|b| b < 0x20 && b != b'\t') {
        return Err(KwError::bad(
            index,
            v,
            "control characters are not allowed in a header value",
        ));
    }
    fmt_arg(v, index)
}

/// A tracking slot: `0`, `1` or `2`.
fn slot_of(s: &str) -> Option<u8> {
    match s {
        "0" => Some(0),
        "1" => Some(1),
        "2" => Some(2),
        _ => None,
    }
}

/// `NAME(VAR)` of `set-var(txn.x)` / `unset-var(txn.x)`.
fn var_of(action: &str) -> Option<Result<VarName, String>> {
    let inner = action
        .strip_prefix("set-var(")
        .or_else(|| action.strip_prefix("unset-var("))?
        .strip_suffix(')')?;
    Some(crate::sample::parse_var(inner).map_err(|e| e.0))
}

fn parse_rule(rules: &RulesConf, args: &[String], side: Side) -> Result<HttpRule, KwError> {
    let Some(action) = args.first() else {
        return Err(KwError::Missing("an action"));
    };
    let cond_at = args
        .iter()
        .position(|a| a == "if" || a == "unless")
        .unwrap_or(args.len());
    let cond = parse_cond(rules, &args[cond_at..], cond_at + 1)?;
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
        ("allow", _) => {
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
            let value = header_value(value, 3)?;
            if action == "set-header" {
                Action::SetHeader(name.clone(), value)
            } else {
                Action::AddHeader(name.clone(), value)
            }
        }
        ("del-header", _) => {
            let how = match params {
                [_] => Match::Str,
                [_, m, how] if m == "-m" => match how.as_str() {
                    "str" => Match::Str,
                    "beg" => Match::Beg,
                    "end" => Match::End,
                    "sub" => Match::Sub,
                    "reg" => {
                        return Err(KwError::Invalid(
                            "del-header -m reg: not supported yet".into(),
                        ))
                    }
                    other => return Err(KwError::bad(4, other, "expects str, beg, end or sub")),
                },
                [] => return Err(KwError::Missing("a header name")),
                [_, other, ..] => return Err(KwError::bad(3, other, "expects '-m METHOD'")),
            };
            check_name(&params[0], 2)?;
            Action::DelHeader(params[0].clone(), how)
        }
        (kind @ ("replace-header" | "replace-value"), _) => {
            let [name, re, with] = params else {
                return Err(KwError::Missing(
                    "a header name, a regular expression and a format",
                ));
            };
            check_name(name, 2)?;
            let re = regex::bytes::Regex::new(re)
                .map_err(|e| KwError::bad(3, re, format!("invalid regular expression: {e}")))?;
            Action::ReplaceHeader {
                name: name.clone(),
                re: crate::sample::Regex(re),
                with: header_value(with, 4)?,
                per_value: kind == "replace-value",
            }
        }
        (
            kind @ ("set-method" | "set-path" | "set-pathq" | "set-query" | "set-uri"),
            Side::Request,
        ) => {
            let [value] = params else {
                return Err(KwError::Missing("a value"));
            };
            let f = fmt_arg(value, 2)?;
            match kind {
                "set-method" => Action::SetMethod(f),
                "set-path" => Action::SetPath(f),
                "set-pathq" => Action::SetPathQ(f),
                "set-query" => Action::SetQuery(f),
                _ => Action::SetUri(f),
            }
        }
        ("redirect", Side::Request) => Action::Redirect(parse_redirect(params)?),
        ("set-status", Side::Response) => {
            let (code, reason) = match params {
                [n] => (n, None),
                [n, kw, r] if kw == "reason" => (n, Some(r.clone())),
                [] => return Err(KwError::Missing("a status code")),
                [_, other, ..] => return Err(KwError::bad(3, other, "expects 'reason TEXT'")),
            };
            let code = code
                .parse::<u16>()
                .ok()
                .filter(|n| (100..=999).contains(n))
                .ok_or_else(|| KwError::bad(2, code, "expects a status code from 100 to 999"))?;
            Action::SetStatus(code, reason)
        }
        (a, Side::Request) if a.starts_with("track-sc") => {
            let slot = slot_of(a.strip_prefix("track-sc").unwrap_or_default())
                .ok_or_else(|| KwError::bad(1, a, "expects track-sc0, track-sc1 or track-sc2"))?;
            let (key, table) = match params {
                [key] => (key, None),
                [key, kw, t] if kw == "table" => (key, Some(t.clone())),
                [] => return Err(KwError::Missing("a key (a sample expression)")),
                [_, other, ..] => return Err(KwError::bad(3, other, "expects 'table NAME'")),
            };
            let key = crate::sample::parse_expr(key).map_err(|e| KwError::bad(2, key, e.0))?;
            Action::Track { slot, key, table }
        }
        (a, Side::Request) if a.starts_with("sc-inc-gpc") || a.starts_with("sc-set-gpt0(") => {
            let (name, inner) = a
                .strip_suffix(')')
                .and_then(|r| r.split_once('('))
                .ok_or_else(|| {
                    KwError::bad(
                        1,
                        a,
                        "expects sc-inc-gpc0(N), sc-inc-gpc1(N) or sc-set-gpt0(N)",
                    )
                })?;
            let slot = slot_of(inner).ok_or_else(|| KwError::bad(1, a, "the slot is 0, 1 or 2"))?;
            match name {
                "sc-inc-gpc0" | "sc-inc-gpc1" => {
                    sluice_config::no_args(params)?;
                    Action::ScIncGpc {
                        slot,
                        gpc: u8::from(name == "sc-inc-gpc1"),
                    }
                }
                "sc-set-gpt0" => {
                    let [v] = params else {
                        return Err(KwError::Missing("a value (an integer or an expression)"));
                    };
                    let value = match v.parse::<i64>() {
                        Ok(n) => crate::sample::parse_expr(&format!("int({n})")),
                        Err(_) => crate::sample::parse_expr(v),
                    }
                    .map_err(|e| KwError::bad(2, v, e.0))?;
                    Action::ScSetGpt0 { slot, value }
                }
                _ => return Err(KwError::bad(1, a, "unknown action")),
            }
        }
        (a, _) if var_of(a).is_some() => {
            let var = var_of(a)
                .expect("checked")
                .map_err(|e| KwError::bad(1, a, e))?;
            if a.starts_with("unset-var") {
                sluice_config::no_args(params)?;
                Action::UnsetVar(var)
            } else {
                let [expr] = params else {
                    return Err(KwError::Missing("a sample expression"));
                };
                let e = crate::sample::parse_expr(expr).map_err(|e| KwError::bad(2, expr, e.0))?;
                Action::SetVar(var, e)
            }
        }
        (a, _)
            if PENDING_ACTIONS.contains(&a)
                || a.starts_with("track-sc")
                || a.starts_with("sc-")
                || matches!(
                    a,
                    "return"
                        | "deny"
                        | "redirect"
                        | "use-service"
                        | "set-status"
                        | "set-method"
                        | "set-path"
                        | "set-pathq"
                        | "set-query"
                        | "set-uri"
                ) =>
        {
            return Err(KwError::Invalid(format!(
                "action '{a}': not supported yet here"
            )))
        }
        (a, _) => return Err(KwError::bad(1, a, "unknown action")),
    };
    Ok(HttpRule { action, cond })
}

/// `location|prefix|scheme VALUE [code N] [drop-query] [append-slash] [set-cookie N[=V]]
/// [clear-cookie N]`.
fn parse_redirect(params: &[String]) -> Result<Redirect, KwError> {
    let [kind, value, opts @ ..] = params else {
        return Err(KwError::Missing("location, prefix or scheme and a value"));
    };
    let kind = match kind.as_str() {
        "location" => RedirectKind::Location,
        "prefix" => RedirectKind::Prefix,
        "scheme" => RedirectKind::Scheme,
        other => return Err(KwError::bad(2, other, "expects location, prefix or scheme")),
    };
    let mut r = Redirect {
        kind,
        value: fmt_arg(value, 3)?,
        code: 302,
        drop_query: false,
        append_slash: false,
        set_cookie: None,
        clear_cookie: None,
    };
    let mut i = 0;
    while i < opts.len() {
        let idx = i + 4;
        let arg = || {
            opts.get(i + 1)
                .ok_or_else(|| KwError::Invalid(format!("'{}' expects a value", opts[i])))
        };
        match opts[i].as_str() {
            "code" => {
                let c = arg()?;
                r.code = c
                    .parse()
                    .ok()
                    .filter(|c| [301, 302, 303, 307, 308].contains(c))
                    .ok_or_else(|| KwError::bad(idx + 1, c, "expects 301, 302, 303, 307 or 308"))?;
                i += 1;
            }
            "drop-query" => r.drop_query = true,
            "append-slash" => r.append_slash = true,
            "set-cookie" => {
                r.set_cookie = Some(arg()?.clone());
                i += 1;
            }
            "clear-cookie" => {
                r.clear_cookie = Some(arg()?.trim_end_matches('=').to_string());
                i += 1;
            }
            other => {
                return Err(KwError::bad(
                    idx,
                    other,
                    "expects code, drop-query, append-slash, set-cookie or clear-cookie",
                ))
            }
        }
        i += 1;
    }
    Ok(r)
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
    let mut lf = None;
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
            "lf-string" => lf = Some(fmt_arg(arg, idx + 1)?),
            "file" => {
                body = std::fs::read(arg)
                    .map_err(|e| KwError::bad(idx + 1, arg, format!("cannot read file: {e}")))?;
            }
            other @ ("lf-file" | "errorfile" | "errorfiles" | "hdr" | "default-errorfiles") => {
                return Err(KwError::Invalid(format!(
                    "return option '{other}': not supported yet"
                )))
            }
            other => {
                return Err(KwError::bad(
                    idx,
                    other,
                    "expects status, content-type, string, lf-string or file",
                ))
            }
        }
        i += 2;
    }
    if (!body.is_empty() || lf.is_some()) && content_type.is_none() {
        return Err(KwError::Invalid(
            "a 'return' with a body needs a content-type".into(),
        ));
    }
    Ok(Action::Return {
        status,
        content_type,
        body,
        lf,
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
        let target = if name.contains("%[") {
            BackendRef::Dynamic(
                crate::sample::parse_fmt(name)
                    .map_err(|e| at.error(format!("use_backend {name}: {e}")))?,
            )
        } else {
            BackendRef::Fixed(find(name, at)?)
        };
        switching.push((cond.clone(), target));
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
        tcp_connection: rules.tcp_connection.clone(),
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
            let kw = KEYWORDS
                .iter()
                .chain(crate::acl::KEYWORDS)
                .find(|k| k.name == w[0])
                .expect("keyword");
            (kw.parse)(&mut c, &w[1..])?;
        }
        Ok(c)
    }

    #[test]
    fn conditions() {
        let c = conf(&[
            "acl api path_beg /api",
            "acl img path_end .png .jpg",
            "acl post method POST",
            "use_backend b if api !post or img",
            "use_backend c if { path /exact } api",
            "use_backend d unless api",
            "use_backend e if METH_GET LOCALHOST",
        ])
        .unwrap();
        let first = c.rules.switching[0].1.clone().unwrap();
        assert_eq!(first.groups.len(), 2);
        assert!(first.groups[0][1].neg);
        assert_eq!(first.groups[1][0].acls[0].patterns.len(), 2);
        assert!(c.rules.switching[2].1.as_ref().unwrap().unless);
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
            .contains("unknown sample fetch 'frob'"));
        assert!(conf(&["acl a path"]).is_err());
        assert!(conf(&["acl a path -m nosuch /x"]).is_err());
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
                body: b"hello".to_vec(),
                lf: None,
            }
        );
        assert_eq!(c.rules.http_request[1].action, Action::Deny { status: 429 });
        assert_eq!(
            c.rules.http_request[2].action,
            Action::SetHeader("X-A".into(), crate::sample::parse_fmt("1").unwrap())
        );
        assert!(conf(&["http-request frob"])
            .unwrap_err()
            .to_string()
            .contains("unknown action"));
        assert!(conf(&["http-request tarpit"])
            .unwrap_err()
            .to_string()
            .contains("not supported yet"));
        assert!(conf(&["http-request redirect location / code 304"]).is_err());
        assert!(conf(&["http-request set-var(x) src"])
            .unwrap_err()
            .to_string()
            .contains("needs a scope"));
        assert!(conf(&["http-response set-status 503 reason Busy if { status 500 }"]).is_ok());
        assert!(conf(&["http-response return status 200"])
            .unwrap_err()
            .to_string()
            .contains("not supported yet"));
        assert!(conf(&["http-request set-header X %[src]"]).is_ok());
        assert!(conf(&["http-request set-header X %ci"]).is_err());
        assert!(conf(&["http-request return string x"])
            .unwrap_err()
            .to_string()
            .contains("content-type"));
        assert!(conf(&["http-request return status 99"]).is_err());
    }
}
