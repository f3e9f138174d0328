//! TLS settings: the defaults of `ssl` binds and servers (`global`), and each bind's and
//! server's own. Words with a fixed set of values (versions, `verify`, the default
//! options) are read into the types below when the line is; file paths, cipher and group
//! lists stay as written until the acceptor or connector is built, when the configuration
//! is loaded. Nothing here is read per connection.

/// A protocol version as HAProxy names it (`TLSv1.2`), oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Ssl3,
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl TlsVersion {
    const NAMES: [(TlsVersion, &'static str, &'static str); 5] = [
        (TlsVersion::Ssl3, "SSLv3", "sslv3"),
        (TlsVersion::Tls10, "TLSv1.0", "tlsv10"),
        (TlsVersion::Tls11, "TLSv1.1", "tlsv11"),
        (TlsVersion::Tls12, "TLSv1.2", "tlsv12"),
        (TlsVersion::Tls13, "TLSv1.3", "tlsv13"),
    ];

    /// `TLSv1.2` and the like (`ssl-min-ver`, `ssl-max-ver`).
    pub fn parse(word: &str) -> Option<TlsVersion> {
        Self::NAMES.iter().find(|n| n.1 == word).map(|n| n.0)
    }

    /// HAProxy's name (`TLSv1.2`).
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize].1
    }

    /// The version an option names after `no-` or `force-` (`tlsv12`).
    fn of_option(word: &str) -> Option<TlsVersion> {
        Self::NAMES.iter().find(|n| n.2 == word).map(|n| n.0)
    }
}

/// The versions a bind, a server or a side's defaults allow, as written: `ssl-min-ver`,
/// `ssl-max-ver`, `no-tlsv1x` (any number), `force-tlsv1x`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions {
    pub min: Option<TlsVersion>,
    pub max: Option<TlsVersion>,
    pub off: Vec<TlsVersion>,
    pub force: Option<TlsVersion>,
}

impl Versions {
    /// Takes a `no-tlsv1x` or `force-tlsv1x` word; false if it is neither.
    pub fn take_option(&mut self, word: &str) -> bool {
        if let Some(v) = word.strip_prefix("no-").and_then(TlsVersion::of_option) {
            self.off.push(v);
        } else if let Some(v) = word.strip_prefix("force-").and_then(TlsVersion::of_option) {
            self.force = Some(v);
        } else {
            return false;
        }
        true
    }
}

/// `verify none|optional|required`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    None,
    Optional,
    Required,
}

impl Verify {
    pub fn parse(word: &str) -> Option<Verify> {
        match word {
            "none" => Some(Verify::None),
            "optional" => Some(Verify::Optional),
            "required" => Some(Verify::Required),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verify::None => "none",
            Verify::Optional => "optional",
            Verify::Required => "required",
        }
    }
}

/// The `ssl-default-bind-options` / `ssl-default-server-options` words, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SideOptions {
    pub versions: Versions,
    pub no_tickets: bool,
    pub prefer_client: bool,
    pub strict_sni: bool,
    /// `allow-0rtt` (`ssl-default-bind-options`): as each bind line's own, which only a
    /// QUIC listener takes (TCP listeners read no early data).
    pub allow_0rtt: bool,
}

/// `ca-base`, `crt-base` and the `ssl-default-*` keywords.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsDefaults {
    /// Directories that relative `ca-file` and `crt` paths start from.
    pub ca_base: Option<String>,
    pub crt_base: Option<String>,
    pub bind: TlsSide,
    pub server: TlsSide,
    /// `tune.ssl.cachesize`: TLS sessions each `ssl` bind keeps for resumption (20000).
    pub cachesize: Option<usize>,
    /// `tune.ssl.maxrecord`: the most plaintext bytes per TLS record (0 or unset: 16 kB).
    pub maxrecord: Option<usize>,
    /// `tune.ssl.hard-maxrecord`: the same limit, never relaxed (the smaller wins).
    pub hard_maxrecord: Option<usize>,
    /// `maxsslconn`: client TLS connections open at once (none: no limit).
    pub max_conns: Option<u64>,
    /// `tune.ssl.capture-buffer-size`: the bytes of a client's ClientHello lists kept for
    /// the `ssl_fc_*list*` fetches (0: none captured).
    pub capture_buffer: usize,
    /// `tune.ssl.keylog on`: each client session's secrets are kept (`tls::keylog`).
    pub keylog: bool,
    /// `ssl-server-verify none|required`: servers' `verify` when their line has none.
    pub server_verify: Option<Verify>,
    /// `issuers-chain-path DIR`: chains that complete certificates loaded alone.
    pub issuers_chain_path: Option<String>,
    /// `ssl-skip-self-issued-ca`: roots are not sent with a certificate's chain.
    pub skip_self_issued_ca: bool,
    /// Keywords accepted that do nothing with rustls (`tune.ssl.lifetime`,
    /// `tune.ssl.default-dh-param`, `ssl-dh-param-file`), said once at start.
    pub inert: Vec<String>,
}

/// Default ciphers and options of one side (binds or servers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSide {
    /// TLS 1.2 cipher list (OpenSSL syntax, as written).
    pub ciphers: Option<String>,
    /// TLS 1.3 cipher suites (as written).
    pub ciphersuites: Option<String>,
    /// `ssl-default-*-options`: `ssl-min-ver TLSv1.2`, `no-tls-tickets`, ...
    pub options: SideOptions,
    /// Key exchange groups (`ssl-default-*-curves`, colon-separated as written).
    pub curves: Option<String>,
    /// Signature algorithms (`ssl-default-bind-sigalgs`, `-client-sigalgs`), as written.
    pub sigalgs: Option<String>,
    pub client_sigalgs: Option<String>,
}

/// `bind ... ssl` and the TLS options of that line, as written (paths as given; `crt-base`
/// applies when the acceptor is built).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindTls {
    /// `ssl` was given (the other options only set up what it turns on).
    pub ssl: bool,
    /// `crt FILE|DIR` (repeatable): PEM files with a chain and its key.
    pub crts: Vec<String>,
    /// `crt-list FILE` (repeatable).
    pub crt_lists: Vec<String>,
    /// `alpn LIST`, in order of preference.
    pub alpn: Vec<String>,
    /// `ssl-min-ver`, `ssl-max-ver`, `no-sslv3`, `no-tlsv10`, ..., `force-tlsv12`, ...
    pub versions: Versions,
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
    pub curves: Option<String>,
    /// `sigalgs LIST`: the schemes the handshake is signed with (and, without
    /// `client-sigalgs`, those client certificates may be verified with).
    pub sigalgs: Option<String>,
    /// `client-sigalgs LIST`: the schemes client certificates may be verified with.
    pub client_sigalgs: Option<String>,
    pub strict_sni: bool,
    pub no_tickets: bool,
    /// `prefer-client-ciphers`: the client's order of suites wins (else the server's).
    pub prefer_client: bool,
    /// `ca-file FILE`: the authorities client certificates are checked against.
    pub ca_file: Option<String>,
    /// `ca-verify-file FILE`: more of them, not named to clients.
    pub ca_verify_file: Option<String>,
    /// `verify none|optional|required` (client certificates).
    pub verify: Option<Verify>,
    /// `allow-0rtt`: TLS early data is taken (QUIC listeners only: HTTP/3 requests in 0-RTT).
    pub allow_0rtt: bool,
    /// The acceptor built from the options (when the configuration is loaded).
    pub acceptor: Option<Acceptor>,
}

/// A certificate file's live certificate, shared by every bind that loaded the file: the
/// CLI's `commit ssl cert` replaces it for the handshakes that follow.
pub type CertSlot = std::sync::Arc<std::sync::RwLock<std::sync::Arc<rustls::sign::CertifiedKey>>>;

/// How the chain of a loaded certificate is made up (global `issuers-chain-path` and
/// `ssl-skip-self-issued-ca`).
#[derive(Debug, Clone, Default)]
pub struct ChainRules {
    /// Chains that complete a lone certificate: each starts with the certificate that
    /// issued it, followed by that one's issuers (as the PEM files in the directory hold
    /// them).
    pub issuers: Vec<Vec<rustls::pki_types::CertificateDer<'static>>>,
    /// Self-issued authorities (roots) are left out of the chain sent to clients: they
    /// trust their own copy or none.
    pub skip_self_issued: bool,
}

/// The certificate files a configuration generation loaded, each in the slot every bind
/// using it shares, with the CLI's transactions on them (`set|commit|abort|show ssl cert`,
/// `tls::set_cert` and its siblings). Loading a configuration fills its own store: nothing
/// is left behind in the process.
#[derive(Debug, Default)]
pub struct CertStore {
    /// How chains are made up, for the files loaded and those set later from the CLI.
    pub rules: std::sync::Mutex<std::sync::Arc<ChainRules>>,
    pub loaded: std::sync::Mutex<Vec<(String, CertSlot)>>,
    /// Certificates set on the CLI and not yet committed, by file.
    pub pending: std::sync::Mutex<Vec<(String, std::sync::Arc<rustls::sign::CertifiedKey>)>>,
}

/// What a TLS listener hands its connections to: a rustls server configuration shared by
/// every worker, and the certificate files it serves.
#[derive(Clone)]
pub struct Acceptor {
    pub config: std::sync::Arc<rustls::ServerConfig>,
    pub certs: Vec<(String, CertSlot)>,
}

impl PartialEq for Acceptor {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for Acceptor {}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// `server ... ssl` and its options, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerTlsOpts {
    pub ssl: bool,
    /// `check-ssl` / `no-check-ssl`: health checks over TLS (default: as `ssl`).
    pub check_ssl: Option<bool>,
    /// `verify none|required` (default: required, as HAProxy's `ssl-server-verify`).
    pub verify: Option<Verify>,
    pub ca_file: Option<String>,
    /// `crt FILE`: the client certificate presented to the server.
    pub crt: Option<String>,
    /// `sni EXPR`: only a constant (`str(NAME)`) for now.
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    /// `check-sni NAME`: the name health checks ask for (default: as `sni`).
    pub check_sni: Option<String>,
    /// `check-alpn LIST`: the protocols health checks offer (default: as `alpn`).
    pub check_alpn: Option<Vec<String>>,
    /// `ssl-min-ver`, `ssl-max-ver`, `no-tlsv1x`, `force-tlsv1x`, as on binds.
    pub versions: Versions,
}

/// How connections to a server start TLS: a rustls client configuration and the name
/// the server is asked for (its SNI) and checked against.
#[derive(Clone)]
pub struct Connector {
    pub config: std::sync::Arc<rustls::ClientConfig>,
    pub name: rustls::pki_types::ServerName<'static>,
}

impl PartialEq for Connector {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for Connector {}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connector({:?})", self.name)
    }
}
