//! Custom error responses: `errorfile CODE FILE` (a complete HTTP response in a file, as
//! HAProxy's errorfiles are) and `http-error status CODE [content-type T] [string S | file F]`.
//! They replace the built-in pages of `sluice_http::error_page`; a backend's pages win over
//! its frontend's once a request has been routed to it.

use sluice_config::{Keyword, KwError, Scope};
use sluice_http::Answer;

pub use crate::conf::errorpages::{ErrorPages, Page};
use crate::conf::patterns::PatternBook;
pub use crate::conf::rules::Reply;
use crate::conf::rules::{Action, RuleSets};
use crate::conf::Loc;
use crate::conf::ProxyConf;
use crate::sample::Fmt;

/// Status codes whose pages may be replaced (those the proxy itself produces).
const CODES: [u16; 18] = [
    200, 400, 401, 403, 404, 405, 407, 408, 410, 413, 414, 421, 422, 425, 429, 431, 500, 501,
];
const CODES_5XX: [u16; 4] = [502, 503, 504, 505];

fn status_arg(v: &str, index: usize) -> Result<u16, KwError> {
    v.parse::<u16>()
        .ok()
        .filter(|s| CODES.contains(s) || CODES_5XX.contains(s))
        .ok_or_else(|| {
            KwError::bad(
                index,
                v,
                "expects a status HAProxy has a page for (200, 400, 401, 403-405, 407, 408, 410, 413, 414, 421, 422, 425, 429, 431, 500-505)",
            )
        })
}

/// The answer an error file stands for, which ends its connection cleanly: it is sent
/// before closing. A file without Content-Length (Debian's stock errorfiles have none: their
/// body runs to the close) gets one for its body, so that the client knows where the page
/// ends either way. An empty file (`/dev/null`) is the silent answer of `status`: the
/// connection closes without an answer.
fn errorfile_answer(text: &[u8], status: u16) -> Result<Answer, String> {
    let mut page =
        Answer::parse(text, status).map_err(|e| format!("not a valid HTTP response: {e}"))?;
    if page.silent || page.header("content-length").is_some() {
        return Ok(page);
    }
    if page.header("transfer-encoding").is_some() {
        return Err("a chunked error response is not supported (give it a Content-Length)".into());
    }
    let length = page.body.len().to_string();
    page.push(b"content-length", length.as_bytes());
    Ok(page)
}

/// An error file as it is sent (`errorfile` of a rule's answer, whose status is `status`).
pub(crate) fn load_errorfile(path: &str, status: u16) -> Result<Answer, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read file: {e}"))?;
    errorfile_answer(&bytes, status)
}

/// `errorloc CODE URL`: the error's page is a redirect (`redirect` status 302 or 303) to
/// the URL, as HAProxy sends it.
fn errorloc(c: &mut ProxyConf, a: &[String], redirect: u16) -> Result<(), KwError> {
    let [code, url] = a else {
        return Err(KwError::Missing("a status code and a URL"));
    };
    let status = status_arg(code, 1)?;
    if url.bytes().any(|b| b <= b' ') {
        return Err(KwError::bad(
            2,
            url,
            "a URL has no spaces or control characters",
        ));
    }
    let mut page = Answer::with_body(redirect, Vec::new());
    page.push(b"location", url.as_bytes());
    page.push(b"cache-control", b"no-cache");
    page.push(b"connection", b"close");
    c.errors.set(status, Page::Static(page.into()));
    Ok(())
}

/// `errorfile CODE FILE` (in a proxy or an `http-errors` section): the page to send.
pub fn parse_errorfile(a: &[String]) -> Result<(u16, Answer), KwError> {
    let [code, file] = a else {
        return Err(KwError::Missing("a status code and a file"));
    };
    let status = status_arg(code, 1)?;
    let bytes =
        std::fs::read(file).map_err(|e| KwError::bad(2, file, format!("cannot read file: {e}")))?;
    let page = errorfile_answer(&bytes, status).map_err(|e| KwError::bad(2, file, e))?;
    Ok((status, page))
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "errorfile",
        scope: Scope::PROXY,
        help: "errorfile CODE FILE: send FILE (a complete HTTP response) instead of the built-in CODE page",
        parse: |c, a| {
            let (status, bytes) = parse_errorfile(a)?;
            c.errors.set(status, Page::Static(bytes.into()));
            Ok(())
        },
    },
    Keyword {
        name: "errorloc",
        scope: Scope::PROXY,
        help: "errorloc CODE URL: answer CODE with a redirect to URL (302; errorloc303: 303)",
        parse: |c, a| errorloc(c, a, 302),
    },
    Keyword {
        name: "errorloc302",
        scope: Scope::PROXY,
        help: "errorloc302 CODE URL: answer CODE with a 302 redirect to URL",
        parse: |c, a| errorloc(c, a, 302),
    },
    Keyword {
        name: "errorloc303",
        scope: Scope::PROXY,
        help: "errorloc303 CODE URL: answer CODE with a 303 redirect to URL",
        parse: |c, a| errorloc(c, a, 303),
    },
    Keyword {
        name: "errorfiles",
        scope: Scope::PROXY,
        help: "errorfiles NAME [CODE...]: the pages of http-errors section NAME (all, or these codes)",
        parse: |c, a| {
            let [name, codes @ ..] = a else {
                return Err(KwError::Missing("the name of an http-errors section"));
            };
            let codes = codes
                .iter()
                .enumerate()
                .map(|(i, code)| status_arg(code, i + 2))
                .collect::<Result<Vec<_>, _>>()?;
            let at = c.at.clone();
            c.errors.use_set(name.clone(), codes, at);
            Ok(())
        },
    },
    Keyword {
        name: "http-error",
        scope: Scope::PROXY,
        help: "http-error status CODE [content-type T] [string S | lf-string F | file F | lf-file F | errorfile F] [hdr NAME FMT]...: replace a built-in error page",
        parse: |c, a| {
            let [kw, code, rest @ ..] = a else {
                return Err(KwError::Missing("status CODE"));
            };
            if kw != "status" {
                return Err(KwError::bad(1, kw, "expects 'status'"));
            }
            let status = status_arg(code, 2)?;
            // The answer as `return` writes it; an `errorfile` is the page as it is, and
            // `errorfiles NAME` that section's page for the status.
            let (reply, _) = parse_reply(rest, status, &c.at, &c.rules.book).map_err(|e| e.shifted(2))?;
            if let Some((name, at)) = reply.errorfiles {
                c.errors.use_set(name, vec![status], at);
                return Ok(());
            }
            let page = match reply.raw {
                Some(raw) => Page::Static(raw.into()),
                None => Page::Reply(Reply { status, ..reply }.into()),
            };
            c.errors.set(status, page);
            Ok(())
        },
    },
];

/// A log-format value of a rule (`%[...]` samples allowed).
pub(crate) fn fmt_arg(v: &str, index: usize, book: &PatternBook) -> Result<Fmt, KwError> {
    crate::sample::parse_fmt(v, book).map_err(|e| KwError::bad(index, v, e.0))
}

/// A header value: a log-format value without control characters.
pub(crate) fn header_value(v: &str, index: usize, book: &PatternBook) -> Result<Fmt, KwError> {
    if v.bytes().any(|b| b < 0x20 && b != b'\t') {
        return Err(KwError::bad(
            index,
            v,
            "control characters are not allowed in a header value",
        ));
    }
    fmt_arg(v, index, book)
}

pub(crate) fn check_name(name: &str, index: usize) -> Result<(), KwError> {
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

/// Gives each rule answer naming `errorfiles NAME` the page that section has for its
/// status (the built-in page when it has none); an unknown section is an error at the
/// rule's line.
pub fn resolve_rule_pages(
    sets: &mut RuleSets,
    sections: &crate::conf::errorpages::ErrorSets,
) -> Result<(), (Loc, String)> {
    let lists = [
        &mut sets.http_request,
        &mut sets.http_response,
        &mut sets.http_after_response,
    ];
    for rule in lists.into_iter().flatten() {
        let reply = match &mut rule.action {
            Action::Return(r) => r,
            Action::Deny { reply: Some(r), .. } | Action::Tarpit { reply: Some(r), .. } => r,
            _ => continue,
        };
        let Some((name, at)) = reply.errorfiles.take() else {
            continue;
        };
        let Some(pages) = sections.get(&name) else {
            return Err((at, format!("no http-errors section named '{name}'")));
        };
        let page = pages.iter().rev().find(|(s, _)| *s == reply.status);
        match page.map(|(_, p)| p) {
            Some(Page::Static(page)) => reply.raw = Some(Answer::clone(page)),
            Some(Page::Reply(r)) => {
                *reply = Reply {
                    status: reply.status,
                    ..Reply::clone(r)
                }
            }
            None => reply.raw = Some(sluice_http::error_page(reply.status)),
        }
    }
    Ok(())
}

/// The answer of `return`, `deny` and `tarpit`: `[status|deny_status N] [content-type T]
/// [string S | lf-string F | file F | lf-file F | errorfile F | default-errorfiles]
/// [hdr NAME FMT]...`. `custom`: a payload, a content type or a header was given (a
/// `deny` without one sends the error page of its status).
pub(crate) fn parse_reply(
    params: &[String],
    status: u16,
    at: &Loc,
    book: &PatternBook,
) -> Result<(Reply, bool), KwError> {
    let mut r = Reply {
        status,
        content_type: None,
        body: Vec::new(),
        lf: None,
        hdrs: Vec::new(),
        raw: None,
        errorfiles: None,
        default_page: false,
    };
    let mut custom = false;
    let mut i = 0;
    while i < params.len() {
        let idx = i + 2;
        if params[i] == "default-errorfiles" {
            r.default_page = true;
            custom = true;
            i += 1;
            continue;
        }
        let arg = params
            .get(i + 1)
            .ok_or_else(|| KwError::Invalid(format!("'{}' expects a value", params[i])))?;
        let read = |path: &str| {
            std::fs::read(path)
                .map_err(|e| KwError::bad(idx + 1, path, format!("cannot read file: {e}")))
        };
        match params[i].as_str() {
            "status" | "deny_status" => r.status = parse_status(arg, idx + 1)?,
            "content-type" => r.content_type = Some(arg.clone()),
            "string" => r.body = arg.clone().into_bytes(),
            "lf-string" => r.lf = Some(fmt_arg(arg, idx + 1, book)?),
            "file" => r.body = read(arg)?,
            "lf-file" => {
                let text = String::from_utf8(read(arg)?)
                    .map_err(|_| KwError::bad(idx + 1, arg, "not UTF-8 text"))?;
                r.lf = Some(fmt_arg(&text, idx + 1, book)?);
            }
            "errorfile" => {
                let page = crate::errorpages::load_errorfile(arg, r.status)
                    .map_err(|e| KwError::bad(idx + 1, arg, e))?;
                r.raw = Some(page);
            }
            "hdr" => {
                let value = params
                    .get(i + 2)
                    .ok_or(KwError::Missing("a header name and a value after 'hdr'"))?;
                check_name(arg, idx + 1)?;
                r.hdrs.push((arg.clone(), header_value(value, idx + 2, book)?));
                i += 1;
            }
            "errorfiles" => r.errorfiles = Some((arg.clone(), at.clone())),
            other => return Err(KwError::bad(
                idx,
                other,
                "expects status, content-type, string, lf-string, file, lf-file, errorfile, errorfiles or hdr",
            )),
        }
        custom |= params[i] != "status" && params[i] != "deny_status";
        i += 2;
    }
    let has_body = !r.body.is_empty() || r.lf.is_some();
    if has_body && r.content_type.is_none() {
        return Err(KwError::Invalid(
            "an answer with a body needs a content-type".into(),
        ));
    }
    Ok((r, custom))
}
