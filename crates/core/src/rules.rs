//! The rules that use conditions (`crate::acl`): `use_backend`, `default_backend`,
//! `http-request` and `http-response`. Request conditions see the request as the client
//! sent it.

use std::net::SocketAddr;

use sluice_config::{ConfigError, Keyword, KwError, Scope};

pub use crate::acl::holds;
pub(crate) use crate::acl::parse_cond;
use crate::conf::patterns::PatternBook;
pub use crate::conf::rules::*;
use crate::conf::{Loc, ProxyConf};
use crate::errorpages::{check_name, fmt_arg, header_value, parse_reply};
use crate::sample::{Ctx, Expr, Match, Sample, Tracker, VarName};
use crate::stick::{Counter, Key};

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
        scope: Scope::PROXY,
        help: "http-request ACTION [ARGS...] [if|unless COND]",
        parse: |c, args| {
            let rule = match args.first().map(String::as_str) {
                Some("capture") => parse_capture(c, args, Side::Request)?,
                _ => parse_rule(&c.rules, args, Side::Request, &c.at)?,
            };
            c.rules.sets.http_request.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "http-response",
        scope: Scope::PROXY,
        help: "http-response ACTION [ARGS...] [if|unless COND]",
        parse: |c, args| {
            let rule = match args.first().map(String::as_str) {
                Some("capture") => parse_capture(c, args, Side::Response)?,
                _ => parse_rule(&c.rules, args, Side::Response, &c.at)?,
            };
            response_values_only(&rule)?;
            c.rules.sets.http_response.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "http-after-response",
        scope: Scope::PROXY,
        help: "http-after-response ACTION [ARGS...] [if|unless COND]: on every response, the proxy's own included",
        parse: |c, args| {
            let rule = parse_rule(&c.rules, args, Side::AfterResponse, &c.at)?;
            response_values_only(&rule)?;
            c.rules.sets.http_after_response.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "redirect",
        scope: Scope::FE_BE,
        help: "redirect location|prefix|scheme VALUE [code N] [drop-query] [append-slash] [set-cookie N[=V]] [clear-cookie N] [if|unless COND]: after the http-request rules",
        parse: |c, args| {
            let mut words = vec!["redirect".to_string()];
            words.extend_from_slice(args);
            let rule = parse_rule(&c.rules, &words, Side::Request, &c.at).map_err(|e| match e {
                KwError::BadArg { index, value, reason } => KwError::BadArg {
                    index: index - 1,
                    value,
                    reason,
                },
                e => e,
            })?;
            c.rules.sets.redirects.push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "tcp-request",
        scope: Scope::PROXY,
        help: "tcp-request connection|session|content ACTION [if|unless COND] | tcp-request inspect-delay TIME",
        parse: |c, args| {
            let (side, list) = match args.first().map(String::as_str) {
                Some("inspect-delay") => {
                    c.rules.sets.inspect_delay = Some(crate::conf::time_arg(&args[1..])?);
                    return Ok(());
                }
                Some("connection") => (Side::TcpConnection, 0),
                Some("session") => (Side::TcpSession, 1),
                Some("content") => (Side::TcpContent, 2),
                Some(other) => {
                    return Err(KwError::bad(
                        1,
                        other,
                        "expects connection, session, content or inspect-delay",
                    ))
                }
                None => return Err(KwError::Missing("connection, session, content or inspect-delay")),
            };
            let rule = match args.get(1).map(String::as_str) {
                // `capture SAMPLE len N`: a new request capture slot, as HAProxy's.
                Some("capture") if side == Side::TcpContent => {
                    if args.get(3).is_some_and(|kw| kw != "len") {
                        return Err(KwError::bad(4, &args[3], "expects 'len N'"));
                    }
                    parse_capture(c, &args[1..], Side::Request).map_err(|e| e.shifted(1))?
                }
                _ => parse_rule(&c.rules, &args[1..], side, &c.at).map_err(|e| e.shifted(1))?,
            };
            let sets = &mut c.rules.sets;
            [&mut sets.tcp_connection, &mut sets.tcp_session, &mut sets.tcp_content][list]
                .push(rule);
            Ok(())
        },
    },
    Keyword {
        name: "tcp-response",
        scope: Scope::BE,
        help: "tcp-response content accept|reject|... [if|unless COND] | tcp-response inspect-delay TIME",
        parse: |c, args| match args.first().map(String::as_str) {
            // In TCP mode, how long the rules may wait for the server's payload; in HTTP
            // mode they are decided on the response head.
            Some("inspect-delay") => {
                c.rules.sets.response_inspect_delay = Some(crate::conf::time_arg(&args[1..])?);
                Ok(())
            }
            Some("content") => {
                let rule =
                    parse_rule(&c.rules, &args[1..], Side::TcpResponse, &c.at).map_err(|e| e.shifted(1))?;
                c.rules.sets.tcp_response.push(rule);
                Ok(())
            }
            Some(other) => Err(KwError::bad(1, other, "expects content or inspect-delay")),
            None => Err(KwError::Missing("content or inspect-delay")),
        },
    },
];

/// Where a rule runs, which decides the actions it may take.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
    AfterResponse,
    TcpConnection,
    TcpSession,
    TcpContent,
    TcpResponse,
}

impl Side {
    fn tcp(self) -> bool {
        matches!(
            self,
            Side::TcpConnection | Side::TcpSession | Side::TcpContent | Side::TcpResponse
        )
    }

    /// Rules that see a request (and may track it).
    fn request(self) -> bool {
        matches!(
            self,
            Side::Request | Side::TcpConnection | Side::TcpSession | Side::TcpContent
        )
    }

    /// HTTP rules on a response.
    fn response(self) -> bool {
        matches!(self, Side::Response | Side::AfterResponse)
    }
}

/// Actions of `tcp-request` / `tcp-response` HAProxy has that sluice does not implement yet.
const PENDING_TCP_ACTIONS: &[&str] = &[
    "expect-netscaler-cip",
    "set-nice",
    "do-resolve",
    "send-spoe-group",
    "use-service",
    "switch-mode",
    "set-bandwidth-limit",
    "close",
    "lua",
    "set-priority-class",
    "set-priority-offset",
];

/// Actions HAProxy has that sluice does not implement yet.
const PENDING_ACTIONS: &[&str] = &[
    "set-nice",
    "strict-mode",
    "do-resolve",
    "send-spoe-group",
    "lua",
    "set-priority-class",
    "set-priority-offset",
    "set-bandwidth-limit",
    "sc-add-gpc",
    "sc-inc-gpc",
];

/// Whether `action` is one of `pending`, by its name before any `(ARGS)` (`add-acl(FILE)`).
fn is_pending(pending: &[&str], action: &str) -> bool {
    let name = action.split_once('(').map_or(action, |(n, _)| n);
    pending.contains(&name)
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

/// `NAME(VAR)` of `set-var(txn.x)`, `set-var-fmt(txn.x)` / `unset-var(txn.x)`.
fn var_of(action: &str) -> Option<Result<VarName, String>> {
    let inner = action
        .strip_prefix("set-var(")
        .or_else(|| action.strip_prefix("set-var-fmt("))
        .or_else(|| action.strip_prefix("unset-var("))?
        .strip_suffix(')')?;
    let mut words = inner.split(',');
    let name = words.next().unwrap_or_default();
    let conds: Vec<&str> = words.collect();
    Some(
        crate::sample::parse_var(name)
            .map_err(|e| e.0)
            .and_then(|mut v| {
                v.conds = crate::conf::sample::VarConds::parse(&conds)?;
                Ok(v)
            }),
    )
}

/// A rule line, with where it was written.
fn parse_rule(
    rules: &RulesConf,
    args: &[String],
    side: Side,
    at: &crate::conf::Loc,
) -> Result<Rule, KwError> {
    let mut rule = rule_of(rules, args, side, at)?;
    rule.at = Some(at.clone());
    Ok(rule)
}

fn rule_of(
    rules: &RulesConf,
    args: &[String],
    side: Side,
    at: &crate::conf::Loc,
) -> Result<Rule, KwError> {
    let Some(action) = args.first() else {
        return Err(KwError::Missing("an action"));
    };
    let book = &rules.book;
    let cond_at = args
        .iter()
        .position(|a| a == "if" || a == "unless")
        .unwrap_or(args.len());
    let cond = parse_cond(rules, &args[cond_at..], cond_at + 1)?;
    let params = &args[1..cond_at];
    if side.tcp() {
        return Ok(Rule::new(
            parse_tcp_action(action, params, side, &rules.book)?,
            cond,
        ));
    }
    let action = match (action.as_str(), side) {
        ("return", Side::Request | Side::Response) => {
            Action::Return(parse_reply(params, 200, at, book)?.0)
        }
        ("auth", Side::Request) => match params {
            [] => Action::Auth(None),
            [kw, realm] if kw == "realm" => Action::Auth(Some(realm.clone())),
            _ => return Err(KwError::Invalid("expects 'auth [realm REALM]'".into())),
        },
        ("reject", Side::Request) => {
            sluice_config::no_args(params)?;
            Action::Reject
        }
        (a, Side::Request | Side::Response) if list_edit(a).is_some() => {
            let (edit, file) = list_edit(a).expect("checked");
            let (key, value) = match (edit, params) {
                (ListEdit::Set, [key, value]) => (key, Some(fmt_arg(value, 3, book)?)),
                (ListEdit::Set, _) => return Err(KwError::Missing("a key and a value")),
                (_, [key]) => (key, None),
                _ => return Err(KwError::Missing("a key")),
            };
            Action::EditList {
                list: crate::sample::NameRef::new(file),
                edit,
                key: fmt_arg(key, 2, book)?,
                value,
            }
        }
        ("wait-for-handshake", Side::Request) => {
            sluice_config::no_args(params)?;
            Action::WaitForHandshake
        }
        ("disable-l7-retry", Side::Request) => {
            sluice_config::no_args(params)?;
            Action::AlwaysSo
        }
        ("silent-drop", Side::Request | Side::Response) => {
            sluice_config::no_args(params)?;
            Action::SilentDrop
        }
        ("set-tos" | "set-mark", Side::Request | Side::Response) => socket_action(action, params)?,
        (kind @ ("replace-path" | "replace-pathq" | "replace-uri"), Side::Request) => {
            let [re, with] = params else {
                return Err(KwError::Missing("a regular expression and a format"));
            };
            let re = regex::bytes::Regex::new(re)
                .map_err(|e| KwError::bad(2, re, format!("invalid regular expression: {e}")))?;
            let part = match kind {
                "replace-path" => TargetPart::Path,
                "replace-pathq" => TargetPart::PathQ,
                _ => TargetPart::Uri,
            };
            Action::ReplaceTarget {
                part,
                re: crate::sample::Regex(re),
                with: fmt_arg(with, 3, book)?,
            }
        }
        (kind @ ("deny" | "tarpit"), side) if side == Side::Request || kind == "deny" => {
            let default = match (kind, side) {
                ("tarpit", _) => 500,
                (_, Side::Request) => 403,
                _ => 502,
            };
            let (r, custom) = parse_reply(params, default, at, book)?;
            let (status, reply) = (r.status, custom.then_some(r));
            if kind == "deny" {
                Action::Deny { status, reply }
            } else {
                Action::Tarpit { status, reply }
            }
        }
        ("set-log-level", _) => Action::SetLogLevel(log_level(params)?),
        ("set-timeout", Side::Request) => {
            let [which, value] = params else {
                return Err(KwError::Missing("server or tunnel and a time"));
            };
            let kind = match which.as_str() {
                "server" => TimeoutKind::Server,
                "tunnel" => TimeoutKind::Tunnel,
                other => return Err(KwError::bad(2, other, "expects server or tunnel")),
            };
            let expr = match sluice_config::units::parse_time(value) {
                Ok(t) => crate::sample::parse_expr(&format!("int({})", t.as_millis()), book),
                Err(_) => crate::sample::parse_expr(value, book),
            }
            .map_err(|e| KwError::bad(3, value, e.0))?;
            Action::SetTimeout(kind, expr)
        }
        (kind @ ("set-src" | "set-dst" | "set-src-port" | "set-dst-port"), Side::Request) => {
            let value = crate::conf::one_arg(params, "a sample expression")?;
            let e =
                crate::sample::parse_expr(value, book).map_err(|e| KwError::bad(2, value, e.0))?;
            match kind {
                "set-src" => Action::SetSrc(e),
                "set-dst" => Action::SetDst(e),
                "set-src-port" => Action::SetSrcPort(e),
                _ => Action::SetDstPort(e),
            }
        }
        ("early-hint", Side::Request) => {
            let [name, value] = params else {
                return Err(KwError::Missing("a header name and a value"));
            };
            // `X-Forwarded-Proto:` as configurations copied from the wire write it: HAProxy
            // takes the colon into the name; the header meant has the name before it.
            let name = &name.strip_suffix(':').unwrap_or(name).to_string();
            check_name(name, 2)?;
            Action::EarlyHint(name.clone(), header_value(value, 3, book)?)
        }
        ("wait-for-body", Side::Request | Side::Response) => {
            let (time, at_least) = match params {
                [t, time] if t == "time" => (time, None),
                [t, time, a, n] if t == "time" && a == "at-least" => (time, Some(n)),
                _ => return Err(KwError::Missing("'time T' [at-least N]")),
            };
            let time =
                sluice_config::units::parse_time(time).map_err(|e| KwError::bad(3, time, e))?;
            let at_least = match at_least {
                Some(n) => {
                    Some(sluice_config::units::parse_size(n).map_err(|e| KwError::bad(5, n, e))?)
                }
                None => None,
            };
            Action::WaitForBody { time, at_least }
        }
        ("allow", _) => {
            sluice_config::no_args(params)?;
            Action::Allow
        }
        (a, _) if a.starts_with("track-sc") || a.starts_with("sc-") => {
            track_action(a, params, side, book)?
        }
        ("cache-use", Side::Request) | ("cache-store", Side::Response) => {
            let name = crate::conf::one_arg(params, "a cache name")?;
            // Resolved to the cache's index once every section is read.
            let cache = crate::conf::cache::CacheRef {
                name: name.to_string(),
                index: usize::MAX,
            };
            match side {
                Side::Request => Action::CacheUse(cache),
                _ => Action::CacheStore(cache),
            }
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
            // `X-Forwarded-Proto:` as configurations copied from the wire write it: HAProxy
            // takes the colon into the name; the header meant has the name before it.
            let name = &name.strip_suffix(':').unwrap_or(name).to_string();
            check_name(name, 2)?;
            let value = header_value(value, 3, book)?;
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
                        let re = regex::bytes::RegexBuilder::new(&params[0])
                            .case_insensitive(true)
                            .build()
                            .map_err(|e| {
                                let why = format!("invalid regular expression: {e}");
                                KwError::bad(2, &params[0], why)
                            })?;
                        return Ok(Rule::new(
                            Action::DelHeaderRe(crate::sample::Regex(re)),
                            cond,
                        ));
                    }
                    other => {
                        return Err(KwError::bad(4, other, "expects str, beg, end, sub or reg"))
                    }
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
                with: header_value(with, 4, book)?,
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
            let f = fmt_arg(value, 2, book)?;
            match kind {
                "set-method" => Action::SetMethod(f),
                "set-path" => Action::SetPath(f),
                "set-pathq" => Action::SetPathQ(f),
                "set-query" => Action::SetQuery(f),
                _ => Action::SetUri(f),
            }
        }
        ("redirect", Side::Request) => Action::Redirect(parse_redirect(params, book)?),
        // On the response path only a location is possible, as HAProxy says.
        ("redirect", Side::Response) => {
            let r = parse_redirect(params, book)?;
            if r.kind != RedirectKind::Location {
                return Err(KwError::bad(
                    2,
                    &params[0],
                    "only 'location' redirects on the response path",
                ));
            }
            Action::Redirect(r)
        }
        ("set-status", side) if side.response() => {
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
        ("normalize-uri", Side::Request) => {
            let words: Vec<&str> = params.iter().map(String::as_str).collect();
            Action::NormalizeUri(
                sluice_http::UriNormalizer::parse(&words).map_err(KwError::Invalid)?,
            )
        }
        (a, _) if var_of(a).is_some() => var_action(a, params, book)?,
        (a, _)
            if is_pending(PENDING_ACTIONS, a)
                || a.starts_with("track-sc")
                || a.starts_with("sc-")
                || matches!(
                    a,
                    "return"
                        | "normalize-uri"
                        | "deny"
                        | "redirect"
                        | "use-service"
                        | "set-status"
                        | "set-method"
                        | "set-path"
                        | "set-pathq"
                        | "set-query"
                        | "set-uri"
                        | "wait-for-body"
                ) =>
        {
            return Err(KwError::Invalid(format!(
                "action '{a}': not supported yet here"
            )))
        }
        (a, _) => return Err(KwError::bad(1, a, "unknown action")),
    };
    Ok(Rule::new(action, cond))
}

/// A response rule's values may not read the request's head, which HAProxy no longer has
/// then: it refuses the line in its words (its conditions are only warned of, at load).
fn response_values_only(rule: &Rule) -> Result<(), KwError> {
    match rule
        .action
        .exprs()
        .iter()
        .find_map(|e| e.fetch.request_head_keyword())
    {
        Some(kw) => Err(KwError::Invalid(format!(
            "sample fetch <{kw}> may not be reliably used here because it needs 'HTTP request headers' which is not available here"
        ))),
        None => Ok(()),
    }
}

/// `add-acl`, `set-map`, `del-acl`, `del-map`: the list loaded from the rule's file (none:
/// nothing to do, as in HAProxy) changes only when the entry is not already as asked, each
/// change rebuilding the list (meant for occasional updates, such as a ban).
fn edit_list(
    cx: &Ctx<'_>,
    list: &crate::sample::NameRef,
    edit: ListEdit,
    (key, value): (&crate::sample::Fmt, Option<&crate::sample::Fmt>),
) {
    let lists = &cx.process.config.patterns;
    let Some(i) = list.index(lists, |l| l.file.as_deref().unwrap_or_default()) else {
        return;
    };
    let l = &lists[i];
    let key = String::from_utf8_lossy(&key.render(cx)).into_owned();
    let value = value.map(|v| String::from_utf8_lossy(&v.render(cx)).into_owned());
    let now = l.lookup_key(&key);
    let _ = match edit {
        ListEdit::Add if now.is_none() => l.edit(|e| {
            e.push(key, None, e.curr);
            Ok(())
        }),
        ListEdit::Set if now.as_ref() != Some(&value) => l.edit(|e| {
            let curr = e.curr;
            match e
                .entries
                .iter_mut()
                .find(|x| x.version == curr && x.key == key)
            {
                Some(entry) => entry.value = value,
                None => e.push(key, value, curr),
            }
            Ok(())
        }),
        ListEdit::Del if now.is_some() => l.edit(|e| {
            let curr = e.curr;
            e.entries.retain(|x| x.version != curr || x.key != key);
            Ok(())
        }),
        _ => Ok(()),
    };
}

/// `set-src`, `set-dst`, `set-src-port`, `set-dst-port` of a `tcp-request` rule: the
/// address (or port) the rest of the connection sees; a value of the wrong type changes
/// nothing.
fn set_address(action: &Action, cx: &Ctx<'_>) {
    let src = cx.client_addr();
    let dst = cx
        .vars
        .set_dst
        .get()
        .or(cx.dst)
        .or_else(|| cx.client.and_then(|c| c.local_addr().ok()));
    let ip = |e: &crate::sample::Expr| e.eval(cx).and_then(|v| v.as_ip());
    let port = |e: &crate::sample::Expr| e.eval(cx).and_then(|v| v.as_int()).map(|p| p as u16);
    match action {
        Action::SetSrc(e) => {
            if let (Some(ip), Some(src)) = (ip(e), src) {
                cx.vars.set_src.set(Some(SocketAddr::new(ip, src.port())));
            }
        }
        Action::SetSrcPort(e) => {
            if let (Some(p), Some(src)) = (port(e), src) {
                cx.vars.set_src.set(Some(SocketAddr::new(src.ip(), p)));
            }
        }
        Action::SetDst(e) => {
            if let (Some(ip), Some(dst)) = (ip(e), dst) {
                cx.vars.set_dst.set(Some(SocketAddr::new(ip, dst.port())));
            }
        }
        Action::SetDstPort(e) => {
            if let (Some(p), Some(dst)) = (port(e), dst) {
                cx.vars.set_dst.set(Some(SocketAddr::new(dst.ip(), p)));
            }
        }
        _ => {}
    }
}

/// `silent-drop`: the client's connection is closed without telling it.
pub(crate) fn silence(cx: &Ctx<'_>) {
    if let Some(c) = cx.client {
        c.silence();
    }
}

/// `tcp-request content capture`: into the session's slot, which the log and the rules
/// after it read (HTTP rules keep their captures with their edits).
fn capture_in_session(action: &Action, cx: &Ctx<'_>) {
    if let Action::Capture { expr, len, slot } = action {
        if let Some(text) = captured(expr, *len, cx) {
            if let Some(s) = cx.vars.captured.borrow_mut().req.get_mut(*slot) {
                *s = Some(text);
            }
        }
    }
}

/// What a `capture` rule keeps of its sample: its text, cut to `len` bytes.
pub(crate) fn captured(expr: &crate::sample::Expr, len: usize, cx: &Ctx<'_>) -> Option<String> {
    let v = expr.eval(cx)?;
    let b = v.as_bytes();
    Some(String::from_utf8_lossy(&b[..b.len().min(len)]).into_owned())
}

/// `capture SAMPLE len N` (a new request slot) or `capture SAMPLE id N` (a slot of
/// `declare capture` or `capture ... header`, on the rule's side).
fn parse_capture(c: &mut ProxyConf, args: &[String], side: Side) -> Result<Rule, KwError> {
    let cond_at = args
        .iter()
        .position(|a| a == "if" || a == "unless")
        .unwrap_or(args.len());
    let cond = parse_cond(&c.rules, &args[cond_at..], cond_at + 1)?;
    let [_, sample, kw, n] = &args[..cond_at] else {
        return Err(KwError::Missing("a sample and 'len N' or 'id N'"));
    };
    let expr = crate::sample::parse_expr(sample, &c.rules.book)
        .map_err(|e| KwError::bad(2, sample, e.0))?;
    let n: usize = n
        .parse()
        .map_err(|_| KwError::bad(4, n, "expects a number"))?;
    let slots = match side {
        Side::Request => &mut c.log.captures_req,
        _ => &mut c.log.captures_res,
    };
    let (slot, len) = match kw.as_str() {
        "len" if side == Side::Request && n > 0 => {
            slots.push((String::new(), n));
            (slots.len() - 1, n)
        }
        "len" if side == Side::Request => {
            return Err(KwError::bad(4, "0", "expects a positive length"))
        }
        "id" => {
            let len = slots.get(n).map(|(_, len)| *len).ok_or_else(|| {
                KwError::bad(
                    4,
                    &n.to_string(),
                    "no such capture slot (declare capture ...)",
                )
            })?;
            (n, len)
        }
        other => {
            let expects = match side {
                Side::Request => "expects 'len N' or 'id N'",
                _ => "expects 'id N' (a slot of 'declare capture response')",
            };
            return Err(KwError::bad(3, other, expects));
        }
    };
    Ok(Rule::new(Action::Capture { expr, len, slot }, cond))
}

/// `set-log-level LEVEL`: a severity, or `None` for `silent`.
fn log_level(params: &[String]) -> Result<Option<u8>, KwError> {
    match crate::conf::one_arg(params, "a log level")? {
        "silent" => Ok(None),
        l => crate::log::severity_of(l).map(Some).ok_or_else(|| {
            KwError::bad(
                2,
                l,
                "expects silent, emerg, alert, crit, err, warning, notice, info or debug",
            )
        }),
    }
}

/// The action of a `tcp-request` / `tcp-response` rule.
fn parse_tcp_action(
    action: &str,
    params: &[String],
    side: Side,
    book: &PatternBook,
) -> Result<Action, KwError> {
    Ok(match action {
        "accept" => {
            sluice_config::no_args(params)?;
            Action::Allow
        }
        "reject" => {
            sluice_config::no_args(params)?;
            Action::Reject
        }
        "silent-drop" if side.request() => {
            sluice_config::no_args(params)?;
            Action::SilentDrop
        }
        "set-tos" | "set-mark" if side.request() => socket_action(action, params)?,
        "set-log-level" if matches!(side, Side::TcpContent | Side::TcpResponse) => {
            Action::SetLogLevel(log_level(params)?)
        }
        a @ ("set-src" | "set-dst" | "set-src-port" | "set-dst-port") if side.request() => {
            let value = crate::conf::one_arg(params, "a sample expression")?;
            let e =
                crate::sample::parse_expr(value, book).map_err(|e| KwError::bad(2, value, e.0))?;
            match a {
                "set-src" => Action::SetSrc(e),
                "set-dst" => Action::SetDst(e),
                "set-src-port" => Action::SetSrcPort(e),
                _ => Action::SetDstPort(e),
            }
        }
        "expect-proxy" => match (side, params) {
            (Side::TcpConnection, [l4]) if l4 == "layer4" => Action::ExpectProxy,
            (Side::TcpConnection, _) => return Err(KwError::Missing("layer4 after expect-proxy")),
            _ => {
                return Err(KwError::Invalid(
                    "action 'expect-proxy': only in tcp-request connection rules".into(),
                ))
            }
        },
        a if a.starts_with("track-sc") || a.starts_with("sc-") => {
            track_action(a, params, side, book)?
        }
        a if var_of(a).is_some() => var_action(a, params, book)?,
        a if is_pending(PENDING_TCP_ACTIONS, a) => {
            return Err(KwError::Invalid(format!("action '{a}': not supported yet")))
        }
        a => return Err(KwError::bad(1, a, "unknown action")),
    })
}

/// `add-acl(FILE)`, `del-acl(FILE)`, `set-map(FILE)`, `del-map(FILE)`: what it does, to
/// which file's list.
fn list_edit(action: &str) -> Option<(ListEdit, &str)> {
    let (kind, rest) = action.split_once('(')?;
    let file = rest.strip_suffix(')').filter(|f| !f.is_empty())?;
    let edit = match kind {
        "add-acl" => ListEdit::Add,
        "set-map" => ListEdit::Set,
        "del-acl" | "del-map" => ListEdit::Del,
        _ => return None,
    };
    Some((edit, file))
}

/// `set-tos V` / `set-mark V`: a number, decimal or hexadecimal (`0x..`).
fn socket_action(action: &str, params: &[String]) -> Result<Action, KwError> {
    let [v] = params else {
        return Err(KwError::Missing("a value"));
    };
    let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => v.parse(),
    }
    .map_err(|_| KwError::bad(2, v, "expects a number"))?;
    Ok(if action == "set-tos" {
        Action::SetTos(n)
    } else {
        Action::SetMark(n)
    })
}

/// `set-var(NAME) EXPR`, `set-var-fmt(NAME) FMT` and `unset-var(NAME)`.
pub(crate) fn var_action(
    a: &str,
    params: &[String],
    book: &PatternBook,
) -> Result<Action, KwError> {
    let var = var_of(a)
        .expect("a variable action")
        .map_err(|e| KwError::bad(1, a, e))?;
    if a.starts_with("unset-var") {
        sluice_config::no_args(params)?;
        return Ok(Action::UnsetVar(var));
    }
    if a.starts_with("set-var-fmt") {
        let [fmt] = params else {
            return Err(KwError::Missing("a log-format string"));
        };
        let f = crate::sample::parse_fmt(fmt, book).map_err(|e| KwError::bad(2, fmt, e.0))?;
        return Ok(Action::SetVarFmt(var, f));
    }
    let [expr] = params else {
        return Err(KwError::Missing("a sample expression"));
    };
    let e = crate::sample::parse_expr(expr, book).map_err(|e| KwError::bad(2, expr, e.0))?;
    Ok(Action::SetVar(var, e))
}

/// `track-scN KEY [table T]`, `sc-inc-gpc0(N)`, `sc-inc-gpc1(N)`, `sc-set-gpt0(N) VALUE`.
fn track_action(
    a: &str,
    params: &[String],
    side: Side,
    book: &PatternBook,
) -> Result<Action, KwError> {
    if let Some(n) = a.strip_prefix("track-sc") {
        if !side.request() && side != Side::Response {
            return Err(KwError::Invalid(format!(
                "action '{a}': only in http-request, http-response and tcp-request rules"
            )));
        }
        let slot = slot_of(n)
            .ok_or_else(|| KwError::bad(1, a, "expects track-sc0, track-sc1 or track-sc2"))?;
        let (key, table) = match params {
            [key] => (key, None),
            [key, kw, t] if kw == "table" => {
                (key, Some(crate::conf::sample::NameRef::new(t.clone())))
            }
            [] => return Err(KwError::Missing("a key (a sample expression)")),
            [_, other, ..] => return Err(KwError::bad(3, other, "expects 'table NAME'")),
        };
        let key = crate::sample::parse_expr(key, book).map_err(|e| KwError::bad(2, key, e.0))?;
        return Ok(Action::Track { slot, key, table });
    }
    let (name, inner) = a
        .strip_suffix(')')
        .and_then(|r| r.split_once('('))
        .ok_or_else(|| {
            KwError::bad(
                1,
                a,
                "expects sc-inc-gpc0(N), sc-inc-gpc1(N), sc-inc-gpc(IDX,N), sc-set-gpt0(N) or sc-set-gpt(IDX,N)",
            )
        })?;
    // The arrays' actions name the element first: `sc-inc-gpc(IDX,N)`.
    let (index, slot) = match name {
        "sc-inc-gpc" | "sc-set-gpt" => {
            let (i, n) = inner
                .split_once(',')
                .ok_or_else(|| KwError::bad(1, a, "expects (IDX,N): an array index and a slot"))?;
            let i = i
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&i| (i as usize) < crate::conf::stick::ARRAY_MAX)
                .ok_or_else(|| KwError::bad(1, a, "the array index is 0 to 99"))?;
            (Some(i), n.trim())
        }
        _ => (None, inner),
    };
    let slot = slot_of(slot).ok_or_else(|| KwError::bad(1, a, "the slot is 0, 1 or 2"))?;
    let counter = match (name, index) {
        ("sc-inc-gpc0", _) => Counter::Gpc0,
        ("sc-inc-gpc1", _) => Counter::Gpc1,
        ("sc-inc-gpc", Some(i)) => Counter::Gpc(i),
        ("sc-set-gpt0", _) => Counter::Gpt0,
        ("sc-set-gpt", Some(i)) => Counter::Gpt(i),
        ("sc-add-gpc", _) => {
            return Err(KwError::Invalid(format!(
                "action '{a}': not supported yet (sc-inc-gpc and sc-set-gpt are)"
            )))
        }
        _ => return Err(KwError::bad(1, a, "unknown action")),
    };
    if name.starts_with("sc-inc-") {
        sluice_config::no_args(params)?;
        return Ok(Action::ScIncGpc { slot, counter });
    }
    let [v] = params else {
        return Err(KwError::Missing("a value (an integer or an expression)"));
    };
    let value = match v.parse::<i64>() {
        Ok(n) => crate::sample::parse_expr(&format!("int({n})"), book),
        Err(_) => crate::sample::parse_expr(v, book),
    }
    .map_err(|e| KwError::bad(2, v, e.0))?;
    Ok(Action::ScSetGpt {
        slot,
        tag: counter,
        value,
    })
}

/// `location|prefix|scheme VALUE [code N] [drop-query] [append-slash] [set-cookie N[=V]]
/// [clear-cookie N]`.
fn parse_redirect(params: &[String], book: &PatternBook) -> Result<Redirect, KwError> {
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
        value: fmt_arg(value, 3, book)?,
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

/// Which slots a tracking action fills: the connection's (`tcp-request connection|session`,
/// content rules in TCP mode) or the transaction's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Session,
    /// The transaction's; `count_request`: the new entry counts the current HTTP request
    /// (entries tracked before the request was counted are not).
    Txn {
        count_request: bool,
    },
}

/// Runs the actions every rule list shares (tracking, general purpose counters,
/// variables). Returns `false` for any other action, which is the caller's to run.
pub fn run_shared(action: &Action, cx: &Ctx<'_>, level: Level) -> bool {
    match action {
        Action::AlwaysSo | Action::WaitForHandshake => {}
        // In `tcp-request` rules (HTTP rules change the session's addresses themselves).
        Action::SetSrc(_) | Action::SetDst(_) | Action::SetSrcPort(_) | Action::SetDstPort(_) => {
            set_address(action, cx)
        }
        Action::SetTos(v) => {
            if let Some(c) = cx.client {
                c.set_tos(*v);
            }
        }
        Action::EditList {
            list,
            edit,
            key,
            value,
        } => edit_list(cx, list, *edit, (key, value.as_ref())),
        Action::SetMark(v) => {
            if let Some(c) = cx.client {
                c.set_mark(*v);
            }
        }
        Action::Track { slot, key, table } => track(cx, *slot, key, table.as_ref(), level),
        Action::ScIncGpc { slot, counter } => {
            let now = crate::runtime::clock_ms();
            cx.vars.with_tracked(*slot, |t| {
                if let Some(t) = t {
                    match counter.rate() {
                        Some(rate) => t.count(&[(*counter, 1), (rate, 1)], now),
                        None => t.count(&[(*counter, 1)], now),
                    }
                }
            });
        }
        Action::ScSetGpt { slot, tag, value } => {
            if let Some(v) = value.eval(cx).and_then(|v| v.as_int()) {
                cx.vars.with_tracked(*slot, |t| {
                    if let Some(t) = t {
                        let mut e = t.entry.lock().unwrap_or_else(|e| e.into_inner());
                        e.set(*tag, v.max(0) as u64);
                        t.table.changed(&t.key, &mut e);
                    }
                });
            }
        }
        Action::SetVar(v, e) => {
            if let Some(value) = e.eval(cx).map(Sample::into_owned) {
                cx.vars.set(cx.process, v, value);
            }
        }
        Action::SetVarFmt(v, f) => {
            let value = Sample::Str(std::borrow::Cow::Owned(f.render(cx)));
            cx.vars.set(cx.process, v, value);
        }
        Action::UnsetVar(v) => cx.vars.unset(cx.process, v),
        // Every rule list's level lands in one place: the last to run wins.
        Action::SetLogLevel(l) => cx.vars.log_level.set(Some(*l)),
        _ => return false,
    }
    true
}

/// `track-scN KEY [table T]`: the key's entry counts this connection (and, at the
/// transaction level, this request) and the slot keeps it; a slot in use keeps its entry.
fn track(
    cx: &Ctx<'_>,
    slot: u8,
    key: &Expr,
    table: Option<&crate::conf::sample::NameRef>,
    level: Level,
) {
    if cx.vars.tracking(slot) {
        return;
    }
    let Some(t) = cx.table(table) else {
        return;
    };
    let Some(k) = key.eval(cx).and_then(|k| Key::from_sample(&k, t.conf.key)) else {
        return;
    };
    let now = crate::runtime::clock_ms();
    let Some(tracker) = Tracker::start(t, k, now) else {
        return;
    };
    let slots = match level {
        Level::Session => &cx.vars.sess_trackers,
        Level::Txn { count_request } => {
            if count_request {
                tracker.count(&REQUEST, now);
            }
            &cx.vars.trackers
        }
    };
    slots.borrow_mut().set(usize::from(slot), tracker);
}

/// What one HTTP request adds to the entries tracking it.
pub const REQUEST: [(Counter, u64); 2] = [(Counter::HttpReqCnt, 1), (Counter::HttpReqRate, 1)];

/// The verdict of TCP rules: the first `accept` or `reject` whose condition holds ends
/// the list (none: accepted); the other actions run as they come.
pub fn tcp_verdict(rules: &[Rule], cx: &Ctx<'_>, level: Level) -> bool {
    for rule in rules {
        if !holds(&rule.cond, cx) {
            continue;
        }
        cx.vars.note_rule(rule);
        match &rule.action {
            Action::Allow => return true,
            Action::Reject => return false,
            Action::SilentDrop => {
                silence(cx);
                return false;
            }
            capture @ Action::Capture { .. } => capture_in_session(capture, cx),
            other => {
                run_shared(other, cx, level);
            }
        }
    }
    true
}

/// The backend of the first `use_backend` rule whose condition holds and whose target
/// exists (a dynamic name no backend has skips its rule, as in HAProxy).
pub fn switch(
    rules: &[(Option<Cond>, BackendRef)],
    cx: &Ctx<'_>,
    backends: &[crate::conf::Backend],
) -> Option<usize> {
    rules
        .iter()
        .filter(|(cond, _)| holds(cond, cx))
        .find_map(|(_, target)| match target {
            BackendRef::Fixed(b) => Some(*b),
            BackendRef::Dynamic(f) => {
                let name = f.render(cx);
                backends
                    .iter()
                    .position(|b| b.name.as_bytes() == name.as_slice())
            }
        })
}

/// `set-var proc.NAME EXPR` and `set-var-fmt proc.NAME FMT` in `global`: process
/// variables set once at start, from what needs no connection (constants, `env()`,
/// `date()`, other variables), as HAProxy's.
pub const GLOBAL_KEYWORDS: &[sluice_config::Keyword<crate::conf::GlobalConf>] = &[
    sluice_config::Keyword {
        name: "set-var",
        scope: Scope::GLOBAL,
        help: "set-var proc.NAME EXPR: a process variable set at start",
        parse: |g, a| global_var(g, a, false),
    },
    sluice_config::Keyword {
        name: "set-var-fmt",
        scope: Scope::GLOBAL,
        help: "set-var-fmt proc.NAME FMT: a process variable set at start from a log-format string",
        parse: |g, a| global_var(g, a, true),
    },
    sluice_config::Keyword {
        name: "expose-experimental-directives",
        scope: Scope::GLOBAL,
        help: "expose-experimental-directives: allow the actions HAProxy 2.6 calls experimental (http-request normalize-uri)",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.experimental = true),
    },
];

/// Whether `rule` uses a keyword HAProxy 2.6 calls experimental, which needs
/// `expose-experimental-directives` in `global`: the keyword, if so.
pub fn experimental(rule: &Rule) -> Option<&'static str> {
    matches!(rule.action, Action::NormalizeUri(_)).then_some("http-request normalize-uri")
}

fn global_var(g: &mut crate::conf::GlobalConf, a: &[String], fmt: bool) -> Result<(), KwError> {
    use crate::conf::sample::{Fetch, VarScope};
    let [name, value] = a else {
        return Err(KwError::Missing("a variable name (proc.NAME) and a value"));
    };
    let var = crate::sample::parse_var(name).map_err(|e| KwError::bad(1, name, e.0))?;
    if var.scope != VarScope::Proc {
        return Err(KwError::bad(
            1,
            name,
            "only proc. variables can be set in global",
        ));
    }
    // Computed once at start: the maps it reads are not the CLI's to edit.
    let book = PatternBook::default();
    let value = if fmt {
        crate::conf::ProcValue::Fmt(
            crate::sample::parse_fmt(value, &book).map_err(|e| KwError::bad(2, value, e.0))?,
        )
    } else {
        let e = crate::sample::parse_expr(value, &book).map_err(|e| KwError::bad(2, value, e.0))?;
        let constant = matches!(
            e.fetch,
            Fetch::Str(_)
                | Fetch::Int(_)
                | Fetch::Bool(_)
                | Fetch::Ip(_)
                | Fetch::Env(_)
                | Fetch::Date(..)
                | Fetch::Rand(_)
                | Fetch::Var(_)
                | Fetch::Hostname
        );
        if !constant {
            return Err(KwError::bad(
                2,
                value,
                "at start only constants, env(), date(), rand(), hostname and variables can be read",
            ));
        }
        crate::conf::ProcValue::Expr(e)
    };
    g.proc_vars.push((var, value));
    Ok(())
}

/// Where TCP-mode content rules stand on a payload that may still grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inspected {
    Accept,
    Reject,
    /// A condition needs more bytes: the list runs again, from the top, once they came.
    Wait,
}

/// Runs `tcp-request content` rules on `cx.payload`: the first `accept` or `reject` whose
/// condition holds decides (none: accepted), the other actions run as they come, and a
/// condition that more bytes may change stops the list there. As in HAProxy, the list is
/// evaluated again from its first rule each time more of the request arrived, until a
/// verdict or the end of `tcp-request inspect-delay` (so an action before the waiting rule,
/// a `capture` say, runs again on the fuller payload).
pub fn tcp_inspect(rules: &[Rule], cx: &Ctx<'_>, level: Level) -> Inspected {
    for rule in rules {
        let outcome = rule
            .cond
            .as_ref()
            .map_or(crate::acl::Partial::Pass, |c| c.eval_partial(cx));
        match outcome {
            crate::acl::Partial::Miss => return Inspected::Wait,
            crate::acl::Partial::Fail => continue,
            crate::acl::Partial::Pass => {}
        }
        match &rule.action {
            Action::Allow => return Inspected::Accept,
            Action::Reject => return Inspected::Reject,
            Action::SilentDrop => {
                silence(cx);
                return Inspected::Reject;
            }
            capture @ Action::Capture { .. } => capture_in_session(capture, cx),
            other => {
                run_shared(other, cx, level);
            }
        }
    }
    Inspected::Accept
}

/// Whether `tcp-request connection expect-proxy layer4` applies to a connection: one such
/// rule's condition holds, before any `accept` or `reject` that holds.
pub fn expects_proxy(rules: &[Rule], cx: &Ctx<'_>) -> bool {
    for rule in rules {
        let final_verdict = matches!(rule.action, Action::Allow | Action::Reject);
        let proxy = rule.action == Action::ExpectProxy;
        if (final_verdict || proxy) && holds(&rule.cond, cx) {
            return proxy;
        }
    }
    false
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
                crate::sample::parse_fmt(name, &rules.book)
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
        sets: rules.sets.clone(),
    })
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
        assert_eq!(first.groups[1][0].acls[0].current_patterns().len(), 2);
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
            c.rules.sets.http_request[0].action,
            Action::Return(Reply {
                status: 201,
                content_type: Some("text/plain".into()),
                body: b"hello".to_vec(),
                lf: None,
                hdrs: Vec::new(),
                raw: None,
                errorfiles: None,
                default_page: false,
            })
        );
        assert_eq!(
            c.rules.sets.http_request[1].action,
            Action::Deny {
                status: 429,
                reply: None
            }
        );
        assert_eq!(
            c.rules.sets.http_request[2].action,
            Action::SetHeader(
                "X-A".into(),
                crate::sample::parse_fmt("1", &PatternBook::default()).unwrap()
            )
        );
        assert!(conf(&["http-request frob"])
            .unwrap_err()
            .to_string()
            .contains("unknown action"));
        assert_eq!(
            conf(&["http-request auth realm Staff"])
                .unwrap()
                .rules
                .sets
                .http_request[0]
                .action,
            Action::Auth(Some("Staff".into()))
        );
        assert!(conf(&["http-response auth"]).is_err());
        assert!(conf(&["http-request redirect location / code 304"]).is_err());
        assert!(conf(&["http-request set-var(x) src"])
            .unwrap_err()
            .to_string()
            .contains("needs a scope"));
        assert!(conf(&["http-response set-status 503 reason Busy if { status 500 }"]).is_ok());
        assert!(conf(&["http-response return status 200"]).is_ok());
        assert!(conf(&["http-after-response return status 200"]).is_err());
        assert!(conf(&["http-request set-header X %[src]"]).is_ok());
        assert!(conf(&["http-request set-header X %ci"]).is_ok());
        assert!(conf(&["http-request set-header X %Tt"]).is_err());
        assert!(conf(&["http-request return string x"])
            .unwrap_err()
            .to_string()
            .contains("content-type"));
        assert!(conf(&["http-request return status 99"]).is_err());
    }
}
