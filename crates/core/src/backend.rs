//! Backends and their servers: `server`, `default-server`, `timeout connect|server|queue|
//! tunnel|server-fin`, `retries`, `option redispatch`, `option abortonclose` and
//! `http-reuse`, parsed into `conf::backend` and lowered into [`conf::Backend`].

use sluice_config::{units, Keyword, KwError, Scope};

pub use crate::conf::backend::*;
use crate::conf::resolvers::InitAddr;
use crate::conf::{one_arg, one_of, resolve, time_arg, Backend, ProxyConf, Server, Speaks};

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "server",
        scope: Scope::BACKEND,
        help: "server NAME ADDR:PORT [weight N] [backup] [disabled]: declare a server",
        parse: parse_server,
    },
    Keyword {
        name: "server-template",
        scope: Scope::BACKEND,
        help: "server-template PREFIX NUM|FIRST-LAST FQDN[:PORT] [options]: declare servers PREFIX<n> that share a name's addresses (resolvers)",
        parse: parse_server_template,
    },
    Keyword {
        name: "source",
        scope: Scope::BE,
        help: "source ADDR[:PORT]: the address connections to the servers leave from",
        parse: |c, args| match args {
            [addr] => {
                c.backend.source = Some(source_addr(addr).map_err(|e| KwError::bad(1, addr, e))?);
                Ok(())
            }
            [_, extra, ..] => Err(KwError::Invalid(format!(
                "source option '{extra}': not supported yet (usesrc, interface: no transparent proxying or device binding)"
            ))),
            [] => Err(KwError::Missing("an address (ADDR[:PORT])")),
        },
    },
    Keyword {
        name: "dispatch",
        scope: Scope::BACKEND,
        help: "dispatch ADDR:PORT: the one destination of a backend without servers (shown as server 'dispatch')",
        parse: |c, args| {
            let v = crate::conf::one_arg(args, "an address (ADDR:PORT)")?;
            c.backend.dispatch = Some(resolve(v).map_err(|e| KwError::bad(1, v, e))?);
            Ok(())
        },
    },
    Keyword {
        name: "default-server",
        scope: Scope::BE,
        help: "default-server [options]: options applied to every following server",
        parse: |c, args| {
            let mut opts = c.backend.default_server.clone();
            parse_opts(&mut opts, args, 0)?;
            if opts.id.is_some() {
                return Err(KwError::Invalid(
                    "'id' applies to one server: it is not allowed on default-server".into(),
                ));
            }
            c.backend.default_server = opts;
            Ok(())
        },
    },
    Keyword {
        name: "timeout connect",
        scope: Scope::BE,
        help: "timeout connect TIME: maximum time to establish a server connection",
        parse: |c, a| time_arg(a).map(|t| c.backend.timeout_connect = Some(t)),
    },
    Keyword {
        name: "timeout server",
        scope: Scope::BE,
        help: "timeout server TIME: maximum inactivity time on the server side",
        parse: |c, a| time_arg(a).map(|t| c.backend.timeout_server = Some(t)),
    },
    Keyword {
        name: "timeout queue",
        scope: Scope::BE,
        help:
            "timeout queue TIME: longest wait in a full server's queue (default: timeout connect)",
        parse: |c, a| time_arg(a).map(|t| c.backend.timeout_queue = Some(t)),
    },
    Keyword {
        name: "timeout tunnel",
        scope: Scope::BE,
        help: "timeout tunnel TIME: inactivity limit of an upgraded (WebSocket) connection",
        parse: |c, a| time_arg(a).map(|t| c.backend.timeout_tunnel = Some(t)),
    },
    Keyword {
        name: "timeout server-fin",
        scope: Scope::BE,
        help: "timeout server-fin TIME: inactivity limit on the server side once the client side has closed",
        parse: |c, a| time_arg(a).map(|t| c.backend.timeout_server_fin = Some(t)),
    },
    Keyword {
        name: "fullconn",
        scope: Scope::BE,
        help: "fullconn N: the backend's load for servers' dynamic limits (minconn, not built yet); its session limit in statistics (slim)",
        parse: |c, a| {
            let v = one_arg(a, "a connection count")?;
            let n = v
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| KwError::bad(1, v, "expects a positive integer"))?;
            c.backend.fullconn = Some(n);
            Ok(())
        },
    },
    Keyword {
        name: "retries",
        scope: Scope::BE,
        help: "retries N: new connection attempts after a failed one (default 3)",
        parse: |c, a| {
            let v = one_arg(a, "a count")?;
            c.backend.retries = Some(
                v.parse()
                    .map_err(|_| KwError::bad(1, v, "expects a count"))?,
            );
            Ok(())
        },
    },
    Keyword {
        name: "max-keep-alive-queue",
        scope: Scope::BE,
        help: "max-keep-alive-queue N: a request stays on the server of its client connection's last one (option prefer-last-server) only while at most N requests wait in that server's queue (0: only while it has room; -1: whatever its queue, the default)",
        parse: |c, a| {
            let v = one_arg(a, "a queue length, or -1")?;
            c.backend.max_keep_alive_queue = match v.parse::<i64>() {
                Ok(-1) => None,
                Ok(n) if n >= 0 => Some(n as usize),
                _ => return Err(KwError::bad(1, v, "expects a queue length, or -1 for no limit")),
            };
            Ok(())
        },
    },
    Keyword {
        name: "retry-on",
        scope: Scope::BE,
        help: "retry-on none|conn-failure|empty-response|junk-response|response-timeout|0rtt-rejected|all-retryable-errors|STATUS...: the failures retried (default conn-failure; others only for requests without a body)",
        parse: |c, a| {
            c.backend.retry_on = parse_retry_on(a)?;
            Ok(())
        },
    },
    Keyword {
        name: "option redispatch",
        scope: Scope::BE,
        help: "option redispatch: the last connection retry goes to another server",
        parse: |c, a| match a.first() {
            Some(x) => Err(KwError::bad(
                1,
                x,
                "redispatch intervals are not supported yet",
            )),
            None => {
                c.backend.redispatch = true;
                Ok(())
            }
        },
    },
    Keyword {
        name: "no option redispatch",
        scope: Scope::BE,
        help: "no option redispatch: cancel an inherited option redispatch",
        parse: |c, _| {
            c.backend.redispatch = false;
            Ok(())
        },
    },
    Keyword {
        name: "http-reuse",
        scope: Scope::BE,
        help: "http-reuse never|safe|aggressive|always: sharing of idle server connections",
        parse: |c, a| {
            let choices = [
                ("never", ReuseMode::Never),
                ("safe", ReuseMode::Safe),
                ("aggressive", ReuseMode::Aggressive),
                ("always", ReuseMode::Always),
            ];
            c.backend.reuse = one_of(a, "never, safe, aggressive or always", &choices)?;
            Ok(())
        },
    },
];

/// Boolean backend options (`NAME` and `no NAME`).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option abortonclose", Scope::BE, "drop a queued request whose client has gone",
        |c: &mut ProxyConf, on| c.backend.abortonclose = on;
    "option checkcache", Scope::BE, "refuse a response that a shared cache could keep with its Set-Cookie (HAProxy's rules), answering the page of its status instead",
        |c: &mut ProxyConf, on| c.backend.checkcache = on;
    "option prefer-last-server", Scope::BE, "a client connection's requests go to the server of its last one while it is usable (unless the balancing is a hash)",
        |c: &mut ProxyConf, on| c.backend.prefer_last_server = on;
];

/// Every server option (`server` and `default-server` lines), in table order, for the
/// configuration reference; then the options HAProxy has that are refused as not
/// supported yet.
pub fn server_options() -> (Vec<&'static ServerOption>, &'static [&'static str]) {
    let all = SERVER_OPTION_TABLES.iter().flat_map(|t| t.iter()).collect();
    (all, PENDING_SERVER_OPTIONS)
}

/// The server options of every feature: this module's, then the health checks', ...
const SERVER_OPTION_TABLES: &[&[ServerOption]] = &[
    SERVER_OPTIONS,
    crate::check::SERVER_OPTIONS,
    crate::cookie::SERVER_OPTIONS,
    crate::tls::SERVER_OPTIONS,
    crate::pool::h2::SERVER_OPTIONS,
    crate::proxy_proto::SERVER_OPTIONS,
    crate::dns::SERVER_OPTIONS,
];

const SERVER_OPTIONS: &[ServerOption] = &[
    ServerOption {
        name: "source",
        help: "ADDR[:PORT]: the address connections to the server leave from",
        args: 1,
        parse: |o, a| {
            o.source = Some(source_addr(&a[0])?);
            Ok(())
        },
    },
    ServerOption {
        name: "id",
        help: "N: the server's stable numeric identifier",
        args: 1,
        parse: |o, a| {
            let id: u32 = a[0]
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| "expects a positive integer".to_string())?;
            o.id = Some(id);
            Ok(())
        },
    },
    ServerOption {
        name: "weight",
        help: "N: its share of the load (0-256, default 1)",
        args: 1,
        parse: |o, a| {
            let w: u32 = a[0]
                .parse()
                .map_err(|_| "expects an integer from 0 to 256".to_string())?;
            if w > 256 {
                return Err("expects an integer from 0 to 256".into());
            }
            o.weight = Some(w);
            Ok(())
        },
    },
    ServerOption {
        name: "slowstart",
        help: "TIME: after coming up, its weight grows from nothing over this time",
        args: 1,
        parse: |o, a| {
            let t = units::parse_time(&a[0])?;
            o.slowstart = (!t.is_zero()).then_some(t);
            Ok(())
        },
    },
    ServerOption {
        name: "track",
        help: "[BACKEND/]SERVER: take that server's health instead of checking",
        args: 1,
        parse: |o, a| {
            o.track = Some(a[0].clone());
            Ok(())
        },
    },
    ServerOption {
        name: "backup",
        help: "used only when no active server is up",
        args: 0,
        parse: |o, _| {
            o.backup = true;
            Ok(())
        },
    },
    ServerOption {
        name: "no-backup",
        help: "undo backup (from default-server)",
        args: 0,
        parse: |o, _| {
            o.backup = false;
            Ok(())
        },
    },
    ServerOption {
        name: "maxconn",
        help: "N: requests in progress on the server at once (the rest queue)",
        args: 1,
        parse: |o, a| {
            let n: usize = a[0]
                .parse()
                .map_err(|_| "expects a count (0: unlimited)".to_string())?;
            o.maxconn = (n > 0).then_some(n);
            Ok(())
        },
    },
    ServerOption {
        name: "maxqueue",
        help: "N: requests waiting for it at most (then another server, or 503)",
        args: 1,
        parse: |o, a| {
            let n: usize = a[0]
                .parse()
                .map_err(|_| "expects a count (0: unlimited)".to_string())?;
            o.maxqueue = (n > 0).then_some(n);
            Ok(())
        },
    },
    ServerOption {
        name: "pool-max-conn",
        help: "N: idle connections kept to it per process (-1: no limit)",
        args: 1,
        parse: |o, a| {
            let n: i64 = a[0]
                .parse()
                .map_err(|_| "expects -1 (unlimited) or a count".to_string())?;
            o.pool.max_conn = match n {
                -1 => None,
                n if n >= 0 => Some(n as usize),
                _ => return Err("expects -1 (unlimited) or a count".into()),
            };
            Ok(())
        },
    },
    ServerOption {
        name: "pool-low-conn",
        help: "N: below this many idle connections on a worker, take one from a sibling rather than open one",
        args: 1,
        parse: |o, a| {
            o.pool.low_conn = a[0].parse().map_err(|_| "expects a count".to_string())?;
            Ok(())
        },
    },
    ServerOption {
        name: "pool-purge-delay",
        help: "TIME: how often surplus idle connections are closed",
        args: 1,
        parse: |o, a| {
            o.pool.purge_delay = units::parse_time(&a[0])?;
            Ok(())
        },
    },
    ServerOption {
        name: "disabled",
        help: "start in maintenance",
        args: 0,
        parse: |o, _| {
            o.disabled = true;
            Ok(())
        },
    },
    ServerOption {
        name: "enabled",
        help: "undo disabled (from default-server)",
        args: 0,
        parse: |o, _| {
            o.disabled = false;
            Ok(())
        },
    },
];

/// `source`'s address: `IP` or `IP:PORT` (port 0 or none: the system picks one).
fn source_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(a) = s.parse::<std::net::SocketAddr>() {
        return Ok(a);
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<std::net::IpAddr>()
        .map(|ip| std::net::SocketAddr::new(ip, 0))
        .map_err(|_| "expects an IP address or IP:PORT (no port range, no name)".to_string())
}

/// Server options HAProxy has that belong to features not built yet.
const PENDING_SERVER_OPTIONS: &[&str] = &[
    "minconn",
    "max-reuse",
    "pool-conn-name",
    "strict-maxconn",
    "idle-ping",
    "check-send-proxy",
    "check-via-socks4",
    "usesrc",
    "interface",
    "redir",
];

fn parse_opts(opts: &mut ServerOpts, args: &[String], offset: usize) -> Result<(), KwError> {
    let mut i = 0;
    while i < args.len() {
        let word = args[i].as_str();
        let found = SERVER_OPTION_TABLES
            .iter()
            .flat_map(|t| t.iter())
            .find(|o| o.name == word);
        let Some(opt) = found else {
            if PENDING_SERVER_OPTIONS.contains(&word) {
                return Err(KwError::Invalid(format!(
                    "server option '{word}': not supported yet"
                )));
            }
            return Err(KwError::bad(offset + i + 1, word, "unknown server option"));
        };
        if i + 1 + opt.args > args.len() {
            return Err(KwError::Invalid(format!(
                "server option '{word}' expects {} argument(s)",
                opt.args
            )));
        }
        (opt.parse)(opts, &args[i + 1..i + 1 + opt.args])
            .map_err(|e| KwError::bad(offset + i + 2, args.get(i + 1).map_or("", |s| s), e))?;
        i += 1 + opt.args;
    }
    Ok(())
}

fn parse_server(c: &mut ProxyConf, args: &[String]) -> Result<(), KwError> {
    let [name, addr, rest @ ..] = args else {
        return Err(KwError::Missing(
            "a name and an address (server NAME ADDR:PORT [options])",
        ));
    };
    if c.backend.servers.iter().any(|s| &s.name == name) {
        return Err(KwError::bad(
            1,
            name,
            "a server with this name already exists in this backend",
        ));
    }
    let mut opts = c.backend.default_server.clone();
    parse_opts(&mut opts, rest, 2)?;
    let (start, unix) = match crate::conf::listen::UnixAddr::parse(addr) {
        Some(unix) => {
            let unix = unix.map_err(|e| KwError::bad(2, addr, e))?;
            let start = StartAddr {
                addr: ([0, 0, 0, 0], 0).into(),
                map: PortMap::Fixed,
                fqdn: None,
                unresolved: false,
            };
            (start, Some(unix))
        }
        None => {
            let init = opts.resolve.init_addr.as_deref();
            let start = server_addr(addr, init).map_err(|e| KwError::bad(2, addr, e))?;
            (start, None)
        }
    };
    if let Some(id) = opts.id {
        if let Some(other) = c.backend.servers.iter().find(|s| s.opts.id == Some(id)) {
            return Err(KwError::Invalid(format!(
                "server id {id} is already used by server '{}'",
                other.name
            )));
        }
    }
    c.backend.servers.push(ServerSpec {
        name: name.clone(),
        addr: start.addr,
        port: start.map,
        unix,
        fqdn: start.fqdn,
        unresolved: start.unresolved,
        opts,
    });
    Ok(())
}

/// `server-template PREFIX NUM|FIRST-LAST FQDN[:PORT] [options]`: servers PREFIX<n>, n from
/// 1 to NUM (or FIRST to LAST), each a `server` line of its own with the same address and
/// options; with `resolvers`, the addresses the name resolves to are shared out among
/// them (`crate::dns`).
fn parse_server_template(c: &mut ProxyConf, args: &[String]) -> Result<(), KwError> {
    let [prefix, count, addr, rest @ ..] = args else {
        return Err(KwError::Missing(
            "a prefix, a number or range and an address (server-template PREFIX NUM|FIRST-LAST FQDN[:PORT] [options])",
        ));
    };
    let range = match count.split_once('-') {
        Some((a, b)) => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()),
        None => count.parse::<u32>().ok().map(|n| (1, n)),
    }
    .filter(|&(a, b)| a >= 1 && a <= b && b - a < 65536)
    .ok_or_else(|| KwError::bad(2, count, "expects a number or a range FIRST-LAST from 1"))?;
    for n in range.0..=range.1 {
        let mut line = vec![format!("{prefix}{n}"), addr.clone()];
        line.extend(rest.iter().cloned());
        parse_server(c, &line)?;
    }
    Ok(())
}

/// A server's address as written: its host (an IP address or a name), its port, and how
/// the port is chosen.
struct WrittenAddr<'a> {
    host: &'a str,
    port: u16,
    map: PortMap,
}

/// Splits `ADDR:PORT`, `ADDR` (the client's port is kept), `ADDR:+N`/`ADDR:-N` (the
/// client's, moved), IPv6 bare or in brackets, as HAProxy reads them.
fn split_addr(a: &str) -> Result<WrittenAddr<'_>, String> {
    let client = |host| WrittenAddr {
        host,
        port: 0,
        map: PortMap::Client,
    };
    if a.parse::<std::net::Ipv6Addr>().is_ok() {
        return Ok(client(a));
    }
    if let Some(inner) = a.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Ok(client(inner));
    }
    let Some((host, port)) = a.rsplit_once(':') else {
        return Ok(client(a));
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if port.is_empty() {
        return Ok(client(host));
    }
    if port.starts_with(['+', '-']) {
        let n: i32 = port
            .parse()
            .ok()
            .filter(|n: &i32| n.abs() < 65536)
            .ok_or_else(|| format!("invalid port offset '{port}'"))?;
        return Ok(WrittenAddr {
            host,
            port: 0,
            map: PortMap::Offset(n),
        });
    }
    let port: u16 = port.parse().map_err(|_| format!("invalid port '{port}'"))?;
    // Port 0 is no port: nothing can be reached there.
    let map = if port == 0 {
        PortMap::Client
    } else {
        PortMap::Fixed
    };
    Ok(WrittenAddr { host, port, map })
}

/// Where a server is at start.
struct StartAddr {
    addr: std::net::SocketAddr,
    map: PortMap,
    /// The name written, when it is not an IP address.
    fqdn: Option<String>,
    /// `init-addr none` left it without an address.
    unresolved: bool,
}

/// A server's address at start: an IP address as written, or its name resolved by the
/// first of the `init-addr` methods that gives one (HAProxy's default: `last,libc`). The
/// server-state file is read once the configuration is loaded (`control::state_file`):
/// a `last` written out, when nothing after it gives an address, leaves the server
/// waiting for that file or its resolution rather than refusing the configuration.
fn server_addr(a: &str, init: Option<&[InitAddr]>) -> Result<StartAddr, String> {
    let w = split_addr(a)?;
    // An SRV name (`_service._proto.name`): its records give address and port, so the
    // port is the record's, and the server waits for them unless told otherwise.
    let srv = w.host.starts_with('_');
    let start = |ip, fqdn, unresolved| StartAddr {
        addr: std::net::SocketAddr::new(ip, w.port),
        map: if srv { PortMap::Fixed } else { w.map },
        fqdn,
        unresolved,
    };
    if let Ok(ip) = w.host.parse::<std::net::IpAddr>() {
        return Ok(start(ip, None, false));
    }
    let fqdn = Some(w.host.to_string());
    if srv && init.is_none() {
        return Ok(start([0, 0, 0, 0].into(), fqdn, true));
    }
    let mut failed = format!("cannot resolve '{}'", w.host);
    for method in init.unwrap_or(&[InitAddr::Last, InitAddr::Libc]) {
        match method {
            InitAddr::Last => {}
            InitAddr::Libc => match resolve(&format!("{}:1", w.host)) {
                Ok(found) => return Ok(start(found.ip(), fqdn, false)),
                Err(e) => failed = e,
            },
            InitAddr::None => return Ok(start([0, 0, 0, 0].into(), fqdn, true)),
            InitAddr::Ip(ip) => return Ok(start(*ip, fqdn, false)),
        }
    }
    match init {
        Some(methods) if methods.contains(&InitAddr::Last) => {
            Ok(start([0, 0, 0, 0].into(), fqdn, true))
        }
        _ => Err(failed),
    }
}

/// A server as a backend of source address `source` serves it; `cookie` its persistence
/// cookie's value. Its TLS connectors and `track` are the loader's to fill.
pub fn lower_server(
    s: &ServerSpec,
    id: u32,
    cookie: Option<String>,
    source: Option<std::net::SocketAddr>,
) -> Server {
    Server {
        id,
        name: s.name.clone(),
        addr: s.addr,
        port: s.port,
        unix: s.unix.clone(),
        check: s.opts.check.enabled.then(|| s.opts.check.clone()),
        rise: s.opts.check.rise,
        agent: s
            .opts
            .check
            .agent
            .enabled
            .then(|| s.opts.check.agent.clone()),
        slowstart: s.opts.slowstart,
        track: None,
        shutdown_on_down: s.opts.check.shutdown_on_down,
        cookie,
        weight: s.opts.weight.unwrap_or(1),
        backup: s.opts.backup,
        disabled: s.opts.disabled,
        pool: s.opts.pool,
        maxconn: s.opts.maxconn,
        maxqueue: s.opts.maxqueue,
        tls: None,
        check_tls: None,
        h2: s.opts.h2,
        send_proxy: s.opts.send_proxy,
        source: s.opts.source.or(source),
        dynamic: false,
        fqdn: s.fqdn.clone(),
        resolve: None,
        unresolved: s.unresolved,
    }
}

/// Lowers a backend section (or the backend side of a `listen`) into its validated form.
/// Server ids not set with `id` are assigned as HAProxy does: the n-th server gets the first
/// free id from n on.
pub fn lower(name: &str, id: u32, conf: &ProxyConf) -> Backend {
    // `dispatch` stands for the server a backend without servers lacks.
    let dispatch = conf
        .backend
        .dispatch
        .filter(|_| conf.backend.servers.is_empty())
        .map(|addr| ServerSpec {
            name: "dispatch".into(),
            addr,
            port: PortMap::Fixed,
            unix: None,
            fqdn: None,
            unresolved: false,
            opts: conf.backend.default_server.clone(),
        });
    let specs = match &dispatch {
        _ if conf.disabled => &[][..],
        Some(d) => std::slice::from_ref(d),
        None => &conf.backend.servers[..],
    };
    let speaks = Speaks::of(specs);
    let mut taken: Vec<u32> = specs.iter().filter_map(|s| s.opts.id).collect();
    let mut next = 1;
    let servers = specs
        .iter()
        .map(|s| {
            let id = s.opts.id.unwrap_or_else(|| {
                while taken.contains(&next) {
                    next += 1;
                }
                taken.push(next);
                next
            });
            // As HAProxy: the candidate moves on past every server, numbered or not
            // (`a`, `b`, `c id 7`, `d` gives d the id 4); consistent hashing depends on it.
            next += 1;
            let cookie = s
                .opts
                .cookie
                .clone()
                .or_else(|| dynamic_cookie(conf, s.addr));
            lower_server(s, id, cookie, conf.backend.source)
        })
        .collect();
    Backend {
        speaks,
        order: 0,
        disabled: conf.disabled,
        stats: Default::default(),
        id,
        name: name.to_string(),
        servers,
        source: conf.backend.source,
        algo: conf.balance.algo.clone(),
        hash: conf.balance.hash,
        persist: conf.persist.clone(),
        allbackups: conf.balance.allbackups,
        balance_factor: conf.balance.balance_factor,
        timeout_connect: conf.backend.timeout_connect,
        timeout_server: conf.backend.timeout_server,
        timeout_queue: conf.backend.timeout_queue.or(conf.backend.timeout_connect),
        timeout_tunnel: conf.backend.timeout_tunnel,
        timeout_server_fin: conf.backend.timeout_server_fin,
        reuse: conf.backend.reuse,
        retries: conf.backend.retries.unwrap_or(3),
        retry_on: conf.backend.retry_on,
        fullconn: conf.backend.fullconn,
        redispatch: conf.backend.redispatch,
        abortonclose: conf.backend.abortonclose,
        prefer_last_server: conf.backend.prefer_last_server,
        max_keep_alive_queue: conf.backend.max_keep_alive_queue,
        checkcache: conf.backend.checkcache,
        stream: conf.stream.clone(),
        rules: conf.rules.sets.clone(),
        compression: conf.compression.clone(),
        traces: Vec::new(),
        errors: conf.errors.clone(),
        check: conf.check.clone(),
        log: conf.log.clone(),
        load_state: conf.load_state.clone(),
        email: None,
    }
}

/// A server's cookie value under `cookie ... dynamic` with a `dynamic-cookie-key`.
fn dynamic_cookie(conf: &ProxyConf, addr: std::net::SocketAddr) -> Option<String> {
    let key = conf.persist.dynamic_key.as_deref()?;
    conf.persist
        .cookie
        .as_ref()
        .filter(|c| c.dynamic)
        .map(|_| crate::cookie::dynamic_value(key, addr))
}

/// `retry-on`'s words (they replace any earlier line's). `0rtt-rejected` is accepted and
/// never happens: sluice sends no early data to servers.
fn parse_retry_on(a: &[String]) -> Result<RetryOn, KwError> {
    if a.is_empty() {
        return Err(KwError::Missing("a list of failure types or statuses"));
    }
    let mut r = RetryOn {
        conn_failure: false,
        ..RetryOn::default()
    };
    for (i, w) in a.iter().enumerate() {
        match w.as_str() {
            "none" if a.len() == 1 => {}
            "none" => {
                return Err(KwError::bad(i + 1, w, "'none' must be the only keyword"));
            }
            "conn-failure" => r.conn_failure = true,
            "empty-response" => r.empty_response = true,
            "junk-response" => r.junk_response = true,
            "response-timeout" => r.response_timeout = true,
            "0rtt-rejected" => {}
            "all-retryable-errors" => {
                r.conn_failure = true;
                r.empty_response = true;
                r.junk_response = true;
                r.response_timeout = true;
                for st in [500, 502, 503, 504] {
                    r.statuses |= RetryOn::status_bit(st).unwrap_or(0);
                }
            }
            other => {
                let bit = other
                    .parse::<u16>()
                    .ok()
                    .and_then(RetryOn::status_bit)
                    .ok_or_else(|| {
                        KwError::bad(
                            i + 1,
                            other,
                            "expects none, conn-failure, empty-response, junk-response, response-timeout, 0rtt-rejected, all-retryable-errors or a status among 401, 403, 404, 408, 425, 500, 501, 502, 503, 504",
                        )
                    })?;
                r.statuses |= bit;
            }
        }
    }
    Ok(r)
}

/// `server` options HAProxy 2.6 refuses for a server added at run time (`add server`).
const NOT_DYNAMIC: &[&str] = &[
    "cookie",
    "redir",
    "init-addr",
    "resolvers",
    "resolve-prefer",
    "resolve-net",
    "resolve-opts",
    "namespace",
    "non-stick",
    "socks4",
];

/// The server an `add server` command describes (`NAME ADDR[:PORT] [options]`), read as a
/// `server` line without any `default-server` (HAProxy applies none to a server added at
/// run time). The error is HAProxy's wording where it has one.
pub fn parse_added(args: &[String]) -> Result<ServerSpec, String> {
    if args.len() < 2 {
        return Err("'server' expects <name> and <addr>[:<port>] as arguments.".into());
    }
    if let Some(word) = args[2..].iter().find(|w| NOT_DYNAMIC.contains(&w.as_str())) {
        return Err(format!(
            "'{word}' option is not accepted for dynamic server"
        ));
    }
    let mut c = ProxyConf::default();
    parse_server(&mut c, args).map_err(|e| e.to_string())?;
    c.backend
        .servers
        .pop()
        .ok_or_else(|| "no server was described".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::pool::PoolConf;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn server_addresses_with_and_without_ports() {
        let a = |s: &str| server_addr(s, None).map(|a| (a.addr.to_string(), a.map));
        assert_eq!(a("10.0.0.1:80"), Ok(("10.0.0.1:80".into(), PortMap::Fixed)));
        assert_eq!(a("10.0.0.1"), Ok(("10.0.0.1:0".into(), PortMap::Client)));
        assert_eq!(
            a("10.0.0.1:+5"),
            Ok(("10.0.0.1:0".into(), PortMap::Offset(5)))
        );
        assert_eq!(
            a("10.0.0.1:-5"),
            Ok(("10.0.0.1:0".into(), PortMap::Offset(-5)))
        );
        assert_eq!(
            a("[2001:db8::1]"),
            Ok(("[2001:db8::1]:0".into(), PortMap::Client))
        );
        assert_eq!(
            a("2001:db8::1"),
            Ok(("[2001:db8::1]:0".into(), PortMap::Client))
        );
        assert_eq!(
            a("[2001:db8::1]:8080"),
            Ok(("[2001:db8::1]:8080".into(), PortMap::Fixed))
        );
        assert_eq!(a("10.0.0.1:0"), Ok(("10.0.0.1:0".into(), PortMap::Client)));
        assert!(a("10.0.0.1:+99999").is_err());
        assert_eq!(PortMap::Offset(-100).port(0, 50), 1);
        assert_eq!(PortMap::Offset(1000).port(0, 443), 1443);
    }

    #[test]
    fn server_lines() {
        let mut c = ProxyConf::default();
        parse_server(&mut c, &words("s1 127.0.0.1:80 weight 3 backup")).unwrap();
        let s = &c.backend.servers[0];
        assert_eq!(s.addr, "127.0.0.1:80".parse().unwrap());
        assert_eq!(
            s.opts,
            ServerOpts {
                id: None,
                check: Default::default(),
                weight: Some(3),
                backup: true,
                disabled: false,
                pool: PoolConf::default(),
                maxconn: None,
                maxqueue: None,
                slowstart: None,
                track: None,
                cookie: None,
                tls: Default::default(),
                h2: false,
                send_proxy: None,
                source: None,
                resolve: Default::default(),
            }
        );
        parse_server(&mut c, &words("s2 [::1]:8080 disabled")).unwrap();
        assert!(c.backend.servers[1].opts.disabled);
        assert!(parse_server(&mut c, &words("s1 127.0.0.1:81"))
            .unwrap_err()
            .to_string()
            .contains("already exists"));
        assert_eq!(
            parse_server(&mut c, &words("s3 127.0.0.1:80 weight 300"))
                .unwrap_err()
                .to_string(),
            "argument 4 '300': expects an integer from 0 to 256"
        );
        assert!(parse_server(&mut c, &words("s3 127.0.0.1:80 weight")).is_err());
        assert_eq!(
            parse_server(&mut c, &words("s3 127.0.0.1:80 frob"))
                .unwrap_err()
                .to_string(),
            "argument 3 'frob': unknown server option"
        );
        parse_server(
            &mut c,
            &words("p 127.0.0.1:80 pool-max-conn 4 pool-low-conn 8 pool-purge-delay 2s"),
        )
        .unwrap();
        let p = c.backend.servers.last().unwrap().opts.pool;
        assert_eq!(
            p,
            PoolConf {
                max_conn: Some(4),
                low_conn: 8,
                purge_delay: std::time::Duration::from_secs(2)
            }
        );
        assert!(parse_server(&mut c, &words("q 127.0.0.1:80 pool-max-conn -2")).is_err());
        assert!(
            parse_server(&mut c, &words("s3 127.0.0.1:80 redir http://x"))
                .unwrap_err()
                .to_string()
                .contains("not supported yet")
        );
        parse_server(&mut c, &words("s4 127.0.0.1:80 check inter 1s fall 5")).unwrap();
        let chk = c.backend.servers.last().unwrap().opts.check.clone();
        assert!(chk.enabled && chk.fall == 5 && chk.inter == std::time::Duration::from_secs(1));
        // Without a port: the client's (see `server_addresses_with_and_without_ports`).
        parse_server(&mut c, &words("s5 127.0.0.1")).unwrap();
        assert_eq!(c.backend.servers.last().unwrap().port, PortMap::Client);
        assert!(parse_server(&mut c, &words("s6 127.0.0.1:http"))
            .unwrap_err()
            .to_string()
            .contains("port"));
        assert!(parse_server(&mut c, &words("s3")).is_err());
    }

    #[test]
    fn default_server_applies_to_later_servers() {
        let mut c = ProxyConf::default();
        let default_server = KEYWORDS
            .iter()
            .find(|k| k.name == "default-server")
            .unwrap();
        (default_server.parse)(&mut c, &words("weight 5")).unwrap();
        parse_server(&mut c, &words("a 127.0.0.1:1")).unwrap();
        parse_server(&mut c, &words("b 127.0.0.1:2 weight 2")).unwrap();
        assert_eq!(c.backend.servers[0].opts.weight, Some(5));
        assert_eq!(c.backend.servers[1].opts.weight, Some(2));
    }

    #[test]
    fn server_ids_are_kept_or_assigned_around_the_taken_ones() {
        let mut c = ProxyConf::default();
        parse_server(&mut c, &words("a 127.0.0.1:1")).unwrap();
        parse_server(&mut c, &words("b 127.0.0.1:2 id 1")).unwrap();
        parse_server(&mut c, &words("c 127.0.0.1:3")).unwrap();
        assert!(parse_server(&mut c, &words("d 127.0.0.1:4 id 1"))
            .unwrap_err()
            .to_string()
            .contains("already used by server 'b'"));
        assert!((KEYWORDS[1].parse)(&mut c, &words("id 3")).is_err());
        let be = lower("be", 7, &c);
        let ids: Vec<u32> = be.servers.iter().map(|s| s.id).collect();
        // HAProxy 2.6 numbers these a=2, b=1, c=4 (checked with its `show stat`).
        assert_eq!(ids, [2, 1, 4]);
        assert_eq!(be.id, 7);
    }
}
