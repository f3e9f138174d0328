//! TLS settings of `global` as written: the defaults of `ssl` binds and servers.

/// `ca-base`, `crt-base` and the `ssl-default-*` keywords.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsDefaults {
    /// Directories that relative `ca-file` and `crt` paths start from.
    pub ca_base: Option<String>,
    pub crt_base: Option<String>,
    pub bind: TlsSide,
    pub server: TlsSide,
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
}
