//! Name resolution at run time as configured: `resolvers` sections (their nameservers,
//! retries, timers and hold periods) and a server's `resolvers`, `resolve-prefer`,
//! `resolve-net`, `resolve-opts` and `init-addr`, lowered into one [`ServerResolve`] per
//! server that follows its name (`crate::dns`).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A `resolvers` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolvers {
    pub name: String,
    pub nameservers: Vec<Nameserver>,
    /// `accepted_payload_size`: the answer size announced (EDNS0) and accepted.
    pub payload: u16,
    /// `resolve_retries`: queries sent for one resolution before it times out.
    pub retries: u32,
    /// `timeout resolve`: how often resolutions are considered.
    pub timeout_resolve: Duration,
    /// `timeout retry`: the wait for an answer before a query is sent again.
    pub timeout_retry: Duration,
    pub hold: Hold,
}

impl Resolvers {
    /// A section named `name` with HAProxy 2.6's defaults and no nameserver yet.
    pub fn new(name: String) -> Resolvers {
        Resolvers {
            name,
            nameservers: Vec::new(),
            payload: 512,
            retries: 3,
            timeout_resolve: Duration::from_secs(1),
            timeout_retry: Duration::from_secs(1),
            hold: Hold::default(),
        }
    }
}

/// A `nameserver ID ADDR[:PORT]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nameserver {
    pub name: String,
    pub addr: SocketAddr,
    /// `tcp@ADDR`: asked over TCP (each message behind its two-byte length).
    pub tcp: bool,
}

/// `hold STATUS PERIOD`: how long a server keeps its address while answers of that status
/// come (`valid`: how long a valid answer stands before the name is asked again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub valid: Duration,
    pub nx: Duration,
    pub other: Duration,
    pub refused: Duration,
    pub timeout: Duration,
    pub obsolete: Duration,
}

impl Default for Hold {
    fn default() -> Hold {
        let s30 = Duration::from_secs(30);
        Hold {
            valid: Duration::from_secs(10),
            nx: s30,
            other: s30,
            refused: s30,
            timeout: s30,
            obsolete: Duration::ZERO,
        }
    }
}

/// An address family a server prefers (`resolve-prefer`; IPv6 by default, as HAProxy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    #[default]
    V6,
}

/// One method of `init-addr`, tried in order at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitAddr {
    /// The address the server-state file kept.
    Last,
    /// The system's resolver (`getaddrinfo`).
    Libc,
    /// No address: the server starts in maintenance until its name resolves.
    None,
    Ip(IpAddr),
}

/// A server's resolution options as written (`server` or `default-server`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolveOpts {
    /// `resolvers NAME`.
    pub resolvers: Option<String>,
    pub prefer: Option<Family>,
    /// `resolve-net NET,...`: addresses in these networks are preferred.
    pub nets: Vec<(IpAddr, u8)>,
    /// `resolve-opts allow-dup-ip`: several servers of the backend may share an address.
    pub allow_dup_ip: bool,
    /// `resolve-opts ignore-weight`: SRV weights are not applied.
    pub ignore_weight: bool,
    /// `init-addr METHOD,...` (HAProxy's default: `last,libc`).
    pub init_addr: Option<Vec<InitAddr>>,
}

/// How a server follows its name at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerResolve {
    /// The `resolvers` section (index in `Config::resolvers`).
    pub resolvers: usize,
    /// The name asked for.
    pub fqdn: String,
    /// It is an SRV name (it starts with `_`): its records give address, port and weight.
    pub srv: bool,
    pub prefer: Family,
    pub nets: Vec<(IpAddr, u8)>,
    pub allow_dup_ip: bool,
    /// SRV weights are not applied (`resolve-opts ignore-weight`).
    pub ignore_weight: bool,
}
