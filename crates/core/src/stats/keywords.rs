//! The monitoring keywords: `monitor-uri`, `monitor fail`, and the statistics page's
//! `stats enable|uri|realm|auth|refresh|hide-version|show-legends|show-node|show-desc|scope|
//! admin`. Any of the page's keywords enables the page, as in HAProxy.

use sluice_config::{no_args, Keyword, KwError, Scope};

use crate::conf::stats::StatsRule;
use crate::conf::{one_arg, time_arg, ProxyConf};

/// The page's keywords, each enabling the page.
macro_rules! page_keyword {
    ($name:literal, $help:literal, |$c:ident, $a:ident| $body:expr) => {
        Keyword {
            name: $name,
            scope: Scope::PROXY,
            help: $help,
            parse: |$c, $a| {
                $c.stats.enabled = true;
                $body
            },
        }
    };
}

/// `node` and `description`: how this process is named and described where it reports.
pub const GLOBAL_KEYWORDS: &[Keyword<crate::conf::GlobalConf>] = &[
    Keyword {
        name: "node",
        scope: Scope::GLOBAL,
        help: "node NAME: this node's name in show info, the statistics page and checks' send-state (default: the host name)",
        parse: |g, a| {
            g.node = Some(one_arg(a, "a name")?.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "description",
        scope: Scope::GLOBAL,
        help: "description TEXT: this node's description in show info and the statistics page",
        parse: |g, a| {
            g.description = Some(text(a)?);
            Ok(())
        },
    },
];

/// A description's words, joined by spaces.
fn text(a: &[String]) -> Result<String, KwError> {
    if a.is_empty() {
        return Err(KwError::Missing("a description"));
    }
    Ok(a.join(" "))
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "description",
        scope: Scope::PROXY,
        help: "description TEXT: the proxy's description, beside its name on the statistics page",
        parse: |c, a| {
            c.stats.description = Some(text(a)?);
            Ok(())
        },
    },
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
            let cond = crate::acl::parse_cond(&c.rules, a, 1)?
                .ok_or(KwError::Missing("'if' or 'unless' and a condition"))?;
            c.monitor.fail = Some(cond);
            Ok(())
        },
    },
    page_keyword!(
        "stats enable",
        "stats enable: serve the statistics page",
        |c, a| no_args(a)
    ),
    page_keyword!(
        "stats uri",
        "stats uri PREFIX: where the page is served (/haproxy?stats)",
        |c, a| {
            let uri = one_arg(a, "a URI prefix")?;
            c.stats.uri = Some(uri.to_string());
            Ok(())
        }
    ),
    page_keyword!(
        "stats realm",
        "stats realm REALM: the basic-authentication realm",
        |c, a| {
            c.stats.realm = Some(one_arg(a, "a realm")?.to_string());
            Ok(())
        }
    ),
    page_keyword!(
        "stats auth",
        "stats auth USER:PASSWORD: a user allowed to see the page",
        |c, a| {
            let v = one_arg(a, "USER:PASSWORD")?;
            let (user, pass) = v
                .split_once(':')
                .ok_or_else(|| KwError::bad(1, v, "expects USER:PASSWORD"))?;
            c.stats.auth.push((user.to_string(), pass.to_string()));
            Ok(())
        }
    ),
    page_keyword!(
        "stats refresh",
        "stats refresh TIME: the page reloads itself this often",
        |c, a| {
            c.stats.refresh = Some(time_arg(a)?);
            Ok(())
        }
    ),
    page_keyword!(
        "stats hide-version",
        "stats hide-version: do not show the version",
        |c, a| no_args(a).map(|_| c.stats.hide_version = true)
    ),
    page_keyword!(
        "stats show-legends",
        "stats show-legends: explain the colours",
        |c, a| no_args(a).map(|_| c.stats.show_legends = true)
    ),
    page_keyword!(
        "stats show-node",
        "stats show-node [NAME]: show the node name",
        |c, a| {
            match a {
                [] => c.stats.show_node = Some(None),
                [n] => c.stats.show_node = Some(Some(n.clone())),
                [_, extra, ..] => return Err(KwError::Extra(extra.clone())),
            }
            Ok(())
        }
    ),
    page_keyword!(
        "stats show-desc",
        "stats show-desc [DESCRIPTION]: show a description",
        |c, a| {
            c.stats.show_desc = Some((!a.is_empty()).then(|| a.join(" ")));
            Ok(())
        }
    ),
    page_keyword!(
        "stats scope",
        "stats scope NAME: show only these proxies (repeatable)",
        |c, a| {
            c.stats.scope.push(one_arg(a, "a proxy name")?.to_string());
            Ok(())
        }
    ),
    page_keyword!(
        "stats http-request",
        "stats http-request allow|deny|auth [realm R] [if|unless COND]: who may see the page",
        |c, a| {
            let (rule, rest) = match a.first().map(String::as_str) {
                Some("allow") => (StatsRule::Allow, &a[1..]),
                Some("deny") => (StatsRule::Deny, &a[1..]),
                Some("auth") => match a.get(1).map(String::as_str) {
                    Some("realm") => {
                        let realm = a.get(2).ok_or(KwError::Missing("a realm after 'realm'"))?;
                        (StatsRule::Auth(Some(realm.clone())), &a[3..])
                    }
                    _ => (StatsRule::Auth(None), &a[1..]),
                },
                Some(other) => return Err(KwError::bad(1, other, "expects allow, deny or auth")),
                None => return Err(KwError::Missing("allow, deny or auth")),
            };
            let at = a.len() - rest.len() + 1;
            let cond = crate::acl::parse_cond(&c.rules, rest, at)?;
            c.stats.rules.push((rule, cond));
            Ok(())
        }
    ),
    page_keyword!(
        "stats admin",
        "stats admin if|unless COND: offer server actions when COND holds",
        |c, a| {
            let cond = crate::acl::parse_cond(&c.rules, a, 1)?
                .ok_or(KwError::Missing("'if' or 'unless' and a condition"))?;
            c.stats.admin = Some(cond);
            Ok(())
        }
    ),
];
