//! The bottom layer: one configuration generation as plain data.
//!
//! Keyword parsers (beside their features) write into the `*Conf` types here; the loader
//! (`crate::load`) lowers them into a validated [`Config`]. Nothing here holds a socket, a
//! counter, a lock or a logger, and nothing here imports another module of the crate: live
//! state belongs to `crate::runtime`, which outlives configuration generations.
//!
//! Invariants: a [`Config`] is immutable once built; `frontends` and `backends` are in
//! configuration order and every index stored in them (`use_backend` targets, server
//! indices) points into the same `Config`. Ids are unique per kind (proxies across the
//! whole configuration, servers within their backend) and stable across generations when
//! the operator sets them with `id`.

pub mod acl;
pub mod auth;
pub mod backend;
pub mod balance;
pub mod cache;
pub mod check;
pub mod cli;
pub mod compression;
pub mod cookie;
pub mod cpu_map;
pub mod errorpages;
pub mod filter;
mod host;
pub mod listen;
pub mod loc;
pub mod log;
pub mod mail;
pub mod patterns;
pub mod pool;
pub mod resolvers;
pub mod rules;
pub mod sample;
pub mod sample_parse;
pub mod server_list;
pub mod state;
pub mod stats;
pub mod stick;
pub mod stream;
pub mod tls;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use sluice_config::{units, KwError};

use self::backend::{BackendConf, ReuseMode};
use self::balance::{Algo, BalanceConf};
use self::check::{AgentOpts, BackendCheck, CheckOpts, GlobalCheck};
use self::compression::{CompConf, GlobalComp};
use self::errorpages::ErrorPages;
use self::listen::ListenConf;
use self::log::{LogConf, LogTarget};
use self::pool::{PoolConf, PoolGlobal};
use self::rules::{FrontendRules, RuleSets, RulesConf};
use self::stream::StreamConf;

pub use self::host::hostname;
pub use self::loc::Loc;

/// Process-wide settings from the `global` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalConf {
    pub nbthread: Option<usize>,
    pub maxconn: Option<usize>,
    /// `maxconnrate`, `maxsessrate`, `maxsslrate` (the frontends' own limits stay empty
    /// here).
    pub rate_limits: listen::RateLimits,
    pub bufsize: usize,
    /// `tune.maxrewrite`: room a buffer keeps for rewriting a head (default 1024, at most
    /// half the buffer): a head must fit in the rest ([`GlobalConf::head_room`]).
    pub maxrewrite: usize,
    pub compression: GlobalComp,
    /// Every `stats socket` line.
    pub stats_sockets: Vec<cli::SocketConf>,
    /// `stats timeout`: how long the CLI waits for a command (10 s).
    pub stats_timeout: Option<Duration>,
    /// `pidfile`: where to write the process id.
    pub pidfile: Option<String>,
    /// `daemon`: detach from the terminal once listening.
    pub daemon: bool,
    /// `user`/`uid`, `group`/`gid`: who the process runs as once its sockets are open.
    pub user: Option<String>,
    pub group: Option<String>,
    /// `chroot`: the directory the process confines itself to once its sockets are open.
    pub chroot: Option<String>,
    pub pool: PoolGlobal,
    pub hard_stop_after: Option<Duration>,
    pub log: Vec<LogTarget>,
    pub log_settings: log::GlobalLog,
    pub check: GlobalCheck,
    pub tls: tls::TlsDefaults,
    /// `localpeer NAME`: this process's name in `peers` sections (else the host name).
    pub localpeer: Option<String>,
    /// `ulimit-n N`: the file descriptor limit to set (else derived from `maxconn`).
    pub ulimit_n: Option<u64>,
    /// `fd-hard-limit N`: the system's hard limit as the process sees it, when lower.
    pub fd_hard_limit: Option<u64>,
    /// `maxpipes N`: the most kernel pipes splicing may use (`transport::splice`).
    pub maxpipes: Option<u64>,
    /// `nosplice`: no splicing, whatever the proxies say.
    pub nosplice: bool,
    /// `tune.pipesize`: the size of splicing pipes (else the system's).
    pub pipesize: Option<usize>,
    /// `tune.listener.multi-queue on|fair|off`.
    pub dispatch: listen::Dispatch,
    /// `tune.listener.default-shards`: the sockets per `bind` without `shards`.
    pub default_shards: listen::Shards,
    /// `h1-case-adjust` and `h1-case-adjust-file`: header names spelled otherwise on
    /// HTTP/1 output where a proxy asks for it.
    pub case_adjust: stream::CaseAdjust,
    /// `tune.h2.*`.
    pub h2: stream::H2Tune,
    /// `tune.quic.*`, `cluster-secret`: the HTTP/3 front's settings.
    pub quic: stream::QuicTune,
    /// `server-state-file`, `server-state-base`.
    pub server_state: state::GlobalState,
    /// `set-var proc.NAME EXPR` / `set-var-fmt proc.NAME FMT`: process variables set once
    /// at start.
    pub proc_vars: Vec<(sample::VarName, ProcValue)>,
    /// `expose-experimental-directives`: the keywords HAProxy 2.6 calls experimental may
    /// be used (`http-request normalize-uri`).
    pub experimental: bool,
    /// `cpu-map`: the CPUs of each worker thread.
    pub cpu_map: cpu_map::CpuMap,
    /// `node NAME`: this node's name in `show info`, the statistics page and checks'
    /// `send-state` (else the host name).
    pub node: Option<String>,
    /// `description TEXT`: this node's description (`show info`, the statistics page).
    pub description: Option<String>,
    /// `setenv`, `presetenv`, `unsetenv`, `resetenv`: the environment as the configuration
    /// changed it (the process's own is left alone), which `env()` and `show env` read.
    pub env: sluice_config::Env,
    /// `tune.http.maxhdr`: the lines a head may have, its first line included (101).
    pub maxhdr: Option<usize>,
    /// `no strict-limits`: a descriptor limit that cannot be raised for `maxconn` or
    /// `ulimit-n` is warned of rather than refused (`strict-limits`, the default).
    pub loose_limits: bool,
    /// `master-worker`: the process runs as a master with a worker, as with `-W`.
    pub master_worker: bool,
    /// `mworker-max-reloads N`: a worker still running after more reloads than this gets
    /// SIGTERM from the master.
    pub mworker_max_reloads: Option<u32>,
    /// `noreuseport`: listening sockets without SO_REUSEPORT.
    pub noreuseport: bool,
    /// `quiet` (or `-q`): no message at start but warnings and errors.
    pub quiet: bool,
    /// `zero-warning` (or `-dW`): a configuration with warnings does not start.
    pub zero_warning: bool,
    /// `set-dumpable`: core dumps allowed again once the process changed its identity.
    pub dumpable: bool,
    /// `tune.rcvbuf.client`, `tune.sndbuf.client`.
    pub client_bufs: BufSizes,
    /// `tune.rcvbuf.server`, `tune.sndbuf.server`.
    pub server_bufs: BufSizes,
}

/// One side's socket buffer sizes (unset: the system's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufSizes {
    pub rcv: Option<usize>,
    pub snd: Option<usize>,
}

/// What a global `set-var` gives a process variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcValue {
    Expr(sample::Expr),
    Fmt(sample::Fmt),
}

impl Default for GlobalConf {
    fn default() -> Self {
        GlobalConf {
            nbthread: None,
            maxconn: None,
            rate_limits: Default::default(),
            bufsize: 16384,
            maxrewrite: 1024,
            compression: GlobalComp::default(),
            stats_sockets: Vec::new(),
            stats_timeout: None,
            pidfile: None,
            daemon: false,
            user: None,
            group: None,
            chroot: None,
            pool: PoolGlobal::default(),
            hard_stop_after: None,
            log: Vec::new(),
            log_settings: log::GlobalLog::default(),
            tls: tls::TlsDefaults::default(),
            check: GlobalCheck::default(),
            localpeer: None,
            ulimit_n: None,
            fd_hard_limit: None,
            maxpipes: None,
            nosplice: false,
            pipesize: None,
            dispatch: listen::Dispatch::default(),
            default_shards: listen::Shards::default(),
            h2: stream::H2Tune::default(),
            quic: stream::QuicTune::default(),
            case_adjust: Default::default(),
            server_state: Default::default(),
            proc_vars: Vec::new(),
            experimental: false,
            cpu_map: Default::default(),
            node: None,
            description: None,
            env: Default::default(),
            maxhdr: None,
            loose_limits: false,
            master_worker: false,
            mworker_max_reloads: None,
            noreuseport: false,
            quiet: false,
            zero_warning: false,
            dumpable: false,
            client_bufs: BufSizes::default(),
            server_bufs: BufSizes::default(),
        }
    }
}

impl GlobalConf {
    /// The most fields a request or response head may have (`tune.http.maxhdr` less the
    /// first line; 100 by default).
    pub fn max_fields(&self) -> usize {
        self.maxhdr.map_or(sluice_http::MAX_HEADERS, |n| n - 1)
    }

    /// The largest request or response head accepted: a buffer less `tune.maxrewrite`
    /// (capped at half the buffer, as HAProxy caps it).
    pub fn head_room(&self) -> usize {
        self.bufsize - self.maxrewrite.min(self.bufsize / 2)
    }

    /// What an HTTP/2 stream may have waiting in its connection's send queue: a few
    /// buffers. One buffer, as an HAProxy stream holds, cost 12% of the requests per
    /// CPU-second on 76 kB responses (h2load -m10, the relay and the connection's writer
    /// waking each other per buffer); four cost nothing measurable and bound a connection
    /// of 100 streams to 6.4 MB with the default `tune.bufsize`.
    pub fn h2_send_buffer(&self) -> usize {
        4 * self.bufsize
    }

    /// What a client connection's HTTP/2 streams may have queued for the client together
    /// (0: no limit): `tune.h2.fe.send-budget`, else 64 buffers, so that a connection of
    /// 100 streams whose client stops reading holds 1 MB, not 6.4 MB, with the default
    /// `tune.bufsize` (and less in all than HAProxy 2.6 holds for it). Tighter costs
    /// throughput: h2load over TLS on 76 kB responses (8 connections x 100 streams) lost
    /// 11 % of its requests per CPU-second with 32 buffers, 0-10 % (within this machine's
    /// noise) with 64, against 128 (bench/RESULTS.md, session 32).
    pub fn h2_send_budget(&self) -> usize {
        self.h2.send_budget.unwrap_or(64 * self.bufsize)
    }

    /// This node's name: `node`, else the host name.
    pub fn node_name(&self) -> String {
        self.node.clone().unwrap_or_else(hostname)
    }

    /// Worker threads: `nbthread`, else the CPUs available to the process.
    pub fn nbthread(&self) -> usize {
        self.nbthread
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// The settings of one proxy section as its keywords set them. Each part belongs to the
/// module that parses it.
#[derive(Debug, Clone, Default)]
pub struct ProxyConf {
    /// The line being parsed (set before each keyword is dispatched).
    pub at: Loc,
    /// `id`: the proxy's stable identifier.
    pub id: Option<u32>,
    /// `disabled` (`enabled` undoes it): the proxy is checked but not started.
    pub disabled: bool,
    pub listen: ListenConf,
    pub stream: StreamConf,
    pub backend: BackendConf,
    pub balance: BalanceConf,
    pub rules: RulesConf,
    pub compression: CompConf,
    /// `filter` lines.
    pub filters: filter::Filters,
    pub errors: ErrorPages,
    pub log: LogConf,
    pub check: BackendCheck,
    pub persist: cookie::PersistConf,
    /// `stick-table`: the proxy's table (named after it when the configuration is loaded).
    pub stick: Option<stick::TableConf>,
    pub monitor: stats::MonitorConf,
    pub stats: stats::StatsPage,
    /// `load-server-state-from-file`, `server-state-file-name`.
    pub load_state: state::LoadState,
    /// `email-alert ...`.
    pub email: mail::EmailAlertConf,
}

/// A validated frontend: what a listener needs to serve its connections.
#[derive(Debug)]
pub struct Frontend {
    /// The section's place among the proxy sections (statistics list proxies this way).
    pub order: usize,
    /// `disabled`: the frontend listens on nothing and the statistics do not show it.
    pub disabled: bool,
    pub id: u32,
    pub name: String,
    pub listen: ListenConf,
    pub stream: StreamConf,
    pub rules: FrontendRules,
    pub monitor: stats::MonitorConf,
    pub stats: stats::StatsPage,
    pub compression: CompConf,
    /// `filter trace` lines that speak.
    pub traces: Vec<filter::Trace>,
    pub errors: ErrorPages,
    pub log: LogConf,
}

/// A validated server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Unique within its backend.
    pub id: u32,
    pub name: String,
    /// Its address (unspecified for a unix socket server: its `unix` address instead).
    pub addr: SocketAddr,
    /// Where the port comes from: `addr`'s, or the client's (a server without a port).
    pub port: backend::PortMap,
    /// The unix socket the server listens on, instead of `addr`.
    pub unix: Option<listen::UnixAddr>,
    /// The configured weight (0 to 256); the live one is in the runtime.
    pub weight: u32,
    pub backup: bool,
    /// `disabled`: the server starts in maintenance.
    pub disabled: bool,
    pub pool: PoolConf,
    /// `maxconn`: requests served at once; more wait in the server's queue.
    pub maxconn: Option<usize>,
    /// `maxqueue`: requests allowed to wait; beyond it they get 503.
    pub maxqueue: Option<usize>,
    /// Health checks, when the server has `check`.
    pub check: Option<CheckOpts>,
    /// Its `rise`, which `show servers state` shows as the health of a server without
    /// `check`, as HAProxy does.
    pub rise: u32,
    /// The agent check, when the server has `agent-check`.
    pub agent: Option<AgentOpts>,
    /// `slowstart`: how long the weight takes to ramp up after the server comes back up.
    pub slowstart: Option<Duration>,
    /// `track`: the (backend, server) whose health this server takes.
    pub track: Option<(usize, usize)>,
    /// `on-marked-down shutdown-sessions`: going down or into maintenance ends its
    /// connections.
    pub shutdown_on_down: bool,
    /// `cookie VALUE`: what the persistence cookie holds for this server.
    pub cookie: Option<String>,
    /// TLS towards the server (`ssl`), built when the configuration is loaded.
    pub tls: Option<tls::Connector>,
    /// TLS for its health checks (`check-ssl`, or `ssl` without `no-check-ssl`).
    pub check_tls: Option<tls::Connector>,
    /// `proto h2`: the server is spoken to in HTTP/2 whatever TLS negotiates.
    pub h2: bool,
    /// `send-proxy*`: the PROXY protocol header each connection starts with.
    pub send_proxy: Option<backend::SendProxy>,
    /// `source`: the address connections to the server leave from (the server's, else the
    /// backend's; unset: the system's choice).
    pub source: Option<SocketAddr>,
    /// Added at run time (`add server`): another server's `track` may not name it.
    pub dynamic: bool,
    /// The name written for the server's address, when it is not an IP address
    /// (`srv_fqdn`).
    pub fqdn: Option<String>,
    /// How the server follows its name at run time (`resolvers`), filled by the loader.
    pub resolve: Option<resolvers::ServerResolve>,
    /// It starts in maintenance until its name resolves (`init-addr none`).
    pub unresolved: bool,
}

impl Server {
    /// Its connections speak for one client (a PROXY header, a port taken from the
    /// client's), so they are never shared with others.
    pub fn private_conns(&self) -> bool {
        self.send_proxy.is_some() || self.port != backend::PortMap::Fixed
    }
}

/// A validated backend.
#[derive(Debug)]
pub struct Backend {
    /// The section's place among the proxy sections (a `listen` shares it with its
    /// frontend side).
    pub order: usize,
    /// `disabled`: the backend has no server (requests routed to it get 503) and the
    /// statistics do not show it, as HAProxy's stopped proxies.
    pub disabled: bool,
    pub id: u32,
    pub name: String,
    pub servers: server_list::ServerList<Server>,
    /// `source`: where its connections leave from (a server's own wins).
    pub source: Option<SocketAddr>,
    pub algo: Algo,
    pub hash: balance::HashType,
    pub allbackups: bool,
    /// `hash-balance-factor`.
    pub balance_factor: Option<u32>,
    pub timeout_connect: Option<Duration>,
    pub timeout_server: Option<Duration>,
    pub timeout_queue: Option<Duration>,
    pub timeout_tunnel: Option<Duration>,
    pub timeout_server_fin: Option<Duration>,
    pub reuse: ReuseMode,
    /// Connection attempts after the first one fails.
    pub retries: usize,
    /// `retry-on`: what is worth another attempt.
    pub retry_on: backend::RetryOn,
    /// `fullconn`: what statistics show as the backend's session limit (else a tenth of
    /// the process's `maxconn`, HAProxy's default); servers' dynamic limits (`minconn`)
    /// are not built.
    pub fullconn: Option<usize>,
    pub redispatch: bool,
    pub abortonclose: bool,
    /// `option prefer-last-server`: a client connection's next request goes to the server
    /// of its last one while that is usable (unless the balancing is a hash).
    pub prefer_last_server: bool,
    /// `max-keep-alive-queue N`: the last server is kept only while at most N requests
    /// wait in its queue (0: only while it has room; `None`: whatever its queue).
    pub max_keep_alive_queue: Option<usize>,
    /// `option checkcache`: a response a shared cache could keep with its `Set-Cookie` is
    /// refused (HAProxy's rule: [`crate::cookie::cacheable_cookie`]).
    pub checkcache: bool,
    /// Connection-handling options set on the backend side.
    pub stream: StreamConf,
    pub rules: RuleSets,
    pub compression: CompConf,
    /// `filter trace` lines that speak (a `listen` section's are its frontend side's).
    pub traces: Vec<filter::Trace>,
    pub errors: ErrorPages,
    pub check: BackendCheck,
    pub persist: cookie::PersistConf,
    /// The statistics page, when requests routed here ask for it.
    pub stats: stats::StatsPage,
    /// Where health-check events go.
    pub log: LogConf,
    /// Where its servers' states at start come from.
    pub load_state: state::LoadState,
    /// The protocols its servers may be spoken to in.
    pub speaks: Speaks,
    /// What its servers' state changes mail (`email-alert`), filled by the loader.
    pub email: Option<mail::EmailAlert>,
}

/// The protocols a backend's servers may be spoken to in, known from the configuration
/// and from the servers added since (`add server` only ever adds one): a transaction
/// prepares its request head for those (a request may move to another server of the
/// backend before it leaves). An added server starts in maintenance, so the flag it sets
/// is seen before any request can go to it.
#[derive(Debug, Default)]
pub struct Speaks {
    /// Some server is not `proto h2`: it may be spoken to in HTTP/1.1.
    h1: std::sync::atomic::AtomicBool,
    /// Some server is `proto h2`, or offers `h2` in its TLS ALPN.
    h2: std::sync::atomic::AtomicBool,
}

impl Speaks {
    /// The protocols `servers` may be spoken to in.
    pub fn of<'a>(servers: impl IntoIterator<Item = &'a backend::ServerSpec>) -> Speaks {
        let speaks = Speaks::default();
        for s in servers {
            speaks.add(s);
        }
        speaks
    }

    /// Learns the protocols of one more server.
    pub fn add(&self, s: &backend::ServerSpec) {
        use std::sync::atomic::Ordering::Relaxed;
        let alpn_h2 = s.opts.tls.alpn.iter().any(|p| p.eq_ignore_ascii_case("h2"));
        if !s.opts.h2 {
            self.h1.store(true, Relaxed);
        }
        if s.opts.h2 || alpn_h2 {
            self.h2.store(true, Relaxed);
        }
    }

    pub fn h1(&self) -> bool {
        self.h1.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn h2(&self) -> bool {
        self.h2.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One validated configuration generation.
#[derive(Debug)]
pub struct Config {
    pub global: GlobalConf,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    /// Every stick table: a proxy's, named after it, and a `peers` section's own,
    /// named `SECTION/TABLE`.
    pub tables: Vec<stick::TableConf>,
    /// `peers` sections.
    pub peers: Vec<stick::PeersConf>,
    /// `resolvers` sections, in the order written.
    pub resolvers: Vec<resolvers::Resolvers>,
    /// `userlist` sections.
    pub userlists: Vec<auth::Userlist>,
    /// `cache` sections.
    pub caches: Vec<cache::CacheConf>,
    /// Its certificate files and the CLI's transactions on them.
    pub certs: std::sync::Arc<tls::CertStore>,
    /// The pattern lists of its ACLs and maps, by id (`show acl`, `add map`, ...).
    pub patterns: Vec<std::sync::Arc<patterns::PatternRef>>,
    /// What the configuration asks for that is ignored, worded as HAProxy warns of it
    /// (reported by `-c` and at start).
    pub warnings: Vec<String>,
}

impl Config {
    /// Whether the process has something to listen on: a frontend, or only a CLI socket
    /// (such a process still starts, as HAProxy's does).
    pub fn has_listener(&self) -> bool {
        !self.frontends.is_empty() || !self.global.stats_sockets.is_empty()
    }
}

/// What refusing to start without a listener says.
pub const NO_LISTENER: &str =
    "no enabled listener found (no frontend or listen section with a bind, and no stats socket): nothing to serve";

/// Returns the only argument, or an error naming what was expected.
pub fn one_arg<'a>(args: &'a [String], expects: &'static str) -> Result<&'a str, KwError> {
    match args {
        [] => Err(KwError::Missing(expects)),
        [a] => Ok(a),
        [_, extra, ..] => Err(KwError::Extra(extra.clone())),
    }
}

/// The value named by the only argument, one of `choices`' words; `expects` lists them
/// for the errors ("a, b or c").
pub fn one_of<T: Copy>(
    args: &[String],
    expects: &'static str,
    choices: &[(&str, T)],
) -> Result<T, KwError> {
    let word = one_arg(args, expects)?;
    choices
        .iter()
        .find(|(w, _)| *w == word)
        .map(|&(_, v)| v)
        .ok_or_else(|| KwError::bad(1, word, format!("expects {expects}")))
}

/// Parses a keyword's single number argument, from `min` to `max`.
pub fn u32_in(args: &[String], min: u32, max: u32) -> Result<u32, KwError> {
    let v = one_arg(args, "a number")?;
    v.parse::<u32>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| KwError::bad(1, v, format!("expects a number from {min} to {max}")))
}

/// Parses the single time argument of a `timeout` keyword.
pub fn time_arg(args: &[String]) -> Result<Duration, KwError> {
    let v = one_arg(args, "a time (e.g. 5s)")?;
    units::parse_time(v).map_err(|e| KwError::bad(1, v, e))
}

/// Resolves `host:port`, `[v6]:port` or `ipv4:port` (name resolution happens once, here).
pub fn resolve(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = s
        .rsplit_once(':')
        .ok_or("expects an address with a port (HOST:PORT)")?;
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("invalid port '{port}'"));
    }
    (host, port.parse::<u16>().unwrap_or(0))
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .next()
        .ok_or_else(|| format!("'{host}' has no address"))
}
