//! TLS with rustls (ring; key exchange and signatures from aws-lc-rs with the `aws-lc`
//! feature, which the sluice binary turns on by default), on both sides:
//! - `bind ... ssl` and its options (`crt`, `crt-list`, `alpn`, `ssl-min-ver`,
//!   `ssl-max-ver`, `ciphers`, `ciphersuites`, `curves`, `strict-sni`, `no-tls-tickets`,
//!   `ca-file`, `verify`), certificate loading and the choice of a certificate by SNI, and
//!   the CLI's `set/commit/abort/show ssl cert`;
//! - `server ... ssl` and its options (`verify`, `ca-file`, `sni`, `alpn`, `check-ssl`);
//! - the `global` defaults of both (`ca-base`, `crt-base`, `ssl-default-bind-*`,
//!   `ssl-default-server-*`, `ssl-server-verify`, `issuers-chain-path`,
//!   `ssl-skip-self-issued-ca`, `tune.ssl.*`). `x509` reads certificates' names.
//!
//! Invariants:
//! - Only TLS 1.2 and 1.3 with AEAD suites exist (rustls has nothing older or weaker); no
//!   renegotiation, no compression.
//! - A name in `ciphers`, `ciphersuites` or `curves` that rustls does not implement is
//!   skipped with a warning naming it, as OpenSSL skips it (`lists`); a list with nothing
//!   usable is a configuration error.
//! - The certificate for a connection: the one whose names match the SNI exactly, else by a
//!   wildcard, else the first certificate of the line (unless `strict-sni`); among several
//!   for the same name, the first whose key the client can verify (ECDSA or RSA).

pub mod hello;
pub mod keylog;
mod lists;
mod sigalgs;
use lists::SUITES;
pub mod x509;

use std::sync::Arc;

/// Where key exchange and signing come from: ring, or aws-lc-rs with the `aws-lc` feature
/// (its X25519 and P-256 are faster; ring keeps the rest, whose HKDF is faster: all from
/// aws-lc-rs, a full handshake costs about 2 % more CPU than this mix).
#[cfg(feature = "aws-lc")]
use rustls::crypto::aws_lc_rs as asym;
use rustls::crypto::ring as provider;
#[cfg(not(feature = "aws-lc"))]
use rustls::crypto::ring as asym;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::tls::{
    Acceptor, BindTls, CertSlot, CertStore, Connector, ServerTlsOpts, SideOptions, TlsDefaults,
    TlsSide, TlsVersion, Verify, Versions,
};
use crate::conf::{one_arg, GlobalConf};

/// The crypto in this build, as `-vv` reports it.
pub const PROVIDER: &str = if cfg!(feature = "aws-lc") {
    "aws-lc-rs (key exchange, signatures) and ring (the rest)"
} else {
    "ring"
};

const VERSION_WORDS: &str = "expects SSLv3, TLSv1.0, TLSv1.1, TLSv1.2 or TLSv1.3";

/// A version word (`TLSv1.2`), at argument `at` of the line.
fn version_at(word: &str, at: usize) -> Result<TlsVersion, KwError> {
    TlsVersion::parse(word).ok_or_else(|| KwError::bad(at, word, VERSION_WORDS))
}

/// The `ssl-default-*-options` words, read: `ssl-min-ver`/`ssl-max-ver` take a version;
/// `allow-0rtt` is each bind line's, which QUIC listeners take and TCP ones pass over
/// (sluice reads no early data over TCP).
fn options(args: &[String]) -> Result<SideOptions, KwError> {
    if args.is_empty() {
        return Err(KwError::Missing("at least one option"));
    }
    let mut o = SideOptions::default();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            w @ ("ssl-min-ver" | "ssl-max-ver") => {
                let v = args.get(i + 1).ok_or(KwError::Missing(
                    "a TLS version after ssl-min-ver/ssl-max-ver",
                ))?;
                let v = version_at(v, i + 2)?;
                if w == "ssl-min-ver" {
                    o.versions.min = Some(v);
                } else {
                    o.versions.max = Some(v);
                }
                i += 1;
            }
            "no-tls-tickets" => o.no_tickets = true,
            "prefer-client-ciphers" => o.prefer_client = true,
            "strict-sni" => o.strict_sni = true,
            "allow-0rtt" => o.allow_0rtt = true,
            w if o.versions.take_option(w) => {}
            w => return Err(KwError::bad(i + 1, w, "unknown TLS option")),
        }
        i += 1;
    }
    Ok(o)
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
                    name: concat!("ssl-default-", $side, "-curves"),
                    scope: Scope::GLOBAL,
                    help: concat!("ssl-default-", $side, "-curves LIST: default key exchange groups of ssl ", $side, "s (X25519:P-256:P-384)"),
                    parse: |g, a| {
                        let v = one_arg(a, "a list of curves")?;
                        lists::groups(v).map_err(|e| KwError::bad(1, v, &e))?;
                        side(g, $server).curves = Some(v.to_string());
                        Ok(())
                    },
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

/// Global keywords of certificates and of TLS towards servers.
pub const CHAIN_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "ssl-default-bind-sigalgs",
        scope: Scope::GLOBAL,
        help: "ssl-default-bind-sigalgs LIST: default 'sigalgs' of ssl binds (RSA-PSS+SHA256:ECDSA+SHA256:...)",
        parse: |g, a| {
            let v = one_arg(a, "a list of signature algorithms")?;
            lists::sigalgs(v).map_err(|e| KwError::bad(1, v, &e))?;
            g.tls.bind.sigalgs = Some(v.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "ssl-default-bind-client-sigalgs",
        scope: Scope::GLOBAL,
        help: "ssl-default-bind-client-sigalgs LIST: default 'client-sigalgs' of ssl binds",
        parse: |g, a| {
            let v = one_arg(a, "a list of signature algorithms")?;
            lists::sigalgs(v).map_err(|e| KwError::bad(1, v, &e))?;
            g.tls.bind.client_sigalgs = Some(v.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "ssl-server-verify",
        scope: Scope::GLOBAL,
        help: "ssl-server-verify none|required: whether servers' certificates are verified when their line says nothing (default required)",
        parse: |g, a| match Verify::parse(one_arg(a, "none or required")?) {
            Some(v @ (Verify::None | Verify::Required)) => {
                g.tls.server_verify = Some(v);
                Ok(())
            }
            _ => Err(KwError::bad(1, &a[0], "expects none or required")),
        },
    },
    Keyword {
        name: "issuers-chain-path",
        scope: Scope::GLOBAL,
        help: "issuers-chain-path DIR: PEM chains that complete certificates whose file has no intermediates",
        parse: |g, a| {
            let dir = one_arg(a, "a directory")?;
            x509::ChainRules::default()
                .with_issuers_from(dir)
                .map_err(|e| KwError::bad(1, dir, &e))?;
            g.tls.issuers_chain_path = Some(dir.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "ssl-skip-self-issued-ca",
        scope: Scope::GLOBAL,
        help: "ssl-skip-self-issued-ca: roots found in a certificate's chain are not sent to clients",
        parse: |g, a| {
            sluice_config::no_args(a)?;
            g.tls.skip_self_issued_ca = true;
            Ok(())
        },
    },
    Keyword {
        name: "ssl-dh-param-file",
        scope: Scope::GLOBAL,
        help: "ssl-dh-param-file FILE: accepted; rustls has no finite-field Diffie-Hellman",
        parse: |g, a| {
            one_arg(a, "a file")?;
            g.tls.inert.push("ssl-dh-param-file".into());
            Ok(())
        },
    },
];

/// OpenSSL's own machinery, which has no counterpart here: refused with the reason, since
/// an operator who relies on an engine (a hardware key, say) must know it is not used.
macro_rules! openssl_only {
    ($($name:literal),*) => {
        &[$(Keyword {
            name: $name,
            scope: Scope::GLOBAL,
            help: "OpenSSL only: sluice's TLS is rustls",
            parse: |_, _| Err(KwError::Invalid(
                "OpenSSL engines, providers and async mode do not exist in sluice, whose TLS is rustls with aws-lc-rs and ring built in; remove the line".into(),
            )),
        },)*]
    };
}

pub const OPENSSL_ONLY_KEYWORDS: &[Keyword<GlobalConf>] = openssl_only![
    "ssl-engine",
    "ssl-mode-async",
    "ssl-provider",
    "ssl-provider-path",
    "ssl-propquery"
];

/// The plaintext a TLS record carries at most, and the least rustls lets it be limited to
/// (its `max_fragment_size` counts the 5-byte record header besides).
const MAX_RECORD: usize = 16_384;
const MIN_RECORD: usize = 27;
const RECORD_HEADER: usize = 5;

/// A record size setting: `None` for 0 (no limit) or a full record.
fn record_limit(a: &[String]) -> Result<Option<usize>, KwError> {
    let v = one_arg(a, "a number of bytes")?;
    let n: usize = v
        .parse()
        .map_err(|_| KwError::bad(1, v, "expects a number"))?;
    if n != 0 && n < MIN_RECORD {
        return Err(KwError::bad(
            1,
            v,
            "rustls's smallest record carries 27 bytes (0: no limit)",
        ));
    }
    Ok((n != 0 && n < MAX_RECORD).then_some(n))
}

/// `tune.ssl.capture-buffer-size N` (and its former name): once only, as in HAProxy.
fn capture_buffer(g: &mut GlobalConf, a: &[String]) -> Result<(), KwError> {
    let v = one_arg(a, "a number of bytes")?;
    let n: usize = v
        .parse()
        .map_err(|_| KwError::bad(1, v, "expects a number of bytes"))?;
    if g.tls.capture_buffer != 0 {
        return Err(KwError::Invalid(
            "the capture buffer is already configured".into(),
        ));
    }
    g.tls.capture_buffer = n;
    Ok(())
}

/// `tune.ssl.*` keywords.
pub const TUNE_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "tune.ssl.keylog",
        scope: Scope::GLOBAL,
        help: "tune.ssl.keylog on|off: keep each client session's TLS secrets for the ssl_fc_*_secret, ssl_fc_client_random and ssl_fc_session_key fetches (default off)",
        parse: |g, a| {
            g.tls.keylog = crate::conf::one_of(a, "on or off", &[("on", true), ("off", false)])?;
            Ok(())
        },
    },
    Keyword {
        name: "tune.ssl.cachesize",
        scope: Scope::GLOBAL,
        help: "tune.ssl.cachesize N: TLS sessions kept per ssl bind for resumption by id (default 20000; 0: none)",
        parse: |g, a| {
            let v = one_arg(a, "a number of sessions")?;
            g.tls.cachesize = Some(v.parse().map_err(|_| KwError::bad(1, v, "expects a number"))?);
            Ok(())
        },
    },
    Keyword {
        name: "tune.ssl.capture-buffer-size",
        scope: Scope::GLOBAL,
        help: "tune.ssl.capture-buffer-size N: bytes of each client's ClientHello lists kept for the ssl_fc_cipherlist_*, ssl_fc_extlist_bin, ssl_fc_eclist_bin and ssl_fc_ecformats_bin fetches (0: none)",
        parse: capture_buffer,
    },
    Keyword {
        name: "tune.ssl.capture-cipherlist-size",
        scope: Scope::GLOBAL,
        help: "tune.ssl.capture-cipherlist-size N: the former name of tune.ssl.capture-buffer-size",
        parse: capture_buffer,
    },
    Keyword {
        name: "tune.ssl.lifetime",
        scope: Scope::GLOBAL,
        help: "tune.ssl.lifetime TIME: accepted; rustls keeps sessions as long as the cache has room and tickets 12 h",
        parse: |g, a| {
            one_arg(a, "a time")?;
            g.tls.inert.push("tune.ssl.lifetime".into());
            Ok(())
        },
    },
    Keyword {
        name: "tune.ssl.maxrecord",
        scope: Scope::GLOBAL,
        help: "tune.ssl.maxrecord N: at most N bytes of data per TLS record (0: no limit, 16384)",
        parse: |g, a| record_limit(a).map(|n| g.tls.maxrecord = n),
    },
    Keyword {
        name: "maxsslconn",
        scope: Scope::GLOBAL,
        help: "maxsslconn N: client TLS connections open at once; past it a new one is closed before its handshake, logged 'Too many SSL connections' (0: no limit)",
        parse: |g, a| {
            let v = one_arg(a, "a number")?;
            let n: u64 = v.parse().map_err(|_| KwError::bad(1, v, "expects a number"))?;
            g.tls.max_conns = (n > 0).then_some(n);
            Ok(())
        },
    },
    Keyword {
        name: "tune.ssl.hard-maxrecord",
        scope: Scope::GLOBAL,
        help: "tune.ssl.hard-maxrecord N: never more than N bytes of data per TLS record, whatever tune.ssl.maxrecord says (0: no limit)",
        parse: |g, a| record_limit(a).map(|n| g.tls.hard_maxrecord = n),
    },
    Keyword {
        name: "tune.ssl.default-dh-param",
        scope: Scope::GLOBAL,
        help: "tune.ssl.default-dh-param BITS: accepted; rustls has no finite-field Diffie-Hellman",
        parse: |g, a| {
            one_arg(a, "a number of bits")?;
            g.tls.inert.push("tune.ssl.default-dh-param".into());
            Ok(())
        },
    },
];

/// The server options of TLS towards servers (`ssl`, `verify`, `ca-file`, `sni`, `alpn`).
pub const SERVER_OPTIONS: &[crate::conf::backend::ServerOption] = &[
    crate::conf::backend::ServerOption {
        name: "no-sslv3",
        help: "TLS to the server: refuse SSLv3 (rustls never speaks it)",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("no-sslv3");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "no-tlsv10",
        help: "TLS to the server: refuse TLS 1.0 (rustls never speaks it)",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("no-tlsv10");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "no-tlsv11",
        help: "TLS to the server: refuse TLS 1.1 (rustls never speaks it)",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("no-tlsv11");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "no-tlsv12",
        help: "TLS to the server: refuse TLS 1.2",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("no-tlsv12");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "no-tlsv13",
        help: "TLS to the server: refuse TLS 1.3",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("no-tlsv13");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "force-sslv3",
        help: "TLS to the server: SSLv3 only (refused: rustls does not speak it)",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("force-sslv3");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "force-tlsv10",
        help: "TLS to the server: TLS 1.0 only (refused: rustls does not speak it)",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("force-tlsv10");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "force-tlsv11",
        help: "TLS to the server: TLS 1.1 only (refused: rustls does not speak it)",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("force-tlsv11");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "force-tlsv12",
        help: "TLS to the server: TLS 1.2 only",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("force-tlsv12");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "force-tlsv13",
        help: "TLS to the server: TLS 1.3 only",
        args: 0,
        parse: |o, _| {
            o.tls.versions.take_option("force-tlsv13");
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "ssl-min-ver",
        help: "TLSv1.2|TLSv1.3: the oldest version offered to the server",
        args: 1,
        parse: |o, a| {
            let v = TlsVersion::parse(&a[0]).ok_or(VERSION_WORDS)?;
            o.tls.versions.min = Some(v);
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "ssl-max-ver",
        help: "TLSv1.2|TLSv1.3: the newest version offered to the server",
        args: 1,
        parse: |o, a| {
            let v = TlsVersion::parse(&a[0]).ok_or(VERSION_WORDS)?;
            o.tls.versions.max = Some(v);
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "ssl",
        help: "speak TLS to the server",
        args: 0,
        parse: |o, _| {
            o.tls.ssl = true;
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        // Undoes an `ssl` inherited from `default-server`.
        name: "no-ssl",
        help: "undo ssl (from default-server)",
        args: 0,
        parse: |o, _| {
            o.tls.ssl = false;
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "check-ssl",
        help: "health checks over TLS",
        args: 0,
        parse: |o, _| {
            o.tls.check_ssl = Some(true);
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "no-check-ssl",
        help: "undo check-ssl",
        args: 0,
        parse: |o, _| {
            o.tls.check_ssl = Some(false);
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "verify",
        help: "none|required: verify the server's certificate (required needs ca-file)",
        args: 1,
        parse: |o, a| match Verify::parse(&a[0]) {
            Some(v @ (Verify::None | Verify::Required)) => {
                o.tls.verify = Some(v);
                Ok(())
            }
            _ => Err("expects none or required".into()),
        },
    },
    crate::conf::backend::ServerOption {
        name: "ca-file",
        help: "FILE: the authorities the server's certificate is verified against",
        args: 1,
        parse: |o, a| {
            o.tls.ca_file = Some(a[0].clone());
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "crt",
        help: "FILE: the client certificate and key presented to the server",
        args: 1,
        parse: |o, a| {
            o.tls.crt = Some(a[0].clone());
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "sni",
        help: "EXPR: the name sent in the TLS handshake, from a sample expression",
        args: 1,
        parse: |o, a| {
            // A constant name; a name taken from each request would need a pool per name.
            let name = a[0]
                .strip_prefix("str(")
                .and_then(|r| r.strip_suffix(')'))
                .ok_or(
                    "only a constant, as str(NAME), is supported yet (a per-request SNI is not)",
                )?;
            ServerName::try_from(name.to_string())
                .map_err(|_| format!("'{name}' is not a valid name"))?;
            o.tls.sni = Some(name.to_string());
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "alpn",
        help: "LIST: the protocols offered to the server (h2 makes the connection HTTP/2)",
        args: 1,
        parse: |o, a| {
            // A server that picks `h2` is then spoken to in HTTP/2 (`stream::h2_server`).
            o.tls.alpn = a[0].split(',').map(str::to_string).collect();
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "check-sni",
        help: "NAME: the name health checks send in their TLS handshake",
        args: 1,
        parse: |o, a| {
            ServerName::try_from(a[0].clone())
                .map_err(|_| format!("'{}' is not a valid name", a[0]))?;
            o.tls.check_sni = Some(a[0].clone());
            Ok(())
        },
    },
    crate::conf::backend::ServerOption {
        name: "check-alpn",
        help: "LIST: the protocols health checks offer",
        args: 1,
        parse: |o, a| {
            // An HTTP check then speaks what the server picks (`check::probe`).
            o.tls.check_alpn = Some(a[0].split(',').map(str::to_string).collect());
            Ok(())
        },
    },
];

/// How a server's health checks start TLS: as its traffic does (`base`), but asking for
/// `check-sni` and offering `check-alpn` where given. The certificate is verified as for
/// the traffic.
/// A server's connectors: for its traffic (`ssl`) and for its checks (`check-ssl`, `ssl`
/// without `no-check-ssl`, or `check_rule`: a check rule of its backend connects with
/// `ssl`). `(None, None)` when it speaks TLS for neither.
pub fn server_connectors(
    o: &ServerTlsOpts,
    defaults: &TlsDefaults,
    addr: std::net::SocketAddr,
    check_rule: bool,
    skipped: &mut Vec<String>,
) -> Result<(Option<Connector>, Option<Connector>), String> {
    let checks = o.check_ssl.unwrap_or(o.ssl) || check_rule;
    if !o.ssl && !checks {
        return Ok((None, None));
    }
    let c = connector(o, defaults, addr, skipped)?;
    let check = checks.then(|| check_connector(o, &c));
    Ok((o.ssl.then_some(c), check))
}

pub fn check_connector(o: &ServerTlsOpts, base: &Connector) -> Connector {
    asking(base, o.check_sni.as_deref(), o.check_alpn.as_deref())
}

/// `base`, asking for name `sni` and protocols `alpn` where they are given.
pub fn asking(base: &Connector, sni: Option<&str>, alpn: Option<&[String]>) -> Connector {
    let mut c = base.clone();
    if let Some(alpn) = alpn {
        let mut config = (*base.config).clone();
        config.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        c.config = Arc::new(config);
    }
    if let Some(name) = sni.and_then(|n| ServerName::try_from(n.to_string()).ok()) {
        c.name = name;
    }
    c
}

/// Builds how connections to a server at `addr` start TLS: its roots (`ca-file` from
/// `ca-base`), the name it is asked for and checked against (the `sni`, else its address,
/// which is then not checked), and the `ssl-default-server-*` versions and suites.
/// Names its lists hold that rustls lacks are skipped and added to `skipped`.
pub fn connector(
    o: &ServerTlsOpts,
    defaults: &TlsDefaults,
    addr: std::net::SocketAddr,
    skipped: &mut Vec<String>,
) -> Result<Connector, String> {
    let side = &defaults.server;
    let mut p = crypto();
    if let Some(list) = &side.ciphers {
        let tls12 = read_list(lists::suites(list, false), "ciphers", skipped)?;
        p.cipher_suites
            .retain(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)));
        p.cipher_suites.extend(tls12);
    }
    if let Some(list) = &side.ciphersuites {
        let tls13 = read_list(lists::suites(list, true), "ciphersuites", skipped)?;
        p.cipher_suites
            .retain(|s| matches!(s, rustls::SupportedCipherSuite::Tls12(_)));
        p.cipher_suites.splice(0..0, tls13);
    }
    if let Some(c) = &side.curves {
        p.kx_groups = read_list(lists::groups(c), "curves", skipped)?;
    }
    let versions = side_versions(&o.versions, &side.options.versions)?;
    let p = Arc::new(p);
    let builder = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS settings: {e}"))?;
    let verify = o
        .verify
        .or(defaults.server_verify)
        .unwrap_or(Verify::Required);
    let name: ServerName<'static> = match &o.sni {
        Some(n) => ServerName::try_from(n.clone()).map_err(|e| e.to_string())?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = if verify == Verify::None {
        Arc::new(AnyServer(p))
    } else {
        let Some(ca) = &o.ca_file else {
            return Err("verify is required by default but no ca-file is given: add 'ca-file FILE', or 'verify none' (or 'ssl-server-verify none' in global) on a network where the server is trusted".into());
        };
        let roots = ca_roots(ca, defaults)?;
        let webpki =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), p)
                .build()
                .map_err(|e| format!("ca-file '{ca}': {e}"))?;
        // Without `sni` the certificate's chain is checked, not its names (as HAProxy
        // without `verifyhost`).
        if o.sni.is_some() {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    // `crt FILE`: the certificate sluice presents to the server (mutual TLS).
    let mut config = match &o.crt {
        Some(crt) => {
            let (chain, key) = client_identity(crt, defaults)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("crt '{crt}': {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = o.alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    config.max_fragment_size = max_fragment_size(defaults);
    Ok(Connector {
        config: Arc::new(config),
        name,
    })
}

/// The chain and key of a server line's `crt` (relative to `crt-base`; the key in the same
/// PEM file, or beside it in `FILE.key`).
fn client_identity(
    crt: &str,
    defaults: &TlsDefaults,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let path = match (&defaults.crt_base, crt.starts_with('/')) {
        (Some(base), false) => format!("{base}/{crt}"),
        _ => crt.to_string(),
    };
    let at = |e: &dyn std::fmt::Display| format!("crt '{path}': {e}");
    let chain = CertificateDer::pem_file_iter(&path)
        .map_err(|e| at(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| at(&e))?;
    if chain.is_empty() {
        return Err(at(&"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&path)
        .or_else(|_| PrivateKeyDer::from_pem_file(format!("{path}.key")))
        .map_err(|e| {
            at(&format!(
                "no private key in the file or in '{path}.key' ({e})"
            ))
        })?;
    Ok((chain, key))
}

/// The authorities of a `ca-file` (relative to `ca-base`).
fn ca_roots(ca: &str, defaults: &TlsDefaults) -> Result<rustls::RootCertStore, String> {
    let path = match (&defaults.ca_base, ca.starts_with('/')) {
        (Some(base), false) => format!("{base}/{ca}"),
        _ => ca.to_string(),
    };
    let at = |e: &dyn std::fmt::Display| format!("ca-file '{path}': {e}");
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&path).map_err(|e| at(&e))? {
        roots.add(c.map_err(|e| at(&e))?).map_err(|e| at(&e))?;
    }
    if roots.is_empty() {
        return Err(at(&"no certificate in it"));
    }
    Ok(roots)
}

/// `verify none`: any certificate, the handshake's signatures still checked.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

/// `verify required` without a name to check: the chain, whatever names it carries.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl rustls::client::danger::ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Reads one TLS option of a `bind` line at `opts[i]`: the number of words it took, or
/// `None` when the word is not a TLS option.
pub fn bind_option(
    tls: &mut Option<BindTls>,
    opts: &[String],
    i: usize,
) -> Result<Option<usize>, KwError> {
    let o = opts[i].as_str();
    let value = || {
        opts.get(i + 1)
            .cloned()
            .ok_or_else(|| KwError::Invalid(format!("bind option '{o}' expects a value")))
    };
    let t = tls.get_or_insert_with(BindTls::default);
    let took = match o {
        "ssl" => {
            t.ssl = true;
            1
        }
        "crt" => {
            t.crts.push(value()?);
            2
        }
        "alpn" => {
            t.alpn = value()?.split(',').map(str::to_string).collect();
            2
        }
        "ssl-min-ver" | "ssl-max-ver" => {
            let v = version_at(&value()?, i + 3)?;
            if o == "ssl-min-ver" {
                t.versions.min = Some(v);
            } else {
                t.versions.max = Some(v);
            }
            2
        }
        o if t.versions.take_option(o) => 1,
        "ciphers" => {
            t.ciphers = Some(value()?);
            2
        }
        "ciphersuites" => {
            t.ciphersuites = Some(value()?);
            2
        }
        "curves" => {
            t.curves = Some(value()?);
            2
        }
        "sigalgs" | "client-sigalgs" => {
            let v = value()?;
            lists::sigalgs(&v).map_err(|e| KwError::bad(i + 3, &v, e))?;
            *(if o == "sigalgs" {
                &mut t.sigalgs
            } else {
                &mut t.client_sigalgs
            }) = Some(v);
            2
        }
        "strict-sni" => {
            t.strict_sni = true;
            1
        }
        "no-tls-tickets" => {
            t.no_tickets = true;
            1
        }
        "prefer-client-ciphers" => {
            t.prefer_client = true;
            1
        }
        "allow-0rtt" => {
            t.allow_0rtt = true;
            1
        }
        "crt-list" => {
            t.crt_lists.push(value()?);
            2
        }
        "ca-file" => {
            t.ca_file = Some(value()?);
            2
        }
        "ca-verify-file" => {
            t.ca_verify_file = Some(value()?);
            2
        }
        "verify" => {
            let v = value()?;
            let v = Verify::parse(&v)
                .ok_or_else(|| KwError::bad(i + 3, &v, "expects none, optional or required"))?;
            t.verify = Some(v);
            2
        }
        "crl-file"
        | "ca-ignore-err"
        | "crt-ignore-err"
        | "npn"
        | "ssl-reuse"
        | "no-ssl-reuse"
        | "generate-certificates"
        | "ca-sign-file"
        | "ca-sign-pass"
        | "ecdhe"
        | "no-ca-names"
        | "ssl-max-record"
        | "tls-ticket-keys" => {
            return Err(KwError::Invalid(format!(
                "bind option '{o}': not supported yet"
            )))
        }
        _ => {
            if tls.as_ref().is_some_and(|t| *t == BindTls::default()) {
                *tls = None;
            }
            return Ok(None);
        }
    };
    Ok(Some(took))
}

/// The OpenSSL name of a negotiated suite.
pub fn suite_name(s: rustls::CipherSuite) -> &'static str {
    SUITES
        .iter()
        .find(|(_, x)| x.suite() == s)
        .map_or("unknown", |(n, _)| n)
}

/// HAProxy's name of a protocol version (`TLSv1.3`).
pub fn version_name(v: rustls::ProtocolVersion) -> &'static str {
    match v {
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        _ => "unknown",
    }
}

/// The versions a bind or server allows: its own `ssl-min-ver`/`ssl-max-ver` (else its
/// side's `ssl-default-*-options`), less the versions its options and the defaults turn
/// off, or the one they force (its own first).
fn side_versions(
    own: &Versions,
    side: &Versions,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let off: Vec<TlsVersion> = own.off.iter().chain(&side.off).copied().collect();
    allowed_versions(
        own.min.or(side.min),
        own.max.or(side.max),
        &off,
        own.force.or(side.force),
    )
}

/// The versions rustls may speak between `min` and `max` (TLSv1.2 and TLSv1.3 by default),
/// less those turned off, or only the one forced. Turning off a version rustls does not
/// have (SSLv3 to TLSv1.1) changes nothing; forcing one, or leaving none, is an error.
fn allowed_versions(
    min: Option<TlsVersion>,
    max: Option<TlsVersion>,
    off: &[TlsVersion],
    force: Option<TlsVersion>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let (min, max) = (
        min.unwrap_or(TlsVersion::Tls12),
        max.unwrap_or(TlsVersion::Tls13),
    );
    let (lo, hi) = force.map_or((min, max), |v| (v, v));
    let versions: Vec<_> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (lo..=hi).contains(v) && !off.contains(v))
    .map(|(_, r)| r)
    .collect();
    if versions.is_empty() {
        return Err(match force {
            Some(v) => format!(
                "force-{}: rustls has only TLSv1.2 and TLSv1.3",
                v.name().to_lowercase().replace('.', "")
            ),
            None => format!(
                "no TLS version left between {} and {} (rustls has TLSv1.2 and TLSv1.3)",
                min.name(),
                max.name()
            ),
        });
    }
    Ok(versions)
}

/// The crypto provider every TLS configuration starts from; its suites in [`SUITES`]'s
/// order.
fn crypto() -> rustls::crypto::CryptoProvider {
    rustls::crypto::CryptoProvider {
        cipher_suites: SUITES.iter().map(|(_, s)| *s).collect(),
        kx_groups: vec![
            asym::kx_group::X25519,
            asym::kx_group::SECP256R1,
            asym::kx_group::SECP384R1,
        ],
        // aws-lc-rs draws from its own generator; ring asks the kernel (a system call per
        // handshake, for the server's random).
        secure_random: asym::default_provider().secure_random,
        ..provider::default_provider()
    }
}

/// Reads a list, keeping what it names and noting what it skipped (`what` names the list in
/// the warning).
fn read_list<T>(
    r: Result<lists::Read<T>, String>,
    what: &str,
    skipped: &mut Vec<String>,
) -> Result<Vec<T>, String> {
    let r = r?;
    if !r.skipped.is_empty() {
        skipped.push(format!(
            "{what}: {} not available with rustls, skipped",
            r.skipped.join(", ")
        ));
    }
    Ok(r.chosen)
}

/// Builds the acceptor of a `bind ... ssl` line: its certificates (relative paths from
/// `crt-base`; a directory loads every file in it), versions, suites, groups and ALPN, over
/// the `ssl-default-bind-*` defaults.
/// Names its lists hold that rustls lacks are skipped and added to `skipped`.
pub fn acceptor(
    t: &BindTls,
    defaults: &TlsDefaults,
    store: &CertStore,
    skipped: &mut Vec<String>,
) -> Result<Acceptor, String> {
    if t.crts.is_empty() && t.crt_lists.is_empty() {
        return Err("'ssl' needs at least one 'crt FILE|DIR' or 'crt-list FILE'".into());
    }
    let based = |crt: &str| match (&defaults.crt_base, crt.starts_with('/')) {
        (Some(base), false) => format!("{base}/{crt}"),
        _ => crt.to_string(),
    };
    chain_rules(defaults, store)?;
    let mut keys = Vec::new();
    for list in &t.crt_lists {
        keys.extend(crt_list(list, &based, store)?);
    }
    for crt in &t.crts {
        let path = based(crt);
        let meta = std::fs::metadata(&path).map_err(|e| format!("crt '{path}': {e}"))?;
        if meta.is_dir() {
            let mut files: Vec<_> = std::fs::read_dir(&path)
                .map_err(|e| format!("crt '{path}': {e}"))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && !is_companion(p))
                .collect();
            files.sort();
            for f in files {
                keys.push(load_pem(&f.display().to_string(), store)?);
            }
        } else {
            keys.push(load_pem(&path, store)?);
        }
    }
    if keys.is_empty() {
        return Err("no certificate found".into());
    }
    let side = &defaults.bind;
    let versions = side_versions(&t.versions, &side.options.versions)?;
    let mut p = crypto();
    let tls12 = match t.ciphers.as_ref().or(side.ciphers.as_ref()) {
        Some(list) => read_list(lists::suites(list, false), "ciphers", skipped)?,
        None => p
            .cipher_suites
            .iter()
            .filter(|s| matches!(s, rustls::SupportedCipherSuite::Tls12(_)))
            .copied()
            .collect(),
    };
    let tls13 = match t.ciphersuites.as_ref().or(side.ciphersuites.as_ref()) {
        Some(list) => read_list(lists::suites(list, true), "ciphersuites", skipped)?,
        None => p
            .cipher_suites
            .iter()
            .filter(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)))
            .copied()
            .collect(),
    };
    p.cipher_suites = tls13.into_iter().chain(tls12).collect();
    if let Some(c) = t.curves.as_ref().or(side.curves.as_ref()) {
        p.kx_groups = read_list(lists::groups(c), "curves", skipped)?;
    }
    // `sigalgs` restricts what the handshake is signed with; `client-sigalgs` (else
    // `sigalgs`) what client certificates are verified with, as OpenSSL's lists do.
    let mut schemes = |list: Option<&String>, what| -> Result<_, String> {
        list.map(|l| read_list(lists::sigalgs(l), what, skipped).map(Arc::<[_]>::from))
            .transpose()
    };
    let signing = schemes(t.sigalgs.as_ref().or(side.sigalgs.as_ref()), "sigalgs")?;
    let verifying = schemes(
        t.client_sigalgs.as_ref().or(side.client_sigalgs.as_ref()),
        "client-sigalgs",
    )?
    .or_else(|| signing.clone());
    let p = Arc::new(p);
    let builder = rustls::ServerConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS settings: {e}"))?;
    // Client certificates: `verify optional|required` against `ca-file` (default
    // `required` once a ca-file is given, as HAProxy).
    let verify = t
        .verify
        .unwrap_or(if t.ca_file.is_some() || t.ca_verify_file.is_some() {
            Verify::Required
        } else {
            Verify::None
        });
    let builder = match (verify, t.ca_file.as_ref().or(t.ca_verify_file.as_ref())) {
        (Verify::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err(format!("'verify {}' needs a 'ca-file'", verify.name())),
        (v, Some(ca)) => {
            // `ca-verify-file`: authorities that verify but are not named to clients (the
            // CA names a client chooses its certificate by are `ca-file`'s).
            let named = match &t.ca_file {
                Some(f) => ca_roots(f, defaults)?,
                None => rustls::RootCertStore::empty(),
            };
            let hints = named.subjects();
            let mut roots = named;
            if let Some(f) = &t.ca_verify_file {
                roots.roots.extend(ca_roots(f, defaults)?.roots);
            }
            let mut verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), p)
                    .clear_root_hint_subjects()
                    .add_root_hint_subjects(hints);
            if v == Verify::Optional {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| format!("ca-file '{ca}': {e}"))?;
            match verifying {
                Some(allowed) => builder.with_client_cert_verifier(Arc::new(
                    sigalgs::ClientVerifier::new(verifier, allowed),
                )),
                None => builder.with_client_cert_verifier(verifier),
            }
        }
    };
    let certs: Vec<(String, CertSlot)> = keys
        .iter()
        .map(|l| (l.path.clone(), l.key.clone()))
        .collect();
    let mut config = builder.with_cert_resolver(Arc::new(SniResolver {
        keys,
        strict: t.strict_sni || side.options.strict_sni,
        signing,
        restricted: Default::default(),
    }));
    config.alpn_protocols = t.alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    config.max_fragment_size = max_fragment_size(defaults);
    // The server's order of suites, as HAProxy's default (`prefer-client-ciphers` gives
    // the client's).
    config.ignore_client_order = !(t.prefer_client || side.options.prefer_client);
    // Resumption: by session id from a per-bind cache, and by tickets whose keys rotate
    // every 6 hours (rustls's ticketer), unless `no-tls-tickets`.
    if defaults.keylog {
        config.key_log = Arc::new(keylog::ToConnection);
    }
    let cache = defaults.cachesize.unwrap_or(20_000);
    config.session_storage = if cache > 0 {
        rustls::server::ServerSessionMemoryCache::new(cache)
    } else {
        Arc::new(rustls::server::NoServerSessionStorage {})
    };
    let no_tickets = t.no_tickets || side.options.no_tickets;
    if !no_tickets {
        config.ticketer = provider::Ticketer::new().map_err(|e| format!("TLS tickets: {e}"))?;
    } else if cache == 0 {
        // Nothing can resume a session: each TLS 1.3 ticket would cost three random draws
        // and a key derivation for a ticket no one can use.
        config.send_tls13_tickets = 0;
    }
    Ok(Acceptor {
        config: Arc::new(config),
        certs,
    })
}

/// The smaller of `tune.ssl.maxrecord` and `tune.ssl.hard-maxrecord`, as rustls counts it
/// (with the record's header). sluice's `maxrecord` is not relaxed for long transfers as
/// HAProxy's is, so both are hard limits.
fn max_fragment_size(defaults: &TlsDefaults) -> Option<usize> {
    let limits = [defaults.maxrecord, defaults.hard_maxrecord];
    limits
        .into_iter()
        .flatten()
        .min()
        .map(|n| n + RECORD_HEADER)
}

/// How the certificates of the configuration being loaded get their chains, kept in its
/// store for those set later from the CLI.
fn chain_rules(defaults: &TlsDefaults, store: &CertStore) -> Result<(), String> {
    let mut rules = x509::ChainRules {
        skip_self_issued: defaults.skip_self_issued_ca,
        ..Default::default()
    };
    if let Some(dir) = &defaults.issuers_chain_path {
        rules = rules.with_issuers_from(dir)?;
    }
    *lock(&store.rules) = Arc::new(rules);
    Ok(())
}

/// A store's lock, whoever panicked holding it (each change is one assignment).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A chain and its key from PEM text (the key may come from a second text), the chain
/// made up by `rules`.
fn parse_pem(
    pem: &[u8],
    key_pem: Option<&[u8]>,
    rules: &x509::ChainRules,
) -> Result<CertifiedKey, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificate in it".into());
    }
    let certs = rules.apply(certs);
    let key = PrivateKeyDer::from_pem_slice(pem)
        .or_else(|e| key_pem.map_or(Err(e), PrivateKeyDer::from_pem_slice))
        .map_err(|_| "no private key in it".to_string())?;
    let signer =
        asym::sign::any_supported_type(&key).map_err(|e| format!("the key cannot be used: {e}"))?;
    let certified = CertifiedKey::new(certs, signer);
    certified
        .keys_match()
        .map_err(|e| format!("the key does not match the certificate: {e}"))?;
    Ok(certified)
}

/// `set ssl cert FILE PAYLOAD`: a new chain and key for a loaded file, held until
/// committed. Returns whether a transaction was already open for it.
pub fn set_cert(store: &CertStore, path: &str, pem: &str) -> Result<bool, String> {
    if !lock(&store.loaded).iter().any(|(p, _)| p == path) {
        return Err(format!(
            "Can't replace a certificate which is not referenced by the configuration! ({path})"
        ));
    }
    let rules = lock(&store.rules).clone();
    let key = Arc::new(parse_pem(pem.as_bytes(), None, &rules)?);
    let mut pending = lock(&store.pending);
    let open = pending.iter().position(|(p, _)| p == path);
    match open {
        Some(i) => pending[i].1 = key,
        None => pending.push((path.to_string(), key)),
    }
    Ok(open.is_some())
}

/// `commit ssl cert FILE`: the pending certificate serves the next handshakes of every
/// bind using the file; connections already open keep theirs.
pub fn commit_cert(store: &CertStore, path: &str) -> Result<(), String> {
    let mut pending = lock(&store.pending);
    let i = pending
        .iter()
        .position(|(p, _)| p == path)
        .ok_or_else(|| format!("No ongoing transaction! ({path})"))?;
    let (_, key) = pending.remove(i);
    let all = lock(&store.loaded);
    if let Some((_, slot)) = all.iter().find(|(p, _)| p == path) {
        *slot.write().unwrap_or_else(|e| e.into_inner()) = key;
    }
    Ok(())
}

/// `abort ssl cert FILE`: whether a transaction was open.
pub fn abort_cert(store: &CertStore, path: &str) -> bool {
    let mut pending = lock(&store.pending);
    let before = pending.len();
    pending.retain(|(p, _)| p != path);
    pending.len() != before
}

/// `show ssl cert [FILE]`: the files (and open transactions, `*FILE`), or one file's
/// certificate.
pub fn show_cert(store: &CertStore, path: Option<&str>) -> String {
    let pending = lock(&store.pending);
    let all = lock(&store.loaded);
    let Some(path) = path else {
        let mut out = String::new();
        if !pending.is_empty() {
            out.push_str("# transaction\n");
            for (p, _) in pending.iter() {
                out.push_str(&format!("*{p}\n"));
            }
        }
        out.push_str("# filename\n");
        for (p, _) in all.iter() {
            out.push_str(&format!("{p}\n"));
        }
        return out;
    };
    let (name, key) = match path.strip_prefix('*') {
        Some(p) => match pending.iter().find(|(x, _)| x == p) {
            Some((_, k)) => (path.to_string(), k.clone()),
            None => return format!("No ongoing transaction! ({p})\n"),
        },
        None => match all.iter().find(|(x, _)| x == path) {
            Some((_, slot)) => (
                path.to_string(),
                slot.read().unwrap_or_else(|e| e.into_inner()).clone(),
            ),
            None => return format!("Can't display the certificate: not found ({path})\n"),
        },
    };
    let (subject, issuer) = x509::dn_strings(&key.cert[0]).unwrap_or_default();
    format!(
        "Filename: {name}\nStatus: {}\nChain length: {}\nSubject: {subject}\nIssuer: {issuer}\nOCSP response: {}\n",
        if name.starts_with('*') { "Unused" } else { "Used" },
        key.cert.len(),
        if key.ocsp.is_some() { "yes" } else { "no" }
    )
}

/// `crt-list FILE`: a certificate per line, `PATH [[OPTIONS]] [[!]NAME...]`, the names
/// (exact or `*.domain`) choosing it instead of its own (`!NAME` leaves one out).
fn crt_list(
    path: &str,
    based: &dyn Fn(&str) -> String,
    store: &CertStore,
) -> Result<Vec<Loaded>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("crt-list '{path}': {e}"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |e: String| format!("crt-list '{path}' line {}: {e}", n + 1);
        let (file, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let mut rest = rest.trim();
        if let Some(opts) = rest.strip_prefix('[') {
            let (inside, after) = opts
                .split_once(']')
                .ok_or_else(|| at("missing ']' after the options".into()))?;
            if !inside.trim().is_empty() {
                return Err(at(format!(
                    "per-certificate options '[{}]': not supported yet",
                    inside.trim()
                )));
            }
            rest = after.trim();
        }
        let mut loaded = load_pem(&based(file), store).map_err(at)?;
        let (mut include, mut exclude) = (Vec::new(), Vec::new());
        for name in rest.split_whitespace() {
            match name.strip_prefix('!') {
                Some(n) => exclude.push(n.to_ascii_lowercase()),
                None => include.push(name.to_ascii_lowercase()),
            }
        }
        if !include.is_empty() || !exclude.is_empty() {
            loaded.filters = Some((include, exclude));
        }
        out.push(loaded);
    }
    Ok(out)
}

/// Files next to a certificate that are not certificates (`.key`, `.ocsp`, ...): a
/// directory of certificates may hold them.
fn is_companion(p: &std::path::Path) -> bool {
    matches!(
        p.extension().and_then(|e| e.to_str()),
        Some("key" | "ocsp" | "issuer" | "sctl" | "csr")
    )
}

/// A PEM file holding a chain and its private key (or the key in `FILE.key` beside it).
fn load_pem(path: &str, store: &CertStore) -> Result<Loaded, String> {
    let rules = lock(&store.rules).clone();
    let pem = std::fs::read(path).map_err(|e| format!("crt '{path}': {e}"))?;
    let key_pem = std::fs::read(format!("{path}.key")).ok();
    let mut certified =
        parse_pem(&pem, key_pem.as_deref(), &rules).map_err(|e| format!("crt '{path}': {e}"))?;
    // OCSP stapling: a DER response in `FILE.ocsp`, as HAProxy finds it.
    certified.ocsp = std::fs::read(format!("{path}.ocsp")).ok();
    Ok(Loaded {
        path: path.to_string(),
        key: slot_for(store, path, certified),
        filters: None,
    })
}

/// The shared slot of a certificate file (made on its first load; a later load of the
/// same file by another bind refreshes it).
fn slot_for(store: &CertStore, path: &str, key: CertifiedKey) -> CertSlot {
    let mut all = lock(&store.loaded);
    let key = Arc::new(key);
    if let Some((_, slot)) = all.iter().find(|(p, _)| p == path) {
        *slot.write().unwrap_or_else(|e| e.into_inner()) = key;
        return slot.clone();
    }
    let slot = Arc::new(std::sync::RwLock::new(key));
    all.push((path.to_string(), slot.clone()));
    slot
}

/// A loaded certificate with its key.
#[derive(Debug)]
struct Loaded {
    /// The file, as `show ssl cert` names it.
    path: String,
    key: CertSlot,
    /// A `crt-list` line's names: (chosen for, left out), lower case.
    filters: Option<(Vec<String>, Vec<String>)>,
}

impl Loaded {
    /// How well the certificate's names match `name`: 2 exactly, 1 by a wildcard, 0 not.
    fn matches(&self, name: &ServerName<'_>) -> u8 {
        if let Some((include, exclude)) = &self.filters {
            let ServerName::DnsName(dns) = name else {
                return 0;
            };
            let n = dns.as_ref().to_ascii_lowercase();
            if exclude.contains(&n) {
                return 0;
            }
            if include.contains(&n) {
                return 2;
            }
            let parent = n.split_once('.').map(|(_, p)| format!("*.{p}"));
            return u8::from(parent.is_some_and(|p| include.contains(&p)));
        }
        let key = self.key.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Ok(cert) = webpki::EndEntityCert::try_from(&key.cert[0]) else {
            return 0;
        };
        if cert.verify_is_valid_for_subject_name(name).is_err() {
            return 0;
        }
        // A wildcard certificate is valid for a sibling name too; an exact one is not.
        let ServerName::DnsName(dns) = name else {
            return 2;
        };
        let sibling = match dns.as_ref().split_once('.') {
            Some((_, rest)) => format!("sluice-sibling-check.{rest}"),
            None => return 2,
        };
        match ServerName::try_from(sibling) {
            Ok(s) if cert.verify_is_valid_for_subject_name(&s).is_ok() => 1,
            _ => 2,
        }
    }
}

/// Chooses the certificate of a handshake by SNI.
#[derive(Debug)]
struct SniResolver {
    keys: Vec<Loaded>,
    strict: bool,
    /// `sigalgs`: the only schemes the handshake may be signed with.
    signing: Option<Arc<[rustls::SignatureScheme]>>,
    /// The restricted copy of each certificate served so far, beside the certificate it
    /// restricts (made once, not per handshake; a certificate replaced by `commit ssl cert`
    /// gets its own, and the oldest copies go once there are twice as many as files).
    restricted: std::sync::RwLock<Vec<(Arc<CertifiedKey>, Arc<CertifiedKey>)>>,
}

impl SniResolver {
    fn restricted(
        &self,
        key: &Arc<CertifiedKey>,
        allowed: &Arc<[rustls::SignatureScheme]>,
    ) -> Arc<CertifiedKey> {
        let known = self.restricted.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, k)) = known.iter().find(|(o, _)| Arc::ptr_eq(o, key)) {
            return k.clone();
        }
        drop(known);
        let made = Arc::new(sigalgs::restricted(key, allowed));
        let mut known = self.restricted.write().unwrap_or_else(|e| e.into_inner());
        if known.len() >= 2 * self.keys.len() {
            known.remove(0);
        }
        known.push((key.clone(), made.clone()));
        made
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = |l: &Loaded| {
            let key = l.key.read().unwrap_or_else(|e| e.into_inner()).clone();
            match &self.signing {
                Some(allowed) => self.restricted(&key, allowed),
                None => key,
            }
        };
        // A certificate the client can verify, and whose key type a suite it offers uses
        // (any with TLS 1.3; ECDHE_ECDSA or ECDHE_RSA with TLS 1.2).
        let suites = hello.cipher_suites();
        let name = |s: &rustls::CipherSuite| s.as_str().unwrap_or_default();
        let tls13 = suites.iter().any(|s| name(s).starts_with("TLS13_"));
        let usable = |l: &&Loaded| {
            let key = current(l);
            let kind = match key.key.algorithm() {
                rustls::SignatureAlgorithm::ECDSA => "_ECDSA_",
                rustls::SignatureAlgorithm::RSA => "_RSA_",
                _ => "",
            };
            key.key.choose_scheme(hello.signature_schemes()).is_some()
                && (tls13 || suites.iter().any(|s| name(s).contains(kind)))
        };
        let by_name = hello
            .server_name()
            .and_then(|n| ServerName::try_from(n.to_string()).ok())
            .and_then(|name| {
                let best = self.keys.iter().map(|l| l.matches(&name)).max()?;
                (best > 0)
                    .then(|| {
                        self.keys
                            .iter()
                            .filter(|l| l.matches(&name) == best)
                            .find(usable)
                    })
                    .flatten()
            });
        match by_name {
            Some(l) => Some(current(l)),
            None if self.strict => None,
            None => self
                .keys
                .iter()
                .find(usable)
                .or(self.keys.first())
                .map(current),
        }
    }
}

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

    /// The default options are read into their types when the line is, and the versions
    /// a bind allows come from its own words first, then its side's.
    #[test]
    fn options_are_read_once_into_types() {
        let o = options(&w(
            "no-tlsv13 ssl-max-ver TLSv1.3 no-tls-tickets strict-sni",
        ))
        .unwrap();
        assert_eq!(o.versions.off, [TlsVersion::Tls13]);
        assert_eq!(o.versions.max, Some(TlsVersion::Tls13));
        assert!(o.no_tickets && o.strict_sni && !o.prefer_client);
        let only12 = side_versions(&Versions::default(), &o.versions).unwrap();
        assert_eq!(only12.len(), 1);
        assert_eq!(only12[0].version, rustls::ProtocolVersion::TLSv1_2);
        let own = Versions {
            force: Some(TlsVersion::Tls13),
            ..Versions::default()
        };
        // Forcing the version the side turned off leaves none.
        assert!(side_versions(&own, &o.versions).is_err());
        let own = Versions {
            force: Some(TlsVersion::Tls11),
            ..Versions::default()
        };
        let e = side_versions(&own, &Versions::default()).unwrap_err();
        assert!(e.starts_with("force-tlsv11:"), "{e}");
        assert_eq!(
            TlsVersion::parse("TLSv1.2").map(TlsVersion::name),
            Some("TLSv1.2")
        );
    }
}
