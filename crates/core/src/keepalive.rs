//! TCP keepalive on client and server connections: `option clitcpka`, `option srvtcpka`,
//! `option tcpka` (both), and `clitcpka-idle|intvl|cnt`, `srvtcpka-idle|intvl|cnt`, as
//! HAProxy's; the kernel sends the probes. Unset figures keep the system's
//! (`net.ipv4.tcp_keepalive_*`).

use sluice_config::{flag_keywords, Keyword, KwError, Scope};

use crate::conf::stream::TcpKeepalive;
use crate::conf::{one_arg, time_arg, ProxyConf};
use crate::transport::Socket;

pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = flag_keywords![
    "option clitcpka", Scope::FE, "TCP keepalive on client connections",
        |c: &mut ProxyConf, on| c.stream.cli_ka.on = on;
    "option srvtcpka", Scope::BE, "TCP keepalive on server connections",
        |c: &mut ProxyConf, on| c.stream.srv_ka.on = on;
    "option tcpka", Scope::PROXY, "TCP keepalive on client and server connections",
        |c: &mut ProxyConf, on| { c.stream.cli_ka.on = on; c.stream.srv_ka.on = on; };
];

/// `clitcpka-*` and `srvtcpka-*`: the idle time before the first probe, the time between
/// probes, and how many unanswered probes end the connection.
pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "clitcpka-idle",
        scope: Scope::FE,
        help: "clitcpka-idle TIME: idle time before the first keepalive probe to a client",
        parse: |c, a| time_arg(a).map(|t| c.stream.cli_ka.idle = Some(t)),
    },
    Keyword {
        name: "clitcpka-intvl",
        scope: Scope::FE,
        help: "clitcpka-intvl TIME: time between keepalive probes to a client",
        parse: |c, a| time_arg(a).map(|t| c.stream.cli_ka.intvl = Some(t)),
    },
    Keyword {
        name: "clitcpka-cnt",
        scope: Scope::FE,
        help: "clitcpka-cnt N: unanswered keepalive probes before a client connection ends",
        parse: |c, a| count(a).map(|n| c.stream.cli_ka.cnt = Some(n)),
    },
    Keyword {
        name: "srvtcpka-idle",
        scope: Scope::BE,
        help: "srvtcpka-idle TIME: idle time before the first keepalive probe to a server",
        parse: |c, a| time_arg(a).map(|t| c.stream.srv_ka.idle = Some(t)),
    },
    Keyword {
        name: "srvtcpka-intvl",
        scope: Scope::BE,
        help: "srvtcpka-intvl TIME: time between keepalive probes to a server",
        parse: |c, a| time_arg(a).map(|t| c.stream.srv_ka.intvl = Some(t)),
    },
    Keyword {
        name: "srvtcpka-cnt",
        scope: Scope::BE,
        help: "srvtcpka-cnt N: unanswered keepalive probes before a server connection ends",
        parse: |c, a| count(a).map(|n| c.stream.srv_ka.cnt = Some(n)),
    },
];

fn count(a: &[String]) -> Result<u32, KwError> {
    let v = one_arg(a, "a number of probes")?;
    v.parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| KwError::bad(1, v, "expects a positive integer"))
}

/// Turns keepalive on for `conn` as `ka` says (nothing when it is off). A socket that
/// refuses is left as it is: keepalive is a hint, not a condition of service.
pub fn apply(conn: &Socket, ka: &TcpKeepalive) {
    if !ka.on {
        return;
    }
    let mut k = socket2::TcpKeepalive::new();
    if let Some(t) = ka.idle {
        k = k.with_time(t);
    }
    if let Some(t) = ka.intvl {
        k = k.with_interval(t);
    }
    if let Some(n) = ka.cnt {
        k = k.with_retries(n);
    }
    conn.set_keepalive(&k);
}
