//! The health checks' keywords: server options (`check`, `inter`, `rise`, `agent-check`,
//! ...), backend keywords (the check kind, `http-check`, `tcp-check`, `timeout check`,
//! `option log-health-checks`) and global ones (`spread-checks`, ...).

use std::time::Duration;

use sluice_config::{no_args, units, Keyword, KwError, Scope};

use super::probe;
use crate::conf::backend::{ServerOption, ServerOpts};
use crate::conf::check::{
    CheckKind, CheckProto, CheckText, ConnectLayer, ConnectRule, Expect, ExpectOpts, HeaderMatch,
    HttpExpect, Observe, OnError, Pattern, Re, TcpRule, TextPart, VarStep,
};
use crate::conf::rules::Action;
use crate::conf::sample::VarScope;
use crate::conf::{one_arg, time_arg, GlobalConf, ProxyConf};

/// Server options of the checks (`server` and `default-server`).
pub const SERVER_OPTIONS: &[ServerOption] = &[
    ServerOption {
        name: "check",
        help: "enable health checks",
        args: 0,
        parse: |o, _| {
            o.check.enabled = true;
            Ok(())
        },
    },
    ServerOption {
        name: "no-check",
        help: "undo check (from default-server)",
        args: 0,
        parse: |o, _| {
            o.check.enabled = false;
            Ok(())
        },
    },
    ServerOption {
        name: "inter",
        help: "TIME: time between checks (default 2s)",
        args: 1,
        parse: |o, a| interval(&a[0]).map(|t| o.check.inter = t),
    },
    ServerOption {
        name: "fastinter",
        help: "TIME: time between checks while the server is changing state",
        args: 1,
        parse: |o, a| interval(&a[0]).map(|t| o.check.fastinter = Some(t)),
    },
    ServerOption {
        name: "downinter",
        help: "TIME: time between checks while the server is down",
        args: 1,
        parse: |o, a| interval(&a[0]).map(|t| o.check.downinter = Some(t)),
    },
    ServerOption {
        name: "rise",
        help: "N: consecutive passed checks that bring a server up",
        args: 1,
        parse: |o, a| count(&a[0]).map(|n| o.check.rise = n),
    },
    ServerOption {
        name: "fall",
        help: "N: consecutive failed checks that take it down",
        args: 1,
        parse: |o, a| count(&a[0]).map(|n| o.check.fall = n),
    },
    ServerOption {
        name: "port",
        help: "N: the port checks connect to",
        args: 1,
        parse: |o: &mut ServerOpts, a| {
            o.check.port = Some(port(&a[0])?);
            Ok(())
        },
    },
    ServerOption {
        name: "addr",
        help: "ADDR: the address checks connect to",
        args: 1,
        parse: |o, a| {
            // An address, or an address and port (HAProxy takes both; a `port` option,
            // before or after, wins).
            let (ip, port) = match a[0].parse::<std::net::SocketAddr>() {
                Ok(sa) => (sa.ip(), Some(sa.port())),
                Err(_) => (
                    a[0].parse()
                        .map_err(|_| "expects an IP address (or IP:PORT)".to_string())?,
                    None,
                ),
            };
            o.check.addr = Some(ip);
            if o.check.port.is_none() {
                o.check.port = port;
            }
            Ok(())
        },
    },
    ServerOption {
        name: "observe",
        help: "layer4|layer7: judge the server by live traffic too",
        args: 1,
        parse: |o, a| {
            o.check.observe = Some(match a[0].as_str() {
                "layer4" => Observe::Layer4,
                "layer7" => Observe::Layer7,
                _ => return Err("expects layer4 or layer7".into()),
            });
            Ok(())
        },
    },
    ServerOption {
        name: "error-limit",
        help: "N: errors observed before on-error acts",
        args: 1,
        parse: |o, a| count(&a[0]).map(|n| o.check.error_limit = n),
    },
    ServerOption {
        name: "on-error",
        help: "fastinter|fail-check|sudden-death|mark-down: what observed errors do",
        args: 1,
        parse: |o, a| {
            o.check.on_error = match a[0].as_str() {
                "fastinter" => OnError::Fastinter,
                "fail-check" => OnError::FailCheck,
                "sudden-death" => OnError::SuddenDeath,
                "mark-down" => OnError::MarkDown,
                _ => return Err("expects fastinter, fail-check, sudden-death or mark-down".into()),
            };
            Ok(())
        },
    },
    ServerOption {
        name: "on-marked-down",
        help: "shutdown-sessions: end its connections when it goes down",
        args: 1,
        parse: |o, a| match a[0].as_str() {
            "shutdown-sessions" => {
                o.check.shutdown_on_down = true;
                Ok(())
            }
            _ => Err("expects shutdown-sessions".into()),
        },
    },
    ServerOption {
        name: "on-marked-up",
        help: "shutdown-backup-sessions: end the backups' connections when it comes up",
        args: 1,
        parse: |o, a| match a[0].as_str() {
            "shutdown-backup-sessions" => {
                o.check.shutdown_backups_on_up = true;
                Ok(())
            }
            _ => Err("expects shutdown-backup-sessions".into()),
        },
    },
    ServerOption {
        name: "agent-check",
        help: "enable the agent check (the server reports its own state and weight)",
        args: 0,
        parse: |o, _| {
            o.check.agent.enabled = true;
            Ok(())
        },
    },
    ServerOption {
        name: "no-agent-check",
        help: "undo agent-check",
        args: 0,
        parse: |o, _| {
            o.check.agent.enabled = false;
            Ok(())
        },
    },
    ServerOption {
        name: "agent-port",
        help: "N: the agent's port",
        args: 1,
        parse: |o, a| {
            o.check.agent.port = Some(port(&a[0])?);
            Ok(())
        },
    },
    ServerOption {
        name: "agent-addr",
        help: "ADDR: the agent's address",
        args: 1,
        parse: |o, a| {
            let ip = a[0]
                .parse()
                .map_err(|_| "expects an IP address".to_string())?;
            o.check.agent.addr = Some(ip);
            Ok(())
        },
    },
    ServerOption {
        name: "agent-inter",
        help: "TIME: time between agent checks",
        args: 1,
        parse: |o, a| interval(&a[0]).map(|t| o.check.agent.inter = Some(t)),
    },
    ServerOption {
        name: "check-proto",
        help: "h2: health checks speak HTTP/2",
        args: 1,
        parse: |o, a| {
            o.check.proto = Some(match a[0].as_str() {
                "h1" => CheckProto::H1,
                "h2" => CheckProto::H2,
                _ => return Err("expects h1 or h2".into()),
            });
            Ok(())
        },
    },
    ServerOption {
        name: "agent-send",
        help: "STRING: what the agent check sends",
        args: 1,
        parse: |o, a| {
            o.check.agent.send = Some(a[0].clone());
            Ok(())
        },
    },
];

fn interval(v: &str) -> Result<Duration, String> {
    let t = units::parse_time(v)?;
    if t.is_zero() {
        return Err("expects a time above zero".into());
    }
    Ok(t)
}

fn port(v: &str) -> Result<u16, String> {
    v.parse::<u16>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| "expects a port from 1 to 65535".into())
}

fn count(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "expects a positive integer".into())
}

/// Parses the options of `tcp-check connect` and `http-check connect`.
/// The `http-check comment` that names a rule of `kind` (`send`, `expect`): it names the
/// rules of the first kind after it, as HAProxy attaches comments.
fn attach_comment(
    check: &mut crate::conf::check::BackendCheck,
    kind: &'static str,
) -> Option<String> {
    let (text, first_kind) = check.pending_comment.take()?;
    match first_kind {
        Some(k) if k != kind => None,
        _ => {
            check.pending_comment = Some((text.clone(), Some(kind)));
            Some(text)
        }
    }
}

/// `hdr|fhdr name|name-lf [-m METH] NAME [value|value-lf [-m METH] VALUE]` of
/// `http-check expect` (`-lf`: the pattern has variables, filled in at each check).
fn header_expect(full: bool, a: &[String]) -> Result<Expect, KwError> {
    let kind = if full { "fhdr" } else { "hdr" };
    let name_lf = match a.first().map(String::as_str) {
        Some("name") => false,
        Some("name-lf") => true,
        _ => {
            return Err(KwError::Invalid(format!(
                "'{kind}' expects at the name keyword as first argument followed by a pattern"
            )))
        }
    };
    let mut i = 1;
    let name = lf_pattern(header_pattern(a, &mut i, kind, "name")?, name_lf, kind)?;
    let value = match a.get(i).map(String::as_str) {
        Some(w @ ("value" | "value-lf")) => {
            i += 1;
            let p = header_pattern(a, &mut i, kind, "value")?;
            Some(lf_pattern(p, w == "value-lf", kind)?)
        }
        Some(other) => return Err(KwError::bad(i + 2, other, "expects 'value'")),
        None => None,
    };
    if let Some(extra) = a.get(i) {
        return Err(KwError::Extra(extra.clone()));
    }
    Ok(Expect::Header { name, value, full })
}

/// A `name-lf`/`value-lf` pattern (when `lf`): its text read for variables, matched as its
/// method says; a regular expression cannot be one.
fn lf_pattern(p: HeaderMatch, lf: bool, kind: &str) -> Result<HeaderMatch, KwError> {
    if !lf {
        return Ok(p);
    }
    let text = match &p {
        HeaderMatch::Str(t) | HeaderMatch::Beg(t) | HeaderMatch::End(t) | HeaderMatch::Sub(t) => {
            parse_text(t).map_err(KwError::Invalid)?
        }
        _ => {
            return Err(KwError::Invalid(format!(
                "'{kind}': a '-lf' pattern cannot be a regular expression ('-m reg')"
            )))
        }
    };
    Ok(HeaderMatch::Lf(Box::new(p), text))
}

/// `[-m METH] PATTERN` at `a[*i]`, moving `i` past it.
fn header_pattern(
    a: &[String],
    i: &mut usize,
    kind: &str,
    what: &str,
) -> Result<HeaderMatch, KwError> {
    let mut how = "str";
    if a.get(*i).is_some_and(|w| w == "-m") {
        how = a.get(*i + 1).ok_or_else(|| {
            KwError::Invalid(format!(
                "'{kind}' : '-m' expects at a matching pattern ('str', 'beg', 'end', 'sub' or 'reg')"
            ))
        })?;
        *i += 2;
    }
    let p = a.get(*i).ok_or_else(|| {
        KwError::Invalid(format!("'{kind}' expect a pattern with the {what} keyword"))
    })?;
    *i += 1;
    Ok(match how {
        "str" => HeaderMatch::Str(p.clone()),
        "beg" => HeaderMatch::Beg(p.clone()),
        "end" => HeaderMatch::End(p.clone()),
        "sub" => HeaderMatch::Sub(p.clone()),
        "reg" => HeaderMatch::Reg(regex(p).map_err(|e| KwError::bad(*i + 1, p, e))?),
        other => {
            return Err(KwError::Invalid(format!(
                "'{kind}' : '-m' only supports 'str', 'beg', 'end', 'sub' or 'reg' (got '{other}')"
            )))
        }
    })
}

/// The value of a `tcp-check send*` line and its `comment`.
fn send_args<'a>(
    a: &'a [String],
    what: &'static str,
) -> Result<(&'a str, Option<String>), KwError> {
    let (v, rest) = a.split_first().ok_or(KwError::Missing(what))?;
    match rest {
        [] => Ok((v, None)),
        [kw, ..] if kw != "comment" => Err(KwError::bad(2, kw, "expects 'comment TEXT'")),
        [_, c] => Ok((v, Some(c.clone()))),
        [_] => Err(KwError::Missing("a text after 'comment'")),
        [_, _, extra, ..] => Err(KwError::Extra(extra.clone())),
    }
}

/// `tcp-check expect`: its options, in any order, then `[!] KIND VALUE`.
fn expect_rule(a: &[String]) -> Result<TcpRule, KwError> {
    let mut opts = ExpectOpts::default();
    let (mut min_recv, mut neg, mut pattern) = (None, false, None);
    let mut i = 0;
    while i < a.len() {
        let mut word = a[i].as_str();
        // `!rstring` written as one word, as HAProxy reads it too.
        if let Some(kind) = word.strip_prefix('!').filter(|k| !k.is_empty()) {
            neg = true;
            word = kind;
        }
        let value = || {
            a.get(i + 1)
                .ok_or(KwError::Missing("a value after a tcp-check expect option"))
        };
        let status = |allowed: &[&'static str]| -> Result<&'static str, KwError> {
            let v = value()?;
            allowed
                .iter()
                .copied()
                .find(|s| *s == v.as_str())
                .ok_or_else(|| {
                    KwError::bad(i + 2, v, format!("expects one of {}", allowed.join(", ")))
                })
        };
        match word {
            "min-recv" => {
                let v = value()?;
                min_recv = Some(
                    v.parse()
                        .map_err(|_| KwError::bad(i + 2, v, "expects a byte count"))?,
                );
            }
            "comment" => opts.comment = Some(value()?.clone()),
            "ok-status" => opts.ok_status = Some(status(&["L7OK", "L7OKC", "L6OK", "L4OK"])?),
            "error-status" => {
                opts.error_status = Some(status(&["L7RSP", "L7STS", "L6RSP", "L4CON"])?)
            }
            "tout-status" => opts.tout_status = Some(status(&["L7TOUT", "L6TOUT", "L4TOUT"])?),
            "on-success" | "on-error" => {
                let v = value()?;
                let text = parse_text(v).map_err(|e| KwError::bad(i + 2, v, e))?;
                *(if word == "on-success" {
                    &mut opts.on_success
                } else {
                    &mut opts.on_error
                }) = Some(text);
            }
            "status-code" => {
                let v = value()?;
                // A constant: an integer, or `int(N)` as HAProxy's examples write it.
                let n = v
                    .strip_prefix("int(")
                    .and_then(|r| r.strip_suffix(')'))
                    .unwrap_or(v);
                opts.status_code = Some(n.parse().map_err(|_| {
                    KwError::bad(
                        i + 2,
                        v,
                        "expects an integer (other expressions are not supported yet)",
                    )
                })?);
            }
            "!" => {
                neg = true;
                i += 1;
                continue;
            }
            "string" | "binary" | "rstring" | "rbinary" if pattern.is_none() => {
                let v = value()?;
                let bad = |e: String| KwError::bad(i + 2, v, e);
                pattern = Some(match word {
                    "string" => Pattern::Contains(v.as_bytes().to_vec()),
                    "binary" => Pattern::ContainsBinary(hex(v).map_err(bad)?),
                    "rstring" => Pattern::Regex(regex(v).map_err(bad)?),
                    _ => Pattern::RegexHex(regex(v).map_err(bad)?),
                });
            }
            k @ ("string-lf" | "binary-lf") => {
                return Err(KwError::Invalid(format!(
                    "tcp-check expect {k}: not supported yet"
                )))
            }
            other => {
                return Err(KwError::bad(
                    i + 1,
                    other,
                    "expects string, binary, rstring, rbinary or an option",
                ))
            }
        }
        i += 2;
    }
    let pattern = pattern.ok_or(KwError::Missing(
        "string TEXT, binary HEX, rstring RE or rbinary RE",
    ))?;
    Ok(TcpRule::Expect {
        neg,
        pattern,
        min_recv,
        opts,
    })
}

fn connect_rule(a: &[String]) -> Result<ConnectRule, KwError> {
    let mut rule = ConnectRule {
        layer: ConnectLayer::Plain,
        ..ConnectRule::default()
    };
    let mut i = 0;
    while i < a.len() {
        let value = || {
            a.get(i + 1)
                .ok_or(KwError::Missing("a value after port/addr/comment"))
        };
        match a[i].as_str() {
            "default" if rule.layer == ConnectLayer::Plain => rule.layer = ConnectLayer::Default,
            "default" => {}
            "ssl" => rule.layer = ConnectLayer::Ssl,
            "sni" => {
                rule.sni = Some(value()?.clone());
                i += 1;
            }
            "alpn" => {
                let v = value()?;
                rule.alpn = Some(v.split(',').map(str::to_string).collect());
                i += 1;
            }
            "proto" => {
                let v = value()?;
                rule.proto = Some(match v.as_str() {
                    "h1" => CheckProto::H1,
                    "h2" => CheckProto::H2,
                    _ => return Err(KwError::bad(i + 2, v, "expects h1 or h2")),
                });
                i += 1;
            }
            "linger" => rule.linger = true,
            "port" => {
                let v = value()?;
                rule.port = Some(port(v).map_err(|e| KwError::bad(i + 2, v, e))?);
                i += 1;
            }
            "addr" => {
                let v = value()?;
                rule.addr = Some(
                    v.parse()
                        .map_err(|_| KwError::bad(i + 2, v, "expects an IP address"))?,
                );
                i += 1;
            }
            "comment" => {
                rule.comment = Some(value()?.clone());
                i += 1;
            }
            w @ ("send-proxy" | "via-socks4") => {
                return Err(KwError::Invalid(format!(
                "connect option '{w}' is not supported yet (no PROXY protocol or SOCKS4 on checks)"
            )))
            }
            other => {
                return Err(KwError::bad(
                    i + 1,
                    other,
                    "expects default, port, addr, ssl, sni, alpn, proto, linger or comment",
                ))
            }
        }
        i += 1;
    }
    Ok(rule)
}

/// The variables a check's text may use (HAProxy's log-format syntax; a check has no
/// client, request or stream, so only these mean something).
const TEXT_VARS: &[(&str, TextPart)] = &[
    ("%b", TextPart::BackendName),
    ("%s", TextPart::ServerName),
    ("%H", TextPart::Hostname),
    ("%pid", TextPart::Pid),
    ("%[be_name]", TextPart::BackendName),
    ("%[be_id]", TextPart::BackendId),
    ("%[srv_name]", TextPart::ServerName),
    ("%[srv_id]", TextPart::ServerId),
    ("%[date]", TextPart::Date),
];

/// Parses text with variables (`send-lf`, `uri-lf`, `body-lf`, header values).
pub fn parse_text(s: &str) -> Result<CheckText, String> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('%') {
        lit.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("%%") {
            lit.push('%');
            rest = after;
            continue;
        }
        let inner = |call: &str| {
            rest.strip_prefix(call)
                .and_then(|r| r.split_once(")]"))
                .map(|(n, _)| n)
        };
        let part = if let Some(name) = inner("%[env(") {
            let n = name.len() + "%[env()]".len();
            (n, TextPart::Env(name.to_string()))
        } else if let Some(name) = inner("%[var(") {
            let n = name.len() + "%[var()]".len();
            let var = crate::sample::parse_var(name).map_err(|e| e.0)?;
            (n, TextPart::Var(var))
        } else {
            // The longest known name here (`%pid` before `%p...`).
            let (name, part) = TEXT_VARS
                .iter()
                .filter(|(n, _)| rest.starts_with(n))
                .max_by_key(|(n, _)| n.len())
                .ok_or_else(|| {
                    let shown: String = rest.chars().take(16).collect();
                    format!(
                        "unknown variable at '{shown}' (a check knows %b, %s, %H, %pid, %[be_name], %[be_id], %[srv_name], %[srv_id], %[date], %[env(NAME)], %[var(NAME)] and %%)"
                    )
                })?;
            (name.len(), part.clone())
        };
        if !lit.is_empty() {
            parts.push(TextPart::Literal(std::mem::take(&mut lit)));
        }
        parts.push(part.1);
        rest = &rest[part.0..];
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        parts.push(TextPart::Literal(lit));
    }
    Ok(CheckText(parts))
}

/// `set-var(NAME) EXPR`, `set-var-fmt(NAME) FMT` or `unset-var(NAME)` after `http-check` or
/// `tcp-check` (the keyword tables match whole words, and these carry their variable); a
/// check's variables are `check.`, `sess.` or `proc.` ones, as in HAProxy.
fn var_step(c: &ProxyConf, a: &[String]) -> Result<VarStep, KwError> {
    let action = a.first().map_or("", String::as_str);
    let is_var = ["set-var(", "set-var-fmt(", "unset-var("]
        .iter()
        .any(|p| action.starts_with(p));
    if !is_var {
        return Err(KwError::NotYet(
            "recognised HAProxy keyword, not implemented by sluice",
        ));
    }
    let step = match crate::rules::var_action(action, &a[1..], &c.rules.book)? {
        Action::SetVar(v, e) => VarStep::Set(v, e),
        Action::SetVarFmt(v, f) => VarStep::SetFmt(v, f),
        Action::UnsetVar(v) => VarStep::Unset(v),
        _ => unreachable!("a variable action"),
    };
    let (VarStep::Set(v, _) | VarStep::SetFmt(v, _) | VarStep::Unset(v)) = &step;
    if !matches!(v.scope, VarScope::Check | VarScope::Sess | VarScope::Proc) {
        return Err(KwError::bad(
            1,
            action,
            "a check's variables are check., sess. or proc. ones",
        ));
    }
    Ok(step)
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "http-check",
        scope: Scope::BE,
        help: "http-check set-var(NAME) EXPR | set-var-fmt(NAME) FMT | unset-var(NAME): a variable the check's request may use (%[var(NAME)])",
        parse: |c, a| {
            let step = var_step(c, a)?;
            own_http_rules(&mut c.check);
            c.check.http.vars.push(step);
            Ok(())
        },
    },
    Keyword {
        name: "tcp-check",
        scope: Scope::BE,
        help: "tcp-check set-var(NAME) EXPR | set-var-fmt(NAME) FMT | unset-var(NAME): a variable set when the rules reach it",
        parse: |c, a| {
            let step = var_step(c, a)?;
            c.check.tcp_rules.push(TcpRule::Var(step));
            Ok(())
        },
    },
    Keyword {
        name: "option httpchk",
        scope: Scope::BE,
        help: "option httpchk [METH] [URI] [VER [HOST]]: check servers with an HTTP request",
        parse: |c, a| {
            let (method, uri, version, host) = match a {
                [] => ("OPTIONS", "/", "HTTP/1.0", None),
                [uri] => ("OPTIONS", uri.as_str(), "HTTP/1.0", None),
                [m, uri] => (m.as_str(), uri.as_str(), "HTTP/1.0", None),
                [m, uri, v] => (m.as_str(), uri.as_str(), v.as_str(), None),
                [m, uri, v, h] => (m.as_str(), uri.as_str(), v.as_str(), Some(h.clone())),
                [_, _, _, _, extra, ..] => return Err(KwError::Extra(extra.clone())),
            };
            c.check.kind = CheckKind::Http;
            // A new HTTP check: the `http-check` rules set before (in a defaults section
            // this proxy inherits) are dropped, as HAProxy starts a new ruleset.
            new_http_rules(&mut c.check);
            c.check.http_rules_inherited = false;
            let r = &mut c.check.http;
            r.method = method.to_string();
            r.uri = CheckText::literal(uri);
            // HAProxy 2.6 keeps the version only: fields smuggled after it (`HTTP/1.1\r\nX: y`,
            // the old way to add headers) are dropped.
            r.version = version
                .split(['\r', '\n'])
                .next()
                .unwrap_or_default()
                .to_string();
            // HAProxy 2.6 takes a HOST given this way as the Host header.
            if let Some(h) = host {
                r.headers.push(("host".into(), CheckText::literal(&h)));
            }
            Ok(())
        },
    },
    Keyword {
        name: "http-check send",
        scope: Scope::BE,
        help: "http-check send [meth M] [uri U | uri-lf FMT] [ver V] [hdr NAME FMT]... [body S | body-lf FMT]: the HTTP check's request",
        parse: |c, a| {
            own_http_rules(&mut c.check);
            let r = &mut c.check.http;
            let mut i = 0;
            while i < a.len() {
                let value = |k: usize| {
                    a.get(i + k).cloned().ok_or(KwError::Missing(
                        "a value after meth/uri/uri-lf/ver/hdr/body/body-lf",
                    ))
                };
                let text = |k: usize| {
                    let v = value(k)?;
                    parse_text(&v).map_err(|e| KwError::bad(i + k + 1, &v, e))
                };
                match a[i].as_str() {
                    "meth" => r.method = value(1)?,
                    "uri" => r.uri = CheckText::literal(&value(1)?),
                    "uri-lf" => r.uri = text(1)?,
                    "ver" => r.version = value(1)?,
                    "body" => r.body = CheckText::literal(&value(1)?),
                    "body-lf" => r.body = text(1)?,
                    "hdr" => {
                        r.headers.push((value(1)?, text(2)?));
                        i += 1;
                    }
                    // Names this step only; an HTTP check reports nothing of its send.
                    "comment" => {
                        value(1)?;
                    }
                    other => {
                        return Err(KwError::bad(
                            i + 1,
                            other,
                            "expects meth, uri, uri-lf, ver, hdr, body, body-lf or comment",
                        ))
                    }
                }
                i += 2;
            }
            attach_comment(&mut c.check, "send");
            Ok(())
        },
    },
    Keyword {
        name: "http-check comment",
        scope: Scope::BE,
        help: "http-check comment TEXT: names the following rules in failure reports",
        parse: |c, a| {
            own_http_rules(&mut c.check);
            let text = one_arg(a, "a comment")?;
            c.check.pending_comment = Some((text.to_string(), None));
            Ok(())
        },
    },
    Keyword {
        name: "http-check disable-on-404",
        scope: Scope::BE,
        help: "http-check disable-on-404: a server answering 404 to its check takes no new traffic",
        parse: |c, a| no_args(a).map(|_| c.check.disable_on_404 = true),
    },
    Keyword {
        name: "http-check send-state",
        scope: Scope::BE,
        help: "http-check send-state: the check request tells the server its state (X-Haproxy-Server-State)",
        parse: |c, a| no_args(a).map(|_| c.check.send_state = true),
    },
    Keyword {
        name: "http-check connect",
        scope: Scope::BE,
        help: "http-check connect [default] [port N] [addr IP] [ssl] [sni NAME] [alpn LIST] [proto h1|h2] [linger] [comment TEXT]: where the HTTP check connects and how",
        parse: |c, a| {
            own_http_rules(&mut c.check);
            if c.check.http_connect != ConnectRule::default() {
                return Err(KwError::Invalid(
                    "a second 'http-check connect': sluice's HTTP check makes one connection"
                        .into(),
                ));
            }
            c.check.http_connect = connect_rule(a)?;
            Ok(())
        },
    },
    Keyword {
        name: "option tcp-check",
        scope: Scope::BE,
        help: "option tcp-check: check servers with the backend's tcp-check rules",
        parse: |c, a| no_args(a).map(|_| c.check.kind = CheckKind::TcpCheck),
    },
    Keyword {
        name: "tcp-check connect",
        scope: Scope::BE,
        help: "tcp-check connect [default] [port N] [addr IP] [linger] [comment TEXT]: (re)connect",
        parse: |c, a| {
            let rule = connect_rule(a)?;
            c.check.tcp_rules.push(TcpRule::Connect(rule));
            Ok(())
        },
    },
    Keyword {
        name: "tcp-check send",
        scope: Scope::BE,
        help: "tcp-check send STRING [comment TEXT]: send a string",
        parse: |c, a| {
            let (v, comment) = send_args(a, "a string")?;
            c.check.tcp_rules.push(TcpRule::Send(v.as_bytes().to_vec(), comment));
            Ok(())
        },
    },
    Keyword {
        name: "tcp-check send-lf",
        scope: Scope::BE,
        help: "tcp-check send-lf FMT [comment TEXT]: send a string with variables (%[srv_name], %[be_name], %[env(NAME)], ...)",
        parse: |c, a| {
            let (v, comment) = send_args(a, "a string")?;
            let text = parse_text(v).map_err(|e| KwError::bad(1, v, e))?;
            c.check.tcp_rules.push(TcpRule::SendText(text, comment));
            Ok(())
        },
    },
    Keyword {
        name: "tcp-check send-binary",
        scope: Scope::BE,
        help: "tcp-check send-binary HEX [comment TEXT]: send bytes written in hexadecimal",
        parse: |c, a| {
            let (v, comment) = send_args(a, "hexadecimal bytes")?;
            let bytes = hex(v).map_err(|e| KwError::bad(1, v, e))?;
            c.check.tcp_rules.push(TcpRule::Send(bytes, comment));
            Ok(())
        },
    },
    Keyword {
        name: "tcp-check expect",
        scope: Scope::BE,
        help: "tcp-check expect [min-recv N] [comment TEXT] [ok-status ST] [error-status ST] [tout-status ST] [on-success FMT] [on-error FMT] [status-code N] [!] string|rstring|binary|rbinary VALUE: what must arrive",
        parse: |c, a| {
            let rule = expect_rule(a)?;
            c.check.tcp_rules.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "tcp-check comment",
        scope: Scope::BE,
        help: "tcp-check comment TEXT: names the following rules in failure reports",
        parse: |c, a| {
            let v = one_arg(a, "a comment")?;
            c.check.tcp_rules.push(TcpRule::Comment(v.to_string()));
            Ok(())
        },
    },
    Keyword {
        name: "option redis-check",
        scope: Scope::BE,
        help: "option redis-check: check servers with a Redis PING",
        parse: |c, a| no_args(a).map(|_| c.check.kind = CheckKind::Probe(probe::redis_rules())),
    },
    Keyword {
        name: "option smtpchk",
        scope: Scope::BE,
        help: "option smtpchk [HELO|EHLO DOMAIN]: check servers with an SMTP greeting",
        parse: |c, a| {
            let (verb, domain) = match a {
                [] => ("HELO", "localhost"),
                [v, d] if v == "HELO" || v == "EHLO" => (v.as_str(), d.as_str()),
                [v, ..] => return Err(KwError::bad(1, v, "expects HELO or EHLO and a domain")),
            };
            c.check.kind = CheckKind::Probe(probe::smtp_rules(verb, domain));
            Ok(())
        },
    },
    Keyword {
        name: "option pgsql-check",
        scope: Scope::BE,
        help: "option pgsql-check user USER: check servers with a PostgreSQL startup message",
        parse: |c, a| match a {
            [k, user] if k == "user" => {
                c.check.kind = CheckKind::Probe(probe::pgsql_rules(user));
                Ok(())
            }
            _ => Err(KwError::Missing("user USER")),
        },
    },
    Keyword {
        name: "option mysql-check",
        scope: Scope::BE,
        help: "option mysql-check [user USER [post-41|pre-41]]: check servers with a MySQL handshake",
        parse: |c, a| {
            let (user, pre41) = match a {
                [] => (None, false),
                [k, u] if k == "user" => (Some(u.clone()), false),
                [k, u, p] if k == "user" && (p == "post-41" || p == "pre-41") => {
                    (Some(u.clone()), p == "pre-41")
                }
                [k, _, p] if k == "user" => {
                    return Err(KwError::bad(
                        3,
                        p,
                        "only supports 'post-41' and 'pre-41'",
                    ))
                }
                [k, ..] => return Err(KwError::bad(1, k, "expects user USER")),
            };
            c.check.kind = CheckKind::Mysql { user, pre41 };
            Ok(())
        },
    },
    Keyword {
        name: "option ssl-hello-chk",
        scope: Scope::BE,
        help: "option ssl-hello-chk: check servers with an SSLv3 client hello",
        parse: |c, a| {
            no_args(a).map(|_| c.check.kind = CheckKind::Probe(probe::ssl_hello_rules()))
        },
    },
    Keyword {
        name: "option ldap-check",
        scope: Scope::BE,
        help: "option ldap-check: check servers with an anonymous LDAPv3 bind",
        parse: |c, a| no_args(a).map(|_| c.check.kind = CheckKind::Ldap),
    },
    Keyword {
        name: "option spop-check",
        scope: Scope::BE,
        help: "option spop-check: check SPOE agents with an SPOP hello",
        parse: |c, a| no_args(a).map(|_| c.check.kind = CheckKind::Spop),
    },
    Keyword {
        name: "option external-check",
        scope: Scope::BE,
        help: "option external-check: check servers by running 'external-check command' (needs the global 'external-check')",
        parse: |c, a| no_args(a).map(|_| c.check.kind = CheckKind::External),
    },
    Keyword {
        name: "external-check command",
        scope: Scope::BE,
        help: "external-check command CMD: the program an external check runs, with the proxy's and the server's addresses and ports as arguments; exit status 0 passes",
        parse: |c, a| {
            let v = one_arg(a, "a command")?;
            c.check.external.command = Some(v.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "external-check path",
        scope: Scope::BE,
        help: "external-check path PATH: the PATH an external check's program runs with (default empty)",
        parse: |c, a| {
            let v = one_arg(a, "a PATH value")?;
            c.check.external.path = Some(v.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "no option httpchk",
        scope: Scope::BE,
        help: "no option httpchk: check servers with a plain connection again",
        parse: |c, _| {
            c.check.kind = CheckKind::Tcp;
            Ok(())
        },
    },
    Keyword {
        name: "http-check expect",
        scope: Scope::BE,
        help:
            "http-check expect [!] status CODES | rstatus RE | string TEXT | rstring RE | hdr|fhdr name [-m M] NAME [value [-m M] VALUE]: what an HTTP check requires",
        parse: |c, a| {
            own_http_rules(&mut c.check);
            // `comment TEXT` may come first or last.
            let (own_comment, a) = match a {
                [kw, text, rest @ ..] if kw == "comment" => (Some(text.clone()), rest),
                [rest @ .., kw, text] if kw == "comment" => (Some(text.clone()), rest),
                _ => (None, a),
            };
            let (neg, rest) = match a.first().map(String::as_str) {
                Some("!") => (true, &a[1..]),
                _ => (false, a),
            };
            let expect = match rest {
                [kind, value] if kind == "status" => Expect::Status(
                    value
                        .split(',')
                        .map(|v| {
                            let (lo, hi) = v.split_once('-').unwrap_or((v, v));
                            let code = |c: &str| c.parse::<u16>().ok().filter(|s| (100..600).contains(s));
                            code(lo)
                                .zip(code(hi))
                                .filter(|(lo, hi)| lo <= hi)
                                .ok_or_else(|| {
                                    KwError::bad(2, v, "expects HTTP status codes or ranges (200,301-304)")
                                })
                        })
                        .collect::<Result<_, _>>()?,
                ),
                [kind, value] if kind == "string" => Expect::String(value.clone()),
                [kind, value] if kind == "rstatus" => {
                    Expect::RStatus(regex(value).map_err(|e| KwError::bad(2, value, e))?)
                }
                [kind, value] if kind == "rstring" => {
                    Expect::RString(regex(value).map_err(|e| KwError::bad(2, value, e))?)
                }
                [kind, args @ ..] if matches!(kind.as_str(), "hdr" | "fhdr") => {
                    header_expect(kind == "fhdr", args)?
                }
                [kind, ..] => {
                    return Err(KwError::bad(1, kind, "expects status, rstatus, string, rstring, hdr or fhdr"));
                }
                [] => return Err(KwError::Missing("status CODE or string TEXT")),
            };
            let pending = attach_comment(&mut c.check, "expect");
            c.check.expects.push(HttpExpect {
                negated: neg,
                expect,
                comment: own_comment.or(pending),
            });
            Ok(())
        },
    },
    Keyword {
        name: "timeout check",
        scope: Scope::BE,
        help: "timeout check TIME: time a check may take once connected (default: inter)",
        parse: |c, a| time_arg(a).map(|t| c.check.timeout = Some(t)),
    },
];

/// The HTTP check's rules start anew: the request back to HAProxy's `OPTIONS / HTTP/1.0`
/// without fields or body, no expects, the default connection.
fn new_http_rules(c: &mut crate::conf::check::BackendCheck) {
    c.http = Default::default();
    c.expects.clear();
    c.http_connect = ConnectRule::default();
}

/// The first `http-check` rule of a proxy that inherited its defaults' replaces them.
fn own_http_rules(c: &mut crate::conf::check::BackendCheck) {
    if c.http_rules_inherited {
        new_http_rules(c);
        c.http_rules_inherited = false;
    }
}

/// `option log-health-checks` (and its `no` form).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option log-health-checks", Scope::BE, "log every health-check result, not only state changes",
        |c: &mut ProxyConf, on| c.check.log_all = on;
];

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "external-check",
        scope: Scope::GLOBAL,
        help: "external-check: backends may check their servers with external programs (option external-check)",
        parse: |g, a| no_args(a).map(|_| g.check.external = true),
    },
    Keyword {
        // sluice never forbids its process to fork (HAProxy does unless this is set), so
        // the line changes nothing: external checks run either way.
        name: "insecure-fork-wanted",
        scope: Scope::GLOBAL,
        help: "insecure-fork-wanted: allow the process to start programs (external checks); sluice does not forbid it, so this changes nothing",
        parse: |_, a| no_args(a),
    },
    Keyword {
        name: "insecure-setuid-wanted",
        scope: Scope::GLOBAL,
        help: "insecure-setuid-wanted: allow programs started by the process to gain privileges through setuid; sluice does not forbid it, so this changes nothing",
        parse: |_, a| no_args(a),
    },
    Keyword {
        name: "spread-checks",
        scope: Scope::GLOBAL,
        help: "spread-checks PCT: random +/- percent added to check intervals (0 to 50)",
        parse: |g, a| {
            let v = one_arg(a, "a percentage")?;
            g.check.spread_pct = v
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= 50)
                .ok_or_else(|| KwError::bad(1, v, "expects a percentage from 0 to 50"))?;
            Ok(())
        },
    },
    Keyword {
        name: "max-spread-checks",
        scope: Scope::GLOBAL,
        help: "max-spread-checks TIME: longest window the first checks are spread over",
        parse: |g, a| time_arg(a).map(|t| g.check.max_spread = Some(t)),
    },
    Keyword {
        name: "tune.max-checks-per-thread",
        scope: Scope::GLOBAL,
        help: "tune.max-checks-per-thread N: checks running at once per worker (0: no limit)",
        parse: |g, a| {
            let v = one_arg(a, "a count")?;
            g.check.max_per_thread = v
                .parse()
                .map_err(|_| KwError::bad(1, v, "expects a count"))?;
            Ok(())
        },
    },
];

/// A regular expression for `rstatus`, `rstring`, `rbinary`.
fn regex(v: &str) -> Result<Re, String> {
    regex::bytes::Regex::new(v)
        .map(Re)
        .map_err(|e| format!("invalid regular expression: {e}"))
}

/// Bytes written in hexadecimal (`tcp-check send-binary`, `expect binary`).
fn hex(v: &str) -> Result<Vec<u8>, String> {
    if v.len() & 1 == 1 {
        return Err("expects an even number of hexadecimal digits".into());
    }
    (0..v.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&v[i..i + 2], 16)
                .map_err(|_| "expects hexadecimal digits".to_string())
        })
        .collect()
}

/// What HAProxy says of a proxy's external-check lines (`kind` section `name`): the errors
/// of an `option external-check` that cannot run, the warnings of lines it makes useless.
pub fn external_lines(
    kind: &str,
    name: &str,
    check: &crate::conf::check::BackendCheck,
    global: &GlobalConf,
) -> (Vec<String>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    let ext = &check.external;
    if check.kind == CheckKind::External {
        if !global.check.external {
            errors.push(format!(
                "Proxy '{name}' : 'option external-check' unable to find required 'global.external-check'."
            ));
        }
        if ext.command.is_none() {
            errors.push(format!(
                "Proxy '{name}' : 'option external-check' unable to find required 'external-check command'."
            ));
        }
    } else {
        for (line, set) in [
            ("command", ext.command.is_some()),
            ("path", ext.path.is_some()),
        ] {
            if set {
                warnings.push(format!(
                    "'external-check {line}' will be ignored for {kind} '{name}' (requires 'option external-check')."
                ));
            }
        }
    }
    if ext.command.as_ref().is_some_and(|c| !c.starts_with('/')) && ext.path.is_none() {
        errors.push(format!(
            "Proxy '{name}': 'external-check command' does not have a leading '/' and 'external-check path' is not set."
        ));
    }
    (errors, warnings)
}
