//! The monitoring keywords: `monitor-uri` and `monitor fail`.

use sluice_config::{Keyword, KwError, Scope};

use crate::conf::{one_arg, ProxyConf};

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "monitor-uri",
        scope: Scope::FE,
        help: "monitor-uri URI: answer requests for URI with 200 (503 under 'monitor fail')",
        parse: |c, a| {
            let uri = one_arg(a, "a URI")?;
            if !uri.starts_with('/') && !uri.contains("://") {
                return Err(KwError::bad(1, uri, "expects a path or an absolute URI"));
            }
            c.monitor.uri = Some(uri.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "monitor fail",
        scope: Scope::FE,
        help: "monitor fail if|unless COND: the monitor URI answers 503 while COND holds",
        parse: |c, a| {
            let cond = crate::rules::parse_cond(&c.rules, a, 1)?
                .ok_or(KwError::Missing("'if' or 'unless' and a condition"))?;
            c.monitor.fail = Some(cond);
            Ok(())
        },
    },
];
