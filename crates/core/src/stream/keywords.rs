//! The data path's keywords: `mode`, the client-side timeouts, `timeout tarpit`,
//! `option forwardfor`, `option originalto`, `option http-buffer-request`,
//! `option http-server-close` / `option httpclose`, `tune.bufsize` and `tune.maxrewrite`.

use std::net::IpAddr;

use sluice_config::{no_args, units, Keyword, KwError, Scope};

pub use crate::conf::stream::*;
use crate::conf::{one_arg, one_of, time_arg, GlobalConf, ProxyConf};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "h1-case-adjust",
        scope: Scope::GLOBAL,
        help: "h1-case-adjust FROM TO: header name FROM (lower case) written TO to HTTP/1 peers where 'option h1-case-adjust-bogus-client|server' asks for it",
        parse: |g, a| match a {
            [from, to] => g
                .case_adjust
                .add(from, to)
                .map_err(|e| KwError::bad(2, to, e)),
            [_] | [] => Err(KwError::Missing("a lower-case header name and its spelling")),
            [_, _, extra, ..] => Err(KwError::Extra(extra.clone())),
        },
    },
    Keyword {
        name: "h1-case-adjust-file",
        scope: Scope::GLOBAL,
        help: "h1-case-adjust-file FILE: h1-case-adjust pairs, one per line ('#' comments); the last such line counts",
        parse: |g, a| {
            let path = one_arg(a, "a file")?;
            let text = std::fs::read_to_string(path)
                .map_err(|e| KwError::bad(1, path, format!("cannot read it: {e}")))?;
            let mut adjust = crate::conf::stream::CaseAdjust::default();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let pair: Vec<&str> = line.split_whitespace().collect();
                let [from, to] = pair[..] else {
                    return Err(KwError::bad(1, path, format!("line {}: expects two header names", n + 1)));
                };
                adjust
                    .add(from, to)
                    .map_err(|e| KwError::bad(1, path, format!("line {}: {e}", n + 1)))?;
            }
            g.case_adjust.file = adjust.names;
            Ok(())
        },
    },
    Keyword {
        name: "tune.http.maxhdr",
        scope: Scope::GLOBAL,
        help: "tune.http.maxhdr N: the lines a head may have, its first line included (default 101; more: 431 for a request, 502 for a response)",
        parse: |g, a| {
            let v = one_arg(a, "a number")?;
            let n = v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=32767).contains(n))
                .ok_or_else(|| KwError::bad(1, v, "expects a number from 1 to 32767"))?;
            g.maxhdr = Some(n);
            Ok(())
        },
    },
    Keyword {
        name: "tune.bufsize",
        scope: Scope::GLOBAL,
        help: "tune.bufsize SIZE: per-direction buffer size of a connection (default 16384)",
        parse: |g, a| {
            let v = one_arg(a, "a size")?;
            let n = units::parse_size(v).map_err(|e| KwError::bad(1, v, e))?;
            if !(1024..=1 << 26).contains(&n) {
                return Err(KwError::bad(1, v, "expects a size from 1024 to 64m"));
            }
            g.bufsize = n as usize;
            Ok(())
        },
    },
    Keyword {
        name: "tune.maxrewrite",
        scope: Scope::GLOBAL,
        help: "tune.maxrewrite SIZE: room kept in a buffer for rewriting a head (default 1024, at most half of tune.bufsize)",
        parse: |g, a| {
            let v = one_arg(a, "a size")?;
            g.maxrewrite = units::parse_size(v).map_err(|e| KwError::bad(1, v, e))? as usize;
            Ok(())
        },
    },
];

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "mode",
        scope: Scope::PROXY,
        help: "mode http|tcp: the proxy's protocol",
        parse: |c, a| {
            c.stream.mode = one_of(a, "http or tcp", &[("http", Mode::Http), ("tcp", Mode::Tcp)])?;
            Ok(())
        },
    },
    Keyword {
        name: "timeout client",
        scope: Scope::FE,
        help: "timeout client TIME: maximum inactivity time on the client side",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_client = Some(t)),
    },
    Keyword {
        name: "timeout http-request",
        scope: Scope::FE,
        help: "timeout http-request TIME: maximum time to receive a complete request head",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_http_request = Some(t)),
    },
    Keyword {
        name: "timeout http-keep-alive",
        scope: Scope::FE,
        help: "timeout http-keep-alive TIME: maximum wait for the next request on a kept-alive connection",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_keep_alive = Some(t)),
    },
    Keyword {
        name: "timeout client-fin",
        scope: Scope::FE,
        help: "timeout client-fin TIME: inactivity limit on the client side once the server side has closed",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_client_fin = Some(t)),
    },
    Keyword {
        name: "option forwardfor",
        scope: Scope::PROXY,
        help: "option forwardfor [except NET] [header NAME] [if-none]: add the client address",
        parse: |c, a| parse_forwardfor(a).map(|f| c.stream.forwardfor = Some(f)),
    },
    Keyword {
        name: "option http-restrict-req-hdr-names",
        scope: Scope::PROXY,
        help: "option http-restrict-req-hdr-names preserve|delete|reject: request fields whose names hold other characters than letters, digits and '-' are kept, removed, or get the request denied (403), after the proxy's http-request rules",
        parse: |c, a| {
            use crate::conf::stream::RestrictNames;
            let choices = [
                ("preserve", RestrictNames::Preserve),
                ("delete", RestrictNames::Delete),
                ("reject", RestrictNames::Reject),
            ];
            c.stream.restrict_names = one_of(a, "preserve, delete or reject", &choices)?;
            Ok(())
        },
    },
    Keyword {
        name: "no option forwardfor",
        scope: Scope::PROXY,
        help: "no option forwardfor: cancel an inherited option forwardfor",
        parse: |c, a| no_args(a).map(|_| c.stream.forwardfor = None),
    },
    Keyword {
        name: "option originalto",
        scope: Scope::PROXY,
        help: "option originalto [except NET] [header NAME]: add the address the client connected to (X-Original-To)",
        parse: |c, a| {
            if let Some(i) = a.iter().position(|x| x == "if-none") {
                return Err(KwError::bad(i + 1, "if-none", "expects except or header"));
            }
            let mut f = parse_forwardfor(a)?;
            if !a.iter().any(|x| x == "header") {
                f.header = "x-original-to".into();
            }
            c.stream.originalto = Some(f);
            Ok(())
        },
    },
    Keyword {
        name: "no option originalto",
        scope: Scope::PROXY,
        help: "no option originalto: cancel an inherited option originalto",
        parse: |c, a| no_args(a).map(|_| c.stream.originalto = None),
    },
    Keyword {
        name: "http-send-name-header",
        scope: Scope::BE,
        help: "http-send-name-header NAME: the server a request goes to named in this header (any the client sent removed)",
        parse: |c, a| {
            let name = one_arg(a, "a header name")?;
            c.stream.send_name_header = Some(name.to_ascii_lowercase());
            Ok(())
        },
    },
    Keyword {
        name: "timeout tarpit",
        scope: Scope::PROXY,
        help: "timeout tarpit TIME: how long 'http-request tarpit' holds a request (default: timeout connect)",
        parse: |c, a| time_arg(a).map(|t| c.stream.timeout_tarpit = Some(t)),
    },
];

/// Connection-closing options (`NAME` and `no NAME`).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option http-server-close", Scope::PROXY, "close the server connection after each response",
        |c: &mut ProxyConf, on| c.stream.close_mode = if on { CloseMode::ServerClose } else { CloseMode::KeepAlive };
    "option httpclose", Scope::PROXY, "close both connections after each response",
        |c: &mut ProxyConf, on| c.stream.close_mode = if on { CloseMode::Close } else { CloseMode::KeepAlive };
    "option http-keep-alive", Scope::PROXY, "keep both connections open between requests (the default)",
        |c: &mut ProxyConf, on| if on { c.stream.close_mode = CloseMode::KeepAlive };
    "option http-buffer-request", Scope::PROXY, "wait for the request body before the rules run (req.body)",
        |c: &mut ProxyConf, on| c.stream.buffer_request = on;
    "option http-pretend-keepalive", Scope::BE, "with http-server-close or httpclose, requests do not tell the server the connection closes after the response (it still does)",
        |c: &mut ProxyConf, on| c.stream.pretend_keepalive = on;
    "option h1-case-adjust-bogus-client", Scope::FE, "responses to HTTP/1 clients spell header names as h1-case-adjust says",
        |c: &mut ProxyConf, on| c.stream.case_adjust_client = on;
    "option h1-case-adjust-bogus-server", Scope::BE, "requests to HTTP/1 servers spell header names as h1-case-adjust says",
        |c: &mut ProxyConf, on| c.stream.case_adjust_server = on;
    "option independent-streams", Scope::PROXY, "a tunnel's side is inactive while it sends nothing, whatever is written to it (its timeout no longer refreshed by writes)",
        |c: &mut ProxyConf, on| c.stream.independent = on;
    "option contstats", Scope::FE, "count a TCP stream's bytes in the statistics as they move, not when it ends",
        |c: &mut ProxyConf, on| c.stream.contstats = on;
    "option accept-invalid-http-request", Scope::FE, "accept the requests HAProxy accepts and sluice refuses: both Content-Length and Transfer-Encoding (read as chunked), HTTP/1.1 without Host, userinfo in an absolute URI",
        |c: &mut ProxyConf, on| c.stream.accept_invalid_request = on;
    "option accept-invalid-http-response", Scope::BE, "accept server responses whose field names hold characters outside RFC 9110's tokens, or whose version has several digits (HTTP/1.10), as HAProxy does; each is kept for 'show errors'",
        |c: &mut ProxyConf, on| c.stream.accept_invalid_response = on;
    "option nolinger", Scope::PROXY, "end connections with a reset rather than a FIN (client ones in a frontend, server ones in a backend), nothing left lingering",
        |c: &mut ProxyConf, on| c.stream.nolinger = on;
    "option disable-h2-upgrade", Scope::FE, "refuse a client that opens an HTTP/1 connection with HTTP/2's preface (by default it is served as HTTP/2, as HAProxy does)",
        |c: &mut ProxyConf, on| c.stream.disable_h2_upgrade = on;
    "option http-use-proxy-header", Scope::FE, "a request for a proxy (its target an absolute URI or a CONNECT authority) carries credentials in Proxy-Authorization, and 'http-request auth' answers 407 with Proxy-Authenticate",
        |c: &mut ProxyConf, on| c.stream.use_proxy_header = on;
    "option idle-close-on-response", Scope::FE, "at a soft stop, an HTTP/1 connection idle between requests is kept until its next request, answered with 'Connection: close' (sluice's default, so a reload loses no request; 'no option idle-close-on-response' closes it at once, HAProxy 2.6's default)",
        |c: &mut ProxyConf, on: bool| c.stream.close_idle_at_stop = !on;
];

fn parse_forwardfor(args: &[String]) -> Result<ForwardFor, KwError> {
    let mut f = ForwardFor {
        header: "x-forwarded-for".into(),
        except: None,
        if_none: false,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "if-none" => f.if_none = true,
            kw @ ("except" | "header") => {
                let v = args
                    .get(i + 1)
                    .ok_or(KwError::Missing("a value after except/header"))?;
                if kw == "except" {
                    f.except = Some(parse_net(v).map_err(|e| KwError::bad(i + 2, v, e))?);
                } else {
                    f.header = v.to_ascii_lowercase();
                }
                i += 1;
            }
            other => {
                return Err(KwError::bad(
                    i + 1,
                    other,
                    "expects except, header or if-none",
                ))
            }
        }
        i += 1;
    }
    Ok(f)
}

fn parse_net(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| "expects an address or network (a.b.c.d/len)".to_string())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or("invalid prefix length")?,
        None => max,
    };
    Ok((ip, len))
}

pub fn in_net(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    let mask = |bits: u32, len: u8| {
        if len == 0 {
            0
        } else {
            u128::MAX << (bits - u32::from(len))
        }
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = mask(32, len) as u32;
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = mask(128, len);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let net = parse_net("10.0.0.0/8").unwrap();
        assert!(in_net("10.1.2.3".parse().unwrap(), net));
        assert!(!in_net("11.1.2.3".parse().unwrap(), net));
        assert!(in_net("::1".parse().unwrap(), parse_net("::1").unwrap()));
        assert!(in_net(
            "1.2.3.4".parse().unwrap(),
            parse_net("0.0.0.0/0").unwrap()
        ));
        assert!(parse_net("10.0.0.0/33").is_err());
        assert!(parse_net("nope").is_err());
    }

    #[test]
    fn forwardfor_options() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let f = parse_forwardfor(&w("except 127.0.0.0/8 header X-Client if-none")).unwrap();
        assert_eq!(f.header, "x-client");
        assert!(f.if_none);
        assert!(parse_forwardfor(&w("frob")).is_err());
        assert!(parse_forwardfor(&w("except")).is_err());
    }
}
