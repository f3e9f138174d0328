//! The rules that use conditions (`crate::acl`): `use_backend`, `default_backend`,
//! `http-request` and `http-response`. Request conditions see the request as the client
//! sent it.

use sluice_config::{ConfigError, Keyword, KwError, Scope};

pub use crate::acl::holds;
pub(crate) use crate::acl::parse_cond;
pub use crate::conf::rules::*;
use crate::conf::{Loc, ProxyConf};

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
