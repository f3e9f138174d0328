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
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Keyword, KwError, Scope};

use super::{fd_list, patterns, servers, tables};
use crate::conf::patterns::Family;

pub use crate::conf::cli::{CliAddr, Level, SocketConf};
use crate::conf::GlobalConf;
use crate::runtime::{Process, ThreadCtx};
use crate::stats;
use std::net::SocketAddr;
use std::os::fd::RawFd;

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "stats timeout",
        scope: Scope::GLOBAL,
        help: "stats timeout TIME: how long the CLI waits for a command (10s)",
        parse: |g, a| {
            g.stats_timeout = Some(crate::conf::time_arg(a)?);
            Ok(())
        },
    },
    Keyword {
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
            expose_fd: false,
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
                "expose-fd" if val == "listeners" => conf.expose_fd = true,
                "expose-fd" => return Err(KwError::bad(i + 2, val, "expects 'listeners'")),
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
                        "expects mode, level or expose-fd (other options are not supported yet)",
                    ))
                }
            }
            i += 2;
        }
        g.stats_sockets.push(conf);
        Ok(())
    },
},
];

/// A `stats socket` (or master CLI) address, in HAProxy's forms.
pub fn parse_addr(a: &str) -> Result<CliAddr, String> {
    // `*:PORT` and `:PORT` are every IPv4 address, as for `bind`.
    let tcp = |s: &str| {
        let wild = s
            .strip_prefix("*:")
            .or_else(|| s.strip_prefix(':'))
            .map(|port| format!("0.0.0.0:{port}"));
        wild.as_deref()
            .unwrap_or(s)
            .parse::<SocketAddr>()
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
        help: "report counters for each proxy and server [typed|json] [PROXY TYPE SID]",
        level: Level::User,
        run: show_stat,
    },
    Command {
        words: &["set", "ssl", "cert"],
        help: "set ssl cert FILE <<PEM: a new certificate and key for FILE, until committed",
        level: Level::Admin,
        run: |p, a, _| match a {
            [file, pem] => match crate::tls::set_cert(&p.config.certs, file, pem) {
                Ok(false) => format!("Transaction created for certificate {file}!\n"),
                Ok(true) => format!("Transaction updated for certificate {file}!\n"),
                Err(e) => format!("{e}\n"),
            },
            _ => "'set ssl cert' expects a filename and a certificate as a payload\n".into(),
        },
    },
    Command {
        words: &["commit", "ssl", "cert"],
        help: "commit ssl cert FILE: new handshakes use the certificate set for FILE",
        level: Level::Admin,
        run: |p, a, _| match a {
            [file] => match crate::tls::commit_cert(&p.config.certs, file) {
                Ok(()) => format!("Committing {file}\nSuccess!\n"),
                Err(e) => format!("{e}\n"),
            },
            _ => "'commit ssl cert' expects a filename\n".into(),
        },
    },
    Command {
        words: &["abort", "ssl", "cert"],
        help: "abort ssl cert FILE: drop the certificate set for FILE",
        level: Level::Admin,
        run: |p, a, _| match a {
            [file] if crate::tls::abort_cert(&p.config.certs, file) => {
                format!("Transaction aborted for certificate '{file}'!\n")
            }
            [file] => format!("No ongoing transaction! ({file})\n"),
            _ => "'abort ssl cert' expects a filename\n".into(),
        },
    },
    Command {
        words: &["show", "ssl", "cert"],
        help: "show ssl cert [[*]FILE]: the certificate files, or one (*: its transaction)",
        level: Level::Operator,
        run: |p, a, _| crate::tls::show_cert(&p.config.certs, a.first().copied()),
    },
    Command {
        words: &["show", "cache"],
        help: "show cache: the caches and their objects",
        level: Level::Admin,
        run: |p, _, _| {
            let now = crate::cache::unix_now();
            p.state.caches.iter().map(|c| c.show(now)).collect()
        },
    },
    Command {
        words: &["show", "table"],
        help: "show table [NAME [key K] [data.TYPE eq|ne|lt|le|gt|ge V]]: stick tables and their entries",
        level: Level::Operator,
        run: |s, a, _| tables::show(s, a),
    },
    Command {
        words: &["clear", "table"],
        help: "clear table NAME [key K | data.TYPE OP V...]: drop a stick table's entries (all, one, or those matching)",
        level: Level::Admin,
        run: |s, a, _| tables::clear(s, a),
    },
    Command {
        words: &["set", "table"],
        help: "set table NAME key K [data.TYPE V]...: create or update an entry",
        level: Level::Operator,
        run: |s, a, _| tables::set(s, a),
    },
    Command {
        words: &["show", "version"],
        help: "show the running process's version",
        level: Level::User,
        run: |_, _, _| format!("{}\n", env!("CARGO_PKG_VERSION")),
    },
    Command {
        words: &["show", "cli", "level"],
        help: "display the level of the current CLI session",
        level: Level::User,
        run: |_, _, level| format!("{}\n", level.name()),
    },
    Command {
        words: &["disable", "frontend"],
        help: "disable frontend NAME: suspend its listeners (new connections refused)",
        level: Level::Admin,
        run: super::frontends::disable,
    },
    Command {
        words: &["enable", "frontend"],
        help: "enable frontend NAME: listen again on a disabled frontend's sockets",
        level: Level::Admin,
        run: super::frontends::enable,
    },
    Command {
        words: &["show", "fd"],
        help: "show fd [N]: the process's file descriptors, one line each (kind, proxy or server, addresses, TCP state)",
        level: Level::Operator,
        run: fd_list::show_fd,
    },
    Command {
        words: &["show", "pools"],
        help: "report information about the memory pools usage",
        level: Level::User,
        run: |p, _, _| stats::info::pools(p),
    },
    Command {
        words: &["show", "sess"],
        help: "show sess [all|0xID]: one line per client connection (source, proxies, server, age, state), or a block each",
        level: Level::Operator,
        run: show_sess,
    },
    Command {
        words: &["set", "maxconn", "frontend"],
        help: "set maxconn frontend NAME N: change a frontend's maxconn (0: none)",
        level: Level::Admin,
        run: super::frontends::set_maxconn,
    },
    Command {
        words: &["set", "maxconn", "global"],
        help: "set maxconn global N: change the process's maxconn (at most its starting one)",
        level: Level::Admin,
        run: super::frontends::set_maxconn_global,
    },
    Command {
        words: &["set", "rate-limit"],
        help: "set rate-limit connections|sessions|ssl-sessions|http-compression global N: change a process-wide rate limit (0: none; kB/s for compression)",
        level: Level::Admin,
        run: super::frontends::set_rate_limit,
    },
    Command {
        words: &["set", "maxconn", "server"],
        help: "set maxconn server BACKEND/SERVER N: change a server's maxconn (one configured with it)",
        level: Level::Admin,
        run: super::servers::set_maxconn,
    },
    Command {
        words: &["shutdown", "session"],
        help: "shutdown session ID: end a client connection (an ID from 'show sess')",
        level: Level::Admin,
        run: shutdown_session,
    },
    Command {
        words: &["shutdown", "sessions", "server"],
        help: "shutdown sessions server BACKEND/SERVER: end the requests in progress on a server",
        level: Level::Admin,
        run: super::servers::shutdown_sessions,
    },
    Command {
        words: &["show", "errors"],
        help: "the last invalid request or response of each proxy [PROXY|-1] [request|response]",
        level: Level::Operator,
        run: show_errors,
    },
    Command {
        words: &["show", "env"],
        help: "dump the environment [NAME]",
        level: Level::Operator,
        run: show_env,
    },
    Command {
        words: &["show", "threads"],
        help: "show what each worker thread holds and does",
        level: Level::Operator,
        run: show_threads,
    },
    Command {
        words: &["clear", "counters"],
        help: "clear the maxima ([all]: every counter, admin only)",
        level: Level::Operator,
        run: clear_counters,
    },
    Command {
        words: &["show", "resolvers"],
        help: "dump counters from all resolvers section and associated name servers [NAME]",
        level: Level::User,
        run: |p, args, _| crate::dns::show(p, args.first().copied()).unwrap_or_else(|e| e),
    },
    Command {
        words: &["show", "peers"],
        help: "dump some information about all the peers or this peers section [dict|-] [SECTION]",
        level: Level::User,
        run: |p, args, _| crate::peers::show(p, args),
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
        words: &["add", "server"],
        help: "add server BACKEND/SERVER ADDR [options]: a new server, in maintenance",
        level: Level::Admin,
        run: servers::add_server,
    },
    Command {
        words: &["del", "server"],
        help: "del server BACKEND/SERVER: delete a server in maintenance",
        level: Level::Admin,
        run: servers::del_server,
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
    Command {
        words: &["show", "acl"],
        help: "show acl [[@VER] ACL]: the ACL pattern lists, or one list's entries",
        level: Level::User,
        run: |p, a, _| patterns::show(p, Family::Acl, a),
    },
    Command {
        words: &["show", "map"],
        help: "show map [[@VER] MAP]: the maps, or one map's entries",
        level: Level::User,
        run: |p, a, _| patterns::show(p, Family::Map, a),
    },
    Command {
        words: &["get", "acl"],
        help: "get acl ACL VALUE: the patterns of the list that VALUE matches, per use",
        level: Level::User,
        run: |p, a, _| patterns::get(p, Family::Acl, a),
    },
    Command {
        words: &["get", "map"],
        help: "get map MAP VALUE: the keys and values of the map that VALUE finds, per use",
        level: Level::User,
        run: |p, a, _| patterns::get(p, Family::Map, a),
    },
    Command {
        words: &["add", "acl"],
        help: "add acl [@VER] ACL PATTERN: add a pattern to an ACL list",
        level: Level::Operator,
        run: |p, a, _| patterns::add(p, Family::Acl, a),
    },
    Command {
        words: &["add", "map"],
        help: "add map [@VER] MAP KEY VALUE (or MAP <<PAYLOAD): add map entries",
        level: Level::Operator,
        run: |p, a, _| patterns::add(p, Family::Map, a),
    },
    Command {
        words: &["del", "acl"],
        help: "del acl ACL PATTERN|#REF: delete the entries of that pattern",
        level: Level::Operator,
        run: |p, a, _| patterns::del(p, Family::Acl, a),
    },
    Command {
        words: &["del", "map"],
        help: "del map MAP KEY|#REF: delete the entries of that key",
        level: Level::Operator,
        run: |p, a, _| patterns::del(p, Family::Map, a),
    },
    Command {
        words: &["set", "map"],
        help: "set map MAP KEY|#REF VALUE: change the value of a key's entries",
        level: Level::Operator,
        run: patterns::set_map,
    },
    Command {
        words: &["clear", "acl"],
        help: "clear acl [@VER] ACL: remove every entry (of that version)",
        level: Level::Operator,
        run: |p, a, _| patterns::clear(p, Family::Acl, a),
    },
    Command {
        words: &["clear", "map"],
        help: "clear map [@VER] MAP: remove every entry (of that version)",
        level: Level::Operator,
        run: |p, a, _| patterns::clear(p, Family::Map, a),
    },
    Command {
        words: &["prepare", "acl"],
        help: "prepare acl ACL: start a new version of an ACL list",
        level: Level::Operator,
        run: |p, a, _| patterns::prepare(p, Family::Acl, a),
    },
    Command {
        words: &["prepare", "map"],
        help: "prepare map MAP: start a new version of a map",
        level: Level::Operator,
        run: |p, a, _| patterns::prepare(p, Family::Map, a),
    },
    Command {
        words: &["commit", "acl"],
        help: "commit acl @VER ACL: make that version the one matched",
        level: Level::Operator,
        run: |p, a, _| patterns::commit(p, Family::Acl, a),
    },
    Command {
        words: &["commit", "map"],
        help: "commit map @VER MAP: make that version the one used",
        level: Level::Operator,
        run: |p, a, _| patterns::commit(p, Family::Map, a),
    },
];

fn help() -> String {
    let mut s = String::from("The following commands are valid at this level:\n");
    for c in COMMANDS {
        let _ = writeln!(s, "  {:<24} : {}", c.words.join(" "), c.help);
    }
    s
}

/// The commands of a line, at each `;` that no backslash escapes (the backslash stays,
/// for [`split_words`] to read), as HAProxy splits them.
fn split_commands(line: &str) -> Vec<&str> {
    let mut cmds = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ';' => {
                cmds.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cmds.push(&line[start..]);
    cmds
}

/// A command line's words as HAProxy splits them: at spaces and tabs not preceded by a
/// backslash; then a backslash keeps the character after it (`\\` is one backslash).
fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ' ' | '\t' | '\r' => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Runs one command line and returns the answer (always ending with an empty line).
pub fn execute(shared: &Process, line: &str, level: Level) -> String {
    // A payload (`<<` and the lines after it) is the command's last argument, whole.
    let (line, payload) = match line.split_once('\n') {
        Some((head, payload)) => (head, Some(payload)),
        None => (line, None),
    };
    let owned = split_words(line);
    let mut words: Vec<&str> = owned.iter().map(String::as_str).collect();
    words.extend(payload);
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

/// What a CLI socket answers: the proxy's own commands, or a master process's.
pub trait Answer: Send + Sync + 'static {
    /// Runs one command; the answer ends with an empty line.
    fn command(&self, cmd: &str) -> String;
    /// `_getsocks` on a unix socket: a replacing process asks for the listening sockets.
    fn getsocks(&self, conn: &UnixStream) {
        let _ = (&*conn).write_all(b"Permission denied\n");
    }
}

/// A `stats socket` of the proxy.
struct ProcessCli {
    process: Arc<Process>,
    conf: SocketConf,
}

impl Answer for ProcessCli {
    fn command(&self, cmd: &str) -> String {
        execute(&self.process, cmd, self.conf.level)
    }

    fn getsocks(&self, conn: &UnixStream) {
        hand_over(&self.process, &self.conf, conn)
    }
}

/// Serves a `stats socket` until the process exits (a thread of its own).
pub fn serve(process: Arc<Process>, conf: SocketConf, listener: CliListener) {
    let timeout = process
        .config
        .global
        .stats_timeout
        .unwrap_or(Duration::from_secs(10));
    serve_with(listener, timeout, Arc::new(ProcessCli { process, conf }));
}

/// Serves CLI connections on `listener`, each on a thread of its own (an interactive session
/// must not hold the others up), with `timeout` for each command line.
pub fn serve_with(listener: CliListener, timeout: Duration, answer: Arc<dyn Answer>) {
    let timeout = Some(timeout.max(Duration::from_millis(1)));
    let talk = |f: Box<dyn FnOnce() + Send>| {
        if let Err(e) = std::thread::Builder::new()
            .name("sluice-cli-conn".into())
            .spawn(f)
        {
            say!("sluice: cannot serve a CLI connection: {e}");
        }
    };
    match listener {
        CliListener::Unix(l) => {
            for conn in l.incoming().flatten() {
                let _ = conn.set_read_timeout(timeout);
                let answer = answer.clone();
                talk(Box::new(move || converse(&*answer, &conn, Some(&conn))));
            }
        }
        CliListener::Tcp(l) => {
            for conn in l.incoming().flatten() {
                let _ = conn.set_read_timeout(timeout);
                let answer = answer.clone();
                talk(Box::new(move || converse(&*answer, &conn, None)));
            }
        }
    }
}

/// One CLI connection, as HAProxy's: a line of commands separated by `;`, each answered and
/// its answer ended by an empty line; then the connection closes, unless `prompt` made the
/// session interactive (a `> ` prompt after each answer, until `quit`, the peer's close or
/// the timeout). A first line `_getsocks` on a unix socket asks for the listeners.
fn converse<S>(answer: &dyn Answer, conn: &S, unix: Option<&UnixStream>)
where
    for<'a> &'a S: std::io::Read + Write,
{
    let mut reader = BufReader::new(conn);
    let mut interactive = false;
    let mut first = true;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if std::mem::take(&mut first) && line.trim() == super::handover::REQUEST {
            if let Some(u) = unix {
                answer.getsocks(u);
            }
            return;
        }
        // `CMD <<`: the lines that follow, up to an empty one, are the command's payload.
        if let Some(head) = line.trim_end().strip_suffix("<<") {
            let mut payload = String::new();
            loop {
                let mut l = String::new();
                match reader.read_line(&mut l) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if l.trim().is_empty() => break,
                    Ok(_) => payload.push_str(&l),
                }
            }
            line = format!("{}\n{payload}", head.trim_end());
            let out = answer.command(&line);
            let mut w = conn;
            let prompt = if interactive { "> " } else { "" };
            if w.write_all(format!("{out}{prompt}").as_bytes()).is_err() || !interactive {
                return;
            }
            continue;
        }
        let mut out = String::new();
        let mut quit = false;
        for cmd in split_commands(&line).iter().map(|c| c.trim()) {
            match cmd {
                "" => {}
                "prompt" => interactive = !interactive,
                "quit" => {
                    quit = true;
                    break;
                }
                cmd => out.push_str(&answer.command(cmd)),
            }
        }
        if interactive && !quit {
            out.push_str("> ");
        }
        let mut w = conn;
        if w.write_all(out.as_bytes()).is_err() || quit || !interactive {
            return;
        }
    }
}

/// `_getsocks` from a process replacing this one: the listening sockets, when this socket
/// exposes them.
fn hand_over(process: &Process, conf: &SocketConf, conn: &UnixStream) {
    if !conf.expose_fd || conf.level < Level::Admin {
        let _ = (&*conn)
            .write_all(b"Permission denied (needs 'expose-fd listeners' and level admin)\n");
        return;
    }
    let kept = process
        .handover
        .sockets
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let list: Vec<(String, String, std::os::fd::RawFd)> = kept
        .iter()
        .map(|(fe, addr, l)| (fe.clone(), addr.clone(), std::os::fd::AsRawFd::as_raw_fd(l)))
        .collect();
    match super::handover::send(conn, &list) {
        Ok(()) => process.handover.taken.store(true, Ordering::Relaxed),
        Err(e) => say!("sluice: cannot hand the listeners over: {e}"),
    }
}

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
            // Inherited without close-on-exec: processes started from here must not get it.
            // SAFETY: fcntl on a descriptor this process now owns.
            unsafe { libc::fcntl(*fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            Ok(CliListener::Tcp(l))
        }
    }
}

/// `show info [typed|json]`.
fn show_info(s: &Process, args: &[&str], _: Level) -> String {
    if args.contains(&"json") {
        stats::info::json(s)
    } else if args.contains(&"typed") {
        stats::info::typed(s)
    } else {
        stats::info::text(s)
    }
}

/// `show sess`: one line per client connection, HAProxy's leading fields (`proto`, `src`,
/// `fe`, `be`, `srv`, `age`), then the worker, the requests served and whether one is in
/// progress. `show sess all` (and `show sess 0xID`, one of them) gives each its block, in
/// the layout of HAProxy's, with what sluice knows of a connection (HAProxy's internal
/// flags, timers and buffer states have no equivalent here).
fn show_sess(s: &Process, args: &[&str], _: Level) -> String {
    let mut all: Vec<(usize, std::sync::Arc<crate::runtime::SessionInfo>)> = Vec::new();
    for t in s.threads.iter() {
        let sessions = t.sessions.lock().unwrap_or_else(|e| e.into_inner());
        all.extend(sessions.values().map(|i| (t.id, i.clone())));
    }
    all.sort_by_key(|(_, i)| i.id);
    // As HAProxy reads the argument (`strtoul`): what is no number lists them all, one line
    // each.
    let one = match args.first() {
        Some(&"all") => Some(None),
        Some(id) => id
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .map(Some),
        None => None,
    };
    let mut out = String::new();
    for (tid, i) in all {
        match one {
            None => session_line(s, &mut out, tid, &i),
            Some(Some(id)) if id != i.id => {}
            Some(_) => session_block(s, &mut out, tid, &i),
        }
    }
    out
}

fn session_line(s: &Process, out: &mut String, tid: usize, i: &crate::runtime::SessionInfo) {
    let (be, srv) = session_route(s, i);
    let _ = writeln!(
        out,
        "0x{:x}: proto=tcp{} src={} fe={} be={} srv={} age={}s thread={} reqs={} state={}",
        i.id,
        if i.peer.is_ipv4() { "v4" } else { "v6" },
        i.peer,
        s.config.frontends[i.frontend].name,
        be.map_or("<NONE>", |b| b.name.as_str()),
        srv.map_or("<NONE>", |v| v.name.as_str()),
        i.started.elapsed().as_secs(),
        tid + 1,
        i.requests.load(Ordering::Relaxed),
        session_state(i)
    );
}

/// HAProxy's block for one stream, the lines sluice can fill.
fn session_block(s: &Process, out: &mut String, tid: usize, i: &crate::runtime::SessionInfo) {
    let fe = &s.config.frontends[i.frontend];
    let age = i.started.elapsed();
    let accepted = std::time::SystemTime::now() - age;
    let since = accepted
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let date =
        crate::log::strftime(since.as_secs() as i64, "%d/%b/%Y:%H:%M:%S", true).unwrap_or_default();
    let bind = fe.listen.binds.get(i.listener);
    let (be, srv) = session_route(s, i);
    let _ = writeln!(
        out,
        "0x{:x}: [{date}.{:06}] id={} proto=tcpv{} source={}",
        i.id,
        since.subsec_micros(),
        i.id,
        if i.peer.is_ipv4() { 4 } else { 6 },
        i.peer
    );
    let _ = writeln!(
        out,
        "  frontend={} (id={} mode={}), listener={} (id={})",
        fe.name,
        fe.id,
        crate::stats::mode_name(fe.stream.mode),
        bind.and_then(|b| b.name.as_deref()).unwrap_or("?"),
        i.listener + 1
    );
    let _ = match be {
        Some(b) => writeln!(
            out,
            "  backend={} (id={} mode={})",
            b.name,
            b.id,
            crate::stats::mode_name(b.stream.mode)
        ),
        None => writeln!(out, "  backend=<NONE> (id=-1 mode=-)"),
    };
    let _ = match srv {
        Some(v) => writeln!(out, "  server={} (id={})", v.name, v.id),
        None => writeln!(out, "  server=<NONE> (id=-1)"),
    };
    let _ = writeln!(
        out,
        "  thread={} age={}s requests={} state={}",
        tid + 1,
        age.as_secs(),
        i.requests.load(Ordering::Relaxed),
        session_state(i)
    );
}

/// The backend and server of the request in progress.
fn session_route<'p>(
    s: &'p Process,
    i: &crate::runtime::SessionInfo,
) -> (
    Option<&'p crate::conf::Backend>,
    Option<&'p crate::conf::Server>,
) {
    let be = s.config.backends.get(i.backend.load(Ordering::Relaxed));
    let srv = be.and_then(|b| b.servers.get(i.server.load(Ordering::Relaxed)));
    (be, srv)
}

fn session_state(i: &crate::runtime::SessionInfo) -> &'static str {
    if i.busy.load(Ordering::Relaxed) {
        "active"
    } else {
        "idle"
    }
}

/// `shutdown session ID`: the connection `show sess` lists as `0xID` ends, as HAProxy
/// ends a stream (a request in progress is logged as killed, `K`).
fn shutdown_session(s: &Process, args: &[&str], _: Level) -> String {
    let Some(word) = args.first() else {
        return "Session pointer expected (use 'show sess').\n".into();
    };
    let id = word
        .strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok());
    let found = id.and_then(|id| {
        s.threads.iter().find_map(|t| {
            let sessions = t.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.get(&id).cloned()
        })
    });
    match found {
        Some(info) => {
            info.kill.pull();
            String::new()
        }
        None => "No such session (use 'show sess').\n".into(),
    }
}

/// `show errors [PROXY|-1] [request|response]`.
fn show_errors(s: &Process, args: &[&str], _: Level) -> String {
    let mut which = stats::errors::Which {
        proxy: None,
        requests: true,
        responses: true,
    };
    for a in args {
        match *a {
            "request" => which.responses = false,
            "response" => which.requests = false,
            "-1" => {}
            px => which.proxy = Some(px.to_string()),
        }
    }
    stats::errors::render(s, &which)
}

/// `show env [NAME]`: the process's environment, `NAME=value` per line.
fn show_env(p: &Process, args: &[&str], _: Level) -> String {
    // The environment as the configuration left it (`setenv` and its kin).
    let env = &p.config.global.env;
    let mut out = String::new();
    match args {
        [] => {
            for (k, v) in env.vars() {
                let _ = writeln!(out, "{k}={v}");
            }
        }
        [name] => match env.get(name) {
            Some(v) => {
                let _ = writeln!(out, "{name}={v}");
            }
            None => out.push_str("Variable not found\n"),
        },
        _ => out.push_str("Usage: show env [NAME]\n"),
    }
    out
}

/// `show threads`: what each worker holds and does now.
fn show_threads(s: &Process, _: &[&str], _: Level) -> String {
    let mut out = String::new();
    for t in s.threads.iter() {
        let _ = writeln!(
            out,
            "Thread {}: load={} conns={} checks_homed={} checks_awake={} inbox={} busy_pct={} loops={} requests={}",
            t.id + 1,
            t.load(),
            t.active.load(Ordering::Relaxed),
            t.checks_homed.load(Ordering::Relaxed),
            t.checks_awake.load(Ordering::Relaxed),
            t.inbox_pending.load(Ordering::Relaxed),
            t.busy_pct.load(Ordering::Relaxed),
            t.counters.loops.get(),
            t.counters.requests.get(),
        );
    }
    out
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
        ("mails_sent", |t| t.counters.mails_sent.get()),
        ("mails_failed", |t| t.counters.mails_failed.get()),
        ("h2_queued", |t| {
            t.counters.h2_queued.load(Ordering::Relaxed)
        }),
        ("quic_conns", |t| t.counters.quic_conns.get()),
        ("quic_retries", |t| t.counters.quic_retries.get()),
        ("quic_floods", |t| t.counters.quic_floods.get()),
        ("quic_malformed", |t| {
            t.counters.quic.malformed.load(Ordering::Relaxed)
        }),
        ("quic_forwarded", |t| {
            t.counters.quic.forwarded.load(Ordering::Relaxed)
        }),
        ("quic_fwd_lost", |t| {
            t.counters.quic.lost.load(Ordering::Relaxed)
        }),
        ("quic_fwd_held", |t| {
            t.counters.quic.held.load(Ordering::Relaxed)
        }),
        ("h3_queued", |t| {
            t.counters.h3_queued.load(Ordering::Relaxed)
        }),
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
        for (_, srv, sst) in st.live(be) {
            let p = &sst.idle.stats;
            let (addr, port) = super::servers::shown_addr(srv, sst.addr());
            let get = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed);
            let idle = get(&p.idle_cur);
            let safe = get(&p.safe_cur).min(idle);
            let per: Vec<String> = p.per_thread.iter().map(|t| get(t).to_string()).collect();
            let _ = writeln!(
                out,
                "{}/{} {}/{} {addr} {port} - {} {} {} {} {} {} {} {} {}",
                be.name,
                srv.name,
                be.id,
                srv.id,
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
/// `show stat [typed|json] [desc]` and `show stat {PROXY|IID} {TYPE} {SID|-1} [typed|json]`.
fn show_stat(s: &Process, args: &[&str], _: Level) -> String {
    let mut format = "csv";
    let mut rest = Vec::new();
    for a in args {
        match *a {
            "typed" | "json" => format = a,
            // Field descriptions are not kept; the values are the same either way.
            "desc" => {}
            a => rest.push(a),
        }
    }
    let filter = match rest.as_slice() {
        [] => stats::Filter::default(),
        [px, ty, sid] => {
            let (Ok(types), Ok(sid)) = (ty.parse::<i64>(), sid.parse::<i64>()) else {
                return "Require 'backend', 'frontend' or 'proxy' id, a type mask and a server id.\n".into();
            };
            stats::Filter {
                proxy: (*px != "-1").then(|| px.to_string()),
                types: (types != -1).then_some(types as u32),
                sid: (sid != -1).then_some(sid as u32),
            }
        }
        _ => return "Usage: show stat [typed|json] | show stat {PROXY|IID} {TYPE} {SID|-1} [typed|json]\n".into(),
    };
    let rows = stats::collect(s, &filter);
    match format {
        "typed" => stats::typed(&rows),
        "json" => stats::json(&rows),
        _ => stats::csv(&rows),
    }
}

/// `clear counters [all]`: maxima, or every counter.
fn clear_counters(s: &Process, args: &[&str], level: Level) -> String {
    match args {
        [] => {
            stats::clear(s, false);
            String::new()
        }
        ["all"] if level >= Level::Admin => {
            stats::clear(s, true);
            String::new()
        }
        ["all"] => "Permission denied\n".into(),
        _ => "Usage: clear counters [all]\n".into(),
    }
}
