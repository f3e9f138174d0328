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

/// `mode`: what a proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Http,
    /// Bytes relayed as they are, both ways (see `tcp`).
    Tcp,
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
    /// `option http-buffer-request`: rules wait for the request body (`req.body`).
    pub buffer_request: bool,
    /// `timeout tarpit`: how long `tarpit` holds a request (default: `timeout connect`).
    pub timeout_tarpit: Option<Duration>,
}
