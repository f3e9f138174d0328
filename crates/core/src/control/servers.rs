//! Runtime control of servers from the CLI, in HAProxy's syntax: administrative state
//! (`enable`/`disable server`, `set server ... state`), weights (`set weight`, `get weight`),
//! forced health (`set server ... health`), and `show servers state`, `show backend`.
//!
//! Every change goes through `runtime::BackendState`'s setters, so balancers see it at their
//! next pick. Levels: `operator` may make a server ready or drain it, `admin` everything.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::conf::cli::Level;
use crate::conf::Server;
use crate::runtime::{AdminState, OperState, Process, ServerState};

/// Reads `BACKEND/SERVER`: (backend index, the server's name).
fn backend_of<'a>(p: &Process, spec: Option<&&'a str>) -> Result<(usize, &'a str), String> {
    let spec = spec.ok_or("Require 'backend/server'.\n")?;
    let (b, s) = spec.split_once('/').ok_or("Require 'backend/server'.\n")?;
    let bi = p
        .config
        .backends
        .iter()
        .position(|be| be.name == b)
        .ok_or("No such backend.\n")?;
    Ok((bi, s))
}

/// Finds `BACKEND/SERVER`: (backend index, server index).
fn find(p: &Process, spec: Option<&&str>) -> Result<(usize, usize), String> {
    let (bi, s) = backend_of(p, spec)?;
    let (si, _, _) = p.state.backends[bi]
        .live(&p.config.backends[bi])
        .find(|(_, srv, _)| srv.name == s)
        .ok_or("No such server.\n")?;
    Ok((bi, si))
}

fn needs(have: Level, want: Level) -> Result<(), String> {
    if have < want {
        Err("Permission denied\n".into())
    } else {
        Ok(())
    }
}

fn answer(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| e)
}

/// `disable server B/S`: maintenance.
pub fn disable_server(p: &Process, args: &[&str], level: Level) -> String {
    answer(set_admin(p, args.first(), AdminState::Maint, level))
}

/// `enable server B/S`: back from maintenance.
pub fn enable_server(p: &Process, args: &[&str], level: Level) -> String {
    answer(set_admin(p, args.first(), AdminState::Ready, level))
}

fn set_admin(
    p: &Process,
    spec: Option<&&str>,
    state: AdminState,
    level: Level,
) -> Result<String, String> {
    needs(
        level,
        match state {
            AdminState::Maint => Level::Admin,
            _ => Level::Operator,
        },
    )?;
    let (b, s) = find(p, spec)?;
    crate::check::set_admin(p, b, s, state);
    Ok(String::new())
}

/// `set server B/S state ready|drain|maint`, `set server B/S weight N[%]`,
/// `set server B/S health up|stopping|down`.
pub fn set_server(p: &Process, args: &[&str], level: Level) -> String {
    answer((|| {
        let (b, s) = find(p, args.first())?;
        match (args.get(1).copied(), args.get(2).copied()) {
            (Some("state"), Some(v)) => {
                let state = match v {
                    "ready" => AdminState::Ready,
                    "drain" => AdminState::Drain,
                    "maint" => AdminState::Maint,
                    _ => {
                        return Err(
                            "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n"
                                .into(),
                        )
                    }
                };
                set_admin(p, args.first(), state, level)
            }
            (Some("weight"), Some(v)) => set_weight_of(p, b, s, v, level),
            (Some("health"), Some(v)) => {
                needs(level, Level::Admin)?;
                let state = match v {
                    "up" => OperState::Up,
                    "stopping" => OperState::Stopping,
                    "down" => OperState::Down,
                    _ => {
                        return Err(
                            "'set server <srv> health' expects 'up', 'stopping', or 'down'.\n"
                                .into(),
                        )
                    }
                };
                crate::check::force_health_from_cli(p, b, s, state);
                Ok(String::new())
            }
            (Some("agent"), Some(v)) => {
                needs(level, Level::Admin)?;
                let up = match v {
                    "up" => true,
                    "down" => false,
                    _ => return Err("'set server <srv> agent' expects 'up' or 'down'.\n".into()),
                };
                crate::check::force_agent(p, b, s, up)
                    .then(String::new)
                    .ok_or_else(|| "Server has no agent check.\n".into())
            }
            (Some("addr"), Some(ip)) => {
                needs(level, Level::Admin)?;
                if p.config.backends[b].servers[s].unix.is_some() {
                    return Err("Update for the current server address family is only supported through configuration file by 'stats socket command'\n".into());
                }
                let ip: std::net::IpAddr = ip.parse().map_err(|_| "Invalid IP address.\n")?;
                let st = &p.state.backends[b].servers[s];
                let old = st.addr();
                let port = match (args.get(3).copied(), args.get(4)) {
                    (Some("port"), Some(v)) => v
                        .parse::<u16>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or("Invalid port.\n")?,
                    (None, _) => old.port(),
                    _ => {
                        return Err("'set server <srv> addr' expects <addr> [port <port>].\n".into())
                    }
                };
                let new = std::net::SocketAddr::new(ip, port);
                st.set_addr(new);
                let port_note = if port == old.port() {
                    "no need to change the port".to_string()
                } else {
                    format!("port changed from '{}' to '{port}'", old.port())
                };
                Ok(format!(
                    "IP changed from '{}' to '{ip}', {port_note} by 'stats socket command'\n",
                    old.ip()
                ))
            }
            (Some("ssl"), v) => {
                needs(level, Level::Admin)?;
                let on = match v {
                    Some("on") => true,
                    Some("off") => false,
                    _ => return Err("'set server <srv> ssl' expects 'on' or 'off'.\n".into()),
                };
                if p.config.backends[b].servers[s].tls.is_none() {
                    return Err("'set server <srv> ssl' cannot be set.  default-server should define ssl settings\n".into());
                }
                p.state.backends[b].servers[s].set_ssl(on);
                Ok("server ssl setting updated.\n".into())
            }
            // Only a server that follows its name (`resolvers`) can be given another.
            (Some("fqdn"), name) => {
                needs(level, Level::Admin)?;
                let Some(name) = name else {
                    return Err("set server <b>/<s> fqdn requires a FQDN.\n".into());
                };
                if !crate::dns::resolves(p, b, s) {
                    return Err(
                        "set server <b>/<s> fqdn failed because no resolution is configured.\n"
                            .into(),
                    );
                }
                let sst = &p.state.backends[b].servers[s];
                let old = sst.fqdn().unwrap_or_default();
                sst.set_fqdn(name.to_string());
                p.renamed.push((b, s));
                Ok(format!(
                    "{}/{} changed its FQDN from {old} to {name} by 'stats socket command'\n",
                    p.config.backends[b].name, p.config.backends[b].servers[s].name
                ))
            }
            (Some(kw @ "check-port"), _) => {
                Err(format!("'set server <srv> {kw}' is not supported yet.\n"))
            }
            _ => Err(
                "'set server <srv>' only supports 'state', 'weight', 'health' and 'agent'.\n"
                    .into(),
            ),
        }
    })())
}

/// `disable health B/S`, `enable health B/S`, `disable agent B/S`, `enable agent B/S`:
/// pause or resume a server's checks (its state stays as it is meanwhile).
fn pause(p: &Process, args: &[&str], level: Level, agent: bool, paused: bool) -> String {
    answer((|| {
        needs(level, Level::Admin)?;
        let (b, s) = find(p, args.first())?;
        crate::check::pause(p, b, s, agent, paused)
            .then(String::new)
            .ok_or_else(|| {
                if agent {
                    "Server has no agent check.\n".into()
                } else {
                    "Server has no health check.\n".into()
                }
            })
    })())
}

pub fn disable_health(p: &Process, args: &[&str], level: Level) -> String {
    pause(p, args, level, false, true)
}

pub fn enable_health(p: &Process, args: &[&str], level: Level) -> String {
    pause(p, args, level, false, false)
}

pub fn disable_agent(p: &Process, args: &[&str], level: Level) -> String {
    pause(p, args, level, true, true)
}

pub fn enable_agent(p: &Process, args: &[&str], level: Level) -> String {
    pause(p, args, level, true, false)
}

/// `set weight B/S N[%]`.
pub fn set_weight(p: &Process, args: &[&str], level: Level) -> String {
    answer((|| {
        let (b, s) = find(p, args.first())?;
        let v = args.get(1).ok_or("Require <weight>.\n")?;
        set_weight_of(p, b, s, v, level)
    })())
}

fn set_weight_of(p: &Process, b: usize, s: usize, v: &str, level: Level) -> Result<String, String> {
    needs(level, Level::Admin)?;
    let initial = p.config.backends[b].servers[s].weight;
    let w = match v.strip_suffix('%') {
        Some(pct) => {
            let pct: u32 = pct.parse().map_err(|_| "Invalid weight.\n")?;
            initial * pct / 100
        }
        None => v.parse().map_err(|_| "Invalid weight.\n")?,
    };
    if w > 256 {
        return Err("Absolute weight can only be between 0 and 256 inclusive.\n".into());
    }
    p.state.backends[b].set_weight(s, w);
    Ok(String::new())
}

/// `get weight B/S`: the live weight and the configured one.
pub fn get_weight(p: &Process, args: &[&str], _: Level) -> String {
    answer(find(p, args.first()).map(|(b, s)| {
        format!(
            "{} (initial {})\n",
            p.state.backends[b].servers[s].weight(),
            p.config.backends[b].servers[s].weight
        )
    }))
}

/// `show backend`: the backend names.
pub fn show_backend(p: &Process, _: &[&str], _: Level) -> String {
    let mut out = String::from("# name\n");
    for be in &p.config.backends {
        let _ = writeln!(out, "{}", be.name);
    }
    out
}

/// HAProxy 2.6's check status numbers (`HCHK_STATUS_*`: UNKNOWN 0, INI 1, START 2,
/// CHECKED 3, HANA 4, SOCKERR 5, L4OK 6, ...) for `show servers state`.
fn check_status_number(status: &str) -> u8 {
    match status {
        "HANA" => 4,
        "SOCKERR" => 5,
        "L4OK" => 6,
        "L4TOUT" => 7,
        "L4CON" => 8,
        "L6OK" => 9,
        "L6TOUT" => 10,
        "L6RSP" => 11,
        "L7TOUT" => 12,
        "L7RSP" => 13,
        "L7OK" => 15,
        "L7OKC" => 16,
        "L7STS" => 17,
        "PROCERR" => 18,
        "PROCTOUT" => 19,
        "PROCOK" => 20,
        _ => 1,
    }
}

/// `show servers state [BACKEND]`: HAProxy's version-1 format.
pub fn show_servers_state(p: &Process, args: &[&str], _: Level) -> String {
    let mut out = String::from("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n");
    for (be, st) in p.config.backends.iter().zip(p.state.backends.iter()) {
        if args.first().is_some_and(|name| *name != be.name) {
            continue;
        }
        for (_, srv, sst) in st.live(be) {
            let _ = writeln!(out, "{} {} {}", be.id, be.name, server_state_row(srv, sst));
        }
    }
    out
}

fn server_state_row(srv: &Server, sst: &ServerState) -> String {
    // SRV_ST_STOPPED 0, RUNNING 2, STOPPING 3; admin flags FMAINT 0x01, FDRAIN 0x08.
    let op = match sst.oper() {
        OperState::Down => 0,
        OperState::Up => 2,
        OperState::Stopping => 3,
    };
    // A `disabled` server keeps CMAINT (0x04) beside its live state, as HAProxy 2.6.12
    // shows it, enabled or not.
    let configured = if srv.disabled && !srv.dynamic {
        0x04
    } else {
        0
    };
    // SRV_ADMF_RMAINT: out of service until its name resolves.
    let resolution = if sst.unresolved() { 0x20 } else { 0 };
    let admin = configured
        | resolution
        | match sst.admin() {
            AdminState::Ready => 0,
            AdminState::Maint => 0x01,
            AdminState::Drain => 0x08,
        };
    let since = sst.last_change.lock().map_or(0, |t| t.elapsed().as_secs());
    let (status, result, health, state) = match &sst.check {
        Some(c) => {
            let last = c.last.lock().ok().and_then(|l| l.clone());
            // CHK_RES_FAILED 2, PASSED 3; CHK_ST_CONFIGURED|ENABLED = 6.
            let (status, result) = last.map_or((1, 0), |l| {
                (check_status_number(l.status), if l.passed { 3 } else { 2 })
            });
            // A disabled check (`disable health`) is configured (2), not enabled.
            let state = if c.paused.load(Ordering::Relaxed) {
                2
            } else {
                6
            };
            (status, result, c.health.load(Ordering::Relaxed), state)
        }
        // Unchecked: HAProxy shows its check as initialising (1), at its `rise` (0 for a
        // server that starts in maintenance, and so stopped).
        None if srv.disabled => (1, 0, 0, 0),
        None => (1, 0, srv.rise, 0),
    };
    // A `disabled` server's check is paused (CHK_ST_PAUSED, 0x08): for good without a
    // check, until it first leaves maintenance with one.
    let paused = match sst.check {
        None => configured != 0,
        Some(_) => sst.configured_maint(),
    };
    let state = if paused { state | 0x08 } else { state };
    let check_port = srv.check.as_ref().and_then(|c| c.port).unwrap_or(0);
    let check_addr = srv
        .check
        .as_ref()
        .and_then(|c| c.addr)
        .map_or("-".to_string(), |a| a.to_string());
    let (addr, port) = shown_addr(srv, sst.addr());
    let fqdn = sst.fqdn().unwrap_or_else(|| "-".into());
    let srvrecord = srv
        .resolve
        .as_ref()
        .filter(|r| r.srv)
        .map_or("-", |r| r.fqdn.as_str());
    format!(
        "{} {} {addr} {op} {admin} {} {} {since} {status} {result} {health} {state} 0 0 0 {fqdn} {port} {srvrecord} {} {check_port} {check_addr} - 0",
        srv.id,
        srv.name,
        sst.weight(),
        srv.weight,
        u8::from(srv.tls.is_some() && !sst.plain.load(Ordering::Relaxed)),
    )
}

/// A server's address and port as the CLI shows them: `-` and 0 for a unix socket server,
/// as HAProxy.
pub fn shown_addr(srv: &crate::conf::Server, live: std::net::SocketAddr) -> (String, u16) {
    match srv.unix {
        Some(_) => ("-".into(), 0),
        None => (live.ip().to_string(), live.port()),
    }
}

/// `shutdown sessions server B/S`: the requests in progress on the server end (logged as
/// killed, `K`), as HAProxy ends the streams attached to it. An HTTP/2 connection with a
/// stream on it ends whole (its connection is what the CLI can reach).
pub fn shutdown_sessions(p: &Process, args: &[&str], _: Level) -> String {
    let (b, s) = match find(p, args.first()) {
        Ok(found) => found,
        Err(e) => return e,
    };
    for t in p.threads.iter() {
        let sessions = t.sessions.lock().unwrap_or_else(|e| e.into_inner());
        for info in sessions.values() {
            let on_it = info.busy.load(Ordering::Relaxed)
                && info.backend.load(Ordering::Relaxed) == b
                && info.server.load(Ordering::Relaxed) == s;
            if on_it {
                info.kill.pull();
            }
        }
    }
    String::new()
}

/// `set maxconn server B/S N`: the server's limit of requests at once, from now on.
pub fn set_maxconn(p: &Process, args: &[&str], _: Level) -> String {
    let (b, s) = match find(p, args.first()) {
        Ok(found) => found,
        Err(e) => return e,
    };
    let Some(n) = args.get(1).and_then(|v| v.parse::<usize>().ok()) else {
        return "maxconn string empty or preceded by garbage".into();
    };
    if !crate::queue::set_limit(&p.state.backends[b].servers[s], n) {
        return "sluice: this server has no 'maxconn' in the configuration: its limit cannot be set at runtime.\n".into();
    }
    String::new()
}

/// `add server B/S ADDR [options]`: a server added at run time, as HAProxy 2.6 adds one.
/// It starts in maintenance (`enable server` puts it in service) with its checks paused
/// (`enable health`, `enable agent`), takes no `default-server` setting, and is lost at the
/// next reload unless the configuration names it too. Only a backend whose balancing takes
/// servers as they come (not `static-rr`, not a map-based hash) accepts one.
pub fn add_server(p: &Process, args: &[&str], level: Level) -> String {
    answer((|| {
        needs(level, Level::Admin)?;
        let (bi, name) = backend_of(p, args.first())?;
        let be = &p.config.backends[bi];
        if !takes_added_servers(be) {
            return Err(
                "Backend must use a dynamic load balancing to support dynamic servers.\n".into(),
            );
        }
        let mut words: Vec<String> = vec![name.to_string()];
        words.extend(args[1..].iter().map(|w| w.to_string()));
        let spec = crate::backend::parse_added(&words).map_err(|e| format!("{e}\n"))?;
        if spec.opts.h2 && be.stream.mode == crate::conf::stream::Mode::Tcp {
            return Err("MUX protocol is not usable for server.\n".into());
        }
        let _one_at_a_time = p.server_edits.lock().unwrap_or_else(|e| e.into_inner());
        let st = &p.state.backends[bi];
        if st.live(be).any(|(_, srv, _)| srv.name == name) {
            return Err("Already exists a server with the same name in backend.\n".into());
        }
        let (server, said) = added_server(p, bi, &spec)?;
        register(p, bi, &spec, server);
        Ok(format!("{said}New server registered.\n"))
    })())
}

/// The server `spec` describes, lowered for backend `bi` as the loader lowers the
/// configuration's (id, TLS connectors, `track`), in maintenance; and what the TLS
/// settings had that rustls does not do, one line each.
fn added_server(
    p: &Process,
    bi: usize,
    spec: &crate::conf::backend::ServerSpec,
) -> Result<(Server, String), String> {
    let (be, st) = (&p.config.backends[bi], &p.state.backends[bi]);
    let used = |id: u32| st.live(be).any(|(_, srv, _)| srv.id == id);
    let id = match spec.opts.id {
        Some(id) if used(id) => return Err(format!("Server id {id} is already used.\n")),
        Some(id) => id,
        // As HAProxy: the first id no server of the backend has.
        None => (1..).find(|&id| !used(id)).unwrap_or(u32::MAX),
    };
    let mut server = crate::backend::lower_server(spec, id, None, be.source);
    server.disabled = true;
    server.dynamic = true;
    server.track = match &spec.opts.track {
        Some(t) => Some(tracked(p, bi, t)?),
        None => None,
    };
    let mut skipped = Vec::new();
    let (tls, rule) = (&p.config.global.tls, be.check.uses_ssl());
    (server.tls, server.check_tls) =
        crate::tls::server_connectors(&spec.opts.tls, tls, spec.addr, rule, &mut skipped)
            .map_err(|e| format!("{e}\n"))?;
    let said = skipped.iter().map(|w| format!("{w}\n")).collect();
    Ok((server, said))
}

/// Appends `server` to backend `bi`: its state first (`conf::server_list`), in its
/// target's state if it tracks one and with its checks paused, then its configuration;
/// only then are its checks handed to a worker (which reads both).
fn register(p: &Process, bi: usize, spec: &crate::conf::backend::ServerSpec, server: Server) {
    let (be, st) = (&p.config.backends[bi], &p.state.backends[bi]);
    let at = st.add_server(&server, p.config.global.nbthread());
    let sst = &st.servers[at];
    if let Some((tb, ts)) = server.track {
        st.set_oper(at, p.state.backends[tb].servers[ts].oper());
    }
    let checks = [
        (sst.check.as_ref().map(|c| &c.paused), false),
        (sst.agent.as_ref().map(|a| &a.paused), true),
    ];
    for (paused, _) in &checks {
        if let Some(paused) = paused {
            paused.store(true, Ordering::Relaxed);
        }
    }
    be.speaks.add(spec);
    be.servers.push(server);
    for (paused, agent) in checks {
        if paused.is_some() {
            p.added_checks.push((bi, at, agent));
        }
    }
}

/// Whether a backend's balancing takes servers added at run time (HAProxy's dynamic
/// algorithms): not `static-rr`, and a hash only when it is consistent.
fn takes_added_servers(be: &crate::conf::Backend) -> bool {
    use crate::conf::balance::Algo;
    match be.algo {
        Algo::RoundRobin | Algo::LeastConn | Algo::First | Algo::Random(_) => true,
        Algo::StaticRr => false,
        _ => be.hash.consistent,
    }
}

/// The server `track` names (`S` of backend `b`, or `B/S`): one of the configuration's
/// with a check or an agent (HAProxy's conditions and words).
fn tracked(p: &Process, b: usize, spec: &str) -> Result<(usize, usize), String> {
    let (tb, sname) = match spec.rsplit_once('/') {
        Some((bname, sname)) => {
            let tb = p.config.backends.iter().position(|be| be.name == bname);
            let tb = tb.ok_or_else(|| {
                format!("unable to find required proxy '{bname}' for tracking.\n")
            })?;
            (tb, sname)
        }
        None => (b, spec),
    };
    let be = &p.config.backends[tb];
    let (ts, srv, _) = p.state.backends[tb]
        .live(be)
        .find(|(_, srv, _)| srv.name == sname)
        .ok_or_else(|| format!("unable to find required server '{sname}' for tracking.\n"))?;
    let whose = format!("{}/{}", be.name, srv.name);
    if srv.dynamic {
        return Err(format!(
            "unable to use {whose} for tracking as it is a dynamic server.\n"
        ));
    }
    if srv.check.is_none() && srv.agent.is_none() && srv.track.is_none() {
        return Err(format!(
            "unable to use {whose} for tracking as it does not have any check nor agent enabled.\n"
        ));
    }
    Ok((tb, ts))
}

/// `del server B/S`: deletes a server in maintenance with nothing left on it, as HAProxy
/// 2.6 does. Its idle pooled connections are closed first (HAProxy refuses while there are
/// any); one that another setting names (`track`, `use-server`) stays.
pub fn del_server(p: &Process, args: &[&str], level: Level) -> String {
    answer((|| {
        needs(level, Level::Admin)?;
        let _one_at_a_time = p.server_edits.lock().unwrap_or_else(|e| e.into_inner());
        let (b, s) = find(p, args.first())?;
        let (be, st) = (&p.config.backends[b], &p.state.backends[b]);
        let name = &be.servers[s].name;
        let tracked_by_one = p.config.backends.iter().enumerate().any(|(ob, obe)| {
            p.state.backends[ob]
                .live(obe)
                .any(|(_, srv, _)| srv.track == Some((b, s)))
        });
        let used = be.persist.use_server.iter().any(|(n, _)| &n.name == name);
        if tracked_by_one || used {
            return Err("This server cannot be removed at runtime due to other configuration elements pointing to it.\n".into());
        }
        let sst = &st.servers[s];
        if sst.admin() != AdminState::Maint {
            return Err("Only servers in maintenance mode can be deleted.\n".into());
        }
        drop(sst.idle.take_all());
        let busy = sst.in_flight.load(Ordering::Relaxed) > 0
            || sst.queue.waiting.load(Ordering::Relaxed) > 0;
        if busy {
            return Err("Server still has connections attached to it, cannot remove it.\n".into());
        }
        st.delete_server(s);
        Ok("Server deleted.\n".into())
    })())
}
