//! Per-proxy settings of the data path: mode, client-side timeouts, forwarding options.

use std::net::IpAddr;
use std::time::Duration;

/// How connections are kept alive (`option http-server-close`, `option httpclose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum CloseMode {
    #[default]
    KeepAlive,
    /// Client side kept alive, server connection closed after each response.
    ServerClose,
    /// Both sides closed after each response.
    Close,
}

/// `option forwardfor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardFor {
    pub header: String,
    /// Clients in this network (address, prefix length) get no header.
    pub except: Option<(IpAddr, u8)>,
    pub if_none: bool,
}

/// The HTTP/3 front's settings (`tune.quic.*`, `cluster-secret`), HAProxy 2.6's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicTune {
    /// `tune.quic.frontend.max-streams-bidi`: request streams a client may open at once.
    pub max_streams_bidi: u32,
    /// `tune.quic.frontend.max-idle-timeout`: a connection silent this long is gone.
    pub max_idle_timeout: std::time::Duration,
    /// `tune.quic.frontend.conn-tx-buffers.limit`: what a connection may have sent and not
    /// acknowledged yet, in buffers of `tune.bufsize`.
    pub tx_buffers: u32,
    /// `tune.quic.retry-threshold`: half-open connections past which a new client must
    /// prove its address (a Retry) first.
    pub retry_threshold: u32,
    /// `cluster-secret`: the keys of stateless resets and Retry tokens derive from it, so
    /// that every worker (and node) sharing it agrees on them.
    pub cluster_secret: Option<String>,
}

impl Default for QuicTune {
    fn default() -> Self {
        QuicTune {
            max_streams_bidi: 100,
            max_idle_timeout: std::time::Duration::from_secs(30),
            tx_buffers: 30,
            retry_threshold: 100,
            cluster_secret: None,
        }
    }
}

/// The HTTP/2 front's settings (`tune.h2.*`), HAProxy's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Tune {
    /// `tune.h2.header-table-size`: the HPACK table a client may make us keep.
    pub header_table_size: u32,
    /// `tune.h2.initial-window-size`: what a client may send on a stream before we read.
    pub initial_window_size: u32,
    /// `tune.h2.max-concurrent-streams`: streams a client may have open at once.
    pub max_concurrent_streams: u32,
    /// `tune.h2.max-frame-size`: the largest frame we send.
    pub max_frame_size: u32,
    /// `tune.h2.fe.send-budget` (sluice's own): what a client connection's streams may
    /// have queued for the client together, in bytes (`None`: 128 x `tune.bufsize`; 0: no
    /// limit).
    pub send_budget: Option<usize>,
    /// `h2-workaround-bogus-websocket-clients`: SETTINGS_ENABLE_CONNECT_PROTOCOL is not
    /// sent, so clients open WebSockets over HTTP/1.1.
    pub no_extended_connect: bool,
}

impl Default for H2Tune {
    fn default() -> Self {
        H2Tune {
            header_table_size: 4096,
            initial_window_size: 65535,
            max_concurrent_streams: 100,
            max_frame_size: 16384,
            send_budget: None,
            no_extended_connect: false,
        }
    }
}

/// TCP keepalive on one side's connections, as the kernel does it (`option clitcpka`,
/// `option srvtcpka`, `option tcpka`, and their `-idle`, `-intvl`, `-cnt` settings; unset
/// ones keep the system's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpKeepalive {
    pub on: bool,
    pub idle: Option<Duration>,
    pub intvl: Option<Duration>,
    pub cnt: Option<u32>,
}

/// `mode`: what a proxy speaks. TCP unless `mode http` is set, as in HAProxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    Http,
    /// Bytes relayed as they are, both ways (see `tcp`).
    #[default]
    Tcp,
}

/// `option http-restrict-req-hdr-names`: request fields whose names hold other characters
/// than `[A-Za-z0-9-]` (which FastCGI and some servers would confuse with others, `X_A`
/// with `X-A`), after the proxy's `http-request` rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RestrictNames {
    /// Kept (HAProxy's default without a FastCGI application).
    #[default]
    Preserve,
    /// Removed.
    Delete,
    /// The request is denied with 403.
    Reject,
}

/// The directions kernel splicing may move (`option splice-*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Splice {
    /// Client to server: a `mode tcp` stream's bytes, an HTTP request body of known
    /// length (`splice-request`).
    pub request: bool,
    /// Server to client: a `mode tcp` stream's bytes, an HTTP response body of known
    /// length (`splice-response`).
    pub response: bool,
}

impl Splice {
    /// Either side's (frontend, backend) settings.
    pub fn or(self, other: Splice) -> Splice {
        Splice {
            request: self.request || other.request,
            response: self.response || other.response,
        }
    }
}

/// Per-proxy settings of the stream layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamConf {
    pub mode: Mode,
    pub timeout_client: Option<Duration>,
    pub timeout_http_request: Option<Duration>,
    pub timeout_keep_alive: Option<Duration>,
    pub timeout_client_fin: Option<Duration>,
    pub forwardfor: Option<ForwardFor>,
    /// `option originalto`: the address the client connected to, in a header (`except`
    /// matches that address; `if_none` is unused).
    pub originalto: Option<ForwardFor>,
    pub close_mode: CloseMode,
    /// `option http-pretend-keepalive`: a request to a server the proxy will close the
    /// connection to after the response does not say so (some servers stop chunking
    /// responses of unknown length when told).
    pub pretend_keepalive: bool,
    /// `option h1-case-adjust-bogus-client`: responses to HTTP/1 clients get the
    /// `h1-case-adjust` spellings.
    pub case_adjust_client: bool,
    /// `option h1-case-adjust-bogus-server`: requests to HTTP/1 servers get them.
    pub case_adjust_server: bool,
    /// `option independent-streams`: bytes written to this proxy's side of a tunnel do
    /// not count as its activity (only what it sends does).
    pub independent: bool,
    /// `option contstats`: a stream's bytes are counted as they move rather than when it
    /// ends (TCP streams; an HTTP transaction counts when it ends).
    pub contstats: bool,
    /// `option splice-request|splice-response|splice-auto`: what is spliced
    /// (`transport::splice`), the frontend's or the backend's saying so.
    pub splice: Splice,
    /// `option http-restrict-req-hdr-names`: what becomes of request fields whose names
    /// hold other characters than letters, digits and `-`.
    pub restrict_names: RestrictNames,
    /// `option http-buffer-request`: rules wait for the request body (`req.body`).
    pub buffer_request: bool,
    /// `option accept-invalid-http-request`: the three HTTP/1 strictnesses of sluice's
    /// that HAProxy does not have are relaxed to HAProxy's behaviour (docs/h1-strictness.md:
    /// A1, D1, userinfo in D3).
    pub accept_invalid_request: bool,
    /// `option accept-invalid-http-response`: server responses are read as HAProxy reads
    /// them with the option (`sluice_http::parse_response_limited`'s `relaxed`).
    pub accept_invalid_response: bool,
    /// `timeout tarpit`: how long `tarpit` holds a request (default: `timeout connect`).
    pub timeout_tarpit: Option<Duration>,
    /// TCP keepalive towards clients (frontends) and servers (backends).
    pub cli_ka: TcpKeepalive,
    pub srv_ka: TcpKeepalive,
    /// `http-send-name-header NAME`: the server's name in this field of each request
    /// (the client's own removed), lower case.
    pub send_name_header: Option<String>,
    /// `option disable-h2-upgrade`: a client opening an HTTP/1 connection with HTTP/2's
    /// preface is refused rather than served as HTTP/2.
    pub disable_h2_upgrade: bool,
    /// `option nolinger`: connections (the frontend's to clients, the backend's to
    /// servers) end with a reset rather than a FIN, nothing left lingering in the kernel.
    pub nolinger: bool,
    /// `option http-use-proxy-header`: a request whose target is not a path (`/...` or
    /// `*`: an absolute URI or a CONNECT authority) is one for a proxy; see
    /// [`StreamConf::auth_fields`].
    pub use_proxy_header: bool,
    /// `no option idle-close-on-response`: at a soft stop, an HTTP/1 connection idle
    /// between requests is closed at once (HAProxy 2.6's default). sluice's default, the
    /// option, answers its next request with `Connection: close` instead, so that a
    /// client sending one as the stop begins loses nothing.
    pub close_idle_at_stop: bool,
}

/// The fields credentials travel in: `Authorization`, answered by `WWW-Authenticate` and
/// 401, or, for a proxy, `Proxy-Authorization`, `Proxy-Authenticate` and 407.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthFields {
    /// The request field read (lower case).
    pub credentials: &'static str,
    /// The response field asking for them.
    pub challenge: &'static str,
    pub status: u16,
}

impl StreamConf {
    /// Where a frontend's request with this target carries credentials: HAProxy's
    /// proxy fields when `option http-use-proxy-header` is set and the target is not a
    /// path.
    pub fn auth_fields(&self, target: &[u8]) -> AuthFields {
        let for_proxy = self.use_proxy_header && !matches!(target.first(), Some(b'/' | b'*'));
        if for_proxy {
            AuthFields {
                credentials: "proxy-authorization",
                challenge: "Proxy-Authenticate",
                status: 407,
            }
        } else {
            AuthFields {
                credentials: "authorization",
                challenge: "WWW-Authenticate",
                status: 401,
            }
        }
    }
}

/// `h1-case-adjust FROM TO` (and the lines of `h1-case-adjust-file`): header names
/// written otherwise to HTTP/1 clients (`option h1-case-adjust-bogus-client`) or servers
/// (`option h1-case-adjust-bogus-server`), by their lower-case spelling. A spelling
/// differs from its name only by case, so a head is adjusted in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaseAdjust {
    pub names: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    /// The last `h1-case-adjust-file`'s pairs (a later file replaces them).
    pub file: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
}

impl CaseAdjust {
    /// Adds `from` (lower case) spelled `to`; an error names what is wrong with the pair.
    pub fn add(&mut self, from: &str, to: &str) -> Result<(), String> {
        if from.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!("header name '{from}' must be in lower case"));
        }
        if !from.eq_ignore_ascii_case(to) {
            return Err(format!("'{to}' must differ from '{from}' only by its case"));
        }
        if self.names.insert(from.into(), to.into()).is_some() {
            return Err(format!("duplicate entry for '{from}'"));
        }
        Ok(())
    }

    /// Respells the field names of the HTTP/1 head at the start of `head` (its first line
    /// left alone) that have an adjustment.
    pub fn apply(&self, head: &mut [u8]) {
        if self.names.is_empty() && self.file.is_empty() {
            return;
        }
        let mut at = head
            .iter()
            .position(|&b| b == b'\n')
            .map_or(head.len(), |i| i + 1);
        while at < head.len() {
            let end = head[at..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(head.len(), |i| at + i + 1);
            let line = &head[at..end];
            if line == b"\r\n" || line == b"\n" {
                return;
            }
            if let Some(colon) = line.iter().position(|&b| b == b':') {
                let lower = line[..colon].to_ascii_lowercase();
                if let Some(to) = self.names.get(&lower).or_else(|| self.file.get(&lower)) {
                    head[at..at + colon].copy_from_slice(to);
                }
            }
            at = end;
        }
    }
}
