//! The CLI's frontend commands, in HAProxy 2.6's words: `disable frontend NAME` suspends
//! its listening sockets as HAProxy does (new connections are refused, the sockets stay
//! bound, `show stat` says `PAUSED`) and `enable frontend NAME` listens again; `set maxconn
//! frontend NAME N` and `set maxconn global N` change the connection limits (connections
//! waiting for a place get in at once when they rise).

use std::sync::atomic::Ordering;

use crate::conf::cli::Level;
use crate::runtime::Process;
use crate::worker::listener;

/// The frontend named by the command's first word.
fn find(p: &Process, args: &[&str]) -> Result<usize, String> {
    let name = args.first().ok_or("A frontend name is expected.\n")?;
    p.config
        .frontends
        .iter()
        .position(|f| f.name == *name)
        .ok_or_else(|| "No such frontend.\n".to_string())
}

pub fn disable(p: &Process, args: &[&str], _: Level) -> String {
    let fi = match find(p, args) {
        Ok(fi) => fi,
        Err(e) => return e,
    };
    if p.stopping.load(Ordering::Relaxed) {
        return "Frontend was already shut down.\n".into();
    }
    let paused = &p.state.frontends[fi].paused;
    if paused.swap(true, Ordering::Relaxed) {
        return "All sockets are already disabled.\n".into();
    }
    each_socket(p, fi, |sock, _| listener::suspend(sock));
    String::new()
}

pub fn enable(p: &Process, args: &[&str], _: Level) -> String {
    let fi = match find(p, args) {
        Ok(fi) => fi,
        Err(e) => return e,
    };
    if p.stopping.load(Ordering::Relaxed) {
        return "Frontend was previously shut down, cannot enable.\n".into();
    }
    if !p.state.frontends[fi].paused.load(Ordering::Relaxed) {
        return "All sockets are already enabled.\n".into();
    }
    each_socket(p, fi, listener::resume);
    p.state.frontends[fi].paused.store(false, Ordering::Relaxed);
    // The accept loops waiting on a pause wake up.
    p.resumed.notify_waiters();
    String::new()
}

/// Applies `f` to each listening TCP socket of frontend `fi` (its shards included), with
/// its backlog. A unix socket is not suspended (HAProxy cannot either): its accept loops
/// just stop taking connections.
fn each_socket(p: &Process, fi: usize, f: impl Fn(&socket2::Socket, usize) -> std::io::Result<()>) {
    let fe = &p.config.frontends[fi];
    let sockets = p.handover.sockets.lock().unwrap_or_else(|e| e.into_inner());
    for (name, addr, sock) in sockets.iter().filter(|(name, ..)| *name == fe.name) {
        let Some(bind) = fe.listen.binds.iter().find(|b| b.spec.to_string() == *addr) else {
            continue;
        };
        if !matches!(bind.spec, listener::BindSpec::Addr(_)) {
            continue;
        }
        let backlog = listener::backlog_of(fe, bind, p.admission.global_limit());
        if let Err(e) = f(sock, backlog) {
            say!("sluice: frontend {name}: listener {addr}: {e}");
        }
    }
}

/// `set maxconn frontend NAME N` (0: no limit).
pub fn set_maxconn(p: &Process, args: &[&str], _: Level) -> String {
    let fi = match find(p, args) {
        Ok(fi) => fi,
        Err(e) => return e,
    };
    let Some(v) = args.get(1) else {
        return "Integer value expected.\n".into();
    };
    // As HAProxy reads it (`atoi`): a value that is no number is 0.
    match v.parse::<i64>().unwrap_or(0) {
        n if n < 0 => "Value out of range.\n".into(),
        n => {
            p.admission.set_frontend_limit(fi, n as usize);
            String::new()
        }
    }
}

/// `set maxconn global N`: at most the limit the process started with; 0 (or less) is
/// that limit.
pub fn set_maxconn_global(p: &Process, args: &[&str], _: Level) -> String {
    let Some(v) = args.first() else {
        return "Expects an integer value.\n".into();
    };
    let hard = p.admission.hard_limit;
    match v.parse::<i64>().unwrap_or(0) {
        n if n > hard as i64 => "Value out of range.\n".into(),
        n => {
            p.admission
                .set_global_limit(if n <= 0 { hard } else { n as usize });
            String::new()
        }
    }
}

/// `set rate-limit connections|sessions|ssl-sessions|http-compression global N`: the
/// process's `maxconnrate`, `maxsessrate`, `maxsslrate` or `maxcomprate` (in kB/s); 0 lifts
/// it. The value is read as HAProxy's `atoi` reads it (leading digits, else 0).
pub fn set_rate_limit(p: &Process, args: &[&str], _: Level) -> String {
    use crate::runtime::GlobalRate;
    let which = match args {
        [kind, "global", ..] => match *kind {
            "connections" => Some(GlobalRate::Conn),
            "sessions" => Some(GlobalRate::Sess),
            "ssl-sessions" => Some(GlobalRate::Ssl),
            "http-compression" => None,
            _ => return RATE_LIMIT_USAGE.into(),
        },
        _ => return RATE_LIMIT_USAGE.into(),
    };
    let Some(v) = args.get(2) else {
        return "Expects an integer value.\n".into();
    };
    let n = atoi(v);
    let Ok(n) = u32::try_from(n) else {
        return "Value out of range.\n".into();
    };
    match which {
        Some(rate) => p.admission.rates.set_global(rate, n),
        None => p
            .compress_limit
            .store(u64::from(n) * 1024, Ordering::Relaxed),
    }
    String::new()
}

const RATE_LIMIT_USAGE: &str = "'set rate-limit' only supports :\n   - 'connections global' to set the per-process maximum connection rate\n   - 'sessions global' to set the per-process maximum session rate\n   - 'ssl-sessions global' to set the per-process maximum SSL session rate\n   - 'http-compression global' to set the per-process maximum compression speed in kB/s\n";

/// C's `atoi`: an optional sign and the leading digits; 0 when there are none.
fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (sign, digits) = match s.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    sign * digits[..end]
        .parse::<i64>()
        .unwrap_or(0)
        .min(i64::from(i32::MAX))
}
