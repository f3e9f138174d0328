//! The `balance` algorithm of a backend and its `hash-type`.

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Algo {
    #[default]
    RoundRobin,
    StaticRr,
    LeastConn,
    First,
    /// Power of N random choices (weighted draws, least loaded wins).
    Random(u32),
    /// Hash of the client address.
    Source,
    /// Hash of the request target.
    Uri(UriOpts),
    /// Hash of a query-string parameter's value (with `check_post`, also looked for in a
    /// form body already received); round robin when it is absent.
    UrlParam(String, bool),
    /// Hash of the RDP cookie (`mstshash` by default) of a TCP connection's first bytes;
    /// round robin when it is absent.
    RdpCookie(String),
    /// Hash of the named header (lowercase) or, with `use_domain_only`, of its domain's
    /// main part; round robin when it is absent.
    Hdr(String, bool),
    /// `hash EXPR`: hash of the sample's bytes; round robin when it gives nothing.
    Hash(crate::conf::sample::Expr),
}

/// `balance uri` options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UriOpts {
    /// `len N`: hash at most N characters (0: no limit).
    pub len: usize,
    /// `depth N`: hash at most N directories (0: no limit).
    pub depth: usize,
    /// `whole`: the query string is hashed too.
    pub whole: bool,
    /// `path-only`: the scheme and authority of an absolute URI are left out.
    pub path_only: bool,
}

impl Algo {
    /// The name as written after `balance`.
    pub fn name(&self) -> String {
        match self {
            Algo::RoundRobin => "roundrobin".into(),
            Algo::StaticRr => "static-rr".into(),
            Algo::LeastConn => "leastconn".into(),
            Algo::First => "first".into(),
            Algo::Random(n) => format!("random({n})"),
            Algo::Source => "source".into(),
            Algo::Uri(_) => "uri".into(),
            Algo::UrlParam(..) => "url_param".into(),
            Algo::RdpCookie(n) => format!("rdp-cookie({n})"),
            Algo::Hdr(h, _) => format!("hdr({h})"),
            Algo::Hash(_) => "hash".into(),
        }
    }

    /// A hashing algorithm (its servers come from `hash-type`'s table).
    pub fn hashes(&self) -> bool {
        matches!(
            self,
            Algo::Source
                | Algo::Uri(_)
                | Algo::UrlParam(..)
                | Algo::Hdr(..)
                | Algo::RdpCookie(_)
                | Algo::Hash(_)
        )
    }
}

/// `hash-type map-based|consistent [FUNCTION] [avalanche]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HashType {
    pub consistent: bool,
    pub func: HashFn,
    pub avalanche: bool,
}

/// The hash function of `hash-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashFn {
    #[default]
    Sdbm,
    Djb2,
    Wt6,
    Crc32,
    /// The key is read as a decimal number.
    None,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BalanceConf {
    pub algo: Algo,
    pub hash: HashType,
    /// `option allbackups`: when no active server is usable, balance over every usable
    /// backup server rather than only the first.
    pub allbackups: bool,
    /// `hash-balance-factor N`: with consistent hashing, a server holding more than N% of
    /// its weight's share of the requests in flight is passed over for the next on the ring.
    pub balance_factor: Option<u32>,
}
