//! TLS settings of `global` as written: the defaults of `ssl` binds and servers.

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
    /// `tune.ssl.capture-buffer-size`: the bytes of a client's ClientHello lists kept for
    /// the `ssl_fc_*list*` fetches (0: none captured).
    pub capture_buffer: usize,
    /// `ssl-server-verify none|required`: servers' `verify` when their line has none.
    pub server_verify: Option<String>,
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
    /// Options such as `ssl-min-ver TLSv1.2` and `no-tls-tickets`, as words.
    pub options: Vec<String>,
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
    pub min_ver: Option<String>,
    pub max_ver: Option<String>,
    /// `no-sslv3`, `no-tlsv10`, ... and `force-tlsv12`, ...: versions as HAProxy names them
    /// (`TLSv1.2`).
    pub no_versions: Vec<String>,
    pub force_version: Option<String>,
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
    pub verify: Option<String>,
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
    pub verify: Option<String>,
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
    pub min_ver: Option<String>,
    pub max_ver: Option<String>,
    pub no_versions: Vec<String>,
    pub force_version: Option<String>,
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
