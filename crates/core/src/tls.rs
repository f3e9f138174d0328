//! TLS: for now the `global` keywords that set the defaults of `ssl` binds and servers
//! (`ca-base`, `crt-base`, `ssl-default-bind-*`, `ssl-default-server-*`).
//!
//! These only give defaults to `bind ... ssl` and `server ... ssl`, which are refused with
//! "not supported yet" until TLS exists, so accepting them changes nothing a configuration
//! asks for; they are checked (options by name) and kept for then.

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::tls::{TlsDefaults, TlsSide};
use crate::conf::{one_arg, GlobalConf};

/// The `ssl-default-*-options` words HAProxy knows; `ssl-min-ver`/`ssl-max-ver` take a
/// version.
const OPTIONS: &[&str] = &[
    "no-sslv3",
    "no-tlsv10",
    "no-tlsv11",
    "no-tlsv12",
    "no-tlsv13",
    "force-sslv3",
    "force-tlsv10",
    "force-tlsv11",
    "force-tlsv12",
    "force-tlsv13",
    "no-tls-tickets",
    "prefer-client-ciphers",
    "strict-sni",
    "allow-0rtt",
];
const VERSIONS: &[&str] = &["SSLv3", "TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3"];

fn options(args: &[String]) -> Result<Vec<String>, KwError> {
    if args.is_empty() {
        return Err(KwError::Missing("at least one option"));
    }
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "ssl-min-ver" | "ssl-max-ver" => {
                let v = args.get(i + 1).ok_or(KwError::Missing(
                    "a TLS version after ssl-min-ver/ssl-max-ver",
                ))?;
                if !VERSIONS.contains(&v.as_str()) {
                    return Err(KwError::bad(
                        i + 2,
                        v,
                        "expects SSLv3, TLSv1.0, TLSv1.1, TLSv1.2 or TLSv1.3",
                    ));
                }
                i += 2;
            }
            o if OPTIONS.contains(&o) => i += 1,
            o => return Err(KwError::bad(i + 1, o, "unknown TLS option")),
        }
    }
    Ok(args.to_vec())
}

fn side(g: &mut GlobalConf, server: bool) -> &mut TlsSide {
    if server {
        &mut g.tls.server
    } else {
        &mut g.tls.bind
    }
}

macro_rules! side_keywords {
    ($($side:literal => $server:expr),*) => {
        &[
            Keyword {
                name: "ca-base",
                scope: Scope::GLOBAL,
                help: "ca-base DIR: where relative ca-file paths start (for ssl binds and servers)",
                parse: |g, a| one_arg(a, "a directory").map(|d| g.tls.ca_base = Some(d.to_string())),
            },
            Keyword {
                name: "crt-base",
                scope: Scope::GLOBAL,
                help: "crt-base DIR: where relative crt paths start (for ssl binds and servers)",
                parse: |g, a| one_arg(a, "a directory").map(|d| g.tls.crt_base = Some(d.to_string())),
            },
            $(
                Keyword {
                    name: concat!("ssl-default-", $side, "-ciphers"),
                    scope: Scope::GLOBAL,
                    help: concat!("ssl-default-", $side, "-ciphers LIST: default TLS 1.2 ciphers of ssl ", $side, "s"),
                    parse: |g, a| one_arg(a, "a cipher list").map(|v| side(g, $server).ciphers = Some(v.to_string())),
                },
                Keyword {
                    name: concat!("ssl-default-", $side, "-ciphersuites"),
                    scope: Scope::GLOBAL,
                    help: concat!("ssl-default-", $side, "-ciphersuites LIST: default TLS 1.3 suites of ssl ", $side, "s"),
                    parse: |g, a| one_arg(a, "a cipher suite list").map(|v| side(g, $server).ciphersuites = Some(v.to_string())),
                },
                Keyword {
                    name: concat!("ssl-default-", $side, "-options"),
                    scope: Scope::GLOBAL,
                    help: concat!("ssl-default-", $side, "-options OPTION...: default TLS options of ssl ", $side, "s"),
                    parse: |g, a| options(a).map(|o| side(g, $server).options = o),
                },
            )*
        ]
    };
}

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] =
    side_keywords!["bind" => false, "server" => true];

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_are_checked() {
        assert!(options(&w("ssl-min-ver TLSv1.2 no-tls-tickets")).is_ok());
        assert!(options(&w("ssl-min-ver TLSv9")).is_err());
        assert!(options(&w("no-such-option")).is_err());
        assert!(options(&w("ssl-min-ver")).is_err());
    }
}
