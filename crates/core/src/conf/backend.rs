//! Backend and server settings as their keywords set them.

use std::net::SocketAddr;
use std::time::Duration;

use super::check::CheckOpts;
use super::pool::PoolConf;

/// `http-reuse`: when a request may go over an idle connection from the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReuseMode {
    /// Server connections stay private to the client connection that opened them.
    Never,
    /// A client connection's first request always gets a new (or its own) connection.
    #[default]
    Safe,
    /// First requests may use connections that have already served several requests.
    Aggressive,
    /// Any idle connection may serve any request.
    Always,
}

/// Server settings as written (`server` or `default-server`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerOpts {
    /// `id`: the server's stable identifier within its backend.
    pub id: Option<u32>,
    /// Health-check options (`check`, `inter`, `rise`, ...).
    pub check: CheckOpts,
    pub weight: Option<u32>,
    pub backup: bool,
    pub disabled: bool,
    pub pool: PoolConf,
    /// `maxconn`: requests served at once; more wait in the server's queue.
    pub maxconn: Option<usize>,
    /// `maxqueue`: requests allowed to wait; beyond it they get 503.
    pub maxqueue: Option<usize>,
    /// `slowstart`: ramp-up time of the weight after the server comes back up.
    pub slowstart: Option<Duration>,
    /// `track [BACKEND/]SERVER`: take that server's health.
    pub track: Option<String>,
    /// `cookie VALUE`: the server's persistence cookie value.
    pub cookie: Option<String>,
    /// `ssl` and its options: connections to the server are TLS.
    pub tls: super::tls::ServerTlsOpts,
    /// `proto h2`: requests go to the server as HTTP/2 streams (prior knowledge).
    pub h2: bool,
    /// `send-proxy`, `send-proxy-v2[-ssl[-cn]]`, `proxy-v2-options`.
    pub send_proxy: Option<SendProxy>,
    /// `source ADDR[:PORT]`: the address connections to the server leave from.
    pub source: Option<std::net::SocketAddr>,
    /// `resolvers`, `resolve-*`, `init-addr`: following the server's name at run time.
    pub resolve: super::resolvers::ResolveOpts,
}

/// The PROXY protocol header sluice puts before each connection to a server: version 1
/// (text), or version 2 with the TLVs chosen (`proxy-v2-options`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendProxy {
    pub v2: bool,
    /// `ssl`: the client's TLS facts (a TLS client, its version); `cert-cn`: its
    /// certificate's common name; `ssl-cipher`, `cert-sig`, `cert-key`: the suite and the
    /// certificate's algorithms.
    pub ssl: bool,
    pub cert_cn: bool,
    pub cipher: bool,
    pub cert_sig: bool,
    pub cert_key: bool,
    /// `authority`: the SNI the client asked for; `unique-id`: the request's unique id;
    /// `crc32c`: a checksum of the header.
    pub authority: bool,
    pub unique_id: bool,
    pub crc32c: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: String,
    /// The server's address (unspecified for a unix socket server).
    pub addr: SocketAddr,
    pub port: PortMap,
    /// `unix@PATH`, `/PATH`, `abns@NAME`: the server listens on a unix socket.
    pub unix: Option<super::listen::UnixAddr>,
    /// The name written for the server's address, when it is not an IP address.
    pub fqdn: Option<String>,
    /// `init-addr none` left the server without an address: it starts in maintenance
    /// until its name resolves.
    pub unresolved: bool,
    pub opts: ServerOpts,
}

/// Which port a connection to a server goes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PortMap {
    /// The address's own port.
    #[default]
    Fixed,
    /// No port in the address: the port the client connected to.
    Client,
    /// `ADDR:+N` / `ADDR:-N`: the client's port moved by N.
    Offset(i32),
}

impl PortMap {
    /// The port to connect to, for a client that connected to `client_port`.
    pub fn port(self, own: u16, client_port: u16) -> u16 {
        match self {
            PortMap::Fixed => own,
            PortMap::Client => client_port,
            PortMap::Offset(n) => (i32::from(client_port) + n).clamp(1, 65535) as u16,
        }
    }
}

/// A backend's settings as its keywords set them.
#[derive(Debug, Clone, Default)]
pub struct BackendConf {
    pub servers: Vec<ServerSpec>,
    /// `dispatch ADDR:PORT`: where requests go in a backend without servers.
    pub dispatch: Option<std::net::SocketAddr>,
    pub default_server: ServerOpts,
    pub timeout_connect: Option<Duration>,
    pub timeout_server: Option<Duration>,
    pub timeout_queue: Option<Duration>,
    pub timeout_tunnel: Option<Duration>,
    pub timeout_server_fin: Option<Duration>,
    pub reuse: ReuseMode,
    /// `retries`: connection attempts after the first one fails (`None`: HAProxy's 3).
    pub retries: Option<usize>,
    /// `retry-on`: the failures worth another attempt.
    pub retry_on: RetryOn,
    pub redispatch: bool,
    pub abortonclose: bool,
    /// `option prefer-last-server`.
    pub prefer_last_server: bool,
    /// `max-keep-alive-queue N`.
    pub max_keep_alive_queue: Option<usize>,
    /// `option checkcache`.
    pub checkcache: bool,
    /// `fullconn N`.
    pub fullconn: Option<usize>,
    /// `source ADDR[:PORT]`: the address connections to the servers leave from (a
    /// server's own `source` wins).
    pub source: Option<std::net::SocketAddr>,
}

/// `retry-on`: the failures after which a request is tried again (within `retries`
/// attempts). The default, `conn-failure`, retries connections only; the others are
/// HAProxy's layer-7 retries, which sluice makes for requests without a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOn {
    /// The connection (or its TLS handshake) failed and nothing was sent.
    pub conn_failure: bool,
    /// The server closed after the request was sent, having answered nothing.
    pub empty_response: bool,
    /// The server answered something that is not an HTTP response.
    pub junk_response: bool,
    /// `timeout server` struck before the response's head.
    pub response_timeout: bool,
    /// Statuses retried, as a mask over [`RetryOn::STATUSES`].
    pub statuses: u16,
}

impl RetryOn {
    /// The statuses HAProxy 2.6 allows in `retry-on`.
    pub const STATUSES: [u16; 10] = [401, 403, 404, 408, 425, 500, 501, 502, 503, 504];

    /// Whether a response of `status` is retried.
    pub fn status(&self, status: u16) -> bool {
        Self::STATUSES
            .iter()
            .position(|&s| s == status)
            .is_some_and(|i| self.statuses & (1 << i) != 0)
    }

    /// Whether anything beyond a failed connection is retried.
    pub fn after_sending(&self) -> bool {
        self.empty_response || self.junk_response || self.response_timeout || self.statuses != 0
    }

    /// The mask bit of `status`, if `retry-on` takes it.
    pub fn status_bit(status: u16) -> Option<u16> {
        Self::STATUSES
            .iter()
            .position(|&s| s == status)
            .map(|i| 1 << i)
    }
}

impl Default for RetryOn {
    fn default() -> RetryOn {
        RetryOn {
            conn_failure: true,
            empty_response: false,
            junk_response: false,
            response_timeout: false,
            statuses: 0,
        }
    }
}

/// One row of a server option table, as HAProxy's `srv_kws`: the option's name, its number
/// of arguments, and the parser that writes it into [`ServerOpts`].
pub struct ServerOption {
    pub name: &'static str,
    /// One line of meaning, for the configuration reference.
    pub help: &'static str,
    pub args: usize,
    pub parse: fn(&mut ServerOpts, &[String]) -> Result<(), String>,
}
