//! The runtime CLI on a unix socket (`stats socket PATH [mode M] [level L]`), like HAProxy's
//! in non-interactive mode: one command per connection, answered, then the connection is
//! closed, so `echo "show info" | socat - UNIX:/path` works.
//!
//! Commands are rows of `COMMANDS` (words, help line, handler); `help` is generated from the
//! table. The CLI runs on the control thread and only reads shared atomics: it never blocks
//! or wakes a worker.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Keyword, KwError, Scope};

use super::servers;
use crate::compression::{RATE_IN, RATE_OUT};
pub use crate::conf::cli::{CliAddr, Level, SocketConf};
use crate::conf::stream::Mode;
use crate::conf::GlobalConf;
use crate::runtime::{PerWorker, Process, ProxyCounters, ThreadCtx};
use std::net::SocketAddr;
use std::os::fd::RawFd;

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "stats socket",
    scope: Scope::GLOBAL,
    help:
        "stats socket PATH|ipv4@ADDR:PORT|ADDR:PORT|fd@N [mode OCTAL] [level user|operator|admin]: runtime CLI",
    parse: |g, args| {
        let Some(first) = args.first() else {
            return Err(KwError::Missing("an address: PATH, ipv4@ADDR:PORT, ADDR:PORT or fd@N"));
        };
        let addr = parse_addr(first).map_err(|e| KwError::bad(1, first, e))?;
        let mut conf = SocketConf {
            addr,
            mode: None,
            level: Level::Operator,
        };
        let mut i = 1;
        while i < args.len() {
            let val = args
                .get(i + 1)
                .ok_or_else(|| KwError::Invalid(format!("'{}' expects a value", args[i])))?;
            match args[i].as_str() {
                "mode" => {
                    conf.mode = Some(
                        u32::from_str_radix(val, 8)
                            .map_err(|_| KwError::bad(i + 2, val, "expects an octal mode"))?,
                    )
                }
                "level" => {
                    conf.level = match val.as_str() {
                        "user" => Level::User,
                        "operator" => Level::Operator,
                        "admin" => Level::Admin,
                        _ => {
                            return Err(KwError::bad(i + 2, val, "expects user, operator or admin"))
                        }
                    }
                }
                other => {
                    return Err(KwError::bad(
                        i + 1,
                        other,
                        "expects mode or level (other options are not supported yet)",
                    ))
                }
            }
            i += 2;
        }
        g.stats_sockets.push(conf);
        Ok(())
    },
}];

/// A `stats socket` address, in HAProxy's forms.
fn parse_addr(a: &str) -> Result<CliAddr, String> {
    let tcp = |s: &str| {
        s.parse::<SocketAddr>()
            .ok()
            .filter(|a| a.port() > 0)
            .map(CliAddr::Tcp)
            .ok_or_else(|| format!("expects ADDR:PORT with a port, not '{s}'"))
    };
    if let Some(p) = a.strip_prefix("unix@") {
        return Ok(CliAddr::Unix(p.to_string()));
    }
    if let Some(s) = a.strip_prefix("ipv4@").or_else(|| a.strip_prefix("ipv6@")) {
        return tcp(s);
    }
    if let Some(n) = a.strip_prefix("fd@") {
        return n
            .parse()
            .ok()
            .filter(|&n: &RawFd| n >= 0)
            .map(CliAddr::Fd)
            .ok_or_else(|| "fd@ expects a file descriptor number".into());
    }
    if let Some((kind, _)) = a.split_once('@') {
        return Err(format!("'{kind}@' addresses are not supported yet"));
    }
    if !a.starts_with('/') && a.contains(':') {
        return tcp(a);
    }
    Ok(CliAddr::Unix(a.to_string()))
}

/// One CLI command.
pub struct Command {
    pub words: &'static [&'static str],
    pub help: &'static str,
    pub level: Level,
    pub run: fn(&Process, &[&str], Level) -> String,
}

pub const COMMANDS: &[Command] = &[
    Command {
        words: &["help"],
        help: "list the commands",
        level: Level::User,
        run: |_, _, _| help(),
    },
    Command {
        words: &["show", "info"],
        help: "report information about the running process",
        level: Level::User,
        run: show_info,
    },
    Command {
        words: &["show", "activity"],
        help: "show per-thread activity counters",
        level: Level::Operator,
        run: show_activity,
    },
    Command {
        words: &["show", "servers", "conn"],
        help: "show idle and used connections per server and per thread [BACKEND]",
        level: Level::Operator,
        run: show_servers_conn,
    },
    Command {
        words: &["show", "stat"],
        help: "report counters for each proxy and server (CSV)",
        level: Level::User,
        run: show_stat,
    },
    Command {
        words: &["show", "servers", "state"],
        help: "dump the volatile server information [BACKEND]",
        level: Level::User,
        run: servers::show_servers_state,
    },
    Command {
        words: &["show", "backend"],
        help: "list the backends",
        level: Level::User,
        run: servers::show_backend,
    },
    Command {
        words: &["disable", "server"],
        help: "put a server in maintenance (BACKEND/SERVER)",
        level: Level::Operator,
        run: servers::disable_server,
    },
    Command {
        words: &["enable", "server"],
        help: "bring a server back from maintenance (BACKEND/SERVER)",
        level: Level::Operator,
        run: servers::enable_server,
    },
    Command {
        words: &["set", "server"],
        help: "change a server's state, weight or health (BACKEND/SERVER ...)",
        level: Level::Operator,
        run: servers::set_server,
    },
    Command {
        words: &["disable", "health"],
        help: "stop running a server's health check (BACKEND/SERVER)",
        level: Level::Admin,
        run: servers::disable_health,
    },
    Command {
        words: &["enable", "health"],
        help: "run a server's health check again (BACKEND/SERVER)",
        level: Level::Admin,
        run: servers::enable_health,
    },
    Command {
        words: &["disable", "agent"],
        help: "stop asking a server's agent (BACKEND/SERVER)",
        level: Level::Admin,
        run: servers::disable_agent,
    },
    Command {
        words: &["enable", "agent"],
        help: "ask a server's agent again (BACKEND/SERVER)",
        level: Level::Admin,
        run: servers::enable_agent,
    },
    Command {
        words: &["set", "weight"],
        help: "change a server's weight (BACKEND/SERVER N[%])",
        level: Level::Admin,
        run: servers::set_weight,
    },
    Command {
        words: &["get", "weight"],
        help: "report a server's current and initial weight (BACKEND/SERVER)",
        level: Level::User,
        run: servers::get_weight,
    },
];

fn help() -> String {
    let mut s = String::from("The following commands are valid at this level:\n");
    for c in COMMANDS {
        let _ = writeln!(s, "  {:<24} : {}", c.words.join(" "), c.help);
    }
    s
}

/// Runs one command line and returns the answer (always ending with an empty line).
pub fn execute(shared: &Process, line: &str, level: Level) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let found = COMMANDS
        .iter()
        .filter(|c| words.len() >= c.words.len() && c.words.iter().zip(&words).all(|(a, b)| a == b))
        .max_by_key(|c| c.words.len());
    let mut out = match found {
        None if words.is_empty() => String::new(),
        None => format!("Unknown command: '{}'\n{}", line.trim(), help()),
        Some(c) if c.level > level => "Permission denied\n".to_string(),
        Some(c) => (c.run)(shared, &words[c.words.len()..], level),
    };
    out.push('\n');
    out
}

/// A listening CLI socket.
pub enum CliListener {
    Unix(UnixListener),
    Tcp(std::net::TcpListener),
}

/// Serves one socket until the process exits (a thread of its own): one command per
/// connection, as HAProxy's non-interactive mode.
pub fn serve(process: Arc<Process>, conf: SocketConf, listener: CliListener) {
    let answer = |conn: &mut dyn ReadWrite| {
        let mut line = String::new();
        if BufReader::new(&mut *conn).read_line(&mut line).is_ok() {
            let _ = conn.write_all(execute(&process, &line, conf.level).as_bytes());
        }
    };
    let timeout = Some(Duration::from_secs(10));
    match listener {
        CliListener::Unix(l) => {
            for mut conn in l.incoming().flatten() {
                let _ = conn.set_read_timeout(timeout);
                answer(&mut conn);
            }
        }
        CliListener::Tcp(l) => {
            for mut conn in l.incoming().flatten() {
                let _ = conn.set_read_timeout(timeout);
                answer(&mut conn);
            }
        }
    }
}

/// A connection the CLI reads a command from and answers on.
trait ReadWrite: std::io::Read + Write {}
impl<T: std::io::Read + Write> ReadWrite for T {}

/// Opens a CLI socket: a unix socket file (replacing a stale one, with the configured
/// mode), a TCP socket, or an inherited one.
pub fn bind(conf: &SocketConf) -> std::io::Result<CliListener> {
    match &conf.addr {
        CliAddr::Unix(path) => {
            let _ = std::fs::remove_file(path);
            let l = UnixListener::bind(path)?;
            if let Some(mode) = conf.mode {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
            }
            Ok(CliListener::Unix(l))
        }
        CliAddr::Tcp(addr) => {
            let sock = socket2::Socket::new(
                socket2::Domain::for_address(*addr),
                socket2::Type::STREAM,
                None,
            )?;
            sock.set_reuse_address(true)?;
            sock.bind(&(*addr).into())?;
            sock.listen(64)?;
            Ok(CliListener::Tcp(sock.into()))
        }
        CliAddr::Fd(fd) => {
            // SAFETY: the descriptor is only borrowed for the check; an invalid number fails
            // with EBADF.
            let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(*fd) };
            if !socket2::SockRef::from(&borrowed).is_listener()? {
                return Err(std::io::Error::other("not a listening socket"));
            }
            // SAFETY: checked above to be an open listening socket; taken over once.
            let l = unsafe { <std::net::TcpListener as std::os::fd::FromRawFd>::from_raw_fd(*fd) };
            l.set_nonblocking(false)?;
            Ok(CliListener::Tcp(l))
        }
    }
}

fn show_info(s: &Process, _: &[&str], _: Level) -> String {
    let sum = |f: fn(&ThreadCtx) -> u64| s.threads.iter().map(f).sum::<u64>();
    let n = s.threads.len() as u64;
    let busy = sum(|t| u64::from(t.busy_pct.load(Ordering::Relaxed)));
    let lim = s.config.global.compression.max_rate;
    let rows: Vec<(&str, String)> = vec![
        ("Name", "sluice".into()),
        ("Version", env!("CARGO_PKG_VERSION").into()),
        ("Pid", std::process::id().to_string()),
        ("Uptime_sec", s.started.elapsed().as_secs().to_string()),
        ("Nbthread", n.to_string()),
        (
            "CurrConns",
            sum(|t| t.active.load(Ordering::Relaxed) as u64).to_string(),
        ),
        ("CumConns", sum(|t| t.counters.accepted.get()).to_string()),
        ("CumReq", sum(|t| t.counters.requests.get()).to_string()),
        ("Run_queue", sum(|t| t.load() as u64).to_string()),
        ("Idle_pct", (100 - (busy / n.max(1)).min(100)).to_string()),
        ("CompressBpsIn", RATE_IN.rate().to_string()),
        ("CompressBpsOut", RATE_OUT.rate().to_string()),
        ("CompressBpsRateLim", lim.to_string()),
    ];
    rows.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

fn show_activity(s: &Process, _: &[&str], _: Level) -> String {
    type Get = fn(&ThreadCtx) -> u64;
    let rows: &[(&str, Get)] = &[
        ("accepted", |t| t.counters.accepted.get()),
        ("accq_pushed", |t| t.counters.handed_off.get()),
        ("adopted", |t| t.counters.adopted.get()),
        ("accept_errors", |t| t.counters.accept_errors.get()),
        ("requests", |t| t.counters.requests.get()),
        ("curr_rq", |t| t.load() as u64),
        ("avg_cpu_pct", |t| {
            u64::from(t.busy_pct.load(Ordering::Relaxed))
        }),
        ("idle_purged", |t| t.counters.idle_purged.get()),
        ("loops", |t| t.counters.loops.get()),
        ("fd_takeover", |t| t.counters.fd_takeover.get()),
        ("checks_run", |t| t.counters.checks_run.get()),
        ("checks_moved", |t| t.counters.checks_moved.get()),
        ("checks_queued", |t| t.counters.checks_queued.get()),
    ];
    let mut out = format!("thread_id: 0 (1..{})\n", s.threads.len());
    let _ = writeln!(out, "uptime_now: {:.3}", s.started.elapsed().as_secs_f64());
    let _ = writeln!(out, "open_sockets: {}", crate::fds::open_sockets());
    let foreign: u64 = s
        .state
        .backends
        .iter()
        .flat_map(|b| b.servers.iter())
        .map(|srv| srv.idle.stats.foreign_closed.load(Ordering::Relaxed))
        .sum();
    let _ = writeln!(out, "idle_foreign_closed: {foreign}");
    for (name, get) in rows {
        let values: Vec<u64> = s.threads.iter().map(get).collect();
        let total: u64 = if *name == "avg_cpu_pct" {
            values.iter().sum::<u64>() / values.len().max(1) as u64
        } else {
            values.iter().sum()
        };
        let per: Vec<String> = values.iter().map(u64::to_string).collect();
        let _ = writeln!(out, "{name}: {total} [ {} ]", per.join(" "));
    }
    out
}

/// HAProxy's `show servers conn` layout: pool counters per server, then idle per thread.
fn show_servers_conn(s: &Process, args: &[&str], _: Level) -> String {
    let n = s.threads.len();
    let mut out = format!(
        "# bkname/svname bkid/svid addr port - purge_delay used_cur used_max need_est unsafe_nb safe_nb idle_lim idle_cur idle_per_thr[{n}]\n"
    );
    for (be, st) in s.config.backends.iter().zip(s.state.backends.iter()) {
        if args.first().is_some_and(|name| *name != be.name) {
            continue;
        }
        for (srv, sst) in be.servers.iter().zip(st.servers.iter()) {
            let p = &sst.idle.stats;
            let get = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed);
            let idle = get(&p.idle_cur);
            let safe = get(&p.safe_cur).min(idle);
            let per: Vec<String> = p.per_thread.iter().map(|t| get(t).to_string()).collect();
            let _ = writeln!(
                out,
                "{}/{} {}/{} {} {} - {} {} {} {} {} {} {} {} {}",
                be.name,
                srv.name,
                be.id,
                srv.id,
                sst.addr().ip(),
                sst.addr().port(),
                srv.pool.purge_delay.as_millis(),
                get(&p.used_cur),
                get(&p.used_max),
                get(&p.need_est),
                idle - safe,
                safe,
                srv.pool.max_conn.map_or(-1, |m| m as i64),
                idle,
                per.join(" ")
            );
        }
    }
    out
}

/// HAProxy's CSV columns, in order, up to the last one sluice fills (`uweight`).
const STAT_FIELDS: &[&str] = &[
    "pxname",
    "svname",
    "qcur",
    "qmax",
    "scur",
    "smax",
    "slim",
    "stot",
    "bin",
    "bout",
    "dreq",
    "dresp",
    "ereq",
    "econ",
    "eresp",
    "wretr",
    "wredis",
    "status",
    "weight",
    "act",
    "bck",
    "chkfail",
    "chkdown",
    "lastchg",
    "downtime",
    "qlimit",
    "pid",
    "iid",
    "sid",
    "throttle",
    "lbtot",
    "tracked",
    "type",
    "rate",
    "rate_lim",
    "rate_max",
    "check_status",
    "check_code",
    "check_duration",
    "hrsp_1xx",
    "hrsp_2xx",
    "hrsp_3xx",
    "hrsp_4xx",
    "hrsp_5xx",
    "hrsp_other",
    "hanafail",
    "req_rate",
    "req_rate_max",
    "req_tot",
    "cli_abrt",
    "srv_abrt",
    "comp_in",
    "comp_out",
    "comp_byp",
    "comp_rsp",
    "lastsess",
    "last_chk",
    "last_agt",
    "qtime",
    "ctime",
    "rtime",
    "ttime",
    "agent_status",
    "agent_code",
    "agent_duration",
    "check_desc",
    "agent_desc",
    "check_rise",
    "check_fall",
    "check_health",
    "agent_rise",
    "agent_fall",
    "agent_health",
    "addr",
    "cookie",
    "mode",
    "algo",
    "conn_rate",
    "conn_rate_max",
    "conn_tot",
    "intercepted",
    "dcon",
    "dses",
    "wrew",
    "connect",
    "reuse",
    "cache_lookups",
    "cache_hits",
    "srv_icur",
    "src_ilim",
    "qtime_max",
    "ctime_max",
    "rtime_max",
    "ttime_max",
    "eint",
    "idle_conn_cur",
    "safe_conn_cur",
    "used_conn_cur",
    "need_conn_est",
    "uweight",
];

fn show_stat(s: &Process, _: &[&str], _: Level) -> String {
    let mut out = format!("# {},\n", STAT_FIELDS.join(","));
    let pid = std::process::id().to_string();
    let row = |out: &mut String, values: &[(&str, String)]| {
        let cells: Vec<&str> = STAT_FIELDS
            .iter()
            .map(|f| {
                values
                    .iter()
                    .find(|(k, _)| k == f)
                    .map_or("", |(_, v)| v.as_str())
            })
            .collect();
        let _ = writeln!(out, "{},", cells.join(","));
    };
    let comp = |c: &PerWorker<ProxyCounters>| {
        vec![
            ("comp_in", c.sum(|c| &c.comp_in).to_string()),
            ("comp_out", c.sum(|c| &c.comp_out).to_string()),
            ("comp_byp", c.sum(|c| &c.comp_byp).to_string()),
            ("comp_rsp", c.sum(|c| &c.comp_rsp).to_string()),
        ]
    };
    let mode = |m: Mode| match m {
        Mode::Http => "http".to_string(),
        Mode::Tcp => "tcp".to_string(),
    };
    for (fe, st) in s.config.frontends.iter().zip(s.state.frontends.iter()) {
        let mut v = vec![
            ("pxname", fe.name.clone()),
            ("svname", "FRONTEND".into()),
            ("scur", st.conns.load(Ordering::Relaxed).to_string()),
            ("status", "OPEN".into()),
            ("pid", pid.clone()),
            ("iid", fe.id.to_string()),
            ("sid", "0".into()),
            ("type", "0".into()),
            ("mode", mode(fe.stream.mode)),
        ];
        v.extend(comp(&st.counters));
        row(&mut out, &v);
    }
    for (be, st) in s.config.backends.iter().zip(s.state.backends.iter()) {
        let iid = be.id.to_string();
        for (srv, sst) in be.servers.iter().zip(st.servers.iter()) {
            let c = &sst.counters;
            let pool = &sst.idle.stats;
            let idle = pool.idle_cur.load(Ordering::Relaxed);
            let safe = pool.safe_cur.load(Ordering::Relaxed).min(idle);
            let opt = |v: Option<usize>| v.map_or(String::new(), |m| m.to_string());
            let mut checks = Vec::new();
            if let (Some(c), Some(cs)) = (&srv.check, &sst.check) {
                let health = cs.health.load(Ordering::Relaxed);
                checks.extend([
                    ("chkfail", cs.failed.load(Ordering::Relaxed).to_string()),
                    ("chkdown", cs.downs.load(Ordering::Relaxed).to_string()),
                    ("check_rise", c.rise.to_string()),
                    ("check_fall", c.fall.to_string()),
                    // HAProxy counts health from 0 to rise+fall-1 and shows it as is.
                    ("check_health", health.to_string()),
                ]);
                if let Some(last) = cs.last.lock().ok().and_then(|l| l.clone()) {
                    checks.push(("check_status", last.status.to_string()));
                    checks.push(("check_duration", last.duration_ms.to_string()));
                    checks.push(("check_desc", last.reason.to_string()));
                    if let Some(code) = last.code {
                        checks.push(("check_code", code.to_string()));
                    }
                    if let Some(info) = last.info {
                        // What the check found, without the CSV's separators.
                        checks.push(("last_chk", info.replace(',', " ")));
                    }
                }
            }
            if let Some(a) = &sst.agent {
                let up = a.up.load(Ordering::Relaxed);
                checks.extend([
                    ("agent_rise", "1".to_string()),
                    ("agent_fall", "1".to_string()),
                    ("agent_health", u8::from(up).to_string()),
                ]);
                if let Some(last) = a.last.lock().ok().and_then(|l| l.clone()) {
                    checks.push(("agent_status", last.status.to_string()));
                    checks.push(("agent_duration", last.duration_ms.to_string()));
                    checks.push(("agent_desc", last.reason.to_string()));
                    if let Some(info) = last.info {
                        checks.push(("last_agt", info.replace(',', " ")));
                    }
                }
            }
            row(
                &mut out,
                &[
                    ("pxname", be.name.clone()),
                    ("svname", srv.name.clone()),
                    (
                        "qcur",
                        sst.queue.waiting.load(Ordering::Relaxed).to_string(),
                    ),
                    ("scur", sst.in_flight.load(Ordering::Relaxed).to_string()),
                    ("slim", opt(srv.maxconn)),
                    ("qlimit", opt(srv.maxqueue)),
                    (
                        "status",
                        sst.status(srv.check.as_ref().map(|c| (c.rise, c.fall))),
                    ),
                    // Effective weight (ramping with slowstart) and the user-set one.
                    (
                        "weight",
                        if sst.usable() {
                            sst.effective_weight()
                        } else {
                            sst.weight()
                        }
                        .to_string(),
                    ),
                    ("uweight", sst.weight().to_string()),
                    ("downtime", sst.downtime().as_secs().to_string()),
                    ("act", u8::from(!srv.backup).to_string()),
                    ("bck", u8::from(srv.backup).to_string()),
                    ("pid", pid.clone()),
                    ("iid", iid.clone()),
                    ("sid", srv.id.to_string()),
                    ("lbtot", c.sum(|c| &c.requests).to_string()),
                    ("type", "2".into()),
                    ("econ", c.sum(|c| &c.connect_errors).to_string()),
                    ("wretr", c.sum(|c| &c.retries).to_string()),
                    ("wredis", c.sum(|c| &c.redispatches).to_string()),
                    ("eresp", c.sum(|c| &c.response_errors).to_string()),
                    ("addr", sst.addr().to_string()),
                    (
                        "lastchg",
                        sst.last_change
                            .lock()
                            .map_or(0, |t| t.elapsed().as_secs())
                            .to_string(),
                    ),
                    ("mode", mode(be.stream.mode)),
                    ("connect", c.sum(|c| &c.connect).to_string()),
                    ("reuse", c.sum(|c| &c.reuse).to_string()),
                    ("srv_icur", idle.to_string()),
                    (
                        "src_ilim",
                        srv.pool.max_conn.map_or("-1".into(), |m| m.to_string()),
                    ),
                    ("idle_conn_cur", (idle - safe).to_string()),
                    ("safe_conn_cur", safe.to_string()),
                    (
                        "used_conn_cur",
                        pool.used_cur.load(Ordering::Relaxed).to_string(),
                    ),
                    (
                        "need_conn_est",
                        pool.need_est.load(Ordering::Relaxed).to_string(),
                    ),
                ]
                .into_iter()
                .chain(checks)
                .collect::<Vec<_>>(),
            );
        }
        let mut v = vec![
            ("pxname", be.name.clone()),
            ("svname", "BACKEND".into()),
            ("scur", st.in_flight().to_string()),
            ("status", "UP".into()),
            ("pid", pid.clone()),
            ("iid", iid.clone()),
            ("sid", "0".into()),
            ("type", "1".into()),
            ("mode", mode(be.stream.mode)),
            ("algo", be.algo.name()),
        ];
        v.extend(comp(&st.counters));
        row(&mut out, &v);
    }
    out
}
